//! MPI errors: the error a call fails with, the text of each class, a panic turned into
//! MPI_ERR_INTERN, and leaving the process. The guards the entry points run in, which hand an
//! error to its handler, are the entry layer's (`entry/guards.rs`).

use crate::abi::*;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An error on its way to the C caller: its MPI class and what went wrong. Boxed, so that a
/// `Res<()>` is one word: every entry point returns one, and a wider result travels through the
/// stack, where reading it back whole after the callee wrote it field by field stalls the load.
#[derive(Debug, Clone)]
pub(crate) struct MpiError(Box<ErrorDetail>);

/// What an [`MpiError`] holds.
#[derive(Debug, Clone)]
pub(crate) struct ErrorDetail {
    /// The MPI error class returned to the caller.
    pub(crate) class: c_int,
    /// A sentence naming the problem.
    pub(crate) message: String,
}

impl std::ops::Deref for MpiError {
    type Target = ErrorDetail;
    fn deref(&self) -> &ErrorDetail {
        &self.0
    }
}

/// Result of the Rust side of an entry point.
pub(crate) type Res<T = ()> = Result<T, MpiError>;

impl MpiError {
    /// An error of `class` saying `message`.
    pub(crate) fn new(class: c_int, message: impl Into<String>) -> MpiError {
        MpiError(Box::new(ErrorDetail {
            class,
            message: message.into(),
        }))
    }

    /// The sentence naming the problem.
    pub(crate) fn into_message(self) -> String {
        self.0.message
    }
}

/// Shorthand: `Err(MpiError::new(class, message))`.
pub(crate) fn fail<T>(class: c_int, message: impl Into<String>) -> Res<T> {
    Err(MpiError::new(class, message))
}

impl From<ferry_core::Error> for MpiError {
    fn from(e: ferry_core::Error) -> MpiError {
        use ferry_core::Error as E;
        let class = match &e {
            E::Truncated { .. } => MPI_ERR_TRUNCATE,
            E::RankOutOfRange { .. } => MPI_ERR_RANK,
            E::InvalidTag(_) => MPI_ERR_TAG,
            E::PeerLost { .. } => MPI_ERR_PROC_ABORTED,
            E::ProcFailed { .. } => MPIX_ERR_PROC_FAILED,
            E::ProcFailedPending { .. } => MPIX_ERR_PROC_FAILED_PENDING,
            E::Revoked => MPIX_ERR_REVOKED,
            E::BufferTooSmall { .. } => MPI_ERR_BUFFER,
            E::Config(_) => MPI_ERR_ARG,
            E::Cancelled => MPI_SUCCESS,
            _ => MPI_ERR_OTHER,
        };
        MpiError::new(class, e.to_string())
    }
}

