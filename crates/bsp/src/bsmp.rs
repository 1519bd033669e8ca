//! BSMP: messages sent in one superstep and read in the next.

use crate::record::{send_head, SEND_HEAD};
use crate::{Bsp, BspError, ErrorKind};

/// A BSMP message received at the last sync: ranges into `Bsp::inbox`.
#[derive(Clone, Copy)]
pub(crate) struct Msg {
    pub(crate) tag: (usize, usize),
    pub(crate) payload: (usize, usize),
}

impl Bsp {
    // ---- BSMP ----

    /// Sends `payload` with `tag` (exactly the current tag size) to `pid`'s queue of the next
    /// superstep.
    pub fn send(&mut self, pid: usize, tag: &[u8], payload: &[u8]) -> Result<(), BspError> {
        self.check_pid("bsp_send", pid)?;
        if tag.len() != self.tagsize {
            let (len, tagsize) = (tag.len(), self.tagsize);
            return Err(self.error("bsp_send", ErrorKind::TagSize { len, tagsize }));
        }
        let head = send_head(tag.len(), payload.len());
        if self.ring_usable(pid) && self.ring_emit(pid, &[&head, tag, payload])?.is_some() {
            return Ok(());
        }
        self.emit(pid, SEND_HEAD + tag.len() + payload.len(), |rec| {
            rec.extend_from_slice(&head);
            rec.extend_from_slice(tag);
            rec.extend_from_slice(payload);
        })?;
        Ok(())
    }

    /// Sets the tag size (bytes) from the next sync on; returns the size in effect now.
    pub fn set_tagsize(&mut self, size: usize) -> usize {
        self.next_tagsize = size;
        self.tagsize
    }

    /// The tag size in effect in this superstep.
    pub fn tagsize(&self) -> usize {
        self.tagsize
    }

    /// Messages not yet moved, and the sum of their payload sizes.
    pub fn qsize(&self) -> (usize, usize) {
        let rest = &self.msgs[self.next_msg..];
        (
            rest.len(),
            rest.iter().map(|m| m.payload.1 - m.payload.0).sum(),
        )
    }

    /// The payload size and tag of the first message in the queue, if any.
    pub fn get_tag(&self) -> Option<(usize, &[u8])> {
        self.msgs
            .get(self.next_msg)
            .map(|m| (m.payload.1 - m.payload.0, &self.inbox[m.tag.0..m.tag.1]))
    }

    /// Moves the first message's payload into `buf` (at most `buf.len()` bytes) and removes it;
    /// returns its full payload size, or `None` when the queue is empty.
    pub fn move_into(&mut self, buf: &mut [u8]) -> Option<usize> {
        let m = *self.msgs.get(self.next_msg)?;
        self.next_msg += 1;
        let payload = &self.inbox[m.payload.0..m.payload.1];
        let n = payload.len().min(buf.len());
        buf[..n].copy_from_slice(&payload[..n]);
        Some(payload.len())
    }

    /// Removes the first message and returns its tag and payload in place, without copying.
    pub fn hpmove(&mut self) -> Option<(&[u8], &[u8])> {
        let m = *self.msgs.get(self.next_msg)?;
        self.next_msg += 1;
        Some((
            &self.inbox[m.tag.0..m.tag.1],
            &self.inbox[m.payload.0..m.payload.1],
        ))
    }
}
