//! Requests: the slots that name them, their states and what a finished one reports.

use super::*;

/// Copies a kept message (`data`, which came with `env`) into `cap` bytes at `buf`; what its
/// receive completes with.
///
/// # Safety
/// `buf` is non-null and valid for writes of `cap` bytes.
pub(super) unsafe fn copy_kept(env: Envelope, data: &[u8], buf: *mut u8, cap: usize) -> Completion {
    let n = data.len().min(cap);
    // SAFETY: the caller's promise; `data` holds at least `n` bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, n) };
    Completion {
        source: env.source,
        tag: env.tag,
        len: n,
        message_len: data.len(),
        cancelled: false,
        fault: Fault::None,
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
    /// Ended by a failure (fault-tolerant jobs), not by its message.
    pub fault: Fault,
}

/// Why a request ended without its message (fault-tolerant jobs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// It did not: it ended normally (or was cancelled).
    None,
    /// Its peer failed; `Completion::source` is that peer.
    ProcFailed,
    /// Its communicator was revoked before it matched.
    Revoked,
}

pub(super) enum ReqState {
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
    /// Completed by work above the engine (a running collective, see [`Hook`]).
    Hooked,
    Done(Completion),
}

pub(super) struct Slot {
    pub(super) generation: u32,
    pub(super) state: ReqState,
}

/// Slot generations wrap at this mask.
const GENERATIONS: u32 = 0xff_ffff;

/// Request slots, reused without allocation once warm.
pub(super) struct Requests {
    pub(super) slots: Vec<Slot>,
    pub(super) free: Vec<u32>,
}

impl Requests {
    #[inline]
    pub(super) fn insert(&mut self, state: ReqState) -> ReqId {
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

    #[inline]
    pub(super) fn get_mut(&mut self, id: ReqId) -> Option<&mut ReqState> {
        let slot = self.slots.get_mut((id & 0xffff_ffff) as usize)?;
        (u64::from(slot.generation) == id >> 32 && !matches!(slot.state, ReqState::Free))
            .then_some(&mut slot.state)
    }

    #[inline]
    pub(super) fn get(&self, id: ReqId) -> Option<&ReqState> {
        let slot = self.slots.get((id & 0xffff_ffff) as usize)?;
        (u64::from(slot.generation) == id >> 32 && !matches!(slot.state, ReqState::Free))
            .then_some(&slot.state)
    }

    /// The completion of request `id` if it is done, its slot freed: one look at the slot,
    /// where a look and then a removal took two (every finished request passes here).
    #[inline]
    pub(super) fn take_done(&mut self, id: ReqId) -> Option<Completion> {
        let index = (id & 0xffff_ffff) as u32;
        let slot = self.slots.get_mut(index as usize)?;
        match slot.state {
            ReqState::Done(c) if u64::from(slot.generation) == id >> 32 => {
                slot.state = ReqState::Free;
                // 24 bits, so that an id fits a binding's handle beside its tag
                // (`RawRequest::to_bits`).
                slot.generation = (slot.generation + 1) & GENERATIONS;
                self.free.push(index);
                Some(c)
            }
            _ => None,
        }
    }
}

// Sizes of what every message touches (x86-64): a request's slot and what a finished request
// reports. A field added to one of them costs every send and receive.
const _: () = assert!(std::mem::size_of::<Slot>() <= 112);
const _: () = assert!(std::mem::size_of::<Completion>() <= 32);

impl Engine {
    /// Inserts a request that work above the engine completes ([`Proto::complete`]).
    pub(crate) fn new_hooked_request(&mut self) -> ReqId {
        self.proto.requests.insert(ReqState::Hooked)
    }

    /// Inserts a request that is complete from the start.
    pub(crate) fn new_done_request(&mut self, completion: Completion) -> ReqId {
        self.proto.requests.insert(ReqState::Done(completion))
    }

    /// Takes the completion of a finished request and frees its slot.
    #[inline]
    pub(crate) fn take(&mut self, id: ReqId) -> Option<Completion> {
        self.proto.requests.take_done(id)
    }
}
