//! `ferry-relay` in the testbed, as root: a relay on private cluster a's front node forwards an
//! authenticated CONNECT from private cluster b (through b's NAT) and from the public cluster to
//! a rank on a private host of a; it refuses garbage, a wrong MAC, a replayed CONNECT and an
//! unregistered target; killing it closes forwarded connections at once. Torn down on panic.

mod common;

use common::*;
use ferry_grid::Topology;
use ferry_relay::client::{self, ClientError};
use ferry_testbed::{enter, Testbed};
use ferry_wire::relay::{self, RefuseCode, RelayFrame, ReplayGuard};
use ferry_wire::JobKey;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Runs `f` on a new thread inside namespace `ns`.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns).unwrap();
        f()
    })
}

fn refused(result: Result<TcpStream, ClientError>) -> RefuseCode {
    match result {
        Err(ClientError::Refused(code)) => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The testbed of `three.toml` under a per-run prefix ending in `tag`; `None` (the test is
/// skipped, and says so) without root.
fn three_clusters(tag: &str) -> Option<Testbed> {
    if !ferry_testbed::is_root() {
        eprintln!("skipped: the testbed needs root");
        return None;
    }
    let grid = Topology::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testbed/grids/three.toml"
    )))
    .unwrap();
    Some(Testbed::up(&grid, &format!("fy{}{tag}-", std::process::id())).unwrap())
}

/// a's relay as seen from inside its cluster and from the WAN.
fn a_relay_addrs() -> (SocketAddr, SocketAddr) {
    let parse = |a: &str| a.parse().unwrap();
    (parse("10.1.0.1:7390"), parse("198.18.0.10:7390"))
}

/// b1 (rank 1, through b's NAT) and p1 (rank 0, public) each reach rank 2 through the relay
/// at `public` and exchange checksummed messages of 0 B … 8 MiB.
fn b1_and_p1_exchange(tb: &Testbed, public: SocketAddr) {
    for (host, src) in [("b1", 1), ("p1", 0)] {
        let result = in_ns(tb.namespace(host).unwrap(), move || {
            exchange(public, src, 2)
                .map(drop)
                .map_err(|e| e.to_string())
        });
        assert_eq!(result.join().unwrap(), Ok(()), "{host}");
    }
}

/// a1 registers rank 2 (port 9200) with a's relay at `inside` and serves `count` relayed
/// connections; returns once registered, the thread giving each connection's client rank or
/// error in order.
fn a1_serves(
    ns_a1: String,
    inside: SocketAddr,
    count: usize,
) -> std::thread::JoinHandle<Vec<Result<u32, String>>> {
    let (reg_tx, reg_rx) = std::sync::mpsc::channel();
    let server = in_ns(&ns_a1, move || {
        let listener = TcpListener::bind("0.0.0.0:9200").unwrap();
        let registration = client::register(inside, &job_key(), JOB, 2, 9200).unwrap();
        reg_tx.send(()).unwrap();
        let mut seen = ReplayGuard::default();
        let results = (0..count)
            .map(|_| serve_one(&listener, 2, &mut seen).map_err(|e| e.to_string()))
            .collect();
        drop(registration);
        results
    });
    reg_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    server
}

