//! `make CC=mpicc` (and `CXX=mpicxx`), as MPI programs' Makefiles use the wrappers: make
//! exports `CC=mpicc` to the recipe, so a wrapper that ran `$CC` would run itself forever.
//! Builds a program through make's built-in rules with a time limit.
//!
//! Needs `make`, C and C++ compilers and `libmpi.so` in this test's target directory (`cargo
//! test --release -p ferry-mpi` builds it); skips with a printed reason without `make`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`, from this test executable (`target/<profile>/deps/make_wrapper-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

const HELLO: &str = "#include <mpi.h>\nint main(int argc, char **argv) {\n    \
                     MPI_Init(&argc, &argv);\n    MPI_Finalize();\n    return 0;\n}\n";

#[test]
fn make_with_cc_set_to_mpicc_builds_c_and_cxx_programs() {
    if Command::new("make").arg("--version").output().is_err() {
        println!("skipped: `make` is not installed");
        return;
    }
    let top = profile_dir();
    let lib = [top.clone(), top.join("deps")]
        .into_iter()
        .find(|d| d.join("libmpi.so").exists())
        .expect("libmpi.so: run `cargo build --release -p ferry-mpi`");
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("bin");
    let dir = top.join("mpi-make-test");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test dir");
    std::fs::write(dir.join("hello.c"), HELLO).expect("hello.c");
    std::fs::write(dir.join("hellocxx.cpp"), HELLO).expect("hellocxx.cpp");
    // make's built-in rules, with CC and CXX exported as the wrappers.
    std::fs::write(dir.join("Makefile"), "all: hello hellocxx\n").expect("Makefile");
    let out = Command::new("timeout")
        .arg("30")
        .arg("make")
        .arg(format!("CC={}", bin.join("mpicc").display()))
        .arg(format!("CXX={}", bin.join("mpicxx").display()))
        .env("FERRY_LIBDIR", &lib)
        .env_remove("FERRY_CC")
        .env_remove("FERRY_CXX")
        .current_dir(&dir)
        .output()
        .expect("run make");
    assert!(
        out.status.success(),
        "make CC=mpicc failed ({}; 124 is the time limit: a wrapper ran itself)\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.join("hello").exists() && dir.join("hellocxx").exists());
}
