//! The I/O of `ferry relay`: a mio (epoll) loop around [`crate::engine::Relay`].
//!
//! One listening socket; every accepted or dialled connection is a mio source whose token is
//! its [`ConnId`]. Until a connection is paired its bytes go to the engine; once paired, bytes
//! flow both ways with `splice(2)` through one pipe per direction (socket → pipe → socket, no
//! copy to user space), or through a user-space buffer with `--copy buffered`. Each wake-up
//! moves at most [`BUDGET`] bytes per pair and direction before others get a turn.
//!
//! With `--copy sockmap` a pair is forwarded by the kernel instead ([`crate::sockmap`]): once
//! the relay's own bytes for the pair (ESTABLISHED, early data) are written, and before the
//! relay reads a single forwarded byte, both sockets enter the verdict map, whose program sends
//! what arrives on one to the other. Bytes that arrived before are still in the receive queues
//! and go first, so none is lost or reordered. The relay then watches the sockets only for a
//! closed read side and errors (`EPOLLRDHUP`, no `EPOLLIN`: forwarded bytes do not wake it):
//! after a FIN it waits until every byte the program counted for that direction has entered
//! the other socket (TCP_INFO) and shuts that socket's write side; both directions shut or an
//! error closes the pair. Bytes and idleness come from the program's per-socket counters, read
//! when a timer is due and for the status line. If the program cannot be loaded (no privilege,
//! a kernel without sockmap) the relay says so once and splices.
//!
//! Signals: SIGTERM or SIGINT shut down cleanly (connections being set up are refused, pairs
//! closed, a last status line printed, exit status 0); SIGUSR1 prints a status line to stderr.

use crate::descriptors::{self, Spare};
use crate::engine::{Action, Config, ConnId, Relay};
use crate::pinhole::Pinholes;
use crate::sockmap::{self, AddError, Forwarder, KernelPair};
use ferry_wire::{relay, JobKey};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use rustix::pipe::{splice, SpliceFlags};
use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use thiserror::Error;

const LISTENER: Token = Token(0);
const STOP: Token = Token(1);
const STATUS: Token = Token(2);
/// Tokens of connections are their ids shifted past the fixed tokens.
const FIRST_CONN_TOKEN: usize = 3;

fn token(id: ConnId) -> Token {
    Token(id.0 as usize + FIRST_CONN_TOKEN)
}
/// Bytes one pair direction may move per wake-up before other connections get a turn.
pub const BUDGET: usize = 4 << 20;
/// Size of each forwarding pipe (and of the buffer in buffered mode).
pub const PIPE_SIZE: usize = 1 << 20;
// `relay::HELD_IN_RELAY` counts one pipe of at most 1 MiB.
const _: () = assert!(PIPE_SIZE <= 1 << 20);
/// How often a kernel-forwarded pair whose one side has closed is looked at until the last
/// bytes in that direction have left the relay.
const DRAIN_LOOK: Duration = Duration::from_millis(1);

/// Fixes the socket's buffers at [`relay::FORWARD_SOCKET_BUFFER`] instead of autotuning, so
/// that what this relay holds of a connection stays below [`relay::HELD_IN_RELAY`]: ranks keep
/// that much of what they sent through a relay, to send it again on another rail if the relay
/// dies. Failure only loses the bound (the kernel's default stays), so it is not an error.
fn bound_buffers(stream: &TcpStream) {
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(stream, relay::FORWARD_SOCKET_BUFFER);
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(stream, relay::FORWARD_SOCKET_BUFFER);
}

/// How paired connections are forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CopyMode {
    /// `splice(2)` through a pipe per direction; buffered copy if pipes cannot be made.
    Splice,
    /// `read`/`write` through a user-space buffer.
    Buffered,
    /// In the kernel: a BPF sockmap with an `sk_skb` verdict program redirects each socket's
    /// bytes to the other's egress; the relay process leaves the data path. Splice if the
    /// program cannot be loaded (needs root or CAP_BPF + CAP_NET_ADMIN). The kernel holds
    /// bytes for a slow destination without limit (module `sockmap`); not the default.
    Sockmap,
    /// Not by the relay at all: each gated connection gets a one-shot DNAT pinhole on the
    /// front node (module `pinhole`) and the client reconnects through it, so the front's own
    /// packet forwarding carries the bytes. Splice if the rules cannot be made (needs root or
    /// CAP_NET_ADMIN, and `iptables-restore`). The relay sees neither the bytes nor the end of
    /// such a connection: they count in no limit, timeout or byte counter of the relay.
    Nat,
}

/// An IPv4 or IPv6 network, `ADDR/BITS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(text: &str) -> Result<Cidr, String> {
        let (a, b) = text.split_once('/').unwrap_or((text, ""));
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = if b.is_empty() {
            max
        } else {
            b.parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("{b:?} is not a prefix length up to {max}"))?
        };
        Ok(Cidr { addr, bits })
    }
}

