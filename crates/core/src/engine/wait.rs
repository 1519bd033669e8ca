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
    pub(crate) fn wait_until(&mut self, mut done: impl FnMut(&Proto) -> bool) -> Result<(), Error> {
        let mut idle = 0;
        while !done(&self.proto) {
            idle = self.wait_pass(idle)?;
        }
        Ok(())
    }

    /// One pass of a wait that is not over: progress, or else back off, `idle` being how many
    /// passes in a row found nothing before this one. Returns that count after this pass.
    pub(crate) fn wait_pass(&mut self, idle: u32) -> Result<u32, Error> {
        self.wait_pass_watching(idle, None)
    }

    /// [`Engine::wait_pass`] of a wait that also ends when `watch` is reached: a sleep looks
    /// at it once more after announcing itself, so a store that comes with a wake-up (see
    /// `ShmTransport::wake`) is never slept through.
    pub(crate) fn wait_pass_watching(
        &mut self,
        idle: u32,
        watch: Option<Watch<'_>>,
    ) -> Result<u32, Error> {
        // A wait of a rank with shared-memory peers polls TCP on every TCP_SPIN_EVERY-th look
        // only (counted across waits, so that quick waits on rings cannot starve TCP); calls
        // outside a wait (a test, a probe) always do.
        let tcp = self.shm.is_none() || {
            self.looks_without_tcp += 1;
            self.looks_without_tcp >= TCP_SPIN_EVERY
        };
        if self.progress_looking(tcp)? {
            return Ok(0);
        }
        self.back_off(idle + 1, watch)?;
        Ok(idle + 1)
    }

    /// Waits a little after `idle` passes in a row found nothing: spins, then yields, then
    /// sleeps until a transport wakes us (or the nap ends).
    pub(super) fn back_off(&mut self, idle: u32, watch: Option<Watch<'_>>) -> Result<(), Error> {
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
            self.block(watch)?;
        }
        Ok(())
    }

    /// Whether a shared-memory peer last waited on the CPU this rank spins on. The scheduler
    /// may put two ranks on one core (a wake-up pulls the woken rank to the waker's core, and
    /// other work holds the second core); spinning then holds back the peer until the spin
    /// ends, about 100 µs a message. So a spin looks now and then, and yields when it shares
    /// the core. A wait's first look publishes this rank's CPU.
    #[cold]
    #[inline(never)]
    pub(super) fn spins_beside_a_peer(&self, idle: u32) -> bool {
        let Some(shm) = self.shm.as_ref() else {
            return false;
        };
        // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
        let Ok(cpu) = u32::try_from(unsafe { libc::sched_getcpu() }) else {
            return false;
        };
        if idle == SHARED_CPU_LOOK {
            shm.note_cpu(cpu);
        }
        shm.shares_cpu(cpu)
    }

    /// Sleeps until a transport has something for us (or a short timeout).
    #[cold]
    #[inline(never)]
    pub(super) fn block(&mut self, watch: Option<Watch<'_>>) -> Result<(), Error> {
        let watched = |w: Option<Watch<'_>>| w.is_some_and(|w| w.reached());
        if self.tcp.is_some() {
            if !self.doorbell {
                // Shared-memory peers cannot wake an epoll without the doorbell: look at the
                // rings every millisecond.
                let nap = match self.shm {
                    Some(_) => self.nap.min(Duration::from_millis(1)),
                    None => self.nap,
                };
                return self.sleep_in_poll(nap);
            }
            // As on the futex below: announce, look once more, then sleep; a shared-memory
            // peer that stores a record after our look sees the announcement and rings.
            if let Some(shm) = self.shm.as_ref() {
                shm.prepare_sleep(Sleep::InPoll);
            }
            let slept = match self.progress() {
                Ok(true) => Ok(()),
                Ok(false) if watched(watch) => Ok(()),
                Ok(false) => self.sleep_in_poll(self.nap),
                Err(e) => Err(e),
            };
            if let Some(shm) = self.shm.as_ref() {
                shm.cancel_sleep();
            }
            return slept;
        }
        if self.shm.is_some() {
            if let Some(shm) = self.shm.as_ref() {
                shm.prepare_sleep(Sleep::OnFutex);
            }
            let progressed = self.progress()? || watched(watch);
            if let Some(shm) = self.shm.as_ref() {
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
        if let Some(tcp) = self.tcp.as_mut() {
            tcp.poll_input(&mut self.proto, Some(timeout))
                .map_err(|e| self.proto.with_pid(e))?;
        }
        self.after_tcp_input();
        self.send_active_replies()?;
        self.flush()?;
        Ok(())
    }

    /// Waits for one request and returns its completion.
    pub(crate) fn wait(&mut self, id: ReqId) -> Result<Completion, Error> {
        self.wait_until(|p| p.is_done(id))?;
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
        self.shm.as_ref()
    }
}
