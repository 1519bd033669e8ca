//! The MPI C ABI on `ferry-core`: `include/mpi.h`, `libmpi.so`, `mpicc`/`mpicxx`, `mpiexec`.
//!
//! Every `MPI_X` calls `PMPI_X` (the profiling interface: a tool may define `MPI_X` itself and
//! call `PMPI_X`). Every body runs inside [`error::guard`]: check arguments, convert handles,
//! call the runtime, map the error to its MPI class, run the communicator's error handler. A
//! panic becomes MPI_ERR_INTERN; no unwind crosses `extern "C"`. The argument checks are shared
//! ([`check`]): every buffer a call reads or writes is checked before it is touched, and a call
//! that fails has posted nothing.
//!
//! Every constant, type size and layout is the MPI 5.0 standard ABI's (`abi.rs`, `include/mpi.h`;
//! `tests/abi_reference.rs` compares the header with MPICH 5.0.2's `mpi_abi.h`), and the library's
//! SONAME is the standard's `libmpi_abi.so.1`, so binaries built for the standard ABI run on
//! ferry and ferry's run on other ABI libraries (`tests/abi_swap.rs`). The calls MPI 5.0 added
//! are in [`mpi5`]; buffers of buffered sends (process, communicator, session) in [`bsend`].
//!
//! Handles are the MPI-5 ABI's (see `abi.rs`); created objects live in the tables of
//! [`state::State`]. Every thread level is provided; how threads share the library is in
//! [`threads`]. Intercommunicators (creation, merge, dup/idup/split/create, point-to-point and
//! every collective defined on them, blocking and nonblocking) are in [`inter`]. Cartesian, graph
//! and distributed graph topologies are in [`topo`]; the neighbourhood collectives on them,
//! blocking and nonblocking, are schedules like the other collectives ([`coll`]). Persistent
//! collectives (MPI 4.0) start the nonblocking ones; the large-count `_c` calls take the
//! int-count paths and refuse a count beyond `INT_MAX` elements with MPI_ERR_COUNT. Generalized
//! requests are in [`greq`], sessions in [`session`]. MPI I/O on POSIX files is in [`io`].
//! One-sided communication (windows, put/get/accumulate, fence, PSCW and passive target) is in
//! [`rma`]. The tool information interface (MPI_T: ferry's settings as control variables,
//! its traffic counters as performance variables) is in [`tool`]. Status conversion for Fortran
//! callers is in [`fortran`]; dynamic processes (`MPI_Comm_spawn`, ports, names, join and
//! disconnect) are in [`dynamic`]; the MPI-1 calls that MPI-3.0 removed and MPICH still ships
//! (`MPI_Address`, `MPI_Type_struct`, ...) are in [`removed`].
//!
//! This crate depends on `ferry-core` and `ferry-sched` (the intercommunicator schedules), plus
//! `libc`; never on the launcher, which it reaches only through the bootstrap connection that
//! `ferry run` (or another process manager) gives each rank.
#![deny(missing_docs)]
#![allow(clippy::missing_safety_doc)] // the contracts are MPI's, documented in mpi.h
#![allow(clippy::too_many_arguments)] // MPI's signatures

/// Defines `PMPI_X` with the body run by the guard, and `MPI_X` calling it.
macro_rules! mpi {
    ($(#[$doc:meta])* fn $name:ident / $pname:ident ($($arg:ident: $ty:ty),* $(,)?) on $comm:expr => $body:block) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($arg: $ty),*) -> std::ffi::c_int {
            $crate::error::guard(stringify!($name), $comm, || $body)
        }
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> std::ffi::c_int {
            $pname($($arg),*)
        }
    };
}

/// Defines `PMPI_T_X` with the body run by the tool interface's guard, and `MPI_T_X` calling
/// it. MPI_T functions return their error code and never invoke an error handler.
macro_rules! mpi_t {
    ($(#[$doc:meta])* fn $name:ident / $pname:ident ($($arg:ident: $ty:ty),* $(,)?) => $body:block) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($arg: $ty),*) -> std::ffi::c_int {
            $crate::tool::guard(|| $body)
        }
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> std::ffi::c_int {
            $pname($($arg),*)
        }
    };
}

pub mod abi;
pub mod bsend;
pub mod check;
pub mod coll;
pub mod comm;
pub mod datarep;
pub mod datatype;
pub mod dynamic;
pub mod env;
pub mod error;
pub mod external;
pub mod fortran;
pub mod greq;
pub mod handles;
pub mod inter;
pub mod io;
pub mod mpi5;
pub mod ops;
pub mod p2p;
pub mod part;
pub mod removed;
pub mod request;
pub mod rma;
pub mod session;
pub mod state;
pub mod threads;
pub mod tool;
pub mod topo;
pub mod types;

/// The "no communicator" target for errors: MPI_COMM_WORLD's handler applies.
pub(crate) const NONE: abi::Handle = 0;
