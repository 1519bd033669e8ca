//! Runs the schedules of all ranks of one collective call in memory, on real bytes, in one
//! thread: the reference executor that tests every algorithm without a network.

use crate::{Buffer, Op, Order, Rank, Region, Schedule};
use std::collections::HashMap;

/// The call's reduction: combine `src` into `dst` element-wise in the given order.
pub type ReduceFn<'a> = &'a dyn Fn(&[u8], &mut [u8], Order);

struct RankState {
    scratch: Vec<Vec<u8>>,
    done: Vec<bool>,
}

fn read(region: &Region, send: &[u8], recv: &[u8], st: &RankState) -> Vec<u8> {
    let r = region.offset..region.offset + region.len;
    match region.buffer {
        Buffer::Send => send[r].to_vec(),
        Buffer::Recv => recv[r].to_vec(),
        Buffer::Scratch(i) => st.scratch[i as usize][r].to_vec(),
    }
}

fn write(region: &Region, bytes: &[u8], recv: &mut [u8], st: &mut RankState) {
    let r = region.offset..region.offset + region.len;
    match region.buffer {
        Buffer::Send => unreachable!("validate() refuses writes to the send buffer"),
        Buffer::Recv => recv[r].copy_from_slice(bytes),
        Buffer::Scratch(i) => st.scratch[i as usize][r].copy_from_slice(bytes),
    }
}

/// Executes `schedules` (one per rank, index = rank) with each rank's send buffer `sends[r]` and
/// receive buffer `recvs[r]`. Fails on an invalid schedule, a size mismatch between a send and
/// its receive, a deadlock, or a message nobody received.
pub fn interpret(
    schedules: &[Schedule],
    sends: &[Vec<u8>],
    recvs: &mut [Vec<u8>],
    reduce: ReduceFn,
) -> Result<(), String> {
    let n = schedules.len();
    for (r, s) in schedules.iter().enumerate() {
        s.validate().map_err(|e| e.to_string())?;
        if s.rank != r || s.size != n {
            return Err(format!("schedule {r} is for rank {} of {}", s.rank, s.size));
        }
        if sends[r].len() < s.send_bytes || recvs[r].len() < s.recv_bytes {
            return Err(format!("rank {r}: buffers smaller than the schedule needs"));
        }
    }
    let mut states: Vec<RankState> = schedules
        .iter()
        .map(|s| RankState {
            scratch: s.scratch.iter().map(|&len| vec![0u8; len]).collect(),
            done: vec![false; s.steps.len()],
        })
        .collect();
    // (from, to, seq) → bytes in flight; copies a RecvFirst will drop.
    let mut mailbox: HashMap<(Rank, Rank, u32), Vec<u8>> = HashMap::new();
    let mut to_drop: Vec<(Rank, Rank, u32)> = vec![];
    loop {
        let mut progressed = false;
        for (rank, schedule) in schedules.iter().enumerate() {
            for (i, step) in schedule.steps.iter().enumerate() {
                let st = &states[rank];
                if st.done[i] || !step.deps.iter().all(|&d| st.done[d as usize]) {
                    continue;
                }
                let st = &mut states[rank];
                let ran = match &step.op {
                    Op::Send { peer, seq, region } => {
                        let bytes = read(region, &sends[rank], &recvs[rank], st);
                        mailbox.insert((rank, *peer, *seq), bytes);
                        true
                    }
                    Op::Recv { peer, seq, region } => match mailbox.remove(&(*peer, rank, *seq)) {
                        Some(bytes) if bytes.len() == region.len => {
                            write(region, &bytes, &mut recvs[rank], st);
                            true
                        }
                        Some(bytes) => {
                            return Err(format!(
                                "rank {rank} step {i}: message {seq} from {peer} has {} bytes, receive expects {}",
                                bytes.len(),
                                region.len
                            ))
                        }
                        None => false,
                    },
                    Op::RecvFirst { from, region } => {
                        match from.iter().find(|(p, s)| mailbox.contains_key(&(*p, rank, *s))) {
                            Some(&(p, s)) => {
                                let bytes = mailbox.remove(&(p, rank, s)).unwrap_or_default();
                                if bytes.len() != region.len {
                                    return Err(format!("rank {rank} step {i}: copy from {p} has {} bytes", bytes.len()));
                                }
                                write(region, &bytes, &mut recvs[rank], st);
                                to_drop.extend(from.iter().filter(|f| f.0 != p).map(|&(q, t)| (q, rank, t)));
                                true
                            }
                            None => false,
                        }
                    }
                    Op::Reduce { src, dst, order } => {
                        let s = read(src, &sends[rank], &recvs[rank], st);
                        let mut d = read(dst, &sends[rank], &recvs[rank], st);
                        reduce(&s, &mut d, *order);
                        write(dst, &d, &mut recvs[rank], st);
                        true
                    }
                    Op::Copy { src, dst } => {
                        let s = read(src, &sends[rank], &recvs[rank], st);
                        write(dst, &s, &mut recvs[rank], st);
                        true
                    }
                };
                if ran {
                    states[rank].done[i] = true;
                    progressed = true;
                }
            }
        }
        to_drop.retain(|key| mailbox.remove(key).is_none());
        if !progressed {
            break;
        }
    }
    let stuck: Vec<String> = states
        .iter()
        .enumerate()
        .filter_map(|(r, st)| {
            let waiting: Vec<usize> = (0..st.done.len()).filter(|&i| !st.done[i]).collect();
            (!waiting.is_empty()).then(|| format!("rank {r} steps {waiting:?}"))
        })
        .collect();
    if !stuck.is_empty() {
        return Err(format!("deadlock: {}", stuck.join("; ")));
    }
    if let Some(key) = mailbox.keys().find(|k| !to_drop.contains(k)) {
        return Err(format!(
            "message {} from rank {} to rank {} was never received",
            key.2, key.0, key.1
        ));
    }
    Ok(())
}
