//! What crosses between the progress engine and a transport, below both: what every transport
//! does ([`Transport`]), a frame waiting to be written ([`OutFrame`]), where an arriving frame's
//! payload goes ([`Incoming`]), and what a transport calls for every frame that arrives
//! ([`FrameSink`]). A transport writes the second and fills the third without looking inside;
//! the engine's protocol implements the last.

use crate::error::Error;
use crate::matching::Envelope;
use ferry_wire::{Frame, HEADER_LEN};
use std::os::fd::RawFd;

/// Identifies a request: slot index in the low 32 bits, slot generation in the high 32.
pub(crate) type ReqId = u64;

/// What shared memory, TCP and the fabric each do for the engine. Statically dispatched: the
/// engine holds each transport by its own type.
pub(crate) trait Transport {
    /// Reads what has arrived, without waiting, handing each frame to `sink`; whether anything
    /// moved.
    fn poll_input(&mut self, sink: &mut impl FrameSink) -> Result<bool, Error>;
    /// Writes `frame` to `peer` if its channel has room now (all of it, or for a stream as much
    /// as fits, counted in `frame.sent`): true once the whole frame is out.
    fn try_write(&mut self, peer: usize, frame: &mut OutFrame) -> Result<bool, Error>;
    /// The descriptor that becomes readable when input arrives, for a sleeping wait's `epoll`;
    /// `None` for a transport that wakes its sleeper otherwise (shared memory: a futex).
    fn wake_fd(&self) -> Option<RawFd>;
}

/// How a sink takes an eager frame's payload before the frame is dispatched
/// ([`FrameSink::take_eager`]), for a transport that holds the whole payload at hand.
pub(crate) enum EagerTake {
    /// Into the buffer of posted receive `id` (at most `cap` bytes); the transport then calls
    /// [`FrameSink::eager_stored`] and not `end_frame`.
    Posted {
        id: ReqId,
        buf: *mut u8,
        cap: usize,
        env: Envelope,
    },
    /// Kept for a receive to come, at this `Incoming`: the frame goes on as after `begin_frame`.
    Kept(Incoming),
    /// Through `begin_frame`, as any frame.
    Neither,
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
    /// Whether a lost peer fails only what waits on it (a fault-tolerant job), not the job.
    fn survives_loss(&self) -> bool {
        false
    }
    /// Whether `peer` said BYE: the end of its connection is then no failure.
    fn departed(&self, _peer: u32) -> bool {
        false
    }
    /// A fabric read of receive `id` from `peer` ([`FabricRead`]) completed.
    fn read_done(&mut self, peer: u32, id: ReqId) -> Result<(), Error>;
    /// Whether `peer`'s input waits (the payload at its head is read in place by a receive
    /// that has not released it): a transport leaves it unread.
    fn paused(&self, _peer: u32) -> bool {
        false
    }
    /// The commonest frame first: where an eager frame from `peer` goes, decided before
    /// `begin_frame` (see [`EagerTake`]).
    fn take_eager(&mut self, _peer: u32, _frame: &Frame) -> EagerTake {
        EagerTake::Neither
    }
    /// The payload of an eager frame taken by a posted receive ([`EagerTake::Posted`]) is in
    /// its buffer: `stored` of its `len` bytes.
    fn eager_stored(&mut self, _id: ReqId, _env: Envelope, _len: u64, _stored: usize) {}
    /// Whether some receive may read its payload in place (the cheap look before
    /// [`FrameSink::keep_in_place`]).
    fn reads_in_place(&self) -> bool {
        false
    }
    /// Whether the receive that `incoming` feeds reads the whole payload of `len` bytes where
    /// the transport holds it (no copy): the transport then keeps it there, unread past it,
    /// until the sink releases it, and calls `end_frame` at once.
    fn keep_in_place(&mut self, _peer: u32, _incoming: &Incoming, _len: usize) -> bool {
        false
    }
}

/// A read the receiver of an RTS_READ starts: `len` bytes at `remote_addr` of `peer`'s memory
/// under `key`, into the buffer of receive `id`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FabricRead {
    pub(crate) id: ReqId,
    pub(crate) peer: u32,
    pub(crate) remote_addr: u64,
    pub(crate) key: u64,
    pub(crate) buf: *mut u8,
    pub(crate) len: usize,
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

// A queued frame is touched by every send: a field added to it costs every message.
const _: () = assert!(std::mem::size_of::<OutFrame>() <= 96);

impl OutFrame {
    /// A copy that owns its payload and completes nothing, to be written again.
    pub(crate) fn copy(&self) -> OutFrame {
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

    pub(crate) fn control(frame: Frame) -> OutFrame {
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

/// What an arriving payload is for, kept with it until its frame ends (the engine's; a
/// transport carries it without looking).
pub(crate) enum Arrival {
    Control,
    /// A chunk sent again for a receive that is already complete: read and dropped.
    Discard,
    EagerMatched(ReqId, Envelope),
    EagerKept(Envelope, Vec<u8>),
    Data(ReqId),
    /// The memory key that follows an RTS_READ header (boxed: `Incoming::ptr` points into it,
    /// and the box stays put while the `Incoming` moves).
    Key(Box<[u8; 8]>),
}

/// Where the payload of an arriving frame goes. Bytes past `cap` are dropped (truncation).
pub(crate) struct Incoming {
    pub(crate) ptr: *mut u8,
    pub(crate) cap: usize,
    pub(crate) arrival: Arrival,
}

impl Incoming {
    pub(crate) fn control() -> Incoming {
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

    /// Where the key of an RTS_READ goes.
    pub(crate) fn key() -> Incoming {
        let mut key = Box::new([0u8; 8]);
        Incoming {
            ptr: key.as_mut_ptr(),
            cap: key.len(),
            arrival: Arrival::Key(key),
        }
    }

    /// The posted receive an eager frame matched, if it did.
    pub(crate) fn matched(&self) -> Option<ReqId> {
        match self.arrival {
            Arrival::EagerMatched(id, _) => Some(id),
            _ => None,
        }
    }
}
