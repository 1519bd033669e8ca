//! Chapter 11 of MPI 5.0, process initialization, creation and management (the world model):
//! `MPI_Init*`, `MPI_Finalize*`, `MPI_Abort`, thread levels, and dynamic processes (spawn, ports,
//! the name service, join, parent and disconnect). The semantics are in [`crate::env`],
//! [`crate::dynamic`] and [`crate::comm`]; the sessions model is in `sessions.rs`.

use super::NONE;
use crate::abi::*;
use crate::check::out;
use crate::comm::*;
use crate::dynamic::*;
use crate::env::*;
use crate::error::{fail, MpiError};
use crate::state::{running, with, STATE};
use ferry_core::Source;
use std::ffi::{c_char, c_int, CStr};

mpi! {
    /// The intercommunicator to the group that started this process with MPI_Comm_spawn
    /// (MPI_COMM_NULL for a process started by mpiexec, or once it was freed or disconnected).
    fn MPI_Comm_get_parent / PMPI_Comm_get_parent(parent: *mut Handle) on NONE => {
        let h = running(|s| Ok(if s.comm(s.parent).is_ok() { s.parent } else { MPI_COMM_NULL }))?;
        *out(parent, "parent")? = h;
        Ok(())
    }
}

mpi! {
    /// Waits until every process of the communicator has called it, then frees it (MPI 4.1
    /// §11.10.4). Any communicator may be disconnected, not only one from dynamic process calls;
    /// the communication started on it completes as after MPI_Comm_free.
    fn MPI_Comm_disconnect / PMPI_Comm_disconnect(comm: *mut Handle) on comm.as_ref().copied().unwrap_or(MPI_COMM_NULL) => {
        let h = out(comm, "comm")?;
        if matches!(*h, MPI_COMM_WORLD | MPI_COMM_SELF | MPI_COMM_NULL) {
            return fail(MPI_ERR_COMM, "predefined communicators and MPI_COMM_NULL cannot be disconnected");
        }
        crate::coll::barrier(*h, crate::coll::BLOCKING)?;
        free_comm(h)
    }
}

mpi! {
    /// Initializes MPI.
    fn MPI_Init / PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) on NONE => {
        init(MPI_THREAD_SINGLE, true).map(drop)
    }
}

mpi! {
    /// Initializes MPI with a thread level (every level is provided).
    fn MPI_Init_thread / PMPI_Init_thread(_argc: *mut c_int, _argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int) on NONE => {
        let level = init(required, true)?;
        if let Some(p) = provided.as_mut() {
            *p = level;
        }
        Ok(())
    }
}

mpi! {
    /// Whether MPI_Init has been called (sessions do not count, MPI 4.1 §11.2.1).
    fn MPI_Initialized / PMPI_Initialized(flag: *mut c_int) on NONE => {
        let Some(flag) = flag.as_mut() else { return fail(MPI_ERR_ARG, "flag is NULL") };
        *flag = with(|s| Ok(s.world_model || s.world_finalized))? as c_int;
        Ok(())
    }
}

mpi! {
    /// Whether MPI_Finalize has been called.
    fn MPI_Finalized / PMPI_Finalized(flag: *mut c_int) on NONE => {
        let Some(flag) = flag.as_mut() else { return fail(MPI_ERR_ARG, "flag is NULL") };
        *flag = with(|s| Ok(s.world_finalized))? as c_int;
        Ok(())
    }
}

mpi! {
    /// The thread level granted.
    fn MPI_Query_thread / PMPI_Query_thread(provided: *mut c_int) on NONE => {
        let Some(p) = provided.as_mut() else { return fail(MPI_ERR_ARG, "provided is NULL") };
        *p = running(|s| Ok(s.thread_level))?;
        Ok(())
    }
}

mpi! {
    /// Whether this is the thread that initialized MPI.
    fn MPI_Is_thread_main / PMPI_Is_thread_main(flag: *mut c_int) on NONE => {
        let Some(flag) = flag.as_mut() else { return fail(MPI_ERR_ARG, "flag is NULL") };
        let me = std::thread::current().id();
        *flag = running(|s| Ok(s.main_thread == Some(me)))? as c_int;
        Ok(())
    }
}

mpi! {
    /// Completes outstanding communication, waits for every rank, and shuts MPI down.
    fn MPI_Finalize / PMPI_Finalize() on NONE => {
        running(|s| {
            if !s.world_model {
                return fail(MPI_ERR_OTHER, "MPI_Finalize without MPI_Init");
            }
            Ok(())
        })?;
        delete_self_attrs()?;
        let sessions = running(|s| {
            s.world_model = false;
            s.world_finalized = true;
            Ok(!s.sessions.is_empty())
        })?;
        if sessions {
            // Open sessions keep the runtime; the last MPI_Session_finalize shuts it down.
            return Ok(());
        }
        shutdown()
    }
}

