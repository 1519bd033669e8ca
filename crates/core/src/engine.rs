//! The progress engine: requests, matching and the eager/rendezvous protocols over the
//! transports.
//!
//! [`Proto`] is the protocol half. It never touches a socket or a ring: transports hand it
//! frames through [`FrameSink`] and take the frames it queues per peer. [`Engine`] owns both
//! halves and runs them: `progress` drains inbound frames and flushes outbound queues, and
//! `wait_until` repeats that with back-off (spin, then yield, then sleep on a futex or in
//! epoll) so that ranks outnumbering cores still make progress.
//!
//! Buffers are raw pointers: a request borrows its buffer until it completes. The safe API in
//! `comm.rs` ties that to Rust lifetimes; the C ABI passes the contract on to the caller.
//!
//! Each side keeps what it knows of a peer in one object, indexed by universe rank: a
//! [`Peer`] in `Proto` (route, process id, out queue, counters), a [`Link`] in `Engine` (a
//! ring record read in place, the rails).
//!
//! With several TCP rails per peer ([`Lanes`]), rail 0 carries the ordered frames and the
//! chunks of every rendezvous go to the rails a [`Striper`] picks; such sends complete on the
//! receiver's FIN, so that the chunks of a rail that fails can be sent again on the others.
//!
//! Where things are: `request` (request slots and completions), `outq` (what waits to be
//! written to a peer), `incoming` (unexpected messages), `peer`
//! (the per-peer objects), `send` and `recv` (starting operations), `active` (active
//! messages), `progress` (a progress pass and the flush of out-queues), `wait` (back-off),
//! `proto` and `sink` (the protocol's reactions), `rails` (striping over TCP rails), `hook`
//! (how work above the engine, the collectives, moves with it). What the engine and the
//! transports hand each other is in `crate::frames`, below both.

use crate::error::Error;
use crate::matching::{Envelope, Matcher, Pattern};
use crate::ofi::FabricTransport;
use crate::rails::{RailLoad, Striper};
use crate::shm::{cma_read, cma_write, ShmTransport, Sleep};
use crate::tcp::TcpTransport;
use ferry_wire::rendezvous::{share_split, RendezvousRecv, RendezvousSend};
use ferry_wire::{Frame, HEADER_LEN};
pub use send::SendMode;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub(crate) use crate::frames::ReqId;

/// How frames reach a peer, chosen once when the job starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Ourselves: frames go through an in-memory queue.
    Loopback,
    /// A shared-memory ring.
    Shm,
    /// A TCP connection.
    Tcp,
    /// A fabric endpoint (libfabric: RDMA NICs, or its tcp and shm providers).
    Fabric,
}

/// Looks of waits per poll of TCP when the rank also has shared-memory peers (see
/// `Engine::wait_pass`): an `epoll_wait` per look, or per message, would slow a wait on a
/// ring (8 B round trip between two ranks of a host inside a job with TCP peers: 0.84 µs
/// polling on each message's first look, 0.46 µs alone), and 128 looks of the rings (a few
/// µs) are short against a TCP message's own time.
const TCP_SPIN_EVERY: u32 = 128;

/// Polls of a spinning wait between looks at whether a peer shares this rank's CPU (see
/// `Engine::spins_beside_a_peer`): about 2 µs of polling, so a quick message never pays the look.
const SHARED_CPU_LOOK: u32 = 64;

/// How a receive stands once started ([`Engine::recv_now_or_post`]).
pub(crate) enum Received {
    /// The message was there: received.
    Now(Completion),
    /// Still to come, as this request.
    Later(ReqId),
}

/// How [`Engine::take_arrived_in_place`] went.
pub(crate) enum InPlace {
    /// Held in the ring: its payload, of this many bytes.
    Held(*const u8, usize),
    /// Not at the head of its ring yet.
    NotYet,
    /// To be received as usual.
    Elsewhere,
}

