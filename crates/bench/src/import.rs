//! The bulk-import benchmark (`ferry bench import`), after table 1 of the multi-rail seed paper
//! ("A channel bonding based VI-GM communication module for Myrinet bandwidth enhancement":
//! a 128 MB file imported in packets of 16–256 KB by 1–8 concurrent transfer processes, channel
//! bonding on and off, MB/s and % gain).
//!
//! - **The job** ([`rank_main`]): 2P ranks. Ranks `0..P` are the storage host's senders,
//!   `P..2P` the import host's receivers; sender `i` streams a file to receiver `P + i` in
//!   packets of `S` bytes. Each side keeps a window of `W` packets in flight and prepares the
//!   next window (sender: reads it from the file; receiver: writes the previous one to disk)
//!   while the current one travels, double-buffered. The receiver computes a CRC-32 of what it
//!   writes and compares it with the sender's, sent as a last small message: a mismatch fails the
//!   rank with an error that names the rank and the packet size. Written files are removed.
//! - **The sweep** ([`run`]): one `ferry run` job (`FERRY_TRANSPORT=tcp`) per (P, packet size,
//!   rails, round), re-executing the `ferry` binary; rails are chosen with `FERRY_RAILS` (1 =
//!   bonding off). A point's figure is the aggregate bandwidth: all bytes of all pairs over the
//!   slowest pair's time (from a common barrier to its last byte written and checked).
//! - **The report** ([`summarize`], [`table`], [`summary_csv`], [`points_csv`], [`plot_points`]):
//!   the seed's table 1 (rows P, columns packet size × bonding off / on / gain %), CSV and PNG.
//!
//! What it does not do: place ranks on hosts (`ferry run` does; see [`grid_path`] for the grid
//! file two hosts need) or set up links (the testbed does). MB/s here are 10^6 bytes per second.
//! Time does not include `fsync`: the receiver's writes reach the page cache, as a streaming
//! import on a host with free memory does.

use crate::Series;
use ferry_core::{scope, wait_all, World};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Tag of the sender's first message: the file length (one `u64`).
const TAG_HEADER: i32 = 70;
/// Tag of the packets.
const TAG_DATA: i32 = 71;
/// Tag of the sender's last message: length and CRC-32 (two `u64`).
const TAG_CHECKSUM: i32 = 72;

/// Packet sizes of the seed's table 1.
pub const DEFAULT_PACKETS: [usize; 5] = [16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10];
/// The seed's file size (128 MB, taken as MiB).
pub const DEFAULT_SIZE: u64 = 128 << 20;

/// Why an import or a sweep failed.
#[derive(Debug, Error)]
pub enum ImportError {
    /// A bad argument or job shape.
    #[error("{0}")]
    Usage(String),
    /// A file could not be read, written or removed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A message could not be sent or received.
    #[error("rank {rank}: {source}")]
    Comm {
        /// This rank.
        rank: usize,
        /// The runtime's error.
        source: ferry_core::Error,
    },
    /// The bytes written do not match what the sender read.
    #[error(
        "rank {rank} (packets of {}): checksum mismatch: received {received_bytes} bytes with \
         CRC-32 {received_crc:08x}, sender read {sent_bytes} bytes with CRC-32 {sent_crc:08x}",
        size_label(*packet)
    )]
    Mismatch {
        /// The receiving rank.
        rank: usize,
        /// Packet size in bytes.
        packet: usize,
        /// Bytes written by the receiver.
        received_bytes: u64,
        /// CRC-32 of what the receiver wrote.
        received_crc: u32,
        /// Bytes the sender read.
        sent_bytes: u64,
        /// CRC-32 of what the sender read.
        sent_crc: u32,
    },
    /// One job of the sweep failed (its output is kept in the message).
    #[error("the job with P = {procs}, packets of {}, {rails} rail(s) {status}:\n{output}", size_label(*packet))]
    Job {
        /// Sender-receiver pairs.
        procs: u32,
        /// Packet size in bytes.
        packet: usize,
        /// `FERRY_RAILS`.
        rails: u32,
        /// How it ended.
        status: String,
        /// Its stderr (and stdout).
        output: String,
    },
    /// A job succeeded but its report is missing or unreadable.
    #[error("{path}: bad report line {line:?}")]
    Report {
        /// The report file.
        path: PathBuf,
        /// The offending line.
        line: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `16 KiB`, `1 MiB`, or bytes.
pub fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

// ---- the job ----

/// What each rank of an import job is told.
#[derive(Debug, Clone)]
pub struct RankArgs {
    /// The file the senders read.
    pub file: PathBuf,
    /// Packet size in bytes.
    pub packet: usize,
    /// Packets in flight per window.
    pub window: usize,
    /// Directory the receivers write into.
    pub out_dir: PathBuf,
    /// Where rank 0 writes the per-pair report.
    pub report: PathBuf,
    /// Test hook: the last receiver flips this byte of the stream before writing it.
    pub corrupt_at: Option<u64>,
}

/// One sender-receiver pair's result, as rank 0 reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairResult {
    /// Pair index (sender rank).
    pub pair: usize,
    /// Bytes moved.
    pub bytes: u64,
    /// Seconds from the common start to the last byte written and checked (the slower side).
    pub seconds: f64,
    /// Whether the checksum matched.
    pub verified: bool,
}

