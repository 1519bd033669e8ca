//! Debuggers and the launcher: gdb in batch mode finds every rank of a job through the MPIR
//! process-acquisition interface (`MPIR_proctable`, `MPIR_debug_state`, `MPIR_Breakpoint`), as
//! parallel debuggers do with MPICH's and Open MPI's launchers:
//!
//! - gdb starts `ferry run`, stops at `MPIR_Breakpoint` and reads the table: one entry per
//!   rank, in rank order, with the pid and host each rank reports itself and the program's
//!   absolute path; `MPIR_debug_state` is 1 (spawned);
//! - the same for ranks started by node daemons (`--launcher local` with two host names), whose
//!   pids reach the launcher as the daemons report them;
//! - gdb attaches to a running `mpiexec` and reads the same;
//! - `ferry run --gdb` runs each rank under gdb: a rank that crashes prints its backtrace and
//!   the job fails, one that exits passes its code through.
//!
//! The ranks are `sh -c` scripts that print `rank R pid P host H` and wait for a file the test
//! makes. Without gdb the tests say so and pass.

mod common;

use common::{ferry, parse_table, rank_lines, text, PRINT_TABLE};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long any job here may take (a hang becomes a failure).
const LIMIT: Duration = Duration::from_secs(60);

fn have_gdb() -> bool {
    let ok = Command::new("gdb")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: gdb is not installed (scripts/setup.sh installs it)");
    }
    ok
}

