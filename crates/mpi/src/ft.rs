//! User-Level Failure Mitigation (the MPIX_ fault-tolerance calls, as MPICH and Open MPI name
//! them): which members of a communicator failed, acknowledging them, and revocation. The
//! runtime's half is `ferry_core`'s (`Comm::failed_members`, `Comm::revoke`). Failures are
//! known only in a job started fault-tolerant (`ferry run --fault-tolerant`); elsewhere a
//! rank's death ends the job, and these calls see no failure.

use crate::abi::*;
use crate::coll::RequestOut;
use crate::comm::{new_group, register};
use crate::error::{fail, Res};
use crate::p2p::{done_in, finish_handle, publish, status_at, Entry};
use crate::request::{Outcome, Request};
use crate::state::{running, with, State};
use ferry_core::raw::RawRequest;
use std::ffi::{c_int, c_void};

/// MPI_IN_PLACE, MPI_INT and MPI_BAND: an agreement without fault tolerance is an in-place
/// MPI_BAND allreduce of one int.
const IN_PLACE: *const c_void = MPI_IN_PLACE as *const c_void;
const INT: Handle = crate::datatype::Builtin::Int.handle();
const BAND: Handle = crate::ops::BuiltinOp::Band as Handle;

/// The intracommunicator an agreement on `comm` runs over: itself, or the union of an
/// intercommunicator's groups (its flag is the AND over both, as mpi4py's tests expect).
fn agreement_comm(s: &State, comm: Handle) -> Res<(Handle, ferry_core::Comm)> {
    let obj = s.comm(comm)?;
    let handle = obj.inter.map_or(comm, |inter| inter.union);
    Ok((handle, s.comm(handle)?.comm.clone()))
}

/// Whether `comm`'s job is fault-tolerant: agreements then survive failures; elsewhere an
/// agreement is an MPI_BAND allreduce, as no rank can fail without ending the job.
fn fault_tolerant(core: &ferry_core::Comm) -> bool {
    core.fault_tolerant()
}

/// `MPIX_Comm_agree`: the AND of the live members' flags, the same at every member that
/// returns. MPIX_ERR_PROC_FAILED (with the flag written) when the agreement held members
/// failed that this process has not acknowledged on `comm`.
pub(crate) fn agree(comm: Handle, flag: &mut c_int) -> Res {
    let (handle, core) = running(|s| agreement_comm(s, comm))?;
    if !fault_tolerant(&core) {
        let bits = flag as *mut c_int as *mut c_void;
        // SAFETY: `flag` is one int, read and written in place.
        return unsafe {
            crate::coll::allreduce(IN_PLACE, bits, 1, INT, BAND, handle, crate::coll::BLOCKING)
        };
    }
    let agreed = core.agree(*flag as u32)?;
    *flag = agreed.flag as c_int;
    let unacked = running(|s| {
        let acked = acked(s, comm)?;
        let failed = failed_world_ranks(s, comm)?;
        let known: Vec<u32> = failed[..acked.min(failed.len())].to_vec();
        let mut held = Vec::new();
        for &m in &agreed.failed {
            held.push(core.world_rank_of(m)? as u32);
        }
        Ok(held.into_iter().find(|w| !known.contains(w)))
    })?;
    match unacked {
        Some(w) => fail(
            MPIX_ERR_PROC_FAILED,
            format!("world rank {w} failed and is not acknowledged (MPIX_Comm_ack_failed)"),
        ),
        None => Ok(()),
    }
}

/// `MPIX_Comm_iagree`: the agreement as a request; `flag` is written when it completes.
///
/// # Safety
/// `flag` stays valid until the request completes (MPI's contract).
pub(crate) unsafe fn iagree(comm: Handle, flag: *mut c_int, request: &mut Handle) -> Res {
    let (handle, core) = running(|s| agreement_comm(s, comm))?;
    if !fault_tolerant(&core) {
        // SAFETY: the caller's contract: `flag` is one int, valid until the request completes.
        return unsafe {
            crate::coll::allreduce(
                IN_PLACE,
                flag.cast(),
                1,
                INT,
                BAND,
                handle,
                RequestOut::to(request),
            )
        };
    }
    // SAFETY: the caller's contract: `flag` is a readable int.
    let (raw, instance) = core.start_agreement(unsafe { *flag } as u32)?;
    let decided = core.clone();
    let finish: crate::request::Finish = Box::new(move |_| {
        if let Some(agreed) = decided.agreed(instance) {
            // SAFETY: the caller's contract keeps `flag` valid until the request completes.
            unsafe { *flag = agreed.flag as c_int };
        }
    });
    running(|s| {
        let req = Request::running(comm, core, raw, Some(finish));
        // SAFETY: `request` is a writable handle (checked by the caller).
        unsafe { publish(s, req, request) }
    })
}

/// `MPIX_Comm_shrink`: a new communicator of the members the agreement did not hold failed,
/// in the same order (`ferry_core::Comm::shrink`).
pub(crate) fn shrink(comm: Handle) -> Res<Handle> {
    let (core, inter) = running(|s| {
        let obj = s.comm(comm)?;
        Ok((obj.comm.clone(), obj.inter))
    })?;
    if let Some(inter) = inter {
        return crate::inter::shrink(comm, inter);
    }
    let new = core.shrink()?;
    reserve_pair(new.context_id() / 2)?;
    register(comm, Some(new), false)
}

