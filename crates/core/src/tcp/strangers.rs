//! Strangers: accepted connections that have not authenticated yet, bounded in number and time.

use super::*;

impl TcpTransport {
    /// Keeps at most `max` connections waiting to authenticate (strangers), but never fewer
    /// than two per peer and rail, so that a whole job connecting at start-up is not shed.
    pub(crate) fn set_max_strangers(&mut self, max: usize) {
        let peers = self.conns.len().max(self.world.end as usize);
        self.max_strangers = max.max(2 * peers * self.rails as usize);
    }

    /// One line about a stranger, through the rate limit.
    pub(super) fn log_stranger(&mut self, line: String) {
        let me = self.me;
        for line in self.stranger_log.note(Instant::now(), line) {
            eprintln!("ferry: rank {me}: {line}");
        }
    }

    /// Closes the oldest stranger if `max_strangers` are waiting (before one more is taken).
    pub(super) fn shed_oldest_stranger(&mut self) {
        let live = self.strangers.iter().flatten().count();
        if live < self.max_strangers {
            return;
        }
        let oldest = self
            .strangers
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (c.opened, i)))
            .min();
        if let Some((_, index)) = oldest {
            if let Some(mut conn) = self.strangers[index].take() {
                let _ = self.poll.registry().deregister(&mut conn.stream);
                let max = self.max_strangers;
                self.log_stranger(format!(
                    "closed connection from {}: {max} connections were waiting to authenticate (FERRY_TCP_STRANGERS), it was the oldest",
                    conn.addr
                ));
            }
        }
    }

    pub(super) fn accept_all(&mut self) -> bool {
        let mut progressed = false;
        loop {
            match self.listener.accept() {
                Ok((mut stream, addr)) => {
                    progressed = true;
                    self.shed_oldest_stranger();
                    if let Err(e) = self.tune(&stream) {
                        eprintln!("ferry: rank {}: connection from {addr}: {e}", self.me);
                    }
                    let index = self
                        .strangers
                        .iter()
                        .position(Option::is_none)
                        .unwrap_or_else(|| {
                            self.strangers.push(None);
                            self.strangers.len() - 1
                        });
                    if let Err(e) = self.poll.registry().register(
                        &mut stream,
                        Token(STRANGER_BASE + index),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        eprintln!(
                            "ferry: rank {}: cannot watch connection from {addr}: {e}",
                            self.me
                        );
                        continue;
                    }
                    let hs = Handshake::accept(
                        self.key.clone(),
                        self.job,
                        UNIVERSE_CAP,
                        self.me,
                        nonce(),
                    )
                    .with_rails(self.rails);
                    let sniff = Pre::Sniff(RelayAcceptor::new(self.key.clone(), self.job, self.me));
                    self.strangers[index] = Some(Conn::new(stream, addr, sniff, hs, true));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return progressed,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: log and keep the job going; the listener stays armed.
                    eprintln!("ferry: rank {}: accept failed: {e}", self.me);
                    return progressed;
                }
            }
        }
    }

    /// Advances handshakes of accepted connections; authenticated ones become peers.
    pub(super) fn drive_strangers(&mut self) -> bool {
        let mut progressed = false;
        for index in 0..self.strangers.len() {
            let Some(conn) = self.strangers[index].as_mut() else {
                continue;
            };
            let outcome = if conn.opened.elapsed() > HANDSHAKE_TIMEOUT {
                Err(format!(
                    "no handshake within {} s",
                    HANDSHAKE_TIMEOUT.as_secs()
                ))
            } else {
                conn.drive_handshake(&mut self.seen)
            };
            match outcome {
                Ok(None) => {}
                Ok(Some((rank, rail))) => {
                    progressed = true;
                    let Some(mut conn) = self.strangers[index].take() else {
                        continue;
                    };
                    // A process of another world (spawned) may connect before we hear of it.
                    self.grow(rank as usize + 1);
                    if self.conns[rank as usize][rail as usize].is_some() {
                        eprintln!(
                            "ferry: rank {}: refused connection from {}: rank {rank} is already connected on rail {rail}",
                            self.me, conn.addr
                        );
                        let _ = self.poll.registry().deregister(&mut conn.stream);
                        continue;
                    }
                    if let Err(e) = self.tune_rail(&conn.stream) {
                        eprintln!("ferry: rank {}: rail {rail} of rank {rank}: {e}", self.me);
                    }
                    if let Err(e) = self.poll.registry().reregister(
                        &mut conn.stream,
                        Token(rank as usize | (rail as usize) << RAIL_SHIFT),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        eprintln!("ferry: rank {}: cannot watch rank {rank}: {e}", self.me);
                        continue;
                    }
                    // Bytes may already wait in the kernel; edge-triggered epoll will not repeat.
                    conn.readable = true;
                    if conn.relayed {
                        conn.via = self.relay_of(conn.addr);
                    }
                    conn.compressor = crate::compress::LinkCompressor::new(self.compress);
                    self.conns[rank as usize][rail as usize] = Some(conn);
                    if !self.punch_log.is_empty() {
                        // The decider came through the relay: our attempt, if any, is over.
                        self.link_up(rank, false);
                    }
                }
                Err(why) => {
                    progressed = true;
                    if let Some(mut conn) = self.strangers[index].take() {
                        let _ = self.poll.registry().deregister(&mut conn.stream);
                        self.log_stranger(format!("refused connection from {}: {why}", conn.addr));
                    }
                }
            }
        }
        // A window's held-back lines are summed up even when no new stranger comes.
        if let Some(summary) = self.stranger_log.flush(Instant::now()) {
            eprintln!("ferry: rank {}: {summary}", self.me);
        }
        progressed
    }
}
