//! The unchecked, scope-less interface for foreign-language bindings (the MPI C ABI).
//!
//! The safe API ties every nonblocking request to a [`crate::scope`], which is what keeps
//! buffers alive. A C program gives no such guarantee in the type system, only in its contract
//! ("do not touch the buffer until the request completes"), so this module hands out plain
//! request ids and takes raw pointers; the caller upholds MPI's buffer rules. Everything here
//! still runs on the calling thread and drives the same engine.

use crate::coll::executor::Reducer;
use crate::comm::{Comm, Source};
pub use crate::engine::Fault;
pub use crate::engine::SendMode;
use crate::engine::{ActiveReply, Completion, ReqId, Unexpected};
use crate::error::Error;
use crate::matching::Envelope;

/// A send, receive or collective started through this module; complete it with
/// [`Comm::raw_take`] once [`Comm::raw_done`] says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawRequest(ReqId);

impl RawRequest {
    /// The request as a number below 2^56 (slot index in the low 32 bits, a 24-bit slot
    /// generation above), for a binding that makes its own handles of requests: the top byte
    /// is free for its tag. A finished and taken request's number is never valid again until
    /// its slot has been reused 2^24 times.
    pub fn to_bits(self) -> u64 {
        self.0
    }

    /// The request [`RawRequest::to_bits`] gave `bits` for. A number that names no live
    /// request is harmless: [`Comm::raw_take`] and the others then find nothing.
    pub fn from_bits(bits: u64) -> RawRequest {
        RawRequest(bits)
    }
}

/// What a finished raw request reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStatus {
    /// Sender's rank in the communicator (receives only).
    pub source: usize,
    /// Message tag (receives only).
    pub tag: i32,
    /// Bytes received or sent.
    pub len: usize,
    /// Length of the message as sent (larger than `len` when truncated).
    pub message_len: usize,
    /// The request was cancelled before it matched.
    pub cancelled: bool,
    /// Ended by a failure (fault-tolerant jobs): its peer failed, or its communicator was
    /// revoked.
    pub fault: Fault,
}

impl RawStatus {
    /// A completion as it reports, its source a world rank.
    fn of_world(c: Completion) -> RawStatus {
        RawStatus {
            source: c.source as usize,
            tag: c.tag,
            len: c.len,
            message_len: c.message_len,
            cancelled: c.cancelled,
            fault: c.fault,
        }
    }
}

/// Room for one eager message written straight into a peer's shared-memory ring, from
/// [`Comm::raw_reserve`]: write up to [`RawReservation::capacity`] bytes at
/// [`RawReservation::as_mut_ptr`], then [`Comm::raw_publish`] (or drop it to abandon). The
/// memory is the peer's ring: nothing is visible there before the publish.
#[must_use = "a reservation holds back every later message to its peer until published or dropped"]
pub struct RawReservation {
    comm: Comm,
    dest: u32,
    at: *mut u8,
    len: usize,
    /// Neither published nor abandoned yet.
    open: bool,
}

impl RawReservation {
    /// Start of the reserved bytes; valid for writes of [`RawReservation::capacity`] bytes
    /// while the reservation lives (and its communicator's world is not finalized).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.at
    }

    /// Bytes reserved.
    pub fn capacity(&self) -> usize {
        self.len
    }
}

impl std::fmt::Debug for RawReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawReservation")
            .field("dest", &self.dest)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for RawReservation {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        if let Ok(mut engine) = self.comm.shared.engine.try_borrow_mut() {
            engine.abandon_eager(self.dest);
        }
    }
}

/// A message taken off the queue by a matched probe; only [`Comm::raw_mrecv`] can receive it.
pub struct RawMessage {
    message: (Envelope, Unexpected),
    status: RawStatus,
}

impl RawMessage {
    /// The message's envelope as a probe reports it.
    pub fn status(&self) -> RawStatus {
        self.status
    }
}

impl Comm {
    /// Matched probe: takes the earliest message matching `source` and `tag` out of reach of
    /// every other receive; `block` waits for one, else `None` when none has arrived.
    pub fn raw_mprobe(
        &self,
        source: Source,
        tag: i32,
        block: bool,
    ) -> Result<Option<RawMessage>, Error> {
        let source = self.source_pattern(source)?;
        let tag = Comm::tag_pattern(tag)?;
        if block {
            self.shared
                .wait_until(|p| p.has_match(self.context, source, tag))?;
        }
        let taken = (self.shared.engine.borrow_mut()).take_message(
            &mut *self.shared.coll.borrow_mut(),
            self.context,
            source,
            tag,
        )?;
        Ok(taken.map(|(env, body)| {
            let len = match &body {
                Unexpected::Eager(d) => d.len(),
                Unexpected::Rts(rts) => rts.len as usize,
            };
            let status = RawStatus {
                source: self.local_source(env.source),
                tag: env.tag,
                len,
                message_len: len,
                cancelled: false,
                fault: Fault::None,
            };
            RawMessage {
                message: (env, body),
                status,
            }
        }))
    }

