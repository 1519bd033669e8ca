//! Self-checking BSP scenarios through the Rust API, one per rule of BSPlib, run by
//! `tests/rules.rs` through `ferry run`: `bsp_rules <case>`. A violated rule ends the job with
//! a non-zero status and a message; the `err_*` cases must be stopped by ferry-bsp itself.

use ferry_bsp::{Bsp, BspError};

fn check(bsp: &Bsp, ok: bool, what: &str) {
    if !ok {
        bsp.abort(&format!("RULE BROKEN: {what}"));
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn main() {
    // Errors from inside the computation stop the job as its `Bsp` is dropped (with the
    // message of the error); those after it is gone (from `end`) are printed here.
    if let Err(e) = run() {
        eprintln!("ferry-bsp: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), BspError> {
    let case = std::env::args().nth(1).expect("usage: bsp_rules <case>");
    let mut bsp = if case == "begin_fewer" {
        // Only process 0 says how many take part (as with bsp_init in C); the processes
        // beyond end inside `begin`.
        let world = ferry_core::init().expect("ferry init");
        let asked = (world.rank() == 0).then_some(2);
        Bsp::begin(world, asked)?
    } else {
        Bsp::init()?
    };
    let (me, n) = (bsp.pid(), bsp.nprocs());
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    match case.as_str() {
        // Registrations are matched by order, not address: process 0 allocates its areas in
        // the opposite order, and a put into the second registration lands in the second.
        "reg_order" => {
            let (a, b) = if me == 0 {
                let b = bsp.alloc::<u32>(4)?;
                let a = bsp.alloc::<u32>(4)?;
                (a, b)
            } else {
                (bsp.alloc::<u32>(4)?, bsp.alloc::<u32>(4)?)
            };
            bsp.push_reg(&a)?;
            bsp.push_reg(&b)?;
            bsp.sync()?;
            bsp.put(right, &[10 + me as u32], &a, 0)?;
            bsp.put(right, &[20 + me as u32], &b, 1)?;
            bsp.sync()?;
            check(
                &bsp,
                bsp.area(&a)?[0] == 10 + left as u32,
                "put into 1st registration",
            );
            check(
                &bsp,
                bsp.area(&b)?[1] == 20 + left as u32,
                "put into 2nd registration",
            );
            // Pop takes effect at the next sync: a put in the same superstep still works.
            bsp.pop_reg(&b)?;
            bsp.put(right, &[30], &b, 2)?;
            bsp.sync()?;
            check(
                &bsp,
                bsp.area(&b)?[2] == 30,
                "put after pop_reg, same superstep",
            );
        }
        // Registrations of one area stack: a pop uncovers the one below (at the next sync),
        // and the area stays usable until the last is popped.
        "reg_stack" => {
            let a = bsp.alloc::<u32>(4)?;
            bsp.push_reg(&a)?;
            bsp.sync()?;
            bsp.push_reg(&a)?;
            bsp.sync()?;
            bsp.pop_reg(&a)?;
            bsp.sync()?;
            bsp.put(right, &[50 + me as u32], &a, 3)?;
            bsp.sync()?;
            check(
                &bsp,
                bsp.area(&a)?[3] == 50 + left as u32,
                "put through the registration below a popped one",
            );
            bsp.pop_reg(&a)?;
            bsp.sync()?;
        }
        // Registrations come and go every superstep (their slots are reused): puts still land
        // in the registration matched by order, on every process.
        "reg_reuse" => {
            let keep = bsp.alloc::<u32>(2)?;
            let (a, b) = (bsp.alloc::<u32>(4)?, bsp.alloc::<u32>(4)?);
            bsp.push_reg(&keep)?;
            bsp.sync()?;
            for round in 0..50u32 {
                // Process 0 registers its two areas in the other order every other round.
                let (x, y) = if me == 0 && round % 2 == 1 {
                    (b, a)
                } else {
                    (a, b)
                };
                bsp.push_reg(&x)?;
                bsp.push_reg(&y)?;
                bsp.sync()?;
                bsp.put(right, &[round + 10 * me as u32], &x, 1)?;
                bsp.put(right, &[round], &keep, 0)?;
                bsp.pop_reg(&y)?;
                bsp.pop_reg(&x)?;
                bsp.sync()?;
                let ok =
                    bsp.area(&x)?[1] == round + 10 * left as u32 && bsp.area(&keep)?[0] == round;
                check(&bsp, ok, "put through a reused registration");
            }
        }
        "begin_fewer" => {
            check(&bsp, n == 2, "two processes of the job");
            let x = bsp.alloc::<u32>(1)?;
            bsp.push_reg(&x)?;
            bsp.sync()?;
            bsp.put(right, &[me as u32 + 5], &x, 0)?;
            bsp.sync()?;
            check(
                &bsp,
                bsp.area(&x)?[0] == left as u32 + 5,
                "put among the two",
            );
            if me == 0 {
                println!("begin_fewer ok");
            }
        }
        "err_stack_popped" => {
            let a = bsp.alloc::<u32>(4)?;
            bsp.push_reg(&a)?;
            bsp.push_reg(&a)?;
            bsp.sync()?;
            bsp.pop_reg(&a)?;
            bsp.pop_reg(&a)?;
            bsp.sync()?;
            bsp.put(right, &[1], &a, 0)?; // both popped
            bsp.sync()?;
        }
        // A registration is usable only after the next sync.
        "err_reg_not_yet" => {
            let a = bsp.alloc::<u8>(8)?;
            bsp.push_reg(&a)?;
            bsp.put(right, &[1u8], &a, 0)?; // must stop the job: not registered until sync
            bsp.sync()?;
        }
        "err_popped" => {
            let a = bsp.alloc::<u8>(8)?;
            bsp.push_reg(&a)?;
            bsp.sync()?;
            bsp.pop_reg(&a)?;
            bsp.sync()?;
            bsp.put(right, &[1u8], &a, 0)?; // popped at the last sync
            bsp.sync()?;
        }
        "err_put_bounds" => {
            let a = bsp.alloc::<u32>(4)?;
            bsp.push_reg(&a)?;
            bsp.sync()?;
            if me == 1 {
                bsp.put(0, &[1u32, 2], &a, 3)?; // elements 3..5 of 4
            }
            bsp.sync()?;
        }
        "err_get_bounds" => {
            let a = bsp.alloc::<u32>(4)?;
            let d = bsp.alloc::<u32>(4)?;
            bsp.push_reg(&a)?;
            bsp.sync()?;
            if me == 1 {
                // Read past the end of process 0's area (the typed API would refuse to
                // build such a call, so use the raw one).
                unsafe {
                    bsp.get_raw(
                        0,
                        bsp.area(&a)?.as_ptr() as *const u8,
                        12,
                        bsp.area(&d)?.as_ptr() as *mut u8,
                        8,
                    )
                }?;
            }
            bsp.sync()?;
        }
        "err_mismatch" => {
            let a = bsp.alloc::<u32>(4)?;
            bsp.push_reg(&a)?;
            if me == 1 {
                let b = bsp.alloc::<u32>(4)?;
                bsp.push_reg(&b)?; // one registration more than the others
            }
            bsp.sync()?;
        }
        // Process 0 ends while the others sync: both sides must stop the job, not wait.
        "err_end_while_sync" => {
            if me == 0 {
                return bsp.end();
            }
            bsp.sync()?;
        }
        // Process 1 leaves without bsp_end (its Bsp is dropped) while the others sync.
        "err_no_end" => {
            if me == 1 {
                return Ok(());
            }
            bsp.sync()?;
        }
        // As err_no_end, through process::exit (nothing is dropped).
        "err_exit_no_end" => {
            if me == 1 {
                std::process::exit(0);
            }
            bsp.sync()?;
        }
        // The tag size must be set alike everywhere: a longer tag would overrun the receiver's.
        "err_tagsize_differs" => {
            bsp.set_tagsize(if me == 1 { 8 } else { 4 });
            bsp.sync()?;
            if me == 1 {
                bsp.send(right, &[0u8; 8], b"x")?;
            }
            bsp.sync()?;
        }
        "err_bad_pid" => {
            let a = bsp.alloc::<u32>(4)?;
            bsp.push_reg(&a)?;
            bsp.sync()?;
            if me == 2 {
                bsp.put(n, &[1], &a, 0)?; // no process n
            }
            bsp.sync()?;
        }
        "err_pop_unregistered" => {
            let a = bsp.alloc::<u32>(4)?;
            bsp.pop_reg(&a)?;
        }
        // bsp_put copies its source when called.
        "put_copies" => {
            let x = bsp.alloc::<u64>(1)?;
            bsp.push_reg(&x)?;
            bsp.sync()?;
            let mut src = [me as u64 + 100];
            bsp.put(right, &src, &x, 0)?;
            src[0] = 999;
            let _ = src;
            bsp.sync()?;
            check(
                &bsp,
                bsp.area(&x)?[0] == left as u64 + 100,
                "put copies at call time",
            );
        }
        // Puts that continue each other are merged into one record when combining; the
        // result must be as if every put were applied in order (a later overlapping put wins,
        // puts into another area or with a gap start a new record, an early send splits).
        "merge" => {
            let (x, y) = (bsp.alloc::<u64>(4096)?, bsp.alloc::<u64>(8)?);
            bsp.push_reg(&x)?;
            bsp.push_reg(&y)?;
            bsp.sync()?;
            let v = |i: usize| (me * 100_000 + i) as u64;
            for i in 0..4096 {
                bsp.put(right, &[v(i)], &x, i)?; // one long chain (passes the early threshold)
                if i == 10 {
                    bsp.put(right, &[7, 8], &y, 0)?; // another area in between
                }
            }
            bsp.put(right, &[1, 2, 3], &x, 5)?; // overlaps the chain: applied after it
            bsp.put(right, &[4], &x, 8)?; // continues the overlapping put
            bsp.put(right, &[9], &y, 3)?; // a gap after y[0..2]
            bsp.sync()?;
            let (xs, ys) = (bsp.area(&x)?, bsp.area(&y)?);
            let want = |i: usize| match i {
                5..=7 => (i - 4) as u64,
                8 => 4,
                _ => (left * 100_000 + i) as u64,
            };
            check(
                &bsp,
                (0..4096).all(|i| xs[i] == want(i)) && ys[..4] == [7, 8, 0, 9],
                "merged puts apply in order",
            );
        }
        // At a sync, gets are served before puts are applied.
        "gets_before_puts" => {
            let x = bsp.alloc::<u64>(1)?;
            let got = bsp.alloc::<u64>(1)?;
            bsp.push_reg(&x)?;
            bsp.area_mut(&x)?[0] = 1000 + me as u64;
            bsp.sync()?;
            // Everyone overwrites its right neighbour's x and reads it in the same superstep.
            bsp.put(right, &[2000 + me as u64], &x, 0)?;
            bsp.get(right, &x, 0, &got, 0, 1)?;
            // A get reads at the sync: after this superstep's local writes, before its puts.
            bsp.area_mut(&x)?[0] = 3000 + me as u64;
            bsp.sync()?;
            check(
                &bsp,
                bsp.area(&got)?[0] == 3000 + right as u64,
                "get sees the value at the sync, before puts",
            );
            check(&bsp, bsp.area(&x)?[0] == 2000 + left as u64, "put applied");
        }
        // hpput and hpget move data; hpput is unbuffered (reads its source at the sync here).
        "hp" => {
            let x = bsp.alloc::<u32>(8)?;
            let src = bsp.alloc::<u32>(8)?;
            let got = bsp.alloc::<u32>(8)?;
            bsp.push_reg(&x)?;
            bsp.area_mut(&x)?
                .iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v = (me * 100 + i) as u32);
            bsp.sync()?;
            bsp.hpget(right, &x, 2, &got, 0, 4)?;
            bsp.area_mut(&src)?[..3].copy_from_slice(&[7, 8, me as u32]);
            bsp.hpput(right, &src, 0, &x, 5, 3)?;
            bsp.sync()?;
            let want: Vec<u32> = (2..6).map(|i| (right * 100 + i) as u32).collect();
            check(&bsp, bsp.area(&got)?[..4] == want[..], "hpget before puts");
            check(
                &bsp,
                bsp.area(&x)?[5..8] == [7, 8, left as u32],
                "hpput delivered",
            );
        }
        // BSMP messages of superstep i are readable in superstep i+1 only.
        "bsmp" => {
            for q in 0..n {
                bsp.send(q, &[], &(me as u32).to_le_bytes())?;
            }
            check(&bsp, bsp.qsize() == (0, 0), "no message before the sync");
            bsp.sync()?;
            check(
                &bsp,
                bsp.qsize() == (n, 4 * n),
                "all messages after the sync",
            );
            let mut seen = vec![false; n];
            let mut buf = [0u8; 4];
            while let Some(len) = bsp.move_into(&mut buf) {
                check(&bsp, len == 4, "payload length");
                seen[u32::from_le_bytes(buf) as usize] = true;
            }
            check(
                &bsp,
                seen.iter().all(|&s| s),
                "one message from each process",
            );
            check(&bsp, bsp.get_tag().is_none(), "get_tag on an empty queue");
            let none = bsp.hpmove().is_none();
            check(&bsp, none, "hpmove on an empty queue");
            bsp.send(right, &[], b"hello")?;
            bsp.sync()?;
            let mut two = [0u8; 2];
            let len = bsp.move_into(&mut two);
            check(
                &bsp,
                len == Some(5) && &two == b"he",
                "move_into truncates to the buffer, returns the payload size",
            );
            bsp.send(right, &[], b"again")?;
            bsp.sync()?;
            bsp.sync()?;
            check(
                &bsp,
                bsp.qsize() == (0, 0),
                "messages gone two supersteps later",
            );
        }
        // The tag size takes effect at the next sync.
        "tagsize" => {
            let old = bsp.set_tagsize(4);
            check(&bsp, old == 0, "initial tag size is 0");
            check(&bsp, bsp.tagsize() == 0, "tag size unchanged before sync");
            bsp.send(right, &[], b"a")?;
            bsp.sync()?;
            check(&bsp, bsp.tagsize() == 4, "tag size 4 after sync");
            check(
                &bsp,
                bsp.get_tag() == Some((1, &[][..])),
                "message of the old superstep has no tag",
            );
            bsp.send(right, &(me as u32 + 7).to_le_bytes(), b"bc")?;
            bsp.sync()?;
            let want = (left as u32 + 7).to_le_bytes();
            check(&bsp, bsp.get_tag() == Some((2, &want[..])), "4-byte tag");
            let (t, p) = bsp.hpmove().expect("a message");
            let ok = t == want && p == b"bc";
            check(&bsp, ok, "hpmove in place");
        }
        // Random puts, gets and sends of random sizes and offsets, checked by a model.
        "stress" => {
            const LEN: usize = 4096;
            let x = bsp.alloc::<u8>(LEN)?;
            let got = bsp.alloc::<u8>(LEN * 4)?;
            bsp.push_reg(&x)?;
            bsp.sync()?;
            for step in 0..6u64 {
                // Every process knows the whole plan (same seeds), so it can model every area.
                let mut model: Vec<Vec<u8>> = (0..n)
                    .map(|q| {
                        (0..LEN)
                            .map(|i| splitmix(step * 7919 + (q * LEN + i) as u64) as u8)
                            .collect()
                    })
                    .collect();
                bsp.area_mut(&x)?.copy_from_slice(&model[me]);
                bsp.sync()?;
                let before = model.clone();
                let mut my_gets = Vec::new();
                let mut at = 0;
                for src in 0..n {
                    let mut r = splitmix(step ^ ((src as u64) << 32));
                    for k in 0..40 {
                        r = splitmix(r);
                        let dst = (r % n as u64) as usize;
                        let len = 1 + (r >> 8) as usize % if k % 10 == 0 { 3000 } else { 64 };
                        let off = (r >> 24) as usize % (LEN - len);
                        let data: Vec<u8> =
                            (0..len).map(|i| splitmix(r ^ i as u64) as u8).collect();
                        if k % 3 == 0 {
                            if src == me {
                                bsp.get(dst, &x, off, &got, at, len)?;
                                my_gets.push((at, before[dst][off..off + len].to_vec()));
                                at += len;
                            }
                        } else {
                            if src == me {
                                bsp.put(dst, &data, &x, off)?;
                            }
                            model[dst][off..off + len].copy_from_slice(&data);
                        }
                    }
                }
                bsp.sync()?;
                // Puts from one process apply in order; across processes in pid order (ours);
                // the model applied them in pid order too.
                let sum = |b: &[u8]| b.iter().fold(0u64, |h, &v| splitmix(h ^ v as u64));
                check(
                    &bsp,
                    sum(bsp.area(&x)?) == sum(&model[me]),
                    "stress: puts (checksum)",
                );
                for (a, want) in &my_gets {
                    check(
                        &bsp,
                        bsp.area(&got)?[*a..*a + want.len()] == want[..],
                        "stress: gets",
                    );
                }
            }
        }
        other => panic!("unknown case {other}"),
    }
    bsp.end()
}
