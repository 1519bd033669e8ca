//! In-kernel forwarding of relayed pairs: a BPF `sk_skb` stream-verdict program and its maps,
//! assembled here and loaded with the `bpf(2)` system call.
//!
//! Once a pair is set up (CONNECT gated, target dialled, ACCEPTED), both sockets go into a
//! `SOCKHASH` whose verdict program sends every byte that arrives on one socket to the other
//! socket's egress (`bpf_sk_redirect_hash`). The kernel then forwards in the receive softirq
//! and a workqueue; the relay process no longer reads or writes the pair's bytes.
//!
//! One [`Forwarder`] per relay process, shared by all pairs:
//!
//! - `peers` (`HASH`, socket cookie → [`PeerEntry`]): the peer's cookie and a byte counter the
//!   program adds each redirected skb's length to. Only the daemon writes keys, and only for
//!   verified pairs: a socket without an entry has its bytes dropped, never sent anywhere.
//! - `egress` (`SOCKHASH`, cookie → socket, no program): where redirects look up the peer.
//! - `ingress` (`SOCKHASH`, cookie → socket, the verdict program attached): a socket whose
//!   bytes are forwarded. A pair goes into `egress` first, so the first byte the program sees
//!   already has its destination.
//!
//! The program is 27 instructions written out below rather than compiled from C: no
//! clang, bpftool or libbpf at build time, no object file to ship, and the verifier checks it
//! at load like any other.
//!
//! Kernel facts the daemon's switch-over relies on (checked by the tests here): bytes that sit
//! in a socket's receive queue when it enters `ingress` are not looked at until the socket's
//! next `data_ready`, which [`Forwarder::add_pair`] raises itself (setting `SO_RCVLOWAT` to 1
//! calls it when bytes are queued), and they are handled in order before later bytes; a FIN
//! is not forwarded (the daemon shuts the other side once every byte went out); redirected
//! skbs wait in the destination's queue of the psock without limit while its send buffer is
//! full, so [`written`] tells when they have all entered the socket; and that queue is sent
//! only while the send buffer is less than half full (hence [`SNDBUF`]).
//!
//! Not solved: that queue has no limit, and the source's window stays open (256 MiB went in
//! within 2 s towards a socket nobody reads, test `slow_destination_backlog`), so a destination
//! slower than its source — a slow WAN link out of the cluster — makes the relay's kernel hold
//! whatever the source sends ahead. Pausing a source by taking it out of the verdict map loses
//! bytes: a `data_ready` already under way then finds no program and drops what it reads
//! (46 segments of a 2 GiB stream, `ss -m` d46, bench/results/2026-11-23-relay-sockmap/).
//! ferry's rendezvous keeps the amount bounded by the messages in flight, not the relay.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;

const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_SOCKHASH: u32 = 18;
const BPF_PROG_TYPE_SK_SKB: u32 = 14;
const BPF_SK_SKB_STREAM_VERDICT: u32 = 5;
const BPF_ANY: u64 = 0;

/// The value of a `peers` entry, as the program reads it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerEntry {
    /// Socket cookie of the socket the bytes go to.
    pub peer: u64,
    /// Bytes the program redirected from this socket to the peer.
    pub bytes: u64,
}

/// Why in-kernel forwarding cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SockmapError {
    /// A `bpf(2)` command failed (no privilege, kernel without sockmap, verifier refusal).
    #[error("bpf {what}: {source}{log}")]
    Bpf {
        /// Which step.
        what: &'static str,
        /// The error.
        source: io::Error,
        /// The verifier's log, when it said something.
        log: String,
    },
    /// A socket option around the maps failed.
    #[error("{what}: {source}")]
    Socket {
        /// Which step.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// One `struct bpf_insn`.
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        }
    }
    fn bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

// Opcodes (linux/bpf.h, bpf_common.h).
const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const LDX_DW: u8 = 0x79; // BPF_LDX | BPF_MEM | BPF_DW
const STX_DW: u8 = 0x7b; // BPF_STX | BPF_MEM | BPF_DW
const ATOMIC_DW: u8 = 0xdb; // BPF_STX | BPF_ATOMIC | BPF_DW, imm BPF_ADD
const MOV64_REG: u8 = 0xbf;
const MOV64_IMM: u8 = 0xb7;
const ADD64_IMM: u8 = 0x07;
const JEQ_IMM: u8 = 0x15;
const JNE_IMM: u8 = 0x55;
const LD_IMM64: u8 = 0x18;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const PSEUDO_MAP_FD: u8 = 1;

