//! Where ranks go: host lists, hostfiles, Slurm allocations and rank placement.
//!
//! Pure logic, no I/O: the caller reads the hostfile and the environment and passes text and a
//! lookup function in. What is read, and how it is understood:
//!
//! - **`--hosts`** (MPICH's `-hosts`, Open MPI's `--host`): `a,b` or `a:2,b:2`: host names
//!   separated by commas, each with an optional slot count ([`parse_hosts_arg`]).
//! - **Hostfiles** ([`parse_hostfile`]), one host a line, the format detected per line: MPICH's
//!   `node1` / `node1:4`, or Open MPI's `node1 slots=4 max_slots=8` (`max-slots` too). `#`
//!   starts a comment; blank lines are skipped.
//! - **Slurm** ([`SlurmAllocation::from_env`]): nodes from `SLURM_JOB_NODELIST` in hostlist
//!   syntax ([`expand_hostlist`]: `node[1-3,7]`, `n[01-10]` keeps the zero padding,
//!   `a[1-2]-b[3-4]`, `x,y[1-2]`), tasks per node from `SLURM_TASKS_PER_NODE`
//!   ([`parse_tasks_per_node`]: `2(x3),1`), the job's task count from `SLURM_NTASKS`.
//!
//! A host without a count has **1 slot** (as with MPICH's hydra and Open MPI's `--host`). A
//! host named more than once is one host whose slots are the sum (as Open MPI's hostfiles);
//! host names are compared exactly.
//!
//! # Placement
//!
//! [`place`] gives each host its ranks, in the order the hosts first appear. `--ppn N` sets
//! every host's slots to N (hydra's `-ppn`). Ranks are handed out in **passes**; in each pass a
//! host takes up to its slots:
//!
//! - [`Mapping::Block`] (the default, as hydra; Open MPI's `--map-by slot`): host by host, each
//!   filled with consecutive ranks;
//! - [`Mapping::Cyclic`] (Open MPI's `--map-by node`, hydra's `-rr`): one rank per host in turn,
//!   skipping hosts whose slots in this pass are taken.
//!
//! When the job has more ranks than the slots, a new pass starts at the first host again: the
//! hosts are **oversubscribed by wrapping around**, as hydra does (Open MPI would refuse without
//! `--oversubscribe`). Only an Open MPI `max_slots` limits a host's total; a job that does not
//! fit under those limits is an error. So `a:2,b:2` with 6 ranks in blocks puts 0, 1, 4, 5 on
//! `a` and 2, 3 on `b`. Without `max_slots`, block placement is hydra's formula: the i-th
//! rank of a host with `s` slots, whose first slot is slot `f` of all `S`, is
//! `(i / s) * S + i % s + f`. (hydra merges only consecutive repeats of a host; a host named
//! again later is merged here too, so that each host has one list of ranks.)
//!
//! ```
//! use ferry_launch::hosts::{parse_hosts_arg, place, Mapping};
//!
//! let hosts = parse_hosts_arg("node1:2,node2:2")?;
//! let placed = place(4, &hosts, None, Mapping::Cyclic)?;
//! assert_eq!(placed[0].host, "node1");
//! assert_eq!(placed[0].ranks, [0, 2]);
//! assert_eq!(placed[1].ranks, [1, 3]);
//! # Ok::<(), ferry_launch::hosts::HostsError>(())
//! ```

use std::fmt;
use thiserror::Error;

pub mod binding;
mod slurm;

pub use slurm::{expand_hostlist, parse_tasks_per_node, SlurmAllocation};

/// The largest number of hosts a host list, hostfile or Slurm hostlist may name (after
/// expansion): more is taken for a typo such as `n[0-99999999]`, not a machine.
pub const MAX_HOSTS: usize = 1 << 20;

/// The largest job [`place`] places (each rank costs memory in the placement).
pub const MAX_RANKS: u32 = 1 << 24;

/// The environment variable with the ssh command for [`Launcher::Ssh`], split on white space
/// (e.g. `ssh -p 2222 -o BatchMode=yes`); default [`SSH_DEFAULT`].
pub const SSH_ENV: &str = "FERRY_SSH";

