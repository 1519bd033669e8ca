//! `ferry bench import` end to end on loopback: a tiny sweep whose checksums pass and whose
//! CSV appears, a corrupted transfer that is caught, and a grid file that would put senders and
//! receivers on the same host.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferry-import-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// `ferry bench import ARGS…` (each job capped at 30 s), which must end within `limit`.
fn import(args: &[&str], limit: Duration) -> Output {
    let start = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["bench", "import", "--timeout", "30"])
        .args(args)
        .env_remove("MPIEXEC_TIMEOUT")
        .env_remove("FERRY_RAILS")
        .stdin(Stdio::null())
        .output()
        .expect("ferry runs");
    let took = start.elapsed();
    assert!(took < limit, "ferry bench import {args:?} took {took:?}");
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn sweep_verifies_every_transfer_and_writes_the_table() {
    let dir = scratch("sweep");
    let (out, work) = (dir.join("out"), dir.join("work"));
    let o = import(
        &[
            "--size",
            "4MiB",
            "--packets",
            "16KiB,256KiB",
            "--procs",
            "1,2",
            "--rails",
            "1,2",
            "--out",
            out.to_str().unwrap(),
            "--work-dir",
            work.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{stdout}{stderr}");
    // The seed's table 1 layout: packet sizes across, off / on / gain % under each, a row per P.
    assert!(
        stdout.contains("16 KiB") && stdout.contains("256 KiB"),
        "{stdout}"
    );
    assert!(stdout.contains("off       on   gain %"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("  1 |")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("  2 |")), "{stdout}");

    let summary = std::fs::read_to_string(out.join("import.csv")).expect("import.csv");
    let rows: Vec<&str> = summary.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows[0], "procs,packet_bytes,rails,mbps,gain_pct");
    assert_eq!(rows.len(), 1 + 2 * 2 * 2, "{summary}");
    for row in &rows[1..] {
        let f: Vec<&str> = row.split(',').collect();
        let mbps: f64 = f[3].parse().expect("MB/s");
        assert!(mbps > 0.0, "{row}");
        // Gain only for bonding on.
        assert_eq!(f[2] == "1", f[4].is_empty(), "{row}");
    }
    let jobs = std::fs::read_to_string(out.join("import-jobs.csv")).expect("import-jobs.csv");
    let pairs: Vec<&str> = jobs
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("procs"))
        .collect();
    // (1 + 2 pairs + one aggregate line per job) × 2 packet sizes × 2 rails values.
    assert_eq!(pairs.len(), (2 + 3) * 2 * 2, "{jobs}");
    assert!(pairs
        .iter()
        .all(|l| l.contains(",4194304,") || l.contains(",8388608,")));
    assert!(
        pairs.iter().all(|l| l.split(',').nth(7) == Some("true")),
        "{jobs}"
    );
    assert!(out.join("import.png").exists());
    assert!(summary.contains("# command: "), "{summary}");
    // The generated file and every received file are gone.
    assert_eq!(entries(&work), Vec::<String>::new());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupted_transfer_is_detected() {
    let dir = scratch("corrupt");
    let (out, work) = (dir.join("out"), dir.join("work"));
    let o = import(
        &[
            "--size",
            "1MiB",
            "--packets",
            "16KiB",
            "--procs",
            "2",
            "--rails",
            "1",
            "--corrupt-at",
            "100000",
            "--out",
            out.to_str().unwrap(),
            "--work-dir",
            work.to_str().unwrap(),
        ],
        Duration::from_secs(40),
    );
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    // The last receiver (rank 3 of 4) flipped one byte; it names itself and the packet size.
    assert!(
        stderr.contains("rank 3 (packets of 16 KiB): checksum mismatch"),
        "{stderr}"
    );
    assert!(!stderr.contains("rank 2 (packets"), "{stderr}");
    assert!(!out.join("import.csv").exists());
    assert_eq!(entries(&work), Vec::<String>::new());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_grid_file_must_put_senders_and_receivers_on_two_hosts() {
    let dir = scratch("grid");
    let one_host = "[[cluster]]\nname = \"p\"\nkind = \"public\"\n\
                    [[cluster.host]]\nname = \"p1\"\naddr = \"198.18.1.1\"\nranks = 4\n";
    let two_hosts = "[[cluster]]\nname = \"p\"\nkind = \"public\"\n\
                     [[cluster.host]]\nname = \"p1\"\naddr = \"198.18.1.1\"\nranks = 2\n\
                     [[cluster.host]]\nname = \"p2\"\naddr = \"198.18.1.2\"\nranks = 2\n";
    std::fs::write(dir.join("import-2.toml"), one_host).unwrap();
    let template = dir.join("import-{P}.toml");
    let o = import(
        &[
            "--procs",
            "2",
            "--grid",
            template.to_str().unwrap(),
            "--out",
            dir.join("out").to_str().unwrap(),
        ],
        Duration::from_secs(10),
    );
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("import-2.toml: with P = 2"), "{stderr}");
    assert!(stderr.contains("`ranks = 2`"), "{stderr}");
    // The right shape passes the check (the job itself would need the testbed), and a
    // missing file for another P is named.
    std::fs::write(dir.join("import-2.toml"), two_hosts).unwrap();
    let o = import(
        &[
            "--procs",
            "2,3",
            "--grid",
            template.to_str().unwrap(),
            "--out",
            dir.join("out").to_str().unwrap(),
        ],
        Duration::from_secs(10),
    );
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("import-3.toml"), "{stderr}");
    assert!(!stderr.contains("import-2.toml"), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}
