//! Endpoints of one process on libfabric's `tcp` provider over loopback: a peer whose
//! endpoint is closed is lost within the patience given, and the others still talk.
//! Without libfabric the tests say so and pass.

use super::*;
use crate::frames::{Arrival, Incoming};
use ferry_fabric::{EndpointSpec, Library};

/// Long enough that only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(60);
/// The patience of the transports under test: short, so that a test ends soon.
const PATIENCE: Duration = Duration::from_millis(300);
const LOST_PID: u32 = 4242;

fn endpoint() -> Option<Endpoint> {
    let lib = match Library::load() {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("skipped: libfabric cannot be loaded: {e}");
            return None;
        }
    };
    let spec = EndpointSpec {
        provider: Some("tcp".into()),
        domain: Some("lo".into()),
        ..EndpointSpec::default()
    };
    match Endpoint::open(&lib, &spec) {
        Ok(ep) => Some(ep),
        Err(e) => {
            eprintln!("skipped: no tcp endpoint on lo: {e}");
            None
        }
    }
}

fn transport(me: u32) -> Option<FabricTransport> {
    Some(FabricTransport::open(vec![endpoint()?], me, 1024, PATIENCE).expect("transport"))
}

/// The name of an endpoint that was opened and closed again: nothing answers there.
fn closed_name() -> Vec<u8> {
    let ep = endpoint().expect("a second endpoint");
    ep.name().expect("its name")
}

/// Every rail's endpoint name, as a peer's card gives them.
fn names(t: &FabricTransport) -> Vec<Vec<u8>> {
    let names = t.names().expect("the endpoints' names");
    names.into_iter().map(|(_, name)| name).collect()
}

/// Records the frames that arrive, by sender, and the reads done.
#[derive(Default)]
struct Arrived(Vec<(u32, u64)>, Vec<(u32, ReqId)>);

impl FrameSink for Arrived {
    fn begin_frame(&mut self, _peer: u32, _frame: &Frame) -> Result<Incoming, Error> {
        Ok(Incoming {
            ptr: std::ptr::null_mut(),
            cap: 0,
            arrival: Arrival::Discard,
        })
    }
    fn end_frame(&mut self, peer: u32, frame: &Frame, _: Incoming) -> Result<(), Error> {
        self.0.push((peer, frame.payload_len()));
        Ok(())
    }
    fn read_done(&mut self, peer: u32, id: ReqId) -> Result<(), Error> {
        self.1.push((peer, id));
        Ok(())
    }
}

fn frame(payload: &[u8]) -> OutFrame {
    OutFrame {
        header: Frame::eager_header(1, 7, payload.len() as u64),
        payload: payload.as_ptr(),
        len: payload.len(),
        sent: 0,
        complete: None,
        owned: None,
    }
}

/// Writes frames of `payload` to `peer` and polls until an error comes.
fn write_until_error(t: &mut FabricTransport, peer: usize, payload: &[u8]) -> Error {
    let begin = Instant::now();
    let mut sink = Arrived::default();
    let mut out = frame(payload);
    loop {
        match t.try_write(peer, &mut out) {
            Ok(true) => out = frame(payload),
            Ok(false) => {}
            Err(e) => return e,
        }
        if let Err(e) = t.poll_input(&mut sink) {
            return e;
        }
        assert!(begin.elapsed() < DEADLINE, "no error for a closed endpoint");
    }
}

fn assert_lost(e: &Error, rank: usize) -> String {
    match e {
        Error::PeerLost {
            rank: r,
            pid,
            detail,
        } if *r == rank && *pid == LOST_PID => {
            assert!(detail.contains("tcp"), "names the provider: {detail}");
            detail.clone()
        }
        other => panic!("expected rank {rank} lost, got {other:?}"),
    }
}

fn writes_to_a_closed_endpoint_lose_its_rank(payload: &[u8]) {
    let Some(mut t) = transport(0) else { return };
    t.set_peer(1, vec![closed_name()], LOST_PID);
    let detail = assert_lost(&write_until_error(&mut t, 1, payload), 1);
    // The operation is named: a stall names the call, a failed completion says so.
    assert!(
        detail.contains("fi_") || detail.contains("failed"),
        "names the operation: {detail}"
    );
    // Every later operation towards it fails the same way, at once.
    let again = t.try_write(1, &mut frame(payload)).expect_err("still lost");
    assert_eq!(assert_lost(&again, 1), detail);
}

#[test]
fn an_inject_over_fabric_to_a_closed_endpoint_loses_its_rank() {
    writes_to_a_closed_endpoint_lose_its_rank(&[5; 8]);
}

#[test]
fn a_slot_send_over_fabric_to_a_closed_endpoint_loses_its_rank() {
    writes_to_a_closed_endpoint_lose_its_rank(&[5; 1000]);
}

