//! The node daemon's bootstrap server: this host's ranks connect to it (on 127.0.0.1) as they
//! would to the launcher, and it speaks for all of them upstream, so the launcher holds one
//! connection per host, not one per rank, and a fence costs one message per host.
//!
//! - `hello`: checked here with the job key (the same challenge and MAC as the launcher's);
//! - `put`: kept here and sent up; the rank's `ok` waits for the launcher's acknowledgement, so
//!   that a put is in the job's key space before the rank can tell anyone about it;
//! - `get`: answered here when the key came down with a fence or was put here, else asked up;
//! - `fence`: once every rank of this host has entered it, one FENCE goes up; the launcher
//!   answers when every host has, with what was put since, which makes the gets that follow
//!   local;
//! - `abort`, `finalize` and the end of a connection are passed up as they are.
//!
//! Replies from the launcher reach the rank's thread through [`LocalBoot::deliver`]; each
//! rank has at most one request outstanding, so replies are matched by rank.

use crate::server::{authenticate, LineReader, ReadError, HANDSHAKE_TIMEOUT};
use ferry_wire::node::{NodeMessage, Session};
use ferry_wire::pmi::{Reply, Request, MAX_LINE};
use ferry_wire::JobKey;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;

/// Where one of this host's ranks stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    NotConnected,
    Open,
    Closed,
}

struct State {
    kv: HashMap<String, String>,
    /// The launcher's answer to each rank's outstanding put or get.
    replies: HashMap<u32, NodeMessage>,
    slots: HashMap<u32, Slot>,
    /// Ranks of this host in the current fence.
    fencing: usize,
    /// Fences completed.
    fences: u64,
    /// Open connections, so that shutdown can end their threads.
    streams: Vec<TcpStream>,
    shutdown: bool,
}

struct Shared {
    key: JobKey,
    ranks: usize,
    state: Mutex<State>,
    changed: Condvar,
    up: Sender<NodeMessage>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn send_up(&self, message: NodeMessage) {
        // The writer thread lives as long as the daemon.
        let _ = self.up.send(message);
    }

    /// Waits for the launcher's answer to `rank`'s request; `None` if the daemon shuts down.
    fn wait_reply(&self, rank: u32) -> Option<NodeMessage> {
        let mut state = self.lock();
        loop {
            if let Some(reply) = state.replies.remove(&rank) {
                return Some(reply);
            }
            if state.shutdown {
                return None;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The bootstrap server of one node daemon.
pub(crate) struct LocalBoot {
    addr: SocketAddr,
    shared: Arc<Shared>,
    listener: TcpListener,
}

impl LocalBoot {
    /// Listens on an ephemeral port of 127.0.0.1 for `ranks`, sending upstream on `up`.
    pub(crate) fn start(
        key: JobKey,
        ranks: &[u32],
        up: Sender<NodeMessage>,
    ) -> io::Result<LocalBoot> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            key,
            ranks: ranks.len(),
            state: Mutex::new(State {
                kv: HashMap::new(),
                replies: HashMap::new(),
                slots: ranks.iter().map(|&r| (r, Slot::NotConnected)).collect(),
                fencing: 0,
                fences: 0,
                streams: Vec::new(),
                shutdown: false,
            }),
            changed: Condvar::new(),
            up,
        });
        let accept_shared = Arc::clone(&shared);
        let accept_listener = listener.try_clone()?;
        thread::Builder::new()
            .name("ferry-node-boot".into())
            .stack_size(256 * 1024)
            .spawn(move || accept_loop(&accept_shared, accept_listener))?;
        Ok(LocalBoot {
            addr,
            shared,
            listener,
        })
    }

    /// The address this host's ranks connect to (their `FERRY_PMI_ADDR`).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Takes a bootstrap answer from the launcher: an acknowledged put, a value, or the end of
    /// a fence with what was put meanwhile.
    pub(crate) fn deliver(&self, message: NodeMessage) {
        let mut state = self.shared.lock();
        match message {
            NodeMessage::KvAck { rank } | NodeMessage::KvValue { rank, .. } => {
                state.replies.insert(rank, message);
            }
            NodeMessage::FenceDone { entries } => {
                state.kv.extend(entries);
                state.fences += 1;
            }
            _ => return,
        }
        self.shared.changed.notify_all();
    }

    /// Ends every session and releases ranks waiting for the launcher.
    pub(crate) fn shutdown(&self) {
        let streams = {
            let mut state = self.shared.lock();
            state.shutdown = true;
            std::mem::take(&mut state.streams)
        };
        self.shared.changed.notify_all();
        for stream in streams {
            let _ = stream.shutdown(Shutdown::Both);
        }
        crate::sys::shutdown_listener(&self.listener);
    }
}

impl Drop for LocalBoot {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        let Ok(stream) = conn else {
            if shared.lock().shutdown {
                return;
            }
            thread::sleep(std::time::Duration::from_millis(10));
            continue;
        };
        {
            let mut state = shared.lock();
            if state.shutdown {
                return;
            }
            if let Ok(clone) = stream.try_clone() {
                state.streams.push(clone);
            }
        }
        let conn_shared = Arc::clone(shared);
        let _ = thread::Builder::new()
            .name("ferry-node-rank".into())
            .stack_size(256 * 1024)
            .spawn(move || serve(&conn_shared, stream));
    }
}

