//! Intercommunicators (MPI 4.1 §7.6): creation, merge, duplication, split and the MPI-2
//! collectives on them.
//!
//! An intercommunicator is four runtime communicators on three context pairs `k` to `k + 2`
//! that every process of both groups has agreed on (MPI_Comm_idup derives them instead, see
//! `comm::idup`):
//! - the one the user holds, on context `2k`: its members are the *remote* group and its rank
//!   is the local one, so point-to-point ranks, `MPI_ANY_SOURCE` and `status.MPI_SOURCE` all
//!   name remote ranks with no extra code on the point-to-point path;
//! - `coll`, the remote group again on `2k + 1`: the traffic of collectives and agreements,
//!   which can never meet the user's messages;
//! - `local`, the local group as an intracommunicator on pair `k + 1` (collectives on
//!   `2k + 3`). Both groups use that pair for their own local communicator: they share no
//!   process, so the ids cannot clash;
//! - `union`, both groups as one intracommunicator on pair `k + 2` (the group whose leader has
//!   the lower world rank first): the nonblocking collectives run schedules on it.
//!
//! Agreement: every process proposes its lowest free pair, each group gathers its proposals
//! (with whatever else the call needs: world rank, color, key, `high`), the two leaders swap
//! the lists, each group broadcasts the other's list, and everyone takes the largest proposal.
//!
//! Blocking collectives are built from the local group's collectives and point-to-point on
//! `coll`: correctness first, one message per pair at most per call. The nonblocking ones are
//! schedules on `union`: reductions, barrier and broadcast go through the leaders (fan-in,
//! leader exchange, fan-out), the others are direct sends and receives between the groups.

use crate::abi::*;
use crate::coll;
use crate::coll::{Buf, Direction, Ints, PerRank, RecvBuf};
use crate::comm::register_with;
use crate::datatype::Datatype;
use crate::error::{fail, MpiError, Res};
use crate::p2p::{count_arg, start_recv, start_send, wait_request, Count};
use crate::request::SendKind;
use crate::state::State;
use crate::state::{running, with, CommObj, Inter};
use ferry_core::Comm;
use ferry_sched::{Buffer, Order, Region, Schedule, ScheduleBuilder, StepId};
use std::ffi::{c_int, c_void};

/// Tag of the agreements' leader swap on `coll`.
const TAG_AGREE: i32 = 1;
/// Tag of collective traffic on `coll`.
const TAG_COLL: i32 = 2;

/// What each process contributes to an agreement.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rec {
    pub(crate) world: u32,
    pub(crate) pair: u32,
    pub(crate) color: i32,
    pub(crate) key: i32,
    pub(crate) flag: u32,
}

const REC: usize = 20;

impl Rec {
    fn bytes(&self) -> [u8; REC] {
        let mut b = [0u8; REC];
        b[0..4].copy_from_slice(&self.world.to_le_bytes());
        b[4..8].copy_from_slice(&self.pair.to_le_bytes());
        b[8..12].copy_from_slice(&self.color.to_le_bytes());
        b[12..16].copy_from_slice(&self.key.to_le_bytes());
        b[16..20].copy_from_slice(&self.flag.to_le_bytes());
        b
    }

    fn parse(b: &[u8]) -> Rec {
        let word = |i: usize| [b[i], b[i + 1], b[i + 2], b[i + 3]];
        Rec {
            world: u32::from_le_bytes(word(0)),
            pair: u32::from_le_bytes(word(4)),
            color: i32::from_le_bytes(word(8)),
            key: i32::from_le_bytes(word(12)),
            flag: u32::from_le_bytes(word(16)),
        }
    }

    fn list(bytes: &[u8]) -> Vec<Rec> {
        bytes.chunks_exact(REC).map(Rec::parse).collect()
    }
}

/// Where the leaders swap their group's records: (communicator, remote leader's rank in it,
/// tag). Only the local leader has one.
pub(crate) type Swap<'a> = Option<(&'a Comm, usize, i32)>;

/// Gathers every local process's record, swaps the lists between the leaders (local rank
/// `leader` calls with `swap`), and gives every local process both lists, each in rank order.
pub(crate) fn exchange(
    local: &Comm,
    leader: usize,
    swap: Swap<'_>,
    mine: Rec,
) -> Res<(Vec<Rec>, Vec<Rec>)> {
    let mut all = vec![0u8; REC * local.size()];
    local.allgather(&mine.bytes(), &mut all)?;
    let mut len = [0u64];
    let mut theirs = Vec::new();
    if let Some((comm, remote_leader, tag)) = swap {
        comm.sendrecv(
            &[all.len() as u64],
            remote_leader,
            tag,
            &mut len,
            remote_leader,
            tag,
        )?;
        if len[0] == 0 || !len[0].is_multiple_of(REC as u64) || len[0] > (REC as u64) << 24 {
            return fail(
                MPI_ERR_INTERN,
                format!(
                    "intercommunicator agreement: the remote leader sent {} bytes of records",
                    len[0]
                ),
            );
        }
        theirs = vec![0u8; len[0] as usize];
        comm.sendrecv(&all, remote_leader, tag, &mut theirs, remote_leader, tag)?;
    }
    local.bcast(&mut len, leader)?;
    theirs.resize(len[0] as usize, 0);
    local.bcast(&mut theirs, leader)?;
    Ok((Rec::list(&all), Rec::list(&theirs)))
}

