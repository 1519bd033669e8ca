//! Communicators, groups, attributes, error handlers and info objects (the entry points are in
//! `entry/groups_comms.rs`, `entry/environment.rs` and `entry/info.rs`).

use crate::abi::*;
use crate::check::out;
use crate::error::{fail, CommErrhandlerFn, MpiError, Res};
use crate::p2p::count_arg;
use crate::state::{running, with, AttrKind, CommObj, GroupObj, Keyval, State, KEYVAL_BASE};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, Ordering};

/// Attribute copies for a duplicate: (keyval, callback, extra, value) of every attribute.
type AttrCopy = (c_int, usize, *mut c_void, *mut c_void);

/// `int copy(MPI_Comm, int keyval, void *extra, void *in, void *out, int *flag)`.
type CopyFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `int delete(MPI_Comm, int keyval, void *value, void *extra)`.
type DeleteFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;

/// Registers a new communicator made from `old` (whose attributes are copied) and returns its
/// handle. Attribute callbacks run here, outside any state borrow.
pub(crate) fn register(
    old: Handle,
    comm: Option<ferry_core::Comm>,
    copy_attrs: bool,
) -> Res<Handle> {
    register_with(old, comm, copy_attrs, None)
}

/// [`register`] for an intercommunicator too: `inter` names its hidden helpers.
pub(crate) fn register_with(
    old: Handle,
    comm: Option<ferry_core::Comm>,
    copy_attrs: bool,
    inter: Option<crate::state::Inter>,
) -> Res<Handle> {
    let Some(comm) = comm else {
        return Ok(MPI_COMM_NULL);
    };
    let (errhandler, topo, copies) = with(|s| {
        let o = s.comm(old)?;
        let topo = if copy_attrs { o.topo.clone() } else { None };
        let copies: Vec<AttrCopy> = if copy_attrs {
            o.attrs
                .iter()
                .filter_map(|(k, v)| {
                    let kv = s
                        .keyvals
                        .get((k - KEYVAL_BASE) as usize)
                        .copied()
                        .flatten()?;
                    Some((k, kv.copy, kv.extra, v))
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok((o.errhandler, topo, copies))
    })?;
    let mut attrs = crate::state::Attrs::default();
    for (keyval, copy, extra, value) in copies {
        match copy {
            0 => {}
            1 => {
                attrs.insert(keyval, value);
            }
            f => {
                // SAFETY: registered by MPI_Comm_create_keyval with this signature.
                let f: CopyFn = unsafe { std::mem::transmute::<usize, CopyFn>(f) };
                let mut new_value: *mut c_void = std::ptr::null_mut();
                let mut flag: c_int = 0;
                let rc = unsafe {
                    f(
                        old,
                        keyval,
                        extra,
                        value,
                        &mut new_value as *mut _ as *mut c_void,
                        &mut flag,
                    )
                };
                if rc != MPI_SUCCESS {
                    return fail(
                        rc,
                        format!("attribute copy callback of keyval {keyval} failed"),
                    );
                }
                if flag != 0 {
                    attrs.insert(keyval, new_value);
                }
            }
        }
    }
    with(|s| {
        Ok(s.comms.insert(CommObj {
            comm,
            errhandler,
            name: String::new(),
            attrs,
            topo,
            inter,
            idups: 0,
        }))
    })
}

/// A request that is already complete with an empty status.
pub(crate) fn completed_request(comm: Handle) -> Res<Handle> {
    running(|s| {
        let core = s.core_comm(comm)?;
        let req = crate::request::Request::done(comm, core, crate::request::Outcome::EMPTY);
        Ok(s.requests.insert(req))
    })
}

pub(crate) use ferry_core::derived_pair;
#[cfg(test)]
use ferry_core::{CLAIMED_PAIRS_END as DERIVED_BASE, DERIVED_SLOT as SLOT};

/// MPI_Comm_idup without any message, so that it never waits for another process (MPI 4.1
/// §7.4.2: overlapping idups on different communicators must not deadlock, which an agreement
/// run at once would). Every member counts the idups of `comm` alike (collective calls come in
/// the same order everywhere), so the context pairs are derived from `comm`'s context id and
/// that count. Two live communicators of this process getting the same pairs is caught here
/// (MPI_ERR_INTERN) rather than mixing their messages; with 2^28 slots it is unlikely.
pub(crate) fn idup(comm: Handle) -> Res<Handle> {
    derived_dup(comm, true)
}

/// A duplicate of `comm` that only one persistent collective request uses (MPI 4.1 §6.13:
/// persistent collectives match by the order of their `*_init` calls, not of their starts, so
/// each gets its own context). Made as MPI_Comm_idup makes one, without a message; it keeps
/// the topology (for the neighbourhood collectives) but no attributes. [`free_hidden`] ends it.
pub(crate) fn hidden_dup(comm: Handle) -> Res<Handle> {
    let new = derived_dup(comm, false)?;
    with(|s| {
        let topo = s.comm(comm)?.topo.clone();
        let obj = s.comm_mut(new)?;
        obj.topo = topo;
        obj.errhandler = MPI_ERRORS_RETURN;
        Ok(new)
    })
}

/// Frees a communicator made by [`hidden_dup`] (its requests in flight keep the runtime's
/// communicator alive).
pub(crate) fn free_hidden(comm: Handle) {
    let obj = with(|s| {
        let obj = s.comms.remove(comm);
        if let Some(o) = &obj {
            release_derived(s, o);
        }
        Ok(obj)
    });
    if let Some(inter) = obj.ok().flatten().and_then(|o| o.inter) {
        crate::inter::forget(inter);
    }
}

/// MPI_Comm_idup's derivation, copying attributes (and topology) or not.
fn derived_dup(comm: Handle, copy_attrs: bool) -> Res<Handle> {
    let (core, inter, k) = running(|s| {
        let c = s.comm_mut(comm)?;
        let n = c.idups;
        c.idups += 1;
        let k = derived_pair(c.comm.context_id(), n);
        let (core, inter) = (c.comm.clone(), c.inter);
        if s.derived_pairs.contains(&k) {
            return fail(
                MPI_ERR_INTERN,
                "MPI_Comm_idup: the derived context id is in use here (hash collision); use MPI_Comm_dup",
            );
        }
        s.derived_pairs.insert(k);
        Ok((core, inter, k))
    })?;
    match inter {
        Some(inter) => crate::inter::idup(comm, inter, k, copy_attrs),
        None => {
            let new = core.derive(core.world_ranks(), core.rank(), 2 * k)?;
            register(comm, Some(new), copy_attrs)
        }
    }
}

/// Gives back the derived context pairs of a freed communicator.
fn release_derived(s: &mut State, obj: &CommObj) {
    let k = obj.comm.context_id() / 2;
    if k >= ferry_core::CLAIMED_PAIRS_END {
        s.derived_pairs.remove(&k);
    }
}

/// MPI_Comm_dup for either kind of communicator.
pub(crate) fn dup(comm: Handle) -> Res<Handle> {
    if let Some(inter) = running(|s| s.inter(comm))? {
        return crate::inter::dup(comm, inter);
    }
    let core = running(|s| s.core_comm(comm))?;
    register(comm, Some(core.dup()?), true)
}

/// This host as the runtime sees it: its host id (`ferry_core::host_id`, what decides which
/// ranks share memory), NUL-padded. Not the host name: containers of one machine may share
/// a name and still not share memory.
pub(crate) fn host_key() -> [u8; 64] {
    let mut buf = [0u8; 64];
    let id = ferry_core::host_id();
    let n = id.len().min(buf.len() - 1);
    buf[..n].copy_from_slice(&id.as_bytes()[..n]);
    buf
}

/// A non-negative color naming a host (FNV-1a of its name), the same in every process.
pub(crate) fn host_color(name: &[u8]) -> c_int {
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let h = name[..end].iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    (h & 0x3fff_ffff) as c_int
}

pub(crate) fn compare_members(a: &[u32], b: &[u32]) -> c_int {
    if a == b {
        return MPI_IDENT;
    }
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    x.sort_unstable();
    y.sort_unstable();
    if x == y {
        MPI_SIMILAR
    } else {
        MPI_UNEQUAL
    }
}

/// Runs the delete callbacks of `attrs`, which were taken off `comm`.
pub(crate) unsafe fn delete_attrs(comm: Handle, attrs: Vec<(c_int, *mut c_void)>) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `attrs`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        for (keyval, value) in attrs {
            call_delete(comm, keyval, value)?;
        }
        Ok(())
    }
}

/// Runs the delete callback of `keyval` for an attribute of `comm` (or of a window: the
/// callbacks share the signature `int fn(handle, keyval, value, extra)`).
pub(crate) unsafe fn call_delete(comm: Handle, keyval: c_int, value: *mut c_void) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `value`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let kv = with(|s| {
            Ok(s.keyvals
                .get((keyval - KEYVAL_BASE) as usize)
                .copied()
                .flatten())
        })?;
        if let Some(Keyval { delete, extra, .. }) = kv {
            if delete > 1 {
                // SAFETY: registered by MPI_Comm_create_keyval with this signature.
                let f: DeleteFn = std::mem::transmute::<usize, DeleteFn>(delete);
                let rc = f(comm, keyval, value, extra);
                if rc != MPI_SUCCESS {
                    return fail(
                        rc,
                        format!("attribute delete callback of keyval {keyval} failed"),
                    );
                }
            }
        }
        Ok(())
    }
}

