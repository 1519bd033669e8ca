//! Benchmarks that run inside a ferry job, and their result files.
//!
//! - [`pingpong`]: NetPIPE-like sweep — message sizes at powers of two and a few bytes either
//!   side, half round-trip time and the bandwidth it implies.
//! - [`stream`]: windowed streaming bandwidth like `osu_bw` — a window of nonblocking sends,
//!   then one acknowledgement.
//! - [`write_csv`] / [`plot`]: results as CSV and as a log-log PNG.
//! - [`bsp`]: the BSP cost-model probe (s, L, g) and its MPICH reference (`ferry bench bsp`).
//! - [`compare`]: one C benchmark source built against ferry's libmpi, MPICH and Open MPI and
//!   run side by side (`ferry bench compare`); [`peers`] installs the newest MPICH and Open MPI
//!   from their PyPI wheels for it, [`background`] puts busy-looping processes beside its jobs.
//! - [`record`]: what a results folder says about the run that made it (`machine.txt`).
//! - [`import`]: the multi-rail bulk-import benchmark (`ferry bench import`): P senders stream a
//!   file to P receivers that write and checksum it, bonding on and off (the seed's table 1).
//!
//! Rank 0 measures and reports; rank 1 answers; other ranks wait at the closing barrier.
//! The in-job benchmarks do no launching: the `ferry bench` command starts the job. [`compare`]
//! is the exception: it builds and launches other MPI implementations' jobs itself.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod background;
pub mod bsp;
pub mod compare;
pub mod import;
pub mod peers;
mod plot;
pub mod record;
pub use plot::{load_font, plot, tick_label, Axis, Series, Unit};

use ferry_core::{scope, wait_all, Error, ReduceOp, World};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// One measured message size.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Message size in bytes.
    pub bytes: usize,
    /// Repetitions per trial.
    pub reps: u32,
    /// Trials measured.
    pub trials: u32,
    /// Median over trials of the time per operation, in microseconds (half round trip for
    /// ping-pong, one message for streaming).
    pub usec: f64,
    /// Fastest trial, same unit.
    pub usec_min: f64,
    /// Bandwidth from the median, in MB/s (10^6 bytes per second).
    pub mbps: f64,
}

