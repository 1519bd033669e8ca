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
use crate::check::out;
use crate::datatype::Builtin;
use crate::error::{fail, MpiError, Res};
use crate::p2p::request_status;
use crate::state::{with, State};
use crate::NONE;
use std::ffi::{c_int, c_void};

/// A new info object holding `pairs`.
fn new_info(s: &mut State, pairs: &[(&str, String)]) -> Handle {
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
fn default_fortran_info() -> Vec<(String, String)> {
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

mpi! {
    /// The version of the standard ABI the library implements (callable before MPI_Init).
    fn MPI_Abi_get_version / PMPI_Abi_get_version(abi_major: *mut c_int, abi_minor: *mut c_int) on NONE => {
        let major = out(abi_major, "abi_major")?;
        let minor = out(abi_minor, "abi_minor")?;
        (*major, *minor) = (MPI_ABI_VERSION, MPI_ABI_SUBVERSION);
        Ok(())
    }
}
mpi! {
    /// Facts of the ABI: the sizes of MPI_Aint, MPI_Count and MPI_Offset, as an info object.
    fn MPI_Abi_get_info / PMPI_Abi_get_info(info: *mut Handle) on NONE => {
        let info = out(info, "info")?;
        *info = with(|s| Ok(new_info(s, &[
            ("mpi_aint_size", std::mem::size_of::<isize>().to_string()),
            ("mpi_count_size", std::mem::size_of::<i64>().to_string()),
            ("mpi_offset_size", std::mem::size_of::<i64>().to_string()),
        ])))?;
        Ok(())
    }
}
mpi! {
    /// The Fortran facts the library works with (set by MPI_Abi_set_fortran_info, else ferry's).
    fn MPI_Abi_get_fortran_info / PMPI_Abi_get_fortran_info(info: *mut Handle) on NONE => {
        let info = out(info, "info")?;
        *info = with(|s| {
            let pairs = s.fortran_info.clone().unwrap_or_else(default_fortran_info);
            Ok(s.infos.insert(pairs))
        })?;
        Ok(())
    }
}
mpi! {
    /// Records the Fortran facts of a Fortran layer (its keys replace ferry's of the same name).
    fn MPI_Abi_set_fortran_info / PMPI_Abi_set_fortran_info(info: Handle) on NONE => {
        with(|s| {
            let Some(given) = s.infos.get(info).cloned() else {
                return fail(MPI_ERR_INFO, format!("invalid info {info:#x}"));
            };
            let mut pairs = s.fortran_info.take().unwrap_or_else(default_fortran_info);
            for (k, v) in given {
                match pairs.iter_mut().find(|(key, _)| *key == k) {
                    Some(slot) => slot.1 = v,
                    None => pairs.push((k, v)),
                }
            }
            s.fortran_info = Some(pairs);
            Ok(())
        })
    }
}

/// Sizes of Fortran LOGICAL kinds the boolean calls accept.
fn logical_size_arg(logical_size: c_int) -> Res<usize> {
    match logical_size {
        1 | 2 | 4 | 8 | 16 => Ok(logical_size as usize),
        _ => fail(
            MPI_ERR_ARG,
            format!("logical_size {logical_size} is not 1, 2, 4, 8 or 16"),
        ),
    }
}

mpi! {
    /// Records the bit patterns of .TRUE. and .FALSE. for LOGICALs of `logical_size` bytes.
    fn MPI_Abi_set_fortran_booleans / PMPI_Abi_set_fortran_booleans(logical_size: c_int, logical_true: *mut c_void, logical_false: *mut c_void) on NONE => {
        let n = logical_size_arg(logical_size)?;
        if logical_true.is_null() || logical_false.is_null() {
            return fail(MPI_ERR_ARG, "logical_true or logical_false is NULL");
        }
        // SAFETY: the caller passes two values of `logical_size` bytes.
        let (t, f) = unsafe {
            (
                std::slice::from_raw_parts(logical_true as *const u8, n).to_vec(),
                std::slice::from_raw_parts(logical_false as *const u8, n).to_vec(),
            )
        };
        if t == f {
            return fail(MPI_ERR_ARG, ".TRUE. and .FALSE. have the same bits");
        }
        with(|s| {
            s.fortran_booleans.insert(n, (t, f));
            Ok(())
        })
    }
}
mpi! {
    /// The bit patterns MPI_Abi_set_fortran_booleans recorded (`*is_set` 0 if none were).
    fn MPI_Abi_get_fortran_booleans / PMPI_Abi_get_fortran_booleans(logical_size: c_int, logical_true: *mut c_void, logical_false: *mut c_void, is_set: *mut c_int) on NONE => {
        let n = logical_size_arg(logical_size)?;
        let is_set = out(is_set, "is_set")?;
        let known = with(|s| Ok(s.fortran_booleans.get(&n).cloned()))?;
        *is_set = known.is_some() as c_int;
        if let Some((t, f)) = known {
            if logical_true.is_null() || logical_false.is_null() {
                return fail(MPI_ERR_ARG, "logical_true or logical_false is NULL");
            }
            // SAFETY: the caller passes room for two values of `logical_size` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(t.as_ptr(), logical_true as *mut u8, n);
                std::ptr::copy_nonoverlapping(f.as_ptr(), logical_false as *mut u8, n);
            }
        }
        Ok(())
    }
}

mpi! {
    /// Hardware resources this process can query: the memory it shares with the processes of
    /// its host (`mpi_shared_memory`), the one kind ferry knows (MPI_Comm_split_type uses it).
    fn MPI_Get_hw_resource_info / PMPI_Get_hw_resource_info(hw_info: *mut Handle) on NONE => {
        let info = out(hw_info, "hw_info")?;
        *info = with(|s| Ok(new_info(s, &[("mpi_shared_memory", "true".to_string())])))?;
        Ok(())
    }
}

// ---- status fields ----

unsafe fn status_arg<'a>(status: *mut MpiStatus) -> Res<&'a mut MpiStatus> {
    status.as_mut().ok_or_else(|| {
        MpiError::new(
            MPI_ERR_ARG,
            "status is NULL (MPI_STATUS_IGNORE has no fields)",
        )
    })
}

mpi! {
    /// The MPI_SOURCE field of a status.
    fn MPI_Status_get_source / PMPI_Status_get_source(status: *mut MpiStatus, source: *mut c_int) on NONE => {
        *out(source, "source")? = status_arg(status)?.source;
        Ok(())
    }
}
mpi! {
    /// The MPI_TAG field of a status.
    fn MPI_Status_get_tag / PMPI_Status_get_tag(status: *mut MpiStatus, tag: *mut c_int) on NONE => {
        *out(tag, "tag")? = status_arg(status)?.tag;
        Ok(())
    }
}
mpi! {
    /// The MPI_ERROR field of a status.
    fn MPI_Status_get_error / PMPI_Status_get_error(status: *mut MpiStatus, error: *mut c_int) on NONE => {
        *out(error, "error")? = status_arg(status)?.error;
        Ok(())
    }
}
mpi! {
    /// Sets the MPI_SOURCE field of a status.
    fn MPI_Status_set_source / PMPI_Status_set_source(status: *mut MpiStatus, source: c_int) on NONE => {
        status_arg(status)?.source = source;
        Ok(())
    }
}
mpi! {
    /// Sets the MPI_TAG field of a status.
    fn MPI_Status_set_tag / PMPI_Status_set_tag(status: *mut MpiStatus, tag: c_int) on NONE => {
        status_arg(status)?.tag = tag;
        Ok(())
    }
}
mpi! {
    /// Sets the MPI_ERROR field of a status.
    fn MPI_Status_set_error / PMPI_Status_set_error(status: *mut MpiStatus, error: c_int) on NONE => {
        status_arg(status)?.error = error;
        Ok(())
    }
}

// ---- completion queries that complete nothing ----

unsafe fn requests_arg<'a>(count: c_int, requests: *mut Handle) -> Res<&'a [Handle]> {
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

/// The status slot `i` of an array of statuses, or ignored.
unsafe fn nth_status(statuses: *mut MpiStatus, i: usize) -> *mut MpiStatus {
    if statuses.is_null() {
        statuses
    } else {
        statuses.add(i)
    }
}

mpi! {
    /// Whether any of the requests is done (its index and status), completing none of them.
    fn MPI_Request_get_status_any / PMPI_Request_get_status_any(count: c_int, array_of_requests: *mut Handle, index: *mut c_int, flag: *mut c_int, status: *mut MpiStatus) on NONE => {
        let requests = requests_arg(count, array_of_requests)?;
        let index = out(index, "index")?;
        let flag = out(flag, "flag")?;
        *index = MPI_UNDEFINED;
        // No active request: flag set, index MPI_UNDEFINED, an empty status (as MPI_Testany).
        *flag = 1;
        for (i, &r) in requests.iter().enumerate() {
            if r == MPI_REQUEST_NULL {
                continue;
            }
            let mut done = 0;
            request_status(r, &mut done, status)?;
            if done != 0 {
                *index = i as c_int;
                return Ok(());
            }
            *flag = 0;
        }
        if *flag != 0 {
            if let Some(st) = status.as_mut() {
                *st = MpiStatus { source: MPI_ANY_SOURCE, tag: MPI_ANY_TAG, ..MpiStatus::default() };
            }
        }
        Ok(())
    }
}
mpi! {
    /// Whether all the requests are done (and then their statuses), completing none of them.
    fn MPI_Request_get_status_all / PMPI_Request_get_status_all(count: c_int, array_of_requests: *mut Handle, flag: *mut c_int, array_of_statuses: *mut MpiStatus) on NONE => {
        let requests = requests_arg(count, array_of_requests)?;
        let flag = out(flag, "flag")?;
        // First whether all are done, then their statuses: none is written unless all are.
        for &r in requests {
            let mut done = 0;
            request_status(r, &mut done, std::ptr::null_mut())?;
            if done == 0 {
                *flag = 0;
                return Ok(());
            }
        }
        for (i, &r) in requests.iter().enumerate() {
            let mut done = 0;
            request_status(r, &mut done, nth_status(array_of_statuses, i))?;
        }
        *flag = 1;
        Ok(())
    }
}
mpi! {
    /// The requests that are done (indices and statuses), completing none of them.
    fn MPI_Request_get_status_some / PMPI_Request_get_status_some(incount: c_int, array_of_requests: *mut Handle, outcount: *mut c_int, array_of_indices: *mut c_int, array_of_statuses: *mut MpiStatus) on NONE => {
        let requests = requests_arg(incount, array_of_requests)?;
        let outcount = out(outcount, "outcount")?;
        if requests.iter().all(|&r| r == MPI_REQUEST_NULL) {
            *outcount = MPI_UNDEFINED;
            return Ok(());
        }
        if array_of_indices.is_null() {
            return fail(MPI_ERR_ARG, "array_of_indices is NULL");
        }
        let mut n = 0usize;
        for (i, &r) in requests.iter().enumerate() {
            if r == MPI_REQUEST_NULL {
                continue;
            }
            let mut done = 0;
            request_status(r, &mut done, nth_status(array_of_statuses, n))?;
            if done != 0 {
                // SAFETY: the caller passes room for `incount` indices.
                *array_of_indices.add(n) = i as c_int;
                n += 1;
            }
        }
        *outcount = n as c_int;
        Ok(())
    }
}

// ---- datatypes ----

mpi! {
    /// The predefined pair type (MPI_FLOAT_INT, MPI_2INT, ...) of a value type and an index
    /// type, or MPI_DATATYPE_NULL when MPI predefines none for them.
    fn MPI_Type_get_value_index / PMPI_Type_get_value_index(value_type: Handle, index_type: Handle, pair_type: *mut Handle) on NONE => {
        let pair = out(pair_type, "pair_type")?;
        with(|s| s.datatype(value_type).and(s.datatype(index_type)).map(drop))?;
        use Builtin as B;
        let found = match (Builtin::from_handle(value_type), Builtin::from_handle(index_type)) {
            (Some(B::Float), Some(B::Int)) => Some(B::FloatInt),
            (Some(B::Double), Some(B::Int)) => Some(B::DoubleInt),
            (Some(B::Long), Some(B::Int)) => Some(B::LongInt),
            (Some(B::Int), Some(B::Int)) => Some(B::TwoInt),
            (Some(B::Short), Some(B::Int)) => Some(B::ShortInt),
            (Some(B::LongDouble), Some(B::Int)) => Some(B::LongDoubleInt),
            (Some(B::Real), Some(B::Real)) => Some(B::TwoReal),
            (Some(B::DoublePrecision), Some(B::DoublePrecision)) => Some(B::TwoDoublePrecision),
            (Some(B::Integer), Some(B::Integer)) => Some(B::TwoInteger),
            _ => None,
        };
        *pair = found.map_or(MPI_DATATYPE_NULL, |b| b.handle());
        Ok(())
    }
}
