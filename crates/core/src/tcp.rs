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
//! relay died, and the job fails with "relay on <front> went away" instead of hanging. A
//! cluster with several relays registers with each; the job fails only when the last goes,
//! and a connection through a relay that died fails as any rail does (the others carry on).
//!
//! Rails: with `FERRY_RAILS=k` every peer pair has k connections, each announcing its
//! rail index in the handshake; rail i may run between a dedicated pair of local addresses.
//! Rail 0 carries the ordered traffic. A failure of any other rail is not the job's: the rail
//! is closed and reported through [`TcpTransport::take_failures`], and the engine sends its
//! chunks again on the others.
//!
//! Where things are: `conn` (one connection and the exchanges that open it), `dial` (opening
//! connections), `strangers` (accepted, not yet authenticated), `registration` (the relay
//! registration of a private rank), `punch` (hole punching between two private clusters),
//! `frames` (frame reads and writes), `packed` (compressed frames, `FERRY_COMPRESS`); here the
//! transport, its set-up and the poll that drives them all.

use crate::error::Error;
use crate::frames::{FrameSink, OutFrame, Transport};
use ferry_wire::compress::compressed_len;
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
/// Tokens of the registrations with our cluster's relays: this plus the relay's index.
const RELAY_BASE: usize = 1 << 39;
const DOORBELL: Token = Token(usize::MAX - 2);
/// Another transport's wake descriptor (a fabric's completion queue): its event only ends a
/// wait, and the caller reads that transport.
const WATCHED: Token = Token(usize::MAX - 3);
const STRANGER_BASE: usize = 1 << 40;

/// Strangers kept at a time unless `FERRY_TCP_STRANGERS` says otherwise.
pub(crate) const DEFAULT_MAX_STRANGERS: usize = 1024;
/// Highest process number (universe rank) a handshake may claim: ranks of every world of the
/// job, spawned ones included (the launcher allows as many).
pub(crate) const UNIVERSE_CAP: u32 = 1 << 16;

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
    /// Closed to accept and close one connection when descriptors run out (`strangers`).
    spare: strangers::Spare,
    /// Accepting failed with connections left in the queue: try again at the next poll, which
    /// waits no longer than [`strangers::ACCEPT_RETRY`] (the edge-triggered listener will not
    /// say so again).
    accept_again: bool,
    key: JobKey,
    job: u64,
    me: u32,
    /// Universe ranks of this process's own world.
    world: std::ops::Range<u32>,
    max_payload: u64,
    socket_buffer: usize,
    /// Nonces of relayed connections already accepted.
    seen: ReplayGuard,
    /// The registrations with our cluster's relays (one per front node), kept open for the
    /// job's life.
    relays: Vec<RelayLink>,
    /// The relays (of any cluster) seen gone, which connections opened from then on avoid.
    relay_deaths: ferry_grid::relays::RelayDeaths,
    /// Rung by shared-memory peers when this rank sleeps in `poll_input` (see `crate::shm`).
    doorbell: Option<crate::shm::Doorbell>,
    /// Attempts to punch through two NATs that still run (`punch`).
    punches: Vec<Option<Punch>>,
    /// How each punched-for link came up.
    punch_log: Vec<PunchRecord>,
    /// Compression of the links made from now on (`FERRY_COMPRESS`), and what it did.
    compress: crate::compress::CompressConfig,
    compressed: crate::compress::CompressStats,
}

/// What the rate limit held back is summed up when the transport goes (at finalize).
impl Drop for TcpTransport {
    fn drop(&mut self) {
        if let Some(summary) = self.stranger_log.finish() {
            eprintln!("ferry: rank {}: {summary}", self.me);
        }
    }
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    crate::limits::transport_error(what, &e)
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
            spare: strangers::Spare::open(),
            accept_again: false,
            key,
            job,
            me,
            world,
            max_payload,
            socket_buffer,
            seen: ReplayGuard::default(),
            relays: Vec::new(),
            relay_deaths: Default::default(),
            doorbell: None,
            punches: Vec::new(),
            punch_log: Vec::new(),
            compress: Default::default(),
            compressed: Default::default(),
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

    /// Watches `fd` (another transport's wake descriptor, which outlives this transport's
    /// use of it): its readiness ends a wait in [`TcpTransport::poll_input`] with progress.
    pub(crate) fn watch_fd(&mut self, fd: std::os::fd::RawFd) -> Result<(), Error> {
        self.poll
            .registry()
            .register(&mut mio::unix::SourceFd(&fd), WATCHED, Interest::READABLE)
            .map_err(|e| io_error("epoll_ctl", e))
    }

    pub(crate) fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
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

    /// Bytes past TCP's acknowledgement that may still be lost on rail `rail` to `peer`:
    /// what a relay in between may hold ([`relay::HELD_IN_RELAY`]), 0 on a direct connection.
    pub(crate) fn held_in_relay(&self, peer: usize, rail: usize) -> u64 {
        match self.conns[peer][rail].as_ref() {
            Some(conn) if conn.via.is_some() => relay::HELD_IN_RELAY,
            _ => 0,
        }
    }

