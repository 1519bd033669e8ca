//! `make CC=bspcc`, the way BSPlib programs' Makefiles use the wrapper: make exports `CC=bspcc`
//! to the recipe, so a wrapper that ran `$CC` would run itself forever. Builds the
//! standard-programs' SPMD test through make's built-in rule with a time limit.
//!
//! Needs `make`, a C compiler and `libbsp.so` in this test's target directory (`cargo test
//! --release -p ferry-bsplib` builds it); skips with a printed reason without `make`.

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

#[test]
fn make_with_cc_set_to_bspcc_builds_a_program() {
    if Command::new("make").arg("--version").output().is_err() {
        println!("skipped: `make` is not installed");
        return;
    }
    let top = profile_dir();
    let lib = [top.clone(), top.join("deps")]
        .into_iter()
        .find(|d| d.join("libbsp.so").exists())
        .expect("libbsp.so: run `cargo build --release -p ferry-bsplib`");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = top.join("bsplib-make-test");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test dir");
    std::fs::copy(here.join("tests/c/spmd.c"), dir.join("spmd.c")).expect("copy spmd.c");
    // make's built-in rule: $(CC) $(CFLAGS) ... spmd.c -o spmd, with CC exported as bspcc.
    std::fs::write(
        dir.join("Makefile"),
        "CFLAGS = -std=c99 -O2\nspmd: spmd.c\n",
    )
    .expect("Makefile");
    let out = Command::new("timeout")
        .arg("30")
        .arg("make")
        .arg(format!("CC={}", here.join("bspcc").display()))
        .env("BSP_LIBDIR", &lib)
        .env_remove("FERRY_CC")
        .current_dir(&dir)
        .output()
        .expect("run make");
    assert!(
        out.status.success(),
        "make CC=bspcc failed ({}; 124 is the time limit: the wrapper ran itself)\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.join("spmd").exists(), "make built no spmd");
}
