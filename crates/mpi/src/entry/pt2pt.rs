//! Chapter 3 of MPI 5.0, point-to-point communication: sends in four modes, receives, probes
//! and matched probes, persistent requests, the wait/test family, status accessors and the
//! buffers of buffered sends. The semantics are in [`crate::p2p`], [`crate::request`] and
//! [`crate::bsend`] (the status accessors MPI 5.0 added in [`crate::mpi5`]).

use super::NONE;
use crate::abi::*;
use crate::bsend::*;
use crate::check::out;
use crate::error::{fail, MpiError};
use crate::mpi5::*;
use crate::p2p::{count_arg, request_status, *};
use crate::request::{engine_request, sent_bytes, Outcome, Persistent, SendKind};
use crate::state::running;
use std::ffi::{c_int, c_void};

mpi! {
    /// Blocking standard send.
    fn MPI_Send / PMPI_Send(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) on comm => {
        standard_send(buf, count.into(), datatype, dest, tag, comm)
    }
}

mpi! {
    /// Blocking synchronous send.
    fn MPI_Ssend / PMPI_Ssend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) on comm => {
        blocking_send(buf, count.into(), datatype, dest, tag, comm, SendKind::Synchronous)
    }
}

mpi! {
    /// Blocking buffered send.
    fn MPI_Bsend / PMPI_Bsend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) on comm => {
        blocking_send(buf, count.into(), datatype, dest, tag, comm, SendKind::Buffered)
    }
}

mpi! {
    /// Blocking ready send.
    fn MPI_Rsend / PMPI_Rsend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) on comm => {
        blocking_send(buf, count.into(), datatype, dest, tag, comm, SendKind::Ready)
    }
}

mpi! {
    /// Nonblocking standard send.
    fn MPI_Isend / PMPI_Isend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
        nonblocking_send(buf, count.into(), datatype, dest, tag, comm, request, SendKind::Standard)
    }
}

mpi! {
    /// Nonblocking synchronous send.
    fn MPI_Issend / PMPI_Issend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
        nonblocking_send(buf, count.into(), datatype, dest, tag, comm, request, SendKind::Synchronous)
    }
}

mpi! {
    /// Nonblocking buffered send.
    fn MPI_Ibsend / PMPI_Ibsend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
        nonblocking_send(buf, count.into(), datatype, dest, tag, comm, request, SendKind::Buffered)
    }
}

mpi! {
    /// Nonblocking ready send.
    fn MPI_Irsend / PMPI_Irsend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
        nonblocking_send(buf, count.into(), datatype, dest, tag, comm, request, SendKind::Ready)
    }
}

mpi! {
    /// Blocking receive.
    fn MPI_Recv / PMPI_Recv(buf: *mut c_void, count: c_int, datatype: Handle, source: c_int, tag: c_int, comm: Handle, status: *mut MpiStatus) on comm => {
        recv(buf, count.into(), datatype, (source, tag), comm, status)
    }
}

mpi! {
    /// Nonblocking receive.
    fn MPI_Irecv / PMPI_Irecv(buf: *mut c_void, count: c_int, datatype: Handle, source: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
        irecv(buf, count.into(), datatype, (source, tag), comm, request)
    }
}

mpi! {
    /// Send and receive without deadlock.
    fn MPI_Sendrecv / PMPI_Sendrecv(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, source: c_int, recvtag: c_int, comm: Handle, status: *mut MpiStatus) on comm => {
        let send = (sendbuf, sendcount.into(), sendtype, dest, sendtag);
        let recv = (recvbuf, recvcount.into(), recvtype, source, recvtag);
        sendrecv(send, recv, comm, status)
    }
}

mpi! {
    /// Send and receive in one buffer.
    fn MPI_Sendrecv_replace / PMPI_Sendrecv_replace(buf: *mut c_void, count: c_int, datatype: Handle, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: Handle, status: *mut MpiStatus) on comm => {
        let req = running(|s| start_sendrecv_replace(s, buf, count.into(), datatype, (dest, sendtag), (source, recvtag), comm))?;
        finish_recv(req, status)
    }
}

macro_rules! send_init {
    ($name:ident, $pname:ident, $kind:expr, $doc:literal) => {
        mpi! {
            #[doc = $doc]
            fn $name / $pname(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
                running(|s| send_args(s, buf, count.into(), datatype, dest, tag, comm).map(drop))?;
                persistent(comm, request, Persistent::Send { kind: $kind, buf: buf as *const u8, count: count.into(), datatype, dest, tag })
            }
        }
    };
}

send_init!(
    MPI_Send_init,
    PMPI_Send_init,
    SendKind::Standard,
    "Persistent standard send."
);

send_init!(
    MPI_Ssend_init,
    PMPI_Ssend_init,
    SendKind::Synchronous,
    "Persistent synchronous send."
);

send_init!(
    MPI_Bsend_init,
    PMPI_Bsend_init,
    SendKind::Buffered,
    "Persistent buffered send."
);

send_init!(
    MPI_Rsend_init,
    PMPI_Rsend_init,
    SendKind::Ready,
    "Persistent ready send."
);

