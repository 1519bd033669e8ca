//! Writing to a peer over several TCP rails: ordered frames on the ordered rail, rendezvous
//! chunks where the striper puts them, and what happens when a rail fails.

use super::*;

impl Engine {
    /// Writes to a peer over several rails: ordered frames on rail 0, chunks where the
    /// striper puts them.
    pub(super) fn flush_rails(&mut self, peer: u32) -> Result<bool, Error> {
        let p = peer as usize;
        let Some(tcp) = self.net.tcp.as_mut() else {
            return Ok(false);
        };
        let proto = &mut self.proto;
        let Some(lanes) = self.links[p].lanes.as_deref_mut() else {
            return Ok(false);
        };
        let rails = lanes.writing.len();
        let mut progressed = false;
        loop {
            let mut moved = false;
            let ordered = lanes.ordered;
            while lanes.writing[ordered].is_none() {
                match proto.peers[p].outq.pop_front() {
                    None => break,
                    Some(Out::Stream(id)) => lanes.striped.push_back(id),
                    Some(Out::Frame(f)) => lanes.writing[ordered] = Some(f),
                    Some(Out::Expose { id, .. }) => {
                        // Only fabric routes expose memory, and they have no rails.
                        return Err(protocol_error(
                            p as u32,
                            format!("send {id:#x} exposed on a TCP rail"),
                        ));
                    }
                }
            }
            loop {
                let (id, again) = match (lanes.resend.front(), lanes.striped.front()) {
                    (Some(&(id, offset, len)), _) => (id, Some((offset, len))),
                    (None, Some(&id)) => (id, None),
                    (None, None) => break,
                };
                let Some(message_len) = proto.pending_send_len(id) else {
                    if again.is_some() {
                        lanes.resend.pop_front();
                    } else {
                        lanes.striped.pop_front();
                    }
                    continue;
                };
                // A large message is cut over every rail; a smaller one goes whole on the rail
                // the striper picks for its first chunk, so that messages in flight together
                // still spread over the rails.
                let spread = message_len >= self.rail_stripe || again.is_some();
                let pinned = match lanes.pinned {
                    Some((pinned, rail)) if pinned == id && lanes.alive[rail] => Some(rail),
                    _ => None,
                };
                let loads: Vec<RailLoad> = (0..rails)
                    .map(|r| {
                        let mut load = tcp.load(p, r);
                        load.alive &= lanes.alive[r] && (spread || pinned.is_none_or(|p| p == r));
                        load.free = lanes.writing[r].is_none();
                        if let Some(f) = &lanes.writing[r] {
                            load.backlog += (HEADER_LEN + f.len - f.sent) as u64;
                        }
                        load
                    })
                    .collect();
                lanes.striper.observe(self.started.elapsed(), &loads);
                let size = again.map_or(self.tcp_chunk as u64, |(_, len)| len);
                let Some(rail) = lanes.striper.choose(&loads, size) else {
                    break;
                };
                let (frame, offset) = match again {
                    Some((offset, len)) => {
                        lanes.resend.pop_front();
                        match proto.resend_chunk(id, offset, len) {
                            Some(frame) => (frame, offset),
                            None => continue,
                        }
                    }
                    None => match proto.next_chunk(id, self.tcp_chunk) {
                        Some(cut) => cut,
                        None => {
                            lanes.striped.pop_front();
                            continue;
                        }
                    },
                };
                if !spread {
                    lanes.pinned = Some((id, rail));
                }
                if again.is_none() && proto.handed_out(id) {
                    lanes.striped.pop_front();
                }
                let carried = &mut lanes.carried[rail];
                if carried.len() >= 1024 {
                    carried.retain(|&(id, ..)| proto.pending_send_len(id).is_some());
                }
                carried.push((id, offset, frame.len as u64));
                lanes.writing[rail] = Some(frame);
                moved = true;
            }
            for rail in 0..rails {
                let Some(frame) = lanes.writing[rail].as_mut() else {
                    continue;
                };
                if tcp.try_write(p, rail, frame)? {
                    if let Some(frame) = lanes.writing[rail].take() {
                        let keep = ordered_frame(&frame).then(|| frame.copy());
                        proto.frame_written(&frame);
                        if let Some(copy) = keep {
                            lanes.sent_seq += 1;
                            let load = tcp.load(p, rail);
                            // Through a relay, TCP's acknowledgement is the relay's: what
                            // it holds is gone with it, so that much more is kept.
                            let delivered = load.surely_delivered(tcp.held_in_relay(p, rail));
                            while lanes
                                .retained
                                .front()
                                .is_some_and(|(end, _)| *end <= delivered)
                            {
                                lanes.retained.pop_front();
                            }
                            lanes.retained.push_back((load.written, copy));
                        }
                    }
                    moved = true;
                }
            }
            if !moved {
                break;
            }
            progressed = true;
        }
        Ok(progressed)
    }

