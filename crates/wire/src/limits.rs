//! What a process of a job says when it runs out of file descriptors: which limit it reached
//! (its own `RLIMIT_NOFILE`, or the system's `fs.file-max`), in which process, and what to raise.
//! The launcher, the node daemons and the ranks word it alike; this module only words it — the
//! caller reads the limits and says which process it is.
//!
//! Every process of a job raises its soft `RLIMIT_NOFILE` to the hard limit at start, so when
//! a limit is reached it is normally the hard one, which only an administrator (or the
//! login's configuration) raises; a rank with a thousand TCP peers needs a thousand sockets.

use std::fmt;

/// Which process of a job ran out of descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Process {
    /// `ferry run` (or `mpiexec`), on the host it was started on.
    Launcher,
    /// The node daemon (`ferry node`) of a multi-host job.
    NodeDaemon {
        /// Its host.
        host: String,
    },
    /// A rank.
    Rank {
        /// Its universe rank, once it knows it.
        rank: Option<u32>,
        /// Its host.
        host: String,
    },
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Launcher => write!(f, "the launcher"),
            Process::NodeDaemon { host } => write!(f, "the node daemon on host {host}"),
            Process::Rank {
                rank: Some(rank),
                host,
            } => write!(f, "rank {rank} (host {host})"),
            Process::Rank { rank: None, host } => write!(f, "a rank on host {host}"),
        }
    }
}

/// One value of `RLIMIT_NOFILE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// At most this many descriptors.
    Finite(u64),
    /// `RLIM_INFINITY` (the kernel's `fs.nr_open` still caps it).
    Unlimited,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Finite(n) => write!(f, "{n}"),
            Limit::Unlimited => write!(f, "unlimited"),
        }
    }
}

/// Which limit was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// `EMFILE`: the process's own `RLIMIT_NOFILE`, as it stood when the call failed.
    Process {
        /// The soft limit (what the kernel enforces).
        soft: Limit,
        /// The hard limit (the ceiling an unprivileged process may raise its soft limit to).
        hard: Limit,
    },
    /// `ENFILE`: the system's table of open files is full.
    System {
        /// `fs.file-max` (`/proc/sys/fs/file-max`), if it could be read.
        file_max: Option<u64>,
    },
}

/// A process out of descriptors, and what to raise; its `Display` is the explanation that
/// follows what failed (`cannot start rank 3 (./app): ` + this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortage {
    /// Which process.
    pub process: Process,
    /// Which limit.
    pub exhausted: Exhausted,
    /// Whether Slurm started the process (`SLURM_JOB_ID` set): its limits then come from
    /// slurmd and the submitting shell.
    pub under_slurm: bool,
}

impl fmt::Display for Shortage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let process = &self.process;
        match self.exhausted {
            Exhausted::System { file_max } => {
                write!(
                    f,
                    "{process} could not open a file descriptor: the system's table of open \
                     files is full (ENFILE, fs.file-max = "
                )?;
                match file_max {
                    Some(max) => write!(f, "{max}")?,
                    None => write!(f, "unknown")?,
                }
                write!(
                    f,
                    "); raise fs.file-max (`sysctl -w fs.file-max=N` as root, or in \
                     /etc/sysctl.d/) or end the processes that hold many files"
                )
            }
            Exhausted::Process { soft, hard } => {
                write!(
                    f,
                    "{process} ran out of file descriptors (EMFILE: its limit RLIMIT_NOFILE is \
                     {soft} soft, {hard} hard); "
                )?;
                if soft != hard {
                    // Only a process that did not raise its own soft limit gets here.
                    write!(
                        f,
                        "raise the soft limit to the hard one before the job starts \
                         (`ulimit -n {hard}`)"
                    )?;
                } else {
                    write!(
                        f,
                        "ferry raises the soft limit to the hard one itself, so raise the hard \
                         limit of the user who runs the job: `nofile` in \
                         /etc/security/limits.conf (for new logins), LimitNOFILE= of a systemd \
                         service, or `ulimit -Hn N` as root"
                    )?;
                }
                if self.under_slurm {
                    write!(
                        f,
                        "; under Slurm a task gets the submitting shell's soft limit \
                         (PropagateResourceLimits in slurm.conf; raise `ulimit -n` before \
                         sbatch or srun) within slurmd's hard limit (LimitNOFILE= of \
                         slurmd.service)"
                    )?;
                }
                write!(
                    f,
                    "; a rank needs about one descriptor per TCP peer, the launcher and a node \
                     daemon about three per rank of their host"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emfile(process: Process, soft: u64, hard: Limit, under_slurm: bool) -> String {
        Shortage {
            process,
            exhausted: Exhausted::Process {
                soft: Limit::Finite(soft),
                hard,
            },
            under_slurm,
        }
        .to_string()
    }

    #[test]
    fn a_reached_hard_limit_names_both_values_and_how_to_raise_it() {
        let text = emfile(Process::Launcher, 64, Limit::Finite(64), false);
        assert!(
            text.starts_with("the launcher ran out of file descriptors"),
            "{text}"
        );
        assert!(text.contains("RLIMIT_NOFILE is 64 soft, 64 hard"), "{text}");
        assert!(text.contains("/etc/security/limits.conf"), "{text}");
        assert!(text.contains("ulimit -Hn"), "{text}");
        assert!(!text.contains("Slurm"), "{text}");
    }

    #[test]
    fn a_soft_limit_below_the_hard_one_says_ulimit_n() {
        let rank = Process::Rank {
            rank: Some(7),
            host: "n1".into(),
        };
        let text = emfile(rank, 1024, Limit::Finite(4096), false);
        assert!(text.starts_with("rank 7 (host n1) ran out"), "{text}");
        assert!(text.contains("`ulimit -n 4096`"), "{text}");
        let text = emfile(
            Process::Rank {
                rank: None,
                host: "n1".into(),
            },
            1024,
            Limit::Unlimited,
            false,
        );
        assert!(text.contains("1024 soft, unlimited hard"), "{text}");
    }

    #[test]
    fn under_slurm_the_advice_names_its_settings() {
        let daemon = Process::NodeDaemon { host: "n2".into() };
        let text = emfile(daemon, 4096, Limit::Finite(4096), true);
        assert!(
            text.starts_with("the node daemon on host n2 ran out"),
            "{text}"
        );
        assert!(text.contains("PropagateResourceLimits"), "{text}");
        assert!(text.contains("LimitNOFILE= of slurmd.service"), "{text}");
    }

    #[test]
    fn a_full_system_table_names_file_max() {
        let text = Shortage {
            process: Process::Launcher,
            exhausted: Exhausted::System {
                file_max: Some(800_000),
            },
            under_slurm: false,
        }
        .to_string();
        assert!(text.contains("ENFILE, fs.file-max = 800000"), "{text}");
        assert!(text.contains("sysctl -w fs.file-max"), "{text}");
        assert!(!text.contains("RLIMIT_NOFILE"), "{text}");
    }
}
