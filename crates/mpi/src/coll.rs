//! Collectives: each call is planned by the runtime (`Comm::plan`) on packed bytes. Buffers of
//! contiguous datatypes are used in place; others are packed into, or unpacked from, a staging
//! buffer that the request owns until it finishes. MPI_IN_PLACE is resolved here, by handing the
//! runtime the caller's data as the input.

use crate::abi::*;
use crate::check;
use crate::datatype::Datatype;
use crate::error::{fail, MpiError, Res};
use crate::ops;
use crate::p2p::{count_arg, Count};
use crate::request::{Request, Typed};
use crate::state::{running, Inter, OpObj, State};
use ferry_core::{Collective, Reducer, Reduction};
use ferry_sched::Order;
use std::ffi::{c_int, c_void};

pub(crate) mod large;
pub(crate) use large::Ints;
pub(crate) mod lean;
pub(crate) mod neighbor;
pub(crate) mod persistent;
pub(crate) use persistent::{defer_free, release as release_kept};

pub(crate) fn in_place(p: *const c_void) -> bool {
    p as usize == MPI_IN_PLACE
}

/// A user buffer the call will read or write (see [`check::buffer`]).
fn checked(t: &Typed) -> Res {
    check::buffer(t.base as *const c_void, t.count, &t.dt)
}

/// [`checked`] for each block.
fn all_checked(blocks: &[Typed]) -> Res {
    blocks.iter().try_for_each(checked)
}

/// A collective's send and receive buffers may only be the same memory through MPI_IN_PLACE
/// (MPI 4.1 §6.9.1 for reductions, the same rule for the others); as MPICH, report it when the
/// call `moves_data`, rather than read input the call is overwriting.
fn not_aliased(sendbuf: *const c_void, recvbuf: *const c_void, moves_data: bool) -> Res {
    if moves_data && !sendbuf.is_null() && sendbuf == recvbuf {
        return fail(
            MPI_ERR_BUFFER,
            "send and receive buffers are the same memory (use MPI_IN_PLACE)",
        );
    }
    Ok(())
}

/// The same rule for a buffer and a block of the other side: the receive buffer's own block
/// (gather, allgather) or the root's own block of the send buffer (scatter). MPICH reports it
/// too, and a process that went on would leave the others waiting in a call it never joined.
fn not_own_block(buf: *const c_void, block: &Typed) -> Res {
    if !in_place(buf) && block.bytes() > 0 && std::ptr::eq(buf as *const u8, block.base) {
        return fail(
            MPI_ERR_BUFFER,
            "the send buffer is this process's own block of the receive buffer (use MPI_IN_PLACE)",
        );
    }
    Ok(())
}

/// A packed input: the user's bytes when contiguous, else a staged copy.
struct Input {
    ptr: *const u8,
    len: usize,
    staged: Option<Vec<u8>>,
}

impl Input {
    fn none() -> Input {
        Input {
            ptr: std::ptr::null(),
            len: 0,
            staged: None,
        }
    }

    /// The data of `t`, checked first: every user buffer a collective reads comes through here,
    /// [`Input::copy_of`] or [`Input::gather`].
    fn of(t: &Typed) -> Res<Input> {
        checked(t)?;
        Ok(match t.direct() {
            Some(ptr) => Input {
                ptr,
                len: t.bytes(),
                staged: None,
            },
            None => Input::owned(t.pack()),
        })
    }

    /// A packed copy of `t` (an in-place input the call's output will overwrite).
    fn copy_of(t: &Typed) -> Res<Input> {
        checked(t)?;
        Ok(Input::owned(t.pack()))
    }

    fn owned(v: Vec<u8>) -> Input {
        Input {
            ptr: v.as_ptr(),
            len: v.len(),
            staged: Some(v),
        }
    }

    /// The blocks `(typed, packed offset)` one after the other.
    fn gather(blocks: &[Typed]) -> Res<Input> {
        all_checked(blocks)?;
        let total = blocks.iter().map(Typed::bytes).sum();
        let mut v = Vec::with_capacity(total);
        for b in blocks {
            v.extend_from_slice(&b.pack());
        }
        Ok(Input::owned(v))
    }
}

/// Staging bytes and the user blocks they unpack into, each at a packed offset.
type Staged = (Vec<u8>, Vec<(Typed, usize)>);

/// A packed output: the user's buffer when contiguous, else staging unpacked at the end.
struct Output {
    ptr: *mut u8,
    len: usize,
    /// Boxed: a `Prepared` moves through several calls, and smaller moves are cheaper.
    staged: Option<Box<Staged>>,
}

impl Output {
    fn none() -> Output {
        Output {
            ptr: std::ptr::null_mut(),
            len: 0,
            staged: None,
        }
    }

    fn scratch(len: usize) -> Output {
        Output::staged(vec![0u8; len], Vec::new())
    }

    /// Staging `v`, unpacked at the end into the blocks `at` (each at its packed offset).
    fn staged(mut v: Vec<u8>, at: Vec<(Typed, usize)>) -> Output {
        Output {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            staged: Some(Box::new((v, at))),
        }
    }

    /// `t` as one output; `prefill` packs its current contents first (in-place inputs).
    /// Every user buffer a collective writes comes through here or [`Blocks::output`], checked.
    fn of(t: &Typed, prefill: bool) -> Res<Output> {
        checked(t)?;
        Ok(match t.direct() {
            Some(ptr) => Output {
                ptr,
                len: t.bytes(),
                staged: None,
            },
            None => {
                let v = if prefill {
                    t.pack()
                } else {
                    vec![0u8; t.bytes()]
                };
                Output::staged(v, vec![(t.clone(), 0)])
            }
        })
    }

    /// Unpacks staged blocks into the user's buffers.
    fn finish(self) {
        if let Some(staged) = self.staged {
            let (v, blocks) = *staged;
            for (t, at) in blocks {
                t.unpack(&v[at..(at + t.bytes()).min(v.len())]);
            }
        }
    }
}

/// Per-rank blocks of a v-collective side: byte counts and displacements to plan with, and
/// where the data is.
struct Blocks {
    counts: Vec<usize>,
    displs: Vec<usize>,
    /// Contiguous type: the user buffer's data base. Otherwise staging is used.
    direct: Option<*mut u8>,
    typed: Vec<Typed>,
}

/// The blocks `counts[i]` elements of `dt` at element displacement `displs[i]` (or byte
/// displacement, for `byte_displs`) of `buf`.
fn blocks(
    dt: &Datatype,
    buf: *mut u8,
    counts: &[usize],
    displs: &[isize],
    byte_displs: bool,
) -> Res<Blocks> {
    let size = dt.size();
    let step = if byte_displs { 1 } else { dt.extent() };
    let too_far = |d: isize| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!(
                "displacement {d} of a datatype of extent {step} reaches past the address space"
            ),
        )
    };
    let typed: Vec<Typed> = counts
        .iter()
        .zip(displs)
        .map(|(&count, &d)| {
            let offset = d.checked_mul(step).ok_or_else(|| too_far(d))?;
            Ok(Typed {
                dt: dt.clone(),
                count,
                base: buf.wrapping_offset(offset),
            })
        })
        .collect::<Res<_>>()?;
    let byte_counts: Vec<usize> = counts
        .iter()
        .map(|&c| crate::types::bytes_of(dt, c))
        .collect::<Res<_>>()?;
    if dt.is_contiguous() && displs.iter().all(|&d| d >= 0) && !byte_displs {
        let base = buf.wrapping_offset(dt.contiguous_span(1).unwrap_or(0));
        let byte_displs = displs
            .iter()
            .map(|&d| (d as usize).checked_mul(size).ok_or_else(|| too_far(d)))
            .collect::<Res<_>>()?;
        return Ok(Blocks {
            counts: byte_counts,
            displs: byte_displs,
            direct: Some(base),
            typed,
        });
    }
    Ok(Blocks {
        displs: packed_displs(&byte_counts),
        counts: byte_counts,
        direct: None,
        typed,
    })
}

