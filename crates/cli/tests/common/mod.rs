//! Helpers shared by the multi-process tests of `ferry` (each test file uses some of them).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

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
