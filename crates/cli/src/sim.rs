//! `ferry sim`: runs broadcast schedules on the simulator of `ferry-sim`.
//!
//! - `ferry sim paper` reproduces the TTCC paper's experiment (schedules built from a perturbed
//!   matrix, evaluated on the true one) and writes CSV and PNG files.
//! - `ferry sim run` simulates one broadcast on one random grid (any size: the grid is computed
//!   on demand) or on a matrix read from CSV (`--matrix`), prints how long building and
//!   simulating took, and can write the event trace (`--trace`).
//!
//! ```text
//! ferry sim paper --out sim-results                  # the paper's setup, 1000 trials, ~20 s
//! ferry sim paper --clusters 1 --intra-bandwidth 10e3,200e6 --node-counts 10
//! ferry sim run --nodes 10000 --algorithm ecef       # timing at scale
//! ferry sim run --matrix m.csv --algorithm ttcc --trace trace.csv
//! ```
//!
//! The modelling choices (grid, error model, α, ports) are documented in `ferry_sim` and
//! `ferry_sim::experiment`; `bench/results/2026-11-22-sim-paper/README.md` has a run and its reading.

use clap::{Args, Subcommand, ValueEnum};
use ferry_sched::hetero::{scheduler, BcastScheduler, CostModel, SCHEDULERS};
use ferry_sim::experiment::{
    delay_ratio, ErrorModel, ErrorTarget, Experiment, GridSetup, HashedGrid, Negative, Point,
};
use ferry_sim::{matrix, simulate, EventKind, SimConfig};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `ferry sim`.
#[derive(Debug, Args)]
pub(crate) struct SimArgs {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// The TTCC paper's experiment: completion time vs σ and vs node count, delay ratios.
    Paper(PaperArgs),
    /// Simulate one broadcast on one random grid and time the simulator.
    Run(RunArgs),
}

/// What the measurement error multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    /// The transfer time of each pair (latency × f, bandwidth ÷ f).
    Time,
    /// Latency and bandwidth, with independent factors.
    Separate,
}

/// What to do with non-positive error factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum NegativeArg {
    /// Take the magnitude.
    Fold,
    /// Clamp to --floor.
    Floor,
    /// Keep negative measured times.
    Keep,
}

/// The grid and model options both subcommands share.
#[derive(Debug, Args)]
struct GridArgs {
    /// Clusters the ranks are split into (blocks of consecutive ranks).
    #[arg(long, default_value_t = 4)]
    clusters: usize,
    /// Latency range inside a cluster, seconds (lo,hi).
    #[arg(long, value_parser = parse_range, default_value = "10e-6,1e-3")]
    intra_latency: (f64, f64),
    /// Bandwidth range inside a cluster, bytes/s (lo,hi).
    #[arg(long, value_parser = parse_range, default_value = "10e6,200e6")]
    intra_bandwidth: (f64, f64),
    /// Latency range between clusters, seconds (lo,hi).
    #[arg(long, value_parser = parse_range, default_value = "1e-3,20e-3")]
    inter_latency: (f64, f64),
    /// Bandwidth range between clusters, bytes/s (lo,hi).
    #[arg(long, value_parser = parse_range, default_value = "10e3,50e3")]
    inter_bandwidth: (f64, f64),
    /// Message size in bytes.
    #[arg(long, default_value_t = 1_000_000)]
    bytes: usize,
    /// TTCC decision time α in seconds.
    #[arg(long, default_value_t = 100e-6)]
    alpha: f64,
    /// Seed of all random draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Arguments of `ferry sim paper`.
#[derive(Debug, Args)]
struct PaperArgs {
    #[command(flatten)]
    grid: GridArgs,
    /// Random grids per point.
    #[arg(long, default_value_t = 1000)]
    trials: usize,
    /// Ranks of the σ sweep.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Values of σ, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,0.05,0.1,0.15,0.2,0.25,0.3,0.35,0.4,0.45,0.5"
    )]
    sigmas: Vec<f64>,
    /// Node counts of the node sweep, comma-separated (empty: skip it).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,20,30,40,50,60,70,80,90,100"
    )]
    node_counts: Vec<usize>,
    /// Values of σ for the node sweep, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,0.3")]
    node_sigmas: Vec<f64>,
    /// Mean μ of the error N(μ, σ).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    mu: f64,
    /// Error factors 1 + N(μ, σ) that are not positive: fold (|f|), floor (clamp to --floor), keep.
    #[arg(long, value_enum, default_value_t = NegativeArg::Fold)]
    negative: NegativeArg,
    /// Smallest error factor with --negative floor.
    #[arg(long, default_value_t = 0.01)]
    floor: f64,
    /// What the error multiplies.
    #[arg(long, value_enum, default_value_t = Target::Time)]
    error: Target,
    /// Schedulers, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ecef,ttcc,fef,fnf,lookahead"
    )]
    algorithms: Vec<String>,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Directory for the CSV and PNG files.
    #[arg(long, default_value = "sim-results")]
    out: PathBuf,
}

