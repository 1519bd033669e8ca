//! Communicators, groups, attributes, error handlers and info objects.

use crate::abi::*;
use crate::check::out;
use crate::env::write_string;
use crate::error::{fail, handle_error, CommErrhandlerFn, MpiError, Res};
use crate::p2p::count_arg;
use crate::state::{running, with, AttrKind, CommObj, GroupObj, Keyval, State, KEYVAL_BASE};
use crate::NONE;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, Ordering};

mpi! {
    /// Number of ranks.
    fn MPI_Comm_size / PMPI_Comm_size(comm: Handle, size: *mut c_int) on comm => {
        let n = running(|s| s.local_size(comm))?;
        *out(size, "size")? = n as c_int;
        Ok(())
    }
}
mpi! {
    /// This process's rank.
    fn MPI_Comm_rank / PMPI_Comm_rank(comm: Handle, rank: *mut c_int) on comm => {
        let r = running(|s| Ok(s.comm(comm)?.comm.rank()))?;
        *out(rank, "rank")? = r as c_int;
        Ok(())
    }
}

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

mpi! {
    /// Duplicates a communicator (new context, copied attributes).
    fn MPI_Comm_dup / PMPI_Comm_dup(comm: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        *out = dup(comm)?;
        Ok(())
    }
}
mpi! {
    /// Duplicates a communicator; the info is ignored.
    fn MPI_Comm_dup_with_info / PMPI_Comm_dup_with_info(comm: Handle, _info: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        *out = dup(comm)?;
        Ok(())
    }
}
mpi! {
    /// Nonblocking duplicate, made at once without a message: the context ids are derived from
    /// the parent's and the number of its idups (see `idup` in this module).
    fn MPI_Comm_idup / PMPI_Comm_idup(comm: Handle, newcomm: *mut Handle, request: *mut Handle) on comm => {
        let req = out(request, "request")?;
        let new = out(newcomm, "newcomm")?;
        *new = idup(comm)?;
        *req = completed_request(comm)?;
        Ok(())
    }
}
mpi! {
    /// MPI_Comm_idup with hints (ignored).
    fn MPI_Comm_idup_with_info / PMPI_Comm_idup_with_info(comm: Handle, _info: Handle, newcomm: *mut Handle, request: *mut Handle) on comm => {
        let req = out(request, "request")?;
        let new = out(newcomm, "newcomm")?;
        *new = idup(comm)?;
        *req = completed_request(comm)?;
        Ok(())
    }
}

/// A request that is already complete with an empty status.
fn completed_request(comm: Handle) -> Res<Handle> {
    running(|s| {
        let core = s.core_comm(comm)?;
        let req = crate::request::Request::done(comm, core, crate::request::Outcome::EMPTY);
        Ok(s.requests.insert(req))
    })
}

/// First context pair index of the range MPI_Comm_idup derives into; agreed pairs (a counter
/// from 1) never get near it.
const DERIVED_BASE: u32 = ferry_core::CLAIMED_PAIRS_END;