/// The protocol half of the engine.
pub(crate) struct Proto {
    pub me: u32,
    /// Per peer, indexed by universe rank (see [`Peer`]).
    peers: Vec<Peer>,
    /// TCP rails per peer pair (1: no rails).
    pub rails: usize,
    /// Requests completed so far: work waiting for requests needs a look only when it moved.
    pub completions: u64,
    /// Reads and registrations for the fabric transport (see `engine/fabric.rs`).
    fabric: FabricWork,
    /// Rails the peers reported failed (RAIL_DOWN), for the engine to close.
    rail_down: Vec<(u32, u16)>,
    /// The same, for the transport to read to their end first: (peer, rail, seq).
    to_drain: Vec<(u32, u16, u64)>,
    cma: bool,
    /// Large shm messages of at least this many bytes are copied by both sides at once
    /// (SHARE); `u64::MAX`: never, the receiver pulls alone.
    cma_share_min: u64,
    /// The receiver's half of shared copies, run once the SHARE is written (`Engine::progress`).
    shared_pulls: Vec<SharedPull>,
    requests: Requests,
    matcher: Matcher<ReqId, Unexpected>,
    /// Peers with frames to write (`Peer::queued`), for `Engine::flush` to visit.
    busy: Vec<u32>,
    loopback: VecDeque<(Frame, Vec<u8>)>,
    /// Buffers of delivered unexpected eager messages, for the next ones (`recycle_kept`).
    spare_kept: Vec<Vec<u8>>,
    /// Active-message handlers by context (see [`ActiveFn`]); few, so a short list.
    active: Vec<(u32, ActiveFn)>,
    /// Replies the handlers queued, as (context, reply), for `Engine::progress` to send.
    active_out: Vec<(u32, ActiveReply)>,
    /// Traffic totals for tools ([`crate::Comm::counters`]).
    pub(crate) counters: crate::stats::Counters,
    /// A peer's death fails what waits on it instead of the job (`engine/failure.rs`).
    pub(crate) fault_tolerant: bool,
    /// Peers failed so far: a wait that must end when one fails watches it.
    pub(crate) failures: u32,
    /// Communicators revoked so far; with `failures`, whether a new operation may be doomed.
    pub(crate) revocations: u32,
}

/// The receiver's part of a shared copy: bytes `[0, len)` of the message at `source_addr` in
/// `peer`'s memory, into the buffer of receive `id`.
struct SharedPull {
    id: ReqId,
    peer: u32,
    source_addr: u64,
    len: u64,
}

fn protocol_error(peer: u32, detail: impl std::fmt::Display) -> Error {
    Error::Protocol {
        rank: peer as usize,
        detail: detail.to_string(),
    }
}

/// The transports of a rank, each present when some peer takes its route.
pub(crate) struct Transports {
    shm: Option<ShmTransport>,
    /// Set with [`Engine::add_tcp`], which also makes the doorbell.
    pub(crate) tcp: Option<TcpTransport>,
    /// Set with [`Engine::add_fabric`]; TCP's epoll also watches its completion queue.
    pub(crate) fabric: Option<FabricTransport>,
    /// With both transports, shared-memory peers wake this rank's sleep in TCP's epoll through
    /// its doorbell (see `crate::shm`); false if it could not be made.
    doorbell: bool,
    /// Looks of waits since TCP was last polled (see `Engine::wait_pass`).
    looks_without_tcp: u32,
}

/// The runtime of one rank: protocol state plus the transports that carry it.
pub(crate) struct Engine {
    pub proto: Proto,
    pub(crate) net: Transports,
    shm_eager_limit: usize,
    tcp_eager_limit: usize,
    shm_chunk: usize,
    tcp_chunk: usize,
    spin: u32,
    /// The spin's polls yield the core in between (`FERRY_SPIN_YIELD`).
    spin_yield: bool,
    /// When this rank last moved itself off a core it shared with a peer (see
    /// `Engine::spins_beside_a_peer`).
    moved_at: Option<Instant>,
    /// The longest sleep of a wait with nothing to do: long when this thread is alone with the
    /// engine, short when other threads may want it (see `Shared::wait_until`).
    pub(crate) nap: Duration,
    /// How chunks are spread over the rails, for the [`Lanes`] of peers that come later.
    rail_policy: crate::config::RailPolicy,
    /// Smallest rendezvous spread over every rail; smaller ones use rail 0 only.
    rail_stripe: u64,
    /// Time base of the rails' rate measurements.
    started: Instant,
    /// Receives that may leave their payload in the shared-memory ring
    /// ([`Engine::irecv_in_place`]), each with the peer whose ring holds it once it does.
    in_place: Vec<(ReqId, Option<u32>)>,
    /// Per peer, indexed by universe rank as `proto`'s peers (see [`Link`]); peers the
    /// protocol adds while reading get theirs in [`Engine::adopt_peers`].
    links: Vec<Link>,
    /// Failed peers and revoked communicators, in a fault-tolerant job.
    faults: Option<Box<failure::Faults>>,
}

/// Settings the engine needs from `Config` and setup.
pub(crate) struct EngineSetup {
    pub me: u32,
    pub routes: Vec<Route>,
    pub pids: Vec<u32>,
    pub shm: Option<ShmTransport>,
    pub tcp: Option<TcpTransport>,
    pub cma: bool,
    pub cma_share_min: u64,
    pub shm_eager_limit: usize,
    pub tcp_eager_limit: usize,
    pub tcp_chunk: usize,
    pub spin: u32,
    pub spin_yield: bool,
    /// TCP rails per peer, how chunks are spread over them, and from which size.
    pub rails: usize,
    pub rail_policy: crate::config::RailPolicy,
    pub rail_stripe: usize,
}

