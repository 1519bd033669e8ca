//! The lean path of the commonest blocking collectives: MPI_Bcast, MPI_Reduce, MPI_Allreduce,
//! MPI_Allgather and MPI_Alltoall of a predefined, unpadded type (and for the reduction a
//! predefined operation defined on it; for the exchanges the same block on both sides) on an
//! intracommunicator. The caller's buffer is the packed data, so the call needs no staging,
//! no datatype object and one entry into the state; the reduction of each (operation, type)
//! pair is made once per process. A call of count 0 takes it too and returns at once (its plan
//! runs nothing, see `ferry_core::Planned::moves_nothing`). Anything else, and every argument
//! error, returns `None`: the general path then runs the call, or reports the error as it
//! always has.

use super::in_place;
use crate::abi::*;
use crate::error::Res;
use crate::ops::{BuiltinOp, CheckedOp};
use crate::p2p::{Count, Dense};
use crate::state::{running, State};
use ferry_core::{Collective, Reducer};
use std::ffi::{c_int, c_void};

/// `count` elements of `datatype` at `buf` as one block of bytes ([`Dense`]), when the buffer
/// is not MPI_IN_PLACE. A count of 0 is one too: the runtime plans such a call as one that
/// carries nothing and returns at once, and the buffer is not looked at.
fn dense(buf: *const c_void, count: Count, datatype: Handle) -> Option<Dense> {
    Dense::of(buf, count, datatype).filter(|_| !in_place(buf))
}

/// This process's communicator `comm` when it is an intracommunicator.
#[inline(always)]
fn intra(s: &State, comm: Handle) -> Option<ferry_core::Comm> {
    let obj = s.comm(comm).ok()?;
    obj.inter.is_none().then(|| obj.comm.clone())
}

/// The reduction of `op` on `ty`, made the first time the pair is used.
fn builtin_reducer(s: &mut State, op: CheckedOp) -> Reducer {
    let kept = &mut s.builtin_reducers;
    if let Some((_, r)) = kept.iter().find(|(key, _)| *key == op) {
        return r.clone();
    }
    let r = super::builtin_reduction(op);
    kept.push((op, r.clone()));
    r
}

/// A lean call taken out of the state: the communicator, its schedule and the reduction.
struct Lean {
    core: ferry_core::Comm,
    schedule: ferry_core::Planned,
    reduce: Option<Reducer>,
}

/// Plans the call `call` makes on the intracommunicator `comm`, with the reduction of `op`,
/// into `out`, which stays `None` when the general path takes the call (`None` from `call`, or
/// an intercommunicator). An error is one of planning, which the call reports.
///
/// The plan is written into the caller's slot and used there by reference: moved through
/// nested results, its words were copied several times, and each copy read back right after
/// it was written stalled (a wide load of narrow stores), which cost a small call a fifth of
/// its time.
#[inline(always)]
fn plan(
    comm: Handle,
    op: Option<CheckedOp>,
    call: impl FnOnce(&ferry_core::Comm) -> Option<Collective>,
    out: &mut Option<Lean>,
) -> Res {
    running(|s| {
        let Some(core) = intra(s, comm) else {
            return Ok(());
        };
        let Some(call) = call(&core) else {
            return Ok(());
        };
        let schedule = core.planned(&call)?;
        let reduce = op.map(|op| builtin_reducer(s, op));
        *out = Some(Lean {
            core,
            schedule,
            reduce,
        });
        Ok(())
    })
}

/// `root` as a rank of `core`, if it is one.
fn root_in(core: &ferry_core::Comm, root: c_int) -> Option<usize> {
    usize::try_from(root).ok().filter(|&r| r < core.size())
}

/// MPI_Bcast, blocking.
///
/// # Safety
/// As MPI_Bcast's: `buf` holds `count` elements of `datatype`.
pub(super) unsafe fn bcast(
    buf: *mut c_void,
    count: Count,
    datatype: Handle,
    root: c_int,
    comm: Handle,
) -> Option<Res> {
    let Dense { bytes, .. } = dense(buf, count, datatype)?;
    let mut lean = None;
    let planned = plan(
        comm,
        None,
        |core| {
            let root = root_in(core, root)?;
            Some(Collective::Bcast { bytes, root })
        },
        &mut lean,
    );
    if let Err(e) = planned {
        return Some(Err(e));
    }
    let Lean { core, schedule, .. } = lean.as_ref()?;
    // SAFETY: the caller's buffer holds `bytes` bytes until the call returns.
    let ran = unsafe {
        core.raw_collective_wait(schedule, (std::ptr::null(), 0), (buf.cast(), bytes), None)
    };
    Some(ran.map_err(Into::into))
}