    /// Receives a message taken by [`Comm::raw_mprobe`] into `len` bytes at `buf`.
    ///
    /// # Safety
    /// `buf` must stay valid for writes of `len` bytes until the request is done.
    pub unsafe fn raw_mrecv(
        &self,
        message: RawMessage,
        buf: *mut u8,
        len: usize,
    ) -> Result<RawRequest, Error> {
        self.shared
            .engine
            .borrow_mut()
            .recv_message(message.message, buf, len)
            .map(RawRequest)
    }

    /// Receives a message taken by [`Comm::raw_mprobe`] at once when its bytes are already
    /// here (an eager message): no request to wait for. Gives the message back when it is
    /// not (a rendezvous), for [`Comm::raw_mrecv`].
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes for the duration of the call.
    pub unsafe fn raw_mrecv_now(
        &self,
        message: RawMessage,
        buf: *mut u8,
        len: usize,
    ) -> Result<RawStatus, RawMessage> {
        let RawMessage { message, status } = message;
        // SAFETY: the caller's promise.
        let taken = unsafe {
            self.shared
                .engine
                .borrow_mut()
                .recv_message_now(message, buf, len)
        };
        match taken {
            Ok(done) => Ok(self.raw_status(done)),
            Err(message) => Err(RawMessage { message, status }),
        }
    }

    /// This communicator's rank of world rank `world` (`usize::MAX` if it is not a member).
    fn local_source(&self, world: u32) -> usize {
        self.group
            .local_of
            .get(world as usize)
            .map_or(usize::MAX, |&r| r as usize)
    }

    /// A finished request's completion as this communicator reports it.
    fn raw_status(&self, c: Completion) -> RawStatus {
        RawStatus {
            source: self.local_source(c.source),
            ..RawStatus::of_world(c)
        }
    }

    /// Starts a send of `len` bytes at `buf` to `dest`.
    ///
    /// # Safety
    /// `buf` must stay valid and unchanged for `len` bytes until the request is done.
    pub unsafe fn raw_send(
        &self,
        buf: *const u8,
        len: usize,
        dest: usize,
        tag: i32,
        mode: SendMode,
    ) -> Result<RawRequest, Error> {
        self.post_send(self.context, buf, len, dest, tag, mode)
            .map(RawRequest)
    }

    /// Sends a small message at once if the transport takes it now (shared memory, nothing
    /// queued before it to that rank). `true` means it is sent and there is no request to
    /// track; `false` means nothing happened and the caller uses [`Comm::raw_send`].
    ///
    /// # Safety
    /// `buf` must be valid for reads of `len` bytes for the duration of the call.
    #[inline]
    pub unsafe fn raw_send_now(
        &self,
        buf: *const u8,
        len: usize,
        dest: usize,
        tag: i32,
    ) -> Result<bool, Error> {
        if tag < 0 {
            return Err(Error::InvalidTag(tag));
        }
        let dest = self.world_rank(dest)?;
        Ok(self
            .shared
            .engine
            .borrow_mut()
            .send_eager_now(self.context, dest, tag, buf, len))
    }

    /// Reserves room for an eager message to `dest` straight in its shared-memory ring, to be
    /// written in place and sent by [`Comm::raw_publish`]: up to `want` bytes, at least `min`
    /// (else `None`, as when `dest` is not on this host's shared memory, something is queued to
    /// it or its ring lacks the room now; the caller then sends as usual). The bytes are
    /// contiguous, so the receiver can read them in place.
    ///
    /// The message is ordered among the messages to `dest` at this call: sends to `dest`
    /// started before it is published or abandoned wait behind it (they are queued, not
    /// failed), so a reservation must not be held across a wait for one of them. Dropping the
    /// reservation abandons it.
    pub fn raw_reserve(
        &self,
        dest: usize,
        want: usize,
        min: usize,
    ) -> Result<Option<RawReservation>, Error> {
        let world = self.world_rank(dest)?;
        let got = self
            .shared
            .engine
            .borrow_mut()
            .reserve_eager(world, want, min);
        Ok(got.map(|(at, len)| RawReservation {
            comm: self.clone(),
            dest: world,
            at,
            len,
            open: true,
        }))
    }

