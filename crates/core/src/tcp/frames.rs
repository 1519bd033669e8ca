//! Frame I/O on an authenticated connection: vectored writes, and reads that parse headers and
//! store payloads (large ones straight into their destination).

use super::*;

impl TcpTransport {
    /// Writes as much of `frame` as rail `rail` to `peer` takes. Ok(true) once all of it is
    /// written. A write failure on a rail other than rail 0 closes that rail and is reported
    /// by [`TcpTransport::take_failures`]; the frame stays unwritten.
    pub(crate) fn try_write(
        &mut self,
        peer: usize,
        rail: usize,
        frame: &mut OutFrame,
    ) -> Result<bool, Error> {
        let Some(conn) = self.conns[peer][rail].as_mut() else {
            return Ok(false);
        };
        if conn.handshake.is_some() {
            return Ok(false);
        }
        let total = HEADER_LEN + frame.len;
        let packed = conn.compressor.is_some() && packed::begin(conn, frame, &mut self.compressed);
        while frame.sent < total && conn.writable {
            let header = &frame.header[frame.sent.min(HEADER_LEN)..];
            let skip = frame.sent.saturating_sub(HEADER_LEN);
            // SAFETY: `payload` is valid for `len` bytes until the frame's request completes,
            // which happens only after this write finished.
            let payload =
                unsafe { std::slice::from_raw_parts(frame.payload.add(skip), frame.len - skip) };
            let written = if packed {
                conn.stream.write(packed::unwritten(
                    conn.compressor.as_deref(),
                    conn.packed_sent,
                ))
            } else if header.is_empty() {
                conn.stream.write(payload)
            } else {
                write_parts(&conn.stream, header, payload)
            };
            match written {
                Ok(n) if packed => {
                    frame.sent = packed::advance(conn, n, total);
                    conn.written += n as u64;
                }
                Ok(n) => {
                    frame.sent += n;
                    conn.written += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    conn.writable = false;
                    packed::socket_full(conn, &mut self.compressed);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if self.rails > 1 => {
                    let why = format!("write to {} failed: {e}", conn.addr);
                    self.rail_failed(peer, rail, why);
                    return Ok(false);
                }
                Err(_) if !self.world.contains(&(peer as u32)) => {
                    // Another world's process that ended (see poll_input).
                    self.close_rail(peer, rail);
                    self.closed.push(peer as u32);
                    return Ok(false);
                }
                // The peer's end is closed: it died (or ended). A lost peer, as when a read
                // meets the end, so that a fault-tolerant rank fails it and goes on.
                Err(e)
                    if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) =>
                {
                    let why = format!("write to {} failed: {e}", conn.addr);
                    return Err(sink_lost(peer as u32, why));
                }
                Err(e) => {
                    return Err(Error::Transport(format!(
                        "write to rank {peer} at {} failed: {e}",
                        conn.addr
                    )))
                }
            }
        }
        Ok(frame.sent == total)
    }
}

/// Writes `header` then `payload` in one system call. `sendmsg` with `MSG_NOSIGNAL`, not the
/// `writev` behind `write_vectored`: a peer that has gone must give an error here, not a SIGPIPE,
/// which kills a C or Fortran program (only Rust programs ignore it from the start).
fn write_parts(stream: &TcpStream, header: &[u8], payload: &[u8]) -> std::io::Result<usize> {
    socket2::SockRef::from(stream).send_vectored_with_flags(
        &[IoSlice::new(header), IoSlice::new(payload)],
        libc::MSG_NOSIGNAL,
    )
}

/// Parses frames from a peer's connection until it has no more bytes now.
pub(super) fn read_frames(
    conn: &mut Conn,
    peer: u32,
    sink: &mut dyn FrameSink,
    max_payload: u64,
) -> Result<bool, Error> {
    read_frames_inner(conn, peer, sink, max_payload).map_err(|e| match (e, &conn.via) {
        (Error::PeerLost { rank, pid, detail }, Some(front)) => Error::PeerLost {
            rank,
            pid,
            detail: format!(
                "{detail} (through the relay on {front}: relay on {front} went away, or rank {peer} ended)"
            ),
        },
        (e, _) => e,
    })
}

