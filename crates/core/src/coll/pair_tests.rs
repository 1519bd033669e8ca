//! The executor on two engines joined in memory (`engine::pair`): 2-rank collective schedules
//! run as requests that the engines' hook passes advance, with no sockets, no shared memory
//! and no clock, and the wire delivering a frame at a time or all at once.

use super::executor::{CollectiveCall, Planned, Reducer, Started};
use super::Collectives;
use crate::engine::pair::Pair;
use crate::engine::{Engine, ReqId, SendMode};
use crate::error::Error;
use ferry_sched::{algorithms as alg, Order, Schedule};
use std::rc::Rc;

/// A sum of little-endian u64s.
fn sum() -> Reducer {
    Reducer::new(|src: &[u8], dst: &mut [u8], _: Order| {
        for (s, d) in src.chunks_exact(8).zip(dst.chunks_exact_mut(8)) {
            let x = u64::from_le_bytes(s.try_into().unwrap());
            let y = u64::from_le_bytes(d.try_into().unwrap());
            d.copy_from_slice(&x.wrapping_add(y).to_le_bytes());
        }
    })
}

fn words(seed: u64, n: usize) -> Vec<u8> {
    (0..n as u64)
        .flat_map(|i| (seed * 1_000_003 + i).to_le_bytes())
        .collect()
}

/// Starts call number `call` of `schedule` on `engine` with these buffers: its request.
fn start(
    coll: &mut Collectives,
    engine: &mut Engine,
    schedule: Schedule,
    call: u32,
    (send, recv): (&[u8], &mut [u8]),
    reduce: Option<Reducer>,
) -> ReqId {
    let planned = Planned::check(schedule).expect("a valid schedule");
    let call = CollectiveCall {
        schedule: planned.into_inner(),
        context: 2,
        call,
        world_of: Rc::from([0u32, 1]),
        send: send.as_ptr(),
        recv: recv.as_mut_ptr(),
        reduce,
        mode: SendMode::Standard,
        failed: None,
        stand_ins: Vec::new(),
    };
    coll.start(engine, call).expect("the call starts")
}

/// Both sides' outcome of one call of `schedules` (rank 0's, rank 1's) on these buffers,
/// the wire delivering `limit` frames at a time.
fn run_both(
    pair: &mut Pair,
    colls: &mut [Collectives; 2],
    schedules: [Schedule; 2],
    buffers: [(&[u8], &mut [u8]); 2],
    limit: usize,
) -> [Result<(), Error>; 2] {
    let [sa, sb] = schedules;
    let [ba, bb] = buffers;
    let [ca, cb] = colls;
    let ra = start(ca, &mut pair.a, sa, 1, ba, Some(sum()));
    let rb = start(cb, &mut pair.b, sb, 1, bb, Some(sum()));
    let (ea, eb) = pair.drive_hooked(limit, ca, cb);
    let outcome = |engine: &mut Engine, id, hooked: Result<(), Error>| {
        hooked?;
        engine.take(id).map(drop).ok_or_else(|| Error::Protocol {
            rank: 0,
            detail: "the call did not complete".into(),
        })
    };
    [outcome(&mut pair.a, ra, ea), outcome(&mut pair.b, rb, eb)]
}

#[test]
fn a_two_rank_allreduce_sums_both_vectors_on_both_ranks() {
    // Eager and rendezvous messages, delivered a frame at a time and all at once.
    for (words_each, limit) in [(1, 1), (1, usize::MAX), (20_000, 1), (20_000, usize::MAX)] {
        let mut pair = Pair::new(1024, 4096);
        let mut colls = [Collectives::default(), Collectives::default()];
        let (xa, xb) = (words(1, words_each), words(2, words_each));
        let (mut ya, mut yb) = (vec![0u8; xa.len()], vec![0u8; xb.len()]);
        let bytes = xa.len();
        let results = run_both(
            &mut pair,
            &mut colls,
            [0, 1].map(|rank| alg::allreduce_recursive_doubling(rank, 2, bytes, false)),
            [(&xa, &mut ya), (&xb, &mut yb)],
            limit,
        );
        for r in results {
            r.expect("the call completes");
        }
        let mut want = xb.clone();
        sum().apply(&xa, &mut want, Order::SrcFirst);
        assert!(ya == want && yb == want, "{words_each} words, {limit}");
        assert!(!colls[0].wants_pass_now(&pair.a) && !colls[1].wants_pass_now(&pair.b));
    }
}

#[test]
fn a_broadcast_reaches_the_other_rank_whole() {
    let mut pair = Pair::new(1024, 4096);
    let mut colls = [Collectives::default(), Collectives::default()];
    let data = words(7, 10_000);
    let mut root_buf = data.clone();
    let mut got = vec![0u8; data.len()];
    let bytes = data.len();
    let results = run_both(
        &mut pair,
        &mut colls,
        [0, 1].map(|rank| alg::bcast_binomial(rank, 2, 1, bytes)),
        [(&[], &mut got), (&[], &mut root_buf)],
        3,
    );
    for r in results {
        r.expect("the broadcast completes");
    }
    assert!(got == data);
}

#[test]
fn ranks_that_pass_different_counts_both_end_the_call_and_the_longer_one_is_named() {
    // Rank 1 reduces 4 words, rank 0 only 2: rank 0's receive is too short (truncation by
    // rank 1), rank 1's too long; neither waits forever.
    let mut pair = Pair::new(1024, 4096);
    let mut colls = [Collectives::default(), Collectives::default()];
    let (xa, xb) = (words(1, 2), words(2, 4));
    let (mut ya, mut yb) = (vec![0u8; xa.len()], vec![0u8; xb.len()]);
    let results = run_both(
        &mut pair,
        &mut colls,
        [
            alg::allreduce_recursive_doubling(0, 2, xa.len(), false),
            alg::allreduce_recursive_doubling(1, 2, xb.len(), false),
        ],
        [(&xa, &mut ya), (&xb, &mut yb)],
        usize::MAX,
    );
    assert!(
        matches!(results[0], Err(Error::Truncated { sender: 1, .. })),
        "rank 0: {:?}",
        results[0]
    );
    assert!(
        results[1].is_err(),
        "rank 1 completed a call it got 16 bytes for"
    );
}

#[test]
fn a_call_that_needs_no_message_finishes_as_it_starts() {
    let mut pair = Pair::new(1024, 4096);
    let mut coll = Collectives::default();
    let planned = Planned::check(alg::bcast_binomial(0, 1, 0, 64)).unwrap();
    let mut buf = vec![1u8; 64];
    let call = CollectiveCall {
        schedule: planned.into_inner(),
        context: 2,
        call: 1,
        world_of: Rc::from([0u32]),
        send: std::ptr::null(),
        recv: buf.as_mut_ptr(),
        reduce: None,
        mode: SendMode::Standard,
        failed: None,
        stand_ins: Vec::new(),
    };
    assert!(matches!(coll.begin(&mut pair.a, call), Ok(Started::Done)));
    assert!(!coll.wants_pass_now(&pair.a));
}

impl Collectives {
    /// Whether the engine's next pass would call this hook.
    fn wants_pass_now(&self, engine: &Engine) -> bool {
        crate::engine::Hook::wants_pass(self, engine.proto.completions)
    }
}
