//! What the collectives read from the environment, read once with the rest of [`Config`]
//! (crate::config): the selection table, the network-aware broadcast and each rank's cluster.
//!
//! [`Config`]: crate::Config

use crate::coll::netaware::NetBcast;
use crate::coll::selection::Table;
use crate::error::Error;
use std::sync::Arc;

/// This rank's cluster id, set per rank by a launcher that knows the topology.
const CLUSTER_VAR: &str = "FERRY_CLUSTER";
/// Cluster ids of all ranks, comma-separated in rank order (`0,0,1,1`): one value for the whole
/// job, so a test on one host can fake clusters. `FERRY_CLUSTER` wins where both are set.
const CLUSTERS_VAR: &str = "FERRY_CLUSTERS";
const SCHEDULER_VAR: &str = "FERRY_BCAST_SCHEDULER";
const COSTS_VAR: &str = "FERRY_BCAST_COSTS";

/// The collectives' settings.
#[derive(Debug, Clone)]
pub(crate) struct CollSettings {
    /// The rules that choose each call's algorithm (`FERRY_COLL_…`, see crate::coll::selection).
    pub selection: Arc<Table>,
    /// The broadcast every `bcast` of the job uses, when `FERRY_BCAST_COSTS` names a matrix.
    pub net_bcast: Option<Arc<NetBcast>>,
    /// Which cluster each rank is in, for the hierarchical collectives.
    pub clusters: ClusterIds,
    /// The two broadcast variables as given, for `ferry info --params`.
    bcast_vars: [Option<String>; 2],
}

/// Which cluster each rank is in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum ClusterIds {
    /// Neither variable set: every rank in cluster 0.
    #[default]
    Unset,
    /// `FERRY_CLUSTER`: this rank's own id.
    Own(u32),
    /// `FERRY_CLUSTERS`: every rank's id, in rank order.
    PerRank(Vec<u32>),
}

impl Default for CollSettings {
    fn default() -> Self {
        CollSettings {
            // The built-in table is part of the binary, and a test checks that it parses.
            selection: Arc::new(Table::built_in().expect("the built-in selection table parses")),
            net_bcast: None,
            clusters: ClusterIds::Unset,
            bcast_vars: [None, None],
        }
    }
}

impl CollSettings {
    /// Reads the settings through `get`; an error names the variable and what is wrong.
    pub(crate) fn read(get: &impl Fn(&str) -> Option<String>) -> Result<CollSettings, Error> {
        let word = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let bcast_vars = [word(SCHEDULER_VAR), word(COSTS_VAR)];
        let net_bcast = crate::coll::netaware::from_settings(
            bcast_vars[0].as_deref(),
            bcast_vars[1].as_deref(),
        )
        .map_err(Error::Config)?;
        Ok(CollSettings {
            selection: Arc::new(Table::from_lookup(get).map_err(Error::Config)?),
            net_bcast: net_bcast.map(Arc::new),
            clusters: ClusterIds::read(word(CLUSTER_VAR), word(CLUSTERS_VAR))?,
            bcast_vars,
        })
    }

    /// The settings and the rules in force, for `ferry info --params`.
    pub(crate) fn describe(&self) -> Vec<(&'static str, String)> {
        let mut params = crate::coll::selection::describe(&self.selection);
        let (own, per_rank) = match &self.clusters {
            ClusterIds::Unset => (None, None),
            ClusterIds::Own(id) => (Some(id.to_string()), None),
            ClusterIds::PerRank(ids) => (None, Some(join(ids))),
        };
        for (var, value) in [(CLUSTER_VAR, own), (CLUSTERS_VAR, per_rank)] {
            params.push((var, value.unwrap_or_else(|| "- (cluster 0)".into())));
        }
        let [scheduler, costs] = &self.bcast_vars;
        let scheduler = match (scheduler, costs) {
            (Some(name), _) => name.clone(),
            (None, Some(_)) => "auto (the cost file's choice)".into(),
            (None, None) => "unset (the selection table)".into(),
        };
        params.push((SCHEDULER_VAR, scheduler));
        params.push((COSTS_VAR, costs.clone().unwrap_or_else(|| "unset".into())));
        params
    }
}

