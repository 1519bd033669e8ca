//! Jacobi iterations on a 100×100 grid (the seed paper's table 3 application), checked:
//! `ferry run -n P jacobi [iterations]`. Process 0 prints `jacobi … max_err=… ok`.
//!
//! Rows are distributed in blocks; each superstep puts the first and last own row into the
//! neighbours' ghost rows. At the end every process puts its rows into process 0, which
//! compares them with the same iterations done sequentially.

use ferry_bsp::{Bsp, BspError};

const N: usize = 100;

/// One sweep over rows `1..rows+1` of `old` (with ghost rows 0 and rows+1) into `new`;
/// the outer boundary (grid rows 0 and N−1, columns 0 and N−1) stays fixed.
fn sweep(old: &[f64], new: &mut [f64], rows: usize, first_row: usize) {
    for r in 1..=rows {
        let g = first_row + r - 1;
        for c in 0..N {
            let i = r * N + c;
            new[i] = if g == 0 || g == N - 1 || c == 0 || c == N - 1 {
                old[i]
            } else {
                0.25 * (old[i - N] + old[i + N] + old[i - 1] + old[i + 1])
            };
        }
    }
}

fn initial(g: usize, c: usize) -> f64 {
    if g == 0 {
        100.0 // a hot top edge
    } else {
        (c as f64 * 0.01).sin()
    }
}

fn main() -> Result<(), BspError> {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500);
    let mut bsp = Bsp::init()?;
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let first = N * me / p;
    let rows = N * (me + 1) / p - first;
    let block = |q: usize| (N * q / p, N * (q + 1) / p - N * q / p);

    let u = bsp.alloc::<f64>((rows + 2) * N)?;
    let all = bsp.alloc::<f64>(N * N)?;
    bsp.push_reg(&u)?;
    bsp.push_reg(&all)?;
    for r in 0..rows {
        for c in 0..N {
            bsp.area_mut(&u)?[(r + 1) * N + c] = initial(first + r, c);
        }
    }
    bsp.sync()?;
    let t0 = bsp.time();
    let mut next = vec![0.0; (rows + 2) * N];
    for _ in 0..iters {
        // Ghost rows: my first row is the row after the block above, my last the row before
        // the block below.
        if me > 0 && rows > 0 {
            let (_, up_rows) = block(me - 1);
            let row = bsp.area(&u)?[N..2 * N].to_vec();
            bsp.put(me - 1, &row, &u, (up_rows + 1) * N)?;
        }
        if me + 1 < p && rows > 0 {
            let row = bsp.area(&u)?[rows * N..(rows + 1) * N].to_vec();
            bsp.put(me + 1, &row, &u, 0)?;
        }
        bsp.sync()?;
        sweep(bsp.area(&u)?, &mut next, rows, first);
        bsp.area_mut(&u)?[N..(rows + 1) * N].copy_from_slice(&next[N..(rows + 1) * N]);
    }
    let elapsed = bsp.time() - t0;
    let mine = bsp.area(&u)?[N..(rows + 1) * N].to_vec();
    bsp.put(0, &mine, &all, first * N)?;
    bsp.sync()?;

    if me == 0 {
        let mut a = vec![0.0; (N + 2) * N];
        for g in 0..N {
            for c in 0..N {
                a[(g + 1) * N + c] = initial(g, c);
            }
        }
        let mut b = a.clone();
        for _ in 0..iters {
            sweep(&a, &mut b, N, 0);
            a[N..(N + 1) * N].copy_from_slice(&b[N..(N + 1) * N]);
        }
        let got = bsp.area(&all)?;
        let err = (0..N * N)
            .map(|i| (got[i] - a[N + i]).abs())
            .fold(0.0, f64::max);
        if err > 1e-12 {
            bsp.abort(&format!("jacobi wrong: max error {err}"));
        }
        println!("jacobi n={N} iters={iters} p={p} time={elapsed:.4}s max_err={err:e} ok");
    }
    bsp.end()
}
