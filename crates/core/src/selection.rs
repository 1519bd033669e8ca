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
//! Conditions (all optional, bounds inclusive): `min_bytes`, `max_bytes` (message or vector
//! length), `min_ranks`, `max_ranks` (communicator size), `commutative` (allreduce only: whether
//! the operation is). A rule may carry a `comment`. The last rule of each list must have no
//! conditions, so every call finds one. Anything else — an unknown collective, algorithm or field
//! — is an error naming the file and the field, returned as [`Error::Config`] by the first
//! collective call: the file is read once per process.
//!
//! The table is tuning only. What correctness needs stays in code: the ring allreduce runs only
//! for commutative operations with at least one element per rank, whatever a file says.
//!
//! Without a file, the older `FERRY_COLL_BCAST_LONG`, `FERRY_COLL_BCAST_MIN_RANKS` and
//! `FERRY_COLL_ALLREDUCE_LONG` still move the thresholds of the built-in rules; set together
//! with a file they are an error rather than silently ignored.

use crate::error::Error;
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

/// Broadcast algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BcastAlgorithm {
    /// Binomial tree.
    Binomial,
    /// Binomial scatter, then ring allgather (van de Geijn).
    ScatterAllgather,
}

/// Allreduce algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AllreduceAlgorithm {
    /// Recursive doubling; correct for every operation.
    RecursiveDoubling,
    /// Reduce-scatter then allgather around a ring; commutative operations only.
    Ring,
}

impl fmt::Display for BcastAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BcastAlgorithm::Binomial => "binomial",
            BcastAlgorithm::ScatterAllgather => "scatter_allgather",
        })
    }
}

impl fmt::Display for AllreduceAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AllreduceAlgorithm::RecursiveDoubling => "recursive_doubling",
            AllreduceAlgorithm::Ring => "ring",
        })
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
    commutative: Option<bool>,
    algorithm: A,
    /// Free text for the reader; ignored.
    #[serde(default)]
    #[allow(dead_code)]
    comment: Option<String>,
}

impl<A> Rule<A> {
    fn unconditional(&self) -> bool {
        self.min_bytes.is_none()
            && self.max_bytes.is_none()
            && self.min_ranks.is_none()
            && self.max_ranks.is_none()
            && self.commutative.is_none()
    }

    fn matches(&self, bytes: usize, ranks: usize, commutative: bool) -> bool {
        self.min_bytes.is_none_or(|m| bytes >= m)
            && self.max_bytes.is_none_or(|m| bytes <= m)
            && self.min_ranks.is_none_or(|m| ranks >= m)
            && self.max_ranks.is_none_or(|m| ranks <= m)
            && self.commutative.is_none_or(|c| c == commutative)
    }
}

