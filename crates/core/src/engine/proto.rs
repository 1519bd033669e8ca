//! The protocol half's bookkeeping: queues per peer, requests, the unexpected messages kept,
//! active-message handlers, and the rendezvous steps that a frame or a flush starts.

use super::*;

impl Proto {
    /// Makes room for peers up to (not including) `peers`: the new ones are reached over TCP
    /// (processes of a world spawned later, or of the world that spawned ours) and have no
    /// known process id yet. The engine gives them its half in `Engine::adopt_peers`.
    #[cold]
    pub(crate) fn grow(&mut self, peers: usize) {
        if peers > self.peers.len() {
            self.peers.resize_with(peers, || Peer::new(Route::Tcp, 0));
        }
    }

    /// How many peers are known: universe ranks `0..peer_count()`.
    pub(crate) fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// How universe rank `rank` is reached, `None` past the known peers.
    pub(crate) fn route(&self, rank: usize) -> Option<Route> {
        self.peers.get(rank).map(|p| p.route)
    }

    /// The process id of universe rank `rank`: 0 while unknown, `None` past the known peers.
    pub(crate) fn pid(&self, rank: usize) -> Option<u32> {
        self.peers.get(rank).map(|p| p.pid)
    }

    /// Fills in the process id of a lost peer, which only the engine knows.
    pub(super) fn with_pid(&self, error: Error) -> Error {
        match error {
            Error::PeerLost {
                rank,
                pid: 0,
                detail,
            } => Error::PeerLost {
                rank,
                pid: self.pid(rank).unwrap_or(0),
                detail,
            },
            other => other,
        }
    }

    /// Keeps a message no receive was posted for, and counts it.
    pub(super) fn push_unexpected(&mut self, env: Envelope, message: Unexpected) {
        if crate::events::listening(crate::events::EventType::UnexpectedMessage) {
            crate::events::unexpected(env.source, env.tag, env.context, message.len());
        }
        self.matcher.push_unexpected(env, message);
        self.counters
            .queued_unexpected(self.matcher.unexpected_len());
    }

    pub(super) fn push_out(&mut self, peer: u32, out: Out) {
        let p = &mut self.peers[peer as usize];
        if p.route == Route::Loopback {
            // Control frames to ourselves (FIN, CTS) take the loopback queue.
            if let Out::Frame(f) = out {
                if let Ok(frame) = Frame::decode(&f.header, u64::MAX) {
                    self.loopback.push_back((frame, Vec::new()));
                }
            }
            return;
        }
        p.outq.push_back(out);
        self.mark_busy(peer);
    }

    /// `peer` has frames to write: `flush` visits it until they are out.
    pub(super) fn mark_busy(&mut self, peer: u32) {
        let p = &mut self.peers[peer as usize];
        if !p.queued {
            p.queued = true;
            self.busy.push(peer);
        }
    }

    /// Rendezvous to `peer` wait for the receiver's FIN: over several rails a chunk may have
    /// to be sent again until then.
    #[inline]
    pub(super) fn acknowledged(&self, peer: u32) -> bool {
        self.rails > 1 && self.peers[peer as usize].route == Route::Tcp
    }

    /// Length of the rendezvous send `id` while it is not over.
    pub(super) fn pending_send_len(&self, id: ReqId) -> Option<u64> {
        match self.requests.get(id) {
            Some(ReqState::SendRendezvous { machine, .. }) if !machine.is_done() => {
                Some(machine.len())
            }
            _ => None,
        }
    }

    /// The frame `frame` is fully written: completes what waited for it.
    pub(super) fn frame_written(&mut self, frame: &OutFrame) {
        if let Some(id) = frame.complete {
            if matches!(self.requests.get(id), Some(ReqState::SendEager)) {
                self.complete(id, Proto::sent(frame.len));
            } else {
                self.complete(id, Proto::sent(0));
            }
        }
    }

    #[inline]
    pub(crate) fn complete(&mut self, id: ReqId, completion: Completion) {
        if let Some(state) = self.requests.get_mut(id) {
            if let ReqState::SendRendezvous { dest, .. } = *state {
                self.peers[dest as usize].large_out -= 1;
            }
            *state = ReqState::Done(completion);
            self.completions += 1;
        }
    }

