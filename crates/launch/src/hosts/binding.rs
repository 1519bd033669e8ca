//! Which cpus each rank of a host runs on: the mapping and binding policy (`ferry run
//! --map-by`, `--bind-to`, `--cpus-per-rank`, `--report-bindings`), and [`plan`], a pure
//! function of a host's [`Topology`], how many ranks it runs and the policy.
//!
//! A host's ranks are taken in rank order (its *local* ranks 0, 1, …). Each takes `pe` slots
//! (`--cpus-per-rank`, or `:PE=n` of `--map-by`): cores, or hardware threads when binding to
//! hardware threads or mapping by them. Where its slots come from (`--map-by`):
//!
//! - `slot`, `core`, `node`, `hwthread`: the host's slots in logical order (`node` is about the
//!   hosts: ranks go round-robin over them, see [`super::Mapping`]);
//! - `numa`, `package` (`socket`): round-robin over the NUMA nodes (packages), each rank taking
//!   the next free slots of its object; an object without room is skipped;
//! - `ppr:N:core|numa|package`: N ranks on each object in turn (ranks 0..N on the first).
//!
//! What a rank is bound to (`--bind-to`): its slots' cpus (`core`, `hwthread`), or all the cpus
//! of the NUMA nodes (packages) its slots are in (`numa`, `package`); `none` leaves it to the
//! kernel. Without `--bind-to`, ranks are bound to their cores when the host's ranks fit its
//! cores (to their NUMA node or package when mapped by those), and left unbound when they do
//! not (as Open MPI does), when Slurm binds them (`SLURM_CPU_BIND` set, not `none`), or when
//! the host runs one rank of one slot (its threads keep every cpu).
//! An explicit binding on an oversubscribed host starts over at the first slot: rank i of a
//! host with s cores is on core i mod s.
//!
//! The launcher passes the policy to the node daemons in the job's environment
//! ([`Policy::to_env`]), where each reads it back ([`Policy::from_lookup`]) and plans with its
//! own host's topology.

use ferry_topo::{Level, Topology};
use thiserror::Error;

/// `--map-by` of the ranks' environment, e.g. `numa` or `ppr:2:package:PE=2`.
pub const MAP_BY_ENV: &str = "FERRY_MAP_BY";
/// `--bind-to` of the ranks' environment: `none`, `hwthread`, `core`, `numa` or `package`.
pub const BIND_TO_ENV: &str = "FERRY_BIND_TO";
/// `--cpus-per-rank` of the ranks' environment.
pub const CPUS_PER_RANK_ENV: &str = "FERRY_CPUS_PER_RANK";
/// `1` when each host reports its ranks' bindings on standard error.
pub const REPORT_BINDINGS_ENV: &str = "FERRY_REPORT_BINDINGS";

/// Most cpus one rank may ask for: more is taken for a typo.
pub const MAX_CPUS_PER_RANK: usize = 1 << 16;

/// A policy that cannot be understood, or cannot be met on a host.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BindingError {
    /// `--map-by` text not understood.
    #[error("--map-by {text:?}: {why} (slot, hwthread, core, numa, package, socket, node, ppr:N:core|numa|package, each optionally with :PE=n)")]
    MapBy {
        /// The text given.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// `--bind-to` text not understood.
    #[error("--bind-to {0:?}: not one of none, hwthread, core, numa, package, socket")]
    BindTo(String),
    /// `--cpus-per-rank` not a number from 1.
    #[error("--cpus-per-rank {0:?}: not a number from 1 to {MAX_CPUS_PER_RANK}")]
    CpusPerRank(String),
    /// `--cpus-per-rank` and `:PE=` disagree.
    #[error("--cpus-per-rank {flag} and --map-by …:PE={pe} disagree")]
    PeTwice {
        /// `--cpus-per-rank`.
        flag: usize,
        /// `:PE=`.
        pe: usize,
    },
    /// `ppr:N:level` has room for fewer ranks than the host runs.
    #[error("--map-by ppr:{per}:{level} places at most {room} rank(s) on this host ({objects} {level} object(s)), but it runs {ranks}")]
    PprTooFew {
        /// N.
        per: usize,
        /// The level's name.
        level: &'static str,
        /// Its objects on this host.
        objects: usize,
        /// N × objects.
        room: usize,
        /// The host's ranks.
        ranks: usize,
    },
    /// A rank needs more cpus than one object of its mapping has.
    #[error("{pe} cpus per rank do not fit in one {level} of this host (the largest has {largest} {unit})")]
    PeTooLarge {
        /// Slots per rank.
        pe: usize,
        /// The object the rank is mapped to.
        level: &'static str,
        /// Slots of the largest such object.
        largest: usize,
        /// `core(s)` or `hardware thread(s)`.
        unit: &'static str,
    },
}

