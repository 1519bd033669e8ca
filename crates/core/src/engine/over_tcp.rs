//! The TCP transport on real sockets over loopback, inside one process: two engines that dial,
//! authenticate and move messages through [`TcpTransport`], stepped in turn by one thread, so
//! partial writes, strangers and a peer that vanishes are tested without a job.

use super::*;
use crate::tcp::tests::{transport, JOB, KEY};
use crate::tcp::TcpTransport;
use ferry_wire::{Handshake, JobKey};
use std::io::Write;
use std::net::SocketAddr;

fn engine(me: u32, tcp: TcpTransport) -> Engine {
    let mut routes = vec![Route::Tcp; 2];
    routes[me as usize] = Route::Loopback;
    Engine::new(EngineSetup {
        me,
        routes,
        pids: vec![std::process::id(); 2],
        shm: None,
        tcp: Some(tcp),
        cma: false,
        cma_share_min: u64::MAX,
        shm_eager_limit: 1 << 16,
        tcp_eager_limit: 1 << 12,
        tcp_chunk: 1 << 20,
        spin: 1,
        spin_yield: false,
        rails: 1,
        rail_policy: crate::config::RailPolicy::Weighted,
        rail_stripe: 1 << 19,
    })
}

/// Rank 0 dials rank 1, as the lower rank of two public peers does; both then authenticate.
fn connected(buffer: usize) -> (Engine, Engine, SocketAddr) {
    let mut a = transport(0, buffer);
    let b = transport(1, buffer);
    let b_addr = b.listen_addr();
    a.dial((1, 0), b_addr, None, None).expect("dial");
    (engine(0, a), engine(1, b), b_addr)
}

/// Steps both engines until `done` holds; fails after 10 s or on an error.
fn step_until(
    a: &mut Engine,
    b: &mut Engine,
    mut done: impl FnMut(&mut Engine, &mut Engine) -> bool,
) -> Result<(), Error> {
    let start = Instant::now();
    while !done(a, b) {
        a.progress(&mut NoHook)?;
        b.progress(&mut NoHook)?;
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no progress in 10 s"
        );
    }
    Ok(())
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Sends `data` from `a` to `b` (rank 1) and receives it there.
fn round(a: &mut Engine, b: &mut Engine, tag: i32, data: &[u8]) -> Result<Vec<u8>, Error> {
    let mut got = vec![0u8; data.len()];
    let s = a.isend(0, 1, tag, data.as_ptr(), data.len(), SendMode::Standard)?;
    let r = b.irecv(0, Some(0), Some(tag), got.as_mut_ptr(), got.len())?;
    let (mut sent, mut received) = (None, None);
    step_until(a, b, |a, b| {
        sent = sent.or_else(|| a.take(s));
        received = received.or_else(|| b.take(r));
        sent.is_some() && received.is_some()
    })?;
    assert_eq!(received.map(|c| c.len), Some(data.len()));
    Ok(got)
}

#[test]
fn eager_and_rendezvous_messages_cross_in_partial_writes() {
    // 64 KiB socket buffers and 1 MiB DATA frames: a large frame takes many partial writes.
    // (Far smaller buffers make loopback TCP itself crawl, at delayed-ACK pace.)
    let (mut a, mut b, _) = connected(64 << 10);
    for (tag, len) in [(1, 0), (2, 8), (3, 4096), (4, 100_000), (5, 1 << 20)] {
        let data = pattern(len);
        let got = round(&mut a, &mut b, tag, &data).unwrap();
        assert!(got == data, "{len} B arrived changed");
    }
}

#[test]
fn a_stranger_on_the_port_is_dropped_and_the_job_goes_on() {
    let (mut a, mut b, b_addr) = connected(0);
    let mut stranger = std::net::TcpStream::connect(b_addr).expect("connect as a stranger");
    stranger
        .write_all(b"GET / HTTP/1.0\r\n\r\n not a ferry handshake at all")
        .expect("write");
    let data = pattern(50_000);
    let got = round(&mut a, &mut b, 9, &data).unwrap();
    assert!(got == data);
    // The stranger's connection is closed by the listener, not kept.
    stranger
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    let n = std::io::Read::read(&mut stranger, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "a stranger got an answer: {:?}", &buf[..n]);
}

#[test]
fn a_peer_that_vanishes_fails_the_wait_naming_it() {
    let (mut a, mut b, _) = connected(0);
    round(&mut a, &mut b, 1, &pattern(16)).unwrap();
    let mut buf = [0u8; 16];
    let r = b.irecv(0, Some(0), Some(2), buf.as_mut_ptr(), 16).unwrap();
    drop(a);
    let start = Instant::now();
    let err = loop {
        match b.progress(&mut NoHook) {
            Err(e) => break e,
            Ok(_) => assert!(b.take(r).is_none(), "a receive from a dead peer completed"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the loss went unnoticed"
        );
    };
    assert!(
        matches!(err, Error::PeerLost { rank: 0, .. }),
        "not a lost peer: {err}"
    );
}

/// Samples of sin(x), as a smooth field of doubles would be.
fn smooth(len: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..len.div_ceil(8))
        .flat_map(|i| (i as f64 * 1e-3).sin().to_le_bytes())
        .collect();
    bytes.truncate(len);
    bytes
}

fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

#[test]
fn compressed_payloads_arrive_whole_and_noise_goes_raw() {
    let compress = crate::compress::CompressConfig {
        mode: crate::compress::CompressMode::On,
        ..Default::default()
    };
    let (mut a, mut b) = {
        let mut a = transport(0, 0);
        let mut b = transport(1, 0);
        a.set_compression(compress);
        b.set_compression(compress);
        let b_addr = b.listen_addr();
        a.dial((1, 0), b_addr, None, None).expect("dial");
        (engine(0, a), engine(1, b))
    };
    // One 1 MiB DATA frame, then 1 MiB + 5 bytes (the 5-byte chunk is below the compression
    // minimum and goes raw), then an eager message below it too.
    for (tag, data) in [
        (1, smooth(1 << 20)),
        (2, smooth((1 << 20) + 5)),
        (3, smooth(4000)),
    ] {
        let got = round(&mut a, &mut b, tag, &data).unwrap();
        assert!(got == data, "{} B of sin(x) arrived changed", data.len());
    }
    let sent = a.counters();
    assert_eq!(sent.frames_compressed, 2, "{sent:?}");
    assert!(sent.compressed_sent_bytes * 10 < sent.compressed_raw_bytes * 9);
    assert_eq!(b.counters().frames_decompressed, 2);
    let data = noise(300_000);
    let got = round(&mut a, &mut b, 4, &data).unwrap();
    assert!(got == data, "random bytes arrived changed");
    let after = a.counters();
    assert_eq!(
        after.frames_compressed, 2,
        "random bytes compressed: {after:?}"
    );
    assert_eq!(after.frames_sent_raw, 1, "{after:?}");
}

/// A raw socket that passed the handshake as rank 0 with rank 1's engine, which is returned
/// with it: what the test writes next is what a broken peer would send.
fn fake_rank_0() -> (std::net::TcpStream, Engine) {
    let b_tcp = transport(1, 0);
    let addr = b_tcp.listen_addr();
    let mut b = engine(1, b_tcp);
    let mut fake = std::net::TcpStream::connect(addr).expect("connect");
    fake.set_nonblocking(true).expect("nonblocking");
    let mut hs = Handshake::connect(JobKey(KEY), JOB, 2, 0, 1, [3; 32]);
    let (start, mut input) = (Instant::now(), Vec::new());
    while hs.peer_rank().is_none() || !hs.pending_output().is_empty() {
        if let Ok(n) = fake.write(hs.pending_output()) {
            hs.consume_output(n);
        }
        let mut chunk = [0u8; 512];
        match std::io::Read::read(&mut fake, &mut chunk) {
            Ok(0) => panic!("rank 1 closed the connection during the handshake"),
            Ok(n) => input.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
        if !input.is_empty() && hs.peer_rank().is_none() {
            let used = hs.handle_input(&input).expect("rank 1's handshake");
            input.drain(..used);
        }
        b.progress(&mut NoHook).expect("rank 1 progresses");
        assert!(start.elapsed() < Duration::from_secs(10), "no handshake");
    }
    (fake, b)
}

/// Progresses `b` until it fails; the error.
fn failure(b: &mut Engine) -> Error {
    let start = Instant::now();
    loop {
        if let Err(e) = b.progress(&mut NoHook) {
            return e;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no error");
    }
}

#[test]
fn a_broken_compressed_frame_is_an_error_naming_the_peer() {
    let (mut fake, mut b) = fake_rank_0();
    let mut header = Frame::Eager {
        context: 0,
        tag: 5,
        len: 1000,
    }
    .to_bytes();
    ferry_wire::compress::mark_compressed(&mut header, 10);
    fake.set_nonblocking(false).expect("blocking");
    fake.write_all(&header).expect("header");
    fake.write_all(&[1, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8])
        .expect("payload");
    let err = failure(&mut b);
    assert!(
        matches!(&err, Error::Protocol { rank: 0, detail } if detail.contains("compressed")),
        "{err}"
    );
    eprintln!("{err}");
}

#[test]
fn an_oversized_compressed_frame_is_refused_before_it_is_read() {
    let (mut fake, mut b) = fake_rank_0();
    let mut header = Frame::Eager {
        context: 0,
        tag: 5,
        len: 1 << 40,
    }
    .to_bytes();
    ferry_wire::compress::mark_compressed(&mut header, u32::MAX);
    fake.set_nonblocking(false).expect("blocking");
    fake.write_all(&header).expect("header");
    let err = failure(&mut b);
    assert!(
        matches!(&err, Error::Protocol { rank: 0, detail } if detail.contains("exceeds")),
        "{err}"
    );
}
