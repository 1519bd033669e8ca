//! Launching a ferry job on this host: `ferry run -n N prog args…`.
//!
//! This crate owns everything between "the user asked for N ranks of a program" and "the job's
//! exit status":
//!
//! - the **bootstrap server** ([`BootstrapServer`]): the launcher's side of the key-value
//!   exchange in [`ferry_wire::pmi`] (challenge–`hello` with the job key, `put` / `get` /
//!   `fence`, `abort`, `finalize`) on an ephemeral port of 127.0.0.1;
//! - **spawning** the ranks with `FERRY_PMI_ADDR`, `FERRY_RANK`, `FERRY_SIZE`, `FERRY_JOB_ID` and
//!   `FERRY_JOB_KEY` in their environment (a fresh 256-bit key per job; never on a command line),
//!   each rank in a process group of its own so that whatever it starts is stopped with it,
//!   and in a session of its own while the ranks have a core each (the scheduler then shares
//!   CPU time with the rank itself, not with the launcher's shell);
//! - **output forwarding**: each rank's stdout and stderr to ours, whole lines, optionally
//!   prefixed `[rank] `;
//! - **failure handling**: the first rank that fails (non-zero exit, a signal, an exit or a lost
//!   bootstrap connection without `finalize`, or `abort`) is named on stderr, the others get
//!   SIGTERM and after a grace SIGKILL; SIGINT / SIGTERM / SIGHUP to the launcher and the job
//!   timeout end the job the same way;
//! - **cleanup** of the job's shared-memory files (`/dev/shm/ferry-<job id>-*`) however it ends.
//!
//! With [`LaunchOptions::grid`] the ranks run across a grid of the one-machine testbed instead
//! (`ferry run --grid`, see [`GridLaunch`]): in its hosts' network namespaces, with the
//! bootstrap server on a public address and `ferry relay` on the private clusters' front nodes.
//!
//! Which host runs which rank is decided by [`hosts`] (`--hosts`, hostfiles, `--ppn`,
//! `--map-by`, Slurm allocations) and handed in as [`LaunchOptions::hosts`] with a
//! [`Launcher`]. When a host other than this one takes part, a node daemon per host (`ferry
//! node`, see [`node`]), started over the launcher's remote shell or here, forks that host's
//! ranks, forwards their output, exits and signals, and serves their bootstrap exchange,
//! relaying it over its one connection to the launcher.
//!
//! On success it prints nothing of its own: tests that compare output exactly see only the
//! ranks' output. It forwards standard input to rank 0 only and does not depend on the runtime
//! (`ferry-core`): only on the wire protocol.
//!
//! # Exit status
//!
//! [`Outcome::exit_code`] is the status `ferry run` exits with:
//!
//! | how the job ended | status |
//! |---|---|
//! | every rank exited 0 (and finalized, if it connected) | 0 |
//! | a rank exited with code C ≠ 0 first | C |
//! | a rank was killed by signal S first | 128 + S |
//! | a rank exited 0 or lost its connection without `finalize` | 1 |
//! | a rank called `abort` with code C | C & 0xff, or 1 if that is 0 |
//! | the timeout expired | [`TIMEOUT_EXIT_CODE`] (124, as coreutils `timeout`) |
//! | the launcher got signal S | 128 + S |
//! | a host's node daemon failed (multi-host jobs) | 1 |
//!
//! Errors before the job runs are [`LaunchError`]s; [`LaunchError::exit_code`] maps them
//! (127 program not found, 126 not executable, 1 otherwise).
//!
//! # Example
//!
//! ```no_run
//! use ferry_launch::{run, LaunchOptions};
//!
//! let mut options = LaunchOptions::new(4, "./ring");
//! options.tag_output = true;
//! options.extra_env.push(("FERRY_TRANSPORT".into(), "tcp".into()));
//! let outcome = run(&options)?;
//! std::process::exit(outcome.exit_code());
//! # Ok::<(), ferry_launch::LaunchError>(())
//! ```
#![deny(missing_docs)]

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;
use thiserror::Error;

mod conns;
mod grid;
mod grid_ssh;
pub mod hosts;
mod job;
mod limits;
pub mod mpir;
pub mod netns;
pub mod node;
mod output;
mod remote;
mod server;
pub mod settings;
mod signals;
mod sys;
mod watchdog;