/// The pairs of the new communicators: those claimed by the member with the lowest world rank
/// (every member claims a block, and all see the same records).
pub(crate) fn agreed_pair(a: &[Rec], b: &[Rec]) -> u32 {
    a.iter()
        .chain(b)
        .min_by_key(|r| r.world)
        .map_or(0, |r| r.pair)
}

/// The runtime side of a new intercommunicator.
pub(crate) struct Parts {
    visible: Comm,
    coll: Comm,
    local: Comm,
    union: Comm,
}

/// Number of context pairs an intercommunicator takes.
pub(crate) const PAIRS: u32 = 3;
const _: () = assert!(PAIRS <= ferry_core::CONTEXT_BLOCK);

/// Builds the communicators of an intercommunicator on pairs `k` to `k + 2`, which both groups
/// have agreed on (and reserved, or derived).
fn build(base: &Comm, local: &[u32], remote: &[u32], rank: usize, k: u32) -> Res<Parts> {
    let local_first = local.first() < remote.first();
    let (first, second) = if local_first {
        (local, remote)
    } else {
        (remote, local)
    };
    let all: Vec<u32> = first.iter().chain(second).copied().collect();
    let union_rank = if local_first {
        rank
    } else {
        remote.len() + rank
    };
    Ok(Parts {
        visible: base.derive(remote, rank, 2 * k)?,
        coll: base.derive(remote, rank, 2 * k + 1)?,
        local: base.derive(local, rank, 2 * k + 2)?,
        union: base.derive(&all, union_rank, 2 * k + 4)?,
    })
}

/// [`build`] on agreed pairs.
pub(crate) fn parts(base: &Comm, local: &[u32], remote: &[u32], rank: usize, k: u32) -> Res<Parts> {
    build(base, local, remote, rank, k)
}

/// MPI_Comm_idup on an intercommunicator, on the derived pairs `k` and `k + 1` (see
/// `comm::idup`): no message is sent.
pub(crate) fn idup(comm: Handle, inter: Inter, k: u32, copy_attrs: bool) -> Res<Handle> {
    let (local, coll) = halves(inter)?;
    let p = build(
        &local,
        local.world_ranks(),
        coll.world_ranks(),
        local.rank(),
        k,
    )?;
    register_inter(comm, p, copy_attrs)
}

/// `MPIX_Comm_shrink` of an intercommunicator: its survivors agree over both groups (the
/// union), and each group keeps its members that the agreement did not hold failed.
pub(crate) fn shrink(comm: Handle, inter: Inter) -> Res<Handle> {
    let (local, coll) = halves(inter)?;
    let union = running(|s| s.core_comm(inter.union))?;
    let (failed, k) = union.shrink_agreement()?;
    let mut dead = Vec::new();
    for m in failed {
        dead.push(union.world_rank_of(m)? as u32);
    }
    let live = |ranks: &[u32]| -> Vec<u32> {
        ranks
            .iter()
            .copied()
            .filter(|w| !dead.contains(w))
            .collect()
    };
    let (mine, theirs) = (live(local.world_ranks()), live(coll.world_ranks()));
    if theirs.is_empty() {
        return fail(
            MPIX_ERR_PROC_FAILED,
            "MPIX_Comm_shrink: every member of the remote group failed",
        );
    }
    let me = local.world_rank_of(local.rank())? as u32;
    let rank = mine.iter().position(|&w| w == me).unwrap_or(0);
    crate::ft::reserve_pair(k)?;
    let p = build(&local, &mine, &theirs, rank, k)?;
    register_inter(comm, p, false)
}

/// Registers an intercommunicator made from `old` (attributes copied for a duplicate).
pub(crate) fn register_inter(old: Handle, p: Parts, copy_attrs: bool) -> Res<Handle> {
    let hidden = |comm| CommObj {
        comm,
        errhandler: MPI_ERRORS_RETURN,
        name: String::new(),
        attrs: Default::default(),
        topo: None,
        inter: None,
        idups: 0,
    };
    let inter = with(|s| {
        Ok(Inter {
            local: s.comms.insert(hidden(p.local)),
            coll: s.comms.insert(hidden(p.coll)),
            union: s.comms.insert(hidden(p.union)),
        })
    })?;
    let made = register_with(old, Some(p.visible), copy_attrs, Some(inter));
    if made.is_err() {
        forget(inter);
    }
    made
}

/// Drops the hidden communicators of a freed intercommunicator.
pub(crate) fn forget(inter: Inter) {
    let _ = with(|s| {
        s.comms.remove(inter.local);
        s.comms.remove(inter.coll);
        s.comms.remove(inter.union);
        Ok(())
    });
}

/// The helpers of `comm`, which must be an intercommunicator.
pub(crate) fn inter_arg(comm: Handle) -> Res<Inter> {
    running(|s| s.inter(comm))?.ok_or_else(|| {
        MpiError::new(
            MPI_ERR_COMM,
            format!("communicator {comm:#x} is not an intercommunicator"),
        )
    })
}

/// The local and collective runtime communicators of an intercommunicator.
fn halves(inter: Inter) -> Res<(Comm, Comm)> {
    running(|s| Ok((s.core_comm(inter.local)?, s.core_comm(inter.coll)?)))
}

