//! Hierarchical collectives for communicators that span several clusters (MagPIe, Kielmann et
//! al., PPoPP 1999): an intra-cluster phase, one leader per cluster across the wide-area links,
//! then an intra-cluster phase again, so that each byte crosses each inter-cluster link at most
//! once. [`inter_cluster_bytes`] counts what a set of schedules sends over each link, which is
//! how the tests hold every scheduler here to that rule (and show that the flat ones break it).
//!
//! Every function takes `clusters`, the cluster id of each rank of the communicator (any `u32`
//! ids, in any layout), and builds the schedule of `rank` by *composing the flat algorithms* of
//! [`crate::algorithms`]: each phase is a flat schedule for the ranks taking part in it (a
//! cluster's members, or the leaders), renumbered into the whole communicator and chained after
//! the phase before it. Buffer conventions are those of [`crate::algorithms`].
//!
//! Clusters are ordered by their lowest rank, members by rank. The leader of a cluster is its
//! lowest rank, except that a rooted collective (bcast, reduce, gather) uses the root as the
//! leader of the root's cluster, so the data never makes a detour.
//!
//! **Non-commutative reductions** keep rank order only when every cluster is a contiguous range
//! of ranks: then "reduce inside each cluster, then across clusters in cluster order" is the rank
//! order. For other layouts [`reduce`] and [`allreduce`] return `None` for a non-commutative
//! operation and the caller runs a flat algorithm.
//!
//! What crosses the wide area, per collective (C clusters, m bytes of payload):
//! - bcast: a binomial tree over the leaders; each leader receives m once.
//! - reduce: a tree over the leaders; each non-root leader sends m once.
//! - allreduce: recursive doubling over the leaders: at most m on each directed link.
//! - barrier: a dissemination barrier over the leaders (empty messages).
//! - gather / allgather: one message per cluster carrying all of its blocks (a ring among the
//!   leaders for allgather); each block crosses each link at most once.
//! - alltoall: aggregated as MagPIe does: one message per ordered pair of clusters, carrying
//!   every block between their members, through the leaders (which copy blocks in and out).

use crate::algorithms as flat;
use crate::{Buffer, Op, Order, Rank, Region, Schedule, ScheduleBuilder, StepId};
use std::collections::BTreeMap;

/// From this many bytes on (and 8 members), a cluster broadcasts by scatter + allgather
/// instead of a binomial tree (MPICH's thresholds, as in the flat selection).
pub const INTRA_BCAST_LONG: usize = 12288;

/// Clusters of a communicator: members of each in rank order, clusters by lowest rank.
struct Layout {
    members: Vec<Vec<Rank>>,
    /// Index into `members` of each rank's cluster.
    cluster_of: Vec<usize>,
}

impl Layout {
    fn new(clusters: &[u32]) -> Layout {
        let mut index: BTreeMap<u32, usize> = BTreeMap::new();
        let mut members: Vec<Vec<Rank>> = vec![];
        let mut cluster_of = Vec::with_capacity(clusters.len());
        for (rank, id) in clusters.iter().enumerate() {
            let c = *index.entry(*id).or_insert_with(|| {
                members.push(vec![]);
                members.len() - 1
            });
            members[c].push(rank);
            cluster_of.push(c);
        }
        Layout {
            members,
            cluster_of,
        }
    }

    fn count(&self) -> usize {
        self.members.len()
    }

    /// Whether every cluster is a range of consecutive ranks (then cluster order is rank order).
    fn contiguous(&self) -> bool {
        self.members
            .iter()
            .all(|m| m.last().is_some_and(|&l| l + 1 - m[0] == m.len()))
    }

    /// Position of `rank` in its cluster.
    fn index_in_cluster(&self, rank: Rank) -> usize {
        let m = &self.members[self.cluster_of[rank]];
        m.iter().position(|&r| r == rank).unwrap_or(0)
    }

    /// Leaders, one per cluster in cluster order: the lowest rank, or `root` in root's cluster.
    fn leaders(&self, root: Option<Rank>) -> Vec<Rank> {
        (0..self.count())
            .map(|c| match root {
                Some(r) if self.cluster_of[r] == c => r,
                _ => self.members[c][0],
            })
            .collect()
    }

    /// First position of cluster `c` when all clusters' ranks are listed in cluster order.
    fn start(&self, c: usize) -> usize {
        self.members[..c].iter().map(Vec::len).sum()
    }
}

/// Number of distinct clusters in `clusters`.
pub fn count_clusters(clusters: &[u32]) -> usize {
    Layout::new(clusters).count()
}

/// Whether every cluster of `clusters` is a contiguous range of ranks, which non-commutative
/// hierarchical reductions need.
pub fn contiguous(clusters: &[u32]) -> bool {
    Layout::new(clusters).contiguous()
}

/// Bytes the schedules of all ranks send from each cluster to each other cluster, keyed by
/// (from, to) cluster id: the load on each directed inter-cluster link.
pub fn inter_cluster_bytes(
    schedules: &[Schedule],
    clusters: &[u32],
) -> BTreeMap<(u32, u32), usize> {
    let mut load = BTreeMap::new();
    for s in schedules {
        for step in &s.steps {
            if let Op::Send { peer, region, .. } = &step.op {
                let (from, to) = (clusters[s.rank], clusters[*peer]);
                if from != to {
                    *load.entry((from, to)).or_insert(0) += region.len;
                }
            }
        }
    }
    load
}

