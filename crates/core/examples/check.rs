//! Self-checking multi-rank scenarios, run by the integration tests through `ferry run`:
//! `check <case> [args]`. Every case verifies what it receives and exits non-zero on a mismatch.

mod common;

use ferry_core::{scope, wait_all, Comm, Error, World, ANY_SOURCE, ANY_TAG};
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Deterministic contents of message `seed`, `len` bytes.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut words: Vec<u64> = (0..len.div_ceil(8) as u64)
        .map(|i| splitmix(seed ^ i.wrapping_mul(0x1000_0001)))
        .collect();
    let mut bytes: Vec<u8> = bytemuck::cast_slice_mut::<u64, u8>(&mut words).to_vec();
    bytes.truncate(len);
    bytes
}

fn fail(world: &World, what: String) -> ! {
    common::fail("check", world, what)
}

/// Every ordered pair exchanges messages of many sizes at once, checked byte for byte.
fn allpairs(world: &World, max: usize, seed: u64) -> Result<(), Error> {
    let (me, n) = (world.rank(), world.size());
    let fixed = [
        0usize,
        1,
        7,
        8,
        4095,
        16 << 10,
        (16 << 10) + 1,
        64 << 10,
        (64 << 10) + 1,
        1 << 20,
        (1 << 20) + 3,
    ];
    let rounds = fixed.len() + 4;
    let size_of = |src: usize, dst: usize, round: usize| -> usize {
        if round < fixed.len() {
            fixed[round].min(max)
        } else {
            (splitmix(seed ^ (src * 1_000_003 + dst * 7919 + round) as u64) % (max as u64 + 1))
                as usize
        }
    };
    for round in 0..rounds {
        let outgoing: Vec<Vec<u8>> = (0..n)
            .map(|dst| {
                pattern(
                    seed ^ (me * n + dst) as u64 ^ (round as u64) << 40,
                    size_of(me, dst, round),
                )
            })
            .collect();
        let mut incoming: Vec<Vec<u8>> = (0..n)
            .map(|src| vec![0u8; size_of(src, me, round)])
            .collect();
        scope(|s| -> Result<(), Error> {
            let mut requests = Vec::new();
            for (src, buf) in incoming.iter_mut().enumerate() {
                requests.push(world.irecv(s, buf, src, round as i32)?);
            }
            for (dst, buf) in outgoing.iter().enumerate() {
                requests.push(world.isend(s, buf, dst, round as i32)?);
            }
            let statuses = wait_all(&mut requests)?;
            for (src, st) in statuses.iter().take(n).enumerate() {
                if st.source != src || st.tag != round as i32 || st.len != size_of(src, me, round) {
                    fail(
                        world,
                        format!("round {round}: status {st:?} for a message from {src}"),
                    );
                }
            }
            Ok(())
        })?;
        for (src, buf) in incoming.iter().enumerate() {
            let expected = pattern(
                seed ^ (src * n + me) as u64 ^ (round as u64) << 40,
                buf.len(),
            );
            if *buf != expected {
                let at = buf
                    .iter()
                    .zip(&expected)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                fail(
                    world,
                    format!(
                        "round {round}: {} bytes from rank {src} differ at byte {at}",
                        buf.len()
                    ),
                );
            }
        }
    }
    world.barrier()?;
    if me == 0 {
        println!("allpairs ok: {n} ranks, {rounds} rounds, sizes up to {max}");
    }
    Ok(())
}

/// Every pair exchanges, on one tag, large messages of every size around the first `chunks`
/// multiples of the rendezvous chunk (so striped over rails they end on every rail), each
/// behind a small one: checks contents, and that no message overtakes another (MPI order).
fn rails(world: &World, chunks: usize) -> Result<(), Error> {
    let (me, n) = (world.rank(), world.size());
    let chunk: usize = std::env::var("FERRY_TCP_CHUNK")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256 << 10);
    let sizes: Vec<usize> = (1..=chunks)
        .flat_map(|k| [k * chunk - 1, k * chunk, k * chunk + 1])
        .flat_map(|large| [8 + large % 13, large])
        .collect();
    let seed = |src: usize, dst: usize, i: usize| (src * n + dst) as u64 ^ (i as u64) << 32;
    let outgoing: Vec<Vec<Vec<u8>>> = (0..n)
        .map(|dst| {
            let sizes = if dst == me { &[][..] } else { &sizes[..] };
            (0..sizes.len())
                .map(|i| pattern(seed(me, dst, i), sizes[i]))
                .collect()
        })
        .collect();
    let mut incoming: Vec<Vec<Vec<u8>>> = (0..n)
        .map(|src| {
            let count = if src == me { 0 } else { sizes.len() };
            (0..count).map(|i| vec![0u8; sizes[i]]).collect()
        })
        .collect();
    scope(|s| -> Result<(), Error> {
        let mut requests = Vec::new();
        for (src, bufs) in incoming.iter_mut().enumerate() {
            for buf in bufs.iter_mut() {
                requests.push(world.irecv(s, buf, src, 7)?);
            }
        }
        for (dst, bufs) in outgoing.iter().enumerate() {
            for buf in bufs {
                requests.push(world.isend(s, buf, dst, 7)?);
            }
        }
        wait_all(&mut requests)?;
        Ok(())
    })?;
    for (src, bufs) in incoming.iter().enumerate() {
        for (i, buf) in bufs.iter().enumerate() {
            if *buf != pattern(seed(src, me, i), buf.len()) {
                fail(
                    world,
                    format!(
                        "message {i} ({} bytes) from rank {src} is wrong or out of order",
                        buf.len()
                    ),
                );
            }
        }
    }
    world.barrier()?;
    if me == 0 {
        println!(
            "rails ok: {n} ranks, {} messages per pair up to {} bytes",
            sizes.len(),
            chunks * chunk + 1
        );
    }
    Ok(())
}