mpi! {
    /// Persistent receive.
    fn MPI_Recv_init / PMPI_Recv_init(buf: *mut c_void, count: c_int, datatype: Handle, source: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
        recv_tag(tag)?;
        running(|s| {
            let core = s.core_comm(comm)?;
            let n = count_arg(count)?;
            crate::check::buffer(buf, n, &message_type(s, datatype, n)?)?;
            source_arg(&core, source).map(drop)
        })?;
        persistent(comm, request, Persistent::Recv { buf: buf as *mut u8, count: count.into(), datatype, source, tag })
    }
}

mpi! {
    /// Starts a persistent request.
    fn MPI_Start / PMPI_Start(request: *mut Handle) on NONE => {
        let Some(&h) = request.as_ref() else { return fail(MPI_ERR_REQUEST, "request argument is NULL") };
        start_handle(h)
    }
}

mpi! {
    /// Starts several persistent requests.
    fn MPI_Startall / PMPI_Startall(count: c_int, requests: *mut Handle) on NONE => {
        let handles = handles_arg(count, requests)?;
        handles.iter().try_for_each(|&h| start_handle(h))
    }
}

mpi! {
    /// Frees a request (an active one completes in the background).
    fn MPI_Request_free / PMPI_Request_free(request: *mut Handle) on NONE => {
        let Some(h) = request.as_mut() else { return fail(MPI_ERR_REQUEST, "request argument is NULL") };
        if sent_bytes(*h).is_some() {
            crate::request::retire_sent(*h)?;
            *h = MPI_REQUEST_NULL;
            return Ok(());
        }
        if let Some(raw) = engine_request(*h) {
            running(|s| free_engine_request(s, *h, raw))?;
            *h = MPI_REQUEST_NULL;
            return Ok(());
        }
        if crate::greq::free(*h)? {
            *h = MPI_REQUEST_NULL;
            return Ok(());
        }
        let hidden = running(|s| {
            let Some(req) = s.requests.remove(*h) else {
                return fail(MPI_ERR_REQUEST, format!("invalid request {:#x}", *h));
            };
            let mut hidden = None;
            match req.persistent.as_deref() {
                Some(Persistent::Send { datatype, .. } | Persistent::Recv { datatype, .. }) => {
                    s.types.remove(*datatype);
                }
                Some(Persistent::Partitioned(p)) => {
                    s.types.remove(p.datatype);
                }
                Some(Persistent::Coll { hidden: c, kept, .. }) => hidden = Some((*c, kept.clone())),
                None => {}
            }
            if !req.is_complete() {
                // Still in flight: keep it alive with the buffered sends, reaped as they finish.
                s.bsends.push((req, 0, crate::bsend::BufferOwner::Process));
            }
            *h = MPI_REQUEST_NULL;
            Ok(hidden)
        })?;
        if let Some((c, kept)) = hidden {
            crate::comm::free_hidden(c);
            crate::coll::release_kept(kept);
        }
        Ok(())
    }
}

mpi! {
    /// Cancels a pending receive (sends already on their way are not cancelled).
    fn MPI_Cancel / PMPI_Cancel(request: *mut Handle) on NONE => {
        let Some(&h) = request.as_ref() else { return fail(MPI_ERR_REQUEST, "request argument is NULL") };
        if sent_bytes(h).is_some() {
            // Done already: cancelling has no effect (MPI 4.1 §3.8.4).
            return Ok(());
        }
        if let Some(raw) = engine_request(h) {
            return running(|s| {
                let world = world_of_engine_handle(s, h, raw)?;
                world.raw_cancel(raw);
                Ok(())
            });
        }
        let greq = running(|s| {
            let req = s.requests.get_mut(h).ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}")))?;
            if let Some(g) = req.generalized.as_deref().copied() {
                return Ok(Some(g));
            }
            if let Some(raw) = req.raw() {
                req.cancel_requested = true;
                req.core.raw_cancel(raw);
            }
            Ok(None)
        })?;
        match greq {
            Some(g) => crate::greq::cancel(&g),
            None => Ok(()),
        }
    }
}

mpi! {
    /// Whether a completed request was cancelled.
    fn MPI_Test_cancelled / PMPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) on NONE => {
        let (Some(st), Some(flag)) = (status.as_ref(), flag.as_mut()) else { return fail(MPI_ERR_ARG, "NULL argument") };
        *flag = (st.cancelled != 0) as c_int;
        Ok(())
    }
}

mpi! {
    /// Waits for one request.
    fn MPI_Wait / PMPI_Wait(request: *mut Handle, status: *mut MpiStatus) on NONE => {
        let Some(h) = request.as_mut() else { return fail(MPI_ERR_REQUEST, "request argument is NULL") };
        let (list, engine) = entries_to_wait(std::slice::from_ref(h), true)?;
        let entry = list[0];
        if let Entry::Null = entry {
            Outcome::EMPTY.write(status, false);
            return Ok(());
        }
        if let Some(engine) = engine {
            match (engine.fault_tolerant(), entry) {
                // A receive from any source may end early (MPIX_ERR_PROC_FAILED_PENDING).
                (true, Entry::Active(raws)) => {
                    let raws: Vec<_> = raws.iter().flatten().copied().collect();
                    engine.raw_wait_all(&raws)?;
                }
                _ => engine.wait_until(|done| done_in(entry, done))?,
            }
        }
        finish_handle(h, status, false)?.check()
    }
}