/// Arguments of `ferry sim run`.
#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    grid: GridArgs,
    /// Ranks.
    #[arg(long, default_value_t = 10_000)]
    nodes: usize,
    /// Scheduler.
    #[arg(long, default_value = "ecef")]
    algorithm: String,
    /// Root rank.
    #[arg(long, default_value_t = 0)]
    root: usize,
    /// Write the event trace (completion order) to this CSV file.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Use this cost matrix (CSV: from,to,latency_s,bandwidth_bytes_per_s) instead of a random
    /// grid; --nodes and --clusters are then ignored.
    #[arg(long)]
    matrix: Option<PathBuf>,
}

pub(crate) fn sim_command(args: SimArgs) -> i32 {
    let result = match args.command {
        SimCommand::Paper(a) => paper(a),
        SimCommand::Run(a) => run(a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ferry sim: {e}");
            1
        }
    }
}

fn schedulers(names: &[String]) -> Result<Vec<Box<dyn BcastScheduler + Send + Sync>>, String> {
    names
        .iter()
        .map(|n| {
            scheduler(n).ok_or_else(|| format!("unknown scheduler {n:?} (one of {SCHEDULERS:?})"))
        })
        .collect()
}

fn parse_range(text: &str) -> Result<(f64, f64), String> {
    let bad = || format!("{text:?} is not LO,HI (two numbers, LO ≤ HI)");
    let (lo, hi) = text.split_once(',').ok_or_else(bad)?;
    let (lo, hi): (f64, f64) = (
        lo.trim().parse().map_err(|_| bad())?,
        hi.trim().parse().map_err(|_| bad())?,
    );
    if lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi {
        Ok((lo, hi))
    } else {
        Err(bad())
    }
}

fn grid(args: &GridArgs) -> GridSetup {
    GridSetup {
        clusters: args.clusters.max(1),
        intra_latency: args.intra_latency,
        intra_bandwidth: args.intra_bandwidth,
        inter_latency: args.inter_latency,
        inter_bandwidth: args.inter_bandwidth,
    }
}

fn run(args: RunArgs) -> Result<(), String> {
    let alg = schedulers(std::slice::from_ref(&args.algorithm))?.remove(0);
    let cost: Box<dyn CostModel> = match &args.matrix {
        Some(path) => {
            let text = std::fs::File::open(path)
                .map_err(ferry_wire::bounded::BoundedReadError::from)
                .and_then(|f| {
                    ferry_wire::bounded::read_text(f, ferry_wire::bounded::MAX_CONFIG_FILE)
                })
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Box::new(matrix::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?)
        }
        None => Box::new(HashedGrid {
            n: args.nodes,
            setup: grid(&args.grid),
            seed: args.grid.seed,
        }),
    };
    let cost = cost.as_ref();
    let nodes = cost.size();
    if args.root >= nodes {
        return Err(format!("root {} is not one of {nodes} ranks", args.root));
    }
    let t = Instant::now();
    let schedules = alg.schedules(cost, args.root, args.grid.bytes);
    let build = t.elapsed();
    let t = Instant::now();
    let config = SimConfig {
        alpha: args.grid.alpha,
    };
    let res = simulate(&schedules, cost, &config).map_err(|e| e.to_string())?;
    let sim = t.elapsed();
    let source = match &args.matrix {
        Some(path) => format!("matrix {}", path.display()),
        None => format!("a random grid of {} clusters", args.grid.clusters),
    };
    println!(
        "{} broadcast of {} bytes to {nodes} ranks on {source}",
        alg.name(),
        args.grid.bytes,
    );
    println!("  schedules built in  {:.3} s", build.as_secs_f64());
    println!(
        "  simulated in        {:.3} s ({} transfers, {} events)",
        sim.as_secs_f64(),
        res.transfers.len(),
        res.trace.len()
    );
    println!(
        "  all ranks have the data at {:.6} s (simulated)",
        res.delivery()
    );
    println!(
        "  last step ends at          {:.6} s (simulated)",
        res.makespan()
    );
    if let Some(path) = args.trace {
        let mut csv = String::from("time_s,rank,step,event,peer,seq\n");
        for e in &res.trace {
            let (what, peer, seq) = match e.kind {
                EventKind::Sent { to, seq } => ("sent", to.to_string(), seq.to_string()),
                EventKind::Received { from, seq } => {
                    ("received", from.to_string(), seq.to_string())
                }
                EventKind::ReceivedFirst { from, seq } => {
                    ("received_first", from.to_string(), seq.to_string())
                }
                EventKind::Local => ("local", String::new(), String::new()),
            };
            let _ = writeln!(
                csv,
                "{:.9},{},{},{what},{peer},{seq}",
                e.time, e.rank, e.step
            );
        }
        std::fs::write(&path, csv).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("  trace: {}", path.display());
    }
    Ok(())
}

