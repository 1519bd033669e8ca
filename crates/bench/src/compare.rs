//! Side by side: one C benchmark source ([`SOURCE`], `crates/bench/c/mpibench.c`) built with
//! the `mpicc` of each MPI implementation found (ferry, MPICH, Open MPI) and run interleaved in
//! one go, so that drift on a shared machine hits every implementation alike.
//!
//! [`run`] does it all: finds and builds each implementation ([`Toolchain::find`]), runs
//! `rounds` × `ranks` × implementations jobs with a timeout each (two-rank jobs run every mode,
//! larger ones the collectives only: point-to-point between two of eight oversubscribed ranks
//! would measure the scheduler), keeps every raw output, takes the median over rounds, and
//! writes `results.csv` (every row of every run), `summary.csv` (medians), `table.md` (ratios
//! against MPICH and Open MPI), PNG plots, `runs.csv` (each job's time, outcome and the load
//! average before it) and `machine.txt` (command, machine, commit, versions, load) into the
//! results directory, with the benchmark's stdout and stderr of every job under `raw/`.
//!
//! Ratios are ferry's figure over the peer's: for latencies (µs) ≤ 1.0 means ferry is as fast
//! or faster, for the bandwidth of `bw` (MB/s) ≥ 1.0 does.

use crate::record::{self, command_text, loadavg, now_utc};
use crate::{plot, Axis, Series};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The benchmark source, built against every implementation.
pub const SOURCE: &str = include_str!("../c/mpibench.c");

/// Benchmark modes in report order; the first two are point to point.
pub const OPS: [&str; 6] = [
    "pingpong",
    "bw",
    "barrier",
    "bcast",
    "allreduce",
    "alltoall",
];

/// Point-to-point sizes that the ratio table shows (the CSV files hold the whole sweep).
const TABLE_P2P_SIZES: [usize; 5] = [8, 1 << 10, 64 << 10, 1 << 20, 16 << 20];

/// An MPI implementation that `compare` knows how to build and launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Impl {
    /// ferry's libmpi through `crates/mpi/bin/mpicc` and `mpiexec`.
    Ferry,
    /// Debian's MPICH (`mpicc.mpich`, `mpiexec.mpich`), with its default transports.
    Mpich,
    /// Debian's Open MPI (`mpicc.openmpi`, `mpiexec.openmpi`).
    OpenMpi,
}

impl Impl {
    /// All, in run order.
    pub const ALL: [Impl; 3] = [Impl::Ferry, Impl::Mpich, Impl::OpenMpi];

    /// Short name used in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Ferry => "ferry",
            Impl::Mpich => "mpich",
            Impl::OpenMpi => "openmpi",
        }
    }

    /// Name for tables and plots.
    pub fn label(self) -> &'static str {
        match self {
            Impl::Ferry => "ferry",
            Impl::Mpich => "MPICH",
            Impl::OpenMpi => "Open MPI",
        }
    }

    /// Parses [`Impl::name`] (also `ompi`).
    pub fn parse(text: &str) -> Option<Impl> {
        match text.trim().to_ascii_lowercase().as_str() {
            "ferry" => Some(Impl::Ferry),
            "mpich" => Some(Impl::Mpich),
            "openmpi" | "ompi" | "open-mpi" => Some(Impl::OpenMpi),
            _ => None,
        }
    }
}

/// How to build and launch with one implementation.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// Which implementation.
    pub imp: Impl,
    /// Compiler wrapper.
    pub mpicc: PathBuf,
    /// Launcher, called as `mpiexec [launch_args] -n N program args`.
    pub mpiexec: PathBuf,
    /// Launcher options before `-n`.
    pub launch_args: Vec<String>,
    /// Environment for the launcher.
    pub env: Vec<(String, String)>,
}

/// Why an implementation cannot take part.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// Its compiler wrapper or launcher is not installed.
    #[error("{imp} is missing: {why}")]
    Missing {
        /// Which implementation.
        imp: &'static str,
        /// What is missing and how to get it.
        why: String,
    },
    /// The benchmark does not compile or link with it.
    #[error("{imp}: building mpibench failed (see {log}):\n{output}")]
    Build {
        /// Which implementation.
        imp: &'static str,
        /// The compiler's log file.
        log: String,
        /// The last lines of the compiler's output.
        output: String,
    },
    /// Reading or writing the results directory failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `crates/mpi/bin/<tool>` in the first ancestor of `start` that has it.
fn in_repo(start: &Path, tool: &str) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|d| d.join("crates/mpi/bin").join(tool))
        .find(|p| p.is_file())
}

