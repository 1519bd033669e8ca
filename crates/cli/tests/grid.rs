//! `ferry run --grid` in the one-machine testbed, as root: the grid of three clusters
//! (`crates/testbed/grids/three.toml`: private a and b behind NAT with relays on their front
//! nodes, public p; two hosts each, one rank per host).
//!
//! - the path matrix rank 0 prints is the expected one (same cluster direct, private → public
//!   through NAT, private ↔ private of other clusters through the peer's relay);
//! - every pair of ranks exchanges checksummed messages of 0 B … 8 MiB (`check allpairs`);
//! - allreduce, bcast, alltoall (and the rest of `check coll`) give the sequential reference;
//! - both again with the relays forwarding in the kernel (`--relay-copy sockmap`), and with
//!   the front nodes forwarding through the relays' pinholes (`--relay-copy nat`; their rules
//!   are gone after the job);
//! - the same pairs exchange over two rails each (through the same NAT or relay);
//! - strangers at a rank's port, also posing as its relay (forged or replayed INCOMING), are
//!   refused and the job completes;
//! - killing the relay of cluster a fails the job within seconds, saying so.
//!
//! One testbed (per-run prefix) for all of it, removed on drop, also when an assertion fails.
//! Without root the test says so and passes.

mod common;
use common::{
    assert_ok_says, example, grid, grid_job, netns_pids, show, testbed_allowed, testbed_of,
};
use ferry_testbed::UpOptions;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn grid_run(prefix: &str, extra: &[&str], args: &[&str]) -> Command {
    let mut command = grid_job("three.toml", prefix, 6);
    // The relays are under test here: a and b would punch through their NATs (tests/punch.rs).
    command
        .env("FERRY_PUNCH", "0")
        .args(["--timeout", "60"])
        .args(extra)
        .arg(example("check"))
        .args(args);
    command
}

/// The matrix written out by hand for three.toml (ranks a1 a2 b1 b2 p1 p2); `*` = row dials.
/// Read from the public side, a private rank is behind its relay (`R`), but the private side
/// reaches out through its NAT (`N*`), so no public rank ever needs a relay.
const EXPECTED: &str = "\
paths (row -> column; * = row dials; D direct, N via my NAT, R via peer's relay, NR both)
     r0   r1   r2   r3   r4   r5
r0   -    D*   NR*  NR*  N*   N*
r1   D    -    NR*  NR*  N*   N*
r2   NR   NR   -    D*   N*   N*
r3   NR   NR   D    -    N*   N*
r4   R    R    R    R    -    D*
r5   R    R    R    R    D    -
";

