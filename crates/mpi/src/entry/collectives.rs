//! Chapter 6 of MPI 5.0, collective communication: the blocking, nonblocking, persistent and
//! `MPI_Count` forms of every collective on intracommunicators (and intercommunicators, see
//! [`crate::inter`]), and user reduction operations (`MPI_Op_*`, `MPI_Reduce_local`). The
//! semantics are in [`crate::coll`] and [`crate::ops`]; the macros shared with the
//! neighbourhood collectives are in `entry.rs`.

use super::NONE;
use crate::abi::*;
use crate::check::out;
use crate::coll::large::{at_root, peers, ptr};
use crate::coll::persistent::*;
use crate::coll::*;
use crate::error::{fail, MpiError, Res};
use crate::p2p::count_arg;
use crate::state::{running, with, OpObj, UserFn, UserOpFn, UserOpFnC};
use crate::types::*;
use std::ffi::{c_int, c_void};

mpi! {
    /// A user reduction operation.
    fn MPI_Op_create / PMPI_Op_create(function: Option<UserOpFn>, commute: c_int, op: *mut Handle) on NONE => {
        let Some(f) = function else { return fail(MPI_ERR_ARG, "operation function is NULL") };
        let out = out(op, "op")?;
        *out = running(|s| Ok(s.ops.insert(OpObj::User { f: UserFn::Int(f), commute: commute != 0 })))?;
        Ok(())
    }
}

mpi! {
    /// A user reduction operation whose function takes an MPI_Count length (MPI 4.0).
    fn MPI_Op_create_c / PMPI_Op_create_c(function: Option<UserOpFnC>, commute: c_int, op: *mut Handle) on NONE => {
        let Some(f) = function else { return fail(MPI_ERR_ARG, "operation function is NULL") };
        let out = out(op, "op")?;
        *out = running(|s| Ok(s.ops.insert(OpObj::User { f: UserFn::Count(f), commute: commute != 0 })))?;
        Ok(())
    }
}

mpi! {
    /// Frees a user operation.
    fn MPI_Op_free / PMPI_Op_free(op: *mut Handle) on NONE => {
        let h = out(op, "op")?;
        running(|s| {
            if s.ops.get(*h).is_some() && crate::coll::defer_free(s, *h) {
                return Ok(());
            }
            match s.ops.remove(*h) {
                Some(_) => Ok(()),
                None => { s.op(*h)?; fail(MPI_ERR_OP, "predefined operations cannot be freed") }
            }
        })?;
        *h = MPI_OP_NULL;
        Ok(())
    }
}

mpi! {
    /// Whether an operation is commutative.
    fn MPI_Op_commutative / PMPI_Op_commutative(op: Handle, commute: *mut c_int) on NONE => {
        let o = with(|s| s.op(op))?;
        *out(commute, "commute")? = match o { OpObj::Builtin(_) => 1, OpObj::User { commute, .. } => commute as c_int };
        Ok(())
    }
}

mpi! {
    /// `inout = in op inout`, locally.
    fn MPI_Reduce_local / PMPI_Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle) on NONE => {
        let (t, o) = running(|s| Ok((s.committed_type(datatype)?, s.op(op)?)))?;
        let n = count_arg(count)?;
        crate::coll::reduce_local(&t, datatype, o, n, inbuf as *const u8, inoutbuf as *mut u8)
    }
}

mpi! {
    /// MPI_Reduce_local with an MPI_Count count.
    fn MPI_Reduce_local_c / PMPI_Reduce_local_c(inbuf: *const c_void, inoutbuf: *mut c_void, count: i64, datatype: Handle, op: Handle) on NONE => {
        let (t, o) = running(|s| Ok((s.committed_type(datatype)?, s.op(op)?)))?;
        let n = size_c(count, "count")?;
        crate::coll::reduce_local(&t, datatype, o, n, inbuf as *const u8, inoutbuf as *mut u8)
    }
}

mpi! {
    /// Waits until every rank has called it.
    fn MPI_Barrier / PMPI_Barrier(comm: Handle) on comm => { barrier(comm, BLOCKING) }
}

mpi! {
    /// Nonblocking barrier.
    fn MPI_Ibarrier / PMPI_Ibarrier(comm: Handle, request: *mut Handle) on comm => { barrier(comm, nonnull(request)?) }
}