impl Toolchain {
    /// Finds the tools of `imp`. ferry's wrapper is `$FERRY_MPICC` or `ferry_mpicc`, else
    /// `crates/mpi/bin/mpicc` above the current directory or above the running binary; its
    /// launcher is `$FERRY_MPIEXEC` or the `mpiexec` next to the wrapper.
    pub fn find(imp: Impl, ferry_mpicc: Option<&Path>) -> Result<Toolchain, CompareError> {
        let missing = |why: String| CompareError::Missing {
            imp: imp.name(),
            why,
        };
        let system = |cc: &str, run: &str, pkg: &str| -> Result<(PathBuf, PathBuf), CompareError> {
            match (on_path(cc), on_path(run)) {
                (Some(c), Some(r)) => Ok((c, r)),
                _ => Err(missing(format!(
                    "{cc} or {run} not on PATH (apt-get install -y {pkg})"
                ))),
            }
        };
        match imp {
            Impl::Ferry => {
                let mpicc = std::env::var_os("FERRY_MPICC")
                    .map(PathBuf::from)
                    .or_else(|| ferry_mpicc.map(Path::to_path_buf))
                    .or_else(|| {
                        let cwd = std::env::current_dir().ok()?;
                        in_repo(&cwd, "mpicc")
                    })
                    .or_else(|| {
                        let exe = std::env::current_exe().ok()?;
                        in_repo(&exe, "mpicc")
                    })
                    .ok_or_else(|| {
                        missing(
                            "no crates/mpi/bin/mpicc above this directory or the ferry binary \
                             (set FERRY_MPICC)"
                                .into(),
                        )
                    })?;
                if !mpicc.is_file() {
                    return Err(missing(format!("{} does not exist", mpicc.display())));
                }
                let mpiexec = std::env::var_os("FERRY_MPIEXEC")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| mpicc.with_file_name("mpiexec"));
                if !mpiexec.is_file() {
                    return Err(missing(format!(
                        "{} does not exist (set FERRY_MPIEXEC)",
                        mpiexec.display()
                    )));
                }
                Ok(Toolchain {
                    imp,
                    mpicc,
                    mpiexec,
                    launch_args: vec![],
                    env: vec![],
                })
            }
            Impl::Mpich => {
                let (mpicc, mpiexec) = system("mpicc.mpich", "mpiexec.mpich", "mpich")?;
                Ok(Toolchain {
                    imp,
                    mpicc,
                    mpiexec,
                    launch_args: vec![],
                    env: vec![],
                })
            }
            Impl::OpenMpi => {
                let (mpicc, mpiexec) = system(
                    "mpicc.openmpi",
                    "mpiexec.openmpi",
                    "openmpi-bin libopenmpi-dev",
                )?;
                let header = Path::new("/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h");
                if !header.exists() && on_path("ompi_info").is_none() {
                    return Err(missing(
                        "Open MPI's headers are not installed (apt-get install -y libopenmpi-dev)"
                            .into(),
                    ));
                }
                Ok(Toolchain {
                    imp,
                    mpicc,
                    mpiexec,
                    // More ranks than cores is the point of the 4- and 8-rank runs.
                    launch_args: vec!["--oversubscribe".into()],
                    env: [
                        ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
                        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
                    ]
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                })
            }
        }
    }

    /// Compiles `source` into `exe` with `-O2`; the compiler's output goes to `log`.
    pub fn build(&self, source: &Path, exe: &Path, log: &Path) -> Result<(), CompareError> {
        let out = Command::new(&self.mpicc)
            .arg("-O2")
            .arg("-o")
            .arg(exe)
            .arg(source)
            .stdin(Stdio::null())
            .output()?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        std::fs::write(log, &text)?;
        if out.status.success() && exe.is_file() {
            return Ok(());
        }
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        Err(CompareError::Build {
            imp: self.imp.name(),
            log: log.display().to_string(),
            output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        })
    }

    /// What the wrapper runs (`-show` / `-showme`) and the implementation's version, for the
    /// record.
    pub fn describe(&self) -> String {
        let first_lines = |prog: &Path, args: &[&str], n: usize| {
            Command::new(prog)
                .args(args)
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .output()
                .map(|o| {
                    let text = String::from_utf8_lossy(&o.stdout).into_owned()
                        + &String::from_utf8_lossy(&o.stderr);
                    text.lines().take(n).collect::<Vec<_>>().join(" | ")
                })
                .unwrap_or_else(|e| format!("({e})"))
        };
        let (show, version) = match self.imp {
            Impl::Ferry => (
                first_lines(&self.mpicc, &["-show"], 3),
                "ferry (this commit)".to_string(),
            ),
            Impl::Mpich => (
                first_lines(&self.mpicc, &["-show"], 3),
                on_path("mpichversion")
                    .map(|p| first_lines(&p, &[], 3))
                    .unwrap_or_default(),
            ),
            Impl::OpenMpi => (
                first_lines(&self.mpicc, &["-showme"], 3),
                first_lines(&self.mpiexec, &["--version"], 1),
            ),
        };
        format!(
            "{}: mpicc={} mpiexec={} {}\n  compile: {show}\n  version: {version}\n  env: {:?}",
            self.imp.label(),
            self.mpicc.display(),
            self.mpiexec.display(),
            self.launch_args.join(" "),
            self.env
        )
    }
}

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

