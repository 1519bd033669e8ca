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

use crate::error::Error;
use crate::frames::{FabricRead, FrameSink, OutFrame, ReqId, Transport};
use ferry_fabric::{Access, Completion, Endpoint, OpKind, PeerAddr, Region, Remote};
use ferry_wire::{Frame, HEADER_LEN};
use std::collections::HashMap;
use std::io::IoSlice;

/// Bytes before the header in a slot: the sender's universe rank.
const SOURCE_LEN: usize = 4;
/// Receives kept posted, and sends in flight at most.
const SLOTS: usize = 64;
/// Largest message sent with `fi_inject` (when the provider takes that much): a frame with a
/// short payload, copied from the stack.
const INJECT_MAX: usize = 256;

/// Which completion a context belongs to: the top bits say the kind, the rest an index.
const RECV_CTX: u64 = 1 << 62;
const SEND_CTX: u64 = 2 << 62;
const READ_CTX: u64 = 3 << 62;
const CTX_KIND: u64 = 3 << 62;

/// A peer as the fabric knows it.
#[derive(Default)]
struct FabricPeer {
    /// Its endpoint's name, from its card.
    name: Option<Vec<u8>>,
    /// In the address vector once first used.
    addr: Option<PeerAddr>,
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
    /// Slot size: source, header and the largest payload a frame carries here.
    slot: usize,
    /// Messages up to this many bytes go by `fi_inject`.
    inject: usize,
    recv_slots: Box<[u8]>,
    recv_region: Region,
    send_slots: Box<[u8]>,
    send_region: Region,
    /// Send slots free for the next frame, and the peer each busy one goes to.
    free_sends: Vec<usize>,
    send_peer: [u32; SLOTS],
    /// Registrations of sends whose receivers read them, by request.
    exposed: HashMap<ReqId, Region>,
    reads: Vec<Option<ReadInFlight>>,
    /// Reads the endpoint could not take yet (EAGAIN).
    waiting_reads: Vec<usize>,
    completions: Vec<Completion>,
}

impl FabricTransport {
    /// Opens an endpoint and posts its receives; `payload` is the largest payload of a frame.
    pub(crate) fn open(ep: Endpoint, me: u32, payload: usize) -> Result<FabricTransport, Error> {
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
            slot,
            inject,
            recv_slots,
            recv_region,
            send_slots,
            send_region,
            free_sends: (0..SLOTS).rev().collect(),
            send_peer: [0; SLOTS],
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

    /// Takes universe rank `peer`'s endpoint name.
    pub(crate) fn set_peer(&mut self, peer: u32, name: Vec<u8>) {
        let p = peer as usize;
        if self.peers.len() <= p {
            self.peers.resize_with(p + 1, FabricPeer::default);
        }
        self.peers[p] = FabricPeer {
            name: Some(name),
            addr: None,
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

    /// The peer's address, put into the address vector when first used.
    fn addr(&mut self, peer: usize) -> Result<PeerAddr, Error> {
        let me = self.me;
        let p = self.peers.get_mut(peer).ok_or_else(|| {
            Error::Transport(format!("rank {me}: rank {peer} has no fabric address"))
        })?;
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
            return self.inject_frame(addr, frame, len);
        }
        let Some(&i) = self.free_sends.last() else {
            return Ok(false);
        };
        let slot = &mut self.send_slots[i * self.slot..i * self.slot + len];
        fill_message(slot, self.me, frame);
        let (parts, descs) = ([IoSlice::new(slot)], [self.send_region.desc()]);
        // SAFETY: the slot is registered memory of the transport's, left alone until the
        // send completes (it is off the free list from now until then).
        let sent = unsafe { (self.ep).send(addr, &parts, &descs, SEND_CTX | i as u64) }
            .map_err(fabric_error)?;
        if !sent {
            return Ok(false); // the endpoint is full: the frame stays queued
        }
        self.free_sends.pop();
        self.send_peer[i] = peer as u32;
        frame.sent = HEADER_LEN + frame.len;
        Ok(true)
    }

    /// Sends a frame of `len` bytes in all that the provider copies at once (`fi_inject`): no
    /// slot, no completion to read.
    fn inject_frame(
        &mut self,
        addr: PeerAddr,
        frame: &mut OutFrame,
        len: usize,
    ) -> Result<bool, Error> {
        let mut bytes = [0u8; INJECT_MAX];
        let message = &mut bytes[..len];
        fill_message(message, self.me, frame);
        if !self.ep.inject(addr, message).map_err(fabric_error)? {
            return Ok(false);
        }
        frame.sent = HEADER_LEN + frame.len;
        Ok(true)
    }

    /// Registers `len` bytes at `buf` (the buffer of rendezvous send `id`) for a peer to read:
    /// the address and key the RTS_READ carries. Held until [`FabricTransport::release`].
    pub(crate) fn expose(
        &mut self,
        id: ReqId,
        buf: *const u8,
        len: usize,
    ) -> Result<(u64, u64), Error> {
        // SAFETY: the send's buffer stays lent (unchanged) until the peer's FIN, which is
        // when the registration goes (`release`).
        let region =
            unsafe { self.ep.register(buf, len, Access::REMOTE_READ) }.map_err(fabric_error)?;
        let Remote { addr, key } = region.remote();
        let at = (addr, key);
        self.exposed.insert(id, region);
        Ok(at)
    }

    /// The peer read send `id`: its registration goes.
    pub(crate) fn release(&mut self, id: ReqId) {
        self.exposed.remove(&id);
    }

    /// Starts `read` (its pieces go out as the endpoint takes them).
    pub(crate) fn start_read(&mut self, read: FabricRead) -> Result<(), Error> {
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
                    return Ok(()); // the endpoint is full: the rest goes from a later pass
                }
                r.posted += n;
                r.pending += 1;
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
        for c in &done {
            self.complete(c, sink)?;
        }
        self.completions = done;
        if !self.waiting_reads.is_empty() {
            self.post_reads()?;
        }
        Ok(moved)
    }

    fn complete(&mut self, c: &Completion, sink: &mut dyn FrameSink) -> Result<(), Error> {
        let index = (c.context & !CTX_KIND) as usize;
        match c.context & CTX_KIND {
            RECV_CTX => {
                let len = c.result.as_ref().map_err(|e| {
                    Error::Transport(format!("rank {}: a fabric receive failed: {e}", self.me))
                })?;
                self.deliver(index, *len, sink)?;
                self.post_recv(index)
            }
            SEND_CTX => {
                let peer = self.send_peer.get(index).copied().unwrap_or(u32::MAX);
                self.free_sends.push(index);
                match &c.result {
                    Err(e) => Err(Error::Transport(format!(
                        "rank {}: a fabric send to rank {peer} failed: {e}",
                        self.me
                    ))),
                    Ok(_) => Ok(()),
                }
            }
            READ_CTX if c.kind == OpKind::Read => {
                let Some(r) = self.reads.get_mut(index).and_then(Option::as_mut) else {
                    return Ok(());
                };
                let (peer, id) = (r.read.peer, r.read.id);
                if let Err(e) = &c.result {
                    return Err(Error::Transport(format!(
                        "rank {}: a fabric read from rank {peer} failed: {e}",
                        self.me
                    )));
                }
                r.pending -= 1;
                if r.pending == 0 && r.posted == r.read.len {
                    self.reads[index] = None;
                    sink.read_done(peer, id)?;
                }
                Ok(())
            }
            _ => Ok(()),
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
