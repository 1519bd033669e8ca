//! The MPIR process-acquisition interface (the MPI Forum's "MPIR Process Acquisition
//! Interface", as MPICH's and Open MPI's launchers have it): how a parallel debugger (gdb
//! scripts, TotalView, Linaro DDT, STAT) started on the launcher, or attached to it, finds every
//! rank of the job to attach to.
//!
//! The launcher binary exports, with their C names:
//!
//! - `MPIR_proctable` (an array of [`MpirProcdesc`]: host name, executable, pid; rank r at
//!   index r) and `MPIR_proctable_size`, filled once every rank's pid is known: at once for the
//!   ranks this launcher forks, as the node daemons report them for the ranks of other hosts;
//! - `MPIR_debug_state`: [`MPIR_DEBUG_SPAWNED`] once the table is filled, [`MPIR_DEBUG_ABORTING`]
//!   when a rank aborts the job, with `MPIR_debug_abort_string` saying why;
//! - `MPIR_Breakpoint()`, called after each change of `MPIR_debug_state`: a debugger sets its
//!   breakpoint there and reads the table when it stops;
//! - `MPIR_being_debugged`, which a debugger sets; the ranks do not wait for it (there is no
//!   `MPIR_debug_gate` in them), so `MPIR_partial_attach_ok` is there too: attaching to some
//!   ranks only is fine, the others run on;
//! - `MPIR_i_am_starter`: the launcher is not itself one of the MPI processes.
//!
//! The table lives until the launcher exits (a debugger may read it at any time).

use std::ffi::{c_char, c_int, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};
use std::sync::Mutex;

/// `MPIR_debug_state` before the ranks are known.
pub const MPIR_NULL: c_int = 0;
/// `MPIR_debug_state` once `MPIR_proctable` holds every rank.
pub const MPIR_DEBUG_SPAWNED: c_int = 1;
/// `MPIR_debug_state` when the job is being aborted.
pub const MPIR_DEBUG_ABORTING: c_int = 2;

/// One entry of `MPIR_proctable`, laid out as the interface's `MPIR_PROCDESC`.
#[repr(C)]
#[derive(Debug)]
pub struct MpirProcdesc {
    /// The rank's host (a name the debugger can reach it by).
    pub host_name: *mut c_char,
    /// The program the rank runs (absolute when it could be resolved here).
    pub executable_name: *mut c_char,
    /// The rank's process id on its host.
    pub pid: c_int,
}

// The exported symbols. Atomics have the layout of the C types the interface names (an
// `AtomicI32` is an `int`, an `AtomicPtr` a pointer), and a debugger reads or writes them
// through memory while the launcher runs.

/// The table of ranks (`MPIR_PROCDESC *MPIR_proctable`).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static MPIR_proctable: AtomicPtr<MpirProcdesc> = AtomicPtr::new(ptr::null_mut());
/// Entries in `MPIR_proctable`.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static MPIR_proctable_size: AtomicI32 = AtomicI32::new(0);
/// Set by a debugger that started or attached to the launcher.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static MPIR_being_debugged: AtomicI32 = AtomicI32::new(0);
/// [`MPIR_NULL`], [`MPIR_DEBUG_SPAWNED`] or [`MPIR_DEBUG_ABORTING`].
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static MPIR_debug_state: AtomicI32 = AtomicI32::new(MPIR_NULL);
/// Why the job is aborting (with [`MPIR_DEBUG_ABORTING`]), else null.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static MPIR_debug_abort_string: AtomicPtr<c_char> = AtomicPtr::new(ptr::null_mut());
/// Its presence says the launcher is not one of the MPI processes.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static MPIR_i_am_starter: AtomicI32 = AtomicI32::new(1);
/// Its presence says a debugger may attach to some ranks only: none waits for it.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static MPIR_partial_attach_ok: AtomicI32 = AtomicI32::new(1);