/// Runs an agreement over an existing intercommunicator.
pub(crate) fn agree(
    inter: Inter,
    mine: impl FnOnce(&Comm) -> Rec,
) -> Res<(Comm, Vec<Rec>, Vec<Rec>)> {
    let (local, coll) = halves(inter)?;
    let rec = Rec {
        pair: local.claim_context_pairs()?,
        ..mine(&local)
    };
    let swap = (local.rank() == 0).then_some((&coll, 0, TAG_AGREE));
    let (l, r) = exchange(&local, 0, swap, rec)?;
    Ok((local, l, r))
}

pub(crate) fn world_of(recs: &[Rec]) -> Vec<u32> {
    recs.iter().map(|r| r.world).collect()
}

pub(crate) fn my_world(c: &Comm) -> u32 {
    c.world_ranks()[c.rank()]
}

/// The intercommunicator between the group of `local_comm` (whose runtime side is `local`)
/// and the group whose leader meets this group's `leader` as `swap` says (only the leader
/// passes it). Collective over `local_comm`; MPI_Intercomm_create and the dynamic-process
/// calls (`crate::dynamic`) end here.
pub(crate) fn connect_groups(
    local_comm: Handle,
    local: &Comm,
    leader: usize,
    swap: Swap<'_>,
) -> Res<Handle> {
    let mine = Rec {
        world: my_world(local),
        pair: local.claim_context_pairs()?,
        ..Rec::default()
    };
    let (l, r) = exchange(local, leader, swap, mine)?;
    let (lw, rw) = (world_of(&l), world_of(&r));
    if rw.iter().any(|w| lw.contains(w)) {
        return fail(
            MPI_ERR_COMM,
            "the local and remote groups of an intercommunicator must be disjoint",
        );
    }
    let p = parts(local, &lw, &rw, local.rank(), agreed_pair(&l, &r))?;
    register_inter(local_comm, p, false)
}

/// The intercommunicator between the groups `local` and `remote` (universe ranks, each in rank
/// order) on pairs `k` to `k + 2`, which every process of both groups knows already (spawn:
/// the spawning root claimed them and the launcher told the new processes). No message.
pub(crate) fn between(
    old: Handle,
    base: &Comm,
    local: &[u32],
    remote: &[u32],
    rank: usize,
    k: u32,
) -> Res<Handle> {
    register_inter(old, build(base, local, remote, rank, k)?, false)
}

/// A tag from a string tag (FNV-1a), non-negative.
pub(crate) fn string_tag(text: &[u8]) -> i32 {
    let h = text.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    (h & 0x3fff_ffff) as i32
}

/// MPI_Comm_dup on an intercommunicator.
pub(crate) fn dup(comm: Handle, inter: Inter) -> Res<Handle> {
    let (local, l, r) = agree(inter, |c| Rec {
        world: my_world(c),
        ..Rec::default()
    })?;
    let p = parts(
        &local,
        &world_of(&l),
        &world_of(&r),
        local.rank(),
        agreed_pair(&l, &r),
    )?;
    register_inter(comm, p, true)
}

/// MPI_Comm_split on an intercommunicator: the local members of each color form the local
/// group and the remote members of that color the remote group; MPI_COMM_NULL when either is
/// empty. `color` is MPI_UNDEFINED or non-negative.
pub(crate) fn split(comm: Handle, inter: Inter, color: c_int, key: c_int) -> Res<Handle> {
    let (local, l, r) = agree(inter, |c| Rec {
        world: my_world(c),
        color,
        key,
        ..Rec::default()
    })?;
    let k = agreed_pair(&l, &r);
    let pick = |recs: &[Rec]| -> Vec<u32> {
        let mut m: Vec<(i32, usize, u32)> = recs
            .iter()
            .enumerate()
            .filter(|(_, x)| x.color == color)
            .map(|(i, x)| (x.key, i, x.world))
            .collect();
        m.sort_unstable();
        m.into_iter().map(|(_, _, w)| w).collect()
    };
    let (mine, theirs) = (pick(&l), pick(&r));
    if color == MPI_UNDEFINED || theirs.is_empty() {
        return Ok(MPI_COMM_NULL);
    }
    let me = my_world(&local);
    let rank = mine.iter().position(|&w| w == me).unwrap_or(0);
    let p = parts(&local, &mine, &theirs, rank, k)?;
    register_inter(comm, p, false)
}

/// MPI_Comm_create on an intercommunicator: `members` (world ranks) must be part of the local
/// group; the new remote group is what the remote side passed.
pub(crate) fn create(comm: Handle, inter: Inter, members: &[u32]) -> Res<Handle> {
    let local_group = running(|s| s.local_group(comm))?;
    if let Some(w) = members.iter().find(|w| !local_group.contains(w)) {
        return fail(
            MPI_ERR_GROUP,
            format!("group member (world rank {w}) is not in the local group"),
        );
    }
    let me = running(|s| Ok(my_world(&s.core_comm(inter.local)?)))?;
    match members.iter().position(|&w| w == me) {
        Some(i) => split(comm, inter, 0, i as c_int),
        None => split(comm, inter, MPI_UNDEFINED, 0),
    }
}

// ---- collectives ----

