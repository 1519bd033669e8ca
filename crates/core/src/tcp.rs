//! TCP transport: one connection per pair of ranks, nonblocking, progressed by epoll (mio).
//!
//! Every connection opens with the mutual HMAC handshake of `ferry_wire::handshake`. Who dials
//! and along which path is decided by the caller (`ferry_grid::path::plan`, from the ranks'
//! process ids; on one host the lower rank dials). Anything else that connects to a rank's port
//! is a stranger: it is given [`HANDSHAKE_TIMEOUT`] to authenticate, and any wrong byte closes
//! it with one log line while the job carries on. After the handshake both directions carry
//! ferry frames: headers and payloads leave in one vectored write, and large payloads are read
//! straight into the receive buffer.
//!
//! Grids (docs/ARCHITECTURE.md §4): a connection to a rank on another private cluster goes to the relay on
//! that cluster's front node; the dialer drives `ferry_wire::relay::RelayConnector` until the
//! relay answers ESTABLISHED and then runs the same handshake end to end. The listener tells the
//! two kinds apart by the first four bytes: `FRLY` is a connection the relay opened (checked
//! with a `RelayAcceptor` and this rank's one `ReplayGuard`, answered ACCEPTED), anything else
//! goes straight to the handshake. A rank on a private cluster keeps its registration with its
//! relay open for the job's life ([`TcpTransport::register_with_relay`]); its end means the
//! relay died, and the job fails with "relay on <front> went away" instead of hanging.
//!
//! Rails: with `FERRY_RAILS=k` every peer pair has k connections, each announcing its
//! rail index in the handshake; rail i may run between a dedicated pair of local addresses.
//! Rail 0 carries the ordered traffic. A failure of any other rail is not the job's: the rail
//! is closed and reported through [`TcpTransport::take_failures`], and the engine sends its
//! chunks again on the others.

use crate::engine::{FrameSink, OutFrame};
use crate::error::Error;
use ferry_wire::relay::{self, Registrar, RelayAcceptor, RelayConnector, ReplayGuard};
use ferry_wire::{Frame, FrameError, Handshake, JobKey, HEADER_LEN};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a connection may take to authenticate.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes buffered per connection for headers and small payloads.
const STAGING: usize = 64 << 10;
/// Most bytes one read into the staging buffer takes: enough for many small frames, small
/// enough that a large payload behind a header is mostly read straight into its destination
/// instead of being copied twice.
const FILL: usize = 16 << 10;
/// Payload remainders at least this large are read directly into the destination.
const DIRECT_READ: usize = 32 << 10;
/// Tokens of peer connections: peer rank in the low 32 bits, rail above.
const RAIL_SHIFT: u32 = 32;
const LISTENER: Token = Token(usize::MAX);
const RELAY: Token = Token(usize::MAX - 1);
const DOORBELL: Token = Token(usize::MAX - 2);
const STRANGER_BASE: usize = 1 << 40;

/// Strangers kept at a time unless `FERRY_TCP_STRANGERS` says otherwise.
pub(crate) const DEFAULT_MAX_STRANGERS: usize = 1024;
/// Highest process number (universe rank) a handshake may claim: ranks of every world of the
/// job, spawned ones included (the launcher allows as many).
pub(crate) const UNIVERSE_CAP: u32 = 1 << 16;

enum Input {
    Header,
    Payload {
        frame: Frame,
        incoming: crate::engine::Incoming,
        done: usize,
        total: usize,
    },
}

/// What runs on a connection before the ferry handshake.
enum Pre {
    /// Nothing (any more).
    Done,
    /// Accepted, first bytes not seen yet: `FRLY` makes it a relayed connection.
    Sniff(RelayAcceptor),
    /// Opened by our relay for a client outside the cluster: INCOMING, then ACCEPTED.
    Relayed(RelayAcceptor),
    /// Dialled through the peer's relay: GREETING, CONNECT, ESTABLISHED; or FORWARDED, then
    /// INCOMING and ACCEPTED through the relay's pinhole.
    ViaRelay(RelayConnector),
}

struct Conn {
    stream: TcpStream,
    addr: SocketAddr,
    pre: Pre,
    /// Front node whose relay carries this connection, for messages.
    via: Option<String>,
    /// The CONNECT to the peer's relay while this connection goes through its pinhole: held
    /// open until the target accepts, since closing it closes the pinhole.
    control: Option<TcpStream>,
    /// Opened by our relay (an accepted connection that began with `FRLY`).
    relayed: bool,
    handshake: Option<Handshake>,
    /// Dialled connections are writable only once connected.
    connected: bool,
    readable: bool,
    writable: bool,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    input: Input,
    opened: Instant,
    /// Payload and header bytes written since the connection opened.
    written: u64,
}

impl Conn {
    fn new(
        stream: TcpStream,
        addr: SocketAddr,
        pre: Pre,
        handshake: Handshake,
        connected: bool,
    ) -> Conn {
        Conn {
            stream,
            addr,
            pre,
            via: None,
            control: None,
            relayed: false,
            handshake: Some(handshake),
            connected,
            readable: true,
            writable: true,
            buf: vec![0u8; STAGING].into_boxed_slice(),
            start: 0,
            end: 0,
            input: Input::Header,
            opened: Instant::now(),
            written: 0,
        }
    }

