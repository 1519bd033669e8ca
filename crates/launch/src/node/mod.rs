//! The node daemon, `ferry node`: one per host of a multi-host job.
//!
//! The launcher starts it (over ssh, another remote shell, or as a child on its own host) and
//! speaks [`ferry_wire::node`] on its standard input and output. The daemon reads the job
//! ([`JobSpec`]: program, environment, the job key, this host's ranks), forks the ranks — each
//! in a process group of its own, and a session while they have a core each
//! (`sys::rank_group`), ending with the daemon (`PR_SET_PDEATHSIG`) — and reports back: each
//! rank's pid, its output (whole lines, tagged if asked), and how it ended. It
//! passes on the launcher's signals and rank 0's standard input, and serves its ranks'
//! bootstrap exchange for them ([`boot`]): one connection and one message per fence per host.
//!
//! It ends its ranks (SIGTERM, SIGKILL after a grace) when the launcher says STOP or when its
//! standard input closes: that is how the launcher's death, a lost ssh connection or a kill of
//! ssh reaches it. It exits once every rank has ended and been reported.
//!
//! Each rank also gets `FERRY_TCP_ADDR`: this host's address on the route to the launcher,
//! which the ranks of other hosts reach it by as the launcher did.

pub(crate) mod affinity;
mod boot;
mod children;

use crate::sys;
use ferry_wire::node::{JobSpec, NodeMessage, RankExit, Stream};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How often the daemon looks for ended ranks.
const TICK: Duration = Duration::from_millis(10);
/// Between SIGTERM and SIGKILL when the ranks are stopped.
const TERM_GRACE: Duration = Duration::from_secs(1);
/// How long a rank's output may still come after it exited (something it started may hold the
/// pipe open): then its exit is reported anyway.
const OUTPUT_GRACE: Duration = Duration::from_millis(500);
/// How long the daemon waits for the job description.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// What the threads of the daemon tell its main loop.
enum Event {
    /// A message from the launcher.
    FromLauncher(NodeMessage),
    /// The launcher's side ended (end of stream, an error, or a frame that makes no sense).
    LauncherGone(String),
    /// One output pipe of a rank reached its end.
    PipeClosed(usize),
    /// Every rank of this host has entered the fence (see [`boot`]).
    OwnFence,
    /// An event of a child daemon (a tree of daemons, see [`children`]).
    Child(usize, crate::remote::NodeEvent),
}

struct Rank {
    rank: u32,
    child: Child,
    pid: u32,
    /// Output pipes still open.
    pipes: u32,
    exited: Option<(RankExit, Instant)>,
    reported: bool,
}

/// Runs the daemon on this process's standard input and output; returns its exit code.
pub fn serve() -> i32 {
    // A login over ssh brings the usual soft limit of 1 024; each rank costs the daemon about
    // three descriptors and a rank one per TCP peer. The ranks inherit the raised limit.
    crate::limits::raise_open_files(crate::limits::Role::NodeDaemon);
    let host = sys::hostname();
    let fail = |message: String| {
        eprintln!("ferry node ({host}): {message}");
        1
    };
    // The launcher's frames, read on a thread of their own.
    let (events_tx, events) = mpsc::channel();
    let reader_tx = events_tx.clone();
    let stop_requested = Arc::new(AtomicBool::new(false));
    let reader_stop = Arc::clone(&stop_requested);
    let spawned = thread::Builder::new()
        .name("ferry-node-in".into())
        .spawn(move || read_launcher(io::stdin().lock(), &reader_tx, &reader_stop));
    if let Err(e) = spawned {
        return fail(format!("cannot start a thread: {e}"));
    }
    // Every frame to the launcher goes through one writer thread.
    let (out_tx, out_rx) = mpsc::channel::<NodeMessage>();
    let writer_events = events_tx.clone();
    let writer = thread::Builder::new()
        .name("ferry-node-out".into())
        .spawn(move || write_launcher(io::stdout().lock(), out_rx, &writer_events));
    let writer = match writer {
        Ok(w) => w,
        Err(e) => return fail(format!("cannot start a thread: {e}")),
    };
    let spec = match events.recv_timeout(START_TIMEOUT) {
        Ok(Event::FromLauncher(NodeMessage::Start(spec))) => spec,
        Ok(Event::FromLauncher(other)) => {
            return fail(format!("expected the job description, got {other:?}"))
        }
        Ok(Event::LauncherGone(why)) => return fail(format!("launcher went away: {why}")),
        Ok(Event::PipeClosed(_) | Event::OwnFence | Event::Child(..)) | Err(_) => {
            return fail(format!(
                "no job description within {} s",
                START_TIMEOUT.as_secs()
            ))
        }
    };
    let code = run_ranks(&spec, &host, &events, &events_tx, &out_tx, &stop_requested);
    drop(out_tx);
    let _ = writer.join();
    code
}

