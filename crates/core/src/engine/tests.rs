//! Unit tests of the engine on hand-fed frames (see `pair.rs` for two engines joined).

use super::*;

/// An engine for rank 0 of `n` whose peers are reached over TCP but have no sockets: enough
/// to drive the protocol half by hand.
fn engine(n: usize) -> Engine {
    engine_with_rails(n, 1)
}

fn engine_with_rails(n: usize, rails: usize) -> Engine {
    let mut routes = vec![Route::Tcp; n];
    routes[0] = Route::Loopback;
    Engine::new(EngineSetup {
        me: 0,
        routes,
        pids: vec![1; n],
        shm: None,
        tcp: None,
        cma: false,
        cma_share_min: u64::MAX,
        shm_eager_limit: 1 << 16,
        tcp_eager_limit: 1 << 16,
        tcp_chunk: 1 << 18,
        spin: 1,
        spin_yield: false,
        rails,
        rail_policy: crate::config::RailPolicy::Weighted,
        rail_stripe: 1 << 19,
    })
}

/// Feeds one whole frame from `peer` to the protocol.
fn deliver(e: &mut Engine, peer: u32, frame: Frame, payload: &[u8]) -> Result<(), Error> {
    let mut incoming = e.proto.begin_frame(peer, &frame)?;
    incoming.store(0, payload);
    e.proto.end_frame(peer, &frame, incoming)
}

/// The control frames queued for `peer`.
fn queued(e: &Engine, peer: usize) -> Vec<Frame> {
    e.proto.peers[peer]
        .outq
        .iter()
        .filter_map(|o| match o {
            Out::Frame(f) => Frame::decode(&f.header, u64::MAX).ok(),
            Out::Stream(_) | Out::Expose { .. } => None,
        })
        .collect()
}

#[test]
fn over_rails_a_receive_takes_chunks_in_any_order_once_and_acknowledges() {
    let mut e = engine_with_rails(2, 2);
    let rts = Frame::Rts {
        context: 0,
        tag: 3,
        len: 12,
        send_id: 77,
        source_addr: 0,
    };
    deliver(&mut e, 1, rts, &[]).unwrap();
    let mut buf = [0u8; 12];
    let id = e.irecv(0, Some(1), Some(3), buf.as_mut_ptr(), 12).unwrap();
    let Some(&Frame::Cts { recv_id, .. }) = queued(&e, 1).last() else {
        panic!("no CTS: {:?}", queued(&e, 1))
    };
    let data = |offset: u64, len: u64| Frame::Data {
        recv_id,
        offset,
        len,
    };
    deliver(&mut e, 1, data(8, 4), b"ijkl").unwrap();
    deliver(&mut e, 1, data(0, 4), b"abcd").unwrap();
    // A chunk sent again after a rail failed.
    deliver(&mut e, 1, data(8, 4), b"ijkl").unwrap();
    assert!(!e.proto.is_done(id));
    deliver(&mut e, 1, data(4, 4), b"efgh").unwrap();
    assert!(e.proto.is_done(id));
    assert_eq!(&buf, b"abcdefghijkl");
    assert_eq!(queued(&e, 1).last(), Some(&Frame::Fin { send_id: 77 }));
    // A late copy for the finished receive is read and dropped, not an error.
    deliver(&mut e, 1, data(0, 4), b"abcd").unwrap();
    assert_eq!(&buf, b"abcdefghijkl");
}

#[test]
fn peers_added_later_get_both_halves_and_rails_if_on_tcp() {
    let mut e = engine_with_rails(2, 2);
    assert!(e.links[0].lanes.is_none(), "no rails to ourselves");
    assert!(e.links[1].lanes.is_some());
    e.grow(4);
    assert_eq!((e.proto.peer_count(), e.links.len()), (4, 4));
    assert!(e.links[3].lanes.is_some());
    // A process of another world that connects before we are told of it.
    deliver(&mut e, 5, Frame::Bye, &[]).unwrap();
    assert_eq!(e.proto.peer_count(), 6);
    e.after_tcp_input();
    assert_eq!(e.links.len(), 6);
    assert!(e.links[5].lanes.is_some() && e.proto.departed(5));
    assert_eq!((e.proto.pid(5), e.proto.pid(6)), (Some(0), None));
    let one_rail = engine(3);
    assert!(one_rail.links.iter().all(|l| l.lanes.is_none()));
}