/// Where a host's ranks take their slots from (the within-host part of `--map-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MapBy {
    /// The slots in order (`slot`, also `block`; the default).
    #[default]
    Slot,
    /// Hardware threads in order.
    Hwthread,
    /// Cores in order.
    Core,
    /// Round-robin over NUMA nodes.
    Numa,
    /// Round-robin over packages (`socket`).
    Package,
    /// Round-robin over the hosts (`cyclic`); the slots of a host in order.
    Node,
    /// `per` ranks on each object of `level` in turn.
    Ppr {
        /// Ranks per object.
        per: usize,
        /// Core, NUMA node or package.
        level: Level,
    },
}

/// What a rank is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindTo {
    /// Unbound.
    None,
    /// Its hardware threads.
    Hwthread,
    /// Its cores.
    Core,
    /// The NUMA nodes of its cores.
    Numa,
    /// The packages of its cores.
    Package,
}

/// A whole mapping and binding policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Where the slots come from.
    pub map_by: MapBy,
    /// The binding; `None`: the default (see the module's documentation).
    pub bind_to: Option<BindTo>,
    /// Slots per rank, at least 1.
    pub pe: usize,
    /// Report each rank's binding on standard error.
    pub report: bool,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            map_by: MapBy::Slot,
            bind_to: None,
            pe: 1,
            report: false,
        }
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Package => "package",
        Level::Numa => "numa",
        Level::Core => "core",
        Level::Pu => "hwthread",
    }
}

impl MapBy {
    /// Parses `--map-by` (Open MPI's and MPICH's spellings, case ignored): the mapping and the
    /// `:PE=n` given with it.
    pub fn parse(text: &str) -> Result<(MapBy, Option<usize>), BindingError> {
        let fail = |why: &str| BindingError::MapBy {
            text: text.into(),
            why: why.into(),
        };
        let lower = text.to_ascii_lowercase();
        let mut words = lower.split(':');
        let first = words.next().unwrap_or_default();
        let object = |word: Option<&str>| match word {
            Some("core") => Ok(Level::Core),
            Some("numa") => Ok(Level::Numa),
            Some("package" | "socket") => Ok(Level::Package),
            _ => Err(fail("ppr takes N:core, N:numa or N:package")),
        };
        let map_by = match first {
            "slot" | "block" => MapBy::Slot,
            "hwthread" => MapBy::Hwthread,
            "core" => MapBy::Core,
            "numa" => MapBy::Numa,
            "package" | "socket" => MapBy::Package,
            "node" | "cyclic" => MapBy::Node,
            "ppr" => {
                let per = words
                    .next()
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|&n| (1..=MAX_CPUS_PER_RANK).contains(&n))
                    .ok_or_else(|| fail("ppr needs a number of ranks from 1"))?;
                MapBy::Ppr {
                    per,
                    level: object(words.next())?,
                }
            }
            _ => return Err(fail("unknown mapping")),
        };
        let mut pe = None;
        for modifier in words {
            let n = modifier
                .strip_prefix("pe=")
                .ok_or_else(|| fail("the only modifier taken is PE=n"))?;
            pe = Some(parse_pe(n).map_err(|_| fail("PE= needs a number from 1"))?);
        }
        Ok((map_by, pe))
    }

    /// The text [`MapBy::parse`] reads back.
    pub fn text(self) -> String {
        match self {
            MapBy::Slot => "slot".into(),
            MapBy::Hwthread => "hwthread".into(),
            MapBy::Core => "core".into(),
            MapBy::Numa => "numa".into(),
            MapBy::Package => "package".into(),
            MapBy::Node => "node".into(),
            MapBy::Ppr { per, level } => format!("ppr:{per}:{}", level_name(level)),
        }
    }
}

