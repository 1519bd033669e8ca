//! The standard collective algorithms, each a function from (rank, size, sizes…) to the
//! [`Schedule`] of that rank. Buffer conventions follow MPI:
//!
//! - barrier: no buffers.
//! - bcast: the data lives in [`Buffer::Recv`] on every rank (MPI's single in/out buffer).
//! - reduce / allreduce: input in [`Buffer::Send`] (or, `in_place`, already in `Recv`), result in
//!   `Recv` (reduce: at the root only).
//! - allgather / gather: each rank's block in `Send`, all blocks in rank order in `Recv`.
//! - scatter: all blocks in the root's `Send`, each rank's block in its `Recv`.
//! - alltoall: block j of `Send` goes to rank j; block i of `Recv` comes from rank i.
//!
//! Sizes are in bytes; `elem` is the element size of a reduction, so blocks never split one.

use crate::{Buffer, Order, Rank, Region, Schedule, ScheduleBuilder, StepId};

fn recv_region(offset: usize, len: usize) -> Region {
    Region::new(Buffer::Recv, offset, len)
}

/// Dissemination barrier: ⌈log2 n⌉ rounds of empty messages to rank + 2^k.
pub fn barrier_dissemination(rank: Rank, size: usize) -> Schedule {
    let mut b = ScheduleBuilder::new(rank, size, 0, 0);
    let empty = recv_region(0, 0);
    let mut last: Vec<StepId> = vec![];
    let mut distance = 1;
    while distance < size {
        let send = b.send((rank + distance) % size, empty, &last);
        let recv = b.recv((rank + size - distance) % size, empty, &last);
        last = vec![send, recv];
        distance *= 2;
    }
    b.finish()
}

