//! Collective operations on a communicator: each builds a schedule (`ferry-sched`), hands it to
//! the executor (`executor.rs`) and, for the blocking forms, waits for it.
//!
//! Algorithms are chosen per call from the message size, the communicator size and the number of
//! clusters it spans by the rules of the selection table (`selection.rs`: MPICH's thresholds and
//! MagPIe's hierarchical collectives from two clusters on built in, a JSON file named by
//! `FERRY_COLL_SELECTION` to replace them). Each rank's cluster comes from the bootstrap cards
//! (`FERRY_CLUSTER` or `FERRY_CLUSTERS`, see [`Comm::clusters`]). All of these settings are read
//! with the rest of the configuration (`settings.rs`).

use crate::coll::executor::{CollectiveCall, Planned, Reducer, Started};
use crate::coll::reductions::{reducer, typed_reducer};
pub use crate::coll::reductions::{ReduceOp, Reducible};
use crate::coll::segment::SharedPlan;
use crate::coll::selection::{
    AllgatherAlgorithm, AllreduceAlgorithm, AlltoallAlgorithm, BarrierAlgorithm, BcastAlgorithm,
    Call, GatherAlgorithm, ReduceAlgorithm, Shareable, Table,
};
use crate::coll::ways::Way;
use crate::comm::{Comm, Request, Scope};
use crate::engine::ReqId;
use crate::error::Error;
use bytemuck::Pod;
use ferry_sched::{algorithms as alg, hierarchical as hier, Schedule};
use rustc_hash::FxHashMap;
use std::rc::Rc;

/// The fixed-size collectives, by their arguments: what a kept schedule is found by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PlanKey {
    Barrier,
    Bcast(usize, usize),
    Reduce(usize, usize, usize, bool),
    Allreduce(usize, usize, bool, bool),
    Gather(usize, usize),
    Scatter(usize, usize),
    Allgather(usize),
    Alltoall(usize),
    Scan(usize, bool),
}

impl PlanKey {
    #[inline(always)]
    fn of(call: &Collective<'_>) -> Option<PlanKey> {
        Some(match *call {
            Collective::Barrier => PlanKey::Barrier,
            Collective::Bcast { bytes, root } => PlanKey::Bcast(bytes, root),
            Collective::Reduce {
                bytes,
                elem,
                root,
                commutative,
            } => PlanKey::Reduce(bytes, elem, root, commutative),
            Collective::Allreduce {
                bytes,
                elem,
                commutative,
                in_place,
            } => PlanKey::Allreduce(bytes, elem, commutative, in_place),
            Collective::Gather { block, root } => PlanKey::Gather(block, root),
            Collective::Scatter { block, root } => PlanKey::Scatter(block, root),
            Collective::Allgather { block } => PlanKey::Allgather(block),
            Collective::Alltoall { block } => PlanKey::Alltoall(block),
            Collective::Scan { bytes, exclusive } => PlanKey::Scan(bytes, exclusive),
            _ => return None,
        })
    }
}

/// Most schedules kept per world; beyond, the cache starts over.
const MAX_PLANS: usize = 256;

/// Kept schedules by (context id, call). Each holds its communicator's member list, which keeps
/// that list alive: a later communicator that reuses the context id has another list, so it
/// never gets a schedule planned for different members.
pub(crate) type Plans = FxHashMap<(u32, PlanKey), (Rc<[u32]>, Planned)>;

/// A kept schedule with what finds it: context, call, and the members it was made for.
pub(crate) type KeptPlan = ((u32, PlanKey), Rc<[u32]>, Planned);

