//! Chapter 8 of MPI 5.0, process topologies: Cartesian, graph and distributed graph
//! topologies and the neighbourhood collectives on them (blocking, nonblocking, persistent and
//! `MPI_Count` forms). The semantics are in [`crate::topo`] and [`crate::coll`]'s `neighbor`.

use crate::abi::*;
use crate::check::{out, slice};
use crate::coll::large::{degrees, ptr};
use crate::coll::neighbor::{allgather, alltoall, alltoallw};
use crate::coll::persistent::*;
use crate::coll::{neighbor, *};
use crate::comm::register;
use crate::error::{fail, MpiError};
use crate::p2p::count_arg;
use crate::state::running;
use crate::topo::exchange;
use crate::topo::{Topo, *};
use std::ffi::{c_int, c_void};
use std::rc::Rc;

coll_c! {
    /// MPI_Neighbor_allgather with MPI_Count counts.
    fn MPI_Neighbor_allgather_c / PMPI_Neighbor_allgather_c, MPI_Ineighbor_allgather_c / PMPI_Ineighbor_allgather_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle)
        => |c, r| crate::coll::neighbor::allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, None, recvtype, c, r)
}

coll_c! {
    /// MPI_Neighbor_allgatherv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Neighbor_allgatherv_c / PMPI_Neighbor_allgatherv_c, MPI_Ineighbor_allgatherv_c / PMPI_Ineighbor_allgatherv_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle)
        => |c, r| {
            let (n, _) = degrees(c)?;
            let (rc, rd) = (bound(recvcounts, n, true), bound(displs_, n, true));
            crate::coll::neighbor::allgather(sendbuf, sendcount, sendtype, recvbuf, 0, Some((ptr(&rc).into(), ptr(&rd).into())), recvtype, c, r)
        }
}

coll_c! {
    /// MPI_Neighbor_alltoall with MPI_Count counts.
    fn MPI_Neighbor_alltoall_c / PMPI_Neighbor_alltoall_c, MPI_Ineighbor_alltoall_c / PMPI_Ineighbor_alltoall_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle)
        => |c, r| crate::coll::neighbor::alltoall(sendbuf, (sendcount, None), sendtype, recvbuf, (recvcount, None), recvtype, c, r)
}

coll_c! {
    /// MPI_Neighbor_alltoallv with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Neighbor_alltoallv_c / PMPI_Neighbor_alltoallv_c, MPI_Ineighbor_alltoallv_c / PMPI_Ineighbor_alltoallv_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtype: Handle)
        => |c, r| {
            let (indeg, outdeg) = degrees(c)?;
            let (sc, sd) = (bound(sendcounts, outdeg, true), bound(sdispls, outdeg, true));
            let (rc, rd) = (bound(recvcounts, indeg, true), bound(rdispls, indeg, true));
            crate::coll::neighbor::alltoall(sendbuf, (0, Some((ptr(&sc).into(), ptr(&sd).into()))), sendtype, recvbuf, (0, Some((ptr(&rc).into(), ptr(&rd).into()))), recvtype, c, r)
        }
}

coll_c! {
    /// MPI_Neighbor_alltoallw with MPI_Count counts.
    fn MPI_Neighbor_alltoallw_c / PMPI_Neighbor_alltoallw_c, MPI_Ineighbor_alltoallw_c / PMPI_Ineighbor_alltoallw_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtypes: *const Handle)
        => |c, r| {
            let (indeg, outdeg) = degrees(c)?;
            let (sc, rc) = (bound(sendcounts, outdeg, true), bound(recvcounts, indeg, true));
            crate::coll::neighbor::alltoallw(sendbuf, ptr(&sc).into(), sdispls.into(), sendtypes, recvbuf, ptr(&rc).into(), rdispls.into(), recvtypes, c, r)
        }
}

coll_init! {
    /// Persistent MPI_Neighbor_allgather.
    fn MPI_Neighbor_allgather_init / PMPI_Neighbor_allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| neighbor::allgather(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), None, recvtype, c, r)
}

coll_init! {
    /// Persistent MPI_Neighbor_allgatherv.
    fn MPI_Neighbor_allgatherv_init / PMPI_Neighbor_allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| { let (indeg, _) = degrees(comm)?; let (rc, rd) = (bound(recvcounts, indeg, true), bound(displs, indeg, true)); }
        => |c, r| neighbor::allgather(sendbuf, sendcount.into(), sendtype, recvbuf, 0, Some((ptr(&rc).into(), ptr(&rd).into())), recvtype, c, r)
}

