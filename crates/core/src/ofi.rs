//! The fabric transport: frames between hosts over a libfabric endpoint (`FI_EP_RDM`), and
//! rendezvous payloads read straight from the sender's registered memory (`fi_read`).
//!
//! Frames travel as one message each, copied into registered slots: a slot holds the sender's
//! universe rank (4 bytes, little-endian; an RDM endpoint does not say who sent a message),
//! the frame header and its payload. Receives are posted into slots of the same size and
//! posted again once their frame is handed to the sink. Large messages never travel as frames:
//! the engine registers the send buffer (`expose`) and announces it with RTS_READ, and the
//! receiver's read (`start_read`) lands in the user's buffer; registrations last only as long
//! as their rendezvous, so memory going back to the system never meets a stale one.
//!
//! The peers' fabric names come from the bootstrap; a name is put into the address vector
//! when the peer is first written to. Progress is manual: everything moves in `poll_input`,
//! called from the engine's progress pass.
//!
//! A peer that stops answering must not hold a rank for ever: each peer with work outstanding
//! (sends or read pieces in flight, or a write or read the endpoint keeps refusing with
//! EAGAIN) is watched, and one towards which nothing moved for the job's connect timeout is
//! lost (`Error::PeerLost`), as is one whose operation completes with an error. A lost peer's
//! registrations and waiting reads go at once, its slots as the provider hands them back;
//! every later operation towards it fails the same way, and the other peers go on.

use crate::error::Error;
use crate::frames::{FabricRead, FrameSink, OutFrame, ReqId, Transport};
use ferry_fabric::{Access, Completion, Endpoint, OpKind, PeerAddr, Region, Remote};
use ferry_wire::{Frame, HEADER_LEN};
use std::collections::HashMap;
use std::io::IoSlice;
use std::time::{Duration, Instant};

/// Bytes before the header in a slot: the sender's universe rank.
const SOURCE_LEN: usize = 4;
/// Receives kept posted, and sends in flight at most.
const SLOTS: usize = 64;
/// Largest message sent with `fi_inject` (when the provider takes that much): a frame with a
/// short payload, copied from the stack.
const INJECT_MAX: usize = 256;
/// Looks at the watched peers further apart than this mean that the rank was away (computing):
/// the time between them does not count against a peer.
const LOOK_GAP: Duration = Duration::from_secs(1);

/// Which completion a context belongs to: the top bits say the kind, the rest an index.
const RECV_CTX: u64 = 1 << 62;
const SEND_CTX: u64 = 2 << 62;
const READ_CTX: u64 = 3 << 62;
const CTX_KIND: u64 = 3 << 62;
/// A send's context also carries its slot's generation (bits 32 … 61), so that the late
/// completion of a send to a lost peer, whose slot was taken back, is known for what it is.
const CTX_GEN_SHIFT: u32 = 32;
const CTX_GEN_MASK: u64 = (1 << 30) - 1;
const CTX_INDEX: u64 = (1 << 32) - 1;
/// `send_peer` of a free slot.
const NO_PEER: u32 = u32::MAX;

/// A peer as the fabric knows it.
#[derive(Default)]
struct FabricPeer {
    /// Its endpoint's name, from its card.
    name: Option<Vec<u8>>,
    /// In the address vector once first used.
    addr: Option<PeerAddr>,
    /// Its process id, for the error that says it is lost.
    pid: u32,
    /// Sends (in slots) and read pieces towards it that have not completed.
    sends: u32,
    read_pieces: u32,
    /// The call the endpoint refused (EAGAIN) towards it since the watch last looked.
    refused: Option<&'static str>,
    /// Something moved towards it (an operation taken or completed, a message from it) since
    /// the watch last looked.
    moved: bool,
    /// In `FabricTransport::watched`.
    watched: bool,
    /// How long nothing moved towards it while it had work outstanding (time this rank spent
    /// looking only).
    stalled_for: Duration,
    /// Why it is lost, once it is: every later operation towards it fails so.
    lost: Option<String>,
}

impl FabricPeer {
    fn outstanding(&self) -> bool {
        self.sends > 0 || self.read_pieces > 0 || self.refused.is_some()
    }
}

/// A read in flight: pieces of at most the endpoint's largest message.
struct ReadInFlight {
    read: FabricRead,
    /// Registration of the receive buffer (for providers that need local descriptors).
    region: Region,
    /// Bytes posted so far, and pieces not yet complete.
    posted: usize,
    pending: usize,
}

