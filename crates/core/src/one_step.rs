//! Blocking collectives that are one message on this rank: the root and the leaf of a
//! broadcast between two ranks, the leaves of a binomial tree, a scatter's leaves.
//!
//! The executor sets a call up for schedules of many steps (a view of the call with its
//! buffers and scratch, step states, the call record), which a single send or receive between
//! the caller's buffer and one peer does not need: about half of a 2-rank 8-byte broadcast's
//! instructions went there. Such a call is made here directly, as the same message the
//! executor would send (the collective context, the tag of the call's number and the step's
//! message number), so ranks that run the call through the executor (another rank's schedule
//! has more steps, or its buffers need stand-ins) match it as before.

use crate::coll::{step_tag, Planned};
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
    /// Runs blocking call `schedule` on the caller's buffers here if it is one send or one
    /// receive of the caller's buffers that goes eagerly (as [`Comm::launch_and_wait`] would
    /// run it in order); `None`, having done nothing, for any other schedule, a buffer shorter
    /// than the schedule's (the executor's stand-ins handle it) or a reduction.
    pub(crate) fn run_one_step(
        &self,
        schedule: &Planned,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        eager: usize,
    ) -> Option<Result<(), Error>> {
        let s = schedule.schedule();
        let [step] = s.steps.as_slice() else {
            return None;
        };
        if !s.scratch.is_empty() || send.1 < s.send_bytes || recv.1 < s.recv_bytes {
            return None;
        }
        let at = |region: &Region| match region.buffer {
            Buffer::Send => Some(send.0.wrapping_add(region.offset) as *mut u8),
            Buffer::Recv => Some(recv.0.wrapping_add(region.offset)),
            Buffer::Scratch(_) => None,
        };
        let context = self.context + 1;
        match step.op {
            Op::Send { peer, seq, region } if region.len <= eager => {
                let (dest, buf) = (*self.group.world_of.get(peer)?, at(&region)?);
                let tag = step_tag(self.calls.next(false), seq);
                Some(self.send_one(context, dest, tag, buf, region.len))
            }
            Op::Recv { peer, seq, region } if region.len <= eager => {
                let (source, buf) = (*self.group.world_of.get(peer)?, at(&region)?);
                let tag = step_tag(self.calls.next(false), seq);
                let received = self.shared.receive(context, source, tag, buf, region.len);
                Some(
                    received.and_then(|done| match done.message_len == region.len {
                        true => Ok(()),
                        false => Err(length_error(&self.group.world_of, &done, region.len)),
                    }),
                )
            }
            _ => None,
        }
    }

    /// Sends one collective message and waits until its buffer may be reused.
    fn send_one(
        &self,
        context: u32,
        dest: u32,
        tag: i32,
        buf: *const u8,
        len: usize,
    ) -> Result<(), Error> {
        let mut engine = self.shared.engine.borrow_mut();
        if engine.send_eager_now(context, dest, tag, buf, len) {
            return Ok(());
        }
        let id = engine.isend(context, dest, tag, buf, len, SendMode::Standard)?;
        drop(engine);
        self.shared.wait(id).map(drop)
    }
}
