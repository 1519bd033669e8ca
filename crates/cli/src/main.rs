//! `ferry`: the command-line front end of ferry.
//!
//! Each subcommand is a variant of [`Command`] with its own argument struct and a small function
//! that runs it and returns the process exit status: `run` (launch a job on this host, or with
//! `--grid` across a grid of the testbed), `bench`, `info`, `sim`, `relay` and `testbed`.

mod bench;
mod sim;
mod weather;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ferry_launch::{LaunchOptions, TIMEOUT_EXIT_CODE};
use std::ffi::OsString;
use std::time::Duration;

/// ferry: a message-passing runtime.
#[derive(Debug, Parser)]
#[command(name = "ferry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run N copies of a program as one job on this host.
    #[command(
        after_help = format!(
            "Exit status: the first non-zero rank status (128+S for a rank killed by signal S), \
             0 when every rank succeeds; {TIMEOUT_EXIT_CODE} when the job times out; 128+S when \
             ferry itself gets signal S; 127 when PROG is not found.\n\
             MPIEXEC_TIMEOUT (whole seconds) sets a timeout when --timeout is not given."
        )
    )]
    Run(RunArgs),
    /// Measure point-to-point latency and bandwidth between two ranks on this host.
    Bench(bench::BenchArgs),
    /// One rank of `ferry bench` (started by it).
    #[command(hide = true)]
    BenchRank(bench::BenchRankArgs),
    /// Show ferry's settings.
    Info(InfoArgs),
    /// Simulate broadcast schedules on a cost model (the TTCC paper's experiments).
    Sim(sim::SimArgs),
    /// Run the relay daemon of a private cluster's front node (grids, DESIGN section 4).
    Relay(ferry_relay::daemon::RelayArgs),
    /// Build, use and remove a grid of network namespaces on this machine (needs root).
    Testbed(ferry_testbed::cli::TestbedArgs),
    /// Measure and forecast the latency and bandwidth between the ranks (network weather).
    Weather(weather::WeatherArgs),
    /// One rank of `ferry weather` (started by it).
    #[command(hide = true)]
    WeatherRank(weather::WeatherArgs),
}

/// Arguments of `ferry info`.
#[derive(Debug, Args)]
struct InfoArgs {
    /// List every runtime parameter with its environment variable and current value.
    #[arg(long)]
    params: bool,
}

fn info_command(args: InfoArgs) -> i32 {
    println!("ferry {}", env!("CARGO_PKG_VERSION"));
    if args.params {
        match ferry_core::Config::from_env() {
            Ok(config) => {
                for (name, value) in config.describe() {
                    println!("{name:<24} {value}");
                }
            }
            Err(e) => {
                eprintln!("ferry info: {e}");
                return 1;
            }
        }
    }
    0
}

/// Transports a job can be told to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Transport {
    /// Shared memory between the ranks of one host.
    Shm,
    /// TCP sockets.
    Tcp,
}

impl Transport {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Tcp => "tcp",
        }
    }
}

/// Arguments of `ferry run` (and, later, of `mpiexec`).
#[derive(Debug, Args)]
struct RunArgs {
    /// Number of ranks (`-np N` is accepted too, as mpiexec does).
    #[arg(short = 'n', long = "np", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    np: u32,

    /// Prefix each line of output with `[rank] `.
    #[arg(long)]
    tag_output: bool,

    /// End the job after SECS seconds (fractions allowed; 0 means no limit).
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    timeout: Option<Duration>,

    /// Transport between the ranks (sets FERRY_TRANSPORT for them).
    #[arg(long, value_enum)]
    transport: Option<Transport>,

    /// Run across this grid (TOML grid file) in the standing testbed: rank r on the file's
    /// rank slot r mod slots, `ferry relay` on the private clusters' front nodes.
    #[arg(long, value_name = "GRID.TOML")]
    grid: Option<std::path::PathBuf>,

    /// Name prefix of the testbed to run the grid job in (default: the only one standing).
    #[arg(long, value_name = "PREFIX", requires = "grid")]
    testbed_prefix: Option<String>,

    /// How the grid's relays forward bytes (`ferry relay --copy`).
    #[arg(long, value_name = "MODE", requires = "grid")]
    relay_copy: Option<String>,

    /// Print the path matrix of the job (rank 0; same as FERRY_SHOW_PATHS=1).
    #[arg(long)]
    show_paths: bool,

    /// The program every rank runs.
    #[arg(value_name = "PROG", required = true)]
    program: OsString,

    /// Arguments for PROG, passed verbatim (including ones that start with `-`).
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    args: Vec<OsString>,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{text:?} is not a usable timeout"))
}