impl Blocks {
    fn input(&self) -> Res<Input> {
        all_checked(&self.typed)?;
        Ok(match self.direct {
            Some(ptr) => Input {
                ptr,
                len: ferry_sched::algorithms::extent(&self.counts, &self.displs),
                staged: None,
            },
            None => Input::gather(&self.typed)?,
        })
    }

    fn output(&self) -> Res<Output> {
        all_checked(&self.typed)?;
        Ok(match self.direct {
            Some(ptr) => Output {
                ptr,
                len: ferry_sched::algorithms::extent(&self.counts, &self.displs),
                staged: None,
            },
            None => {
                let v = vec![0u8; self.counts.iter().sum()];
                let at = self
                    .typed
                    .iter()
                    .cloned()
                    .zip(self.displs.iter().copied())
                    .collect();
                Output::staged(v, at)
            }
        })
    }
}

/// Where each block starts when the blocks lie back to back.
fn packed_displs(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

/// A reduction on packed bytes of `dt` with `op`, and whether it commutes.
fn reducer(dt: &Datatype, handle: Handle, op: OpObj) -> Res<(Reducer, bool)> {
    match op {
        OpObj::Builtin(op) => {
            let Some((b, _)) = dt.uniform_builtin() else {
                return fail(
                    MPI_ERR_OP,
                    format!("{op:?} needs a datatype made of one predefined type"),
                );
            };
            let op =
                ops::CheckedOp::new(op, b).map_err(|e| MpiError::new(MPI_ERR_OP, e.to_string()))?;
            Ok((builtin_reduction(op), true))
        }
        OpObj::User { f, commute } => {
            let dt = dt.clone();
            let apply = move |src: &[u8], dst: &mut [u8], order: Order| {
                let n = if dt.size() == 0 {
                    0
                } else {
                    dst.len() / dt.size()
                };
                match order {
                    Order::SrcFirst => user_apply(f, &dt, handle, n, src, dst),
                    Order::DstFirst => {
                        let earlier = dst.to_vec();
                        dst.copy_from_slice(&src[..dst.len()]);
                        user_apply(f, &dt, handle, n, &earlier, dst);
                    }
                }
            };
            Ok((Reducer::new(apply), commute))
        }
    }
}

/// The reduction of a predefined operation on its type, in both forms (predefined operations
/// commute, so the order of the in-place form does not matter).
pub(crate) fn builtin_reduction(op: ops::CheckedOp) -> Reducer {
    Reducer::new(Builtin(op))
}

struct Builtin(ops::CheckedOp);

// The executors hand it whole packed elements of equal lengths, so it cannot fail.
impl Reduction for Builtin {
    fn apply(&self, src: &[u8], dst: &mut [u8], _: Order) {
        let _ = self.0.apply_packed(src, dst);
    }

    fn apply_apart(&self, first: &[u8], second: &[u8], out: &mut [u8]) {
        let _ = self.0.apply_packed_apart(first, second, out);
    }
}

/// Calls a user function on `n` packed elements: `inout = in op inout`.
fn user_apply(
    f: crate::state::UserFn,
    dt: &Datatype,
    handle: Handle,
    n: usize,
    input: &[u8],
    inout: &mut [u8],
) {
    let mut h = handle;
    // The two bindings differ only in the width of the length (MPI_Op_create(_c)).
    let call = |a: *mut c_void, b: *mut c_void, h: &mut Handle| match f {
        crate::state::UserFn::Int(f) => {
            let mut len = n as c_int;
            // SAFETY: both callers pass `a` and `b` holding n elements of the type; the
            // function reads `a` and updates `b`.
            unsafe { f(a, b, &mut len, h) }
        }
        crate::state::UserFn::Count(f) => {
            let mut len = n as i64;
            // SAFETY: as above.
            unsafe { f(a, b, &mut len, h) }
        }
    };
    if dt.contiguous_span(n).is_some() {
        // Packed and layout agree (up to the span offset, which is 0 for the data itself).
        let off = dt.contiguous_span(n).unwrap_or(0);
        // Both buffers hold n elements; the function reads `in`, updates `inout`.
        call(
            input.as_ptr().wrapping_offset(-off) as *mut c_void,
            inout.as_mut_ptr().wrapping_offset(-off) as *mut c_void,
            &mut h,
        );
        return;
    }
    // Lay both out as the type says, call, and pack the result back.
    let span =
        (dt.true_extent().max(0) as usize) + (n.saturating_sub(1)) * dt.extent().unsigned_abs();
    let mut a = vec![0u8; span.max(1)];
    let mut b = vec![0u8; span.max(1)];
    let shift = -dt.true_lb();
    let (pa, pb) = (
        a.as_mut_ptr().wrapping_offset(shift),
        b.as_mut_ptr().wrapping_offset(shift),
    );
    // SAFETY: the temporaries cover the type map of n elements from base `pa`/`pb`.
    unsafe {
        dt.unpack(input, n, pa);
        dt.unpack(inout, n, pb);
        call(pa as *mut c_void, pb as *mut c_void, &mut h);
        dt.pack(pb, n, inout);
    }
}

/// `inout = in op inout` on user buffers (MPI_Reduce_local).
pub(crate) fn reduce_local(
    dt: &Datatype,
    handle: Handle,
    op: OpObj,
    n: usize,
    input: *const u8,
    inout: *mut u8,
) -> Res {
    // Both buffers are read, so neither may be MPI_IN_PLACE (there is no other buffer for it to
    // stand for) nor the other one (MPICH reports both as MPI_ERR_BUFFER).
    if n > 0 && dt.size() > 0 {
        if in_place(input as *const c_void) || in_place(inout as *const c_void) {
            return fail(
                MPI_ERR_BUFFER,
                "MPI_IN_PLACE is not allowed in MPI_Reduce_local",
            );
        }
        not_aliased(input as *const c_void, inout as *const c_void, true)?;
    }
    let (reduce, _) = reducer(dt, handle, op)?;
    let src = Input::of(&Typed {
        dt: dt.clone(),
        count: n,
        base: input as *mut u8,
    })?;
    let dst = Output::of(
        &Typed {
            dt: dt.clone(),
            count: n,
            base: inout,
        },
        true,
    )?;
    // SAFETY: both sides cover n packed elements (staged or the user's contiguous data).
    let (s, d) = unsafe {
        (
            std::slice::from_raw_parts(src.ptr, src.len),
            std::slice::from_raw_parts_mut(dst.ptr, dst.len),
        )
    };
    reduce.apply(s, d, Order::SrcFirst);
    dst.finish();
    Ok(())
}

/// A collective planned while the state is borrowed, started once it is released (a user
/// reduction may call MPI).
struct Prepared {
    comm: Handle,
    core: ferry_core::Comm,
    schedule: ferry_core::Planned,
    input: Input,
    output: Output,
    reduce: Option<Reducer>,
}

/// Plans `call` on `comm` with its buffers.
fn start(
    s: &mut State,
    comm: Handle,
    call: Collective<'_>,
    input: Input,
    output: Output,
    reduce: Option<Reducer>,
) -> Res<Prepared> {
    let core = s.core_comm(comm)?;
    let schedule = core.planned(&call)?;
    Ok(Prepared {
        comm,
        core,
        schedule,
        input,
        output,
        reduce,
    })
}

impl Prepared {
    /// A collective planned as `schedule` on the union communicator `u` of the
    /// intercommunicator `comm`.
    fn on_union(
        comm: Handle,
        u: crate::inter::Union,
        schedule: ferry_core::Planned,
        input: Input,
        output: Output,
        reduce: Option<Reducer>,
    ) -> Prepared {
        Prepared {
            comm,
            core: u.core,
            schedule,
            input,
            output,
            reduce,
        }
    }

    /// Hands the schedule and buffers to the runtime; the caller keeps `input` and `output`
    /// alive until the returned request is done.
    fn start(&mut self) -> Res<ferry_core::raw::RawRequest> {
        let (input, output) = (&self.input, &self.output);
        // SAFETY: the buffers are the caller's (valid by MPI's contract until completion) or
        // the staging vectors, which the caller keeps until the collective is done.
        let raw = unsafe {
            self.core.raw_collective(
                self.schedule.clone(),
                (input.ptr, input.len),
                (output.ptr, output.len),
                self.reduce.take(),
            )?
        };
        Ok(raw)
    }

    /// Starts the collective; the staging buffers live in the request until it finishes.
    fn launch(mut self) -> Res<Request> {
        let raw = self.start()?;
        let Prepared {
            comm,
            core,
            input,
            output,
            ..
        } = self;
        let finish = move |_: &ferry_core::raw::RawStatus| {
            drop(input.staged);
            output.finish();
        };
        Ok(Request::running(comm, core, raw, Some(Box::new(finish))))
    }

    /// Runs the collective to completion: the blocking call needs no request object.
    fn run(self) -> Res {
        let (input, output) = (&self.input, &self.output);
        // SAFETY: as in `start`; the call is done when this returns.
        unsafe {
            self.core.raw_collective_wait(
                &self.schedule,
                (input.ptr, input.len),
                (output.ptr, output.len),
                self.reduce.as_ref(),
            )?
        };
        drop(self.input.staged);
        self.output.finish();
        Ok(())
    }
}

/// A nonblocking intercommunicator collective of direct sends and receives with remote ranks
/// ((remote rank, offset, bytes) in `input` and `output`), planned on the union communicator.
fn inter_direct(
    s: &mut State,
    comm: Handle,
    inter: Inter,
    input: Input,
    output: Output,
    sends: Vec<(usize, usize, usize)>,
    recvs: Vec<(usize, usize, usize)>,
) -> Res<Prepared> {
    let u = crate::inter::union_of(s, inter)?;
    let schedule = ferry_core::Planned::check(crate::inter::nb_direct(
        &u, input.len, output.len, &sends, &recvs,
    ))?;
    Ok(Prepared::on_union(comm, u, schedule, input, output, None))
}

/// An intercommunicator collective: `blocking` runs the blocking form (point-to-point on the
/// intercommunicator, see [`crate::inter`]), `nonblocking` plans the nonblocking one on the
/// union communicator.
fn on_inter(
    request: RequestOut<'_>,
    blocking: impl FnOnce() -> Res,
    nonblocking: impl FnOnce(&mut State) -> Res<Prepared>,
) -> Res {
    if request.is_blocking() {
        return blocking();
    }
    run(request, nonblocking)
}

/// Refuses MPI_IN_PLACE for `p` where the calls `where_` (say, "on intercommunicators") have
/// no place for it.
pub(crate) fn no_in_place(p: *const c_void, where_: &str) -> Res {
    if in_place(p) {
        return fail(
            MPI_ERR_BUFFER,
            format!("MPI_IN_PLACE is not allowed {where_}"),
        );
    }
    Ok(())
}

fn no_in_place_inter(p: *const c_void) -> Res {
    no_in_place(p, "on intercommunicators")
}

/// Equal blocks of `count` elements, one per rank: counts and element displacements.
fn equal(n: usize, count: Count) -> Res<(Vec<usize>, Vec<isize>)> {
    let c = count_arg(count)?;
    Ok((vec![c; n], (0..n).map(|i| (i * c) as isize).collect()))
}

/// Counts and element displacements of a (v-)collective side: from the C arrays, or equal.
unsafe fn layout(n: usize, v: PerRank, count: Count) -> Res<(Vec<usize>, Vec<isize>)> {
    match v {
        // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
        Some((c, d)) => unsafe { per_rank(n, c, d) },
        None => equal(n, count),
    }
}

/// MPI_Igather(v) and MPI_Iscatter(v) on an intercommunicator: the root and each process of
/// the other group exchange a block, the way `dir` says.
unsafe fn inter_irooted(
    s: &mut State,
    dir: Direction,
    comm: Handle,
    inter: Inter,
    send: Buf,
    recv: RecvBuf,
    v: PerRank,
    root: c_int,
) -> Res<Prepared> {
    let n = crate::inter::union_of(s, inter)?.remote_size();
    let (all, one) = dir.roles(send, recv);
    let (input, output, transfers, sending) = match crate::inter::side(root, n)? {
        crate::inter::Side::Root => {
            let dt = s.committed_type(all.2)?;
            // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
            let (c, d) = unsafe { layout(n, v, all.1) }?;
            let blocks = blocks(&dt, all.0 as *mut u8, &c, &d, false)?;
            let transfers = (0..n)
                .map(|j| (j, blocks.displs[j], blocks.counts[j]))
                .collect();
            let (input, output) = dir.all_blocks(&blocks)?;
            (input, output, transfers, dir.root_sends())
        }
        crate::inter::Side::Idle => (Input::none(), Output::none(), vec![], true),
        crate::inter::Side::Leaf(r) => {
            no_in_place_inter(one.0)?;
            let t = typed(s, one.0, one.1, one.2)?;
            let transfers = vec![(r as usize, 0, t.bytes())];
            let (input, output) = dir.one_block(&t)?;
            (input, output, transfers, !dir.root_sends())
        }
    };
    let (sends, recvs) = if sending {
        (transfers, vec![])
    } else {
        (vec![], transfers)
    };
    inter_direct(s, comm, inter, input, output, sends, recvs)
}

/// MPI_Iallgather(v) on an intercommunicator: every process sends its block to every remote
/// process and receives theirs.
unsafe fn inter_iallgather(
    s: &mut State,
    comm: Handle,
    inter: Inter,
    send: Buf,
    recv: RecvBuf,
    v: PerRank,
) -> Res<Prepared> {
    no_in_place_inter(send.0)?;
    let n = crate::inter::union_of(s, inter)?.remote_size();
    let t = typed(s, send.0, send.1, send.2)?;
    let dt = s.committed_type(recv.2)?;
    // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
    let (c, d) = unsafe { layout(n, v, recv.1) }?;
    let all = blocks(&dt, recv.0 as *mut u8, &c, &d, false)?;
    let sends = (0..n).map(|j| (j, 0, t.bytes())).collect();
    let recvs = (0..n).map(|j| (j, all.displs[j], all.counts[j])).collect();
    inter_direct(s, comm, inter, Input::of(&t)?, all.output()?, sends, recvs)
}

/// MPI_Ialltoall(v) on an intercommunicator: block `j` goes to and comes from remote rank `j`.
unsafe fn inter_ialltoall(
    s: &mut State,
    comm: Handle,
    inter: Inter,
    send: (*const c_void, Count, Handle, PerRank),
    recv: (*mut c_void, Count, Handle, PerRank),
) -> Res<Prepared> {
    no_in_place_inter(send.0)?;
    let n = crate::inter::union_of(s, inter)?.remote_size();
    let (st, rt) = (s.committed_type(send.2)?, s.committed_type(recv.2)?);
    // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
    let (sc, sd) = unsafe { layout(n, send.3, send.1) }?;
    // SAFETY: as above.
    let (rc, rd) = unsafe { layout(n, recv.3, recv.1) }?;
    let out = blocks(&st, send.0 as *mut u8, &sc, &sd, false)?;
    let inb = blocks(&rt, recv.0 as *mut u8, &rc, &rd, false)?;
    let sends = (0..n).map(|j| (j, out.displs[j], out.counts[j])).collect();
    let recvs = (0..n).map(|j| (j, inb.displs[j], inb.counts[j])).collect();
    inter_direct(s, comm, inter, out.input()?, inb.output()?, sends, recvs)
}

/// MPI_Ialltoallw on an intercommunicator: blocks packed one after the other.
fn inter_ialltoallw(
    s: &mut State,
    comm: Handle,
    inter: Inter,
    send: &crate::inter::Blocks,
    recv: &crate::inter::Blocks,
) -> Res<Prepared> {
    let typed_of = |s: &mut State, b: &crate::inter::Blocks| {
        b.iter()
            .map(|&(base, count, h)| {
                Ok(Typed {
                    dt: s.committed_type(h)?,
                    count,
                    base: base as *mut u8,
                })
            })
            .collect::<Res<Vec<Typed>>>()
    };
    let (sb, rb) = (typed_of(s, send)?, typed_of(s, recv)?);
    all_checked(&rb)?;
    let (sc, sd) = packed(&sb);
    let (rc, rd, out) = packed_output(rb);
    let sends = (0..sc.len()).map(|j| (j, sd[j], sc[j])).collect();
    let recvs = (0..rc.len()).map(|j| (j, rd[j], rc[j])).collect();
    inter_direct(s, comm, inter, Input::gather(&sb)?, out, sends, recvs)
}

/// The helpers of `comm` if it is an intercommunicator.
fn inter_of(comm: Handle) -> Res<Option<Inter>> {
    running(|s| s.inter(comm))
}

thread_local! {
    /// Set while [`check_only`] runs a call: [`run`] plans it and stops there.
    static CHECK_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `start` (a nonblocking collective given a request address) only as far as its checks
/// and its plan: nothing is posted, no buffer is written. Persistent collectives check their
/// arguments this way at init, as MPI 4.1 §6.13 lets them (and MPICH does).
pub(crate) fn check_only(start: impl FnOnce(RequestOut<'_>) -> Res) -> Res {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CHECK_ONLY.set(false);
        }
    }
    let mut unused = MPI_REQUEST_NULL;
    CHECK_ONLY.set(true);
    let _reset = Reset;
    start(RequestOut::to(&mut unused))
}

/// Runs a collective planned by `f` to completion (blocking form) or publishes its request.
fn run(request: RequestOut<'_>, f: impl FnOnce(&mut State) -> Res<Prepared>) -> Res {
    let prepared = running(f)?;
    if CHECK_ONLY.get() {
        return Ok(());
    }
    let Some(out) = request.0 else {
        return prepared.run();
    };
    let req = prepared.launch()?;
    running(|s| {
        *out = s.requests.insert(req);
        Ok(())
    })
}

/// The rank `root` of `core`, checked.
pub(crate) fn root_arg(core: &ferry_core::Comm, root: c_int) -> Res<usize> {
    check::root(root, core.size())
}

fn typed(s: &mut State, buf: *const c_void, count: Count, datatype: Handle) -> Res<Typed> {
    Ok(Typed {
        dt: s.committed_type(datatype)?,
        count: count_arg(count)?,
        base: buf as *mut u8,
    })
}

/// A buffer argument of a collective as the C call has it: address, count, datatype.
pub(crate) type Buf = (*const c_void, Count, Handle);

/// The receive buffer argument of a collective.
pub(crate) type RecvBuf = (*mut c_void, Count, Handle);

/// A v-collective side's counts and element displacements (C arrays, one entry per rank), or
/// `None` for equal blocks of the side's count.
pub(crate) type PerRank = Option<(Ints, Ints)>;

/// Which way the blocks of a rooted collective go: to the root (gather; an allgather is a
/// gather at every process) or from it (scatter). The two are one exchange with input and
/// output swapped.
#[derive(Clone, Copy)]
pub(crate) enum Direction {
    /// Every process's block to the root.
    Gather,
    /// The root's blocks, one to each process.
    Scatter,
}

impl Direction {
    /// The root's buffer of a block per rank, and the buffer of one block: the receive and the
    /// send buffer of a gather, the other way round for a scatter.
    pub(crate) fn roles(self, send: Buf, recv: RecvBuf) -> (Buf, Buf) {
        let recv = (recv.0 as *const c_void, recv.1, recv.2);
        match self {
            Direction::Gather => (recv, send),
            Direction::Scatter => (send, recv),
        }
    }

    /// Whether the root sends (and the other processes receive).
    pub(crate) fn root_sends(self) -> bool {
        matches!(self, Direction::Scatter)
    }

    /// The planned call with equal blocks of `block` bytes.
    fn call(self, block: usize, root: usize) -> Collective<'static> {
        match self {
            Direction::Gather => Collective::Gather { block, root },
            Direction::Scatter => Collective::Scatter { block, root },
        }
    }

    /// The planned call with a block of `counts[i]` bytes at `displs[i]` per rank.
    fn call_v<'a>(self, counts: &'a [usize], displs: &'a [usize], root: usize) -> Collective<'a> {
        match self {
            Direction::Gather => Collective::Gatherv {
                counts,
                displs,
                root,
            },
            Direction::Scatter => Collective::Scatterv {
                counts,
                displs,
                root,
            },
        }
    }

    /// A process's one block `t` as the call's input (gather) or output (scatter).
    fn one_block(self, t: &Typed) -> Res<(Input, Output)> {
        Ok(match self {
            Direction::Gather => (Input::of(t)?, Output::none()),
            Direction::Scatter => (Input::none(), Output::of(t, false)?),
        })
    }

    /// The root's blocks `all` as the call's output (gather) or input (scatter).
    fn all_blocks(self, all: &Blocks) -> Res<(Input, Output)> {
        Ok(match self {
            Direction::Gather => (Input::none(), all.output()?),
            Direction::Scatter => (all.input()?, Output::none()),
        })
    }

    /// The root on an intracommunicator, rank `me`: its blocks `all` and its own block `one`,
    /// which MPI_IN_PLACE says is already its block of `all`.
    fn at_root(self, s: &mut State, one: Buf, all: &Blocks, me: usize) -> Res<(Input, Output)> {
        let own = &all.typed[me];
        not_own_block(one.0, own)?;
        Ok(match self {
            Direction::Gather => {
                let send = if in_place(one.0) {
                    Input::copy_of(own)?
                } else {
                    Input::of(&typed(s, one.0, one.1, one.2)?)?
                };
                (send, all.output()?)
            }
            Direction::Scatter => {
                let out = if in_place(one.0) {
                    Output::scratch(own.bytes())
                } else {
                    Output::of(&typed(s, one.0, one.1, one.2)?, false)?
                };
                (all.input()?, out)
            }
        })
    }

    /// [`Direction::at_root`] with a block of `all`'s count per rank, back to back; also the
    /// bytes of a block.
    fn at_root_equal(
        self,
        s: &mut State,
        one: Buf,
        all: Buf,
        n: usize,
        me: usize,
    ) -> Res<(usize, Input, Output)> {
        let t = typed(s, all.0, all.1, all.2)?;
        not_aliased(one.0, all.0, all.1 > 0)?;
        let displs = (0..n)
            .map(|i| {
                i.checked_mul(t.count)
                    .and_then(|d| isize::try_from(d).ok())
                    .ok_or_else(|| {
                        MpiError::new(
                            MPI_ERR_COUNT,
                            format!(
                                "{n} blocks of {} elements overflow the address space",
                                t.count
                            ),
                        )
                    })
            })
            .collect::<Res<Vec<_>>>()?;
        let blocks = blocks(&t.dt, t.base, &vec![t.count; n], &displs, false)?;
        let (input, output) = self.at_root(s, one, &blocks, me)?;
        Ok((t.bytes(), input, output))
    }
}

