//! A real Slurm cluster in the testbed (`ferry testbed up --slurm`), on hosts made into
//! machines by [`crate::ssh`].
//!
//! The Slurm cluster is the grid's first cluster: its first host is the head (`slurmctld`
//! and the one `munged`), every host of it runs a `slurmd -N <host>` with as many CPUs as
//! the grid gives it ranks. Every daemon starts inside its host's namespaces (those of the
//! host's sshd), so the tasks of a job step see the host's own hostname, `/tmp` and
//! `/dev/shm`, as on a cluster node.
//!
//! Facts this needs (Slurm 22.05, munge 0.5):
//! - `ip netns exec` remounts `/sys` in the host's mount namespace, which hides the cgroup
//!   hierarchies; slurmd 22.05 will not start without them (even with `proctrack/linuxproc`
//!   and `task/none`), so they are mounted again there from this machine's mount table
//!   before slurmd starts. Mounting an existing hierarchy again only attaches it.
//! - One `munged` serves all hosts: its socket is a path in the state directory, which every
//!   namespace sees (`AuthInfo=socket=…` in `slurm.conf`).
//! - slurmctld checks that its `gethostname()` is the `SlurmctldHost` name: it runs in the
//!   head's UTS namespace.
//! - Daemons are reparented to a PID 1 that may reap late: a zombie counts as gone.
//!
//! State lives in `<state>/slurm/` ([`slurm_dir`]): `slurm.conf`, `env.sh` (exports
//! `SLURM_CONF`), `ctld/` (state, pid, log), `nodes/<host>/` (spool, pid, log) and `munge/`
//! (socket, pid, log; `key/` with the key and seed). [`crate::ssh::host_command`] sets
//! `SLURM_CONF` for commands run on a host, so `salloc`, `srun` and `sinfo` find the cluster.
//! Removal ([`stop`]) stops every daemon by its pid file (checked against its command line)
//! before the namespaces go.

use crate::ssh::{self, Step};
use crate::TestbedError;
use ferry_grid::topology::Topology;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long bringing up waits for the controller to answer and every node to be idle.
pub const SLURM_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// The directory of the Slurm state of the testbed with `prefix`.
pub fn slurm_dir(prefix: &str) -> PathBuf {
    ssh::state_dir(prefix).join("slurm")
}

/// The `slurm.conf` of the testbed with `prefix` (what `SLURM_CONF` names).
pub fn conf_path(prefix: &str) -> PathBuf {
    slurm_dir(prefix).join("slurm.conf")
}

/// One node of the Slurm cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    name: String,
    addr: Ipv4Addr,
    cpus: u32,
}

/// One step of bringing Slurm up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmStep {
    /// A file or command step, as for ssh.
    Setup(Step),
    /// Wait until a daemon has written its pid file and runs: (daemon, pid file, log).
    WaitPid(String, PathBuf, PathBuf),
    /// Run this command until its output has `lines` lines (`sinfo` listing idle nodes, or
    /// `scontrol ping` saying UP).
    WaitOutput {
        /// What is waited for, for the error.
        what: String,
        /// The command.
        argv: Vec<String>,
        /// How many lines of output mean ready.
        lines: usize,
        /// The log to quote when it never is.
        log: PathBuf,
    },
}

/// The Slurm side of a testbed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmPlan {
    prefix: String,
    dir: PathBuf,
    head: Node,
    nodes: Vec<Node>,
}

/// The script that starts a Slurm daemon inside a host: cgroup hierarchies first (`$1`: the
/// mount lines), then the daemon (`$2…`).
const DAEMON_SCRIPT: &str = r#"set -e
if ! mountpoint -q /sys/fs/cgroup; then
  printf '%s\n' "$1" | while read -r type dir opts; do
    [ -n "$type" ] || continue
    mkdir -p "$dir"
    mount -t "$type" -o "$opts" "$type" "$dir"
  done
fi
shift
exec "$@""#;