/// Rank 0 streams `count` messages of `size` bytes to rank 1, eight in flight; rank 1 checks
/// each and prints the rate (MB/s of payload, first send to last receive).
/// With `progress`, the receiver prints `stream progress <messages> <seconds>` after each
/// window of messages (for tests that act in the middle of a stream, and for dip and recovery
/// measurements).
fn stream(world: &World, size: usize, count: usize, progress: bool) -> Result<(), Error> {
    use common::WINDOW;
    let me = world.rank();
    world.barrier()?;
    let start = std::time::Instant::now();
    if me == 0 {
        let messages: Vec<Vec<u8>> = (0..WINDOW).map(|i| pattern(i as u64, size)).collect();
        common::send_stream(world, &messages, count)?;
    } else if me == 1 {
        let mut buffers = vec![vec![0u8; size]; WINDOW];
        for first in (0..count).step_by(WINDOW) {
            let window = common::recv_window(world, &mut buffers, first, count)?;
            for (i, buf) in window.zip(&buffers) {
                if *buf != pattern((i % WINDOW) as u64, size) {
                    fail(world, format!("stream message {i} ({size} bytes) differs"));
                }
            }
            if progress {
                use std::io::Write as _;
                let done = (first + WINDOW).min(count);
                println!(
                    "stream progress {done} {:.6}",
                    start.elapsed().as_secs_f64()
                );
                let _ = std::io::stdout().flush();
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "stream ok: {count} x {size} bytes in {secs:.3} s, {:.1} MB/s",
            (count * size) as f64 / secs / 1e6
        );
    }
    world.barrier()
}

/// Every heterogeneous broadcast scheduler, on a random cost matrix (the same on every rank,
/// unrelated to this host: a wrong forecast), on the world and on halves of it, from several
/// roots and for sizes around the eager limit: every rank gets the root's bytes.
fn hetero(world: &World) -> Result<(), Error> {
    use ferry_core::hetero::{scheduler, CostMatrix, SCHEDULERS};
    let costs_for = |n: usize, seed: u64| {
        CostMatrix::from_fn(n, |i, j| {
            let r = splitmix(seed ^ (i * 131 + j) as u64);
            (
                1e-6 * (1 + r % 1000) as f64,
                1e6 * (1 + (r >> 20) % 1000) as f64,
            )
        })
    };
    let Some(half) = world.split(Some((world.rank() % 2) as u32), world.rank() as i32)? else {
        fail(world, "split gave no communicator".into());
    };
    for comm in [&**world, &half] {
        let (me, n) = (comm.rank(), comm.size());
        let costs = costs_for(n, n as u64);
        for name in SCHEDULERS {
            let Some(s) = scheduler(name) else {
                fail(world, format!("no scheduler {name}"));
            };
            for root in [0, n - 1, n / 2] {
                for bytes in [0usize, 1, 8, 65537, (1 << 20) + 3] {
                    let expected = pattern((root * 7 + bytes) as u64, bytes);
                    let mut buf = if me == root {
                        expected.clone()
                    } else {
                        vec![0u8; bytes]
                    };
                    comm.bcast_with(&mut buf, root, s.as_ref(), &costs)?;
                    if buf != expected {
                        fail(
                            world,
                            format!(
                                "{name}: bcast of {bytes} bytes from {root} on {n} ranks differs"
                            ),
                        );
                    }
                }
            }
        }
    }
    world.barrier()?;
    if world.rank() == 0 {
        println!(
            "hetero ok: {} ranks, {} schedulers",
            world.size(),
            SCHEDULERS.len()
        );
    }
    Ok(())
}

/// `bcast-timing <scheduler> <bytes> <costs.json> [reps]`: broadcasts `bytes` from rank 0 with
/// the named heterogeneous scheduler on the cost matrix of `costs.json` (the format of
/// `ferry weather --export`: `n`, and `latency` and `bandwidth` as n×n arrays with `null` on the
/// diagonal), for comparison with the simulator's prediction of the same schedule.
///
/// One warm-up through `Comm::bcast_with`, then `reps` timed broadcasts, each after a barrier.
/// A timed one runs the very schedule `bcast_with` builds, on the same executor, but started
/// with `raw_collective` so the rank can see *when it holds the data*: while the engine waits,
/// the last 8 bytes of every 64 KiB block of the buffer are compared with the expected bytes;
/// the first time all match is the rank's arrival (`held`, what the simulator's `received`
/// predicts). `returned` is when the call completes, as `bcast_with` would return: later, by
/// the rank's own sends and by redundant copies still landing. Times are seconds from the
/// rank's barrier exit; rank 0 gathers them and prints one line per repetition,
/// `bcast-timing <scheduler> rep <k>: held <t0> … returned <t0> …`. Every buffer is checked.
fn bcast_timing(world: &World, args: &[String]) -> Result<(), Error> {
    use ferry_core::hetero::{scheduler, CostMatrix};
    use std::time::Instant;
    const BLOCK: usize = 64 << 10;
    let (me, n) = (world.rank(), world.size());
    let usage = "usage: check bcast-timing <scheduler> <bytes> <costs.json> [reps]";
    let (Some(name), Some(bytes), Some(path)) = (
        args.first(),
        args.get(1).and_then(|b| b.parse::<usize>().ok()),
        args.get(2),
    ) else {
        fail(world, usage.into());
    };
    let reps = common::number(args, 3, 3);
    let Some(sched) = scheduler(name) else {
        fail(world, format!("no scheduler {name:?}"));
    };
    let json: serde_json::Value = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => fail(world, format!("cost file {path}: {e}")),
    };
    if json["n"].as_u64() != Some(n as u64) {
        fail(
            world,
            format!("cost file {path}: n is not the job size {n}"),
        );
    }
    let mut bad = None;
    let costs = CostMatrix::from_fn(n, |i, j| {
        let cell = |field: &str| json[field][i][j].as_f64().filter(|v| v.is_finite());
        match (cell("latency"), cell("bandwidth")) {
            (Some(l), Some(b)) if l >= 0.0 && b > 0.0 => (l, b),
            _ => {
                bad.get_or_insert((i, j));
                (0.0, 1.0)
            }
        }
    });
    if let Some((i, j)) = bad {
        fail(
            world,
            format!("cost file {path}: entry ({i}, {j}) is missing or bad"),
        );
    }
    // Ends of the sampled 8-byte windows: the end of every block and of the buffer (none under
    // 8 bytes: `held` is then when the call returns).
    let ends: Vec<usize> = (1..=bytes.div_ceil(BLOCK))
        .map(|k| (k * BLOCK).min(bytes))
        .filter(|&e| e >= 8)
        .collect();
    for rep in 0..=reps {
        let expected = pattern(0x7_1e5 ^ rep as u64, bytes);
        let mut buf = if me == 0 {
            expected.clone()
        } else {
            vec![0u8; bytes]
        };
        if rep == 0 {
            // Warm-up (connections, congestion windows) through the call applications use.
            world.barrier()?;
            world.bcast_with(&mut buf, 0, sched.as_ref(), &costs)?;
        } else {
            let schedule = sched.schedules(&costs, 0, bytes).swap_remove(me);
            let planned = ferry_core::Planned::check(schedule)?;
            let ptr = buf.as_mut_ptr();
            world.barrier()?;
            let start = Instant::now();
            let mut held = (me == 0).then_some(0.0);
            // SAFETY: `buf` outlives the request (waited for below) and is not touched through
            // the Vec until then; over TCP the engine writes it only inside progress, on this
            // thread, and the predicate below reads it between progress passes (a peer writing
            // it by CMA on one host could tear a read: that only delays `held`).
            let request = unsafe { world.raw_collective(planned, (ptr, 0), (ptr, bytes), None)? };
            world.wait_until(|done| {
                if held.is_none()
                    && !ends.is_empty()
                    && ends.iter().all(|&e| {
                        // SAFETY: e - 8 .. e lies inside the buffer (see above).
                        let got =
                            unsafe { std::ptr::read_volatile(ptr.add(e - 8) as *const [u8; 8]) };
                        got[..] == expected[e - 8..e]
                    })
                {
                    held = Some(start.elapsed().as_secs_f64());
                }
                done(request)
            })?;
            let returned = start.elapsed().as_secs_f64();
            world.raw_take(request);
            let held = held.unwrap_or(returned);
            let mut times = vec![0.0f64; 2 * n];
            world.gather(&[held, returned], &mut times, 0)?;
            if me == 0 {
                let column = |k: usize| -> Vec<String> {
                    (0..n).map(|r| format!("{:.6}", times[2 * r + k])).collect()
                };
                println!(
                    "bcast-timing {name} rep {rep}: held {} returned {}",
                    column(0).join(" "),
                    column(1).join(" ")
                );
            }
        }
        if buf != expected {
            fail(
                world,
                format!("{name}: broadcast {rep} of {bytes} bytes differs"),
            );
        }
    }
    world.barrier()?;
    if me == 0 {
        println!("bcast-timing ok: {name}, {bytes} bytes, {n} ranks, {reps} reps");
    }
    Ok(())
}

