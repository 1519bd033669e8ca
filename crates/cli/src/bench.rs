//! `ferry bench`: starts a job of `ferry bench-rank …` ranks, then turns rank 0's samples into a
//! table, CSV, JSON and PNG plots.

use clap::{Args, ValueEnum};
use ferry_bench::{plot, read_csv, record, Sample, Series};
use ferry_launch::LaunchOptions;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BenchKind {
    /// NetPIPE-like ping-pong sweep: half round-trip latency and bandwidth.
    Pingpong,
    /// Windowed streaming bandwidth (like osu_bw).
    Bw,
    /// Barrier, bcast, allreduce and alltoall latency on 2, 4 and 8 ranks (see --ranks).
    Coll,
    /// One C benchmark built against ferry's libmpi, MPICH and Open MPI, run side by side
    /// (see --impls, --ranks, --rounds, --background-load, --quick); each figure beside the best
    /// peer's, CSV, raw outputs and PNG plots in --out.
    Compare,
    /// BSP cost-model probe: s, L and g for each of --procs, optimisations on and off (the
    /// seed's tables 1–2); with --compare-mpich, MPICH's barrier and all-to-all beside them.
    Bsp,
    /// The BSP applications (LU, sample sort, Jacobi; ferry-bsp's examples) timed for each of
    /// --procs, optimisations on and off (the seed's table 3).
    BspApps,
    /// Only the results folder's record, `machine.txt` (command, date, machine, commit, load),
    /// for driver scripts that run their jobs themselves (--out, --command).
    Record,
}

impl BenchKind {
    fn name(self) -> &'static str {
        match self {
            BenchKind::Pingpong => "pingpong",
            BenchKind::Bw => "bw",
            BenchKind::Coll => "coll",
            BenchKind::Compare => "compare",
            BenchKind::Bsp => "bsp",
            BenchKind::BspApps => "bsp-apps",
            BenchKind::Record => "record",
        }
    }
}

/// Arguments of `ferry bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The benchmark to run.
    #[arg(value_enum)]
    kind: BenchKind,
    /// Transport between the two ranks.
    #[arg(long, value_enum, default_value_t = crate::Transport::Shm)]
    transport: crate::Transport,
    /// Smallest message (bytes; K, M, G suffixes are powers of 1024).
    #[arg(long, default_value = "1", value_parser = parse_size)]
    min: usize,
    /// Largest message [default: 64M; compare: 16M].
    #[arg(long, value_parser = parse_size)]
    max: Option<usize>,
    /// Bytes added and subtracted around each power of two (NetPIPE's perturbation).
    #[arg(long, default_value_t = 3)]
    perturbation: usize,
    /// Messages in flight per window (bw only).
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// Job sizes for `coll` and `compare`, comma-separated (compare: 2 ranks run point to point
    /// and collectives, larger jobs the collectives only).
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    ranks: Vec<u32>,
    /// Message sizes for `coll` (and compare's bcast and allreduce), comma-separated (bytes; K,
    /// M suffixes).
    #[arg(long, value_delimiter = ',', default_value = "8,64K,1M", value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Directory for the CSV, JSON and PNG files [default: bench-results; compare:
    /// bench/results/<date>-<name>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// compare: the results folder's name after the date, bench/results/<date>-<name>.
    #[arg(long, default_value = "compare")]
    name: String,
    /// The command recorded in the folder's `machine.txt` [default: this command line].
    #[arg(long)]
    command: Option<String>,
    /// compare: implementations, comma-separated, in run order within a round: ferry, mpich5
    /// and ompi5 (MPICH 5.0.2 and Open MPI 5.0.11 from PyPI's wheels, installed on first use
    /// into venvs under $FERRY_PEERS_DIR, else $XDG_CACHE_HOME/ferry/peers or
    /// ~/.cache/ferry/peers), mpich and openmpi (Debian's packages).
    #[arg(long, value_delimiter = ',', default_value = "ferry,mpich5,ompi5")]
    impls: Vec<String>,
    /// compare: all-to-all sizes, comma-separated (bytes; K, M suffixes).
    #[arg(long, value_delimiter = ',', default_value = "8", value_parser = parse_size)]
    alltoall_sizes: Vec<usize>,
    /// compare: busy-looping processes started before the first round and stopped after the
    /// last, beside the jobs (a rank that shares its node with other work).
    #[arg(long, default_value_t = 0)]
    background_load: u32,
    /// compare: rounds; each runs every implementation once, interleaved; tables show medians.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// compare: tiny sweep (8 B and 64 KiB, a few milliseconds per point) for smoke tests.
    #[arg(long)]
    quick: bool,
    /// compare: leave out implementations that are missing or do not build (with a message)
    /// instead of failing.
    #[arg(long)]
    skip_missing: bool,
    /// compare: seconds one job may take before its processes are killed.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// compare: time budget per measured point in seconds (caps repetitions of implementations
    /// that take milliseconds per operation) [default: 1.0; --quick: 0.02].
    #[arg(long)]
    budget: Option<f64>,
    /// bsp, bsp-apps: process counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2,3,4,5,6,7,8")]
    procs: Vec<u32>,
    /// bsp: supersteps per trial (5 trials per point, median).
    #[arg(long, default_value_t = 100)]
    reps: usize,
    /// bsp: words per put in the h-relations (0 = one put per destination).
    #[arg(long, default_value_t = 16)]
    put_words: usize,
    /// bsp: also run MPICH's barrier and all-to-all (mpicc.mpich, mpiexec.mpich) on the same
    /// process counts, each job capped at 60 s, and print the ratios.
    #[arg(long)]
    compare_mpich: bool,
}

