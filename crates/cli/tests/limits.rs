//! Descriptor limits: `ferry run` and `ferry node` raise their soft `RLIMIT_NOFILE` to the hard
//! limit (the ranks inherit it), and a hard limit too small for the job is named with what to
//! raise. Each command here starts with a small limit set between fork and exec.

mod common;

use common::{example, ferry, output_within, show, text};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Ranks of the TCP jobs: each holds a socket per peer and the launcher about three
/// descriptors per rank, so neither fits a soft limit of 32.
const RANKS: &str = "40";

/// Starts `command` with `RLIMIT_NOFILE` at `soft`, `hard`.
fn with_limit(command: &mut Command, soft: u64, hard: u64) -> &mut Command {
    // SAFETY: between fork and exec the closure only makes the async-signal-safe call
    // setrlimit on a value on its own stack.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// A ring over TCP of [`RANKS`] ranks, started with the limit `soft`, `hard`.
fn tcp_ring(soft: u64, hard: u64) -> std::process::Output {
    let mut command = ferry();
    command
        .args(["run", "--timeout", "120", "--transport", "tcp", "-n", RANKS])
        .arg(example("ring"));
    output_within(
        with_limit(&mut command, soft, hard),
        "a 40-rank ring over TCP",
        Duration::from_secs(150),
    )
}

#[test]
fn a_job_beyond_the_soft_limit_runs_within_the_hard_one() {
    let out = tcp_ring(32, 4096);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("ring of 40 ranks"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_hard_limit_too_small_is_named_with_what_to_raise() {
    let out = tcp_ring(48, 48);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    for says in [
        "the launcher ran out of file descriptors",
        "RLIMIT_NOFILE is 48 soft, 48 hard",
        "/etc/security/limits.conf",
        "ulimit -Hn",
    ] {
        assert!(stderr.contains(says), "no {says:?}: {}", show(&out));
    }
    assert!(
        !stderr
            .lines()
            .any(|l| l.ends_with("Too many open files (os error 24)")),
        "a bare error: {}",
        show(&out)
    );
}

/// The soft and hard "Max open files" of process `pid`.
fn open_files_limit(pid: u32) -> Option<(String, String)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut words = line.split_whitespace().skip(3);
    Some((words.next()?.to_string(), words.next()?.to_string()))
}

#[test]
fn the_node_daemon_raises_its_soft_limit() {
    // A daemon started over ssh gets the login's limits; it waits here for its job description
    // on the pipe, which closing ends.
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .arg("node")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut daemon = with_limit(&mut command, 32, 4096)
        .spawn()
        .expect("ferry node starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = None;
    while Instant::now() < deadline {
        seen = open_files_limit(daemon.id());
        if seen.as_ref().is_some_and(|(soft, _)| soft == "4096") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(daemon.stdin.take());
    let status = daemon.wait().expect("ferry node ends");
    let mut stderr = String::new();
    if let Some(mut pipe) = daemon.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    assert_eq!(
        seen,
        Some(("4096".to_string(), "4096".to_string())),
        "the daemon's limit (status {status:?}, stderr {stderr})"
    );
}

/// A rank started with a small soft limit (as Slurm's srun or another process manager may
/// start it; `prlimit` here) raises its own: each of the 40 needs more than 32.
#[test]
fn a_rank_raises_its_own_soft_limit() {
    let out = output_within(
        ferry()
            .args(["run", "--timeout", "120", "--transport", "tcp", "-n", RANKS])
            .args(["prlimit", "--nofile=32:4096"])
            .arg(example("ring")),
        "a 40-rank ring over TCP, each rank under prlimit",
        Duration::from_secs(150),
    );
    assert!(out.status.success(), "{}", show(&out));
}

/// A rank whose hard limit is too small for its TCP peers names itself and the limit.
#[test]
fn a_rank_out_of_descriptors_names_itself_and_the_limit() {
    let out = output_within(
        ferry()
            .args(["run", "--timeout", "120", "--transport", "tcp", "-n", RANKS])
            .args(["prlimit", "--nofile=40:40"])
            .arg(example("ring")),
        "a 40-rank ring over TCP, each rank under a hard limit of 40",
        Duration::from_secs(150),
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    // "… rank 3 (host H) ran out of file descriptors (EMFILE: its limit RLIMIT_NOFILE is …"
    let says = format!(
        " (host {}) ran out of file descriptors (EMFILE: its limit RLIMIT_NOFILE is 40 soft, 40 hard)",
        ferry_launch::this_host()
    );
    let named = text(&out.stderr).lines().any(|line| {
        line.split_once(&says).is_some_and(|(before, _)| {
            let mut words = before.rsplit(' ');
            let rank = words.next().is_some_and(|n| n.parse::<u32>().is_ok());
            rank && words.next() == Some("rank")
        })
    });
    assert!(named, "no rank named with its limit: {}", show(&out));
}
