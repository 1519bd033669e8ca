//! One-sided communication (MPI RMA): windows, their epochs, and the operations on them.
//!
//! Everything travels as messages on the window's own context (a duplicate of the
//! communicator it was created on), so it works over every transport alike. That context is an
//! active-message context of the runtime (`Comm::set_active_handler`): the runtime hands each
//! arriving message to [`Win::handle`] inside its own progress, whatever MPI call is driving it
//! (a barrier, a wait, a lock waiting for its grant), and sends the replies the handler queues.
//! The target therefore applies operations without taking part, and one at a time: accumulates
//! to the same location are atomic with respect to each other.
//!
//! * Origin side: an operation is cut into pieces that fit one eager message
//!   (`Comm::active_limit`); each piece carries the target region as a block list (the
//!   flattened target datatype, see [`wire`]) and the packed origin data. Every piece is
//!   answered (ACK, or DATA for the reads); [`Win::pending`] counts the answers due per target,
//!   and a flush waits until it is zero.
//! * Synchronisation: fence = flush every target + barrier on the window's communicator;
//!   post/start/complete/wait = POST and COMPLETE messages counted per peer; lock = LOCK, wait
//!   for GRANT (the target queues conflicting requests in [`Locks`]), unlock = flush + UNLOCK,
//!   wait for UNLOCKED. Messages from one origin arrive in order, so an UNLOCK or COMPLETE
//!   arrives after the operations before it were applied.
//!
//! [`Win`] is sans-IO: it takes messages in and hands replies out, and is unit tested here;
//! the entry points in [`abi`] do the sending and waiting.

pub(crate) mod window;
pub(crate) mod wire;

use crate::datatype::{builtin_from_handle, Datatype};
use crate::ops::{apply_packed, BuiltinOp};
use std::collections::{HashMap, VecDeque};
use wire::{kind, Reader, WireError, Writer};

/// Where the data of a read lands at the origin: `count` elements of `dt` at `base`, from
/// packed byte `skip` on.
pub(crate) struct Landing {
    /// The origin (or result) datatype.
    pub(crate) dt: Datatype,
    /// Its element count.
    pub(crate) count: usize,
    /// The origin buffer.
    pub(crate) base: *mut u8,
    /// Packed offset of this piece.
    pub(crate) skip: usize,
}

/// The memory a rank exposes.
pub enum Memory {
    /// `size` bytes at `base` (created, allocated and shared windows); offsets are from `base`.
    Fixed {
        /// Start of the window.
        base: *mut u8,
        /// Its length in bytes.
        size: usize,
    },
    /// A dynamic window: offsets are addresses, which must lie in an attached region.
    Dynamic {
        /// Attached regions as (address, length).
        regions: Vec<(usize, usize)>,
    },
}

impl Memory {
    /// The address of `len` bytes at `off`, if they lie in the window.
    fn locate(&self, off: u64, len: u64) -> Option<*mut u8> {
        let end = off.checked_add(len)?;
        match self {
            Memory::Fixed { base, size } => {
                (end <= *size as u64).then(|| base.wrapping_add(off as usize))
            }
            Memory::Dynamic { regions } => {
                // A block may run across regions attached next to each other.
                let mut at = off;
                while at < end {
                    let (a, l) = regions
                        .iter()
                        .map(|&(a, l)| (a as u64, l as u64))
                        .find(|&(a, l)| at >= a && at < a + l)?;
                    at = a + l;
                }
                Some(off as usize as *mut u8)
            }
        }
    }

    /// Addresses of every block, or `None` if one lies outside the window.
    fn locate_all(&self, blocks: &[(u64, u64)]) -> Option<Vec<(*mut u8, usize)>> {
        blocks
            .iter()
            .map(|&(off, len)| self.locate(off, len).map(|p| (p, len as usize)))
            .collect()
    }
}

/// The target's lock: one exclusive holder or any number of shared ones, and the requests
/// waiting in arrival order.
#[derive(Debug, Default)]
pub(crate) struct Locks {
    exclusive: Option<usize>,
    shared: usize,
    waiting: VecDeque<(usize, bool)>,
}

impl Locks {
    fn compatible(&self, exclusive: bool) -> bool {
        self.exclusive.is_none() && (!exclusive || self.shared == 0)
    }

    fn take(&mut self, rank: usize, exclusive: bool) {
        if exclusive {
            self.exclusive = Some(rank);
        } else {
            self.shared += 1;
        }
    }