/// Message sizes from `min` to `max`: every power of two, and `perturbation` bytes either side
/// of it (NetPIPE's default perturbation is 3).
pub fn sizes(min: usize, max: usize, perturbation: usize) -> Vec<usize> {
    let mut out = vec![];
    let mut p = 1usize;
    while p <= max {
        for s in [p.saturating_sub(perturbation), p, p + perturbation] {
            if s >= min && s <= max && s > 0 {
                out.push(s);
            }
        }
        p *= 2;
    }
    if min == 0 {
        out.push(0);
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// How long one trial should take, so that timer resolution and noise stay small.
const TRIAL_SECONDS: f64 = 0.02;
const TRIALS: u32 = 5;

/// Repetitions so that a trial lasts about [`TRIAL_SECONDS`], from the last estimate.
fn reps_for(estimate_usec: f64) -> u32 {
    ((TRIAL_SECONDS * 1e6 / estimate_usec.max(0.05)) as u32).clamp(3, 200_000)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn summarize(bytes: usize, reps: u32, per_op: &mut [f64]) -> Sample {
    let usec = median(per_op);
    Sample {
        bytes,
        reps,
        trials: per_op.len() as u32,
        usec,
        usec_min: per_op[0],
        mbps: if usec > 0.0 { bytes as f64 / usec } else { 0.0 },
    }
}

/// Times `op` on ranks 0 and 1 for one message size: a timed warm-up run keeps first-touch costs
/// out of the trials and tells rank 0 how many repetitions fill one trial (rank 1 learns the
/// count from it); `per_rep` operations happen in each run of `op`.
fn measure(
    world: &World,
    bytes: usize,
    per_rep: f64,
    mut op: impl FnMut() -> Result<(), Error>,
) -> Result<Sample, Error> {
    let start = Instant::now();
    op()?;
    let mut reps = [reps_for(start.elapsed().as_secs_f64() * 1e6)];
    if world.rank() == 0 {
        world.send(&reps, 1, 1)?;
    } else {
        world.recv(&mut reps, 0, 1)?;
    }
    let reps = reps[0];
    let mut per_op = Vec::with_capacity(TRIALS as usize);
    for _ in 0..TRIALS {
        let start = Instant::now();
        for _ in 0..reps {
            op()?;
        }
        per_op.push(start.elapsed().as_secs_f64() * 1e6 / (reps as f64 * per_rep));
    }
    Ok(summarize(bytes, reps, &mut per_op))
}

/// Ping-pong between ranks 0 and 1 for every size; `report` sees each sample on rank 0 as it
/// is measured. Returns the samples on rank 0, nothing elsewhere.
pub fn pingpong(
    world: &World,
    sizes: &[usize],
    mut report: impl FnMut(&Sample),
) -> Result<Vec<Sample>, Error> {
    let me = world.rank();
    if world.size() < 2 {
        return Err(Error::Config("ping-pong needs at least 2 ranks".into()));
    }
    let max = sizes.iter().copied().max().unwrap_or(0);
    let mut buf = vec![0u8; max];
    let mut samples = vec![];
    for &bytes in sizes.iter().filter(|_| me < 2) {
        let msg = &mut buf[..bytes];
        // Two messages per round trip: the time per operation is half a round trip.
        let sample = measure(world, bytes, 2.0, || {
            if me == 0 {
                world.send(msg, 1, 0)?;
                world.recv(msg, 1, 0).map(drop)
            } else {
                world.recv(msg, 0, 0)?;
                world.send(msg, 0, 0)
            }
        })?;
        if me == 0 {
            report(&sample);
            samples.push(sample);
        }
    }
    world.barrier()?;
    Ok(samples)
}

/// Receive buffers in flight at most, in bytes: larger messages get a smaller window.
const WINDOW_BYTES: usize = 256 << 20;

/// Streaming bandwidth from rank 0 to rank 1: `window` messages in flight (fewer for messages
/// so large that the window would pass 256 MiB), then an acknowledgement, repeated. Returns the
/// samples on rank 0.
pub fn stream(
    world: &World,
    sizes: &[usize],
    window: usize,
    mut report: impl FnMut(&Sample),
) -> Result<Vec<Sample>, Error> {
    let me = world.rank();
    if world.size() < 2 {
        return Err(Error::Config(
            "streaming bandwidth needs at least 2 ranks".into(),
        ));
    }
    // Buffers grow on demand; those outside the current window are freed.
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); window.max(1)];
    let mut samples = vec![];
    for &bytes in sizes.iter().filter(|_| me < 2) {
        let in_flight = window
            .clamp(1, (WINDOW_BYTES / bytes.max(1)).max(1))
            .min(bufs.len());
        bufs[in_flight..].iter_mut().for_each(|b| *b = Vec::new());
        let one_window = || -> Result<(), Error> {
            scope(|s| -> Result<(), Error> {
                let mut requests = Vec::with_capacity(in_flight);
                for b in bufs.iter_mut().take(in_flight) {
                    if b.len() < bytes {
                        b.resize(bytes, 0);
                    }
                    requests.push(if me == 0 {
                        world.isend(s, &b[..bytes], 1, 0)?
                    } else {
                        world.irecv(s, &mut b[..bytes], 0, 0)?
                    });
                }
                wait_all(&mut requests).map(drop)
            })?;
            let mut ack = [0u8; 4];
            if me == 0 {
                world.recv(&mut ack, 1, 2).map(drop)
            } else {
                world.send(&ack, 0, 2)
            }
        };
        let sample = measure(world, bytes, in_flight as f64, one_window)?;
        if me == 0 {
            report(&sample);
            samples.push(sample);
        }
    }
    world.barrier()?;
    Ok(samples)
}

/// Latency of one collective operation at one size.
#[derive(Debug, Clone, Serialize)]
pub struct CollSample {
    /// barrier, bcast, allreduce or alltoall.
    pub op: &'static str,
    /// Bytes per rank (alltoall: per destination; barrier: 0).
    pub bytes: usize,
    /// Ranks in the job.
    pub ranks: usize,
    /// Median over trials of the slowest rank's time per operation, µs.
    pub usec: f64,
    /// Fastest trial, same unit.
    pub usec_min: f64,
}

/// Times `op` on every rank: rank 0 sizes the trials from a warm-up run and broadcasts the
/// repetitions; each trial starts after a barrier and counts the slowest rank's time.
fn measure_all(
    world: &World,
    mut op: impl FnMut() -> Result<(), Error>,
) -> Result<(f64, f64), Error> {
    world.barrier()?;
    let start = Instant::now();
    op()?;
    let mut reps = [reps_for(start.elapsed().as_secs_f64() * 1e6)];
    world.bcast(&mut reps, 0)?;
    let mut per_op = Vec::with_capacity(TRIALS as usize);
    for _ in 0..TRIALS {
        world.barrier()?;
        let start = Instant::now();
        for _ in 0..reps[0] {
            op()?;
        }
        let mine = [start.elapsed().as_secs_f64() * 1e6 / reps[0] as f64];
        let mut slowest = [0f64];
        world.allreduce(&mine, &mut slowest, ReduceOp::Max)?;
        per_op.push(slowest[0]);
    }
    let usec = median(&mut per_op);
    Ok((usec, per_op[0]))
}

/// Barrier, bcast, allreduce and alltoall latency for each size on all ranks of `world`.
/// Returns the samples on rank 0.
pub fn collectives(
    world: &World,
    sizes: &[usize],
    mut report: impl FnMut(&CollSample),
) -> Result<Vec<CollSample>, Error> {
    let n = world.size();
    let mut samples = vec![];
    let mut record = |op: &'static str, bytes: usize, (usec, usec_min): (f64, f64)| {
        let s = CollSample {
            op,
            bytes,
            ranks: n,
            usec,
            usec_min,
        };
        if world.rank() == 0 {
            report(&s);
            samples.push(s);
        }
    };
    record("barrier", 0, measure_all(world, || world.barrier())?);
    for &bytes in sizes {
        let mut buf = vec![0u8; bytes];
        record(
            "bcast",
            bytes,
            measure_all(world, || world.bcast(&mut buf, 0))?,
        );
        let words = (bytes / 8).max(1);
        let (input, mut out) = (vec![1u64; words], vec![0u64; words]);
        record(
            "allreduce",
            bytes,
            measure_all(world, || world.allreduce(&input, &mut out, ReduceOp::Sum))?,
        );
        let (send, mut recv) = (vec![0u8; bytes * n], vec![0u8; bytes * n]);
        record(
            "alltoall",
            bytes,
            measure_all(world, || world.alltoall(&send, &mut recv))?,
        );
    }
    Ok(samples)
}