#[test]
fn a_job_spans_three_clusters() {
    if !testbed_allowed() {
        return;
    }
    let (testbed, prefix) = testbed_of(&grid("three.toml"), "g", &UpOptions::default());

    // Paths and every pair, 0 B … 8 MiB.
    let start = Instant::now();
    let out = grid_run(&prefix, &["--show-paths"], &["allpairs", "8388608"])
        .output()
        .expect("ferry runs");
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let matrix: String = stdout
        .lines()
        .take_while(|l| !l.starts_with("r0 = "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(matrix, EXPECTED, "{}", show(&out));
    assert!(stdout.contains("r2 = b/fb/b1:"), "{stdout}");
    eprintln!(
        "allpairs up to 8 MiB across the grid: {:?}",
        start.elapsed()
    );

    // Collectives against the sequential reference.
    let start = Instant::now();
    let out = grid_run(&prefix, &[], &["coll"])
        .output()
        .expect("ferry runs");
    assert_ok_says(&out, "coll ok: 6 ranks");
    eprintln!("collectives across the grid: {:?}", start.elapsed());

    // The same with the relays forwarding in the kernel: `--relay-copy sockmap` (the relay's
    // sockets, joined by a BPF program) and `--relay-copy nat` (a pinhole per connection, the
    // front node's packet forwarding): every pair 0 B … 8 MiB and the collectives; the ranks'
    // closing connections pass each FIN on.
    let field = |line: &str, name: &str| -> u64 {
        line.split(' ')
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    for mode in ["sockmap", "nat"] {
        for args in [&["allpairs", "8388608"][..], &["coll"]] {
            let start = Instant::now();
            let out = grid_run(&prefix, &["--relay-copy", mode], args)
                .output()
                .expect("ferry runs");
            assert!(out.status.success(), "{}", show(&out));
            // The relays' last status lines: their connections went into the kernel, without
            // errors.
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last: Vec<&str> = stderr
                .lines()
                .filter(|l| l.starts_with("[relay ") && l.contains("sockmap_pairs="))
                .collect();
            assert_eq!(last.len(), 2, "{}", show(&out));
            let mut kernel = 0;
            for line in last {
                // (a's ranks dial b's relay, so only fb forwards here.)
                assert_eq!(field(line, "errors="), 0, "{line}");
                if mode == "sockmap" {
                    assert_eq!(
                        field(line, "sockmap_pairs="),
                        field(line, "paired="),
                        "{line}"
                    );
                    kernel += field(line, "sockmap_pairs=");
                } else {
                    assert_eq!(field(line, "paired="), 0, "{line}");
                    assert_eq!(field(line, "bytes_in="), 0, "{line}");
                    kernel += field(line, "pinholes=");
                }
            }
            // a1 and a2 each reach b1 and b2 through fb.
            assert_eq!(kernel, 4, "{}", show(&out));
            eprintln!("{args:?} with {mode} relays: {:?}", start.elapsed());
        }
    }
    // The pinhole chains went with the relays.
    for front in ["fa", "fb"] {
        for table in ["nat", "filter"] {
            let rules = Command::new("ip")
                .args(["netns", "exec", &format!("{prefix}{front}"), "iptables"])
                .args(["-w", "-t", table, "-S"])
                .output()
                .expect("iptables runs");
            let rules = String::from_utf8_lossy(&rules.stdout);
            assert!(!rules.contains("FERRY-RELAY"), "{front} {table}: {rules}");
        }
    }

    // Two rails per pair along every kind of path (direct, NAT, relay): each rail is a
    // connection of its own through the same NAT or relay.
    let out = grid_run(&prefix, &["--rails", "2"], &["allpairs", "4194304"])
        .output()
        .expect("ferry runs");
    assert!(out.status.success(), "{}", show(&out));

    // Strangers at a rank's port (garbage, a forged handshake, posing as a relay with garbage,
    // a forged INCOMING, a replayed genuine one) are refused and the job completes.
    let out = grid_run(&prefix, &[], &["stranger"])
        .output()
        .expect("ferry runs");
    assert!(out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refused connection"), "{}", show(&out));

    // Killing the relay of cluster a ends the job within seconds, naming the relay.
    let mut job = grid_run(&prefix, &[], &["barrier", "100000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferry runs");
    let front_ns = testbed.namespace("fa").expect("fa").to_string();
    // The relay is the only process in fa's namespace; wait until the job is running.
    let deadline = Instant::now() + Duration::from_secs(20);
    let relay_pid = loop {
        let pids = netns_pids(&front_ns);
        if let [pid] = pids[..] {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "no relay in {front_ns}: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // Let setup finish and barriers run through the relays.
    std::thread::sleep(Duration::from_secs(2));
    assert!(job.try_wait().expect("wait").is_none(), "job ended early");
    // The relay our job started (the only process in that namespace), by its pid.
    let killed = Command::new("kill")
        .args(["-KILL", &relay_pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let killed_at = Instant::now();
    let out = job.wait_with_output().expect("job output");
    let took = killed_at.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: {}",
        show(&out)
    );
    assert!(stderr.contains("relay on fa went away"), "{}", show(&out));
    eprintln!("job ended {took:?} after the relay was killed");

    // A launcher killed outright takes its relays and ranks with it: nothing of the job is
    // left in any namespace.
    let mut job = grid_run(&prefix, &[], &["barrier", "100000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ferry runs");
    let namespaces = testbed.plan().all_namespaces();
    let deadline = Instant::now() + Duration::from_secs(20);
    while netns_pids(&front_ns).is_empty() {
        assert!(Instant::now() < deadline, "no relay in {front_ns}");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    job.kill().expect("SIGKILL the launcher");
    let _ = job.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<(String, Vec<i32>)> = namespaces
            .iter()
            .map(|ns| (ns.clone(), netns_pids(ns)))
            .filter(|(_, pids)| !pids.is_empty())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running 5 s after the launcher was killed: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    testbed.down().expect("testbed down");
}
