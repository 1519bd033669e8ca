//! The launcher's signals for the duration of a job: SIGINT, SIGTERM and SIGHUP are caught
//! (and passed on to the ranks by the monitor) instead of ending the launcher, and SIGCHLD
//! says that a child has ended, so that the monitor waits for ranks only then.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Signals that the launcher passes on to the job.
const FORWARDED_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The launcher's SIGINT / SIGTERM / SIGHUP, caught for the duration of a job.
pub(crate) struct Signals {
    caught: Arc<AtomicUsize>,
    /// Set when a child ended (`None` if that handler could not be installed).
    pub(crate) child_exited: Option<Arc<AtomicBool>>,
    ids: Vec<signal_hook::SigId>,
}

impl Signals {
    pub(crate) fn install() -> io::Result<Signals> {
        let caught = Arc::new(AtomicUsize::new(0));
        let mut signals = Signals {
            caught,
            child_exited: None,
            ids: Vec::new(),
        };
        // Set from the start: children that ended before are looked for at the first reap.
        let exited = Arc::new(AtomicBool::new(true));
        if let Ok(id) = signal_hook::flag::register(libc::SIGCHLD, Arc::clone(&exited)) {
            signals.ids.push(id);
            signals.child_exited = Some(exited);
        }
        for signal in FORWARDED_SIGNALS {
            let id = signal_hook::flag::register_usize(
                signal,
                Arc::clone(&signals.caught),
                signal as usize,
            )?;
            signals.ids.push(id);
        }
        Ok(signals)
    }

    /// The last signal caught since the previous call, if any.
    pub(crate) fn take(&self) -> Option<libc::c_int> {
        match self.caught.swap(0, Ordering::SeqCst) {
            0 => None,
            signal => libc::c_int::try_from(signal).ok(),
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
