//! Chapter 19 of MPI 5.0, language bindings: handle conversion between C and Fortran (and
//! MPI 5.0's `MPI_X_toint`/`_fromint`), status conversion, and the Fortran type queries
//! (`MPI_Type_match_size`, `MPI_Type_create_f90_*`). The semantics are in [`crate::fortran`]
//! and [`crate::types`].

use super::NONE;
use crate::abi::*;
use crate::datatype::Builtin;
use crate::error::fail;
use crate::fortran::*;
use crate::types::*;
use std::ffi::c_int;

mpi! {
    /// The predefined type of `typeclass` (MPI_TYPECLASS_INTEGER, _REAL or _COMPLEX) whose size
    /// is `size` bytes: the Fortran sized types, or the C type where ferry computes on it and
    /// not on the Fortran one (16-byte reals and 32-byte complex are `long double`).
    fn MPI_Type_match_size / PMPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut Handle) on NONE => {
        let Some(out) = datatype.as_mut() else { return fail(MPI_ERR_ARG, "datatype is NULL") };
        let found = match (typeclass, size) {
            (TYPECLASS_INTEGER, 1) => Builtin::Integer1,
            (TYPECLASS_INTEGER, 2) => Builtin::Integer2,
            (TYPECLASS_INTEGER, 4) => Builtin::Integer4,
            (TYPECLASS_INTEGER, 8) => Builtin::Integer8,
            (TYPECLASS_INTEGER, 16) => Builtin::Integer16,
            (TYPECLASS_REAL, 2) => Builtin::Real2,
            (TYPECLASS_REAL, 4) => Builtin::Real4,
            (TYPECLASS_REAL, 8) => Builtin::Real8,
            (TYPECLASS_REAL, 16) => Builtin::LongDouble,
            (TYPECLASS_COMPLEX, 4) => Builtin::Complex4,
            (TYPECLASS_COMPLEX, 8) => Builtin::Complex8,
            (TYPECLASS_COMPLEX, 16) => Builtin::Complex16,
            (TYPECLASS_COMPLEX, 32) => Builtin::CLongDoubleComplex,
            (TYPECLASS_INTEGER | TYPECLASS_REAL | TYPECLASS_COMPLEX, _) => {
                return fail(MPI_ERR_ARG, format!("no predefined type of typeclass {typeclass} has {size} bytes"));
            }
            _ => return fail(MPI_ERR_ARG, format!("unknown typeclass {typeclass} (MPI_TYPECLASS_INTEGER, _REAL or _COMPLEX)")),
        };
        *out = found.handle();
        Ok(())
    }
}

mpi! {
    /// The predefined integer type of at least `r` decimal digits (MPI_COMBINER_F90_INTEGER).
    fn MPI_Type_create_f90_integer / PMPI_Type_create_f90_integer(r: c_int, newtype: *mut Handle) on NONE => {
        let base = f90_integer(r)?;
        f90_type(crate::datatype::combiner::F90_INTEGER, 0, r, base, newtype)
    }
}

mpi! {
    /// The predefined real type of precision `p` and range `r` (MPI_COMBINER_F90_REAL).
    fn MPI_Type_create_f90_real / PMPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut Handle) on NONE => {
        let base = f90_real(p, r, false)?;
        f90_type(crate::datatype::combiner::F90_REAL, p, r, base, newtype)
    }
}

mpi! {
    /// The predefined complex type whose parts have precision `p` and range `r`
    /// (MPI_COMBINER_F90_COMPLEX).
    fn MPI_Type_create_f90_complex / PMPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut Handle) on NONE => {
        let base = f90_real(p, r, true)?;
        f90_type(crate::datatype::combiner::F90_COMPLEX, p, r, base, newtype)
    }
}

mpi! {
    /// A C status as a Fortran `INTEGER STATUS(MPI_STATUS_SIZE)`.
    fn MPI_Status_c2f / PMPI_Status_c2f(c_status: *const MpiStatus, f_status: *mut c_int) on NONE => {
        convert(c_status.cast(), "c_status", f_status, "f_status")
    }
}

mpi! {
    /// A Fortran status as a C status.
    fn MPI_Status_f2c / PMPI_Status_f2c(f_status: *const c_int, c_status: *mut MpiStatus) on NONE => {
        convert(f_status, "f_status", c_status.cast(), "c_status")
    }
}

mpi! {
    /// A C status as a Fortran 2008 `TYPE(MPI_Status)`.
    fn MPI_Status_c2f08 / PMPI_Status_c2f08(c_status: *const MpiStatus, f08_status: *mut c_int) on NONE => {
        convert(c_status.cast(), "c_status", f08_status, "f08_status")
    }
}

