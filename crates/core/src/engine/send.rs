//! Starting sends: straight into a shared-memory ring when nothing waits, else queued.

use super::*;

/// How a raw send completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// As soon as the buffer may be reused (eager for small messages).
    Standard,
    /// Only once the receiver has matched it (always rendezvous).
    Synchronous,
    /// As an eager message whatever the transport's eager limit, up to what one frame carries
    /// ([`Comm::active_limit`](crate::Comm::active_limit); longer ones go as `Standard`): the send completes once the
    /// bytes are copied out, never waiting for the receiver to match. For all-to-all exchanges
    /// (BSP supersteps), where both sides copy anyway and a handshake would only add latency.
    Eager,
}

impl Engine {
    /// Writes a small message straight into the peer's shared-memory ring when nothing waits
    /// before it there. `true` means it went out: the buffer is free again and there is no
    /// request to track (collective steps try this before [`Engine::isend`]).
    #[inline]
    pub(crate) fn send_eager_now(
        &mut self,
        context: u32,
        dest: u32,
        tag: i32,
        buf: *const u8,
        len: usize,
    ) -> bool {
        let p = dest as usize;
        let peer = &self.proto.peers[p];
        if peer.route != Route::Shm || len > self.shm_eager_limit || !peer.outq.is_empty() {
            return false;
        }
        // A failed peer or a revoked communicator: `isend` ends the send with the fault.
        if self.proto.may_doom() && (peer.failed || self.is_revoked(context)) {
            return false;
        }
        let Some(shm) = self.net.shm.as_mut() else {
            return false;
        };
        let header = Frame::eager_header(context, tag, len as u64);
        let buf = non_null_if_empty(buf as *mut u8, len) as *const u8;
        let pushed = shm.try_push(p, &header, buf, len);
        if pushed {
            self.proto.counters.sent(len, true);
        }
        pushed
    }

    /// Reserves, in the shared-memory ring to world rank `dest`, the payload of an eager
    /// message written later in place: up to `want` bytes (at least `min`), when `dest` is on
    /// shared memory, nothing is queued to it and the ring has the room now; else `None`.
    /// The message takes its place in the order of messages to `dest` now: sends started
    /// before [`Engine::publish_eager`] or [`Engine::abandon_eager`] queue behind it.
    pub(crate) fn reserve_eager(
        &mut self,
        dest: u32,
        want: usize,
        min: usize,
    ) -> Option<(*mut u8, usize)> {
        let p = dest as usize;
        if !self
            .proto
            .peers
            .get(p)
            .is_some_and(|peer| peer.route == Route::Shm && peer.outq.is_empty())
        {
            return None;
        }
        let want = want.min(self.active_limit(dest));
        self.net.shm.as_mut()?.reserve(p, want, min)
    }

    /// Makes the message reserved to `dest` visible as an eager message of `len` bytes on
    /// `context` with `tag`, then writes what queued behind it. False if nothing was reserved
    /// or `len` exceeds the reservation (it then stays reserved).
    pub(crate) fn publish_eager(&mut self, context: u32, dest: u32, tag: i32, len: usize) -> bool {
        let header = Frame::Eager {
            context,
            tag,
            len: len as u64,
        }
        .to_bytes();
        let Some(shm) = self.net.shm.as_mut() else {
            return false;
        };
        if !shm.publish(dest as usize, &header, len) {
            return false;
        }
        self.proto.counters.sent(len, true);
        // A shared-memory flush cannot fail; what it cannot write now, progress writes later.
        let _ = self.flush_peer(dest);
        true
    }

    /// Gives back a reservation to `dest` unpublished; what queued behind it flows again.
    pub(crate) fn abandon_eager(&mut self, dest: u32) {
        if let Some(shm) = self.net.shm.as_mut() {
            shm.abandon(dest as usize);
            let _ = self.flush_peer(dest);
        }
    }

    /// Starts a send of `len` bytes at `buf` to world rank `dest`. A synchronous send always
    /// takes the rendezvous path, so it completes only once the receiver has matched it; an
    /// eager one goes eagerly if one frame can carry it.
    pub(crate) fn isend(
        &mut self,
        context: u32,
        dest: u32,
        tag: i32,
        buf: *const u8,
        len: usize,
        mode: SendMode,
    ) -> Result<ReqId, Error> {
        let route = self.proto.peers[dest as usize].route;
        if self.proto.may_doom() {
            if let Some(id) = self.doomed_send(context, dest) {
                return Ok(id);
            }
        }
        // An empty message may come with a null buffer (MPI_Send(NULL, 0, …)); slices are built
        // from the pointer, which must then not be null.
        let buf = non_null_if_empty(buf as *mut u8, len) as *const u8;
        let eager = match mode {
            SendMode::Standard => len <= self.eager_limit(route),
            SendMode::Synchronous => false,
            SendMode::Eager => len <= self.active_limit(dest),
        };
        self.proto.counters.sent(len, eager);
        if eager {
            let frame = Frame::Eager {
                context,
                tag,
                len: len as u64,
            };
            if route == Route::Loopback {
                // SAFETY: the caller lends `buf` for `len` bytes for the duration of the call.
                let data = unsafe { std::slice::from_raw_parts(buf, len) }.to_vec();
                self.proto.loopback.push_back((frame, data));
                return Ok(self.proto.requests.insert(ReqState::Done(Proto::sent(len))));
            }
            let id = self.proto.requests.insert(ReqState::SendEager);
            self.proto.push_out(
                dest,
                Out::Frame(OutFrame {
                    header: frame.to_bytes(),
                    payload: buf,
                    len,
                    sent: 0,
                    complete: Some(id),
                    owned: None,
                }),
            );
            self.flush_peer(dest)?;
            return Ok(id);
        }
        if crate::events::listening(crate::events::EventType::RendezvousStart) {
            use crate::events::RendezvousRoute as Way;
            let way = match route {
                Route::Loopback => Way::Itself,
                Route::Shm if self.proto.cma => Way::ShmCma,
                Route::Shm => Way::ShmCopy,
                Route::Tcp => Way::Tcp,
                Route::Fabric => Way::FabricRead,
            };
            crate::events::rendezvous(dest, tag, len, way);
        }
        let id = self.proto.requests.insert(ReqState::SendEager);
        let mut machine = RendezvousSend::new(id, len as u64);
        if self.proto.acknowledged(dest) {
            machine = machine.acknowledged();
        }
        let pull_ok = route == Route::Loopback || (route == Route::Shm && self.proto.cma);
        let rts = machine.rts(context, tag, if pull_ok { buf as u64 } else { 0 });
        if let Some(state) = self.proto.requests.get_mut(id) {
            *state = ReqState::SendRendezvous { machine, buf, dest };
            self.proto.peers[dest as usize].large_out += 1;
        }
        if route == Route::Fabric {
            // The receiver reads it: registered once it is next in line (keeping its order).
            self.proto.push_out(dest, Out::Expose { id, context, tag });
            self.flush_peer(dest)?;
            return Ok(id);
        }
        if route == Route::Loopback {
            self.proto.loopback.push_back((rts, Vec::new()));
        } else {
            self.proto
                .push_out(dest, Out::Frame(OutFrame::control(rts)));
            self.flush_peer(dest)?;
        }
        Ok(id)
    }
}
