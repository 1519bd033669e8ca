//! TCP hole punching between two ranks behind two different NATs, without I/O.
//!
//! Two ranks on two private clusters otherwise talk through the peer's relay (docs/grid.md).
//! Punching gives them a direct connection through both NATs when the NATs allow it:
//!
//! ```text
//! rank a (cluster A)                  relay of B               rank b (cluster B)
//!   socket bound to a:Pa ── OBSERVE ──→                        (the same, towards A's relay)
//!                        ←─ OBSERVED {front A:Qa} (MAC under the relay key), closed
//!   offer "ferry-punch/1;front-A:Qa" ── bootstrap ──→  (and b's offer back); one fence
//!   connect from a:Pa to front-B:Qb  ⇄  connect from b:Pb to front-A:Qa    (simultaneous open)
//!   the ferry handshake (job key) on the connection, if one comes up within the timeout
//! ```
//!
//! - [`Observer`] drives one OBSERVE exchange with a relay of the job (GREETING, OBSERVE,
//!   OBSERVED; `crate::relay` holds the frames). The answer is authenticated with the relay key,
//!   so neither a stranger nor a relay of another job can point a rank elsewhere; the
//!   end-to-end handshake on the punched connection is the real check anyway.
//! - [`Offer`] is what each side publishes for the other: the observed address, or that it
//!   does not punch (`FERRY_PUNCH=0`, no answer from the relay). Versioned text, checked.
//! - [`Attempt`] is one side's attempt: when to connect (again), when to give up, and what the
//!   result is. The pair agrees without further messages: the **decider** (the side that would
//!   dial through the relay) alone decides; if it has no connection by the deadline, or the
//!   connection fails before the handshake ends, it closes it and dials through the relay as
//!   before. The **follower** keeps its socket until the handshake completes on it, it fails,
//!   or the decider arrives through the relay. Since both ends of one TCP connection see it
//!   fail or succeed, they end on the same path.
//!
//! Port-preserving NAT (Linux MASQUERADE without `--random-fully`) maps the socket's port to
//! the same port for every destination, so the observed address is the one the peer must
//! reach; a symmetric NAT (`--random-fully`) maps each destination anew, the connects are
//! refused and both sides use the relay after the timeout.

use crate::handshake::JobKey;
use crate::relay::{self, take_frame, RelayError, RelayFrame};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Default time from the start of an attempt until the decider gives up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(300);
/// When a connect is refused, the decider connects again at once, but never sooner than this
/// after its previous connect (a bound on SYNs where the NATs are close); the follower waits
/// between this and [`RETRY_MAX`], drawn anew each time.
///
/// Why: a Linux NAT lets the peer's SYN in only while our own SYN to the peer is on its way
/// (the connection-tracking entry is in SYN_SENT); once the peer's NAT has reset our SYN (the
/// peer has not connected yet, or is between two connects) the entry is CLOSE and the peer's
/// SYN is reset too. So each side is open only from its connect until the reset comes back. With
/// both sides waiting alike after a reset, each side's SYN can keep arriving just after the
/// other's reset, round after round, until the deadline (seen in the testbed in about one job
/// of fifteen, more under load). A decider that is almost always open, and a follower whose
/// waits differ, break that step within a round.
pub const RETRY_MIN: Duration = Duration::from_millis(2);
/// See [`RETRY_MIN`].
pub const RETRY_MAX: Duration = Duration::from_millis(10);
/// A connect that has neither completed nor been refused this long is started afresh: its SYN
/// was dropped somewhere (the kernel would only send it again after a second). Longer than
/// a round trip between clusters.
pub const STALE: Duration = Duration::from_millis(100);
/// How much longer than the decider the follower keeps trying to connect: it may have started
/// a little earlier, and its connect is what the decider's NAT lets in.
pub const FOLLOWER_GRACE: Duration = Duration::from_millis(100);
/// Version of the [`Offer`] text.
pub const OFFER_VERSION: u32 = 1;

