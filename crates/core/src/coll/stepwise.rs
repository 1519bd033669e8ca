//! Blocking collectives whose schedules run in order (see `runs_in_order`) with eager
//! messages, run step by step on the caller's buffers: a broadcast, barrier or reduction
//! between two ranks, the tree and recursive-doubling collectives of short messages, the
//! leaves of a scatter.
//!
//! The executor sets a call up for schedules whose steps wait on each other in any order (a
//! view of the call with its buffers, step states, the call record), which such a call does
//! not need: about half of a 2-rank 8-byte broadcast's instructions, and more of a
//! reduction's, went there. Each step here is the same message the executor would send (the
//! collective context, the tag of the call's number and the step's message number), so ranks
//! that run the call through the executor (their buffers need stand-ins) match it as before.
//!
//! A send that does not go out at once still reads its region where it lies, so a later step
//! that depends on it (one that writes there) waits for it first, as in the executor.

use crate::coll::executor::{internal, step_tag, Planned, Reducer};
use crate::comm::Comm;
use crate::engine::ReqId;
use crate::engine::SendMode;
use crate::error::Error;
use ferry_sched::{Buffer, Op, Order, Region, Schedule, Step};

/// The error of a step's message whose length is not the `expected` one of its region: a
/// longer one (the ranks passed different counts) is a truncation naming the sender, a
/// shorter one a mismatch. `world_of` maps the communicator's ranks to world ranks.
pub(crate) fn length_error(
    world_of: &[u32],
    (source, tag): (u32, i32),
    message_len: usize,
    expected: usize,
) -> Error {
    let sender = world_of
        .iter()
        .position(|&w| w == source)
        .unwrap_or(usize::MAX);
    if message_len > expected {
        return Error::Truncated {
            sender,
            tag,
            message_len,
            buffer_len: expected,
        };
    }
    Error::Protocol {
        rank: sender,
        detail: format!(
            "collective: message of {message_len} bytes where {expected} were expected (the ranks passed different counts)"
        ),
    }
}

/// The shortest message a step combines where it lies in the ring ([`Comm::recv_reducing`]):
/// below, copying it out first is cheaper than the extra copy and hand-over (2-rank reduce
/// loops: 1 KiB 0.14 against 0.18 µs, 4 KiB 0.40 against 0.37).
const REDUCE_IN_PLACE_FROM: usize = 4096;

impl Comm {
    /// Runs blocking call `schedule` here if it runs in order with every message under
    /// `eager` bytes and its buffers are long enough (the executor's stand-ins handle short
    /// ones); `None`, having done nothing, otherwise. A message of the wrong length fails the
    /// call only after its last step, so that the other ranks are not left waiting.
    pub(crate) fn run_direct(
        &self,
        schedule: &Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        reduce: Option<&Reducer>,
        eager: usize,
    ) -> Option<Result<(), Error>> {
        let s = schedule.schedule();
        if !schedule.runs_in_order_below(eager) || send.1 < s.send_bytes || recv.1 < s.recv_bytes {
            return None;
        }
        let (mode, buffers) = (schedule.send_mode(), (send, recv));
        if let ([step], true) = (s.steps.as_slice(), s.scratch.is_empty()) {
            if let Some(ran) = self.run_one(step, mode, buffers) {
                return Some(ran);
            }
        }
        // Sends still going out: (step, request). Empty at the end unless a step failed.
        let mut pending = Vec::new();
        if s.scratch.is_empty() {
            return Some(self.run_steps(s, mode, buffers, &mut [], reduce, &mut pending));
        }
        let mut scratch = self.shared.coll.borrow_mut().spare.scratch_for(&s.scratch);
        let ran = self.run_steps(s, mode, buffers, &mut scratch, reduce, &mut pending);
        if pending.is_empty() {
            (self.shared.coll.borrow_mut().spare).keep_scratch(&mut scratch);
        } else {
            // The call failed with sends of it still queued, which may read their scratch
            // later: it is neither reused nor freed.
            std::mem::forget(scratch);
        }
        Some(ran)
    }

