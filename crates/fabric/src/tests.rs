//! Two endpoints in one process, on the `tcp` provider (`tcp;ofi_rxm`, loopback) and on
//! `shm`. Without libfabric the tests say so and pass.

use std::io::IoSlice;
use std::time::{Duration, Instant};

use crate::{
    Access, Completion, Endpoint, EndpointSpec, FabricError, Library, OpKind, PeerAddr, Region,
};

/// Long enough that only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(60);

fn library() -> Option<Library> {
    match Library::load() {
        Ok(lib) => Some(lib),
        Err(e) => {
            eprintln!("skipped: libfabric cannot be loaded: {e}");
            None
        }
    }
}

fn spec(provider: &str) -> EndpointSpec {
    EndpointSpec {
        provider: Some(provider.into()),
        // tcp: the loopback interface, which every machine has.
        domain: (provider == "tcp").then(|| "lo".to_string()),
        ..EndpointSpec::default()
    }
}

/// Two endpoints that know each other, and what each completed so far.
struct Pair {
    a: Endpoint,
    b: Endpoint,
    /// b's address at a, a's at b.
    b_at_a: PeerAddr,
    a_at_b: PeerAddr,
    at_a: Vec<Completion>,
    at_b: Vec<Completion>,
}

fn pair(provider: &str) -> Option<Pair> {
    let lib = library()?;
    let mut a = Endpoint::open(&lib, &spec(provider)).expect("open a");
    let mut b = Endpoint::open(&lib, &spec(provider)).expect("open b");
    let b_at_a = a.insert(&b.name().expect("name b")).expect("insert b");
    let a_at_b = b.insert(&a.name().expect("name a")).expect("insert a");
    Some(Pair {
        a,
        b,
        b_at_a,
        a_at_b,
        at_a: Vec::new(),
        at_b: Vec::new(),
    })
}

impl Pair {
    fn progress(&mut self) {
        self.a.poll(&mut self.at_a).expect("poll a");
        self.b.poll(&mut self.at_b).expect("poll b");
    }

    /// Starts an operation on `a` (or `b`), making progress on both while it says EAGAIN
    /// (rxm and shm do until a peer's connection is up).
    fn start(&mut self, on_b: bool, mut op: impl FnMut(&mut Endpoint) -> crate::Result<bool>) {
        let begin = Instant::now();
        loop {
            let ep = if on_b { &mut self.b } else { &mut self.a };
            if op(ep).expect("start an operation") {
                return;
            }
            self.progress();
            assert!(begin.elapsed() < DEADLINE, "EAGAIN for ever");
        }
    }

    /// Makes progress until `done` says so.
    fn until(&mut self, mut done: impl FnMut(&Pair) -> bool) {
        let begin = Instant::now();
        while !done(self) {
            self.progress();
            assert!(
                begin.elapsed() < DEADLINE,
                "no completion: a {:?}, b {:?}",
                self.at_a,
                self.at_b
            );
        }
    }
}

/// Registered memory; the region drops before the bytes.
struct Buf {
    region: Region,
    bytes: Vec<u8>,
}

fn buf(ep: &mut Endpoint, len: usize, access: Access) -> Buf {
    let bytes = vec![0u8; len];
    // SAFETY: the Vec's memory lives (unmoved: it is never resized) as long as the region.
    let region = unsafe { ep.register(bytes.as_ptr(), len, access) }.expect("register");
    Buf { region, bytes }
}

impl Buf {
    fn ptr(&mut self, at: usize) -> *mut u8 {
        self.bytes[at..].as_mut_ptr()
    }
}

fn has(list: &[Completion], kind: OpKind, context: u64) -> bool {
    list.iter().any(|c| c.kind == kind && c.context == context)
}