mpi! {
    /// Broadcast from root.
    fn MPI_Bcast / PMPI_Bcast(buffer: *mut c_void, count: c_int, datatype: Handle, root: c_int, comm: Handle) on comm => {
        bcast(buffer, count.into(), datatype, root, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking broadcast.
    fn MPI_Ibcast / PMPI_Ibcast(buffer: *mut c_void, count: c_int, datatype: Handle, root: c_int, comm: Handle, request: *mut Handle) on comm => {
        bcast(buffer, count.into(), datatype, root, comm, nonnull(request)?)
    }
}

mpi! {
    /// Reduction to root.
    fn MPI_Reduce / PMPI_Reduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, root: c_int, comm: Handle) on comm => {
        reduce(sendbuf, recvbuf, count.into(), datatype, op, root, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking reduction to root.
    fn MPI_Ireduce / PMPI_Ireduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, root: c_int, comm: Handle, request: *mut Handle) on comm => {
        reduce(sendbuf, recvbuf, count.into(), datatype, op, root, comm, nonnull(request)?)
    }
}

mpi! {
    /// Reduction to all.
    fn MPI_Allreduce / PMPI_Allreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle) on comm => {
        allreduce(sendbuf, recvbuf, count.into(), datatype, op, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking reduction to all.
    fn MPI_Iallreduce / PMPI_Iallreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle, request: *mut Handle) on comm => {
        allreduce(sendbuf, recvbuf, count.into(), datatype, op, comm, nonnull(request)?)
    }
}

mpi! {
    /// Gather to root.
    fn MPI_Gather / PMPI_Gather(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle) on comm => {
        gather(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, root, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking gather.
    fn MPI_Igather / PMPI_Igather(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle, request: *mut Handle) on comm => {
        gather(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, root, comm, nonnull(request)?)
    }
}

mpi! {
    /// Scatter from root.
    fn MPI_Scatter / PMPI_Scatter(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle) on comm => {
        scatter(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, root, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking scatter.
    fn MPI_Iscatter / PMPI_Iscatter(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle, request: *mut Handle) on comm => {
        scatter(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, root, comm, nonnull(request)?)
    }
}

mpi! {
    /// Gather to all.
    fn MPI_Allgather / PMPI_Allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle) on comm => {
        allgather(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking gather to all.
    fn MPI_Iallgather / PMPI_Iallgather(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle, request: *mut Handle) on comm => {
        allgather(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, comm, nonnull(request)?)
    }
}

mpi! {
    /// Personalized exchange.
    fn MPI_Alltoall / PMPI_Alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle) on comm => {
        alltoall(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking personalized exchange.
    fn MPI_Ialltoall / PMPI_Ialltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle, request: *mut Handle) on comm => {
        alltoall(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, comm, nonnull(request)?)
    }
}

mpi! {
    /// Gather of variable blocks.
    fn MPI_Gatherv / PMPI_Gatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, root: c_int, comm: Handle) on comm => {
        gatherv(sendbuf, sendcount.into(), sendtype, recvbuf, recvcounts.into(), displs.into(), recvtype, root, comm, BLOCKING)
    }
}

mpi! {
    /// Scatter of variable blocks.
    fn MPI_Scatterv / PMPI_Scatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle) on comm => {
        scatterv(sendbuf, sendcounts.into(), displs.into(), sendtype, recvbuf, recvcount.into(), recvtype, root, comm, BLOCKING)
    }
}

mpi! {
    /// Gather of variable blocks to all.
    fn MPI_Allgatherv / PMPI_Allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, comm: Handle) on comm => {
        allgatherv(sendbuf, sendcount.into(), sendtype, recvbuf, recvcounts.into(), displs.into(), recvtype, comm, BLOCKING)
    }
}

mpi! {
    /// Personalized exchange of variable blocks.
    fn MPI_Alltoallv / PMPI_Alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle, comm: Handle) on comm => {
        alltoallv(sendbuf, sendcounts.into(), sdispls.into(), sendtype, recvbuf, recvcounts.into(), rdispls.into(), recvtype, comm, BLOCKING)
    }
}

mpi! {
    /// Personalized exchange with a datatype per block.
    fn MPI_Alltoallw / PMPI_Alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const Handle, comm: Handle) on comm => {
        alltoallw(sendbuf, sendcounts.into(), sdispls.into(), sendtypes, recvbuf, recvcounts.into(), rdispls.into(), recvtypes, comm, BLOCKING)
    }
}

mpi! {
    /// Reduction whose result is scattered in variable blocks.
    fn MPI_Reduce_scatter / PMPI_Reduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: Handle, op: Handle, comm: Handle) on comm => {
        let counts = recv_counts(comm, recvcounts)?;
        reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, comm, BLOCKING)
    }
}

