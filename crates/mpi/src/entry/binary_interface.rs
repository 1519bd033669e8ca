//! Chapter 20 of MPI 5.0, the application binary interface: the ABI's own queries
//! (`MPI_Abi_*`), over [`crate::mpi5`].

use super::NONE;
use crate::abi::*;
use crate::check::out;
use crate::error::fail;
use crate::mpi5::*;
use crate::state::with;
use std::ffi::{c_int, c_void};

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
