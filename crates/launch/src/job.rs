//! One job on this host: spawn the ranks, watch them and the bootstrap server, end the job.
//!
//! The monitor is a single loop that wakes on every bootstrap event and at least every
//! [`TICK`]: it reaps ranks with `try_wait` (it is the only one that reaps them, so a pid it
//! signals is never a reused one), decides whether the first rank to end failed, watches the
//! launcher's signals and the timeout, and tears the job down.

use crate::grid::GridJob;
use crate::hosts::{is_this_host, Launcher};
use crate::output::{self, Sink};
use crate::remote::{CommandForm, NodeEvent, NodeKv, NodePlan, Nodes, RemoteLaunch};
use crate::server::{BootstrapEvent, BootstrapServer};
use crate::signals::Signals;
use crate::sys;
use crate::{timeout_from_env, LaunchError, LaunchOptions, Outcome, RankFailure};
use ferry_wire::node::{JobSpec, NodeMessage, RankExit, Session, Stream};
use ferry_wire::pmi::env;
use ferry_wire::JobKey;
use std::io;
use std::net::SocketAddr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The monitor's polling period for rank exits.
const TICK: Duration = Duration::from_millis(20);
/// How long after a connected rank exits we wait for its connection to close, so that an
/// `abort` or `finalize` it sent just before exiting is seen before its exit is judged; and how
/// long after a connection closes without `finalize` we wait for the rank's exit status.
const CLOSE_GRACE: Duration = Duration::from_millis(500);
/// Between SIGTERM and SIGKILL when the job fails or times out.
const TERM_GRACE: Duration = Duration::from_secs(1);
/// Between passing on the launcher's signal and SIGKILL.
const SIGNAL_GRACE: Duration = Duration::from_secs(2);
/// How long we wait for SIGKILLed ranks to be reaped before giving up on them.
const REAP_LIMIT: Duration = Duration::from_secs(2);
/// How long we wait for the ranks' output to drain once they have all exited.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);
/// The same when the job was torn down (everything it started has been killed).
const OUTPUT_GRACE_TORN_DOWN: Duration = Duration::from_millis(500);
/// How long a rank's failure waits for news of a failed host before it is reported (see
/// `Job::host_failure_first`).
const HOST_FAILURE_GRACE: Duration = Duration::from_millis(300);
/// While starting ranks, the ones already ended are reaped after every this many.
const REAP_EVERY: u32 = 32;
/// How long a failure that is not a rank killed by a signal waits for one (see
/// `Job::killed_rank_first`).
const KILLED_RANK_GRACE: Duration = Duration::from_millis(250);

