//! Mapping and binding end to end: `ferry run` (and `mpiexec`) with `--bind-to`, `--map-by`,
//! `--cpus-per-rank` and `--report-bindings`; each rank prints its rank and the cpus the kernel
//! lets it run on (`Cpus_allowed_list` of /proc/self/status, what sched_getaffinity gives).

mod common;

use common::{ferry, output_within, text};
use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Duration;

/// Each rank prints `RANK CPUS`.
const SHOW_CPUS: &str =
    "echo \"$FERRY_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)\"";

/// A hang is a failure; nothing here takes more than a second or two.
const LIMIT: Duration = Duration::from_secs(30);

fn run(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = ferry();
    command.envs(env.iter().copied()).arg("run").args(args);
    output_within(&mut command, &format!("ferry run {args:?}"), LIMIT)
}

/// `ferry run ARGS… sh -c SHOW_CPUS`: each rank's cpus, by rank.
fn cpus_of_ranks(env: &[(&str, &str)], args: &[&str]) -> (BTreeMap<u32, String>, String) {
    let all = [args, &["sh", "-c", SHOW_CPUS]].concat();
    let out = run(env, &all);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{all:?}: {stderr}");
    let ranks = text(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (rank, cpus) = l.split_once(' ')?;
            Some((rank.parse().ok()?, cpus.to_string()))
        })
        .collect();
    (ranks, stderr)
}

/// The cpus this test may use, as the kernel lists them, and how many.
fn ours() -> (String, usize) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_string();
    let count = std::thread::available_parallelism().map_or(1, |n| n.get());
    (list, count)
}

/// The `--report-bindings` lines `ferry: host H rank R bound to cpus C`, as rank → C.
fn reported(stderr: &str) -> BTreeMap<u32, String> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("ferry: host ")?;
            let (_, rest) = rest.split_once(" rank ")?;
            let (rank, cpus) = rest.split_once(" bound to cpus ")?;
            Some((rank.parse().ok()?, cpus.to_string()))
        })
        .collect()
}

#[test]
fn by_default_ranks_that_fit_get_a_core_each_and_oversubscribed_ones_none() {
    // Without hwloc a core is a cpu, whatever this machine's threads.
    let no_hwloc = [("FERRY_HWLOC_LIB", "/nonexistent/libhwloc.so.15")];
    let (all, count) = ours();
    let (fit, _) = cpus_of_ranks(&no_hwloc, &["-n", &count.to_string()]);
    assert_eq!(fit.len(), count);
    for cpus in fit.values() {
        // One core each: with hwloc or without, a core here has one hardware thread or more.
        assert!(cpus != &all || count == 1, "{fit:?}");
    }
    if count > 1 {
        let distinct: std::collections::BTreeSet<_> = fit.values().collect();
        assert_eq!(
            distinct.len(),
            count,
            "each rank a core of its own: {fit:?}"
        );
    }
    let (over, stderr) = cpus_of_ranks(&no_hwloc, &["-n", &(count + 1).to_string()]);
    assert!(over.values().all(|c| c == &all), "{over:?}");
    assert!(!stderr.contains("bound"), "no warnings: {stderr}");
}

#[test]
fn report_bindings_says_what_each_rank_really_got() {
    let (ranks, stderr) =
        cpus_of_ranks(&[], &["-n", "2", "--bind-to", "core", "--report-bindings"]);
    assert!(
        stderr.contains("hardware thread(s)"),
        "topology line: {stderr}"
    );
    assert_eq!(reported(&stderr), ranks, "{stderr}");
    // Unbound ranks are said to be so.
    let (_, stderr) = cpus_of_ranks(&[], &["-n", "2", "--bind-to", "none", "--report-bindings"]);
    assert_eq!(stderr.matches("not bound").count(), 2, "{stderr}");
}

#[test]
fn cpus_per_rank_binds_a_rank_to_that_many_cpus() {
    let (all, count) = ours();
    if count < 2 {
        eprintln!("skipped: one cpu here");
        return;
    }
    // Two cores for one rank: on this host's first two cores, which the report names (without
    // hwloc a core is a cpu, whatever this machine's threads).
    let no_hwloc = [("FERRY_HWLOC_LIB", "/nonexistent/libhwloc.so.15")];
    let (ranks, stderr) = cpus_of_ranks(
        &no_hwloc,
        &["-n", "1", "--cpus-per-rank", "2", "--report-bindings"],
    );
    assert_eq!(reported(&stderr), ranks);
    assert!(
        ranks[&0].contains('-') || ranks[&0].contains(','),
        "{ranks:?}"
    );
    // As :PE=2 of the mapping; two such ranks do not fit two cores, so they are unbound.
    if count == 2 {
        let (ranks, _) = cpus_of_ranks(&no_hwloc, &["-n", "2", "--map-by", "core:PE=2"]);
        assert!(ranks.values().all(|c| c == &all), "{ranks:?}");
    }
}

