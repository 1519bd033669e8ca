//! Multi-process point-to-point tests: real jobs through `ferry run`, on both transports,
//! running the self-checking `check` and `ring` examples of ferry-core.
//!
//! `cargo test --workspace` builds those examples next to the `ferry` binary. Jobs run one at a
//! time: they measure how fast a failing job ends, which parallel jobs on two cores would blur.

mod common;
use common::example;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Job {
    output: Output,
    elapsed: Duration,
}

impl Job {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    fn code(&self) -> Option<i32> {
        self.output.status.code()
    }
    #[track_caller]
    fn assert_ok(&self) {
        assert_eq!(
            self.code(),
            Some(0),
            "job failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout(),
            self.stderr()
        );
    }
}

/// Runs `ferry run -n N --transport T --timeout LIMIT program args…` with extra environment.
fn job(
    n: u32,
    transport: &str,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    limit_secs: u32,
) -> Job {
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .args([
            "run",
            "-n",
            &n.to_string(),
            "--transport",
            transport,
            "--timeout",
            &limit_secs.to_string(),
        ])
        .arg(example(program))
        .args(args)
        .stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let start = Instant::now();
    let output = command.output().expect("ferry runs");
    Job {
        output,
        elapsed: start.elapsed(),
    }
}

const TRANSPORTS: [&str; 2] = ["shm", "tcp"];

/// `PROGRAM ARGS…` passes on both transports at each of `ranks` (within `limit_secs`),
/// printing what `says` gives for that many ranks, if anything.
fn passes(
    program: &str,
    args: &[&str],
    ranks: impl IntoIterator<Item = u32> + Clone,
    limit_secs: u32,
    says: impl Fn(u32) -> Option<String>,
) {
    for t in TRANSPORTS {
        for n in ranks.clone() {
            let j = job(n, t, program, args, &[], limit_secs);
            j.assert_ok();
            if let Some(says) = says(n) {
                assert!(j.stdout().contains(&says), "{t} n={n}: {}", j.stdout());
            }
        }
    }
}

/// `check CASE` passes on both transports at each of `ranks`, printing `says` if given.
fn check_passes(case: &str, ranks: &[u32], says: Option<&str>) {
    passes("check", &[case], ranks.iter().copied(), 60, |_| {
        says.map(str::to_owned)
    });
}

#[test]
fn zero_count_collectives_send_nothing_and_keep_the_ranks_in_step() {
    passes("zerocount", &[], [2, 3, 4], 60, |n| {
        Some(format!("zero-count collectives of {n} ranks"))
    });
}

#[test]
fn ring_on_one_two_and_four_ranks() {
    passes("ring", &[], [1, 2, 4], 60, |n| {
        Some(format!("ring of {n} ranks"))
    });
}

#[test]
fn all_pairs_exchange_random_sizes_checked_byte_for_byte() {
    for t in TRANSPORTS {
        for n in [2, 4] {
            let j = job(
                n,
                t,
                "check",
                &["allpairs", "8388608", &n.to_string()],
                &[],
                120,
            );
            j.assert_ok();
            assert!(j.stdout().contains("allpairs ok"), "{}", j.stdout());
        }
    }
    // Every large-message path of shared memory: pipelined through the ring, pulled with CMA,
    // and copied by both sides at once (from 4 KiB on, so that odd splits are covered too).
    for cma in ["0", "pull", "share"] {
        job(
            3,
            "shm",
            "check",
            &["allpairs", "8388608", "9"],
            &[
                ("FERRY_CMA", cma),
                ("FERRY_SHM_EAGER", "1024"),
                ("FERRY_CMA_SHARE", "4096"),
            ],
            120,
        )
        .assert_ok();
    }
    // Small rings force every large message through many wrap-arounds.
    job(
        3,
        "shm",
        "check",
        &["allpairs", "1000000", "3"],
        &[("FERRY_SHM_RING", "4096"), ("FERRY_CMA", "0")],
        120,
    )
    .assert_ok();
}

#[test]
fn wildcards_keep_per_sender_order() {
    check_passes("wildcard", &[2, 5], None);
}

#[test]
fn truncation_is_an_error_and_the_job_goes_on() {
    check_passes("truncate", &[2], Some("truncate ok"));
}

#[test]
fn probe_sees_envelopes_without_receiving() {
    check_passes("probe", &[2], None);
}

#[test]
fn dup_and_split_communicators() {
    check_passes("comms", &[2, 5], None);
}

#[test]
fn waiting_ranks_sleep_instead_of_spinning() {
    check_passes("idle", &[2], Some("idle ok"));
}