/// Passes the launcher's frames on as events; `stop` also says at once that it said STOP or
/// went away (the main thread looks at it while it starts the ranks).
fn read_launcher(input: impl Read, events: &Sender<Event>, stop: &AtomicBool) {
    crate::remote::read_frames(input, |event| {
        if matches!(
            event,
            crate::remote::NodeEvent::Message(NodeMessage::Stop)
                | crate::remote::NodeEvent::Closed(_)
        ) {
            stop.store(true, Ordering::SeqCst);
        }
        let event = match event {
            crate::remote::NodeEvent::Message(message) => Event::FromLauncher(message),
            crate::remote::NodeEvent::Closed(why) => Event::LauncherGone(why),
        };
        events.send(event).is_ok()
    });
}

fn write_launcher(mut output: impl Write, messages: Receiver<NodeMessage>, events: &Sender<Event>) {
    let mut bytes = Vec::new();
    for message in messages {
        bytes.clear();
        message.encode(&mut bytes);
        if output
            .write_all(&bytes)
            .and_then(|()| output.flush())
            .is_err()
        {
            let _ = events.send(Event::LauncherGone("cannot write to it".into()));
            // Keep draining, so that senders never block; nothing more reaches the launcher.
        }
    }
}

/// Sends one FENCE up once this host's ranks and every child are in the fence.
fn fence_up(
    own_fenced: &mut bool,
    children: Option<&mut children::Children>,
    out: &Sender<NodeMessage>,
) {
    if !*own_fenced || !children.as_ref().is_none_or(|c| c.all_fenced()) {
        return;
    }
    *own_fenced = false;
    if let Some(c) = children {
        c.clear_fence();
    }
    let _ = out.send(NodeMessage::Fence);
}

/// This host's address on the route to `launcher` (`ip:port`): no packet is sent, the
/// kernel only picks the source address of a connected UDP socket.
fn address_towards(launcher: &str) -> Option<IpAddr> {
    let target: SocketAddr = launcher.parse().ok()?;
    if target.ip().is_unspecified() {
        return None;
    }
    if target.ip().is_loopback() {
        return Some(target.ip());
    }
    crate::remote::address_towards(target.ip()).ok()
}

/// Takes the exit status of every rank that has ended.
fn reap(ranks: &mut [Rank]) {
    let now = Instant::now();
    for r in ranks.iter_mut().filter(|r| r.exited.is_none()) {
        if let Ok(Some(status)) = r.child.try_wait() {
            let exit = match status.signal() {
                Some(signal) => RankExit::Signal(signal),
                None => RankExit::Code(status.code().unwrap_or(1)),
            };
            r.exited = Some((exit, now));
        }
    }
}