impl Cidr {
    /// Whether `ip` is in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Arguments of `ferry relay`.
#[derive(Debug, Clone, clap::Args)]
pub struct RelayArgs {
    /// Address and port to listen on: the front node's fixed relay port.
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:7390")]
    pub listen: SocketAddr,
    /// Network whose hosts may register targets (repeatable; default 10/8, 172.16/12,
    /// 192.168/16 and 127/8).
    #[arg(long = "inside", value_name = "CIDR")]
    pub inside: Vec<Cidr>,
    /// Directory of job keys: `<job id, 16 hex digits>.key` holding the job's relay key as 64
    /// hex digits, readable by its owner only. Read at each registration and CONNECT.
    #[arg(long, value_name = "DIR")]
    pub jobs_dir: Option<PathBuf>,
    /// A job's relay key file, `JOBID=FILE` with JOBID in hex (repeatable).
    #[arg(long = "job", value_name = "JOBID=FILE")]
    pub jobs: Vec<String>,
    /// Serve one job (JOBID in hex) whose relay key is the first line of standard input (64
    /// hex digits), and end when standard input closes: how `ferry run --grid` runs the relay
    /// of a real front node over ssh, so that the relay ends with the launcher's connection.
    #[arg(long, value_name = "JOBID")]
    pub key_stdin: Option<String>,
    /// Relayed connections one job may have at a time.
    #[arg(long, default_value_t = 256)]
    pub max_per_job: usize,
    /// Connections of all kinds the relay keeps at a time (a flood of strangers cannot exhaust
    /// descriptors). When they are all open, a new connection takes the place of the oldest one
    /// that has not registered or connected yet; with none of those it is closed at once. Fewer
    /// if the descriptor limit (raised to the hard limit at start) has no room for this many,
    /// at 3 descriptors a connection and 32 for the relay.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Connections that have not registered or connected yet kept at a time; one more closes
    /// the oldest of them. Keeps room among --max-connections for genuine traffic.
    #[arg(long, default_value_t = 1024)]
    pub max_strangers: usize,
    /// Seconds a connection has to register or be paired.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub handshake_timeout: f64,
    /// Seconds without traffic after which a forwarded pair is closed.
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub idle_timeout: f64,
    /// How forwarded bytes are moved.
    #[arg(long, value_enum, default_value_t = CopyMode::Splice)]
    pub copy: CopyMode,
    /// Print a status line every SECS seconds (also on SIGUSR1).
    #[arg(long, value_name = "SECS")]
    pub stats: Option<f64>,
    /// Microseconds the relay keeps polling without sleeping after its last event. A relay that
    /// sleeps between the messages of a conversation pays an idle core's wake-up for each: in
    /// the testbed's VM a 1-byte round trip through the relay took 61-65 us with 0 and 46-52
    /// with 100 (direct: 8; 22-26 with every core kept busy). 0 sleeps at once.
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 100)]
    pub spin_us: u64,
}

/// Why the relay could not start or run.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// A flag's value cannot be used.
    #[error("{0}")]
    Usage(String),
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The event loop failed.
    #[error("event loop: {0}")]
    Poll(std::io::Error),
}

/// Counters of the I/O side.
#[derive(Debug, Default, Clone)]
pub struct IoCounters {
    /// Bytes forwarded client → target.
    pub bytes_in: u64,
    /// Bytes forwarded target → client.
    pub bytes_out: u64,
    /// Socket or pipe errors on forwarded connections, failed dials.
    pub errors: u64,
    /// Connections closed at accept because `--max-connections` were open.
    pub turned_away: u64,
    /// Pairs forwarded with splice.
    pub spliced_pairs: u64,
    /// Pairs forwarded with the buffer.
    pub buffered_pairs: u64,
    /// Pairs forwarded in the kernel (sockmap).
    pub sockmap_pairs: u64,
}

struct Sock {
    stream: TcpStream,
    /// Bytes to write before anything forwarded (relay frames, early data).
    out: Vec<u8>,
    connecting: bool,
    close_when_flushed: bool,
    pair: Option<u64>,
}

enum Mover {
    Pipe {
        r: OwnedFd,
        w: OwnedFd,
        held: usize,
    },
    Buffer {
        buf: Vec<u8>,
        start: usize,
        end: usize,
    },
}

struct Direction {
    from: ConnId,
    to: ConnId,
    mover: Mover,
    eof: bool,
    shut: bool,
}

/// Where a pair's bytes are moved.
enum Path {
    /// By this process (splice or buffer).
    User,
    /// Waiting for the relay's own bytes to the pair to be written, then into the kernel.
    ToKernel,
    /// By the kernel's verdict program.
    Kernel {
        keys: KernelPair,
        /// `sockmap::written` of the client and the target socket at the switch.
        base: [u64; 2],
        /// The program's counters (client, target) already added to the I/O counters.
        seen: [u64; 2],
    },
}

struct Pair {
    dirs: [Direction; 2],
    path: Path,
}

fn make_mover(mode: CopyMode) -> Mover {
    if mode == CopyMode::Splice {
        if let Ok((r, w)) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::NONBLOCK | rustix::pipe::PipeFlags::CLOEXEC,
        ) {
            // A larger pipe moves more per system call; the default (64 KiB) still works.
            let _ = rustix::pipe::fcntl_setpipe_size(&w, PIPE_SIZE);
            return Mover::Pipe { r, w, held: 0 };
        }
    }
    Mover::Buffer {
        buf: vec![0; PIPE_SIZE],
        start: 0,
        end: 0,
    }
}

enum Pumped {
    /// Waiting for readiness; `moved` bytes went through.
    Idle { moved: usize },
    /// The budget ran out with more to move.
    More { moved: usize },
    /// The direction failed.
    Failed,
}

/// The daemon: listener, engine, sockets and pairs.
pub struct Daemon {
    poll: Poll,
    listener: TcpListener,
    stop_signals: mio::net::UnixStream,
    status_signals: mio::net::UnixStream,
    engine: Relay,
    socks: HashMap<ConnId, Sock>,
    pairs: HashMap<u64, Pair>,
    again: HashSet<u64>,
    inside: Vec<Cidr>,
    jobs_dir: Option<PathBuf>,
    jobs: HashMap<u64, PathBuf>,
    copy: CopyMode,
    /// The verdict program and maps, with `--copy sockmap` when they could be loaded.
    kernel: Option<Forwarder>,
    /// The pinhole chains, with `--copy nat` when they could be made.
    pinholes: Option<Pinholes<ConnId>>,
    /// Kernel pairs with a FIN whose last bytes are still on their way to the other socket.
    draining: HashSet<u64>,
    max_connections: usize,
    /// Taken to accept and close a connection when descriptors run out.
    spare: Spare,
    /// Accepting failed and the queue could not be drained: try again then.
    accept_again: Option<Instant>,
    stats_every: Option<Duration>,
    /// How long to keep polling after the last event (`--spin-us`).
    spin: Duration,
    io: IoCounters,
    started: Instant,
}

