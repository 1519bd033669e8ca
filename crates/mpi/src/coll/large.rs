//! The collectives with `MPI_Count` counts and `MPI_Aint` displacements (MPI 4.0 `_c`
//! bindings), blocking and nonblocking: the counts become the ints of the int-count paths, and a
//! count or displacement that does not fit one is an error (`p2p::count_c`), never truncated.

use super::*;
use crate::p2p::count_c;

/// Entries of the per-rank arrays of `comm`: its size, or the remote group's size on an
/// intercommunicator.
pub(super) fn peers(comm: Handle) -> Res<usize> {
    match inter_of(comm)? {
        Some(i) => crate::inter::remote_size(i),
        None => running(|s| s.local_size(comm)),
    }
}

/// Whether the root's arrays of a rooted collective are significant here.
pub(super) fn at_root(comm: Handle, root: c_int) -> Res<bool> {
    match inter_of(comm)? {
        Some(_) => Ok(root == MPI_ROOT),
        None => running(|s| Ok(s.core_comm(comm)?.rank() as i64 == root as i64)),
    }
}

/// `n` `MPI_Count` counts as ints (`None` for NULL or where `used` is false).
pub(super) unsafe fn counts(p: *const i64, n: usize, used: bool) -> Res<Option<Vec<c_int>>> {
    if p.is_null() || !used {
        return Ok(None);
    }
    (0..n)
        .map(|i| count_c(*p.add(i)))
        .collect::<Res<_>>()
        .map(Some)
}

/// `n` `MPI_Aint` displacements as ints (`None` for NULL or where `used` is false).
pub(super) unsafe fn displs(p: *const isize, n: usize, used: bool) -> Res<Option<Vec<c_int>>> {
    if p.is_null() || !used {
        return Ok(None);
    }
    (0..n)
        .map(|i| {
            let d = *p.add(i);
            c_int::try_from(d).map_err(|_| {
                MpiError::new(
                    MPI_ERR_ARG,
                    format!(
                        "displacement {d} is beyond the int displacements ferry's collectives take"
                    ),
                )
            })
        })
        .collect::<Res<_>>()
        .map(Some)
}

pub(super) fn ptr<T>(v: &Option<Vec<T>>) -> *const T {
    v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr())
}

