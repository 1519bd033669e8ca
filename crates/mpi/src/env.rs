//! Start-up, shut-down and the environment: init/finalize, abort, clocks, versions, error text
//! (the entry points are in `entry/process_creation.rs` and `entry/environment.rs`).

use crate::abi::*;
use crate::error::{class_text, fail, Res};
use crate::state::{running, with, CommObj, Phase};
use std::ffi::{c_char, c_int};

/// The library version string (`MPI_Get_library_version`).
pub(crate) const LIBRARY_VERSION: &str = concat!(
    "ferry ",
    env!("CARGO_PKG_VERSION"),
    " (MPI 5.0, standard ABI 1.0)"
);

/// Starts the runtime for MPI_Init (`world`) or MPI_Session_init; the second of the two to
/// come finds it running and only records itself.
pub(crate) fn init(required: c_int, world: bool) -> Res<c_int> {
    let joined = with(|s| match s.phase {
        _ if world && s.world_finalized => {
            fail(MPI_ERR_OTHER, "MPI_Init called after MPI_Finalize")
        }
        Phase::Running if world && s.world_model => fail(MPI_ERR_OTHER, "MPI_Init called twice"),
        Phase::Running => {
            s.world_model |= world;
            Ok(Some(s.thread_level))
        }
        Phase::Finalized => fail(
            MPI_ERR_OTHER,
            "MPI initialized again after it was finalized",
        ),
        Phase::Idle => Ok(None),
    })?;
    if let Some(level) = joined {
        return Ok(level);
    }
    let world_model = world;
    let world = ferry_core::init()?;
    let world_comm: ferry_core::Comm = (*world).clone();
    // MPI_COMM_SELF: a communicator of one with its own context, made while every rank is
    // here anyway (the split is collective over the world).
    let self_comm = world_comm
        .split(Some(world_comm.rank() as u32), 0)?
        .ok_or_else(|| crate::error::MpiError::new(MPI_ERR_INTERN, "MPI_COMM_SELF split"))?;
    let obj = |comm, name: &str| CommObj {
        comm,
        errhandler: MPI_ERRORS_ARE_FATAL,
        name: name.to_string(),
        attrs: Default::default(),
        topo: None,
        inter: None,
        idups: 0,
    };
    // Every level is provided; MULTIPLE serializes the threads' calls (see `crate::threads`).
    let provided = thread_level(required);
    if provided == MPI_THREAD_MULTIPLE {
        crate::threads::go_multiple();
        world.share_with_threads(crate::threads::pause);
    }
    with(|s| {
        s.predefined_comms = vec![
            obj(world_comm, "MPI_COMM_WORLD"),
            obj(self_comm, "MPI_COMM_SELF"),
        ];
        s.world = Some(world);
        s.world_model = world_model;
        s.set_phase(Phase::Running);
        s.thread_level = provided;
        s.main_thread = Some(std::thread::current().id());
        Ok(())
    })?;
    crate::dynamic::join_parent()?;
    Ok(provided)
}

/// The level granted for `required`: itself, or the next level below for a value between the
/// standard's constants (whose ABI values are 0, 1024, 2048 and 4096, in that order).
pub(crate) fn thread_level(required: c_int) -> c_int {
    match required {
        r if r >= MPI_THREAD_MULTIPLE => MPI_THREAD_MULTIPLE,
        r if r >= MPI_THREAD_SERIALIZED => MPI_THREAD_SERIALIZED,
        r if r >= MPI_THREAD_FUNNELED => MPI_THREAD_FUNNELED,
        _ => MPI_THREAD_SINGLE,
    }
}

/// First in MPI_Finalize, as if MPI_COMM_SELF were freed: its attributes' delete callbacks run
/// while MPI is still fully usable and not yet finalized (MPI 4.1 §11.2.2), so libraries can
/// clean up there.
///
/// # Safety
/// The callbacks are the user's.
pub(crate) unsafe fn delete_self_attrs() -> Res {
    // SAFETY: the caller keeps this function's `# Safety`: The callbacks are the user's.
    unsafe {
        let self_attrs = running(|s| Ok(s.comm_mut(MPI_COMM_SELF)?.attrs.take_newest_first()))?;
        crate::comm::delete_attrs(MPI_COMM_SELF, self_attrs)
    }
}

