//! Failed peers, revocation and agreements, on two engines joined in memory (`pair.rs`).

use super::pair::Pair;
use super::*;
use std::rc::Rc;

fn tolerant() -> Pair {
    let mut pair = Pair::new(1024, 4096);
    pair.a.tolerate_failures().expect("a tolerates failures");
    pair.b.tolerate_failures().expect("b tolerates failures");
    pair
}

/// Delivers everything and lets both engines act on their fault notices, until nothing moves.
fn settle(pair: &mut Pair) {
    loop {
        pair.drive().expect("the wires carry every frame");
        let a = pair.a.take_notices().expect("a's notices");
        let b = pair.b.take_notices().expect("b's notices");
        if !a && !b && pair.write() == 0 {
            return;
        }
    }
}

fn fault(e: &mut Engine, id: ReqId) -> Fault {
    e.take(id).expect("the request is done").fault
}

#[test]
fn what_waits_on_a_failed_peer_fails_and_what_it_sent_whole_is_still_received() {
    let mut pair = tolerant();
    let mut buf = vec![0u8; 64];
    let waiting = pair
        .b
        .irecv(0, Some(0), Some(5), buf.as_mut_ptr(), 64)
        .unwrap();
    let sent = [7u8; 16];
    pair.a
        .isend(0, 1, 6, sent.as_ptr(), 16, SendMode::Standard)
        .unwrap();
    pair.drive().unwrap();
    let big = vec![1u8; 100_000];
    let rendezvous = (pair.b)
        .isend(0, 0, 9, big.as_ptr(), big.len(), SendMode::Standard)
        .unwrap();
    pair.write();
    pair.b.peer_failed(0);
    assert_eq!(fault(&mut pair.b, waiting), Fault::ProcFailed);
    assert_eq!(fault(&mut pair.b, rendezvous), Fault::ProcFailed);
    assert_eq!(pair.b.failed_peers(), &[0]);
    // The message that arrived before the death is still there.
    let early = pair
        .b
        .irecv(0, Some(0), Some(6), buf.as_mut_ptr(), 64)
        .unwrap();
    let c = pair.b.take(early).expect("received at once");
    assert_eq!((c.fault, &buf[..c.len]), (Fault::None, &sent[..]));
    // Later operations with it end at once.
    let later = pair
        .b
        .irecv(0, Some(0), Some(7), buf.as_mut_ptr(), 64)
        .unwrap();
    assert_eq!(fault(&mut pair.b, later), Fault::ProcFailed);
    let to_dead = (pair.b)
        .isend(0, 0, 1, sent.as_ptr(), 16, SendMode::Standard)
        .unwrap();
    assert_eq!(fault(&mut pair.b, to_dead), Fault::ProcFailed);
    // A receive from any source is not ended by the engine (its communicator decides).
    let any = pair.b.irecv(0, None, None, buf.as_mut_ptr(), 64).unwrap();
    assert!(pair.b.proto.posted_from_any(any));
}

#[test]
fn a_revocation_reaches_the_peer_and_ends_its_receives_on_both_contexts() {
    let mut pair = tolerant();
    let mut buf = [0u8; 8];
    let p2p = pair
        .b
        .irecv(2, Some(0), Some(1), buf.as_mut_ptr(), 8)
        .unwrap();
    let coll = pair
        .b
        .irecv(3, Some(0), Some(1), buf.as_mut_ptr(), 8)
        .unwrap();
    let other = pair
        .b
        .irecv(4, Some(0), Some(1), buf.as_mut_ptr(), 8)
        .unwrap();
    pair.a.revoke(2).unwrap();
    settle(&mut pair);
    assert!(pair.b.is_revoked(2) && pair.b.is_revoked(3) && !pair.b.is_revoked(4));
    assert_eq!(fault(&mut pair.b, p2p), Fault::Revoked);
    assert_eq!(fault(&mut pair.b, coll), Fault::Revoked);
    assert!(
        pair.b.take(other).is_none(),
        "another communicator's receive goes on"
    );
    let late = (pair.b)
        .isend(2, 0, 1, buf.as_ptr(), 8, SendMode::Standard)
        .unwrap();
    assert_eq!(fault(&mut pair.b, late), Fault::Revoked);
    // A job that is not fault-tolerant refuses, naming what it needs.
    let mut plain = Pair::new(1024, 4096);
    let refused = plain.a.revoke(2).unwrap_err();
    assert!(
        refused.to_string().contains("--fault-tolerant"),
        "{refused}"
    );
}

#[test]
fn two_members_agree_on_the_and_and_a_survivor_agrees_alone() {
    let mut pair = tolerant();
    let members: Rc<[u32]> = Rc::from([0u32, 1]);
    let ra = (pair.a)
        .start_agreement((4, members.clone()), 0, 0, 0b1110)
        .unwrap();
    settle(&mut pair);
    assert!(
        pair.a.agreement_decision(4, 0).is_none(),
        "one member has not entered"
    );
    let rb = (pair.b)
        .start_agreement((4, members.clone()), 1, 0, 0b0111)
        .unwrap();
    settle(&mut pair);
    for (e, id) in [(&mut pair.a, ra), (&mut pair.b, rb)] {
        assert_eq!(fault(e, id), Fault::None);
        let decided = e.agreement_decision(4, 0).expect("decided");
        assert_eq!((decided.flag, decided.failed.len()), (0b0110, 0));
    }
    // Member 1 dies: the next agreement is member 0's alone, and holds 1 failed.
    pair.a.peer_failed(1);
    let alone = (pair.a).start_agreement((4, members), 0, 1, 5).unwrap();
    settle(&mut pair);
    assert_eq!(fault(&mut pair.a, alone), Fault::None);
    let decided = pair.a.agreement_decision(4, 1).expect("decided alone");
    assert_eq!(decided.flag, 5);
    assert_eq!(decided.failed.iter().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn stranger_bytes_on_the_fault_context_are_dropped_or_named() {
    let mut pair = tolerant();
    // An agreement message that does not decode is dropped; a revocation of the wrong
    // length is a protocol error naming its sender.
    (pair.a)
        .send_owned(FAULT_CONTEXT, 1, super::agreement::AGREE_TAG, vec![1, 2])
        .unwrap();
    pair.drive().unwrap();
    assert!(pair.b.take_notices().is_ok());
    (pair.a)
        .send_owned(FAULT_CONTEXT, 1, 1, vec![1, 2, 3])
        .unwrap();
    pair.drive().unwrap();
    let e = pair.b.take_notices().unwrap_err();
    assert!(e.to_string().contains("rank 0"), "{e}");
}
