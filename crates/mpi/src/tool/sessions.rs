//! Performance-variable sessions and handles: starting, stopping, reading and resetting.

use super::*;

pub(crate) fn session_arg(t: &Tool, session: Handle) -> Res {
    match t.sessions.get(session) {
        Some(()) => Ok(()),
        None => fail(
            MPI_T_ERR_INVALID_SESSION,
            format!("invalid session {session:#x}"),
        ),
    }
}

/// The handles `handle` stands for in `session` (all of them for MPI_T_PVAR_ALL_HANDLES).
pub(crate) fn handles_of(t: &Tool, session: Handle, handle: Handle) -> Res<Vec<Handle>> {
    session_arg(t, session)?;
    if handle == MPI_T_PVAR_ALL_HANDLES {
        let all = t.pvars.handles();
        return Ok(all
            .into_iter()
            .filter(|&h| t.pvars.get(h).is_some_and(|p| p.session == session))
            .collect());
    }
    match t.pvars.get(handle) {
        Some(p) if p.session == session => Ok(vec![handle]),
        _ => fail(
            MPI_T_ERR_INVALID_HANDLE,
            format!("invalid performance-variable handle {handle:#x} for session {session:#x}"),
        ),
    }
}

/// Starts (`start`) or stops handles of a session.
pub(crate) fn start_stop(session: Handle, handle: Handle, start: bool) -> Res {
    let now = counters()?;
    tool(|t| {
        let all = handle == MPI_T_PVAR_ALL_HANDLES;
        for h in handles_of(t, session, handle)? {
            let Some(p) = t.pvars.get_mut(h) else {
                continue;
            };
            let def = &PVARS[p.index];
            if def.continuous {
                if all {
                    continue;
                }
                return fail(
                    MPI_T_ERR_PVAR_NO_STARTSTOP,
                    format!(
                        "{} is continuous: it cannot be started or stopped",
                        def.name
                    ),
                );
            }
            let total = (def.value)(&now);
            if start && !p.started {
                p.base = total;
                p.started = true;
            } else if !start && p.started {
                p.held = p.held.wrapping_add(total.wrapping_sub(p.base));
                p.started = false;
            }
        }
        Ok(())
    })
}

/// Reads one handle's value; with `reset`, also resets it (which read-only variables refuse).
pub(crate) unsafe fn read_handle(
    session: Handle,
    handle: Handle,
    buf: *mut c_void,
    reset: bool,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `buf`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if handle == MPI_T_PVAR_ALL_HANDLES {
            return fail(
                MPI_T_ERR_INVALID_HANDLE,
                "MPI_T_PVAR_ALL_HANDLES cannot be read",
            );
        }
        if buf.is_null() {
            return fail(MPI_T_ERR_INVALID, "buf is NULL");
        }
        let now = counters()?;
        let value = tool(|t| {
            handles_of(t, session, handle)?;
            let Some(p) = t.pvars.get_mut(handle) else {
                return fail(
                    MPI_T_ERR_INVALID_HANDLE,
                    "invalid performance-variable handle",
                );
            };
            let def = &PVARS[p.index];
            let value = pvar_value(p, &now);
            if reset {
                if def.continuous {
                    return fail(
                        MPI_T_ERR_PVAR_NO_WRITE,
                        format!("{} is read-only", def.name),
                    );
                }
                p.held = 0;
                p.base = (def.value)(&now);
            }
            Ok(value)
        })?;
        *(buf as *mut c_ulonglong) = value;
        Ok(())
    }
}
