//! Status conversion between the C and Fortran bindings (MPI 4.1 §19.3.5): `MPI_Status_c2f`,
//! `MPI_Status_f2c`, `MPI_Status_c2f08`, `MPI_Status_f082c`, `MPI_Status_f082f`,
//! `MPI_Status_f2f08`; and handle conversion (§19.3.4): `MPI_Comm_c2f`, `MPI_Comm_f2c` and the
//! same pair for every other handle type.
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
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Mutex, PoisonError};

/// `MPI_F_STATUS_SIZE`: the `MPI_Fint`s of a Fortran status.
pub(crate) const MPI_F_STATUS_SIZE: usize = 8;
/// `MPI_F_SOURCE`: index of the source in a Fortran status (C indexing).
#[cfg(test)] // only the tests read a Fortran status field by its index
pub(crate) const MPI_F_SOURCE: usize = 0;
/// `MPI_F_TAG`: index of the tag in a Fortran status.
#[cfg(test)]
pub(crate) const MPI_F_TAG: usize = 1;
/// `MPI_F_ERROR`: index of the error code in a Fortran status.
#[cfg(test)]
pub(crate) const MPI_F_ERROR: usize = 2;

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
pub(crate) unsafe fn convert(
    from: *const c_int,
    from_name: &str,
    to: *mut c_int,
    to_name: &str,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `from` and `to`, as the
    // caller promises, are NULL or valid for what the MPI call it serves reads and writes through
    // them.
    unsafe {
        let v = read8(from, from_name)?;
        write8(to, v, to_name)
    }
}

/// The first Fortran integer given to a created handle; predefined handles (all below it in the
/// standard ABI) keep their value.
const FIRST_CREATED: c_int = 0x1000;

/// What [`f2c`] returns for an integer no handle was converted to: no table's kind, so every
/// call that takes it reports an invalid handle (MPI 4.1 §19.3.4 asks for an invalid handle).
const INVALID: Handle = usize::MAX >> 8;

/// Created handles are pointer-sized and an `MPI_Fint` is a C `int`, so a conversion hands out
/// the next free integer and remembers it. An entry outlives the object: the handle's
/// generation already makes a freed one invalid, and a program converts few handles.
#[derive(Default)]
struct Registry {
    handles: Vec<Handle>,
    index: HashMap<Handle, c_int>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The `MPI_Fint` of any handle. Never unwinds: these functions return a value, not an error.
pub(crate) fn c2f(h: Handle) -> c_int {
    if h < FIRST_CREATED as usize {
        return h as c_int;
    }
    std::panic::catch_unwind(|| {
        let mut guard = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
        let r = guard.get_or_insert_with(Registry::default);
        if let Some(&f) = r.index.get(&h) {
            return f;
        }
        let Some(f) = c_int::try_from(r.handles.len())
            .ok()
            .and_then(|i| i.checked_add(FIRST_CREATED))
        else {
            return -1; // 2^31 conversions: no integer left, -1 converts back to an invalid handle
        };
        r.handles.push(h);
        r.index.insert(h, f);
        f
    })
    .unwrap_or(-1)
}

/// The handle of an `MPI_Fint` that [`c2f`] gave out (or a predefined handle's own value).
pub(crate) fn f2c(f: c_int) -> Handle {
    if (0..FIRST_CREATED).contains(&f) {
        return f as Handle;
    }
    std::panic::catch_unwind(|| {
        let guard = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
        let i = usize::try_from(f.wrapping_sub(FIRST_CREATED)).ok();
        guard
            .as_ref()
            .zip(i)
            .and_then(|(r, i)| r.handles.get(i).copied())
            .unwrap_or(INVALID)
    })
    .unwrap_or(INVALID)
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

    #[test]
    fn handles_survive_a_round_trip_through_fortran_integers() {
        // Predefined handles keep their value.
        assert_eq!(f2c(c2f(MPI_COMM_WORLD)), MPI_COMM_WORLD);
        assert_eq!(c2f(MPI_COMM_WORLD), MPI_COMM_WORLD as c_int);
        // Created ones get small integers of their own, the same one each time.
        let (a, b) = ((3usize << 56) | (5 << 32) | 7, (1usize << 56) | 9);
        let (fa, fb) = (c2f(a), c2f(b));
        assert!(fa >= FIRST_CREATED && fb >= FIRST_CREATED && fa != fb);
        assert_eq!(c2f(a), fa);
        assert_eq!((f2c(fa), f2c(fb)), (a, b));
        // An integer nobody was given is no handle.
        assert_eq!(f2c(c_int::MAX), INVALID);
        assert_eq!(f2c(-5), INVALID);
    }
}
