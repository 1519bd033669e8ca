//! Chapter 9 of MPI 5.0, environmental management: versions, the processor name, memory
//! allocation, clocks, error handlers of communicators, error classes, codes and strings, and
//! `MPI_Get_hw_resource_info`. The semantics are in [`crate::env`], [`crate::comm`] and
//! [`crate::error`].

use super::guards::handle_error;
use super::NONE;
use crate::abi::*;
use crate::check::out;
use crate::comm::*;
use crate::env::{write_string, *};
use crate::error::{fail, CommErrhandlerFn, MpiError};
use crate::mpi5::*;
use crate::state::with;
use std::ffi::{c_char, c_int, c_void};

mpi! {
    /// Creates an error handler from a function.
    fn MPI_Comm_create_errhandler / PMPI_Comm_create_errhandler(function: Option<CommErrhandlerFn>, errhandler: *mut Handle) on NONE => {
        let out = out(errhandler, "errhandler")?;
        *out = create_errhandler(function)?;
        Ok(())
    }
}

mpi! {
    /// Frees an error handler.
    fn MPI_Errhandler_free / PMPI_Errhandler_free(errhandler: *mut Handle) on NONE => {
        let h = out(errhandler, "errhandler")?;
        // Allowed before initialization and after finalization (as MPI_Session_create_errhandler).
        with(|s| {
            valid_errhandler(s, *h)?;
            // Communicators using it keep working: ferry keeps created handlers alive.
            Ok(())
        })?;
        *h = MPI_ERRHANDLER_NULL;
        Ok(())
    }
}

mpi! {
    /// Sets a communicator's error handler.
    fn MPI_Comm_set_errhandler / PMPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) on comm => {
        set_comm_errhandler(comm, errhandler)
    }
}

mpi! {
    /// A communicator's error handler.
    fn MPI_Comm_get_errhandler / PMPI_Comm_get_errhandler(comm: Handle, errhandler: *mut Handle) on comm => {
        let out = out(errhandler, "errhandler")?;
        *out = comm_errhandler(comm)?;
        Ok(())
    }
}

mpi! {
    /// MPI_Comm_call_errhandler: invokes the handler as if a call on `comm` had failed.
    fn MPI_Comm_call_errhandler / PMPI_Comm_call_errhandler(comm: Handle, errorcode: c_int) -> c_int, unguarded => {
        let rc = handle_error(
            "MPI_Comm_call_errhandler",
            comm,
            MpiError::new(errorcode, "raised by the program"),
        );
        crate::error::called_errhandler(rc, errorcode)
    }
}

mpi! {
    /// Seconds on the monotonic clock.
    fn MPI_Wtime / PMPI_Wtime() -> f64, unguarded => {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    }
}

mpi! {
    /// Resolution of MPI_Wtime.
    fn MPI_Wtick / PMPI_Wtick() -> f64, unguarded => {
        1e-9
    }
}

mpi! {
    /// The host name.
    fn MPI_Get_processor_name / PMPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) on NONE => {
        let mut buf = [0u8; 256];
        // SAFETY: `buf` is writable for its length.
        let host = if libc::gethostname(buf.as_mut_ptr() as *mut c_char, buf.len()) == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            String::from_utf8_lossy(&buf[..end]).into_owned()
        } else {
            "localhost".into()
        };
        write_string(&host, name, MPI_MAX_PROCESSOR_NAME, resultlen)
    }
}

mpi! {
    /// The MPI version ferry implements.
    fn MPI_Get_version / PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) on NONE => {
        let (Some(v), Some(sv)) = (version.as_mut(), subversion.as_mut()) else { return fail(MPI_ERR_ARG, "NULL argument") };
        (*v, *sv) = (MPI_VERSION, MPI_SUBVERSION);
        Ok(())
    }
}

mpi! {
    /// The library's name and version.
    fn MPI_Get_library_version / PMPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) on NONE => {
        write_string(LIBRARY_VERSION, version, MPI_MAX_LIBRARY_VERSION_STRING, resultlen)
    }
}

mpi! {
    /// The text of an error code.
    fn MPI_Error_string / PMPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) on NONE => {
        let (_, text) = lookup_code(errorcode)?;
        write_string(&text, string, MPI_MAX_ERROR_STRING, resultlen)
    }
}

mpi! {
    /// The class of an error code.
    fn MPI_Error_class / PMPI_Error_class(errorcode: c_int, errorclass: *mut c_int) on NONE => {
        let Some(out) = errorclass.as_mut() else { return fail(MPI_ERR_ARG, "errorclass is NULL") };
        *out = lookup_code(errorcode)?.0;
        Ok(())
    }
}

mpi! {
    /// A new error class.
    fn MPI_Add_error_class / PMPI_Add_error_class(errorclass: *mut c_int) on NONE => {
        let Some(out) = errorclass.as_mut() else { return fail(MPI_ERR_ARG, "errorclass is NULL") };
        *out = add_code(None)?;
        Ok(())
    }
}

