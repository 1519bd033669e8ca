//! The fabric transport: frames between hosts over libfabric endpoints (`FI_EP_RDM`), and
//! rendezvous payloads read straight from the sender's registered memory (`fi_read`).
//!
//! A rank may have several endpoints, one per NIC (libfabric domain): its **rails**. Rail 0
//! carries every frame, so that a pair's frames keep their order (MPI's matching needs it);
//! large reads are cut into pieces spread over every rail the pair shares (`reads.rs`). The
//! rails of two peers pair by index (rail i of one with rail i of the other).
//!
//! Frames travel as one message each, copied into registered slots: a slot holds the sender's
//! universe rank (4 bytes, little-endian; an RDM endpoint does not say who sent a message),
//! the frame header and its payload. Receives are posted into slots of the same size and
//! posted again once their frame is handed to the sink. Large messages never travel as frames:
//! the engine registers the send buffer (`expose`) and announces it with RTS_READ, and the
//! receiver's read (`start_read`) lands in the user's buffer; registrations last only as long
//! as their rendezvous, so memory going back to the system never meets a stale one. The
//! RTS_READ frame carries rail 0's key; the fabric message that carries it adds the address
//! and key of the buffer on each further rail.
//!
//! The peers' fabric names come from the bootstrap; a name is put into the address vector
//! when the peer is first written to. Progress is manual: everything moves in `poll_input`,
//! called from the engine's progress pass.
//!
//! A peer that stops answering must not hold a rank for ever: each peer with work outstanding
//! (sends or read pieces in flight, or a write or read the endpoint keeps refusing with
//! EAGAIN) is watched, and one towards which nothing moved for the job's connect timeout is
//! lost (`Error::PeerLost`), as is one whose send completes with an error, or whose read
//! fails on its last working rail. A lost peer's registrations and waiting reads go at once,
//! its slots as the provider hands them back; every later operation towards it fails the
//! same way, and the other peers go on.

mod reads;

use crate::error::Error;
use crate::frames::{FabricRead, FrameSink, OutFrame, ReqId, Transport};
use ferry_fabric::{Access, Completion, Endpoint, OpKind, PeerAddr, Region, Remote};
use ferry_wire::{Frame, HEADER_LEN};
use reads::{Offered, ReadInFlight};
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
/// Most rails (endpoints) a rank opens: as many as `FERRY_RAILS` allows.
pub(crate) const MAX_FABRIC_RAILS: usize = 16;

/// Which completion a context belongs to: the top bits say the kind, the rest an index.
const RECV_CTX: u64 = 1 << 62;
const SEND_CTX: u64 = 2 << 62;
const READ_CTX: u64 = 3 << 62;
const CTX_KIND: u64 = 3 << 62;
/// A send's context also carries its slot's generation (bits 32 … 61), so that the late
/// completion of a send to a lost peer, whose slot was taken back, is known for what it is;
/// a read piece's context carries the piece's place among its read's pieces in flight there.
const CTX_GEN_SHIFT: u32 = 32;
const CTX_GEN_MASK: u64 = (1 << 30) - 1;
const CTX_INDEX: u64 = (1 << 32) - 1;
/// `send_peer` of a free slot.
const NO_PEER: u32 = u32::MAX;

/// A peer as the fabric knows it.
#[derive(Default)]
struct FabricPeer {
    /// Its endpoints' names, rail by rail, from its card (empty: not a fabric peer).
    names: Vec<Vec<u8>>,
    /// Each shared rail's address in the address vector, once first used.
    addrs: Vec<Option<PeerAddr>>,
    /// Rails (bits, by index) on which a read towards it failed: never used for it again.
    down: u32,
    /// Since when, and when last, each rail refused read pieces towards it (EAGAIN).
    refusing: Vec<Option<(Instant, Instant)>>,
    /// Buffers it announced (RTS_READ) whose reads have not started: their further rails.
    offered: Vec<Offered>,
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

    /// Whether rail `rail` still serves reads towards it.
    fn rail_up(&self, rail: usize) -> bool {
        rail < self.addrs.len() && self.down & (1 << rail) == 0
    }
}

/// One rank's fabric endpoints (rail 0 first) and rail 0's slots.
pub(crate) struct FabricTransport {
    ep: Endpoint,
    /// The endpoints of rails 1, 2, …: reads only.
    more: Vec<Endpoint>,
    me: u32,
    /// This host's name, for the line that says a rail failed.
    host: String,
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
    /// Registrations of sends whose receivers read them, by request, with the receiver: one
    /// per rail the pair shares.
    exposed: HashMap<ReqId, (u32, Vec<Region>)>,
    reads: Vec<Option<ReadInFlight>>,
    /// Reads with pieces not yet posted (the endpoint was full, or their rails busy).
    waiting_reads: Vec<usize>,
    completions: Vec<Completion>,
    /// Bytes read over each rail (pieces completed), for the tests to see the striping.
    #[cfg(test)]
    read_bytes: Vec<usize>,
}

