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

use crate::error::Error;
use crate::matching::{Envelope, Matcher, Pattern};
use crate::rails::{RailLoad, Striper};
use crate::raw::SendMode;
use crate::shm::{cma_read, cma_write, ShmTransport, Sleep};
use crate::tcp::TcpTransport;
use ferry_wire::rendezvous::{share_split, RendezvousRecv, RendezvousSend};
use ferry_wire::{Frame, HEADER_LEN};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Identifies a request: slot index in the low 32 bits, slot generation in the high 32.
pub(crate) type ReqId = u64;

/// How frames reach a peer, chosen once when the job starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Ourselves: frames go through an in-memory queue.
    Loopback,
    /// A shared-memory ring.
    Shm,
    /// A TCP connection.
    Tcp,
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

/// Copies a kept message (`data`, which came with `env`) into `cap` bytes at `buf`; what its
/// receive completes with.
///
/// # Safety
/// `buf` is non-null and valid for writes of `cap` bytes.
unsafe fn copy_kept(env: Envelope, data: &[u8], buf: *mut u8, cap: usize) -> Completion {
    let n = data.len().min(cap);
    // SAFETY: the caller's promise; `data` holds at least `n` bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, n) };
    Completion {
        source: env.source,
        tag: env.tag,
        len: n,
        message_len: data.len(),
        cancelled: false,
    }
}

/// How a finished request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Completion {
    /// World rank of the sender (receives only).
    pub source: u32,
    pub tag: i32,
    /// Bytes delivered into the buffer.
    pub len: usize,
    /// Bytes the sender sent; larger than `len` means truncation.
    pub message_len: usize,
    pub cancelled: bool,
}

enum ReqState {
    Free,
    SendEager,
    SendRendezvous {
        machine: RendezvousSend,
        buf: *const u8,
        dest: u32,
    },
    RecvPosted {
        buf: *mut u8,
        cap: usize,
    },
    RecvRendezvous {
        machine: RendezvousRecv,
        buf: *mut u8,
        env: Envelope,
        message_len: usize,
    },
    /// A collective schedule running in `Engine::collectives`.
    Collective,
    Done(Completion),
}

struct Slot {
    generation: u32,
    state: ReqState,
}

/// Request slots, reused without allocation once warm.
struct Requests {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Requests {
    fn insert(&mut self, state: ReqState) -> ReqId {
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot {
                generation: 0,
                state: ReqState::Free,
            });
            self.slots.len() as u32 - 1
        });
        let slot = &mut self.slots[index as usize];
        slot.state = state;
        (u64::from(slot.generation) << 32) | u64::from(index)
    }

    fn get_mut(&mut self, id: ReqId) -> Option<&mut ReqState> {
        let slot = self.slots.get_mut((id & 0xffff_ffff) as usize)?;
        (u64::from(slot.generation) == id >> 32 && !matches!(slot.state, ReqState::Free))
            .then_some(&mut slot.state)
    }

    fn get(&self, id: ReqId) -> Option<&ReqState> {
        let slot = self.slots.get((id & 0xffff_ffff) as usize)?;
        (u64::from(slot.generation) == id >> 32 && !matches!(slot.state, ReqState::Free))
            .then_some(&slot.state)
    }

    fn remove(&mut self, id: ReqId) {
        let index = (id & 0xffff_ffff) as u32;
        if let Some(slot) = self.slots.get_mut(index as usize) {
            if u64::from(slot.generation) == id >> 32 {
                slot.state = ReqState::Free;
                slot.generation = slot.generation.wrapping_add(1);
                self.free.push(index);
            }
        }
    }
}

/// A frame waiting for its turn on a peer's channel.
pub(crate) struct OutFrame {
    pub header: [u8; HEADER_LEN],
    pub payload: *const u8,
    pub len: usize,
    /// Bytes of header + payload written so far (TCP writes may be partial).
    pub sent: usize,
    /// Send request that completes when this frame is fully written.
    pub complete: Option<ReqId>,
    /// The payload's own copy, for chunks sent again after a rail failed (the request may
    /// complete, and its buffer go, before the copy is written), or the bytes of an owned
    /// message (`Engine::send_owned`). Only held: `payload` points into it.
    #[allow(dead_code)]
    pub owned: Option<Box<[u8]>>,
}

// Sizes of what every message touches (x86-64): a queued frame, a request's slot and what a
// finished request reports. A field added to one of them costs every send and receive.
const _: () = assert!(std::mem::size_of::<OutFrame>() <= 96);
const _: () = assert!(std::mem::size_of::<Slot>() <= 112);
const _: () = assert!(std::mem::size_of::<Completion>() <= 32);

/// An empty buffer may come as a null pointer (MPI allows it); copies and slices need non-null.
fn non_null_if_empty(buf: *mut u8, len: usize) -> *mut u8 {
    if len == 0 {
        std::ptr::NonNull::<u8>::dangling().as_ptr()
    } else {
        buf
    }
}

/// An ordered frame (not DATA, not RAIL_DOWN): counted and kept for sending again over rails.
fn ordered_frame(frame: &OutFrame) -> bool {
    Frame::decode(&frame.header, u64::MAX).is_ok_and(|f| f.is_ordered())
}