pub use grid::GridLaunch;
pub use hosts::{HostRanks, Launcher, Mapping, SSH_DEFAULT, SSH_ENV};
pub use job::run;
pub use server::{BootstrapEvent, BootstrapServer, RankSession, HANDSHAKE_TIMEOUT};

/// The environment variable that limits a job's run time, in whole seconds (as in MPICH).
pub const TIMEOUT_ENV: &str = "MPIEXEC_TIMEOUT";

/// Exit status of a job that ran out of time.
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// The environment variable that lifts the per-core rank limit when set to `1` (`yes`,
/// `true`, `on`); `0` (`no`, `false`, `off`) or unset keeps it. Same as `--oversubscribe`.
pub const OVERSUBSCRIBE_ENV: &str = "FERRY_OVERSUBSCRIBE";

/// How many cores a bound job's ranks share on this host, which the launcher tells each rank it
/// binds (read by the runtime's configuration).
pub const HOST_CORES_ENV: &str = "FERRY_HOST_CORES";

/// Most ranks a host runs per core it may use, unless [`LaunchOptions::oversubscribe`] (or
/// [`OVERSUBSCRIBE_ENV`]) lifts the limit. Open MPI refuses more ranks than slots (one per
/// core by default) without `--oversubscribe`; MPICH's hydra has no limit and will try to start
/// a hundred million processes. 64 per core leaves room for the oversubscribed tests people run
/// on small machines (MPICH's suite goes up to 72 ranks) and stops a typo at once.
pub const RANKS_PER_CORE: u32 = 64;

/// Most ranks of one job, even with the per-core limit lifted: as many as a job may grow to by
/// spawning, and far more than one machine's process table holds comfortably.
pub const MAX_RANKS: u32 = 1 << 16;

/// What to launch and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Number of ranks (at least 1).
    pub np: u32,
    /// The program every rank runs (looked up in `PATH` if it has no `/`).
    pub program: OsString,
    /// Its arguments, passed verbatim.
    pub args: Vec<OsString>,
    /// Prefix every forwarded line with `[rank] `.
    pub tag_output: bool,
    /// Ends the job after this long. `None` falls back to [`TIMEOUT_ENV`]; a zero duration (here
    /// or there) means no limit.
    pub timeout: Option<Duration>,
    /// More environment variables for every rank (e.g. `FERRY_TRANSPORT=tcp`), set after the
    /// launcher's own environment and before the `FERRY_` bootstrap variables.
    pub extra_env: Vec<(String, String)>,
    /// Run across this grid of the testbed instead of on this host.
    pub grid: Option<GridLaunch>,
    /// Whether each rank is bound to a core of its own.
    pub bind: Bind,
    /// Which host runs which ranks ([`hosts::place`]); `None` (the default): every rank on
    /// this host. Exclusive with [`LaunchOptions::grid`].
    pub hosts: Option<Vec<HostRanks>>,
    /// How the ranks of other hosts are started (default [`Launcher::Local`]); for
    /// [`Launcher::Ssh`] the command is [`SSH_ENV`] (`FERRY_SSH`, default `ssh`), split on white
    /// space, e.g. `ssh -p 2222 -o BatchMode=yes` ([`Launcher::remote_shell`]).
    pub launcher: Launcher,
    /// Lift the limit of [`RANKS_PER_CORE`] ranks per core of a host (`--oversubscribe`);
    /// `false` falls back to [`OVERSUBSCRIBE_ENV`]. [`MAX_RANKS`] holds regardless.
    pub oversubscribe: bool,
    /// A rank's death fails only the operations that involve it (`--fault-tolerant`): the job
    /// goes on with the others, which this sets `FERRY_FAULT_TOLERANT=1` for.
    pub fault_tolerant: bool,
}

/// Core binding of the ranks (`ferry run --bind-to`).
///
/// Unbound is the default, as with MPICH's launcher: on a host shared with other work, bound
/// ranks cannot move away from a busy core (measured here under load: 8-byte ping-pong 0.71-0.94
/// µs bound, 0.44-0.48 µs unbound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bind {
    /// Rank i on the i-th core this launcher may use, when the job is on this host and has no
    /// more ranks than those cores (as Open MPI does for small jobs); else unbound.
    Auto,
    /// Rank i on core i mod cores.
    Core,
    /// Unbound: the kernel places and moves the ranks.
    #[default]
    None,
}

