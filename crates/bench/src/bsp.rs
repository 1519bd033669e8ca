//! The BSP cost-model probe (`ferry bench bsp`): the parameters s, L and g of the BSP model,
//! measured as the seed paper's tables 1–2 report them, and the same-run MPICH reference.
//!
//! - **s**: computing rate in Mflop/s, from a dot product and a small matrix multiply (their
//!   mean is the s used to express L and g in flops).
//! - **L**: time of an empty superstep (a sync with nothing to move), in µs and in flops.
//! - **g**: cost per 8-byte word of an h-relation, the slope of the least-squares fit of
//!   T(h) = g·h + L over h = 0 … 4096, for two patterns: **all-to-all** (every process sends
//!   h words spread evenly over the others) and **cyclic shift** (every process sends h words
//!   to its right neighbour). Words travel as puts of `put_words` words (0 = one put per
//!   destination), so combining has something to combine.
//!
//! [`probe`] runs inside a BSP job (one call on every process; process 0 gets the result).
//! [`mpich_probe`] builds and runs `ferry-bsplib`'s `bench/mpi_probe.c` with MPICH for the
//! same-run reference (`MPI_Barrier` for L, `MPI_Alltoall` for g).

use ferry_bsp::{Bsp, BspError};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// h values of the fit (words per process).
pub const HS: [usize; 6] = [0, 64, 256, 1024, 2048, 4096];

/// Trials of `reps` supersteps per measured point.
const TRIALS: usize = 5;

