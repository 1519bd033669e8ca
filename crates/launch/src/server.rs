//! The bootstrap server: the launcher's side of the line protocol in [`ferry_wire::pmi`].
//!
//! One thread serves every connection with one `mio` event loop (epoll): it accepts on
//! 127.0.0.1 (or the listener it is given), sends each connection a challenge, checks the
//! `hello` (version, rank in range and not yet connected, MAC over the nonce with the job key)
//! and then serves `put` / `get` / `fence` / `spawn` / `abort` / `finalize` for that rank. A
//! job of thousands of ranks costs one thread and one descriptor per rank, not a thread each.
//! A fence is a count per world and the list of ranks in it, answered together when the last
//! one enters; a spawn waits for the monitor's [`BootstrapServer::answer_spawn`]. What the job
//! monitor needs to know arrives as [`BootstrapEvent`]s.
//!
//! A peer that fails the handshake (wrong MAC, garbage, a line over [`MAX_LINE`], silence past the
//! handshake timeout, a rank already taken) gets one log line on stderr and its connection closed;
//! it never reaches the job's state. The connections themselves (accepting, the challenge, the
//! handshake deadline, line buffers and these bounds) are [`crate::conns`], shared with the node
//! daemon's bootstrap server.
//!
//! `mio` because the workspace's event loops already use it (the runtime's progress engine, the
//! relay).

use crate::conns::{ConnTable, Serve, Waiting};
use ferry_wire::pmi::{self, Reply, Request};
use ferry_wire::JobKey;
use mio::Waker;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How long a new connection may take to present a valid `hello`.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most processes a job may grow to by spawning.
const MAX_UNIVERSE: usize = 1 << 16;

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
    /// Ranks in the current fence, also those whose connection has closed since (their loss
    /// ends the job; the others are not held up by it).
    entered: u32,
    /// The open connections of the ranks in the current fence.
    waiting: Vec<usize>,
}

