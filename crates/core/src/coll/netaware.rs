//! Network-aware broadcasts: schedules built by a heterogeneous scheduler (FNF, FEF,
//! ECEF, look-ahead, TTCC) from a cost matrix, run by the same executor as every collective.
//!
//! Per call site: [`Comm::bcast_with`](crate::Comm::bcast_with) takes a scheduler and a cost
//! model. For every broadcast of a job: `FERRY_BCAST_SCHEDULER` names the scheduler (or `auto`)
//! and `FERRY_BCAST_COSTS` the matrix, the JSON that `ferry weather --export` writes (fields
//! `n`, `latency`, `bandwidth`, n×n with `null` on the diagonal, and `scheduler`, the weather's
//! choice: TTCC when the forecast's median relative error exceeds its threshold, else ECEF).
//! `auto` takes that choice, so a job on an erratic network gets the two-tree broadcast. The
//! matrix is indexed by world rank; a communicator sees the rows of its members.

use crate::error::Error;
use ferry_sched::hetero::{self, BcastScheduler, CostMatrix, CostModel};
use ferry_sched::{Rank, Schedule};
use std::path::Path;

/// The job's broadcast scheduler and cost matrix, from the environment.
pub(crate) struct NetBcast {
    scheduler: Box<dyn BcastScheduler + Send + Sync>,
    costs: CostMatrix,
}

impl std::fmt::Debug for NetBcast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetBcast")
            .field("scheduler", &self.scheduler.name())
            .field("ranks", &self.costs.size())
            .finish()
    }
}

/// The broadcast that `FERRY_BCAST_SCHEDULER` and `FERRY_BCAST_COSTS` ask for (none when both
/// are unset); an error names the variable and what is wrong with it.
pub(crate) fn from_settings(
    scheduler: Option<&str>,
    costs: Option<&str>,
) -> Result<Option<NetBcast>, String> {
    let scheduler = scheduler.map(str::trim).filter(|s| !s.is_empty());
    let costs = costs.map(str::trim).filter(|s| !s.is_empty());
    let (name, file) = match (scheduler, costs) {
        (None, None) => return Ok(None),
        (Some(name), None) => {
            return Err(format!(
                "FERRY_BCAST_SCHEDULER={name} needs FERRY_BCAST_COSTS, the cost matrix (a `ferry weather --export` file)"
            ))
        }
        (name, Some(path)) => {
            let text = crate::coll::settings::read_file(path)
                .map_err(|e| format!("FERRY_BCAST_COSTS={path}: cannot read it: {e}"))?;
            let file = parse_costs(Path::new(path), &text)?;
            (name.unwrap_or("auto").to_string(), file)
        }
    };
    let chosen = match name.as_str() {
        "auto" => file.choice.clone().ok_or_else(|| {
            "FERRY_BCAST_SCHEDULER=auto: the cost file has no \"scheduler\" field".to_string()
        })?,
        other => other.to_string(),
    };
    let scheduler = hetero::scheduler(&chosen).ok_or_else(|| {
        format!(
            "FERRY_BCAST_SCHEDULER={chosen:?} is not a scheduler ferry knows: expected auto or one of {}",
            hetero::SCHEDULERS.join(", ")
        )
    })?;
    Ok(Some(NetBcast {
        scheduler,
        costs: file.costs,
    }))
}

/// A cost file: the matrix and the weather's scheduler choice.
struct CostFile {
    costs: CostMatrix,
    choice: Option<String>,
}

#[derive(serde::Deserialize)]
struct CostJson {
    n: usize,
    latency: Vec<Vec<Option<f64>>>,
    bandwidth: Vec<Vec<Option<f64>>>,
    scheduler: Option<String>,
}

fn parse_costs(path: &Path, text: &str) -> Result<CostFile, String> {
    let at = path.display();
    let json: CostJson = serde_json::from_str(text).map_err(|e| format!("cost file {at}: {e}"))?;
    let n = json.n;
    for (name, rows) in [("latency", &json.latency), ("bandwidth", &json.bandwidth)] {
        if rows.len() != n || rows.iter().any(|r| r.len() != n) {
            return Err(format!("cost file {at}: `{name}` is not {n} × {n}"));
        }
    }
    let mut bad = None;
    let costs = CostMatrix::from_fn(n, |i, j| {
        let (l, b) = (json.latency[i][j], json.bandwidth[i][j]);
        match (l, b) {
            (Some(l), Some(b)) if l >= 0.0 && l.is_finite() && b > 0.0 => (l, b),
            _ => {
                bad.get_or_insert((i, j));
                (0.0, 1.0)
            }
        }
    });
    if let Some((i, j)) = bad {
        return Err(format!(
            "cost file {at}: entry ({i}, {j}) needs a latency ≥ 0 and a bandwidth > 0"
        ));
    }
    Ok(CostFile {
        costs,
        choice: json.scheduler,
    })
}