/// The blocks of `dt` at `buf` by the caller's per-rank `counts` and element `displs`.
///
/// # Safety
/// `counts` and `displs` are NULL or hold `n` entries each.
unsafe fn blocks_v(
    s: &mut State,
    n: usize,
    buf: *const c_void,
    (counts, displs): (Ints, Ints),
    dt: Handle,
) -> Res<Blocks> {
    // SAFETY: this function's contract.
    let (c, d) = unsafe { per_rank(n, counts, displs) }?;
    let dt = s.committed_type(dt)?;
    blocks(&dt, buf as *mut u8, &c, &d, false)
}

/// The blocks of MPI_Alltoallw's side at `buf`: `counts[i]` elements of `types[i]` at byte
/// displacement `displs[i]`.
///
/// # Safety
/// `counts`, `displs` and `types` are NULL or hold `n` entries each.
unsafe fn blocks_w(
    s: &mut State,
    n: usize,
    buf: *const c_void,
    (counts, displs): (Ints, Ints),
    types: *const Handle,
    types_name: &str,
) -> Res<Vec<Typed>> {
    // SAFETY: this function's contract.
    let types = unsafe { check::slice(types, n, types_name) }?;
    // SAFETY: as above.
    let (c, d) = unsafe { per_rank(n, counts, displs) }?;
    (0..n)
        .map(|i| {
            Ok(Typed {
                dt: s.committed_type(types[i])?,
                count: c[i],
                base: (buf as *mut u8).wrapping_offset(d[i]),
            })
        })
        .collect()
}

