//! Hosts that look like their own machines and run their own sshd (`ferry testbed up --ssh`).
//!
//! Every host and front node of the grid gets, besides its network namespace:
//!
//! - a UTS namespace with its grid name as hostname, and an IPC namespace of its own;
//! - a mount namespace (the one `ip netns exec` makes) with a private tmpfs on `/tmp` and on
//!   `/dev/shm` (but for the directories there that every host keeps, see [`crate::kept`]),
//!   and its own `/proc/sys/kernel/random/boot_id` and `/etc/machine-id` bound over
//!   the host's (libraries decide "same machine" from these); `/work`, `/run` and the rest of
//!   the file system stay shared;
//! - an `sshd` started inside all of these, so everything a login starts lives there too. It
//!   listens on port 22 of each of the host's addresses, with its own host key, and lets in
//!   `root` by the testbed's client key only.
//!
//! State lives in [`state_dir`] (`/run/ferry-testbed/<prefix>/`): it stays visible inside the
//! hosts, whose `/tmp` is private. There: the client key pair `id_ed25519`, `authorized_keys`,
//! `known_hosts` with every host key, and `ssh_config` with a `Host` entry per host (so
//! `ssh -F <state>/ssh_config h2 hostname` prints `h2`); per host, `hosts/<name>/` with its
//! host key, `sshd_config`, `sshd.pid`, `sshd.log`, `boot_id` and `machine-id`. Every
//! namespace also gets `/etc/netns/<ns>/hosts` naming every host and `/etc/netns/<ns>/hostname`
//! (`ip netns exec` binds them over `/etc/hosts` and `/etc/hostname`).
//!
//! Hosts of a private cluster are reached through `ProxyJump <front>`, except from inside
//! their own cluster (a `Match … exec` on the client's hostname), where they are dialled
//! directly.
//!
//! Like the network side, bringing up is planned purely ([`SshPlan::steps`]) and carried out
//! by [`apply`]; [`remove_state`] stops the sshds by pid and removes the files, found by
//! prefix, so it also cleans up after a crash.

use crate::{Plan, TestbedError};
use ferry_grid::topology::{Kind, Topology};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the ssh state of every testbed lives: `<STATE_ROOT>/<prefix>/`.
pub const STATE_ROOT: &str = "/run/ferry-testbed";

/// Where `ip netns exec` finds per-namespace files to bind over `/etc`.
pub const ETC_NETNS: &str = "/etc/netns";

/// How long bringing up waits for every sshd to write its pid file (it does once listening).
pub const SSHD_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The state directory of the testbed with `prefix`.
pub fn state_dir(prefix: &str) -> PathBuf {
    Path::new(STATE_ROOT).join(prefix)
}

/// The `ssh_config` of the testbed with `prefix`.
pub fn ssh_config_path(prefix: &str) -> PathBuf {
    state_dir(prefix).join("ssh_config")
}

/// The ssh command line that reaches the hosts of the testbed with `prefix`.
pub fn ssh_command(prefix: &str) -> Vec<String> {
    vec![
        "ssh".into(),
        "-F".into(),
        ssh_config_path(prefix).display().to_string(),
    ]
}

/// One host (or front node) made into a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Machine {
    name: String,
    ns: String,
    /// Every address of the host; sshd listens on each.
    addrs: Vec<Ipv4Addr>,
    /// The address clients dial (`HostName`): a front's public one, any other host's `addr`.
    dial: Ipv4Addr,
    /// For a host of a private cluster: its front and every name inside that cluster.
    behind: Option<(String, Vec<String>)>,
}

/// What a fresh id file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdForm {
    /// A UUID with dashes and a newline, like `/proc/sys/kernel/random/boot_id`.
    BootId,
    /// 32 hex digits and a newline, like `/etc/machine-id`.
    MachineId,
}

/// One step of bringing up the machines and their sshds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Make a directory (and its parents) with this mode.
    Dir {
        /// The directory.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// Write a file (mode 0644).
    Write {
        /// The file.
        path: PathBuf,
        /// Its contents.
        text: String,
    },
    /// Write a fresh random id.
    FreshId {
        /// The file.
        path: PathBuf,
        /// Its form.
        form: IdForm,
    },
    /// Write `to` with the lines of `from` (a public key), each after its own prefix: one line
    /// per (prefix, key file). For `authorized_keys` (empty prefix) and `known_hosts` (the
    /// host's names and address).
    Collect {
        /// The file written.
        to: PathBuf,
        /// (text put before the key, public key file).
        keys: Vec<(String, PathBuf)>,
    },
    /// Run a command; it must succeed.
    Run(Vec<String>),
    /// Wait until each sshd has written its pid file: (host, pid file, log).
    WaitReady(Vec<(String, PathBuf, PathBuf)>),
}

