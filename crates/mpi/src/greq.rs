//! Generalized requests (MPI 4.1 §13.2): `MPI_Grequest_start` and `MPI_Grequest_complete`.
//!
//! A generalized request is, inside, an empty receive from this process on a hidden duplicate
//! of MPI_COMM_SELF, with a tag of its own; `MPI_Grequest_complete` sends it the empty message.
//! So every wait and test call, alone or in arrays with other requests, waits for it as for any
//! receive. When one completes it, the query callback fills the status and the free callback
//! runs, both outside ferry's state so that they may call MPI; `MPI_Request_get_status` runs
//! only the query. `MPI_Cancel` runs the cancel callback (the request still completes only
//! through `MPI_Grequest_complete`). A wait on a request that nothing completes waits for ever,
//! as it would in any MPI; at MPI_THREAD_MULTIPLE another thread may complete it meanwhile.

use crate::abi::*;
use crate::error::{fail, Res};
use crate::request::{Greq, Outcome};
use crate::state::running;
use std::ffi::c_int;

/// The hidden duplicate of MPI_COMM_SELF the messages travel on, made at the first use.
pub(crate) fn channel() -> Res<Handle> {
    let made = running(|s| Ok(s.greq_channel))?;
    if made != 0 && running(|s| Ok(s.comms.get(made).is_some()))? {
        return Ok(made);
    }
    let h = crate::comm::hidden_dup(MPI_COMM_SELF)?;
    running(|s| {
        s.greq_channel = h;
        Ok(h)
    })
}

/// Completes `g` into `status` from its query callback (and runs its free callback when
/// `free`); the first error code of the two is the request's.
///
/// # Safety
/// `status` is null or a writable `MPI_Status`; the callbacks are the user's.
pub(crate) unsafe fn finish(
    g: &Greq,
    status: *mut MpiStatus,
    with_error: bool,
    free: bool,
) -> Outcome {
    // SAFETY: the caller keeps this function's `# Safety`: `status` is null or a writable
    // `MPI_Status`; the callbacks are the user's.
    unsafe {
        let mut st = MpiStatus::default();
        let rc = g.query_status(&mut st);
        let rc_free = if free { g.run_free() } else { MPI_SUCCESS };
        let error = if rc != MPI_SUCCESS { rc } else { rc_free };
        if let Some(out) = status.as_mut() {
            let before = out.error;
            *out = st;
            out.error = if with_error { error } else { before };
        }
        Outcome {
            source: st.source,
            tag: st.tag,
            bytes: st.count(),
            cancelled: st.cancelled != 0,
            error,
        }
    }
}

/// MPI_Cancel of a generalized request: its cancel callback, told whether it has completed.
///
/// # Safety
/// The callbacks are the user's.
pub(crate) unsafe fn cancel(g: &Greq) -> Res {
    // SAFETY: the caller keeps this function's `# Safety`: The callbacks are the user's.
    unsafe {
        let rc = match g.cancel {
            Some(f) => f(g.extra, g.completed as c_int),
            None => MPI_SUCCESS,
        };
        if rc != MPI_SUCCESS {
            return fail(rc, "the cancel callback of a generalized request failed");
        }
        Ok(())
    }
}

/// MPI_Request_free of `handle` if it is a generalized request (`false` if it is not). A
/// completed one is freed now, with its free callback; another is freed by
/// MPI_Grequest_complete.
///
/// # Safety
/// The callbacks are the user's.
pub(crate) unsafe fn free(handle: Handle) -> Res<bool> {
    // SAFETY: the caller keeps this function's `# Safety`: The callbacks are the user's.
    unsafe {
        let done = running(|s| {
            let Some(req) = s.requests.get_mut(handle) else {
                return Ok(None);
            };
            let Some(g) = req.generalized.as_mut() else {
                return Ok(None);
            };
            if !g.completed {
                g.freed = true;
                return Ok(Some(None));
            }
            let g = **g;
            if let Some(req) = s.requests.remove(handle) {
                if !req.is_complete() {
                    s.bsends.push((req, 0, crate::bsend::BufferOwner::Process));
                }
            }
            Ok(Some(Some(g)))
        })?;
        match done {
            None => Ok(false),
            Some(None) => Ok(true),
            Some(Some(g)) => {
                let rc = g.run_free();
                if rc != MPI_SUCCESS {
                    return fail(rc, "the free callback of a generalized request failed");
                }
                Ok(true)
            }
        }
    }
}
