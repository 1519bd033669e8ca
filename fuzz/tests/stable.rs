//! The stable-toolchain fuzz driver, which CI runs: for each target of [`ferry_fuzz::TARGETS`],
//! every checked-in seed (`fuzz/seeds/<target>/`), then mutated seeds and random bytes until
//! `FERRY_FUZZ_SECS` seconds (default 10) have passed. No coverage guidance (that needs
//! libFuzzer and a nightly compiler, which a clean CI machine does not have): the seeds carry
//! the structure, the mutations the surprises. A failing input is written to
//! `target/fuzz-failures/<target>-<seed>` and the test fails naming it; replay it with
//! `cargo +nightly fuzz run <target> --features libfuzzer <file>` or by adding it to the seeds.
//!
//! `FERRY_FUZZ_SEED` fixes the random seed (each run prints the one it used);
//! `FERRY_FUZZ_SECS=0` runs the seeds only.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// splitmix64: small, fast and good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes that mean something to ferry's parsers: separators, line ends, field edges.
const INTERESTING: &[u8] = b"\0\n\r ;=:,.-+09afAF\x7f\x80\xff";

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect()
}

/// One to four random edits of `base`, sometimes spliced with `other`.
fn mutate(rng: &mut Rng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut data = base.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(8) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = rng.next() as u8;
            }
            3 => {
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                data.splice(at..at, bytes);
            }
            4 if at < data.len() => {
                let end = at + 1 + rng.below((data.len() - at).min(16));
                data.drain(at..end);
            }
            5 if at < data.len() => {
                // Repeat a piece: lengths and counts that overrun.
                let end = (at + 1 + rng.below(16)).min(data.len());
                let piece = data[at..end].to_vec();
                data.splice(at..at, piece);
            }
            6 if !other.is_empty() => {
                let from = rng.below(other.len());
                let end = (from + 1 + rng.below(32)).min(other.len());
                data.splice(at..at, other[from..end].iter().copied());
            }
            _ if data.len() >= 8 => {
                // An extreme little-endian number where one may be.
                let i = rng.below(data.len() - 7);
                let v = [0u64, 1, u32::MAX as u64, u64::MAX, 1 << 31, 1 << 63][rng.below(6)];
                data[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => data.push(INTERESTING[rng.below(INTERESTING.len())]),
        }
    }
    data
}

fn run_target(name: &str) {
    let property = ferry_fuzz::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .expect("a listed target");
    let secs: u64 = std::env::var("FERRY_FUZZ_SECS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(10);
    let seed: u64 = std::env::var("FERRY_FUZZ_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let mut rng = Rng(seed);
    let seeds = seeds(name);
    assert!(!seeds.is_empty(), "fuzz/seeds/{name}/ holds no seed");
    let check = |data: &[u8]| {
        if std::panic::catch_unwind(|| property(data)).is_err() {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-failures");
            let file = dir.join(format!("{name}-{seed}"));
            let saved = std::fs::create_dir_all(&dir)
                .and_then(|_| std::fs::write(&file, data))
                .map_or_else(
                    |e| format!("not saved: {e}"),
                    |_| file.display().to_string(),
                );
            panic!(
                "fuzz target {name} failed (FERRY_FUZZ_SEED={seed}) on {} bytes {:02x?}; input: {saved}",
                data.len(),
                &data[..data.len().min(256)]
            );
        }
    };
    let start = Instant::now();
    for s in &seeds {
        check(s);
    }
    let deadline = start + Duration::from_secs(secs);
    let mut executions = seeds.len() as u64;
    while Instant::now() < deadline {
        // The clock is read once per batch, not per input.
        for _ in 0..256 {
            let data = if rng.below(16) == 0 {
                let n = rng.below(512);
                (0..n).map(|_| rng.next() as u8).collect()
            } else {
                let base = &seeds[rng.below(seeds.len())];
                let other = &seeds[rng.below(seeds.len())];
                mutate(&mut rng, base, other)
            };
            check(&data);
            executions += 1;
        }
    }
    println!(
        "fuzz {name}: {executions} executions ({} seeds) in {:.1} s, FERRY_FUZZ_SEED={seed}",
        seeds.len(),
        start.elapsed().as_secs_f64()
    );
}

macro_rules! targets {
    ($($name:ident),*) => {
        $(#[test]
        fn $name() {
            run_target(stringify!($name));
        })*

        /// Every target of the library has its test here.
        #[test]
        fn every_target_is_driven() {
            let driven = [$(stringify!($name)),*];
            for (name, _) in ferry_fuzz::TARGETS {
                assert!(driven.contains(name), "target {name} has no test in stable.rs");
            }
        }
    };
}

targets!(frame, handshake, node, pmi, procman, relay, rma, grid, bsp, bsp_apply, compress);
