//! The launcher's side of a multi-host job: one node daemon per host ([`crate::node`]),
//! started over a remote shell (ssh by default), as a Slurm job step (`srun`, inside an
//! allocation), or as a child on the launcher's own host.
//!
//! Each daemon is a child process of ours (`ssh HOST 'FERRY node'`, `srun … --nodelist=HOST
//! FERRY node`, or `FERRY node` here) whose
//! standard input and output carry [`ferry_wire::node`] frames; its standard error is ours, so
//! ssh's own messages ("Permission denied", "Could not resolve hostname") reach the user as
//! they are. The job description, the job key with it, goes in the first frame on the
//! daemon's standard input: through ssh's encrypted channel (or Slurm's step I/O, which
//! srun and slurmstepd authenticate), never on a command line.
//!
//! Under Slurm each host's daemon is a job step of its own ([`srun_shell`]): `--overlap` so
//! that the steps share the allocation's CPUs (with one another and with the ranks' own
//! steps, if any); `--unbuffered` because slurmstepd otherwise holds a task's output back
//! until a newline, and the frames are binary (in Slurm 22.05 this means no buffering, not a
//! terminal: the task still writes to a pipe); `--mpi=none` so that no PMI server is set up
//! for the daemon and no PMI variables reach its ranks; `--kill-on-bad-exit=0` so that the
//! step's fate is ours to decide. A step gets all of the job's CPUs on its node unless
//! `--exact` is given, so a task/affinity plugin binds the daemon, and the ranks it forks, to
//! all of them (`--cpu-bind=none` would only make srun complain where binding is off). srun
//! passes its standard input to every task of the step (`--input` defaults to all), here the
//! one. A killed daemon ends its step, so srun exits and its output ends: the host is named
//! as for ssh. When the job ends, the daemons' inputs close and they end; what is left gets
//! SIGTERM (which srun passes on to its step) before SIGKILL. In a tree of daemons a daemon
//! starts its children's steps with srun from inside its own step, in the same form.
//!
//! A thread per daemon decodes its frames into [`NodeEvent`]s for the job monitor. When a
//! daemon's output ends before it reported every rank — it was killed, its host went down,
//! ssh failed — the monitor ends the job naming the host.
//!
//! The ranks reach the bootstrap server directly (it listens on every interface, and hands out
//! per host the launcher's address on the route to that host); the daemons forward output,
//! exits and signals. Addresses: host names are resolved here; a host counts as this one when
//! it resolves to an address of this machine (or is named like it).

use crate::LaunchError;
use ferry_wire::node::{ChildNode, JobSpec, NodeMessage};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

/// A host of the job and the ranks it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodePlan {
    /// The host: its name in messages, and what the remote shell takes unless `dest` says
    /// otherwise (a name, an address, or an ssh alias).
    pub host: String,
    /// Its ranks, ascending.
    pub ranks: Vec<u32>,
    /// The remote shell's destination for it, when not `host` (a grid file's `ssh`).
    pub dest: Option<String>,
    /// The host ssh reaches it through (`ProxyJump`): the front node of a private cluster.
    pub jump: Option<String>,
    /// Environment for this host's ranks only (a grid's placement of the host).
    pub env: Vec<(String, String)>,
}

impl NodePlan {
    /// `ranks` on `host`, reached by its name, with no environment of its own.
    pub(crate) fn on(host: &str, ranks: Vec<u32>) -> NodePlan {
        NodePlan {
            host: host.to_string(),
            ranks,
            dest: None,
            jump: None,
            env: Vec::new(),
        }
    }
}

/// The remote shell words that start a daemon as a Slurm job step on one node of the
/// allocation (see the module doc); the host follows as `--nodelist=HOST`.
pub(crate) fn srun_shell() -> Vec<String> {
    [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "--unbuffered",
        "--mpi=none",
        "--kill-on-bad-exit=0",
        "--quiet",
    ]
    .map(String::from)
    .to_vec()
}

