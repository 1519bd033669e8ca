//! `ferry-sim`: a discrete-event simulator that executes the **same** [`Schedule`]s as the
//! runtime, on a cost model instead of transports, plus the experiments of the TTCC paper
//! ([`experiment`]) and cost matrices as CSV ([`matrix`]).
//!
//! This crate depends on `ferry-sched` only: it must never link `ferry-core` or a transport.
//! It does no I/O and reads no clock; time is simulated seconds (`f64`).
//!
//! # The model
//! - **Transfers.** A send of `m` bytes from `i` to `j` occupies `i`'s send port and `j`'s receive
//!   port for `L[i][j] + m / B[i][j]` seconds (the cost model's
//!   [`time`](ferry_sched::hetero::CostModel::time)); the data is at `j` when it ends. This is
//!   the model the greedy schedulers of [`ferry_sched::hetero`] assume, so a single-tree plan
//!   simulated on the matrix it was built from completes exactly at its predicted time.
//! - **One send at a time.** A rank starts its ready sends one after the other, in schedule list
//!   order (the lowest-numbered ready send first).
//! - **One receive at a time.** A transfer starts when the sender starts it *and* the receiver's
//!   receive port is free; a sender that finds the port busy waits holding its own port
//!   (rendezvous, first come first served, ties by event order). Exception: the copies for one
//!   [`Op::RecvFirst`] step are one logical receive and may overlap each other, so a slow
//!   redundant copy never delays the copy that wins.
//! - **RecvFirst.** The step completes `alpha` seconds (the TTCC decision time,
//!   [`SimConfig::alpha`]) after the first copy arrives. Later copies are still sent in full — the
//!   sender cannot know — and still occupy both ports to their end; they are marked `dropped`
//!   in [`SimResult::transfers`]. They can therefore delay a *later, different* receive of the
//!   same rank and the sender's later sends, but never the winning copy.
//! - **Eager receives.** Data may arrive before its receive step is ready (its dependencies not
//!   yet done); the step then completes as soon as it is ready.
//! - **Local steps** (copy, reduce) take no time.
//!
//! # Output
//! Per rank, the time its last step completes ([`SimResult::finish`]) and the time its last
//! receive completes ([`SimResult::received`], the time it holds all its data: for a broadcast,
//! what the TTCC paper measures); overall [`SimResult::makespan`] and [`SimResult::delivery`];
//! and a trace of step completions in completion order, to compare with an instrumented real run.
//!
//! # Example
//! ```
//! use ferry_sched::hetero::{BcastScheduler, CostMatrix, Ecef};
//! use ferry_sim::{simulate, SimConfig};
//! let cost = CostMatrix::uniform(8, 1e-4, 1e8);
//! let schedules = Ecef.schedules(&cost, 0, 1 << 20);
//! let result = simulate(&schedules, &cost, &SimConfig::default()).unwrap();
//! assert!(result.delivery() > 0.0 && result.trace.len() == 14);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod experiment;
pub mod matrix;

use ferry_sched::hetero::CostModel;
use ferry_sched::{Op, Rank, Schedule, ScheduleError, StepId};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

/// Settings of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Decision time α (seconds) a [`Op::RecvFirst`] step takes after its first copy arrives
    /// before it completes. Default 0.
    pub alpha: f64,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig { alpha: 0.0 }
    }
}

/// What a completed step was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A send to `to` ended.
    Sent {
        /// Destination.
        to: Rank,
        /// Message number within the pair.
        seq: u32,
    },
    /// A receive got its message.
    Received {
        /// Source.
        from: Rank,
        /// Message number within the pair.
        seq: u32,
    },
    /// A receive-first step took the copy from `from` (the winner).
    ReceivedFirst {
        /// Source of the winning copy.
        from: Rank,
        /// Its message number.
        seq: u32,
    },
    /// A local copy or reduction.
    Local,
}

/// One step completion.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceEvent {
    /// Simulated seconds.
    pub time: f64,
    /// Rank whose step completed.
    pub rank: Rank,
    /// The step.
    pub step: StepId,
    /// What it was.
    pub kind: EventKind,
}

/// One message on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    /// Sender.
    pub from: Rank,
    /// Receiver.
    pub to: Rank,
    /// Message number within the pair.
    pub seq: u32,
    /// Bytes.
    pub bytes: usize,
    /// When it took both ports.
    pub start: f64,
    /// When it ended (the data is at the receiver).
    pub end: f64,
    /// A redundant copy that lost the race of its receive-first step.
    pub dropped: bool,
}

