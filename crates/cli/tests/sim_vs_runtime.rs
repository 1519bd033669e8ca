//! "A scheduler is tested both ways": the simulator's predicted completion order of a
//! heterogeneous broadcast matches the runtime's on a real network, as root.
//!
//! The network is the testbed of `crates/testbed/grids/hetero.toml`: six hosts, one rank each,
//! whose links are shaped by `tc` to very different rates (20 to 400 Mbit/s, not in rank
//! order). The cost matrix is derived from the grid file, not measured: latency 100 µs,
//! bandwidth of a pair the rate of its bottleneck link, min(rate i, rate j). Then again on
//! `hetero-wan.toml`, the same hosts each behind a delayed link to the WAN (`wan_delay`), so
//! that a pair's latency is the sum of its two delays, 5 to 20 ms, as between clusters (there
//! ECEF and FEF are asserted, TTCC only printed: see the test). For ECEF, TTCC and FEF the
//! test runs `check bcast-timing`: a warm-up through `Comm::bcast_with`, then a few
//! 2 MiB broadcasts from rank 0 of the very schedule `bcast_with` builds, on the same executor,
//! instrumented to see when each rank *holds* the data (see the case in
//! `crates/core/examples/check.rs`). Each rank's median is compared with `received` of
//! `ferry_sim::simulate` on the same schedules and matrix.
//!
//! What is asserted:
//! - the measured completion order of the non-root ranks equals the simulated one;
//! - every measured time is within a factor 2 of its prediction.
//!
//! A rank sends to its children one after the other, as the model assumes
//! (`BcastPlan::one_send_at_a_time`); when the runtime started them all at once the root's
//! transfers shared its link, a fast child predicted at 56 ms landed 2-3x late and the order
//! could differ. What still differs: TTCC's two copies for one rank can arrive together and
//! share that rank's link, while the model lets them overlap at full speed each (the 20 Mbit/s
//! rank gets its data up to about 1.5x late), and TCP's slow start and tc's bursts make short
//! transfers faster or slower than latency + bytes / rate.
//!
//! The time each call returns (what `bcast_with` would return) is printed beside the simulator's
//! `finish`, not compared: a rank returns once its sends are in its socket buffers, and a TTCC
//! rank once a redundant copy into its buffer has landed.
//!
//! The testbed has a per-run prefix and is removed on drop, also when an assertion fails.
//! Without root the test says so and passes.

mod common;
use common::{example, grid_file, grid_job, show};
use ferry_grid::Topology;
use ferry_sched::hetero::{scheduler, CostMatrix};
use ferry_sim::{simulate, SimConfig};
use ferry_testbed::{Testbed, UpOptions};
use std::path::Path;

/// Bytes broadcast: large enough that bandwidth dominates latency everywhere.
const BYTES: usize = 2 << 20;
/// Timed broadcasts per scheduler (after one warm-up); each rank's median is compared.
const REPS: usize = 3;
/// Latency of every pair in the derived cost matrix (seconds).
const LATENCY: f64 = 100e-6;
/// How far a measured time may be from its prediction, either way.
const FACTOR: f64 = 2.0;

/// A `tc` rate (`400mbit`, `20mbit`, `1gbit`, `500kbit`) in bits per second.
fn bits_per_second(rate: &str) -> f64 {
    let rate = rate.to_ascii_lowercase();
    let (digits, scale) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .into_iter()
        .find_map(|(unit, scale)| rate.strip_suffix(unit).map(|d| (d, scale)))
        .unwrap_or_else(|| panic!("rate {rate:?}: expected …gbit, …mbit, …kbit or …bit"));
    digits.parse::<f64>().expect("rate number") * scale
}

/// Per rank, the `tc` rate (bits/s) of its host's link: ranks are numbered cluster by cluster,
/// host by host, one per host here.
fn rank_rates(grid: &Topology) -> Vec<f64> {
    grid.clusters
        .iter()
        .flat_map(|c| {
            let rate = bits_per_second(c.rate.as_deref().expect("every cluster has a rate"));
            c.hosts.iter().flat_map(move |h| {
                assert_eq!(h.ranks, 1, "one rank per host");
                std::iter::once(rate)
            })
        })
        .collect()
}

/// Per rank, the one-way delay (seconds) of its host's link to the WAN, if the grid delays it.
fn rank_delays(grid: &Topology) -> Vec<f64> {
    (0..grid.clusters.len())
        .flat_map(|c| {
            let delay = grid.wan_delay_of(c).map_or(0.0, |d| d.as_secs_f64());
            grid.clusters[c].hosts.iter().map(move |_| delay)
        })
        .collect()
}