/// One collective call described in bytes: what [`Comm::plan`] turns into a schedule. Block
/// sizes, counts and displacements are in bytes; `elem` is the size of one reduction element.
#[derive(Debug, Clone, Copy)]
pub enum Collective<'a> {
    /// Every rank waits for all.
    Barrier,
    /// `bytes` from `root` to everyone.
    Bcast {
        /// Message length.
        bytes: usize,
        /// Sending rank.
        root: usize,
    },
    /// Element-wise reduction of `bytes` to `root`.
    Reduce {
        /// Vector length.
        bytes: usize,
        /// Reduction element size (a split of the vector falls on element boundaries).
        elem: usize,
        /// Root rank.
        root: usize,
        /// Whether operands may be combined in any order.
        commutative: bool,
    },
    /// Element-wise reduction of `bytes` to everyone.
    Allreduce {
        /// Vector length.
        bytes: usize,
        /// Reduction element size (the ring splits only at element boundaries).
        elem: usize,
        /// Whether operands may be combined in any order.
        commutative: bool,
        /// Input taken from the receive buffer.
        in_place: bool,
    },
    /// Fixed blocks to `root`, in rank order.
    Gather {
        /// Bytes per rank.
        block: usize,
        /// Root rank.
        root: usize,
    },
    /// Fixed blocks from `root`.
    Scatter {
        /// Bytes per rank.
        block: usize,
        /// Root rank.
        root: usize,
    },
    /// Fixed blocks to everyone.
    Allgather {
        /// Bytes per rank.
        block: usize,
    },
    /// Block j to rank j.
    Alltoall {
        /// Bytes per pair.
        block: usize,
    },
    /// Variable blocks to `root`.
    Gatherv {
        /// Bytes from each rank.
        counts: &'a [usize],
        /// Where each rank's bytes land at the root.
        displs: &'a [usize],
        /// Root rank.
        root: usize,
    },
    /// Variable blocks from `root`.
    Scatterv {
        /// Bytes for each rank.
        counts: &'a [usize],
        /// Where each rank's bytes start at the root.
        displs: &'a [usize],
        /// Root rank.
        root: usize,
    },
    /// Variable blocks to everyone.
    Allgatherv {
        /// Bytes from each rank.
        counts: &'a [usize],
        /// Where each rank's bytes land.
        displs: &'a [usize],
    },
    /// Variable blocks between every pair.
    Alltoallv {
        /// Bytes to each rank.
        send_counts: &'a [usize],
        /// Where they start in the send buffer.
        send_displs: &'a [usize],
        /// Bytes from each rank.
        recv_counts: &'a [usize],
        /// Where they land in the receive buffer.
        recv_displs: &'a [usize],
    },
    /// Reduction whose result is split over the ranks.
    ReduceScatter {
        /// Result bytes for each rank.
        counts: &'a [usize],
    },
    /// Prefix reduction.
    Scan {
        /// Vector length.
        bytes: usize,
        /// Exclusive (rank r gets x0 … x(r-1)).
        exclusive: bool,
    },
}

fn too_small(what: &str, needed: usize, got: usize) -> Error {
    Error::BufferTooSmall {
        what: what.to_string(),
        needed,
        got,
    }
}

/// A rank's buffers for one collective call: its own, or a stand-in for each one shorter than
/// the schedule needs (its counts differ from the others'). Such a rank still takes part, as
/// leaving now would leave the others waiting for it forever, and fails the call with `short`.
struct CallBuffers {
    send: *const u8,
    recv: *mut u8,
    /// Why this rank fails the call: a buffer of its own is too small.
    short: Option<Error>,
    /// Keeps the stand-ins' bytes where `send` and `recv` point.
    stand_ins: Vec<Vec<u8>>,
}

impl CallBuffers {
    fn new(needs: &Schedule, send: (*const u8, usize), recv: (*mut u8, usize)) -> CallBuffers {
        let mut buffers = CallBuffers {
            send: send.0,
            recv: recv.0,
            short: None,
            stand_ins: Vec::new(),
        };
        if send.1 < needs.send_bytes {
            buffers.short = Some(too_small("send buffer", needs.send_bytes, send.1));
            let stand_in = vec![0u8; needs.send_bytes];
            buffers.send = stand_in.as_ptr();
            buffers.stand_ins.push(stand_in);
        }
        if recv.1 < needs.recv_bytes {
            let short = too_small("receive buffer", needs.recv_bytes, recv.1);
            buffers.short.get_or_insert(short);
            let mut stand_in = vec![0u8; needs.recv_bytes];
            buffers.recv = stand_in.as_mut_ptr();
            buffers.stand_ins.push(stand_in);
        }
        buffers
    }
}

impl Comm {
    /// The cluster of each rank of this communicator (all 0 when no cluster was set).
    pub fn clusters(&self) -> Vec<u32> {
        let world = &self.shared.clusters;
        self.group
            .world_of
            .iter()
            .map(|&w| world.get(w as usize).copied().unwrap_or(0))
            .collect()
    }

    /// Hands `schedule` to the executor with the caller's buffers.
    fn start_schedule(
        &self,
        schedule: Planned,
        send: &[u8],
        recv: &mut [u8],
        reduce: Option<Reducer>,
    ) -> Result<ReqId, Error> {
        let (send, recv) = ((send.as_ptr(), send.len()), (recv.as_mut_ptr(), recv.len()));
        self.launch(schedule, send, recv, reduce)
    }