mpi! {
    /// Reduction whose result is scattered in equal blocks.
    fn MPI_Reduce_scatter_block / PMPI_Reduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: Handle, op: Handle, comm: Handle) on comm => {
        let n = running(|s| s.local_size(comm))?;
        reduce_scatter(sendbuf, recvbuf, &vec![count_arg(recvcount)?; n], datatype, op, comm, BLOCKING)
    }
}

mpi! {
    /// Inclusive prefix reduction.
    fn MPI_Scan / PMPI_Scan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle) on comm => {
        scan(sendbuf, recvbuf, count.into(), datatype, op, comm, false, BLOCKING)
    }
}

mpi! {
    /// Exclusive prefix reduction.
    fn MPI_Exscan / PMPI_Exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle) on comm => {
        scan(sendbuf, recvbuf, count.into(), datatype, op, comm, true, BLOCKING)
    }
}

mpi! {
    /// Nonblocking gather of variable blocks.
    fn MPI_Igatherv / PMPI_Igatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, root: c_int, comm: Handle, request: *mut Handle) on comm => {
        gatherv(sendbuf, sendcount.into(), sendtype, recvbuf, recvcounts.into(), displs.into(), recvtype, root, comm, nonnull(request)?)
    }
}

mpi! {
    /// Nonblocking scatter of variable blocks.
    fn MPI_Iscatterv / PMPI_Iscatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle, request: *mut Handle) on comm => {
        scatterv(sendbuf, sendcounts.into(), displs.into(), sendtype, recvbuf, recvcount.into(), recvtype, root, comm, nonnull(request)?)
    }
}

mpi! {
    /// Nonblocking gather of variable blocks to all.
    fn MPI_Iallgatherv / PMPI_Iallgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, comm: Handle, request: *mut Handle) on comm => {
        allgatherv(sendbuf, sendcount.into(), sendtype, recvbuf, recvcounts.into(), displs.into(), recvtype, comm, nonnull(request)?)
    }
}

mpi! {
    /// Nonblocking personalized exchange of variable blocks.
    fn MPI_Ialltoallv / PMPI_Ialltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle, comm: Handle, request: *mut Handle) on comm => {
        alltoallv(sendbuf, sendcounts.into(), sdispls.into(), sendtype, recvbuf, recvcounts.into(), rdispls.into(), recvtype, comm, nonnull(request)?)
    }
}

mpi! {
    /// Nonblocking personalized exchange with a datatype per block.
    fn MPI_Ialltoallw / PMPI_Ialltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const Handle, comm: Handle, request: *mut Handle) on comm => {
        alltoallw(sendbuf, sendcounts.into(), sdispls.into(), sendtypes, recvbuf, recvcounts.into(), rdispls.into(), recvtypes, comm, nonnull(request)?)
    }
}

mpi! {
    /// Nonblocking reduction scattered in variable blocks.
    fn MPI_Ireduce_scatter / PMPI_Ireduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: Handle, op: Handle, comm: Handle, request: *mut Handle) on comm => {
        let counts = recv_counts(comm, recvcounts)?;
        reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, comm, nonnull(request)?)
    }
}

mpi! {
    /// Nonblocking reduction scattered in equal blocks.
    fn MPI_Ireduce_scatter_block / PMPI_Ireduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: Handle, op: Handle, comm: Handle, request: *mut Handle) on comm => {
        let n = running(|s| s.local_size(comm))?;
        reduce_scatter(sendbuf, recvbuf, &vec![count_arg(recvcount)?; n], datatype, op, comm, nonnull(request)?)
    }
}