#[test]
fn without_rails_unknown_data_is_a_protocol_error_and_no_fin_is_sent() {
    let mut e = engine(2);
    let stray = Frame::Data {
        recv_id: 5,
        offset: 0,
        len: 1,
    };
    assert!(deliver(&mut e, 1, stray, b"x").is_err());
    assert!(deliver(&mut e, 1, Frame::RailDown { rail: 1, seq: 0 }, &[]).is_err());
}

#[test]
fn a_rail_down_from_the_peer_is_recorded_and_checked() {
    let mut e = engine_with_rails(2, 3);
    deliver(&mut e, 1, Frame::RailDown { rail: 2, seq: 0 }, &[]).unwrap();
    deliver(&mut e, 1, Frame::RailDown { rail: 0, seq: 0 }, &[]).unwrap();
    assert_eq!(e.proto.rail_down, [(1, 2), (1, 0)]);
    assert_eq!(e.proto.take_drains(1), [(2, 0), (0, 0)]);
    assert!(deliver(&mut e, 1, Frame::RailDown { rail: 3, seq: 0 }, &[]).is_err());
}

#[test]
fn ordered_frames_sent_again_after_a_rail_failed_are_taken_once() {
    let mut e = engine_with_rails(2, 2);
    let eager = |tag: i32| Frame::Eager {
        context: 0,
        tag,
        len: 1,
    };
    // Frames 0, 1, 2 arrive on the old ordered rail; the sender, which saw only frame 0
    // acknowledged, sends 1 and 2 again (and then 3) behind RAIL_DOWN(seq 1).
    for tag in 0..3 {
        deliver(&mut e, 1, eager(tag), &[tag as u8]).unwrap();
    }
    deliver(&mut e, 1, Frame::RailDown { rail: 0, seq: 1 }, &[]).unwrap();
    for (rail, seq) in e.proto.take_drains(1) {
        assert_eq!((rail, seq), (0, 1));
        e.proto.drained(1, seq);
    }
    for tag in 1..4 {
        deliver(&mut e, 1, eager(tag), &[tag as u8]).unwrap();
    }
    for tag in 0..4 {
        let mut buf = [9u8];
        let id = e.irecv(0, Some(1), Some(tag), buf.as_mut_ptr(), 1).unwrap();
        assert!(e.proto.is_done(id), "message {tag}");
        assert_eq!(buf, [tag as u8]);
    }
    assert_eq!(
        e.iprobe(&mut NoHook, 0, None, None).unwrap(),
        None,
        "no message twice"
    );
    // Data chunks are not ordered frames: a RAIL_DOWN of a data rail drops nothing.
    deliver(
        &mut e,
        1,
        Frame::RailDown {
            rail: 1,
            seq: u64::MAX,
        },
        &[],
    )
    .unwrap();
    for (_, seq) in e.proto.take_drains(1) {
        e.proto.drained(1, seq);
    }
    deliver(&mut e, 1, eager(7), &[7]).unwrap();
    assert!(e
        .iprobe(&mut NoHook, 0, Some(1), Some(7))
        .unwrap()
        .is_some());
}

#[test]
fn through_a_dead_relay_frames_sent_again_from_far_back_are_taken_once_and_lost_ones_arrive() {
    // Through a relay the sender keeps ordered frames well past TCP's acknowledgement (the
    // relay's), so it sends again from far back: here from frame 0, after frames 0-4 went out
    // and only 0-2 passed the relay before it died (3 and 4 died with it).
    let mut e = engine_with_rails(2, 2);
    let eager = |tag: i32| Frame::Eager {
        context: 0,
        tag,
        len: 1,
    };
    for tag in 0..3 {
        deliver(&mut e, 1, eager(tag), &[tag as u8]).unwrap();
    }
    deliver(&mut e, 1, Frame::RailDown { rail: 0, seq: 0 }, &[]).unwrap();
    for (_, seq) in e.proto.take_drains(1) {
        e.proto.drained(1, seq);
    }
    for tag in 0..6 {
        deliver(&mut e, 1, eager(tag), &[tag as u8]).unwrap();
    }
    for tag in 0..6 {
        let mut buf = [9u8];
        let id = e.irecv(0, Some(1), Some(tag), buf.as_mut_ptr(), 1).unwrap();
        assert!(e.proto.is_done(id), "message {tag}");
        assert_eq!(buf, [tag as u8]);
    }
    assert_eq!(
        e.iprobe(&mut NoHook, 0, None, None).unwrap(),
        None,
        "no message twice"
    );
}

