//! Executes collective schedules (`ferry-sched`) on the engine.
//!
//! A running collective is a request like any other: it completes when the last step of its
//! schedule has. Every `progress` call advances every running collective — starting the steps
//! whose dependencies are done, in schedule order — so a rank blocked in any wait keeps its
//! collectives moving (which is what makes nonblocking collectives safe to mix with anything).
//! Messages go on the communicator's collective context with tag `call << 16 | seq`, where
//! `call` numbers the collective calls of the communicator and `seq` the messages of a pair.

use super::Collectives;
use crate::engine::SendMode;
use crate::engine::{Completion, Engine, Fault, InPlace, Received, ReqId};
use crate::error::Error;
use ferry_sched::{Buffer, Op, Order, Region, Schedule};
use std::rc::Rc;

/// A reduction on raw bytes, whole elements; `⊕` takes the earlier rank's operand on its
/// left. A closure `Fn(src, dst, order)` is one with the in-place form only.
pub trait Reduction {
    /// `dst = src ⊕ dst` ([`Order::SrcFirst`]) or `dst = dst ⊕ src`.
    fn apply(&self, src: &[u8], dst: &mut [u8], order: Order);

    /// `out = first ⊕ second`, the three of one length. A reduction that can should write
    /// it in one pass over the three buffers; by default `second` is copied into `out` and
    /// combined there.
    fn apply_apart(&self, first: &[u8], second: &[u8], out: &mut [u8]) {
        let n = out.len().min(second.len());
        out[..n].copy_from_slice(&second[..n]);
        self.apply(first, out, Order::SrcFirst);
    }
}

impl<F: Fn(&[u8], &mut [u8], Order)> Reduction for F {
    #[inline]
    fn apply(&self, src: &[u8], dst: &mut [u8], order: Order) {
        self(src, dst, order)
    }
}

/// The call's reduction (a clone shares it).
#[derive(Clone)]
pub struct Reducer(Rc<dyn Reduction>);

impl Reducer {
    /// Wraps `reduction`.
    pub fn new(reduction: impl Reduction + 'static) -> Reducer {
        Reducer(Rc::new(reduction))
    }

    /// `dst = src ⊕ dst` or `dst ⊕ src`, as `order` says.
    #[inline]
    pub fn apply(&self, src: &[u8], dst: &mut [u8], order: Order) {
        self.0.apply(src, dst, order);
    }

    /// `out = first ⊕ second`, without copying either operand into `out` first where the
    /// reduction can: one pass over three buffers instead of a copy and a pass over two.
    #[inline]
    pub fn apply_apart(&self, first: &[u8], second: &[u8], out: &mut [u8]) {
        self.0.apply_apart(first, second, out);
    }
}

enum StepState {
    Waiting,
    /// A send or receive in flight.
    Running(ReqId),
    /// The copies of a RecvFirst in flight; those after the first land in their own buffer.
    RunningFirst(Vec<(ReqId, Option<Vec<u8>>)>),
    Done,
}

/// The tag of message `seq` of a pair in collective call number `call`.
pub(crate) fn step_tag(call: u32, seq: u32) -> i32 {
    (((call & 0x7fff) << 16) | seq) as i32
}

/// What both executors work on: a call's schedule, buffers and messages.
pub(crate) struct CallView {
    schedule: Rc<Schedule>,
    context: u32,
    call: u32,
    world_of: std::rc::Rc<[u32]>,
    send: *const u8,
    recv: *mut u8,
    /// Scratch buffers as u128s: 16-byte aligned, so typed reductions can view them in place.
    scratch: Vec<Vec<u128>>,
    reduce: Option<Reducer>,
    mode: SendMode,
    /// A message of the wrong length arrived (the ranks passed different counts). The call
    /// still runs to its end, so that no other rank waits forever for what this one would
    /// have forwarded, and reports this error then. Its later sends are empty, so that the
    /// ranks after it see a mismatch too instead of wrong data.
    failed: Option<Error>,
    /// Buffers standing in for the caller's when its own were too small.
    stand_ins: Vec<Vec<u8>>,
}

/// One collective call in progress.
pub(crate) struct Collective {
    id: ReqId,
    view: CallView,
    steps: Vec<StepState>,
    /// Steps before this index are all done (the next pass starts here).
    done_before: usize,
    left: usize,
    /// Slower copies still landing in the call's buffers (two-tree broadcasts): the call ends
    /// only once they have.
    lingering: Vec<ReqId>,
}