    pub(super) fn sent(len: usize) -> Completion {
        Completion {
            source: 0,
            tag: 0,
            len,
            message_len: len,
            cancelled: false,
            fault: Fault::None,
        }
    }

    /// Completes the posted receive `id` with a message that was kept in memory.
    /// Keeps the buffer of a delivered unexpected message for the next one, so that small
    /// messages arriving before their receive cost no allocation. A sender running ahead (a
    /// root of back-to-back broadcasts) leaves a ring's worth queued, so up to 256 are kept, of
    /// at most 4 KiB each.
    pub(super) fn recycle_kept(&mut self, data: Vec<u8>) {
        const KEEP: usize = 256;
        const LARGEST: usize = 4096;
        if self.spare_kept.len() < KEEP && data.capacity() <= LARGEST {
            self.spare_kept.push(data);
        }
    }

    pub(super) fn deliver_kept(&mut self, id: ReqId, env: Envelope, data: &[u8]) {
        let Some(&ReqState::RecvPosted { buf, cap }) = self.requests.get(id) else {
            return;
        };
        // SAFETY: `buf` is valid for `cap` bytes while the request lives.
        let done = unsafe { copy_kept(env, data, buf, cap) };
        self.complete(id, done);
    }

    /// Whether a message a receive with this pattern would match has arrived.
    pub(crate) fn has_match(&self, context: u32, source: Option<u32>, tag: Option<i32>) -> bool {
        let pattern = Pattern {
            context,
            source,
            tag,
        };
        self.peek(&pattern).is_some()
    }

    /// Envelope and length of the earliest unexpected message matching `pattern`.
    pub(super) fn peek(&self, pattern: &Pattern) -> Option<(Envelope, usize)> {
        self.matcher.peek_unexpected(pattern).map(|(env, m)| {
            let len = match m {
                Unexpected::Eager(d) => d.len(),
                Unexpected::Rts(rts) => rts.len as usize,
            };
            (*env, len)
        })
    }

    /// Whether `context` has an active-message handler.
    #[inline]
    pub(super) fn is_active(&self, context: u32) -> bool {
        !self.active.is_empty() && self.active.iter().any(|(c, _)| *c == context)
    }

    /// Hands a whole message to its context's handler and keeps the replies for sending.
    pub(super) fn run_active(&mut self, env: Envelope, data: &[u8]) {
        let Some((_, handler)) = self.active.iter_mut().find(|(c, _)| *c == env.context) else {
            return;
        };
        let mut replies = Vec::new();
        handler(env.source, env.tag, data, &mut replies);
        self.active_out
            .extend(replies.into_iter().map(|r| (env.context, r)));
    }

    /// Every queued frame is written.
    pub(crate) fn output_drained(&self) -> bool {
        self.busy.is_empty() && self.loopback.is_empty()
    }

    /// The completion of finished request `id`, left in its slot.
    #[inline]
    pub(crate) fn finished(&self, id: ReqId) -> Option<Completion> {
        match self.requests.get(id) {
            Some(ReqState::Done(c)) => Some(*c),
            _ => None,
        }
    }

    /// Whether `id` names a request not yet taken.
    #[inline]
    pub(crate) fn is_live(&self, id: ReqId) -> bool {
        self.requests.get(id).is_some()
    }

    #[inline]
    pub(crate) fn is_done(&self, id: ReqId) -> bool {
        matches!(self.requests.get(id), Some(ReqState::Done(_)) | None)
    }

