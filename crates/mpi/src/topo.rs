//! Process topologies: Cartesian (`MPI_Cart_*`, `MPI_Dims_create`), graph (`MPI_Graph_*`) and
//! distributed graph (`MPI_Dist_graph_*`), and `MPI_Topo_test`.
//!
//! A topology communicator is an ordinary communicator with a [`Topo`] attached (ferry does not
//! reorder): a Cartesian one holds the first `∏ dims` ranks numbered in row-major (C) order, a
//! graph one the first `nnodes` ranks, a distributed graph one every rank. `MPI_Comm_dup` copies
//! the topology. [`Topo::neighbours`] gives the sources and destinations that the neighbourhood
//! collectives (`crate::coll`) exchange with.

use crate::abi::*;
use crate::check::slice;
use crate::comm::register;
use crate::error::{fail, MpiError, Res};
use crate::state::{running, State};
use std::ffi::c_int;
use std::rc::Rc;

/// The topology attached to a communicator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Topo {
    /// A Cartesian grid.
    Cart(Cart),
    /// A graph (`MPI_Graph_create`): every process knows every edge.
    Graph(Graph),
    /// A distributed graph: each process knows only its own edges.
    Dist(DistGraph),
}

/// A graph as `MPI_Graph_create` takes it: node `i`'s neighbours are
/// `edges[index[i-1]..index[i]]` (with `index[-1] = 0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Graph {
    /// Cumulative neighbour counts, one per node.
    pub(crate) index: Vec<usize>,
    /// Neighbours of every node, one after the other.
    pub(crate) edges: Vec<usize>,
}

impl Graph {
    /// Neighbours of `rank` (in the order given at creation, duplicates and self loops kept).
    pub(crate) fn neighbours(&self, rank: usize) -> &[usize] {
        let start = if rank == 0 { 0 } else { self.index[rank - 1] };
        &self.edges[start..self.index[rank]]
    }
}

/// This process's edges of a distributed graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DistGraph {
    /// Processes with an edge to this one, and their weights.
    pub(crate) sources: Vec<(usize, c_int)>,
    /// Processes this one has an edge to, and their weights.
    pub(crate) destinations: Vec<(usize, c_int)>,
    /// Whether weights were given (not MPI_UNWEIGHTED).
    pub(crate) weighted: bool,
}

impl Topo {
    /// The neighbourhood of `rank` for neighbourhood collectives: the ranks data comes from
    /// (one receive block each, in order) and goes to (one send block each); MPI_PROC_NULL
    /// entries exchange nothing. A Cartesian grid lists, for each dimension, the neighbour at
    /// displacement -1 and then +1, as sources and as destinations.
    pub(crate) fn neighbours(&self, rank: usize) -> (Vec<c_int>, Vec<c_int>) {
        match self {
            Topo::Cart(cart) => {
                let here: Vec<i64> = cart.coords(rank).iter().map(|&x| x as i64).collect();
                let mut v = Vec::with_capacity(2 * here.len());
                for d in 0..here.len() {
                    for delta in [-1, 1] {
                        let mut c = here.clone();
                        c[d] += delta;
                        v.push(cart.rank(&c).map_or(MPI_PROC_NULL, |r| r as c_int));
                    }
                }
                (v.clone(), v)
            }
            Topo::Graph(g) => {
                let v: Vec<c_int> = g.neighbours(rank).iter().map(|&r| r as c_int).collect();
                (v.clone(), v)
            }
            Topo::Dist(d) => (
                d.sources.iter().map(|&(r, _)| r as c_int).collect(),
                d.destinations.iter().map(|&(r, _)| r as c_int).collect(),
            ),
        }
    }
}

/// The grid of a Cartesian communicator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cart {
    /// Extent of each dimension.
    pub(crate) dims: Vec<usize>,
    /// Whether each dimension wraps around.
    pub(crate) periods: Vec<bool>,
}

impl Cart {
    /// Coordinates of `rank`.
    pub(crate) fn coords(&self, mut rank: usize) -> Vec<usize> {
        let mut c = vec![0; self.dims.len()];
        for i in (0..self.dims.len()).rev() {
            c[i] = rank % self.dims[i];
            rank /= self.dims[i];
        }
        c
    }

