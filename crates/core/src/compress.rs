//! Compression of TCP payloads on slow links: when a link compresses, and what it decides for
//! each payload. No I/O and no clock: the TCP transport hands in the time and the kernel's
//! measured delivery rate, and writes and reads the bytes (`tcp/packed.rs`); the byte format
//! is `ferry_wire::compress`.
//!
//! - `FERRY_COMPRESS=off` (the default): every payload goes raw.
//! - `on`: every TCP link may compress.
//! - `auto`: a link compresses while its measured send rate is below `FERRY_COMPRESS_BELOW`
//!   (Mbit/s, default 1000). The rate is the kernel's delivery rate of the connection
//!   (`TCP_INFO`), read when the socket is full, so it is the link's rate and not that of a
//!   sender with nothing to send; until a first reading a link sends raw.
//!
//! Either way a payload of fewer than `FERRY_COMPRESS_MIN` bytes goes raw, and so does a
//! message whose sample does not shrink: the first 8 KiB of its first payload on this link are
//! compressed, and unless that saves an eighth the message travels raw. So incompressible
//! data costs one 8 KiB trial per message (about 1 % of a 64 KiB chunk's time at 1 Gbit/s),
//! and a compressible payload that still does not shrink enough when whole goes raw as well.

use ferry_wire::compress::{compress, mark_compressed};
use ferry_wire::{Frame, HEADER_LEN};
use std::time::Duration;

/// What `FERRY_COMPRESS` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressMode {
    /// Never compress (the default).
    Off,
    /// Compress on every TCP link (payloads that do not shrink still go raw).
    On,
    /// Compress on links measured slower than [`CompressConfig::below_mbit`].
    Auto,
}

/// The compression settings of a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressConfig {
    /// `FERRY_COMPRESS` (`off` | `on` | `auto`, default `off`).
    pub mode: CompressMode,
    /// `FERRY_COMPRESS_BELOW` (Mbit/s, default 1000): with `auto`, a link whose measured send
    /// rate is below this compresses.
    pub below_mbit: u64,
    /// `FERRY_COMPRESS_MIN` (bytes, default 16384): smallest payload that is compressed.
    pub min_len: usize,
}

impl Default for CompressConfig {
    fn default() -> Self {
        CompressConfig {
            mode: CompressMode::Off,
            below_mbit: 1000,
            min_len: 16 << 10,
        }
    }
}

impl CompressConfig {
    /// Reads `FERRY_COMPRESS` with `word` and the two numbers with `number` (which checks
    /// them against the settings table).
    pub(crate) fn read(
        word: impl Fn(&str) -> Option<String>,
        number: impl Fn(&str) -> Result<Option<u64>, crate::Error>,
    ) -> Result<CompressConfig, crate::Error> {
        let d = CompressConfig::default();
        let mode = match word("FERRY_COMPRESS").as_deref() {
            None | Some("off") | Some("0") => CompressMode::Off,
            Some("on") | Some("1") => CompressMode::On,
            Some("auto") => CompressMode::Auto,
            Some(other) => {
                return Err(crate::Error::Config(format!(
                    "FERRY_COMPRESS={other:?}: expected off, on or auto"
                )))
            }
        };
        Ok(CompressConfig {
            mode,
            below_mbit: number("FERRY_COMPRESS_BELOW")?.unwrap_or(d.below_mbit),
            min_len: number("FERRY_COMPRESS_MIN")?.map_or(d.min_len, |v| v as usize),
        })
    }

    /// The settings for `ferry info --params`.
    pub(crate) fn describe(&self) -> [(&'static str, String); 3] {
        [
            ("FERRY_COMPRESS", format!("{:?}", self.mode).to_lowercase()),
            ("FERRY_COMPRESS_BELOW", self.below_mbit.to_string()),
            ("FERRY_COMPRESS_MIN", self.min_len.to_string()),
        ]
    }
}

/// Bytes of a message's first payload that are compressed to judge it.
pub(crate) const SAMPLE: usize = 8 << 10;
/// Rate readings are taken at most this often per link.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// What became of one payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Packing {
    /// Raw, compression not tried (off, link fast, payload small, no payload).
    Raw,
    /// Raw: the sample or the whole payload did not shrink enough.
    Declined,
    /// Compressed: `raw` bytes travel as `sent` ([`LinkCompressor::packed`] holds them).
    Compressed {
        /// Payload bytes before.
        raw: usize,
        /// Payload bytes as sent.
        sent: usize,
    },
}

/// One TCP link's compression state.
pub(crate) struct LinkCompressor {
    config: CompressConfig,
    /// Smoothed delivery rate in bytes per second, once measured.
    rate: Option<f64>,
    last_look: Option<Duration>,
    /// The rendezvous (receive id) whose first payload was judged here, and the verdict: its
    /// other chunks follow it.
    verdict: Option<(u64, bool)>,
    grouped: Vec<u8>,
    compressed: Vec<u8>,
    /// Header and compressed payload of the frame being written.
    packed: Vec<u8>,
}

