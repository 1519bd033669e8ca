//! The BSPlib rules through the Rust API: real jobs of the `bsp_rules` example through
//! `ferry run`, one test per rule, plus the error cases and the optimisation switches.
//!
//! Needs `ferry` and the example next to this test's target directory: `cargo test --release
//! --workspace` builds both (or `cargo build --release -p ferry-cli && cargo build --release
//! -p ferry-bsp --examples`). Jobs run one at a time (two cores).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `target/<profile>`, from this test executable (`target/<profile>/deps/rules-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

fn need(path: PathBuf, build: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run `cargo test --release --workspace` or `{build}`",
        path.display()
    );
    path
}

fn run(n: u32, case: &str, env: &[(&str, &str)]) -> Output {
    run_example(n, "bsp_rules", &[case], env)
}

fn run_example(n: u32, example: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = profile_dir();
    let ferry = need(dir.join("ferry"), "cargo build --release -p ferry-cli");
    let prog = need(
        dir.join("examples").join(example),
        "cargo build --release -p ferry-bsp --examples",
    );
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(ferry);
    cmd.args(["run", "-n", &n.to_string(), "--timeout", "30"])
        .arg(prog)
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("ferry run")
}

#[track_caller]
fn ok(n: u32, case: &str, env: &[(&str, &str)]) {
    let out = run(n, case, env);
    assert!(
        out.status.success(),
        "{case} on {n} processes {env:?} failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The job must fail, and the message must name a process and the call.
#[track_caller]
fn stops(case: &str, names: &str) {
    let out = run(3, case, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{case} was not stopped\n{err}");
    assert!(
        !err.contains("RULE BROKEN"),
        "{case}: a rule broke first\n{err}"
    );
    assert!(
        err.contains(names),
        "{case}: message does not name `{names}`\n{err}"
    );
}

#[test]
fn registrations_match_by_order_and_pop_takes_effect_at_sync() {
    ok(3, "reg_order", &[]);
}

#[test]
fn registrations_stack() {
    ok(3, "reg_stack", &[]);
    ok(3, "reg_reuse", &[]);
    stops("err_stack_popped", ": bsp_put: address");
}

/// `Bsp::begin` on fewer processes than the job, with the number from process 0 only.
#[test]
fn begin_with_fewer_processes_than_the_job() {
    let out = run(4, "begin_fewer", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.matches("begin_fewer ok").count() == 1,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn registration_takes_effect_at_next_sync() {
    stops("err_reg_not_yet", ": bsp_put: address");
    stops("err_popped", ": bsp_put: address");
}

#[test]
fn put_copies_source_at_call_time() {
    ok(3, "put_copies", &[]);
}

#[test]
fn adjacent_puts_merge_and_apply_in_order() {
    for env in [
        &[][..],
        &[("FERRY_BSP_EARLY", "1024")][..],
        &[("FERRY_BSP_COMBINE", "0")][..],
    ] {
        ok(3, "merge", env);
    }
}

#[test]
fn gets_are_served_before_puts() {
    ok(3, "gets_before_puts", &[]);
}

#[test]
fn hp_variants() {
    ok(3, "hp", &[]);
}

#[test]
fn bsmp_messages_readable_in_next_superstep_only() {
    ok(3, "bsmp", &[]);
}

#[test]
fn tag_size_changes_at_next_sync() {
    ok(3, "tagsize", &[]);
}

#[test]
fn errors_stop_the_job_naming_process_and_call() {
    stops(
        "err_put_bounds",
        "process 1: bsp_put: bytes 12..20 are outside",
    );
    stops(
        "err_get_bounds",
        "process 1: bsp_get: bytes 12..20 are outside",
    );
    stops("err_mismatch", ": bsp_sync: registrations do not match");
    stops("err_pop_unregistered", ": bsp_pop_reg: address");
    stops(
        "err_tagsize_differs",
        "process 2: bsp_set_tagsize: process 1 sent a tag of 8 bytes",
    );
    stops(
        "err_bad_pid",
        "process 2: bsp_put: process id 3 is out of range 0..3",
    );
}

/// A process that ends while the others sync, or leaves without ending: the job stops with a
/// message naming it, where it waited for ever before.
#[test]
fn missing_or_early_ends_stop_the_job() {
    let out = run(3, "err_end_while_sync", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && (err.contains(": bsp_sync: process 0 called bsp_end")
                || err.contains("process 0: bsp_end: process 1 called bsp_sync")),
        "{err}"
    );
    stops("err_no_end", "process 1: bsp_end: this process ended");
    // Nothing is dropped: the launcher sees the process leave without finalizing.
    stops("err_exit_no_end", "rank 1");
}

/// Every switch of the seed's optimisations, alone and all off, on 1, 2 and 4 processes.
#[test]
fn stress_under_every_optimisation_switch() {
    let configs: &[&[(&str, &str)]] = &[
        &[],
        &[("FERRY_BSP_COMBINE", "0")],
        &[("FERRY_BSP_EARLY", "0")],
        &[("FERRY_BSP_EARLY", "256")],
        &[("FERRY_BSP_REORDER", "0")],
        &[("FERRY_BSP_PREPOST", "0")],
        &[("FERRY_BSP_PREPOST_BYTES", "64")],
        &[("FERRY_BSP_IN_PLACE", "0")],
        &[("FERRY_BSP_RING", "0")],
        // Small rings: closing messages often wrap (copied) and fill them while held.
        &[("FERRY_SHM_RING", "8192")],
        &[
            ("FERRY_BSP_COMBINE", "0"),
            ("FERRY_BSP_REORDER", "0"),
            ("FERRY_BSP_PREPOST", "0"),
        ],
    ];
    for env in configs {
        ok(4, "stress", env);
    }
    ok(1, "stress", &[]);
    ok(2, "stress", &[("FERRY_TRANSPORT", "tcp")]);
    ok(
        3,
        "bsmp",
        &[("FERRY_BSP_COMBINE", "0"), ("FERRY_BSP_PREPOST", "0")],
    );
}

/// Records written straight into the peer's ring (`FERRY_BSP_RING`) while that ring fills
/// mid-superstep: an 8 KiB ring holds under 4 KiB per record, and a stress superstep sends a
/// peer ~20 records (some of up to 3000 bytes) and get requests, so reservations fill and go
/// early, reservations fail (the rest goes to the combining buffer), and in-place reads hold
/// the ring while the next superstep reserves; with early sends off too, and without
/// pre-posted receives.
#[test]
fn ring_records_when_the_ring_fills_mid_superstep() {
    for env in [
        &[("FERRY_SHM_RING", "8192")][..],
        &[("FERRY_SHM_RING", "8192"), ("FERRY_BSP_EARLY", "0")][..],
        &[("FERRY_SHM_RING", "8192"), ("FERRY_BSP_PREPOST", "0")][..],
        &[("FERRY_SHM_RING", "8192"), ("FERRY_BSP_EARLY", "512")][..],
    ] {
        ok(2, "stress", env);
        ok(3, "stress", env);
        ok(2, "bsmp", env);
    }
}

/// A record larger than one eager frame (stress puts up to 3000 bytes; a 4 KiB ring carries
/// frames of up to 2016) is never sent early: it would go as a rendezvous that the receiver,
/// waiting in its sync for the closing message, never takes. This deadlocked before.
#[test]
fn records_larger_than_an_eager_frame_wait_for_the_closing_message() {
    for env in [
        &[("FERRY_SHM_RING", "4096")][..],
        &[("FERRY_SHM_RING", "4096"), ("FERRY_BSP_RING", "0")][..],
    ] {
        ok(2, "stress", env);
        ok(3, "stress", env);
    }
}

/// The applications check their own results (LU and Jacobi equal to the sequential
/// computation, LU also by its residual |P·A − L·U|; sorted and complete), with the
/// optimisations on and all off, on process counts that are and are not squares (LU's grid is
/// 1×2, 1×3, 2×2, 2×3). LU pivots (its input has a zero diagonal) unless told `nopivot`.
#[test]
fn applications() {
    let off = [
        ("FERRY_BSP_COMBINE", "0"),
        ("FERRY_BSP_REORDER", "0"),
        ("FERRY_BSP_PREPOST", "0"),
    ];
    let apps: [(&str, &[&str]); 4] = [
        ("lu", &["48"]),
        ("lu", &["48", "nopivot"]),
        ("sample_sort", &["200000"]),
        ("jacobi", &["200"]),
    ];
    // (processes, example, arguments, environment)
    type Run<'a> = (u32, &'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let mut runs: Vec<Run> = vec![];
    for n in [2, 3, 4] {
        for env in [&[][..], &off[..]] {
            runs.extend(apps.iter().map(|&(example, args)| (n, example, args, env)));
        }
    }
    runs.push((6, "lu", &["24"], &[]));
    for (n, example, args, env) in runs {
        let out = run_example(n, example, args, env);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(" ok"),
            "{example} {args:?} on {n} {env:?}\nstdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if example == "lu" && !args.contains(&"nopivot") {
            // The input needs row exchanges: a zero diagonal.
            assert!(
                stdout.contains("pivot=on") && !stdout.contains("swaps=0 "),
                "{stdout}"
            );
        }
    }
}

/// The seed paper's table 3 at its sizes (LU of 256, 700 000 keys, 100×100 Jacobi, 500
/// sweeps) on 6 and 8 processes (LU on 2×3 and 2×4), optimisations on and all off; 2, 3 and 4
/// processes, at smaller sizes, are in `applications`. Correctness only.
#[test]
fn applications_at_the_papers_sizes_on_6_and_8_processes() {
    let off = [
        ("FERRY_BSP_COMBINE", "0"),
        ("FERRY_BSP_REORDER", "0"),
        ("FERRY_BSP_PREPOST", "0"),
    ];
    for n in [6, 8] {
        for env in [&[][..], &off[..]] {
            for example in ["lu", "sample_sort", "jacobi"] {
                let out = run_example(n, example, &[], env);
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success() && stdout.contains(" ok"),
                    "{example} on {n} {env:?}\nstdout:\n{stdout}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

/// `ferry bench bsp` and `bsp-apps` end to end (tiny runs): the tables print and the CSVs
/// hold a row per process count and setting, with positive L and g.
#[test]
fn bench_bsp_end_to_end() {
    let dir = profile_dir();
    let ferry = need(dir.join("ferry"), "cargo build --release -p ferry-cli");
    let out = std::env::temp_dir().join(format!("ferry-bench-bsp-{}", std::process::id()));
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let run = |args: &[&str]| {
        let o = Command::new(&ferry)
            .arg("bench")
            .args(args)
            .arg("--out")
            .arg(&out)
            .output()
            .expect("ferry bench");
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "ferry bench {args:?}\nstdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        stdout
    };
    let text = run(&["bsp", "--procs", "2,3", "--reps", "3"]);
    assert!(
        text.contains("Table 1") && text.contains("Table 2"),
        "{text}"
    );
    let csv = std::fs::read_to_string(out.join("bsp-params.csv")).expect("bsp-params.csv");
    let rows: Vec<Vec<f64>> = csv
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("p,"))
        .map(|l| {
            l.split(',')
                .filter_map(|v| v.parse().ok())
                .collect::<Vec<f64>>()
        })
        .collect();
    assert_eq!(rows.len(), 4, "{csv}");
    // p, s_dot, s_mm, s, L µs, … (the setting is not a number)
    assert!(rows.iter().all(|r| r[3] > 0.0 && r[4] > 0.0), "{csv}");
    assert!(out.join("bsp-h-relations.png").exists() && out.join("bsp-L-g.png").exists());
    let text = run(&["bsp-apps", "--procs", "2", "--rounds", "1"]);
    for app in ["lu", "sample_sort", "jacobi"] {
        assert!(text.contains(app), "{text}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
