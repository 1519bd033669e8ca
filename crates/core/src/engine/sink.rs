//! The protocol half's input: what each arriving frame does ([`FrameSink`] for [`Proto`]),
//! called by the transports with the frame's header first and its payload after.

use super::*;

impl Proto {
    /// The posted receive an eager message with envelope `env` goes to, taken off the posted
    /// queue: its request, buffer and capacity. `None` when the message is to be kept instead:
    /// no receive matches, its context is an active-message one, or it came over rails (`rails`:
    /// an eager frame cut off by a failing rail comes again on another, so it is matched only
    /// once it is whole).
    #[inline]
    pub(super) fn take_posted_eager(
        &mut self,
        env: Envelope,
        rails: bool,
    ) -> Option<(ReqId, *mut u8, usize)> {
        if rails || self.is_active(env.context) {
            return None;
        }
        let id = self.matcher.take_posted(&env)?;
        match self.requests.get(id) {
            Some(ReqState::RecvPosted { buf, cap }) => Some((id, *buf, *cap)),
            _ => None,
        }
    }

    /// Where the payload of an eager message of `len` bytes that no receive takes now goes: a
    /// buffer of its own, kept with the message.
    pub(super) fn keep_eager(&mut self, env: Envelope, len: u64) -> Incoming {
        let mut data = self.spare_kept.pop().unwrap_or_default();
        data.clear();
        data.resize(len as usize, 0);
        Incoming {
            ptr: data.as_mut_ptr(),
            cap: len as usize,
            arrival: Arrival::EagerKept(env, data),
        }
    }

    /// The payload of an eager message of `len` bytes matched to receive `id` is in its buffer
    /// (the first `stored` bytes of it, fewer when the buffer is shorter): the receive is done.
    #[inline]
    pub(super) fn eager_matched_stored(
        &mut self,
        id: ReqId,
        env: Envelope,
        len: u64,
        stored: usize,
    ) {
        self.counters.received(len);
        let len = len as usize;
        self.complete(
            id,
            Completion {
                source: env.source,
                tag: env.tag,
                len: len.min(stored),
                message_len: len,
                cancelled: false,
                fault: Fault::None,
            },
        );
    }
}

impl Proto {
    /// A large message from `peer` was announced (RTS or RTS_READ): a posted receive takes it
    /// now, or it waits among the unexpected ones.
    fn announced(
        &mut self,
        peer: u32,
        context: u32,
        tag: i32,
        rts: Announced,
    ) -> Result<(), Error> {
        if self.is_active(context) {
            return Err(protocol_error(
                peer,
                format!("rendezvous on active-message context {context}"),
            ));
        }
        let env = Envelope {
            context,
            source: peer,
            tag,
        };
        self.counters.received(rts.len);
        match self.matcher.take_posted(&env) {
            Some(id) => {
                if let Some(&ReqState::RecvPosted { buf, cap }) = self.requests.get(id) {
                    self.start_rendezvous_recv(id, env, rts, buf, cap);
                }
            }
            None => self.push_unexpected(env, Unexpected::Rts(rts)),
        }
        Ok(())
    }
}

impl FrameSink for Proto {
    fn read_done(&mut self, peer: u32, id: ReqId) -> Result<(), Error> {
        Proto::read_done(self, peer, id)
    }

    fn departed(&self, peer: u32) -> bool {
        self.peers.get(peer as usize).is_some_and(|p| p.departed)
    }

    fn survives_loss(&self) -> bool {
        self.fault_tolerant
    }

    fn take_drains(&mut self, peer: u32) -> Vec<(u16, u64)> {
        let mut taken = Vec::new();
        self.to_drain.retain(|&(p, rail, seq)| {
            let mine = p == peer;
            if mine {
                taken.push((rail, seq));
            }
            !mine
        });
        taken
    }

    fn drained(&mut self, peer: u32, seq: u64) {
        let p = &mut self.peers[peer as usize];
        p.skip = p.ordered_in.saturating_sub(seq);
    }

