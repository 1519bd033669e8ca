//! The launcher's MPIR interface when an MPI rank aborts: gdb, started on `ferry run`, stops at
//! `MPIR_Breakpoint` once with `MPIR_debug_state` 1 (the ranks spawned) and again with 2
//! (aborting), `MPIR_debug_abort_string` naming the rank and its code, as a parallel debugger
//! expects from MPICH's launcher. The ranks are `tests/c/mpir_abort.c`.
//!
//! Needs gdb, a C compiler, and `ferry` and `libmpi.so` in this test's target directory (`cargo
//! build --release -p ferry-cli -p ferry-mpi`); without gdb the test says so and passes.

mod common;

use common::{profile_dir, program};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn an_abort_sets_mpir_debug_state_and_says_why() {
    if !Command::new("gdb")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: gdb is not installed (scripts/setup.sh installs it)");
        return;
    }
    let exe = program("mpir_abort");
    let ferry = profile_dir().join("ferry");
    assert!(
        ferry.exists(),
        "{} is missing: run `cargo build --release -p ferry-cli`",
        ferry.display()
    );
    let script = profile_dir().join(format!("mpir-abort-{}.gdb", std::process::id()));
    std::fs::write(
        &script,
        "set breakpoint pending on\nbreak MPIR_Breakpoint\nrun\nset language c\n\
         printf \"first %d %d\\n\", *(int *)&MPIR_debug_state, *(int *)&MPIR_proctable_size\n\
         continue\n\
         printf \"then %d\\n\", *(int *)&MPIR_debug_state\n\
         printf \"why %s\\n\", *(char **)&MPIR_debug_abort_string\n\
         delete\ncontinue\n",
    )
    .expect("gdb script");
    let mut child = Command::new("gdb")
        .args(["-q", "-batch", "-x"])
        .arg(&script)
        .arg("--args")
        .arg(&ferry)
        .args(["run", "-n", "2", "--timeout", "50"])
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("MPIEXEC_TIMEOUT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gdb starts");
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let _ = std::fs::remove_file(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let show = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.lines().any(|l| l == "first 1 2"), "{show}");
    assert!(stdout.lines().any(|l| l == "then 2"), "{show}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("why ") && l.contains("rank 1") && l.contains("code 7")),
        "{show}"
    );
    assert!(
        stdout.contains("exited with code 07") || stdout.contains("exited with code 7"),
        "the job did not end with the rank's code 7\n{show}"
    );
}
