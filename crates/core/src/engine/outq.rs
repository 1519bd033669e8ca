//! What waits to be written to a peer: frames and rendezvous streams in its out-queue.

use super::*;

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

impl OutFrame {
    /// A copy that owns its payload and completes nothing, to be written again.
    pub(super) fn copy(&self) -> OutFrame {
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

    pub(super) fn control(frame: Frame) -> OutFrame {
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

pub(super) enum Out {
    Frame(OutFrame),
    /// A rendezvous whose DATA chunks are cut when they reach the head of the queue.
    Stream(ReqId),
}
