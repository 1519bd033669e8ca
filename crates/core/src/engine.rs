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

impl Proto {
    /// Makes room for peers up to (not including) `peers`: the new ones are reached over TCP
    /// (processes of a world spawned later, or of the world that spawned ours) and have no
    /// known process id yet. The engine gives them its half in `Engine::adopt_peers`.
    #[cold]
    pub(crate) fn grow(&mut self, peers: usize) {
        if peers > self.peers.len() {
            self.peers.resize_with(peers, || Peer::new(Route::Tcp, 0));
        }
    }

    /// How many peers are known: universe ranks `0..peer_count()`.
    pub(crate) fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// How universe rank `rank` is reached, `None` past the known peers.
    pub(crate) fn route(&self, rank: usize) -> Option<Route> {
        self.peers.get(rank).map(|p| p.route)
    }

    /// The process id of universe rank `rank`: 0 while unknown, `None` past the known peers.
    pub(crate) fn pid(&self, rank: usize) -> Option<u32> {
        self.peers.get(rank).map(|p| p.pid)
    }

    /// Fills in the process id of a lost peer, which only the engine knows.
    fn with_pid(&self, error: Error) -> Error {
        match error {
            Error::PeerLost {
                rank,
                pid: 0,
                detail,
            } => Error::PeerLost {
                rank,
                pid: self.pid(rank).unwrap_or(0),
                detail,
            },
            other => other,
        }
    }

    /// Keeps a message no receive was posted for, and counts it.
    fn push_unexpected(&mut self, env: Envelope, message: Unexpected) {
        self.matcher.push_unexpected(env, message);
        self.counters
            .queued_unexpected(self.matcher.unexpected_len());
    }

    fn push_out(&mut self, peer: u32, out: Out) {
        let p = &mut self.peers[peer as usize];
        if p.route == Route::Loopback {
            // Control frames to ourselves (FIN, CTS) take the loopback queue.
            if let Out::Frame(f) = out {
                if let Ok(frame) = Frame::decode(&f.header, u64::MAX) {
                    self.loopback.push_back((frame, Vec::new()));
                }
            }
            return;
        }
        p.outq.push_back(out);
        self.mark_busy(peer);
    }

    /// `peer` has frames to write: `flush` visits it until they are out.
    fn mark_busy(&mut self, peer: u32) {
        let p = &mut self.peers[peer as usize];
        if !p.queued {
            p.queued = true;
            self.busy.push(peer);
        }
    }

    /// Rendezvous to `peer` wait for the receiver's FIN: over several rails a chunk may have
    /// to be sent again until then.
    fn acknowledged(&self, peer: u32) -> bool {
        self.rails > 1 && self.peers[peer as usize].route == Route::Tcp
    }

    /// Length of the rendezvous send `id` while it is not over.
    fn pending_send_len(&self, id: ReqId) -> Option<u64> {
        match self.requests.get(id) {
            Some(ReqState::SendRendezvous { machine, .. }) if !machine.is_done() => {
                Some(machine.len())
            }
            _ => None,
        }
    }

    /// The frame `frame` is fully written: completes what waited for it.
    fn frame_written(&mut self, frame: &OutFrame) {
        if let Some(id) = frame.complete {
            if matches!(self.requests.get(id), Some(ReqState::SendEager)) {
                self.complete(id, Proto::sent(frame.len));
            } else {
                self.complete(id, Proto::sent(0));
            }
        }
    }

    pub(crate) fn complete(&mut self, id: ReqId, completion: Completion) {
        if let Some(state) = self.requests.get_mut(id) {
            if let ReqState::SendRendezvous { dest, .. } = *state {
                self.peers[dest as usize].large_out -= 1;
            }
            *state = ReqState::Done(completion);
            self.completions += 1;
        }
    }

    fn sent(len: usize) -> Completion {
        Completion {
            source: 0,
            tag: 0,
            len,
            message_len: len,
            cancelled: false,
        }
    }

    /// Completes the posted receive `id` with a message that was kept in memory.
    /// Keeps the buffer of a delivered unexpected message for the next one, so that small
    /// messages arriving before their receive cost no allocation. A sender running ahead (a
    /// root of back-to-back broadcasts) leaves a ring's worth queued, so up to 256 are kept, of
    /// at most 4 KiB each.
    fn recycle_kept(&mut self, data: Vec<u8>) {
        const KEEP: usize = 256;
        const LARGEST: usize = 4096;
        if self.spare_kept.len() < KEEP && data.capacity() <= LARGEST {
            self.spare_kept.push(data);
        }
    }

    fn deliver_kept(&mut self, id: ReqId, env: Envelope, data: &[u8]) {
        let Some(&ReqState::RecvPosted { buf, cap }) = self.requests.get(id) else {
            return;
        };
        // SAFETY: `buf` is valid for `cap` bytes while the request lives.
        let done = unsafe { copy_kept(env, data, buf, cap) };
        self.complete(id, done);
    }

    /// Whether a message a receive with this pattern would match has arrived.
    pub(crate) fn has_match(&self, context: u32, source: Option<u32>, tag: Option<i32>) -> bool {
        let pattern = Pattern {
            context,
            source,
            tag,
        };
        self.peek(&pattern).is_some()
    }

    /// Envelope and length of the earliest unexpected message matching `pattern`.
    fn peek(&self, pattern: &Pattern) -> Option<(Envelope, usize)> {
        self.matcher.peek_unexpected(pattern).map(|(env, m)| {
            let len = match m {
                Unexpected::Eager(d) => d.len(),
                Unexpected::Rts(rts) => rts.len as usize,
            };
            (*env, len)
        })
    }

    /// Whether `context` has an active-message handler.
    fn is_active(&self, context: u32) -> bool {
        !self.active.is_empty() && self.active.iter().any(|(c, _)| *c == context)
    }

    /// Hands a whole message to its context's handler and keeps the replies for sending.
    fn run_active(&mut self, env: Envelope, data: &[u8]) {
        let Some((_, handler)) = self.active.iter_mut().find(|(c, _)| *c == env.context) else {
            return;
        };
        let mut replies = Vec::new();
        handler(env.source, env.tag, data, &mut replies);
        self.active_out
            .extend(replies.into_iter().map(|r| (env.context, r)));
    }

    /// Every queued frame is written.
    pub(crate) fn output_drained(&self) -> bool {
        self.busy.is_empty() && self.loopback.is_empty()
    }

    pub(crate) fn is_done(&self, id: ReqId) -> bool {
        matches!(self.requests.get(id), Some(ReqState::Done(_)) | None)
    }

    /// Starts the receive side of a rendezvous: pull when allowed, else ask for a push.
    fn start_rendezvous_recv(
        &mut self,
        id: ReqId,
        env: Envelope,
        rts: Announced,
        buf: *mut u8,
        cap: usize,
    ) {
        let Announced {
            len,
            send_id,
            source_addr,
        } = rts;
        let peer = env.source;
        let mut machine = RendezvousRecv::new(send_id, id, len, cap as u64);
        let accepted = machine.accepted() as usize;
        let done = Completion {
            source: env.source,
            tag: env.tag,
            len: accepted,
            message_len: len as usize,
            cancelled: false,
        };
        let route = self.peers[peer as usize].route;
        // The bytes come pulled here at once (then FIN), half pulled and half written by the
        // sender (SHARE), or pushed by the sender (CTS).
        let mut reply = None;
        if source_addr != 0 && accepted > 0 {
            let p = &self.peers[peer as usize];
            let share = route == Route::Shm
                && self.cma
                && len >= self.cma_share_min
                && p.cma_proven
                && p.large_out == 0;
            if share {
                reply = machine.share(buf as u64);
                if reply.is_some() {
                    self.shared_pulls.push(SharedPull {
                        id,
                        peer,
                        source_addr,
                        len: share_split(len),
                    });
                }
            }
            let pulled = reply.is_none()
                && match route {
                    Route::Loopback => {
                        // SAFETY: the sender's buffer lives in this process and stays lent until
                        // the FIN we send next; MPI forbids overlapping send and receive buffers.
                        unsafe {
                            std::ptr::copy_nonoverlapping(source_addr as *const u8, buf, accepted)
                        };
                        true
                    }
                    Route::Shm if self.cma => {
                        let p = &mut self.peers[peer as usize];
                        match cma_read(p.pid, source_addr, buf, accepted) {
                            Ok(()) => {
                                p.cma_proven = true;
                                true
                            }
                            Err(e) => {
                                eprintln!("ferry: rank {}: single-copy read from rank {peer} refused ({e}); copying through shared memory instead", self.me);
                                self.cma = false;
                                false
                            }
                        }
                    }
                    _ => false,
                };
            if pulled {
                let fin = machine.fin();
                self.push_out(peer, Out::Frame(OutFrame::control(fin)));
                self.complete(id, done);
                return;
            }
        }
        let reply = reply.unwrap_or_else(|| machine.cts());
        self.push_out(peer, Out::Frame(OutFrame::control(reply)));
        if machine.is_complete() {
            self.complete(id, done);
        } else if let Some(state) = self.requests.get_mut(id) {
            *state = ReqState::RecvRendezvous {
                machine,
                buf,
                env,
                message_len: len as usize,
            };
        }
    }

