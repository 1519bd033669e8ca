//! Failed peers and revoked communicators, in a fault-tolerant job (`FERRY_FAULT_TOLERANT=1`,
//! `ferry run --fault-tolerant`): how the engine learns that a peer died, what becomes of the
//! requests that wait on it, and how a revocation reaches every survivor.
//!
//! A peer on this host is watched through a pidfd, which turns readable when the process ends
//! (polled at most every millisecond by progress passes; a rank asleep in a wait learns it
//! within a nap, which a fault-tolerant rank keeps at 2 ms); a peer over TCP fails when its connection ends without BYE.
//! What waits on a failed peer completes with [`Fault::ProcFailed`]: receives posted from it,
//! frames queued to it, rendezvous with it. Its messages that arrived whole stay receivable.
//!
//! A revocation travels as an owned message on [`FAULT_CONTEXT`]. Every rank forwards the
//! first notice it gets for a communicator to every peer it has not seen fail, so the notice
//! reaches every survivor even when the revoker dies after reaching just one: n² messages for
//! n ranks, once per revoked communicator. Receives posted on a revoked communicator's
//! contexts complete with [`Fault::Revoked`].

use super::*;
use std::cell::RefCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;

/// The context of fault-tolerance notices: no communicator gets it (pairs are claimed far
/// below, see `comm::CLAIMED_PAIRS_END`).
pub(crate) const FAULT_CONTEXT: u32 = 0xffff_fff0;
/// How often a fault-tolerant rank polls its peers' pidfds: a system call, so not on every
/// progress pass; it bounds (with the nap of a sleeping wait) how late a death is learned.
const LOOK_EVERY_NS: u64 = 1_000_000;
/// The longest sleep of a fault-tolerant rank's wait.
const FAILURE_NAP: std::time::Duration = std::time::Duration::from_millis(2);
/// Tag of a revocation notice; its payload is the revoked communicator's context (LE u32).
const REVOKE_TAG: i32 = 1;

/// Messages on [`FAULT_CONTEXT`] as (sender, tag, payload), from its handler to the engine.
type Notices = Rc<RefCell<Vec<(u32, i32, Vec<u8>)>>>;

/// What the engine knows of failures (present only in a fault-tolerant job).
pub(crate) struct Faults {
    /// How each live peer on this host is watched, by universe rank.
    watched: Vec<(u32, PeerWatch)>,
    /// Failed peers, in the order this rank learned of them.
    failed: Vec<u32>,
    /// The contexts of revoked communicators (both of each).
    revoked: Vec<u32>,
    /// When the pidfds were last polled ([`monotonic_ns`]).
    looked: u64,
    /// Notices the active-message handler took in (source, tag, payload), for
    /// [`Engine::take_notices`].
    inbox: Notices,
    /// Failed peers the agreements have not been told of yet.
    untold: Vec<u32>,
    /// The agreements this rank takes part in (`engine/agreement.rs`).
    pub(super) agreements: super::agreement::Agreements,
    /// Peers whose process ended, failed on the next pass unless they said BYE first: the
    /// pass reads the rings, where a peer that finalized left its BYE before it exited.
    ended: Vec<u32>,
}

impl Engine {
    /// Makes this a fault-tolerant rank: peers' deaths become failed requests instead of
    /// errors that end the job. Peers on this host (`Route::Shm`) are watched by pidfd.
    pub(crate) fn tolerate_failures(&mut self) -> Result<(), Error> {
        let mut watched = Vec::new();
        for (rank, peer) in self.proto.peers.iter().enumerate() {
            if peer.route != Route::Shm || peer.pid == 0 {
                continue;
            }
            watched.push((rank as u32, PeerWatch::open(rank, peer.pid)?));
        }
        let inbox: Notices = Rc::default();
        let handed = Rc::clone(&inbox);
        self.set_active(
            FAULT_CONTEXT,
            Box::new(move |source, tag, data, _| {
                handed.borrow_mut().push((source, tag, data.to_vec()));
            }),
        );
        self.proto.fault_tolerant = true;
        // A wait asleep on the rings learns of a death when it wakes: sooner than the usual
        // nap (at most FAILURE_NAP after it, for up to 500 wake-ups a second of a sleeping rank).
        self.nap = self.nap.min(FAILURE_NAP);
        self.faults = Some(Box::new(Faults {
            watched,
            failed: Vec::new(),
            revoked: Vec::new(),
            inbox,
            untold: Vec::new(),
            agreements: Default::default(),
            ended: Vec::new(),
            looked: monotonic_ns(),
        }));
        Ok(())
    }