/// Wildcard receives see every message once, and one sender's messages in send order.
fn wildcard(world: &World) -> Result<(), Error> {
    let (me, n) = (world.rank(), world.size());
    let per_sender = 50;
    if me == 0 {
        let mut next = vec![0u32; n];
        for _ in 0..per_sender * (n - 1) {
            let mut msg = [0u32; 2];
            let st = world.recv(&mut msg, ANY_SOURCE, ANY_TAG)?;
            let (src, seq) = (msg[0] as usize, msg[1]);
            if st.source != src || st.tag != (seq % 3) as i32 || st.len != 8 {
                fail(
                    world,
                    format!("status {st:?} does not match message from {src} #{seq}"),
                );
            }
            if seq != next[src] {
                fail(
                    world,
                    format!(
                        "from rank {src}: got #{seq}, expected #{} (overtaken)",
                        next[src]
                    ),
                );
            }
            next[src] += 1;
        }
        // A specific tag skips earlier messages with other tags, which stay for later receives.
        world.send(&[0u8], 1, 5)?;
        let mut a = [0u32; 1];
        world.recv(&mut a, 1, 7)?;
        let mut b = [0u32; 1];
        world.recv(&mut b, 1, ANY_TAG)?;
        if (a[0], b[0]) != (2, 1) {
            fail(
                world,
                format!("tag selection got {a:?} then {b:?}, expected [2] then [1]"),
            );
        }
        println!("wildcard ok");
    } else {
        for seq in 0..per_sender as u32 {
            world.send(&[me as u32, seq], 0, (seq % 3) as i32)?;
        }
        if me == 1 {
            world.recv(&mut [0u8], 0, 5)?;
            world.send(&[1u32], 0, 6)?;
            world.send(&[2u32], 0, 7)?;
        }
    }
    Ok(())
}

/// Short receive buffers give a truncation error, keep the prefix, and the job goes on.
fn truncate(world: &World) -> Result<(), Error> {
    let me = world.rank();
    for (tag, len) in [(1, 100usize), (2, 1 << 20)] {
        if me == 1 {
            world.send(&pattern(tag as u64, len), 0, tag)?;
        } else if me == 0 {
            let mut small = [0u8; 10];
            match world.recv(&mut small, 1, tag) {
                Err(Error::Truncated {
                    sender: 1,
                    message_len,
                    buffer_len: 10,
                    ..
                }) if message_len == len => {}
                other => fail(
                    world,
                    format!("{len}-byte message into 10 bytes gave {other:?}"),
                ),
            }
            if small[..] != pattern(tag as u64, len)[..10] {
                fail(
                    world,
                    "truncated buffer does not hold the message's first bytes".into(),
                );
            }
        }
    }
    // The job goes on.
    let mut after = [0u8; 4];
    if me == 1 {
        world.send(b"next", 0, 3)?;
    } else if me == 0 {
        world.recv(&mut after, 1, 3)?;
        if &after != b"next" {
            fail(world, "message after truncation is wrong".into());
        }
        println!("truncate ok");
    }
    Ok(())
}

