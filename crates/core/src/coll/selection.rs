//! Which algorithm a collective uses, kept as data (like MPICH's JSON selection file).
//!
//! The table maps each collective that has more than one algorithm to an ordered list of rules;
//! the first rule whose conditions all hold names the algorithm. The built-in table is
//! `selection.json` next to this file; `FERRY_COLL_SELECTION=/path/file.json` replaces it. A
//! collective the file leaves out keeps its built-in rules, so a file written today still works
//! when more collectives gain alternatives.
//!
//! ```json
//! {
//!   "bcast": [
//!     { "min_clusters": 2, "algorithm": "hierarchical" },
//!     { "min_bytes": 12288, "min_ranks": 8, "algorithm": "scatter_allgather" },
//!     { "algorithm": "binomial" }
//!   ],
//!   "allreduce": [
//!     { "commutative": true, "min_bytes": 2048, "algorithm": "ring" },
//!     { "algorithm": "recursive_doubling" }
//!   ]
//! }
//! ```
//!
//! Collectives and their algorithms: `bcast` (binomial, scatter_allgather, hierarchical),
//! `allreduce` (recursive_doubling, ring, hierarchical), `reduce` (binomial, hierarchical),
//! `barrier` (dissemination, hierarchical), `gather` (linear, hierarchical), `allgather` (ring,
//! hierarchical), `alltoall` (pairwise, hierarchical). "hierarchical" is MagPIe's scheme for
//! communicators that span clusters (`ferry_sched::hierarchical`; cluster ids from
//! `FERRY_CLUSTER`/`FERRY_CLUSTERS`); the built-in table picks it from 2 clusters on.
//! `shared_memory` (bcast, allreduce, reduce, barrier, allgather, alltoall) runs a blocking call
//! through the communicator's shared segment (`crate::coll::segment`) when all its ranks share a
//! host; the call still needs a message algorithm (nonblocking calls, communicators without a
//! segment), which is that of the first matching rule that does not name `shared_memory`.
//!
//! Conditions (all optional, bounds inclusive): `min_bytes`, `max_bytes` (message or vector
//! length; per-rank block for gathers and alltoall), `min_ranks`, `max_ranks` (communicator
//! size), `min_clusters`, `max_clusters` (distinct clusters the communicator spans),
//! `commutative` (allreduce and reduce only: whether the operation is), `in_place` (allreduce
//! only: whether the input is the receive buffer, MPI_IN_PLACE). A rule may carry a
//! `comment`. The last rule of each list must have no conditions, so every call finds one.
//! Anything else — an unknown collective, algorithm or field — is an error naming the file and
//! the field, returned as [`Error::Config`] by the first collective call: the file is read once
//! per process.
//!
//! The table is tuning only. What correctness needs stays in code: the ring allreduce runs only
//! for commutative operations with at least one element per rank, and a hierarchical reduction
//! of a non-commutative operation only on clusters that are contiguous rank ranges (else the
//! flat default runs), whatever a file says.
//!
//! Without a file, the older `FERRY_COLL_BCAST_LONG`, `FERRY_COLL_BCAST_MIN_RANKS` and
//! `FERRY_COLL_ALLREDUCE_LONG` still move the thresholds of the built-in rules; set together
//! with a file they are an error rather than silently ignored.

use crate::error::Error;
use crate::events::CollectiveKind as Kind;
use serde::Deserialize;
use std::fmt;
use std::sync::OnceLock;

/// The built-in table.
const BUILT_IN: &str = include_str!("selection.json");
/// Where the built-in table says it comes from, in messages.
const BUILT_IN_NAME: &str = "built-in selection.json";
/// Replaces the built-in table.
pub(crate) const SELECTION_VAR: &str = "FERRY_COLL_SELECTION";
const BCAST_LONG_VAR: &str = "FERRY_COLL_BCAST_LONG";
const BCAST_MIN_RANKS_VAR: &str = "FERRY_COLL_BCAST_MIN_RANKS";
const ALLREDUCE_LONG_VAR: &str = "FERRY_COLL_ALLREDUCE_LONG";

/// How a file spells the algorithm that runs through the communicator's shared segment.
const SHARED_MEMORY: &str = "shared_memory";

/// What the lookups need to know of an algorithm.
trait Algorithm {
    /// Runs through the shared segment (`crate::coll::segment`), which not every communicator has:
    /// such a rule also needs a message algorithm behind it.
    fn is_shared_memory(&self) -> bool;
}

/// A closed set of algorithms for one collective, as spelt in a file.
macro_rules! algorithms {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub(crate) enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl Algorithm for $name {
            fn is_shared_memory(&self) -> bool {
                false $(|| (matches!(self, $name::$variant) && $text == SHARED_MEMORY))*
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self {
                    $($name::$variant => $text,)*
                })
            }
        }
    };
}

algorithms! {
    /// Broadcast algorithms.
    BcastAlgorithm {
        /// Binomial tree.
        Binomial = "binomial",
        /// Binomial scatter, then ring allgather (van de Geijn).
        ScatterAllgather = "scatter_allgather",
        /// Across cluster leaders, then inside each cluster (`ferry_sched::hierarchical`).
        Hierarchical = "hierarchical",
        /// Through the communicator's shared segment when its ranks share a host
        /// (`crate::coll::segment`); else the next matching rule.
        SharedMemory = "shared_memory",
    }
}

algorithms! {
    /// Allreduce algorithms.
    AllreduceAlgorithm {
        /// Recursive doubling; correct for every operation.
        RecursiveDoubling = "recursive_doubling",
        /// Reduce-scatter then allgather around a ring; commutative operations only.
        Ring = "ring",
        /// Reduce inside clusters, recursive doubling among leaders, broadcast inside clusters.
        Hierarchical = "hierarchical",
        /// Through the communicator's shared segment when its ranks share a host
        /// (`crate::coll::segment`); else the next matching rule.
        SharedMemory = "shared_memory",
    }
}

