//! Hole punching: a direct connection between two ranks on two private clusters, through both
//! NATs, tried before the peer's relay (the protocol and its timing: `ferry_wire::punch`).
//!
//! Set-up drives it in three steps (`crate::world`): [`TcpTransport::observe_mapping`] asks the
//! peer's relay which address our punching port shows outside (blocking, before the fence
//! that publishes addresses); after the fence [`TcpTransport::start_punch`] starts the attempt
//! on both sides at about the same time; `poll_input` then drives it like any connection, and
//! the decider dials through the relay (as without punching) if it fails.

use super::*;
use ferry_wire::punch::{Action, Attempt, Observer, Outcome, Role};
use std::net::IpAddr;

/// Tokens of punching sockets: `PUNCH_BASE + index into TcpTransport::punches`.
pub(super) const PUNCH_BASE: usize = 1 << 41;

/// One attempt to punch through to one peer.
pub(super) struct Punch {
    peer: u32,
    /// Our local address: the port whose mapping the relay observed.
    local: SocketAddr,
    /// The peer's offer: where its NAT shows its punching port.
    target: SocketAddr,
    attempt: Attempt,
    /// The current socket, while connecting or shaking hands.
    conn: Option<Conn>,
    /// The peer's cluster's relays (front node, address), for the decider's fallback.
    relays: Vec<(String, SocketAddr)>,
    /// An event (writable, error) arrived since the last look.
    stirred: bool,
}

/// How the link to one peer came up, for `--show-paths` and measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PunchRecord {
    /// The peer (universe rank).
    pub peer: u32,
    /// Whether the link is the punched connection (else the relay's).
    pub punched: bool,
    /// From the start of the attempt to an authenticated link (punched or relayed); None
    /// while not up.
    pub up_after: Option<Duration>,
    started: Instant,
}

/// A socket bound to `local` (shared with other sockets on that port: the observation's, the
/// attempt's earlier ones), nonblocking.
fn bound_socket(local: SocketAddr) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(local),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&local.into())?;
    Ok(socket)
}

