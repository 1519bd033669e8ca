//! Broadcast schedulers for heterogeneous networks: they read a cost model (latency and
//! bandwidth per ordered pair of ranks) and build a broadcast tree — or, for TTCC, two — then
//! turn it into the per-rank [`Schedule`]s of an `MPI_Bcast` (data in [`Buffer::Recv`] on every
//! rank, as in [`algorithms::bcast_binomial`](crate::algorithms::bcast_binomial)).
//!
//! # The model and the greedy rules
//! Sending `m` bytes from `i` to `j` takes `c(i, j) = L[i][j] + m / B[i][j]` seconds, during which
//! the sender sends nothing else (one send at a time). The greedy schedulers of Bhat, Raghavendra
//! and Prasanna ("Efficient collective communication in distributed heterogeneous systems",
//! ICDCS 1999) grow the set `A` of ranks that hold the data, one transfer at a time. `R[i]` is the
//! time rank `i ∈ A` is free to send again (the time it got the data, then the end of its last
//! send). Each step picks one sender `i ∈ A` and one receiver `j ∈ B` (the rest), then sets
//! `R[j] = R[i] + c(i, j)` and `R[i] = R[j]`:
//!
//! - **FNF** (fastest node first, Banikazemi et al. 1998, as restated by Bhat et al.): the sender is
//!   the rank of `A` that is free first; the receiver is the "fastest" rank of `B`. With a
//!   per-pair matrix a rank has no single speed; we take the mean of its outgoing costs
//!   `mean_k c(j, k)` (the rank that will forward fastest on average).
//! - **FEF** (fastest edge first): the pair with the smallest `c(i, j)`, ignoring `R`.
//! - **ECEF** (earliest completing edge first): the pair with the smallest `R[i] + c(i, j)`.
//! - **Look-ahead** (ECEF with look-ahead): the pair with the smallest
//!   `R[i] + c(i, j) + F[j]`, where `F[j] = min_{k ∈ B, k ≠ j} c(j, k)` is how soon `j` could pass
//!   the data on (0 when `j` is the last rank of `B`).
//!
//! Ties go to the lowest sender, then the lowest receiver, so every scheduler is deterministic.
//! A rank's sends happen in the order the greedy loop chose them.
//!
//! **TTCC** (Cha et al., "Two-Tree Collective Communication in Grid Computing Systems"): tree T0
//! by ECEF; a redundant tree T1 by ECEF, run again from the root over the edges not in T0 (an edge
//! `{i, j}` of T0 is excluded in both directions, so a rank's two parents differ). Every rank
//! but the root receives with [`Op::RecvFirst`](crate::Op::RecvFirst) from its T0 and T1 parents:
//! the first copy wins (an executor may add a decision time α), and it forwards on its T0 edges
//! before its T1 edges. T1 is built on its own (its `R` starts at 0), as the paper describes;
//! ranks that T1 cannot reach keep their T0 parent only.
//!
//! # Cost of building
//! FEF and ECEF keep, per sender, its cheapest edge into `B` and a heap of senders; an entry is
//! refreshed (one scan of `B`) only when it is popped stale, so building is about `O(n²)` cost
//! evaluations: 10 000 ranks in about a second. Look-ahead scans all pairs each step, `O(n³)`:
//! fine up to a few hundred ranks. FNF is `O(n²)` for the speeds.
//!
//! # Example
//! ```
//! use ferry_sched::hetero::{BcastScheduler, CostMatrix, Ecef};
//! // 3 ranks, 10 µs and 100 MB/s everywhere, except a slow link 0 ↔ 2.
//! let mut cost = CostMatrix::uniform(3, 10e-6, 100e6);
//! cost.set(0, 2, 1e-3, 1e6);
//! cost.set(2, 0, 1e-3, 1e6);
//! let plan = Ecef.plan(&cost, 0, 1 << 20);
//! assert_eq!(plan.parents[2], vec![1]); // 2 gets the data through 1, not over the slow link
//! let schedules = plan.schedules(1 << 20);
//! assert_eq!(schedules.len(), 3);
//! ```

use crate::{Buffer, Rank, Region, Schedule, ScheduleBuilder, StepId};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