/// The latency of pair i → j: the two links' delays, or [`LATENCY`] where nothing is delayed.
fn latency(delays: &[f64], i: usize, j: usize) -> f64 {
    match delays[i] + delays[j] {
        0.0 => LATENCY,
        d => d,
    }
}

/// The cost matrix of the grid: pair i → j limited by the slower of the two host links.
fn costs(rates: &[f64], delays: &[f64]) -> CostMatrix {
    CostMatrix::from_fn(rates.len(), |i, j| {
        (latency(delays, i, j), rates[i].min(rates[j]) / 8.0)
    })
}

/// The matrix as `ferry weather --export` writes it (n×n, `null` on the diagonal).
fn costs_json(rates: &[f64], delays: &[f64]) -> String {
    let n = rates.len();
    let cells = |f: &dyn Fn(usize, usize) -> f64| {
        (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| (i != j).then(|| f(i, j)))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    serde_json::json!({
        "n": n,
        "latency": cells(&|i, j| latency(delays, i, j)),
        "bandwidth": cells(&|i, j| rates[i].min(rates[j]) / 8.0),
    })
    .to_string()
}

/// One timed broadcast: per rank, seconds from its barrier exit until it held the data and
/// until its call completed.
struct Rep {
    held: Vec<f64>,
    returned: Vec<f64>,
}

/// Runs `check bcast-timing` on the testbed; one [`Rep`] per timed broadcast.
fn measure(grid: &str, prefix: &str, n: usize, name: &str, costs: &Path) -> Vec<Rep> {
    let out = grid_job(grid, prefix, n)
        .env_remove("FERRY_BCAST_SCHEDULER")
        .env_remove("FERRY_BCAST_COSTS")
        .args(["--timeout", "60"])
        .arg(example("check"))
        .args(["bcast-timing", name, &BYTES.to_string()])
        .arg(costs)
        .arg(REPS.to_string())
        .output()
        .expect("ferry runs");
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("bcast-timing ok"), "{}", show(&out));
    let seconds = |text: &str| -> Vec<f64> {
        text.split_whitespace()
            .map(|t| t.parse().expect("seconds"))
            .collect()
    };
    let reps: Vec<Rep> = stdout
        .lines()
        .filter_map(|l| l.split_once(&format!("bcast-timing {name} rep ")))
        .map(|(_, rest)| {
            let (_, times) = rest.split_once(": held ").expect("rep line");
            let (held, returned) = times.split_once(" returned ").expect("rep line");
            Rep {
                held: seconds(held),
                returned: seconds(returned),
            }
        })
        .collect();
    assert_eq!(reps.len(), REPS, "{}", show(&out));
    assert!(
        reps.iter()
            .all(|r| r.held.len() == n && r.returned.len() == n),
        "{}",
        show(&out)
    );
    reps
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Ranks (positions) of `v`'s values, 0 for the smallest; ties get their mean rank.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0.0; v.len()];
    let mut k = 0;
    while k < order.len() {
        let mut end = k;
        while end + 1 < order.len() && v[order[end + 1]] == v[order[k]] {
            end += 1;
        }
        for &i in &order[k..=end] {
            out[i] = (k + end) as f64 / 2.0;
        }
        k = end + 1;
    }
    out
}

/// Spearman's rank correlation (Pearson's on the ranks, so ties are handled).
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let mean = (ra.len() as f64 - 1.0) / 2.0;
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        cov += (x - mean) * (y - mean);
        va += (x - mean) * (x - mean);
        vb += (y - mean) * (y - mean);
    }
    cov / (va * vb).sqrt()
}

/// Ranks (the job's) sorted by time.
fn order(ranks: &[usize], times: &[f64]) -> Vec<usize> {
    let mut v: Vec<(f64, usize)> = ranks.iter().map(|&r| (times[r], r)).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v.into_iter().map(|(_, r)| r).collect()
}

#[test]
fn simulated_completion_order_matches_the_testbed() {
    assert!((spearman(&[1.0, 2.0, 3.0], &[10.0, 30.0, 20.0]) - 0.5).abs() < 1e-9);
    assert_eq!(ranks(&[3.0, 1.0, 3.0]), [1.5, 0.0, 1.5]);
    assert_eq!(bits_per_second("20mbit"), 20e6);
    if !ferry_testbed::is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    // One after the other: two testbeds timing broadcasts at once on a small machine would
    // measure each other.
    compare("hetero.toml", "sv", &["ecef", "ttcc", "fef"]);
    // TTCC is printed but not held to the model across the delayed WAN: its two copies for
    // one rank share that rank's link, and at 10-40 ms round trips TCP's slow start stretches
    // the shorter transfers, so ranks 1 and 5 (predicted 610 and 288 ms) measured 406-427 and
    // 335-476 ms and sometimes swap places.
    compare("hetero-wan.toml", "sw", &["ecef", "fef"]);
}

