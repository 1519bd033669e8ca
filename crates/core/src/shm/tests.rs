//! Unit tests of the shared-memory transport.

use super::wake::Ringer;
use super::*;

/// A job id of its own for each test's pair: the tests of this process run at once, and two
/// with one id would make the same segment files (a random byte collided now and then).
fn job() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xffff;
    0xF000_0000_0000_0000 | (std::process::id() as u64) << 16 | n
}

/// Two "ranks" in one process: each maps both segments.
fn pair(ring: usize) -> (ShmTransport, ShmTransport) {
    let job = job();
    let s0 = ShmTransport::create(job, 0, 2, ring).unwrap();
    let s1 = ShmTransport::create(job, 1, 2, ring).unwrap();
    let t0 = ShmTransport::attach(s0, job, 0, &[0, 1], 2, ring).unwrap();
    let t1 = ShmTransport::attach(s1, job, 1, &[0, 1], 2, ring).unwrap();
    t0.unlink_own();
    t1.unlink_own();
    (t0, t1)
}

#[test]
fn a_peer_sees_the_cpu_this_rank_waits_on() {
    let (a, b) = pair(4096);
    // Nothing published yet: no CPU is shared, not even CPU 0.
    assert_eq!(b.sharing_cpu(0), None);
    a.note_cpu(0);
    assert_eq!(b.sharing_cpu(0), Some(0), "rank 0 waits there");
    assert_eq!(b.sharing_cpu(1), None);
    assert_eq!(a.sharing_cpu(0), None, "a rank's own CPU is not a peer's");
    a.note_cpu(3);
    assert!(b.sharing_cpu(3).is_some() && b.sharing_cpu(0).is_none());
    b.note_cpu(3);
    assert_eq!(a.sharing_cpu(3), Some(1));
    assert_eq!((a.me(), b.me()), (0, 1));
}

#[test]
fn records_cross_and_wrap_and_full_ring_says_not_now() {
    let (mut a, mut b) = pair(4096);
    let header = [7u8; HEADER_LEN];
    let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    let mut sent = 0;
    // Fill the ring until it refuses, drain, repeat: positions wrap many times.
    for round in 0..20 {
        let mut pushed = 0;
        while a.try_push(1, &header, payload.as_ptr(), 999) {
            pushed += 1;
        }
        assert_eq!(
            pushed, 3,
            "round {round}: a 4096-byte ring holds 3 records of 1088"
        );
        for _ in 0..pushed {
            let rec = b.peek(0).expect("record");
            assert_eq!(rec.header, header);
            let mut out = vec![0u8; 999];
            rec.copy_payload(0, out.as_mut_ptr(), 999);
            assert_eq!(out, payload[..999]);
            b.pop(0, 999);
            sent += 1;
        }
        assert!(b.peek(0).is_none());
    }
    assert_eq!(
        sent, 60,
        "3 records of 1088 bytes per 4096-byte ring, 20 rounds"
    );
}

#[test]
fn reserved_records_publish_in_place_hold_back_pushes_and_can_be_abandoned() {
    let (mut a, mut b) = pair(4096);
    let header = [9u8; HEADER_LEN];
    let (at, got) = a.reserve(1, 1000, 16).expect("room");
    assert_eq!(got, 1000);
    assert!(a.reserve(1, 8, 8).is_none(), "one reservation at a time");
    // SAFETY: the reservation holds `got` writable bytes.
    unsafe { std::ptr::write_bytes(at, 5, 100) };
    assert!(b.peek(0).is_none(), "nothing visible before publishing");
    assert!(
        !a.try_push(1, &[1u8; HEADER_LEN], [0u8; 8].as_ptr(), 8),
        "a push must not overtake the reserved record"
    );
    assert!(!a.publish(1, &header, 1001), "more than reserved");
    assert!(a.publish(1, &header, 100));
    assert!(a.try_push(1, &[1u8; HEADER_LEN], [7u8; 8].as_ptr(), 8));
    let rec = b.peek(0).expect("published");
    assert_eq!(rec.header, header);
    // Where the receiver maps it (another address than the sender's mapping).
    let there = rec.payload_in_place(100).expect("contiguous");
    // SAFETY: 100 payload bytes in the ring until the pop below.
    assert_eq!(
        unsafe { std::slice::from_raw_parts(there, 100) },
        [5u8; 100]
    );
    let mut out = [0u8; 100];
    rec.copy_payload(0, out.as_mut_ptr(), 100);
    assert_eq!(out, [5u8; 100]);
    b.pop(0, 100);
    assert_eq!(b.peek(0).expect("the push").header, [1u8; HEADER_LEN]);
    b.pop(0, 8);
    // Abandoned: nothing published, pushes flow again.
    assert!(a.reserve(1, 64, 8).is_some());
    a.abandon(1);
    assert!(b.peek(0).is_none());
    assert!(a.try_push(1, &header, [0u8; 8].as_ptr(), 8));
    b.pop(0, 8);
    // Full: fill the ring with unread records, then nothing (or too little) is left.
    while a.try_push(1, &header, [0u8; 512].as_ptr(), 512) {}
    assert!(a.reserve(1, 512, 512).is_none());
}

