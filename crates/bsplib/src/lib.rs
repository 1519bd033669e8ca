//! BSPlib's C ABI (Hill et al. 1998) on `ferry-bsp`: `include/bsp.h`, `libbsp.so`, `bspcc`.
//!
//! Each `bsp_*` function runs its body through [`guard`], which catches a panic and ends the
//! job with a message naming the call, so an unwind never crosses `extern "C"`. The state of
//! the computation lives in a thread-local of the process (BSPlib has one computation per
//! process). `bsp_abort` is variadic, which stable Rust cannot define: it and `bsp_vabort` are
//! C (`src/abort.c`, built by `build.rs` into `libbsp.so` and exported beside the Rust
//! functions); they format the message with `vsnprintf` and call [`bsp_abort_str`]. This
//! crate depends on `ferry-bsp` and `ferry-core` only.
//!
//! `ferry-bsp` returns its errors ([`ferry_bsp::BspError`]: a bad pid, an unregistered
//! address, a range outside an area, mismatched registrations, a peer that died, bytes that
//! are not records, …); here every one stops the job, as BSPlib (1998) prescribes for them,
//! through [`Bsp::stop`], with the message `ferry-bsp: process P: bsp_CALL: problem`.
#![deny(missing_docs)]
#![allow(clippy::missing_safety_doc)] // the contracts are BSPlib's, documented in bsp.h

use ferry_bsp::{Bsp, BspError};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

enum State {
    /// Nothing started yet.
    Idle,
    /// ferry is up (for `bsp_nprocs` before `bsp_begin`), no computation yet.
    World(ferry_core::World),
    /// Inside `bsp_begin` … `bsp_end`.
    Running(Box<Bsp>),
    /// After `bsp_end`.
    Ended,
}

thread_local! {
    static STATE: RefCell<State> = const { RefCell::new(State::Idle) };
}

/// Runs `f` for the C call `call`; a panic ends the job with a message naming the call.
fn guard<R>(call: &str, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(e) => {
            let what = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            let msg = format!("ferry-bsplib: {call}: {what}");
            eprintln!("{msg}");
            // The computation may be borrowed by the unwound frame; end the job via its world
            // if we can reach it, otherwise exit non-zero (the launcher stops the others).
            let _ = STATE.try_with(|s| {
                if let Ok(s) = s.try_borrow() {
                    if let State::Running(b) = &*s {
                        b.abort(&msg);
                    }
                }
            });
            std::process::exit(1)
        }
    }
}

/// Runs `f` on the running computation; outside `bsp_begin` … `bsp_end` stops the job with a
/// message naming the process and the call.
fn with_bsp<R>(call: &str, f: impl FnOnce(&mut Bsp) -> R) -> R {
    guard(call, || {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            match &mut *s {
                State::Running(b) => f(b),
                other => outside(call, other),
            }
        })
    })
}

/// Stops the job: `call` needs the computation, and there is none (yet or any more). Before
/// `bsp_begin` the process is named by its rank in the job, which starts ferry if it is not
/// up yet (every process calls `bsp_begin` or stops, so that does not wait long).
#[cold]
fn outside(call: &str, state: &mut State) -> ! {
    let when = match state {
        State::Ended => "after bsp_end",
        _ => "before bsp_begin",
    };
    if let State::Idle = state {
        if let Ok(w) = ferry_core::init() {
            *state = State::World(w);
        }
    }
    match state {
        State::World(w) => w.abort(
            1,
            &format!("ferry-bsplib: process {}: {call}: called {when}", w.rank()),
        ),
        _ => {
            // After bsp_end only process 0 is left.
            eprintln!("ferry-bsplib: process 0: {call}: called {when}");
            std::process::exit(1)
        }
    }
}

/// Starts ferry for `call` if it is not up yet; a failure ends the process with a message
/// naming the call.
fn start_world(call: &str, state: &mut State) {
    if let State::Idle = state {
        match ferry_core::init() {
            Ok(w) => *state = State::World(w),
            Err(e) => {
                eprintln!("ferry-bsplib: {call}: {e}");
                std::process::exit(1)
            }
        }
    }
}

/// BSPlib's answer to an error of `ferry-bsp`: the job stops (`bsp_abort`) with a message naming
/// the process, the call and the problem.
fn or_stop<T>(b: &Bsp, r: Result<T, BspError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => b.stop(&e),
    }
}

/// A non-negative `int` argument of `call` as a size, offset or pid; a negative one stops the
/// job naming the call.
fn size(b: &Bsp, call: &str, n: c_int) -> usize {
    match usize::try_from(n) {
        Ok(v) => v,
        Err(_) => b.fail(call, format!("negative argument {n}")),
    }
}