/// The ssh side of a testbed: which machines, where their state goes, how they start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshPlan {
    prefix: String,
    state: PathBuf,
    sshd: PathBuf,
    machines: Vec<Machine>,
    /// Directories under `/tmp` and `/dev/shm` every host shows (see [`crate::kept`]).
    kept: Vec<PathBuf>,
}

/// The shell script that makes a namespace look like a machine and starts its sshd. It runs
/// as `ip netns exec NS unshare --uts --ipc -- sh -c SCRIPT ferry-host NAME DIR SSHD KEPT…`:
/// `ip netns exec` has already made a mount namespace (slave to the host's, so `/work` stays
/// in view) and bound `/etc/netns/NS/hosts` over `/etc/hosts`. Each KEPT directory (see
/// [`crate::kept`]) waits at `DIR/kept/N` while the private tmpfs goes over it, then is bound
/// back at its own path.
const MACHINE_SCRIPT: &str = r#"set -e
name=$1 dir=$2 sshd=$3
shift 3
hostname "$name"
n=0
for d in "$@"; do n=$((n + 1)); mkdir -p "$dir/kept/$n"; mount --bind "$d" "$dir/kept/$n"; done
mount -t tmpfs -o mode=1777 "ferry-tmp-$name" /tmp
mount -t tmpfs -o mode=1777 "ferry-shm-$name" /dev/shm
n=0
for d in "$@"; do n=$((n + 1)); mkdir -p "$d"; mount --bind "$dir/kept/$n" "$d"; umount "$dir/kept/$n"; done
mount --bind "$dir/boot_id" /proc/sys/kernel/random/boot_id
if [ -e /etc/machine-id ]; then mount --bind "$dir/machine-id" /etc/machine-id; fi
exec "$sshd" -f "$dir/sshd_config" -E "$dir/sshd.log""#;

impl SshPlan {
    /// Lays out the machines of `grid`, built as `plan`, with state under `state_root` and
    /// `sshd` (an absolute path: sshd re-executes itself) as the daemon.
    pub fn new(
        grid: &Topology,
        plan: &Plan,
        state_root: &Path,
        sshd: &Path,
    ) -> Result<SshPlan, TestbedError> {
        let mut machines = Vec::new();
        let ns_of = |name: &str| {
            plan.namespace(name)
                .map(str::to_string)
                .ok_or_else(|| TestbedError::Grid(format!("{name} has no namespace in the plan")))
        };
        for cluster in &grid.clusters {
            let behind = match (&cluster.kind, &cluster.front) {
                (Kind::Private, Some(front)) => {
                    let mut inside = vec![front.name.clone()];
                    inside.extend(cluster.hosts.iter().map(|h| h.name.clone()));
                    // Every front node (several when the cluster has several relays) is a
                    // machine reached at its public address.
                    for f in cluster.fronts() {
                        machines.push(Machine {
                            name: f.name.clone(),
                            ns: ns_of(&f.name)?,
                            addrs: vec![f.public_addr, f.inside_addr],
                            dial: f.public_addr,
                            behind: None,
                        });
                    }
                    Some((front.name.clone(), inside))
                }
                _ => None,
            };
            for h in &cluster.hosts {
                machines.push(Machine {
                    name: h.name.clone(),
                    ns: ns_of(&h.name)?,
                    addrs: h.rail_addrs(),
                    dial: h.addr,
                    behind: behind.clone(),
                });
            }
        }
        Ok(SshPlan {
            prefix: plan.prefix().to_string(),
            state: state_root.join(plan.prefix()),
            sshd: sshd.to_path_buf(),
            machines,
            kept: Vec::new(),
        })
    }

    /// The same plan, with `dirs` (under `/tmp` or `/dev/shm`) shown by every host.
    pub fn keeping(self, dirs: Vec<PathBuf>) -> SshPlan {
        SshPlan { kept: dirs, ..self }
    }