/// The ssh command when [`SSH_ENV`] is unset or blank.
pub const SSH_DEFAULT: &str = "ssh";

/// The command of [`Launcher::Rsh`].
pub const RSH_COMMAND: &str = "rsh";

/// One host and how many ranks it takes per pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSlots {
    /// The host's name (or address) as the user wrote it.
    pub name: String,
    /// Ranks per placement pass (at least 1).
    pub slots: u32,
    /// Open MPI's `max_slots`: no more ranks than this on the host, however many passes.
    pub max_slots: Option<u32>,
}

impl HostSlots {
    /// `name` with `slots` slots and no limit.
    pub fn new(name: impl Into<String>, slots: u32) -> HostSlots {
        HostSlots {
            name: name.into(),
            slots,
            max_slots: None,
        }
    }
}

/// The ranks placed on one host, in increasing order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRanks {
    /// The host's name as the user (or Slurm) gave it.
    pub host: String,
    /// Its ranks, sorted.
    pub ranks: Vec<u32>,
}

/// How ranks are spread over the hosts' slots (`ferry run --map-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mapping {
    /// Fill each host's slots with consecutive ranks before the next host (`--map-by slot`).
    #[default]
    Block,
    /// Round-robin over the hosts, one rank each in turn (`--map-by node`, hydra's `-rr`).
    Cyclic,
}

/// How the ranks of other hosts are started (`ferry run --launcher`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Launcher {
    /// Every rank is forked on this host; hosts named other than this one each get a node
    /// daemon here (as hydra's fork launcher does: for tests of the multi-host path).
    #[default]
    Local,
    /// A node daemon per host over ssh ([`SSH_ENV`]).
    Ssh,
    /// A node daemon per host over rsh.
    Rsh,
    /// A node daemon per node with `srun`, inside a Slurm allocation.
    Slurm,
}