/// What a simulation found.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    /// Per rank: when its last step completed (0 for a rank without steps).
    pub finish: Vec<f64>,
    /// Per rank: when its last receive completed (0 for a rank that receives nothing).
    pub received: Vec<f64>,
    /// Step completions in completion order (time non-decreasing).
    pub trace: Vec<TraceEvent>,
    /// Transfers in the order they started.
    pub transfers: Vec<Transfer>,
}

impl SimResult {
    /// When the last step of any rank completed.
    pub fn makespan(&self) -> f64 {
        self.finish.iter().copied().fold(0.0, f64::max)
    }

    /// When the last rank had all its data (the broadcast completion time of the TTCC paper).
    pub fn delivery(&self) -> f64 {
        self.received.iter().copied().fold(0.0, f64::max)
    }
}

/// Why schedules could not be simulated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// A schedule fails [`Schedule::validate`].
    #[error(transparent)]
    Invalid(#[from] ScheduleError),
    /// The schedules do not form one call of `n` ranks.
    #[error("schedule {index} is for rank {rank} of {size}; expected rank {index} of {expected}")]
    WrongRank {
        /// Position in the slice.
        index: usize,
        /// Its `rank` field.
        rank: Rank,
        /// Its `size` field.
        size: usize,
        /// The slice length.
        expected: usize,
    },
    /// The cost model covers fewer ranks than the schedules.
    #[error("cost model of {model} ranks for {ranks} schedules")]
    ModelSize {
        /// Ranks in the model.
        model: usize,
        /// Schedules.
        ranks: usize,
    },
    /// A send that no receive matches, or whose size differs from its receive's.
    #[error("message {seq} from rank {from} to rank {to}: {why}")]
    Unmatched {
        /// Sender.
        from: Rank,
        /// Receiver.
        to: Rank,
        /// Message number.
        seq: u32,
        /// What is wrong.
        why: String,
    },
    /// Steps that can never complete.
    #[error("deadlock: {0}")]
    Deadlock(String),
}

/// `f64` ordered by `total_cmp`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Time(f64);
impl Eq for Time {}
impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Time {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Transfer `id` ends.
    TransferEnd(usize),
    /// A receive-first step's decision time is over.
    Decide(Rank, StepId),
}

/// Per-rank state.
struct RankState {
    /// Unfinished dependencies per step.
    waiting: Vec<u32>,
    /// Steps that depend on each step.
    dependents: Vec<Vec<StepId>>,
    done: Vec<bool>,
    /// Receive steps: arrival (time, source, seq) of the (first) copy.
    arrived: Vec<Option<(f64, Rank, u32)>>,
    /// Ready sends, lowest list index first.
    ready_sends: BinaryHeap<Reverse<StepId>>,
    sending: bool,
    /// Receive port: free from this time; the step it was last reserved for and from when.
    port_free: f64,
    port_step: Option<(StepId, f64)>,
    /// (peer, seq) of an incoming message → its receive step.
    inbox: HashMap<(Rank, u32), StepId>,
}

struct Sim<'a> {
    schedules: &'a [Schedule],
    cost: &'a dyn CostModel,
    alpha: f64,
    ranks: Vec<RankState>,
    now: f64,
    events: BinaryHeap<Reverse<(Time, u64, Event)>>,
    counter: u64,
    /// Steps that completed at `now` and still have to release their dependents.
    completed: Vec<(Rank, StepId)>,
    result: SimResult,
    /// Per transfer: the sender's step and the receiver's step.
    transfer_steps: Vec<(StepId, StepId)>,
}

