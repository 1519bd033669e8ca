//! Point-to-point: sends in four modes, receives, probes, persistent requests, and the
//! wait/test family (the entry points are in `entry/pt2pt.rs`).

use crate::abi::*;
use crate::error::{fail, MpiError, Res};
use crate::request::{
    engine_handle, engine_request, sent_bytes, Greq, Outcome, Persistent, Progress, Request,
    SendKind, Typed,
};
use crate::state::{running, with, State};
use ferry_core::raw::{RawRequest, SendMode};
use ferry_core::Source;
use std::ffi::{c_int, c_void};

/// The element type of a send or receive. An empty message may name MPI_DATATYPE_NULL, as
/// MPICH allows (its test suite relies on it); it then moves no bytes.
pub(crate) fn message_type(
    s: &mut State,
    datatype: Handle,
    count: usize,
) -> Res<crate::datatype::Datatype> {
    if count == 0 && datatype == MPI_DATATYPE_NULL {
        return s.datatype(crate::datatype::Builtin::Byte as Handle);
    }
    s.committed_type(datatype)
}

/// An element count as the `_c` bindings take it (`MPI_Count`); the int bindings widen theirs.
/// Byte lengths inside are `usize`, checked where a count meets a datatype's size.
pub(crate) type Count = i64;

/// Checks a count argument, int or `MPI_Count`.
pub(crate) fn count_arg(count: impl Into<Count>) -> Res<usize> {
    crate::check::count(count)
}

fn dest_arg(core: &ferry_core::Comm, rank: c_int) -> Res<Option<usize>> {
    let rank = crate::check::rank(rank, core.size())?;
    // MPI_PROC_NULL moves nothing, but on a revoked communicator it fails as every other
    // operation does (ULFM).
    if rank.is_none() && core.fault_tolerant() && core.is_revoked() {
        return fail(MPIX_ERR_REVOKED, "the communicator has been revoked");
    }
    Ok(rank)
}

pub(crate) fn source_arg(core: &ferry_core::Comm, rank: c_int) -> Res<Option<Source>> {
    if rank == MPI_ANY_SOURCE {
        return Ok(Some(Source::Any));
    }
    Ok(dest_arg(core, rank)?.map(Source::Rank))
}

pub(crate) fn send_tag(tag: c_int) -> Res<i32> {
    if tag < 0 {
        return fail(
            MPI_ERR_TAG,
            format!("invalid send tag {tag} (tags are 0..=MPI_TAG_UB)"),
        );
    }
    Ok(tag)
}

pub(crate) fn recv_tag(tag: c_int) -> Res<i32> {
    match tag {
        MPI_ANY_TAG => Ok(ferry_core::ANY_TAG),
        t if t >= 0 => Ok(t),
        t => fail(MPI_ERR_TAG, format!("invalid receive tag {t}")),
    }
}

/// A send's arguments, checked.
pub(crate) struct SendArgs {
    core: ferry_core::Comm,
    count: usize,
    dt: crate::datatype::Datatype,
    tag: i32,
    /// `None` for MPI_PROC_NULL.
    dest: Option<usize>,
}

/// The communicator, count and element type of a send or receive of `count` elements of
/// `datatype` at `buf`, checked.
fn message_args(
    s: &mut State,
    buf: *const c_void,
    count: Count,
    datatype: Handle,
    comm: Handle,
) -> Res<(ferry_core::Comm, usize, crate::datatype::Datatype)> {
    let core = s.core_comm(comm)?;
    let count = count_arg(count)?;
    let dt = message_type(s, datatype, count)?;
    crate::check::buffer(buf, count, &dt)?;
    Ok((core, count, dt))
}