const FN_MAP_LOOKUP_ELEM: i32 = 1;
const FN_GET_SOCKET_COOKIE: i32 = 46;
const FN_SK_REDIRECT_HASH: i32 = 72;
const SK_DROP: i32 = 0;
const SK_PASS: i32 = 1;

/// The verdict program. In C:
///
/// ```c
/// int verdict(struct __sk_buff *skb) {
///     __u32 len = skb->len;
///     if (len == 0) return SK_DROP;           // a bare FIN: nothing to send
///     __u64 me = bpf_get_socket_cookie(skb);
///     struct peer_entry *e = bpf_map_lookup_elem(&peers, &me);
///     if (!e) return SK_DROP;                 // not a verified pair
///     __u64 to = e->peer;
///     int v = bpf_sk_redirect_hash(skb, &egress, &to, 0);
///     if (v == SK_PASS) __sync_fetch_and_add(&e->bytes, len);
///     return v;
/// }
/// ```
fn program(peers: RawFd, egress: RawFd) -> Vec<Insn> {
    let i = Insn::new;
    vec![
        i(MOV64_REG, 6, 1, 0, 0), // r6 = skb
        i(LDX_W, 9, 6, 0, 0),     // r9 = skb->len (offset 0 of __sk_buff)
        i(JEQ_IMM, 9, 0, 22, 0),  // if len == 0 goto drop (jumps count from the next)
        i(MOV64_REG, 1, 6, 0, 0), // r1 = skb
        i(CALL, 0, 0, 0, FN_GET_SOCKET_COOKIE),
        i(STX_DW, 10, 0, -8, 0), // fp[-8] = cookie
        i(LD_IMM64, 1, PSEUDO_MAP_FD, 0, peers),
        i(0, 0, 0, 0, 0),
        i(MOV64_REG, 2, 10, 0, 0), // r2 = fp - 8
        i(ADD64_IMM, 2, 0, 0, -8),
        i(CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM),
        i(JEQ_IMM, 0, 0, 13, 0),  // if !entry goto drop
        i(MOV64_REG, 7, 0, 0, 0), // r7 = entry
        i(LDX_DW, 1, 7, 0, 0),    // r1 = entry->peer
        i(STX_DW, 10, 1, -16, 0), // fp[-16] = peer
        i(MOV64_REG, 1, 6, 0, 0), // r1 = skb
        i(LD_IMM64, 2, PSEUDO_MAP_FD, 0, egress),
        i(0, 0, 0, 0, 0),
        i(MOV64_REG, 3, 10, 0, 0), // r3 = fp - 16
        i(ADD64_IMM, 3, 0, 0, -16),
        i(MOV64_IMM, 4, 0, 0, 0), // flags = 0 (egress)
        i(CALL, 0, 0, 0, FN_SK_REDIRECT_HASH),
        i(JNE_IMM, 0, 0, 1, SK_PASS), // failed: return as is
        i(ATOMIC_DW, 7, 9, 8, 0),     // lock entry->bytes += len
        i(EXIT, 0, 0, 0, 0),
        // drop:
        i(MOV64_IMM, 0, 0, 0, SK_DROP),
        i(EXIT, 0, 0, 0, 0),
    ]
}

/// Index of the `drop:` label in [`program`].
#[cfg(test)]
const DROP_AT: usize = 25;

/// Calls `bpf(cmd, attr)` with a zero-padded attribute block.
fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> io::Result<i64> {
    // SAFETY: `attr` is a valid, writable buffer of the size passed; the kernel reads at most
    // that many bytes and, for the commands used here, only pointers we placed in it, which
    // point to live buffers of the caller.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn put32(attr: &mut [u8; 128], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(attr: &mut [u8; 128], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn fd_of(r: i64) -> OwnedFd {
    // SAFETY: `r` is a descriptor the kernel just returned to us for a new object; nothing
    // else owns it.
    unsafe { OwnedFd::from_raw_fd(r as RawFd) }
}