    /// Whether `rank` waits for the lock.
    pub(crate) fn is_waiting(&self, rank: usize) -> bool {
        self.waiting.iter().any(|&(r, _)| r == rank)
    }

    /// `rank` asks; whether it holds the lock now (else it waits its turn).
    pub(crate) fn request(&mut self, rank: usize, exclusive: bool) -> bool {
        if self.waiting.is_empty() && self.compatible(exclusive) {
            self.take(rank, exclusive);
            true
        } else {
            self.waiting.push_back((rank, exclusive));
            false
        }
    }

    /// `rank` gives its lock back; returns the ranks granted in turn.
    pub(crate) fn release(&mut self, rank: usize) -> Vec<usize> {
        if self.exclusive == Some(rank) {
            self.exclusive = None;
        } else {
            self.shared = self.shared.saturating_sub(1);
        }
        let mut granted = Vec::new();
        while let Some(&(r, exclusive)) = self.waiting.front() {
            if !self.compatible(exclusive) {
                break;
            }
            self.waiting.pop_front();
            self.take(r, exclusive);
            granted.push(r);
        }
        granted
    }
}

/// Replies queued by the handler: (rank, tag, payload).
pub type Replies = Vec<(usize, i32, Vec<u8>)>;

/// One rank's side of a window, shared between the entry points and the runtime's handler.
pub struct Win {
    /// The memory exposed here.
    pub(crate) memory: Memory,
    /// The lock on it.
    pub(crate) locks: Locks,
    /// Answers still due from each target.
    pub(crate) pending: Vec<u64>,
    /// Where the answers to reads go, by operation id.
    pub(crate) landings: HashMap<u64, Landing>,
    next_id: u64,
    /// GRANTs received from each target and not yet consumed.
    pub(crate) grants: Vec<u32>,
    /// UNLOCKEDs received from each target and not yet consumed.
    pub(crate) unlocked: Vec<u32>,
    /// POSTs received from each target and not yet consumed (PSCW).
    pub(crate) posts: Vec<u32>,
    /// COMPLETEs received from each origin and not yet consumed (PSCW).
    pub(crate) completes: Vec<u32>,
    /// A target refused an access outside its window.
    pub(crate) out_of_range: bool,
    /// A message that could not be read (a bug or a mismatched peer), reported at the next
    /// synchronisation.
    pub(crate) broken: Option<String>,
    /// GRANTs still to come from each target: locks are asked for without waiting (the
    /// target holds back the origin's operations until it grants), and the grant is collected
    /// at unlock.
    pub(crate) grants_due: Vec<u32>,
    /// Messages from each origin held back until its lock request is granted, in order.
    held: HashMap<usize, VecDeque<(i32, Vec<u8>)>>,
    /// Origins just granted whose held messages are to be served.
    granted: Vec<usize>,
}

/// ACK status: applied.
const DONE: u8 = 0;
/// ACK status: refused, outside the window (or an operation the target cannot apply).
const REFUSED: u8 = 1;

impl Win {
    /// A window of `n` ranks exposing `memory` here.
    pub fn new(n: usize, memory: Memory) -> Win {
        Win {
            memory,
            locks: Locks::default(),
            pending: vec![0; n],
            landings: HashMap::new(),
            next_id: 0,
            grants: vec![0; n],
            unlocked: vec![0; n],
            posts: vec![0; n],
            completes: vec![0; n],
            out_of_range: false,
            broken: None,
            grants_due: vec![0; n],
            held: HashMap::new(),
            granted: Vec::new(),
        }
    }