mpi! {
    /// Ends every rank of the job with `errorcode`.
    fn MPI_Abort / PMPI_Abort(comm: Handle, errorcode: c_int) on NONE => {
        // Also from inside a callback, where the state is busy: then without the rank.
        let rank = with(|s| Ok(s.world_rank())).ok().flatten().map_or(String::new(), |r| format!(" by rank {r}"));
        let message = format!("MPI_Abort(comm {comm:#x}, {errorcode}) called{rank}");
        eprintln!("ferry: {message}");
        STATE.try_with(|s| {
            if let Some(w) = &s.world {
                w.abort(errorcode, &message);
            }
        });
        crate::error::exit_now(errorcode)
    }
}

mpi! {
    /// Opens a port that other groups of this job can connect to.
    fn MPI_Open_port / PMPI_Open_port(_info: Handle, port_name: *mut c_char) on NONE => {
        // Groups of other worlds (spawned) may connect: they need our address.
        on_world(|w| Ok(w.open_to_other_worlds()?))?;
        let name = running(|s| {
            let me = my_uid(s)?;
            let number = s.next_port;
            if number >= JOIN_TAG {
                return fail(MPI_ERR_PORT, "out of port numbers");
            }
            s.next_port += 1;
            s.open_ports.insert(number);
            Ok(format!("{PORT_PREFIX}{me}:{number}"))
        })?;
        write_name(&name, port_name, MPI_MAX_PORT_NAME)
    }
}

mpi! {
    /// Closes a port this process opened.
    fn MPI_Close_port / PMPI_Close_port(port_name: *const c_char) on NONE => {
        running(|s| {
            let port = port_of(s, port_name)?;
            if !port.own || !s.open_ports.remove(&port.number) {
                return fail(MPI_ERR_PORT, "the port is not open in this process");
            }
            Ok(())
        })
    }
}

mpi! {
    /// Waits at `root` for a group to connect to `port_name` and makes the intercommunicator
    /// to it. Collective over `comm`; only the root's `port_name` counts.
    fn MPI_Comm_accept / PMPI_Comm_accept(port_name: *const c_char, _info: Handle, root: c_int, comm: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        *out = connect_at_root(comm, root, || {
            let (m, number) = running(|s| {
                let port = port_of(s, port_name)?;
                if !port.own || !s.open_ports.contains(&port.number) {
                    return fail(MPI_ERR_PORT, "MPI_Comm_accept on a port this process has not opened");
                }
                Ok((meeting(s)?, port.number))
            })?;
            // The first group to connect is the one accepted.
            let from = m.probe(Source::Any, number)?.source;
            Ok((m, from, number))
        })?;
        Ok(())
    }
}

mpi! {
    /// Connects `comm`'s group (through `root`) to the group accepting on `port_name`.
    fn MPI_Comm_connect / PMPI_Comm_connect(port_name: *const c_char, _info: Handle, root: c_int, comm: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        *out = connect_at_root(comm, root, || {
            let met = running(|s| {
                let port = port_of(s, port_name)?;
                if port.own {
                    return fail(MPI_ERR_PORT, "MPI_Comm_connect to a port of this very process");
                }
                Ok((meeting(s)?, port.owner, port.number))
            })?;
            // The port's owner may be of another world: connect to it first.
            on_world(|w| Ok(w.reach(met.1 as u32)?))?;
            Ok(met)
        })?;
        Ok(())
    }
}

mpi! {
    /// Makes the intercommunicator of two processes of this job joined by the socket `fd`.
    fn MPI_Comm_join / PMPI_Comm_join(fd: c_int, intercomm: *mut Handle) on NONE => {
        let out = out(intercomm, "intercomm")?;
        let me = on_world(|w| Ok(w.universe_rank() as usize))?;
        let pid = std::process::id();
        // Each side tells the other who it is: universe rank and process id.
        let mut card = [0u8; 8];
        card[..4].copy_from_slice(&(me as u32).to_le_bytes());
        card[4..].copy_from_slice(&pid.to_le_bytes());
        let mut theirs = [0u8; 8];
        // SAFETY: `fd` is the program's connected socket; the buffers are ours and sized.
        let io = unsafe { socket_swap(fd, &card, &mut theirs) };
        io.map_err(|e| MpiError::new(MPI_ERR_OTHER, format!("MPI_Comm_join: socket {fd}: {e}")))?;
        let other = u32::from_le_bytes([theirs[0], theirs[1], theirs[2], theirs[3]]) as usize;
        let other_pid = u32::from_le_bytes([theirs[4], theirs[5], theirs[6], theirs[7]]);
        let known = on_world(|w| Ok(w.pid_of(other)))?;
        if other == me || known != Some(other_pid) {
            return fail(MPI_ERR_OTHER, "MPI_Comm_join: the process at the other end of the socket is not in this job (joining another job's processes is not supported)");
        }
        let (local, m) = running(|s| Ok((s.core_comm(MPI_COMM_SELF)?, meeting(s)?)))?;
        *out = crate::inter::connect_groups(MPI_COMM_SELF, &local, 0, Some((&m, other, JOIN_TAG)))?;
        Ok(())
    }
}