/// Runs this host's share of the job: starts its ranks, then serves the launcher, the ranks
/// and any child daemons until every rank has ended and been reported. Returns the daemon's
/// exit code.
fn run_ranks(
    spec: &JobSpec,
    host: &str,
    events: &Receiver<Event>,
    events_tx: &Sender<Event>,
    out: &Sender<NodeMessage>,
    stop_requested: &AtomicBool,
) -> i32 {
    if let Err(e) = check_host_share(spec, host) {
        let _ = out.send(NodeMessage::Failed {
            rank: spec.ranks.first().copied(),
            message: e.to_string(),
        });
        return 1;
    }
    let affinity = match plan_affinity(spec, host) {
        Ok(affinity) => affinity,
        Err(e) => {
            let _ = out.send(NodeMessage::Failed {
                rank: spec.ranks.first().copied(),
                message: format!("on {host}: {e}"),
            });
            return 1;
        }
    };
    let Some(local_boot) = start_local_boot(spec, host, events_tx, out) else {
        return 1;
    };
    let mut job = HostJob {
        spec,
        host,
        out,
        events_tx,
        stdin: None,
        output: start_output(host),
        ranks: Vec::new(),
        local_boot,
        affinity,
        children: None,
        own_fenced: false,
        stopping: None,
        killed: false,
    };
    job.start_ranks(stop_requested);
    job.serve(events)
}

/// This host's share of the job against its cores: the launcher cannot count them. The
/// launcher's --oversubscribe comes as FERRY_OVERSUBSCRIBE in the job's environment.
fn check_host_share(spec: &JobSpec, host: &str) -> Result<(), crate::LaunchError> {
    let oversubscribe = crate::oversubscribe_allowed(false, |name| job_env(spec, name))?;
    crate::check_rank_limit(
        spec.ranks.len() as u64,
        host,
        crate::usable_cores(),
        oversubscribe,
    )
}

/// The binding of this host's ranks, by the policy the launcher put in the job's environment
/// (none without one), planned with this host's own topology.
fn plan_affinity(
    spec: &JobSpec,
    host: &str,
) -> Result<affinity::HostAffinity, crate::hosts::binding::BindingError> {
    let lookup = |name: &str| job_env(spec, name);
    let unbound = crate::hosts::binding::Policy {
        bind_to: Some(crate::hosts::binding::BindTo::None),
        ..Default::default()
    };
    let policy = affinity::policy_from(lookup, unbound)?;
    affinity::HostAffinity::plan(host, &spec.ranks, &policy)
}

/// The value of `name` in the job's environment (the last one given).
fn job_env(spec: &JobSpec, name: &str) -> Option<String> {
    spec.env
        .iter()
        .rev()
        .find(|(k, _)| k == name.as_bytes())
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

/// Starts the server of this host's bootstrap exchange; `None` (the launcher told) if it
/// cannot. Its messages go up as they are, straight into the launcher's queue (a rank's
/// finalize is there before its exit can be), but for the fence: with children it goes up once
/// they have all entered it too, so this host's own fence is an event of the main loop.
fn start_local_boot(
    spec: &JobSpec,
    host: &str,
    events_tx: &Sender<Event>,
    out: &Sender<NodeMessage>,
) -> Option<boot::LocalBoot> {
    let fence_events = events_tx.clone();
    let own_fence = Box::new(move || {
        let _ = fence_events.send(Event::OwnFence);
    });
    match boot::LocalBoot::start(spec.key.clone(), &spec.ranks, out.clone(), own_fence) {
        Ok(b) => Some(b),
        Err(e) => {
            let _ = out.send(NodeMessage::Failed {
                rank: None,
                message: format!("cannot start the bootstrap server on {host}: {e}"),
            });
            None
        }
    }
}

/// One thread forwards every rank's output; without it the ranks run with their pipes closed.
fn start_output(host: &str) -> Option<crate::output::Forwarder> {
    match crate::output::Forwarder::start() {
        Ok(forwarder) => Some(forwarder),
        Err(e) => {
            eprintln!(
                "ferry node ({host}): cannot forward the ranks' output: {}",
                crate::limits::explain(&e)
            );
            None
        }
    }
}

/// Why rank `rank` could not start, in words a user acts on.
fn spawn_failure(e: &io::Error, program: &OsString) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "program not found".to_string(),
        io::ErrorKind::PermissionDenied if sys::names_a_directory(program) => {
            "is a directory, not a program".to_string()
        }
        io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => crate::limits::explain(e),
    }
}