/// Who a process is in a rooted collective.
pub(crate) enum Side {
    /// The root (passed MPI_ROOT).
    Root,
    /// Another process of the root's group (passed MPI_PROC_NULL).
    Idle,
    /// A process of the other group; the root's remote rank.
    Leaf(c_int),
}

/// Who this process is in a rooted collective with `root` on an intercommunicator whose
/// remote group has `remote` processes.
pub(crate) fn side(root: c_int, remote: usize) -> Res<Side> {
    match root {
        MPI_ROOT => Ok(Side::Root),
        MPI_PROC_NULL => Ok(Side::Idle),
        r if r >= 0 && (r as usize) < remote => Ok(Side::Leaf(r)),
        r => fail(
            MPI_ERR_ROOT,
            format!("root {r} is neither MPI_ROOT, MPI_PROC_NULL nor a rank of the remote group of {remote}"),
        ),
    }
}

fn no_in_place(p: *const c_void) -> Res {
    coll::no_in_place(p, "on intercommunicators")
}

/// One collective call's point-to-point: listed, checked all together, then posted and waited
/// for together. Nothing is posted unless every block is good: a receive left posted by a call
/// that failed would match a later call's message.
struct Traffic {
    coll: Handle,
    ops: Vec<Transfer>,
}

/// One send (`to_peer`) or receive of `count` elements of `dt` at `buf` with process `peer`.
struct Transfer {
    to_peer: bool,
    buf: *mut c_void,
    count: Count,
    dt: Handle,
    peer: usize,
}

impl Traffic {
    fn new(inter: Inter) -> Traffic {
        Traffic {
            coll: inter.coll,
            ops: Vec::new(),
        }
    }

    fn send(&mut self, buf: *const c_void, count: usize, dt: Handle, dest: usize) -> Res {
        self.add(true, buf as *mut c_void, count, dt, dest)
    }

    fn recv(&mut self, buf: *mut c_void, count: usize, dt: Handle, source: usize) -> Res {
        self.add(false, buf, count, dt, source)
    }

    fn add(
        &mut self,
        to_peer: bool,
        buf: *mut c_void,
        count: usize,
        dt: Handle,
        peer: usize,
    ) -> Res {
        let count = Count::try_from(count).map_err(|_| {
            MpiError::new(
                MPI_ERR_COUNT,
                format!("count {count} does not fit an MPI_Count"),
            )
        })?;
        self.ops.push(Transfer {
            to_peer,
            buf,
            count,
            dt,
            peer,
        });
        Ok(())
    }

    fn finish(self) -> Res {
        let coll = self.coll;
        running(|s| {
            self.ops.iter().try_for_each(|t| {
                // An empty block may name MPI_DATATYPE_NULL, as in point-to-point.
                if t.count == 0 {
                    return Ok(());
                }
                let dt = s.committed_type(t.dt)?;
                crate::check::buffer(t.buf, t.count as usize, &dt)
            })
        })?;
        let mut reqs = Vec::with_capacity(self.ops.len());
        let mut first = Ok(());
        for t in &self.ops {
            let started = running(|s| {
                if t.to_peer {
                    let kind = SendKind::Standard;
                    start_send(
                        s,
                        t.buf,
                        t.count,
                        t.dt,
                        t.peer as c_int,
                        TAG_COLL,
                        coll,
                        kind,
                    )
                } else {
                    start_recv(s, t.buf, t.count, t.dt, t.peer as c_int, TAG_COLL, coll)
                }
            });
            match started {
                Ok(r) => reqs.push(r),
                Err(e) => {
                    first = Err(e);
                    break;
                }
            }
        }
        for mut r in reqs {
            let done = wait_request(&mut r).and_then(|o| o.check());
            if first.is_ok() {
                first = done;
            }
        }
        first
    }
}

/// Scratch room for `count` elements of a datatype, addressed as a user buffer would be.
struct Temp {
    _room: Vec<u8>,
    base: *mut c_void,
}

impl Temp {
    fn new(dt: Handle, count: usize) -> Res<Temp> {
        let t: Datatype = running(|s| s.committed_type(dt))?;
        let (lo, hi) = crate::check::span(count, &t)?;
        let mut room = vec![0u8; (hi - lo).max(1) as usize];
        let base = room.as_mut_ptr().wrapping_offset(-lo) as *mut c_void;
        Ok(Temp { _room: room, base })
    }
}

fn extent_of(dt: Handle) -> Res<isize> {
    running(|s| Ok(s.committed_type(dt)?.extent()))
}

fn at(buf: *const c_void, bytes: isize) -> *mut c_void {
    (buf as *mut u8).wrapping_offset(bytes) as *mut c_void
}

/// `buf` moved by `displ` elements of extent `ext`, or MPI_ERR_COUNT when that overflows.
fn at_element(buf: *const c_void, displ: i64, ext: isize) -> Res<*mut c_void> {
    let bytes = isize::try_from(displ)
        .ok()
        .and_then(|d| d.checked_mul(ext))
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_COUNT,
                format!(
                    "displacement {displ} of a datatype of extent {ext} reaches past the address space"
                ),
            )
        })?;
    Ok(at(buf, bytes))
}

/// Sizes of an intercommunicator's two groups and the local rank.
fn shape(inter: Inter) -> Res<(usize, usize, usize)> {
    running(|s| {
        let l = s.core_comm(inter.local)?;
        let r = s.core_comm(inter.coll)?;
        Ok((l.size(), r.size(), l.rank()))
    })
}