/// Runs a job as `ferry run` does and returns its exit status. Messages go to stderr.
fn run_command(args: RunArgs) -> i32 {
    let mut options = LaunchOptions::new(args.np, args.program);
    options.args = args.args;
    options.tag_output = args.tag_output;
    options.timeout = args.timeout;
    if let Some(transport) = args.transport {
        options
            .extra_env
            .push(("FERRY_TRANSPORT".into(), transport.as_str().into()));
    }
    if args.show_paths {
        options
            .extra_env
            .push((ferry_grid::path::SHOW_PATHS_ENV.into(), "1".into()));
    }
    if let Some(file) = &args.grid {
        let topology = match ferry_grid::Topology::load(file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("ferry run: {e}");
                return 2;
            }
        };
        let ferry = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                eprintln!("ferry run: cannot find the ferry executable for the relays: {e}");
                return 1;
            }
        };
        options.grid = Some(ferry_launch::GridLaunch {
            topology,
            prefix: args.testbed_prefix.clone(),
            ferry,
            relay_args: args
                .relay_copy
                .iter()
                .flat_map(|m| ["--copy".to_string(), m.clone()])
                .collect(),
        });
    }
    match ferry_launch::run(&options) {
        Ok(outcome) => outcome.exit_code(),
        Err(error) => {
            eprintln!("ferry run: {error}");
            error.exit_code()
        }
    }
}

/// mpiexec spells the rank count `-np N`; clap has no multi-letter short options, so `-np` (and
/// `-np=N`) before the program become `--np`. Arguments from the program on are left alone.
fn normalize_run_args(argv: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len());
    let mut iter = argv.into_iter();
    // The binary name, then options up to the subcommand.
    for arg in iter.by_ref() {
        let is_run = arg == "run";
        out.push(arg);
        if is_run {
            break;
        }
    }
    let mut expect_value = false;
    for arg in iter.by_ref() {
        if expect_value {
            expect_value = false;
            out.push(arg);
            continue;
        }
        let text = arg.to_str().unwrap_or("");
        if text == "--" || !text.starts_with('-') {
            // The program (or the separator before it): everything after is its own.
            out.push(arg);
            break;
        }
        if text == "-np" {
            out.push("--np".into());
            expect_value = true;
            continue;
        }
        if let Some(value) = text.strip_prefix("-np=") {
            out.push(format!("--np={value}").into());
            continue;
        }
        expect_value = matches!(
            text,
            "-n" | "--np"
                | "--timeout"
                | "--transport"
                | "--grid"
                | "--testbed-prefix"
                | "--relay-copy"
        );
        out.push(arg);
    }
    out.extend(iter);
    out
}

fn main() {
    let cli = Cli::parse_from(normalize_run_args(std::env::args_os().collect()));
    let code = match cli.command {
        Command::Run(args) => run_command(args),
        Command::Bench(args) => bench::bench_command(args),
        Command::BenchRank(args) => bench::bench_rank(args),
        Command::Info(args) => info_command(args),
        Command::Sim(args) => sim::sim_command(args),
        Command::Relay(args) => ferry_relay::daemon::main_with(&args),
        Command::Testbed(args) => ferry_testbed::cli::testbed_command(args),
        Command::Weather(args) => weather::weather_command(args),
        Command::WeatherRank(args) => weather::weather_rank(args),
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> RunArgs {
        let argv = args.iter().map(OsString::from).collect();
        match Cli::try_parse_from(normalize_run_args(argv)) {
            Ok(Cli {
                command: Command::Run(args),
            }) => args,
            Ok(other) => panic!("not a run command: {other:?}"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn np_spellings() {
        assert_eq!(parse(&["ferry", "run", "-n", "4", "true"]).np, 4);
        assert_eq!(parse(&["ferry", "run", "--np", "5", "true"]).np, 5);
        assert_eq!(parse(&["ferry", "run", "-np", "6", "true"]).np, 6);
        assert_eq!(parse(&["ferry", "run", "-np=7", "true"]).np, 7);
        assert_eq!(parse(&["ferry", "run", "true"]).np, 1);
    }

    #[test]
    fn program_arguments_are_verbatim() {
        let args = parse(&[
            "ferry",
            "run",
            "--tag-output",
            "-n",
            "2",
            "prog",
            "-np",
            "3",
            "--tag-output",
            "-x",
        ]);
        assert_eq!(args.program, "prog");
        assert_eq!(args.args, ["-np", "3", "--tag-output", "-x"]);
        assert!(args.tag_output);
        let args = parse(&["ferry", "run", "--", "-prog", "-n"]);
        assert_eq!(args.program, "-prog");
        assert_eq!(args.args, ["-n"]);
    }

    #[test]
    fn timeout_and_transport() {
        let args = parse(&[
            "ferry",
            "run",
            "--timeout",
            "1.5",
            "--transport",
            "tcp",
            "true",
        ]);
        assert_eq!(args.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(args.transport, Some(Transport::Tcp));
        let argv = ["ferry", "run", "--timeout", "-1", "true"].map(OsString::from);
        assert!(Cli::try_parse_from(argv).is_err());
        let argv = ["ferry", "run", "-n", "0", "true"].map(OsString::from);
        assert!(Cli::try_parse_from(argv).is_err());
    }
}
