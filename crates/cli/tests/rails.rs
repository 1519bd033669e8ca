//! Multi-rail TCP across two testbed hosts joined by two links (`crates/testbed/grids/rails.toml`,
//! one rank per host, each rank given its rail addresses by `ferry run --grid`), as root:
//!
//! - messages around every chunk boundary arrive intact and in MPI order, each rail carrying
//!   part of them;
//! - a rail cut in the middle of a transfer (its link set down in one namespace) is noticed,
//!   its chunks go again on the other rail, and the transfer completes; also rail 0, whose
//!   ordered frames then go again on rail 1;
//! - with links of R and R/4, weighted striping gives the slow rail about a fifth of the bytes.
//!
//! Speeds are not asserted here (the machine is shared): `bench/scripts/rails.sh` measures them.
//! Each testbed has a per-run prefix and is removed on drop, also when an assertion fails.
//! Without root the test says so and passes.

mod common;
use common::{assert_ok_says, example, grid, grid_job, show, testbed_allowed, testbed_of};
use ferry_testbed::{Testbed, UpOptions};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The rails grid with rail 0 limited to `rail0` and rail 1 to `rail1` (tc rates).
fn testbed(tag: &str, rates: Option<(&str, &str)>) -> (Testbed, String) {
    let mut topology = grid("rails.toml");
    if let Some((rail0, rail1)) = rates {
        topology.clusters[0].rate = Some(rail0.into());
        topology.clusters[0].links[0].rate = Some(rail1.into());
    }
    testbed_of(&topology, tag, &UpOptions::default())
}

fn run(prefix: &str, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut command = grid_job("rails.toml", prefix, 2);
    command
        .env_remove("FERRY_RAILS")
        .env("FERRY_RAIL_STATS", "1")
        .args(["--timeout", "90"])
        .arg(example("check"))
        .args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// On both links at 200 Mbit/s, a checked stream of 30 × 4 MiB from r1 to r2 whose rail `rail`
/// is cut `cut_after` into it, and restored `restore_after` the cut, or once the job ended.
/// The job must succeed; returns its output and how long it ran after the cut.
fn stream_with_a_cut(
    tag: &str,
    rail: usize,
    cut_after: Duration,
    restore_after: Option<Duration>,
) -> (Output, Duration) {
    let (testbed, prefix) = testbed(tag, Some(("200mbit", "200mbit")));
    let job = run(
        &prefix,
        &[("FERRY_RAIL_TIMEOUT", "1")],
        &["stream", "4194304", "30"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("ferry runs");
    std::thread::sleep(cut_after);
    let cut_at = Instant::now();
    testbed.set_link("r1", rail, false).expect("cut the rail");
    if let Some(pause) = restore_after {
        std::thread::sleep(pause);
        testbed
            .set_link("r1", rail, true)
            .expect("restore the rail");
    }
    let out = job.wait_with_output().expect("job output");
    let took = cut_at.elapsed();
    if restore_after.is_none() {
        testbed
            .set_link("r1", rail, true)
            .expect("restore the rail");
    }
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stream ok"),
        "{}",
        show(&out)
    );
    testbed.down().expect("testbed down");
    (out, took)
}

/// Bytes each rail from rank `from` carried, from the FERRY_RAIL_STATS lines.
fn carried(out: &Output, from: u32) -> Vec<u64> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let Some(line) = stderr
        .lines()
        .find(|l| l.starts_with(&format!("ferry: rank {from} to rank ")))
    else {
        panic!("no rail statistics of rank {from}: {}", show(out))
    };
    line.split("rail ")
        .skip(1)
        .map(|part| {
            part.split(' ')
                .nth(1)
                .and_then(|b| b.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

#[test]
fn two_links_stripe_survive_a_cut_and_weight_a_slow_rail() {
    if !testbed_allowed() {
        return;
    }

    // Unshaped: every size around the chunk boundaries, in order, over both rails.
    {
        let (testbed, prefix) = testbed("ra", None);
        // Round-robin, so that each rail's share is known: unshaped links are as fast as the
        // CPU, and weighted striping may rightly favour one.
        let out = run(
            &prefix,
            &[("FERRY_RAIL_POLICY", "roundrobin")],
            &["rails", "9"],
        )
        .output()
        .expect("ferry runs");
        assert_ok_says(&out, "rails ok");
        for rank in [0, 1] {
            let bytes = carried(&out, rank);
            assert_eq!(bytes.len(), 2, "{}", show(&out));
            assert!(
                bytes.iter().all(|&b| b > 4 << 20),
                "{bytes:?}: {}",
                show(&out)
            );
        }
        testbed.down().expect("testbed down");
    }

    // Both links at 200 Mbit/s; rail 1 cut a second and a half into a ~2.5 s transfer, and
    // restored once it ended.
    let (out, took) = stream_with_a_cut("rb", 1, Duration::from_millis(1500), None);
    eprintln!("transfer ended {took:?} after the cut");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rail 1 to rank 1 failed"),
        "the cut went unnoticed: {}",
        show(&out)
    );

    // The same with rail 0 cut, the rail that carries the ordered frames: they go again, in
    // order and once, on rail 1. (The link is restored 3 s later: the launcher's bootstrap
    // connection to rank 1 runs over it too.)
    let (out, _) = stream_with_a_cut(
        "rd",
        0,
        Duration::from_millis(1000),
        Some(Duration::from_secs(3)),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rail 0 to rank 1 failed") && stderr.contains("ordered frames from"),
        "rail 0's failure went unnoticed: {}",
        show(&out)
    );

    // Rail 0 at R = 200 Mbit/s, rail 1 at R/4: weighted striping sends about a fifth on rail 1.
    {
        let (testbed, prefix) = testbed("rc", Some(("200mbit", "50mbit")));
        let out = run(&prefix, &[], &["stream", "4194304", "16"])
            .output()
            .expect("ferry runs");
        assert!(out.status.success(), "{}", show(&out));
        let bytes = carried(&out, 0);
        let share = bytes[1] as f64 / bytes.iter().sum::<u64>() as f64;
        eprintln!("slow rail's share: {share:.3} ({bytes:?})");
        assert!(
            (0.08..=0.32).contains(&share),
            "slow rail carried {share:.3} of the bytes: {}",
            show(&out)
        );
        // Round-robin, for contrast, gives both rails the same.
        let out = run(
            &prefix,
            &[("FERRY_RAIL_POLICY", "roundrobin")],
            &["stream", "4194304", "8"],
        )
        .output()
        .expect("ferry runs");
        assert!(out.status.success(), "{}", show(&out));
        let bytes = carried(&out, 0);
        let share = bytes[1] as f64 / bytes.iter().sum::<u64>() as f64;
        assert!(
            (0.45..=0.55).contains(&share),
            "round-robin gave rail 1 {share:.3}: {}",
            show(&out)
        );
        testbed.down().expect("testbed down");
    }
}