fn secs(name: &str, v: f64) -> Result<Duration, DaemonError> {
    crate::ranges::secs(name, v, 0.0)
}

/// Reads a relay key file: 64 hex digits, not readable by group or others.
pub fn read_key_file(path: &std::path::Path) -> Option<JobKey> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.permissions().mode() & 0o077 != 0 {
        eprintln!(
            "ferry relay: ignoring {}: readable by others (chmod 600)",
            path.display()
        );
        return None;
    }
    JobKey::from_hex(&std::fs::read_to_string(path).ok()?)
}

impl Daemon {
    /// Opens the listening socket and the signal handlers.
    pub fn new(args: &RelayArgs) -> Result<Daemon, DaemonError> {
        crate::ranges::check(args)?;
        let max_connections = Self::room_for(args.max_connections)?;
        let mut config = Config {
            max_per_job: args.max_per_job,
            handshake_timeout: secs("handshake-timeout", args.handshake_timeout)?,
            idle_timeout: secs("idle-timeout", args.idle_timeout)?,
            pinholes: false,
            max_strangers: args.max_strangers.min(max_connections),
        };
        let mut jobs = HashMap::new();
        for spec in &args.jobs {
            let (id, file) = spec
                .split_once('=')
                .ok_or_else(|| DaemonError::Usage(format!("--job {spec:?} is not JOBID=FILE")))?;
            let id = u64::from_str_radix(id.trim_start_matches("0x"), 16).map_err(|_| {
                DaemonError::Usage(format!("--job {spec:?}: {id:?} is not a hex job id"))
            })?;
            let path = PathBuf::from(file);
            if read_key_file(&path).is_none() {
                return Err(DaemonError::Usage(format!(
                    "--job {spec:?}: {file} does not hold a relay key (64 hex digits, mode 600)"
                )));
            }
            jobs.insert(id, path);
        }
        let inside = if args.inside.is_empty() {
            [
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "127.0.0.0/8",
            ]
            .iter()
            .filter_map(|c| c.parse().ok())
            .collect()
        } else {
            args.inside.clone()
        };
        let stats_every = args.stats.map(|s| secs("stats", s)).transpose()?;
        let poll = Poll::new().map_err(DaemonError::Poll)?;
        let mut listener =
            TcpListener::bind(args.listen).map_err(|source| DaemonError::Listen {
                addr: args.listen,
                source,
            })?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(DaemonError::Poll)?;
        // One wake-up pipe per meaning: signal-hook writes a byte, not the signal number.
        let signal_pipe = |signals: &[i32], token| -> Result<mio::net::UnixStream, DaemonError> {
            let (read_end, write_end) =
                std::os::unix::net::UnixStream::pair().map_err(DaemonError::Poll)?;
            read_end.set_nonblocking(true).map_err(DaemonError::Poll)?;
            write_end.set_nonblocking(true).map_err(DaemonError::Poll)?;
            for &sig in signals {
                let w = write_end.try_clone().map_err(DaemonError::Poll)?;
                signal_hook::low_level::pipe::register(sig, w).map_err(DaemonError::Poll)?;
            }
            let mut stream = mio::net::UnixStream::from_std(read_end);
            poll.registry()
                .register(&mut stream, token, Interest::READABLE)
                .map_err(DaemonError::Poll)?;
            Ok(stream)
        };
        let stop_signals = signal_pipe(
            &[signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT],
            STOP,
        )?;
        let status_signals = signal_pipe(&[signal_hook::consts::SIGUSR1], STATUS)?;
        let mut copy = args.copy;
        let kernel = if copy == CopyMode::Sockmap {
            // Each socket is in each map at most once, so the maps never fill up.
            let room = u32::try_from(max_connections).unwrap_or(u32::MAX);
            match Forwarder::load(room) {
                Ok(f) => Some(f),
                Err(e) => {
                    eprintln!("ferry relay: sockmap forwarding unavailable ({e}); using splice");
                    copy = CopyMode::Splice;
                    None
                }
            }
        } else {
            None
        };
        let pinholes = if copy == CopyMode::Nat {
            let port = listener.local_addr().map_err(DaemonError::Poll)?.port();
            match Pinholes::set_up(port) {
                Ok(p) => {
                    config.pinholes = true;
                    Some(p)
                }
                Err(e) => {
                    eprintln!("ferry relay: NAT forwarding unavailable ({e}); using splice");
                    copy = CopyMode::Splice;
                    None
                }
            }
        } else {
            None
        };
        Ok(Daemon {
            poll,
            listener,
            stop_signals,
            status_signals,
            engine: Relay::new(config),
            socks: HashMap::new(),
            pairs: HashMap::new(),
            again: HashSet::new(),
            inside,
            jobs_dir: args.jobs_dir.clone(),
            jobs,
            copy,
            kernel,
            pinholes,
            draining: HashSet::new(),
            max_connections,
            spare: Spare::open(),
            accept_again: None,
            stats_every,
            spin: Duration::from_micros(args.spin_us),
            io: IoCounters::default(),
            started: Instant::now(),
        })
    }

    /// `--max-connections`, or fewer if the descriptor limit (raised to the hard limit first)
    /// has no room for that many, said on stderr.
    fn room_for(wanted: usize) -> Result<usize, DaemonError> {
        let soft = descriptors::raise_limit();
        let room = descriptors::connections_within(soft, wanted);
        if room == 0 {
            return Err(DaemonError::Usage(format!(
                "the descriptor limit ({}) leaves no room for connections: the relay keeps {} for itself and needs {} per connection (ulimit -n)",
                soft.unwrap_or(0),
                descriptors::RESERVED,
                descriptors::PER_CONNECTION
            )));
        }
        if room < wanted {
            eprintln!(
                "ferry relay: keeping at most {room} connections, not --max-connections {wanted}: the descriptor limit is {} ({} per connection, {} for the relay; raise it with ulimit -n)",
                soft.unwrap_or(0),
                descriptors::PER_CONNECTION,
                descriptors::RESERVED
            );
        }
        Ok(room)
    }