fn send_recv_both_ways(provider: &str) {
    let Some(mut p) = pair(provider) else { return };
    let mut a_buf = buf(&mut p.a, 256, Access::SEND | Access::RECV);
    let mut b_buf = buf(&mut p.b, 256, Access::SEND | Access::RECV);
    let (b_at_a, a_at_b) = (p.b_at_a, p.a_at_b);
    let (a_recv, a_desc) = (a_buf.ptr(128), a_buf.region.desc());
    let (b_recv, b_desc) = (b_buf.ptr(128), b_buf.region.desc());
    a_buf.bytes[..11].copy_from_slice(b"hello world");
    b_buf.bytes[..5].copy_from_slice(b"reply");
    // SAFETY (all four): the buffers outlive the operations (`until` waits for them).
    p.start(true, |b| unsafe { b.post_recv(b_recv, 128, b_desc, 1) });
    p.start(false, |a| unsafe { a.post_recv(a_recv, 128, a_desc, 2) });
    let (head, tail) = (
        IoSlice::new(&a_buf.bytes[..5]),
        IoSlice::new(&a_buf.bytes[5..11]),
    );
    p.start(false, |a| unsafe {
        a.send(b_at_a, &[head, tail], &[a_desc, a_desc], 3)
    });
    let reply = IoSlice::new(&b_buf.bytes[..5]);
    p.start(true, |b| unsafe { b.send(a_at_b, &[reply], &[b_desc], 4) });
    p.until(|p| p.at_a.len() == 2 && p.at_b.len() == 2);
    assert!(has(&p.at_a, OpKind::Send, 3) && has(&p.at_b, OpKind::Send, 4));
    let got_b = p.at_b.iter().find(|c| c.kind == OpKind::Recv).unwrap();
    assert_eq!((got_b.context, got_b.result.clone()), (1, Ok(11)));
    assert_eq!(&b_buf.bytes[128..139], b"hello world");
    let got_a = p.at_a.iter().find(|c| c.kind == OpKind::Recv).unwrap();
    assert_eq!((got_a.context, got_a.result.clone()), (2, Ok(5)));
    assert_eq!(&a_buf.bytes[128..133], b"reply");
    assert_eq!((p.a.in_flight(), p.b.in_flight()), (0, 0));
}

const MESSAGES: u64 = 10_000;
const SLOT: usize = 64;
const RECV_SLOTS: usize = 32;
const SEND_SLOTS: usize = 16;

/// How `send_one` went.
#[derive(PartialEq)]
enum Sent {
    /// Sent from the slot, which stays busy until the send's completion.
    Posted,
    /// Injected: copied at once, no completion, the slot stays free.
    Injected,
    /// EAGAIN.
    Again,
}

/// Sends message `index` from send slot `slot`, or injects every third one.
fn send_one(a: &mut Endpoint, to: PeerAddr, src: &mut Buf, slot: usize, index: u64) -> Sent {
    let at = slot * SLOT;
    src.bytes[at..at + 8].copy_from_slice(&index.to_le_bytes());
    src.bytes[at + 8..at + SLOT].fill(index as u8);
    let len = 8 + (index as usize % (SLOT - 8)) + 1;
    if index.is_multiple_of(3) && len <= a.info().provider.inject_size {
        return match a.inject(to, &src.bytes[at..at + len]).expect("inject") {
            true => Sent::Injected,
            false => Sent::Again,
        };
    }
    let part = IoSlice::new(&src.bytes[at..at + len]);
    // SAFETY: slot `slot` stays untouched until its completion (the caller's bookkeeping).
    match unsafe { a.send(to, &[part], &[src.region.desc()], slot as u64) }.expect("send") {
        true => Sent::Posted,
        false => Sent::Again,
    }
}

fn check_message(bytes: &[u8], len: usize, seen: &mut [bool]) {
    let index = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert_eq!(
        len,
        8 + (index as usize % (SLOT - 8)) + 1,
        "length of message {index}"
    );
    assert!(
        bytes[8..len].iter().all(|&x| x == index as u8),
        "bytes of message {index}"
    );
    assert!(
        !std::mem::replace(&mut seen[index as usize], true),
        "message {index} twice"
    );
}

fn many_small_messages(provider: &str) {
    let Some(Pair {
        mut a,
        mut b,
        b_at_a,
        ..
    }) = pair(provider)
    else {
        return;
    };
    let mut src = buf(&mut a, SEND_SLOTS * SLOT, Access::SEND);
    let mut dst = buf(&mut b, RECV_SLOTS * SLOT, Access::RECV);
    let post = |b: &mut Endpoint, dst: &mut Buf, slot: usize| {
        // SAFETY: slot `slot` of dst is not read until its completion.
        while !unsafe { b.post_recv(dst.ptr(slot * SLOT), SLOT, dst.region.desc(), slot as u64) }
            .expect("post_recv")
        {
            b.poll(&mut Vec::new()).expect("poll");
        }
    };
    for slot in 0..RECV_SLOTS {
        post(&mut b, &mut dst, slot);
    }
    let mut free_send: Vec<usize> = (0..SEND_SLOTS).collect();
    let (mut next, mut received, mut eagain) = (0u64, 0u64, 0u64);
    let mut seen = vec![false; MESSAGES as usize];
    let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while received < MESSAGES {
        while next < MESSAGES {
            let Some(&slot) = free_send.last() else { break };
            match send_one(&mut a, b_at_a, &mut src, slot, next) {
                Sent::Again => {
                    eagain += 1;
                    break;
                }
                Sent::Posted => drop(free_send.pop()),
                Sent::Injected => {}
            }
            next += 1;
        }
        a.poll(&mut at_a).expect("poll a");
        for done in at_a.drain(..) {
            assert_eq!(
                (done.kind, done.result.is_ok()),
                (OpKind::Send, true),
                "{done:?}"
            );
            free_send.push(done.context as usize);
        }
        b.poll(&mut at_b).expect("poll b");
        for done in at_b.drain(..) {
            let slot = done.context as usize;
            let len = done.result.expect("receive");
            check_message(&dst.bytes[slot * SLOT..(slot + 1) * SLOT], len, &mut seen);
            received += 1;
            post(&mut b, &mut dst, slot);
        }
        assert!(
            start.elapsed() < DEADLINE,
            "stuck at {received} of {MESSAGES} received"
        );
    }
    assert!(seen.iter().all(|&s| s));
    eprintln!("{provider}: {MESSAGES} messages, {eagain} EAGAIN on send");
}

