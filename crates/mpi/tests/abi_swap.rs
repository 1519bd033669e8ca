//! Binary compatibility through the MPI 5.0 standard ABI, both ways, on a few of ferry's own
//! C test programs (wildcards, MPI_PROC_NULL, error classes, attributes, split types: the
//! values that differed before ferry took the standard's):
//!
//! * built once with MPICH 5.0.2's `mpicc_abi`, run by `ferry run` on ferry's library
//!   (found as `libmpi_abi.so.1` through `LD_LIBRARY_PATH`);
//! * built with ferry's `mpicc`, run by MPICH's `mpiexec` on MPICH's `libmpi_abi.so.1`.
//!
//! MPICH comes from PyPI (`pip install mpich==5.0.2` into a venv under
//! `target/abi-reference`, kept between runs), or from `FERRY_MPICH_ABI_PREFIX` (a prefix with
//! `bin/mpicc_abi`, `bin/mpiexec` and `lib/libmpi_abi.so.1`). Without network the test prints
//! why and passes. `python3 conformance/run --mpicc <mpich>/bin/mpicc_abi --mpiexec "env
//! LD_LIBRARY_PATH=<ferry lib> crates/mpi/bin/mpiexec"` runs MPICH's suite the first way.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The programs of tests/c run both ways, with their process counts.
const PROGRAMS: &[(&str, u32)] = &[
    ("procnull", 2),
    ("probe", 2),
    ("errors", 2),
    ("attrs", 2),
    ("splittype", 4),
];

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest().join("../../target"))
}

/// The directory of this build's libmpi.so (`cargo test` may leave the newest in `deps/`).
fn ferry_libdir() -> PathBuf {
    let profile = target_dir().join("release");
    [profile.join("deps"), profile.clone()]
        .into_iter()
        .filter(|d| d.join("libmpi.so").exists())
        .max_by_key(|d| {
            std::fs::metadata(d.join("libmpi.so"))
                .and_then(|m| m.modified())
                .ok()
        })
        .unwrap_or(profile)
}

/// MPICH 5.0.2's prefix, or why there is none.
fn mpich_prefix() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("FERRY_MPICH_ABI_PREFIX") {
        return Ok(PathBuf::from(p));
    }
    let venv = target_dir().join("abi-reference/venv");
    if venv.join("bin/mpicc_abi").exists() {
        return Ok(venv);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .map_err(|e| format!("run python3 -m venv: {e}"))?;
    if !made.status.success() {
        return Err(format!(
            "python3 -m venv failed: {}",
            String::from_utf8_lossy(&made.stderr).trim()
        ));
    }
    let pip = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "mpich==5.0.2"])
        .output()
        .map_err(|e| format!("run pip: {e}"))?;
    if !pip.status.success() {
        return Err(format!(
            "pip install mpich==5.0.2 failed (offline?): {}",
            String::from_utf8_lossy(&pip.stderr).trim()
        ));
    }
    Ok(venv)
}

fn work_dir() -> PathBuf {
    let dir = target_dir().join(format!("abi-swap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the build directory");
    dir
}

fn compile(compiler: &Path, env: &[(&str, &Path)], name: &str, exe: &Path) -> Result<(), String> {
    let out = Command::new(compiler)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .args(["-std=c99", "-D_DEFAULT_SOURCE", "-O1"])
        .arg(manifest().join("tests/c").join(format!("{name}.c")))
        .arg("-o")
        .arg(exe)
        .output()
        .map_err(|e| format!("run {}: {e}", compiler.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {name}.c failed:\n{}",
            compiler.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// What the dynamic loader prints for a binary that asks for symbol versions the library does
/// not define: a binary linked against a library whose `MPI_*` symbols carry a version node
/// (`MPI_Send@@MPI_5.0`) prints it for every process on MPICH's `libmpi_abi.so.1`, whose
/// symbols are unversioned (on a library with no version section at all, ld.so stops with an
/// assertion instead). So ferry's exports stay unversioned, as the reference library's are.
const LOADER_VERSION_WARNING: &str = "no version information available";

/// Runs `program args` with `LD_LIBRARY_PATH` set, under a time limit; passes when it exits
/// 0, prints " No Errors" and the loader did not complain about symbol versions.
fn passes(
    program: &Path,
    args: &[&std::ffi::OsStr],
    libdir: &Path,
    what: &str,
) -> Result<(), String> {
    let out = Command::new("timeout")
        .arg("120")
        .arg(program)
        .args(args)
        .env("LD_LIBRARY_PATH", libdir)
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success()
        && stdout.contains(" No Errors")
        && !stderr.contains(LOADER_VERSION_WARNING)
    {
        Ok(())
    } else {
        Err(format!(
            "{what}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        ))
    }
}

#[test]
fn programs_built_for_the_standard_abi_run_on_either_library() {
    let mpich = match mpich_prefix() {
        Ok(p) => p,
        Err(why) => {
            println!("SKIPPED: no MPICH 5.0.2: {why}");
            return;
        }
    };
    let ferry_lib = ferry_libdir();
    let ferry = target_dir().join("release/ferry");
    assert!(
        ferry.exists() && ferry_lib.join("libmpi.so").exists(),
        "build ferry and its library first: cargo build --release -p ferry-cli -p ferry-mpi"
    );
    let mpich_lib = mpich.join("lib");
    let dir = work_dir();
    let mut failures = Vec::new();
    for &(name, n) in PROGRAMS {
        let n = n.to_string();
        // MPICH-built, on ferry's library.
        let exe = dir.join(format!("{name}.mpich"));
        match compile(&mpich.join("bin/mpicc_abi"), &[], name, &exe) {
            Ok(()) => {
                let args = ["run".as_ref(), "-n".as_ref(), n.as_ref(), exe.as_os_str()];
                let what = format!("{name} (mpicc_abi) under ferry run");
                if let Err(e) = passes(&ferry, &args, &ferry_lib, &what) {
                    failures.push(e);
                }
            }
            Err(e) => failures.push(e),
        }
        // ferry-built, on MPICH's library.
        let exe = dir.join(format!("{name}.ferry"));
        let mpicc = manifest().join("bin/mpicc");
        match compile(&mpicc, &[("FERRY_LIBDIR", &ferry_lib)], name, &exe) {
            Ok(()) => {
                let args = ["-n".as_ref(), n.as_ref(), exe.as_os_str()];
                let what = format!("{name} (ferry mpicc) under MPICH");
                if let Err(e) = passes(&mpich.join("bin/mpiexec"), &args, &mpich_lib, &what) {
                    failures.push(e);
                }
            }
            Err(e) => failures.push(e),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        2 * PROGRAMS.len(),
        failures.join("\n\n")
    );
}