    /// The address actually listened on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// One status line: connections, pairs, registrations, bytes, refusals, errors, CPU time.
    pub fn status_line(&self) -> String {
        let c = self.engine.counters();
        let mut refused: Vec<String> = c
            .refused
            .iter()
            .map(|(code, n)| format!("{code:?}={n}"))
            .collect();
        refused.sort();
        format!(
            "ferry relay: up {:.0}s conns={} relayed={} registered={} accepted={} paired={} pinholes={} bytes_in={} bytes_out={} refused=[{}] idle_closed={} shed={} replaced={} turned_away={} errors={} splice_pairs={} buffered_pairs={} sockmap_pairs={} cpu={:.3}s",
            self.started.elapsed().as_secs_f64(),
            self.engine.connections(),
            self.engine.relayed(),
            self.engine.registrations(),
            c.accepted,
            c.paired,
            c.pinholes,
            self.io.bytes_in,
            self.io.bytes_out,
            refused.join(" "),
            c.idle_closed,
            c.shed,
            c.replaced,
            self.io.turned_away,
            self.io.errors,
            self.io.spliced_pairs,
            self.io.buffered_pairs,
            self.io.sockmap_pairs,
            cpu_secs(),
        )
    }

    fn keys(jobs: &HashMap<u64, PathBuf>, dir: &Option<PathBuf>, job: u64) -> Option<JobKey> {
        if let Some(path) = jobs.get(&job) {
            return read_key_file(path);
        }
        let path = dir.as_ref()?.join(format!("{job:016x}.key"));
        read_key_file(&path)
    }