/// Shuts the runtime down: MPI_Finalize, or the last MPI_Session_finalize after it.
///
/// # Safety
/// Runs the delete callbacks of MPI_COMM_SELF's attributes, which are the user's.
pub(crate) unsafe fn shutdown() -> Res {
    // SAFETY: the caller keeps this function's `# Safety`: Runs the delete callbacks of
    // MPI_COMM_SELF's attributes, which are the user's.
    unsafe {
        delete_self_attrs()?;
        crate::io::forget_open_files()?;
        // Buffered sends and freed requests still in flight: sends finish; a freed receive
        // that never matched is withdrawn rather than waited for.
        let pending = running(|s| Ok(std::mem::take(&mut s.bsends)))?;
        for (mut r, _, _) in pending {
            if let Some(raw) = r.raw() {
                r.core.raw_cancel(raw);
            }
            crate::p2p::wait_request(&mut r)?;
        }
        let world = with(|s| {
            s.set_phase(Phase::Finalized);
            s.predefined_comms.clear();
            Ok(s.world.take())
        })?;
        if let Some(w) = world {
            // MPI_T reads the settings and final counters from then on.
            crate::tool::world_ending(&w);
            w.finalize()?;
        }
        Ok(())
    }
}

/// Copies `text` into a C buffer of `cap` bytes (NUL-terminated) and sets `len`.
pub(crate) unsafe fn write_string(
    text: &str,
    out: *mut c_char,
    cap: usize,
    len: *mut c_int,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `out` and `len`, as the
    // caller promises, are NULL or valid for what the MPI call it serves reads and writes through
    // them.
    unsafe {
        if out.is_null() {
            return fail(MPI_ERR_ARG, "string buffer is NULL");
        }
        let n = text.len().min(cap.saturating_sub(1));
        std::ptr::copy_nonoverlapping(text.as_ptr(), out as *mut u8, n);
        *out.add(n) = 0;
        if let Some(len) = len.as_mut() {
            *len = n as c_int;
        }
        Ok(())
    }
}

fn valid_class(code: c_int) -> bool {
    (MPI_SUCCESS..=MPI_ERR_ABI).contains(&code)
        || (MPIX_ERR_PROC_FAILED..=MPIX_ERR_REVOKED).contains(&code)
        || (MPI_T_ERR_CANNOT_INIT..=MPI_T_ERR_PVAR_NO_ATOMIC).contains(&code)
}

/// Class and text of an error code: predefined, or added by MPI_Add_error_class/_code.
pub(crate) fn lookup_code(code: c_int) -> Res<(c_int, String)> {
    if valid_class(code) {
        return Ok((code, class_text(code).to_string()));
    }
    let user = with(|s| {
        Ok(s.user_errors
            .get((code - MPI_ERR_LASTCODE - 1) as usize)
            .cloned()
            .flatten())
    })?;
    match user {
        Some(entry) if code > MPI_ERR_LASTCODE => Ok(entry),
        _ => fail(MPI_ERR_ARG, format!("{code} is not an MPI error code")),
    }
}

/// Records a new error code of `class` (`None`: a new class of its own) and returns it.
pub(crate) fn add_code(class: Option<c_int>) -> Res<c_int> {
    let code = with(|s| {
        let code = MPI_ERR_LASTCODE + 1 + s.user_errors.len() as c_int;
        s.user_errors
            .push(Some((class.unwrap_or(code), String::new())));
        Ok(code)
    })?;
    crate::comm::set_last_used_code(code);
    Ok(code)
}

/// The entry of an error code or class that MPI_Add_error_class/_code made and nothing removed.
pub(crate) fn user_error(s: &mut crate::state::State, code: c_int) -> Res<&mut (c_int, String)> {
    let index = usize::try_from(code - MPI_ERR_LASTCODE - 1).ok();
    match index.and_then(|i| s.user_errors.get_mut(i)) {
        Some(Some(entry)) if code > MPI_ERR_LASTCODE => Ok(entry),
        _ => fail(
            MPI_ERR_ARG,
            format!("{code} is no error code or class added by MPI_Add_error_class/_code"),
        ),
    }
}