/// What a receiver got.
struct Received {
    bytes: u64,
    crc: u32,
    sent_bytes: u64,
    sent_crc: u32,
}

/// Body of every rank of an import job. Rank 0 writes one line per pair to `args.report`
/// (`pair,bytes,seconds,verified`). A receiver whose checksum does not match returns
/// [`ImportError::Mismatch`] after the job's closing gather, so the other ranks finish cleanly.
pub fn rank_main(world: &World, args: &RankArgs) -> Result<(), ImportError> {
    let (me, n) = (world.rank(), world.size());
    let comm = |source| ImportError::Comm { rank: me, source };
    if n < 2 || !n.is_multiple_of(2) {
        return Err(ImportError::Usage(format!(
            "an import job needs an even number of ranks (P senders, P receivers), not {n}"
        )));
    }
    if args.packet == 0 || args.window == 0 {
        return Err(ImportError::Usage(
            "packet size and window must be positive".into(),
        ));
    }
    let p = n / 2;
    let (mut input, mut output, out_path) = if me < p {
        let f = File::open(&args.file).map_err(io_error(&args.file))?;
        (Some(f), None, None)
    } else {
        let path = args
            .out_dir
            .join(format!("import-rank{me}-{}.bin", std::process::id()));
        let f = File::create(&path).map_err(io_error(&path))?;
        (None, Some(f), Some(path))
    };
    world.barrier().map_err(comm)?;
    let start = Instant::now();
    let outcome = match (&mut input, &mut output, &out_path) {
        (Some(f), _, _) => send_file(world, me + p, f, args).map(|bytes| (bytes, None)),
        (_, Some(f), Some(path)) => {
            let corrupt = args.corrupt_at.filter(|_| me == n - 1);
            receive_file(world, me - p, f, path, args, corrupt).map(|r| (r.bytes, Some(r)))
        }
        _ => unreachable!("every rank is a sender or a receiver"),
    };
    let seconds = start.elapsed().as_secs_f64();
    drop(output);
    if let Some(path) = &out_path {
        std::fs::remove_file(path).map_err(io_error(path))?;
    }
    let (bytes, received) = outcome?;
    let verified = received
        .as_ref()
        .is_none_or(|r| r.bytes == r.sent_bytes && r.crc == r.sent_crc);
    let mine = [seconds, bytes as f64, if verified { 1.0 } else { 0.0 }];
    let mut all = vec![0f64; if me == 0 { 3 * n } else { 0 }];
    world.gather(&mine, &mut all, 0).map_err(comm)?;
    if me == 0 {
        let mut text = String::new();
        for pair in 0..p {
            let (s, r) = (
                &all[3 * pair..3 * pair + 3],
                &all[3 * (p + pair)..3 * (p + pair) + 3],
            );
            let _ = writeln!(
                text,
                "{pair},{},{:.6},{}",
                r[1] as u64,
                s[0].max(r[0]),
                r[2] == 1.0
            );
        }
        std::fs::write(&args.report, text).map_err(io_error(&args.report))?;
    }
    match received {
        Some(r) if !verified => Err(ImportError::Mismatch {
            rank: me,
            packet: args.packet,
            received_bytes: r.bytes,
            received_crc: r.crc,
            sent_bytes: r.sent_bytes,
            sent_crc: r.sent_crc,
        }),
        _ => Ok(()),
    }
}

/// Lengths of the packets of the next window, `left` bytes still to go.
fn window_lens(left: u64, packet: usize, window: usize) -> Vec<usize> {
    let mut lens = vec![];
    let mut left = left;
    while left > 0 && lens.len() < window {
        let len = left.min(packet as u64) as usize;
        lens.push(len);
        left -= len as u64;
    }
    lens
}

