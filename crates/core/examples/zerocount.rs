//! Collectives of no data between collectives with data, through ferry-core's own API, run by
//! the integration tests through `ferry run`: every call with data is checked for its result
//! (a rank that skipped a call another one made would receive wrong data or hang), the calls
//! of no data send no message (the rank's counters stay still over 1000 rounds of them), their
//! nonblocking form is complete at once, and a root out of range still fails. Prints
//! `zero-count collectives of N ranks` from rank 0 when all is well.

#[allow(dead_code)] // the other examples' helpers
mod common;

use ferry_core::{scope, wait_all, Comm, Error, ReduceOp, World};

fn fail(world: &World, what: String) -> ! {
    common::fail("zerocount", world, what)
}

/// An error of the call `what` as text.
fn named(what: &'static str) -> impl Fn(Error) -> String {
    move |err| format!("{what}: {err}")
}

/// Messages this rank has sent so far.
fn sent(comm: &Comm) -> u64 {
    comm.counters().map_or(0, |c| c.messages_sent)
}

/// One round of collectives with data, each result checked against what it must be.
fn with_data(comm: &Comm, salt: u64) -> Result<(), String> {
    let (me, n) = (comm.rank() as u64, comm.size() as u64);
    let root = (salt % n) as usize;
    let e = named;
    let mut sum = [0u64; 3];
    comm.allreduce(&[me + salt, 1, me], &mut sum, ReduceOp::Sum)
        .map_err(e("allreduce"))?;
    if sum != [n * (n - 1) / 2 + n * salt, n, n * (n - 1) / 2] {
        return Err(format!("allreduce gave {sum:?}"));
    }
    let mut b = [if me as usize == root { salt + 7 } else { 0 }; 2];
    comm.bcast(&mut b, root).map_err(e("bcast"))?;
    if b != [salt + 7; 2] {
        return Err(format!("bcast gave {b:?}"));
    }
    let mut all = vec![0u64; n as usize];
    comm.allgather(&[me * 10 + salt], &mut all)
        .map_err(e("allgather"))?;
    if all
        .iter()
        .enumerate()
        .any(|(r, &v)| v != r as u64 * 10 + salt)
    {
        return Err(format!("allgather gave {all:?}"));
    }
    let out: Vec<u64> = (0..n).map(|r| me * 100 + r + salt).collect();
    let mut back = vec![0u64; n as usize];
    comm.alltoall(&out, &mut back).map_err(e("alltoall"))?;
    if back
        .iter()
        .enumerate()
        .any(|(r, &v)| v != r as u64 * 100 + me + salt)
    {
        return Err(format!("alltoall gave {back:?}"));
    }
    let mut prefix = [0u64];
    comm.scan(&[me + 1], &mut prefix, ReduceOp::Sum)
        .map_err(e("scan"))?;
    if prefix[0] != (me + 1) * (me + 2) / 2 {
        return Err(format!("scan gave {prefix:?}"));
    }
    Ok(())
}

/// Every collective of no data the API has, blocking and nonblocking.
fn without_data(comm: &Comm, salt: usize) -> Result<(), String> {
    let n = comm.size();
    let e = named;
    let (none, mut nothing): ([u64; 0], [u64; 0]) = ([], []);
    let root = salt % n;
    comm.bcast(&mut nothing, root).map_err(e("bcast"))?;
    comm.reduce(&none, &mut nothing, ReduceOp::Max, root)
        .map_err(e("reduce"))?;
    comm.allreduce(&none, &mut nothing, ReduceOp::Sum)
        .map_err(e("allreduce"))?;
    comm.allreduce_in_place(&mut nothing, ReduceOp::Sum)
        .map_err(e("allreduce in place"))?;
    comm.gather(&none, &mut nothing, root)
        .map_err(e("gather"))?;
    comm.scatter(&none, &mut nothing, root)
        .map_err(e("scatter"))?;
    comm.allgather(&none, &mut nothing)
        .map_err(e("allgather"))?;
    comm.alltoall(&none, &mut nothing).map_err(e("alltoall"))?;
    let zeros = vec![0usize; n];
    comm.allgatherv(&none, &mut nothing, &zeros, &zeros)
        .map_err(e("allgatherv"))?;
    comm.reduce_scatter(&none, &mut nothing, &zeros, ReduceOp::Sum)
        .map_err(e("reduce_scatter"))?;
    comm.scan(&none, &mut nothing, ReduceOp::Sum)
        .map_err(e("scan"))?;
    comm.exscan(&none, &mut nothing, ReduceOp::Sum)
        .map_err(e("exscan"))?;
    let (mut a, mut b): ([u64; 0], [u64; 0]) = ([], []);
    scope(|s| -> Result<(), String> {
        let mut requests = vec![
            comm.ibcast(s, &mut a, root).map_err(e("ibcast"))?,
            comm.iallreduce(s, &none, &mut b, ReduceOp::Sum)
                .map_err(e("iallreduce"))?,
        ];
        for r in &mut requests {
            if r.test().map_err(e("test"))?.is_none() {
                return Err("a nonblocking call of no data is not complete at once".into());
            }
        }
        Ok(())
    })
}

/// Nonblocking calls of no data between nonblocking calls with data, finished together.
fn mixed_nonblocking(comm: &Comm, salt: u64) -> Result<(), String> {
    let (me, n) = (comm.rank() as u64, comm.size() as u64);
    let mut first = [if me == 0 { salt } else { 0 }];
    let mut sum = [0u64];
    let mut none: [u64; 0] = [];
    let send = [me];
    scope(|s| -> Result<(), Error> {
        let mut requests = vec![
            comm.ibcast(s, &mut first, 0)?,
            comm.ibcast(s, &mut none, 0)?,
            comm.iallreduce(s, &send, &mut sum, ReduceOp::Sum)?,
        ];
        wait_all(&mut requests).map(drop)
    })
    .map_err(|err| format!("nonblocking calls: {err}"))?;
    if first[0] != salt || sum[0] != n * (n - 1) / 2 {
        return Err(format!("ibcast gave {first:?}, iallreduce {sum:?}"));
    }
    Ok(())
}

fn run(world: &World) -> Result<(), String> {
    let dup = world.dup().map_err(|e| format!("dup: {e}"))?;
    for round in 0..4u64 {
        let comm: &Comm = if round % 2 == 0 { world } else { &dup };
        without_data(comm, round as usize)?;
        with_data(comm, round)?;
        without_data(comm, round as usize + 1)?;
        mixed_nonblocking(comm, round)?;
        with_data(comm, round + 10)?;
    }
    let mut nothing: [u64; 0] = [];
    match world.bcast(&mut nothing, world.size()) {
        Err(Error::RankOutOfRange { .. }) => {}
        other => return Err(format!("bcast of no data to root = size gave {other:?}")),
    }
    let before = sent(world);
    for i in 0..1000 {
        without_data(if i % 2 == 0 { world } else { &dup }, i)?;
    }
    let after = sent(world);
    if after != before {
        return Err(format!(
            "1000 rounds of calls of no data sent {} messages",
            after - before
        ));
    }
    with_data(world, 99)?;
    with_data(&dup, 98)?;
    if sent(world) == after && world.size() > 1 {
        return Err("calls with data sent no message".into());
    }
    Ok(())
}

fn main() {
    let world = common::init("zerocount");
    if let Err(what) = run(&world) {
        fail(&world, what);
    }
    if world.rank() == 0 {
        println!("zero-count collectives of {} ranks", world.size());
    }
    if let Err(e) = world.finalize() {
        eprintln!("zerocount: finalize: {e}");
        std::process::exit(1);
    }
}