impl Engine {
    pub(crate) fn new(setup: EngineSetup) -> Engine {
        let rails = setup.rails.max(1);
        let peers: Vec<Peer> = (setup.routes.iter().enumerate())
            .map(|(rank, &route)| Peer::new(route, setup.pids.get(rank).copied().unwrap_or(0)))
            .collect();
        let links = (peers.iter())
            .map(|p| Link::new(p.route, rails, setup.rail_policy))
            .collect();
        let shm_max = setup.shm.as_ref().map_or(usize::MAX, |s| s.max_payload());
        let mut engine = Engine {
            proto: Proto {
                me: setup.me,
                peers,
                rails,
                rail_down: Vec::new(),
                completions: 0,
                fabric: FabricWork::default(),
                to_drain: Vec::new(),
                cma: setup.cma,
                cma_share_min: setup.cma_share_min,
                shared_pulls: Vec::new(),
                requests: Requests {
                    slots: Vec::new(),
                    free: Vec::new(),
                },
                matcher: Matcher::new(),
                busy: Vec::new(),
                loopback: VecDeque::new(),
                spare_kept: Vec::new(),
                active: Vec::new(),
                active_out: Vec::new(),
                counters: crate::stats::Counters::default(),
                fault_tolerant: false,
                failures: 0,
                revocations: 0,
            },
            shm_eager_limit: setup.shm_eager_limit.min(shm_max),
            shm_chunk: shm_max / 2,
            net: Transports {
                shm: setup.shm,
                tcp: None,
                fabric: None,
                doorbell: false,
                looks_without_tcp: 0,
            },
            tcp_eager_limit: setup.tcp_eager_limit,
            tcp_chunk: setup.tcp_chunk,
            spin: setup.spin,
            spin_yield: setup.spin_yield,
            moved_at: None,
            nap: Duration::from_millis(20),
            rail_policy: setup.rail_policy,
            rail_stripe: setup.rail_stripe as u64,
            started: Instant::now(),
            in_place: Vec::new(),
            links,
            faults: None,
        };
        if let Some(tcp) = setup.tcp {
            engine.add_tcp(tcp);
        }
        engine
    }

    /// Gives this rank TCP (at start, or later to reach other worlds). With shared memory as
    /// well, it makes the doorbell that lets shared-memory peers end a sleep in TCP's epoll;
    /// if that fails, it says so once and such sleeps look at the rings every millisecond.
    pub(crate) fn add_tcp(&mut self, mut tcp: TcpTransport) {
        if let Some(shm) = self.net.shm.as_ref() {
            match shm
                .doorbell()
                .map_err(|e| Error::Transport(format!("cannot bind the doorbell: {e}")))
                .and_then(|bell| tcp.watch_doorbell(bell))
            {
                Ok(()) => self.net.doorbell = true,
                Err(e) => eprintln!(
                    "ferry: rank {}: {e}; a wait with TCP open looks for shared-memory messages every 1 ms",
                    self.proto.me
                ),
            }
        }
        self.net.tcp = Some(tcp);
    }

    /// Takes peers `uids` (processes of another world of the job) with their process ids:
    /// reached over TCP, connected by whichever side dials.
    pub(crate) fn add_peers(&mut self, uids: &[(u32, u32)]) {
        let end = uids.iter().map(|&(u, _)| u as usize + 1).max().unwrap_or(0);
        self.grow(end);
        for &(uid, pid) in uids {
            if pid != 0 {
                self.proto.peers[uid as usize].pid = pid;
            }
        }
    }

    /// Makes room for peers up to (not including) `peers` in the protocol, the engine and TCP
    /// (see [`Proto::grow`]).
    #[cold]
    pub(crate) fn grow(&mut self, peers: usize) {
        self.proto.grow(peers);
        self.adopt_peers();
        if let Some(t) = self.net.tcp.as_mut() {
            t.grow(self.proto.peer_count());
        }
    }

    /// Gives the peers the protocol added on its own (a process of another world that
    /// connected before we were told of it) their engine half.
    fn adopt_peers(&mut self) {
        let (rails, policy) = (self.proto.rails, self.rail_policy);
        let new = self.proto.peers.get(self.links.len()..).unwrap_or_default();
        self.links
            .extend(new.iter().map(|p| Link::new(p.route, rails, policy)));
    }

    /// Drops what was queued for other worlds' processes whose connection ended, and adopts
    /// those that connected (see [`Engine::adopt_peers`]): what follows a read of TCP.
    fn after_tcp_input(&mut self) {
        let closed = (self.net.tcp.as_mut()).map_or_else(Vec::new, |t| t.take_closed());
        {
            for peer in closed {
                match self.proto.peers.get_mut(peer as usize) {
                    Some(p) if self.proto.fault_tolerant && !p.departed => self.peer_failed(peer),
                    Some(p) => {
                        p.outq.clear();
                        p.departed = true;
                    }
                    None => {}
                }
            }
        }
        if self.links.len() < self.proto.peers.len() {
            self.adopt_peers();
        }
    }