/// The standard's text for each error class (`MPI_Error_string` of a class).
pub(crate) fn class_text(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "no error",
        MPI_ERR_BUFFER => "invalid buffer pointer",
        MPI_ERR_COUNT => "invalid count argument",
        MPI_ERR_TYPE => "invalid datatype",
        MPI_ERR_TAG => "invalid tag",
        MPI_ERR_COMM => "invalid communicator",
        MPI_ERR_RANK => "invalid rank",
        MPI_ERR_REQUEST => "invalid request",
        MPI_ERR_ROOT => "invalid root",
        MPI_ERR_GROUP => "invalid group",
        MPI_ERR_OP => "invalid operation",
        MPI_ERR_TOPOLOGY => "invalid topology",
        MPI_ERR_DIMS => "invalid dimension argument",
        MPI_ERR_ARG => "invalid argument of some other kind",
        MPI_ERR_UNKNOWN => "unknown error",
        MPI_ERR_TRUNCATE => "message truncated",
        MPI_ERR_OTHER => "known error not in this list",
        MPI_ERR_INTERN => "internal error",
        MPI_ERR_PENDING => "pending request",
        MPI_ERR_IN_STATUS => "error code is in status",
        MPI_ERR_INFO_KEY => "invalid info key",
        MPI_ERR_INFO_NOKEY => "info key not defined",
        MPI_ERR_INFO_VALUE => "invalid info value",
        MPI_ERR_INFO => "invalid info object",
        MPI_ERR_KEYVAL => "invalid keyval",
        MPI_ERR_NAME => "no such service name",
        MPI_ERR_PORT => "invalid port name",
        MPI_ERR_SERVICE => "invalid service name (publish or unpublish failed)",
        MPI_ERR_SPAWN => "error spawning processes",
        MPI_ERR_NO_MEM => "out of memory",
        MPI_ERR_PROC_ABORTED => "a process of the job has ended",
        MPI_ERR_ASSERT => "invalid assert argument",
        MPI_ERR_BASE => "invalid base address",
        MPI_ERR_DISP => "invalid displacement argument",
        MPI_ERR_LOCKTYPE => "invalid lock type",
        MPI_ERR_RMA_ATTACH => "memory cannot be attached",
        MPI_ERR_RMA_CONFLICT => "conflicting accesses to a window",
        MPI_ERR_RMA_RANGE => "target memory is not part of the window",
        MPI_ERR_RMA_SHARED => "memory cannot be shared",
        MPI_ERR_RMA_SYNC => "wrong synchronization of RMA calls",
        MPI_ERR_RMA_FLAVOR => "passed window has the wrong flavor for the called function",
        MPI_ERR_SIZE => "invalid size argument",
        MPI_ERR_WIN => "invalid window",
        MPI_ERR_UNSUPPORTED_OPERATION => "operation not supported by ferry",
        MPI_ERR_ERRHANDLER => "invalid error handler",
        MPI_ERR_ACCESS => "permission denied",
        MPI_ERR_AMODE => "invalid file access mode",
        MPI_ERR_BAD_FILE => "invalid file name",
        MPI_ERR_CONVERSION => "data conversion failed",
        MPI_ERR_DUP_DATAREP => "data representation already defined",
        MPI_ERR_FILE_EXISTS => "file exists",
        MPI_ERR_FILE_IN_USE => "file in use by some process",
        MPI_ERR_FILE => "invalid file handle",
        MPI_ERR_IO => "I/O error",
        MPI_ERR_NOT_SAME => "arguments differ between the processes of a collective call",
        MPI_ERR_NO_SPACE => "not enough space",
        MPI_ERR_NO_SUCH_FILE => "file does not exist",
        MPI_ERR_QUOTA => "quota exceeded",
        MPI_ERR_READ_ONLY => "read-only file or file system",
        MPI_ERR_UNSUPPORTED_DATAREP => "unsupported data representation",
        MPI_ERR_SESSION => "invalid session",
        MPI_ERR_VALUE_TOO_LARGE => "value too large to store",
        MPI_ERR_ABI => "error in the ABI layer (conversion of a handle or value)",
        MPIX_ERR_PROC_FAILED => "a process involved in the operation has failed",
        MPIX_ERR_PROC_FAILED_PENDING => {
            "a process that could have matched this wildcard receive has failed; the request is still pending"
        }
        MPIX_ERR_REVOKED => "the communicator has been revoked",
        MPI_T_ERR_CANNOT_INIT => "MPI_T: interface not in the state to be initialized",
        MPI_T_ERR_NOT_ACCESSIBLE => "MPI_T: requested functionality not accessible",
        MPI_T_ERR_NOT_INITIALIZED => "MPI_T: interface not initialized",
        MPI_T_ERR_NOT_SUPPORTED => "MPI_T: requested functionality not supported",
        MPI_T_ERR_MEMORY => "MPI_T: out of memory",
        MPI_T_ERR_INVALID => "MPI_T: invalid use of the interface or bad parameter value",
        MPI_T_ERR_INVALID_INDEX => "MPI_T: the index is invalid or has been deleted",
        MPI_T_ERR_INVALID_ITEM => "MPI_T: item index queried is out of range",
        MPI_T_ERR_INVALID_SESSION => "MPI_T: the session handle is invalid",
        MPI_T_ERR_INVALID_HANDLE => "MPI_T: the handle is invalid",
        MPI_T_ERR_INVALID_NAME => "MPI_T: the variable or category name is invalid",
        MPI_T_ERR_OUT_OF_HANDLES => "MPI_T: no more handles available",
        MPI_T_ERR_OUT_OF_SESSIONS => "MPI_T: no more sessions available",
        MPI_T_ERR_CVAR_SET_NOT_NOW => "MPI_T: variable cannot be set at this moment",
        MPI_T_ERR_CVAR_SET_NEVER => "MPI_T: variable cannot be set until the end of execution",
        MPI_T_ERR_PVAR_NO_WRITE => "MPI_T: variable cannot be written or reset",
        MPI_T_ERR_PVAR_NO_STARTSTOP => "MPI_T: variable cannot be started or stopped",
        MPI_T_ERR_PVAR_NO_ATOMIC => "MPI_T: variable cannot be read and written atomically",
        _ => "unknown error class",
    }
}

/// A user error handler, `void fn(MPI_Comm *, int *, ...)` (called with two arguments).
pub(crate) type CommErrhandlerFn = unsafe extern "C" fn(*mut Handle, *mut c_int);

/// Runs `body`, turning a panic into MPI_ERR_INTERN (the first half of every guard).
#[inline]
pub(crate) fn caught(body: impl FnOnce() -> Res) -> Res {
    let _entered = crate::threads::enter();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(panic) => Err(panicked(panic)),
    }
}

/// The error a panic in an entry point becomes.
#[cold]
fn panicked(panic: Box<dyn std::any::Any + Send>) -> MpiError {
    let what = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into());
    MpiError::new(MPI_ERR_INTERN, format!("internal error: {what}"))
}

/// What `MPI_*_call_errhandler` returns once the handler has run with `errorcode` and given
/// `rc`: success when the handler returned (MPI_ERRORS_RETURN hands the code back), else `rc`.
pub(crate) fn called_errhandler(rc: c_int, errorcode: c_int) -> c_int {
    if rc == errorcode {
        MPI_SUCCESS
    } else {
        rc
    }
}

/// Leaves the process with `code` without exit-time destructors. An abort can come from inside
/// a callback (a reduction function, an error handler) while the runtime is mid-call; finalizing
/// the world from the state's thread-local destructor then fails on the busy engine (a panic in
/// a destructor, SIGABRT). C output streams are flushed first.
pub(crate) fn exit_now(code: c_int) -> ! {
    // SAFETY: fflush(NULL) flushes every C output stream; _exit only ends the process.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(code)
    }
}