/// Ranks with TCP open too (here as MPI_Open_port and MPI_Comm_spawn open it) sleep in epoll,
/// not on their futex. With `FERRY_SPIN=0` and a 100 µs pause before each send, the waits of
/// the ping-pong sleep, so each round trip (less the pause) is two wake-ups by shared-memory
/// messages; when those waited for the sleeper's next 1 ms look at the rings the median was
/// over 1 ms. The bound is loose for this noisy machine.
#[test]
fn shared_memory_wakes_a_rank_sleeping_in_epoll_at_once() {
    let j = job(
        2,
        "shm",
        "check",
        &["wake", "400", "100"],
        &[("FERRY_SPIN", "0")],
        60,
    );
    j.assert_ok();
    let out = j.stdout();
    let median: u64 = out
        .split("median round trip ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|us| us.parse().ok())
        .unwrap_or_else(|| panic!("no median in the output:\n{out}"));
    assert!(median < 300, "median round trip {median} µs:\n{out}");
    assert!(
        !j.stderr().contains("doorbell"),
        "no doorbell:\n{}",
        j.stderr()
    );
}

/// `check CASE` on 4 ranks, where rank 1 fails: on both transports the job fails within 5 s
/// and names rank 1.
fn rank_1_ends_the_job_within_five_seconds(case: &str) {
    for t in TRANSPORTS {
        let j = job(4, t, "check", &[case], &[], 60);
        assert_ne!(j.code(), Some(0), "{t}: job must fail");
        assert!(
            j.elapsed < Duration::from_secs(5),
            "{t}: took {:?}",
            j.elapsed
        );
        assert!(
            j.stderr().contains("rank 1"),
            "{t}: stderr does not name rank 1:\n{}",
            j.stderr()
        );
    }
}

#[test]
fn killed_rank_ends_the_job_within_five_seconds_naming_it() {
    rank_1_ends_the_job_within_five_seconds("die");
}

#[test]
fn a_panicking_rank_ends_the_job_instead_of_waiting_in_finalize() {
    rank_1_ends_the_job_within_five_seconds("panic");
}

#[test]
fn strangers_on_a_rank_port_are_refused_and_the_job_completes() {
    let j = job(2, "tcp", "check", &["stranger"], &[], 60);
    j.assert_ok();
    let err = j.stderr();
    assert!(err.contains("bad magic"), "garbage not refused:\n{err}");
    assert!(err.contains("wrong MAC"), "wrong key not refused:\n{err}");
    assert!(err.contains("allpairs ok") || j.stdout().contains("allpairs ok"));
}

/// 200 idle strangers on a rank's port: it keeps `FERRY_TCP_STRANGERS` of them, closing the
/// oldest, and says so in five lines and a summary instead of a line each.
#[test]
fn a_flood_of_idle_strangers_is_capped_and_its_lines_summed_up() {
    let j = job(
        2,
        "tcp",
        "check",
        &["stranger-flood"],
        &[("FERRY_TCP_STRANGERS", "16")],
        60,
    );
    j.assert_ok();
    let err = j.stderr();
    let lines = err.lines().filter(|l| l.contains("ferry: rank 1:")).count();
    assert!(lines <= 6, "{lines} lines about strangers:\n{err}");
    assert!(
        err.contains("16 connections were waiting to authenticate (FERRY_TCP_STRANGERS)"),
        "{err}"
    );
    assert!(
        err.contains("more refused connections") && err.contains("it was the oldest"),
        "{err}"
    );
}

#[test]
fn sixty_four_ranks_on_two_cores_finish() {
    for t in TRANSPORTS {
        let j = job(64, t, "ring", &[], &[], 120);
        j.assert_ok();
        assert!(j.stdout().contains("ring of 64 ranks"));
        job(64, t, "check", &["barrier", "20"], &[], 120).assert_ok();
    }
}

#[test]
fn single_messages_over_two_gib() {
    let len = ((2usize << 30) + (1 << 20) + 5).to_string();
    for t in TRANSPORTS {
        let j = job(2, t, "check", &["big", &len], &[], 300);
        j.assert_ok();
        assert!(j.stdout().contains(&format!("big ok: {len} bytes")));
    }
}

#[test]
fn bench_writes_csv_json_and_plots() {
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::env::temp_dir().join(format!("ferry-bench-test-{}", std::process::id()));
    for (kind, transport) in [("pingpong", "shm"), ("bw", "tcp")] {
        let status = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args([
                "bench",
                kind,
                "--transport",
                transport,
                "--max",
                "64K",
                "--out",
            ])
            .arg(&out)
            .stdin(Stdio::null())
            .output()
            .expect("ferry bench runs");
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
        let stem = format!("{kind}-{transport}");
        let csv = std::fs::read_to_string(out.join(format!("{stem}.csv"))).expect("csv");
        // 1 B … 64 KiB with ±3 perturbations: powers of two and their neighbours.
        let rows = csv
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("bytes"))
            .count();
        assert!(rows >= 17, "{csv}");
        for file in [
            format!("{stem}.json"),
            format!("{stem}-latency.png"),
            format!("{stem}-bandwidth.png"),
        ] {
            let meta = std::fs::metadata(out.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(meta.len() > 1000, "{file} is nearly empty");
        }
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn every_collective_matches_a_sequential_reference_on_1_to_17_ranks() {
    passes("check", &["coll"], 1..=17, 120, |n| {
        Some(format!("coll ok: {n} ranks"))
    });
}

#[test]
fn hierarchical_collectives_on_fake_clusters_match_the_sequential_reference() {
    for (n, clusters, count) in [(6, "0,0,0,1,1,2", 3), (7, "5,1,5,1,9,9,1", 3)] {
        for t in TRANSPORTS {
            let j = job(
                n,
                t,
                "check",
                &["hier"],
                &[("FERRY_CLUSTERS", clusters)],
                120,
            );
            j.assert_ok();
            assert!(
                j.stdout()
                    .contains(&format!("hier ok: {n} ranks, {count} clusters")),
                "{t} {clusters}: {}",
                j.stdout()
            );
        }
    }
}

#[test]
fn messages_striped_over_two_and_four_rails_arrive_intact_and_in_order() {
    for (rails, policy) in [("2", "weighted"), ("4", "weighted"), ("2", "roundrobin")] {
        let j = job(
            2,
            "tcp",
            "check",
            &["rails", "9"],
            &[
                ("FERRY_RAILS", rails),
                ("FERRY_RAIL_POLICY", policy),
                ("FERRY_RAIL_STATS", "1"),
            ],
            120,
        );
        j.assert_ok();
        assert!(j.stdout().contains("rails ok"), "{}", j.stdout());
        // Round-robin gives every rail of both directions its share. Weighted follows measured
        // rates, which over loopback are the CPU's and move with the machine's load (a loaded
        // run once gave rail 0, which also carries the ordered frames, no chunk at all): it
        // must stripe, over two rails at least.
        let stats: Vec<String> = j
            .stderr()
            .lines()
            .filter(|l| l.contains(" to rank "))
            .map(str::to_string)
            .collect();
        assert_eq!(stats.len(), 2, "{}", j.stderr());
        for line in &stats {
            let carried: Vec<u64> = (0..rails.parse::<usize>().unwrap())
                .map(|rail| {
                    line.split(&format!("rail {rail} "))
                        .nth(1)
                        .and_then(|rest| rest.split(' ').next())
                        .and_then(|bytes| bytes.parse::<u64>().ok())
                        .unwrap_or(0)
                })
                .collect();
            let ok = if policy == "roundrobin" {
                carried.iter().all(|&b| b >= 1 << 20)
            } else {
                carried.iter().filter(|&&b| b >= 256 << 10).count() >= 2
            };
            assert!(ok, "{policy}: not striped as it should be: {line}");
        }
    }
    // Several peers at once, random sizes, over three rails.
    let j = job(
        3,
        "tcp",
        "check",
        &["allpairs", "8388608", "5"],
        &[("FERRY_RAILS", "3")],
        120,
    );
    j.assert_ok();
}

#[test]
fn network_aware_broadcasts_deliver_from_every_scheduler_and_through_the_environment() {
    for t in TRANSPORTS {
        for n in [3, 5] {
            let j = job(n, t, "check", &["hetero"], &[], 120);
            j.assert_ok();
            assert!(j.stdout().contains("hetero ok"), "{}", j.stdout());
        }
    }
    // A cost file as `ferry weather --export` writes it: every broadcast of `check coll`
    // (world and split communicators) then runs TTCC (named, or chosen by `auto` from the
    // file's "scheduler"), and must still match the sequential reference.
    let n = 4;
    let dir = std::env::temp_dir().join(format!("ferry-bcast-costs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cells = |f: &dyn Fn(usize, usize) -> f64| -> Vec<Vec<Option<f64>>> {
        (0..n)
            .map(|i| (0..n).map(|j| (i != j).then(|| f(i, j))).collect())
            .collect()
    };
    let costs = serde_json::json!({
        "n": n,
        "latency": cells(&|i, j| 1e-5 * (1 + (i * 3 + j) % 5) as f64),
        "bandwidth": cells(&|i, j| 1e8 * (1 + (i + 2 * j) % 4) as f64),
        "scheduler": "ttcc",
    });
    let file = dir.join("costs.json");
    std::fs::write(&file, costs.to_string()).unwrap();
    let path = file.to_str().unwrap();
    for scheduler in ["auto", "ttcc", "ecef", "lookahead"] {
        let j = job(
            n as u32,
            "shm",
            "check",
            &["coll"],
            &[
                ("FERRY_BCAST_SCHEDULER", scheduler),
                ("FERRY_BCAST_COSTS", path),
            ],
            120,
        );
        j.assert_ok();
    }
    // A matrix smaller than the job is refused with a message naming the variable.
    let j = job(
        6,
        "shm",
        "check",
        &["coll"],
        &[("FERRY_BCAST_COSTS", path)],
        60,
    );
    assert_ne!(j.code(), Some(0));
    assert!(
        j.stderr().contains("FERRY_BCAST_COSTS covers 4 ranks"),
        "{}",
        j.stderr()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_rails_flag_opens_that_many_connections() {
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "-n", "2", "--transport", "tcp", "--rails", "3"])
        .args(["--timeout", "60"])
        .arg(example("check"))
        .args(["stream", "4194304", "8"])
        .env("FERRY_RAIL_STATS", "1")
        .env_remove("FERRY_RAILS")
        .stdin(Stdio::null())
        .output()
        .expect("ferry runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("rank 0 to rank 1: rail 0 ") && stderr.contains(", rail 2 "),
        "{stderr}"
    );
    let refused = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "-n", "2", "--rails", "17", "true"])
        .output()
        .expect("ferry runs");
    assert!(!refused.status.success());
}

/// Runs `check args…` on `n` ranks whose host ids (`FERRY_HOST_ID`) are `host(rank)`: ranks of
/// one fake host talk over shared memory, others over TCP, in the same job.
fn job_on_fake_hosts(n: u32, host: &str, args: &[&str], env: &[(&str, &str)]) -> Job {
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .args(["run", "-n", &n.to_string(), "--timeout", "120", "sh", "-c"])
        .arg(format!("FERRY_HOST_ID=h$(({host})) exec \"$0\" \"$@\""))
        .arg(example("check"))
        .args(args)
        .env_remove("FERRY_TRANSPORT")
        .stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("ferry runs");
    Job {
        output,
        elapsed: start.elapsed(),
    }
}

#[test]
fn one_job_mixes_shared_memory_within_a_host_and_tcp_between_hosts() {
    // Hosts of two ranks each, then ranks dealt round-robin over two hosts.
    let j = job_on_fake_hosts(4, "FERRY_RANK / 2", &["routes"], &[]);
    j.assert_ok();
    for line in [
        "routes 0: self shm tcp tcp",
        "routes 1: shm self tcp tcp",
        "routes 2: tcp tcp self shm",
        "routes 3: tcp tcp shm self",
    ] {
        assert!(j.stdout().contains(line), "{line}\n{}", j.stdout());
    }
    // Without clusters of its own the job is grouped by host, for hierarchical collectives.
    assert!(
        j.stdout().contains("clusters [0, 0, 1, 1]"),
        "{}",
        j.stdout()
    );
    let j = job_on_fake_hosts(5, "FERRY_RANK % 2", &["routes"], &[]);
    j.assert_ok();
    assert!(
        j.stdout().contains("routes 4: shm tcp shm tcp self"),
        "{}",
        j.stdout()
    );
    // FERRY_TRANSPORT=tcp still takes TCP to the ranks of the same host.
    let j = job_on_fake_hosts(2, "0", &["routes"], &[("FERRY_TRANSPORT", "tcp")]);
    j.assert_ok();
    assert!(j.stdout().contains("routes 0: self tcp"), "{}", j.stdout());
    // Every pair, every size, both routes at once; collectives on the host groups.
    let j = job_on_fake_hosts(5, "FERRY_RANK % 2", &["allpairs", "2097152"], &[]);
    j.assert_ok();
    let j = job_on_fake_hosts(6, "FERRY_RANK / 2", &["coll"], &[]);
    j.assert_ok();
    assert!(j.stdout().contains("coll ok: 6 ranks"), "{}", j.stdout());
    // Hierarchical schedules whose first phase runs over shared memory.
    let j = job_on_fake_hosts(
        6,
        "FERRY_RANK / 3",
        &["hier"],
        &[("FERRY_CLUSTERS", "0,0,0,1,1,1")],
    );
    j.assert_ok();
    assert!(
        j.stdout().contains("hier ok: 6 ranks, 2 clusters"),
        "{}",
        j.stdout()
    );
}

#[test]
fn shm_only_refuses_ranks_on_two_hosts_naming_them() {
    let j = job_on_fake_hosts(2, "FERRY_RANK", &["routes"], &[("FERRY_TRANSPORT", "shm")]);
    assert_ne!(j.code(), Some(0));
    assert!(
        j.stderr()
            .contains("FERRY_TRANSPORT=shm needs every rank on one host")
            && j.stderr().contains("host id h"),
        "{}",
        j.stderr()
    );
}
