//! Cost matrices as CSV, so a measured matrix (for example from `ferry weather`) can be fed to
//! `ferry sim run` and a simulated run compared with a real one.
//!
//! Format: one line per ordered pair, `from,to,latency_s,bandwidth_bytes_per_s`; blank lines,
//! lines starting with `#` and a header line starting with `from` are skipped. Every ordered pair
//! of distinct ranks `0..n` must appear once, where `n` is one more than the largest rank.

use ferry_sched::hetero::{CostMatrix, CostModel};
use std::fmt::Write as _;

/// Parses the CSV text of a matrix.
pub fn parse(text: &str) -> Result<CostMatrix, String> {
    let mut rows = vec![];
    for (k, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("from") {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}: {line:?}", k + 1);
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [from, to, latency, bandwidth] = fields[..] else {
            return Err(bad("expected from,to,latency_s,bandwidth_bytes_per_s"));
        };
        let from: usize = from.parse().map_err(|_| bad("bad rank"))?;
        let to: usize = to.parse().map_err(|_| bad("bad rank"))?;
        let latency: f64 = latency.parse().map_err(|_| bad("bad latency"))?;
        let bandwidth: f64 = bandwidth.parse().map_err(|_| bad("bad bandwidth"))?;
        let valid = latency.is_finite() && latency >= 0.0 && bandwidth > 0.0;
        if from == to || !valid {
            return Err(bad("need from ≠ to, latency ≥ 0 and bandwidth > 0"));
        }
        rows.push((from, to, latency, bandwidth));
    }
    let n = rows.iter().map(|r| r.0.max(r.1) + 1).max().unwrap_or(0);
    let mut seen = vec![false; n * n];
    let mut m = CostMatrix::uniform(n, 0.0, f64::INFINITY);
    for (from, to, latency, bandwidth) in rows {
        if std::mem::replace(&mut seen[from * n + to], true) {
            return Err(format!("pair {from} → {to} appears twice"));
        }
        m.set(from, to, latency, bandwidth);
    }
    if let Some(k) = (0..n * n).find(|&k| k / n != k % n && !seen[k]) {
        return Err(format!("pair {} → {} is missing", k / n, k % n));
    }
    Ok(m)
}

/// Formats any cost model as CSV text that [`parse`] reads back.
pub fn format(model: &dyn CostModel) -> String {
    let mut out = String::from("from,to,latency_s,bandwidth_bytes_per_s\n");
    for i in 0..model.size() {
        for j in (0..model.size()).filter(|&j| j != i) {
            let _ = writeln!(
                out,
                "{i},{j},{:e},{:e}",
                model.latency(i, j),
                model.bandwidth(i, j)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let m = CostMatrix::from_fn(4, |i, j| {
            (1e-4 * (i + 1) as f64, 1e6 * (j + 1) as f64 + 0.5)
        });
        assert_eq!(parse(&format(&m)).unwrap(), m);
        assert!(parse("0,1,1e-3,1e6\n")
            .unwrap_err()
            .contains("1 → 0 is missing"));
        assert!(parse("0,1,1e-3,0\n1,0,1e-3,1e6").is_err());
        assert!(parse("0,1,x,1\n").is_err());
    }
}
