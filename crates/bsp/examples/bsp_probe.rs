//! A small BSP probe: L (cost of an empty sync) and g (cost per 8-byte word of an all-to-all
//! h-relation, least-squares fit of T(h) = g·h + L), for the optimisation switches in the
//! environment. `ferry run -n P bsp_probe [reps] [words per put, 0 = one put per destination]`
//! prints one CSV line from process 0: `p,combine,early,reorder,prepost,L_us,g_us_per_word,fit_L_us`.

use ferry_bsp::Bsp;

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let words: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(16);
    let mut bsp = Bsp::init().expect("ferry init");
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let hs = [0usize, 64, 256, 1024, 4096];
    let max = hs[hs.len() - 1];
    let x = bsp.alloc::<u64>(max + p);
    let src: Vec<u64> = (0..max as u64).collect();
    bsp.push_reg(&x);
    bsp.sync();
    let mut points = Vec::new();
    for &h in &hs {
        // h words leave and arrive at every process, spread over the others in puts of
        // `words` words (small by default, so combining has something to combine).
        let per = if p > 1 { h / (p - 1) } else { 0 };
        for _ in 0..reps / 10 {
            bsp.sync();
        }
        let t0 = bsp.time();
        for _ in 0..reps {
            for k in 1..p {
                let q = (me + k) % p;
                let mut off = 0;
                while off < per {
                    let n = if words == 0 {
                        per
                    } else {
                        words.min(per - off)
                    };
                    bsp.put(q, &src[off..off + n], &x, off);
                    off += n;
                }
            }
            bsp.sync();
        }
        points.push((h as f64, (bsp.time() - t0) / reps as f64 * 1e6));
    }
    if me == 0 {
        let n = points.len() as f64;
        let (sx, sy) = points
            .iter()
            .fold((0.0, 0.0), |a, &(x, y)| (a.0 + x, a.1 + y));
        let (sxx, sxy) = points
            .iter()
            .fold((0.0, 0.0), |a, &(x, y)| (a.0 + x * x, a.1 + x * y));
        let g = (n * sxy - sx * sy) / (n * sxx - sx * sx);
        let l = (sy - g * sx) / n;
        let c = bsp.config();
        println!(
            "{p},{},{},{},{},{:.2},{:.4},{:.2}",
            c.combine as u8, c.early_bytes, c.reorder as u8, c.prepost as u8, points[0].1, g, l
        );
    }
    bsp.end();
}
