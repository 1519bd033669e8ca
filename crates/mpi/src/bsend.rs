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
use crate::p2p::wait_request;
use crate::request::{Outcome, Request};
use crate::state::{running, State};
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

pub(crate) fn attach(owner: BufferOwner, buffer: *mut c_void, size: usize) -> Res {
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

pub(crate) fn session_arg(s: &State, session: Handle) -> Res {
    match s.sessions.get(session) {
        Some(_) => Ok(()),
        None => fail(MPI_ERR_SESSION, format!("invalid session {session:#x}")),
    }
}

/// Waits for every buffered send drawing on `owner`'s buffer.
pub(crate) fn flush(owner: BufferOwner) -> Res {
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
    // SAFETY: this function's contract is the unsafe operations' own: `buffer_addr`, as the
    // caller promises, is NULL or valid for what the MPI call it serves reads and writes through
    // it.
    unsafe {
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
}

pub(crate) unsafe fn detach_int(
    owner: BufferOwner,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `buffer_addr` and `size`,
    // as the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
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
}

pub(crate) unsafe fn detach_count(
    owner: BufferOwner,
    buffer_addr: *mut c_void,
    size: *mut i64,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `buffer_addr` and `size`,
    // as the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let len = detach(owner, buffer_addr)?;
        if let Some(out) = size.as_mut() {
            *out = len as i64;
        }
        Ok(())
    }
}

pub(crate) fn count_size(size: i64) -> Res<usize> {
    usize::try_from(size)
        .map_err(|_| MpiError::new(MPI_ERR_ARG, format!("negative buffer size {size}")))
}

/// The request `MPI_*_iflush_buffer` returns once the flush is done.
pub(crate) unsafe fn flushed_request(comm: Handle, request: *mut Handle) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `request`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let Some(out) = request.as_mut() else {
            return fail(MPI_ERR_ARG, "request is NULL");
        };
        *out = running(|s| {
            let core = s.core_comm(MPI_COMM_SELF)?;
            Ok(s.requests.insert(Request::done(comm, core, Outcome::EMPTY)))
        })?;
        Ok(())
    }
}