/// One rank's fabric endpoint and its slots.
pub(crate) struct FabricTransport {
    ep: Endpoint,
    me: u32,
    peers: Vec<FabricPeer>,
    /// How long a peer with work outstanding may go without anything moving towards it.
    patience: Duration,
    /// The peers with work outstanding (see [`FabricTransport::look_for_stalls`]), and when
    /// they were last looked at.
    watched: Vec<u32>,
    last_look: Option<Instant>,
    /// Slot size: source, header and the largest payload a frame carries here.
    slot: usize,
    /// Messages up to this many bytes go by `fi_inject`.
    inject: usize,
    recv_slots: Box<[u8]>,
    recv_region: Region,
    send_slots: Box<[u8]>,
    send_region: Region,
    /// Send slots free for the next frame, the peer each busy one goes to, and each one's
    /// generation (bumped when a lost peer's slot is taken back).
    free_sends: Vec<usize>,
    send_peer: [u32; SLOTS],
    send_gen: [u64; SLOTS],
    /// Registrations of sends whose receivers read them, by request, with the receiver.
    exposed: HashMap<ReqId, (u32, Region)>,
    reads: Vec<Option<ReadInFlight>>,
    /// Reads the endpoint could not take yet (EAGAIN).
    waiting_reads: Vec<usize>,
    completions: Vec<Completion>,
}

impl FabricTransport {
    /// Opens an endpoint and posts its receives; `payload` is the largest payload of a frame,
    /// `patience` how long a peer may leave work outstanding with nothing moving before it
    /// counts as lost (the job's connect timeout).
    pub(crate) fn open(
        ep: Endpoint,
        me: u32,
        payload: usize,
        patience: Duration,
    ) -> Result<FabricTransport, Error> {
        let slot = (SOURCE_LEN + HEADER_LEN + payload).min(ep.info().provider.max_msg_size);
        let inject = ep.info().provider.inject_size.min(INJECT_MAX);
        let recv_slots = vec![0u8; slot * SLOTS].into_boxed_slice();
        let send_slots = vec![0u8; slot * SLOTS].into_boxed_slice();
        // SAFETY: both slot arrays are heap memory held (never moved or freed) as long as the
        // transport, and so as long as their registrations, which it holds too.
        let (recv_region, send_region) = unsafe {
            (
                ep.register(recv_slots.as_ptr(), recv_slots.len(), Access::RECV),
                ep.register(send_slots.as_ptr(), send_slots.len(), Access::SEND),
            )
        };
        let (recv_region, send_region) = (
            recv_region.map_err(fabric_error)?,
            send_region.map_err(fabric_error)?,
        );
        let mut t = FabricTransport {
            ep,
            me,
            peers: Vec::new(),
            patience,
            watched: Vec::new(),
            last_look: None,
            slot,
            inject,
            recv_slots,
            recv_region,
            send_slots,
            send_region,
            free_sends: (0..SLOTS).rev().collect(),
            send_peer: [NO_PEER; SLOTS],
            send_gen: [0; SLOTS],
            exposed: HashMap::new(),
            reads: Vec::new(),
            waiting_reads: Vec::new(),
            completions: Vec::new(),
        };
        for i in 0..SLOTS {
            t.post_recv(i)?;
        }
        Ok(t)
    }

    /// The provider in use (`tcp;ofi_rxm`, `verbs;ofi_rxm`, `efa`, `cxi`, …).
    pub(crate) fn provider(&self) -> &str {
        &self.ep.info().provider.provider
    }

    /// This endpoint's name, for the card.
    pub(crate) fn name(&self) -> Result<Vec<u8>, Error> {
        self.ep.name().map_err(fabric_error)
    }

    /// Takes universe rank `peer`'s endpoint name and process id.
    pub(crate) fn set_peer(&mut self, peer: u32, name: Vec<u8>, pid: u32) {
        let p = peer as usize;
        if self.peers.len() <= p {
            self.peers.resize_with(p + 1, FabricPeer::default);
        }
        self.peers[p] = FabricPeer {
            name: Some(name),
            pid,
            ..FabricPeer::default()
        };
    }

    /// Largest eager message: what a slot holds.
    pub(crate) fn eager_limit(&self) -> usize {
        self.slot - SOURCE_LEN - HEADER_LEN
    }

    /// Largest payload of any frame.
    pub(crate) fn frame_limit(&self) -> usize {
        self.eager_limit()
    }

    /// Whether a wait may sleep on [`FabricTransport::wake_fd`] now (nothing is left to read).
    pub(crate) fn try_wait(&mut self) -> bool {
        self.ep.try_wait()
    }