fn map_create(kind: u32, key: u32, value: u32, entries: u32) -> Result<OwnedFd, SockmapError> {
    let mut attr = [0u8; 128];
    put32(&mut attr, 0, kind);
    put32(&mut attr, 4, key);
    put32(&mut attr, 8, value);
    put32(&mut attr, 12, entries);
    bpf(BPF_MAP_CREATE, &mut attr)
        .map(fd_of)
        .map_err(|source| SockmapError::Bpf {
            what: "map create",
            source,
            log: String::new(),
        })
}

fn map_elem(cmd: libc::c_long, map: &OwnedFd, key: *const u8, value: *const u8) -> io::Result<()> {
    let mut attr = [0u8; 128];
    put32(&mut attr, 0, map.as_raw_fd() as u32);
    put64(&mut attr, 8, key as u64);
    put64(&mut attr, 16, value as u64);
    put64(&mut attr, 24, BPF_ANY);
    bpf(cmd, &mut attr).map(|_| ())
}

/// The socket cookie: the kernel's unique id of a socket for its lifetime.
pub fn cookie(sock: BorrowedFd<'_>) -> io::Result<u64> {
    let mut v = 0u64;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&mut v as *mut u64).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// Bytes the socket has taken into its send queue since it was opened (TCP_INFO's bytes
