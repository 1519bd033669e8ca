//! Calls MPI 5.0 added beside its standard ABI: the ABI's own queries (`MPI_Abi_*`), handle
//! conversion to and from `int` (`MPI_X_toint`/`_fromint`, in [`crate::fortran`]), status
//! field accessors, non-destructive completion queries of many requests, the pair type of a
//! value and an index (`MPI_Type_get_value_index`) and `MPI_Get_hw_resource_info`.
//!
//! ferry has no Fortran bindings of its own. A Fortran layer built apart on the standard ABI
//! tells the library its sizes (`MPI_Abi_set_fortran_info`) and the bit patterns of its
//! `.TRUE.`/`.FALSE.` (`MPI_Abi_set_fortran_booleans`); both are recorded and reported back.
//! Without them, `MPI_Abi_get_fortran_info` reports the sizes ferry's predefined Fortran
//! datatypes have (INTEGER, LOGICAL and REAL of 4 bytes, DOUBLE PRECISION of 8).

use crate::abi::*;
use crate::error::{fail, MpiError, Res};
use crate::state::State;
use std::ffi::c_int;

/// A new info object holding `pairs`.
pub(crate) fn new_info(s: &mut State, pairs: &[(&str, String)]) -> Handle {
    s.infos.insert(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

/// The Fortran facts ferry assumes until a Fortran layer sets its own: the sizes of the
/// default kinds, and for each sized type (`MPI_LOGICAL1` … `MPI_COMPLEX32`,
/// `MPI_DOUBLE_COMPLEX`) whether the library supports it (`mpi_<name>_supported`): it does when
/// the predefined type is in its table with a size.
pub(crate) fn default_fortran_info() -> Vec<(String, String)> {
    let sizes = [
        ("mpi_integer_size", "4"),
        ("mpi_logical_size", "4"),
        ("mpi_real_size", "4"),
        ("mpi_double_precision_size", "8"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()));
    const SIZED: [(&str, &[&str]); 5] = [
        ("logical", &["1", "2", "4", "8", "16"]),
        ("integer", &["1", "2", "4", "8", "16"]),
        ("real", &["2", "4", "8", "16"]),
        ("complex", &["4", "8", "16", "32"]),
        ("double_complex", &[""]),
    ];
    let supported = SIZED.iter().flat_map(|(class, sizes)| {
        sizes.iter().map(move |size| {
            let name = format!("MPI_{}{size}", class.to_uppercase());
            let known = crate::datatype::Builtin::ALL
                .iter()
                .any(|b| b.name() == name && b.size() > 0);
            (format!("mpi_{class}{size}_supported"), known.to_string())
        })
    });
    sizes.chain(supported).collect()
}

/// Sizes of Fortran LOGICAL kinds the boolean calls accept.
pub(crate) fn logical_size_arg(logical_size: c_int) -> Res<usize> {
    match logical_size {
        1 | 2 | 4 | 8 | 16 => Ok(logical_size as usize),
        _ => fail(
            MPI_ERR_ARG,
            format!("logical_size {logical_size} is not 1, 2, 4, 8 or 16"),
        ),
    }
}

// ---- status fields ----

pub(crate) unsafe fn status_arg<'a>(status: *mut MpiStatus) -> Res<&'a mut MpiStatus> {
    // SAFETY: this function's contract is the unsafe operations' own: `status`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        status.as_mut().ok_or_else(|| {
            MpiError::new(
                MPI_ERR_ARG,
                "status is NULL (MPI_STATUS_IGNORE has no fields)",
            )
        })
    }
}

// ---- completion queries that complete nothing ----

pub(crate) unsafe fn requests_arg<'a>(count: c_int, requests: *mut Handle) -> Res<&'a [Handle]> {
    // SAFETY: this function's contract is the unsafe operations' own: `requests`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let n = usize::try_from(count)
            .map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("negative count {count}")))?;
        if n == 0 {
            return Ok(&[]);
        }
        if requests.is_null() {
            return fail(MPI_ERR_ARG, "array_of_requests is NULL");
        }
        // SAFETY: the caller passes `count` requests.
        Ok(std::slice::from_raw_parts(requests, n))
    }
}

/// The status slot `i` of an array of statuses, or ignored.
pub(crate) unsafe fn nth_status(statuses: *mut MpiStatus, i: usize) -> *mut MpiStatus {
    // SAFETY: this function's contract is the unsafe operations' own: `statuses`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if statuses.is_null() {
            statuses
        } else {
            statuses.add(i)
        }
    }
}

// ---- datatypes ----