/// probe and iprobe report the envelope without consuming the message.
fn probe(world: &World) -> Result<(), Error> {
    let me = world.rank();
    if me == 1 {
        world.send(&pattern(9, 3000), 0, 4)?;
        world.send(&pattern(10, 200_000), 0, 5)?;
    } else if me == 0 {
        for (seed, tag, len) in [(9u64, 4, 3000usize), (10, 5, 200_000)] {
            let st = world.probe(ANY_SOURCE, tag)?;
            if (st.source, st.tag, st.len) != (1, tag, len) {
                fail(world, format!("probe gave {st:?}"));
            }
            let mut buf = vec![0u8; st.len];
            world.recv(&mut buf, st.source, st.tag)?;
            if buf != pattern(seed, len) {
                fail(world, "probed message differs".into());
            }
        }
        if world.iprobe(ANY_SOURCE, ANY_TAG)?.is_some() {
            fail(
                world,
                "iprobe found a message that was already received".into(),
            );
        }
        println!("probe ok");
    }
    Ok(())
}

/// dup and split give separate message spaces and the right ranks.
fn comms(world: &World) -> Result<(), Error> {
    let (me, n) = (world.rank(), world.size());
    let dup = world.dup()?;
    // The same tag on two communicators: each receive gets its own communicator's message.
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let mut on_world = [0u32; 1];
    let mut on_dup = [0u32; 1];
    scope(|s| -> Result<(), Error> {
        let mut requests = vec![
            dup.irecv(s, &mut on_dup, left, 0)?,
            world.irecv(s, &mut on_world, left, 0)?,
            world.isend(s, &[1u32], right, 0)?,
            dup.isend(s, &[2u32], right, 0)?,
        ];
        wait_all(&mut requests).map(drop)
    })?;
    if (on_world[0], on_dup[0]) != (1, 2) {
        fail(world, format!("world got {on_world:?}, dup got {on_dup:?}"));
    }
    // Split into evens and odds, ordered by descending world rank.
    let half = world
        .split(Some((me % 2) as u32), -(me as i32))?
        .expect("has a color");
    let members: Vec<usize> = (0..n).filter(|r| r % 2 == me % 2).rev().collect();
    if half.size() != members.len() || members[half.rank()] != me {
        fail(
            world,
            format!("split gave rank {} of {}", half.rank(), half.size()),
        );
    }
    ring_on(&half, world)?;
    let none = world.split(if me == 0 { None } else { Some(1) }, 0)?;
    if (me == 0) != none.is_none() {
        fail(world, "split with no color".into());
    }
    if let Some(rest) = none {
        ring_on(&rest, world)?;
        rest.barrier()?;
    }
    world.barrier()?;
    if me == 0 {
        println!("comms ok");
    }
    Ok(())
}

fn ring_on(comm: &Comm, world: &World) -> Result<(), Error> {
    let (me, n) = (comm.rank(), comm.size());
    let mut got = [0u64; 1];
    comm.sendrecv(&[me as u64], (me + 1) % n, 9, &mut got, (me + n - 1) % n, 9)?;
    if got[0] as usize != (me + n - 1) % n {
        fail(world, format!("ring on sub-communicator got {got:?}"));
    }
    Ok(())
}

/// One message of `len` bytes (default just over 2 GiB) from rank 0 to rank 1.
fn big(world: &World, len: usize) -> Result<(), Error> {
    let me = world.rank();
    if me == 0 {
        world.send(&pattern(77, len), 1, 1)?;
    } else if me == 1 {
        let mut buf = vec![0u8; len];
        let st = world.recv(&mut buf, 0, 1)?;
        if st.len != len || buf != pattern(77, len) {
            fail(
                world,
                format!("{len}-byte message arrived damaged ({} bytes)", st.len),
            );
        }
        println!("big ok: {len} bytes");
    }
    Ok(())
}

fn val(rank: usize, i: usize, salt: u64) -> u64 {
    splitmix((rank as u64) << 32 ^ i as u64 ^ salt << 48) % 1000
}

/// Affine maps x ↦ a·x + b composed "first left, then right": associative, not commutative.
fn then(x: [u32; 2], y: [u32; 2]) -> [u32; 2] {
    [
        y[0].wrapping_mul(x[0]),
        y[0].wrapping_mul(x[1]).wrapping_add(y[1]),
    ]
}

