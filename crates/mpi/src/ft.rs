//! User-Level Failure Mitigation (the MPIX_ fault-tolerance calls, as MPICH and Open MPI name
//! them): which members of a communicator failed, acknowledging them, and revocation. The
//! runtime's half is `ferry_core`'s (`Comm::failed_members`, `Comm::revoke`). Failures are
//! known only in a job started fault-tolerant (`ferry run --fault-tolerant`); elsewhere a
//! rank's death ends the job, and these calls see no failure.

use crate::abi::*;
use crate::comm::new_group;
use crate::error::Res;
use crate::state::{running, State};

/// The runtime communicators behind `comm`: itself, and an intercommunicator's helpers.
fn parts(s: &State, comm: Handle) -> Res<Vec<ferry_core::Comm>> {
    let obj = s.comm(comm)?;
    let mut all = vec![obj.comm.clone()];
    if let Some(inter) = obj.inter {
        for helper in [inter.local, inter.coll, inter.union] {
            all.push(s.comm(helper)?.comm.clone());
        }
    }
    Ok(all)
}

/// World ranks of the failed members of `comm` (both groups of an intercommunicator), in the
/// order this process learned of them.
fn failed_world_ranks(s: &State, comm: Handle) -> Res<Vec<u32>> {
    let obj = s.comm(comm)?;
    let core = match obj.inter {
        // Its union holds both groups.
        Some(inter) => s.comm(inter.union)?.comm.clone(),
        None => obj.comm.clone(),
    };
    let mut ranks = Vec::new();
    for local in core.failed_members() {
        ranks.push(core.world_rank_of(local)? as u32);
    }
    Ok(ranks)
}

/// `MPIX_Comm_revoke`: every member learns it; later operations on `comm` fail with
/// MPIX_ERR_REVOKED, except revoke, agree and shrink.
pub(crate) fn revoke(comm: Handle) -> Res {
    let all = running(|s| parts(s, comm))?;
    for core in all {
        core.revoke()?;
    }
    Ok(())
}

/// `MPIX_Comm_is_revoked`.
pub(crate) fn is_revoked(comm: Handle) -> Res<bool> {
    running(|s| Ok(s.comm(comm)?.comm.is_revoked()))
}

/// `MPIX_Comm_get_failed`: the failed members known here, as a new group.
pub(crate) fn get_failed(comm: Handle) -> Res<Handle> {
    running(|s| {
        let failed = failed_world_ranks(s, comm)?;
        Ok(new_group(s, failed.into()))
    })
}

/// `MPIX_Comm_ack_failed`: acknowledges the first `num_to_ack` failed members (never fewer
/// than before) and returns how many are acknowledged. A receive from any source then no
/// longer reports them (MPIX_ERR_PROC_FAILED_PENDING).
pub(crate) fn ack_failed(comm: Handle, num_to_ack: usize) -> Res<usize> {
    running(|s| {
        let known = failed_world_ranks(s, comm)?.len();
        let obj = s.comm_mut(comm)?;
        obj.acked = obj.acked.max(num_to_ack.min(known));
        Ok(obj.acked)
    })
}

/// `MPIX_Comm_failure_get_acked`: the acknowledged failed members, as a new group.
pub(crate) fn get_acked(comm: Handle) -> Res<Handle> {
    running(|s| {
        let mut failed = failed_world_ranks(s, comm)?;
        failed.truncate(s.comm(comm)?.acked);
        Ok(new_group(s, failed.into()))
    })
}