impl LaunchOptions {
    /// `np` ranks of `program` without arguments, untagged, no timeout, no extra environment.
    pub fn new(np: u32, program: impl Into<OsString>) -> LaunchOptions {
        LaunchOptions {
            np,
            program: program.into(),
            args: Vec::new(),
            tag_output: false,
            timeout: None,
            extra_env: Vec::new(),
            grid: None,
            bind: Bind::None,
            hosts: None,
            launcher: Launcher::Local,
            oversubscribe: false,
            fault_tolerant: false,
        }
    }
}

/// Why a job could not be run at all.
#[derive(Debug, Error)]
pub enum LaunchError {
    /// `np` was 0.
    #[error("the job needs at least one rank")]
    NoRanks,
    /// More ranks than [`MAX_RANKS`].
    #[error("{np} ranks: a job has at most {MAX_RANKS}")]
    TooManyRanks {
        /// The ranks asked for.
        np: u64,
    },
    /// More ranks on a host than [`RANKS_PER_CORE`] per core, without the limit lifted.
    #[error(
        "{np} ranks on host {host}, which has {cores} core(s): at most {limit} \
         ({RANKS_PER_CORE} per core) unless --oversubscribe or {OVERSUBSCRIBE_ENV}=1 lifts the limit"
    )]
    Oversubscribed {
        /// Ranks placed on the host.
        np: u32,
        /// The host.
        host: String,
        /// Cores this launcher (or the host's node daemon) may use there.
        cores: u32,
        /// `cores` × [`RANKS_PER_CORE`].
        limit: u32,
    },
    /// [`OVERSUBSCRIBE_ENV`] is set to something that is neither yes nor no.
    #[error("{OVERSUBSCRIBE_ENV}={0:?} is not 1 or 0 (yes/no, true/false, on/off)")]
    BadOversubscribeEnv(String),
    /// The program name is empty.
    #[error("no program to run")]
    NoProgram,
    /// The program does not exist (or is not in `PATH`).
    #[error("{}: program not found", .0.to_string_lossy())]
    ProgramNotFound(OsString),
    /// The program exists but may not be executed.
    #[error("{}: permission denied", .0.to_string_lossy())]
    NotExecutable(OsString),
    /// The program named is a directory.
    #[error("{}: is a directory, not a program", .0.to_string_lossy())]
    IsADirectory(OsString),
    /// Starting a rank failed for another reason (e.g. too many processes).
    #[error("cannot start rank {rank} ({}): {source}", .program.to_string_lossy())]
    Spawn {
        /// The rank that could not start.
        rank: u32,
        /// The program.
        program: OsString,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Starting a rank (or forwarding its output) failed for want of file descriptors: the
    /// launcher's `RLIMIT_NOFILE` or the system's `fs.file-max`, named with what to raise.
    #[error("cannot start rank {rank} ({}): {shortage}", .program.to_string_lossy())]
    OutOfDescriptors {
        /// The rank that could not start.
        rank: u32,
        /// The program.
        program: OsString,
        /// Which limit, and what to raise.
        shortage: ferry_wire::limits::Shortage,
    },
    /// [`TIMEOUT_ENV`] is set but not a whole number of seconds.
    #[error("{TIMEOUT_ENV}={0:?} is not a whole number of seconds")]
    BadTimeoutEnv(String),
    /// The bootstrap server could not start.
    #[error("cannot start the bootstrap server: {0}")]
    Bootstrap(#[source] std::io::Error),
    /// No randomness for the job key.
    #[error("cannot draw a job key: {0}")]
    Random(#[source] std::io::Error),
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    /// The grid job could not be set up (testbed, bootstrap socket, relay key or relays).
    #[error("grid: {0}")]
    Grid(String),
    /// A multi-host job could not be set up (a host name, a node daemon).
    #[error("{0}")]
    Remote(String),
    /// A `FERRY_…` number of the launcher is not a number or out of its range.
    #[error(transparent)]
    Setting(#[from] ferry_wire::settings::SettingError),
}

impl LaunchError {
    /// The exit status for a launcher that failed this way: 127 when the program is not found,
    /// 126 when it is not executable (as shells do), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::ProgramNotFound(_) => 127,
            LaunchError::NotExecutable(_) | LaunchError::IsADirectory(_) => 126,
            _ => 1,
        }
    }
}

/// How a job ended; [`Outcome::exit_code`] is the status `ferry run` exits with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank exited 0 (and finalized if it had connected to the bootstrap server).
    Success,
    /// This rank was the first to fail.
    RankFailed {
        /// The rank: for a process started by MPI_Comm_spawn, its universe rank (the launcher's
        /// ranks are 0..n, each spawned world takes the next block).
        rank: u32,
        /// For a spawned process: its world's number and its rank there.
        spawned: Option<(u32, u32)>,
        /// Its host.
        host: String,
        /// Its process id.
        pid: u32,
        /// How it failed.
        failure: RankFailure,
    },
    /// A rank called `abort`.
    Aborted {
        /// The rank.
        rank: u32,
        /// The code it passed.
        code: i32,
        /// Its message.
        message: String,
    },
    /// The job ran longer than its timeout.
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// The launcher received this signal and passed it on.
    Interrupted {
        /// The signal number.
        signal: i32,
    },
    /// A host of a multi-host job failed: its node daemon ended (or its connection) before
    /// its ranks did, or it could not start them.
    HostFailed {
        /// The host.
        host: String,
        /// What happened.
        detail: String,
    },
}

