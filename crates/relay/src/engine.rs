//! The relay's decisions, without I/O: which connections to accept as registrations, which
//! CONNECTs to forward and where, when to give up.
//!
//! The daemon (or a test) drives one [`Relay`]: it reports events with the `handle_*` methods,
//! each taking the current time, and carries out the [`Action`]s that [`Relay::poll_action`]
//! hands out. The relay never opens a socket, reads a clock or sleeps.
//!
//! ```
//! use ferry_relay::engine::{Action, Config, Relay};
//! use ferry_wire::relay::{self, RelayFrame};
//! use ferry_wire::JobKey;
//! use std::time::Instant;
//!
//! let job_key = JobKey([7; 32]);
//! let relay_key = relay::relay_key(&job_key);
//! let mut keys = |job: u64| (job == 1).then(|| relay_key.clone());
//! let mut r = Relay::new(Config::default());
//! let now = Instant::now();
//! // A rank inside registers rank 3 of job 1, listening on port 5000.
//! let reg = r.handle_accept("10.1.0.11:40000".parse().unwrap(), true, [1; 32], now);
//! let _greeting = r.poll_action();
//! r.handle_input(reg, &relay::register(&job_key, &[1; 32], 1, 3, 5000).to_bytes(), &mut keys, now);
//! assert!(matches!(r.poll_action(), Some(Action::Send { .. }))); // REGISTERED
//! assert_eq!(r.registrations(), 1);
//! ```

use ferry_wire::relay::{self, Connect, Incoming, RefuseCode, RelayFrame};
use ferry_wire::JobKey;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Most bytes a client may send after CONNECT before its pair is set up.
pub const MAX_EARLY: usize = 64 << 10;

/// Identifies one TCP connection of the relay; handed out by [`Relay`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// Limits of a relay. Each has a `ferry relay` flag.
#[derive(Debug, Clone)]
pub struct Config {
    /// Relayed connections (being set up or forwarding) one job may have at a time.
    pub max_per_job: usize,
    /// Time from accept until a connection has registered or been paired.
    pub handshake_timeout: Duration,
    /// A forwarded pair with no traffic for this long is closed.
    pub idle_timeout: Duration,
    /// Answer a gated CONNECT by asking the driver for a pinhole ([`Action::OpenPinhole`]):
    /// the front node's kernel then forwards the connection, not the relay.
    pub pinholes: bool,
    /// Connections that have neither registered nor connected (strangers, until they prove
    /// otherwise) kept at a time: one more closes the oldest of them, so a flood of idle
    /// strangers costs bounded memory and never turns away a genuine REGISTER or CONNECT,
    /// which arrives on the newest connection.
    pub max_strangers: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_per_job: 256,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            pinholes: false,
            max_strangers: 1024,
        }
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `bytes` to `conn` (in order with earlier sends).
    Send {
        /// Connection.
        conn: ConnId,
        /// Bytes.
        bytes: Vec<u8>,
    },
    /// Open a TCP connection to `addr` as `conn`, then report [`Relay::handle_dialed`] (or
    /// [`Relay::handle_closed`] if it fails).
    Dial {
        /// The new connection's id.
        conn: ConnId,
        /// Where to.
        addr: SocketAddr,
    },
    /// The pair is set up: write `to_target` to `target` and `to_client` to `client` (bytes
    /// that arrived early), then forward bytes both ways until either side closes. Report
    /// traffic with [`Relay::handle_traffic`].
    Forward {
        /// The outside connection.
        client: ConnId,
        /// The connection to the registered target.
        target: ConnId,
        /// Early bytes of the client.
        to_target: Vec<u8>,
        /// Early bytes of the target.
        to_client: Vec<u8>,
    },
    /// Open a pinhole through which `client`'s address (and only it) reaches `target` (see
    /// [`ferry_wire::relay::OP_FORWARDED`]), then report its port with
    /// [`Relay::handle_pinhole`] (None if it could not be opened: the relay then dials).
    OpenPinhole {
        /// The client's CONNECT; the pinhole lives while it does.
        conn: ConnId,
        /// Where the client's connection comes from.
        client: SocketAddr,
        /// The registered target.
        target: SocketAddr,
    },
    /// Close the pinhole opened for `conn`. Connections already through it stay.
    ClosePinhole {
        /// The client's CONNECT.
        conn: ConnId,
    },
    /// Write `message` to the relay's log (rare events, one line each).
    Log {
        /// The line, without a newline.
        message: String,
    },
    /// Close `conn` once what was sent to it is written. Nothing more is reported for it.
    Close {
        /// Connection.
        conn: ConnId,
        /// Why.
        reason: Reason,
    },
}

/// Why the relay closes a connection (for the log and the counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Refused with this code.
    Refused(RefuseCode),
    /// The other side of the pair went away.
    PeerClosed,
    /// No traffic for the idle timeout.
    Idle,
    /// The relay is shutting down.
    Shutdown,
    /// The oldest connection that had not registered or connected yet, closed to make room
    /// for a newer one.
    Shed,
    /// OBSERVE answered: the connection has served its purpose.
    Observed,
    /// A registrant whose only registrations were taken over by a newer REGISTER of the same
    /// ranks (the rank reconnected, e.g. after a network blip).
    Replaced,
}

#[derive(Debug)]
enum State {
    /// Greeting sent; waiting for REGISTER or CONNECT.
    New,
    /// Registered at least one target; may register more. Exempt from the handshake timeout.
    Registrant { regs: Vec<(u64, u32)> },
    /// A gated CONNECT; the target is being dialled / asked.
    Client { job: u64, target_conn: ConnId },
    /// A gated CONNECT answered (or to be answered) by a pinhole; the client closes it once
    /// through.
    Pinhole {
        job: u64,
        incoming: Incoming,
        target: SocketAddr,
        /// Whether the driver reported the pinhole open (and so must close it).
        open: bool,
    },
    /// Our connection to a target; INCOMING sent once dialled, waiting for ACCEPTED.
    Target {
        job: u64,
        client: ConnId,
        incoming: Incoming,
        dialled: bool,
    },
    /// Forwarding.
    Paired {
        job: u64,
        other: ConnId,
        last: Instant,
    },
}

#[derive(Debug)]
struct Conn {
    peer: Option<SocketAddr>,
    inside: bool,
    nonce: [u8; 32],
    buf: Vec<u8>,
    deadline: Option<Instant>,
    state: State,
}