/// Runs `opts.np` ranks of `opts.program` on this host and waits until the job ends.
///
/// Blocks until every rank has exited (or has been killed). Prints nothing of its own when the job
/// succeeds; otherwise one line on stderr that names what ended it. For the duration of the call,
/// SIGINT, SIGTERM and SIGHUP sent to this process are passed on to the ranks instead of ending
/// it (the handlers stay installed, inert, afterwards). The job's shared-memory files
/// (`/dev/shm/ferry-<job id>-*`) are removed however the job ends.
///
/// Returns `Err` only when the job could not be started; a job that ran and failed is an
/// `Ok` outcome with a non-zero [`Outcome::exit_code`].
pub fn run(opts: &LaunchOptions) -> Result<Outcome, LaunchError> {
    if opts.np == 0 {
        return Err(LaunchError::NoRanks);
    }
    if opts.program.is_empty() {
        return Err(LaunchError::NoProgram);
    }
    let oversubscribe =
        crate::oversubscribe_allowed(opts.oversubscribe, |name| std::env::var(name).ok())?;
    // Every rank here (a grid in the testbed is on this machine too): this host's limit now,
    // before anything starts. A node daemon checks its own host's share.
    let all_here = match &opts.grid {
        Some(g) => !g.over_ssh,
        None => remote_plan(opts)?.is_none(),
    };
    let cores = if all_here { crate::usable_cores() } else { 0 };
    crate::check_rank_limit(
        opts.np.into(),
        &sys::hostname(),
        cores,
        oversubscribe || !all_here,
    )?;
    let timeout = match opts.timeout {
        Some(timeout) => Some(timeout),
        None => timeout_from_env()?,
    }
    .filter(|t| !t.is_zero());
    let mut key = [0u8; 32];
    sys::random(&mut key).map_err(LaunchError::Random)?;
    let key = JobKey(key);
    let job_id = loop {
        let mut bytes = [0u8; 8];
        sys::random(&mut bytes).map_err(LaunchError::Random)?;
        let id = u64::from_le_bytes(bytes);
        if id != 0 {
            break id;
        }
    };
    // Declared before everything else of the job, so dropped after it.
    let relay_key_dir = opts
        .grid
        .as_ref()
        .filter(|g| !g.over_ssh)
        .map(|_| crate::grid::relay_key_dir(job_id));
    let watchdog = crate::watchdog::Watchdog::start(job_id, relay_key_dir.as_deref());
    let signals = Signals::install().map_err(LaunchError::Signals)?;
    // Dropped after `job` (declared first): relays outlive the ranks.
    let mut grid = match &opts.grid {
        Some(g) if !g.over_ssh => Some(GridJob::prepare(g, opts.np, job_id, &key)?),
        _ => None,
    };
    let mut ssh_relays = None;
    let remote = match &opts.grid {
        Some(g) if g.over_ssh => {
            let shell = Launcher::Ssh
                .remote_shell(|name| std::env::var(name).ok())
                .unwrap_or_default();
            let (remote, relays) = crate::grid_ssh::over_ssh(g, opts.np, job_id, &key, &shell)?;
            ssh_relays = Some(relays);
            Some(remote)
        }
        _ => remote_plan(opts)?,
    };
    // The ranks of a multi-host job talk to their node daemons; this server is then idle.
    let mut server = match grid.as_mut().and_then(GridJob::take_listener) {
        Some(listener) => {
            BootstrapServer::start_on(listener, opts.np, key.clone(), crate::HANDSHAKE_TIMEOUT)
        }
        None => BootstrapServer::start(opts.np, key.clone()),
    }
    .map_err(LaunchError::Bootstrap)?;
    let start = Instant::now();
    // From here on, dropping `job` kills whatever was started and removes its shared memory.
    let mut job = Job::new(job_id);
    job.watchdog = watchdog
        .as_ref()
        .and_then(crate::watchdog::Watchdog::groups);
    job.child_exited = signals.child_exited.clone();
    // Spawned processes run on this host; a grid job's ranks run in the testbed's hosts.
    job.ssh_relays = ssh_relays;
    if opts.grid.is_none() && remote.is_none() {
        job.spawner = Some(Spawner {
            addr: server.addr(),
            key: key.clone(),
            extra_env: opts.extra_env.clone(),
            tag_output: opts.tag_output,
        });
    }
    let cpus = sys::allowed_cpus();
    job.cores = match opts.bind {
        crate::Bind::None => Vec::new(),
        crate::Bind::Core => cpus,
        crate::Bind::Auto if opts.grid.is_none() && opts.np as usize <= cpus.len() => cpus,
        crate::Bind::Auto => Vec::new(),
    };
    let deadline = timeout.map(|after| (start + after, after));
    let stopped = match &remote {
        Some(remote) => {
            job.start_nodes(opts, remote, server.addr().port(), &key)?;
            None
        }
        None => job.start_ranks(opts, &server, &key, grid.as_ref(), &signals, deadline)?,
    };
    let outcome = match stopped {
        Some(outcome) => job.end(outcome),
        None => job.monitor(&server, &signals, deadline, grid.as_mut()),
    };
    server.shutdown();
    job.finish(matches!(outcome, Outcome::Success));
    Ok(outcome)
}

/// Variables that describe the launcher's own host or session and so stay behind.
const HOST_SPECIFIC_ENV: [&str; 12] = [
    "HOSTNAME",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "DISPLAY",
    "XAUTHORITY",
    "SSH_CLIENT",
    "SSH_CONNECTION",
    "SSH_TTY",
    "SSH_AUTH_SOCK",
    "TERM",
];

/// The launcher's environment for the ranks of other hosts, as MPICH's hydra passes it by
/// default (the ranks here inherit it anyway), less what names this host or session.
fn propagated_env() -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> {
    std::env::vars_os()
        .filter(|(k, _)| !HOST_SPECIFIC_ENV.iter().any(|h| k == *h))
        .map(|(k, v)| (k.into_vec(), v.into_vec()))
}

/// Tells a rank who it is and where its bootstrap server is (`ferry_wire::pmi::env`): the
/// job key goes in its environment, never on its command line.
pub(crate) fn bootstrap_env(
    command: &mut Command,
    addr: SocketAddr,
    rank: u32,
    size: u32,
    job: u64,
    key: &JobKey,
) {
    command
        .env(env::ADDR, addr.to_string())
        .env(env::RANK, rank.to_string())
        .env(env::SIZE, size.to_string())
        .env(env::JOB_ID, job.to_string())
        .env(env::JOB_KEY, key.to_hex());
}

/// How the ranks of a job with hosts start: `None` when every host is this one (they run here
/// as any local job), else a node daemon per host through the launcher's remote shell.
fn remote_plan(opts: &LaunchOptions) -> Result<Option<RemoteLaunch>, LaunchError> {
    let Some(hosts) = &opts.hosts else {
        return Ok(None);
    };
    if opts.grid.is_some() {
        return Err(LaunchError::Remote(
            "a job runs either on a grid or on hosts, not both".into(),
        ));
    }
    let this = sys::hostname();
    let local = hosts.iter().all(|h| is_this_host(&h.host, &this));
    // Only this host: run here as any local job, unless several named hosts are to get their
    // daemons here (`--launcher local`, the multi-host path on one machine).
    if local && (opts.launcher != Launcher::Local || hosts.len() == 1) {
        return Ok(None);
    }
    let (shell, form) = match opts.launcher {
        // Named hosts, all started here: the daemons' path on one machine.
        Launcher::Local => (Vec::new(), CommandForm::Quoted),
        Launcher::Ssh | Launcher::Rsh => (
            opts.launcher
                .remote_shell(|name| std::env::var(name).ok())
                .unwrap_or_default(),
            CommandForm::Quoted,
        ),
        // A job step per host of the allocation, the daemon its one task.
        Launcher::Slurm => (crate::remote::srun_shell(), CommandForm::Words),
    };
    let ferry = std::env::current_exe().map_err(|e| {
        LaunchError::Remote(format!(
            "cannot find the ferry executable for the node daemons: {e}"
        ))
    })?;
    Ok(Some(RemoteLaunch {
        nodes: hosts
            .iter()
            .map(|h| NodePlan::on(&h.host, h.ranks.clone()))
            .collect(),
        shell,
        form,
        ferry,
        grid: false,
    }))
}

