//! The connections of a bootstrap server, shared by the launcher's ([`crate::server`]) and a
//! node daemon's ([`crate::node`]): a listener and its connections on one `mio` poll, each
//! connection's challenge, its handshake deadline and its line buffers. What a line means is the
//! server's; this table only bounds strangers the same way for both:
//!
//! - at most [`MAX_PENDING`] connections in their handshake; one more is refused at once;
//! - a `hello` is due within the handshake timeout, else the connection is refused;
//! - a line longer than [`MAX_LINE`] ends the connection (refused if in its handshake);
//! - each refusal is a line on stderr (the first five of each 10 s, then one line summing up
//!   the rest: [`RefusalLog`]), `refused: <reason>` to the peer (one try) and the connection
//!   closed.
//!
//! Out of descriptors, the oldest connection in its handshake is refused to make room for the
//! one queued; with none, accepting is retried after 10 ms, not spun on (the edge-triggered
//! listener would not say again that connections wait).

use ferry_wire::pmi::{Reply, Request, MAX_LINE};
use ferry_wire::refusals::RefusalLog;
use mio::net::{TcpListener as MioListener, TcpStream as MioStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// Connections still in their handshake beyond this many are refused at once, so that a flood of
/// strangers cannot exhaust descriptors and memory.
pub(crate) const MAX_PENDING: usize = 256;

/// Whether a failed `accept` failed for want of descriptors or kernel memory.
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// The token of the listening socket; connections are numbered from 0.
pub(crate) const LISTENER: Token = Token(usize::MAX);
/// The token of the waker (each server says what wakes it).
pub(crate) const WAKER: Token = Token(usize::MAX - 1);

/// What a connection waits for before its next request is read (each server's own kinds);
/// [`Default`] is "nothing".
pub(crate) trait Waiting: Default {
    /// Whether the connection waits (its next line stays unread).
    fn waits(&self) -> bool;
}

/// Where a connection stands.
#[derive(Clone, Copy)]
pub(crate) enum Phase {
    /// Challenge sent, `hello` due by `deadline`.
    Handshake { nonce: [u8; 32], deadline: Instant },
    /// An authenticated rank.
    Session { rank: u32, finalized: bool },
}

/// One connection.
pub(crate) struct Conn<W> {
    pub(crate) stream: MioStream,
    pub(crate) peer: SocketAddr,
    pub(crate) phase: Phase,
    /// Bytes read, not yet a whole line.
    input: Vec<u8>,
    /// Replies not yet written.
    output: Vec<u8>,
    pub(crate) waiting: W,
    /// End of stream or an error: the connection goes once its requests are served.
    eof: bool,
}

impl<W> Conn<W> {
    /// Queues `reply` (written by the next [`ConnTable::step`]).
    pub(crate) fn reply(&mut self, reply: &Reply) {
        self.output.extend_from_slice(reply.encode().as_bytes());
    }
}

/// What [`ConnTable::step`] found on a connection.
pub(crate) enum Step {
    /// A whole request line, without its newline.
    Line(Vec<u8>),
    /// Nothing more for now: the socket has no more bytes, or the connection waits.
    Idle,
    /// The connection must be refused (still in its handshake) for this reason.
    Refuse(String),
    /// Rank `rank` sent a line longer than [`MAX_LINE`]: its connection is to be closed.
    TooLong(u32),
    /// The connection has ended (or is gone): it is to be closed.
    Ended,
}

/// A listener and its connections.
pub(crate) struct ConnTable<W> {
    poll: Poll,
    listener: MioListener,
    handshake_timeout: Duration,
    conns: Vec<Option<Conn<W>>>,
    free: Vec<usize>,
    /// Connections in their handshake.
    pending: usize,
    /// Accepting failed (out of descriptors): try again then.
    accept_again: Option<Instant>,
    /// Who logs: `ferry run` or `ferry node`.
    who: &'static str,
    /// Rate limit of the lines about refused connections.
    refusals: RefusalLog,
    /// Whether accepting has failed for want of descriptors (that is said once).
    said_out_of_descriptors: bool,
}

/// What the rate limit held back is summed up when the server goes.
impl<W> Drop for ConnTable<W> {
    fn drop(&mut self) {
        if let Some(summary) = self.refusals.finish() {
            eprintln!("{}: {summary}", self.who);
        }
    }
}

impl<W: Waiting> ConnTable<W> {
    /// Watches `listener`; `who` names the server in its log lines. Returns the waker of the
    /// poll too.
    pub(crate) fn new(
        listener: TcpListener,
        handshake_timeout: Duration,
        who: &'static str,
    ) -> io::Result<(ConnTable<W>, Waker)> {
        listener.set_nonblocking(true)?;
        let mut listener = MioListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        let table = ConnTable {
            poll,
            listener,
            handshake_timeout,
            conns: Vec::new(),
            free: Vec::new(),
            pending: 0,
            accept_again: None,
            who,
            refusals: RefusalLog::default(),
            said_out_of_descriptors: false,
        };
        Ok((table, waker))
    }

    /// Waits for events until the next handshake deadline or accept retry (or for ever).
    pub(crate) fn poll(&mut self, events: &mut Events) -> io::Result<()> {
        let timeout = self
            .next_deadline()
            .map(|at| at.saturating_duration_since(Instant::now()) + Duration::from_millis(1));
        match self.poll.poll(events, timeout) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
            _ => Ok(()),
        }
    }

    /// The earliest handshake deadline or accept retry.
    fn next_deadline(&self) -> Option<Instant> {
        let handshakes = (self.pending > 0)
            .then(|| {
                self.conns
                    .iter()
                    .flatten()
                    .filter_map(|c| match c.phase {
                        Phase::Handshake { deadline, .. } => Some(deadline),
                        Phase::Session { .. } => None,
                    })
                    .min()
            })
            .flatten();
        match (handshakes, self.accept_again) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Connection `index`, if it is open.
    pub(crate) fn get(&mut self, index: usize) -> Option<&mut Conn<W>> {
        self.conns.get_mut(index).and_then(Option::as_mut)
    }

    /// Connection `index`, if it is open, to look at.
    pub(crate) fn peek(&self, index: usize) -> Option<&Conn<W>> {
        self.conns.get(index).and_then(Option::as_ref)
    }

    /// Queues `reply` on connection `index`, if it is open.
    pub(crate) fn reply(&mut self, index: usize, reply: &Reply) {
        if let Some(conn) = self.get(index) {
            conn.reply(reply);
        }
    }

    /// Indices of every open connection.
    pub(crate) fn open(&self) -> Vec<usize> {
        (0..self.conns.len())
            .filter(|&i| self.conns[i].is_some())
            .collect()
    }

    fn refuse_peer(&mut self, peer: SocketAddr, reason: &str) {
        let line = format!("refused a bootstrap connection from {peer}: {reason}");
        for line in self.refusals.note(Instant::now(), line) {
            eprintln!("{}: {line}", self.who);
        }
    }

    /// Prints the summary of the refusals held back, once their window has ended.
    pub(crate) fn flush_refusals(&mut self) {
        if let Some(summary) = self.refusals.flush(Instant::now()) {
            eprintln!("{}: {summary}", self.who);
        }
    }

    /// Refuses the connection longest in its handshake, to free its descriptor for one that
    /// waits in the listener's queue; returns whether there was one.
    fn refuse_oldest_pending(&mut self, why: &str) -> bool {
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c.as_ref()?.phase {
                Phase::Handshake { deadline, .. } => Some((deadline, i)),
                Phase::Session { .. } => None,
            })
            .min();
        match oldest {
            Some((_, index)) => self.refuse(index, why).is_some(),
            None => false,
        }
    }

    /// Accepts what is waiting (also when an accept retry is due); returns the new connections,
    /// their challenge queued, for the caller to drive.
    pub(crate) fn accept(&mut self) -> Vec<usize> {
        let mut accepted = Vec::new();
        self.accept_again = None;
        loop {
            let (mut stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return accepted,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) if out_of_descriptors(&e) && !self.said_out_of_descriptors => {
                    // Once, naming the limit and what to raise: the refusals that follow
                    // (each rank's connection) only say "out of descriptors".
                    self.said_out_of_descriptors = true;
                    eprintln!(
                        "{}: cannot accept a rank's bootstrap connection: {}",
                        self.who,
                        crate::limits::explain(&e)
                    );
                    continue;
                }
                Err(e)
                    if out_of_descriptors(&e)
                        && self.refuse_oldest_pending(&format!(
                            "out of descriptors ({e}); it was the oldest in its handshake"
                        )) =>
                {
                    continue
                }
                Err(_) => {
                    // Try again shortly rather than spinning.
                    self.accept_again = Some(Instant::now() + Duration::from_millis(10));
                    return accepted;
                }
            };
            if self.pending >= MAX_PENDING {
                self.refuse_peer(peer, "too many connections in their handshake");
                continue;
            }
            let mut nonce = [0u8; 32];
            if let Err(e) = crate::sys::random(&mut nonce) {
                self.refuse_peer(peer, &format!("no randomness for a nonce: {e}"));
                continue;
            }
            let _ = stream.set_nodelay(true);
            let index = self.free.pop().unwrap_or(self.conns.len());
            let registered = self.poll.registry().register(
                &mut stream,
                Token(index),
                Interest::READABLE | Interest::WRITABLE,
            );
            if registered.is_err() {
                self.free.push(index);
                self.refuse_peer(peer, "cannot watch the connection");
                continue;
            }
            let mut conn = Conn {
                stream,
                peer,
                phase: Phase::Handshake {
                    nonce,
                    deadline: Instant::now() + self.handshake_timeout,
                },
                input: Vec::new(),
                output: Vec::new(),
                waiting: W::default(),
                eof: false,
            };
            conn.reply(&Reply::Challenge { nonce });
            self.pending += 1;
            match self.conns.get_mut(index) {
                Some(slot) => *slot = Some(conn),
                None => self.conns.push(Some(conn)),
            }
            accepted.push(index);
        }
    }

    /// Whether an accept retry is due.
    pub(crate) fn accept_due(&self) -> bool {
        self.accept_again.is_some_and(|at| Instant::now() >= at)
    }

    /// Connections whose `hello` is overdue, with the reason to refuse them.
    pub(crate) fn overdue(&self) -> (Vec<usize>, String) {
        if self.pending == 0 {
            return (Vec::new(), String::new());
        }
        let now = Instant::now();
        let overdue = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c.as_ref()?.phase {
                Phase::Handshake { deadline, .. } if now >= deadline => Some(i),
                _ => None,
            })
            .collect();
        let reason = format!("no hello within {} s", self.handshake_timeout.as_secs_f64());
        (overdue, reason)
    }

    /// Connection `index` has authenticated as `rank`.
    pub(crate) fn admit(&mut self, index: usize, rank: u32) {
        if let Some(conn) = self.get(index) {
            conn.phase = Phase::Session {
                rank,
                finalized: false,
            };
            self.pending -= 1;
        }
    }

    /// The rank of connection `index` has called MPI_Finalize.
    pub(crate) fn finalize(&mut self, index: usize, rank: u32) {
        if let Some(conn) = self.get(index) {
            conn.phase = Phase::Session {
                rank,
                finalized: true,
            };
        }
    }

    /// Logs why connection `index` is refused, tells it (one try: a peer that does not read
    /// gets nothing more) and takes it out (see [`ConnTable::take`]).
    pub(crate) fn refuse(&mut self, index: usize, reason: &str) -> Option<Conn<W>> {
        let peer = self.peek(index)?.peer;
        self.refuse_peer(peer, reason);
        if let Some(conn) = self.get(index) {
            conn.reply(&Reply::Error(format!("refused: {reason}")));
            let _ = write_out(&mut conn.stream, &mut conn.output);
        }
        self.take(index)
    }

    /// Closes connection `index` and hands it back (its phase says whose it was); its number
    /// goes to the next connection, so the caller forgets it wherever it is kept.
    pub(crate) fn take(&mut self, index: usize) -> Option<Conn<W>> {
        let mut conn = self.conns.get_mut(index).and_then(Option::take)?;
        let _ = self.poll.registry().deregister(&mut conn.stream);
        let _ = conn.stream.shutdown(Shutdown::Both);
        self.free.push(index);
        if let Phase::Handshake { .. } = conn.phase {
            self.pending -= 1;
        }
        Some(conn)
    }

    /// Writes what is due on connection `index`, then reads until a whole line is there (unless
    /// the connection waits) and says what came of it.
    pub(crate) fn step(&mut self, index: usize) -> Step {
        let mut chunk = [0u8; 4096];
        let Some(conn) = self.get(index) else {
            return Step::Ended;
        };
        loop {
            if write_out(&mut conn.stream, &mut conn.output).is_err() {
                conn.eof = true;
                conn.input.clear();
            }
            if conn.waiting.waits() {
                return Step::Idle;
            }
            let newline = conn.input.iter().position(|&b| b == b'\n');
            let too_long = match newline {
                Some(pos) => pos > MAX_LINE,
                None => conn.input.len() > MAX_LINE,
            };
            if too_long {
                return match conn.phase {
                    Phase::Handshake { .. } => {
                        Step::Refuse(format!("line longer than {MAX_LINE} bytes"))
                    }
                    Phase::Session { rank, .. } => Step::TooLong(rank),
                };
            }
            if let Some(pos) = newline {
                let mut line: Vec<u8> = conn.input.drain(..=pos).collect();
                line.pop();
                return Step::Line(line);
            }
            if conn.eof {
                return match conn.phase {
                    Phase::Handshake { .. } => Step::Refuse("closed before hello".into()),
                    Phase::Session { .. } => Step::Ended,
                };
            }
            match conn.stream.read(&mut chunk) {
                // A partial last line is dropped: it was never a complete request.
                Ok(0) => conn.eof = true,
                Ok(n) => conn.input.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Idle,
                Err(_) => {
                    conn.eof = true;
                    conn.input.clear();
                }
            }
        }
    }
}