mpi! {
    /// Tests one request.
    fn MPI_Test / PMPI_Test(request: *mut Handle, flag: *mut c_int, status: *mut MpiStatus) on NONE => {
        let (Some(h), Some(flag)) = (request.as_mut(), flag.as_mut()) else { return fail(MPI_ERR_ARG, "NULL argument") };
        let (list, engine) = entries(std::slice::from_ref(h))?;
        let entry = list[0];
        if let Entry::Null = entry {
            *flag = 1;
            Outcome::EMPTY.write(status, false);
            return Ok(());
        }
        if let Entry::AwaitingReady = entry {
            *flag = 0;
            return Ok(());
        }
        if let Some(engine) = engine {
            if !done_in(entry, &|r| engine.raw_done(r)) {
                engine.progress()?;
                if !done_in(entry, &|r| engine.raw_done(r)) {
                    *flag = 0;
                    return Ok(());
                }
            }
        }
        *flag = 1;
        finish_handle(h, status, false)?.check()
    }
}

mpi! {
    /// Waits for all requests.
    fn MPI_Waitall / PMPI_Waitall(count: c_int, requests: *mut Handle, statuses: *mut MpiStatus) on NONE => {
        let handles = handles_arg(count, requests)?;
        let (list, engine) = entries_to_wait(handles, true)?;
        if let Some(engine) = engine.as_ref().filter(|e| e.fault_tolerant()) {
            let all = |done: &dyn Fn(_) -> bool| list.iter().all(|&e| !e.in_flight() || done_in(e, done));
            let pending = crate::ft::wait_entries(engine, &list, all)?;
            if !pending.is_empty() {
                return crate::ft::wait_all_pending(handles, &list, engine, statuses, &pending);
            }
        } else if let Some(engine) = engine {
            // A finished request stays finished: each pass looks from the first one still in
            // flight on, not at the whole list again (a window of 64 receives would cost
            // thousands of looks).
            let mut next = 0;
            engine.wait_until(|done| {
                while let Some(&e) = list.get(next) {
                    if e.in_flight() && !done_in(e, done) {
                        return false;
                    }
                    next += 1;
                }
                true
            })?;
        }
        match finish_all(handles, &list, statuses)? {
            0 => Ok(()),
            _ => fail(MPI_ERR_IN_STATUS, "a request failed; see the statuses"),
        }
    }
}

mpi! {
    /// Tests all requests: completes them only if all are done.
    fn MPI_Testall / PMPI_Testall(count: c_int, requests: *mut Handle, flag: *mut c_int, statuses: *mut MpiStatus) on NONE => {
        let Some(flag) = flag.as_mut() else { return fail(MPI_ERR_ARG, "flag is NULL") };
        let handles = handles_arg(count, requests)?;
        let (list, engine) = entries(handles)?;
        if let Some(engine) = engine {
            let all = |e: &Entry| !e.in_flight() || done_in(*e, &|r| engine.raw_done(r));
            if !list.iter().all(all) {
                engine.progress()?;
                if !list.iter().all(all) {
                    *flag = 0;
                    return Ok(());
                }
            }
        }
        *flag = 1;
        match finish_all(handles, &list, statuses)? {
            0 => Ok(()),
            _ => fail(MPI_ERR_IN_STATUS, "a request failed; see the statuses"),
        }
    }
}

mpi! {
    /// Waits for any one request.
    fn MPI_Waitany / PMPI_Waitany(count: c_int, requests: *mut Handle, index: *mut c_int, status: *mut MpiStatus) on NONE => {
        let Some(index) = index.as_mut() else { return fail(MPI_ERR_ARG, "index is NULL") };
        let handles = handles_arg(count, requests)?;
        let (list, engine) = entries_to_wait(handles, false)?;
        let Some(engine) = engine else {
            *index = MPI_UNDEFINED;
            Outcome::EMPTY.write(status, false);
            return Ok(());
        };
        let pending = crate::ft::wait_entries(&engine, &list, |done| list.iter().any(|&e| done_in(e, done)))?;
        if let Some(&i) = pending.first() {
            *index = i as c_int;
            return fail(MPIX_ERR_PROC_FAILED_PENDING, "a receive from any source cannot complete while a failure is not acknowledged; it stays active");
        }
        let Some(hit) = first_done(&list, &engine) else {
            return fail(MPI_ERR_INTERN, "MPI_Waitany ended with no request done");
        };
        *index = hit as c_int;
        finish_handle(&mut handles[hit], status, false)?.check()
    }
}

