//! Cartesian process topologies (`MPI_Cart_*`, `MPI_Dims_create`, `MPI_Topo_test`).
//!
//! A Cartesian communicator is an ordinary communicator of the first `∏ dims` ranks (ferry does
//! not reorder) with the grid attached; ranks are numbered in row-major (C) order.

use crate::abi::*;
use crate::comm::register;
use crate::error::{fail, MpiError, Res};
use crate::p2p::count_arg;
use crate::state::running;
use std::ffi::c_int;
use std::rc::Rc;

/// The grid of a Cartesian communicator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cart {
    /// Extent of each dimension.
    pub dims: Vec<usize>,
    /// Whether each dimension wraps around.
    pub periods: Vec<bool>,
}

impl Cart {
    /// Coordinates of `rank`.
    pub fn coords(&self, mut rank: usize) -> Vec<usize> {
        let mut c = vec![0; self.dims.len()];
        for i in (0..self.dims.len()).rev() {
            c[i] = rank % self.dims[i];
            rank /= self.dims[i];
        }
        c
    }

    /// Rank at `coords` (wrapped in periodic dimensions), or `None` off the grid.
    pub fn rank(&self, coords: &[i64]) -> Option<usize> {
        let mut r = 0usize;
        for (i, &c) in coords.iter().enumerate() {
            let d = self.dims[i] as i64;
            let c = if self.periods[i] { c.rem_euclid(d) } else { c };
            if !(0..d).contains(&c) {
                return None;
            }
            r = r * self.dims[i] + c as usize;
        }
        Some(r)
    }
}

/// Splits `nnodes` over `dims` (zeros are free, others fixed) as evenly as possible, larger
/// extents first, as MPI_Dims_create does.
pub fn dims_create(nnodes: usize, dims: &mut [c_int]) -> Res {
    let fixed: usize = dims
        .iter()
        .filter(|&&d| d > 0)
        .map(|&d| d as usize)
        .product();
    if dims.iter().any(|&d| d < 0) {
        return fail(MPI_ERR_DIMS, "negative entry in dims");
    }
    if fixed == 0 || !nnodes.is_multiple_of(fixed) {
        return fail(
            MPI_ERR_DIMS,
            format!("{nnodes} nodes do not divide over the fixed dims (product {fixed})"),
        );
    }
    let free: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] == 0).collect();
    let rest = nnodes / fixed;
    if free.is_empty() {
        return if rest == 1 {
            Ok(())
        } else {
            fail(
                MPI_ERR_DIMS,
                "dims are all fixed and do not multiply to nnodes",
            )
        };
    }
    let sizes = balanced(rest, free.len());
    for (&i, &s) in free.iter().zip(&sizes) {
        dims[i] = s as c_int;
    }
    Ok(())
}

/// `n` as a product of `k` factors, largest first, as even as possible: the smallest spread
/// between largest and smallest factor, ties going to the larger smallest factors (the choices
/// MPICH's `topo/dims5` expects).
fn balanced(n: usize, k: usize) -> Vec<usize> {
    /// Every non-increasing split of `n` into `k` factors of at most `cap`, drawn from
    /// `divisors` (all divisors of the original n, ascending).
    fn splits(
        divisors: &[usize],
        n: usize,
        k: usize,
        cap: usize,
        prefix: &mut Vec<usize>,
        best: &mut Option<Vec<usize>>,
    ) {
        let spread = |v: &[usize]| v[0] - v[v.len() - 1];
        if k == 1 {
            if n <= cap {
                prefix.push(n);
                let better = match best.as_deref() {
                    None => true,
                    Some(b) => {
                        spread(prefix) < spread(b)
                            || (spread(prefix) == spread(b)
                                && prefix.iter().rev().gt(b.iter().rev()))
                    }
                };
                if better {
                    *best = Some(prefix.clone());
                }
                prefix.pop();
            }
            return;
        }
        for &d in divisors.iter().rev() {
            if d > cap || !n.is_multiple_of(d) {
                continue;
            }
            // The next factor is the largest of the rest: at least their k-th root.
            if d.checked_pow(k as u32).is_some_and(|p| p < n) {
                break;
            }
            // No split under this prefix can beat the best spread found so far.
            if let (Some(b), Some(&first)) = (best.as_deref(), prefix.first()) {
                if first - d > spread(b) {
                    break;
                }
            }
            prefix.push(d);
            splits(divisors, n / d, k - 1, d, prefix, best);
            prefix.pop();
        }
    }
    if k == 0 {
        return Vec::new();
    }
    let mut divisors: Vec<usize> = (1..)
        .take_while(|d| d * d <= n)
        .filter(|d| n.is_multiple_of(*d))
        .flat_map(|d| [d, n / d])
        .collect();
    divisors.sort_unstable();
    divisors.dedup();
    let mut best = None;
    splits(&divisors, n, k, n, &mut Vec::with_capacity(k), &mut best);
    best.unwrap_or_else(|| {
        let mut v = vec![1; k];
        v[0] = n;
        v
    })
}

unsafe fn out<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    p.as_mut()
        .ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("{what} is NULL")))
}

