//! Buffers of buffered sends (MPI 5.0 §3.6): the process's (`MPI_Buffer_attach`), a
//! communicator's (`MPI_Comm_attach_buffer`) and a session's (`MPI_Session_attach_buffer`), each
//! a user buffer or `MPI_BUFFER_AUTOMATIC`, and their flush and detach calls.
//!
//! A buffered send uses its communicator's buffer, else the buffer of the session the
//! communicator was made from (`MPI_Comm_create_from_group` on a group of
//! `MPI_Group_from_session_pset`), else the process's. ferry copies the message into memory of
//! its own (the send proceeds like any other), so the attached buffer is a budget: a send that
//! would overrun it fails with MPI_ERR_BUFFER, as MPI requires, and with MPI_BUFFER_AUTOMATIC
//! there is no limit. `MPI_*_iflush_buffer` waits for the sends as the blocking call does and
//! returns a completed request: the sends need no call of this process to finish.

use crate::abi::*;
use crate::error::{fail, MpiError, Res};
use crate::p2p::{count_arg, wait_request};
use crate::request::{Outcome, Request};
use crate::state::{running, State};
use crate::NONE;
use std::ffi::{c_int, c_void};

/// Whose buffer a buffered send draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BufferOwner {
    /// The process (`MPI_Buffer_attach`); also the owner of entries that reserve nothing.
    Process,
    /// A communicator (`MPI_Comm_attach_buffer`).
    Comm(Handle),
    /// A session (`MPI_Session_attach_buffer`).
    Session(Handle),
}

/// An attached buffer: the user's memory (address, bytes) or MPI_BUFFER_AUTOMATIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attached {
    /// `MPI_*_attach_buffer(buffer, size)`.
    User(*mut c_void, usize),
    /// `MPI_BUFFER_AUTOMATIC`: the library's memory, as much as the sends need.
    Automatic,
}

impl Attached {
    fn capacity(self) -> usize {
        match self {
            Attached::User(_, size) => size,
            Attached::Automatic => usize::MAX,
        }
    }
}

/// Which buffer a buffered send on `comm` uses, and its capacity.
fn buffer_for(s: &State, comm: Handle) -> Option<(BufferOwner, Attached)> {
    let owners = [
        Some(BufferOwner::Comm(comm)),
        s.comm_sessions.get(&comm).map(|&h| BufferOwner::Session(h)),
        Some(BufferOwner::Process),
    ];
    owners
        .into_iter()
        .flatten()
        .find_map(|o| s.bsend_buffers.get(&o).map(|&b| (o, b)))
}

/// Completes the buffered sends that have finished.
pub(crate) fn reap(s: &mut State) {
    let mut i = 0;
    while i < s.bsends.len() {
        if s.bsends[i].0.is_complete() {
            let (mut r, _, _) = s.bsends.swap_remove(i);
            let _ = r.complete();
        } else {
            i += 1;
        }
    }
}

/// Reserves room for a buffered send of `bytes` on `comm`: the buffer it draws on and the
/// bytes reserved (the message and MPI_BSEND_OVERHEAD), or MPI_ERR_BUFFER.
pub(crate) fn reserve(s: &mut State, comm: Handle, bytes: usize) -> Res<(BufferOwner, usize)> {
    reap(s);
    let Some((owner, buffer)) = buffer_for(s, comm) else {
        return fail(
            MPI_ERR_BUFFER,
            "MPI_Bsend without an attached buffer (MPI_Buffer_attach, MPI_Comm_attach_buffer)",
        );
    };
    let size = buffer.capacity();
    let used: usize = s
        .bsends
        .iter()
        .filter(|(_, _, o)| *o == owner)
        .map(|(_, b, _)| b)
        .sum();
    let need = bytes + MPI_BSEND_OVERHEAD;
    if used.saturating_add(need) > size {
        return fail(
            MPI_ERR_BUFFER,
            format!(
                "buffered send of {bytes} bytes (+{MPI_BSEND_OVERHEAD} overhead) does not fit: \
                 {} of the {size} attached bytes are free",
                size.saturating_sub(used)
            ),
        );
    }
    Ok((owner, need))
}