/// The rank side of one OBSERVE exchange with a relay. Send [`Observer::pending_output`], feed
/// the relay's bytes to [`Observer::handle_input`] until [`Observer::observed`] is `Some`.
#[derive(Debug)]
pub struct Observer {
    key: JobKey,
    job: u64,
    src: u32,
    nonce: [u8; 32],
    input: Vec<u8>,
    output: Vec<u8>,
    observed: Option<SocketAddr>,
}

impl Observer {
    /// Asks on behalf of rank `src` of `job`; `nonce` must be fresh random bytes.
    pub fn new(key: JobKey, job: u64, src: u32, nonce: [u8; 32]) -> Observer {
        Observer {
            key,
            job,
            src,
            nonce,
            input: Vec::new(),
            output: Vec::new(),
            observed: None,
        }
    }

    /// Bytes to send now.
    pub fn pending_output(&self) -> &[u8] {
        &self.output
    }

    /// Marks the first `n` bytes of the pending output as sent.
    pub fn consume_output(&mut self, n: usize) {
        self.output.drain(..n.min(self.output.len()));
    }

    /// The address this connection came from, as the relay saw it, once answered.
    pub fn observed(&self) -> Option<SocketAddr> {
        self.observed
    }

    /// Takes bytes from the relay; returns how many were used.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<usize, RelayError> {
        let mut used = 0;
        while self.observed.is_none() && used < bytes.len() {
            let (n, frame) = take_frame(&mut self.input, &bytes[used..])?;
            used += n;
            match frame {
                None => {}
                Some(RelayFrame::Greeting { relay_nonce }) if self.output.is_empty() => {
                    relay::observe(&self.key, &relay_nonce, self.job, self.src, self.nonce)
                        .encode(&mut self.output);
                }
                Some(RelayFrame::Observed { addr, mac }) => {
                    if !relay::verify_observed(&self.key, &self.nonce, &addr, &mac) {
                        return Err(RelayError::BadMac);
                    }
                    self.observed = Some(addr);
                }
                Some(RelayFrame::Refused(code)) => return Err(RelayError::Refused(code)),
                Some(other) => return Err(RelayError::Unexpected(other.op())),
            }
        }
        Ok(used)
    }
}

/// What one side of a pair publishes for the other (through the job's bootstrap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Punch towards this address: the mapping our NAT made for our punching socket.
    At(SocketAddr),
    /// This side does not punch; the pair uses the relay.
    Off,
}

/// An offer that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OfferError {
    /// Not an offer of any version.
    #[error("not a punch offer: {0:?}")]
    Malformed(String),
    /// An offer of a version this side does not read.
    #[error("punch offer version {0}, expected {OFFER_VERSION}")]
    Version(u32),
}

impl Offer {
    /// The text: `ferry-punch/1;<addr:port>` or `ferry-punch/1;off` (no white space: it travels
    /// as a bootstrap value).
    pub fn encode(&self) -> String {
        match self {
            Offer::At(addr) => format!("ferry-punch/{OFFER_VERSION};{addr}"),
            Offer::Off => format!("ferry-punch/{OFFER_VERSION};off"),
        }
    }

    /// Reads [`Offer::encode`]'s text; anything else is an error naming it (cut to 64 bytes).
    pub fn decode(text: &str) -> Result<Offer, OfferError> {
        let malformed = || OfferError::Malformed(text.chars().take(64).collect());
        let (head, body) = text.split_once(';').ok_or_else(malformed)?;
        let version: u32 = head
            .strip_prefix("ferry-punch/")
            .and_then(|v| v.parse().ok())
            .ok_or_else(malformed)?;
        if version != OFFER_VERSION {
            return Err(OfferError::Version(version));
        }
        match body {
            "off" => Ok(Offer::Off),
            addr => match addr.parse::<SocketAddr>() {
                Ok(a) if a.port() != 0 && !a.ip().is_unspecified() => Ok(Offer::At(a)),
                _ => Err(malformed()),
            },
        }
    }
}

