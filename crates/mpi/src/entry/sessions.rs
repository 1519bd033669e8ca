//! Chapter 11 of MPI 5.0, the sessions model (§11.3): `MPI_Session_*`, process sets, groups
//! from them and `MPI_Comm_create_from_group`, over [`crate::session`].

use super::guards::handle_error;
use super::NONE;
use crate::abi::*;
use crate::check::out;
use crate::comm::{c_str, new_errhandler, new_group, register, valid_errhandler};
use crate::env::write_string;
use crate::error::{called_errhandler, fail, CommErrhandlerFn, MpiError};
use crate::session::*;
use crate::state::{running, with};
use std::ffi::{c_char, c_int};

mpi! {
    /// Opens a session (starting the runtime if MPI_Init has not).
    fn MPI_Session_init / PMPI_Session_init(info: Handle, errhandler: Handle, session: *mut Handle) on NONE => {
        let out = out(session, "session")?;
        let asked = with(|s| {
            if errhandler != MPI_ERRHANDLER_NULL {
                valid_errhandler(s, errhandler)?;
            }
            let value = s.infos.get(info).and_then(|kv| {
                kv.iter().find(|(k, _)| k == "thread_level").map(|(_, v)| v.clone())
            });
            Ok(value)
        })?;
        // The `thread_level` hint names a level (MPI 4.1 §11.3.1); FUNNELED without one.
        let required = asked
            .and_then(|v| {
                THREAD_LEVELS
                    .iter()
                    .find(|(_, name)| v.trim().eq_ignore_ascii_case(name))
                    .map(|&(l, _)| l)
            })
            .unwrap_or(MPI_THREAD_FUNNELED);
        crate::env::init(required, false)?;
        *out = running(|s| Ok(s.sessions.insert(errhandler)))?;
        Ok(())
    }
}

mpi! {
    /// Closes a session (the last one, after MPI_Finalize or without MPI_Init, shuts MPI down).
    fn MPI_Session_finalize / PMPI_Session_finalize(session: *mut Handle) on NONE => {
        let h = out(session, "session")?;
        let last = running(|s| {
            session_arg(s, *h)?;
            s.sessions.remove(*h);
            Ok(s.sessions.is_empty() && !s.world_model)
        })?;
        *h = MPI_SESSION_NULL;
        if last {
            crate::env::shutdown()?;
        }
        Ok(())
    }
}

mpi! {
    /// The hints of a session: its thread level.
    fn MPI_Session_get_info / PMPI_Session_get_info(session: Handle, info_used: *mut Handle) on session => {
        let out = out(info_used, "info_used")?;
        *out = running(|s| {
            session_arg(s, session)?;
            let level = thread_level_name(s.thread_level).to_string();
            Ok(s.infos.insert(vec![("thread_level".to_string(), level)]))
        })?;
        Ok(())
    }
}

mpi! {
    /// How many process sets a session has.
    fn MPI_Session_get_num_psets / PMPI_Session_get_num_psets(session: Handle, _info: Handle, npset_names: *mut c_int) on session => {
        let out = out(npset_names, "npset_names")?;
        running(|s| session_arg(s, session))?;
        *out = PSETS.len() as c_int;
        Ok(())
    }
}

mpi! {
    /// The name of the `n`-th process set (its length with the NUL when `*pset_len` is 0).
    fn MPI_Session_get_nth_pset / PMPI_Session_get_nth_pset(session: Handle, _info: Handle, n: c_int, pset_len: *mut c_int, pset_name: *mut c_char) on session => {
        let len = out(pset_len, "pset_len")?;
        running(|s| session_arg(s, session))?;
        let Some(name) = usize::try_from(n).ok().and_then(|i| PSETS.get(i)) else {
            return fail(MPI_ERR_ARG, format!("no process set number {n} (there are {})", PSETS.len()));
        };
        if *len > 0 {
            write_string(name, pset_name, *len as usize, std::ptr::null_mut())?;
        }
        *len = name.len() as c_int + 1;
        Ok(())
    }
}

mpi! {
    /// The properties of a process set: its size (`mpi_size`).
    fn MPI_Session_get_pset_info / PMPI_Session_get_pset_info(session: Handle, pset_name: *const c_char, info: *mut Handle) on session => {
        let out = out(info, "info")?;
        let name = c_str(pset_name, "pset_name")?;
        *out = running(|s| {
            session_arg(s, session)?;
            let size = pset_members(s, &name)?.len();
            Ok(s.infos.insert(vec![("mpi_size".to_string(), size.to_string())]))
        })?;
        Ok(())
    }
}