    /// One line per peer with the bytes each rail carried and its measured rate, for
    /// `FERRY_RAIL_STATS=1`; empty without rails.
    pub(crate) fn rail_report(&self) -> Vec<String> {
        let Some(tcp) = self.net.tcp.as_ref() else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        for (peer, link) in self.links.iter().enumerate() {
            let Some(lanes) = link.lanes.as_deref() else {
                continue;
            };
            let rails: Vec<String> = (0..lanes.writing.len())
                .map(|r| {
                    let load = tcp.load(peer, r);
                    let rate = lanes.striper.rate(r) / 1e6;
                    match lanes.alive[r] {
                        true => format!("rail {r} {} B ({rate:.0} MB/s)", load.written),
                        false => format!("rail {r} failed"),
                    }
                })
                .collect();
            lines.push(format!(
                "ferry: rank {} to rank {peer}: {}",
                self.proto.me,
                rails.join(", ")
            ));
        }
        lines
    }

    /// Handles rails that failed, here or at the peer: what they carried for sends that are
    /// not acknowledged goes again on the others, and the peer learns of a local failure.
    pub(super) fn rails_failed(&mut self) -> Result<bool, Error> {
        let Some(tcp) = self.net.tcp.as_mut() else {
            return Ok(false);
        };
        let mut failed: Vec<(u32, u16, String, bool)> = tcp
            .take_failures()
            .into_iter()
            .map(|(peer, rail, why)| (peer, rail, why, true))
            .collect();
        failed.extend(
            self.proto
                .rail_down
                .drain(..)
                .map(|(peer, rail)| (peer, rail, "closed by the peer".to_string(), false)),
        );
        let any = !failed.is_empty();
        for (peer, rail, why, here) in failed {
            let (p, r) = (peer as usize, rail as usize);
            let Some(lanes) = self.links.get_mut(p).and_then(|l| l.lanes.as_deref_mut()) else {
                continue;
            };
            if !lanes.alive[r] {
                continue;
            }
            lanes.alive[r] = false;
            let cut = lanes.writing[r].take();
            tcp.close_rail(p, r);
            let mut again = 0;
            for (id, offset, len) in std::mem::take(&mut lanes.carried[r]) {
                if self.proto.pending_send_len(id).is_some() {
                    lanes.resend.push_back((id, offset, len));
                    again += 1;
                }
            }
            crate::events::rail_failover(peer, rail, &lanes.alive, here);
            let Some(next) = lanes.alive.iter().position(|&a| a) else {
                return Err(Error::PeerLost {
                    rank: p,
                    pid: self.proto.pid(p).unwrap_or(0),
                    detail: format!("every rail failed, the last one: rail {rail} ({why})"),
                });
            };
            if r == lanes.ordered {
                // The ordered frames the peer may not have go again, in order, on the next
                // rail, behind a RAIL_DOWN saying from which one on.
                let retained = std::mem::take(&mut lanes.retained);
                let from = lanes.sent_seq - retained.len() as u64;
                lanes.sent_seq = from;
                lanes.ordered = next;
                let outq = &mut self.proto.peers[p].outq;
                if let Some(mut frame) = cut.filter(ordered_frame) {
                    frame.sent = 0;
                    outq.push_front(Out::Frame(frame));
                }
                for (_, frame) in retained.into_iter().rev() {
                    outq.push_front(Out::Frame(frame));
                }
                let down = Frame::RailDown {
                    rail: rail.into(),
                    seq: from,
                };
                outq.push_front(Out::Frame(OutFrame::control(down)));
                eprintln!(
                    "ferry: rank {}: rail {rail} to rank {peer} failed ({why}); ordered frames from number {from} and {again} chunks go again, on rail {next} and the others",
                    self.proto.me
                );
            } else {
                eprintln!(
                    "ferry: rank {}: rail {rail} to rank {peer} failed ({why}); {again} chunks go again on the other rails",
                    self.proto.me
                );
                if here {
                    // No ordered frame is sent again: `seq` past any count.
                    let down = Frame::RailDown {
                        rail: rail.into(),
                        seq: u64::MAX,
                    };
                    self.proto
                        .push_out(peer, Out::Frame(OutFrame::control(down)));
                }
            }
            // Frames were queued above, or chunks wait to be sent again.
            self.proto.mark_busy(peer);
        }
        Ok(any)
    }
}