coll_init! {
    /// Persistent MPI_Neighbor_alltoall.
    fn MPI_Neighbor_alltoall_init / PMPI_Neighbor_alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| neighbor::alltoall(sendbuf, (sendcount.into(), None), sendtype, recvbuf, (recvcount.into(), None), recvtype, c, r)
}

coll_init! {
    /// Persistent MPI_Neighbor_alltoallv.
    fn MPI_Neighbor_alltoallv_init / PMPI_Neighbor_alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| {
            let (indeg, outdeg) = degrees(comm)?;
            let (sc, sd) = (bound(sendcounts, outdeg, true), bound(sdispls, outdeg, true));
            let (rc, rd) = (bound(recvcounts, indeg, true), bound(rdispls, indeg, true));
        }
        => |c, r| neighbor::alltoall(sendbuf, (0, Some((ptr(&sc).into(), ptr(&sd).into()))), sendtype, recvbuf, (0, Some((ptr(&rc).into(), ptr(&rd).into()))), recvtype, c, r)
}

coll_init! {
    /// Persistent MPI_Neighbor_alltoallw.
    fn MPI_Neighbor_alltoallw_init / PMPI_Neighbor_alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const isize, recvtypes: *const Handle)
        bind |comm| {
            let (indeg, outdeg) = degrees(comm)?;
            let (sc, sd, st) = (bound(sendcounts, outdeg, true), bound(sdispls, outdeg, true), bound(sendtypes, outdeg, true));
            let (rc, rd, rt) = (bound(recvcounts, indeg, true), bound(rdispls, indeg, true), bound(recvtypes, indeg, true));
        }
        => |c, r| neighbor::alltoallw(sendbuf, ptr(&sc).into(), ptr(&sd).into(), ptr(&st), recvbuf, ptr(&rc).into(), ptr(&rd).into(), ptr(&rt), c, r)
}

coll_init! {
    /// MPI_Neighbor_allgather_init with MPI_Count counts.
    fn MPI_Neighbor_allgather_init_c / PMPI_Neighbor_allgather_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| neighbor::allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, None, recvtype, c, r)
}

coll_init! {
    /// MPI_Neighbor_allgatherv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Neighbor_allgatherv_init_c / PMPI_Neighbor_allgatherv_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, displs_: *const isize, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| { let (n, _) = degrees(comm)?; let (rc, rd) = (bound(recvcounts, n, true), bound(displs_, n, true)); }
        => |c, r| neighbor::allgather(sendbuf, sendcount, sendtype, recvbuf, 0, Some((ptr(&rc).into(), ptr(&rd).into())), recvtype, c, r)
}

coll_init! {
    /// MPI_Neighbor_alltoall_init with MPI_Count counts.
    fn MPI_Neighbor_alltoall_init_c / PMPI_Neighbor_alltoall_init_c(sendbuf: *const c_void, sendcount: i64, sendtype: Handle, recvbuf: *mut c_void, recvcount: i64, recvtype: Handle) keep(sendtype, recvtype)
        => |c, r| neighbor::alltoall(sendbuf, (sendcount, None), sendtype, recvbuf, (recvcount, None), recvtype, c, r)
}

coll_init! {
    /// MPI_Neighbor_alltoallv_init with MPI_Count counts and MPI_Aint displacements.
    fn MPI_Neighbor_alltoallv_init_c / PMPI_Neighbor_alltoallv_init_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtype: Handle) keep(sendtype, recvtype)
        bind |comm| {
            let (indeg, outdeg) = degrees(comm)?;
            let (sc, sd) = (bound(sendcounts, outdeg, true), bound(sdispls, outdeg, true));
            let (rc, rd) = (bound(recvcounts, indeg, true), bound(rdispls, indeg, true));
        }
        => |c, r| neighbor::alltoall(sendbuf, (0, Some((ptr(&sc).into(), ptr(&sd).into()))), sendtype, recvbuf, (0, Some((ptr(&rc).into(), ptr(&rd).into()))), recvtype, c, r)
}

