//! Settings out of their range end `ferry run` before any rank starts, with a message naming
//! the variable, the value and the range (docs/settings.md); a rank started without `ferry run`
//! refuses them in its own start-up (`ferry_core::init`, which `MPI_Init` calls).

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `ferry run -n 2` of a rank that says it started, with `env` set; it must end within 10 s.
fn run_with(env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .env_remove("MPIEXEC_TIMEOUT")
        .stdin(Stdio::null())
        .args(["run", "-n", "2", "sh", "-c", "echo started"]);
    for (k, v) in env {
        command.env(k, v);
    }
    let start = Instant::now();
    let out = command.output().expect("ferry runs");
    assert!(start.elapsed() < Duration::from_secs(10), "{env:?}");
    out
}

#[track_caller]
fn refused(env: &[(&str, &str)], says: &[&str]) {
    let out = run_with(env);
    let shown = common::show(&out);
    assert_eq!(out.status.code(), Some(2), "{env:?}\n{shown}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("started"),
        "a rank started\n{shown}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for s in says {
        assert!(stderr.contains(s), "{env:?}: no {s:?}\n{shown}");
    }
}

#[test]
fn a_setting_out_of_range_ends_ferry_run_before_any_rank_starts() {
    refused(
        &[("FERRY_TCP_BUF", "1")],
        &[
            "ferry run:",
            "FERRY_TCP_BUF=1 is out of range",
            "0 (kernel autotuning) or 65536 … 1073741824 bytes",
        ],
    );
    refused(
        &[("FERRY_SHM_RING", "99999999999")],
        &[
            "FERRY_SHM_RING=99999999999 is out of range",
            "4096 … 67108864 bytes",
        ],
    );
    refused(
        &[("FERRY_TCP_CHUNK", "0")],
        &["FERRY_TCP_CHUNK=0 is out of range"],
    );
    refused(
        &[("FERRY_COLL_BCAST_MIN_RANKS", "many")],
        &["FERRY_COLL_BCAST_MIN_RANKS=\"many\" is not a number"],
    );
    refused(
        &[("FERRY_BSP_PREPOST_BYTES", "1")],
        &[
            "FERRY_BSP_PREPOST_BYTES=1 is out of range",
            "64 … 1073741824 bytes",
        ],
    );
    refused(
        &[("FERRY_BCAST_SCHEDULER", "nonsense")],
        &["FERRY_BCAST_SCHEDULER=nonsense needs FERRY_BCAST_COSTS"],
    );
}

#[test]
fn the_launcher_and_weather_numbers_are_refused_out_of_range() {
    refused(
        &[("FERRY_TREE_FANOUT", "0")],
        &["ferry run: FERRY_TREE_FANOUT=0 is out of range: expected 1 … 65536 daemons"],
    );
    refused(
        &[("FERRY_TREE_FANOUT", "65537")],
        &["FERRY_TREE_FANOUT=65537 is out of range: expected 1 … 65536 daemons"],
    );
    refused(
        &[("FERRY_CONNECT_TIMEOUT", "86401")],
        &["FERRY_CONNECT_TIMEOUT=86401 is out of range"],
    );
    refused(
        &[("FERRY_WEATHER_WINDOW", "0")],
        &["ferry run: FERRY_WEATHER_WINDOW=0 is out of range: expected 1 … 10000 measurements"],
    );
    refused(
        &[("FERRY_WEATHER_TTCC_THRESHOLD", "11")],
        &["ferry run: FERRY_WEATHER_TTCC_THRESHOLD=11 is out of range: expected 0 … 10 (a relative error)"],
    );
    refused(
        &[("FERRY_WEATHER_TTCC_THRESHOLD", "nan")],
        &["FERRY_WEATHER_TTCC_THRESHOLD=\"nan\" is not a number"],
    );
}

#[test]
fn an_unknown_broadcast_scheduler_is_named_at_start_up() {
    let dir = std::env::temp_dir().join(format!("ferry-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let costs = dir.join("costs.json");
    std::fs::write(
        &costs,
        r#"{"n": 2, "latency": [[null, 1e-5], [1e-5, null]], "bandwidth": [[null, 1e9], [1e9, null]]}"#,
    )
    .expect("cost file");
    let costs = costs.to_string_lossy().into_owned();
    refused(
        &[
            ("FERRY_BCAST_SCHEDULER", "nonsense"),
            ("FERRY_BCAST_COSTS", &costs),
        ],
        &[
            "FERRY_BCAST_SCHEDULER=\"nonsense\" is not a scheduler ferry knows",
            "expected auto or one of",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn in_range_and_zero_connect_timeout_run() {
    let out = run_with(&[("FERRY_TCP_BUF", "65536"), ("FERRY_CONNECT_TIMEOUT", "0")]);
    assert_eq!(out.status.code(), Some(0), "{}", common::show(&out));
}

#[test]
fn a_rank_started_without_ferry_run_refuses_the_setting_in_its_start_up() {
    let out = Command::new(common::example("ring"))
        .env("FERRY_SHM_RING", "99999999999")
        .stdin(Stdio::null())
        .output()
        .expect("the ring example runs");
    let shown = common::show(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("FERRY_SHM_RING=99999999999 is out of range"),
        "{shown}"
    );
}