    /// The state directory.
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// The client configuration: `ssh -F <this> HOST`.
    pub fn ssh_config(&self) -> PathBuf {
        self.state.join("ssh_config")
    }

    /// The ssh command line that reaches the hosts.
    pub fn ssh_command(&self) -> Vec<String> {
        vec![
            "ssh".into(),
            "-F".into(),
            self.ssh_config().display().to_string(),
        ]
    }

    /// Names of the machines (hosts and front nodes), in grid order.
    pub fn hosts(&self) -> Vec<&str> {
        self.machines.iter().map(|m| m.name.as_str()).collect()
    }

    fn host_dir(&self, name: &str) -> PathBuf {
        self.state.join("hosts").join(name)
    }

    /// The pid file of a host's sshd.
    pub fn pid_file(&self, host: &str) -> PathBuf {
        self.host_dir(host).join("sshd.pid")
    }

    fn sshd_config(&self, m: &Machine) -> String {
        let dir = self.host_dir(&m.name);
        let mut s = format!(
            "# ferry testbed {}: the sshd of host {}\n",
            self.prefix, m.name
        );
        for a in &m.addrs {
            s += &format!("ListenAddress {a}:22\n");
        }
        s += &format!(
            "HostKey {host_key}\n\
             PidFile {pid}\n\
             AuthorizedKeysFile {auth}\n\
             AllowUsers root\n\
             PermitRootLogin prohibit-password\n\
             PubkeyAuthentication yes\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             # root's shadow entry may be `*`; without PAM that does not lock it\n\
             UsePAM no\n\
             UseDNS no\n\
             X11Forwarding no\n\
             PrintMotd no\n\
             PrintLastLog no\n\
             # a launcher opens a connection per host at once\n\
             MaxStartups 200:30:400\n\
             MaxSessions 100\n\
             AcceptEnv LANG LC_*\n\
             Subsystem sftp internal-sftp\n",
            host_key = dir.join("ssh_host_ed25519_key").display(),
            pid = dir.join("sshd.pid").display(),
            auth = self.state.join("authorized_keys").display(),
        );
        s
    }

    /// The client configuration's text.
    pub fn ssh_config_text(&self) -> String {
        let mut s = format!(
            "# ferry testbed {}: ssh -F {} HOST\n",
            self.prefix,
            self.ssh_config().display()
        );
        // A host answers to its name and to each of its addresses.
        let patterns = |m: &Machine| {
            let mut v = vec![m.name.clone()];
            v.extend(m.addrs.iter().map(Ipv4Addr::to_string));
            v
        };
        for m in &self.machines {
            s += &format!("Host {}\n    HostName {}\n", patterns(m).join(" "), m.dial);
        }
        // Private hosts are not reachable from outside their cluster: jump through the front,
        // unless the client is inside that cluster (%L: the client's hostname).
        let mut done = Vec::new();
        for m in &self.machines {
            let Some((front, inside)) = &m.behind else {
                continue;
            };
            if done.contains(front) {
                continue;
            }
            done.push(front.clone());
            let hosts: Vec<String> = self
                .machines
                .iter()
                .filter(|o| o.behind.as_ref().is_some_and(|(f, _)| f == front))
                .flat_map(patterns)
                .collect();
            s += &format!(
                "Match originalhost {} !exec \"case %L in {}) exit 0;; esac; exit 1\"\n    ProxyJump {front}\n",
                hosts.join(","),
                inside.join("|"),
            );
        }
        // ConnectTimeout as the launcher's own (30 s): on a loaded machine the banner exchange
        // through a ProxyJump took longer than 5 s.
        s += &format!(
            "Host {}\n    User root\n    Port 22\n    IdentityFile {}\n    IdentitiesOnly yes\n    \
             UserKnownHostsFile {}\n    GlobalKnownHostsFile /dev/null\n    \
             StrictHostKeyChecking yes\n    BatchMode yes\n    ConnectTimeout 30\n    \
             LogLevel ERROR\n",
            self.machines
                .iter()
                .flat_map(patterns)
                .collect::<Vec<_>>()
                .join(" "),
            self.state.join("id_ed25519").display(),
            self.state.join("known_hosts").display(),
        );
        s
    }