/// The paper's figures at 100 nodes: (σ, TTCC, ECEF) delay ratios.
const PAPER: [(f64, f64, f64); 2] = [(0.3, 0.49, 0.55), (0.4, 0.76, 2.26)];

fn paper(args: PaperArgs) -> Result<(), String> {
    let algs = schedulers(&args.algorithms)?;
    let refs: Vec<&(dyn BcastScheduler + Sync)> = algs
        .iter()
        .map(|a| a.as_ref() as &(dyn BcastScheduler + Sync))
        .collect();
    let experiment = |nodes: usize, sigmas: &[f64]| Experiment {
        nodes,
        bytes: args.grid.bytes,
        grid: grid(&args.grid),
        error: ErrorModel {
            mu: args.mu,
            sigma: 0.0,
            negative: match args.negative {
                NegativeArg::Fold => Negative::Fold,
                NegativeArg::Floor => Negative::Floor(args.floor),
                NegativeArg::Keep => Negative::Keep,
            },
            target: match args.error {
                Target::Time => ErrorTarget::Time,
                Target::Separate => ErrorTarget::Separate,
            },
        },
        sigmas: sigmas.to_vec(),
        trials: args.trials,
        seed: args.grid.seed,
        sim: SimConfig {
            alpha: args.grid.alpha,
        },
        threads: args.threads,
    };
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let t = Instant::now();
    let mut sigmas = args.sigmas.clone();
    if !sigmas.contains(&0.0) {
        sigmas.insert(0, 0.0);
    }
    let points = experiment(args.nodes, &sigmas)
        .run(&refs)
        .map_err(|e| e.to_string())?;
    eprintln!(
        "σ sweep: {} trials × {} σ × {} schedulers at {} nodes in {:.1} s",
        args.trials,
        sigmas.len(),
        algs.len(),
        args.nodes,
        t.elapsed().as_secs_f64()
    );
    let mut node_points = vec![];
    let t = Instant::now();
    for &n in &args.node_counts {
        node_points.extend(
            experiment(n, &args.node_sigmas)
                .run(&refs)
                .map_err(|e| e.to_string())?,
        );
    }
    if !args.node_counts.is_empty() {
        eprintln!("node sweep in {:.1} s", t.elapsed().as_secs_f64());
    }

    let base = |alg: &str| {
        points
            .iter()
            .find(|p| p.algorithm == alg && p.sigma == 0.0)
            .expect("σ = 0 is always run")
    };
    write_csv(&args.out.join("sigma.csv"), &points, |p| {
        delay_ratio(p, base(p.algorithm))
    })?;
    let node_base = |p: &Point| {
        node_points
            .iter()
            .find(|q| q.algorithm == p.algorithm && q.nodes == p.nodes && q.sigma == 0.0)
            .map_or(f64::NAN, |b| delay_ratio(p, b))
    };
    write_csv(&args.out.join("nodes.csv"), &node_points, node_base)?;
    let mut trials_csv = String::from("algorithm,nodes,sigma,trial,time_s\n");
    for p in &points {
        for (k, t) in p.times.iter().enumerate() {
            let _ = writeln!(
                trials_csv,
                "{},{},{},{k},{t:.9}",
                p.algorithm, p.nodes, p.sigma
            );
        }
    }
    let path = args.out.join("trials.csv");
    std::fs::write(&path, trials_csv).map_err(|e| format!("{}: {e}", path.display()))?;

    // The table: mean completion and delay ratio per σ, with the paper's figures beside.
    println!(
        "{:<10} {:>5} {:>12} {:>10} {:>10} {:>8}",
        "scheduler", "σ", "P(E) s", "p90 s", "delay", "paper"
    );
    for p in &points {
        let paper = PAPER
            .iter()
            .find(|(s, _, _)| (s - p.sigma).abs() < 1e-9 && args.nodes == 100)
            .and_then(|&(_, ttcc, ecef)| match p.algorithm {
                "ttcc" => Some(ttcc),
                "ecef" => Some(ecef),
                _ => None,
            })
            .map_or(String::new(), |r| format!("{:.0} %", r * 100.0));
        println!(
            "{:<10} {:>5.2} {:>12.3} {:>10.3} {:>9.1} % {:>8}",
            p.algorithm,
            p.sigma,
            p.mean(),
            p.quantile(0.9),
            delay_ratio(p, base(p.algorithm)) * 100.0,
            paper
        );
    }

    // Plots, linear axes.
    let by_alg = |pts: &[Point],
                  x: &dyn Fn(&Point) -> f64,
                  y: &dyn Fn(&Point) -> f64,
                  keep: &dyn Fn(&Point) -> bool| {
        algs.iter()
            .map(|a| {
                let pts: Vec<(f64, f64)> = pts
                    .iter()
                    .filter(|p| p.algorithm == a.name() && keep(p))
                    .map(|p| (x(p), y(p)))
                    .collect();
                (a.name().to_string(), pts)
            })
            .collect::<Vec<_>>()
    };
    let title = format!(
        "{} nodes, {} clusters, {} trials, α = {} µs",
        args.nodes,
        args.grid.clusters,
        args.trials,
        args.grid.alpha * 1e6
    );
    line_chart(
        &args.out.join("time_vs_sigma.png"),
        &format!("Broadcast completion vs σ — {title}"),
        "σ of the measurement error",
        "mean completion time (s)",
        &by_alg(&points, &|p| p.sigma, &|p| p.mean(), &|_| true),
    )?;
    let mut ratios = by_alg(
        &points,
        &|p| p.sigma,
        &|p| 100.0 * delay_ratio(p, base(p.algorithm)),
        &|_| true,
    );
    if args.nodes == 100 {
        ratios.push((
            "paper: ttcc".into(),
            PAPER.iter().map(|&(s, t, _)| (s, t * 100.0)).collect(),
        ));
        ratios.push((
            "paper: ecef".into(),
            PAPER.iter().map(|&(s, _, e)| (s, e * 100.0)).collect(),
        ));
    }
    line_chart(
        &args.out.join("delay_ratio.png"),
        &format!("Delay ratio (P(E_σ) − P(E_0)) / P(E_0) — {title}"),
        "σ of the measurement error",
        "delay ratio (%)",
        &ratios,
    )?;
    for &s in &args.node_sigmas {
        if node_points.is_empty() {
            break;
        }
        line_chart(
            &args.out.join(format!("time_vs_nodes_sigma{s}.png")),
            &format!(
                "Broadcast completion vs nodes, σ = {s} — {} clusters, {} trials",
                args.grid.clusters, args.trials
            ),
            "nodes",
            "mean completion time (s)",
            &by_alg(&node_points, &|p| p.nodes as f64, &|p| p.mean(), &|p| {
                p.sigma == s
            }),
        )?;
    }
    println!("results in {}", args.out.display());
    Ok(())
}