mpi! {
    /// A new error code in a class.
    fn MPI_Add_error_code / PMPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) on NONE => {
        let Some(out) = errorcode.as_mut() else { return fail(MPI_ERR_ARG, "errorcode is NULL") };
        let (class, _) = lookup_code(errorclass)?;
        if class != errorclass {
            return fail(MPI_ERR_ARG, format!("{errorclass} is an error code, not a class"));
        }
        *out = add_code(Some(errorclass))?;
        Ok(())
    }
}

mpi! {
    /// The text of an added error code or class.
    fn MPI_Add_error_string / PMPI_Add_error_string(errorcode: c_int, string: *const c_char) on NONE => {
        if string.is_null() {
            return fail(MPI_ERR_ARG, "string is NULL");
        }
        let text = std::ffi::CStr::from_ptr(string).to_string_lossy().into_owned();
        if text.len() >= MPI_MAX_ERROR_STRING {
            return fail(MPI_ERR_ARG, "error string longer than MPI_MAX_ERROR_STRING");
        }
        with(|s| {
            user_error(s, errorcode)?.1 = text;
            Ok(())
        })
    }
}

mpi! {
    /// Removes an error class that MPI_Add_error_class made; its codes must be removed first.
    fn MPI_Remove_error_class / PMPI_Remove_error_class(errorclass: c_int) on NONE => {
        with(|s| {
            let (class, _) = user_error(s, errorclass)?;
            if *class != errorclass {
                return fail(MPI_ERR_ARG, format!("{errorclass} is an error code, not a class"));
            }
            let codes = s.user_errors.iter().flatten().filter(|(c, _)| *c == errorclass).count();
            if codes > 1 {
                return fail(MPI_ERR_ARG, format!("error class {errorclass} still has {} error codes (MPI_Remove_error_code them first)", codes - 1));
            }
            if !s.user_errors[(errorclass - MPI_ERR_LASTCODE - 1) as usize].as_ref().is_none_or(|(_, text)| text.is_empty()) {
                return fail(MPI_ERR_ARG, format!("error class {errorclass} still has a string (MPI_Remove_error_string it first)"));
            }
            s.user_errors[(errorclass - MPI_ERR_LASTCODE - 1) as usize] = None;
            Ok(())
        })
    }
}

mpi! {
    /// Removes an error code that MPI_Add_error_code made.
    fn MPI_Remove_error_code / PMPI_Remove_error_code(errorcode: c_int) on NONE => {
        with(|s| {
            let (class, _) = user_error(s, errorcode)?;
            if *class == errorcode {
                return fail(MPI_ERR_ARG, format!("{errorcode} is an error class (MPI_Remove_error_class)"));
            }
            if !s.user_errors[(errorcode - MPI_ERR_LASTCODE - 1) as usize].as_ref().is_none_or(|(_, text)| text.is_empty()) {
                return fail(MPI_ERR_ARG, format!("error code {errorcode} still has a string (MPI_Remove_error_string it first)"));
            }
            s.user_errors[(errorcode - MPI_ERR_LASTCODE - 1) as usize] = None;
            Ok(())
        })
    }
}

mpi! {
    /// Removes the text MPI_Add_error_string gave an added error code or class.
    fn MPI_Remove_error_string / PMPI_Remove_error_string(errorcode: c_int) on NONE => {
        with(|s| {
            let entry = user_error(s, errorcode)?;
            if entry.1.is_empty() {
                return fail(MPI_ERR_ARG, format!("error code {errorcode} has no string to remove"));
            }
            entry.1.clear();
            Ok(())
        })
    }
}

mpi! {
    /// Memory for message buffers (plain heap memory: ferry needs no registration).
    fn MPI_Alloc_mem / PMPI_Alloc_mem(size: isize, _info: Handle, baseptr: *mut c_void) on NONE => {
        let Some(out) = (baseptr as *mut *mut c_void).as_mut() else { return fail(MPI_ERR_ARG, "baseptr is NULL") };
        let Ok(n) = usize::try_from(size) else { return fail(MPI_ERR_ARG, format!("negative size {size}")) };
        // SAFETY: malloc of n bytes (at least 1, so the pointer is unique); freed by MPI_Free_mem.
        let p = libc::malloc(n.max(1));
        if p.is_null() {
            return fail(MPI_ERR_NO_MEM, format!("cannot allocate {n} bytes"));
        }
        *out = p;
        Ok(())
    }
}

mpi! {
    /// Frees memory from MPI_Alloc_mem.
    fn MPI_Free_mem / PMPI_Free_mem(base: *mut c_void) on NONE => {
        // SAFETY: `base` came from MPI_Alloc_mem (malloc) or is NULL.
        libc::free(base);
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
