//! Inputs a careless or hostile user gives `ferry run`: each ends in a clear error within
//! seconds, not a hang, a crash or a launcher that eats all memory.

mod common;

use common::{assert_fails, example, ferry, output_within};
use std::process::{Command, Output};
use std::time::Duration;

fn run(args: &[&str], limit: Duration) -> Output {
    output_within(
        ferry().arg("run").args(args),
        &format!("ferry run {args:?}"),
        limit,
    )
}

/// A directory named as the program is said to be one (execve's EACCES alone would read as
/// "permission denied").
#[test]
fn a_directory_is_no_program() {
    let out = run(&["-n", "2", "/tmp"], Duration::from_secs(5));
    assert_fails(
        &out,
        126,
        "ferry run: /tmp: is a directory, not a program\n",
    );
}

/// Files read whole are capped: an endless hostfile or grid file is an error naming the file
/// and the cap, within seconds, not a launcher that grows without end.
#[test]
fn endless_input_files_are_refused() {
    let out = run(
        &["--hostfile", "/dev/zero", "-n", "2", "true"],
        Duration::from_secs(20),
    );
    assert_fails(
        &out,
        2,
        "cannot read hostfile /dev/zero: larger than 16777216 bytes",
    );
    let out = run(
        &["--grid", "/dev/zero", "-n", "2", "true"],
        Duration::from_secs(20),
    );
    assert_fails(&out, 2, "/dev/zero: larger than 16777216 bytes");
}

/// A /dev/shm too small for the ranks' segments is an error naming it, its size and what is
/// needed, instead of a rank killed by SIGBUS at its first touch of a page. Needs root (a
/// mount namespace with its own small /dev/shm).
#[test]
fn a_small_dev_shm_is_an_error_naming_it() {
    if !ferry_testbed::is_root() {
        eprintln!("skipped: a mount namespace needs root");
        return;
    }
    let script = format!(
        "mount -t tmpfs -o size=1m ferry-small-shm /dev/shm && exec {} run -n 4 {}",
        env!("CARGO_BIN_EXE_ferry"),
        example("ring").display()
    );
    let out = output_within(
        Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .env("FERRY_SHM_RING", "1048576")
            .env_remove("MPIEXEC_TIMEOUT"),
        "ferry run in a small /dev/shm",
        Duration::from_secs(60),
    );
    assert_fails(&out, 1, "no space left on /dev/shm (1048576 bytes, ");
    assert_fails(&out, 1, "the segment needs ");
}

/// A bootstrap server (PMI-1 through `PMI_PORT`, or ferry's own through `FERRY_PMI_ADDR`) that
/// accepts the connection and never answers ends the rank's set-up within
/// `FERRY_CONNECT_TIMEOUT`, naming what it waited for.
#[test]
fn a_silent_bootstrap_server_ends_set_up_within_the_connect_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming() {
            held.push(stream);
        }
    });
    let key = "ab".repeat(32);
    for (env, says) in [
        (
            vec![("PMI_PORT", addr.as_str()), ("PMI_ID", "0")],
            "no reply within FERRY_CONNECT_TIMEOUT on the PMI connection",
        ),
        (
            vec![
                ("FERRY_PMI_ADDR", addr.as_str()),
                ("FERRY_RANK", "0"),
                ("FERRY_SIZE", "2"),
                ("FERRY_JOB_ID", "7"),
                ("FERRY_JOB_KEY", key.as_str()),
            ],
            "accepted the bootstrap connection but sent nothing within FERRY_CONNECT_TIMEOUT",
        ),
    ] {
        // `timeout` turns a rank that would wait for ever into a failure.
        let out = output_within(
            Command::new("timeout")
                .args(["-k", "5", "30"])
                .arg(example("ring"))
                .env_remove("FERRY_RANK")
                .env_remove("PMI_FD")
                .env("FERRY_CONNECT_TIMEOUT", "2")
                .envs(env.iter().copied()),
            &format!("ring with {env:?}"),
            Duration::from_secs(20),
        );
        assert!(!out.status.success(), "{env:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{env:?}: {stderr}");
    }
}