/// Writes `count` frames of `payload` from `a` to `to` while both poll, until `b` has them.
fn exchange(a: &mut FabricTransport, b: &mut FabricTransport, to: usize, payload: &[u8]) {
    let (count, from) = (20, a.me);
    let (mut at_a, mut at_b) = (Arrived::default(), Arrived::default());
    let begin = Instant::now();
    let mut written = 0;
    let mut out = frame(payload);
    while at_b.0.len() < count {
        if written < count && a.try_write(to, &mut out).expect("write") {
            written += 1;
            out = frame(payload);
        }
        a.poll_input(&mut at_a).expect("poll the sender");
        b.poll_input(&mut at_b).expect("poll the receiver");
        assert!(
            begin.elapsed() < DEADLINE,
            "{} of {count} frames",
            at_b.0.len()
        );
    }
    assert!(at_b.0.iter().all(|&f| f == (from, payload.len() as u64)));
}

#[test]
fn over_fabric_the_survivors_still_talk_after_a_peer_is_lost() {
    let Some(mut a) = transport(0) else { return };
    let mut b = transport(1).expect("a second transport");
    a.set_peer(1, names(&b), 11);
    a.set_peer(2, vec![closed_name()], LOST_PID);
    b.set_peer(0, names(&a), 10);
    let (small, large) = ([3u8; 8], [4u8; 1000]);
    exchange(&mut a, &mut b, 1, &small);

    assert_lost(&write_until_error(&mut a, 2, &large), 2);
    // A read from the lost rank is refused before it registers anything.
    let mut buf = [0u8; 64];
    let read = FabricRead {
        id: 9,
        peer: 2,
        remote_addr: 0,
        key: 0,
        buf: buf.as_mut_ptr(),
        len: buf.len(),
    };
    assert_lost(&a.start_read(read).expect_err("lost"), 2);
    assert!(a.reads.iter().all(Option::is_none));

    exchange(&mut a, &mut b, 1, &small);
    exchange(&mut a, &mut b, 1, &large);
    exchange(&mut b, &mut a, 0, &large);
}

#[test]
fn over_fabric_a_peer_that_closes_its_endpoint_mid_job_is_lost() {
    let Some(mut a) = transport(0) else { return };
    let mut b = transport(1).expect("a second transport");
    a.set_peer(1, names(&b), LOST_PID);
    b.set_peer(0, names(&a), 10);
    let large = [4u8; 1000];
    exchange(&mut a, &mut b, 1, &large);
    drop(b);
    let detail = assert_lost(&write_until_error(&mut a, 1, &large), 1);
    assert!(detail.contains("send"), "names the operation: {detail}");
    // Its slots are back at once; the sends still in flight to it complete later (failed),
    // and say nothing more.
    assert_eq!((a.free_sends.len(), a.peers[1].sends), (SLOTS, 0));
    let begin = Instant::now();
    while a.ep.in_flight() > SLOTS {
        a.poll_input(&mut Arrived::default())
            .expect("no second error for a lost peer");
        assert!(begin.elapsed() < DEADLINE, "{} in flight", a.ep.in_flight());
    }
}

#[test]
fn over_fabric_time_away_from_the_library_does_not_count_against_a_peer() {
    let Some(mut t) = transport(0) else { return };
    t.set_peer(1, vec![closed_name()], LOST_PID);
    let mut sink = Arrived::default();
    let payload = [5u8; 8];
    if t.try_write(1, &mut frame(&payload))
        .expect("refused, not failed")
    {
        eprintln!("skipped: the provider took a message to a closed endpoint");
        return;
    }
    t.poll_input(&mut sink).expect("a first look");
    assert!(!t.try_write(1, &mut frame(&payload)).expect("refused again"));
    // The rank computes, away from the library, for longer than the patience.
    std::thread::sleep(LOOK_GAP + PATIENCE);
    t.poll_input(&mut sink)
        .expect("the time away is not counted");
    // Looking on, it is lost (a hang would end at the deadline).
    assert_lost(&write_until_error(&mut t, 1, &payload), 1);
}

#[test]
fn over_fabric_a_peer_that_stops_answering_is_lost_and_its_slots_serve_the_others() {
    let Some(mut a) = transport(0) else { return };
    let mut b = transport(1).expect("a second transport");
    let mut c = transport(2).expect("a third transport");
    a.set_peer(1, names(&b), LOST_PID);
    a.set_peer(2, names(&c), 12);
    b.set_peer(0, names(&a), 10);
    c.set_peer(0, names(&a), 10);
    let large = [4u8; 1000];
    exchange(&mut a, &mut b, 1, &large);
    exchange(&mut a, &mut c, 2, &large);
    // b is open but no longer polled, as a stopped process: frames to it fill the slots,
    // then nothing completes.
    let detail = assert_lost(&write_until_error(&mut a, 1, &large), 1);
    assert!(
        detail.contains("fi_sendv") && detail.contains("without a completion"),
        "{detail}"
    );
    assert_eq!(a.free_sends.len(), SLOTS, "its slots are taken back");
    exchange(&mut a, &mut c, 2, &large);
    exchange(&mut c, &mut a, 0, &large);
    drop(b);
}