/// Byte counts and displacements of `blocks` packed back to back.
fn packed(blocks: &[Typed]) -> (Vec<usize>, Vec<usize>) {
    let counts: Vec<usize> = blocks.iter().map(Typed::bytes).collect();
    let displs = packed_displs(&counts);
    (counts, displs)
}

/// An output of `blocks` staged back to back, unpacked at the end; and the packed layout.
fn packed_output(blocks: Vec<Typed>) -> (Vec<usize>, Vec<usize>, Output) {
    let (counts, displs) = packed(&blocks);
    let v = vec![0u8; counts.iter().sum()];
    let at = blocks.into_iter().zip(displs.iter().copied()).collect();
    (counts, displs, Output::staged(v, at))
}

// ---- the collectives ----

pub(crate) unsafe fn barrier(comm: Handle, request: RequestOut<'_>) -> Res {
    if let Some(i) = inter_of(comm)? {
        let nonblocking = |s: &mut State| {
            let u = crate::inter::union_of(s, i)?;
            let schedule = ferry_core::Planned::check(crate::inter::nb_barrier(&u))?;
            let (input, output) = (Input::none(), Output::none());
            Ok(Prepared::on_union(comm, u, schedule, input, output, None))
        };
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        return on_inter(request, || unsafe { crate::inter::barrier(i) }, nonblocking);
    }
    run(request, |s| {
        start(
            s,
            comm,
            Collective::Barrier,
            Input::none(),
            Output::none(),
            None,
        )
    })
}

