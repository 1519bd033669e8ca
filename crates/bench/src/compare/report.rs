//! mpibench's output ([`parse_output`]), medians over rounds ([`summarize`]), each figure beside
//! the best peer's ([`best_peer`], [`ratio_table`]) and the CSV files and plots of a results
//! folder.

use super::{Impl, OPS};
use crate::{plot, Axis, Series};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Point-to-point sizes that the ratio table shows (the CSV files hold the whole sweep).
const TABLE_P2P_SIZES: [usize; 5] = [8, 1 << 10, 64 << 10, 1 << 20, 16 << 20];

/// One CSV row of mpibench.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Mode: one of [`OPS`].
    pub op: String,
    /// Ranks in the job.
    pub ranks: u32,
    /// Message size (alltoall: per destination).
    pub bytes: usize,
    /// Median time per operation over trials, µs.
    pub usec: f64,
    /// Algorithm bandwidth, MB/s.
    pub mbps: f64,
    /// Fastest trial, µs.
    pub usec_min: f64,
    /// Bus bandwidth (nccl-tests), MB/s.
    pub busbw: f64,
    /// Timed calls per trial.
    pub reps: u64,
}

/// Parses mpibench's stdout: `#` comments, the header and the rows; anything else is an error
/// naming the line.
pub fn parse_output(text: &str) -> Result<Vec<Row>, String> {
    let mut rows = vec![];
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with("op,") {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let bad = || format!("bad mpibench line {line:?}");
        if f.len() != 8 || !OPS.contains(&f[0]) {
            return Err(bad());
        }
        let num = |i: usize| f[i].parse::<f64>().map_err(|_| bad());
        rows.push(Row {
            op: f[0].to_string(),
            ranks: f[1].parse().map_err(|_| bad())?,
            bytes: f[2].parse().map_err(|_| bad())?,
            usec: num(3)?,
            mbps: num(4)?,
            usec_min: num(5)?,
            busbw: num(6)?,
            reps: f[7].parse().map_err(|_| bad())?,
        });
    }
    Ok(rows)
}

/// Where a point sits in reports: op order, ranks, bytes.
pub type Key = (usize, u32, usize);

fn key(row: &Row) -> Key {
    let op = OPS.iter().position(|o| *o == row.op).unwrap_or(OPS.len());
    (op, row.ranks, row.bytes)
}

/// Medians over rounds of one point of one implementation.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Median of the rounds' median times, µs.
    pub usec: f64,
    /// Fastest trial of any round, µs.
    pub usec_min: f64,
    /// Best round's median, µs: what the implementation does when the shared machine leaves
    /// it alone (the median over rounds is the figure to compare; this one shows noise).
    pub usec_best: f64,
    /// Median bandwidth, MB/s.
    pub mbps: f64,
    /// Median bus bandwidth, MB/s.
    pub busbw: f64,
    /// Rounds that measured this point.
    pub runs: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Medians over rounds per implementation and point.
pub fn summarize(rows: &[(Impl, u32, Row)]) -> BTreeMap<(Key, Impl), Point> {
    let mut groups: BTreeMap<(Key, Impl), Vec<&Row>> = BTreeMap::new();
    for (imp, _, row) in rows {
        groups.entry((key(row), *imp)).or_default().push(row);
    }
    groups
        .into_iter()
        .map(|(k, rs)| {
            let point = Point {
                usec: median(rs.iter().map(|r| r.usec).collect()),
                usec_min: rs.iter().map(|r| r.usec_min).fold(f64::INFINITY, f64::min),
                usec_best: rs.iter().map(|r| r.usec).fold(f64::INFINITY, f64::min),
                mbps: median(rs.iter().map(|r| r.mbps).collect()),
                busbw: median(rs.iter().map(|r| r.busbw).collect()),
                runs: rs.len(),
            };
            (k, point)
        })
        .collect()
}

fn fmt_num(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() && x >= 100.0 => format!("{x:.0}"),
        Some(x) if x.is_finite() && x >= 10.0 => format!("{x:.1}"),
        Some(x) if x.is_finite() => format!("{x:.2}"),
        _ => "–".into(),
    }
}

