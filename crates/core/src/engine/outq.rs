//! What waits to be written to a peer: frames and rendezvous streams in its out-queue.

use super::*;

/// An empty buffer may come as a null pointer (MPI allows it); copies and slices need non-null.
pub(super) fn non_null_if_empty(buf: *mut u8, len: usize) -> *mut u8 {
    if len == 0 {
        std::ptr::NonNull::<u8>::dangling().as_ptr()
    } else {
        buf
    }
}

/// An ordered frame (not DATA, not RAIL_DOWN): counted and kept for sending again over rails.
pub(super) fn ordered_frame(frame: &OutFrame) -> bool {
    Frame::decode(&frame.header, u64::MAX).is_ok_and(|f| f.is_ordered())
}

pub(super) enum Out {
    Frame(OutFrame),
    /// A rendezvous whose DATA chunks are cut when they reach the head of the queue.
    Stream(ReqId),
    /// A rendezvous over a fabric (`engine/fabric.rs`) on `context` with `tag`, whose buffer
    /// is registered when it reaches the head of the queue: it leaves as an RTS_READ.
    Expose {
        id: ReqId,
        context: u32,
        tag: i32,
    },
}