/// Every collective against a sequential reference computed locally.
fn coll(world: &World, comm: &Comm) -> Result<(), Error> {
    let (me, n) = (comm.rank(), comm.size());
    let check = |ok: bool, what: String| {
        if !ok {
            fail(world, format!("on a communicator of {n}: {what}"));
        }
    };
    comm.barrier()?;
    for bytes in [0usize, 1, 100, 20_000, 300_001] {
        for root in [0, n / 2, n - 1] {
            let expected = pattern(bytes as u64 ^ root as u64, bytes);
            let mut buf = if me == root {
                expected.clone()
            } else {
                vec![0u8; bytes]
            };
            comm.bcast(&mut buf, root)?;
            check(
                buf == expected,
                format!("bcast of {bytes} bytes from {root}"),
            );
        }
    }
    for len in [0usize, 1, 3, 100, 5000] {
        let mine: Vec<u64> = (0..len).map(|i| val(me, i, 1)).collect();
        let sum: Vec<u64> = (0..len)
            .map(|i| (0..n).map(|r| val(r, i, 1)).sum())
            .collect();
        let max: Vec<u64> = (0..len)
            .map(|i| (0..n).map(|r| val(r, i, 1)).max().unwrap_or(0))
            .collect();
        let mut out = vec![0u64; len];
        comm.allreduce(&mine, &mut out, ferry_core::ReduceOp::Sum)?;
        check(out == sum, format!("allreduce sum of {len}"));
        let mut buf = mine.clone();
        comm.allreduce_in_place(&mut buf, ferry_core::ReduceOp::Max)?;
        check(buf == max, format!("allreduce max in place of {len}"));
        for root in [0, n - 1] {
            let mut out = vec![0u64; if me == root { len } else { 0 }];
            comm.reduce(&mine, &mut out, ferry_core::ReduceOp::Sum, root)?;
            check(
                me != root || out == sum,
                format!("reduce sum of {len} to {root}"),
            );
        }
        // Non-commutative: rank order must be kept.
        let maps: Vec<[u32; 2]> = (0..len)
            .map(|i| [val(me, i, 2) as u32 | 1, val(me, i, 3) as u32])
            .collect();
        let ordered: Vec<[u32; 2]> = (0..len)
            .map(|i| {
                (1..n).fold([val(0, i, 2) as u32 | 1, val(0, i, 3) as u32], |acc, r| {
                    then(acc, [val(r, i, 2) as u32 | 1, val(r, i, 3) as u32])
                })
            })
            .collect();
        let mut out = vec![[0u32; 2]; len];
        comm.allreduce_with(&maps, &mut out, then, false)?;
        check(
            out == ordered,
            format!("non-commutative allreduce of {len}"),
        );
        for root in [0, n / 2] {
            let mut out = vec![[0u32; 2]; if me == root { len } else { 0 }];
            comm.reduce_with(&maps, &mut out, then, false, root)?;
            check(
                me != root || out == ordered,
                format!("non-commutative reduce of {len} to {root}"),
            );
        }
        let floats: Vec<f64> = mine.iter().map(|&v| v as f64 * 0.5).collect();
        let mut fout = vec![0f64; len];
        comm.allreduce(&floats, &mut fout, ferry_core::ReduceOp::Min)?;
        let fmin: Vec<f64> = (0..len)
            .map(|i| {
                (0..n)
                    .map(|r| val(r, i, 1) as f64 * 0.5)
                    .fold(f64::MAX, f64::min)
            })
            .collect();
        check(fout == fmin, format!("allreduce f64 min of {len}"));
    }
    for block in [0usize, 1, 17, 1000] {
        let mine: Vec<u32> = (0..block).map(|i| val(me, i, 4) as u32).collect();
        let all: Vec<u32> = (0..n)
            .flat_map(|r| (0..block).map(move |i| val(r, i, 4) as u32))
            .collect();
        let mut out = vec![0u32; n * block];
        comm.allgather(&mine, &mut out)?;
        check(out == all, format!("allgather of {block}"));
        for root in [0, n - 1] {
            let mut out = vec![0u32; if me == root { n * block } else { 0 }];
            comm.gather(&mine, &mut out, root)?;
            check(
                me != root || out == all,
                format!("gather of {block} to {root}"),
            );
            let mut got = vec![0u32; block];
            comm.scatter(if me == root { &all[..] } else { &[] }, &mut got, root)?;
            check(got == mine, format!("scatter of {block} from {root}"));
        }
        let send: Vec<u32> = (0..n)
            .flat_map(|j| (0..block).map(move |i| val(me * n + j, i, 5) as u32))
            .collect();
        let expected: Vec<u32> = (0..n)
            .flat_map(|src| (0..block).map(move |i| val(src * n + me, i, 5) as u32))
            .collect();
        let mut out = vec![0u32; n * block];
        comm.alltoall(&send, &mut out)?;
        check(out == expected, format!("alltoall of {block}"));
    }
    // Variable blocks: rank r contributes r % 3 + (block / 2) elements.
    for block in [0usize, 5] {
        let count = |r: usize| r % 3 + block / 2;
        let counts: Vec<usize> = (0..n).map(count).collect();
        let displs: Vec<usize> = (0..n)
            .map(|r| counts[..r].iter().sum::<usize>() + r)
            .collect();
        let total = displs[n - 1] + counts[n - 1];
        let mine: Vec<u32> = (0..count(me)).map(|i| val(me, i, 6) as u32).collect();
        let mut expected = vec![0u32; total];
        for r in 0..n {
            for i in 0..counts[r] {
                expected[displs[r] + i] = val(r, i, 6) as u32;
            }
        }
        let mut out = vec![0u32; total];
        comm.allgatherv(&mine, &mut out, &counts, &displs)?;
        check(out == expected, format!("allgatherv {block}"));
        let mut out = vec![0u32; if me == n - 1 { total } else { 0 }];
        comm.gatherv(&mine, &mut out, &counts, &displs, n - 1)?;
        check(me != n - 1 || out == expected, format!("gatherv {block}"));
        let mut got = vec![0u32; count(me)];
        comm.scatterv(
            if me == 0 { &expected[..] } else { &[] },
            &counts,
            &displs,
            &mut got,
            0,
        )?;
        check(got == mine, format!("scatterv {block}"));
        // alltoallv: rank i sends (i + j) % 3 elements to rank j.
        let c = |i: usize, j: usize| (i + j) % 3;
        let sc: Vec<usize> = (0..n).map(|j| c(me, j)).collect();
        let sd: Vec<usize> = (0..n).map(|j| sc[..j].iter().sum()).collect();
        let rc: Vec<usize> = (0..n).map(|i| c(i, me)).collect();
        let rd: Vec<usize> = (0..n).map(|i| rc[..i].iter().sum()).collect();
        let send: Vec<u32> = (0..n)
            .flat_map(|j| (0..c(me, j)).map(move |k| val(me * n + j, k, 7) as u32))
            .collect();
        let want: Vec<u32> = (0..n)
            .flat_map(|i| (0..c(i, me)).map(move |k| val(i * n + me, k, 7) as u32))
            .collect();
        let mut out = vec![0u32; want.len()];
        comm.alltoallv(&send, &sc, &sd, &mut out, &rc, &rd)?;
        check(out == want, format!("alltoallv {block}"));
    }
    // reduce_scatter and scans.
    let counts: Vec<usize> = (0..n).map(|r| r % 2 + 1).collect();
    let total: usize = counts.iter().sum();
    let mine: Vec<u64> = (0..total).map(|i| val(me, i, 8)).collect();
    let sums: Vec<u64> = (0..total)
        .map(|i| (0..n).map(|r| val(r, i, 8)).sum())
        .collect();
    let mut part = vec![0u64; counts[me]];
    comm.reduce_scatter(&mine, &mut part, &counts, ferry_core::ReduceOp::Sum)?;
    let off: usize = counts[..me].iter().sum();
    check(
        part[..] == sums[off..off + counts[me]],
        "reduce_scatter".into(),
    );
    let prefix = |upto: usize| -> Vec<u64> {
        (0..total)
            .map(|i| (0..upto).map(|r| val(r, i, 8)).sum())
            .collect()
    };
    let mut out = vec![0u64; total];
    comm.scan(&mine, &mut out, ferry_core::ReduceOp::Sum)?;
    check(out == prefix(me + 1), "scan".into());
    let mut out = vec![7u64; total];
    comm.exscan(&mine, &mut out, ferry_core::ReduceOp::Sum)?;
    check(
        if me == 0 {
            out == vec![7u64; total]
        } else {
            out == prefix(me)
        },
        "exscan".into(),
    );
    let maps: Vec<[u32; 2]> = (0..3)
        .map(|i| [val(me, i, 2) as u32 | 1, val(me, i, 3) as u32])
        .collect();
    let ordered: Vec<[u32; 2]> = (0..3)
        .map(|i| {
            (1..=me).fold([val(0, i, 2) as u32 | 1, val(0, i, 3) as u32], |acc, r| {
                then(acc, [val(r, i, 2) as u32 | 1, val(r, i, 3) as u32])
            })
        })
        .collect();
    let mut out = vec![[0u32; 2]; 3];
    comm.scan_with(&maps, &mut out, then)?;
    check(out == ordered, "non-commutative scan".into());
    // Nonblocking collectives in flight together, completed in reverse order.
    let mut bbuf = if me == 0 {
        pattern(42, 50_000)
    } else {
        vec![0u8; 50_000]
    };
    let input = [me as u64 + 1; 64];
    let mut total = [0u64; 64];
    scope(|s| -> Result<(), Error> {
        let a = comm.ibarrier(s)?;
        let b = comm.ibcast(s, &mut bbuf, 0)?;
        let c = comm.iallreduce(s, &input, &mut total, ferry_core::ReduceOp::Sum)?;
        c.wait()?;
        b.wait()?;
        a.wait().map(drop)
    })?;
    check(bbuf == pattern(42, 50_000), "ibcast".into());
    check(total == [(n * (n + 1) / 2) as u64; 64], "iallreduce".into());
    Ok(())
}