/// How one rank failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankFailure {
    /// It exited with this non-zero code.
    Exited(i32),
    /// It was killed by this signal.
    Signaled(i32),
    /// It exited with code 0 after connecting to the bootstrap server but without `finalize`.
    NoFinalize,
    /// Its bootstrap connection closed without `finalize` and it had not exited shortly after.
    ConnectionLost,
}

impl Outcome {
    /// The job's exit status (see the table in the crate documentation).
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Success => 0,
            Outcome::RankFailed { failure, .. } => match *failure {
                RankFailure::Exited(code) => code,
                RankFailure::Signaled(signal) => 128 + signal,
                RankFailure::NoFinalize | RankFailure::ConnectionLost => 1,
            },
            Outcome::Aborted { code, .. } => match code & 0xff {
                0 => 1,
                code => code,
            },
            Outcome::TimedOut { .. } => TIMEOUT_EXIT_CODE,
            Outcome::Interrupted { signal } => 128 + signal,
            Outcome::HostFailed { .. } => 1,
        }
    }
}

/// Formats a signal as `9 (SIGKILL)`, or just the number when it has no known name.
pub(crate) struct SignalDisplay(pub(crate) i32);

impl fmt::Display for SignalDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match sys::signal_name(self.0) {
            Some(name) => write!(f, "{} ({name})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// The line the launcher prints (after `ferry run: `) when a job does not succeed.
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Success => write!(f, "all ranks succeeded"),
            Outcome::RankFailed {
                rank,
                spawned,
                host,
                pid,
                failure,
            } => {
                match spawned {
                    Some((world, r)) => write!(
                        f,
                        "spawned process {rank} (rank {r} of spawned world {world}, host {host}, pid {pid}) "
                    )?,
                    None => write!(f, "rank {rank} (host {host}, pid {pid}) ")?,
                }
                match *failure {
                    RankFailure::Exited(code) => write!(f, "exited with code {code}"),
                    RankFailure::Signaled(signal) => {
                        write!(f, "was killed by signal {}", SignalDisplay(signal))
                    }
                    RankFailure::NoFinalize => write!(f, "exited without calling finalize"),
                    RankFailure::ConnectionLost => write!(
                        f,
                        "closed its bootstrap connection without calling finalize"
                    ),
                }
            }
            Outcome::Aborted {
                rank,
                code,
                message,
            } => write!(f, "rank {rank} called abort (code {code}): {message}"),
            Outcome::TimedOut { after } => {
                write!(f, "job timed out after {} s", after.as_secs_f64())
            }
            Outcome::Interrupted { signal } => write!(
                f,
                "received signal {}; stopping the job",
                SignalDisplay(*signal)
            ),
            Outcome::HostFailed { host, detail } => write!(f, "host {host}: {detail}"),
        }
    }
}

