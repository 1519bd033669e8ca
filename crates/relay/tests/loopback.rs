//! `ferry-relay` on loopback: forwards an authenticated CONNECT end to end, refuses strangers,
//! and its death closes forwarded connections at once. No root needed.

mod common;

use common::*;
use ferry_relay::client::{self, ClientError};
use ferry_wire::relay::{self, RefuseCode, RelayFrame, ReplayGuard};
use ferry_wire::JobKey;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn refused(result: Result<TcpStream, ClientError>) -> RefuseCode {
    match result {
        Err(ClientError::Refused(code)) => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn relay_on_loopback() {
    let tmp = TempDir::new("loop");
    let jobs = jobs_dir(&tmp);
    for copy in ["splice", "buffered", "sockmap"] {
        let relay = RelayProcess::start(&[], "127.0.0.1:0", &jobs, &["--copy", copy]);
        let target = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = target.local_addr().unwrap().port();
        let _registration = client::register(relay.addr, &job_key(), JOB, 2, port).unwrap();
        let server = std::thread::spawn(move || {
            let mut seen = ReplayGuard::default();
            serve_one(&target, 2, &mut seen).map_err(|e| e.to_string())
        });
        let s = exchange(relay.addr, 1, 2).unwrap();
        drop(s);
        assert_eq!(server.join().unwrap(), Ok(1), "{copy}");

        // Half-close, either way round and empty, with checksummed data.
        for (up, down) in [
            (0, 0),
            (1, 8 << 20),
            (8 << 20, 1),
            (8 << 20, 0),
            (65536, 65536),
        ] {
            let target = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = target.local_addr().unwrap().port();
            let _reg = client::register(relay.addr, &job_key(), JOB, 5, port).unwrap();
            half_close(relay.addr, target, 1, 5, up, down);
        }
        relay.signal("USR1");
        let lines = relay.lines(Duration::from_millis(300));
        let status = lines
            .iter()
            .find(|l| l.contains("paired="))
            .expect("a status line");
        let forwarded = 2 * (1u64 + 1000 + 65536 + (1 << 20) + (8 << 20));
        let half = 3 * (8 << 20) + 2 + 2 * 65536;
        let field = |name: &str| -> u64 {
            let f = status
                .split(' ')
                .find_map(|w| w.strip_prefix(name))
                .unwrap();
            f.parse().unwrap()
        };
        // Payload plus the handshakes' and length prefixes' bytes.
        assert!(
            field("bytes_in=") + field("bytes_out=") >= forwarded + half,
            "{status}"
        );
        assert_eq!(field("paired="), 6, "{status}");
        if copy == "sockmap" && rustix::process::geteuid().is_root() {
            assert_eq!(field("sockmap_pairs="), 6, "{status}");
        }

        // Strangers.
        let wrong = JobKey([1; 32]);
        assert_eq!(
            refused(client::connect(relay.addr, &wrong, JOB, 1, 2)),
            RefuseCode::BadMac
        );
        assert_eq!(
            refused(client::connect(relay.addr, &job_key(), JOB, 1, 3)),
            RefuseCode::UnknownTarget
        );
        assert_eq!(
            refused(client::connect(relay.addr, &job_key(), JOB + 1, 1, 2)),
            RefuseCode::UnknownJob
        );
        // Garbage gets REFUSED and the connection closed.
        let mut g = TcpStream::connect(relay.addr).unwrap();
        g.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        g.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        g.read_to_end(&mut got).unwrap();
        let tail = &got[got.len() - 12..];
        assert_eq!(
            RelayFrame::decode(tail).unwrap().unwrap().0,
            RelayFrame::Refused(RefuseCode::Malformed)
        );
        // A recorded CONNECT replayed on a new connection.
        let mut first = TcpStream::connect(relay.addr).unwrap();
        let RelayFrame::Greeting { relay_nonce } = client::read_frame(&mut first).unwrap() else {
            panic!()
        };
        let recorded = relay::connect(&job_key(), &relay_nonce, JOB, 1, 2, [7; 32]).to_bytes();
        drop(first);
        let mut replay = TcpStream::connect(relay.addr).unwrap();
        client::read_frame(&mut replay).unwrap();
        replay.write_all(&recorded).unwrap();
        assert_eq!(
            client::read_frame(&mut replay).unwrap(),
            RelayFrame::Refused(RefuseCode::BadMac)
        );
        // Registering from outside the inside networks is refused.
        let relay2 = RelayProcess::start(&[], "127.0.0.1:0", &jobs, &["--inside", "10.0.0.0/8"]);
        assert!(matches!(
            client::register(relay2.addr, &job_key(), JOB, 2, port),
            Err(ClientError::Refused(RefuseCode::NotInside))
        ));
        drop(relay2);

        // Killing the relay closes a forwarded connection at once.
        let target = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = target.local_addr().unwrap().port();
        let _registration2 = client::register(relay.addr, &job_key(), JOB, 0, port).unwrap();
        let server = std::thread::spawn(move || {
            let mut seen = ReplayGuard::default();
            serve_one(&target, 0, &mut seen).map_err(|e| e.to_string())
        });
        let mut s = exchange(relay.addr, 3, 0).unwrap();
        relay.signal("KILL");
        let t0 = Instant::now();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut byte = [0u8; 1];
        let r = s.read(&mut byte);
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "took {:?}",
            t0.elapsed()
        );
        let _ = server.join().unwrap();
    }
}

#[test]
fn sigterm_shuts_down_cleanly_and_sigusr1_prints_status() {
    let tmp = TempDir::new("term");
    let jobs = jobs_dir(&tmp);
    let mut relay = RelayProcess::start(&[], "127.0.0.1:0", &jobs, &[]);
    let _reg = client::register(relay.addr, &job_key(), JOB, 1, 1).unwrap();
    relay.signal("USR1");
    let lines = relay.lines(Duration::from_millis(500));
    assert!(
        lines.iter().any(|l| l.contains("registered=1")),
        "{lines:?}"
    );
    relay.signal("TERM");
    let t0 = Instant::now();
    let status = relay.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    let lines = relay.lines(Duration::from_millis(200));
    assert!(lines.iter().any(|l| l.contains("shut down")), "{lines:?}");
}

#[test]
fn connection_cap_and_handshake_timeout() {
    let tmp = TempDir::new("cap");
    let jobs = jobs_dir(&tmp);
    let relay = RelayProcess::start(
        &[],
        "127.0.0.1:0",
        &jobs,
        &["--max-connections", "1", "--handshake-timeout", "0.5"],
    );
    let greeted = |s: &mut TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(
            client::read_frame(s).unwrap(),
            RelayFrame::Greeting { .. }
        ));
    };
    let closed = |s: &mut TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 16];
        assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    };
    let mut first = TcpStream::connect(relay.addr).unwrap();
    greeted(&mut first);
    // Over the cap, the oldest stranger makes room for the newcomer.
    let mut second = TcpStream::connect(relay.addr).unwrap();
    greeted(&mut second);
    closed(&mut first);
    // The silent connection is refused when its handshake time is up.
    let t0 = Instant::now();
    assert_eq!(
        client::read_frame(&mut second).unwrap(),
        RelayFrame::Refused(RefuseCode::Timeout)
    );
    assert!(t0.elapsed() < Duration::from_secs(2));
    // A registered connection is no stranger: with it in the only place, newcomers are closed
    // without a word.
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = target.local_addr().unwrap().port();
    let _registration = client::register(relay.addr, &job_key(), JOB, 2, port).unwrap();
    let mut third = TcpStream::connect(relay.addr).unwrap();
    closed(&mut third);
}