/// What the monitor's thread and the server's share.
struct State {
    /// By universe rank: the launcher's ranks, then each spawned world's.
    sessions: Vec<RankSession>,
    /// Answers of the monitor to spawn requests, by the new world's base.
    spawned: HashMap<u32, Result<(), String>>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not take the whole job down with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
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
        let (table, waker) = ConnTable::new(listener, handshake_timeout, "ferry run")?;
        let waker = Arc::new(waker);
        let (tx, events) = mpsc::channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                sessions: vec![RankSession::NotConnected; size as usize],
                spawned: HashMap::new(),
                shutdown: false,
            }),
        });
        let mut server = Server {
            table,
            key,
            shared: Arc::clone(&shared),
            events: tx,
            kv: HashMap::new(),
            worlds: vec![WorldFence {
                base: 0,
                size,
                entered: 0,
                waiting: Vec::new(),
            }],
            spawning: Vec::new(),
        };
        let thread = thread::Builder::new()
            .name("ferry-pmi".into())
            .stack_size(512 * 1024)
            .spawn(move || server.run())?;
        Ok(BootstrapServer {
            addr,
            shared,
            events,
            waker,
            thread: Some(thread),
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
        let _ = self.waker.wake();
    }

    /// Stops accepting, closes every connection and releases ranks waiting in a fence.
    pub fn shutdown(&mut self) {
        self.shared.lock().shutdown = true;
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for BootstrapServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What a connection waits for before its next request is read.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Blocked {
    #[default]
    No,
    /// In a fence of this world.
    Fence,
    /// In the spawn of the world at this base.
    Spawn(u32),
}

impl Waiting for Blocked {
    fn waits(&self) -> bool {
        *self != Blocked::No
    }
}

/// The event loop's own state (on its thread).
struct Server {
    table: ConnTable<Blocked>,
    key: JobKey,
    shared: Arc<Shared>,
    events: Sender<BootstrapEvent>,
    kv: HashMap<String, String>,
    worlds: Vec<WorldFence>,
    /// Connections waiting in a spawn.
    spawning: Vec<usize>,
}

impl Serve for Server {
    type Waits = Blocked;

    fn table(&mut self) -> &mut ConnTable<Blocked> {
        &mut self.table
    }

    fn hello(&mut self, index: usize, nonce: [u8; 32], line: &[u8]) {
        let shared = Arc::clone(&self.shared);
        let checked = check_hello(&self.key, &nonce, line).and_then(|rank| {
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
            Ok(rank)
        });
        match checked {
            Ok(rank) => {
                self.table.admit(index, rank);
                self.send(BootstrapEvent::Connected { rank });
                self.table.reply(index, &Reply::Ok);
            }
            Err(reason) => self.refuse(index, &reason),
        }
    }

    fn request(&mut self, index: usize, rank: u32, request: Result<Request, String>) {
        let reply = match request {
            Err(message) => Reply::Error(message),
            Ok(Request::Hello { .. }) => Reply::Error("already authenticated".into()),
            Ok(Request::Put { key, value }) => {
                self.kv.insert(key, value);
                Reply::Ok
            }
            Ok(Request::Get { key }) => match self.kv.get(&key) {
                Some(value) => Reply::Value(value.clone()),
                None => Reply::NotFound,
            },
            Ok(Request::Spawn { parent, apps }) => match self.spawn(index, rank, parent, apps) {
                Some(reply) => reply,
                None => return,
            },
            Ok(Request::Fence) => return self.fence(index, rank),
            Ok(Request::Abort { code, message }) => {
                self.send(BootstrapEvent::Abort {
                    rank,
                    code,
                    message,
                });
                // No reply: the launcher ends the job.
                return;
            }
            Ok(Request::Finalize) => {
                self.table.finalize(index, rank);
                // Recorded before the reply, so the rank's exit can never be seen first.
                self.shared.lock().sessions[rank as usize] = RankSession::Open { finalized: true };
                self.send(BootstrapEvent::Finalized { rank });
                Reply::Ok
            }
        };
        self.table.reply(index, &reply);
    }

    fn forget(&mut self, index: usize) {
        for world in &mut self.worlds {
            world.waiting.retain(|&i| i != index);
        }
        self.spawning.retain(|&i| i != index);
    }

    /// Tells the monitor.
    fn session_closed(&mut self, rank: u32, finalized: bool) {
        if let Some(slot) = self.shared.lock().sessions.get_mut(rank as usize) {
            *slot = RankSession::Closed { finalized };
        }
        self.send(BootstrapEvent::Closed { rank, finalized });
    }

    /// Whether the server runs on (not shut down).
    fn between_polls(&mut self) -> bool {
        !self.shared.lock().shutdown
    }

    /// Spawned worlds are ready.
    fn woken(&mut self) {
        self.answer_spawns();
    }
}

impl Server {
    fn send(&self, event: BootstrapEvent) {
        // The receiver lives as long as the server; a send after that has nobody to tell.
        let _ = self.events.send(event);
    }

    /// Connection `index` (rank `rank`) enters its world's fence; the last one in releases
    /// them all.
    fn fence(&mut self, index: usize, rank: u32) {
        let Some(w) = self
            .worlds
            .iter()
            .position(|w| (w.base..w.base + w.size).contains(&rank))
        else {
            let reply = Reply::Error(format!("rank {rank} is in no world"));
            return self.table.reply(index, &reply);
        };
        if let Some(conn) = self.table.get(index) {
            conn.waiting = Blocked::Fence;
        }
        self.worlds[w].waiting.push(index);
        self.worlds[w].entered += 1;
        if self.worlds[w].entered < self.worlds[w].size {
            return;
        }
        self.worlds[w].entered = 0;
        let waiting = std::mem::take(&mut self.worlds[w].waiting);
        for other in waiting {
            if let Some(conn) = self.table.get(other) {
                conn.waiting = Blocked::No;
                conn.reply(&Reply::Ok);
            }
            if other != index {
                self.drive(other);
            }
        }
    }

    /// Reserves the universe ranks of a new world and has the monitor start it; the reply
    /// waits for its answer (`None`), unless the request is refused at once.
    fn spawn(
        &mut self,
        index: usize,
        rank: u32,
        parent: String,
        apps: Vec<pmi::App>,
    ) -> Option<Reply> {
        let total: u64 = apps.iter().map(|a| u64::from(a.procs)).sum();
        let mut state = self.shared.lock();
        let base = state.sessions.len();
        if total == 0 || base as u64 + total > MAX_UNIVERSE as u64 {
            return Some(Reply::Error(format!(
                "cannot spawn {total} processes (the job has {base}, at most {MAX_UNIVERSE})"
            )));
        }
        let (base, size) = (base as u32, total as u32);
        let world = self.worlds.len() as u32;
        state
            .sessions
            .extend((0..size).map(|_| RankSession::NotConnected));
        drop(state);
        self.worlds.push(WorldFence {
            base,
            size,
            entered: 0,
            waiting: Vec::new(),
        });
        if let Some(conn) = self.table.get(index) {
            conn.waiting = Blocked::Spawn(base);
        }
        self.spawning.push(index);
        // The monitor sees worlds in the order of their bases: one thread sends them.
        self.send(BootstrapEvent::Spawn {
            rank,
            base,
            world,
            parent,
            apps,
        });
        None
    }

    /// Answers the connections whose spawn the monitor has answered.
    fn answer_spawns(&mut self) {
        let waiting = std::mem::take(&mut self.spawning);
        for index in waiting {
            let Some(Blocked::Spawn(base)) = self.table.peek(index).map(|c| c.waiting) else {
                continue;
            };
            let answer = self.shared.lock().spawned.remove(&base);
            let Some(result) = answer else {
                self.spawning.push(index);
                continue;
            };
            let world = self
                .worlds
                .iter()
                .position(|w| w.base == base)
                .unwrap_or_default() as u32;
            let reply = match result {
                Ok(()) => Reply::Spawned { base, world },
                Err(message) => Reply::Error(message),
            };
            if let Some(conn) = self.table.get(index) {
                conn.waiting = Blocked::No;
            }
            self.table.reply(index, &reply);
            self.drive(index);
        }
    }
}

/// Checks a `hello` line against the challenge `nonce`: its version and its MAC with `key`.
/// Returns the rank it claims, or why it is refused.
pub(crate) fn check_hello(key: &JobKey, nonce: &[u8; 32], line: &[u8]) -> Result<u32, String> {
    let text = std::str::from_utf8(line).map_err(|_| "hello is not UTF-8 text".to_string())?;
    let (version, rank, mac) = match Request::parse(text) {
        Ok(Request::Hello { version, rank, mac }) => (version, rank, mac),
        Ok(_) => return Err("expected hello".into()),
        Err(e) => return Err(e.to_string()),
    };
    if version != pmi::VERSION {
        return Err(format!("unsupported protocol version {version}"));
    }
    if !key.verify(&[b"pmi", nonce, &rank.to_le_bytes()], &mac) {
        return Err(format!("wrong MAC for rank {rank}"));
    }
    Ok(rank)
}
