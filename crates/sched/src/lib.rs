//! Collectives as **schedules**: plain data, no I/O.
//!
//! A [`Schedule`] is what one rank does for one collective call: a small DAG of [`Step`]s —
//! send, receive, receive-the-first-of-several, local reduce, copy — over byte [`Region`]s of the
//! caller's send buffer, receive buffer and scratch buffers. A step may start once every step it
//! depends on has completed. Schedulers (binomial, ring, recursive doubling, …, and the
//! network-aware FEF/ECEF/TTCC) only build schedules; executors run them: the runtime in
//! `ferry-core` on real transports (so every collective is nonblocking for free), the simulator
//! in `ferry-sim` on a cost model, and [`interpret`] here, in memory on real bytes, for tests.
//!
//! Messages are paired by order: a [`ScheduleBuilder`] numbers the messages of each ordered pair
//! of ranks in the order their steps are created, so the k-th send from a to b is received by the
//! k-th receive at b from a. Schedulers therefore only have to create both sides in the same
//! order, which an algorithm written for "rank r" does by construction.
//!
//! This crate must not depend on any transport, clock or other ferry crate.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod algorithms;
pub mod hetero;
pub mod hierarchical;
mod interpret;
pub use interpret::{interpret, ReduceFn};

/// A rank in the communicator the schedule is for.
pub type Rank = usize;
/// Index of a step in its schedule.
pub type StepId = u32;

/// Which buffer a region lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buffer {
    /// The caller's send buffer (read only).
    Send,
    /// The caller's receive buffer.
    Recv,
    /// Scratch buffer `i`, of `Schedule::scratch[i]` bytes, owned by the executor.
    Scratch(u16),
}

/// `len` bytes at `offset` of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    /// The buffer.
    pub buffer: Buffer,
    /// First byte.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl Region {
    /// `len` bytes at `offset` of `buffer`.
    pub fn new(buffer: Buffer, offset: usize, len: usize) -> Region {
        Region {
            buffer,
            offset,
            len,
        }
    }

    /// The sub-region `[offset, offset + len)` of this region.
    pub fn sub(&self, offset: usize, len: usize) -> Region {
        Region::new(self.buffer, self.offset + offset, len)
    }
}

/// Operand order of a reduction, which matters for non-commutative operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// `dst = src ⊕ dst` (the incoming data comes from lower ranks).
    SrcFirst,
    /// `dst = dst ⊕ src` (the incoming data comes from higher ranks).
    DstFirst,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Send `region` to `peer`; `seq` numbers the messages from this rank to `peer`.
    Send {
        /// Destination rank.
        peer: Rank,
        /// Message number within the pair (assigned by the builder).
        seq: u32,
        /// What to send.
        region: Region,
    },
    /// Receive the `seq`-th message from `peer` into `region` (the sizes must agree).
    Recv {
        /// Source rank.
        peer: Rank,
        /// Message number within the pair (assigned by the builder).
        seq: u32,
        /// Where it goes.
        region: Region,
    },
    /// Several peers send the same data; the first copy to arrive completes the step and lands
    /// in `region`; later copies are received and dropped (two-tree broadcasts).
    RecvFirst {
        /// (source rank, message number) of each copy.
        from: Vec<(Rank, u32)>,
        /// Where the first copy goes.
        region: Region,
    },
    /// Element-wise reduction of `src` into `dst` with the call's operation.
    Reduce {
        /// Operand that is read.
        src: Region,
        /// Operand that is read and overwritten.
        dst: Region,
        /// Operand order.
        order: Order,
    },
    /// Copies `src` to `dst`.
    Copy {
        /// From.
        src: Region,
        /// To.
        dst: Region,
    },
}

/// One node of the DAG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What it does.
    pub op: Op,
    /// Steps that must complete before this one starts (all earlier in the schedule).
    pub deps: Vec<StepId>,
}

/// What one rank does in one collective call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schedule {
    /// The rank this schedule is for.
    pub rank: Rank,
    /// Ranks in the communicator.
    pub size: usize,
    /// Bytes the caller's send buffer must hold.
    pub send_bytes: usize,
    /// Bytes the caller's receive buffer must hold.
    pub recv_bytes: usize,
    /// Sizes of the scratch buffers the executor provides, zero-filled.
    pub scratch: Vec<usize>,
    /// The steps, in an order that respects their dependencies. Among steps that are ready at
    /// once, executors start sends in this order (a node sends one message at a time in the cost
    /// model, so the order is part of the schedule).
    pub steps: Vec<Step>,
}

impl Schedule {
    /// Bytes of `buffer` in this schedule.
    pub fn buffer_len(&self, buffer: Buffer) -> usize {
        match buffer {
            Buffer::Send => self.send_bytes,
            Buffer::Recv => self.recv_bytes,
            Buffer::Scratch(i) => self.scratch.get(i as usize).copied().unwrap_or(0),
        }
    }