    /// The `/etc/hosts` every namespace of the testbed sees.
    pub fn hosts_text(&self) -> String {
        let mut s = format!(
            "# ferry testbed {}\n127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n",
            self.prefix
        );
        for m in &self.machines {
            s += &format!("{} {}\n", m.dial, m.name);
        }
        s
    }

    /// The command that makes host `m` a machine and starts its sshd; it returns once sshd
    /// has gone to the background.
    fn start_command(&self, m: &Machine) -> Vec<String> {
        [
            "ip",
            "netns",
            "exec",
            &m.ns,
            "unshare",
            "--uts",
            "--ipc",
            "--",
            "sh",
            "-c",
            MACHINE_SCRIPT,
            "ferry-host",
            &m.name,
            &self.host_dir(&m.name).display().to_string(),
            &self.sshd.display().to_string(),
        ]
        .map(String::from)
        .into_iter()
        .chain(self.kept.iter().map(|d| d.display().to_string()))
        .collect()
    }

    /// The steps that bring the machines up, in order. Namespaces must exist already.
    pub fn steps(&self) -> Vec<Step> {
        let mut out = Vec::new();
        let key = self.state.join("id_ed25519");
        out.push(Step::Dir {
            path: self.state.clone(),
            mode: 0o700,
        });
        // sshd's privilege separation directory (its service unit usually makes it).
        out.push(Step::Dir {
            path: "/run/sshd".into(),
            mode: 0o755,
        });
        out.push(keygen(&key, &format!("root@{}testbed", self.prefix)));
        out.push(Step::Collect {
            to: self.state.join("authorized_keys"),
            keys: vec![(String::new(), pub_key(&key))],
        });
        let hosts_text = self.hosts_text();
        let mut known = Vec::new();
        for m in &self.machines {
            let dir = self.host_dir(&m.name);
            let host_key = dir.join("ssh_host_ed25519_key");
            out.push(Step::Dir {
                path: dir.clone(),
                mode: 0o700,
            });
            out.push(keygen(&host_key, &format!("host@{}", m.name)));
            let mut names = vec![m.name.clone()];
            names.extend(m.addrs.iter().map(Ipv4Addr::to_string));
            known.push((names.join(",") + " ", pub_key(&host_key)));
            out.push(Step::Write {
                path: dir.join("sshd_config"),
                text: self.sshd_config(m),
            });
            out.push(Step::FreshId {
                path: dir.join("boot_id"),
                form: IdForm::BootId,
            });
            out.push(Step::FreshId {
                path: dir.join("machine-id"),
                form: IdForm::MachineId,
            });
            let etc = Path::new(ETC_NETNS).join(&m.ns);
            out.push(Step::Dir {
                path: etc.clone(),
                mode: 0o755,
            });
            out.push(Step::Write {
                path: etc.join("hosts"),
                text: hosts_text.clone(),
            });
            out.push(Step::Write {
                path: etc.join("hostname"),
                text: format!("{}\n", m.name),
            });
        }
        out.push(Step::Collect {
            to: self.state.join("known_hosts"),
            keys: known,
        });
        out.push(Step::Write {
            path: self.ssh_config(),
            text: self.ssh_config_text(),
        });
        let mut ready = Vec::new();
        for m in &self.machines {
            out.push(Step::Run(self.start_command(m)));
            let dir = self.host_dir(&m.name);
            ready.push((m.name.clone(), dir.join("sshd.pid"), dir.join("sshd.log")));
        }
        out.push(Step::WaitReady(ready));
        out
    }
}

fn keygen(path: &Path, comment: &str) -> Step {
    Step::Run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            comment,
            "-f",
            &path.display().to_string(),
        ]
        .map(String::from)
        .to_vec(),
    )
}

fn pub_key(key: &Path) -> PathBuf {
    let mut p = key.as_os_str().to_owned();
    p.push(".pub");
    p.into()
}