/// The cgroup mounts of a mount table (`/proc/self/mounts`): "type dir options" per line, the
/// `/sys/fs/cgroup` tmpfs (if any) first, as the table lists them.
pub fn cgroup_mounts(mounts: &str) -> String {
    let mut out = String::new();
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [_, dir, kind, opts, ..] = f.as_slice() else {
            continue;
        };
        let ours = *kind == "cgroup" || *kind == "cgroup2" || *dir == "/sys/fs/cgroup";
        // The table escapes spaces as \040: such a directory is none of the hierarchies.
        if ours && dir.starts_with("/sys/fs/cgroup") && !dir.contains('\\') {
            out += &format!("{kind} {dir} {opts}\n");
        }
    }
    out
}

impl SlurmPlan {
    /// The Slurm cluster of `grid` for the testbed `prefix`, state under `state_root`.
    pub fn new(
        grid: &Topology,
        prefix: &str,
        state_root: &Path,
    ) -> Result<SlurmPlan, TestbedError> {
        let cluster = grid
            .clusters
            .first()
            .ok_or_else(|| TestbedError::Grid("--slurm needs a cluster with hosts".into()))?;
        let nodes: Vec<Node> = cluster
            .hosts
            .iter()
            .map(|h| Node {
                name: h.name.clone(),
                addr: h.addr,
                cpus: h.ranks.max(1),
            })
            .collect();
        let head = nodes
            .first()
            .cloned()
            .ok_or_else(|| TestbedError::Grid(format!("cluster {} has no hosts", cluster.name)))?;
        Ok(SlurmPlan {
            prefix: prefix.to_string(),
            dir: state_root.join(prefix).join("slurm"),
            head,
            nodes,
        })
    }

    /// The head host (controller, munge, where jobs are submitted).
    pub fn head(&self) -> &str {
        &self.head.name
    }

    /// The `slurm.conf`.
    pub fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    fn munge_dir(&self) -> PathBuf {
        self.dir.join("munge")
    }

    fn munge_socket(&self) -> PathBuf {
        self.munge_dir().join("munge.socket")
    }

    fn ctld_dir(&self) -> PathBuf {
        self.dir.join("ctld")
    }

    fn node_dir(&self, name: &str) -> PathBuf {
        self.dir.join("nodes").join(name)
    }

    /// The text of `slurm.conf`.
    pub fn conf_text(&self) -> String {
        let ctld = self.ctld_dir();
        let nodes = self.dir.join("nodes");
        let mut s = format!(
            "# ferry testbed {prefix}: its Slurm cluster (SLURM_CONF={conf})\n\
             ClusterName={cluster}\n\
             # slurmctld checks that its hostname is this name\n\
             SlurmctldHost={head}({head_addr})\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             SlurmctldPort=6817\n\
             SlurmdPort=6818\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={socket}\n\
             StateSaveLocation={ctld}\n\
             SlurmctldPidFile={ctld}/slurmctld.pid\n\
             SlurmctldLogFile={ctld}/slurmctld.log\n\
             SlurmctldDebug=info\n\
             # %n: the node's name, so that the slurmds of one file system keep apart\n\
             SlurmdSpoolDir={nodes}/%n/spool\n\
             SlurmdPidFile={nodes}/%n/slurmd.pid\n\
             SlurmdLogFile={nodes}/%n/slurmd.log\n\
             SlurmdDebug=info\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\n\
             MpiDefault=none\n\
             SwitchType=switch/none\n\
             SchedulerType=sched/backfill\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             # the nodes share this machine's cores: their CPUs may add up to more\n\
             SlurmdParameters=config_overrides\n\
             ReturnToService=2\n\
             SlurmctldTimeout=30\n\
             SlurmdTimeout=60\n\
             InactiveLimit=0\n\
             KillWait=2\n\
             MinJobAge=60\n\
             MessageTimeout=10\n",
            prefix = self.prefix,
            conf = self.conf().display(),
            cluster = self.prefix.trim_end_matches('-'),
            head = self.head.name,
            head_addr = self.head.addr,
            socket = self.munge_socket().display(),
            ctld = ctld.display(),
            nodes = nodes.display(),
        );
        for n in &self.nodes {
            s += &format!(
                "NodeName={name} NodeAddr={addr} NodeHostname={name} CPUs={cpus} Sockets=1 \
                 CoresPerSocket={cpus} ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN\n",
                name = n.name,
                addr = n.addr,
                cpus = n.cpus,
            );
        }
        s += "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO\n";
        s
    }

