//! LU decomposition on a pr×pc process grid (the seed paper's table 3 application), checked:
//! `ferry run -n P lu [n]`. Process 0 prints `lu n=… p=… grid=…x… time=…s max_err=… ok`.
//!
//! The grid is √P×√P when P is a square, else the most square pr×pc = P (2 = 1×2, 6 = 2×3,
//! 8 = 2×4). The n×n matrix is distributed cyclically in both dimensions (element (i, j) lives
//! on process (i mod pr, j mod pc)), as in BSPedupack's `bsplu`. Stage k takes two supersteps:
//! the owner of a(k,k) puts it to its processor column; then that column scales its part of
//! column k and puts each multiplier to its processor row, while processor row k mod pr puts
//! its part of row k to its processor column; every process then updates its part of the
//! trailing matrix. Elements travel as single-word puts, which is what combining is for.
//!
//! The matrix is diagonally dominant, so no pivoting is needed (the seed's version pivots;
//! this one does not). At the end every process puts its elements into process 0, which
//! compares them with the same elimination done sequentially.

use ferry_bsp::Bsp;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The input: uniform in [0, 1), plus n on the diagonal.
fn a0(n: usize, i: usize, j: usize) -> f64 {
    let u = (splitmix((i * n + j) as u64) >> 11) as f64 / (1u64 << 53) as f64;
    u + if i == j { n as f64 } else { 0.0 }
}

/// The most square grid pr×pc = p with pr ≤ pc.
fn grid(p: usize) -> (usize, usize) {
    let pr = (1..=p)
        .filter(|&d| p.is_multiple_of(d) && d * d <= p)
        .max()
        .unwrap_or(1);
    (pr, p / pr)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let mut bsp = Bsp::init().expect("ferry init");
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let (pr, pc) = grid(p);
    let (s, t) = (me / pc, me % pc);
    let pid = |s: usize, t: usize| s * pc + t;
    // Local rows are s, s+pr, …; local columns t, t+pc, …
    let nr = (n + pr - 1 - s) / pr;
    let nc = (n + pc - 1 - t) / pc;
    let mut a: Vec<f64> = (0..nr * nc)
        .map(|x| a0(n, (x / nc) * pr + s, (x % nc) * pc + t))
        .collect();

    let akk = bsp.alloc::<f64>(1);
    let lcol = bsp.alloc::<f64>(n); // multipliers of column k, by global row
    let urow = bsp.alloc::<f64>(n); // row k, by global column
    let all = bsp.alloc::<f64>(if me == 0 { n * n } else { 0 });
    for r in [&akk, &lcol, &urow, &all] {
        bsp.push_reg(r);
    }
    bsp.sync();
    let t0 = bsp.time();

    for k in 0..n {
        let (ks, kt) = (k % pr, k % pc);
        // Local index of the first row / column after k.
        let i0 = (k + 1 + pr - 1 - s) / pr;
        let j0 = (k + 1 + pc - 1 - t) / pc;
        if s == ks && t == kt {
            let v = a[(k / pr) * nc + k / pc];
            for s2 in 0..pr {
                bsp.put(pid(s2, t), &[v], &akk, 0);
            }
        }
        bsp.sync();

        if t == kt {
            let pivot = bsp.area(&akk)[0];
            let lj = k / pc;
            for li in i0..nr {
                let x = &mut a[li * nc + lj];
                *x /= pivot;
                let v = *x;
                for t2 in 0..pc {
                    bsp.put(pid(s, t2), &[v], &lcol, li * pr + s);
                }
            }
        }
        if s == ks {
            let li = k / pr;
            for lj in j0..nc {
                let v = a[li * nc + lj];
                for s2 in 0..pr {
                    bsp.put(pid(s2, t), &[v], &urow, lj * pc + t);
                }
            }
        }
        bsp.sync();

        let (l, u) = (bsp.area(&lcol), bsp.area(&urow));
        for li in i0..nr {
            let m = l[li * pr + s];
            let row = &mut a[li * nc..(li + 1) * nc];
            for lj in j0..nc {
                row[lj] -= m * u[lj * pc + t];
            }
        }
    }
    let elapsed = bsp.time() - t0;

    for li in 0..nr {
        for lj in 0..nc {
            let (i, j) = (li * pr + s, lj * pc + t);
            bsp.put(0, &[a[li * nc + lj]], &all, i * n + j);
        }
    }
    bsp.sync();

    if me == 0 {
        let mut b: Vec<f64> = (0..n * n).map(|x| a0(n, x / n, x % n)).collect();
        for k in 0..n {
            let pivot = b[k * n + k];
            for i in k + 1..n {
                b[i * n + k] /= pivot;
                let m = b[i * n + k];
                for j in k + 1..n {
                    b[i * n + j] -= m * b[k * n + j];
                }
            }
        }
        let got = bsp.area(&all);
        let err = got
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        if err > 1e-9 * n as f64 || err.is_nan() {
            bsp.abort(&format!("lu wrong: max error {err}"));
        }
        println!("lu n={n} p={p} grid={pr}x{pc} time={elapsed:.4}s max_err={err:e} ok");
    }
    bsp.end();
}