/// A bootstrap server's event loop over its [`ConnTable`], the same for the launcher's and a
/// node daemon's: what a line means, what else wakes the loop and what a closed session tells
/// whom are each server's.
pub(crate) trait Serve {
    /// What a connection of this server waits for.
    type Waits: Waiting;

    /// The server's connections.
    fn table(&mut self) -> &mut ConnTable<Self::Waits>;

    /// The `hello` of connection `index`, challenged with `nonce`: admits the rank or refuses
    /// the connection.
    fn hello(&mut self, index: usize, nonce: [u8; 32], line: &[u8]);

    /// Serves a request of `rank` on connection `index` (or says why its line is none).
    fn request(&mut self, index: usize, rank: u32, request: Result<Request, String>);

    /// Forgets connection `index` wherever the server keeps it: its number goes to the next
    /// connection, and nothing may still answer it.
    fn forget(&mut self, index: usize);

    /// The connection of `rank` has closed (after MPI_Finalize when `finalized`).
    fn session_closed(&mut self, rank: u32, finalized: bool);

    /// What came from outside the loop, taken after each poll; `false` stops the loop.
    fn between_polls(&mut self) -> bool;

    /// The waker's event.
    fn woken(&mut self) {}

    /// The loop has stopped: on shutdown, or when polling failed.
    fn stop(&mut self) {}