/// How a figure of mode `op` reads in the table: its unit and whether more is better.
fn unit_of(op: &str) -> (&'static str, bool) {
    match op {
        "bw" => ("MB/s", true),
        "msgrate" => ("M msg/s", true),
        _ => ("µs", false),
    }
}

/// The figure of `op` that the table shows: MB/s for `bw`, million messages per second for
/// `msgrate` (one message every `usec`), µs otherwise.
fn figure(op: &str, p: &Point) -> f64 {
    match op {
        "bw" => p.mbps,
        "msgrate" if p.usec > 0.0 => 1.0 / p.usec,
        "msgrate" => f64::NAN,
        _ => p.usec,
    }
}

/// The best peer (not ferry) at `key` and its figure: the lowest time, or the highest
/// bandwidth or rate.
pub fn best_peer(summary: &BTreeMap<(Key, Impl), Point>, key: Key) -> Option<(Impl, f64)> {
    let op = OPS.get(key.0)?;
    let (_, more_is_better) = unit_of(op);
    Impl::ALL
        .iter()
        .filter(|&&i| i != Impl::Ferry)
        .filter_map(|&i| Some((i, figure(op, summary.get(&(key, i))?))))
        .filter(|(_, v)| v.is_finite() && *v > 0.0)
        .reduce(|a, b| {
            let b_better = if more_is_better { b.1 > a.1 } else { b.1 < a.1 };
            if b_better {
                b
            } else {
                a
            }
        })
}

/// The ratio table as Markdown: per point, each implementation's figure (see [`unit_of`]), the
/// best peer and ferry's figure over the best peer's.
pub fn ratio_table(summary: &BTreeMap<(Key, Impl), Point>) -> String {
    let mut keys: Vec<Key> = summary.keys().map(|(k, _)| *k).collect();
    keys.dedup();
    let present: Vec<Impl> = Impl::ALL
        .into_iter()
        .filter(|i| summary.keys().any(|(_, j)| j == i))
        .collect();
    let mut s = String::from("| op | ranks | bytes | unit |");
    for i in &present {
        let _ = write!(s, " {} |", i.label());
    }
    s.push_str(" best peer | ferry/best |\n|---|---:|---:|---|");
    s.push_str(&"---:|".repeat(present.len()));
    s.push_str("---|---:|\n");
    for k in keys {
        let (op, ranks, bytes) = k;
        let name = OPS.get(op).copied().unwrap_or("?");
        if op < 3 && !TABLE_P2P_SIZES.contains(&bytes) {
            continue;
        }
        let (unit, _) = unit_of(name);
        let value = |imp: Impl| summary.get(&(k, imp)).map(|p| figure(name, p));
        let _ = write!(s, "| {name} | {ranks} | {bytes} | {unit} |");
        for &i in &present {
            let _ = write!(s, " {} |", fmt_num(value(i)));
        }
        let best = best_peer(summary, k);
        let ratio = match (value(Impl::Ferry), best) {
            (Some(f), Some((_, b))) if f.is_finite() => format!("{:.2}", f / b),
            _ => "–".into(),
        };
        let _ = writeln!(s, " {} | {ratio} |", best.map_or("–", |(i, _)| i.label()));
    }
    s
}

/// `results.csv`: every row of every round.
pub(super) fn write_results(out: &Path, rows: &[(Impl, u32, Row)]) -> std::io::Result<()> {
    let mut s = String::from("impl,round,op,ranks,bytes,usec,mbps,usec_min,busbw,reps\n");
    for (imp, round, r) in rows {
        let _ = writeln!(
            s,
            "{},{round},{},{},{},{},{},{},{},{}",
            imp.name(),
            r.op,
            r.ranks,
            r.bytes,
            r.usec,
            r.mbps,
            r.usec_min,
            r.busbw,
            r.reps
        );
    }
    std::fs::write(out.join("results.csv"), s)
}

/// `summary.csv`: the medians.
pub(super) fn write_summary(
    out: &Path,
    summary: &BTreeMap<(Key, Impl), Point>,
) -> std::io::Result<()> {
    let mut s = String::from("op,ranks,bytes,impl,usec,usec_min,usec_best,mbps,busbw,runs\n");
    for (((op, ranks, bytes), imp), p) in summary {
        let _ = writeln!(
            s,
            "{},{ranks},{bytes},{},{:.4},{:.4},{:.4},{:.3},{:.3},{}",
            OPS[*op],
            imp.name(),
            p.usec,
            p.usec_min,
            p.usec_best,
            p.mbps,
            p.busbw,
            p.runs
        );
    }
    std::fs::write(out.join("summary.csv"), s)
}