    /// Bytes `[offset, offset + len)` of rendezvous receive `id` are in its buffer (a DATA
    /// chunk, the sender's WRITTEN range or this side's pull); completes it once all are.
    fn stored(&mut self, peer: u32, id: ReqId, offset: u64, len: u64) {
        let acknowledged = self.acknowledged(peer);
        let Some(ReqState::RecvRendezvous {
            machine,
            env,
            message_len,
            ..
        }) = self.requests.get_mut(id)
        else {
            return;
        };
        machine.on_stored(offset, len);
        if machine.is_complete() {
            let done = Completion {
                source: env.source,
                tag: env.tag,
                len: machine.accepted() as usize,
                message_len: *message_len,
                cancelled: false,
            };
            let ack = (acknowledged || machine.acknowledges()).then(|| machine.ack());
            self.complete(id, done);
            if let Some(ack) = ack {
                self.push_out(peer, Out::Frame(OutFrame::control(ack)));
            }
        }
    }

    /// The sender's part of a shared copy: writes the back of the message straight into the
    /// receiver's buffer, or pushes it through the ring if the kernel refuses.
    fn write_share(
        &mut self,
        peer: u32,
        send_id: u64,
        recv_id: u64,
        dest_addr: u64,
    ) -> Result<(), Error> {
        let (cma, pid, me) = (self.cma, self.peers[peer as usize].pid, self.me);
        let Some(ReqState::SendRendezvous { machine, buf, .. }) = self.requests.get_mut(send_id)
        else {
            return Err(protocol_error(
                peer,
                format!("SHARE for unknown send {send_id:#x}"),
            ));
        };
        let (from, end) = machine
            .on_share(recv_id)
            .map_err(|e| protocol_error(peer, e))?;
        let written = cma
            && {
                // SAFETY: from ≤ end = message length; the buffer is lent until the send completes.
                let source = unsafe { buf.add(from as usize) };
                match cma_write(pid, dest_addr + from, source, (end - from) as usize) {
                    Ok(()) => true,
                    Err(e) => {
                        eprintln!("ferry: rank {me}: single-copy write to rank {peer} refused ({e}); copying through shared memory instead");
                        false
                    }
                }
            };
        if written {
            if let Some(frame) = machine.wrote_directly() {
                self.push_out(peer, Out::Frame(OutFrame::control(frame)));
            }
        } else {
            self.cma = false;
            self.push_out(peer, Out::Stream(send_id));
        }
        Ok(())
    }

    /// Runs the receivers' halves of shared copies whose SHARE frames are written.
    fn run_shared_pulls(&mut self) -> Result<(), Error> {
        for pull in std::mem::take(&mut self.shared_pulls) {
            let Some(ReqState::RecvRendezvous { buf, .. }) = self.requests.get(pull.id) else {
                continue;
            };
            cma_read(
                self.peers[pull.peer as usize].pid,
                pull.source_addr,
                *buf,
                pull.len as usize,
            )
            .map_err(|e| {
                Error::Transport(format!(
                    "rank {}: single-copy read from rank {} failed after it had worked: {e}",
                    self.me, pull.peer
                ))
            })?;
            self.stored(pull.peer, pull.id, 0, pull.len);
        }
        Ok(())
    }

    /// Cuts the next DATA chunk of a pushed rendezvous: the frame and the chunk's offset.
    fn next_chunk(&mut self, id: ReqId, max: usize) -> Option<(OutFrame, u64)> {
        let Some(ReqState::SendRendezvous { machine, buf, .. }) = self.requests.get_mut(id) else {
            return None;
        };
        let chunk = machine.next_chunk(max as u64)?;
        let done = machine.is_done();
        // SAFETY: offset < message length; `buf` is lent until the request completes.
        let payload = unsafe { buf.add(chunk.offset as usize) };
        let frame = OutFrame {
            header: chunk.frame.to_bytes(),
            payload,
            len: chunk.len as usize,
            sent: 0,
            complete: done.then_some(id),
            owned: None,
        };
        Some((frame, chunk.offset))
    }

    /// No chunk of send `id` is left to cut.
    fn handed_out(&self, id: ReqId) -> bool {
        match self.requests.get(id) {
            Some(ReqState::SendRendezvous { machine, .. }) => machine.handed_out(),
            _ => true,
        }
    }

    /// A copy of chunk `[offset, offset + len)` of send `id`, to go again on another rail;
    /// `None` once the send is over.
    fn resend_chunk(&self, id: ReqId, offset: u64, len: u64) -> Option<OutFrame> {
        let Some(ReqState::SendRendezvous { machine, buf, .. }) = self.requests.get(id) else {
            return None;
        };
        let chunk = machine.resend(offset, len)?;
        // SAFETY: `resend` checked the chunk lies within the message, whose buffer is lent
        // until the send completes, which it has not.
        let bytes: Box<[u8]> =
            unsafe { std::slice::from_raw_parts(buf.add(offset as usize), len as usize) }.into();
        Some(OutFrame {
            header: chunk.frame.to_bytes(),
            payload: bytes.as_ptr(),
            len: len as usize,
            sent: 0,
            complete: None,
            owned: Some(bytes),
        })
    }
}

impl FrameSink for Proto {
    fn departed(&self, peer: u32) -> bool {
        self.peers.get(peer as usize).is_some_and(|p| p.departed)
    }

    fn take_drains(&mut self, peer: u32) -> Vec<(u16, u64)> {
        let mut taken = Vec::new();
        self.to_drain.retain(|&(p, rail, seq)| {
            let mine = p == peer;
            if mine {
                taken.push((rail, seq));
            }
            !mine
        });
        taken
    }

    fn drained(&mut self, peer: u32, seq: u64) {
        let p = &mut self.peers[peer as usize];
        p.skip = p.ordered_in.saturating_sub(seq);
    }

    fn begin_frame(&mut self, peer: u32, frame: &Frame) -> Result<Incoming, Error> {
        if peer as usize >= self.peers.len() {
            // A process of another world connected before we were told about it.
            self.grow(peer as usize + 1);
        }
        let rails = self.acknowledged(peer);
        if rails && self.peers[peer as usize].skip > 0 && frame.is_ordered() {
            return Ok(Incoming {
                ptr: std::ptr::null_mut(),
                cap: 0,
                arrival: Arrival::Discard,
            });
        }
        match *frame {
            Frame::Eager { context, tag, len } => {
                let env = Envelope {
                    context,
                    source: peer,
                    tag,
                };
                // Over rails an eager frame cut off by a failing rail comes again on another,
                // so it is matched only once it is whole.
                let posted = match rails || self.is_active(context) {
                    true => None,
                    false => self.matcher.take_posted(&env),
                };
                if let Some(id) = posted {
                    if let Some(ReqState::RecvPosted { buf, cap }) = self.requests.get(id) {
                        return Ok(Incoming {
                            ptr: *buf,
                            cap: *cap,
                            arrival: Arrival::EagerMatched(id, env),
                        });
                    }
                }
                let mut data = self.spare_kept.pop().unwrap_or_default();
                data.clear();
                data.resize(len as usize, 0);
                Ok(Incoming {
                    ptr: data.as_mut_ptr(),
                    cap: len as usize,
                    arrival: Arrival::EagerKept(env, data),
                })
            }
            Frame::Data {
                recv_id,
                offset,
                len,
            } => match self.requests.get_mut(recv_id) {
                Some(ReqState::RecvRendezvous { machine, buf, .. }) => {
                    let (machine, buf) = (&*machine, *buf);
                    machine
                        .on_data(offset, len)
                        .map_err(|e| protocol_error(peer, e))?;
                    Ok(Incoming {
                        // SAFETY: on_data checked offset + len ≤ accepted ≤ buffer length.
                        ptr: unsafe { buf.add(offset as usize) },
                        cap: len as usize,
                        arrival: Arrival::Data(recv_id),
                    })
                }
                // Over rails, a chunk sent again after a rail failed may find its receive
                // already complete.
                _ if rails => Ok(Incoming {
                    ptr: std::ptr::null_mut(),
                    cap: 0,
                    arrival: Arrival::Discard,
                }),
                _ => Err(protocol_error(
                    peer,
                    format!("DATA for unknown receive {recv_id:#x}"),
                )),
            },
            _ => Ok(Incoming::control()),
        }
    }