/// Latency and bandwidth between ranks: an open set (dense matrices, cluster models, forecasts).
pub trait CostModel {
    /// Ranks covered.
    fn size(&self) -> usize;
    /// Seconds from the start of a send on `from` to the first byte at `to`.
    fn latency(&self, from: Rank, to: Rank) -> f64;
    /// Bytes per second from `from` to `to`.
    fn bandwidth(&self, from: Rank, to: Rank) -> f64;
    /// Seconds to send `bytes` from `from` to `to`: latency + bytes / bandwidth (0 to oneself).
    fn time(&self, from: Rank, to: Rank, bytes: usize) -> f64 {
        if from == to {
            return 0.0;
        }
        let bw = self.bandwidth(from, to);
        // bytes / ∞ = 0, but 0 / ∞ is fine too; only a zero bandwidth with zero bytes is NaN.
        let transfer = if bytes == 0 { 0.0 } else { bytes as f64 / bw };
        self.latency(from, to) + transfer
    }
}

/// A dense cost model: latency and bandwidth for every ordered pair.
#[derive(Debug, Clone, PartialEq)]
pub struct CostMatrix {
    n: usize,
    latency: Vec<f64>,
    bandwidth: Vec<f64>,
}

impl CostMatrix {
    /// `n` ranks, every pair with the same latency (s) and bandwidth (bytes/s).
    pub fn uniform(n: usize, latency: f64, bandwidth: f64) -> CostMatrix {
        CostMatrix::from_fn(n, |_, _| (latency, bandwidth))
    }

    /// `n` ranks, pair `(i, j)` with `f(i, j) = (latency, bandwidth)`; `f` is called for `i ≠ j`
    /// only, in row-major order.
    pub fn from_fn(n: usize, mut f: impl FnMut(Rank, Rank) -> (f64, f64)) -> CostMatrix {
        let mut latency = vec![0.0; n * n];
        let mut bandwidth = vec![f64::INFINITY; n * n];
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    (latency[i * n + j], bandwidth[i * n + j]) = f(i, j);
                }
            }
        }
        CostMatrix {
            n,
            latency,
            bandwidth,
        }
    }

    /// A dense copy of any cost model.
    pub fn from_model(model: &dyn CostModel) -> CostMatrix {
        CostMatrix::from_fn(model.size(), |i, j| {
            (model.latency(i, j), model.bandwidth(i, j))
        })
    }

    /// Sets the latency (s) and bandwidth (bytes/s) from `from` to `to`.
    pub fn set(&mut self, from: Rank, to: Rank, latency: f64, bandwidth: f64) {
        self.latency[from * self.n + to] = latency;
        self.bandwidth[from * self.n + to] = bandwidth;
    }
}

impl CostModel for CostMatrix {
    fn size(&self) -> usize {
        self.n
    }
    fn latency(&self, from: Rank, to: Rank) -> f64 {
        self.latency[from * self.n + to]
    }
    fn bandwidth(&self, from: Rank, to: Rank) -> f64 {
        self.bandwidth[from * self.n + to]
    }
}

/// A broadcast as trees: who each rank receives from and whom it sends to, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct BcastPlan {
    /// The rank that has the data first.
    pub root: Rank,
    /// Per rank, the ranks that send it the data: the primary (T0) parent first, then redundant
    /// ones. Empty for the root and for ranks the plan cannot reach.
    pub parents: Vec<Vec<Rank>>,
    /// Per rank, the ranks it sends to, in sending order.
    pub children: Vec<Vec<Rank>>,
    /// Per rank, the time the data arrives through the primary tree as the scheduler predicted it
    /// on the cost model it was given (the root: 0; unreached ranks: ∞).
    pub predicted: Vec<f64>,
    /// A rank starts its next send only once the previous one is done, as the cost model
    /// assumes; false for the binomial baseline, which sends to all its children at once like
    /// [`algorithms::bcast_binomial`](crate::algorithms::bcast_binomial).
    pub one_send_at_a_time: bool,
}

impl BcastPlan {
    /// Ranks.
    pub fn size(&self) -> usize {
        self.parents.len()
    }

    /// The predicted completion: the latest predicted arrival.
    pub fn predicted_completion(&self) -> f64 {
        self.predicted.iter().copied().fold(0.0, f64::max)
    }

