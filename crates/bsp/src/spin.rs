//! How a waiting sync spends its time: spin, yield, then sleep.

use ferry_core::raw::RawRequest;
use ferry_core::Comm;
use std::time::{Duration, Instant};

/// Longest spin (µs) of a waiting sync before it yields, when each process has a core.
pub(crate) const SPIN_US: u64 = 50;

/// How long a waiting sync spins before it yields its core, adapted from wait to wait.
///
/// Spinning catches a peer on another core within a µs, where a yield costs a system call or,
/// on a loaded host, the core. It also decides where the processes run: two processes that
/// yield while they wait at start-up (for milliseconds, until all have started) are left on
/// the core they were forked on and then take turns on it for ~3 µs per sync; two that spin
/// there are moved to separate cores by the scheduler, and stay (2 processes on 2 cores: a
/// 10 ms spin separated them in 7 runs of 7, 50 µs–1 ms in 1 of 9). But a long spin on a core
/// that the peer needs wastes the whole spin: with 10 ms throughout, LU (512 syncs) at P = 2
/// took 5–410 ms instead of 5–15. So waits spin up to `START` until the job has spent
/// `START_BUDGET` in such spins that did not catch the peer or were preempted (a spinning
/// process that shares its core with the peer gets the message after a scheduler slice: with
/// overruns alone counted, one probe at P = 2 measured L = 488 µs); then up to `max`. After a wait that outlasted its spin, the next spin is half as long
/// (down to none); after one that ended while spinning, twice as long (from `PROBE`). Every
/// `PROBE_EVERY`-th wait spins at least `PROBE`, so that processes that have got separate
/// cores find out.
#[derive(Debug)]
pub(crate) struct Spin {
    pub(crate) max: Duration,
    pub(crate) now: Duration,
    pub(crate) waits: u32,
    // Time spent in spins that did not catch the peer.
    pub(crate) wasted: Duration,
}

/// The spin of every `PROBE_EVERY`-th wait when the spin has decayed: a few one-way latencies
/// on shared memory.
pub(crate) const PROBE: Duration = Duration::from_micros(4);
pub(crate) const PROBE_EVERY: u32 = 16;

/// The spin of the waits of a job until it has spent `START_BUDGET` in spins that did not
/// catch the peer (unless the spin is off).
pub(crate) const START: Duration = Duration::from_millis(10);
pub(crate) const START_BUDGET: Duration = Duration::from_millis(50);

/// A wait with a `START` spin that took longer than this was preempted (or its peer is busy).
pub(crate) const PREEMPTED: Duration = Duration::from_micros(200);

/// How long a wait yields between polls (after its spin) before it lets ferry-core's back-off
/// put it to sleep.
pub(crate) const YIELD_FOR: Duration = Duration::from_micros(200);

impl Spin {
    pub(crate) fn new(max: Duration) -> Spin {
        Spin {
            max,
            now: max,
            waits: 0,
            wasted: Duration::ZERO,
        }
    }

    /// Drives ferry-core until `done` holds: polls, spinning while the spin lasts, then yielding
    /// the core between polls, and only after `YIELD_FOR` of that ferry-core's `wait_until`,
    /// which sleeps (a sleeper that must be woken adds tens of µs: using `wait_until` at once
    /// tripled L at P = 4 and 8 on 2 cores; yielding for ever made g 20-50 % worse there, the
    /// waiting processes taking turns with those that apply puts).
    #[inline]
    pub(crate) fn wait(
        &mut self,
        comm: &Comm,
        mut done: impl FnMut(&dyn Fn(RawRequest) -> bool) -> bool,
    ) -> Result<(), ferry_core::Error> {
        if done(&|r| comm.raw_done(r)) {
            return Ok(());
        }
        // What has arrived already is no wait (a message left in its ring by the last sync,
        // for one): it must not teach the spin anything.
        comm.progress()?;
        if done(&|r| comm.raw_done(r)) {
            return Ok(());
        }
        self.waits = self.waits.saturating_add(1);
        let spin = if self.max.is_zero() {
            Duration::ZERO
        } else if self.wasted < START_BUDGET {
            START
        } else if self.waits.is_multiple_of(PROBE_EVERY) {
            self.now.max(PROBE.min(self.max))
        } else {
            self.now
        };
        let start = Instant::now();
        let mut yielded = false;
        loop {
            comm.progress()?;
            if done(&|r| comm.raw_done(r)) {
                break;
            }
            let waited = start.elapsed();
            if waited >= spin + YIELD_FOR {
                // A long wait (a peer computing): ferry-core's back-off, which sleeps, so that
                // the processes with work get the cores.
                comm.wait_until(&mut done)?;
                yielded = true;
                break;
            }
            if yielded || waited >= spin {
                yielded = true;
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let took = start.elapsed();
        if spin == START && (yielded || took > PREEMPTED) {
            // A spin that did not catch the peer, or was preempted (the peer needed the core).
            self.wasted += took.min(START);
        }
        // A wait that ended while spinning but took much longer than the spin was preempted:
        // as good as one that outlasted it.
        self.now = if yielded || took > 2 * spin + PROBE {
            self.now / 2
        } else {
            (self.now * 2).max(PROBE).min(self.max)
        };
        Ok(())
    }
}