    /// Peers known to have failed, in the order this rank learned of them (empty in a job
    /// that is not fault-tolerant).
    pub(crate) fn failed_peers(&self) -> &[u32] {
        self.faults.as_ref().map_or(&[], |f| &f.failed)
    }

    /// Whether the communicator of context `context` (either of its two) was revoked.
    pub(crate) fn is_revoked(&self, context: u32) -> bool {
        self.faults
            .as_ref()
            .is_some_and(|f| f.revoked.contains(&context))
    }

    /// Looks for peers that ended (pidfds, at most every [`LOOK_EVERY_NS`]) and acts on the
    /// notices that came in: the end of every progress pass of a fault-tolerant rank.
    /// `clock`: a look that also polls TCP (a wait's every `TCP_SPIN_EVERY`-th, every call
    /// outside a wait, every look before a sleep), the only ones that read the clock, so that
    /// a wait's spin does not read it on every turn.
    pub(super) fn look_for_failures(&mut self, clock: bool) -> Result<bool, Error> {
        // The peers found ended last time are failed now, after this pass read the rings:
        // what they wrote before they died is in.
        let moved = self.take_notices()?;
        let moved = self.refuse_revoked_rendezvous() || moved;
        let Some(faults) = self.faults.as_mut().filter(|_| clock) else {
            return Ok(moved);
        };
        let now = monotonic_ns();
        if now.saturating_sub(faults.looked) >= LOOK_EVERY_NS {
            faults.looked = now;
            return Ok(faults.poll_pidfds() || moved);
        }
        Ok(moved)
    }
}

impl Faults {
    /// Whether a progress pass has work here: peers found ended, notices, or (if `clock`, see
    /// [`Engine::look_for_failures`]) a poll due.
    pub(super) fn due(&self, clock: bool) -> bool {
        !self.ended.is_empty()
            || !self.untold.is_empty()
            || !self.inbox.borrow().is_empty()
            || (clock && monotonic_ns().saturating_sub(self.looked) >= LOOK_EVERY_NS)
    }

    /// Moves the peers whose process ended to `ended`; whether there were any.
    fn poll_pidfds(&mut self) -> bool {
        let mut polled: Vec<libc::pollfd> = (self.watched.iter())
            .filter_map(|(_, watch)| match watch {
                PeerWatch::Fd(fd) => Some(libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }),
                PeerWatch::Pid(_) => None,
            })
            .collect();
        if !polled.is_empty() {
            // SAFETY: `polled` is a valid array of that many pollfds; a zero timeout.
            let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 0) };
            if n <= 0 {
                polled.clear();
            }
        }
        let mut readable = polled.iter().map(|p| p.revents != 0);
        let ended: Vec<u32> = (self.watched.iter())
            .filter(|(_, watch)| match watch {
                PeerWatch::Fd(_) => readable.next().unwrap_or(false),
                PeerWatch::Pid(pid) => !process_exists(*pid),
            })
            .map(|(rank, _)| *rank)
            .collect();
        self.watched.retain(|(r, _)| !ended.contains(r));
        let moved = !ended.is_empty();
        self.ended.extend(ended);
        moved
    }
}