fn parse_pe(text: &str) -> Result<usize, BindingError> {
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| (1..=MAX_CPUS_PER_RANK).contains(&n))
        .ok_or_else(|| BindingError::CpusPerRank(text.into()))
}

impl BindTo {
    /// Parses `--bind-to` (`socket` is `package`, as MPICH spells it; case ignored). `auto`
    /// is the default and so `None`.
    pub fn parse(text: &str) -> Result<Option<BindTo>, BindingError> {
        Ok(Some(match text.to_ascii_lowercase().as_str() {
            "auto" => return Ok(None),
            "none" => BindTo::None,
            "hwthread" => BindTo::Hwthread,
            "core" => BindTo::Core,
            "numa" => BindTo::Numa,
            "package" | "socket" => BindTo::Package,
            _ => return Err(BindingError::BindTo(text.into())),
        }))
    }

    /// The text [`BindTo::parse`] reads back.
    pub fn text(self) -> &'static str {
        match self {
            BindTo::None => "none",
            BindTo::Hwthread => "hwthread",
            BindTo::Core => "core",
            BindTo::Numa => "numa",
            BindTo::Package => "package",
        }
    }
}

impl Policy {
    /// The policy of `--map-by`, `--bind-to` and `--cpus-per-rank` texts (each optional).
    pub fn parse(
        map_by: Option<&str>,
        bind_to: Option<&str>,
        cpus_per_rank: Option<&str>,
        report: bool,
    ) -> Result<Policy, BindingError> {
        let (map_by, pe) = match map_by {
            Some(text) => MapBy::parse(text)?,
            None => (MapBy::Slot, None),
        };
        let flag = cpus_per_rank.map(parse_pe).transpose()?;
        let pe = match (flag, pe) {
            (Some(flag), Some(pe)) if flag != pe => return Err(BindingError::PeTwice { flag, pe }),
            (flag, pe) => flag.or(pe).unwrap_or(1),
        };
        Ok(Policy {
            map_by,
            bind_to: bind_to.map(BindTo::parse).transpose()?.flatten(),
            pe,
            report,
        })
    }

    /// The policy that the variables of [`Policy::to_env`] give, read with `lookup`; `None` if
    /// none of them is set.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Policy>, BindingError> {
        let [map_by, bind_to, pe, report] = [
            MAP_BY_ENV,
            BIND_TO_ENV,
            CPUS_PER_RANK_ENV,
            REPORT_BINDINGS_ENV,
        ]
        .map(&lookup);
        if [&map_by, &bind_to, &pe, &report]
            .iter()
            .all(|v| v.is_none())
        {
            return Ok(None);
        }
        let report = report.is_some_and(|v| matches!(v.trim(), "1" | "yes" | "true" | "on"));
        Policy::parse(map_by.as_deref(), bind_to.as_deref(), pe.as_deref(), report).map(Some)
    }

    /// The variables that carry the policy to the node daemons.
    pub fn to_env(&self) -> Vec<(String, String)> {
        let mut vars = vec![
            (MAP_BY_ENV.to_string(), self.map_by.text()),
            (CPUS_PER_RANK_ENV.to_string(), self.pe.to_string()),
        ];
        if let Some(bind) = self.bind_to {
            vars.push((BIND_TO_ENV.to_string(), bind.text().to_string()));
        }
        if self.report {
            vars.push((REPORT_BINDINGS_ENV.to_string(), "1".to_string()));
        }
        vars
    }
}

/// The binding of each of a host's ranks, and why they are unbound if they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Per local rank: its cpus, or `None` (unbound).
    pub cpus: Vec<Option<Vec<usize>>>,
    /// Why the ranks are unbound under the default policy, for the report.
    pub unbound_because: Option<&'static str>,
}

