//! The large-message protocol, one state machine per side.
//!
//! ```text
//! push (any transport):   sender RTS →   ← CTS receiver   sender DATA, DATA, … →
//! pull (one host, CMA):   sender RTS →   receiver copies from source_addr itself   ← FIN
//! share (one host, CMA):  sender RTS →   ← SHARE receiver
//!                         receiver pulls the front  ‖  sender writes the back, WRITTEN →
//!                         ← FIN once the receiver has both
//! ```
//!
//! The receiver chooses: it pulls when the RTS carries a source address and it may read the
//! sender's memory, and answers CTS otherwise (also after a refused pull), so a sender always
//! accepts any reply. A shared copy puts both processes' cores on one copy of each byte (a pull
//! leaves the sender idle; a push through the ring copies every byte twice); a sender that may
//! not write the receiver's memory pushes its part as DATA instead. A receive buffer shorter than the message asks for fewer bytes
//! (`accept_len`), and the sender pushes only those: truncation costs no bandwidth.
//!
//! Over several rails (striped pushes) the sender may have to send a chunk again when a rail
//! fails, so it keeps its buffer until the receiver confirms with a FIN (an *acknowledged*
//! send), and the receiver counts every byte once however often and in whatever order chunks
//! arrive.

use crate::frame::Frame;
use thiserror::Error;

