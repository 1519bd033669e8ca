//! Shared memory as a [`Transport`]: each peer's ring read in turn into the sink (at most 64
//! records a peer a pass, so one busy sender cannot starve the others), and frames pushed into
//! the peer's ring when it has room.

use super::ShmTransport;
use crate::error::Error;
use crate::frames::{EagerTake, FrameSink, OutFrame, Transport};
use ferry_wire::Frame;
use std::os::fd::RawFd;

/// Records read from one peer's ring per pass.
const PER_PEER: usize = 64;

impl Transport for ShmTransport {
    fn poll_input(&mut self, sink: &mut impl FrameSink) -> Result<bool, Error> {
        let mut progressed = false;
        let mut next = 0;
        while let Some(peer) = self.local_peer(next) {
            next += 1;
            if !sink.paused(peer as u32) {
                progressed |= self.read_peer(peer, sink)?;
            }
        }
        Ok(progressed)
    }

    fn try_write(&mut self, peer: usize, frame: &mut OutFrame) -> Result<bool, Error> {
        Ok(self.try_push(peer, &frame.header, frame.payload, frame.len))
    }

    fn wake_fd(&self) -> Option<RawFd> {
        None
    }
}

impl ShmTransport {
    /// Reads the records at the head of `peer`'s ring into `sink`; whether it read any.
    #[inline]
    fn read_peer(&mut self, peer: usize, sink: &mut impl FrameSink) -> Result<bool, Error> {
        let from = peer as u32;
        let mut progressed = false;
        for _ in 0..PER_PEER {
            let Some(record) = self.peek(peer) else { break };
            let frame = Frame::decode(&record.header, u64::MAX).map_err(|e| Error::Protocol {
                rank: peer,
                detail: e.to_string(),
            })?;
            let len = frame.payload_len() as usize;
            let mut incoming = match sink.take_eager(from, &frame) {
                EagerTake::Posted { id, buf, cap, env } => {
                    let n = len.min(cap);
                    if n > 0 {
                        record.copy_payload(0, buf, n);
                    }
                    self.pop(peer, len);
                    sink.eager_stored(id, env, len as u64, n);
                    progressed = true;
                    continue;
                }
                EagerTake::Kept(incoming) => incoming,
                EagerTake::Neither => sink.begin_frame(from, &frame)?,
            };
            let n = incoming.direct_room(0).min(len);
            // A whole payload that does not wrap around the ring's end may stay where it is,
            // read in place by its receive: nothing behind it moves until that releases it.
            if n == len
                && sink.reads_in_place()
                && record.payload_in_place(len).is_some()
                && sink.keep_in_place(from, &incoming, len)
            {
                self.publish_head(peer);
                sink.end_frame(from, &frame, incoming)?;
                return Ok(true);
            }
            if n > 0 {
                record.copy_payload(0, incoming.ptr(), n);
            }
            incoming.cap = n;
            self.pop(peer, len);
            sink.end_frame(from, &frame, incoming)?;
            progressed = true;
        }
        Ok(progressed)
    }
}
