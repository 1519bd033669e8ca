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
use crate::record::{self, command_text, loadavg, now_utc};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The benchmark source, built against every implementation.
pub const SOURCE: &str = include_str!("../c/mpibench.c");

/// Benchmark modes in report order; the first three are point to point.
pub const OPS: [&str; 9] = [
    "pingpong",
    "bw",
    "msgrate",
    "barrier",
    "bcast",
    "allreduce",
    "alltoall",
    "reduce",
    "allgather",
];

mod report;
mod toolchain;
pub use report::{best_peer, parse_output, ratio_table, summarize, Key, Point, Row};
use report::{draw, write_results, write_summary};
pub use toolchain::{CompareError, Impl, PeerInstall, Toolchain};

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
    let (tools, skipped) = build_all(config, scratch.path())?;
    let mut machine = machine_record(
        config,
        &tools.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(),
        &skipped,
    );
    std::fs::write(out.join(record::FILE), &machine)?;
    warn_if_busy();

    // Started after the builds, so that only the jobs share the machine with them.
    let mut hogs = CpuHogs::start(config.background_load)?;
    if hogs.count() > 0 {
        let _ = writeln!(
            machine,
            "background load: {} busy-looping processes (pids {:?}), each in a session of its own, \
             from before the first round to after the last",
            hogs.count(),
            hogs.pids()
        );
        std::fs::write(out.join(record::FILE), &machine)?;
        // Let the load average see them before the first job.
        std::thread::sleep(Duration::from_secs(2));
    }
    let mut log = RunLog::default();
    for round in 0..config.rounds {
        log.round(config, round, &tools, hogs.count())?;
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
    std::fs::write(out.join("runs.csv"), &log.runs)?;
    std::fs::write(out.join("rounds.csv"), &log.rounds)?;
    write_results(out, &log.rows)?;
    let summary = summarize(&log.rows);
    write_summary(out, &summary)?;
    let table = table_text(config, &summary, &log.round_loads);
    std::fs::write(out.join("table.md"), &table)?;
    if !log.failures.is_empty() {
        std::fs::write(out.join("failures.txt"), log.failures.join("\n\n") + "\n")?;
    }
    draw(out, &summary);
    Ok(Outcome {
        ran: tools.iter().map(|(t, _)| t.imp).collect(),
        skipped,
        failures: log.failures,
        summary,
        table,
    })
}

/// Each implementation's toolchain with mpibench built by it in `scratch`, and those left out
/// (`--skip-missing`) with why.
#[allow(clippy::type_complexity)]
fn build_all(
    config: &CompareConfig,
    scratch: &Path,
) -> Result<(Vec<(Toolchain, PathBuf)>, Vec<(Impl, String)>), CompareError> {
    let source = scratch.join("mpibench.c");
    std::fs::write(&source, SOURCE)?;
    let (mut tools, mut skipped) = (vec![], vec![]);
    for &imp in &config.impls {
        let exe = scratch.join(format!("mpibench-{}", imp.name()));
        let log = config.out.join("build").join(format!("{}.log", imp.name()));
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
    Ok((tools, skipped))
}

/// Says so when the machine is busy before the first job.
fn warn_if_busy() {
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
}

/// What the rounds found and how each job went.
struct RunLog {
    rows: Vec<(Impl, u32, Row)>,
    failures: Vec<String>,
    /// One line per job: how long it took, how it ended and how busy the machine was.
    runs: String,
    /// One line per round, with the load averages around it.
    rounds: String,
    /// The 1-minute load average before and after each round.
    round_loads: Vec<(String, String)>,
}

impl Default for RunLog {
    fn default() -> Self {
        RunLog {
            rows: vec![],
            failures: vec![],
            runs: String::from("impl,ranks,round,seconds,status,load_before,load_after\n"),
            rounds: String::from("round,started,load_before,load_after,background_load\n"),
            round_loads: vec![],
        }
    }
}

impl RunLog {
    /// Round `round`: every job size, every implementation in turn.
    fn round(
        &mut self,
        config: &CompareConfig,
        round: u32,
        tools: &[(Toolchain, PathBuf)],
        background: usize,
    ) -> Result<(), CompareError> {
        let (started, before) = (now_utc(), loadavg());
        for &np in &config.ranks {
            for (tool, exe) in tools {
                self.job(config, round, np, tool, exe)?;
            }
        }
        let after = loadavg();
        let _ = writeln!(
            self.rounds,
            "{},{started},{before},{after},{background}",
            round + 1
        );
        let loads = (
            first_load(&before).to_string(),
            first_load(&after).to_string(),
        );
        self.round_loads.push(loads);
        Ok(())
    }

    /// One job of `tool`'s mpibench on `np` ranks: its output in raw/, its line in runs.csv,
    /// its rows, or its failure with the command and the end of its stderr.
    fn job(
        &mut self,
        config: &CompareConfig,
        round: u32,
        np: u32,
        tool: &Toolchain,
        exe: &Path,
    ) -> Result<(), CompareError> {
        let mut args = tool.launch_args.clone();
        args.extend(["-n".into(), np.to_string(), exe.display().to_string()]);
        args.extend(mpibench_args(config, np));
        let stem = format!("{}-n{np}-r{round}", tool.imp.name());
        let raw = config.out.join("raw");
        let (so, se) = (
            raw.join(format!("{stem}.csv")),
            raw.join(format!("{stem}.err")),
        );
        let load_before = loadavg();
        let start = Instant::now();
        eprint!(
            "round {}/{}: {} on {np} ranks ... ",
            round + 1,
            config.rounds,
            tool.imp.label()
        );
        let status = run_with_timeout(&tool.mpiexec, &args, &tool.env, &so, &se, config.timeout)?;
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
            self.runs,
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
            self.rows
                .extend(rs.into_iter().map(|r| (tool.imp, round, r)));
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
                self.failures.push(msg);
            }
        }
        Ok(())
    }
}

/// table.md: what was run, the ratio table, and the load around each round.
fn table_text(
    config: &CompareConfig,
    summary: &BTreeMap<(Key, Impl), Point>,
    round_loads: &[(String, String)],
) -> String {
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
    table.push_str(&ratio_table(summary));
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
    table
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