    /// Depth of each rank in the primary tree (root 0; unreached ranks `usize::MAX`).
    pub fn depths(&self) -> Vec<usize> {
        let mut depth = vec![usize::MAX; self.size()];
        depth[self.root] = 0;
        let mut queue = VecDeque::from([self.root]);
        while let Some(i) = queue.pop_front() {
            for &c in &self.children[i] {
                if self.parents[c].first() == Some(&i) && depth[c] == usize::MAX {
                    depth[c] = depth[i] + 1;
                    queue.push_back(c);
                }
            }
        }
        depth
    }

    /// The schedule of `rank` for a broadcast of `bytes`: receive (the first of the copies, if
    /// several parents), then send to each child in order: one after the other when
    /// [`BcastPlan::one_send_at_a_time`], as the cost model assumes (started together, the sends
    /// share the node's link, and all arrive late instead of the first ones early).
    pub fn schedule(&self, rank: Rank, bytes: usize) -> Schedule {
        let mut b = ScheduleBuilder::new(rank, self.size(), 0, bytes);
        let data = Region::new(Buffer::Recv, 0, bytes);
        let mut after: Vec<StepId> = match self.parents[rank].as_slice() {
            [] => vec![],
            [p] => vec![b.recv(*p, data, &[])],
            parents => vec![b.recv_first(parents, data, &[])],
        };
        let got = after.clone();
        for &c in &self.children[rank] {
            let send = b.send(c, data, &after);
            if self.one_send_at_a_time {
                after = vec![send];
            } else {
                after.clone_from(&got);
            }
        }
        b.finish()
    }

    /// The schedules of all ranks (index = rank).
    pub fn schedules(&self, bytes: usize) -> Vec<Schedule> {
        (0..self.size()).map(|r| self.schedule(r, bytes)).collect()
    }
}

/// Builds a broadcast plan from a cost model. Implementations are deterministic.
pub trait BcastScheduler {
    /// Short lower-case name (`"ecef"`), as used on the command line.
    fn name(&self) -> &'static str;

    /// The plan for broadcasting `bytes` from `root`, built from `cost`.
    fn plan(&self, cost: &dyn CostModel, root: Rank, bytes: usize) -> BcastPlan;

    /// The per-rank schedules (index = rank) of that plan.
    fn schedules(&self, cost: &dyn CostModel, root: Rank, bytes: usize) -> Vec<Schedule> {
        self.plan(cost, root, bytes).schedules(bytes)
    }
}

/// Fastest node first (see the module doc for the per-pair definition of "fastest").
#[derive(Debug, Clone, Copy, Default)]
pub struct Fnf;
/// Fastest edge first.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fef;
/// Earliest completing edge first.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ecef;
/// ECEF with look-ahead.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lookahead;
/// Two-tree collective communication: ECEF tree plus a redundant ECEF tree on the other edges.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ttcc;
/// The binomial tree of [`algorithms::bcast_binomial`](crate::algorithms::bcast_binomial),
/// blind to costs (a baseline).
#[derive(Debug, Clone, Copy, Default)]
pub struct Binomial;

/// Names accepted by [`scheduler`].
pub const SCHEDULERS: [&str; 6] = ["binomial", "fnf", "fef", "ecef", "lookahead", "ttcc"];

/// The scheduler called `name` (one of [`SCHEDULERS`]).
pub fn scheduler(name: &str) -> Option<Box<dyn BcastScheduler + Send + Sync>> {
    Some(match name {
        "binomial" => Box::new(Binomial),
        "fnf" => Box::new(Fnf),
        "fef" => Box::new(Fef),
        "ecef" => Box::new(Ecef),
        "lookahead" => Box::new(Lookahead),
        "ttcc" => Box::new(Ttcc),
        _ => return None,
    })
}

/// One tree: parent, children in sending order, predicted arrival.
struct Tree {
    parent: Vec<Option<Rank>>,
    children: Vec<Vec<Rank>>,
    arrival: Vec<f64>,
}

impl Tree {
    fn new(n: usize, root: Rank) -> Tree {
        let mut arrival = vec![f64::INFINITY; n];
        arrival[root] = 0.0;
        Tree {
            parent: vec![None; n],
            children: vec![vec![]; n],
            arrival,
        }
    }

