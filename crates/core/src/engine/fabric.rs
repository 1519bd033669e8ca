//! Rendezvous over a fabric (RDMA through libfabric): the sender registers its buffer when the
//! send reaches the head of the peer's queue and announces it with RTS_READ (address and key);
//! the receiver reads straight into the user's buffer and answers FIN, which frees the
//! sender's registration. The protocol half only lists the work (reads to start, registrations
//! to drop); the engine hands it to the fabric transport, which calls back
//! [`Proto::read_done`] when a read completes.

use super::*;

/// Fabric work the protocol found for the transport.
#[derive(Default)]
pub(crate) struct FabricWork {
    /// Reads to start.
    pub(crate) reads: Vec<FabricRead>,
    /// Sends whose receiver has read them (FIN): their registrations can go.
    pub(crate) read_by_peer: Vec<ReqId>,
}

impl FabricWork {
    pub(super) fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.read_by_peer.is_empty()
    }
}

impl Proto {
    /// The RTS_READ of rendezvous send `id` on `context` with `tag`, whose buffer the fabric
    /// exposes at `remote_addr` under `key`; the key travels as its payload.
    pub(super) fn rts_read_frame(
        &self,
        id: ReqId,
        (context, tag): (u32, i32),
        remote_addr: u64,
        key: u64,
    ) -> Option<OutFrame> {
        let Some(ReqState::SendRendezvous { machine, .. }) = self.requests.get(id) else {
            return None;
        };
        let header = machine.rts_read(context, tag, remote_addr).to_bytes();
        let key: Box<[u8]> = Box::new(key.to_le_bytes());
        Some(OutFrame {
            header,
            payload: key.as_ptr(),
            len: key.len(),
            sent: 0,
            complete: None,
            owned: Some(key),
        })
    }

    /// The buffer and length of rendezvous send `id`, as the fabric registers it (the pair
    /// tests' stand-in fabric reads it).
    #[cfg(test)]
    pub(crate) fn send_buffer(&self, id: ReqId) -> Option<(*const u8, usize)> {
        self.send_exposure(id).map(|(buf, len, _)| (buf, len))
    }

    /// [`Proto::send_buffer`] and the rank the send goes to, whose loss drops the
    /// registration.
    fn send_exposure(&self, id: ReqId) -> Option<(*const u8, usize, u32)> {
        match self.requests.get(id) {
            Some(ReqState::SendRendezvous { machine, buf, dest }) => {
                Some((*buf, machine.len() as usize, *dest))
            }
            _ => None,
        }
    }

    /// The fabric read of receive `id` from `peer` completed: the receive is done, and FIN
    /// tells the sender its buffer is free.
    pub(crate) fn read_done(&mut self, peer: u32, id: ReqId) -> Result<(), Error> {
        let Some(ReqState::RecvRendezvous {
            machine,
            env,
            message_len,
            ..
        }) = self.requests.get_mut(id)
        else {
            return Err(protocol_error(
                peer,
                format!("a fabric read completed for unknown receive {id:#x}"),
            ));
        };
        let done = super::proto::received(machine, env, *message_len);
        let fin = machine.fin();
        self.push_out(peer, Out::Frame(OutFrame::control(fin)));
        self.complete(id, done);
        Ok(())
    }
}

impl Engine {
    /// Gives this rank a fabric (at start, once its peers' addresses are known). TCP's epoll
    /// watches its rails' completion queues, so that a sleeping wait wakes for it.
    pub(crate) fn add_fabric(&mut self, fabric: FabricTransport) -> Result<(), Error> {
        if let Some(tcp) = self.net.tcp.as_mut() {
            // Every rail's: a peer's reads of this rank's memory move only while the rail
            // they use is polled.
            for fd in fabric.wake_fds() {
                tcp.watch_fd(fd)?;
            }
        }
        self.net.fabric = Some(fabric);
        Ok(())
    }

    /// Registers the buffer of rendezvous send `id` for its receiver to read; the
    /// RTS_READ that announces it (`None` if the send is gone).
    pub(super) fn expose(&mut self, id: ReqId, on: (u32, i32)) -> Result<Option<OutFrame>, Error> {
        let Some((buf, len, dest)) = self.proto.send_exposure(id) else {
            return Ok(None);
        };
        let Some(fabric) = self.net.fabric.as_mut() else {
            return Ok(None);
        };
        let (addr, key) = fabric.expose((id, dest), buf, len)?;
        Ok(self.proto.rts_read_frame(id, on, addr, key))
    }

    /// Reads the fabric's completions, starts the reads the protocol asked for and drops the
    /// registrations the peers are done with. Whether anything moved.
    pub(super) fn fabric_pass(&mut self) -> Result<bool, Error> {
        let Some(fabric) = self.net.fabric.as_mut() else {
            return Ok(false);
        };
        let mut moved = fabric.poll_input(&mut self.proto)?;
        if !self.proto.fabric.is_empty() {
            for read in self.proto.fabric.reads.drain(..) {
                fabric.start_read(read)?;
            }
            for id in self.proto.fabric.read_by_peer.drain(..) {
                fabric.release(id);
            }
            moved |= fabric.poll_input(&mut self.proto)?;
        }
        Ok(moved)
    }
}