#[test]
fn over_rails_a_pushed_send_completes_on_fin_not_on_its_last_chunk() {
    let mut e = engine_with_rails(2, 2);
    let payload = vec![7u8; 1 << 20];
    let id = e
        .isend(0, 1, 9, payload.as_ptr(), payload.len(), SendMode::Standard)
        .unwrap();
    let cts = Frame::Cts {
        send_id: id,
        recv_id: 5,
        accept_len: 1 << 20,
    };
    deliver(&mut e, 1, cts, &[]).unwrap();
    while let Some((frame, _)) = e.proto.next_chunk(id, 1 << 18) {
        e.proto.frame_written(&frame);
    }
    assert!(!e.proto.is_done(id), "done before the receiver confirmed");
    let again = e.proto.resend_chunk(id, 1 << 18, 1 << 18).unwrap();
    assert_eq!(again.len, 1 << 18);
    deliver(&mut e, 1, Frame::Fin { send_id: id }, &[]).unwrap();
    assert!(e.proto.is_done(id));
    assert!(e.proto.resend_chunk(id, 0, 1).is_none());
}

/// An engine whose peer 1 shares this host and whose pids are this process, so CMA copies
/// within the test process stand in for copies between two.
fn cma_engine() -> Engine {
    let mut e = engine(2);
    e.proto.peers[1].route = Route::Shm;
    for peer in &mut e.proto.peers {
        peer.pid = std::process::id();
    }
    e.proto.cma = true;
    e.proto.cma_share_min = 0;
    e
}

fn pattern_bytes(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(7) >> 3) as u8)
        .collect()
}

#[test]
fn a_receiver_pulls_a_peer_whole_once_then_shares_the_copy() {
    let mut e = cma_engine();
    let message = pattern_bytes(100_000);
    let len = message.len() as u64;
    let rts = |send_id| Frame::Rts {
        context: 0,
        tag: 3,
        len,
        send_id,
        source_addr: message.as_ptr() as u64,
    };
    let mut first = vec![0u8; message.len()];
    let id = e
        .irecv(0, Some(1), Some(3), first.as_mut_ptr(), first.len())
        .unwrap();
    deliver(&mut e, 1, rts(76), &[]).unwrap();
    if !e.proto.cma {
        return; // this kernel refuses CMA: the ring takes over (CTS), nothing to share
    }
    assert!(e.proto.is_done(id), "the first message is pulled whole");
    assert_eq!(first, message);
    assert_eq!(queued(&e, 1).last(), Some(&Frame::Fin { send_id: 76 }));

    let mut buf = vec![0u8; message.len()];
    let id = e
        .irecv(0, Some(1), Some(3), buf.as_mut_ptr(), buf.len())
        .unwrap();
    deliver(&mut e, 1, rts(77), &[]).unwrap();
    let Some(&Frame::Share {
        send_id: 77,
        recv_id,
        dest_addr,
    }) = queued(&e, 1).last()
    else {
        panic!("no SHARE: {:?}", queued(&e, 1))
    };
    assert_eq!(dest_addr, buf.as_ptr() as u64);
    e.proto.run_shared_pulls().unwrap();
    let split = share_split(len) as usize;
    assert_eq!(buf[..split], message[..split]);
    assert!(buf[split..].iter().all(|&b| b == 0), "the sender's part");
    assert!(!e.proto.is_done(id));
    // The sender's half, as its process_vm_writev would leave it.
    buf[split..].copy_from_slice(&message[split..]);
    let written = Frame::Written {
        recv_id,
        offset: split as u64,
        len: len - split as u64,
    };
    deliver(&mut e, 1, written, &[]).unwrap();
    assert!(e.proto.is_done(id));
    assert_eq!(buf, message);
    assert_eq!(queued(&e, 1).last(), Some(&Frame::Fin { send_id: 77 }));
    assert!(
        deliver(&mut e, 1, written, &[]).is_err(),
        "WRITTEN for a finished receive"
    );
}

