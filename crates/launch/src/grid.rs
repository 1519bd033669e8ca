//! Launching one job across a grid (`ferry run --grid grid.toml`), in the one-machine testbed.
//!
//! - Rank `r` runs on the grid file's rank slot `r mod slots` (slots: host by host, `ranks`
//!   per host, cluster by cluster), as `ip netns exec <prefix><host> PROG ARGS` with
//!   `FERRY_GRID_PLACE` (its [`Placement`]), `FERRY_TRANSPORT=tcp` and `FERRY_CLUSTER` (the
//!   cluster's index, for hierarchical collectives) in its environment; on a host with rails
//!   (the grid file's `[[cluster.link]]`s) also `FERRY_RAIL_ADDRS` ([`RAIL_ADDRS_ENV`]): the
//!   host's address on every rail, rail 0 (its `addr`) first, comma-separated.
//! - The bootstrap server listens on a public address of the grid (the first public host, else
//!   the first front node): its socket is opened from inside that host's namespace, so private
//!   ranks reach it through their front node's NAT (bootstrap is rank-initiated) and the
//!   launcher itself stays in its own namespace.
//! - Each private cluster that holds ranks gets `ferry relay` on its front node, started here
//!   and stopped when the job ends, reading the job's relay key (HMAC(job key,
//!   "ferry-relay-key-v1"), never the job key) from `<jobs dir>/<job:016x>.key`, mode 0600.
//!
//! On real machines ([`GridLaunch::over_ssh`], see `crate::grid_ssh`) the same steps run over ssh:
//! `ferry relay --key-stdin` on each front node that serves ranks, with the relay key on ssh's
//! standard input (closing it ends the relay), and a node daemon on each host (`crate::node`),
//! hosts of private clusters reached through their front node (ssh's `ProxyJump`), each host's
//! ranks with its placement in their environment.

use crate::output::{self, Sink};
use crate::{sys, LaunchError};
use ferry_grid::topology::Kind;
use ferry_grid::topology::{encode_rail_addrs, RAIL_ADDRS_ENV};
use ferry_grid::{Placement, Topology};
use ferry_wire::JobKey;
use std::ffi::OsString;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to start a job across a grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridLaunch {
    /// The grid.
    pub topology: Topology,
    /// Name prefix of the standing testbed whose namespaces are the grid's hosts (`None` over
    /// ssh). The caller finds it (`ferry testbed`); the launcher does not know testbeds.
    pub prefix: Option<String>,
    /// The `ferry` executable, whose `relay` subcommand runs on the front nodes.
    pub ferry: PathBuf,
    /// More arguments for every `ferry relay` (e.g. `--copy buffered`).
    pub relay_args: Vec<String>,
    /// Whether the relays spend CPU time of their own on forwarding: all but `--copy nat`,
    /// where the front nodes' packet forwarding does it in the senders' time. Ranks spin less
    /// when ranks and busy relays outnumber the cores.
    pub relays_busy: bool,
    /// Run on the real machines the grid file names, over ssh (`FERRY_SSH`), instead of in the
    /// testbed's namespaces.
    pub over_ssh: bool,
}

/// `FERRY_SPIN` for ranks that share the machine's cores with more processes than cores (what
/// `ferry_core::init` picks for a job larger than the machine).
const OVERSUBSCRIBED_SPIN: &str = "100";

/// A grid job's placement, bootstrap socket and relays; dropping it stops the relays and
/// removes the key directory.
pub(crate) struct GridJob {
    prefix: String,
    /// Per rank: placement and cluster index.
    ranks: Vec<(Placement, usize)>,
    /// Per rank: its [`RAIL_ADDRS_ENV`] value, if its host has rails.
    rails: Vec<Option<String>>,
    /// `FERRY_RAILS` for every rank when the job does not set it ([`relay_rails`]).
    relay_rails: Option<u16>,
    listener: Option<TcpListener>,
    relays: Vec<Relay>,
    /// See [`GridLaunch::relays_busy`].
    relays_busy: bool,
    jobs_dir: PathBuf,
}

struct Relay {
    front: String,
    child: Child,
    reported: bool,
    /// The thread passing its stderr on, joined once it ended, so that its last lines (the
    /// relay's closing status) are out before the launcher exits.
    output: Option<std::thread::JoinHandle<()>>,
}

pub(crate) fn grid_error(what: impl std::fmt::Display) -> LaunchError {
    LaunchError::Grid(what.to_string())
}

/// The [`RAIL_ADDRS_ENV`] value of a rank placed on `host`: `None` when the host has one rail.
pub(crate) fn rail_env(topo: &Topology, host: &str) -> Option<String> {
    topo.clusters
        .iter()
        .flat_map(|c| &c.hosts)
        .find(|h| h.name == host)
        .filter(|h| !h.rails.is_empty())
        .map(|h| encode_rail_addrs(&h.rail_addrs()))
}