/// Runs `schedules` (one per rank, index = rank) on `cost` and reports when each step completed.
pub fn simulate(
    schedules: &[Schedule],
    cost: &dyn CostModel,
    config: &SimConfig,
) -> Result<SimResult, SimError> {
    let n = schedules.len();
    if cost.size() < n {
        return Err(SimError::ModelSize {
            model: cost.size(),
            ranks: n,
        });
    }
    let mut ranks = Vec::with_capacity(n);
    for (index, s) in schedules.iter().enumerate() {
        s.validate()?;
        if s.rank != index || s.size != n {
            return Err(SimError::WrongRank {
                index,
                rank: s.rank,
                size: s.size,
                expected: n,
            });
        }
        let steps = s.steps.len();
        let mut dependents = vec![vec![]; steps];
        let mut inbox = HashMap::new();
        for (i, step) in s.steps.iter().enumerate() {
            for &d in &step.deps {
                dependents[d as usize].push(i as StepId);
            }
            match &step.op {
                Op::Recv { peer, seq, .. } => {
                    inbox.insert((*peer, *seq), i as StepId);
                }
                Op::RecvFirst { from, .. } => {
                    for &(peer, seq) in from {
                        inbox.insert((peer, seq), i as StepId);
                    }
                }
                _ => {}
            }
        }
        ranks.push(RankState {
            waiting: s.steps.iter().map(|st| st.deps.len() as u32).collect(),
            dependents,
            done: vec![false; steps],
            arrived: vec![None; steps],
            ready_sends: BinaryHeap::new(),
            sending: false,
            port_free: 0.0,
            port_step: None,
            inbox,
        });
    }
    let mut sim = Sim {
        schedules,
        cost,
        alpha: config.alpha,
        ranks,
        now: 0.0,
        events: BinaryHeap::new(),
        counter: 0,
        completed: vec![],
        result: SimResult {
            finish: vec![0.0; n],
            received: vec![0.0; n],
            trace: vec![],
            transfers: vec![],
        },
        transfer_steps: vec![],
    };
    for (r, schedule) in schedules.iter().enumerate() {
        for i in 0..schedule.steps.len() {
            if sim.ranks[r].waiting[i] == 0 {
                sim.became_ready(r, i as StepId)?;
            }
        }
    }
    sim.settle()?;
    while let Some(Reverse((Time(t), _, event))) = sim.events.pop() {
        sim.now = t;
        match event {
            Event::TransferEnd(id) => sim.transfer_end(id)?,
            Event::Decide(r, step) => sim.complete(r, step),
        }
        sim.settle()?;
    }
    let stuck: Vec<String> = sim
        .ranks
        .iter()
        .enumerate()
        .filter_map(|(r, st)| {
            let left: Vec<usize> = (0..st.done.len()).filter(|&i| !st.done[i]).collect();
            (!left.is_empty()).then(|| format!("rank {r} steps {left:?}"))
        })
        .collect();
    if !stuck.is_empty() {
        return Err(SimError::Deadlock(stuck.join("; ")));
    }
    Ok(sim.result)
}