/// Strangers that fill `--max-connections` keep no genuine REGISTER or CONNECT out: each
/// newcomer takes the oldest stranger's place, beyond `--max-strangers` too. A rank that
/// registers again replaces its older registration, with a line in the log.
#[test]
fn strangers_filling_the_relay_keep_no_genuine_traffic_out() {
    let tmp = TempDir::new("strangers");
    let jobs = jobs_dir(&tmp);
    let relay = RelayProcess::start(
        &[],
        "127.0.0.1:0",
        &jobs,
        &["--max-connections", "16", "--max-strangers", "8"],
    );
    // 40 idle strangers: 8 stay, the others are shed.
    let strangers: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(relay.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = target.local_addr().unwrap().port();
    let _old = client::register(relay.addr, &job_key(), JOB, 2, port).unwrap();
    // More strangers, then the same rank registers again (it reconnected) and a client
    // connects through the relay to it.
    let more: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(relay.addr).unwrap())
        .collect();
    let _registration = client::register(relay.addr, &job_key(), JOB, 2, port).unwrap();
    let server = std::thread::spawn(move || {
        let mut seen = ReplayGuard::default();
        serve_one(&target, 2, &mut seen).map_err(|e| e.to_string())
    });
    let s = exchange(relay.addr, 1, 2).unwrap();
    drop(s);
    assert_eq!(server.join().unwrap(), Ok(1));
    relay.signal("USR1");
    let lines = relay.lines(Duration::from_millis(300));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("rank 2 registered again") && l.contains("replaces the older")),
        "{lines:?}"
    );
    let status = lines
        .iter()
        .find(|l| l.contains("shed="))
        .expect("a status line");
    let field = |name: &str| -> u64 {
        let f = status
            .split(' ')
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {status}"));
        f.parse().unwrap()
    };
    assert!(field("shed") >= 70, "{status}");
    assert_eq!(field("replaced"), 1, "{status}");
    drop((strangers, more));
}