impl OutFrame {
    /// A copy that owns its payload and completes nothing, to be written again.
    fn copy(&self) -> OutFrame {
        // SAFETY: `payload` is valid for `len` bytes while the frame is (its request has not
        // completed before the frame was fully written, which is when copies are taken).
        let bytes: Box<[u8]> = unsafe { std::slice::from_raw_parts(self.payload, self.len) }.into();
        OutFrame {
            header: self.header,
            payload: bytes.as_ptr(),
            len: self.len,
            sent: 0,
            complete: None,
            owned: Some(bytes),
        }
    }

    fn control(frame: Frame) -> OutFrame {
        OutFrame {
            header: frame.to_bytes(),
            // Never dereferenced for len 0, but slices are built from it: it must not be null.
            payload: std::ptr::NonNull::<u8>::dangling().as_ptr(),
            len: 0,
            sent: 0,
            complete: None,
            owned: None,
        }
    }
}

enum Out {
    Frame(OutFrame),
    /// A rendezvous whose DATA chunks are cut when they reach the head of the queue.
    Stream(ReqId),
}

/// What an RTS announced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Announced {
    pub(crate) len: u64,
    send_id: u64,
    source_addr: u64,
}

/// Unmatched message kept until a receive asks for it.
pub(crate) enum Unexpected {
    Eager(Vec<u8>),
    Rts(Announced),
}

enum Arrival {
    Control,
    /// A chunk sent again for a receive that is already complete: read and dropped.
    Discard,
    EagerMatched(ReqId, Envelope),
    EagerKept(Envelope, Vec<u8>),
    Data(ReqId),
}

/// Where the payload of an arriving frame goes. Bytes past `cap` are dropped (truncation).
pub(crate) struct Incoming {
    ptr: *mut u8,
    cap: usize,
    arrival: Arrival,
}

impl Incoming {
    fn control() -> Incoming {
        Incoming {
            ptr: std::ptr::null_mut(),
            cap: 0,
            arrival: Arrival::Control,
        }
    }

    /// Stores payload bytes that start at `offset` of the frame's payload.
    pub(crate) fn store(&mut self, offset: usize, bytes: &[u8]) {
        let room = self.direct_room(offset);
        let n = room.min(bytes.len());
        if n > 0 {
            // SAFETY: `ptr` is valid for `cap` bytes (a receive buffer lent until completion,
            // or the Vec held in `arrival`), and offset + n ≤ cap.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(offset), n) };
        }
    }

    /// Bytes of the destination left from `offset` on.
    pub(crate) fn direct_room(&self, offset: usize) -> usize {
        self.cap.saturating_sub(offset)
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The posted receive an eager frame matched, if it did.
    fn matched(&self) -> Option<ReqId> {
        match self.arrival {
            Arrival::EagerMatched(id, _) => Some(id),
            _ => None,
        }
    }
}

/// An active-message handler: called by the engine, inside its own progress, for every whole
/// message that arrives on the context it is registered for (instead of queueing it for a
/// receive). It gets the sender's world rank, the tag and the payload, and may push replies;
/// it must not call back into the engine (the engine is borrowed while it runs).
pub(crate) type ActiveFn = Box<dyn FnMut(u32, i32, &[u8], &mut Vec<ActiveReply>)>;

/// A reply an active-message handler queues: an eager message with an owned payload, sent on
/// the handler's context once the frame being read is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveReply {
    /// World rank of the destination.
    pub dest: u32,
    /// Message tag.
    pub tag: i32,
    /// The payload; at most the engine's active limit for `dest`.
    pub data: Vec<u8>,
}

/// What transports call for every frame that arrives.
pub(crate) trait FrameSink {
    /// A header arrived; returns where its payload goes.
    fn begin_frame(&mut self, peer: u32, frame: &Frame) -> Result<Incoming, Error>;
    /// All payload bytes of `frame` are stored.
    fn end_frame(&mut self, peer: u32, frame: &Frame, incoming: Incoming) -> Result<(), Error>;
    /// Rails of `peer` that a RAIL_DOWN closed, with its `seq`: the transport reads what each
    /// still holds, closes it, and then calls [`FrameSink::drained`].
    fn take_drains(&mut self, _peer: u32) -> Vec<(u16, u64)> {
        Vec::new()
    }
    /// The rail of a RAIL_DOWN with `seq` is read to its end: ordered frames from number `seq`
    /// on that arrived already are dropped when they come again.
    fn drained(&mut self, _peer: u32, _seq: u64) {}
    /// Whether `peer` said BYE: the end of its connection is then no failure.
    fn departed(&self, _peer: u32) -> bool {
        false
    }
}

/// The protocol's state for one peer (a universe rank). Every peer has one, made at once, so
/// that a peer is never in one table and missing from another.
struct Peer {
    /// How frames reach it, chosen once when it became known.
    route: Route,
    /// Its process id, 0 while unknown: single-copy (CMA) reads and writes name it, and so
    /// does the error when it is lost.
    pid: u32,
    /// Frames waiting for their turn on its channel.
    outq: VecDeque<Out>,
    /// Whether it is on `Proto::busy`.
    queued: bool,
    /// Whether it said BYE: the end of its connection is orderly (another world's processes
    /// finalize and exit on their own).
    departed: bool,
    /// Whether a pull has read its memory once: only such peers are asked to share a copy, so
    /// a kernel that refuses CMA is found out before a copy depends on it.
    cma_proven: bool,
    /// Rendezvous sends to it not yet complete. A receiver that is also sending a large
    /// message to its sender (an exchange) pulls alone: both cores copy already, and sharing
    /// would only add a round trip.
    large_out: u32,
    /// Ordered frames taken from it (multi-rail only).
    ordered_in: u64,
    /// Ordered frames from it still to drop: sent again after a rail failed, but already
    /// taken from that rail.
    skip: u64,
}