    /// Checks the buffers against `schedule` and hands it to the executor under the next call
    /// number; the caller keeps the buffers valid until the request is done. A plan of nothing
    /// ([`Planned::moves_nothing`]) takes no call number and gives a request done already.
    pub(crate) fn launch(
        &self,
        schedule: Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        reduce: Option<Reducer>,
    ) -> Result<ReqId, Error> {
        if schedule.moves_nothing() {
            let mut engine = self.shared.engine.borrow_mut();
            return Ok(crate::coll::Collectives::done_at_once(&mut engine));
        }
        let call = self.collective_call(schedule, send, recv, reduce, true);
        let mut engine = self.shared.engine.borrow_mut();
        self.shared.coll.borrow_mut().start(&mut engine, call)
    }

    /// Like [`Comm::launch`], and waits until the call is done (a call that finishes as it
    /// starts needs no request). On a communicator with a shared segment, the call's way
    /// (through it or by messages) is recorded there first; a wait that finds that a member
    /// went the other way for a call ends the job (see `crate::coll::ways`). A plan of nothing
    /// returns at once, on every rank alike, and records nothing.
    pub(crate) fn launch_and_wait(
        &self,
        schedule: &Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        reduce: Option<&Reducer>,
    ) -> Result<(), Error> {
        if schedule.moves_nothing() {
            return Ok(());
        }
        let Some(segment) = self.collective_segment()? else {
            return self.run_messages(schedule, send, recv, reduce);
        };
        let ran = match schedule.shared().filter(|&plan| segment.carries(plan)) {
            Some(plan) => {
                segment.record_call(self.calls.next(false), plan.way());
                self.run_shared_checked(segment, plan, schedule, send, recv, reduce)
            }
            None => {
                segment.record_call(self.calls.next_blocking(), Way::Messages);
                self.run_messages(schedule, send, recv, reduce)
            }
        };
        self.shared
            .end_if_ways_differ(&ran, || format!("rank {}", self.rank()));
        ran
    }

    /// [`Comm::launch_and_wait`] by messages only.
    #[inline]
    pub(crate) fn run_messages(
        &self,
        schedule: &Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        reduce: Option<&Reducer>,
    ) -> Result<(), Error> {
        let eager = self
            .shared
            .engine
            .borrow()
            .eager_floor(schedule.send_mode());
        // A fault-tolerant job runs every call in the executor, which fails the calls of a
        // communicator that lost a member (see `Collectives::fail_calls_of_failed`).
        let fault_tolerant = self.shared.in_effect.fault_tolerant;
        if let Some(ran) = (!fault_tolerant)
            .then(|| self.run_direct(schedule, send, recv, reduce, eager))
            .flatten()
        {
            return ran;
        }
        let call = self.collective_call(schedule.clone(), send, recv, reduce.cloned(), false);
        let started = {
            let mut engine = self.shared.engine.borrow_mut();
            self.shared.coll.borrow_mut().begin(&mut engine, call)?
        };
        match started {
            Started::Done => Ok(()),
            Started::Running(id) => self.shared.wait(id).and_then(|c| self.fault_of(&c)),
        }
    }

    /// The executor's view of a call of `schedule` on these buffers, under the next call
    /// number of its kind (see [`CallNumbers`](crate::comm::CallNumbers)).
    #[inline]
    fn collective_call(
        &self,
        schedule: Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        reduce: Option<Reducer>,
        nonblocking: bool,
    ) -> CollectiveCall {
        let mode = schedule.send_mode();
        let schedule = schedule.into_inner();
        let buffers = CallBuffers::new(&schedule, send, recv);
        let call = self.calls.next(nonblocking);
        CollectiveCall {
            schedule,
            context: self.context,
            call,
            world_of: self.group.world_of.clone(),
            send: buffers.send,
            recv: buffers.recv,
            reduce,
            mode,
            failed: buffers.short,
            stand_ins: buffers.stand_ins,
        }
    }

    /// [`Comm::run_shared`] with the buffer checks of [`Comm::collective_call`]: a rank whose
    /// buffer is too small takes part with a stand-in, says so to the others through the
    /// segment (so that every member fails alike), and fails the call with its own error.
    fn run_shared_checked(
        &self,
        segment: &crate::coll::segment::Segment,
        plan: SharedPlan,
        schedule: &Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        reduce: Option<&crate::coll::executor::Reducer>,
    ) -> Result<(), Error> {
        let buffers = CallBuffers::new(schedule.schedule(), send, recv);
        let short = buffers.short.is_some();
        let ran = self.run_shared(segment, plan, (buffers.send, buffers.recv), short, reduce);
        match (buffers.short, ran) {
            // A mismatch of ways ends the job whatever this rank passed.
            (_, Err(e @ Error::CollectivePaths { .. })) => Err(e),
            // What is wrong here rather than what the segment says of this rank.
            (Some(e), _) => Err(e),
            (None, ran) => ran,
        }
    }

