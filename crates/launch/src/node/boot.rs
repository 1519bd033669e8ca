//! The node daemon's bootstrap server: this host's ranks connect to it (on 127.0.0.1) as they
//! would to the launcher, and it speaks for all of them upstream, so the launcher holds one
//! connection per host, not one per rank, and a fence costs one message per host.
//!
//! - `hello`: checked here with the job key (the same challenge and MAC as the launcher's);
//! - `put`: kept here and sent up; the rank's `ok` waits for the launcher's acknowledgement, so
//!   that a put is in the job's key space before the rank can tell anyone about it;
//! - `get`: answered here when the key came down with a fence or was put here, else asked up;
//! - `fence`: once every rank of this host has entered it, the daemon is told (it sends one
//!   FENCE up, once its child daemons are in the fence too); the launcher
//!   answers when every host has, with what was put since, which makes the gets that follow
//!   local;
//! - `abort`, `finalize` and the end of a connection are passed up as they are, straight into
//!   the daemon's queue to the launcher: a rank's `finalize` is there before the rank has its
//!   `ok`, so before the daemon can see it exit and report that.
//!
//! One thread serves every rank of the host with one `mio` event loop, as the launcher's
//! server does ([`crate::server`]): a host of hundreds of ranks costs a descriptor per rank, not
//! a thread. Its connections are the launcher's kind ([`crate::conns`]), so strangers are bounded
//! the same way: at most [`conns::MAX_PENDING`] in their handshake, [`HANDSHAKE_TIMEOUT`] to
//! present a valid `hello`, lines of at most [`MAX_LINE`] bytes, one line on stderr each.
//!
//! Replies from the launcher come in through [`LocalBoot::deliver`], which wakes the loop; each
//! rank has at most one request outstanding, so replies are matched by rank.

use crate::conns::{self, ConnTable, Serve};
use crate::server::{check_hello, HANDSHAKE_TIMEOUT};
use ferry_wire::node::{NodeMessage, Session};
use ferry_wire::pmi::{Reply, Request};
use ferry_wire::JobKey;
use mio::Waker;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// Where one of this host's ranks stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    NotConnected,
    Open,
    Closed,
}

/// What the daemon's main thread hands the loop.
#[derive(Default)]
struct Inbox {
    /// The launcher's answers, in the order they came.
    answers: Vec<NodeMessage>,
    shutdown: bool,
}