/// Where sshd is installed, if it is.
pub fn find_sshd() -> Option<PathBuf> {
    let default = Path::new("/usr/sbin/sshd");
    if default.is_file() {
        return Some(default.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("sshd"))
        .find(|p| p.is_file() && p.is_absolute())
}

/// Checks for the tools of `--ssh`; returns sshd's path.
pub fn preflight() -> Result<PathBuf, TestbedError> {
    for (tool, package) in [
        ("ssh", "openssh-client"),
        ("ssh-keygen", "openssh-client"),
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
    ] {
        if !crate::on_path(tool) {
            return Err(TestbedError::Missing { tool, package });
        }
    }
    find_sshd().ok_or(TestbedError::Missing {
        tool: "sshd",
        package: "openssh-server",
    })
}

/// Checks that `sshd` is an absolute path to a file (sshd re-executes itself by its path).
pub fn check_sshd(sshd: &Path) -> Result<(), TestbedError> {
    if sshd.is_absolute() && sshd.is_file() {
        Ok(())
    } else {
        Err(TestbedError::Io {
            path: sshd.display().to_string(),
            error: "sshd must be an absolute path to an existing file".into(),
        })
    }
}

fn io_error(path: &Path, e: std::io::Error) -> TestbedError {
    TestbedError::Io {
        path: path.display().to_string(),
        error: e.to_string(),
    }
}

fn fresh_id(form: IdForm) -> Result<String, TestbedError> {
    let src = Path::new("/proc/sys/kernel/random/uuid");
    let uuid = std::fs::read_to_string(src).map_err(|e| io_error(src, e))?;
    let uuid = uuid.trim();
    Ok(match form {
        IdForm::BootId => format!("{uuid}\n"),
        IdForm::MachineId => format!("{}\n", uuid.replace('-', "")),
    })
}

/// Carries out `plan`'s steps. On failure the caller removes what was made
/// ([`remove_state`]).
pub fn apply(plan: &SshPlan) -> Result<(), TestbedError> {
    plan.steps().into_iter().try_for_each(apply_step)
}

/// Carries out one step.
pub(crate) fn apply_step(step: Step) -> Result<(), TestbedError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match step {
        Step::Dir { path, mode } => {
            let make = || {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(mode)
                    .create(&path)
            };
            // Another testbed's removal may take away an empty parent just made (it
            // removes `/run/ferry-testbed` and `/etc/netns` when empty): once more then.
            make().or_else(|_| make()).map_err(|e| io_error(&path, e))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| io_error(&path, e))?;
        }
        Step::Write { path, text } => {
            std::fs::write(&path, text).map_err(|e| io_error(&path, e))?
        }
        Step::FreshId { path, form } => {
            std::fs::write(&path, fresh_id(form)?).map_err(|e| io_error(&path, e))?
        }
        Step::Collect { to, keys } => {
            let mut text = String::new();
            for (before, file) in keys {
                let key = std::fs::read_to_string(&file).map_err(|e| io_error(&file, e))?;
                // "type base64 comment": the comment is left out.
                let key: Vec<&str> = key.split_whitespace().take(2).collect();
                text += &format!("{before}{}\n", key.join(" "));
            }
            std::fs::write(&to, text).map_err(|e| io_error(&to, e))?;
        }
        Step::Run(argv) => {
            crate::run(&argv)?;
        }
        Step::WaitReady(waits) => wait_ready(&waits, SSHD_READY_TIMEOUT)?,
    }
    Ok(())
}