/// MPI_Comm_free: deletes the attributes, forgets the communicator, sets the handle to
/// MPI_COMM_NULL. Safety: the attribute delete callbacks are the program's (MPI's contract).
pub(crate) unsafe fn free_comm(h: &mut Handle) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        if matches!(*h, MPI_COMM_WORLD | MPI_COMM_SELF | MPI_COMM_NULL) {
            return fail(
                MPI_ERR_COMM,
                "predefined communicators and MPI_COMM_NULL cannot be freed",
            );
        }
        let attrs = running(|s| Ok(s.comm_mut(*h)?.attrs.take_newest_first()))?;
        delete_attrs(*h, attrs)?;
        let obj = with(|s| {
            let obj = s.comms.remove(*h);
            if s.parent == *h {
                s.parent = MPI_COMM_NULL;
            }
            // A buffer still attached is the program's again (its sends draw on another).
            s.comm_sessions.remove(h);
            s.bsend_buffers.remove(&crate::bsend::BufferOwner::Comm(*h));
            if let Some(o) = &obj {
                release_derived(s, o);
                crate::part::forget(s, o.comm.context_id());
            }
            Ok(obj)
        })?;
        if let Some(inter) = obj.and_then(|o| o.inter) {
            crate::inter::forget(inter);
        }
        *h = MPI_COMM_NULL;
        Ok(())
    }
}

