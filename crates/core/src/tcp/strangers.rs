//! Strangers: accepted connections that have not authenticated yet, bounded in number and time.
//!
//! Out of descriptors, `accept` leaves the connection queued and the edge-triggered listener
//! would never fire again: the oldest stranger is closed to make room, or, with none, the
//! newcomer is accepted through a spare descriptor and closed at once, so the queue keeps
//! draining; failing both, accepting is tried again at the next poll.

use super::*;
use std::os::fd::{AsRawFd, OwnedFd};

/// How long a poll waits at most while accepting is to be tried again.
pub(super) const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// Whether a failed `accept` failed for want of descriptors or kernel memory.
pub(super) fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// A descriptor of `/dev/null` held in reserve for [`Spare::turn_away_one`].
pub(super) struct Spare(Option<OwnedFd>);

impl Spare {
    pub(super) fn open() -> Spare {
        Spare(Self::dev_null())
    }

    fn dev_null() -> Option<OwnedFd> {
        std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
    }

    /// Frees the spare, accepts one queued connection and closes it, takes the spare again.
    /// Returns whether a connection was taken off the queue.
    pub(super) fn turn_away_one(&mut self, listener: &impl AsRawFd) -> bool {
        if self.0.take().is_none() {
            return false;
        }
        // SAFETY: accept4 on the listener's open descriptor with null address pointers; the
        // descriptor it returns is ours and closed at once.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by accept4 and is owned by nobody else.
            unsafe { libc::close(fd) };
        }
        self.0 = Self::dev_null();
        fd >= 0
    }
}

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
        if live >= self.max_strangers {
            let max = self.max_strangers;
            self.close_oldest_stranger(&format!(
                "{max} connections were waiting to authenticate (FERRY_TCP_STRANGERS)"
            ));
        }
    }

    /// Closes the oldest stranger, saying `why`; returns whether there was one.
    fn close_oldest_stranger(&mut self, why: &str) -> bool {
        let oldest = self
            .strangers
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (c.opened, i)))
            .min();
        let Some(mut conn) = oldest.and_then(|(_, index)| self.strangers[index].take()) else {
            return false;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.log_stranger(format!(
            "closed connection from {}: {why}, it was the oldest",
            conn.addr
        ));
        true
    }

    pub(super) fn accept_all(&mut self) -> bool {
        let mut progressed = false;
        self.accept_again = false;
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
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
                Err(e) if out_of_descriptors(&e) => {
                    progressed = true;
                    if self.close_oldest_stranger(&format!("out of descriptors ({e})")) {
                        continue;
                    }
                    if self.spare.turn_away_one(&self.listener) {
                        self.log_stranger(format!(
                            "closed a connection at once: out of descriptors ({e})"
                        ));
                        continue;
                    }
                    self.log_stranger(format!(
                        "accept failed: {}; trying again",
                        crate::limits::explain(&e)
                    ));
                    self.accept_again = true;
                    return progressed;
                }
                Err(e) => {
                    // Keep the job going; look at the queue again at the next poll.
                    self.log_stranger(format!("accept failed: {e}; trying again"));
                    self.accept_again = true;
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