use crate::coll::BLOCKING;

/// MPI_Barrier: each group meets, the leaders swap an empty message, each group meets again.
pub(crate) unsafe fn barrier(inter: Inter) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        coll::barrier(inter.local, BLOCKING)?;
        if shape(inter)?.2 == 0 {
            let mut t = Traffic::new(inter);
            t.recv(std::ptr::null_mut(), 0, MPI_BYTE_HANDLE, 0)?;
            t.send(std::ptr::null(), 0, MPI_BYTE_HANDLE, 0)?;
            t.finish()?;
        }
        coll::barrier(inter.local, BLOCKING)
    }
}

/// `MPI_BYTE`'s handle.
const MPI_BYTE_HANDLE: Handle = 0x247;

/// MPI_Bcast: the root sends to the remote leader, which broadcasts in its group.
pub(crate) unsafe fn bcast(
    inter: Inter,
    buf: *mut c_void,
    count: Count,
    dt: Handle,
    root: c_int,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `buf`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let n = count_arg(count)?;
        let (_, remote, me) = shape(inter)?;
        match side(root, remote)? {
            Side::Root => {
                let mut t = Traffic::new(inter);
                t.send(buf, n, dt, 0)?;
                t.finish()
            }
            Side::Idle => Ok(()),
            Side::Leaf(r) => {
                if me == 0 {
                    let mut t = Traffic::new(inter);
                    t.recv(buf, n, dt, r as usize)?;
                    t.finish()?;
                }
                coll::bcast(buf, count, dt, 0, inter.local, BLOCKING)
            }
        }
    }
}

/// MPI_Reduce: the other group reduces to its leader, which sends the result to the root.
pub(crate) unsafe fn reduce(
    inter: Inter,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    dt: Handle,
    op: Handle,
    root: c_int,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `sendbuf` and `recvbuf`,
    // as the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let n = count_arg(count)?;
        let (_, remote, me) = shape(inter)?;
        match side(root, remote)? {
            Side::Root => {
                running(|s| s.op(op).map(drop))?;
                let mut t = Traffic::new(inter);
                t.recv(recvbuf, n, dt, 0)?;
                t.finish()
            }
            Side::Idle => Ok(()),
            Side::Leaf(r) => {
                no_in_place(sendbuf)?;
                let tmp = Temp::new(dt, n)?;
                coll::reduce(sendbuf, tmp.base, count, dt, op, 0, inter.local, BLOCKING)?;
                if me == 0 {
                    let mut t = Traffic::new(inter);
                    t.send(tmp.base, n, dt, r as usize)?;
                    t.finish()?;
                }
                Ok(())
            }
        }
    }
}

/// MPI_Allreduce: each group reduces to its leader, the leaders swap, each group broadcasts
/// what the other group reduced.
pub(crate) unsafe fn allreduce(
    inter: Inter,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    dt: Handle,
    op: Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `sendbuf` and `recvbuf`,
    // as the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        no_in_place(sendbuf)?;
        let n = count_arg(count)?;
        let me = shape(inter)?.2;
        let tmp = Temp::new(dt, n)?;
        coll::reduce(sendbuf, tmp.base, count, dt, op, 0, inter.local, BLOCKING)?;
        if me == 0 {
            let mut t = Traffic::new(inter);
            t.recv(recvbuf, n, dt, 0)?;
            t.send(tmp.base, n, dt, 0)?;
            t.finish()?;
        }
        coll::bcast(recvbuf, count, dt, 0, inter.local, BLOCKING)
    }
}

/// Counts and displacements (elements, per remote rank) from the C arrays `v` of a
/// v-collective, or equal blocks of `count` for the plain one; `names` name the arrays in errors.
unsafe fn per_remote(
    count: Count,
    v: PerRank,
    remote: usize,
    names: (&str, &str),
) -> Res<(Vec<i64>, Vec<i64>)> {
    // SAFETY: this function's contract is the unsafe operations' own: `v`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        Ok(match v {
            Some((c, d)) => (c.get(remote, names.0)?, d.get(remote, names.1)?),
            None => {
                let displs = (0..remote as i64)
                    .map(|i| {
                        i.checked_mul(count).ok_or_else(|| {
                            MpiError::new(
                                MPI_ERR_COUNT,
                                format!(
                                    "{remote} blocks of {count} elements overflow an MPI_Count"
                                ),
                            )
                        })
                    })
                    .collect::<Res<_>>()?;
                (vec![count; remote], displs)
            }
        })
    }
}