impl Peer {
    fn new(route: Route, pid: u32) -> Peer {
        Peer {
            route,
            pid,
            outq: VecDeque::new(),
            queued: false,
            departed: false,
            cma_proven: false,
            large_out: 0,
            ordered_in: 0,
            skip: 0,
        }
    }
}

// Every send looks at its peer's route and queue: one cache line holds them, and a power of
// two apart, finding a peer is one shift.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Peer>() == 64);

/// The protocol half of the engine.
pub(crate) struct Proto {
    pub me: u32,
    /// Per peer, indexed by universe rank (see [`Peer`]).
    peers: Vec<Peer>,
    /// TCP rails per peer pair (1: no rails).
    pub rails: usize,
    /// Requests completed so far: running collectives need advancing only when it moved.
    pub completions: u64,
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

/// The runtime of one rank: protocol state plus the transports that carry it.
pub(crate) struct Engine {
    pub proto: Proto,
    /// Collectives in progress, advanced by every `progress` call.
    pub(crate) collectives: Vec<crate::coll::Collective>,
    /// `proto.completions` when the running collectives were last advanced.
    pub(crate) collectives_seen: u64,
    /// Receives of redundant copies (two-tree broadcasts) with the buffers they land in.
    pub(crate) drains: Vec<(ReqId, Vec<u8>)>,
    /// Allocations of finished collectives for the next ones.
    pub(crate) spare: crate::coll::Spare,
    shm: Option<ShmTransport>,
    /// Set with [`Engine::add_tcp`], which also makes the doorbell.
    pub(crate) tcp: Option<TcpTransport>,
    /// With both transports, shared-memory peers wake this rank's sleep in TCP's epoll through
    /// its doorbell (see `crate::shm`); false if it could not be made.
    doorbell: bool,
    /// Looks of waits since TCP was last polled (see `Engine::wait_pass`).
    looks_without_tcp: u32,
    shm_eager_limit: usize,
    tcp_eager_limit: usize,
    shm_chunk: usize,
    tcp_chunk: usize,
    spin: u32,
    /// The spin's polls yield the core in between (`FERRY_SPIN_YIELD`).
    spin_yield: bool,
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
}

/// The engine's state for one peer, beside the protocol's [`Peer`].
struct Link {
    /// The payload length of the record held at the head of its shared-memory ring, which
    /// `progress` leaves there until [`Engine::release_in_place`]. A `u32` (a larger payload
    /// is copied out instead) keeps a link at 16 bytes, which the ring loop of
    /// `Engine::progress_pass` finds with the shift it uses for the rings.
    held: Option<u32>,
    /// Its rails, for a peer reached over several TCP rails (else `None`). Boxed: most peers
    /// have none, and the loops over peers stay short.
    lanes: Option<Box<Lanes>>,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Link>() == 16);

impl Link {
    fn new(route: Route, rails: usize, policy: crate::config::RailPolicy) -> Link {
        Link {
            held: None,
            lanes: (rails > 1 && route == Route::Tcp).then(|| Box::new(Lanes::new(rails, policy))),
        }
    }
}

/// What the rails to one peer are doing.
struct Lanes {
    /// The frame each rail is writing; rail 0's is an ordered frame or a chunk.
    writing: Vec<Option<OutFrame>>,
    alive: Vec<bool>,
    /// Sends whose chunks are being handed out, oldest first.
    striped: VecDeque<ReqId>,
    /// Chunks of failed rails to send again: (send, offset, length).
    resend: VecDeque<(ReqId, u64, u64)>,
    /// Chunks each rail carried, kept until their send is acknowledged.
    carried: Vec<Vec<(ReqId, u64, u64)>>,
    /// The rail of the message below the striping size being handed out.
    pinned: Option<(ReqId, usize)>,
    striper: Striper,
    /// The rail that carries the ordered frames: the first that works.
    ordered: usize,
    /// Ordered frames written so far.
    sent_seq: u64,
    /// Copies of the ordered frames written but not yet acknowledged by the peer's TCP, with
    /// the rail's byte count at each one's end: sent again if that rail fails.
    retained: VecDeque<(u64, OutFrame)>,
}

impl Lanes {
    fn new(rails: usize, policy: crate::config::RailPolicy) -> Lanes {
        Lanes {
            writing: (0..rails).map(|_| None).collect(),
            alive: vec![true; rails],
            striped: VecDeque::new(),
            resend: VecDeque::new(),
            carried: vec![Vec::new(); rails],
            pinned: None,
            ordered: 0,
            sent_seq: 0,
            retained: VecDeque::new(),
            striper: Striper::new(policy, rails),
        }
    }