pub(crate) fn send_args(
    s: &mut State,
    buf: *const c_void,
    count: Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> Res<SendArgs> {
    let (core, count, dt) = message_args(s, buf, count, datatype, comm)?;
    let tag = send_tag(tag)?;
    let dest = dest_arg(&core, dest)?;
    Ok(SendArgs {
        core,
        count,
        dt,
        tag,
        dest,
    })
}

/// Starts a send; the returned request is not yet in the table.
pub(crate) fn start_send(
    s: &mut State,
    buf: *const c_void,
    count: Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    kind: SendKind,
) -> Res<Request> {
    let SendArgs {
        core,
        count,
        dt,
        tag,
        dest,
    } = send_args(s, buf, count, datatype, dest, tag, comm)?;
    let Some(dest) = dest else {
        return Ok(Request::done(comm, core, Outcome::PROC_NULL));
    };
    let typed = Typed {
        dt,
        count,
        base: buf as *mut u8,
    };
    let mode = if kind == SendKind::Synchronous {
        SendMode::Synchronous
    } else {
        SendMode::Standard
    };
    if kind == SendKind::Buffered {
        let (owner, need) = crate::bsend::reserve(s, comm, typed.bytes())?;
        let staged = typed.pack();
        // SAFETY: `staged` moves into the finish closure, which runs after the send is done.
        let raw = unsafe { core.raw_send(staged.as_ptr(), staged.len(), dest, tag, mode)? };
        let pending = Request::running(
            comm,
            core.clone(),
            raw,
            Some(Box::new(move |_| drop(staged))),
        );
        s.bsends.push((pending, need, owner));
        return Ok(Request::done(comm, core, Outcome::EMPTY));
    }
    match typed.direct() {
        Some(ptr) => {
            // SAFETY: MPI's contract keeps the buffer valid until the request completes.
            if mode == SendMode::Standard
                && unsafe { core.raw_send_now(ptr, typed.bytes(), dest, tag)? }
            {
                // Already in the peer's queue: a send's status carries only its length.
                let sent = Outcome::sent(typed.bytes() as i64);
                return Ok(Request::done(comm, core, sent));
            }
            // SAFETY: MPI's contract keeps the buffer valid until the request completes.
            let raw = unsafe { core.raw_send(ptr, typed.bytes(), dest, tag, mode)? };
            Ok(Request::running(comm, core, raw, None))
        }
        None => {
            let staged = typed.pack();
            // SAFETY: `staged` lives in the finish closure until the send is done.
            let raw = unsafe { core.raw_send(staged.as_ptr(), staged.len(), dest, tag, mode)? };
            Ok(Request::running(
                comm,
                core,
                raw,
                Some(Box::new(move |_| drop(staged))),
            ))
        }
    }
}

/// Posts a receive; the returned request is not yet in the table.
pub(crate) fn start_recv(
    s: &mut State,
    buf: *mut c_void,
    count: Count,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
) -> Res<Request> {
    let (core, count, dt) = message_args(s, buf, count, datatype, comm)?;
    let tag = recv_tag(tag)?;
    let Some(source) = source_arg(&core, source)? else {
        return Ok(Request::done(comm, core, Outcome::PROC_NULL));
    };
    let typed = Typed {
        dt,
        count,
        base: buf as *mut u8,
    };
    // SAFETY: MPI's contract keeps the buffer valid until the request completes.
    receive_into(comm, core, typed, |core, ptr, len| unsafe {
        core.raw_recv(ptr, len, source, tag)
    })
}

/// Receives into `typed`: straight into the user's buffer when the datatype is contiguous,
/// else into staging that the finish closure unpacks. `post` hands the runtime a buffer that
/// stays valid until the request is done.
fn receive_into(
    comm: Handle,
    core: ferry_core::Comm,
    typed: Typed,
    post: impl FnOnce(&ferry_core::Comm, *mut u8, usize) -> Result<RawRequest, ferry_core::Error>,
) -> Res<Request> {
    match typed.direct() {
        Some(ptr) => {
            let raw = post(&core, ptr, typed.bytes())?;
            Ok(Request::running(comm, core, raw, None))
        }
        None => {
            let mut staged = vec![0u8; typed.bytes()];
            // `staged` lives in the finish closure until the receive is done.
            let raw = post(&core, staged.as_mut_ptr(), staged.len())?;
            let finish = move |st: &ferry_core::raw::RawStatus| typed.unpack(&staged[..st.len]);
            Ok(Request::running(comm, core, raw, Some(Box::new(finish))))
        }
    }
}

/// Waits (outside any state borrow) for `req` and collects its outcome.
pub(crate) fn wait_request(req: &mut Request) -> Res<Outcome> {
    let raws = req.raws();
    if raws.iter().any(Option::is_some) {
        if req.core.fault_tolerant() {
            // Ends early for a receive from any source when a member failed (ULFM).
            let raws: Vec<_> = raws.iter().flatten().copied().collect();
            req.core.raw_wait_all(&raws)?;
        } else {
            req.core
                .wait_until(|done| raws.iter().flatten().all(|&raw| done(raw)))?;
        }
    }
    req.complete()
}

/// Stores `req` in the table and writes its handle.
pub(crate) unsafe fn publish(s: &mut State, req: Request, out: *mut Handle) -> Res {
    // SAFETY: the caller's contract: `out` is NULL or a writable handle.
    let out = unsafe { crate::check::out(out, "request argument") }?;
    *out = s.requests.insert(req);
    Ok(())
}

/// The lean path of the commonest calls: `count` elements of a predefined, unpadded type
/// between two valid ranks, which move as one block of bytes. It builds no `Request`, so a
/// small message costs little more than the runtime's own work. Its callers try it first and
/// take the general path when it returns `None`: for anything else, and for every argument
/// error, which the general path reports as it always has. (The lean collectives,
/// `coll::lean`, start from it too.)
pub(crate) struct Dense {
    /// The predefined type.
    pub(crate) ty: crate::datatype::Builtin,
    pub(crate) bytes: usize,
}

impl Dense {
    #[inline]
    pub(crate) fn of(buf: *const c_void, count: Count, datatype: Handle) -> Option<Dense> {
        let (ty, size) = crate::datatype::dense_builtin(datatype)?;
        let bytes = usize::try_from(count).ok()?.checked_mul(size)?;
        // More than the address space holds is the general path's MPI_ERR_COUNT.
        (bytes <= isize::MAX as usize && (bytes == 0 || crate::check::addressable(buf)))
            .then_some(Dense { ty, bytes })
    }

    /// Sends if the runtime takes the message at once (shared memory, nothing queued before
    /// it); `Some(())` means it is on its way and the send is complete.
    unsafe fn send_now(
        &self,
        buf: *const c_void,
        dest: c_int,
        tag: c_int,
        comm: Handle,
    ) -> Option<()> {
        let tag = send_tag(tag).ok()?;
        let sent = running(|s| {
            let core = &s.comm(comm)?.comm;
            let Some(dest) = dest_arg(core, dest)? else {
                return Ok(false);
            };
            // SAFETY: the caller's buffer holds `bytes` bytes for the duration of the call.
            Ok(unsafe { core.raw_send_now(buf.cast(), self.bytes, dest, tag) }?)
        });
        sent.ok()?.then_some(())
    }

    /// Posts a receive straight into the caller's buffer, inside the state borrow; `None` if
    /// the arguments need the general path (MPI_PROC_NULL, a bad rank or tag).
    pub(crate) unsafe fn post(
        &self,
        s: &mut State,
        buf: *mut c_void,
        source: c_int,
        tag: c_int,
        comm: Handle,
    ) -> Res<Option<Request>> {
        let core = &s.comm(comm)?.comm;
        let (Ok(Some(source)), Ok(tag)) = (source_arg(core, source), recv_tag(tag)) else {
            return Ok(None);
        };
        // SAFETY: MPI's contract keeps the buffer valid until the receive completes.
        let raw = unsafe { core.raw_recv(buf.cast(), self.bytes, source, tag) }?;
        Ok(Some(Request::running(comm, core.clone(), raw, None)))
    }

    /// [`Dense::post`] for MPI_Irecv, its handle written to `out` (non-null). On a
    /// communicator whose ranks are the world's the handle names the runtime's request itself
    /// ([`engine_handle`]): no `Request`, no table entry. Elsewhere the request goes straight
    /// into the table, without passing through the caller (a request is large, and each move
    /// of it costs). False if the arguments need the general path.
    pub(crate) unsafe fn post_into(
        &self,
        s: &mut State,
        buf: *mut c_void,
        (source, tag): (c_int, c_int),
        comm: Handle,
        out: *mut Handle,
    ) -> Res<bool> {
        // SAFETY: the caller's contract: `out` is non-null and a writable handle.
        let out = unsafe { &mut *out };
        let core = &s.comm(comm)?.comm;
        let (Ok(Some(source)), Ok(tag)) = (source_arg(core, source), recv_tag(tag)) else {
            return Ok(false);
        };
        // SAFETY: MPI's contract keeps the buffer valid until the receive completes.
        let raw = unsafe { core.raw_recv(buf.cast(), self.bytes, source, tag) }?;
        // A fault-tolerant wildcard receive keeps its communicator, whose acknowledgements
        // its waits look at.
        let wildcard = source == Source::Any && core.fault_tolerant();
        if core.ranks_are_world() && s.world.is_some() && !wildcard {
            *out = engine_handle(raw);
            return Ok(true);
        }
        let req = Request::running(comm, core.clone(), raw, None);
        *out = s.requests.insert(req);
        Ok(true)
    }
}

pub(crate) unsafe fn blocking_send(
    buf: *const c_void,
    count: Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    kind: SendKind,
) -> Res {
    let mut req = running(|s| start_send(s, buf, count, datatype, dest, tag, comm, kind))?;
    // A send ends with an error only in a fault-tolerant job (its peer failed, or its
    // communicator was revoked).
    wait_request(&mut req)?.check()
}

/// A standard send on the lean path that the runtime took at once: its byte count.
#[inline]
pub(crate) unsafe fn sent_at_once(
    buf: *const c_void,
    count: Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    kind: SendKind,
) -> Option<usize> {
    let d = Dense::of(buf, count, datatype).filter(|_| kind == SendKind::Standard)?;
    // SAFETY: the caller's buffer holds `count` elements of `datatype` (MPI's contract), the
    // `bytes` that `Dense::of` measured.
    unsafe { d.send_now(buf, dest, tag, comm) }.map(|()| d.bytes)
}

pub(crate) unsafe fn nonblocking_send(
    buf: *const c_void,
    count: Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
    kind: SendKind,
) -> Res {
    if !request.is_null() {
        // SAFETY: the caller's buffer holds `count` elements of `datatype` (MPI's contract).
        let at_once = unsafe { sent_at_once(buf, count, datatype, dest, tag, comm, kind) };
        if let Some(bytes) = at_once {
            if let Some(h) = crate::request::sent_handle(bytes) {
                // SAFETY: `request` is not NULL (checked) and is writable (MPI's contract).
                unsafe { *request = h };
                return Ok(());
            }
            // Every serial in use: the finished send gets a table entry.
            return running(|s| {
                let req = Request::done(comm, s.core_comm(comm)?, Outcome::sent(bytes as i64));
                // SAFETY: `request` is NULL or writable (MPI's contract).
                unsafe { publish(s, req, request) }
            });
        }
    }
    running(|s| {
        let req = start_send(s, buf, count, datatype, dest, tag, comm, kind)?;
        let sent = req.sent_at_start().and_then(crate::request::sent_handle);
        // SAFETY: `request` is NULL or writable (MPI's contract).
        match (sent, unsafe { request.as_mut() }) {
            (Some(h), Some(out)) => {
                *out = h;
                Ok(())
            }
            // SAFETY: as above.
            _ => unsafe { publish(s, req, request) },
        }
    })
}

/// A receive carrying its send as partner: MPI_Sendrecv and MPI_Isendrecv.
pub(crate) fn start_sendrecv(
    s: &mut State,
    send: (*const c_void, Count, Handle, c_int, c_int),
    recv: (*mut c_void, Count, Handle, c_int, c_int),
    comm: Handle,
) -> Res<Request> {
    let (sendbuf, sendcount, sendtype, dest, sendtag) = send;
    let (recvbuf, recvcount, recvtype, source, recvtag) = recv;
    // The send's arguments before the receive is posted: a receive left posted by a call that
    // failed would take a later call's message.
    send_args(s, sendbuf, sendcount, sendtype, dest, sendtag, comm)?;
    let mut req = start_recv(s, recvbuf, recvcount, recvtype, source, recvtag, comm)?;
    let send = start_send(
        s,
        sendbuf,
        sendcount,
        sendtype,
        dest,
        sendtag,
        comm,
        SendKind::Standard,
    )?;
    req.partner = Some(Box::new(send));
    Ok(req)
}

/// MPI_Sendrecv: on dense buffers the receive is posted as MPI_Recv's and the send goes as
/// MPI_Send's, straight into the peer's ring when it can (no partner request); anything else
/// takes [`start_sendrecv`]. The send's arguments are checked before the receive is posted, as
/// there.
pub(crate) unsafe fn sendrecv(
    send: (*const c_void, Count, Handle, c_int, c_int),
    recv: (*mut c_void, Count, Handle, c_int, c_int),
    comm: Handle,
    status: *mut MpiStatus,
) -> Res {
    let (sendbuf, sendcount, sendtype, dest, sendtag) = send;
    let (recvbuf, recvcount, recvtype, source, recvtag) = recv;
    let lean = Dense::of(recvbuf, recvcount, recvtype).and_then(|d| {
        running(|s| {
            send_args(s, sendbuf, sendcount, sendtype, dest, sendtag, comm)?;
            // SAFETY: the caller's contract, MPI's for MPI_Sendrecv: `recvbuf` holds
            // `recvcount` elements of `recvtype` for the call.
            unsafe { d.post(s, recvbuf, source, recvtag, comm) }
        })
        .ok()
        .flatten()
    });
    let Some(mut req) = lean else {
        // SAFETY: as MPI_Sendrecv's caller promises; `status` is NULL or writable.
        return unsafe { finish_recv(running(|s| start_sendrecv(s, send, recv, comm))?, status) };
    };
    // SAFETY: `sendbuf` holds `sendcount` elements of `sendtype` (MPI's contract).
    let at_once = unsafe {
        sent_at_once(
            sendbuf,
            sendcount,
            sendtype,
            dest,
            sendtag,
            comm,
            SendKind::Standard,
        )
    };
    if at_once.is_none() {
        let send = running(|s| {
            start_send(
                s,
                sendbuf,
                sendcount,
                sendtype,
                dest,
                sendtag,
                comm,
                SendKind::Standard,
            )
        })?;
        req.partner = Some(Box::new(send));
    }
    // SAFETY: the caller's contract: `status` is NULL or a writable MPI_Status.
    unsafe { finish_recv(req, status) }
}

/// MPI_Sendrecv_replace and its nonblocking form: the outgoing data is packed first, so the
/// receive may land in `buf` at once.
pub(crate) fn start_sendrecv_replace(
    s: &mut State,
    buf: *mut c_void,
    count: Count,
    datatype: Handle,
    (dest, sendtag): (c_int, c_int),
    (source, recvtag): (c_int, c_int),
    comm: Handle,
) -> Res<Request> {
    let dt = s.committed_type(datatype)?;
    let typed = Typed {
        dt,
        count: count_arg(count)?,
        base: buf as *mut u8,
    };
    // The receive's arguments before anything is sent or read.
    crate::check::buffer(buf, typed.count, &typed.dt)?;
    recv_tag(recvtag)?;
    source_arg(&s.core_comm(comm)?, source)?;
    let staged = typed.pack();
    let byte = crate::datatype::Builtin::Byte.handle();
    let mut send = start_send(
        s,
        staged.as_ptr() as *const c_void,
        staged.len() as Count,
        byte,
        dest,
        sendtag,
        comm,
        SendKind::Standard,
    )?;
    if let Progress::Running { finish, .. } = &mut send.progress {
        *finish = Some(Box::new(move |_| drop(staged)));
    }
    let mut req = start_recv(s, buf, count, datatype, source, recvtag, comm)?;
    req.partner = Some(Box::new(send));
    Ok(req)
}

/// Waits for a receive (and its partner) and reports it.
pub(crate) unsafe fn finish_recv(mut req: Request, status: *mut MpiStatus) -> Res {
    let outcome = match wait_request(&mut req) {
        // A blocking receive from any source cannot stay pending: it is withdrawn, and fails
        // as ULFM says (MPIX_ERR_PROC_FAILED).
        Err(e) if e.class == MPIX_ERR_PROC_FAILED_PENDING => {
            req.cancel_now();
            return fail(MPIX_ERR_PROC_FAILED, e.into_message());
        }
        other => other?,
    };
    // SAFETY: the caller's contract: `status` is NULL or a writable MPI_Status.
    unsafe { outcome.write(status, false) };
    outcome.check()
}

/// A datatype handle the persistent request owns: the user may free theirs right after the
/// `*_init` call (MPI 4.1 §2.5.1), so a created type is held under a private handle.
pub(crate) fn keep_type(s: &mut State, datatype: Handle) -> Res<Handle> {
    let dt = s.committed_type(datatype)?;
    if s.types.get(datatype).is_none() {
        return Ok(datatype);
    }
    let name = String::new();
    Ok(s.types.insert(crate::state::TypeObj {
        dt,
        committed: true,
        name,
    }))
}

pub(crate) unsafe fn persistent(comm: Handle, request: *mut Handle, mut p: Persistent) -> Res {
    running(|s| {
        match &mut p {
            Persistent::Send { datatype, .. } | Persistent::Recv { datatype, .. } => {
                *datatype = keep_type(s, *datatype)?;
            }
            Persistent::Partitioned(_) => {}
            Persistent::Coll { .. } => {}
        }
        let core = s.core_comm(comm)?;
        let req = Request {
            comm,
            core,
            progress: Progress::Inactive,
            persistent: Some(Box::new(p)),
            cancel_requested: false,
            partner: None,
            generalized: None,
        };
        // SAFETY: the caller's contract: `request` is NULL or a writable handle.
        unsafe { publish(s, req, request) }
    })
}

/// Starts the persistent request behind `handle`.
pub(crate) fn start_handle(handle: Handle) -> Res {
    let coll = running(|s| start_one(s, handle))?;
    let Some(start) = coll else {
        return Ok(());
    };
    // Outside the state: the nonblocking collective enters it itself.
    let mut started = MPI_REQUEST_NULL;
    start(crate::coll::RequestOut::to(&mut started))?;
    with(|s| {
        let Some(new) = s.requests.remove(started) else {
            return fail(MPI_ERR_INTERN, "persistent collective started no request");
        };
        let req = s.requests.get_mut(handle).ok_or_else(|| {
            MpiError::new(MPI_ERR_REQUEST, format!("invalid request {handle:#x}"))
        })?;
        req.core = new.core;
        req.progress = new.progress;
        req.partner = new.partner;
        req.cancel_requested = false;
        Ok(())
    })
}

/// Starts a persistent point-to-point request, or hands back the start of a collective one
/// (which must run outside the state).
#[allow(clippy::type_complexity)]
fn start_one(
    s: &mut State,
    handle: Handle,
) -> Res<Option<std::rc::Rc<dyn Fn(crate::coll::RequestOut<'_>) -> Res>>> {
    let req = s
        .requests
        .get(handle)
        .ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, format!("invalid request {handle:#x}")))?;
    let Some(p) = req.persistent.as_deref().cloned() else {
        return fail(
            MPI_ERR_REQUEST,
            "MPI_Start of a request that is not persistent",
        );
    };
    if !req.is_inactive() {
        return fail(
            MPI_ERR_REQUEST,
            "MPI_Start of a persistent request that is still active",
        );
    }
    let comm = req.comm;
    let started = match p {
        Persistent::Send {
            kind,
            buf,
            count,
            datatype,
            dest,
            tag,
        } => start_send(
            s,
            buf as *const c_void,
            count,
            datatype,
            dest,
            tag,
            comm,
            kind,
        )?,
        Persistent::Recv {
            buf,
            count,
            datatype,
            source,
            tag,
        } => start_recv(s, buf as *mut c_void, count, datatype, source, tag, comm)?,
        Persistent::Partitioned(p) => {
            let progress = p.start(s)?;
            if let Some(req) = s.requests.get_mut(handle) {
                req.progress = progress;
                req.cancel_requested = false;
            }
            return Ok(None);
        }
        Persistent::Coll { start, .. } => return Ok(Some(start)),
    };
    if let Some(req) = s.requests.get_mut(handle) {
        req.progress = started.progress;
        req.cancel_requested = false;
    }
    Ok(None)
}

