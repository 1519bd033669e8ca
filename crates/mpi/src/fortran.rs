//! Status conversion between the C and Fortran bindings (MPI 4.1 §19.3.5): `MPI_Status_c2f`,
//! `MPI_Status_f2c`, `MPI_Status_c2f08`, `MPI_Status_f082c`, `MPI_Status_f082f`,
//! `MPI_Status_f2f08`.
//!
//! ferry has no Fortran binding of its own, but Fortran code that calls C (and C libraries that
//! take Fortran statuses) use these. `MPI_Fint` is C `int`, and all three forms of a status are
//! the same eight ints in the same order ([`MpiStatus`]): `MPI_F_STATUS_SIZE` is 8 and
//! `MPI_F_SOURCE`, `MPI_F_TAG`, `MPI_F_ERROR` are 0, 1, 2. Each conversion is therefore a copy of
//! all eight, hidden fields (count, cancelled) included, so nothing is lost in a round trip.
//! The `*_STATUS_IGNORE` values (null pointers, as `MPI_STATUS_IGNORE` is) are not statuses:
//! passing one is MPI_ERR_ARG.

use crate::abi::*;
use crate::error::{MpiError, Res};
use crate::NONE;
use std::ffi::c_int;

/// `MPI_F_STATUS_SIZE`: the `MPI_Fint`s of a Fortran status.
pub const MPI_F_STATUS_SIZE: usize = 8;
/// `MPI_F_SOURCE`: index of the source in a Fortran status (C indexing).
pub const MPI_F_SOURCE: usize = 0;
/// `MPI_F_TAG`: index of the tag in a Fortran status.
pub const MPI_F_TAG: usize = 1;
/// `MPI_F_ERROR`: index of the error code in a Fortran status.
pub const MPI_F_ERROR: usize = 2;

const _: () = assert!(std::mem::size_of::<MpiStatus>() == MPI_F_STATUS_SIZE * 4);
const _: () = assert!(std::mem::size_of::<c_int>() == 4);

/// The eight `MPI_Fint`s of any form of status at `p` (C, Fortran array or Fortran 2008 type:
/// all are `#[repr(C)]`-compatible arrays of eight ints).
unsafe fn read8(p: *const c_int, what: &str) -> Res<[c_int; MPI_F_STATUS_SIZE]> {
    if p.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("{what} is NULL (a *_STATUS_IGNORE is not a status)"),
        ));
    }
    // SAFETY: the caller passes a status of MPI_F_STATUS_SIZE ints (MPI's contract); the
    // read is unaligned-safe for the int-aligned array.
    Ok(unsafe { std::ptr::read_unaligned(p.cast::<[c_int; MPI_F_STATUS_SIZE]>()) })
}

/// Writes eight ints to the status at `p`.
unsafe fn write8(p: *mut c_int, v: [c_int; MPI_F_STATUS_SIZE], what: &str) -> Res {
    if p.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("{what} is NULL (a *_STATUS_IGNORE is not a status)"),
        ));
    }
    // SAFETY: the caller passes room for a status of MPI_F_STATUS_SIZE ints.
    unsafe { std::ptr::write_unaligned(p.cast::<[c_int; MPI_F_STATUS_SIZE]>(), v) };
    Ok(())
}

/// Copies a status of one form to another.
unsafe fn convert(from: *const c_int, from_name: &str, to: *mut c_int, to_name: &str) -> Res {
    let v = read8(from, from_name)?;
    write8(to, v, to_name)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_fields_sit_at_the_fortran_indices() {
        let mut c = MpiStatus {
            source: 3,
            tag: 7,
            error: 11,
            ..MpiStatus::default()
        };
        c.set_count(0x1_0000_0005);
        let mut f = [0 as c_int; MPI_F_STATUS_SIZE];
        // SAFETY: both point to eight ints.
        unsafe { convert((&c as *const MpiStatus).cast(), "c", f.as_mut_ptr(), "f") }
            .expect("copy");
        assert_eq!((f[MPI_F_SOURCE], f[MPI_F_TAG], f[MPI_F_ERROR]), (3, 7, 11));
        let mut back = MpiStatus::default();
        // SAFETY: as above.
        unsafe { convert(f.as_ptr(), "f", (&mut back as *mut MpiStatus).cast(), "c") }
            .expect("copy back");
        assert_eq!(back.count(), 0x1_0000_0005);
        assert_eq!((back.source, back.tag, back.error), (3, 7, 11));
    }

    #[test]
    fn an_ignored_status_is_an_argument_error() {
        let mut f = [0 as c_int; MPI_F_STATUS_SIZE];
        // SAFETY: the null source is refused before any read.
        let e = unsafe { convert(std::ptr::null(), "c_status", f.as_mut_ptr(), "f") }
            .expect_err("null");
        assert_eq!(e.class, MPI_ERR_ARG);
    }
}
