//! Collective operations: a client of the engine's point-to-point surface, with one hook into
//! its progress ([`Collectives`] as the engine's [`Hook`]).
//!
//! The layers, each importing only those below it:
//! - `api`: the calls on a [`Comm`](crate::Comm) (`barrier`, `allreduce`, …, their
//!   nonblocking forms, and [`Collective`] for planning any call), which choose an algorithm
//!   and a way to run it, and the plans kept per communicator.
//! - `selection` and `settings`: which algorithm a call takes (the selection table, MPICH's
//!   thresholds built in, a JSON file to replace them), read with the rest of the
//!   configuration; `netaware`: broadcast schedules from measured link costs (FEF, ECEF, …).
//! - Three ways to run a call: `stepwise` runs a schedule whose steps wait on each other in
//!   order on the caller's buffers; `executor` runs any schedule as a request that every
//!   progress pass advances; `segment` runs a blocking call of ranks of one host through the
//!   communicator's shared-memory segment. `ways` records which of these each member took
//!   for each blocking call, so that members that went different ways end the job instead
//!   of hanging.
//! - `reductions`: MPI's predefined operations on typed elements.
//! - `empty`: calls that carry no data on any rank, which complete without communicating.
//!
//! [`Collectives`] owns all of the collective state of a rank: the running calls, their
//! spare allocations, the communicators' shared segments (weakly) and the kept plans. It sits
//! beside the engine in the rank's shared state, and every pass that drives the engine hands
//! it in as the hook.

pub(crate) mod api;
mod empty;
pub(crate) mod executor;
pub(crate) mod netaware;
#[cfg(test)]
mod pair_tests;
pub(crate) mod reductions;
pub(crate) mod segment;
pub(crate) mod selection;
pub(crate) mod settings;
pub(crate) mod stepwise;
pub(crate) mod ways;

pub use api::Collective;
pub use executor::{Planned, Reducer, Reduction};
pub use reductions::{ReduceOp, Reducible};

use crate::comm::Group;
use crate::engine::{Engine, Hook, ReqId};
use crate::error::Error;
use segment::Segment;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// The collective state of one rank.
#[derive(Default)]
pub(crate) struct Collectives {
    /// Calls in progress, advanced by every progress pass.
    running: Vec<executor::Collective>,
    /// The engine's count of completed requests when the running calls were last advanced.
    seen: u64,
    /// Failed peers the running calls were last checked against (fault-tolerant jobs).
    failures_seen: usize,
    /// Receives of redundant copies (two-tree broadcasts) with the buffers they land in.
    drains: Vec<(ReqId, Vec<u8>)>,
    /// Allocations of finished calls for the next ones.
    pub(crate) spare: executor::Spare,
    /// The shared segments of this rank's communicators, each with its group, held weakly
    /// so that a freed communicator's segment goes when a new one is made: for their limit,
    /// and for the looks of a wait that backs off (see [`Collectives::look`]).
    segments: Vec<(Weak<Group>, Rc<Segment>)>,
    /// When a wait last looked at them.
    segments_looked: Option<Instant>,
    /// Schedules kept for reuse (see `api::Comm::planned`).
    pub(crate) plans: api::Plans,
    /// The plan found last, looked at before `plans`: a loop of one collective skips the hash.
    pub(crate) last_plan: Option<api::KeptPlan>,
}

/// The least time between two looks at the members' ways through collectives.
const LOOK_AT_SEGMENTS_EVERY: Duration = Duration::from_millis(1);

impl Hook for Collectives {
    /// Each running call waits only for its own requests (and for its own steps, which an
    /// advance settles to the end), so it may move only once a request completed since the
    /// last advance; drained copies are freed on the same passes.
    #[inline(always)]
    fn wants_pass(&self, completions: u64) -> bool {
        (!self.running.is_empty() || !self.drains.is_empty()) && completions != self.seen
    }

    fn advance(&mut self, engine: &mut Engine) -> Result<bool, Error> {
        self.advance_running(engine)
    }

    #[inline(always)]
    fn watching(&self) -> bool {
        !self.segments.is_empty()
    }

    /// Fails if, in a segment, members went different ways through a blocking collective:
    /// that call can never complete. At most once a millisecond.
    #[cold]
    #[inline(never)]
    fn look(&mut self, now: Instant) -> Result<(), Error> {
        if (self.segments_looked).is_some_and(|at| now.duration_since(at) < LOOK_AT_SEGMENTS_EVERY)
        {
            return Ok(());
        }
        self.segments_looked = Some(now);
        self.kept_segments()
            .try_for_each(|segment| segment.check_paths())
    }
}

impl Collectives {
    /// Keeps the shared segment of the communicator of `group` (for the looks of
    /// [`Collectives::look`]); those of freed communicators are dropped.
    pub(crate) fn keep_segment(&mut self, group: &Rc<Group>, segment: &Rc<Segment>) {
        self.segments.retain(|(g, _)| g.strong_count() > 0);
        self.segments.push((Rc::downgrade(group), segment.clone()));
    }

    /// Segments of communicators not freed.
    pub(crate) fn live_segments(&self) -> usize {
        (self.segments.iter())
            .filter(|(group, _)| group.strong_count() > 0)
            .count()
    }

    fn kept_segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().map(|(_, segment)| &**segment)
    }

    /// Tells the members of every segment that this rank is finalizing (so that members
    /// that finalize wait for no one that finalizes too).
    pub(crate) fn finish_segments(&self) {
        self.kept_segments().for_each(|segment| segment.finish());
    }

    /// Whether in every segment every member has recorded this rank's latest blocking call;
    /// a rank that ends waits for that (its waits' looks then catch a member stuck in a call
    /// this rank went through another way, which only this rank, far ahead, could tell).
    pub(crate) fn segments_caught_up(&self) -> bool {
        self.kept_segments()
            .all(|segment| segment.members_caught_up())
    }
}