    /// Sends the first `len` bytes of `reservation` as one eager message with `tag` on this
    /// communicator, as a [`Comm::raw_send`] of them would have (the receiver cannot tell);
    /// there is no request: the bytes are in the peer's ring.
    pub fn raw_publish(
        &self,
        reservation: RawReservation,
        len: usize,
        tag: i32,
    ) -> Result<(), Error> {
        if tag < 0 {
            return Err(Error::InvalidTag(tag));
        }
        if len > reservation.len {
            return Err(Error::BufferTooSmall {
                what: "the ring reservation".into(),
                needed: len,
                got: reservation.len,
            });
        }
        let dest = reservation.dest;
        let published = self
            .shared
            .engine
            .borrow_mut()
            .publish_eager(self.context, dest, tag, len);
        // Published, or (were the engine to refuse) abandoned by the drop: settled either way.
        let mut reservation = reservation;
        reservation.open = !published;
        if published {
            Ok(())
        } else {
            Err(Error::Transport(format!(
                "the ring reservation to rank {dest} was lost (internal error)"
            )))
        }
    }

    /// Gives a reservation back unsent (as dropping it does).
    pub fn raw_abandon(&self, reservation: RawReservation) {
        drop(reservation);
    }

    /// Posts a receive into `len` bytes at `buf`.
    ///
    /// # Safety
    /// `buf` must stay valid for writes of `len` bytes until the request is done.
    #[inline]
    pub unsafe fn raw_recv(
        &self,
        buf: *mut u8,
        len: usize,
        source: Source,
        tag: i32,
    ) -> Result<RawRequest, Error> {
        self.post_recv(self.context, buf, len, source, tag)
            .map(RawRequest)
    }

    /// Posts a receive from `source` into `len` bytes at `buf` whose eager payload, when it
    /// comes whole through shared memory, may stay where it arrived (the peer's ring) instead
    /// of being copied: once done, [`Comm::raw_in_place`] says where it is. Later messages from
    /// `source` wait behind it, so the caller must [`Comm::raw_release`] the request (done or
    /// cancelled) before it waits for any of them. For exchanges that read what arrives once,
    /// such as BSP supersteps.
    ///
    /// # Safety
    /// As [`Comm::raw_recv`].
    pub unsafe fn raw_recv_in_place(
        &self,
        buf: *mut u8,
        len: usize,
        source: usize,
        tag: i32,
    ) -> Result<RawRequest, Error> {
        let tag = Comm::tag_pattern(tag)?;
        let source = self.world_rank(source)?;
        self.shared
            .engine
            .borrow_mut()
            .irecv_in_place(self.context, source, tag, buf, len)
            .map(RawRequest)
    }

    /// Where a finished [`Comm::raw_recv_in_place`] left its payload, if it stayed in place
    /// (else it is in the receive's buffer). The bytes stay valid and unchanged until
    /// [`Comm::raw_release`] of the request.
    pub fn raw_in_place(&self, request: RawRequest) -> Option<(*const u8, usize)> {
        self.shared.engine.borrow_mut().in_place(request.0)
    }

    /// Ends a [`Comm::raw_recv_in_place`] request, whether or not it was taken: the memory
    /// its payload held is reused and the source's later messages are received again.
    pub fn raw_release(&self, request: RawRequest) {
        self.shared.engine.borrow_mut().release_in_place(request.0);
    }

    /// Starts `schedule` (from [`Comm::planned`], or a schedule of the binding's own checked
    /// by [`Planned::check`](crate::Planned::check)) on `send_len` bytes at
    /// `send` and `recv_len` bytes at `recv`; `reduce` combines whole elements for the
    /// reductions. Planning and starting are apart so a binding can plan while it holds its own
    /// state and start after releasing it: a reduction may call back into the binding.
    ///
    /// # Safety
    /// The buffers must stay valid (and `send` unchanged) until the request is done.
    pub unsafe fn raw_collective(
        &self,
        schedule: crate::Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        reduce: Option<Reducer>,
    ) -> Result<RawRequest, Error> {
        self.launch(schedule, send, recv, reduce).map(RawRequest)
    }

    /// [`Comm::raw_collective`] run to its end: returns once the call is done.
    ///
    /// # Safety
    /// The buffers must stay valid (and `send` unchanged) until the call returns.
    #[inline]
    pub unsafe fn raw_collective_wait(
        &self,
        schedule: &crate::Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        reduce: Option<&Reducer>,
    ) -> Result<(), Error> {
        self.launch_and_wait(schedule, send, recv, reduce)
    }

    /// Whether `request` has finished (no progress is made).
    #[inline]
    pub fn raw_done(&self, request: RawRequest) -> bool {
        self.shared.engine.borrow().proto.is_done(request.0)
    }

    /// Takes the outcome of a finished request and forgets it; `None` if it is still running.
    pub fn raw_take(&self, request: RawRequest) -> Option<RawStatus> {
        let c = self.shared.engine.borrow_mut().take(request.0)?;
        Some(self.raw_status(c))
    }