/// Where a debugger sets its breakpoint: called after every change of `MPIR_debug_state`.
#[no_mangle]
#[inline(never)]
pub extern "C" fn MPIR_Breakpoint() {
    // A volatile-like read the optimizer must keep, so the call is never elided; the presence
    // symbols are read too, so the linker keeps them.
    std::hint::black_box(MPIR_debug_state.load(Ordering::SeqCst));
    std::hint::black_box(MPIR_being_debugged.load(Ordering::Relaxed));
    std::hint::black_box(MPIR_i_am_starter.load(Ordering::Relaxed));
    std::hint::black_box(MPIR_partial_attach_ok.load(Ordering::Relaxed));
}

/// The strings and entries behind the exported pointers; kept until the process exits.
struct Published {
    _strings: Vec<CString>,
    _table: Vec<MpirProcdesc>,
    _abort: Option<CString>,
}

// SAFETY: the raw pointers in the entries point into `_strings`, which moves with them and is
// never changed once published; nothing reads them through this struct.
unsafe impl Send for Published {}

static PUBLISHED: Mutex<Option<Published>> = Mutex::new(None);

/// One rank for the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    /// Its host.
    pub host: String,
    /// Its process id there.
    pub pid: u32,
}

/// Fills `MPIR_proctable` with `ranks` (rank r at index r) running `executable`, sets
/// `MPIR_debug_state` to spawned and calls `MPIR_Breakpoint`. Later calls replace the table
/// (for a debugger, the last one counts).
pub fn publish(executable: &OsStr, ranks: &[ProcEntry]) {
    let exe = c_string(executable.as_bytes());
    let mut strings = vec![exe];
    let mut hosts: Vec<(&str, usize)> = Vec::new();
    for r in ranks {
        if !hosts.iter().any(|(h, _)| *h == r.host) {
            hosts.push((&r.host, strings.len()));
            strings.push(c_string(r.host.as_bytes()));
        }
    }
    // A CString's bytes stay where they are when the CString moves: the pointers hold.
    let mut table: Vec<MpirProcdesc> = ranks
        .iter()
        .map(|r| {
            let host = hosts
                .iter()
                .find(|(h, _)| *h == r.host)
                .map_or(0, |&(_, i)| i);
            MpirProcdesc {
                host_name: strings[host].as_ptr().cast_mut(),
                executable_name: strings[0].as_ptr().cast_mut(),
                pid: c_int::try_from(r.pid).unwrap_or(c_int::MAX),
            }
        })
        .collect();
    let mut published = PUBLISHED.lock().unwrap_or_else(|e| e.into_inner());
    let size = c_int::try_from(table.len()).unwrap_or(c_int::MAX);
    MPIR_proctable_size.store(0, Ordering::SeqCst);
    MPIR_proctable.store(table.as_mut_ptr(), Ordering::SeqCst);
    MPIR_proctable_size.store(size, Ordering::SeqCst);
    let abort = published.take().and_then(|p| p._abort);
    *published = Some(Published {
        _strings: strings,
        _table: table,
        _abort: abort,
    });
    drop(published);
    MPIR_debug_state.store(MPIR_DEBUG_SPAWNED, Ordering::SeqCst);
    MPIR_Breakpoint();
}

/// Says the job is aborting because of `why` (`MPIR_debug_abort_string`,
/// `MPIR_debug_state` aborting) and calls `MPIR_Breakpoint`.
pub fn aborting(why: &str) {
    let text = c_string(why.as_bytes());
    MPIR_debug_abort_string.store(text.as_ptr().cast_mut(), Ordering::SeqCst);
    let mut published = PUBLISHED.lock().unwrap_or_else(|e| e.into_inner());
    match published.as_mut() {
        Some(p) => p._abort = Some(text),
        None => {
            *published = Some(Published {
                _strings: Vec::new(),
                _table: Vec::new(),
                _abort: Some(text),
            })
        }
    }
    drop(published);
    MPIR_debug_state.store(MPIR_DEBUG_ABORTING, Ordering::SeqCst);
    MPIR_Breakpoint();
}

