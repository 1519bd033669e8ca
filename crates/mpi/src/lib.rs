//! The MPI C ABI on `ferry-core`: `include/mpi.h`, `libmpi.so`, `mpicc`/`mpicxx`, `mpiexec`.
#![deny(missing_docs)]
#![allow(clippy::missing_safety_doc)] // the contracts are MPI's, documented in mpi.h

pub mod datatype;
pub mod ops;