algorithms! {
    /// Reduce algorithms.
    ReduceAlgorithm {
        /// Binomial tree.
        Binomial = "binomial",
        /// Inside clusters, then across cluster leaders.
        Hierarchical = "hierarchical",
        /// Through the communicator's shared segment when its ranks share a host
        /// (`crate::coll::segment`); else the next matching rule.
        SharedMemory = "shared_memory",
    }
}

algorithms! {
    /// Barrier algorithms.
    BarrierAlgorithm {
        /// Dissemination over all ranks.
        Dissemination = "dissemination",
        /// Fan-in inside clusters, dissemination among leaders, fan-out.
        Hierarchical = "hierarchical",
        /// Through the communicator's shared segment when its ranks share a host
        /// (`crate::coll::segment`); else the next matching rule.
        SharedMemory = "shared_memory",
    }
}

algorithms! {
    /// Gather algorithms.
    GatherAlgorithm {
        /// Every rank sends to the root.
        Linear = "linear",
        /// To each cluster's leader, then one message per cluster to the root.
        Hierarchical = "hierarchical",
    }
}

algorithms! {
    /// Allgather algorithms.
    AllgatherAlgorithm {
        /// Ring over all ranks.
        Ring = "ring",
        /// Gather to leaders, ring of whole clusters among them, broadcast inside clusters.
        Hierarchical = "hierarchical",
        /// Through the communicator's shared segment when its ranks share a host
        /// (`crate::coll::segment`); else the next matching rule.
        SharedMemory = "shared_memory",
    }
}

algorithms! {
    /// Alltoall algorithms.
    AlltoallAlgorithm {
        /// Every pair exchanges directly.
        Pairwise = "pairwise",
        /// Aggregated through cluster leaders: one message per ordered pair of clusters.
        Hierarchical = "hierarchical",
        /// Through the communicator's shared segment when its ranks share a host
        /// (`crate::coll::segment`); else the next matching rule.
        SharedMemory = "shared_memory",
    }
}

/// What the conditions of a rule look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call {
    /// Message or vector length (per-rank block for gathers and alltoall).
    pub(crate) bytes: usize,
    /// Communicator size.
    pub(crate) ranks: usize,
    /// Distinct clusters the communicator spans.
    pub(crate) clusters: usize,
    /// Whether the reduction is commutative (true where there is none).
    pub(crate) commutative: bool,
    /// Whether the call reduces in place (MPI_IN_PLACE; false for other collectives).
    pub(crate) in_place: bool,
}

#[cfg(test)]
impl Call {
    fn with_clusters(self, clusters: usize) -> Call {
        Call { clusters, ..self }
    }
}

/// One line of a collective's list: conditions, all of which must hold, and the algorithm.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule<A> {
    #[serde(default)]
    min_bytes: Option<usize>,
    #[serde(default)]
    max_bytes: Option<usize>,
    #[serde(default)]
    min_ranks: Option<usize>,
    #[serde(default)]
    max_ranks: Option<usize>,
    #[serde(default)]
    min_clusters: Option<usize>,
    #[serde(default)]
    max_clusters: Option<usize>,
    #[serde(default)]
    commutative: Option<bool>,
    #[serde(default)]
    in_place: Option<bool>,
    algorithm: A,
    /// Free text for the reader; ignored.
    #[serde(default)]
    #[allow(dead_code)]
    comment: Option<String>,
}

impl<A> Rule<A> {
    fn admits_ranks(&self, ranks: usize) -> bool {
        self.min_ranks.is_none_or(|m| ranks >= m) && self.max_ranks.is_none_or(|m| ranks <= m)
    }

    fn unconditional(&self) -> bool {
        self.min_bytes.is_none()
            && self.max_bytes.is_none()
            && self.min_ranks.is_none()
            && self.max_ranks.is_none()
            && self.min_clusters.is_none()
            && self.max_clusters.is_none()
            && self.commutative.is_none()
            && self.in_place.is_none()
    }

    fn matches(&self, call: Call) -> bool {
        self.min_bytes.is_none_or(|m| call.bytes >= m)
            && self.max_bytes.is_none_or(|m| call.bytes <= m)
            && self.admits_ranks(call.ranks)
            && self.min_clusters.is_none_or(|m| call.clusters >= m)
            && self.max_clusters.is_none_or(|m| call.clusters <= m)
            && self.commutative.is_none_or(|c| c == call.commutative)
            && self.in_place.is_none_or(|p| p == call.in_place)
    }
}

impl<A: fmt::Display> fmt::Display for Rule<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.algorithm)?;
        let mut conditions = vec![];
        if let Some(c) = self.commutative {
            conditions.push(if c { "commutative" } else { "non-commutative" }.to_string());
        }
        if let Some(p) = self.in_place {
            conditions.push(if p { "in place" } else { "not in place" }.to_string());
        }
        for (name, op, value) in [
            ("bytes", ">=", self.min_bytes),
            ("bytes", "<=", self.max_bytes),
            ("ranks", ">=", self.min_ranks),
            ("ranks", "<=", self.max_ranks),
            ("clusters", ">=", self.min_clusters),
            ("clusters", "<=", self.max_clusters),
        ] {
            if let Some(v) = value {
                conditions.push(format!("{name} {op} {v}"));
            }
        }
        if !conditions.is_empty() {
            write!(f, " if {}", conditions.join(", "))?;
        }
        Ok(())
    }
}

/// The collectives that have more than one algorithm, as spelt in a file.
const COLLECTIVES: [&str; 7] = [
    "bcast",
    "allreduce",
    "reduce",
    "barrier",
    "gather",
    "allgather",
    "alltoall",
];
/// The collectives a rule's `commutative` condition applies to.
const REDUCTIONS: [&str; 2] = ["allreduce", "reduce"];

