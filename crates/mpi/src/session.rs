//! Sessions (MPI 4.1 §11.3): `MPI_Session_init`/`finalize`, the process sets `mpi://WORLD` and
//! `mpi://SELF` (names compared without regard to case, as MPICH does), groups from them and
//! `MPI_Comm_create_from_group`.
//!
//! One runtime serves both models: the first of MPI_Init and MPI_Session_init starts it, and it
//! shuts down when MPI_Finalize has been called and the last session is finalized (or at
//! MPI_Finalize when no session is open). A runtime finalized that way does not start again.
//! A session asks for its thread level with the `thread_level` info hint (FUNNELED without
//! one); the first of MPI_Init_thread and MPI_Session_init sets the process's level, and a
//! session's `thread_level` info reports it. A communicator from a group is made on MPI_COMM_WORLD's processes with the
//! string tag hashed into the tag that keeps concurrent creations apart. Errors in calls on a
//! session go to its error handler: the one it was opened with (MPI_ERRHANDLER_NULL meaning
//! MPI_ERRORS_ARE_FATAL) until `MPI_Session_set_errhandler` replaces it.

use crate::abi::*;
use crate::error::{fail, MpiError, Res};
use crate::state::State;
use std::ffi::c_int;

/// The process sets every session has.
pub(crate) const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

pub(crate) fn session_arg(s: &State, session: Handle) -> Res<Handle> {
    s.sessions
        .get(session)
        .copied()
        .ok_or_else(|| MpiError::new(MPI_ERR_SESSION, format!("invalid session {session:#x}")))
}

/// The members (world ranks) of a process set.
pub(crate) fn pset_members(s: &State, name: &str) -> Res<crate::state::GroupObj> {
    let comm = if name.eq_ignore_ascii_case(PSETS[0]) {
        MPI_COMM_WORLD
    } else if name.eq_ignore_ascii_case(PSETS[1]) {
        MPI_COMM_SELF
    } else {
        return fail(MPI_ERR_ARG, format!("no process set named {name:?}"));
    };
    s.local_group(comm)
}

/// The thread levels by the names the `thread_level` info key uses.
pub(crate) const THREAD_LEVELS: [(c_int, &str); 4] = [
    (MPI_THREAD_SINGLE, "MPI_THREAD_SINGLE"),
    (MPI_THREAD_FUNNELED, "MPI_THREAD_FUNNELED"),
    (MPI_THREAD_SERIALIZED, "MPI_THREAD_SERIALIZED"),
    (MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE"),
];

pub(crate) fn thread_level_name(level: c_int) -> &'static str {
    THREAD_LEVELS
        .iter()
        .find(|&&(l, _)| l == level)
        .map_or("MPI_THREAD_MULTIPLE", |&(_, name)| name)
}

/// FNV-1a of the string tag, as a non-negative tag: the same on every member.
pub(crate) fn tag_of(stringtag: &str) -> i32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in stringtag.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    (h & 0x3fff_ffff) as i32
}

// ---- error handlers ----