fn wait_ready(waits: &[(String, PathBuf, PathBuf)], timeout: Duration) -> Result<(), TestbedError> {
    let start = Instant::now();
    let mut pending: Vec<&(String, PathBuf, PathBuf)> = waits.iter().collect();
    while !pending.is_empty() {
        pending.retain(|(_, pid_file, _)| read_pid(pid_file).is_none_or(|pid| !alive(pid)));
        if pending.is_empty() {
            break;
        }
        if start.elapsed() > timeout {
            let (host, _, log) = pending[0];
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return Err(TestbedError::Sshd {
                host: host.clone(),
                why: format!(
                    "no pid file after {timeout:?}; its log ends: {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

pub(crate) fn read_pid(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Whether `pid` runs (a zombie does not: daemons are reparented to a PID 1 that may reap
/// late).
pub(crate) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S …": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// The command line of `pid`, arguments joined by spaces.
pub(crate) fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Live processes whose command line names `state`: a testbed's sshds (they name their
/// config file there).
pub fn processes_naming(state: &Path) -> Vec<i32> {
    let needle = format!("{}/", state.display());
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| alive(pid) && cmdline(pid).contains(&needle))
        .collect()
}

/// Every live process's parent: (pid, parent pid).
fn parents() -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid …"
        let (_, rest) = stat.rsplit_once(')')?;
        let mut fields = rest.split_whitespace();
        let state = fields.next()?;
        let ppid = fields.next()?.parse().ok()?;
        (state != "Z").then_some((pid, ppid))
    })
    .collect()
}

/// `roots` and all their live descendants.
fn with_descendants(roots: &[i32]) -> Vec<i32> {
    let parents = parents();
    let mut all = roots.to_vec();
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        all.extend(
            parents
                .iter()
                .filter(|&&(c, pp)| pp == p && !all.contains(&c))
                .map(|&(c, _)| c)
                .collect::<Vec<_>>(),
        );
        i += 1;
    }
    all
}

/// Stops the sshd of every host of the testbed whose state is `state` (by its pid file, after
/// checking that pid still is that sshd) and its logins with what they run: TERM, up to
/// 2 s, then KILL.
pub fn stop_sshds(state: &Path) {
    let Ok(hosts) = std::fs::read_dir(state.join("hosts")) else {
        return;
    };
    let config_dir = state.display().to_string();
    let sshds: Vec<i32> = hosts
        .filter_map(|h| read_pid(&h.ok()?.path().join("sshd.pid")))
        .filter(|&pid| alive(pid) && cmdline(pid).contains(&config_dir))
        .collect();
    signal_then_kill(&with_descendants(&sshds), Duration::from_secs(2));
}

/// Sends TERM to `pids`, waits up to `grace` for them to go, then KILLs what is left.
pub(crate) fn signal_then_kill(pids: &[i32], grace: Duration) {
    let signal = |pid: i32, sig: rustix::process::Signal| {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    };
    for &pid in pids {
        signal(pid, rustix::process::Signal::TERM);
    }
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) && start.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(10));
    }
    for &pid in pids.iter().filter(|&&p| alive(p)) {
        signal(pid, rustix::process::Signal::KILL);
    }
}

/// The entries of `dir` whose names `matches`.
fn names_in(dir: &str, matches: impl Fn(&str) -> bool) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| matches(n))
                .collect()
        })
        .unwrap_or_default()
}

/// Stops the sshds of the testbeds whose names `matches` (see [`stop_sshds`]).
pub fn stop_matching(matches: impl Fn(&str) -> bool) {
    for prefix in names_in(STATE_ROOT, matches) {
        stop_sshds(&Path::new(STATE_ROOT).join(prefix));
    }
}