/// The BSP parameters of one job.
#[derive(Debug, Clone)]
pub struct BspParams {
    /// Processes.
    pub p: usize,
    /// Mflop/s of the dot product.
    pub s_dot: f64,
    /// Mflop/s of the matrix multiply.
    pub s_mm: f64,
    /// Time of an empty sync, µs.
    pub l_us: f64,
    /// All-to-all: g in µs per word and the fitted L (µs).
    pub a2a: (f64, f64),
    /// Cyclic shift: g in µs per word and the fitted L (µs).
    pub shift: (f64, f64),
    /// Raw points: (pattern, h, µs per superstep).
    pub points: Vec<(&'static str, usize, f64)>,
}

impl BspParams {
    /// s used to express times in flops: the mean of the two kernels, Mflop/s.
    pub fn s(&self) -> f64 {
        (self.s_dot + self.s_mm) / 2.0
    }
}

/// Least-squares fit of y = g·x + l; returns (g, l).
pub fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (sx, sy, sxx, sxy) = points.iter().fold((0.0, 0.0, 0.0, 0.0), |a, &(x, y)| {
        (a.0 + x, a.1 + y, a.2 + x * x, a.3 + x * y)
    });
    let den = n * sxx - sx * sx;
    if den == 0.0 {
        return (0.0, sy / n.max(1.0));
    }
    let g = (n * sxy - sx * sy) / den;
    (g, (sy - g * sx) / n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Mflop/s of a dot product of two vectors of 4096 doubles, repeated.
fn s_dot() -> f64 {
    let n = 4096;
    let x: Vec<f64> = (0..n).map(|i| 1.0 + i as f64 * 1e-6).collect();
    let y: Vec<f64> = (0..n).map(|i| 2.0 - i as f64 * 1e-6).collect();
    let reps = 2000;
    let mut trials = Vec::new();
    let mut sink = 0.0;
    for _ in 0..TRIALS {
        let t = Instant::now();
        for r in 0..reps {
            let d: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
            sink += d * (r as f64);
        }
        trials.push(2.0 * (n * reps) as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    std::hint::black_box(sink);
    median(trials)
}

/// Mflop/s of a 64×64 matrix multiply (i-k-j order), repeated.
fn s_mm() -> f64 {
    let n = 64;
    let a: Vec<f64> = (0..n * n).map(|i| (i % 7) as f64 * 0.5).collect();
    let b: Vec<f64> = (0..n * n).map(|i| (i % 5) as f64 * 0.25).collect();
    let mut c = vec![0.0; n * n];
    let reps = 40;
    let mut trials = Vec::new();
    for _ in 0..TRIALS {
        let t = Instant::now();
        for _ in 0..reps {
            c.iter_mut().for_each(|v| *v = 0.0);
            for i in 0..n {
                for k in 0..n {
                    let aik = a[i * n + k];
                    let (row, brow) = (&mut c[i * n..i * n + n], &b[k * n..k * n + n]);
                    for (cj, bj) in row.iter_mut().zip(brow) {
                        *cj += aik * bj;
                    }
                }
            }
            std::hint::black_box(&c);
        }
        trials.push(2.0 * (n * n * n * reps) as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    median(trials)
}

/// Measures s, L and g on every process of `bsp` (collective); process 0 returns the result.
/// `reps` supersteps per trial; `put_words` words per put (0 = one put per destination).
pub fn probe(bsp: &mut Bsp, reps: usize, put_words: usize) -> Result<Option<BspParams>, BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let reps = reps.max(1);
    // Everyone computes at once, as in a real superstep.
    bsp.sync()?;
    let (sd, sm) = (s_dot(), s_mm());
    let max = HS[HS.len() - 1];
    let x = bsp.alloc::<u64>(max + 1)?;
    let src: Vec<u64> = (0..max as u64).collect();
    bsp.push_reg(&x)?;
    bsp.sync()?;

    // `TRIALS`×`reps` supersteps, each timed on its own; the median superstep. (A median of
    // single supersteps, not of trial means: on a shared machine a process that loses its core
    // spoils a few supersteps, which a mean would spread over the whole trial.)
    type Body<'a> = &'a dyn Fn(&mut Bsp) -> Result<(), BspError>;
    let timed = |bsp: &mut Bsp, body: Body| -> Result<f64, BspError> {
        for _ in 0..reps / 10 + 1 {
            body(bsp)?;
            bsp.sync()?;
        }
        let mut each = Vec::with_capacity(TRIALS * reps);
        for _ in 0..TRIALS * reps {
            let t0 = bsp.time();
            body(bsp)?;
            bsp.sync()?;
            each.push((bsp.time() - t0) * 1e6);
        }
        Ok(median(each))
    };
    let l_us = timed(bsp, &|_| Ok(()))?;

    // Puts `n` words to `q` at offset `at`, in pieces of `put_words`.
    let put = move |bsp: &mut Bsp, q: usize, n: usize, at: usize| {
        let step = if put_words == 0 { n.max(1) } else { put_words };
        let mut off = 0;
        while off < n {
            let k = step.min(n - off);
            bsp.put(q, &src[off..off + k], &x, at + off)?;
            off += k;
        }
        Ok(())
    };
    let mut points = Vec::new();
    for &h in &HS {
        let per = if p > 1 { h / (p - 1) } else { 0 };
        let t = timed(bsp, &|bsp: &mut Bsp| {
            for k in 1..p {
                put(bsp, (me + k) % p, per, 0)?;
            }
            Ok(())
        })?;
        points.push(("all-to-all", per * (p - 1), t));
    }
    for &h in &HS {
        let t = timed(bsp, &|bsp: &mut Bsp| {
            if p > 1 {
                put(bsp, (me + 1) % p, h, 0)?;
            }
            Ok(())
        })?;
        points.push(("shift", h, t));
    }
    bsp.pop_reg(&x)?;
    bsp.sync()?;
    bsp.free(x)?;
    if me != 0 {
        return Ok(None);
    }
    let fit_of = |pattern: &str| {
        let pts: Vec<(f64, f64)> = points
            .iter()
            .filter(|r| r.0 == pattern)
            .map(|&(_, h, t)| (h as f64, t))
            .collect();
        fit(&pts)
    };
    Ok(Some(BspParams {
        p,
        s_dot: sd,
        s_mm: sm,
        l_us,
        a2a: fit_of("all-to-all"),
        shift: fit_of("shift"),
        points,
    }))
}

/// Body of each rank of `ferry bench bsp`: starts BSP on `world`, probes, and process 0
/// writes [`to_part`]'s text to `part`. Failures end the job with a message.
pub fn rank_main(world: ferry_core::World, part: &Path, reps: usize, put_words: usize) {
    let mut bsp = match Bsp::begin(world, None) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("ferry bench bsp: {e}");
            std::process::exit(1)
        }
    };
    match probe(&mut bsp, reps, put_words) {
        Ok(Some(r)) => {
            if let Err(e) = std::fs::write(part, to_part(&r)) {
                bsp.fail("ferry bench bsp", format!("{}: {e}", part.display()));
            }
        }
        Ok(None) => {}
        Err(e) => bsp.stop(&e),
    }
    if let Err(e) = bsp.end() {
        eprintln!("ferry bench bsp: {e}");
        std::process::exit(1)
    }
}

/// MPICH's figures for one job size: barrier latency (µs) and all-to-all g (µs per word).
#[derive(Debug, Clone, Copy)]
pub struct MpichParams {
    /// `MPI_Barrier`, µs.
    pub l_us: f64,
    /// `MPI_Alltoall` slope, µs per 8-byte word.
    pub g_us: f64,
}

/// The source of the MPI side of the probe (`ferry-bsplib`'s `bench/mpi_probe.c`).
pub const MPI_PROBE_C: &str = include_str!("../../bsplib/bench/mpi_probe.c");

/// Builds the MPI probe with `mpicc.mpich` into `dir`; returns the executable.
pub fn build_mpich_probe(dir: &Path) -> Result<std::path::PathBuf, String> {
    let src = dir.join("mpi_probe.c");
    let exe = dir.join("mpi_probe_mpich");
    std::fs::write(&src, MPI_PROBE_C).map_err(|e| format!("{}: {e}", src.display()))?;
    let out = Command::new("mpicc.mpich")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| format!("mpicc.mpich: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mpicc.mpich failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(exe)
}

/// Runs the MPI probe on `p` processes with `mpiexec.mpich`, killed after `timeout` (MPICH
/// busy-polls, so with more processes than cores a barrier can take milliseconds).
pub fn mpich_probe(
    exe: &Path,
    p: usize,
    reps: usize,
    timeout: Duration,
) -> Result<MpichParams, String> {
    let mut child = Command::new("mpiexec.mpich")
        .args(["-n", &p.to_string()])
        .arg(exe)
        .arg(reps.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("mpiexec.mpich: {e}"))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > timeout => {
                // The whole process group: mpiexec and its ranks.
                let _ = Command::new("kill")
                    .args(["-KILL", &format!("-{}", child.id())])
                    .status();
                let _ = child.wait();
                return Err(format!("timed out after {} s", timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    }
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        use std::io::Read;
        let _ = out.read_to_string(&mut text);
    }
    let f: Vec<f64> = text
        .lines()
        .last()
        .unwrap_or("")
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    match f.as_slice() {
        [_, l, g, _] => Ok(MpichParams { l_us: *l, g_us: *g }),
        _ => Err(format!("unexpected output {text:?}")),
    }
}

/// Header of [`csv_row`].
pub const CSV_HEADER: &str = "p,setting,s_dot_mflops,s_mm_mflops,s_mflops,L_us,L_flop,g_a2a_us_per_word,g_a2a_flop_per_word,L_a2a_fit_us,g_shift_us_per_word,g_shift_flop_per_word,L_shift_fit_us";

/// One CSV row of the parameters of a job run with `setting` ("on", "off").
pub fn csv_row(r: &BspParams, setting: &str) -> String {
    let s = r.s();
    format!(
        "{},{setting},{:.1},{:.1},{:.1},{:.3},{:.0},{:.6},{:.2},{:.3},{:.6},{:.2},{:.3}",
        r.p,
        r.s_dot,
        r.s_mm,
        s,
        r.l_us,
        r.l_us * s,
        r.a2a.0,
        r.a2a.0 * s,
        r.a2a.1,
        r.shift.0,
        r.shift.0 * s,
        r.shift.1
    )
}

/// Parses a [`csv_row`] back: (p, setting, values after the setting).
pub fn parse_row(line: &str) -> Option<(usize, String, Vec<f64>)> {
    let mut f = line.split(',');
    let p = f.next()?.parse().ok()?;
    let setting = f.next()?.to_string();
    let v: Option<Vec<f64>> = f.map(|x| x.parse().ok()).collect();
    Some((p, setting, v?))
}

/// The text a rank of `ferry bench bsp` leaves for the command: the parameters, then the raw
/// points.
pub fn to_part(r: &BspParams) -> String {
    let mut t = format!(
        "params,{},{},{},{},{},{},{},{}\n",
        r.p, r.s_dot, r.s_mm, r.l_us, r.a2a.0, r.a2a.1, r.shift.0, r.shift.1
    );
    for (pattern, h, us) in &r.points {
        t += &format!("point,{pattern},{h},{us}\n");
    }
    t
}

/// Reads [`to_part`]'s text back.
pub fn from_part(text: &str) -> Option<BspParams> {
    let mut lines = text.lines();
    let head: Vec<f64> = lines
        .next()?
        .strip_prefix("params,")?
        .split(',')
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    let [p, s_dot, s_mm, l_us, ga, la, gs, ls] = head[..] else {
        return None;
    };
    let mut points = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if let ["point", pattern, h, us] = f[..] {
            let pattern = if pattern == "shift" {
                "shift"
            } else {
                "all-to-all"
            };
            points.push((pattern, h.parse().ok()?, us.parse().ok()?));
        }
    }
    Some(BspParams {
        p: p as usize,
        s_dot,
        s_mm,
        l_us,
        a2a: (ga, la),
        shift: (gs, ls),
        points,
    })
}

/// Writes `bsp-params.csv`, `bsp-points.csv`, `bsp-mpich.csv` and the PNGs into `out`, and
/// returns the tables: 1 and 2 of the seed (optimisations on, off) and the same-run ratios to
/// MPICH when `mpich` has entries. `runs` are (setting, parameters) in run order.
pub fn report(
    runs: &[(String, BspParams)],
    mpich: &[(usize, Result<MpichParams, String>)],
    out: &Path,
    header: &[String],
) -> Result<String, String> {
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    let comments: String = header.iter().map(|h| format!("# {h}\n")).collect();
    let mut params = format!("{comments}{CSV_HEADER}\n");
    let mut points = format!("{comments}p,setting,pattern,h,usec\n");
    for (set, r) in runs {
        params += &(csv_row(r, set) + "\n");
        for (pattern, h, us) in &r.points {
            points += &format!("{},{set},{pattern},{h},{us:.3}\n", r.p);
        }
    }
    write("bsp-params.csv", params)?;
    write("bsp-points.csv", points)?;
    let mut text = String::new();
    for (n, set, what) in [
        (1, "on", "optimisations on"),
        (2, "off", "optimisations off"),
    ] {
        text += &format!(
            "Table {n}: BSP parameters, {what} (L: empty sync; g: slope of T(h) = g·h + L)\n\
             {:>3} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            "p",
            "s Mflop/s",
            "L µs",
            "L flop",
            "fit L µs",
            "g a2a ns/w",
            "g a2a flop",
            "g shft ns/w",
            "g shft flop",
            "fit L µs"
        );
        for (_, r) in runs.iter().filter(|(s, _)| s == set) {
            let s = r.s();
            text += &format!(
                "{:>3} {:>9.0} {:>9.2} {:>9.0} {:>9.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}\n",
                r.p,
                s,
                r.l_us,
                r.l_us * s,
                r.a2a.1,
                r.a2a.0 * 1e3,
                r.a2a.0 * s,
                r.shift.0 * 1e3,
                r.shift.0 * s,
                r.shift.1
            );
        }
        text += "\n";
    }
    let get = |p: usize, set: &str| {
        runs.iter()
            .find(|(s, r)| s == set && r.p == p)
            .map(|x| &x.1)
    };
    if !mpich.is_empty() {
        let mut csv = format!("{comments}p,L_us,g_us_per_word,error\n");
        text += &format!(
            "Same run vs MPICH (MPI_Barrier for L, MPI_Alltoall per word for g)\n\
             {:>3} {:>8} {:>8} {:>9} {:>6} {:>9} {:>9} {:>10} {:>6}\n",
            "p",
            "L on µs",
            "L off µs",
            "barrier",
            "ratio",
            "g on ns/w",
            "g off",
            "a2a ns/w",
            "ratio"
        );
        for (p, m) in mpich {
            let (on, off) = (get(*p, "on"), get(*p, "off"));
            let f =
                |v: Option<f64>, scale: f64| v.map_or("-".into(), |v| format!("{:.2}", v * scale));
            match m {
                Ok(m) => {
                    csv += &format!("{p},{:.3},{:.6},\n", m.l_us, m.g_us);
                    text += &format!(
                        "{:>3} {:>8} {:>8} {:>9.2} {:>6} {:>9} {:>9} {:>10.2} {:>6}\n",
                        p,
                        f(on.map(|r| r.l_us), 1.0),
                        f(off.map(|r| r.l_us), 1.0),
                        m.l_us,
                        f(on.map(|r| r.l_us / m.l_us), 1.0),
                        f(on.map(|r| r.a2a.0), 1e3),
                        f(off.map(|r| r.a2a.0), 1e3),
                        m.g_us * 1e3,
                        f(on.map(|r| r.a2a.0 / m.g_us), 1.0),
                    );
                }
                Err(e) => {
                    csv += &format!("{p},,,{}\n", e.replace([',', '\n'], " "));
                    text += &format!("{p:>3} MPICH: {e}\n");
                }
            }
        }
        write("bsp-mpich.csv", csv)?;
    }
    // T(h) per p (all-to-all, optimisations on) and L, g against p.
    let labels: Vec<String> = runs.iter().map(|(s, r)| format!("p={} {s}", r.p)).collect();
    let series: Vec<crate::Series> = runs
        .iter()
        .zip(&labels)
        .filter(|((s, _), _)| s == "on")
        .map(|((_, r), label)| crate::Series {
            label,
            points: r
                .points
                .iter()
                .filter(|x| x.0 == "all-to-all" && x.1 > 0)
                .map(|&(_, h, t)| (h as f64, t))
                .collect(),
        })
        .collect();
    crate::plot(
        &out.join("bsp-h-relations.png"),
        "BSP all-to-all h-relations (optimisations on)",
        crate::Axis::plain("h (words per process)"),
        crate::Axis::micros("time per superstep"),
        &series,
    )?;
    let by_p = |set: &str, f: fn(&BspParams) -> f64| -> Vec<(f64, f64)> {
        runs.iter()
            .filter(|(s, _)| s == set)
            .map(|(_, r)| (r.p as f64, f(r)))
            .collect()
    };
    let mut lg = vec![
        crate::Series {
            label: "L µs, on",
            points: by_p("on", |r| r.l_us),
        },
        crate::Series {
            label: "L µs, off",
            points: by_p("off", |r| r.l_us),
        },
        crate::Series {
            label: "g ns/word, on",
            points: by_p("on", |r| r.a2a.0 * 1e3),
        },
        crate::Series {
            label: "g ns/word, off",
            points: by_p("off", |r| r.a2a.0 * 1e3),
        },
    ];
    let ok: Vec<(usize, MpichParams)> = mpich
        .iter()
        .filter_map(|(p, m)| m.as_ref().ok().map(|m| (*p, *m)))
        .collect();
    if !ok.is_empty() {
        lg.push(crate::Series {
            label: "MPICH barrier µs",
            points: ok.iter().map(|(p, m)| (*p as f64, m.l_us)).collect(),
        });
        lg.push(crate::Series {
            label: "MPICH all-to-all ns/word",
            points: ok.iter().map(|(p, m)| (*p as f64, m.g_us * 1e3)).collect(),
        });
    }
    crate::plot(
        &out.join("bsp-L-g.png"),
        "BSP L and g against p",
        crate::Axis::plain("p"),
        crate::Axis::plain("L (µs), g (ns/word)"),
        &lg,
    )?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_line() {
        let pts: Vec<(f64, f64)> = HS
            .iter()
            .map(|&h| (h as f64, 3.0 + 0.5 * h as f64))
            .collect();
        let (g, l) = fit(&pts);
        assert!((g - 0.5).abs() < 1e-12 && (l - 3.0).abs() < 1e-9, "{g} {l}");
    }

    #[test]
    fn rows_round_trip() {
        let r = BspParams {
            p: 4,
            s_dot: 1000.0,
            s_mm: 2000.0,
            l_us: 2.0,
            a2a: (0.01, 3.0),
            shift: (0.02, 4.0),
            points: vec![],
        };
        let (p, set, v) = parse_row(&csv_row(&r, "on")).expect("row");
        assert_eq!((p, set.as_str()), (4, "on"));
        assert_eq!(v.len(), CSV_HEADER.split(',').count() - 2);
        assert!((v[4] - 3000.0).abs() < 1e-9); // L in flops = 2 µs × 1500 Mflop/s
    }
}
