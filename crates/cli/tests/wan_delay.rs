//! A grid with `wan_delay` in the one-machine testbed, as root: the forwarders hold every frame
//! of a delayed link, both ways, and pass every byte (`crates/testbed/grids/wan-delay.toml`:
//! private cluster a at 5 ms from the WAN, public p at 1 ms, so 6 ms one way between them).
//!
//! - every pair of ranks exchanges checksummed messages of 0 B … 4 MiB through the delayed
//!   links (segmentation-offload frames pass the forwarders whole);
//! - 40 barriers between a1 and p1 take at least 40 one-way delays: the delay is there.
//!
//! Without root the test says so and passes.

mod common;
use common::{example, grid, grid_job, show, testbed_allowed, testbed_of};
use ferry_testbed::UpOptions;
use std::time::{Duration, Instant};

fn run(prefix: &str, ranks: usize, args: &[&str]) -> std::process::Output {
    grid_job("wan-delay.toml", prefix, ranks)
        .args(["--timeout", "60"])
        .arg(example("check"))
        .args(args)
        .output()
        .expect("ferry runs")
}

#[test]
fn delayed_links_delay_and_deliver() {
    if !testbed_allowed() {
        return;
    }
    let options = UpOptions {
        ferry: Some(env!("CARGO_BIN_EXE_ferry").into()),
        ..UpOptions::default()
    };
    let (_testbed, prefix) = testbed_of(&grid("wan-delay.toml"), "w", &options);

    let out = run(&prefix, 3, &["allpairs", "4194304"]);
    assert!(out.status.success(), "{}", show(&out));

    // Ranks 0 (a1) and 2 (p1) are 6 ms apart; a2 (rank 1) sits in the barriers too, but a
    // barrier of three ranks still waits for a message across the WAN.
    let barriers = 40;
    let start = Instant::now();
    let out = run(&prefix, 3, &["barrier", &barriers.to_string()]);
    let took = start.elapsed();
    assert!(out.status.success(), "{}", show(&out));
    let least = Duration::from_millis(6) * barriers;
    assert!(
        took >= least,
        "{barriers} barriers over a 6 ms WAN in {took:?}"
    );
    eprintln!("{barriers} barriers in {took:?} (at least {least:?})");
}
