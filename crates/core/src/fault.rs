//! Fault tolerance on a communicator (User-Level Failure Mitigation, in a job started with
//! `FERRY_FAULT_TOLERANT=1`): which members failed, and revocation. The engine's half (how
//! failures are learned, what becomes of requests) is `engine/failure.rs`.

use crate::comm::Comm;
use crate::engine::{Completion, Fault};
use crate::error::Error;
use crate::raw::RawRequest;

/// Marks a shrink's agreement number apart from the counts other derivations hash
/// ([`crate::derived_pair`]: MPI_Comm_idup's).
const SHRINK_BIT: u32 = 1 << 31;

/// What an agreement decided, identically at every member that returns from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed {
    /// Bitwise AND of the flags of the members that took part.
    pub flag: u32,
    /// Communicator ranks held failed: every member that did not take part, and maybe some
    /// that failed after they did. The survivors of a shrink are the others.
    pub failed: Vec<usize>,
    /// The agreement's number on its communicator (the same at every member).
    pub instance: u64,
}

impl Comm {
    /// Whether this job survives the loss of ranks (`FERRY_FAULT_TOLERANT=1`).
    pub fn fault_tolerant(&self) -> bool {
        self.shared.in_effect.fault_tolerant
    }

    /// Communicator ranks of the members known here to have failed, in the order this rank
    /// learned of them (the order `MPI_Comm_ack_failed` counts in).
    pub fn failed_members(&self) -> Vec<usize> {
        let engine = self.shared.engine.borrow();
        (engine.failed_peers().iter())
            .filter_map(|&w| self.local_rank_of(w))
            .collect()
    }

    /// Revokes the communicator: every member learns it, and from then on every operation on
    /// it but revocation, agreement and shrinking fails with [`Error::Revoked`], including
    /// receives already posted and not matched.
    pub fn revoke(&self) -> Result<(), Error> {
        self.shared.engine.borrow_mut().revoke(self.context)
    }

    /// Whether the communicator was revoked (here or by any member).
    pub fn is_revoked(&self) -> bool {
        self.shared.engine.borrow().is_revoked(self.context)
    }

    /// Agrees on `flag` (bitwise AND) and on a set of failed members with every member that
    /// does not fail (`MPIX_Comm_agree`), even if members fail during the agreement, and also
    /// on a revoked communicator. In a job that is not fault-tolerant no rank can fail without
    /// ending the job, and it is a bitwise-AND allreduce. Collective.
    pub fn agree(&self, flag: u32) -> Result<Agreed, Error> {
        if !self.fault_tolerant() {
            let mut and = [0u32];
            self.allreduce(&[flag], &mut and, crate::ReduceOp::BitAnd)?;
            return Ok(Agreed {
                flag: and[0],
                failed: Vec::new(),
                instance: self.next_agreement(),
            });
        }
        let (request, instance) = self.start_agreement(flag)?;
        let id = request.to_bits();
        self.shared.wait_until(|p| p.is_done(id))?;
        self.shared.engine.borrow_mut().take(id);
        self.agreed(instance).ok_or_else(|| Error::Protocol {
            rank: self.rank(),
            detail: "an agreement completed without a decision".into(),
        })
    }

    /// Starts an agreement ([`Comm::agree`]) without waiting: the request completes once it is
    /// decided here, and [`Comm::agreed`] of the number returned gives the decision.
    pub fn start_agreement(&self, flag: u32) -> Result<(RawRequest, u64), Error> {
        let instance = self.next_agreement();
        let members = (self.context, self.group.world_of.clone());
        let id = (self.shared.engine.borrow_mut()).start_agreement(
            members,
            self.rank() as u32,
            instance,
            flag,
        )?;
        Ok((RawRequest::from_bits(id), instance))
    }

    /// A communicator of the members that have not failed, in their order, agreed by all of
    /// them (`MPIX_Comm_shrink`); it works on a revoked communicator. Its context pair is
    /// derived from this one's and the agreement's number ([`crate::derived_pair`]), so no
    /// further message is needed. In a job that is not fault-tolerant no rank can fail without
    /// ending the job, and the shrink is a copy. Collective.
    pub fn shrink(&self) -> Result<Comm, Error> {
        let (failed, pair) = self.shrink_agreement()?;
        let mut members = Vec::new();
        let mut rank = 0;
        for m in (0..self.size()).filter(|m| !failed.contains(m)) {
            if m == self.rank() {
                rank = members.len();
            }
            members.push(self.group.world_of[m]);
        }
        self.derive(&members, rank, 2 * pair)
    }