coll_init! {
    /// MPI_Neighbor_alltoallw_init with MPI_Count counts.
    fn MPI_Neighbor_alltoallw_init_c / PMPI_Neighbor_alltoallw_init_c(sendbuf: *const c_void, sendcounts: *const i64, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const i64, rdispls: *const isize, recvtypes: *const Handle)
        bind |comm| {
            let (indeg, outdeg) = degrees(comm)?;
            let (sc, sd, st) = (bound(sendcounts, outdeg, true), bound(sdispls, outdeg, true), bound(sendtypes, outdeg, true));
            let (rc, rd, rt) = (bound(recvcounts, indeg, true), bound(rdispls, indeg, true), bound(recvtypes, indeg, true));
        }
        => |c, r| neighbor::alltoallw(sendbuf, ptr(&sc).into(), ptr(&sd).into(), ptr(&st), recvbuf, ptr(&rc).into(), ptr(&rd).into(), ptr(&rt), c, r)
}

mpi! {
    /// Gathers one block from each source neighbour, sending the same block to each destination.
    fn MPI_Neighbor_allgather / PMPI_Neighbor_allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle) on comm => {
        allgather(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), None, recvtype, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking MPI_Neighbor_allgather.
    fn MPI_Ineighbor_allgather / PMPI_Ineighbor_allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle, request: *mut Handle) on comm => {
        allgather(sendbuf, sendcount.into(), sendtype, recvbuf, recvcount.into(), None, recvtype, comm, nonnull(request)?)
    }
}

mpi! {
    /// MPI_Neighbor_allgather with a count and displacement per source.
    fn MPI_Neighbor_allgatherv / PMPI_Neighbor_allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, comm: Handle) on comm => {
        allgather(sendbuf, sendcount.into(), sendtype, recvbuf, 0, Some((recvcounts.into(), displs.into())), recvtype, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking MPI_Neighbor_allgatherv.
    fn MPI_Ineighbor_allgatherv / PMPI_Ineighbor_allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, comm: Handle, request: *mut Handle) on comm => {
        allgather(sendbuf, sendcount.into(), sendtype, recvbuf, 0, Some((recvcounts.into(), displs.into())), recvtype, comm, nonnull(request)?)
    }
}

mpi! {
    /// Sends block `j` to destination `j` and receives block `i` from source `i`.
    fn MPI_Neighbor_alltoall / PMPI_Neighbor_alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle) on comm => {
        alltoall(sendbuf, (sendcount.into(), None), sendtype, recvbuf, (recvcount.into(), None), recvtype, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking MPI_Neighbor_alltoall.
    fn MPI_Ineighbor_alltoall / PMPI_Ineighbor_alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle, request: *mut Handle) on comm => {
        alltoall(sendbuf, (sendcount.into(), None), sendtype, recvbuf, (recvcount.into(), None), recvtype, comm, nonnull(request)?)
    }
}

mpi! {
    /// MPI_Neighbor_alltoall with counts and displacements per neighbour.
    fn MPI_Neighbor_alltoallv / PMPI_Neighbor_alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle, comm: Handle) on comm => {
        alltoall(sendbuf, (0, Some((sendcounts.into(), sdispls.into()))), sendtype, recvbuf, (0, Some((recvcounts.into(), rdispls.into()))), recvtype, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking MPI_Neighbor_alltoallv.
    fn MPI_Ineighbor_alltoallv / PMPI_Ineighbor_alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle, comm: Handle, request: *mut Handle) on comm => {
        alltoall(sendbuf, (0, Some((sendcounts.into(), sdispls.into()))), sendtype, recvbuf, (0, Some((recvcounts.into(), rdispls.into()))), recvtype, comm, nonnull(request)?)
    }
}

mpi! {
    /// MPI_Neighbor_alltoallv with a datatype per neighbour and byte displacements.
    fn MPI_Neighbor_alltoallw / PMPI_Neighbor_alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const isize, recvtypes: *const Handle, comm: Handle) on comm => {
        alltoallw(sendbuf, sendcounts.into(), sdispls.into(), sendtypes, recvbuf, recvcounts.into(), rdispls.into(), recvtypes, comm, BLOCKING)
    }
}

mpi! {
    /// Nonblocking MPI_Neighbor_alltoallw.
    fn MPI_Ineighbor_alltoallw / PMPI_Ineighbor_alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const isize, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const isize, recvtypes: *const Handle, comm: Handle, request: *mut Handle) on comm => {
        alltoallw(sendbuf, sendcounts.into(), sdispls.into(), sendtypes, recvbuf, recvcounts.into(), rdispls.into(), recvtypes, comm, nonnull(request)?)
    }
}