/// Appends the flat schedule `sub`, written for rank `sub.rank` of the ranks `members`, to `b`:
/// its peers become `members[peer]`, its send and receive buffers the regions `send` and `recv`
/// of `b`'s buffers, its scratch buffers new scratch buffers. Steps without dependencies wait for
/// `after`. Returns the steps nothing else in `sub` waits for (the phase is over once they are).
fn embed(
    b: &mut ScheduleBuilder,
    sub: &Schedule,
    members: &[Rank],
    send: Region,
    recv: Region,
    after: &[StepId],
) -> Vec<StepId> {
    debug_assert!(sub.send_bytes <= send.len && sub.recv_bytes <= recv.len);
    let scratch: Vec<Buffer> = sub.scratch.iter().map(|&len| b.scratch(len)).collect();
    let map = |r: &Region| match r.buffer {
        Buffer::Send => send.sub(r.offset, r.len),
        Buffer::Recv => recv.sub(r.offset, r.len),
        Buffer::Scratch(i) => Region::new(scratch[i as usize], r.offset, r.len),
    };
    let mut ids: Vec<StepId> = Vec::with_capacity(sub.steps.len());
    let mut waited_on = vec![false; sub.steps.len()];
    for step in &sub.steps {
        let deps: Vec<StepId> = if step.deps.is_empty() {
            after.to_vec()
        } else {
            step.deps
                .iter()
                .map(|&d| {
                    waited_on[d as usize] = true;
                    ids[d as usize]
                })
                .collect()
        };
        let id = match &step.op {
            Op::Send { peer, region, .. } => b.send(members[*peer], map(region), &deps),
            Op::Recv { peer, region, .. } => b.recv(members[*peer], map(region), &deps),
            Op::RecvFirst { from, region } => {
                let peers: Vec<Rank> = from.iter().map(|&(p, _)| members[p]).collect();
                b.recv_first(&peers, map(region), &deps)
            }
            Op::Reduce { src, dst, order } => b.reduce(map(src), map(dst), *order, &deps),
            Op::Copy { src, dst } => b.copy(map(src), map(dst), &deps),
        };
        ids.push(id);
    }
    let ends: Vec<StepId> = (0..ids.len())
        .filter(|&i| !waited_on[i])
        .map(|i| ids[i])
        .collect();
    // A rank with no part in the phase is done with it at once.
    if ends.is_empty() {
        after.to_vec()
    } else {
        ends
    }
}

fn empty(buffer: Buffer) -> Region {
    Region::new(buffer, 0, 0)
}

/// Broadcast inside one cluster: binomial, or scatter + allgather for long messages.
fn intra_bcast(rank: Rank, size: usize, root: Rank, bytes: usize) -> Schedule {
    if bytes >= INTRA_BCAST_LONG && size >= 8 {
        flat::bcast_scatter_allgather(rank, size, root, bytes)
    } else {
        flat::bcast_binomial(rank, size, root, bytes)
    }
}

/// Hierarchical broadcast of `bytes` from `root`: binomial tree over the cluster leaders (the
/// root leads its own cluster), then a broadcast inside each cluster.
pub fn bcast(rank: Rank, clusters: &[u32], root: Rank, bytes: usize) -> Schedule {
    let n = clusters.len();
    let lay = Layout::new(clusters);
    let mut b = ScheduleBuilder::new(rank, n, 0, bytes);
    let data = Region::new(Buffer::Recv, 0, bytes);
    let c = lay.cluster_of[rank];
    let leaders = lay.leaders(Some(root));
    let mut after = vec![];
    if lay.count() > 1 && leaders[c] == rank {
        let sub = flat::bcast_binomial(c, lay.count(), lay.cluster_of[root], bytes);
        after = embed(&mut b, &sub, &leaders, empty(Buffer::Send), data, &[]);
    }
    let members = &lay.members[c];
    let lroot = lay.index_in_cluster(leaders[c]);
    let sub = intra_bcast(lay.index_in_cluster(rank), members.len(), lroot, bytes);
    embed(&mut b, &sub, members, empty(Buffer::Send), data, &after);
    b.finish()
}

/// Reduce of `bytes` to `root` keeping rank order for any associative operation and any root,
/// in which every other rank sends exactly once (a tree): the left part of the ranks reduces
/// towards `root - 1`, the right part towards `root`, by halving intervals. Used across the
/// leaders for non-commutative operations, where the binomial reduce would take a detour through
/// rank 0.
pub fn reduce_ordered(
    rank: Rank,
    size: usize,
    root: Rank,
    bytes: usize,
    in_place: bool,
) -> Schedule {
    let is_root = rank == root;
    let mut b = ScheduleBuilder::new(
        rank,
        size,
        if in_place && is_root { 0 } else { bytes },
        if is_root { bytes } else { 0 },
    );
    let acc = if is_root {
        Buffer::Recv
    } else {
        b.scratch(bytes)
    };
    let acc = Region::new(acc, 0, bytes);
    let tmp = Region::new(b.scratch(bytes), 0, bytes);
    let mut last = if is_root && in_place {
        vec![]
    } else {
        vec![b.copy(Region::new(Buffer::Send, 0, bytes), acc, &[])]
    };
    /// Reduces ranks [lo, hi) into `lo` (`into_lo`) or into `hi - 1`, in rank order.
    #[allow(clippy::too_many_arguments)]
    fn interval(
        b: &mut ScheduleBuilder,
        lo: Rank,
        hi: Rank,
        into_lo: bool,
        acc: Region,
        tmp: Region,
        last: &mut Vec<StepId>,
    ) {
        if hi - lo <= 1 {
            return;
        }
        let me = b.rank();
        let mid = lo + (hi - lo) / 2;
        if me < mid {
            interval(b, lo, mid, into_lo, acc, tmp, last);
        } else {
            interval(b, mid, hi, into_lo, acc, tmp, last);
        }
        // Into lo: [lo, mid) gathered at lo, [mid, hi) at mid. Into hi-1: at mid-1 and hi-1.
        let (from, to, order) = if into_lo {
            (mid, lo, Order::DstFirst)
        } else {
            (mid - 1, hi - 1, Order::SrcFirst)
        };
        if me == from {
            *last = vec![b.send(to, acc, last)];
        } else if me == to {
            let r = b.recv(from, tmp, last);
            let deps = [last.as_slice(), &[r]].concat();
            *last = vec![b.reduce(tmp, acc, order, &deps)];
        }
    }
    if rank < root {
        interval(&mut b, 0, root, false, acc, tmp, &mut last);
        if rank == root - 1 {
            b.send(root, acc, &last);
        }
    } else {
        interval(&mut b, root, size, true, acc, tmp, &mut last);
        if is_root && root > 0 {
            let r = b.recv(root - 1, tmp, &last);
            let deps = [last.as_slice(), &[r]].concat();
            b.reduce(tmp, acc, Order::SrcFirst, &deps);
        }
    }
    b.finish()
}