    /// The steps that bring Slurm up. `enter(host)` is the command prefix that runs a program
    /// in the host's namespaces (see [`ssh::enter_command`]); `cgroups` the mount lines of
    /// [`cgroup_mounts`].
    pub fn steps(&self, enter: impl Fn(&str) -> Vec<String>, cgroups: &str) -> Vec<SlurmStep> {
        let mut out = Vec::new();
        let setup = |out: &mut Vec<SlurmStep>, s: Step| out.push(SlurmStep::Setup(s));
        let dir = |path: PathBuf, mode: u32| Step::Dir { path, mode };
        let munge = self.munge_dir();
        let key_dir = munge.join("key");
        let ctld = self.ctld_dir();
        setup(&mut out, dir(self.dir.clone(), 0o755));
        // munged: clients must reach the socket's directory; the key stays private.
        setup(&mut out, dir(munge.clone(), 0o755));
        setup(&mut out, dir(key_dir.clone(), 0o700));
        setup(&mut out, dir(ctld.clone(), 0o755));
        for n in &self.nodes {
            setup(&mut out, dir(self.node_dir(&n.name).join("spool"), 0o755));
        }
        setup(
            &mut out,
            Step::Run(words(&[
                "mungekey",
                "--create",
                "--force",
                &format!("--keyfile={}", key_dir.join("munge.key").display()),
            ])),
        );
        setup(
            &mut out,
            Step::Write {
                path: self.conf(),
                text: self.conf_text(),
            },
        );
        setup(
            &mut out,
            Step::Write {
                path: self.dir.join("env.sh"),
                text: format!(
                    "# source me: salloc, srun and sinfo then find the testbed's Slurm\nexport SLURM_CONF={}\n",
                    self.conf().display()
                ),
            },
        );
        let conf = self.conf().display().to_string();
        let in_host = |host: &str, program: &[&str]| {
            let mut argv = enter(host);
            argv.extend(words(&["sh", "-c", DAEMON_SCRIPT, "ferry-slurm", cgroups]));
            argv.extend(words(program));
            argv
        };
        let munged_pid = munge.join("munged.pid");
        setup(
            &mut out,
            Step::Run(in_host(
                &self.head.name,
                &[
                    "munged",
                    // The state directory is root's alone (0700); munged wants every
                    // directory above its socket open to all, which --force waives.
                    "--force",
                    &format!("--socket={}", self.munge_socket().display()),
                    &format!("--key-file={}", key_dir.join("munge.key").display()),
                    &format!("--seed-file={}", key_dir.join("munged.seed").display()),
                    &format!("--pid-file={}", munged_pid.display()),
                    &format!("--log-file={}", munge.join("munged.log").display()),
                ],
            )),
        );
        out.push(SlurmStep::WaitPid(
            "munged".into(),
            munged_pid,
            munge.join("munged.log"),
        ));
        setup(
            &mut out,
            Step::Run(in_host(&self.head.name, &["slurmctld", "-c", "-f", &conf])),
        );
        let mut scontrol = enter(&self.head.name);
        scontrol.extend(words(&[
            "env",
            &format!("SLURM_CONF={conf}"),
            "scontrol",
            "ping",
        ]));
        out.push(SlurmStep::WaitOutput {
            what: format!("slurmctld on {}", self.head.name),
            // "Slurmctld(primary) at h1 is UP"
            argv: scontrol,
            lines: 1,
            log: ctld.join("slurmctld.log"),
        });
        for n in &self.nodes {
            setup(
                &mut out,
                Step::Run(in_host(&n.name, &["slurmd", "-f", &conf, "-N", &n.name])),
            );
        }
        let mut sinfo = enter(&self.head.name);
        sinfo.extend(words(&[
            "env",
            &format!("SLURM_CONF={conf}"),
            "sinfo",
            "--noheader",
            "--Node",
            "--states=idle",
            "--format=%N",
        ]));
        out.push(SlurmStep::WaitOutput {
            what: format!("{} idle Slurm nodes", self.nodes.len()),
            argv: sinfo,
            lines: self.nodes.len(),
            log: ctld.join("slurmctld.log"),
        });
        out
    }

