//! Relay vs direct vs NAT between namespaces of the testbed (needs root), and the CPU time per
//! GiB forwarded with splice, buffered copy and sockmap (in-kernel) forwarding.
//!
//! ```text
//! cargo build --release -p ferry-relay --bins --examples
//! target/release/examples/relay_bench [GIB] [ROUND_TRIPS] [WAN_RATE]
//! ```
//!
//! Paths (grid `crates/testbed/grids/three.toml`): direct = p1 → p2 (both public); NAT =
//! a1 → p2 (private → public through a's front); relay = p1 → a's relay on fa → a1; relay+NAT
//! = b1 → b's NAT → a's relay → a1. Throughput: GIB GiB streamed one way in 1 MiB writes.
//! Latency: ROUND_TRIPS ping-pongs of 1 byte, median and mean. WAN_RATE (e.g. `1gbit`) puts a
//! `tc tbf` limit on every link to the WAN bridge. Prints a Markdown table.
//!
//! CPU per GiB streamed, from separate runs without the round trips: the relay process's own
//! (user + system), the two endpoints' (this process), kernel threads' (kworkers, where the
//! sockmap's redirected bytes are sent, and ksoftirqd), the machine's softirq time and the
//! machine's busy time from `/proc/stat` (this kernel has tick-based accounting without
//! IRQ-time accounting: softirq time that interrupts a process counts for that process too,
//! and the machine figures include whatever else runs). Environment: `RELAY_BENCH_REPEAT=N`
//! repeats the whole set N times, interleaved; `RELAY_BENCH_COPIES=splice,sockmap` chooses
//! the relay's modes (default splice, buffered, sockmap).

use ferry_grid::Topology;
use ferry_relay::client;
use ferry_testbed::{enter, Testbed};
use ferry_wire::relay::{relay_key, ReplayGuard};
use ferry_wire::JobKey;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const JOB: u64 = 0xbe7c;
const CHUNK: usize = 1 << 20;

fn key() -> JobKey {
    JobKey([0x77; 32])
}

fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns).expect("enter namespace");
        f()
    })
}

/// Target: accepts one connection (relayed when `relayed`), sinks `bytes`, acknowledges with one
/// byte, then echoes single bytes until EOF.
fn target(listener: TcpListener, relayed: bool, bytes: u64) {
    let (mut s, _) = listener.accept().expect("accept");
    let _ = s.set_nodelay(true);
    if relayed {
        let mut seen = ReplayGuard::default();
        client::accept(&mut s, &key(), JOB, 1, &mut seen).expect("relayed accept");
    }
    let mut buf = vec![0u8; CHUNK];
    let mut left = bytes;
    while left > 0 {
        let n = s.read(&mut buf[..CHUNK.min(left as usize)]).expect("read");
        assert!(n > 0, "stream ended early");
        left -= n as u64;
    }
    s.write_all(&[1]).expect("ack");
    let mut b = [0u8; 1];
    while s.read(&mut b).is_ok_and(|n| n == 1) {
        if s.write_all(&b).is_err() {
            break;
        }
    }
}

struct Result {
    gbit_s: f64,
    median_us: f64,
    mean_us: f64,
}

/// Client: streams `bytes`, waits for the ack, then `rounds` 1-byte round trips.
fn client(mut s: TcpStream, bytes: u64, rounds: usize) -> Result {
    let _ = s.set_nodelay(true);
    let buf = vec![0x5au8; CHUNK];
    let t0 = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = CHUNK.min(left as usize);
        s.write_all(&buf[..n]).expect("write");
        left -= n as u64;
    }
    let mut b = [0u8; 1];
    s.read_exact(&mut b).expect("ack");
    let secs = t0.elapsed().as_secs_f64();
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        s.write_all(&b).expect("ping");
        s.read_exact(&mut b).expect("pong");
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Result {
        gbit_s: bytes as f64 * 8.0 / secs / 1e9,
        median_us: times.get(rounds / 2).copied().unwrap_or(0.0),
        mean_us: times.iter().sum::<f64>() / rounds.max(1) as f64,
    }
}

fn cpu_secs(pid: u32) -> f64 {
    cpu_of(&format!("/proc/{pid}/stat"))
}

fn cpu_of(stat_file: &str) -> f64 {
    let stat = std::fs::read_to_string(stat_file).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the command name (the
    // first being the state letter).
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    let ticks = field(11) + field(12);
    ticks / 100.0
}

/// CPU seconds of kernel threads (children of kthreadd, pid 2): kworkers, ksoftirqd.
fn kthreads_secs() -> f64 {
    let mut sum = 0.0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let file = format!("/proc/{pid}/stat");
        let stat = std::fs::read_to_string(&file).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(2) {
            sum += cpu_of(&file);
        }
    }
    sum
}

/// Machine-wide (busy, softirq) seconds from /proc/stat's first line.
fn machine_secs() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let at = |i: usize| f.get(i).copied().unwrap_or(0.0) / 100.0;
    (at(0) + at(1) + at(2) + at(5) + at(6) + at(7), at(6))
}

/// CPU snapshot: (relay, endpoints, kernel threads, softirq, machine busy).
fn snapshot(relay: Option<u32>) -> [f64; 5] {
    let (busy, softirq) = machine_secs();
    [
        relay.map_or(0.0, cpu_secs),
        cpu_of("/proc/self/stat"),
        kthreads_secs(),
        softirq,
        busy,
    ]
}