mpi! {
    /// Nonblocking inclusive prefix reduction.
    fn MPI_Iscan / PMPI_Iscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle, request: *mut Handle) on comm => {
        scan(sendbuf, recvbuf, count.into(), datatype, op, comm, false, nonnull(request)?)
    }
}

mpi! {
    /// Nonblocking exclusive prefix reduction.
    fn MPI_Iexscan / PMPI_Iexscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle, request: *mut Handle) on comm => {
        scan(sendbuf, recvbuf, count.into(), datatype, op, comm, true, nonnull(request)?)
    }
}

coll_c! {
    /// MPI_Bcast with an MPI_Count count.
    fn MPI_Bcast_c / PMPI_Bcast_c, MPI_Ibcast_c / PMPI_Ibcast_c(buffer: *mut c_void, count: i64, datatype: Handle, root: c_int)
        => |c, r| bcast(buffer, count, datatype, root, c, r)
}

coll_c! {
    /// MPI_Reduce with an MPI_Count count.
    fn MPI_Reduce_c / PMPI_Reduce_c, MPI_Ireduce_c / PMPI_Ireduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle, root: c_int)
        => |c, r| reduce(sendbuf, recvbuf, count, datatype, op, root, c, r)
}

coll_c! {
    /// MPI_Allreduce with an MPI_Count count.
    fn MPI_Allreduce_c / PMPI_Allreduce_c, MPI_Iallreduce_c / PMPI_Iallreduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle)
        => |c, r| allreduce(sendbuf, recvbuf, count, datatype, op, c, r)
}

coll_c! {
    /// MPI_Gather with MPI_Count counts.
    fn MPI_Gather_c / PMPI_Gather_c, MPI_Igather_c / PMPI_Igather_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int)
        => |c, r| gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c, r)
}

coll_c! {
    /// MPI_Scatter with MPI_Count counts.
    fn MPI_Scatter_c / PMPI_Scatter_c, MPI_Iscatter_c / PMPI_Iscatter_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int)
        => |c, r| scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c, r)
}

coll_c! {
    /// MPI_Allgather with MPI_Count counts.
    fn MPI_Allgather_c / PMPI_Allgather_c, MPI_Iallgather_c / PMPI_Iallgather_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle)
        => |c, r| allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c, r)
}

coll_c! {
    /// MPI_Alltoall with MPI_Count counts.
    fn MPI_Alltoall_c / PMPI_Alltoall_c, MPI_Ialltoall_c / PMPI_Ialltoall_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle)
        => |c, r| alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c, r)
}

coll_c! {
    /// MPI_Gatherv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Gatherv_c / PMPI_Gatherv_c, MPI_Igatherv_c / PMPI_Igatherv_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle, root: c_int)
        => |c, r| {
            let (n, used) = (peers(c)?, at_root(c, root)?);
            let (rc, rd) = (bound(recvcounts, n, used), bound(displs_, n, used));
            gatherv(sendbuf, sendcount, sendtype, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtype, root, c, r)
        }
}

coll_c! {
    /// MPI_Scatterv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Scatterv_c / PMPI_Scatterv_c, MPI_Iscatterv_c / PMPI_Iscatterv_c(sendbuf: *const c_void, sendcounts: *const i64, displs_: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int)
        => |c, r| {
            let (n, used) = (peers(c)?, at_root(c, root)?);
            let (sc, sd) = (bound(sendcounts, n, used), bound(displs_, n, used));
            scatterv(sendbuf, ptr(&sc).into(), ptr(&sd).into(), sendtype, recvbuf, recvcount, recvtype, root, c, r)
        }
}

coll_c! {
    /// MPI_Allgatherv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Allgatherv_c / PMPI_Allgatherv_c, MPI_Iallgatherv_c / PMPI_Iallgatherv_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle)
        => |c, r| {
            let n = peers(c)?;
            let (rc, rd) = (bound(recvcounts, n, true), bound(displs_, n, true));
            allgatherv(sendbuf, sendcount, sendtype, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtype, c, r)
        }
}

coll_c! {
    /// MPI_Alltoallv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Alltoallv_c / PMPI_Alltoallv_c, MPI_Ialltoallv_c / PMPI_Ialltoallv_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtype: Handle)
        => |c, r| {
            let (n, send) = (peers(c)?, !in_place(sendbuf));
            let (sc, sd) = (bound(sendcounts, n, send), bound(sdispls, n, send));
            let (rc, rd) = (bound(recvcounts, n, true), bound(rdispls, n, true));
            alltoallv(sendbuf, ptr(&sc).into(), ptr(&sd).into(), sendtype, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtype, c, r)
        }
}