/// The ratio table as Markdown: per point, each implementation's figure (MB/s for `bw`, µs
/// otherwise) and ferry's over MPICH's and Open MPI's.
pub fn ratio_table(summary: &BTreeMap<(Key, Impl), Point>) -> String {
    let mut keys: Vec<Key> = summary.keys().map(|(k, _)| *k).collect();
    keys.dedup();
    let mut s = String::new();
    s.push_str(
        "| op | ranks | bytes | unit | ferry | MPICH | Open MPI | ferry/MPICH | ferry/Open MPI |\n",
    );
    s.push_str("|---|---:|---:|---|---:|---:|---:|---:|---:|\n");
    for k in keys {
        let (op, ranks, bytes) = k;
        if op < 2 && !TABLE_P2P_SIZES.contains(&bytes) {
            continue;
        }
        let bw = OPS[op] == "bw";
        let value = |imp: Impl| {
            summary
                .get(&(k, imp))
                .map(|p| if bw { p.mbps } else { p.usec })
        };
        let ratio = |peer: Impl| match (value(Impl::Ferry), value(peer)) {
            (Some(f), Some(p)) if p > 0.0 => format!("{:.2}", f / p),
            _ => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {ranks} | {bytes} | {} | {} | {} | {} | {} | {} |",
            OPS[op],
            if bw { "MB/s" } else { "µs" },
            fmt_num(value(Impl::Ferry)),
            fmt_num(value(Impl::Mpich)),
            fmt_num(value(Impl::OpenMpi)),
            ratio(Impl::Mpich),
            ratio(Impl::OpenMpi),
        );
    }
    s
}

/// What to run; see `ferry bench compare --help`.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// Implementations, in the order they run within a round.
    pub impls: Vec<Impl>,
    /// Leave out implementations that are missing or do not build, with a message, instead of
    /// failing.
    pub skip_missing: bool,
    /// Job sizes.
    pub ranks: Vec<u32>,
    /// Rounds: every implementation runs once per round, interleaved.
    pub rounds: u32,
    /// Tiny sweep (mpibench `-q`) for smoke tests.
    pub quick: bool,
    /// Results directory.
    pub out: PathBuf,
    /// Longest one job may take before its processes are killed.
    pub timeout: Duration,
    /// Time budget per point in seconds (mpibench `-b`); `None` keeps mpibench's default.
    pub budget: Option<f64>,
    /// Largest point-to-point message.
    pub p2p_max: usize,
    /// Collective message sizes.
    pub coll_sizes: Vec<usize>,
    /// ferry's mpicc if not found by itself (see [`Toolchain::find`]).
    pub ferry_mpicc: Option<PathBuf>,
    /// The command line, for the record.
    pub command: String,
}

/// What a comparison produced.
#[derive(Debug)]
pub struct Outcome {
    /// Implementations that ran.
    pub ran: Vec<Impl>,
    /// Implementations left out, and why.
    pub skipped: Vec<(Impl, String)>,
    /// Jobs that failed or timed out (described), with their partial rows kept.
    pub failures: Vec<String>,
    /// Medians.
    pub summary: BTreeMap<(Key, Impl), Point>,
    /// The Markdown ratio table.
    pub table: String,
}

/// Command, date, machine (`nproc`, kernel, CPU model), git commit and the toolchains.
fn machine_record(
    config: &CompareConfig,
    tools: &[Toolchain],
    skipped: &[(Impl, String)],
) -> String {
    let mut s = record::machine_record(&config.command);
    s.push_str(&record::source_line("crates/bench/c/mpibench.c", SOURCE));
    s.push('\n');
    let _ = writeln!(
        s,
        "rounds: {}, ranks: {:?}, quick: {}, budget: {:?}, timeout: {:?}, p2p max: {}, collective sizes: {:?}",
        config.rounds, config.ranks, config.quick, config.budget, config.timeout, config.p2p_max, config.coll_sizes
    );
    for t in tools {
        let _ = writeln!(s, "{}", t.describe());
    }
    for (imp, why) in skipped {
        let _ = writeln!(s, "skipped {}: {why}", imp.label());
    }
    s
}