    /// Reads what the socket has into the staging buffer. Ok(false): nothing now.
    fn fill(&mut self) -> std::io::Result<bool> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let limit = (self.end + FILL).min(self.buf.len());
        loop {
            match self.stream.read(&mut self.buf[self.end..limit]) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    // A short read emptied the socket: what comes later is a new edge, so
                    // the read that would only say EAGAIN is saved (one system call less
                    // per message received).
                    self.readable = self.end + n == limit;
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.readable = false;
                    return Ok(false);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves the relay exchange forward, if any. Ok(true) once it is over.
    fn step_pre(&mut self, seen: &mut ReplayGuard) -> Result<bool, String> {
        loop {
            let out: &[u8] = match &self.pre {
                Pre::Done => return Ok(true),
                Pre::Sniff(_) => &[],
                Pre::Relayed(a) => a.pending_output(),
                Pre::ViaRelay(c) => c.pending_output(),
            };
            if !out.is_empty() && self.connected && self.writable {
                match self.stream.write(out) {
                    Ok(n) => match &mut self.pre {
                        Pre::Relayed(a) => a.consume_output(n),
                        Pre::ViaRelay(c) => c.consume_output(n),
                        _ => {}
                    },
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.writable = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("write failed: {e}")),
                }
                continue;
            }
            let done = match &self.pre {
                Pre::Relayed(a) => a.peer_rank().is_some(),
                Pre::ViaRelay(c) => c.is_established(),
                _ => false,
            };
            if done {
                self.pre = Pre::Done;
                self.control = None;
                return Ok(true);
            }
            if self.start < self.end {
                let input = &self.buf[self.start..self.end];
                let used = match &mut self.pre {
                    Pre::Sniff(_) if input.len() >= relay::MAGIC.len() => {
                        let relayed = input[..relay::MAGIC.len()] == relay::MAGIC;
                        if let Pre::Sniff(a) = std::mem::replace(&mut self.pre, Pre::Done) {
                            if relayed {
                                self.pre = Pre::Relayed(a);
                                self.relayed = true;
                            }
                        }
                        continue;
                    }
                    Pre::Sniff(_) => 0,
                    Pre::Relayed(a) => match a.handle_input(input, seen) {
                        Ok(used) => used,
                        Err(e) => {
                            // REFUSED is queued: one try to send it, then close.
                            let _ = self.stream.write(a.pending_output());
                            return Err(format!("relayed connection refused: {e}"));
                        }
                    },
                    Pre::ViaRelay(c) => c
                        .handle_input(input)
                        .map_err(|e| format!("the relay refused: {e}"))?,
                    Pre::Done => 0,
                };
                if used > 0 {
                    self.start += used;
                    continue;
                }
            }
            if !self.readable {
                return Ok(false);
            }
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    return Err("closed before the handshake".into())
                }
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    }

    /// The port of the pinhole the peer's relay opened, once this connection is to move there.
    fn pinhole(&self) -> Option<u16> {
        match &self.pre {
            Pre::ViaRelay(c) => c.pinhole(),
            _ => None,
        }
    }

    /// Moves the relay exchange and the handshake forward. Ok(Some((rank, rail))) once
    /// complete.
    fn drive_handshake(&mut self, seen: &mut ReplayGuard) -> Result<Option<(u32, u16)>, String> {
        if !self.step_pre(seen)? {
            return Ok(None);
        }
        let Some(mut hs) = self.handshake.take() else {
            return Ok(None);
        };
        let outcome = self.step_handshake(&mut hs);
        if !matches!(outcome, Ok(Some(_))) {
            self.handshake = Some(hs);
        }
        outcome
    }

    fn step_handshake(&mut self, hs: &mut Handshake) -> Result<Option<(u32, u16)>, String> {
        loop {
            if self.connected && self.writable && !hs.pending_output().is_empty() {
                match self.stream.write(hs.pending_output()) {
                    Ok(n) => hs.consume_output(n),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.writable = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("write failed: {e}")),
                }
            }
            if let Some(rank) = hs.peer_rank() {
                return Ok(Some((rank, hs.rail())));
            }
            if self.start < self.end && hs.wanted() > 0 {
                let used = hs
                    .handle_input(&self.buf[self.start..self.end])
                    .map_err(|e| e.to_string())?;
                self.start += used;
                continue;
            }
            if !self.readable {
                return Ok(None);
            }
            match self.fill() {
                Ok(true) => {}
                Ok(false)
                    if hs.pending_output().is_empty() || !self.writable || !self.connected =>
                {
                    return Ok(None)
                }
                Ok(false) => {}
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    return Err("closed during the handshake".into())
                }
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    }
}

