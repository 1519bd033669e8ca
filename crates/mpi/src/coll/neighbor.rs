//! Neighbourhood collectives (`MPI_Neighbor_*` and `MPI_Ineighbor_*`) on Cartesian, graph and
//! distributed graph communicators: one schedule of direct sends to the destinations and
//! receives from the sources that [`Topo::neighbours`] lists, run by the same executor as the
//! other collectives (so the blocking form is the nonblocking one waited for).
//!
//! Messages between one pair of processes match in order. Where a Cartesian neighbour is the
//! same process at -1 and +1 (a periodic dimension of extent 1 or 2), each dimension's blocks
//! are sent +1 first, so that the block a process sends towards +1 lands in its neighbour's
//! -1 slot, as MPI 4.1 §8.6 requires (MPICH's `ring_neighbor_alltoall`). Blocks to and from this
//! process itself (self loops, extent-1 periodic dimensions) are copies, paired in the same order.

use super::*;
use crate::topo::Topo;
use ferry_sched::{Buffer, Region, Schedule, ScheduleBuilder};

/// Sources, destinations and whether the topology is Cartesian, for a neighbourhood collective
/// on `comm`.
pub(super) fn neighbourhood(s: &State, comm: Handle) -> Res<(Vec<c_int>, Vec<c_int>, bool)> {
    let core = s.intra_comm(comm)?;
    let topo = crate::topo::topo_of(s, comm)?.ok_or_else(|| {
        MpiError::new(
            MPI_ERR_TOPOLOGY,
            "neighbourhood collectives need a communicator with a topology",
        )
    })?;
    let (src, dst) = topo.neighbours(core.rank());
    Ok((src, dst, matches!(*topo, Topo::Cart(_))))
}

fn no_in_place_neighbour(sendbuf: *const c_void) -> Res {
    no_in_place(sendbuf, "in neighbourhood collectives")
}

/// A region of `len` bytes at `at` (an empty one at 0, so that it lies inside any buffer).
fn region(buffer: Buffer, (at, len): (usize, usize)) -> Region {
    Region::new(buffer, if len == 0 { 0 } else { at }, len)
}

/// This process's schedule for one neighbourhood collective: `sends[j]` (packed offset and
/// bytes of the send buffer) goes to `dests[j]`, `recvs[i]` (of the receive buffer) comes from
/// `sources[i]`. Plain data, no I/O: the unit tests below check it directly.
fn plan(
    (me, size): (usize, usize),
    (sources, dests, cart): (&[c_int], &[c_int], bool),
    (send_bytes, recv_bytes): (usize, usize),
    sends: &[(usize, usize)],
    recvs: &[(usize, usize)],
) -> Schedule {
    let mut b = ScheduleBuilder::new(me, size, send_bytes, recv_bytes);
    let mut self_recvs = Vec::new();
    for (&src, &r) in sources.iter().zip(recvs) {
        match src {
            MPI_PROC_NULL => {}
            p if p as usize == me => self_recvs.push(r),
            p => {
                b.recv(p as usize, region(Buffer::Recv, r), &[]);
            }
        }
    }
    let mut self_sends = Vec::new();
    for k in 0..dests.len().min(sends.len()) {
        // Cartesian: +1 before -1 in each dimension (see the module doc).
        let j = if cart { k ^ 1 } else { k };
        match dests[j] {
            MPI_PROC_NULL => {}
            p if p as usize == me => self_sends.push(sends[j]),
            p => {
                b.send(p as usize, region(Buffer::Send, sends[j]), &[]);
            }
        }
    }
    for (&(sat, slen), &(rat, rlen)) in self_sends.iter().zip(&self_recvs) {
        let len = slen.min(rlen);
        b.copy(
            region(Buffer::Send, (sat, len)),
            region(Buffer::Recv, (rat, len)),
            &[],
        );
    }
    b.finish()
}