    /// The pid files of the daemons whose state is under `dir`.
    fn pid_files(dir: &Path) -> Vec<PathBuf> {
        let mut files = vec![
            dir.join("ctld").join("slurmctld.pid"),
            dir.join("munge").join("munged.pid"),
        ];
        if let Ok(nodes) = std::fs::read_dir(dir.join("nodes")) {
            files.extend(nodes.filter_map(|n| Some(n.ok()?.path().join("slurmd.pid"))));
        }
        files
    }
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// Checks for the tools of `--slurm`.
pub fn preflight() -> Result<(), TestbedError> {
    for (tool, package) in [
        ("slurmctld", "slurmctld"),
        ("slurmd", "slurmd"),
        ("scontrol", "slurm-client"),
        ("sinfo", "slurm-client"),
        ("srun", "slurm-client"),
        ("salloc", "slurm-client"),
        ("munged", "munge"),
        ("mungekey", "munge"),
        ("mountpoint", "util-linux"),
    ] {
        if !crate::on_path(tool) && !Path::new("/usr/sbin").join(tool).is_file() {
            return Err(TestbedError::Missing { tool, package });
        }
    }
    Ok(())
}

/// The tail of a log, for an error.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Brings Slurm up on a testbed whose hosts already run their sshds. On failure the caller
/// removes what was made ([`stop`], then the state).
pub fn apply(plan: &SlurmPlan) -> Result<(), TestbedError> {
    let prefix = plan.prefix.clone();
    // Every host's daemons enter the namespaces of its sshd.
    let mut sshds = std::collections::HashMap::new();
    for node in &plan.nodes {
        let pid = ssh::sshd_pid(&prefix, &node.name).ok_or_else(|| TestbedError::NoSsh {
            prefix: prefix.clone(),
            host: node.name.clone(),
        })?;
        sshds.insert(node.name.clone(), pid);
    }
    let enter = |host: &str| match sshds.get(host) {
        Some(&pid) => ssh::enter_command(pid, Path::new("/")),
        None => Vec::new(),
    };
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let steps = plan.steps(enter, &cgroup_mounts(&mounts));
    let start = Instant::now();
    for step in steps {
        match step {
            SlurmStep::Setup(step) => ssh::apply_step(step)?,
            SlurmStep::WaitPid(daemon, pid_file, log) => loop {
                if ssh::read_pid(&pid_file).is_some_and(ssh::alive) {
                    break;
                }
                if start.elapsed() > SLURM_READY_TIMEOUT {
                    return Err(TestbedError::Slurm {
                        what: daemon,
                        why: format!("no pid file; its log ends: {}", log_tail(&log)),
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            },
            SlurmStep::WaitOutput {
                what,
                argv,
                lines,
                log,
            } => loop {
                let seen = crate::run(&argv)
                    .map(|out| out.lines().filter(|l| !l.trim().is_empty()).count())
                    .unwrap_or(0);
                if seen >= lines {
                    break;
                }
                if start.elapsed() > SLURM_READY_TIMEOUT {
                    return Err(TestbedError::Slurm {
                        what,
                        why: format!(
                            "not ready after {SLURM_READY_TIMEOUT:?}; the controller's log ends: {}",
                            log_tail(&log)
                        ),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            },
        }
    }
    Ok(())
}

/// Stops the Slurm daemons and munged of the testbed whose state is `state` (by pid file,
/// after checking that the pid still names that state in its command line): TERM, up to
/// 3 s, then KILL. Job steps' processes live in the hosts' namespaces and go with them.
pub fn stop(state: &Path) {
    let dir = state.join("slurm");
    let needle = format!("{}/", state.display());
    let pids: Vec<i32> = SlurmPlan::pid_files(&dir)
        .iter()
        .filter_map(|f| ssh::read_pid(f))
        .filter(|&pid| ssh::alive(pid) && ssh::cmdline(pid).contains(&needle))
        .collect();
    ssh::signal_then_kill(&pids, Duration::from_secs(3));
}

/// Stops the Slurm daemons of the testbeds whose names `matches` (see [`stop`]).
pub fn stop_matching(matches: impl Fn(&str) -> bool) {
    let Ok(dir) = std::fs::read_dir(ssh::STATE_ROOT) else {
        return;
    };
    for prefix in dir.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
        if matches(&prefix) {
            stop(&Path::new(ssh::STATE_ROOT).join(prefix));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> SlurmPlan {
        let grid = Topology::parse(
            "g",
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("grids/hosts3.toml"),
            )
            .unwrap(),
        )
        .unwrap();
        SlurmPlan::new(&grid, "fy7-", Path::new("/run/ferry-testbed")).unwrap()
    }

    #[test]
    fn conf_names_the_head_every_node_and_the_state_directory() {
        let p = plan();
        assert_eq!(p.head(), "h1");
        let text = p.conf_text();
        for line in [
            "ClusterName=fy7\n",
            "SlurmctldHost=h1(198.18.1.1)\n",
            "SlurmUser=root\n",
            "AuthInfo=socket=/run/ferry-testbed/fy7-/slurm/munge/munge.socket\n",
            "StateSaveLocation=/run/ferry-testbed/fy7-/slurm/ctld\n",
            "SlurmdSpoolDir=/run/ferry-testbed/fy7-/slurm/nodes/%n/spool\n",
            "ProctrackType=proctrack/linuxproc\n",
            "TaskPlugin=task/none\n",
            "MpiDefault=none\n",
            "NodeName=h2 NodeAddr=198.18.1.2 NodeHostname=h2 CPUs=2 ",
            "PartitionName=all Nodes=ALL Default=YES",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
        assert_eq!(text.matches("NodeName=").count(), 3);
        assert_eq!(conf_path("fy7-"), p.conf());
    }

    #[test]
    fn daemons_start_inside_their_hosts_after_munge_and_the_controller() {
        let p = plan();
        let enter = |h: &str| vec!["enter".to_string(), h.to_string()];
        let steps = p.steps(enter, "cgroup2 /sys/fs/cgroup rw\n");
        let runs: Vec<String> = steps
            .iter()
            .filter_map(|s| match s {
                SlurmStep::Setup(Step::Run(argv)) => Some(argv.join(" ")),
                _ => None,
            })
            .collect();
        let at = |needle: &str| {
            runs.iter()
                .position(|r| r.contains(needle))
                .unwrap_or_else(|| panic!("{needle} in {runs:?}"))
        };
        assert!(at("mungekey") < at("munged --force"));
        assert!(at("munged --force") < at("slurmctld -c"));
        assert!(runs[at("slurmctld -c")].starts_with("enter h1 sh -c "));
        for h in ["h1", "h2", "h3"] {
            let line = &runs[at(&format!("-N {h}"))];
            assert!(line.starts_with(&format!("enter {h} sh -c ")), "{line}");
            assert!(line.contains("ferry-slurm cgroup2 /sys/fs/cgroup rw\n slurmd -f "));
            assert!(at("slurmctld -c") < at(&format!("-N {h}")));
        }
        // Ready means three idle nodes, asked on the head.
        assert!(matches!(
            steps.last(),
            Some(SlurmStep::WaitOutput { lines: 3, argv, .. }) if argv[..2] == ["enter", "h1"]
        ));
    }

    #[test]
    fn cgroup_mounts_are_the_hierarchies_under_sys_fs_cgroup() {
        let table = "sysfs /sys sysfs rw 0 0\n\
                     tmpfs /sys/fs/cgroup tmpfs rw,mode=755 0 0\n\
                     cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                     cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
                     tmpfs /tmp tmpfs rw 0 0\n";
        assert_eq!(
            cgroup_mounts(table),
            "tmpfs /sys/fs/cgroup rw,mode=755\ncgroup /sys/fs/cgroup/cpu rw,cpu\ncgroup2 /sys/fs/cgroup/unified rw\n"
        );
    }
}