/// Streams `file` to `dest`; returns the bytes sent.
fn send_file(
    world: &World,
    dest: usize,
    file: &mut File,
    args: &RankArgs,
) -> Result<u64, ImportError> {
    let me = world.rank();
    let comm = |source| ImportError::Comm { rank: me, source };
    let len = file.metadata().map_err(io_error(&args.file))?.len();
    world.send(&[len], dest, TAG_HEADER).map_err(comm)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut read = |bufs: &mut [Vec<u8>], left: &mut u64| -> Result<Vec<usize>, ImportError> {
        let lens = window_lens(*left, args.packet, args.window);
        for (b, &l) in bufs.iter_mut().zip(&lens) {
            file.read_exact(&mut b[..l]).map_err(io_error(&args.file))?;
            hasher.update(&b[..l]);
            *left -= l as u64;
        }
        Ok(lens)
    };
    let mut cur = vec![vec![0u8; args.packet]; args.window];
    let mut next = cur.clone();
    let mut left = len;
    let mut lens = read(&mut cur, &mut left)?;
    while !lens.is_empty() {
        let next_lens = scope(|s| -> Result<Vec<usize>, ImportError> {
            let mut requests = Vec::with_capacity(lens.len());
            for (b, &l) in cur.iter().zip(&lens) {
                requests.push(world.isend(s, &b[..l], dest, TAG_DATA).map_err(comm)?);
            }
            // The next window comes off the disk while this one travels.
            let next_lens = read(&mut next, &mut left)?;
            wait_all(&mut requests).map_err(comm)?;
            Ok(next_lens)
        })?;
        std::mem::swap(&mut cur, &mut next);
        lens = next_lens;
    }
    let crc = hasher.finalize();
    world
        .send(&[len, u64::from(crc)], dest, TAG_CHECKSUM)
        .map_err(comm)?;
    Ok(len)
}

/// Receives a file from `source` into `out`, checksumming what it writes.
fn receive_file(
    world: &World,
    source: usize,
    out: &mut File,
    path: &Path,
    args: &RankArgs,
    corrupt_at: Option<u64>,
) -> Result<Received, ImportError> {
    let me = world.rank();
    let comm = |source| ImportError::Comm { rank: me, source };
    let mut header = [0u64; 1];
    world.recv(&mut header, source, TAG_HEADER).map_err(comm)?;
    let len = header[0];
    let mut hasher = crc32fast::Hasher::new();
    let mut written = 0u64;
    let mut write = |bufs: &mut [Vec<u8>], lens: &[usize]| -> Result<(), ImportError> {
        for (b, &l) in bufs.iter_mut().zip(lens) {
            let chunk = &mut b[..l];
            if let Some(at) = corrupt_at.filter(|&at| at >= written && at < written + l as u64) {
                chunk[(at - written) as usize] ^= 0xff;
            }
            out.write_all(chunk).map_err(io_error(path))?;
            hasher.update(chunk);
            written += l as u64;
        }
        Ok(())
    };
    let mut cur = vec![vec![0u8; args.packet]; args.window];
    let mut prev = cur.clone();
    let mut prev_lens: Vec<usize> = vec![];
    let mut left = len;
    loop {
        let lens = window_lens(left, args.packet, args.window);
        if lens.is_empty() {
            break;
        }
        scope(|s| -> Result<(), ImportError> {
            let mut requests = Vec::with_capacity(lens.len());
            for (b, &l) in cur.iter_mut().zip(&lens) {
                requests.push(
                    world
                        .irecv(s, &mut b[..l], source, TAG_DATA)
                        .map_err(comm)?,
                );
            }
            // The previous window goes to disk while this one arrives.
            write(&mut prev, &prev_lens)?;
            for (status, &l) in wait_all(&mut requests).map_err(comm)?.iter().zip(&lens) {
                if status.len != l {
                    return Err(ImportError::Usage(format!(
                        "rank {me}: a packet of {} bytes where {l} were expected",
                        status.len
                    )));
                }
            }
            Ok(())
        })?;
        left -= lens.iter().map(|&l| l as u64).sum::<u64>();
        std::mem::swap(&mut cur, &mut prev);
        prev_lens = lens;
    }
    write(&mut prev, &prev_lens)?;
    out.flush().map_err(io_error(path))?;
    let mut trailer = [0u64; 2];
    world
        .recv(&mut trailer, source, TAG_CHECKSUM)
        .map_err(comm)?;
    Ok(Received {
        bytes: written,
        crc: hasher.finalize(),
        sent_bytes: trailer[0],
        sent_crc: trailer[1] as u32,
    })
}

/// Writes `size` bytes of deterministic pseudo-random content (splitmix64) to `path`.
pub fn generate_file(path: &Path, size: u64) -> Result<(), ImportError> {
    let mut f = std::io::BufWriter::new(File::create(path).map_err(io_error(path))?);
    let mut state = 0x0f_e2_2e_u64;
    let mut block = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for word in block.chunks_exact_mut(8) {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            word.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n]).map_err(io_error(path))?;
        left -= n as u64;
    }
    f.flush().map_err(io_error(path))
}

