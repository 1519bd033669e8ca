//! A grid job on its real machines (`ferry run --grid` over ssh, see [`over_ssh`]): the
//! relays on the front nodes and the node daemons' plan.

use crate::grid::{grid_error, rail_env, GridLaunch};
use crate::output::{self, Sink};
use crate::{sys, LaunchError};
use ferry_grid::topology::{Kind, RAIL_ADDRS_ENV};
use ferry_wire::JobKey;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The relays of a grid job on real front nodes, each an ssh session whose standard input we
/// hold: dropping this closes them, which ends the relays.
pub(crate) struct SshRelays {
    relays: Vec<SshRelay>,
}

struct SshRelay {
    front: String,
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    reported: bool,
}

impl SshRelays {
    /// Says once on stderr when a relay's session has ended.
    pub(crate) fn check(&mut self) {
        for relay in &mut self.relays {
            if relay.reported {
                continue;
            }
            if let Ok(Some(status)) = relay.child.try_wait() {
                relay.reported = true;
                eprintln!(
                    "ferry run: the relay on {} ended ({status}); its cluster's ranks can no longer be reached",
                    relay.front
                );
            }
        }
    }
}

impl Drop for SshRelays {
    fn drop(&mut self) {
        for relay in &mut self.relays {
            relay.stdin = None;
        }
        let until = Instant::now() + Duration::from_secs(2);
        for relay in &mut self.relays {
            while relay.child.try_wait().ok().flatten().is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if relay.child.try_wait().ok().flatten().is_none() {
                let _ = relay.child.kill();
                let _ = relay.child.wait();
            }
        }
    }
}

/// A grid job on the real machines of its grid file: a node daemon per host with ranks (rank
/// `r` on the file's slot `r mod slots`, as in the testbed), reached at its `ssh` destination
/// and, in a private cluster, through the front node; and `ferry relay` started over `shell`
/// on every front node whose cluster holds ranks, with the job's relay key on its standard
/// input.
pub(crate) fn over_ssh(
    grid: &GridLaunch,
    np: u32,
    job: u64,
    key: &JobKey,
    shell: &[String],
) -> Result<(crate::remote::RemoteLaunch, SshRelays), LaunchError> {
    use crate::remote::{NodePlan, RemoteLaunch};
    let topo = &grid.topology;
    let places = topo.placements();
    if places.is_empty() {
        return Err(grid_error("the grid has no hosts"));
    }
    let mut nodes: Vec<NodePlan> = Vec::new();
    let mut clusters_used = Vec::new();
    for rank in 0..np {
        let place = &places[rank as usize % places.len()];
        if let Some(node) = nodes.iter_mut().find(|n| n.host == place.host) {
            node.ranks.push(rank);
            continue;
        }
        let (ci, cluster) = topo
            .clusters
            .iter()
            .enumerate()
            .find(|(_, c)| c.name == place.cluster)
            .ok_or_else(|| grid_error(format!("host {} has no cluster", place.host)))?;
        let host = cluster.hosts.iter().find(|h| h.name == place.host);
        let front = cluster
            .front
            .as_ref()
            .filter(|_| cluster.kind == Kind::Private);
        let mut env = vec![
            ("FERRY_CLUSTER".to_string(), ci.to_string()),
            (ferry_grid::PLACE_ENV.to_string(), place.encode()),
        ];
        if let Some(rails) = rail_env(topo, &place.host) {
            env.push((RAIL_ADDRS_ENV.to_string(), rails));
        }
        if !clusters_used.contains(&ci) {
            clusters_used.push(ci);
        }
        nodes.push(NodePlan {
            host: place.host.clone(),
            ranks: vec![rank],
            dest: host.and_then(|h| h.ssh.clone()),
            jump: front.map(|f| f.ssh.clone().unwrap_or_else(|| f.name.clone())),
            env,
        });
    }
    if let Some(rails) = crate::grid::relay_rails(topo, &clusters_used) {
        if std::env::var_os("FERRY_RAILS").is_none() {
            for node in &mut nodes {
                node.env
                    .push(("FERRY_RAILS".to_string(), rails.to_string()));
            }
        }
    }
    let relay_key = ferry_wire::relay::relay_key(key).to_hex();
    let mut relays = SshRelays { relays: Vec::new() };
    for &ci in &clusters_used {
        let cluster = &topo.clusters[ci];
        if cluster.kind != Kind::Private {
            continue;
        }
        // A relay on every front node of the cluster: connections spread over them.
        for front in cluster.fronts() {
            let mut remote = format!(
                "{} relay --listen 0.0.0.0:{} --key-stdin {job:x}",
                crate::remote::shell_quote(&grid.ferry.to_string_lossy()),
                cluster.relay_port
            );
            for arg in &grid.relay_args {
                remote.push(' ');
                remote += &crate::remote::shell_quote(arg);
            }
            let mut command = Command::new(&shell[0]);
            command
                .args(&shell[1..])
                .arg(front.ssh.as_ref().unwrap_or(&front.name))
                .arg(remote)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .process_group(0);
            sys::end_with_launcher(&mut command, libc::SIGTERM);
            let mut child = command.spawn().map_err(|e| {
                grid_error(format!(
                    "cannot start ssh for the relay on {}: {e}",
                    front.name
                ))
            })?;
            if let Some(pipe) = child.stderr.take() {
                let _ =
                    output::forward(pipe, Sink::Stderr, Some(format!("[relay {}] ", front.name)));
            }
            let mut stdin = child.stdin.take();
            if let Some(pipe) = stdin.as_mut() {
                if writeln!(pipe, "{relay_key}").is_err() {
                    stdin = None;
                }
            }
            relays.relays.push(SshRelay {
                front: front.name.clone(),
                child,
                stdin,
                reported: false,
            });
        }
    }
    let ferry = grid.ferry.clone();
    Ok((
        RemoteLaunch {
            nodes,
            shell: shell.to_vec(),
            form: crate::remote::CommandForm::Quoted,
            ferry,
            grid: true,
        },
        relays,
    ))
}