/// The request handles of an array argument.
pub(crate) unsafe fn handles_arg<'a>(count: c_int, requests: *mut Handle) -> Res<&'a mut [Handle]> {
    let n = count_arg(count)?;
    if n == 0 {
        return Ok(&mut []);
    }
    if requests.is_null() {
        return fail(MPI_ERR_REQUEST, "array of requests is NULL");
    }
    // SAFETY: `requests` is not NULL (checked) and, by the caller's contract, holds `count`
    // handles that nothing else uses for `'a`.
    Ok(unsafe { std::slice::from_raw_parts_mut(requests, n) })
}

/// Completes the request behind `*handle` if it is done: writes the status, resets the
/// handle (unless persistent) and returns the outcome.
pub(crate) unsafe fn finish_handle(
    handle: &mut Handle,
    status: *mut MpiStatus,
    with_error: bool,
) -> Res<Outcome> {
    if sent_bytes(*handle).is_some() {
        let bytes = crate::request::retire_sent(*handle)?;
        let outcome = Outcome::sent(bytes as i64);
        *handle = MPI_REQUEST_NULL;
        // SAFETY: the caller's contract: `status` is NULL or a writable MPI_Status.
        unsafe { outcome.write(status, with_error) };
        return Ok(outcome);
    }
    if let Some(raw) = engine_request(*handle) {
        let outcome = with(|s| take_engine_request(s, *handle, raw))?;
        *handle = MPI_REQUEST_NULL;
        // SAFETY: as above.
        unsafe { outcome.write(status, with_error) };
        return Ok(outcome);
    }
    let (outcome, greq) = with(|s| finish_in_state(s, handle))?;
    if let Some(g) = greq {
        // Outside the state: the callbacks may call MPI (MPI_Status_set_elements, ...).
        // SAFETY: as above; the callbacks are the user's, as MPI_Grequest_start got them.
        return Ok(unsafe { crate::greq::finish(&g, status, with_error, true) });
    }
    // SAFETY: as above.
    unsafe { outcome.write(status, with_error) };
    Ok(outcome)
}