/// Which side of the pair an [`Attempt`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Decides: gives up at the deadline and then dials through the relay. Runs the
    /// handshake as the connecting side.
    Decider,
    /// Follows: keeps trying a little longer, accepts the decider's outcome. Runs the
    /// handshake as the accepting side.
    Follower,
}

/// What the driver of an [`Attempt`] must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Open a new socket bound to the punching port and connect it to the peer's offer.
    Connect,
    /// Close the punching socket (if any).
    Close,
    /// (Decider) dial the peer through its relay, as without punching.
    UseRelay,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The handshake completed on the punched connection, this long after the start.
    Punched(Duration),
    /// The pair uses the relay; `connected` says whether a TCP connection had come up.
    Relay {
        /// A connection came up but failed before its handshake ended.
        connected: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A connect is under way since then.
    Connecting(Instant),
    /// The last connect was refused; the next one is due at the time given.
    Waiting(Instant),
    /// Connected; the handshake runs.
    Connected,
    /// Over.
    Done(Outcome),
}

/// One side's attempt to punch through to one peer. Report events with the `handle_*`
/// methods, each taking the current time; carry out what [`Attempt::poll_action`] hands out;
/// call [`Attempt::handle_timeout`] at [`Attempt::next_timeout`].
#[derive(Debug)]
pub struct Attempt {
    role: Role,
    start: Instant,
    /// The decider's deadline; the follower's is [`FOLLOWER_GRACE`] later.
    deadline: Instant,
    state: State,
    actions: std::collections::VecDeque<Action>,
    /// Draws the waits between connects (xorshift64; never zero).
    random: u64,
}

impl Attempt {
    /// Starts an attempt at `now` that the decider gives up after `timeout`; `seed` (random
    /// bytes, different on the two sides) draws the waits between connects. The first action
    /// is [`Action::Connect`].
    pub fn new(role: Role, timeout: Duration, now: Instant, seed: u64) -> Attempt {
        Attempt {
            role,
            start: now,
            deadline: now + timeout,
            state: State::Connecting(now),
            actions: [Action::Connect].into(),
            random: seed | 1,
        }
    }

    /// The follower's next wait before a connect, between [`RETRY_MIN`] and [`RETRY_MAX`].
    fn retry_wait(&mut self) -> Duration {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        let span = (RETRY_MAX - RETRY_MIN).as_micros() as u64 + 1;
        RETRY_MIN + Duration::from_micros(self.random % span)
    }

    /// This side's role.
    pub fn role(&self) -> Role {
        self.role
    }

    fn my_deadline(&self) -> Instant {
        match self.role {
            Role::Decider => self.deadline,
            Role::Follower => self.deadline + FOLLOWER_GRACE,
        }
    }

    /// The next thing to do, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// How it ended, once it has.
    pub fn outcome(&self) -> Option<Outcome> {
        match self.state {
            State::Done(o) => Some(o),
            _ => None,
        }
    }