/// `bytes` as a C string, cut at the first NUL (a path or host name has none).
fn c_string(bytes: &[u8]) -> CString {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    CString::new(&bytes[..end]).unwrap_or_default()
}

/// The program a rank runs, as a debugger should load it: `program` itself when it names a
/// path (made absolute against `cwd`), else the first executable of that name in `path`
/// (`PATH`'s value); as given when neither finds it.
pub fn executable_path(program: &OsStr, cwd: &Path, path: Option<&OsStr>) -> PathBuf {
    let given = Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return if given.is_absolute() {
            given.to_path_buf()
        } else {
            cwd.join(given)
        };
    }
    path.into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| {
            let dir = if dir.as_os_str().is_empty() {
                cwd.to_path_buf()
            } else {
                dir
            };
            dir.join(given)
        })
        .find(|candidate| is_executable(candidate))
        .unwrap_or_else(|| given.to_path_buf())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    /// The table as a debugger reads it: through the exported pointers.
    fn read_table() -> Vec<(String, String, i32)> {
        let size = MPIR_proctable_size.load(Ordering::SeqCst);
        let table = MPIR_proctable.load(Ordering::SeqCst);
        (0..size as usize)
            .map(|i| {
                // SAFETY: `publish` left `size` entries at `table`, alive until exit, each
                // with NUL-terminated strings.
                unsafe {
                    let e = &*table.add(i);
                    (
                        CStr::from_ptr(e.host_name).to_string_lossy().into_owned(),
                        CStr::from_ptr(e.executable_name)
                            .to_string_lossy()
                            .into_owned(),
                        e.pid,
                    )
                }
            })
            .collect()
    }

    #[test]
    fn the_table_holds_each_rank_in_order_and_the_state_says_spawned() {
        let ranks = [
            ProcEntry {
                host: "n1".into(),
                pid: 101,
            },
            ProcEntry {
                host: "n2".into(),
                pid: 202,
            },
            ProcEntry {
                host: "n1".into(),
                pid: 103,
            },
        ];
        publish(OsStr::new("/bin/prog"), &ranks);
        assert_eq!(
            read_table(),
            [
                ("n1".into(), "/bin/prog".into(), 101),
                ("n2".into(), "/bin/prog".into(), 202),
                ("n1".into(), "/bin/prog".into(), 103)
            ]
        );
        assert_eq!(MPIR_debug_state.load(Ordering::SeqCst), MPIR_DEBUG_SPAWNED);
        aborting("rank 1 called abort");
        assert_eq!(MPIR_debug_state.load(Ordering::SeqCst), MPIR_DEBUG_ABORTING);
        // SAFETY: `aborting` left a NUL-terminated string there, alive until exit.
        let why = unsafe { CStr::from_ptr(MPIR_debug_abort_string.load(Ordering::SeqCst)) };
        assert_eq!(why.to_str(), Ok("rank 1 called abort"));
        // The table is still there for the debugger.
        assert_eq!(read_table().len(), 3);
    }

    #[test]
    fn the_executable_is_resolved_as_the_launcher_starts_it() {
        let cwd = Path::new("/work/x");
        assert_eq!(
            executable_path(OsStr::new("./prog"), cwd, None),
            Path::new("/work/x/./prog")
        );
        assert_eq!(
            executable_path(OsStr::new("/opt/p"), cwd, None),
            Path::new("/opt/p")
        );
        assert_eq!(
            executable_path(OsStr::new("sh"), cwd, Some(OsStr::new("/nonexistent:/bin"))),
            Path::new("/bin/sh")
        );
        assert_eq!(
            executable_path(
                OsStr::new("no-such-program-here"),
                cwd,
                Some(OsStr::new("/bin"))
            ),
            Path::new("no-such-program-here")
        );
    }
}
