//! Measuring a job's matrix with ferry-core: ping-pong for latency, timed large transfers for
//! bandwidth, one ordered pair at a time while the other ranks wait at a barrier, so
//! measurements do not compete for the memory bus or the network.
//!
//! This is the crate's only I/O (messages and the clock); the forecasters never see it.

use crate::matrix::Sample;
use ferry_core::{Comm, Error};
use std::time::Instant;

const TAG_PING: i32 = 0x7e1;
const TAG_DATA: i32 = 0x7e2;
const TAG_ACK: i32 = 0x7e3;

/// What one measurement of the matrix does.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// Bytes of the latency ping-pong (each way).
    pub small: usize,
    /// Round trips per pair; the latency is half the median.
    pub pingpongs: usize,
    /// Bytes of one bandwidth transfer.
    pub large: usize,
    /// Timed transfers per pair (one more is sent first, untimed); the median counts.
    pub transfers: usize,
}

impl Default for Probe {
    /// 8 B ping-pong ×20, 1 MiB transfers ×4.
    fn default() -> Probe {
        Probe {
            small: 8,
            pingpongs: 20,
            large: 1 << 20,
            transfers: 4,
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Measures every ordered pair of `comm` once. Collective: every rank calls it with the same
/// `probe`. Rank 0 gets the [`Sample`]; the others get `None`.
///
/// Pair `(i, j)` is timed by `i`: latency = half the median round trip of `small` bytes;
/// bandwidth = `large` / (median time to send `large` bytes and get a small acknowledgement,
/// minus one small round trip), or `large` / that whole time when the subtraction would remove
/// more than half of it (noise on a fast link).
pub fn measure(comm: &Comm, probe: &Probe) -> Result<Option<Sample>, Error> {
    let (me, n) = (comm.rank(), comm.size());
    let small = vec![0u8; probe.small];
    let mut small_in = vec![0u8; probe.small];
    let large = vec![0u8; probe.large];
    let mut large_in = vec![0u8; probe.large];
    let ack = [0u8; 1];
    let mut ack_in = [0u8; 1];
    // My row: latency to each rank, then bandwidth to each rank.
    let mut row = vec![f64::NAN; 2 * n];
    for src in 0..n {
        for dst in 0..n {
            if src == dst {
                continue;
            }
            if me == src {
                let mut rtts = Vec::with_capacity(probe.pingpongs);
                for k in 0..=probe.pingpongs {
                    let t = Instant::now();
                    comm.send(&small, dst, TAG_PING)?;
                    comm.recv(&mut small_in, dst, TAG_PING)?;
                    if k > 0 {
                        rtts.push(t.elapsed().as_secs_f64());
                    }
                }
                let rtt = median(&mut rtts);
                let mut times = Vec::with_capacity(probe.transfers);
                for k in 0..=probe.transfers {
                    let t = Instant::now();
                    comm.send(&large, dst, TAG_DATA)?;
                    comm.recv(&mut ack_in, dst, TAG_ACK)?;
                    if k > 0 {
                        times.push(t.elapsed().as_secs_f64());
                    }
                }
                let time = median(&mut times);
                let transfer = if time - rtt > time / 2.0 {
                    time - rtt
                } else {
                    time
                };
                row[dst] = rtt / 2.0;
                row[n + dst] = probe.large as f64 / transfer;
            } else if me == dst {
                for _ in 0..=probe.pingpongs {
                    comm.recv(&mut small_in, src, TAG_PING)?;
                    comm.send(&small, src, TAG_PING)?;
                }
                for _ in 0..=probe.transfers {
                    comm.recv(&mut large_in, src, TAG_DATA)?;
                    comm.send(&ack, src, TAG_ACK)?;
                }
            }
            // Everyone else idles here, and the next pair starts on a quiet machine.
            comm.barrier()?;
        }
    }
    let mut rows = vec![0.0f64; 2 * n * n];
    comm.gather(&row, &mut rows, 0)?;
    if me != 0 {
        return Ok(None);
    }
    let mut sample = Sample::empty(n);
    for i in 0..n {
        for j in 0..n {
            sample.latency[i * n + j] = rows[i * 2 * n + j];
            sample.bandwidth[i * n + j] = rows[i * 2 * n + n + j];
        }
    }
    Ok(Some(sample))
}