/// Hierarchical reduce of `bytes` to `root`: inside each cluster to its leader (the root in the
/// root's cluster), then across the leaders to the root. `None` for a non-commutative operation
/// on clusters that are not contiguous rank ranges (use a flat algorithm then).
pub fn reduce(
    rank: Rank,
    clusters: &[u32],
    root: Rank,
    bytes: usize,
    commutative: bool,
    in_place: bool,
) -> Option<Schedule> {
    let n = clusters.len();
    let lay = Layout::new(clusters);
    if !commutative && !lay.contiguous() {
        return None;
    }
    let is_root = rank == root;
    let root_in_place = in_place && is_root;
    let mut b = ScheduleBuilder::new(
        rank,
        n,
        if root_in_place { 0 } else { bytes },
        if is_root { bytes } else { 0 },
    );
    let input = Region::new(Buffer::Send, 0, if root_in_place { 0 } else { bytes });
    let c = lay.cluster_of[rank];
    let leaders = lay.leaders(Some(root));
    let is_leader = leaders[c] == rank;
    // The cluster's partial result: the root's receive buffer, scratch at other leaders.
    let partial = if is_root {
        Region::new(Buffer::Recv, 0, bytes)
    } else if is_leader {
        Region::new(b.scratch(bytes), 0, bytes)
    } else {
        empty(Buffer::Recv)
    };
    let members = &lay.members[c];
    let sub = flat::reduce_binomial(
        lay.index_in_cluster(rank),
        members.len(),
        lay.index_in_cluster(leaders[c]),
        bytes,
        commutative,
        root_in_place,
    );
    let after = embed(&mut b, &sub, members, input, partial, &[]);
    if lay.count() > 1 && is_leader {
        let (me, count, to) = (c, lay.count(), lay.cluster_of[root]);
        // Binomial where it takes no detour; the ordered tree for the rest.
        let sub = if commutative || to == 0 {
            flat::reduce_binomial(me, count, to, bytes, commutative, is_root)
        } else {
            reduce_ordered(me, count, to, bytes, is_root)
        };
        let (send, recv) = if is_root {
            (empty(Buffer::Send), partial)
        } else {
            (partial, empty(Buffer::Recv))
        };
        embed(&mut b, &sub, &leaders, send, recv, &after);
    }
    Some(b.finish())
}

/// Hierarchical allreduce: reduce inside each cluster to its lowest rank, recursive doubling
/// among those leaders (at most `bytes` on each directed inter-cluster link), broadcast inside
/// each cluster. `in_place`: the input is in the receive buffer. `None` for a non-commutative
/// operation on clusters that are not contiguous rank ranges.
pub fn allreduce(
    rank: Rank,
    clusters: &[u32],
    bytes: usize,
    commutative: bool,
    in_place: bool,
) -> Option<Schedule> {
    let n = clusters.len();
    let lay = Layout::new(clusters);
    if !commutative && !lay.contiguous() {
        return None;
    }
    let mut b = ScheduleBuilder::new(rank, n, if in_place { 0 } else { bytes }, bytes);
    let result = Region::new(Buffer::Recv, 0, bytes);
    let c = lay.cluster_of[rank];
    let members = &lay.members[c];
    let i = lay.index_in_cluster(rank);
    let is_leader = i == 0;
    // The flat reduce reads its input from its send buffer; in place, that is our receive
    // buffer, which the broadcast overwrites only after the phase (it waits for it).
    let input = if in_place && !is_leader {
        result
    } else {
        Region::new(Buffer::Send, 0, if in_place { 0 } else { bytes })
    };
    let sub = flat::reduce_binomial(
        i,
        members.len(),
        0,
        bytes,
        commutative,
        in_place && is_leader,
    );
    let recv = if is_leader {
        result
    } else {
        empty(Buffer::Recv)
    };
    let mut after = embed(&mut b, &sub, members, input, recv, &[]);
    if lay.count() > 1 && is_leader {
        let sub = flat::allreduce_recursive_doubling(c, lay.count(), bytes, true);
        after = embed(
            &mut b,
            &sub,
            &lay.leaders(None),
            empty(Buffer::Send),
            result,
            &after,
        );
    }
    let sub = intra_bcast(i, members.len(), 0, bytes);
    embed(&mut b, &sub, members, empty(Buffer::Send), result, &after);
    Some(b.finish())
}

/// Binomial fan-in of empty messages to rank 0 (a reduce tree without data, so without
/// reduction steps: a barrier has no operation to run).
fn fan_in(rank: Rank, size: usize) -> Schedule {
    let mut b = ScheduleBuilder::new(rank, size, 0, 0);
    let nothing = empty(Buffer::Recv);
    let mut children = vec![];
    let mut mask = 1;
    while mask < size {
        if rank & mask != 0 {
            b.send(rank & !mask, nothing, &children);
            break;
        }
        if rank | mask < size {
            children.push(b.recv(rank | mask, nothing, &[]));
        }
        mask <<= 1;
    }
    b.finish()
}

