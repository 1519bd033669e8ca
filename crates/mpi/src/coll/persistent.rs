//! Persistent collectives (MPI 4.1 §6.13): `MPI_Bcast_init` and the others return an inactive
//! request; each `MPI_Start` runs the matching nonblocking collective with the arguments given
//! at init, reading the buffers (and count arrays) as they are at that start.
//!
//! Persistent collectives match by the order of their init calls, not of their starts (MPICH's
//! `coll/p_order` starts a broadcast and a barrier in opposite orders on two ranks), so each
//! request runs on a hidden duplicate of the communicator of its own (`comm::hidden_dup`), made
//! without a message and freed with the request. Arguments are checked at each start, where
//! the nonblocking collective checks them; the init call checks the communicator and the info.
//! The buffers, arrays, datatypes and operation must stay valid until the request is freed.

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
    start: impl Fn(Handle, *mut Handle) -> Res + 'static,
) -> Res {
    let request = nonnull(request)?;
    running(|s| {
        if info != MPI_INFO_NULL && s.infos.get(info).is_none() {
            return fail(MPI_ERR_INFO, format!("invalid info {info:#x}"));
        }
        s.core_comm(comm).map(drop)
    })?;
    let hidden = crate::comm::hidden_dup(comm)?;
    let start: Rc<dyn Fn(*mut Handle) -> Res> = Rc::new(move |r| start(hidden, r));
    let made = running(|s| {
        let core = s.core_comm(comm)?;
        *request = s.requests.insert(Request {
            comm,
            core,
            progress: Progress::Inactive,
            persistent: Some(Persistent::Coll { hidden, start }),
            cancel_requested: false,
            partner: None,
            generalized: None,
        });
        Ok(())
    });
    if made.is_err() {
        crate::comm::free_hidden(hidden);
    }
    made
}

/// Defines `MPI_X_init`: the arguments of `MPI_X`, then `comm`, `info` and `request`; the
/// closure starts the nonblocking form on the hidden communicator `c` with request address `r`.
macro_rules! coll_init {
    ($(#[$doc:meta])* fn $name:ident / $pname:ident ($($arg:ident: $ty:ty),* $(,)?) => |$c:ident, $r:ident| $call:expr) => {
        mpi! {
            $(#[$doc])*
            fn $name / $pname($($arg: $ty,)* comm: Handle, info: Handle, request: *mut Handle) on comm => {
                persistent(comm, info, request, move |$c: Handle, $r: *mut Handle| $call)
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
    fn MPI_Bcast_init / PMPI_Bcast_init(buffer: *mut c_void, count: c_int, datatype: Handle, root: c_int)
        => |c, r| bcast(buffer, count, datatype, root, c, r)
}
coll_init! {
    /// Persistent reduction to root.
    fn MPI_Reduce_init / PMPI_Reduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, root: c_int)
        => |c, r| reduce(sendbuf, recvbuf, count, datatype, op, root, c, r)
}
coll_init! {
    /// Persistent allreduce.
    fn MPI_Allreduce_init / PMPI_Allreduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle)
        => |c, r| allreduce(sendbuf, recvbuf, count, datatype, op, c, r)
}
coll_init! {
    /// Persistent gather.
    fn MPI_Gather_init / PMPI_Gather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int)
        => |c, r| gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c, r)
}
coll_init! {
    /// Persistent gather with a count and displacement per rank.
    fn MPI_Gatherv_init / PMPI_Gatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, root: c_int)
        => |c, r| gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, c, r)
}
coll_init! {
    /// Persistent scatter.
    fn MPI_Scatter_init / PMPI_Scatter_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int)
        => |c, r| scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c, r)
}
coll_init! {
    /// Persistent scatter with a count and displacement per rank.
    fn MPI_Scatterv_init / PMPI_Scatterv_init(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int)
        => |c, r| scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, c, r)
}
coll_init! {
    /// Persistent allgather.
    fn MPI_Allgather_init / PMPI_Allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle)
        => |c, r| allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c, r)
}
coll_init! {
    /// Persistent allgather with a count and displacement per rank.
    fn MPI_Allgatherv_init / PMPI_Allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle)
        => |c, r| allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, c, r)
}
coll_init! {
    /// Persistent all-to-all.
    fn MPI_Alltoall_init / PMPI_Alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle)
        => |c, r| alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c, r)
}
coll_init! {
    /// Persistent all-to-all with counts and displacements per rank.
    fn MPI_Alltoallv_init / PMPI_Alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle)
        => |c, r| alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, c, r)
}
coll_init! {
    /// Persistent all-to-all with a datatype per rank and byte displacements.
    fn MPI_Alltoallw_init / PMPI_Alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const Handle)
        => |c, r| alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, c, r)
}
coll_init! {
    /// Persistent reduce-scatter.
    fn MPI_Reduce_scatter_init / PMPI_Reduce_scatter_init(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: Handle, op: Handle)
        => |c, r| {
            let counts = recv_counts(c, recvcounts)?;
            reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, c, r)
        }
}
coll_init! {
    /// Persistent reduce-scatter with equal blocks.
    fn MPI_Reduce_scatter_block_init / PMPI_Reduce_scatter_block_init(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: Handle, op: Handle)
        => |c, r| {
            let n = running(|s| s.local_size(c))?;
            reduce_scatter(sendbuf, recvbuf, &vec![count_arg(recvcount)?; n], datatype, op, c, r)
        }
}
coll_init! {
    /// Persistent inclusive prefix reduction.
    fn MPI_Scan_init / PMPI_Scan_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle)
        => |c, r| scan(sendbuf, recvbuf, count, datatype, op, c, false, r)
}
coll_init! {
    /// Persistent exclusive prefix reduction.
    fn MPI_Exscan_init / PMPI_Exscan_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle)
        => |c, r| scan(sendbuf, recvbuf, count, datatype, op, c, true, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_allgather.
    fn MPI_Neighbor_allgather_init / PMPI_Neighbor_allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle)
        => |c, r| neighbor::allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, None, recvtype, c, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_allgatherv.
    fn MPI_Neighbor_allgatherv_init / PMPI_Neighbor_allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle)
        => |c, r| neighbor::allgather(sendbuf, sendcount, sendtype, recvbuf, 0, Some((recvcounts, displs)), recvtype, c, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_alltoall.
    fn MPI_Neighbor_alltoall_init / PMPI_Neighbor_alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle)
        => |c, r| neighbor::alltoall(sendbuf, (sendcount, None), sendtype, recvbuf, (recvcount, None), recvtype, c, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_alltoallv.
    fn MPI_Neighbor_alltoallv_init / PMPI_Neighbor_alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle)
        => |c, r| neighbor::alltoall(sendbuf, (0, Some((sendcounts, sdispls))), sendtype, recvbuf, (0, Some((recvcounts, rdispls))), recvtype, c, r)
}
coll_init! {
    /// Persistent MPI_Neighbor_alltoallw.
    fn MPI_Neighbor_alltoallw_init / PMPI_Neighbor_alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const isize, recvtypes: *const Handle)
        => |c, r| neighbor::alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, c, r)
}