    fn post_recv(&mut self, i: usize) -> Result<(), Error> {
        // SAFETY: slot `i` lies inside `recv_slots`, which lives (registered) as long as the
        // endpoint; the provider writes into it only until the receive completes.
        let buf = unsafe { self.recv_slots.as_mut_ptr().add(i * self.slot) };
        let desc = self.recv_region.desc();
        // SAFETY: as above: the slot stays valid and untouched until its receive completes.
        match unsafe { (self.ep).post_recv(buf, self.slot, desc, RECV_CTX | i as u64) } {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::Transport(format!(
                "rank {}: the fabric took no receive buffer (its queue is full)",
                self.me
            ))),
            Err(e) => Err(fabric_error(e)),
        }
    }

    /// The peer's address, put into the address vector when first used; a lost peer's error.
    fn addr(&mut self, peer: usize) -> Result<PeerAddr, Error> {
        let me = self.me;
        let p = self.peers.get_mut(peer).ok_or_else(|| {
            Error::Transport(format!("rank {me}: rank {peer} has no fabric address"))
        })?;
        if let Some(why) = &p.lost {
            let (pid, detail) = (p.pid, why.clone());
            return Err(Error::PeerLost {
                rank: peer,
                pid,
                detail,
            });
        }
        if let Some(addr) = p.addr {
            return Ok(addr);
        }
        let name = p.name.as_deref().ok_or_else(|| {
            Error::Transport(format!("rank {me}: rank {peer} has no fabric address"))
        })?;
        let addr = self.ep.insert(name).map_err(fabric_error)?;
        p.addr = Some(addr);
        Ok(addr)
    }

    /// Writes `frame` to `peer` as one message if a slot is free: true when it took it.
    fn write_frame(&mut self, peer: usize, frame: &mut OutFrame) -> Result<bool, Error> {
        let len = SOURCE_LEN + HEADER_LEN + frame.len;
        if len > self.slot {
            return Err(Error::Transport(format!(
                "rank {}: a frame of {} B to rank {peer} exceeds the fabric's {} B",
                self.me,
                frame.len,
                self.eager_limit()
            )));
        }
        let addr = self.addr(peer)?;
        if len <= self.inject {
            return self.inject_frame((peer, addr), frame, len);
        }
        let Some(&i) = self.free_sends.last() else {
            // Every slot is in flight: their peers' watches run, not this one's.
            return Ok(false);
        };
        let slot = &mut self.send_slots[i * self.slot..i * self.slot + len];
        fill_message(slot, self.me, frame);
        let (parts, descs) = ([IoSlice::new(slot)], [self.send_region.desc()]);
        // SAFETY: the slot is registered memory of the transport's, valid as long as it and
        // left alone until the send completes (it is off the free list until then) or its
        // peer is lost (`lose`: a late read of the slot then sends the lost peer other bytes).
        let ctx = SEND_CTX | self.send_gen[i] << CTX_GEN_SHIFT | i as u64;
        let sent = unsafe { (self.ep).send(addr, &parts, &descs, ctx) }.map_err(fabric_error)?;
        if !sent {
            // The endpoint is full, or the peer not reachable yet: the frame stays queued.
            self.refused(peer, "fi_sendv");
            return Ok(false);
        }
        self.free_sends.pop();
        self.send_peer[i] = peer as u32;
        self.peers[peer].sends += 1;
        self.moved(peer);
        self.watch(peer);
        frame.sent = HEADER_LEN + frame.len;
        Ok(true)
    }

    /// Sends a frame of `len` bytes in all that the provider copies at once (`fi_inject`): no
    /// slot, no completion to read.
    fn inject_frame(
        &mut self,
        (peer, addr): (usize, PeerAddr),
        frame: &mut OutFrame,
        len: usize,
    ) -> Result<bool, Error> {
        let mut bytes = [0u8; INJECT_MAX];
        let message = &mut bytes[..len];
        fill_message(message, self.me, frame);
        if !self.ep.inject(addr, message).map_err(fabric_error)? {
            self.refused(peer, "fi_inject");
            return Ok(false);
        }
        self.moved(peer);
        frame.sent = HEADER_LEN + frame.len;
        Ok(true)
    }

    /// Registers `len` bytes at `buf` (the buffer of rendezvous send `id` to `peer`) for the
    /// peer to read: the address and key the RTS_READ carries. Held until
    /// [`FabricTransport::release`], or until the peer is lost.
    pub(crate) fn expose(
        &mut self,
        (id, peer): (ReqId, u32),
        buf: *const u8,
        len: usize,
    ) -> Result<(u64, u64), Error> {
        self.addr(peer as usize)?;
        // SAFETY: the send's buffer stays lent (unchanged) until the peer's FIN, which is
        // when the registration goes (`release`).
        let region =
            unsafe { self.ep.register(buf, len, Access::REMOTE_READ) }.map_err(fabric_error)?;
        let Remote { addr, key } = region.remote();
        let at = (addr, key);
        self.exposed.insert(id, (peer, region));
        Ok(at)
    }

    /// The peer read send `id`: its registration goes.
    pub(crate) fn release(&mut self, id: ReqId) {
        self.exposed.remove(&id);
    }

    /// Starts `read` (its pieces go out as the endpoint takes them).
    pub(crate) fn start_read(&mut self, read: FabricRead) -> Result<(), Error> {
        self.addr(read.peer as usize)?;
        // SAFETY: the receive buffer stays lent until the read completes, and the region is
        // held as long as the read.
        let region =
            unsafe { self.ep.register(read.buf, read.len, Access::READ) }.map_err(fabric_error)?;
        let index = match self.reads.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.reads.push(None);
                self.reads.len() - 1
            }
        };
        self.reads[index] = Some(ReadInFlight {
            read,
            region,
            posted: 0,
            pending: 0,
        });
        self.waiting_reads.push(index);
        self.post_reads()
    }

    /// Posts the pieces of waiting reads until the endpoint is full.
    fn post_reads(&mut self) -> Result<(), Error> {
        let piece = self.ep.info().provider.max_msg_size.max(1);
        while let Some(&index) = self.waiting_reads.first() {
            let Some(peer) = self.reads[index].as_ref().map(|r| r.read.peer) else {
                self.waiting_reads.remove(0);
                continue;
            };
            let addr = self.addr(peer as usize)?;
            let Some(r) = self.reads[index].as_mut() else {
                self.waiting_reads.remove(0);
                continue;
            };
            while r.posted < r.read.len {
                let n = piece.min(r.read.len - r.posted);
                // SAFETY: `posted + n ≤ len`, inside the receive buffer lent until completion.
                let local = unsafe { r.read.buf.add(r.posted) };
                let remote = r.read.remote_addr + r.posted as u64;
                let ctx = READ_CTX | index as u64;
                let remote = Remote {
                    addr: remote,
                    key: r.read.key,
                };
                // SAFETY: `local` has `n` bytes of the receive buffer, registered in
                // `r.region` and lent until the read completes.
                let took = unsafe { (self.ep).read(addr, local, n, r.region.desc(), remote, ctx) }
                    .map_err(fabric_error)?;
                if !took {
                    // The endpoint is full: the rest goes from a later pass.
                    self.refused(peer as usize, "fi_read");
                    return Ok(());
                }
                r.posted += n;
                r.pending += 1;
                let p = &mut self.peers[peer as usize];
                p.read_pieces += 1;
                p.moved = true;
                if !p.watched {
                    p.watched = true;
                    self.watched.push(peer);
                }
            }
            self.waiting_reads.remove(0);
        }
        Ok(())
    }

    /// Reads the completion queue: frames go to `sink`, finished reads complete their
    /// receives. Whether anything moved.
    /// One read of the queue a pass: each read drives the provider's progress (a system call
    /// on socket providers), so a pass that found something hands it up at once rather than
    /// reading again to see the queue empty.
    fn read_completions(&mut self, sink: &mut dyn FrameSink) -> Result<bool, Error> {
        self.completions.clear();
        let moved = self.ep.poll(&mut self.completions).map_err(fabric_error)? > 0;
        let done = std::mem::take(&mut self.completions);
        let mut failed = Ok(());
        for c in &done {
            // Every completion is taken in, so that a lost peer's slots come back even when
            // another's error is reported first.
            if let Err(e) = self.complete(c, sink) {
                failed = failed.and(Err(e));
            }
        }
        self.completions = done;
        failed?;
        if !self.waiting_reads.is_empty() {
            self.post_reads()?;
        }
        self.look_for_stalls()?;
        Ok(moved)
    }

    fn complete(&mut self, c: &Completion, sink: &mut dyn FrameSink) -> Result<(), Error> {
        let index = (c.context & CTX_INDEX) as usize;
        match c.context & CTX_KIND {
            RECV_CTX => {
                let len = match &c.result {
                    Ok(len) => *len,
                    Err(e) => {
                        // An RDM receive does not say whom it was from: the slot is posted
                        // again, and the error ends the call.
                        self.post_recv(index)?;
                        return Err(Error::Transport(format!(
                            "rank {}: a fabric receive ({}) failed: {e}",
                            self.me,
                            self.provider()
                        )));
                    }
                };
                self.deliver(index, len, sink)?;
                self.post_recv(index)
            }
            SEND_CTX if index < SLOTS => {
                let gen = c.context >> CTX_GEN_SHIFT & CTX_GEN_MASK;
                if gen != self.send_gen[index] || self.send_peer[index] == NO_PEER {
                    return Ok(()); // a lost peer's send, whose slot was taken back
                }
                let peer = self.send_peer[index] as usize;
                self.send_peer[index] = NO_PEER;
                self.free_sends.push(index);
                let p = &mut self.peers[peer];
                p.sends = p.sends.saturating_sub(1);
                match &c.result {
                    Ok(_) => {
                        p.moved = true;
                        Ok(())
                    }
                    Err(_) if p.lost.is_some() => Ok(()),
                    Err(e) => {
                        let detail = format!("a fabric send ({}) failed: {e}", self.provider());
                        Err(self.lose(peer, detail))
                    }
                }
            }
            READ_CTX if c.kind == OpKind::Read => self.read_completed(index, c, sink),
            _ => Ok(()),
        }
    }

    /// A piece of read `index` completed: the read's receive is done once every piece is; a
    /// read from a lost peer goes, with its registration, once no piece is in flight.
    fn read_completed(
        &mut self,
        index: usize,
        c: &Completion,
        sink: &mut dyn FrameSink,
    ) -> Result<(), Error> {
        let Some(r) = self.reads.get_mut(index).and_then(Option::as_mut) else {
            return Ok(());
        };
        let (peer, id) = (r.read.peer, r.read.id);
        r.pending = r.pending.saturating_sub(1);
        let finished = r.pending == 0 && r.posted == r.read.len;
        let idle = r.pending == 0;
        let p = &mut self.peers[peer as usize];
        p.read_pieces = p.read_pieces.saturating_sub(1);
        if p.lost.is_some() {
            if idle {
                self.reads[index] = None;
            }
            return Ok(());
        }
        if let Err(e) = &c.result {
            let detail = format!("a fabric read ({}) failed: {e}", self.provider());
            return Err(self.lose(peer as usize, detail));
        }
        p.moved = true;
        if finished {
            self.reads[index] = None;
            sink.read_done(peer, id)?;
        }
        Ok(())
    }

    /// Something towards `peer` moved: an operation was taken or completed, a message came.
    fn moved(&mut self, peer: usize) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.moved = true;
        }
    }

    /// The endpoint refused `call` towards `peer` (EAGAIN): its watch runs.
    fn refused(&mut self, peer: usize, call: &'static str) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.refused = Some(call);
        }
        self.watch(peer);
    }

    fn watch(&mut self, peer: usize) {
        if let Some(p) = self.peers.get_mut(peer).filter(|p| !p.watched) {
            p.watched = true;
            self.watched.push(peer as u32);
        }
    }

    /// Looks at the peers with work outstanding: one towards which nothing moved for
    /// `patience` is lost. Only time this rank spent looking counts: a gap between two looks
    /// longer than [`LOOK_GAP`] (the rank was computing, outside the library, and a provider
    /// with manual progress could not move either) is left out.
    fn look_for_stalls(&mut self) -> Result<(), Error> {
        if self.watched.is_empty() {
            self.last_look = None;
            return Ok(());
        }
        let now = Instant::now();
        let counted = match self.last_look.replace(now) {
            Some(last) if now.saturating_duration_since(last) <= LOOK_GAP => now - last,
            _ => Duration::ZERO,
        };
        let mut i = 0;
        while i < self.watched.len() {
            let peer = self.watched[i] as usize;
            let p = &mut self.peers[peer];
            if !p.outstanding() || p.lost.is_some() {
                (p.watched, p.stalled_for, p.moved) = (false, Duration::ZERO, false);
                self.watched.swap_remove(i);
                continue;
            }
            if p.moved {
                (p.moved, p.stalled_for) = (false, Duration::ZERO);
            } else {
                p.stalled_for += counted;
            }
            if p.stalled_for >= self.patience {
                let detail = self.stall_detail(peer);
                return Err(self.lose(peer, detail));
            }
            // A refusal counts until the next look: a frame still queued is tried again.
            self.peers[peer].refused = None;
            i += 1;
        }
        Ok(())
    }

    /// What a peer towards which nothing moved had outstanding.
    fn stall_detail(&self, peer: usize) -> String {
        let p = &self.peers[peer];
        let mut what = Vec::new();
        if p.sends > 0 {
            what.push(format!("{} sends (fi_sendv) without a completion", p.sends));
        }
        if p.read_pieces > 0 {
            what.push(format!(
                "{} reads (fi_read) without a completion",
                p.read_pieces
            ));
        }
        if let Some(call) = p.refused {
            what.push(format!("{call} answered EAGAIN on every try"));
        }
        format!(
            "no progress towards it over the fabric ({}) for {:.1} s: {} (FERRY_CONNECT_TIMEOUT)",
            self.provider(),
            p.stalled_for.as_secs_f64(),
            what.join(", ")
        )
    }

    /// Marks `peer` lost for `detail` and cleans up after it: its registrations, the reads not
    /// yet posted and its send slots go now (a slot's generation changes, so that a late
    /// completion of its send is ignored; a provider that reads the slot late sends the lost
    /// peer other bytes, in memory that stays registered); reads with pieces in flight go with
    /// their last completion, since they write into a receive's buffer. The error to report.
    fn lose(&mut self, peer: usize, detail: String) -> Error {
        let pid = self.peers.get(peer).map_or(0, |p| p.pid);
        if let Some(p) = self.peers.get_mut(peer) {
            (p.lost, p.refused, p.sends) = (Some(detail.clone()), None, 0);
        }
        for i in 0..SLOTS {
            if self.send_peer[i] as usize == peer {
                self.send_gen[i] = (self.send_gen[i] + 1) & CTX_GEN_MASK;
                self.send_peer[i] = NO_PEER;
                self.free_sends.push(i);
            }
        }
        self.exposed.retain(|_, (to, _)| *to as usize != peer);
        let reads = &mut self.reads;
        self.waiting_reads.retain(|&i| {
            reads[i]
                .as_ref()
                .is_some_and(|r| r.read.peer as usize != peer)
        });
        for read in reads.iter_mut() {
            if read
                .as_ref()
                .is_some_and(|r| r.read.peer as usize == peer && r.pending == 0)
            {
                *read = None;
            }
        }
        Error::PeerLost {
            rank: peer,
            pid,
            detail,
        }
    }

    /// Hands the frame in receive slot `i` (`len` bytes arrived) to `sink`.
    fn deliver(&mut self, i: usize, len: usize, sink: &mut dyn FrameSink) -> Result<(), Error> {
        let me = self.me;
        let bad = |detail: String| Error::Transport(format!("rank {me}: {detail}"));
        let slot = &self.recv_slots[i * self.slot..i * self.slot + len.min(self.slot)];
        if slot.len() < SOURCE_LEN + HEADER_LEN {
            return Err(bad(format!(
                "a fabric message of {len} B is shorter than a frame"
            )));
        }
        let mut source = [0u8; SOURCE_LEN];
        source.copy_from_slice(&slot[..SOURCE_LEN]);
        let peer = u32::from_le_bytes(source);
        if peer as usize >= self.peers.len() || self.peers[peer as usize].name.is_none() {
            return Err(bad(format!(
                "a fabric message claims to come from rank {peer}, not a fabric peer"
            )));
        }
        let payload = &slot[SOURCE_LEN + HEADER_LEN..];
        let frame = Frame::decode(&slot[SOURCE_LEN..], payload.len() as u64)
            .map_err(|e| bad(format!("a fabric message from rank {peer}: {e}")))?;
        if frame.payload_len() != payload.len() as u64 {
            return Err(bad(format!(
                "a fabric message from rank {peer} holds {} payload bytes, its frame says {}",
                payload.len(),
                frame.payload_len()
            )));
        }
        self.peers[peer as usize].moved = true;
        let mut incoming = sink.begin_frame(peer, &frame)?;
        incoming.store(0, payload);
        incoming.cap = incoming.cap.min(payload.len());
        sink.end_frame(peer, &frame, incoming)
    }
}