    /// When [`Attempt::handle_timeout`] is due next (None: waiting on events only).
    pub fn next_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Connecting(since) => Some((since + STALE).min(self.my_deadline())),
            State::Waiting(at) => Some(at.min(self.my_deadline())),
            State::Connected | State::Done(_) => None,
        }
    }

    /// Ends the attempt without a punched connection.
    fn give_up(&mut self, connected: bool) {
        self.actions.push_back(Action::Close);
        if self.role == Role::Decider {
            self.actions.push_back(Action::UseRelay);
        }
        self.state = State::Done(Outcome::Relay { connected });
    }

    /// The connect failed (refused, unreachable, reset) before it was up.
    pub fn handle_refused(&mut self, now: Instant) {
        let State::Connecting(since) = self.state else {
            return;
        };
        self.actions.push_back(Action::Close);
        let next = match self.role {
            Role::Decider => now.max(since + RETRY_MIN),
            Role::Follower => now + self.retry_wait(),
        };
        if next < self.my_deadline() {
            self.state = State::Waiting(next);
        } else if self.role == Role::Decider {
            self.give_up(false);
        } else {
            // The follower waits for the decider's relayed connection.
            self.state = State::Done(Outcome::Relay { connected: false });
        }
    }

    /// The connect completed: the handshake may start.
    pub fn handle_connected(&mut self, _now: Instant) {
        if matches!(self.state, State::Connecting(_)) {
            self.state = State::Connected;
        }
    }

    /// The connection failed after it was up, before the handshake ended.
    pub fn handle_failed(&mut self, _now: Instant) {
        match self.state {
            State::Connected => self.give_up(true),
            State::Connecting(_) => self.give_up(false),
            _ => {}
        }
    }

    /// The handshake completed on the punched connection: it is the pair's link.
    pub fn handle_authenticated(&mut self, now: Instant) {
        if self.state == State::Connected {
            self.state = State::Done(Outcome::Punched(now.saturating_duration_since(self.start)));
        }
    }

    /// (Follower) the peer's connection through the relay authenticated first: whatever is
    /// left of the attempt goes.
    pub fn handle_relayed(&mut self, _now: Instant) {
        if !matches!(self.state, State::Done(_)) {
            self.actions.push_back(Action::Close);
            self.state = State::Done(Outcome::Relay {
                connected: self.state == State::Connected,
            });
        }
    }

    /// Time passed: a refused connect is due again, or the deadline has come.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            State::Connecting(_) | State::Waiting(_) if now >= self.my_deadline() => {
                if self.role == Role::Decider {
                    self.give_up(false);
                } else {
                    self.actions.push_back(Action::Close);
                    self.state = State::Done(Outcome::Relay { connected: false });
                }
            }
            State::Waiting(at) if now >= at => {
                self.state = State::Connecting(now);
                self.actions.push_back(Action::Connect);
            }
            State::Connecting(since) if now >= since + STALE => {
                self.state = State::Connecting(now);
                self.actions.push_back(Action::Close);
                self.actions.push_back(Action::Connect);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(a: &mut Attempt) -> Vec<Action> {
        std::iter::from_fn(|| a.poll_action()).collect()
    }

    #[test]
    fn observe_exchange_and_its_checks() {
        let key = JobKey([5; 32]);
        let relay_key = relay::relay_key(&key);
        let mut o = Observer::new(key.clone(), 9, 3, [1; 32]);
        let greeting = RelayFrame::Greeting {
            relay_nonce: [2; 32],
        }
        .to_bytes();
        assert_eq!(o.handle_input(&greeting).unwrap(), greeting.len());
        let Ok(Some((
            RelayFrame::Observe {
                job,
                src,
                nonce,
                gate,
            },
            _,
        ))) = RelayFrame::decode(o.pending_output())
        else {
            panic!("no OBSERVE")
        };
        assert_eq!((job, src, nonce), (9, 3, [1; 32]));
        assert!(relay::verify_observe(
            &relay_key, &[2; 32], job, src, &nonce, &gate
        ));
        assert!(!relay::verify_observe(
            &relay_key, &[3; 32], job, src, &nonce, &gate
        ));
        o.consume_output(o.pending_output().len());
        let seen: SocketAddr = "198.18.0.2:40123".parse().unwrap();
        // A forged answer (another key) is refused; the right one is taken.
        let mut forged = Observer::new(key.clone(), 9, 3, [1; 32]);
        forged.handle_input(&greeting).unwrap();
        let wrong = relay::observed(&JobKey([6; 32]), &nonce, seen).to_bytes();
        assert_eq!(forged.handle_input(&wrong), Err(RelayError::BadMac));
        let answer = relay::observed(&relay_key, &nonce, seen).to_bytes();
        o.handle_input(&answer[..10]).unwrap();
        o.handle_input(&answer[10..]).unwrap();
        assert_eq!(o.observed(), Some(seen));
        // IPv6 round trip, and a bad family is named.
        let v6: SocketAddr = "[2001:db8::7]:9".parse().unwrap();
        let bytes = relay::observed(&relay_key, &nonce, v6).to_bytes();
        assert!(
            matches!(RelayFrame::decode(&bytes), Ok(Some((RelayFrame::Observed { addr, .. }, _))) if addr == v6)
        );
        let mut bad = answer.clone();
        bad[relay::HEADER_LEN] = 5;
        assert_eq!(RelayFrame::decode(&bad), Err(RelayError::Family(5)));
    }

    #[test]
    fn offers_round_trip_and_strangers_are_named() {
        let a = Offer::At("198.18.0.3:5000".parse().unwrap());
        assert_eq!(Offer::decode(&a.encode()), Ok(a));
        assert_eq!(Offer::decode(&Offer::Off.encode()), Ok(Offer::Off));
        assert_eq!(
            Offer::decode("ferry-punch/2;off"),
            Err(OfferError::Version(2))
        );
        for bad in [
            "",
            "off",
            "ferry-punch/x;off",
            "ferry-punch/1 off",
            "ferry-punch/1;1.2.3.4",
            "ferry-punch/1;0.0.0.0:5",
            "ferry-punch/1;1.2.3.4:0",
            "GET / HTTP/1.1",
        ] {
            assert!(
                matches!(Offer::decode(bad), Err(OfferError::Malformed(_))),
                "{bad:?}"
            );
        }
        let long = "x".repeat(1000) + ";y";
        let Err(e) = Offer::decode(&long) else {
            panic!()
        };
        assert!(e.to_string().len() < 120);
    }

    #[test]
    fn refused_connects_are_retried_until_one_is_up() {
        let t0 = Instant::now();
        // The decider connects again at once, but not twice within RETRY_MIN.
        let mut d = Attempt::new(Role::Decider, DEFAULT_TIMEOUT, t0, 7);
        drain(&mut d);
        d.handle_refused(t0 + Duration::from_micros(50));
        assert_eq!(d.next_timeout(), Some(t0 + RETRY_MIN));
        d.handle_timeout(t0 + RETRY_MIN);
        assert_eq!(drain(&mut d), [Action::Close, Action::Connect]);
        d.handle_refused(t0 + Duration::from_millis(20));
        assert_eq!(d.next_timeout(), Some(t0 + Duration::from_millis(20)));
        // The follower waits a drawn time.
        let mut a = Attempt::new(Role::Follower, DEFAULT_TIMEOUT, t0, 7);
        assert_eq!(drain(&mut a), [Action::Connect]);
        a.handle_refused(t0 + Duration::from_millis(1));
        assert_eq!(drain(&mut a), [Action::Close]);
        let due = a.next_timeout().unwrap();
        let wait = due - (t0 + Duration::from_millis(1));
        assert!((RETRY_MIN..=RETRY_MAX).contains(&wait), "{wait:?}");
        a.handle_timeout(due - Duration::from_millis(1));
        assert_eq!(drain(&mut a), []);
        a.handle_timeout(due);
        assert_eq!(drain(&mut a), [Action::Connect]);
        // A connect with no answer at all is started afresh.
        a.handle_timeout(due + STALE);
        assert_eq!(drain(&mut a), [Action::Close, Action::Connect]);
        a.handle_connected(due + STALE + Duration::from_millis(1));
        // Connected: the deadline no longer applies, the handshake's own timeout does.
        assert_eq!(a.next_timeout(), None);
        a.handle_timeout(t0 + Duration::from_secs(5));
        assert_eq!(drain(&mut a), []);
        a.handle_authenticated(t0 + Duration::from_millis(40));
        assert_eq!(
            a.outcome(),
            Some(Outcome::Punched(Duration::from_millis(40)))
        );
    }

    #[test]
    fn decider_gives_up_at_the_deadline_and_takes_the_relay() {
        let t0 = Instant::now();
        let mut a = Attempt::new(Role::Decider, DEFAULT_TIMEOUT, t0, 7);
        drain(&mut a);
        let mut now = t0;
        // A symmetric NAT: every connect is refused.
        while a.outcome().is_none() {
            now += Duration::from_millis(3);
            a.handle_refused(now);
            if let Some(at) = a.next_timeout() {
                now = at;
                a.handle_timeout(now);
            }
            drain(&mut a);
            assert!(now <= t0 + DEFAULT_TIMEOUT + RETRY_MAX, "no end");
        }
        assert_eq!(a.outcome(), Some(Outcome::Relay { connected: false }));
        // A connect that hangs (SYN dropped): the deadline ends it too.
        let mut b = Attempt::new(Role::Decider, DEFAULT_TIMEOUT, t0, 7);
        drain(&mut b);
        let mut now = t0;
        while b.outcome().is_none() {
            now = b.next_timeout().unwrap();
            b.handle_timeout(now);
            assert!(now <= t0 + DEFAULT_TIMEOUT);
        }
        assert_eq!(now, t0 + DEFAULT_TIMEOUT);
        assert_eq!(
            std::iter::from_fn(|| b.poll_action()).last(),
            Some(Action::UseRelay)
        );
    }

    #[test]
    fn a_failed_handshake_falls_back_on_both_sides() {
        let t0 = Instant::now();
        let mut d = Attempt::new(Role::Decider, DEFAULT_TIMEOUT, t0, 7);
        let mut f = Attempt::new(Role::Follower, DEFAULT_TIMEOUT, t0, 8);
        drain(&mut d);
        drain(&mut f);
        d.handle_connected(t0);
        f.handle_connected(t0);
        d.handle_failed(t0 + Duration::from_millis(5));
        f.handle_failed(t0 + Duration::from_millis(5));
        assert_eq!(drain(&mut d), [Action::Close, Action::UseRelay]);
        assert_eq!(drain(&mut f), [Action::Close]);
        assert_eq!(d.outcome(), Some(Outcome::Relay { connected: true }));
        assert_eq!(f.outcome(), Some(Outcome::Relay { connected: true }));
    }

    #[test]
    fn follower_tries_longer_and_yields_to_the_relay() {
        let t0 = Instant::now();
        let mut f = Attempt::new(Role::Follower, DEFAULT_TIMEOUT, t0, 8);
        drain(&mut f);
        f.handle_refused(t0 + DEFAULT_TIMEOUT);
        drain(&mut f);
        f.handle_timeout(t0 + DEFAULT_TIMEOUT + RETRY_MAX);
        assert_eq!(drain(&mut f), [Action::Connect]);
        assert_eq!(f.outcome(), None);
        f.handle_timeout(t0 + DEFAULT_TIMEOUT + FOLLOWER_GRACE);
        assert_eq!(drain(&mut f), [Action::Close]);
        assert_eq!(f.outcome(), Some(Outcome::Relay { connected: false }));
        // The decider's relayed connection comes while the follower still tries.
        let mut g = Attempt::new(Role::Follower, DEFAULT_TIMEOUT, t0, 8);
        drain(&mut g);
        g.handle_relayed(t0 + Duration::from_millis(350));
        assert_eq!(drain(&mut g), [Action::Close]);
        assert!(g.outcome().is_some());
    }

    /// Both sides in virtual time (0.1 ms steps) over a model of two NATs 10 ms apart one way,
    /// as the testbed's punch grids: a SYN gets through only while the other side's own connect
    /// is under way (its NAT's entry for the pair is in SYN_SENT); otherwise it is reset (by
    /// the NAT) and the reset comes back a one-way delay later. A side is late by the start
    /// skew (its bootstrap lookups cross the WAN). With
    /// port-preserving NATs every start skew up to 250 ms (the late side's bootstrap lookups
    /// cross the WAN) ends punched, on both sides, before the deadline; with a symmetric NAT
    /// both end on the relay.
    #[test]
    fn pair_in_virtual_time() {
        const STEP: Duration = Duration::from_micros(100);
        const DELAY: Duration = Duration::from_millis(10);
        #[derive(Clone, Copy, PartialEq)]
        enum Packet {
            /// A SYN of the sender's socket number n.
            Syn(u32),
            /// A reset for the receiver's socket number n.
            Rst(u32),
            /// The connection is up (the SYN-ACK of a simultaneous open).
            Up,
        }
        let mut runs = 0;
        for port_preserving in [true, false] {
            for offset_ms in (0..=250).step_by(5) {
                let seed = 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(offset_ms + 1);
                let t0 = Instant::now();
                let starts = [t0, t0 + Duration::from_millis(offset_ms)];
                let mut sides = [
                    Attempt::new(Role::Decider, DEFAULT_TIMEOUT, starts[0], seed),
                    Attempt::new(Role::Follower, DEFAULT_TIMEOUT, starts[1], seed >> 1),
                ];
                // Per side: its socket (number) while connecting, whether its NAT has its
                // mapping towards the peer, and the packets on their way to it.
                let mut socket: [Option<u32>; 2] = [None, None];
                let mut sockets = [0u32; 2];
                let mut mapped = [false, false];
                let mut wire: Vec<(Instant, usize, Packet)> = Vec::new();
                let mut relay_dialled = false;
                let mut now = t0;
                while sides.iter().any(|a| a.outcome().is_none()) {
                    assert!(now < t0 + Duration::from_secs(2), "no end");
                    for i in 0..2 {
                        if now < starts[i] {
                            continue;
                        }
                        while let Some(act) = sides[i].poll_action() {
                            match act {
                                Action::Connect => {
                                    sockets[i] += 1;
                                    socket[i] = Some(sockets[i]);
                                    mapped[i] |= port_preserving;
                                    wire.push((now + DELAY, 1 - i, Packet::Syn(sockets[i])));
                                }
                                Action::Close => socket[i] = None,
                                Action::UseRelay => relay_dialled = true,
                            }
                        }
                    }
                    let (due, later): (Vec<_>, Vec<_>) =
                        wire.drain(..).partition(|&(at, _, _)| at <= now);
                    wire = later;
                    for (_, to, packet) in due {
                        match packet {
                            Packet::Syn(_) if mapped[to] && socket[to].is_some() => {
                                sides[to].handle_connected(now);
                                sides[to].handle_authenticated(now);
                                wire.push((now + DELAY, 1 - to, Packet::Up));
                            }
                            Packet::Syn(n) => wire.push((now + DELAY, 1 - to, Packet::Rst(n))),
                            Packet::Rst(n) if socket[to] == Some(n) => {
                                sides[to].handle_refused(now)
                            }
                            Packet::Rst(_) => {}
                            Packet::Up if socket[to].is_some() => {
                                sides[to].handle_connected(now);
                                sides[to].handle_authenticated(now);
                            }
                            Packet::Up => {}
                        }
                    }
                    now += STEP;
                    for (i, a) in sides.iter_mut().enumerate() {
                        if now >= starts[i] {
                            a.handle_timeout(now);
                        }
                    }
                    if relay_dialled {
                        sides[1].handle_relayed(now);
                    }
                }
                let [d, f] = sides.map(|a| a.outcome().unwrap());
                match port_preserving {
                    true => assert!(
                        matches!((d, f), (Outcome::Punched(_), Outcome::Punched(_))),
                        "offset {offset_ms} ms: {d:?} {f:?}"
                    ),
                    false => {
                        assert!(matches!(d, Outcome::Relay { .. }) && relay_dialled);
                        assert!(matches!(f, Outcome::Relay { .. }));
                    }
                }
                runs += 1;
            }
        }
        assert_eq!(runs, 102);
    }
}