/// Binomial-tree broadcast of `bytes` from `root`: ⌈log2 n⌉ rounds, good for small messages.
pub fn bcast_binomial(rank: Rank, size: usize, root: Rank, bytes: usize) -> Schedule {
    let mut b = ScheduleBuilder::new(rank, size, 0, bytes);
    let rel = (rank + size - root) % size;
    let abs = |r: usize| (r + root) % size;
    let data = recv_region(0, bytes);
    let mut mask = 1;
    let mut got: Vec<StepId> = vec![];
    while mask < size {
        if rel & mask != 0 {
            got = vec![b.recv(abs(rel - mask), data, &[])];
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < size {
            b.send(abs(rel + mask), data, &got);
        }
        mask >>= 1;
    }
    b.finish()
}

/// Bytes of block `i` of `n` equal blocks covering `bytes`, whole `elem`s each: (offset, len).
fn block(i: usize, n: usize, bytes: usize, elem: usize) -> (usize, usize) {
    let elems = bytes / elem;
    let per = elems.div_ceil(n).max(1) * elem;
    let start = (i * per).min(bytes);
    (start, ((i + 1) * per).min(bytes) - start)
}

/// Byte range of blocks `[first, last)`.
fn blocks(first: usize, last: usize, n: usize, bytes: usize, elem: usize) -> (usize, usize) {
    let (start, _) = block(first, n, bytes, elem);
    let (end_start, end_len) = block(last - 1, n, bytes, elem);
    (start, end_start + end_len - start)
}

/// Broadcast for large messages: binomial scatter of n blocks, then a ring allgather
/// (van de Geijn): about 2× the data volume of one copy per rank instead of log n copies.
pub fn bcast_scatter_allgather(rank: Rank, size: usize, root: Rank, bytes: usize) -> Schedule {
    let mut b = ScheduleBuilder::new(rank, size, 0, bytes);
    let rel = (rank + size - root) % size;
    let abs = |r: usize| (r + root) % size;
    let range = |first: usize, last: usize| {
        let (o, l) = blocks(first, last.min(size), size, bytes, 1);
        recv_region(o, l)
    };
    // Scatter: rank rel receives the blocks of its subtree [rel, rel + mask).
    let mut mask = 1;
    let mut have: Vec<StepId> = vec![];
    while mask < size {
        if rel & mask != 0 {
            let r = range(rel, rel + mask);
            if r.len > 0 {
                have = vec![b.recv(abs(rel - mask), r, &[])];
            }
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < size {
            let r = range(rel + mask, rel + 2 * mask);
            if r.len > 0 {
                b.send(abs(rel + mask), r, &have);
            }
        }
        mask >>= 1;
    }
    // Ring allgather over relative ranks: at step s, pass on the block received at step s-1.
    let scattered = b.all();
    let (left, right) = (abs((rel + size - 1) % size), abs((rel + 1) % size));
    let mut prev: Vec<StepId> = scattered.clone();
    for s in 0..size.saturating_sub(1) {
        let out = range((rel + size - s) % size, (rel + size - s) % size + 1);
        let inc = range(
            (rel + 2 * size - s - 1) % size,
            (rel + 2 * size - s - 1) % size + 1,
        );
        let mut deps = scattered.clone();
        deps.extend(&prev);
        if out.len > 0 {
            b.send(right, out, &deps);
        }
        prev = if inc.len > 0 {
            vec![b.recv(left, inc, &scattered)]
        } else {
            vec![]
        };
    }
    b.finish()
}

/// Copies the input into the result buffer unless the call is in place.
fn load_input(b: &mut ScheduleBuilder, bytes: usize, in_place: bool) -> Vec<StepId> {
    if in_place {
        vec![]
    } else {
        vec![b.copy(
            Region::new(Buffer::Send, 0, bytes),
            recv_region(0, bytes),
            &[],
        )]
    }
}

/// Binomial-tree reduce to `root`. Non-commutative operations are combined in rank order; for
/// them a root other than 0 gets the result from rank 0 (as MPICH does).
pub fn reduce_binomial(
    rank: Rank,
    size: usize,
    root: Rank,
    bytes: usize,
    commutative: bool,
    in_place: bool,
) -> Schedule {
    let tree_root = if commutative { root } else { 0 };
    let is_root = rank == root;
    let mut b = ScheduleBuilder::new(
        rank,
        size,
        if in_place && is_root { 0 } else { bytes },
        if is_root { bytes } else { 0 },
    );
    let rel = (rank + size - tree_root) % size;
    let abs = |r: usize| (r + tree_root) % size;
    // A rank's children cover the ranks above it, up to its lowest set bit; it sends to the
    // rank below that bit.
    let children: Vec<usize> = (0..usize::BITS)
        .map(|bit| 1usize << bit)
        .take_while(|&mask| mask < size && rel & mask == 0)
        .map(|mask| rel | mask)
        .filter(|&child| child < size)
        .collect();
    let parent = (rel != 0).then(|| abs(rel & (rel - 1)));
    let input = Region::new(
        if is_root && in_place {
            Buffer::Recv
        } else {
            Buffer::Send
        },
        0,
        bytes,
    );
    // The accumulator: the root's result buffer, a scratch buffer on an inner rank; a leaf
    // sends its input as it is.
    let mut acc = input;
    let mut last = vec![];
    let mut later_children = &children[..];
    if is_root || !children.is_empty() {
        let buffer = if is_root {
            Buffer::Recv
        } else {
            b.scratch(bytes)
        };
        acc = Region::new(buffer, 0, bytes);
        match children.split_first() {
            // The first child's data lands in the accumulator and the input is combined
            // into it (the input covers the lower ranks): no copy of the input.
            Some((&first, rest)) if input.buffer != buffer => {
                let r = b.recv(abs(first), acc, &[]);
                last = vec![b.reduce(input, acc, Order::SrcFirst, &[r])];
                later_children = rest;
            }
            _ if input.buffer != buffer => last = vec![b.copy(input, acc, &[])],
            _ => {}
        }
    }
    if !later_children.is_empty() {
        let tmp = Region::new(b.scratch(bytes), 0, bytes);
        for &child in later_children {
            // The child's data covers higher ranks than ours: acc = acc ⊕ child.
            let r = b.recv(abs(child), tmp, &last);
            last = vec![b.reduce(tmp, acc, Order::DstFirst, &[last.as_slice(), &[r]].concat())];
        }
    }
    if let Some(parent) = parent {
        last = vec![b.send(parent, acc, &last)];
    }
    if tree_root != root {
        if rank == tree_root {
            b.send(root, acc, &last);
        } else if is_root {
            b.recv(tree_root, acc, &last);
        }
    }
    b.finish()
}

/// Recursive-doubling allreduce (MPICH's, with its fold of the ranks beyond the largest power
/// of two): log2 n exchanges of the whole vector, good for short vectors; correct for
/// non-commutative operations.
pub fn allreduce_recursive_doubling(
    rank: Rank,
    size: usize,
    bytes: usize,
    in_place: bool,
) -> Schedule {
    let mut b = ScheduleBuilder::new(rank, size, if in_place { 0 } else { bytes }, bytes);
    if size == 2 && !in_place {
        // The one exchange reads the send buffers themselves: the peer's vector lands in the
        // receive buffer and this rank's is combined into it there, so the vector is moved
        // once and read twice, where the copy in, the scratch and the combine move it three
        // times and the combine waits for the peer to have read the receive buffer.
        let (peer, mine) = (1 - rank, Region::new(Buffer::Send, 0, bytes));
        b.send(peer, mine, &[]);
        let theirs = b.recv(peer, recv_region(0, bytes), &[]);
        let order = if peer < rank {
            Order::DstFirst
        } else {
            Order::SrcFirst
        };
        b.reduce(mine, recv_region(0, bytes), order, &[theirs]);
        return b.finish();
    }
    let last = load_input(&mut b, bytes, in_place);
    recursive_doubling(&mut b, recv_region(0, bytes), last);
    b.finish()
}

/// Ring allreduce (reduce-scatter then allgather, each n-1 steps of 1/n of the vector): about
/// 2× the vector per rank whatever n, the choice for long vectors. Commutative operations only.
pub fn allreduce_ring(
    rank: Rank,
    size: usize,
    bytes: usize,
    elem: usize,
    in_place: bool,
) -> Schedule {
    let mut b = ScheduleBuilder::new(rank, size, if in_place { 0 } else { bytes }, bytes);
    let mut last = load_input(&mut b, bytes, in_place);
    let blk = |i: usize| {
        let (o, l) = block(i % size, size, bytes, elem.max(1));
        recv_region(o, l)
    };
    let tmp_buf = b.scratch(bytes.div_ceil(size.max(1)) + elem.max(1));
    let (left, right) = ((rank + size - 1) % size, (rank + 1) % size);
    // Each step sends the block the previous step produced (reduced or received), so a send
    // waits for that producer only, not for the previous send to be delivered: sends write
    // nothing. Receives and reductions write, so they wait for the whole previous step.
    let mut produced = last.clone();
    for s in 0..size.saturating_sub(1) {
        let (out, inc) = (blk(rank + size - s), blk(rank + 2 * size - s - 1));
        let tmp = Region::new(tmp_buf, 0, inc.len);
        let mut step = vec![];
        if out.len > 0 {
            step.push(b.send(right, out, &produced));
        }
        if inc.len > 0 {
            let r = b.recv(left, tmp, &last);
            let reduced = b.reduce(tmp, inc, Order::SrcFirst, &[last.as_slice(), &[r]].concat());
            step.push(reduced);
            produced = vec![reduced];
        } else {
            produced.clone_from(&step);
        }
        last = if step.is_empty() { last } else { step };
    }
    for s in 0..size.saturating_sub(1) {
        let (out, inc) = (blk(rank + 1 + size - s), blk(rank + size - s));
        let mut step = vec![];
        if out.len > 0 {
            step.push(b.send(right, out, &produced));
        }
        if inc.len > 0 {
            let received = b.recv(left, inc, &last);
            step.push(received);
            produced = vec![received];
        } else {
            produced.clone_from(&step);
        }
        last = if step.is_empty() { last } else { step };
    }
    b.finish()
}

/// Ring allgather of `block` bytes per rank: n-1 steps, each passing on the block received last.
pub fn allgather_ring(rank: Rank, size: usize, block: usize, in_place: bool) -> Schedule {
    let (counts, displs) = uniform(size, block);
    allgatherv_ring(rank, size, &counts, &displs, in_place)
}

/// Linear gather of `block` bytes per rank to `root`.
pub fn gather_linear(
    rank: Rank,
    size: usize,
    root: Rank,
    block: usize,
    in_place: bool,
) -> Schedule {
    let (counts, displs) = uniform(size, block);
    gatherv_linear(rank, size, root, &counts, &displs, in_place)
}

/// Linear scatter of `block` bytes per rank from `root`.
pub fn scatter_linear(
    rank: Rank,
    size: usize,
    root: Rank,
    block: usize,
    in_place: bool,
) -> Schedule {
    let (counts, displs) = uniform(size, block);
    scatterv_linear(rank, size, root, &counts, &displs, in_place)
}

/// Pairwise alltoall: in step s, send to rank + s and receive from rank − s, all steps at once.
pub fn alltoall_pairwise(rank: Rank, size: usize, block: usize) -> Schedule {
    let (counts, displs) = uniform(size, block);
    alltoallv_pairwise(rank, size, &counts, &displs, &counts, &displs)
}

/// Bytes a buffer needs to hold blocks of `counts[r]` bytes at `displs[r]`.
pub fn extent(counts: &[usize], displs: &[usize]) -> usize {
    counts
        .iter()
        .zip(displs)
        .map(|(c, d)| c + d)
        .max()
        .unwrap_or(0)
}

/// Counts and displacements of `size` consecutive blocks of `block` bytes.
fn uniform(size: usize, block: usize) -> (Vec<usize>, Vec<usize>) {
    (vec![block; size], (0..size).map(|r| r * block).collect())
}

/// Linear gather of variable blocks: rank r's `counts[r]` bytes land at `displs[r]` of `root`'s
/// receive buffer.
pub fn gatherv_linear(
    rank: Rank,
    size: usize,
    root: Rank,
    counts: &[usize],
    displs: &[usize],
    in_place: bool,
) -> Schedule {
    let is_root = rank == root;
    let recv_bytes = if is_root { extent(counts, displs) } else { 0 };
    let mut b = ScheduleBuilder::new(
        rank,
        size,
        if in_place && is_root { 0 } else { counts[rank] },
        recv_bytes,
    );
    if is_root {
        for src in (0..size).filter(|&s| s != root) {
            b.recv(src, recv_region(displs[src], counts[src]), &[]);
        }
        if !in_place {
            b.copy(
                Region::new(Buffer::Send, 0, counts[root]),
                recv_region(displs[root], counts[root]),
                &[],
            );
        }
    } else {
        b.send(root, Region::new(Buffer::Send, 0, counts[rank]), &[]);
    }
    b.finish()
}

/// Linear scatter of variable blocks: `counts[r]` bytes at `displs[r]` of `root`'s send buffer go
/// to rank r.
pub fn scatterv_linear(
    rank: Rank,
    size: usize,
    root: Rank,
    counts: &[usize],
    displs: &[usize],
    in_place: bool,
) -> Schedule {
    let is_root = rank == root;
    let send_bytes = if is_root { extent(counts, displs) } else { 0 };
    let mut b = ScheduleBuilder::new(
        rank,
        size,
        send_bytes,
        if in_place && is_root { 0 } else { counts[rank] },
    );
    if is_root {
        for dst in (0..size).filter(|&d| d != root) {
            b.send(
                dst,
                Region::new(Buffer::Send, displs[dst], counts[dst]),
                &[],
            );
        }
        if !in_place {
            b.copy(
                Region::new(Buffer::Send, displs[root], counts[root]),
                recv_region(0, counts[root]),
                &[],
            );
        }
    } else {
        b.recv(root, recv_region(0, counts[rank]), &[]);
    }
    b.finish()
}

/// Ring allgather of variable blocks: rank r's `counts[r]` bytes land at `displs[r]` everywhere.
/// Empty blocks still travel, so every rank takes the same n-1 steps.
pub fn allgatherv_ring(
    rank: Rank,
    size: usize,
    counts: &[usize],
    displs: &[usize],
    in_place: bool,
) -> Schedule {
    let recv_bytes = extent(counts, displs);
    let mut b = ScheduleBuilder::new(
        rank,
        size,
        if in_place { 0 } else { counts[rank] },
        recv_bytes,
    );
    let at = |i: usize| recv_region(displs[i % size], counts[i % size]);
    let own = Region::new(Buffer::Send, 0, counts[rank]);
    let (left, right) = ((rank + size - 1) % size, (rank + 1) % size);
    let mut last = vec![];
    for s in 0..size.saturating_sub(1) {
        // The first step sends this rank's own block straight from the send buffer, so it
        // need not wait for the local copy, which comes next: the peer learns of the block
        // (a long one's address) before this rank spends the copy's time.
        let send = if s == 0 && !in_place {
            let send = b.send(right, own, &[]);
            b.copy(own, at(rank), &[]);
            send
        } else {
            b.send(right, at(rank + size - s), &last)
        };
        let recv = b.recv(left, at(rank + 2 * size - s - 1), &[]);
        last = vec![send, recv];
    }
    if size == 1 && !in_place {
        b.copy(own, at(rank), &[]);
    }
    b.finish()
}

/// Pairwise alltoall of variable blocks, this rank's view: `send_counts[j]` bytes at
/// `send_displs[j]` go to rank j, `recv_counts[i]` bytes from rank i land at `recv_displs[i]`.
/// Every pair exchanges a message, even an empty one, so counts that disagree between sender and
/// receiver show up as a size mismatch instead of a hang.
pub fn alltoallv_pairwise(
    rank: Rank,
    size: usize,
    send_counts: &[usize],
    send_displs: &[usize],
    recv_counts: &[usize],
    recv_displs: &[usize],
) -> Schedule {
    let mut b = ScheduleBuilder::new(
        rank,
        size,
        extent(send_counts, send_displs),
        extent(recv_counts, recv_displs),
    );
    let mine = Region::new(Buffer::Send, send_displs[rank], send_counts[rank]);
    b.copy(
        mine,
        recv_region(recv_displs[rank], recv_counts[rank].min(send_counts[rank])),
        &[],
    );
    for s in 1..size {
        let (to, from) = ((rank + s) % size, (rank + size - s) % size);
        b.send(
            to,
            Region::new(Buffer::Send, send_displs[to], send_counts[to]),
            &[],
        );
        b.recv(from, recv_region(recv_displs[from], recv_counts[from]), &[]);
    }
    b.finish()
}

/// Reduce-scatter: the element-wise reduction of every rank's `sum(counts)`-byte input, of which
/// rank r keeps the `counts[r]` bytes at offset `sum(counts[..r])`. Built as a recursive-doubling
/// allreduce into scratch, so non-commutative operations keep rank order.
pub fn reduce_scatter(rank: Rank, size: usize, counts: &[usize], in_place: bool) -> Schedule {
    let total: usize = counts.iter().sum();
    let offset: usize = counts[..rank].iter().sum();
    // In place, the input is the whole receive buffer and the result its first counts[rank] bytes.
    let mut b = ScheduleBuilder::new(
        rank,
        size,
        if in_place { 0 } else { total },
        if in_place { total } else { counts[rank] },
    );
    let acc = Region::new(b.scratch(total), 0, total);
    let input = Region::new(if in_place { Buffer::Recv } else { Buffer::Send }, 0, total);
    let last = vec![b.copy(input, acc, &[])];
    let last = recursive_doubling(&mut b, acc, last);
    b.copy(
        acc.sub(offset, counts[rank]),
        recv_region(0, counts[rank]),
        &last,
    );
    b.finish()
}

/// The exchange part of [`allreduce_recursive_doubling`] on `acc`, after `last`.
fn recursive_doubling(b: &mut ScheduleBuilder, acc: Region, mut last: Vec<StepId>) -> Vec<StepId> {
    let (rank, size) = (b.rank(), b.size());
    let tmp = Region::new(b.scratch(acc.len), 0, acc.len);
    let pof2 = if size == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - size.leading_zeros())
    };
    let rem = size - pof2;
    // Fold: among the first 2·rem ranks, even ones hand their data to the next odd one.
    let newrank = if rank < 2 * rem {
        if rank.is_multiple_of(2) {
            last = vec![b.send(rank + 1, acc, &last)];
            None
        } else {
            let r = b.recv(rank - 1, tmp, &last);
            last = vec![b.reduce(tmp, acc, Order::SrcFirst, &[last.as_slice(), &[r]].concat())];
            Some(rank / 2)
        }
    } else {
        Some(rank - rem)
    };
    if let Some(newrank) = newrank {
        let mut mask = 1;
        while mask < pof2 {
            let newdst = newrank ^ mask;
            let dst = if newdst < rem {
                newdst * 2 + 1
            } else {
                newdst + rem
            };
            let s = b.send(dst, acc, &last);
            let r = b.recv(dst, tmp, &last);
            let order = if dst < rank {
                Order::SrcFirst
            } else {
                Order::DstFirst
            };
            last = vec![b.reduce(tmp, acc, order, &[s, r])];
            mask <<= 1;
        }
    }
    // Unfold: the odd ranks return the result to the even ones that sat out.
    if rank < 2 * rem {
        last = if rank % 2 == 1 {
            vec![b.send(rank - 1, acc, &last)]
        } else {
            vec![b.recv(rank + 1, acc, &last)]
        };
    }
    last
}