/// The world's communicator, through which an [`engine_handle`]'s request is reached (every
/// communicator of the process drives the same engine); MPI_ERR_REQUEST if `raw` names no live
/// request (a copy of a handle completed or freed before).
pub(crate) fn world_of_engine_handle(
    s: &State,
    handle: Handle,
    raw: RawRequest,
) -> Res<&ferry_core::Comm> {
    match s.world.as_deref() {
        Some(world) if world.raw_is_live(raw) && !freed_in_flight(s, raw) => Ok(world),
        _ => stale_engine_handle(handle),
    }
}

/// Whether `raw` is a receive freed by MPI_Request_free while in flight: its request lives on
/// (with the buffered sends, until it finishes), but no handle names it any more.
#[inline]
fn freed_in_flight(s: &State, raw: RawRequest) -> bool {
    !s.bsends.is_empty() && s.bsends.iter().any(|(r, _, _)| r.raw() == Some(raw))
}

#[cold]
fn stale_engine_handle<T>(handle: Handle) -> Res<T> {
    fail(
        MPI_ERR_REQUEST,
        format!("invalid request {handle:#x}: it was completed or freed before"),
    )
}

/// Takes the outcome of the finished request an [`engine_handle`] names.
// Always inline: MPI_Waitall of a window of receives calls it once per request, and the call
// with its returned `Res<Outcome>` costs as much as the body.
#[inline(always)]
fn take_engine_request(s: &State, handle: Handle, raw: RawRequest) -> Res<Outcome> {
    if freed_in_flight(s, raw) {
        return stale_engine_handle(handle);
    }
    let taken = s
        .world
        .as_deref()
        .and_then(|world| world.raw_take_world(raw));
    match taken {
        Some(st) => Ok(Outcome::of(&st)),
        None => stale_engine_handle(handle),
    }
}

