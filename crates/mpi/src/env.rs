//! Start-up, shut-down and the environment: init/finalize, abort, clocks, versions, error text.

use crate::abi::*;
use crate::error::{class_text, fail, Res};
use crate::state::{running, with, CommObj, Phase, STATE};
use crate::NONE;
use std::ffi::{c_char, c_int, c_void};

/// The library version string (`MPI_Get_library_version`).
const LIBRARY_VERSION: &str = concat!(
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

/// First in MPI_Finalize, as if MPI_COMM_SELF were freed: its attributes' delete callbacks run
/// while MPI is still fully usable and not yet finalized (MPI 4.1 §11.2.2), so libraries can
/// clean up there.
///
/// # Safety
/// The callbacks are the user's.
unsafe fn delete_self_attrs() -> Res {
    let self_attrs = running(|s| Ok(s.comm_mut(MPI_COMM_SELF)?.attrs.take_newest_first()))?;
    crate::comm::delete_attrs(MPI_COMM_SELF, self_attrs)
}

/// Shuts the runtime down: MPI_Finalize, or the last MPI_Session_finalize after it.
///
/// # Safety
/// Runs the delete callbacks of MPI_COMM_SELF's attributes, which are the user's.
pub(crate) unsafe fn shutdown() -> Res {
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

/// Copies `text` into a C buffer of `cap` bytes (NUL-terminated) and sets `len`.
pub(crate) unsafe fn write_string(
    text: &str,
    out: *mut c_char,
    cap: usize,
    len: *mut c_int,
) -> Res {
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
    /// Profiling control: accepted and ignored.
    fn MPI_Pcontrol / PMPI_Pcontrol(_level: c_int) on NONE => { Ok(()) }
}

fn valid_class(code: c_int) -> bool {
    (MPI_SUCCESS..=MPI_ERR_ABI).contains(&code)
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
fn add_code(class: Option<c_int>) -> Res<c_int> {
    let code = with(|s| {
        let code = MPI_ERR_LASTCODE + 1 + s.user_errors.len() as c_int;
        s.user_errors
            .push(Some((class.unwrap_or(code), String::new())));
        Ok(code)
    })?;
    crate::comm::set_last_used_code(code);
    Ok(code)
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

/// The entry of an error code or class that MPI_Add_error_class/_code made and nothing removed.
fn user_error(s: &mut crate::state::State, code: c_int) -> Res<&mut (c_int, String)> {
    let index = usize::try_from(code - MPI_ERR_LASTCODE - 1).ok();
    match index.and_then(|i| s.user_errors.get_mut(i)) {
        Some(Some(entry)) if code > MPI_ERR_LASTCODE => Ok(entry),
        _ => fail(
            MPI_ERR_ARG,
            format!("{code} is no error code or class added by MPI_Add_error_class/_code"),
        ),
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
