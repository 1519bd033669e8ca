//! `bench/results/` holds data: measurements, plots and each run's record, never the code that
//! made them (driver scripts live in `bench/scripts/`, benchmark sources in the crates, and a
//! run records a source's hash instead of a copy). Every results folder records how it was made
//! (`machine.txt`, or a README for older runs).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const CODE: [&str; 12] = [
    "c", "h", "cc", "cpp", "rs", "sh", "bash", "py", "pl", "f", "f90", "f08",
];

fn results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/results")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable results folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn why_code(path: &Path) -> Option<&'static str> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if CODE.contains(&ext) || path.file_name().is_some_and(|n| n == "Makefile") {
        return Some("source code or a script");
    }
    let meta = std::fs::metadata(path).ok()?;
    if meta.permissions().mode() & 0o111 != 0 {
        return Some("an executable file");
    }
    let head = std::fs::read(path).ok()?;
    if head.starts_with(b"\x7fELF") {
        return Some("a compiled program");
    }
    if head.starts_with(b"#!") {
        return Some("a script");
    }
    None
}

#[test]
fn result_folders_hold_data_only() {
    let mut all = vec![];
    files(&results(), &mut all);
    let bad: Vec<String> = all
        .iter()
        .filter_map(|p| why_code(p).map(|why| format!("{}: {why}", p.display())))
        .collect();
    assert!(
        bad.is_empty(),
        "results are data; move these to bench/scripts/ or record their hash:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_result_folder_records_its_run() {
    let mut missing = vec![];
    for entry in std::fs::read_dir(results()).expect("bench/results") {
        let dir = entry.expect("entry").path();
        if !dir.is_dir() {
            continue;
        }
        let recorded = ["machine.txt", "README.md", "README.txt"]
            .iter()
            .any(|name| dir.join(name).is_file());
        if !recorded {
            missing.push(dir.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "results folders without a record (command, commit, date, load) in machine.txt:\n{}",
        missing.join("\n")
    );
}