/// Arguments of the hidden `ferry bench-rank` that each rank runs.
#[derive(Debug, Args)]
pub(crate) struct BenchRankArgs {
    #[arg(value_enum)]
    kind: BenchKind,
    min: usize,
    max: usize,
    perturbation: usize,
    window: usize,
    csv: PathBuf,
    /// Sizes for `coll`.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Supersteps per trial for `bsp`.
    #[arg(long, default_value_t = 100)]
    reps: usize,
    /// Words per put for `bsp`.
    #[arg(long, default_value_t = 16)]
    put_words: usize,
}

fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .ok_or_else(|| format!("{text:?} is not a size (e.g. 4096, 64K, 16M)"))
}

fn progress_path(csv: &Path) -> PathBuf {
    csv.with_extension("progress")
}

/// Body of each rank.
pub(crate) fn bench_rank(args: BenchRankArgs) -> i32 {
    let world = match ferry_core::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("ferry bench: {e}");
            return 1;
        }
    };
    let sizes = ferry_bench::sizes(args.min, args.max, args.perturbation);
    let progress = progress_path(&args.csv);
    let mut log = (world.rank() == 0)
        .then(|| std::fs::File::create(&progress).ok())
        .flatten();
    let report = |s: &Sample| {
        if let Some(f) = log.as_mut() {
            use std::io::Write;
            let _ = writeln!(f, "{}", s.bytes);
        }
    };
    let result = match args.kind {
        BenchKind::Pingpong => ferry_bench::pingpong(&world, &sizes, report),
        BenchKind::Bw => ferry_bench::stream(&world, &sizes, args.window, report),
        BenchKind::Coll => return coll_rank(world, &args),
        BenchKind::Bsp => return bsp_rank(world, &args.csv, args.reps, args.put_words),
        BenchKind::Compare | BenchKind::BspApps | BenchKind::Record => {
            eprintln!(
                "ferry bench {} starts its jobs itself, not inside a ferry job",
                args.kind.name()
            );
            return 2;
        }
    };
    let samples = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ferry bench: rank {}: {e}", world.rank());
            return 1;
        }
    };
    if world.rank() == 0 {
        let comments = [
            format!("ferry bench {} ({} ranks)", args.kind.name(), world.size()),
            format!(
                "transport={}",
                std::env::var("FERRY_TRANSPORT").unwrap_or_else(|_| "shm".into())
            ),
        ];
        if let Err(e) = ferry_bench::write_csv(&args.csv, &comments, &samples) {
            eprintln!("ferry bench: cannot write {}: {e}", args.csv.display());
            return 1;
        }
        let _ = std::fs::remove_file(progress);
    }
    match world.finalize() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ferry bench: {e}");
            1
        }
    }
}

/// Body of each rank of `ferry bench coll`: rank 0 appends CSV rows.
fn coll_rank(world: ferry_core::World, args: &BenchRankArgs) -> i32 {
    let mut rows = vec![];
    let result = ferry_bench::collectives(&world, &args.sizes, |s| {
        rows.push(format!(
            "{},{},{},{:.3},{:.3}",
            s.op, s.bytes, s.ranks, s.usec, s.usec_min
        ));
    });
    if let Err(e) = result {
        eprintln!("ferry bench coll: rank {}: {e}", world.rank());
        return 1;
    }
    if world.rank() == 0 {
        let text = rows.join("\n") + "\n";
        if let Err(e) = std::fs::write(&args.csv, text) {
            eprintln!("ferry bench coll: cannot write {}: {e}", args.csv.display());
            return 1;
        }
    }
    match world.finalize() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ferry bench coll: {e}");
            1
        }
    }
}