/// MPI_Gather(v) and MPI_Scatter(v): the root and each process of the other group exchange a
/// block, the way `dir` says. `v` (elements, per remote rank) are the root's counts and
/// displacements; `None` means equal blocks.
pub(crate) unsafe fn rooted(
    dir: Direction,
    inter: Inter,
    send: Buf,
    recv: RecvBuf,
    v: PerRank,
    root: c_int,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `send`, `recv` and `v`, as
    // the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let (_, remote, _) = shape(inter)?;
        let (all, one) = dir.roles(send, recv);
        let mut t = Traffic::new(inter);
        match side(root, remote)? {
            Side::Root => {
                let (buf, count, dt) = all;
                let ext = extent_of(dt)?;
                let counts_name = if dir.root_sends() {
                    "sendcounts"
                } else {
                    "recvcounts"
                };
                let (counts, displs) = per_remote(count, v, remote, (counts_name, "displs"))?;
                for i in 0..remote {
                    let c = count_arg(counts[i])?;
                    let block = at_element(buf, displs[i], ext)?;
                    t.add(dir.root_sends(), block, c, dt, i)?;
                }
            }
            Side::Idle => {}
            Side::Leaf(r) => {
                let (buf, count, dt) = one;
                no_in_place(buf)?;
                let count = count_arg(count)?;
                t.add(!dir.root_sends(), buf as *mut c_void, count, dt, r as usize)?;
            }
        }
        t.finish()
    }
}

/// MPI_Allgather and MPI_Allgatherv: every process sends its block to every remote process
/// and receives every remote process's block.
pub(crate) unsafe fn allgather(inter: Inter, send: Buf, recv: RecvBuf, v: PerRank) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `send`, `recv` and `v`, as
    // the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let (_, remote, _) = shape(inter)?;
        let (sbuf, scount, sdt) = send;
        no_in_place(sbuf)?;
        let (rbuf, rcount, rdt) = recv;
        let ext = extent_of(rdt)?;
        let (counts, displs) = per_remote(rcount, v, remote, ("recvcounts", "displs"))?;
        let scount = count_arg(scount)?;
        let mut t = Traffic::new(inter);
        for j in 0..remote {
            t.recv(
                at_element(rbuf, displs[j], ext)?,
                count_arg(counts[j])?,
                rdt,
                j,
            )?;
        }
        for j in 0..remote {
            t.send(sbuf, scount, sdt, j)?;
        }
        t.finish()
    }
}

/// Per-remote-rank blocks of one side of an all-to-all: (address, count, datatype).
pub(crate) type Blocks = Vec<(*mut c_void, usize, Handle)>;

/// MPI_Alltoall(v/w): block `j` of the send buffer goes to remote rank `j`, block `j` of the
/// receive buffer comes from it.
pub(crate) unsafe fn alltoall(inter: Inter, send: Blocks, recv: Blocks) -> Res {
    let mut t = Traffic::new(inter);
    for (j, &(buf, count, dt)) in recv.iter().enumerate() {
        t.recv(buf, count, dt, j)?;
    }
    for (j, &(buf, count, dt)) in send.iter().enumerate() {
        t.send(buf, count, dt, j)?;
    }
    t.finish()
}

/// The blocks of MPI_Alltoall(v) for `remote` ranks: `v` = (counts, displs) in elements, or
/// equal blocks of `count`.
pub(crate) unsafe fn blocks(
    buf: *const c_void,
    count: Count,
    dt: Handle,
    v: PerRank,
    remote: usize,
) -> Res<Blocks> {
    // SAFETY: this function's contract is the unsafe operations' own: `buf` and `v`, as the
    // caller promises, are NULL or valid for what the MPI call it serves reads and writes through
    // them.
    unsafe {
        no_in_place(buf)?;
        let ext = extent_of(dt)?;
        let (counts, displs) = per_remote(count, v, remote, ("counts", "displacements"))?;
        (0..remote)
            .map(|j| Ok((at_element(buf, displs[j], ext)?, count_arg(counts[j])?, dt)))
            .collect()
    }
}

/// The blocks of MPI_Alltoallw: byte displacements and a datatype per remote rank.
pub(crate) unsafe fn blocks_w(
    buf: *const c_void,
    counts: Ints,
    displs: Ints,
    types: *const Handle,
    remote: usize,
) -> Res<Blocks> {
    // SAFETY: this function's contract is the unsafe operations' own: `buf`, `counts`, `displs`
    // and `types`, as the caller promises, are NULL or valid for what the MPI call it serves reads
    // and writes through them.
    unsafe {
        no_in_place(buf)?;
        let c = counts.get(remote, "counts")?;
        let d = displs.get(remote, "displacements")?;
        if remote > 0 && types.is_null() {
            return fail(MPI_ERR_ARG, "datatype array is NULL");
        }
        (0..remote)
            .map(|j| Ok((at(buf, d[j] as isize), count_arg(c[j])?, *types.add(j))))
            .collect()
    }
}

/// Remote group size of an intercommunicator.
pub(crate) fn remote_size(inter: Inter) -> Res<usize> {
    Ok(shape(inter)?.1)
}

