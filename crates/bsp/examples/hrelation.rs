//! The h-relation of `ferry bench bsp` on its own, for instruction counts (callgrind) and
//! profiles: `ferry run -n P hrelation [supersteps] [h] [put_words]` runs `supersteps`
//! supersteps in which every process puts h 8-byte words, spread evenly over the others, in
//! puts of `put_words` words (defaults 200, 4096, 16), and checks the last one's result.
//! Process 0 prints the mean time of a superstep and of its puts alone.

use ferry_bsp::{Bsp, BspError};

fn main() -> Result<(), BspError> {
    let arg = |i: usize, default: usize| -> usize {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (steps, h, put_words) = (arg(1, 200), arg(2, 4096), arg(3, 16).max(1));
    let mut bsp = Bsp::init()?;
    let (me, p) = (bsp.pid(), bsp.nprocs());
    // One process puts to itself (to time the puts without a peer).
    let per = if p > 1 { h / (p - 1) } else { h };
    let x = bsp.alloc::<u64>(per.max(1))?;
    bsp.push_reg(&x)?;
    bsp.sync()?;
    let src: Vec<u64> = (0..per as u64).map(|i| i * 1000 + me as u64).collect();
    let t0 = bsp.time();
    let mut in_puts = 0.0;
    for _ in 0..steps {
        let tp = bsp.time();
        for k in 1..p.max(2) {
            let q = (me + k) % p;
            let mut off = 0;
            while off < per {
                let n = put_words.min(per - off);
                bsp.put(q, &src[off..off + n], &x, off)?;
                off += n;
            }
        }
        in_puts += bsp.time() - tp;
        bsp.sync()?;
    }
    let t = bsp.time() - t0;
    // Every process wrote the same offsets: the last writer in a sync is some process.
    let ok = bsp
        .area(&x)?
        .iter()
        .enumerate()
        .all(|(i, &v)| v / 1000 == i as u64 && (v % 1000) < p as u64);
    if me == 0 {
        println!(
            "hrelation p={p} h={h} put_words={put_words} steps={steps} {:.2} us/superstep, of which puts {:.2} {}",
            t / steps.max(1) as f64 * 1e6,
            in_puts / steps.max(1) as f64 * 1e6,
            if ok { "ok" } else { "WRONG" }
        );
    }
    bsp.pop_reg(&x)?;
    bsp.sync()?;
    bsp.free(x)?;
    bsp.end()
}
