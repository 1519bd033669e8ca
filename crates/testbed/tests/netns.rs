//! The testbed for real, as root: it builds and removes cleanly (also after a "crash"), private
//! hosts cannot be reached from outside their cluster, and they reach the WAN through NAT.
//! Without root these tests say so and pass.

use ferry_grid::Topology;
use ferry_testbed::{enter, leftovers, remove, Testbed};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

fn root() -> bool {
    let ok = ferry_testbed::is_root();
    if !ok {
        eprintln!("skipped: the testbed needs root");
    }
    ok
}

fn grid() -> Topology {
    Topology::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/grids/three.toml"
    )))
    .unwrap()
}

fn prefix(tag: char) -> String {
    format!("fy{}{tag}-", std::process::id())
}

/// Runs `f` on a thread inside namespace `ns`.
fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns).unwrap();
            f()
        })
        .join()
        .unwrap()
    })
}

/// Listens in `server_ns` on `port`, connects from `client_ns` to `addr`; returns the source
/// address the server saw, or the client's error.
fn try_connect(tb: &Testbed, server: &str, client: &str, addr: &str) -> Result<SocketAddr, String> {
    let server_ns = tb.namespace(server).unwrap().to_string();
    let client_ns = tb.namespace(client).unwrap().to_string();
    let listener = in_ns(&server_ns, || TcpListener::bind("0.0.0.0:9100").unwrap());
    listener.set_nonblocking(true).unwrap();
    let target: SocketAddr = format!("{addr}:9100").parse().unwrap();
    let connected = in_ns(&client_ns, || {
        TcpStream::connect_timeout(&target, Duration::from_millis(700)).map(|mut s| {
            s.write_all(b"x").unwrap();
        })
    });
    match connected {
        Ok(()) => {
            std::thread::sleep(Duration::from_millis(50));
            let (mut s, peer) = listener.accept().map_err(|e| e.to_string())?;
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            Ok(peer)
        }
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn up_and_down_leave_nothing_behind_even_after_a_crash() {
    if !root() {
        return;
    }
    let p = prefix('u');
    let tb = Testbed::up(&grid(), &p).unwrap();
    let made = leftovers(Some(&p)).unwrap();
    assert_eq!(made.len(), 9, "{made:?}");
    tb.down().unwrap();
    assert!(leftovers(Some(&p)).unwrap().is_empty());
    // A crashed run leaves its namespaces; removal by prefix finds them.
    let tb = Testbed::up(&grid(), &p).unwrap();
    std::mem::forget(tb);
    assert_eq!(leftovers(Some(&p)).unwrap().len(), 9);
    assert_eq!(remove(Some(&p)).unwrap().len(), 9);
    assert!(leftovers(Some(&p)).unwrap().is_empty());
    // And nothing was ever created in this namespace.
    let links = std::process::Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(!links.contains(&p), "{links}");
}

#[test]
fn private_hosts_are_unreachable_from_outside_and_reach_the_wan_through_nat() {
    if !root() {
        return;
    }
    let tb = Testbed::up(&grid(), &prefix('r')).unwrap();
    // Same cluster: direct, own address.
    let seen = try_connect(&tb, "a2", "a1", "10.1.0.12").unwrap();
    assert_eq!(seen.ip().to_string(), "10.1.0.11");
    // Private → public: through NAT, seen as the front's public address.
    let seen = try_connect(&tb, "p1", "a1", "198.18.1.1").unwrap();
    assert_eq!(seen.ip().to_string(), "198.18.0.10");
    let seen = try_connect(&tb, "p2", "b2", "198.18.1.2").unwrap();
    assert_eq!(seen.ip().to_string(), "198.18.0.20");
    // Private → another cluster's private host: no way.
    assert!(try_connect(&tb, "b1", "a1", "10.2.0.11").is_err());
    // Public → private: no route; with a route through the front, its FORWARD rule drops it.
    assert!(try_connect(&tb, "a1", "p1", "10.1.0.11").is_err());
    let p1 = tb.namespace("p1").unwrap().to_string();
    ferry_testbed::run(
        &[
            "ip",
            "-n",
            &p1,
            "route",
            "add",
            "10.1.0.0/24",
            "via",
            "198.18.0.10",
        ]
        .map(String::from),
    )
    .unwrap();
    assert!(try_connect(&tb, "a1", "p1", "10.1.0.11").is_err());
    // Public ↔ public, and a front's public address, are reachable.
    assert!(try_connect(&tb, "p2", "p1", "198.18.1.2").is_ok());
    assert!(try_connect(&tb, "fa", "p1", "198.18.0.10").is_ok());
}
