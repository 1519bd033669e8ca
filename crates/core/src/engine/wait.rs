//! Waiting: progress passes with back-off from spinning to yielding to sleeping (a futex in
//! the shared-memory segment, or epoll), so that ranks outnumbering cores still progress.

use super::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// A word in shared memory a wait watches besides the transports, and the value it waits for:
/// reached once the word is at it or past it (counting with wrap-around).
#[derive(Clone, Copy)]
pub(crate) struct Watch<'a> {
    pub(crate) word: &'a AtomicU32,
    pub(crate) target: u32,
}

impl Watch<'_> {
    #[inline]
    pub(crate) fn reached(&self) -> bool {
        self.word.load(Ordering::Acquire).wrapping_sub(self.target) as i32 >= 0
    }
}

impl Engine {
    /// Drives progress until `done` holds, backing off from spinning to sleeping.
    pub(crate) fn wait_until(
        &mut self,
        hook: &mut impl Hook,
        mut done: impl FnMut(&Proto) -> bool,
    ) -> Result<(), Error> {
        let mut idle = 0;
        while !done(&self.proto) {
            idle = self.wait_pass(hook, idle)?;
        }
        Ok(())
    }

    /// One pass of a wait that is not over: progress, or else back off, `idle` being how many
    /// passes in a row found nothing before this one. Returns that count after this pass.
    pub(crate) fn wait_pass(&mut self, hook: &mut impl Hook, idle: u32) -> Result<u32, Error> {
        self.wait_pass_watching(hook, idle, None)
    }

    /// [`Engine::wait_pass`] of a wait that also ends when `watch` is reached: a sleep looks
    /// at it once more after announcing itself, so a store that comes with a wake-up (see
    /// `ShmTransport::wake`) is never slept through.
    pub(crate) fn wait_pass_watching(
        &mut self,
        hook: &mut impl Hook,
        idle: u32,
        watch: Option<Watch<'_>>,
    ) -> Result<u32, Error> {
        // A wait of a rank with shared-memory or fabric peers polls TCP on every
        // TCP_SPIN_EVERY-th look only (counted across waits, so that quick waits on rings or
        // the fabric cannot starve TCP); calls outside a wait (a test, a probe) always do.
        let tcp = (self.net.shm.is_none() && self.net.fabric.is_none()) || {
            self.net.looks_without_tcp += 1;
            self.net.looks_without_tcp >= TCP_SPIN_EVERY
        };
        if self.progress_looking(hook, tcp)? {
            return Ok(0);
        }
        self.back_off(hook, idle + 1, watch)?;
        Ok(idle + 1)
    }