impl Plan {
    fn unbound(ranks: usize, why: Option<&'static str>) -> Plan {
        Plan {
            cpus: vec![None; ranks],
            unbound_because: why,
        }
    }
}

/// Plans the binding of `ranks` ranks on a host of topology `topo`. `slurm_binds`: Slurm
/// binds the ranks (`SLURM_CPU_BIND`), which the default leaves alone.
pub fn plan(
    topo: &Topology,
    ranks: usize,
    policy: &Policy,
    slurm_binds: bool,
) -> Result<Plan, BindingError> {
    let by_thread = matches!(policy.map_by, MapBy::Hwthread)
        || matches!(policy.bind_to, Some(BindTo::Hwthread));
    let slot_level = if by_thread { Level::Pu } else { Level::Core };
    if let MapBy::Ppr { per, level } = policy.map_by {
        // An explicit layout that cannot hold the host's ranks is an error, bound or not.
        let objects = topo.count(level);
        if ranks > per.saturating_mul(objects) {
            return Err(BindingError::PprTooFew {
                per,
                level: level_name(level),
                objects,
                room: per.saturating_mul(objects),
                ranks,
            });
        }
    }
    let bind = match policy.bind_to {
        Some(BindTo::None) => return Ok(Plan::unbound(ranks, None)),
        Some(bind) => bind,
        None if slurm_binds => return Ok(Plan::unbound(ranks, Some("Slurm binds them"))),
        // A lone rank has no rival to keep apart from; on one core it would lose the others to
        // its threads (MPI + OpenMP), and hosts that share a machine would stack on core 0.
        None if ranks == 1
            && policy.pe == 1
            && matches!(policy.map_by, MapBy::Slot | MapBy::Core | MapBy::Node) =>
        {
            return Ok(Plan::unbound(
                ranks,
                Some("one rank on the host: it keeps every cpu"),
            ))
        }
        None if ranks.saturating_mul(policy.pe) > topo.count(slot_level) => {
            return Ok(Plan::unbound(
                ranks,
                Some("more ranks than cores: oversubscribed"),
            ))
        }
        None => match policy.map_by {
            MapBy::Numa => BindTo::Numa,
            MapBy::Package => BindTo::Package,
            MapBy::Hwthread => BindTo::Hwthread,
            _ => BindTo::Core,
        },
    };
    let slots = slots_of(topo, slot_level);
    let (objects, level) = match policy.map_by {
        MapBy::Numa => (group_slots(topo, &slots, Level::Numa), Level::Numa),
        MapBy::Package => (group_slots(topo, &slots, Level::Package), Level::Package),
        MapBy::Ppr { level, .. } => (group_slots(topo, &slots, level), level),
        _ => (vec![(0..slots.len()).collect()], Level::Pu),
    };
    let taken = match policy.map_by {
        MapBy::Ppr { per, level } => ppr(&objects, ranks, per, policy.pe, level)?,
        _ => round_robin(&objects, ranks, policy.pe, level, by_thread)?,
    };
    let cpus = taken
        .into_iter()
        .map(|mine| Some(bound_cpus(topo, &slots, &mine, bind)))
        .collect();
    Ok(Plan {
        cpus,
        unbound_because: None,
    })
}

/// The cpus of each slot (a core's PUs, or one PU), in logical order.
fn slots_of(topo: &Topology, level: Level) -> Vec<Vec<usize>> {
    topo.cpus_by(level)
}

/// For each object of `level`, the indices of the slots in it.
fn group_slots(topo: &Topology, slots: &[Vec<usize>], level: Level) -> Vec<Vec<usize>> {
    let objects = topo.cpus_by(level);
    objects
        .iter()
        .map(|cpus| {
            (0..slots.len())
                .filter(|&s| slots[s].first().is_some_and(|cpu| cpus.contains(cpu)))
                .collect()
        })
        .collect()
}