/// A selection file as written: every collective optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    bcast: Option<Vec<Rule<BcastAlgorithm>>>,
    #[serde(default)]
    allreduce: Option<Vec<Rule<AllreduceAlgorithm>>>,
    #[serde(default)]
    reduce: Option<Vec<Rule<ReduceAlgorithm>>>,
    #[serde(default)]
    barrier: Option<Vec<Rule<BarrierAlgorithm>>>,
    #[serde(default)]
    gather: Option<Vec<Rule<GatherAlgorithm>>>,
    #[serde(default)]
    allgather: Option<Vec<Rule<AllgatherAlgorithm>>>,
    #[serde(default)]
    alltoall: Option<Vec<Rule<AlltoallAlgorithm>>>,
}

/// Checks one collective's list; `source` names the file in messages.
fn validate<A>(source: &str, collective: &str, rules: &[Rule<A>]) -> Result<(), String> {
    let at = |i: usize| format!("{source}: {collective}[{i}]");
    if rules.last().is_none_or(|r| !r.unconditional()) {
        return Err(format!(
            "{source}: {collective}: the last rule must have no conditions (a catch-all \
             such as {{\"algorithm\": …}}), so that every call finds an algorithm"
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        if rule.unconditional() && i + 1 < rules.len() {
            return Err(format!(
                "{}: has no conditions, so the rules after it never match",
                at(i)
            ));
        }
        if !REDUCTIONS.contains(&collective) && rule.commutative.is_some() {
            return Err(format!(
                "{}: field `commutative` does not apply to {collective}",
                at(i)
            ));
        }
        if collective != "allreduce" && rule.in_place.is_some() {
            return Err(format!(
                "{}: field `in_place` does not apply to {collective}",
                at(i)
            ));
        }
        if let (Some(lo), Some(hi)) = (rule.min_bytes, rule.max_bytes) {
            if lo > hi {
                return Err(format!("{}: min_bytes {lo} > max_bytes {hi}", at(i)));
            }
        }
        if let (Some(lo), Some(hi)) = (rule.min_ranks, rule.max_ranks) {
            if lo > hi {
                return Err(format!("{}: min_ranks {lo} > max_ranks {hi}", at(i)));
            }
        }
        if let (Some(lo), Some(hi)) = (rule.min_clusters, rule.max_clusters) {
            if lo > hi {
                return Err(format!("{}: min_clusters {lo} > max_clusters {hi}", at(i)));
            }
        }
    }
    Ok(())
}

/// Where the table in force came from.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// `selection.json`, thresholds possibly moved by `FERRY_COLL_*`.
    BuiltIn,
    /// The file `FERRY_COLL_SELECTION` names.
    File(String),
}

/// The rules in force, validated.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    bcast: Vec<Rule<BcastAlgorithm>>,
    allreduce: Vec<Rule<AllreduceAlgorithm>>,
    reduce: Vec<Rule<ReduceAlgorithm>>,
    barrier: Vec<Rule<BarrierAlgorithm>>,
    gather: Vec<Rule<GatherAlgorithm>>,
    allgather: Vec<Rule<AllgatherAlgorithm>>,
    alltoall: Vec<Rule<AlltoallAlgorithm>>,
    source: Source,
}

/// The message algorithm: the first matching rule that does not name `shared_memory`.
fn first<A: Copy + Algorithm>(rules: &[Rule<A>], call: Call) -> Option<A> {
    (rules.iter())
        .find(|r| r.matches(call) && !r.algorithm.is_shared_memory())
        .map(|r| r.algorithm)
}

/// Whether the first matching rule names `shared_memory`.
fn first_is_shared<A: Algorithm>(rules: &[Rule<A>], call: Call) -> bool {
    (rules.iter())
        .find(|r| r.matches(call))
        .is_some_and(|r| r.algorithm.is_shared_memory())
}

/// `algorithm`, chosen for `call` of `kind`, raised as an event for tools (see
/// `crate::events`).
#[inline(always)]
fn chose<A: fmt::Display>(kind: Kind, algorithm: A, call: Call) -> A {
    crate::events::collective(kind, &algorithm, (call.ranks, call.bytes));
    algorithm
}

/// The collectives that may run through a communicator's shared segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shareable {
    Bcast,
    Allreduce,
    Reduce,
    Barrier,
    Allgather,
    Alltoall,
}

/// A collective's rules: the file's, else the built-in ones (`base`, absent when parsing the
/// built-in table itself), validated.
fn rules_of<A>(
    name: &str,
    collective: &str,
    from_file: Option<Vec<Rule<A>>>,
    base: Option<Vec<Rule<A>>>,
) -> Result<Vec<Rule<A>>, String> {
    let rules = from_file
        .or(base)
        .ok_or_else(|| format!("{name}: no rules for {collective}"))?;
    validate(name, collective, &rules)?;
    Ok(rules)
}