/// Rails per pair when the job does not say (`FERRY_RAILS` unset) and a cluster holding ranks
/// has several relays: one per relay of the cluster with the most, so that every relayed pair
/// has a rail through each relay of its target's cluster (trunking, and fail-over when one
/// dies), and never fewer than a host's rail addresses. `None` with one relay per cluster.
pub(crate) fn relay_rails(topo: &Topology, clusters: &[usize]) -> Option<u16> {
    let used = || clusters.iter().filter_map(|&ci| topo.clusters.get(ci));
    let relays = used().map(|c| c.fronts().count()).max().unwrap_or(0);
    if relays < 2 {
        return None;
    }
    let links = used().map(|c| c.links.len() + 1).max().unwrap_or(1);
    u16::try_from(relays.max(links)).ok()
}

/// The folder of job `job`'s relay key (removed with the job, or by its watchdog).
pub(crate) fn relay_key_dir(job: u64) -> PathBuf {
    std::env::temp_dir().join(format!("ferry-relay-{}-{job:016x}", std::process::id()))
}

impl GridJob {
    /// Places `np` ranks, opens the bootstrap socket and starts the relays of job `job`.
    pub(crate) fn prepare(
        grid: &GridLaunch,
        np: u32,
        job: u64,
        key: &JobKey,
    ) -> Result<GridJob, LaunchError> {
        let topo = &grid.topology;
        let places = topo.placements();
        if places.is_empty() {
            return Err(grid_error("the grid has no hosts"));
        }
        let first = &places[0].host;
        let prefix = grid.prefix.clone().ok_or_else(|| {
            grid_error(format!(
                "no testbed prefix for host {first} (the caller names the standing testbed)"
            ))
        })?;
        let index_of = |cluster: &str| {
            topo.clusters
                .iter()
                .position(|c| c.name == cluster)
                .unwrap_or(0)
        };
        let ranks: Vec<(Placement, usize)> = (0..np as usize)
            .map(|r| {
                let p = places[r % places.len()].clone();
                let ci = index_of(&p.cluster);
                (p, ci)
            })
            .collect();
        let rails = ranks.iter().map(|(p, _)| rail_env(topo, &p.host)).collect();
        let used: Vec<usize> = ranks.iter().map(|(_, ci)| *ci).collect();
        let relay_rails = relay_rails(topo, &used);

        // The bootstrap server: on the first public host, else on the first front node.
        let public = topo
            .clusters
            .iter()
            .find(|c| c.kind == Kind::Public && !c.hosts.is_empty())
            .map(|c| (c.hosts[0].name.clone(), c.hosts[0].addr))
            .or_else(|| {
                topo.clusters
                    .iter()
                    .find_map(|c| c.front.as_ref().map(|f| (f.name.clone(), f.public_addr)))
            })
            .ok_or_else(|| grid_error("the grid has no public host or front node"))?;
        let ns = format!("{prefix}{}", public.0);
        let listener = crate::netns::in_namespace(&ns, || TcpListener::bind((public.1, 0)))
            .map_err(|e| {
                grid_error(format!(
                    "cannot open the bootstrap socket on {} ({ns}): {e}",
                    public.1
                ))
            })?;

        // The relay key, readable by its owner only.
        let jobs_dir = relay_key_dir(job);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&jobs_dir)
            .map_err(|e| grid_error(format!("{}: {e}", jobs_dir.display())))?;
        let mut grid_job = GridJob {
            prefix,
            ranks,
            rails,
            relay_rails,
            listener: Some(listener),
            relays: Vec::new(),
            relays_busy: grid.relays_busy,
            jobs_dir,
        };
        let key_file = grid_job.jobs_dir.join(format!("{job:016x}.key"));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key_file)
            .and_then(|mut f| writeln!(f, "{}", ferry_wire::relay::relay_key(key).to_hex()))
            .map_err(|e| grid_error(format!("{}: {e}", key_file.display())))?;

        // A relay on every front node of each private cluster that holds ranks.
        let fronts = topo.clusters.iter().enumerate().flat_map(|(ci, c)| {
            let used = c.kind == Kind::Private && grid_job.ranks.iter().any(|(_, i)| *i == ci);
            c.fronts().filter(move |_| used).map(move |f| (c, f))
        });
        for (c, front) in fronts {
            let ns = format!("{}{}", grid_job.prefix, front.name);
            let mut command = Command::new("ip");
            command
                .args(["netns", "exec", &ns])
                .arg(&grid.ferry)
                .args(["relay", "--listen", &format!("0.0.0.0:{}", c.relay_port)])
                .arg("--jobs-dir")
                .arg(&grid_job.jobs_dir)
                .args(&grid.relay_args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .process_group(0);
            crate::sys::end_with_launcher(&mut command, libc::SIGTERM);
            let mut child = command.spawn().map_err(|e| {
                grid_error(format!(
                    "cannot start `ferry relay` on {} ({ns}): {e}",
                    front.name
                ))
            })?;
            // Relay messages go to our stderr, tagged; the thread ends with the relay.
            let output = child.stderr.take().and_then(|pipe| {
                output::forward(pipe, Sink::Stderr, Some(format!("[relay {}] ", front.name))).ok()
            });
            grid_job.relays.push(Relay {
                front: front.name.clone(),
                child,
                reported: false,
                output,
            });
        }
        Ok(grid_job)
    }

    /// The bootstrap socket (once).
    pub(crate) fn take_listener(&mut self) -> Option<TcpListener> {
        self.listener.take()
    }

    /// The command that starts `rank`: `ip netns exec <ns> PROG` with its grid environment.
    pub(crate) fn command(&self, rank: u32, program: &OsString) -> Command {
        let (place, ci) = &self.ranks[rank as usize];
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec"])
            .arg(format!("{}{}", self.prefix, place.host))
            .arg(program)
            .env("FERRY_TRANSPORT", "tcp")
            .env("FERRY_CLUSTER", ci.to_string())
            .env(ferry_grid::PLACE_ENV, place.encode());
        if let Some(rails) = &self.rails[rank as usize] {
            command.env(RAIL_ADDRS_ENV, rails);
        }
        if let Some(rails) = self.relay_rails {
            if std::env::var_os("FERRY_RAILS").is_none() {
                command.env("FERRY_RAILS", rails.to_string());
            }
        }
        // The testbed's hosts share this machine's cores, with the relays: a rank sizing its
        // spin by the job alone would spin as if it had a core of its own and starve the relays
        // (8 B through a relay: 130-160 us against 23 us with the oversubscribed spin).
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        // Their spin yields the core between polls, for the same reason: relay path with other
        // work on the machine (load 5-7), 8 B one-way 31 -> 14 us, 64 KiB 71 -> 50 us; on an
        // idle core sched_yield returns at once and the spin answers as quickly as before.
        let busy_relays = if self.relays_busy {
            self.relays.len()
        } else {
            0
        };
        if self.ranks.len() + busy_relays > cores {
            if std::env::var_os("FERRY_SPIN").is_none() {
                command.env("FERRY_SPIN", OVERSUBSCRIBED_SPIN);
            }
            if std::env::var_os("FERRY_SPIN_YIELD").is_none() {
                command.env("FERRY_SPIN_YIELD", "1");
            }
        }
        command
    }

    /// The host of `rank`.
    pub(crate) fn host(&self, rank: u32) -> &str {
        &self.ranks[rank as usize].0.host
    }

    /// Says once on stderr when a relay has ended (its ranks fail on their own, with
    /// "relay on <front> went away").
    pub(crate) fn check_relays(&mut self) {
        for relay in &mut self.relays {
            if relay.reported {
                continue;
            }
            if let Ok(Some(status)) = relay.child.try_wait() {
                relay.reported = true;
                eprintln!("ferry run: the relay on {} ended ({status})", relay.front);
            }
        }
    }
}

