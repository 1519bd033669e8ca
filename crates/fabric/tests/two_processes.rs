//! Two processes: this test binary starts itself again as the peer (the `peer` test, which
//! does nothing unless FERRY_FABRIC_TEST_PEER names a provider). They swap endpoint names
//! and the peer's region over the child's stdin/stdout, then ping-pong 100 messages, and the
//! parent reads 1 MiB of the peer's memory. Without libfabric the tests say so and pass.

use std::io::{BufRead, BufReader, IoSlice, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use ferry_fabric::{Access, Completion, Endpoint, EndpointSpec, Library, OpKind, PeerAddr, Remote};

const PEER_ENV: &str = "FERRY_FABRIC_TEST_PEER";
const DEADLINE: Duration = Duration::from_secs(60);
const ROUNDS: u64 = 100;
const REGION: usize = 1 << 20;
const BYE: &[u8] = b"bye";

fn spec(provider: &str) -> EndpointSpec {
    EndpointSpec {
        provider: Some(provider.into()),
        domain: (provider == "tcp").then(|| "lo".to_string()),
        ..EndpointSpec::default()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn pattern(i: usize) -> u8 {
    (i % 241) as u8 ^ (i >> 12) as u8
}

/// Retries `op` with progress while it says EAGAIN.
fn start(
    ep: &mut Endpoint,
    done: &mut Vec<Completion>,
    mut op: impl FnMut(&mut Endpoint) -> ferry_fabric::Result<bool>,
) {
    let begin = Instant::now();
    while !op(ep).expect("start an operation") {
        ep.poll(done).expect("poll");
        assert!(begin.elapsed() < DEADLINE, "EAGAIN for ever");
    }
}

/// Polls until a completion of `kind` arrives and returns it.
fn wait_for(ep: &mut Endpoint, done: &mut Vec<Completion>, kind: OpKind) -> Completion {
    let begin = Instant::now();
    loop {
        if let Some(at) = done.iter().position(|c| c.kind == kind) {
            return done.remove(at);
        }
        ep.poll(done).expect("poll");
        assert!(
            begin.elapsed() < DEADLINE,
            "no {kind:?} completion: {done:?}"
        );
    }
}

/// The peer: echoes every message until "bye", serving reads of its region meanwhile.
#[test]
fn peer() {
    let Ok(provider) = std::env::var(PEER_ENV) else {
        return;
    };
    let lib = Library::load().expect("load");
    let mut ep = Endpoint::open(&lib, &spec(&provider)).expect("open");
    let mut memory: Vec<u8> = (0..REGION).map(pattern).collect();
    // SAFETY: `memory` outlives the region (dropped at the end of this function, after it).
    let region = unsafe { ep.register(memory.as_mut_ptr(), REGION, Access::REMOTE_READ) }.unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: as above.
    let buf_region =
        unsafe { ep.register(buf.as_mut_ptr(), 256, Access::SEND | Access::RECV) }.unwrap();
    let remote = region.remote();
    // On a line of its own: the harness may have written "test peer ... " before.
    println!("\nNAME {}", hex(&ep.name().unwrap()));
    println!("REGION {} {}", remote.addr, remote.key);
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .expect("parent's name");
    let parent = ep
        .insert(&unhex(line.trim().trim_start_matches("NAME ")))
        .expect("insert");
    let mut done = Vec::new();
    let (ptr, desc) = (buf.as_mut_ptr(), buf_region.desc());
    loop {
        // SAFETY: the receive and then the echo use `buf` one at a time, each completed
        // before the next starts.
        start(&mut ep, &mut done, |ep| unsafe {
            ep.post_recv(ptr.add(128), 128, desc, 1)
        });
        let len = wait_for(&mut ep, &mut done, OpKind::Recv)
            .result
            .expect("receive");
        if &buf[128..128 + len] == BYE {
            break;
        }
        buf.copy_within(128..128 + len, 0);
        let part = [IoSlice::new(&buf[..len])];
        start(&mut ep, &mut done, |ep| unsafe {
            ep.send(parent, &part, &[desc], 2)
        });
        wait_for(&mut ep, &mut done, OpKind::Send)
            .result
            .expect("echo");
    }
    drop((region, buf_region));
}

/// Kills the peer if the parent gives up (a failed assertion), so no process is left.
struct PeerProcess(Child);

impl Drop for PeerProcess {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn spawn_peer(provider: &str) -> (PeerProcess, ChildStdin, Vec<u8>, Remote) {
    let exe = std::env::current_exe().expect("this test binary");
    let mut child = Command::new(exe)
        .args(["peer", "--exact", "--nocapture", "--test-threads=1"])
        .env(PEER_ENV, provider)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the peer");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let peer = PeerProcess(child);
    // Read on a thread so that a silent peer is a timeout, not a hang; it reads to the end
    // (the peer's test harness writes its summary when we no longer listen).
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let (mut name, mut remote) = (None, None);
    while name.is_none() || remote.is_none() {
        let line = lines
            .recv_timeout(DEADLINE)
            .expect("the peer said nothing or ended early");
        if let Some(text) = line.strip_prefix("NAME ") {
            name = Some(unhex(text));
        } else if let Some(text) = line.strip_prefix("REGION ") {
            let mut numbers = text.split(' ').map(|n| n.parse::<u64>().expect("number"));
            remote = Some(Remote {
                addr: numbers.next().unwrap(),
                key: numbers.next().unwrap(),
            });
        }
    }
    (peer, stdin, name.unwrap(), remote.unwrap())
}

fn ping_pong(ep: &mut Endpoint, peer: PeerAddr, done: &mut Vec<Completion>) {
    let mut buf = vec![0u8; 256];
    // SAFETY: `buf` outlives the region, dropped at the end of this function.
    let region =
        unsafe { ep.register(buf.as_mut_ptr(), 256, Access::SEND | Access::RECV) }.unwrap();
    let (ptr, desc) = (buf.as_mut_ptr(), region.desc());
    for round in 0..ROUNDS {
        let message = format!("round {round}");
        buf[..message.len()].copy_from_slice(message.as_bytes());
        // SAFETY: each operation on `buf` completes before `buf` is touched again.
        start(ep, done, |ep| unsafe {
            ep.post_recv(ptr.add(128), 128, desc, 1)
        });
        let part = [IoSlice::new(&buf[..message.len()])];
        start(ep, done, |ep| unsafe { ep.send(peer, &part, &[desc], 2) });
        wait_for(ep, done, OpKind::Send).result.expect("send");
        let len = wait_for(ep, done, OpKind::Recv).result.expect("echo");
        assert_eq!(&buf[128..128 + len], message.as_bytes());
    }
    buf[..BYE.len()].copy_from_slice(BYE);
    let part = [IoSlice::new(&buf[..BYE.len()])];
    // SAFETY: as above.
    start(ep, done, |ep| unsafe { ep.send(peer, &part, &[desc], 3) });
    wait_for(ep, done, OpKind::Send).result.expect("bye");
}

fn two_processes(provider: &str) {
    let lib = match Library::load() {
        Ok(lib) => lib,
        Err(e) => return eprintln!("skipped: libfabric cannot be loaded: {e}"),
    };
    let mut ep = Endpoint::open(&lib, &spec(provider)).expect("open");
    let (mut child, mut stdin, name, remote) = spawn_peer(provider);
    let peer = ep.insert(&name).expect("insert the peer");
    writeln!(stdin, "NAME {}", hex(&ep.name().unwrap())).expect("tell the peer our name");
    let mut done = Vec::new();
    let mut target = vec![0u8; REGION];
    // SAFETY: `target` outlives the region, dropped below before it.
    let region = unsafe { ep.register(target.as_mut_ptr(), REGION, Access::READ) }.unwrap();
    let (ptr, desc) = (target.as_mut_ptr(), region.desc());
    // SAFETY: `target` is not touched until the read's completion.
    start(&mut ep, &mut done, |ep| unsafe {
        ep.read(peer, ptr, REGION, desc, remote, 4)
    });
    // The peer serves the read while it waits for the first message.
    assert_eq!(
        wait_for(&mut ep, &mut done, OpKind::Read).result,
        Ok(REGION)
    );
    drop(region);
    assert!(
        target.iter().enumerate().all(|(i, &b)| b == pattern(i)),
        "the read's bytes differ"
    );
    ping_pong(&mut ep, peer, &mut done);
    let begin = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("peer status") {
            break status;
        }
        ep.poll(&mut done).expect("poll");
        assert!(begin.elapsed() < DEADLINE, "the peer did not finish");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "the peer failed: {status}");
}

#[test]
fn two_processes_tcp() {
    two_processes("tcp");
}

#[test]
fn two_processes_shm() {
    two_processes("shm");
}
