//! The bootstrap server: the launcher's side of the line protocol in [`ferry_wire::pmi`].
//!
//! One thread accepts connections on 127.0.0.1; each connection gets its own thread, which sends
//! a challenge, checks the `hello` (version, rank in range and not yet connected, MAC over the
//! nonce with the job key) and then serves `put` / `get` / `fence` / `abort` / `finalize` for that
//! rank. Shared state (the key-value space, fence generation, each rank's session) sits behind one
//! mutex; fences wait on a condition variable. What the job monitor needs to know arrives as
//! [`BootstrapEvent`]s.
//!
//! A peer that fails the handshake (wrong MAC, garbage, a line over [`MAX_LINE`], silence past the
//! handshake timeout, a rank already taken) gets one log line on stderr and its connection closed;
//! it never reaches the job's state.

use ferry_wire::pmi::{self, Reply, Request, MAX_LINE};
use ferry_wire::JobKey;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a new connection may take to present a valid `hello`.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections still in their handshake beyond this many are refused at once, so that a flood of
/// strangers cannot exhaust threads.
const MAX_PENDING: usize = 256;

/// Stack size of the per-connection threads (they hold one small line buffer).
const THREAD_STACK: usize = 256 * 1024;

/// Where a rank stands with the bootstrap server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankSession {
    /// The rank has not authenticated (yet).
    NotConnected,
    /// The rank is connected.
    Open {
        /// Whether it has sent `finalize`.
        finalized: bool,
    },
    /// The rank's connection has closed; it cannot connect again.
    Closed {
        /// Whether it had sent `finalize` before.
        finalized: bool,
    },
}

/// What the bootstrap server reports to the job monitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapEvent {
    /// `rank` authenticated.
    Connected {
        /// The rank.
        rank: u32,
    },
    /// `rank` sent `finalize`.
    Finalized {
        /// The rank.
        rank: u32,
    },
    /// `rank` asked to end the job.
    Abort {
        /// The rank.
        rank: u32,
        /// The exit code it asked for.
        code: i32,
        /// Its reason.
        message: String,
    },
    /// `rank` asked for a new world of processes: universe ranks `base..` running `apps`,
    /// world number `world`. The monitor starts them and answers with
    /// [`BootstrapServer::answer_spawn`]; the rank waits for that answer.
    Spawn {
        /// The rank that asked.
        rank: u32,
        /// Universe rank of the new world's rank 0.
        base: u32,
        /// Number of the new world.
        world: u32,
        /// Token for the new processes (`ferry_wire::pmi::env::PARENT`).
        parent: String,
        /// What to run.
        apps: Vec<pmi::App>,
    },
    /// The connection of `rank` closed (end of stream, I/O error or a protocol violation).
    Closed {
        /// The rank.
        rank: u32,
        /// Whether it had sent `finalize`.
        finalized: bool,
    },
}

/// One world of the job (the launcher's, then one per spawn): its ranks fence together.
struct WorldFence {
    base: u32,
    size: u32,
    waiting: u32,
    generation: u64,
}

struct State {
    kv: HashMap<String, String>,
    /// By universe rank: the launcher's ranks, then each spawned world's.
    sessions: Vec<RankSession>,
    worlds: Vec<WorldFence>,
    /// Answers of the monitor to spawn requests, by the new world's base.
    spawned: HashMap<u32, Result<(), String>>,
    pending: usize,
    next_conn: u64,
    /// Clones of every open connection, so that shutdown can unblock their threads.
    streams: HashMap<u64, TcpStream>,
    shutdown: bool,
}

struct Shared {
    key: JobKey,
    handshake_timeout: Duration,
    state: Mutex<State>,
    fence_done: Condvar,
    spawn_done: Condvar,
    events: Sender<BootstrapEvent>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in another connection thread must not take the whole job down with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn send(&self, event: BootstrapEvent) {
        // The receiver lives as long as the server; a send after that has nobody to tell.
        let _ = self.events.send(event);
    }
}

/// The launcher's bootstrap server for one job of `size` ranks.
///
/// Dropping it (or calling [`BootstrapServer::shutdown`]) closes the listening socket and every
/// connection and wakes ranks blocked in a fence.
pub struct BootstrapServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    events: Receiver<BootstrapEvent>,
    accept: Option<JoinHandle<()>>,
    /// The listening socket (a second descriptor), shut down to wake the accept thread.
    listener: Option<TcpListener>,
}

impl BootstrapServer {
    /// Listens on an ephemeral port of 127.0.0.1 for the `size` ranks of the job keyed by `key`.
    pub fn start(size: u32, key: JobKey) -> io::Result<BootstrapServer> {
        BootstrapServer::start_with_timeout(size, key, HANDSHAKE_TIMEOUT)
    }