/// The remote group of `comm`, which must be an intercommunicator.
pub(crate) fn remote_members(s: &State, comm: Handle) -> Res<GroupObj> {
    if s.inter(comm)?.is_none() {
        return fail(
            MPI_ERR_COMM,
            "not an intercommunicator: only those have a remote group",
        );
    }
    Ok(s.comm(comm)?.comm.world_ranks().into())
}

// ---- error handlers ----

pub(crate) fn valid_errhandler(s: &State, h: Handle) -> Res {
    match h {
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT => Ok(()),
        h if s.errhandlers.get(h).is_some() => Ok(()),
        h => fail(MPI_ERR_ARG, format!("invalid error handler {h:#x}")),
    }
}

/// A new error handler calling `function` (the body of every `MPI_*_create_errhandler`: the
/// communicator, window, file and session handler functions have the same C signature).
pub(crate) fn create_errhandler(function: Option<CommErrhandlerFn>) -> Res<Handle> {
    running(|s| new_errhandler(s, function))
}

/// Registers `function` as an error handler in `s` (whether or not MPI runs).
pub(crate) fn new_errhandler(s: &mut State, function: Option<CommErrhandlerFn>) -> Res<Handle> {
    let Some(f) = function else {
        return fail(MPI_ERR_ARG, "error handler function is NULL");
    };
    Ok(s.errhandlers.insert(f))
}

/// Makes `errhandler` the error handler of communicator `comm`.
pub(crate) fn set_comm_errhandler(comm: Handle, errhandler: Handle) -> Res {
    running(|s| {
        valid_errhandler(s, errhandler)?;
        s.comm_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
}

/// The error handler of communicator `comm`.
pub(crate) fn comm_errhandler(comm: Handle) -> Res<Handle> {
    running(|s| Ok(s.comm(comm)?.errhandler))
}

// ---- attributes ----

/// Values of the predefined attributes (their addresses are handed out).
static PREDEFINED: [AtomicI32; 7] = [
    AtomicI32::new(i32::MAX),         // MPI_TAG_UB
    AtomicI32::new(MPI_ANY_SOURCE),   // MPI_IO: every rank can do I/O
    AtomicI32::new(MPI_PROC_NULL),    // MPI_HOST: no host rank
    AtomicI32::new(0),                // MPI_WTIME_IS_GLOBAL
    AtomicI32::new(0),                // MPI_APPNUM
    AtomicI32::new(MPI_ERR_LASTCODE), // MPI_LASTUSEDCODE
    AtomicI32::new(1),                // MPI_UNIVERSE_SIZE (set at first query)
];

/// Updates the MPI_LASTUSEDCODE attribute.
pub(crate) fn set_last_used_code(code: c_int) {
    PREDEFINED[(MPI_LASTUSEDCODE - MPI_TAG_UB) as usize].store(code, Ordering::Relaxed);
}

/// Registers an attribute key for objects of `kind`.
pub(crate) unsafe fn create_keyval(
    copy: usize,
    delete: usize,
    keyval: *mut c_int,
    extra: *mut c_void,
    kind: AttrKind,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `keyval` and `extra`, as
    // the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let out = out(keyval, "keyval")?;
        *out = running(|s| {
            s.keyvals.push(Some(Keyval {
                copy,
                delete,
                extra,
                kind,
            }));
            Ok(KEYVAL_BASE + s.keyvals.len() as c_int - 1)
        })?;
        Ok(())
    }
}

/// Frees an attribute key.
pub(crate) unsafe fn free_keyval(keyval: *mut c_int) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `keyval`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let k = out(keyval, "keyval")?;
        running(|s| match s.keyvals.get_mut((*k - KEYVAL_BASE) as usize) {
            Some(slot @ Some(_)) => {
                // Attributes already set keep their callbacks: only new uses are refused.
                let _ = slot;
                Ok(())
            }
            _ => fail(MPI_ERR_KEYVAL, format!("invalid keyval {}", *k)),
        })?;
        *k = MPI_KEYVAL_INVALID;
        Ok(())
    }
}

