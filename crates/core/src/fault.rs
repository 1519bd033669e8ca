//! Fault tolerance on a communicator (User-Level Failure Mitigation, in a job started with
//! `FERRY_FAULT_TOLERANT=1`): which members failed, and revocation. The engine's half (how
//! failures are learned, what becomes of requests) is `engine/failure.rs`.

use crate::comm::Comm;
use crate::engine::{Completion, Fault};
use crate::error::Error;

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
