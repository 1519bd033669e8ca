//! What each half of the engine keeps per peer: the protocol's [`Peer`], the engine's [`Link`]
//! and, with several TCP rails, its [`Lanes`].

use super::*;

/// The protocol's state for one peer (a universe rank). Every peer has one, made at once, so
/// that a peer is never in one table and missing from another.
pub(super) struct Peer {
    /// How frames reach it, chosen once when it became known.
    pub(super) route: Route,
    /// Its process id, 0 while unknown: single-copy (CMA) reads and writes name it, and so
    /// does the error when it is lost.
    pub(super) pid: u32,
    /// Frames waiting for their turn on its channel.
    pub(super) outq: VecDeque<Out>,
    /// Whether it is on `Proto::busy`.
    pub(super) queued: bool,
    /// Whether it said BYE: the end of its connection is orderly (another world's processes
    /// finalize and exit on their own).
    pub(super) departed: bool,
    /// Whether it failed (fault-tolerant jobs, see `engine/failure.rs`).
    pub(super) failed: bool,
    /// Whether a pull has read its memory once: only such peers are asked to share a copy, so
    /// a kernel that refuses CMA is found out before a copy depends on it.
    pub(super) cma_proven: bool,
    /// Rendezvous sends to it not yet complete. A receiver that is also sending a large
    /// message to its sender (an exchange) pulls alone: both cores copy already, and sharing
    /// would only add a round trip.
    pub(super) large_out: u32,
    /// Ordered frames taken from it (multi-rail only).
    pub(super) ordered_in: u64,
    /// Ordered frames from it still to drop: sent again after a rail failed, but already
    /// taken from that rail.
    pub(super) skip: u64,
}

impl Peer {
    pub(super) fn new(route: Route, pid: u32) -> Peer {
        Peer {
            route,
            pid,
            outq: VecDeque::new(),
            queued: false,
            departed: false,
            failed: false,
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

/// The engine's state for one peer, beside the protocol's [`Peer`].
pub(super) struct Link {
    /// The payload length of the record held at the head of its shared-memory ring, which
    /// `progress` leaves there until [`Engine::release_in_place`]. A `u32` (a larger payload
    /// is copied out instead) keeps a link at 16 bytes, which the ring loop of
    /// `Engine::progress_pass` finds with the shift it uses for the rings.
    pub(super) held: Option<u32>,
    /// Its rails, for a peer reached over several TCP rails (else `None`). Boxed: most peers
    /// have none, and the loops over peers stay short.
    pub(super) lanes: Option<Box<Lanes>>,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Link>() == 16);

impl Link {
    pub(super) fn new(route: Route, rails: usize, policy: crate::config::RailPolicy) -> Link {
        Link {
            held: None,
            lanes: (rails > 1 && route == Route::Tcp).then(|| Box::new(Lanes::new(rails, policy))),
        }
    }
}

/// What the rails to one peer are doing.
pub(super) struct Lanes {
    /// The frame each rail is writing; rail 0's is an ordered frame or a chunk.
    pub(super) writing: Vec<Option<OutFrame>>,
    pub(super) alive: Vec<bool>,
    /// Sends whose chunks are being handed out, oldest first.
    pub(super) striped: VecDeque<ReqId>,
    /// Chunks of failed rails to send again: (send, offset, length).
    pub(super) resend: VecDeque<(ReqId, u64, u64)>,
    /// Chunks each rail carried, kept until their send is acknowledged.
    pub(super) carried: Vec<Vec<(ReqId, u64, u64)>>,
    /// The rail of the message below the striping size being handed out.
    pub(super) pinned: Option<(ReqId, usize)>,
    pub(super) striper: Striper,
    /// The rail that carries the ordered frames: the first that works.
    pub(super) ordered: usize,
    /// Ordered frames written so far.
    pub(super) sent_seq: u64,
    /// Copies of the ordered frames written but not yet acknowledged by the peer's TCP (on a
    /// rail through a relay: not within `ferry_wire::relay::HELD_IN_RELAY` bytes of that
    /// acknowledgement), with the rail's byte count at each one's end: sent again if that rail
    /// fails.
    pub(super) retained: VecDeque<(u64, OutFrame)>,
}

impl Lanes {
    pub(super) fn new(rails: usize, policy: crate::config::RailPolicy) -> Lanes {
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

    pub(super) fn idle(&self) -> bool {
        self.striped.is_empty()
            && self.resend.is_empty()
            && self.writing.iter().all(Option::is_none)
    }
}
