//! Helpers shared by the multi-process tests of `ferry` (each test file uses some of them).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `ferry` binary with no stdin and without the caller's MPIEXEC_TIMEOUT (a job's time
/// limit is the test's to set).
pub fn ferry() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command.env_remove("MPIEXEC_TIMEOUT").stdin(Stdio::null());
    command
}

/// Runs `command`, which must end within `limit` (`what` names it in the failure).
pub fn output_within(command: &mut Command, what: &str, limit: Duration) -> Output {
    let start = Instant::now();
    let output = command.output().expect("ferry runs");
    let took = start.elapsed();
    assert!(took < limit, "{what} took {took:?}");
    output
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Output bytes as lines, sorted (ranks print in any order).
pub fn sorted_lines(bytes: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = text(bytes).lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// The processes in network namespace `ns` (`ip netns pids`).
pub fn netns_pids(ns: &str) -> Vec<i32> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .expect("ip netns pids");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The `check routes` lines of a job of `ranks` ranks, `per_host` consecutive ranks a host,
/// say: itself `self`, a rank of its host `shm`, any other `tcp`.
#[track_caller]
pub fn assert_routes(stdout: &str, ranks: usize, per_host: usize) {
    for rank in 0..ranks {
        let line = format!("routes {rank}: ");
        let routes: Vec<&str> = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .unwrap_or_else(|| panic!("no {line:?} in\n{stdout}"))
            .split(' ')
            .collect();
        let want: Vec<&str> = (0..ranks)
            .map(|peer| match peer {
                p if p == rank => "self",
                p if p / per_host == rank / per_host => "shm",
                _ => "tcp",
            })
            .collect();
        assert_eq!(routes, want, "rank {rank}:\n{stdout}");
    }
}

/// The ferry-core example `name`, built beside the `ferry` binary.
pub fn example(name: &str) -> PathBuf {
    let ferry = PathBuf::from(env!("CARGO_BIN_EXE_ferry"));
    let path = ferry
        .parent()
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: build the examples with `cargo test --workspace` (or `cargo build --release --examples -p ferry-core`)",
        path.display()
    );
    path
}

/// The testbed's grid file `name` (in `crates/testbed/grids`).
pub fn grid_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testbed/grids")
        .join(name)
}

/// `ferry run --grid <grid_file(grid)> --testbed-prefix PREFIX -n RANKS` on a standing testbed,
/// with no stdin and none of the caller's MPIEXEC_TIMEOUT or FERRY_SHOW_PATHS; the caller adds
/// `--timeout`, its options and the program.
pub fn grid_job(grid: &str, prefix: &str, ranks: usize) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .env_remove("MPIEXEC_TIMEOUT")
        .env_remove("FERRY_SHOW_PATHS")
        .stdin(Stdio::null())
        .args(["run", "--grid"])
        .arg(grid_file(grid))
        .args(["--testbed-prefix", prefix, "-n", &ranks.to_string()]);
    command
}

/// A finished job's status and output, for assertion messages.
pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A job that must have ended with exit code `code` and said `says` on stderr.
#[track_caller]
pub fn assert_fails(out: &Output, code: i32, says: &str) {
    assert_eq!(out.status.code(), Some(code), "{}", show(out));
    assert!(
        text(&out.stderr).contains(says),
        "no {says:?} on stderr: {}",
        show(out)
    );
}

/// Whether this process may build a testbed (it needs root); if not, says so, and the test
/// passes without it.
pub fn testbed_allowed() -> bool {
    let root = ferry_testbed::is_root();
    if !root {
        eprintln!("skipped: the testbed needs root");
    }
    root
}

/// The testbed of `grid` under this run's prefix for test `tag` (`fy<pid><tag>-`, so that
/// `down` after a crash finds it), and that prefix.
pub fn testbed_of(
    grid: &ferry_grid::Topology,
    tag: &str,
    options: &ferry_testbed::UpOptions,
) -> (ferry_testbed::Testbed, String) {
    let prefix = format!("fy{}{tag}-", std::process::id());
    let testbed = ferry_testbed::Testbed::up_with(grid, &prefix, options).expect("testbed up");
    (testbed, prefix)
}

/// The grid file `name` of the testbed, parsed.
pub fn grid(name: &str) -> ferry_grid::Topology {
    ferry_grid::Topology::load(&grid_file(name)).expect("grid file")
}

/// A job that succeeded and printed `says` on stdout.
#[track_caller]
pub fn assert_ok_says(out: &Output, says: &str) {
    assert!(out.status.success(), "{}", show(out));
    assert!(
        text(&out.stdout).contains(says),
        "no {says:?} on stdout: {}",
        show(out)
    );
}

/// The gdb commands that print the table as `state S size N` and `proc I HOST EXE PID` lines
/// (an entry is two pointers and an int: 24 bytes; the launcher is Rust, so C is set for the
/// casts).
pub const PRINT_TABLE: &str = r#"set language c
set $n = *(int *)&MPIR_proctable_size
set $t = *(char **)&MPIR_proctable
printf "state %d size %d\n", *(int *)&MPIR_debug_state, $n
set $i = 0
while $i < $n
  printf "proc %d %s %s %d\n", $i, *(char **)($t + 24 * $i), *(char **)($t + 24 * $i + 8), *(int *)($t + 24 * $i + 16)
  set $i = $i + 1
end
"#;

/// One entry as gdb printed it.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    pub host: String,
    pub exe: String,
    pub pid: u32,
}

/// The `state` and the entries in gdb's output.
pub fn parse_table(stdout: &str) -> (Option<i32>, Vec<Entry>) {
    let state = stdout
        .lines()
        .find_map(|l| l.strip_prefix("state "))
        .and_then(|rest| rest.split(' ').next()?.parse().ok());
    let entries = stdout
        .lines()
        .filter_map(|l| {
            let mut words = l.strip_prefix("proc ")?.split(' ');
            let _index = words.next()?;
            Some(Entry {
                host: words.next()?.to_string(),
                exe: words.next()?.to_string(),
                pid: words.next()?.parse().ok()?,
            })
        })
        .collect();
    (state, entries)
}

/// The `rank R pid P host H` lines of the ranks, as (pid, host) in rank order.
pub fn rank_lines(stdout: &str, ranks: usize) -> Vec<(u32, String)> {
    let mut out = vec![None; ranks];
    for line in stdout.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["rank", r, "pid", p, "host", h] = words[..] {
            if let (Ok(r), Ok(p)) = (r.parse::<usize>(), p.parse::<u32>()) {
                if r < ranks {
                    out[r] = Some((p, h.to_string()));
                }
            }
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(r, e)| e.unwrap_or_else(|| panic!("rank {r} did not say who it is:\n{stdout}")))
        .collect()
}