fn attach(owner: BufferOwner, buffer: *mut c_void, size: usize) -> Res {
    running(|s| {
        match owner {
            BufferOwner::Process => {}
            BufferOwner::Comm(c) => drop(s.comm(c)?),
            BufferOwner::Session(h) => session_arg(s, h)?,
        }
        if s.bsend_buffers.contains_key(&owner) {
            return fail(MPI_ERR_BUFFER, "a buffer is already attached");
        }
        let attached = if buffer as usize == MPI_BUFFER_AUTOMATIC {
            Attached::Automatic
        } else {
            crate::check::bytes(buffer, size)?;
            Attached::User(buffer, size)
        };
        s.bsend_buffers.insert(owner, attached);
        Ok(())
    })
}

fn session_arg(s: &State, session: Handle) -> Res {
    match s.sessions.get(session) {
        Some(_) => Ok(()),
        None => fail(MPI_ERR_SESSION, format!("invalid session {session:#x}")),
    }
}

/// Waits for every buffered send drawing on `owner`'s buffer.
fn flush(owner: BufferOwner) -> Res {
    let pending = running(|s| {
        let (mine, others) = std::mem::take(&mut s.bsends)
            .into_iter()
            .partition(|(_, _, o)| *o == owner);
        s.bsends = others;
        Ok(mine)
    })?;
    let mut first_error = None;
    for (mut r, _, _) in pending {
        if let Err(e) = wait_request(&mut r) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Flushes, detaches and hands back `owner`'s buffer: its address (MPI_BUFFER_AUTOMATIC for an
/// automatic one) into `*buffer_addr`, its size as the result.
unsafe fn detach(owner: BufferOwner, buffer_addr: *mut c_void) -> Res<usize> {
    flush(owner)?;
    let attached = running(|s| Ok(s.bsend_buffers.remove(&owner)))?;
    let (addr, len) = match attached {
        Some(Attached::User(addr, len)) => (addr, len),
        Some(Attached::Automatic) => (MPI_BUFFER_AUTOMATIC as *mut c_void, 0),
        None => return fail(MPI_ERR_BUFFER, "no buffer is attached"),
    };
    if let Some(out) = (buffer_addr as *mut *mut c_void).as_mut() {
        *out = addr;
    }
    Ok(len)
}

unsafe fn detach_int(owner: BufferOwner, buffer_addr: *mut c_void, size: *mut c_int) -> Res {
    let len = detach(owner, buffer_addr)?;
    if let Some(out) = size.as_mut() {
        *out = c_int::try_from(len).map_err(|_| {
            MpiError::new(
                MPI_ERR_ARG,
                "the buffer size does not fit an int (use the _c call)",
            )
        })?;
    }
    Ok(())
}

unsafe fn detach_count(owner: BufferOwner, buffer_addr: *mut c_void, size: *mut i64) -> Res {
    let len = detach(owner, buffer_addr)?;
    if let Some(out) = size.as_mut() {
        *out = len as i64;
    }
    Ok(())
}

fn count_size(size: i64) -> Res<usize> {
    usize::try_from(size)
        .map_err(|_| MpiError::new(MPI_ERR_ARG, format!("negative buffer size {size}")))
}

/// The request `MPI_*_iflush_buffer` returns once the flush is done.
unsafe fn flushed_request(comm: Handle, request: *mut Handle) -> Res {
    let Some(out) = request.as_mut() else {
        return fail(MPI_ERR_ARG, "request is NULL");
    };
    *out = running(|s| {
        let core = s.core_comm(MPI_COMM_SELF)?;
        Ok(s.requests.insert(Request::done(comm, core, Outcome::EMPTY)))
    })?;
    Ok(())
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