    /// Rank at `coords` (wrapped in periodic dimensions), or `None` off the grid.
    pub(crate) fn rank(&self, coords: &[i64]) -> Option<usize> {
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
pub(crate) fn dims_create(nnodes: usize, dims: &mut [c_int]) -> Res {
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

/// The topology of `comm`, if it has one.
pub(crate) fn topo_of(s: &State, comm: Handle) -> Res<Option<Rc<Topo>>> {
    Ok(s.comm(comm)?.topo.clone())
}

pub(crate) fn cart_of(comm: Handle) -> Res<Rc<Cart>> {
    let no = || {
        MpiError::new(
            MPI_ERR_TOPOLOGY,
            "the communicator has no Cartesian topology",
        )
    };
    let t = running(|s| topo_of(s, comm))?.ok_or_else(no)?;
    match &*t {
        Topo::Cart(c) => Ok(Rc::new(c.clone())),
        _ => Err(no()),
    }
}

pub(crate) fn graph_of(comm: Handle) -> Res<Rc<Topo>> {
    let t = running(|s| topo_of(s, comm))?;
    t.filter(|t| matches!(**t, Topo::Graph(_)))
        .ok_or_else(|| MpiError::new(MPI_ERR_TOPOLOGY, "the communicator has no graph topology"))
}

pub(crate) fn dist_of(comm: Handle) -> Res<Rc<Topo>> {
    let t = running(|s| topo_of(s, comm))?;
    t.filter(|t| matches!(**t, Topo::Dist(_))).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_TOPOLOGY,
            "the communicator has no distributed graph topology",
        )
    })
}

/// A communicator of the first `n` ranks of `comm` carrying `topo`; others get NULL.
pub(crate) fn topo_comm(comm: Handle, n: usize, topo: Topo) -> Res<Handle> {
    let core = running(|s| s.intra_comm(comm))?;
    if n > core.size() {
        return fail(
            MPI_ERR_ARG,
            format!(
                "a topology of {n} ranks does not fit a communicator of {}",
                core.size()
            ),
        );
    }
    let color = (core.rank() < n).then_some(0);
    let h = register(comm, core.split(color, core.rank() as c_int)?, false)?;
    if h != MPI_COMM_NULL {
        running(|s| {
            s.comm_mut(h)?.topo = Some(Rc::new(topo));
            Ok(())
        })?;
    }
    Ok(h)
}

pub(crate) fn cart_comm(comm: Handle, cart: Cart) -> Res<Handle> {
    let n = cart.dims.iter().product();
    topo_comm(comm, n, Topo::Cart(cart))
}

/// Ranks `0..n` from C, each below `size` (MPI_ERR_RANK otherwise).
pub(crate) fn ranks_below(v: &[c_int], size: usize, what: &str) -> Res<Vec<usize>> {
    v.iter()
        .map(|&r| {
            usize::try_from(r)
                .ok()
                .filter(|&r| r < size)
                .ok_or_else(|| {
                    MpiError::new(
                        MPI_ERR_RANK,
                        format!("{what} {r} is not a rank of a group of {size}"),
                    )
                })
        })
        .collect()
}

/// `n` weights at `p` (MPI_UNWEIGHTED: all 1, and not weighted; MPI_WEIGHTS_EMPTY only for
/// `n` = 0).
pub(crate) unsafe fn weights(p: *const c_int, n: usize, what: &str) -> Res<(Vec<c_int>, bool)> {
    // SAFETY: this function's contract is the unsafe operations' own: `p`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        match p as usize {
            MPI_UNWEIGHTED => Ok((vec![1; n], false)),
            MPI_WEIGHTS_EMPTY if n > 0 => fail(
                MPI_ERR_ARG,
                format!("{what} is MPI_WEIGHTS_EMPTY for {n} edges"),
            ),
            MPI_WEIGHTS_EMPTY => Ok((Vec::new(), true)),
            _ => {
                let w = slice(p, n, what)?;
                if let Some(&bad) = w.iter().find(|&&x| x < 0) {
                    return fail(MPI_ERR_ARG, format!("negative weight {bad} in {what}"));
                }
                Ok((w.to_vec(), true))
            }
        }
    }
}

/// A degree or node count from C.
pub(crate) fn degree(n: c_int, what: &str) -> Res<usize> {
    usize::try_from(n).map_err(|_| MpiError::new(MPI_ERR_ARG, format!("negative {what} {n}")))
}

/// Checks a graph given as `index`/`edges` of `nnodes` nodes.
pub(crate) unsafe fn graph_arg(
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
) -> Res<Graph> {
    // SAFETY: this function's contract is the unsafe operations' own: `index` and `edges`, as
    // the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let n = degree(nnodes, "nnodes")?;
        let idx = slice(index, n, "index")?;
        let mut prev = 0;
        for (i, &x) in idx.iter().enumerate() {
            if x < prev {
                return fail(
                    MPI_ERR_ARG,
                    format!("index[{i}] = {x} is below the one before ({prev})"),
                );
            }
            prev = x;
        }
        let nedges = prev as usize;
        // MPI_ERR_ARG rather than MPI_ERR_RANK for an edge off the graph, as MPICH.
        let e = ranks_below(slice(edges, nedges, "edges")?, n, "edge to node")
            .map_err(|e| MpiError::new(MPI_ERR_ARG, e.into_message()))?;
        Ok(Graph {
            index: idx.iter().map(|&x| x as usize).collect(),
            edges: e,
        })
    }
}