/// This rank's sockets.
pub(crate) struct TcpTransport {
    poll: Poll,
    events: Events,
    listener: TcpListener,
    listen_addr: SocketAddr,
    /// Connections by peer and rail.
    conns: Vec<Vec<Option<Conn>>>,
    /// Rails per peer pair.
    rails: u16,
    /// TCP_USER_TIMEOUT of rails other than rail 0.
    rail_timeout: Duration,
    /// Rails that failed since the engine last asked: (peer, rail, why).
    failures: Vec<(u32, u16, String)>,
    /// Other worlds' processes whose connection ended (orderly or not) since the engine last
    /// asked: what was queued for them goes (see `crate::spawn`).
    closed: Vec<u32>,
    strangers: Vec<Option<Conn>>,
    /// Most strangers kept at a time (`FERRY_TCP_STRANGERS`, at least two per peer and rail):
    /// one more closes the oldest.
    max_strangers: usize,
    /// Rate limit of the lines about refused connections.
    stranger_log: crate::stranger_log::StrangerLog,
    key: JobKey,
    job: u64,
    me: u32,
    /// Universe ranks of this process's own world.
    world: std::ops::Range<u32>,
    max_payload: u64,
    socket_buffer: usize,
    /// Nonces of relayed connections already accepted.
    seen: ReplayGuard,
    /// The registration with our cluster's relay, kept open for the job's life.
    relay: Option<RelayLink>,
    /// Rung by shared-memory peers when this rank sleeps in `poll_input` (see `crate::shm`).
    doorbell: Option<crate::shm::Doorbell>,
}

/// What the rate limit held back is summed up when the transport goes (at finalize).
impl Drop for TcpTransport {
    fn drop(&mut self) {
        if let Some(summary) = self.stranger_log.finish() {
            eprintln!("ferry: rank {}: {summary}", self.me);
        }
    }
}

/// A private rank's registration with the relay on its front node.
struct RelayLink {
    stream: TcpStream,
    front: String,
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::Transport(format!("{what}: {e}"))
}

fn nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    // getrandom only fails when the OS has no entropy source at all.
    if getrandom::getrandom(&mut n).is_err() {
        n[..16].copy_from_slice(&(Instant::now().elapsed().as_nanos()).to_le_bytes());
    }
    n
}