/// `ferry bench coll`: one job per rank count, then one table and CSV.
fn coll_command(args: &BenchArgs, out: &Path, exe: &Path) -> i32 {
    let mut table = vec!["op,bytes,ranks,usec,usec_min".to_string()];
    for &np in &args.ranks {
        let part = out.join(format!("coll-{}-{np}.part", args.transport.as_str()));
        let mut options = LaunchOptions::new(np, exe);
        let sizes: Vec<String> = args.sizes.iter().map(|s| s.to_string()).collect();
        options.args = ["bench-rank", "coll", "0", "0", "0", "0"]
            .iter()
            .map(|s| s.to_string())
            .chain([
                part.display().to_string(),
                "--sizes".into(),
                sizes.join(","),
            ])
            .map(Into::into)
            .collect();
        options
            .extra_env
            .push(("FERRY_TRANSPORT".into(), args.transport.as_str().into()));
        match ferry_launch::run(&options) {
            Ok(o) if o.exit_code() == 0 => {}
            Ok(o) => return o.exit_code(),
            Err(e) => {
                eprintln!("ferry bench: {e}");
                return e.exit_code();
            }
        }
        match std::fs::read_to_string(&part) {
            Ok(text) => table.extend(text.lines().map(str::to_string)),
            Err(e) => {
                eprintln!("ferry bench: {}: {e}", part.display());
                return 1;
            }
        }
        let _ = std::fs::remove_file(&part);
    }
    let csv = out.join(format!("coll-{}.csv", args.transport.as_str()));
    if let Err(e) = std::fs::write(&csv, table.join("\n") + "\n") {
        eprintln!("ferry bench: cannot write {}: {e}", csv.display());
        return 1;
    }
    println!(
        "{:>10} {:>10} {:>6} {:>12} {:>12}",
        "op", "bytes", "ranks", "usec", "usec_min"
    );
    for row in &table[1..] {
        let f: Vec<&str> = row.split(',').collect();
        if let [op, bytes, ranks, usec, min] = f.as_slice() {
            println!("{op:>10} {bytes:>10} {ranks:>6} {usec:>12} {min:>12}");
        }
    }
    println!("wrote {}", csv.display());
    0
}

/// `ferry bench compare`: builds mpibench against every implementation, runs them interleaved.
fn compare_command(args: &BenchArgs) -> i32 {
    use ferry_bench::compare::{self, CompareConfig, Impl};
    let mut impls = vec![];
    for name in &args.impls {
        match Impl::parse(name) {
            Some(i) if !impls.contains(&i) => impls.push(i),
            Some(_) => {}
            None => {
                eprintln!(
                    "ferry bench compare: unknown implementation {name:?} (ferry, mpich5, ompi5, \
                     mpich, openmpi)"
                );
                return 2;
            }
        }
    }
    let ranks = args.ranks.clone();
    if ranks.iter().any(|&r| r < 2) || args.rounds == 0 {
        eprintln!("ferry bench compare: --ranks must be at least 2 and --rounds at least 1");
        return 2;
    }
    if args.name.is_empty() || args.name.contains('/') {
        eprintln!(
            "ferry bench compare: --name must be a folder name (no '/'), got {:?}",
            args.name
        );
        return 2;
    }
    let config = CompareConfig {
        impls,
        skip_missing: args.skip_missing,
        ranks,
        rounds: args.rounds,
        quick: args.quick,
        out: args.out.clone().unwrap_or_else(|| {
            PathBuf::from("bench/results").join(format!(
                "{}-{}",
                ferry_bench::record::today(),
                args.name
            ))
        }),
        timeout: Duration::from_secs(args.timeout),
        budget: args.budget,
        p2p_max: args.max.unwrap_or(16 << 20),
        coll_sizes: args.sizes.clone(),
        alltoall_sizes: args.alltoall_sizes.clone(),
        background_load: args.background_load,
        ferry_mpicc: None,
        peers: compare::PeerInstall::from_env(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let outcome = match compare::run(&config) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ferry bench compare: {e}");
            if matches!(
                e,
                compare::CompareError::Missing { .. } | compare::CompareError::Build { .. }
            ) {
                eprintln!("(--skip-missing leaves it out; --impls chooses the implementations)");
            }
            return 1;
        }
    };
    println!("{}", outcome.table);
    for (imp, why) in &outcome.skipped {
        println!("skipped {}: {why}", imp.label());
    }
    println!("wrote {}", config.out.display());
    if outcome.ran.is_empty() {
        eprintln!("ferry bench compare: no implementation could run");
        return 1;
    }
    if !outcome.failures.is_empty() {
        eprintln!(
            "ferry bench compare: {} job(s) failed, see {}",
            outcome.failures.len(),
            config.out.join("failures.txt").display()
        );
        return 1;
    }
    0
}