#[test]
fn without_hwloc_the_kernels_cpus_are_used_and_the_report_says_so() {
    let no_hwloc = [("FERRY_HWLOC_LIB", "/nonexistent/libhwloc.so.15")];
    let (ranks, stderr) = cpus_of_ranks(
        &no_hwloc,
        &["-n", "1", "--bind-to", "core", "--report-bindings"],
    );
    assert!(stderr.contains("no hwloc"), "{stderr}");
    assert_eq!(reported(&stderr), ranks);
    // Without hwloc a core is a cpu: ppr:1:core holds as many ranks as cpus, and no more.
    let (_, count) = ours();
    let out = run(
        &no_hwloc,
        &[
            "-n",
            &(count + 1).to_string(),
            "--map-by",
            "ppr:1:core",
            "true",
        ],
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ppr:1:core places at most"), "{stderr}");
}

#[test]
fn a_synthetic_topology_of_hwloc_is_mapped_and_reported_but_not_applied() {
    let synthetic = [("HWLOC_SYNTHETIC", "pack:2 numa:2 core:4 pu:2")];
    let (all, _) = ours();
    let args = ["-n", "4", "--map-by", "numa", "--report-bindings"];
    let (ranks, stderr) = cpus_of_ranks(&synthetic, &args);
    if stderr.contains("no hwloc") {
        eprintln!("skipped: hwloc is not here");
        return;
    }
    assert!(
        stderr.contains("2 package(s), 4 NUMA node(s), 16 core(s)"),
        "{stderr}"
    );
    let expected: BTreeMap<u32, String> = [(0, "0-7"), (1, "8-15"), (2, "16-23"), (3, "24-31")]
        .map(|(r, c)| (r, c.to_string()))
        .into();
    assert_eq!(reported(&stderr), expected, "{stderr}");
    assert!(ranks.values().all(|c| c == &all), "not applied: {ranks:?}");
    let args = [
        "-n",
        "4",
        "--map-by",
        "ppr:2:package:PE=2",
        "--report-bindings",
    ];
    let (_, stderr) = cpus_of_ranks(&synthetic, &args);
    let expected: BTreeMap<u32, String> = [(0, "0-3"), (1, "4-7"), (2, "16-19"), (3, "20-23")]
        .map(|(r, c)| (r, c.to_string()))
        .into();
    assert_eq!(reported(&stderr), expected, "{stderr}");
}

#[test]
fn node_daemons_bind_the_ranks_of_their_hosts() {
    // Two hosts, each a node daemon on this machine: each binds its one rank to its first core.
    let args = [
        "--hosts",
        "a:1,b:1",
        "--launcher",
        "local",
        "-n",
        "2",
        "--bind-to",
        "core",
        "--report-bindings",
    ];
    let (ranks, stderr) = cpus_of_ranks(&[], &args);
    assert_eq!(ranks.len(), 2, "{stderr}");
    assert_eq!(reported(&stderr), ranks, "{stderr}");
    assert_eq!(ranks[&0], ranks[&1], "each host's first core: {ranks:?}");
    // Without --bind-to, hosts that are all here are not bound onto the same cores.
    let (all, _) = ours();
    let args = [
        "--hosts",
        "a:1,b:1",
        "--launcher",
        "local",
        "-n",
        "2",
        "--report-bindings",
    ];
    let (ranks, stderr) = cpus_of_ranks(&[], &args);
    assert!(ranks.values().all(|c| c == &all), "{ranks:?}");
    assert_eq!(stderr.matches("not bound").count(), 2, "{stderr}");
}

#[test]
fn bad_policies_are_refused_before_any_rank_starts() {
    for args in [
        &["--map-by", "diagonal"][..],
        &["--bind-to", "l3cache"],
        &["--cpus-per-rank", "0"],
        &["--map-by", "core:PE=2", "--cpus-per-rank", "3"],
    ] {
        let all = [args, &["-n", "1", "sh", "-c", "echo ran"]].concat();
        let out = run(&[], &all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert!(!text(&out.stdout).contains("ran"), "{all:?}");
        assert!(!text(&out.stderr).is_empty());
    }
    // The variables are checked as the options are.
    let out = run(&[("FERRY_BIND_TO", "sideways")], &["-n", "1", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("\"sideways\""),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn mpiexec_takes_the_binding_options_of_mpich_and_open_mpi() {
    let mpiexec = concat!(env!("CARGO_MANIFEST_DIR"), "/../mpi/bin/mpiexec");
    let (_, count) = ours();
    for args in [
        &["--bind-to", "core", "-n", "2"][..],
        &["-bind-to", "core", "-map-by", "core", "-n", "2"],
        &["--map-by", "ppr:1:package", "--report-bindings", "-n", "1"],
    ] {
        let mut command = Command::new(mpiexec);
        command
            .env("FERRY_BIN", env!("CARGO_BIN_EXE_ferry"))
            .env_remove("MPIEXEC_TIMEOUT")
            .args(args)
            .args(["sh", "-c", SHOW_CPUS]);
        let out = output_within(&mut command, &format!("mpiexec {args:?}"), LIMIT);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let lines = text(&out.stdout);
        if count >= 2 && args.contains(&"2") {
            let cpus: Vec<&str> = lines.lines().filter_map(|l| l.split(' ').nth(1)).collect();
            assert_eq!(cpus.len(), 2, "{lines}");
            assert_ne!(cpus[0], cpus[1], "{lines}");
        }
    }
}