impl Transport for FabricTransport {
    fn poll_input(&mut self, sink: &mut impl FrameSink) -> Result<bool, Error> {
        self.read_completions(sink)
    }

    fn try_write(&mut self, peer: usize, frame: &mut OutFrame) -> Result<bool, Error> {
        self.write_frame(peer, frame)
    }

    /// The completion queue's wait object, if the provider has one (sleep on it only after
    /// [`FabricTransport::try_wait`]).
    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        self.ep.wait_fd()
    }
}

/// Writes a frame as a fabric message into `message` (exactly its length): the sender's rank,
/// the header, the payload.
fn fill_message(message: &mut [u8], me: u32, frame: &OutFrame) {
    message[..SOURCE_LEN].copy_from_slice(&me.to_le_bytes());
    message[SOURCE_LEN..SOURCE_LEN + HEADER_LEN].copy_from_slice(&frame.header);
    if frame.len > 0 {
        // SAFETY: a queued frame's payload is valid for `len` bytes until it is written.
        let payload = unsafe { std::slice::from_raw_parts(frame.payload, frame.len) };
        message[SOURCE_LEN + HEADER_LEN..].copy_from_slice(payload);
    }
}

fn fabric_error(e: ferry_fabric::FabricError) -> Error {
    Error::Transport(format!("fabric: {e}"))
}