/// Hierarchical barrier: a fan-in tree inside each cluster, a dissemination barrier among the
/// leaders, a fan-out tree inside each cluster.
pub fn barrier(rank: Rank, clusters: &[u32]) -> Schedule {
    let n = clusters.len();
    let lay = Layout::new(clusters);
    let mut b = ScheduleBuilder::new(rank, n, 0, 0);
    let c = lay.cluster_of[rank];
    let members = &lay.members[c];
    let (i, m) = (lay.index_in_cluster(rank), members.len());
    let none = (empty(Buffer::Send), empty(Buffer::Recv));
    let fan_in = fan_in(i, m);
    let mut after = embed(&mut b, &fan_in, members, none.0, none.1, &[]);
    if lay.count() > 1 && i == 0 {
        let sub = flat::barrier_dissemination(c, lay.count());
        after = embed(&mut b, &sub, &lay.leaders(None), none.0, none.1, &after);
    }
    let fan_out = flat::bcast_binomial(i, m, 0, 0);
    embed(&mut b, &fan_out, members, none.0, none.1, &after);
    b.finish()
}

/// Gathers each member's `block` to the cluster leader, into `at` there (the cluster's blocks
/// in member order): the intra phase of gather and allgather.
fn gather_to_leader(
    b: &mut ScheduleBuilder,
    lay: &Layout,
    leader: Rank,
    block: usize,
    at: Region,
) -> Vec<StepId> {
    let rank = b.rank();
    let members = &lay.members[lay.cluster_of[rank]];
    let sub = flat::gather_linear(
        lay.index_in_cluster(rank),
        members.len(),
        lay.index_in_cluster(leader),
        block,
        false,
    );
    let recv = if rank == leader {
        at
    } else {
        empty(Buffer::Recv)
    };
    embed(
        b,
        &sub,
        members,
        Region::new(Buffer::Send, 0, block),
        recv,
        &[],
    )
}

/// Copies blocks from cluster order in `packs` to rank order in the receive buffer.
fn unpack(
    b: &mut ScheduleBuilder,
    lay: &Layout,
    block: usize,
    packs: Region,
    after: &[StepId],
) -> Vec<StepId> {
    let mut done = vec![];
    for (c, members) in lay.members.iter().enumerate() {
        for (k, &r) in members.iter().enumerate() {
            let at = (lay.start(c) + k) * block;
            let dst = Region::new(Buffer::Recv, r * block, block);
            done.push(b.copy(packs.sub(at, block), dst, after));
        }
    }
    if done.is_empty() {
        after.to_vec()
    } else {
        done
    }
}

/// Counts and displacements, in bytes, of each cluster's blocks in cluster order.
fn cluster_blocks(lay: &Layout, block: usize) -> (Vec<usize>, Vec<usize>) {
    (0..lay.count())
        .map(|c| (lay.members[c].len() * block, lay.start(c) * block))
        .unzip()
}

/// Hierarchical gather of `block` bytes per rank to `root`: each cluster gathers to its leader,
/// each leader sends its cluster's blocks to the root in one message.
pub fn gather(rank: Rank, clusters: &[u32], root: Rank, block: usize) -> Schedule {
    let n = clusters.len();
    let lay = Layout::new(clusters);
    let is_root = rank == root;
    let mut b = ScheduleBuilder::new(rank, n, block, if is_root { n * block } else { 0 });
    let c = lay.cluster_of[rank];
    let leaders = lay.leaders(Some(root));
    let is_leader = leaders[c] == rank;
    // Contiguous clusters in cluster order are rank order: the root gathers in place.
    let packs = if is_root && lay.contiguous() {
        Region::new(Buffer::Recv, 0, n * block)
    } else if is_root {
        Region::new(b.scratch(n * block), 0, n * block)
    } else if is_leader {
        let len = lay.members[c].len() * block;
        Region::new(b.scratch(len), 0, len)
    } else {
        empty(Buffer::Recv)
    };
    // The cluster's blocks: at their place among all clusters at the root, alone elsewhere.
    let own = if is_root {
        packs.sub(lay.start(c) * block, lay.members[c].len() * block)
    } else {
        packs
    };
    let mut after = gather_to_leader(&mut b, &lay, leaders[c], block, own);
    if lay.count() > 1 && is_leader {
        let (counts, displs) = cluster_blocks(&lay, block);
        let sub =
            flat::gatherv_linear(c, lay.count(), lay.cluster_of[root], &counts, &displs, true);
        let (send, recv) = if is_root {
            (empty(Buffer::Send), packs)
        } else {
            (packs, empty(Buffer::Recv))
        };
        after = embed(&mut b, &sub, &leaders, send, recv, &after);
    }
    if is_root && !lay.contiguous() {
        unpack(&mut b, &lay, block, packs, &after);
    }
    b.finish()
}