mpi! {
    /// Balanced dimensions for a grid of `nnodes`.
    fn MPI_Dims_create / PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) on super::NONE => {
        let n = count_arg(ndims)?;
        if n > 0 && dims.is_null() {
            return fail(MPI_ERR_ARG, "dims is NULL");
        }
        let d = if n == 0 { &mut [][..] } else { std::slice::from_raw_parts_mut(dims, n) };
        dims_create(count_arg(nnodes)?, d)
    }
}

mpi! {
    /// A communicator with a Cartesian grid (no reordering).
    fn MPI_Cart_create / PMPI_Cart_create(comm_old: Handle, ndims: c_int, dims: *const c_int, periods: *const c_int, _reorder: c_int, comm_cart: *mut Handle) on comm_old => {
        // On error the output is MPI_COMM_NULL, as MPICH leaves it.
        let result = out(comm_cart, "comm_cart")?;
        *result = MPI_COMM_NULL;
        running(|s| s.intra_comm(comm_old).map(drop))?;
        let n = count_arg(ndims)?;
        let (d, p) = (slice(dims, n, "dims")?, slice(periods, n, "periods")?);
        if d.iter().any(|&x| x <= 0) {
            return fail(MPI_ERR_DIMS, "grid dimensions must be positive");
        }
        let cart = Cart { dims: d.iter().map(|&x| x as usize).collect(), periods: p.iter().map(|&x| x != 0).collect() };
        *result = cart_comm(comm_old, cart)?;
        Ok(())
    }
}

mpi! {
    /// The topology kind of a communicator.
    fn MPI_Topo_test / PMPI_Topo_test(comm: Handle, status: *mut c_int) on comm => {
        let kind = match running(|s| topo_of(s, comm))?.as_deref() {
            Some(Topo::Cart(_)) => MPI_CART,
            Some(Topo::Graph(_)) => MPI_GRAPH,
            Some(Topo::Dist(_)) => MPI_DIST_GRAPH,
            None => MPI_UNDEFINED,
        };
        *out(status, "status")? = kind;
        Ok(())
    }
}

mpi! {
    /// Number of grid dimensions.
    fn MPI_Cartdim_get / PMPI_Cartdim_get(comm: Handle, ndims: *mut c_int) on comm => {
        *out(ndims, "ndims")? = cart_of(comm)?.dims.len() as c_int;
        Ok(())
    }
}

mpi! {
    /// The grid and this rank's coordinates.
    fn MPI_Cart_get / PMPI_Cart_get(comm: Handle, maxdims: c_int, dims: *mut c_int, periods: *mut c_int, coords: *mut c_int) on comm => {
        let cart = cart_of(comm)?;
        let rank = running(|s| Ok(s.comm(comm)?.comm.rank()))?;
        let n = cart.dims.len().min(count_arg(maxdims)?);
        let c = cart.coords(rank);
        for (i, (&d, (&p, &x))) in cart.dims.iter().zip(cart.periods.iter().zip(&c)).take(n).enumerate() {
            if !dims.is_null() { *dims.add(i) = d as c_int; }
            if !periods.is_null() { *periods.add(i) = p as c_int; }
            if !coords.is_null() { *coords.add(i) = x as c_int; }
        }
        Ok(())
    }
}

mpi! {
    /// The rank at some coordinates.
    fn MPI_Cart_rank / PMPI_Cart_rank(comm: Handle, coords: *const c_int, rank: *mut c_int) on comm => {
        let cart = cart_of(comm)?;
        let c: Vec<i64> = slice(coords, cart.dims.len(), "coords")?.iter().map(|&x| x as i64).collect();
        let r = cart.rank(&c).ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("coordinates {c:?} are off the grid {:?}", cart.dims)))?;
        *out(rank, "rank")? = r as c_int;
        Ok(())
    }
}