    /// Runs until SIGTERM or SIGINT.
    pub fn run(&mut self) -> Result<(), DaemonError> {
        let mut events = Events::with_capacity(1024);
        let mut next_stats = self.stats_every.map(|d| Instant::now() + d);
        let mut last_event: Option<Instant> = None;
        eprintln!(
            "ferry relay: listening on {} ({:?} forwarding)",
            self.local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string()),
            self.copy
        );
        loop {
            let now = Instant::now();
            // Deadlines made during this pass lie in the future and traffic only postpones
            // idle ones, so none falls due before this one: the engine's timers need a look
            // only once it has passed (not on every spinning poll).
            let due = self.engine.next_timeout();
            let mut timeout = due.map(|t| t.saturating_duration_since(now));
            if let Some(t) = next_stats {
                let d = t.saturating_duration_since(now);
                timeout = Some(timeout.map_or(d, |x| x.min(d)));
            }
            let spinning = last_event.is_some_and(|t| now.duration_since(t) < self.spin);
            if !self.draining.is_empty() {
                // The kernel tells nobody when a redirect queue has emptied: look again soon.
                timeout = Some(timeout.map_or(DRAIN_LOOK, |x| x.min(DRAIN_LOOK)));
            }
            if let Some(at) = self.accept_again {
                let d = at.saturating_duration_since(now);
                timeout = Some(timeout.map_or(d, |x| x.min(d)));
            }
            if !self.again.is_empty() || spinning {
                timeout = Some(Duration::ZERO);
            }
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(DaemonError::Poll(e)),
            }
            let now = Instant::now();
            if !events.is_empty() {
                last_event = Some(now);
            } else if spinning && self.again.is_empty() {
                // Spinning, nothing came: let whatever else wants this core run first (on a
                // shared machine, the ranks the relay is waiting for); alone, this returns at
                // once and the spin goes on.
                std::thread::yield_now();
            }
            let mut stop = false;
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_all(now),
                    STOP => {
                        drain(&mut self.stop_signals);
                        stop = true;
                    }
                    STATUS => {
                        drain(&mut self.status_signals);
                        self.count_kernel_bytes(now);
                        eprintln!("{}", self.status_line());
                    }
                    Token(t) => self.on_socket(
                        ConnId((t - FIRST_CONN_TOKEN) as u64),
                        event.is_writable(),
                        now,
                    ),
                }
            }
            if self.accept_again.is_some_and(|at| at <= now) {
                self.accept_all(now);
            }
            for pair in std::mem::take(&mut self.again) {
                self.pump_pair(pair, now);
            }
            for pair in std::mem::take(&mut self.draining) {
                self.pump_pair(pair, now);
            }
            if due.is_some_and(|t| t <= now) {
                // Kernel pairs' traffic is known only from the program's counters.
                self.count_kernel_bytes(now);
                self.engine.handle_timeout(now);
            }
            self.do_actions(now);
            if let Some(t) = next_stats {
                if now >= t {
                    self.count_kernel_bytes(now);
                    eprintln!("{}", self.status_line());
                    next_stats = self.stats_every.map(|d| now + d);
                }
            }
            if stop {
                self.count_kernel_bytes(now);
                self.engine.shutdown();
                self.do_actions(now);
                // Give refusals a moment to leave, then drop everything.
                for sock in self.socks.values_mut() {
                    let _ = sock.stream.write(&sock.out);
                }
                self.socks.clear();
                self.pairs.clear();
                eprintln!("{}", self.status_line());
                eprintln!("ferry relay: shut down");
                return Ok(());
            }
        }
    }

    /// Accepts every queued connection. Edge-triggered: the queue must be drained (or a retry
    /// set) or the listener never wakes the relay again.
    fn accept_all(&mut self, now: Instant) {
        self.accept_again = None;
        loop {
            match self.listener.accept() {
                Ok((mut stream, peer)) => {
                    if self.socks.len() >= self.max_connections {
                        // Full: the oldest stranger makes room (this one may be a genuine
                        // REGISTER or CONNECT), else this one is turned away.
                        if self.engine.shed_stranger() {
                            self.do_actions(now);
                        }
                        if self.socks.len() >= self.max_connections {
                            self.io.turned_away += 1;
                            drop(stream);
                            continue;
                        }
                    }
                    let _ = stream.set_nodelay(true);
                    bound_buffers(&stream);
                    let inside = self.inside.iter().any(|c| c.contains(peer.ip()));
                    let mut nonce = [0u8; 32];
                    if getrandom::getrandom(&mut nonce).is_err() {
                        self.io.errors += 1;
                        continue;
                    }
                    let id = self.engine.handle_accept(peer, inside, nonce, now);
                    if self
                        .poll
                        .registry()
                        .register(
                            &mut stream,
                            token(id),
                            Interest::READABLE | Interest::WRITABLE,
                        )
                        .is_err()
                    {
                        self.engine.handle_closed(id, now);
                        continue;
                    }
                    self.socks.insert(
                        id,
                        Sock {
                            stream,
                            out: Vec::new(),
                            connecting: false,
                            close_when_flushed: false,
                            pair: None,
                        },
                    );
                    self.do_actions(now);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
                Err(e) if descriptors::out_of_descriptors(&e) => {
                    // The oldest stranger makes room; with none, the newcomer is turned away
                    // through the spare descriptor, so the queue keeps draining.
                    if self.engine.shed_stranger() {
                        self.do_actions(now);
                    } else if self.spare.turn_away_one(&self.listener) {
                        self.io.turned_away += 1;
                    } else {
                        self.io.errors += 1;
                        self.accept_again = Some(now + descriptors::ACCEPT_RETRY);
                        return;
                    }
                }
                Err(_) => {
                    self.io.errors += 1;
                    self.accept_again = Some(now + descriptors::ACCEPT_RETRY);
                    return;
                }
            }
        }
    }

    fn on_socket(&mut self, id: ConnId, writable: bool, now: Instant) {
        let Some(sock) = self.socks.get_mut(&id) else {
            return;
        };
        if let Some(pair) = sock.pair {
            return self.pump_pair(pair, now);
        }
        if sock.connecting {
            if !writable {
                return;
            }
            match sock.stream.take_error() {
                Ok(None) if sock.stream.peer_addr().is_ok() => {
                    sock.connecting = false;
                    let _ = sock.stream.set_nodelay(true);
                    let (jobs, dir) = (&self.jobs, &self.jobs_dir);
                    self.engine
                        .handle_dialed(id, &mut |j| Self::keys(jobs, dir, j), now);
                    self.do_actions(now);
                }
                Ok(None) => {}
                _ => {
                    self.io.errors += 1;
                    self.drop_sock(id, now);
                }
            }
            return;
        }
        if !self.flush(id) {
            return self.drop_sock(id, now);
        }
        let mut buf = [0u8; 4096];
        loop {
            let Some(sock) = self.socks.get_mut(&id) else {
                return;
            };
            if sock.pair.is_some() {
                // Paired while reading: the rest is forwarded.
                return self.on_socket(id, writable, now);
            }
            match sock.stream.read(&mut buf) {
                Ok(0) => return self.drop_sock(id, now),
                Ok(n) => {
                    let (jobs, dir) = (&self.jobs, &self.jobs_dir);
                    self.engine
                        .handle_input(id, &buf[..n], &mut |j| Self::keys(jobs, dir, j), now);
                    self.do_actions(now);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.drop_sock(id, now),
            }
        }
    }

    /// Writes what is queued for `id`; false when the socket failed.
    fn flush(&mut self, id: ConnId) -> bool {
        let Some(sock) = self.socks.get_mut(&id) else {
            return false;
        };
        while !sock.out.is_empty() {
            match sock.stream.write(&sock.out) {
                Ok(0) => return false,
                Ok(n) => {
                    sock.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if sock.close_when_flushed {
            let _ = sock.stream.shutdown(Shutdown::Both);
            self.socks.remove(&id);
        }
        true
    }

    /// The peer closed or failed: tell the engine, which closes what depends on it.
    fn drop_sock(&mut self, id: ConnId, now: Instant) {
        if let Some(sock) = self.socks.remove(&id) {
            if let Some(pair) = sock.pair {
                self.forget_pair(pair);
            }
        }
        self.engine.handle_closed(id, now);
        self.do_actions(now);
    }

    fn do_actions(&mut self, now: Instant) {
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Send { conn, bytes } => {
                    if let Some(sock) = self.socks.get_mut(&conn) {
                        sock.out.extend_from_slice(&bytes);
                        if !sock.connecting && !self.flush(conn) {
                            self.socks.remove(&conn);
                            self.engine.handle_closed(conn, now);
                        }
                    }
                }
                Action::Dial { conn, addr } => match TcpStream::connect(addr) {
                    Ok(mut stream) => {
                        bound_buffers(&stream);
                        if self
                            .poll
                            .registry()
                            .register(
                                &mut stream,
                                token(conn),
                                Interest::READABLE | Interest::WRITABLE,
                            )
                            .is_ok()
                        {
                            self.socks.insert(
                                conn,
                                Sock {
                                    stream,
                                    out: Vec::new(),
                                    connecting: true,
                                    close_when_flushed: false,
                                    pair: None,
                                },
                            );
                        } else {
                            self.engine.handle_closed(conn, now);
                        }
                    }
                    Err(_) => {
                        self.io.errors += 1;
                        self.engine.handle_closed(conn, now);
                    }
                },
                Action::Forward {
                    client,
                    target,
                    to_target,
                    to_client,
                } => {
                    let pair_id = client.0;
                    let mk = |from, to| Direction {
                        from,
                        to,
                        mover: make_mover(self.copy),
                        eof: false,
                        shut: false,
                    };
                    let path = if self.kernel.is_some() {
                        Path::ToKernel
                    } else {
                        Path::User
                    };
                    let pair = Pair {
                        dirs: [mk(client, target), mk(target, client)],
                        path,
                    };
                    if matches!(pair.path, Path::ToKernel) {
                        // Counted once in the kernel (or, failing that, as spliced).
                    } else if matches!(pair.dirs[0].mover, Mover::Pipe { .. }) {
                        self.io.spliced_pairs += 1;
                    } else {
                        self.io.buffered_pairs += 1;
                    }
                    for (id, early) in [(target, to_target), (client, to_client)] {
                        if let Some(sock) = self.socks.get_mut(&id) {
                            sock.out.extend_from_slice(&early);
                            sock.pair = Some(pair_id);
                        }
                    }
                    self.pairs.insert(pair_id, pair);
                    self.again.insert(pair_id);
                }
                Action::OpenPinhole {
                    conn,
                    client,
                    target,
                } => {
                    let local = self.socks.get(&conn).map(|s| s.stream.local_addr());
                    let port = match (self.pinholes.as_mut(), local) {
                        (Some(holes), Some(Ok(local))) => {
                            match holes.open(conn, client, local, target) {
                                Ok(port) => Some(port),
                                Err(e) => {
                                    self.io.errors += 1;
                                    eprintln!("ferry relay: no pinhole for {client}, forwarding it myself: {e}");
                                    None
                                }
                            }
                        }
                        _ => None,
                    };
                    self.engine.handle_pinhole(conn, port, now);
                }
                Action::Log { message } => eprintln!("ferry relay: {message}"),
                Action::ClosePinhole { conn } => {
                    if let Some(Err(e)) = self.pinholes.as_mut().map(|h| h.close(conn)) {
                        self.io.errors += 1;
                        eprintln!("ferry relay: closing a pinhole: {e}");
                    }
                }
                Action::Close { conn, .. } => {
                    if let Some(mut sock) = self.socks.remove(&conn) {
                        if let Some(pair) = sock.pair.take() {
                            self.forget_pair(pair);
                        }
                        if !sock.out.is_empty() {
                            // A refusal: one try to deliver it, then close.
                            let _ = sock.stream.write(&sock.out);
                        }
                        let _ = sock.stream.shutdown(Shutdown::Both);
                    }
                }
            }
        }
    }

    fn pump_pair(&mut self, pair_id: u64, now: Instant) {
        let Some(mut pair) = self.pairs.remove(&pair_id) else {
            return;
        };
        if !matches!(pair.path, Path::User) {
            return self.kernel_pair(pair_id, pair, now);
        }
        let mut failed = false;
        let mut moved_any = false;
        for d in 0..2 {
            let moved = match pump(&mut pair.dirs[d], &mut self.socks) {
                Pumped::Idle { moved } => moved,
                Pumped::More { moved } => {
                    self.again.insert(pair_id);
                    moved
                }
                Pumped::Failed => {
                    failed = true;
                    0
                }
            };
            moved_any |= moved > 0;
            if d == 0 {
                self.io.bytes_in += moved as u64;
            } else {
                self.io.bytes_out += moved as u64;
            }
        }
        let client = pair.dirs[0].from;
        let done = pair.dirs.iter().all(|d| d.shut && held(&d.mover) == 0);
        if failed || done {
            return self.end_pair(pair_id, pair, failed, now);
        }
        if moved_any {
            self.engine.handle_traffic(client, now);
        }
        self.pairs.insert(pair_id, pair);
    }

    /// Closes both sockets of a finished or failed pair (already out of `self.pairs`).
    fn end_pair(&mut self, pair_id: u64, pair: Pair, failed: bool, now: Instant) {
        if failed {
            self.io.errors += 1;
        }
        self.again.remove(&pair_id);
        self.draining.remove(&pair_id);
        self.unmap(&pair);
        let (client, target) = (pair.dirs[0].from, pair.dirs[0].to);
        for id in [client, target] {
            if let Some(sock) = self.socks.remove(&id) {
                let _ = sock.stream.shutdown(Shutdown::Both);
            }
            self.engine.handle_closed(id, now);
        }
        self.do_actions(now);
    }

    /// Drops a pair whose sockets are going away.
    fn forget_pair(&mut self, pair_id: u64) {
        self.again.remove(&pair_id);
        self.draining.remove(&pair_id);
        if let Some(pair) = self.pairs.remove(&pair_id) {
            self.unmap(&pair);
        }
    }

    /// Takes a kernel pair out of the maps, counting its last bytes.
    fn unmap(&mut self, pair: &Pair) {
        let (Path::Kernel { keys, seen, .. }, Some(k)) = (&pair.path, &self.kernel) else {
            return;
        };
        let now = [k.forwarded(keys.a), k.forwarded(keys.b)];
        self.io.bytes_in += now[0].unwrap_or(seen[0]).saturating_sub(seen[0]);
        self.io.bytes_out += now[1].unwrap_or(seen[1]).saturating_sub(seen[1]);
        k.remove_pair(*keys);
    }

    /// Adds what the verdict program forwarded since the last look to the I/O counters and
    /// tells the engine which pairs had traffic (their idle timers start again).
    fn count_kernel_bytes(&mut self, now: Instant) {
        let Some(k) = &self.kernel else {
            return;
        };
        for pair in self.pairs.values_mut() {
            let Path::Kernel { keys, seen, .. } = &mut pair.path else {
                continue;
            };
            let got = [k.forwarded(keys.a), k.forwarded(keys.b)];
            let mut moved = false;
            for (i, g) in got.into_iter().enumerate() {
                if let Some(g) = g.filter(|&g| g > seen[i]) {
                    if i == 0 {
                        self.io.bytes_in += g - seen[i];
                    } else {
                        self.io.bytes_out += g - seen[i];
                    }
                    seen[i] = g;
                    moved = true;
                }
            }
            if moved {
                self.engine.handle_traffic(pair.dirs[0].from, now);
            }
        }
    }

    /// A pair on its way into the kernel or forwarded there: writes the relay's own bytes,
    /// switches, and after that handles closed read sides and errors.
    fn kernel_pair(&mut self, pair_id: u64, mut pair: Pair, now: Instant) {
        let (client, target) = (pair.dirs[0].from, pair.dirs[0].to);
        if matches!(pair.path, Path::ToKernel) {
            // ESTABLISHED and early bytes first; nothing is read from either socket meanwhile,
            // so everything after them is still in the kernel's receive queues.
            let mut written = true;
            for id in [client, target] {
                match flush_out(&mut self.socks, id) {
                    Ok(empty) => written &= empty,
                    Err(()) => return self.end_pair(pair_id, pair, true, now),
                }
            }
            if !written {
                // The socket's writable event brings us back.
                self.pairs.insert(pair_id, pair);
                return;
            }
            let (Some(c), Some(t), Some(k)) = (
                self.socks.get(&client),
                self.socks.get(&target),
                &self.kernel,
            ) else {
                return self.end_pair(pair_id, pair, true, now);
            };
            let base = [
                sockmap::written(c.stream.as_fd()),
                sockmap::written(t.stream.as_fd()),
            ];
            let switched = match base {
                [Ok(bc), Ok(bt)] => k
                    .add_pair(c.stream.as_fd(), t.stream.as_fd())
                    .map(|keys| (keys, [bc, bt])),
                [Err(e), _] | [_, Err(e)] => Err(AddError::Before(e)),
            };
            match switched {
                Ok((keys, base)) => {
                    // Forwarded bytes no longer concern this process: only a closed read side
                    // (EPOLLRDHUP) and errors (always reported) wake it for these sockets.
                    use std::os::fd::AsRawFd;
                    // SAFETY: the epoll descriptor belongs to `self.poll`, which outlives this
                    // borrow (it is used only within this block).
                    let epoll =
                        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.poll.as_raw_fd()) };
                    for id in [client, target] {
                        if let Some(sock) = self.socks.get(&id) {
                            let _ = rustix::event::epoll::modify(
                                epoll,
                                &sock.stream,
                                rustix::event::epoll::EventData::new_u64(token(id).0 as u64),
                                rustix::event::epoll::EventFlags::RDHUP
                                    | rustix::event::epoll::EventFlags::ET,
                            );
                        }
                    }
                    self.io.sockmap_pairs += 1;
                    pair.path = Path::Kernel {
                        keys,
                        base,
                        seen: [0, 0],
                    };
                }
                Err(AddError::Before(e)) => {
                    eprintln!(
                        "ferry relay: pair of connection {}: {e}; splicing it",
                        client.0
                    );
                    pair.path = Path::User;
                    self.io.spliced_pairs += 1;
                    self.pairs.insert(pair_id, pair);
                    return self.pump_pair(pair_id, now);
                }
                Err(e @ AddError::Partial(_)) => {
                    eprintln!(
                        "ferry relay: pair of connection {}: {e}; closing it",
                        client.0
                    );
                    return self.end_pair(pair_id, pair, true, now);
                }
            }
        }
        let Path::Kernel { keys, base, .. } = &pair.path else {
            return;
        };
        let (keys, base) = (*keys, *base);
        let mut waiting = false;
        for (i, d) in pair.dirs.iter_mut().enumerate() {
            let (Some(from), Some(to)) = (self.socks.get(&d.from), self.socks.get(&d.to)) else {
                return self.end_pair(pair_id, pair, true, now);
            };
            if !matches!(from.stream.take_error(), Ok(None))
                || !matches!(to.stream.take_error(), Ok(None))
            {
                return self.end_pair(pair_id, pair, true, now);
            }
            if !d.eof {
                let mut p = [rustix::event::PollFd::new(
                    &from.stream,
                    rustix::event::PollFlags::RDHUP,
                )];
                let zero = rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                if rustix::event::poll(&mut p, Some(&zero)).is_ok()
                    && p[0].revents().contains(rustix::event::PollFlags::RDHUP)
                {
                    d.eof = true;
                }
            }
            if d.eof && !d.shut {
                // Shut the other side only once every byte the program took from this side
                // has entered it: a FIN sent earlier would overtake the ones still queued.
                let (key, dest_base) = if i == 0 {
                    (keys.a, base[1])
                } else {
                    (keys.b, base[0])
                };
                let counted = self.kernel.as_ref().and_then(|k| k.forwarded(key));
                let entered = sockmap::written(to.stream.as_fd())
                    .ok()
                    .map(|w| w.wrapping_sub(dest_base));
                match (counted, entered) {
                    (Some(c), Some(e)) if e >= c => {
                        let _ = to.stream.shutdown(Shutdown::Write);
                        d.shut = true;
                    }
                    (Some(_), Some(_)) => waiting = true,
                    _ => return self.end_pair(pair_id, pair, true, now),
                }
            }
        }
        if pair.dirs.iter().all(|d| d.shut) {
            return self.end_pair(pair_id, pair, false, now);
        }
        if waiting {
            self.draining.insert(pair_id);
        }
        self.pairs.insert(pair_id, pair);
    }

    /// Counters of forwarded bytes and errors.
    pub fn io_counters(&self) -> &IoCounters {
        &self.io
    }
}