/// MPI_Reduce, blocking, without MPI_IN_PLACE.
///
/// # Safety
/// As MPI_Reduce's: `sendbuf` holds `count` elements of `datatype`, and at the root so does
/// `recvbuf`.
pub(super) unsafe fn reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    datatype: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
) -> Option<Res> {
    let Dense { ty, bytes } = dense(sendbuf, count, datatype)?;
    if !crate::check::addressable(sendbuf) {
        return None;
    }
    let op = CheckedOp::new(BuiltinOp::from_handle(op)?, ty).ok()?;
    let mut lean = None;
    let planned = plan(
        comm,
        Some(op),
        |core| {
            Some(Collective::Reduce {
                bytes,
                elem: ty.size(),
                root: root_in(core, root)?,
                commutative: true,
            })
        },
        &mut lean,
    );
    if let Err(e) = planned {
        return Some(Err(e));
    }
    let Lean {
        core,
        schedule,
        reduce,
    } = lean.as_ref()?;
    // Only the root's receive buffer is significant (the general path reports a root's buffer
    // that overlaps its send buffer); elsewhere the schedule says what it needs, which for the
    // tree and the shared segment is nothing (they combine in their own scratch).
    let mut scratch = Vec::new();
    let recv = if root_in(core, root) == Some(core.rank()) {
        if !crate::check::addressable(recvbuf) || std::ptr::eq(sendbuf, recvbuf) {
            return None;
        }
        (recvbuf.cast::<u8>(), bytes)
    } else {
        scratch.resize(schedule.schedule().recv_bytes, 0u8);
        (scratch.as_mut_ptr(), scratch.len())
    };
    // SAFETY: the caller's send buffer (and at the root its receive buffer) holds `bytes`
    // bytes until the call returns, as `scratch` holds its length.
    let ran = unsafe {
        core.raw_collective_wait(schedule, (sendbuf.cast(), bytes), recv, reduce.as_ref())
    };
    Some(ran.map_err(Into::into))
}

/// MPI_Allreduce, blocking.
///
/// # Safety
/// As MPI_Allreduce's: the buffers hold `count` elements of `datatype`.
pub(super) unsafe fn allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> Option<Res> {
    let Dense { ty, bytes } = dense(recvbuf, count, datatype)?;
    let op = CheckedOp::new(BuiltinOp::from_handle(op)?, ty).ok()?;
    let in_place = in_place(sendbuf);
    // The same memory on both sides without MPI_IN_PLACE is an error the general path reports.
    if !in_place && (!crate::check::addressable(sendbuf) || std::ptr::eq(sendbuf, recvbuf)) {
        return None;
    }
    let mut lean = None;
    let planned = plan(
        comm,
        Some(op),
        |_| {
            Some(Collective::Allreduce {
                bytes,
                elem: ty.size(),
                commutative: true,
                in_place,
            })
        },
        &mut lean,
    );
    if let Err(e) = planned {
        return Some(Err(e));
    }
    let Lean {
        core,
        schedule,
        reduce,
    } = lean.as_ref()?;
    let send = match in_place {
        true => (std::ptr::null(), 0),
        false => (sendbuf.cast(), bytes),
    };
    // SAFETY: the caller's buffers hold `bytes` bytes until the call returns, and `sendbuf`
    // is not changed meanwhile (MPI's contract).
    let ran = unsafe {
        core.raw_collective_wait(schedule, send, (recvbuf.cast(), bytes), reduce.as_ref())
    };
    Some(ran.map_err(Into::into))
}

/// The exchange of MPI_Allgather (`alltoall` false: one block from each rank to every rank)
/// or MPI_Alltoall (a block from each rank to each rank), blocking, without MPI_IN_PLACE.
///
/// # Safety
/// As the call's: `send` holds one block (MPI_Allgather) or one per rank (MPI_Alltoall),
/// `recv` one per rank.
pub(super) unsafe fn exchange(
    send: (*const c_void, Count, Handle),
    recv: (*mut c_void, Count, Handle),
    comm: Handle,
    alltoall: bool,
) -> Option<Res> {
    let Dense { bytes: block, .. } = dense(send.0, send.1, send.2)?;
    if dense(recv.0, recv.1, recv.2)?.bytes != block {
        return None;
    }
    let mut lean = None;
    let planned = plan(
        comm,
        None,
        |_| {
            Some(match alltoall {
                true => Collective::Alltoall { block },
                false => Collective::Allgather { block },
            })
        },
        &mut lean,
    );
    if let Err(e) = planned {
        return Some(Err(e));
    }
    let Lean { core, schedule, .. } = lean.as_ref()?;
    let total = block.checked_mul(core.size())?;
    let send_len = if alltoall { total } else { block };
    // Buffers that overlap are an error the general path reports.
    let (s, r) = (send.0 as usize, recv.0 as usize);
    if s < r.checked_add(total)? && r < s.checked_add(send_len)? {
        return None;
    }
    // SAFETY: the caller's buffers hold `send_len` and `total` bytes until the call returns
    // (MPI's contract for the counts and types checked above), and do not overlap.
    let ran = unsafe {
        core.raw_collective_wait(
            schedule,
            (send.0.cast(), send_len),
            (recv.0.cast(), total),
            None,
        )
    };
    Some(ran.map_err(Into::into))
}