    /// Like [`BootstrapServer::start`], with a different handshake timeout.
    pub fn start_with_timeout(
        size: u32,
        key: JobKey,
        handshake_timeout: Duration,
    ) -> io::Result<BootstrapServer> {
        // std creates the socket with SOCK_CLOEXEC: ranks never inherit it.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        BootstrapServer::start_on(listener, size, key, handshake_timeout)
    }

    /// Serves on `listener`, which may have been opened elsewhere — in a grid, inside a
    /// network namespace on the public network, so that private ranks reach it through NAT.
    pub fn start_on(
        listener: TcpListener,
        size: u32,
        key: JobKey,
        handshake_timeout: Duration,
    ) -> io::Result<BootstrapServer> {
        let addr = listener.local_addr()?;
        let waker = listener.try_clone().ok();
        let (tx, events) = mpsc::channel();
        let shared = Arc::new(Shared {
            key,
            handshake_timeout,
            state: Mutex::new(State {
                kv: HashMap::new(),
                sessions: vec![RankSession::NotConnected; size as usize],
                worlds: vec![WorldFence {
                    base: 0,
                    size,
                    waiting: 0,
                    generation: 0,
                }],
                spawned: HashMap::new(),
                pending: 0,
                next_conn: 0,
                streams: HashMap::new(),
                shutdown: false,
            }),
            fence_done: Condvar::new(),
            spawn_done: Condvar::new(),
            events: tx,
        });
        let accept_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("ferry-pmi-accept".into())
            .stack_size(THREAD_STACK)
            .spawn(move || accept_loop(&accept_shared, listener))?;
        Ok(BootstrapServer {
            addr,
            shared,
            events,
            accept: Some(accept),
            listener: waker,
        })
    }

    /// The address ranks connect to (goes into `FERRY_PMI_ADDR`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next event, waiting at most `timeout` for one.
    pub fn next_event(&self, timeout: Duration) -> Option<BootstrapEvent> {
        self.events.recv_timeout(timeout).ok()
    }

    /// Where `rank` stands now (ranks out of range are [`RankSession::NotConnected`]).
    pub fn session(&self, rank: u32) -> RankSession {
        self.shared
            .lock()
            .sessions
            .get(rank as usize)
            .copied()
            .unwrap_or(RankSession::NotConnected)
    }

    /// Tells the rank waiting in the spawn of the world at `base` how it went.
    pub fn answer_spawn(&self, base: u32, result: Result<(), String>) {
        self.shared.lock().spawned.insert(base, result);
        self.shared.spawn_done.notify_all();
    }

    /// Stops accepting, closes every connection and releases ranks waiting in a fence.
    pub fn shutdown(&mut self) {
        let streams: Vec<TcpStream> = {
            let mut state = self.shared.lock();
            state.shutdown = true;
            state.streams.drain().map(|(_, s)| s).collect()
        };
        self.shared.fence_done.notify_all();
        self.shared.spawn_done.notify_all();
        for stream in streams {
            let _ = stream.shutdown(Shutdown::Both);
        }
        if let Some(accept) = self.accept.take() {
            // Wake the accept thread, which is blocked in accept(2): shutting the listener down
            // works also where we cannot connect to it (another network namespace).
            match &self.listener {
                Some(listener) => crate::sys::shutdown_listener(listener),
                None => {
                    let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
                }
            }
            let _ = accept.join();
        }
    }
}

impl Drop for BootstrapServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn refuse(peer: SocketAddr, reason: &str) {
    eprintln!("ferry run: refused bootstrap connection from {peer}: {reason}");
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(stream) => stream,
            Err(_) => {
                if shared.lock().shutdown {
                    return;
                }
                // Out of descriptors or a connection reset before accept: try again shortly
                // rather than spinning.
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let peer = stream
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
        let id = {
            let mut state = shared.lock();
            if state.shutdown {
                return;
            }
            if state.pending >= MAX_PENDING {
                drop(state);
                refuse(peer, "too many connections in their handshake");
                continue;
            }
            state.pending += 1;
            state.next_conn += 1;
            let id = state.next_conn;
            if let Ok(clone) = stream.try_clone() {
                state.streams.insert(id, clone);
            }
            id
        };
        let conn_shared = Arc::clone(shared);
        let spawned = thread::Builder::new()
            .name("ferry-pmi-conn".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                serve(&conn_shared, stream, peer);
                conn_shared.lock().streams.remove(&id);
            });
        if spawned.is_err() {
            let mut state = shared.lock();
            state.pending -= 1;
            state.streams.remove(&id);
            drop(state);
            refuse(peer, "cannot start a thread for it");
        }
    }
}

/// Why reading a line failed.
pub(crate) enum ReadError {
    TooLong,
    TimedOut,
    Io(io::Error),
}