/// Stops the sshds and removes the state and `/etc/netns` files of the testbeds whose names
/// `matches` (a prefix test); run before and after the namespaces go. Returns the first
/// failure but goes on past it.
pub fn remove_state(matches: impl Fn(&str) -> bool) -> Result<(), TestbedError> {
    let mut first_error = None;
    let names = |dir: &str| names_in(dir, &matches);
    for prefix in names(STATE_ROOT) {
        let state = Path::new(STATE_ROOT).join(&prefix);
        stop_sshds(&state);
        if let Err(e) = std::fs::remove_dir_all(&state) {
            first_error.get_or_insert(io_error(&state, e));
        }
    }
    for ns in names(ETC_NETNS) {
        let dir = Path::new(ETC_NETNS).join(&ns);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            first_error.get_or_insert(io_error(&dir, e));
        }
    }
    // Only when empty: other testbeds (or the system) may use them.
    let _ = std::fs::remove_dir(STATE_ROOT);
    let _ = std::fs::remove_dir(ETC_NETNS);
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The command prefix that runs a program on `host` as a login there would: in the network,
/// mount, UTS and IPC namespaces of its sshd (pid `sshd_pid`), in directory `cwd`.
pub fn enter_command(sshd_pid: i32, cwd: &Path) -> Vec<String> {
    [
        "nsenter",
        "--target",
        &sshd_pid.to_string(),
        "--net",
        "--mount",
        "--uts",
        "--ipc",
        "--",
        "env",
        "--chdir",
        &cwd.display().to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// The command prefix that runs a program on `host` of the standing testbed `prefix` (built
/// with `--ssh`) as a login there would: see [`enter_command`].
pub fn host_command(prefix: &str, host: &str) -> Result<Vec<String>, TestbedError> {
    let pid = sshd_pid(prefix, host).ok_or_else(|| TestbedError::NoSsh {
        prefix: prefix.to_string(),
        host: host.to_string(),
    })?;
    let cwd = std::env::current_dir().map_err(|e| TestbedError::Io {
        path: ".".into(),
        error: e.to_string(),
    })?;
    // The host's /tmp and /dev/shm are its own: a directory there exists on it only when
    // kept (see crate::kept). /proc/PID/root resolves a path as sshd sees it.
    let private = crate::kept::kept_dir(&cwd).is_some();
    let on_host =
        Path::new(&format!("/proc/{pid}/root")).join(cwd.strip_prefix("/").unwrap_or(&cwd));
    let cwd = if private && !on_host.is_dir() {
        "/".into()
    } else {
        cwd
    };
    let mut argv = enter_command(pid, &cwd);
    // With Slurm in the testbed, its commands find the cluster there.
    let conf = crate::slurm::conf_path(prefix);
    if conf.is_file() {
        argv.push(format!("SLURM_CONF={}", conf.display()));
    }
    Ok(argv)
}

/// The pid of `host`'s running sshd in the testbed with `prefix`, if it runs.
pub fn sshd_pid(prefix: &str, host: &str) -> Option<i32> {
    let state = state_dir(prefix);
    let pid = read_pid(&state.join("hosts").join(host).join("sshd.pid"))?;
    (alive(pid) && cmdline(pid).contains(&state.display().to_string())).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: &str = r#"
[[cluster]]
name = "a"
kind = "private"
front = "fa"
public_addr = "198.18.0.10"
[[cluster.host]]
name = "a1"
addr = "10.1.0.11"
[[cluster.host]]
name = "a2"
addr = "10.1.0.12"
[[cluster]]
name = "p"
kind = "public"
[[cluster.link]]
subnet = "10.201.0.0/24"
[[cluster.host]]
name = "p1"
addr = "198.18.1.1"
rails = ["10.201.0.1"]
"#;

    fn ssh_plan() -> SshPlan {
        let grid = Topology::parse("g", GRID).unwrap();
        let plan = Plan::new(&grid, "fy7-").unwrap();
        SshPlan::new(
            &grid,
            &plan,
            Path::new("/run/ferry-testbed"),
            Path::new("/usr/sbin/sshd"),
        )
        .unwrap()
    }

    #[test]
    fn every_host_and_front_is_a_machine_with_its_sshd() {
        let p = ssh_plan();
        assert_eq!(p.hosts(), ["fa", "a1", "a2", "p1"]);
        assert_eq!(
            p.ssh_config(),
            Path::new("/run/ferry-testbed/fy7-/ssh_config")
        );
        assert_eq!(
            p.ssh_command().join(" "),
            "ssh -F /run/ferry-testbed/fy7-/ssh_config"
        );
        assert_eq!(ssh_command("fy7-"), p.ssh_command());
        let steps = p.steps();
        let runs: Vec<String> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Run(argv) => Some(argv.join(" ")),
                _ => None,
            })
            .collect();
        // One client key and one host key per machine.
        assert_eq!(
            runs.iter().filter(|r| r.starts_with("ssh-keygen")).count(),
            5
        );
        // Each sshd starts in its host's namespace, with its own UTS and IPC namespaces.
        for (host, ns) in [("fa", "fy7-fa"), ("a1", "fy7-a1"), ("p1", "fy7-p1")] {
            let start = format!("ip netns exec {ns} unshare --uts --ipc -- sh -c ");
            let line = runs
                .iter()
                .find(|r| r.starts_with(&start))
                .unwrap_or_else(|| panic!("{host}: {runs:?}"));
            assert!(
                line.ends_with(&format!(
                    "ferry-host {host} /run/ferry-testbed/fy7-/hosts/{host} /usr/sbin/sshd"
                )),
                "{line}"
            );
        }
        // The sshds start last, after every file they read, and are waited for.
        let first_start = steps
            .iter()
            .position(|s| matches!(s, Step::Run(a) if a[0] == "ip"))
            .unwrap();
        assert!(steps[..first_start]
            .iter()
            .all(|s| !matches!(s, Step::WaitReady(_))));
        assert!(matches!(steps.last(), Some(Step::WaitReady(w)) if w.len() == 4));
        // Every namespace gets a hosts file naming every machine.
        let writes: Vec<(&Path, &str)> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Write { path, text } => Some((path.as_path(), text.as_str())),
                _ => None,
            })
            .collect();
        for ns in ["fy7-fa", "fy7-a1", "fy7-a2", "fy7-p1"] {
            let hosts = format!("/etc/netns/{ns}/hosts");
            let (_, text) = writes
                .iter()
                .find(|(p, _)| *p == Path::new(&hosts))
                .unwrap_or_else(|| panic!("{hosts}"));
            assert!(text.contains("127.0.0.1 localhost\n"));
            assert!(text.contains("198.18.0.10 fa\n"));
            assert!(text.contains("10.1.0.12 a2\n"));
            assert!(text.contains("198.18.1.1 p1\n"));
        }
        // Everything else stays in the testbed's state directory.
        for s in &steps {
            let path = match s {
                Step::Dir { path, .. } | Step::Write { path, .. } | Step::FreshId { path, .. } => {
                    path
                }
                Step::Collect { to, .. } => to,
                _ => continue,
            };
            let p = path.display().to_string();
            assert!(
                p.starts_with("/run/ferry-testbed/fy7-")
                    || p.starts_with("/etc/netns/fy7-")
                    || p == "/run/sshd",
                "{p}"
            );
        }
    }

    #[test]
    fn sshd_listens_on_every_address_and_lets_in_root_by_key_only() {
        let p = ssh_plan();
        let fa = p.sshd_config(&p.machines[0]);
        assert!(fa.contains("ListenAddress 198.18.0.10:22\n"));
        assert!(fa.contains("ListenAddress 10.1.0.1:22\n"));
        let p1 = p.sshd_config(&p.machines[3]);
        assert!(p1.contains("ListenAddress 198.18.1.1:22\nListenAddress 10.201.0.1:22\n"));
        for line in [
            "AllowUsers root",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "PidFile /run/ferry-testbed/fy7-/hosts/p1/sshd.pid",
            "HostKey /run/ferry-testbed/fy7-/hosts/p1/ssh_host_ed25519_key",
            "AuthorizedKeysFile /run/ferry-testbed/fy7-/authorized_keys",
        ] {
            assert!(p1.contains(&format!("{line}\n")), "{line}");
        }
        // known_hosts names each host by name and every address.
        let known = p
            .steps()
            .into_iter()
            .find_map(|s| match s {
                Step::Collect { to, keys } if to.ends_with("known_hosts") => Some(keys),
                _ => None,
            })
            .unwrap();
        let names: Vec<&str> = known.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "fa,198.18.0.10,10.1.0.1 ",
                "a1,10.1.0.11 ",
                "a2,10.1.0.12 ",
                "p1,198.18.1.1,10.201.0.1 "
            ]
        );
    }

    #[test]
    fn ssh_config_jumps_into_private_clusters_from_outside_only() {
        let text = ssh_plan().ssh_config_text();
        for entry in [
            "Host fa 198.18.0.10 10.1.0.1\n    HostName 198.18.0.10\n",
            "Host a1 10.1.0.11\n    HostName 10.1.0.11\n",
            "Host p1 198.18.1.1 10.201.0.1\n    HostName 198.18.1.1\n",
            "Match originalhost a1,10.1.0.11,a2,10.1.0.12 !exec \"case %L in fa|a1|a2) exit 0;; esac; exit 1\"\n    ProxyJump fa\n",
            "Host fa 198.18.0.10 10.1.0.1 a1 10.1.0.11 a2 10.1.0.12 p1 198.18.1.1 10.201.0.1\n    User root\n",
            "    IdentityFile /run/ferry-testbed/fy7-/id_ed25519\n",
            "    UserKnownHostsFile /run/ferry-testbed/fy7-/known_hosts\n",
            "    StrictHostKeyChecking yes\n",
            "    BatchMode yes\n",
        ] {
            assert!(text.contains(entry), "{entry:?} in\n{text}");
        }
        assert_eq!(text.matches("ProxyJump").count(), 1);
    }

    #[test]
    fn host_command_enters_the_sshds_namespaces() {
        assert_eq!(
            enter_command(42, Path::new("/work")).join(" "),
            "nsenter --target 42 --net --mount --uts --ipc -- env --chdir /work"
        );
    }

    #[test]
    fn alive_knows_this_process_and_not_a_made_up_one() {
        assert!(alive(std::process::id() as i32));
        assert!(!alive(i32::MAX));
    }

    #[test]
    fn descendants_include_a_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let all = with_descendants(&[me]);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(all[0], me);
        assert!(all.contains(&(child.id() as i32)), "{all:?}");
    }
}
