//! Combining: the records of a superstep per destination, in a buffer or straight in the
//! destination's shared-memory ring; adjacent puts merged, full buffers sent early.

use crate::record::{PUT_HEAD, PUT_LEN_AT};
use crate::sync::{tag, KIND_EARLY};
use crate::{Bsp, BspError};
use ferry_core::raw::{RawReservation, SendMode};

/// `LastPut::at` when the last record is not a put.
pub(crate) const NO_PUT: usize = usize::MAX;

/// The put record that ends a combining buffer, which a put that continues it (same
/// registration, next byte) joins: only its data is appended and its length raised.
#[derive(Clone, Copy)]
pub(crate) struct LastPut {
    /// Where the record starts, or `NO_PUT`.
    pub(crate) at: usize,
    pub(crate) slot: u32,
    /// Offset in the remote area just past the record's data.
    pub(crate) end: usize,
}

pub(crate) const NO_LAST: LastPut = LastPut {
    at: NO_PUT,
    slot: 0,
    end: 0,
};

/// The records of a superstep for one destination written straight into its shared-memory
/// ring (`FERRY_BSP_RING`), in a reservation that becomes the superstep's message when it is
/// published: at the sync as the closing message, or earlier, as an early one, when full.
pub(crate) struct RingOut {
    pub(crate) res: RawReservation,
    pub(crate) at: *mut u8,
    pub(crate) cap: usize,
    pub(crate) len: usize,
}

impl Bsp {
    /// Appends a record of `len` bytes for `pid`, which `write` appends to a buffer; with
    /// combining, first sends the buffer early if the record would take it past the threshold.
    /// Returns where the record starts in `out[pid]` (combining only).
    pub(crate) fn emit(
        &mut self,
        pid: usize,
        len: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<usize, BspError> {
        if !self.config.combine {
            let mut rec = Vec::with_capacity(len);
            write(&mut rec);
            self.out_single[pid].push(rec);
            return Ok(NO_PUT);
        }
        self.flush_early(pid, len)?;
        let buf = &mut self.out[pid];
        let at = buf.len();
        write(buf);
        self.last_put[pid] = NO_LAST;
        Ok(at)
    }

    /// Whether records for `pid` may go to its ring now.
    #[inline]
    pub(crate) fn ring_usable(&self, pid: usize) -> bool {
        self.ring_peer[pid] && !self.ring_off[pid]
    }

    /// Appends a record made of `parts` to the records for `pid` in its ring (reserving room
    /// there if none is open; publishing the open room early if the record does not fit it).
    /// Returns where the record starts, or `None` when the ring has no room now (or records
    /// for `pid` are in `out` already, or the record is longer than a reservation): the caller
    /// buffers it, and the rest of the superstep's records for `pid` after it. Only for a
    /// `pid` that is [`Bsp::ring_usable`].
    #[inline]
    pub(crate) fn ring_emit(
        &mut self,
        pid: usize,
        parts: &[&[u8]],
    ) -> Result<Option<usize>, BspError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if self.ring[pid].as_ref().is_some_and(|r| r.len + len > r.cap) {
            self.publish_ring(pid, KIND_EARLY)?;
        }
        if self.ring[pid].is_none() {
            let res = if len > self.ring_want || !self.out[pid].is_empty() {
                None
            } else {
                self.comm
                    .raw_reserve(pid, self.ring_want, len)
                    .ok()
                    .flatten()
            };
            let Some(res) = res else {
                // The rest of the superstep goes to `out` (the records must stay in order).
                self.ring_off[pid] = true;
                return Ok(None);
            };
            self.ring[pid] = Some(RingOut {
                at: res.as_mut_ptr(),
                cap: res.capacity(),
                len: 0,
                res,
            });
        }
        let Some(r) = self.ring[pid].as_mut() else {
            return Ok(None);
        };
        let at = r.len;
        for part in parts {
            // SAFETY: `r.len + len ≤ r.cap` (checked or reserved above): inside the
            // reservation, which nothing else writes or reads before it is published.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), r.at.add(r.len), part.len()) };
            r.len += part.len();
        }
        self.last_put[pid] = NO_LAST;
        Ok(Some(at))
    }

    /// Sends the records for `pid` in its ring, if any, as the superstep's message of `kind`.
    #[inline]
    pub(crate) fn publish_ring(&mut self, pid: usize, kind: i32) -> Result<(), BspError> {
        if let Some(r) = self.ring[pid].take() {
            self.last_put[pid] = NO_LAST;
            if let Err(e) = self.comm.raw_publish(r.res, r.len, tag(kind, self.step)) {
                return Err(self.transport("bsp_sync", e));
            }
        }
        Ok(())
    }

    /// Sends `out[pid]` now (early) if `more` bytes would take it past the threshold.
    pub(crate) fn flush_early(&mut self, pid: usize, more: usize) -> Result<(), BspError> {
        let early = self.config.early_bytes;
        let buf = &self.out[pid];
        // A buffer already past the threshold (one record larger than it) cannot go as one
        // eager frame: it waits for the closing message, which the receiver posts for. Sent
        // now it would be a rendezvous that nobody receives before the sync: a deadlock.
        let fits = buf.len() <= early;
        if early > 0 && pid != self.pid && !buf.is_empty() && fits && buf.len() + more > early {
            // Eager (the threshold is clamped to one frame): returns once copied out.
            let comm = &self.comm;
            // SAFETY: `buf` is not touched until the send is done, below.
            let sent = unsafe {
                comm.raw_send(
                    buf.as_ptr(),
                    buf.len(),
                    pid,
                    tag(KIND_EARLY, self.step),
                    SendMode::Eager,
                )
            }
            .and_then(|r| {
                comm.wait_until(|done| done(r))?;
                comm.raw_take(r);
                Ok(())
            });
            if let Err(e) = sent {
                // The engine may still read the buffer: it is never freed.
                std::mem::forget(std::mem::take(&mut self.out[pid]));
                return Err(self.transport("bsp_sync (early send)", e));
            }
            self.out[pid].clear();
            self.last_put[pid] = NO_LAST;
        }
        Ok(())
    }

    /// With combining, merges a put that continues the last record to `pid` (a put to the
    /// same registration, at the next byte) into it; false when it does not.
    #[inline]
    pub(crate) fn merge_put(&mut self, pid: usize, slot: u32, offset: usize, data: &[u8]) -> bool {
        let last = &mut self.last_put[pid];
        if last.at == NO_PUT || last.slot != slot || last.end != offset {
            return false;
        }
        if let Some(r) = self.ring[pid].as_mut() {
            if r.len + data.len() > r.cap {
                return false;
            }
            // SAFETY: inside the reservation (checked above); the record's head is at
            // `last.at`, written by `ring_emit`, and nothing else touches the reservation.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), r.at.add(r.len), data.len());
                r.len += data.len();
                let len = (r.len - last.at - PUT_HEAD) as u64;
                std::ptr::copy_nonoverlapping(
                    len.to_le_bytes().as_ptr(),
                    r.at.add(last.at + PUT_LEN_AT),
                    8,
                );
            }
            last.end += data.len();
            return true;
        }
        let early = self.config.early_bytes;
        let buf = &mut self.out[pid];
        if early > 0 && pid != self.pid && buf.len() + data.len() > early {
            return false;
        }
        buf.extend_from_slice(data);
        let len = buf.len() - last.at - PUT_HEAD;
        buf[last.at + PUT_LEN_AT..last.at + PUT_HEAD].copy_from_slice(&(len as u64).to_le_bytes());
        last.end += data.len();
        true
    }
}