fn write_csv(path: &Path, points: &[Point], ratio: impl Fn(&Point) -> f64) -> Result<(), String> {
    let mut csv =
        String::from("algorithm,nodes,sigma,trials,mean_s,std_s,p50_s,p90_s,delay_ratio\n");
    for p in points {
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.9},{:.9},{:.9},{:.9},{:.6}",
            p.algorithm,
            p.nodes,
            p.sigma,
            p.times.len(),
            p.mean(),
            p.std_dev(),
            p.quantile(0.5),
            p.quantile(0.9),
            ratio(p)
        );
    }
    std::fs::write(path, csv).map_err(|e| format!("{}: {e}", path.display()))
}

/// A line chart on linear axes (ferry-bench's `plot` is log-log only).
fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let has_text = ferry_bench::load_font();
    let all = || {
        series
            .iter()
            .flat_map(|(_, p)| p.iter())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    };
    let (x0, x1) = all().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| {
        (a.min(*x), b.max(*x))
    });
    let (y0, y1) = all().fold((f64::MAX, f64::MIN), |(a, b), (_, y)| {
        (a.min(*y), b.max(*y))
    });
    if x0 > x1 {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let (y0, y1) = (y0.min(0.0), if y1 > y0 { y1 * 1.08 } else { y0 + 1.0 });
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80);
    if has_text {
        builder.caption(title, ("sans-serif", 20));
    }
    let mut chart = builder
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    let plain = |v: &f64| ferry_bench::tick_label(*v, ferry_bench::Unit::Plain);
    let mut mesh = chart.configure_mesh();
    if has_text {
        mesh.x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&plain)
            .y_label_formatter(&plain);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| err(&e))?;
    for (i, (label, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = pts
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let line = chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?;
        if has_text {
            line.label(label.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    if has_text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}