/// Writes samples as CSV with a header line, preceded by `#` comment lines (command, date…).
pub fn write_csv(path: &Path, comments: &[String], samples: &[Sample]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for c in comments {
        writeln!(f, "# {c}")?;
    }
    writeln!(f, "bytes,reps,trials,usec,usec_min,mbps")?;
    for s in samples {
        writeln!(
            f,
            "{},{},{},{:.3},{:.3},{:.3}",
            s.bytes, s.reps, s.trials, s.usec, s.usec_min, s.mbps
        )?;
    }
    f.flush()
}

/// Reads a CSV written by [`write_csv`] (comment lines skipped).
pub fn read_csv(path: &Path) -> std::io::Result<Vec<Sample>> {
    let text = std::fs::read_to_string(path)?;
    let bad = |line: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: bad line {line:?}", path.display()),
        )
    };
    let mut out = vec![];
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("bytes"))
    {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 6 {
            return Err(bad(line));
        }
        let num = |i: usize| f[i].parse::<f64>().map_err(|_| bad(line));
        out.push(Sample {
            bytes: num(0)? as usize,
            reps: num(1)? as u32,
            trials: num(2)? as u32,
            usec: num(3)?,
            usec_min: num(4)?,
            mbps: num(5)?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_powers_of_two_with_perturbations() {
        assert_eq!(sizes(1, 16, 3), vec![1, 2, 4, 5, 7, 8, 11, 13, 16]);
        assert_eq!(sizes(0, 2, 0), vec![0, 1, 2]);
    }

    #[test]
    fn csv_round_trip() {
        let dir = std::env::temp_dir().join(format!("ferry-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.csv");
        let s = vec![summarize(8, 10, &mut [3.0, 1.0, 2.0])];
        write_csv(&path, &["cmd".into()], &s).unwrap();
        let back = read_csv(&path).unwrap();
        assert_eq!(
            (back[0].bytes, back[0].usec, back[0].usec_min),
            (8, 2.0, 1.0)
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