/// CPU time (user + system) this process has used, in seconds.
fn cpu_secs() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn drain(stream: &mut mio::net::UnixStream) {
    let mut buf = [0u8; 64];
    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
}

/// Writes what is queued for `id` (relay frames, early bytes): Ok(true) when all is written.
fn flush_out(socks: &mut HashMap<ConnId, Sock>, id: ConnId) -> Result<bool, ()> {
    let Some(sock) = socks.get_mut(&id) else {
        return Err(());
    };
    while !sock.out.is_empty() {
        match sock.stream.write(&sock.out) {
            Ok(0) => return Err(()),
            Ok(n) => {
                sock.out.drain(..n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
    Ok(true)
}

fn held(m: &Mover) -> usize {
    match m {
        Mover::Pipe { held, .. } => *held,
        Mover::Buffer { start, end, .. } => end - start,
    }
}

/// Moves bytes `d.from` → `d.to` until one side would block or the budget is spent.
fn pump(d: &mut Direction, socks: &mut HashMap<ConnId, Sock>) -> Pumped {
    let mut moved = 0usize;
    // Queued relay frames and early bytes go first.
    {
        let Some(to) = socks.get_mut(&d.to) else {
            return Pumped::Failed;
        };
        while !to.out.is_empty() {
            match to.stream.write(&to.out) {
                Ok(n) => {
                    to.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Pumped::Idle { moved },
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Pumped::Failed,
            }
        }
    }
    let (Some(from), Some(to)) = (socks.get(&d.from), socks.get(&d.to)) else {
        return Pumped::Failed;
    };
    let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
    loop {
        // Drain what is held towards the destination.
        while held(&d.mover) > 0 {
            let r = match &mut d.mover {
                Mover::Pipe { r, held, .. } => {
                    splice(&*r, None, &to.stream, None, *held, flags).map_err(std::io::Error::from)
                }
                Mover::Buffer { buf, start, end } => (&to.stream).write(&buf[*start..*end]),
            };
            match r {
                Ok(0) => return Pumped::Failed,
                Ok(n) => {
                    moved += n;
                    match &mut d.mover {
                        Mover::Pipe { held, .. } => *held -= n,
                        Mover::Buffer { start, end, .. } => {
                            *start += n;
                            if start == end {
                                (*start, *end) = (0, 0);
                            }
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Pumped::Idle { moved },
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Pumped::Failed,
            }
        }
        if d.eof {
            if !d.shut {
                let _ = to.stream.shutdown(Shutdown::Write);
                d.shut = true;
            }
            return Pumped::Idle { moved };
        }
        if moved >= BUDGET {
            return Pumped::More { moved };
        }
        let r = match &mut d.mover {
            Mover::Pipe { w, .. } => splice(&from.stream, None, &*w, None, PIPE_SIZE, flags)
                .map_err(std::io::Error::from),
            Mover::Buffer { buf, end, .. } => (&from.stream).read(&mut buf[*end..]),
        };
        match r {
            Ok(0) => d.eof = true,
            Ok(n) => match &mut d.mover {
                Mover::Pipe { held, .. } => *held += n,
                Mover::Buffer { end, .. } => *end += n,
            },
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Pumped::Idle { moved },
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => d.eof = true,
            Err(_) => return Pumped::Failed,
        }
    }
}

/// With `--key-stdin`: reads the key from standard input into a file of our own (mode 600 in
/// a directory of mode 700), which becomes one more `--job`. Returns the directory, to remove
/// at the end.
fn key_from_stdin(args: &mut RelayArgs) -> Result<Option<PathBuf>, DaemonError> {
    use std::io::{BufRead, Read};
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let Some(id) = args.key_stdin.clone() else {
        return Ok(None);
    };
    let job = u64::from_str_radix(id.trim_start_matches("0x"), 16)
        .map_err(|_| DaemonError::Usage(format!("--key-stdin {id:?} is not a hex job id")))?;
    let mut line = String::new();
    let mut stdin = std::io::stdin().lock();
    (&mut stdin)
        .take(4096)
        .read_line(&mut line)
        .map_err(|e| DaemonError::Usage(format!("--key-stdin: cannot read the key: {e}")))?;
    let key = JobKey::from_hex(line.trim()).ok_or_else(|| {
        DaemonError::Usage(
            "--key-stdin: the first line of standard input is not 64 hex digits".into(),
        )
    })?;
    let dir = std::env::temp_dir().join(format!("ferry-relay-{}-{job:016x}", std::process::id()));
    let fail = |e: std::io::Error| DaemonError::Usage(format!("{}: {e}", dir.display()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(fail)?;
    let file = dir.join(format!("{job:016x}.key"));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, key.to_hex().as_bytes()))
        .map_err(fail)?;
    args.jobs.push(format!("{job:x}={}", file.display()));
    Ok(Some(dir))
}

/// Asks the daemon to stop (SIGTERM, whose handler is installed) once standard input closes.
fn stop_when_stdin_closes() -> Result<(), DaemonError> {
    std::thread::Builder::new()
        .name("ferry-relay-stdin".into())
        .spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            // SAFETY: kill(2) of our own pid: the SIGTERM handler stops the event loop.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        })
        .map(drop)
        .map_err(|e| DaemonError::Usage(format!("cannot start a thread: {e}")))
}

/// Runs `ferry relay` with `args`; returns the process exit status.
pub fn main_with(args: &RelayArgs) -> i32 {
    let mut args = args.clone();
    let key_dir = match key_from_stdin(&mut args) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("ferry relay: {e}");
            return 2;
        }
    };
    let code = run_daemon(&args);
    if let Some(dir) = key_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    code
}

fn run_daemon(args: &RelayArgs) -> i32 {
    let mut daemon = match Daemon::new(args) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ferry relay: {e}");
            return 2;
        }
    };
    if args.key_stdin.is_some() {
        if let Err(e) = stop_when_stdin_closes() {
            eprintln!("ferry relay: {e}");
            return 2;
        }
    }
    match daemon.run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ferry relay: {e}");
            1
        }
    }
}