mpi! {
    /// Tests whether any one request is done.
    fn MPI_Testany / PMPI_Testany(count: c_int, requests: *mut Handle, index: *mut c_int, flag: *mut c_int, status: *mut MpiStatus) on NONE => {
        let (Some(index), Some(flag)) = (index.as_mut(), flag.as_mut()) else { return fail(MPI_ERR_ARG, "NULL argument") };
        let handles = handles_arg(count, requests)?;
        let (list, engine) = entries(handles)?;
        let Some(engine) = engine else {
            *flag = 1;
            *index = MPI_UNDEFINED;
            Outcome::EMPTY.write(status, false);
            return Ok(());
        };
        let mut hit = first_done(&list, &engine);
        if hit.is_none() {
            engine.progress()?;
            hit = first_done(&list, &engine);
        }
        match hit {
            None => { *flag = 0; *index = MPI_UNDEFINED; Ok(()) }
            Some(i) => {
                *flag = 1;
                *index = i as c_int;
                finish_handle(&mut handles[i], status, false)?.check()
            }
        }
    }
}

mpi! {
    /// Waits until at least one request is done; completes all that are.
    fn MPI_Waitsome / PMPI_Waitsome(incount: c_int, requests: *mut Handle, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MpiStatus) on NONE => {
        let Some(outcount) = outcount.as_mut() else { return fail(MPI_ERR_ARG, "outcount is NULL") };
        let handles = handles_arg(incount, requests)?;
        let (list, engine) = entries_to_wait(handles, false)?;
        let Some(engine) = engine else { *outcount = MPI_UNDEFINED; return Ok(()) };
        let pending = crate::ft::wait_entries(&engine, &list, |done| list.iter().any(|&e| done_in(e, done)))?;
        if !pending.is_empty() {
            return crate::ft::wait_some_pending(outcount, indices, statuses, &pending);
        }
        some(handles, &list, &engine, outcount, indices, statuses)
    }
}

mpi! {
    /// Completes the requests that are done, if any.
    fn MPI_Testsome / PMPI_Testsome(incount: c_int, requests: *mut Handle, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MpiStatus) on NONE => {
        let Some(outcount) = outcount.as_mut() else { return fail(MPI_ERR_ARG, "outcount is NULL") };
        let handles = handles_arg(incount, requests)?;
        let (list, engine) = entries(handles)?;
        let Some(engine) = engine else { *outcount = MPI_UNDEFINED; return Ok(()) };
        engine.progress()?;
        some(handles, &list, &engine, outcount, indices, statuses)
    }
}

mpi! {
    /// Whether a request is done, without completing it.
    fn MPI_Request_get_status / PMPI_Request_get_status(request: Handle, flag: *mut c_int, status: *mut MpiStatus) on NONE => {
        let Some(flag) = flag.as_mut() else { return fail(MPI_ERR_ARG, "flag is NULL") };
        request_status(request, flag, status)
    }
}

mpi! {
    /// Waits for a matching message and reports its envelope.
    fn MPI_Probe / PMPI_Probe(source: c_int, tag: c_int, comm: Handle, status: *mut MpiStatus) on comm => {
        let core = running(|s| s.core_comm(comm))?;
        let tag = recv_tag(tag)?;
        let Some(source) = source_arg(&core, source)? else {
            Outcome::PROC_NULL.write(status, false);
            return Ok(());
        };
        probe_outcome(core.probe(source, tag)?).write(status, false);
        Ok(())
    }
}

mpi! {
    /// Reports the envelope of a matching message if one has arrived.
    fn MPI_Iprobe / PMPI_Iprobe(source: c_int, tag: c_int, comm: Handle, flag: *mut c_int, status: *mut MpiStatus) on comm => {
        let Some(flag) = flag.as_mut() else { return fail(MPI_ERR_ARG, "flag is NULL") };
        let core = running(|s| s.core_comm(comm))?;
        let tag = recv_tag(tag)?;
        let Some(source) = source_arg(&core, source)? else {
            *flag = 1;
            Outcome::PROC_NULL.write(status, false);
            return Ok(());
        };
        match core.iprobe(source, tag)? {
            Some(st) => { *flag = 1; probe_outcome(st).write(status, false) }
            None => *flag = 0,
        }
        Ok(())
    }
}

mpi! {
    /// Number of whole elements a status reports.
    fn MPI_Get_count / PMPI_Get_count(status: *const MpiStatus, datatype: Handle, count: *mut c_int) on NONE => {
        let (Some(st), Some(count)) = (status.as_ref(), count.as_mut()) else { return fail(MPI_ERR_ARG, "NULL argument") };
        *count = match count_of(st, datatype)? {
            Some(n) => c_int::try_from(n).unwrap_or(MPI_UNDEFINED),
            None => MPI_UNDEFINED,
        };
        Ok(())
    }
}

mpi! {
    /// Waits for a matching message and takes it out of reach of other receives.
    fn MPI_Mprobe / PMPI_Mprobe(source: c_int, tag: c_int, comm: Handle, message: *mut Handle, status: *mut MpiStatus) on comm => {
        mprobe(source, tag, comm, true, message, status).map(drop)
    }
}

mpi! {
    /// Takes a matching message out of reach of other receives, if one has arrived.
    fn MPI_Improbe / PMPI_Improbe(source: c_int, tag: c_int, comm: Handle, flag: *mut c_int, message: *mut Handle, status: *mut MpiStatus) on comm => {
        let Some(flag) = flag.as_mut() else { return fail(MPI_ERR_ARG, "flag is NULL") };
        *flag = mprobe(source, tag, comm, false, message, status)? as c_int;
        Ok(())
    }
}