// ---- the sweep ----

/// Settings of a sweep.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// The `ferry` binary (its `run` launches the jobs, its `bench-import-rank` is each rank).
    pub ferry: PathBuf,
    /// The file to import (`None`: a generated one of `size` bytes).
    pub file: Option<PathBuf>,
    /// Size of the generated file.
    pub size: u64,
    /// Packet sizes in bytes.
    pub packets: Vec<usize>,
    /// Sender-receiver pairs (P).
    pub procs: Vec<u32>,
    /// `FERRY_RAILS` values; 1 is bonding off.
    pub rails: Vec<u32>,
    /// Packets in flight per window.
    pub window: usize,
    /// Jobs per point; the table shows the median.
    pub rounds: u32,
    /// Where the generated file and the receivers' files go (`None`: a fresh temp dir).
    pub work_dir: Option<PathBuf>,
    /// `ferry run --grid` file; `{P}` in it is replaced by P.
    pub grid: Option<String>,
    /// `ferry run --testbed-prefix`: the standing testbed to run grid jobs in.
    pub testbed_prefix: Option<String>,
    /// Limit per job.
    pub timeout: Duration,
    /// Test hook: the last receiver flips this byte of the stream.
    pub corrupt_at: Option<u64>,
}

/// One measured job.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Sender-receiver pairs.
    pub procs: u32,
    /// Packet size in bytes.
    pub packet: usize,
    /// `FERRY_RAILS`.
    pub rails: u32,
    /// Round (0-based).
    pub round: u32,
    /// Per pair.
    pub pairs: Vec<PairResult>,
}

impl Point {
    /// All bytes moved.
    pub fn bytes(&self) -> u64 {
        self.pairs.iter().map(|p| p.bytes).sum()
    }

    /// The slowest pair's time.
    pub fn slowest(&self) -> f64 {
        self.pairs.iter().map(|p| p.seconds).fold(0.0, f64::max)
    }

    /// Aggregate MB/s: all bytes over the slowest pair's time.
    pub fn mbps(&self) -> f64 {
        aggregate_mbps(self.bytes(), self.slowest())
    }
}

/// Bytes over seconds in MB/s (10^6 B/s); 0 for no time.
pub fn aggregate_mbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e6
    } else {
        0.0
    }
}

/// The grid file for P pairs: `{P}` in `template` replaced by P.
///
/// `ferry run --grid` puts rank r on the file's rank slot r mod slots, filling hosts in file
/// order (`ranks = N` slots per host). For senders `0..P` on one host and receivers `P..2P` on
/// another, the file must list exactly two hosts with `ranks = P` each, the storage host first;
/// one file per P, hence the placeholder (e.g. `--grid import-{P}.toml`). For P = 2 on the
/// testbed, with each host's link shaped to 400 Mbit/s:
///
/// ```toml
/// [[cluster]]
/// name = "s"
/// kind = "public"
/// rate = "400mbit"
/// [[cluster.host]]
/// name = "store"        # ranks 0, 1: the senders
/// addr = "198.18.1.1"
/// ranks = 2
/// [[cluster.host]]
/// name = "import"       # ranks 2, 3: the receivers
/// addr = "198.18.1.2"
/// ranks = 2
/// ```
pub fn grid_path(template: &str, procs: u32) -> PathBuf {
    PathBuf::from(template.replace("{P}", &procs.to_string()))
}