impl Launcher {
    /// The name `--launcher` takes.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Local => "local",
            Launcher::Ssh => "ssh",
            Launcher::Rsh => "rsh",
            Launcher::Slurm => "slurm",
        }
    }

    /// The remote shell command line for [`Launcher::Ssh`] ([`SSH_ENV`] split on white space,
    /// default [`SSH_DEFAULT`]) and [`Launcher::Rsh`]; `None` for the others.
    pub fn remote_shell(self, lookup: impl Fn(&str) -> Option<String>) -> Option<Vec<String>> {
        match self {
            Launcher::Ssh => {
                let words: Vec<String> = lookup(SSH_ENV)
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect();
                Some(if words.is_empty() {
                    vec![SSH_DEFAULT.to_owned()]
                } else {
                    words
                })
            }
            Launcher::Rsh => Some(vec![RSH_COMMAND.to_owned()]),
            Launcher::Local | Launcher::Slurm => None,
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with a host list, hostfile, Slurm variable or placement request.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HostsError {
    /// The list (named by `source`) names no host.
    #[error("{origin}: no hosts")]
    NoHosts {
        /// Where the list came from (`--hosts`, a file name, a variable).
        origin: String,
    },
    /// An entry of `--hosts` is unusable.
    #[error("--hosts {text:?}: {problem}")]
    HostsArg {
        /// The whole argument.
        text: String,
        /// What is wrong.
        problem: EntryProblem,
    },
    /// A hostfile line is unusable.
    #[error("{file}:{line}: {problem}")]
    Hostfile {
        /// The file's name.
        file: String,
        /// The line number, from 1.
        line: usize,
        /// What is wrong.
        problem: EntryProblem,
    },
    /// A Slurm hostlist expression is unusable.
    #[error("hostlist {text:?}: {problem}")]
    Hostlist {
        /// The whole expression.
        text: String,
        /// What is wrong.
        problem: String,
    },
    /// A `SLURM_TASKS_PER_NODE`-style count list is unusable.
    #[error("tasks per node {text:?}: {problem}")]
    TasksPerNode {
        /// The whole value.
        text: String,
        /// What is wrong.
        problem: String,
    },
    /// Slurm's node list and task counts do not match.
    #[error("{nodes_var} names {nodes} nodes but {tasks_var} gives counts for {tasks}")]
    NodeTaskMismatch {
        /// The node list's variable.
        nodes_var: &'static str,
        /// How many nodes it names.
        nodes: usize,
        /// The counts' variable.
        tasks_var: &'static str,
        /// How many counts it gives.
        tasks: usize,
    },
    /// A Slurm variable is set but not usable.
    #[error("{var}={value:?}: {problem}")]
    BadVariable {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        problem: String,
    },
    /// A job of 0 ranks.
    #[error("the job needs at least one rank")]
    NoRanks,
    /// More ranks than [`MAX_RANKS`].
    #[error("{np} ranks: more than ferry places ({MAX_RANKS})")]
    TooManyRanks {
        /// The number asked for.
        np: u64,
    },
    /// A host with 0 slots (given to [`place`] directly; the parsers refuse it earlier).
    #[error("host {host} has 0 slots")]
    ZeroSlots {
        /// The host.
        host: String,
    },
    /// `--ppn 0`.
    #[error("--ppn must be at least 1")]
    ZeroPpn,
    /// A host's slots do not fit in 32 bits (after adding up its entries).
    #[error("host {host}: more than {} slots", u32::MAX)]
    SlotOverflow {
        /// The host.
        host: String,
    },
    /// The job does not fit under the hosts' `max_slots`.
    #[error("{np} ranks do not fit: the hosts' max_slots allow {capacity}")]
    NotEnoughSlots {
        /// The ranks asked for.
        np: u32,
        /// What the hosts allow.
        capacity: u64,
    },
    /// The requested launcher cannot run this job.
    #[error("--launcher {launcher}: {problem}")]
    Launcher {
        /// The launcher asked for.
        launcher: Launcher,
        /// Why it cannot.
        problem: String,
    },
}

/// What is wrong with one host entry (an item of `--hosts` or a hostfile line).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EntryProblem {
    /// The entry is empty (`a,,b`).
    #[error("empty host entry")]
    Empty,
    /// More than [`MAX_HOSTS`] entries.
    #[error("more than {MAX_HOSTS} hosts")]
    TooMany,
    /// The host name has a character that no host name has.
    #[error("{name:?} is not a host name")]
    BadName {
        /// The name.
        name: String,
    },
    /// A count is not a whole number (or does not fit 32 bits).
    #[error("{what} {text:?} is not a whole number below 2^32")]
    BadCount {
        /// Which count (`slots`, `max_slots`).
        what: &'static str,
        /// Its text.
        text: String,
    },
    /// A count is 0.
    #[error("{what} of {host} is 0")]
    ZeroCount {
        /// Which count.
        what: &'static str,
        /// The host.
        host: String,
    },
    /// `slots` above `max_slots`.
    #[error("{host}: slots={slots} is more than max_slots={max_slots}")]
    SlotsAboveMax {
        /// The host.
        host: String,
        /// Its slots.
        slots: u32,
        /// Its limit.
        max_slots: u32,
    },
    /// A word after the host name that is not `slots=N` or `max_slots=N`.
    #[error("{word:?} is not slots=N or max_slots=N")]
    UnknownWord {
        /// The word.
        word: String,
    },
    /// The slots are given twice (`node:4 slots=4`, or `slots=` twice).
    #[error("{host}: {what} given twice")]
    Twice {
        /// The host.
        host: String,
        /// Which count.
        what: &'static str,
    },
}

/// Checks a host name: letters, digits, `.`, `-` and `_` (names and IPv4 addresses).
fn check_name(name: &str) -> Result<(), EntryProblem> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if ok {
        Ok(())
    } else {
        Err(EntryProblem::BadName { name: name.into() })
    }
}

/// Parses a count that must be at least 1.
fn parse_count(text: &str, what: &'static str, host: &str) -> Result<u32, EntryProblem> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let n: u32 = match text.parse() {
        Ok(n) if digits => n,
        _ => {
            return Err(EntryProblem::BadCount {
                what,
                text: text.into(),
            })
        }
    };
    if n == 0 {
        return Err(EntryProblem::ZeroCount {
            what,
            host: host.into(),
        });
    }
    Ok(n)
}

