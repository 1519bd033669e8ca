//! Blocking collectives run straight on the caller's buffers: the schedules that need no
//! scratch and run in order with eager messages — a broadcast between two ranks, the leaves
//! and the root of a binomial reduction between two ranks, the leaves of a tree, a scatter's
//! leaves.
//!
//! The executor sets a call up for schedules of many steps (a view of the call with its
//! buffers and scratch, step states, the call record), which such a call does not need: about
//! half of a 2-rank 8-byte broadcast's instructions, and more of a reduction's, went there.
//! Each step here is the same message the executor would send (the collective context, the
//! tag of the call's number and the step's message number), so ranks that run the call
//! through the executor (another rank's schedule needs scratch, or its buffers need stand-ins)
//! match it as before.

use crate::coll::{internal, step_tag, Planned, Reducer};
use crate::comm::Comm;
use crate::engine::Completion;
use crate::error::Error;
use crate::raw::SendMode;
use ferry_sched::{Buffer, Op, Region};

/// The error of a step's message whose length is not the `expected` one of its region: a
/// longer one (the ranks passed different counts) is a truncation naming the sender, a
/// shorter one a mismatch. `world_of` maps the communicator's ranks to world ranks.
pub(crate) fn length_error(world_of: &[u32], done: &Completion, expected: usize) -> Error {
    let sender = world_of
        .iter()
        .position(|&w| w == done.source)
        .unwrap_or(usize::MAX);
    if done.message_len > expected {
        return Error::Truncated {
            sender,
            tag: done.tag,
            message_len: done.message_len,
            buffer_len: expected,
        };
    }
    Error::Protocol {
        rank: sender,
        detail: format!(
            "collective: message of {} bytes where {expected} were expected (the ranks passed different counts)",
            done.message_len
        ),
    }
}

impl Comm {
    /// Runs blocking call `schedule` on the caller's buffers here if it needs no scratch, its
    /// buffers are long enough (the executor's stand-ins handle short ones) and it runs in
    /// order with every message under `eager` bytes, as [`Shared::run_in_order`] would run it;
    /// `None`, having done nothing, otherwise. A message of the wrong length fails the call
    /// only after its last step, so that the other ranks are not left waiting.
    ///
    /// [`Shared::run_in_order`]: crate::comm::Shared
    pub(crate) fn run_direct(
        &self,
        schedule: &Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        reduce: Option<&Reducer>,
        eager: usize,
    ) -> Option<Result<(), Error>> {
        let s = schedule.schedule();
        if !schedule.runs_direct_below(eager) || send.1 < s.send_bytes || recv.1 < s.recv_bytes {
            return None;
        }
        let at = |region: &Region| match region.buffer {
            Buffer::Send => send.0.wrapping_add(region.offset) as *mut u8,
            Buffer::Recv => recv.0.wrapping_add(region.offset),
            // `runs_direct_below` says there is none.
            Buffer::Scratch(_) => std::ptr::null_mut(),
        };
        let (context, call) = (self.context + 1, self.calls.next(false));
        let mut pending = Vec::new();
        let mut failed = None;
        for step in &s.steps {
            match step.op {
                Op::Send { peer, seq, region } => {
                    let dest = self.group.world_of[peer];
                    let tag = step_tag(call, seq);
                    let mut engine = self.shared.engine.borrow_mut();
                    if !engine.send_eager_now(context, dest, tag, at(&region), region.len) {
                        let buf = at(&region);
                        match engine.isend(context, dest, tag, buf, region.len, SendMode::Standard)
                        {
                            Ok(id) => pending.push(id),
                            Err(e) => return Some(Err(e)),
                        }
                    }
                }
                Op::Recv { peer, seq, region } => {
                    let source = self.group.world_of[peer];
                    let tag = step_tag(call, seq);
                    let buf = at(&region);
                    match self.shared.receive(context, source, tag, buf, region.len) {
                        Ok(done) if done.message_len != region.len && failed.is_none() => {
                            failed = Some(length_error(&self.group.world_of, &done, region.len));
                        }
                        Ok(_) => {}
                        Err(e) => return Some(Err(e)),
                    }
                }
                Op::Copy { src, dst } => {
                    // SAFETY: both regions lie inside the caller's buffers (validated, and the
                    // buffers are as long as the schedule's); `copy` allows overlap.
                    unsafe { std::ptr::copy(at(&src), at(&dst), src.len) };
                }
                Op::Reduce { src, dst, order } => {
                    let Some(reduce) = reduce else {
                        return Some(Err(internal("a reduce step without an operation")));
                    };
                    // SAFETY: as for the copy; a schedule never reduces a region into itself,
                    // and MPI forbids the send and receive buffers to overlap.
                    let (s, d) = unsafe {
                        (
                            std::slice::from_raw_parts(at(&src), src.len),
                            std::slice::from_raw_parts_mut(at(&dst), dst.len),
                        )
                    };
                    reduce(s, d, order);
                }
                // `runs_direct_below` says there is none.
                Op::RecvFirst { .. } => return Some(Err(internal("a first-of receive"))),
            }
        }
        for id in pending {
            if let Err(e) = self.shared.wait(id) {
                return Some(Err(e));
            }
        }
        Some(failed.map_or(Ok(()), Err))
    }
}
