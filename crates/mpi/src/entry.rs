//! The entry points: every `extern "C"` function of the library, one submodule per chapter of
//! the MPI 5.0 standard, each defined by the `mpi!` macro (below). They check the arguments,
//! convert the handles and call the semantics (the crate's other modules); the constants and
//! types of the standard ABI they use are [`crate::abi`]'s. Nothing else in the crate imports
//! this module (`tests/layers.rs` keeps it so).
#![allow(missing_docs)]

use crate::abi::Handle;

/// Defines every exported function of the library: `PMPI_X` with its body, and `MPI_X`
/// calling it (a tool may define `MPI_X` itself and call `PMPI_X`). The arm says which guard
/// the body runs in; each guard takes the thread lock ([`crate::threads::enter`]), turns a
/// panic into MPI_ERR_INTERN (no unwind crosses `extern "C"`) and maps the body's
/// [`crate::error::MpiError`] to the code returned:
///
/// * `on comm =>`: the error handler of communicator (or window, session) `comm` runs
///   ([`guards::guard`]); `on NONE` is MPI_COMM_WORLD's.
/// * `on file fh =>`: the error handler of file `fh` runs, or MPI_FILE_NULL's
///   ([`guards::file_guard`]).
/// * `on tool =>`: an MPI_T call returns its error code and runs no handler
///   ([`guards::tool_guard`]).
/// * `-> T, unguarded =>`: no guard, the body returns `T` itself: for the calls that cannot
///   fail (`MPI_Wtime`, handle conversions), the `*_call_errhandler` calls, which run the
///   handler themselves, and a lookup that answers before it would need a guard.
macro_rules! mpi {
    ($(#[$doc:meta])* fn $name:ident / $pname:ident ($($arg:ident: $ty:ty),* $(,)?) on file $fh:expr => $body:block) => {
        mpi!(@export $(#[$doc])* $name / $pname ($($arg: $ty),*) -> std::ffi::c_int {
            let target: $crate::abi::Handle = $fh;
            $crate::entry::guards::file_guard(stringify!($name), target, || $body)
        });
    };
    ($(#[$doc:meta])* fn $name:ident / $pname:ident ($($arg:ident: $ty:ty),* $(,)?) on tool => $body:block) => {
        mpi!(@export $(#[$doc])* $name / $pname ($($arg: $ty),*) -> std::ffi::c_int {
            $crate::entry::guards::tool_guard(|| $body)
        });
    };
    ($(#[$doc:meta])* fn $name:ident / $pname:ident ($($arg:ident: $ty:ty),* $(,)?) on $comm:expr => $body:block) => {
        mpi!(@export $(#[$doc])* $name / $pname ($($arg: $ty),*) -> std::ffi::c_int {
            $crate::entry::guards::guard(stringify!($name), $comm, || $body)
        });
    };
    ($(#[$doc:meta])* fn $name:ident / $pname:ident ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty, unguarded => $body:block) => {
        mpi!(@export $(#[$doc])* $name / $pname ($($arg: $ty),*) -> $ret $body);
    };
    (@export $(#[$doc:meta])* $name:ident / $pname:ident ($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        $(#[$doc])*
        #[no_mangle]
        // exported from the library whatever the module's visibility; not every body needs
        // the unsafe block below
        #[allow(unreachable_pub, unused_unsafe)]
        pub unsafe extern "C" fn $pname($($arg: $ty),*) -> $ret {
            // SAFETY: the caller keeps MPI's contract for this call (mpi.h, the standard): each
            // pointer argument is NULL or points at what the standard says, for as long as it
            // says. The body checks what can be checked ([`check`]) before it touches memory.
            unsafe { $body }
        }
        $(#[$doc])*
        #[no_mangle]
        #[allow(unreachable_pub)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the same call with the same arguments, under the same contract.
            unsafe { $pname($($arg),*) }
        }
    };
}

/// The "no communicator" target for errors: MPI_COMM_WORLD's handler applies.
pub(crate) const NONE: Handle = 0;

// The two macros come first because both the collectives and the topologies (neighbourhood
// collectives) use them.
/// Defines `MPI_X_c` and `MPI_IX_c`: the arguments, then `comm` (and `request`); the body
/// runs with the communicator as `$c` and the request address (null when blocking) as `$r`.
macro_rules! coll_c {
    ($(#[$doc:meta])* fn $name:ident / $pname:ident, $iname:ident / $ipname:ident ($($arg:ident: $ty:ty),* $(,)?) => |$c:ident, $r:ident| $call:expr) => {
        mpi! {
            $(#[$doc])*
            fn $name / $pname($($arg: $ty,)* comm: Handle) on comm => {
                let ($c, $r) = (comm, BLOCKING);
                $call
            }
        }
        mpi! {
            $(#[$doc])*
            #[doc = "Nonblocking."]
            fn $iname / $ipname($($arg: $ty,)* comm: Handle, request: *mut Handle) on comm => {
                let ($c, $r) = (comm, nonnull(request)?);
                $call
            }
        }
    };
}

/// Defines `MPI_X_init`: the arguments of `MPI_X`, then `comm`, `info` and `request`; the
/// closure starts the nonblocking form on the hidden communicator `c` with request address `r`.
/// `bind |comm| { let x = ...; }` copies array arguments at init (see [`bound`]); the closure
/// then reads the copies.
macro_rules! coll_init {
    ($(#[$doc:meta])* fn $name:ident / $pname:ident ($($arg:ident: $ty:ty),* $(,)?) $(keep($($k:ident),*))? $(bind |$bc:ident| { $(let $v:pat = $e:expr;)* })? => |$c:ident, $r:ident| $call:expr) => {
        mpi! {
            $(#[$doc])*
            fn $name / $pname($($arg: $ty,)* comm: Handle, info: Handle, request: *mut Handle) on comm => {
                let request = nonnull(request)?;
                $(let $bc = comm; $(let $v = $e;)*)?
                #[allow(unused_mut)] // MPI_Barrier_init keeps nothing
                let mut kept = Kept::new();
                $($(running(|s| Ok(keep(s, $k, &mut kept)))?;)*)?
                persistent(comm, info, request, kept, move |$c: Handle, $r: RequestOut<'_>| $call)
            }
        }
    };
}

mod binary_interface;
mod collectives;
mod datatypes;
mod environment;
mod external;
mod fault_tolerance;
mod groups_comms;
mod guards;
mod info;
mod io;
mod language_bindings;
mod one_sided;
mod partitioned;
mod process_creation;
mod pt2pt;
mod removed;
mod sessions;
mod tools;
mod topologies;
