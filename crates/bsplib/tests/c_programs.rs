//! BSPlib C programs written to the 1998 standard (`tests/c/*.c`), compiled with `bspcc`
//! against the `libbsp.so` of this build and run through `ferry run`: the rules one by one,
//! the error cases, inner product, reverse, prefix sum, a put/get stress test checked by
//! checksum, and `bsp_begin` with fewer processes than the job.
//!
//! Needs a C compiler (`cc`, or `$FERRY_CC`), and `ferry` and `libbsp.so` in this test's target
//! directory: `cargo test --release --workspace` builds both (or `cargo build --release -p
//! ferry-cli -p ferry-bsplib`). Jobs run one at a time (two cores).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `target/<profile>`, from this test executable (`target/<profile>/deps/c_programs-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// Where the freshest `libbsp.so` is: `cargo test` builds the cdylib into `deps/` without
/// copying it up to `target/<profile>/` (as `cargo build` does), so take the newer of the two.
fn libdir() -> PathBuf {
    let top = profile_dir();
    let deps = top.join("deps");
    let age = |d: &Path| {
        std::fs::metadata(d.join("libbsp.so"))
            .and_then(|m| m.modified())
            .ok()
    };
    match (age(&top), age(&deps)) {
        (Some(a), Some(b)) if a >= b => top,
        (_, Some(_)) => deps,
        (Some(_), None) => top,
        (None, None) => panic!(
            "libbsp.so is missing in {}: run `cargo test --release --workspace` or `cargo build --release -p ferry-bsplib`",
            top.display()
        ),
    }
}

/// Compiles every program once with `bspcc` into a fresh directory.
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let lib = libdir();
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = profile_dir().join("bsplib-tests");
        std::fs::create_dir_all(&out).expect("temp dir");
        for name in [
            "rules", "inner", "reverse", "sum", "stress", "fewer", "heavy", "spmd", "protos",
        ] {
            let status = Command::new(here.join("bspcc"))
                .env("BSP_LIBDIR", &lib)
                .args(["-std=c99", "-O2", "-Wall", "-Werror"])
                .arg(here.join("tests/c").join(format!("{name}.c")))
                .arg("-o")
                .arg(out.join(name))
                .status()
                .expect("run bspcc");
            assert!(status.success(), "bspcc failed on {name}.c");
        }
        out
    })
}

fn run(n: u32, prog: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = programs();
    let ferry = profile_dir().join("ferry");
    assert!(
        ferry.exists(),
        "{} is missing: run `cargo build --release -p ferry-cli`",
        ferry.display()
    );
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(ferry);
    // `cargo test` puts target/<profile> on LD_LIBRARY_PATH, which beats the programs' runpath
    // and would load a stale libbsp.so from there.
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.args(["run", "-n", &n.to_string(), "--timeout", "30"])
        .arg(dir.join(prog))
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("ferry run")
}