    /// Other worlds' processes whose connection ended since the last call.
    pub(crate) fn take_closed(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.closed)
    }

    /// Which of `relays` (a peer's cluster's, `front` first) rail `rail` of a connection this
    /// rank opens now to `peer` goes through: the spreading rule over those not seen gone
    /// ([`ferry_grid::relays::RelayDeaths::choose`]); None when all went away. `me` and
    /// `peer` are the ranks the spreading counts with (world ranks at set-up).
    pub(crate) fn choose_relay<'a>(
        &self,
        (me, peer, rail): (u32, u32, u16),
        relays: &'a [(String, SocketAddr)],
    ) -> Option<&'a (String, SocketAddr)> {
        let fronts = relays.iter().map(|(front, _)| front.as_str());
        let which = self.relay_deaths.choose((me, peer, rail), fronts)?;
        relays.get(which)
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
        // Through a relay, the failure is the only sign of its death a dialer gets.
        if let Some(front) = self.conns[peer][rail].as_ref().and_then(|c| c.via.as_ref()) {
            if self.relay_deaths.went_away(front) {
                eprintln!(
                    "ferry: rank {}: connections opened from now on leave out the relay on {front}",
                    self.me
                );
            }
        }
        self.close_rail(peer, rail);
        self.failures.push((peer as u32, rail as u16, why));
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

    /// Waits up to `timeout` for socket events (and other transports' watched descriptors),
    /// then reads everything readable. Returns whether anything happened.
    pub(crate) fn poll_wait(
        &mut self,
        sink: &mut dyn FrameSink,
        timeout: Option<Duration>,
    ) -> Result<bool, Error> {
        let mut progressed = false;
        // An attempt to punch retries on its own clock.
        let timeout = match self.punch_due() {
            Some(at) => {
                let due = at.saturating_duration_since(Instant::now());
                Some(timeout.map_or(due, |t| t.min(due)))
            }
            None => timeout,
        };
        let timeout = match self.accept_again {
            true => {
                Some(timeout.map_or(strangers::ACCEPT_RETRY, |t| t.min(strangers::ACCEPT_RETRY)))
            }
            false => timeout,
        };
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error("epoll_wait", e)),
        }
        let mut accept = false;
        let mut relay_events = Vec::new();
        // Only while set-up punches: no allocation otherwise.
        let mut punch_events = Vec::new();
        for event in self.events.iter() {
            let token = event.token();
            if (PUNCH_BASE..PUNCH_BASE << 1).contains(&token.0) {
                let failed = event.is_error() || event.is_read_closed();
                punch_events.push((token, event.is_readable() || failed, event.is_writable()));
                continue;
            }
            if token == LISTENER {
                accept = true;
                continue;
            }
            if (RELAY_BASE..RELAY_BASE + self.relays.len()).contains(&token.0) {
                relay_events.push(token.0 - RELAY_BASE);
                continue;
            }
            if token == WATCHED {
                progressed = true;
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
                conn.hung_up |= event.is_read_closed() || event.is_error();
                if event.is_writable() {
                    conn.writable = true;
                    conn.connected = true;
                }
            }
        }
        for index in relay_events {
            self.check_relay(index)?;
        }
        if accept || self.accept_again {
            progressed |= self.accept_all();
        }
        progressed |= self.drive_strangers();
        for (token, readable, writable) in punch_events {
            self.punch_event(token, readable, writable);
        }
        if !self.punches.is_empty() {
            progressed |= self.drive_punches()?;
        }
        let mut links_up = Vec::new();
        for peer in 0..self.conns.len() {
            for rail in 0..self.rails as usize {
                let Some(conn) = self.conns[peer][rail].as_mut() else {
                    continue;
                };
                if conn.handshake.is_some() {
                    match conn.drive_handshake(&mut self.seen) {
                        Ok(Some(_)) => {
                            progressed = true;
                            if !self.punch_log.is_empty() {
                                links_up.push(peer as u32);
                            }
                        }
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
                                || sink.survives_loss()
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
        for peer in links_up {
            self.link_up(peer, false);
        }
        Ok(progressed)
    }
}

mod conn;
mod dial;
mod frames;
impl Transport for TcpTransport {
    fn poll_input(&mut self, sink: &mut impl FrameSink) -> Result<bool, Error> {
        self.poll_wait(sink, Some(Duration::ZERO))
    }

    /// Writes on the peer's first rail (the engine's striper writes the others itself).
    fn try_write(&mut self, peer: usize, frame: &mut OutFrame) -> Result<bool, Error> {
        TcpTransport::try_write(self, peer, 0, frame)
    }

    /// The epoll instance itself: readable when any socket or watched descriptor is.
    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(&self.poll))
    }
}

mod packed;
mod punch;
mod registration;
mod strangers;

use conn::{Conn, Input, Pre};
use frames::read_frames;
pub(crate) use punch::PunchRecord;
use punch::{Punch, PUNCH_BASE};
use registration::RelayLink;

#[cfg(test)]
pub(crate) mod tests;