#[test]
fn a_shared_send_writes_the_back_and_waits_for_fin() {
    let mut e = cma_engine();
    let payload = pattern_bytes(100_000);
    let len = payload.len() as u64;
    let id = e
        .isend(0, 1, 9, payload.as_ptr(), payload.len(), SendMode::Standard)
        .unwrap();
    let mut dest = vec![0u8; payload.len()];
    let share = Frame::Share {
        send_id: id,
        recv_id: 5,
        dest_addr: dest.as_mut_ptr() as u64,
    };
    deliver(&mut e, 1, share, &[]).unwrap();
    let split = share_split(len) as usize;
    if e.proto.cma {
        assert_eq!(dest[split..], payload[split..]);
        assert!(dest[..split].iter().all(|&b| b == 0), "the receiver's part");
        assert_eq!(
            queued(&e, 1).last(),
            Some(&Frame::Written {
                recv_id: 5,
                offset: split as u64,
                len: len - split as u64
            })
        );
    }
    assert!(!e.proto.is_done(id), "the receiver still reads the front");
    assert!(deliver(&mut e, 1, share, &[]).is_err(), "a second SHARE");
    deliver(&mut e, 1, Frame::Fin { send_id: id }, &[]).unwrap();
    assert!(e.proto.is_done(id));
}

#[test]
fn a_shared_send_that_may_not_write_pushes_its_part() {
    let mut e = engine(2);
    let payload = pattern_bytes(100_000);
    let len = payload.len() as u64;
    let id = e
        .isend(0, 1, 9, payload.as_ptr(), payload.len(), SendMode::Standard)
        .unwrap();
    let share = Frame::Share {
        send_id: id,
        recv_id: 5,
        dest_addr: 0x1000,
    };
    deliver(&mut e, 1, share, &[]).unwrap();
    let mut pushed = Vec::new();
    while let Some((frame, offset)) = e.proto.next_chunk(id, 16 << 10) {
        pushed.push((offset, frame.len as u64));
        e.proto.frame_written(&frame);
    }
    let split = share_split(len);
    assert_eq!(pushed.first().map(|c| c.0), Some(split));
    assert_eq!(pushed.iter().map(|c| c.1).sum::<u64>(), len - split);
    assert!(!e.proto.is_done(id));
    deliver(&mut e, 1, Frame::Fin { send_id: id }, &[]).unwrap();
    assert!(e.proto.is_done(id));
}

#[test]
fn receive_posted_while_an_eager_payload_arrives_gets_the_message() {
    let mut e = engine(2);
    let frame = Frame::Eager {
        context: 0,
        tag: 5,
        len: 4,
    };
    // The header arrives before any receive is posted: the message will be kept.
    let mut incoming = e.proto.begin_frame(1, &frame).unwrap();
    incoming.store(0, b"ab");
    // The receive is posted while the payload is still arriving.
    let mut buf = [0u8; 4];
    let id = e
        .irecv(0, Some(1), Some(5), buf.as_mut_ptr(), buf.len())
        .unwrap();
    assert!(!e.proto.is_done(id));
    incoming.store(2, b"cd");
    e.proto.end_frame(1, &frame, incoming).unwrap();
    assert!(
        e.proto.is_done(id),
        "the posted receive must get the message"
    );
    assert_eq!(&buf, b"abcd");
    assert_eq!(
        e.iprobe(&mut NoHook, 0, None, None).unwrap(),
        None,
        "nothing left over"
    );
}

#[test]
fn unexpected_eager_waits_for_its_receive_in_order() {
    let mut e = engine(2);
    for (i, data) in [b"one!", b"two!"].iter().enumerate() {
        let frame = Frame::Eager {
            context: 0,
            tag: 1,
            len: 4,
        };
        let mut incoming = e.proto.begin_frame(1, &frame).unwrap();
        incoming.store(0, &data[..]);
        e.proto.end_frame(1, &frame, incoming).unwrap();
        assert_eq!(
            e.iprobe(&mut NoHook, 0, Some(1), None)
                .unwrap()
                .map(|(_, len)| len),
            Some(4),
            "message {i}"
        );
    }
    for expected in [b"one!", b"two!"] {
        let mut buf = [0u8; 4];
        let id = e.irecv(0, None, Some(1), buf.as_mut_ptr(), 4).unwrap();
        assert!(e.proto.is_done(id));
        assert_eq!(&buf, expected);
    }
}

/// An active handler on `context` that records (source, tag, payload) and answers each
/// message with its payload reversed.
type Seen = std::rc::Rc<std::cell::RefCell<Vec<(u32, i32, Vec<u8>)>>>;

fn echo_handler(seen: Seen) -> ActiveFn {
    Box::new(move |source, tag, data, replies| {
        seen.borrow_mut().push((source, tag, data.to_vec()));
        replies.push(ActiveReply {
            dest: source,
            tag: tag + 1,
            data: data.iter().rev().copied().collect(),
        });
    })
}