mpi! {
    /// The coordinates of a rank.
    fn MPI_Cart_coords / PMPI_Cart_coords(comm: Handle, rank: c_int, maxdims: c_int, coords: *mut c_int) on comm => {
        let cart = cart_of(comm)?;
        let n: usize = cart.dims.iter().product();
        let r = usize::try_from(rank).ok().filter(|&r| r < n)
            .ok_or_else(|| MpiError::new(MPI_ERR_RANK, format!("rank {rank} is not in a grid of {n}")))?;
        let c = cart.coords(r);
        let m = c.len().min(count_arg(maxdims)?);
        if m > 0 && coords.is_null() {
            return fail(MPI_ERR_ARG, "coords is NULL");
        }
        for (i, &x) in c.iter().take(m).enumerate() {
            *coords.add(i) = x as c_int;
        }
        Ok(())
    }
}

mpi! {
    /// Neighbours `disp` steps away along `direction` (MPI_PROC_NULL off a non-periodic edge).
    fn MPI_Cart_shift / PMPI_Cart_shift(comm: Handle, direction: c_int, disp: c_int, rank_source: *mut c_int, rank_dest: *mut c_int) on comm => {
        let cart = cart_of(comm)?;
        let d = usize::try_from(direction).ok().filter(|&d| d < cart.dims.len())
            .ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("direction {direction} is not a grid dimension")))?;
        let me = running(|s| Ok(s.comm(comm)?.comm.rank()))?;
        let here: Vec<i64> = cart.coords(me).iter().map(|&x| x as i64).collect();
        let at = |delta: i64| {
            let mut c = here.clone();
            c[d] += delta;
            cart.rank(&c).map_or(MPI_PROC_NULL, |r| r as c_int)
        };
        *out(rank_source, "rank_source")? = at(-(disp as i64));
        *out(rank_dest, "rank_dest")? = at(disp as i64);
        Ok(())
    }
}

mpi! {
    /// Sub-grids keeping the dimensions marked in `remain_dims`.
    fn MPI_Cart_sub / PMPI_Cart_sub(comm: Handle, remain_dims: *const c_int, newcomm: *mut Handle) on comm => {
        let cart = cart_of(comm)?;
        let keep: Vec<bool> = slice(remain_dims, cart.dims.len(), "remain_dims")?.iter().map(|&x| x != 0).collect();
        let core = running(|s| s.intra_comm(comm))?;
        let c = cart.coords(core.rank());
        // Ranks that agree on the dropped coordinates share a sub-grid.
        let (mut color, mut key) = (0usize, 0usize);
        for i in 0..c.len() {
            if keep[i] { key = key * cart.dims[i] + c[i]; } else { color = color * cart.dims[i] + c[i]; }
        }
        // Keeping no dimension gives a zero-dimensional grid; as MPICH does, only the process
        // at the origin gets it (congruent to MPI_COMM_SELF), the others MPI_COMM_NULL.
        let color = if keep.iter().any(|&k| k) || core.rank() == 0 { Some(color as u32) } else { None };
        let h = register(comm, core.split(color, key as c_int)?, false)?;
        if h == MPI_COMM_NULL {
            *out(newcomm, "newcomm")? = h;
            return Ok(());
        }
        let sub = Cart {
            dims: (0..c.len()).filter(|&i| keep[i]).map(|i| cart.dims[i]).collect(),
            periods: (0..c.len()).filter(|&i| keep[i]).map(|i| cart.periods[i]).collect(),
        };
        running(|s| { s.comm_mut(h)?.topo = Some(Rc::new(Topo::Cart(sub))); Ok(()) })?;
        *out(newcomm, "newcomm")? = h;
        Ok(())
    }
}

mpi! {
    /// This rank's rank in a grid of `dims` (no reordering: itself, or MPI_UNDEFINED).
    fn MPI_Cart_map / PMPI_Cart_map(comm: Handle, ndims: c_int, dims: *const c_int, _periods: *const c_int, newrank: *mut c_int) on comm => {
        let d = slice(dims, count_arg(ndims)?, "dims")?;
        let n: usize = d.iter().map(|&x| x.max(0) as usize).product();
        let me = running(|s| Ok(s.comm(comm)?.comm.rank()))?;
        *out(newrank, "newrank")? = if me < n { me as c_int } else { MPI_UNDEFINED };
        Ok(())
    }
}