    fn add(&mut self, i: Rank, j: Rank, at: f64) {
        self.parent[j] = Some(i);
        self.children[i].push(j);
        self.arrival[j] = at;
    }

    fn into_plan(self, root: Rank) -> BcastPlan {
        BcastPlan {
            root,
            parents: self
                .parent
                .iter()
                .map(|p| p.iter().copied().collect())
                .collect(),
            children: self.children,
            predicted: self.arrival,
            one_send_at_a_time: true,
        }
    }
}

/// An f64 ordered by `total_cmp`, for heaps.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Key(f64);
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The set B of ranks without the data, with O(1) removal and a scan in a fixed order.
struct Pending {
    list: Vec<Rank>,
    pos: Vec<usize>,
}

impl Pending {
    fn all_but(n: usize, root: Rank) -> Pending {
        let list: Vec<Rank> = (0..n).filter(|&j| j != root).collect();
        let mut pos = vec![usize::MAX; n];
        for (k, &j) in list.iter().enumerate() {
            pos[j] = k;
        }
        Pending { list, pos }
    }
    fn contains(&self, j: Rank) -> bool {
        self.pos[j] != usize::MAX
    }
    fn remove(&mut self, j: Rank) {
        let k = self.pos[j];
        self.list.swap_remove(k);
        if let Some(&moved) = self.list.get(k) {
            self.pos[moved] = k;
        }
        self.pos[j] = usize::MAX;
    }
}

/// FEF (`use_ready = false`) or ECEF (`true`) over the edges where `cost` is finite.
fn greedy(n: usize, root: Rank, cost: impl Fn(Rank, Rank) -> f64, use_ready: bool) -> Tree {
    let mut tree = Tree::new(n, root);
    let mut pending = Pending::all_but(n, root);
    let mut ready = vec![0.0f64; n];
    let mut version = vec![0u32; n];
    // The cheapest finite edge from i into B: (cost, receiver), lowest receiver on ties.
    let best = |i: Rank, pending: &Pending| -> Option<(f64, Rank)> {
        let mut found: Option<(f64, Rank)> = None;
        for &j in &pending.list {
            let c = cost(i, j);
            if c.is_finite() && found.is_none_or(|(fc, fj)| c < fc || (c == fc && j < fj)) {
                found = Some((c, j));
            }
        }
        found
    };
    // Entries (key, sender, receiver, edge cost, sender version); stale ones are refreshed on pop.
    type Entry = Reverse<(Key, Rank, Rank, Key, u32)>;
    let mut heap: BinaryHeap<Entry> = BinaryHeap::new();
    let push = |heap: &mut BinaryHeap<Entry>, i: Rank, ready: f64, v: u32, pending: &Pending| {
        if let Some((c, j)) = best(i, pending) {
            let key = if use_ready { ready + c } else { c };
            heap.push(Reverse((Key(key), i, j, Key(c), v)));
        }
    };
    push(&mut heap, root, 0.0, 0, &pending);
    while let Some(Reverse((_, i, j, Key(c), v))) = heap.pop() {
        if pending.list.is_empty() {
            break;
        }
        if v != version[i] {
            continue;
        }
        if !pending.contains(j) {
            push(&mut heap, i, ready[i], v, &pending);
            continue;
        }
        let at = ready[i] + c;
        tree.add(i, j, at);
        pending.remove(j);
        ready[i] = at;
        ready[j] = at;
        version[i] += 1;
        push(&mut heap, i, at, version[i], &pending);
        push(&mut heap, j, at, version[j], &pending);
    }
    tree
}