/// The eager frames queued for `peer` with their payloads.
fn queued_eager(e: &Engine, peer: usize) -> Vec<(Frame, Vec<u8>)> {
    e.proto.peers[peer]
        .outq
        .iter()
        .filter_map(|o| match o {
            Out::Frame(f) => {
                let frame = Frame::decode(&f.header, u64::MAX).ok()?;
                // SAFETY: a queued frame's payload is valid for `len` bytes.
                let data = unsafe { std::slice::from_raw_parts(f.payload, f.len) }.to_vec();
                matches!(frame, Frame::Eager { .. }).then_some((frame, data))
            }
            Out::Stream(_) | Out::Expose { .. } => None,
        })
        .collect()
}

#[test]
fn a_message_on_an_active_context_goes_to_its_handler_and_the_reply_is_sent() {
    let mut e = engine(3);
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    e.set_active(6, echo_handler(seen.clone()));
    let frame = Frame::Eager {
        context: 6,
        tag: 9,
        len: 3,
    };
    // Split over two stores, as a TCP read may deliver it.
    let mut incoming = e.proto.begin_frame(2, &frame).unwrap();
    incoming.store(0, b"ab");
    incoming.store(2, b"c");
    e.proto.end_frame(2, &frame, incoming).unwrap();
    assert_eq!(*seen.borrow(), vec![(2, 9, b"abc".to_vec())]);
    assert_eq!(
        e.iprobe(&mut NoHook, 6, None, None).unwrap(),
        None,
        "not queued for a receive"
    );
    e.progress(&mut NoHook).unwrap();
    assert_eq!(
        queued_eager(&e, 2),
        vec![(
            Frame::Eager {
                context: 6,
                tag: 10,
                len: 3
            },
            b"cba".to_vec()
        )]
    );
}

#[test]
fn other_contexts_and_a_cleared_handler_match_receives_as_before() {
    let mut e = engine(2);
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    e.set_active(6, echo_handler(seen.clone()));
    deliver(
        &mut e,
        1,
        Frame::Eager {
            context: 0,
            tag: 1,
            len: 2,
        },
        b"hi",
    )
    .unwrap();
    assert_eq!(
        e.iprobe(&mut NoHook, 0, Some(1), Some(1))
            .unwrap()
            .map(|(_, l)| l),
        Some(2)
    );
    // A receive posted on the active context does not take its messages.
    let mut buf = [0u8; 2];
    let id = e.irecv(6, None, None, buf.as_mut_ptr(), 2).unwrap();
    deliver(
        &mut e,
        1,
        Frame::Eager {
            context: 6,
            tag: 1,
            len: 2,
        },
        b"yo",
    )
    .unwrap();
    assert!(!e.proto.is_done(id));
    assert_eq!(seen.borrow().len(), 1);
    assert!(e.clear_active(6).is_some());
    assert!(e.clear_active(6).is_none());
    deliver(
        &mut e,
        1,
        Frame::Eager {
            context: 6,
            tag: 1,
            len: 2,
        },
        b"ok",
    )
    .unwrap();
    assert!(e.proto.is_done(id), "without a handler the receive gets it");
    assert_eq!(&buf, b"ok");
    assert_eq!(seen.borrow().len(), 1);
}

#[test]
fn rendezvous_on_an_active_context_is_a_protocol_error() {
    let mut e = engine(2);
    e.set_active(6, Box::new(|_, _, _, _| {}));
    let rts = Frame::Rts {
        context: 6,
        tag: 0,
        len: 1 << 20,
        send_id: 1,
        source_addr: 0,
    };
    assert!(matches!(
        deliver(&mut e, 1, rts, &[]),
        Err(Error::Protocol { rank: 1, .. })
    ));
}

#[test]
fn owned_messages_respect_the_limit_and_loop_back_to_our_own_handler() {
    let mut e = engine(2);
    let limit = e.active_limit(1);
    assert!(limit >= 1);
    assert!(matches!(
        e.send_owned(6, 1, 0, vec![0; limit + 1]),
        Err(Error::BufferTooSmall { .. })
    ));
    e.send_owned(6, 1, 0, vec![7; limit]).unwrap();
    assert!(matches!(
        e.send_owned(6, 2, 0, Vec::new()),
        Err(Error::RankOutOfRange { rank: 2, size: 2 })
    ));
    assert_eq!(queued_eager(&e, 1)[0].1.len(), limit);
    // To ourselves: the handler runs in progress, and its reply to us runs it again.
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    e.set_active(6, echo_handler(seen.clone()));
    e.send_owned(6, 0, 1, b"xy".to_vec()).unwrap();
    e.progress(&mut NoHook).unwrap();
    e.progress(&mut NoHook).unwrap();
    let seen = seen.borrow();
    assert_eq!(seen[0], (0, 1, b"xy".to_vec()));
    assert_eq!(seen[1], (0, 2, b"yx".to_vec()));
}

