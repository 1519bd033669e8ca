//! A rank's file descriptors: its soft `RLIMIT_NOFILE` raised to the hard limit when it starts,
//! and an error for want of descriptors explained ([`ferry_wire::limits`]: which limit, this
//! rank, what to raise) instead of a bare "Too many open files".
//!
//! A rank holds one socket per TCP peer and rail, besides a few of its own (see
//! docs/launcher.md, "File descriptors"): a thousand TCP peers need more than the usual soft
//! limit of 1 024. A rank started by `ferry run` inherits the launcher's raised limit; one
//! started by Slurm's srun, MPICH's hydra or another process manager gets what that gives, so
//! the rank raises its own, as MPICH and Open MPI processes do.

use crate::error::Error;
use ferry_wire::limits::{Exhausted, Limit, Process, Shortage};
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// This process's universe rank once [`note_rank`] is told it; `u32::MAX` before.
static RANK: AtomicU32 = AtomicU32::new(u32::MAX);

/// Raises the soft descriptor limit to the hard one (to `fs.nr_open` when the hard limit is
/// unlimited, the most the kernel grants); returns the soft limit then in force. Called first
/// in `init`, before the bootstrap connection, the segments and the sockets take theirs. A
/// refusal leaves the limit as it was: a shortage is explained when it comes.
pub(crate) fn raise_open_files() -> Limit {
    if let Some((soft, hard)) = get() {
        let ceiling = hard.or_else(nr_open);
        if let Some(ceiling) = ceiling.filter(|&c| soft.is_none_or(|s| s < c)) {
            set(ceiling, hard);
        }
    }
    match get() {
        Some((Some(soft), _)) => Limit::Finite(soft),
        _ => Limit::Unlimited,
    }
}

/// Says which rank this process is, for the explanations of a shortage from then on.
pub(crate) fn note_rank(universe_rank: u32) {
    RANK.store(universe_rank, Ordering::Relaxed);
}

/// The soft and hard `RLIMIT_NOFILE` (`None`: unlimited); `None` if it cannot be read.
fn get() -> Option<(Option<u64>, Option<u64>)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid, exclusively borrowed `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    let value = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Some((value(limit.rlim_cur), value(limit.rlim_max)))
}

/// Sets the soft limit to `soft`, keeping the hard one; a refusal is ignored (see
/// [`raise_open_files`]).
fn set(soft: u64, hard: Option<u64>) {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard.unwrap_or(libc::RLIM_INFINITY),
    };
    // SAFETY: setrlimit reads one rlimit from the valid `limit`; it changes only this
    // process's limit.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
}

/// The kernel's ceiling of any process's descriptor limit.
fn nr_open() -> Option<u64> {
    read_number("/proc/sys/fs/nr_open")
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn to_limit(value: Option<u64>) -> Limit {
    value.map_or(Limit::Unlimited, Limit::Finite)
}

/// What ran out, when `e` is `EMFILE` or `ENFILE`, with the limits as they stand now.
pub(crate) fn shortage(e: &io::Error) -> Option<Shortage> {
    let exhausted = match e.raw_os_error()? {
        libc::EMFILE => {
            let (soft, hard) = get()?;
            Exhausted::Process {
                soft: to_limit(soft),
                hard: to_limit(hard),
            }
        }
        libc::ENFILE => Exhausted::System {
            file_max: read_number("/proc/sys/fs/file-max"),
        },
        _ => return None,
    };
    let rank = RANK.load(Ordering::Relaxed);
    Some(Shortage {
        process: Process::Rank {
            rank: (rank != u32::MAX).then_some(rank),
            host: hostname(),
        },
        exhausted,
        under_slurm: std::env::var_os("SLURM_JOB_ID").is_some(),
    })
}

/// This machine's host name, or `localhost`. Through gethostname, not /proc: a process out of
/// descriptors cannot open a file. (With `ENFILE` the system's table is full, so fs.file-max
/// may not be readable either: the explanation then says "unknown".)
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call; gethostname
    // writes at most `len` bytes into it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match String::from_utf8_lossy(&buf[..end]) {
        name if rc == 0 && !name.is_empty() => name.into_owned(),
        _ => "localhost".into(),
    }
}

/// `e` as a sentence: the limit, this rank and what to raise when it is a shortage of
/// descriptors, else the operating system's text.
pub(crate) fn explain(e: &io::Error) -> String {
    match shortage(e) {
        Some(shortage) => shortage.to_string(),
        None => e.to_string(),
    }
}

/// A transport's set-up error: `what` failed, and why ([`explain`]).
pub(crate) fn transport_error(what: &str, e: &io::Error) -> Error {
    Error::Transport(format!("{what}: {}", explain(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let soft = raise_open_files();
        let (now, hard) = get().expect("getrlimit");
        assert_eq!(soft, to_limit(now));
        if hard.is_some() {
            assert_eq!(now, hard);
        }
    }

    #[test]
    fn a_shortage_names_the_rank_the_limit_and_what_to_raise() {
        note_rank(5);
        let text = explain(&io::Error::from_raw_os_error(libc::EMFILE));
        assert!(text.starts_with("rank 5 (host "), "{text}");
        assert!(text.contains("RLIMIT_NOFILE is"), "{text}");
        let error = transport_error(
            "cannot connect rail 0 to rank 9",
            &io::Error::from_raw_os_error(libc::ENFILE),
        );
        let text = error.to_string();
        assert!(
            text.contains("cannot connect rail 0 to rank 9: rank 5"),
            "{text}"
        );
        assert!(text.contains("fs.file-max"), "{text}");
    }

    #[test]
    fn other_errors_keep_their_text() {
        let e = io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert!(shortage(&e).is_none());
        assert_eq!(explain(&e), e.to_string());
    }
}