/// Plans the exchange of `sends` (blocks of `input`, one per destination) and `recvs` (of
/// `output`, one per source) on `comm`.
fn exchange(
    s: &mut State,
    comm: Handle,
    input: Input,
    sends: &[(usize, usize)],
    mut output: Output,
    recvs: &[(usize, usize)],
) -> Res<Prepared> {
    let (sources, dests, cart) = neighbourhood(s, comm)?;
    // Staged output holds one block per source: those of MPI_PROC_NULL receive nothing, so
    // they must not be unpacked over the user's data either.
    if let Some(staged) = &mut output.staged {
        let blocks = &mut staged.1;
        let mut i = 0;
        blocks.retain(|_| {
            i += 1;
            sources.get(i - 1) != Some(&MPI_PROC_NULL)
        });
    }
    let core = s.core_comm(comm)?;
    let schedule = plan(
        (core.rank(), core.size()),
        (&sources, &dests, cart),
        (input.len, output.len),
        sends,
        recvs,
    );
    Ok(Prepared {
        comm,
        core,
        schedule: ferry_core::Planned::check(schedule)?,
        input,
        output,
        reduce: None,
    })
}

/// (offset, bytes) of each block of `b`.
fn regions(b: &Blocks) -> Vec<(usize, usize)> {
    b.displs
        .iter()
        .copied()
        .zip(b.counts.iter().copied())
        .collect()
}

/// Typed blocks and their packed (offset, bytes).
type WBlocks = (Vec<Typed>, Vec<(usize, usize)>);

/// Blocks of `types[i]` with byte displacements, packed one after the other.
unsafe fn w_blocks(
    s: &mut State,
    buf: *const c_void,
    n: usize,
    counts: Ints,
    displs: Ints,
    types: *const Handle,
) -> Res<WBlocks> {
    if n > 0 && (counts.is_null() || displs.is_null() || types.is_null()) {
        return fail(MPI_ERR_ARG, "counts, displacements or types array is NULL");
    }
    // SAFETY: the caller's contract: each array holds `n` entries (none is NULL: checked).
    let (counts, displs, types) = unsafe {
        (
            counts.get(n, "counts array")?,
            displs.get(n, "displacements array")?,
            check::slice(types, n, "types array")?,
        )
    };
    let typed = (0..n)
        .map(|i| {
            Ok(Typed {
                dt: s.committed_type(types[i])?,
                count: count_arg(counts[i])?,
                base: (buf as *mut u8).wrapping_offset(displs[i] as isize),
            })
        })
        .collect::<Res<Vec<Typed>>>()?;
    let bytes: Vec<usize> = typed.iter().map(Typed::bytes).collect();
    let at = packed_displs(&bytes);
    Ok((typed, at.into_iter().zip(bytes).collect()))
}

/// MPI_Neighbor_allgather(v): the same block to every destination, one block per source
/// (`recv` = counts and displacements for the v-form, else `recvcount` each).
pub(crate) unsafe fn allgather(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: Count,
    recv: PerRank,
    recvtype: Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    no_in_place_neighbour(sendbuf)?;
    run(request, |s| {
        let (sources, dests, _) = neighbourhood(s, comm)?;
        let send = typed(s, sendbuf, sendcount, sendtype)?;
        let rdt = s.committed_type(recvtype)?;
        // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
        let (rc, rd) = unsafe { layout(sources.len(), recv, recvcount) }?;
        let out = blocks(&rdt, recvbuf as *mut u8, &rc, &rd, false)?;
        let input = Input::of(&send)?;
        let sends = vec![(0, input.len); dests.len()];
        exchange(s, comm, input, &sends, out.output()?, &regions(&out))
    })
}

/// MPI_Neighbor_alltoall(v): block `j` to destination `j`, block `i` from source `i`.
pub(crate) unsafe fn alltoall(
    sendbuf: *const c_void,
    send: (Count, PerRank),
    sendtype: Handle,
    recvbuf: *mut c_void,
    recv: (Count, PerRank),
    recvtype: Handle,
    comm: Handle,
    request: RequestOut<'_>,
) -> Res {
    no_in_place_neighbour(sendbuf)?;
    run(request, |s| {
        let (sources, dests, _) = neighbourhood(s, comm)?;
        let (sdt, rdt) = (s.committed_type(sendtype)?, s.committed_type(recvtype)?);
        // SAFETY: the caller's arrays hold one entry per rank (MPI's contract for the call).
        let (sc, sd) = unsafe { layout(dests.len(), send.1, send.0) }?;
        // SAFETY: as above.
        let (rc, rd) = unsafe { layout(sources.len(), recv.1, recv.0) }?;
        let inb = blocks(&sdt, sendbuf as *mut u8, &sc, &sd, false)?;
        let out = blocks(&rdt, recvbuf as *mut u8, &rc, &rd, false)?;
        exchange(
            s,
            comm,
            inb.input()?,
            &regions(&inb),
            out.output()?,
            &regions(&out),
        )
    })
}