    fn run_schedule(
        &self,
        schedule: Planned,
        send: &[u8],
        recv: &mut [u8],
        reduce: Option<Reducer>,
    ) -> Result<(), Error> {
        let (send, recv) = ((send.as_ptr(), send.len()), (recv.as_mut_ptr(), recv.len()));
        self.launch_and_wait(&schedule, send, recv, reduce.as_ref())
    }

    fn run_typed<T: Pod>(
        &self,
        schedule: Planned,
        send: &[T],
        recv: &mut [T],
        reduce: Option<Reducer>,
    ) -> Result<(), Error> {
        let (send, recv) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        self.run_schedule(schedule, send, recv, reduce)
    }

    fn bcast_schedule(
        &self,
        table: &Table,
        clusters: &[u32],
        bytes: usize,
        root: usize,
    ) -> Schedule {
        let (me, n) = (self.rank(), self.size());
        match table.bcast(bytes, n, hier::count_clusters(clusters)) {
            // The lookup returns message algorithms only.
            BcastAlgorithm::Binomial | BcastAlgorithm::SharedMemory => {
                alg::bcast_binomial(me, n, root, bytes)
            }
            BcastAlgorithm::ScatterAllgather => alg::bcast_scatter_allgather(me, n, root, bytes),
            BcastAlgorithm::Hierarchical => hier::bcast(me, clusters, root, bytes),
        }
    }

    fn allreduce_schedule(
        &self,
        table: &Table,
        clusters: &[u32],
        bytes: usize,
        elem: usize,
        commutative: bool,
        in_place: bool,
    ) -> Schedule {
        let (me, n) = (self.rank(), self.size());
        let flat = || alg::allreduce_recursive_doubling(me, n, bytes, in_place);
        let call = Call {
            bytes,
            ranks: n,
            clusters: hier::count_clusters(clusters),
            commutative,
            in_place,
        };
        match table.allreduce(call, elem) {
            AllreduceAlgorithm::Ring => alg::allreduce_ring(me, n, bytes, elem, in_place),
            AllreduceAlgorithm::RecursiveDoubling | AllreduceAlgorithm::SharedMemory => flat(),
            // None: a non-commutative operation on clusters that are not rank ranges.
            AllreduceAlgorithm::Hierarchical => {
                hier::allreduce(me, clusters, bytes, commutative, in_place).unwrap_or_else(flat)
            }
        }
    }

    /// [`Comm::plan`], checked, and kept for the next call with the same arguments on this
    /// communicator (all but the v-variants): a repeated collective costs no planning and no
    /// allocation for its schedule. A call that carries no data on any rank (count 0) gets,
    /// once its arguments are checked, a plan that completes without communicating
    /// ([`Planned::moves_nothing`]).
    ///
    /// Inlined up to the check of the last plan, which a loop of one call always hits: the
    /// result is then built in the caller's frame instead of copied out of this one.
    #[inline(always)]
    pub fn planned(&self, call: &Collective<'_>) -> Result<Planned, Error> {
        if let Some(key) = PlanKey::of(call) {
            if let Some((at, members, schedule)) = &self.shared.coll.borrow().last_plan {
                if *at == (self.context, key) && Rc::ptr_eq(members, &self.group.world_of) {
                    return Ok(schedule.clone());
                }
            }
        }
        self.planned_again(call)
    }

    /// [`Comm::planned`] for a call that is not the last one planned.
    #[inline(never)]
    fn planned_again(&self, call: &Collective<'_>) -> Result<Planned, Error> {
        let Some(key) = PlanKey::of(call) else {
            return self.planned_afresh(call);
        };
        let owner = &self.group.world_of;
        let found = (self.context, key);
        let kept = self
            .shared
            .coll
            .borrow()
            .plans
            .get(&found)
            .filter(|(members, _)| Rc::ptr_eq(members, owner))
            .map(|(_, schedule)| schedule.clone());
        let schedule = match kept {
            Some(schedule) => schedule,
            None => {
                let schedule = self.planned_afresh(call)?;
                let plans = &mut self.shared.coll.borrow_mut().plans;
                if plans.len() >= MAX_PLANS {
                    plans.clear();
                }
                plans.insert(found, (Rc::clone(owner), schedule.clone()));
                schedule
            }
        };
        self.shared.coll.borrow_mut().last_plan = Some((found, Rc::clone(owner), schedule.clone()));
        Ok(schedule)
    }

