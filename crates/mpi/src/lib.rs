//! The MPI C ABI on `ferry-core`: `include/mpi.h`, `libmpi.so`, `mpicc`/`mpicxx`, `mpiexec`.
//!
//! Four layers, each importing only its own and those below (`tests/layers.rs` checks it). At
//! the bottom, [`abi`]: the constants, handle type and `MPI_Status` of the MPI 5.0 standard
//! ABI; it imports nothing of the crate. Above it the base, pure data and algorithms with no
//! process state: the datatype engine ([`datatype`]), the reductions ([`ops`]), the one-sided
//! message handler and its wire format ([`rma`], `rma::wire`), the handle tables ([`handles`]),
//! the thread lock ([`threads`]), the error a call fails with ([`error`]) and the argument
//! checks ([`check`]). Above them the **semantics** (the other modules below): crate-private,
//! no `extern "C"` function of their own, taking checked Rust values where they can. On top,
//! the **entry points**, in the submodules of `entry`, one per chapter of the MPI 5.0 standard
//! (`entry/pt2pt.rs`, `entry/datatypes.rs`, `entry/collectives.rs`, ...); nothing else defines
//! an exported function, and nothing below imports them.
//!
//! Each entry point is defined by the `mpi!` macro (`entry.rs`): `PMPI_X` (the profiling
//! interface: a tool may define `MPI_X` itself and call `PMPI_X`) and `MPI_X` calling it. Its
//! body runs inside one of the guards of `entry/guards.rs`, chosen by the macro's arm: check
//! arguments, convert handles, call the semantics, map the error to its MPI class, run the
//! error handler of the communicator, window, session or file (MPI_T calls return their code).
//! A panic becomes MPI_ERR_INTERN; no unwind crosses `extern "C"`. The argument checks and the
//! pointer conversions are shared ([`check`]): every buffer a call reads or writes is checked
//! before it is touched, every pointer it reads an array from or writes a result through before
//! it is used, and a call that fails has posted nothing. An unsafe operation inside an `unsafe
//! fn` needs an `unsafe` block of its own with its `// SAFETY:` (`unsafe_op_in_unsafe_fn` is
//! denied). A collective's request goes through [`coll::RequestOut`], which the entry points
//! make from their request argument.
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
//! (`MPI_Address`, `MPI_Type_struct`, ...) are entry points only (`entry/removed.rs`).
//!
//! This crate depends on `ferry-core` (the runtime: worlds, communicators, transports, the
//! executor of schedules) and `ferry-sched` (the schedules that the neighbourhood and
//! intercommunicator collectives build, the reduction order of the others), plus `libc`, `thiserror`, `bytemuck`,
//! `parking_lot` and `rustc-hash`; never on the launcher, which it reaches only through the
//! bootstrap connection that `ferry run` (or another process manager) gives each rank, also to
//! start the processes of `MPI_Comm_spawn` (on the launcher's host).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(unreachable_pub)]
#![allow(clippy::missing_safety_doc)] // the contracts are MPI's, documented in mpi.h
#![allow(clippy::too_many_arguments)] // MPI's signatures

// The Rust side is crate-private but for what outside code uses: the ABI's constants (`abi`),
// the datatype engine and the reductions (`datatype`, `ops`, documented with examples and
// checked against mpi.h by tests/abi_constants.rs) and the one-sided message handler
// (`rma::Win`, which fuzz/src/lib.rs drives). `unreachable_pub` keeps it so.
pub mod abi;
pub(crate) mod bsend;
pub(crate) mod check;
pub(crate) mod coll;
pub(crate) mod comm;
pub(crate) mod datarep;
pub mod datatype;
pub(crate) mod dynamic;
pub(crate) mod entry;
pub(crate) mod env;
pub(crate) mod error;
pub(crate) mod external;
pub(crate) mod fortran;
pub(crate) mod ft;
pub(crate) mod greq;
pub(crate) mod handles;
pub(crate) mod inter;
pub(crate) mod io;
pub(crate) mod mpi5;
pub mod ops;
pub(crate) mod p2p;
pub(crate) mod part;
pub(crate) mod request;
pub mod rma;
pub(crate) mod session;
pub(crate) mod state;
pub(crate) mod threads;
pub(crate) mod tool;
pub(crate) mod topo;
pub(crate) mod types;