#[derive(Debug, Clone, Copy)]
struct Registration {
    conn: ConnId,
    addr: SocketAddr,
}

/// Counters of the relay's decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Connections accepted.
    pub accepted: u64,
    /// Targets registered (including re-registrations).
    pub registered: u64,
    /// Pairs set up.
    pub paired: u64,
    /// Connections refused, by code.
    pub refused: HashMap<RefuseCode, u64>,
    /// Pairs closed for being idle.
    pub idle_closed: u64,
    /// Pinholes opened (connections handed to the kernel).
    pub pinholes: u64,
    /// Unauthenticated connections closed to make room ([`Config::max_strangers`] or
    /// [`Relay::shed_stranger`]).
    pub shed: u64,
    /// Registrations taken over by a newer REGISTER of the same (job, rank).
    pub replaced: u64,
    /// OBSERVEs answered (hole punching).
    pub observed: u64,
}

/// The relay's state: registrations, connections being set up and forwarded pairs.
#[derive(Debug)]
pub struct Relay {
    config: Config,
    next_id: u64,
    conns: HashMap<ConnId, Conn>,
    registrations: HashMap<(u64, u32), Registration>,
    per_job: HashMap<u64, usize>,
    /// Connections still in `State::New`, oldest (smallest id) first.
    strangers: BTreeSet<ConnId>,
    actions: VecDeque<Action>,
    counters: Counters,
    shutting_down: bool,
}

impl Relay {
    /// A relay with no connections.
    pub fn new(config: Config) -> Relay {
        Relay {
            config,
            next_id: 1,
            conns: HashMap::new(),
            registrations: HashMap::new(),
            per_job: HashMap::new(),
            strangers: BTreeSet::new(),
            actions: VecDeque::new(),
            counters: Counters::default(),
            shutting_down: false,
        }
    }

    fn new_id(&mut self) -> ConnId {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        id
    }

    /// A connection was accepted from `peer`; `inside` when it comes from the cluster's own
    /// network (only those may register). `nonce` must be fresh random bytes. Returns its id.
    pub fn handle_accept(
        &mut self,
        peer: SocketAddr,
        inside: bool,
        nonce: [u8; 32],
        now: Instant,
    ) -> ConnId {
        let id = self.new_id();
        self.counters.accepted += 1;
        self.conns.insert(
            id,
            Conn {
                peer: Some(peer),
                inside,
                nonce,
                buf: Vec::new(),
                deadline: Some(now + self.config.handshake_timeout),
                state: State::New,
            },
        );
        if self.shutting_down {
            self.refuse(id, RefuseCode::ShuttingDown);
        } else {
            self.send(id, RelayFrame::Greeting { relay_nonce: nonce });
            self.strangers.insert(id);
            while self.strangers.len() > self.config.max_strangers.max(1) {
                self.shed_stranger();
            }
        }
        id
    }

    /// Closes the oldest connection that has neither registered nor connected, if there is
    /// one: the driver calls it when its descriptors run out, so that the connection it is
    /// about to accept (perhaps a genuine REGISTER) takes that one's place. Returns whether one
    /// was closed.
    pub fn shed_stranger(&mut self) -> bool {
        let Some(oldest) = self.strangers.pop_first() else {
            return false;
        };
        self.counters.shed += 1;
        self.close(oldest, Reason::Shed);
        true
    }

    /// Drops `conn` from the strangers once it has left `State::New` (or is gone).
    fn settle(&mut self, conn: ConnId) {
        if !matches!(self.conns.get(&conn).map(|c| &c.state), Some(State::New)) {
            self.strangers.remove(&conn);
        }
    }

    fn send(&mut self, conn: ConnId, frame: RelayFrame) {
        self.actions.push_back(Action::Send {
            conn,
            bytes: frame.to_bytes(),
        });
    }

    /// Sends REFUSED and closes; forgets the connection and whatever depends on it.
    fn refuse(&mut self, conn: ConnId, code: RefuseCode) {
        *self.counters.refused.entry(code).or_default() += 1;
        self.send(conn, RelayFrame::Refused(code));
        self.close(conn, Reason::Refused(code));
    }