impl TcpTransport {
    /// Listens on `bind` (port 0 picks one), for `rails` connections per peer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bind(
        bind: SocketAddr,
        key: JobKey,
        job: u64,
        (me, world): (u32, std::ops::Range<u32>),
        max_payload: u64,
        socket_buffer: usize,
        rails: u16,
        rail_timeout: Duration,
    ) -> Result<TcpTransport, Error> {
        let poll = Poll::new().map_err(|e| io_error("epoll_create", e))?;
        let mut listener = TcpListener::bind(bind)
            .map_err(|e| io_error(&format!("cannot listen on {bind}"), e))?;
        let listen_addr = listener
            .local_addr()
            .map_err(|e| io_error("getsockname", e))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| io_error("epoll_ctl", e))?;
        Ok(TcpTransport {
            poll,
            events: Events::with_capacity(256),
            listener,
            listen_addr,
            conns: (0..world.end)
                .map(|_| (0..rails).map(|_| None).collect())
                .collect(),
            rails,
            rail_timeout,
            failures: Vec::new(),
            closed: Vec::new(),
            strangers: Vec::new(),
            max_strangers: DEFAULT_MAX_STRANGERS,
            stranger_log: Default::default(),
            key,
            job,
            me,
            world,
            max_payload,
            socket_buffer,
            seen: ReplayGuard::default(),
            relay: None,
            doorbell: None,
        })
    }

    /// Watches `bell`: a ring ends a wait in [`TcpTransport::poll_input`], which then drains it
    /// and reports progress, so that the caller looks at its shared-memory rings again.
    pub(crate) fn watch_doorbell(&mut self, mut bell: crate::shm::Doorbell) -> Result<(), Error> {
        self.poll
            .registry()
            .register(&mut bell, DOORBELL, Interest::READABLE)
            .map_err(|e| io_error("epoll_ctl", e))?;
        self.doorbell = Some(bell);
        Ok(())
    }

    /// Registers this rank with the relay of its cluster (on `front`, reached at `inside`) so
    /// that ranks outside the cluster can reach it, and keeps the connection: its end fails the
    /// job ("relay on `front` went away"). Blocks until registered, retrying a refused connect
    /// for up to `timeout` (the relay may be starting).
    pub(crate) fn register_with_relay(
        &mut self,
        inside: SocketAddr,
        front: &str,
        timeout: Duration,
    ) -> Result<(), Error> {
        let fail = |what: String| Error::Transport(format!("relay on {front} at {inside}: {what}"));
        let deadline = Instant::now() + timeout;
        let mut stream = loop {
            match std::net::TcpStream::connect_timeout(&inside, Duration::from_secs(2)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(fail(format!("cannot connect: {e}"))),
            }
        };
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_secs(1)),
            ))
            .map_err(|e| fail(e.to_string()))?;
        let mut reg = Registrar::new(self.key.clone(), self.job, self.me, self.listen_addr.port());
        let mut buf = [0u8; relay::MAX_FRAME];
        while !reg.is_registered() {
            if !reg.pending_output().is_empty() {
                stream
                    .write_all(reg.pending_output())
                    .map_err(|e| fail(format!("write failed: {e}")))?;
                let n = reg.pending_output().len();
                reg.consume_output(n);
                continue;
            }
            let n = match stream.read(&mut buf) {
                Ok(0) => return Err(fail("closed the registration".into())),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(fail(format!("no registration: {e}"))),
            };
            // The relay answers REGISTER only after receiving it, so one read never holds
            // more than the frames of one step.
            let mut used = 0;
            while used < n && !reg.is_registered() {
                let step = reg
                    .handle_input(&buf[used..n])
                    .map_err(|e| fail(format!("registration refused: {e}")))?;
                if step == 0 {
                    break;
                }
                used += step;
            }
        }
        stream
            .set_nonblocking(true)
            .map_err(|e| fail(e.to_string()))?;
        let mut stream = TcpStream::from_std(stream);
        self.poll
            .registry()
            .register(&mut stream, RELAY, Interest::READABLE)
            .map_err(|e| io_error("epoll_ctl", e))?;
        self.relay = Some(RelayLink {
            stream,
            front: front.to_string(),
        });
        Ok(())
    }

    /// Reads the relay registration after an event on it: its end is the job's failure.
    #[cold]
    fn check_relay(&mut self) -> Result<(), Error> {
        let Some(link) = self.relay.as_mut() else {
            return Ok(());
        };
        let mut buf = [0u8; 256];
        loop {
            match link.stream.read(&mut buf) {
                Ok(0) => break,
                // The relay sends nothing after REGISTERED; ignore whatever it is.
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        Err(Error::Transport(format!(
            "rank {}: relay on {} went away",
            self.me, link.front
        )))
    }

    pub(crate) fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }

    /// Applies per-socket options to a new rank-to-rank connection.
    fn tune(&self, stream: &TcpStream) -> Result<(), Error> {
        stream
            .set_nodelay(true)
            .map_err(|e| io_error("TCP_NODELAY", e))?;
        if self.socket_buffer > 0 {
            let socket = socket2::SockRef::from(stream);
            socket
                .set_send_buffer_size(self.socket_buffer)
                .and_then(|()| socket.set_recv_buffer_size(self.socket_buffer))
                .map_err(|e| io_error("SO_SNDBUF/SO_RCVBUF", e))?;
        }
        Ok(())
    }

    /// With several rails, a rail fails once its data stays unacknowledged for the rail
    /// timeout, instead of after TCP's many minutes of retransmission.
    fn tune_rail(&self, stream: &TcpStream) -> Result<(), Error> {
        if self.rails == 1 {
            return Ok(());
        }
        socket2::SockRef::from(stream)
            .set_tcp_user_timeout(Some(self.rail_timeout))
            .map_err(|e| io_error("TCP_USER_TIMEOUT", e))
    }

    /// What rail `rail` to `peer` holds: whether it works and the bytes given to it that the
    /// peer has not acknowledged (`SIOCOUTQ`).
    pub(crate) fn load(&self, peer: usize, rail: usize) -> crate::rails::RailLoad {
        let Some(conn) = self.conns[peer][rail].as_ref() else {
            return crate::rails::RailLoad {
                alive: false,
                free: false,
                backlog: 0,
                written: 0,
            };
        };
        let mut unacked: libc::c_int = 0;
        // SAFETY: SIOCOUTQ writes one int through the pointer, which points to a live c_int.
        let rc = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&conn.stream),
                libc::TIOCOUTQ,
                &mut unacked,
            )
        };
        crate::rails::RailLoad {
            alive: conn.handshake.is_none(),
            free: true,
            backlog: if rc == 0 { unacked.max(0) as u64 } else { 0 },
            written: conn.written,
        }
    }

    /// Other worlds' processes whose connection ended since the last call.
    pub(crate) fn take_closed(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.closed)
    }

    /// Rails that failed since the last call: (peer, rail, why).
    pub(crate) fn take_failures(&mut self) -> Vec<(u32, u16, String)> {
        std::mem::take(&mut self.failures)
    }

    /// Closes rail `rail` to `peer` (it failed, here or at the peer), dropping what it holds.
    pub(crate) fn close_rail(&mut self, peer: usize, rail: usize) {
        if let Some(mut conn) = self.conns[peer][rail].take() {
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
    }

    /// Reads what rail `rail` to `peer` still holds (the peer stopped using it: whatever its
    /// kernel acknowledged must be taken before what the peer sends again), then closes it.
    fn drain_rail(&mut self, peer: usize, rail: usize, sink: &mut dyn FrameSink) {
        if let Some(conn) = self.conns[peer][rail].as_mut() {
            conn.readable = true;
            // Stops at the first read that would block, or at an error: either is its end.
            while let Ok(true) = read_frames(conn, peer as u32, sink, self.max_payload) {}
        }
        self.close_rail(peer, rail);
    }

    /// Records the failure of a rail (with several rails) and closes it.
    fn rail_failed(&mut self, peer: usize, rail: usize, why: String) {
        self.close_rail(peer, rail);
        self.failures.push((peer as u32, rail as u16, why));
    }

    /// Starts connecting rail `rail` to `peer` at `addr`: the peer's own address, or — with
    /// `via_relay` naming its front node — the public address of the relay there; from local
    /// address `from` when given.
    pub(crate) fn dial(
        &mut self,
        (peer, rail): (u32, u16),
        addr: SocketAddr,
        from: Option<std::net::IpAddr>,
        via_relay: Option<&str>,
    ) -> Result<(), Error> {
        let cannot = |e| {
            io_error(
                &format!("cannot connect rail {rail} to rank {peer} at {addr}"),
                e,
            )
        };
        let mut stream = match from {
            None => TcpStream::connect(addr).map_err(cannot)?,
            Some(local) => connect_from(addr, local).map_err(|(bound, e)| {
                if bound {
                    cannot(e)
                } else {
                    io_error(&format!("cannot bind rail {rail} to {local}"), e)
                }
            })?,
        };
        self.tune(&stream)?;
        self.tune_rail(&stream)?;
        self.poll
            .registry()
            .register(
                &mut stream,
                Token(peer as usize | (rail as usize) << RAIL_SHIFT),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| io_error("epoll_ctl", e))?;
        self.grow(peer as usize + 1);
        let hs = Handshake::connect(
            self.key.clone(),
            self.job,
            UNIVERSE_CAP,
            self.me,
            peer,
            nonce(),
        )
        .on_rail(rail, self.rails);
        let pre = match via_relay {
            Some(_) => Pre::ViaRelay(RelayConnector::new(
                self.key.clone(),
                self.job,
                self.me,
                peer,
                nonce(),
            )),
            None => Pre::Done,
        };
        let mut conn = Conn::new(stream, addr, pre, hs, false);
        conn.via = via_relay.map(str::to_string);
        self.conns[peer as usize][rail as usize] = Some(conn);
        Ok(())
    }

    /// Moves rail `rail` to `peer` onto a new connection through the pinhole at `port` of its
    /// relay (the relay's answer to CONNECT), from the same local address; the CONNECT stays
    /// open until the target accepts.
    fn through_pinhole(&mut self, peer: usize, rail: usize, port: u16) -> Result<(), Error> {
        let Some(conn) = self.conns[peer][rail].as_ref() else {
            return Ok(());
        };
        let addr = SocketAddr::new(conn.addr.ip(), port);
        let local = conn.stream.local_addr();
        let cannot = |e| {
            io_error(
                &format!("cannot connect rail {rail} to rank {peer} through the relay's pinhole at {addr}"),
                e,
            )
        };
        let mut stream = match local {
            Ok(local) => connect_from(addr, local.ip()).map_err(|(_, e)| cannot(e))?,
            Err(_) => TcpStream::connect(addr).map_err(cannot)?,
        };
        self.tune(&stream)?;
        self.tune_rail(&stream)?;
        let Some(conn) = self.conns[peer][rail].as_mut() else {
            return Ok(());
        };
        let registry = self.poll.registry();
        let _ = registry.deregister(&mut conn.stream);
        registry
            .register(
                &mut stream,
                Token(peer | rail << RAIL_SHIFT),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| io_error("epoll_ctl", e))?;
        conn.control = Some(std::mem::replace(&mut conn.stream, stream));
        conn.addr = addr;
        conn.connected = false;
        conn.readable = true;
        conn.start = 0;
        conn.end = 0;
        if let Pre::ViaRelay(c) = &mut conn.pre {
            c.through_pinhole();
        }
        Ok(())
    }

    fn established(&self, rank: usize) -> bool {
        self.conns.get(rank).is_some_and(|rails| {
            rails
                .iter()
                .all(|c| c.as_ref().is_some_and(|c| c.handshake.is_none()))
        })
    }

    /// Whether a connection to `peer` is open or being opened.
    pub(crate) fn has_conn(&self, peer: usize) -> bool {
        self.conns
            .get(peer)
            .and_then(|rails| rails.first())
            .is_some_and(Option::is_some)
    }

    /// Makes room for connections to peers up to (not including) `peers`.
    pub(crate) fn grow(&mut self, peers: usize) {
        let rails = self.rails;
        while self.conns.len() < peers {
            self.conns.push((0..rails).map(|_| None).collect());
        }
    }

    /// Those of `peers` (universe ranks) without an authenticated connection yet.
    pub(crate) fn missing(&self, peers: &[u32]) -> Vec<u32> {
        peers
            .iter()
            .copied()
            .filter(|&r| r != self.me && !self.established(r as usize))
            .collect()
    }

    /// Waits up to `timeout` for socket events, then reads everything readable.
    /// Returns whether anything happened.
    pub(crate) fn poll_input(
        &mut self,
        sink: &mut dyn FrameSink,
        timeout: Option<Duration>,
    ) -> Result<bool, Error> {
        let mut progressed = false;
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error("epoll_wait", e)),
        }
        let mut accept = false;
        let mut relay_event = false;
        for event in self.events.iter() {
            let token = event.token();
            if token == LISTENER {
                accept = true;
                continue;
            }
            if token == RELAY {
                relay_event = true;
                continue;
            }
            if token == DOORBELL {
                // Drained after every event (edge-triggered: the next ring must be an edge).
                // Progress even if it was empty: a ring consumed here may be the only sign of
                // a record the caller's last look at the rings missed.
                if let Some(bell) = self.doorbell.as_ref() {
                    bell.drain();
                }
                progressed = true;
                continue;
            }
            let conn = if token.0 >= STRANGER_BASE {
                self.strangers
                    .get_mut(token.0 - STRANGER_BASE)
                    .and_then(Option::as_mut)
            } else {
                let (peer, rail) = (token.0 & 0xffff_ffff, token.0 >> RAIL_SHIFT);
                self.conns
                    .get_mut(peer)
                    .and_then(|rails| rails.get_mut(rail))
                    .and_then(Option::as_mut)
            };
            if let Some(conn) = conn {
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    conn.readable = true;
                }
                if event.is_writable() {
                    conn.writable = true;
                    conn.connected = true;
                }
            }
        }
        if relay_event {
            self.check_relay()?;
        }
        if accept {
            progressed |= self.accept_all();
        }
        progressed |= self.drive_strangers();
        for peer in 0..self.conns.len() {
            for rail in 0..self.rails as usize {
                let Some(conn) = self.conns[peer][rail].as_mut() else {
                    continue;
                };
                if conn.handshake.is_some() {
                    match conn.drive_handshake(&mut self.seen) {
                        Ok(Some(_)) => progressed = true,
                        Ok(None) => {
                            if let Some(port) = conn.pinhole() {
                                self.through_pinhole(peer, rail, port)?;
                                progressed = true;
                            }
                            continue;
                        }
                        Err(_) if !self.world.contains(&(peer as u32)) => {
                            // Another world's process that ended before it answered (it was
                            // done with us: a correct program sends it nothing more).
                            progressed = true;
                            self.close_rail(peer, rail);
                            self.closed.push(peer as u32);
                            continue;
                        }
                        Err(why) => {
                            return Err(Error::Transport(format!(
                                "handshake with rank {peer} (rail {rail}) at {} failed: {why}",
                                conn.addr
                            )))
                        }
                    }
                }
                if conn.readable || conn.start < conn.end {
                    match read_frames(conn, peer as u32, sink, self.max_payload) {
                        Ok(moved) => progressed |= moved,
                        Err(Error::PeerLost { .. })
                            if sink.departed(peer as u32)
                                || !self.world.contains(&(peer as u32)) =>
                        {
                            // Another world's process ended: after its BYE, or as it finalized
                            // before our connection was up (then it could not say BYE). One
                            // that failed ends the job through the launcher.
                            progressed = true;
                            self.close_rail(peer, rail);
                            self.closed.push(peer as u32);
                            continue;
                        }
                        Err(Error::PeerLost { detail, .. }) if self.rails > 1 => {
                            progressed = true;
                            self.rail_failed(peer, rail, detail);
                        }
                        Err(e) => return Err(e),
                    }
                    for (down, seq) in sink.take_drains(peer as u32) {
                        self.drain_rail(peer, down as usize, sink);
                        sink.drained(peer as u32, seq);
                    }
                }
            }
        }
        Ok(progressed)
    }

    /// Keeps at most `max` connections waiting to authenticate (strangers), but never fewer
    /// than two per peer and rail, so that a whole job connecting at start-up is not shed.
    pub(crate) fn set_max_strangers(&mut self, max: usize) {
        let peers = self.conns.len().max(self.world.end as usize);
        self.max_strangers = max.max(2 * peers * self.rails as usize);
    }

    /// One line about a stranger, through the rate limit.
    fn log_stranger(&mut self, line: String) {
        let me = self.me;
        for line in self.stranger_log.note(Instant::now(), line) {
            eprintln!("ferry: rank {me}: {line}");
        }
    }

    /// Closes the oldest stranger if `max_strangers` are waiting (before one more is taken).
    fn shed_oldest_stranger(&mut self) {
        let live = self.strangers.iter().flatten().count();
        if live < self.max_strangers {
            return;
        }
        let oldest = self
            .strangers
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (c.opened, i)))
            .min();
        if let Some((_, index)) = oldest {
            if let Some(mut conn) = self.strangers[index].take() {
                let _ = self.poll.registry().deregister(&mut conn.stream);
                let max = self.max_strangers;
                self.log_stranger(format!(
                    "closed connection from {}: {max} connections were waiting to authenticate (FERRY_TCP_STRANGERS), it was the oldest",
                    conn.addr
                ));
            }
        }
    }

    fn accept_all(&mut self) -> bool {
        let mut progressed = false;
        loop {
            match self.listener.accept() {
                Ok((mut stream, addr)) => {
                    progressed = true;
                    self.shed_oldest_stranger();
                    if let Err(e) = self.tune(&stream) {
                        eprintln!("ferry: rank {}: connection from {addr}: {e}", self.me);
                    }
                    let index = self
                        .strangers
                        .iter()
                        .position(Option::is_none)
                        .unwrap_or_else(|| {
                            self.strangers.push(None);
                            self.strangers.len() - 1
                        });
                    if let Err(e) = self.poll.registry().register(
                        &mut stream,
                        Token(STRANGER_BASE + index),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        eprintln!(
                            "ferry: rank {}: cannot watch connection from {addr}: {e}",
                            self.me
                        );
                        continue;
                    }
                    let hs = Handshake::accept(
                        self.key.clone(),
                        self.job,
                        UNIVERSE_CAP,
                        self.me,
                        nonce(),
                    )
                    .with_rails(self.rails);
                    let sniff = Pre::Sniff(RelayAcceptor::new(self.key.clone(), self.job, self.me));
                    self.strangers[index] = Some(Conn::new(stream, addr, sniff, hs, true));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return progressed,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: log and keep the job going; the listener stays armed.
                    eprintln!("ferry: rank {}: accept failed: {e}", self.me);
                    return progressed;
                }
            }
        }
    }

    /// Advances handshakes of accepted connections; authenticated ones become peers.
    fn drive_strangers(&mut self) -> bool {
        let mut progressed = false;
        for index in 0..self.strangers.len() {
            let Some(conn) = self.strangers[index].as_mut() else {
                continue;
            };
            let outcome = if conn.opened.elapsed() > HANDSHAKE_TIMEOUT {
                Err(format!(
                    "no handshake within {} s",
                    HANDSHAKE_TIMEOUT.as_secs()
                ))
            } else {
                conn.drive_handshake(&mut self.seen)
            };
            match outcome {
                Ok(None) => {}
                Ok(Some((rank, rail))) => {
                    progressed = true;
                    let Some(mut conn) = self.strangers[index].take() else {
                        continue;
                    };
                    // A process of another world (spawned) may connect before we hear of it.
                    self.grow(rank as usize + 1);
                    if self.conns[rank as usize][rail as usize].is_some() {
                        eprintln!(
                            "ferry: rank {}: refused connection from {}: rank {rank} is already connected on rail {rail}",
                            self.me, conn.addr
                        );
                        let _ = self.poll.registry().deregister(&mut conn.stream);
                        continue;
                    }
                    if let Err(e) = self.tune_rail(&conn.stream) {
                        eprintln!("ferry: rank {}: rail {rail} of rank {rank}: {e}", self.me);
                    }
                    if let Err(e) = self.poll.registry().reregister(
                        &mut conn.stream,
                        Token(rank as usize | (rail as usize) << RAIL_SHIFT),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        eprintln!("ferry: rank {}: cannot watch rank {rank}: {e}", self.me);
                        continue;
                    }
                    // Bytes may already wait in the kernel; edge-triggered epoll will not repeat.
                    conn.readable = true;
                    if conn.relayed {
                        conn.via = self.relay.as_ref().map(|l| l.front.clone());
                    }
                    self.conns[rank as usize][rail as usize] = Some(conn);
                }
                Err(why) => {
                    progressed = true;
                    if let Some(mut conn) = self.strangers[index].take() {
                        let _ = self.poll.registry().deregister(&mut conn.stream);
                        self.log_stranger(format!("refused connection from {}: {why}", conn.addr));
                    }
                }
            }
        }
        // A window's held-back lines are summed up even when no new stranger comes.
        if let Some(summary) = self.stranger_log.flush(Instant::now()) {
            eprintln!("ferry: rank {}: {summary}", self.me);
        }
        progressed
    }

    /// Writes as much of `frame` as rail `rail` to `peer` takes. Ok(true) once all of it is
    /// written. A write failure on a rail other than rail 0 closes that rail and is reported
    /// by [`TcpTransport::take_failures`]; the frame stays unwritten.
    pub(crate) fn try_write(
        &mut self,
        peer: usize,
        rail: usize,
        frame: &mut OutFrame,
    ) -> Result<bool, Error> {
        let Some(conn) = self.conns[peer][rail].as_mut() else {
            return Ok(false);
        };
        if conn.handshake.is_some() {
            return Ok(false);
        }
        let total = HEADER_LEN + frame.len;
        while frame.sent < total && conn.writable {
            let header = &frame.header[frame.sent.min(HEADER_LEN)..];
            let skip = frame.sent.saturating_sub(HEADER_LEN);
            // SAFETY: `payload` is valid for `len` bytes until the frame's request completes,
            // which happens only after this write finished.
            let payload =
                unsafe { std::slice::from_raw_parts(frame.payload.add(skip), frame.len - skip) };
            let written = if header.is_empty() {
                conn.stream.write(payload)
            } else {
                conn.stream
                    .write_vectored(&[IoSlice::new(header), IoSlice::new(payload)])
            };
            match written {
                Ok(n) => {
                    frame.sent += n;
                    conn.written += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => conn.writable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if self.rails > 1 => {
                    let why = format!("write to {} failed: {e}", conn.addr);
                    self.rail_failed(peer, rail, why);
                    return Ok(false);
                }
                Err(_) if !self.world.contains(&(peer as u32)) => {
                    // Another world's process that ended (see poll_input).
                    self.close_rail(peer, rail);
                    self.closed.push(peer as u32);
                    return Ok(false);
                }
                Err(e) => {
                    return Err(Error::Transport(format!(
                        "write to rank {peer} at {} failed: {e}",
                        conn.addr
                    )))
                }
            }
        }
        Ok(frame.sent == total)
    }
}