mpi! {
    /// A communicator of the first `nnodes` ranks with a graph (no reordering).
    fn MPI_Graph_create / PMPI_Graph_create(comm_old: Handle, nnodes: c_int, index: *const c_int, edges: *const c_int, _reorder: c_int, comm_graph: *mut Handle) on comm_old => {
        running(|s| s.intra_comm(comm_old).map(drop))?;
        let out = out(comm_graph, "comm_graph")?;
        let g = graph_arg(nnodes, index, edges)?;
        let n = g.index.len();
        // An empty graph is allowed and gives MPI_COMM_NULL everywhere (MPI 4.1 §8.5.3).
        *out = if n == 0 { MPI_COMM_NULL } else { topo_comm(comm_old, n, Topo::Graph(g))? };
        Ok(())
    }
}

mpi! {
    /// Number of nodes and edges of a graph communicator.
    fn MPI_Graphdims_get / PMPI_Graphdims_get(comm: Handle, nnodes: *mut c_int, nedges: *mut c_int) on comm => {
        let t = graph_of(comm)?;
        let g = graph(&t);
        *out(nnodes, "nnodes")? = g.index.len() as c_int;
        *out(nedges, "nedges")? = g.edges.len() as c_int;
        Ok(())
    }
}

mpi! {
    /// The graph's index and edges (up to `maxindex` and `maxedges` entries).
    fn MPI_Graph_get / PMPI_Graph_get(comm: Handle, maxindex: c_int, maxedges: c_int, index: *mut c_int, edges: *mut c_int) on comm => {
        let t = graph_of(comm)?;
        let g = graph(&t);
        let (mi, me) = (degree(maxindex, "maxindex")?, degree(maxedges, "maxedges")?);
        if (mi > 0 && index.is_null()) || (me > 0 && edges.is_null()) {
            return fail(MPI_ERR_ARG, "index or edges is NULL");
        }
        put(index, maxindex, g.index.iter().map(|&x| x as c_int));
        put(edges, maxedges, g.edges.iter().map(|&x| x as c_int));
        Ok(())
    }
}

mpi! {
    /// Number of neighbours of a node of a graph communicator.
    fn MPI_Graph_neighbors_count / PMPI_Graph_neighbors_count(comm: Handle, rank: c_int, nneighbors: *mut c_int) on comm => {
        let t = graph_of(comm)?;
        let g = graph(&t);
        *out(nneighbors, "nneighbors")? = g.neighbours(node(g, rank)?).len() as c_int;
        Ok(())
    }
}

mpi! {
    /// Neighbours of a node of a graph communicator (up to `maxneighbors`).
    fn MPI_Graph_neighbors / PMPI_Graph_neighbors(comm: Handle, rank: c_int, maxneighbors: c_int, neighbors: *mut c_int) on comm => {
        let t = graph_of(comm)?;
        let g = graph(&t);
        let nb = g.neighbours(node(g, rank)?);
        if degree(maxneighbors, "maxneighbors")? > 0 && !nb.is_empty() && neighbors.is_null() {
            return fail(MPI_ERR_ARG, "neighbors is NULL");
        }
        put(neighbors, maxneighbors, nb.iter().map(|&x| x as c_int));
        Ok(())
    }
}

mpi! {
    /// This rank's rank in a graph of `nnodes` (no reordering: itself, or MPI_UNDEFINED).
    fn MPI_Graph_map / PMPI_Graph_map(comm: Handle, nnodes: c_int, index: *const c_int, edges: *const c_int, newrank: *mut c_int) on comm => {
        let core = running(|s| s.intra_comm(comm))?;
        let g = graph_arg(nnodes, index, edges)?;
        let n = g.index.len();
        if n == 0 || n > core.size() {
            return fail(MPI_ERR_ARG, format!("a graph of {n} nodes for a communicator of {}", core.size()));
        }
        *out(newrank, "newrank")? = if core.rank() < n { core.rank() as c_int } else { MPI_UNDEFINED };
        Ok(())
    }
}