/// How the remote shell takes the daemon's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommandForm {
    /// `SHELL… HOST 'FERRY node'`: the host, then one string that a shell on the host
    /// interprets (ssh, rsh).
    Quoted,
    /// `SHELL… --nodelist=HOST FERRY node`: the program and its arguments as words of their
    /// own, executed without a shell (srun).
    Words,
}

/// How to start a job on several hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteLaunch {
    /// The hosts, each with its ranks (every rank of the job exactly once).
    pub nodes: Vec<NodePlan>,
    /// The remote shell command, split in words (`["ssh"]`, or `FERRY_SSH`'s words); empty:
    /// every daemon runs here as a child (for tests, and for hosts that are this one).
    pub shell: Vec<String>,
    /// How `shell` takes the host and the daemon's command.
    pub form: CommandForm,
    /// The `ferry` executable, the same path on every host.
    pub ferry: PathBuf,
    /// The hosts of a grid: their ranks publish the grid's addresses, so the launcher does not
    /// look for routes to them (private hosts have none from outside).
    pub grid: bool,
}

/// What a daemon's reader thread reports.
pub(crate) enum NodeEvent {
    /// A frame from the daemon.
    Message(NodeMessage),
    /// Its output ended (or made no sense): why.
    Closed(String),
}

/// One running daemon.
pub(crate) struct NodeLink {
    pub(crate) host: String,
    pub(crate) ranks: Vec<u32>,
    child: Child,
    /// Shared with the thread that forwards rank 0's input: whole frames under the lock.
    stdin: Option<Arc<Mutex<ChildStdin>>>,
    /// Its output ended.
    pub(crate) closed: bool,
    /// It has said something (a daemon that never does is named after the connect timeout).
    pub(crate) heard: bool,
}

/// The job's daemons and the events of all of them.
pub(crate) struct Nodes {
    pub(crate) links: Vec<NodeLink>,
    events: Receiver<(usize, NodeEvent)>,
}

fn remote_error(what: impl std::fmt::Display) -> LaunchError {
    LaunchError::Remote(what.to_string())
}

/// The addresses `host` resolves to.
fn resolve(host: &str) -> Result<Vec<IpAddr>, LaunchError> {
    let addrs = (host, 0).to_socket_addrs().map_err(|e| {
        remote_error(format!(
            "cannot resolve host {host:?} ({e}); the hosts of a job need names that resolve here (DNS or /etc/hosts) or addresses"
        ))
    })?;
    Ok(addrs.map(|a| a.ip()).collect())
}

/// Whether `ip` is an address of this machine (in this network namespace).
fn is_own(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::TcpListener::bind((ip, 0)).is_ok()
}

/// This machine's address on the route to `ip`: the kernel picks the source address of a
/// connected UDP socket; nothing is sent.
pub(crate) fn address_towards(ip: IpAddr) -> Result<IpAddr, LaunchError> {
    let bind: SocketAddr = match ip {
        IpAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(bind).map_err(|e| remote_error(format!("udp socket: {e}")))?;
    socket
        .connect((ip, 9))
        .map_err(|e| remote_error(format!("no route to {ip}: {e}")))?;
    Ok(socket
        .local_addr()
        .map_err(|e| remote_error(format!("getsockname: {e}")))?
        .ip())
}

/// Per node, the launcher's address as that host reaches it (its ranks publish their own
/// address on the route there), and whether the node is this host (its daemon then runs
/// here, without the remote shell). Local nodes get the address remote hosts reach us by (so
/// that the ranks here publish an address the others can reach), or loopback when every host
/// is here.
pub(crate) fn launcher_addresses(
    launch: &RemoteLaunch,
    port: u16,
) -> Result<Vec<(SocketAddr, bool)>, LaunchError> {
    let own_name = crate::sys::hostname();
    let mut towards: Vec<Option<IpAddr>> = Vec::with_capacity(launch.nodes.len());
    for node in &launch.nodes {
        if launch.shell.is_empty() || crate::hosts::is_this_host(&node.host, &own_name) {
            towards.push(None);
            continue;
        }
        if launch.grid {
            // Any address: the daemon then sets no FERRY_TCP_ADDR (the placement has it).
            towards.push(Some(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)));
            continue;
        }
        let ips = resolve(&node.host)?;
        let ip = ips
            .iter()
            .copied()
            .find(IpAddr::is_ipv4)
            .or_else(|| ips.first().copied())
            .ok_or_else(|| remote_error(format!("host {:?} has no address", node.host)))?;
        towards.push(if is_own(ip) {
            None
        } else {
            Some(address_towards(ip)?)
        });
    }
    let here = towards
        .iter()
        .flatten()
        .next()
        .copied()
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    Ok(towards
        .into_iter()
        .map(|t| (SocketAddr::new(t.unwrap_or(here), port), t.is_none()))
        .collect())
}

