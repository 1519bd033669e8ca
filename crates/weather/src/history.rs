//! The history file: one JSON object per line, one line per measured matrix, appended.
//!
//! ```text
//! {"time":1795000000.5,"round":0,"transport":"shm","host":"node1","n":2,
//!  "latency":[null,1.2e-6,1.1e-6,null],"bandwidth":[null,5.1e9,4.9e9,null]}
//! ```
//! (on one line). Fields are only ever added; readers skip lines they cannot parse, so a
//! history survives an interrupted write and older ferry versions.

use crate::matrix::Sample;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;

/// One line of the history file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Seconds since the Unix epoch when the measurement ended.
    pub time: f64,
    /// Round within its `ferry weather` run, from 0.
    pub round: u64,
    /// Transport between the ranks (`shm`, `tcp`).
    pub transport: String,
    /// Host of rank 0.
    pub host: String,
    /// The matrix.
    #[serde(flatten)]
    pub sample: Sample,
}

/// Appends `record` as one line to `path`, creating the file and its directories.
pub fn append(path: &Path, record: &Record) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
    line.push('\n');
    // One write of the whole line: concurrent appenders do not interleave within it.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

/// Every record of `path` that parses, in file order; a missing file is an empty history.
pub fn read(path: &Path) -> std::io::Result<Vec<Record>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    let mut out = vec![];
    for line in std::io::BufReader::new(file).lines() {
        if let Ok(record) = serde_json::from_str::<Record>(&line?) {
            out.push(record);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_then_read_skips_junk() {
        let dir = std::env::temp_dir().join(format!("ferry-weather-test-{}", std::process::id()));
        let path = dir.join("sub").join("history.jsonl");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(read(&path).unwrap().is_empty());
        let mut sample = Sample::empty(2);
        sample.latency[1] = 1e-6;
        sample.bandwidth[2] = 2e9;
        let record = Record {
            time: 1.5,
            round: 0,
            transport: "shm".into(),
            host: "h".into(),
            sample,
        };
        append(&path, &record).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"truncated\n")
            .unwrap();
        append(
            &path,
            &Record {
                round: 1,
                ..record.clone()
            },
        )
        .unwrap();
        let back = read(&path).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].round, 1);
        assert_eq!(back[0].sample.latency[1], 1e-6);
        assert!(back[0].sample.latency[0].is_nan());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
