//! Posting receives, probes and taking finished requests.

use super::*;
use crate::shm::Record;

impl Engine {
    /// Posts a receive into `cap` bytes at `buf`; `None` source or tag are wildcards.
    #[inline]
    pub(crate) fn irecv(
        &mut self,
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
        buf: *mut u8,
        cap: usize,
    ) -> Result<ReqId, Error> {
        let buf = non_null_if_empty(buf, cap);
        let pattern = Pattern {
            context,
            source,
            tag,
        };
        match self.proto.matcher.take_unexpected(&pattern) {
            Some(message) => self.recv_message(message, buf, cap),
            None => Ok(self.post_recv(pattern, buf, cap)),
        }
    }

    #[inline]
    pub(super) fn post_recv(&mut self, pattern: Pattern, buf: *mut u8, cap: usize) -> ReqId {
        if self.proto.may_doom() {
            if let Some(id) = self.doomed_recv(&pattern) {
                return id;
            }
        }
        let id = self
            .proto
            .requests
            .insert(ReqState::RecvPosted { buf, cap });
        self.proto.matcher.push_posted(pattern, id);
        id
    }

    /// Receives the message `(context, source, tag)` into `cap` bytes at `buf` if it has
    /// arrived: from the unexpected queue (a rendezvous one as a request that goes on), or as
    /// the next record of `source`'s shared-memory ring, read straight into `buf` without
    /// going through matching. That it is the next record there means no earlier message of
    /// that pair is waiting; a caller takes this path only for a pattern no posted receive may
    /// also match (one source, one tag, of a collective's context). `None` when it has not
    /// arrived yet.
    #[inline]
    pub(crate) fn take_arrived(
        &mut self,
        context: u32,
        source: u32,
        tag: i32,
        buf: *mut u8,
        cap: usize,
    ) -> Result<Option<Received>, Error> {
        let buf = non_null_if_empty(buf, cap);
        let pattern = Pattern {
            context,
            source: Some(source),
            tag: Some(tag),
        };
        if let Some(message) = self.proto.matcher.take_unexpected(&pattern) {
            return self.receive_taken(message, buf, cap).map(Some);
        }
        let peer = source as usize;
        if self.proto.peers[peer].route != Route::Shm || self.links[peer].held.is_some() {
            return Ok(None);
        }
        let Some(shm) = self.net.shm.as_mut() else {
            return Ok(None);
        };
        let Some((record, len)) = eager_at_head(shm, &self.proto, source, context, tag)? else {
            return Ok(None);
        };
        let (len, n) = (len as usize, (len as usize).min(cap));
        if n > 0 {
            record.copy_payload(0, buf, n);
        }
        shm.pop(peer, len);
        self.proto.counters.received(len as u64);
        Ok(Some(Received::Now(Completion {
            source,
            tag,
            len: n,
            message_len: len,
            cancelled: false,
            fault: Fault::None,
        })))
    }

    /// The message `(context, source, tag)` where it lies at the head of `source`'s
    /// shared-memory ring: [`InPlace::Held`] gives its payload, which stays there, and nothing
    /// behind it moves, until [`Engine::release_held`]. [`InPlace::Elsewhere`] when it is not
    /// to be had so (it was queued as unexpected, comes over TCP, or wraps around the ring's
    /// end): the caller receives it as usual then.
    pub(crate) fn take_arrived_in_place(
        &mut self,
        context: u32,
        source: u32,
        tag: i32,
    ) -> Result<InPlace, Error> {
        let pattern = Pattern {
            context,
            source: Some(source),
            tag: Some(tag),
        };
        let peer = source as usize;
        if self.proto.matcher.has_unexpected(&pattern)
            || self.proto.peers[peer].route != Route::Shm
            || self.links[peer].held.is_some()
        {
            return Ok(InPlace::Elsewhere);
        }
        let Some(shm) = self.net.shm.as_mut() else {
            return Ok(InPlace::Elsewhere);
        };
        let Some((record, len)) = eager_at_head(shm, &self.proto, source, context, tag)? else {
            return Ok(InPlace::NotYet);
        };
        let (Some(payload), Ok(held)) = (record.payload_in_place(len as usize), u32::try_from(len))
        else {
            return Ok(InPlace::Elsewhere);
        };
        self.links[peer].held = Some(held);
        shm.publish_head(peer);
        self.proto.counters.received(len);
        Ok(InPlace::Held(payload, len as usize))
    }