/// One `host` or `host:N` item.
fn parse_host_colon(item: &str) -> Result<(String, Option<u32>), EntryProblem> {
    if item.is_empty() {
        return Err(EntryProblem::Empty);
    }
    match item.rsplit_once(':') {
        Some((name, count)) => {
            check_name(name)?;
            Ok((name.into(), Some(parse_count(count, "slots", name)?)))
        }
        None => {
            check_name(item)?;
            Ok((item.into(), None))
        }
    }
}

/// Parses `--hosts` / `--host`: `a,b` or `a:2,b:2` (white space around items is ignored).
pub fn parse_hosts_arg(text: &str) -> Result<Vec<HostSlots>, HostsError> {
    if text.trim().is_empty() {
        return Err(HostsError::NoHosts {
            origin: "--hosts".into(),
        });
    }
    if text.split(',').count() > MAX_HOSTS {
        return Err(HostsError::HostsArg {
            text: text.into(),
            problem: EntryProblem::TooMany,
        });
    }
    text.split(',')
        .map(|item| {
            let (name, slots) =
                parse_host_colon(item.trim()).map_err(|problem| HostsError::HostsArg {
                    text: text.into(),
                    problem,
                })?;
            Ok(HostSlots::new(name, slots.unwrap_or(1)))
        })
        .collect()
}

/// One hostfile line without its comment, not blank.
fn parse_hostfile_line(line: &str) -> Result<HostSlots, EntryProblem> {
    let mut words = line.split_whitespace();
    let first = words.next().ok_or(EntryProblem::Empty)?;
    let (name, colon_slots) = parse_host_colon(first)?;
    let mut slots = colon_slots;
    let mut max_slots = None;
    for word in words {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| EntryProblem::UnknownWord { word: word.into() })?;
        let (what, slot): (&'static str, &mut Option<u32>) = match key {
            "slots" => ("slots", &mut slots),
            "max_slots" | "max-slots" => ("max_slots", &mut max_slots),
            _ => return Err(EntryProblem::UnknownWord { word: word.into() }),
        };
        if slot.is_some() {
            return Err(EntryProblem::Twice {
                host: name.clone(),
                what,
            });
        }
        *slot = Some(parse_count(value, what, &name)?);
    }
    let slots = match (slots, max_slots) {
        (Some(s), Some(m)) if s > m => {
            return Err(EntryProblem::SlotsAboveMax {
                host: name,
                slots: s,
                max_slots: m,
            })
        }
        (Some(s), _) => s,
        (None, _) => 1,
    };
    Ok(HostSlots {
        name,
        slots,
        max_slots,
    })
}

/// Parses a hostfile's text; `file` names it in errors (`file:line: problem`).
///
/// Each line is MPICH's `host[:N]` or Open MPI's `host [slots=N] [max_slots=M]`; `#` starts a
/// comment, blank lines are skipped. A file without any host is an error.
pub fn parse_hostfile(text: &str, file: &str) -> Result<Vec<HostSlots>, HostsError> {
    let mut hosts = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if hosts.len() == MAX_HOSTS {
            return Err(HostsError::Hostfile {
                file: file.into(),
                line: index + 1,
                problem: EntryProblem::TooMany,
            });
        }
        let host = parse_hostfile_line(line).map_err(|problem| HostsError::Hostfile {
            file: file.into(),
            line: index + 1,
            problem,
        })?;
        hosts.push(host);
    }
    if hosts.is_empty() {
        return Err(HostsError::NoHosts {
            origin: file.into(),
        });
    }
    Ok(hosts)
}

/// The sum of the hosts' slots, which must fit 32 bits.
fn total_slots(hosts: &[HostSlots]) -> Result<u32, HostsError> {
    let total: u64 = hosts.iter().map(|h| u64::from(h.slots)).sum();
    u32::try_from(total).map_err(|_| HostsError::TooManyRanks { np: total })
}

