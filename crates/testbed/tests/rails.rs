//! Multi-rail links in the testbed for real, as root: every rail address of one host
//! reaches the same link's address of the other, a link's `rate` is a `tbf` that really limits
//! it, and a rail cut with `Testbed::set_link` stops carrying traffic (without falling back to
//! another link) until it is restored. Each test builds its own testbed under a per-run prefix
//! and removes it on drop, also when an assertion fails. Without root these tests say so and
//! pass.

use ferry_grid::Topology;
use ferry_testbed::{enter, leftovers, run, Testbed};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn root() -> bool {
    let ok = ferry_testbed::is_root() && std::path::Path::new("/run").is_dir() && ip_netns_works();
    if !ok {
        eprintln!("skipped: the testbed needs root and `ip netns`");
    }
    ok
}

fn ip_netns_works() -> bool {
    std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn grid(file: &str) -> Topology {
    Topology::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("grids")
            .join(file),
    )
    .expect("the grid file parses")
}

fn prefix(tag: char) -> String {
    format!("fy{}{tag}-", std::process::id())
}

/// The namespace of `host`.
fn ns(tb: &Testbed, host: &str) -> String {
    tb.namespace(host)
        .unwrap_or_else(|| panic!("no namespace for {host}"))
        .to_string()
}

/// Runs `f` on a thread inside namespace `ns`.
fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns).expect("enter the namespace");
            f()
        })
        .join()
        .expect("the namespace thread")
    })
}

/// Rail addresses of a host, rail 0 first.
fn rails(g: &Topology, host: &str) -> Vec<Ipv4Addr> {
    g.clusters
        .iter()
        .flat_map(|c| &c.hosts)
        .find(|h| h.name == host)
        .map(|h| h.rail_addrs())
        .unwrap_or_default()
}

/// Listens on `addr` in `server`'s namespace, connects to it from `client`'s; returns the
/// address the server saw the connection come from, or the client's error.
fn connect(tb: &Testbed, server: &str, client: &str, addr: Ipv4Addr) -> Result<Ipv4Addr, String> {
    let listener =
        in_ns(&ns(tb, server), || TcpListener::bind((addr, 0))).map_err(|e| e.to_string())?;
    let target = listener.local_addr().map_err(|e| e.to_string())?;
    in_ns(&ns(tb, client), || {
        TcpStream::connect_timeout(&target, Duration::from_millis(500))
    })
    .map_err(|e| e.to_string())?;
    let (_, peer) = listener.accept().map_err(|e| e.to_string())?;
    match peer {
        SocketAddr::V4(v4) => Ok(*v4.ip()),
        SocketAddr::V6(v6) => Err(format!("IPv6 peer {v6}")),
    }
}

/// Streams `bytes` from `client` to `server`'s `addr`; returns how long the server took from
/// accept to end of stream.
fn stream(tb: &Testbed, server: &str, client: &str, addr: Ipv4Addr, bytes: usize) -> Duration {
    let listener = in_ns(&ns(tb, server), || TcpListener::bind((addr, 0))).expect("listen");
    let target = listener.local_addr().expect("local address");
    let client_ns = ns(tb, client);
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            enter(&client_ns).expect("enter the client namespace");
            let mut c =
                TcpStream::connect_timeout(&target, Duration::from_secs(2)).expect("connect");
            c.write_all(&vec![7u8; bytes]).expect("send");
            c.shutdown(Shutdown::Write).expect("shutdown");
        });
        let (mut conn, _) = listener.accept().expect("accept");
        let start = Instant::now();
        let mut got = Vec::with_capacity(bytes);
        conn.read_to_end(&mut got).expect("receive");
        let took = start.elapsed();
        sender.join().expect("the sender");
        assert_eq!(got.len(), bytes);
        took
    })
}

fn qdisc(ns: &str, dev: &str) -> String {
    run(&["tc", "-n", ns, "qdisc", "show", "dev", dev].map(String::from)).expect("tc qdisc show")
}

