//! What arrives: where an incoming frame's payload goes, and messages kept until a receive asks.

use super::*;

/// What an RTS announced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Announced {
    pub(crate) len: u64,
    pub(super) send_id: u64,
    pub(super) source_addr: u64,
}

/// Unmatched message kept until a receive asks for it.
pub(crate) enum Unexpected {
    Eager(Vec<u8>),
    Rts(Announced),
}

pub(super) enum Arrival {
    Control,
    /// A chunk sent again for a receive that is already complete: read and dropped.
    Discard,
    EagerMatched(ReqId, Envelope),
    EagerKept(Envelope, Vec<u8>),
    Data(ReqId),
}

/// Where the payload of an arriving frame goes. Bytes past `cap` are dropped (truncation).
pub(crate) struct Incoming {
    pub(super) ptr: *mut u8,
    pub(super) cap: usize,
    pub(super) arrival: Arrival,
}

impl Incoming {
    pub(super) fn control() -> Incoming {
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
    pub(super) fn matched(&self) -> Option<ReqId> {
        match self.arrival {
            Arrival::EagerMatched(id, _) => Some(id),
            _ => None,
        }
    }
}