/// MPI_Request_free of an [`engine_handle`]: a finished request is taken now, one in flight
/// is kept with the buffered sends and reaped when it finishes.
pub(crate) fn free_engine_request(s: &mut State, handle: Handle, raw: RawRequest) -> Res {
    let world = world_of_engine_handle(s, handle, raw)?.clone();
    if world.raw_take_world(raw).is_none() {
        let pending = Request::running(MPI_COMM_WORLD, world, raw, None);
        s.bsends
            .push((pending, 0, crate::bsend::BufferOwner::Process));
    }
    Ok(())
}

/// Completes the finished request behind `handle` (not a sent handle) inside the state:
/// its outcome, and its callbacks if it is a generalized request (to be run outside).
fn finish_in_state(s: &mut State, handle: &mut Handle) -> Res<(Outcome, Option<Greq>)> {
    let req = s
        .requests
        .get_mut(*handle)
        .ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, format!("invalid request {:#x}", *handle)))?;
    let outcome = req.complete()?;
    let greq = req.generalized.as_deref().copied();
    if req.persistent.is_none() {
        s.requests.discard(*handle);
        *handle = MPI_REQUEST_NULL;
    }
    Ok((outcome, greq))
}

/// What waiting needs to know about one entry of a request array.
#[derive(Clone, Copy)]
pub(crate) enum Entry {
    /// MPI_REQUEST_NULL or an inactive persistent request.
    Null,
    /// Done or in flight: the runtime requests it waits for (none when done at start).
    Active([Option<RawRequest>; 2]),
    /// A partitioned send waiting for MPI_Pready: no progress of ours can finish it.
    AwaitingReady,
}

impl Entry {
    /// Whether the entry has something in flight.
    pub(crate) fn in_flight(&self) -> bool {
        match self {
            Entry::Active(r) => r.iter().any(Option::is_some),
            Entry::AwaitingReady => true,
            Entry::Null => false,
        }
    }
}