coll_c! {
    /// MPI_Alltoallw with MPI_Count counts and MPI_Aint byte displacements.
    fn MPI_Alltoallw_c / PMPI_Alltoallw_c, MPI_Ialltoallw_c / PMPI_Ialltoallw_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtypes: *const Handle)
        => |c, r| {
            let (n, send) = (peers(c)?, !in_place(sendbuf));
            let (sc, sd) = (bound(sendcounts, n, send), bound(sdispls, n, send));
            let (rc, rd) = (bound(recvcounts, n, true), bound(rdispls, n, true));
            alltoallw(sendbuf, ptr(&sc).into(), ptr(&sd).into(), sendtypes, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtypes, c, r)
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
            let rc = (0..n).map(|i| count_arg(*recvcounts.add(i))).collect::<Res<Vec<_>>>()?;
            reduce_scatter(sendbuf, recvbuf, &rc, datatype, op, c, r)
        }
}

coll_c! {
    /// MPI_Reduce_scatter_block with an MPI_Count count.
    fn MPI_Reduce_scatter_block_c / PMPI_Reduce_scatter_block_c, MPI_Ireduce_scatter_block_c / PMPI_Ireduce_scatter_block_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: i64, datatype: Handle, op: Handle)
        => |c, r| {
            let n = running(|s| s.local_size(c))?;
            reduce_scatter(sendbuf, recvbuf, &vec![count_arg(recvcount)?; n], datatype, op, c, r)
        }
}

coll_c! {
    /// MPI_Scan with an MPI_Count count.
    fn MPI_Scan_c / PMPI_Scan_c, MPI_Iscan_c / PMPI_Iscan_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle)
        => |c, r| scan(sendbuf, recvbuf, count, datatype, op, c, false, r)
}

coll_c! {
    /// MPI_Exscan with an MPI_Count count.
    fn MPI_Exscan_c / PMPI_Exscan_c, MPI_Iexscan_c / PMPI_Iexscan_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle)
        => |c, r| scan(sendbuf, recvbuf, count, datatype, op, c, true, r)
}

coll_init! {
    /// Persistent barrier.
    fn MPI_Barrier_init / PMPI_Barrier_init() => |c, r| barrier(c, r)
}

coll_init! {
    /// Persistent broadcast.
    fn MPI_Bcast_init / PMPI_Bcast_init(buffer: *mut c_void, count: c_int, datatype: Handle, root: c_int) keep(datatype)
        => |c, r| bcast(buffer, count.into(), datatype, root, c, r)
}

coll_init! {
    /// Persistent reduction to root.
    fn MPI_Reduce_init / PMPI_Reduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, root: c_int) keep(datatype, op)
        => |c, r| reduce(sendbuf, recvbuf, count.into(), datatype, op, root, c, r)
}

coll_init! {
    /// Persistent allreduce.
    fn MPI_Allreduce_init / PMPI_Allreduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| allreduce(sendbuf, recvbuf, count.into(), datatype, op, c, r)
}

coll_init! {
    /// Persistent gather.
    fn MPI_Gather_init / PMPI_Gather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        => |c, r| gather(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, root, c, r)
}

coll_init! {
    /// Persistent gather with a count and displacement per rank.
    fn MPI_Gatherv_init / PMPI_Gatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        bind |comm| { let (n, used) = (peers(comm)?, at_root(comm, root)?); let (rc, rd) = (bound(recvcounts, n, used), bound(displs, n, used)); }
        => |c, r| gatherv(sendbuf, sendcount.into(), sendtype, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtype, root, c, r)
}

coll_init! {
    /// Persistent scatter.
    fn MPI_Scatter_init / PMPI_Scatter_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        => |c, r| scatter(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, root, c, r)
}

