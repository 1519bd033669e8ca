//! Progress passes: reading every transport, and writing what is queued per peer.

use super::*;

impl Engine {
    // Kept out of line so that `progress`'s idle look needs no large stack frame.
    #[inline(never)]
    pub(super) fn progress_pass(
        &mut self,
        hook: &mut impl Hook,
        poll_tcp: bool,
    ) -> Result<bool, Error> {
        let mut progressed = false;
        while let Some((frame, data)) = self.proto.loopback.pop_front() {
            progressed = true;
            let me = self.proto.me;
            let mut incoming = self.proto.begin_frame(me, &frame)?;
            incoming.store(0, &data);
            self.proto.end_frame(me, &frame, incoming)?;
        }
        if let Some(shm) = self.net.shm.as_mut() {
            let mut sink = RingSink {
                proto: &mut self.proto,
                in_place: &mut self.in_place,
                links: &mut self.links,
            };
            progressed |= shm.poll_input(&mut sink)?;
        }
        if self.net.fabric.is_some() {
            progressed |= match self.fabric_pass() {
                // A fault-tolerant rank goes on without a lost peer (see `engine/failure.rs`).
                Err(Error::PeerLost { rank, .. }) if self.proto.fault_tolerant => {
                    self.peer_failed(rank as u32);
                    true
                }
                other => other?,
            };
        }
        if let Some(tcp) = self.net.tcp.as_mut().filter(|_| poll_tcp) {
            self.net.looks_without_tcp = 0;
            progressed |=
                Transport::poll_input(tcp, &mut self.proto).map_err(|e| self.proto.with_pid(e))?;
            self.after_tcp_input();
        }
        // Checked here, not only inside: an idle pass should cost a few loads, not calls.
        if !self.proto.active_out.is_empty() {
            progressed |= self.send_active_replies()?;
        }
        if !self.proto.busy.is_empty() {
            progressed |= self.flush()?;
        }
        if !self.proto.shared_pulls.is_empty() {
            // The SHARE frames are out: the senders write their halves while we read ours.
            self.proto.run_shared_pulls()?;
            progressed |= self.flush()?;
        }
        if self.proto.rails > 1 {
            progressed |= self.rails_failed()?;
        }
        if self.faults.is_some() {
            progressed |= self.look_for_failures(poll_tcp)?;
        }
        if hook.wants_pass(self.proto.completions) {
            progressed |= hook.advance(self)?;
        }
        Ok(progressed)
    }

    pub(super) fn flush(&mut self) -> Result<bool, Error> {
        let mut progressed = false;
        let mut i = 0;
        while i < self.proto.busy.len() {
            let peer = self.proto.busy[i];
            progressed |= self.flush_peer(peer)?;
            let p = peer as usize;
            if self.proto.peers[p].outq.is_empty()
                && (self.links.get(p).and_then(|l| l.lanes.as_deref())).is_none_or(Lanes::idle)
            {
                self.proto.peers[p].queued = false;
                self.proto.busy.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(progressed)
    }

    /// Writes queued frames to `peer` in order until its channel is full.
    pub(super) fn flush_peer(&mut self, peer: u32) -> Result<bool, Error> {
        let p = peer as usize;
        let route = self.proto.peers[p].route;
        if route == Route::Tcp && self.links.get(p).is_some_and(|l| l.lanes.is_some()) {
            return self.flush_rails(peer);
        }
        let chunk = if route == Route::Shm {
            self.shm_chunk
        } else {
            self.tcp_chunk
        };
        let mut progressed = false;
        loop {
            let frame = match self.proto.peers[p].outq.front_mut() {
                None => break,
                Some(Out::Stream(id)) => {
                    let id = *id;
                    match self.proto.next_chunk(id, chunk) {
                        Some((f, _)) => self.proto.peers[p].outq.push_front(Out::Frame(f)),
                        None => {
                            self.proto.peers[p].outq.pop_front();
                        }
                    }
                    continue;
                }
                // Without the transport (yet), it waits as a frame would.
                Some(Out::Expose { .. }) if self.net.fabric.is_none() => break,
                Some(&mut Out::Expose { id, context, tag }) => {
                    let frame = self.expose(id, (context, tag))?;
                    self.proto.peers[p].outq.pop_front();
                    if let Some(frame) = frame {
                        self.proto.peers[p].outq.push_front(Out::Frame(frame));
                    }
                    continue;
                }
                Some(Out::Frame(f)) => f,
            };
            let written = match route {
                Route::Shm => try_write(self.net.shm.as_mut(), p, frame),
                Route::Tcp => try_write(self.net.tcp.as_mut(), p, frame),
                Route::Fabric => try_write(self.net.fabric.as_mut(), p, frame),
                Route::Loopback => Ok(true),
            };
            let written = match written {
                Err(Error::PeerLost { .. }) if self.proto.fault_tolerant => {
                    self.peer_failed(peer);
                    return Ok(true);
                }
                other => other?,
            };
            if !written {
                break;
            }
            progressed = true;
            if let Some(Out::Frame(frame)) = self.proto.peers[p].outq.pop_front() {
                self.proto.frame_written(&frame);
            }
        }
        Ok(progressed)
    }
}

/// Writes `frame` to `peer` through `transport`, if this rank has it (a frame for a transport
/// not opened yet waits).
#[inline]
fn try_write(
    transport: Option<&mut impl Transport>,
    peer: usize,
    frame: &mut OutFrame,
) -> Result<bool, Error> {
    match transport {
        Some(t) => t.try_write(peer, frame),
        None => Ok(false),
    }
}