/// What a collective call hands to the executor.
pub(crate) struct CollectiveCall {
    /// Checked by [`checked`].
    pub schedule: Rc<Schedule>,
    pub context: u32,
    pub call: u32,
    pub world_of: std::rc::Rc<[u32]>,
    pub send: *const u8,
    pub recv: *mut u8,
    pub reduce: Option<Reducer>,
    pub mode: SendMode,
    /// This rank's arguments are wrong (see `Collective::failed`): it takes part anyway, with
    /// stand-in buffers kept in `stand_ins`, so that the others do not wait for it forever.
    pub failed: Option<Error>,
    pub stand_ins: Vec<Vec<u8>>,
}

pub(crate) fn internal(detail: impl std::fmt::Display) -> Error {
    Error::Protocol {
        rank: usize::MAX,
        detail: format!("collective: {detail}"),
    }
}

/// A schedule checked for running ([`Planned::check`], or [`Comm::planned`](crate::Comm::planned)),
/// cheap to clone: what the executor takes.
#[derive(Debug, Clone)]
pub struct Planned {
    schedule: Rc<Schedule>,
    /// If it [runs in order](runs_in_order): the largest message that must go eagerly for
    /// that (0 when none must).
    in_order_up_to: Option<usize>,
    /// What a blocking call does instead through the communicator's shared segment, where
    /// it has one (the selection table's `shared_memory`).
    shared: Option<crate::coll::segment::SharedPlan>,
    /// How its messages are sent ([`Planned::with_eager_sends`]).
    mode: SendMode,
    /// A call that carries no data on any rank ([`Planned::nothing`]): it completes at once,
    /// without a message, a call number or a record of its way.
    moves_nothing: bool,
}

impl Planned {
    /// Checks `schedule`: regions inside their buffers, dependencies backwards, and message
    /// numbers that fit the tag.
    pub fn check(schedule: Schedule) -> Result<Planned, Error> {
        let schedule = checked(schedule)?;
        let in_order_up_to = runs_in_order(&schedule).map(|needs_eager| match needs_eager {
            true => largest_message(&schedule),
            false => 0,
        });
        Ok(Planned {
            schedule,
            in_order_up_to,
            shared: None,
            mode: SendMode::Standard,
            moves_nothing: false,
        })
    }

    /// The plan of a call that every rank knows carries no data anywhere (see
    /// `crate::coll::empty`): it completes as it starts, on every rank alike.
    pub(crate) fn nothing() -> Planned {
        Planned {
            schedule: Rc::new(Schedule::default()),
            in_order_up_to: Some(0),
            shared: None,
            mode: SendMode::Standard,
            moves_nothing: true,
        }
    }

    /// Whether the call carries no data on any rank, and so completes without communicating.
    #[inline(always)]
    pub fn moves_nothing(&self) -> bool {
        self.moves_nothing
    }

    /// This plan with its messages sent eagerly up to what one frame carries
    /// ([`SendMode::Eager`]) rather than up to the transport's eager limit: for reductions,
    /// whose receiver combines each message as it comes, so that a sender need not wait for
    /// it to be ready (on one host, a 2-rank 64 KiB MPI_Reduce in a loop took half the time).
    pub(crate) fn with_eager_sends(mut self) -> Planned {
        self.mode = SendMode::Eager;
        self
    }

    /// How its messages are sent.
    pub(crate) fn send_mode(&self) -> SendMode {
        self.mode
    }

    /// This plan with `shared` as the way of a blocking call on a shared segment.
    pub(crate) fn with_shared(
        mut self,
        shared: Option<crate::coll::segment::SharedPlan>,
    ) -> Planned {
        self.shared = shared;
        self
    }