/// The hosts with duplicates merged (slots added up), in order of first appearance, and `ppn`
/// applied.
fn merge_hosts(hosts: &[HostSlots], ppn: Option<u32>) -> Result<Vec<HostSlots>, HostsError> {
    let mut merged: Vec<HostSlots> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for host in hosts {
        if host.slots == 0 {
            return Err(HostsError::ZeroSlots {
                host: host.name.clone(),
            });
        }
        match index.get(&host.name) {
            None => {
                index.insert(host.name.clone(), merged.len());
                merged.push(host.clone());
            }
            Some(&i) => {
                let entry: &mut HostSlots = &mut merged[i];
                let overflow = || HostsError::SlotOverflow {
                    host: host.name.clone(),
                };
                entry.slots = entry.slots.checked_add(host.slots).ok_or_else(overflow)?;
                entry.max_slots = match (entry.max_slots, host.max_slots) {
                    (Some(a), Some(b)) => Some(a.checked_add(b).ok_or_else(overflow)?),
                    _ => None,
                };
            }
        }
    }
    if let Some(ppn) = ppn {
        if ppn == 0 {
            return Err(HostsError::ZeroPpn);
        }
        merged.iter_mut().for_each(|h| h.slots = ppn);
    }
    Ok(merged)
}

/// Places ranks `0..np` on `hosts` (see the module documentation): hosts in order of first
/// appearance, each with its ranks sorted; hosts that get no rank are left out.
pub fn place(
    np: u32,
    hosts: &[HostSlots],
    ppn: Option<u32>,
    mapping: Mapping,
) -> Result<Vec<HostRanks>, HostsError> {
    if np == 0 {
        return Err(HostsError::NoRanks);
    }
    if np > MAX_RANKS {
        return Err(HostsError::TooManyRanks { np: np.into() });
    }
    let hosts = merge_hosts(hosts, ppn)?;
    if hosts.is_empty() {
        return Err(HostsError::NoHosts {
            origin: "the host list".into(),
        });
    }
    if hosts.iter().all(|h| h.max_slots.is_some()) {
        let capacity: u64 = hosts
            .iter()
            .filter_map(|h| h.max_slots)
            .map(u64::from)
            .sum();
        if capacity < u64::from(np) {
            return Err(HostsError::NotEnoughSlots { np, capacity });
        }
    }
    let mut placed: Vec<Vec<u32>> = vec![Vec::new(); hosts.len()];
    // What host i may still take, over all passes.
    let room = |i: usize, placed: &[Vec<u32>]| -> u64 {
        hosts[i]
            .max_slots
            .map_or(u64::MAX, |m| u64::from(m) - placed[i].len() as u64)
    };
    let mut next = 0u32;
    while next < np {
        // This pass: what each host takes.
        let mut take: Vec<(usize, u64)> = (0..hosts.len())
            .map(|i| (i, u64::from(hosts[i].slots).min(room(i, &placed))))
            .filter(|&(_, n)| n > 0)
            .collect();
        if take.is_empty() {
            // Unreachable after the capacity check; never loop for ever.
            let capacity = placed.iter().map(|r| r.len() as u64).sum();
            return Err(HostsError::NotEnoughSlots { np, capacity });
        }
        match mapping {
            Mapping::Block => {
                for (i, n) in take {
                    let n = n.min(u64::from(np - next)) as u32;
                    placed[i].extend(next..next + n);
                    next += n;
                }
            }
            Mapping::Cyclic => {
                while next < np && !take.is_empty() {
                    for (i, n) in take.iter_mut() {
                        if next == np {
                            break;
                        }
                        placed[*i].push(next);
                        next += 1;
                        *n -= 1;
                    }
                    take.retain(|&(_, n)| n > 0);
                }
            }
        }
    }
    Ok(hosts
        .into_iter()
        .zip(placed)
        .filter(|(_, ranks)| !ranks.is_empty())
        .map(|(h, ranks)| HostRanks {
            host: h.name,
            ranks,
        })
        .collect())
}

/// Whether `name` is this machine: `localhost`, a loopback address, or `this_host` (this
/// machine's host name), compared without case and also by the first label when only one side
/// is qualified (`node1` is `node1.cluster`).
pub fn is_this_host(name: &str, this_host: &str) -> bool {
    let name = name.to_ascii_lowercase();
    let this = this_host.to_ascii_lowercase();
    if matches!(name.as_str(), "localhost" | "localhost.localdomain" | "::1")
        || name.starts_with("127.") && name.parse::<std::net::Ipv4Addr>().is_ok()
    {
        return true;
    }
    if this.is_empty() {
        return false;
    }
    let short = |s: &str| s.split('.').next().unwrap_or("").to_owned();
    name == this
        || (!name.contains('.') && name == short(&this))
        || (!this.contains('.') && short(&name) == this)
}