/// This machine's host name, or `"localhost"` if it cannot be read (what
/// [`hosts::is_this_host`] compares host names with).
pub fn this_host() -> String {
    sys::hostname()
}

/// Whether the per-core rank limit is lifted: `flag` (`--oversubscribe`), else
/// [`OVERSUBSCRIBE_ENV`] as `lookup` reads it.
pub fn oversubscribe_allowed(
    flag: bool,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<bool, LaunchError> {
    if flag {
        return Ok(true);
    }
    let Some(value) = lookup(OVERSUBSCRIBE_ENV) else {
        return Ok(false);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "no" | "false" | "off" => Ok(false),
        "1" | "yes" | "true" | "on" => Ok(true),
        _ => Err(LaunchError::BadOversubscribeEnv(value)),
    }
}

/// Checks `np` ranks on `host` against [`RANKS_PER_CORE`] × `cores` (unless `oversubscribe`)
/// and [`MAX_RANKS`].
pub fn check_rank_limit(
    np: u64,
    host: &str,
    cores: usize,
    oversubscribe: bool,
) -> Result<(), LaunchError> {
    if np > u64::from(MAX_RANKS) {
        return Err(LaunchError::TooManyRanks { np });
    }
    let cores = u32::try_from(cores.max(1)).unwrap_or(u32::MAX);
    let limit = cores.saturating_mul(RANKS_PER_CORE);
    if !oversubscribe && np > u64::from(limit) {
        return Err(LaunchError::Oversubscribed {
            np: np as u32,
            host: host.to_string(),
            cores,
            limit,
        });
    }
    Ok(())
}

/// The number of cores this process may run on (its CPU affinity), at least 1.
pub fn usable_cores() -> usize {
    sys::allowed_cpus().len().max(1)
}

/// The job timeout from [`TIMEOUT_ENV`]: `None` when unset, empty or 0.
pub fn timeout_from_env() -> Result<Option<Duration>, LaunchError> {
    let Some(value) = std::env::var_os(TIMEOUT_ENV) else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    let secs: u64 = trimmed
        .parse()
        .map_err(|_| LaunchError::BadTimeoutEnv(text.to_string()))?;
    Ok((secs > 0).then(|| Duration::from_secs(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_limit_per_core_and_per_job() {
        assert!(check_rank_limit(128, "h", 2, false).is_ok());
        let err = check_rank_limit(129, "h", 2, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("129 ranks on host h"), "{err}");
        assert!(err.contains("--oversubscribe"), "{err}");
        assert!(err.contains("FERRY_OVERSUBSCRIBE=1"), "{err}");
        assert!(check_rank_limit(129, "h", 2, true).is_ok());
        // No cores known: one.
        assert!(check_rank_limit(64, "h", 0, false).is_ok());
        assert!(check_rank_limit(65, "h", 0, false).is_err());
        let err = check_rank_limit(100_000_000, "h", 2, true).unwrap_err();
        assert!(matches!(err, LaunchError::TooManyRanks { np: 100_000_000 }));
        assert!(check_rank_limit(u64::from(MAX_RANKS), "h", 4096, false).is_ok());
    }

    #[test]
    fn oversubscribe_from_flag_or_environment() {
        let env = |v: &'static str| move |_: &str| Some(v.to_string());
        assert!(oversubscribe_allowed(true, |_| None).unwrap());
        assert!(!oversubscribe_allowed(false, |_| None).unwrap());
        assert!(oversubscribe_allowed(false, env("1")).unwrap());
        assert!(oversubscribe_allowed(false, env(" Yes ")).unwrap());
        assert!(!oversubscribe_allowed(false, env("0")).unwrap());
        assert!(!oversubscribe_allowed(false, env("")).unwrap());
        let err = oversubscribe_allowed(false, env("maybe")).unwrap_err();
        assert!(
            err.to_string().contains("FERRY_OVERSUBSCRIBE=\"maybe\""),
            "{err}"
        );
    }
}