mpi! {
    /// Receives a message taken by MPI_Mprobe/MPI_Improbe.
    fn MPI_Mrecv / PMPI_Mrecv(buf: *mut c_void, count: c_int, datatype: Handle, message: *mut Handle, status: *mut MpiStatus) on NONE => {
        mrecv(buf, count.into(), datatype, message, status)
    }
}

mpi! {
    /// Starts receiving a message taken by MPI_Mprobe/MPI_Improbe.
    fn MPI_Imrecv / PMPI_Imrecv(buf: *mut c_void, count: c_int, datatype: Handle, message: *mut Handle, request: *mut Handle) on NONE => {
        let req = start_mrecv(buf, count.into(), datatype, message)?.into_request();
        running(|s| publish(s, req, request))
    }
}

mpi! {
    /// Nonblocking send and receive in one request.
    fn MPI_Isendrecv / PMPI_Isendrecv(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, source: c_int, recvtag: c_int, comm: Handle, request: *mut Handle) on comm => {
        let send = (sendbuf, sendcount.into(), sendtype, dest, sendtag);
        let recv = (recvbuf, recvcount.into(), recvtype, source, recvtag);
        running(|s| {
            let req = start_sendrecv(s, send, recv, comm)?;
            publish(s, req, request)
        })
    }
}

mpi! {
    /// Nonblocking send and receive in one buffer: the outgoing data is packed at the call.
    fn MPI_Isendrecv_replace / PMPI_Isendrecv_replace(buf: *mut c_void, count: c_int, datatype: Handle, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: Handle, request: *mut Handle) on comm => {
        running(|s| {
            let req = start_sendrecv_replace(s, buf, count.into(), datatype, (dest, sendtag), (source, recvtag), comm)?;
            publish(s, req, request)
        })
    }
}

mpi! {
    /// MPI_Send with an MPI_Count count.
    fn MPI_Send_c / PMPI_Send_c(buf: *const c_void, count: i64, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) on comm => {
        standard_send(buf, count, datatype, dest, tag, comm)
    }
}

macro_rules! send_c {
    ($name:ident, $pname:ident, $kind:expr, $doc:literal) => {
        mpi! {
            #[doc = $doc]
            fn $name / $pname(buf: *const c_void, count: i64, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) on comm => {
                blocking_send(buf, count, datatype, dest, tag, comm, $kind)
            }
        }
    };
}

send_c!(
    MPI_Ssend_c,
    PMPI_Ssend_c,
    SendKind::Synchronous,
    "MPI_Ssend with an MPI_Count count."
);

send_c!(
    MPI_Bsend_c,
    PMPI_Bsend_c,
    SendKind::Buffered,
    "MPI_Bsend with an MPI_Count count."
);

send_c!(
    MPI_Rsend_c,
    PMPI_Rsend_c,
    SendKind::Ready,
    "MPI_Rsend with an MPI_Count count."
);

macro_rules! isend_c {
    ($name:ident, $pname:ident, $kind:expr, $doc:literal) => {
        mpi! {
            #[doc = $doc]
            fn $name / $pname(buf: *const c_void, count: i64, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
                nonblocking_send(buf, count, datatype, dest, tag, comm, request, $kind)
            }
        }
    };
}

isend_c!(
    MPI_Isend_c,
    PMPI_Isend_c,
    SendKind::Standard,
    "MPI_Isend with an MPI_Count count."
);

isend_c!(
    MPI_Issend_c,
    PMPI_Issend_c,
    SendKind::Synchronous,
    "MPI_Issend with an MPI_Count count."
);

isend_c!(
    MPI_Ibsend_c,
    PMPI_Ibsend_c,
    SendKind::Buffered,
    "MPI_Ibsend with an MPI_Count count."
);

isend_c!(
    MPI_Irsend_c,
    PMPI_Irsend_c,
    SendKind::Ready,
    "MPI_Irsend with an MPI_Count count."
);

macro_rules! send_init_c {
    ($name:ident, $pname:ident, $kind:expr, $doc:literal) => {
        mpi! {
            #[doc = $doc]
            fn $name / $pname(buf: *const c_void, count: i64, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
                running(|s| send_args(s, buf, count, datatype, dest, tag, comm).map(drop))?;
                persistent(comm, request, Persistent::Send { kind: $kind, buf: buf as *const u8, count, datatype, dest, tag })
            }
        }
    };
}

send_init_c!(
    MPI_Send_init_c,
    PMPI_Send_init_c,
    SendKind::Standard,
    "MPI_Send_init with an MPI_Count count."
);

send_init_c!(
    MPI_Ssend_init_c,
    PMPI_Ssend_init_c,
    SendKind::Synchronous,
    "MPI_Ssend_init with an MPI_Count count."
);

send_init_c!(
    MPI_Bsend_init_c,
    PMPI_Bsend_init_c,
    SendKind::Buffered,
    "MPI_Bsend_init with an MPI_Count count."
);