/// One rank's process and what the monitor knows about it.
struct Rank {
    /// Our child, or `None` for a rank a node daemon runs (its status comes from there).
    child: Option<Child>,
    pid: u32,
    status: Option<ExitStatus>,
    exited_at: Option<Instant>,
    /// From the bootstrap events (in the order its connection thread sent them).
    connected: bool,
    finalized: bool,
    closed_at: Option<Instant>,
    judged: bool,
}

impl Rank {
    /// A rank just started (`child` is ours; `None`: a node daemon's, pid still unknown).
    fn new(child: Option<Child>, pid: u32) -> Rank {
        Rank {
            child,
            pid,
            status: None,
            exited_at: None,
            connected: false,
            finalized: false,
            closed_at: None,
            judged: false,
        }
    }
}

/// What the monitor decided about one rank.
enum Verdict {
    Fine,
    Failed(RankFailure),
    /// Not yet decidable (waiting for its connection to close or for its exit status).
    Pending,
}

/// What a rank's request to spawn processes needs (see [`Job::spawn_world`]).
struct Spawner {
    addr: SocketAddr,
    key: JobKey,
    extra_env: Vec<(String, String)>,
    tag_output: bool,
}

struct Job {
    id: u64,
    spawner: Option<Spawner>,
    /// (base, size) of each spawned world, in order (world 1, 2, …).
    worlds: Vec<(u32, u32)>,
    host: String,
    /// Per rank, in a grid job.
    hosts: Vec<String>,
    ranks: Vec<Rank>,
    /// Ranks in the order their exits were seen.
    exit_order: Vec<u32>,
    /// Forwards the ranks' output (started with the first rank).
    output: Option<output::Forwarder>,
    /// Tells the watchdog each rank's process group (see `crate::watchdog`).
    watchdog: Option<std::fs::File>,
    /// Set on SIGCHLD (see `Job::reap`); `None`: look at every rank every time.
    child_exited: Option<Arc<AtomicBool>>,
    cleaned: bool,
    /// The core of rank i is cores[i mod len]; empty: ranks are not bound.
    cores: Vec<usize>,
    /// The node daemons of a multi-host job.
    nodes: Option<Nodes>,
    /// What a node daemon reported that ends the job.
    host_failure: Option<Outcome>,
    /// A rank's abort that came through its node daemon.
    abort: Option<Outcome>,
    /// The key space the node daemons share (multi-host jobs).
    node_kv: NodeKv,
    /// When the job started (for the connect timeout of node daemons).
    started: Instant,
    /// The relays of a grid job on real front nodes: dropped after the node daemons.
    ssh_relays: Option<crate::grid_ssh::SshRelays>,
}

impl Job {
    fn new(id: u64) -> Job {
        Job {
            id,
            spawner: None,
            worlds: Vec::new(),
            host: sys::hostname(),
            hosts: Vec::new(),
            ranks: Vec::new(),
            exit_order: Vec::new(),
            output: None,
            watchdog: None,
            child_exited: None,
            cleaned: false,
            cores: Vec::new(),
            nodes: None,
            host_failure: None,
            abort: None,
            node_kv: NodeKv::new(0),
            ssh_relays: None,
            started: Instant::now(),
        }
    }