/// Starts the daemon `command` for `host` (which speaks for `ranks`) with piped standard
/// input and output, in a process group of its own and ending with us, and a thread that
/// reports its frames on `tx` as daemon `index`.
fn spawn_link(
    mut command: Command,
    host: &str,
    ranks: Vec<u32>,
    index: usize,
    tx: &Sender<(usize, NodeEvent)>,
) -> Result<NodeLink, LaunchError> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        // Our own group's signals (a terminal's Ctrl-C) are ours to pass on.
        .process_group(0);
    crate::sys::end_with_launcher(&mut command, libc::SIGTERM);
    let mut child = command.spawn().map_err(|e| {
        remote_error(format!(
            "cannot start the node daemon for host {host} ({:?}): {}",
            command.get_program(),
            crate::limits::explain(&e)
        ))
    })?;
    if let Some(stdout) = child.stdout.take() {
        let tx = tx.clone();
        thread::Builder::new()
            .name("ferry-node-link".into())
            .stack_size(256 * 1024)
            .spawn(move || read_frames(stdout, |event| tx.send((index, event)).is_ok()))
            .map_err(|e| remote_error(format!("cannot start a thread: {e}")))?;
    }
    let stdin = child.stdin.take();
    Ok(NodeLink {
        host: host.to_string(),
        ranks,
        child,
        stdin: stdin.map(|s| Arc::new(Mutex::new(s))),
        closed: false,
        heard: false,
    })
}

/// The daemon of `node` over the remote shell `shell`, which takes the command as `form` says.
fn remote_command(
    shell: &[String],
    form: CommandForm,
    node: &NodePlan,
    ferry: &std::path::Path,
) -> Command {
    let argv = daemon_argv(shell, form, node, ferry);
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    c
}

/// The command line that starts `node`'s daemon through the remote shell `shell`, which
/// takes it as `form` says.
fn daemon_argv(
    shell: &[String],
    form: CommandForm,
    node: &NodePlan,
    ferry: &std::path::Path,
) -> Vec<String> {
    let ferry = ferry.to_string_lossy();
    let mut argv = shell.to_vec();
    match form {
        CommandForm::Quoted => {
            if let Some(jump) = &node.jump {
                argv.extend(["-o".to_string(), format!("ProxyJump={jump}")]);
            }
            argv.push(node.dest.as_ref().unwrap_or(&node.host).clone());
            argv.push(format!("{} node", shell_quote(&ferry)));
        }
        CommandForm::Words => {
            argv.push(format!("--nodelist={}", node.host));
            argv.push(ferry.into_owned());
            argv.push("node".into());
        }
    }
    argv
}

/// `nodes` cut into at most `fanout` groups of consecutive nodes, sizes differing by at most
/// one: each group's first node is started by the launcher and starts the others.
pub(crate) fn tree_groups(nodes: &[usize], fanout: usize) -> Vec<Vec<usize>> {
    let groups = nodes.len().min(fanout.max(1));
    let mut out = Vec::with_capacity(groups);
    let mut at = 0;
    for g in 0..groups {
        let size = nodes.len() / groups + usize::from(g < nodes.len() % groups);
        out.push(nodes[at..at + size].to_vec());
        at += size;
    }
    out
}

