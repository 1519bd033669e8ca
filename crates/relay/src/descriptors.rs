//! The relay's descriptors: how many connections the process's limit leaves room for, and how
//! the listener keeps draining its queue when descriptors run out anyway.
//!
//! A relay started from an ssh login gets a soft limit of 1 024 descriptors, below the default
//! `--max-connections`. The relay raises the soft limit to the hard one, then keeps its
//! connections within what is left: one descriptor per socket and, for a forwarded pair, a
//! pipe (two descriptors) per direction, so [`PER_CONNECTION`] each. Should `accept` still fail
//! for want of descriptors (another process of the user used them up: `ENFILE`), the relay sheds
//! a stranger, or accepts with a [`Spare`] descriptor and closes at once: the listener's queue
//! is always drained, so its edge-triggered readiness fires again for the next connection.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

/// Descriptors one connection may hold: its socket and half of its pair's two pipes.
pub const PER_CONNECTION: u64 = 3;
/// Descriptors kept for the rest of the process: standard streams, the poll, the listener,
/// signal pipes, the spare, key files being read, the sockmap's maps and program.
pub const RESERVED: u64 = 32;
/// How soon accepting is tried again after a failure that draining could not get past.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// Raises the soft descriptor limit to the hard one (as far as the kernel allows) and returns
/// the soft limit then in force; `None` when it is unlimited.
pub fn raise_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        // Refused (e.g. above fs.nr_open): the old soft limit stays, and is what counts.
        let _ = setrlimit(Resource::Nofile, raised);
    }
    getrlimit(Resource::Nofile).current
}

/// The connections a soft limit of `soft` descriptors has room for, at most `wanted`.
pub fn connections_within(soft: Option<u64>, wanted: usize) -> usize {
    let Some(soft) = soft else {
        return wanted;
    };
    let room = soft.saturating_sub(RESERVED) / PER_CONNECTION;
    usize::try_from(room).unwrap_or(usize::MAX).min(wanted)
}

/// Whether a failed `accept` failed for want of descriptors or kernel memory: the connection
/// stays queued, so the listener must be drained another way or looked at again.
pub fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// A descriptor held in reserve: closed to make room for one `accept` whose connection is
/// closed at once, then opened again.
pub struct Spare(Option<OwnedFd>);

impl Spare {
    /// Holds a descriptor of `/dev/null` (none if it cannot be opened: then the listener
    /// falls back to trying again after [`ACCEPT_RETRY`]).
    pub fn open() -> Spare {
        Spare(Self::dev_null())
    }

    fn dev_null() -> Option<OwnedFd> {
        use rustix::fs::{open, Mode, OFlags};
        open("/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()
    }

    /// Frees the spare, accepts one queued connection and closes it, and takes the spare
    /// again. Returns whether a connection was taken off the queue.
    pub fn turn_away_one(&mut self, listener: &impl AsRawFd) -> bool {
        if self.0.take().is_none() {
            return false;
        }
        // SAFETY: the listener's descriptor is open for the duration of this borrow; the
        // accepted socket becomes an owned descriptor closed right away.
        let listener = unsafe { rustix::fd::BorrowedFd::borrow_raw(listener.as_raw_fd()) };
        let taken = rustix::net::accept_with(listener, rustix::net::SocketFlags::CLOEXEC).is_ok();
        self.0 = Self::dev_null();
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn connections_fit_the_soft_limit() {
        assert_eq!(connections_within(None, 4096), 4096);
        assert_eq!(connections_within(Some(1 << 20), 4096), 4096);
        assert_eq!(connections_within(Some(1024), 4096), (1024 - 32) / 3);
        assert_eq!(connections_within(Some(64), 4096), 10);
        assert_eq!(connections_within(Some(8), 4096), 0);
    }

    #[test]
    fn the_spare_takes_a_queued_connection_off() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let _queued = std::net::TcpStream::connect(addr).unwrap();
        let mut spare = Spare::open();
        // Loopback completes the handshake before connect returns: the connection is queued.
        assert!(spare.turn_away_one(&listener));
        assert!(!spare.turn_away_one(&listener), "queue empty");
        assert!(spare.0.is_some(), "the spare is held again");
    }

    #[test]
    fn descriptor_errors_are_told_apart() {
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(
            libc::ENFILE
        )));
        assert!(!out_of_descriptors(&io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
    }
}
