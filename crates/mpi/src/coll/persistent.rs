//! Persistent collectives (MPI 4.1 §6.13): `MPI_Bcast_init` and the others return an inactive
//! request; each `MPI_Start` runs the matching nonblocking collective with the arguments given
//! at init, reading the buffers as they are at that start.
//!
//! Persistent collectives match by the order of their init calls, not of their starts (MPICH's
//! `coll/p_order` starts a broadcast and a barrier in opposite orders on two ranks), so each
//! request runs on a hidden duplicate of the communicator of its own (`comm::hidden_dup`), made
//! without a message and freed with the request. Arguments are checked at init (the
//! nonblocking collective run as far as its plan, `check_only`: MPI_ERR_BUFFER and the others
//! come from the init call, as in MPICH) and again at each start.
//! The request holds the created datatypes and operations it uses (the program may free its
//! handles after init, MPI 4.1 §2.5.1), except the type arrays of the `w` forms. It binds its
//! arguments at init, as a persistent point-to-point request does: the count, displacement and
//! type arrays are copied then (programs free or reuse them after init; mpi4py does, and MPICH
//! and Open MPI copy them too), while the buffers must stay valid until the request is freed.

use super::neighbor;
use super::*;
use crate::request::{Persistent, Progress};
use std::rc::Rc;

/// Makes the inactive persistent request whose starts run `start` (a nonblocking collective on
/// the communicator and request address it is given).
unsafe fn persistent(
    comm: Handle,
    info: Handle,
    request: *mut Handle,
    kept: Kept,
    start: impl Fn(Handle, *mut Handle) -> Res + 'static,
) -> Res {
    let checked = running(|s| {
        if info != MPI_INFO_NULL && s.infos.get(info).is_none() {
            return fail(MPI_ERR_INFO, format!("invalid info {info:#x}"));
        }
        s.core_comm(comm).map(drop)
    })
    .and_then(|()| check_only(|r| start(comm, r)));
    if let Err(e) = checked {
        release(kept);
        return Err(e);
    }
    let hidden = match crate::comm::hidden_dup(comm) {
        Ok(h) => h,
        Err(e) => {
            release(kept);
            return Err(e);
        }
    };
    let start: Rc<dyn Fn(*mut Handle) -> Res> = Rc::new(move |r| start(hidden, r));
    let made = running(|s| {
        let core = s.core_comm(comm)?;
        *request = s.requests.insert(Request {
            comm,
            core,
            progress: Progress::Inactive,
            persistent: Some(Box::new(Persistent::Coll {
                hidden,
                start,
                kept: kept.clone(),
            })),
            cancel_requested: false,
            partner: None,
            generalized: None,
        });
        Ok(())
    });
    if made.is_err() {
        crate::comm::free_hidden(hidden);
        release(kept);
    }
    made
}

/// The created datatypes and operations a persistent collective holds (see [`keep`]).
pub(crate) type Kept = Vec<Handle>;

/// Holds a created datatype or operation for a persistent collective: the program may free
/// its handle after init (MPI 4.1 §2.5.1), and the object (under the same handle, which a user
/// operation may compare) lives on until the request is freed. Other handles need nothing.
fn keep(s: &mut State, h: Handle, kept: &mut Kept) {
    if s.types.get(h).is_some() || s.ops.get(h).is_some() {
        s.pins.entry(h).or_insert((0, false)).0 += 1;
        kept.push(h);
    }
}

/// Lets go of what [`keep`] held, freeing objects the program has freed meanwhile.
pub(crate) fn release(kept: Kept) {
    let _ = crate::state::with(|s| {
        for h in kept {
            let Some(pin) = s.pins.get_mut(&h) else {
                continue;
            };
            pin.0 -= 1;
            if pin.0 == 0 {
                let freed = pin.1;
                s.pins.remove(&h);
                if freed && s.types.remove(h).is_none() {
                    s.ops.remove(h);
                }
            }
        }
        Ok(())
    });
}

/// Whether the program's free of `h` must wait for the persistent collectives holding it
/// (and records that free).
pub(crate) fn defer_free(s: &mut State, h: Handle) -> bool {
    match s.pins.get_mut(&h) {
        Some(pin) => {
            pin.1 = true;
            true
        }
        None => false,
    }
}