pub(crate) unsafe fn bcast(
    buf: *mut c_void,
    count: Count,
    datatype: Handle,
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if request.is_blocking() {
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        if let Some(done) = unsafe { lean::bcast(buf, count, datatype, root, comm) } {
            return done;
        }
    }
    // SAFETY: as above.
    unsafe { bcast_general(buf, count, datatype, root, comm, request) }
}

/// The general path of [`bcast`], out of line so that the lean path does not pay for its frame.
#[inline(never)]
unsafe fn bcast_general(
    buf: *mut c_void,
    count: Count,
    datatype: Handle,
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if let Some(i) = inter_of(comm)? {
        let nonblocking = |s: &mut State| {
            let u = crate::inter::union_of(s, i)?;
            let side = crate::inter::side(root, u.remote_size())?;
            let t = typed(s, buf, count, datatype)?;
            let (input, output) = match side {
                crate::inter::Side::Root => (Input::of(&t)?, Output::none()),
                crate::inter::Side::Idle => (Input::none(), Output::none()),
                crate::inter::Side::Leaf(_) => (Input::none(), Output::of(&t, false)?),
            };
            let schedule =
                ferry_core::Planned::check(crate::inter::nb_bcast(&u, &side, t.bytes()))?;
            Ok(Prepared::on_union(comm, u, schedule, input, output, None))
        };
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        let blocking = || unsafe { crate::inter::bcast(i, buf, count, datatype, root) };
        return on_inter(request, blocking, nonblocking);
    }
    run(request, |s| {
        let core = s.core_comm(comm)?;
        let root = root_arg(&core, root)?;
        let t = typed(s, buf, count, datatype)?;
        let out = Output::of(&t, core.rank() == root)?;
        start(
            s,
            comm,
            Collective::Bcast {
                bytes: t.bytes(),
                root,
            },
            Input::none(),
            out,
            None,
        )
    })
}

pub(crate) unsafe fn reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    datatype: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if request.is_blocking() {
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        if let Some(done) =
            unsafe { lean::reduce(sendbuf, recvbuf, count, datatype, op, root, comm) }
        {
            return done;
        }
    }
    // SAFETY: as above.
    unsafe { reduce_general(sendbuf, recvbuf, count, datatype, op, root, comm, request) }
}