    fn begin_frame(&mut self, peer: u32, frame: &Frame) -> Result<Incoming, Error> {
        if peer as usize >= self.peers.len() {
            // A process of another world connected before we were told about it.
            self.grow(peer as usize + 1);
        }
        let rails = self.acknowledged(peer);
        if rails && self.peers[peer as usize].skip > 0 && frame.is_ordered() {
            return Ok(Incoming {
                ptr: std::ptr::null_mut(),
                cap: 0,
                arrival: Arrival::Discard,
            });
        }
        match *frame {
            Frame::Eager { context, tag, len } => {
                let env = Envelope {
                    context,
                    source: peer,
                    tag,
                };
                match self.take_posted_eager(env, rails) {
                    Some((id, buf, cap)) => Ok(Incoming {
                        ptr: buf,
                        cap,
                        arrival: Arrival::EagerMatched(id, env),
                    }),
                    None => Ok(self.keep_eager(env, len)),
                }
            }
            Frame::Data {
                recv_id,
                offset,
                len,
            } => match self.requests.get_mut(recv_id) {
                Some(ReqState::RecvRendezvous { machine, buf, .. }) => {
                    let (machine, buf) = (&*machine, *buf);
                    machine
                        .on_data(offset, len)
                        .map_err(|e| protocol_error(peer, e))?;
                    Ok(Incoming {
                        // SAFETY: on_data checked offset + len ≤ accepted ≤ buffer length.
                        ptr: unsafe { buf.add(offset as usize) },
                        cap: len as usize,
                        arrival: Arrival::Data(recv_id),
                    })
                }
                // Over rails, a chunk sent again after a rail failed may find its receive
                // already complete.
                _ if rails => Ok(Incoming {
                    ptr: std::ptr::null_mut(),
                    cap: 0,
                    arrival: Arrival::Discard,
                }),
                _ => Err(protocol_error(
                    peer,
                    format!("DATA for unknown receive {recv_id:#x}"),
                )),
            },
            Frame::RtsRead { .. } => Ok(Incoming::key()),
            _ => Ok(Incoming::control()),
        }
    }

    fn end_frame(&mut self, peer: u32, frame: &Frame, incoming: Incoming) -> Result<(), Error> {
        if frame.is_ordered() && self.acknowledged(peer) {
            let p = &mut self.peers[peer as usize];
            if matches!(incoming.arrival, Arrival::Discard) {
                p.skip = p.skip.saturating_sub(1);
                return Ok(());
            }
            p.ordered_in += 1;
        }
        match (incoming.arrival, *frame) {
            (Arrival::EagerMatched(id, env), Frame::Eager { len, .. }) => {
                self.eager_matched_stored(id, env, len, incoming.cap);
            }
            (Arrival::EagerKept(env, data), _) if self.is_active(env.context) => {
                self.counters.received(data.len() as u64);
                self.run_active(env, &data);
            }
            (Arrival::EagerKept(env, data), _) => {
                self.counters.received(data.len() as u64);
                // Over TCP a payload can take several reads, and a matching receive may have
                // been posted meanwhile: it gets the message, or it would wait forever.
                match self.matcher.take_posted(&env) {
                    Some(id) => self.deliver_kept(id, env, &data),
                    None => self.push_unexpected(env, Unexpected::Eager(data)),
                }
            }
            (Arrival::Data(id), Frame::Data { offset, len, .. }) => {
                self.stored(peer, id, offset, len);
            }
            (
                Arrival::Control,
                Frame::Written {
                    recv_id,
                    offset,
                    len,
                },
            ) => match self.requests.get(recv_id) {
                Some(ReqState::RecvRendezvous { machine, .. }) if machine.acknowledges() => {
                    machine
                        .on_data(offset, len)
                        .map_err(|e| protocol_error(peer, e))?;
                    self.stored(peer, recv_id, offset, len);
                }
                _ => {
                    return Err(protocol_error(
                        peer,
                        format!("WRITTEN for unknown receive {recv_id:#x}"),
                    ))
                }
            },
            (
                Arrival::Control,
                Frame::Share {
                    send_id,
                    recv_id,
                    dest_addr,
                },
            ) => self.write_share(peer, send_id, recv_id, dest_addr)?,
            (Arrival::Discard, _) => {}
            (
                Arrival::Control,
                Frame::Rts {
                    context,
                    tag,
                    len,
                    send_id,
                    source_addr,
                },
            ) => {
                let rts = Announced {
                    len,
                    send_id,
                    source_addr,
                    key: None,
                };
                self.announced(peer, context, tag, rts)?;
            }
            (
                Arrival::Key(key),
                Frame::RtsRead {
                    context,
                    tag,
                    len,
                    send_id,
                    remote_addr,
                },
            ) => {
                let rts = Announced {
                    len,
                    send_id,
                    source_addr: remote_addr,
                    key: Some(u64::from_le_bytes(*key)),
                };
                self.announced(peer, context, tag, rts)?;
            }
            (
                Arrival::Control,
                Frame::Cts {
                    send_id,
                    recv_id,
                    accept_len,
                },
            ) => match self.requests.get_mut(send_id) {
                Some(ReqState::SendRendezvous { machine, .. }) => {
                    machine
                        .on_cts(recv_id, accept_len)
                        .map_err(|e| protocol_error(peer, e))?;
                    if machine.is_done() {
                        self.complete(send_id, Proto::sent(0));
                    } else {
                        self.push_out(peer, Out::Stream(send_id));
                    }
                }
                _ => {
                    return Err(protocol_error(
                        peer,
                        format!("CTS for unknown send {send_id:#x}"),
                    ))
                }
            },
            (Arrival::Control, Frame::Fin { send_id }) => match self.requests.get_mut(send_id) {
                Some(ReqState::SendRendezvous { machine, .. }) => {
                    machine.on_fin().map_err(|e| protocol_error(peer, e))?;
                    self.complete(send_id, Proto::sent(0));
                    if self.peers[peer as usize].route == Route::Fabric {
                        // Its memory was registered for the peer's read: let it go.
                        self.fabric.read_by_peer.push(send_id);
                    }
                }
                _ => {
                    return Err(protocol_error(
                        peer,
                        format!("FIN for unknown send {send_id:#x}"),
                    ))
                }
            },
            (Arrival::Control, Frame::Bye) => self.peers[peer as usize].departed = true,
            (Arrival::Control, Frame::RailDown { rail, seq })
                if self.acknowledged(peer) && (rail as usize) < self.rails =>
            {
                self.rail_down.push((peer, rail as u16));
                self.to_drain.push((peer, rail as u16, seq));
            }
            (_, frame) => return Err(protocol_error(peer, format!("unexpected frame {frame:?}"))),
        }
        Ok(())
    }
}