impl Table {
    /// Parses `text` (named `source` in messages) over the built-in rules.
    fn parse(source: Source, text: &str) -> Result<Table, String> {
        let name = match &source {
            Source::BuiltIn => BUILT_IN_NAME,
            Source::File(path) => path,
        };
        // Collectives first, so that a misspelt or unsupported one is called by its name.
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("{name}: {e}"))?;
        let collectives = value
            .as_object()
            .ok_or_else(|| format!("{name}: expected an object keyed by collective"))?;
        if let Some(unknown) = collectives
            .keys()
            .find(|k| !COLLECTIVES.contains(&k.as_str()))
        {
            return Err(format!(
                "{name}: unknown collective `{unknown}` (algorithms are chosen for: {})",
                COLLECTIVES.join(", ")
            ));
        }
        let file: File = serde_json::from_str(text).map_err(|e| format!("{name}: {e}"))?;
        let base = match source {
            Source::BuiltIn => None,
            Source::File(_) => Some(Table::built_in()?),
        };
        Ok(Table {
            bcast: rules_of(
                name,
                "bcast",
                file.bcast,
                base.as_ref().map(|b| b.bcast.clone()),
            )?,
            allreduce: rules_of(
                name,
                "allreduce",
                file.allreduce,
                base.as_ref().map(|b| b.allreduce.clone()),
            )?,
            reduce: rules_of(
                name,
                "reduce",
                file.reduce,
                base.as_ref().map(|b| b.reduce.clone()),
            )?,
            barrier: rules_of(
                name,
                "barrier",
                file.barrier,
                base.as_ref().map(|b| b.barrier.clone()),
            )?,
            gather: rules_of(
                name,
                "gather",
                file.gather,
                base.as_ref().map(|b| b.gather.clone()),
            )?,
            allgather: rules_of(
                name,
                "allgather",
                file.allgather,
                base.as_ref().map(|b| b.allgather.clone()),
            )?,
            alltoall: rules_of(
                name,
                "alltoall",
                file.alltoall,
                base.as_ref().map(|b| b.alltoall.clone()),
            )?,
            source,
        })
    }

    /// The built-in table, parsed once per process (the configuration's default and its
    /// reading of the environment both start from it).
    pub(crate) fn built_in() -> Result<Table, String> {
        static PARSED: OnceLock<Result<Table, String>> = OnceLock::new();
        PARSED
            .get_or_init(|| Table::parse(Source::BuiltIn, BUILT_IN))
            .clone()
    }

    /// The table `get` (an environment lookup) asks for: the file of `FERRY_COLL_SELECTION`,
    /// or the built-in table with the `FERRY_COLL_*` thresholds applied.
    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Table, String> {
        let threshold = |var: &str| -> Result<Option<usize>, String> {
            crate::settings::number(&get, var)
                .map(|v| v.map(|v| v as usize))
                .map_err(|e| match e {
                    Error::Config(message) => message,
                    other => other.to_string(),
                })
        };
        let bcast_long = threshold(BCAST_LONG_VAR)?;
        let bcast_min_ranks = threshold(BCAST_MIN_RANKS_VAR)?;
        let allreduce_long = threshold(ALLREDUCE_LONG_VAR)?;
        let any_threshold = [
            (BCAST_LONG_VAR, bcast_long),
            (BCAST_MIN_RANKS_VAR, bcast_min_ranks),
            (ALLREDUCE_LONG_VAR, allreduce_long),
        ]
        .into_iter()
        .find(|(_, v)| v.is_some());
        if let Some(path) = get(SELECTION_VAR).filter(|p| !p.is_empty()) {
            if let Some((var, _)) = any_threshold {
                return Err(format!(
                    "{var} and {SELECTION_VAR} are both set: put the threshold in {path}"
                ));
            }
            let text = crate::coll::settings::read_file(&path)
                .map_err(|e| format!("{SELECTION_VAR}={path}: cannot read: {e}"))?;
            return Table::parse(Source::File(path), &text);
        }
        let mut table = Table::built_in()?;
        for rule in &mut table.bcast {
            if rule.algorithm == BcastAlgorithm::ScatterAllgather {
                rule.min_bytes = bcast_long.or(rule.min_bytes);
                rule.min_ranks = bcast_min_ranks.or(rule.min_ranks);
            }
        }
        for rule in &mut table.allreduce {
            if rule.algorithm == AllreduceAlgorithm::Ring {
                rule.min_bytes = allreduce_long.or(rule.min_bytes);
            }
        }
        Ok(table)
    }

    /// Broadcast of `bytes` over `ranks` ranks in `clusters` clusters.
    pub(crate) fn bcast(&self, bytes: usize, ranks: usize, clusters: usize) -> BcastAlgorithm {
        let call = Call {
            bytes,
            ranks,
            clusters,
            commutative: true,
            in_place: false,
        };
        let chosen = first(&self.bcast, call).unwrap_or(BcastAlgorithm::Binomial);
        chose(Kind::Bcast, chosen, call)
    }

    /// Allreduce `call` (all its conditions apply) in elements of `elem` bytes.
    pub(crate) fn allreduce(&self, call: Call, elem: usize) -> AllreduceAlgorithm {
        let chosen = match first(&self.allreduce, call) {
            // Correctness, not tuning: the ring reorders operands and splits the vector into
            // one block of whole elements per rank.
            Some(AllreduceAlgorithm::Ring)
                if call.commutative && call.bytes / elem.max(1) >= call.ranks =>
            {
                AllreduceAlgorithm::Ring
            }
            Some(AllreduceAlgorithm::Hierarchical) => AllreduceAlgorithm::Hierarchical,
            _ => AllreduceAlgorithm::RecursiveDoubling,
        };
        chose(Kind::Allreduce, chosen, call)
    }

    /// Whether some call on `ranks` ranks of one cluster may go through a shared segment: a
    /// communicator of that size then sets its segment up at its first blocking collective,
    /// so that every member has it (or none does) before any call could choose it.
    pub(crate) fn may_share(&self, ranks: usize) -> bool {
        fn any<A: Algorithm>(rules: &[Rule<A>], ranks: usize) -> bool {
            rules.iter().any(|r| {
                r.algorithm.is_shared_memory()
                    && r.admits_ranks(ranks)
                    && r.min_clusters.is_none_or(|m| m <= 1)
            })
        }
        any(&self.bcast, ranks)
            || any(&self.allreduce, ranks)
            || any(&self.reduce, ranks)
            || any(&self.barrier, ranks)
            || any(&self.allgather, ranks)
            || any(&self.alltoall, ranks)
    }

    /// Whether `call` of `collective` goes through the communicator's shared segment (where it
    /// has one; the message algorithm of the same call is what the other lookups return).
    pub(crate) fn shared(&self, collective: Shareable, call: Call) -> bool {
        let (shared, kind) = match collective {
            Shareable::Bcast => (first_is_shared(&self.bcast, call), Kind::Bcast),
            Shareable::Allreduce => (first_is_shared(&self.allreduce, call), Kind::Allreduce),
            Shareable::Reduce => (first_is_shared(&self.reduce, call), Kind::Reduce),
            Shareable::Barrier => (first_is_shared(&self.barrier, call), Kind::Barrier),
            Shareable::Allgather => (first_is_shared(&self.allgather, call), Kind::Allgather),
            Shareable::Alltoall => (first_is_shared(&self.alltoall, call), Kind::Alltoall),
        };
        if shared {
            chose(kind, SHARED_MEMORY, call);
        }
        shared
    }

    /// Reduce (`call.commutative` applies).
    pub(crate) fn reduce(&self, call: Call) -> ReduceAlgorithm {
        let chosen = first(&self.reduce, call).unwrap_or(ReduceAlgorithm::Binomial);
        chose(Kind::Reduce, chosen, call)
    }

    /// Barrier (`call.bytes` is 0).
    pub(crate) fn barrier(&self, call: Call) -> BarrierAlgorithm {
        let chosen = first(&self.barrier, call).unwrap_or(BarrierAlgorithm::Dissemination);
        chose(Kind::Barrier, chosen, call)
    }

    /// Gather of `call.bytes` per rank.
    pub(crate) fn gather(&self, call: Call) -> GatherAlgorithm {
        let chosen = first(&self.gather, call).unwrap_or(GatherAlgorithm::Linear);
        chose(Kind::Gather, chosen, call)
    }

    /// Allgather of `call.bytes` per rank.
    pub(crate) fn allgather(&self, call: Call) -> AllgatherAlgorithm {
        let chosen = first(&self.allgather, call).unwrap_or(AllgatherAlgorithm::Ring);
        chose(Kind::Allgather, chosen, call)
    }

    /// Alltoall of `call.bytes` per pair.
    pub(crate) fn alltoall(&self, call: Call) -> AlltoallAlgorithm {
        let chosen = first(&self.alltoall, call).unwrap_or(AlltoallAlgorithm::Pairwise);
        chose(Kind::Alltoall, chosen, call)
    }

    /// One line per collective: its rules, first match wins.
    fn summary(&self) -> String {
        fn list<A: fmt::Display>(rules: &[Rule<A>]) -> String {
            let rules: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
            rules.join("; else ")
        }
        format!(
            "bcast: {} | allreduce: {} | reduce: {} | barrier: {} | gather: {} | allgather: {} \
             | alltoall: {}",
            list(&self.bcast),
            list(&self.allreduce),
            list(&self.reduce),
            list(&self.barrier),
            list(&self.gather),
            list(&self.allgather),
            list(&self.alltoall)
        )
    }
}