/// Defines `MPI_X_c` and `MPI_IX_c`: the arguments, then `comm` (and `request`); the body
/// runs with the communicator as `$c` and the request address (null when blocking) as `$r`.
macro_rules! coll_c {
    ($(#[$doc:meta])* fn $name:ident / $pname:ident, $iname:ident / $ipname:ident ($($arg:ident: $ty:ty),* $(,)?) => |$c:ident, $r:ident| $call:expr) => {
        mpi! {
            $(#[$doc])*
            fn $name / $pname($($arg: $ty,)* comm: Handle) on comm => {
                let ($c, $r) = (comm, BLOCKING);
                $call
            }
        }
        mpi! {
            $(#[$doc])*
            #[doc = "Nonblocking."]
            fn $iname / $ipname($($arg: $ty,)* comm: Handle, request: *mut Handle) on comm => {
                let ($c, $r) = (comm, nonnull(request)?);
                $call
            }
        }
    };
}

coll_c! {
    /// MPI_Bcast with an MPI_Count count.
    fn MPI_Bcast_c / PMPI_Bcast_c, MPI_Ibcast_c / PMPI_Ibcast_c(buffer: *mut c_void, count: i64, datatype: Handle, root: c_int)
        => |c, r| bcast(buffer, count_c(count)?, datatype, root, c, r)
}
coll_c! {
    /// MPI_Reduce with an MPI_Count count.
    fn MPI_Reduce_c / PMPI_Reduce_c, MPI_Ireduce_c / PMPI_Ireduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle, root: c_int)
        => |c, r| reduce(sendbuf, recvbuf, count_c(count)?, datatype, op, root, c, r)
}
coll_c! {
    /// MPI_Allreduce with an MPI_Count count.
    fn MPI_Allreduce_c / PMPI_Allreduce_c, MPI_Iallreduce_c / PMPI_Iallreduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle)
        => |c, r| allreduce(sendbuf, recvbuf, count_c(count)?, datatype, op, c, r)
}
coll_c! {
    /// MPI_Gather with MPI_Count counts.
    fn MPI_Gather_c / PMPI_Gather_c, MPI_Igather_c / PMPI_Igather_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int)
        => |c, r| gather(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, recvtype, root, c, r)
}
coll_c! {
    /// MPI_Scatter with MPI_Count counts.
    fn MPI_Scatter_c / PMPI_Scatter_c, MPI_Iscatter_c / PMPI_Iscatter_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int)
        => |c, r| scatter(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, recvtype, root, c, r)
}
coll_c! {
    /// MPI_Allgather with MPI_Count counts.
    fn MPI_Allgather_c / PMPI_Allgather_c, MPI_Iallgather_c / PMPI_Iallgather_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle)
        => |c, r| allgather(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, recvtype, c, r)
}
coll_c! {
    /// MPI_Alltoall with MPI_Count counts.
    fn MPI_Alltoall_c / PMPI_Alltoall_c, MPI_Ialltoall_c / PMPI_Ialltoall_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle)
        => |c, r| alltoall(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, recvtype, c, r)
}
coll_c! {
    /// MPI_Gatherv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Gatherv_c / PMPI_Gatherv_c, MPI_Igatherv_c / PMPI_Igatherv_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle, root: c_int)
        => |c, r| {
            let (n, used) = (peers(c)?, at_root(c, root)?);
            let (rc, rd) = (counts(recvcounts, n, used)?, displs(displs_, n, used)?);
            gatherv(sendbuf, count_c(sendcount)?, sendtype, recvbuf, ptr(&rc), ptr(&rd), recvtype, root, c, r)
        }
}
coll_c! {
    /// MPI_Scatterv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Scatterv_c / PMPI_Scatterv_c, MPI_Iscatterv_c / PMPI_Iscatterv_c(sendbuf: *const c_void, sendcounts: *const i64, displs_: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int)
        => |c, r| {
            let (n, used) = (peers(c)?, at_root(c, root)?);
            let (sc, sd) = (counts(sendcounts, n, used)?, displs(displs_, n, used)?);
            scatterv(sendbuf, ptr(&sc), ptr(&sd), sendtype, recvbuf, count_c(recvcount)?, recvtype, root, c, r)
        }
}
coll_c! {
    /// MPI_Allgatherv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Allgatherv_c / PMPI_Allgatherv_c, MPI_Iallgatherv_c / PMPI_Iallgatherv_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle)
        => |c, r| {
            let n = peers(c)?;
            let (rc, rd) = (counts(recvcounts, n, true)?, displs(displs_, n, true)?);
            allgatherv(sendbuf, count_c(sendcount)?, sendtype, recvbuf, ptr(&rc), ptr(&rd), recvtype, c, r)
        }
}
coll_c! {
    /// MPI_Alltoallv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Alltoallv_c / PMPI_Alltoallv_c, MPI_Ialltoallv_c / PMPI_Ialltoallv_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtype: Handle)
        => |c, r| {
            let (n, send) = (peers(c)?, !in_place(sendbuf));
            let (sc, sd) = (counts(sendcounts, n, send)?, displs(sdispls, n, send)?);
            let (rc, rd) = (counts(recvcounts, n, true)?, displs(rdispls, n, true)?);
            alltoallv(sendbuf, ptr(&sc), ptr(&sd), sendtype, recvbuf, ptr(&rc), ptr(&rd), recvtype, c, r)
        }
}
coll_c! {
    /// MPI_Alltoallw with MPI_Count counts and MPI_Aint byte displacements.
    fn MPI_Alltoallw_c / PMPI_Alltoallw_c, MPI_Ialltoallw_c / PMPI_Ialltoallw_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtypes: *const Handle)
        => |c, r| {
            let (n, send) = (peers(c)?, !in_place(sendbuf));
            let (sc, sd) = (counts(sendcounts, n, send)?, displs(sdispls, n, send)?);
            let (rc, rd) = (counts(recvcounts, n, true)?, displs(rdispls, n, true)?);
            alltoallw(sendbuf, ptr(&sc), ptr(&sd), sendtypes, recvbuf, ptr(&rc), ptr(&rd), recvtypes, c, r)
        }
}
coll_c! {
    /// MPI_Reduce_scatter with MPI_Count counts.
    fn MPI_Reduce_scatter_c / PMPI_Reduce_scatter_c, MPI_Ireduce_scatter_c / PMPI_Ireduce_scatter_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const i64, datatype: Handle, op: Handle)
        => |c, r| {
            let n = running(|s| s.local_size(c))?;
            if n > 0 && recvcounts.is_null() {
                return fail(MPI_ERR_ARG, "recvcounts is NULL");
            }
            let rc = (0..n).map(|i| count_c(*recvcounts.add(i)).map(|k| k as usize)).collect::<Res<Vec<_>>>()?;
            reduce_scatter(sendbuf, recvbuf, &rc, datatype, op, c, r)
        }
}
coll_c! {
    /// MPI_Reduce_scatter_block with an MPI_Count count.
    fn MPI_Reduce_scatter_block_c / PMPI_Reduce_scatter_block_c, MPI_Ireduce_scatter_block_c / PMPI_Ireduce_scatter_block_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: i64, datatype: Handle, op: Handle)
        => |c, r| {
            let n = running(|s| s.local_size(c))?;
            reduce_scatter(sendbuf, recvbuf, &vec![count_c(recvcount)? as usize; n], datatype, op, c, r)
        }
}
coll_c! {
    /// MPI_Scan with an MPI_Count count.
    fn MPI_Scan_c / PMPI_Scan_c, MPI_Iscan_c / PMPI_Iscan_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle)
        => |c, r| scan(sendbuf, recvbuf, count_c(count)?, datatype, op, c, false, r)
}
coll_c! {
    /// MPI_Exscan with an MPI_Count count.
    fn MPI_Exscan_c / PMPI_Exscan_c, MPI_Iexscan_c / PMPI_Iexscan_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle)
        => |c, r| scan(sendbuf, recvbuf, count_c(count)?, datatype, op, c, true, r)
}