impl Sim<'_> {
    fn schedule_event(&mut self, at: f64, event: Event) {
        self.counter += 1;
        self.events.push(Reverse((Time(at), self.counter, event)));
    }

    /// Marks a step complete at `now` and records it; dependents are released by `settle`.
    fn complete(&mut self, r: Rank, step: StepId) {
        let st = &mut self.ranks[r];
        st.done[step as usize] = true;
        let kind = match &self.schedules[r].steps[step as usize].op {
            Op::Send { peer, seq, .. } => EventKind::Sent {
                to: *peer,
                seq: *seq,
            },
            Op::Recv { .. } | Op::RecvFirst { .. } => {
                let (_, from, seq) = st.arrived[step as usize].unwrap_or((0.0, r, 0));
                self.result.received[r] = self.result.received[r].max(self.now);
                if matches!(self.schedules[r].steps[step as usize].op, Op::Recv { .. }) {
                    EventKind::Received { from, seq }
                } else {
                    EventKind::ReceivedFirst { from, seq }
                }
            }
            Op::Reduce { .. } | Op::Copy { .. } => EventKind::Local,
        };
        self.result.finish[r] = self.result.finish[r].max(self.now);
        self.result.trace.push(TraceEvent {
            time: self.now,
            rank: r,
            step,
            kind,
        });
        self.completed.push((r, step));
    }

    /// Releases the dependents of everything completed at `now`, transitively.
    fn settle(&mut self) -> Result<(), SimError> {
        while let Some((r, step)) = self.completed.pop() {
            for k in 0..self.ranks[r].dependents[step as usize].len() {
                let d = self.ranks[r].dependents[step as usize][k];
                let w = &mut self.ranks[r].waiting[d as usize];
                *w -= 1;
                if *w == 0 {
                    self.became_ready(r, d)?;
                }
            }
        }
        Ok(())
    }

    /// A step whose dependencies are all done at `now`.
    fn became_ready(&mut self, r: Rank, step: StepId) -> Result<(), SimError> {
        match &self.schedules[r].steps[step as usize].op {
            Op::Send { .. } => {
                self.ranks[r].ready_sends.push(Reverse(step));
                self.start_send(r)?;
            }
            Op::Recv { .. } => {
                if self.ranks[r].arrived[step as usize].is_some() {
                    self.complete(r, step);
                }
            }
            Op::RecvFirst { .. } => {
                if let Some((at, _, _)) = self.ranks[r].arrived[step as usize] {
                    self.decide(r, step, at);
                }
            }
            Op::Reduce { .. } | Op::Copy { .. } => self.complete(r, step),
        }
        Ok(())
    }

    /// A ready receive-first step whose first copy arrived at `at`.
    fn decide(&mut self, r: Rank, step: StepId, at: f64) {
        let when = at + self.alpha;
        if when <= self.now {
            self.complete(r, step);
        } else {
            self.schedule_event(when, Event::Decide(r, step));
        }
    }

    /// Starts the next ready send of `r` if its send port is free.
    fn start_send(&mut self, r: Rank) -> Result<(), SimError> {
        if self.ranks[r].sending {
            return Ok(());
        }
        let Some(Reverse(step)) = self.ranks[r].ready_sends.pop() else {
            return Ok(());
        };
        let Op::Send { peer, seq, region } = &self.schedules[r].steps[step as usize].op else {
            unreachable!("only sends are queued");
        };
        let (to, seq, bytes) = (*peer, *seq, region.len);
        let unmatched = |why: &str| SimError::Unmatched {
            from: r,
            to,
            seq,
            why: why.into(),
        };
        let &recv_step = self.ranks[to]
            .inbox
            .get(&(r, seq))
            .ok_or_else(|| unmatched("no receive for it"))?;
        let want = match &self.schedules[to].steps[recv_step as usize].op {
            Op::Recv { region, .. } | Op::RecvFirst { region, .. } => region.len,
            _ => unreachable!("the inbox holds receives only"),
        };
        if want != bytes {
            return Err(unmatched(&format!("{bytes} bytes sent, {want} expected")));
        }
        let now = self.now;
        let port = &mut self.ranks[to];
        let overlaps = matches!(port.port_step, Some((s, from)) if s == recv_step && from <= now)
            && matches!(
                self.schedules[to].steps[recv_step as usize].op,
                Op::RecvFirst { .. }
            );
        let start = if overlaps {
            now
        } else {
            now.max(port.port_free)
        };
        let end = start + self.cost.time(r, to, bytes);
        if overlaps {
            port.port_free = port.port_free.max(end);
        } else {
            port.port_free = end;
            port.port_step = Some((recv_step, start));
        }
        self.ranks[r].sending = true;
        let id = self.result.transfers.len();
        self.result.transfers.push(Transfer {
            from: r,
            to,
            seq,
            bytes,
            start,
            end,
            dropped: false,
        });
        self.transfer_steps.push((step, recv_step));
        self.schedule_event(end, Event::TransferEnd(id));
        Ok(())
    }

    fn transfer_end(&mut self, id: usize) -> Result<(), SimError> {
        let Transfer { from, to, seq, .. } = self.result.transfers[id];
        let (send_step, recv_step) = self.transfer_steps[id];
        self.complete(from, send_step);
        self.ranks[from].sending = false;
        let st = &mut self.ranks[to];
        if st.arrived[recv_step as usize].is_some() {
            self.result.transfers[id].dropped = true;
        } else {
            st.arrived[recv_step as usize] = Some((self.now, from, seq));
            if st.waiting[recv_step as usize] == 0 {
                match self.schedules[to].steps[recv_step as usize].op {
                    Op::RecvFirst { .. } => self.decide(to, recv_step, self.now),
                    _ => self.complete(to, recv_step),
                }
            }
        }
        self.start_send(from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_sched::hetero::{BcastScheduler, CostMatrix, Ecef, Fef, Ttcc};
    use ferry_sched::{algorithms, Buffer, Region, ScheduleBuilder};

    /// 3 ranks, 1000-byte messages (times in ms):
    /// 0→1: 1 ms + 1000 B / 1 MB/s = 2 ms; 0→2: 0.5 ms + 1000 / 0.5 MB/s = 2.5 ms;
    /// 1→2: 0 + 1 ms = 1 ms. Symmetric.
    fn three() -> CostMatrix {
        let mut m = CostMatrix::uniform(3, 0.0, 1e6);
        for (i, j, l, b) in [(0, 1, 1e-3, 1e6), (0, 2, 0.5e-3, 0.5e6), (1, 2, 0.0, 1e6)] {
            m.set(i, j, l, b);
            m.set(j, i, l, b);
        }
        m
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn binomial_on_three_by_hand() {
        // Binomial from 0 with 3 ranks: 0 sends to 2 (mask 2) then to 1 (mask 1).
        // 0→2 takes [0, 2.5] ms, then 0→1 [2.5, 4.5] ms.
        let schedules: Vec<Schedule> = (0..3)
            .map(|r| algorithms::bcast_binomial(r, 3, 0, 1000))
            .collect();
        let res = simulate(&schedules, &three(), &SimConfig::default()).unwrap();
        assert!(close(res.received[2], 2.5e-3) && close(res.received[1], 4.5e-3));
        assert!(close(res.finish[0], 4.5e-3) && close(res.makespan(), 4.5e-3));
        let order: Vec<(Rank, EventKind)> = res.trace.iter().map(|e| (e.rank, e.kind)).collect();
        assert_eq!(
            order,
            vec![
                (0, EventKind::Sent { to: 2, seq: 0 }),
                (2, EventKind::Received { from: 0, seq: 0 }),
                (0, EventKind::Sent { to: 1, seq: 0 }),
                (1, EventKind::Received { from: 0, seq: 0 }),
            ]
        );
    }

    /// 0 sends to 1 then 2; 1 forwards to 2; 2 takes the first copy, with α = 0.1 ms.
    /// 0→1 [0, 2]; 0→2 [2, 4.5] (dropped); 1→2 [2, 3] (overlaps 0→2: same receive-first step).
    /// Rank 2 has the data at 3 + 0.1 = 3.1 ms; rank 0 finishes its last send at 4.5 ms.
    #[test]
    fn recv_first_by_hand() {
        let data = Region::new(Buffer::Recv, 0, 1000);
        let mut b0 = ScheduleBuilder::new(0, 3, 0, 1000);
        b0.send(1, data, &[]);
        b0.send(2, data, &[]);
        let mut b1 = ScheduleBuilder::new(1, 3, 0, 1000);
        let got = b1.recv(0, data, &[]);
        b1.send(2, data, &[got]);
        let mut b2 = ScheduleBuilder::new(2, 3, 0, 1000);
        b2.recv_first(&[0, 1], data, &[]);
        let schedules = [b0.finish(), b1.finish(), b2.finish()];
        let res = simulate(&schedules, &three(), &SimConfig { alpha: 1e-4 }).unwrap();
        assert!(close(res.received[2], 3.1e-3), "{:?}", res.received);
        assert!(close(res.delivery(), 3.1e-3));
        assert!(close(res.finish[1], 3e-3) && close(res.makespan(), 4.5e-3));
        let dropped: Vec<(Rank, Rank)> = res
            .transfers
            .iter()
            .filter(|t| t.dropped)
            .map(|t| (t.from, t.to))
            .collect();
        assert_eq!(dropped, vec![(0, 2)]);
        assert_eq!(
            res.trace.iter().find(|e| e.rank == 2).unwrap().kind,
            EventKind::ReceivedFirst { from: 1, seq: 0 }
        );
    }

    /// Two separate receives at rank 2 share its one receive port: 0→2 [0, 2.5] first (rank 0's
    /// request comes first), then 1→2 waits and runs [2.5, 3.5].
    #[test]
    fn receive_port_is_exclusive() {
        let data = Region::new(Buffer::Recv, 0, 1000);
        let mut b0 = ScheduleBuilder::new(0, 3, 0, 1000);
        b0.send(2, data, &[]);
        let mut b1 = ScheduleBuilder::new(1, 3, 0, 1000);
        b1.send(2, data, &[]);
        let mut b2 = ScheduleBuilder::new(2, 3, 0, 2000);
        b2.recv(0, data, &[]);
        b2.recv(1, Region::new(Buffer::Recv, 1000, 1000), &[]);
        let schedules = [b0.finish(), b1.finish(), b2.finish()];
        let res = simulate(&schedules, &three(), &SimConfig::default()).unwrap();
        assert!(close(res.received[2], 3.5e-3));
        assert!(close(res.transfers[1].start, 2.5e-3));
    }

    #[test]
    fn single_tree_plans_complete_as_predicted() {
        let m = CostMatrix::from_fn(20, |i, j| {
            (
                1e-5 * ((i * 7 + j * 3) % 11) as f64,
                1e6 * (1 + (i + 2 * j) % 13) as f64,
            )
        });
        for s in [&Ecef as &dyn BcastScheduler, &Fef] {
            let plan = s.plan(&m, 3, 1 << 16);
            let res = simulate(&plan.schedules(1 << 16), &m, &SimConfig::default()).unwrap();
            for r in 0..20 {
                assert!((res.received[r] - plan.predicted[r]).abs() < 1e-12, "{r}");
            }
        }
    }

    /// Every standard algorithm of ferry-sched runs to the end on the simulator (the runtime
    /// executes the same schedules, so the simulator must accept all of them).
    #[test]
    fn standard_algorithms_complete() {
        type Build = fn(Rank, usize) -> Schedule;
        let builds: [(&str, Build); 11] = [
            ("barrier", |r, n| algorithms::barrier_dissemination(r, n)),
            ("bcast", |r, n| algorithms::bcast_binomial(r, n, n / 2, 96)),
            ("bcast_sa", |r, n| {
                algorithms::bcast_scatter_allgather(r, n, n - 1, 96)
            }),
            ("reduce", |r, n| {
                algorithms::reduce_binomial(r, n, n / 3, 96, false, false)
            }),
            ("allreduce_rd", |r, n| {
                algorithms::allreduce_recursive_doubling(r, n, 96, false)
            }),
            ("allreduce_ring", |r, n| {
                algorithms::allreduce_ring(r, n, 96, 8, true)
            }),
            ("allgather", |r, n| {
                algorithms::allgather_ring(r, n, 16, false)
            }),
            ("gather", |r, n| {
                algorithms::gather_linear(r, n, 0, 16, false)
            }),
            ("scatter", |r, n| {
                algorithms::scatter_linear(r, n, n / 2, 16, false)
            }),
            ("alltoall", |r, n| algorithms::alltoall_pairwise(r, n, 16)),
            ("bcast_ttcc", |r, n| {
                Ttcc.plan(&CostMatrix::uniform(n, 1e-5, 1e7), 0, 96)
                    .schedule(r, 96)
            }),
        ];
        for n in 1..=9 {
            let cost = CostMatrix::from_fn(n, |i, j| (1e-5 * (1 + (i + j) % 3) as f64, 1e7));
            for (name, build) in builds {
                let schedules: Vec<Schedule> = (0..n).map(|r| build(r, n)).collect();
                let res = simulate(&schedules, &cost, &SimConfig { alpha: 1e-6 })
                    .unwrap_or_else(|e| panic!("{name} on {n}: {e}"));
                let steps: usize = schedules.iter().map(|s| s.steps.len()).sum();
                assert_eq!(res.trace.len(), steps, "{name} on {n}");
                assert!(res.trace.windows(2).all(|w| w[0].time <= w[1].time));
            }
        }
    }

    #[test]
    fn errors_are_reported() {
        let data = Region::new(Buffer::Recv, 0, 10);
        let mut b0 = ScheduleBuilder::new(0, 2, 0, 10);
        b0.send(1, data, &[]);
        let b1 = ScheduleBuilder::new(1, 2, 0, 10);
        let cost = CostMatrix::uniform(2, 1e-3, 1e6);
        assert!(matches!(
            simulate(&[b0.finish(), b1.finish()], &cost, &SimConfig::default()),
            Err(SimError::Unmatched { .. })
        ));
        let b0 = ScheduleBuilder::new(0, 2, 0, 10);
        let mut b1 = ScheduleBuilder::new(1, 2, 0, 10);
        b1.recv(0, data, &[]);
        assert!(matches!(
            simulate(&[b0.finish(), b1.finish()], &cost, &SimConfig::default()),
            Err(SimError::Deadlock(_))
        ));
    }

    #[test]
    fn ttcc_twins_ecef_on_exact_costs() {
        let m = CostMatrix::from_fn(12, |i, j| {
            (
                1e-4 * ((i * 5 + j) % 7) as f64,
                1e5 * (1 + (i * j) % 9) as f64,
            )
        });
        let ecef = Ecef.plan(&m, 0, 1 << 20);
        let ttcc = Ttcc.plan(&m, 0, 1 << 20);
        assert!(ttcc.parents.iter().skip(1).any(|p| p.len() == 2));
        let config = SimConfig { alpha: 1e-3 };
        let e = simulate(&ecef.schedules(1 << 20), &m, &config).unwrap();
        let t = simulate(&ttcc.schedules(1 << 20), &m, &config).unwrap();
        let depth = *ecef.depths().iter().max().unwrap() as f64;
        assert!(t.delivery() <= e.delivery() + config.alpha * depth + 1e-12);
    }
}