/// Collectives on the world and on a split communicator.
fn collectives(world: &World) -> Result<(), Error> {
    coll(world, world)?;
    let half = world
        .split(Some((world.rank() % 2) as u32), 0)?
        .expect("has a color");
    coll(world, &half)?;
    world.barrier()?;
    if world.rank() == 0 {
        println!("coll ok: {} ranks", world.size());
    }
    Ok(())
}

/// `coll` on a job spread over clusters by `FERRY_CLUSTERS` (fake ones on one host): the
/// hierarchical schedules `plan` now picks must give the sequential reference results, on the
/// world, on halves, and on a communicator whose clusters are not rank ranges (where
/// non-commutative reductions fall back to flat algorithms).
fn hier(world: &World) -> Result<(), Error> {
    use ferry_core::Collective;
    use ferry_sched::hierarchical as h;
    let (me, n) = (world.rank(), world.size());
    let clusters = world.clusters();
    let listed: Vec<u32> = std::env::var("FERRY_CLUSTERS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    if clusters != listed {
        fail(
            world,
            format!("clusters {clusters:?}, FERRY_CLUSTERS {listed:?}"),
        );
    }
    let count = h::count_clusters(&clusters);
    // What plan picks is the hierarchical schedule.
    let planned = [
        (
            world.plan(&Collective::Bcast {
                bytes: 100,
                root: n - 1,
            })?,
            h::bcast(me, &clusters, n - 1, 100),
        ),
        (
            world.plan(&Collective::Allreduce {
                bytes: 64,
                elem: 8,
                commutative: true,
                in_place: false,
            })?,
            h::allreduce(me, &clusters, 64, true, false).expect("commutative"),
        ),
        (world.plan(&Collective::Barrier)?, h::barrier(me, &clusters)),
    ];
    if count > 1 && planned.iter().any(|(a, b)| a != b) {
        fail(world, "plan did not pick the hierarchical schedules".into());
    }
    // Nobody leaves the barrier before the last rank enters it.
    let start = std::time::Instant::now();
    if me == n - 1 {
        std::thread::sleep(Duration::from_millis(300));
    }
    world.barrier()?;
    if start.elapsed() < Duration::from_millis(250) {
        fail(
            world,
            format!("left the barrier after {:?}", start.elapsed()),
        );
    }
    coll(world, world)?;
    let half = world.split(Some((me % 2) as u32), 0)?.expect("has a color");
    coll(world, &half)?;
    // Ranks interleaved from both ends: 0, n-1, 1, n-2, …, so clusters are not rank ranges.
    let key = if me < n.div_ceil(2) {
        2 * me
    } else {
        2 * (n - 1 - me) + 1
    };
    let mixed = world.split(Some(0), key as i32)?.expect("has a color");
    coll(world, &mixed)?;
    world.barrier()?;
    if me == 0 {
        println!("hier ok: {n} ranks, {count} clusters");
    }
    Ok(())
}

/// CPU time this process has used, user plus system.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the zeroed struct we pass; no other memory is touched.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A rank blocked in recv or probe while its peer is busy must sleep, not spin.
fn idle(world: &World) -> Result<(), Error> {
    let me = world.rank();
    if me == 1 {
        for tag in [1, 2] {
            std::thread::sleep(Duration::from_secs(1));
            world.send(&[tag as u8], 0, tag)?;
        }
    } else if me == 0 {
        let (wall, cpu) = (std::time::Instant::now(), cpu_time());
        world.recv(&mut [0u8], 1, 1)?;
        let st = world.probe(1, 2)?;
        world.recv(&mut [0u8], st.source, st.tag)?;
        let (wall, cpu) = (wall.elapsed(), cpu_time() - cpu);
        // A spinning probe alone would use about half the wall time.
        if cpu.as_secs_f64() > 0.25 * wall.as_secs_f64() {
            fail(
                world,
                format!("waiting {wall:?} in recv and probe used {cpu:?} of CPU"),
            );
        }
        println!("idle ok: {cpu:?} CPU in {wall:?}");
    }
    Ok(())
}