    /// Closes `conn` and undoes its state; the other side of a pair or dial is closed too.
    fn close(&mut self, conn: ConnId, reason: Reason) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.actions.push_back(Action::Close { conn, reason });
        self.forget(conn, c);
    }

    fn forget(&mut self, conn: ConnId, c: Conn) {
        self.strangers.remove(&conn);
        match c.state {
            State::New => {}
            State::Registrant { regs } => {
                for key in regs {
                    if self.registrations.get(&key).is_some_and(|r| r.conn == conn) {
                        self.registrations.remove(&key);
                    }
                }
            }
            State::Client { job, target_conn } => {
                self.release(job);
                self.close(target_conn, Reason::PeerClosed);
            }
            State::Pinhole { job, open, .. } => {
                self.release(job);
                if open {
                    self.actions.push_back(Action::ClosePinhole { conn });
                }
            }
            State::Target { client, .. } => {
                // The client learns why.
                if self.conns.contains_key(&client) {
                    self.refuse(client, RefuseCode::Unreachable);
                }
            }
            State::Paired { job, other, .. } => {
                if matches!(
                    self.conns.get(&other).map(|o| &o.state),
                    Some(State::Paired { .. })
                ) {
                    // Count the pair once, on the client side (either side's close ends it).
                    self.release(job);
                }
                self.close(other, Reason::PeerClosed);
            }
        }
    }

    fn release(&mut self, job: u64) {
        if let Some(n) = self.per_job.get_mut(&job) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_job.remove(&job);
            }
        }
    }

    /// Bytes arrived on `conn` before it is forwarded. `keys` gives a job's relay key (None for
    /// an unknown job). Bytes on forwarded connections are the driver's business, not this.
    pub fn handle_input(
        &mut self,
        conn: ConnId,
        bytes: &[u8],
        keys: &mut dyn FnMut(u64) -> Option<JobKey>,
        now: Instant,
    ) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.buf.extend_from_slice(bytes);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            match &c.state {
                // Bytes after CONNECT wait for the pair (early data of the end-to-end handshake).
                State::Client { .. } if c.buf.len() > MAX_EARLY => {
                    return self.refuse(conn, RefuseCode::Malformed)
                }
                State::Client { .. } | State::Paired { .. } => return,
                // Nothing more is due from a client sent through a pinhole.
                State::Pinhole { .. } if !c.buf.is_empty() => {
                    return self.refuse(conn, RefuseCode::Malformed)
                }
                State::Pinhole { .. } => return,
                State::Target { dialled: false, .. } => return,
                _ => {}
            }
            match RelayFrame::decode(&c.buf) {
                Ok(None) => {
                    if c.buf.len() > relay::MAX_FRAME {
                        return self.refuse(conn, RefuseCode::Malformed);
                    }
                    return;
                }
                Err(_) => return self.refuse(conn, RefuseCode::Malformed),
                Ok(Some((frame, used))) => {
                    c.buf.drain(..used);
                    self.on_frame(conn, frame, keys, now);
                    self.settle(conn);
                }
            }
        }
    }

    fn on_frame(
        &mut self,
        conn: ConnId,
        frame: RelayFrame,
        keys: &mut dyn FnMut(u64) -> Option<JobKey>,
        now: Instant,
    ) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match (&c.state, frame) {
            (
                State::New | State::Registrant { .. },
                RelayFrame::Register {
                    job,
                    rank,
                    port,
                    mac,
                },
            ) => {
                if !c.inside {
                    return self.refuse(conn, RefuseCode::NotInside);
                }
                let Some(key) = keys(job) else {
                    return self.refuse(conn, RefuseCode::UnknownJob);
                };
                if !relay::verify_register(&key, &c.nonce, job, rank, port, &mac) {
                    return self.refuse(conn, RefuseCode::BadMac);
                }
                let Some(peer) = c.peer else {
                    return self.refuse(conn, RefuseCode::Malformed);
                };
                // The target is the registrant's own address: a job member cannot point the
                // relay at another host.
                let addr = SocketAddr::new(peer.ip(), port);
                let old = self
                    .registrations
                    .insert((job, rank), Registration { conn, addr });
                self.counters.registered += 1;
                if let Some(old) = old.filter(|old| old.conn != conn) {
                    // A valid REGISTER proves the rank holds the job key: it reconnected (a
                    // network blip, a restart) and its old connection is likely dead but not
                    // yet known to be. Refusing would lock it out until that one closes, which
                    // a registrant's connection never does by timeout; so the newer one wins.
                    self.replace_registration(old.conn, (job, rank), addr);
                }
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.deadline = None;
                    match &mut c.state {
                        State::Registrant { regs } if regs.contains(&(job, rank)) => {}
                        State::Registrant { regs } => regs.push((job, rank)),
                        state => {
                            *state = State::Registrant {
                                regs: vec![(job, rank)],
                            }
                        }
                    }
                }
                self.send(conn, RelayFrame::Registered { job, rank });
            }
            (State::New, RelayFrame::Connect(connect)) => self.on_connect(conn, connect, keys, now),
            (
                State::New,
                RelayFrame::Observe {
                    job,
                    src,
                    nonce,
                    gate,
                },
            ) => {
                // Any rank of a job the relay serves may ask, from inside or out: the answer is
                // only the address its own connection came from.
                let Some(key) = keys(job) else {
                    return self.refuse(conn, RefuseCode::UnknownJob);
                };
                if !relay::verify_observe(&key, &c.nonce, job, src, &nonce, &gate) {
                    return self.refuse(conn, RefuseCode::BadMac);
                }
                let Some(peer) = c.peer else {
                    return self.refuse(conn, RefuseCode::Malformed);
                };
                self.counters.observed += 1;
                self.send(conn, relay::observed(&key, &nonce, peer));
                self.close(conn, Reason::Observed);
            }
            (State::Target { dialled: true, .. }, RelayFrame::Accepted) => self.pair(conn, now),
            (
                State::Target {
                    dialled: true,
                    client,
                    ..
                },
                RelayFrame::Refused(code),
            ) => {
                // The target's verdict goes to the client as it is (bad MAC, replay, ...).
                let client = *client;
                self.conns.remove(&conn);
                self.actions.push_back(Action::Close {
                    conn,
                    reason: Reason::Refused(code),
                });
                self.refuse(client, code);
            }
            _ => self.refuse(conn, RefuseCode::Malformed),
        }
    }

    /// `old` lost registration `key` to a newer REGISTER from `addr`: logged, and `old`
    /// closed once it holds no registration any more.
    fn replace_registration(&mut self, old: ConnId, key: (u64, u32), addr: SocketAddr) {
        self.counters.replaced += 1;
        let mut now_empty = false;
        if let Some(State::Registrant { regs }) = self.conns.get_mut(&old).map(|c| &mut c.state) {
            regs.retain(|&r| r != key);
            now_empty = regs.is_empty();
        }
        let (job, rank) = key;
        self.actions.push_back(Action::Log {
            message: format!(
                "job {job:#x} rank {rank} registered again from {addr}: the newer registration replaces the older one{}",
                if now_empty { ", whose connection is closed" } else { "" }
            ),
        });
        if now_empty {
            self.close(old, Reason::Replaced);
        }
    }

    fn on_connect(
        &mut self,
        conn: ConnId,
        connect: Connect,
        keys: &mut dyn FnMut(u64) -> Option<JobKey>,
        now: Instant,
    ) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let Some(key) = keys(connect.job) else {
            return self.refuse(conn, RefuseCode::UnknownJob);
        };
        if !relay::verify_gate(&key, &c.nonce, &connect) {
            return self.refuse(conn, RefuseCode::BadMac);
        }
        let client = c.peer;
        let Some(reg) = self
            .registrations
            .get(&(connect.job, connect.target))
            .copied()
        else {
            return self.refuse(conn, RefuseCode::UnknownTarget);
        };
        let count = self.per_job.get(&connect.job).copied().unwrap_or(0);
        if count >= self.config.max_per_job {
            return self.refuse(conn, RefuseCode::Limit);
        }
        self.per_job.insert(connect.job, count + 1);
        let incoming = Incoming {
            job: connect.job,
            src: connect.src,
            target: connect.target,
            nonce: connect.nonce,
            e2e: connect.e2e,
        };
        match client {
            Some(client) if self.config.pinholes => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.state = State::Pinhole {
                        job: connect.job,
                        incoming,
                        target: reg.addr,
                        open: false,
                    };
                }
                self.actions.push_back(Action::OpenPinhole {
                    conn,
                    client,
                    target: reg.addr,
                });
            }
            _ => self.dial(conn, incoming, reg.addr, now),
        }
    }

    /// Dials the target for `conn`'s gated CONNECT, to pass `incoming` on.
    fn dial(&mut self, conn: ConnId, incoming: Incoming, addr: SocketAddr, now: Instant) {
        let job = incoming.job;
        let target_conn = self.new_id();
        self.conns.insert(
            target_conn,
            Conn {
                peer: Some(addr),
                inside: true,
                nonce: [0; 32],
                buf: Vec::new(),
                deadline: Some(now + self.config.handshake_timeout),
                state: State::Target {
                    job,
                    client: conn,
                    incoming,
                    dialled: false,
                },
            },
        );
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = State::Client { job, target_conn };
        }
        self.actions.push_back(Action::Dial {
            conn: target_conn,
            addr,
        });
    }

    /// The pinhole asked for by [`Action::OpenPinhole`] is open at `port` of the address the
    /// client dialled, or could not be opened (None): then the relay dials the target and
    /// forwards itself, as without pinholes.
    pub fn handle_pinhole(&mut self, conn: ConnId, port: Option<u16>, now: Instant) {
        let Some(c) = self.conns.get_mut(&conn) else {
            // The client went before the pinhole was open: close it again.
            if port.is_some() {
                self.actions.push_back(Action::ClosePinhole { conn });
            }
            return;
        };
        let State::Pinhole {
            incoming,
            target,
            open,
            ..
        } = &mut c.state
        else {
            return;
        };
        match port {
            Some(port) => {
                *open = true;
                let rank = incoming.target;
                // The pinhole is open only for as long as a handshake may take.
                c.deadline = Some(now + self.config.handshake_timeout);
                self.counters.pinholes += 1;
                self.send(conn, RelayFrame::Forwarded { target: rank, port });
            }
            None => {
                let (incoming, target) = (incoming.clone(), *target);
                self.dial(conn, incoming, target, now);
            }
        }
    }

    /// The connection opened for an [`Action::Dial`] is up.
    pub fn handle_dialed(
        &mut self,
        conn: ConnId,
        keys: &mut dyn FnMut(u64) -> Option<JobKey>,
        now: Instant,
    ) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let State::Target {
            incoming, dialled, ..
        } = &mut c.state
        else {
            return;
        };
        *dialled = true;
        let frame = RelayFrame::Incoming(incoming.clone());
        self.send(conn, frame);
        // Bytes the target may have sent already.
        self.handle_input(conn, &[], keys, now);
    }

    fn pair(&mut self, target: ConnId, now: Instant) {
        let Some(t) = self.conns.get_mut(&target) else {
            return;
        };
        let State::Target {
            job,
            client,
            incoming,
            ..
        } = &t.state
        else {
            return;
        };
        let (job, client, rank) = (*job, *client, incoming.target);
        let to_client = std::mem::take(&mut t.buf);
        t.deadline = None;
        t.state = State::Paired {
            job,
            other: client,
            last: now,
        };
        let Some(c) = self.conns.get_mut(&client) else {
            return self.close(target, Reason::PeerClosed);
        };
        let to_target = std::mem::take(&mut c.buf);
        c.deadline = None;
        c.state = State::Paired {
            job,
            other: target,
            last: now,
        };
        self.counters.paired += 1;
        self.send(client, RelayFrame::Established { target: rank });
        self.actions.push_back(Action::Forward {
            client,
            target,
            to_target,
            to_client,
        });
    }

    /// Bytes moved on a forwarded connection (either side): it is not idle.
    pub fn handle_traffic(&mut self, conn: ConnId, now: Instant) {
        let other = match self.conns.get_mut(&conn) {
            Some(Conn {
                state: State::Paired { last, other, .. },
                ..
            }) => {
                *last = now;
                *other
            }
            _ => return,
        };
        if let Some(Conn {
            state: State::Paired { last, .. },
            ..
        }) = self.conns.get_mut(&other)
        {
            *last = now;
        }
    }

    /// `conn` was closed by the peer or failed (also a failed dial). Its pair partner, pending
    /// target or waiting client is closed as well.
    pub fn handle_closed(&mut self, conn: ConnId, _now: Instant) {
        if let Some(c) = self.conns.remove(&conn) {
            self.forget(conn, c);
        }
    }

    /// Closes what has timed out by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut expired = Vec::new();
        for (&id, c) in &self.conns {
            if c.deadline.is_some_and(|d| d <= now) {
                expired.push((id, false));
            } else if let State::Paired { last, .. } = c.state {
                if now.saturating_duration_since(last) >= self.config.idle_timeout {
                    expired.push((id, true));
                }
            }
        }
        expired.sort();
        for (id, idle) in expired {
            if !self.conns.contains_key(&id) {
                continue;
            }
            if idle {
                self.counters.idle_closed += 1;
                self.close(id, Reason::Idle);
            } else {
                self.refuse(id, RefuseCode::Timeout);
            }
        }
    }

    /// The earliest time at which [`Relay::handle_timeout`] has something to do.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter_map(|c| match c.state {
                State::Paired { last, .. } => Some(last + self.config.idle_timeout),
                _ => c.deadline,
            })
            .min()
    }

    /// Stops taking connections: refuses the ones being set up, closes every other.
    pub fn shutdown(&mut self) {
        self.shutting_down = true;
        let mut ids: Vec<ConnId> = self.conns.keys().copied().collect();
        ids.sort();
        for id in ids {
            let Some(c) = self.conns.get(&id) else {
                continue;
            };
            if matches!(
                c.state,
                State::New | State::Client { .. } | State::Pinhole { .. }
            ) {
                self.refuse(id, RefuseCode::ShuttingDown);
            } else {
                self.close(id, Reason::Shutdown);
            }
        }
    }

    /// The next thing to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Targets registered now.
    pub fn registrations(&self) -> usize {
        self.registrations.len()
    }

    /// Connections known now (being set up, registrants and forwarded).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Relayed connections now (being set up or forwarding), all jobs.
    pub fn relayed(&self) -> usize {
        self.per_job.values().sum()
    }

    /// Counters since start.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The peer address of `conn` (for the log).
    pub fn peer_of(&self, conn: ConnId) -> Option<IpAddr> {
        self.conns.get(&conn).and_then(|c| c.peer).map(|p| p.ip())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_wire::relay::{connect, register};

    const JOB: u64 = 0x42;

    struct Harness {
        relay: Relay,
        job_key: JobKey,
        now: Instant,
    }

    impl Harness {
        fn new(config: Config) -> Harness {
            Harness {
                relay: Relay::new(config),
                job_key: JobKey([9; 32]),
                now: Instant::now(),
            }
        }

        fn input(&mut self, conn: ConnId, bytes: &[u8]) {
            let rk = relay::relay_key(&self.job_key);
            self.relay.handle_input(
                conn,
                bytes,
                &mut |j| (j == JOB).then(|| rk.clone()),
                self.now,
            );
        }

        fn actions(&mut self) -> Vec<Action> {
            std::iter::from_fn(|| self.relay.poll_action()).collect()
        }

        fn accept(&mut self, ip: &str, inside: bool, nonce: u8) -> ConnId {
            let conn = self.relay.handle_accept(
                format!("{ip}:40000").parse().unwrap(),
                inside,
                [nonce; 32],
                self.now,
            );
            let greeting = RelayFrame::Greeting {
                relay_nonce: [nonce; 32],
            };
            let actions = self.actions();
            assert_eq!(
                actions[..1],
                [Action::Send {
                    conn,
                    bytes: greeting.to_bytes()
                }]
            );
            // Beyond the cap, the oldest stranger goes.
            assert!(
                actions[1..].iter().all(|a| matches!(
                    a,
                    Action::Close {
                        reason: Reason::Shed,
                        ..
                    }
                )),
                "{actions:?}"
            );
            conn
        }

        /// Registers `rank` from 10.1.0.11 on port 5000 + rank.
        fn register(&mut self, rank: u32) -> ConnId {
            let conn = self.accept("10.1.0.11", true, 1);
            let frame = register(&self.job_key, &[1; 32], JOB, rank, 5000 + rank as u16);
            self.input(conn, &frame.to_bytes());
            assert_eq!(
                self.actions(),
                vec![send(conn, RelayFrame::Registered { job: JOB, rank })]
            );
            conn
        }

        /// A client CONNECTs to `target`; returns (client, target connection, dial address).
        fn connect(&mut self, target: u32, nonce: u8) -> (ConnId, ConnId, SocketAddr) {
            let client = self.accept("198.18.0.5", false, nonce);
            let frame = connect(&self.job_key, &[nonce; 32], JOB, 0, target, [nonce; 32]);
            self.input(client, &frame.to_bytes());
            match self.actions().as_slice() {
                [Action::Dial { conn, addr }] => (client, *conn, *addr),
                other => panic!("expected a dial, got {other:?}"),
            }
        }

        fn refused(&mut self, conn: ConnId, code: RefuseCode) -> Vec<Action> {
            vec![
                send(conn, RelayFrame::Refused(code)),
                Action::Close {
                    conn,
                    reason: Reason::Refused(code),
                },
            ]
        }
    }

    fn send(conn: ConnId, frame: RelayFrame) -> Action {
        Action::Send {
            conn,
            bytes: frame.to_bytes(),
        }
    }

    /// With pinholes, a gated CONNECT asks for one; the pinhole lives until the client closes
    /// its CONNECT (or the handshake timeout), and a pinhole that cannot be made falls back to
    /// the relay dialling the target itself.
    #[test]
    fn pinhole_flow_fallback_timeout_and_early_leave() {
        let config = Config {
            pinholes: true,
            ..Config::default()
        };
        let mut h = Harness::new(config.clone());
        h.register(3);
        let ask = |h: &mut Harness, nonce: u8| {
            let client = h.accept("198.18.0.5", false, nonce);
            let frame = connect(&h.job_key, &[nonce; 32], JOB, 0, 3, [nonce; 32]);
            h.input(client, &frame.to_bytes());
            assert_eq!(
                h.actions(),
                vec![Action::OpenPinhole {
                    conn: client,
                    client: "198.18.0.5:40000".parse().unwrap(),
                    target: "10.1.0.11:5003".parse().unwrap(),
                }]
            );
            client
        };
        // Opened, answered, closed with the client's CONNECT.
        let client = ask(&mut h, 7);
        assert_eq!(
            h.relay.relayed(),
            1,
            "a pinhole counts against the job's limit"
        );
        h.relay.handle_pinhole(client, Some(41000), h.now);
        assert_eq!(
            h.actions(),
            vec![send(
                client,
                RelayFrame::Forwarded {
                    target: 3,
                    port: 41000
                }
            )]
        );
        assert_eq!(h.relay.counters().pinholes, 1);
        h.relay.handle_closed(client, h.now);
        assert_eq!(h.actions(), vec![Action::ClosePinhole { conn: client }]);
        assert_eq!(h.relay.relayed(), 0);

        // No pinhole to be had: the relay dials as without pinholes.
        let client = ask(&mut h, 8);
        h.relay.handle_pinhole(client, None, h.now);
        let acts = h.actions();
        let [Action::Dial { addr, .. }] = acts.as_slice() else {
            panic!("{acts:?}")
        };
        assert_eq!(*addr, "10.1.0.11:5003".parse().unwrap());
        h.relay.handle_closed(client, h.now);
        h.actions();

        // A client that never closes: the pinhole goes at the handshake timeout.
        let client = ask(&mut h, 9);
        h.relay.handle_pinhole(client, Some(41001), h.now);
        h.actions();
        h.relay
            .handle_timeout(h.now + config.handshake_timeout + Duration::from_millis(1));
        let mut expected = h.refused(client, RefuseCode::Timeout);
        expected.push(Action::ClosePinhole { conn: client });
        assert_eq!(h.actions(), expected);

        // Bytes after CONNECT are not due: refused, pinhole closed.
        let client = ask(&mut h, 10);
        h.relay.handle_pinhole(client, Some(41002), h.now);
        h.actions();
        h.input(client, b"x");
        let mut expected = h.refused(client, RefuseCode::Malformed);
        expected.push(Action::ClosePinhole { conn: client });
        assert_eq!(h.actions(), expected);

        // The client left while the pinhole was being made: it is closed as soon as reported.
        let client = ask(&mut h, 11);
        h.relay.handle_closed(client, h.now);
        assert!(h.actions().is_empty());
        h.relay.handle_pinhole(client, Some(41003), h.now);
        assert_eq!(h.actions(), vec![Action::ClosePinhole { conn: client }]);
        assert_eq!(h.relay.relayed(), 0);
        assert_eq!(h.relay.connections(), 1, "only the registrant is left");
    }

    #[test]
    fn full_relay_flow_with_early_bytes() {
        let mut h = Harness::new(Config::default());
        h.register(3);
        assert_eq!(h.relay.registrations(), 1);
        let (client, target, addr) = h.connect(3, 7);
        assert_eq!(addr, "10.1.0.11:5003".parse().unwrap());
        // The client pipelines its end-to-end HELLO; it waits in the relay.
        h.input(client, b"hello-bytes");
        assert!(h.actions().is_empty());
        let rk = relay::relay_key(&h.job_key);
        h.relay
            .handle_dialed(target, &mut |_| Some(rk.clone()), h.now);
        let acts = h.actions();
        let [Action::Send { conn, bytes }] = acts.as_slice() else {
            panic!("{acts:?}")
        };
        assert_eq!(*conn, target);
        let Ok(Some((RelayFrame::Incoming(inc), _))) = RelayFrame::decode(bytes) else {
            panic!()
        };
        let mut seen = relay::ReplayGuard::default();
        assert_eq!(
            relay::verify_incoming(&h.job_key, JOB, 3, &inc, &mut seen),
            Ok(())
        );
        let mut accepted = RelayFrame::Accepted.to_bytes();
        accepted.extend_from_slice(b"early");
        h.input(target, &accepted);
        assert_eq!(
            h.actions(),
            vec![
                send(client, RelayFrame::Established { target: 3 }),
                Action::Forward {
                    client,
                    target,
                    to_target: b"hello-bytes".to_vec(),
                    to_client: b"early".to_vec(),
                },
            ]
        );
        assert_eq!(h.relay.relayed(), 1);
        assert_eq!(h.relay.counters().paired, 1);
        // Either side closing ends the pair and frees the job's slot.
        h.relay.handle_closed(target, h.now);
        assert_eq!(
            h.actions(),
            vec![Action::Close {
                conn: client,
                reason: Reason::PeerClosed
            }]
        );
        assert_eq!(h.relay.relayed(), 0);
        assert_eq!(h.relay.registrations(), 1);
    }

    #[test]
    fn observe_is_answered_with_the_client_address_and_closed() {
        let mut h = Harness::new(Config::default());
        let c = h.accept("198.18.0.5", false, 4);
        let key = h.job_key.clone();
        let ask = relay::observe(&key, &[4; 32], JOB, 2, [9; 32]);
        h.input(c, &ask.to_bytes());
        let actions = h.actions();
        let Some(Action::Send { bytes, .. }) = actions.first() else {
            panic!("no answer: {actions:?}")
        };
        let Ok(Some((RelayFrame::Observed { addr, mac }, _))) = RelayFrame::decode(bytes) else {
            panic!("not OBSERVED")
        };
        assert_eq!(addr.ip().to_string(), "198.18.0.5");
        assert!(relay::verify_observed(&key, &[9; 32], &addr, &mac));
        assert!(matches!(
            actions.get(1),
            Some(Action::Close {
                reason: Reason::Observed,
                ..
            })
        ));
        assert_eq!(h.relay.counters().observed, 1);
        // Under another job's key, or an unknown job: refused.
        let c = h.accept("198.18.0.5", false, 5);
        h.input(
            c,
            &relay::observe(&JobKey([8; 32]), &[5; 32], JOB, 2, [9; 32]).to_bytes(),
        );
        assert_eq!(h.actions(), h.refused(c, RefuseCode::BadMac));
        let c = h.accept("198.18.0.5", false, 6);
        h.input(
            c,
            &relay::observe(&key, &[6; 32], JOB + 1, 2, [9; 32]).to_bytes(),
        );
        assert_eq!(h.actions(), h.refused(c, RefuseCode::UnknownJob));
    }

    #[test]
    fn registration_rules() {
        let mut h = Harness::new(Config::default());
        // From outside.
        let c = h.accept("198.18.0.5", false, 1);
        h.input(c, &register(&h.job_key, &[1; 32], JOB, 0, 5000).to_bytes());
        let want = h.refused(c, RefuseCode::NotInside);
        assert_eq!(h.actions(), want);
        // Unknown job.
        let c = h.accept("10.1.0.11", true, 1);
        h.input(
            c,
            &register(&h.job_key, &[1; 32], JOB + 1, 0, 5000).to_bytes(),
        );
        let want = h.refused(c, RefuseCode::UnknownJob);
        assert_eq!(h.actions(), want);
        // Wrong key, or a MAC over another connection's nonce.
        let c = h.accept("10.1.0.11", true, 1);
        h.input(
            c,
            &register(&JobKey([1; 32]), &[1; 32], JOB, 0, 5000).to_bytes(),
        );
        let want = h.refused(c, RefuseCode::BadMac);
        assert_eq!(h.actions(), want);
        let c = h.accept("10.1.0.11", true, 2);
        h.input(c, &register(&h.job_key, &[1; 32], JOB, 0, 5000).to_bytes());
        let want = h.refused(c, RefuseCode::BadMac);
        assert_eq!(h.actions(), want);
        assert_eq!(h.relay.registrations(), 0);
        // A registration ends with its connection.
        let reg = h.register(0);
        h.relay.handle_closed(reg, h.now);
        assert_eq!(h.relay.registrations(), 0);
        assert!(h.actions().is_empty());
    }

    /// Idle strangers beyond `max_strangers` shed the oldest of them; registered and
    /// connecting connections are never shed, and a genuine REGISTER and CONNECT still get
    /// through while strangers keep coming.
    #[test]
    fn strangers_beyond_the_cap_shed_the_oldest_and_genuine_traffic_gets_through() {
        let mut h = Harness::new(Config {
            max_strangers: 4,
            ..Config::default()
        });
        let reg = h.register(1);
        let strangers: Vec<ConnId> = (0..4).map(|i| h.accept("198.18.0.9", false, i)).collect();
        // The fifth stranger closes the first.
        let conn = h
            .relay
            .handle_accept("198.18.0.9:1".parse().unwrap(), false, [5; 32], h.now);
        assert_eq!(
            h.actions(),
            vec![
                send(
                    conn,
                    RelayFrame::Greeting {
                        relay_nonce: [5; 32]
                    }
                ),
                Action::Close {
                    conn: strangers[0],
                    reason: Reason::Shed
                }
            ]
        );
        assert_eq!(h.relay.counters().shed, 1);
        // Strangers keep coming, and genuine traffic on the newest connections goes through:
        // a second rank registers, a client connects to rank 1.
        for i in 0..20 {
            h.relay
                .handle_accept("198.18.0.9:2".parse().unwrap(), false, [i; 32], h.now);
        }
        h.actions();
        h.register(2);
        let (_client, _target, addr) = h.connect(1, 7);
        assert_eq!(addr, "10.1.0.11:5001".parse().unwrap());
        // The registrant, the new registrant and the client were never shed; the driver's
        // shed_stranger takes strangers only.
        for _ in 0..10 {
            h.relay.shed_stranger();
        }
        assert!(!h.relay.shed_stranger(), "only strangers are shed");
        let closed: Vec<ConnId> = h
            .actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Close { conn, reason } => {
                    assert_eq!(reason, Reason::Shed);
                    Some(conn)
                }
                _ => None,
            })
            .collect();
        // Four strangers at most; the last two accepts left three once they proved genuine.
        assert_eq!(closed.len(), 3);
        assert!(!closed.contains(&reg));
        assert_eq!(h.relay.registrations(), 2);
    }

    /// A rank that registers again (it reconnected after a network blip) replaces its older
    /// registration: logged, and the older connection closed once it holds nothing else.
    #[test]
    fn a_second_register_of_a_rank_replaces_the_first_and_closes_it() {
        let mut h = Harness::new(Config::default());
        let old = h.register(3);
        let conn = h.accept("10.1.0.12", true, 2);
        let frame = register(&h.job_key, &[2; 32], JOB, 3, 6000);
        h.input(conn, &frame.to_bytes());
        let actions = h.actions();
        assert!(
            matches!(&actions[0], Action::Log { message } if message.contains("rank 3 registered again from 10.1.0.12:6000")),
            "{actions:?}"
        );
        assert_eq!(
            actions[1..],
            [
                Action::Close {
                    conn: old,
                    reason: Reason::Replaced
                },
                send(conn, RelayFrame::Registered { job: JOB, rank: 3 }),
            ]
        );
        assert_eq!(h.relay.registrations(), 1);
        assert_eq!(h.relay.counters().replaced, 1);
        // CONNECTs now reach the new address; the old connection's close changes nothing.
        h.relay.handle_closed(old, h.now);
        let (_, _, addr) = h.connect(3, 8);
        assert_eq!(addr, "10.1.0.12:6000".parse().unwrap());
        // Registering the same rank again on the same connection is no replacement.
        h.input(
            conn,
            &register(&h.job_key, &[2; 32], JOB, 3, 6000).to_bytes(),
        );
        assert_eq!(
            h.actions(),
            vec![send(conn, RelayFrame::Registered { job: JOB, rank: 3 })]
        );
        assert_eq!(h.relay.counters().replaced, 1);
    }

    #[test]
    fn strangers_are_refused() {
        let mut h = Harness::new(Config::default());
        h.register(1);
        // Garbage, at the first wrong byte.
        let c = h.accept("198.18.0.5", false, 3);
        h.input(c, b"GET / HTTP/1.1\r\n");
        let want = h.refused(c, RefuseCode::Malformed);
        assert_eq!(h.actions(), want);
        // Wrong key.
        let c = h.accept("198.18.0.5", false, 3);
        h.input(
            c,
            &connect(&JobKey([1; 32]), &[3; 32], JOB, 0, 1, [3; 32]).to_bytes(),
        );
        let want = h.refused(c, RefuseCode::BadMac);
        assert_eq!(h.actions(), want);
        // A recorded CONNECT replayed on a new connection (new relay nonce).
        let old = connect(&h.job_key, &[3; 32], JOB, 0, 1, [3; 32]).to_bytes();
        let c = h.accept("198.18.0.5", false, 4);
        h.input(c, &old);
        let want = h.refused(c, RefuseCode::BadMac);
        assert_eq!(h.actions(), want);
        // Unregistered target, unknown job.
        let c = h.accept("198.18.0.5", false, 5);
        h.input(
            c,
            &connect(&h.job_key, &[5; 32], JOB, 0, 2, [5; 32]).to_bytes(),
        );
        let want = h.refused(c, RefuseCode::UnknownTarget);
        assert_eq!(h.actions(), want);
        let c = h.accept("198.18.0.5", false, 5);
        h.input(
            c,
            &connect(&h.job_key, &[5; 32], JOB + 1, 0, 1, [5; 32]).to_bytes(),
        );
        let want = h.refused(c, RefuseCode::UnknownJob);
        assert_eq!(h.actions(), want);
        // A frame that is valid but out of place.
        let c = h.accept("198.18.0.5", false, 5);
        h.input(c, &RelayFrame::Accepted.to_bytes());
        let want = h.refused(c, RefuseCode::Malformed);
        assert_eq!(h.actions(), want);
        assert_eq!(h.relay.connections(), 1, "only the registrant is left");
        assert_eq!(h.relay.counters().refused[&RefuseCode::BadMac], 2);
    }

    #[test]
    fn target_verdict_and_failed_dial_reach_the_client() {
        let mut h = Harness::new(Config::default());
        h.register(1);
        let (client, target, _) = h.connect(1, 7);
        let rk = relay::relay_key(&h.job_key);
        h.relay
            .handle_dialed(target, &mut |_| Some(rk.clone()), h.now);
        h.actions();
        h.input(target, &RelayFrame::Refused(RefuseCode::Replay).to_bytes());
        let mut want = vec![Action::Close {
            conn: target,
            reason: Reason::Refused(RefuseCode::Replay),
        }];
        want.extend(h.refused(client, RefuseCode::Replay));
        assert_eq!(h.actions(), want);
        let (client, target, _) = h.connect(1, 8);
        h.relay.handle_closed(target, h.now);
        let want = h.refused(client, RefuseCode::Unreachable);
        assert_eq!(h.actions(), want);
        assert_eq!(h.relay.relayed(), 0);
    }

    #[test]
    fn per_job_limit() {
        let mut h = Harness::new(Config {
            max_per_job: 2,
            ..Config::default()
        });
        h.register(1);
        let (first, _, _) = h.connect(1, 7);
        h.connect(1, 8);
        let c = h.accept("198.18.0.5", false, 9);
        h.input(
            c,
            &connect(&h.job_key, &[9; 32], JOB, 0, 1, [9; 32]).to_bytes(),
        );
        let want = h.refused(c, RefuseCode::Limit);
        assert_eq!(h.actions(), want);
        // A slot frees when a client goes away.
        h.relay.handle_closed(first, h.now);
        h.actions();
        h.connect(1, 10);
    }

    #[test]
    fn handshake_and_idle_timeouts() {
        let mut h = Harness::new(Config {
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            ..Config::default()
        });
        let reg = h.register(1);
        let silent = h.accept("198.18.0.5", false, 2);
        assert_eq!(
            h.relay.next_timeout(),
            Some(h.now + Duration::from_secs(10))
        );
        h.now += Duration::from_secs(10);
        h.relay.handle_timeout(h.now);
        let want = h.refused(silent, RefuseCode::Timeout);
        assert_eq!(h.actions(), want);
        assert_eq!(h.relay.connections(), 1, "the registration stays");
        let _ = reg;

        let (client, target, _) = h.connect(1, 7);
        let rk = relay::relay_key(&h.job_key);
        h.relay
            .handle_dialed(target, &mut |_| Some(rk.clone()), h.now);
        h.input(target, &RelayFrame::Accepted.to_bytes());
        h.actions();
        h.now += Duration::from_secs(59);
        h.relay.handle_traffic(target, h.now);
        h.now += Duration::from_secs(59);
        h.relay.handle_timeout(h.now);
        assert!(h.actions().is_empty(), "traffic kept it alive");
        h.now += Duration::from_secs(1);
        h.relay.handle_timeout(h.now);
        let acts = h.actions();
        assert_eq!(acts.len(), 2, "{acts:?}");
        assert!(acts.contains(&Action::Close {
            conn: client,
            reason: Reason::Idle
        }));
        assert_eq!(h.relay.counters().idle_closed, 1);
        assert_eq!(h.relay.relayed(), 0);
    }

    #[test]
    fn shutdown_refuses_and_closes_everything() {
        let mut h = Harness::new(Config::default());
        let reg = h.register(1);
        let pending = h.accept("198.18.0.5", false, 2);
        h.relay.shutdown();
        let mut want = vec![Action::Close {
            conn: reg,
            reason: Reason::Shutdown,
        }];
        want.extend(h.refused(pending, RefuseCode::ShuttingDown));
        assert_eq!(h.actions(), want);
        let late = h
            .relay
            .handle_accept("198.18.0.5:1".parse().unwrap(), false, [0; 32], h.now);
        let want = h.refused(late, RefuseCode::ShuttingDown);
        assert_eq!(h.actions(), want);
    }

    /// The three sans-IO machines of `ferry_wire::relay` and the engine, wired in memory: a rank
    /// registers, a client connects, the target accepts, and the ferry handshake runs end to
    /// end through the pair.
    #[test]
    fn machines_and_engine_in_memory() {
        use ferry_wire::relay::{Registrar, RelayAcceptor, RelayConnector, ReplayGuard};
        use ferry_wire::Handshake;
        let mut h = Harness::new(Config::default());
        let key = h.job_key.clone();
        let deliver = |h: &mut Harness| -> Vec<(ConnId, Vec<u8>)> {
            h.actions()
                .into_iter()
                .filter_map(|a| match a {
                    Action::Send { conn, bytes } => Some((conn, bytes)),
                    _ => None,
                })
                .collect()
        };
        // Registration.
        let r = h
            .relay
            .handle_accept("10.1.0.12:40001".parse().unwrap(), true, [5; 32], h.now);
        let mut reg = Registrar::new(key.clone(), JOB, 1, 6000);
        for _ in 0..3 {
            for (_, bytes) in deliver(&mut h) {
                reg.handle_input(&bytes).unwrap();
            }
            let out = reg.pending_output().to_vec();
            reg.consume_output(out.len());
            if !out.is_empty() {
                h.input(r, &out);
            }
        }
        assert!(reg.is_registered());
        // Connection.
        let c = h
            .relay
            .handle_accept("198.18.0.20:40002".parse().unwrap(), false, [6; 32], h.now);
        let mut connector = RelayConnector::new(key.clone(), JOB, 0, 1, [7; 32]);
        let mut acceptor = RelayAcceptor::new(key.clone(), JOB, 1);
        let mut seen = ReplayGuard::default();
        let mut target = None;
        let mut forwarding = false;
        for _ in 0..6 {
            for action in h.actions() {
                match action {
                    Action::Send { conn, bytes } if conn == c => {
                        connector.handle_input(&bytes).unwrap();
                    }
                    Action::Send { bytes, .. } => {
                        acceptor.handle_input(&bytes, &mut seen).unwrap();
                    }
                    Action::Dial { conn, addr } => {
                        assert_eq!(addr, "10.1.0.12:6000".parse().unwrap());
                        target = Some(conn);
                        let rk = relay::relay_key(&key);
                        h.relay
                            .handle_dialed(conn, &mut |_| Some(rk.clone()), h.now);
                    }
                    Action::Forward { .. } => forwarding = true,
                    Action::Close { conn, reason } => panic!("closed {conn:?}: {reason:?}"),
                    other => panic!("no pinholes here: {other:?}"),
                }
            }
            let out = connector.pending_output().to_vec();
            connector.consume_output(out.len());
            if !out.is_empty() {
                h.input(c, &out);
            }
            let out = acceptor.pending_output().to_vec();
            acceptor.consume_output(out.len());
            if let (false, Some(t)) = (out.is_empty(), target) {
                h.input(t, &out);
            }
        }
        assert!(forwarding && connector.is_established());
        assert_eq!(acceptor.peer_rank(), Some(0));
        // The forwarded bytes carry the end-to-end handshake.
        let mut hc = Handshake::connect(key.clone(), JOB, 2, 0, 1, [8; 32]);
        let mut ha = Handshake::accept(key, JOB, 2, 1, [9; 32]);
        for _ in 0..3 {
            let out = hc.pending_output().to_vec();
            hc.consume_output(out.len());
            ha.handle_input(&out).unwrap();
            let out = ha.pending_output().to_vec();
            ha.consume_output(out.len());
            hc.handle_input(&out).unwrap();
        }
        assert_eq!((hc.peer_rank(), ha.peer_rank()), (Some(1), Some(0)));
    }
}
