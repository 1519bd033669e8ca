//! LU decomposition with partial pivoting on a pr×pc process grid (the seed paper's table 3
//! application), checked: `ferry run -n P lu [n] [pivot|nopivot]`. Process 0 prints
//! `lu n=… p=… grid=…x… pivot=… swaps=… time=…s max_err=… residual=… ok`.
//!
//! The grid is √P×√P when P is a square, else the most square pr×pc = P (2 = 1×2, 6 = 2×3,
//! 8 = 2×4). The n×n matrix is distributed cyclically in both dimensions (element (i, j) lives
//! on process (i mod pr, j mod pc)), as in BSPedupack's `bsplu`. Stage k takes two supersteps:
//!
//! 1. The processes of processor column k mod pc find their largest |a(i, k)| over their rows
//!    i ≥ k and put it with its row to every process, so that after the sync every process
//!    picks the same pivot row r (largest magnitude, lowest row on ties) and pivot value.
//! 2. Rows k and r swap (whole rows, the multipliers of earlier stages included; between two
//!    processes of a processor column by puts of a row, or in place when one process holds
//!    both); processor column k mod pc puts each multiplier a(i, k)/pivot to its processor
//!    row, and processor row r mod pr puts the new row k (the old row r) to its processor
//!    column, both from the values before the swap. Every process then applies the swap,
//!    scales column k and updates its part of the trailing matrix.
//!
//! Elements travel as single-word puts, which is what combining is for. With `nopivot` stage
//! k is the same without the pivot search (the pivot is a(k, k)); it then works on a
//! diagonally dominant matrix only, so that is the input for `nopivot`. With pivoting (the
//! default) the input is uniform in [-1, 1) with a zero diagonal, which fails without it.
//!
//! At the end every process puts its elements into process 0, which checks them against the
//! same elimination done sequentially (same pivots, elements equal to 1e-9·n) and checks the
//! residual max |P·A − L·U| ≤ 1e-12·n·max|A|.

