//! Sample sort of 700 000 64-bit keys (the seed paper's table 3 application), checked:
//! `ferry run -n P sample_sort [n]`. Process 0 prints `sample_sort n=… p=… time=…s ok`.
//!
//! Each process sorts its block, contributes P−1 regular samples (puts), all pick the same
//! splitters, buckets travel as BSMP messages, and each process sorts what it received. The
//! check: every process's keys are sorted, its largest key is at most its right neighbour's
//! smallest, and the count and a wrapping sum of all keys are unchanged.

use ferry_bsp::{Bsp, BspError};

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn main() -> Result<(), BspError> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(700_000);
    let mut bsp = Bsp::init()?;
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let lo = n * me / p;
    let hi = n * (me + 1) / p;
    let mut keys: Vec<u64> = (lo..hi).map(|i| splitmix(i as u64)).collect();
    let local_sum = keys.iter().fold(0u64, |a, &k| a.wrapping_add(k));

    let samples = bsp.alloc::<u64>(p * p)?;
    let stats = bsp.alloc::<u64>(4 * p)?; // per process: count, sum, min, max
    bsp.push_reg(&samples)?;
    bsp.push_reg(&stats)?;
    bsp.sync()?;
    let t0 = bsp.time();

    keys.sort_unstable();
    let mine: Vec<u64> = (1..p)
        .map(|j| keys.get(j * keys.len() / p).copied().unwrap_or(u64::MAX))
        .collect();
    for q in 0..p {
        bsp.put(q, &mine, &samples, me * p)?;
    }
    bsp.sync()?;

    let got = bsp.area(&samples)?;
    let mut all: Vec<u64> = (0..p)
        .flat_map(|q| got[q * p..q * p + p - 1].to_vec())
        .collect();
    all.sort_unstable();
    let splitters: Vec<u64> = (1..p).map(|j| all[j * all.len() / p]).collect();
    let mut start = 0;
    for q in 0..p {
        let end = match splitters.get(q) {
            Some(&s) => keys.partition_point(|&k| k < s),
            None => keys.len(),
        };
        bsp.send(q, &[], bytemuck::cast_slice(&keys[start..end]))?;
        start = end;
    }
    bsp.sync()?;

    let mut mine: Vec<u64> = Vec::new();
    while let Some((_, payload)) = bsp.hpmove() {
        mine.extend(
            payload
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))),
        );
    }
    mine.sort_unstable();
    let elapsed = bsp.time() - t0;

    let sum = mine.iter().fold(0u64, |a, &k| a.wrapping_add(k));
    let row = [
        mine.len() as u64,
        sum.wrapping_sub(local_sum), // wrapping total of (received − generated) must be 0
        mine.first().copied().unwrap_or(u64::MAX),
        mine.last().copied().unwrap_or(0),
    ];
    for q in 0..p {
        bsp.put(q, &row, &stats, 4 * me)?;
    }
    bsp.sync()?;
    let s = bsp.area(&stats)?.to_vec();
    let count: u64 = (0..p).map(|q| s[4 * q]).sum();
    let drift = (0..p).fold(0u64, |a, q| a.wrapping_add(s[4 * q + 1]));
    let ordered = (0..p.saturating_sub(1)).all(|q| {
        // Empty buckets have min MAX / max 0, which never break the order.
        s[4 * q + 3] <= (q + 1..p).map(|r| s[4 * r + 2]).min().unwrap_or(u64::MAX)
    });
    if !mine.windows(2).all(|w| w[0] <= w[1]) || count != n as u64 || drift != 0 || !ordered {
        bsp.abort(&format!(
            "sample sort wrong: count {count} of {n}, sum drift {drift}, ordered {ordered}"
        ));
    }
    if me == 0 {
        println!("sample_sort n={n} p={p} time={elapsed:.4}s ok");
    }
    bsp.end()
}