    /// A plan of `call` made now: nothing to run for a call that carries no data on any rank
    /// (see `crate::coll::empty`), once its arguments are checked.
    fn planned_afresh(&self, call: &Collective<'_>) -> Result<Planned, Error> {
        if call.carries_nothing() {
            self.check_call(call)?;
            return Ok(Planned::nothing());
        }
        let mut schedule = Planned::check(self.plan(call)?)?.with_shared(self.shared_plan(call)?);
        if let Collective::Reduce { .. } = call {
            schedule = schedule.with_eager_sends();
        }
        Ok(schedule)
    }

    /// The way of a blocking `call` through the communicator's shared segment, if the
    /// selection table chooses one (whether the communicator has a segment is found out when
    /// the call runs).
    fn shared_plan(&self, call: &Collective<'_>) -> Result<Option<SharedPlan>, Error> {
        let n = self.size();
        let spans = hier::count_clusters(&self.clusters());
        if n < 2 || spans > 1 || self.shared.in_effect.coll_shm_bytes == 0 {
            return Ok(None);
        }
        let table = &self.shared.in_effect.coll.selection;
        let call_of = |bytes: usize, commutative: bool| Call {
            bytes,
            ranks: n,
            clusters: spans,
            commutative,
            in_place: false,
        };
        let (kind, on, plan) = match *call {
            Collective::Barrier => (Shareable::Barrier, call_of(0, true), SharedPlan::Barrier),
            Collective::Bcast { bytes, root } => {
                if self.shared.in_effect.coll.net_bcast.is_some() {
                    return Ok(None);
                }
                (
                    Shareable::Bcast,
                    call_of(bytes, true),
                    SharedPlan::Bcast { bytes, root },
                )
            }
            Collective::Reduce {
                bytes,
                elem,
                root,
                commutative,
            } => (
                Shareable::Reduce,
                call_of(bytes, commutative),
                SharedPlan::Reduce {
                    bytes,
                    elem,
                    root: Some(root),
                    in_place: false,
                },
            ),
            Collective::Allreduce {
                bytes,
                elem,
                commutative,
                in_place,
            } => (
                Shareable::Allreduce,
                Call {
                    in_place,
                    ..call_of(bytes, commutative)
                },
                SharedPlan::Reduce {
                    bytes,
                    elem,
                    root: None,
                    in_place,
                },
            ),
            Collective::Allgather { block } => (
                Shareable::Allgather,
                call_of(block, true),
                SharedPlan::Allgather { block },
            ),
            Collective::Alltoall { block } => (
                Shareable::Alltoall,
                call_of(block, true),
                SharedPlan::Alltoall { block },
            ),
            _ => return Ok(None),
        };
        let half = crate::coll::segment::half_of(self.shared.in_effect.coll_shm_bytes);
        Ok((table.shared(kind, on) && plan.fits(n, half)).then_some(plan))
    }