send_init_c!(
    MPI_Rsend_init_c,
    PMPI_Rsend_init_c,
    SendKind::Ready,
    "MPI_Rsend_init with an MPI_Count count."
);

mpi! {
    /// MPI_Recv with an MPI_Count count.
    fn MPI_Recv_c / PMPI_Recv_c(buf: *mut c_void, count: i64, datatype: Handle, source: c_int, tag: c_int, comm: Handle, status: *mut MpiStatus) on comm => {
        recv(buf, count, datatype, (source, tag), comm, status)
    }
}

mpi! {
    /// MPI_Irecv with an MPI_Count count.
    fn MPI_Irecv_c / PMPI_Irecv_c(buf: *mut c_void, count: i64, datatype: Handle, source: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
        irecv(buf, count, datatype, (source, tag), comm, request)
    }
}

mpi! {
    /// MPI_Recv_init with an MPI_Count count.
    fn MPI_Recv_init_c / PMPI_Recv_init_c(buf: *mut c_void, count: i64, datatype: Handle, source: c_int, tag: c_int, comm: Handle, request: *mut Handle) on comm => {
        recv_tag(tag)?;
        running(|s| {
            let core = s.core_comm(comm)?;
            let n = count_arg(count)?;
            crate::check::buffer(buf, n, &message_type(s, datatype, n)?)?;
            source_arg(&core, source).map(drop)
        })?;
        persistent(comm, request, Persistent::Recv { buf: buf as *mut u8, count, datatype, source, tag })
    }
}

mpi! {
    /// MPI_Sendrecv with MPI_Count counts.
    fn MPI_Sendrecv_c / PMPI_Sendrecv_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, source: c_int, recvtag: c_int, comm: Handle, status: *mut MpiStatus) on comm => {
        let send = (sendbuf, sendcount, sendtype, dest, sendtag);
        let recv = (recvbuf, recvcount, recvtype, source, recvtag);
        sendrecv(send, recv, comm, status)
    }
}

mpi! {
    /// MPI_Sendrecv_replace with an MPI_Count count.
    fn MPI_Sendrecv_replace_c / PMPI_Sendrecv_replace_c(buf: *mut c_void, count: i64, datatype: Handle, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: Handle, status: *mut MpiStatus) on comm => {
        let req = running(|s| start_sendrecv_replace(s, buf, count, datatype, (dest, sendtag), (source, recvtag), comm))?;
        finish_recv(req, status)
    }
}

mpi! {
    /// Number of whole elements a status reports (MPI_Count).
    fn MPI_Get_count_c / PMPI_Get_count_c(status: *const MpiStatus, datatype: Handle, count: *mut i64) on NONE => {
        let (Some(st), Some(count)) = (status.as_ref(), count.as_mut()) else { return fail(MPI_ERR_ARG, "NULL argument") };
        *count = match count_of(st, datatype)? {
            Some(n) => i64::try_from(n).unwrap_or(MPI_UNDEFINED as i64),
            None => MPI_UNDEFINED as i64,
        };
        Ok(())
    }
}

mpi! {
    /// MPI_Mrecv with an MPI_Count count.
    fn MPI_Mrecv_c / PMPI_Mrecv_c(buf: *mut c_void, count: i64, datatype: Handle, message: *mut Handle, status: *mut MpiStatus) on NONE => {
        mrecv(buf, count, datatype, message, status)
    }
}

mpi! {
    /// MPI_Imrecv with an MPI_Count count.
    fn MPI_Imrecv_c / PMPI_Imrecv_c(buf: *mut c_void, count: i64, datatype: Handle, message: *mut Handle, request: *mut Handle) on NONE => {
        let req = start_mrecv(buf, count, datatype, message)?.into_request();
        running(|s| publish(s, req, request))
    }
}

mpi! {
    /// MPI_Isendrecv with MPI_Count counts.
    fn MPI_Isendrecv_c / PMPI_Isendrecv_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, source: c_int, recvtag: c_int, comm: Handle, request: *mut Handle) on comm => {
        let send = (sendbuf, sendcount, sendtype, dest, sendtag);
        let recv = (recvbuf, recvcount, recvtype, source, recvtag);
        running(|s| {
            let req = start_sendrecv(s, send, recv, comm)?;
            publish(s, req, request)
        })
    }
}

mpi! {
    /// MPI_Isendrecv_replace with an MPI_Count count.
    fn MPI_Isendrecv_replace_c / PMPI_Isendrecv_replace_c(buf: *mut c_void, count: i64, datatype: Handle, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: Handle, request: *mut Handle) on comm => {
        running(|s| {
            let req = start_sendrecv_replace(s, buf, count, datatype, (dest, sendtag), (source, recvtag), comm)?;
            publish(s, req, request)
        })
    }
}

mpi! {
    /// Attaches the process's buffer for buffered sends (or MPI_BUFFER_AUTOMATIC).
    fn MPI_Buffer_attach / PMPI_Buffer_attach(buffer: *mut c_void, size: c_int) on NONE => {
        attach(BufferOwner::Process, buffer, count_arg(size)?)
    }
}