/// Removes what the sweep created in the work dir when dropped.
struct WorkDir {
    path: PathBuf,
    created: bool,
    generated: Option<PathBuf>,
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Some(f) = &self.generated {
            let _ = std::fs::remove_file(f);
        }
        if self.created {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Runs the sweep: for each P, packet size, round and rails value (rails innermost, so bonding
/// on and off run back to back, in reverse order on odd rounds), one `ferry run` job. `progress` sees each point as it is
/// measured. The first failing job ends the sweep.
pub fn run(
    config: &SweepConfig,
    mut progress: impl FnMut(&Point),
) -> Result<Vec<Point>, ImportError> {
    if config.packets.is_empty() || config.procs.is_empty() || config.rails.is_empty() {
        return Err(ImportError::Usage(
            "--packets, --procs and --rails need at least one value each".into(),
        ));
    }
    if let Some(bad) = config.packets.iter().find(|&&s| s == 0) {
        return Err(ImportError::Usage(format!(
            "packet size {bad} is not positive"
        )));
    }
    if config.procs.contains(&0) || config.rails.contains(&0) || config.window == 0 {
        return Err(ImportError::Usage(
            "--procs, --rails and --window must be positive".into(),
        ));
    }
    if let Some(f) = &config.file {
        File::open(f).map_err(io_error(f))?;
    }
    let work = match &config.work_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(io_error(dir))?;
            WorkDir {
                path: dir.clone(),
                created: false,
                generated: None,
            }
        }
        None => {
            let dir = std::env::temp_dir().join(format!("ferry-import-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
            WorkDir {
                path: dir,
                created: true,
                generated: None,
            }
        }
    };
    let mut work = work;
    let file = match &config.file {
        Some(f) => f.clone(),
        None => {
            let f = work
                .path
                .join(format!("import-input-{}.bin", std::process::id()));
            work.generated = Some(f.clone());
            generate_file(&f, config.size)?;
            f
        }
    };
    let mut points = vec![];
    for &procs in &config.procs {
        for &packet in &config.packets {
            for round in 0..config.rounds.max(1) {
                // Odd rounds run the rails values in reverse, so that neither mode always
                // runs first (a warm page cache or a quiet moment would favour it).
                let mut order = config.rails.clone();
                if round % 2 == 1 {
                    order.reverse();
                }
                for rails in order {
                    let point = run_job(config, &work.path, &file, procs, packet, rails, round)?;
                    progress(&point);
                    points.push(point);
                }
            }
        }
    }
    Ok(points)
}

/// One `ferry run` job of the sweep.
fn run_job(
    config: &SweepConfig,
    work: &Path,
    file: &Path,
    procs: u32,
    packet: usize,
    rails: u32,
    round: u32,
) -> Result<Point, ImportError> {
    let report = work.join(format!(
        "report-{}-{procs}-{packet}-{rails}-{round}.txt",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&report);
    let mut command = Command::new(&config.ferry);
    command
        .args(["run", "-n", &(2 * procs).to_string(), "--transport", "tcp"])
        .arg("--timeout")
        .arg(config.timeout.as_secs_f64().to_string());
    if let Some(template) = &config.grid {
        command.arg("--grid").arg(grid_path(template, procs));
        if let Some(prefix) = &config.testbed_prefix {
            command.arg("--testbed-prefix").arg(prefix);
        }
    }
    command
        .arg(&config.ferry)
        .arg("bench-import-rank")
        .arg("--file")
        .arg(file)
        .arg("--packet")
        .arg(packet.to_string())
        .arg("--window")
        .arg(config.window.to_string())
        .arg("--out-dir")
        .arg(work)
        .arg("--report")
        .arg(&report);
    if let Some(at) = config.corrupt_at {
        command.arg("--corrupt-at").arg(at.to_string());
    }
    let output = command
        .env("FERRY_RAILS", rails.to_string())
        .stdin(Stdio::null())
        .output()
        .map_err(io_error(&config.ferry))?;
    let text = std::fs::read_to_string(&report);
    let _ = std::fs::remove_file(&report);
    if !output.status.success() {
        return Err(ImportError::Job {
            procs,
            packet,
            rails,
            status: format!("failed ({})", output.status),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stderr),
                String::from_utf8_lossy(&output.stdout)
            ),
        });
    }
    let text = text.map_err(io_error(&report))?;
    let pairs = parse_report(&text).map_err(|line| ImportError::Report {
        path: report.clone(),
        line,
    })?;
    if pairs.len() != procs as usize {
        return Err(ImportError::Report {
            path: report,
            line: format!("{} pairs where {procs} were expected", pairs.len()),
        });
    }
    Ok(Point {
        procs,
        packet,
        rails,
        round,
        pairs,
    })
}

/// Reads rank 0's report (`pair,bytes,seconds,verified` lines); a bad line comes back as `Err`.
pub fn parse_report(text: &str) -> Result<Vec<PairResult>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let parse = || {
                let f: Vec<&str> = line.split(',').collect();
                match f.as_slice() {
                    [pair, bytes, seconds, verified] => Some(PairResult {
                        pair: pair.parse().ok()?,
                        bytes: bytes.parse().ok()?,
                        seconds: seconds.parse().ok()?,
                        verified: verified.parse().ok()?,
                    }),
                    _ => None,
                }
            };
            parse().ok_or_else(|| line.to_string())
        })
        .collect()
}

/// Parses a byte count: digits with an optional suffix K, M, G (or KiB, MiB, GiB; powers of
/// 1024) or B, e.g. `4MiB`, `256K`, `65536`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(digits_end);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => return Err(format!("{text:?} is not a size (e.g. 65536, 16KiB, 4MiB)")),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("{text:?} is not a size (e.g. 65536, 16KiB, 4MiB)"))
}