    /// Chooses the algorithm for `call` on this communicator (the one place selection happens).
    pub fn plan(&self, call: &Collective<'_>) -> Result<Schedule, Error> {
        let table = &self.shared.in_effect.coll.selection;
        let (me, n) = (self.rank(), self.size());
        let clusters = self.clusters();
        let spans = hier::count_clusters(&clusters);
        let call_of = |bytes: usize, commutative: bool| Call {
            bytes,
            ranks: n,
            clusters: spans,
            commutative,
            in_place: false,
        };
        self.check_call(call)?;
        Ok(match *call {
            Collective::Barrier => match table.barrier(call_of(0, true)) {
                BarrierAlgorithm::Dissemination | BarrierAlgorithm::SharedMemory => {
                    alg::barrier_dissemination(me, n)
                }
                BarrierAlgorithm::Hierarchical => hier::barrier(me, &clusters),
            },
            Collective::Bcast { bytes, root } => match &self.shared.in_effect.coll.net_bcast {
                Some(net) => net.schedule(&self.group.world_of, me, root, bytes)?,
                None => self.bcast_schedule(table, &clusters, bytes, root),
            },
            Collective::Reduce {
                bytes,
                root,
                commutative,
                ..
            } => {
                let flat = || alg::reduce_binomial(me, n, root, bytes, commutative, false);
                match table.reduce(call_of(bytes, commutative)) {
                    ReduceAlgorithm::Binomial | ReduceAlgorithm::SharedMemory => flat(),
                    ReduceAlgorithm::Hierarchical => {
                        hier::reduce(me, &clusters, root, bytes, commutative, false)
                            .unwrap_or_else(flat)
                    }
                }
            }
            Collective::Allreduce {
                bytes,
                elem,
                commutative,
                in_place,
            } => self.allreduce_schedule(table, &clusters, bytes, elem, commutative, in_place),
            Collective::Gather { block, root } => match table.gather(call_of(block, true)) {
                GatherAlgorithm::Linear => alg::gather_linear(me, n, root, block, false),
                GatherAlgorithm::Hierarchical => hier::gather(me, &clusters, root, block),
            },
            Collective::Scatter { block, root } => alg::scatter_linear(me, n, root, block, false),
            Collective::Allgather { block } => match table.allgather(call_of(block, true)) {
                AllgatherAlgorithm::Ring | AllgatherAlgorithm::SharedMemory => {
                    alg::allgather_ring(me, n, block, false)
                }
                AllgatherAlgorithm::Hierarchical => hier::allgather(me, &clusters, block),
            },
            Collective::Alltoall { block } => match table.alltoall(call_of(block, true)) {
                AlltoallAlgorithm::Pairwise | AlltoallAlgorithm::SharedMemory => {
                    alg::alltoall_pairwise(me, n, block)
                }
                AlltoallAlgorithm::Hierarchical => hier::alltoall(me, &clusters, block),
            },
            Collective::Gatherv {
                counts,
                displs,
                root,
            } => alg::gatherv_linear(me, n, root, counts, displs, false),
            Collective::Scatterv {
                counts,
                displs,
                root,
            } => alg::scatterv_linear(me, n, root, counts, displs, false),
            Collective::Allgatherv { counts, displs } => {
                alg::allgatherv_ring(me, n, counts, displs, false)
            }
            Collective::Alltoallv {
                send_counts,
                send_displs,
                recv_counts,
                recv_displs,
            } => alg::alltoallv_pairwise(me, n, send_counts, send_displs, recv_counts, recv_displs),
            Collective::ReduceScatter { counts } => alg::reduce_scatter(me, n, counts, false),
            Collective::Scan { bytes, exclusive } => {
                alg::scan_recursive_doubling(me, n, bytes, exclusive, false)
            }
        })
    }

    /// Returns once every rank of the communicator has called it.
    pub fn barrier(&self) -> Result<(), Error> {
        self.run_schedule(self.planned(&Collective::Barrier)?, &[], &mut [], None)
    }

    /// Copies `buf` of rank `root` into `buf` of every rank.
    pub fn bcast<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<(), Error> {
        let buf: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let bytes = buf.len();
        self.run_schedule(
            self.planned(&Collective::Bcast { bytes, root })?,
            &[],
            buf,
            None,
        )
    }

    /// [`Comm::bcast`] along the plan `scheduler` (FEF, ECEF, TTCC… of
    /// `ferry_sched::hetero`) builds from `costs`, a cost model indexed by rank of this
    /// communicator: a network-aware broadcast chosen at the call site. Every rank must pass
    /// the same scheduler and costs.
    pub fn bcast_with<T: Pod>(
        &self,
        buf: &mut [T],
        root: usize,
        scheduler: &dyn ferry_sched::hetero::BcastScheduler,
        costs: &dyn ferry_sched::hetero::CostModel,
    ) -> Result<(), Error> {
        self.check_root(root)?;
        if costs.size() != self.size() {
            return Err(Error::Config(format!(
                "the cost model covers {} ranks, the communicator has {}",
                costs.size(),
                self.size()
            )));
        }
        let buf: &mut [u8] = bytemuck::cast_slice_mut(buf);
        if buf.is_empty() {
            // Nothing to carry on any rank (see `crate::coll::empty`).
            return Ok(());
        }
        let schedule =
            crate::coll::netaware::schedule_for(scheduler, costs, self.rank(), root, buf.len());
        self.run_schedule(Planned::check(schedule)?, &[], buf, None)
    }