/// The bootstrap server of one node daemon.
pub(crate) struct LocalBoot {
    addr: SocketAddr,
    inbox: Arc<Mutex<Inbox>>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

fn lock(inbox: &Mutex<Inbox>) -> MutexGuard<'_, Inbox> {
    // A panic elsewhere must not take the host's ranks down with it.
    inbox.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LocalBoot {
    /// Listens on an ephemeral port of 127.0.0.1 for `ranks`, sending upstream on `up`;
    /// `own_fence` is called instead once every rank of this host is in a fence (the daemon
    /// sends FENCE up when its children are in it too).
    pub(crate) fn start(
        key: JobKey,
        ranks: &[u32],
        up: Sender<NodeMessage>,
        own_fence: Box<dyn Fn() + Send>,
    ) -> io::Result<LocalBoot> {
        LocalBoot::start_with_timeout(key, ranks, up, own_fence, HANDSHAKE_TIMEOUT)
    }

    /// Like [`LocalBoot::start`], with a different handshake timeout.
    pub(crate) fn start_with_timeout(
        key: JobKey,
        ranks: &[u32],
        up: Sender<NodeMessage>,
        own_fence: Box<dyn Fn() + Send>,
        handshake_timeout: Duration,
    ) -> io::Result<LocalBoot> {
        // std creates the socket with SOCK_CLOEXEC: ranks never inherit it.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let (table, waker) = ConnTable::new(listener, handshake_timeout, "ferry node")?;
        let waker = Arc::new(waker);
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let mut server = NodeServer {
            table,
            key,
            inbox: Arc::clone(&inbox),
            up,
            own_fence,
            slots: ranks.iter().map(|&r| (r, Slot::NotConnected)).collect(),
            by_rank: HashMap::new(),
            kv: HashMap::new(),
            fence_entered: 0,
            fence_waiting: Vec::new(),
        };
        let thread = thread::Builder::new()
            .name("ferry-node-boot".into())
            .stack_size(256 * 1024)
            .spawn(move || server.run())?;
        Ok(LocalBoot {
            addr,
            inbox,
            waker,
            thread: Some(thread),
        })
    }

    /// The address this host's ranks connect to (their `FERRY_PMI_ADDR`).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Takes a bootstrap answer from the launcher: an acknowledged put, a value, or the end of
    /// a fence with what was put meanwhile.
    pub(crate) fn deliver(&self, message: NodeMessage) {
        if !matches!(
            message,
            NodeMessage::KvAck { .. } | NodeMessage::KvValue { .. } | NodeMessage::FenceDone { .. }
        ) {
            return;
        }
        lock(&self.inbox).answers.push(message);
        let _ = self.waker.wake();
    }

    /// Ends every session (ranks waiting for the launcher see their connection close) and
    /// stops the loop.
    pub(crate) fn shutdown(&mut self) {
        lock(&self.inbox).shutdown = true;
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for LocalBoot {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What a rank waits for from the launcher before its next request is read.
#[derive(Default)]
enum Waiting {
    #[default]
    No,
    /// The acknowledgement of its put.
    Put,
    /// The value of `key` (kept here once it comes).
    Get(String),
    /// The end of the fence.
    Fence,
}

impl conns::Waiting for Waiting {
    fn waits(&self) -> bool {
        !matches!(self, Waiting::No)
    }
}

/// The event loop's own state (on its thread).
struct NodeServer {
    table: ConnTable<Waiting>,
    key: JobKey,
    inbox: Arc<Mutex<Inbox>>,
    up: Sender<NodeMessage>,
    /// Every rank of this host is in the fence.
    own_fence: Box<dyn Fn() + Send>,
    slots: HashMap<u32, Slot>,
    /// The connection of each authenticated rank, for the launcher's answers.
    by_rank: HashMap<u32, usize>,
    kv: HashMap<String, String>,
    /// Ranks of this host in the current fence, also those whose connection has closed since.
    fence_entered: usize,
    /// The open connections in the current fence.
    fence_waiting: Vec<usize>,
}

impl Serve for NodeServer {
    type Waits = Waiting;

    fn table(&mut self) -> &mut ConnTable<Waiting> {
        &mut self.table
    }

    fn hello(&mut self, index: usize, nonce: [u8; 32], line: &[u8]) {
        let checked =
            check_hello(&self.key, &nonce, line).and_then(|rank| match self.slots.get_mut(&rank) {
                Some(slot @ Slot::NotConnected) => {
                    *slot = Slot::Open;
                    Ok(rank)
                }
                Some(Slot::Open | Slot::Closed) => {
                    Err(format!("rank {rank} has already connected"))
                }
                None => Err(format!("rank {rank} does not run on this host")),
            });
        let rank = match checked {
            Ok(rank) => rank,
            Err(reason) => return self.refuse(index, &reason),
        };
        self.table.admit(index, rank);
        self.by_rank.insert(rank, index);
        self.send_up(NodeMessage::Session {
            rank,
            state: Session::Connected,
        });
        self.table.reply(index, &Reply::Ok);
    }

    fn request(&mut self, index: usize, rank: u32, request: Result<Request, String>) {
        let reply = match request {
            Err(message) => Reply::Error(message),
            Ok(Request::Hello { .. }) => Reply::Error("already authenticated".into()),
            Ok(Request::Put { key, value }) => {
                self.kv.insert(key.clone(), value.clone());
                self.send_up(NodeMessage::KvPut { rank, key, value });
                return self.wait(index, Waiting::Put);
            }
            Ok(Request::Get { key }) => match self.kv.get(&key) {
                Some(value) => Reply::Value(value.clone()),
                None => {
                    self.send_up(NodeMessage::KvGet {
                        rank,
                        key: key.clone(),
                    });
                    return self.wait(index, Waiting::Get(key));
                }
            },
            Ok(Request::Fence) => return self.fence(index),
            Ok(Request::Spawn { .. }) => {
                Reply::Error("MPI_Comm_spawn is not supported in multi-host jobs".into())
            }
            Ok(Request::Abort { code, message }) => {
                // No reply: the launcher ends the job.
                return self.send_up(NodeMessage::Abort {
                    rank,
                    code,
                    message,
                });
            }
            Ok(Request::Finalize) => {
                self.table.finalize(index, rank);
                // Sent up before the reply, so the rank's exit can never be seen first.
                self.send_up(NodeMessage::Session {
                    rank,
                    state: Session::Finalized,
                });
                Reply::Ok
            }
        };
        self.table.reply(index, &reply);
    }

    fn forget(&mut self, index: usize) {
        self.fence_waiting.retain(|&i| i != index);
    }

    /// Tells the launcher.
    fn session_closed(&mut self, rank: u32, finalized: bool) {
        self.by_rank.remove(&rank);
        self.slots.insert(rank, Slot::Closed);
        self.send_up(NodeMessage::Session {
            rank,
            state: Session::Closed { finalized },
        });
    }

    /// The launcher's answers, unless it has shut the server down.
    fn between_polls(&mut self) -> bool {
        let (answers, shutdown) = {
            let mut inbox = lock(&self.inbox);
            (std::mem::take(&mut inbox.answers), inbox.shutdown)
        };
        if shutdown {
            return false;
        }
        for answer in answers {
            self.answer(answer);
        }
        true
    }

    /// Ends the ranks' bootstrap sessions.
    fn stop(&mut self) {
        self.close_all();
    }
}

impl NodeServer {
    fn send_up(&self, message: NodeMessage) {
        // The daemon's writer lives as long as the daemon; after that nobody is listening.
        let _ = self.up.send(message);
    }

    /// Closes every connection (shutdown: the ranks see their bootstrap end).
    fn close_all(&mut self) {
        for index in self.table.open() {
            self.close(index);
        }
    }

    /// Marks connection `index` as waiting for the launcher.
    fn wait(&mut self, index: usize, waiting: Waiting) {
        if let Some(conn) = self.table.get(index) {
            conn.waiting = waiting;
        }
    }

    /// Connection `index` enters the fence; once every rank of this host has, it goes up.
    fn fence(&mut self, index: usize) {
        self.wait(index, Waiting::Fence);
        self.fence_waiting.push(index);
        self.fence_entered += 1;
        if self.fence_entered == self.slots.len() {
            self.fence_entered = 0;
            (self.own_fence)();
        }
    }

    /// Takes one answer of the launcher and releases the ranks it was for.
    fn answer(&mut self, message: NodeMessage) {
        match message {
            NodeMessage::KvAck { rank } => {
                let Some(index) = self.waiting_rank(rank, |w| matches!(w, Waiting::Put)) else {
                    return;
                };
                self.release(index, &Reply::Ok);
            }
            NodeMessage::KvValue { rank, value } => {
                let Some(index) = self.waiting_rank(rank, |w| matches!(w, Waiting::Get(_))) else {
                    return;
                };
                let reply = match value {
                    Some(value) => {
                        if let Some(conn) = self.table.get(index) {
                            if let Waiting::Get(key) = &mut conn.waiting {
                                let key = std::mem::take(key);
                                self.kv.insert(key, value.clone());
                            }
                        }
                        Reply::Value(value)
                    }
                    None => Reply::NotFound,
                };
                self.release(index, &reply);
            }
            NodeMessage::FenceDone { entries } => {
                self.kv.extend(entries);
                for index in std::mem::take(&mut self.fence_waiting) {
                    self.release(index, &Reply::Ok);
                }
            }
            _ => {}
        }
    }

    /// The connection of `rank` if what it waits for passes `test`; an answer for a rank gone
    /// since, or one it does not wait for, is dropped.
    fn waiting_rank(&self, rank: u32, test: impl Fn(&Waiting) -> bool) -> Option<usize> {
        let index = *self.by_rank.get(&rank)?;
        test(&self.table.peek(index)?.waiting).then_some(index)
    }

    /// Answers the request connection `index` waited on and serves what it sent meanwhile.
    fn release(&mut self, index: usize, reply: &Reply) {
        if let Some(conn) = self.table.get(index) {
            conn.waiting = Waiting::No;
            conn.reply(reply);
        }
        self.drive(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_wire::pmi::{hello_mac, MAX_LINE, VERSION};
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;
    use std::sync::mpsc::{self, Receiver};
    use std::time::Instant;

    /// A rank's side of the bootstrap, blocking, with a time limit on every read.
    struct Client {
        reader: BufReader<TcpStream>,
        writer: TcpStream,
    }

    impl Client {
        fn open(addr: SocketAddr) -> (Client, [u8; 32]) {
            let stream = TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let writer = stream.try_clone().unwrap();
            let mut client = Client {
                reader: BufReader::new(stream),
                writer,
            };
            match client.reply() {
                Some(Reply::Challenge { nonce }) => (client, nonce),
                other => panic!("expected a challenge, got {other:?}"),
            }
        }

        fn hello(addr: SocketAddr, key: &JobKey, rank: u32) -> (Client, Option<Reply>) {
            let (mut client, nonce) = Client::open(addr);
            let reply = client.request(&Request::Hello {
                version: VERSION,
                rank,
                mac: hello_mac(key, &nonce, rank),
            });
            (client, reply)
        }

        fn send(&mut self, request: &Request) {
            let line = request.encode().unwrap();
            self.writer.write_all(line.as_bytes()).unwrap();
        }

        fn reply(&mut self) -> Option<Reply> {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(Reply::parse(&line).unwrap()),
            }
        }

        fn request(&mut self, request: &Request) -> Option<Reply> {
            self.send(request);
            self.reply()
        }
    }

    fn boot(ranks: &[u32]) -> (LocalBoot, JobKey, Receiver<NodeMessage>) {
        let key = JobKey([7; 32]);
        let (up, from_boot) = mpsc::channel();
        let fence = up.clone();
        let own_fence = Box::new(move || {
            let _ = fence.send(NodeMessage::Fence);
        });
        let boot = LocalBoot::start(key.clone(), ranks, up, own_fence).unwrap();
        (boot, key, from_boot)
    }

    fn next(from_boot: &Receiver<NodeMessage>) -> NodeMessage {
        from_boot.recv_timeout(Duration::from_secs(20)).unwrap()
    }

    #[test]
    fn puts_wait_for_the_launcher_gets_go_up_once_and_a_fence_goes_up_once_per_host() {
        let (boot, key, from_boot) = boot(&[3, 5]);
        let (mut a, ok) = Client::hello(boot.addr(), &key, 3);
        assert_eq!(ok, Some(Reply::Ok));
        let (mut b, ok) = Client::hello(boot.addr(), &key, 5);
        assert_eq!(ok, Some(Reply::Ok));
        for rank in [3, 5] {
            let connected = NodeMessage::Session {
                rank,
                state: Session::Connected,
            };
            assert_eq!(next(&from_boot), connected);
        }
        // A put is acknowledged only once the launcher has it.
        a.send(&Request::Put {
            key: "k".into(),
            value: "v".into(),
        });
        let put = NodeMessage::KvPut {
            rank: 3,
            key: "k".into(),
            value: "v".into(),
        };
        assert_eq!(next(&from_boot), put);
        boot.deliver(NodeMessage::KvAck { rank: 3 });
        assert_eq!(a.reply(), Some(Reply::Ok));
        // What was put here is answered here; the rest is asked up.
        let here = b.request(&Request::Get { key: "k".into() });
        assert_eq!(here, Some(Reply::Value("v".into())));
        b.send(&Request::Get { key: "far".into() });
        let asked = NodeMessage::KvGet {
            rank: 5,
            key: "far".into(),
        };
        assert_eq!(next(&from_boot), asked);
        boot.deliver(NodeMessage::KvValue {
            rank: 5,
            value: Some("away".into()),
        });
        assert_eq!(b.reply(), Some(Reply::Value("away".into())));
        // One FENCE for the host, once both ranks are in it; its answer releases both.
        a.send(&Request::Fence);
        b.send(&Request::Fence);
        assert_eq!(next(&from_boot), NodeMessage::Fence);
        boot.deliver(NodeMessage::FenceDone {
            entries: vec![("from".into(), "elsewhere".into())],
        });
        assert_eq!(a.reply(), Some(Reply::Ok));
        assert_eq!(b.reply(), Some(Reply::Ok));
        let local = a.request(&Request::Get { key: "from".into() });
        assert_eq!(local, Some(Reply::Value("elsewhere".into())));
        assert_eq!(a.request(&Request::Finalize), Some(Reply::Ok));
        let finalized = NodeMessage::Session {
            rank: 3,
            state: Session::Finalized,
        };
        assert_eq!(next(&from_boot), finalized);
        drop(a);
        let closed = NodeMessage::Session {
            rank: 3,
            state: Session::Closed { finalized: true },
        };
        assert_eq!(next(&from_boot), closed);
        // Nothing else went up: the local gets and the second fence entry stayed here.
        assert!(from_boot.try_recv().is_err());
    }

    #[test]
    fn strangers_are_refused_without_touching_the_ranks() {
        let (boot, key, from_boot) = boot(&[0]);
        // Wrong key, a rank of another host, garbage, an overlong line: each refused.
        let (mut wrong, nonce) = Client::open(boot.addr());
        let reply = wrong.request(&Request::Hello {
            version: VERSION,
            rank: 0,
            mac: hello_mac(&JobKey([1; 32]), &nonce, 0),
        });
        assert!(
            matches!(&reply, Some(Reply::Error(m)) if m.contains("wrong MAC for rank 0")),
            "{reply:?}"
        );
        assert_eq!(wrong.reply(), None);
        let (_, reply) = Client::hello(boot.addr(), &key, 9);
        assert!(
            matches!(&reply, Some(Reply::Error(m)) if m.contains("rank 9 does not run on this host")),
            "{reply:?}"
        );
        let (mut garbage, _) = Client::open(boot.addr());
        garbage.writer.write_all(b"\xff\xfe\n").unwrap();
        assert!(matches!(garbage.reply(), Some(Reply::Error(_))));
        let (mut long, _) = Client::open(boot.addr());
        let _ = long.writer.write_all(&vec![b'x'; MAX_LINE + 10]);
        // The refusal, or a reset if the rest of the line was still unread when it closed.
        let reply = long.reply();
        assert!(matches!(&reply, None | Some(Reply::Error(_))), "{reply:?}");
        assert_eq!(long.reply(), None);
        // The rank itself still gets in, once.
        let (_rank, ok) = Client::hello(boot.addr(), &key, 0);
        assert_eq!(ok, Some(Reply::Ok));
        let (_, again) = Client::hello(boot.addr(), &key, 0);
        assert!(
            matches!(&again, Some(Reply::Error(m)) if m.contains("already connected")),
            "{again:?}"
        );
        let connected = NodeMessage::Session {
            rank: 0,
            state: Session::Connected,
        };
        assert_eq!(next(&from_boot), connected);
        assert!(from_boot.try_recv().is_err());
    }

    #[test]
    fn a_silent_stranger_is_dropped_after_the_handshake_timeout() {
        let (up, _from) = mpsc::channel();
        let mut silent = LocalBoot::start_with_timeout(
            JobKey([7; 32]),
            &[0],
            up,
            Box::new(|| {}),
            Duration::from_millis(200),
        )
        .unwrap();
        let (mut stranger, _) = Client::open(silent.addr());
        let start = Instant::now();
        let reply = stranger.reply();
        assert!(
            matches!(&reply, Some(Reply::Error(m)) if m.contains("no hello within 0.2 s")),
            "{reply:?}"
        );
        assert_eq!(stranger.reply(), None);
        assert!(start.elapsed() < Duration::from_secs(10));
        silent.shutdown();
    }

    #[test]
    fn shutdown_ends_the_sessions_of_ranks_waiting_for_the_launcher() {
        let (mut boot, key, from_boot) = boot(&[0, 1]);
        let (mut a, _) = Client::hello(boot.addr(), &key, 0);
        a.send(&Request::Fence);
        let _ = next(&from_boot);
        boot.shutdown();
        assert_eq!(a.reply(), None);
    }
}