/// Reads newline-terminated lines of at most [`MAX_LINE`] bytes, never buffering more than that
/// plus one read.
pub(crate) struct LineReader {
    pub(crate) stream: TcpStream,
    buf: Vec<u8>,
}

impl LineReader {
    pub(crate) fn new(stream: TcpStream) -> LineReader {
        LineReader {
            stream,
            buf: Vec::new(),
        }
    }

    /// The next line without its newline; `None` at end of stream (a partial last line is
    /// dropped: it was never a complete request).
    pub(crate) fn read_line(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<Option<Vec<u8>>, ReadError> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                if pos > MAX_LINE {
                    return Err(ReadError::TooLong);
                }
                let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
                line.pop();
                return Ok(Some(line));
            }
            if self.buf.len() > MAX_LINE {
                return Err(ReadError::TooLong);
            }
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ReadError::TimedOut);
                }
                self.stream
                    .set_read_timeout(Some(left))
                    .map_err(ReadError::Io)?;
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The deadline check at the top of the loop decides whether time is up.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) && deadline.is_some() => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    pub(crate) fn send(&mut self, reply: &Reply) -> io::Result<()> {
        self.stream.write_all(reply.encode().as_bytes())
    }
}

/// One connection, from challenge to close.
fn serve(shared: &Shared, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let mut reader = LineReader {
        stream,
        buf: Vec::new(),
    };
    let handshake = handshake(shared, &mut reader);
    shared.lock().pending -= 1;
    let rank = match handshake {
        Ok(rank) => rank,
        Err(reason) => {
            if !shared.lock().shutdown {
                refuse(peer, &reason);
                let _ = reader.send(&Reply::Error(format!("refused: {reason}")));
            }
            let _ = reader.stream.shutdown(Shutdown::Both);
            return;
        }
    };
    let finalized = session(shared, &mut reader, rank);
    let _ = reader.stream.shutdown(Shutdown::Both);
    shared.lock().sessions[rank as usize] = RankSession::Closed { finalized };
    shared.send(BootstrapEvent::Closed { rank, finalized });
}

/// Challenge, `hello`, verdict. Returns the authenticated rank or why the peer was refused.
fn handshake(shared: &Shared, reader: &mut LineReader) -> Result<u32, String> {
    let rank = authenticate(&shared.key, shared.handshake_timeout, reader, |rank| {
        let mut state = shared.lock();
        let ranks = state.sessions.len();
        let slot = state
            .sessions
            .get_mut(rank as usize)
            .ok_or_else(|| format!("rank {rank} out of range (job of {ranks} ranks)"))?;
        if *slot != RankSession::NotConnected {
            return Err(format!("rank {rank} has already connected"));
        }
        *slot = RankSession::Open { finalized: false };
        Ok(())
    })?;
    shared.send(BootstrapEvent::Connected { rank });
    // If this fails the session loop sees the broken connection and reports it closed.
    let _ = reader.send(&Reply::Ok);
    Ok(rank)
}

/// The rank's side of the handshake, checked: sends a challenge, reads `hello` within
/// `timeout`, checks its version and its MAC over the nonce with `key`, and lets `admit` take
/// the rank (or refuse it: out of range, already connected). The caller sends `ok`.
pub(crate) fn authenticate(
    key: &JobKey,
    timeout: Duration,
    reader: &mut LineReader,
    admit: impl FnOnce(u32) -> Result<(), String>,
) -> Result<u32, String> {
    let deadline = Instant::now() + timeout;
    // A peer that never reads must not block us either.
    reader
        .stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut nonce = [0u8; 32];
    crate::sys::random(&mut nonce).map_err(|e| format!("no randomness for a nonce: {e}"))?;
    reader
        .send(&Reply::Challenge { nonce })
        .map_err(|e| format!("cannot send the challenge: {e}"))?;
    let line = match reader.read_line(Some(deadline)) {
        Ok(Some(line)) => line,
        Ok(None) => return Err("closed before hello".into()),
        Err(ReadError::TooLong) => return Err(format!("line longer than {MAX_LINE} bytes")),
        Err(ReadError::TimedOut) => {
            return Err(format!("no hello within {} s", timeout.as_secs_f64()))
        }
        Err(ReadError::Io(e)) => return Err(e.to_string()),
    };
    let text = std::str::from_utf8(&line).map_err(|_| "hello is not UTF-8 text".to_string())?;
    let (version, rank, mac) = match Request::parse(text) {
        Ok(Request::Hello { version, rank, mac }) => (version, rank, mac),
        Ok(_) => return Err("expected hello".into()),
        Err(e) => return Err(e.to_string()),
    };
    if version != pmi::VERSION {
        return Err(format!("unsupported protocol version {version}"));
    }
    if !key.verify(&[b"pmi", &nonce, &rank.to_le_bytes()], &mac) {
        return Err(format!("wrong MAC for rank {rank}"));
    }
    admit(rank)?;
    // Authenticated ranks may sit idle between requests for as long as they compute.
    let _ = reader.stream.set_read_timeout(None);
    let _ = reader.stream.set_write_timeout(None);
    Ok(rank)
}