    /// [`Comm::raw_take`] of a request started on a communicator whose ranks are the world's
    /// ([`Comm::ranks_are_world`]), through any communicator of the same world: the source is
    /// the sender's world rank, which is its rank there.
    #[inline]
    pub fn raw_take_world(&self, request: RawRequest) -> Option<RawStatus> {
        let c = self.shared.engine.borrow_mut().take(request.0)?;
        Some(RawStatus::of_world(c))
    }

    /// The outcome of a finished request of a communicator whose ranks are the world's, left in
    /// place (a later [`Comm::raw_take_world`] reports it again); `None` while it runs or when
    /// `request` names no request.
    pub fn raw_peek_world(&self, request: RawRequest) -> Option<RawStatus> {
        let c = self.shared.engine.borrow().proto.finished(request.0)?;
        Some(RawStatus::of_world(c))
    }

    /// Whether `request` names a request that has not been taken yet (running or finished).
    #[inline]
    pub fn raw_is_live(&self, request: RawRequest) -> bool {
        self.shared.engine.borrow().proto.is_live(request.0)
    }

    /// Withdraws a receive that has not matched yet (it then finishes as cancelled).
    pub fn raw_cancel(&self, request: RawRequest) {
        self.shared.engine.borrow_mut().cancel(request.0);
    }

    /// One pass of the progress engine; whether anything moved.
    pub fn progress(&self) -> Result<bool, Error> {
        self.shared.progress()
    }

    /// Drives progress, backing off from spinning to sleeping, until `done` holds; `done` is
    /// asked with a predicate that says whether a request has finished.
    pub fn wait_until(
        &self,
        mut done: impl FnMut(&dyn Fn(RawRequest) -> bool) -> bool,
    ) -> Result<(), Error> {
        self.shared
            .wait_until(|p| done(&|r: RawRequest| p.is_done(r.0)))
    }

    /// Makes this communicator's point-to-point context an active-message context: from now
    /// on every message arriving on it is handed to `handler` inside the engine's progress (in
    /// whatever call is driving it, a barrier or a wait on another communicator included), in
    /// order per sender, instead of waiting for a receive. `handler` gets the sender's rank in
    /// this communicator, the tag and the payload, and pushes replies as (rank, tag, bytes); it
    /// must not call into ferry (the engine is borrowed while it runs). Messages on the context
    /// must be sent with [`Comm::send_active`]. Replaces an earlier handler.
    pub fn set_active_handler(
        &self,
        mut handler: impl FnMut(usize, i32, &[u8], &mut Vec<(usize, i32, Vec<u8>)>) + 'static,
    ) {
        let group = self.group.clone();
        let mut local = Vec::new();
        let wrapped = move |source: u32, tag: i32, data: &[u8], out: &mut Vec<ActiveReply>| {
            let Some(&from) = group.local_of.get(source as usize) else {
                return;
            };
            if from == u32::MAX {
                return; // not a member: no one of ours sent it
            }
            handler(from as usize, tag, data, &mut local);
            out.extend(local.drain(..).filter_map(|(rank, tag, data)| {
                group
                    .world_of
                    .get(rank)
                    .map(|&dest| ActiveReply { dest, tag, data })
            }));
        };
        self.shared
            .engine
            .borrow_mut()
            .set_active(self.context, Box::new(wrapped));
    }

    /// Ends what [`Comm::set_active_handler`] started; later messages queue for receives again.
    pub fn clear_active_handler(&self) {
        // Dropped after the engine's borrow ends: the handler may own objects whose drop
        // reaches back into ferry.
        let old = self.shared.engine.borrow_mut().clear_active(self.context);
        drop(old);
    }

    /// Largest message [`Comm::send_active`] takes to `dest`.
    pub fn active_limit(&self, dest: usize) -> Result<usize, Error> {
        let world = self.world_rank_of(dest)? as u32;
        Ok(self.shared.engine.borrow().active_limit(world))
    }

    /// Queues `data` (owned: no request, nothing to wait for) as one message to `dest` on this
    /// communicator's context, for its active-message handler; the bytes are on their way once
    /// progress has written them. At most [`Comm::active_limit`] bytes.
    pub fn send_active(&self, dest: usize, tag: i32, data: Vec<u8>) -> Result<(), Error> {
        let world = self.world_rank_of(dest)? as u32;
        self.shared
            .engine
            .borrow_mut()
            .send_owned(self.context, world, tag, data)
    }

    /// World ranks of the members, in communicator rank order.
    pub fn world_ranks(&self) -> &[u32] {
        &self.group.world_of
    }

    /// The communicator's message-space id (equal ids mean the same communicator).
    pub fn context_id(&self) -> u32 {
        self.context
    }
}