fn read_8_mib(provider: &str) {
    const LEN: usize = 8 << 20;
    let Some(mut p) = pair(provider) else { return };
    let mut source = buf(&mut p.b, LEN, Access::REMOTE_READ);
    for (i, byte) in source.bytes.iter_mut().enumerate() {
        *byte = (i % 251) as u8 ^ (i >> 16) as u8;
    }
    let mut target = buf(&mut p.a, LEN, Access::READ);
    let (remote, peer, to, desc) = (
        source.region.remote(),
        p.b_at_a,
        target.ptr(0),
        target.region.desc(),
    );
    // SAFETY: target outlives the read (`until` waits for its completion).
    p.start(false, |a| unsafe { a.read(peer, to, LEN, desc, remote, 7) });
    p.until(|p| !p.at_a.is_empty());
    assert_eq!(
        p.at_a[0],
        Completion {
            context: 7,
            kind: OpKind::Read,
            result: Ok(LEN)
        }
    );
    let first_bad = target
        .bytes
        .iter()
        .zip(&source.bytes)
        .position(|(x, y)| x != y);
    assert_eq!(first_bad, None, "the read's bytes differ");
}

fn write_1_mib(provider: &str) {
    const LEN: usize = 1 << 20;
    let Some(mut p) = pair(provider) else { return };
    let mut source = buf(&mut p.a, LEN, Access::WRITE);
    for (i, byte) in source.bytes.iter_mut().enumerate() {
        *byte = (i % 253) as u8;
    }
    let target = buf(&mut p.b, LEN, Access::REMOTE_WRITE);
    // 100 bytes in: the peer's address plus an offset.
    let mut remote = target.region.remote();
    remote.addr += 100;
    let (peer, from, desc) = (p.b_at_a, source.ptr(0), source.region.desc());
    // SAFETY: source outlives the write.
    p.start(false, |a| unsafe {
        a.write(peer, from, LEN - 100, desc, remote, 9)
    });
    // The initiator's completion says the data left; the target's memory is checked as the
    // target makes progress.
    p.until(|p| !p.at_a.is_empty() && target.bytes[100..] == source.bytes[..LEN - 100]);
    assert_eq!(
        p.at_a[0],
        Completion {
            context: 9,
            kind: OpKind::Write,
            result: Ok(LEN - 100)
        }
    );
    assert!(
        target.bytes[..100].iter().all(|&x| x == 0),
        "bytes before the offset written"
    );
}

fn truncated_receive(provider: &str) {
    let Some(mut p) = pair(provider) else { return };
    let mut small = buf(&mut p.b, 16, Access::RECV);
    let mut big = buf(&mut p.a, 100, Access::SEND);
    big.bytes.fill(0xab);
    let (to, to_desc, peer, from_desc) = (
        small.ptr(0),
        small.region.desc(),
        p.b_at_a,
        big.region.desc(),
    );
    let part = IoSlice::new(&big.bytes);
    // SAFETY: both outlive their operations.
    p.start(true, |b| unsafe { b.post_recv(to, 16, to_desc, 5) });
    p.start(false, |a| unsafe { a.send(peer, &[part], &[from_desc], 6) });
    p.until(|p| !p.at_a.is_empty() && !p.at_b.is_empty());
    let got = &p.at_b[0];
    assert_eq!((got.context, got.kind), (5, OpKind::Recv));
    let error = got
        .result
        .clone()
        .expect_err("a 100-byte message into 16 bytes must be reported");
    eprintln!(
        "{provider}: truncated receive reported as {error} (overflow {})",
        error.overflow
    );
    assert!(error.is_truncation(), "{error:?}");
}

fn malformed_address(provider: &str) {
    let Some(lib) = library() else { return };
    let mut a = Endpoint::open(&lib, &spec(provider)).expect("open");
    let name = a.name().unwrap();
    for bad in [
        &[][..],
        &[1, 2, 3][..],
        &name[..name.len() - 1],
        &vec![0xff; name.len()][..],
    ] {
        match a.insert(bad) {
            Err(FabricError::BadAddress { len, .. }) => assert_eq!(len, bad.len()),
            other => panic!("{bad:?} inserted: {other:?}"),
        }
    }
}