/// Ranks that have TCP open as well as shared memory (as after MPI_Open_port or a spawn) sleep
/// in TCP's epoll; a shared-memory message must still end that sleep at once. Ranks 0 and 1
/// ping-pong 8 B `rounds` times over shared memory, each sleeping `pause_us` µs before it sends
/// so that the other, waiting, goes to sleep too (a busy pause would not do on a loaded core:
/// the waiter's yields would hand it the core until the message comes). Rank 1 sends how long
/// its pause took; rank 0 prints the median round trip less that: about two wake-ups.
fn wake(world: &World, rounds: usize, pause_us: u64) -> Result<(), Error> {
    let pause = Duration::from_micros(pause_us);
    world.open_to_other_worlds()?;
    world.barrier()?;
    let mut buf = [0u8; 8];
    let mut trips = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        match world.rank() {
            0 => {
                std::thread::sleep(pause);
                let start = std::time::Instant::now();
                world.send(&buf, 1, 0)?;
                world.recv(&mut buf, 1, 0)?;
                let paused = Duration::from_nanos(u64::from_le_bytes(buf));
                trips.push(start.elapsed().saturating_sub(paused));
            }
            1 => {
                world.recv(&mut buf, 0, 0)?;
                let start = std::time::Instant::now();
                std::thread::sleep(pause);
                buf = (start.elapsed().as_nanos() as u64).to_le_bytes();
                world.send(&buf, 0, 0)?;
            }
            _ => {}
        }
    }
    trips.sort();
    if let Some(median) = trips.get(rounds / 2) {
        println!(
            "wake ok: median round trip {} us over {rounds} (max {} us), less the pauses",
            median.as_micros(),
            trips.last().map_or(0, |t| t.as_micros())
        );
    }
    world.barrier()
}