    /// Starts a node daemon per host of `remote` with the job's description; the ranks are
    /// the daemons' (their pids arrive with STARTED).
    fn start_nodes(
        &mut self,
        opts: &LaunchOptions,
        remote: &RemoteLaunch,
        port: u16,
        key: &JobKey,
    ) -> Result<(), LaunchError> {
        let mut host_of = vec![None; opts.np as usize];
        for node in &remote.nodes {
            for &rank in &node.ranks {
                match host_of.get_mut(rank as usize) {
                    Some(slot @ None) => *slot = Some(node.host.clone()),
                    _ => {
                        return Err(LaunchError::Remote(format!(
                            "rank {rank} is placed twice or is not below {}",
                            opts.np
                        )))
                    }
                }
            }
        }
        if let Some(rank) = host_of.iter().position(Option::is_none) {
            return Err(LaunchError::Remote(format!("rank {rank} has no host")));
        }
        let launcher = crate::remote::launcher_addresses(remote, port)?;
        let spec = JobSpec {
            job: self.id,
            key: key.clone(),
            launcher: String::new(),
            size: opts.np,
            ranks: Vec::new(),
            program: opts.program.as_bytes().to_vec(),
            args: opts.args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: propagated_env()
                .chain(
                    opts.extra_env
                        .iter()
                        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())),
                )
                // The daemons check their hosts' share against their cores.
                .chain(
                    opts.oversubscribe
                        .then(|| (crate::OVERSUBSCRIBE_ENV.as_bytes().to_vec(), b"1".to_vec())),
                )
                .collect(),
            cwd: std::env::current_dir()
                .map(|d| d.into_os_string().into_vec())
                .unwrap_or_default(),
            tag_output: opts.tag_output,
        };
        self.hosts = host_of.into_iter().flatten().collect();
        self.ranks.extend((0..opts.np).map(|_| Rank::new(None, 0)));
        let mut nodes = Nodes::start(remote, &spec, &launcher)?;
        if !sys::stdin_is_terminal() {
            if let Some(index) = nodes.links.iter().position(|l| l.ranks.contains(&0)) {
                forward_stdin(&mut nodes, index);
            }
        }
        self.node_kv = NodeKv::new(nodes.links.len());
        self.nodes = Some(nodes);
        Ok(())
    }

    /// Takes what the node daemons reported: output, pids, exits, failures.
    fn take_node_events(&mut self) {
        while let Some((index, event)) = self.nodes.as_ref().and_then(Nodes::try_event) {
            self.node_event(index, event);
        }
    }

    /// Waits up to `timeout` for the node daemons to say something, then takes all they said.
    fn wait_for_nodes(&mut self, timeout: Duration) {
        if let Some((index, event)) = self.nodes.as_ref().and_then(|n| n.wait_event(timeout)) {
            self.node_event(index, event);
            self.take_node_events();
        }
    }

    /// Takes one report of node daemon `index`.
    fn node_event(&mut self, index: usize, event: NodeEvent) {
        let Some(nodes) = self.nodes.as_mut() else {
            return;
        };
        if let Some(link) = nodes.links.get_mut(index) {
            link.heard = true;
        }
        {
            match event {
                NodeEvent::Message(
                    message @ (NodeMessage::KvPut { .. }
                    | NodeMessage::KvGet { .. }
                    | NodeMessage::Fence),
                ) => {
                    for (node, answer) in self.node_kv.handle(index, message) {
                        nodes.send(node, &answer);
                    }
                }
                NodeEvent::Message(NodeMessage::Session { rank, state }) => {
                    let Some(r) = self.ranks.get_mut(rank as usize) else {
                        return;
                    };
                    match state {
                        Session::Connected => r.connected = true,
                        Session::Finalized => r.finalized = true,
                        Session::Closed { finalized } => {
                            r.finalized |= finalized;
                            r.closed_at.get_or_insert_with(Instant::now);
                        }
                    }
                }
                NodeEvent::Message(NodeMessage::Abort {
                    rank,
                    code,
                    message,
                }) => {
                    self.abort.get_or_insert(Outcome::Aborted {
                        rank,
                        code,
                        message,
                    });
                }
                NodeEvent::Message(NodeMessage::Output { stream, bytes, .. }) => {
                    let sink = match stream {
                        Stream::Stdout => Sink::Stdout,
                        Stream::Stderr => Sink::Stderr,
                    };
                    let _ = sink.write_locked(&bytes);
                }
                NodeEvent::Message(NodeMessage::Started { rank, pid }) => {
                    if let Some(r) = self.ranks.get_mut(rank as usize) {
                        r.pid = pid;
                    }
                }
                NodeEvent::Message(NodeMessage::Exited { rank, exit }) => {
                    if let Some(r) = self.ranks.get_mut(rank as usize) {
                        if r.status.is_none() {
                            r.status = Some(match exit {
                                RankExit::Code(c) => ExitStatus::from_raw((c & 0xff) << 8),
                                RankExit::Signal(s) => ExitStatus::from_raw(s & 0x7f),
                            });
                            r.exited_at = Some(Instant::now());
                            self.exit_order.push(rank);
                        }
                    }
                }
                NodeEvent::Message(NodeMessage::Failed { message, rank }) => {
                    // A child daemon's failure comes through its parent: the rank names the host.
                    let host = rank
                        .and_then(|r| self.hosts.get(r as usize))
                        .unwrap_or(&nodes.links[index].host)
                        .clone();
                    self.host_failure.get_or_insert(Outcome::HostFailed {
                        host,
                        detail: message,
                    });
                }
                NodeEvent::Message(other) => {
                    let host = nodes.links[index].host.clone();
                    self.host_failure.get_or_insert(Outcome::HostFailed {
                        host,
                        detail: format!("its node daemon sent {other:?}"),
                    });
                }
                NodeEvent::Closed(why) => {
                    nodes.links[index].closed = true;
                    let lost: Vec<u32> = nodes.links[index]
                        .ranks
                        .iter()
                        .copied()
                        .filter(|&r| self.ranks[r as usize].status.is_none())
                        .collect();
                    if lost.is_empty() {
                        return;
                    }
                    let status = nodes.exit_status(index, Duration::from_millis(200));
                    let link = &nodes.links[index];
                    let detail = match status {
                        Some(status) => format!(
                            "its node daemon ended ({status}; {why}) while ranks {lost:?} ran there"
                        ),
                        None => {
                            format!("lost its node daemon ({why}) while ranks {lost:?} ran there")
                        }
                    };
                    self.host_failure.get_or_insert(Outcome::HostFailed {
                        host: link.host.clone(),
                        detail,
                    });
                    // Nothing more will be heard of them.
                    for r in lost {
                        let rank = &mut self.ranks[r as usize];
                        rank.status = Some(ExitStatus::from_raw(libc::SIGKILL));
                        rank.exited_at = Some(Instant::now());
                        rank.judged = true;
                    }
                }
            }
        }
    }

    /// Starts the ranks one after the other. Between them it reaps the ranks that have ended
    /// and looks at the launcher's signals and the timeout, so that neither waits until the
    /// last rank has started: `Some` is what stopped it (the caller ends the job with it).
    fn start_ranks(
        &mut self,
        opts: &LaunchOptions,
        server: &BootstrapServer,
        key: &JobKey,
        grid: Option<&GridJob>,
        signals: &Signals,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<Option<Outcome>, LaunchError> {
        for rank in 0..opts.np {
            if let Some(signal) = signals.take() {
                return Ok(Some(Outcome::Interrupted { signal }));
            }
            if let Some((at, after)) = deadline {
                if Instant::now() >= at {
                    return Ok(Some(Outcome::TimedOut { after }));
                }
            }
            if rank % REAP_EVERY == 0 {
                self.reap();
            }
            self.spawn(opts, rank, server.addr(), key, grid)?;
        }
        Ok(None)
    }

    fn spawn(
        &mut self,
        opts: &LaunchOptions,
        rank: u32,
        addr: SocketAddr,
        key: &JobKey,
        grid: Option<&GridJob>,
    ) -> Result<(), LaunchError> {
        // Rank 0 reads our standard input, unless that is a terminal: the ranks run in process
        // groups of their own, and reading the terminal from a background group stops the reader.
        let stdin = if rank == 0 && !sys::stdin_is_terminal() {
            Stdio::inherit()
        } else {
            Stdio::null()
        };
        let mut command = match grid {
            Some(g) => g.command(rank, &opts.program),
            None => Command::new(&opts.program),
        };
        command
            .args(&opts.args)
            .envs(opts.extra_env.iter().map(|(k, v)| (k, v)));
        bootstrap_env(&mut command, addr, rank, opts.np, self.id, key);
        command
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that signals reach whatever the rank starts.
            .process_group(0);
        sys::end_with_launcher(&mut command, libc::SIGKILL);
        if let Some(cpu) = self.cores.get(rank as usize % self.cores.len().max(1)) {
            sys::bind_to_cpu(&mut command, *cpu);
        }
        let child = command.spawn().map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => LaunchError::ProgramNotFound(opts.program.clone()),
            io::ErrorKind::PermissionDenied => LaunchError::NotExecutable(opts.program.clone()),
            _ => LaunchError::Spawn {
                rank,
                program: opts.program.clone(),
                source,
            },
        })?;
        if let Some(g) = grid {
            self.hosts.push(g.host(rank).to_string());
        }
        self.watch(child, rank, opts.tag_output, &opts.program)
    }

    /// Keeps `child`, the process of universe rank `rank`, and forwards its output.
    fn watch(
        &mut self,
        mut child: Child,
        rank: u32,
        tag_output: bool,
        program: &std::ffi::OsStr,
    ) -> Result<(), LaunchError> {
        let pid = child.id();
        let prefix = tag_output.then(|| format!("[{rank}] "));
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        self.ranks.push(Rank::new(Some(child), pid));
        if let Some(watchdog) = self.watchdog.as_mut() {
            if io::Write::write_all(watchdog, format!("{pid}\n").as_bytes()).is_err() {
                // It is gone: the job runs on without it.
                self.watchdog = None;
            }
        }
        let spawn_error = |source| LaunchError::Spawn {
            rank,
            program: program.to_owned(),
            source,
        };
        if self.output.is_none() {
            self.output = Some(output::Forwarder::start().map_err(spawn_error)?);
        }
        let Some(forwarder) = self.output.as_ref() else {
            return Ok(());
        };
        if let Some(pipe) = stdout {
            forwarder
                .add(pipe, Sink::Stdout, prefix.clone())
                .map_err(spawn_error)?;
        }
        if let Some(pipe) = stderr {
            forwarder
                .add(pipe, Sink::Stderr, prefix)
                .map_err(spawn_error)?;
        }
        Ok(())
    }

    /// Watches the job until it ends; afterwards every rank has been reaped or given up on.
    fn monitor(
        &mut self,
        server: &BootstrapServer,
        signals: &Signals,
        deadline: Option<(Instant, Duration)>,
        mut grid: Option<&mut GridJob>,
    ) -> Outcome {
        loop {
            if let Some(g) = grid.as_mut() {
                g.check_relays();
            }
            if let Some(relays) = self.ssh_relays.as_mut() {
                relays.check();
            }
            let now = Instant::now();
            let wait = match deadline {
                Some((at, _)) => TICK.min(at.saturating_duration_since(now)),
                None => TICK,
            };
            let mut next = match self.nodes.is_some() {
                // The ranks talk to their node daemons, which report here.
                true => {
                    self.wait_for_nodes(wait);
                    server.next_event(Duration::ZERO)
                }
                false => server.next_event(wait),
            };
            while let Some(event) = next {
                if let Some(outcome) = self.handle_event(event, server) {
                    let outcome = self.killed_rank_first(outcome);
                    let outcome = self.host_failure_first(outcome);
                    return self.end(outcome);
                }
                next = server.next_event(Duration::ZERO);
            }
            self.reap();
            self.check_silent_hosts();
            if let Some(outcome) = self.host_failure.take() {
                return self.end(outcome);
            }
            if let Some(outcome) = self.abort.take() {
                let outcome = self.killed_rank_first(outcome);
                let outcome = self.host_failure_first(outcome);
                return self.end(outcome);
            }
            if let Some(outcome) = self.judge() {
                let outcome = self.killed_rank_first(outcome);
                let outcome = self.host_failure_first(outcome);
                return self.end(outcome);
            }
            if let Some(signal) = signals.take() {
                return self.end(Outcome::Interrupted { signal });
            }
            if let Some((at, after)) = deadline {
                if Instant::now() >= at {
                    return self.end(Outcome::TimedOut { after });
                }
            }
            if self.ranks.iter().all(|r| r.judged) {
                return Outcome::Success;
            }
        }
    }

    /// Names a host whose daemon has said nothing within the connect timeout (a host that does
    /// not answer, an ssh that waits for it).
    fn check_silent_hosts(&mut self) {
        let Some(nodes) = self.nodes.as_ref() else {
            return;
        };
        let limit = crate::remote::connect_timeout();
        if self.host_failure.is_some() || self.started.elapsed() < limit {
            return;
        }
        if let Some(link) = nodes.links.iter().find(|l| !l.heard && !l.closed) {
            self.host_failure = Some(Outcome::HostFailed {
                host: link.host.clone(),
                detail: format!(
                    "its node daemon did not answer within {} s (FERRY_CONNECT_TIMEOUT)",
                    limit.as_secs()
                ),
            });
        }
    }

    /// A lost host is the cause of what its ranks' peers report (a lost connection, an abort):
    /// before blaming a rank, give the node daemons' links a moment to tell of a host that
    /// failed, which then names the job's end instead.
    fn host_failure_first(&mut self, outcome: Outcome) -> Outcome {
        if self.nodes.is_none() {
            return outcome;
        }
        let until = Instant::now() + HOST_FAILURE_GRACE;
        loop {
            self.take_node_events();
            if let Some(failure) = self.host_failure.take() {
                return failure;
            }
            if Instant::now() >= until {
                return outcome;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Starts the processes of a spawned world: universe ranks `base..`, world ranks from 0,
    /// the commands in order. A process that cannot be started is `Err` (the ranks before it
    /// run; the job then ends).
    fn spawn_world(
        &mut self,
        base: u32,
        world: u32,
        parent: &str,
        apps: &[ferry_wire::pmi::App],
    ) -> Result<(), String> {
        let Some(sp) = self.spawner.as_ref() else {
            return Err("this launcher cannot spawn processes".into());
        };
        let (addr, key, extra_env, tag) =
            (sp.addr, sp.key.clone(), sp.extra_env.clone(), sp.tag_output);
        if self.ranks.len() != base as usize {
            return Err(format!(
                "internal: new world at universe rank {base}, but the job has {} processes",
                self.ranks.len()
            ));
        }
        let size: u32 = apps.iter().map(|a| a.procs).sum();
        self.worlds.push((base, size));
        let mut rank = 0u32;
        for (appnum, app) in apps.iter().enumerate() {
            for _ in 0..app.procs {
                let mut command = Command::new(&app.command);
                if !app.wdir.is_empty() {
                    command.current_dir(&app.wdir);
                }
                command
                    .args(&app.args)
                    .envs(extra_env.iter().map(|(k, v)| (k, v)));
                bootstrap_env(&mut command, addr, rank, size, self.id, &key);
                command
                    .env(env::UNIVERSE_BASE, base.to_string())
                    .env(env::WORLD_INDEX, world.to_string())
                    .env(env::PARENT, parent)
                    .env(env::APPNUM, appnum.to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0);
                sys::end_with_launcher(&mut command, libc::SIGKILL);
                let child = command
                    .spawn()
                    .map_err(|e| format!("cannot start {:?}: {e}", app.command))?;
                self.watch(child, base + rank, tag, std::ffi::OsStr::new(&app.command))
                    .map_err(|e| e.to_string())?;
                rank += 1;
            }
        }
        Ok(())
    }

    fn handle_event(&mut self, event: BootstrapEvent, server: &BootstrapServer) -> Option<Outcome> {
        match event {
            BootstrapEvent::Spawn {
                rank,
                base,
                world,
                parent,
                apps,
            } => {
                if self.spawner.is_none() {
                    // Nothing started: the root's MPI_Comm_spawn fails, the job goes on.
                    let why = "MPI_Comm_spawn is not supported in grid jobs".to_string();
                    server.answer_spawn(base, Err(why));
                    return None;
                }
                let started = self.spawn_world(base, world, &parent, &apps);
                server.answer_spawn(base, started.clone());
                if let Err(message) = started {
                    return Some(Outcome::Aborted {
                        rank,
                        code: 1,
                        message: format!("MPI_Comm_spawn: {message}"),
                    });
                }
            }
            BootstrapEvent::Connected { rank } => {
                if let Some(r) = self.ranks.get_mut(rank as usize) {
                    r.connected = true;
                }
            }
            BootstrapEvent::Finalized { rank } => {
                if let Some(r) = self.ranks.get_mut(rank as usize) {
                    r.finalized = true;
                }
            }
            BootstrapEvent::Closed { rank, .. } => {
                if let Some(r) = self.ranks.get_mut(rank as usize) {
                    r.closed_at.get_or_insert_with(Instant::now);
                }
            }
            BootstrapEvent::Abort {
                rank,
                code,
                message,
            } => {
                return Some(Outcome::Aborted {
                    rank,
                    code,
                    message,
                })
            }
        }
        None
    }

    /// Collects the exit status of every rank that has ended (and what the node daemons
    /// reported).
    fn reap(&mut self) {
        self.take_node_events();
        // Without a SIGCHLD since the last look no child has ended: a job of thousands of
        // running ranks costs no wait per rank per tick. (Cleared before the look, so that an
        // exit during it is looked for next time.)
        if let Some(exited) = self.child_exited.as_ref() {
            if !exited.swap(false, Ordering::SeqCst) {
                return;
            }
        }
        for (index, rank) in self.ranks.iter_mut().enumerate() {
            if rank.status.is_some() {
                continue;
            }
            let Some(child) = rank.child.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                rank.status = Some(status);
                rank.exited_at = Some(Instant::now());
                self.exit_order.push(index as u32);
            }
        }
    }

    /// The first failure among the ranks, in the order they ended.
    fn judge(&mut self) -> Option<Outcome> {
        let now = Instant::now();
        let mut exited = self.exit_order.clone();
        let running =
            (0..self.ranks.len() as u32).filter(|&r| self.ranks[r as usize].status.is_none());
        exited.extend(running);
        for index in exited {
            let rank = &mut self.ranks[index as usize];
            if rank.judged {
                continue;
            }
            match verdict(rank, now) {
                Verdict::Fine => rank.judged = true,
                Verdict::Failed(failure) => {
                    rank.judged = true;
                    return Some(self.rank_failed(index, failure));
                }
                // A rank that ended earlier must be decided before a later one can be blamed.
                Verdict::Pending if rank.status.is_some() => return None,
                Verdict::Pending => {}
            }
        }
        None
    }

    /// How universe rank `index` failed, with its world, host and pid.
    fn rank_failed(&self, index: u32, failure: RankFailure) -> Outcome {
        let spawned = self
            .worlds
            .iter()
            .enumerate()
            .find(|(_, &(base, size))| (base..base + size).contains(&index))
            .map(|(w, &(base, _))| (w as u32 + 1, index - base));
        Outcome::RankFailed {
            rank: index,
            spawned,
            host: self.hosts.get(index as usize).unwrap_or(&self.host).clone(),
            pid: self.ranks.get(index as usize).map_or(0, |r| r.pid),
            failure,
        }
    }

    /// A rank killed by a signal is the cause of what its peers then report (a lost
    /// connection, an abort, an error exit), and they can report it before its exit status
    /// is there to collect: the kernel closes a dying process's sockets before it becomes a
    /// zombie. So before blaming anything else, reap for a moment and name such a rank instead.
    fn killed_rank_first(&mut self, outcome: Outcome) -> Outcome {
        if self.ranks.len() < 2
            || matches!(
                outcome,
                Outcome::RankFailed {
                    failure: RankFailure::Signaled(_),
                    ..
                }
            )
        {
            return outcome;
        }
        let until = Instant::now() + KILLED_RANK_GRACE;
        loop {
            self.reap();
            let killed = self.exit_order.iter().find_map(|&index| {
                let rank = &self.ranks[index as usize];
                let signal = rank.status.and_then(|s| s.signal())?;
                (!rank.judged).then_some((index, signal))
            });
            if let Some((index, signal)) = killed {
                self.ranks[index as usize].judged = true;
                return self.rank_failed(index, RankFailure::Signaled(signal));
            }
            if Instant::now() >= until {
                return outcome;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Reports `outcome`, stops every rank and returns `outcome`.
    fn end(&mut self, outcome: Outcome) -> Outcome {
        eprintln!("ferry run: {outcome}");
        match outcome {
            Outcome::Interrupted { signal } => self.teardown(signal, SIGNAL_GRACE),
            _ => self.teardown(libc::SIGTERM, TERM_GRACE),
        }
        outcome
    }

    fn any_running(&self) -> bool {
        self.ranks.iter().any(|r| r.status.is_none())
    }

    /// Sends `signal` to every rank and what it started (a node daemon's ranks through it;
    /// SIGKILL becomes STOP there, which ends them and then the daemon).
    fn signal_all(&mut self, signal: libc::c_int) {
        if let Some(nodes) = self.nodes.as_mut() {
            nodes.send_all(&match signal {
                libc::SIGKILL => NodeMessage::Stop,
                signal => NodeMessage::Signal(signal),
            });
        }
        for rank in self.ranks.iter().filter(|r| r.child.is_some()) {
            if rank.status.is_none() {
                // Not reaped yet, so the pid is still this rank's.
                sys::kill_process(rank.pid, signal);
            }
            // The group outlives its leader while anything the rank started is still there.
            sys::kill_group(rank.pid, signal);
        }
    }

    /// `signal` to everything, SIGKILL after `grace`, then reap.
    fn teardown(&mut self, signal: libc::c_int, grace: Duration) {
        self.signal_all(signal);
        let until = Instant::now() + grace;
        while self.any_running() && Instant::now() < until {
            thread::sleep(TICK);
            self.reap();
        }
        self.kill_and_reap();
    }

    /// SIGKILL to every rank's process group, then waits (boundedly) until all are reaped.
    fn kill_and_reap(&mut self) {
        self.signal_all(libc::SIGKILL);
        let until = Instant::now() + REAP_LIMIT;
        self.reap();
        while self.any_running() && Instant::now() < until {
            thread::sleep(Duration::from_millis(5));
            self.reap();
        }
    }

    /// Lets the output drain, then removes the job's shared memory.
    fn finish(&mut self, success: bool) {
        let grace = if success {
            OUTPUT_GRACE
        } else {
            OUTPUT_GRACE_TORN_DOWN
        };
        let until = Instant::now() + grace;
        // Node daemons exit once their ranks are reported; their output comes before that.
        while self
            .nodes
            .as_ref()
            .is_some_and(|n| n.links.iter().any(|l| !l.closed))
            && Instant::now() < until
        {
            self.take_node_events();
            thread::sleep(Duration::from_millis(2));
        }
        if let Some(mut nodes) = self.nodes.take() {
            nodes.finish(Duration::from_millis(500));
        }
        while self.output.as_ref().is_some_and(|o| o.open() > 0) && Instant::now() < until {
            thread::sleep(Duration::from_millis(2));
        }
        // Whatever is still open is held by something a rank started: stop forwarding it.
        self.output = None;
        self.remove_shared_memory();
    }

    fn remove_shared_memory(&mut self) {
        if self.cleaned {
            return;
        }
        self.cleaned = true;
        remove_shared_memory(self.id);
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // Reached without `finish` only when starting the job failed part way.
        if self.any_running() {
            self.kill_and_reap();
        }
        self.remove_shared_memory();
    }
}

fn verdict(rank: &Rank, now: Instant) -> Verdict {
    let Some(status) = rank.status else {
        return match rank.closed_at {
            Some(at) if !rank.finalized && now.duration_since(at) >= CLOSE_GRACE => {
                Verdict::Failed(RankFailure::ConnectionLost)
            }
            _ => Verdict::Pending,
        };
    };
    let exited_at = rank.exited_at.unwrap_or(now);
    if rank.connected && rank.closed_at.is_none() && now.duration_since(exited_at) < CLOSE_GRACE {
        return Verdict::Pending;
    }
    if let Some(signal) = status.signal() {
        return Verdict::Failed(RankFailure::Signaled(signal));
    }
    match status.code() {
        Some(0) if rank.connected && !rank.finalized => Verdict::Failed(RankFailure::NoFinalize),
        Some(0) => Verdict::Fine,
        Some(code) => Verdict::Failed(RankFailure::Exited(code)),
        // Neither a code nor a signal: cannot happen for a process that ended.
        None => Verdict::Failed(RankFailure::Exited(1)),
    }
}

/// `/dev/shm/ferry-<job>`: the job's segments are this, a dash and a rank.
pub(crate) fn shm_prefix(job: u64) -> String {
    format!("/dev/shm/ferry-{job}")
}

/// Removes `/dev/shm/ferry-<job>-*`: the ranks create their segments there, the launcher removes
/// them.
pub(crate) fn remove_shared_memory(job: u64) {
    let prefix = format!("ferry-{job}-");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with(&prefix)) {
            continue;
        }
        if let Err(e) = std::fs::remove_file(entry.path()) {
            if e.kind() != io::ErrorKind::NotFound {
                eprintln!("ferry run: cannot remove {}: {e}", entry.path().display());
            }
        }
    }
}

/// Copies our standard input to rank 0's node daemon, on a thread of its own (detached: a
/// read of a terminal-less stdin may block past the job's end).
fn forward_stdin(nodes: &mut Nodes, index: usize) {
    let Some(writer) = nodes.stdin_writer(index) else {
        return;
    };
    let _ = thread::Builder::new()
        .name("ferry-stdin".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let mut input = io::stdin().lock();
            loop {
                let n = match io::Read::read(&mut input, &mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => 0,
                };
                let frame = NodeMessage::Stdin(buf[..n].to_vec());
                if !crate::remote::write_frame(&writer, &frame) || n == 0 {
                    return;
                }
            }
        });
}