/// Two engines, ranks 0 and 1 of one process, joined by real shared-memory rings of
/// `ring` bytes (the segment files are unlinked at once).
fn shm_pair(ring: usize) -> (Engine, Engine) {
    let mut b = [0u8; 7];
    getrandom::getrandom(&mut b).unwrap();
    let job =
        0xE000_0000_0000_0000 | u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], 0]);
    let c0 = ShmTransport::create(job, 0, 2, ring).unwrap();
    let c1 = ShmTransport::create(job, 1, 2, ring).unwrap();
    let t0 = ShmTransport::attach(c0, job, 0, &[0, 1], 2, ring).unwrap();
    let t1 = ShmTransport::attach(c1, job, 1, &[0, 1], 2, ring).unwrap();
    t0.unlink_own();
    t1.unlink_own();
    let make = |me: u32, t: ShmTransport| {
        let mut e = engine(2);
        e.proto.me = me;
        for (rank, peer) in e.proto.peers.iter_mut().enumerate() {
            peer.route = match rank == me as usize {
                true => Route::Loopback,
                false => Route::Shm,
            };
        }
        e.shm_eager_limit = t.max_payload();
        e.shm_chunk = t.max_payload() / 2;
        e.net.shm = Some(t);
        e
    };
    (make(0, t0), make(1, t1))
}

fn send_eager(e: &mut Engine, dest: u32, tag: i32, data: &[u8]) {
    let id = e
        .isend(0, dest, tag, data.as_ptr(), data.len(), SendMode::Eager)
        .unwrap();
    e.wait(&mut NoHook, id).unwrap();
}

#[test]
fn an_in_place_receive_reads_the_ring_and_holds_the_peer_until_released() {
    let (mut a, mut b) = shm_pair(4096);
    let mut buf = [0u8; 64];
    let id = b
        .irecv_in_place(0, 0, Some(5), buf.as_mut_ptr(), buf.len())
        .unwrap();
    send_eager(&mut a, 1, 5, b"in the ring");
    send_eager(&mut a, 1, 6, b"behind it");
    b.wait_until(&mut NoHook, |p| p.is_done(id)).unwrap();
    let (ptr, len) = b.in_place(id).expect("left in the ring");
    // SAFETY: valid until the release below.
    assert_eq!(
        unsafe { std::slice::from_raw_parts(ptr, len) },
        b"in the ring"
    );
    assert_eq!(buf, [0u8; 64], "not copied");
    assert_eq!(b.take(id).map(|c| c.len), Some(11));
    assert_eq!(
        b.iprobe(&mut NoHook, 0, Some(0), Some(6)).unwrap(),
        None,
        "held behind"
    );
    b.release_in_place(id);
    assert!(b.in_place(id).is_none());
    b.progress(&mut NoHook).unwrap();
    assert!(
        b.iprobe(&mut NoHook, 0, Some(0), Some(6))
            .unwrap()
            .is_some(),
        "flows again"
    );
}

#[test]
fn an_in_place_receive_copies_what_wraps_or_does_not_fit() {
    let (mut a, mut b) = shm_pair(4096);
    // Records of 1000 + header bytes: the fourth starts near the end of the ring and wraps.
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let mut copied = 0;
    for round in 0..6 {
        let mut buf = vec![0u8; 1000];
        let id = b
            .irecv_in_place(0, 0, Some(1), buf.as_mut_ptr(), buf.len())
            .unwrap();
        send_eager(&mut a, 1, 1, &data);
        b.wait_until(&mut NoHook, |p| p.is_done(id)).unwrap();
        match b.in_place(id) {
            // SAFETY: valid until the release below.
            Some((ptr, len)) => {
                assert_eq!(unsafe { std::slice::from_raw_parts(ptr, len) }, &data[..])
            }
            None => {
                assert_eq!(buf, data, "round {round}: copied instead");
                copied += 1;
            }
        }
        b.take(id);
        b.release_in_place(id);
    }
    assert!(copied >= 1, "one of six 1 KiB records wraps a 4 KiB ring");
    // Longer than the buffer: truncated into it as any receive.
    let mut small = [0u8; 10];
    let id = b
        .irecv_in_place(0, 0, Some(2), small.as_mut_ptr(), small.len())
        .unwrap();
    send_eager(&mut a, 1, 2, &data);
    b.wait_until(&mut NoHook, |p| p.is_done(id)).unwrap();
    assert!(b.in_place(id).is_none());
    assert_eq!(small[..], data[..10]);
    let c = b.take(id).unwrap();
    assert_eq!((c.len, c.message_len), (10, 1000));
    b.release_in_place(id);
    assert!(b.in_place.is_empty() && b.links.iter().all(|l| l.held.is_none()));
}

