//! Active messages: handlers run on arrival, and the owned messages they reply with.

use super::*;

/// An active-message handler: called by the engine, inside its own progress, for every whole
/// message that arrives on the context it is registered for (instead of queueing it for a
/// receive). It gets the sender's world rank, the tag and the payload, and may push replies;
/// it must not call back into the engine (the engine is borrowed while it runs).
pub(crate) type ActiveFn = Box<dyn FnMut(u32, i32, &[u8], &mut Vec<ActiveReply>)>;

/// A reply an active-message handler queues: an eager message with an owned payload, sent on
/// the handler's context once the frame being read is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveReply {
    /// World rank of the destination.
    pub dest: u32,
    /// Message tag.
    pub tag: i32,
    /// The payload; at most the engine's active limit for `dest`.
    pub data: Vec<u8>,
}

impl Engine {
    /// Registers `handler` for every message arriving on `context` from now on (replacing any
    /// handler it had). Messages already queued on it stay where they are.
    pub(crate) fn set_active(&mut self, context: u32, handler: ActiveFn) {
        self.proto.active.retain(|(c, _)| *c != context);
        self.proto.active.push((context, handler));
    }

    /// Removes the handler of `context`, if any, and returns it.
    pub(crate) fn clear_active(&mut self, context: u32) -> Option<ActiveFn> {
        let i = self.proto.active.iter().position(|(c, _)| *c == context)?;
        Some(self.proto.active.remove(i).1)
    }

    /// Largest payload of an owned message ([`Engine::send_owned`]) to world rank `dest`: what
    /// one eager frame on its route may carry.
    pub(crate) fn active_limit(&self, dest: u32) -> usize {
        let route = self.proto.peers.get(dest as usize).map(|p| p.route);
        route.map_or(0, |route| self.frame_limit(route))
    }

    /// What one eager frame on `route` may carry.
    pub(crate) fn frame_limit(&self, route: Route) -> usize {
        match route {
            Route::Loopback => 1 << 20,
            Route::Shm => self.shm_chunk.max(self.shm_eager_limit),
            Route::Tcp => self.tcp_chunk.max(self.tcp_eager_limit),
            Route::Fabric => (self.net.fabric.as_ref()).map_or(0, FabricTransport::frame_limit),
        }
    }

    /// Queues `data` as one eager message to world rank `dest`; the engine owns the bytes, so
    /// there is no request to complete. Fails if it exceeds [`Engine::active_limit`].
    pub(crate) fn send_owned(
        &mut self,
        context: u32,
        dest: u32,
        tag: i32,
        data: Vec<u8>,
    ) -> Result<(), Error> {
        let size = self.proto.peer_count();
        if dest as usize >= size {
            return Err(Error::RankOutOfRange {
                rank: dest as usize,
                size,
            });
        }
        if self.proto.failed(dest) {
            // Nobody reads it (fault-tolerant jobs send notices to peers that may be dead).
            return Ok(());
        }
        let limit = self.active_limit(dest);
        if data.len() > limit {
            return Err(Error::BufferTooSmall {
                what: format!("an eager frame to rank {dest}"),
                needed: data.len(),
                got: limit,
            });
        }
        let frame = Frame::Eager {
            context,
            tag,
            len: data.len() as u64,
        };
        self.proto.counters.sent(data.len(), true);
        if self.proto.peers[dest as usize].route == Route::Loopback {
            self.proto.loopback.push_back((frame, data));
            return Ok(());
        }
        let bytes: Box<[u8]> = data.into_boxed_slice();
        let payload = non_null_if_empty(bytes.as_ptr() as *mut u8, bytes.len()) as *const u8;
        self.proto.push_out(
            dest,
            Out::Frame(OutFrame {
                header: frame.to_bytes(),
                payload,
                len: bytes.len(),
                sent: 0,
                complete: None,
                owned: Some(bytes),
            }),
        );
        self.flush_peer(dest).map(|_| ())
    }

    /// Sends the replies the active-message handlers queued.
    pub(super) fn send_active_replies(&mut self) -> Result<bool, Error> {
        if self.proto.active_out.is_empty() {
            return Ok(false);
        }
        for (context, reply) in std::mem::take(&mut self.proto.active_out) {
            self.send_owned(context, reply.dest, reply.tag, reply.data)?;
        }
        Ok(true)
    }
}
