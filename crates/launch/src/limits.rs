//! The launcher's and the node daemons' file descriptors: the soft `RLIMIT_NOFILE` raised to
//! the hard limit at start, and an error for want of descriptors explained
//! ([`ferry_wire::limits`]) instead of a bare "Too many open files".
//!
//! Each rank costs its launcher (or its host's node daemon) about three descriptors — its
//! stdout and stderr pipes and its bootstrap connection — so the usual soft limit of 1 024
//! ends a job of about 330 ranks; MPICH's hydra and Open MPI's prte raise it the same way.

use ferry_wire::limits::{Exhausted, Limit, Process, Shortage};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use std::io;
use std::sync::OnceLock;

/// What this process is, told by [`raise_open_files`]; a launcher until then.
static ROLE: OnceLock<Role> = OnceLock::new();

/// Which of the job's processes this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// `ferry run`.
    Launcher,
    /// `ferry node`.
    NodeDaemon,
}

impl Role {
    fn process(self) -> Process {
        match self {
            Role::Launcher => Process::Launcher,
            Role::NodeDaemon => Process::NodeDaemon {
                host: crate::sys::hostname(),
            },
        }
    }
}

/// Raises the soft descriptor limit to the hard one (to `fs.nr_open` when the hard limit is
/// unlimited, the most the kernel grants); returns the soft limit then in force. A refusal
/// leaves the limit as it was: the process runs on, and a shortage is explained when it comes.
/// `role` is what this process is, for those explanations (the first call says it).
pub(crate) fn raise_open_files(role: Role) -> Limit {
    let _ = ROLE.set(role);
    let limit = getrlimit(Resource::Nofile);
    let ceiling = limit.maximum.or_else(nr_open);
    if let Some(ceiling) = ceiling {
        if limit.current.is_none_or(|soft| soft < ceiling) {
            let _ = setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(ceiling),
                    maximum: limit.maximum,
                },
            );
        }
    }
    to_limit(getrlimit(Resource::Nofile).current)
}

/// The kernel's ceiling of any process's descriptor limit.
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn to_limit(value: Option<u64>) -> Limit {
    value.map_or(Limit::Unlimited, Limit::Finite)
}

/// What ran out, when `e` is `EMFILE` or `ENFILE`, with the limits as they stand now.
pub(crate) fn shortage(e: &io::Error) -> Option<Shortage> {
    let role = ROLE.get().copied().unwrap_or(Role::Launcher);
    let exhausted = match e.raw_os_error()? {
        libc::EMFILE => {
            let limit = getrlimit(Resource::Nofile);
            Exhausted::Process {
                soft: to_limit(limit.current),
                hard: to_limit(limit.maximum),
            }
        }
        libc::ENFILE => Exhausted::System {
            file_max: std::fs::read_to_string("/proc/sys/fs/file-max")
                .ok()
                .and_then(|text| text.trim().parse().ok()),
        },
        _ => return None,
    };
    Some(Shortage {
        process: role.process(),
        exhausted,
        under_slurm: std::env::var_os("SLURM_JOB_ID").is_some(),
    })
}

/// `e` as a sentence: the limit, the process and what to raise when it is a shortage of
/// descriptors, else the operating system's text.
pub(crate) fn explain(e: &io::Error) -> String {
    match shortage(e) {
        Some(shortage) => shortage.to_string(),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let soft = raise_open_files(Role::Launcher);
        let limit = getrlimit(Resource::Nofile);
        assert_eq!(soft, to_limit(limit.current));
        if let Some(hard) = limit.maximum {
            assert_eq!(limit.current, Some(hard));
        }
    }

    #[test]
    fn a_shortage_names_the_process_and_the_limit() {
        let emfile = Shortage {
            process: Role::Launcher.process(),
            ..shortage(&io::Error::from_raw_os_error(libc::EMFILE)).unwrap()
        };
        let text = emfile.to_string();
        assert!(
            text.starts_with("the launcher ran out of file descriptors"),
            "{text}"
        );
        assert!(text.contains("RLIMIT_NOFILE is"), "{text}");
        let enfile = Shortage {
            process: Role::NodeDaemon.process(),
            ..shortage(&io::Error::from_raw_os_error(libc::ENFILE)).unwrap()
        };
        let text = enfile.to_string();
        assert!(text.starts_with("the node daemon on host "), "{text}");
        assert!(text.contains("fs.file-max"), "{text}");
    }

    #[test]
    fn other_errors_keep_their_text() {
        let e = io::Error::from_raw_os_error(libc::EAGAIN);
        assert!(shortage(&e).is_none());
        assert_eq!(explain(&e), e.to_string());
    }
}