/// Receives the next message from rank 0 (any tag) on `e`: (tag, bytes).
fn recv_any(e: &mut Engine) -> (i32, Vec<u8>) {
    let mut buf = vec![0u8; 4096];
    let id = e
        .irecv(0, Some(0), None, buf.as_mut_ptr(), buf.len())
        .unwrap();
    let c = e.wait(&mut NoHook, id).unwrap();
    buf.truncate(c.len);
    (c.tag, buf)
}

/// `b.take_arrived` from rank 0 on context 0 with `tag` into 8 bytes: (len, message_len,
/// bytes) if it was there.
fn arrived(b: &mut Engine, tag: i32) -> Option<(usize, usize, [u8; 8])> {
    let mut buf = [0u8; 8];
    match b.take_arrived(0, 0, tag, buf.as_mut_ptr(), 8).unwrap()? {
        Received::Now(c) => Some((c.len, c.message_len, buf)),
        Received::Later(_) => panic!("an eager message became a request"),
    }
}

#[test]
fn an_arrived_message_comes_from_the_unexpected_queue_or_the_ring_head_in_order() {
    let (mut a, mut b) = shm_pair(4096);
    assert_eq!(arrived(&mut b, 5), None, "nothing sent");
    assert!(a.send_eager_now(0, 1, 4, b"first...".as_ptr(), 8));
    assert!(a.send_eager_now(0, 1, 5, b"second..".as_ptr(), 8));
    assert_eq!(
        arrived(&mut b, 5),
        None,
        "behind another message on the ring"
    );
    // A pass moves both to the unexpected queue (nothing is posted): taken from there.
    b.progress(&mut NoHook).unwrap();
    assert_eq!(arrived(&mut b, 5), Some((8, 8, *b"second..")));
    // Next on the ring: straight from it, cut to the buffer, and the ring moves on.
    assert!(a.send_eager_now(0, 1, 6, b"third...more".as_ptr(), 12));
    assert!(a.send_eager_now(0, 1, 7, b"fourth..".as_ptr(), 8));
    assert_eq!(arrived(&mut b, 6), Some((8, 12, *b"third...")));
    assert_eq!(arrived(&mut b, 7), Some((8, 8, *b"fourth..")));
    assert_eq!(b.proto.matcher.unexpected_len(), 1, "tag 4 still waits");
}

#[test]
fn a_reserved_message_keeps_its_place_before_sends_started_while_it_was_open() {
    let (mut a, mut b) = shm_pair(4096);
    let (at, got) = a.reserve_eager(1, 100, 8).expect("room");
    assert_eq!(got, 100);
    assert!(a.reserve_eager(1, 8, 8).is_none(), "one at a time per peer");
    let later = b"sent while reserved";
    let id = a
        .isend(0, 1, 2, later.as_ptr(), later.len(), SendMode::Eager)
        .unwrap();
    assert!(!a.send_eager_now(0, 1, 3, later.as_ptr(), later.len()));
    assert!(!a.proto.is_done(id), "queued behind the reservation");
    b.progress(&mut NoHook).unwrap();
    assert_eq!(
        b.iprobe(&mut NoHook, 0, Some(0), None).unwrap(),
        None,
        "nothing visible"
    );
    // SAFETY: the reservation holds `got` writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(b"reserved".as_ptr(), at, 8) };
    assert!(!a.publish_eager(0, 1, 1, got + 1), "longer than reserved");
    assert!(a.publish_eager(0, 1, 1, 8));
    a.wait(&mut NoHook, id).unwrap();
    assert_eq!(recv_any(&mut b), (1, b"reserved".to_vec()));
    assert_eq!(recv_any(&mut b), (2, later.to_vec()));
}