/// Runs `program` with `args` and `env`, stdout and stderr into files, in a process group of
/// its own that is killed whole after `timeout`. Returns `Ok(None)` on a timeout.
fn run_with_timeout(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    stdout: &Path,
    stderr: &Path,
    timeout: Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(File::create(stdout)?)
        .stderr(File::create(stderr)?)
        .process_group(0)
        .spawn()?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if start.elapsed() > timeout {
            // The launcher and every rank it started share this group.
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(format!("-{}", child.id()))
                .status();
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Finds and builds each implementation, runs the interleaved rounds, writes every result
/// file. Progress and failures go to stderr.
pub fn run(config: &CompareConfig) -> Result<Outcome, CompareError> {
    let out = &config.out;
    for dir in ["raw", "build"] {
        std::fs::create_dir_all(out.join(dir))?;
    }
    // The source is built outside the results, which record its hash instead (`machine.txt`).
    let scratch = record::Scratch::new("bench-compare")?;
    let source = scratch.path().join("mpibench.c");
    std::fs::write(&source, SOURCE)?;
    let mut tools = vec![];
    let mut skipped = vec![];
    for &imp in &config.impls {
        let exe = scratch.path().join(format!("mpibench-{}", imp.name()));
        let log = out.join("build").join(format!("{}.log", imp.name()));
        let found = Toolchain::find(imp, config.ferry_mpicc.as_deref())
            .and_then(|t| t.build(&source, &exe, &log).map(|()| (t, exe)));
        match found {
            Ok(t) => tools.push(t),
            Err(e) if config.skip_missing => {
                eprintln!("ferry bench compare: skipping {e}");
                skipped.push((imp, e.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
    let machine = machine_record(
        config,
        &tools.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(),
        &skipped,
    );
    std::fs::write(out.join(record::FILE), &machine)?;
    let load: f64 = loadavg()
        .split_whitespace()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(0.0);
    if load > 1.0 {
        eprintln!(
            "ferry bench compare: warning: load average {load:.1} — other work will skew the \
             figures, busy-polling implementations most"
        );
    }

    let mut rows: Vec<(Impl, u32, Row)> = vec![];
    let mut failures = vec![];
    // One line per job: how long it took, how it ended and how busy the machine was.
    let mut runs = String::from("impl,ranks,round,seconds,status,load_before\n");
    for round in 0..config.rounds {
        for &np in &config.ranks {
            for (tool, exe) in &tools {
                let mut args = tool.launch_args.clone();
                args.extend(["-n".into(), np.to_string(), exe.display().to_string()]);
                if config.quick {
                    args.push("-q".into());
                } else {
                    let sizes: Vec<String> =
                        config.coll_sizes.iter().map(|s| s.to_string()).collect();
                    args.extend([
                        "-x".into(),
                        config.p2p_max.to_string(),
                        "-s".into(),
                        sizes.join(","),
                    ]);
                }
                if let Some(b) = config.budget {
                    args.extend(["-b".into(), b.to_string()]);
                }
                // Two ranks run everything; more ranks on two cores run the collectives only.
                args.extend(["-m".into(), if np == 2 { "all" } else { "coll" }.into()]);
                let stem = format!("{}-n{np}-r{round}", tool.imp.name());
                let (so, se) = (
                    out.join("raw").join(format!("{stem}.csv")),
                    out.join("raw").join(format!("{stem}.err")),
                );
                let load_before = loadavg();
                let start = Instant::now();
                eprint!(
                    "round {}/{}: {} on {np} ranks ... ",
                    round + 1,
                    config.rounds,
                    tool.imp.label()
                );
                let status =
                    run_with_timeout(&tool.mpiexec, &args, &tool.env, &so, &se, config.timeout)?;
                let secs = start.elapsed().as_secs_f64();
                let text = std::fs::read_to_string(&so).unwrap_or_default();
                let parsed = parse_output(&text);
                let problem = match (&status, &parsed) {
                    (None, _) => Some(format!("timed out after {secs:.0} s")),
                    (Some(s), _) if !s.success() => Some(format!("failed ({s})")),
                    (_, Err(e)) => Some(e.clone()),
                    _ => None,
                };
                let _ = writeln!(
                    runs,
                    "{},{np},{round},{secs:.2},{},{}",
                    tool.imp.name(),
                    match &problem {
                        None => "ok".to_string(),
                        Some(p) => p.replace(',', ";"),
                    },
                    load_before.split_whitespace().next().unwrap_or("?"),
                );
                if let Ok(rs) = parsed {
                    rows.extend(rs.into_iter().map(|r| (tool.imp, round, r)));
                }
                match problem {
                    None => eprintln!("{secs:.1} s"),
                    Some(p) => {
                        eprintln!("{p}");
                        let msg = format!(
                            "{} on {np} ranks, round {}: {p}; command: {} {}\n{}",
                            tool.imp.label(),
                            round + 1,
                            tool.mpiexec.display(),
                            args.join(" "),
                            tail(&se, 15)
                        );
                        eprintln!("{msg}");
                        failures.push(msg);
                    }
                }
            }
        }
    }

    let mut machine = machine;
    let _ = writeln!(machine, "load average at end: {}", loadavg());
    std::fs::write(out.join(record::FILE), machine)?;
    std::fs::write(out.join("runs.csv"), &runs)?;
    write_results(out, &rows)?;
    let summary = summarize(&rows);
    write_summary(out, &summary)?;
    let mut table = format!(
        "mpibench ({}), median of {} interleaved rounds, {} ({} cores). Latency ratios ≤ 1.0 and \
         bandwidth (MB/s) ratios ≥ 1.0 favour ferry.\n\n",
        if config.quick { "quick" } else { "full" },
        config.rounds,
        now_utc(),
        command_text("nproc", &[]),
    );
    table.push_str(&ratio_table(&summary));
    let loads: Vec<f64> = runs
        .lines()
        .skip(1)
        .filter_map(|l| l.rsplit(',').next()?.parse().ok())
        .collect();
    if let (Some(lo), Some(hi)) = (
        loads.iter().copied().reduce(f64::min),
        loads.iter().copied().reduce(f64::max),
    ) {
        let _ = writeln!(
            table,
            "\nLoad average before the jobs: {lo:.2} to {hi:.2} (runs.csv has each job's); \
             rounds: results.csv."
        );
    }
    std::fs::write(out.join("table.md"), &table)?;
    if !failures.is_empty() {
        std::fs::write(out.join("failures.txt"), failures.join("\n\n") + "\n")?;
    }
    draw(out, &summary);
    Ok(Outcome {
        ran: tools.iter().map(|(t, _)| t.imp).collect(),
        skipped,
        failures,
        summary,
        table,
    })
}

fn write_results(out: &Path, rows: &[(Impl, u32, Row)]) -> std::io::Result<()> {
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

fn write_summary(out: &Path, summary: &BTreeMap<(Key, Impl), Point>) -> std::io::Result<()> {
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
fn draw(out: &Path, summary: &BTreeMap<(Key, Impl), Point>) {
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
        pingpong,2,8,0.4,20.0,0.39,20.0,2633\nbarrier,2,0,0.9,0,0.9,0,2048\n";

    #[test]
    fn parses_mpibench_output() {
        let rows = parse_output(OUTPUT).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].op.as_str(), rows[0].bytes, rows[0].reps),
            ("pingpong", 8, 2633)
        );
        assert!(parse_output("pingpong,2,8,x,1,1,1,1").is_err());
        assert!(parse_output("mystery,2,8,1,1,1,1,1").is_err());
    }

    #[test]
    fn medians_and_ratios() {
        let row = |usec: f64| Row {
            op: "pingpong".into(),
            ranks: 2,
            bytes: 8,
            usec,
            mbps: 8.0 / usec,
            usec_min: usec / 2.0,
            busbw: 0.0,
            reps: 1,
        };
        let rows = vec![
            (Impl::Ferry, 0, row(1.0)),
            (Impl::Ferry, 1, row(3.0)),
            (Impl::Ferry, 2, row(2.0)),
            (Impl::Mpich, 0, row(4.0)),
        ];
        let s = summarize(&rows);
        let f = &s[&((0, 2, 8), Impl::Ferry)];
        assert_eq!(
            (f.usec, f.usec_min, f.usec_best, f.runs),
            (2.0, 0.5, 1.0, 3)
        );
        let table = ratio_table(&s);
        assert!(
            table.contains("| pingpong | 2 | 8 | µs | 2.00 | 4.00 | – | 0.50 | – |"),
            "{table}"
        );
    }

    #[test]
    fn impl_names_round_trip() {
        for i in Impl::ALL {
            assert_eq!(Impl::parse(i.name()), Some(i));
        }
        assert_eq!(Impl::parse("ompi"), Some(Impl::OpenMpi));
        assert_eq!(Impl::parse("lam"), None);
    }
}