struct Relay {
    child: Child,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_relay(ns: &str, jobs: &std::path::Path, copy: &str) -> Relay {
    let exe = std::env::current_exe().expect("exe");
    let relay = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("ferry-relay"))
        .expect("ferry-relay path");
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(relay)
        .args(["--listen", "0.0.0.0:7390", "--copy", copy, "--jobs-dir"])
        .arg(jobs)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferry-relay (build it with --bins)");
    let mut line = String::new();
    let stderr = child.stderr.take().expect("stderr");
    let mut reader = BufReader::new(stderr);
    // Up to the listening line; anything before it (a fallback) is shown.
    while reader.read_line(&mut line).expect("relay line") > 0 && !line.contains("listening") {
        eprint!("{line}");
        line.clear();
    }
    std::thread::spawn(move || for _ in reader.lines() {});
    Relay { child }
}

fn run_path(
    tb: &Testbed,
    from: &str,
    to: &str,
    dial: SocketAddr,
    relayed: Option<SocketAddr>,
    bytes: u64,
    rounds: usize,
) -> Result {
    let to_ns = tb.namespace(to).expect("ns").to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let server = in_ns(&to_ns, move || {
        let listener = TcpListener::bind("0.0.0.0:9400").expect("bind");
        let registration =
            relayed.map(|relay| client::register(relay, &key(), JOB, 1, 9400).expect("register"));
        tx.send(()).expect("ready");
        target(listener, relayed.is_some(), bytes);
        drop(registration);
    });
    rx.recv().expect("target ready");
    let relay_public = relayed.map(|_| dial);
    let r = in_ns(tb.namespace(from).expect("ns"), move || {
        let s = match relay_public {
            Some(relay) => client::connect(relay, &key(), JOB, 0, 1).expect("connect via relay"),
            None => TcpStream::connect(dial).expect("connect"),
        };
        client(s, bytes, rounds)
    })
    .join()
    .expect("client");
    server.join().expect("server");
    r
}

fn main() {
    let gib: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2.0);
    let rounds: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10000);
    let bytes = (gib * (1u64 << 30) as f64) as u64;
    let wan_rate = std::env::args().nth(3);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testbed/grids/three.toml");
    let mut text = std::fs::read_to_string(path).expect("grid");
    if let Some(rate) = &wan_rate {
        text = format!("wan_rate = {rate:?}\n{text}");
    }
    let grid = Topology::parse(path, &text).expect("grid");
    println!(
        "{gib} GiB one way, {rounds} round trips, WAN limit {}",
        wan_rate.as_deref().unwrap_or("none")
    );
    let tb =
        Testbed::up(&grid, &format!("fy{}b-", std::process::id())).expect("testbed (needs root)");
    let jobs = std::env::temp_dir().join(format!("ferry-relay-bench-{}", std::process::id()));
    std::fs::create_dir_all(&jobs).expect("jobs dir");
    let file = jobs.join(format!("{JOB:016x}.key"));
    std::fs::write(&file, relay_key(&key()).to_hex()).expect("key");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let direct: SocketAddr = "198.18.1.2:9400".parse().expect("addr");
    let relay_public: SocketAddr = "198.18.0.10:7390".parse().expect("addr");
    let relay_inside: SocketAddr = "10.1.0.1:7390".parse().expect("addr");
    println!(
        "| path | copy | throughput Gbit/s | RTT median µs | RTT mean µs | CPU s/GiB: relay | endpoints | kernel threads | softirq (machine) | busy (machine) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let repeat: usize = std::env::var("RELAY_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let copies: Vec<String> = std::env::var("RELAY_BENCH_COPIES")
        .unwrap_or_else(|_| "splice,buffered,sockmap".into())
        .split(',')
        .map(str::to_string)
        .collect();
    // One path: a streaming run measured for CPU, then a run of round trips only.
    let measure = |name: &str,
                   copy: &str,
                   from: &str,
                   to: &str,
                   dial: SocketAddr,
                   relayed: Option<SocketAddr>,
                   relay_pid: Option<u32>| {
        let before = snapshot(relay_pid);
        let stream = run_path(&tb, from, to, dial, relayed, bytes, 0);
        let after = snapshot(relay_pid);
        let rtt = run_path(&tb, from, to, dial, relayed, 1, rounds);
        let per_gib: Vec<String> = (0..5)
            .map(|i| {
                if i == 0 && relay_pid.is_none() {
                    "-".to_string()
                } else {
                    format!("{:.3}", (after[i] - before[i]) / gib)
                }
            })
            .collect();
        println!(
            "| {name} | {copy} | {:.2} | {:.1} | {:.1} | {} |",
            stream.gbit_s,
            rtt.median_us,
            rtt.mean_us,
            per_gib.join(" | ")
        );
    };
    for _ in 0..repeat {
        measure("direct p1→p2", "-", "p1", "p2", direct, None, None);
        measure("NAT a1→p2", "-", "a1", "p2", direct, None, None);
        for copy in &copies {
            let relay = start_relay(tb.namespace("fa").expect("fa"), &jobs, copy);
            let pid = relay.child.id();
            measure(
                "relay p1→fa→a1",
                copy,
                "p1",
                "a1",
                relay_public,
                Some(relay_inside),
                Some(pid),
            );
            measure(
                "NAT+relay b1→fb→fa→a1",
                copy,
                "b1",
                "a1",
                relay_public,
                Some(relay_inside),
                Some(pid),
            );
            drop(relay);
        }
    }
    let _ = std::fs::remove_dir_all(&jobs);
    drop(tb);
}