/// MPI_Neighbor_alltoallw: blocks of their own types at byte displacements.
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
    no_in_place_neighbour(sendbuf)?;
    run(request, |s| {
        let (sources, dests, _) = neighbourhood(s, comm)?;
        // SAFETY: the caller's buffers and arrays are as MPI's contract for the call says.
        let (sb, sends) =
            unsafe { w_blocks(s, sendbuf, dests.len(), sendcounts, sdispls, sendtypes) }?;
        // SAFETY: as above.
        let (rb, recvs) =
            unsafe { w_blocks(s, recvbuf, sources.len(), recvcounts, rdispls, recvtypes) }?;
        all_checked(&rb)?;
        let mut v = vec![0u8; recvs.iter().map(|r| r.1).sum()];
        let at = rb.into_iter().zip(recvs.iter().map(|r| r.0)).collect();
        let output = Output {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            staged: Some(Box::new((v, at))),
        };
        exchange(s, comm, Input::gather(&sb)?, &sends, output, &recvs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_sched::Op;

    /// (peer, offset, bytes) of the sends, receives and (send offset, recv offset, bytes) of
    /// the copies, in schedule order.
    type Steps = (
        Vec<(usize, usize, usize)>,
        Vec<(usize, usize, usize)>,
        Vec<(usize, usize, usize)>,
    );

    fn steps(s: &Schedule) -> Steps {
        let (mut sends, mut recvs, mut copies) = (vec![], vec![], vec![]);
        for step in &s.steps {
            match &step.op {
                Op::Send { peer, region, .. } => sends.push((*peer, region.offset, region.len)),
                Op::Recv { peer, region, .. } => recvs.push((*peer, region.offset, region.len)),
                Op::Copy { src, dst } => copies.push((src.offset, dst.offset, src.len)),
                other => panic!("unexpected step {other:?}"),
            }
        }
        (sends, recvs, copies)
    }

    fn blocks(n: usize, len: usize) -> Vec<(usize, usize)> {
        (0..n).map(|i| (i * len, len)).collect()
    }

    #[test]
    fn cartesian_sends_plus_one_first_so_a_double_neighbour_pairs_up() {
        // Rank 0 of a periodic ring of 2: rank 1 is both neighbours.
        let hood = [1, 1];
        let s = plan(
            (0, 2),
            (&hood, &hood, true),
            (8, 8),
            &blocks(2, 4),
            &blocks(2, 4),
        );
        let (sends, recvs, copies) = steps(&s);
        assert_eq!(sends, vec![(1, 4, 4), (1, 0, 4)], "+1 block first");
        assert_eq!(recvs, vec![(1, 0, 4), (1, 4, 4)], "-1 slot first");
        assert!(copies.is_empty());
        s.validate().unwrap();
    }

    #[test]
    fn a_ring_of_one_copies_plus_one_into_minus_one() {
        let hood = [0, 0];
        let s = plan(
            (0, 1),
            (&hood, &hood, true),
            (8, 8),
            &blocks(2, 4),
            &blocks(2, 4),
        );
        let (sends, recvs, copies) = steps(&s);
        assert!(sends.is_empty() && recvs.is_empty());
        assert_eq!(copies, vec![(4, 0, 4), (0, 4, 4)]);
    }

    #[test]
    fn proc_null_neighbours_exchange_nothing_and_graphs_keep_their_order() {
        let (src, dst) = ([MPI_PROC_NULL, 2], [2, MPI_PROC_NULL]);
        let s = plan(
            (0, 3),
            (&src, &dst, true),
            (8, 8),
            &blocks(2, 4),
            &blocks(2, 4),
        );
        let (sends, recvs, _) = steps(&s);
        assert_eq!((sends, recvs), (vec![(2, 0, 4)], vec![(2, 4, 4)]));
        // A graph with a self loop between two edges to rank 1, and an empty block.
        let hood = [1, 0, 1];
        let sb = [(0, 4), (4, 4), (8, 0)];
        let s = plan((0, 2), (&hood, &hood, false), (8, 12), &sb, &blocks(3, 4));
        let (sends, recvs, copies) = steps(&s);
        assert_eq!(sends, vec![(1, 0, 4), (1, 0, 0)]);
        assert_eq!(recvs, vec![(1, 0, 4), (1, 8, 4)]);
        assert_eq!(copies, vec![(4, 4, 4)]);
        s.validate().unwrap();
    }
}