/// The first of the context pairs (`k` for an intracommunicator, `k` to `k + 2` for an
/// intercommunicator) of the `n`-th MPI_Comm_idup of the communicator with context id
/// `context`: a hash of the two into slots of [`SLOT`] pairs from [`DERIVED_BASE`].
pub(crate) fn derived_pair(context: u32, n: u32) -> u32 {
    // splitmix64 of (context, n): every member computes the same pair without a message.
    let mut z = ((context as u64) << 32 | n as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    DERIVED_BASE + SLOT * ((z as u32) & (DERIVED_BASE / SLOT - 1))
}

/// Pairs per derived slot: enough for an intercommunicator.
const SLOT: u32 = 4;

/// MPI_Comm_idup without any message, so that it never waits for another process (MPI 4.1
/// §7.4.2: overlapping idups on different communicators must not deadlock, which an agreement
/// run at once would). Every member counts the idups of `comm` alike (collective calls come in
/// the same order everywhere), so the context pairs are derived from `comm`'s context id and
/// that count. Two live communicators of this process getting the same pairs is caught here
/// (MPI_ERR_INTERN) rather than mixing their messages; with 2^28 slots it is unlikely.
fn idup(comm: Handle) -> Res<Handle> {
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
    if k >= DERIVED_BASE {
        s.derived_pairs.remove(&k);
    }
}

/// MPI_Comm_dup for either kind of communicator.
fn dup(comm: Handle) -> Res<Handle> {
    if let Some(inter) = running(|s| s.inter(comm))? {
        return crate::inter::dup(comm, inter);
    }
    let core = running(|s| s.core_comm(comm))?;
    register(comm, Some(core.dup()?), true)
}
mpi! {
    /// Splits by color, ordered by key.
    fn MPI_Comm_split / PMPI_Comm_split(comm: Handle, color: c_int, key: c_int, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        let (core, inter) = running(|s| Ok((s.core_comm(comm)?, s.inter(comm)?)))?;
        if color < 0 && color != MPI_UNDEFINED {
            return fail(MPI_ERR_ARG, format!("split color {color} is negative (only MPI_UNDEFINED may be)"));
        }
        if let Some(inter) = inter {
            *out = crate::inter::split(comm, inter, color, key)?;
            return Ok(());
        }
        let color = match color {
            MPI_UNDEFINED => None,
            c => Some(c as u32),
        };
        *out = register(comm, core.split(color, key)?, false)?;
        Ok(())
    }
}

/// This host as the runtime sees it: its host id (`ferry_core::host_id`, what decides which
/// ranks share memory), NUL-padded. Not the host name: containers of one machine may share
/// a name and still not share memory.
fn host_key() -> [u8; 64] {
    let mut buf = [0u8; 64];
    let id = ferry_core::host_id();
    let n = id.len().min(buf.len() - 1);
    buf[..n].copy_from_slice(&id.as_bytes()[..n]);
    buf
}

/// A non-negative color naming a host (FNV-1a of its name), the same in every process.
fn host_color(name: &[u8]) -> c_int {
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let h = name[..end].iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    (h & 0x3fff_ffff) as c_int
}

mpi! {
    /// Splits by shared-memory domain (one communicator per host). The host is the only
    /// hardware level ferry knows: MPI_COMM_TYPE_HW_GUIDED and _RESOURCE_GUIDED accept
    /// `mpi_hw_resource_type` = "mpi_shared_memory" (which every implementation must) and give
    /// MPI_COMM_NULL for other resources; MPI_COMM_TYPE_HW_UNGUIDED gives the host when it is
    /// a strict subset of `comm`, else MPI_COMM_NULL (MPI 4.1 §7.4.2). On an intercommunicator
    /// the result is the intercommunicator of each host's processes in both groups (as MPICH;
    /// MPI_COMM_TYPE_HW_UNGUIDED then acts as MPI_COMM_TYPE_SHARED).
    fn MPI_Comm_split_type / PMPI_Comm_split_type(comm: Handle, split_type: c_int, key: c_int, info: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        let (core, inter) = running(|s| Ok((s.core_comm(comm)?, s.inter(comm)?)))?;
        let by_host = match split_type {
            MPI_UNDEFINED => false,
            MPI_COMM_TYPE_SHARED | MPI_COMM_TYPE_HW_UNGUIDED => true,
            MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_RESOURCE_GUIDED => running(|s| {
                if info == MPI_INFO_NULL {
                    return Ok(false);
                }
                Ok(info_mut(s, info)?
                    .iter()
                    .any(|(k, v)| k == "mpi_hw_resource_type" && v == "mpi_shared_memory"))
            })?,
            t => return fail(MPI_ERR_ARG, format!("split type {t} is not a communicator split type")),
        };
        if let Some(inter) = inter {
            // As MPICH: an intercommunicator of the processes of each host in both groups
            // (the color names the host alike on both sides).
            let color = if by_host { host_color(&host_key()) } else { MPI_UNDEFINED };
            *out = crate::inter::split(comm, inter, color, key)?;
            return Ok(());
        }
        // Processes passing MPI_UNDEFINED take part in the host exchange too: it is collective.
        let mine = host_key();
        let mut all = vec![0u8; 64 * core.size()];
        core.allgather(&mine, &mut all)?;
        let hosts: Vec<&[u8]> = all.chunks(64).collect();
        let whole = hosts.iter().all(|h| *h == &mine[..]);
        let color = match split_type {
            _ if !by_host => None,
            MPI_COMM_TYPE_HW_UNGUIDED if whole => None,
            _ => hosts.iter().position(|h| *h == &mine[..]).map(|i| i as u32),
        };
        *out = register(comm, core.split(color, key)?, false)?;
        Ok(())
    }
}
mpi! {
    /// A communicator of the members of `group` (collective over `comm`).
    fn MPI_Comm_create / PMPI_Comm_create(comm: Handle, group: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        let (core, members, inter) = running(|s| Ok((s.core_comm(comm)?, s.group(group)?, s.inter(comm)?)))?;
        if let Some(inter) = inter {
            *out = crate::inter::create(comm, inter, &members)?;
            return Ok(());
        }
        let parent: Vec<u32> = core.world_ranks().to_vec();
        if let Some(w) = members.iter().find(|w| !parent.contains(w)) {
            return fail(MPI_ERR_GROUP, format!("group member (world rank {w}) is not in the communicator"));
        }
        let me = parent[core.rank()];
        let position = members.iter().position(|&w| w == me);
        // Processes may pass different, disjoint groups (MPI 2.2+): each group is its own
        // color, named by its lowest member.
        let color = position.map(|_| members.iter().copied().min().unwrap_or(0));
        let key = position.unwrap_or(0) as c_int;
        *out = register(comm, core.split(color, key)?, false)?;
        Ok(())
    }
}

mpi! {
    /// A communicator of the members of `group`, collective over those members only.
    fn MPI_Comm_create_group / PMPI_Comm_create_group(comm: Handle, group: Handle, tag: c_int, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        if tag < 0 {
            return fail(MPI_ERR_TAG, format!("invalid tag {tag}"));
        }
        let (core, members) = running(|s| Ok((s.intra_comm(comm)?, s.group(group)?)))?;
        let parent = core.world_ranks();
        let ranks = members
            .iter()
            .map(|w| parent.iter().position(|p| p == w).ok_or_else(|| {
                MpiError::new(MPI_ERR_GROUP, format!("group member (world rank {w}) is not in the communicator"))
            }))
            .collect::<Res<Vec<usize>>>()?;
        *out = register(comm, core.create_subset(&ranks, tag)?, false)?;
        Ok(())
    }
}

fn compare_members(a: &[u32], b: &[u32]) -> c_int {
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

mpi! {
    /// Compares two communicators.
    fn MPI_Comm_compare / PMPI_Comm_compare(comm1: Handle, comm2: Handle, result: *mut c_int) on comm1 => {
        let out = out(result, "result")?;
        let (a, b, ia, ib, la, lb) = running(|s| {
            Ok((s.core_comm(comm1)?, s.core_comm(comm2)?, s.inter(comm1)?, s.inter(comm2)?,
                s.local_group(comm1)?, s.local_group(comm2)?))
        })?;
        *out = if comm1 == comm2 || a.context_id() == b.context_id() {
            MPI_IDENT
        } else if ia.is_some() != ib.is_some() {
            MPI_UNEQUAL
        } else if ia.is_some() {
            // Intercommunicators: both the local and the remote groups count (MPI 4.1 §7.4.1).
            match (compare_members(&la, &lb), compare_members(a.world_ranks(), b.world_ranks())) {
                (MPI_IDENT, MPI_IDENT) => MPI_CONGRUENT,
                (MPI_UNEQUAL, _) | (_, MPI_UNEQUAL) => MPI_UNEQUAL,
                _ => MPI_SIMILAR,
            }
        } else {
            match compare_members(a.world_ranks(), b.world_ranks()) {
                MPI_IDENT => MPI_CONGRUENT,
                r => r,
            }
        };
        Ok(())
    }
}

/// Runs the delete callbacks of `attrs`, which were taken off `comm`.
pub(crate) unsafe fn delete_attrs(comm: Handle, attrs: Vec<(c_int, *mut c_void)>) -> Res {
    for (keyval, value) in attrs {
        call_delete(comm, keyval, value)?;
    }
    Ok(())
}

/// Runs the delete callback of `keyval` for an attribute of `comm` (or of a window: the
/// callbacks share the signature `int fn(handle, keyval, value, extra)`).
pub(crate) unsafe fn call_delete(comm: Handle, keyval: c_int, value: *mut c_void) -> Res {
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
    /// Frees a communicator (deleting its attributes first).
    fn MPI_Comm_free / PMPI_Comm_free(comm: *mut Handle) on NONE => {
        free_comm(out(comm, "comm")?)
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
        crate::coll::barrier(*h, std::ptr::null_mut())?;
        free_comm(h)
    }
}

/// MPI_Comm_free: deletes the attributes, forgets the communicator, sets the handle to
/// MPI_COMM_NULL. Safety: the attribute delete callbacks are the program's (MPI's contract).
unsafe fn free_comm(h: &mut Handle) -> Res {
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
mpi! {
    /// The group of a communicator.
    fn MPI_Comm_group / PMPI_Comm_group(comm: Handle, group: *mut Handle) on comm => {
        let out = out(group, "group")?;
        *out = running(|s| {
            let members = s.local_group(comm)?;
            Ok(new_group(s, members))
        })?;
        Ok(())
    }
}
mpi! {
    /// Whether a communicator is an intercommunicator.
    fn MPI_Comm_test_inter / PMPI_Comm_test_inter(comm: Handle, flag: *mut c_int) on comm => {
        let inter = running(|s| s.inter(comm))?;
        *out(flag, "flag")? = inter.is_some() as c_int;
        Ok(())
    }
}

/// The remote group of `comm`, which must be an intercommunicator.
fn remote_members(s: &State, comm: Handle) -> Res<GroupObj> {
    if s.inter(comm)?.is_none() {
        return fail(
            MPI_ERR_COMM,
            "not an intercommunicator: only those have a remote group",
        );
    }
    Ok(s.comm(comm)?.comm.world_ranks().into())
}

mpi! {
    /// Size of an intercommunicator's remote group.
    fn MPI_Comm_remote_size / PMPI_Comm_remote_size(comm: Handle, size: *mut c_int) on comm => {
        let n = running(|s| remote_members(s, comm))?.len();
        *out(size, "size")? = n as c_int;
        Ok(())
    }
}
mpi! {
    /// An intercommunicator's remote group.
    fn MPI_Comm_remote_group / PMPI_Comm_remote_group(comm: Handle, group: *mut Handle) on comm => {
        let out = out(group, "group")?;
        *out = running(|s| {
            let members = remote_members(s, comm)?;
            Ok(new_group(s, members))
        })?;
        Ok(())
    }
}
mpi! {
    /// Names a communicator.
    fn MPI_Comm_set_name / PMPI_Comm_set_name(comm: Handle, name: *const c_char) on comm => {
        if name.is_null() {
            return fail(MPI_ERR_ARG, "name is NULL");
        }
        let text = CStr::from_ptr(name).to_string_lossy().chars().take(MPI_MAX_OBJECT_NAME - 1).collect();
        running(|s| { s.comm_mut(comm)?.name = text; Ok(()) })
    }
}
mpi! {
    /// A communicator's name; "MPI_COMM_NULL" for the null handle, which MPI 4.1 allows here.
    fn MPI_Comm_get_name / PMPI_Comm_get_name(comm: Handle, name: *mut c_char, resultlen: *mut c_int) on comm => {
        if comm == MPI_COMM_NULL {
            return write_string("MPI_COMM_NULL", name, MPI_MAX_OBJECT_NAME, resultlen);
        }
        let text = running(|s| Ok(s.comm(comm)?.name.clone()))?;
        write_string(&text, name, MPI_MAX_OBJECT_NAME, resultlen)
    }
}
mpi! {
    /// The hints in use (none).
    fn MPI_Comm_get_info / PMPI_Comm_get_info(comm: Handle, info: *mut Handle) on comm => {
        let out = out(info, "info")?;
        *out = running(|s| { s.comm(comm)?; Ok(s.infos.insert(Vec::new())) })?;
        Ok(())
    }
}

// ---- error handlers ----

pub(crate) fn valid_errhandler(s: &State, h: Handle) -> Res {
    match h {
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT => Ok(()),
        h if s.errhandlers.get(h).is_some() => Ok(()),
        h => fail(MPI_ERR_ARG, format!("invalid error handler {h:#x}")),
    }
}

mpi! {
    /// Creates an error handler from a function.
    fn MPI_Comm_create_errhandler / PMPI_Comm_create_errhandler(function: Option<CommErrhandlerFn>, errhandler: *mut Handle) on NONE => {
        let out = out(errhandler, "errhandler")?;
        *out = create_errhandler(function)?;
        Ok(())
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

/// Frees an attribute key.
pub(crate) unsafe fn free_keyval(keyval: *mut c_int) -> Res {
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

fn check_keyval(s: &State, keyval: c_int) -> Res {
    if (MPI_TAG_UB..=MPI_UNIVERSE_SIZE).contains(&keyval) {
        return fail(
            MPI_ERR_KEYVAL,
            format!("predefined attribute {keyval} cannot be changed"),
        );
    }
    s.keyval(keyval, AttrKind::Comm).map(drop)
}

unsafe fn set_attr(comm: Handle, keyval: c_int, value: *mut c_void) -> Res {
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

unsafe fn get_attr(comm: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> Res {
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
                PREDEFINED[i].store(crate::dynamic::appnum(s.world.as_ref()), Ordering::Relaxed);
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

unsafe fn delete_attr(comm: Handle, keyval: c_int) -> Res {
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

mpi! {
    /// Creates an attribute key.
    fn MPI_Comm_create_keyval / PMPI_Comm_create_keyval(copy: usize, delete: usize, keyval: *mut c_int, extra: *mut c_void) on NONE => {
        create_keyval(copy, delete, keyval, extra, AttrKind::Comm)
    }
}
mpi! {
    /// Creates an attribute key (MPI-1 name).
    fn MPI_Keyval_create / PMPI_Keyval_create(copy: usize, delete: usize, keyval: *mut c_int, extra: *mut c_void) on NONE => {
        create_keyval(copy, delete, keyval, extra, AttrKind::Comm)
    }
}
mpi! {
    /// Frees an attribute key.
    fn MPI_Comm_free_keyval / PMPI_Comm_free_keyval(keyval: *mut c_int) on NONE => { free_keyval(keyval) }
}
mpi! {
    /// Frees an attribute key (MPI-1 name).
    fn MPI_Keyval_free / PMPI_Keyval_free(keyval: *mut c_int) on NONE => { free_keyval(keyval) }
}
mpi! {
    /// Sets an attribute.
    fn MPI_Comm_set_attr / PMPI_Comm_set_attr(comm: Handle, keyval: c_int, value: *mut c_void) on comm => { set_attr(comm, keyval, value) }
}
mpi! {
    /// Sets an attribute (MPI-1 name).
    fn MPI_Attr_put / PMPI_Attr_put(comm: Handle, keyval: c_int, value: *mut c_void) on comm => { set_attr(comm, keyval, value) }
}
mpi! {
    /// Reads an attribute.
    fn MPI_Comm_get_attr / PMPI_Comm_get_attr(comm: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) on comm => { get_attr(comm, keyval, value, flag) }
}
mpi! {
    /// Reads an attribute (MPI-1 name).
    fn MPI_Attr_get / PMPI_Attr_get(comm: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) on comm => { get_attr(comm, keyval, value, flag) }
}
mpi! {
    /// Deletes an attribute.
    fn MPI_Comm_delete_attr / PMPI_Comm_delete_attr(comm: Handle, keyval: c_int) on comm => { delete_attr(comm, keyval) }
}
mpi! {
    /// Deletes an attribute (MPI-1 name).
    fn MPI_Attr_delete / PMPI_Attr_delete(comm: Handle, keyval: c_int) on comm => { delete_attr(comm, keyval) }
}

// ---- groups ----

pub(crate) fn new_group(s: &mut State, members: GroupObj) -> Handle {
    if members.is_empty() {
        MPI_GROUP_EMPTY
    } else {
        s.groups.insert(members)
    }
}

fn group_rank_arg(g: &[u32], rank: c_int) -> Res<usize> {
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

mpi! {
    /// Number of members.
    fn MPI_Group_size / PMPI_Group_size(group: Handle, size: *mut c_int) on NONE => {
        *out(size, "size")? = running(|s| s.group(group))?.len() as c_int;
        Ok(())
    }
}
mpi! {
    /// This process's rank in the group, or MPI_UNDEFINED.
    fn MPI_Group_rank / PMPI_Group_rank(group: Handle, rank: *mut c_int) on NONE => {
        let (g, me) = running(|s| Ok((s.group(group)?, s.world_rank().unwrap_or(0) as u32)))?;
        *out(rank, "rank")? = g.iter().position(|&w| w == me).map_or(MPI_UNDEFINED, |r| r as c_int);
        Ok(())
    }
}
mpi! {
    /// Ranks of one group's members in another.
    fn MPI_Group_translate_ranks / PMPI_Group_translate_ranks(group1: Handle, n: c_int, ranks1: *const c_int, group2: Handle, ranks2: *mut c_int) on NONE => {
        let n = count_arg(n)?;
        let (a, b) = running(|s| Ok((s.group(group1)?, s.group(group2)?)))?;
        if n == 0 {
            return Ok(());
        }
        if ranks1.is_null() || ranks2.is_null() {
            return fail(MPI_ERR_ARG, "rank array is NULL");
        }
        let (input, output) = (std::slice::from_raw_parts(ranks1, n), std::slice::from_raw_parts_mut(ranks2, n));
        for (i, &r) in input.iter().enumerate() {
            output[i] = if r == MPI_PROC_NULL {
                MPI_PROC_NULL
            } else {
                let w = a[group_rank_arg(&a, r)?];
                b.iter().position(|&x| x == w).map_or(MPI_UNDEFINED, |p| p as c_int)
            };
        }
        Ok(())
    }
}
mpi! {
    /// Compares two groups.
    fn MPI_Group_compare / PMPI_Group_compare(group1: Handle, group2: Handle, result: *mut c_int) on NONE => {
        let (a, b) = running(|s| Ok((s.group(group1)?, s.group(group2)?)))?;
        *out(result, "result")? = compare_members(&a, &b);
        Ok(())
    }
}

unsafe fn group_op(
    g1: Handle,
    g2: Handle,
    newgroup: *mut Handle,
    f: impl Fn(&[u32], &[u32]) -> Vec<u32>,
) -> Res {
    let out = out(newgroup, "newgroup")?;
    *out = running(|s| {
        let (a, b) = (s.group(g1)?, s.group(g2)?);
        let members: GroupObj = f(&a, &b).into();
        Ok(new_group(s, members))
    })?;
    Ok(())
}

mpi! {
    /// Members of either group (first's order, then the second's new ones).
    fn MPI_Group_union / PMPI_Group_union(group1: Handle, group2: Handle, newgroup: *mut Handle) on NONE => {
        group_op(group1, group2, newgroup, |a, b| {
            let mut v = a.to_vec();
            v.extend(b.iter().filter(|w| !a.contains(w)));
            v
        })
    }
}
mpi! {
    /// Members of both groups (first's order).
    fn MPI_Group_intersection / PMPI_Group_intersection(group1: Handle, group2: Handle, newgroup: *mut Handle) on NONE => {
        group_op(group1, group2, newgroup, |a, b| a.iter().copied().filter(|w| b.contains(w)).collect())
    }
}
mpi! {
    /// Members of the first group not in the second.
    fn MPI_Group_difference / PMPI_Group_difference(group1: Handle, group2: Handle, newgroup: *mut Handle) on NONE => {
        group_op(group1, group2, newgroup, |a, b| a.iter().copied().filter(|w| !b.contains(w)).collect())
    }
}

/// Group ranks listed in `ranks`, checked for range and repeats.
unsafe fn rank_list(g: &[u32], n: c_int, ranks: *const c_int) -> Res<Vec<usize>> {
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

/// Group ranks of `n` (first, last, stride) triplets.
unsafe fn range_list(g: &[u32], n: c_int, ranges: *const [c_int; 3]) -> Res<Vec<usize>> {
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

unsafe fn subgroup(
    group: Handle,
    newgroup: *mut Handle,
    pick: impl FnOnce(&[u32]) -> Res<Vec<usize>>,
    include: bool,
) -> Res {
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

mpi! {
    /// The listed members, in the listed order.
    fn MPI_Group_incl / PMPI_Group_incl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) on NONE => {
        subgroup(group, newgroup, |g| rank_list(g, n, ranks), true)
    }
}
mpi! {
    /// The members not listed.
    fn MPI_Group_excl / PMPI_Group_excl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) on NONE => {
        subgroup(group, newgroup, |g| rank_list(g, n, ranks), false)
    }
}
mpi! {
    /// The members in the ranges.
    fn MPI_Group_range_incl / PMPI_Group_range_incl(group: Handle, n: c_int, ranges: *const [c_int; 3], newgroup: *mut Handle) on NONE => {
        subgroup(group, newgroup, |g| range_list(g, n, ranges), true)
    }
}
mpi! {
    /// The members outside the ranges.
    fn MPI_Group_range_excl / PMPI_Group_range_excl(group: Handle, n: c_int, ranges: *const [c_int; 3], newgroup: *mut Handle) on NONE => {
        subgroup(group, newgroup, |g| range_list(g, n, ranges), false)
    }
}
mpi! {
    /// Frees a group.
    fn MPI_Group_free / PMPI_Group_free(group: *mut Handle) on NONE => {
        let h = out(group, "group")?;
        running(|s| match *h {
            MPI_GROUP_EMPTY => Ok(()),
            g => {
                s.group_sessions.remove(&g);
                s.groups.remove(g).map(drop).ok_or_else(|| MpiError::new(MPI_ERR_GROUP, format!("invalid group {g:#x}")))
            }
        })?;
        *h = MPI_GROUP_NULL;
        Ok(())
    }
}

// ---- info ----

pub(crate) unsafe fn c_str(p: *const c_char, what: &str) -> Res<String> {
    if p.is_null() {
        return fail(MPI_ERR_ARG, format!("{what} is NULL"));
    }
    Ok(CStr::from_ptr(p).to_string_lossy().into_owned())
}

fn info_mut(s: &mut State, h: Handle) -> Res<&mut Vec<(String, String)>> {
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
    /// Sets hints on a communicator: ferry uses none, so all are ignored (MPI 4.1 §7.4.4
    /// lets an implementation ignore hints; MPI_Comm_get_info then does not report them).
    fn MPI_Comm_set_info / PMPI_Comm_set_info(comm: Handle, info: Handle) on comm => {
        with(|s| {
            s.comm(comm)?;
            info_mut(s, info).map(drop)
        })
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
