//! Helpers shared by the multi-process tests of `ferry` (each test file uses some of them).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Output;

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

/// A finished job's status and output, for assertion messages.
pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