/// A kernel-forwarded pair (`--copy sockmap`) counts as busy while bytes pass, although the
/// relay process no longer sees them, and is closed once idle.
#[test]
fn sockmap_pair_idle_timeout_counts_kernel_bytes() {
    let tmp = TempDir::new("idle");
    let jobs = jobs_dir(&tmp);
    let relay = RelayProcess::start(
        &[],
        "127.0.0.1:0",
        &jobs,
        &["--copy", "sockmap", "--idle-timeout", "1"],
    );
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = target.local_addr().unwrap().port();
    let _reg = client::register(relay.addr, &job_key(), JOB, 2, port).unwrap();
    let server = std::thread::spawn(move || {
        let mut seen = ReplayGuard::default();
        serve_one(&target, 2, &mut seen).map_err(|e| e.to_string())
    });
    let mut s = client::connect(relay.addr, &job_key(), JOB, 1, 2).unwrap();
    let hs =
        ferry_wire::Handshake::connect(job_key(), JOB, SIZE, 1, 2, client::fresh_nonce().unwrap());
    client::handshake(&mut s, hs).unwrap();
    // 2.5 s of a message every 250 ms: longer than the idle timeout, never idle for it.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(2500) {
        s.write_all(&4u64.to_le_bytes()).unwrap();
        s.write_all(b"ping").unwrap();
        let mut back = [0u8; 12];
        s.read_exact(&mut back).unwrap();
        assert_eq!(&back[8..], b"ping");
        std::thread::sleep(Duration::from_millis(250));
    }
    // Then idle: closed within the timeout and a timer's look.
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t1 = Instant::now();
    let mut byte = [0u8; 1];
    assert!(matches!(s.read(&mut byte), Ok(0) | Err(_)));
    let idle = t1.elapsed();
    assert!(
        idle > Duration::from_millis(700) && idle < Duration::from_millis(2500),
        "closed after {idle:?} idle"
    );
    let _ = server.join().unwrap();
    relay.signal("USR1");
    let lines = relay.lines(Duration::from_millis(300));
    assert!(
        lines.iter().any(|l| l.contains("idle_closed=1")),
        "{lines:?}"
    );
}