#[cfg(test)]
mod tests {
    //! Endpoints of one process on libfabric's `tcp` provider over loopback: a peer whose
    //! endpoint is closed is lost within the patience given, and the others still talk.
    //! Without libfabric the tests say so and pass.

    use super::*;
    use crate::frames::{Arrival, Incoming};
    use ferry_fabric::{EndpointSpec, Library};

    /// Long enough that only a hang reaches it.
    const DEADLINE: Duration = Duration::from_secs(60);
    /// The patience of the transports under test: short, so that a test ends soon.
    const PATIENCE: Duration = Duration::from_millis(300);
    const LOST_PID: u32 = 4242;

    fn endpoint() -> Option<Endpoint> {
        let lib = match Library::load() {
            Ok(lib) => lib,
            Err(e) => {
                eprintln!("skipped: libfabric cannot be loaded: {e}");
                return None;
            }
        };
        let spec = EndpointSpec {
            provider: Some("tcp".into()),
            domain: Some("lo".into()),
            ..EndpointSpec::default()
        };
        match Endpoint::open(&lib, &spec) {
            Ok(ep) => Some(ep),
            Err(e) => {
                eprintln!("skipped: no tcp endpoint on lo: {e}");
                None
            }
        }
    }

    fn transport(me: u32) -> Option<FabricTransport> {
        Some(FabricTransport::open(endpoint()?, me, 1024, PATIENCE).expect("transport"))
    }