/// The `FERRY_*` settings the jobs inherit, other than `FERRY_RAILS` (which the sweep sets):
/// `FERRY_RAIL_STRIPE`, `FERRY_TCP_EAGER` and `FERRY_TCP_CHUNK` decide which packets are
/// striped at all, so a table means little without them.
pub fn runtime_settings() -> String {
    let mut vars: Vec<String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("FERRY_") && k != "FERRY_RAILS")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    vars.sort();
    if vars.is_empty() {
        "runtime settings: defaults (no FERRY_* variables set)".into()
    } else {
        format!("runtime settings: {}", vars.join(" "))
    }
}

/// What a result file records about its run: the record every benchmark writes (command,
/// date, machine, load, commit: [`crate::record::machine_record`]), then the sweep and the
/// settings.
pub fn run_record(command: &str, config: &SweepConfig) -> Vec<String> {
    let mut lines: Vec<String> = crate::record::machine_record(command)
        .lines()
        .map(String::from)
        .collect();
    lines.extend([
        format!(
            "file: {}, window {} packets, {} round(s), transport tcp{}",
            match &config.file {
                Some(f) => f.display().to_string(),
                None => format!("generated, {} bytes", config.size),
            },
            config.window,
            config.rounds.max(1),
            match &config.grid {
                Some(g) => format!(", grid {g}"),
                None => ", one host (loopback)".into(),
            }
        ),
        runtime_settings(),
    ]);
    lines
}

// ---- the report ----

/// Median over rounds of one (P, packet size, rails) point.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Sender-receiver pairs.
    pub procs: u32,
    /// Packet size in bytes.
    pub packet: usize,
    /// `FERRY_RAILS`.
    pub rails: u32,
    /// Median aggregate MB/s.
    pub mbps: f64,
    /// Gain over the baseline rails value at the same P and packet size, in percent (`None`
    /// for the baseline itself).
    pub gain_pct: Option<f64>,
}

/// The rails value the others are compared with: 1 (bonding off) if measured, else the first.
pub fn baseline_rails(rails: &[u32]) -> u32 {
    if rails.contains(&1) {
        1
    } else {
        rails.first().copied().unwrap_or(1)
    }
}

/// Gain of `on` over `off` in percent.
pub fn gain_pct(off: f64, on: f64) -> Option<f64> {
    (off > 0.0).then(|| (on / off - 1.0) * 100.0)
}

/// Medians per (P, packet size, rails), in the order of `procs`, `packets`, `rails`, with the
/// gain of each rails value over [`baseline_rails`].
pub fn summarize(points: &[Point], procs: &[u32], packets: &[usize], rails: &[u32]) -> Vec<Cell> {
    let base = baseline_rails(rails);
    let median = |p: u32, s: usize, r: u32| {
        let mut v: Vec<f64> = points
            .iter()
            .filter(|x| (x.procs, x.packet, x.rails) == (p, s, r))
            .map(Point::mbps)
            .collect();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[v.len() / 2])
    };
    let mut cells = vec![];
    for &p in procs {
        for &s in packets {
            let off = median(p, s, base);
            for &r in rails {
                if let Some(mbps) = median(p, s, r) {
                    cells.push(Cell {
                        procs: p,
                        packet: s,
                        rails: r,
                        mbps,
                        gain_pct: (r != base)
                            .then(|| off.and_then(|o| gain_pct(o, mbps)))
                            .flatten(),
                    });
                }
            }
        }
    }
    cells
}

fn mode_label(rails: u32, all: &[u32]) -> String {
    let base = baseline_rails(all);
    match (rails == base, rails, all.len()) {
        (true, 1, _) => "off".into(),
        (false, _, 2) if base == 1 => "on".into(),
        _ => format!("{rails} rails"),
    }
}

/// The seed's table 1: one row per P, for each packet size the MB/s of each rails value and the
/// gain of each non-baseline one. `title` goes above it.
pub fn table(
    cells: &[Cell],
    procs: &[u32],
    packets: &[usize],
    rails: &[u32],
    title: &str,
) -> String {
    let base = baseline_rails(rails);
    let others: Vec<u32> = rails.iter().copied().filter(|&r| r != base).collect();
    let mut columns: Vec<String> = vec![mode_label(base, rails)];
    for &r in &others {
        columns.push(mode_label(r, rails));
        columns.push(if others.len() == 1 {
            "gain %".into()
        } else {
            format!("gain{r} %")
        });
    }
    const W: usize = 8;
    let group = columns.len() * (W + 1) - 1;
    let mut s = format!("{title}\n");
    let mut head = format!("{:>3} ", "");
    for &size in packets {
        let _ = write!(head, "|{:^group$}", size_label(size));
    }
    let _ = write!(s, "{}\n{:>3} ", head.trim_end(), "P");
    for _ in packets {
        s.push('|');
        let heads: Vec<String> = columns.iter().map(|c| format!("{c:>W$}")).collect();
        s.push_str(&heads.join(" "));
    }
    s.push('\n');
    let find = |p: u32, size: usize, r: u32| {
        cells
            .iter()
            .find(|c| (c.procs, c.packet, c.rails) == (p, size, r))
    };
    for &p in procs {
        let _ = write!(s, "{p:>3} ");
        for &size in packets {
            let mut values =
                vec![find(p, size, base).map_or("-".into(), |c| format!("{:.1}", c.mbps))];
            for &r in &others {
                let c = find(p, size, r);
                values.push(c.map_or("-".into(), |c| format!("{:.1}", c.mbps)));
                values.push(
                    c.and_then(|c| c.gain_pct)
                        .map_or("-".into(), |g| format!("{g:+.1}")),
                );
            }
            s.push('|');
            let vals: Vec<String> = values.iter().map(|v| format!("{v:>W$}")).collect();
            s.push_str(&vals.join(" "));
        }
        s.push('\n');
    }
    s
}

