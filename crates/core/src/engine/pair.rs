//! Two engines joined in memory, to test the point-to-point protocol without sockets or shared
//! memory: what one queues for the other is cut into frames exactly as a transport's flush
//! would (`Engine::flush_peer`: DATA chunks of `tcp_chunk` cut when they reach the head of the
//! queue), taken off its queue as written, and fed to the other's protocol as a transport's
//! input would (`begin_frame`, the payload, `end_frame`). The wire is a queue per direction, so
//! a test decides when bytes arrive: all at once, a few frames at a time, or only one way.

use super::*;

/// A one-way wire: frames written and not yet delivered, and a count of the DATA chunks it
/// carried; over a fabric, also the memory its sender registered for reads, as (key, address,
/// length), which the other side's reads check and copy from as a fabric would.
#[derive(Default)]
struct Wire {
    frames: VecDeque<(Frame, Vec<u8>)>,
    chunks: usize,
    registered: Vec<(u64, u64, usize)>,
}

/// Makes a key out of a send's request id, as a provider would hand out one.
const KEY_SALT: u64 = 0x5eed_0000_0000_0000;

/// Ranks 0 and 1 of a job, both on TCP routes with no sockets; `a` is rank 0.
pub(crate) struct Pair {
    pub a: Engine,
    pub b: Engine,
    a_to_b: Wire,
    b_to_a: Wire,
}

use std::collections::VecDeque;

fn engine(me: u32, eager: usize, chunk: usize) -> Engine {
    engine_on(Route::Tcp, me, eager, chunk)
}

fn engine_on(route: Route, me: u32, eager: usize, chunk: usize) -> Engine {
    let mut routes = vec![route; 2];
    routes[me as usize] = Route::Loopback;
    Engine::new(EngineSetup {
        me,
        routes,
        pids: vec![100, 101],
        shm: None,
        tcp: None,
        cma: false,
        cma_share_min: u64::MAX,
        shm_eager_limit: eager,
        tcp_eager_limit: eager,
        tcp_chunk: chunk,
        spin: 1,
        spin_yield: false,
        rails: 1,
        rail_policy: crate::config::RailPolicy::Weighted,
        rail_stripe: 1 << 19,
    })
}

impl Pair {
    /// Two engines with this eager limit and rendezvous chunk size.
    pub fn new(eager: usize, chunk: usize) -> Pair {
        Pair {
            a: engine(0, eager, chunk),
            b: engine(1, eager, chunk),
            a_to_b: Wire::default(),
            b_to_a: Wire::default(),
        }
    }

    /// Two engines on fabric routes with no fabric: every message goes by rendezvous, which
    /// the pair's wires carry as RTS_READ and reads (see [`Wire`]).
    pub fn over_fabric() -> Pair {
        Pair {
            a: engine_on(Route::Fabric, 0, 0, 4096),
            b: engine_on(Route::Fabric, 1, 0, 4096),
            a_to_b: Wire::default(),
            b_to_a: Wire::default(),
        }
    }

    /// Writes what each engine has queued for the other onto the wires (as a transport's
    /// flush would, completing sends whose last byte is written). Returns the frames written.
    pub fn write(&mut self) -> usize {
        write(&mut self.a, 1, &mut self.a_to_b) + write(&mut self.b, 0, &mut self.b_to_a)
    }

    /// Delivers at most `limit` frames of each wire. Returns the frames delivered.
    pub fn deliver(&mut self, limit: usize) -> Result<usize, Error> {
        let ab = deliver(&mut self.a_to_b, &mut self.b, 0, limit)?;
        let ba = deliver(&mut self.b_to_a, &mut self.a, 1, limit)?;
        let reads =
            read(&mut self.a_to_b, &mut self.b, 0)? + read(&mut self.b_to_a, &mut self.a, 1)?;
        release(&mut self.a, &mut self.a_to_b);
        release(&mut self.b, &mut self.b_to_a);
        Ok(ab + ba + reads)
    }

    /// Writes and delivers until neither side has anything in flight.
    pub fn drive(&mut self) -> Result<(), Error> {
        while self.write() + self.deliver(usize::MAX)? > 0 {}
        Ok(())
    }

    /// Writes, delivers at most `limit` frames a wire at a time, and gives each engine's hook
    /// its pass (as a progress pass would), until nothing moves. Returns each hook's first
    /// error, if any; the other side goes on.
    pub fn drive_hooked(
        &mut self,
        limit: usize,
        hook_a: &mut impl Hook,
        hook_b: &mut impl Hook,
    ) -> (Result<(), Error>, Result<(), Error>) {
        let (mut ra, mut rb) = (Ok(()), Ok(()));
        loop {
            let mut moved = self.write() > 0;
            match self.deliver(limit) {
                Ok(n) => moved |= n > 0,
                Err(e) => return (Err(e.clone()), Err(e)),
            }
            moved |= hook_pass(&mut self.a, hook_a, &mut ra);
            moved |= hook_pass(&mut self.b, hook_b, &mut rb);
            if !moved {
                return (ra, rb);
            }
        }
    }