mpi! {
    /// MPI_Buffer_attach with an MPI_Count size.
    fn MPI_Buffer_attach_c / PMPI_Buffer_attach_c(buffer: *mut c_void, size: i64) on NONE => {
        attach(BufferOwner::Process, buffer, count_size(size)?)
    }
}

mpi! {
    /// Detaches the process's buffer once every buffered send drawing on it has gone out.
    fn MPI_Buffer_detach / PMPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) on NONE => {
        detach_int(BufferOwner::Process, buffer_addr, size)
    }
}

mpi! {
    /// MPI_Buffer_detach with an MPI_Count size.
    fn MPI_Buffer_detach_c / PMPI_Buffer_detach_c(buffer_addr: *mut c_void, size: *mut i64) on NONE => {
        detach_count(BufferOwner::Process, buffer_addr, size)
    }
}

mpi! {
    /// Waits for the buffered sends that draw on the process's buffer.
    fn MPI_Buffer_flush / PMPI_Buffer_flush() on NONE => {
        flush(BufferOwner::Process)
    }
}

mpi! {
    /// MPI_Buffer_flush, returning a completed request.
    fn MPI_Buffer_iflush / PMPI_Buffer_iflush(request: *mut Handle) on NONE => {
        flush(BufferOwner::Process)?;
        flushed_request(MPI_COMM_SELF, request)
    }
}

mpi! {
    /// Attaches a communicator's buffer for buffered sends (or MPI_BUFFER_AUTOMATIC).
    fn MPI_Comm_attach_buffer / PMPI_Comm_attach_buffer(comm: Handle, buffer: *mut c_void, size: c_int) on comm => {
        attach(BufferOwner::Comm(comm), buffer, count_arg(size)?)
    }
}

mpi! {
    /// MPI_Comm_attach_buffer with an MPI_Count size.
    fn MPI_Comm_attach_buffer_c / PMPI_Comm_attach_buffer_c(comm: Handle, buffer: *mut c_void, size: i64) on comm => {
        attach(BufferOwner::Comm(comm), buffer, count_size(size)?)
    }
}

mpi! {
    /// Detaches a communicator's buffer once its buffered sends have gone out.
    fn MPI_Comm_detach_buffer / PMPI_Comm_detach_buffer(comm: Handle, buffer_addr: *mut c_void, size: *mut c_int) on comm => {
        detach_int(BufferOwner::Comm(comm), buffer_addr, size)
    }
}

mpi! {
    /// MPI_Comm_detach_buffer with an MPI_Count size.
    fn MPI_Comm_detach_buffer_c / PMPI_Comm_detach_buffer_c(comm: Handle, buffer_addr: *mut c_void, size: *mut i64) on comm => {
        detach_count(BufferOwner::Comm(comm), buffer_addr, size)
    }
}

mpi! {
    /// Waits for the buffered sends that draw on a communicator's buffer.
    fn MPI_Comm_flush_buffer / PMPI_Comm_flush_buffer(comm: Handle) on comm => {
        running(|s| s.comm(comm).map(drop))?;
        flush(BufferOwner::Comm(comm))
    }
}

mpi! {
    /// MPI_Comm_flush_buffer, returning a completed request.
    fn MPI_Comm_iflush_buffer / PMPI_Comm_iflush_buffer(comm: Handle, request: *mut Handle) on comm => {
        running(|s| s.comm(comm).map(drop))?;
        flush(BufferOwner::Comm(comm))?;
        flushed_request(comm, request)
    }
}

mpi! {
    /// Attaches a session's buffer for buffered sends (or MPI_BUFFER_AUTOMATIC).
    fn MPI_Session_attach_buffer / PMPI_Session_attach_buffer(session: Handle, buffer: *mut c_void, size: c_int) on session => {
        attach(BufferOwner::Session(session), buffer, count_arg(size)?)
    }
}

mpi! {
    /// MPI_Session_attach_buffer with an MPI_Count size.
    fn MPI_Session_attach_buffer_c / PMPI_Session_attach_buffer_c(session: Handle, buffer: *mut c_void, size: i64) on session => {
        attach(BufferOwner::Session(session), buffer, count_size(size)?)
    }
}

mpi! {
    /// Detaches a session's buffer once its buffered sends have gone out.
    fn MPI_Session_detach_buffer / PMPI_Session_detach_buffer(session: Handle, buffer_addr: *mut c_void, size: *mut c_int) on session => {
        detach_int(BufferOwner::Session(session), buffer_addr, size)
    }
}

mpi! {
    /// MPI_Session_detach_buffer with an MPI_Count size.
    fn MPI_Session_detach_buffer_c / PMPI_Session_detach_buffer_c(session: Handle, buffer_addr: *mut c_void, size: *mut i64) on session => {
        detach_count(BufferOwner::Session(session), buffer_addr, size)
    }
}

mpi! {
    /// Waits for the buffered sends that draw on a session's buffer.
    fn MPI_Session_flush_buffer / PMPI_Session_flush_buffer(session: Handle) on session => {
        running(|s| session_arg(s, session))?;
        flush(BufferOwner::Session(session))
    }
}