    /// Starts the receive side of a rendezvous: pull when allowed, else ask for a push.
    pub(super) fn start_rendezvous_recv(
        &mut self,
        id: ReqId,
        env: Envelope,
        rts: Announced,
        buf: *mut u8,
        cap: usize,
    ) {
        let Announced {
            len,
            send_id,
            source_addr,
            key,
        } = rts;
        let peer = env.source;
        let mut machine = RendezvousRecv::new(send_id, id, len, cap as u64);
        let accepted = machine.accepted() as usize;
        let done = received(&machine, &env, len as usize);
        let route = self.peers[peer as usize].route;
        if let Some(key) = key {
            // Read through the fabric, FIN once the read completes (`Proto::read_done`); a
            // receive that takes nothing reads nothing.
            if accepted == 0 {
                let fin = machine.fin();
                self.push_out(peer, Out::Frame(OutFrame::control(fin)));
                self.complete(id, done);
                return;
            }
            self.fabric.reads.push(FabricRead {
                id,
                peer,
                remote_addr: source_addr,
                key,
                buf,
                len: accepted,
            });
            if let Some(state) = self.requests.get_mut(id) {
                *state = ReqState::RecvRendezvous {
                    machine,
                    buf,
                    env,
                    message_len: len as usize,
                };
            }
            return;
        }
        // The bytes come pulled here at once (then FIN), half pulled and half written by the
        // sender (SHARE), or pushed by the sender (CTS).
        let mut reply = None;
        if source_addr != 0 && accepted > 0 {
            let p = &self.peers[peer as usize];
            let share = route == Route::Shm
                && self.cma
                && len >= self.cma_share_min
                && p.cma_proven
                && p.large_out == 0;
            if share {
                reply = machine.share(buf as u64);
                if reply.is_some() {
                    self.shared_pulls.push(SharedPull {
                        id,
                        peer,
                        source_addr,
                        len: share_split(len),
                    });
                }
            }
            let pulled = reply.is_none()
                && match route {
                    Route::Loopback => {
                        // SAFETY: the sender's buffer lives in this process and stays lent until
                        // the FIN we send next; MPI forbids overlapping send and receive buffers.
                        unsafe {
                            std::ptr::copy_nonoverlapping(source_addr as *const u8, buf, accepted)
                        };
                        true
                    }
                    Route::Shm if self.cma => {
                        let p = &mut self.peers[peer as usize];
                        match cma_read(p.pid, source_addr, buf, accepted) {
                            Ok(()) => {
                                p.cma_proven = true;
                                true
                            }
                            Err(e) => {
                                eprintln!("ferry: rank {}: single-copy read from rank {peer} refused ({e}); copying through shared memory instead", self.me);
                                self.cma = false;
                                false
                            }
                        }
                    }
                    _ => false,
                };
            if pulled {
                let fin = machine.fin();
                self.push_out(peer, Out::Frame(OutFrame::control(fin)));
                self.complete(id, done);
                return;
            }
        }
        let reply = reply.unwrap_or_else(|| machine.cts());
        self.push_out(peer, Out::Frame(OutFrame::control(reply)));
        if machine.is_complete() {
            self.complete(id, done);
        } else if let Some(state) = self.requests.get_mut(id) {
            *state = ReqState::RecvRendezvous {
                machine,
                buf,
                env,
                message_len: len as usize,
            };
        }
    }

    /// Bytes `[offset, offset + len)` of rendezvous receive `id` are in its buffer (a DATA
    /// chunk, the sender's WRITTEN range or this side's pull); completes it once all are.
    pub(super) fn stored(&mut self, peer: u32, id: ReqId, offset: u64, len: u64) {
        let acknowledged = self.acknowledged(peer);
        let Some(ReqState::RecvRendezvous {
            machine,
            env,
            message_len,
            ..
        }) = self.requests.get_mut(id)
        else {
            return;
        };
        machine.on_stored(offset, len);
        if machine.is_complete() {
            let done = received(machine, env, *message_len);
            let ack = (acknowledged || machine.acknowledges()).then(|| machine.ack());
            self.complete(id, done);
            if let Some(ack) = ack {
                self.push_out(peer, Out::Frame(OutFrame::control(ack)));
            }
        }
    }