    /// The shared-segment way of a blocking call, if the selection table chose one.
    pub(crate) fn shared(&self) -> Option<crate::coll::segment::SharedPlan> {
        self.shared
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Whether a blocking call may run it step by step ([`Comm::run_direct`](crate::Comm))
    /// when every message under `eager` bytes goes eagerly (see [`Engine::eager_floor`]).
    pub(crate) fn runs_in_order_below(&self, eager: usize) -> bool {
        self.in_order_up_to.is_some_and(|largest| largest <= eager)
    }

    pub(crate) fn into_inner(self) -> Rc<Schedule> {
        self.schedule
    }
}

/// Whether running the steps one at a time in schedule order, waiting for each receive where
/// it stands, can keep no other rank waiting longer than the dependencies already make it:
/// every send depends (through its dependencies) on every receive before it, and no step is a
/// first-of receive. A rank blocked on a receive then holds back only its own later receives
/// and local steps. That the held-back receives keep nobody waiting needs their messages to
/// go eagerly (a rendezvous sender would wait for the receive to be posted), unless nothing
/// is held back: one receive, with no step up to it waiting for a send (a 2-rank exchange).
/// `Some(true)` when the messages must go eagerly (the caller checks the [largest
/// message](largest_message) against the eager limits), `Some(false)` when they need not.
/// Schedules of more than 64 steps are not looked at.
fn runs_in_order(schedule: &Schedule) -> Option<bool> {
    let steps = &schedule.steps;
    if steps.len() > 64 {
        return None;
    }
    // Bit j of reaches[i]: step i depends on step j, directly or not.
    let mut reaches = [0u64; 64];
    let (mut receives, mut sends) = (0u64, 0u64);
    // Whether a step up to the first receive waits for a send; so does a reduction into the
    // received region right after it, which `Comm::run_steps` may do as the message comes.
    let mut waits_before_receiving = false;
    let mut first_receive = None;
    for (i, step) in steps.iter().enumerate() {
        let reach = step
            .deps
            .iter()
            .fold(0, |r, &d| r | reaches[d as usize] | 1 << d);
        reaches[i] = reach;
        let combines_first = match (first_receive, &step.op) {
            (Some((r, region)), Op::Reduce { dst, .. }) => r + 1 == i && *dst == region,
            _ => false,
        };
        if receives == 0 || combines_first {
            waits_before_receiving |= reach & sends != 0;
        }
        if let (None, Op::Recv { region, .. }) = (first_receive, &step.op) {
            first_receive = Some((i, *region));
        }
        match step.op {
            Op::Send { .. } if receives & !reach != 0 => return None,
            Op::Send { .. } => sends |= 1 << i,
            Op::Recv { .. } => receives |= 1 << i,
            Op::RecvFirst { .. } => return None,
            _ => {}
        }
    }
    Some(receives.count_ones() > 1 || waits_before_receiving)
}

/// The largest message a schedule sends or receives.
fn largest_message(schedule: &Schedule) -> usize {
    schedule
        .steps
        .iter()
        .map(|s| match s.op {
            Op::Send { region, .. } | Op::Recv { region, .. } | Op::RecvFirst { region, .. } => {
                region.len
            }
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

fn checked(schedule: Schedule) -> Result<Rc<Schedule>, Error> {
    schedule.validate().map_err(internal)?;
    let too_many = schedule.steps.iter().any(|s| match &s.op {
        Op::Send { seq, .. } | Op::Recv { seq, .. } => *seq > 0xffff,
        Op::RecvFirst { from, .. } => from.iter().any(|f| f.1 > 0xffff),
        _ => false,
    });
    if too_many {
        return Err(internal(
            "more than 65536 messages between one pair in one call",
        ));
    }
    Ok(Rc::new(schedule))
}

impl CallView {
    fn ptr(&mut self, region: &Region) -> *mut u8 {
        let base = match region.buffer {
            Buffer::Send => self.send as *mut u8,
            Buffer::Recv => self.recv,
            Buffer::Scratch(i) => self.scratch[i as usize].as_mut_ptr() as *mut u8,
        };
        base.wrapping_add(region.offset)
    }

    /// A step's message must have the length the schedule expects (`expected`, its region's):
    /// a longer one (the ranks passed different counts) is a truncation naming the sender, a
    /// shorter one a mismatch.
    fn check_length(&self, done: &Completion, expected: usize) -> Result<(), Error> {
        match done.message_len == expected {
            true => Ok(()),
            false => Err(crate::coll::stepwise::length_error(
                &self.world_of,
                (done.source, done.tag),
                done.message_len,
                expected,
            )),
        }
    }

    /// Records the first length mismatch of step `i`'s message; the call goes on (see
    /// `failed`). Sends have nothing to check.
    fn note_length(&mut self, i: usize, done: &Completion) {
        let expected = match self.schedule.steps[i].op {
            Op::Recv { region, .. } | Op::RecvFirst { region, .. } => region.len,
            _ => return,
        };
        if self.failed.is_none() && done.message_len != expected {
            self.failed = self.check_length(done, expected).err();
        }
    }

    /// Takes step `i`'s request `id` if it is done, noting its message's length; whether it
    /// was.
    fn finish_step(&mut self, i: usize, id: ReqId, eng: &mut Engine) -> Result<bool, Error> {
        if !eng.proto.is_done(id) {
            return Ok(false);
        }
        let done = eng.take(id).ok_or_else(|| internal("request vanished"))?;
        self.note_length(i, &done);
        Ok(true)
    }

    fn tag(&self, seq: u32) -> i32 {
        step_tag(self.call, seq)
    }

    /// Starts step `i`, whose dependencies are done. Returns its new state.
    fn start(&mut self, i: usize, eng: &mut Engine) -> Result<StepState, Error> {
        let schedule = Rc::clone(&self.schedule);
        Ok(match schedule.steps[i].op {
            Op::Send { peer, seq, region } => {
                let (dest, tag, buf) = (self.world_of[peer], self.tag(seq), self.ptr(&region));
                let len = if self.failed.is_some() { 0 } else { region.len };
                if eng.send_eager_now(self.context + 1, dest, tag, buf, len) {
                    StepState::Done
                } else {
                    let id = eng.isend(self.context + 1, dest, tag, buf, len, self.mode)?;
                    StepState::Running(id)
                }
            }
            Op::Recv { peer, seq, region } => {
                let (source, tag, buf) = (self.world_of[peer], self.tag(seq), self.ptr(&region));
                // Often the message is there already: done now, not on the next pass.
                match eng.recv_now_or_post(self.context + 1, source, tag, buf, region.len)? {
                    Received::Now(done) => {
                        self.note_length(i, &done);
                        StepState::Done
                    }
                    Received::Later(id) => match self.finish_step(i, id, eng)? {
                        true => StepState::Done,
                        false => StepState::Running(id),
                    },
                }
            }
            Op::RecvFirst { ref from, region } => {
                let mut reqs = Vec::with_capacity(from.len());
                for (k, &(peer, seq)) in from.iter().enumerate() {
                    let world = self.world_of[peer];
                    let tag = Some(self.tag(seq));
                    if k == 0 {
                        let id = eng.irecv(
                            self.context + 1,
                            Some(world),
                            tag,
                            self.ptr(&region),
                            region.len,
                        )?;
                        reqs.push((id, None));
                    } else {
                        let mut spare = vec![0u8; region.len];
                        let id = eng.irecv(
                            self.context + 1,
                            Some(world),
                            tag,
                            spare.as_mut_ptr(),
                            region.len,
                        )?;
                        reqs.push((id, Some(spare)));
                    }
                }
                StepState::RunningFirst(reqs)
            }
            Op::Reduce { src, dst, order } => {
                let (s, d) = (self.ptr(&src) as *const u8, self.ptr(&dst));
                let reduce = self
                    .reduce
                    .as_ref()
                    .ok_or_else(|| internal("reduce step without an operation"))?;
                // SAFETY: validate() put both regions inside their buffers (user buffers lent for
                // the call, scratch owned here); a schedule never reduces a region into itself.
                let (s, d) = unsafe {
                    (
                        std::slice::from_raw_parts(s, src.len),
                        std::slice::from_raw_parts_mut(d, dst.len),
                    )
                };
                reduce.apply(s, d, order);
                StepState::Done
            }
            Op::Copy { src, dst } => {
                let (s, d) = (self.ptr(&src) as *const u8, self.ptr(&dst));
                // SAFETY: both regions lie inside their buffers (validated); `copy` allows overlap.
                unsafe { std::ptr::copy(s, d, src.len) };
                StepState::Done
            }
        })
    }
}

impl Collective {
    /// Moves every step as far as it goes. Returns whether anything changed. One pass in step
    /// order is enough: dependencies point backwards, so a step that finishes in the pass has
    /// its dependants looked at later in the same pass.
    fn advance(
        &mut self,
        eng: &mut Engine,
        drains: &mut Vec<(ReqId, Vec<u8>)>,
    ) -> Result<bool, Error> {
        let mut changed = false;
        for i in self.done_before..self.steps.len() {
            let next = match &mut self.steps[i] {
                StepState::Done => continue,
                StepState::Waiting => {
                    let deps = &self.view.schedule.steps[i].deps;
                    if !deps
                        .iter()
                        .all(|&d| matches!(self.steps[d as usize], StepState::Done))
                    {
                        continue;
                    }
                    self.view.start(i, eng)?
                }
                StepState::Running(id) => {
                    let id = *id;
                    if !self.view.finish_step(i, id, eng)? {
                        continue;
                    }
                    StepState::Done
                }
                StepState::RunningFirst(reqs) => {
                    let Some(k) = reqs.iter().position(|(id, _)| eng.proto.is_done(*id)) else {
                        continue;
                    };
                    let StepState::RunningFirst(mut reqs) =
                        std::mem::replace(&mut self.steps[i], StepState::Waiting)
                    else {
                        unreachable!("matched RunningFirst above")
                    };
                    let (id, spare) = reqs.swap_remove(k);
                    let done = eng.take(id).ok_or_else(|| internal("request vanished"))?;
                    self.view.note_length(i, &done);
                    let schedule = Rc::clone(&self.view.schedule);
                    if let (Some(spare), Op::RecvFirst { region, from }) =
                        (spare, &schedule.steps[i].op)
                    {
                        // A later copy won: put it where the step's region is.
                        let d = self.view.ptr(region);
                        // SAFETY: region validated; spare has region.len bytes.
                        unsafe { std::ptr::copy_nonoverlapping(spare.as_ptr(), d, spare.len()) };
                        // The copy bound for the region itself (from the first sender) is
                        // slower, and the region goes back to its owner when the call
                        // ends. Not matched yet: it is received into a buffer of its own
                        // instead (its sender must still see it received). Already
                        // arriving: the call ends once it has landed (same bytes, so the
                        // steps reading the region meanwhile are unharmed).
                        if let Some(pos) = reqs.iter().position(|(_, s)| s.is_none()) {
                            let (direct, _) = reqs.swap_remove(pos);
                            eng.cancel(direct);
                            match eng.take(direct) {
                                Some(c) if c.cancelled => {
                                    let (peer, seq) = from[0];
                                    let mut spare = vec![0u8; region.len];
                                    let id = eng.irecv(
                                        self.view.context + 1,
                                        Some(self.view.world_of[peer]),
                                        Some(self.view.tag(seq)),
                                        spare.as_mut_ptr(),
                                        region.len,
                                    )?;
                                    drains.push((id, spare));
                                }
                                Some(_) => {}
                                None => self.lingering.push(direct),
                            }
                        }
                    }
                    // Slower copies into their own buffers are drained by the engine.
                    for (id, spare) in reqs {
                        drains.push((id, spare.unwrap_or_default()));
                    }
                    StepState::Done
                }
            };
            if matches!(next, StepState::Done) {
                self.left -= 1;
            }
            self.steps[i] = next;
            changed = true;
        }
        if !self.lingering.is_empty() {
            let before = self.lingering.len();
            self.lingering.retain(|&id| match eng.proto.is_done(id) {
                true => {
                    eng.take(id);
                    false
                }
                false => true,
            });
            changed |= self.lingering.len() != before;
        }
        while matches!(self.steps.get(self.done_before), Some(StepState::Done)) {
            self.done_before += 1;
        }
        Ok(changed)
    }
}

/// How a collective call stands once started.
pub(crate) enum Started {
    /// All of it ran at once (its sends went out, its messages were there): no request.
    Done,
    /// Still running, as this request.
    Running(ReqId),
}

impl Collectives {
    /// A request that is complete already: that of a nonblocking call which carries no data
    /// ([`Planned::nothing`]).
    pub(crate) fn done_at_once(eng: &mut Engine) -> ReqId {
        let done = collective_done(eng, 0);
        eng.new_done_request(done)
    }

    /// Starts a collective call; the returned request completes with the schedule.
    pub(crate) fn start(&mut self, eng: &mut Engine, call: CollectiveCall) -> Result<ReqId, Error> {
        let len = call.schedule.recv_bytes;
        match self.begin(eng, call)? {
            Started::Running(id) => Ok(id),
            Started::Done => Ok(eng.new_done_request(collective_done(eng, len))),
        }
    }

    /// Starts a collective call and runs what it can now; a request stands for it only if it
    /// must go on running (a blocking call that finished at once then skips making,
    /// completing and taking one).
    pub(crate) fn begin(
        &mut self,
        eng: &mut Engine,
        call: CollectiveCall,
    ) -> Result<Started, Error> {
        if eng.is_revoked(call.context) {
            return Err(Error::Revoked);
        }
        if let Some(rank) = failed_member(eng, &call.world_of) {
            return Err(Error::ProcFailed { rank });
        }
        let n = call.schedule.steps.len();
        let mut steps = self.spare.steps.pop().unwrap_or_default();
        steps.extend((0..n).map(|_| StepState::Waiting));
        let mut c = Collective {
            id: 0, // given when it is queued
            view: self.view_of(call),
            steps,
            done_before: 0,
            left: n,
            lingering: Vec::new(),
        };
        c.advance(eng, &mut self.drains)?;
        if self.settle(&mut c)? {
            return Ok(Started::Done);
        }
        c.id = eng.new_hooked_request();
        let id = c.id;
        self.running.push(c);
        Ok(Started::Running(id))
    }

    /// The executors' view of `call`, with scratch buffers from the spares.
    pub(crate) fn view_of(&mut self, call: CollectiveCall) -> CallView {
        let scratch = self.spare.scratch_for(&call.schedule.scratch);
        CallView {
            scratch,
            schedule: call.schedule,
            context: call.context,
            call: call.call,
            world_of: call.world_of,
            send: call.send,
            recv: call.recv,
            reduce: call.reduce,
            mode: call.mode,
            failed: call.failed,
            stand_ins: call.stand_ins,
        }
    }

    /// Whether all of `c` is done; if so its allocations go back to the spares, and a call
    /// that received a message of the wrong length fails now.
    fn settle(&mut self, c: &mut Collective) -> Result<bool, Error> {
        if c.left > 0 || !c.lingering.is_empty() {
            return Ok(false);
        }
        self.spare.keep_steps(&mut c.steps);
        self.end_view(&mut c.view).map(|()| true)
    }

    /// Ends a finished call's view: its allocations go back to the spares, and a call that
    /// received a message of the wrong length fails now.
    pub(crate) fn end_view(&mut self, view: &mut CallView) -> Result<(), Error> {
        self.spare.keep_scratch(&mut view.scratch);
        view.stand_ins = Vec::new();
        match view.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Completes the request of a queued collective `c` if all of it is done (see `settle`).
    fn finish(&mut self, eng: &mut Engine, c: &mut Collective) -> Result<bool, Error> {
        let settled = self.settle(c);
        if !matches!(settled, Ok(false)) {
            let done = collective_done(eng, c.view.schedule.recv_bytes);
            eng.proto.complete(c.id, done);
        }
        settled
    }

    /// Advances every running collective and frees drained copies: the hook's pass.
    pub(super) fn advance_running(&mut self, eng: &mut Engine) -> Result<bool, Error> {
        self.seen = eng.proto.completions;
        let mut progressed = false;
        if eng.failed_peers().len() != self.failures_seen {
            progressed |= self.fail_calls_of_failed(eng);
        }
        if !self.running.is_empty() {
            // Advanced in place: a wait polls this often, and moving each collective out and
            // back would copy it every time.
            let mut running = std::mem::take(&mut self.running);
            let mut failed = None;
            for (i, c) in running.iter_mut().enumerate() {
                match c.advance(eng, &mut self.drains) {
                    Ok(moved) => progressed |= moved,
                    Err(e) => {
                        failed = Some((i, e));
                        break;
                    }
                }
            }
            if let Some((i, _)) = failed {
                // The error goes to the waiter; the failed call is not advanced again.
                running.remove(i);
            }
            let mut mismatch = None;
            if progressed {
                running.retain_mut(|c| match self.finish(eng, c) {
                    Ok(done) => !done,
                    Err(e) => {
                        mismatch.get_or_insert(e);
                        false
                    }
                });
            }
            // Steps only start sends and receives, never collectives: nothing was added.
            debug_assert!(self.running.is_empty());
            self.running = running;
            if let Some(e) = failed.map(|(_, e)| e).or(mismatch) {
                return Err(e);
            }
        }
        if self.drains.is_empty() {
            return Ok(progressed);
        }
        let before = self.drains.len();
        self.drains.retain(|(id, _)| match eng.proto.is_done(*id) {
            true => {
                eng.take(*id);
                false
            }
            false => true,
        });
        Ok(progressed || self.drains.len() != before)
    }
}

/// The communicator rank of the first member of `world_of` known to have failed (a
/// fault-tolerant job: collectives of a communicator with a failed member fail at once).
fn failed_member(eng: &Engine, world_of: &[u32]) -> Option<usize> {
    let failed = eng.failed_peers();
    if failed.is_empty() {
        return None;
    }
    world_of.iter().position(|r| failed.contains(r))
}

impl Collectives {
    /// Fails every running call with a member that failed: at every survivor alike, since
    /// each learns of every failure, so that none waits for a member that gave up its part.
    /// Its receives not yet matched are withdrawn; its scratch is never reused, since sends
    /// of it may still be going out.
    #[cold]
    fn fail_calls_of_failed(&mut self, eng: &mut Engine) -> bool {
        self.failures_seen = eng.failed_peers().len();
        let before = self.running.len();
        self.running.retain_mut(|c| {
            let Some(rank) = failed_member(eng, &c.view.world_of) else {
                return true;
            };
            for step in &mut c.steps {
                match std::mem::replace(step, StepState::Done) {
                    StepState::Running(id) => eng.cancel(id),
                    StepState::RunningFirst(copies) => {
                        copies.iter().for_each(|&(id, _)| eng.cancel(id));
                        std::mem::forget(copies);
                    }
                    StepState::Waiting | StepState::Done => {}
                }
            }
            std::mem::forget(std::mem::take(&mut c.view.scratch));
            let failed = crate::engine::faulted(Fault::ProcFailed, c.view.world_of[rank]);
            eng.proto.complete(c.id, failed);
            false
        });
        self.running.len() != before
    }
}

/// What a finished collective call of `len` received bytes completes with.
fn collective_done(eng: &Engine, len: usize) -> Completion {
    Completion {
        source: eng.proto.me,
        tag: 0,
        len,
        message_len: len,
        cancelled: false,
        fault: Fault::None,
    }
}

impl crate::comm::Shared {
    /// Waits for the message `(context, source, tag)` of a step and receives it into `cap`
    /// bytes at `buf`, taking it off its shared-memory ring when it comes (see
    /// [`Engine::take_arrived`]) instead of matching a posted receive. Returns the length the
    /// message had: one word, which the step reads from a register (a whole completion came
    /// back through the stack, and reading it whole right after it was written stalled).
    #[inline]
    pub(crate) fn receive(
        &self,
        context: u32,
        source: u32,
        tag: i32,
        buf: *mut u8,
        cap: usize,
    ) -> Result<usize, Error> {
        let mut idle = 0;
        loop {
            {
                let mut engine = self.engine.borrow_mut();
                match engine.take_arrived(context, source, tag, buf, cap)? {
                    Some(Received::Now(done)) => return Ok(done.message_len),
                    Some(Received::Later(id)) => {
                        drop(engine);
                        self.wait_until(|p| p.is_done(id))?;
                        return self
                            .engine
                            .borrow_mut()
                            .take(id)
                            .map(|done| done.message_len)
                            .ok_or_else(|| internal("a collective's receive vanished"));
                    }
                    None => idle = engine.wait_pass(&mut *self.coll.borrow_mut(), idle)?,
                }
            }
            // As in `Shared::wait_until`: a pass that found nothing lets other threads in.
            if let (true, Some(pause)) = (idle > 0, self.pause.get()) {
                pause();
            }
        }
    }

    /// Waits for the message `(context, source, tag)` of a step and hands `read` its payload
    /// where it lies in the shared-memory ring (see [`Engine::take_arrived_in_place`]), with
    /// the engine free (a user's operation may call MPI). Returns the length the message had,
    /// or `None` when it is not to be had so: the caller then receives it as usual.
    pub(crate) fn receive_in_place(
        &self,
        context: u32,
        source: u32,
        tag: i32,
        read: impl FnOnce(&[u8]),
    ) -> Result<Option<usize>, Error> {
        /// Frees the held record however `read` ends.
        struct Release<'a>(&'a crate::comm::Shared, usize);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.engine.borrow_mut().release_held(self.1);
            }
        }
        let mut idle = 0;
        loop {
            let taken = {
                let mut engine = self.engine.borrow_mut();
                match engine.take_arrived_in_place(context, source, tag)? {
                    InPlace::NotYet => {
                        idle = engine.wait_pass(&mut *self.coll.borrow_mut(), idle)?;
                        None
                    }
                    InPlace::Elsewhere => return Ok(None),
                    InPlace::Held(payload, len) => Some((payload, len)),
                }
            };
            if let Some((payload, len)) = taken {
                let _release = Release(self, source as usize);
                // SAFETY: the held payload stays whole and unchanged in the ring until the
                // release (progress passes skip a ring whose head is held).
                read(unsafe { std::slice::from_raw_parts(payload, len) });
                return Ok(Some(len));
            }
            if let (true, Some(pause)) = (idle > 0, self.pause.get()) {
                pause();
            }
        }
    }
}

/// Allocations of finished collectives, reused by the next ones.
#[derive(Default)]
pub(crate) struct Spare {
    steps: Vec<Vec<StepState>>,
    scratch_lists: Vec<Vec<Vec<u128>>>,
    scratch: Vec<Vec<u128>>,
}

impl Spare {
    /// Most of each kind kept, and the most bytes of scratch kept: a long-running job holds
    /// a few buffers for it, but a loop of 1 MiB reductions no longer maps, faults in and
    /// unmaps its scratch on every call (over half of a leaf's time).
    const KEEP: usize = 8;
    const SCRATCH_BYTES: usize = 16 << 20;

    fn keep_steps(&mut self, steps: &mut Vec<StepState>) {
        let mut steps = std::mem::take(steps);
        if self.steps.len() < Spare::KEEP {
            steps.clear();
            self.steps.push(steps);
        }
    }

    /// Buffers of `lens` bytes, kept ones where there are. Their contents are what an earlier
    /// call left (a schedule writes its scratch before it reads it): only bytes beyond a kept
    /// buffer's length are cleared, not all of them on every call.
    pub(crate) fn scratch_for(&mut self, lens: &[usize]) -> Vec<Vec<u128>> {
        if lens.is_empty() {
            return Vec::new();
        }
        let mut scratch = self.scratch_lists.pop().unwrap_or_default();
        for &len in lens {
            let mut buffer = self.scratch.pop().unwrap_or_default();
            if buffer.len() < len.div_ceil(16) {
                buffer.resize(len.div_ceil(16), 0);
            }
            scratch.push(buffer);
        }
        scratch
    }

    pub(crate) fn keep_scratch(&mut self, scratch: &mut Vec<Vec<u128>>) {
        if scratch.capacity() == 0 {
            return;
        }
        let mut scratch = std::mem::take(scratch);
        let bytes = |b: &Vec<u128>| b.capacity() * 16;
        for buffer in scratch.drain(..) {
            let held: usize = self.scratch.iter().map(bytes).sum();
            if self.scratch.len() < Spare::KEEP && held + bytes(&buffer) <= Spare::SCRATCH_BYTES {
                self.scratch.push(buffer);
            }
        }
        if self.scratch_lists.len() < Spare::KEEP {
            self.scratch_lists.push(scratch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_sched::{algorithms as alg, ScheduleBuilder};

    #[test]
    fn chains_of_receive_then_send_run_in_order() {
        for size in 1..=9 {
            for rank in 0..size {
                for schedule in [
                    alg::barrier_dissemination(rank, size),
                    alg::bcast_binomial(rank, size, size / 2, 8),
                    alg::allreduce_recursive_doubling(rank, size, 8, false),
                    alg::allreduce_recursive_doubling(rank, size, 8, true),
                    alg::reduce_binomial(rank, size, 0, 8, true, false),
                ] {
                    assert!(
                        runs_in_order(&schedule).is_some(),
                        "rank {rank} of {size}: {schedule:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_send_that_does_not_wait_for_an_earlier_receive_is_not_in_order() {
        let mut b = ScheduleBuilder::new(0, 2, 8, 8);
        b.recv(1, Region::new(Buffer::Recv, 0, 8), &[]);
        b.send(1, Region::new(Buffer::Send, 0, 8), &[]);
        assert!(runs_in_order(&b.finish()).is_none());

        // The same send after the receive it depends on is.
        let mut b = ScheduleBuilder::new(0, 2, 8, 8);
        let r = b.recv(1, Region::new(Buffer::Recv, 0, 8), &[]);
        b.send(1, Region::new(Buffer::Send, 0, 8), &[r]);
        assert!(runs_in_order(&b.finish()).is_some());

        // Depending on it through a local step counts too.
        let mut b = ScheduleBuilder::new(0, 2, 8, 16);
        let r = b.recv(1, Region::new(Buffer::Recv, 0, 8), &[]);
        let c = b.copy(
            Region::new(Buffer::Recv, 0, 8),
            Region::new(Buffer::Recv, 8, 8),
            &[r],
        );
        b.send(1, Region::new(Buffer::Recv, 8, 8), &[c]);
        assert!(runs_in_order(&b.finish()).is_some());
    }

    #[test]
    fn first_of_receives_are_not_in_order() {
        let mut b = ScheduleBuilder::new(0, 3, 0, 8);
        b.recv_first(&[1, 2], Region::new(Buffer::Recv, 0, 8), &[]);
        assert!(runs_in_order(&b.finish()).is_none());
    }

    #[test]
    fn only_messages_under_the_eager_limit_run_in_order() {
        // Rank 0 of 4 receives twice: the second receive waits behind the first.
        let planned = Planned::check(alg::allreduce_recursive_doubling(0, 4, 4096, true)).unwrap();
        assert!(planned.runs_in_order_below(4096));
        assert!(!planned.runs_in_order_below(4095));
    }

    #[test]
    fn one_receive_that_waits_for_no_send_runs_in_order_at_any_size() {
        for rank in 0..2 {
            for schedule in [
                alg::bcast_binomial(rank, 2, 0, 1 << 20),
                alg::allgather_ring(rank, 2, 1 << 20, false),
                alg::allreduce_recursive_doubling(rank, 2, 1 << 20, false),
            ] {
                let planned = Planned::check(schedule).unwrap();
                assert!(planned.runs_in_order_below(0), "rank {rank}: {planned:?}");
            }
        }
        // In place, the 2-rank allreduce combines into the buffer its send reads, after the
        // send: still one receive, before that wait.
        let planned = Planned::check(alg::allreduce_recursive_doubling(0, 2, 64, true)).unwrap();
        assert!(planned.runs_in_order_below(0));

        // A step that waits for a send before the receive would hold the receive back.
        let mut b = ScheduleBuilder::new(0, 2, 8, 16);
        let s = b.send(1, Region::new(Buffer::Send, 0, 8), &[]);
        let c = b.copy(
            Region::new(Buffer::Send, 0, 8),
            Region::new(Buffer::Recv, 8, 8),
            &[s],
        );
        b.recv(1, Region::new(Buffer::Recv, 0, 8), &[c]);
        let planned = Planned::check(b.finish()).unwrap();
        assert!(planned.runs_in_order_below(8));
        assert!(!planned.runs_in_order_below(7));

        // So would a reduction into the received region that waits for a send, which may
        // run as the message comes.
        let mut b = ScheduleBuilder::new(0, 2, 8, 8);
        let s = b.send(1, Region::new(Buffer::Recv, 0, 8), &[]);
        let r = b.recv(1, Region::new(Buffer::Recv, 0, 8), &[]);
        b.reduce(
            Region::new(Buffer::Send, 0, 8),
            Region::new(Buffer::Recv, 0, 8),
            ferry_sched::Order::SrcFirst,
            &[s, r],
        );
        let planned = Planned::check(b.finish()).unwrap();
        assert!(!planned.runs_in_order_below(7));
    }
}