    fn idle(&self) -> bool {
        self.striped.is_empty()
            && self.resend.is_empty()
            && self.writing.iter().all(Option::is_none)
    }
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
            collectives: Vec::new(),
            collectives_seen: 0,
            drains: Vec::new(),
            spare: crate::coll::Spare::default(),
            proto: Proto {
                me: setup.me,
                peers,
                rails,
                rail_down: Vec::new(),
                completions: 0,
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
            },
            shm_eager_limit: setup.shm_eager_limit.min(shm_max),
            shm_chunk: shm_max / 2,
            shm: setup.shm,
            tcp: None,
            doorbell: false,
            looks_without_tcp: 0,
            tcp_eager_limit: setup.tcp_eager_limit,
            tcp_chunk: setup.tcp_chunk,
            spin: setup.spin,
            spin_yield: setup.spin_yield,
            nap: Duration::from_millis(20),
            rail_policy: setup.rail_policy,
            rail_stripe: setup.rail_stripe as u64,
            started: Instant::now(),
            in_place: Vec::new(),
            links,
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
        if let Some(shm) = self.shm.as_ref() {
            match shm
                .doorbell()
                .map_err(|e| Error::Transport(format!("cannot bind the doorbell: {e}")))
                .and_then(|bell| tcp.watch_doorbell(bell))
            {
                Ok(()) => self.doorbell = true,
                Err(e) => eprintln!(
                    "ferry: rank {}: {e}; a wait with TCP open looks for shared-memory messages every 1 ms",
                    self.proto.me
                ),
            }
        }
        self.tcp = Some(tcp);
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
        if let Some(t) = self.tcp.as_mut() {
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
        if let Some(t) = self.tcp.as_mut() {
            for peer in t.take_closed() {
                if let Some(p) = self.proto.peers.get_mut(peer as usize) {
                    p.outq.clear();
                    p.departed = true;
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
            if self.tcp.as_ref().is_some_and(|t| t.has_conn(peer as usize)) {
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
        c
    }

    /// The shm eager limit in effect (the configured one, capped by what a ring frame holds).
    pub(crate) fn shm_eager_limit(&self) -> usize {
        self.shm_eager_limit
    }

    /// The smallest eager limit of any route: messages up to it go eagerly wherever they go.
    pub(crate) fn eager_floor(&self) -> usize {
        self.shm_eager_limit.min(self.tcp_eager_limit)
    }

    fn eager_limit(&self, route: Route) -> usize {
        match route {
            Route::Loopback => 64 << 10,
            Route::Shm => self.shm_eager_limit,
            Route::Tcp => self.tcp_eager_limit,
        }
    }

    /// Writes a small message straight into the peer's shared-memory ring when nothing waits
    /// before it there. `true` means it went out: the buffer is free again and there is no
    /// request to track (collective steps try this before [`Engine::isend`]).
    pub(crate) fn send_eager_now(
        &mut self,
        context: u32,
        dest: u32,
        tag: i32,
        buf: *const u8,
        len: usize,
    ) -> bool {
        let p = dest as usize;
        let peer = &self.proto.peers[p];
        if peer.route != Route::Shm || len > self.shm_eager_limit || !peer.outq.is_empty() {
            return false;
        }
        let Some(shm) = self.shm.as_mut() else {
            return false;
        };
        let header = Frame::Eager {
            context,
            tag,
            len: len as u64,
        }
        .to_bytes();
        let buf = non_null_if_empty(buf as *mut u8, len) as *const u8;
        let pushed = shm.try_push(p, &header, buf, len);
        if pushed {
            self.proto.counters.sent(len, true);
        }
        pushed
    }

    /// Reserves, in the shared-memory ring to world rank `dest`, the payload of an eager
    /// message written later in place: up to `want` bytes (at least `min`), when `dest` is on
    /// shared memory, nothing is queued to it and the ring has the room now; else `None`.
    /// The message takes its place in the order of messages to `dest` now: sends started
    /// before [`Engine::publish_eager`] or [`Engine::abandon_eager`] queue behind it.
    pub(crate) fn reserve_eager(
        &mut self,
        dest: u32,
        want: usize,
        min: usize,
    ) -> Option<(*mut u8, usize)> {
        let p = dest as usize;
        if !self
            .proto
            .peers
            .get(p)
            .is_some_and(|peer| peer.route == Route::Shm && peer.outq.is_empty())
        {
            return None;
        }
        let want = want.min(self.active_limit(dest));
        self.shm.as_mut()?.reserve(p, want, min)
    }

    /// Makes the message reserved to `dest` visible as an eager message of `len` bytes on
    /// `context` with `tag`, then writes what queued behind it. False if nothing was reserved
    /// or `len` exceeds the reservation (it then stays reserved).
    pub(crate) fn publish_eager(&mut self, context: u32, dest: u32, tag: i32, len: usize) -> bool {
        let header = Frame::Eager {
            context,
            tag,
            len: len as u64,
        }
        .to_bytes();
        let Some(shm) = self.shm.as_mut() else {
            return false;
        };
        if !shm.publish(dest as usize, &header, len) {
            return false;
        }
        self.proto.counters.sent(len, true);
        // A shared-memory flush cannot fail; what it cannot write now, progress writes later.
        let _ = self.flush_peer(dest);
        true
    }

    /// Gives back a reservation to `dest` unpublished; what queued behind it flows again.
    pub(crate) fn abandon_eager(&mut self, dest: u32) {
        if let Some(shm) = self.shm.as_mut() {
            shm.abandon(dest as usize);
            let _ = self.flush_peer(dest);
        }
    }

    /// Starts a send of `len` bytes at `buf` to world rank `dest`. A synchronous send always
    /// takes the rendezvous path, so it completes only once the receiver has matched it; an
    /// eager one goes eagerly if one frame can carry it.
    pub(crate) fn isend(
        &mut self,
        context: u32,
        dest: u32,
        tag: i32,
        buf: *const u8,
        len: usize,
        mode: SendMode,
    ) -> Result<ReqId, Error> {
        let route = self.proto.peers[dest as usize].route;
        // An empty message may come with a null buffer (MPI_Send(NULL, 0, …)); slices are built
        // from the pointer, which must then not be null.
        let buf = non_null_if_empty(buf as *mut u8, len) as *const u8;
        let eager = match mode {
            SendMode::Standard => len <= self.eager_limit(route),
            SendMode::Synchronous => false,
            SendMode::Eager => len <= self.active_limit(dest),
        };
        self.proto.counters.sent(len, eager);
        if eager {
            let frame = Frame::Eager {
                context,
                tag,
                len: len as u64,
            };
            if route == Route::Loopback {
                // SAFETY: the caller lends `buf` for `len` bytes for the duration of the call.
                let data = unsafe { std::slice::from_raw_parts(buf, len) }.to_vec();
                self.proto.loopback.push_back((frame, data));
                return Ok(self.proto.requests.insert(ReqState::Done(Proto::sent(len))));
            }
            let id = self.proto.requests.insert(ReqState::SendEager);
            self.proto.push_out(
                dest,
                Out::Frame(OutFrame {
                    header: frame.to_bytes(),
                    payload: buf,
                    len,
                    sent: 0,
                    complete: Some(id),
                    owned: None,
                }),
            );
            self.flush_peer(dest)?;
            return Ok(id);
        }
        let id = self.proto.requests.insert(ReqState::SendEager);
        let mut machine = RendezvousSend::new(id, len as u64);
        if self.proto.acknowledged(dest) {
            machine = machine.acknowledged();
        }
        let pull_ok = route == Route::Loopback || (route == Route::Shm && self.proto.cma);
        let rts = machine.rts(context, tag, if pull_ok { buf as u64 } else { 0 });
        if let Some(state) = self.proto.requests.get_mut(id) {
            *state = ReqState::SendRendezvous { machine, buf, dest };
            self.proto.peers[dest as usize].large_out += 1;
        }
        if route == Route::Loopback {
            self.proto.loopback.push_back((rts, Vec::new()));
        } else {
            self.proto
                .push_out(dest, Out::Frame(OutFrame::control(rts)));
            self.flush_peer(dest)?;
        }
        Ok(id)
    }

    /// Registers `handler` for every message arriving on `context` from now on (replacing any
    /// handler it had). Messages already queued on it stay where they are.
    pub(crate) fn set_active(&mut self, context: u32, handler: ActiveFn) {
        self.proto.active.retain(|(c, _)| *c != context);
        self.proto.active.push((context, handler));
    }

    /// Removes the handler of `context`, if any, and returns it.
    pub(crate) fn clear_active(&mut self, context: u32) -> Option<ActiveFn> {
        let i = self.proto.active.iter().position(|(c, _)| *c == context)?;
        Some(self.proto.active.remove(i).1)
    }

    /// Largest payload of an owned message ([`Engine::send_owned`]) to world rank `dest`: what
    /// one eager frame on its route may carry.
    pub(crate) fn active_limit(&self, dest: u32) -> usize {
        match self.proto.peers.get(dest as usize).map(|p| p.route) {
            Some(Route::Loopback) => 1 << 20,
            Some(Route::Shm) => self.shm_chunk.max(self.shm_eager_limit),
            Some(Route::Tcp) => self.tcp_chunk.max(self.tcp_eager_limit),
            None => 0,
        }
    }

    /// Queues `data` as one eager message to world rank `dest`; the engine owns the bytes, so
    /// there is no request to complete. Fails if it exceeds [`Engine::active_limit`].
    pub(crate) fn send_owned(
        &mut self,
        context: u32,
        dest: u32,
        tag: i32,
        data: Vec<u8>,
    ) -> Result<(), Error> {
        let size = self.proto.peer_count();
        if dest as usize >= size {
            return Err(Error::RankOutOfRange {
                rank: dest as usize,
                size,
            });
        }
        let limit = self.active_limit(dest);
        if data.len() > limit {
            return Err(Error::BufferTooSmall {
                what: format!("an eager frame to rank {dest}"),
                needed: data.len(),
                got: limit,
            });
        }
        let frame = Frame::Eager {
            context,
            tag,
            len: data.len() as u64,
        };
        self.proto.counters.sent(data.len(), true);
        if self.proto.peers[dest as usize].route == Route::Loopback {
            self.proto.loopback.push_back((frame, data));
            return Ok(());
        }
        let bytes: Box<[u8]> = data.into_boxed_slice();
        let payload = non_null_if_empty(bytes.as_ptr() as *mut u8, bytes.len()) as *const u8;
        self.proto.push_out(
            dest,
            Out::Frame(OutFrame {
                header: frame.to_bytes(),
                payload,
                len: bytes.len(),
                sent: 0,
                complete: None,
                owned: Some(bytes),
            }),
        );
        self.flush_peer(dest).map(|_| ())
    }

    /// Sends the replies the active-message handlers queued.
    fn send_active_replies(&mut self) -> Result<bool, Error> {
        if self.proto.active_out.is_empty() {
            return Ok(false);
        }
        for (context, reply) in std::mem::take(&mut self.proto.active_out) {
            self.send_owned(context, reply.dest, reply.tag, reply.data)?;
        }
        Ok(true)
    }

    /// Posts a receive into `cap` bytes at `buf`; `None` source or tag are wildcards.
    pub(crate) fn irecv(
        &mut self,
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
        buf: *mut u8,
        cap: usize,
    ) -> Result<ReqId, Error> {
        let buf = non_null_if_empty(buf, cap);
        let pattern = Pattern {
            context,
            source,
            tag,
        };
        match self.proto.matcher.take_unexpected(&pattern) {
            Some(message) => self.recv_message(message, buf, cap),
            None => Ok(self.post_recv(pattern, buf, cap)),
        }
    }

    fn post_recv(&mut self, pattern: Pattern, buf: *mut u8, cap: usize) -> ReqId {
        let id = self
            .proto
            .requests
            .insert(ReqState::RecvPosted { buf, cap });
        self.proto.matcher.push_posted(pattern, id);
        id
    }

    /// Receives the message `(context, source, tag)` into `cap` bytes at `buf` if it has
    /// arrived: from the unexpected queue (a rendezvous one as a request that goes on), or as
    /// the next record of `source`'s shared-memory ring, read straight into `buf` without
    /// going through matching. That it is the next record there means no earlier message of
    /// that pair is waiting; a caller takes this path only for a pattern no posted receive may
    /// also match (one source, one tag, of a collective's context). `None` when it has not
    /// arrived yet.
    pub(crate) fn take_arrived(
        &mut self,
        context: u32,
        source: u32,
        tag: i32,
        buf: *mut u8,
        cap: usize,
    ) -> Result<Option<Received>, Error> {
        let buf = non_null_if_empty(buf, cap);
        let pattern = Pattern {
            context,
            source: Some(source),
            tag: Some(tag),
        };
        if let Some(message) = self.proto.matcher.take_unexpected(&pattern) {
            return self.receive_taken(message, buf, cap).map(Some);
        }
        let peer = source as usize;
        if self.proto.peers[peer].route != Route::Shm || self.links[peer].held.is_some() {
            return Ok(None);
        }
        let Some(shm) = self.shm.as_mut() else {
            return Ok(None);
        };
        let Some(record) = shm.peek(peer) else {
            return Ok(None);
        };
        let frame =
            Frame::decode(&record.header, u64::MAX).map_err(|e| protocol_error(source, e))?;
        let Frame::Eager {
            context: c,
            tag: t,
            len,
        } = frame
        else {
            return Ok(None);
        };
        if c != context || t != tag || self.proto.is_active(context) {
            return Ok(None);
        }
        let (len, n) = (len as usize, (len as usize).min(cap));
        if n > 0 {
            record.copy_payload(0, buf, n);
        }
        shm.pop(peer, len);
        self.proto.counters.received(len as u64);
        Ok(Some(Received::Now(Completion {
            source,
            tag,
            len: n,
            message_len: len,
            cancelled: false,
        })))
    }

    /// As [`Engine::irecv`] from one source with one tag, but a message that has arrived
    /// eagerly is received at once, without a request.
    pub(crate) fn recv_now_or_post(
        &mut self,
        context: u32,
        source: u32,
        tag: i32,
        buf: *mut u8,
        cap: usize,
    ) -> Result<Received, Error> {
        let buf = non_null_if_empty(buf, cap);
        let pattern = Pattern {
            context,
            source: Some(source),
            tag: Some(tag),
        };
        match self.proto.matcher.take_unexpected(&pattern) {
            Some(message) => self.receive_taken(message, buf, cap),
            None => Ok(Received::Later(self.post_recv(pattern, buf, cap))),
        }
    }

    /// Receives a message taken off the unexpected queue into `cap` bytes at `buf` (non-null):
    /// at once if it came eagerly, else (rendezvous) as a request that goes on.
    fn receive_taken(
        &mut self,
        (env, body): (Envelope, Unexpected),
        buf: *mut u8,
        cap: usize,
    ) -> Result<Received, Error> {
        match body {
            Unexpected::Eager(data) => {
                // SAFETY: the caller lends `buf` for `cap` bytes.
                let done = unsafe { copy_kept(env, &data, buf, cap) };
                self.proto.recycle_kept(data);
                Ok(Received::Now(done))
            }
            rts => self.recv_message((env, rts), buf, cap).map(Received::Later),
        }
    }

    /// As [`Engine::irecv`] from one source, but an eager payload that arrives whole through
    /// shared memory may stay in the ring instead of being copied to `buf`:
    /// [`Engine::in_place`] says where, and the peer's later messages wait behind it until
    /// [`Engine::release_in_place`], which every such receive needs once it is done.
    pub(crate) fn irecv_in_place(
        &mut self,
        context: u32,
        source: u32,
        tag: Option<i32>,
        buf: *mut u8,
        cap: usize,
    ) -> Result<ReqId, Error> {
        let id = self.irecv(context, Some(source), tag, buf, cap)?;
        if !self.proto.is_done(id) && self.proto.peers[source as usize].route == Route::Shm {
            self.in_place.push((id, None));
        }
        Ok(id)
    }

    /// The payload a finished [`Engine::irecv_in_place`] left in the ring, if it did (else it
    /// is in the receive's buffer). Valid until [`Engine::release_in_place`].
    pub(crate) fn in_place(&mut self, id: ReqId) -> Option<(*const u8, usize)> {
        let peer = self.in_place.iter().find(|(r, _)| *r == id)?.1? as usize;
        let len = self.links[peer].held? as usize;
        let record = self.shm.as_mut()?.peek(peer)?;
        Some((record.payload_in_place(len)?, len))
    }

    /// Ends an [`Engine::irecv_in_place`] (done, cancelled or taken): frees the ring space its
    /// payload holds, and the peer's messages behind it flow again.
    pub(crate) fn release_in_place(&mut self, id: ReqId) {
        let Some(i) = self.in_place.iter().position(|(r, _)| *r == id) else {
            return;
        };
        if let (_, Some(peer)) = self.in_place.swap_remove(i) {
            let peer = peer as usize;
            if let (Some(len), Some(shm)) = (self.links[peer].held.take(), self.shm.as_mut()) {
                shm.pop(peer, len as usize);
            }
        }
    }

    /// Receives a message already taken off the unexpected queue into `cap` bytes at `buf`.
    pub(crate) fn recv_message(
        &mut self,
        (env, body): (Envelope, Unexpected),
        buf: *mut u8,
        cap: usize,
    ) -> Result<ReqId, Error> {
        let buf = non_null_if_empty(buf, cap);
        let id = self
            .proto
            .requests
            .insert(ReqState::RecvPosted { buf, cap });
        match body {
            Unexpected::Eager(data) => {
                self.proto.deliver_kept(id, env, &data);
                self.proto.recycle_kept(data);
            }
            Unexpected::Rts(rts) => {
                self.proto.start_rendezvous_recv(id, env, rts, buf, cap);
                self.flush_peer(env.source)?;
            }
        }
        Ok(id)
    }

    /// Takes the earliest unexpected message matching the pattern off the queue, so that no
    /// other receive can match it (MPI's matched probe); progress is made once if none is there.
    /// (A blocking probe waits for a match first: `Shared::wait_until` with `Proto::has_match`.)
    pub(crate) fn take_message(
        &mut self,
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
    ) -> Result<Option<(Envelope, Unexpected)>, Error> {
        let pattern = Pattern {
            context,
            source,
            tag,
        };
        if self.proto.peek(&pattern).is_none() {
            self.progress()?;
        }
        Ok(self.proto.matcher.take_unexpected(&pattern))
    }

    /// The earliest unmatched message a receive with this pattern would get: (envelope, length).
    pub(crate) fn iprobe(
        &mut self,
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
    ) -> Result<Option<(Envelope, usize)>, Error> {
        let pattern = Pattern {
            context,
            source,
            tag,
        };
        if self.proto.peek(&pattern).is_none() {
            self.progress()?;
        }
        Ok(self.proto.peek(&pattern))
    }

    /// Withdraws a receive that has not matched yet; a matched one completes normally.
    pub(crate) fn cancel(&mut self, id: ReqId) {
        if self.proto.matcher.cancel_posted(id) {
            self.proto.complete(
                id,
                Completion {
                    source: 0,
                    tag: 0,
                    len: 0,
                    message_len: 0,
                    cancelled: true,
                },
            );
        }
    }

    /// Takes the completion of a finished request and frees its slot.
    pub(crate) fn take(&mut self, id: ReqId) -> Option<Completion> {
        match self.proto.requests.get(id) {
            Some(&ReqState::Done(c)) => {
                self.proto.requests.remove(id);
                Some(c)
            }
            _ => None,
        }
    }

    /// One pass over every transport. Returns whether anything moved.
    pub(crate) fn progress(&mut self) -> Result<bool, Error> {
        self.progress_looking(true)
    }

    /// `progress`, polling TCP only if `tcp` (a look of a wait may leave it out).
    #[inline]
    fn progress_looking(&mut self, tcp: bool) -> Result<bool, Error> {
        if self.idle(tcp) {
            return Ok(false);
        }
        self.progress_pass(tcp)
    }

    /// Whether a progress pass would find nothing: no TCP to poll (or `tcp` false), nothing
    /// queued to send or to run, no collective that can move, and no record in any ring. A
    /// wait calls `progress` in a tight loop, and this look costs a fraction of a full pass.
    #[inline]
    fn idle(&mut self, tcp: bool) -> bool {
        (self.tcp.is_none() || !tcp)
            && self.proto.loopback.is_empty()
            && self.proto.active_out.is_empty()
            && self.proto.busy.is_empty()
            && self.proto.shared_pulls.is_empty()
            && self.drains.is_empty()
            && !self.collectives_can_move()
            && !self.shm.as_mut().is_some_and(ShmTransport::any_ready)
    }

    // Kept out of line so that `progress`'s idle look needs no large stack frame.
    #[inline(never)]
    fn progress_pass(&mut self, poll_tcp: bool) -> Result<bool, Error> {
        let mut progressed = false;
        while let Some((frame, data)) = self.proto.loopback.pop_front() {
            progressed = true;
            let me = self.proto.me;
            let mut incoming = self.proto.begin_frame(me, &frame)?;
            incoming.store(0, &data);
            self.proto.end_frame(me, &frame, incoming)?;
        }
        if let Some(shm) = self.shm.as_mut() {
            let mut next = 0;
            while let Some(peer) = shm.local_peer(next) {
                next += 1;
                if self.links[peer].held.is_some() {
                    continue; // read in place; nothing behind it moves until it is released
                }
                // Bounded per peer so one busy sender cannot starve the others.
                for _ in 0..64 {
                    let Some(record) = shm.peek(peer) else { break };
                    let frame = Frame::decode(&record.header, u64::MAX)
                        .map_err(|e| protocol_error(peer as u32, e))?;
                    let len = frame.payload_len() as usize;
                    let mut incoming = self.proto.begin_frame(peer as u32, &frame)?;
                    let n = incoming.direct_room(0).min(len);
                    if !self.in_place.is_empty() && n == len {
                        // A whole eager payload for a receive that reads it in place: it stays
                        // in the ring (no copy) if it does not wrap around the ring's end.
                        let keep = incoming
                            .matched()
                            .and_then(|id| self.in_place.iter_mut().find(|(r, _)| *r == id));
                        let held = u32::try_from(len).ok();
                        if let (Some(entry), Some(held)) = (keep, held) {
                            if record.payload_in_place(len).is_some() {
                                entry.1 = Some(peer as u32);
                                self.links[peer].held = Some(held);
                                self.proto.end_frame(peer as u32, &frame, incoming)?;
                                progressed = true;
                                break;
                            }
                        }
                    }
                    if n > 0 {
                        record.copy_payload(0, incoming.ptr(), n);
                    }
                    incoming.cap = n;
                    shm.pop(peer, len);
                    self.proto.end_frame(peer as u32, &frame, incoming)?;
                    progressed = true;
                }
            }
        }
        if let Some(tcp) = self.tcp.as_mut().filter(|_| poll_tcp) {
            self.looks_without_tcp = 0;
            progressed |= tcp
                .poll_input(&mut self.proto, Some(Duration::ZERO))
                .map_err(|e| self.proto.with_pid(e))?;
            self.after_tcp_input();
        }
        // Checked here, not only inside: an idle pass should cost a few loads, not calls.
        if !self.proto.active_out.is_empty() {
            progressed |= self.send_active_replies()?;
        }
        if !self.proto.busy.is_empty() {
            progressed |= self.flush()?;
        }
        if !self.proto.shared_pulls.is_empty() {
            // The SHARE frames are out: the senders write their halves while we read ours.
            self.proto.run_shared_pulls()?;
            progressed |= self.flush()?;
        }
        if self.proto.rails > 1 {
            progressed |= self.rails_failed()?;
        }
        // Drained copies are freed with the collectives' advance.
        if self.collectives_can_move() || !self.drains.is_empty() {
            progressed |= self.advance_collectives()?;
        }
        Ok(progressed)
    }

    /// Inserts a request in the running-collective state.
    pub(crate) fn new_collective_request(&mut self) -> ReqId {
        self.proto.requests.insert(ReqState::Collective)
    }

    /// Inserts a request that is complete from the start.
    pub(crate) fn new_done_request(&mut self, completion: Completion) -> ReqId {
        self.proto.requests.insert(ReqState::Done(completion))
    }

    fn flush(&mut self) -> Result<bool, Error> {
        let mut progressed = false;
        let mut i = 0;
        while i < self.proto.busy.len() {
            let peer = self.proto.busy[i];
            progressed |= self.flush_peer(peer)?;
            let p = peer as usize;
            if self.proto.peers[p].outq.is_empty()
                && (self.links.get(p).and_then(|l| l.lanes.as_deref())).is_none_or(Lanes::idle)
            {
                self.proto.peers[p].queued = false;
                self.proto.busy.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(progressed)
    }

    /// Writes queued frames to `peer` in order until its channel is full.
    fn flush_peer(&mut self, peer: u32) -> Result<bool, Error> {
        let p = peer as usize;
        let route = self.proto.peers[p].route;
        if route == Route::Tcp && self.links.get(p).is_some_and(|l| l.lanes.is_some()) {
            return self.flush_rails(peer);
        }
        let chunk = if route == Route::Shm {
            self.shm_chunk
        } else {
            self.tcp_chunk
        };
        let mut progressed = false;
        loop {
            let frame = match self.proto.peers[p].outq.front_mut() {
                None => break,
                Some(Out::Stream(id)) => {
                    let id = *id;
                    match self.proto.next_chunk(id, chunk) {
                        Some((f, _)) => self.proto.peers[p].outq.push_front(Out::Frame(f)),
                        None => {
                            self.proto.peers[p].outq.pop_front();
                        }
                    }
                    continue;
                }
                Some(Out::Frame(f)) => f,
            };
            let written = match route {
                Route::Shm => match self.shm.as_mut() {
                    Some(shm) => shm.try_push(p, &frame.header, frame.payload, frame.len),
                    None => false,
                },
                Route::Tcp => match self.tcp.as_mut() {
                    Some(tcp) => tcp.try_write(p, 0, frame)?,
                    None => false,
                },
                Route::Loopback => true,
            };
            if !written {
                break;
            }
            progressed = true;
            if let Some(Out::Frame(frame)) = self.proto.peers[p].outq.pop_front() {
                self.proto.frame_written(&frame);
            }
        }
        Ok(progressed)
    }
}

mod proto;
mod rails;
mod sink;
mod wait;

#[cfg(test)]
mod pair;
#[cfg(test)]
mod tests;