/// MPI_Reduce_scatter(_block): each group reduces the whole vector to its leader, the leaders
/// swap, and each leader scatters what the other group reduced over its own group by
/// `counts` (which both groups' counts must add up to alike).
pub(crate) unsafe fn reduce_scatter(
    inter: Inter,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: &[usize],
    dt: Handle,
    op: Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `sendbuf` and `recvbuf`,
    // as the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        no_in_place(sendbuf)?;
        let me = shape(inter)?.2;
        let total: usize = counts.iter().sum();
        let wide = |n: usize| {
            Count::try_from(n).map_err(|_| {
                MpiError::new(
                    MPI_ERR_COUNT,
                    format!("count {n} does not fit an MPI_Count"),
                )
            })
        };
        let mine = Temp::new(dt, total)?;
        let theirs = Temp::new(dt, total)?;
        coll::reduce(
            sendbuf,
            mine.base,
            wide(total)?,
            dt,
            op,
            0,
            inter.local,
            BLOCKING,
        )?;
        if me == 0 {
            let mut t = Traffic::new(inter);
            t.recv(theirs.base, total, dt, 0)?;
            t.send(mine.base, total, dt, 0)?;
            t.finish()?;
        }
        let c: Vec<Count> = counts.iter().map(|&x| wide(x)).collect::<Res<_>>()?;
        let mut d = Vec::with_capacity(c.len());
        let mut acc: Count = 0;
        for &x in &c {
            d.push(acc);
            acc = acc.saturating_add(x);
        }
        coll::scatterv(
            theirs.base,
            c.as_ptr().into(),
            d.as_ptr().into(),
            dt,
            recvbuf,
            c[me],
            dt,
            0,
            inter.local,
            BLOCKING,
        )
    }
}

// ---- nonblocking collectives: schedules on the union communicator ----

/// An intercommunicator's union communicator and where each group sits in it.
pub(crate) struct Union {
    /// The union communicator (both groups).
    pub(crate) core: Comm,
    local: Vec<usize>,
    remote: Vec<usize>,
    me: usize,
}

impl Union {
    /// This process's rank in the local group.
    pub(crate) fn local_rank(&self) -> usize {
        self.me
    }

    /// Number of processes in the remote group.
    pub(crate) fn remote_size(&self) -> usize {
        self.remote.len()
    }

    fn builder(&self, send_bytes: usize, recv_bytes: usize) -> ScheduleBuilder {
        ScheduleBuilder::new(self.core.rank(), self.core.size(), send_bytes, recv_bytes)
    }

    fn leader(&self) -> bool {
        self.me == 0
    }

    /// Leader: receives every other local process's `bytes` of its send buffer and reduces
    /// them in rank order into a scratch copy of its own; returns that region and the last
    /// step. Others: send theirs to the leader.
    fn fan_in(&self, b: &mut ScheduleBuilder, bytes: usize) -> Option<(Region, Vec<StepId>)> {
        let mine = Region::new(Buffer::Send, 0, bytes);
        if !self.leader() {
            b.send(self.local[0], mine, &[]);
            return None;
        }
        let acc = Region::new(b.scratch(bytes), 0, bytes);
        let mut last = b.copy(mine, acc, &[]);
        for &peer in &self.local[1..] {
            let tmp = Region::new(b.scratch(bytes), 0, bytes);
            let got = b.recv(peer, tmp, &[]);
            last = b.reduce(tmp, acc, Order::DstFirst, &[last, got]);
        }
        Some((acc, vec![last]))
    }

    /// Leader: sends `region` to every other local process after `deps`. Others: receive
    /// `bytes` from the leader into their receive buffer.
    fn fan_out(&self, b: &mut ScheduleBuilder, region: Region, bytes: usize, deps: &[StepId]) {
        if self.leader() {
            for &peer in &self.local[1..] {
                b.send(peer, region, deps);
            }
        } else {
            b.recv(self.local[0], Region::new(Buffer::Recv, 0, bytes), &[]);
        }
    }
}

/// The union communicator of `inter`.
pub(crate) fn union_of(s: &State, inter: Inter) -> Res<Union> {
    let core = s.core_comm(inter.union)?;
    let local = s.core_comm(inter.local)?;
    let (nl, nr, me) = (local.size(), s.core_comm(inter.coll)?.size(), local.rank());
    // The local group is first in the union exactly when this process's union rank is its
    // local rank (the remote group is never empty).
    let lo = if core.rank() == me { 0 } else { nr };
    let ro = if lo == 0 { nl } else { 0 };
    Ok(Union {
        core,
        local: (lo..lo + nl).collect(),
        remote: (ro..ro + nr).collect(),
        me,
    })
}

/// MPI_Ibarrier: fan-in to each leader, the leaders swap empty messages, fan-out.
pub(crate) fn nb_barrier(u: &Union) -> Schedule {
    let mut b = u.builder(0, 0);
    let empty = Region::new(Buffer::Recv, 0, 0);
    if u.leader() {
        let arrived: Vec<StepId> = u.local[1..]
            .iter()
            .map(|&p| b.recv(p, empty, &[]))
            .collect();
        let sent = b.send(u.remote[0], empty, &arrived);
        let got = b.recv(u.remote[0], empty, &[]);
        u.fan_out(&mut b, empty, 0, &[sent, got]);
    } else {
        b.send(u.local[0], empty, &[]);
        u.fan_out(&mut b, empty, 0, &[]);
    }
    b.finish()
}

/// MPI_Ibcast of `bytes`: the root's send buffer to the remote leader, which fans it out.
pub(crate) fn nb_bcast(u: &Union, side: &Side, bytes: usize) -> Schedule {
    match *side {
        Side::Root => {
            let mut b = u.builder(bytes, 0);
            b.send(u.remote[0], Region::new(Buffer::Send, 0, bytes), &[]);
            b.finish()
        }
        Side::Idle => u.builder(0, 0).finish(),
        Side::Leaf(root) => {
            let mut b = u.builder(0, bytes);
            let all = Region::new(Buffer::Recv, 0, bytes);
            if u.leader() {
                let got = b.recv(u.remote[root as usize], all, &[]);
                u.fan_out(&mut b, all, bytes, &[got]);
            } else {
                u.fan_out(&mut b, all, bytes, &[]);
            }
            b.finish()
        }
    }
}