/// The selection settings and the rules of `table`, for `ferry info --params`.
pub(crate) fn describe(table: &Table) -> Vec<(&'static str, String)> {
    let rules = table.summary();
    match &table.source {
        Source::File(path) => vec![(SELECTION_VAR, format!("{path} ({rules})"))],
        Source::BuiltIn => {
            let bcast = table
                .bcast
                .iter()
                .find(|r| r.algorithm == BcastAlgorithm::ScatterAllgather);
            let ring = table
                .allreduce
                .iter()
                .find(|r| r.algorithm == AllreduceAlgorithm::Ring);
            let show = |v: Option<usize>| v.map_or("-".to_string(), |v| v.to_string());
            vec![
                (SELECTION_VAR, format!("built-in ({rules})")),
                (BCAST_LONG_VAR, show(bcast.and_then(|r| r.min_bytes))),
                (BCAST_MIN_RANKS_VAR, show(bcast.and_then(|r| r.min_ranks))),
                (ALLREDUCE_LONG_VAR, show(ring.and_then(|r| r.min_bytes))),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AllreduceAlgorithm::{RecursiveDoubling, Ring};
    use BcastAlgorithm::{Binomial, ScatterAllgather};

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    /// [`Table::allreduce`] of `bytes` in elements of `elem` over `ranks` ranks in
    /// `clusters` clusters.
    fn allreduce(
        t: &Table,
        bytes: usize,
        elem: usize,
        ranks: usize,
        clusters: usize,
        commutative: bool,
        in_place: bool,
    ) -> AllreduceAlgorithm {
        let call = Call {
            bytes,
            ranks,
            clusters,
            commutative,
            in_place,
        };
        t.allreduce(call, elem)
    }

    /// Writes `text` to a file of its own and loads it as `FERRY_COLL_SELECTION`.
    fn load(name: &str, text: &str) -> Result<Table, String> {
        let path = std::env::temp_dir().join(format!(
            "ferry-selection-{}-{name}.json",
            std::process::id()
        ));
        std::fs::write(&path, text).unwrap();
        let path = path.to_string_lossy().into_owned();
        let result = Table::from_lookup(env(&[(SELECTION_VAR, &path)]));
        let _ = std::fs::remove_file(&path);
        result
    }

    /// The choices `api.rs` made before the table, with MPICH's thresholds.
    fn old_bcast(bytes: usize, ranks: usize) -> BcastAlgorithm {
        if bytes >= 12288 && ranks >= 8 {
            ScatterAllgather
        } else {
            Binomial
        }
    }

    fn old_allreduce(
        bytes: usize,
        elem: usize,
        ranks: usize,
        commutative: bool,
    ) -> AllreduceAlgorithm {
        if commutative && bytes >= 2048 && bytes / elem.max(1) >= ranks {
            Ring
        } else {
            RecursiveDoubling
        }
    }

    #[test]
    fn built_in_table_reproduces_the_old_choices_at_the_thresholds() {
        let t = Table::from_lookup(env(&[])).unwrap();
        assert_eq!(t.source, Source::BuiltIn);
        for bytes in [0, 1, 12287, 12288, 12289, 1 << 20] {
            for ranks in [1, 2, 7, 8, 9, 17] {
                assert_eq!(
                    t.bcast(bytes, ranks, 1),
                    old_bcast(bytes, ranks),
                    "{bytes} B, {ranks} ranks"
                );
            }
        }
        assert_eq!(t.bcast(12288, 8, 1), ScatterAllgather);
        assert_eq!(t.bcast(12287, 8, 1), Binomial);
        assert_eq!(t.bcast(12288, 7, 1), Binomial);
        for bytes in [0, 8, 2047, 2048, 2049, 1 << 20] {
            // (2 ranks have rules of their own, below.)
            for ranks in [1, 3, 7, 8, 9, 255, 256, 257, 2047, 2048, 2049] {
                for elem in [1, 8] {
                    for commutative in [false, true] {
                        assert_eq!(
                            allreduce(&t, bytes, elem, ranks, 1, commutative, true),
                            old_allreduce(bytes, elem, ranks, commutative),
                            "{bytes} B of {elem}-byte elements, {ranks} ranks, commutative {commutative}"
                        );
                    }
                }
            }
        }
        assert_eq!(allreduce(&t, 2048, 8, 256, 1, true, true), Ring);
        assert_eq!(
            allreduce(&t, 2048, 8, 257, 1, true, true),
            RecursiveDoubling
        );
        // 2 ranks: the exchange, but for long vectors in place.
        for bytes in [0, 8, 2048, 8192, 1 << 20] {
            for commutative in [false, true] {
                assert_eq!(
                    allreduce(&t, bytes, 8, 2, 1, commutative, false),
                    RecursiveDoubling
                );
            }
        }
        assert_eq!(allreduce(&t, 8192, 8, 2, 1, true, true), RecursiveDoubling);
        assert_eq!(allreduce(&t, 8193, 1, 2, 1, true, true), Ring);
        assert_eq!(allreduce(&t, 8193, 1, 2, 1, false, true), RecursiveDoubling);
    }

    #[test]
    fn shared_memory_rules_choose_the_segment_and_leave_the_message_algorithm_to_the_rest() {
        let t = Table::from_lookup(env(&[])).unwrap();
        let call = |bytes: usize, ranks: usize| Call {
            bytes,
            ranks,
            clusters: 1,
            commutative: true,
            in_place: false,
        };
        // Built in: broadcasts from 3 ranks through the segment, long, or short from 2 KiB on
        // 3 or 4 ranks and from 1 KiB on more (2 ranks, and shorter: the tree's messages).
        assert!(!t.shared(Shareable::Bcast, call(8, 2)));
        assert!(!t.shared(Shareable::Bcast, call(8, 3)));
        assert!(!t.shared(Shareable::Bcast, call(1024, 4)));
        assert!(t.shared(Shareable::Bcast, call(2048, 3)));
        assert!(!t.shared(Shareable::Bcast, call(512, 8)));
        assert!(t.shared(Shareable::Bcast, call(1024, 8)));
        assert!(t.shared(Shareable::Bcast, call(4096, 5)));
        assert!(!t.shared(Shareable::Bcast, call(1 << 20, 2)));
        assert!(t.shared(Shareable::Bcast, call(1 << 20, 4)));
        assert!(!t.shared(Shareable::Bcast, call(16384, 4)));
        assert!(t.shared(Shareable::Bcast, call(12288, 8)));
        assert!(!t.shared(Shareable::Bcast, call(2048, 4).with_clusters(2)));
        assert!(!t.shared(Shareable::Allreduce, call(8, 2)));
        assert!(t.shared(Shareable::Allreduce, call(8, 3)));
        assert!(!t.shared(Shareable::Allreduce, call(1 << 20, 2)));
        let in_place = Call {
            in_place: true,
            ..call(1 << 20, 2)
        };
        assert!(t.shared(Shareable::Allreduce, in_place));
        assert!(t.shared(Shareable::Barrier, call(0, 4)));
        let file = load(
            "shared",
            r#"{ "bcast": [
                  { "min_bytes": 100, "algorithm": "shared_memory" },
                  { "min_bytes": 50, "algorithm": "scatter_allgather" },
                  { "algorithm": "shared_memory" } ] }"#,
        )
        .unwrap();
        assert!(file.shared(Shareable::Bcast, call(100, 4)));
        assert_eq!(file.bcast(100, 4, 1), ScatterAllgather);
        assert!(!file.shared(Shareable::Bcast, call(60, 4)));
        assert_eq!(file.bcast(60, 4, 1), ScatterAllgather);
        // Only shared rules match: the built-in default algorithm carries the call.
        assert!(file.shared(Shareable::Bcast, call(10, 4)));
        assert_eq!(file.bcast(10, 4, 1), Binomial);
    }

    #[test]
    fn a_size_may_share_where_a_shared_rule_admits_it() {
        let t = Table::from_lookup(env(&[])).unwrap();
        // Built in: 2 ranks for a long allreduce in place, 3 and more for most calls.
        assert!(t.may_share(2) && t.may_share(3) && t.may_share(64));
        let file = load(
            "may-share",
            r#"{ "bcast": [{ "min_ranks": 4, "max_ranks": 8, "algorithm": "shared_memory" },
                           { "algorithm": "binomial" }],
                 "allreduce": [{ "algorithm": "recursive_doubling" }],
                 "reduce": [{ "algorithm": "binomial" }],
                 "barrier": [{ "min_clusters": 2, "algorithm": "shared_memory" },
                             { "algorithm": "dissemination" }],
                 "allgather": [{ "algorithm": "ring" }],
                 "alltoall": [{ "algorithm": "pairwise" }] }"#,
        )
        .unwrap();
        assert!(!file.may_share(3) && file.may_share(4) && file.may_share(8));
        assert!(!file.may_share(9));
    }

    #[test]
    fn old_variables_move_the_built_in_thresholds() {
        let t = Table::from_lookup(env(&[
            (BCAST_LONG_VAR, "100"),
            (BCAST_MIN_RANKS_VAR, "2"),
            (ALLREDUCE_LONG_VAR, "64"),
        ]))
        .unwrap();
        assert_eq!(t.bcast(100, 2, 1), ScatterAllgather);
        assert_eq!(t.bcast(99, 2, 1), Binomial);
        assert_eq!(allreduce(&t, 64, 4, 4, 1, true, true), Ring);
        assert_eq!(allreduce(&t, 63, 1, 4, 1, true, true), RecursiveDoubling);
        let e = Table::from_lookup(env(&[(BCAST_LONG_VAR, "big")])).unwrap_err();
        assert!(e.contains(BCAST_LONG_VAR), "{e}");
        let e = Table::from_lookup(env(&[
            (ALLREDUCE_LONG_VAR, "1"),
            (SELECTION_VAR, "/x.json"),
        ]))
        .unwrap_err();
        assert!(
            e.contains(ALLREDUCE_LONG_VAR) && e.contains(SELECTION_VAR),
            "{e}"
        );
    }

    #[test]
    fn a_file_forcing_the_long_algorithms_is_obeyed() {
        let t = load(
            "force",
            r#"{
                "bcast": [{ "algorithm": "scatter_allgather" }],
                "allreduce": [{ "algorithm": "ring" }]
            }"#,
        )
        .unwrap();
        assert!(matches!(t.source, Source::File(_)));
        assert_eq!(t.bcast(1, 2, 1), ScatterAllgather);
        assert_eq!(t.bcast(0, 1, 1), ScatterAllgather);
        assert_eq!(allreduce(&t, 8, 4, 2, 1, true, true), Ring);
        // Correctness guards hold whatever the file says.
        assert_eq!(allreduce(&t, 8, 4, 3, 1, true, true), RecursiveDoubling);
        assert_eq!(
            allreduce(&t, 1 << 20, 4, 2, 1, false, true),
            RecursiveDoubling
        );
    }

    #[test]
    fn a_file_with_ranges_and_a_missing_collective() {
        let t = load(
            "ranges",
            r#"{
                "bcast": [
                    { "min_bytes": 10, "max_bytes": 20, "max_ranks": 4, "algorithm": "scatter_allgather",
                      "comment": "tried on this host" },
                    { "algorithm": "binomial" }
                ]
            }"#,
        )
        .unwrap();
        assert_eq!(t.bcast(9, 4, 1), Binomial);
        assert_eq!(t.bcast(10, 4, 1), ScatterAllgather);
        assert_eq!(t.bcast(20, 4, 1), ScatterAllgather);
        assert_eq!(t.bcast(21, 4, 1), Binomial);
        assert_eq!(t.bcast(15, 5, 1), Binomial);
        // allreduce was left out: the built-in rules.
        assert_eq!(allreduce(&t, 2048, 8, 8, 1, true, true), Ring);
        assert_eq!(allreduce(&t, 2047, 8, 8, 1, true, true), RecursiveDoubling);
    }

    #[test]
    fn a_file_without_end_is_refused_naming_the_cap() {
        let e = Table::from_lookup(|var| (var == SELECTION_VAR).then(|| "/dev/zero".into()))
            .unwrap_err();
        assert!(
            e.contains("/dev/zero") && e.contains("larger than 16777216 bytes"),
            "{e}"
        );
    }

    #[test]
    fn malformed_files_name_the_file_and_the_field() {
        for (name, text, expect) in [
            (
                "collective",
                r#"{ "scan": [{ "algorithm": "binomial" }] }"#,
                "unknown collective `scan`",
            ),
            (
                "algorithm",
                r#"{ "allreduce": [{ "algorithm": "rings" }] }"#,
                "rings",
            ),
            (
                "field",
                r#"{ "bcast": [{ "min_byte": 1, "algorithm": "binomial" }, { "algorithm": "binomial" }] }"#,
                "min_byte",
            ),
            (
                "catch-all",
                r#"{ "bcast": [{ "min_bytes": 1, "algorithm": "binomial" }] }"#,
                "bcast: the last rule must have no conditions",
            ),
            (
                "empty-list",
                r#"{ "allreduce": [] }"#,
                "allreduce: the last rule",
            ),
            (
                "unreachable",
                r#"{ "bcast": [{ "algorithm": "binomial" }, { "algorithm": "binomial" }] }"#,
                "bcast[0]: has no conditions",
            ),
            (
                "commutative-bcast",
                r#"{ "bcast": [{ "commutative": true, "algorithm": "binomial" }, { "algorithm": "binomial" }] }"#,
                "bcast[0]: field `commutative`",
            ),
            (
                "in-place-reduce",
                r#"{ "reduce": [{ "in_place": true, "algorithm": "binomial" }, { "algorithm": "binomial" }] }"#,
                "reduce[0]: field `in_place` does not apply to reduce",
            ),
            (
                "bounds",
                r#"{ "allreduce": [{ "min_ranks": 9, "max_ranks": 8, "algorithm": "ring" }, { "algorithm": "ring" }] }"#,
                "allreduce[0]: min_ranks 9 > max_ranks 8",
            ),
            (
                "type",
                r#"{ "bcast": [{ "min_bytes": -1, "algorithm": "binomial" }] }"#,
                "-1",
            ),
            ("syntax", r#"{ "bcast": [ "#, "EOF"),
        ] {
            let e = load(name, text).unwrap_err();
            assert!(e.contains("ferry-selection-"), "{name}: {e}");
            assert!(e.contains(expect), "{name}: {e}");
        }
        let e = Table::from_lookup(env(&[(SELECTION_VAR, "/nonexistent/sel.json")])).unwrap_err();
        assert!(e.contains("/nonexistent/sel.json"), "{e}");
    }

    #[test]
    fn params_name_the_selection() {
        let params = describe(&Table::built_in().unwrap());
        assert_eq!(params[0].0, SELECTION_VAR);
    }

    #[test]
    fn summary_lists_the_rules_in_order() {
        let t = Table::built_in().unwrap();
        assert_eq!(
            t.summary(),
            "bcast: hierarchical if clusters >= 2; else shared_memory if bytes >= 2048, bytes <= 4096, \
             ranks >= 3, ranks <= 4; else shared_memory if bytes >= 1024, bytes <= 4096, ranks \
             >= 5; else shared_memory if bytes >= 32768, ranks >= 3; else shared_memory if bytes >= \
             12288, ranks >= 8; else scatter_allgather if bytes >= 12288, ranks >= 8; else binomial \
             | allreduce: hierarchical if clusters >= 2; else \
             shared_memory if ranks >= 3; else recursive_doubling if not in place, ranks >= 2, \
             ranks <= 2; else recursive_doubling if in place, bytes <= 8192, ranks >= 2, ranks \
             <= 2; else shared_memory if bytes >= 32768; else ring if \
             commutative, bytes >= 2048; else recursive_doubling | reduce: hierarchical if \
             clusters >= 2; else shared_memory if bytes >= 32768, bytes <= 262144, ranks >= 3; \
             else binomial | barrier: \
             hierarchical if clusters >= 2; else shared_memory if ranks >= 3; else \
             dissemination | gather: hierarchical if clusters >= 2; else linear | allgather: \
             hierarchical if clusters >= 2; else shared_memory if ranks >= 3; else ring | \
             alltoall: hierarchical if clusters >= 2; else shared_memory if bytes <= 4096, \
             ranks >= 3; else pairwise"
        );
    }

    fn call(bytes: usize, ranks: usize, clusters: usize, commutative: bool) -> Call {
        Call {
            bytes,
            ranks,
            clusters,
            commutative,
            in_place: false,
        }
    }

    #[test]
    fn hierarchical_from_two_clusters_on_and_overridable() {
        let t = Table::built_in().unwrap();
        for bytes in [0, 8, 1 << 20] {
            for ranks in [2, 6, 17] {
                assert_eq!(t.bcast(bytes, ranks, 2), BcastAlgorithm::Hierarchical);
                assert_eq!(t.bcast(bytes, ranks, 1), old_bcast(bytes, ranks));
                for commutative in [false, true] {
                    assert_eq!(
                        allreduce(&t, bytes, 8, ranks, 3, commutative, true),
                        AllreduceAlgorithm::Hierarchical
                    );
                    let c = call(bytes, ranks, 2, commutative);
                    assert_eq!(t.reduce(c), ReduceAlgorithm::Hierarchical);
                    let c = call(bytes, ranks, 1, commutative);
                    assert_eq!(t.reduce(c), ReduceAlgorithm::Binomial);
                }
                let (one, two) = (call(bytes, ranks, 1, true), call(bytes, ranks, 2, true));
                assert_eq!(t.barrier(two), BarrierAlgorithm::Hierarchical);
                assert_eq!(t.barrier(one), BarrierAlgorithm::Dissemination);
                assert_eq!(t.gather(two), GatherAlgorithm::Hierarchical);
                assert_eq!(t.gather(one), GatherAlgorithm::Linear);
                assert_eq!(t.allgather(two), AllgatherAlgorithm::Hierarchical);
                assert_eq!(t.allgather(one), AllgatherAlgorithm::Ring);
                assert_eq!(t.alltoall(two), AlltoallAlgorithm::Hierarchical);
                assert_eq!(t.alltoall(one), AlltoallAlgorithm::Pairwise);
            }
        }
        // A file may turn it off above a size, or force it on one cluster.
        let t = load(
            "hierarchical",
            r#"{
                "bcast": [
                    { "min_clusters": 2, "max_bytes": 1024, "algorithm": "hierarchical" },
                    { "algorithm": "binomial" }
                ],
                "barrier": [{ "algorithm": "hierarchical" }],
                "allreduce": [
                    { "commutative": false, "algorithm": "recursive_doubling" },
                    { "max_clusters": 4, "algorithm": "hierarchical" },
                    { "algorithm": "ring" }
                ]
            }"#,
        )
        .unwrap();
        assert_eq!(t.bcast(1024, 8, 2), BcastAlgorithm::Hierarchical);
        assert_eq!(t.bcast(1025, 8, 2), BcastAlgorithm::Binomial);
        assert_eq!(t.bcast(8, 8, 1), BcastAlgorithm::Binomial);
        assert_eq!(
            t.barrier(call(0, 8, 1, true)),
            BarrierAlgorithm::Hierarchical
        );
        assert_eq!(
            allreduce(&t, 64, 8, 4, 2, false, true),
            AllreduceAlgorithm::RecursiveDoubling
        );
        assert_eq!(
            allreduce(&t, 64, 8, 4, 4, true, true),
            AllreduceAlgorithm::Hierarchical
        );
        assert_eq!(
            allreduce(&t, 64, 8, 4, 5, true, true),
            AllreduceAlgorithm::Ring
        );
        // Left out: built in.
        assert_eq!(
            t.alltoall(call(8, 4, 2, true)),
            AlltoallAlgorithm::Hierarchical
        );
        for (name, text, expect) in [
            (
                "commutative-barrier",
                r#"{ "barrier": [{ "commutative": true, "algorithm": "hierarchical" }, { "algorithm": "dissemination" }] }"#,
                "barrier[0]: field `commutative` does not apply to barrier",
            ),
            (
                "cluster-bounds",
                r#"{ "gather": [{ "min_clusters": 3, "max_clusters": 2, "algorithm": "linear" }, { "algorithm": "linear" }] }"#,
                "gather[0]: min_clusters 3 > max_clusters 2",
            ),
            (
                "alltoall-algorithm",
                r#"{ "alltoall": [{ "algorithm": "bruck" }] }"#,
                "bruck",
            ),
        ] {
            let e = load(name, text).unwrap_err();
            assert!(e.contains(expect), "{name}: {e}");
        }
    }
}
