//! The bootstrap server driven in-process by real clients (std sockets + the pmi codec).

mod common;

use common::{assert_refused, stranger_attempts, Client};
use ferry_launch::{BootstrapEvent, BootstrapServer, RankSession};
use ferry_wire::pmi::{hello_mac, Reply, Request, MAX_LINE, VERSION};
use ferry_wire::JobKey;
use std::collections::HashSet;
use std::thread;
use std::time::{Duration, Instant};

fn key() -> JobKey {
    JobKey([0xa7; 32])
}

/// Collects events until `done` says so (or 10 s pass).
fn events_until(
    server: &BootstrapServer,
    mut done: impl FnMut(&[BootstrapEvent]) -> bool,
) -> Vec<BootstrapEvent> {
    let until = Instant::now() + Duration::from_secs(10);
    let mut events = Vec::new();
    while !done(&events) {
        assert!(Instant::now() < until, "events so far: {events:?}");
        if let Some(e) = server.next_event(Duration::from_millis(50)) {
            events.push(e);
        }
    }
    events
}

#[test]
fn put_fence_get_across_ranks_with_repeated_fences() {
    const N: u32 = 6;
    let server = BootstrapServer::start(N, key()).unwrap();
    let addr = server.addr();
    let ranks: Vec<_> = (0..N)
        .map(|rank| {
            thread::spawn(move || {
                let mut c = Client::hello(addr, &key(), rank);
                c.put(
                    &format!("card-{rank}"),
                    &format!("tcp;127.0.0.1:{}", 4000 + rank),
                );
                c.fence();
                for peer in 0..N {
                    let card = c.get(&format!("card-{peer}"));
                    assert_eq!(card, Some(format!("tcp;127.0.0.1:{}", 4000 + peer)));
                }
                assert_eq!(c.get("never-put"), None);
                // Fences repeat, each one a barrier for the puts before it.
                for generation in 0..5 {
                    c.put(&format!("g{generation}-{rank}"), "x");
                    c.fence();
                    for peer in 0..N {
                        assert_eq!(
                            c.get(&format!("g{generation}-{peer}")).as_deref(),
                            Some("x")
                        );
                    }
                }
                c.finalize();
            })
        })
        .collect();
    for rank in ranks {
        rank.join().unwrap();
    }
    let events = events_until(&server, |events| {
        events
            .iter()
            .filter(|e| matches!(e, BootstrapEvent::Closed { .. }))
            .count()
            == N as usize
    });
    for rank in 0..N {
        assert!(events.contains(&BootstrapEvent::Connected { rank }));
        assert!(events.contains(&BootstrapEvent::Finalized { rank }));
        assert!(events.contains(&BootstrapEvent::Closed {
            rank,
            finalized: true
        }));
        assert_eq!(
            server.session(rank),
            RankSession::Closed { finalized: true }
        );
    }
}

#[test]
fn fence_waits_for_every_rank() {
    let server = BootstrapServer::start(2, key()).unwrap();
    let addr = server.addr();
    let early = thread::spawn(move || {
        let mut c = Client::hello(addr, &key(), 0);
        let start = Instant::now();
        c.fence();
        start.elapsed()
    });
    thread::sleep(Duration::from_millis(300));
    let mut late = Client::hello(addr, &key(), 1);
    late.fence();
    let waited = early.join().unwrap();
    assert!(
        waited >= Duration::from_millis(250),
        "fence returned after {waited:?}"
    );
}

#[test]
fn strangers_are_refused_and_ranks_still_work() {
    let server = BootstrapServer::start_with_timeout(2, key(), Duration::from_millis(300)).unwrap();
    let addr = server.addr();
    stranger_attempts(addr, 2);

    // Right key, wrong protocol version.
    let (mut c, nonce) = Client::open(addr);
    let line = Request::Hello {
        version: VERSION + 1,
        rank: 0,
        mac: hello_mac(&key(), &nonce, 0),
    }
    .encode()
    .unwrap();
    c.send_raw(line.as_bytes()).unwrap();
    assert_refused(&mut c, "wrong version");

    // A MAC made for another nonce (a replayed hello).
    let (mut c, _) = Client::open(addr);
    let line = Request::Hello {
        version: VERSION,
        rank: 0,
        mac: hello_mac(&key(), &[0; 32], 0),
    }
    .encode()
    .unwrap();
    c.send_raw(line.as_bytes()).unwrap();
    assert_refused(&mut c, "replayed MAC");

    // A silent stranger is dropped after the handshake timeout.
    let start = Instant::now();
    let (mut silent, _) = Client::open(addr);
    assert_refused(&mut silent, "silent");
    assert!(start.elapsed() < Duration::from_secs(5));

    // None of that touched the job: both ranks authenticate and fence.
    let mut r0 = Client::hello(addr, &key(), 0);
    // A second connection claiming rank 0 is refused.
    let (mut dup, nonce) = Client::open(addr);
    let line = Request::Hello {
        version: VERSION,
        rank: 0,
        mac: hello_mac(&key(), &nonce, 0),
    }
    .encode()
    .unwrap();
    dup.send_raw(line.as_bytes()).unwrap();
    assert_refused(&mut dup, "duplicate rank");

    let r1 = thread::spawn(move || {
        let mut r1 = Client::hello(addr, &key(), 1);
        r1.fence();
        r1.finalize();
    });
    r0.fence();
    r0.finalize();
    r1.join().unwrap();
    let events = events_until(&server, |events| {
        events
            .iter()
            .filter(|e| matches!(e, BootstrapEvent::Finalized { .. }))
            .count()
            == 2
    });
    let connected: HashSet<_> = events
        .iter()
        .filter_map(|e| match e {
            BootstrapEvent::Connected { rank } => Some(*rank),
            _ => None,
        })
        .collect();
    assert_eq!(connected, HashSet::from([0, 1]), "{events:?}");
}

