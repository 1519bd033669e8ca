//! The guards the entry points run in (which guard each uses is chosen by its arm of `mpi!`):
//! run the body with a panic turned into MPI_ERR_INTERN, and hand an error to the error handler
//! of its communicator, window, session or file, or return an MPI_T call's class. MPI_T events
//! raised during a call are handed to their callbacks as the thread's outermost call returns.

use crate::abi::*;
use crate::error::{caught, class_text, MpiError, Res};
use crate::state::{fatal, with, STATE};
use crate::tool::events::CallScope;
use std::ffi::c_int;

/// Runs the body of entry point `name`; on error, invokes the error handler of `comm` (or of
/// MPI_COMM_WORLD for calls tied to no communicator). A panic becomes MPI_ERR_INTERN; an unwind
/// never crosses `extern "C"`.
#[inline]
pub(crate) fn guard(name: &'static str, comm: Handle, body: impl FnOnce() -> Res) -> c_int {
    // Events the call raised go to their callbacks as it returns (`crate::tool::events`).
    let call = CallScope::enter();
    let rc = match caught(body) {
        Ok(()) => MPI_SUCCESS,
        Err(error) => handle_error(name, comm, error),
    };
    call.leave();
    rc
}

/// Runs the body of file call `name`; on error, invokes the error handler of file `fh` (or of
/// MPI_FILE_NULL when `fh` is no open file). A panic becomes MPI_ERR_INTERN.
pub(crate) fn file_guard(name: &'static str, fh: Handle, body: impl FnOnce() -> Res) -> c_int {
    let call = CallScope::enter();
    let rc = match caught(body) {
        Ok(()) => MPI_SUCCESS,
        Err(e) => crate::io::handle_file_error(name, fh, e),
    };
    call.leave();
    rc
}

/// Runs the body of an MPI_T function: its error class, MPI_T_ERR_INVALID for a panic.
pub(crate) fn tool_guard(body: impl FnOnce() -> Res) -> c_int {
    match caught(body) {
        Ok(()) => MPI_SUCCESS,
        Err(e) if e.class == MPI_ERR_INTERN => MPI_T_ERR_INVALID,
        Err(e) => e.class,
    }
}

/// Invokes the error handler that applies to `comm` for `error` raised in `name`.
#[cold]
pub(crate) fn handle_error(name: &str, comm: Handle, error: MpiError) -> c_int {
    let (handler, rank) = STATE
        .with(|s| (s.errhandler_of(comm), s.world_rank()))
        .unwrap_or((MPI_ERRORS_ARE_FATAL, None));
    match handler {
        MPI_ERRORS_RETURN => error.class,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => {
            let who = rank.map_or(String::new(), |r| format!("rank {r}: "));
            // A code the program added (MPI_Add_error_code) is described by its own string.
            let text = match crate::env::lookup_code(error.class) {
                Ok((_, t)) if !t.is_empty() => t,
                Ok(_) if error.class > MPI_ERR_LASTCODE => {
                    format!("error code {} added by the program", error.class)
                }
                _ => class_text(error.class).to_string(),
            };
            let message = format!("{who}{name}: {} ({text})", error.message);
            fatal(&message)
        }
        user => {
            let f = with(|s| Ok(s.user_errhandler(user))).ok().flatten();
            let mut code = error.class;
            let mut c = comm;
            if let Some(f) = f {
                // SAFETY: the program registered `f` with MPI_Comm_create_errhandler, whose
                // contract is this signature; extra variadic arguments are optional.
                unsafe { f(&mut c, &mut code) };
            }
            // The handler may change the code the call returns (MPICH's ROMIO relies on it).
            code
        }
    }
}