/// Copies up to `max` of `v` to `p` (if it is not NULL or one of the weight markers).
pub(crate) unsafe fn put(p: *mut c_int, max: c_int, v: impl IntoIterator<Item = c_int>) {
    // SAFETY: this function's contract is the unsafe operations' own: `p`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if p.is_null() || p as usize == MPI_UNWEIGHTED || p as usize == MPI_WEIGHTS_EMPTY {
            return;
        }
        for (i, x) in v.into_iter().take(max.max(0) as usize).enumerate() {
            *p.add(i) = x;
        }
    }
}

/// A rank argument of the graph `g`.
pub(crate) fn node(g: &Graph, rank: c_int) -> Res<usize> {
    usize::try_from(rank)
        .ok()
        .filter(|&r| r < g.index.len())
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_RANK,
                format!("rank {rank} is not a node of a graph of {}", g.index.len()),
            )
        })
}

pub(crate) fn graph(t: &Topo) -> &Graph {
    match t {
        Topo::Graph(g) => g,
        _ => unreachable!("graph_of checked the kind"),
    }
}

pub(crate) fn dist(t: &Topo) -> &DistGraph {
    match t {
        Topo::Dist(d) => d,
        _ => unreachable!("dist_of checked the kind"),
    }
}

/// A distributed graph communicator (all of `comm`'s ranks) with this process's edges.
pub(crate) fn dist_comm(comm: Handle, g: DistGraph) -> Res<Handle> {
    let n = running(|s| s.intra_comm(comm))?.size();
    topo_comm(comm, n, Topo::Dist(g))
}

/// MPI_Dist_graph_create's exchange: `edges` (source, destination, weight) given here, any
/// process's; returns this process's in- and out-edges. Each edge is told to both ends as
/// records of three ints (0 = out-edge to / 1 = in-edge from, peer, weight) by an all-to-all
/// on `comm` (collective: every member calls it in the same order).
pub(crate) unsafe fn exchange(comm: Handle, edges: &[(usize, usize, c_int)]) -> Res<DistGraph> {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        let n = running(|s| s.intra_comm(comm))?.size();
        let mut to: Vec<Vec<c_int>> = vec![Vec::new(); n];
        for &(src, dst, w) in edges {
            to[src].extend([0, dst as c_int, w]);
            to[dst].extend([1, src as c_int, w]);
        }
        let int = crate::datatype::Builtin::Int.handle();
        let counts: Vec<c_int> = to.iter().map(|v| v.len() as c_int).collect();
        let mut theirs = vec![0 as c_int; n];
        crate::coll::alltoall(
            counts.as_ptr().cast(),
            1,
            int,
            theirs.as_mut_ptr().cast(),
            1,
            int,
            comm,
            crate::coll::BLOCKING,
        )?;
        let displs = |c: &[c_int]| -> Vec<c_int> {
            c.iter()
                .scan(0, |at, &x| {
                    let d = *at;
                    *at += x;
                    Some(d)
                })
                .collect()
        };
        let (sd, rd) = (displs(&counts), displs(&theirs));
        let flat: Vec<c_int> = to.concat();
        let mut got = vec![0 as c_int; theirs.iter().map(|&x| x as usize).sum::<usize>().max(1)];
        crate::coll::alltoallv(
            flat.as_ptr().cast(),
            counts.as_ptr().into(),
            sd.as_ptr().into(),
            int,
            got.as_mut_ptr().cast(),
            theirs.as_ptr().into(),
            rd.as_ptr().into(),
            int,
            comm,
            crate::coll::BLOCKING,
        )?;
        let total: usize = theirs.iter().map(|&x| x as usize).sum();
        let mut g = DistGraph {
            sources: Vec::new(),
            destinations: Vec::new(),
            weighted: true,
        };
        for rec in got[..total].chunks_exact(3) {
            let e = (rec[1] as usize, rec[2]);
            if rec[0] == 0 {
                g.destinations.push(e);
            } else {
                g.sources.push(e);
            }
        }
        Ok(g)
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

    #[test]
    fn neighbourhoods_follow_the_standard_order() {
        let cart = Topo::Cart(Cart {
            dims: vec![3, 2],
            periods: vec![false, true],
        });
        // Rank 1 is at (0, 1): no -1 neighbour in dimension 0; both neighbours in dimension 1
        // are rank 0 (extent 2, periodic).
        let (src, dst) = cart.neighbours(1);
        assert_eq!(src, vec![MPI_PROC_NULL, 3, 0, 0]);
        assert_eq!(src, dst);
        let g = Graph {
            index: vec![2, 3, 5],
            edges: vec![1, 1, 0, 2, 0],
        };
        assert_eq!(g.neighbours(0), &[1, 1], "duplicate edges kept");
        assert_eq!(g.neighbours(2), &[2, 0], "self loops kept");
        let d = Topo::Dist(DistGraph {
            sources: vec![(3, 1), (0, 7)],
            destinations: vec![(2, 5)],
            weighted: true,
        });
        assert_eq!(d.neighbours(0), (vec![3, 0], vec![2]));
    }
}