/// A wait that only partitioned sends short of MPI_Pready could end would never return.
fn wait_possible(list: &[Entry], all: bool) -> Res {
    let stuck = |e: &Entry| matches!(e, Entry::AwaitingReady);
    let hopeless = if all {
        list.iter().any(stuck)
    } else {
        list.iter().any(stuck) && list.iter().all(|e| stuck(e) || matches!(e, Entry::Null))
    };
    if hopeless {
        return fail(
            MPI_ERR_REQUEST,
            "waiting for a partitioned send before MPI_Pready of all its partitions: it can never complete",
        );
    }
    Ok(())
}

/// [`entries`] for a wait on `handles` (`all` of them, or any), checked by [`wait_possible`].
/// At MPI_THREAD_MULTIPLE a partitioned send still short of MPI_Pready calls is no error:
/// another thread may make them, so this lets the other threads in until none is short.
pub(crate) fn entries_to_wait(
    handles: &[Handle],
    all: bool,
) -> Res<(Vec<Entry>, Option<ferry_core::Comm>)> {
    loop {
        let (list, engine) = entries(handles)?;
        let possible = wait_possible(&list, all);
        if possible.is_ok() || !crate::threads::is_multiple() {
            return possible.map(|()| (list, engine));
        }
        if let Some(engine) = &engine {
            engine.progress()?;
        }
        if !crate::threads::pause() {
            std::thread::yield_now();
        }
    }
}

pub(crate) fn entries(handles: &[Handle]) -> Res<(Vec<Entry>, Option<ferry_core::Comm>)> {
    with(|s| {
        let mut engine = None;
        let mut list = Vec::with_capacity(handles.len());
        for &h in handles {
            let entry = if h == MPI_REQUEST_NULL {
                Entry::Null
            } else if sent_bytes(h).is_some() {
                Entry::Active([None, None])
            } else if let Some(raw) = engine_request(h) {
                // Not looked up: a stale handle counts as done, and its completion reports it.
                if freed_in_flight(s, raw) {
                    return stale_engine_handle(h);
                }
                Entry::Active([Some(raw), None])
            } else {
                let req = s.requests.get(h).ok_or_else(|| {
                    MpiError::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}"))
                })?;
                match req.progress {
                    Progress::Inactive => Entry::Null,
                    Progress::AwaitingReady => Entry::AwaitingReady,
                    _ => {
                        if engine.is_none() {
                            engine = Some(req.core.clone());
                        }
                        Entry::Active(req.raws())
                    }
                }
            };
            list.push(entry);
        }
        // Sends done at start (`sent_handle`) name no communicator; the world's runtime side
        // drives the same engine.
        if engine.is_none() && list.iter().any(|e| matches!(e, Entry::Active(_))) {
            engine = s.world.as_ref().map(|w| ferry_core::Comm::clone(w));
        }
        Ok((list, engine))
    })
}

pub(crate) fn done_in(entry: Entry, done: &dyn Fn(RawRequest) -> bool) -> bool {
    match entry {
        Entry::Null | Entry::AwaitingReady => false,
        Entry::Active(raws) => raws.iter().flatten().all(|&raw| done(raw)),
    }
}

pub(crate) fn status_at(statuses: *mut MpiStatus, i: usize) -> *mut MpiStatus {
    if statuses.is_null() {
        statuses
    } else {
        statuses.wrapping_add(i)
    }
}

/// Completes every finished entry among `handles` with statuses; returns how many errors.
/// One entry into the state serves them all (a window of small messages finishes 64 at
/// once); generalized requests run their callbacks afterwards, outside it.
pub(crate) unsafe fn finish_all(
    handles: &mut [Handle],
    list: &[Entry],
    statuses: *mut MpiStatus,
) -> Res<usize> {
    let mut errors = 0;
    let mut greqs: Vec<(usize, Greq)> = Vec::new();
    let finished = with(|s| {
        for (i, h) in handles.iter_mut().enumerate() {
            let status = status_at(statuses, i);
            let outcome = match list[i] {
                Entry::Null | Entry::AwaitingReady => {
                    // SAFETY: the caller's contract: `statuses` is NULL or holds one writable
                    // MPI_Status per handle.
                    unsafe { Outcome::EMPTY.write(status, true) };
                    continue;
                }
                Entry::Active(_) if sent_bytes(*h).is_some() => {
                    let bytes = crate::request::retire_sent(*h)?;
                    *h = MPI_REQUEST_NULL;
                    Outcome::sent(bytes as i64)
                }
                Entry::Active([Some(raw), None]) if engine_request(*h).is_some() => {
                    let outcome = take_engine_request(s, *h, raw)?;
                    *h = MPI_REQUEST_NULL;
                    outcome
                }
                Entry::Active(_) => match finish_in_state(s, h)? {
                    (_, Some(g)) => {
                        greqs.push((i, g));
                        continue;
                    }
                    (outcome, None) => outcome,
                },
            };
            // SAFETY: as above.
            unsafe { outcome.write(status, true) };
            errors += (outcome.error != MPI_SUCCESS) as usize;
        }
        Ok(())
    });
    // Outside the state: the callbacks may call MPI (MPI_Status_set_elements, ...).
    for (i, g) in greqs {
        // SAFETY: as above; the callbacks are the user's, as MPI_Grequest_start got them.
        let o = unsafe { crate::greq::finish(&g, status_at(statuses, i), true, true) };
        errors += (o.error != MPI_SUCCESS) as usize;
    }
    finished.map(|()| errors)
}

/// Index of the first finished active entry, if any.
pub(crate) fn first_done(list: &[Entry], engine: &ferry_core::Comm) -> Option<usize> {
    list.iter()
        .position(|&e| done_in(e, &|r| engine.raw_done(r)))
}