    /// DATA chunks delivered from rank 0 to rank 1 so far.
    pub fn chunks_to_b(&self) -> usize {
        self.a_to_b.chunks
    }

    /// The frames on the wire from rank 0 to rank 1, oldest first.
    pub fn in_flight_to_b(&self) -> Vec<Frame> {
        self.a_to_b.frames.iter().map(|(f, _)| *f).collect()
    }
}

/// `hook`'s pass on `engine` when it wants one, as a progress pass gives it; whether it moved
/// anything. Its first error is kept in `result`.
fn hook_pass(engine: &mut Engine, hook: &mut impl Hook, result: &mut Result<(), Error>) -> bool {
    if !hook.wants_pass(engine.proto.completions) {
        return false;
    }
    match hook.advance(engine) {
        Ok(moved) => moved,
        Err(e) => {
            if result.is_ok() {
                *result = Err(e);
            }
            false
        }
    }
}

fn write(from: &mut Engine, to: u32, wire: &mut Wire) -> usize {
    let p = to as usize;
    let chunk = from.tcp_chunk;
    let mut written = 0;
    loop {
        let frame = match from.proto.peers[p].outq.pop_front() {
            None => break,
            Some(Out::Stream(id)) => {
                if let Some((f, _)) = from.proto.next_chunk(id, chunk) {
                    from.proto.peers[p].outq.push_front(Out::Stream(id));
                    from.proto.peers[p].outq.push_front(Out::Frame(f));
                }
                continue;
            }
            Some(Out::Expose { id, context, tag }) => {
                if let Some((buf, len)) = from.proto.send_buffer(id) {
                    let key = KEY_SALT | id;
                    wire.registered.push((key, buf as u64, len));
                    let rts = from
                        .proto
                        .rts_read_frame(id, (context, tag), buf as u64, key);
                    if let Some(rts) = rts {
                        from.proto.peers[p].outq.push_front(Out::Frame(rts));
                    }
                }
                continue;
            }
            Some(Out::Frame(f)) => f,
        };
        // SAFETY: a queued frame's payload is valid for `len` bytes until it is written: its
        // request completes only in `frame_written` below.
        let payload = unsafe { std::slice::from_raw_parts(frame.payload, frame.len) }.to_vec();
        let header = Frame::decode(&frame.header, u64::MAX).expect("the engine encodes frames");
        from.proto.frame_written(&frame);
        wire.frames.push_back((header, payload));
        written += 1;
    }
    written
}

fn deliver(wire: &mut Wire, to: &mut Engine, from: u32, limit: usize) -> Result<usize, Error> {
    let mut delivered = 0;
    while delivered < limit {
        let Some((frame, payload)) = wire.frames.pop_front() else {
            break;
        };
        wire.chunks += usize::from(matches!(frame, Frame::Data { .. }));
        let mut incoming = to.proto.begin_frame(from, &frame)?;
        incoming.store(0, &payload);
        to.proto.end_frame(from, &frame, incoming)?;
        delivered += 1;
    }
    Ok(delivered)
}

/// Runs the reads `to` asked for of memory its peer `from` registered on `wire`, as a fabric
/// would: a read under a key the sender did not hand out, or past its registration, fails.
fn read(wire: &mut Wire, to: &mut Engine, from: u32) -> Result<usize, Error> {
    let reads: Vec<FabricRead> = to.proto.fabric.reads.drain(..).collect();
    for r in &reads {
        let Some(&(_, addr, len)) = wire.registered.iter().find(|(key, ..)| *key == r.key) else {
            return Err(protocol_error(
                from,
                format!("read under unknown key {:#x}", r.key),
            ));
        };
        if r.remote_addr < addr || r.remote_addr + r.len as u64 > addr + len as u64 {
            return Err(protocol_error(from, "read outside the registered memory"));
        }
        // SAFETY: the range lies in memory the sender lent until its FIN (checked above), and
        // the receive buffer holds `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(r.remote_addr as *const u8, r.buf, r.len) };
        to.proto.read_done(from, r.id)?;
    }
    Ok(reads.len())
}