mpi! {
    /// Publishes `port_name` under `service_name` for every process of the job.
    fn MPI_Publish_name / PMPI_Publish_name(service_name: *const c_char, _info: Handle, port_name: *const c_char) on NONE => {
        let key = service_key(service_name)?;
        if port_name.is_null() {
            return fail(MPI_ERR_ARG, "port_name is NULL");
        }
        let port = CStr::from_ptr(port_name).to_string_lossy().into_owned();
        if port.is_empty() {
            return fail(MPI_ERR_PORT, "the port name is empty");
        }
        if looked_up(&key)?.is_some() {
            return fail(MPI_ERR_SERVICE, format!("{key:?} is already published"));
        }
        publish(&key, &port)
    }
}

mpi! {
    /// Withdraws a published name.
    fn MPI_Unpublish_name / PMPI_Unpublish_name(service_name: *const c_char, _info: Handle, _port_name: *const c_char) on NONE => {
        let key = service_key(service_name)?;
        if looked_up(&key)?.is_none() {
            return fail(MPI_ERR_SERVICE, format!("{key:?} is not published"));
        }
        publish(&key, "")
    }
}

mpi! {
    /// The port published under `service_name`.
    fn MPI_Lookup_name / PMPI_Lookup_name(service_name: *const c_char, _info: Handle, port_name: *mut c_char) on NONE => {
        let key = service_key(service_name)?;
        match looked_up(&key)? {
            Some(port) => write_name(&port, port_name, MPI_MAX_PORT_NAME),
            None => fail(MPI_ERR_NAME, format!("no port is published as {key:?}")),
        }
    }
}

mpi! {
    /// Starts `maxprocs` processes of `command` with `argv` as a new world and makes the
    /// intercommunicator to them (their MPI_Comm_get_parent). Collective over `comm`; only the
    /// root's command, arguments, count and info count.
    fn MPI_Comm_spawn / PMPI_Comm_spawn(command: *const c_char, argv: *mut *mut c_char, maxprocs: c_int, info: Handle, root: c_int, comm: Handle, intercomm: *mut Handle, array_of_errcodes: *mut c_int) on comm => {
        spawn(comm, root, || maxprocs.max(0) as u32, || Ok(vec![app(command, argv, maxprocs, info)?]), intercomm, array_of_errcodes)
    }
}

mpi! {
    /// As MPI_Comm_spawn with several commands: their processes form one new world, in the
    /// order of the commands (MPI_APPNUM tells them apart).
    fn MPI_Comm_spawn_multiple / PMPI_Comm_spawn_multiple(count: c_int, commands: *mut *mut c_char, argvs: *mut *mut *mut c_char, maxprocs: *const c_int, infos: *const Handle, root: c_int, comm: Handle, intercomm: *mut Handle, array_of_errcodes: *mut c_int) on comm => {
        let requested = || {
            match usize::try_from(count) {
                Ok(n) if !maxprocs.is_null() => (0..n).map(|i| (*maxprocs.add(i)).max(0) as u32).sum(),
                _ => 0,
            }
        };
        spawn(comm, root, requested, || {
            let n = usize::try_from(count).ok().filter(|&n| n > 0)
                .ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("count {count} is not positive")))?;
            if commands.is_null() || maxprocs.is_null() {
                return fail(MPI_ERR_ARG, "array_of_commands or array_of_maxprocs is NULL");
            }
            (0..n).map(|i| {
                let argv = if argvs.is_null() { std::ptr::null_mut() } else { *argvs.add(i) };
                let info = if infos.is_null() { MPI_INFO_NULL } else { *infos.add(i) };
                app(*commands.add(i), argv, *maxprocs.add(i), info)
            }).collect()
        }, intercomm, array_of_errcodes)
    }
}