#[track_caller]
fn ok(n: u32, prog: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = run(n, prog, args, env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{prog} {args:?} on {n} processes {env:?} failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[track_caller]
fn rule(case: &str) {
    let out = ok(3, "rules", &[case], &[]);
    assert!(out.contains(&format!("rules {case} ok")), "{out}");
}

#[track_caller]
fn stops(case: &str, names: &str) {
    let out = run(3, "rules", &[case], &[]);
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
    rule("reg_order");
}

#[test]
fn registrations_stack() {
    rule("reg_null");
    rule("reg_stack");
    stops(
        "err_stack_uncovered",
        ": bsp_put: bytes 12..16 are outside the 8-byte area",
    );
}

#[test]
fn registration_takes_effect_at_next_sync() {
    stops("err_reg_not_yet", ": bsp_put: address");
}

#[test]
fn put_copies_source_at_call_time() {
    rule("put_copies");
}

#[test]
fn gets_are_served_before_puts() {
    rule("gets_before_puts");
}

#[test]
fn hp_variants() {
    rule("hp");
}

#[test]
fn bsmp_messages_readable_in_next_superstep_only() {
    rule("bsmp");
}

#[test]
fn tag_size_changes_at_next_sync() {
    rule("tagsize");
}

#[test]
fn errors_stop_the_job_naming_process_and_call() {
    stops(
        "err_put_bounds",
        "process 1: bsp_put: bytes 12..20 are outside",
    );
    stops("err_mismatch", ": bsp_sync: registrations do not match");
    stops("err_negative", "bsp_put: negative argument -4");
    stops(
        "err_get_bounds",
        "process 1: bsp_get: bytes 12..20 are outside",
    );
    stops("err_unregistered", "process 1: bsp_put: address");
    stops("err_popped", ": bsp_put: address");
    stops("err_pop_unregistered", "process 2: bsp_pop_reg: address");
    stops("err_pop_mismatch", ": bsp_sync: registrations do not match");
    stops(
        "err_tagsize_differs",
        "process 2: bsp_set_tagsize: process 1 sent a tag of 8 bytes in superstep 1, where the tag size here is 4",
    );
    stops(
        "err_bad_pid",
        "process 2: bsp_send: process id 3 is out of range 0..3",
    );
    // NULL where memory is to be read or written (a crash before).
    stops(
        "err_null_src",
        "process 1: bsp_put: src is NULL (for 4 bytes)",
    );
    stops(
        "err_null_tag",
        "process 1: bsp_get_tag: tag is NULL (for 1 bytes)",
    );
    let out = run(2, "rules", &["no_such_case"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("bsp_abort: unknown case no_such_case"),
        "{err}"
    );
}

/// Calls outside `bsp_begin` … `bsp_end`, and processes that do not end with the others: the
/// job stops with a message (each hung until the timeout before).
#[test]
fn calls_outside_the_computation_and_missing_ends_stop_the_job() {
    stops(
        "err_sync_before_begin",
        ": bsp_sync: called before bsp_begin",
    );
    stops("err_put_before_begin", ": bsp_put: called before bsp_begin");
    stops(
        "err_sync_after_end",
        "process 0: bsp_sync: called after bsp_end",
    );
    stops("err_init_null", ": bsp_init: the SPMD function is NULL");
    stops(
        "err_begin_twice",
        "process 1: bsp_begin: called again before bsp_end",
    );
    let out = run(3, "rules", &["err_end_while_sync"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && (err.contains(": bsp_sync: process 0 called bsp_end")
                || err.contains("process 0: bsp_end: process 1 called bsp_sync")),
        "{err}"
    );
    for case in ["err_no_end", "err_exit_no_end"] {
        stops(case, "process 1: bsp_end: this process ended");
    }
}

/// SPMD as the standard allows it: `main` starts with `bsp_init`, and its sequential part,
/// which decides how many processes to ask for, runs on process 0 only.
#[test]
fn spmd_through_bsp_init() {
    let out = ok(4, "spmd", &["3"], &[]);
    assert_eq!(out.matches("sequential part").count(), 1, "{out}");
    assert_eq!(out.matches("spmd ok on 3").count(), 1, "{out}");
}

/// The paper's prototypes, declared by the program itself: all 20 primitives, `bsp_abort`
/// and `bsp_vabort` are functions of `libbsp.so` (the last two were inline in `bsp.h`).
#[test]
fn primitives_are_functions_with_the_standard_signatures() {
    assert!(ok(3, "protos", &[], &[]).contains("protos ok"));
    for (case, text) in [
        ("abort", "process 2: bsp_abort: stopped by bsp_abort 42 2.5"),
        (
            "vabort",
            "process 2: bsp_abort: stopped by bsp_vabort 43 3.5",
        ),
    ] {
        let out = run(3, "protos", &[case], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(text), "{err}");
    }
}

#[test]
fn standard_programs() {
    for n in [1, 2, 4] {
        assert!(ok(n, "inner", &[], &[]).contains("inner product 9999900000 ok"));
        assert!(ok(n, "reverse", &[], &[]).contains("reverse ok"));
        assert!(ok(n, "sum", &[], &[]).contains("sum ok"));
    }
}

#[test]
fn stress_puts_and_gets_by_checksum() {
    assert!(ok(4, "stress", &["6"], &[]).contains("stress ok"));
    let off = [
        ("FERRY_BSP_COMBINE", "0"),
        ("FERRY_BSP_REORDER", "0"),
        ("FERRY_BSP_PREPOST", "0"),
    ];
    assert!(ok(3, "stress", &["3"], &off).contains("stress ok"));
    assert!(ok(2, "stress", &["3"], &[("FERRY_TRANSPORT", "tcp")]).contains("stress ok"));
    assert!(ok(4, "heavy", &[], &[]).contains("heavy ok"));
    assert!(ok(3, "heavy", &[], &[("FERRY_TRANSPORT", "tcp")]).contains("heavy ok"));
    assert!(ok(3, "heavy", &[], &[("FERRY_BSP_COMBINE", "0")]).contains("heavy ok"));
    assert!(ok(3, "heavy", &[], &[("FERRY_BSP_EARLY", "0")]).contains("heavy ok"));
    let no_prepost = [("FERRY_BSP_EARLY", "0"), ("FERRY_BSP_PREPOST", "0")];
    assert!(ok(2, "heavy", &[], &no_prepost).contains("heavy ok"));
}

#[test]
fn begin_with_fewer_processes_than_the_job() {
    let out = ok(4, "fewer", &[], &[]);
    assert_eq!(
        out.matches("fewer ok").count(),
        1,
        "only process 0 continues: {out}"
    );
}
