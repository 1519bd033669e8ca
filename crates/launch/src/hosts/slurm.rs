//! Slurm's side: hostlist expressions, task counts and the allocation in the environment.

use super::{check_name, total_slots, HostSlots, HostsError, MAX_HOSTS};

/// Splits at commas outside brackets.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A piece of a hostlist item: literal text, or the numbers of one bracket.
enum Piece<'a> {
    Text(&'a str),
    Numbers(Vec<String>),
}

/// The numbers of one bracket's content (`1-3,7`, `01-10`), zero-padded to the width of each
/// range's lower bound as written.
fn bracket_numbers(content: &str, budget: usize) -> Result<Vec<String>, String> {
    let mut numbers = Vec::new();
    for range in content.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let parse = |s: &str| -> Result<u64, String> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{range:?} in brackets is not N or N-M"));
            }
            s.parse()
                .map_err(|_| format!("{s:?} in brackets is too large"))
        };
        let (low, high) = (parse(lo)?, parse(hi)?);
        if low > high {
            return Err(format!("range {range:?} runs backwards"));
        }
        if high - low >= (budget - numbers.len().min(budget)) as u64 {
            return Err(format!("expands to more than {MAX_HOSTS} hosts"));
        }
        let width = lo.len();
        numbers.extend((low..=high).map(|n| format!("{n:0width$}")));
    }
    Ok(numbers)
}

/// Expands a Slurm hostlist expression into host names, in order.
///
/// `node[1-3,7]` is node1, node2, node3, node7; `n[01-10]` keeps the zero padding (n01 … n10);
/// brackets in one name multiply, leftmost slowest (`a[1-2]-b[3-4]` is a1-b3, a1-b4, a2-b3,
/// a2-b4); commas outside brackets separate names (`x,y[1-2]`).
pub fn expand_hostlist(text: &str) -> Result<Vec<String>, HostsError> {
    let fail = |problem: String| HostsError::Hostlist {
        text: text.into(),
        problem,
    };
    if text.trim().is_empty() {
        return Err(fail("names no hosts".into()));
    }
    let mut hosts = Vec::new();
    for item in split_top_level(text.trim()) {
        let item = item.trim();
        if item.is_empty() {
            return Err(fail("empty name between commas".into()));
        }
        let mut pieces = Vec::new();
        let mut rest = item;
        while !rest.is_empty() {
            match rest.find(['[', ']']) {
                None => {
                    pieces.push(Piece::Text(rest));
                    rest = "";
                }
                Some(i) if rest.as_bytes()[i] == b']' => {
                    return Err(fail(format!("']' without '[' in {item:?}")));
                }
                Some(i) => {
                    if i > 0 {
                        pieces.push(Piece::Text(&rest[..i]));
                    }
                    let after = &rest[i + 1..];
                    let close = after
                        .find(']')
                        .ok_or_else(|| fail(format!("'[' without ']' in {item:?}")))?;
                    let content = &after[..close];
                    if content.contains('[') {
                        return Err(fail(format!("nested '[' in {item:?}")));
                    }
                    let budget = MAX_HOSTS - hosts.len();
                    pieces.push(Piece::Numbers(
                        bracket_numbers(content, budget).map_err(fail)?,
                    ));
                    rest = &after[close + 1..];
                }
            }
        }
        // The product of the brackets, leftmost slowest.
        let mut names = vec![String::new()];
        for piece in &pieces {
            match piece {
                Piece::Text(t) => names.iter_mut().for_each(|n| n.push_str(t)),
                Piece::Numbers(numbers) => {
                    if names.len().saturating_mul(numbers.len()) > MAX_HOSTS - hosts.len() {
                        return Err(fail(format!("expands to more than {MAX_HOSTS} hosts")));
                    }
                    names = names
                        .iter()
                        .flat_map(|n| numbers.iter().map(move |x| format!("{n}{x}")))
                        .collect();
                }
            }
        }
        for name in &names {
            check_name(name).map_err(|e| fail(e.to_string()))?;
        }
        hosts.extend(names);
    }
    Ok(hosts)
}