/// A fresh directory for one test's files, under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_ferry"))
        .parent()
        .expect("target dir")
        .join(format!("debugger-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The rank's script: says who it is, then waits (up to the limit) for `release` to exist.
fn rank_script(release: &Path) -> String {
    format!(
        "echo \"rank $FERRY_RANK pid $$ host $(hostname)\"; i=0; \
         while [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        release.display()
    )
}

/// Waits for `child` up to [`LIMIT`], killing it after that.
fn wait_within(mut child: Child, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} hung\nstdout:\n{}\nstderr:\n{}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// gdb starts `ferry run RUN_ARGS… sh -c SCRIPT`, stops at MPIR_Breakpoint, prints the table,
/// makes the release file and lets the job finish; the entries must be the ranks' own pids and
/// hosts, in rank order.
fn table_at_breakpoint(name: &str, run_args: &[&str], ranks: usize, hosts: &[String]) {
    let dir = scratch(name);
    let release = dir.join("release");
    let script = dir.join("gdb.cmd");
    std::fs::write(
        &script,
        format!(
            "set breakpoint pending on\nbreak MPIR_Breakpoint\nrun\n{PRINT_TABLE}\
             shell touch {}\ndelete\ncontinue\n",
            release.display()
        ),
    )
    .expect("gdb script");
    let child = Command::new("gdb")
        .args(["-q", "-batch", "-x"])
        .arg(&script)
        .arg("--args")
        .arg(env!("CARGO_BIN_EXE_ferry"))
        .arg("run")
        .args(run_args)
        .args(["--timeout", "50", "sh", "-c", &rank_script(&release)])
        .env_remove("MPIEXEC_TIMEOUT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gdb starts");
    let out = wait_within(child, "gdb --args ferry run");
    let stdout = text(&out.stdout);
    let show = format!("stdout:\n{stdout}\nstderr:\n{}", text(&out.stderr));
    let (state, entries) = parse_table(&stdout);
    assert_eq!(state, Some(1), "MPIR_debug_state is not spawned\n{show}");
    let said = rank_lines(&stdout, ranks);
    assert_eq!(entries.len(), ranks, "{show}");
    let sh = Command::new("sh")
        .args(["-c", "command -v sh"])
        .output()
        .expect("command -v sh");
    let sh = text(&sh.stdout).trim().to_string();
    for (rank, (entry, (pid, _))) in entries.iter().zip(&said).enumerate() {
        assert_eq!(entry.pid, *pid, "rank {rank}'s pid\n{show}");
        assert_eq!(entry.host, hosts[rank], "rank {rank}'s host\n{show}");
        assert_eq!(entry.exe, sh, "rank {rank}'s executable\n{show}");
    }
    assert!(out.status.success(), "the job under gdb failed\n{show}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// This machine's host name, as the launcher reads it.
fn hostname() -> String {
    let out = Command::new("hostname").output().expect("hostname");
    text(&out.stdout).trim().to_string()
}

#[test]
fn gdb_reads_the_table_of_local_ranks_at_mpir_breakpoint() {
    if !have_gdb() {
        return;
    }
    let this = hostname();
    table_at_breakpoint(
        "local",
        &["-n", "3"],
        3,
        &[this.clone(), this.clone(), this],
    );
}

#[test]
fn gdb_reads_the_table_of_ranks_that_node_daemons_start() {
    if !have_gdb() {
        return;
    }
    let this = hostname();
    let hosts = format!("localhost:1,{this}:1");
    table_at_breakpoint(
        "daemons",
        &["--launcher", "local", "--hosts", &hosts, "-n", "2"],
        2,
        &["localhost".to_string(), this],
    );
}

#[test]
fn gdb_attaches_to_a_running_mpiexec_and_reads_the_table() {
    if !have_gdb() {
        return;
    }
    let dir = scratch("attach");
    let release = dir.join("release");
    let mpiexec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mpi/bin/mpiexec");
    // mpiexec execs ferry: its pid is the launcher's.
    let mut job = Command::new(&mpiexec)
        .env("FERRY_BIN", env!("CARGO_BIN_EXE_ferry"))
        .env_remove("MPIEXEC_TIMEOUT")
        .args([
            "-n",
            "2",
            "-timeout",
            "50",
            "sh",
            "-c",
            &rank_script(&release),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpiexec starts");
    let launcher = job.id();
    // Both ranks have said who they are: they run.
    let mut said = String::new();
    let mut lines = BufReader::new(job.stdout.take().expect("stdout")).lines();
    for _ in 0..2 {
        match lines.next() {
            Some(Ok(line)) => said += &format!("{line}\n"),
            other => panic!("a rank did not start: {other:?}"),
        }
    }
    let ranks = rank_lines(&said, 2);
    let script = dir.join("gdb.cmd");
    std::fs::write(&script, PRINT_TABLE).expect("gdb script");
    // The table is filled right after the last rank starts; look again until it is.
    let start = Instant::now();
    let (state, entries, show) = loop {
        let out = Command::new("gdb")
            .args(["-q", "-batch", "-p", &launcher.to_string(), "-x"])
            .arg(&script)
            .stdin(Stdio::null())
            .output()
            .expect("gdb -p");
        let stdout = text(&out.stdout);
        let show = format!("stdout:\n{stdout}\nstderr:\n{}", text(&out.stderr));
        let (state, entries) = parse_table(&stdout);
        if state == Some(1) || start.elapsed() > Duration::from_secs(20) {
            break (state, entries, show);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::fs::write(&release, "").expect("release");
    let out = wait_within(job, "mpiexec");
    assert_eq!(state, Some(1), "{show}");
    let this = hostname();
    let pids: Vec<(u32, &str)> = entries.iter().map(|e| (e.pid, e.host.as_str())).collect();
    let want: Vec<(u32, &str)> = ranks.iter().map(|(p, _)| (*p, this.as_str())).collect();
    assert_eq!(pids, want, "{show}");
    assert!(
        out.status.success(),
        "mpiexec after gdb detached: {}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_under_gdb_print_a_crash_backtrace_and_pass_exit_codes() {
    if !have_gdb() {
        return;
    }
    // Rank 1 kills itself with SIGSEGV; gdb stops there and prints its threads' stacks.
    let out = ferry()
        .args(["run", "--gdb", "-n", "2", "--timeout", "50", "sh", "-c"])
        .arg("if [ \"$FERRY_RANK\" = 1 ]; then kill -SEGV $$; fi; echo alive $FERRY_RANK")
        .output()
        .expect("ferry run --gdb");
    let stdout = text(&out.stdout);
    let show = format!("stdout:\n{stdout}\nstderr:\n{}", text(&out.stderr));
    assert!(!out.status.success(), "{show}");
    assert!(stdout.contains("SIGSEGV"), "{show}");
    assert!(stdout.contains("#0 "), "no backtrace\n{show}");
    assert!(stdout.contains("alive 0"), "{show}");
    // Exit codes pass through gdb.
    let out = ferry()
        .args([
            "run",
            "-gdb",
            "-n",
            "2",
            "--timeout",
            "50",
            "sh",
            "-c",
            "exit 3",
        ])
        .output()
        .expect("ferry run -gdb");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = ferry()
        .args(["run", "--gdb", "-n", "2", "--timeout", "50", "true"])
        .output()
        .expect("ferry run --gdb true");
    assert!(out.status.success(), "{}", text(&out.stderr));
}