    fn end_frame(&mut self, peer: u32, frame: &Frame, incoming: Incoming) -> Result<(), Error> {
        if frame.is_ordered() && self.acknowledged(peer) {
            let p = &mut self.peers[peer as usize];
            if matches!(incoming.arrival, Arrival::Discard) {
                p.skip = p.skip.saturating_sub(1);
                return Ok(());
            }
            p.ordered_in += 1;
        }
        match (incoming.arrival, *frame) {
            (Arrival::EagerMatched(id, env), Frame::Eager { len, .. }) => {
                self.counters.received(len);
                let len = len as usize;
                self.complete(
                    id,
                    Completion {
                        source: env.source,
                        tag: env.tag,
                        len: len.min(incoming.cap),
                        message_len: len,
                        cancelled: false,
                    },
                );
            }
            (Arrival::EagerKept(env, data), _) if self.is_active(env.context) => {
                self.counters.received(data.len() as u64);
                self.run_active(env, &data);
            }
            (Arrival::EagerKept(env, data), _) => {
                self.counters.received(data.len() as u64);
                // Over TCP a payload can take several reads, and a matching receive may have
                // been posted meanwhile: it gets the message, or it would wait forever.
                match self.matcher.take_posted(&env) {
                    Some(id) => self.deliver_kept(id, env, &data),
                    None => self.push_unexpected(env, Unexpected::Eager(data)),
                }
            }
            (Arrival::Data(id), Frame::Data { offset, len, .. }) => {
                self.stored(peer, id, offset, len);
            }
            (
                Arrival::Control,
                Frame::Written {
                    recv_id,
                    offset,
                    len,
                },
            ) => match self.requests.get(recv_id) {
                Some(ReqState::RecvRendezvous { machine, .. }) if machine.acknowledges() => {
                    machine
                        .on_data(offset, len)
                        .map_err(|e| protocol_error(peer, e))?;
                    self.stored(peer, recv_id, offset, len);
                }
                _ => {
                    return Err(protocol_error(
                        peer,
                        format!("WRITTEN for unknown receive {recv_id:#x}"),
                    ))
                }
            },
            (
                Arrival::Control,
                Frame::Share {
                    send_id,
                    recv_id,
                    dest_addr,
                },
            ) => self.write_share(peer, send_id, recv_id, dest_addr)?,
            (Arrival::Discard, _) => {}
            (
                Arrival::Control,
                Frame::Rts {
                    context,
                    tag,
                    len,
                    send_id,
                    source_addr,
                },
            ) => {
                if self.is_active(context) {
                    return Err(protocol_error(
                        peer,
                        format!("rendezvous on active-message context {context}"),
                    ));
                }
                let env = Envelope {
                    context,
                    source: peer,
                    tag,
                };
                let rts = Announced {
                    len,
                    send_id,
                    source_addr,
                };
                self.counters.received(len);
                match self.matcher.take_posted(&env) {
                    Some(id) => {
                        if let Some(&ReqState::RecvPosted { buf, cap }) = self.requests.get(id) {
                            self.start_rendezvous_recv(id, env, rts, buf, cap);
                        }
                    }
                    None => self.push_unexpected(env, Unexpected::Rts(rts)),
                }
            }
            (
                Arrival::Control,
                Frame::Cts {
                    send_id,
                    recv_id,
                    accept_len,
                },
            ) => match self.requests.get_mut(send_id) {
                Some(ReqState::SendRendezvous { machine, .. }) => {
                    machine
                        .on_cts(recv_id, accept_len)
                        .map_err(|e| protocol_error(peer, e))?;
                    if machine.is_done() {
                        self.complete(send_id, Proto::sent(0));
                    } else {
                        self.push_out(peer, Out::Stream(send_id));
                    }
                }
                _ => {
                    return Err(protocol_error(
                        peer,
                        format!("CTS for unknown send {send_id:#x}"),
                    ))
                }
            },
            (Arrival::Control, Frame::Fin { send_id }) => match self.requests.get_mut(send_id) {
                Some(ReqState::SendRendezvous { machine, .. }) => {
                    machine.on_fin().map_err(|e| protocol_error(peer, e))?;
                    self.complete(send_id, Proto::sent(0));
                }
                _ => {
                    return Err(protocol_error(
                        peer,
                        format!("FIN for unknown send {send_id:#x}"),
                    ))
                }
            },
            (Arrival::Control, Frame::Bye) => self.peers[peer as usize].departed = true,
            (Arrival::Control, Frame::RailDown { rail, seq })
                if self.acknowledged(peer) && (rail as usize) < self.rails =>
            {
                self.rail_down.push((peer, rail as u16));
                self.to_drain.push((peer, rail as u16, seq));
            }
            (_, frame) => return Err(protocol_error(peer, format!("unexpected frame {frame:?}"))),
        }
        Ok(())
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

    /// Writes to a peer over several rails: ordered frames on rail 0, chunks where the
    /// striper puts them.
    fn flush_rails(&mut self, peer: u32) -> Result<bool, Error> {
        let p = peer as usize;
        let Some(tcp) = self.tcp.as_mut() else {
            return Ok(false);
        };
        let proto = &mut self.proto;
        let Some(lanes) = self.links[p].lanes.as_deref_mut() else {
            return Ok(false);
        };
        let rails = lanes.writing.len();
        let mut progressed = false;
        loop {
            let mut moved = false;
            let ordered = lanes.ordered;
            while lanes.writing[ordered].is_none() {
                match proto.peers[p].outq.pop_front() {
                    None => break,
                    Some(Out::Stream(id)) => lanes.striped.push_back(id),
                    Some(Out::Frame(f)) => lanes.writing[ordered] = Some(f),
                }
            }
            loop {
                let (id, again) = match (lanes.resend.front(), lanes.striped.front()) {
                    (Some(&(id, offset, len)), _) => (id, Some((offset, len))),
                    (None, Some(&id)) => (id, None),
                    (None, None) => break,
                };
                let Some(message_len) = proto.pending_send_len(id) else {
                    if again.is_some() {
                        lanes.resend.pop_front();
                    } else {
                        lanes.striped.pop_front();
                    }
                    continue;
                };
                // A large message is cut over every rail; a smaller one goes whole on the rail
                // the striper picks for its first chunk, so that messages in flight together
                // still spread over the rails.
                let spread = message_len >= self.rail_stripe || again.is_some();
                let pinned = match lanes.pinned {
                    Some((pinned, rail)) if pinned == id && lanes.alive[rail] => Some(rail),
                    _ => None,
                };
                let loads: Vec<RailLoad> = (0..rails)
                    .map(|r| {
                        let mut load = tcp.load(p, r);
                        load.alive &= lanes.alive[r] && (spread || pinned.is_none_or(|p| p == r));
                        load.free = lanes.writing[r].is_none();
                        if let Some(f) = &lanes.writing[r] {
                            load.backlog += (HEADER_LEN + f.len - f.sent) as u64;
                        }
                        load
                    })
                    .collect();
                lanes.striper.observe(self.started.elapsed(), &loads);
                let size = again.map_or(self.tcp_chunk as u64, |(_, len)| len);
                let Some(rail) = lanes.striper.choose(&loads, size) else {
                    break;
                };
                let (frame, offset) = match again {
                    Some((offset, len)) => {
                        lanes.resend.pop_front();
                        match proto.resend_chunk(id, offset, len) {
                            Some(frame) => (frame, offset),
                            None => continue,
                        }
                    }
                    None => match proto.next_chunk(id, self.tcp_chunk) {
                        Some(cut) => cut,
                        None => {
                            lanes.striped.pop_front();
                            continue;
                        }
                    },
                };
                if !spread {
                    lanes.pinned = Some((id, rail));
                }
                if again.is_none() && proto.handed_out(id) {
                    lanes.striped.pop_front();
                }
                let carried = &mut lanes.carried[rail];
                if carried.len() >= 1024 {
                    carried.retain(|&(id, ..)| proto.pending_send_len(id).is_some());
                }
                carried.push((id, offset, frame.len as u64));
                lanes.writing[rail] = Some(frame);
                moved = true;
            }
            for rail in 0..rails {
                let Some(frame) = lanes.writing[rail].as_mut() else {
                    continue;
                };
                if tcp.try_write(p, rail, frame)? {
                    if let Some(frame) = lanes.writing[rail].take() {
                        let keep = ordered_frame(&frame).then(|| frame.copy());
                        proto.frame_written(&frame);
                        if let Some(copy) = keep {
                            lanes.sent_seq += 1;
                            let load = tcp.load(p, rail);
                            let delivered = load.written - load.backlog.min(load.written);
                            while lanes
                                .retained
                                .front()
                                .is_some_and(|(end, _)| *end <= delivered)
                            {
                                lanes.retained.pop_front();
                            }
                            lanes.retained.push_back((load.written, copy));
                        }
                    }
                    moved = true;
                }
            }
            if !moved {
                break;
            }
            progressed = true;
        }
        Ok(progressed)
    }

    /// One line per peer with the bytes each rail carried and its measured rate, for
    /// `FERRY_RAIL_STATS=1`; empty without rails.
    pub(crate) fn rail_report(&self) -> Vec<String> {
        let Some(tcp) = self.tcp.as_ref() else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        for (peer, link) in self.links.iter().enumerate() {
            let Some(lanes) = link.lanes.as_deref() else {
                continue;
            };
            let rails: Vec<String> = (0..lanes.writing.len())
                .map(|r| {
                    let load = tcp.load(peer, r);
                    let rate = lanes.striper.rate(r) / 1e6;
                    match lanes.alive[r] {
                        true => format!("rail {r} {} B ({rate:.0} MB/s)", load.written),
                        false => format!("rail {r} failed"),
                    }
                })
                .collect();
            lines.push(format!(
                "ferry: rank {} to rank {peer}: {}",
                self.proto.me,
                rails.join(", ")
            ));
        }
        lines
    }

    /// Handles rails that failed, here or at the peer: what they carried for sends that are
    /// not acknowledged goes again on the others, and the peer learns of a local failure.
    fn rails_failed(&mut self) -> Result<bool, Error> {
        let Some(tcp) = self.tcp.as_mut() else {
            return Ok(false);
        };
        let mut failed: Vec<(u32, u16, String, bool)> = tcp
            .take_failures()
            .into_iter()
            .map(|(peer, rail, why)| (peer, rail, why, true))
            .collect();
        failed.extend(
            self.proto
                .rail_down
                .drain(..)
                .map(|(peer, rail)| (peer, rail, "closed by the peer".to_string(), false)),
        );
        let any = !failed.is_empty();
        for (peer, rail, why, here) in failed {
            let (p, r) = (peer as usize, rail as usize);
            let Some(lanes) = self.links.get_mut(p).and_then(|l| l.lanes.as_deref_mut()) else {
                continue;
            };
            if !lanes.alive[r] {
                continue;
            }
            lanes.alive[r] = false;
            let cut = lanes.writing[r].take();
            tcp.close_rail(p, r);
            let mut again = 0;
            for (id, offset, len) in std::mem::take(&mut lanes.carried[r]) {
                if self.proto.pending_send_len(id).is_some() {
                    lanes.resend.push_back((id, offset, len));
                    again += 1;
                }
            }
            let Some(next) = lanes.alive.iter().position(|&a| a) else {
                return Err(Error::PeerLost {
                    rank: p,
                    pid: self.proto.pid(p).unwrap_or(0),
                    detail: format!("every rail failed, the last one: rail {rail} ({why})"),
                });
            };
            if r == lanes.ordered {
                // The ordered frames the peer may not have go again, in order, on the next
                // rail, behind a RAIL_DOWN saying from which one on.
                let retained = std::mem::take(&mut lanes.retained);
                let from = lanes.sent_seq - retained.len() as u64;
                lanes.sent_seq = from;
                lanes.ordered = next;
                let outq = &mut self.proto.peers[p].outq;
                if let Some(mut frame) = cut.filter(ordered_frame) {
                    frame.sent = 0;
                    outq.push_front(Out::Frame(frame));
                }
                for (_, frame) in retained.into_iter().rev() {
                    outq.push_front(Out::Frame(frame));
                }
                let down = Frame::RailDown {
                    rail: rail.into(),
                    seq: from,
                };
                outq.push_front(Out::Frame(OutFrame::control(down)));
                eprintln!(
                    "ferry: rank {}: rail {rail} to rank {peer} failed ({why}); ordered frames from number {from} and {again} chunks go again, on rail {next} and the others",
                    self.proto.me
                );
            } else {
                eprintln!(
                    "ferry: rank {}: rail {rail} to rank {peer} failed ({why}); {again} chunks go again on the other rails",
                    self.proto.me
                );
                if here {
                    // No ordered frame is sent again: `seq` past any count.
                    let down = Frame::RailDown {
                        rail: rail.into(),
                        seq: u64::MAX,
                    };
                    self.proto
                        .push_out(peer, Out::Frame(OutFrame::control(down)));
                }
            }
            // Frames were queued above, or chunks wait to be sent again.
            self.proto.mark_busy(peer);
        }
        Ok(any)
    }

    /// Drives progress until `done` holds, backing off from spinning to sleeping.
    pub(crate) fn wait_until(&mut self, mut done: impl FnMut(&Proto) -> bool) -> Result<(), Error> {
        let mut idle = 0;
        while !done(&self.proto) {
            idle = self.wait_pass(idle)?;
        }
        Ok(())
    }

    /// One pass of a wait that is not over: progress, or else back off, `idle` being how many
    /// passes in a row found nothing before this one. Returns that count after this pass.
    pub(crate) fn wait_pass(&mut self, idle: u32) -> Result<u32, Error> {
        // A wait of a rank with shared-memory peers polls TCP on every TCP_SPIN_EVERY-th look
        // only (counted across waits, so that quick waits on rings cannot starve TCP); calls
        // outside a wait (a test, a probe) always do.
        let tcp = self.shm.is_none() || {
            self.looks_without_tcp += 1;
            self.looks_without_tcp >= TCP_SPIN_EVERY
        };
        if self.progress_looking(tcp)? {
            return Ok(0);
        }
        self.back_off(idle + 1)?;
        Ok(idle + 1)
    }

    /// Waits a little after `idle` passes in a row found nothing: spins, then yields, then
    /// sleeps until a transport wakes us (or the nap ends).
    fn back_off(&mut self, idle: u32) -> Result<(), Error> {
        if idle < self.spin {
            if self.spin_yield
                || (idle.is_multiple_of(SHARED_CPU_LOOK) && self.spins_beside_a_peer(idle))
            {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else if idle < self.spin + 20 {
            std::thread::yield_now();
        } else {
            self.block()?;
        }
        Ok(())
    }

    /// Whether a shared-memory peer last waited on the CPU this rank spins on. The scheduler
    /// may put two ranks on one core (a wake-up pulls the woken rank to the waker's core, and
    /// other work holds the second core); spinning then holds back the peer until the spin
    /// ends, about 100 µs a message. So a spin looks now and then, and yields when it shares
    /// the core. A wait's first look publishes this rank's CPU.
    #[cold]
    #[inline(never)]
    fn spins_beside_a_peer(&self, idle: u32) -> bool {
        let Some(shm) = self.shm.as_ref() else {
            return false;
        };
        // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
        let Ok(cpu) = u32::try_from(unsafe { libc::sched_getcpu() }) else {
            return false;
        };
        if idle == SHARED_CPU_LOOK {
            shm.note_cpu(cpu);
        }
        shm.shares_cpu(cpu)
    }

    /// Sleeps until a transport has something for us (or a short timeout).
    #[cold]
    #[inline(never)]
    fn block(&mut self) -> Result<(), Error> {
        if self.tcp.is_some() {
            if !self.doorbell {
                // Shared-memory peers cannot wake an epoll without the doorbell: look at the
                // rings every millisecond.
                let nap = match self.shm {
                    Some(_) => self.nap.min(Duration::from_millis(1)),
                    None => self.nap,
                };
                return self.sleep_in_poll(nap);
            }
            // As on the futex below: announce, look once more, then sleep; a shared-memory
            // peer that stores a record after our look sees the announcement and rings.
            if let Some(shm) = self.shm.as_ref() {
                shm.prepare_sleep(Sleep::InPoll);
            }
            let slept = match self.progress() {
                Ok(true) => Ok(()),
                Ok(false) => self.sleep_in_poll(self.nap),
                Err(e) => Err(e),
            };
            if let Some(shm) = self.shm.as_ref() {
                shm.cancel_sleep();
            }
            return slept;
        }
        if self.shm.is_some() {
            if let Some(shm) = self.shm.as_ref() {
                shm.prepare_sleep(Sleep::OnFutex);
            }
            let progressed = self.progress()?;
            if let Some(shm) = self.shm.as_ref() {
                if progressed {
                    shm.cancel_sleep();
                } else {
                    shm.sleep(self.nap);
                }
            }
            return Ok(());
        }
        std::thread::yield_now();
        Ok(())
    }

    /// Waits in TCP's epoll up to `timeout`, then handles what came.
    fn sleep_in_poll(&mut self, timeout: Duration) -> Result<(), Error> {
        if let Some(tcp) = self.tcp.as_mut() {
            tcp.poll_input(&mut self.proto, Some(timeout))
                .map_err(|e| self.proto.with_pid(e))?;
        }
        self.after_tcp_input();
        self.send_active_replies()?;
        self.flush()?;
        Ok(())
    }

    /// Waits for one request and returns its completion.
    pub(crate) fn wait(&mut self, id: ReqId) -> Result<Completion, Error> {
        self.wait_until(|p| p.is_done(id))?;
        self.take(id).ok_or_else(|| Error::Protocol {
            rank: self.proto.me as usize,
            detail: format!("request {id:#x} vanished"),
        })
    }
}

#[cfg(test)]
mod pair;

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine for rank 0 of `n` whose peers are reached over TCP but have no sockets: enough
    /// to drive the protocol half by hand.
    fn engine(n: usize) -> Engine {
        engine_with_rails(n, 1)
    }

    fn engine_with_rails(n: usize, rails: usize) -> Engine {
        let mut routes = vec![Route::Tcp; n];
        routes[0] = Route::Loopback;
        Engine::new(EngineSetup {
            me: 0,
            routes,
            pids: vec![1; n],
            shm: None,
            tcp: None,
            cma: false,
            cma_share_min: u64::MAX,
            shm_eager_limit: 1 << 16,
            tcp_eager_limit: 1 << 16,
            tcp_chunk: 1 << 18,
            spin: 1,
            spin_yield: false,
            rails,
            rail_policy: crate::config::RailPolicy::Weighted,
            rail_stripe: 1 << 19,
        })
    }

    /// Feeds one whole frame from `peer` to the protocol.
    fn deliver(e: &mut Engine, peer: u32, frame: Frame, payload: &[u8]) -> Result<(), Error> {
        let mut incoming = e.proto.begin_frame(peer, &frame)?;
        incoming.store(0, payload);
        e.proto.end_frame(peer, &frame, incoming)
    }

    /// The control frames queued for `peer`.
    fn queued(e: &Engine, peer: usize) -> Vec<Frame> {
        e.proto.peers[peer]
            .outq
            .iter()
            .filter_map(|o| match o {
                Out::Frame(f) => Frame::decode(&f.header, u64::MAX).ok(),
                Out::Stream(_) => None,
            })
            .collect()
    }

    #[test]
    fn over_rails_a_receive_takes_chunks_in_any_order_once_and_acknowledges() {
        let mut e = engine_with_rails(2, 2);
        let rts = Frame::Rts {
            context: 0,
            tag: 3,
            len: 12,
            send_id: 77,
            source_addr: 0,
        };
        deliver(&mut e, 1, rts, &[]).unwrap();
        let mut buf = [0u8; 12];
        let id = e.irecv(0, Some(1), Some(3), buf.as_mut_ptr(), 12).unwrap();
        let Some(&Frame::Cts { recv_id, .. }) = queued(&e, 1).last() else {
            panic!("no CTS: {:?}", queued(&e, 1))
        };
        let data = |offset: u64, len: u64| Frame::Data {
            recv_id,
            offset,
            len,
        };
        deliver(&mut e, 1, data(8, 4), b"ijkl").unwrap();
        deliver(&mut e, 1, data(0, 4), b"abcd").unwrap();
        // A chunk sent again after a rail failed.
        deliver(&mut e, 1, data(8, 4), b"ijkl").unwrap();
        assert!(!e.proto.is_done(id));
        deliver(&mut e, 1, data(4, 4), b"efgh").unwrap();
        assert!(e.proto.is_done(id));
        assert_eq!(&buf, b"abcdefghijkl");
        assert_eq!(queued(&e, 1).last(), Some(&Frame::Fin { send_id: 77 }));
        // A late copy for the finished receive is read and dropped, not an error.
        deliver(&mut e, 1, data(0, 4), b"abcd").unwrap();
        assert_eq!(&buf, b"abcdefghijkl");
    }

    #[test]
    fn peers_added_later_get_both_halves_and_rails_if_on_tcp() {
        let mut e = engine_with_rails(2, 2);
        assert!(e.links[0].lanes.is_none(), "no rails to ourselves");
        assert!(e.links[1].lanes.is_some());
        e.grow(4);
        assert_eq!((e.proto.peer_count(), e.links.len()), (4, 4));
        assert!(e.links[3].lanes.is_some());
        // A process of another world that connects before we are told of it.
        deliver(&mut e, 5, Frame::Bye, &[]).unwrap();
        assert_eq!(e.proto.peer_count(), 6);
        e.after_tcp_input();
        assert_eq!(e.links.len(), 6);
        assert!(e.links[5].lanes.is_some() && e.proto.departed(5));
        assert_eq!((e.proto.pid(5), e.proto.pid(6)), (Some(0), None));
        let one_rail = engine(3);
        assert!(one_rail.links.iter().all(|l| l.lanes.is_none()));
    }

    #[test]
    fn without_rails_unknown_data_is_a_protocol_error_and_no_fin_is_sent() {
        let mut e = engine(2);
        let stray = Frame::Data {
            recv_id: 5,
            offset: 0,
            len: 1,
        };
        assert!(deliver(&mut e, 1, stray, b"x").is_err());
        assert!(deliver(&mut e, 1, Frame::RailDown { rail: 1, seq: 0 }, &[]).is_err());
    }

    #[test]
    fn a_rail_down_from_the_peer_is_recorded_and_checked() {
        let mut e = engine_with_rails(2, 3);
        deliver(&mut e, 1, Frame::RailDown { rail: 2, seq: 0 }, &[]).unwrap();
        deliver(&mut e, 1, Frame::RailDown { rail: 0, seq: 0 }, &[]).unwrap();
        assert_eq!(e.proto.rail_down, [(1, 2), (1, 0)]);
        assert_eq!(e.proto.take_drains(1), [(2, 0), (0, 0)]);
        assert!(deliver(&mut e, 1, Frame::RailDown { rail: 3, seq: 0 }, &[]).is_err());
    }

    #[test]
    fn ordered_frames_sent_again_after_a_rail_failed_are_taken_once() {
        let mut e = engine_with_rails(2, 2);
        let eager = |tag: i32| Frame::Eager {
            context: 0,
            tag,
            len: 1,
        };
        // Frames 0, 1, 2 arrive on the old ordered rail; the sender, which saw only frame 0
        // acknowledged, sends 1 and 2 again (and then 3) behind RAIL_DOWN(seq 1).
        for tag in 0..3 {
            deliver(&mut e, 1, eager(tag), &[tag as u8]).unwrap();
        }
        deliver(&mut e, 1, Frame::RailDown { rail: 0, seq: 1 }, &[]).unwrap();
        for (rail, seq) in e.proto.take_drains(1) {
            assert_eq!((rail, seq), (0, 1));
            e.proto.drained(1, seq);
        }
        for tag in 1..4 {
            deliver(&mut e, 1, eager(tag), &[tag as u8]).unwrap();
        }
        for tag in 0..4 {
            let mut buf = [9u8];
            let id = e.irecv(0, Some(1), Some(tag), buf.as_mut_ptr(), 1).unwrap();
            assert!(e.proto.is_done(id), "message {tag}");
            assert_eq!(buf, [tag as u8]);
        }
        assert_eq!(e.iprobe(0, None, None).unwrap(), None, "no message twice");
        // Data chunks are not ordered frames: a RAIL_DOWN of a data rail drops nothing.
        deliver(
            &mut e,
            1,
            Frame::RailDown {
                rail: 1,
                seq: u64::MAX,
            },
            &[],
        )
        .unwrap();
        for (_, seq) in e.proto.take_drains(1) {
            e.proto.drained(1, seq);
        }
        deliver(&mut e, 1, eager(7), &[7]).unwrap();
        assert!(e.iprobe(0, Some(1), Some(7)).unwrap().is_some());
    }

    #[test]
    fn over_rails_a_pushed_send_completes_on_fin_not_on_its_last_chunk() {
        let mut e = engine_with_rails(2, 2);
        let payload = vec![7u8; 1 << 20];
        let id = e
            .isend(0, 1, 9, payload.as_ptr(), payload.len(), SendMode::Standard)
            .unwrap();
        let cts = Frame::Cts {
            send_id: id,
            recv_id: 5,
            accept_len: 1 << 20,
        };
        deliver(&mut e, 1, cts, &[]).unwrap();
        while let Some((frame, _)) = e.proto.next_chunk(id, 1 << 18) {
            e.proto.frame_written(&frame);
        }
        assert!(!e.proto.is_done(id), "done before the receiver confirmed");
        let again = e.proto.resend_chunk(id, 1 << 18, 1 << 18).unwrap();
        assert_eq!(again.len, 1 << 18);
        deliver(&mut e, 1, Frame::Fin { send_id: id }, &[]).unwrap();
        assert!(e.proto.is_done(id));
        assert!(e.proto.resend_chunk(id, 0, 1).is_none());
    }

    /// An engine whose peer 1 shares this host and whose pids are this process, so CMA copies
    /// within the test process stand in for copies between two.
    fn cma_engine() -> Engine {
        let mut e = engine(2);
        e.proto.peers[1].route = Route::Shm;
        for peer in &mut e.proto.peers {
            peer.pid = std::process::id();
        }
        e.proto.cma = true;
        e.proto.cma_share_min = 0;
        e
    }

    fn pattern_bytes(len: usize) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(7) >> 3) as u8)
            .collect()
    }

    #[test]
    fn a_receiver_pulls_a_peer_whole_once_then_shares_the_copy() {
        let mut e = cma_engine();
        let message = pattern_bytes(100_000);
        let len = message.len() as u64;
        let rts = |send_id| Frame::Rts {
            context: 0,
            tag: 3,
            len,
            send_id,
            source_addr: message.as_ptr() as u64,
        };
        let mut first = vec![0u8; message.len()];
        let id = e
            .irecv(0, Some(1), Some(3), first.as_mut_ptr(), first.len())
            .unwrap();
        deliver(&mut e, 1, rts(76), &[]).unwrap();
        if !e.proto.cma {
            return; // this kernel refuses CMA: the ring takes over (CTS), nothing to share
        }
        assert!(e.proto.is_done(id), "the first message is pulled whole");
        assert_eq!(first, message);
        assert_eq!(queued(&e, 1).last(), Some(&Frame::Fin { send_id: 76 }));

        let mut buf = vec![0u8; message.len()];
        let id = e
            .irecv(0, Some(1), Some(3), buf.as_mut_ptr(), buf.len())
            .unwrap();
        deliver(&mut e, 1, rts(77), &[]).unwrap();
        let Some(&Frame::Share {
            send_id: 77,
            recv_id,
            dest_addr,
        }) = queued(&e, 1).last()
        else {
            panic!("no SHARE: {:?}", queued(&e, 1))
        };
        assert_eq!(dest_addr, buf.as_ptr() as u64);
        e.proto.run_shared_pulls().unwrap();
        let split = share_split(len) as usize;
        assert_eq!(buf[..split], message[..split]);
        assert!(buf[split..].iter().all(|&b| b == 0), "the sender's part");
        assert!(!e.proto.is_done(id));
        // The sender's half, as its process_vm_writev would leave it.
        buf[split..].copy_from_slice(&message[split..]);
        let written = Frame::Written {
            recv_id,
            offset: split as u64,
            len: len - split as u64,
        };
        deliver(&mut e, 1, written, &[]).unwrap();
        assert!(e.proto.is_done(id));
        assert_eq!(buf, message);
        assert_eq!(queued(&e, 1).last(), Some(&Frame::Fin { send_id: 77 }));
        assert!(
            deliver(&mut e, 1, written, &[]).is_err(),
            "WRITTEN for a finished receive"
        );
    }

    #[test]
    fn a_shared_send_writes_the_back_and_waits_for_fin() {
        let mut e = cma_engine();
        let payload = pattern_bytes(100_000);
        let len = payload.len() as u64;
        let id = e
            .isend(0, 1, 9, payload.as_ptr(), payload.len(), SendMode::Standard)
            .unwrap();
        let mut dest = vec![0u8; payload.len()];
        let share = Frame::Share {
            send_id: id,
            recv_id: 5,
            dest_addr: dest.as_mut_ptr() as u64,
        };
        deliver(&mut e, 1, share, &[]).unwrap();
        let split = share_split(len) as usize;
        if e.proto.cma {
            assert_eq!(dest[split..], payload[split..]);
            assert!(dest[..split].iter().all(|&b| b == 0), "the receiver's part");
            assert_eq!(
                queued(&e, 1).last(),
                Some(&Frame::Written {
                    recv_id: 5,
                    offset: split as u64,
                    len: len - split as u64
                })
            );
        }
        assert!(!e.proto.is_done(id), "the receiver still reads the front");
        assert!(deliver(&mut e, 1, share, &[]).is_err(), "a second SHARE");
        deliver(&mut e, 1, Frame::Fin { send_id: id }, &[]).unwrap();
        assert!(e.proto.is_done(id));
    }

    #[test]
    fn a_shared_send_that_may_not_write_pushes_its_part() {
        let mut e = engine(2);
        let payload = pattern_bytes(100_000);
        let len = payload.len() as u64;
        let id = e
            .isend(0, 1, 9, payload.as_ptr(), payload.len(), SendMode::Standard)
            .unwrap();
        let share = Frame::Share {
            send_id: id,
            recv_id: 5,
            dest_addr: 0x1000,
        };
        deliver(&mut e, 1, share, &[]).unwrap();
        let mut pushed = Vec::new();
        while let Some((frame, offset)) = e.proto.next_chunk(id, 16 << 10) {
            pushed.push((offset, frame.len as u64));
            e.proto.frame_written(&frame);
        }
        let split = share_split(len);
        assert_eq!(pushed.first().map(|c| c.0), Some(split));
        assert_eq!(pushed.iter().map(|c| c.1).sum::<u64>(), len - split);
        assert!(!e.proto.is_done(id));
        deliver(&mut e, 1, Frame::Fin { send_id: id }, &[]).unwrap();
        assert!(e.proto.is_done(id));
    }

    #[test]
    fn receive_posted_while_an_eager_payload_arrives_gets_the_message() {
        let mut e = engine(2);
        let frame = Frame::Eager {
            context: 0,
            tag: 5,
            len: 4,
        };
        // The header arrives before any receive is posted: the message will be kept.
        let mut incoming = e.proto.begin_frame(1, &frame).unwrap();
        incoming.store(0, b"ab");
        // The receive is posted while the payload is still arriving.
        let mut buf = [0u8; 4];
        let id = e
            .irecv(0, Some(1), Some(5), buf.as_mut_ptr(), buf.len())
            .unwrap();
        assert!(!e.proto.is_done(id));
        incoming.store(2, b"cd");
        e.proto.end_frame(1, &frame, incoming).unwrap();
        assert!(
            e.proto.is_done(id),
            "the posted receive must get the message"
        );
        assert_eq!(&buf, b"abcd");
        assert_eq!(e.iprobe(0, None, None).unwrap(), None, "nothing left over");
    }

    #[test]
    fn unexpected_eager_waits_for_its_receive_in_order() {
        let mut e = engine(2);
        for (i, data) in [b"one!", b"two!"].iter().enumerate() {
            let frame = Frame::Eager {
                context: 0,
                tag: 1,
                len: 4,
            };
            let mut incoming = e.proto.begin_frame(1, &frame).unwrap();
            incoming.store(0, &data[..]);
            e.proto.end_frame(1, &frame, incoming).unwrap();
            assert_eq!(
                e.iprobe(0, Some(1), None).unwrap().map(|(_, len)| len),
                Some(4),
                "message {i}"
            );
        }
        for expected in [b"one!", b"two!"] {
            let mut buf = [0u8; 4];
            let id = e.irecv(0, None, Some(1), buf.as_mut_ptr(), 4).unwrap();
            assert!(e.proto.is_done(id));
            assert_eq!(&buf, expected);
        }
    }

    /// An active handler on `context` that records (source, tag, payload) and answers each
    /// message with its payload reversed.
    type Seen = std::rc::Rc<std::cell::RefCell<Vec<(u32, i32, Vec<u8>)>>>;

    fn echo_handler(seen: Seen) -> ActiveFn {
        Box::new(move |source, tag, data, replies| {
            seen.borrow_mut().push((source, tag, data.to_vec()));
            replies.push(ActiveReply {
                dest: source,
                tag: tag + 1,
                data: data.iter().rev().copied().collect(),
            });
        })
    }

    /// The eager frames queued for `peer` with their payloads.
    fn queued_eager(e: &Engine, peer: usize) -> Vec<(Frame, Vec<u8>)> {
        e.proto.peers[peer]
            .outq
            .iter()
            .filter_map(|o| match o {
                Out::Frame(f) => {
                    let frame = Frame::decode(&f.header, u64::MAX).ok()?;
                    // SAFETY: a queued frame's payload is valid for `len` bytes.
                    let data = unsafe { std::slice::from_raw_parts(f.payload, f.len) }.to_vec();
                    matches!(frame, Frame::Eager { .. }).then_some((frame, data))
                }
                Out::Stream(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_message_on_an_active_context_goes_to_its_handler_and_the_reply_is_sent() {
        let mut e = engine(3);
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        e.set_active(6, echo_handler(seen.clone()));
        let frame = Frame::Eager {
            context: 6,
            tag: 9,
            len: 3,
        };
        // Split over two stores, as a TCP read may deliver it.
        let mut incoming = e.proto.begin_frame(2, &frame).unwrap();
        incoming.store(0, b"ab");
        incoming.store(2, b"c");
        e.proto.end_frame(2, &frame, incoming).unwrap();
        assert_eq!(*seen.borrow(), vec![(2, 9, b"abc".to_vec())]);
        assert_eq!(
            e.iprobe(6, None, None).unwrap(),
            None,
            "not queued for a receive"
        );
        e.progress().unwrap();
        assert_eq!(
            queued_eager(&e, 2),
            vec![(
                Frame::Eager {
                    context: 6,
                    tag: 10,
                    len: 3
                },
                b"cba".to_vec()
            )]
        );
    }

    #[test]
    fn other_contexts_and_a_cleared_handler_match_receives_as_before() {
        let mut e = engine(2);
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        e.set_active(6, echo_handler(seen.clone()));
        deliver(
            &mut e,
            1,
            Frame::Eager {
                context: 0,
                tag: 1,
                len: 2,
            },
            b"hi",
        )
        .unwrap();
        assert_eq!(
            e.iprobe(0, Some(1), Some(1)).unwrap().map(|(_, l)| l),
            Some(2)
        );
        // A receive posted on the active context does not take its messages.
        let mut buf = [0u8; 2];
        let id = e.irecv(6, None, None, buf.as_mut_ptr(), 2).unwrap();
        deliver(
            &mut e,
            1,
            Frame::Eager {
                context: 6,
                tag: 1,
                len: 2,
            },
            b"yo",
        )
        .unwrap();
        assert!(!e.proto.is_done(id));
        assert_eq!(seen.borrow().len(), 1);
        assert!(e.clear_active(6).is_some());
        assert!(e.clear_active(6).is_none());
        deliver(
            &mut e,
            1,
            Frame::Eager {
                context: 6,
                tag: 1,
                len: 2,
            },
            b"ok",
        )
        .unwrap();
        assert!(e.proto.is_done(id), "without a handler the receive gets it");
        assert_eq!(&buf, b"ok");
        assert_eq!(seen.borrow().len(), 1);
    }

    #[test]
    fn rendezvous_on_an_active_context_is_a_protocol_error() {
        let mut e = engine(2);
        e.set_active(6, Box::new(|_, _, _, _| {}));
        let rts = Frame::Rts {
            context: 6,
            tag: 0,
            len: 1 << 20,
            send_id: 1,
            source_addr: 0,
        };
        assert!(matches!(
            deliver(&mut e, 1, rts, &[]),
            Err(Error::Protocol { rank: 1, .. })
        ));
    }

    #[test]
    fn owned_messages_respect_the_limit_and_loop_back_to_our_own_handler() {
        let mut e = engine(2);
        let limit = e.active_limit(1);
        assert!(limit >= 1);
        assert!(matches!(
            e.send_owned(6, 1, 0, vec![0; limit + 1]),
            Err(Error::BufferTooSmall { .. })
        ));
        e.send_owned(6, 1, 0, vec![7; limit]).unwrap();
        assert!(matches!(
            e.send_owned(6, 2, 0, Vec::new()),
            Err(Error::RankOutOfRange { rank: 2, size: 2 })
        ));
        assert_eq!(queued_eager(&e, 1)[0].1.len(), limit);
        // To ourselves: the handler runs in progress, and its reply to us runs it again.
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        e.set_active(6, echo_handler(seen.clone()));
        e.send_owned(6, 0, 1, b"xy".to_vec()).unwrap();
        e.progress().unwrap();
        e.progress().unwrap();
        let seen = seen.borrow();
        assert_eq!(seen[0], (0, 1, b"xy".to_vec()));
        assert_eq!(seen[1], (0, 2, b"yx".to_vec()));
    }

    /// Two engines, ranks 0 and 1 of one process, joined by real shared-memory rings of
    /// `ring` bytes (the segment files are unlinked at once).
    fn shm_pair(ring: usize) -> (Engine, Engine) {
        let mut b = [0u8; 7];
        getrandom::getrandom(&mut b).unwrap();
        let job = 0xE000_0000_0000_0000
            | u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], 0]);
        let c0 = ShmTransport::create(job, 0, 2, ring).unwrap();
        let c1 = ShmTransport::create(job, 1, 2, ring).unwrap();
        let t0 = ShmTransport::attach(c0, job, 0, &[0, 1], 2, ring).unwrap();
        let t1 = ShmTransport::attach(c1, job, 1, &[0, 1], 2, ring).unwrap();
        t0.unlink_own();
        t1.unlink_own();
        let make = |me: u32, t: ShmTransport| {
            let mut e = engine(2);
            e.proto.me = me;
            for (rank, peer) in e.proto.peers.iter_mut().enumerate() {
                peer.route = match rank == me as usize {
                    true => Route::Loopback,
                    false => Route::Shm,
                };
            }
            e.shm_eager_limit = t.max_payload();
            e.shm_chunk = t.max_payload() / 2;
            e.shm = Some(t);
            e
        };
        (make(0, t0), make(1, t1))
    }

    fn send_eager(e: &mut Engine, dest: u32, tag: i32, data: &[u8]) {
        let id = e
            .isend(0, dest, tag, data.as_ptr(), data.len(), SendMode::Eager)
            .unwrap();
        e.wait(id).unwrap();
    }

    #[test]
    fn an_in_place_receive_reads_the_ring_and_holds_the_peer_until_released() {
        let (mut a, mut b) = shm_pair(4096);
        let mut buf = [0u8; 64];
        let id = b
            .irecv_in_place(0, 0, Some(5), buf.as_mut_ptr(), buf.len())
            .unwrap();
        send_eager(&mut a, 1, 5, b"in the ring");
        send_eager(&mut a, 1, 6, b"behind it");
        b.wait_until(|p| p.is_done(id)).unwrap();
        let (ptr, len) = b.in_place(id).expect("left in the ring");
        // SAFETY: valid until the release below.
        assert_eq!(
            unsafe { std::slice::from_raw_parts(ptr, len) },
            b"in the ring"
        );
        assert_eq!(buf, [0u8; 64], "not copied");
        assert_eq!(b.take(id).map(|c| c.len), Some(11));
        assert_eq!(b.iprobe(0, Some(0), Some(6)).unwrap(), None, "held behind");
        b.release_in_place(id);
        assert!(b.in_place(id).is_none());
        b.progress().unwrap();
        assert!(
            b.iprobe(0, Some(0), Some(6)).unwrap().is_some(),
            "flows again"
        );
    }

    #[test]
    fn an_in_place_receive_copies_what_wraps_or_does_not_fit() {
        let (mut a, mut b) = shm_pair(4096);
        // Records of 1000 + header bytes: the fourth starts near the end of the ring and wraps.
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut copied = 0;
        for round in 0..6 {
            let mut buf = vec![0u8; 1000];
            let id = b
                .irecv_in_place(0, 0, Some(1), buf.as_mut_ptr(), buf.len())
                .unwrap();
            send_eager(&mut a, 1, 1, &data);
            b.wait_until(|p| p.is_done(id)).unwrap();
            match b.in_place(id) {
                // SAFETY: valid until the release below.
                Some((ptr, len)) => {
                    assert_eq!(unsafe { std::slice::from_raw_parts(ptr, len) }, &data[..])
                }
                None => {
                    assert_eq!(buf, data, "round {round}: copied instead");
                    copied += 1;
                }
            }
            b.take(id);
            b.release_in_place(id);
        }
        assert!(copied >= 1, "one of six 1 KiB records wraps a 4 KiB ring");
        // Longer than the buffer: truncated into it as any receive.
        let mut small = [0u8; 10];
        let id = b
            .irecv_in_place(0, 0, Some(2), small.as_mut_ptr(), small.len())
            .unwrap();
        send_eager(&mut a, 1, 2, &data);
        b.wait_until(|p| p.is_done(id)).unwrap();
        assert!(b.in_place(id).is_none());
        assert_eq!(small[..], data[..10]);
        let c = b.take(id).unwrap();
        assert_eq!((c.len, c.message_len), (10, 1000));
        b.release_in_place(id);
        assert!(b.in_place.is_empty() && b.links.iter().all(|l| l.held.is_none()));
    }

    /// Receives the next message from rank 0 (any tag) on `e`: (tag, bytes).
    fn recv_any(e: &mut Engine) -> (i32, Vec<u8>) {
        let mut buf = vec![0u8; 4096];
        let id = e
            .irecv(0, Some(0), None, buf.as_mut_ptr(), buf.len())
            .unwrap();
        let c = e.wait(id).unwrap();
        buf.truncate(c.len);
        (c.tag, buf)
    }

    /// `b.take_arrived` from rank 0 on context 0 with `tag` into 8 bytes: (len, message_len,
    /// bytes) if it was there.
    fn arrived(b: &mut Engine, tag: i32) -> Option<(usize, usize, [u8; 8])> {
        let mut buf = [0u8; 8];
        match b.take_arrived(0, 0, tag, buf.as_mut_ptr(), 8).unwrap()? {
            Received::Now(c) => Some((c.len, c.message_len, buf)),
            Received::Later(_) => panic!("an eager message became a request"),
        }
    }

    #[test]
    fn an_arrived_message_comes_from_the_unexpected_queue_or_the_ring_head_in_order() {
        let (mut a, mut b) = shm_pair(4096);
        assert_eq!(arrived(&mut b, 5), None, "nothing sent");
        assert!(a.send_eager_now(0, 1, 4, b"first...".as_ptr(), 8));
        assert!(a.send_eager_now(0, 1, 5, b"second..".as_ptr(), 8));
        assert_eq!(
            arrived(&mut b, 5),
            None,
            "behind another message on the ring"
        );
        // A pass moves both to the unexpected queue (nothing is posted): taken from there.
        b.progress().unwrap();
        assert_eq!(arrived(&mut b, 5), Some((8, 8, *b"second..")));
        // Next on the ring: straight from it, cut to the buffer, and the ring moves on.
        assert!(a.send_eager_now(0, 1, 6, b"third...more".as_ptr(), 12));
        assert!(a.send_eager_now(0, 1, 7, b"fourth..".as_ptr(), 8));
        assert_eq!(arrived(&mut b, 6), Some((8, 12, *b"third...")));
        assert_eq!(arrived(&mut b, 7), Some((8, 8, *b"fourth..")));
        assert_eq!(b.proto.matcher.unexpected_len(), 1, "tag 4 still waits");
    }

    #[test]
    fn a_reserved_message_keeps_its_place_before_sends_started_while_it_was_open() {
        let (mut a, mut b) = shm_pair(4096);
        let (at, got) = a.reserve_eager(1, 100, 8).expect("room");
        assert_eq!(got, 100);
        assert!(a.reserve_eager(1, 8, 8).is_none(), "one at a time per peer");
        let later = b"sent while reserved";
        let id = a
            .isend(0, 1, 2, later.as_ptr(), later.len(), SendMode::Eager)
            .unwrap();
        assert!(!a.send_eager_now(0, 1, 3, later.as_ptr(), later.len()));
        assert!(!a.proto.is_done(id), "queued behind the reservation");
        b.progress().unwrap();
        assert_eq!(b.iprobe(0, Some(0), None).unwrap(), None, "nothing visible");
        // SAFETY: the reservation holds `got` writable bytes.
        unsafe { std::ptr::copy_nonoverlapping(b"reserved".as_ptr(), at, 8) };
        assert!(!a.publish_eager(0, 1, 1, got + 1), "longer than reserved");
        assert!(a.publish_eager(0, 1, 1, 8));
        a.wait(id).unwrap();
        assert_eq!(recv_any(&mut b), (1, b"reserved".to_vec()));
        assert_eq!(recv_any(&mut b), (2, later.to_vec()));
    }

    #[test]
    fn an_abandoned_reservation_sends_nothing_and_lets_the_queue_flow() {
        let (mut a, mut b) = shm_pair(4096);
        let (at, _) = a.reserve_eager(1, 64, 8).expect("room");
        // SAFETY: 64 bytes reserved.
        unsafe { std::ptr::write_bytes(at, 0xAA, 64) };
        let data = b"after";
        let id = a
            .isend(0, 1, 4, data.as_ptr(), data.len(), SendMode::Eager)
            .unwrap();
        a.abandon_eager(1);
        a.wait(id).unwrap();
        assert_eq!(recv_any(&mut b), (4, data.to_vec()));
        b.progress().unwrap();
        assert_eq!(b.iprobe(0, Some(0), None).unwrap(), None);
        assert!(!a.publish_eager(0, 1, 1, 0), "nothing left to publish");
    }

    #[test]
    fn no_reservation_when_the_ring_is_full_or_sends_are_queued() {
        let (mut a, mut b) = shm_pair(4096);
        let data = [7u8; 1000];
        while a.send_eager_now(0, 1, 1, data.as_ptr(), data.len()) {}
        assert!(
            a.reserve_eager(1, 1000, 1000).is_none(),
            "full: the caller falls back"
        );
        let small = a.reserve_eager(1, 1000, 8);
        if let Some((_, got)) = small {
            assert!(got < 1000, "only what is left");
            a.abandon_eager(1);
        }
        // A send queued behind the full ring: a reservation must not overtake it.
        let id = a
            .isend(0, 1, 2, data.as_ptr(), data.len(), SendMode::Eager)
            .unwrap();
        assert!(!a.proto.is_done(id));
        for _ in 0..3 {
            assert_eq!(recv_any(&mut b).0, 1);
        }
        assert!(a.reserve_eager(1, 8, 8).is_none(), "queued send first");
        a.wait(id).unwrap();
        assert!(a.reserve_eager(1, 8, 8).is_some(), "then there is room");
        a.abandon_eager(1);
        assert_eq!(recv_any(&mut b), (2, data.to_vec()));
        // Not on shared memory (ourselves): never.
        assert!(a.reserve_eager(0, 8, 8).is_none());
    }
}