/// Quotes `word` for a POSIX shell (what ssh hands the remote command to).
pub(crate) fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:=,@".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

impl RemoteLaunch {
    /// The command line that starts `node`'s daemon through the remote shell.
    fn daemon_argv(&self, node: &NodePlan) -> Vec<String> {
        daemon_argv(&self.shell, self.form, node, &self.ferry)
    }
}

impl Nodes {
    /// Starts one daemon per node and sends each its job description (`spec` with the node's
    /// ranks and the launcher's address filled in).
    pub(crate) fn start(
        launch: &RemoteLaunch,
        spec: &JobSpec,
        launcher: &[(SocketAddr, bool)],
        fanout: usize,
    ) -> Result<Nodes, LaunchError> {
        let specs: Vec<JobSpec> = launch
            .nodes
            .iter()
            .zip(launcher)
            .map(|(node, (addr, _))| {
                let mut spec = JobSpec {
                    launcher: addr.to_string(),
                    ranks: node.ranks.clone(),
                    ..spec.clone()
                };
                spec.env.extend(
                    node.env
                        .iter()
                        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())),
                );
                spec
            })
            .collect();
        // Daemons here are started here; the others in groups whose first daemon starts the
        // rest, so that we hold at most `fanout` remote shells.
        let here: Vec<usize> = (0..launch.nodes.len()).filter(|&i| launcher[i].1).collect();
        let remote: Vec<usize> = (0..launch.nodes.len())
            .filter(|&i| !launcher[i].1)
            .collect();
        let mut groups: Vec<Vec<usize>> = here.iter().map(|&i| vec![i]).collect();
        groups.extend(tree_groups(&remote, fanout));
        let (tx, events) = mpsc::channel();
        let mut nodes = Nodes {
            links: Vec::new(),
            events,
        };
        for group in groups {
            let head = group[0];
            let node = &launch.nodes[head];
            let command = if launcher[head].1 {
                let mut c = Command::new(&launch.ferry);
                c.arg("node");
                c
            } else {
                let argv = launch.daemon_argv(node);
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            };
            let index = nodes.links.len();
            // Every rank the daemon speaks for: its own and its children's.
            let ranks = group
                .iter()
                .flat_map(|&i| launch.nodes[i].ranks.iter().copied())
                .collect();
            let link = spawn_link(command, &node.host, ranks, index, &tx)?;
            nodes.links.push(link);
            nodes.send(index, &NodeMessage::Start(Box::new(specs[head].clone())));
            if group.len() > 1 {
                let children = group[1..]
                    .iter()
                    .map(|&i| ChildNode {
                        host: launch.nodes[i].host.clone(),
                        dest: launch.nodes[i].dest.clone().unwrap_or_default(),
                        jump: launch.nodes[i].jump.clone().unwrap_or_default(),
                        spec: specs[i].clone(),
                    })
                    .collect();
                nodes.send(
                    index,
                    &NodeMessage::Children {
                        ferry: launch.ferry.to_string_lossy().into_owned(),
                        shell: launch.shell.clone(),
                        words: launch.form == CommandForm::Words,
                        nodes: children,
                    },
                );
            }
        }
        Ok(nodes)
    }

    /// Starts a daemon for each of `children` over `shell` (a node daemon starting the rest
    /// of its group, see [`tree_groups`]), each with its job description.
    pub(crate) fn start_children(
        ferry: &std::path::Path,
        shell: &[String],
        form: CommandForm,
        children: Vec<ChildNode>,
    ) -> Result<Nodes, LaunchError> {
        let (tx, events) = mpsc::channel();
        let mut nodes = Nodes {
            links: Vec::new(),
            events,
        };
        if shell.is_empty() {
            return Err(remote_error("no remote shell for the child daemons"));
        }
        for (index, child_node) in children.into_iter().enumerate() {
            let plan = NodePlan {
                host: child_node.host.clone(),
                ranks: child_node.spec.ranks.clone(),
                dest: Some(child_node.dest).filter(|d| !d.is_empty()),
                jump: Some(child_node.jump).filter(|j| !j.is_empty()),
                env: Vec::new(),
            };
            let command = remote_command(shell, form, &plan, ferry);
            let link = spawn_link(command, &plan.host, plan.ranks.clone(), index, &tx)?;
            nodes.links.push(link);
            nodes.send(index, &NodeMessage::Start(Box::new(child_node.spec)));
        }
        Ok(nodes)
    }

    /// The events of every daemon, for a caller that waits on a channel of its own.
    pub(crate) fn take_events(&mut self) -> Receiver<(usize, NodeEvent)> {
        let (_, empty) = mpsc::channel();
        std::mem::replace(&mut self.events, empty)
    }

    /// Sends `message` to daemon `index`; a daemon that cannot be written to is left to its
    /// reader, which reports it closed.
    pub(crate) fn send(&mut self, index: usize, message: &NodeMessage) {
        let Some(stdin) = self.links.get(index).and_then(|l| l.stdin.clone()) else {
            return;
        };
        if !write_frame(&stdin, message) {
            self.links[index].stdin = None;
        }
    }

    /// A handle for writing frames to daemon `index` from another thread.
    pub(crate) fn stdin_writer(&self, index: usize) -> Option<Arc<Mutex<ChildStdin>>> {
        self.links.get(index)?.stdin.clone()
    }

    /// Sends `message` to every daemon still there.
    pub(crate) fn send_all(&mut self, message: &NodeMessage) {
        for index in 0..self.links.len() {
            if !self.links[index].closed {
                self.send(index, message);
            }
        }
    }

    /// The next event of any daemon, if one is waiting.
    pub(crate) fn try_event(&self) -> Option<(usize, NodeEvent)> {
        self.events.try_recv().ok()
    }

    /// The next event of any daemon, waiting at most `timeout` for one.
    pub(crate) fn wait_event(&self, timeout: Duration) -> Option<(usize, NodeEvent)> {
        self.events.recv_timeout(timeout).ok()
    }

    /// How daemon `index` ended, if it has (waits up to `grace` for it).
    pub(crate) fn exit_status(&mut self, index: usize, grace: Duration) -> Option<String> {
        let until = std::time::Instant::now() + grace;
        let link = self.links.get_mut(index)?;
        loop {
            if let Ok(Some(status)) = link.child.try_wait() {
                return Some(status.to_string());
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Closes every daemon's input (which ends its ranks if they still run), then waits a
    /// little for the daemons, sends what is left SIGTERM (srun passes it on to its step, so
    /// the step ends as a step, not by slurmstepd finding srun gone), waits as long again and
    /// kills the rest.
    pub(crate) fn finish(&mut self, grace: Duration) {
        for link in &mut self.links {
            link.stdin = None;
        }
        if !self.wait_all(grace) {
            for link in &mut self.links {
                if let Ok(None) = link.child.try_wait() {
                    crate::sys::kill_process(link.child.id(), libc::SIGTERM);
                }
            }
            self.wait_all(grace);
        }
        for link in &mut self.links {
            if let Ok(None) = link.child.try_wait() {
                let _ = link.child.kill();
                let _ = link.child.wait();
            }
        }
    }

    /// Waits up to `grace` for every daemon to end; true if they all did.
    fn wait_all(&mut self, grace: Duration) -> bool {
        let until = std::time::Instant::now() + grace;
        loop {
            let running = self
                .links
                .iter_mut()
                .filter_map(|l| l.child.try_wait().ok())
                .filter(Option::is_none)
                .count();
            if running == 0 {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.finish(Duration::from_millis(500));
    }
}

/// The job's key space when the node daemons speak for the ranks (see `crate::node`): the
/// launcher's side of put, get and fence, without I/O. Every put is logged in order, and a
/// fence sends each daemon what it has not been sent yet.
pub(crate) struct NodeKv {
    kv: HashMap<String, String>,
    log: Vec<(String, String)>,
    /// Per daemon: how much of `log` it has been sent.
    seen: Vec<usize>,
    /// Per daemon: whether its ranks are all in the current fence.
    fenced: Vec<bool>,
}

impl NodeKv {
    /// The key space of a job on `nodes` daemons.
    pub(crate) fn new(nodes: usize) -> NodeKv {
        NodeKv {
            kv: HashMap::new(),
            log: Vec::new(),
            seen: vec![0; nodes],
            fenced: vec![false; nodes],
        }
    }

    /// Takes bootstrap message `message` of daemon `node`; returns the answers to send, each
    /// to a daemon. Other messages are not its business (nothing to send).
    pub(crate) fn handle(
        &mut self,
        node: usize,
        message: NodeMessage,
    ) -> Vec<(usize, NodeMessage)> {
        match message {
            NodeMessage::KvPut { rank, key, value } => {
                self.kv.insert(key.clone(), value.clone());
                self.log.push((key, value));
                vec![(node, NodeMessage::KvAck { rank })]
            }
            NodeMessage::KvGet { rank, key } => {
                let value = self.kv.get(&key).cloned();
                vec![(node, NodeMessage::KvValue { rank, value })]
            }
            NodeMessage::Fence => {
                if let Some(f) = self.fenced.get_mut(node) {
                    *f = true;
                }
                if !self.fenced.iter().all(|&f| f) {
                    return Vec::new();
                }
                let end = self.log.len();
                let log = &self.log;
                let answers = self
                    .seen
                    .iter()
                    .enumerate()
                    .map(|(n, &seen)| {
                        let entries = log[seen..].to_vec();
                        (n, NodeMessage::FenceDone { entries })
                    })
                    .collect();
                self.seen.iter_mut().for_each(|s| *s = end);
                self.fenced.iter_mut().for_each(|f| *f = false);
                answers
            }
            _ => Vec::new(),
        }
    }
}

/// Writes `message` whole to a daemon's input; false if that failed.
pub(crate) fn write_frame(stdin: &Mutex<ChildStdin>, message: &NodeMessage) -> bool {
    let mut stdin = stdin.lock().unwrap_or_else(PoisonError::into_inner);
    stdin.write_all(&message.to_bytes()).is_ok()
}

/// Reads control frames from `input` until it ends or holds garbage, handing each to `take`
/// (which says whether to go on) and then the end, as [`NodeEvent::Closed`] with why.
pub(crate) fn read_frames(mut input: impl Read, mut take: impl FnMut(NodeEvent) -> bool) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        loop {
            match NodeMessage::decode(&buf) {
                Ok(Some((message, used))) => {
                    buf.drain(..used);
                    if !take(NodeEvent::Message(message)) {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    take(NodeEvent::Closed(e.to_string()));
                    return;
                }
            }
        }
        match input.read(&mut chunk) {
            Ok(0) => {
                take(NodeEvent::Closed("its connection closed".into()));
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                take(NodeEvent::Closed(e.to_string()));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_waits_for_every_host_and_sends_each_what_it_has_not_seen() {
        let mut kv = NodeKv::new(2);
        let put = |rank: u32, key: &str| NodeMessage::KvPut {
            rank,
            key: key.into(),
            value: format!("v{rank}"),
        };
        assert_eq!(
            kv.handle(0, put(0, "card-0")),
            vec![(0, NodeMessage::KvAck { rank: 0 })]
        );
        kv.handle(1, put(1, "card-1"));
        assert_eq!(kv.handle(0, NodeMessage::Fence), vec![]);
        let done = kv.handle(1, NodeMessage::Fence);
        let both = vec![
            ("card-0".to_string(), "v0".to_string()),
            ("card-1".to_string(), "v1".to_string()),
        ];
        assert_eq!(
            done,
            vec![
                (
                    0,
                    NodeMessage::FenceDone {
                        entries: both.clone()
                    }
                ),
                (1, NodeMessage::FenceDone { entries: both })
            ]
        );
        // The next fence carries only what came since; a get asks the whole space.
        kv.handle(1, put(3, "tcp-3"));
        kv.handle(1, NodeMessage::Fence);
        let done = kv.handle(0, NodeMessage::Fence);
        assert_eq!(done.len(), 2);
        for (_, m) in done {
            assert_eq!(
                m,
                NodeMessage::FenceDone {
                    entries: vec![("tcp-3".into(), "v3".into())]
                }
            );
        }
        assert_eq!(
            kv.handle(
                0,
                NodeMessage::KvGet {
                    rank: 2,
                    key: "card-1".into()
                }
            ),
            vec![(
                0,
                NodeMessage::KvValue {
                    rank: 2,
                    value: Some("v1".into())
                }
            )]
        );
        assert_eq!(
            kv.handle(
                0,
                NodeMessage::KvGet {
                    rank: 2,
                    key: "nope".into()
                }
            ),
            vec![(
                0,
                NodeMessage::KvValue {
                    rank: 2,
                    value: None
                }
            )]
        );
    }

    #[test]
    fn tree_groups_split_evenly_and_keep_every_node_once() {
        let nodes: Vec<usize> = (0..10).collect();
        let groups = tree_groups(&nodes, 3);
        assert_eq!(groups, vec![vec![0, 1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]]);
        assert_eq!(tree_groups(&nodes[..2], 32), vec![vec![0], vec![1]]);
        assert_eq!(tree_groups(&nodes[..3], 1), vec![vec![0, 1, 2]]);
        assert!(tree_groups(&[], 4).is_empty());
        for fanout in 1..12 {
            let flat: Vec<usize> = tree_groups(&nodes, fanout).concat();
            assert_eq!(flat, nodes);
        }
    }

    #[test]
    fn words_are_quoted_for_the_remote_shell_only_when_needed() {
        assert_eq!(shell_quote("/opt/ferry/bin/ferry"), "/opt/ferry/bin/ferry");
        assert_eq!(shell_quote("/my dir/ferry"), "'/my dir/ferry'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn ssh_gets_one_quoted_command_and_srun_separate_words() {
        let ssh = RemoteLaunch {
            nodes: vec![NodePlan::on("b", vec![0])],
            shell: vec!["ssh".into(), "-x".into()],
            form: CommandForm::Quoted,
            ferry: "/my dir/ferry".into(),
            grid: false,
        };
        assert_eq!(
            ssh.daemon_argv(&NodePlan::on("b", vec![0])),
            ["ssh", "-x", "b", "'/my dir/ferry' node"]
        );
        let behind = NodePlan {
            dest: Some("10.1.0.11".into()),
            jump: Some("fa".into()),
            ..NodePlan::on("a1", vec![0])
        };
        assert_eq!(
            ssh.daemon_argv(&behind),
            [
                "ssh",
                "-x",
                "-o",
                "ProxyJump=fa",
                "10.1.0.11",
                "'/my dir/ferry' node"
            ]
        );
        let srun = RemoteLaunch {
            shell: srun_shell(),
            form: CommandForm::Words,
            ..ssh
        };
        let argv = srun.daemon_argv(&NodePlan::on("n7", vec![0]));
        assert_eq!(argv[0], "srun");
        assert_eq!(
            argv[argv.len() - 3..],
            ["--nodelist=n7", "/my dir/ferry", "node"]
        );
        for flag in [
            "--nodes=1",
            "--ntasks=1",
            "--overlap",
            "--unbuffered",
            "--mpi=none",
        ] {
            assert!(argv.contains(&flag.to_string()), "{flag}");
        }
    }

    #[test]
    fn local_daemons_reach_the_launcher_over_loopback() {
        let launch = RemoteLaunch {
            nodes: vec![NodePlan::on("a", vec![0]), NodePlan::on("b", vec![1])],
            shell: Vec::new(),
            form: CommandForm::Quoted,
            ferry: "ferry".into(),
            grid: false,
        };
        let addrs = launcher_addresses(&launch, 7000).unwrap();
        assert_eq!(
            addrs,
            vec![(SocketAddr::from(([127, 0, 0, 1], 7000)), true); 2]
        );
    }
}
