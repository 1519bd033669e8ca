//! What a results folder records about the run that made it, written the same way by every
//! benchmark (`ferry bench compare`, `ferry bench bsp`, and the driver scripts through
//! `ferry bench record`): `machine.txt` with the command, date, machine, commit and load, and
//! the hash of any benchmark source built for the run (the folder holds data, not code).

use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

/// The name of the record in a results folder.
pub const FILE: &str = "machine.txt";

/// Command, date, machine (`nproc`, kernel, CPU model), git commit and load average, one
/// `key: value` line each.
pub fn machine_record(command: &str) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let dirty = !command_text("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    let mut s = String::new();
    let _ = writeln!(s, "command: {command}");
    let _ = writeln!(s, "date: {}", now_utc());
    let _ = writeln!(s, "nproc: {}", command_text("nproc", &[]));
    let _ = writeln!(s, "kernel: {}", command_text("uname", &["-srm"]));
    let _ = writeln!(s, "cpu: {cpu}");
    let _ = writeln!(s, "load average at start: {}", loadavg());
    let _ = writeln!(
        s,
        "commit: {}{}",
        command_text("git", &["rev-parse", "HEAD"]),
        if dirty {
            " (with uncommitted changes)"
        } else {
            ""
        }
    );
    s
}

/// The record line of a benchmark source built for the run: where it lives in the repository
/// and the SHA-256 of the text that was built, in place of a copy of it.
pub fn source_line(repo_path: &str, text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("source: {repo_path} sha256 {hex}")
}

/// A fresh folder outside the results for building a benchmark source (the source and the
/// executables are tools of the run, not its results), removed when dropped.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// Makes `$TMPDIR/ferry-<tag>-<pid>`.
    pub fn new(tag: &str) -> std::io::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("ferry-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `machine_record(command)` followed by `extra` lines into `dir`'s record, or, if
/// the folder already has one (a later run into the same folder), appends them under a
/// separator.
pub fn write(dir: &Path, command: &str, extra: &[String]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(FILE);
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    if !text.is_empty() {
        text.push_str("---\n");
    }
    text.push_str(&machine_record(command));
    for line in extra {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(path, text)
}

/// Today's date (UTC) as `YYYY-MM-DD`, for default results folders.
pub fn today() -> String {
    let (y, m, d) = civil_from_days((unix_secs() / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Now, UTC, to the second.
pub fn now_utc() -> String {
    let secs = unix_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `/proc/loadavg`'s three averages: other work on the machine skews every figure.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The trimmed standard output of a command, or `?` when it fails.
pub fn command_text(prog: &str, args: &[&str]) -> String {
    Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_map_to_civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_779), (2026, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn a_source_is_recorded_by_its_sha256() {
        // sha256("abc") from FIPS 180-2's examples.
        assert_eq!(
            source_line("x.c", "abc"),
            "source: x.c sha256 ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_second_record_is_appended_under_a_separator() {
        let scratch = Scratch::new("record-test").unwrap();
        let dir = scratch.path();
        write(dir, "first", &["extra: 1".into()]).unwrap();
        write(dir, "second", &[]).unwrap();
        let text = std::fs::read_to_string(dir.join(FILE)).unwrap();
        assert!(text.starts_with("command: first\n"), "{text}");
        assert!(text.contains("extra: 1\n---\ncommand: second\n"), "{text}");
    }
}