/// `n` entries of an array argument, copied at init (`None` for NULL or where `used` is false:
/// the collective then does not read it).
unsafe fn bound<T: Copy>(p: *const T, n: usize, used: bool) -> Option<Vec<T>> {
    // SAFETY: MPI requires a non-NULL array argument that is significant here to hold one
    // entry per peer (`n`), valid for the duration of the init call.
    (used && !p.is_null()).then(|| std::slice::from_raw_parts(p, n).to_vec())
}

/// Defines `MPI_X_init`: the arguments of `MPI_X`, then `comm`, `info` and `request`; the
/// closure starts the nonblocking form on the hidden communicator `c` with request address `r`.
/// `bind |comm| { let x = ...; }` copies array arguments at init (see [`bound`]); the closure
/// then reads the copies.
macro_rules! coll_init {
    ($(#[$doc:meta])* fn $name:ident / $pname:ident ($($arg:ident: $ty:ty),* $(,)?) $(keep($($k:ident),*))? $(bind |$bc:ident| { $(let $v:pat = $e:expr;)* })? => |$c:ident, $r:ident| $call:expr) => {
        mpi! {
            $(#[$doc])*
            fn $name / $pname($($arg: $ty,)* comm: Handle, info: Handle, request: *mut Handle) on comm => {
                let request = nonnull(request)?;
                $(let $bc = comm; $(let $v = $e;)*)?
                #[allow(unused_mut)] // MPI_Barrier_init keeps nothing
                let mut kept = Kept::new();
                $($(running(|s| Ok(keep(s, $k, &mut kept)))?;)*)?
                persistent(comm, info, request, kept, move |$c: Handle, $r: *mut Handle| $call)
            }
        }
    };
}

coll_init! {
    /// Persistent barrier.
    fn MPI_Barrier_init / PMPI_Barrier_init() => |c, r| barrier(c, r)
}
coll_init! {
    /// Persistent broadcast.
    fn MPI_Bcast_init / PMPI_Bcast_init(buffer: *mut c_void, count: c_int, datatype: Handle, root: c_int) keep(datatype)
        => |c, r| bcast(buffer, count, datatype, root, c, r)
}
coll_init! {
    /// Persistent reduction to root.
    fn MPI_Reduce_init / PMPI_Reduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, root: c_int) keep(datatype, op)
        => |c, r| reduce(sendbuf, recvbuf, count, datatype, op, root, c, r)
}
coll_init! {
    /// Persistent allreduce.
    fn MPI_Allreduce_init / PMPI_Allreduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| allreduce(sendbuf, recvbuf, count, datatype, op, c, r)
}
coll_init! {
    /// Persistent gather.
    fn MPI_Gather_init / PMPI_Gather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        => |c, r| gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c, r)
}
coll_init! {
    /// Persistent gather with a count and displacement per rank.
    fn MPI_Gatherv_init / PMPI_Gatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        bind |comm| { let (n, used) = (peers(comm)?, at_root(comm, root)?); let (rc, rd) = (bound(recvcounts, n, used), bound(displs, n, used)); }
        => |c, r| gatherv(sendbuf, sendcount, sendtype, recvbuf, ptr(&rc), ptr(&rd), recvtype, root, c, r)
}
coll_init! {
    /// Persistent scatter.
    fn MPI_Scatter_init / PMPI_Scatter_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        => |c, r| scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c, r)
}
coll_init! {
    /// Persistent scatter with a count and displacement per rank.
    fn MPI_Scatterv_init / PMPI_Scatterv_init(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        bind |comm| { let (n, used) = (peers(comm)?, at_root(comm, root)?); let (sc, sd) = (bound(sendcounts, n, used), bound(displs, n, used)); }
        => |c, r| scatterv(sendbuf, ptr(&sc), ptr(&sd), sendtype, recvbuf, recvcount, recvtype, root, c, r)
}
coll_init! {
    /// Persistent allgather.
    fn MPI_Allgather_init / PMPI_Allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c, r)
}
coll_init! {
    /// Persistent allgather with a count and displacement per rank.
    fn MPI_Allgatherv_init / PMPI_Allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| { let n = peers(comm)?; let (rc, rd) = (bound(recvcounts, n, true), bound(displs, n, true)); }
        => |c, r| allgatherv(sendbuf, sendcount, sendtype, recvbuf, ptr(&rc), ptr(&rd), recvtype, c, r)
}
coll_init! {
    /// Persistent all-to-all.
    fn MPI_Alltoall_init / PMPI_Alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c, r)
}
coll_init! {
    /// Persistent all-to-all with counts and displacements per rank.
    fn MPI_Alltoallv_init / PMPI_Alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| {
            let (n, send) = (peers(comm)?, !in_place(sendbuf));
            let (sc, sd) = (bound(sendcounts, n, send), bound(sdispls, n, send));
            let (rc, rd) = (bound(recvcounts, n, true), bound(rdispls, n, true));
        }
        => |c, r| alltoallv(sendbuf, ptr(&sc), ptr(&sd), sendtype, recvbuf, ptr(&rc), ptr(&rd), recvtype, c, r)
}
coll_init! {
    /// Persistent all-to-all with a datatype per rank and byte displacements.
    fn MPI_Alltoallw_init / PMPI_Alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const Handle)
        bind |comm| {
            let (n, send) = (peers(comm)?, !in_place(sendbuf));
            let (sc, sd, st) = (bound(sendcounts, n, send), bound(sdispls, n, send), bound(sendtypes, n, send));
            let (rc, rd, rt) = (bound(recvcounts, n, true), bound(rdispls, n, true), bound(recvtypes, n, true));
        }
        => |c, r| alltoallw(sendbuf, ptr(&sc), ptr(&sd), ptr(&st), recvbuf, ptr(&rc), ptr(&rd), ptr(&rt), c, r)
}
coll_init! {
    /// Persistent reduce-scatter.
    fn MPI_Reduce_scatter_init / PMPI_Reduce_scatter_init(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: Handle, op: Handle) keep(datatype, op)
        bind |comm| { let counts = recv_counts(comm, recvcounts)?; }
        => |c, r| reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, c, r)
}
coll_init! {
    /// Persistent reduce-scatter with equal blocks.
    fn MPI_Reduce_scatter_block_init / PMPI_Reduce_scatter_block_init(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| {
            let n = running(|s| s.local_size(c))?;
            reduce_scatter(sendbuf, recvbuf, &vec![count_arg(recvcount)?; n], datatype, op, c, r)
        }
}
coll_init! {
    /// Persistent inclusive prefix reduction.
    fn MPI_Scan_init / PMPI_Scan_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| scan(sendbuf, recvbuf, count, datatype, op, c, false, r)
}
coll_init! {
    /// Persistent exclusive prefix reduction.
    fn MPI_Exscan_init / PMPI_Exscan_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| scan(sendbuf, recvbuf, count, datatype, op, c, true, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_allgather.
    fn MPI_Neighbor_allgather_init / PMPI_Neighbor_allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| neighbor::allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, None, recvtype, c, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_allgatherv.
    fn MPI_Neighbor_allgatherv_init / PMPI_Neighbor_allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| { let (indeg, _) = degrees(comm)?; let (rc, rd) = (bound(recvcounts, indeg, true), bound(displs, indeg, true)); }
        => |c, r| neighbor::allgather(sendbuf, sendcount, sendtype, recvbuf, 0, Some((ptr(&rc), ptr(&rd))), recvtype, c, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_alltoall.
    fn MPI_Neighbor_alltoall_init / PMPI_Neighbor_alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| neighbor::alltoall(sendbuf, (sendcount, None), sendtype, recvbuf, (recvcount, None), recvtype, c, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_alltoallv.
    fn MPI_Neighbor_alltoallv_init / PMPI_Neighbor_alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| {
            let (indeg, outdeg) = degrees(comm)?;
            let (sc, sd) = (bound(sendcounts, outdeg, true), bound(sdispls, outdeg, true));
            let (rc, rd) = (bound(recvcounts, indeg, true), bound(rdispls, indeg, true));
        }
        => |c, r| neighbor::alltoall(sendbuf, (0, Some((ptr(&sc), ptr(&sd)))), sendtype, recvbuf, (0, Some((ptr(&rc), ptr(&rd)))), recvtype, c, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_alltoallw.
    fn MPI_Neighbor_alltoallw_init / PMPI_Neighbor_alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const isize, recvtypes: *const Handle)
        bind |comm| {
            let (indeg, outdeg) = degrees(comm)?;
            let (sc, sd, st) = (bound(sendcounts, outdeg, true), bound(sdispls, outdeg, true), bound(sendtypes, outdeg, true));
            let (rc, rd, rt) = (bound(recvcounts, indeg, true), bound(rdispls, indeg, true), bound(recvtypes, indeg, true));
        }
        => |c, r| neighbor::alltoallw(sendbuf, ptr(&sc), ptr(&sd), ptr(&st), recvbuf, ptr(&rc), ptr(&rd), ptr(&rt), c, r)
}

// ---- with MPI_Count counts and MPI_Aint displacements (MPI 4.0 `_init_c`) ----

use super::large::{at_root, counts, degrees, displs, peers, ptr};
use crate::p2p::count_c;

coll_init! {
    /// MPI_Bcast_init with an MPI_Count count.
    fn MPI_Bcast_init_c / PMPI_Bcast_init_c(buffer: *mut c_void, count: i64, datatype: Handle, root: c_int) keep(datatype)
        => |c, r| bcast(buffer, count_c(count)?, datatype, root, c, r)
}
coll_init! {
    /// MPI_Reduce_init with an MPI_Count count.
    fn MPI_Reduce_init_c / PMPI_Reduce_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle, root: c_int) keep(datatype, op)
        => |c, r| reduce(sendbuf, recvbuf, count_c(count)?, datatype, op, root, c, r)
}
coll_init! {
    /// MPI_Allreduce_init with an MPI_Count count.
    fn MPI_Allreduce_init_c / PMPI_Allreduce_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| allreduce(sendbuf, recvbuf, count_c(count)?, datatype, op, c, r)
}
coll_init! {
    /// MPI_Gather_init with MPI_Count counts.
    fn MPI_Gather_init_c / PMPI_Gather_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        => |c, r| gather(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, recvtype, root, c, r)
}
coll_init! {
    /// MPI_Scatter_init with MPI_Count counts.
    fn MPI_Scatter_init_c / PMPI_Scatter_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        => |c, r| scatter(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, recvtype, root, c, r)
}
coll_init! {
    /// MPI_Allgather_init with MPI_Count counts.
    fn MPI_Allgather_init_c / PMPI_Allgather_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| allgather(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, recvtype, c, r)
}
coll_init! {
    /// MPI_Alltoall_init with MPI_Count counts.
    fn MPI_Alltoall_init_c / PMPI_Alltoall_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| alltoall(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, recvtype, c, r)
}
coll_init! {
    /// MPI_Gatherv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Gatherv_init_c / PMPI_Gatherv_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        bind |comm| { let (n, used) = (peers(comm)?, at_root(comm, root)?); let (rc, rd) = (counts(recvcounts, n, used)?, displs(displs_, n, used)?); }
        => |c, r| gatherv(sendbuf, count_c(sendcount)?, sendtype, recvbuf, ptr(&rc), ptr(&rd), recvtype, root, c, r)
}
coll_init! {
    /// MPI_Scatterv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Scatterv_init_c / PMPI_Scatterv_init_c(sendbuf: *const c_void, sendcounts: *const i64, displs_: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        bind |comm| { let (n, used) = (peers(comm)?, at_root(comm, root)?); let (sc, sd) = (counts(sendcounts, n, used)?, displs(displs_, n, used)?); }
        => |c, r| scatterv(sendbuf, ptr(&sc), ptr(&sd), sendtype, recvbuf, count_c(recvcount)?, recvtype, root, c, r)
}
coll_init! {
    /// MPI_Allgatherv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Allgatherv_init_c / PMPI_Allgatherv_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| { let n = peers(comm)?; let (rc, rd) = (counts(recvcounts, n, true)?, displs(displs_, n, true)?); }
        => |c, r| allgatherv(sendbuf, count_c(sendcount)?, sendtype, recvbuf, ptr(&rc), ptr(&rd), recvtype, c, r)
}
coll_init! {
    /// MPI_Alltoallv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Alltoallv_init_c / PMPI_Alltoallv_init_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| {
            let (n, send) = (peers(comm)?, !in_place(sendbuf));
            let (sc, sd) = (counts(sendcounts, n, send)?, displs(sdispls, n, send)?);
            let (rc, rd) = (counts(recvcounts, n, true)?, displs(rdispls, n, true)?);
        }
        => |c, r| alltoallv(sendbuf, ptr(&sc), ptr(&sd), sendtype, recvbuf, ptr(&rc), ptr(&rd), recvtype, c, r)
}
coll_init! {
    /// MPI_Reduce_scatter_block_init with an MPI_Count count.
    fn MPI_Reduce_scatter_block_init_c / PMPI_Reduce_scatter_block_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: i64, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| {
            let n = running(|s| s.local_size(c))?;
            reduce_scatter(sendbuf, recvbuf, &vec![count_c(recvcount)? as usize; n], datatype, op, c, r)
        }
}
coll_init! {
    /// MPI_Scan_init with an MPI_Count count.
    fn MPI_Scan_init_c / PMPI_Scan_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| scan(sendbuf, recvbuf, count_c(count)?, datatype, op, c, false, r)
}
coll_init! {
    /// MPI_Exscan_init with an MPI_Count count.
    fn MPI_Exscan_init_c / PMPI_Exscan_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| scan(sendbuf, recvbuf, count_c(count)?, datatype, op, c, true, r)
}
coll_init! {
    /// MPI_Reduce_scatter_init with MPI_Count counts.
    fn MPI_Reduce_scatter_init_c / PMPI_Reduce_scatter_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const i64, datatype: Handle, op: Handle) keep(datatype, op)
        bind |comm| {
            let n = running(|s| s.local_size(comm))?;
            let rc = counts(recvcounts, n, true)?.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "recvcounts is NULL"))?;
            let rc = rc.iter().map(|&k| k as usize).collect::<Vec<usize>>();
        }
        => |c, r| reduce_scatter(sendbuf, recvbuf, &rc, datatype, op, c, r)
}
coll_init! {
    /// MPI_Alltoallw_init with MPI_Count counts and MPI_Aint byte displacements.
    fn MPI_Alltoallw_init_c / PMPI_Alltoallw_init_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtypes: *const Handle)
        bind |comm| {
            let (n, send) = (peers(comm)?, !in_place(sendbuf));
            let (sc, sd, st) = (counts(sendcounts, n, send)?, displs(sdispls, n, send)?, bound(sendtypes, n, send));
            let (rc, rd, rt) = (counts(recvcounts, n, true)?, displs(rdispls, n, true)?, bound(recvtypes, n, true));
        }
        => |c, r| alltoallw(sendbuf, ptr(&sc), ptr(&sd), ptr(&st), recvbuf, ptr(&rc), ptr(&rd), ptr(&rt), c, r)
}
coll_init! {
    /// MPI_Neighbor_allgather_init with MPI_Count counts.
    fn MPI_Neighbor_allgather_init_c / PMPI_Neighbor_allgather_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| neighbor::allgather(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, None, recvtype, c, r)
}
coll_init! {
    /// MPI_Neighbor_allgatherv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Neighbor_allgatherv_init_c / PMPI_Neighbor_allgatherv_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| { let (n, _) = degrees(comm)?; let (rc, rd) = (counts(recvcounts, n, true)?, displs(displs_, n, true)?); }
        => |c, r| neighbor::allgather(sendbuf, count_c(sendcount)?, sendtype, recvbuf, 0, Some((ptr(&rc), ptr(&rd))), recvtype, c, r)
}
coll_init! {
    /// MPI_Neighbor_alltoall_init with MPI_Count counts.
    fn MPI_Neighbor_alltoall_init_c / PMPI_Neighbor_alltoall_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| neighbor::alltoall(sendbuf, (count_c(sendcount)?, None), sendtype, recvbuf, (count_c(recvcount)?, None), recvtype, c, r)
}
coll_init! {
    /// MPI_Neighbor_alltoallv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Neighbor_alltoallv_init_c / PMPI_Neighbor_alltoallv_init_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| {
            let (indeg, outdeg) = degrees(comm)?;
            let (sc, sd) = (counts(sendcounts, outdeg, true)?, displs(sdispls, outdeg, true)?);
            let (rc, rd) = (counts(recvcounts, indeg, true)?, displs(rdispls, indeg, true)?);
        }
        => |c, r| neighbor::alltoall(sendbuf, (0, Some((ptr(&sc), ptr(&sd)))), sendtype, recvbuf, (0, Some((ptr(&rc), ptr(&rd)))), recvtype, c, r)
}
coll_init! {
    /// MPI_Neighbor_alltoallw_init with MPI_Count counts.
    fn MPI_Neighbor_alltoallw_init_c / PMPI_Neighbor_alltoallw_init_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtypes: *const Handle)
        bind |comm| {
            let (indeg, outdeg) = degrees(comm)?;
            let (sc, sd, st) = (counts(sendcounts, outdeg, true)?, bound(sdispls, outdeg, true), bound(sendtypes, outdeg, true));
            let (rc, rd, rt) = (counts(recvcounts, indeg, true)?, bound(rdispls, indeg, true), bound(recvtypes, indeg, true));
        }
        => |c, r| neighbor::alltoallw(sendbuf, ptr(&sc), ptr(&sd), ptr(&st), recvbuf, ptr(&rc), ptr(&rd), ptr(&rt), c, r)
}