/// sent, less those sent again, plus those not sent yet). One locked snapshot of the socket.
pub fn written(sock: BorrowedFd<'_>) -> io::Result<u64> {
    let mut info = [0u8; 232];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < 216 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "TCP_INFO without tcpi_bytes_sent (kernel before 4.19)",
        ));
    }
    let u32_at = |o: usize| u32::from_ne_bytes(info[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |o: usize| u64::from_ne_bytes(info[o..o + 8].try_into().unwrap_or([0; 8]));
    // struct tcp_info: tcpi_notsent_bytes at 144, tcpi_bytes_sent at 200, tcpi_bytes_retrans
    // at 208 (linux/tcp.h; the layout is append-only).
    let notsent = u64::from(u32_at(144));
    Ok(u64_at(200).wrapping_sub(u64_at(208)).wrapping_add(notsent))
}

/// Send buffer of each socket of a kernel pair (the kernel doubles it for its bookkeeping).
///
/// The psock's worker sends a redirected skb only while the destination's send queue is less
/// than half full; otherwise it tries again a jiffy later (4 ms at HZ=250), and a wake-up from
/// the freed space does not shorten that wait. With the autotuned buffer a 1 GiB stream
/// through the testbed's relay ran at 3.1–5.0 Gbit/s, with this one at 5.8–7.8 (2026-11-23,
/// load 3.9–4.1).
pub const SNDBUF: i32 = 4 << 20;

fn set_sndbuf(sock: BorrowedFd<'_>, v: i32) -> io::Result<()> {
    for opt in [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF] {
        // SAFETY: `v` is a valid int for the size given.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
    }
    Err(io::Error::last_os_error())
}

fn set_rcvlowat(sock: BorrowedFd<'_>, v: i32) -> io::Result<()> {
    // SAFETY: `v` is a valid int for the size given.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The program and maps of one relay process.
#[derive(Debug)]
pub struct Forwarder {
    peers: OwnedFd,
    egress: OwnedFd,
    ingress: OwnedFd,
    _prog: OwnedFd,
}

/// The two cookies of a pair in the maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelPair {
    /// Cookie of the first socket given to [`Forwarder::add_pair`].
    pub a: u64,
    /// Cookie of the second.
    pub b: u64,
}

impl Forwarder {
    /// Creates the maps (room for `sockets` sockets), loads the program and attaches it.
    pub fn load(sockets: u32) -> Result<Forwarder, SockmapError> {
        let n = sockets.max(2);
        let peers = map_create(
            BPF_MAP_TYPE_HASH,
            8,
            std::mem::size_of::<PeerEntry>() as u32,
            n,
        )?;
        let egress = map_create(BPF_MAP_TYPE_SOCKHASH, 8, 4, n)?;
        let ingress = map_create(BPF_MAP_TYPE_SOCKHASH, 8, 4, n)?;
        let insns: Vec<u8> = program(peers.as_raw_fd(), egress.as_raw_fd())
            .into_iter()
            .flat_map(Insn::bytes)
            .collect();
        let license = c"Dual MIT/GPL";
        let mut log = vec![0u8; 64 << 10];
        let mut attr = [0u8; 128];
        put32(&mut attr, 0, BPF_PROG_TYPE_SK_SKB);
        put32(&mut attr, 4, (insns.len() / 8) as u32);
        put64(&mut attr, 8, insns.as_ptr() as u64);
        put64(&mut attr, 16, license.as_ptr() as u64);
        put32(&mut attr, 24, 1); // log_level: only on failure does the log get text
        put32(&mut attr, 28, log.len() as u32);
        put64(&mut attr, 32, log.as_mut_ptr() as u64);
        attr[48..48 + 12].copy_from_slice(b"ferry_relay\0");
        let prog = match bpf(BPF_PROG_LOAD, &mut attr) {
            Ok(fd) => fd_of(fd),
            Err(source) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(0);
                let text = String::from_utf8_lossy(&log[..end]).trim().to_string();
                return Err(SockmapError::Bpf {
                    what: "program load",
                    source,
                    log: if text.is_empty() {
                        text
                    } else {
                        format!("\n{text}")
                    },
                });
            }
        };
        let mut attr = [0u8; 128];
        put32(&mut attr, 0, ingress.as_raw_fd() as u32);
        put32(&mut attr, 4, prog.as_raw_fd() as u32);
        put32(&mut attr, 8, BPF_SK_SKB_STREAM_VERDICT);
        bpf(BPF_PROG_ATTACH, &mut attr).map_err(|source| SockmapError::Bpf {
            what: "program attach",
            source,
            log: String::new(),
        })?;
        Ok(Forwarder {
            peers,
            egress,
            ingress,
            _prog: prog,
        })
    }

    fn set_peer(&self, me: u64, peer: u64) -> io::Result<()> {
        let v = PeerEntry { peer, bytes: 0 };
        map_elem(
            BPF_MAP_UPDATE_ELEM,
            &self.peers,
            (&me as *const u64).cast(),
            (&v as *const PeerEntry).cast(),
        )
    }

    fn put_sock(map: &OwnedFd, key: u64, sock: BorrowedFd<'_>) -> io::Result<()> {
        let fd = sock.as_raw_fd() as u32;
        map_elem(
            BPF_MAP_UPDATE_ELEM,
            map,
            (&key as *const u64).cast(),
            (&fd as *const u32).cast(),
        )
    }

    fn delete(map: &OwnedFd, key: u64) {
        // Absent keys (a socket closed already leaves its sockhash entries) are fine.
        let _ = map_elem(
            BPF_MAP_DELETE_ELEM,
            map,
            (&key as *const u64).cast(),
            std::ptr::null(),
        );
    }

    /// Forwards `a` ↔ `b` in the kernel from now on. Both must be connected TCP sockets that
    /// nobody reads or writes any more: bytes already in their receive queues are forwarded
    /// first. On `Err` nothing of the pair is left in the maps — unless the error is
    /// [`AddError::Partial`], after which bytes may have been forwarded and the pair can only
    /// be closed.
    pub fn add_pair(&self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<KernelPair, AddError> {
        let ca = cookie(a).map_err(AddError::Before)?;
        let cb = cookie(b).map_err(AddError::Before)?;
        let pair = KernelPair { a: ca, b: cb };
        for s in [a, b] {
            // Past the net.core.wmem_max cap with CAP_NET_ADMIN; a smaller buffer only slows.
            let _ = set_sndbuf(s, SNDBUF);
        }
        let before = (|| {
            self.set_peer(ca, cb)?;
            self.set_peer(cb, ca)?;
            Self::put_sock(&self.egress, ca, a)?;
            Self::put_sock(&self.egress, cb, b)
        })();
        if let Err(e) = before {
            self.remove_pair(pair);
            return Err(AddError::Before(e));
        }
        // From the first of these on, bytes may be forwarded.
        if let Err(e) = Self::put_sock(&self.ingress, ca, a) {
            self.remove_pair(pair);
            return Err(AddError::Before(e));
        }
        if let Err(e) = Self::put_sock(&self.ingress, cb, b) {
            self.remove_pair(pair);
            return Err(AddError::Partial(e));
        }
        // Bytes that came before the sockets entered the map wait for the next data_ready;
        // setting the receive low-water mark raises it now if any are queued.
        for s in [a, b] {
            set_rcvlowat(s, 1).map_err(AddError::Partial)?;
        }
        Ok(pair)
    }

    /// Bytes the program redirected away from the socket with this cookie, if it is in the
    /// maps.
    pub fn forwarded(&self, cookie: u64) -> Option<u64> {
        let mut v = PeerEntry::default();
        map_elem(
            BPF_MAP_LOOKUP_ELEM,
            &self.peers,
            (&cookie as *const u64).cast(),
            (&mut v as *mut PeerEntry).cast::<u8>(),
        )
        .ok()
        .map(|()| v.bytes)
    }

    /// Takes the pair out of the maps (closing a socket also takes it out of both sockhashes,
    /// but not out of `peers`).
    pub fn remove_pair(&self, pair: KernelPair) {
        for c in [pair.a, pair.b] {
            Self::delete(&self.ingress, c);
        }
        for c in [pair.a, pair.b] {
            Self::delete(&self.egress, c);
            Self::delete(&self.peers, c);
        }
    }
}

/// Why [`Forwarder::add_pair`] failed.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// Before any byte could move in the kernel: the pair can be forwarded otherwise.
    #[error("sockmap: {0}")]
    Before(io::Error),
    /// After the first socket entered the verdict map: close the pair.
    #[error("sockmap, pair half set up: {0}")]
    Partial(io::Error),
}