/// A protocol violation by the peer: the connection cannot be trusted any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ProtocolError {
    /// A CTS or FIN arrived for a send that was not waiting for one.
    #[error("unexpected {0} for send request {1}")]
    UnexpectedReply(&'static str, u64),
    /// A DATA chunk lies outside what the receiver accepted.
    #[error("data chunk [{offset}, {offset}+{len}) outside the accepted {accepted} bytes")]
    ChunkOutOfRange {
        /// Chunk offset.
        offset: u64,
        /// Chunk length.
        len: u64,
        /// Bytes the receiver accepted.
        accepted: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendState {
    AwaitReply,
    Pushing {
        recv_id: u64,
        next: u64,
        end: u64,
    },
    /// Every chunk is handed out; an acknowledged send waits for the receiver's FIN.
    AwaitAck {
        recv_id: u64,
        end: u64,
    },
    Done,
}

/// A piece of payload to push: write `frame`, then message bytes `offset .. offset + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataChunk {
    /// The DATA header to write first.
    pub frame: Frame,
    /// Offset of the chunk in the message.
    pub offset: u64,
    /// Length of the chunk.
    pub len: u64,
}

/// Where a shared copy of `len` bytes splits: the receiver pulls `[0, split)`, the sender writes
/// `[split, len)`. Half, on a page boundary once there is more than a page on each side.
pub fn share_split(len: u64) -> u64 {
    let half = len / 2;
    if half >= 8192 {
        half & !4095
    } else {
        half
    }
}

/// Sender side of one rendezvous.
#[derive(Debug, Clone)]
pub struct RendezvousSend {
    send_id: u64,
    len: u64,
    acknowledged: bool,
    state: SendState,
}

impl RendezvousSend {
    /// A send of `len` bytes, known to the peer as `send_id`.
    pub fn new(send_id: u64, len: u64) -> Self {
        RendezvousSend {
            send_id,
            len,
            acknowledged: false,
            state: SendState::AwaitReply,
        }
    }

    /// A send that stays open after its last chunk until the receiver answers FIN, so chunks
    /// can be sent again (multi-rail).
    pub fn acknowledged(mut self) -> Self {
        self.acknowledged = true;
        self
    }

    /// The RTS that opens the exchange.
    pub fn rts(&self, context: u32, tag: i32, source_addr: u64) -> Frame {
        Frame::Rts {
            context,
            tag,
            len: self.len,
            send_id: self.send_id,
            source_addr,
        }
    }

    /// The RTS_READ that opens an exchange in which the receiver reads the payload from the
    /// sender's registered memory at `remote_addr` (its key follows the header) and answers FIN.
    pub fn rts_read(&self, context: u32, tag: i32, remote_addr: u64) -> Frame {
        Frame::RtsRead {
            context,
            tag,
            len: self.len,
            send_id: self.send_id,
            remote_addr,
        }
    }

    /// The receiver wants `accept_len` bytes pushed under `recv_id`.
    pub fn on_cts(&mut self, recv_id: u64, accept_len: u64) -> Result<(), ProtocolError> {
        if self.state != SendState::AwaitReply {
            return Err(ProtocolError::UnexpectedReply("CTS", self.send_id));
        }
        let end = accept_len.min(self.len);
        self.state = if end == 0 {
            SendState::Done
        } else {
            SendState::Pushing {
                recv_id,
                next: 0,
                end,
            }
        };
        Ok(())
    }

    /// The receiver shares the copy (SHARE): it pulls the front itself, this side writes or
    /// pushes the rest, `[from, len)`, returned here. The send then waits for the receiver's
    /// FIN, since the receiver reads its buffer until then.
    pub fn on_share(&mut self, recv_id: u64) -> Result<(u64, u64), ProtocolError> {
        if self.state != SendState::AwaitReply {
            return Err(ProtocolError::UnexpectedReply("SHARE", self.send_id));
        }
        let from = share_split(self.len);
        self.acknowledged = true;
        self.state = SendState::Pushing {
            recv_id,
            next: from,
            end: self.len,
        };
        Ok((from, self.len))
    }

    /// The sender wrote its part of a shared copy straight into the receive buffer: the
    /// WRITTEN frame that says so. `None` if no part was waiting to be written.
    pub fn wrote_directly(&mut self) -> Option<Frame> {
        let SendState::Pushing { recv_id, next, end } = self.state else {
            return None;
        };
        self.state = SendState::AwaitAck { recv_id, end };
        Some(Frame::Written {
            recv_id,
            offset: next,
            len: end - next,
        })
    }

    /// The receiver pulled the data itself, or (acknowledged sends) has every pushed byte.
    pub fn on_fin(&mut self) -> Result<(), ProtocolError> {
        if !matches!(
            self.state,
            SendState::AwaitReply | SendState::AwaitAck { .. }
        ) {
            return Err(ProtocolError::UnexpectedReply("FIN", self.send_id));
        }
        self.state = SendState::Done;
        Ok(())
    }

    /// The next chunk of at most `max_chunk` bytes to push, if any is left. Once the last chunk
    /// is handed out the send counts as done: the caller finishes writing it.
    pub fn next_chunk(&mut self, max_chunk: u64) -> Option<DataChunk> {
        let SendState::Pushing { recv_id, next, end } = self.state else {
            return None;
        };
        let len = (end - next).min(max_chunk.max(1));
        self.state = if next + len < end {
            SendState::Pushing {
                recv_id,
                next: next + len,
                end,
            }
        } else if self.acknowledged {
            SendState::AwaitAck { recv_id, end }
        } else {
            SendState::Done
        };
        Some(DataChunk {
            frame: Frame::Data {
                recv_id,
                offset: next,
                len,
            },
            offset: next,
            len,
        })
    }

    /// The chunk `[offset, offset + len)` again, for a rail that failed after it was handed
    /// out; `None` once the send is over or outside what the receiver accepted.
    pub fn resend(&self, offset: u64, len: u64) -> Option<DataChunk> {
        let (SendState::Pushing { recv_id, end, .. } | SendState::AwaitAck { recv_id, end }) =
            self.state
        else {
            return None;
        };
        (offset.checked_add(len)? <= end).then_some(DataChunk {
            frame: Frame::Data {
                recv_id,
                offset,
                len,
            },
            offset,
            len,
        })
    }

    /// Waiting for CTS or FIN.
    pub fn awaiting_reply(&self) -> bool {
        self.state == SendState::AwaitReply
    }

    /// The send is over: every byte handed out (or pulled), and acknowledged if it must be.
    pub fn is_done(&self) -> bool {
        self.state == SendState::Done
    }

    /// No chunk is left to hand out (the send may still wait for its acknowledgement).
    pub fn handed_out(&self) -> bool {
        !matches!(self.state, SendState::Pushing { .. })
    }

    /// The length of the message.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a message of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Receiver side of one rendezvous.
#[derive(Debug, Clone)]
pub struct RendezvousRecv {
    send_id: u64,
    recv_id: u64,
    message_len: u64,
    accepted: u64,
    /// Byte ranges stored so far, sorted and merged.
    stored: Vec<(u64, u64)>,
    received: u64,
    /// The sender waits for a FIN once every byte is in.
    acknowledge: bool,
}

impl RendezvousRecv {
    /// Matched an RTS for `message_len` bytes into a buffer of `buffer_len` bytes.
    pub fn new(send_id: u64, recv_id: u64, message_len: u64, buffer_len: u64) -> Self {
        RendezvousRecv {
            send_id,
            recv_id,
            message_len,
            accepted: message_len.min(buffer_len),
            stored: Vec::new(),
            received: 0,
            acknowledge: false,
        }
    }

    /// The SHARE asking the sender to write the back of the message to `dest_addr`, the
    /// receive buffer; this side pulls `[0, share_split(len))` and reports it with
    /// [`RendezvousRecv::on_stored`]. `None` when the buffer is shorter than the message.
    pub fn share(&mut self, dest_addr: u64) -> Option<Frame> {
        if self.truncated() {
            return None;
        }
        self.acknowledge = true;
        Some(Frame::Share {
            send_id: self.send_id,
            recv_id: self.recv_id,
            dest_addr,
        })
    }

    /// Whether the sender waits for a FIN ([`RendezvousRecv::ack`]) once every byte is in:
    /// after a SHARE it is still reading from the sender's buffer until then.
    pub fn acknowledges(&self) -> bool {
        self.acknowledge
    }

    /// Bytes that will land in the buffer.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// The message is longer than the buffer (MPI_ERR_TRUNCATE).
    pub fn truncated(&self) -> bool {
        self.message_len > self.accepted
    }

    /// The CTS asking the sender to push.
    pub fn cts(&self) -> Frame {
        Frame::Cts {
            send_id: self.send_id,
            recv_id: self.recv_id,
            accept_len: self.accepted,
        }
    }

    /// The FIN telling the sender that the pull is done.
    pub fn fin(&mut self) -> Frame {
        self.received = self.accepted;
        Frame::Fin {
            send_id: self.send_id,
        }
    }

    /// The FIN confirming that every pushed byte is in (acknowledged sends).
    pub fn ack(&self) -> Frame {
        Frame::Fin {
            send_id: self.send_id,
        }
    }

    /// A DATA chunk `[offset, offset + len)` is about to be stored; checks it lies within the
    /// accepted range. Chunks may come in any order.
    pub fn on_data(&self, offset: u64, len: u64) -> Result<(), ProtocolError> {
        if offset
            .checked_add(len)
            .is_some_and(|end| end <= self.accepted)
        {
            Ok(())
        } else {
            Err(ProtocolError::ChunkOutOfRange {
                offset,
                len,
                accepted: self.accepted,
            })
        }
    }

    /// The chunk checked by [`RendezvousRecv::on_data`] is fully stored. A chunk that arrives
    /// twice (sent again after a rail failed) counts once.
    pub fn on_stored(&mut self, offset: u64, len: u64) {
        let (mut start, mut end) = (offset, offset.saturating_add(len).min(self.accepted));
        if start >= end {
            return;
        }
        // Ranges touching [start, end) merge into it.
        let first = self.stored.partition_point(|&(_, e)| e < start);
        let mut last = first;
        while last < self.stored.len() && self.stored[last].0 <= end {
            let (s, e) = self.stored[last];
            self.received -= e - s;
            start = start.min(s);
            end = end.max(e);
            last += 1;
        }
        self.stored.splice(first..last, [(start, end)]);
        self.received += end - start;
    }

    /// All accepted bytes are in.
    pub fn is_complete(&self) -> bool {
        self.received == self.accepted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_delivers_every_byte_once_in_chunks() {
        let mut send = RendezvousSend::new(5, 10);
        let Frame::Rts {
            len: 10,
            send_id: 5,
            ..
        } = send.rts(1, 2, 0)
        else {
            panic!("wrong RTS")
        };
        let mut recv = RendezvousRecv::new(5, 9, 10, 100);
        let Frame::Cts {
            send_id,
            recv_id,
            accept_len,
        } = recv.cts()
        else {
            panic!("wrong CTS")
        };
        assert_eq!((send_id, recv_id, accept_len), (5, 9, 10));
        send.on_cts(recv_id, accept_len).unwrap();
        let mut offsets = vec![];
        while let Some(chunk) = send.next_chunk(4) {
            recv.on_data(chunk.offset, chunk.len).unwrap();
            recv.on_stored(chunk.offset, chunk.len);
            offsets.push((chunk.offset, chunk.len));
        }
        assert_eq!(offsets, [(0, 4), (4, 4), (8, 2)]);
        assert!(send.is_done() && recv.is_complete() && !recv.truncated());
    }

    #[test]
    fn short_buffer_asks_for_fewer_bytes() {
        let mut send = RendezvousSend::new(1, 1000);
        let recv = RendezvousRecv::new(1, 2, 1000, 300);
        assert!(recv.truncated());
        let Frame::Cts { accept_len, .. } = recv.cts() else {
            panic!()
        };
        send.on_cts(2, accept_len).unwrap();
        let total: u64 = std::iter::from_fn(|| send.next_chunk(128))
            .map(|c| c.len)
            .sum();
        assert_eq!(total, 300);
    }

    #[test]
    fn zero_byte_buffer_completes_without_data() {
        let mut send = RendezvousSend::new(1, 1000);
        let recv = RendezvousRecv::new(1, 2, 1000, 0);
        assert!(recv.is_complete());
        send.on_cts(2, 0).unwrap();
        assert!(send.is_done());
        assert_eq!(send.next_chunk(64), None);
    }

    #[test]
    fn pull_ends_with_fin() {
        let mut send = RendezvousSend::new(1, 1000);
        let mut recv = RendezvousRecv::new(1, 2, 1000, 1000);
        assert_eq!(recv.fin(), Frame::Fin { send_id: 1 });
        assert!(recv.is_complete());
        send.on_fin().unwrap();
        assert!(send.is_done());
    }

    #[test]
    fn replies_out_of_turn_are_protocol_errors() {
        let mut send = RendezvousSend::new(3, 10);
        send.on_fin().unwrap();
        assert_eq!(
            send.on_cts(1, 10),
            Err(ProtocolError::UnexpectedReply("CTS", 3))
        );
        assert_eq!(send.on_fin(), Err(ProtocolError::UnexpectedReply("FIN", 3)));
    }

    #[test]
    fn chunks_outside_the_accepted_range_are_refused() {
        let recv = RendezvousRecv::new(1, 2, 100, 50);
        assert!(recv.on_data(40, 20).is_err());
        assert!(recv.on_data(u64::MAX, 2).is_err());
        recv.on_data(0, 50).unwrap();
    }

    #[test]
    fn chunks_in_any_order_and_repeated_count_once() {
        let mut recv = RendezvousRecv::new(1, 2, 100, 100);
        for (offset, len) in [(50, 25), (0, 10), (50, 25), (75, 25), (5, 10), (10, 40)] {
            assert!(!recv.is_complete());
            recv.on_data(offset, len).unwrap();
            recv.on_stored(offset, len);
        }
        assert!(recv.is_complete());
        recv.on_stored(0, 100);
        assert!(recv.is_complete());
        assert_eq!(recv.stored, [(0, 100)]);
    }

    #[test]
    fn acknowledged_send_waits_for_fin_and_can_resend() {
        let mut send = RendezvousSend::new(4, 10).acknowledged();
        assert_eq!(send.resend(0, 4), None, "nothing to resend before CTS");
        send.on_cts(8, 10).unwrap();
        while send.next_chunk(4).is_some() {}
        assert!(send.handed_out() && !send.is_done());
        let again = send.resend(4, 4).unwrap();
        assert_eq!(
            again.frame,
            Frame::Data {
                recv_id: 8,
                offset: 4,
                len: 4
            }
        );
        assert_eq!(send.resend(8, 4), None, "past the accepted bytes");
        send.on_fin().unwrap();
        assert!(send.is_done());
        assert_eq!(send.resend(0, 4), None);
    }

    #[test]
    fn shared_copy_splits_the_message_and_ends_with_fin() {
        let mut send = RendezvousSend::new(4, 100_000);
        let mut recv = RendezvousRecv::new(4, 9, 100_000, 100_000);
        let Some(Frame::Share {
            send_id: 4,
            recv_id: 9,
            dest_addr: 0x1000,
        }) = recv.share(0x1000)
        else {
            panic!("wrong SHARE")
        };
        assert!(recv.acknowledges());
        let (from, end) = send.on_share(9).unwrap();
        assert_eq!((from, end), (49_152, 100_000));
        recv.on_stored(0, from);
        assert!(!recv.is_complete());
        let Some(Frame::Written {
            recv_id: 9,
            offset,
            len,
        }) = send.wrote_directly()
        else {
            panic!("wrong WRITTEN")
        };
        assert!(!send.is_done(), "the receiver still reads the buffer");
        recv.on_data(offset, len).unwrap();
        recv.on_stored(offset, len);
        assert!(recv.is_complete());
        assert_eq!(recv.ack(), Frame::Fin { send_id: 4 });
        send.on_fin().unwrap();
        assert!(send.is_done());
    }

    #[test]
    fn shared_copy_falls_back_to_pushing_and_waits_for_fin() {
        let mut send = RendezvousSend::new(4, 10);
        let (from, end) = send.on_share(9).unwrap();
        assert_eq!((from, end), (5, 10));
        let chunks: Vec<_> = std::iter::from_fn(|| send.next_chunk(3))
            .map(|c| (c.offset, c.len))
            .collect();
        assert_eq!(chunks, [(5, 3), (8, 2)]);
        assert!(send.handed_out() && !send.is_done());
        assert!(send.on_share(9).is_err(), "a second SHARE");
        send.on_fin().unwrap();
        assert!(send.is_done());
    }

    #[test]
    fn truncating_receive_does_not_share() {
        let mut recv = RendezvousRecv::new(1, 2, 100, 50);
        assert_eq!(recv.share(0x1000), None);
        assert!(!recv.acknowledges());
    }

    #[test]
    fn split_is_half_on_a_page_boundary() {
        assert_eq!(share_split(10), 5);
        assert_eq!(share_split(1 << 20), 1 << 19);
        assert_eq!(share_split((1 << 20) + 3 * 4096 + 7) % 4096, 0);
    }

    #[test]
    fn fin_in_the_middle_of_a_push_is_a_protocol_error() {
        let mut send = RendezvousSend::new(4, 10).acknowledged();
        send.on_cts(8, 10).unwrap();
        send.next_chunk(4).unwrap();
        assert!(send.on_fin().is_err());
    }
}