/// Parses `SLURM_TASKS_PER_NODE` (also `SLURM_JOB_CPUS_PER_NODE`): `2(x3),1` is 2, 2, 2, 1.
pub fn parse_tasks_per_node(text: &str) -> Result<Vec<u32>, HostsError> {
    let fail = |problem: String| HostsError::TasksPerNode {
        text: text.into(),
        problem,
    };
    let number = |s: &str| -> Result<u32, HostsError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(fail(format!("{s:?} is not a whole number")));
        }
        match s.parse::<u32>() {
            Ok(0) => Err(fail("a count of 0".into())),
            Ok(n) => Ok(n),
            Err(_) => Err(fail(format!("{s} does not fit 32 bits"))),
        }
    };
    if text.trim().is_empty() {
        return Err(fail("no counts".into()));
    }
    let mut counts = Vec::new();
    for item in text.trim().split(',') {
        let item = item.trim();
        let (count, repeat) = match item.split_once('(') {
            Some((count, tail)) => {
                let repeat = tail
                    .strip_prefix('x')
                    .and_then(|t| t.strip_suffix(')'))
                    .ok_or_else(|| fail(format!("{item:?} is not N or N(xM)")))?;
                (number(count)?, number(repeat)?)
            }
            None => (number(item)?, 1),
        };
        if repeat as usize > MAX_HOSTS - counts.len() {
            return Err(fail(format!("more than {MAX_HOSTS} nodes")));
        }
        counts.extend(std::iter::repeat_n(count, repeat as usize));
    }
    Ok(counts)
}

/// The Slurm allocation this process runs in (`salloc`, `sbatch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmAllocation {
    /// The allocation's nodes in Slurm's order, each with its task count as slots.
    pub nodes: Vec<HostSlots>,
    /// `SLURM_NTASKS` (or `SLURM_NPROCS`), when set.
    pub ntasks: Option<u32>,
}

impl SlurmAllocation {
    /// The allocation named by the environment (`lookup` reads a variable), or `None` when
    /// neither `SLURM_JOB_NODELIST` nor `SLURM_NODELIST` is set.
    ///
    /// Task counts come from `SLURM_TASKS_PER_NODE`, else `SLURM_JOB_CPUS_PER_NODE`, else 1 per
    /// node; a set variable that does not parse, or counts for a different number of nodes,
    /// is an error.
    pub fn from_env(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<SlurmAllocation>, HostsError> {
        let Some((nodes_var, list)) = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"]
            .into_iter()
            .find_map(|var| lookup(var).map(|value| (var, value)))
        else {
            return Ok(None);
        };
        let names = expand_hostlist(&list).map_err(|e| HostsError::BadVariable {
            var: nodes_var,
            value: list.clone(),
            problem: e.to_string(),
        })?;
        let counts = ["SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"]
            .into_iter()
            .find_map(|var| lookup(var).map(|value| (var, value)));
        let counts = match counts {
            Some((var, value)) => {
                let counts = parse_tasks_per_node(&value).map_err(|e| HostsError::BadVariable {
                    var,
                    value: value.clone(),
                    problem: e.to_string(),
                })?;
                if counts.len() != names.len() {
                    return Err(HostsError::NodeTaskMismatch {
                        nodes_var,
                        nodes: names.len(),
                        tasks_var: var,
                        tasks: counts.len(),
                    });
                }
                counts
            }
            None => vec![1; names.len()],
        };
        let ntasks = ["SLURM_NTASKS", "SLURM_NPROCS"]
            .into_iter()
            .find_map(|var| lookup(var).map(|value| (var, value)));
        let ntasks = match ntasks {
            Some((var, value)) => match value.trim().parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    return Err(HostsError::BadVariable {
                        var,
                        value,
                        problem: "not a whole number of tasks from 1 to 2^32-1".into(),
                    })
                }
            },
            None => None,
        };
        let nodes = names
            .into_iter()
            .zip(counts)
            .map(|(name, slots)| HostSlots::new(name, slots))
            .collect();
        Ok(Some(SlurmAllocation { nodes, ntasks }))
    }

    /// The job size when `-n` is not given: `SLURM_NTASKS`, else the sum of the task counts.
    pub fn default_np(&self) -> Result<u32, HostsError> {
        match self.ntasks {
            Some(n) => Ok(n),
            None => total_slots(&self.nodes),
        }
    }
}
