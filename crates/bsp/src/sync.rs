//! The superstep: the closing exchange, serving gets, applying puts, registrations.

use crate::combine::NO_LAST;
use crate::posted::Streams;
use crate::record::{drma_head, put_u32, put_u64, Reader, RegShape};
use crate::record::{REC_END, REC_GET, REC_PUT, REC_REG, REC_SEND};
use crate::registry::Slot;
use crate::{Bsp, Msg};
use ferry_core::raw::SendMode;
use ferry_core::ANY_TAG;
use std::cmp::Reverse;

// Message kinds; the tag also carries the superstep's parity, because a peer can be at most
// one superstep ahead and its next superstep's early messages must not be taken for this one's.
pub(crate) const KIND_EARLY: i32 = 0;
pub(crate) const KIND_FINAL: i32 = 1;
pub(crate) const KIND_REPLY: i32 = 2;

/// Largest combining buffer kept from one superstep to the next (larger ones are freed).
pub(crate) const KEEP_BUF: usize = 1 << 20;

/// Rounds of polling without progress before a sync blocks in `probe` (non-pre-posted path).
pub(crate) const IDLE_POLLS: u32 = 2000;

/// How a superstep message of `len` bytes is sent: eagerly up to the early-send threshold
/// (every process sends and receives at the sync, so a handshake would only add latency; the
/// engine falls back to `Standard` beyond one frame), as a standard send above it.
pub(crate) fn eager_up_to(len: usize, early_bytes: usize) -> SendMode {
    if len <= early_bytes {
        SendMode::Eager
    } else {
        SendMode::Standard
    }
}

pub(crate) fn tag(kind: i32, step: u64) -> i32 {
    kind * 2 + (step & 1) as i32
}

impl Bsp {
    // ---- sync ----