mpi! {
    /// A Fortran 2008 status as a C status.
    fn MPI_Status_f082c / PMPI_Status_f082c(f08_status: *const c_int, c_status: *mut MpiStatus) on NONE => {
        convert(f08_status, "f08_status", c_status.cast(), "c_status")
    }
}

mpi! {
    /// A Fortran 2008 status as a Fortran `INTEGER` array status.
    fn MPI_Status_f082f / PMPI_Status_f082f(f08_status: *const c_int, f_status: *mut c_int) on NONE => {
        convert(f08_status, "f08_status", f_status, "f_status")
    }
}

mpi! {
    /// A Fortran `INTEGER` array status as a Fortran 2008 status.
    fn MPI_Status_f2f08 / PMPI_Status_f2f08(f_status: *const c_int, f08_status: *mut c_int) on NONE => {
        convert(f_status, "f_status", f08_status, "f08_status")
    }
}

macro_rules! handle_conversions {
    ($($what:literal: $c2f:ident / $pc2f:ident, $f2c:ident / $pf2c:ident;)*) => {$(
        mpi! {
            #[doc = concat!("The Fortran integer of a C `", $what, "`.")]
            fn $c2f / $pc2f(handle: Handle) -> c_int, unguarded => {
                c2f(handle)
            }
        }
        mpi! {
            #[doc = concat!("The C `", $what, "` of a Fortran integer.")]
            fn $f2c / $pf2c(handle: c_int) -> Handle, unguarded => {
                f2c(handle)
            }
        }
    )*};
}

handle_conversions! {
    "MPI_Comm": MPI_Comm_c2f / PMPI_Comm_c2f, MPI_Comm_f2c / PMPI_Comm_f2c;
    "MPI_Datatype": MPI_Type_c2f / PMPI_Type_c2f, MPI_Type_f2c / PMPI_Type_f2c;
    "MPI_Group": MPI_Group_c2f / PMPI_Group_c2f, MPI_Group_f2c / PMPI_Group_f2c;
    "MPI_Request": MPI_Request_c2f / PMPI_Request_c2f, MPI_Request_f2c / PMPI_Request_f2c;
    "MPI_File": MPI_File_c2f / PMPI_File_c2f, MPI_File_f2c / PMPI_File_f2c;
    "MPI_Win": MPI_Win_c2f / PMPI_Win_c2f, MPI_Win_f2c / PMPI_Win_f2c;
    "MPI_Op": MPI_Op_c2f / PMPI_Op_c2f, MPI_Op_f2c / PMPI_Op_f2c;
    "MPI_Info": MPI_Info_c2f / PMPI_Info_c2f, MPI_Info_f2c / PMPI_Info_f2c;
    "MPI_Errhandler": MPI_Errhandler_c2f / PMPI_Errhandler_c2f, MPI_Errhandler_f2c / PMPI_Errhandler_f2c;
    "MPI_Message": MPI_Message_c2f / PMPI_Message_c2f, MPI_Message_f2c / PMPI_Message_f2c;
    "MPI_Session": MPI_Session_c2f / PMPI_Session_c2f, MPI_Session_f2c / PMPI_Session_f2c;
}

// MPI 5.0's `MPI_X_toint`/`MPI_X_fromint` (handles as C ints, for languages that bind to the
// standard ABI) give the same integers as `MPI_X_c2f`/`MPI_X_f2c`.
handle_conversions! {
    "MPI_Comm": MPI_Comm_toint / PMPI_Comm_toint, MPI_Comm_fromint / PMPI_Comm_fromint;
    "MPI_Datatype": MPI_Type_toint / PMPI_Type_toint, MPI_Type_fromint / PMPI_Type_fromint;
    "MPI_Group": MPI_Group_toint / PMPI_Group_toint, MPI_Group_fromint / PMPI_Group_fromint;
    "MPI_Request": MPI_Request_toint / PMPI_Request_toint, MPI_Request_fromint / PMPI_Request_fromint;
    "MPI_File": MPI_File_toint / PMPI_File_toint, MPI_File_fromint / PMPI_File_fromint;
    "MPI_Win": MPI_Win_toint / PMPI_Win_toint, MPI_Win_fromint / PMPI_Win_fromint;
    "MPI_Op": MPI_Op_toint / PMPI_Op_toint, MPI_Op_fromint / PMPI_Op_fromint;
    "MPI_Info": MPI_Info_toint / PMPI_Info_toint, MPI_Info_fromint / PMPI_Info_fromint;
    "MPI_Errhandler": MPI_Errhandler_toint / PMPI_Errhandler_toint, MPI_Errhandler_fromint / PMPI_Errhandler_fromint;
    "MPI_Message": MPI_Message_toint / PMPI_Message_toint, MPI_Message_fromint / PMPI_Message_fromint;
    "MPI_Session": MPI_Session_toint / PMPI_Session_toint, MPI_Session_fromint / PMPI_Session_fromint;
}