    /// Waits a little after `idle` passes in a row found nothing: spins, then yields, then
    /// sleeps until a transport wakes us (or the nap ends).
    pub(super) fn back_off(
        &mut self,
        hook: &mut impl Hook,
        idle: u32,
        watch: Option<Watch<'_>>,
    ) -> Result<(), Error> {
        // A wait that backs off lets the hook look now and then for what can never complete.
        if hook.watching() && (idle.is_multiple_of(LOOK_EVERY) || idle >= self.spin + 20) {
            hook.look(Instant::now())?;
        }
        if idle < self.spin {
            if self.spin_yield
                || (idle.is_multiple_of(SHARED_CPU_LOOK) && self.spins_beside_a_peer(idle))
            {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else if idle < self.spin + 20 {
            std::thread::yield_now();
        } else {
            self.block(hook, watch)?;
        }
        Ok(())
    }

    /// Whether a shared-memory peer last waited on the CPU this rank spins on. The scheduler
    /// may put two ranks on one core (a wake-up pulls the woken rank to the waker's core, and
    /// other work holds the second core); spinning then holds back the peer until the spin
    /// ends, about 100 µs a message. So a spin looks now and then, and yields when it shares
    /// the core. A wait's first look publishes this rank's CPU.
    ///
    /// Where the ranks have a core each, the higher-ranked of the two also moves itself to
    /// another core: with busy processes on the others the kernel's balancer sees two tasks a
    /// core and leaves the pair together, every message then waiting for a yield (2.5–2.9 µs
    /// an 8 B allreduce beside two busy loops, against 0.5 µs apart).
    #[cold]
    #[inline(never)]
    pub(super) fn spins_beside_a_peer(&mut self, idle: u32) -> bool {
        let Some(shm) = self.net.shm.as_ref() else {
            return false;
        };
        // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
        let Ok(cpu) = u32::try_from(unsafe { libc::sched_getcpu() }) else {
            return false;
        };
        if idle == SHARED_CPU_LOOK {
            shm.note_cpu(cpu);
        }
        let Some(peer) = shm.sharing_cpu(cpu) else {
            return false;
        };
        // Only the higher of the two moves, and only where the ranks have a core each.
        if !self.spin_yield && peer < shm.me() {
            let now = Instant::now();
            if self
                .moved_at
                .is_none_or(|at| now.duration_since(at) >= MOVE_AT_MOST_EVERY)
            {
                self.moved_at = Some(now);
                if move_off(cpu) {
                    // SAFETY: as above.
                    if let Ok(new) = u32::try_from(unsafe { libc::sched_getcpu() }) {
                        shm.note_cpu(new);
                    }
                    return false;
                }
            }
        }
        true
    }

    /// Sleeps until a transport has something for us (or a short timeout).
    #[cold]
    #[inline(never)]
    pub(super) fn block(
        &mut self,
        hook: &mut impl Hook,
        watch: Option<Watch<'_>>,
    ) -> Result<(), Error> {
        let watched = |w: Option<Watch<'_>>| w.is_some_and(|w| w.reached());
        if let Some(fabric) = self.net.fabric.as_mut() {
            if fabric.wake_fd().is_none() {
                // Nothing to sleep on for the fabric: look at it every millisecond.
                return self.sleep_in_poll(self.nap.min(Duration::from_millis(1)));
            }
            if !fabric.try_wait() {
                // Completions wait to be read: no sleep (the fabric's rule before blocking
                // on its descriptor).
                return Ok(());
            }
        }
        if self.net.tcp.is_some() {
            if !self.net.doorbell {
                // Shared-memory peers cannot wake an epoll without the doorbell: look at the
                // rings every millisecond.
                let nap = match self.net.shm {
                    Some(_) => self.nap.min(Duration::from_millis(1)),
                    None => self.nap,
                };
                return self.sleep_in_poll(nap);
            }
            // As on the futex below: announce, look once more, then sleep; a shared-memory
            // peer that stores a record after our look sees the announcement and rings.
            if let Some(shm) = self.net.shm.as_ref() {
                shm.prepare_sleep(Sleep::InPoll);
            }
            let slept = match self.progress(hook) {
                Ok(true) => Ok(()),
                Ok(false) if watched(watch) => Ok(()),
                Ok(false) => self.sleep_in_poll(self.nap),
                Err(e) => Err(e),
            };
            if let Some(shm) = self.net.shm.as_ref() {
                shm.cancel_sleep();
            }
            return slept;
        }
        if self.net.shm.is_some() {
            if let Some(shm) = self.net.shm.as_ref() {
                shm.prepare_sleep(Sleep::OnFutex);
            }
            let progressed = self.progress(hook)? || watched(watch);
            if let Some(shm) = self.net.shm.as_ref() {
                if progressed {
                    shm.cancel_sleep();
                } else {
                    shm.sleep(self.nap);
                }
            }
            return Ok(());
        }
        std::thread::yield_now();
        Ok(())
    }

    /// Waits in TCP's epoll up to `timeout`, then handles what came.
    pub(super) fn sleep_in_poll(&mut self, timeout: Duration) -> Result<(), Error> {
        if let Some(tcp) = self.net.tcp.as_mut() {
            tcp.poll_wait(&mut self.proto, Some(timeout))
                .map_err(|e| self.proto.with_pid(e))?;
        }
        self.after_tcp_input();
        self.send_active_replies()?;
        self.flush()?;
        Ok(())
    }

    /// Waits for one request and returns its completion.
    pub(crate) fn wait(&mut self, hook: &mut impl Hook, id: ReqId) -> Result<Completion, Error> {
        self.wait_until(hook, |p| p.is_done(id))?;
        self.take(id).ok_or_else(|| Error::Protocol {
            rank: self.proto.me as usize,
            detail: format!("request {id:#x} vanished"),
        })
    }
}

impl Engine {
    /// The shared-memory transport, if this rank has peers on its host (shared collective
    /// segments wake those peers through it).
    pub(crate) fn shm_transport(&self) -> Option<&ShmTransport> {
        self.net.shm.as_ref()
    }
}

/// How often a rank moves itself off a core it shares with a peer at most, so that two ranks
/// that keep being put together do not spend their time moving.
const MOVE_AT_MOST_EVERY: Duration = Duration::from_millis(10);

/// Idle passes between two looks of the hook while spinning.
const LOOK_EVERY: u32 = 1024;

/// Moves the calling thread off `cpu` to another CPU it may run on, and leaves its affinity as
/// it was (the thread is not pinned anywhere after). False when it may run on `cpu` alone.
pub(super) fn move_off(cpu: u32) -> bool {
    let cpu = cpu as usize;
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most `size` bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set of `size` bytes; pid 0 is the calling thread. CPU_ISSET and
    // CPU_COUNT read the set, `cpu` below CPU_SETSIZE.
    let movable = unsafe {
        libc::sched_getaffinity(0, size, &mut set) == 0
            && cpu < libc::CPU_SETSIZE as usize
            && libc::CPU_ISSET(cpu, &set)
            && libc::CPU_COUNT(&set) >= 2
    };
    if !movable {
        return false;
    }
    let allowed = set;
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_CLR(cpu, &mut set) };
    // SAFETY: valid sets of `size` bytes for the calling thread; excluding the CPU it runs on
    // moves it at once, and the mask it had is set back after.
    unsafe {
        let moved = libc::sched_setaffinity(0, size, &set) == 0;
        libc::sched_setaffinity(0, size, &allowed);
        moved
    }
}