    /// Frees the record [`Engine::take_arrived_in_place`] held at the head of `peer`'s ring.
    pub(crate) fn release_held(&mut self, peer: usize) {
        if let (Some(len), Some(shm)) = (self.links[peer].held.take(), self.net.shm.as_mut()) {
            shm.pop(peer, len as usize);
        }
    }

    /// As [`Engine::irecv`] from one source with one tag, but a message that has arrived
    /// eagerly is received at once, without a request.
    pub(crate) fn recv_now_or_post(
        &mut self,
        context: u32,
        source: u32,
        tag: i32,
        buf: *mut u8,
        cap: usize,
    ) -> Result<Received, Error> {
        let buf = non_null_if_empty(buf, cap);
        let pattern = Pattern {
            context,
            source: Some(source),
            tag: Some(tag),
        };
        match self.proto.matcher.take_unexpected(&pattern) {
            Some(message) => self.receive_taken(message, buf, cap),
            None => Ok(Received::Later(self.post_recv(pattern, buf, cap))),
        }
    }

    /// Receives a message taken off the unexpected queue into `cap` bytes at `buf` (non-null):
    /// at once if it came eagerly, else (rendezvous) as a request that goes on.
    pub(super) fn receive_taken(
        &mut self,
        (env, body): (Envelope, Unexpected),
        buf: *mut u8,
        cap: usize,
    ) -> Result<Received, Error> {
        match body {
            Unexpected::Eager(data) => {
                // SAFETY: the caller lends `buf` for `cap` bytes.
                let done = unsafe { copy_kept(env, &data, buf, cap) };
                self.proto.recycle_kept(data);
                Ok(Received::Now(done))
            }
            rts => self.recv_message((env, rts), buf, cap).map(Received::Later),
        }
    }

    /// As [`Engine::irecv`] from one source, but an eager payload that arrives whole through
    /// shared memory may stay in the ring instead of being copied to `buf`:
    /// [`Engine::in_place`] says where, and the peer's later messages wait behind it until
    /// [`Engine::release_in_place`], which every such receive needs once it is done.
    pub(crate) fn irecv_in_place(
        &mut self,
        context: u32,
        source: u32,
        tag: Option<i32>,
        buf: *mut u8,
        cap: usize,
    ) -> Result<ReqId, Error> {
        let id = self.irecv(context, Some(source), tag, buf, cap)?;
        if !self.proto.is_done(id) && self.proto.peers[source as usize].route == Route::Shm {
            self.in_place.push((id, None));
        }
        Ok(id)
    }

    /// The payload a finished [`Engine::irecv_in_place`] left in the ring, if it did (else it
    /// is in the receive's buffer). Valid until [`Engine::release_in_place`].
    pub(crate) fn in_place(&mut self, id: ReqId) -> Option<(*const u8, usize)> {
        let peer = self.in_place.iter().find(|(r, _)| *r == id)?.1? as usize;
        let len = self.links[peer].held? as usize;
        let record = self.net.shm.as_mut()?.peek(peer)?;
        Some((record.payload_in_place(len)?, len))
    }

    /// Ends an [`Engine::irecv_in_place`] (done, cancelled or taken): frees the ring space its
    /// payload holds, and the peer's messages behind it flow again.
    pub(crate) fn release_in_place(&mut self, id: ReqId) {
        let Some(i) = self.in_place.iter().position(|(r, _)| *r == id) else {
            return;
        };
        if let (_, Some(peer)) = self.in_place.swap_remove(i) {
            let peer = peer as usize;
            if let (Some(len), Some(shm)) = (self.links[peer].held.take(), self.net.shm.as_mut()) {
                shm.pop(peer, len as usize);
            }
        }
    }