#[test]
fn consumed_space_reaches_the_producer_by_eighths_and_when_the_ring_empties() {
    let (mut a, mut b) = pair(4096);
    let header = [2u8; HEADER_LEN];
    let push = |a: &mut ShmTransport| a.try_push(1, &header, [0u8; 8].as_ptr(), 8);
    let fill = |a: &mut ShmTransport| std::iter::from_fn(|| push(a).then_some(())).count();
    // 64-byte records: 64 fill the ring.
    assert_eq!(fill(&mut a), 64);
    let take = |b: &mut ShmTransport| {
        b.peek(0).expect("a record");
        b.pop(0, 8);
    };
    // One record consumed is not yet handed back…
    take(&mut b);
    assert!(
        !push(&mut a),
        "a single record's space was handed back at once"
    );
    // …an eighth of the ring is.
    (1..8).for_each(|_| take(&mut b));
    assert_eq!(fill(&mut a), 8);
    // Less than an eighth, then kept in place: handed back before the wait for its reader.
    (0..3).for_each(|_| take(&mut b));
    assert!(!push(&mut a));
    b.publish_head(0);
    assert_eq!(fill(&mut a), 3);
    // Drained: finding the ring empty hands back the rest.
    (0..64).for_each(|_| take(&mut b));
    assert!(b.peek(0).is_none());
    assert_eq!(fill(&mut a), 64);
}

#[test]
fn reservations_stay_contiguous_near_the_end_of_the_ring() {
    let (mut a, mut b) = pair(4096);
    let header = [3u8; HEADER_LEN];
    // Move the tail to 3 × 1088 = 3264: 4096 - 3264 - 48 = 784 bytes before the wrap.
    for _ in 0..3 {
        assert!(a.try_push(1, &header, [0u8; 1000].as_ptr(), 1000));
        b.pop(0, 1000);
    }
    let (_, got) = a.reserve(1, 4000, 8).expect("room");
    assert_eq!(got, 784);
    assert!(a.publish(1, &header, got));
    let rec = b.peek(0).expect("published");
    assert!(rec.payload_in_place(got).is_some());
}

/// Waits up to `timeout` for events on `poll`; returns their tokens.
fn events(poll: &mut mio::Poll, timeout: Duration) -> Vec<mio::Token> {
    let mut events = mio::Events::with_capacity(8);
    poll.poll(&mut events, Some(timeout)).unwrap();
    events.iter().map(|e| e.token()).collect()
}

const BELL: mio::Token = mio::Token(7);

fn watched(job: u64, rank: u32) -> (Doorbell, mio::Poll) {
    let mut bell = Doorbell::bind(job, rank).unwrap();
    let poll = mio::Poll::new().unwrap();
    poll.registry()
        .register(&mut bell, BELL, mio::Interest::READABLE)
        .unwrap();
    (bell, poll)
}