#[test]
fn malformed_requests_get_errors_and_overlong_lines_close() {
    let server = BootstrapServer::start(1, key()).unwrap();
    let mut c = Client::hello(server.addr(), &key(), 0);
    for bad in [
        &b"fetch x\n"[..],
        b"put a/b c\n",
        b"put a b c\n",
        b"\xff\xfe\n",
        b"hello 1 0 00\n",
        b"\n",
    ] {
        c.send_raw(bad).unwrap();
        assert!(
            matches!(c.reply(), Some(Reply::Error(_))),
            "{:?} must get an error",
            String::from_utf8_lossy(bad)
        );
    }
    // The session goes on.
    c.put("k", "v");
    assert_eq!(c.get("k").as_deref(), Some("v"));
    // Requests may arrive several per write.
    c.send_raw(b"put a 1\nget a\n").unwrap();
    assert_eq!(c.reply(), Some(Reply::Ok));
    assert_eq!(c.reply(), Some(Reply::Value("1".into())));
    // A line over MAX_LINE ends the session.
    let _ = c.send_raw(format!("put k {}\n", "v".repeat(MAX_LINE)).as_bytes());
    assert_eq!(c.drain(), vec![]);
    events_until(&server, |events| {
        events.contains(&BootstrapEvent::Closed {
            rank: 0,
            finalized: false,
        })
    });
    assert_eq!(server.session(0), RankSession::Closed { finalized: false });
}

#[test]
fn abort_is_reported() {
    let server = BootstrapServer::start(2, key()).unwrap();
    let mut c = Client::hello(server.addr(), &key(), 1);
    c.send_raw(b"abort 7 out of cheese\n").unwrap();
    let events = events_until(&server, |events| {
        events
            .iter()
            .any(|e| matches!(e, BootstrapEvent::Abort { .. }))
    });
    assert!(events.contains(&BootstrapEvent::Abort {
        rank: 1,
        code: 7,
        message: "out of cheese".into()
    }));
}

#[test]
fn shutdown_releases_a_waiting_fence() {
    let mut server = BootstrapServer::start(2, key()).unwrap();
    let addr = server.addr();
    let waiter = thread::spawn(move || {
        let mut c = Client::hello(addr, &key(), 0);
        c.request(&Request::Fence)
    });
    events_until(&server, |events| !events.is_empty());
    thread::sleep(Duration::from_millis(100));
    server.shutdown();
    assert_eq!(waiter.join().unwrap(), None);
}

#[test]
fn spawn_reserves_the_next_universe_ranks_and_each_world_fences_on_its_own() {
    let server = BootstrapServer::start(1, key()).unwrap();
    let addr = server.addr();
    let apps = vec![ferry_wire::pmi::App {
        procs: 2,
        command: "/bin/true".into(),
        wdir: String::new(),
        args: vec!["a b".into()],
    }];
    let asked = apps.clone();
    let parent = thread::spawn(move || {
        let mut c = Client::hello(addr, &key(), 0);
        let reply = c.request(&Request::Spawn {
            parent: "7,0".into(),
            apps: asked,
        });
        // The launcher's world is of one rank: its fence waits for nobody else.
        c.fence();
        reply
    });
    // The monitor's part: the event names the new world; the rank waits for the answer.
    let events = events_until(&server, |e| {
        e.iter().any(|e| matches!(e, BootstrapEvent::Spawn { .. }))
    });
    let spawn = events
        .iter()
        .find(|e| matches!(e, BootstrapEvent::Spawn { .. }))
        .unwrap();
    assert_eq!(
        spawn,
        &BootstrapEvent::Spawn {
            rank: 0,
            base: 1,
            world: 1,
            parent: "7,0".into(),
            apps,
        }
    );
    server.answer_spawn(1, Ok(()));
    assert_eq!(
        parent.join().unwrap(),
        Some(Reply::Spawned { base: 1, world: 1 })
    );
    // The new world's processes are universe ranks 1 and 2, and fence together.
    let children: Vec<_> = (1..3)
        .map(|rank| {
            thread::spawn(move || {
                let mut c = Client::hello(addr, &key(), rank);
                c.put(&format!("card-{rank}"), "x");
                c.fence();
                let other = 3 - rank;
                assert_eq!(c.get(&format!("card-{other}")).as_deref(), Some("x"));
            })
        })
        .collect();
    for c in children {
        c.join().unwrap();
    }
    // A rank beyond the job is still refused.
    let (mut stranger, nonce) = Client::open(addr);
    let mac = hello_mac(&key(), &nonce, 3);
    let reply = stranger.request(&Request::Hello {
        version: VERSION,
        rank: 3,
        mac,
    });
    assert!(matches!(reply, Some(Reply::Error(_))), "{reply:?}");
}