/// The rows and columns of a cost model that belong to a communicator's members.
pub(crate) struct Members<'a> {
    pub costs: &'a dyn CostModel,
    /// World rank of each member.
    pub world_of: &'a [u32],
}

impl CostModel for Members<'_> {
    fn size(&self) -> usize {
        self.world_of.len()
    }
    fn latency(&self, from: Rank, to: Rank) -> f64 {
        self.costs
            .latency(self.world_of[from] as usize, self.world_of[to] as usize)
    }
    fn bandwidth(&self, from: Rank, to: Rank) -> f64 {
        self.costs
            .bandwidth(self.world_of[from] as usize, self.world_of[to] as usize)
    }
}

impl NetBcast {
    /// Rank `me`'s schedule for broadcasting `bytes` from `root` among the members.
    pub(crate) fn schedule(
        &self,
        world_of: &[u32],
        me: Rank,
        root: Rank,
        bytes: usize,
    ) -> Result<Schedule, Error> {
        let needed = world_of.iter().max().map_or(0, |&w| w as usize + 1);
        if self.costs.size() < needed {
            return Err(Error::Config(format!(
                "FERRY_BCAST_COSTS covers {} ranks, but the job has rank {}",
                self.costs.size(),
                needed - 1
            )));
        }
        let members = Members {
            costs: &self.costs,
            world_of,
        };
        Ok(schedule_for(
            self.scheduler.as_ref(),
            &members,
            me,
            root,
            bytes,
        ))
    }
}

/// Rank `me`'s part of `scheduler`'s broadcast plan on `costs`.
pub(crate) fn schedule_for(
    scheduler: &dyn BcastScheduler,
    costs: &dyn CostModel,
    me: Rank,
    root: Rank,
    bytes: usize,
) -> Schedule {
    scheduler.schedules(costs, root, bytes).swap_remove(me)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: usize, scheduler: &str) -> String {
        let cells = |v: f64| {
            (0..n)
                .map(|i| {
                    (0..n)
                        .map(|j| if i == j { None } else { Some(v) })
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        serde_json::json!({
            "n": n,
            "latency": cells(1e-5),
            "bandwidth": cells(1e9),
            "scheduler": scheduler,
        })
        .to_string()
    }

    fn write(name: &str, text: &str) -> String {
        let path =
            std::env::temp_dir().join(format!("ferry-costs-{}-{name}.json", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn auto_takes_the_weathers_choice_and_names_override_it() {
        let path = write("auto", &file(3, "ttcc"));
        let net = from_settings(None, Some(&path)).unwrap().unwrap();
        assert_eq!(net.scheduler.name(), "ttcc");
        let net = from_settings(Some("fef"), Some(&path)).unwrap().unwrap();
        assert_eq!(net.scheduler.name(), "fef");
        assert!(from_settings(None, None).unwrap().is_none());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn bad_settings_and_files_are_named() {
        let err = |s: Option<&str>, c: Option<&str>| from_settings(s, c).err().unwrap();
        assert!(err(Some("ecef"), None).contains("needs FERRY_BCAST_COSTS"));
        assert!(err(None, Some("/nonexistent/costs.json")).contains("cannot read"));
        let endless = err(None, Some("/dev/zero"));
        assert!(endless.contains("larger than 16777216 bytes"), "{endless}");
        let good = write("good", &file(2, "ecef"));
        assert!(err(Some("fastest"), Some(&good)).contains("expected auto or one of"));
        let square = write("square", &file(3, "ecef").replace("\"n\":3", "\"n\":4"));
        assert!(
            err(None, Some(&square)).contains("is not 4 × 4"),
            "{}",
            err(None, Some(&square))
        );
        let hole = write(
            "hole",
            &serde_json::json!({
                "n": 2,
                "latency": [[null, 1e-5], [null, null]],
                "bandwidth": [[null, 1e9], [1e9, null]],
            })
            .to_string(),
        );
        assert!(err(None, Some(&hole)).contains("entry (1, 0)"));
        assert!(err(Some("auto"), Some(&hole)).contains("entry (1, 0)"));
        for p in [good, square, hole] {
            let _ = std::fs::remove_file(p);
        }
    }

    #[test]
    fn a_communicator_sees_its_members_rows() {
        let all = CostMatrix::from_fn(4, |i, j| ((10 * i + j) as f64, 1.0));
        let members = Members {
            costs: &all,
            world_of: &[3, 1],
        };
        assert_eq!(members.size(), 2);
        assert_eq!(members.latency(0, 1), 31.0);
        assert_eq!(members.latency(1, 0), 13.0);
    }
}