#[test]
fn relay_between_private_clusters() {
    let Some(tb) = three_clusters("n") else {
        return;
    };
    let ns = |h: &str| tb.namespace(h).unwrap().to_string();
    let tmp = TempDir::new("netns");
    let jobs = jobs_dir(&tmp);
    let relay = RelayProcess::start(
        &["ip", "netns", "exec", &ns("fa")],
        "0.0.0.0:7390",
        &jobs,
        &[],
    );
    let inside: SocketAddr = "10.1.0.1:7390".parse().unwrap();
    let public: SocketAddr = "198.18.0.10:7390".parse().unwrap();

    // Rank 2 on a1 registers (from inside) and serves relayed connections one after another.
    let (reg_tx, reg_rx) = std::sync::mpsc::channel();
    let server = in_ns(&ns("a1"), move || {
        let listener = TcpListener::bind("0.0.0.0:9200").unwrap();
        let registration = client::register(inside, &job_key(), JOB, 2, 9200).unwrap();
        reg_tx.send(()).unwrap();
        let mut seen = ReplayGuard::default();
        let mut results = Vec::new();
        for _ in 0..2 {
            results.push(serve_one(&listener, 2, &mut seen).map_err(|e| e.to_string()));
        }
        drop(registration);
        results
    });
    reg_rx.recv_timeout(Duration::from_secs(10)).unwrap();

    // b1 (private, cluster b) → relay of a (through b's NAT) → a1; p1 (public) likewise.
    let from_b = in_ns(&ns("b1"), move || {
        exchange(public, 1, 2).map(drop).map_err(|e| e.to_string())
    });
    let result = from_b.join().unwrap();
    if result.is_err() {
        relay.signal("USR1");
        eprintln!("relay said: {:?}", relay.lines(Duration::from_millis(300)));
    }
    assert_eq!(result, Ok(()));
    let from_p = in_ns(&ns("p1"), move || {
        exchange(public, 0, 2).map(drop).map_err(|e| e.to_string())
    });
    let result = from_p.join().unwrap();
    if result.is_err() {
        relay.signal("USR1");
        eprintln!("relay said: {:?}", relay.lines(Duration::from_millis(300)));
    }
    assert_eq!(server.join().unwrap(), vec![Ok(1), Ok(0)]);
    assert_eq!(result, Ok(()));

    // Strangers, from cluster b.
    let strangers = in_ns(&ns("b1"), move || {
        let mut codes = Vec::new();
        codes.push(refused(client::connect(
            public,
            &JobKey([1; 32]),
            JOB,
            1,
            2,
        )));
        codes.push(refused(client::connect(public, &job_key(), JOB, 1, 3)));
        // A recorded CONNECT, replayed on a new connection.
        let mut first = TcpStream::connect(public).unwrap();
        let RelayFrame::Greeting { relay_nonce } = client::read_frame(&mut first).unwrap() else {
            panic!()
        };
        let recorded = relay::connect(&job_key(), &relay_nonce, JOB, 1, 2, [9; 32]).to_bytes();
        drop(first);
        let mut again = TcpStream::connect(public).unwrap();
        client::read_frame(&mut again).unwrap();
        again.write_all(&recorded).unwrap();
        match client::read_frame(&mut again).unwrap() {
            RelayFrame::Refused(code) => codes.push(code),
            other => panic!("{other:?}"),
        }
        // Garbage.
        let mut g = TcpStream::connect(public).unwrap();
        client::read_frame(&mut g).unwrap();
        g.write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            .unwrap();
        match client::read_frame(&mut g).unwrap() {
            RelayFrame::Refused(code) => codes.push(code),
            other => panic!("{other:?}"),
        }
        // Registering from outside the cluster.
        if let Err(ClientError::Refused(code)) = client::register(public, &job_key(), JOB, 1, 9300)
        {
            codes.push(code);
        }
        codes
    });
    assert_eq!(
        strangers.join().unwrap(),
        [
            RefuseCode::BadMac,
            RefuseCode::UnknownTarget,
            RefuseCode::BadMac,
            RefuseCode::Malformed,
            RefuseCode::NotInside
        ]
    );
    // The registration ended with its connection: rank 2 is no longer reachable.
    let gone = in_ns(&ns("p1"), move || {
        refused(client::connect(public, &job_key(), JOB, 0, 2))
    });
    assert_eq!(gone.join().unwrap(), RefuseCode::UnknownTarget);

    // Killing the relay closes a forwarded connection within a second.
    let (reg_tx, reg_rx) = std::sync::mpsc::channel();
    let server = in_ns(&ns("a2"), move || {
        let listener = TcpListener::bind("0.0.0.0:9200").unwrap();
        let _registration = client::register(inside, &job_key(), JOB, 3, 9200).unwrap();
        reg_tx.send(()).unwrap();
        let mut seen = ReplayGuard::default();
        let _ = serve_one(&listener, 3, &mut seen);
    });
    reg_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let mut s = in_ns(&ns("b2"), move || exchange(public, 1, 3).unwrap())
        .join()
        .unwrap();
    relay.signal("KILL");
    let t0 = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = s.read(&mut [0u8; 1]);
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t0.elapsed()
    );
    server.join().unwrap();
    drop(relay);
    tb.down().unwrap();
}

/// `--copy sockmap` across the testbed: b1 (private, through b's NAT) and p1 (public) reach a1
/// through a's relay, which forwards in the kernel: checksummed messages of 0 B … 8 MiB each
/// way, then half-closes either way round; the status line counts the kernel pairs.
#[test]
fn sockmap_relay_between_private_clusters() {
    let Some(tb) = three_clusters("s") else {
        return;
    };
    let ns = |h: &str| tb.namespace(h).unwrap().to_string();
    let tmp = TempDir::new("netns-sockmap");
    let jobs = jobs_dir(&tmp);
    let relay = RelayProcess::start(
        &["ip", "netns", "exec", &ns("fa")],
        "0.0.0.0:7390",
        &jobs,
        &["--copy", "sockmap"],
    );
    let (inside, public) = a_relay_addrs();
    let server = a1_serves(ns("a1"), inside, 2);
    b1_and_p1_exchange(&tb, public);
    assert_eq!(server.join().unwrap(), vec![Ok(1), Ok(0)]);
    for (i, (up, down)) in [(0, 0), (8 << 20, 1), (1, 8 << 20)].into_iter().enumerate() {
        let (reg_tx, reg_rx) = std::sync::mpsc::channel();
        let rank = 10 + i as u32;
        let serve = in_ns(&ns("a2"), move || {
            let listener = TcpListener::bind(("0.0.0.0", 9300 + rank as u16)).unwrap();
            let registration =
                client::register(inside, &job_key(), JOB, rank, 9300 + rank as u16).unwrap();
            reg_tx.send(listener).unwrap();
            registration
        });
        let listener = reg_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let _registration = serve.join().unwrap();
        // The listener was opened in a2's namespace; its socket stays there.
        in_ns(&ns("b2"), move || {
            half_close(public, listener, 1, rank, up, down)
        })
        .join()
        .unwrap();
    }
    relay.signal("USR1");
    let lines = relay.lines(Duration::from_millis(300));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("sockmap_pairs=5") && l.contains("errors=0")),
        "{lines:?}"
    );
    drop(relay);
    tb.down().unwrap();
}