/// The monotonic clock in nanoseconds, read straight (the vDSO call and one multiply): what
/// paces the polls on every call outside a wait, where `Instant`'s arithmetic cost more than
/// the look it paces. (The kernel's coarse clock is cheaper still, but its 4 ms tick made a
/// death known 3 ms late instead of 1.4.)
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`, which lives for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64).wrapping_mul(1_000_000_000) + now.tv_nsec as u64
}

/// How a peer on this host is watched for its end.
enum PeerWatch {
    /// A pidfd, readable once the process ended.
    Fd(OwnedFd),
    /// Where there is no `pidfd_open` (kernels before 5.3, valgrind): the pid, looked up with
    /// `kill(pid, 0)`. The peer's parent (the launcher or a node daemon) reaps it at once, so
    /// the pid is gone within the poll period, long before it could be reused.
    Pid(libc::pid_t),
}

impl PeerWatch {
    fn open(rank: usize, pid: u32) -> Result<PeerWatch, Error> {
        let pid = pid as libc::pid_t;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd >= 0 {
            // SAFETY: a descriptor pidfd_open just returned, owned by nobody else.
            return Ok(PeerWatch::Fd(unsafe { OwnedFd::from_raw_fd(fd as i32) }));
        }
        let why = std::io::Error::last_os_error();
        if why.raw_os_error() == Some(libc::ENOSYS) && process_exists(pid) {
            return Ok(PeerWatch::Pid(pid));
        }
        Err(Error::Transport(format!(
            "cannot watch rank {rank} (pid {pid}) for failure: pidfd_open: {why}"
        )))
    }
}

/// Whether process `pid` exists (a zombie counts until it is reaped).
fn process_exists(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let gone = unsafe { libc::kill(pid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    !gone
}

impl Engine {
    /// Acts on the revocation notices the handler took in.
    pub(super) fn take_notices(&mut self) -> Result<bool, Error> {
        let Some(faults) = self.faults.as_mut() else {
            return Ok(false);
        };
        let ended = std::mem::take(&mut faults.ended);
        let notices = std::mem::take(&mut *faults.inbox.borrow_mut());
        let any = !notices.is_empty() || !ended.is_empty() || !faults.untold.is_empty();
        for rank in ended {
            if !self.proto.departed(rank) {
                self.peer_failed(rank);
            }
        }
        let untold =
            (self.faults.as_mut()).map_or_else(Vec::new, |f| std::mem::take(&mut f.untold));
        for rank in untold {
            self.agreements_learn_failure(rank)?;
        }
        for (source, tag, data) in notices {
            match tag {
                REVOKE_TAG => {
                    let context = <[u8; 4]>::try_from(data.as_slice())
                        .map(u32::from_le_bytes)
                        .map_err(|_| {
                            protocol_error(source, format!("revocation of {} bytes", data.len()))
                        })?;
                    self.revoke(context)?;
                }
                super::agreement::AGREE_TAG => self.agreement_message(source, &data)?,
                _ => return Err(protocol_error(source, format!("fault notice of tag {tag}"))),
            }
        }
        if any {
            // Waits for an agreement or a revocation look for changes in completions.
            self.proto.completions += 1;
        }
        Ok(any)
    }

    /// Revokes the communicator of point-to-point context `context` here and tells every
    /// live peer (once: a second notice of it changes nothing). Receives posted on its two
    /// contexts complete with [`Fault::Revoked`].
    pub(crate) fn revoke(&mut self, context: u32) -> Result<(), Error> {
        let Some(faults) = self.faults.as_mut() else {
            return Err(Error::Config(
                "revoking a communicator needs a fault-tolerant job (ferry run --fault-tolerant)"
                    .into(),
            ));
        };
        if faults.revoked.contains(&context) {
            return Ok(());
        }
        // The point-to-point context and the collectives' (`context + 1`).
        faults.revoked.extend([context, context + 1]);
        self.proto.revocations += 1;
        let cut = |p: &Pattern| p.context == context || p.context == context + 1;
        for id in self.proto.matcher.take_posted_where(cut) {
            self.proto.complete(id, faulted(Fault::Revoked, 0));
        }
        self.refuse_revoked_rendezvous();
        let me = self.proto.me;
        for peer in 0..self.proto.peer_count() as u32 {
            let p = &self.proto.peers[peer as usize];
            if peer == me || p.failed || p.departed {
                continue;
            }
            let notice = context.to_le_bytes().to_vec();
            self.send_owned(FAULT_CONTEXT, peer, REVOKE_TAG, notice)?;
        }
        Ok(())
    }

    /// Answers the rendezvous announcements (RTS) that wait unmatched on revoked
    /// communicators with a CTS that takes nothing, and drops their other unexpected messages:
    /// no receive will ever match them, and a sender's rendezvous waits for the answer (a
    /// live sender that has not learned of the revocation yet would wait for ever). Its send
    /// then completes having moved nothing; the sender learns of the revocation by its notice.
    /// Whether any was answered.
    fn refuse_revoked_rendezvous(&mut self) -> bool {
        let Some(faults) = self.faults.as_ref() else {
            return false;
        };
        if faults.revoked.is_empty() || self.proto.matcher.unexpected_len() == 0 {
            return false;
        }
        let mut refused = false;
        for &context in &faults.revoked {
            let pattern = Pattern {
                context,
                source: None,
                tag: None,
            };
            while let Some((env, message)) = self.proto.matcher.take_unexpected(&pattern) {
                if let (Unexpected::Rts(rts), false) = (message, self.proto.failed(env.source)) {
                    let null = std::ptr::null_mut();
                    let id =
                        (self.proto.requests).insert(ReqState::RecvPosted { buf: null, cap: 0 });
                    self.proto.start_rendezvous_recv(id, env, rts, null, 0);
                    self.proto.requests.take_done(id);
                    refused = true;
                }
            }
        }
        if refused {
            for peer in 0..self.proto.peer_count() as u32 {
                if !self.proto.failed(peer) {
                    // A peer lost now is failed by the next pass; nothing more to do here.
                    let _ = self.flush_peer(peer);
                }
            }
        }
        refused
    }

    /// Says BYE to every live peer, on every route: a fault-tolerant rank that finalizes
    /// leaves without a fence (which would wait for the dead), and its peers must not take
    /// its end for a failure.
    pub(crate) fn leave_all(&mut self) -> Result<(), Error> {
        let me = self.proto.me;
        for peer in 0..self.proto.peer_count() as u32 {
            let p = &self.proto.peers[peer as usize];
            if peer == me || p.failed || p.departed || p.route == Route::Loopback {
                continue;
            }
            self.proto
                .push_out(peer, Out::Frame(OutFrame::control(Frame::Bye)));
            self.flush_peer(peer)?;
        }
        Ok(())
    }

    /// Marks universe rank `rank` failed: everything that waits on it completes with
    /// [`Fault::ProcFailed`], and what is sent to it or received from it later does at once.
    pub(crate) fn peer_failed(&mut self, rank: u32) {
        let Some(faults) = self.faults.as_mut() else {
            return;
        };
        let Some(peer) = self.proto.peers.get_mut(rank as usize) else {
            return;
        };
        if peer.failed || peer.departed || rank == self.proto.me {
            return;
        }
        peer.failed = true;
        self.proto.failures += 1;
        faults.failed.push(rank);
        faults.untold.push(rank);
        let queued = std::mem::take(&mut peer.outq);
        let failed = faulted(Fault::ProcFailed, rank);
        for out in queued {
            let id = match out {
                Out::Frame(f) => f.complete,
                Out::Stream(id) | Out::Expose { id, .. } => Some(id),
            };
            if let Some(id) = id {
                self.proto.complete(id, failed);
            }
        }
        for id in (self.proto.matcher).take_posted_where(|p| p.source == Some(rank)) {
            self.proto.complete(id, failed);
        }
        let waiting: Vec<ReqId> = (self.proto.requests.slots.iter().enumerate())
            .filter(|(_, slot)| match &slot.state {
                ReqState::SendRendezvous { dest, .. } => *dest == rank,
                ReqState::RecvRendezvous { env, .. } => env.source == rank,
                _ => false,
            })
            .map(|(i, slot)| (u64::from(slot.generation) << 32) | i as u64)
            .collect();
        for id in waiting {
            self.proto.complete(id, failed);
        }
        self.in_place.retain(|(_, held)| *held != Some(rank));
        self.proto.completions += 1;
    }
}

impl Engine {
    /// A receive that can never match, because its communicator was revoked or its source
    /// failed, as a finished request; `None` when it may be posted. Out of line: every receive
    /// of a fault-tolerant rank asks, and the others must not pay for its code.
    #[cold]
    #[inline(never)]
    pub(super) fn doomed_recv(&mut self, pattern: &Pattern) -> Option<ReqId> {
        let ended = match self.is_revoked(pattern.context) {
            true => faulted(Fault::Revoked, 0),
            false => {
                let source = pattern.source?;
                self.proto.failed(source).then_some(())?;
                faulted(Fault::ProcFailed, source)
            }
        };
        Some(self.proto.requests.insert(ReqState::Done(ended)))
    }

    /// The same for a send to `dest` on `context` (see [`Engine::doomed_recv`]).
    #[cold]
    #[inline(never)]
    pub(super) fn doomed_send(&mut self, context: u32, dest: u32) -> Option<ReqId> {
        let ended = match self.is_revoked(context) {
            true => faulted(Fault::Revoked, 0),
            false => {
                self.proto.failed(dest).then_some(())?;
                faulted(Fault::ProcFailed, dest)
            }
        };
        Some(self.proto.requests.insert(ReqState::Done(ended)))
    }
}

impl Proto {
    /// Whether `id` is a receive from any source not matched yet.
    pub(crate) fn posted_from_any(&self, id: ReqId) -> bool {
        self.matcher
            .posted_pattern(id)
            .is_some_and(|p| p.source.is_none())
    }

    /// Whether a new operation may be doomed: some peer failed or a communicator was revoked.
    #[inline]
    pub(super) fn may_doom(&self) -> bool {
        self.fault_tolerant && (self.failures | self.revocations) != 0
    }

    /// Whether sends to `dest` fail at once (it failed).
    #[inline]
    pub(super) fn failed(&self, dest: u32) -> bool {
        self.peers.get(dest as usize).is_some_and(|p| p.failed)
    }
}

/// The completion of a request ended by `fault`; `source` names the failed peer.
pub(crate) fn faulted(fault: Fault, source: u32) -> Completion {
    Completion {
        source,
        tag: 0,
        len: 0,
        message_len: 0,
        cancelled: false,
        fault,
    }
}

#[cfg(test)]
mod watch_tests {
    use super::*;

    #[test]
    fn a_watched_pid_ends_when_its_process_is_reaped() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let pid = child.id() as libc::pid_t;
        let mut faults = Faults {
            watched: vec![
                (3, PeerWatch::Pid(pid)),
                (4, PeerWatch::open(4, std::process::id()).unwrap()),
            ],
            failed: Vec::new(),
            revoked: Vec::new(),
            looked: monotonic_ns(),
            inbox: Notices::default(),
            untold: Vec::new(),
            agreements: Default::default(),
            ended: Vec::new(),
        };
        assert!(!faults.poll_pidfds(), "both alive");
        child.kill().expect("kill the child");
        child.wait().expect("reap it");
        assert!(faults.poll_pidfds());
        assert_eq!(faults.ended, vec![3], "only the reaped one ended");
        assert_eq!(faults.watched.len(), 1);
    }
}
