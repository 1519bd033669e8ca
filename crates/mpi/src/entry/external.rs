//! Chapter 13 of MPI 5.0, external interfaces: generalized requests and setting the fields
//! of a status (`MPI_Status_set_elements*`, `MPI_Status_set_cancelled`), over [`crate::greq`]
//! and [`crate::p2p`].

use super::NONE;
use crate::abi::*;
use crate::error::{fail, MpiError};
use crate::greq::*;
use crate::p2p::*;
use crate::request::{Greq, GreqCancelFn, GreqFreeFn, GreqQueryFn, Request};
use crate::state::running;
use ferry_core::raw::SendMode;
use ferry_core::Source;
use std::ffi::{c_int, c_void};

mpi! {
    /// Sets the element count of a status.
    fn MPI_Status_set_elements / PMPI_Status_set_elements(status: *mut MpiStatus, datatype: Handle, count: c_int) on NONE => {
        set_elements(status, datatype, count as i64)
    }
}

mpi! {
    /// Sets the element count of a status (MPI_Count).
    fn MPI_Status_set_elements_x / PMPI_Status_set_elements_x(status: *mut MpiStatus, datatype: Handle, count: i64) on NONE => {
        set_elements(status, datatype, count)
    }
}

mpi! {
    /// Sets the cancelled flag of a status.
    fn MPI_Status_set_cancelled / PMPI_Status_set_cancelled(status: *mut MpiStatus, flag: c_int) on NONE => {
        let Some(st) = status.as_mut() else { return fail(MPI_ERR_ARG, "status is NULL") };
        st.cancelled = (flag != 0) as c_int;
        Ok(())
    }
}

mpi! {
    /// Sets the element count of a status (MPI_Count).
    fn MPI_Status_set_elements_c / PMPI_Status_set_elements_c(status: *mut MpiStatus, datatype: Handle, count: i64) on NONE => {
        set_elements(status, datatype, count)
    }
}

mpi! {
    /// Starts a generalized request that MPI_Grequest_complete completes.
    fn MPI_Grequest_start / PMPI_Grequest_start(query_fn: Option<GreqQueryFn>, free_fn: Option<GreqFreeFn>, cancel_fn: Option<GreqCancelFn>,
        extra_state: *mut c_void, request: *mut Handle) on NONE => {
        let Some(out) = request.as_mut() else { return fail(MPI_ERR_ARG, "request argument is NULL") };
        let chan = channel()?;
        let tag = running(|s| {
            let tag = s.greq_next_tag;
            s.greq_next_tag = if tag == c_int::MAX { 0 } else { tag + 1 };
            Ok(tag)
        })?;
        *out = running(|s| {
            let core = s.core_comm(chan)?;
            // SAFETY: an empty receive writes no byte.
            let raw = unsafe { core.raw_recv(std::ptr::NonNull::dangling().as_ptr(), 0, Source::Rank(0), tag)? };
            let mut req = Request::running(MPI_COMM_SELF, core, raw, None);
            req.generalized = Some(Box::new(Greq {
                query: query_fn,
                free: free_fn,
                cancel: cancel_fn,
                extra: extra_state,
                tag,
                completed: false,
                freed: false,
            }));
            Ok(s.requests.insert(req))
        })?;
        Ok(())
    }
}

mpi! {
    /// Tells MPI that the operation of a generalized request is complete.
    fn MPI_Grequest_complete / PMPI_Grequest_complete(request: Handle) on NONE => {
        let freed = running(|s| {
            let req = s.requests.get_mut(request).ok_or_else(|| {
                MpiError::new(MPI_ERR_REQUEST, format!("invalid request {request:#x}"))
            })?;
            let Some(g) = req.generalized.as_mut() else {
                return fail(MPI_ERR_REQUEST, "MPI_Grequest_complete of a request that is not generalized");
            };
            if g.completed {
                return fail(MPI_ERR_REQUEST, "MPI_Grequest_complete called twice");
            }
            g.completed = true;
            let g = **g;
            // SAFETY: an empty send reads no byte.
            let raw = unsafe { req.core.raw_send(std::ptr::NonNull::dangling().as_ptr(), 0, 0, g.tag, SendMode::Standard)? };
            let send = Request::running(MPI_COMM_SELF, req.core.clone(), raw, None);
            s.bsends.push((send, 0, crate::bsend::BufferOwner::Process));
            if !g.freed {
                return Ok(None);
            }
            if let Some(req) = s.requests.remove(request) {
                s.bsends.push((req, 0, crate::bsend::BufferOwner::Process));
            }
            Ok(Some(g))
        })?;
        if let Some(g) = freed {
            let rc = g.run_free();
            if rc != MPI_SUCCESS {
                return fail(rc, "the free callback of a generalized request failed");
            }
        }
        Ok(())
    }
}