/// Inclusive (`exclusive = false`, MPI_Scan) or exclusive (MPI_Exscan) prefix reduction by
/// recursive doubling (MPICH's): rank r ends with x0 ⊕ … ⊕ xr, or x0 ⊕ … ⊕ x(r-1) (rank 0's
/// exclusive result is left untouched). Rank order is kept, so any associative operation works.
pub fn scan_recursive_doubling(
    rank: Rank,
    size: usize,
    bytes: usize,
    exclusive: bool,
    in_place: bool,
) -> Schedule {
    let mut b = ScheduleBuilder::new(rank, size, if in_place { 0 } else { bytes }, bytes);
    let result = recv_region(0, bytes);
    let input = Region::new(if in_place { Buffer::Recv } else { Buffer::Send }, 0, bytes);
    // partial: the reduction of the block of ranks this rank has heard of, including itself.
    let partial = Region::new(b.scratch(bytes), 0, bytes);
    let tmp = Region::new(b.scratch(bytes), 0, bytes);
    let mut last = vec![b.copy(input, partial, &[])];
    let mut have_result = !exclusive;
    if !exclusive && !in_place {
        last.push(b.copy(input, result, &[]));
    }
    let mut mask = 1;
    while mask < size {
        let dst = rank ^ mask;
        if dst < size {
            let s = b.send(dst, partial, &last);
            let r = b.recv(dst, tmp, &last);
            let deps = [s, r];
            if rank > dst {
                // tmp holds lower ranks: it goes first.
                let p = b.reduce(tmp, partial, Order::SrcFirst, &deps);
                let q = if have_result {
                    b.reduce(tmp, result, Order::SrcFirst, &deps)
                } else {
                    have_result = true;
                    b.copy(tmp, result, &deps)
                };
                last = vec![p, q];
            } else {
                last = vec![b.reduce(tmp, partial, Order::DstFirst, &deps)];
                // The result may have been written by an earlier step: keep it in the chain.
            }
        }
        mask <<= 1;
    }
    let _ = last;
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{interpret, Op};

    #[test]
    fn ring_allgather_sends_its_own_block_without_waiting_for_the_local_copy() {
        let first_send = |s: &Schedule| {
            s.steps
                .iter()
                .find(|step| matches!(step.op, Op::Send { .. }))
                .cloned()
                .unwrap()
        };
        let send = first_send(&allgather_ring(1, 4, 8, false));
        assert!(send.deps.is_empty(), "{send:?}");
        assert!(matches!(send.op, Op::Send { region, .. } if region.buffer == Buffer::Send));
        // In place, the block is already where the receive buffer holds it.
        let send = first_send(&allgather_ring(1, 4, 8, true));
        assert!(matches!(send.op, Op::Send { region, .. } if region.buffer == Buffer::Recv));
    }

    /// Sum of little-endian u64s: commutative.
    fn sum(src: &[u8], dst: &mut [u8], _: Order) {
        for (d, s) in dst.chunks_mut(8).zip(src.chunks(8)) {
            let v = u64::from_le_bytes(d.try_into().unwrap())
                .wrapping_add(u64::from_le_bytes(s.try_into().unwrap()));
            d.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Composition of affine maps x ↦ a·x + b mod 2^32, each element 8 bytes (a, b): associative
    /// and not commutative, so operand order shows in the result.
    fn affine(src: &[u8], dst: &mut [u8], order: Order) {
        let split = |x: &[u8]| {
            (
                u32::from_le_bytes(x[..4].try_into().unwrap()),
                u32::from_le_bytes(x[4..].try_into().unwrap()),
            )
        };
        // (f ∘ g) applied as "first f then g": (a1,b1) then (a2,b2) = (a2·a1, a2·b1 + b2).
        let then = |(a1, b1): (u32, u32), (a2, b2): (u32, u32)| {
            (a2.wrapping_mul(a1), a2.wrapping_mul(b1).wrapping_add(b2))
        };
        for (d, s) in dst.chunks_mut(8).zip(src.chunks(8)) {
            let (x, y) = (split(s), split(d));
            let (a, b) = match order {
                Order::SrcFirst => then(x, y),
                Order::DstFirst => then(y, x),
            };
            d[..4].copy_from_slice(&a.to_le_bytes());
            d[4..].copy_from_slice(&b.to_le_bytes());
        }
    }

    fn data(rank: usize, len: usize, salt: u64) -> Vec<u8> {
        (0..len)
            .map(|i| ((rank as u64 * 131 + i as u64 * 7 + salt) % 251) as u8 | 1)
            .collect()
    }

    fn run(
        schedules: Vec<Schedule>,
        sends: Vec<Vec<u8>>,
        recv_len: &dyn Fn(usize) -> usize,
        init: &dyn Fn(usize) -> Vec<u8>,
        reduce: crate::ReduceFn,
    ) -> Vec<Vec<u8>> {
        let mut recvs: Vec<Vec<u8>> = (0..schedules.len())
            .map(|r| {
                let mut v = init(r);
                v.resize(recv_len(r), 0);
                v
            })
            .collect();
        interpret(&schedules, &sends, &mut recvs, reduce).unwrap_or_else(|e| panic!("{e}"));
        recvs
    }

    fn fold(inputs: &[Vec<u8>], op: fn(&[u8], &mut [u8], Order)) -> Vec<u8> {
        let mut acc = inputs[0].clone();
        for x in &inputs[1..] {
            op(x, &mut acc, Order::DstFirst);
        }
        acc
    }

    const SIZES: std::ops::RangeInclusive<usize> = 1..=17;

    #[test]
    fn barrier_completes_for_every_size() {
        for n in SIZES {
            run(
                (0..n).map(|r| barrier_dissemination(r, n)).collect(),
                vec![vec![]; n],
                &|_| 0,
                &|_| vec![],
                &sum,
            );
        }
    }

    #[test]
    fn bcasts_deliver_the_root_buffer() {
        for n in SIZES {
            for root in [0, n / 2, n - 1] {
                for bytes in [0, 1, 5, 64, 1000] {
                    let expected = data(root, bytes, 3);
                    for algo in [
                        bcast_binomial as fn(_, _, _, _) -> _,
                        bcast_scatter_allgather,
                    ] {
                        let out = run(
                            (0..n).map(|r| algo(r, n, root, bytes)).collect(),
                            vec![vec![]; n],
                            &|_| bytes,
                            &|r| if r == root { expected.clone() } else { vec![] },
                            &sum,
                        );
                        assert!(
                            out.iter().all(|o| *o == expected),
                            "n={n} root={root} bytes={bytes}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn reduces_match_the_sequential_fold_commutative_or_not() {
        for n in SIZES {
            for root in [0, n / 2, n - 1] {
                for elems in [0, 1, 3, 20] {
                    let inputs: Vec<Vec<u8>> = (0..n).map(|r| data(r, elems * 8, 11)).collect();
                    for (op, commutative) in
                        [(sum as fn(&[u8], &mut [u8], Order), true), (affine, false)]
                    {
                        let expected = fold(&inputs, op);
                        for in_place in [false, true] {
                            let out = run(
                                (0..n)
                                    .map(|r| {
                                        reduce_binomial(
                                            r,
                                            n,
                                            root,
                                            elems * 8,
                                            commutative,
                                            in_place,
                                        )
                                    })
                                    .collect(),
                                inputs.clone(),
                                &|r| if r == root { elems * 8 } else { 0 },
                                &|r| {
                                    if in_place && r == root {
                                        inputs[r].clone()
                                    } else {
                                        vec![]
                                    }
                                },
                                &op,
                            );
                            assert_eq!(
                                out[root], expected,
                                "n={n} root={root} commutative={commutative} in_place={in_place}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn allreduces_match_the_sequential_fold() {
        for n in SIZES {
            for elems in [0, 1, 3, 20, 33] {
                let bytes = elems * 8;
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| data(r, bytes, 5)).collect();
                for in_place in [false, true] {
                    let init = |r: usize| if in_place { inputs[r].clone() } else { vec![] };
                    let expected = fold(&inputs, affine);
                    let out = run(
                        (0..n)
                            .map(|r| allreduce_recursive_doubling(r, n, bytes, in_place))
                            .collect(),
                        inputs.clone(),
                        &|_| bytes,
                        &init,
                        &affine,
                    );
                    assert!(
                        out.iter().all(|o| *o == expected),
                        "recursive doubling n={n} elems={elems}"
                    );
                    let expected = fold(&inputs, sum);
                    let out = run(
                        (0..n)
                            .map(|r| allreduce_ring(r, n, bytes, 8, in_place))
                            .collect(),
                        inputs.clone(),
                        &|_| bytes,
                        &init,
                        &sum,
                    );
                    assert!(
                        out.iter().all(|o| *o == expected),
                        "ring n={n} elems={elems}"
                    );
                }
            }
        }
    }

    #[test]
    fn gathers_scatters_and_alltoall_place_blocks_by_rank() {
        for n in SIZES {
            for block in [0, 1, 8, 13] {
                let blocks: Vec<Vec<u8>> = (0..n).map(|r| data(r, block, 1)).collect();
                let all: Vec<u8> = blocks.concat();
                let out = run(
                    (0..n).map(|r| allgather_ring(r, n, block, false)).collect(),
                    blocks.clone(),
                    &|_| n * block,
                    &|_| vec![],
                    &sum,
                );
                assert!(out.iter().all(|o| *o == all), "allgather n={n}");
                let out = run(
                    (0..n).map(|r| allgather_ring(r, n, block, true)).collect(),
                    vec![vec![]; n],
                    &|_| n * block,
                    &|r| {
                        let mut v = vec![0u8; n * block];
                        v[r * block..(r + 1) * block].copy_from_slice(&blocks[r]);
                        v
                    },
                    &sum,
                );
                assert!(out.iter().all(|o| *o == all), "allgather in place n={n}");
                for root in [0, n - 1] {
                    let out = run(
                        (0..n)
                            .map(|r| gather_linear(r, n, root, block, false))
                            .collect(),
                        blocks.clone(),
                        &|r| if r == root { n * block } else { 0 },
                        &|_| vec![],
                        &sum,
                    );
                    assert_eq!(out[root], all, "gather n={n} root={root}");
                    let sends: Vec<Vec<u8>> = (0..n)
                        .map(|r| if r == root { all.clone() } else { vec![] })
                        .collect();
                    let out = run(
                        (0..n)
                            .map(|r| scatter_linear(r, n, root, block, false))
                            .collect(),
                        sends,
                        &|_| block,
                        &|_| vec![],
                        &sum,
                    );
                    assert!(
                        (0..n).all(|r| out[r] == blocks[r]),
                        "scatter n={n} root={root}"
                    );
                }
                // alltoall: rank r's block j is data(r*n + j).
                let sends: Vec<Vec<u8>> = (0..n)
                    .map(|r| (0..n).flat_map(|j| data(r * n + j, block, 2)).collect())
                    .collect();
                let out = run(
                    (0..n).map(|r| alltoall_pairwise(r, n, block)).collect(),
                    sends,
                    &|_| n * block,
                    &|_| vec![],
                    &sum,
                );
                for (r, o) in out.iter().enumerate() {
                    let expected: Vec<u8> =
                        (0..n).flat_map(|i| data(i * n + r, block, 2)).collect();
                    assert_eq!(*o, expected, "alltoall n={n} rank {r}");
                }
            }
        }
    }

    #[test]
    fn v_variants_place_variable_blocks() {
        for n in SIZES {
            // Rank r contributes (r * 5) % 7 bytes; blocks packed with a gap of 3 bytes.
            let counts: Vec<usize> = (0..n).map(|r| (r * 5) % 7).collect();
            let displs: Vec<usize> = (0..n)
                .scan(0, |at, r| {
                    let d = *at;
                    *at += counts[r] + 3;
                    Some(d)
                })
                .collect();
            let total = displs[n - 1] + counts[n - 1];
            let blocks: Vec<Vec<u8>> = (0..n).map(|r| data(r, counts[r], 9)).collect();
            let mut expected = vec![0u8; total];
            for r in 0..n {
                expected[displs[r]..displs[r] + counts[r]].copy_from_slice(&blocks[r]);
            }
            let out = run(
                (0..n)
                    .map(|r| allgatherv_ring(r, n, &counts, &displs, false))
                    .collect(),
                blocks.clone(),
                &|_| total,
                &|_| vec![],
                &sum,
            );
            assert!(out.iter().all(|o| *o == expected), "allgatherv n={n}");
            for root in [0, n - 1] {
                let out = run(
                    (0..n)
                        .map(|r| gatherv_linear(r, n, root, &counts, &displs, false))
                        .collect(),
                    blocks.clone(),
                    &|r| if r == root { total } else { 0 },
                    &|_| vec![],
                    &sum,
                );
                assert_eq!(out[root], expected, "gatherv n={n}");
                let sends: Vec<Vec<u8>> = (0..n)
                    .map(|r| if r == root { expected.clone() } else { vec![] })
                    .collect();
                let out = run(
                    (0..n)
                        .map(|r| scatterv_linear(r, n, root, &counts, &displs, false))
                        .collect(),
                    sends,
                    &|r| counts[r],
                    &|_| vec![],
                    &sum,
                );
                assert!((0..n).all(|r| out[r] == blocks[r]), "scatterv n={n}");
            }
            // alltoallv: rank i sends (i + j) % 4 bytes to rank j.
            let c = |i: usize, j: usize| (i + j) % 4;
            let sends: Vec<Vec<u8>> = (0..n)
                .map(|i| (0..n).flat_map(|j| data(i * n + j, c(i, j), 3)).collect())
                .collect();
            let schedules = (0..n)
                .map(|r| {
                    let sc: Vec<usize> = (0..n).map(|j| c(r, j)).collect();
                    let sd: Vec<usize> = (0..n).map(|j| sc[..j].iter().sum()).collect();
                    let rc: Vec<usize> = (0..n).map(|i| c(i, r)).collect();
                    let rd: Vec<usize> = (0..n).map(|i| rc[..i].iter().sum()).collect();
                    alltoallv_pairwise(r, n, &sc, &sd, &rc, &rd)
                })
                .collect();
            let out = run(
                schedules,
                sends,
                &|r| (0..n).map(|i| c(i, r)).sum(),
                &|_| vec![],
                &sum,
            );
            for (r, o) in out.iter().enumerate() {
                let expected: Vec<u8> = (0..n).flat_map(|i| data(i * n + r, c(i, r), 3)).collect();
                assert_eq!(*o, expected, "alltoallv n={n} rank {r}");
            }
        }
    }

    #[test]
    fn reduce_scatter_and_scans_keep_rank_order() {
        for n in SIZES {
            let counts: Vec<usize> = (0..n).map(|r| 8 * ((r % 3) + 1)).collect();
            let total: usize = counts.iter().sum();
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| data(r, total, 17)).collect();
            let full = fold(&inputs, affine);
            for in_place in [false, true] {
                let out = run(
                    (0..n)
                        .map(|r| reduce_scatter(r, n, &counts, in_place))
                        .collect(),
                    if in_place {
                        vec![vec![]; n]
                    } else {
                        inputs.clone()
                    },
                    &|r| if in_place { total } else { counts[r] },
                    &|r| if in_place { inputs[r].clone() } else { vec![] },
                    &affine,
                );
                for r in 0..n {
                    let off: usize = counts[..r].iter().sum();
                    assert_eq!(
                        out[r][..counts[r]],
                        full[off..off + counts[r]],
                        "reduce_scatter n={n} rank {r} in_place={in_place}"
                    );
                }
            }
            let bytes = 24;
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| data(r, bytes, 23)).collect();
            for exclusive in [false, true] {
                for in_place in [false, true] {
                    let out = run(
                        (0..n)
                            .map(|r| scan_recursive_doubling(r, n, bytes, exclusive, in_place))
                            .collect(),
                        if in_place {
                            vec![vec![]; n]
                        } else {
                            inputs.clone()
                        },
                        &|_| bytes,
                        &|r| if in_place { inputs[r].clone() } else { vec![] },
                        &affine,
                    );
                    for (r, o) in out.iter().enumerate() {
                        let upto = if exclusive { r } else { r + 1 };
                        if upto > 0 {
                            let expected = fold(&inputs[..upto], affine);
                            assert_eq!(*o, expected, "scan exclusive={exclusive} n={n} rank {r}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn validate_refuses_bad_schedules() {
        let mut b = ScheduleBuilder::new(0, 2, 4, 4);
        b.copy(recv_region(0, 4), Region::new(Buffer::Send, 0, 4), &[]);
        assert!(b
            .finish()
            .validate()
            .unwrap_err()
            .why
            .contains("writes the send buffer"));
        let mut b = ScheduleBuilder::new(0, 2, 4, 4);
        b.send(0, recv_region(0, 4), &[]);
        assert!(b.finish().validate().is_err(), "send to self");
        let mut b = ScheduleBuilder::new(0, 2, 4, 4);
        b.send(1, recv_region(2, 4), &[]);
        assert!(b.finish().validate().unwrap_err().why.contains("outside"));
    }

    #[test]
    fn interpreter_reports_deadlock_and_lost_messages() {
        let one_way = |r: usize| {
            let mut b = ScheduleBuilder::new(r, 2, 0, 1);
            if r == 0 {
                b.recv(1, recv_region(0, 1), &[]);
            }
            b.finish()
        };
        let err = interpret(
            &[one_way(0), one_way(1)],
            &[vec![], vec![]],
            &mut [vec![0], vec![0]],
            &sum,
        )
        .unwrap_err();
        assert!(err.contains("deadlock"), "{err}");
        let lost = |r: usize| {
            let mut b = ScheduleBuilder::new(r, 2, 0, 1);
            if r == 0 {
                b.send(1, recv_region(0, 1), &[]);
            }
            b.finish()
        };
        let err = interpret(
            &[lost(0), lost(1)],
            &[vec![], vec![]],
            &mut [vec![0], vec![0]],
            &sum,
        )
        .unwrap_err();
        assert!(err.contains("never received"), "{err}");
    }
}