impl FabricTransport {
    /// Opens the transport on `rails` (rail 0 first: at least one endpoint) and posts rail 0's
    /// receives; `payload` is the largest payload of a frame, `patience` how long a peer may
    /// leave work outstanding with nothing moving before it counts as lost (the job's connect
    /// timeout).
    pub(crate) fn open(
        rails: Vec<Endpoint>,
        me: u32,
        payload: usize,
        patience: Duration,
    ) -> Result<FabricTransport, Error> {
        let mut rails = rails.into_iter().take(MAX_FABRIC_RAILS);
        let ep = rails.next().ok_or_else(|| {
            Error::Transport(format!("rank {me}: a fabric transport without an endpoint"))
        })?;
        let more: Vec<Endpoint> = rails.collect();
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
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_or_else(|_| "?".to_string(), |h| h.trim().to_string());
        let mut t = FabricTransport {
            ep,
            more,
            me,
            host,
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
            #[cfg(test)]
            read_bytes: Vec::new(),
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

    /// How many rails (endpoints) this rank has.
    pub(crate) fn rails(&self) -> usize {
        1 + self.more.len()
    }

    /// Rail `rail`'s endpoint.
    fn rail(&mut self, rail: usize) -> &mut Endpoint {
        match rail.checked_sub(1) {
            Some(i) => &mut self.more[i],
            None => &mut self.ep,
        }
    }

    fn rail_ref(&self, rail: usize) -> &Endpoint {
        match rail.checked_sub(1) {
            Some(i) => &self.more[i],
            None => &self.ep,
        }
    }

    /// Each rail's domain (NIC) and endpoint name, rail 0 first, for the card.
    pub(crate) fn names(&self) -> Result<Vec<(String, Vec<u8>)>, Error> {
        (0..self.rails())
            .map(|r| {
                let ep = self.rail_ref(r);
                let name = ep.name().map_err(fabric_error)?;
                Ok((ep.info().provider.domain.clone(), name))
            })
            .collect()
    }

    /// Takes universe rank `peer`'s endpoint names (rail 0 first) and process id. The pair
    /// shares as many rails as the fewer of the two has.
    pub(crate) fn set_peer(&mut self, peer: u32, names: Vec<Vec<u8>>, pid: u32) {
        let p = peer as usize;
        if self.peers.len() <= p {
            self.peers.resize_with(p + 1, FabricPeer::default);
        }
        let shared = names.len().min(self.rails());
        self.peers[p] = FabricPeer {
            names,
            addrs: vec![None; shared],
            refusing: vec![None; shared],
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

    /// Whether a wait may sleep on the rails' wait fds now (nothing is left to read on any).
    pub(crate) fn try_wait(&mut self) -> bool {
        self.ep.try_wait() && self.more.iter_mut().all(Endpoint::try_wait)
    }

    /// Every rail's completion-queue fd, when every rail has one (else none: the wait then
    /// looks at the fabric every millisecond).
    pub(crate) fn wake_fds(&self) -> Vec<std::os::fd::RawFd> {
        let fds: Option<Vec<_>> = (0..self.rails())
            .map(|r| self.rail_ref(r).wait_fd())
            .collect();
        fds.unwrap_or_default()
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

    /// The peer's address on rail 0 (frames); a lost peer's error.
    fn addr(&mut self, peer: usize) -> Result<PeerAddr, Error> {
        self.rail_addr(peer, 0)
    }

    /// The peer's address on `rail`, put into that rail's address vector when first used; a
    /// lost peer's error.
    fn rail_addr(&mut self, peer: usize, rail: usize) -> Result<PeerAddr, Error> {
        let me = self.me;
        let none = || Error::Transport(format!("rank {me}: rank {peer} has no fabric address"));
        let p = self.peers.get_mut(peer).ok_or_else(none)?;
        if let Some(why) = &p.lost {
            let (pid, detail) = (p.pid, why.clone());
            return Err(Error::PeerLost {
                rank: peer,
                pid,
                detail,
            });
        }
        if let Some(addr) = p.addrs.get(rail).copied().flatten() {
            return Ok(addr);
        }
        let name = p.names.get(rail).filter(|_| rail < p.addrs.len());
        let name = name.ok_or_else(none)?.clone();
        let addr = self.rail(rail).insert(&name).map_err(fabric_error)?;
        self.peers[peer].addrs[rail] = Some(addr);
        Ok(addr)
    }

    /// Writes `frame` to `peer` as one message if a slot is free: true when it took it.
    fn write_frame(&mut self, peer: usize, frame: &mut OutFrame) -> Result<bool, Error> {
        // An RTS_READ's message adds the buffer's further rails; a FIN ends an announcement.
        let rails = self.announce_rails(peer, frame);
        let len = SOURCE_LEN + HEADER_LEN + frame.len + rails.len();
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
            return self.inject_frame((peer, addr), frame, &rails);
        }
        let Some(&i) = self.free_sends.last() else {
            // Every slot is in flight: their peers' watches run, not this one's.
            return Ok(false);
        };
        let slot = &mut self.send_slots[i * self.slot..i * self.slot + len];
        fill_message(slot, self.me, frame, &rails);
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

    /// Sends a frame (and `rails`, see [`FabricTransport::write_frame`]) in all that the
    /// provider copies at once (`fi_inject`): no slot, no completion to read.
    fn inject_frame(
        &mut self,
        (peer, addr): (usize, PeerAddr),
        frame: &mut OutFrame,
        rails: &[u8],
    ) -> Result<bool, Error> {
        let len = SOURCE_LEN + HEADER_LEN + frame.len + rails.len();
        let mut bytes = [0u8; INJECT_MAX];
        let message = &mut bytes[..len];
        fill_message(message, self.me, frame, rails);
        if !self.ep.inject(addr, message).map_err(fabric_error)? {
            self.refused(peer, "fi_inject");
            return Ok(false);
        }
        self.moved(peer);
        frame.sent = HEADER_LEN + frame.len;
        Ok(true)
    }

    /// One read of the queue a pass: each read drives the provider's progress (a system call
    /// on socket providers), so a pass that found something hands it up at once rather than
    /// reading again to see the queue empty.
    fn read_completions(&mut self, sink: &mut dyn FrameSink) -> Result<bool, Error> {
        self.completions.clear();
        let mut moved = self.ep.poll(&mut self.completions).map_err(fabric_error)? > 0;
        for ep in &mut self.more {
            // A rail's endpoint must be polled for its reads to move, and, with manual
            // progress, for a peer's reads of this rank's memory to be served.
            moved |= ep.poll(&mut self.completions).map_err(fabric_error)? > 0;
        }
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
            p.offered.clear();
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
        if peer as usize >= self.peers.len() || self.peers[peer as usize].names.is_empty() {
            return Err(bad(format!(
                "a fabric message claims to come from rank {peer}, not a fabric peer"
            )));
        }
        let body = &slot[SOURCE_LEN + HEADER_LEN..];
        let frame = Frame::decode(&slot[SOURCE_LEN..], body.len() as u64)
            .map_err(|e| bad(format!("a fabric message from rank {peer}: {e}")))?;
        let declared = frame.payload_len().min(body.len() as u64) as usize;
        let (payload, rails) = body.split_at(declared);
        let rts_read = matches!(frame, Frame::RtsRead { .. });
        if frame.payload_len() != payload.len() as u64 || (!rts_read && !rails.is_empty()) {
            return Err(bad(format!(
                "a fabric message from rank {peer} holds {} payload bytes, its frame says {}",
                body.len(),
                frame.payload_len()
            )));
        }
        if let Frame::RtsRead {
            send_id,
            remote_addr,
            ..
        } = frame
        {
            // The payload's length was checked above: the 8-byte key.
            let key = <[u8; 8]>::try_from(payload).unwrap_or_default();
            let rail0 = Remote {
                addr: remote_addr,
                key: u64::from_le_bytes(key),
            };
            let offer = reads::offered(send_id, rail0, rails)
                .map_err(|e| bad(format!("an RTS_READ from rank {peer}: {e}")))?;
            if let Some(offer) = offer {
                self.peers[peer as usize].offered.push(offer);
            }
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

    /// Rail 0's completion queue's wait object, if every rail has one (sleep on them all, see
    /// [`FabricTransport::wake_fds`], only after [`FabricTransport::try_wait`]).
    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        let every = self.more.iter().all(|ep| ep.wait_fd().is_some());
        self.ep.wait_fd().filter(|_| every)
    }
}

/// Writes a frame as a fabric message into `message` (exactly its length): the sender's rank,
/// the header, the payload, then `rails` (an RTS_READ's further rails).
fn fill_message(message: &mut [u8], me: u32, frame: &OutFrame, rails: &[u8]) {
    let end = SOURCE_LEN + HEADER_LEN + frame.len;
    message[..SOURCE_LEN].copy_from_slice(&me.to_le_bytes());
    message[SOURCE_LEN..SOURCE_LEN + HEADER_LEN].copy_from_slice(&frame.header);
    if frame.len > 0 {
        // SAFETY: a queued frame's payload is valid for `len` bytes until it is written.
        let payload = unsafe { std::slice::from_raw_parts(frame.payload, frame.len) };
        message[SOURCE_LEN + HEADER_LEN..end].copy_from_slice(payload);
    }
    message[end..].copy_from_slice(rails);
}

fn fabric_error(e: ferry_fabric::FabricError) -> Error {
    Error::Transport(format!("fabric: {e}"))
}

#[cfg(test)]
mod tests;