/// Runs each scheduler's broadcast on the testbed of `grid_name` (prefix tag `tag`) and
/// compares with the simulator; the order and times of those in `asserted` must match.
fn compare(grid_name: &str, tag: &str, asserted: &[&str]) {
    let grid = Topology::load(&grid_file(grid_name)).expect("grid file");
    let rates = rank_rates(&grid);
    let delays = rank_delays(&grid);
    let n = rates.len();
    let matrix = costs(&rates, &delays);
    let dir = std::env::temp_dir().join(format!("ferry-simrt-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let costs_path = dir.join("costs.json");
    std::fs::write(&costs_path, costs_json(&rates, &delays)).expect("cost file");

    let prefix = format!("fy{}{tag}-", std::process::id());
    let options = UpOptions {
        ferry: Some(env!("CARGO_BIN_EXE_ferry").into()),
        ..UpOptions::default()
    };
    let testbed = Testbed::up_with(&grid, &prefix, &options).expect("testbed up");
    let mut failures = Vec::new();
    for name in ["ecef", "ttcc", "fef"] {
        let reps = measure(grid_name, &prefix, n, name, &costs_path);
        let per_rank = |f: &dyn Fn(&Rep) -> f64| median(reps.iter().map(f).collect());
        let measured: Vec<f64> = (0..n).map(|r| per_rank(&|t| t.held[r])).collect();
        let returned: Vec<f64> = (0..n).map(|r| per_rank(&|t| t.returned[r])).collect();
        let sched = scheduler(name).expect("scheduler");
        let schedules = sched.schedules(&matrix, 0, BYTES);
        let sim = simulate(&schedules, &matrix, &SimConfig::default()).expect("simulates");
        let predicted = sim.received;

        let others: Vec<usize> = (1..n).collect();
        let p: Vec<f64> = others.iter().map(|&r| predicted[r]).collect();
        let m: Vec<f64> = others.iter().map(|&r| measured[r]).collect();
        let rho = spearman(&p, &m);
        let predicted_order = order(&others, &predicted);
        let measured_order = order(&others, &measured);
        eprintln!(
            "{grid_name}, {name}: {n} ranks, {BYTES} bytes from rank 0, median of {REPS} (ms)"
        );
        eprintln!(
            "  rank  Mbit/s  delay  predicted  held  held/predicted  (held per rep)  | sim finish  returned"
        );
        for r in 0..n {
            let all: Vec<String> = reps
                .iter()
                .map(|t| format!("{:.0}", t.held[r] * 1e3))
                .collect();
            eprintln!(
                "  {r:>4}  {:>6.0}  {:>5.1}  {:>9.1}  {:>4.0}  {:>14.2}  ({})  | {:>10.1}  {:>8.1}",
                rates[r] / 1e6,
                delays[r] * 1e3,
                predicted[r] * 1e3,
                measured[r] * 1e3,
                if r == 0 {
                    1.0
                } else {
                    measured[r] / predicted[r]
                },
                all.join(" "),
                sim.finish[r] * 1e3,
                returned[r] * 1e3,
            );
        }
        eprintln!(
            "  order predicted {predicted_order:?}, measured {measured_order:?}, Spearman {rho:.3}"
        );

        if !asserted.contains(&name) {
            continue;
        }
        if measured_order != predicted_order {
            failures.push(format!(
                "{name}: completion order {measured_order:?}, simulated {predicted_order:?} (Spearman {rho:.3})"
            ));
        }
        for &r in &others {
            let ratio = measured[r] / predicted[r];
            if !(1.0 / FACTOR..=FACTOR).contains(&ratio) {
                failures.push(format!(
                    "{name}: rank {r} took {:.1} ms, predicted {:.1} ms",
                    measured[r] * 1e3,
                    predicted[r] * 1e3
                ));
            }
        }
    }
    testbed.down().expect("testbed down");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        ferry_testbed::leftovers(Some(&prefix))
            .expect("ip netns list")
            .is_empty(),
        "namespaces of {prefix} are left"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