/// A transport on `rails` endpoints (all on loopback: one process has only that NIC, so its
/// rails share it, which is enough for the striping and failover logic).
fn transport_on_rails(me: u32, rails: usize) -> Option<FabricTransport> {
    let eps: Option<Vec<Endpoint>> = (0..rails).map(|_| endpoint()).collect();
    Some(FabricTransport::open(eps?, me, 1024, PATIENCE).expect("transport"))
}

/// `len` bytes of a pattern that differs at every offset a piece could start at.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
}

/// Rank 1 (`sender`) exposes `src` and announces it to rank 0 (`reader`) with an RTS_READ;
/// the reader reads it into a buffer of the same size, with the keys of the rails in
/// `bad_keys` (bits) spoiled, as a rail whose peer no longer knows them. Both poll until the
/// read is done (or fails: the error). The buffer read.
fn read_over_rails(
    reader: &mut FabricTransport,
    sender: &mut FabricTransport,
    src: &[u8],
    bad_keys: u32,
) -> Result<Vec<u8>, Error> {
    const SEND_ID: u64 = 77;
    const RECV_ID: u64 = 5;
    let (addr, key) = sender
        .expose((SEND_ID, 0), src.as_ptr(), src.len())
        .expect("the sender registers its buffer");
    let header = Frame::RtsRead {
        context: 1,
        tag: 7,
        len: src.len() as u64,
        send_id: SEND_ID,
        remote_addr: addr,
    }
    .to_bytes();
    let key = key.to_le_bytes();
    let mut rts = OutFrame {
        header,
        payload: key.as_ptr(),
        len: key.len(),
        sent: 0,
        complete: None,
        owned: None,
    };
    let (mut at_reader, mut at_sender) = (Arrived::default(), Arrived::default());
    let begin = Instant::now();
    let mut written = false;
    while at_reader.0.is_empty() {
        written = written || sender.try_write(0, &mut rts).expect("the RTS_READ goes");
        reader.poll_input(&mut at_reader).expect("poll the reader");
        sender.poll_input(&mut at_sender).expect("poll the sender");
        assert!(begin.elapsed() < DEADLINE, "the RTS_READ never came");
    }
    let spoil = |rail: usize, key: &mut u64| {
        if bad_keys & (1 << rail) != 0 {
            *key ^= 0x5a5a_0000_0000_5a5a;
        }
    };
    let mut key = u64::from_le_bytes(key);
    if let Some(offer) = reader.peers[1].offered.last_mut() {
        assert_eq!(offer.send_id, SEND_ID);
        spoil(0, &mut offer.rail0.key);
        for (i, remote) in offer.more.iter_mut().enumerate() {
            spoil(i + 1, &mut remote.key);
        }
    }
    spoil(0, &mut key);
    let mut dst = vec![0u8; src.len()];
    reader.start_read(FabricRead {
        id: RECV_ID,
        peer: 1,
        remote_addr: addr,
        key,
        buf: dst.as_mut_ptr(),
        len: dst.len(),
    })?;
    while at_reader.1.is_empty() {
        reader.poll_input(&mut at_reader)?;
        sender.poll_input(&mut at_sender).expect("poll the sender");
        assert!(begin.elapsed() < DEADLINE, "the read never completed");
    }
    assert_eq!(at_reader.1, [(1, RECV_ID)], "one read done, once");
    sender.release(SEND_ID);
    Ok(dst)
}

#[test]
fn over_two_fabric_rails_a_large_read_is_striped_over_both() {
    let Some(mut reader) = transport_on_rails(0, 2) else {
        return;
    };
    let mut sender = transport_on_rails(1, 2).expect("a second transport");
    reader.set_peer(1, names(&sender), 11);
    sender.set_peer(0, names(&reader), 10);
    let src = pattern(8 << 20);
    // A rail connects on its first read (the provider refuses pieces until then, and the
    // other rail takes them): on a loaded machine the first read may all go over rail 0.
    let mut reads = 0;
    while reads < 8 && reader.read_bytes.get(1).is_none_or(|&b| b == 0) {
        let dst = read_over_rails(&mut reader, &mut sender, &src, 0).expect("the read");
        assert!(dst == src, "the bytes read differ from the bytes sent");
        reads += 1;
    }
    let bytes = &reader.read_bytes;
    assert_eq!(bytes.iter().sum::<usize>(), reads * src.len(), "{bytes:?}");
    assert!(
        bytes.len() == 2 && bytes.iter().all(|&b| b > 0),
        "{bytes:?}"
    );
    assert!(sender.exposed.is_empty() && reader.reads.iter().all(Option::is_none));
    assert!(reader.peers[1].offered.is_empty());
}

