//! Opening connections: dialling a peer (directly or through its relay and pinhole) and the
//! options every rank-to-rank socket gets.

use super::*;

impl TcpTransport {
    /// Applies per-socket options to a new rank-to-rank connection.
    pub(super) fn tune(&self, stream: &TcpStream) -> Result<(), Error> {
        stream
            .set_nodelay(true)
            .map_err(|e| io_error("TCP_NODELAY", e))?;
        if self.socket_buffer > 0 {
            let socket = socket2::SockRef::from(stream);
            socket
                .set_send_buffer_size(self.socket_buffer)
                .and_then(|()| socket.set_recv_buffer_size(self.socket_buffer))
                .map_err(|e| io_error("SO_SNDBUF/SO_RCVBUF", e))?;
        }
        Ok(())
    }

    /// With several rails, a rail fails once its data stays unacknowledged for the rail
    /// timeout, instead of after TCP's many minutes of retransmission.
    pub(super) fn tune_rail(&self, stream: &TcpStream) -> Result<(), Error> {
        if self.rails == 1 {
            return Ok(());
        }
        socket2::SockRef::from(stream)
            .set_tcp_user_timeout(Some(self.rail_timeout))
            .map_err(|e| io_error("TCP_USER_TIMEOUT", e))
    }

    /// Starts connecting rail `rail` to `peer` at `addr`: the peer's own address, or — with
    /// `via_relay` naming its front node — the public address of the relay there; from local
    /// address `from` when given.
    pub(crate) fn dial(
        &mut self,
        (peer, rail): (u32, u16),
        addr: SocketAddr,
        from: Option<std::net::IpAddr>,
        via_relay: Option<&str>,
    ) -> Result<(), Error> {
        let cannot = |e| {
            io_error(
                &format!("cannot connect rail {rail} to rank {peer} at {addr}"),
                e,
            )
        };
        let mut stream = match from {
            None => TcpStream::connect(addr).map_err(cannot)?,
            Some(local) => connect_from(addr, local).map_err(|(bound, e)| {
                if bound {
                    cannot(e)
                } else {
                    io_error(&format!("cannot bind rail {rail} to {local}"), e)
                }
            })?,
        };
        self.tune(&stream)?;
        self.tune_rail(&stream)?;
        self.poll
            .registry()
            .register(
                &mut stream,
                Token(peer as usize | (rail as usize) << RAIL_SHIFT),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| io_error("epoll_ctl", e))?;
        self.grow(peer as usize + 1);
        let hs = Handshake::connect(
            self.key.clone(),
            self.job,
            UNIVERSE_CAP,
            self.me,
            peer,
            nonce(),
        )
        .on_rail(rail, self.rails);
        let pre = match via_relay {
            Some(_) => Pre::ViaRelay(RelayConnector::new(
                self.key.clone(),
                self.job,
                self.me,
                peer,
                nonce(),
            )),
            None => Pre::Done,
        };
        let mut conn = Conn::new(stream, addr, pre, hs, false);
        conn.compressor = crate::compress::LinkCompressor::new(self.compress);
        conn.via = via_relay.map(str::to_string);
        self.conns[peer as usize][rail as usize] = Some(conn);
        Ok(())
    }

    /// Moves rail `rail` to `peer` onto a new connection through the pinhole at `port` of its
    /// relay (the relay's answer to CONNECT), from the same local address; the CONNECT stays
    /// open until the target accepts.
    pub(super) fn through_pinhole(
        &mut self,
        peer: usize,
        rail: usize,
        port: u16,
    ) -> Result<(), Error> {
        let Some(conn) = self.conns[peer][rail].as_ref() else {
            return Ok(());
        };
        let addr = SocketAddr::new(conn.addr.ip(), port);
        let local = conn.stream.local_addr();
        let cannot = |e| {
            io_error(
                &format!("cannot connect rail {rail} to rank {peer} through the relay's pinhole at {addr}"),
                e,
            )
        };
        let mut stream = match local {
            Ok(local) => connect_from(addr, local.ip()).map_err(|(_, e)| cannot(e))?,
            Err(_) => TcpStream::connect(addr).map_err(cannot)?,
        };
        self.tune(&stream)?;
        self.tune_rail(&stream)?;
        let Some(conn) = self.conns[peer][rail].as_mut() else {
            return Ok(());
        };
        let registry = self.poll.registry();
        let _ = registry.deregister(&mut conn.stream);
        registry
            .register(
                &mut stream,
                Token(peer | rail << RAIL_SHIFT),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| io_error("epoll_ctl", e))?;
        conn.control = Some(std::mem::replace(&mut conn.stream, stream));
        conn.addr = addr;
        conn.connected = false;
        conn.readable = true;
        conn.start = 0;
        conn.end = 0;
        if let Pre::ViaRelay(c) = &mut conn.pre {
            c.through_pinhole();
        }
        Ok(())
    }
}

/// Starts a nonblocking connection to `addr` from local address `local` (any port). The error
/// says whether the bind had succeeded (false: binding to `local` failed).
fn connect_from(
    addr: SocketAddr,
    local: std::net::IpAddr,
) -> Result<TcpStream, (bool, std::io::Error)> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(|e| (true, e))?;
    socket.set_nonblocking(true).map_err(|e| (true, e))?;
    socket
        .bind(&SocketAddr::new(local, 0).into())
        .map_err(|e| (false, e))?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err((true, e)),
    }
    Ok(TcpStream::from_std(socket.into()))
}