fn serve(shared: &Shared, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut reader = LineReader::new(stream);
    let admitted = authenticate(&shared.key, HANDSHAKE_TIMEOUT, &mut reader, |rank| {
        let mut state = shared.lock();
        match state.slots.get_mut(&rank) {
            Some(slot @ Slot::NotConnected) => {
                *slot = Slot::Open;
                Ok(())
            }
            Some(_) => Err(format!("rank {rank} has already connected")),
            None => Err(format!("rank {rank} does not run on this host")),
        }
    });
    let rank = match admitted {
        Ok(rank) => rank,
        Err(reason) => {
            eprintln!("ferry node: refused a bootstrap connection: {reason}");
            let _ = reader.send(&Reply::Error(format!("refused: {reason}")));
            let _ = reader.stream.shutdown(Shutdown::Both);
            return;
        }
    };
    shared.send_up(NodeMessage::Session {
        rank,
        state: Session::Connected,
    });
    let finalized = reader.send(&Reply::Ok).is_ok() && session(shared, &mut reader, rank);
    let _ = reader.stream.shutdown(Shutdown::Both);
    shared.lock().slots.insert(rank, Slot::Closed);
    shared.send_up(NodeMessage::Session {
        rank,
        state: Session::Closed { finalized },
    });
}

/// Serves an authenticated rank until its connection ends; returns whether it finalized.
fn session(shared: &Shared, reader: &mut LineReader, rank: u32) -> bool {
    let mut finalized = false;
    loop {
        let line = match reader.read_line(None) {
            Ok(Some(line)) => line,
            Ok(None) | Err(ReadError::TimedOut | ReadError::Io(_)) => return finalized,
            Err(ReadError::TooLong) => {
                eprintln!(
                    "ferry node: rank {rank} sent a bootstrap line longer than {MAX_LINE} bytes; closing its connection"
                );
                return finalized;
            }
        };
        let request = std::str::from_utf8(&line)
            .map_err(|_| "request is not UTF-8 text".to_string())
            .and_then(|text| Request::parse(text).map_err(|e| e.to_string()));
        let reply = match request {
            Err(message) => Reply::Error(message),
            Ok(Request::Hello { .. }) => Reply::Error("already authenticated".into()),
            Ok(Request::Put { key, value }) => {
                shared.lock().kv.insert(key.clone(), value.clone());
                shared.send_up(NodeMessage::KvPut { rank, key, value });
                match shared.wait_reply(rank) {
                    Some(_) => Reply::Ok,
                    None => return finalized,
                }
            }
            Ok(Request::Get { key }) => {
                let known = shared.lock().kv.get(&key).cloned();
                match known {
                    Some(value) => Reply::Value(value),
                    None => {
                        shared.send_up(NodeMessage::KvGet {
                            rank,
                            key: key.clone(),
                        });
                        match shared.wait_reply(rank) {
                            Some(NodeMessage::KvValue {
                                value: Some(value), ..
                            }) => {
                                shared.lock().kv.insert(key, value.clone());
                                Reply::Value(value)
                            }
                            Some(_) => Reply::NotFound,
                            None => return finalized,
                        }
                    }
                }
            }
            Ok(Request::Fence) => {
                if !fence(shared) {
                    return finalized;
                }
                Reply::Ok
            }
            Ok(Request::Spawn { .. }) => {
                Reply::Error("MPI_Comm_spawn is not supported in multi-host jobs".into())
            }
            Ok(Request::Abort { code, message }) => {
                shared.send_up(NodeMessage::Abort {
                    rank,
                    code,
                    message,
                });
                continue;
            }
            Ok(Request::Finalize) => {
                finalized = true;
                shared.send_up(NodeMessage::Session {
                    rank,
                    state: Session::Finalized,
                });
                Reply::Ok
            }
        };
        if reader.send(&reply).is_err() {
            return finalized;
        }
    }
}

/// Waits until the fence has passed on every host; false if the daemon shuts down first.
fn fence(shared: &Shared) -> bool {
    let mut state = shared.lock();
    let generation = state.fences;
    state.fencing += 1;
    if state.fencing == shared.ranks {
        state.fencing = 0;
        shared.send_up(NodeMessage::Fence);
    }
    while state.fences == generation && !state.shutdown {
        state = shared
            .changed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
    }
    state.fences != generation
}
