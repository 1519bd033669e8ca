//! Several relays per private cluster, in the testbed (`crates/testbed/grids/relays.toml`:
//! cluster a behind three front nodes fa, fa2, fa3 and cluster b behind two, fb and fb2, each
//! with its own public address, NAT and relay), as root:
//!
//! - `ferry run --grid` starts a relay on every front node and gives every pair three rails
//!   (the most relays of a cluster); every pair of four ranks (with one on the grid's public
//!   host) exchanges 0 B … 4 MiB, and every
//!   relay carries connections (they spread over the relays) and bytes (trunking);
//! - a relay of cluster b killed in the middle of a checked stream from a to b (every byte
//!   compared): the rails through it fail, what they carried goes again through the other
//!   relay, and the job passes; the dialer, which sees the death only through its failed
//!   rail, says that the connections it opens from then on leave that relay out;
//! - with one relay per cluster (the grid without its `[[cluster.relay]]` tables), killing it
//!   ends the job with a message naming the relay.
//!
//! Each testbed has a per-run prefix and is removed on drop, also when an assertion fails.
//! Without root the test says so and passes.

mod common;
use common::{example, grid_file, show};
use ferry_grid::Topology;
use ferry_testbed::Testbed;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `ferry run --grid GRID --testbed-prefix PREFIX -n RANKS --timeout 60 check ARGS`.
fn job(grid: &Path, prefix: &str, ranks: usize, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .env_remove("MPIEXEC_TIMEOUT")
        .env_remove("FERRY_SHOW_PATHS")
        .env_remove("FERRY_RAILS")
        .env("FERRY_RAIL_STATS", "1")
        .stdin(Stdio::null())
        .args(["run", "--grid"])
        .arg(grid)
        .args(["--testbed-prefix", prefix, "-n", &ranks.to_string()])
        .args(["--timeout", "60"])
        .arg(example("check"))
        .args(args);
    command
}

/// The pid of the one process (the job's relay) in namespace `ns`, once it runs.
fn relay_pid(ns: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("ip")
            .args(["netns", "pids", ns])
            .output()
            .expect("ip netns pids");
        let pids: Vec<i32> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if let [pid] = pids[..] {
            return pid;
        }
        assert!(Instant::now() < deadline, "no relay in {ns}: {pids:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts a checked stream of `count` × 4 MiB from rank 0 (cluster a) to rank 1 (cluster b)
/// and kills the relay on `front` (by its pid) once `after` messages have arrived. Returns
/// the job's exit status, its stdout and stderr.
fn stream_and_kill(
    testbed: &Testbed,
    grid: &Path,
    front: &str,
    count: usize,
    after: usize,
) -> (std::process::ExitStatus, String, String) {
    let ns = testbed
        .namespace(front)
        .expect("front namespace")
        .to_string();
    let mut child: Child = job(
        grid,
        testbed.plan().prefix(),
        2,
        &["stream", "4194304", &count.to_string(), "1"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("ferry runs");
    let pid = relay_pid(&ns);
    let stderr = child.stderr.take().expect("stderr");
    let errors = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut stdout = String::new();
    let mut killed = false;
    for line in std::io::BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let Ok(line) = line else { break };
        let arrived = line
            .strip_prefix("stream progress ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse::<usize>().ok());
        if !killed && arrived.is_some_and(|n| n >= after) {
            let status = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .expect("kill runs");
            assert!(status.success(), "kill {pid}");
            killed = true;
        }
        stdout += &line;
        stdout.push('\n');
    }
    let status = child.wait().expect("job ends");
    let stderr = errors.join().unwrap_or_default();
    assert!(
        killed,
        "the stream ended before the kill:\n{stdout}\n{stderr}"
    );
    (status, stdout, stderr)
}

/// The bytes and pairings a relay reported when it shut down (`[relay NAME] … paired=N …
/// bytes_in=B`), if it did.
fn relay_report(stderr: &str, front: &str) -> Option<(u64, u64)> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&format!("[relay {front}] ferry relay: up ")))?;
    let field = |name: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
    };
    Some((field("paired")?, field("bytes_in")?))
}

#[test]
fn relays_spread_trunk_and_fail_over() {
    if !ferry_testbed::is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let grid = grid_file("relays.toml");
    let topology = Topology::load(&grid).expect("grid file");
    let prefix = format!("fy{}rl-", std::process::id());
    let testbed = Testbed::up(&topology, &prefix).expect("testbed up");

    // Four ranks (a1: 0 and 3, b1: 1, p1: 2): every pair, every size, three rails each;
    // 0 reaches 1 through b's relays, 1 reaches 3 through a's (rails 0, 1, 2 through fa2, fa3
    // and fa), the private ranks reach p1 through their NAT.
    let out = job(&grid, &prefix, 4, &["allpairs", "4194304"])
        .output()
        .expect("ferry runs");
    assert!(out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for front in ["fa", "fa2", "fa3", "fb", "fb2"] {
        let report = relay_report(&stderr, front);
        assert!(
            report.is_some_and(|(paired, bytes)| paired >= 1 && bytes > 1 << 20),
            "relay on {front} carried {report:?}: {}",
            show(&out)
        );
    }
    assert!(
        stderr.contains("ferry: rank 0 to rank 1: rail 0") && stderr.contains("rail 2"),
        "three rails per pair: {}",
        show(&out)
    );

    // A relay of b dies in the middle of a checked stream from a to b: the job goes on over
    // the other. fb2 carries rail 0 of the pair (0 + 1 + 0 mod 2 = 1: fb2), the one with the
    // ordered frames, so those are sent again too.
    let (status, stdout, stderr) = stream_and_kill(&testbed, &grid, "fb2", 96, 16);
    let all = format!("status {status:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(status.success(), "{all}");
    assert!(stdout.contains("stream ok"), "{all}");
    // What the ranks said about the relay and the rails, and the stream's speed.
    for line in stderr.lines().chain(stdout.lines()) {
        if line.contains("went away") || line.contains("failed") || line.contains("stream ok") {
            eprintln!("{line}");
        }
    }
    assert!(stderr.contains("relay on fb2 went away"), "{all}");
    assert!(stderr.contains("ordered frames from number"), "{all}");
    // The dialer (rank 0, in a) learns of fb2's death only from its rail through it, and
    // leaves fb2 out of the connections it opens from then on (`ferry_grid::relays::
    // RelayDeaths`; none is opened in this job: every pair is dialled at start-up).
    assert!(
        stderr.contains("rank 0: connections opened from now on leave out the relay on fb2"),
        "{all}"
    );

    // One relay per cluster: its death ends the job, naming it.
    let mut one = topology.clone();
    for cluster in &mut one.clusters {
        cluster.more_fronts.clear();
    }
    let single = std::env::temp_dir().join(format!("{prefix}one-relay.toml"));
    let text = std::fs::read_to_string(&grid)
        .expect("grid text")
        .split("[[cluster")
        .filter(|part| !part.starts_with(".relay]]"))
        .collect::<Vec<_>>()
        .join("[[cluster");
    std::fs::write(&single, text).expect("write the one-relay grid");
    assert_eq!(Topology::load(&single).expect("one-relay grid"), one);
    let started = Instant::now();
    let (status, stdout, stderr) = stream_and_kill(&testbed, &single, "fb", 400, 16);
    let _ = std::fs::remove_file(&single);
    let all = format!("status {status:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!status.success(), "{all}");
    assert!(stderr.contains("relay on fb went away"), "{all}");
    eprintln!(
        "one-relay job ended {:?} after its start",
        started.elapsed()
    );

    testbed.down().expect("testbed down");
}