/// Starts a nonblocking connection to `addr` from local address `local` (any port). The error
/// says whether the bind had succeeded (false: binding to `local` failed).
fn connect_from(
    addr: SocketAddr,
    local: std::net::IpAddr,
) -> Result<TcpStream, (bool, std::io::Error)> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(|e| (true, e))?;
    socket.set_nonblocking(true).map_err(|e| (true, e))?;
    socket
        .bind(&SocketAddr::new(local, 0).into())
        .map_err(|e| (false, e))?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err((true, e)),
    }
    Ok(TcpStream::from_std(socket.into()))
}

/// Parses frames from a peer's connection until it has no more bytes now.
fn read_frames(
    conn: &mut Conn,
    peer: u32,
    sink: &mut dyn FrameSink,
    max_payload: u64,
) -> Result<bool, Error> {
    read_frames_inner(conn, peer, sink, max_payload).map_err(|e| match (e, &conn.via) {
        (Error::PeerLost { rank, pid, detail }, Some(front)) => Error::PeerLost {
            rank,
            pid,
            detail: format!(
                "{detail} (through the relay on {front}: relay on {front} went away, or rank {peer} ended)"
            ),
        },
        (e, _) => e,
    })
}

fn read_frames_inner(
    conn: &mut Conn,
    peer: u32,
    sink: &mut dyn FrameSink,
    max_payload: u64,
) -> Result<bool, Error> {
    let lost = |e: std::io::Error| {
        if e.kind() == ErrorKind::UnexpectedEof {
            sink_lost(peer, "connection closed by the peer".into())
        } else {
            sink_lost(peer, format!("read failed: {e}"))
        }
    };
    let mut progressed = false;
    loop {
        match &mut conn.input {
            Input::Header => {
                if conn.end - conn.start < HEADER_LEN {
                    if !conn.readable || !conn.fill().map_err(lost)? {
                        return Ok(progressed);
                    }
                    continue;
                }
                let frame = match Frame::decode(&conn.buf[conn.start..conn.end], max_payload) {
                    Ok(frame) => frame,
                    Err(FrameError::Incomplete { .. }) => continue,
                    Err(e) => {
                        return Err(Error::Protocol {
                            rank: peer as usize,
                            detail: e.to_string(),
                        })
                    }
                };
                conn.start += HEADER_LEN;
                progressed = true;
                let incoming = sink.begin_frame(peer, &frame)?;
                let total = frame.payload_len() as usize;
                conn.input = Input::Payload {
                    frame,
                    incoming,
                    done: 0,
                    total,
                };
            }
            Input::Payload {
                incoming,
                done,
                total,
                ..
            } => {
                let buffered = (conn.end - conn.start).min(*total - *done);
                if buffered > 0 {
                    incoming.store(*done, &conn.buf[conn.start..conn.start + buffered]);
                    conn.start += buffered;
                    *done += buffered;
                }
                let direct = incoming.direct_room(*done).min(*total - *done);
                // Past the buffer's end (truncation) `direct` is 0 and `target` is never used.
                let target = incoming.ptr().wrapping_add(*done);
                if *done == *total {
                    let Input::Payload {
                        frame, incoming, ..
                    } = std::mem::replace(&mut conn.input, Input::Header)
                    else {
                        unreachable!("matched Payload above")
                    };
                    sink.end_frame(peer, &frame, incoming)?;
                    if matches!(frame, Frame::RailDown { .. }) {
                        // What follows may be frames sent again: the failed rail is read to
                        // its end first.
                        return Ok(true);
                    }
                    continue;
                }
                if !conn.readable {
                    return Ok(progressed);
                }
                if direct >= DIRECT_READ {
                    // SAFETY: `direct_room` bounds `direct` to the part of the receive buffer that
                    // this frame owns, which stays valid until the frame ends.
                    let dst = unsafe { std::slice::from_raw_parts_mut(target, direct) };
                    match conn.stream.read(dst) {
                        Ok(0) => return Err(lost(ErrorKind::UnexpectedEof.into())),
                        Ok(n) => {
                            // Short: the socket is empty until its next edge (see `fill`).
                            conn.readable = n == direct;
                            if let Input::Payload { done, .. } = &mut conn.input {
                                *done += n;
                            }
                            progressed = true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => conn.readable = false,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(lost(e)),
                    }
                } else if !conn.fill().map_err(lost)? {
                    return Ok(progressed);
                }
            }
        }
    }
}

fn sink_lost(peer: u32, detail: String) -> Error {
    Error::PeerLost {
        rank: peer as usize,
        pid: 0,
        detail,
    }
}

#[cfg(test)]
mod loopback;
