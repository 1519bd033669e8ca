//! Measuring a job's matrix with ferry-core: ping-pong for latency, timed large transfers for
//! bandwidth, one ordered pair at a time while the other ranks sleep, so measurements do
//! not compete for the CPU, the memory bus or the network.
//!
//! This is the crate's only I/O (messages and the clock); the forecasters never see it.

use crate::matrix::Sample;
use ferry_core::{Comm, Error};
use std::time::{Duration, Instant};

const TAG_PING: i32 = 0x7e1;
const TAG_DATA: i32 = 0x7e2;
const TAG_ACK: i32 = 0x7e3;
const TAG_GO: i32 = 0x7e4;
const TAG_DONE: i32 = 0x7e5;

struct Buffers {
    small: Vec<u8>,
    small_in: Vec<u8>,
    large: Vec<u8>,
    large_in: Vec<u8>,
}

/// Receives a one-byte control message, sleeping `probe.nap` between polls.
fn wait(
    comm: &Comm,
    token: &mut [u8; 1],
    source: usize,
    tag: i32,
    probe: &Probe,
) -> Result<(), Error> {
    while comm.iprobe(source, tag)?.is_none() {
        std::thread::sleep(probe.nap);
    }
    comm.recv(token, source, tag).map(drop)
}

/// The timing side of pair (me, dst): (latency in s, bandwidth in bytes/s).
fn time_pair(comm: &Comm, dst: usize, probe: &Probe, b: &mut Buffers) -> Result<(f64, f64), Error> {
    let mut ack = [0u8; 1];
    let mut rtts = Vec::with_capacity(probe.pingpongs);
    for k in 0..=probe.pingpongs {
        let t = Instant::now();
        comm.send(&b.small, dst, TAG_PING)?;
        comm.recv(&mut b.small_in, dst, TAG_PING)?;
        if k > 0 {
            rtts.push(t.elapsed().as_secs_f64());
        }
    }
    let rtt = median(&mut rtts);
    let mut times = Vec::with_capacity(probe.transfers);
    for k in 0..=probe.transfers {
        let t = Instant::now();
        comm.send(&b.large, dst, TAG_DATA)?;
        comm.recv(&mut ack, dst, TAG_ACK)?;
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
    Ok((rtt / 2.0, probe.large as f64 / transfer))
}

/// The echoing side of pair (src, me).
fn serve_pair(comm: &Comm, src: usize, probe: &Probe, b: &mut Buffers) -> Result<(), Error> {
    for _ in 0..=probe.pingpongs {
        comm.recv(&mut b.small_in, src, TAG_PING)?;
        comm.send(&b.small, src, TAG_PING)?;
    }
    for _ in 0..=probe.transfers {
        comm.recv(&mut b.large_in, src, TAG_DATA)?;
        comm.send(&[0u8; 1], src, TAG_ACK)?;
    }
    Ok(())
}

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
    /// Sleep between polls of a rank waiting for its turn.
    pub nap: Duration,
}

impl Default for Probe {
    /// 8 B ping-pong ×20, 1 MiB transfers ×4, 200 µs naps.
    fn default() -> Probe {
        Probe {
            small: 8,
            pingpongs: 20,
            large: 1 << 20,
            transfers: 4,
            nap: Duration::from_micros(200),
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
///
/// Rank 0 paces the pairs: it tells `i` and `j` to go and waits for `i`'s "done" before the
/// next pair. Ranks that wait sleep between polls ([`Probe::nap`]) instead of spinning in the
/// progress engine: with more ranks than cores a spinning bystander would take the measuring
/// pair's CPU and be measured too (a barrier per pair did exactly that).
pub fn measure(comm: &Comm, probe: &Probe) -> Result<Option<Sample>, Error> {
    let (me, n) = (comm.rank(), comm.size());
    let mut bufs = Buffers {
        small: vec![0u8; probe.small],
        small_in: vec![0u8; probe.small],
        large: vec![0u8; probe.large],
        large_in: vec![0u8; probe.large],
    };
    let mut token = [0u8; 1];
    // My row: latency to each rank, then bandwidth to each rank.
    let mut row = vec![f64::NAN; 2 * n];
    let pairs = (0..n).flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)));
    for (src, dst) in pairs {
        if me == 0 {
            for r in [src, dst] {
                if r != 0 {
                    comm.send(&token, r, TAG_GO)?;
                }
            }
        } else if me == src || me == dst {
            wait(comm, &mut token, 0, TAG_GO, probe)?;
        }
        if me == src {
            let (latency, bandwidth) = time_pair(comm, dst, probe, &mut bufs)?;
            row[dst] = latency;
            row[n + dst] = bandwidth;
            if me != 0 {
                comm.send(&token, 0, TAG_DONE)?;
            }
        } else if me == dst {
            serve_pair(comm, src, probe, &mut bufs)?;
        }
        if me == 0 && src != 0 {
            wait(comm, &mut token, src, TAG_DONE, probe)?;
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