/// The general path of [`reduce`], out of line so that the lean path does not pay for its frame.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_general(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    datatype: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if let Some(i) = inter_of(comm)? {
        let nonblocking = |s: &mut State| {
            let u = crate::inter::union_of(s, i)?;
            let side = crate::inter::side(root, u.remote_size())?;
            let o = s.op(op)?;
            let recv = typed(s, recvbuf, count, datatype)?;
            let (r, _) = reducer(&recv.dt, datatype, o)?;
            let (input, output, reduce) = match side {
                crate::inter::Side::Root => (Input::none(), Output::of(&recv, false)?, None),
                crate::inter::Side::Idle => (Input::none(), Output::none(), None),
                crate::inter::Side::Leaf(_) => {
                    no_in_place_inter(sendbuf)?;
                    let send = Input::of(&typed(s, sendbuf, count, datatype)?)?;
                    (send, Output::none(), Some(r))
                }
            };
            let schedule =
                ferry_core::Planned::check(crate::inter::nb_reduce(&u, &side, recv.bytes()))?;
            Ok(Prepared::on_union(comm, u, schedule, input, output, reduce))
        };
        let blocking = || {
            // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
            unsafe { crate::inter::reduce(i, sendbuf, recvbuf, count, datatype, op, root) }
        };
        return on_inter(request, blocking, nonblocking);
    }
    run(request, |s| {
        let core = s.core_comm(comm)?;
        let root = root_arg(&core, root)?;
        let o = s.op(op)?;
        let is_root = core.rank() == root;
        let recv = typed(s, recvbuf, count, datatype)?;
        if is_root {
            not_aliased(sendbuf, recvbuf, count > 0)?;
        }
        let send = if in_place(sendbuf) && is_root {
            Input::copy_of(&recv)?
        } else {
            Input::of(&typed(s, sendbuf, count, datatype)?)?
        };
        let (r, commutative) = reducer(&recv.dt, datatype, o)?;
        let out = if is_root {
            Output::of(&recv, false)?
        } else {
            Output::scratch(recv.bytes())
        };
        start(
            s,
            comm,
            Collective::Reduce {
                bytes: recv.bytes(),
                elem: recv.dt.size().max(1),
                root,
                commutative,
            },
            send,
            out,
            Some(r),
        )
    })
}

pub(crate) unsafe fn allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if request.is_blocking() {
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        if let Some(done) = unsafe { lean::allreduce(sendbuf, recvbuf, count, datatype, op, comm) }
        {
            return done;
        }
    }
    // SAFETY: as above.
    unsafe { allreduce_general(sendbuf, recvbuf, count, datatype, op, comm, request) }
}

/// The general path of [`allreduce`], out of line so that the lean path does not pay for its frame.
#[inline(never)]
unsafe fn allreduce_general(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if let Some(i) = inter_of(comm)? {
        let nonblocking = |s: &mut State| {
            let u = crate::inter::union_of(s, i)?;
            no_in_place_inter(sendbuf)?;
            let o = s.op(op)?;
            let recv = typed(s, recvbuf, count, datatype)?;
            let (r, _) = reducer(&recv.dt, datatype, o)?;
            let send = Input::of(&typed(s, sendbuf, count, datatype)?)?;
            let schedule =
                ferry_core::Planned::check(crate::inter::nb_allreduce(&u, recv.bytes()))?;
            let output = Output::of(&recv, false)?;
            Ok(Prepared::on_union(comm, u, schedule, send, output, Some(r)))
        };
        let blocking = || {
            // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
            unsafe { crate::inter::allreduce(i, sendbuf, recvbuf, count, datatype, op) }
        };
        return on_inter(request, blocking, nonblocking);
    }
    run(request, |s| {
        let o = s.op(op)?;
        let recv = typed(s, recvbuf, count, datatype)?;
        not_aliased(sendbuf, recvbuf, count > 0)?;
        let (r, commutative) = reducer(&recv.dt, datatype, o)?;
        let elem = recv.dt.size().max(1);
        let bytes = recv.bytes();
        if in_place(sendbuf) {
            let call = Collective::Allreduce {
                bytes,
                elem,
                commutative,
                in_place: true,
            };
            return start(
                s,
                comm,
                call,
                Input::none(),
                Output::of(&recv, true)?,
                Some(r),
            );
        }
        let send = Input::of(&typed(s, sendbuf, count, datatype)?)?;
        let call = Collective::Allreduce {
            bytes,
            elem,
            commutative,
            in_place: false,
        };
        start(s, comm, call, send, Output::of(&recv, false)?, Some(r))
    })
}

pub(crate) unsafe fn gather(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: Count,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    let (send, recv) = (
        (sendbuf, sendcount, sendtype),
        (recvbuf, recvcount, recvtype),
    );
    // SAFETY: the caller's buffers are as MPI's contract for the call says.
    unsafe { rooted(Direction::Gather, send, recv, root, comm, request) }
}

pub(crate) unsafe fn scatter(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: Count,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    let (send, recv) = (
        (sendbuf, sendcount, sendtype),
        (recvbuf, recvcount, recvtype),
    );
    // SAFETY: the caller's buffers are as MPI's contract for the call says.
    unsafe { rooted(Direction::Scatter, send, recv, root, comm, request) }
}

/// MPI_(I)gather and MPI_(I)scatter: equal blocks between the root and every process, the way
/// `dir` says.
unsafe fn rooted(
    dir: Direction,
    send: Buf,
    recv: RecvBuf,
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if let Some(i) = inter_of(comm)? {
        // SAFETY: the caller's buffers are as MPI's contract for the call says.
        return unsafe { rooted_inter(dir, comm, i, send, recv, None, root, request) };
    }
    let (all, one) = dir.roles(send, recv);
    run(request, |s| {
        let core = s.core_comm(comm)?;
        let (n, me) = (core.size(), core.rank());
        let root = root_arg(&core, root)?;
        if me == root {
            let (block, input, output) = dir.at_root_equal(s, one, all, n, me)?;
            start(s, comm, dir.call(block, root), input, output, None)
        } else {
            let t = typed(s, one.0, one.1, one.2)?;
            let (input, output) = dir.one_block(&t)?;
            start(s, comm, dir.call(t.bytes(), root), input, output, None)
        }
    })
}

/// MPI_(I)gather(v) and MPI_(I)scatter(v) on an intercommunicator `i`.
unsafe fn rooted_inter(
    dir: Direction,
    comm: Handle,
    i: Inter,
    send: Buf,
    recv: RecvBuf,
    v: PerRank,
    root: c_int,
    request: RequestOut<'_>,
) -> Res {
    on_inter(
        request,
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        || unsafe { crate::inter::rooted(dir, i, send, recv, v, root) },
        // SAFETY: as above.
        |s| unsafe { inter_irooted(s, dir, comm, i, send, recv, v, root) },
    )
}

pub(crate) unsafe fn allgather(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: Count,
    recvtype: Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    let (send, recv) = (
        (sendbuf, sendcount, sendtype),
        (recvbuf, recvcount, recvtype),
    );
    if request.is_blocking() {
        // SAFETY: the caller's buffers are as MPI's contract for the call says.
        if let Some(done) = unsafe { lean::exchange(send, recv, comm, false) } {
            return done;
        }
    }
    if let Some(i) = inter_of(comm)? {
        // SAFETY: the caller's buffers are as MPI's contract for the call says.
        return unsafe { allgather_inter(comm, i, send, recv, None, request) };
    }
    run(request, |s| {
        let core = s.core_comm(comm)?;
        let (n, me) = (core.size(), core.rank());
        let all = (recvbuf as *const c_void, recvcount, recvtype);
        let (block, input, output) = Direction::Gather.at_root_equal(s, send, all, n, me)?;
        let call = Collective::Allgather { block };
        start(s, comm, call, input, output, None)
    })
}

/// MPI_(I)allgather(v) on an intercommunicator `i`.
unsafe fn allgather_inter(
    comm: Handle,
    i: Inter,
    send: Buf,
    recv: RecvBuf,
    v: PerRank,
    request: RequestOut<'_>,
) -> Res {
    on_inter(
        request,
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        || unsafe { crate::inter::allgather(i, send, recv, v) },
        // SAFETY: as above.
        |s| unsafe { inter_iallgather(s, comm, i, send, recv, v) },
    )
}