/// This host's share of the job while the daemon serves it. Fields drop in order: rank 0's
/// stdin closes and the output forwarder stops before the rest goes.
struct HostJob<'a> {
    spec: &'a JobSpec,
    host: &'a str,
    out: &'a Sender<NodeMessage>,
    events_tx: &'a Sender<Event>,
    /// Rank 0's standard input, while it runs here and reads it.
    stdin: Option<ChildStdin>,
    output: Option<crate::output::Forwarder>,
    ranks: Vec<Rank>,
    local_boot: boot::LocalBoot,
    /// Where this host's ranks are bound.
    affinity: affinity::HostAffinity,
    /// The daemons this one started (a tree of daemons).
    children: Option<children::Children>,
    /// This host's ranks are all in the fence, not yet passed up.
    own_fenced: bool,
    /// Since when the ranks are being stopped (SIGTERM sent, SIGKILL after a grace).
    stopping: Option<Instant>,
    killed: bool,
}

impl HostJob<'_> {
    /// Starts the ranks one after the other; stops at the first that cannot start (the launcher
    /// told) or when the launcher says STOP or goes away.
    fn start_ranks(&mut self, stop_requested: &AtomicBool) {
        let program = OsString::from_vec(self.spec.program.clone());
        let tcp_addr = address_towards(&self.spec.launcher);
        let own_core = self.spec.ranks.len() <= crate::usable_cores();
        for (started, &rank) in self.spec.ranks.iter().enumerate() {
            // The launcher's STOP (or its end) must not wait until every rank has started.
            if stop_requested.load(Ordering::SeqCst) {
                self.stopping = Some(Instant::now());
                return;
            }
            if started % 32 == 0 {
                reap(&mut self.ranks);
            }
            let mut command = self.rank_command(&program, rank, tcp_addr, own_core);
            let user_set = std::env::var_os(crate::HOST_CORES_ENV).is_some()
                || job_env(self.spec, crate::HOST_CORES_ENV).is_some();
            self.affinity.apply(&mut command, started, user_set);
            let mut child = match command.spawn() {
                Ok(child) => child,
                Err(e) => {
                    let _ = self.out.send(NodeMessage::Failed {
                        rank: Some(rank),
                        message: format!(
                            "cannot start rank {rank} ({}) on {}: {}",
                            program.to_string_lossy(),
                            self.host,
                            spawn_failure(&e, &program)
                        ),
                    });
                    self.stopping = Some(Instant::now());
                    return;
                }
            };
            let pid = child.id();
            let _ = self.out.send(NodeMessage::Started { rank, pid });
            if rank == 0 {
                self.stdin = child.stdin.take();
            }
            let pipes = self.forward_output(&mut child, rank);
            self.ranks.push(Rank {
                rank,
                child,
                pid,
                pipes,
                exited: None,
                reported: false,
            });
        }
    }

    /// The command that starts `rank`: the job's program, arguments and environment, its
    /// bootstrap variables, its process group (and session while the ranks have a core each),
    /// ending with the daemon.
    fn rank_command(
        &self,
        program: &OsString,
        rank: u32,
        tcp_addr: Option<IpAddr>,
        own_core: bool,
    ) -> Command {
        let spec = self.spec;
        let mut command = Command::new(program);
        command
            .args(spec.args.iter().map(|a| OsString::from_vec(a.clone())))
            .envs(
                spec.env
                    .iter()
                    .map(|(k, v)| (OsString::from_vec(k.clone()), OsString::from_vec(v.clone()))),
            )
            .stdin(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        sys::rank_group(&mut command, own_core);
        crate::job::bootstrap_env(
            &mut command,
            self.local_boot.addr(),
            rank,
            spec.size,
            spec.job,
            &spec.key,
        );
        // The user's FERRY_TCP_ADDR stands.
        if let (Some(addr), false) = (
            tcp_addr,
            spec.env.iter().any(|(k, _)| k == b"FERRY_TCP_ADDR"),
        ) {
            command.env("FERRY_TCP_ADDR", addr.to_string());
        }
        if !spec.cwd.is_empty() {
            command.current_dir(OsString::from_vec(spec.cwd.clone()));
        }
        sys::end_with_launcher(&mut command, libc::SIGKILL);
        command
    }

    /// Hands the new rank's stdout and stderr to the forwarder, whose lines go to the launcher
    /// and whose ends come back as [`Event::PipeClosed`]; returns how many it took.
    fn forward_output(&self, child: &mut Child, rank: u32) -> u32 {
        let index = self.ranks.len();
        let prefix = self.spec.tag_output.then(|| format!("[{rank}] "));
        let mut pipes = 0;
        let stdout = child.stdout.take().map(OwnedFd::from);
        let stderr = child.stderr.take().map(OwnedFd::from);
        for (pipe, stream) in [(stdout, Stream::Stdout), (stderr, Stream::Stderr)] {
            let (Some(pipe), Some(forwarder)) = (pipe, self.output.as_ref()) else {
                continue;
            };
            let (out, done) = (self.out.clone(), self.events_tx.clone());
            let emit = Box::new(move |bytes: &[u8]| {
                out.send(NodeMessage::Output {
                    rank,
                    stream,
                    bytes: bytes.to_vec(),
                })
                .map_err(|_| io::Error::other("launcher gone"))
            });
            let on_end = Box::new(move || {
                let _ = done.send(Event::PipeClosed(index));
            });
            if forwarder
                .add_with(pipe, prefix.clone(), emit, Some(on_end))
                .is_ok()
            {
                pipes += 1;
            }
        }
        pipes
    }

    /// The main loop: everything the threads have to say, then the ranks' exits, until every
    /// rank has been reported and every child daemon has closed.
    fn serve(mut self, events: &Receiver<Event>) -> i32 {
        loop {
            // Once stopping, the exits matter more than waiting for news.
            while let Ok(event) = events.recv_timeout(if self.stopping.is_some() {
                Duration::from_millis(1)
            } else {
                TICK
            }) {
                self.on_event(event);
            }
            if let Some(message) = self.children.as_mut().and_then(children::Children::silent) {
                let _ = self.out.send(message);
            }
            let now = Instant::now();
            reap(&mut self.ranks);
            self.report_exits(now);
            self.kill_after_grace(now);
            if self.ranks.iter().all(|r| r.reported)
                && (self.children.as_ref()).is_none_or(children::Children::all_closed)
            {
                self.finish();
                return 0;
            }
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::FromLauncher(message) => self.on_launcher(message),
            Event::LauncherGone(_) => self.stop(),
            Event::OwnFence => {
                self.own_fenced = true;
                fence_up(&mut self.own_fenced, self.children.as_mut(), self.out);
            }
            Event::Child(index, event) => {
                if let Some(c) = self.children.as_mut() {
                    if let Some(message) = c.on_event(index, event) {
                        let _ = self.out.send(message);
                    }
                    fence_up(&mut self.own_fenced, Some(c), self.out);
                }
            }
            Event::PipeClosed(index) => {
                if let Some(r) = self.ranks.get_mut(index) {
                    r.pipes = r.pipes.saturating_sub(1);
                }
            }
        }
    }

    /// One frame of the launcher: input for rank 0, a signal, the child daemons to start, the
    /// bootstrap's answers (for this host's ranks or a child's), STOP.
    fn on_launcher(&mut self, message: NodeMessage) {
        match message {
            NodeMessage::Stdin(_) if !self.spec.ranks.contains(&0) => {
                // Rank 0 runs under a child daemon.
                if let Some((index, c)) =
                    (self.children.as_mut()).and_then(|c| Some((c.of_rank(0)?, c)))
                {
                    c.send(index, &message);
                }
            }
            NodeMessage::Stdin(bytes) => match self.stdin.as_mut() {
                Some(pipe) if !bytes.is_empty() => {
                    if pipe.write_all(&bytes).is_err() {
                        self.stdin = None;
                    }
                }
                _ => self.stdin = None,
            },
            NodeMessage::Signal(signal) => {
                for r in self.ranks.iter().filter(|r| r.exited.is_none()) {
                    sys::kill_group(r.pid, signal);
                }
                if let Some(c) = self.children.as_mut() {
                    c.send_all(&NodeMessage::Signal(signal));
                }
            }
            NodeMessage::Children {
                ferry,
                shell,
                words,
                nodes,
            } => match children::Children::start(&ferry, &shell, words, nodes, self.events_tx) {
                Ok(c) => self.children = Some(c),
                Err(message) => {
                    let _ = self.out.send(NodeMessage::Failed {
                        rank: None,
                        message: format!(
                            "{}: cannot start its child daemons: {message}",
                            self.host
                        ),
                    });
                }
            },
            NodeMessage::KvAck { rank } | NodeMessage::KvValue { rank, .. } => {
                match (self.children.as_mut()).and_then(|c| Some((c.of_rank(rank)?, c))) {
                    Some((index, c)) => c.send(index, &message),
                    None => self.local_boot.deliver(message),
                }
            }
            NodeMessage::FenceDone { .. } => {
                if let Some(c) = self.children.as_mut() {
                    c.send_all(&message);
                }
                self.local_boot.deliver(message);
            }
            NodeMessage::Stop => self.stop(),
            other => {
                let _ = self.out.send(NodeMessage::Failed {
                    rank: None,
                    message: format!(
                        "{}: unexpected message from the launcher: {other:?}",
                        self.host
                    ),
                });
            }
        }
    }

    /// The launcher said STOP or went away: STOP to the children, SIGTERM to the ranks (once).
    fn stop(&mut self) {
        if let Some(c) = self.children.as_mut() {
            c.send_all(&NodeMessage::Stop);
        }
        if self.stopping.is_none() {
            self.stopping = Some(Instant::now());
            for r in self.ranks.iter().filter(|r| r.exited.is_none()) {
                sys::kill_process(r.pid, libc::SIGTERM);
                sys::kill_group(r.pid, libc::SIGTERM);
            }
        }
    }

    /// Reports each rank that has ended, once: after its output, so that the launcher has it
    /// all when it judges the exit, or after a grace (something it started may hold the pipe).
    fn report_exits(&mut self, now: Instant) {
        for r in self.ranks.iter_mut() {
            if let (Some((exit, at)), false) = (r.exited, r.reported) {
                if r.pipes == 0 || now.duration_since(at) >= OUTPUT_GRACE {
                    r.reported = true;
                    let _ = self.out.send(NodeMessage::Exited { rank: r.rank, exit });
                }
            }
        }
    }

    /// SIGKILL to the ranks still running a grace after they were told to stop.
    fn kill_after_grace(&mut self, now: Instant) {
        let Some(since) = self.stopping else {
            return;
        };
        if !self.killed && now.duration_since(since) >= TERM_GRACE {
            self.killed = true;
            for r in self.ranks.iter().filter(|r| r.exited.is_none()) {
                sys::kill_process(r.pid, libc::SIGKILL);
                sys::kill_group(r.pid, libc::SIGKILL);
            }
        }
    }

    /// Every rank has been reported: the bootstrap server goes, and what the ranks left behind.
    fn finish(&mut self) {
        self.local_boot.shutdown();
        // What the ranks started may still be in their groups: it ends with them.
        for r in &self.ranks {
            sys::kill_group(r.pid, libc::SIGKILL);
        }
        // Segments of ranks that ended before every rank of this host had attached.
        crate::job::remove_shared_memory(self.spec.job);
    }
}
