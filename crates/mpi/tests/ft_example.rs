//! The fault-tolerant Monte Carlo example (`examples/c/ft_pi.c` at the repository's root):
//! compiled with `bin/mpicc`, run with `ferry run --fault-tolerant` while one rank kills
//! itself, it must finish with every sample counted once (the same hits as a run where no rank
//! dies: each batch's samples depend only on the batch) and say how many ranks survived;
//! without `--fault-tolerant` the job must end with the launcher naming the dead rank.
//!
//! Needs a C compiler and `ferry` and `libmpi.so` in this test's target directory (`cargo
//! build --release -p ferry-cli -p ferry-mpi`). Jobs run one at a time (two cores).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Small enough for a loaded machine, with enough rounds that the victim dies mid-run.
const WORK: [&str; 4] = ["--batches", "60", "--samples", "4000"];
const SAMPLES: u64 = 60 * 4000;

/// `examples/c/ft_pi.c`, compiled once per test run against this build's `libmpi.so`.
fn example() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let top = common::profile_dir();
        let lib = common::libdir();
        let out = top.join("mpi-c-tests");
        std::fs::create_dir_all(&out).expect("output dir");
        let exe = out.join("ft_pi");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new(here.join("bin/mpicc"))
            .env("FERRY_LIBDIR", lib)
            .args([
                "-std=c99",
                "-D_DEFAULT_SOURCE",
                "-O2",
                "-Wall",
                "-Wextra",
                "-Werror",
            ])
            .arg(here.join("../../examples/c/ft_pi.c"))
            .arg("-o")
            .arg(&exe)
            .status()
            .expect("run mpicc");
        assert!(status.success(), "mpicc failed on examples/c/ft_pi.c");
        exe
    })
}

/// `ferry run [--fault-tolerant] -n <n> ft_pi <args>`, ended by the launcher after 60 s.
fn run(n: u32, fault_tolerant: bool, args: &[&str], env: &[(&str, &str)]) -> Output {
    let exe = example();
    let ferry = common::profile_dir().join("ferry");
    assert!(
        ferry.exists(),
        "{} is missing: run `cargo build --release -p ferry-cli`",
        ferry.display()
    );
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(ferry);
    // `cargo test` puts target/<profile> on LD_LIBRARY_PATH, which beats the program's runpath.
    cmd.env_remove("LD_LIBRARY_PATH").envs(env.iter().copied());
    cmd.args(["run", "-n", &n.to_string(), "--timeout", "60"]);
    if fault_tolerant {
        cmd.arg("--fault-tolerant");
    }
    cmd.arg(exe).args(args).output().expect("ferry run")
}

/// What the example's last line says.
#[derive(Debug, PartialEq)]
struct Estimate {
    pi: f64,
    samples: u64,
    hits: u64,
    survivors: u32,
    ranks: u32,
}

/// Parses `ft_pi: pi ~ P from S samples (H hits, ...); A of B ranks survived`.
fn estimate(out: &Output) -> Estimate {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("ft_pi: pi ~ "))
        .unwrap_or_else(|| panic!("no estimate in the output:\n{}", describe(out)));
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || "();,".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    // The word `distance` places from `word` (negative: before it).
    let near = |word: &str, distance: isize| -> &str {
        words
            .iter()
            .position(|w| *w == word)
            .and_then(|i| i.checked_add_signed(distance))
            .and_then(|i| words.get(i).copied())
            .unwrap_or_else(|| panic!("no '{word}' in: {line}"))
    };
    let number = |text: &str| -> u64 { text.parse().unwrap_or_else(|_| panic!("{line}")) };
    Estimate {
        pi: near("~", 1).parse().unwrap_or_else(|_| panic!("{line}")),
        samples: number(near("from", 1)),
        hits: number(near("hits", -1)),
        survivors: number(near("ranks", -3)) as u32,
        ranks: number(near("ranks", -1)) as u32,
    }
}

fn describe(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A job where every rank lives, for the number of hits every other run must reproduce.
fn reference() -> &'static Estimate {
    static REFERENCE: OnceLock<Estimate> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let out = run(4, true, &WORK, &[]);
        assert!(out.status.success(), "{}", describe(&out));
        estimate(&out)
    })
}

/// Runs the example with `victim` dying after `after` rounds: the job succeeds, the survivors
/// count every sample once, and the launcher reports the victim's death.
#[track_caller]
fn survives(n: u32, victim: u32, after: u32, env: &[(&str, &str)]) {
    let (victim_arg, after_arg) = (victim.to_string(), after.to_string());
    let mut args = WORK.to_vec();
    args.extend(["--kill", &victim_arg, "--after", &after_arg]);
    let out = run(n, true, &args, env);
    let what = format!("{n} ranks, rank {victim} dying after {after} rounds, {env:?}");
    assert!(out.status.success(), "{what}:\n{}", describe(&out));
    let got = estimate(&out);
    assert_eq!(
        (got.samples, got.hits, got.survivors, got.ranks),
        (SAMPLES, reference().hits, n - 1, n),
        "{what}:\n{}",
        describe(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("ft_pi: {} of {n} ranks left", n - 1)),
        "{what}: no word of the shrink\n{}",
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("rank {victim} ")) && stderr.contains("SIGKILL"),
        "{what}: the launcher does not name the dead rank\n{}",
        describe(&out)
    );
}

#[test]
fn every_rank_alive_gives_all_samples_and_a_fair_estimate() {
    let all = reference();
    assert_eq!((all.samples, all.survivors, all.ranks), (SAMPLES, 4, 4));
    // 240000 samples: the standard deviation of the estimate is about 0.0034.
    assert!((all.pi - std::f64::consts::PI).abs() < 0.03, "{all:?}");
    // Without --fault-tolerant, and on other sizes, the same batches give the same hits.
    for (n, fault_tolerant) in [(4, false), (1, false), (3, true)] {
        let out = run(n, fault_tolerant, &WORK, &[]);
        assert!(out.status.success(), "{}", describe(&out));
        assert_eq!(
            estimate(&out).hits,
            all.hits,
            "{n} ranks\n{}",
            describe(&out)
        );
    }
}

#[test]
fn a_dead_ranks_batches_go_to_the_survivors() {
    survives(4, 2, 3, &[]);
    // The rank that would print (rank 0), before any round; the last rank over TCP.
    survives(3, 0, 0, &[]);
    survives(4, 3, 5, &[("FERRY_TRANSPORT", "tcp")]);
    // Two ranks: the survivor finishes alone.
    survives(2, 1, 2, &[]);
}

#[test]
fn without_fault_tolerance_the_launcher_names_the_dead_rank() {
    let out = run(
        3,
        false,
        &[&WORK[..], &["--kill", "1", "--after", "2"]].concat(),
        &[],
    );
    assert!(
        !out.status.success(),
        "the job succeeded\n{}",
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rank 1 ") && stderr.contains("SIGKILL"),
        "the launcher does not name rank 1\n{}",
        describe(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("ranks survived"), "{}", describe(&out));
}

#[test]
fn bad_options_are_named() {
    for (args, named) in [
        (&["--kill", "7"][..], "--kill 7"),
        (&["--batches", "x"][..], "--batches"),
        (&["--after"][..], "--after"),
        (&["--speed", "3"][..], "--speed"),
    ] {
        let out = run(2, true, args, &[]);
        assert!(
            !out.status.success(),
            "{args:?} succeeded\n{}",
            describe(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(named),
            "{args:?}: {named} not named\n{}",
            describe(&out)
        );
    }
}