coll_init! {
    /// Persistent scatter with a count and displacement per rank.
    fn MPI_Scatterv_init / PMPI_Scatterv_init(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        bind |comm| { let (n, used) = (peers(comm)?, at_root(comm, root)?); let (sc, sd) = (bound(sendcounts, n, used), bound(displs, n, used)); }
        => |c, r| scatterv(sendbuf, ptr(&sc).into(), ptr(&sd).into(), sendtype, recvbuf, recvcount.into(), recvtype, root, c, r)
}

coll_init! {
    /// Persistent allgather.
    fn MPI_Allgather_init / PMPI_Allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| allgather(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, c, r)
}

coll_init! {
    /// Persistent allgather with a count and displacement per rank.
    fn MPI_Allgatherv_init / PMPI_Allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| { let n = peers(comm)?; let (rc, rd) = (bound(recvcounts, n, true), bound(displs, n, true)); }
        => |c, r| allgatherv(sendbuf, sendcount.into(), sendtype, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtype, c, r)
}

coll_init! {
    /// Persistent all-to-all.
    fn MPI_Alltoall_init / PMPI_Alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| alltoall(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), recvtype, c, r)
}

coll_init! {
    /// Persistent all-to-all with counts and displacements per rank.
    fn MPI_Alltoallv_init / PMPI_Alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| {
            let (n, send) = (peers(comm)?, !in_place(sendbuf));
            let (sc, sd) = (bound(sendcounts, n, send), bound(sdispls, n, send));
            let (rc, rd) = (bound(recvcounts, n, true), bound(rdispls, n, true));
        }
        => |c, r| alltoallv(sendbuf, ptr(&sc).into(), ptr(&sd).into(), sendtype, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtype, c, r)
}

coll_init! {
    /// Persistent all-to-all with a datatype per rank and byte displacements.
    fn MPI_Alltoallw_init / PMPI_Alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const Handle)
        bind |comm| {
            let (n, send) = (peers(comm)?, !in_place(sendbuf));
            let (sc, sd, st) = (bound(sendcounts, n, send), bound(sdispls, n, send), bound(sendtypes, n, send));
            let (rc, rd, rt) = (bound(recvcounts, n, true), bound(rdispls, n, true), bound(recvtypes, n, true));
        }
        => |c, r| alltoallw(sendbuf, ptr(&sc).into(), ptr(&sd).into(), ptr(&st), recvbuf, ptr(&rc).into(), ptr(&rd).into(), ptr(&rt), c, r)
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
        => |c, r| scan(sendbuf, recvbuf, count.into(), datatype, op, c, false, r)
}

coll_init! {
    /// Persistent exclusive prefix reduction.
    fn MPI_Exscan_init / PMPI_Exscan_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| scan(sendbuf, recvbuf, count.into(), datatype, op, c, true, r)
}

coll_init! {
    /// MPI_Bcast_init with an MPI_Count count.
    fn MPI_Bcast_init_c / PMPI_Bcast_init_c(buffer: *mut c_void, count: i64, datatype: Handle, root: c_int) keep(datatype)
        => |c, r| bcast(buffer, count, datatype, root, c, r)
}

coll_init! {
    /// MPI_Reduce_init with an MPI_Count count.
    fn MPI_Reduce_init_c / PMPI_Reduce_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle, root: c_int) keep(datatype, op)
        => |c, r| reduce(sendbuf, recvbuf, count, datatype, op, root, c, r)
}

coll_init! {
    /// MPI_Allreduce_init with an MPI_Count count.
    fn MPI_Allreduce_init_c / PMPI_Allreduce_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| allreduce(sendbuf, recvbuf, count, datatype, op, c, r)
}

coll_init! {
    /// MPI_Gather_init with MPI_Count counts.
    fn MPI_Gather_init_c / PMPI_Gather_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        => |c, r| gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c, r)
}

coll_init! {
    /// MPI_Scatter_init with MPI_Count counts.
    fn MPI_Scatter_init_c / PMPI_Scatter_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        => |c, r| scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c, r)
}

coll_init! {
    /// MPI_Allgather_init with MPI_Count counts.
    fn MPI_Allgather_init_c / PMPI_Allgather_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c, r)
}

coll_init! {
    /// MPI_Alltoall_init with MPI_Count counts.
    fn MPI_Alltoall_init_c / PMPI_Alltoall_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c, r)
}