    fn reduce_by<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        reduce: Reducer,
        commutative: bool,
        root: usize,
    ) -> Result<(), Error> {
        let bytes = std::mem::size_of_val(send);
        let schedule = self.planned(&Collective::Reduce {
            bytes,
            elem: std::mem::size_of::<T>(),
            root,
            commutative,
        })?;
        self.run_typed(schedule, send, recv, Some(reduce))
    }

    /// Combines `send` of every rank element-wise with `op` into `recv` of `root` (other ranks'
    /// `recv` is not used and may be empty).
    pub fn reduce<T: Reducible>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<(), Error> {
        self.reduce_by(send, recv, typed_reducer::<T>(op)?, true, root)
    }

    /// Like [`Comm::reduce`] with a user operation, which must be associative; a
    /// non-commutative one is applied in rank order.
    pub fn reduce_with<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Fn(T, T) -> T + 'static,
        commutative: bool,
        root: usize,
    ) -> Result<(), Error> {
        self.reduce_by(send, recv, reducer(op), commutative, root)
    }

    fn allreduce_plan<T>(
        &self,
        bytes: usize,
        commutative: bool,
        in_place: bool,
    ) -> Result<Planned, Error> {
        self.planned(&Collective::Allreduce {
            bytes,
            elem: std::mem::size_of::<T>(),
            commutative,
            in_place,
        })
    }

    fn allreduce_by<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        reduce: Reducer,
        commutative: bool,
    ) -> Result<(), Error> {
        let schedule = self.allreduce_plan::<T>(std::mem::size_of_val(send), commutative, false)?;
        self.run_typed(schedule, send, recv, Some(reduce))
    }

    /// Combines `send` of every rank element-wise with `op` into `recv` of every rank.
    pub fn allreduce<T: Reducible>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.allreduce_by(send, recv, typed_reducer::<T>(op)?, true)
    }

    /// [`Comm::allreduce`] with the input taken from, and the result left in, `buf`.
    pub fn allreduce_in_place<T: Reducible>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        let schedule = self.allreduce_plan::<T>(std::mem::size_of_val(buf), true, true)?;
        let reduce = typed_reducer::<T>(op)?;
        self.run_schedule(schedule, &[], bytemuck::cast_slice_mut(buf), Some(reduce))
    }

    /// [`Comm::allreduce`] with a user operation (associative; applied in rank order unless
    /// `commutative`).
    pub fn allreduce_with<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Fn(T, T) -> T + 'static,
        commutative: bool,
    ) -> Result<(), Error> {
        self.allreduce_by(send, recv, reducer(op), commutative)
    }

    /// Every rank's `send` lands, in rank order, in `recv` of every rank (`size × send.len()`).
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        let block = std::mem::size_of_val(send);
        self.run_typed(
            self.planned(&Collective::Allgather { block })?,
            send,
            recv,
            None,
        )
    }

    /// Every rank's `send` lands, in rank order, in `recv` of `root` (others' `recv` may be empty).
    pub fn gather<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<(), Error> {
        let block = std::mem::size_of_val(send);
        let schedule = self.planned(&Collective::Gather { block, root })?;
        self.run_typed(schedule, send, recv, None)
    }

    /// Block r of `root`'s `send` (`size` equal blocks) lands in `recv` of rank r.
    pub fn scatter<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<(), Error> {
        let block = std::mem::size_of_val(recv);
        let schedule = self.planned(&Collective::Scatter { block, root })?;
        self.run_typed(schedule, send, recv, None)
    }

    /// Block j of `send` goes to rank j; block i of `recv` comes from rank i.
    pub fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        let block = std::mem::size_of_val(send) / self.size().max(1);
        if block * self.size() != std::mem::size_of_val(send) {
            return Err(Error::Config(format!(
                "alltoall send buffer of {} bytes does not split into {} blocks",
                std::mem::size_of_val(send),
                self.size()
            )));
        }
        self.run_typed(
            self.planned(&Collective::Alltoall { block })?,
            send,
            recv,
            None,
        )
    }

    /// Element counts or displacements in bytes.
    fn bytes_of<T>(elems: &[usize]) -> Vec<usize> {
        elems.iter().map(|e| e * std::mem::size_of::<T>()).collect()
    }

    /// Rank r's `send` lands at element `displs[r]` of `root`'s `recv` (`counts[r]` elements).
    pub fn gatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<(), Error> {
        let (counts, displs) = (&Self::bytes_of::<T>(counts), &Self::bytes_of::<T>(displs));
        let schedule = self.planned(&Collective::Gatherv {
            counts,
            displs,
            root,
        })?;
        self.run_typed(schedule, send, recv, None)
    }

    /// `counts[r]` elements at `displs[r]` of `root`'s `send` land in `recv` of rank r.
    pub fn scatterv<T: Pod>(
        &self,
        send: &[T],
        counts: &[usize],
        displs: &[usize],
        recv: &mut [T],
        root: usize,
    ) -> Result<(), Error> {
        let (counts, displs) = (&Self::bytes_of::<T>(counts), &Self::bytes_of::<T>(displs));
        let schedule = self.planned(&Collective::Scatterv {
            counts,
            displs,
            root,
        })?;
        self.run_typed(schedule, send, recv, None)
    }

    /// Rank r's `send` (`counts[r]` elements) lands at `displs[r]` of `recv` on every rank.
    pub fn allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<(), Error> {
        let (counts, displs) = (&Self::bytes_of::<T>(counts), &Self::bytes_of::<T>(displs));
        let schedule = self.planned(&Collective::Allgatherv { counts, displs })?;
        self.run_typed(schedule, send, recv, None)
    }

    /// `send_counts[j]` elements at `send_displs[j]` go to rank j; `recv_counts[i]` elements
    /// from rank i land at `recv_displs[i]`.
    pub fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<(), Error> {
        let schedule = self.planned(&Collective::Alltoallv {
            send_counts: &Self::bytes_of::<T>(send_counts),
            send_displs: &Self::bytes_of::<T>(send_displs),
            recv_counts: &Self::bytes_of::<T>(recv_counts),
            recv_displs: &Self::bytes_of::<T>(recv_displs),
        })?;
        self.run_typed(schedule, send, recv, None)
    }

    /// Reduces every rank's `send` (sum of `counts` elements) with `op`; rank r receives the
    /// `counts[r]` elements of the result that follow those of lower ranks.
    pub fn reduce_scatter<T: Reducible>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<(), Error> {
        let counts = &Self::bytes_of::<T>(counts);
        let schedule = self.planned(&Collective::ReduceScatter { counts })?;
        self.run_typed(schedule, send, recv, Some(typed_reducer::<T>(op)?))
    }

    fn scan_by<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        reduce: Reducer,
        exclusive: bool,
    ) -> Result<(), Error> {
        let bytes = std::mem::size_of_val(send);
        let schedule = self.planned(&Collective::Scan { bytes, exclusive })?;
        self.run_typed(schedule, send, recv, Some(reduce))
    }

    /// Inclusive prefix reduction: rank r receives x0 op … op xr.
    pub fn scan<T: Reducible>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.scan_by(send, recv, typed_reducer::<T>(op)?, false)
    }

    /// Exclusive prefix reduction: rank r > 0 receives x0 op … op x(r-1); rank 0's `recv` is
    /// left as it was.
    pub fn exscan<T: Reducible>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.scan_by(send, recv, typed_reducer::<T>(op)?, true)
    }

    /// [`Comm::scan`] with a user operation (associative; applied in rank order).
    pub fn scan_with<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Fn(T, T) -> T + 'static,
    ) -> Result<(), Error> {
        self.scan_by(send, recv, reducer(op), false)
    }

    /// Starts a barrier; the request completes once every rank has started it.
    pub fn ibarrier<'s>(&self, scope: &'s Scope<'s, '_>) -> Result<Request<'s>, Error> {
        let id = self.start_schedule(self.planned(&Collective::Barrier)?, &[], &mut [], None)?;
        Ok(scope.track(self, id))
    }

    /// Starts a broadcast (see [`Comm::bcast`]).
    pub fn ibcast<'s, T: Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        root: usize,
    ) -> Result<Request<'s>, Error> {
        let buf: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let bytes = buf.len();
        let id = self.start_schedule(
            self.planned(&Collective::Bcast { bytes, root })?,
            &[],
            buf,
            None,
        )?;
        Ok(scope.track(self, id))
    }

    /// Starts an allreduce (see [`Comm::allreduce`]).
    pub fn iallreduce<'s, T: Reducible>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
        op: ReduceOp,
    ) -> Result<Request<'s>, Error> {
        let schedule = self.allreduce_plan::<T>(std::mem::size_of_val(send), true, false)?;
        let id = self.start_schedule(
            schedule,
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            Some(typed_reducer::<T>(op)?),
        )?;
        Ok(scope.track(self, id))
    }

    /// Every rank contributes `mine` (the same length everywhere); all contributions in rank
    /// order. Used by communicator construction.
    pub(crate) fn allgather_bytes(&self, mine: &[u8]) -> Result<Vec<u8>, Error> {
        let mut all = vec![0u8; mine.len() * self.size()];
        self.allgather(mine, &mut all)?;
        Ok(all)
    }
}
