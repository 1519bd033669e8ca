//! The superstep: the closing exchange, serving gets, applying puts, registrations.
//!
//! [`Bsp::sync`] runs these steps, each a method below: `Bsp::close_streams` (the
//! superstep's last records per destination), `Bsp::send_closing`, `Bsp::receive_closing`,
//! then over what arrived `Bsp::serve_gets` (which also checks every record, so that nothing
//! is applied from a superstep with a bad one), `Bsp::check_ending`,
//! `Bsp::check_registrations`, `Bsp::exchange_replies`, `Bsp::apply` and
//! `Bsp::registrations_take_effect`, and last `Bsp::complete`.

use crate::combine::NO_LAST;
use crate::posted::Streams;
use crate::record::{drma_head, encode_reg, Record, RecordError, Records, RegRecord};
use crate::record::{END_RECORD, REC_PUT};
use crate::{Bsp, BspError, ErrorKind, Msg};
use ferry_core::raw::SendMode;
use ferry_core::{Comm, ANY_TAG};

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
    /// Ends the superstep: completes all puts, gets and sends, and makes registrations and the
    /// tag size take effect. Collective.
    ///
    /// One message round: every process sends every other one its closing message (empty in
    /// an empty superstep) and receives theirs into the buffers posted at the end of the
    /// previous sync; a second round carries the replies to gets, only between processes that
    /// have any. No allocation when nothing moves (the buffers are kept from sync to sync).
    ///
    /// An error (mismatched registrations, a process in `end`, a record that is not one or
    /// names memory outside an area, a peer that died) leaves the computation unusable: later
    /// syncs return [`ErrorKind::Broken`]. Nothing of a superstep whose records fail the
    /// checks is applied here.
    pub fn sync(&mut self) -> Result<(), BspError> {
        self.check_usable("bsp_sync")?;
        match self.superstep_round() {
            Ok(()) => Ok(()),
            Err(e) => Err(self.abandon_superstep(e)),
        }
    }

    /// The steps of a sync.
    fn superstep_round(&mut self) -> Result<(), BspError> {
        let parity = self.step;
        self.close_streams()?;
        // One handle for the whole sync (a clone is not free; `self` is borrowed mutably).
        let comm = self.comm.clone();
        self.send_closing(&comm, parity)?;
        self.receive_closing(&comm, parity)?;
        // Our own sends are waited for at the end, once the messages read in place are
        // released: a rendezvous send may need an answer queued behind one of them.

        // What arrived, per source: early messages, then the closing message (read in place).
        let me = self.pid;
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
        let delivered = self.deliver(&comm, &streams, parity);
        // Nothing reads the streams any more (moving `ring` proves it): the messages read in
        // place go back to their rings, before the wait for the replies queued behind them.
        self.posted.ring = ring;
        self.posted.release();
        self.keep_scratch(chunks, own, pre_len, bufs);
        delivered?;
        self.complete(&comm)
    }

    /// What arrived: serve the gets (checking every record), check the ends and the
    /// registrations, start the replies, apply the puts and sends, and let the registrations
    /// take effect.
    fn deliver<'a>(
        &mut self,
        comm: &Comm,
        streams: &Streams<'a>,
        parity: u64,
    ) -> Result<(), BspError> {
        // Allocated only in a superstep that has them.
        let mut regs: Vec<Option<RegRecord<'a>>> = Vec::new();
        let mut at_end: Vec<bool> = Vec::new();
        self.serve_gets(streams, &mut regs, &mut at_end)?;
        self.check_ending(&at_end)?;
        self.check_registrations(&regs)?;
        self.exchange_replies(comm, parity)?;
        self.apply(streams)?;
        self.registrations_take_effect(&regs);
        Ok(())
    }

    /// After an error in the middle of a superstep: the computation is unusable, and the
    /// buffers that requests still in flight may read or write are never freed.
    #[cold]
    fn abandon_superstep(&mut self, e: BspError) -> BspError {
        if !self.sends.is_empty() {
            for q in 0..self.nprocs {
                std::mem::forget(std::mem::take(&mut self.out[q]));
                std::mem::forget(std::mem::take(&mut self.out_single[q]));
                std::mem::forget(std::mem::take(&mut self.reply_out[q]));
                std::mem::forget(std::mem::take(&mut self.replies[q]));
            }
            self.sends.clear();
        }
        self.broke(e)
    }

    /// The superstep's last records per destination: the hpputs (their sources read now), the
    /// registration record (sent to every process to be matched; none stands for "no push, no
    /// pop", the usual superstep) and, in `end`, the end record (to every process, ourselves
    /// included).
    fn close_streams(&mut self) -> Result<(), BspError> {
        let (p, me) = (self.nprocs, self.pid);
        self.last_put.fill(NO_LAST);
        let combine = self.config.combine;
        self.reg.clear();
        if !self.pushes.is_empty() || !self.pops.is_empty() {
            encode_reg(
                &mut self.reg,
                self.pushes.iter().map(|&(_, size)| size),
                &self.pops,
            );
        }
        let end_rec: &[u8] = if self.ending { &END_RECORD } else { &[] };
        for q in 0..p {
            let mut hpputs = std::mem::take(&mut self.hpputs[q]);
            for h in hpputs.drain(..) {
                let head = drma_head(REC_PUT, h.slot, h.offset, h.len);
                // SAFETY: the caller of hpput promised the source is readable at the sync.
                let data = unsafe { std::slice::from_raw_parts(h.src as *const u8, h.len) };
                if self.ring_usable(q) && self.ring_emit(q, &[&head, data])?.is_some() {
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
                let put = self.ring_emit(q, &[&reg, end_rec]);
                self.reg = reg;
                if put?.is_some() {
                    continue;
                }
            }
            self.out[q].extend_from_slice(&self.reg);
            self.out[q].extend_from_slice(end_rec);
        }
        for s in std::mem::take(&mut self.out_single[me]) {
            self.out[me].extend_from_slice(&s);
        }
        Ok(())
    }

    /// Phase 1 out: every process sends every other one its records, the last message tagged
    /// as closing.
    fn send_closing(&mut self, comm: &Comm, parity: u64) -> Result<(), BspError> {
        let (prepost, cap) = (self.config.prepost, self.config.prepost_bytes);
        self.sends.clear();
        for i in 0..self.order.len() {
            let q = self.order[i];
            if self.ring[q].is_some() {
                // The records are in q's ring already (and `out[q]` is empty): publish them.
                debug_assert!(self.out[q].is_empty() && self.out_single[q].is_empty());
                self.publish_ring(q, KIND_FINAL)?;
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
                return Err(self.transport("bsp_sync", e));
            }
        }
        Ok(())
    }

    /// Phase 1 in: every other process's closing message (and the early ones before it).
    fn receive_closing(&mut self, comm: &Comm, parity: u64) -> Result<(), BspError> {
        self.pre_len.fill(None);
        if !self.config.prepost {
            return self
                .poll_closing(comm, parity)
                .map_err(|e| self.transport("bsp_sync", e));
        }
        // The closing messages land in the buffers posted at the last sync; early messages
        // from a process precede its closing one, so they are all in once it is.
        let reqs = &self.posted.reqs;
        if let Err(e) = self
            .spin
            .wait(comm, |done| reqs.iter().flatten().all(|&r| done(r)))
        {
            return Err(self.transport("bsp_sync", e));
        }
        for q in 0..self.nprocs {
            let Some(req) = self.posted.reqs[q].take() else {
                continue;
            };
            match self.posted.take(q, req) {
                Some(st) if st.message_len <= st.len => self.pre_len[q] = Some(st.len),
                _ => {
                    let e = self.error("bsp_sync", ErrorKind::PrepostTooSmall { from: q });
                    return Err(e);
                }
            }
        }
        for i in 0..self.from_order.len() {
            let q = self.from_order[i];
            if let Err(e) = self.drain_early(q, parity) {
                return Err(self.transport("bsp_sync", e));
            }
        }
        Ok(())
    }

    /// `bytes` from process `from` that are not a record.
    #[cold]
    fn bad_record(&self, from: usize, source: RecordError) -> BspError {
        self.error("bsp_sync", ErrorKind::Record { from, source })
    }

    /// The local address of `len` bytes at `offset` of registration `slot`, which process
    /// `from` writes or reads (`access`) for `call`: inside the area, or an error.
    #[inline]
    fn remote_range(
        &self,
        call: &'static str,
        access: &'static str,
        from: usize,
        slot: u32,
        offset: usize,
        len: usize,
    ) -> Result<usize, BspError> {
        let (addr, size) = self.local_slot(slot, call, from)?;
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return Err(self.error(
                call,
                ErrorKind::RemoteOutside {
                    from,
                    access,
                    start: offset,
                    end: offset.saturating_add(len),
                    size,
                },
            ));
        }
        Ok(addr + offset)
    }

    /// The first pass over what arrived, before any put is applied (so gets see the memory
    /// from before the superstep's puts): decodes and checks every record, serves the gets
    /// into `reply_out`, and notes each process's registration record (`regs`) and which
    /// processes are ending (`at_end`); both stay empty unless there are any.
    fn serve_gets<'a>(
        &mut self,
        streams: &Streams<'a>,
        regs: &mut Vec<Option<RegRecord<'a>>>,
        at_end: &mut Vec<bool>,
    ) -> Result<(), BspError> {
        let p = self.nprocs;
        for q in 0..p {
            for c in streams.parts(q) {
                for record in Records::new(c) {
                    match record.map_err(|e| self.bad_record(q, e))? {
                        Record::Reg(r) => {
                            if regs.is_empty() {
                                regs.resize(p, None);
                            }
                            regs[q] = Some(r);
                        }
                        Record::End => {
                            if at_end.is_empty() {
                                at_end.resize(p, false);
                            }
                            at_end[q] = true;
                            if !self.ending {
                                let step = self.step;
                                let kind = ErrorKind::PeerEnded { from: q, step };
                                return Err(self.error("bsp_sync", kind));
                            }
                        }
                        Record::Put { slot, offset, data } => {
                            self.remote_range("bsp_put", "writes", q, slot, offset, data.len())?;
                        }
                        Record::Get { slot, offset, len } => {
                            let at = self.remote_range("bsp_get", "reads", q, slot, offset, len)?;
                            // SAFETY: inside a registered area (checked), which its owner
                            // keeps valid.
                            let data = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
                            self.reply_out[q].extend_from_slice(data);
                        }
                        Record::Send { tag, .. } => self.check_tag(q, tag.len())?,
                    }
                }
            }
        }
        Ok(())
    }

    /// A BSMP tag of `len` bytes from process `from` must have the tag size here: its tag
    /// would not fit what `get_tag` and `hpmove` promise.
    #[inline]
    fn check_tag(&self, from: usize, len: usize) -> Result<(), BspError> {
        if len != self.tagsize {
            let (step, tagsize) = (self.step, self.tagsize);
            let kind = ErrorKind::RemoteTagSize {
                from,
                len,
                step,
                tagsize,
            };
            return Err(self.error("bsp_set_tagsize", kind));
        }
        Ok(())
    }

    /// In `end`, every process must be ending too (`at_end`, empty when none is); a process
    /// ending while this one syncs was found by `Bsp::serve_gets`.
    fn check_ending(&self, at_end: &[bool]) -> Result<(), BspError> {
        if !self.ending {
            return Ok(());
        }
        match (0..self.nprocs).find(|&q| !at_end.get(q).copied().unwrap_or(false)) {
            Some(from) => {
                let step = self.step;
                Err(self.error("bsp_end", ErrorKind::PeerSyncing { from, step }))
            }
            None => Ok(()),
        }
    }

    /// Every process must have pushed as many areas and popped the same registrations as this
    /// one (sizes may differ). `regs` is empty when no process pushed or popped.
    fn check_registrations(&self, regs: &[Option<RegRecord<'_>>]) -> Result<(), BspError> {
        if regs.is_empty() {
            return Ok(());
        }
        let mine = regs[self.pid].unwrap_or(RegRecord::EMPTY);
        for (q, theirs) in regs.iter().enumerate() {
            if mine.matches(&theirs.unwrap_or(RegRecord::EMPTY)) {
                continue;
            }
            let kind = ErrorKind::RegistrationMismatch {
                step: self.step,
                from: q,
                mine: mine.to_string(),
                theirs: theirs.map_or_else(|| "nothing".into(), |r| r.to_string()),
            };
            return Err(self.error("bsp_sync", kind));
        }
        Ok(())
    }

    /// Phase 2, only between processes with gets: the replies to theirs go out and ours are
    /// received (into `sends`, after the closing messages), travelling while puts are applied.
    fn exchange_replies(&mut self, comm: &Comm, parity: u64) -> Result<(), BspError> {
        let (p, me) = (self.nprocs, self.pid);
        let rtag = tag(KIND_REPLY, parity);
        let mut any_reply = false;
        for q in (0..p).filter(|&q| q != me) {
            let want: usize = self.gets[q].iter().map(|&(_, n)| n).sum();
            self.replies[q].clear();
            self.replies[q].resize(want, 0);
            any_reply |= want > 0 || !self.reply_out[q].is_empty();
        }
        if !any_reply {
            return Ok(());
        }
        for q in (0..p).filter(|&q| q != me) {
            let buf = &mut self.replies[q];
            if !buf.is_empty() {
                // SAFETY: `replies` is not touched until the receive is done.
                match unsafe { comm.raw_recv(buf.as_mut_ptr(), buf.len(), q.into(), rtag) } {
                    Ok(r) => self.sends.push(r),
                    Err(e) => return Err(self.transport("bsp_sync", e)),
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
                    Err(e) => return Err(self.transport("bsp_sync", e)),
                }
            }
        }
        Ok(())
    }

    /// The second pass: applies the puts in pid order and queues the BSMP messages (every
    /// record was checked by `Bsp::serve_gets`; the checks here only keep memory safe).
    fn apply(&mut self, streams: &Streams<'_>) -> Result<(), BspError> {
        self.inbox.clear();
        self.msgs.clear();
        self.next_msg = 0;
        for q in 0..self.nprocs {
            for c in streams.parts(q) {
                for record in Records::new(c) {
                    match record.map_err(|e| self.bad_record(q, e))? {
                        Record::Put { slot, offset, data } => {
                            let at = self.remote_range(
                                "bsp_put",
                                "writes",
                                q,
                                slot,
                                offset,
                                data.len(),
                            )?;
                            // SAFETY: inside a registered area (checked), which its owner
                            // keeps valid.
                            unsafe {
                                std::ptr::copy(data.as_ptr(), at as *mut u8, data.len());
                            }
                        }
                        Record::Send { tag, payload } => {
                            self.check_tag(q, tag.len())?;
                            let t0 = self.inbox.len();
                            self.inbox.extend_from_slice(tag);
                            let p0 = self.inbox.len();
                            self.inbox.extend_from_slice(payload);
                            self.msgs.push(Msg {
                                tag: (t0, p0),
                                payload: (p0, self.inbox.len()),
                            });
                        }
                        Record::Get { .. } | Record::Reg(_) | Record::End => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// For the fuzz targets only: runs the receiving half of a sync on `bytes` as a message
    /// from this process to itself (checking every record, serving the gets, applying the
    /// puts and queueing the sends), with no network and no superstep; `Err` for what a sync
    /// refuses. Registrations do not take effect and the replies are dropped.
    #[cfg(feature = "fuzzing")]
    #[doc(hidden)]
    pub fn receive_for_fuzzing(&mut self, bytes: &[u8]) -> Result<(), BspError> {
        let p = self.nprocs;
        let (chunks, lens, ring) = (vec![Vec::new(); p], vec![None; p], vec![None; p]);
        let streams = Streams {
            me: self.pid,
            chunks: &chunks,
            bufs: &[],
            lens: &lens,
            ring: &ring,
            own: bytes,
        };
        let (mut regs, mut at_end) = (Vec::new(), Vec::new());
        let done = self
            .serve_gets(&streams, &mut regs, &mut at_end)
            .and_then(|_| self.check_ending(&at_end))
            .and_then(|_| self.check_registrations(&regs))
            .and_then(|_| self.apply(&streams));
        self.reply_out.iter_mut().for_each(Vec::clear);
        done
    }

    /// Puts the received messages' buffers back, emptied, for the next sync (no regrowing).
    fn keep_scratch(
        &mut self,
        mut chunks: Vec<Vec<Vec<u8>>>,
        mut own: Vec<u8>,
        mut pre_len: Vec<Option<usize>>,
        bufs: Vec<Vec<u8>>,
    ) {
        chunks.iter_mut().for_each(Vec::clear);
        own.clear();
        pre_len.fill(None);
        if own.capacity() <= KEEP_BUF {
            self.out[self.pid] = own;
        }
        self.chunks = chunks;
        self.pre_len = pre_len;
        self.posted.bufs = bufs;
    }

    /// The end of a sync: waits for our closing messages and the replies both ways, copies
    /// the replies to our gets where they were asked for, keeps the buffers, and posts the
    /// receives of the next sync's closing messages.
    fn complete(&mut self, comm: &Comm) -> Result<(), BspError> {
        let (p, me) = (self.nprocs, self.pid);
        let reqs = &self.sends;
        if let Err(e) = self.spin.wait(comm, |done| reqs.iter().all(|&r| done(r))) {
            return Err(self.transport("bsp_sync", e));
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
                // The replies were sized from our gets: a shorter one is a bug, not input.
                let Some(src) = got.get(at..at + n) else {
                    break;
                };
                // SAFETY: the caller of get promised `dst` is writable at this sync.
                unsafe { std::ptr::copy(src.as_ptr(), dst as *mut u8, n) };
                at += n;
            }
            self.gets[q].clear();
            if self.reply_out[q].capacity() > KEEP_BUF {
                self.reply_out[q] = Vec::new();
            }
            self.reply_out[q].clear();
        }
        self.tagsize = self.next_tagsize;
        self.ring_off.fill(false);
        self.step += 1;
        if self.config.prepost {
            if let Err(e) = self.posted.post(me, tag(KIND_FINAL, self.step)) {
                return Err(self.transport("bsp_sync", e));
            }
        }
        Ok(())
    }

    /// Receives the early messages from `q` that have arrived (all of them, once its closing
    /// message is in).
    fn drain_early(&mut self, q: usize, parity: u64) -> Result<(), ferry_core::Error> {
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
    fn poll_closing(&mut self, comm: &Comm, parity: u64) -> Result<(), ferry_core::Error> {
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
}