    /// The name of an endpoint that was opened and closed again: nothing answers there.
    fn closed_name() -> Vec<u8> {
        let ep = endpoint().expect("a second endpoint");
        ep.name().expect("its name")
    }

    /// Records the frames that arrive, by sender.
    #[derive(Default)]
    struct Arrived(Vec<(u32, u64)>);

    impl FrameSink for Arrived {
        fn begin_frame(&mut self, _peer: u32, _frame: &Frame) -> Result<Incoming, Error> {
            Ok(Incoming {
                ptr: std::ptr::null_mut(),
                cap: 0,
                arrival: Arrival::Discard,
            })
        }
        fn end_frame(&mut self, peer: u32, frame: &Frame, _: Incoming) -> Result<(), Error> {
            self.0.push((peer, frame.payload_len()));
            Ok(())
        }
        fn read_done(&mut self, _peer: u32, _id: ReqId) -> Result<(), Error> {
            Ok(())
        }
    }

    fn frame(payload: &[u8]) -> OutFrame {
        OutFrame {
            header: Frame::eager_header(1, 7, payload.len() as u64),
            payload: payload.as_ptr(),
            len: payload.len(),
            sent: 0,
            complete: None,
            owned: None,
        }
    }

    /// Writes frames of `payload` to `peer` and polls until an error comes.
    fn write_until_error(t: &mut FabricTransport, peer: usize, payload: &[u8]) -> Error {
        let begin = Instant::now();
        let mut sink = Arrived::default();
        let mut out = frame(payload);
        loop {
            match t.try_write(peer, &mut out) {
                Ok(true) => out = frame(payload),
                Ok(false) => {}
                Err(e) => return e,
            }
            if let Err(e) = t.poll_input(&mut sink) {
                return e;
            }
            assert!(begin.elapsed() < DEADLINE, "no error for a closed endpoint");
        }
    }