impl AsFd for Forwarder {
    /// The verdict map (for inspection with `bpftool map show fd`).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ingress.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    fn is_root() -> bool {
        rustix::process::geteuid().is_root()
    }

    /// Two connected loopback pairs: (outer a, inner a), (outer b, inner b).
    fn two_pairs() -> [(TcpStream, TcpStream); 2] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mk = || {
            let c = TcpStream::connect(addr).unwrap();
            let (s, _) = l.accept().unwrap();
            (c, s)
        };
        [mk(), mk()]
    }

    fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.read_exact(&mut v).unwrap();
        v
    }

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[1] ^ seed)
            .collect()
    }

    #[test]
    fn program_jumps_land_on_drop() {
        let p = program(3, 4);
        assert_eq!(p[DROP_AT].code, MOV64_IMM);
        assert_eq!(p[DROP_AT].imm, SK_DROP);
        assert_eq!(3 + p[2].off as usize, DROP_AT);
        assert_eq!(12 + p[11].off as usize, DROP_AT);
        assert_eq!(p[23].code, ATOMIC_DW);
    }

    #[test]
    fn forwards_queued_and_later_bytes_both_ways_in_order() {
        if !is_root() {
            eprintln!("skipped: loading BPF programs needs root");
            return;
        }
        let fw = Forwarder::load(64).expect("load the verdict program");
        let [(mut xa, sa), (mut xb, sb)] = two_pairs();
        // Bytes queued in a's receive queue before the switch.
        let early = data(100_000, 1);
        xa.write_all(&early).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let base_b = written(sb.as_fd()).unwrap();
        let pair = fw.add_pair(sa.as_fd(), sb.as_fd()).unwrap();
        // They arrive without any further byte on a.
        assert_eq!(read_n(&mut xb, early.len()), early);
        // Later bytes, both ways, large enough to fill the buffers.
        let big = data(8 << 20, 2);
        let send = {
            let big = big.clone();
            let mut xa = xa.try_clone().unwrap();
            std::thread::spawn(move || xa.write_all(&big).unwrap())
        };
        assert!(read_n(&mut xb, big.len()) == big, "8 MiB a -> b changed");
        send.join().unwrap();
        let back = data(3 << 20, 3);
        let send = {
            let back = back.clone();
            let mut xb = xb.try_clone().unwrap();
            std::thread::spawn(move || xb.write_all(&back).unwrap())
        };
        assert!(read_n(&mut xa, back.len()) == back, "3 MiB b -> a changed");
        send.join().unwrap();
        let total_a = (early.len() + big.len()) as u64;
        assert_eq!(fw.forwarded(pair.a), Some(total_a));
        assert_eq!(fw.forwarded(pair.b), Some(back.len() as u64));
        assert_eq!(written(sb.as_fd()).unwrap() - base_b, total_a);
        // A FIN is not forwarded; it shows as the read side closed on sa.
        xa.shutdown(Shutdown::Write).unwrap();
        let t0 = Instant::now();
        loop {
            let mut p = [rustix::event::PollFd::new(
                &sa,
                rustix::event::PollFlags::RDHUP,
            )];
            rustix::event::poll(&mut p, None).unwrap();
            if p[0].revents().contains(rustix::event::PollFlags::RDHUP) {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(5));
        }
        xb.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert!(xb.read(&mut byte).is_err(), "the FIN went through");
        // Still forwarding the other way after the half-close.
        xb.write_all(b"after").unwrap();
        assert_eq!(read_n(&mut xa, 5), b"after");
        fw.remove_pair(pair);
        assert_eq!(fw.forwarded(pair.a), None);
    }

    /// The kernel fact behind the kick in `add_pair`: bytes queued before a socket entered
    /// the verdict map stay queued until its next data_ready.
    #[test]
    fn queued_bytes_wait_for_data_ready() {
        if !is_root() {
            eprintln!("skipped: loading BPF programs needs root");
            return;
        }
        let fw = Forwarder::load(8).unwrap();
        let [(mut xa, sa), (mut xb, sb)] = two_pairs();
        xa.write_all(b"queued").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let (ca, cb) = (cookie(sa.as_fd()).unwrap(), cookie(sb.as_fd()).unwrap());
        fw.set_peer(ca, cb).unwrap();
        fw.set_peer(cb, ca).unwrap();
        Forwarder::put_sock(&fw.egress, ca, sa.as_fd()).unwrap();
        Forwarder::put_sock(&fw.egress, cb, sb.as_fd()).unwrap();
        Forwarder::put_sock(&fw.ingress, ca, sa.as_fd()).unwrap();
        Forwarder::put_sock(&fw.ingress, cb, sb.as_fd()).unwrap();
        xb.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 6];
        assert!(xb.read(&mut buf).is_err(), "forwarded without a kick");
        set_rcvlowat(sa.as_fd(), 1).unwrap();
        assert_eq!(read_n(&mut xb, 6), b"queued");
    }

    /// How much the kernel holds for a destination that does not read: the sender is not held
    /// back by the destination's buffers (this measures it; it asserts only that forwarding
    /// resumes in order once the destination reads).
    #[test]
    fn slow_destination_backlog() {
        if !is_root() {
            eprintln!("skipped: loading BPF programs needs root");
            return;
        }
        let fw = Forwarder::load(8).unwrap();
        let [(xa, sa), (mut xb, sb)] = two_pairs();
        fw.add_pair(sa.as_fd(), sb.as_fd()).unwrap();
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let limit = 256 << 20;
        let writer = {
            let sent = sent.clone();
            let mut xa = xa.try_clone().unwrap();
            std::thread::spawn(move || {
                let chunk = vec![7u8; 1 << 20];
                while sent.load(std::sync::atomic::Ordering::Relaxed) < limit {
                    if xa.write_all(&chunk).is_err() {
                        return;
                    }
                    sent.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        std::thread::sleep(Duration::from_secs(2));
        let held = sent.load(std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "sender wrote {} MiB towards a destination that did not read",
            held >> 20
        );
        let mut got = 0usize;
        let mut buf = vec![0u8; 1 << 20];
        xb.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        while got < held {
            let n = xb.read(&mut buf).unwrap();
            assert!(n > 0 && buf[..n].iter().all(|&b| b == 7));
            got += n;
        }
        xa.shutdown(Shutdown::Both).unwrap();
        let _ = writer.join();
    }

    #[test]
    fn sockets_without_a_pair_entry_get_nothing_forwarded() {
        if !is_root() {
            eprintln!("skipped: loading BPF programs needs root");
            return;
        }
        let fw = Forwarder::load(8).unwrap();
        let [(mut xa, sa), (mut xb, sb)] = two_pairs();
        // Only in the verdict map, no peers entry: the program drops, never redirects.
        let ca = cookie(sa.as_fd()).unwrap();
        Forwarder::put_sock(&fw.egress, cookie(sb.as_fd()).unwrap(), sb.as_fd()).unwrap();
        Forwarder::put_sock(&fw.ingress, ca, sa.as_fd()).unwrap();
        xa.write_all(b"stranger").unwrap();
        xb.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 8];
        assert!(xb.read(&mut buf).is_err());
        assert_eq!(fw.forwarded(ca), None);
    }
}