/// Serves an authenticated rank until its connection ends. Returns whether it finalized.
fn session(shared: &Shared, reader: &mut LineReader, rank: u32) -> bool {
    let mut finalized = false;
    loop {
        let line = match reader.read_line(None) {
            Ok(Some(line)) => line,
            Ok(None) => return finalized,
            Err(ReadError::TooLong) => {
                eprintln!(
                    "ferry run: rank {rank} sent a bootstrap line longer than {MAX_LINE} bytes; \
                     closing its connection"
                );
                return finalized;
            }
            Err(ReadError::TimedOut | ReadError::Io(_)) => return finalized,
        };
        let request = std::str::from_utf8(&line)
            .map_err(|_| "request is not UTF-8 text".to_string())
            .and_then(|text| Request::parse(text).map_err(|e| e.to_string()));
        let reply = match request {
            Err(message) => Reply::Error(message),
            Ok(Request::Hello { .. }) => Reply::Error("already authenticated".into()),
            Ok(Request::Put { key, value }) => {
                shared.lock().kv.insert(key, value);
                Reply::Ok
            }
            Ok(Request::Get { key }) => match shared.lock().kv.get(&key) {
                Some(value) => Reply::Value(value.clone()),
                None => Reply::NotFound,
            },
            Ok(Request::Spawn { parent, apps }) => match spawn(shared, rank, parent, apps) {
                Some(reply) => reply,
                None => return finalized,
            },
            Ok(Request::Fence) => {
                if !fence(shared, rank) {
                    return finalized;
                }
                Reply::Ok
            }
            Ok(Request::Abort { code, message }) => {
                shared.send(BootstrapEvent::Abort {
                    rank,
                    code,
                    message,
                });
                // No reply: the launcher ends the job.
                continue;
            }
            Ok(Request::Finalize) => {
                finalized = true;
                // Recorded before the reply, so the rank's exit can never be seen first.
                shared.lock().sessions[rank as usize] = RankSession::Open { finalized: true };
                shared.send(BootstrapEvent::Finalized { rank });
                Reply::Ok
            }
        };
        if reader.send(&reply).is_err() {
            return finalized;
        }
    }
}

/// Most processes a job may grow to by spawning.
const MAX_UNIVERSE: usize = 1 << 16;

/// Reserves the universe ranks of a new world, has the monitor start it and waits for its
/// answer. `None` if the server shut down first.
fn spawn(shared: &Shared, rank: u32, parent: String, apps: Vec<pmi::App>) -> Option<Reply> {
    let total: u64 = apps.iter().map(|a| u64::from(a.procs)).sum();
    let mut state = shared.lock();
    let base = state.sessions.len();
    if total == 0 || base as u64 + total > MAX_UNIVERSE as u64 {
        return Some(Reply::Error(format!(
            "cannot spawn {total} processes (the job has {base}, at most {MAX_UNIVERSE})"
        )));
    }
    let (base, size) = (base as u32, total as u32);
    let world = state.worlds.len() as u32;
    state
        .sessions
        .extend((0..size).map(|_| RankSession::NotConnected));
    state.worlds.push(WorldFence {
        base,
        size,
        waiting: 0,
        generation: 0,
    });
    // Sent under the lock: the monitor sees worlds in the order of their bases.
    shared.send(BootstrapEvent::Spawn {
        rank,
        base,
        world,
        parent,
        apps,
    });
    loop {
        if let Some(result) = state.spawned.remove(&base) {
            return Some(match result {
                Ok(()) => Reply::Spawned { base, world },
                Err(message) => Reply::Error(message),
            });
        }
        if state.shutdown {
            return None;
        }
        state = shared
            .spawn_done
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// Waits until every rank of `rank`'s world has entered this fence. Returns false if the
/// server shut down first.
fn fence(shared: &Shared, rank: u32) -> bool {
    let mut state = shared.lock();
    let Some(w) = state
        .worlds
        .iter()
        .position(|w| (w.base..w.base + w.size).contains(&rank))
    else {
        return false;
    };
    let generation = state.worlds[w].generation;
    state.worlds[w].waiting += 1;
    if state.worlds[w].waiting == state.worlds[w].size {
        state.worlds[w].waiting = 0;
        state.worlds[w].generation += 1;
        shared.fence_done.notify_all();
        return true;
    }
    while state.worlds[w].generation == generation && !state.shutdown {
        state = shared
            .fence_done
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
    }
    state.worlds[w].generation != generation
}