/// A pointer argument of `call` that is about to be read or written for `len` bytes: NULL
/// stops the job naming the argument and the call (it would crash the process otherwise).
fn non_null<T>(b: &Bsp, call: &str, what: &str, ptr: *const T, len: usize) {
    if ptr.is_null() && len > 0 {
        b.fail(call, format!("{what} is NULL (for {len} bytes)"));
    }
}

/// `bsp_init(spmd, argc, argv)`, the first statement of a `main` that does not begin with
/// `bsp_begin`: as the standard has it, only process 0 goes on with `main` (whose sequential
/// part may read input and decide how many processes to ask for); `ferry run` started `main`
/// on every process, so the others run `spmd` here (its `bsp_begin` takes process 0's number)
/// and exit when it returns.
#[no_mangle]
pub extern "C" fn bsp_init(spmd: Option<extern "C" fn()>, _argc: c_int, _argv: *mut *mut c_char) {
    let rank = guard("bsp_init", || {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            start_world("bsp_init", &mut s);
            match &mut *s {
                State::World(w) if spmd.is_none() => w.abort(
                    1,
                    &format!(
                        "ferry-bsplib: process {}: bsp_init: the SPMD function is NULL",
                        w.rank()
                    ),
                ),
                State::World(w) => w.rank(),
                State::Running(b) => b.fail("bsp_init", "called after bsp_begin".into()),
                other => outside("bsp_init", other),
            }
        })
    });
    if rank != 0 {
        if let Some(spmd) = spmd {
            spmd();
        }
        // Its bsp_end ended this process already unless spmd returned without it, which the
        // exit reports (see ferry-bsp's Drop of the computation).
        // SAFETY: exit flushes C stdio and ends the process.
        unsafe { libc::exit(0) };
    }
}

/// `bsp_begin(maxprocs)`: starts the computation on min(maxprocs, job size) processes, with
/// process 0's `maxprocs` (the others may not know it, see `bsp_init`); the processes beyond
/// end cleanly (exit 0) once the others finish.
#[no_mangle]
pub extern "C" fn bsp_begin(maxprocs: c_int) {
    guard("bsp_begin", || {
        STATE.with(|s| {
            start_world("bsp_begin", &mut s.borrow_mut());
            let prev = std::mem::replace(&mut *s.borrow_mut(), State::Ended);
            let world = match prev {
                State::World(w) => w,
                State::Running(b) => b.fail("bsp_begin", "called again before bsp_end".into()),
                mut ended => outside("bsp_begin", &mut ended),
            };
            let n = if maxprocs <= 0 {
                None
            } else {
                Some(maxprocs as usize)
            };
            if n.is_some_and(|n| n < world.size()) && world.rank() >= n.unwrap_or(0) {
                // Flush C stdio before the Rust side exits this process.
                // SAFETY: fflush(NULL) flushes all C output streams.
                unsafe { libc::fflush(std::ptr::null_mut()) };
            }
            match Bsp::begin(world, n) {
                Ok(bsp) => *s.borrow_mut() = State::Running(Box::new(bsp)),
                Err(e) => {
                    // The world is left unfinalized: exiting non-zero stops the job.
                    eprintln!("ferry-bsplib: {e}");
                    std::process::exit(1)
                }
            }
        })
    })
}

/// `bsp_end()`: ends the computation. As the standard says, only process 0 continues; the
/// others exit with status 0.
#[no_mangle]
pub extern "C" fn bsp_end() {
    guard("bsp_end", || {
        let pid = STATE.with(|s| {
            let prev = std::mem::replace(&mut *s.borrow_mut(), State::Ended);
            match prev {
                State::Running(b) => {
                    let pid = b.pid();
                    if let Err(e) = b.end() {
                        // The computation is gone (its world left unfinalized): exiting
                        // non-zero stops the job.
                        eprintln!("ferry-bsp: {e}");
                        // SAFETY: exit flushes C stdio and ends the process.
                        unsafe { libc::exit(1) };
                    }
                    pid
                }
                mut other => outside("bsp_end", &mut other),
            }
        });
        if pid != 0 {
            // SAFETY: exit flushes C stdio and ends the process.
            unsafe { libc::exit(0) };
        }
    })
}

