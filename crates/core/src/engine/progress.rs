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
            let mut next = 0;
            while let Some(peer) = shm.local_peer(next) {
                next += 1;
                if self.links[peer].held.is_some() {
                    continue; // read in place; nothing behind it moves until it is released
                }
                // Bounded per peer so one busy sender cannot starve the others.
                for _ in 0..64 {
                    let Some(record) = shm.peek(peer) else { break };
                    let frame = Frame::decode(&record.header, u64::MAX)
                        .map_err(|e| protocol_error(peer as u32, e))?;
                    let len = frame.payload_len() as usize;
                    // The commonest frame first: an eager message from a known peer, not over
                    // rails, while no receive reads in place. begin_frame would match it as
                    // below; one that a posted receive takes is stored and done here, without
                    // its general match and end_frame's.
                    let plain_eager = match frame {
                        Frame::Eager { context, tag, .. }
                            if self.in_place.is_empty()
                                && peer < self.proto.peers.len()
                                && !self.proto.acknowledged(peer as u32) =>
                        {
                            Some(Envelope {
                                context,
                                source: peer as u32,
                                tag,
                            })
                        }
                        _ => None,
                    };
                    let mut incoming = match plain_eager {
                        Some(env) => match self.proto.take_posted_eager(env, false) {
                            Some((id, buf, cap)) => {
                                let n = len.min(cap);
                                if n > 0 {
                                    record.copy_payload(0, buf, n);
                                }
                                shm.pop(peer, len);
                                self.proto.eager_matched_stored(id, env, len as u64, n);
                                progressed = true;
                                continue;
                            }
                            None => self.proto.keep_eager(env, len as u64),
                        },
                        None => self.proto.begin_frame(peer as u32, &frame)?,
                    };
                    let n = incoming.direct_room(0).min(len);
                    if !self.in_place.is_empty() && n == len {
                        // A whole eager payload for a receive that reads it in place: it stays
                        // in the ring (no copy) if it does not wrap around the ring's end.
                        let keep = incoming
                            .matched()
                            .and_then(|id| self.in_place.iter_mut().find(|(r, _)| *r == id));
                        let held = u32::try_from(len).ok();
                        if let (Some(entry), Some(held)) = (keep, held) {
                            if record.payload_in_place(len).is_some() {
                                entry.1 = Some(peer as u32);
                                self.links[peer].held = Some(held);
                                shm.publish_head(peer);
                                self.proto.end_frame(peer as u32, &frame, incoming)?;
                                progressed = true;
                                break;
                            }
                        }
                    }
                    if n > 0 {
                        record.copy_payload(0, incoming.ptr(), n);
                    }
                    incoming.cap = n;
                    shm.pop(peer, len);
                    self.proto.end_frame(peer as u32, &frame, incoming)?;
                    progressed = true;
                }
            }
        }
        if self.net.fabric.is_some() && poll_tcp {
            progressed |= self.fabric_pass()?;
        }
        if let Some(tcp) = self.net.tcp.as_mut().filter(|_| poll_tcp) {
            self.net.looks_without_tcp = 0;
            progressed |= tcp
                .poll_input(&mut self.proto, Some(Duration::ZERO))
                .map_err(|e| self.proto.with_pid(e))?;
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
                Route::Shm => match self.net.shm.as_mut() {
                    Some(shm) => shm.try_push(p, &frame.header, frame.payload, frame.len),
                    None => false,
                },
                Route::Tcp => match self.net.tcp.as_mut() {
                    Some(tcp) => tcp.try_write(p, 0, frame)?,
                    None => false,
                },
                Route::Fabric => match self.net.fabric.as_mut() {
                    Some(fabric) => fabric.try_write(p, frame)?,
                    None => false,
                },
                Route::Loopback => true,
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