/// The table as CSV: `procs,packet_bytes,rails,mbps,gain_pct` (gain empty for the baseline),
/// after `#` comment lines.
pub fn summary_csv(cells: &[Cell], comments: &[String]) -> String {
    let mut s = String::new();
    for c in comments {
        let _ = writeln!(s, "# {c}");
    }
    s.push_str("procs,packet_bytes,rails,mbps,gain_pct\n");
    for c in cells {
        let gain = c.gain_pct.map_or(String::new(), |g| format!("{g:.2}"));
        let _ = writeln!(
            s,
            "{},{},{},{:.3},{gain}",
            c.procs, c.packet, c.rails, c.mbps
        );
    }
    s
}

/// Every job's raw figures: `procs,packet_bytes,rails,round,pair,bytes,seconds,verified`, one
/// line per pair, plus a `pair` of `all` per job with the aggregate (bytes over slowest time)
/// and its MB/s in a last column.
pub fn points_csv(points: &[Point], comments: &[String]) -> String {
    let mut s = String::new();
    for c in comments {
        let _ = writeln!(s, "# {c}");
    }
    s.push_str("procs,packet_bytes,rails,round,pair,bytes,seconds,verified,mbps\n");
    for p in points {
        let key = format!("{},{},{},{}", p.procs, p.packet, p.rails, p.round);
        for pair in &p.pairs {
            let _ = writeln!(
                s,
                "{key},{},{},{:.6},{},{:.3}",
                pair.pair,
                pair.bytes,
                pair.seconds,
                pair.verified,
                aggregate_mbps(pair.bytes, pair.seconds)
            );
        }
        let all = p.pairs.iter().all(|x| x.verified);
        let _ = writeln!(
            s,
            "{key},all,{},{:.6},{all},{:.3}",
            p.bytes(),
            p.slowest(),
            p.mbps()
        );
    }
    s
}