/// `bsp_abort` with the message already formatted (called by the inline `bsp_abort` and
/// `bsp_vabort` of `bsp.h`).
#[no_mangle]
pub unsafe extern "C" fn bsp_abort_str(msg: *const c_char) {
    let text = if msg.is_null() {
        String::new()
    } else {
        CStr::from_ptr(msg).to_string_lossy().into_owned()
    };
    libc::fflush(std::ptr::null_mut());
    guard("bsp_abort", || {
        STATE.with(|s| {
            if let Ok(s) = s.try_borrow() {
                if let State::Running(b) = &*s {
                    b.abort(text.trim_end());
                }
            }
            eprintln!("ferry-bsplib: bsp_abort: {}", text.trim_end());
            std::process::exit(1)
        })
    })
}

/// `bsp_nprocs()`: processes in the computation; before `bsp_begin`, processes available.
#[no_mangle]
pub extern "C" fn bsp_nprocs() -> c_int {
    guard("bsp_nprocs", || {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            start_world("bsp_nprocs", &mut s);
            match &*s {
                State::World(w) => w.size() as c_int,
                State::Running(b) => b.nprocs() as c_int,
                _ => 1,
            }
        })
    })
}

/// `bsp_pid()`.
#[no_mangle]
pub extern "C" fn bsp_pid() -> c_int {
    with_bsp("bsp_pid", |b| b.pid() as c_int)
}

/// `bsp_time()`: seconds since `bsp_begin`.
#[no_mangle]
pub extern "C" fn bsp_time() -> f64 {
    with_bsp("bsp_time", |b| b.time())
}

/// `bsp_sync()`.
#[no_mangle]
pub extern "C" fn bsp_sync() {
    with_bsp("bsp_sync", |b| {
        let r = b.sync();
        or_stop(b, r)
    })
}

/// `bsp_push_reg(ident, size)`.
#[no_mangle]
pub unsafe extern "C" fn bsp_push_reg(ident: *const c_void, size: c_int) {
    with_bsp("bsp_push_reg", |b| {
        let n = self::size(b, "bsp_push_reg", size);
        b.push_reg_raw(ident as *const u8, n)
    })
}

/// `bsp_pop_reg(ident)`.
#[no_mangle]
pub extern "C" fn bsp_pop_reg(ident: *const c_void) {
    with_bsp("bsp_pop_reg", |b| {
        let r = b.pop_reg_raw(ident as *const u8);
        or_stop(b, r)
    })
}

/// `bsp_put(pid, src, dst, offset, nbytes)`.
#[no_mangle]
pub unsafe extern "C" fn bsp_put(
    pid: c_int,
    src: *const c_void,
    dst: *mut c_void,
    offset: c_int,
    nbytes: c_int,
) {
    with_bsp("bsp_put", |b| {
        non_null(b, "bsp_put", "src", src, size(b, "bsp_put", nbytes));
        let r = b.put_raw(
            size(b, "bsp_put", pid),
            src as *const u8,
            dst as *const u8,
            size(b, "bsp_put", offset),
            size(b, "bsp_put", nbytes),
        );
        or_stop(b, r)
    })
}

/// `bsp_hpput(pid, src, dst, offset, nbytes)`.
#[no_mangle]
pub unsafe extern "C" fn bsp_hpput(
    pid: c_int,
    src: *const c_void,
    dst: *mut c_void,
    offset: c_int,
    nbytes: c_int,
) {
    with_bsp("bsp_hpput", |b| {
        non_null(b, "bsp_hpput", "src", src, size(b, "bsp_hpput", nbytes));
        let r = b.hpput_raw(
            size(b, "bsp_hpput", pid),
            src as *const u8,
            dst as *const u8,
            size(b, "bsp_hpput", offset),
            size(b, "bsp_hpput", nbytes),
        );
        or_stop(b, r)
    })
}

/// `bsp_get(pid, src, offset, dst, nbytes)`.
#[no_mangle]
pub unsafe extern "C" fn bsp_get(
    pid: c_int,
    src: *const c_void,
    offset: c_int,
    dst: *mut c_void,
    nbytes: c_int,
) {
    with_bsp("bsp_get", |b| {
        non_null(b, "bsp_get", "dst", dst, size(b, "bsp_get", nbytes));
        let r = b.get_raw(
            size(b, "bsp_get", pid),
            src as *const u8,
            size(b, "bsp_get", offset),
            dst as *mut u8,
            size(b, "bsp_get", nbytes),
        );
        or_stop(b, r)
    })
}

/// `bsp_hpget(pid, src, offset, dst, nbytes)`.
#[no_mangle]
pub unsafe extern "C" fn bsp_hpget(
    pid: c_int,
    src: *const c_void,
    offset: c_int,
    dst: *mut c_void,
    nbytes: c_int,
) {
    with_bsp("bsp_hpget", |b| {
        non_null(b, "bsp_hpget", "dst", dst, size(b, "bsp_hpget", nbytes));
        let r = b.hpget_raw(
            size(b, "bsp_hpget", pid),
            src as *const u8,
            size(b, "bsp_hpget", offset),
            dst as *mut u8,
            size(b, "bsp_hpget", nbytes),
        );
        or_stop(b, r)
    })
}