/// Hierarchical allgather of `block` bytes per rank: gather to each cluster's lowest rank, ring
/// allgather of whole clusters among the leaders, broadcast of the result inside each cluster.
pub fn allgather(rank: Rank, clusters: &[u32], block: usize) -> Schedule {
    let n = clusters.len();
    let lay = Layout::new(clusters);
    let mut b = ScheduleBuilder::new(rank, n, block, n * block);
    let c = lay.cluster_of[rank];
    let leaders = lay.leaders(None);
    let is_leader = leaders[c] == rank;
    let all = Region::new(Buffer::Recv, 0, n * block);
    let packs = if is_leader && !lay.contiguous() {
        Region::new(b.scratch(n * block), 0, n * block)
    } else {
        all
    };
    let own = packs.sub(lay.start(c) * block, lay.members[c].len() * block);
    let mut after = gather_to_leader(&mut b, &lay, leaders[c], block, own);
    if is_leader {
        if lay.count() > 1 {
            let (counts, displs) = cluster_blocks(&lay, block);
            let sub = flat::allgatherv_ring(c, lay.count(), &counts, &displs, true);
            after = embed(&mut b, &sub, &leaders, empty(Buffer::Send), packs, &after);
        }
        if !lay.contiguous() {
            after = unpack(&mut b, &lay, block, packs, &after);
        }
    }
    let members = &lay.members[c];
    let sub = intra_bcast(lay.index_in_cluster(rank), members.len(), 0, n * block);
    embed(&mut b, &sub, members, empty(Buffer::Send), all, &after);
    b.finish()
}

