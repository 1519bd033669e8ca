//! Chapter 10 of MPI 5.0, the info object: `MPI_Info_*`, over the info tables of
//! [`crate::state`] and the functions of [`crate::comm`] that work on them.

use super::NONE;
use crate::abi::*;
use crate::check::out;
use crate::comm::*;
use crate::env::write_string;
use crate::error::{fail, MpiError};
use crate::p2p::count_arg;
use crate::state::with;
use std::ffi::{c_char, c_int};

mpi! {
    /// A new, empty info.
    fn MPI_Info_create / PMPI_Info_create(info: *mut Handle) on NONE => {
        *out(info, "info")? = with(|s| Ok(s.infos.insert(Vec::new())))?;
        Ok(())
    }
}

mpi! {
    /// Sets a key.
    fn MPI_Info_set / PMPI_Info_set(info: Handle, key: *const c_char, value: *const c_char) on NONE => {
        let (k, v) = (c_str(key, "key")?, c_str(value, "value")?);
        if k.len() >= MPI_MAX_INFO_KEY || k.is_empty() {
            return fail(MPI_ERR_INFO_KEY, format!("info key {k:?} is empty or too long"));
        }
        if v.len() >= MPI_MAX_INFO_VAL {
            return fail(MPI_ERR_INFO_VALUE, "info value too long");
        }
        with(|s| {
            let i = info_mut(s, info)?;
            match i.iter_mut().find(|(key, _)| *key == k) {
                Some(e) => e.1 = v,
                None => i.push((k, v)),
            }
            Ok(())
        })
    }
}

mpi! {
    /// Reads a key.
    fn MPI_Info_get / PMPI_Info_get(info: Handle, key: *const c_char, valuelen: c_int, value: *mut c_char, flag: *mut c_int) on NONE => {
        let k = c_str(key, "key")?;
        let flag = out(flag, "flag")?;
        let found = with(|s| Ok(info_mut(s, info)?.iter().find(|(key, _)| *key == k).map(|e| e.1.clone())))?;
        match found {
            Some(v) => {
                *flag = 1;
                write_string(&v, value, count_arg(valuelen)? + 1, std::ptr::null_mut())
            }
            None => { *flag = 0; Ok(()) }
        }
    }
}

mpi! {
    /// Number of keys.
    fn MPI_Info_get_nkeys / PMPI_Info_get_nkeys(info: Handle, nkeys: *mut c_int) on NONE => {
        *out(nkeys, "nkeys")? = with(|s| Ok(info_mut(s, info)?.len() as c_int))?;
        Ok(())
    }
}

mpi! {
    /// The n-th key.
    fn MPI_Info_get_nthkey / PMPI_Info_get_nthkey(info: Handle, n: c_int, key: *mut c_char) on NONE => {
        let k = with(|s| {
            let i = info_mut(s, info)?;
            usize::try_from(n).ok().and_then(|n| i.get(n)).map(|e| e.0.clone())
                .ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("info has no key number {n}")))
        })?;
        write_string(&k, key, MPI_MAX_INFO_KEY, std::ptr::null_mut())
    }
}

mpi! {
    /// Deletes a key.
    fn MPI_Info_delete / PMPI_Info_delete(info: Handle, key: *const c_char) on NONE => {
        let k = c_str(key, "key")?;
        with(|s| {
            let i = info_mut(s, info)?;
            let before = i.len();
            i.retain(|(key, _)| *key != k);
            if i.len() == before {
                return fail(MPI_ERR_INFO_NOKEY, format!("info has no key {k:?}"));
            }
            Ok(())
        })
    }
}

mpi! {
    /// Copies an info.
    fn MPI_Info_dup / PMPI_Info_dup(info: Handle, newinfo: *mut Handle) on NONE => {
        let out = out(newinfo, "newinfo")?;
        *out = with(|s| {
            let copy = info_mut(s, info)?.clone();
            Ok(s.infos.insert(copy))
        })?;
        Ok(())
    }
}

mpi! {
    /// Frees an info.
    fn MPI_Info_free / PMPI_Info_free(info: *mut Handle) on NONE => {
        let h = out(info, "info")?;
        with(|s| s.infos.remove(*h).map(drop).ok_or_else(|| MpiError::new(MPI_ERR_INFO, format!("invalid info {:#x}", *h))))?;
        *h = MPI_INFO_NULL;
        Ok(())
    }
}

mpi! {
    /// Reads a key; `*buflen` is the buffer size in, the value's size (with NUL) out.
    fn MPI_Info_get_string / PMPI_Info_get_string(info: Handle, key: *const c_char, buflen: *mut c_int, value: *mut c_char, flag: *mut c_int) on NONE => {
        let k = c_str(key, "key")?;
        let flag = out(flag, "flag")?;
        let buflen = out(buflen, "buflen")?;
        let found = with(|s| Ok(info_mut(s, info)?.iter().find(|(key, _)| *key == k).map(|e| e.1.clone())))?;
        let Some(v) = found else { *flag = 0; return Ok(()) };
        *flag = 1;
        let cap = count_arg(*buflen)?;
        if cap > 0 {
            write_string(&v, value, cap, std::ptr::null_mut())?;
        }
        *buflen = v.len() as c_int + 1;
        Ok(())
    }
}

mpi! {
    /// Length of a key's value (without the NUL).
    fn MPI_Info_get_valuelen / PMPI_Info_get_valuelen(info: Handle, key: *const c_char, valuelen: *mut c_int, flag: *mut c_int) on NONE => {
        let k = c_str(key, "key")?;
        let flag = out(flag, "flag")?;
        let found = with(|s| Ok(info_mut(s, info)?.iter().find(|(key, _)| *key == k).map(|e| e.1.len())))?;
        match found {
            Some(n) => {
                *out(valuelen, "valuelen")? = n as c_int;
                *flag = 1;
            }
            None => *flag = 0,
        }
        Ok(())
    }
}

mpi! {
    /// A new info holding what MPI_INFO_ENV holds (callable before MPI_Init).
    fn MPI_Info_create_env / PMPI_Info_create_env(_argc: c_int, _argv: *mut *mut c_char, info: *mut Handle) on NONE => {
        let out = out(info, "info")?;
        *out = with(|s| {
            let env = info_mut(s, MPI_INFO_ENV)?.clone();
            Ok(s.infos.insert(env))
        })?;
        Ok(())
    }
}