/// `bsp_set_tagsize(&n)`: sets the tag size from the next sync on; `*n` becomes the old size.
#[no_mangle]
pub unsafe extern "C" fn bsp_set_tagsize(tag_nbytes: *mut c_int) {
    with_bsp("bsp_set_tagsize", |b| {
        non_null(
            b,
            "bsp_set_tagsize",
            "tag_nbytes",
            tag_nbytes,
            size_of::<c_int>(),
        );
        let n = size(b, "bsp_set_tagsize", *tag_nbytes);
        *tag_nbytes = b.set_tagsize(n) as c_int;
    })
}

/// `bsp_send(pid, tag, payload, nbytes)`.
#[no_mangle]
pub unsafe extern "C" fn bsp_send(
    pid: c_int,
    tag: *const c_void,
    payload: *const c_void,
    payload_nbytes: c_int,
) {
    with_bsp("bsp_send", |b| {
        let t = b.tagsize();
        let n = size(b, "bsp_send", payload_nbytes);
        non_null(b, "bsp_send", "tag", tag, t);
        non_null(b, "bsp_send", "payload", payload, n);
        let tag: &[u8] = if t == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(tag as *const u8, t)
        };
        let payload: &[u8] = if n == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(payload as *const u8, n)
        };
        let r = b.send(size(b, "bsp_send", pid), tag, payload);
        or_stop(b, r)
    })
}

/// `bsp_qsize(&nmessages, &accum_nbytes)`.
#[no_mangle]
pub unsafe extern "C" fn bsp_qsize(nmessages: *mut c_int, accum_nbytes: *mut c_int) {
    with_bsp("bsp_qsize", |b| {
        let (n, bytes) = b.qsize();
        if !nmessages.is_null() {
            *nmessages = n as c_int;
        }
        if !accum_nbytes.is_null() {
            *accum_nbytes = bytes as c_int;
        }
    })
}

/// `bsp_get_tag(&status, tag)`: `status` = payload size of the first message, or -1 if none.
#[no_mangle]
pub unsafe extern "C" fn bsp_get_tag(status: *mut c_int, tag: *mut c_void) {
    with_bsp("bsp_get_tag", |b| match b.get_tag() {
        Some((n, t)) => {
            non_null(b, "bsp_get_tag", "status", status, size_of::<c_int>());
            non_null(b, "bsp_get_tag", "tag", tag, t.len());
            *status = n as c_int;
            if !t.is_empty() {
                std::ptr::copy_nonoverlapping(t.as_ptr(), tag as *mut u8, t.len());
            }
        }
        None => {
            non_null(b, "bsp_get_tag", "status", status, size_of::<c_int>());
            *status = -1
        }
    })
}

/// `bsp_move(payload, reception_nbytes)`: copies at most `reception_nbytes` of the first
/// message and removes it.
#[no_mangle]
pub unsafe extern "C" fn bsp_move(payload: *mut c_void, reception_nbytes: c_int) {
    with_bsp("bsp_move", |b| {
        let n = size(b, "bsp_move", reception_nbytes);
        let n = n.min(b.get_tag().map_or(0, |(len, _)| len));
        non_null(b, "bsp_move", "payload", payload, n);
        let buf: &mut [u8] = if n == 0 {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(payload as *mut u8, n)
        };
        if b.move_into(buf).is_none() {
            b.fail("bsp_move", "the message queue is empty".into());
        }
    })
}

/// `bsp_hpmove(&tag_ptr, &payload_ptr)`: points at the first message in place (valid until the
/// end of the superstep), removes it, and returns its payload size, or -1 if none.
#[no_mangle]
pub unsafe extern "C" fn bsp_hpmove(
    tag_ptr_buf: *mut *mut c_void,
    payload_ptr_buf: *mut *mut c_void,
) -> c_int {
    with_bsp("bsp_hpmove", |b| {
        if b.get_tag().is_some() {
            let ptr = size_of::<*mut c_void>();
            non_null(b, "bsp_hpmove", "tag_ptr_buf", tag_ptr_buf, ptr);
            non_null(b, "bsp_hpmove", "payload_ptr_buf", payload_ptr_buf, ptr);
        }
        match b.hpmove() {
            Some((t, p)) => {
                *tag_ptr_buf = t.as_ptr() as *mut c_void;
                *payload_ptr_buf = p.as_ptr() as *mut c_void;
                p.len() as c_int
            }
            None => -1,
        }
    })
}