    /// Checks what an executor relies on: regions inside their buffers, dependencies on earlier
    /// steps only, peers inside the communicator and not this rank, no writes to the send buffer.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        let bad = |step: usize, why: String| {
            Err(ScheduleError {
                rank: self.rank,
                step,
                why,
            })
        };
        for (i, step) in self.steps.iter().enumerate() {
            if let Some(&d) = step.deps.iter().find(|&&d| d as usize >= i) {
                return bad(i, format!("depends on step {d}, which is not earlier"));
            }
            let (reads, writes, peers): (Vec<&Region>, Vec<&Region>, Vec<Rank>) = match &step.op {
                Op::Send { peer, region, .. } => (vec![region], vec![], vec![*peer]),
                Op::Recv { peer, region, .. } => (vec![], vec![region], vec![*peer]),
                Op::RecvFirst { from, region } => {
                    (vec![], vec![region], from.iter().map(|f| f.0).collect())
                }
                Op::Reduce { src, dst, .. } => (vec![src, dst], vec![dst], vec![]),
                Op::Copy { src, dst } => (vec![src], vec![dst], vec![]),
            };
            for r in reads.iter().chain(&writes) {
                if r.offset
                    .checked_add(r.len)
                    .is_none_or(|end| end > self.buffer_len(r.buffer))
                {
                    return bad(
                        i,
                        format!(
                            "{r:?} lies outside its buffer of {} bytes",
                            self.buffer_len(r.buffer)
                        ),
                    );
                }
            }
            if let Some(w) = writes.iter().find(|w| w.buffer == Buffer::Send) {
                return bad(i, format!("writes the send buffer at {w:?}"));
            }
            if let Some(p) = peers.iter().find(|&&p| p >= self.size || p == self.rank) {
                return bad(i, format!("peer {p} is not another rank of {}", self.size));
            }
            if let Op::Reduce { src, dst, .. } | Op::Copy { src, dst } = &step.op {
                if src.len != dst.len {
                    return bad(i, format!("operands of {} and {} bytes", src.len, dst.len));
                }
            }
        }
        Ok(())
    }
}

/// A schedule that an executor must not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("schedule of rank {rank}, step {step}: {why}")]
pub struct ScheduleError {
    /// Rank of the schedule.
    pub rank: Rank,
    /// Offending step.
    pub step: usize,
    /// What is wrong.
    pub why: String,
}

/// Builds a schedule, numbering messages per peer in creation order.
#[derive(Debug)]
pub struct ScheduleBuilder {
    schedule: Schedule,
    sent: Vec<u32>,
    received: Vec<u32>,
}

impl ScheduleBuilder {
    /// A schedule for `rank` of `size` ranks with the given user buffer sizes.
    pub fn new(rank: Rank, size: usize, send_bytes: usize, recv_bytes: usize) -> ScheduleBuilder {
        ScheduleBuilder {
            schedule: Schedule {
                rank,
                size,
                send_bytes,
                recv_bytes,
                scratch: vec![],
                steps: vec![],
            },
            sent: vec![0; size],
            received: vec![0; size],
        }
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.schedule.rank
    }

    /// Ranks in the communicator.
    pub fn size(&self) -> usize {
        self.schedule.size
    }

    /// A new zero-filled scratch buffer of `len` bytes.
    pub fn scratch(&mut self, len: usize) -> Buffer {
        self.schedule.scratch.push(len);
        Buffer::Scratch(self.schedule.scratch.len() as u16 - 1)
    }

    fn push(&mut self, op: Op, deps: &[StepId]) -> StepId {
        self.schedule.steps.push(Step {
            op,
            deps: deps.to_vec(),
        });
        self.schedule.steps.len() as StepId - 1
    }

    /// Sends `region` to `peer` after `deps`.
    pub fn send(&mut self, peer: Rank, region: Region, deps: &[StepId]) -> StepId {
        let seq = self.sent[peer];
        self.sent[peer] += 1;
        self.push(Op::Send { peer, seq, region }, deps)
    }

    /// Receives from `peer` into `region` after `deps`.
    pub fn recv(&mut self, peer: Rank, region: Region, deps: &[StepId]) -> StepId {
        let seq = self.received[peer];
        self.received[peer] += 1;
        self.push(Op::Recv { peer, seq, region }, deps)
    }

    /// Receives the first of copies sent by each of `peers` into `region` after `deps`.
    pub fn recv_first(&mut self, peers: &[Rank], region: Region, deps: &[StepId]) -> StepId {
        let from = peers
            .iter()
            .map(|&p| {
                let seq = self.received[p];
                self.received[p] += 1;
                (p, seq)
            })
            .collect();
        self.push(Op::RecvFirst { from, region }, deps)
    }

    /// Reduces `src` into `dst` after `deps`.
    pub fn reduce(&mut self, src: Region, dst: Region, order: Order, deps: &[StepId]) -> StepId {
        self.push(Op::Reduce { src, dst, order }, deps)
    }

    /// Copies `src` to `dst` after `deps`.
    pub fn copy(&mut self, src: Region, dst: Region, deps: &[StepId]) -> StepId {
        self.push(Op::Copy { src, dst }, deps)
    }

    /// Every step so far (a dependency list meaning "after all of these").
    pub fn all(&self) -> Vec<StepId> {
        (0..self.schedule.steps.len() as StepId).collect()
    }

    /// The finished schedule.
    pub fn finish(self) -> Schedule {
        self.schedule
    }
}
