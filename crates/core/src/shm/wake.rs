//! Waking a rank that sleeps: the fences that order a sleeper's announcement against a
//! waker's store (membarrier), the futex wake-up, and the doorbell of a rank that sleeps in
//! epoll (see the module doc of `shm` for the protocol).

use super::*;

/// `membarrier(2)` commands (linux/membarrier.h).
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
pub(super) const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;

/// How this process orders a wake-up check against its store (see the module doc).
pub(super) struct Barriers {
    /// The kernel has the global expedited membarrier: a sleeper issues it.
    pub(super) heavy_for_sleepers: bool,
    /// This process is registered as its target: its wake-up checks need no fence.
    pub(super) light_for_wakers: bool,
}

pub(super) fn barriers() -> &'static Barriers {
    static BARRIERS: std::sync::OnceLock<Barriers> = std::sync::OnceLock::new();
    BARRIERS.get_or_init(|| {
        // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
        let supported = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0) };
        let global = supported >= 0 && supported & MEMBARRIER_CMD_GLOBAL_EXPEDITED != 0;
        // SAFETY: as above; registering only makes this process a target of the command.
        let registered = global
            && unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
                    0,
                )
            } == 0;
        Barriers {
            heavy_for_sleepers: global,
            light_for_wakers: registered,
        }
    })
}

/// A peer that may sleep waiting for what this rank stores into their shared ring: a
/// producer for records, a consumer for free space.
#[derive(Clone, Copy)]
pub(super) struct Sleeper {
    /// Its segment's sleeping word.
    pub(super) sleeping: *const AtomicU32,
    pub(super) job: u64,
    pub(super) rank: u32,
    /// This rank, for the log.
    pub(super) me: u32,
}

impl Sleeper {
    /// Wakes the peer if it sleeps. Called after a store it waits for: the store, then this
    /// load (see the module doc for the fences). A message to a peer that is awake costs the
    /// load and a branch; the wake-up itself is out of line.
    #[inline]
    pub(super) fn wake_if_sleeping(&self) {
        if barriers().light_for_wakers {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
        // SAFETY: points into a peer segment, which the transport keeps mapped.
        if unsafe { &*self.sleeping }.load(Ordering::Relaxed) != AWAKE {
            self.wake();
        }
    }

    #[cold]
    #[inline(never)]
    fn wake(&self) {
        // SAFETY: as in `wake_if_sleeping`.
        let sleeping = unsafe { &*self.sleeping };
        match sleeping.swap(AWAKE, Ordering::SeqCst) {
            ON_FUTEX => {
                // SAFETY: FUTEX_WAKE on a valid, 4-aligned word of shared memory; no other
                // memory is touched. Not FUTEX_PRIVATE: the waiter is another process.
                unsafe {
                    libc::syscall(libc::SYS_futex, sleeping.as_ptr(), libc::FUTEX_WAKE, 1);
                }
            }
            IN_POLL => {
                static RINGER: std::sync::Mutex<Ringer> = std::sync::Mutex::new(Ringer::new());
                let mut ringer = RINGER.lock().unwrap_or_else(|e| e.into_inner());
                ringer.ring(self.job, self.me, self.rank);
            }
            _ => {}
        }
    }
}

/// Abstract-namespace name of `rank`'s doorbell in job `job`.
pub(super) fn doorbell_name(job: u64, rank: u32) -> String {
    format!("ferry-{job}-{rank}-wake")
}

/// The wake-up object of a rank that sleeps in epoll: a nonblocking UNIX datagram socket bound
/// to an abstract name made from the job and the rank, so peers need nothing but those to ring
/// it and nothing is left behind when the process ends. Any datagram is a wake-up; the owner
/// watches it for readability (edge-triggered) and [`Doorbell::drain`]s it after every event,
/// so the next datagram is an edge again. Strangers can only cause spurious wake-ups. The name
/// lives in the network namespace: ranks `ferry run` starts on one host share it; a waker in
/// another one cannot ring (it says so once) and the sleeper then wakes at its nap's end.
pub(crate) struct Doorbell {
    socket: mio::net::UnixDatagram,
}

impl Doorbell {
    /// Binds `rank`'s doorbell of job `job`.
    pub(crate) fn bind(job: u64, rank: u32) -> std::io::Result<Doorbell> {
        let addr = UnixAddr::from_abstract_name(doorbell_name(job, rank))?;
        let socket = UnixDatagram::bind_addr(&addr)?;
        socket.set_nonblocking(true)?;
        Ok(Doorbell {
            socket: mio::net::UnixDatagram::from_std(socket),
        })
    }

    /// Reads every queued ring; returns whether there was any.
    pub(crate) fn drain(&self) -> bool {
        let mut any = false;
        let mut buf = [0u8; 8];
        loop {
            match self.socket.recv(&mut buf) {
                Ok(_) => any = true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // WouldBlock: empty. Anything else cannot be fixed by reading again.
                Err(_) => return any,
            }
        }
    }
}

impl mio::event::Source for Doorbell {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> std::io::Result<()> {
        self.socket.register(registry, token, interests)
    }
    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> std::io::Result<()> {
        self.socket.reregister(registry, token, interests)
    }
    fn deregister(&mut self, registry: &mio::Registry) -> std::io::Result<()> {
        self.socket.deregister(registry)
    }
}

/// The sending side of doorbells, made on the first ring: one unbound socket and the address
/// of each doorbell rung. One per process.
pub(super) struct Ringer {
    socket: Option<UnixDatagram>,
    addrs: Vec<((u64, u32), UnixAddr)>,
    /// A failure was logged; later ones are not.
    pub(super) complained: bool,
}

impl Ringer {
    pub(super) const fn new() -> Ringer {
        Ringer {
            socket: None,
            addrs: Vec::new(),
            complained: false,
        }
    }

    /// Rings `peer`'s doorbell of job `job` once. A full queue is fine: rings wait there
    /// unread, so the peer wakes anyway. Any other failure is logged once; the peer then wakes
    /// when its epoll times out (its nap), which is slow but never a hang.
    pub(super) fn ring(&mut self, job: u64, me: u32, peer: u32) {
        let result = (|| {
            if self.socket.is_none() {
                let socket = UnixDatagram::unbound()?;
                socket.set_nonblocking(true)?;
                self.socket = Some(socket);
            }
            let at = match self.addrs.iter().position(|(k, _)| *k == (job, peer)) {
                Some(at) => at,
                None => {
                    let addr = UnixAddr::from_abstract_name(doorbell_name(job, peer))?;
                    self.addrs.push(((job, peer), addr));
                    self.addrs.len() - 1
                }
            };
            match self.socket.as_ref() {
                Some(socket) => socket.send_to_addr(&[1], &self.addrs[at].1).map(|_| ()),
                None => Ok(()),
            }
        })();
        match result {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) if !self.complained => {
                self.complained = true;
                eprintln!(
                    "ferry: rank {me}: cannot ring rank {peer}'s doorbell ({e}); it wakes for shared-memory messages only when its epoll times out"
                );
            }
            Err(_) => {}
        }
    }
}