/// `ferry bench …`: runs the job, then writes and prints the results.
pub(crate) fn bench_command(mut args: BenchArgs) -> i32 {
    if args.kind == BenchKind::Compare {
        return compare_command(&args);
    }
    let out = args
        .out
        .get_or_insert_with(|| PathBuf::from("bench-results"))
        .clone();
    let max = args.max.unwrap_or(64 << 20);
    let command = args
        .command
        .clone()
        .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" "));
    let mut sources = vec![];
    if args.kind == BenchKind::Bsp && args.compare_mpich {
        let probe = ferry_bench::bsp::MPI_PROBE_C;
        sources.push(record::source_line(
            "crates/bsplib/bench/mpi_probe.c",
            probe,
        ));
    }
    if let Err(e) = record::write(&out, &command, &sources) {
        eprintln!(
            "ferry bench: cannot write the record in {}: {e}",
            out.display()
        );
        return 1;
    }
    if args.kind == BenchKind::Record {
        return 0;
    }
    let stem = format!("{}-{}", args.kind.name(), args.transport.as_str());
    let csv = out.join(format!("{stem}.csv"));
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ferry bench: cannot find the ferry binary: {e}");
            return 1;
        }
    };
    if args.kind == BenchKind::Coll {
        return coll_command(&args, &out, &exe);
    }
    if matches!(args.kind, BenchKind::Bsp | BenchKind::BspApps) {
        let b = BspBench {
            procs: args.procs.clone(),
            reps: args.reps,
            put_words: args.put_words,
            compare_mpich: args.compare_mpich,
            rounds: args.rounds,
            timeout: Duration::from_secs(args.timeout),
            transport: args.transport.as_str(),
        };
        return match args.kind {
            BenchKind::Bsp => bsp_command(&b, &out, &exe),
            _ => apps_command(&b, &out, &exe),
        };
    }
    let mut options = LaunchOptions::new(2, exe);
    options.args = [
        "bench-rank".to_string(),
        args.kind.name().into(),
        args.min.to_string(),
        max.to_string(),
        args.perturbation.to_string(),
        args.window.to_string(),
        csv.display().to_string(),
    ]
    .into_iter()
    .map(Into::into)
    .collect();
    options
        .extra_env
        .push(("FERRY_TRANSPORT".into(), args.transport.as_str().into()));
    let total = ferry_bench::sizes(args.min, max, args.perturbation).len() as u64;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_message(stem.clone());
        bar
    });
    let watcher = bar.clone().map(|bar| {
        let progress = progress_path(&csv);
        std::thread::spawn(move || loop {
            let done = std::fs::read_to_string(&progress)
                .map(|t| t.lines().count() as u64)
                .unwrap_or(0);
            bar.set_position(done);
            if bar.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        })
    });
    let outcome = ferry_launch::run(&options);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    if let Some(w) = watcher {
        let _ = w.join();
    }
    match outcome {
        Ok(o) if o.exit_code() == 0 => {}
        Ok(o) => return o.exit_code(),
        Err(e) => {
            eprintln!("ferry bench: {e}");
            return e.exit_code();
        }
    }
    let samples = match read_csv(&csv) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ferry bench: {e}");
            return 1;
        }
    };
    let json = out.join(format!("{stem}.json"));
    if let Err(e) = serde_json::to_string_pretty(&samples)
        .map_err(|e| e.to_string())
        .and_then(|text| std::fs::write(&json, text).map_err(|e| e.to_string()))
    {
        eprintln!("ferry bench: cannot write {}: {e}", json.display());
    }
    let title = format!(
        "ferry {} over {}",
        args.kind.name(),
        args.transport.as_str()
    );
    let lat = out.join(format!("{stem}-latency.png"));
    let bw = out.join(format!("{stem}-bandwidth.png"));
    let series = |f: fn(&Sample) -> f64| {
        vec![Series {
            label: "ferry",
            points: samples
                .iter()
                .map(|s| (s.bytes.max(1) as f64, f(s)))
                .collect(),
        }]
    };
    for (path, y, f) in [
        (
            &lat,
            ferry_bench::Axis::micros("time per message"),
            (|s: &Sample| s.usec) as fn(&Sample) -> f64,
        ),
        (
            &bw,
            ferry_bench::Axis::plain("bandwidth (MB/s)"),
            |s: &Sample| s.mbps,
        ),
    ] {
        if let Err(e) = plot(
            path,
            &title,
            ferry_bench::Axis::bytes("message size"),
            y,
            &series(f),
        ) {
            eprintln!("ferry bench: cannot draw {}: {e}", path.display());
        }
    }
    println!(
        "{:>12} {:>12} {:>12} {:>12}",
        "bytes", "usec", "usec_min", "MB/s"
    );
    for s in &samples {
        if s.bytes.is_power_of_two() || s.bytes == 0 {
            println!(
                "{:>12} {:>12.3} {:>12.3} {:>12.1}",
                s.bytes, s.usec, s.usec_min, s.mbps
            );
        }
    }
    println!(
        "wrote {}, {}, {}, {}",
        csv.display(),
        json.display(),
        lat.display(),
        bw.display()
    );
    0
}