/// In- and out-degree of the topology of `comm` (the lengths of the neighbourhood arrays).
pub(super) fn degrees(comm: Handle) -> Res<(usize, usize)> {
    running(|s| {
        let (src, dst, _) = super::neighbor::neighbourhood(s, comm)?;
        Ok((src.len(), dst.len()))
    })
}

coll_c! {
    /// MPI_Neighbor_allgather with MPI_Count counts.
    fn MPI_Neighbor_allgather_c / PMPI_Neighbor_allgather_c, MPI_Ineighbor_allgather_c / PMPI_Ineighbor_allgather_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle)
        => |c, r| super::neighbor::allgather(sendbuf, count_c(sendcount)?, sendtype, recvbuf, count_c(recvcount)?, None, recvtype, c, r)
}
coll_c! {
    /// MPI_Neighbor_allgatherv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Neighbor_allgatherv_c / PMPI_Neighbor_allgatherv_c, MPI_Ineighbor_allgatherv_c / PMPI_Ineighbor_allgatherv_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle)
        => |c, r| {
            let (n, _) = degrees(c)?;
            let (rc, rd) = (counts(recvcounts, n, true)?, displs(displs_, n, true)?);
            super::neighbor::allgather(sendbuf, count_c(sendcount)?, sendtype, recvbuf, 0, Some((ptr(&rc), ptr(&rd))), recvtype, c, r)
        }
}
coll_c! {
    /// MPI_Neighbor_alltoall with MPI_Count counts.
    fn MPI_Neighbor_alltoall_c / PMPI_Neighbor_alltoall_c, MPI_Ineighbor_alltoall_c / PMPI_Ineighbor_alltoall_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle)
        => |c, r| super::neighbor::alltoall(sendbuf, (count_c(sendcount)?, None), sendtype, recvbuf, (count_c(recvcount)?, None), recvtype, c, r)
}
coll_c! {
    /// MPI_Neighbor_alltoallv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Neighbor_alltoallv_c / PMPI_Neighbor_alltoallv_c, MPI_Ineighbor_alltoallv_c / PMPI_Ineighbor_alltoallv_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtype: Handle)
        => |c, r| {
            let (indeg, outdeg) = degrees(c)?;
            let (sc, sd) = (counts(sendcounts, outdeg, true)?, displs(sdispls, outdeg, true)?);
            let (rc, rd) = (counts(recvcounts, indeg, true)?, displs(rdispls, indeg, true)?);
            super::neighbor::alltoall(sendbuf, (0, Some((ptr(&sc), ptr(&sd)))), sendtype, recvbuf, (0, Some((ptr(&rc), ptr(&rd)))), recvtype, c, r)
        }
}
coll_c! {
    /// MPI_Neighbor_alltoallw with MPI_Count counts.
    fn MPI_Neighbor_alltoallw_c / PMPI_Neighbor_alltoallw_c, MPI_Ineighbor_alltoallw_c / PMPI_Ineighbor_alltoallw_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtypes: *const Handle)
        => |c, r| {
            let (indeg, outdeg) = degrees(c)?;
            let (sc, rc) = (counts(sendcounts, outdeg, true)?, counts(recvcounts, indeg, true)?);
            super::neighbor::alltoallw(sendbuf, ptr(&sc), sdispls, sendtypes, recvbuf, ptr(&rc), rdispls, recvtypes, c, r)
        }
}