/// PNG plots: ping-pong latency and bw bandwidth against size (two ranks), each collective's
/// latency against size per implementation and job size, barrier against job size.
pub(super) fn draw(out: &Path, summary: &BTreeMap<(Key, Impl), Point>) {
    let impls: Vec<Impl> = {
        let mut v: Vec<Impl> = summary.keys().map(|(_, i)| *i).collect();
        v.sort();
        v.dedup();
        v
    };
    let mut ranks: Vec<u32> = summary.keys().map(|((_, r, _), _)| *r).collect();
    ranks.sort_unstable();
    ranks.dedup();
    // (x, y) of one implementation: x from the key, y from the point.
    let points = |imp: Impl, pick: &dyn Fn(&Key) -> Option<f64>, f: fn(&Point) -> f64| {
        summary
            .iter()
            .filter(|((_, i), _)| *i == imp)
            .filter_map(|((k, _), p)| pick(k).map(|x| (x, f(p))))
            .collect::<Vec<_>>()
    };
    let by_size =
        |op: usize, r: u32| move |k: &Key| (k.0 == op && k.1 == r).then_some(k.2.max(1) as f64);
    let usec: fn(&Point) -> f64 = |p| p.usec;
    let mbps: fn(&Point) -> f64 = |p| p.mbps;
    let size_axis = Axis::bytes("message size");
    let chart =
        |file: String, title: String, x: Axis, y: Axis, series: Vec<(String, Vec<(f64, f64)>)>| {
            let series: Vec<Series> = series
                .iter()
                .filter(|(_, p)| !p.is_empty())
                .map(|(label, p)| Series {
                    label,
                    points: p.clone(),
                })
                .collect();
            let path = out.join(file);
            if !series.is_empty() {
                if let Err(e) = plot(&path, &title, x, y, &series) {
                    eprintln!("ferry bench compare: cannot draw {}: {e}", path.display());
                }
            }
        };
    for (op, name) in OPS.iter().enumerate() {
        match *name {
            // One point per implementation: the table says it better than a chart.
            "msgrate" => {}
            "pingpong" | "bw" => {
                let (file, y, f) = if op == 0 {
                    (
                        "pingpong-latency.png",
                        Axis::micros("half round trip"),
                        usec,
                    )
                } else {
                    ("bw-bandwidth.png", Axis::plain("bandwidth (MB/s)"), mbps)
                };
                let series = impls
                    .iter()
                    .map(|&i| (i.label().to_string(), points(i, &by_size(op, 2), f)))
                    .collect();
                chart(
                    file.into(),
                    format!("{name}: 2 ranks"),
                    size_axis,
                    y,
                    series,
                );
            }
            "barrier" => {
                let by_ranks = |k: &Key| (k.0 == op).then_some(f64::from(k.1));
                let series = impls
                    .iter()
                    .map(|&i| (i.label().to_string(), points(i, &by_ranks, usec)))
                    .collect();
                chart(
                    "barrier-latency.png".into(),
                    "barrier latency".into(),
                    Axis::plain("ranks"),
                    Axis::micros("time per barrier"),
                    series,
                );
            }
            _ => {
                let mut series = vec![];
                for &r in &ranks {
                    for &i in &impls {
                        let label = format!("{} {r} ranks", i.label());
                        series.push((label, points(i, &by_size(op, r), usec)));
                    }
                }
                chart(
                    format!("{name}-latency.png"),
                    format!("{name} latency"),
                    size_axis,
                    Axis::micros("time per operation"),
                    series,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "# mpibench ranks=2\nop,ranks,bytes,usec,mbps,usec_min,busbw,reps\n\
        pingpong,2,8,0.4,20.0,0.39,20.0,2633\nbarrier,2,0,0.9,0,0.9,0,2048\n\
        msgrate,2,8,0.25,32.0,0.24,32.0,900\n";

    #[test]
    fn parses_mpibench_output() {
        let rows = parse_output(OUTPUT).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[2].op.as_str(), rows[2].usec), ("msgrate", 0.25));
        assert_eq!(
            (rows[0].op.as_str(), rows[0].bytes, rows[0].reps),
            ("pingpong", 8, 2633)
        );
        assert!(parse_output("pingpong,2,8,x,1,1,1,1").is_err());
        assert!(parse_output("mystery,2,8,1,1,1,1,1").is_err());
    }

    fn row(op: &str, bytes: usize, usec: f64) -> Row {
        Row {
            op: op.into(),
            ranks: 2,
            bytes,
            usec,
            mbps: bytes as f64 / usec,
            usec_min: usec / 2.0,
            busbw: 0.0,
            reps: 1,
        }
    }

    #[test]
    fn medians_and_ratios() {
        let rows = vec![
            (Impl::Ferry, 0, row("pingpong", 8, 1.0)),
            (Impl::Ferry, 1, row("pingpong", 8, 3.0)),
            (Impl::Ferry, 2, row("pingpong", 8, 2.0)),
            (Impl::Mpich, 0, row("pingpong", 8, 4.0)),
        ];
        let s = summarize(&rows);
        let f = &s[&((0, 2, 8), Impl::Ferry)];
        assert_eq!(
            (f.usec, f.usec_min, f.usec_best, f.runs),
            (2.0, 0.5, 1.0, 3)
        );
        let table = ratio_table(&s);
        assert!(
            table.contains("| pingpong | 2 | 8 | µs | 2.00 | 4.00 | MPICH (Debian) | 0.50 |"),
            "{table}"
        );
    }

    #[test]
    fn the_best_peer_is_the_fastest_or_the_highest_rate() {
        let rows = vec![
            (Impl::Ferry, 0, row("pingpong", 8, 1.0)),
            (Impl::Mpich5, 0, row("pingpong", 8, 0.5)),
            (Impl::Ompi5, 0, row("pingpong", 8, 0.25)),
            (Impl::Mpich, 0, row("pingpong", 8, 2.0)),
            // 0.5 µs per message is 2 M msg/s; the faster peer has the higher rate.
            (Impl::Ferry, 0, row("msgrate", 8, 0.5)),
            (Impl::Mpich5, 0, row("msgrate", 8, 0.25)),
            (Impl::Ompi5, 0, row("msgrate", 8, 1.0)),
            // 1024 B in 2 µs is 512 MB/s; the highest bandwidth wins.
            (Impl::Ferry, 0, row("bw", 1024, 2.0)),
            (Impl::Mpich5, 0, row("bw", 1024, 4.0)),
            (Impl::Ompi5, 0, row("bw", 1024, 8.0)),
            // A peer alone with no ferry figure still has a best peer, and no ratio.
            (Impl::Ompi5, 0, row("barrier", 0, 3.0)),
        ];
        let s = summarize(&rows);
        let at = |op: &str, bytes| {
            let k = (OPS.iter().position(|o| *o == op).unwrap(), 2, bytes);
            best_peer(&s, k)
        };
        assert_eq!(at("pingpong", 8), Some((Impl::Ompi5, 0.25)));
        assert_eq!(at("msgrate", 8), Some((Impl::Mpich5, 4.0)));
        assert_eq!(at("bw", 1024), Some((Impl::Mpich5, 256.0)));
        let table = ratio_table(&s);
        let header = table.lines().next().unwrap();
        assert_eq!(
            header,
            "| op | ranks | bytes | unit | ferry | MPICH 5.0.2 | Open MPI 5.0.11 | \
             MPICH (Debian) | best peer | ferry/best |"
        );
        for line in [
            "| pingpong | 2 | 8 | µs | 1.00 | 0.50 | 0.25 | 2.00 | Open MPI 5.0.11 | 4.00 |",
            "| msgrate | 2 | 8 | M msg/s | 2.00 | 4.00 | 1.00 | – | MPICH 5.0.2 | 0.50 |",
            "| bw | 2 | 1024 | MB/s | 512 | 256 | 128 | – | MPICH 5.0.2 | 2.00 |",
            "| barrier | 2 | 0 | µs | – | – | 3.00 | – | Open MPI 5.0.11 | – |",
        ] {
            assert!(table.contains(line), "no {line}\nin\n{table}");
        }
    }
}