#[test]
fn doorbell_ends_a_poll_holds_its_rings_until_drained_and_never_fails_when_full() {
    let job = job();
    let (bell, mut poll) = watched(job, 3);
    assert!(Doorbell::bind(job, 3).is_err(), "one doorbell per rank");
    assert!(events(&mut poll, Duration::ZERO).is_empty());
    assert!(!bell.drain());
    // Far more rings than the socket queues: the extra ones are dropped, never an error.
    let mut ringer = Ringer::new();
    for _ in 0..10_000 {
        ringer.ring(job, 0, 3);
    }
    assert!(!ringer.complained);
    let start = std::time::Instant::now();
    assert_eq!(events(&mut poll, Duration::from_secs(10)), [BELL]);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(bell.drain());
    assert!(!bell.drain());
    assert!(events(&mut poll, Duration::ZERO).is_empty());
    // Rung before the poll: the ring waits for it (the sleeper may be late).
    ringer.ring(job, 0, 3);
    assert_eq!(events(&mut poll, Duration::from_secs(10)), [BELL]);
    assert!(bell.drain());
    // A doorbell nobody bound: said once, no panic, no hang.
    ringer.ring(job, 0, 4);
    assert!(ringer.complained);
}

fn sleeping(t: &ShmTransport) -> u32 {
    t.own.sleeping().load(Ordering::SeqCst)
}

#[test]
fn a_sleeper_in_poll_is_rung_by_pushes_and_pops_and_one_on_the_futex_is_not() {
    let (mut a, mut b) = pair(4096);
    let (bell_a, mut poll_a) = watched(a.job, 0);
    let (bell_b, mut poll_b) = watched(b.job, 1);
    let header = [1u8; HEADER_LEN];
    // Push to a sleeper in epoll: the word is cleared and its doorbell rung.
    a.prepare_sleep(Sleep::InPoll);
    assert_eq!(sleeping(&a), IN_POLL);
    assert!(b.try_push(0, &header, [0u8; 8].as_ptr(), 8));
    assert_eq!(sleeping(&a), AWAKE);
    assert_eq!(events(&mut poll_a, Duration::from_secs(10)), [BELL]);
    assert!(bell_a.drain());
    // Only once: the next push finds it awake.
    assert!(b.try_push(0, &header, [0u8; 8].as_ptr(), 8));
    assert!(!bell_a.drain());
    // Ring space handed back wakes the producer the same way (it may wait for it): here the
    // consumer pops both records and finds the ring empty.
    b.prepare_sleep(Sleep::InPoll);
    a.pop(1, 8);
    a.pop(1, 8);
    assert_eq!(
        sleeping(&b),
        IN_POLL,
        "woken before any space was handed back"
    );
    assert!(a.peek(1).is_none());
    assert_eq!(sleeping(&b), AWAKE);
    assert_eq!(events(&mut poll_b, Duration::from_secs(10)), [BELL]);
    assert!(bell_b.drain());
    // So does a published reservation.
    a.prepare_sleep(Sleep::InPoll);
    assert!(b.reserve(0, 16, 16).is_some());
    assert!(b.publish(0, &header, 16));
    assert_eq!(events(&mut poll_a, Duration::from_secs(10)), [BELL]);
    assert!(bell_a.drain());
    a.cancel_sleep();
    // On the futex: woken there, the doorbell stays silent.
    a.prepare_sleep(Sleep::OnFutex);
    assert_eq!(sleeping(&a), ON_FUTEX);
    assert!(b.try_push(0, &header, [0u8; 8].as_ptr(), 8));
    assert_eq!(sleeping(&a), AWAKE);
    assert!(events(&mut poll_a, Duration::ZERO).is_empty());
    assert!(!bell_a.drain());
}

#[test]
fn cma_reads_own_memory() {
    let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let mut dst = vec![0u8; src.len()];
    match cma_read(
        std::process::id(),
        src.as_ptr() as u64,
        dst.as_mut_ptr(),
        src.len(),
    ) {
        Ok(()) => assert_eq!(src, dst),
        // Some sandboxes forbid CMA; the runtime falls back, the test has nothing to check.
        Err(e) => eprintln!("CMA refused here: {e}"),
    }
}

#[test]
fn cma_writes_own_memory() {
    let src: Vec<u8> = (0..100_000u32).map(|i| (i * 13) as u8).collect();
    let mut dst = vec![0u8; src.len()];
    match cma_write(
        std::process::id(),
        dst.as_mut_ptr() as u64,
        src.as_ptr(),
        src.len(),
    ) {
        Ok(()) => assert_eq!(src, dst),
        Err(e) => eprintln!("CMA refused here: {e}"),
    }
}