fn wait_fd_readable(provider: &str) {
    let Some(mut p) = pair(provider) else { return };
    let Some(fd) = p.b.wait_fd() else {
        eprintln!("{provider}: no wait fd (the provider has no FI_WAIT_FD CQ); try_wait refuses");
        assert!(!p.b.try_wait());
        return;
    };
    let mut dst = buf(&mut p.b, 64, Access::RECV);
    let (to, desc, peer) = (dst.ptr(0), dst.region.desc(), p.b_at_a);
    // SAFETY: dst outlives the receive.
    p.start(true, |b| unsafe { b.post_recv(to, 64, desc, 1) });
    // Bring the connection up first: the wait is for the message, not for connecting.
    p.start(false, |a| a.inject(peer, b"hello"));
    p.until(|p| !p.at_b.is_empty());
    assert_eq!(p.at_b.remove(0).result, Ok(5));
    p.start(true, |b| unsafe { b.post_recv(to, 64, desc, 2) });
    let begin = Instant::now();
    while !p.b.try_wait() {
        p.progress();
        assert!(
            p.at_b.is_empty(),
            "a completion before the message was sent"
        );
        assert!(
            begin.elapsed() < DEADLINE,
            "try_wait never allowed sleeping"
        );
    }
    p.start(false, |a| a.inject(peer, b"wake up"));
    let mut readable = false;
    while !readable {
        p.a.poll(&mut p.at_a).unwrap();
        let mut pollfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, 100 ms.
        readable = unsafe { libc::poll(&mut pollfd, 1, 100) } == 1;
        assert!(
            begin.elapsed() < DEADLINE,
            "the wait fd never became readable"
        );
    }
    p.until(|p| !p.at_b.is_empty());
    assert_eq!(p.at_b[0].result, Ok(7));
    assert_eq!(&dst.bytes[..7], b"wake up");
}

fn lists_itself(provider: &str) {
    let Some(lib) = library() else { return };
    let found = lib.providers(&spec(provider)).unwrap();
    assert!(!found.is_empty(), "{provider} not offered");
    for p in &found {
        assert!(spec(provider).matches_provider(&p.provider));
        eprintln!(
            "{} on {} / {}: mr_mode {}, caps {}, mode {:#x}, max message {}, inject {}, iov {}",
            p.provider,
            p.fabric,
            p.domain,
            p.mr_mode,
            p.caps,
            p.mode,
            p.max_msg_size,
            p.inject_size,
            p.iov_limit
        );
    }
    let ep = Endpoint::open(&lib, &spec(provider)).unwrap();
    assert_eq!(ep.info().provider.endpoint_type, crate::ffi::FI_EP_RDM);
    eprintln!(
        "{provider}: opened with API {:?}, wait fd {:?}",
        ep.info().api_version,
        ep.wait_fd()
    );
}

macro_rules! on_providers {
    ($($test:ident),*) => {
        mod tcp { $( #[test] fn $test() { super::$test("tcp") } )* }
        mod shm { $( #[test] fn $test() { super::$test("shm") } )* }
    };
}

on_providers!(
    send_recv_both_ways,
    many_small_messages,
    read_8_mib,
    write_1_mib,
    truncated_receive,
    malformed_address,
    wait_fd_readable,
    lists_itself
);

#[test]
fn provider_filter_matches_layers() {
    let spec = EndpointSpec::provider("tcp");
    assert!(spec.matches_provider("tcp;ofi_rxm") && spec.matches_provider("TCP"));
    assert!(!spec.matches_provider("shm") && !spec.matches_provider("tcpx"));
    let list = EndpointSpec::provider("verbs, efa");
    assert!(list.matches_provider("verbs;ofi_rxm") && list.matches_provider("efa"));
    assert!(EndpointSpec::default().matches_provider("anything"));
}

#[test]
fn unknown_provider_is_a_typed_error() {
    let Some(lib) = library() else { return };
    match Endpoint::open(&lib, &EndpointSpec::provider("no-such-provider")) {
        Err(FabricError::NoProvider { wanted, .. }) => assert!(wanted.contains("no-such-provider")),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("opened on a provider that does not exist"),
    }
    assert!(lib
        .providers(&EndpointSpec::provider("no-such-provider"))
        .unwrap()
        .is_empty());
}

#[test]
fn load_reports_a_library_that_is_not_libfabric() {
    match Library::load_from("libc.so.6") {
        Err(FabricError::Symbol { path, symbol, .. }) => {
            assert_eq!((path.as_str(), symbol), ("libc.so.6", "fi_getinfo"))
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("libc loaded as libfabric"),
    }
}