/// Rank 1 kills itself while the others wait for it.
fn die(world: &World) -> Result<(), Error> {
    if world.rank() == 1 {
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: sending SIGKILL to ourselves; nothing runs after it.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    let mut buf = [0u8; 1];
    world.recv(&mut buf, 1, 0)?;
    fail(world, "received from a dead rank".into())
}

/// Rank 0 starts a send of `len` bytes to the last rank and is killed while it is being
/// received (over a fabric: while the last rank reads it); everyone then waits for a message
/// from rank 0 that never comes. The job must end, naming rank 0.
fn die_in_rendezvous(world: &World, len: usize) -> Result<(), Error> {
    let last = world.size() - 1;
    let data = vec![7u8; if world.rank() == 0 { len } else { 0 }];
    let mut buf = vec![0u8; if world.rank() == last { len } else { 0 }];
    scope(|s| -> Result<(), Error> {
        match world.rank() {
            0 => {
                let _sending = world.isend(s, &data, last, 5)?;
                std::thread::sleep(Duration::from_millis(20));
                // SAFETY: sending SIGKILL to ourselves; nothing runs after it.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
            r if r == last => {
                world.recv(&mut buf, 0, 5)?;
            }
            _ => {}
        }
        Ok(())
    })?;
    let mut one = [0u8; 1];
    world.recv(&mut one, 0, 6)?;
    fail(world, "received from a dead rank".into())
}

/// Rank 1 panics after a barrier while the others wait for it: unwinding drops its `World`,
/// which must not wait in the collective finalize for ranks that wait for rank 1.
fn panics(world: &World) -> Result<(), Error> {
    world.barrier()?;
    if world.rank() == 1 {
        panic!("rank 1 panics on purpose");
    }
    let mut buf = [0u8; 1];
    world.recv(&mut buf, 1, 0)?;
    fail(world, "received from a rank that panicked".into())
}

/// Rank 1 tells rank 0 the address of its TCP port: rank 0 gets it, the others `None`.
fn port_of_rank_1(world: &World, case: &str) -> Result<Option<String>, Error> {
    let me = world.rank();
    if me == 1 {
        let addr = world
            .tcp_listen_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        world.send(addr.as_bytes(), 0, 1)?;
    } else if me == 0 {
        let mut addr = vec![0u8; 64];
        let st = world.recv(&mut addr, 1, 1)?;
        let addr = String::from_utf8_lossy(&addr[..st.len]).to_string();
        if addr.is_empty() {
            fail(world, format!("{case} needs the tcp transport"));
        }
        return Ok(Some(addr));
    }
    Ok(None)
}

/// Rank 0 connects to rank 1's port as a stranger in several ways; the job then completes.
fn stranger(world: &World) -> Result<(), Error> {
    if let Some(addr) = port_of_rank_1(world, "stranger")? {
        // Garbage.
        let mut s = TcpStream::connect(&addr).expect("connect");
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        // A well-formed handshake for this job with the wrong key: the challenge is answered
        // with a forged proof.
        let job: u64 = std::env::var("FERRY_JOB_ID")
            .ok()
            .and_then(|j| j.parse().ok())
            .unwrap_or(0);
        let wrong =
            ferry_wire::Handshake::connect(ferry_wire::JobKey([0x55; 32]), job, 2, 0, 1, [1; 32]);
        let mut t = TcpStream::connect(&addr).expect("connect");
        let _ = t.write_all(wrong.pending_output());
        let mut challenge = [0u8; ferry_wire::handshake::CHALLENGE_LEN];
        let _ = std::io::Read::read_exact(&mut t, &mut challenge);
        let _ = t.write_all(&[0u8; ferry_wire::handshake::PROOF_LEN]);
        // Silence, then a close.
        let u = TcpStream::connect(&addr).expect("connect");
        // Posing as a relay: garbage after the relay magic; an INCOMING with a forged MAC; a
        // genuine INCOMING (made with the job key) that is then replayed.
        let mut g = TcpStream::connect(&addr).expect("connect");
        let _ = g.write_all(b"FRLY\x01\x30\x00\x00garbage");
        let key = std::env::var("FERRY_JOB_KEY")
            .ok()
            .and_then(|k| ferry_wire::JobKey::from_hex(&k))
            .unwrap_or(ferry_wire::JobKey([0; 32]));
        let ferry_wire::relay::RelayFrame::Connect(c) =
            ferry_wire::relay::connect(&key, &[7; 32], job, 0, 1, [0x42; 32])
        else {
            unreachable!("connect makes CONNECT")
        };
        let incoming = |e2e| {
            ferry_wire::relay::RelayFrame::Incoming(ferry_wire::relay::Incoming {
                job,
                src: 0,
                target: 1,
                nonce: c.nonce,
                e2e,
            })
            .to_bytes()
        };
        let answer = |frame: Vec<u8>| {
            let mut r = TcpStream::connect(&addr).expect("connect");
            let _ = r.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = r.write_all(&frame);
            let mut reply = vec![0u8; ferry_wire::relay::HEADER_LEN];
            let _ = std::io::Read::read_exact(&mut r, &mut reply);
            let body = u16::from_le_bytes([reply[6], reply[7]]) as usize;
            reply.resize(ferry_wire::relay::HEADER_LEN + body, 0);
            let _ = std::io::Read::read_exact(&mut r, &mut reply[ferry_wire::relay::HEADER_LEN..]);
            ferry_wire::relay::RelayFrame::decode(&reply)
                .ok()
                .flatten()
                .map(|(f, _)| f)
        };
        let forged = answer(incoming([0; 32]));
        let genuine = answer(incoming(c.e2e));
        let replayed = answer(incoming(c.e2e));
        use ferry_wire::relay::{RefuseCode, RelayFrame};
        if forged != Some(RelayFrame::Refused(RefuseCode::BadMac))
            || genuine != Some(RelayFrame::Accepted)
            || replayed != Some(RelayFrame::Refused(RefuseCode::Replay))
        {
            fail(
                world,
                format!("relayed strangers: forged {forged:?}, genuine {genuine:?}, replayed {replayed:?}"),
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        drop((s, t, u, g));
    }
    // The job goes on: a round of all-pairs traffic.
    world.barrier()?;
    allpairs(world, 100_000, 5)
}

/// Rank 0 opens 200 idle connections to rank 1's port and keeps them open while the job
/// exchanges messages: rank 1 keeps only `FERRY_TCP_STRANGERS` of them and says so in a few
/// lines, not 200.
fn stranger_flood(world: &World) -> Result<(), Error> {
    let mut idle = Vec::new();
    if let Some(addr) = port_of_rank_1(world, "stranger-flood")? {
        for _ in 0..200 {
            idle.push(TcpStream::connect(&addr).expect("connect"));
        }
    }
    world.barrier()?;
    allpairs(world, 100_000, 5)?;
    world.barrier()?;
    drop(idle);
    Ok(())
}

/// Prints how this rank reaches every rank (`routes <rank>: self shm tcp …`), one rank after
/// the other; rank 0 also prints the world's cluster ids (`clusters [0, 0, 1]`).
fn routes(world: &World) -> Result<(), Error> {
    for turn in 0..world.size() {
        if turn == world.rank() {
            let names: Vec<&str> = (0..world.size())
                .map(|r| match world.route_to(r) {
                    Some(ferry_core::PeerRoute::Itself) => "self",
                    Some(ferry_core::PeerRoute::SharedMemory) => "shm",
                    Some(ferry_core::PeerRoute::Tcp) => "tcp",
                    Some(ferry_core::PeerRoute::Fabric) => "ofi",
                    None => "?",
                })
                .collect();
            println!("routes {}: {}", world.rank(), names.join(" "));
            if world.rank() == 0 {
                println!("clusters {:?}", world.clusters());
            }
            std::io::stdout().flush().ok();
        }
        world.barrier()?;
    }
    Ok(())
}

fn main() {
    let world = common::init("check");
    let args = common::args();
    let arg = |i: usize, default: usize| common::number(&args, i, default);
    let result = match args.first().map(String::as_str) {
        Some("allpairs") => allpairs(&world, arg(1, 8 << 20), arg(2, 1) as u64),
        Some("wildcard") => wildcard(&world),
        Some("rails") => rails(&world, arg(1, 9)),
        Some("hetero") => hetero(&world),
        Some("stream") => stream(&world, arg(1, 4 << 20), arg(2, 64), arg(3, 0) != 0),
        Some("truncate") => truncate(&world),
        Some("probe") => probe(&world),
        Some("comms") => comms(&world),
        Some("big") => big(&world, arg(1, (2usize << 30) + (1 << 20) + 5)),
        Some("die") => die(&world),
        Some("die-in-rendezvous") => die_in_rendezvous(&world, arg(1, 256 << 20)),
        Some("panic") => panics(&world),
        Some("idle") => idle(&world),
        Some("wake") => wake(&world, arg(1, 400), arg(2, 100) as u64),
        Some("coll") => collectives(&world),
        Some("hier") => hier(&world),
        Some("stranger") => stranger(&world),
        Some("stranger-flood") => stranger_flood(&world),
        Some("transport") => {
            // The settings in effect give a ring size only to the shm transport.
            let shm = world.config().shm_ring_bytes.is_some_and(|b| b > 0);
            println!(
                "rank {}: transport {}",
                world.rank(),
                if shm { "shm" } else { "tcp" }
            );
            world.barrier()
        }
        Some("barrier") => (0..arg(1, 100)).try_for_each(|_| world.barrier()),
        Some("routes") => routes(&world),
        Some("bcast-timing") => bcast_timing(&world, &args[1..]),
        other => {
            eprintln!("check: unknown case {other:?}");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        fail(&world, format!("{e}"));
    }
    if let Err(e) = world.finalize() {
        eprintln!("check: finalize: {e}");
        std::process::exit(4);
    }
}