    fn assert_lost(e: &Error, rank: usize) -> String {
        match e {
            Error::PeerLost {
                rank: r,
                pid,
                detail,
            } if *r == rank && *pid == LOST_PID => {
                assert!(detail.contains("tcp"), "names the provider: {detail}");
                detail.clone()
            }
            other => panic!("expected rank {rank} lost, got {other:?}"),
        }
    }

    fn writes_to_a_closed_endpoint_lose_its_rank(payload: &[u8]) {
        let Some(mut t) = transport(0) else { return };
        t.set_peer(1, closed_name(), LOST_PID);
        let detail = assert_lost(&write_until_error(&mut t, 1, payload), 1);
        // The operation is named: a stall names the call, a failed completion says so.
        assert!(
            detail.contains("fi_") || detail.contains("failed"),
            "names the operation: {detail}"
        );
        // Every later operation towards it fails the same way, at once.
        let again = t.try_write(1, &mut frame(payload)).expect_err("still lost");
        assert_eq!(assert_lost(&again, 1), detail);
    }

    #[test]
    fn an_inject_over_fabric_to_a_closed_endpoint_loses_its_rank() {
        writes_to_a_closed_endpoint_lose_its_rank(&[5; 8]);
    }

    #[test]
    fn a_slot_send_over_fabric_to_a_closed_endpoint_loses_its_rank() {
        writes_to_a_closed_endpoint_lose_its_rank(&[5; 1000]);
    }

    /// Writes `count` frames of `payload` from `a` to `to` while both poll, until `b` has them.
    fn exchange(a: &mut FabricTransport, b: &mut FabricTransport, to: usize, payload: &[u8]) {
        let (count, from) = (20, a.me);
        let (mut at_a, mut at_b) = (Arrived::default(), Arrived::default());
        let begin = Instant::now();
        let mut written = 0;
        let mut out = frame(payload);
        while at_b.0.len() < count {
            if written < count && a.try_write(to, &mut out).expect("write") {
                written += 1;
                out = frame(payload);
            }
            a.poll_input(&mut at_a).expect("poll the sender");
            b.poll_input(&mut at_b).expect("poll the receiver");
            assert!(
                begin.elapsed() < DEADLINE,
                "{} of {count} frames",
                at_b.0.len()
            );
        }
        assert!(at_b.0.iter().all(|&f| f == (from, payload.len() as u64)));
    }