/// The protocol as the shared-memory rings' sink: [`Proto`] with the engine's receives that read
/// in place, so that an eager payload can stay in its ring (`Engine::irecv_in_place`), and the
/// posted-receive shortcut for the commonest frame.
pub(super) struct RingSink<'a> {
    pub(super) proto: &'a mut Proto,
    pub(super) in_place: &'a mut Vec<(ReqId, Option<u32>)>,
    pub(super) links: &'a mut [Link],
}

impl FrameSink for RingSink<'_> {
    #[inline]
    fn begin_frame(&mut self, peer: u32, frame: &Frame) -> Result<Incoming, Error> {
        self.proto.begin_frame(peer, frame)
    }

    #[inline]
    fn end_frame(&mut self, peer: u32, frame: &Frame, incoming: Incoming) -> Result<(), Error> {
        self.proto.end_frame(peer, frame, incoming)
    }

    fn read_done(&mut self, peer: u32, id: ReqId) -> Result<(), Error> {
        self.proto.read_done(peer, id)
    }

    fn departed(&self, peer: u32) -> bool {
        self.proto.departed(peer)
    }

    #[inline]
    fn paused(&self, peer: u32) -> bool {
        self.links[peer as usize].held.is_some()
    }

    /// An eager message from a known peer, not over rails, while no receive reads in place:
    /// matched here without `begin_frame`'s general match, and a posted receive takes it
    /// without `end_frame`'s.
    #[inline]
    fn take_eager(&mut self, peer: u32, frame: &Frame) -> EagerTake {
        let Frame::Eager { context, tag, len } = *frame else {
            return EagerTake::Neither;
        };
        if !self.in_place.is_empty()
            || peer as usize >= self.proto.peers.len()
            || self.proto.acknowledged(peer)
        {
            return EagerTake::Neither;
        }
        let env = Envelope {
            context,
            source: peer,
            tag,
        };
        match self.proto.take_posted_eager(env, false) {
            Some((id, buf, cap)) => EagerTake::Posted { id, buf, cap, env },
            None => EagerTake::Kept(self.proto.keep_eager(env, len)),
        }
    }

    #[inline]
    fn eager_stored(&mut self, id: ReqId, env: Envelope, len: u64, stored: usize) {
        self.proto.eager_matched_stored(id, env, len, stored);
    }

    fn reads_in_place(&self) -> bool {
        !self.in_place.is_empty()
    }

    fn keep_in_place(&mut self, peer: u32, incoming: &Incoming, len: usize) -> bool {
        let keep =
            (incoming.matched()).and_then(|id| self.in_place.iter_mut().find(|(r, _)| *r == id));
        let (Some(entry), Ok(held)) = (keep, u32::try_from(len)) else {
            return false;
        };
        entry.1 = Some(peer);
        self.links[peer as usize].held = Some(held);
        true
    }
}
