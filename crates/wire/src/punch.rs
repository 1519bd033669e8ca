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
/// Time between connects after one was refused. On the way, a SYN that reaches the other
/// NAT before that NAT has the other side's mapping is answered with a reset, and a Linux NAT
/// keeps that SYN's connection-tracking entry (10 s), which makes it map the other side's
/// port elsewhere: so the first SYNs must cross between the NATs, and retries help only with
/// NATs that drop unsolicited SYNs without a trace. Measured in the testbed: with the NATs
/// 20 µs apart none of 5000 immediate retries crossed; see docs/grid.md.
pub const RETRY: Duration = Duration::from_millis(10);
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
}

impl Attempt {
    /// Starts an attempt at `now` that the decider gives up after `timeout`. The first action
    /// is [`Action::Connect`].
    pub fn new(role: Role, timeout: Duration, now: Instant) -> Attempt {
        Attempt {
            role,
            start: now,
            deadline: now + timeout,
            state: State::Connecting(now),
            actions: [Action::Connect].into(),
        }
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
        if !matches!(self.state, State::Connecting(_)) {
            return;
        }
        self.actions.push_back(Action::Close);
        if now + RETRY < self.my_deadline() {
            self.state = State::Waiting(now + RETRY);
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
        let mut a = Attempt::new(Role::Decider, DEFAULT_TIMEOUT, t0);
        assert_eq!(drain(&mut a), [Action::Connect]);
        a.handle_refused(t0 + Duration::from_millis(1));
        assert_eq!(drain(&mut a), [Action::Close]);
        let due = a.next_timeout().unwrap();
        assert_eq!(due, t0 + Duration::from_millis(1) + RETRY);
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
        let mut a = Attempt::new(Role::Decider, DEFAULT_TIMEOUT, t0);
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
            assert!(now <= t0 + DEFAULT_TIMEOUT + RETRY, "no end");
        }
        assert_eq!(a.outcome(), Some(Outcome::Relay { connected: false }));
        // A connect that hangs (SYN dropped): the deadline ends it too.
        let mut b = Attempt::new(Role::Decider, DEFAULT_TIMEOUT, t0);
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
        let mut d = Attempt::new(Role::Decider, DEFAULT_TIMEOUT, t0);
        let mut f = Attempt::new(Role::Follower, DEFAULT_TIMEOUT, t0);
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
        let mut f = Attempt::new(Role::Follower, DEFAULT_TIMEOUT, t0);
        drain(&mut f);
        f.handle_refused(t0 + DEFAULT_TIMEOUT);
        drain(&mut f);
        f.handle_timeout(t0 + DEFAULT_TIMEOUT + RETRY);
        assert_eq!(drain(&mut f), [Action::Connect]);
        assert_eq!(f.outcome(), None);
        f.handle_timeout(t0 + DEFAULT_TIMEOUT + FOLLOWER_GRACE);
        assert_eq!(drain(&mut f), [Action::Close]);
        assert_eq!(f.outcome(), Some(Outcome::Relay { connected: false }));
        // The decider's relayed connection comes while the follower still tries.
        let mut g = Attempt::new(Role::Follower, DEFAULT_TIMEOUT, t0);
        drain(&mut g);
        g.handle_relayed(t0 + Duration::from_millis(350));
        assert_eq!(drain(&mut g), [Action::Close]);
        assert!(g.outcome().is_some());
    }

    /// Both sides in virtual time over a model of two NATs: a SYN gets through once the other
    /// side's connect has opened its NAT, so whoever connects second wins; with a symmetric
    /// NAT nothing gets through.
    #[test]
    fn pair_in_virtual_time() {
        for (port_preserving, offset_ms) in [(true, 0), (true, 7), (true, 250), (false, 0)] {
            let t0 = Instant::now();
            let mut d = Attempt::new(Role::Decider, DEFAULT_TIMEOUT, t0);
            let mut f = Attempt::new(
                Role::Follower,
                DEFAULT_TIMEOUT,
                t0 + Duration::from_millis(offset_ms),
            );
            let mut open = [false, false];
            let mut now = t0;
            let mut relay_dialled = false;
            for _ in 0..10_000 {
                for (i, a) in [&mut d, &mut f].into_iter().enumerate() {
                    while let Some(act) = a.poll_action() {
                        match act {
                            Action::Connect if port_preserving && open[1 - i] => {
                                // The peer's NAT has our mapping: simultaneous open.
                                open[i] = true;
                            }
                            Action::Connect => open[i] = true,
                            Action::Close => open[i] = false,
                            Action::UseRelay => relay_dialled = true,
                        }
                    }
                }
                if port_preserving && open[0] && open[1] {
                    d.handle_connected(now);
                    f.handle_connected(now);
                    d.handle_authenticated(now);
                    f.handle_authenticated(now);
                }
                if d.outcome().is_some() && f.outcome().is_some() {
                    break;
                }
                // A lone connect is refused one millisecond later (the NAT resets it).
                now += Duration::from_millis(1);
                for (i, a) in [&mut d, &mut f].into_iter().enumerate() {
                    if open[i] && !(open[0] && open[1] && port_preserving) {
                        a.handle_refused(now);
                    }
                    a.handle_timeout(now);
                }
                if relay_dialled {
                    f.handle_relayed(now);
                }
            }
            let (od, of) = (d.outcome().unwrap(), f.outcome().unwrap());
            match port_preserving && offset_ms < 300 {
                true => assert!(matches!(
                    (od, of),
                    (Outcome::Punched(_), Outcome::Punched(_))
                )),
                false => {
                    assert!(matches!(od, Outcome::Relay { .. }) && relay_dialled);
                    assert!(matches!(of, Outcome::Relay { .. }));
                }
            }
        }
    }
}