pub(crate) unsafe fn some(
    handles: &mut [Handle],
    list: &[Entry],
    engine: &ferry_core::Comm,
    outcount: &mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> Res {
    let mut n = 0usize;
    let mut errors = 0;
    for (i, h) in handles.iter_mut().enumerate() {
        if done_in(list[i], &|r| engine.raw_done(r)) {
            // SAFETY: the caller's contract: `statuses` is NULL or holds one writable MPI_Status
            // per handle, and `n` counts handles.
            let o = unsafe { finish_handle(h, status_at(statuses, n), true) }?;
            errors += (o.error != MPI_SUCCESS) as usize;
            if !indices.is_null() {
                // SAFETY: the caller's contract: `indices`, not NULL, holds one index per handle.
                unsafe { *indices.add(n) = i as c_int };
            }
            n += 1;
        }
    }
    *outcount = n as c_int;
    if errors > 0 {
        return fail(MPI_ERR_IN_STATUS, "a request failed; see the statuses");
    }
    Ok(())
}

/// MPI_Request_get_status of one request (also for MPI_Request_get_status_any/_all/_some).
pub(crate) unsafe fn request_status(
    request: Handle,
    flag: &mut c_int,
    status: *mut MpiStatus,
) -> Res {
    if request == MPI_REQUEST_NULL {
        *flag = 1;
        // SAFETY: the caller's contract: `status` is NULL or a writable MPI_Status.
        unsafe { Outcome::EMPTY.write(status, false) };
        return Ok(());
    }
    if let Some(bytes) = sent_bytes(request) {
        *flag = 1;
        // SAFETY: as above.
        unsafe { Outcome::sent(bytes as i64).write(status, false) };
        return Ok(());
    }
    if let Some(raw) = engine_request(request) {
        let world = with(|s| world_of_engine_handle(s, request, raw).cloned())?;
        if !world.raw_done(raw) {
            world.progress()?;
        }
        // Left in place: the wait or test that frees the handle reports it again.
        match world.raw_peek_world(raw) {
            Some(st) => {
                *flag = 1;
                // SAFETY: as above.
                unsafe { Outcome::of(&st).write(status, false) };
            }
            None => *flag = 0,
        }
        return Ok(());
    }
    let (list, engine) = entries(&[request])?;
    let done = match (list[0], engine) {
        (entry @ Entry::Active(_), Some(engine)) if entry.in_flight() => {
            engine.progress()?;
            done_in(entry, &|r| engine.raw_done(r))
        }
        (Entry::AwaitingReady, _) => false,
        _ => true,
    };
    *flag = done as c_int;
    let greq = with(|s| {
        Ok(s.requests
            .get(request)
            .and_then(|r| r.generalized.as_deref().copied()))
    })?;
    if let (true, Some(g)) = (done, greq) {
        // SAFETY: as above; the callbacks are the user's, as MPI_Grequest_start got them.
        unsafe { crate::greq::finish(&g, status, false, false) };
        return Ok(());
    }
    if done {
        // Complete it inside but keep the handle: the later wait or test that frees it
        // reports the same outcome (a `Done` request completes to its outcome).
        let outcome = with(|s| {
            let req = s.requests.get_mut(request).ok_or_else(|| {
                MpiError::new(MPI_ERR_REQUEST, format!("invalid request {request:#x}"))
            })?;
            Ok(match req.progress {
                Progress::Running { .. } => {
                    let o = req.complete()?;
                    req.progress = Progress::Done(o);
                    o
                }
                Progress::Done(o) => o,
                Progress::Inactive | Progress::AwaitingReady => Outcome::EMPTY,
            })
        })?;
        // SAFETY: as above.
        unsafe { outcome.write(status, false) };
    }
    Ok(())
}

pub(crate) fn probe_outcome(st: ferry_core::Status) -> Outcome {
    Outcome {
        source: st.source as c_int,
        tag: st.tag,
        bytes: st.len as i64,
        cancelled: false,
        error: MPI_SUCCESS,
    }
}

pub(crate) unsafe fn elements(status: *const MpiStatus, datatype: Handle) -> Res<i64> {
    // SAFETY: the caller's contract: `status` is NULL or a readable MPI_Status.
    let Some(st) = (unsafe { status.as_ref() }) else {
        return fail(MPI_ERR_ARG, "status is NULL");
    };
    let dt = with(|s| s.datatype(datatype))?;
    Ok(dt.elements_of(st.count() as usize) as i64)
}

pub(crate) unsafe fn set_elements(status: *mut MpiStatus, datatype: Handle, count: i64) -> Res {
    // SAFETY: the caller's contract: `status` is NULL or a writable MPI_Status.
    let st = unsafe { crate::check::out(status, "status") }?;
    let dt = with(|s| s.datatype(datatype))?;
    let elements = count_arg(count)?;
    let bytes = elements
        .checked_mul(dt.size())
        .and_then(|b| i64::try_from(b).ok())
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_VALUE_TOO_LARGE,
                format!(
                    "{elements} elements of {} bytes do not fit a status's MPI_Count",
                    dt.size()
                ),
            )
        })?;
    st.set_count(bytes);
    Ok(())
}

// ---- matched probe ----