/// CONNECT from rank `src` to `target` through the relay at `relay`, stopping at its answer:
/// the CONNECT (kept open: it holds the pinhole) and the pinhole's port.
fn ask_pinhole(relay: SocketAddr, src: u32, target: u32) -> (TcpStream, u16) {
    let mut s = TcpStream::connect_timeout(&relay, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let RelayFrame::Greeting { relay_nonce } = client::read_frame(&mut s).unwrap() else {
        panic!("no greeting")
    };
    let nonce = client::fresh_nonce().unwrap();
    let connect = relay::connect(&job_key(), &relay_nonce, JOB, src, target, nonce);
    s.write_all(&connect.to_bytes()).unwrap();
    match client::read_frame(&mut s).unwrap() {
        RelayFrame::Forwarded { target: t, port } if t == target => (s, port),
        other => panic!("expected FORWARDED, got {other:?}"),
    }
}

/// `--copy nat` across the testbed: b1 (private, through b's NAT) and p1 (public) reach a1
/// through pinholes of a's relay and the front node's forwarding, with checksummed messages of
/// 0 B … 8 MiB each way and no byte through the relay. A pinhole takes only its client's
/// address: another host is refused at it, a neighbour behind the same NAT gets through to
/// the target but is refused there (its INCOMING carries no valid MAC), and once the CONNECT
/// closes the pinhole is gone. The relay's chains go with it.
#[test]
fn nat_relay_between_private_clusters() {
    let Some(tb) = three_clusters("t") else {
        return;
    };
    let ns = |h: &str| tb.namespace(h).unwrap().to_string();
    let tmp = TempDir::new("netns-nat");
    let jobs = jobs_dir(&tmp);
    let relay = RelayProcess::start(
        &["ip", "netns", "exec", &ns("fa")],
        "0.0.0.0:7390",
        &jobs,
        &["--copy", "nat"],
    );
    let (inside, public) = a_relay_addrs();
    let server = a1_serves(ns("a1"), inside, 3);
    b1_and_p1_exchange(&tb, public);

    // A pinhole opened for b1 (seen from outside as b's front node).
    let (control, port) = in_ns(&ns("b1"), move || ask_pinhole(public, 1, 2))
        .join()
        .unwrap();
    let hole = SocketAddr::new(public.ip(), port);
    // p2 is another address: the pinhole does not lead anywhere for it.
    let dialled = in_ns(&ns("p2"), move || {
        TcpStream::connect_timeout(&hole, Duration::from_secs(3)).map(drop)
    })
    .join()
    .unwrap();
    assert!(dialled.is_err(), "p2 got through b1's pinhole");
    // b2 shares b1's public address, so it reaches a1, which refuses an INCOMING without the
    // job key's MAC.
    let forged = in_ns(&ns("b2"), move || {
        let mut s = TcpStream::connect_timeout(&hole, Duration::from_secs(3)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let incoming = relay::Incoming {
            job: JOB,
            src: 3,
            target: 2,
            nonce: [7; 32],
            e2e: [0; 32],
        };
        s.write_all(&RelayFrame::Incoming(incoming).to_bytes())
            .unwrap();
        client::read_frame(&mut s)
    })
    .join()
    .unwrap();
    assert!(
        matches!(forged, Ok(RelayFrame::Refused(RefuseCode::BadMac))),
        "{forged:?}"
    );
    // The CONNECT closes: so does the pinhole.
    drop(control);
    std::thread::sleep(Duration::from_millis(300));
    let late = in_ns(&ns("b2"), move || {
        TcpStream::connect_timeout(&hole, Duration::from_secs(3)).map(drop)
    })
    .join()
    .unwrap();
    assert!(late.is_err(), "the pinhole outlived its CONNECT");

    let served = server.join().unwrap();
    assert_eq!(served[..2], [Ok(1), Ok(0)]);
    assert!(
        served[2]
            .as_ref()
            .is_err_and(|e| e.contains("BadMac") || e.contains("MAC")),
        "{served:?}"
    );
    relay.signal("USR1");
    let lines = relay.lines(Duration::from_millis(300));
    assert!(
        lines.iter().any(|l| l.contains("pinholes=3")
            && l.contains("paired=0")
            && l.contains("bytes_in=0")
            && l.contains("errors=0")),
        "{lines:?}"
    );
    // A clean shutdown takes the chains away (a killed relay's are emptied by the next one).
    relay.signal("TERM");
    let mut relay = relay;
    assert!(relay.child.wait().unwrap().success());
    for table in ["nat", "filter"] {
        let rules = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns("fa"),
                "iptables",
                "-w",
                "-t",
                table,
                "-S",
            ])
            .output()
            .unwrap();
        let rules = String::from_utf8_lossy(&rules.stdout);
        assert!(!rules.contains("FERRY-RELAY"), "{table}: {rules}");
    }
    tb.down().unwrap();
}