/// Each rank takes `pe` consecutive free slots of the next object with room, in turn; when no
/// object has room, every slot is free again (oversubscription).
fn round_robin(
    objects: &[Vec<usize>],
    ranks: usize,
    pe: usize,
    level: Level,
    by_thread: bool,
) -> Result<Vec<Vec<usize>>, BindingError> {
    let largest = objects.iter().map(Vec::len).max().unwrap_or(0);
    if pe > largest {
        return Err(BindingError::PeTooLarge {
            pe,
            level: match level {
                Level::Pu => "host",
                other => level_name(other),
            },
            largest,
            unit: if by_thread {
                "hardware thread(s)"
            } else {
                "core(s)"
            },
        });
    }
    let mut used = vec![0usize; objects.len()];
    let mut next = 0;
    let mut out = Vec::with_capacity(ranks);
    for _ in 0..ranks {
        let has_room = |o: usize, used: &[usize]| objects[o].len() - used[o] >= pe;
        if !(0..objects.len()).any(|o| has_room(o, &used)) {
            used.iter_mut().for_each(|u| *u = 0);
        }
        let object = (0..objects.len())
            .map(|step| (next + step) % objects.len())
            .find(|&o| has_room(o, &used))
            .unwrap_or(0);
        out.push(objects[object][used[object]..used[object] + pe].to_vec());
        used[object] += pe;
        next = (object + 1) % objects.len();
    }
    Ok(out)
}

/// `per` ranks on each object in turn; within an object the slots start over when they run out.
fn ppr(
    objects: &[Vec<usize>],
    ranks: usize,
    per: usize,
    pe: usize,
    level: Level,
) -> Result<Vec<Vec<usize>>, BindingError> {
    let room = per.saturating_mul(objects.len());
    if ranks > room {
        return Err(BindingError::PprTooFew {
            per,
            level: level_name(level),
            objects: objects.len(),
            room,
            ranks,
        });
    }
    (0..ranks)
        .map(|rank| {
            let slots = &objects[rank / per];
            if slots.is_empty() {
                return Ok(Vec::new());
            }
            let first = (rank % per) * pe;
            Ok((first..first + pe)
                .map(|i| slots[i % slots.len()])
                .collect())
        })
        .collect()
}

/// The cpus a rank whose slots are `mine` is bound to.
fn bound_cpus(topo: &Topology, slots: &[Vec<usize>], mine: &[usize], bind: BindTo) -> Vec<usize> {
    let own: Vec<usize> = mine
        .iter()
        .flat_map(|&s| slots[s].iter().copied())
        .collect();
    let widen = |level: Level| -> Vec<usize> {
        let mut cpus: Vec<usize> = topo
            .cpus_by(level)
            .into_iter()
            .filter(|object| object.iter().any(|cpu| own.contains(cpu)))
            .flatten()
            .collect();
        cpus.sort_unstable();
        cpus
    };
    let mut cpus = match bind {
        BindTo::Numa => widen(Level::Numa),
        BindTo::Package => widen(Level::Package),
        BindTo::Core if slots.iter().all(|s| s.len() == 1) => {
            // Slots are hardware threads (mapped by them): bind to their whole cores.
            widen(Level::Core)
        }
        BindTo::None | BindTo::Hwthread | BindTo::Core => own,
    };
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// Whether Slurm binds the ranks of this host itself: `SLURM_CPU_BIND` set, and not `none`.
pub fn slurm_binds(lookup: impl Fn(&str) -> Option<String>) -> bool {
    lookup("SLURM_CPU_BIND")
        .is_some_and(|v| !v.is_empty() && !v.split(',').any(|w| w.trim() == "none"))
}

/// One line of `--report-bindings`.
pub fn report_line(host: &str, rank: u32, cpus: Option<&[usize]>, why: Option<&str>) -> String {
    match (cpus, why) {
        (Some(cpus), _) => format!(
            "ferry: host {host} rank {rank} bound to cpus {}",
            ferry_topo::cpu_list(cpus)
        ),
        (None, Some(why)) => format!("ferry: host {host} rank {rank} not bound ({why})"),
        (None, None) => format!("ferry: host {host} rank {rank} not bound"),
    }
}

#[cfg(test)]
mod tests;