/// ECEF with look-ahead, by full scans (O(n³)).
fn lookahead(n: usize, root: Rank, cost: impl Fn(Rank, Rank) -> f64) -> Tree {
    let mut tree = Tree::new(n, root);
    let mut pending = Pending::all_but(n, root);
    let mut holders = vec![root];
    let mut ready = vec![0.0f64; n];
    // F[j] and the rank it was taken from; recomputed when that rank leaves B.
    let mut ahead: Vec<(f64, Rank)> = vec![(0.0, usize::MAX); n];
    let refresh = |j: Rank, pending: &Pending| -> (f64, Rank) {
        pending
            .list
            .iter()
            .filter(|&&k| k != j)
            .map(|&k| (cost(j, k), k))
            .fold((f64::INFINITY, usize::MAX), |a, b| {
                if b.0 < a.0 || (b.0 == a.0 && b.1 < a.1) {
                    b
                } else {
                    a
                }
            })
    };
    for &j in &pending.list {
        ahead[j] = refresh(j, &pending);
    }
    while !pending.list.is_empty() {
        let mut chosen: Option<(f64, Rank, Rank, f64)> = None;
        for &i in &holders {
            for &j in &pending.list {
                let c = cost(i, j);
                if !c.is_finite() {
                    continue;
                }
                let f = if pending.list.len() == 1 {
                    0.0
                } else {
                    ahead[j].0
                };
                let key = ready[i] + c + if f.is_finite() { f } else { 0.0 };
                let better =
                    chosen.is_none_or(|(k, ci, cj, _)| key < k || (key == k && (i, j) < (ci, cj)));
                if better {
                    chosen = Some((key, i, j, c));
                }
            }
        }
        let Some((_, i, j, c)) = chosen else { break };
        let at = ready[i] + c;
        tree.add(i, j, at);
        pending.remove(j);
        holders.push(j);
        ready[i] = at;
        ready[j] = at;
        for &k in &pending.list {
            if ahead[k].1 == j {
                ahead[k] = refresh(k, &pending);
            }
        }
    }
    tree
}

impl BcastScheduler for Fef {
    fn name(&self) -> &'static str {
        "fef"
    }
    fn plan(&self, cost: &dyn CostModel, root: Rank, bytes: usize) -> BcastPlan {
        greedy(cost.size(), root, |i, j| cost.time(i, j, bytes), false).into_plan(root)
    }
}

impl BcastScheduler for Ecef {
    fn name(&self) -> &'static str {
        "ecef"
    }
    fn plan(&self, cost: &dyn CostModel, root: Rank, bytes: usize) -> BcastPlan {
        greedy(cost.size(), root, |i, j| cost.time(i, j, bytes), true).into_plan(root)
    }
}

impl BcastScheduler for Lookahead {
    fn name(&self) -> &'static str {
        "lookahead"
    }
    fn plan(&self, cost: &dyn CostModel, root: Rank, bytes: usize) -> BcastPlan {
        lookahead(cost.size(), root, |i, j| cost.time(i, j, bytes)).into_plan(root)
    }
}

impl BcastScheduler for Fnf {
    fn name(&self) -> &'static str {
        "fnf"
    }
    fn plan(&self, cost: &dyn CostModel, root: Rank, bytes: usize) -> BcastPlan {
        let n = cost.size();
        let mut tree = Tree::new(n, root);
        let speed = |j: Rank| -> f64 {
            if n < 2 {
                return 0.0;
            }
            (0..n)
                .filter(|&k| k != j)
                .map(|k| cost.time(j, k, bytes))
                .sum::<f64>()
                / (n - 1) as f64
        };
        let mut order: Vec<(Key, Rank)> = (0..n)
            .filter(|&j| j != root)
            .map(|j| (Key(speed(j)), j))
            .collect();
        order.sort();
        let mut free: BinaryHeap<Reverse<(Key, Rank)>> =
            BinaryHeap::from([Reverse((Key(0.0), root))]);
        for (_, j) in order {
            let Some(Reverse((Key(ready), i))) = free.pop() else {
                break;
            };
            let at = ready + cost.time(i, j, bytes);
            tree.add(i, j, at);
            free.push(Reverse((Key(at), i)));
            free.push(Reverse((Key(at), j)));
        }
        tree.into_plan(root)
    }
}

impl BcastScheduler for Ttcc {
    fn name(&self) -> &'static str {
        "ttcc"
    }
    fn plan(&self, cost: &dyn CostModel, root: Rank, bytes: usize) -> BcastPlan {
        let n = cost.size();
        let t0 = greedy(n, root, |i, j| cost.time(i, j, bytes), true);
        let in_t0 = |i: Rank, j: Rank| t0.parent[j] == Some(i) || t0.parent[i] == Some(j);
        let t1 = greedy(
            n,
            root,
            |i, j| {
                if in_t0(i, j) {
                    f64::INFINITY
                } else {
                    cost.time(i, j, bytes)
                }
            },
            true,
        );
        BcastPlan {
            root,
            parents: (0..n)
                .map(|j| t0.parent[j].iter().chain(&t1.parent[j]).copied().collect())
                .collect(),
            children: (0..n)
                .map(|i| {
                    t0.children[i]
                        .iter()
                        .chain(&t1.children[i])
                        .copied()
                        .collect()
                })
                .collect(),
            predicted: t0.arrival,
            one_send_at_a_time: true,
        }
    }
}

