//! MPI C programs started by MPICH's process manager (`mpiexec.hydra -launcher fork`), which
//! speaks PMI-1 to them over `PMI_FD`: a job's messages and collectives on both transports,
//! MPI_APPNUM of an MPMD command line, MPI_Abort's code as the job's exit status, a rank
//! exiting 3 failing the job, and MPI's name service through hydra's (`tests/c/ports.c`).
//! `tests/c/pmi_job.c` and `ports.c` are built with `bin/mpicc` against this build's
//! `libmpi.so` (`common::program`; `cargo test --release -p ferry-mpi --test hydra` builds it).
//!
//! Skipped, saying so, where `mpiexec.hydra` is missing (Debian's `mpich` package has it;
//! `scripts/setup.sh` installs it). Each run is bounded by `timeout`: hydra can hang when a
//! rank misbehaves. Jobs run one at a time (two cores).

mod common;

use common::program;
use std::process::{Command, Output};
use std::sync::Mutex;

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn hydra_missing() -> bool {
    let found = Command::new("sh")
        .args(["-c", "command -v mpiexec.hydra"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: mpiexec.hydra is not installed (Debian package mpich)");
    }
    !found
}

/// `timeout 60 mpiexec.hydra -launcher fork <hydra_args>` with `FERRY_TRANSPORT=transport`.
fn hydra(transport: &str, hydra_args: &[&str]) -> Output {
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("timeout");
    // `cargo test` puts target/<profile> on LD_LIBRARY_PATH, which beats the program's runpath;
    // and a FERRY_RANK from an enclosing `ferry run` would win over hydra.
    cmd.env_remove("LD_LIBRARY_PATH")
        .env_remove("FERRY_RANK")
        .env("FERRY_TRANSPORT", transport)
        .args(["-k", "5", "60", "mpiexec.hydra", "-launcher", "fork"])
        .args(hydra_args);
    cmd.output().expect("run timeout mpiexec.hydra")
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_c_program_runs_under_hydra_on_both_transports() {
    if hydra_missing() {
        return;
    }
    let exe = program("pmi_job");
    let exe = exe.to_str().expect("utf-8 path");
    for transport in ["shm", "tcp"] {
        let out = hydra(transport, &["-n", "4", exe]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(" No Errors"),
            "{transport}: {}",
            show(&out)
        );
        for rank in 0..4 {
            assert!(
                stdout.contains(&format!("rank {rank} of 4: appnum 0")),
                "{stdout}"
            );
        }
    }
}

#[test]
fn mpi_appnum_tells_the_commands_of_an_mpmd_line_apart() {
    if hydra_missing() {
        return;
    }
    let exe = program("pmi_job");
    let exe = exe.to_str().expect("utf-8 path");
    let out = hydra("shm", &["-n", "2", exe, ":", "-n", "2", exe]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    for (rank, appnum) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
        assert!(
            stdout.contains(&format!("rank {rank} of 4: appnum {appnum}")),
            "{stdout}"
        );
    }
}

#[test]
fn names_published_through_hydra_connect_the_halves_of_a_job() {
    if hydra_missing() {
        return;
    }
    // MPI_Publish_name/MPI_Lookup_name go through hydra's name service, and MPI_Comm_spawn
    // fails with a clear error (ports.c checks its class).
    let exe = program("ports");
    let out = hydra("shm", &["-n", "4", exe.to_str().expect("utf-8 path")]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" No Errors"),
        "{}",
        show(&out)
    );
}

#[test]
fn mpi_abort_ends_the_hydra_job_with_its_code() {
    if hydra_missing() {
        return;
    }
    let exe = program("pmi_job");
    let exe = exe.to_str().expect("utf-8 path");
    let out = hydra("shm", &["-n", "4", exe, "abort"]);
    assert_eq!(out.status.code(), Some(7), "{}", show(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("survived"),
        "{}",
        show(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MPI_Abort"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_rank_exiting_3_fails_the_hydra_job() {
    if hydra_missing() {
        return;
    }
    let exe = program("pmi_job");
    let exe = exe.to_str().expect("utf-8 path");
    for transport in ["shm", "tcp"] {
        let out = hydra(transport, &["-n", "4", exe, "exit3"]);
        // Hydra reports the first bad status it sees: 3, or that of a rank that lost rank 2
        // and aborted (1), or that hydra killed meanwhile (9). 124 and 137 would be
        // `timeout`'s: hydra itself must notice and end the job.
        let code = out.status.code();
        assert!(
            code.is_some_and(|c| c != 0 && c != 124 && c != 137),
            "{transport}: {}",
            show(&out)
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("survived"),
            "{}",
            show(&out)
        );
    }
}