    #[test]
    fn over_fabric_the_survivors_still_talk_after_a_peer_is_lost() {
        let Some(mut a) = transport(0) else { return };
        let mut b = transport(1).expect("a second transport");
        a.set_peer(1, b.name().expect("b's name"), 11);
        a.set_peer(2, closed_name(), LOST_PID);
        b.set_peer(0, a.name().expect("a's name"), 10);
        let (small, large) = ([3u8; 8], [4u8; 1000]);
        exchange(&mut a, &mut b, 1, &small);

        assert_lost(&write_until_error(&mut a, 2, &large), 2);
        // A read from the lost rank is refused before it registers anything.
        let mut buf = [0u8; 64];
        let read = FabricRead {
            id: 9,
            peer: 2,
            remote_addr: 0,
            key: 0,
            buf: buf.as_mut_ptr(),
            len: buf.len(),
        };
        assert_lost(&a.start_read(read).expect_err("lost"), 2);
        assert!(a.reads.iter().all(Option::is_none));

        exchange(&mut a, &mut b, 1, &small);
        exchange(&mut a, &mut b, 1, &large);
        exchange(&mut b, &mut a, 0, &large);
    }

    #[test]
    fn over_fabric_a_peer_that_closes_its_endpoint_mid_job_is_lost() {
        let Some(mut a) = transport(0) else { return };
        let mut b = transport(1).expect("a second transport");
        a.set_peer(1, b.name().expect("b's name"), LOST_PID);
        b.set_peer(0, a.name().expect("a's name"), 10);
        let large = [4u8; 1000];
        exchange(&mut a, &mut b, 1, &large);
        drop(b);
        let detail = assert_lost(&write_until_error(&mut a, 1, &large), 1);
        assert!(detail.contains("send"), "names the operation: {detail}");
        // Its slots are back at once; the sends still in flight to it complete later (failed),
        // and say nothing more.
        assert_eq!((a.free_sends.len(), a.peers[1].sends), (SLOTS, 0));
        let begin = Instant::now();
        while a.ep.in_flight() > SLOTS {
            a.poll_input(&mut Arrived::default())
                .expect("no second error for a lost peer");
            assert!(begin.elapsed() < DEADLINE, "{} in flight", a.ep.in_flight());
        }
    }

    #[test]
    fn over_fabric_time_away_from_the_library_does_not_count_against_a_peer() {
        let Some(mut t) = transport(0) else { return };
        t.set_peer(1, closed_name(), LOST_PID);
        let mut sink = Arrived::default();
        let payload = [5u8; 8];
        if t.try_write(1, &mut frame(&payload))
            .expect("refused, not failed")
        {
            eprintln!("skipped: the provider took a message to a closed endpoint");
            return;
        }
        t.poll_input(&mut sink).expect("a first look");
        assert!(!t.try_write(1, &mut frame(&payload)).expect("refused again"));
        // The rank computes, away from the library, for longer than the patience.
        std::thread::sleep(LOOK_GAP + PATIENCE);
        t.poll_input(&mut sink)
            .expect("the time away is not counted");
        // Looking on, it is lost (a hang would end at the deadline).
        assert_lost(&write_until_error(&mut t, 1, &payload), 1);
    }

    #[test]
    fn over_fabric_a_peer_that_stops_answering_is_lost_and_its_slots_serve_the_others() {
        let Some(mut a) = transport(0) else { return };
        let mut b = transport(1).expect("a second transport");
        let mut c = transport(2).expect("a third transport");
        a.set_peer(1, b.name().expect("b's name"), LOST_PID);
        a.set_peer(2, c.name().expect("c's name"), 12);
        b.set_peer(0, a.name().expect("a's name"), 10);
        c.set_peer(0, a.name().expect("a's name"), 10);
        let large = [4u8; 1000];
        exchange(&mut a, &mut b, 1, &large);
        exchange(&mut a, &mut c, 2, &large);
        // b is open but no longer polled, as a stopped process: frames to it fill the slots,
        // then nothing completes.
        let detail = assert_lost(&write_until_error(&mut a, 1, &large), 1);
        assert!(
            detail.contains("fi_sendv") && detail.contains("without a completion"),
            "{detail}"
        );
        assert_eq!(a.free_sends.len(), SLOTS, "its slots are taken back");
        exchange(&mut a, &mut c, 2, &large);
        exchange(&mut c, &mut a, 0, &large);
        drop(b);
    }
}