impl BcastScheduler for Binomial {
    fn name(&self) -> &'static str {
        "binomial"
    }
    fn plan(&self, cost: &dyn CostModel, root: Rank, bytes: usize) -> BcastPlan {
        let n = cost.size();
        let abs = |r: usize| (r + root) % n;
        let mut tree = Tree::new(n, root);
        // Relative rank r sends to r + mask for each mask below its lowest set bit, largest first
        // (the order of algorithms::bcast_binomial); parents come before children in this BFS.
        let mut queue = VecDeque::from([0usize]);
        let mut ready = vec![0.0f64; n];
        while let Some(rel) = queue.pop_front() {
            let mut mask = if rel == 0 {
                n.next_power_of_two()
            } else {
                rel & rel.wrapping_neg()
            };
            mask >>= 1;
            while mask > 0 {
                if rel + mask < n {
                    let (i, j) = (abs(rel), abs(rel + mask));
                    let at = ready[i] + cost.time(i, j, bytes);
                    ready[i] = at;
                    ready[j] = at;
                    tree.add(i, j, at);
                    queue.push_back(rel + mask);
                }
                mask >>= 1;
            }
        }
        BcastPlan {
            one_send_at_a_time: false,
            ..tree.into_plan(root)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{algorithms, interpret};

    /// A small deterministic generator for test matrices (xorshift64*).
    struct Gen(u64);
    impl Gen {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
        }
        fn range(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * self.next()
        }
    }

    fn random_matrix(n: usize, seed: u64) -> CostMatrix {
        let mut g = Gen(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        CostMatrix::from_fn(n, |_, _| (g.range(10e-6, 1e-3), g.range(10e3, 200e6)))
    }

    fn all() -> Vec<Box<dyn BcastScheduler + Send + Sync>> {
        SCHEDULERS.iter().map(|s| scheduler(s).unwrap()).collect()
    }

    fn check_delivers(schedules: &[Schedule], bytes: usize, root: Rank) {
        let n = schedules.len();
        for s in schedules {
            s.validate().unwrap();
        }
        let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + root) as u8).collect();
        let sends = vec![vec![]; n];
        let mut recvs: Vec<Vec<u8>> = (0..n)
            .map(|r| {
                if r == root {
                    data.clone()
                } else {
                    vec![0xee; bytes]
                }
            })
            .collect();
        interpret(schedules, &sends, &mut recvs, &|_, _, _| {}).unwrap();
        for (r, got) in recvs.iter().enumerate() {
            assert_eq!(got, &data, "rank {r} of {n}");
        }
    }

    #[test]
    fn every_scheduler_delivers_on_random_matrices() {
        for n in 1..=30 {
            let cost = random_matrix(n, n as u64);
            let root = (n * 7) % n.max(1);
            for s in all() {
                let plan = s.plan(&cost, root, 16);
                assert!(
                    plan.predicted.iter().all(|t| t.is_finite()),
                    "{} n={n}",
                    s.name()
                );
                for (j, p) in plan.parents.iter().enumerate() {
                    assert_eq!(p.is_empty(), j == root, "{} n={n} rank {j}", s.name());
                }
                check_delivers(&plan.schedules(16), 16, root);
            }
        }
    }

    #[test]
    fn binomial_plan_matches_the_algorithm() {
        for n in 1..=20 {
            let cost = random_matrix(n, 3);
            let root = n / 2;
            let plan = Binomial.plan(&cost, root, 8);
            for r in 0..n {
                assert_eq!(
                    plan.schedule(r, 8),
                    algorithms::bcast_binomial(r, n, root, 8)
                );
            }
        }
    }

    /// Latency-only symmetric matrix (bytes = 0, infinite bandwidth):
    ///
    /// ```text
    ///        0    1    2    3
    ///   0    -    1    2    4
    ///   1    1    -    3    4.5
    ///   2    2    3    -    6
    ///   3    4    4.5  6    -
    /// ```
    ///
    /// By hand, root 0. Step 1, A = {0}: both pick 0→1 (cost 1; ECEF 0 + 1 = 1). R0 = R1 = 1.
    /// Step 2, B = {2, 3}: FEF edges 0-2 = 2, 0-3 = 4, 1-2 = 3, 1-3 = 4.5 → 0→2; ECEF
    /// R+c: 0→2 = 3, 0→3 = 5, 1→2 = 4, 1→3 = 5.5 → 0→2 too, arriving at 3. R0 = R2 = 3.
    /// Step 3, B = {3}: FEF edges 0-3 = 4, 1-3 = 4.5, 2-3 = 6 → 0→3, starting at R0 = 3, arriving
    /// at 7. ECEF: 0→3 = 3 + 4 = 7, 1→3 = 1 + 4.5 = 5.5, 2→3 = 3 + 6 = 9 → 1→3, arriving at 5.5.
    /// FEF: 0 → [1, 2, 3], completion 7. ECEF: 0 → [1, 2], 1 → [3], completion 5.5.
    /// Look-ahead, step 2: F2 = c(2,3) = 6, F3 = c(3,2) = 6; keys 0→2 = 9, 0→3 = 11, 1→2 = 10,
    /// 1→3 = 11.5 → 0→2; step 3 as ECEF (F = 0 for the last rank) → 1→3.
    pub(crate) fn hand_matrix() -> CostMatrix {
        let c = [
            [0.0, 1.0, 2.0, 4.0],
            [1.0, 0.0, 3.0, 4.5],
            [2.0, 3.0, 0.0, 6.0],
            [4.0, 4.5, 6.0, 0.0],
        ];
        CostMatrix::from_fn(4, |i, j| (c[i][j], f64::INFINITY))
    }

    #[test]
    fn fef_and_ecef_on_the_hand_matrix() {
        let cost = hand_matrix();
        let fef = Fef.plan(&cost, 0, 0);
        assert_eq!(fef.children, vec![vec![1, 2, 3], vec![], vec![], vec![]]);
        assert_eq!(fef.predicted, vec![0.0, 1.0, 3.0, 7.0]);
        let ecef = Ecef.plan(&cost, 0, 0);
        assert_eq!(ecef.children, vec![vec![1, 2], vec![3], vec![], vec![]]);
        assert_eq!(ecef.predicted, vec![0.0, 1.0, 3.0, 5.5]);
        assert_eq!(ecef.predicted_completion(), 5.5);
        let la = Lookahead.plan(&cost, 0, 0);
        assert_eq!(la.children, ecef.children);
        // TTCC: T0 = ECEF; T1 avoids {0,1}, {0,2}, {1,3}: from 0 only 0→3 (at 4); then 0 has no
        // edge left, 3→2 (4 + 6 = 10; 3-1 is excluded), then 2→1 (10 + 3 = 13).
        let ttcc = Ttcc.plan(&cost, 0, 0);
        assert_eq!(ttcc.parents[1], vec![0, 2]);
        assert_eq!(ttcc.parents[2], vec![0, 3]);
        assert_eq!(ttcc.parents[3], vec![1, 0]);
        assert_eq!(ttcc.children[0], vec![1, 2, 3]);
        assert_eq!(ttcc.depths(), vec![0, 1, 1, 2]);
    }

    #[test]
    fn ecef_scales() {
        // 3000 ranks, implicit two-level costs: must build in well under a second (release).
        struct Two(usize);
        impl CostModel for Two {
            fn size(&self) -> usize {
                self.0
            }
            fn latency(&self, i: Rank, j: Rank) -> f64 {
                if i / 100 == j / 100 {
                    1e-5
                } else {
                    1e-3 + ((i * 31 + j * 17) % 97) as f64 * 1e-5
                }
            }
            fn bandwidth(&self, i: Rank, j: Rank) -> f64 {
                1e8 / (1.0 + ((i ^ j) % 5) as f64)
            }
        }
        let plan = Ecef.plan(&Two(3000), 5, 1 << 20);
        assert!(plan
            .parents
            .iter()
            .enumerate()
            .all(|(j, p)| j == 5 || p.len() == 1));
    }
}