    /// Queues BYE to `peers` (their connection's end will then be orderly here and there);
    /// also to those whose connection is still in its handshake, so that it goes once that
    /// is done.
    pub(crate) fn say_bye(&mut self, peers: &[u32]) -> Result<(), Error> {
        for &peer in peers {
            if self
                .net
                .tcp
                .as_ref()
                .is_some_and(|t| t.has_conn(peer as usize))
            {
                self.proto
                    .push_out(peer, Out::Frame(OutFrame::control(Frame::Bye)));
                self.flush_peer(peer)?;
            }
        }
        Ok(())
    }

    /// The traffic totals, with the unexpected queue's length now.
    pub(crate) fn counters(&self) -> crate::stats::Counters {
        let mut c = self.proto.counters;
        c.unexpected_now = self.proto.matcher.unexpected_len() as u64;
        if let Some(tcp) = &self.net.tcp {
            c.add_compression(tcp.compression_stats());
        }
        c
    }

    /// The shm eager limit in effect (the configured one, capped by what a ring frame holds).
    pub(crate) fn shm_eager_limit(&self) -> usize {
        self.shm_eager_limit
    }

    /// The smallest eager limit of any route for sends in `mode`: messages up to it go eagerly
    /// wherever they go.
    pub(crate) fn eager_floor(&self, mode: SendMode) -> usize {
        let limit = |route| match mode {
            SendMode::Eager => self.frame_limit(route),
            _ => self.eager_limit(route),
        };
        let fabric = match self.net.fabric {
            Some(_) => limit(Route::Fabric),
            None => usize::MAX,
        };
        limit(Route::Shm).min(limit(Route::Tcp)).min(fabric)
    }

    fn eager_limit(&self, route: Route) -> usize {
        match route {
            Route::Loopback => 64 << 10,
            Route::Shm => self.shm_eager_limit,
            Route::Tcp => self.tcp_eager_limit,
            Route::Fabric => (self.net.fabric.as_ref()).map_or(0, FabricTransport::eager_limit),
        }
    }

    /// One pass over every transport, and `hook`'s. Returns whether anything moved.
    pub(crate) fn progress(&mut self, hook: &mut impl Hook) -> Result<bool, Error> {
        self.progress_looking(hook, true)
    }

    /// `progress`, polling TCP only if `tcp` (a look of a wait may leave it out).
    #[inline]
    fn progress_looking(&mut self, hook: &mut impl Hook, tcp: bool) -> Result<bool, Error> {
        if self.idle(tcp) && !hook.wants_pass(self.proto.completions) {
            return Ok(false);
        }
        self.progress_pass(hook, tcp)
    }

    /// Whether a progress pass would find nothing in the engine: no TCP to poll (or `tcp`
    /// false), nothing queued to send, and no record in any ring. A wait calls `progress` in a
    /// tight loop, and this look costs a fraction of a full pass.
    #[inline]
    fn idle(&mut self, tcp: bool) -> bool {
        (self.net.tcp.is_none() || !tcp)
            && self.net.fabric.is_none()
            && self.proto.loopback.is_empty()
            && self.proto.active_out.is_empty()
            && self.proto.busy.is_empty()
            && self.proto.shared_pulls.is_empty()
            && !self.net.shm.as_mut().is_some_and(ShmTransport::any_ready)
            && !self.faults.as_ref().is_some_and(|f| f.due(tcp))
    }
}

mod active;
mod agreement;
mod fabric;
mod failure;
mod hook;
mod incoming;
mod outq;
mod peer;
mod progress;
mod proto;
mod rails;
mod recv;
mod request;
mod send;
mod sink;
use sink::RingSink;
mod wait;

use crate::frames::{Arrival, EagerTake, FabricRead, FrameSink, Incoming, OutFrame, Transport};
pub(crate) use active::ActiveFn;
pub use active::ActiveReply;
use fabric::FabricWork;
pub(crate) use failure::faulted;
#[cfg(test)]
use failure::FAULT_CONTEXT;
pub(crate) use hook::{Hook, NoHook};
pub(crate) use incoming::{Announced, Unexpected};
use outq::{non_null_if_empty, ordered_frame, Out};
use peer::{Lanes, Link, Peer};
pub(crate) use request::Completion;
pub use request::Fault;
use request::{copy_kept, ReqState, Requests};
pub(crate) use wait::Watch;

#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod over_tcp;
#[cfg(test)]
pub(crate) mod pair;
#[cfg(test)]
mod tests;