impl LinkCompressor {
    /// `None` when compression is off.
    pub(crate) fn new(config: CompressConfig) -> Option<Box<LinkCompressor>> {
        (config.mode != CompressMode::Off).then(|| {
            Box::new(LinkCompressor {
                config,
                rate: None,
                last_look: None,
                verdict: None,
                grouped: Vec::new(),
                compressed: Vec::new(),
                packed: Vec::new(),
            })
        })
    }

    /// Whether a rate reading at `now` would be used (`auto`, none in the last 10 ms).
    pub(crate) fn wants_rate(&self, now: Duration) -> bool {
        self.config.mode == CompressMode::Auto
            && self
                .last_look
                .is_none_or(|t| now.saturating_sub(t) >= LOOK_EVERY)
    }

    /// The kernel's delivery rate (bytes per second) read at `now` while the socket was full.
    /// A reading the kernel marks as limited by the sender (`app_limited`) only counts when it
    /// is above the estimate: it is a lower bound.
    pub(crate) fn observe_rate(&mut self, now: Duration, bytes_per_sec: u64, app_limited: bool) {
        self.last_look = Some(now);
        if bytes_per_sec == 0 {
            return;
        }
        let sample = bytes_per_sec as f64;
        self.rate = match self.rate {
            None if app_limited => None,
            None => Some(sample),
            Some(r) if app_limited && sample <= r => Some(r),
            Some(r) => Some(0.75 * r + 0.25 * sample),
        };
    }

    /// The measured send rate in bytes per second, once there is one.
    pub(crate) fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// Whether payloads on this link are candidates now.
    fn link_is_slow(&self) -> bool {
        match self.config.mode {
            CompressMode::Off => false,
            CompressMode::On => true,
            CompressMode::Auto => self
                .rate
                .is_some_and(|r| r * 8.0 < self.config.below_mbit as f64 * 1e6),
        }
    }

    /// Decides for the frame `header` with `payload`, and compresses it if it goes
    /// compressed: then [`LinkCompressor::packed`] holds the bytes to write instead.
    pub(crate) fn pack(&mut self, header: &[u8; HEADER_LEN], payload: &[u8]) -> Packing {
        if payload.len() < self.config.min_len.max(2) || !self.link_is_slow() {
            return Packing::Raw;
        }
        let rendezvous = match Frame::decode(header, u64::MAX) {
            Ok(Frame::Data { recv_id, .. }) => Some(recv_id),
            Ok(Frame::Eager { .. }) => None,
            _ => return Packing::Raw,
        };
        let judged = match (rendezvous, self.verdict) {
            (Some(id), Some((seen, verdict))) if id == seen => verdict,
            _ => {
                let sample = &payload[..payload.len().min(SAMPLE)];
                let verdict = compress(sample, &mut self.grouped, &mut self.compressed);
                if let Some(id) = rendezvous {
                    self.verdict = Some((id, verdict));
                }
                verdict
            }
        };
        if !judged || !compress(payload, &mut self.grouped, &mut self.compressed) {
            return Packing::Declined;
        }
        let sent = self.compressed.len();
        let Ok(sent32) = u32::try_from(sent) else {
            return Packing::Declined;
        };
        let mut marked = *header;
        mark_compressed(&mut marked, sent32);
        self.packed.clear();
        self.packed.extend_from_slice(&marked);
        self.packed.extend_from_slice(&self.compressed);
        Packing::Compressed {
            raw: payload.len(),
            sent,
        }
    }

    /// Header and payload of the last frame [`LinkCompressor::pack`] compressed.
    pub(crate) fn packed(&self) -> &[u8] {
        &self.packed
    }
}

/// Compression totals of a rank's TCP links, for [`crate::Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CompressStats {
    pub(crate) compressed: u64,
    pub(crate) raw_bytes: u64,
    pub(crate) sent_bytes: u64,
    pub(crate) declined: u64,
    pub(crate) decompressed: u64,
    /// Delivery-rate readings taken while a link's socket was full (`auto`).
    pub(crate) rate_readings: u64,
    /// The last read link's send rate estimate in Mbit/s (0: none yet).
    pub(crate) rate_mbit: u64,
}

impl CompressStats {
    pub(crate) fn count(&mut self, packing: Packing) {
        match packing {
            Packing::Raw => {}
            Packing::Declined => self.declined += 1,
            Packing::Compressed { raw, sent } => {
                self.compressed += 1;
                self.raw_bytes += raw as u64;
                self.sent_bytes += sent as u64;
            }
        }
    }