    /// A shrink's agreement: the world ranks held failed (every survivor gets the same), and
    /// the first context pair of the shrunk communicator ([`crate::derived_pair`] of this
    /// communicator's context and the agreement's number). For a binding that builds the new
    /// communicator itself (an intercommunicator's two groups). Collective.
    pub fn shrink_agreement(&self) -> Result<(Vec<usize>, u32), Error> {
        let (failed, instance) = match self.fault_tolerant() {
            true => {
                let agreed = self.agree(!0)?;
                (agreed.failed, agreed.instance)
            }
            false => (Vec::new(), self.next_agreement()),
        };
        let pair = crate::derived_pair(self.context, SHRINK_BIT | instance as u32);
        Ok((failed, pair))
    }

    /// The number of the next agreement of this communicator, taken: every member numbers its
    /// agreements (and shrinks in a job that is not fault-tolerant) alike.
    pub fn next_agreement(&self) -> u64 {
        self.calls.next_agreement()
    }

    /// The decision of agreement `instance` of this communicator, once made here.
    pub fn agreed(&self, instance: u64) -> Option<Agreed> {
        let decision =
            (self.shared.engine.borrow_mut()).agreement_decision(self.context, instance)?;
        Some(Agreed {
            flag: decision.flag,
            failed: decision.failed.iter().map(|m| m as usize).collect(),
            instance,
        })
    }

    /// Acknowledges the first `n` failed members ([`Comm::failed_members`]; never fewer than
    /// before) and returns how many are acknowledged. Shared by every handle of this
    /// communicator.
    pub fn ack_failed(&self, n: usize) -> usize {
        let known = self.failed_members().len();
        let acked = self.calls.acked.get().max(n.min(known));
        self.calls.acked.set(acked);
        acked
    }

    /// The first failed member not acknowledged, if any.
    pub fn unacknowledged_failure(&self) -> Option<usize> {
        self.failed_members().get(self.calls.acked.get()).copied()
    }

    /// Waits until every request of `raws` is done. In a fault-tolerant job it also ends, with
    /// [`Error::ProcFailedPending`], when a member of this communicator has failed and is not
    /// acknowledged while one of them is a receive from any source still unmatched: that
    /// receive stays posted (ULFM's rule, since the dead member might have been its sender).
    pub fn raw_wait_all(&self, raws: &[RawRequest]) -> Result<(), Error> {
        self.wait_or_pending(raws, |done| raws.iter().all(|&r| done(r)))
    }

    /// Waits until `finished` says so (given whether a request is done), as
    /// [`Comm::wait_until`]; in a fault-tolerant job it also ends with
    /// [`Error::ProcFailedPending`] as [`Comm::raw_wait_all`] does, for the receives among
    /// `watched` (MPI_Waitany and MPI_Waitsome wait for one of them).
    pub fn wait_or_pending(
        &self,
        watched: &[RawRequest],
        finished: impl Fn(&dyn Fn(RawRequest) -> bool) -> bool,
    ) -> Result<(), Error> {
        if !self.fault_tolerant() {
            return self.wait_until(finished);
        }
        let over = |p: &crate::engine::Proto| finished(&|r: RawRequest| p.is_done(r.to_bits()));
        self.shared.progress()?;
        loop {
            let engine = self.shared.engine.borrow();
            if over(&engine.proto) {
                return Ok(());
            }
            let wildcard = (watched.iter()).any(|r| engine.proto.posted_from_any(r.to_bits()));
            let seen = engine.proto.failures;
            drop(engine);
            if let Some(rank) = self.unacknowledged_failure().filter(|_| wildcard) {
                return Err(Error::ProcFailedPending { rank });
            }
            self.shared.wait_until(|p| p.failures != seen || over(p))?;
        }
    }

    /// Whether `raw` is a receive from any source not matched yet.
    pub fn raw_from_any_pending(&self, raw: RawRequest) -> bool {
        (self.shared.engine.borrow().proto).posted_from_any(raw.to_bits())
    }

    /// The error a request ended by a failure reports, if it was.
    pub(crate) fn fault_of(&self, c: &Completion) -> Result<(), Error> {
        match c.fault {
            Fault::None => Ok(()),
            Fault::Revoked => Err(Error::Revoked),
            Fault::ProcFailed => Err(Error::ProcFailed {
                rank: self.local_rank_of(c.source).unwrap_or(usize::MAX),
            }),
        }
    }

    /// The communicator rank of universe rank `world`, if a member.
    fn local_rank_of(&self, world: u32) -> Option<usize> {
        let local = *self.group.local_of.get(world as usize)?;
        (local != u32::MAX).then_some(local as usize)
    }
}