impl TcpTransport {
    /// Asks the relay at `relay` (a peer's, reached through our NAT) which address a new local
    /// port at `local_ip` shows outside. Blocks up to `timeout`. Returns (local address,
    /// observed address); an error says why (the caller then does not punch).
    pub(crate) fn observe_mapping(
        &self,
        relay: SocketAddr,
        local_ip: IpAddr,
        timeout: Duration,
    ) -> Result<(SocketAddr, SocketAddr), String> {
        let socket = bound_socket(SocketAddr::new(local_ip, 0)).map_err(|e| e.to_string())?;
        let local = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or("no local address")?;
        socket
            .connect_timeout(&relay.into(), timeout)
            .map_err(|e| format!("cannot reach the relay at {relay}: {e}"))?;
        let mut stream: std::net::TcpStream = socket.into();
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        let mut observer = Observer::new(self.key.clone(), self.job, self.me, nonce());
        let mut buf = [0u8; relay::MAX_FRAME];
        while observer.observed().is_none() {
            if !observer.pending_output().is_empty() {
                stream
                    .write_all(observer.pending_output())
                    .map_err(|e| format!("relay at {relay}: {e}"))?;
                observer.consume_output(observer.pending_output().len());
                continue;
            }
            let n = match stream.read(&mut buf) {
                Ok(0) => return Err(format!("relay at {relay} closed without an answer")),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("relay at {relay}: {e}")),
            };
            let mut used = 0;
            while used < n && observer.observed().is_none() {
                let step = observer
                    .handle_input(&buf[used..n])
                    .map_err(|e| format!("relay at {relay}: {e}"))?;
                if step == 0 {
                    break;
                }
                used += step;
            }
        }
        let observed = observer.observed().ok_or("no answer")?;
        Ok((local, observed))
    }

    /// Starts punching to `peer` from `local` (whose mapping was observed) to the peer's
    /// offer `target`; the decider falls back to `relay` (address, front node) after
    /// `timeout`.
    pub(crate) fn start_punch(
        &mut self,
        peer: u32,
        (local, target): (SocketAddr, SocketAddr),
        role: Role,
        timeout: Duration,
        relays: Vec<(String, SocketAddr)>,
    ) -> Result<(), Error> {
        self.grow(peer as usize + 1);
        let now = Instant::now();
        let seed = u64::from_le_bytes(nonce()[..8].try_into().unwrap_or_default());
        self.punches.push(Some(Punch {
            peer,
            local,
            target,
            attempt: Attempt::new(role, timeout, now, seed),
            conn: None,
            relays,
            stirred: false,
        }));
        self.punch_log.push(PunchRecord {
            peer,
            punched: false,
            up_after: None,
            started: now,
        });
        let index = self.punches.len() - 1;
        self.run_punch_actions(index, now).map(|_| ())
    }

    /// When the next attempt wants [`Attempt::handle_timeout`], if any runs.
    pub(super) fn punch_due(&self) -> Option<Instant> {
        self.punches
            .iter()
            .flatten()
            .filter_map(|p| p.attempt.next_timeout())
            .min()
    }

    /// How the links of every attempt came up.
    pub(crate) fn punch_records(&self) -> &[PunchRecord] {
        &self.punch_log
    }

    /// The link to `peer` is up (authenticated): ends its attempt, if any, in favour of it
    /// (the decider came through the relay), and notes the time.
    pub(super) fn link_up(&mut self, peer: u32, punched: bool) {
        let now = Instant::now();
        if let Some(r) = self
            .punch_log
            .iter_mut()
            .find(|r| r.peer == peer && r.up_after.is_none())
        {
            r.punched = punched;
            r.up_after = Some(now.saturating_duration_since(r.started));
        }
        if punched {
            return;
        }
        let found = self
            .punches
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.peer == peer));
        if let Some(index) = found {
            if let Some(p) = self.punches[index].as_mut() {
                p.attempt.handle_relayed(now);
            }
            // Its only actions now are closes.
            let _ = self.run_punch_actions(index, now);
        }
    }

    /// An event on a punching socket.
    pub(super) fn punch_event(&mut self, token: Token, readable: bool, writable: bool) {
        let Some(Some(p)) = self.punches.get_mut(token.0 - PUNCH_BASE) else {
            return;
        };
        p.stirred = true;
        if let Some(conn) = p.conn.as_mut() {
            conn.readable |= readable;
            conn.writable |= writable;
        }
    }

    /// Moves every attempt forward: connects that completed or failed, handshakes, timeouts.
    pub(super) fn drive_punches(&mut self) -> Result<bool, Error> {
        let mut progressed = false;
        let now = Instant::now();
        for index in 0..self.punches.len() {
            let Some(p) = self.punches[index].as_mut() else {
                continue;
            };
            if let Some(conn) = p.conn.as_mut() {
                if !conn.connected && std::mem::take(&mut p.stirred) {
                    // A connect ended: up, or refused (the peer's NAT had no mapping yet).
                    let failed = !matches!(conn.stream.take_error(), Ok(None))
                        || conn.stream.peer_addr().is_err();
                    if failed {
                        p.attempt.handle_refused(now);
                    } else {
                        conn.connected = true;
                        conn.writable = true;
                        p.attempt.handle_connected(now);
                    }
                    progressed = true;
                }
            }
            if let Some(conn) = p.conn.as_mut().filter(|c| c.connected) {
                let outcome = match conn.opened.elapsed() > HANDSHAKE_TIMEOUT {
                    true => Err(String::new()),
                    false => conn.drive_handshake(&mut self.seen),
                };
                match outcome {
                    Ok(None) => {}
                    Ok(Some((rank, _))) if rank == p.peer => {
                        p.attempt.handle_authenticated(now);
                        progressed = true;
                    }
                    // Another process answered at that address: not our peer.
                    Ok(Some(_)) | Err(_) => {
                        p.attempt.handle_failed(now);
                        progressed = true;
                    }
                }
            }
            p.attempt.handle_timeout(now);
            progressed |= self.run_punch_actions(index, now)?;
        }
        // All over: the tokens (indexes) are free again.
        if self.punches.iter().all(Option::is_none) {
            self.punches.clear();
        }
        Ok(progressed)
    }

    /// Carries out what attempt `index` asks for; once it has ended, its connection becomes the
    /// peer's link (punched) or goes. Returns whether anything was done.
    fn run_punch_actions(&mut self, index: usize, now: Instant) -> Result<bool, Error> {
        let mut done_any = false;
        loop {
            let Some(p) = self.punches[index].as_mut() else {
                return Ok(done_any);
            };
            let Some(action) = p.attempt.poll_action() else {
                break;
            };
            done_any = true;
            match action {
                Action::Connect => {
                    if self.punch_connect(index).is_err() {
                        // Local trouble (the port taken again, no descriptors): as if refused;
                        // the deadline still ends it, and the relay path is as good as before.
                        if let Some(p) = self.punches[index].as_mut() {
                            p.attempt.handle_refused(now);
                        }
                    }
                }
                Action::Close => {
                    if let Some(mut conn) = p.conn.take() {
                        let _ = self.poll.registry().deregister(&mut conn.stream);
                    }
                }
                Action::UseRelay => {
                    // Chosen now, not when the attempt began: a relay seen gone since then
                    // is left out.
                    let (peer, relays) = (p.peer, p.relays.clone());
                    let Some((front, addr)) = self.choose_relay((self.me, peer, 0), &relays) else {
                        return Err(Error::Transport(format!(
                            "rank {}: every relay of rank {peer}'s cluster went away",
                            self.me
                        )));
                    };
                    self.dial((peer, 0), *addr, None, Some(front.as_str()))?;
                }
            }
        }
        let Some(p) = self.punches[index].as_mut() else {
            return Ok(done_any);
        };
        match p.attempt.outcome() {
            None => {}
            Some(Outcome::Punched(_)) => {
                let peer = p.peer;
                if let Some(mut conn) = self.punches[index].take().and_then(|p| p.conn) {
                    if self.conns[peer as usize][0].is_some() {
                        // The relay's connection won the race after all: keep that one.
                        let _ = self.poll.registry().deregister(&mut conn.stream);
                    } else {
                        // Only the socket options: a punched connection is one rail.
                        let _ = self.tune(&conn.stream);
                        self.poll
                            .registry()
                            .reregister(
                                &mut conn.stream,
                                Token(peer as usize),
                                Interest::READABLE | Interest::WRITABLE,
                            )
                            .map_err(|e| io_error("epoll_ctl", e))?;
                        conn.readable = true;
                        conn.compressor = crate::compress::LinkCompressor::new(self.compress);
                        self.conns[peer as usize][0] = Some(conn);
                        self.link_up(peer, true);
                    }
                }
                done_any = true;
            }
            Some(Outcome::Relay { .. }) => {
                self.punches[index] = None;
                done_any = true;
            }
        }
        Ok(done_any)
    }

    /// A new socket on the attempt's port, connecting to the peer's offer.
    fn punch_connect(&mut self, index: usize) -> Result<(), Error> {
        let Some(p) = self.punches[index].as_mut() else {
            return Ok(());
        };
        let socket = bound_socket(p.local).map_err(|e| io_error("punch socket", e))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| io_error("punch socket", e))?;
        match socket.connect(&p.target.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(io_error("punch connect", e)),
        }
        let mut stream = TcpStream::from_std(socket.into());
        let _ = stream.set_nodelay(true);
        self.poll
            .registry()
            .register(
                &mut stream,
                Token(PUNCH_BASE + index),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| io_error("epoll_ctl", e))?;
        let hs = match p.attempt.role() {
            Role::Decider => Handshake::connect(
                self.key.clone(),
                self.job,
                UNIVERSE_CAP,
                self.me,
                p.peer,
                nonce(),
            ),
            Role::Follower => {
                Handshake::accept(self.key.clone(), self.job, UNIVERSE_CAP, self.me, nonce())
            }
        };
        let conn = Conn::new(stream, p.target, Pre::Done, hs, false);
        if let Some(mut old) = p.conn.replace(conn) {
            let _ = self.poll.registry().deregister(&mut old.stream);
        }
        p.stirred = false;
        Ok(())
    }
}