impl<A: fmt::Display> fmt::Display for Rule<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.algorithm)?;
        let mut conditions = vec![];
        if let Some(c) = self.commutative {
            conditions.push(if c { "commutative" } else { "non-commutative" }.to_string());
        }
        for (name, op, value) in [
            ("bytes", ">=", self.min_bytes),
            ("bytes", "<=", self.max_bytes),
            ("ranks", ">=", self.min_ranks),
            ("ranks", "<=", self.max_ranks),
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
const COLLECTIVES: [&str; 2] = ["bcast", "allreduce"];

/// A selection file as written: every collective optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    bcast: Option<Vec<Rule<BcastAlgorithm>>>,
    #[serde(default)]
    allreduce: Option<Vec<Rule<AllreduceAlgorithm>>>,
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
        if collective == "bcast" && rule.commutative.is_some() {
            return Err(format!(
                "{}: field `commutative` does not apply to bcast",
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
    source: Source,
}

fn first<A: Copy>(rules: &[Rule<A>], bytes: usize, ranks: usize, commutative: bool) -> Option<A> {
    rules
        .iter()
        .find(|r| r.matches(bytes, ranks, commutative))
        .map(|r| r.algorithm)
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
        let (bcast, allreduce) = match source {
            Source::BuiltIn => (file.bcast, file.allreduce),
            Source::File(_) => {
                let built_in = Table::built_in()?;
                (
                    Some(file.bcast.unwrap_or(built_in.bcast)),
                    Some(file.allreduce.unwrap_or(built_in.allreduce)),
                )
            }
        };
        let missing = |c: &str| format!("{name}: no rules for {c}");
        let bcast = bcast.ok_or_else(|| missing("bcast"))?;
        let allreduce = allreduce.ok_or_else(|| missing("allreduce"))?;
        validate(name, "bcast", &bcast)?;
        validate(name, "allreduce", &allreduce)?;
        Ok(Table {
            bcast,
            allreduce,
            source,
        })
    }

    fn built_in() -> Result<Table, String> {
        Table::parse(Source::BuiltIn, BUILT_IN)
    }

    /// The table `get` (an environment lookup) asks for: the file of `FERRY_COLL_SELECTION`,
    /// or the built-in table with the `FERRY_COLL_*` thresholds applied.
    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Table, String> {
        let threshold = |var: &str| -> Result<Option<usize>, String> {
            get(var)
                .map(|v| {
                    v.trim()
                        .parse()
                        .map_err(|_| format!("{var}={v:?} is not a byte or rank count"))
                })
                .transpose()
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
            let text = std::fs::read_to_string(&path)
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

    /// Broadcast of `bytes` over `ranks` ranks.
    pub(crate) fn bcast(&self, bytes: usize, ranks: usize) -> BcastAlgorithm {
        first(&self.bcast, bytes, ranks, true).unwrap_or(BcastAlgorithm::Binomial)
    }

    /// Allreduce of `bytes` in elements of `elem` bytes over `ranks` ranks.
    pub(crate) fn allreduce(
        &self,
        bytes: usize,
        elem: usize,
        ranks: usize,
        commutative: bool,
    ) -> AllreduceAlgorithm {
        match first(&self.allreduce, bytes, ranks, commutative) {
            // Correctness, not tuning: the ring reorders operands and splits the vector into
            // one block of whole elements per rank.
            Some(AllreduceAlgorithm::Ring) if commutative && bytes / elem.max(1) >= ranks => {
                AllreduceAlgorithm::Ring
            }
            _ => AllreduceAlgorithm::RecursiveDoubling,
        }
    }

    /// One line per collective: its rules, first match wins.
    fn summary(&self) -> String {
        fn list<A: fmt::Display>(rules: &[Rule<A>]) -> String {
            let rules: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
            rules.join("; else ")
        }
        format!(
            "bcast: {} | allreduce: {}",
            list(&self.bcast),
            list(&self.allreduce)
        )
    }
}

static TABLE: OnceLock<Result<Table, String>> = OnceLock::new();

/// The table in force, read from the environment on the first call of the process.
pub(crate) fn table() -> Result<&'static Table, Error> {
    TABLE
        .get_or_init(|| Table::from_lookup(|var| std::env::var(var).ok()))
        .as_ref()
        .map_err(|e| Error::Config(e.clone()))
}

/// The selection settings and the rules in force, for `ferry info --params`.
pub(crate) fn describe() -> Vec<(&'static str, String)> {
    let table = match table() {
        Ok(table) => table,
        Err(e) => return vec![(SELECTION_VAR, format!("invalid: {e}"))],
    };
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

    /// The choices `collectives.rs` made before the table, with MPICH's thresholds.
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
                    t.bcast(bytes, ranks),
                    old_bcast(bytes, ranks),
                    "{bytes} B, {ranks} ranks"
                );
            }
        }
        assert_eq!(t.bcast(12288, 8), ScatterAllgather);
        assert_eq!(t.bcast(12287, 8), Binomial);
        assert_eq!(t.bcast(12288, 7), Binomial);
        for bytes in [0, 8, 2047, 2048, 2049, 1 << 20] {
            for ranks in [1, 2, 7, 8, 9, 255, 256, 257, 2047, 2048, 2049] {
                for elem in [1, 8] {
                    for commutative in [false, true] {
                        assert_eq!(
                            t.allreduce(bytes, elem, ranks, commutative),
                            old_allreduce(bytes, elem, ranks, commutative),
                            "{bytes} B of {elem}-byte elements, {ranks} ranks, commutative {commutative}"
                        );
                    }
                }
            }
        }
        assert_eq!(t.allreduce(2048, 8, 256, true), Ring);
        assert_eq!(t.allreduce(2048, 8, 257, true), RecursiveDoubling);
        assert_eq!(t.allreduce(2047, 1, 2, true), RecursiveDoubling);
        assert_eq!(t.allreduce(2048, 1, 2, false), RecursiveDoubling);
    }

    #[test]
    fn old_variables_move_the_built_in_thresholds() {
        let t = Table::from_lookup(env(&[
            (BCAST_LONG_VAR, "100"),
            (BCAST_MIN_RANKS_VAR, "2"),
            (ALLREDUCE_LONG_VAR, "64"),
        ]))
        .unwrap();
        assert_eq!(t.bcast(100, 2), ScatterAllgather);
        assert_eq!(t.bcast(99, 2), Binomial);
        assert_eq!(t.allreduce(64, 4, 4, true), Ring);
        assert_eq!(t.allreduce(63, 1, 4, true), RecursiveDoubling);
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
        assert_eq!(t.bcast(1, 2), ScatterAllgather);
        assert_eq!(t.bcast(0, 1), ScatterAllgather);
        assert_eq!(t.allreduce(8, 4, 2, true), Ring);
        // Correctness guards hold whatever the file says.
        assert_eq!(t.allreduce(8, 4, 3, true), RecursiveDoubling);
        assert_eq!(t.allreduce(1 << 20, 4, 2, false), RecursiveDoubling);
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
        assert_eq!(t.bcast(9, 4), Binomial);
        assert_eq!(t.bcast(10, 4), ScatterAllgather);
        assert_eq!(t.bcast(20, 4), ScatterAllgather);
        assert_eq!(t.bcast(21, 4), Binomial);
        assert_eq!(t.bcast(15, 5), Binomial);
        // allreduce was left out: the built-in rules.
        assert_eq!(t.allreduce(2048, 8, 8, true), Ring);
        assert_eq!(t.allreduce(2047, 8, 8, true), RecursiveDoubling);
    }

    #[test]
    fn malformed_files_name_the_file_and_the_field() {
        for (name, text, expect) in [
            (
                "collective",
                r#"{ "reduce": [{ "algorithm": "binomial" }] }"#,
                "reduce",
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
        let params = describe();
        assert_eq!(params[0].0, SELECTION_VAR);
    }

    #[test]
    fn summary_lists_the_rules_in_order() {
        let t = Table::built_in().unwrap();
        assert_eq!(
            t.summary(),
            "bcast: scatter_allgather if bytes >= 12288, ranks >= 8; else binomial | \
             allreduce: ring if commutative, bytes >= 2048; else recursive_doubling"
        );
    }
}
