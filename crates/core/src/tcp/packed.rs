//! Compressed frames on a connection (`crate::compress` decides, `ferry_wire::compress` is the
//! format): the write side packs a frame into the link's buffer when it reaches the head of
//! the connection and reads the link's rate when the socket is full; the read side gathers a
//! compressed payload and hands it on decompressed, so the engine never sees the difference.

use super::frames::sink_lost;
use super::*;
use crate::compress::{CompressStats, LinkCompressor, Packing};
use ferry_wire::compress::decompress;

/// Whether `frame` goes out compressed on `conn`: decided when its first byte is about to be
/// written, and kept until its last one is. A frame is written to its end on the connection
/// it started on (or the connection closes), so the link's packed copy is always this
/// frame's.
pub(super) fn begin(conn: &mut Conn, frame: &OutFrame, stats: &mut CompressStats) -> bool {
    let Some(link) = conn.compressor.as_deref_mut() else {
        return false;
    };
    if conn.packed_sent.is_some() || frame.sent > 0 {
        return conn.packed_sent.is_some();
    }
    // SAFETY: `payload` is valid for `len` bytes until the frame's request completes, which
    // happens only after the frame is written.
    let payload = unsafe { std::slice::from_raw_parts(frame.payload, frame.len) };
    let packing = link.pack(&frame.header, payload);
    stats.count(packing);
    if matches!(packing, Packing::Compressed { .. }) {
        conn.packed_sent = Some(0);
    }
    conn.packed_sent.is_some()
}

/// The bytes of the packed frame still to write (`conn.compressor`, `conn.packed_sent`).
pub(super) fn unwritten(link: Option<&LinkCompressor>, sent: Option<usize>) -> &[u8] {
    match (link, sent) {
        (Some(link), Some(sent)) => link.packed().get(sent..).unwrap_or(&[]),
        _ => &[],
    }
}

/// `n` more bytes of the packed frame are written; its progress in the frame's terms (which
/// reaches `total` only with the last byte).
pub(super) fn advance(conn: &mut Conn, n: usize, total: usize) -> usize {
    let Some(sent) = conn.packed_sent.as_mut() else {
        return total;
    };
    *sent += n;
    let done = *sent;
    if unwritten(conn.compressor.as_deref(), conn.packed_sent).is_empty() {
        conn.packed_sent = None;
        total
    } else {
        // Shorter than the raw frame, so this stays below `total`.
        done
    }
}

/// The socket is full: a good moment to read the link's rate (the kernel's delivery rate is
/// then that of the link, not of a sender with nothing to send).
pub(super) fn socket_full(conn: &mut Conn, stats: &mut CompressStats) {
    let Some(link) = conn.compressor.as_deref_mut() else {
        return;
    };
    let now = conn.opened.elapsed();
    if !link.wants_rate(now) {
        return;
    }
    if let Some((rate, app_limited)) = delivery_rate(&conn.stream) {
        link.observe_rate(now, rate, app_limited);
        stats.count_reading(link);
    }
}

/// `TCP_INFO`'s delivery rate (bytes per second) and whether the kernel marks it as limited by
/// the sender. Offsets of `struct tcp_info` (linux/tcp.h, append-only): the flag is bit 0 of
/// byte 7, the rate the u64 at byte 160 (kernels since 4.9; older ones fill less and `None`
/// follows).
fn delivery_rate(stream: &TcpStream) -> Option<(u64, bool)> {
    const RATE_AT: usize = 160;
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, which has that many, and
    // stores the length it wrote in `len`.
    let rc = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 || (len as usize) < RATE_AT + 8 {
        return None;
    }
    let mut rate = [0u8; 8];
    rate.copy_from_slice(&info[RATE_AT..RATE_AT + 8]);
    Some((u64::from_le_bytes(rate), info[7] & 1 != 0))
}

/// Gathers the compressed payload the connection is reading, then decompresses it into the
/// frame's destination. Returns (whether the frame ended, whether bytes moved).
pub(super) fn read(
    conn: &mut Conn,
    peer: u32,
    sink: &mut dyn FrameSink,
) -> Result<(bool, bool), Error> {
    let mut moved = false;
    loop {
        let Input::Packed { sent, total, .. } = &mut conn.input else {
            return Ok((true, moved));
        };
        let take = (conn.end - conn.start).min(*total - sent.len());
        if take > 0 {
            sent.extend_from_slice(&conn.buf[conn.start..conn.start + take]);
            conn.start += take;
            moved = true;
        }
        if sent.len() == *total {
            break;
        }
        if !conn.readable {
            return Ok((false, moved));
        }
        match conn.fill() {
            Ok(true) => {}
            Ok(false) => return Ok((false, moved)),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                return Err(sink_lost(peer, "connection closed by the peer".into()))
            }
            Err(e) => return Err(sink_lost(peer, format!("read failed: {e}"))),
        }
    }
    let Input::Packed {
        frame,
        mut incoming,
        sent,
        ..
    } = std::mem::replace(&mut conn.input, Input::Header)
    else {
        unreachable!("matched Packed above")
    };
    // The decoder checked the announced length against the receiver's limit.
    let mut raw = vec![0u8; frame.payload_len() as usize];
    decompress(&sent, &mut Vec::new(), &mut raw).map_err(|e| Error::Protocol {
        rank: peer as usize,
        detail: format!("compressed frame of {} bytes: {e}", raw.len()),
    })?;
    incoming.store(0, &raw);
    conn.decompressed += 1;
    sink.end_frame(peer, &frame, incoming)?;
    Ok((true, true))
}

impl TcpTransport {
    /// Compresses on the links made from now on as `config` says (set before any is made).
    pub(crate) fn set_compression(&mut self, config: crate::compress::CompressConfig) {
        self.compress = config;
    }

    /// What compression did on this rank's links, the frames received compressed included.
    pub(crate) fn compression_stats(&self) -> CompressStats {
        let mut stats = self.compressed;
        stats.decompressed = self
            .conns
            .iter()
            .flatten()
            .flatten()
            .map(|c| c.decompressed)
            .sum();
        stats
    }
}