unsafe fn ints<'a>(p: *const c_int, n: usize, what: &str) -> Res<&'a [c_int]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return fail(MPI_ERR_ARG, format!("{what} is NULL"));
    }
    Ok(std::slice::from_raw_parts(p, n))
}

fn cart_of(comm: Handle) -> Res<Rc<Cart>> {
    running(|s| {
        s.comm(comm)?.cart.clone().ok_or_else(|| {
            MpiError::new(
                MPI_ERR_TOPOLOGY,
                "the communicator has no Cartesian topology",
            )
        })
    })
}

/// A communicator of the first `∏ dims` ranks of `comm` carrying `cart`; others get NULL.
fn cart_comm(comm: Handle, cart: Cart) -> Res<Handle> {
    let core = running(|s| s.intra_comm(comm))?;
    let n: usize = cart.dims.iter().product();
    if n > core.size() {
        return fail(
            MPI_ERR_ARG,
            format!(
                "a grid of {n} ranks does not fit a communicator of {}",
                core.size()
            ),
        );
    }
    let color = (core.rank() < n).then_some(0);
    let h = register(comm, core.split(color, core.rank() as c_int)?, false)?;
    if h != MPI_COMM_NULL {
        running(|s| {
            s.comm_mut(h)?.cart = Some(Rc::new(cart));
            Ok(())
        })?;
    }
    Ok(h)
}

mpi! {
    /// Balanced dimensions for a grid of `nnodes`.
    fn MPI_Dims_create / PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) on crate::NONE => {
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
        running(|s| s.intra_comm(comm_old).map(drop))?;
        let n = count_arg(ndims)?;
        let (d, p) = (ints(dims, n, "dims")?, ints(periods, n, "periods")?);
        if d.iter().any(|&x| x <= 0) {
            return fail(MPI_ERR_DIMS, "grid dimensions must be positive");
        }
        let cart = Cart { dims: d.iter().map(|&x| x as usize).collect(), periods: p.iter().map(|&x| x != 0).collect() };
        *out(comm_cart, "comm_cart")? = cart_comm(comm_old, cart)?;
        Ok(())
    }
}
mpi! {
    /// The topology kind of a communicator.
    fn MPI_Topo_test / PMPI_Topo_test(comm: Handle, status: *mut c_int) on comm => {
        let has = running(|s| Ok(s.comm(comm)?.cart.is_some()))?;
        *out(status, "status")? = if has { MPI_CART } else { MPI_UNDEFINED };
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
        let c: Vec<i64> = ints(coords, cart.dims.len(), "coords")?.iter().map(|&x| x as i64).collect();
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
        let keep: Vec<bool> = ints(remain_dims, cart.dims.len(), "remain_dims")?.iter().map(|&x| x != 0).collect();
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
        running(|s| { s.comm_mut(h)?.cart = Some(Rc::new(sub)); Ok(()) })?;
        *out(newcomm, "newcomm")? = h;
        Ok(())
    }
}
mpi! {
    /// This rank's rank in a grid of `dims` (no reordering: itself, or MPI_UNDEFINED).
    fn MPI_Cart_map / PMPI_Cart_map(comm: Handle, ndims: c_int, dims: *const c_int, _periods: *const c_int, newrank: *mut c_int) on comm => {
        let d = ints(dims, count_arg(ndims)?, "dims")?;
        let n: usize = d.iter().map(|&x| x.max(0) as usize).product();
        let me = running(|s| Ok(s.comm(comm)?.comm.rank()))?;
        *out(newrank, "newrank")? = if me < n { me as c_int } else { MPI_UNDEFINED };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_are_balanced_and_descending() {
        let mut d = [0, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [4, 3]);
        let mut d = [0, 0, 0];
        dims_create(16, &mut d).unwrap();
        assert_eq!(d, [4, 2, 2]);
        let mut d = [0, 3, 0];
        dims_create(24, &mut d).unwrap();
        assert_eq!(d, [4, 3, 2]);
        let mut d = [0, 5];
        assert!(dims_create(12, &mut d).is_err());
        let mut d = [0, 0];
        dims_create(7, &mut d).unwrap();
        assert_eq!(d, [7, 1]);
        let mut d = [0, 0];
        dims_create(72, &mut d).unwrap();
        assert_eq!(d, [9, 8], "most balanced, as MPICH's topo/dims5 expects");
        let mut d = [0, 0, 0];
        dims_create(5040, &mut d).unwrap();
        assert_eq!(d, [21, 16, 15], "equal spread: the larger smallest factor");
        let mut d = [0, 0, 0, 0];
        dims_create(5616, &mut d).unwrap();
        assert_eq!(d, [13, 9, 8, 6]);
    }

    #[test]
    fn coordinates_round_trip_row_major() {
        let cart = Cart {
            dims: vec![2, 3],
            periods: vec![false, true],
        };
        assert_eq!(cart.coords(4), vec![1, 1]);
        for r in 0..6 {
            let c: Vec<i64> = cart.coords(r).iter().map(|&x| x as i64).collect();
            assert_eq!(cart.rank(&c), Some(r));
        }
        assert_eq!(cart.rank(&[0, 3]), Some(0), "periodic dimension wraps");
        assert_eq!(cart.rank(&[2, 0]), None, "non-periodic edge");
    }
}