    /// Serves until shutdown or until polling fails.
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            if let Err(e) = self.table().poll(&mut events) {
                eprintln!("{}: the bootstrap server failed: {e}", self.table().who);
                return self.stop();
            }
            if !self.between_polls() {
                return self.stop();
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => self.woken(),
                    Token(index) => self.drive(index),
                }
            }
            if self.table().accept_due() {
                self.accept();
            }
            let (overdue, reason) = self.table().overdue();
            for index in overdue {
                self.refuse(index, &reason);
            }
            self.table().flush_refusals();
        }
    }

    /// Serves one line of connection `index`: its `hello`, or a request of its rank.
    fn serve_line(&mut self, index: usize, line: &[u8]) {
        let Some(conn) = self.table().peek(index) else {
            return;
        };
        let rank = match conn.phase {
            Phase::Handshake { nonce, .. } => return self.hello(index, nonce, line),
            Phase::Session { rank, .. } => rank,
        };
        let request = std::str::from_utf8(line)
            .map_err(|_| "request is not UTF-8 text".to_string())
            .and_then(|text| Request::parse(text).map_err(|e| e.to_string()));
        self.request(index, rank, request)
    }

    /// Takes the connections waiting on the listener.
    fn accept(&mut self) {
        for index in self.table().accept() {
            self.drive(index);
        }
    }

    /// Refuses connection `index` (see [`ConnTable::refuse`]).
    fn refuse(&mut self, index: usize, reason: &str) {
        if self.table().refuse(index, reason).is_some() {
            self.forget(index);
        }
    }

    /// Drops connection `index`, telling [`Serve::session_closed`] when it was a rank's.
    fn close(&mut self, index: usize) {
        let Some(conn) = self.table().take(index) else {
            return;
        };
        self.forget(index);
        if let Phase::Session { rank, finalized } = conn.phase {
            self.session_closed(rank, finalized);
        }
    }

    /// Writes what is due, reads what came, serves whole lines while the connection does not
    /// wait; closes the connection when it has ended.
    fn drive(&mut self, index: usize) {
        loop {
            match self.table().step(index) {
                Step::Line(line) => self.serve_line(index, &line),
                Step::Idle => return,
                Step::Refuse(reason) => return self.refuse(index, &reason),
                Step::TooLong(rank) => {
                    eprintln!(
                        "{}: rank {rank} sent a bootstrap line longer than {MAX_LINE} bytes; \
                         closing its connection",
                        self.table().who
                    );
                    return self.close(index);
                }
                Step::Ended => return self.close(index),
            }
        }
    }
}

/// Writes as much of `output` (replies not yet written) as the nonblocking `stream` takes;
/// what it does not take stays for its next writable event.
fn write_out(stream: &mut MioStream, output: &mut Vec<u8>) -> io::Result<()> {
    while !output.is_empty() {
        match stream.write(output) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                output.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Nothing;
    impl Waiting for Nothing {
        fn waits(&self) -> bool {
            false
        }
    }

    /// A flood whose handshakes all run out is refused connection by connection, but logged
    /// as a burst of lines and one summary.
    #[test]
    fn refusals_of_a_flood_are_rate_limited() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (mut table, _waker) =
            ConnTable::<Nothing>::new(listener, Duration::ZERO, "test").unwrap();
        let flood: Vec<_> = (0..40)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let mut accepted = 0;
        while accepted < flood.len() {
            let mut events = Events::with_capacity(64);
            table.poll(&mut events).unwrap();
            accepted += table.accept().len();
        }
        let (overdue, reason) = table.overdue();
        assert_eq!(overdue.len(), 40);
        for index in overdue {
            assert!(table.refuse(index, &reason).is_some());
        }
        assert_eq!(table.refusals.held_back(), 35);
        assert!(table.open().is_empty());
    }
}