mpi! {
    /// A distributed graph communicator from each process's own in- and out-edges.
    fn MPI_Dist_graph_create_adjacent / PMPI_Dist_graph_create_adjacent(comm_old: Handle, indegree: c_int, sources: *const c_int, sourceweights: *const c_int, outdegree: c_int, destinations: *const c_int, destweights: *const c_int, _info: Handle, _reorder: c_int, comm_dist_graph: *mut Handle) on comm_old => {
        let n = running(|s| s.intra_comm(comm_old))?.size();
        let out = out(comm_dist_graph, "comm_dist_graph")?;
        let (ni, no) = (degree(indegree, "indegree")?, degree(outdegree, "outdegree")?);
        let src = ranks_below(slice(sources, ni, "sources")?, n, "source")?;
        let dst = ranks_below(slice(destinations, no, "destinations")?, n, "destination")?;
        let (sw, sweighted) = weights(sourceweights, ni, "sourceweights")?;
        let (dw, dweighted) = weights(destweights, no, "destweights")?;
        let g = DistGraph {
            sources: src.into_iter().zip(sw.into_iter().chain(std::iter::repeat(1))).collect(),
            destinations: dst.into_iter().zip(dw.into_iter().chain(std::iter::repeat(1))).collect(),
            weighted: sweighted && dweighted,
        };
        *out = dist_comm(comm_old, g)?;
        Ok(())
    }
}

mpi! {
    /// A distributed graph communicator from edges any process may give (`degrees[i]` edges from
    /// `sources[i]`, their ends in `destinations`).
    fn MPI_Dist_graph_create / PMPI_Dist_graph_create(comm_old: Handle, n: c_int, sources: *const c_int, degrees: *const c_int, destinations: *const c_int, weights_: *const c_int, _info: Handle, _reorder: c_int, comm_dist_graph: *mut Handle) on comm_old => {
        let size = running(|s| s.intra_comm(comm_old))?.size();
        let out = out(comm_dist_graph, "comm_dist_graph")?;
        let k = degree(n, "n")?;
        let src = ranks_below(slice(sources, k, "sources")?, size, "source")?;
        let deg = slice(degrees, k, "degrees")?;
        let total = deg.iter().try_fold(0usize, |acc, &d| Ok::<_, MpiError>(acc + degree(d, "degree")?))?;
        let dst = ranks_below(slice(destinations, total, "destinations")?, size, "destination")?;
        let (w, weighted) = weights(weights_, total, "weights")?;
        // Edge j runs from the source whose degrees cover j to destinations[j].
        let froms = src.iter().zip(deg).flat_map(|(&s, &d)| std::iter::repeat_n(s, d as usize));
        let edges: Vec<(usize, usize, c_int)> = froms.zip(&dst).enumerate()
            .map(|(j, (s, &d))| (s, d, w.get(j).copied().unwrap_or(1)))
            .collect();
        let mut g = exchange(comm_old, &edges)?;
        g.weighted = weighted;
        *out = dist_comm(comm_old, g)?;
        Ok(())
    }
}

mpi! {
    /// In- and out-degree of this process in a distributed graph, and whether it is weighted.
    fn MPI_Dist_graph_neighbors_count / PMPI_Dist_graph_neighbors_count(comm: Handle, indegree: *mut c_int, outdegree: *mut c_int, weighted: *mut c_int) on comm => {
        let t = dist_of(comm)?;
        let d = dist(&t);
        *out(indegree, "indegree")? = d.sources.len() as c_int;
        *out(outdegree, "outdegree")? = d.destinations.len() as c_int;
        *out(weighted, "weighted")? = d.weighted as c_int;
        Ok(())
    }
}

mpi! {
    /// This process's sources and destinations in a distributed graph (and their weights, if
    /// the arrays are not MPI_UNWEIGHTED).
    fn MPI_Dist_graph_neighbors / PMPI_Dist_graph_neighbors(comm: Handle, maxindegree: c_int, sources: *mut c_int, sourceweights: *mut c_int, maxoutdegree: c_int, destinations: *mut c_int, destweights: *mut c_int) on comm => {
        let t = dist_of(comm)?;
        let d = dist(&t);
        let (mi, mo) = (degree(maxindegree, "maxindegree")?, degree(maxoutdegree, "maxoutdegree")?);
        if (mi > 0 && sources.is_null()) || (mo > 0 && destinations.is_null()) {
            return fail(MPI_ERR_ARG, "sources or destinations is NULL");
        }
        put(sources, maxindegree, d.sources.iter().map(|&(r, _)| r as c_int));
        put(destinations, maxoutdegree, d.destinations.iter().map(|&(r, _)| r as c_int));
        if d.weighted {
            put(sourceweights, maxindegree, d.sources.iter().map(|&(_, w)| w));
            put(destweights, maxoutdegree, d.destinations.iter().map(|&(_, w)| w));
        }
        Ok(())
    }
}
