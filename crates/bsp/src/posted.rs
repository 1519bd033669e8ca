//! The receives posted for a sync's closing messages, and what arrived at a sync.

use ferry_core::raw::RawRequest;
use ferry_core::Comm;

/// Receives posted for the closing messages of the next sync, one per peer, into buffers of
/// `FERRY_BSP_PREPOST_BYTES`. They stay posted from the end of one sync to the next (raw
/// requests: the scoped ones of ferry-core cannot outlive a call), so a closing message that
/// comes before its receiver reaches the sync lands in place, not in the unexpected queue.
///
/// With `FERRY_BSP_IN_PLACE`, a closing message that comes whole through shared memory is not
/// even copied into the buffer: the sync reads it where it arrived, in the sender's ring
/// (`ring`), and releases it once the puts are applied (`taken`).
pub(crate) struct Posted {
    pub(crate) comm: Comm,
    pub(crate) bufs: Vec<Vec<u8>>,
    pub(crate) reqs: Vec<Option<RawRequest>>,
    pub(crate) in_place: bool,
    /// Finished in-place receives, until `release`.
    pub(crate) taken: Vec<Option<RawRequest>>,
    /// Per source: address and length of the closing message in its ring, if it stayed there.
    pub(crate) ring: Vec<Option<(usize, usize)>>,
}

impl Posted {
    /// Posts a receive with `tag` from every other process.
    #[inline]
    pub(crate) fn post(&mut self, me: usize, tag: i32) -> Result<(), ferry_core::Error> {
        for (q, buf) in self.bufs.iter_mut().enumerate() {
            if q != me {
                // SAFETY: the buffer is neither moved nor touched until the receive is taken
                // (in `sync`) or withdrawn (in `drop`); its heap block stays put when `bufs`
                // itself is moved.
                let r = unsafe {
                    if self.in_place {
                        self.comm
                            .raw_recv_in_place(buf.as_mut_ptr(), buf.len(), q, tag)?
                    } else {
                        self.comm
                            .raw_recv(buf.as_mut_ptr(), buf.len(), q.into(), tag)?
                    }
                };
                self.reqs[q] = Some(r);
            }
        }
        Ok(())
    }

    /// Takes the finished receive from `q`: the length of its message, and where it lies if it
    /// stayed in the ring (recorded in `ring`).
    #[inline]
    pub(crate) fn take(&mut self, q: usize, req: RawRequest) -> Option<ferry_core::raw::RawStatus> {
        let st = self.comm.raw_take(req);
        if self.in_place {
            self.ring[q] = self
                .comm
                .raw_in_place(req)
                .map(|(at, len)| (at as usize, len));
            self.taken[q] = Some(req);
        }
        st
    }

    /// Copies the closing message from `q`, if it is read in place, into its buffer and
    /// releases it: `q`'s later messages are needed before the puts are applied.
    pub(crate) fn unhold(&mut self, q: usize) {
        if let Some((at, len)) = self.ring[q].take() {
            // An in-place receive only stays in place when it fits its buffer.
            let n = len.min(self.bufs[q].len());
            // SAFETY: in the ring until the release below; the buffer holds `n` bytes.
            unsafe { std::ptr::copy_nonoverlapping(at as *const u8, self.bufs[q].as_mut_ptr(), n) };
        }
        if let Some(r) = self.taken[q].take() {
            self.comm.raw_release(r);
        }
    }

    /// Gives the messages read in place back to their rings: the senders' later messages
    /// (replies to gets, the next superstep) wait behind them until then.
    #[inline]
    pub(crate) fn release(&mut self) {
        for q in 0..self.taken.len() {
            if let Some(r) = self.taken[q].take() {
                self.comm.raw_release(r);
            }
        }
        self.ring.fill(None);
    }

    /// Cancels the receives still posted (at the end, or when dropped); a second call finds
    /// nothing to do.
    pub(crate) fn withdraw(&mut self) {
        self.release();
        for q in 0..self.reqs.len() {
            let Some(r) = self.reqs[q].take() else {
                continue;
            };
            self.comm.raw_cancel(r);
            for _ in 0..1000 {
                if self.comm.raw_done(r) {
                    break;
                }
                let _ = self.comm.progress();
            }
            if self.comm.raw_take(r).is_none() {
                // Still being written into (a matched long message): leak the buffer rather
                // than free memory the engine writes to.
                std::mem::forget(std::mem::take(&mut self.bufs[q]));
            }
            if self.in_place {
                self.comm.raw_release(r);
            }
        }
    }
}

impl Drop for Posted {
    fn drop(&mut self) {
        self.withdraw();
    }
}

/// What arrived at a sync, per source: the early messages, then the closing message (read in
/// place in the sender's ring or in its pre-posted buffer; our own stream for ourselves).
pub(crate) struct Streams<'a> {
    pub(crate) me: usize,
    pub(crate) chunks: &'a [Vec<Vec<u8>>],
    pub(crate) bufs: &'a [Vec<u8>],
    pub(crate) lens: &'a [Option<usize>],
    pub(crate) ring: &'a [Option<(usize, usize)>],
    pub(crate) own: &'a [u8],
}

impl<'a> Streams<'a> {
    #[inline]
    pub(crate) fn parts(&self, q: usize) -> impl Iterator<Item = &'a [u8]> + 'a {
        let last: &'a [u8] = if q == self.me {
            self.own
        } else if let Some(&Some((at, len))) = self.ring.get(q) {
            // SAFETY: ferry-core keeps the message in the ring, unchanged, until
            // `Posted::release`, which `sync` calls only once it has dropped the streams.
            unsafe { std::slice::from_raw_parts(at as *const u8, len) }
        } else {
            match self.lens[q] {
                Some(n) => &self.bufs[q][..n],
                None => &[],
            }
        };
        self.chunks[q]
            .iter()
            .map(Vec::as_slice)
            .chain(std::iter::once(last))
    }
}