    /// Ends the superstep: completes all puts, gets and sends, and makes registrations and the
    /// tag size take effect. Collective.
    ///
    /// One message round: every process sends every other one its closing message (empty in
    /// an empty superstep) and receives theirs into the buffers posted at the end of the
    /// previous sync; a second round carries the replies to gets, only between processes that
    /// have any. No allocation when nothing moves (the buffers are kept from sync to sync).
    pub fn sync(&mut self) {
        let p = self.nprocs;
        let me = self.pid;
        let parity = self.step;
        self.last_put.fill(NO_LAST);
        let combine = self.config.combine;

        // The superstep's registrations, sent to every process to be matched.
        // No record stands for "no push, no pop" (the usual superstep).
        self.reg.clear();
        if !self.pushes.is_empty() || !self.pops.is_empty() {
            self.reg.push(REC_REG);
            put_u32(&mut self.reg, self.pushes.len() as u32);
            for &(_, size) in &self.pushes {
                put_u64(&mut self.reg, size);
            }
            put_u32(&mut self.reg, self.pops.len() as u32);
            for &s in &self.pops {
                put_u32(&mut self.reg, s);
            }
        }
        // `end`'s exchange says so to every process (ourselves included), after the registrations.
        let end_rec: &[u8] = if self.ending { &[REC_END] } else { &[] };

        // Closing content per destination: remaining records, hpputs (read now), registrations.
        for q in 0..p {
            let mut hpputs = std::mem::take(&mut self.hpputs[q]);
            for h in hpputs.drain(..) {
                let head = drma_head(REC_PUT, h.slot, h.offset, h.len);
                // SAFETY: the caller of hpput promised the source is readable at the sync.
                let data = unsafe { std::slice::from_raw_parts(h.src as *const u8, h.len) };
                if self.ring_usable(q) && self.ring_emit(q, &[&head, data]).is_some() {
                    continue;
                }
                let mut single = Vec::new();
                let rec = if combine {
                    &mut self.out[q]
                } else {
                    &mut single
                };
                rec.extend_from_slice(&head);
                rec.extend_from_slice(data);
                if !combine {
                    self.out_single[q].push(single);
                }
            }
            self.hpputs[q] = hpputs;
            if self.reg.is_empty() && end_rec.is_empty() {
                continue;
            }
            if self.ring_usable(q) {
                let reg = std::mem::take(&mut self.reg);
                let put = self.ring_emit(q, &[&reg, end_rec]).is_some();
                self.reg = reg;
                if put {
                    continue;
                }
            }
            self.out[q].extend_from_slice(&self.reg);
            self.out[q].extend_from_slice(end_rec);
        }
        for s in std::mem::take(&mut self.out_single[me]) {
            self.out[me].extend_from_slice(&s);
        }

        let comm = self.comm.clone();
        let prepost = self.config.prepost;
        let cap = self.config.prepost_bytes;
        let fail =
            |this: &Self, e: ferry_core::Error| -> ! { this.fail("bsp_sync", e.to_string()) };

        // Phase 1: every process sends every other one its stream and receives theirs.
        self.sends.clear();
        for i in 0..self.order.len() {
            let q = self.order[i];
            if self.ring[q].is_some() {
                // The records are in q's ring already (and `out[q]` is empty): publish them.
                debug_assert!(self.out[q].is_empty() && self.out_single[q].is_empty());
                self.publish_ring(q, KIND_FINAL);
                continue;
            }
            let mode = |len: usize| eager_up_to(len, self.config.early_bytes);
            let mut send = |buf: &[u8], tag: i32| {
                // SAFETY: `out` and `out_single` are left alone until the sends are done.
                let r = unsafe { comm.raw_send(buf.as_ptr(), buf.len(), q, tag, mode(buf.len())) };
                r.map(|r| self.sends.push(r))
            };
            let mut r = Ok(());
            for m in &self.out_single[q] {
                r = r.and_then(|_| send(m, tag(KIND_EARLY, parity)));
            }
            let fin = &self.out[q];
            r = r.and_then(|_| {
                if prepost && fin.len() > cap {
                    send(fin, tag(KIND_EARLY, parity))?;
                    send(&[], tag(KIND_FINAL, parity))
                } else {
                    send(fin, tag(KIND_FINAL, parity))
                }
            });
            if let Err(e) = r {
                fail(self, e);
            }
        }
        self.pre_len.fill(None);
        if prepost {
            // The closing messages land in the buffers posted at the last sync; early messages
            // from a process precede its closing one, so they are all in once it is.
            let reqs = &self.posted.reqs;
            if let Err(e) = self
                .spin
                .wait(&comm, |done| reqs.iter().flatten().all(|&r| done(r)))
            {
                fail(self, e);
            }
            for q in 0..p {
                let Some(req) = self.posted.reqs[q].take() else {
                    continue;
                };
                let st = self.posted.take(q, req);
                match st {
                    Some(st) if st.message_len <= st.len => self.pre_len[q] = Some(st.len),
                    _ => self.fail(
                        "bsp_sync",
                        format!("the closing message from process {q} does not fit the pre-posted buffer (is FERRY_BSP_PREPOST_BYTES the same everywhere?)"),
                    ),
                }
            }
            for i in 0..self.from_order.len() {
                let q = self.from_order[i];
                if let Err(e) = self.drain_early(q, parity) {
                    fail(self, e);
                }
            }
        } else if let Err(e) = self.poll_closing(parity) {
            fail(self, e);
        }
        // Our own sends are waited for at the end, once the messages read in place are
        // released: a rendezvous send may need an answer queued behind one of them.

        // What arrived, per source: early messages, then the closing message (read in place).
        let chunks = std::mem::take(&mut self.chunks);
        let bufs = std::mem::take(&mut self.posted.bufs);
        let ring = std::mem::take(&mut self.posted.ring);
        let own = std::mem::take(&mut self.out[me]);
        let pre_len = std::mem::take(&mut self.pre_len);
        let streams = Streams {
            me,
            chunks: &chunks,
            bufs: &bufs,
            lens: &pre_len,
            ring: &ring,
            own: &own,
        };

        // Check registrations, then serve gets (before any put is applied).
        let mut reg_seen: Vec<Option<&[u8]>> = Vec::new();
        let mut at_end: Vec<bool> = Vec::new(); // per process: in bsp_end (once one is)
        for q in 0..p {
            for c in streams.parts(q) {
                let mut r = Reader { buf: c, at: 0 };
                while !r.done() {
                    let Some(kind) = r.u8() else { break };
                    match kind {
                        REC_REG => {
                            let start = r.at - 1;
                            let np = r.u32().unwrap_or(0) as usize;
                            r.take(np * 8);
                            let npop = r.u32().unwrap_or(0) as usize;
                            r.take(npop * 4);
                            if reg_seen.is_empty() {
                                reg_seen.resize(p, None);
                            }
                            reg_seen[q] = Some(&c[start..r.at]);
                        }
                        REC_END => {
                            if at_end.is_empty() {
                                at_end.resize(p, false);
                            }
                            at_end[q] = true;
                            if !self.ending {
                                self.fail(
                                    "bsp_sync",
                                    format!("process {q} called bsp_end in superstep {} while this process syncs", self.step),
                                );
                            }
                        }
                        REC_PUT => {
                            let (_, _, len) = (r.u32(), r.u64(), r.u64().unwrap_or(0));
                            r.take(len);
                        }
                        REC_GET => {
                            let slot = r.u32().unwrap_or(u32::MAX);
                            let off = r.u64().unwrap_or(0);
                            let len = r.u64().unwrap_or(0);
                            let (addr, size) = self.local_slot(slot, "bsp_get", q);
                            if off.checked_add(len).is_none_or(|e| e > size) {
                                self.fail(
                                    "bsp_get",
                                    format!(
                                        "process {q} reads bytes {off}..{} of a {size}-byte area",
                                        off + len
                                    ),
                                );
                            }
                            // SAFETY: inside a registered area, which its owner keeps valid.
                            let data = unsafe {
                                std::slice::from_raw_parts((addr + off) as *const u8, len)
                            };
                            self.reply_out[q].extend_from_slice(data);
                        }
                        REC_SEND => {
                            let tl = r.u32().unwrap_or(0) as usize;
                            let pl = r.u64().unwrap_or(0);
                            r.take(tl);
                            r.take(pl);
                        }
                        _ => self.fail("bsp_sync", format!("corrupt stream from process {q}")),
                    }
                }
            }
        }
        let syncing = (0..p).find(|&q| !at_end.get(q).copied().unwrap_or(false));
        if let (true, Some(syncing)) = (self.ending, syncing) {
            self.fail(
                "bsp_end",
                format!(
                    "process {syncing} called bsp_sync in superstep {}, not bsp_end",
                    self.step
                ),
            );
        }
        // Sizes may differ between processes; the number of pushes and the pops may not.
        if !self.reg.is_empty() || !reg_seen.is_empty() {
            let mine = RegShape::of(&self.reg);
            for q in 0..p {
                let theirs = reg_seen.get(q).copied().flatten().unwrap_or(&[]);
                if theirs == &self.reg[..] {
                    continue; // the usual case: the very same record
                }
                let shape = RegShape::of(theirs);
                if (shape.pushes.len(), &shape.pops) != (mine.pushes.len(), &mine.pops) {
                    let theirs = if theirs.is_empty() {
                        "nothing".into()
                    } else {
                        shape.to_string()
                    };
                    self.fail(
                        "bsp_sync",
                        format!(
                            "registrations do not match in superstep {}: this process did {mine}, process {q} did {theirs}",
                            self.step
                        ),
                    );
                }
            }
        }

        // Phase 2, only between processes with gets: replies travel while puts are applied.
        let rtag = tag(KIND_REPLY, parity);
        let mut any_reply = false;
        for q in (0..p).filter(|&q| q != me) {
            let want: usize = self.gets[q].iter().map(|&(_, n)| n).sum();
            self.replies[q].clear();
            self.replies[q].resize(want, 0);
            any_reply |= want > 0 || !self.reply_out[q].is_empty();
        }
        if any_reply {
            // Into `sends`, after the closing messages.
            for q in (0..p).filter(|&q| q != me) {
                let buf = &mut self.replies[q];
                if !buf.is_empty() {
                    // SAFETY: `replies` is not touched until the receive is done.
                    match unsafe { comm.raw_recv(buf.as_mut_ptr(), buf.len(), q.into(), rtag) } {
                        Ok(r) => self.sends.push(r),
                        Err(e) => fail(self, e),
                    }
                }
            }
            for i in 0..self.order.len() {
                let q = self.order[i];
                let buf = &self.reply_out[q];
                if !buf.is_empty() {
                    // SAFETY: `reply_out` is not touched until the send is done.
                    let mode = eager_up_to(buf.len(), self.config.early_bytes);
                    match unsafe { comm.raw_send(buf.as_ptr(), buf.len(), q, rtag, mode) } {
                        Ok(r) => self.sends.push(r),
                        Err(e) => fail(self, e),
                    }
                }
            }
        }
        self.apply(&streams, &reg_seen);
        // Nothing reads the streams any more (moving `ring` proves it): the messages read in
        // place go back to their rings, before the wait for the replies queued behind them.
        self.posted.ring = ring;
        self.posted.release();
        // Our closing messages out, and the replies to gets both ways.
        let reqs = &self.sends;
        if let Err(e) = self.spin.wait(&comm, |done| reqs.iter().all(|&r| done(r))) {
            fail(self, e);
        }
        for &r in &self.sends {
            comm.raw_take(r);
        }
        self.sends.clear();
        // The combining buffers stay for the next superstep (no regrowing).
        for q in (0..p).filter(|&q| q != me) {
            self.out_single[q].clear();
            if self.out[q].capacity() > KEEP_BUF {
                self.out[q] = Vec::new();
            }
            self.out[q].clear();
        }
        for q in 0..p {
            let got = if q == me {
                &self.reply_out[me]
            } else {
                &self.replies[q]
            };
            let mut at = 0;
            for &(dst, n) in &self.gets[q] {
                // SAFETY: the caller of get promised `dst` is writable at this sync.
                unsafe {
                    std::ptr::copy(got[at..].as_ptr(), dst as *mut u8, n);
                }
                at += n;
            }
            self.gets[q].clear();
            if self.reply_out[q].capacity() > KEEP_BUF {
                self.reply_out[q] = Vec::new();
            }
            self.reply_out[q].clear();
        }
        let (mut chunks, mut own, mut pre_len) = (chunks, own, pre_len);
        chunks.iter_mut().for_each(Vec::clear);
        own.clear();
        pre_len.fill(None);
        if own.capacity() <= KEEP_BUF {
            self.out[me] = own;
        }
        self.chunks = chunks;
        self.pre_len = pre_len;
        self.posted.bufs = bufs;
        self.tagsize = self.next_tagsize;
        self.ring_off.fill(false);
        self.step += 1;
        if prepost {
            if let Err(e) = self.posted.post(me, tag(KIND_FINAL, self.step)) {
                fail(self, e);
            }
        }
    }