coll_init! {
    /// MPI_Gatherv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Gatherv_init_c / PMPI_Gatherv_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        bind |comm| { let (n, used) = (peers(comm)?, at_root(comm, root)?); let (rc, rd) = (bound(recvcounts, n, used), bound(displs_, n, used)); }
        => |c, r| gatherv(sendbuf, sendcount, sendtype, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtype, root, c, r)
}

coll_init! {
    /// MPI_Scatterv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Scatterv_init_c / PMPI_Scatterv_init_c(sendbuf: *const c_void, sendcounts: *const i64, displs_: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle, root: c_int) keep(sendtype, recvtype)
        bind |comm| { let (n, used) = (peers(comm)?, at_root(comm, root)?); let (sc, sd) = (bound(sendcounts, n, used), bound(displs_, n, used)); }
        => |c, r| scatterv(sendbuf, ptr(&sc).into(), ptr(&sd).into(), sendtype, recvbuf, recvcount, recvtype, root, c, r)
}

coll_init! {
    /// MPI_Allgatherv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Allgatherv_init_c / PMPI_Allgatherv_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| { let n = peers(comm)?; let (rc, rd) = (bound(recvcounts, n, true), bound(displs_, n, true)); }
        => |c, r| allgatherv(sendbuf, sendcount, sendtype, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtype, c, r)
}

coll_init! {
    /// MPI_Alltoallv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Alltoallv_init_c / PMPI_Alltoallv_init_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| {
            let (n, send) = (peers(comm)?, !in_place(sendbuf));
            let (sc, sd) = (bound(sendcounts, n, send), bound(sdispls, n, send));
            let (rc, rd) = (bound(recvcounts, n, true), bound(rdispls, n, true));
        }
        => |c, r| alltoallv(sendbuf, ptr(&sc).into(), ptr(&sd).into(), sendtype, recvbuf, ptr(&rc).into(), ptr(&rd).into(), recvtype, c, r)
}

coll_init! {
    /// MPI_Reduce_scatter_block_init with an MPI_Count count.
    fn MPI_Reduce_scatter_block_init_c / PMPI_Reduce_scatter_block_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: i64, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| {
            let n = running(|s| s.local_size(c))?;
            reduce_scatter(sendbuf, recvbuf, &vec![count_arg(recvcount)?; n], datatype, op, c, r)
        }
}

coll_init! {
    /// MPI_Scan_init with an MPI_Count count.
    fn MPI_Scan_init_c / PMPI_Scan_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| scan(sendbuf, recvbuf, count, datatype, op, c, false, r)
}

coll_init! {
    /// MPI_Exscan_init with an MPI_Count count.
    fn MPI_Exscan_init_c / PMPI_Exscan_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: Handle, op: Handle) keep(datatype, op)
        => |c, r| scan(sendbuf, recvbuf, count, datatype, op, c, true, r)
}

coll_init! {
    /// MPI_Reduce_scatter_init with MPI_Count counts.
    fn MPI_Reduce_scatter_init_c / PMPI_Reduce_scatter_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const i64, datatype: Handle, op: Handle) keep(datatype, op)
        bind |comm| {
            let n = running(|s| s.local_size(comm))?;
            let rc = bound(recvcounts, n, true).ok_or_else(|| MpiError::new(MPI_ERR_ARG, "recvcounts is NULL"))?;
            let rc = rc.iter().map(|&k| count_arg(k)).collect::<Res<Vec<usize>>>()?;
        }
        => |c, r| reduce_scatter(sendbuf, recvbuf, &rc, datatype, op, c, r)
}

coll_init! {
    /// MPI_Alltoallw_init with MPI_Count counts and MPI_Aint byte displacements.
    fn MPI_Alltoallw_init_c / PMPI_Alltoallw_init_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtypes: *const Handle)
        bind |comm| {
            let (n, send) = (peers(comm)?, !in_place(sendbuf));
            let (sc, sd, st) = (bound(sendcounts, n, send), bound(sdispls, n, send), bound(sendtypes, n, send));
            let (rc, rd, rt) = (bound(recvcounts, n, true), bound(rdispls, n, true), bound(recvtypes, n, true));
        }
        => |c, r| alltoallw(sendbuf, ptr(&sc).into(), ptr(&sd).into(), ptr(&st), recvbuf, ptr(&rc).into(), ptr(&rd).into(), ptr(&rt), c, r)
}