/// Without the privilege to load BPF programs (`--copy sockmap`) or to change the front's
/// netfilter rules (`--copy nat`), the relay says so in one line and splices. Run as root, the
/// relay is started as `nobody` (needs `setpriv`), so the host's rules are never touched.
#[test]
fn kernel_forwarding_falls_back_to_splice_without_privilege() {
    if !rustix::process::geteuid().is_root() || !std::path::Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: needs root and setpriv to start the relay unprivileged");
        return;
    }
    for (mode, says) in [
        ("sockmap", "sockmap forwarding unavailable"),
        ("nat", "NAT forwarding unavailable"),
    ] {
        let mut child = std::process::Command::new("/usr/bin/setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_ferry-relay"))
            .args(["--listen", "127.0.0.1:0", "--copy", mode])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
        let first = lines.next().unwrap().unwrap();
        let second = lines.next().unwrap().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            first.contains(says) && first.contains("using splice"),
            "{mode}: {first}"
        );
        assert!(second.contains("(Splice forwarding)"), "{mode}: {second}");
    }
}

/// An error on one side of a kernel pair (the target resets its connection) closes the other
/// side at once and takes the pair out of the relay.
#[test]
fn sockmap_pair_reset_closes_the_other_side() {
    let tmp = TempDir::new("reset");
    let jobs = jobs_dir(&tmp);
    let relay = RelayProcess::start(&[], "127.0.0.1:0", &jobs, &["--copy", "sockmap"]);
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = target.local_addr().unwrap().port();
    let _reg = client::register(relay.addr, &job_key(), JOB, 2, port).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = target.accept().unwrap();
        let mut seen = ReplayGuard::default();
        client::accept(&mut s, &job_key(), JOB, 2, &mut seen).unwrap();
        let hs =
            ferry_wire::Handshake::accept(job_key(), JOB, SIZE, 2, client::fresh_nonce().unwrap());
        client::handshake(&mut s, hs).unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hello");
        // Close with a reset (linger 0) instead of a FIN.
        rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
        drop(s);
    });
    let mut s = client::connect(relay.addr, &job_key(), JOB, 1, 2).unwrap();
    let hs =
        ferry_wire::Handshake::connect(job_key(), JOB, SIZE, 1, 2, client::fresh_nonce().unwrap());
    client::handshake(&mut s, hs).unwrap();
    s.write_all(b"hello").unwrap();
    server.join().unwrap();
    let t0 = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = s.read(&mut [0u8; 1]);
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t0.elapsed()
    );
    std::thread::sleep(Duration::from_millis(100));
    relay.signal("USR1");
    let lines = relay.lines(Duration::from_millis(300));
    let status = lines
        .iter()
        .find(|l| l.contains("paired="))
        .expect("status");
    // Only the registration is left.
    assert!(
        status.contains(" conns=1 ") && status.contains(" relayed=0 "),
        "{status}"
    );
}

/// Under a soft limit of 64 descriptors (an ssh login's 1 024 is the same case, larger), a
/// flood of 300 connections that stay open keeps the relay answering: a genuine connection is
/// greeted during the flood and after it, and the relay says how many connections it keeps.
#[test]
fn a_flood_at_a_low_descriptor_limit_leaves_the_relay_answering() {
    let tmp = TempDir::new("flood");
    let jobs = jobs_dir(&tmp);
    let limited = ["sh", "-c", "ulimit -n 64 && exec \"$0\" \"$@\""];
    let relay = RelayProcess::start(&limited, "127.0.0.1:0", &jobs, &[]);
    let greeted = |what: &str| {
        let mut s = TcpStream::connect_timeout(&relay.addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        match client::read_frame(&mut s) {
            Ok(RelayFrame::Greeting { .. }) => {}
            other => panic!("{what}: no greeting: {other:?}"),
        }
    };
    // Nonblocking, as a flood does: a relay that stopped accepting fills its queue, and
    // blocking connects would wait for it.
    let flood: Vec<socket2::Socket> = (0..300)
        .map(|_| {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.set_nonblocking(true).unwrap();
            let _ = s.connect(&relay.addr.into());
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    greeted("during the flood");
    // A registration, genuine traffic, is served during the flood too.
    let _registration = client::register(relay.addr, &job_key(), JOB, 2, 1).unwrap();
    drop(flood);
    std::thread::sleep(Duration::from_millis(500));
    greeted("after the flood");
    assert!(
        relay
            .early
            .iter()
            .any(|l| l.contains("keeping at most 10 connections")),
        "{:?}",
        relay.early
    );
}