    /// A schedule of one message and nothing else (a 2-rank broadcast, a tree's leaf), without
    /// the bookkeeping of [`Comm::run_steps`] (a 2-rank 8 B broadcast's receiving side: 921 →
    /// 854 instructions a call). `None` for a step that is not a message.
    fn run_one(
        &self,
        step: &Step,
        mode: SendMode,
        (send, recv): ((*const u8, usize), (*mut u8, usize)),
    ) -> Option<Result<(), Error>> {
        // The schedule has no scratch, so its regions are in the caller's buffers.
        let at = |region: &Region| match region.buffer {
            Buffer::Send => send.0.wrapping_add(region.offset),
            _ => recv.0.wrapping_add(region.offset).cast_const(),
        };
        Some(match step.op {
            Op::Send { peer, seq, region } => {
                let tag = step_tag(self.calls.next(false), seq);
                match self.send_step(peer, tag, at(&region), region.len, mode) {
                    Ok(Some(id)) => self.shared.wait(id).map(drop),
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Op::Recv { peer, seq, region } => {
                let tag = step_tag(self.calls.next(false), seq);
                match self.recv_step(peer, tag, at(&region).cast_mut(), region.len) {
                    Ok(Some(wrong_length)) => Err(wrong_length),
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            _ => return None,
        })
    }

    /// Sends message `tag` of `len` bytes at `buf` to communicator rank `peer` in `mode`:
    /// at once if the transport takes it (`None`), else as a request to wait for.
    #[inline(always)]
    fn send_step(
        &self,
        peer: usize,
        tag: i32,
        buf: *const u8,
        len: usize,
        mode: SendMode,
    ) -> Result<Option<ReqId>, Error> {
        let (context, dest) = (self.context + 1, self.group.world_of[peer]);
        let mut engine = self.shared.engine.borrow_mut();
        if engine.send_eager_now(context, dest, tag, buf, len) {
            return Ok(None);
        }
        engine.isend(context, dest, tag, buf, len, mode).map(Some)
    }

    /// Receives message `tag` from communicator rank `peer` into `len` bytes at `buf`,
    /// waiting for it; `Some` error if it had another length.
    #[inline(always)]
    fn recv_step(
        &self,
        peer: usize,
        tag: i32,
        buf: *mut u8,
        len: usize,
    ) -> Result<Option<Error>, Error> {
        let (context, source) = (self.context + 1, self.group.world_of[peer]);
        let sent = self.shared.receive(context, source, tag, buf, len)?;
        Ok((sent != len).then(|| length_error(&self.group.world_of, (source, tag), sent, len)))
    }

    /// A receive from communicator rank `peer` whose message the next step combines with
    /// `len` bytes at `src` into the `len` bytes at `dst` that it lands in: the message is
    /// combined with `src` into `dst` where it lies in the shared-memory ring. That reads the
    /// message once instead of copying it out first, and copies neither operand into `dst`
    /// (the root of a 2-rank 64 KiB reduce spent two thirds of its time copying the message
    /// out, then a third of what was left copying its own input). False when the message is
    /// not to be had in place: the caller runs both steps as usual.
    fn recv_reducing(
        &self,
        peer: usize,
        tag: i32,
        (src, dst, len): (*const u8, *mut u8, usize),
        reduce: &Reducer,
        order: Order,
        failed: &mut Option<Error>,
    ) -> Result<bool, Error> {
        let (context, source) = (self.context + 1, self.group.world_of[peer]);
        let read = |message: &[u8]| {
            if message.len() == len {
                // SAFETY: `src` and `dst` hold `len` bytes each, none of them the ring's; a
                // schedule never reduces a region into itself, and MPI forbids the send and
                // receive buffers to overlap.
                let (src, dst) = unsafe {
                    (
                        std::slice::from_raw_parts(src, len),
                        std::slice::from_raw_parts_mut(dst, len),
                    )
                };
                match order {
                    Order::SrcFirst => reduce.apply_apart(src, message, dst),
                    Order::DstFirst => reduce.apply_apart(message, src, dst),
                }
            }
        };
        let Some(sent) = self.shared.receive_in_place(context, source, tag, read)? else {
            return Ok(false);
        };
        if sent != len {
            *failed = failed
                .take()
                .or_else(|| Some(length_error(&self.group.world_of, (source, tag), sent, len)));
        }
        Ok(true)
    }

    /// The steps of `s` in order, sent in `mode`; `pending` holds the sends still going out
    /// (step, request), none once it returns `Ok`. As in the executor, once a message of the
    /// wrong length has come the later sends are empty, so that the ranks after this one fail
    /// too instead of combining wrong data.
    fn run_steps(
        &self,
        s: &Schedule,
        mode: SendMode,
        (send, recv): ((*const u8, usize), (*mut u8, usize)),
        scratch: &mut [Vec<u128>],
        reduce: Option<&Reducer>,
        pending: &mut Vec<(usize, ReqId)>,
    ) -> Result<(), Error> {
        let mut at = |region: &Region| match region.buffer {
            Buffer::Send => send.0.wrapping_add(region.offset) as *mut u8,
            Buffer::Recv => recv.0.wrapping_add(region.offset),
            Buffer::Scratch(i) => scratch[i as usize]
                .as_mut_ptr()
                .cast::<u8>()
                .wrapping_add(region.offset),
        };
        let call = self.calls.next(false);
        let mut failed = None;
        let mut reduced_in_place = false;
        for (i, step) in s.steps.iter().enumerate() {
            if std::mem::take(&mut reduced_in_place) {
                continue; // the reduce step that followed a receive read in place
            }
            self.wait_for_sends(&step.deps, pending)?;
            if let (&Op::Recv { peer, seq, region }, Some(next), Some(reduce), None) =
                (&step.op, s.steps.get(i + 1), reduce, &failed)
            {
                if let &Op::Reduce { src, dst, order } = &next.op {
                    if dst == region && src.len == dst.len && dst.len >= REDUCE_IN_PLACE_FROM {
                        self.wait_for_sends(&next.deps, pending)?;
                        let (s_at, d_at) = (at(&src), at(&dst));
                        let tag = step_tag(call, seq);
                        reduced_in_place = self.recv_reducing(
                            peer,
                            tag,
                            (s_at, d_at, dst.len),
                            reduce,
                            order,
                            &mut failed,
                        )?;
                        if reduced_in_place {
                            continue;
                        }
                    }
                }
            }
            match step.op {
                Op::Send { peer, seq, region } => {
                    let len = if failed.is_some() { 0 } else { region.len };
                    let tag = step_tag(call, seq);
                    if let Some(id) = self.send_step(peer, tag, at(&region), len, mode)? {
                        pending.push((i, id));
                    }
                }
                Op::Recv { peer, seq, region } => {
                    let tag = step_tag(call, seq);
                    let wrong_length = self.recv_step(peer, tag, at(&region), region.len)?;
                    failed = failed.or(wrong_length);
                }
                Op::Copy { src, dst } => {
                    // SAFETY: both regions lie inside their buffers (validated; the caller's
                    // are as long as the schedule's); `copy` allows overlap.
                    unsafe { std::ptr::copy(at(&src), at(&dst), src.len) };
                }
                Op::Reduce { src, dst, order } => {
                    let reduce =
                        reduce.ok_or_else(|| internal("a reduce step without an operation"))?;
                    // SAFETY: as for the copy; a schedule never reduces a region into itself,
                    // and MPI forbids the send and receive buffers to overlap.
                    let (s, d) = unsafe {
                        (
                            std::slice::from_raw_parts(at(&src), src.len),
                            std::slice::from_raw_parts_mut(at(&dst), dst.len),
                        )
                    };
                    reduce.apply(s, d, order);
                }
                // `runs_in_order` says there is none.
                Op::RecvFirst { .. } => return Err(internal("a first-of receive")),
            }
        }
        while let Some(&(_, id)) = pending.last() {
            self.shared.wait(id)?;
            pending.pop();
        }
        failed.map_or(Ok(()), Err)
    }

    /// Waits for the sends among `pending` whose steps are in `deps` (a step may overwrite or
    /// reuse what they send only after), and drops them from it.
    #[inline]
    fn wait_for_sends(&self, deps: &[u32], pending: &mut Vec<(usize, ReqId)>) -> Result<(), Error> {
        while let Some(k) = pending
            .iter()
            .position(|(j, _)| deps.contains(&(*j as u32)))
        {
            self.shared.wait(pending.swap_remove(k).1)?;
        }
        Ok(())
    }
}