    /// A fresh operation id.
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Takes one message from `from`, applies it (or holds it back while `from` waits for the
    /// lock), and queues the answers.
    pub fn handle(&mut self, from: usize, tag: i32, data: &[u8], out: &mut Replies) {
        let request = (kind::PUT..=kind::UNLOCK).contains(&tag);
        let holding = self.held.get(&from).is_some_and(|q| !q.is_empty());
        if request && (holding || self.locks.is_waiting(from)) {
            self.held
                .entry(from)
                .or_default()
                .push_back((tag, data.to_vec()));
            return;
        }
        self.serve_logged(from, tag, data, out);
        while let Some(r) = self.granted.pop() {
            while !self.locks.is_waiting(r) {
                let Some((tag, data)) = self.held.get_mut(&r).and_then(|q| q.pop_front()) else {
                    break;
                };
                self.serve_logged(r, tag, &data, out);
            }
        }
    }

    fn serve_logged(&mut self, from: usize, tag: i32, data: &[u8], out: &mut Replies) {
        if let Err(e) = self.serve(from, tag, data, out) {
            if self.broken.is_none() {
                eprintln!("ferry: one-sided message {tag:#x} from rank {from} is malformed: {e}");
                self.broken = Some(format!("message {tag:#x} from rank {from}: {e}"));
            }
        }
    }

    fn serve(
        &mut self,
        from: usize,
        tag: i32,
        data: &[u8],
        out: &mut Replies,
    ) -> Result<(), WireError> {
        let mut r = Reader::new(data)?;
        let ack = |status: u8| Writer::new(2).u8(status).done();
        match tag {
            kind::PUT => {
                let blocks = r.blocks()?;
                let status = self.scatter(&blocks, r.rest());
                out.push((from, kind::ACK, ack(status)));
            }
            kind::GET => {
                let id = r.u64()?;
                let blocks = r.blocks()?;
                let reply = match self.gather(&blocks) {
                    Some(bytes) => Writer::new(10 + bytes.len()).u64(id).u8(DONE).bytes(&bytes),
                    None => Writer::new(10).u64(id).u8(REFUSED),
                };
                out.push((from, kind::DATA, reply.done()));
            }
            kind::ACC => {
                let op = r.u32()?;
                let ty = r.u32()?;
                let blocks = r.blocks()?;
                let status = match self.combine(op, ty, &blocks, r.rest()) {
                    Some(_) => DONE,
                    None => REFUSED,
                };
                out.push((from, kind::ACK, ack(status)));
            }
            kind::GET_ACC => {
                let id = r.u64()?;
                let op = r.u32()?;
                let ty = r.u32()?;
                let blocks = r.blocks()?;
                let reply = match self.combine(op, ty, &blocks, r.rest()) {
                    Some(old) => Writer::new(10 + old.len()).u64(id).u8(DONE).bytes(&old),
                    None => Writer::new(10).u64(id).u8(REFUSED),
                };
                out.push((from, kind::DATA, reply.done()));
            }
            kind::CAS => {
                let id = r.u64()?;
                let ty = r.u32()?;
                let off = r.u64()?;
                let size = builtin_from_handle(ty as usize).map_or(0, |b| b.size());
                let compare = r.bytes(size)?;
                let origin = r.bytes(size)?;
                let reply = match self.memory.locate(off, size as u64) {
                    Some(p) if size > 0 => {
                        let mut old = vec![0u8; size];
                        // SAFETY: `locate` checked the element lies in the exposed memory,
                        // which stays valid while the window exists.
                        unsafe {
                            std::ptr::copy_nonoverlapping(p, old.as_mut_ptr(), size);
                            if old == compare {
                                std::ptr::copy_nonoverlapping(origin.as_ptr(), p, size);
                            }
                        }
                        Writer::new(10 + size).u64(id).u8(DONE).bytes(&old)
                    }
                    _ => Writer::new(10).u64(id).u8(REFUSED),
                };
                out.push((from, kind::DATA, reply.done()));
            }
            kind::LOCK => {
                let exclusive = r.u8()? != 0;
                if self.locks.request(from, exclusive) {
                    out.push((from, kind::GRANT, Writer::new(1).done()));
                }
            }
            kind::UNLOCK => {
                for r in self.locks.release(from) {
                    out.push((r, kind::GRANT, Writer::new(1).done()));
                    self.granted.push(r);
                }
                out.push((from, kind::UNLOCKED, Writer::new(1).done()));
            }
            kind::POST => bump(&mut self.posts, from),
            kind::COMPLETE => bump(&mut self.completes, from),
            kind::ACK => {
                if r.u8()? != DONE {
                    self.out_of_range = true;
                }
                self.answered(from);
            }
            kind::DATA => {
                let id = r.u64()?;
                let status = r.u8()?;
                if let Some(l) = self.landings.remove(&id) {
                    if status == DONE {
                        // SAFETY: the origin buffer is lent to the operation until it is
                        // complete, which is not before this answer.
                        unsafe { l.dt.unpack_partial(r.rest(), l.count, l.skip, l.base) };
                    } else {
                        self.out_of_range = true;
                    }
                }
                self.answered(from);
            }
            kind::GRANT => bump(&mut self.grants, from),
            kind::UNLOCKED => bump(&mut self.unlocked, from),
            _ => {
                return Err(WireError::Short {
                    len: data.len(),
                    needed: 0,
                })
            }
        }
        Ok(())
    }

    fn answered(&mut self, from: usize) {
        if let Some(p) = self.pending.get_mut(from) {
            *p = p.saturating_sub(1);
        }
    }

    /// Writes `data` over the blocks, in order.
    fn scatter(&mut self, blocks: &[(u64, u64)], data: &[u8]) -> u8 {
        let Some(places) = self.memory.locate_all(blocks) else {
            return REFUSED;
        };
        let total: usize = places.iter().map(|&(_, l)| l).sum();
        if total != data.len() {
            return REFUSED;
        }
        let mut at = 0;
        for (p, len) in places {
            // SAFETY: `locate_all` checked each block lies in the exposed memory; `data` holds
            // `total` bytes.
            unsafe { std::ptr::copy(data.as_ptr().add(at), p, len) };
            at += len;
        }
        DONE
    }

    /// The bytes of the blocks, in order.
    fn gather(&self, blocks: &[(u64, u64)]) -> Option<Vec<u8>> {
        let places = self.memory.locate_all(blocks)?;
        let mut v = Vec::with_capacity(places.iter().map(|&(_, l)| l).sum());
        for (p, len) in places {
            // SAFETY: `locate_all` checked the block lies in the exposed memory.
            v.extend_from_slice(unsafe { std::slice::from_raw_parts(p, len) });
        }
        Some(v)
    }

    /// Applies `op` of type `ty` with `data` to the blocks; returns their old contents.
    fn combine(&mut self, op: u32, ty: u32, blocks: &[(u64, u64)], data: &[u8]) -> Option<Vec<u8>> {
        let op = BuiltinOp::from_handle(op as usize)?;
        let old = self.gather(blocks)?;
        match op {
            BuiltinOp::NoOp => {}
            BuiltinOp::Replace => {
                if self.scatter(blocks, data) != DONE {
                    return None;
                }
            }
            _ => {
                let ty = builtin_from_handle(ty as usize)?;
                let mut new = old.clone();
                apply_packed(op, ty, data, &mut new).ok()?;
                if self.scatter(blocks, &new) != DONE {
                    return None;
                }
            }
        }
        Some(old)
    }
}

fn bump(counts: &mut [u32], from: usize) {
    if let Some(c) = counts.get_mut(from) {
        *c += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(mem: &mut [u8]) -> Win {
        Win::new(
            3,
            Memory::Fixed {
                base: mem.as_mut_ptr(),
                size: mem.len(),
            },
        )
    }

    #[test]
    fn put_get_and_range_refusal() {
        let mut mem = [0u8; 16];
        let mut w = window(&mut mem);
        let mut out = Vec::new();
        let put = Writer::new(64)
            .blocks(&[(2, 2), (8, 3)])
            .bytes(b"abcde")
            .done();
        w.handle(1, kind::PUT, &put, &mut out);
        assert_eq!(out.pop(), Some((1, kind::ACK, vec![wire::VERSION, DONE])));
        let get = Writer::new(64).u64(5).blocks(&[(8, 3), (2, 2)]).done();
        w.handle(2, kind::GET, &get, &mut out);
        let (to, tag, reply) = out.pop().unwrap();
        assert_eq!((to, tag), (2, kind::DATA));
        assert_eq!(&reply[10..], b"cdeab");
        let outside = Writer::new(64).blocks(&[(14, 3)]).bytes(b"xyz").done();
        w.handle(1, kind::PUT, &outside, &mut out);
        assert_eq!(
            out.pop(),
            Some((1, kind::ACK, vec![wire::VERSION, REFUSED]))
        );
        drop(w);
        assert_eq!(&mem[..11], b"\0\0ab\0\0\0\0cde");
    }

    #[test]
    fn accumulates_apply_in_arrival_order_and_return_old_values() {
        let mut mem = [0u8; 8];
        let mut w = window(&mut mem);
        let mut out = Vec::new();
        let int = 0x209u32; // MPI_INT
        for _ in 0..5 {
            let acc = Writer::new(64)
                .u32(BuiltinOp::Sum.handle() as u32)
                .u32(int)
                .blocks(&[(4, 4)])
                .bytes(&3i32.to_le_bytes())
                .done();
            w.handle(0, kind::ACC, &acc, &mut out);
        }
        let fetch = Writer::new(64)
            .u64(9)
            .u32(BuiltinOp::NoOp.handle() as u32)
            .u32(int)
            .blocks(&[(4, 4)])
            .done();
        w.handle(2, kind::GET_ACC, &fetch, &mut out);
        let (_, _, reply) = out.pop().unwrap();
        assert_eq!(&reply[10..], &15i32.to_le_bytes());
        let cas = Writer::new(64)
            .u64(1)
            .u32(int)
            .u64(4)
            .bytes(&15i32.to_le_bytes())
            .bytes(&(-1i32).to_le_bytes())
            .done();
        w.handle(1, kind::CAS, &cas, &mut out);
        let (_, _, reply) = out.pop().unwrap();
        assert_eq!(&reply[10..], &15i32.to_le_bytes());
        drop(w);
        assert_eq!(&mem[4..], &(-1i32).to_le_bytes());
    }

    #[test]
    fn exclusive_locks_queue_and_are_granted_in_turn() {
        let mut l = Locks::default();
        assert!(l.request(0, false));
        assert!(l.request(1, false));
        assert!(
            !l.request(2, true),
            "exclusive waits for the shared holders"
        );
        assert!(!l.request(0, false), "and shared requests queue behind it");
        assert_eq!(l.release(0), Vec::<usize>::new());
        assert_eq!(l.release(1), vec![2]);
        assert_eq!(l.release(2), vec![0]);
    }

    #[test]
    fn answers_count_down_and_data_lands_in_the_origin_buffer() {
        let mut mem = [0u8; 4];
        let mut w = window(&mut mem);
        let mut dest = [0u8; 6];
        let dt = Datatype::builtin(builtin_from_handle(0x247).unwrap()); // MPI_BYTE
        w.pending[1] = 2;
        w.landings.insert(
            7,
            Landing {
                dt,
                count: 6,
                base: dest.as_mut_ptr(),
                skip: 2,
            },
        );
        let mut out = Vec::new();
        let data = Writer::new(16).u64(7).u8(DONE).bytes(b"wxyz").done();
        w.handle(1, kind::DATA, &data, &mut out);
        w.handle(1, kind::ACK, &[wire::VERSION, REFUSED], &mut out);
        assert!(out.is_empty());
        assert_eq!(w.pending[1], 0);
        assert!(w.out_of_range);
        w.handle(1, kind::ACK, &[wire::VERSION], &mut out);
        assert!(
            w.broken.is_some(),
            "a short message is reported, not a panic"
        );
        drop(w);
        assert_eq!(&dest, b"\0\0wxyz");
    }

    #[test]
    fn operations_of_an_origin_waiting_for_the_lock_are_held_until_it_is_granted() {
        let mut mem = [0u8; 4];
        let mut w = window(&mut mem);
        let mut out = Vec::new();
        let lock = Writer::new(2).u8(1).done();
        let unlock = Writer::new(1).done();
        w.handle(1, kind::LOCK, &lock, &mut out);
        assert_eq!(out.pop().map(|(r, t, _)| (r, t)), Some((1, kind::GRANT)));
        w.handle(2, kind::LOCK, &lock, &mut out);
        let put = Writer::new(16).blocks(&[(0, 1)]).bytes(b"b").done();
        w.handle(2, kind::PUT, &put, &mut out);
        w.handle(2, kind::UNLOCK, &unlock, &mut out);
        assert!(out.is_empty(), "rank 2 waits: nothing of it is served");
        let put = Writer::new(16).blocks(&[(0, 1)]).bytes(b"a").done();
        w.handle(1, kind::PUT, &put, &mut out);
        w.handle(1, kind::UNLOCK, &unlock, &mut out);
        let seen: Vec<(usize, i32)> = out.iter().map(|(r, t, _)| (*r, *t)).collect();
        assert_eq!(
            seen,
            vec![
                (1, kind::ACK),
                (2, kind::GRANT),
                (1, kind::UNLOCKED),
                (2, kind::ACK),
                (2, kind::UNLOCKED)
            ]
        );
        drop(w);
        assert_eq!(mem[0], b'b', "rank 2's put came after rank 1's");
    }

    #[test]
    fn dynamic_blocks_may_span_adjacent_regions_but_not_gaps() {
        let mem = [0u8; 32];
        let a = mem.as_ptr() as usize;
        let m = Memory::Dynamic {
            regions: vec![(a + 8, 8), (a, 8), (a + 20, 4)],
        };
        assert!(m.locate(a as u64, 16).is_some());
        assert!(m.locate(a as u64 + 4, 8).is_some());
        assert!(
            m.locate(a as u64 + 12, 8).is_none(),
            "16..20 is not attached"
        );
        assert!(m.locate(a as u64 + 20, 4).is_some());
        assert!(m.locate(a as u64 + 20, 5).is_none());
        assert!(m.locate(a as u64, 0).is_some());
    }
}
