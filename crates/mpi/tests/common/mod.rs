//! Helpers of the tests that run MPI C programs under a foreign process manager (each test
//! file uses some of them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// `target/<profile>`, from this test executable (`target/<profile>/deps/hydra-…`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// Where the freshest `libmpi.so` is: `cargo test` builds the cdylib into `deps/` without
/// copying it up to `target/<profile>/` (as `cargo build` does), so take the newer of the two.
pub fn libdir() -> PathBuf {
    let top = profile_dir();
    let deps = top.join("deps");
    let age = |d: &Path| {
        std::fs::metadata(d.join("libmpi.so"))
            .and_then(|m| m.modified())
            .ok()
    };
    match (age(&top), age(&deps)) {
        (Some(a), Some(b)) if a >= b => top,
        (_, Some(_)) => deps,
        (Some(_), None) => top,
        (None, None) => panic!(
            "libmpi.so is missing in {}: run `cargo test --release --workspace` or `cargo build --release -p ferry-mpi`",
            top.display()
        ),
    }
}

/// `tests/c/<name>.c` compiled once per test run, against the newest `libmpi.so` of this build.
pub fn program(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let top = profile_dir();
    let out = top.join("mpi-c-tests");
    let exe = out.join(name);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if built.iter().any(|b| b == name) {
        return exe;
    }
    let lib = libdir();
    std::fs::create_dir_all(&out).expect("output dir");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(here.join("bin/mpicc"))
        .env("FERRY_LIBDIR", lib)
        .args(["-std=c99", "-D_DEFAULT_SOURCE", "-O2", "-Wall", "-Werror"])
        .arg(here.join("tests/c").join(format!("{name}.c")))
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run mpicc");
    assert!(status.success(), "mpicc failed on {name}.c");
    built.push(name.to_string());
    exe
}
