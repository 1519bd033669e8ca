//! Hole punching in the one-machine testbed, as root: two private clusters of two hosts each
//! (`crates/testbed/grids/punch-*.toml`), one rank per host, so four pairs cross the clusters
//! and would otherwise each go through the peer's relay.
//!
//! - port-preserving NAT on both fronts: every crossing pair is punched (`P` in the matrix,
//!   "punched in … ms"), and every pair exchanges checksummed messages of 0 B … 1 MiB;
//! - random NAT (`--random-fully`, symmetric) on both fronts: punching fails, every crossing
//!   pair goes through the relay after the timeout without an error, and the job passes;
//! - `FERRY_PUNCH=0`: the relay as before, no attempt.
//!
//! Both grids put 5 ms between each front node and the WAN, as a WAN would (docs/grid.md,
//! "Hole punching", says what Linux NATs let through and when).
//!
//! One testbed per grid (per-run prefix), removed on drop, also when an assertion fails.
//! Without root the test says so and passes.

mod common;
use common::{example, grid_file, grid_job, show};
use ferry_grid::Topology;
use ferry_testbed::{Testbed, UpOptions};

/// The pairs across the two clusters (ranks a1 a2 b1 b2).
const CROSSING: [(u32, u32); 4] = [(0, 2), (0, 3), (1, 2), (1, 3)];

fn allpairs(grid: &str, prefix: &str, env: &[(&str, &str)]) -> String {
    let mut command = grid_job(grid, prefix, 4);
    command
        .args(["--timeout", "60", "--show-paths"])
        .arg(example("check"))
        .args(["allpairs", "1048576"]);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("ferry runs");
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("allpairs ok: 4 ranks"), "{}", show(&out));
    stdout
}

#[test]
fn pairs_punch_through_port_preserving_nat_and_fall_back_through_random_nat() {
    if !ferry_testbed::is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    for (grid, tag) in [
        ("punch-port-preserving.toml", "p"),
        ("punch-random.toml", "r"),
    ] {
        let topology = Topology::load(&grid_file(grid)).expect("grid file");
        let prefix = format!("fy{}{tag}-", std::process::id());
        // The grids delay the WAN links (forwarders run by the ferry binary).
        let options = UpOptions {
            ferry: Some(env!("CARGO_BIN_EXE_ferry").into()),
            ..UpOptions::default()
        };
        let testbed = Testbed::up_with(&topology, &prefix, &options).expect("testbed up");
        // The test asks whether pairs punch, not how fast: a deadline of a second leaves room
        // for a loaded machine's scheduling (the default's success rate and times are
        // measured by bench/scripts/grid-punch.sh). With random NAT the default stays.
        let timeout: &[(&str, &str)] = match tag {
            "p" => &[("FERRY_PUNCH_TIMEOUT_MS", "1000")],
            _ => &[],
        };
        let stdout = allpairs(grid, &prefix, timeout);
        eprintln!("{grid}:\n{stdout}");
        for (a, b) in CROSSING {
            let punched = format!("r{a} <-> r{b} punched in ");
            let relayed = format!("r{a} <-> r{b} through the relay after ");
            match tag {
                "p" => assert!(stdout.contains(&punched), "{punched}\n{stdout}"),
                _ => assert!(stdout.contains(&relayed), "{relayed}\n{stdout}"),
            }
        }
        match tag {
            "p" => {
                assert!(stdout.contains("r0   -    D*   P*   P*"), "{stdout}");
                assert!(stdout.contains("r2   P    P    -    D*"), "{stdout}");
            }
            _ => {
                assert!(!stdout.contains("punched in"), "{stdout}");
                assert!(stdout.contains("r0   -    D*   NR*  NR*"), "{stdout}");
            }
        }
        if tag == "p" {
            // Turned off: the relay as before, and nothing tried.
            let stdout = allpairs(grid, &prefix, &[("FERRY_PUNCH", "0")]);
            assert!(stdout.contains("r0   -    D*   NR*  NR*"), "{stdout}");
            assert!(!stdout.contains("punch"), "{stdout}");
        }
        testbed.down().expect("testbed down");
    }
}
