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
//! Speeds are not asserted here (the machine is shared): `bench/rails.sh` measures them.
//! Each testbed has a per-run prefix and is removed on drop, also when an assertion fails.
//! Without root the test says so and passes.

use ferry_grid::Topology;
use ferry_testbed::Testbed;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn grid_file() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testbed/grids/rails.toml"
    ))
}

fn check() -> PathBuf {
    let ferry = PathBuf::from(env!("CARGO_BIN_EXE_ferry"));
    let path = ferry
        .parent()
        .expect("target dir")
        .join("examples")
        .join("check");
    assert!(
        path.exists(),
        "{} is missing: build the examples (`cargo build --release --examples -p ferry-core`)",
        path.display()
    );
    path
}

/// The rails grid with rail 0 limited to `rail0` and rail 1 to `rail1` (tc rates).
fn testbed(tag: &str, rates: Option<(&str, &str)>) -> (Testbed, String) {
    let mut topology = Topology::load(&grid_file()).expect("grid file");
    if let Some((rail0, rail1)) = rates {
        topology.clusters[0].rate = Some(rail0.into());
        topology.clusters[0].links[0].rate = Some(rail1.into());
    }
    let prefix = format!("fy{}{tag}-", std::process::id());
    let testbed = Testbed::up(&topology, &prefix).expect("testbed up");
    (testbed, prefix)
}

fn run(prefix: &str, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .env_remove("MPIEXEC_TIMEOUT")
        .env_remove("FERRY_RAILS")
        .env("FERRY_RAIL_STATS", "1")
        .stdin(Stdio::null())
        .args(["run", "--grid"])
        .arg(grid_file())
        .args(["--testbed-prefix", prefix, "-n", "2", "--timeout", "90"])
        .arg(check())
        .args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
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
    if !ferry_testbed::is_root() {
        eprintln!("skipped: the testbed needs root");
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
        assert!(out.status.success(), "{}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("rails ok"),
            "{}",
            show(&out)
        );
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

    // Both links at 200 Mbit/s; rail 1 cut a second into a ~2.5 s transfer.
    {
        let (testbed, prefix) = testbed("rb", Some(("200mbit", "200mbit")));
        let job = run(
            &prefix,
            &[("FERRY_RAIL_TIMEOUT", "1")],
            &["stream", "4194304", "30"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferry runs");
        std::thread::sleep(Duration::from_millis(1500));
        let cut_at = Instant::now();
        testbed.set_link("r1", 1, false).expect("cut rail 1");
        let out = job.wait_with_output().expect("job output");
        eprintln!("transfer ended {:?} after the cut", cut_at.elapsed());
        testbed.set_link("r1", 1, true).expect("restore rail 1");
        assert!(out.status.success(), "{}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("rail 1 to rank 1 failed"),
            "the cut went unnoticed: {}",
            show(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("stream ok"),
            "{}",
            show(&out)
        );
        testbed.down().expect("testbed down");
    }

    // The same with rail 0 cut, the rail that carries the ordered frames: they go again, in
    // order and once, on rail 1. (The link is restored 3 s later: the launcher's bootstrap
    // connection to rank 1 runs over it too.)
    {
        let (testbed, prefix) = testbed("rd", Some(("200mbit", "200mbit")));
        let job = run(
            &prefix,
            &[("FERRY_RAIL_TIMEOUT", "1")],
            &["stream", "4194304", "30"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferry runs");
        std::thread::sleep(Duration::from_millis(1000));
        testbed.set_link("r1", 0, false).expect("cut rail 0");
        std::thread::sleep(Duration::from_secs(3));
        testbed.set_link("r1", 0, true).expect("restore rail 0");
        let out = job.wait_with_output().expect("job output");
        assert!(out.status.success(), "{}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("rail 0 to rank 1 failed") && stderr.contains("ordered frames from"),
            "rail 0's failure went unnoticed: {}",
            show(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("stream ok"),
            "{}",
            show(&out)
        );
        testbed.down().expect("testbed down");
    }

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
