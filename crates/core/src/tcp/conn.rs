//! One connection: its staging buffer, and the relay exchange and handshake that open it.

use super::*;

pub(super) enum Input {
    Header,
    Payload {
        frame: Frame,
        incoming: crate::frames::Incoming,
        done: usize,
        total: usize,
    },
    /// A compressed payload of `total` bytes as sent, gathered in `sent` (see `packed`).
    Packed {
        frame: Frame,
        incoming: crate::frames::Incoming,
        sent: Vec<u8>,
        total: usize,
    },
}

/// What runs on a connection before the ferry handshake.
pub(super) enum Pre {
    /// Nothing (any more).
    Done,
    /// Accepted, first bytes not seen yet: `FRLY` makes it a relayed connection.
    Sniff(RelayAcceptor),
    /// Opened by our relay for a client outside the cluster: INCOMING, then ACCEPTED.
    Relayed(RelayAcceptor),
    /// Dialled through the peer's relay: GREETING, CONNECT, ESTABLISHED; or FORWARDED, then
    /// INCOMING and ACCEPTED through the relay's pinhole.
    ViaRelay(RelayConnector),
}

pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) addr: SocketAddr,
    pub(super) pre: Pre,
    /// Front node whose relay carries this connection, for messages.
    pub(super) via: Option<String>,
    /// The CONNECT to the peer's relay while this connection goes through its pinhole: held
    /// open until the target accepts, since closing it closes the pinhole.
    pub(super) control: Option<TcpStream>,
    /// Opened by our relay (an accepted connection that began with `FRLY`).
    pub(super) relayed: bool,
    pub(super) handshake: Option<Handshake>,
    /// Dialled connections are writable only once connected.
    pub(super) connected: bool,
    pub(super) readable: bool,
    /// The peer closed its end (an event said so): reads go on until they meet the end, since
    /// epoll reports the hang-up once, often with the last data, and a short read no longer
    /// means that a later edge will come.
    pub(super) hung_up: bool,
    pub(super) writable: bool,
    pub(super) buf: Box<[u8]>,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) input: Input,
    pub(super) opened: Instant,
    /// Payload and header bytes written since the connection opened.
    pub(super) written: u64,
    /// Compression on this link (`None`: off; see `packed`).
    pub(super) compressor: Option<Box<crate::compress::LinkCompressor>>,
    /// Bytes written of the compressed frame going out, while one is.
    pub(super) packed_sent: Option<usize>,
    /// Compressed frames received.
    pub(super) decompressed: u64,
}

impl Conn {
    pub(super) fn new(
        stream: TcpStream,
        addr: SocketAddr,
        pre: Pre,
        handshake: Handshake,
        connected: bool,
    ) -> Conn {
        Conn {
            stream,
            addr,
            pre,
            via: None,
            control: None,
            relayed: false,
            handshake: Some(handshake),
            connected,
            readable: true,
            hung_up: false,
            writable: true,
            buf: vec![0u8; STAGING].into_boxed_slice(),
            start: 0,
            end: 0,
            input: Input::Header,
            opened: Instant::now(),
            written: 0,
            compressor: None,
            packed_sent: None,
            decompressed: 0,
        }
    }