    /// The sender's part of a shared copy: writes the back of the message straight into the
    /// receiver's buffer, or pushes it through the ring if the kernel refuses.
    pub(super) fn write_share(
        &mut self,
        peer: u32,
        send_id: u64,
        recv_id: u64,
        dest_addr: u64,
    ) -> Result<(), Error> {
        let (cma, pid, me) = (self.cma, self.peers[peer as usize].pid, self.me);
        let Some(ReqState::SendRendezvous { machine, buf, .. }) = self.requests.get_mut(send_id)
        else {
            return Err(protocol_error(
                peer,
                format!("SHARE for unknown send {send_id:#x}"),
            ));
        };
        let (from, end) = machine
            .on_share(recv_id)
            .map_err(|e| protocol_error(peer, e))?;
        let written = cma
            && {
                // SAFETY: from ≤ end = message length; the buffer is lent until the send completes.
                let source = unsafe { buf.add(from as usize) };
                match cma_write(pid, dest_addr + from, source, (end - from) as usize) {
                    Ok(()) => true,
                    Err(e) => {
                        eprintln!("ferry: rank {me}: single-copy write to rank {peer} refused ({e}); copying through shared memory instead");
                        false
                    }
                }
            };
        if written {
            if let Some(frame) = machine.wrote_directly() {
                self.push_out(peer, Out::Frame(OutFrame::control(frame)));
            }
        } else {
            self.cma = false;
            self.push_out(peer, Out::Stream(send_id));
        }
        Ok(())
    }

    /// Runs the receivers' halves of shared copies whose SHARE frames are written.
    pub(super) fn run_shared_pulls(&mut self) -> Result<(), Error> {
        for pull in std::mem::take(&mut self.shared_pulls) {
            let Some(ReqState::RecvRendezvous { buf, .. }) = self.requests.get(pull.id) else {
                continue;
            };
            cma_read(
                self.peers[pull.peer as usize].pid,
                pull.source_addr,
                *buf,
                pull.len as usize,
            )
            .map_err(|e| {
                Error::Transport(format!(
                    "rank {}: single-copy read from rank {} failed after it had worked: {e}",
                    self.me, pull.peer
                ))
            })?;
            self.stored(pull.peer, pull.id, 0, pull.len);
        }
        Ok(())
    }

    /// Cuts the next DATA chunk of a pushed rendezvous: the frame and the chunk's offset.
    pub(super) fn next_chunk(&mut self, id: ReqId, max: usize) -> Option<(OutFrame, u64)> {
        let Some(ReqState::SendRendezvous { machine, buf, .. }) = self.requests.get_mut(id) else {
            return None;
        };
        let chunk = machine.next_chunk(max as u64)?;
        let done = machine.is_done();
        // SAFETY: offset < message length; `buf` is lent until the request completes.
        let payload = unsafe { buf.add(chunk.offset as usize) };
        let frame = OutFrame {
            header: chunk.frame.to_bytes(),
            payload,
            len: chunk.len as usize,
            sent: 0,
            complete: done.then_some(id),
            owned: None,
        };
        Some((frame, chunk.offset))
    }

    /// No chunk of send `id` is left to cut.
    pub(super) fn handed_out(&self, id: ReqId) -> bool {
        match self.requests.get(id) {
            Some(ReqState::SendRendezvous { machine, .. }) => machine.handed_out(),
            _ => true,
        }
    }

    /// A copy of chunk `[offset, offset + len)` of send `id`, to go again on another rail;
    /// `None` once the send is over.
    pub(super) fn resend_chunk(&self, id: ReqId, offset: u64, len: u64) -> Option<OutFrame> {
        let Some(ReqState::SendRendezvous { machine, buf, .. }) = self.requests.get(id) else {
            return None;
        };
        let chunk = machine.resend(offset, len)?;
        // SAFETY: `resend` checked the chunk lies within the message, whose buffer is lent
        // until the send completes, which it has not.
        let bytes: Box<[u8]> =
            unsafe { std::slice::from_raw_parts(buf.add(offset as usize), len as usize) }.into();
        Some(OutFrame {
            header: chunk.frame.to_bytes(),
            payload: bytes.as_ptr(),
            len: len as usize,
            sent: 0,
            complete: None,
            owned: Some(bytes),
        })
    }
}

/// What a rendezvous receive reports once its bytes are in: what it accepted of the
/// `message_len` bytes sent.
pub(super) fn received(machine: &RendezvousRecv, env: &Envelope, message_len: usize) -> Completion {
    Completion {
        source: env.source,
        tag: env.tag,
        len: machine.accepted() as usize,
        message_len,
        cancelled: false,
        fault: Fault::None,
    }
}