    /// Receives the early messages from `q` that have arrived (all of them, once its closing
    /// message is in).
    pub(crate) fn drain_early(&mut self, q: usize, parity: u64) -> Result<(), ferry_core::Error> {
        while let Some(st) = self.comm.iprobe(q, tag(KIND_EARLY, parity))? {
            // Its data may still have to come through q's ring (a rendezvous), where q's
            // closing message must not hold it up.
            self.posted.unhold(q);
            let mut b = vec![0u8; st.len];
            self.comm.recv(&mut b, q, st.tag)?;
            self.chunks[q].push(b);
        }
        Ok(())
    }

    /// Without pre-posted receives: polls every source (whoever is ready first is served
    /// first) until each one's closing message is in; after a while without progress, blocks
    /// in `probe` on one of them, which backs off instead of spinning.
    pub(crate) fn poll_closing(&mut self, parity: u64) -> Result<(), ferry_core::Error> {
        let comm = self.comm.clone();
        let mut left = self.nprocs - 1;
        let mut idle = 0u32;
        while left > 0 {
            let mut progressed = false;
            for &q in &self.from_order {
                if self.pre_len[q].is_some() {
                    continue;
                }
                let st = if idle >= IDLE_POLLS {
                    idle = 0;
                    Some(comm.probe(q, ANY_TAG)?)
                } else {
                    comm.iprobe(q, ANY_TAG)?
                };
                let Some(st) = st else { continue };
                let mut b = vec![0u8; st.len];
                comm.recv(&mut b, q, st.tag)?;
                self.chunks[q].push(b);
                progressed = true;
                if st.tag == tag(KIND_FINAL, parity) {
                    self.pre_len[q] = Some(0);
                    left -= 1;
                }
            }
            if progressed {
                idle = 0;
            } else {
                idle += 1;
                std::thread::yield_now();
            }
        }
        self.pre_len.fill(None);
        Ok(())
    }