/// Hierarchical alltoall of `block` bytes per pair, aggregated as in MagPIe: each cluster's
/// lowest rank gathers its members' whole send buffers, sends each other leader one message with
/// every block from its cluster to theirs, and scatters what arrived to its members. One message
/// per ordered pair of clusters crosses the wide area; the price is the leaders' copies and
/// intra-cluster traffic through them.
pub fn alltoall(rank: Rank, clusters: &[u32], block: usize) -> Schedule {
    let n = clusters.len();
    let lay = Layout::new(clusters);
    let row = n * block;
    let mut b = ScheduleBuilder::new(rank, n, row, row);
    let c = lay.cluster_of[rank];
    let members = &lay.members[c];
    let (i, m) = (lay.index_in_cluster(rank), members.len());
    let leaders = lay.leaders(None);
    let send_all = Region::new(Buffer::Send, 0, row);
    if i != 0 {
        let sub = flat::gather_linear(i, m, 0, row, false);
        let after = embed(&mut b, &sub, members, send_all, empty(Buffer::Recv), &[]);
        let sub = flat::scatter_linear(i, m, 0, row, false);
        embed(
            &mut b,
            &sub,
            members,
            empty(Buffer::Send),
            Region::new(Buffer::Recv, 0, row),
            &after,
        );
        return b.finish();
    }
    // Leader. inbox: member k's send buffer at k * row.
    let inbox = Region::new(b.scratch(m * row), 0, m * row);
    let sub = flat::gather_linear(0, m, 0, row, false);
    let gathered = embed(&mut b, &sub, members, send_all, inbox, &[]);
    // out: to cluster d, for each member k here, for each member l there, block k → l.
    let count = lay.count();
    let pair = |d: usize, s: usize| lay.members[d].len() * lay.members[s].len() * block;
    let send_counts: Vec<usize> = (0..count).map(|d| pair(c, d)).collect();
    let recv_counts: Vec<usize> = (0..count).map(|s| pair(s, c)).collect();
    let displs = |counts: &[usize]| -> Vec<usize> {
        counts
            .iter()
            .scan(0, |at, &len| {
                let d = *at;
                *at += len;
                Some(d)
            })
            .collect()
    };
    let (send_displs, recv_displs) = (displs(&send_counts), displs(&recv_counts));
    let out_len: usize = send_counts.iter().sum();
    let in_len: usize = recv_counts.iter().sum();
    let out = Region::new(b.scratch(out_len), 0, out_len);
    let inn = Region::new(b.scratch(in_len), 0, in_len);
    let mut packed = vec![];
    for (d, there) in lay.members.iter().enumerate() {
        for k in 0..m {
            for (l, &dst) in there.iter().enumerate() {
                let at = send_displs[d] + (k * there.len() + l) * block;
                packed.push(b.copy(
                    inbox.sub(k * row + dst * block, block),
                    out.sub(at, block),
                    &gathered,
                ));
            }
        }
    }
    let sub = flat::alltoallv_pairwise(
        c,
        count,
        &send_counts,
        &send_displs,
        &recv_counts,
        &recv_displs,
    );
    let exchanged = embed(&mut b, &sub, &leaders, out, inn, &packed);
    // rows: member l's receive buffer at l * row, block from rank src at src * block.
    let rows = Region::new(b.scratch(m * row), 0, m * row);
    let mut assembled = vec![];
    for (s, from) in lay.members.iter().enumerate() {
        for (k, &src) in from.iter().enumerate() {
            for l in 0..m {
                let at = recv_displs[s] + (k * m + l) * block;
                assembled.push(b.copy(
                    inn.sub(at, block),
                    rows.sub(l * row + src * block, block),
                    &exchanged,
                ));
            }
        }
    }
    let sub = flat::scatter_linear(0, m, 0, row, false);
    embed(
        &mut b,
        &sub,
        members,
        rows,
        Region::new(Buffer::Recv, 0, row),
        &assembled,
    );
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpret;

    /// Sum of little-endian u64s: commutative.
    fn sum(src: &[u8], dst: &mut [u8], _: Order) {
        for (d, s) in dst.chunks_mut(8).zip(src.chunks(8)) {
            let v = u64::from_le_bytes(d.try_into().unwrap())
                .wrapping_add(u64::from_le_bytes(s.try_into().unwrap()));
            d.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Composition of affine maps mod 2^32 (8-byte elements): associative, not commutative.
    fn affine(src: &[u8], dst: &mut [u8], order: Order) {
        let split = |x: &[u8]| {
            (
                u32::from_le_bytes(x[..4].try_into().unwrap()),
                u32::from_le_bytes(x[4..].try_into().unwrap()),
            )
        };
        let then = |(a1, b1): (u32, u32), (a2, b2): (u32, u32)| {
            (a2.wrapping_mul(a1), a2.wrapping_mul(b1).wrapping_add(b2))
        };
        for (d, s) in dst.chunks_mut(8).zip(src.chunks(8)) {
            let (x, y) = (split(s), split(d));
            let (a, b) = match order {
                Order::SrcFirst => then(x, y),
                Order::DstFirst => then(y, x),
            };
            d[..4].copy_from_slice(&a.to_le_bytes());
            d[4..].copy_from_slice(&b.to_le_bytes());
        }
    }

    fn data(rank: usize, len: usize, salt: u64) -> Vec<u8> {
        (0..len)
            .map(|i| ((rank as u64 * 131 + i as u64 * 7 + salt) % 251) as u8 | 1)
            .collect()
    }

    fn fold(inputs: &[Vec<u8>], op: fn(&[u8], &mut [u8], Order)) -> Vec<u8> {
        let mut acc = inputs[0].clone();
        for x in &inputs[1..] {
            op(x, &mut acc, Order::DstFirst);
        }
        acc
    }

    /// Runs the schedules with receive buffers of `recv_len(r)` bytes starting with `init(r)`.
    fn run(
        schedules: &[Schedule],
        sends: &[Vec<u8>],
        recv_len: &dyn Fn(usize) -> usize,
        init: &dyn Fn(usize) -> Vec<u8>,
        reduce: crate::ReduceFn,
        what: &str,
    ) -> Vec<Vec<u8>> {
        let mut recvs: Vec<Vec<u8>> = (0..schedules.len())
            .map(|r| {
                let mut v = init(r);
                v.resize(recv_len(r), 0);
                v
            })
            .collect();
        interpret(schedules, sends, &mut recvs, reduce).unwrap_or_else(|e| panic!("{what}: {e}"));
        recvs
    }

    /// Cluster layouts of `n` ranks with 1 to 4 clusters: contiguous (even and uneven),
    /// round-robin, scattered, with ids that are neither dense nor ordered.
    fn layouts(n: usize) -> Vec<Vec<u32>> {
        let mut all: Vec<Vec<u32>> = vec![vec![7; n]];
        for k in 2..=4usize {
            all.push((0..n).map(|r| (r * k / n) as u32).collect());
            all.push((0..n).map(|r| (r * r * k / (n * n)) as u32 * 3).collect());
            all.push((0..n).map(|r| 40 - (r % k) as u32 * 10).collect());
            all.push(
                (0..n)
                    .map(|r| (((r as u64 * 2_654_435_761) >> 7) % k as u64) as u32)
                    .collect(),
            );
        }
        // A lone rank 0 in its own cluster, and a cluster made of the first and last rank.
        all.push((0..n).map(|r| u32::from(r > 0)).collect());
        all.push((0..n).map(|r| u32::from(r == 0 || r + 1 == n)).collect());
        all.sort();
        all.dedup();
        all
    }

    const SIZES: std::ops::RangeInclusive<usize> = 1..=17;

    #[test]
    fn bcast_delivers_the_root_buffer() {
        for n in SIZES {
            for cl in layouts(n) {
                for root in [0, n / 2, n - 1] {
                    for bytes in [0, 1, 100, INTRA_BCAST_LONG + 5] {
                        let s: Vec<Schedule> = (0..n).map(|r| bcast(r, &cl, root, bytes)).collect();
                        let expected = data(root, bytes, 3);
                        let out = run(
                            &s,
                            &vec![vec![]; n],
                            &|_| bytes,
                            &|r| if r == root { expected.clone() } else { vec![] },
                            &sum,
                            &format!("bcast {cl:?} root {root} {bytes} B"),
                        );
                        assert!(out.iter().all(|o| *o == expected), "{cl:?} root {root}");
                    }
                }
            }
        }
    }

    #[test]
    fn reduce_ordered_keeps_rank_order_for_every_root() {
        for n in SIZES {
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| data(r, 24, 5)).collect();
            let expected = fold(&inputs, affine);
            for root in 0..n {
                for in_place in [false, true] {
                    let s: Vec<Schedule> = (0..n)
                        .map(|r| reduce_ordered(r, n, root, 24, in_place))
                        .collect();
                    let out = run(
                        &s,
                        &inputs,
                        &|r| if r == root { 24 } else { 0 },
                        &|r| {
                            if in_place && r == root {
                                inputs[r].clone()
                            } else {
                                vec![]
                            }
                        },
                        &affine,
                        "reduce_ordered",
                    );
                    assert_eq!(out[root], expected, "n={n} root={root}");
                    // A tree: every rank but the root sends exactly once.
                    for (r, sch) in s.iter().enumerate() {
                        let sends = sch
                            .steps
                            .iter()
                            .filter(|st| matches!(st.op, Op::Send { .. }))
                            .count();
                        assert_eq!(sends, usize::from(r != root), "n={n} root={root} rank {r}");
                    }
                }
            }
        }
    }

    #[test]
    fn reduce_and_allreduce_match_the_sequential_fold() {
        for n in SIZES {
            for cl in layouts(n) {
                for elems in [0, 1, 5] {
                    let bytes = elems * 8;
                    let inputs: Vec<Vec<u8>> = (0..n).map(|r| data(r, bytes, 11)).collect();
                    for (op, commutative) in
                        [(sum as fn(&[u8], &mut [u8], Order), true), (affine, false)]
                    {
                        let expected = fold(&inputs, op);
                        let refused = !commutative && !contiguous(&cl);
                        for in_place in [false, true] {
                            let what = format!(
                                "{cl:?} {bytes} B commutative={commutative} in_place={in_place}"
                            );
                            for root in [0, n / 2, n - 1] {
                                let s: Option<Vec<Schedule>> = (0..n)
                                    .map(|r| reduce(r, &cl, root, bytes, commutative, in_place))
                                    .collect();
                                let Some(s) = s else {
                                    assert!(refused, "reduce refused {what}");
                                    continue;
                                };
                                assert!(!refused, "reduce accepted {what}");
                                let out = run(
                                    &s,
                                    &inputs,
                                    &|r| if r == root { bytes } else { 0 },
                                    &|r| {
                                        if in_place && r == root {
                                            inputs[r].clone()
                                        } else {
                                            vec![]
                                        }
                                    },
                                    &op,
                                    &what,
                                );
                                assert_eq!(out[root], expected, "reduce root {root} {what}");
                            }
                            let s: Option<Vec<Schedule>> = (0..n)
                                .map(|r| allreduce(r, &cl, bytes, commutative, in_place))
                                .collect();
                            let Some(s) = s else {
                                assert!(refused, "allreduce refused {what}");
                                continue;
                            };
                            assert!(!refused, "allreduce accepted {what}");
                            let out = run(
                                &s,
                                &if in_place {
                                    vec![vec![]; n]
                                } else {
                                    inputs.clone()
                                },
                                &|_| bytes,
                                &|r| if in_place { inputs[r].clone() } else { vec![] },
                                &op,
                                &what,
                            );
                            assert!(out.iter().all(|o| *o == expected), "allreduce {what}");
                        }
                    }
                }
            }
        }
    }

    /// Whether every rank's last step happens after every rank's first: for each step, the set
    /// of ranks known to have started, through dependencies and messages, must be all of them
    /// by the time each rank finishes.
    fn is_barrier(schedules: &[Schedule]) -> bool {
        let n = schedules.len();
        let sends: BTreeMap<(Rank, Rank, u32), (Rank, usize)> = schedules
            .iter()
            .flat_map(|s| {
                s.steps
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, st)| match st.op {
                        Op::Send { peer, seq, .. } => Some(((s.rank, peer, seq), (s.rank, i))),
                        _ => None,
                    })
            })
            .collect();
        let mut know: Vec<Vec<u128>> = schedules
            .iter()
            .map(|s| vec![1u128 << s.rank; s.steps.len()])
            .collect();
        loop {
            let mut changed = false;
            for (r, s) in schedules.iter().enumerate() {
                for (i, st) in s.steps.iter().enumerate() {
                    let mut k = know[r][i];
                    for &d in &st.deps {
                        k |= know[r][d as usize];
                    }
                    if let Op::Recv { peer, seq, .. } = st.op {
                        let (pr, pi) = sends[&(peer, r, seq)];
                        k |= know[pr][pi];
                    }
                    if k != know[r][i] {
                        know[r][i] = k;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let everyone = if n == 128 {
            u128::MAX
        } else {
            (1u128 << n) - 1
        };
        (0..n).all(|r| {
            let k = know[r].iter().fold(1u128 << r, |a, &b| a | b);
            k == everyone
        })
    }

    #[test]
    fn barrier_waits_for_everyone() {
        for n in SIZES {
            for cl in layouts(n) {
                let s: Vec<Schedule> = (0..n).map(|r| barrier(r, &cl)).collect();
                run(&s, &vec![vec![]; n], &|_| 0, &|_| vec![], &sum, "barrier");
                // Executors run a barrier without an operation: only messages.
                assert!(s
                    .iter()
                    .flat_map(|s| &s.steps)
                    .all(|st| matches!(st.op, Op::Send { .. } | Op::Recv { .. })));
                assert!(is_barrier(&s), "{cl:?}");
            }
            let flat_barrier: Vec<Schedule> =
                (0..n).map(|r| flat::barrier_dissemination(r, n)).collect();
            assert!(is_barrier(&flat_barrier));
            // The check can fail: a fan-out alone lets the root leave first.
            let fan_out: Vec<Schedule> = (0..n).map(|r| flat::bcast_binomial(r, n, 0, 0)).collect();
            assert_eq!(is_barrier(&fan_out), n == 1);
        }
    }

    #[test]
    fn gathers_and_alltoall_place_blocks_by_rank() {
        for n in SIZES {
            for cl in layouts(n) {
                for block in [0, 1, 8, 13] {
                    let blocks: Vec<Vec<u8>> = (0..n).map(|r| data(r, block, 1)).collect();
                    let all: Vec<u8> = blocks.concat();
                    for root in [0, n / 2, n - 1] {
                        let s: Vec<Schedule> =
                            (0..n).map(|r| gather(r, &cl, root, block)).collect();
                        let out = run(
                            &s,
                            &blocks,
                            &|r| if r == root { n * block } else { 0 },
                            &|_| vec![],
                            &sum,
                            "gather",
                        );
                        assert_eq!(out[root], all, "gather {cl:?} root {root} block {block}");
                    }
                    let s: Vec<Schedule> = (0..n).map(|r| allgather(r, &cl, block)).collect();
                    let out = run(&s, &blocks, &|_| n * block, &|_| vec![], &sum, "allgather");
                    assert!(
                        out.iter().all(|o| *o == all),
                        "allgather {cl:?} block {block}"
                    );
                    let sends: Vec<Vec<u8>> = (0..n)
                        .map(|r| (0..n).flat_map(|j| data(r * n + j, block, 2)).collect())
                        .collect();
                    let s: Vec<Schedule> = (0..n).map(|r| alltoall(r, &cl, block)).collect();
                    let out = run(&s, &sends, &|_| n * block, &|_| vec![], &sum, "alltoall");
                    for (r, o) in out.iter().enumerate() {
                        let expected: Vec<u8> =
                            (0..n).flat_map(|i| data(i * n + r, block, 2)).collect();
                        assert_eq!(*o, expected, "alltoall {cl:?} block {block} rank {r}");
                    }
                }
            }
        }
    }

    /// The largest load of any directed inter-cluster link.
    fn worst_link(schedules: &[Schedule], clusters: &[u32]) -> usize {
        inter_cluster_bytes(schedules, clusters)
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Messages sent across clusters, per directed link.
    fn inter_cluster_messages(
        schedules: &[Schedule],
        clusters: &[u32],
    ) -> BTreeMap<(u32, u32), usize> {
        let mut count = BTreeMap::new();
        for s in schedules {
            for st in &s.steps {
                if let Op::Send { peer, .. } = st.op {
                    if clusters[s.rank] != clusters[peer] {
                        *count.entry((clusters[s.rank], clusters[peer])).or_insert(0) += 1;
                    }
                }
            }
        }
        count
    }

    #[test]
    fn each_byte_crosses_each_inter_cluster_link_at_most_once() {
        let m = 64;
        for n in 2..=17 {
            for cl in layouts(n).into_iter().filter(|cl| count_clusters(cl) > 1) {
                let lay = Layout::new(&cl);
                let sizes: BTreeMap<u32, usize> = lay
                    .members
                    .iter()
                    .map(|mem| (cl[mem[0]], mem.len()))
                    .collect();
                for root in [0, n / 2, n - 1] {
                    let s: Vec<Schedule> = (0..n).map(|r| bcast(r, &cl, root, m)).collect();
                    assert!(worst_link(&s, &cl) <= m, "bcast {cl:?} root {root}");
                    // Each other cluster receives the data exactly once.
                    let total: usize = inter_cluster_bytes(&s, &cl).values().sum();
                    assert_eq!(total, (lay.count() - 1) * m, "bcast {cl:?}");
                    let s: Vec<Schedule> = (0..n)
                        .map(|r| reduce(r, &cl, root, m, true, false).unwrap())
                        .collect();
                    assert!(worst_link(&s, &cl) <= m, "reduce {cl:?} root {root}");
                    let total: usize = inter_cluster_bytes(&s, &cl).values().sum();
                    assert_eq!(total, (lay.count() - 1) * m, "reduce {cl:?}");
                    if contiguous(&cl) {
                        let s: Vec<Schedule> = (0..n)
                            .map(|r| reduce(r, &cl, root, m, false, false).unwrap())
                            .collect();
                        assert!(
                            worst_link(&s, &cl) <= m,
                            "ordered reduce {cl:?} root {root}"
                        );
                    }
                    // Gather: each cluster's blocks travel once, to the root's cluster.
                    let s: Vec<Schedule> = (0..n).map(|r| gather(r, &cl, root, m)).collect();
                    let to_root = cl[root];
                    for (&(from, to), &load) in &inter_cluster_bytes(&s, &cl) {
                        assert_eq!(to, to_root, "gather {cl:?}");
                        assert_eq!(load, sizes[&from] * m, "gather {cl:?}");
                    }
                }
                for commutative in [true, false] {
                    if let Some(s) = (0..n)
                        .map(|r| allreduce(r, &cl, m, commutative, false))
                        .collect::<Option<Vec<Schedule>>>()
                    {
                        assert!(worst_link(&s, &cl) <= m, "allreduce {cl:?}");
                    }
                }
                let s: Vec<Schedule> = (0..n).map(|r| allgather(r, &cl, m)).collect();
                assert!(worst_link(&s, &cl) <= n * m, "allgather {cl:?}");
                // Alltoall, aggregated: one message per ordered pair of clusters, carrying
                // exactly the blocks between their members.
                let s: Vec<Schedule> = (0..n).map(|r| alltoall(r, &cl, m)).collect();
                let messages = inter_cluster_messages(&s, &cl);
                for (&(from, to), &load) in &inter_cluster_bytes(&s, &cl) {
                    assert_eq!(load, sizes[&from] * sizes[&to] * m, "alltoall {cl:?}");
                    assert_eq!(messages[&(from, to)], 1, "alltoall {cl:?}");
                }
                assert_eq!(messages.len(), lay.count() * (lay.count() - 1));
                // Barrier: only leaders talk across, ⌈log2 C⌉ messages per leader.
                let s: Vec<Schedule> = (0..n).map(|r| barrier(r, &cl)).collect();
                let rounds = lay.count().next_power_of_two().trailing_zeros() as usize;
                let sent: usize = inter_cluster_messages(&s, &cl).values().sum();
                assert_eq!(sent, lay.count() * rounds, "barrier {cl:?}");
            }
        }
    }

    #[test]
    fn flat_algorithms_break_the_rule_on_the_same_layouts() {
        let m = 64;
        for cl in [
            vec![0, 0, 0, 1, 1, 2],
            vec![0, 1, 0, 1, 0, 1, 0, 1],
            vec![0, 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 3],
        ] {
            let n = cl.len();
            let flat_bcast: Vec<Schedule> =
                (0..n).map(|r| flat::bcast_binomial(r, n, 0, m)).collect();
            let flat_reduce: Vec<Schedule> = (0..n)
                .map(|r| flat::reduce_binomial(r, n, 0, m, true, false))
                .collect();
            let flat_allreduce: Vec<Schedule> = (0..n)
                .map(|r| flat::allreduce_recursive_doubling(r, n, m, false))
                .collect();
            for (what, s) in [
                ("bcast", flat_bcast),
                ("reduce", flat_reduce),
                ("allreduce", flat_allreduce),
            ] {
                assert!(
                    worst_link(&s, &cl) > m,
                    "flat {what} keeps the rule on {cl:?}"
                );
            }
            let hier_bcast: Vec<Schedule> = (0..n).map(|r| bcast(r, &cl, 0, m)).collect();
            assert!(worst_link(&hier_bcast, &cl) <= m);
        }
    }
}