/// MB/s against packet size, one line per P and rails value, as a PNG.
pub fn plot_points(
    path: &Path,
    cells: &[Cell],
    procs: &[u32],
    rails: &[u32],
    title: &str,
) -> Result<(), String> {
    let labels: Vec<(u32, u32, String)> = procs
        .iter()
        .flat_map(|&p| {
            rails.iter().map(move |&r| {
                (
                    p,
                    r,
                    format!(
                        "P={p}, {} ({r} rail{})",
                        mode_label(r, rails),
                        if r == 1 { "" } else { "s" }
                    ),
                )
            })
        })
        .collect();
    let series: Vec<Series> = labels
        .iter()
        .map(|(p, r, label)| Series {
            label,
            points: cells
                .iter()
                .filter(|c| (c.procs, c.rails) == (*p, *r))
                .map(|c| (c.packet as f64, c.mbps))
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    crate::plot(
        path,
        title,
        crate::Axis::bytes("packet size"),
        crate::Axis::plain("aggregate MB/s"),
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(procs: u32, packet: usize, rails: u32, round: u32, secs: &[f64]) -> Point {
        Point {
            procs,
            packet,
            rails,
            round,
            pairs: secs
                .iter()
                .enumerate()
                .map(|(pair, &seconds)| PairResult {
                    pair,
                    bytes: 1_000_000,
                    seconds,
                    verified: true,
                })
                .collect(),
        }
    }

    #[test]
    fn aggregate_is_all_bytes_over_the_slowest_pair() {
        let p = point(2, 16 << 10, 1, 0, &[0.5, 1.0]);
        assert_eq!(p.bytes(), 2_000_000);
        assert_eq!(p.slowest(), 1.0);
        assert_eq!(p.mbps(), 2.0);
        assert_eq!(aggregate_mbps(5, 0.0), 0.0);
    }

    #[test]
    fn gains_medians_table_and_csv() {
        let (procs, packets, rails) = ([1, 2], [16 << 10, 256 << 10], [1, 2]);
        let mut points = vec![];
        for &p in &procs {
            for &s in &packets {
                // Off: 1 MB/s per pair; on: 1.5 MB/s per pair, with an outlier round.
                points.push(point(p, s, 1, 0, &vec![1.0; p as usize]));
                points.push(point(p, s, 2, 0, &vec![1.0 / 1.5; p as usize]));
                points.push(point(p, s, 2, 1, &vec![10.0; p as usize]));
                points.push(point(p, s, 2, 2, &vec![1.0 / 1.5; p as usize]));
            }
        }
        let cells = summarize(&points, &procs, &packets, &rails);
        assert_eq!(cells.len(), 8);
        let on = cells
            .iter()
            .find(|c| (c.procs, c.packet, c.rails) == (2, 256 << 10, 2))
            .unwrap();
        assert!((on.mbps - 3.0).abs() < 1e-9, "{on:?}");
        assert!((on.gain_pct.unwrap() - 50.0).abs() < 1e-9, "{on:?}");
        assert_eq!(cells[0].gain_pct, None);
        assert_eq!(gain_pct(0.0, 1.0), None);
        assert_eq!(gain_pct(2.0, 1.0), Some(-50.0));

        let t = table(&cells, &procs, &packets, &rails, "T");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "T");
        assert_eq!(lines[1], "    |          16 KiB          |         256 KiB");
        assert_eq!(
            lines[2],
            "  P |     off       on   gain %|     off       on   gain %"
        );
        assert_eq!(
            lines[4],
            "  2 |     2.0      3.0    +50.0|     2.0      3.0    +50.0"
        );

        let csv = summary_csv(&cells, &["cmd".into()]);
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows[0], "# cmd");
        assert_eq!(rows[1], "procs,packet_bytes,rails,mbps,gain_pct");
        assert_eq!(rows[2], "1,16384,1,1.000,");
        assert_eq!(rows[3], "1,16384,2,1.500,50.00");

        let raw = points_csv(&points[..1], &[]);
        assert_eq!(
            raw,
            "procs,packet_bytes,rails,round,pair,bytes,seconds,verified,mbps\n\
             1,16384,1,0,0,1000000,1.000000,true,1.000\n\
             1,16384,1,0,all,1000000,1.000000,true,1.000\n"
        );
    }

    #[test]
    fn labels_for_several_rails_values() {
        assert_eq!(mode_label(1, &[1, 2]), "off");
        assert_eq!(mode_label(2, &[1, 2]), "on");
        assert_eq!(mode_label(4, &[1, 2, 4]), "4 rails");
        assert_eq!(baseline_rails(&[2, 4]), 2);
        let cells = summarize(
            &[point(1, 1024, 2, 0, &[1.0]), point(1, 1024, 4, 0, &[0.5])],
            &[1],
            &[1024],
            &[2, 4],
        );
        assert_eq!(cells[1].gain_pct, Some(100.0));
        let t = table(&cells, &[1], &[1024], &[2, 4], "");
        assert!(t.contains("| 2 rails  4 rails   gain %"), "{t}");
        let t = table(&cells, &[1], &[1024], &[1, 2, 4], "");
        assert!(
            t.contains("|     off  2 rails  gain2 %  4 rails  gain4 %"),
            "{t}"
        );
    }

    #[test]
    fn report_lines_and_window_lengths() {
        let r = parse_report("0,100,0.5,true\n1,100,0.25,false\n").unwrap();
        assert_eq!(
            r[1],
            PairResult {
                pair: 1,
                bytes: 100,
                seconds: 0.25,
                verified: false
            }
        );
        assert_eq!(
            parse_report("0,x,0.5,true"),
            Err("0,x,0.5,true".to_string())
        );
        assert_eq!(window_lens(10, 4, 8), vec![4, 4, 2]);
        assert_eq!(window_lens(10, 4, 2), vec![4, 4]);
        assert!(window_lens(0, 4, 2).is_empty());
        assert_eq!(size_label(16 << 10), "16 KiB");
        assert_eq!(size_label(4 << 20), "4 MiB");
        assert_eq!(grid_path("g-{P}.toml", 4), PathBuf::from("g-4.toml"));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("16KiB"), Ok(16 << 10));
        assert_eq!(parse_size("256k"), Ok(256 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn generated_file_is_deterministic() {
        let dir = std::env::temp_dir().join(format!("ferry-import-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        generate_file(&a, 3 << 20 | 5).unwrap();
        generate_file(&b, 3 << 20 | 5).unwrap();
        let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert_eq!(x.len(), 3 << 20 | 5);
        assert_eq!(x, y);
        assert_ne!(x[..8], x[8..16]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