// ---- ferry bench bsp, bsp-apps ----

/// Settings of `ferry bench bsp` and `bsp-apps`.
struct BspBench {
    procs: Vec<u32>,
    reps: usize,
    put_words: usize,
    compare_mpich: bool,
    rounds: u32,
    timeout: Duration,
    transport: &'static str,
}

/// The environment of each measured setting: the seed's optimisations all on, or all off.
const BSP_SETTINGS: [(&str, &[(&str, &str)]); 2] = [
    ("on", &[]),
    (
        "off",
        &[
            ("FERRY_BSP_COMBINE", "0"),
            ("FERRY_BSP_EARLY", "0"),
            ("FERRY_BSP_REORDER", "0"),
            ("FERRY_BSP_PREPOST", "0"),
        ],
    ),
];

/// Body of each rank of `ferry bench bsp`: process 0 leaves the parameters in `part`.
fn bsp_rank(world: ferry_core::World, part: &Path, reps: usize, put_words: usize) -> i32 {
    ferry_bench::bsp::rank_main(world, part, reps, put_words);
    0
}

/// `ferry bench bsp`: one job per process count and setting (and MPICH's, interleaved).
fn bsp_command(b: &BspBench, out: &Path, exe: &Path) -> i32 {
    use ferry_bench::bsp;
    let mut runs = vec![];
    let mut mpich = vec![];
    // The probe is built outside the results, which record its source's hash.
    let scratch = record::Scratch::new("bench-bsp");
    let mpich_exe = if b.compare_mpich {
        let built = scratch
            .as_ref()
            .map_err(|e| format!("cannot make a build folder: {e}"))
            .and_then(|dir| bsp::build_mpich_probe(dir.path()));
        match built {
            Ok(e) => Some(e),
            Err(e) => {
                eprintln!("ferry bench bsp: {e}");
                return 1;
            }
        }
    } else {
        None
    };
    for &np in &b.procs {
        for (name, env) in BSP_SETTINGS {
            let part = out.join(format!("bsp-{np}-{name}.part"));
            let mut options = LaunchOptions::new(np, exe);
            options.args = ["bench-rank", "bsp", "0", "0", "0", "0"]
                .iter()
                .map(|s| s.to_string())
                .chain([
                    part.display().to_string(),
                    format!("--reps={}", b.reps),
                    format!("--put-words={}", b.put_words),
                ])
                .map(Into::into)
                .collect();
            options.timeout = Some(b.timeout);
            options
                .extra_env
                .push(("FERRY_TRANSPORT".into(), b.transport.into()));
            options
                .extra_env
                .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            match ferry_launch::run(&options) {
                Ok(o) if o.exit_code() == 0 => {}
                Ok(o) => return o.exit_code(),
                Err(e) => {
                    eprintln!("ferry bench bsp: {e}");
                    return e.exit_code();
                }
            }
            let text = std::fs::read_to_string(&part).unwrap_or_default();
            let _ = std::fs::remove_file(&part);
            match bsp::from_part(&text) {
                Some(r) => runs.push((name.to_string(), r)),
                None => {
                    eprintln!("ferry bench bsp: no result from the {np}-process job ({name})");
                    return 1;
                }
            }
        }
        if let Some(m) = &mpich_exe {
            // As many operations as ferry's supersteps (5 trials); MPICH busy-polls, so with
            // more processes than cores, fewer.
            let reps = if np <= 2 { 5 * b.reps } else { b.reps.max(10) };
            let r = bsp::mpich_probe(m, np as usize, reps, Duration::from_secs(60));
            if let Err(e) = &r {
                eprintln!("ferry bench bsp: MPICH on {np} processes: {e}");
            }
            mpich.push((np as usize, r));
        }
    }
    let header = [
        format!(
            "command: {}",
            std::env::args().collect::<Vec<_>>().join(" ")
        ),
        format!(
            "reps={} put_words={} transport={} cores={}",
            b.reps,
            b.put_words,
            b.transport,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
        format!(
            "load: {}",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        ),
    ];
    match bsp::report(&runs, &mpich, out, &header) {
        Ok(table) => {
            print!("{table}");
            println!(
                "wrote {}/bsp-{{params,points{}}}.csv, bsp-h-relations.png, bsp-L-g.png",
                out.display(),
                if mpich.is_empty() { "" } else { ",mpich" }
            );
            0
        }
        Err(e) => {
            eprintln!("ferry bench bsp: {e}");
            1
        }
    }
}

/// The applications of `ferry bench bsp-apps`: example name and arguments.
const BSP_APPS: [(&str, &[&str]); 3] = [
    ("lu", &["256"]),
    ("sample_sort", &["700000"]),
    ("jacobi", &["500"]),
];

/// `ferry bench bsp-apps`: runs ferry-bsp's examples (`target/<profile>/examples`, next to
/// this binary) with `ferry run`; each checks its result and prints `time=…s … ok`. The
/// median over --rounds, optimisations on and off.
fn apps_command(b: &BspBench, out: &Path, exe: &Path) -> i32 {
    let dir = exe.parent().map(|d| d.join("examples")).unwrap_or_default();
    let mut csv = String::from("app,p,setting,round,seconds\n");
    let mut table = format!(
        "Table 3: BSP applications, seconds (median of {} runs)\n{:>12} {:>3} {:>9} {:>9} {:>8}\n",
        b.rounds, "app", "p", "on", "off", "off/on"
    );
    for (app, app_args) in BSP_APPS {
        let prog = dir.join(app);
        if !prog.exists() {
            eprintln!(
                "ferry bench bsp-apps: {} is missing: cargo build --release -p ferry-bsp --examples",
                prog.display()
            );
            return 1;
        }
        for &np in &b.procs {
            let mut medians = vec![];
            for (name, env) in BSP_SETTINGS {
                let mut times = vec![];
                for round in 0..b.rounds.max(1) {
                    let run = std::process::Command::new(exe)
                        .args(["run", "-n", &np.to_string(), "--timeout"])
                        .arg(b.timeout.as_secs().to_string())
                        .arg("--transport")
                        .arg(b.transport)
                        .arg(&prog)
                        .args(app_args)
                        .envs(env.iter().copied())
                        .output();
                    let text = match &run {
                        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout),
                        Ok(o) => {
                            eprintln!(
                                "ferry bench bsp-apps: {app} on {np} ({name}) failed:\n{}{}",
                                String::from_utf8_lossy(&o.stdout),
                                String::from_utf8_lossy(&o.stderr)
                            );
                            return 1;
                        }
                        Err(e) => {
                            eprintln!("ferry bench bsp-apps: {e}");
                            return 1;
                        }
                    };
                    let t = text
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix("time=")?.strip_suffix('s')?.parse().ok());
                    match t {
                        Some(t) if text.contains(" ok") => {
                            csv += &format!("{app},{np},{name},{round},{t}\n");
                            times.push(t);
                        }
                        _ => {
                            eprintln!("ferry bench bsp-apps: {app}: unexpected output {text:?}");
                            return 1;
                        }
                    }
                }
                times.sort_by(f64::total_cmp);
                medians.push(times[times.len() / 2]);
            }
            table += &format!(
                "{app:>12} {np:>3} {:>9.4} {:>9.4} {:>8.2}\n",
                medians[0],
                medians[1],
                medians[1] / medians[0]
            );
        }
    }
    let path = out.join("bsp-apps.csv");
    if let Err(e) = std::fs::write(&path, csv) {
        eprintln!("ferry bench bsp-apps: {}: {e}", path.display());
        return 1;
    }
    print!("{table}");
    println!("wrote {}", path.display());
    0
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
    }
}