    /// Receives a message already taken off the unexpected queue into `cap` bytes at `buf`.
    pub(crate) fn recv_message(
        &mut self,
        (env, body): (Envelope, Unexpected),
        buf: *mut u8,
        cap: usize,
    ) -> Result<ReqId, Error> {
        let buf = non_null_if_empty(buf, cap);
        let id = self
            .proto
            .requests
            .insert(ReqState::RecvPosted { buf, cap });
        match body {
            Unexpected::Eager(data) => {
                self.proto.deliver_kept(id, env, &data);
                self.proto.recycle_kept(data);
            }
            Unexpected::Rts(_) if self.proto.failed(env.source) => {
                // Its sender died before the payload moved: it never will.
                let failed = failure::faulted(Fault::ProcFailed, env.source);
                self.proto.complete(id, failed);
            }
            Unexpected::Rts(rts) => {
                self.proto.start_rendezvous_recv(id, env, rts, buf, cap);
                self.flush_peer(env.source)?;
            }
        }
        Ok(id)
    }

    /// Receives a taken message at once when its bytes are already here (an eager message):
    /// no request is made, since nothing is left to wait for. A rendezvous message is given
    /// back for [`Engine::recv_message`].
    ///
    /// # Safety
    /// `buf` must be valid for writes of `cap` bytes.
    pub(crate) unsafe fn recv_message_now(
        &mut self,
        (env, body): (Envelope, Unexpected),
        buf: *mut u8,
        cap: usize,
    ) -> Result<Completion, (Envelope, Unexpected)> {
        match body {
            Unexpected::Eager(data) => {
                // SAFETY: the caller's promise.
                let done = unsafe { copy_kept(env, &data, non_null_if_empty(buf, cap), cap) };
                self.proto.recycle_kept(data);
                Ok(done)
            }
            rts => Err((env, rts)),
        }
    }

    /// Takes the earliest unexpected message matching the pattern off the queue, so that no
    /// other receive can match it (MPI's matched probe); progress is made once if none is there.
    /// (A blocking probe waits for a match first: `Shared::wait_until` with `Proto::has_match`.)
    pub(crate) fn take_message(
        &mut self,
        hook: &mut impl Hook,
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
    ) -> Result<Option<(Envelope, Unexpected)>, Error> {
        let pattern = self.progressed_for(hook, context, source, tag)?;
        Ok(self.proto.matcher.take_unexpected(&pattern))
    }

    /// The earliest unmatched message a receive with this pattern would get: (envelope, length).
    pub(crate) fn iprobe(
        &mut self,
        hook: &mut impl Hook,
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
    ) -> Result<Option<(Envelope, usize)>, Error> {
        let pattern = self.progressed_for(hook, context, source, tag)?;
        Ok(self.proto.peek(&pattern))
    }

    /// The pattern of a probe, after one progress pass if no queued message matches it yet.
    fn progressed_for(
        &mut self,
        hook: &mut impl Hook,
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
    ) -> Result<Pattern, Error> {
        let pattern = Pattern {
            context,
            source,
            tag,
        };
        if self.proto.peek(&pattern).is_none() {
            self.progress(hook)?;
        }
        Ok(pattern)
    }

    /// Withdraws a receive that has not matched yet; a matched one completes normally.
    pub(crate) fn cancel(&mut self, id: ReqId) {
        if self.proto.matcher.cancel_posted(id) {
            self.proto.complete(
                id,
                Completion {
                    source: 0,
                    tag: 0,
                    len: 0,
                    message_len: 0,
                    cancelled: true,
                    fault: Fault::None,
                },
            );
        }
    }
}

/// The record at the head of `source`'s shared-memory ring, with its message's length, if it
/// is the eager message `(context, tag)` and may be taken without matching (`context` has no
/// active-message handler, which must see its messages). Inlined: the record returned through
/// memory and read back at once cost a short collective a tenth of its time.
#[inline(always)]
fn eager_at_head<'s>(
    shm: &'s mut ShmTransport,
    proto: &Proto,
    source: u32,
    context: u32,
    tag: i32,
) -> Result<Option<(Record<'s>, u64)>, Error> {
    let Some(record) = shm.peek(source as usize) else {
        return Ok(None);
    };
    let frame = Frame::decode(&record.header, u64::MAX).map_err(|e| protocol_error(source, e))?;
    match frame {
        Frame::Eager {
            context: c,
            tag: t,
            len,
        } if c == context && t == tag && !proto.is_active(context) => Ok(Some((record, len))),
        _ => Ok(None),
    }
}
