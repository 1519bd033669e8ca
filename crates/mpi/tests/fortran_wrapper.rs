//! `mpifort` (`fortran/bin/mpifort`, also `mpif77` and `mpif90`) as MPICH users expect it:
//! Fortran 77 code that passes an INTEGER here and a DOUBLE PRECISION array there to one MPI
//! routine compiles unchanged with gfortran 10 and later (the wrapper adds
//! `-fallow-argument-mismatch -fallow-invalid-boz` for them, as MPICH's does), while `use mpi`
//! and `use mpi_f08` keep their argument checks; and the flags go only to gfortran 10 and
//! later, told from the compiler the wrapper runs.
//!
//! Needs gfortran, `ferry` and `libmpi.so` in this test's target directory (`cargo build
//! --release -p ferry-cli -p ferry-mpi`); without gfortran the tests that compile say so and
//! pass. The first compile builds the Fortran bindings (about a minute).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>`, from this test executable (`target/<profile>/deps/fortran_wrapper-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// The source tree's `fortran/bin/`.
fn wrapper_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fortran/bin")
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = profile_dir().join(format!("fortran-wrapper-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn has_gfortran() -> bool {
    let found = Command::new("gfortran").arg("--version").output().is_ok();
    if !found {
        eprintln!("skipped: gfortran is not installed");
    }
    found
}

fn show(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs the source tree's `wrapper` (mpifort, mpif77, mpif90) with `args` in `dir`, with
/// gfortran and this build's libmpi.so.
fn compile(wrapper: &str, dir: &Path, args: &[&str]) -> Output {
    let lib = [profile_dir(), profile_dir().join("deps")]
        .into_iter()
        .find(|d| d.join("libmpi.so").exists())
        .expect("libmpi.so: run `cargo build --release -p ferry-mpi`");
    Command::new(wrapper_dir().join(wrapper))
        .args(args)
        .env("FERRY_LIBDIR", lib)
        .env_remove("FERRY_FC")
        .current_dir(dir)
        .output()
        .expect("run the wrapper")
}

/// One external routine (MPI_SEND, MPI_RECV) called with an INTEGER scalar and a DOUBLE
/// PRECISION array in one program unit, and a BOZ constant assigned, as Fortran 77 codes do.
const MIXED_F77: &str = "\
C     Mixed actual arguments to one MPI routine, as in older codes.
      program mixed
      implicit none
      include 'mpif.h'
      integer ierr, rank, nranks, errs, n, i, mask
      integer status(MPI_STATUS_SIZE)
      double precision x(4)
      errs = 0
      mask = Z'0F'
      call MPI_INIT(ierr)
      call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
      call MPI_COMM_SIZE(MPI_COMM_WORLD, nranks, ierr)
      if (rank .eq. 0 .and. nranks .gt. 1) then
         n = 4
         do i = 1, 4
            x(i) = 0.5d0 * i
         end do
         call MPI_SEND(n, 1, MPI_INTEGER, 1, 1, MPI_COMM_WORLD, ierr)
         call MPI_SEND(x, n, MPI_DOUBLE_PRECISION, 1, 2,
     &        MPI_COMM_WORLD, ierr)
      else if (rank .eq. 1) then
         call MPI_RECV(n, 1, MPI_INTEGER, 0, 1, MPI_COMM_WORLD,
     &        status, ierr)
         call MPI_RECV(x, n, MPI_DOUBLE_PRECISION, 0, 2,
     &        MPI_COMM_WORLD, status, ierr)
         if (n .ne. 4) errs = errs + 1
         do i = 1, 4
            if (x(i) .ne. 0.5d0 * i) errs = errs + 1
         end do
      end if
      if (mask .ne. 15) errs = errs + 1
      call MPI_ALLREDUCE(MPI_IN_PLACE, errs, 1, MPI_INTEGER, MPI_SUM,
     &     MPI_COMM_WORLD, ierr)
      if (rank .eq. 0 .and. errs .eq. 0) print *, 'No Errors'
      if (rank .eq. 0 .and. errs .ne. 0) print *, 'Found ', errs
      call MPI_FINALIZE(ierr)
      end
";

#[test]
fn fortran_77_code_with_mixed_argument_types_compiles_unchanged_and_runs() {
    if !has_gfortran() {
        return;
    }
    let dir = scratch("mixed");
    std::fs::write(dir.join("mixed.f"), MIXED_F77).expect("mixed.f");
    for wrapper in ["mpif77", "mpifort"] {
        let out = compile(wrapper, &dir, &["mixed.f", "-o", "mixed"]);
        assert!(out.status.success(), "{wrapper} mixed.f: {}", show(&out));
    }
    let ferry = profile_dir().join("ferry");
    assert!(
        ferry.exists(),
        "{} is missing: run `cargo build --release -p ferry-cli`",
        ferry.display()
    );
    let out = Command::new(ferry)
        .env_remove("LD_LIBRARY_PATH")
        .args(["run", "-n", "2", "--timeout", "30"])
        .arg(dir.join("mixed"))
        .output()
        .expect("ferry run");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("No Errors"),
        "mixed on 2 ranks: {}",
        show(&out)
    );
}

#[test]
fn use_mpi_and_mpi_f08_keep_their_argument_checks() {
    if !has_gfortran() {
        return;
    }
    let dir = scratch("checked");
    for module in ["mpi", "mpi_f08"] {
        let comm = if module == "mpi" {
            "integer"
        } else {
            "type(MPI_Comm)"
        };
        // A REAL count: no interface of MPI_Send takes one.
        let source = format!(
            "program checked\n  use {module}\n  implicit none\n  {comm} :: comm\n  \
             integer :: ierr\n  real :: count\n  double precision :: x(4)\n  \
             comm = MPI_COMM_WORLD\n  count = 4.0\n  \
             call MPI_Send(x, count, MPI_DOUBLE_PRECISION, 0, 0, comm, ierr)\n\
             end program checked\n"
        );
        let file = format!("checked_{module}.f90");
        std::fs::write(dir.join(&file), source).expect("source");
        let out = compile("mpif90", &dir, &["-c", &file]);
        // gfortran's own words: a mismatch of `count`, or no specific MPI_Send for a REAL.
        let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
        let refused = err.lines().any(|l| {
            l.starts_with("error:")
                && (l.contains("mismatch in argument") || l.contains("no specific subroutine"))
        });
        assert!(
            !out.status.success() && refused,
            "use {module}: a REAL count to MPI_Send was not refused: {}",
            show(&out)
        );
    }
}

/// Writes an executable `name` in `dir` that answers `--version` and `-dumpversion` as a
/// compiler would.
fn fake_compiler(dir: &Path, name: &str, version_line: &str, dump: &str) -> PathBuf {
    let path = dir.join(name);
    let script = format!(
        "#!/bin/sh\ncase \"$*\" in\n  *--version*) echo '{version_line}' ;;\n  \
         *-dumpversion*) echo '{dump}' ;;\n  *) exit 1 ;;\nesac\n"
    );
    std::fs::write(&path, script).expect("fake compiler");
    let status = Command::new("chmod")
        .arg("755")
        .arg(&path)
        .status()
        .expect("chmod");
    assert!(status.success());
    path
}

#[test]
fn the_legacy_flags_go_to_gfortran_10_and_later_only() {
    // An installed layout (<prefix>/bin, include, lib), so the wrapper builds nothing.
    let prefix = scratch("prefix");
    for sub in ["bin", "include", "lib"] {
        std::fs::create_dir_all(prefix.join(sub)).expect("prefix");
    }
    std::fs::copy(wrapper_dir().join("mpifort"), prefix.join("bin/mpifort")).expect("copy");
    std::fs::write(prefix.join("include/mpif.h"), "").expect("mpif.h");
    std::fs::write(prefix.join("lib/libmpifort.so"), "").expect("libmpifort.so");
    let compilers = prefix.join("compilers");
    std::fs::create_dir_all(&compilers).expect("compilers");
    let cases = [
        ("GNU Fortran (Debian 12.2.0-14) 12.2.0", "12", true),
        (
            "GNU Fortran (GCC) 10.2.1 20210130 (Red Hat 10.2.1-11)",
            "10",
            true,
        ),
        ("GNU Fortran (GCC) 9.4.0", "9.4.0", false),
        (
            "GNU Fortran (GCC) 4.8.5 20150623 (Red Hat 4.8.5-44)",
            "4.8.5",
            false,
        ),
        ("ifx (IFX) 2024.0.0 20231017", "2024.0.0", false),
        ("flang version 18.1.8", "18.1.8", false),
    ];
    for (i, (version_line, dump, wanted)) in cases.into_iter().enumerate() {
        let fc = fake_compiler(&compilers, &format!("fc{i}"), version_line, dump);
        // FERRY_FC with a flag of its own, as the wrapper allows.
        let fc = format!("{} -m64", fc.display());
        for args in [&["-show", "prog.f", "-o", "prog"][..], &["-compile-info"]] {
            let out = Command::new(prefix.join("bin/mpifort"))
                .args(args)
                .env("FERRY_FC", &fc)
                .output()
                .expect("mpifort");
            assert!(out.status.success(), "{version_line}: {}", show(&out));
            let line = String::from_utf8_lossy(&out.stdout);
            let has = |flag: &str| line.split_whitespace().any(|w| w == flag);
            assert_eq!(
                (has("-fallow-argument-mismatch"), has("-fallow-invalid-boz")),
                (wanted, wanted),
                "{version_line} {args:?}: {line}"
            );
            assert!(line.starts_with(&fc), "{line}");
        }
    }
}
