//! Chapter 17 of MPI 5.0, removed interfaces: the MPI-1 calls that MPI-2.0 deprecated and
//! MPI-3.0 removed, kept because old programs still call them and MPICH still provides them:
//! `MPI_Address`, `MPI_Type_extent`, `MPI_Type_lb`, `MPI_Type_ub`, `MPI_Type_hvector`,
//! `MPI_Type_hindexed`, `MPI_Type_struct`, `MPI_Errhandler_create`, `MPI_Errhandler_get` and
//! `MPI_Errhandler_set`.
//!
//! Each is a thin wrapper over the body of its modern replacement (`MPI_Get_address`,
//! `MPI_Type_get_extent`, `MPI_Type_create_hvector`/`_hindexed`/`_struct`,
//! `MPI_Comm_create_errhandler`/`_get_errhandler`/`_set_errhandler`), run in its own guard so
//! that an error names the call the program made. The replacements take `MPI_Aint` where the
//! old calls did too (on ferry's targets `MPI_Aint` is pointer-sized, as MPI-1's `MPI_Aint`).
//!
//! The marker datatypes `MPI_LB` and `MPI_UB` that go with `MPI_Type_struct` are
//! [`crate::datatype::Marker`]s: the standard ABI has no handles for them, so ferry's sit at the
//! top of its datatype block (0x2fe, 0x2ff), and each marks only its own bound.

use super::NONE;
use crate::abi::*;
use crate::check::out;
use crate::comm::{comm_errhandler, create_errhandler, set_comm_errhandler};
use crate::error::CommErrhandlerFn;
use crate::types::{create_struct, datatype_of, hindexed, hvector};
use std::ffi::{c_int, c_void};

mpi! {
    /// The address of a location (removed in MPI-3.0: use MPI_Get_address).
    fn MPI_Address / PMPI_Address(location: *const c_void, address: *mut isize) on NONE => {
        *out(address, "address")? = location as isize;
        Ok(())
    }
}

mpi! {
    /// The extent of a type, `ub - lb` (removed in MPI-3.0: use MPI_Type_get_extent).
    fn MPI_Type_extent / PMPI_Type_extent(datatype: Handle, extent: *mut isize) on NONE => {
        let out = out(extent, "extent")?;
        *out = datatype_of(datatype)?.extent();
        Ok(())
    }
}

mpi! {
    /// The lower bound of a type (removed in MPI-3.0: use MPI_Type_get_extent).
    fn MPI_Type_lb / PMPI_Type_lb(datatype: Handle, displacement: *mut isize) on NONE => {
        let out = out(displacement, "displacement")?;
        *out = datatype_of(datatype)?.lb();
        Ok(())
    }
}

mpi! {
    /// The upper bound of a type, `lb + extent` (removed in MPI-3.0: use MPI_Type_get_extent).
    fn MPI_Type_ub / PMPI_Type_ub(datatype: Handle, displacement: *mut isize) on NONE => {
        let out = out(displacement, "displacement")?;
        *out = datatype_of(datatype)?.ub();
        Ok(())
    }
}

mpi! {
    /// Strided blocks, stride in bytes (removed in MPI-3.0: use MPI_Type_create_hvector).
    fn MPI_Type_hvector / PMPI_Type_hvector(count: c_int, blocklength: c_int, stride: isize, oldtype: Handle, newtype: *mut Handle) on NONE => {
        hvector(count, blocklength, stride, oldtype, newtype)
    }
}

mpi! {
    /// Blocks at byte displacements (removed in MPI-3.0: use MPI_Type_create_hindexed).
    fn MPI_Type_hindexed / PMPI_Type_hindexed(count: c_int, blocklengths: *const c_int, displacements: *const isize, oldtype: Handle, newtype: *mut Handle) on NONE => {
        hindexed(count, blocklengths, displacements, oldtype, newtype)
    }
}

mpi! {
    /// Blocks of different types at byte displacements (removed in MPI-3.0: use
    /// MPI_Type_create_struct).
    fn MPI_Type_struct / PMPI_Type_struct(count: c_int, blocklengths: *const c_int, displacements: *const isize, types: *const Handle, newtype: *mut Handle) on NONE => {
        create_struct(count, blocklengths, displacements, types, newtype)
    }
}

mpi! {
    /// An error handler for communicators (removed in MPI-3.0: use MPI_Comm_create_errhandler).
    fn MPI_Errhandler_create / PMPI_Errhandler_create(function: Option<CommErrhandlerFn>, errhandler: *mut Handle) on NONE => {
        let out = out(errhandler, "errhandler")?;
        *out = create_errhandler(function)?;
        Ok(())
    }
}

mpi! {
    /// Sets a communicator's error handler (removed in MPI-3.0: use MPI_Comm_set_errhandler).
    fn MPI_Errhandler_set / PMPI_Errhandler_set(comm: Handle, errhandler: Handle) on comm => {
        set_comm_errhandler(comm, errhandler)
    }
}

mpi! {
    /// A communicator's error handler (removed in MPI-3.0: use MPI_Comm_get_errhandler).
    fn MPI_Errhandler_get / PMPI_Errhandler_get(comm: Handle, errhandler: *mut Handle) on comm => {
        let out = out(errhandler, "errhandler")?;
        *out = comm_errhandler(comm)?;
        Ok(())
    }
}