pub(crate) unsafe fn mprobe(
    source: c_int,
    tag: c_int,
    comm: Handle,
    block: bool,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> Res<bool> {
    // SAFETY: the caller's contract: `message` is NULL or a writable handle.
    let out = unsafe { crate::check::out(message, "message") }?;
    let core = running(|s| s.core_comm(comm))?;
    let tag = recv_tag(tag)?;
    let Some(source) = source_arg(&core, source)? else {
        *out = MPI_MESSAGE_NO_PROC;
        // SAFETY: the caller's contract: `status` is NULL or a writable MPI_Status.
        unsafe { Outcome::PROC_NULL.write(status, false) };
        return Ok(true);
    };
    let Some(msg) = core.raw_mprobe(source, tag, block)? else {
        return Ok(false);
    };
    let st = msg.status();
    let outcome = Outcome {
        source: st.source as c_int,
        tag: st.tag,
        bytes: st.len as i64,
        cancelled: false,
        error: MPI_SUCCESS,
    };
    // SAFETY: as above.
    unsafe { outcome.write(status, false) };
    *out = running(|s| Ok(s.messages.insert((comm, core, msg))))?;
    Ok(true)
}

/// The receive of a message taken by a matched probe.
pub(crate) enum Matched {
    /// Finished at once: its bytes were already here, or it came from MPI_PROC_NULL.
    Received {
        comm: Handle,
        core: ferry_core::Comm,
        outcome: Outcome,
    },
    /// Started: its bytes are still to come (a rendezvous) or to be unpacked.
    Started(Request),
}

impl Matched {
    pub(crate) fn into_request(self) -> Request {
        match self {
            Matched::Received {
                comm,
                core,
                outcome,
            } => Request::done(comm, core, outcome),
            Matched::Started(req) => req,
        }
    }
}

/// Receives a message taken by a matched probe, at once if its bytes are here and land in
/// place; resets the message handle.
pub(crate) unsafe fn start_mrecv(
    buf: *mut c_void,
    count: Count,
    datatype: Handle,
    message: *mut Handle,
) -> Res<Matched> {
    // SAFETY: the caller's contract: `message` is NULL or a writable handle.
    let h = unsafe { crate::check::out(message, "message") }?;
    running(|s| {
        let dt = s.committed_type(datatype)?;
        let count = count_arg(count)?;
        if *h == MPI_MESSAGE_NO_PROC {
            *h = MPI_MESSAGE_NULL;
            return Ok(Matched::Received {
                comm: MPI_COMM_WORLD,
                core: s.engine()?,
                outcome: Outcome::PROC_NULL,
            });
        }
        let (comm, core, msg) = s
            .messages
            .remove(*h)
            .ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, format!("invalid message {:#x}", *h)))?;
        *h = MPI_MESSAGE_NULL;
        let typed = Typed {
            dt,
            count,
            base: buf as *mut u8,
        };
        let msg = match typed.direct() {
            // SAFETY: the caller's buffer holds the type's extent for `count` elements.
            Some(ptr) => match unsafe { core.raw_mrecv_now(msg, ptr, typed.bytes()) } {
                Ok(st) => {
                    let outcome = Outcome::of(&st);
                    return Ok(Matched::Received {
                        comm,
                        core,
                        outcome,
                    });
                }
                Err(msg) => msg,
            },
            None => msg,
        };
        // SAFETY: MPI's contract keeps the buffer valid until the request completes.
        receive_into(comm, core, typed, |core, ptr, len| unsafe {
            core.raw_mrecv(msg, ptr, len)
        })
        .map(Matched::Started)
    })
}

/// MPI_Mrecv and MPI_Mrecv_c: a message whose bytes are here needs no request at all.
pub(crate) unsafe fn mrecv(
    buf: *mut c_void,
    count: Count,
    datatype: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> Res {
    // SAFETY: the caller's contract, MPI's for MPI_Mrecv: `buf` holds `count` elements of
    // `datatype` until the receive completes, `message` is NULL or a writable handle.
    let outcome = match unsafe { start_mrecv(buf, count, datatype, message) }? {
        Matched::Received { outcome, .. } => outcome,
        Matched::Started(mut req) => wait_request(&mut req)?,
    };
    // SAFETY: the caller's contract: `status` is NULL or a writable MPI_Status.
    unsafe { outcome.write(status, false) };
    outcome.check()
}

/// Whole elements of `datatype` in what `status` reports (`None`: not a whole number). A
/// predefined type needs no look-up: mpi4py asks this after every matched probe.
pub(crate) fn count_of(status: &MpiStatus, datatype: Handle) -> Res<Option<usize>> {
    let bytes = status.count() as usize;
    match crate::datatype::builtin_from_handle(datatype).map(|t| t.size()) {
        Some(size) if size > 0 => Ok(bytes.is_multiple_of(size).then_some(bytes / size)),
        _ => Ok(with(|s| s.datatype(datatype))?.count_of(bytes)),
    }
}

/// MPI_Send and MPI_Send_c (which mpi4py calls for every send).
#[inline(always)]
pub(crate) unsafe fn standard_send(
    buf: *const c_void,
    count: Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> Res {
    // Here rather than in `blocking_send`: its frame, sized for the general path, costs.
    // SAFETY: the caller's contract, MPI's for MPI_Send: `buf` holds `count` elements of
    // `datatype` for the call.
    if unsafe { sent_at_once(buf, count, datatype, dest, tag, comm, SendKind::Standard) }.is_some()
    {
        return Ok(());
    }
    // SAFETY: as above.
    unsafe { blocking_send(buf, count, datatype, dest, tag, comm, SendKind::Standard) }
}

/// MPI_Recv and MPI_Recv_c.
#[inline(always)]
pub(crate) unsafe fn recv(
    buf: *mut c_void,
    count: Count,
    datatype: Handle,
    (source, tag): (c_int, c_int),
    comm: Handle,
    status: *mut MpiStatus,
) -> Res {
    let lean = Dense::of(buf, count, datatype).and_then(|d| {
        // SAFETY: the caller's contract, MPI's for MPI_Recv: `buf` holds `count` elements of
        // `datatype` for the call, the `bytes` that `Dense::of` measured.
        running(|s| unsafe { d.post(s, buf, source, tag, comm) })
            .ok()
            .flatten()
    });
    let req = match lean {
        Some(req) => req,
        None => running(|s| start_recv(s, buf, count, datatype, source, tag, comm))?,
    };
    // SAFETY: the caller's contract: `status` is NULL or a writable MPI_Status.
    unsafe { finish_recv(req, status) }
}

/// MPI_Irecv and MPI_Irecv_c.
#[inline(always)]
pub(crate) unsafe fn irecv(
    buf: *mut c_void,
    count: Count,
    datatype: Handle,
    (source, tag): (c_int, c_int),
    comm: Handle,
    request: *mut Handle,
) -> Res {
    running(|s| {
        let dense = Dense::of(buf, count, datatype).filter(|_| !request.is_null());
        if let Some(d) = dense {
            // SAFETY: the caller's contract, MPI's for MPI_Irecv: `buf` holds `count` elements
            // of `datatype` until the receive completes; `request` is not NULL (filtered) and
            // writable.
            if unsafe { d.post_into(s, buf, (source, tag), comm, request) }? {
                return Ok(());
            }
        }
        let req = start_recv(s, buf, count, datatype, source, tag, comm)?;
        // SAFETY: the caller's contract: `request` is NULL or a writable handle.
        unsafe { publish(s, req, request) }
    })
}

// ---- nonblocking send-receive ----