impl Drop for GridJob {
    fn drop(&mut self) {
        for relay in &mut self.relays {
            if relay.child.try_wait().ok().flatten().is_none() {
                sys::kill_process(relay.child.id(), libc::SIGTERM);
            }
        }
        let until = Instant::now() + Duration::from_secs(2);
        for relay in &mut self.relays {
            while relay.child.try_wait().ok().flatten().is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if relay.child.try_wait().ok().flatten().is_none() {
                sys::kill_process(relay.child.id(), libc::SIGKILL);
                let _ = relay.child.wait();
            }
            // The relay is gone, so its pipe ends: the join is quick.
            if let Some(thread) = relay.output.take() {
                let _ = thread.join();
            }
        }
        let _ = std::fs::remove_dir_all(&self.jobs_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rail_addrs_for_hosts_with_rails_only() {
        let topo = Topology::parse(
            "g",
            r#"
[[cluster]]
name = "r"
kind = "public"
[[cluster.link]]
subnet = "10.201.0.0/24"
[[cluster.link]]
subnet = "10.202.0.0/24"
[[cluster.host]]
name = "r1"
addr = "198.18.2.1"
rails = ["10.201.0.1", "10.202.0.1"]
[[cluster]]
name = "p"
kind = "public"
[[cluster.host]]
name = "p1"
addr = "198.18.1.1"
"#,
        )
        .expect("the grid parses");
        assert_eq!(
            rail_env(&topo, "r1").as_deref(),
            Some("198.18.2.1,10.201.0.1,10.202.0.1")
        );
        assert_eq!(rail_env(&topo, "p1"), None);
        assert_eq!(rail_env(&topo, "nobody"), None);
        assert_eq!(RAIL_ADDRS_ENV, "FERRY_RAIL_ADDRS");
    }

    #[test]
    fn several_relays_give_a_rail_through_each() {
        let grid = |name: &str| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../testbed/grids")
                .join(name);
            Topology::load(&path).expect("the grid parses")
        };
        let relays = grid("relays.toml");
        // a has three relays, b two: three rails, also when only b holds ranks.
        assert_eq!(relay_rails(&relays, &[0, 1]), Some(3));
        assert_eq!(relay_rails(&relays, &[1]), Some(2));
        // One relay per cluster: the job's own rail count.
        assert_eq!(relay_rails(&grid("three.toml"), &[0, 1, 2]), None);
        assert_eq!(relay_rails(&relays, &[]), None);
    }
}
