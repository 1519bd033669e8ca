//! CI smoke test of `ferry bench compare`: the mpibench source builds with MPICH's `mpicc`, runs
//! in `--quick` mode (well under two seconds of benchmark time) and its output parses into every
//! result file. Skipped, with a message, where MPICH is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferry-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn quick_compare_against_mpich() {
    if !on_path("mpicc.mpich") || !on_path("mpiexec.mpich") {
        eprintln!("skipped: mpicc.mpich / mpiexec.mpich not installed (apt-get install -y mpich)");
        return;
    }
    let out = scratch("compare");
    let run = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["bench", "compare", "--quick", "--impls", "mpich"])
        .args(["--ranks", "2", "--rounds", "1", "--timeout", "60"])
        .args(["--background-load", "1", "--out"])
        .arg(&out)
        .output()
        .expect("run ferry");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("| pingpong | 2 | 8 | µs |"), "{stdout}");

    let summary = read(&out, "summary.csv");
    for op in [
        "pingpong",
        "bw",
        "msgrate",
        "barrier",
        "bcast",
        "allreduce",
        "alltoall",
    ] {
        assert!(
            summary
                .lines()
                .any(|l| l.starts_with(&format!("{op},2,")) && l.contains(",mpich,")),
            "no {op} row in summary.csv:\n{summary}"
        );
    }
    let machine = read(&out, "machine.txt");
    for field in [
        "command:",
        "nproc:",
        "kernel:",
        "cpu:",
        "commit:",
        "MPICH",
        "source: crates/bench/c/mpibench.c sha256 ",
    ] {
        assert!(
            machine.contains(field),
            "machine.txt lacks {field}:\n{machine}"
        );
    }
    assert!(read(&out, "results.csv").lines().count() > 10);
    // The busy loop beside the job is recorded, and gone once the run is over.
    let hog = machine
        .lines()
        .find_map(|l| l.strip_prefix("background load: 1 busy-looping processes (pids ["))
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("no background load in machine.txt:\n{machine}"));
    assert!(
        !Path::new(&format!("/proc/{hog}")).exists(),
        "busy loop {hog} outlived the run"
    );
    // The machine's load before and after each round and each job.
    let rounds = read(&out, "rounds.csv");
    assert!(
        rounds.starts_with("round,started,load_before,load_after,background_load\n1,"),
        "{rounds}"
    );
    assert!(read(&out, "runs.csv").contains(",load_before,load_after\n"));
    assert!(out.join("raw/mpich-n2-r0.csv").is_file());
    assert!(out.join("pingpong-latency.png").is_file());
    // Results are data: the source and the executables were built elsewhere.
    assert!(!out.join("mpibench.c").exists());
    assert!(!out.join("build/mpibench-mpich").exists());
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn record_writes_and_then_appends_the_runs_record() {
    let out = scratch("record");
    for command in ["first run", "second run"] {
        let run = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["bench", "record", "--command", command, "--out"])
            .arg(&out)
            .output()
            .expect("run ferry");
        assert!(run.status.success(), "{run:?}");
    }
    let machine = read(&out, "machine.txt");
    assert!(machine.starts_with("command: first run\n"), "{machine}");
    assert!(
        machine.contains("\n---\ncommand: second run\n"),
        "{machine}"
    );
    for field in ["date:", "nproc:", "load average at start:", "commit:"] {
        assert_eq!(machine.matches(field).count(), 2, "{field}:\n{machine}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn unknown_implementation_is_refused() {
    let run = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["bench", "compare", "--impls", "lam", "--out"])
        .arg(scratch("compare-bad"))
        .output()
        .expect("run ferry");
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("unknown implementation"));
}

#[test]
fn a_pypi_peer_that_cannot_be_installed_is_named_with_the_fix() {
    // No network here: a Python that does not exist stops the install before pip runs.
    let peers = scratch("compare-peers");
    let run = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["bench", "compare", "--quick", "--impls", "mpich5", "--out"])
        .arg(scratch("compare-nopeer"))
        .env("FERRY_PEERS_DIR", &peers)
        .env("FERRY_PYTHON", "/nonexistent/python3")
        .output()
        .expect("run ferry");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("mpich==5.0.2"), "{stderr}");
    assert!(stderr.contains(&peers.display().to_string()), "{stderr}");
    let _ = std::fs::remove_dir_all(&peers);
    let _ = std::fs::remove_dir_all(scratch("compare-nopeer"));
}