/// What the user asked for, as `ferry run` gathers it.
#[derive(Debug, Clone, Default)]
pub struct PlacementRequest {
    /// `-n`, when given.
    pub np: Option<u32>,
    /// `--hosts` or `--hostfile`, parsed.
    pub hosts: Option<Vec<HostSlots>>,
    /// `--ppn`.
    pub ppn: Option<u32>,
    /// `--map-by`.
    pub mapping: Mapping,
    /// `--launcher`, when given.
    pub launcher: Option<Launcher>,
    /// The Slurm allocation this runs in, if any.
    pub allocation: Option<SlurmAllocation>,
}

/// Where a job's ranks go and how they are started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The job's size.
    pub np: u32,
    /// Each host's ranks; `None`: every rank on this host, placed as before hosts existed.
    pub hosts: Option<Vec<HostRanks>>,
    /// How the hosts' ranks are started.
    pub launcher: Launcher,
}

impl Placement {
    /// The placed hosts that are not this machine ([`is_this_host`]).
    pub fn remote_hosts<'a>(&'a self, this_host: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.hosts
            .iter()
            .flatten()
            .map(|h| h.host.as_str())
            .filter(move |h| !is_this_host(h, this_host))
    }
}

impl PlacementRequest {
    /// Decides the job size, the hosts and the launcher.
    ///
    /// Hosts come from `--hosts`/`--hostfile`, else from the Slurm allocation (unless
    /// `--launcher local`), else there are none (this host only). `-n` defaults to the
    /// allocation's task count ([`SlurmAllocation::default_np`]) or, with a host list, its
    /// slots (after `--ppn`); with neither, to 1. The launcher defaults to `slurm` inside an
    /// allocation without a host list, else `ssh` when a host is not `this_host`, else `local`.
    pub fn resolve(&self, this_host: &str) -> Result<Placement, HostsError> {
        let launcher_error = |launcher, problem: &str| HostsError::Launcher {
            launcher,
            problem: problem.into(),
        };
        if self.launcher == Some(Launcher::Slurm) && self.allocation.is_none() {
            return Err(launcher_error(
                Launcher::Slurm,
                "not inside a Slurm allocation (SLURM_JOB_NODELIST is not set)",
            ));
        }
        let from_allocation = self.hosts.is_none() && self.launcher != Some(Launcher::Local);
        let (hosts, default_np) = match (&self.hosts, &self.allocation) {
            (Some(hosts), _) => {
                let merged = merge_hosts(hosts, self.ppn)?;
                (Some(hosts), total_slots(&merged)?)
            }
            (None, Some(allocation)) if from_allocation => {
                let np = match self.ppn {
                    Some(_) => total_slots(&merge_hosts(&allocation.nodes, self.ppn)?)?,
                    None => allocation.default_np()?,
                };
                (Some(&allocation.nodes), np)
            }
            _ => (None, 1),
        };
        let np = self.np.unwrap_or(default_np);
        let Some(hosts) = hosts else {
            if let Some(launcher @ (Launcher::Ssh | Launcher::Rsh)) = self.launcher {
                return Err(launcher_error(launcher, "needs --hosts or --hostfile"));
            }
            if np == 0 {
                return Err(HostsError::NoRanks);
            }
            return Ok(Placement {
                np,
                hosts: None,
                launcher: Launcher::Local,
            });
        };
        let placed = place(np, hosts, self.ppn, self.mapping)?;
        let remote = placed.iter().find(|h| !is_this_host(&h.host, this_host));
        let launcher = match (self.launcher, remote) {
            (Some(launcher), _) => launcher,
            (None, _) if self.hosts.is_none() => Launcher::Slurm,
            (None, Some(_)) => Launcher::Ssh,
            (None, None) => Launcher::Local,
        };
        Ok(Placement {
            np,
            hosts: Some(placed),
            launcher,
        })
    }
}

#[cfg(test)]
mod tests;