#[test]
fn an_abandoned_reservation_sends_nothing_and_lets_the_queue_flow() {
    let (mut a, mut b) = shm_pair(4096);
    let (at, _) = a.reserve_eager(1, 64, 8).expect("room");
    // SAFETY: 64 bytes reserved.
    unsafe { std::ptr::write_bytes(at, 0xAA, 64) };
    let data = b"after";
    let id = a
        .isend(0, 1, 4, data.as_ptr(), data.len(), SendMode::Eager)
        .unwrap();
    a.abandon_eager(1);
    a.wait(&mut NoHook, id).unwrap();
    assert_eq!(recv_any(&mut b), (4, data.to_vec()));
    b.progress(&mut NoHook).unwrap();
    assert_eq!(b.iprobe(&mut NoHook, 0, Some(0), None).unwrap(), None);
    assert!(!a.publish_eager(0, 1, 1, 0), "nothing left to publish");
}

#[test]
fn no_reservation_when_the_ring_is_full_or_sends_are_queued() {
    let (mut a, mut b) = shm_pair(4096);
    let data = [7u8; 1000];
    while a.send_eager_now(0, 1, 1, data.as_ptr(), data.len()) {}
    assert!(
        a.reserve_eager(1, 1000, 1000).is_none(),
        "full: the caller falls back"
    );
    let small = a.reserve_eager(1, 1000, 8);
    if let Some((_, got)) = small {
        assert!(got < 1000, "only what is left");
        a.abandon_eager(1);
    }
    // A send queued behind the full ring: a reservation must not overtake it.
    let id = a
        .isend(0, 1, 2, data.as_ptr(), data.len(), SendMode::Eager)
        .unwrap();
    assert!(!a.proto.is_done(id));
    for _ in 0..3 {
        assert_eq!(recv_any(&mut b).0, 1);
    }
    assert!(a.reserve_eager(1, 8, 8).is_none(), "queued send first");
    a.wait(&mut NoHook, id).unwrap();
    assert!(a.reserve_eager(1, 8, 8).is_some(), "then there is room");
    a.abandon_eager(1);
    assert_eq!(recv_any(&mut b), (2, data.to_vec()));
    // Not on shared memory (ourselves): never.
    assert!(a.reserve_eager(0, 8, 8).is_none());
}

/// A rank that shares its core with a peer moves itself: off the CPU it runs on, and with the
/// affinity it had (not pinned where it landed). Alone on a CPU it stays.
#[test]
fn moving_off_a_cpu_leaves_the_affinity_as_it_was() {
    let affinity = || {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: plain data, written by sched_getaffinity for the calling thread.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut set) }, 0);
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect::<Vec<_>>()
    };
    // SAFETY: no arguments.
    let cpu = || u32::try_from(unsafe { libc::sched_getcpu() }).expect("sched_getcpu");
    std::thread::spawn(move || {
        let before = affinity();
        let from = cpu();
        let moved = super::wait::move_off(from);
        assert_eq!(moved, before.len() > 1, "allowed: {before:?}");
        if moved {
            assert_ne!(cpu(), from, "still on CPU {from}");
        }
        assert_eq!(affinity(), before);
    })
    .join()
    .expect("the test thread");
}

/// The CTS frames queued for `peer`, as (send id, bytes accepted).
fn queued_cts(e: &Engine, peer: usize) -> Vec<(u64, u64)> {
    (queued(e, peer).into_iter())
        .filter_map(|f| match f {
            Frame::Cts {
                send_id,
                accept_len,
                ..
            } => Some((send_id, accept_len)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_revoked_communicator_answers_unmatched_rendezvous_with_a_cts_of_nothing() {
    let mut e = engine(2);
    e.tolerate_failures().unwrap();
    let rts = |context, send_id| Frame::Rts {
        context,
        tag: 3,
        len: 1 << 20,
        send_id,
        source_addr: 0,
    };
    // Waiting unmatched when the communicator (contexts 4 and 5) is revoked.
    deliver(&mut e, 1, rts(4, 77), &[]).unwrap();
    deliver(&mut e, 1, rts(6, 79), &[]).unwrap();
    assert!(queued_cts(&e, 1).is_empty());
    e.revoke(4).unwrap();
    assert_eq!(queued_cts(&e, 1), [(77, 0)]);
    // Arriving after it, on the collectives' context: answered by the next pass.
    deliver(&mut e, 1, rts(5, 78), &[]).unwrap();
    e.look_for_failures(true).unwrap();
    assert_eq!(queued_cts(&e, 1), [(77, 0), (78, 0)]);
    // Another communicator's announcement still waits for its receive.
    assert_eq!(e.proto.matcher.unexpected_len(), 1);
}