pub(crate) fn check_keyval(s: &State, keyval: c_int) -> Res {
    if (MPI_TAG_UB..=MPI_UNIVERSE_SIZE).contains(&keyval) {
        return fail(
            MPI_ERR_KEYVAL,
            format!("predefined attribute {keyval} cannot be changed"),
        );
    }
    s.keyval(keyval, AttrKind::Comm).map(drop)
}

pub(crate) unsafe fn set_attr(comm: Handle, keyval: c_int, value: *mut c_void) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `value`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let old = running(|s| {
            check_keyval(s, keyval)?;
            Ok(s.comm(comm)?.attrs.get(keyval))
        })?;
        // The old value's delete callback runs first; if it fails, the old value stays.
        if let Some(old) = old {
            call_delete(comm, keyval, old)?;
        }
        running(|s| {
            s.comm_mut(comm)?.attrs.insert(keyval, value);
            Ok(())
        })
    }
}

pub(crate) unsafe fn get_attr(
    comm: Handle,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `value` and `flag`, as the
    // caller promises, are NULL or valid for what the MPI call it serves reads and writes through
    // them.
    unsafe {
        let flag = out(flag, "flag")?;
        let value = out(value as *mut *mut c_void, "attribute_val")?;
        let found = running(|s| {
            let c = s.comm(comm)?;
            if (MPI_TAG_UB..=MPI_UNIVERSE_SIZE).contains(&keyval) {
                let i = (keyval - MPI_TAG_UB) as usize;
                if keyval == MPI_UNIVERSE_SIZE {
                    let size = crate::dynamic::universe_size(s.world.as_ref());
                    PREDEFINED[i].store(size, Ordering::Relaxed);
                }
                if keyval == MPI_APPNUM {
                    PREDEFINED[i]
                        .store(crate::dynamic::appnum(s.world.as_ref()), Ordering::Relaxed);
                }
                return Ok(Some(PREDEFINED[i].as_ptr() as *mut c_void));
            }
            s.keyval(keyval, AttrKind::Comm)?;
            Ok(c.attrs.get(keyval))
        })?;
        match found {
            Some(v) => {
                *value = v;
                *flag = 1;
            }
            None => *flag = 0,
        }
        Ok(())
    }
}

pub(crate) unsafe fn delete_attr(comm: Handle, keyval: c_int) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        let old = running(|s| {
            check_keyval(s, keyval)?;
            Ok(s.comm(comm)?.attrs.get(keyval))
        })?;
        let Some(v) = old else {
            return fail(MPI_ERR_KEYVAL, format!("no attribute for keyval {keyval}"));
        };
        // Removed only once its delete callback succeeds (a failing callback keeps it).
        call_delete(comm, keyval, v)?;
        running(|s| {
            s.comm_mut(comm)?.attrs.remove(keyval);
            Ok(())
        })
    }
}

// ---- groups ----

pub(crate) fn new_group(s: &mut State, members: GroupObj) -> Handle {
    if members.is_empty() {
        MPI_GROUP_EMPTY
    } else {
        s.groups.insert(members)
    }
}

pub(crate) fn group_rank_arg(g: &[u32], rank: c_int) -> Res<usize> {
    usize::try_from(rank)
        .ok()
        .filter(|&r| r < g.len())
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_RANK,
                format!("rank {rank} is not in a group of {}", g.len()),
            )
        })
}