mpi! {
    /// The group of a process set.
    fn MPI_Group_from_session_pset / PMPI_Group_from_session_pset(session: Handle, pset_name: *const c_char, newgroup: *mut Handle) on session => {
        let out = out(newgroup, "newgroup")?;
        let name = c_str(pset_name, "pset_name")?;
        *out = running(|s| {
            session_arg(s, session)?;
            let members = pset_members(s, &name)?;
            let group = new_group(s, members);
            s.group_sessions.insert(group, session);
            Ok(group)
        })?;
        Ok(())
    }
}

mpi! {
    /// A communicator of a group's processes, collective over them (no parent communicator).
    fn MPI_Comm_create_from_group / PMPI_Comm_create_from_group(group: Handle, stringtag: *const c_char, _info: Handle, errhandler: Handle, newcomm: *mut Handle) on NONE => {
        let out = out(newcomm, "newcomm")?;
        let tag = tag_of(&c_str(stringtag, "stringtag")?);
        let (world, members) = running(|s| {
            if errhandler != MPI_ERRHANDLER_NULL {
                valid_errhandler(s, errhandler)?;
            }
            Ok((s.intra_comm(MPI_COMM_WORLD)?, s.group(group)?))
        })?;
        let ranks: Vec<usize> = members.iter().map(|&w| w as usize).collect();
        let Some(core) = world.create_subset(&ranks, tag)? else {
            return fail(MPI_ERR_GROUP, "this process is not in the group");
        };
        let made = register(MPI_COMM_WORLD, Some(core), false)?;
        // Buffered sends on it may draw on its session's buffer (MPI_Session_attach_buffer).
        running(|s| {
            if let Some(&session) = s.group_sessions.get(&group) {
                s.comm_sessions.insert(made, session);
            }
            Ok(())
        })?;
        if errhandler != MPI_ERRHANDLER_NULL {
            running(|s| {
                s.comm_mut(made)?.errhandler = errhandler;
                Ok(())
            })?;
        }
        *out = made;
        Ok(())
    }
}

mpi! {
    /// Creates an error handler for sessions, `void fn(MPI_Session *, int *, ...)`. One of the
    /// calls MPI allows before initialization (and after finalization), so that the handler can
    /// be given to MPI_Session_init.
    fn MPI_Session_create_errhandler / PMPI_Session_create_errhandler(function: Option<CommErrhandlerFn>, errhandler: *mut Handle) on NONE => {
        let out = out(errhandler, "errhandler")?;
        *out = with(|s| new_errhandler(s, function))?;
        Ok(())
    }
}

mpi! {
    /// Replaces a session's error handler.
    fn MPI_Session_set_errhandler / PMPI_Session_set_errhandler(session: Handle, errhandler: Handle) on session => {
        running(|s| {
            session_arg(s, session)?;
            valid_errhandler(s, errhandler)?;
            if let Some(h) = s.sessions.get_mut(session) {
                *h = errhandler;
            }
            Ok(())
        })
    }
}

mpi! {
    /// A session's error handler (MPI_ERRORS_ARE_FATAL for one opened with
    /// MPI_ERRHANDLER_NULL).
    fn MPI_Session_get_errhandler / PMPI_Session_get_errhandler(session: Handle, errhandler: *mut Handle) on session => {
        let out = out(errhandler, "errhandler")?;
        *out = running(|s| {
            session_arg(s, session)?;
            Ok(s.errhandler_of(session))
        })?;
        Ok(())
    }
}

mpi! {
    /// MPI_Session_call_errhandler: invokes a session's handler as if a call on it had failed with
    /// `errorcode`. An invalid session is an MPI_ERR_SESSION raised on no object.
    fn MPI_Session_call_errhandler / PMPI_Session_call_errhandler(session: Handle, errorcode: c_int) -> c_int, unguarded => {
        const NAME: &str = "MPI_Session_call_errhandler";
        let known = crate::error::caught(|| running(|s| session_arg(s, session).map(drop)));
        if let Err(e) = known {
            return handle_error(NAME, NONE, e);
        }
        let rc = handle_error(
            NAME,
            session,
            MpiError::new(errorcode, "raised by the program"),
        );
        called_errhandler(rc, errorcode)
    }
}