/// Drops the registrations of `from` whose reader is done with them.
fn release(from: &mut Engine, wire: &mut Wire) {
    for id in from.proto.fabric.read_by_peer.drain(..) {
        wire.registered.retain(|(key, ..)| *key != KEY_SALT | id);
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Sends `data` from `from` to world rank `dest` on context 0.
fn send(from: &mut Engine, dest: u32, tag: i32, data: &[u8], mode: SendMode) -> ReqId {
    from.isend(0, dest, tag, data.as_ptr(), data.len(), mode)
        .expect("send starts")
}

fn done(e: &mut Engine, id: ReqId) -> Option<Completion> {
    e.take(id)
}

#[test]
fn eager_messages_match_in_order_with_wildcards() {
    let mut pair = Pair::new(1024, 4096);
    let msgs: Vec<Vec<u8>> = (0..5).map(|i| pattern(10 + i, i as u8)).collect();
    let sends: Vec<ReqId> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| send(&mut pair.a, 1, (i % 2) as i32, m, SendMode::Standard))
        .collect();
    // Eager sends are done once written.
    pair.write();
    for id in sends {
        assert!(done(&mut pair.a, id).is_some());
    }
    pair.drive().unwrap();
    // Tag 1 first, then any: order per (source, tag) is kept, and a wildcard takes the oldest.
    let mut buf = vec![0u8; 64];
    let r = pair
        .b
        .irecv(0, Some(0), Some(1), buf.as_mut_ptr(), 64)
        .unwrap();
    let c = done(&mut pair.b, r).unwrap();
    assert_eq!((c.source, c.tag, &buf[..c.len]), (0, 1, &msgs[1][..]));
    for want in [0, 2, 3, 4] {
        let r = pair.b.irecv(0, None, None, buf.as_mut_ptr(), 64).unwrap();
        let c = done(&mut pair.b, r).unwrap();
        assert_eq!((c.tag, &buf[..c.len]), ((want % 2) as i32, &msgs[want][..]));
    }
}

#[test]
fn a_rendezvous_moves_every_chunk_and_completes_both_sides() {
    let mut pair = Pair::new(1024, 4096);
    let data = pattern(100_000, 7);
    let s = send(&mut pair.a, 1, 9, &data, SendMode::Standard);
    pair.drive().unwrap();
    // Nothing but the announcement moves before the receive is posted.
    assert!(done(&mut pair.a, s).is_none());
    let mut buf = vec![0u8; data.len()];
    let r = pair
        .b
        .irecv(0, Some(0), Some(9), buf.as_mut_ptr(), buf.len())
        .unwrap();
    // A few frames at a time, as a slow link would.
    while pair.write() + pair.deliver(2).unwrap() > 0 {}
    let c = done(&mut pair.b, r).expect("receive complete");
    assert_eq!((c.len, c.message_len), (data.len(), data.len()));
    assert!(buf == data, "payload differs");
    assert!(done(&mut pair.a, s).is_some(), "send complete");
    assert_eq!(
        pair.chunks_to_b(),
        data.len().div_ceil(4096),
        "chunks of tcp_chunk"
    );
}

#[test]
fn a_synchronous_send_completes_only_once_matched() {
    let mut pair = Pair::new(1024, 4096);
    let data = pattern(16, 1);
    let s = send(&mut pair.a, 1, 2, &data, SendMode::Synchronous);
    pair.drive().unwrap();
    assert!(done(&mut pair.a, s).is_none(), "completed before a receive");
    let mut buf = [0u8; 16];
    let r = pair
        .b
        .irecv(0, Some(0), Some(2), buf.as_mut_ptr(), 16)
        .unwrap();
    pair.drive().unwrap();
    assert!(done(&mut pair.b, r).is_some());
    assert!(done(&mut pair.a, s).is_some());
    assert_eq!(buf, data[..]);
}

#[test]
fn a_short_receive_is_truncated_and_the_send_still_completes() {
    for len in [100, 50_000] {
        let mut pair = Pair::new(1024, 4096);
        let data = pattern(len, 3);
        let s = send(&mut pair.a, 1, 4, &data, SendMode::Standard);
        let mut buf = vec![0u8; 40];
        let r = pair
            .b
            .irecv(0, Some(0), Some(4), buf.as_mut_ptr(), 40)
            .unwrap();
        pair.drive().unwrap();
        let c = done(&mut pair.b, r).expect("receive complete");
        assert_eq!((c.len, c.message_len), (40, len), "{len} B");
        assert_eq!(buf, data[..40]);
        assert!(done(&mut pair.a, s).is_some(), "{len} B: send complete");
    }
}

#[test]
fn exchanges_both_ways_at_once_do_not_wait_for_each_other() {
    let mut pair = Pair::new(1024, 4096);
    let (x, y) = (pattern(30_000, 5), pattern(20_000, 6));
    let (mut bx, mut by) = (vec![0u8; x.len()], vec![0u8; y.len()]);
    let sa = send(&mut pair.a, 1, 0, &x, SendMode::Standard);
    let sb = send(&mut pair.b, 0, 0, &y, SendMode::Standard);
    let ra = pair
        .a
        .irecv(0, Some(1), Some(0), by.as_mut_ptr(), by.len())
        .unwrap();
    let rb = pair
        .b
        .irecv(0, Some(0), Some(0), bx.as_mut_ptr(), bx.len())
        .unwrap();
    while pair.write() + pair.deliver(1).unwrap() > 0 {}
    for id in [sa, ra] {
        assert!(done(&mut pair.a, id).is_some());
    }
    for id in [sb, rb] {
        assert!(done(&mut pair.b, id).is_some());
    }
    assert!(bx == x && by == y);
}

#[test]
fn a_frame_for_no_request_is_a_protocol_error() {
    let mut pair = Pair::new(1024, 4096);
    // DATA for a receive that was never announced: a broken or hostile peer.
    let data = Frame::Data {
        recv_id: 12345,
        offset: 0,
        len: 4,
    };
    let mut incoming = pair.b.proto.begin_frame(0, &data);
    if let Ok(i) = incoming.as_mut() {
        i.store(0, &[1, 2, 3, 4]);
    }
    let result = incoming.and_then(|i| pair.b.proto.end_frame(0, &data, i));
    assert!(result.is_err(), "unknown DATA accepted");
    assert!(pair.in_flight_to_b().is_empty());
}

#[test]
fn over_a_fabric_the_receiver_reads_and_the_registration_goes_after_fin() {
    let mut pair = Pair::over_fabric();
    let data = pattern(70_000, 11);
    let first = pattern(10, 1);
    // Two messages of one tag: the second may not overtake the first.
    let s1 = send(&mut pair.a, 1, 5, &first, SendMode::Standard);
    let s2 = send(&mut pair.a, 1, 5, &data, SendMode::Standard);
    pair.drive().unwrap();
    assert_eq!(pair.a_to_b.registered.len(), 2, "both sends registered");
    let mut got1 = vec![0u8; 10];
    let mut got2 = vec![0u8; data.len()];
    let r1 = pair
        .b
        .irecv(0, Some(0), Some(5), got1.as_mut_ptr(), 10)
        .unwrap();
    let r2 = pair
        .b
        .irecv(0, Some(0), None, got2.as_mut_ptr(), got2.len())
        .unwrap();
    pair.drive().unwrap();
    let (c1, c2) = (
        done(&mut pair.b, r1).unwrap(),
        done(&mut pair.b, r2).unwrap(),
    );
    assert_eq!((c1.len, c2.len), (10, data.len()));
    assert!(got1 == first && got2 == data, "payload differs");
    assert!(done(&mut pair.a, s1).is_some() && done(&mut pair.a, s2).is_some());
    assert!(
        pair.a_to_b.registered.is_empty(),
        "registrations released on FIN"
    );
    assert_eq!(pair.chunks_to_b(), 0, "no DATA chunks: the receiver read");
}

#[test]
fn over_a_fabric_a_short_receive_reads_only_what_it_takes() {
    let mut pair = Pair::over_fabric();
    let data = pattern(5000, 2);
    let s = send(&mut pair.a, 1, 0, &data, SendMode::Standard);
    let mut buf = vec![0u8; 64];
    let r = pair
        .b
        .irecv(0, Some(0), Some(0), buf.as_mut_ptr(), 64)
        .unwrap();
    pair.drive().unwrap();
    let c = done(&mut pair.b, r).expect("receive complete");
    assert_eq!((c.len, c.message_len), (64, 5000));
    assert_eq!(buf, data[..64]);
    assert!(done(&mut pair.a, s).is_some());
    // A receive of nothing reads nothing and still frees the sender.
    let s = send(&mut pair.a, 1, 0, &data, SendMode::Standard);
    let r = pair
        .b
        .irecv(0, Some(0), Some(0), buf.as_mut_ptr(), 0)
        .unwrap();
    pair.drive().unwrap();
    assert_eq!(done(&mut pair.b, r).map(|c| c.len), Some(0));
    assert!(done(&mut pair.a, s).is_some() && pair.a_to_b.registered.is_empty());
}

#[test]
fn an_rts_read_whose_key_the_sender_never_gave_fails_the_read() {
    let mut pair = Pair::over_fabric();
    let data = pattern(100, 4);
    let _s = send(&mut pair.a, 1, 0, &data, SendMode::Standard);
    pair.write();
    pair.a_to_b.registered.clear(); // as if the sender had deregistered too early
    let mut buf = vec![0u8; 100];
    let _r = pair
        .b
        .irecv(0, Some(0), Some(0), buf.as_mut_ptr(), 100)
        .unwrap();
    assert!(
        pair.drive().is_err(),
        "a read under an unknown key succeeded"
    );
}