pub(crate) unsafe fn group_op(
    g1: Handle,
    g2: Handle,
    newgroup: *mut Handle,
    f: impl Fn(&[u32], &[u32]) -> Vec<u32>,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `newgroup`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let out = out(newgroup, "newgroup")?;
        *out = running(|s| {
            let (a, b) = (s.group(g1)?, s.group(g2)?);
            let members: GroupObj = f(&a, &b).into();
            Ok(new_group(s, members))
        })?;
        Ok(())
    }
}

/// Group ranks listed in `ranks`, checked for range and repeats.
pub(crate) unsafe fn rank_list(g: &[u32], n: c_int, ranks: *const c_int) -> Res<Vec<usize>> {
    // SAFETY: this function's contract is the unsafe operations' own: `ranks`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let n = count_arg(n)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        if ranks.is_null() {
            return fail(MPI_ERR_ARG, "rank array is NULL");
        }
        let mut seen = vec![false; g.len()];
        std::slice::from_raw_parts(ranks, n)
            .iter()
            .map(|&r| {
                let r = group_rank_arg(g, r)?;
                if std::mem::replace(&mut seen[r], true) {
                    return fail(MPI_ERR_RANK, format!("rank {r} is listed twice"));
                }
                Ok(r)
            })
            .collect()
    }
}

/// Group ranks of `n` (first, last, stride) triplets.
pub(crate) unsafe fn range_list(g: &[u32], n: c_int, ranges: *const [c_int; 3]) -> Res<Vec<usize>> {
    // SAFETY: this function's contract is the unsafe operations' own: `ranges`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let n = count_arg(n)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        if ranges.is_null() {
            return fail(MPI_ERR_ARG, "range array is NULL");
        }
        let mut list = Vec::new();
        for &[first, last, stride] in std::slice::from_raw_parts(ranges, n) {
            if stride == 0 {
                return fail(MPI_ERR_ARG, "range stride 0");
            }
            group_rank_arg(g, first)?;
            group_rank_arg(g, last)?;
            let mut r = first as i64;
            while (stride > 0 && r <= last as i64) || (stride < 0 && r >= last as i64) {
                list.push(r as c_int);
                r += stride as i64;
            }
        }
        rank_list(g, list.len() as c_int, list.as_ptr())
    }
}

pub(crate) unsafe fn subgroup(
    group: Handle,
    newgroup: *mut Handle,
    pick: impl FnOnce(&[u32]) -> Res<Vec<usize>>,
    include: bool,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `newgroup`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let out = out(newgroup, "newgroup")?;
        *out = running(|s| {
            let g = s.group(group)?;
            let listed = pick(&g)?;
            let members: Vec<u32> = if include {
                listed.iter().map(|&r| g[r]).collect()
            } else {
                (0..g.len())
                    .filter(|r| !listed.contains(r))
                    .map(|r| g[r])
                    .collect()
            };
            Ok(new_group(s, Rc::from(members)))
        })?;
        Ok(())
    }
}

// ---- info ----

pub(crate) unsafe fn c_str(p: *const c_char, what: &str) -> Res<String> {
    // SAFETY: this function's contract is the unsafe operations' own: `p`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if p.is_null() {
            return fail(MPI_ERR_ARG, format!("{what} is NULL"));
        }
        Ok(CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

pub(crate) fn info_mut(s: &mut State, h: Handle) -> Res<&mut Vec<(String, String)>> {
    if h == MPI_INFO_ENV {
        if s.info_env.is_empty() {
            let command = std::env::args().next().unwrap_or_default();
            let procs = s.world.as_ref().map_or(1, |w| w.size());
            let wdir = std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default();
            s.info_env = vec![
                ("command".into(), command),
                ("maxprocs".into(), procs.to_string()),
                ("wdir".into(), wdir),
                (
                    "thread_level".into(),
                    crate::session::thread_level_name(s.thread_level).into(),
                ),
            ];
        }
        return Ok(&mut s.info_env);
    }
    s.infos
        .get_mut(h)
        .ok_or_else(|| MpiError::new(MPI_ERR_INFO, format!("invalid info {h:#x}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_pairs_are_stable_aligned_slots_above_the_agreed_ones() {
        let mut seen = std::collections::HashSet::new();
        for context in [0u32, 2, 4, 1000, u32::MAX - 1] {
            for n in 0..50 {
                let k = derived_pair(context, n);
                assert_eq!(k, derived_pair(context, n));
                assert!(k >= DERIVED_BASE && (k - DERIVED_BASE).is_multiple_of(SLOT));
                // the whole slot (three pairs of an intercommunicator) stays in u32 context ids
                assert!((k as u64 + SLOT as u64) * 2 <= u32::MAX as u64 + 1);
                seen.insert(k);
            }
        }
        assert_eq!(seen.len(), 250, "no two of these collide");
    }
}