use ferry_bsp::{Bsp, BspError};

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The input. Pivoting: uniform in [-1, 1) with a zero diagonal (a(0, 0) = 0, so elimination
/// without row exchanges divides by zero at once). No pivoting: uniform in [0, 1) plus n on
/// the diagonal (diagonally dominant, needs no exchanges).
fn a0(n: usize, pivot: bool, i: usize, j: usize) -> f64 {
    let u = (splitmix((i * n + j) as u64) >> 11) as f64 / (1u64 << 53) as f64;
    match (pivot, i == j) {
        (true, true) => 0.0,
        (true, false) => 2.0 * u - 1.0,
        (false, diag) => u + if diag { n as f64 } else { 0.0 },
    }
}

/// The most square grid pr×pc = p with pr ≤ pc.
fn grid(p: usize) -> (usize, usize) {
    let pr = (1..=p)
        .filter(|&d| p.is_multiple_of(d) && d * d <= p)
        .max()
        .unwrap_or(1);
    (pr, p / pr)
}

/// The pivot of column k among candidates (value, row), row < 0 meaning none: the largest
/// magnitude, the lowest row on ties. Sequential and parallel code both decide with it.
fn choose(cands: impl Iterator<Item = (f64, f64)>) -> Option<(f64, usize)> {
    let mut best: Option<(f64, usize)> = None;
    for (v, row) in cands {
        if row < 0.0 {
            continue;
        }
        let row = row as usize;
        best = match best {
            Some((bv, br)) if bv.abs() > v.abs() || (bv.abs() == v.abs() && br < row) => {
                Some((bv, br))
            }
            _ => Some((v, row)),
        };
    }
    best
}

/// Sequential LU of the row-major n×n `b` in place, with the same pivoting rule; returns the
/// pivot row of each stage.
fn lu_seq(b: &mut [f64], n: usize, pivot: bool) -> Result<Vec<usize>, usize> {
    let mut rows = Vec::with_capacity(n);
    for k in 0..n {
        let r = if pivot {
            match choose((k..n).map(|i| (b[i * n + k], i as f64))) {
                Some((v, r)) if v != 0.0 => r,
                _ => return Err(k),
            }
        } else {
            k
        };
        if r != k {
            for j in 0..n {
                b.swap(k * n + j, r * n + j);
            }
        }
        rows.push(r);
        let piv = b[k * n + k];
        for i in k + 1..n {
            b[i * n + k] /= piv;
            let m = b[i * n + k];
            for j in k + 1..n {
                b[i * n + j] -= m * b[k * n + j];
            }
        }
    }
    Ok(rows)
}

fn main() -> Result<(), BspError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(256);
    let pivot = match args.get(1).map(String::as_str) {
        None | Some("pivot") => true,
        Some("nopivot") => false,
        Some(other) => {
            eprintln!("lu: second argument {other:?}: expected pivot or nopivot");
            std::process::exit(2);
        }
    };
    let mut bsp = Bsp::init()?;
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let (pr, pc) = grid(p);
    let (s, t) = (me / pc, me % pc);
    let pid = |s: usize, t: usize| s * pc + t;
    // Local rows are s, s+pr, …; local columns t, t+pc, …
    let nr = (n + pr - 1 - s) / pr;
    let nc = (n + pc - 1 - t) / pc;
    let mut a: Vec<f64> = (0..nr * nc)
        .map(|x| a0(n, pivot, (x / nc) * pr + s, (x % nc) * pc + t))
        .collect();

    let akk = bsp.alloc::<f64>(1)?; // the pivot value (no pivoting)
    let cands = bsp.alloc::<f64>(2 * pr)?; // per processor row: (value, row) candidate
    let swp = bsp.alloc::<f64>(nc)?; // the other row of a swap between processes
    let lcol = bsp.alloc::<f64>(n)?; // multipliers of column k, by global row
    let urow = bsp.alloc::<f64>(n)?; // row k, by global column
    let all = bsp.alloc::<f64>(if me == 0 { n * n } else { 0 })?;
    for r in [&akk, &cands, &swp, &lcol, &urow, &all] {
        bsp.push_reg(r)?;
    }
    bsp.sync()?;
    let t0 = bsp.time();
    let mut pivots = Vec::with_capacity(n);

    for k in 0..n {
        let (ks, kt) = (k % pr, k % pc);
        // Local index of the first row / column after k, and of the first row from k.
        let i0 = (k + 1 + pr - 1 - s) / pr;
        let j0 = (k + 1 + pc - 1 - t) / pc;
        let lj = k / pc;

        // Superstep 1: the pivot (search, or a(k, k) to its processor column).
        if pivot {
            if t == kt {
                let from = (k + pr - 1 - s) / pr;
                let mine = choose((from..nr).map(|li| (a[li * nc + lj], (li * pr + s) as f64)));
                let cand = mine.map_or([0.0, -1.0], |(v, r)| [v, r as f64]);
                for q in 0..p {
                    bsp.put(q, &cand, &cands, 2 * s)?;
                }
            }
        } else if s == ks && t == kt {
            let v = a[(k / pr) * nc + lj];
            for s2 in 0..pr {
                bsp.put(pid(s2, t), &[v], &akk, 0)?;
            }
        }
        bsp.sync()?;
        let (piv, r) = if pivot {
            let c = bsp.area(&cands)?;
            match choose((0..pr).map(|s2| (c[2 * s2], c[2 * s2 + 1]))) {
                Some((v, r)) if v != 0.0 => (v, r),
                _ => bsp.abort(&format!("lu: the matrix is singular (column {k})")),
            }
        } else {
            (bsp.area(&akk)?[0], k)
        };
        if t == kt && piv == 0.0 {
            bsp.abort(&format!("lu: zero pivot in column {k} (try pivot)"));
        }
        pivots.push(r);
        let (rs, lk, lr) = (r % pr, k / pr, r / pr);

        // Superstep 2, from the values before the swap: multipliers along processor rows
        // (row r's is old a(k, k) / pivot), the new row k (old row r) along processor columns,
        // and the swap.
        if t == kt {
            for li in i0..nr {
                let i = li * pr + s;
                if i != r {
                    let v = a[li * nc + lj] / piv;
                    for t2 in 0..pc {
                        bsp.put(pid(s, t2), &[v], &lcol, i)?;
                    }
                }
            }
            if r != k && s == ks {
                let v = a[lk * nc + lj] / piv;
                for t2 in 0..pc {
                    bsp.put(pid(rs, t2), &[v], &lcol, r)?;
                }
            }
        }
        if s == rs {
            for lj2 in j0..nc {
                let v = a[lr * nc + lj2];
                for s2 in 0..pr {
                    bsp.put(pid(s2, t), &[v], &urow, lj2 * pc + t)?;
                }
            }
        }
        if r != k {
            if ks == rs {
                if s == ks {
                    for x in 0..nc {
                        a.swap(lk * nc + x, lr * nc + x);
                    }
                }
            } else if s == ks {
                bsp.put(pid(rs, t), &a[lk * nc..(lk + 1) * nc], &swp, 0)?;
            } else if s == rs {
                bsp.put(pid(ks, t), &a[lr * nc..(lr + 1) * nc], &swp, 0)?;
            }
        }
        bsp.sync()?;

        if r != k && ks != rs && (s == ks || s == rs) {
            let li = if s == ks { lk } else { lr };
            a[li * nc..(li + 1) * nc].copy_from_slice(bsp.area(&swp)?);
        }
        if t == kt {
            for li in i0..nr {
                a[li * nc + lj] /= piv;
            }
        }
        let (l, u) = (bsp.area(&lcol)?, bsp.area(&urow)?);
        for li in i0..nr {
            let m = l[li * pr + s];
            let row = &mut a[li * nc..(li + 1) * nc];
            for lj2 in j0..nc {
                row[lj2] -= m * u[lj2 * pc + t];
            }
        }
    }
    let elapsed = bsp.time() - t0;

    for li in 0..nr {
        for lj in 0..nc {
            let (i, j) = (li * pr + s, lj * pc + t);
            bsp.put(0, &[a[li * nc + lj]], &all, i * n + j)?;
        }
    }
    bsp.sync()?;

    if me == 0 {
        let input: Vec<f64> = (0..n * n).map(|x| a0(n, pivot, x / n, x % n)).collect();
        let mut b = input.clone();
        let rows = match lu_seq(&mut b, n, pivot) {
            Ok(rows) => rows,
            Err(k) => bsp.abort(&format!("lu: sequential LU: singular at column {k}")),
        };
        if rows != pivots {
            let k = (0..n).find(|&k| rows[k] != pivots[k]).unwrap_or(0);
            bsp.abort(&format!(
                "lu wrong: pivot row of column {k} is {}, the sequential LU chose {}",
                pivots[k], rows[k]
            ));
        }
        let got = bsp.area(&all)?;
        let err = got
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        // P·A: the input with the stages' row exchanges applied in order.
        let mut pa = input.clone();
        for (k, &r) in pivots.iter().enumerate() {
            if r != k {
                for j in 0..n {
                    pa.swap(k * n + j, r * n + j);
                }
            }
        }
        // L·U from the factors: L unit lower (below the diagonal), U upper.
        let mut residual: f64 = 0.0;
        for i in 0..n {
            for j in 0..n {
                let mut x = if i <= j { got[i * n + j] } else { 0.0 };
                for m in 0..i.min(j + 1) {
                    x += got[i * n + m] * got[m * n + j];
                }
                residual = residual.max((pa[i * n + j] - x).abs());
            }
        }
        let amax = input.iter().fold(0.0, |m: f64, x| m.max(x.abs()));
        let swaps = pivots.iter().enumerate().filter(|&(k, &r)| r != k).count();
        if err > 1e-9 * n as f64 || err.is_nan() {
            bsp.abort(&format!(
                "lu wrong: max error {err} against the sequential LU"
            ));
        }
        if residual > 1e-12 * n as f64 * amax || residual.is_nan() {
            bsp.abort(&format!("lu wrong: max |P·A - L·U| = {residual}"));
        }
        println!(
            "lu n={n} p={p} grid={pr}x{pc} pivot={} swaps={swaps} time={elapsed:.4}s max_err={err:e} residual={residual:e} ok",
            if pivot { "on" } else { "off" }
        );
    }
    bsp.end()
}