    /// The local address and size of registration `slot`.
    pub(crate) fn local_slot(&self, slot: u32, call: &str, from: usize) -> (usize, usize) {
        match self.slots.get(slot as usize).and_then(|s| s.local) {
            Some(l) => l,
            None => self.fail(
                call,
                format!("process {from} names registration #{slot}, which is not registered here"),
            ),
        }
    }

    /// Applies the puts, collects the BSMP messages, and makes the superstep's registrations
    /// take effect (after the puts: a registration is usable from the next superstep on).
    pub(crate) fn apply(&mut self, streams: &Streams<'_>, regs: &[Option<&[u8]>]) {
        let p = self.nprocs;
        self.inbox.clear();
        self.msgs.clear();
        self.next_msg = 0;
        for q in 0..p {
            for c in streams.parts(q) {
                let mut r = Reader { buf: c, at: 0 };
                while !r.done() {
                    let Some(kind) = r.u8() else { break };
                    match kind {
                        REC_REG => {
                            let np = r.u32().unwrap_or(0) as usize;
                            r.take(np * 8);
                            let npop = r.u32().unwrap_or(0) as usize;
                            r.take(npop * 4);
                        }
                        REC_PUT => {
                            let slot = r.u32().unwrap_or(u32::MAX);
                            let off = r.u64().unwrap_or(0);
                            let len = r.u64().unwrap_or(0);
                            let Some(data) = r.take(len) else {
                                self.fail("bsp_sync", format!("corrupt stream from process {q}"))
                            };
                            let (addr, size) = self.local_slot(slot, "bsp_put", q);
                            if off.checked_add(len).is_none_or(|e| e > size) {
                                self.fail(
                                    "bsp_put",
                                    format!(
                                        "process {q} writes bytes {off}..{} of a {size}-byte area",
                                        off + len
                                    ),
                                );
                            }
                            // SAFETY: inside a registered area, which its owner keeps valid.
                            unsafe {
                                std::ptr::copy(data.as_ptr(), (addr + off) as *mut u8, len);
                            }
                        }
                        REC_GET => {
                            r.u32();
                            r.u64();
                            r.u64();
                        }
                        REC_END => {}
                        REC_SEND => {
                            let tl = r.u32().unwrap_or(0) as usize;
                            let pl = r.u64().unwrap_or(0);
                            let (Some(t), Some(pay)) = (r.take(tl), r.take(pl)) else {
                                self.fail("bsp_sync", format!("corrupt stream from process {q}"))
                            };
                            if tl != self.tagsize {
                                // Its tag would not fit what get_tag and hpmove promise.
                                self.fail(
                                    "bsp_set_tagsize",
                                    format!("process {q} sent a tag of {tl} bytes in superstep {}, where the tag size here is {} (every process must set the same)", self.step, self.tagsize),
                                );
                            }
                            let t0 = self.inbox.len();
                            self.inbox.extend_from_slice(t);
                            let p0 = self.inbox.len();
                            self.inbox.extend_from_slice(pay);
                            self.msgs.push(Msg {
                                tag: (t0, p0),
                                payload: (p0, self.inbox.len()),
                            });
                        }
                        _ => self.fail("bsp_sync", format!("corrupt stream from process {q}")),
                    }
                }
            }
        }
        // Registrations: pops first (they name older slots), then pushes get free slots.
        self.slot_cache.set(None);
        for &s in &std::mem::take(&mut self.pops) {
            if let Some((addr, _)) = self.slots[s as usize].local.take() {
                if let Some(stack) = self.by_addr.get_mut(&addr) {
                    stack.retain(|&x| x != s);
                    if stack.is_empty() {
                        self.by_addr.remove(&addr);
                    }
                }
                self.free_slots.push(Reverse(s));
            }
        }
        let pushes = std::mem::take(&mut self.pushes);
        for (i, &(addr, size)) in pushes.iter().enumerate() {
            let mut sizes = vec![0usize; p];
            for (q, reg) in regs.iter().enumerate() {
                if let Some(b) = reg {
                    let at = 5 + i * 8;
                    sizes[q] =
                        u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes")) as usize;
                }
            }
            let slot = Slot {
                local: Some((addr, size)),
                sizes,
            };
            let id = match self.free_slots.pop() {
                Some(Reverse(id)) => {
                    self.slots[id as usize] = slot;
                    id
                }
                None => {
                    self.slots.push(slot);
                    (self.slots.len() - 1) as u32
                }
            };
            self.by_addr.entry(addr).or_default().push(id);
        }
    }
}
