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
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

mod nodes;
mod start;

use nodes::remote_plan;
pub(crate) use start::bootstrap_env;

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
    // Each rank costs this process about three descriptors and a rank one per TCP peer: the
    // usual soft limit of 1 024 would end a job of a few hundred ranks. The ranks inherit it.
    crate::limits::raise_open_files(crate::limits::Role::Launcher);
    if opts.np == 0 {
        return Err(LaunchError::NoRanks);
    }
    if opts.program.is_empty() {
        return Err(LaunchError::NoProgram);
    }
    let settings = crate::settings::Settings::from_env()?;
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
    job.executable = crate::mpir::executable_path(
        &opts.program,
        &std::env::current_dir().unwrap_or_default(),
        std::env::var_os("PATH").as_deref(),
    );
    job.settings = settings;
    job.watchdog = watchdog
        .as_ref()
        .and_then(crate::watchdog::Watchdog::groups);
    job.child_exited = signals.child_exited.clone();
    job.fault_tolerant = opts.fault_tolerant;
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
    // Every rank here has its pid now (the node daemons' ranks: as they report them).
    if stopped.is_none() {
        job.publish_proctable();
    }
    let outcome = match stopped {
        Some(outcome) => job.end(outcome),
        None => job.monitor(&server, &signals, deadline, grid.as_mut()),
    };
    server.shutdown();
    job.finish(matches!(outcome, Outcome::Success));
    Ok(outcome)
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
    /// How many cores the launcher may use, which its ranks inherit (see
    /// `sys::rank_group`).
    usable_cores: usize,
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
    /// The launcher's `FERRY_…` numbers, read when the job started.
    settings: crate::settings::Settings,
    /// The relays of a grid job on real front nodes: dropped after the node daemons.
    ssh_relays: Option<crate::grid_ssh::SshRelays>,
    /// The program the ranks run, for debuggers (`crate::mpir`).
    executable: std::path::PathBuf,
    /// Whether the debuggers' table of ranks is filled.
    proctable_published: bool,
    /// A rank that fails is reported and the job goes on (`LaunchOptions::fault_tolerant`).
    fault_tolerant: bool,
    /// The ranks that failed in a fault-tolerant job, with how.
    lost: Vec<Outcome>,
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
            usable_cores: crate::usable_cores(),
            nodes: None,
            host_failure: None,
            abort: None,
            node_kv: NodeKv::new(0),
            ssh_relays: None,
            started: Instant::now(),
            settings: crate::settings::Settings::default(),
            executable: std::path::PathBuf::new(),
            proctable_published: false,
            fault_tolerant: false,
            lost: Vec::new(),
        }
    }

    /// Fills the debuggers' table of ranks (`crate::mpir`) once every rank's pid is known.
    fn publish_proctable(&mut self) {
        if self.proctable_published
            || self.ranks.is_empty()
            || self.ranks.iter().any(|r| r.pid == 0)
        {
            return;
        }
        let entries: Vec<crate::mpir::ProcEntry> = self
            .ranks
            .iter()
            .enumerate()
            .map(|(rank, r)| crate::mpir::ProcEntry {
                host: self.hosts.get(rank).unwrap_or(&self.host).clone(),
                pid: r.pid,
            })
            .collect();
        crate::mpir::publish(self.executable.as_os_str(), &entries);
        self.proctable_published = true;
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
                return self.survived();
            }
        }
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
                Verdict::Failed(failure) if self.fault_tolerant => {
                    rank.judged = true;
                    let lost = self.rank_failed(index, failure);
                    eprintln!("ferry run: {lost}; the job goes on without it (--fault-tolerant)");
                    self.lost.push(lost);
                }
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

    /// How a job whose every rank is judged ended: a fault-tolerant job succeeds when some
    /// rank finished well, whatever the others' failures.
    fn survived(&mut self) -> Outcome {
        match self.lost.len() {
            0 => Outcome::Success,
            n if n == self.ranks.len() => self.lost.swap_remove(0),
            n => {
                let of = self.ranks.len();
                eprintln!(
                    "ferry run: {n} of {of} ranks failed; the others finished (--fault-tolerant)"
                );
                Outcome::Success
            }
        }
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
        if matches!(outcome, Outcome::Aborted { .. }) {
            crate::mpir::aborting(&outcome.to_string());
        }
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