pub(crate) unsafe fn alltoall(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: Count,
    recvtype: Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if request.is_blocking() {
        let (send, recv) = (
            (sendbuf, sendcount, sendtype),
            (recvbuf, recvcount, recvtype),
        );
        // SAFETY: the caller's buffers are as MPI's contract for the call says.
        if let Some(done) = unsafe { lean::exchange(send, recv, comm, true) } {
            return done;
        }
    }
    if let Some(i) = inter_of(comm)? {
        let (send, recv) = (
            (sendbuf, sendcount, sendtype, None),
            (recvbuf, recvcount, recvtype, None),
        );
        // SAFETY: the caller's buffers are as MPI's contract for the call says.
        return unsafe { alltoall_inter(comm, i, send, recv, request) };
    }
    run(request, |s| {
        let n = s.core_comm(comm)?.size();
        let r = typed(s, recvbuf, recvcount, recvtype)?;
        not_aliased(sendbuf, recvbuf, recvcount > 0)?;
        let block = r.bytes();
        // Rank i's block is elements i·count.. of the buffer: all n blocks together are
        // n·count elements of the type, one run when the type is contiguous.
        let whole = |t: Typed| Typed {
            count: t.count * n,
            ..t
        };
        let r = whole(r);
        let send = if in_place(sendbuf) {
            // A copy: the blocks arriving overwrite those still to be sent.
            Input::copy_of(&r)?
        } else {
            Input::of(&whole(typed(s, sendbuf, sendcount, sendtype)?))?
        };
        start(
            s,
            comm,
            Collective::Alltoall { block },
            send,
            Output::of(&r, false)?,
            None,
        )
    })
}

/// MPI_(I)alltoall(v) on an intercommunicator `i`: each side with its per-rank layout.
unsafe fn alltoall_inter(
    comm: Handle,
    i: Inter,
    send: (*const c_void, Count, Handle, PerRank),
    recv: (*mut c_void, Count, Handle, PerRank),
    request: RequestOut<'_>,
) -> Res {
    let blocking = || {
        let n = crate::inter::remote_size(i)?;
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        let sb = unsafe { crate::inter::blocks(send.0, send.1, send.2, send.3, n) }?;
        // SAFETY: as above.
        let rb = unsafe { crate::inter::blocks(recv.0, recv.1, recv.2, recv.3, n) }?;
        // SAFETY: as above.
        unsafe { crate::inter::alltoall(i, sb, rb) }
    };
    // SAFETY: as above.
    on_inter(request, blocking, |s| unsafe {
        inter_ialltoall(s, comm, i, send, recv)
    })
}

/// `n` counts and displacements from C arrays.
unsafe fn per_rank(n: usize, counts: Ints, displs: Ints) -> Res<(Vec<usize>, Vec<isize>)> {
    // SAFETY: the caller's contract: each array is NULL or holds `n` entries.
    let (counts, displs) = unsafe {
        (
            counts.get(n, "counts array")?,
            displs.get(n, "displacements array")?,
        )
    };
    let c = counts
        .iter()
        .map(|&c| count_arg(c))
        .collect::<Res<Vec<_>>>()?;
    // An `i64` is an `isize` here (checked above `Ints`).
    let d = displs.iter().map(|&d| d as isize).collect();
    Ok((c, d))
}

pub(crate) unsafe fn gatherv(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: Ints,
    displs: Ints,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    let (send, recv) = ((sendbuf, sendcount, sendtype), (recvbuf, 0, recvtype));
    let v = (recvcounts, displs);
    // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
    unsafe { rooted_v(Direction::Gather, send, recv, v, root, comm, request) }
}

pub(crate) unsafe fn scatterv(
    sendbuf: *const c_void,
    sendcounts: Ints,
    displs: Ints,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: Count,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    let (send, recv) = ((sendbuf, 0, sendtype), (recvbuf, recvcount, recvtype));
    let v = (sendcounts, displs);
    // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
    unsafe { rooted_v(Direction::Scatter, send, recv, v, root, comm, request) }
}

/// MPI_(I)gatherv and MPI_(I)scatterv: the root's blocks laid out by `v` (the counts and
/// displacements of its side), the way `dir` says.
unsafe fn rooted_v(
    dir: Direction,
    send: Buf,
    recv: RecvBuf,
    v: (Ints, Ints),
    root: c_int,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if let Some(i) = inter_of(comm)? {
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        return unsafe { rooted_inter(dir, comm, i, send, recv, Some(v), root, request) };
    }
    let (all, one) = dir.roles(send, recv);
    run(request, |s| {
        let core = s.core_comm(comm)?;
        let (n, me) = (core.size(), core.rank());
        let root = root_arg(&core, root)?;
        if me == root {
            // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
            let blocks = unsafe { blocks_v(s, n, all.0, v, all.2) }?;
            let (input, output) = dir.at_root(s, one, &blocks, me)?;
            let call = dir.call_v(&blocks.counts, &blocks.displs, root);
            start(s, comm, call, input, output, None)
        } else {
            let t = typed(s, one.0, one.1, one.2)?;
            let (mut counts, displs) = (vec![0; n], vec![0; n]);
            counts[me] = t.bytes();
            let (input, output) = dir.one_block(&t)?;
            let call = dir.call_v(&counts, &displs, root);
            start(s, comm, call, input, output, None)
        }
    })
}

pub(crate) unsafe fn allgatherv(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: Ints,
    displs: Ints,
    recvtype: Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    let (send, v) = ((sendbuf, sendcount, sendtype), (recvcounts, displs));
    if let Some(i) = inter_of(comm)? {
        let recv = (recvbuf, 0, recvtype);
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        return unsafe { allgather_inter(comm, i, send, recv, Some(v), request) };
    }
    run(request, |s| {
        let core = s.core_comm(comm)?;
        let (n, me) = (core.size(), core.rank());
        // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
        let all = unsafe { blocks_v(s, n, recvbuf, v, recvtype) }?;
        let (input, output) = Direction::Gather.at_root(s, send, &all, me)?;
        let call = Collective::Allgatherv {
            counts: &all.counts,
            displs: &all.displs,
        };
        start(s, comm, call, input, output, None)
    })
}

pub(crate) unsafe fn alltoallv(
    sendbuf: *const c_void,
    sendcounts: Ints,
    sdispls: Ints,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: Ints,
    rdispls: Ints,
    recvtype: Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    let (sv, rv) = ((sendcounts, sdispls), (recvcounts, rdispls));
    if let Some(i) = inter_of(comm)? {
        let (send, recv) = (
            (sendbuf, 0, sendtype, Some(sv)),
            (recvbuf, 0, recvtype, Some(rv)),
        );
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        return unsafe { alltoall_inter(comm, i, send, recv, request) };
    }
    run(request, |s| {
        let n = s.core_comm(comm)?.size();
        // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
        let out = unsafe { blocks_v(s, n, recvbuf, rv, recvtype) }?;
        not_aliased(sendbuf, recvbuf, out.typed.iter().any(|t| t.count > 0))?;
        let (send, sc, sd) = if in_place(sendbuf) {
            let input = Input::gather(&out.typed)?;
            (input, out.counts.clone(), packed_displs(&out.counts))
        } else {
            // SAFETY: as above.
            let b = unsafe { blocks_v(s, n, sendbuf, sv, sendtype) }?;
            (b.input()?, b.counts, b.displs)
        };
        let call = Collective::Alltoallv {
            send_counts: &sc,
            send_displs: &sd,
            recv_counts: &out.counts,
            recv_displs: &out.displs,
        };
        start(s, comm, call, send, out.output()?, None)
    })
}