mpi! {
    /// MPI_Session_flush_buffer, returning a completed request.
    fn MPI_Session_iflush_buffer / PMPI_Session_iflush_buffer(session: Handle, request: *mut Handle) on session => {
        running(|s| session_arg(s, session))?;
        flush(BufferOwner::Session(session))?;
        flushed_request(MPI_COMM_SELF, request)
    }
}

mpi! {
    /// The MPI_SOURCE field of a status.
    fn MPI_Status_get_source / PMPI_Status_get_source(status: *mut MpiStatus, source: *mut c_int) on NONE => {
        *out(source, "source")? = status_arg(status)?.source;
        Ok(())
    }
}

mpi! {
    /// The MPI_TAG field of a status.
    fn MPI_Status_get_tag / PMPI_Status_get_tag(status: *mut MpiStatus, tag: *mut c_int) on NONE => {
        *out(tag, "tag")? = status_arg(status)?.tag;
        Ok(())
    }
}

mpi! {
    /// The MPI_ERROR field of a status.
    fn MPI_Status_get_error / PMPI_Status_get_error(status: *mut MpiStatus, error: *mut c_int) on NONE => {
        *out(error, "error")? = status_arg(status)?.error;
        Ok(())
    }
}

mpi! {
    /// Sets the MPI_SOURCE field of a status.
    fn MPI_Status_set_source / PMPI_Status_set_source(status: *mut MpiStatus, source: c_int) on NONE => {
        status_arg(status)?.source = source;
        Ok(())
    }
}

mpi! {
    /// Sets the MPI_TAG field of a status.
    fn MPI_Status_set_tag / PMPI_Status_set_tag(status: *mut MpiStatus, tag: c_int) on NONE => {
        status_arg(status)?.tag = tag;
        Ok(())
    }
}

mpi! {
    /// Sets the MPI_ERROR field of a status.
    fn MPI_Status_set_error / PMPI_Status_set_error(status: *mut MpiStatus, error: c_int) on NONE => {
        status_arg(status)?.error = error;
        Ok(())
    }
}

mpi! {
    /// Whether any of the requests is done (its index and status), completing none of them.
    fn MPI_Request_get_status_any / PMPI_Request_get_status_any(count: c_int, array_of_requests: *mut Handle, index: *mut c_int, flag: *mut c_int, status: *mut MpiStatus) on NONE => {
        let requests = requests_arg(count, array_of_requests)?;
        let index = out(index, "index")?;
        let flag = out(flag, "flag")?;
        *index = MPI_UNDEFINED;
        // No active request: flag set, index MPI_UNDEFINED, an empty status (as MPI_Testany).
        *flag = 1;
        for (i, &r) in requests.iter().enumerate() {
            if r == MPI_REQUEST_NULL {
                continue;
            }
            let mut done = 0;
            request_status(r, &mut done, status)?;
            if done != 0 {
                *index = i as c_int;
                return Ok(());
            }
            *flag = 0;
        }
        if *flag != 0 {
            if let Some(st) = status.as_mut() {
                *st = MpiStatus { source: MPI_ANY_SOURCE, tag: MPI_ANY_TAG, ..MpiStatus::default() };
            }
        }
        Ok(())
    }
}

mpi! {
    /// Whether all the requests are done (and then their statuses), completing none of them.
    fn MPI_Request_get_status_all / PMPI_Request_get_status_all(count: c_int, array_of_requests: *mut Handle, flag: *mut c_int, array_of_statuses: *mut MpiStatus) on NONE => {
        let requests = requests_arg(count, array_of_requests)?;
        let flag = out(flag, "flag")?;
        // First whether all are done, then their statuses: none is written unless all are.
        for &r in requests {
            let mut done = 0;
            request_status(r, &mut done, std::ptr::null_mut())?;
            if done == 0 {
                *flag = 0;
                return Ok(());
            }
        }
        for (i, &r) in requests.iter().enumerate() {
            let mut done = 0;
            request_status(r, &mut done, nth_status(array_of_statuses, i))?;
        }
        *flag = 1;
        Ok(())
    }
}

mpi! {
    /// The requests that are done (indices and statuses), completing none of them.
    fn MPI_Request_get_status_some / PMPI_Request_get_status_some(incount: c_int, array_of_requests: *mut Handle, outcount: *mut c_int, array_of_indices: *mut c_int, array_of_statuses: *mut MpiStatus) on NONE => {
        let requests = requests_arg(incount, array_of_requests)?;
        let outcount = out(outcount, "outcount")?;
        if requests.iter().all(|&r| r == MPI_REQUEST_NULL) {
            *outcount = MPI_UNDEFINED;
            return Ok(());
        }
        if array_of_indices.is_null() {
            return fail(MPI_ERR_ARG, "array_of_indices is NULL");
        }
        let mut n = 0usize;
        for (i, &r) in requests.iter().enumerate() {
            if r == MPI_REQUEST_NULL {
                continue;
            }
            let mut done = 0;
            request_status(r, &mut done, nth_status(array_of_statuses, n))?;
            if done != 0 {
                // SAFETY: the caller passes room for `incount` indices.
                *array_of_indices.add(n) = i as c_int;
                n += 1;
            }
        }
        *outcount = n as c_int;
        Ok(())
    }
}