impl ClusterIds {
    fn read(own: Option<String>, per_rank: Option<String>) -> Result<ClusterIds, Error> {
        let bad =
            |var: &str, v: &str| Error::Config(format!("{var}={v:?} is not a cluster id list"));
        if let Some(v) = own {
            return v
                .trim()
                .parse()
                .map(ClusterIds::Own)
                .map_err(|_| bad(CLUSTER_VAR, &v));
        }
        let Some(list) = per_rank else {
            return Ok(ClusterIds::Unset);
        };
        list.split(',')
            .map(|c| c.trim().parse())
            .collect::<Result<_, _>>()
            .map(ClusterIds::PerRank)
            .map_err(|_| bad(CLUSTERS_VAR, &list))
    }

    /// The cluster of `rank` (this process's rank in its world); 0 when neither variable is set.
    pub(crate) fn of(&self, rank: u32) -> Result<u32, Error> {
        match self {
            ClusterIds::Unset => Ok(0),
            ClusterIds::Own(id) => Ok(*id),
            ClusterIds::PerRank(ids) => ids.get(rank as usize).copied().ok_or_else(|| {
                Error::Config(format!(
                    "{CLUSTERS_VAR}={:?} names {} clusters, none for rank {rank}",
                    join(ids),
                    ids.len()
                ))
            }),
        }
    }
}

fn join(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// A settings file (a selection table, a cost matrix) read whole: at most
/// `ferry_wire::bounded::MAX_CONFIG_FILE` bytes of text, so that `/dev/zero` or a wrong file
/// is an error naming the cap instead of a rank that takes all memory.
pub(crate) fn read_file(path: &str) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    ferry_wire::bounded::read_text(file, ferry_wire::bounded::MAX_CONFIG_FILE)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<CollSettings, Error> {
        CollSettings::read(&|name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn cluster_ids_come_from_either_variable() {
        assert_eq!(read(&[]).unwrap().clusters.of(5).unwrap(), 0);
        let own = read(&[(CLUSTER_VAR, " 3 "), (CLUSTERS_VAR, "0,1")]).unwrap();
        assert_eq!(own.clusters.of(7).unwrap(), 3, "FERRY_CLUSTER wins");
        let listed = read(&[(CLUSTERS_VAR, "0, 0,1,1")]).unwrap();
        assert_eq!(listed.clusters.of(2).unwrap(), 1);
        let e = listed.clusters.of(4).unwrap_err().to_string();
        assert!(e.contains("names 4 clusters, none for rank 4"), "{e}");
    }

    #[test]
    fn bad_settings_are_errors_that_name_the_variable() {
        for (pairs, expect) in [
            (vec![(CLUSTER_VAR, "east")], "FERRY_CLUSTER=\"east\""),
            (vec![(CLUSTERS_VAR, "0,x")], "FERRY_CLUSTERS=\"0,x\""),
            (vec![(SCHEDULER_VAR, "ecef")], "needs FERRY_BCAST_COSTS"),
            (
                vec![(COSTS_VAR, "/nonexistent/c.json")],
                "/nonexistent/c.json",
            ),
            (
                vec![("FERRY_COLL_SELECTION", "/nonexistent/s.json")],
                "/nonexistent/s.json",
            ),
        ] {
            let e = read(&pairs).unwrap_err().to_string();
            assert!(e.contains(expect), "{pairs:?}: {e}");
        }
    }

    #[test]
    fn params_show_what_is_in_force() {
        let params = read(&[(CLUSTERS_VAR, "0,1")]).unwrap().describe();
        let get = |var: &str| params.iter().find(|(n, _)| *n == var).unwrap().1.clone();
        assert_eq!(params[0].0, "FERRY_COLL_SELECTION");
        assert_eq!(get(CLUSTERS_VAR), "0,1");
        assert_eq!(get(CLUSTER_VAR), "- (cluster 0)");
        assert_eq!(get(SCHEDULER_VAR), "unset (the selection table)");
    }
}