/// MPI_Ireduce of `bytes`: the other group reduces to its leader, which sends to the root.
pub(crate) fn nb_reduce(u: &Union, side: &Side, bytes: usize) -> Schedule {
    match *side {
        Side::Root => {
            let mut b = u.builder(0, bytes);
            b.recv(u.remote[0], Region::new(Buffer::Recv, 0, bytes), &[]);
            b.finish()
        }
        Side::Idle => u.builder(0, 0).finish(),
        Side::Leaf(root) => {
            let mut b = u.builder(bytes, 0);
            if let Some((acc, deps)) = u.fan_in(&mut b, bytes) {
                b.send(u.remote[root as usize], acc, &deps);
            }
            b.finish()
        }
    }
}

/// MPI_Iallreduce of `bytes`: each group reduces to its leader, the leaders swap, each
/// leader fans out what the other group reduced.
pub(crate) fn nb_allreduce(u: &Union, bytes: usize) -> Schedule {
    let mut b = u.builder(bytes, bytes);
    let out = Region::new(Buffer::Recv, 0, bytes);
    match u.fan_in(&mut b, bytes) {
        Some((acc, deps)) => {
            let sent = b.send(u.remote[0], acc, &deps);
            let got = b.recv(u.remote[0], out, &[]);
            u.fan_out(&mut b, out, bytes, &[sent, got]);
        }
        None => u.fan_out(&mut b, out, bytes, &[]),
    }
    b.finish()
}

/// Independent sends and receives with remote ranks: (remote rank, offset, bytes) in the send
/// and receive buffers (gathers, scatters, allgathers and all-to-alls, with or without v/w).
pub(crate) fn nb_direct(
    u: &Union,
    send_bytes: usize,
    recv_bytes: usize,
    sends: &[(usize, usize, usize)],
    recvs: &[(usize, usize, usize)],
) -> Schedule {
    let mut b = u.builder(send_bytes, recv_bytes);
    for &(j, at, len) in recvs {
        b.recv(u.remote[j], Region::new(Buffer::Recv, at, len), &[]);
    }
    for &(j, at, len) in sends {
        b.send(u.remote[j], Region::new(Buffer::Send, at, len), &[]);
    }
    b.finish()
}

/// MPI_Ireduce_scatter of `total` bytes scattered in `blocks` (bytes per local rank): each
/// group reduces to its leader, the leaders swap, each leader hands out the other group's
/// result block by block.
pub(crate) fn nb_reduce_scatter(u: &Union, total: usize, blocks: &[usize]) -> Schedule {
    let mine = blocks.get(u.me).copied().unwrap_or(0);
    let mut b = u.builder(total, mine);
    match u.fan_in(&mut b, total) {
        Some((acc, deps)) => {
            let theirs = Region::new(b.scratch(total), 0, total);
            b.send(u.remote[0], acc, &deps);
            let got = b.recv(u.remote[0], theirs, &[]);
            let mut at = 0;
            for (i, (&len, &peer)) in blocks.iter().zip(&u.local).enumerate() {
                let part = theirs.sub(at, len);
                if i == 0 {
                    b.copy(part, Region::new(Buffer::Recv, 0, len), &[got]);
                } else {
                    b.send(peer, part, &[got]);
                }
                at += len;
            }
        }
        None => {
            b.recv(u.local[0], Region::new(Buffer::Recv, 0, mine), &[]);
        }
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_the_wire_and_the_agreement_takes_the_pair_of_the_lowest_world_rank() {
        let a = Rec {
            world: 7,
            pair: 12,
            color: MPI_UNDEFINED,
            key: -3,
            flag: 1,
        };
        let b = Rec {
            pair: 40,
            ..Rec::default()
        };
        let mut bytes = a.bytes().to_vec();
        bytes.extend_from_slice(&b.bytes());
        let back = Rec::list(&bytes);
        assert_eq!(back.len(), 2);
        assert_eq!(
            (
                back[0].world,
                back[0].pair,
                back[0].color,
                back[0].key,
                back[0].flag
            ),
            (7, 12, MPI_UNDEFINED, -3, 1)
        );
        assert_eq!(agreed_pair(&back[..1], &back[1..]), 40);
    }

    #[test]
    fn string_tags_are_stable_and_non_negative() {
        assert_eq!(string_tag(b"tag"), string_tag(b"tag"));
        assert_ne!(string_tag(b"tag"), string_tag(b"tah"));
        for t in [&b""[..], b"x", b"a much longer tag with spaces"] {
            assert!(string_tag(t) >= 0);
        }
    }

    #[test]
    fn roots_name_the_side_of_a_rooted_collective() {
        assert!(matches!(side(MPI_ROOT, 3), Ok(Side::Root)));
        assert!(matches!(side(MPI_PROC_NULL, 3), Ok(Side::Idle)));
        assert!(matches!(side(2, 3), Ok(Side::Leaf(2))));
        assert_eq!(side(3, 3).err().map(|e| e.class), Some(MPI_ERR_ROOT));
        assert_eq!(side(-7, 3).err().map(|e| e.class), Some(MPI_ERR_ROOT));
    }
}