    /// Reads what the socket has into the staging buffer. Ok(false): nothing now.
    pub(super) fn fill(&mut self) -> std::io::Result<bool> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let limit = (self.end + FILL).min(self.buf.len());
        loop {
            match self.stream.read(&mut self.buf[self.end..limit]) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    // A short read emptied the socket: what comes later is a new edge, so
                    // the read that would only say EAGAIN is saved (one system call less
                    // per message received).
                    self.readable = self.end + n == limit || self.hung_up;
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.readable = false;
                    return Ok(false);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves the relay exchange forward, if any. Ok(true) once it is over.
    pub(super) fn step_pre(&mut self, seen: &mut ReplayGuard) -> Result<bool, String> {
        loop {
            let out: &[u8] = match &self.pre {
                Pre::Done => return Ok(true),
                Pre::Sniff(_) => &[],
                Pre::Relayed(a) => a.pending_output(),
                Pre::ViaRelay(c) => c.pending_output(),
            };
            if !out.is_empty() && self.connected && self.writable {
                match self.stream.write(out) {
                    Ok(n) => match &mut self.pre {
                        Pre::Relayed(a) => a.consume_output(n),
                        Pre::ViaRelay(c) => c.consume_output(n),
                        _ => {}
                    },
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.writable = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("write failed: {e}")),
                }
                continue;
            }
            let done = match &self.pre {
                Pre::Relayed(a) => a.peer_rank().is_some(),
                Pre::ViaRelay(c) => c.is_established(),
                _ => false,
            };
            if done {
                self.pre = Pre::Done;
                self.control = None;
                return Ok(true);
            }
            if self.start < self.end {
                let input = &self.buf[self.start..self.end];
                let used = match &mut self.pre {
                    Pre::Sniff(_) if input.len() >= relay::MAGIC.len() => {
                        let relayed = input[..relay::MAGIC.len()] == relay::MAGIC;
                        if let Pre::Sniff(a) = std::mem::replace(&mut self.pre, Pre::Done) {
                            if relayed {
                                self.pre = Pre::Relayed(a);
                                self.relayed = true;
                            }
                        }
                        continue;
                    }
                    Pre::Sniff(_) => 0,
                    Pre::Relayed(a) => match a.handle_input(input, seen) {
                        Ok(used) => used,
                        Err(e) => {
                            // REFUSED is queued: one try to send it, then close.
                            let _ = self.stream.write(a.pending_output());
                            return Err(format!("relayed connection refused: {e}"));
                        }
                    },
                    Pre::ViaRelay(c) => c
                        .handle_input(input)
                        .map_err(|e| format!("the relay refused: {e}"))?,
                    Pre::Done => 0,
                };
                if used > 0 {
                    self.start += used;
                    continue;
                }
            }
            if !self.readable {
                return Ok(false);
            }
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    return Err("closed before the handshake".into())
                }
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    }

    /// The port of the pinhole the peer's relay opened, once this connection is to move there.
    pub(super) fn pinhole(&self) -> Option<u16> {
        match &self.pre {
            Pre::ViaRelay(c) => c.pinhole(),
            _ => None,
        }
    }

    /// Moves the relay exchange and the handshake forward. Ok(Some((rank, rail))) once
    /// complete.
    pub(super) fn drive_handshake(
        &mut self,
        seen: &mut ReplayGuard,
    ) -> Result<Option<(u32, u16)>, String> {
        if !self.step_pre(seen)? {
            return Ok(None);
        }
        let Some(mut hs) = self.handshake.take() else {
            return Ok(None);
        };
        let outcome = self.step_handshake(&mut hs);
        if !matches!(outcome, Ok(Some(_))) {
            self.handshake = Some(hs);
        }
        outcome
    }

    pub(super) fn step_handshake(
        &mut self,
        hs: &mut Handshake,
    ) -> Result<Option<(u32, u16)>, String> {
        loop {
            if self.connected && self.writable && !hs.pending_output().is_empty() {
                match self.stream.write(hs.pending_output()) {
                    Ok(n) => hs.consume_output(n),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.writable = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("write failed: {e}")),
                }
            }
            if let Some(rank) = hs.peer_rank() {
                return Ok(Some((rank, hs.rail())));
            }
            if self.start < self.end && hs.wanted() > 0 {
                let used = hs
                    .handle_input(&self.buf[self.start..self.end])
                    .map_err(|e| e.to_string())?;
                self.start += used;
                continue;
            }
            if !self.readable {
                return Ok(None);
            }
            match self.fill() {
                Ok(true) => {}
                Ok(false)
                    if hs.pending_output().is_empty() || !self.writable || !self.connected =>
                {
                    return Ok(None)
                }
                Ok(false) => {}
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    return Err("closed during the handshake".into())
                }
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    }
}
