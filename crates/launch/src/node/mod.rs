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

fn run_ranks(
    spec: &JobSpec,
    host: &str,
    events: &Receiver<Event>,
    events_tx: &Sender<Event>,
    out: &Sender<NodeMessage>,
    stop_requested: &AtomicBool,
) -> i32 {
    let program = OsString::from_vec(spec.program.clone());
    // This host's share of the job against its cores: the launcher cannot count them. The
    // launcher's --oversubscribe comes as FERRY_OVERSUBSCRIBE in the job's environment.
    let oversubscribe = crate::oversubscribe_allowed(false, |name| {
        spec.env
            .iter()
            .rev()
            .find(|(k, _)| k == name.as_bytes())
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    });
    let limit = oversubscribe.and_then(|oversubscribe| {
        crate::check_rank_limit(
            spec.ranks.len() as u64,
            host,
            crate::usable_cores(),
            oversubscribe,
        )
    });
    if let Err(e) = limit {
        let _ = out.send(NodeMessage::Failed {
            rank: spec.ranks.first().copied(),
            message: e.to_string(),
        });
        return 1;
    }
    let tcp_addr = address_towards(&spec.launcher);
    let mut children: Option<children::Children> = None;
    let mut own_fenced = false;
    // The bootstrap's messages go up as they are, straight into the launcher's queue (a rank's
    // finalize is there before its exit can be), but for the fence: with children it goes up
    // once they have all entered it too.
    let fence_events = events_tx.clone();
    let own_fence = Box::new(move || {
        let _ = fence_events.send(Event::OwnFence);
    });
    let started = boot::LocalBoot::start(spec.key.clone(), &spec.ranks, out.clone(), own_fence);
    let mut local_boot = match started {
        Ok(b) => b,
        Err(e) => {
            let _ = out.send(NodeMessage::Failed {
                rank: None,
                message: format!("cannot start the bootstrap server on {host}: {e}"),
            });
            return 1;
        }
    };
    let mut ranks: Vec<Rank> = Vec::new();
    let cores = crate::usable_cores();
    // One thread forwards every rank's output (a rank without it runs with its pipes closed).
    let output = match crate::output::Forwarder::start() {
        Ok(forwarder) => Some(forwarder),
        Err(e) => {
            eprintln!("ferry node ({host}): cannot forward the ranks' output: {e}");
            None
        }
    };
    let mut stdin: Option<ChildStdin> = None;
    let mut stopping: Option<Instant> = None;
    for (started, &rank) in spec.ranks.iter().enumerate() {
        // The launcher's STOP (or its end) must not wait until every rank has started.
        if stop_requested.load(Ordering::SeqCst) {
            stopping = Some(Instant::now());
            break;
        }
        if started % 32 == 0 {
            reap(&mut ranks);
        }
        let mut command = Command::new(&program);
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
        sys::rank_group(&mut command, spec.ranks.len() <= cores);
        crate::job::bootstrap_env(
            &mut command,
            local_boot.addr(),
            rank,
            spec.size,
            spec.job,
            &spec.key,
        );
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
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                let why = match e.kind() {
                    io::ErrorKind::NotFound => "program not found".to_string(),
                    io::ErrorKind::PermissionDenied if sys::names_a_directory(&program) => {
                        "is a directory, not a program".to_string()
                    }
                    io::ErrorKind::PermissionDenied => "permission denied".to_string(),
                    _ => e.to_string(),
                };
                let _ = out.send(NodeMessage::Failed {
                    rank: Some(rank),
                    message: format!(
                        "cannot start rank {rank} ({}) on {host}: {why}",
                        program.to_string_lossy()
                    ),
                });
                stopping = Some(Instant::now());
                break;
            }
        };
        let pid = child.id();
        let _ = out.send(NodeMessage::Started { rank, pid });
        if rank == 0 {
            stdin = child.stdin.take();
        }
        let index = ranks.len();
        let prefix = spec.tag_output.then(|| format!("[{rank}] "));
        let mut pipes = 0;
        let stdout = child.stdout.take().map(OwnedFd::from);
        let stderr = child.stderr.take().map(OwnedFd::from);
        for (pipe, stream) in [(stdout, Stream::Stdout), (stderr, Stream::Stderr)] {
            let (Some(pipe), Some(forwarder)) = (pipe, output.as_ref()) else {
                continue;
            };
            let (out, done) = (out.clone(), events_tx.clone());
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
        ranks.push(Rank {
            rank,
            child,
            pid,
            pipes,
            exited: None,
            reported: false,
        });
    }
    let mut killed = false;
    loop {
        // Everything the threads have to say, then the ranks' exits.
        while let Ok(event) = events.recv_timeout(if stopping.is_some() {
            Duration::from_millis(1)
        } else {
            TICK
        }) {
            match event {
                Event::FromLauncher(message @ NodeMessage::Stdin(_))
                    if !spec.ranks.contains(&0) =>
                {
                    // Rank 0 runs under a child daemon.
                    if let Some((index, c)) =
                        children.as_mut().and_then(|c| Some((c.of_rank(0)?, c)))
                    {
                        c.send(index, &message);
                    }
                }
                Event::FromLauncher(NodeMessage::Stdin(bytes)) => match stdin.as_mut() {
                    Some(pipe) if !bytes.is_empty() => {
                        if pipe.write_all(&bytes).is_err() {
                            stdin = None;
                        }
                    }
                    _ => stdin = None,
                },
                Event::FromLauncher(NodeMessage::Signal(signal)) => {
                    for r in ranks.iter().filter(|r| r.exited.is_none()) {
                        sys::kill_group(r.pid, signal);
                    }
                    if let Some(c) = children.as_mut() {
                        c.send_all(&NodeMessage::Signal(signal));
                    }
                }
                Event::FromLauncher(NodeMessage::Children {
                    ferry,
                    shell,
                    words,
                    nodes,
                }) => match children::Children::start(&ferry, &shell, words, nodes, events_tx) {
                    Ok(c) => children = Some(c),
                    Err(message) => {
                        let _ = out.send(NodeMessage::Failed {
                            rank: None,
                            message: format!("{host}: cannot start its child daemons: {message}"),
                        });
                    }
                },
                Event::FromLauncher(
                    message @ (NodeMessage::KvAck { rank } | NodeMessage::KvValue { rank, .. }),
                ) => match children.as_mut().and_then(|c| Some((c.of_rank(rank)?, c))) {
                    Some((index, c)) => c.send(index, &message),
                    None => local_boot.deliver(message),
                },
                Event::FromLauncher(message @ NodeMessage::FenceDone { .. }) => {
                    if let Some(c) = children.as_mut() {
                        c.send_all(&message);
                    }
                    local_boot.deliver(message);
                }
                Event::OwnFence => {
                    own_fenced = true;
                    fence_up(&mut own_fenced, children.as_mut(), out);
                }
                Event::Child(index, event) => {
                    if let Some(c) = children.as_mut() {
                        if let Some(message) = c.on_event(index, event) {
                            let _ = out.send(message);
                        }
                        fence_up(&mut own_fenced, Some(c), out);
                    }
                }
                Event::FromLauncher(NodeMessage::Stop) | Event::LauncherGone(_) => {
                    if let Some(c) = children.as_mut() {
                        c.send_all(&NodeMessage::Stop);
                    }
                    if stopping.is_none() {
                        stopping = Some(Instant::now());
                        for r in ranks.iter().filter(|r| r.exited.is_none()) {
                            sys::kill_process(r.pid, libc::SIGTERM);
                            sys::kill_group(r.pid, libc::SIGTERM);
                        }
                    }
                }
                Event::FromLauncher(other) => {
                    let _ = out.send(NodeMessage::Failed {
                        rank: None,
                        message: format!("{host}: unexpected message from the launcher: {other:?}"),
                    });
                }
                Event::PipeClosed(index) => {
                    if let Some(r) = ranks.get_mut(index) {
                        r.pipes = r.pipes.saturating_sub(1);
                    }
                }
            }
        }
        if let Some(message) = children.as_mut().and_then(children::Children::silent) {
            let _ = out.send(message);
        }
        let now = Instant::now();
        reap(&mut ranks);
        for r in ranks.iter_mut() {
            if let (Some((exit, at)), false) = (r.exited, r.reported) {
                // Its output first, so the launcher has it all when it judges the exit.
                if r.pipes == 0 || now.duration_since(at) >= OUTPUT_GRACE {
                    r.reported = true;
                    let _ = out.send(NodeMessage::Exited { rank: r.rank, exit });
                }
            }
        }
        if let Some(since) = stopping {
            if !killed && now.duration_since(since) >= TERM_GRACE {
                killed = true;
                for r in ranks.iter().filter(|r| r.exited.is_none()) {
                    sys::kill_process(r.pid, libc::SIGKILL);
                    sys::kill_group(r.pid, libc::SIGKILL);
                }
            }
        }
        if ranks.iter().all(|r| r.reported)
            && children.as_ref().is_none_or(children::Children::all_closed)
        {
            local_boot.shutdown();
            // What the ranks started may still be in their groups: it ends with them.
            for r in &ranks {
                sys::kill_group(r.pid, libc::SIGKILL);
            }
            // Segments of ranks that ended before every rank of this host had attached.
            crate::job::remove_shared_memory(spec.job);
            return 0;
        }
    }
}