    /// `link` has just read its rate: counted, so that a link that never measured slow can
    /// be told from one that never filled its socket.
    pub(crate) fn count_reading(&mut self, link: &LinkCompressor) {
        self.rate_readings += 1;
        self.rate_mbit = link.rate().map_or(0, |r| (r * 8.0 / 1e6).round() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smooth(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| (i as f64 * 1e-3).sin().to_le_bytes())
            .collect()
    }

    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    fn data(recv_id: u64, len: usize) -> [u8; HEADER_LEN] {
        Frame::Data {
            recv_id,
            offset: 0,
            len: len as u64,
        }
        .to_bytes()
    }

    fn config(mode: CompressMode) -> CompressConfig {
        CompressConfig {
            mode,
            ..CompressConfig::default()
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn off_makes_nothing() {
        assert!(LinkCompressor::new(config(CompressMode::Off)).is_none());
    }

    #[test]
    fn on_compresses_smooth_data_and_declines_noise() {
        let mut link = LinkCompressor::new(config(CompressMode::On)).expect("on");
        let smooth = smooth(8192);
        let packing = link.pack(&data(1, smooth.len()), &smooth);
        let Packing::Compressed { raw, sent } = packing else {
            panic!("{packing:?}");
        };
        assert_eq!(raw, smooth.len());
        assert_eq!(link.packed().len(), HEADER_LEN + sent);
        assert_eq!(
            ferry_wire::compress::compressed_len(link.packed()),
            Some(sent)
        );
        let noise = noise(65536);
        assert_eq!(link.pack(&data(2, noise.len()), &noise), Packing::Declined);
        let small = smooth[..1000].to_vec();
        assert_eq!(link.pack(&data(3, small.len()), &small), Packing::Raw);
        let fin = Frame::Fin { send_id: 1 }.to_bytes();
        assert_eq!(link.pack(&fin, &smooth), Packing::Raw);
    }

    #[test]
    fn a_message_follows_its_sample() {
        let mut link = LinkCompressor::new(config(CompressMode::On)).expect("on");
        // Noise first, smooth after: the sample said raw, so the whole message goes raw.
        let mut mixed = noise(SAMPLE);
        mixed.extend(smooth(8192));
        assert_eq!(link.pack(&data(7, mixed.len()), &mixed), Packing::Declined);
        let smooth = smooth(8192);
        assert_eq!(
            link.pack(&data(7, smooth.len()), &smooth),
            Packing::Declined,
            "a later chunk of the same message"
        );
        assert!(matches!(
            link.pack(&data(8, smooth.len()), &smooth),
            Packing::Compressed { .. }
        ));
    }

    #[test]
    fn auto_waits_for_a_slow_rate() {
        let mut link = LinkCompressor::new(config(CompressMode::Auto)).expect("auto");
        let smooth = smooth(8192);
        let header = data(1, smooth.len());
        assert_eq!(link.pack(&header, &smooth), Packing::Raw, "no rate yet");
        assert!(link.wants_rate(Duration::ZERO));
        // 10 Gbit/s: fast.
        link.observe_rate(Duration::ZERO, 1_250_000_000, false);
        assert!(!link.wants_rate(5 * MS), "at most every 10 ms");
        assert_eq!(link.pack(&header, &smooth), Packing::Raw);
        // An application-limited low reading says nothing about the link.
        link.observe_rate(20 * MS, 1_000_000, true);
        assert_eq!(link.pack(&header, &smooth), Packing::Raw);
        // 100 Mbit/s, read a few times: the estimate falls below 1 Gbit/s.
        for i in 0..12 {
            link.observe_rate((30 + 10 * i) * MS, 12_500_000, false);
        }
        assert!(link.rate().is_some_and(|r| r < 125e6));
        assert!(matches!(
            link.pack(&header, &smooth),
            Packing::Compressed { .. }
        ));
    }

    #[test]
    fn stats_count_what_happened() {
        let mut stats = CompressStats::default();
        stats.count(Packing::Raw);
        stats.count(Packing::Declined);
        stats.count(Packing::Compressed { raw: 100, sent: 40 });
        assert_eq!(
            stats,
            CompressStats {
                compressed: 1,
                raw_bytes: 100,
                sent_bytes: 40,
                declined: 1,
                decompressed: 0,
                rate_readings: 0,
                rate_mbit: 0,
            }
        );
        let mut link = LinkCompressor::new(config(CompressMode::Auto)).expect("auto is on");
        link.observe_rate(Duration::ZERO, 12_500_000, false);
        stats.count_reading(&link);
        assert_eq!((stats.rate_readings, stats.rate_mbit), (1, 100));
    }

    #[test]
    fn settings_are_read_and_checked() {
        let read = |mode: Option<&str>| {
            CompressConfig::read(
                |_| mode.map(str::to_string),
                |name| Ok((name == "FERRY_COMPRESS_BELOW").then_some(200)),
            )
        };
        let c = read(Some("auto")).expect("auto");
        assert_eq!(
            (c.mode, c.below_mbit, c.min_len),
            (CompressMode::Auto, 200, 16 << 10)
        );
        assert_eq!(read(None).expect("unset").mode, CompressMode::Off);
        let e = read(Some("fast")).expect_err("not a mode");
        assert!(e.to_string().contains("FERRY_COMPRESS=\"fast\""), "{e}");
    }
}