/// Records a shrunk communicator's derived context pair (freed with it), refusing one that a
/// live communicator of this process has.
pub(crate) fn reserve_pair(k: u32) -> Res {
    with(|s| match s.derived_pairs.insert(k) {
        true => Ok(()),
        false => fail(
            MPI_ERR_INTERN,
            "MPIX_Comm_shrink: the derived context id is in use here (hash collision)",
        ),
    })
}

/// `MPIX_Comm_ishrink`: the shrink, complete when it returns (the request is done).
pub(crate) fn ishrink(comm: Handle, request: &mut Handle) -> Res<Handle> {
    let new = shrink(comm)?;
    running(|s| {
        let req = Request::done(comm, s.core_comm(comm)?, Outcome::EMPTY);
        // SAFETY: `request` is a writable handle.
        unsafe { publish(s, req, request) }
    })?;
    Ok(new)
}

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
    if !all[0].fault_tolerant() {
        return fail(
            MPI_ERR_UNSUPPORTED_OPERATION,
            "MPIX_Comm_revoke needs a fault-tolerant job (ferry run --fault-tolerant, mpiexec --with-ft ulfm)",
        );
    }
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
    let (_, core) = running(|s| agreement_comm(s, comm))?;
    Ok(core.ack_failed(num_to_ack))
}

/// How many failed members of `comm` are acknowledged.
fn acked(s: &State, comm: Handle) -> Res<usize> {
    let (_, core) = agreement_comm(s, comm)?;
    Ok(core.ack_failed(0))
}

/// `MPIX_Comm_failure_get_acked`: the acknowledged failed members, as a new group.
pub(crate) fn get_acked(comm: Handle) -> Res<Handle> {
    running(|s| {
        let mut failed = failed_world_ranks(s, comm)?;
        failed.truncate(acked(s, comm)?);
        Ok(new_group(s, failed.into()))
    })
}

/// Waits over `list` until `finished` says so; in a fault-tolerant job it ends early when a
/// receive from any source among them cannot complete while a failure is unacknowledged
/// (ULFM's MPIX_ERR_PROC_FAILED_PENDING), and gives the indices of those receives (none when
/// `finished` came true).
pub(crate) fn wait_entries(
    engine: &ferry_core::Comm,
    list: &[Entry],
    finished: impl Fn(&dyn Fn(RawRequest) -> bool) -> bool,
) -> Res<Vec<usize>> {
    let watched: Vec<RawRequest> = (list.iter())
        .flat_map(|e| match e {
            Entry::Active(raws) => *raws,
            _ => [None, None],
        })
        .flatten()
        .collect();
    match engine.wait_or_pending(&watched, finished) {
        Err(ferry_core::Error::ProcFailedPending { .. }) => Ok((0..list.len())
            .filter(|&i| match list[i] {
                Entry::Active(raws) => {
                    (raws.iter().flatten()).any(|&r| engine.raw_from_any_pending(r))
                }
                _ => false,
            })
            .collect()),
        other => other.map(|()| Vec::new()).map_err(Into::into),
    }
}

/// MPI_Waitall ended early by `pending` receives from any source: the finished requests
/// complete (their statuses as usual), the pending ones report MPIX_ERR_PROC_FAILED_PENDING
/// and the others MPI_ERR_PENDING in their statuses, and both stay active (MPI_ERR_IN_STATUS).
///
/// # Safety
/// `statuses` is NULL or holds one writable MPI_Status per handle.
pub(crate) unsafe fn wait_all_pending(
    handles: &mut [Handle],
    list: &[Entry],
    engine: &ferry_core::Comm,
    statuses: *mut MpiStatus,
    pending: &[usize],
) -> Res {
    for (i, h) in handles.iter_mut().enumerate() {
        let status = status_at(statuses, i);
        let error = match list[i] {
            e if e.in_flight() && done_in(e, &|r| engine.raw_done(r)) => {
                // SAFETY: this function's contract.
                unsafe { finish_handle(h, status, true) }?;
                continue;
            }
            Entry::Active(_) | Entry::AwaitingReady if pending.contains(&i) => {
                MPIX_ERR_PROC_FAILED_PENDING
            }
            Entry::Active(_) | Entry::AwaitingReady => MPI_ERR_PENDING,
            Entry::Null => MPI_SUCCESS,
        };
        let outcome = Outcome {
            error,
            ..Outcome::EMPTY
        };
        // SAFETY: this function's contract.
        unsafe { outcome.write(status, true) };
    }
    fail(
        MPI_ERR_IN_STATUS,
        "a receive from any source cannot complete while a failure is not acknowledged (MPIX_ERR_PROC_FAILED_PENDING in its status); it stays active",
    )
}

/// MPI_Waitsome ended early with nothing finished: the `pending` receives from any source are
/// reported (indices, MPIX_ERR_PROC_FAILED_PENDING in their statuses) and stay active.
///
/// # Safety
/// `indices` and `statuses` are NULL or hold one writable element per request.
pub(crate) unsafe fn wait_some_pending(
    outcount: &mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
    pending: &[usize],
) -> Res {
    for (n, &i) in pending.iter().enumerate() {
        if !indices.is_null() {
            // SAFETY: this function's contract; `n` < the number of requests.
            unsafe { *indices.add(n) = i as c_int };
        }
        let outcome = Outcome {
            error: MPIX_ERR_PROC_FAILED_PENDING,
            ..Outcome::EMPTY
        };
        // SAFETY: as above.
        unsafe { outcome.write(status_at(statuses, n), true) };
    }
    *outcount = pending.len() as c_int;
    fail(
        MPI_ERR_IN_STATUS,
        "a receive from any source cannot complete while a failure is not acknowledged (MPIX_ERR_PROC_FAILED_PENDING in its status); it stays active",
    )
}
