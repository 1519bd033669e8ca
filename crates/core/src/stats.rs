//! Counters of the engine's traffic, for tools (the MPI_T performance variables of the C ABI).
//!
//! The engine bumps them where a message is handed to a transport or taken from one: a couple
//! of integer additions per message, no allocation and no atomic (the engine is one thread's).
//! Every message counts, those of collectives and one-sided operations included, since all of
//! them are point-to-point messages to the engine. Read them with [`crate::Comm::counters`].

/// Totals since the job started, on this rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Messages handed to a transport (or to this rank itself).
    pub messages_sent: u64,
    /// Payload bytes of those messages.
    pub bytes_sent: u64,
    /// Sends that went eagerly: the payload travelled with the envelope.
    pub eager_sends: u64,
    /// Sends that went by rendezvous: announced first, the payload moved once matched.
    pub rendezvous_sends: u64,
    /// Messages that arrived (an eager payload or a rendezvous announcement).
    pub messages_received: u64,
    /// Payload bytes of those messages.
    pub bytes_received: u64,
    /// Arrivals no posted receive matched, kept on the unexpected queue.
    pub unexpected_queued: u64,
    /// Messages on the unexpected queue now (filled in when read).
    pub unexpected_now: u64,
    /// Most messages the unexpected queue has held at once.
    pub unexpected_peak: u64,
    /// TCP payloads (eager messages, rendezvous chunks) sent compressed (`FERRY_COMPRESS`;
    /// filled in when read, as the six below).
    pub frames_compressed: u64,
    /// Their bytes before compression.
    pub compressed_raw_bytes: u64,
    /// Their bytes as sent.
    pub compressed_sent_bytes: u64,
    /// TCP payloads that were candidates but went raw: their message's sample, or they
    /// themselves, did not shrink enough.
    pub frames_sent_raw: u64,
    /// Compressed TCP payloads received.
    pub frames_decompressed: u64,
    /// Readings of a TCP link's delivery rate, taken while its socket was full
    /// (`FERRY_COMPRESS=auto`).
    pub link_rate_readings: u64,
    /// The send rate estimate of the link read last, in Mbit/s (0 before any).
    pub link_rate_mbit: u64,
}

impl Counters {
    /// A send of `len` bytes, eager or by rendezvous.
    #[inline]
    pub(crate) fn sent(&mut self, len: usize, eager: bool) {
        self.messages_sent += 1;
        self.bytes_sent += len as u64;
        if eager {
            self.eager_sends += 1;
        } else {
            self.rendezvous_sends += 1;
        }
    }

    /// Fills in what compression did on the TCP links.
    pub(crate) fn add_compression(&mut self, s: crate::compress::CompressStats) {
        self.frames_compressed = s.compressed;
        self.compressed_raw_bytes = s.raw_bytes;
        self.compressed_sent_bytes = s.sent_bytes;
        self.frames_sent_raw = s.declined;
        self.frames_decompressed = s.decompressed;
        self.link_rate_readings = s.rate_readings;
        self.link_rate_mbit = s.rate_mbit;
    }

    /// An arrival of `len` bytes.
    #[inline]
    pub(crate) fn received(&mut self, len: u64) {
        self.messages_received += 1;
        self.bytes_received += len;
    }

    /// An arrival went to the unexpected queue, which now holds `queued` messages.
    #[inline]
    pub(crate) fn queued_unexpected(&mut self, queued: usize) {
        self.unexpected_queued += 1;
        self.unexpected_peak = self.unexpected_peak.max(queued as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_split_into_eager_and_rendezvous() {
        let mut c = Counters::default();
        c.sent(10, true);
        c.sent(1 << 20, false);
        c.received(7);
        c.queued_unexpected(3);
        c.queued_unexpected(1);
        assert_eq!(c.messages_sent, 2);
        assert_eq!(c.bytes_sent, 10 + (1 << 20));
        assert_eq!((c.eager_sends, c.rendezvous_sends), (1, 1));
        assert_eq!((c.messages_received, c.bytes_received), (1, 7));
        assert_eq!((c.unexpected_queued, c.unexpected_peak), (2, 3));
    }
}