#[test]
fn every_rail_reaches_the_same_link_and_a_link_rate_is_a_tbf() {
    if !root() {
        return;
    }
    let p = prefix('a');
    let mut g = grid("rails.toml");
    g.clusters[0].links[0].rate = Some("40mbit".into());
    {
        let tb = Testbed::up(&g, &p).expect("testbed up");
        let (r1, r2) = (rails(&g, "r1"), rails(&g, "r2"));
        assert_eq!(r1.len(), 2);
        for (rail, (&mine, &peer)) in r1.iter().zip(&r2).enumerate() {
            let seen =
                connect(&tb, "r2", "r1", peer).unwrap_or_else(|e| panic!("rail {rail}: {e}"));
            assert_eq!(
                seen, mine,
                "rail {rail} comes from r1's rail-{rail} address"
            );
            let seen =
                connect(&tb, "r1", "r2", mine).unwrap_or_else(|e| panic!("rail {rail}: {e}"));
            assert_eq!(seen, peer, "rail {rail} back");
        }
        // The shaped link has a tbf on both hosts' veths; the unshaped one has none.
        for host in ["r1", "r2"] {
            let q = qdisc(&ns(&tb, host), "rail1");
            assert!(
                q.contains("tbf") && q.contains("rate 40Mbit"),
                "{host}: {q}"
            );
            assert!(!qdisc(&ns(&tb, host), "eth0").contains("tbf"));
        }
        // And it really limits: 3 MB at 40 Mbit/s take about 0.6 s; the unshaped rail is faster.
        let bytes = 3_000_000;
        let shaped = stream(&tb, "r2", "r1", r2[1], bytes);
        let free = stream(&tb, "r2", "r1", r2[0], bytes);
        assert!(
            shaped >= Duration::from_millis(400),
            "3 MB at 40mbit in {shaped:?}"
        );
        assert!(free < shaped, "unshaped {free:?}, shaped {shaped:?}");
        eprintln!("3 MB: rail 1 at 40mbit {shaped:?}, rail 0 unshaped {free:?}");
    }
    assert!(leftovers(Some(&p)).expect("ip netns list").is_empty());
}

#[test]
fn a_cut_rail_carries_nothing_until_restored() {
    if !root() {
        return;
    }
    let p = prefix('b');
    let g = grid("rails-4.toml");
    {
        let tb = Testbed::up(&g, &p).expect("testbed up");
        let (r1, r2) = (rails(&g, "r1"), rails(&g, "r2"));
        assert_eq!(r1.len(), 4);
        for rail in 0..4 {
            assert_eq!(
                connect(&tb, "r2", "r1", r2[rail]),
                Ok(r1[rail]),
                "rail {rail}"
            );
        }

        // A connection on rail 1, then the cut: data written meanwhile does not arrive.
        let listener = in_ns(&ns(&tb, "r2"), || TcpListener::bind((r2[1], 0))).expect("listen");
        let target = listener.local_addr().expect("local address");
        let mut client = in_ns(&ns(&tb, "r1"), || {
            TcpStream::connect_timeout(&target, Duration::from_secs(1))
        })
        .expect("connect on rail 1");
        let (mut server, _) = listener.accept().expect("accept");
        server
            .set_read_timeout(Some(Duration::from_millis(400)))
            .expect("read timeout");
        tb.set_link("r1", 1, false).expect("cut rail 1");
        client
            .write_all(b"during the cut")
            .expect("write is buffered");
        let mut buf = [0u8; 64];
        match server.read(&mut buf) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            other => panic!("rail 1 carried data while cut: {other:?}"),
        }
        // New connections on the cut rail fail, in both directions; the others still work.
        assert!(connect(&tb, "r2", "r1", r2[1]).is_err());
        assert!(connect(&tb, "r1", "r2", r1[1]).is_err());
        for rail in [0, 2, 3] {
            assert_eq!(
                connect(&tb, "r2", "r1", r2[rail]),
                Ok(r1[rail]),
                "rail {rail}"
            );
        }

        // Restored: TCP's retransmission delivers what was written during the cut.
        tb.set_link("r1", 1, true).expect("restore rail 1");
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        let mut got = Vec::new();
        while got.len() < b"during the cut".len() {
            let n = server.read(&mut buf).expect("data after the restore");
            assert!(n > 0, "closed");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"during the cut");
        assert_eq!(connect(&tb, "r2", "r1", r2[1]), Ok(r1[1]));
        // The same from the command line, on the standing testbed.
        let link = |state| {
            ferry_testbed::cli::testbed_command(ferry_testbed::cli::TestbedArgs {
                action: ferry_testbed::cli::TestbedAction::Link {
                    grid: std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("grids/rails-4.toml"),
                    prefix: Some(p.clone()),
                    host: "r2".into(),
                    rail: 3,
                    state,
                },
            })
        };
        let show = || {
            run(&["ip", "-n", &ns(&tb, "r2"), "link", "show", "rail3"].map(String::from))
                .expect("ip link show")
        };
        assert_eq!(link(ferry_testbed::cli::LinkState::Down), 0);
        assert!(show().contains("state DOWN"), "{}", show());
        assert!(connect(&tb, "r2", "r1", r2[3]).is_err());
        assert_eq!(link(ferry_testbed::cli::LinkState::Up), 0);
        assert!(!show().contains("state DOWN"), "{}", show());
        assert_eq!(connect(&tb, "r2", "r1", r2[3]), Ok(r1[3]));
        assert!(matches!(
            tb.set_link("r1", 4, false),
            Err(ferry_testbed::TestbedError::NoSuchLink { rail: 4, .. })
        ));
    }
    assert!(leftovers(Some(&p)).expect("ip netns list").is_empty());
}