#[test]
fn over_fabric_rails_a_peer_with_one_rail_is_read_over_one() {
    let Some(mut reader) = transport_on_rails(0, 2) else {
        return;
    };
    let mut sender = transport_on_rails(1, 1).expect("a second transport");
    reader.set_peer(1, names(&sender), 11);
    sender.set_peer(0, names(&reader), 10);
    let src = pattern(3 << 20);
    let dst = read_over_rails(&mut reader, &mut sender, &src, 0).expect("the read");
    assert!(dst == src, "the bytes read differ from the bytes sent");
    assert_eq!(reader.read_bytes, [src.len()]);
}

/// Two transports of two rails each, paired.
fn two_on_two_rails() -> Option<(FabricTransport, FabricTransport)> {
    let mut reader = transport_on_rails(0, 2)?;
    let mut sender = transport_on_rails(1, 2).expect("a second transport");
    reader.set_peer(1, names(&sender), LOST_PID);
    sender.set_peer(0, names(&reader), 10);
    Some((reader, sender))
}

#[test]
fn a_read_piece_that_fails_on_a_fabric_rail_is_read_again_on_another() {
    let Some((mut reader, mut sender)) = two_on_two_rails() else {
        return;
    };
    let src = pattern(8 << 20);
    // Rail 1's pieces fail (the provider answers the read under a key it does not know with
    // an error): they are read again on rail 0. (While rail 1 connects, rail 0 may take a
    // whole read: hence a few.)
    let mut reads = 0;
    while reads < 8 && reader.peers[1].down == 0 {
        let dst = read_over_rails(&mut reader, &mut sender, &src, 0b10).expect("the read goes on");
        assert!(dst == src, "the bytes read differ from the bytes sent");
        reads += 1;
    }
    assert_eq!(reader.peers[1].down, 0b10, "rail 1 is down for the sender");
    assert!(reader.peers[1].lost.is_none());
    let before = reader.read_bytes.clone();
    // The next read, with good keys, does not use rail 1 again.
    let dst = read_over_rails(&mut reader, &mut sender, &src, 0).expect("a second read");
    assert!(dst == src, "the bytes of the second read differ");
    assert_eq!(reader.read_bytes.get(1), before.get(1), "{before:?}");
    assert_eq!(reader.read_bytes[0], before[0] + src.len());
}

#[test]
fn a_read_whose_every_fabric_rail_fails_loses_its_peer() {
    let Some((mut reader, mut sender)) = two_on_two_rails() else {
        return;
    };
    let src = pattern(4 << 20);
    let e = read_over_rails(&mut reader, &mut sender, &src, 0b11).expect_err("lost");
    let detail = assert_lost(&e, 1);
    assert!(detail.contains("a fabric read"), "{detail}");
    assert_eq!(reader.peers[1].down, 0b11);
}

#[test]
fn a_fabric_rail_that_refuses_reads_for_the_patience_is_down_and_the_reads_go_on() {
    let Some(mut reader) = transport_on_rails(0, 2) else {
        return;
    };
    let mut sender = transport_on_rails(1, 2).expect("a second transport");
    // The reader's rail 1 towards the sender leads to an endpoint that is closed: the
    // provider refuses reads there (EAGAIN) for ever; rail 0 works.
    let mut to_sender = names(&sender);
    to_sender[1] = closed_name();
    reader.set_peer(1, to_sender, 11);
    sender.set_peer(0, names(&reader), 10);
    let src = pattern(2 << 20);
    let begin = Instant::now();
    while reader.peers[1].down == 0 {
        let dst = read_over_rails(&mut reader, &mut sender, &src, 0).expect("the reads go on");
        assert!(dst == src, "the bytes read differ from the bytes sent");
        assert!(begin.elapsed() < DEADLINE, "rail 1 never went down");
    }
    assert_eq!(reader.peers[1].down, 0b10);
    assert_eq!(reader.read_bytes.get(1).copied().unwrap_or(0), 0);
}

#[test]
fn an_rts_read_message_with_malformed_rails_is_refused() {
    let rail0 = Remote { addr: 1, key: 2 };
    assert!(reads::offered(3, rail0, &[]).expect("none").is_none());
    assert!(reads::offered(3, rail0, &[0; 16]).expect("one").is_some());
    assert!(reads::offered(3, rail0, &[0; 15]).is_err());
    assert!(reads::offered(3, rail0, &[0; 16 * MAX_FABRIC_RAILS]).is_err());
}