pub(super) fn read_frames_inner(
    conn: &mut Conn,
    peer: u32,
    sink: &mut dyn FrameSink,
    max_payload: u64,
) -> Result<bool, Error> {
    let lost = |e: std::io::Error| {
        if e.kind() == ErrorKind::UnexpectedEof {
            sink_lost(peer, "connection closed by the peer".into())
        } else {
            sink_lost(peer, format!("read failed: {e}"))
        }
    };
    let mut progressed = false;
    loop {
        match &mut conn.input {
            Input::Header => {
                if conn.end - conn.start < HEADER_LEN {
                    if !conn.readable || !conn.fill().map_err(lost)? {
                        return Ok(progressed);
                    }
                    continue;
                }
                let frame = match Frame::decode(&conn.buf[conn.start..conn.end], max_payload) {
                    Ok(frame) => frame,
                    Err(FrameError::Incomplete { .. }) => continue,
                    Err(e) => {
                        return Err(Error::Protocol {
                            rank: peer as usize,
                            detail: e.to_string(),
                        })
                    }
                };
                let compressed = compressed_len(&conn.buf[conn.start..conn.end]);
                conn.start += HEADER_LEN;
                progressed = true;
                let incoming = sink.begin_frame(peer, &frame)?;
                let total = frame.payload_len() as usize;
                conn.input = match compressed {
                    Some(sent) => Input::Packed {
                        frame,
                        incoming,
                        sent: Vec::with_capacity(sent),
                        total: sent,
                    },
                    None => Input::Payload {
                        frame,
                        incoming,
                        done: 0,
                        total,
                    },
                };
            }
            Input::Packed { .. } => {
                let (ended, moved) = packed::read(conn, peer, sink)?;
                progressed |= moved;
                if !ended {
                    return Ok(progressed);
                }
            }
            Input::Payload {
                incoming,
                done,
                total,
                ..
            } => {
                let buffered = (conn.end - conn.start).min(*total - *done);
                if buffered > 0 {
                    incoming.store(*done, &conn.buf[conn.start..conn.start + buffered]);
                    conn.start += buffered;
                    *done += buffered;
                }
                let direct = incoming.direct_room(*done).min(*total - *done);
                // Past the buffer's end (truncation) `direct` is 0 and `target` is never used.
                let target = incoming.ptr().wrapping_add(*done);
                if *done == *total {
                    let Input::Payload {
                        frame, incoming, ..
                    } = std::mem::replace(&mut conn.input, Input::Header)
                    else {
                        unreachable!("matched Payload above")
                    };
                    sink.end_frame(peer, &frame, incoming)?;
                    if matches!(frame, Frame::RailDown { .. }) {
                        // What follows may be frames sent again: the failed rail is read to
                        // its end first.
                        return Ok(true);
                    }
                    continue;
                }
                if !conn.readable {
                    return Ok(progressed);
                }
                if direct >= DIRECT_READ {
                    // SAFETY: `direct_room` bounds `direct` to the part of the receive buffer that
                    // this frame owns, which stays valid until the frame ends.
                    let dst = unsafe { std::slice::from_raw_parts_mut(target, direct) };
                    match conn.stream.read(dst) {
                        Ok(0) => return Err(lost(ErrorKind::UnexpectedEof.into())),
                        Ok(n) => {
                            // Short: the socket is empty until its next edge (see `fill`).
                            conn.readable = n == direct || conn.hung_up;
                            if let Input::Payload { done, .. } = &mut conn.input {
                                *done += n;
                            }
                            progressed = true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => conn.readable = false,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(lost(e)),
                    }
                } else if !conn.fill().map_err(lost)? {
                    return Ok(progressed);
                }
            }
        }
    }
}

pub(super) fn sink_lost(peer: u32, detail: String) -> Error {
    Error::PeerLost {
        rank: peer as usize,
        pid: 0,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sigpipe_check::raises_sigpipe;

    #[test]
    fn writing_to_a_closed_connection_is_an_error_not_a_signal() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _theirs = listener.accept().unwrap();
        ours.shutdown(std::net::Shutdown::Write).unwrap();
        let ours = TcpStream::from_std(ours);
        let (written, raised) = raises_sigpipe(|| write_parts(&ours, b"header", b"payload"));
        assert_eq!(written.map_err(|e| e.kind()), Err(ErrorKind::BrokenPipe));
        assert!(!raised, "the failed write raised SIGPIPE");
    }
}