pub(crate) unsafe fn alltoallw(
    sendbuf: *const c_void,
    sendcounts: Ints,
    sdispls: Ints,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: Ints,
    rdispls: Ints,
    recvtypes: *const Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if let Some(i) = inter_of(comm)? {
        let n = crate::inter::remote_size(i)?;
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        let send = unsafe { crate::inter::blocks_w(sendbuf, sendcounts, sdispls, sendtypes, n) }?;
        // SAFETY: as above.
        let recv = unsafe { crate::inter::blocks_w(recvbuf, recvcounts, rdispls, recvtypes, n) }?;
        if !request.is_blocking() {
            return run(request, |s| inter_ialltoallw(s, comm, i, &send, &recv));
        }
        // SAFETY: as above.
        return unsafe { crate::inter::alltoall(i, send, recv) };
    }
    run(request, |s| {
        let n = s.core_comm(comm)?.size();
        let rv = (recvcounts, rdispls);
        // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
        let rblocks = unsafe { blocks_w(s, n, recvbuf, rv, recvtypes, "recvtypes") }?;
        all_checked(&rblocks)?;
        let received: usize = rblocks.iter().map(Typed::bytes).sum();
        not_aliased(sendbuf, recvbuf, received > 0)?;
        let sblocks: Vec<Typed> = if in_place(sendbuf) {
            rblocks.clone()
        } else {
            let sv = (sendcounts, sdispls);
            // SAFETY: as above.
            unsafe { blocks_w(s, n, sendbuf, sv, sendtypes, "sendtypes") }?
        };
        let (sc, sd) = packed(&sblocks);
        let (rc, rd, out) = packed_output(rblocks);
        let call = Collective::Alltoallv {
            send_counts: &sc,
            send_displs: &sd,
            recv_counts: &rc,
            recv_displs: &rd,
        };
        start(s, comm, call, Input::gather(&sblocks)?, out, None)
    })
}

pub(crate) unsafe fn reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: &[usize],
    datatype: Handle,
    op: Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    if let Some(i) = inter_of(comm)? {
        let nonblocking = |s: &mut State| {
            no_in_place_inter(sendbuf)?;
            let u = crate::inter::union_of(s, i)?;
            let dt = s.committed_type(datatype)?;
            let o = s.op(op)?;
            let (r, _) = reducer(&dt, datatype, o)?;
            let total: usize = counts.iter().sum();
            let send = Input::of(&Typed {
                dt: dt.clone(),
                count: total,
                base: sendbuf as *mut u8,
            })?;
            let mine = Typed {
                dt: dt.clone(),
                count: counts.get(u.local_rank()).copied().unwrap_or(0),
                base: recvbuf as *mut u8,
            };
            let byte_blocks: Vec<usize> = counts.iter().map(|c| c * dt.size()).collect();
            let schedule = ferry_core::Planned::check(crate::inter::nb_reduce_scatter(
                &u,
                total * dt.size(),
                &byte_blocks,
            ))?;
            let output = Output::of(&mine, false)?;
            Ok(Prepared::on_union(comm, u, schedule, send, output, Some(r)))
        };
        let blocking = || {
            // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
            unsafe { crate::inter::reduce_scatter(i, sendbuf, recvbuf, counts, datatype, op) }
        };
        return on_inter(request, blocking, nonblocking);
    }
    run(request, |s| {
        let core = s.core_comm(comm)?;
        let me = core.rank();
        if counts.len() != core.size() {
            return fail(MPI_ERR_ARG, "one count per rank is needed");
        }
        let dt = s.committed_type(datatype)?;
        let o = s.op(op)?;
        let (r, _) = reducer(&dt, datatype, o)?;
        let total: usize = counts.iter().sum();
        not_aliased(sendbuf, recvbuf, total > 0)?;
        let base = if in_place(sendbuf) {
            recvbuf as *mut u8
        } else {
            sendbuf as *mut u8
        };
        let send = Input::of(&Typed {
            dt: dt.clone(),
            count: total,
            base,
        })?;
        // SAFETY: `send` covers its `len` bytes: staged, or the caller's `total` elements.
        let send = Input::owned(unsafe { std::slice::from_raw_parts(send.ptr, send.len) }.to_vec());
        let mine = Typed {
            dt: dt.clone(),
            count: counts[me],
            base: recvbuf as *mut u8,
        };
        let byte_counts: Vec<usize> = counts.iter().map(|c| c * dt.size()).collect();
        start(
            s,
            comm,
            Collective::ReduceScatter {
                counts: &byte_counts,
            },
            send,
            Output::of(&mine, false)?,
            Some(r),
        )
    })
}

pub(crate) unsafe fn scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    exclusive: bool,
    request: RequestOut<'_>,
) -> Res {
    if inter_of(comm)?.is_some() {
        return fail(MPI_ERR_COMM, "scans are not defined on intercommunicators");
    }
    run(request, |s| {
        let o = s.op(op)?;
        let recv = typed(s, recvbuf, count, datatype)?;
        not_aliased(sendbuf, recvbuf, count > 0)?;
        let (r, _) = reducer(&recv.dt, datatype, o)?;
        let send = if in_place(sendbuf) {
            Input::copy_of(&recv)?
        } else {
            Input::of(&typed(s, sendbuf, count, datatype)?)?
        };
        // An exclusive scan leaves process 0's receive buffer alone: it is not significant
        // there (MPI 4.1 §6.11.2) and may be NULL.
        let out = if exclusive && s.core_comm(comm)?.rank() == 0 {
            Output::scratch(recv.bytes())
        } else {
            Output::of(&recv, exclusive)?
        };
        start(
            s,
            comm,
            Collective::Scan {
                bytes: recv.bytes(),
                exclusive,
            },
            send,
            out,
            Some(r),
        )
    })
}

/// One receive count per rank of `comm`, from a C array.
pub(crate) unsafe fn recv_counts(comm: Handle, recvcounts: *const c_int) -> Res<Vec<usize>> {
    let n = running(|s| s.local_size(comm))?;
    // SAFETY: the caller's contract: `recvcounts` is NULL or holds one count per rank.
    let recvcounts = unsafe { check::slice(recvcounts, n, "recvcounts") }?;
    recvcounts.iter().map(|&c| count_arg(c)).collect()
}

/// Where a collective puts its request: nowhere for a blocking call ([`BLOCKING`]), or the
/// handle a nonblocking call returns ([`nonnull`]).
pub(crate) struct RequestOut<'a>(Option<&'a mut Handle>);

/// The blocking form of a collective: no request.
pub(crate) const BLOCKING: RequestOut<'static> = RequestOut(None);

/// The request argument of a nonblocking collective: never NULL.
///
/// # Safety
/// `request` is NULL or a handle the call may write, which nothing else uses for `'a`.
pub(crate) unsafe fn nonnull<'a>(request: *mut Handle) -> Res<RequestOut<'a>> {
    // SAFETY: this function's `# Safety`; `check::out` refuses NULL.
    let out = unsafe { check::out(request, "request argument") }?;
    Ok(RequestOut::to(out))
}

impl<'a> RequestOut<'a> {
    /// The request goes to `out`.
    pub(crate) fn to(out: &'a mut Handle) -> RequestOut<'a> {
        RequestOut(Some(out))
    }

    /// Whether the call is the blocking form.
    pub(crate) fn is_blocking(&self) -> bool {
        self.0.is_none()
    }

    /// Stores `request`, the request of a nonblocking call.
    pub(crate) fn set(self, request: Handle) {
        if let Some(out) = self.0 {
            *out = request;
        }
    }
}
