//! The relay protocol: how a process outside a private cluster reaches a rank inside it through
//! `ferry relay` on the cluster's front node, without I/O.
//!
//! ```text
//! registrant (rank inside)        relay (front node)               client (outside)
//!   ── TCP from inside ──→
//!                          ←  GREETING {relay_nonce}
//!   REGISTER {job, rank, port,
//!     HMAC(relay_key, "ferry-relay-register" | relay_nonce | job | rank | port)}  →
//!                          ←  REGISTERED {job, rank}          (kept while this TCP stays open)
//!                                                  ←── TCP to the public port ──
//!                                 GREETING {relay_nonce'}  →
//!                                 ←  CONNECT {job, src, target, nonce_c,
//!                                      gate = HMAC(relay_key, "ferry-relay-gate" | relay_nonce' | job | src | target | nonce_c),
//!                                      e2e  = HMAC(job_key,   "ferry-relay-e2e"  | job | src | target | nonce_c)}
//!   ←── relay dials the registered target (registrant's address, its port) ──
//!   ← INCOMING {job, src, target, nonce_c, e2e}     (target checks e2e and that nonce_c is new)
//!   ACCEPTED  →
//!                                 ESTABLISHED {target}  →
//!   ←══════════ bytes both ways (splice); the ferry handshake runs end to end first ══════════→
//! ```
//!
//! A relay that forwards in the front node's kernel (`ferry relay --copy nat`) answers a gated
//! CONNECT with FORWARDED instead of dialling: it has opened a one-shot pinhole, a DNAT rule
//! that sends connections from the client's address to `port` of the relay's address on to the
//! target. The client dials that port and itself sends the INCOMING the relay would have sent;
//! the target checks it exactly as above (it cannot tell the two apart, and need not). The
//! client closes the CONNECT once ACCEPTED arrives, which closes the pinhole; the connection
//! itself lives on in the kernel's connection tracking, and the relay leaves the data path.
//!
//! ```text
//!   client ── CONNECT ──→ relay        relay ── FORWARDED {target, port} ──→ client
//!   client ══ TCP to relay:port, DNAT to the target ══→ INCOMING → target → ACCEPTED → client
//! ```
//!
//! For hole punching (`crate::punch`) a rank asks a relay which address its connection comes
//! from, i.e. the mapping its NAT made; any rank of a job the relay serves may ask:
//!
//! ```text
//!   rank ── TCP (through its NAT) ──→ relay     ←  GREETING {relay_nonce}
//!   OBSERVE {job, src, nonce, gate = HMAC(relay_key, "ferry-relay-observe" | relay_nonce | job | src | nonce)}  →
//!                                               ←  OBSERVED {addr, port, HMAC(relay_key, "ferry-relay-observed" | nonce | addr | port)}, closed
//! ```
//!
//! - `relay_key` = HMAC(job key, "ferry-relay-key-v1"). The launcher hands it to the relay; the
//!   relay never holds the job key, so it can gate connections but cannot forge `e2e`, and the
//!   end-to-end ferry handshake (fresh nonces on both ends) that follows cannot be faked by it.
//! - A recorded CONNECT is useless: `gate` covers the relay's fresh nonce of that connection.
//!   A recorded INCOMING replayed to a target is refused by its [`ReplayGuard`] and, failing that,
//!   by the handshake that follows.
//! - Refusals carry a [`RefuseCode`] and the connection is closed.
//!
//! Every frame: an 8-byte header `{magic "FRLY", version u8 = 1, op u8, body length u16 LE}`
//! followed by the body; every body has a fixed length per op, checked before anything is read.
//! Integers are little-endian. Op codes are the `OP_*` constants; retired values stay reserved.

use crate::handshake::JobKey;
use thiserror::Error;

/// First bytes of every relay frame.
pub const MAGIC: [u8; 4] = *b"FRLY";
/// Relay protocol version.
pub const VERSION: u8 = 1;
/// Length of the frame header.
pub const HEADER_LEN: usize = 8;

/// Size the relay asks for (`SO_RCVBUF`, `SO_SNDBUF`) on each socket it forwards, instead of
/// the kernel's autotuning: it bounds what a relay holds (see [`HELD_IN_RELAY`]).
pub const FORWARD_SOCKET_BUFFER: usize = 4 << 20;

/// Most bytes of one direction of a forwarded connection that a relay may have taken (its
/// TCP acknowledged them to the sender) but not yet delivered: the kernel doubles a socket
/// buffer request for its bookkeeping, so at most 2 × [`FORWARD_SOCKET_BUFFER`] in the
/// receiving socket, as much unacknowledged in the sending one, and one pipe of at most
/// 1 MiB between them; rounded up. If the relay dies these bytes are gone, so a rank keeps
/// what it sent through a relay for this many bytes past its TCP acknowledgement and sends
/// it again on another rail.
pub const HELD_IN_RELAY: u64 = 32 << 20;

/// Relay → peer on every new connection: `{relay_nonce [32]}`.
pub const OP_GREETING: u8 = 0x01;
/// Registrant → relay: `{job u64, rank u32, port u16, reserved u16, mac [32]}`.
pub const OP_REGISTER: u8 = 0x10;
/// Relay → registrant: `{job u64, rank u32}`.
pub const OP_REGISTERED: u8 = 0x11;
/// Client → relay: `{job u64, src u32, target u32, nonce [32], gate [32], e2e [32]}`.
pub const OP_CONNECT: u8 = 0x20;
/// Relay → client: `{target u32}`; raw bytes follow both ways.
pub const OP_ESTABLISHED: u8 = 0x21;
/// Relay → client: `{target u32, port u16, reserved u16}`; dial `port` of the relay's address
/// and send INCOMING there (see the module doc). The relay closes nothing: the client closes
/// this connection once its forwarded one is ACCEPTED.
pub const OP_FORWARDED: u8 = 0x22;
/// Relay (or, through a pinhole, the client) → target:
/// `{job u64, src u32, target u32, nonce [32], e2e [32]}`.
pub const OP_INCOMING: u8 = 0x30;
/// Target → relay: `{}`; raw bytes follow both ways.
pub const OP_ACCEPTED: u8 = 0x31;
/// Rank → relay: `{job u64, src u32, reserved u32, nonce [32], gate [32]}` with `gate` =
/// HMAC(relay_key, "ferry-relay-observe" | relay_nonce | job | src | nonce): which address and
/// port does this connection come from, as the relay sees it (the mapping the client's NAT
/// made, for hole punching: `crate::punch`).
pub const OP_OBSERVE: u8 = 0x40;
/// Relay → rank: `{family u8 (4 or 6), reserved u8, port u16, addr [16], mac [32]}` with `mac`
/// = HMAC(relay_key, "ferry-relay-observed" | nonce | family | port | addr); an IPv4 address
/// fills the first 4 bytes of `addr`, the rest zero. The relay closes the connection after it.
pub const OP_OBSERVED: u8 = 0x41;
/// Either way: `{code u8, reserved [3]}`, then the connection is closed.
pub const OP_REFUSED: u8 = 0x7f;

/// Why a relay or a target turned a connection down (carried in REFUSED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RefuseCode {
    /// A MAC did not verify.
    BadMac = 0x01,
    /// The relay has no key for the job.
    UnknownJob = 0x02,
    /// No registration for this (job, rank).
    UnknownTarget = 0x03,
    /// The job has as many relayed connections as it may.
    Limit = 0x04,
    /// The handshake took too long.
    Timeout = 0x05,
    /// The registered target did not answer.
    Unreachable = 0x06,
    /// The bytes were not a relay frame, or not the one expected now.
    Malformed = 0x07,
    /// A nonce seen before.
    Replay = 0x08,
    /// REGISTER from outside the cluster.
    NotInside = 0x09,
    /// The relay is shutting down.
    ShuttingDown = 0x0a,
    /// A code this version does not know.
    Other = 0xff,
}

impl RefuseCode {
    fn from_u8(v: u8) -> RefuseCode {
        use RefuseCode::*;
        match v {
            0x01 => BadMac,
            0x02 => UnknownJob,
            0x03 => UnknownTarget,
            0x04 => Limit,
            0x05 => Timeout,
            0x06 => Unreachable,
            0x07 => Malformed,
            0x08 => Replay,
            0x09 => NotInside,
            0x0a => ShuttingDown,
            _ => Other,
        }
    }
}

/// One relay frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayFrame {
    /// See [`OP_GREETING`].
    Greeting {
        /// Fresh random bytes of the relay for this connection.
        relay_nonce: [u8; 32],
    },
    /// See [`OP_REGISTER`].
    Register {
        /// Job id.
        job: u64,
        /// Rank to be reached.
        rank: u32,
        /// Port it accepts relayed connections on (at the registrant's address).
        port: u16,
        /// HMAC under the relay key, see the module doc.
        mac: [u8; 32],
    },
    /// See [`OP_REGISTERED`].
    Registered {
        /// Job id.
        job: u64,
        /// Rank registered.
        rank: u32,
    },
    /// See [`OP_CONNECT`].
    Connect(Connect),
    /// See [`OP_ESTABLISHED`].
    Established {
        /// Rank reached.
        target: u32,
    },
    /// See [`OP_FORWARDED`].
    Forwarded {
        /// Rank reached.
        target: u32,
        /// Port of the relay's address that leads to the target.
        port: u16,
    },
    /// See [`OP_INCOMING`].
    Incoming(Incoming),
    /// See [`OP_ACCEPTED`].
    Accepted,
    /// See [`OP_OBSERVE`].
    Observe {
        /// Job id.
        job: u64,
        /// Rank asking.
        src: u32,
        /// Fresh random bytes of the rank, echoed under the relay's MAC in OBSERVED.
        nonce: [u8; 32],
        /// HMAC under the relay key over the relay's nonce and the fields.
        gate: [u8; 32],
    },
    /// See [`OP_OBSERVED`].
    Observed {
        /// The address the connection came from, as the relay saw it.
        addr: std::net::SocketAddr,
        /// HMAC under the relay key over the rank's nonce and the address.
        mac: [u8; 32],
    },
    /// See [`OP_REFUSED`].
    Refused(RefuseCode),
}

/// The body of CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// Job id.
    pub job: u64,
    /// Rank of the client.
    pub src: u32,
    /// Rank to reach.
    pub target: u32,
    /// Fresh random bytes of the client.
    pub nonce: [u8; 32],
    /// HMAC under the relay key over the relay's nonce and the fields.
    pub gate: [u8; 32],
    /// HMAC under the job key over the fields, checked by the target.
    pub e2e: [u8; 32],
}

/// The body of INCOMING: what the relay passes on of a CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// Job id.
    pub job: u64,
    /// Rank of the client.
    pub src: u32,
    /// Rank to reach.
    pub target: u32,
    /// The client's nonce.
    pub nonce: [u8; 32],
    /// The client's end-to-end MAC.
    pub e2e: [u8; 32],
}

/// Why bytes could not be taken as a relay frame, or a frame was not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RelayError {
    /// Not a relay frame (wrong magic).
    #[error("not a ferry relay frame (bad magic)")]
    BadMagic,
    /// A version this side does not speak.
    #[error("relay protocol version {0}, expected {VERSION}")]
    Version(u8),
    /// An op code this version does not know.
    #[error("unknown relay op {0:#04x}")]
    UnknownOp(u8),
    /// The length field does not match the op.
    #[error("relay op {op:#04x} with a {len}-byte body, expected {expected}")]
    Length {
        /// Op code.
        op: u8,
        /// Length given.
        len: usize,
        /// Length of that op's body.
        expected: usize,
    },
    /// A MAC did not verify.
    #[error("relay frame failed authentication (wrong MAC)")]
    BadMac,
    /// A nonce that was seen before.
    #[error("replayed relay connect (nonce seen before)")]
    Replay,
    /// The relay or the target refused.
    #[error("refused by the relay or target: {0:?}")]
    Refused(RefuseCode),
    /// A valid frame that does not fit the exchange at this point.
    #[error("unexpected relay frame {0:#04x}")]
    Unexpected(u8),
    /// OBSERVED names an address family other than 4 or 6.
    #[error("relay OBSERVED with address family {0}, expected 4 or 6")]
    Family(u8),
    /// The INCOMING names another job or rank than this target's.
    #[error("relayed connection for job {job:#x} rank {rank}, not ours")]
    NotOurs {
        /// Job named.
        job: u64,
        /// Rank named.
        rank: u32,
    },
}

fn body_len(op: u8) -> Option<usize> {
    Some(match op {
        OP_GREETING => 32,
        OP_REGISTER => 48,
        OP_REGISTERED => 12,
        OP_CONNECT => 112,
        OP_ESTABLISHED => 4,
        OP_FORWARDED => 8,
        OP_INCOMING => 80,
        OP_ACCEPTED => 0,
        OP_OBSERVE => 80,
        OP_OBSERVED => 52,
        OP_REFUSED => 4,
        _ => return None,
    })
}

/// The longest frame, header included.
pub const MAX_FRAME: usize = HEADER_LEN + 112;

fn arr32(b: &[u8]) -> [u8; 32] {
    let mut a = [0u8; 32];
    a.copy_from_slice(&b[..32]);
    a
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

impl RelayFrame {
    /// The op code of this frame.
    pub fn op(&self) -> u8 {
        match self {
            RelayFrame::Greeting { .. } => OP_GREETING,
            RelayFrame::Register { .. } => OP_REGISTER,
            RelayFrame::Registered { .. } => OP_REGISTERED,
            RelayFrame::Connect(_) => OP_CONNECT,
            RelayFrame::Established { .. } => OP_ESTABLISHED,
            RelayFrame::Forwarded { .. } => OP_FORWARDED,
            RelayFrame::Incoming(_) => OP_INCOMING,
            RelayFrame::Accepted => OP_ACCEPTED,
            RelayFrame::Observe { .. } => OP_OBSERVE,
            RelayFrame::Observed { .. } => OP_OBSERVED,
            RelayFrame::Refused(_) => OP_REFUSED,
        }
    }

    /// Appends the encoded frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let op = self.op();
        let len = body_len(op).unwrap_or(0);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(op);
        out.extend_from_slice(&(len as u16).to_le_bytes());
        let start = out.len();
        match self {
            RelayFrame::Greeting { relay_nonce } => out.extend_from_slice(relay_nonce),
            RelayFrame::Register {
                job,
                rank,
                port,
                mac,
            } => {
                out.extend_from_slice(&job.to_le_bytes());
                out.extend_from_slice(&rank.to_le_bytes());
                out.extend_from_slice(&port.to_le_bytes());
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(mac);
            }
            RelayFrame::Registered { job, rank } => {
                out.extend_from_slice(&job.to_le_bytes());
                out.extend_from_slice(&rank.to_le_bytes());
            }
            RelayFrame::Connect(c) => {
                out.extend_from_slice(&c.job.to_le_bytes());
                out.extend_from_slice(&c.src.to_le_bytes());
                out.extend_from_slice(&c.target.to_le_bytes());
                out.extend_from_slice(&c.nonce);
                out.extend_from_slice(&c.gate);
                out.extend_from_slice(&c.e2e);
            }
            RelayFrame::Established { target } => out.extend_from_slice(&target.to_le_bytes()),
            RelayFrame::Forwarded { target, port } => {
                out.extend_from_slice(&target.to_le_bytes());
                out.extend_from_slice(&port.to_le_bytes());
                out.extend_from_slice(&[0, 0]);
            }
            RelayFrame::Incoming(i) => {
                out.extend_from_slice(&i.job.to_le_bytes());
                out.extend_from_slice(&i.src.to_le_bytes());
                out.extend_from_slice(&i.target.to_le_bytes());
                out.extend_from_slice(&i.nonce);
                out.extend_from_slice(&i.e2e);
            }
            RelayFrame::Accepted => {}
            RelayFrame::Observe {
                job,
                src,
                nonce,
                gate,
            } => {
                out.extend_from_slice(&job.to_le_bytes());
                out.extend_from_slice(&src.to_le_bytes());
                out.extend_from_slice(&[0; 4]);
                out.extend_from_slice(nonce);
                out.extend_from_slice(gate);
            }
            RelayFrame::Observed { addr, mac } => {
                let (family, bytes) = address_bytes(addr);
                out.push(family);
                out.push(0);
                out.extend_from_slice(&addr.port().to_le_bytes());
                out.extend_from_slice(&bytes);
                out.extend_from_slice(mac);
            }
            RelayFrame::Refused(code) => out.extend_from_slice(&[*code as u8, 0, 0, 0]),
        }
        debug_assert_eq!(out.len() - start, len);
    }

    /// The encoded frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAX_FRAME);
        self.encode(&mut out);
        out
    }

    /// Decodes one frame from the start of `bytes`: `Ok(None)` when more bytes are needed,
    /// `Ok(Some((frame, used)))` when one is complete. Garbage is refused as soon as the first
    /// wrong header byte is visible; nothing is allocated.
    pub fn decode(bytes: &[u8]) -> Result<Option<(RelayFrame, usize)>, RelayError> {
        let seen = bytes.len().min(MAGIC.len());
        if bytes[..seen] != MAGIC[..seen] {
            return Err(RelayError::BadMagic);
        }
        if bytes.len() > 4 && bytes[4] != VERSION {
            return Err(RelayError::Version(bytes[4]));
        }
        if bytes.len() > 5 && body_len(bytes[5]).is_none() {
            return Err(RelayError::UnknownOp(bytes[5]));
        }
        if bytes.len() < HEADER_LEN {
            return Ok(None);
        }
        let op = bytes[5];
        let len = u16::from_le_bytes([bytes[6], bytes[7]]) as usize;
        let expected = body_len(op).unwrap_or(0);
        if len != expected {
            return Err(RelayError::Length { op, len, expected });
        }
        if bytes.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let b = &bytes[HEADER_LEN..HEADER_LEN + len];
        let frame = match op {
            OP_GREETING => RelayFrame::Greeting {
                relay_nonce: arr32(b),
            },
            OP_REGISTER => RelayFrame::Register {
                job: u64_at(b, 0),
                rank: u32_at(b, 8),
                port: u16::from_le_bytes([b[12], b[13]]),
                mac: arr32(&b[16..]),
            },
            OP_REGISTERED => RelayFrame::Registered {
                job: u64_at(b, 0),
                rank: u32_at(b, 8),
            },
            OP_CONNECT => RelayFrame::Connect(Connect {
                job: u64_at(b, 0),
                src: u32_at(b, 8),
                target: u32_at(b, 12),
                nonce: arr32(&b[16..]),
                gate: arr32(&b[48..]),
                e2e: arr32(&b[80..]),
            }),
            OP_ESTABLISHED => RelayFrame::Established {
                target: u32_at(b, 0),
            },
            OP_FORWARDED => RelayFrame::Forwarded {
                target: u32_at(b, 0),
                port: u16::from_le_bytes([b[4], b[5]]),
            },
            OP_INCOMING => RelayFrame::Incoming(Incoming {
                job: u64_at(b, 0),
                src: u32_at(b, 8),
                target: u32_at(b, 12),
                nonce: arr32(&b[16..]),
                e2e: arr32(&b[48..]),
            }),
            OP_ACCEPTED => RelayFrame::Accepted,
            OP_OBSERVE => RelayFrame::Observe {
                job: u64_at(b, 0),
                src: u32_at(b, 8),
                nonce: arr32(&b[16..]),
                gate: arr32(&b[48..]),
            },
            OP_OBSERVED => {
                let port = u16::from_le_bytes([b[2], b[3]]);
                let ip: std::net::IpAddr = match b[0] {
                    4 => std::net::Ipv4Addr::new(b[4], b[5], b[6], b[7]).into(),
                    6 => {
                        let mut a = [0u8; 16];
                        a.copy_from_slice(&b[4..20]);
                        std::net::Ipv6Addr::from(a).into()
                    }
                    other => return Err(RelayError::Family(other)),
                };
                RelayFrame::Observed {
                    addr: std::net::SocketAddr::new(ip, port),
                    mac: arr32(&b[20..]),
                }
            }
            _ => RelayFrame::Refused(RefuseCode::from_u8(b[0])),
        };
        Ok(Some((frame, HEADER_LEN + len)))
    }
}

/// The key a relay holds for a job: derived from the job key, so it opens the gate but cannot
/// produce the end-to-end MAC.
pub fn relay_key(job_key: &JobKey) -> JobKey {
    JobKey(job_key.mac(&[b"ferry-relay-key-v1"]))
}

fn register_parts_mac(
    relay_key: &JobKey,
    relay_nonce: &[u8; 32],
    job: u64,
    rank: u32,
    port: u16,
) -> [u8; 32] {
    relay_key.mac(&[
        b"ferry-relay-register",
        relay_nonce,
        &job.to_le_bytes(),
        &rank.to_le_bytes(),
        &port.to_le_bytes(),
    ])
}

fn gate_mac(
    relay_key: &JobKey,
    relay_nonce: &[u8; 32],
    job: u64,
    src: u32,
    target: u32,
    nonce: &[u8; 32],
) -> [u8; 32] {
    relay_key.mac(&[
        b"ferry-relay-gate",
        relay_nonce,
        &job.to_le_bytes(),
        &src.to_le_bytes(),
        &target.to_le_bytes(),
        nonce,
    ])
}

fn e2e_mac(job_key: &JobKey, job: u64, src: u32, target: u32, nonce: &[u8; 32]) -> [u8; 32] {
    job_key.mac(&[
        b"ferry-relay-e2e",
        &job.to_le_bytes(),
        &src.to_le_bytes(),
        &target.to_le_bytes(),
        nonce,
    ])
}

/// REGISTER for `rank` of `job`, accepting relayed connections on `port`, answering the
/// relay's GREETING nonce.
pub fn register(
    job_key: &JobKey,
    relay_nonce: &[u8; 32],
    job: u64,
    rank: u32,
    port: u16,
) -> RelayFrame {
    let mac = register_parts_mac(&relay_key(job_key), relay_nonce, job, rank, port);
    RelayFrame::Register {
        job,
        rank,
        port,
        mac,
    }
}

/// CONNECT from rank `src` to rank `target` of `job`, answering the relay's GREETING nonce.
/// `nonce` must be fresh random bytes.
pub fn connect(
    job_key: &JobKey,
    relay_nonce: &[u8; 32],
    job: u64,
    src: u32,
    target: u32,
    nonce: [u8; 32],
) -> RelayFrame {
    RelayFrame::Connect(Connect {
        job,
        src,
        target,
        nonce,
        gate: gate_mac(&relay_key(job_key), relay_nonce, job, src, target, &nonce),
        e2e: e2e_mac(job_key, job, src, target, &nonce),
    })
}

/// The family byte and 16 address bytes of OBSERVED.
fn address_bytes(addr: &std::net::SocketAddr) -> (u8, [u8; 16]) {
    let mut bytes = [0u8; 16];
    match addr.ip() {
        std::net::IpAddr::V4(v4) => {
            bytes[..4].copy_from_slice(&v4.octets());
            (4, bytes)
        }
        std::net::IpAddr::V6(v6) => (6, v6.octets()),
    }
}

fn observe_gate(
    relay_key: &JobKey,
    relay_nonce: &[u8; 32],
    job: u64,
    src: u32,
    nonce: &[u8; 32],
) -> [u8; 32] {
    relay_key.mac(&[
        b"ferry-relay-observe",
        relay_nonce,
        &job.to_le_bytes(),
        &src.to_le_bytes(),
        nonce,
    ])
}

fn observed_mac(relay_key: &JobKey, nonce: &[u8; 32], addr: &std::net::SocketAddr) -> [u8; 32] {
    let (family, bytes) = address_bytes(addr);
    relay_key.mac(&[
        b"ferry-relay-observed",
        nonce,
        &[family],
        &addr.port().to_le_bytes(),
        &bytes,
    ])
}

/// OBSERVE from rank `src` of `job`, answering the relay's GREETING nonce. `nonce` must be
/// fresh random bytes.
pub fn observe(
    job_key: &JobKey,
    relay_nonce: &[u8; 32],
    job: u64,
    src: u32,
    nonce: [u8; 32],
) -> RelayFrame {
    RelayFrame::Observe {
        job,
        src,
        nonce,
        gate: observe_gate(&relay_key(job_key), relay_nonce, job, src, &nonce),
    }
}

/// Relay side: whether an OBSERVE's gate answers this connection's nonce.
pub fn verify_observe(
    relay_key: &JobKey,
    relay_nonce: &[u8; 32],
    job: u64,
    src: u32,
    nonce: &[u8; 32],
    gate: &[u8; 32],
) -> bool {
    constant_time_eq(&observe_gate(relay_key, relay_nonce, job, src, nonce), gate)
}

/// Relay side: the answer to a gated OBSERVE whose connection came from `addr`.
pub fn observed(relay_key: &JobKey, nonce: &[u8; 32], addr: std::net::SocketAddr) -> RelayFrame {
    RelayFrame::Observed {
        addr,
        mac: observed_mac(relay_key, nonce, &addr),
    }
}

/// Rank side: whether OBSERVED comes from a relay holding the job's relay key and answers
/// this rank's `nonce`.
pub fn verify_observed(
    job_key: &JobKey,
    nonce: &[u8; 32],
    addr: &std::net::SocketAddr,
    mac: &[u8; 32],
) -> bool {
    constant_time_eq(&observed_mac(&relay_key(job_key), nonce, addr), mac)
}

/// Relay side: whether a REGISTER answers this connection's nonce under the job's relay key.
pub fn verify_register(
    relay_key: &JobKey,
    relay_nonce: &[u8; 32],
    job: u64,
    rank: u32,
    port: u16,
    mac: &[u8; 32],
) -> bool {
    let parts_mac = register_parts_mac(relay_key, relay_nonce, job, rank, port);
    constant_time_eq(&parts_mac, mac)
}

/// Relay side: whether a CONNECT's gate MAC answers this connection's nonce.
pub fn verify_gate(relay_key: &JobKey, relay_nonce: &[u8; 32], c: &Connect) -> bool {
    let expected = gate_mac(relay_key, relay_nonce, c.job, c.src, c.target, &c.nonce);
    constant_time_eq(&expected, &c.gate)
}

/// Target side: checks an INCOMING end to end (job key, our job and rank, nonce not seen
/// before). On success the caller answers ACCEPTED and then runs the ferry handshake as the
/// accepting side, which proves the client's freshness once more.
pub fn verify_incoming(
    job_key: &JobKey,
    job: u64,
    my_rank: u32,
    incoming: &Incoming,
    seen: &mut ReplayGuard,
) -> Result<(), RelayError> {
    if incoming.job != job || incoming.target != my_rank {
        return Err(RelayError::NotOurs {
            job: incoming.job,
            rank: incoming.target,
        });
    }
    let expected = e2e_mac(
        job_key,
        incoming.job,
        incoming.src,
        incoming.target,
        &incoming.nonce,
    );
    if !constant_time_eq(&expected, &incoming.e2e) {
        return Err(RelayError::BadMac);
    }
    if !seen.insert(incoming.nonce) {
        return Err(RelayError::Replay);
    }
    Ok(())
}

/// The nonces a target has accepted, most recent [`ReplayGuard::CAPACITY`] of them.
#[derive(Debug, Default)]
pub struct ReplayGuard {
    order: std::collections::VecDeque<[u8; 32]>,
    set: std::collections::HashSet<[u8; 32]>,
}

impl ReplayGuard {
    /// How many nonces are remembered; older ones are still stopped by the handshake's nonces.
    pub const CAPACITY: usize = 4096;

    /// Records `nonce`; false when it was seen before.
    pub fn insert(&mut self, nonce: [u8; 32]) -> bool {
        if !self.set.insert(nonce) {
            return false;
        }
        self.order.push_back(nonce);
        if self.order.len() > Self::CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}

/// Takes bytes of one frame at a time into `input` (never more than the frame); returns how
/// many were used and the frame once complete.
pub(crate) fn take_frame(
    input: &mut Vec<u8>,
    bytes: &[u8],
) -> Result<(usize, Option<RelayFrame>), RelayError> {
    let mut used = 0;
    while used < bytes.len() {
        // Want the header first, then exactly the body it announces.
        let want = if input.len() < HEADER_LEN {
            HEADER_LEN - input.len()
        } else {
            let len = u16::from_le_bytes([input[6], input[7]]) as usize;
            HEADER_LEN + len - input.len()
        };
        let take = want.min(bytes.len() - used);
        input.extend_from_slice(&bytes[used..used + take]);
        used += take;
        if let Some((frame, _)) = RelayFrame::decode(input)? {
            input.clear();
            return Ok((used, Some(frame)));
        }
    }
    Ok((used, None))
}

/// The client's side of a relayed connection, for nonblocking drivers: feed it what the relay
/// sends with [`RelayConnector::handle_input`], send [`RelayConnector::pending_output`], until
/// [`RelayConnector::is_established`]; then run the ferry [`crate::Handshake`] as the connecting
/// side on the same stream. Bytes after ESTABLISHED are not consumed.
///
/// If the relay answers FORWARDED instead, [`RelayConnector::pinhole`] gives the port: dial it
/// at the relay's address, call [`RelayConnector::through_pinhole`] and go on as before on the
/// new connection (INCOMING goes out, ACCEPTED makes it established). Close the connection to
/// the relay once established: that closes the pinhole.
#[derive(Debug)]
pub struct RelayConnector {
    key: JobKey,
    job: u64,
    src: u32,
    target: u32,
    nonce: [u8; 32],
    phase: ConnectorPhase,
    input: Vec<u8>,
    output: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectorPhase {
    /// Waiting for GREETING, then for the answer to CONNECT.
    Asking,
    /// The relay opened a pinhole at this port; the caller dials it.
    Forwarded(u16),
    /// INCOMING goes (or went) through the pinhole; waiting for the target's ACCEPTED.
    ThroughPinhole,
    /// ESTABLISHED, or ACCEPTED through the pinhole.
    Established,
}

impl RelayConnector {
    /// Starts a CONNECT from rank `src` to rank `target`; `nonce` must be fresh random bytes.
    pub fn new(key: JobKey, job: u64, src: u32, target: u32, nonce: [u8; 32]) -> RelayConnector {
        RelayConnector {
            key,
            job,
            src,
            target,
            nonce,
            phase: ConnectorPhase::Asking,
            input: Vec::new(),
            output: Vec::new(),
        }
    }

    /// Bytes to send now.
    pub fn pending_output(&self) -> &[u8] {
        &self.output
    }

    /// Marks the first `n` bytes of the pending output as sent.
    pub fn consume_output(&mut self, n: usize) {
        self.output.drain(..n.min(self.output.len()));
    }

    /// Whether the connection is ready for the ferry handshake: the relay answered ESTABLISHED
    /// (or the target ACCEPTED through a pinhole) and everything of ours has been sent.
    pub fn is_established(&self) -> bool {
        self.phase == ConnectorPhase::Established && self.output.is_empty()
    }

    /// The port of the relay's address to dial, once the relay answered FORWARDED.
    pub fn pinhole(&self) -> Option<u16> {
        match self.phase {
            ConnectorPhase::Forwarded(port) if self.output.is_empty() => Some(port),
            _ => None,
        }
    }

    /// Switches to the connection dialled through the pinhole: INCOMING is queued for it.
    pub fn through_pinhole(&mut self) {
        if !matches!(self.phase, ConnectorPhase::Forwarded(_)) {
            return;
        }
        self.phase = ConnectorPhase::ThroughPinhole;
        self.input.clear();
        RelayFrame::Incoming(Incoming {
            job: self.job,
            src: self.src,
            target: self.target,
            nonce: self.nonce,
            e2e: e2e_mac(&self.key, self.job, self.src, self.target, &self.nonce),
        })
        .encode(&mut self.output);
    }

    /// Takes bytes from the relay (or, through a pinhole, the target); returns how many were
    /// used.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<usize, RelayError> {
        use ConnectorPhase::*;
        let mut used = 0;
        while matches!(self.phase, Asking | ThroughPinhole) && used < bytes.len() {
            let (n, frame) = take_frame(&mut self.input, &bytes[used..])?;
            used += n;
            match (self.phase, frame) {
                (_, None) => {}
                (Asking, Some(RelayFrame::Greeting { relay_nonce })) if self.output.is_empty() => {
                    connect(
                        &self.key,
                        &relay_nonce,
                        self.job,
                        self.src,
                        self.target,
                        self.nonce,
                    )
                    .encode(&mut self.output);
                }
                (Asking, Some(RelayFrame::Established { target })) if target == self.target => {
                    self.phase = Established
                }
                (Asking, Some(RelayFrame::Forwarded { target, port }))
                    if target == self.target && port != 0 =>
                {
                    self.phase = Forwarded(port)
                }
                (ThroughPinhole, Some(RelayFrame::Accepted)) => self.phase = Established,
                (_, Some(RelayFrame::Refused(code))) => return Err(RelayError::Refused(code)),
                (_, Some(other)) => return Err(RelayError::Unexpected(other.op())),
            }
        }
        Ok(used)
    }
}

/// The target's side of a connection the relay opened, for nonblocking drivers: feed it the
/// relay's bytes until [`RelayAcceptor::peer_rank`] is `Some`, sending
/// [`RelayAcceptor::pending_output`] (ACCEPTED, or REFUSED before an error is returned); then
/// run the ferry [`crate::Handshake`] as the accepting side. A driver that accepts both direct
/// and relayed connections on one port tells them apart by the first four bytes: [`MAGIC`]
/// (`FRLY`) here, `FERR` for the handshake.
#[derive(Debug)]
pub struct RelayAcceptor {
    key: JobKey,
    job: u64,
    my_rank: u32,
    src: Option<u32>,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl RelayAcceptor {
    /// Waits for INCOMING for rank `my_rank` of `job`.
    pub fn new(key: JobKey, job: u64, my_rank: u32) -> RelayAcceptor {
        RelayAcceptor {
            key,
            job,
            my_rank,
            src: None,
            input: Vec::new(),
            output: Vec::new(),
        }
    }

    /// Bytes to send now.
    pub fn pending_output(&self) -> &[u8] {
        &self.output
    }

    /// Marks the first `n` bytes of the pending output as sent.
    pub fn consume_output(&mut self, n: usize) {
        self.output.drain(..n.min(self.output.len()));
    }

    /// The client's rank once INCOMING verified and ACCEPTED has been sent.
    pub fn peer_rank(&self) -> Option<u32> {
        self.src.filter(|_| self.output.is_empty())
    }

    /// Takes bytes from the relay; returns how many were used. On an error, REFUSED is queued:
    /// send it, then close.
    pub fn handle_input(
        &mut self,
        bytes: &[u8],
        seen: &mut ReplayGuard,
    ) -> Result<usize, RelayError> {
        if self.src.is_some() {
            return Ok(0);
        }
        let result = take_frame(&mut self.input, bytes).and_then(|(used, frame)| match frame {
            None => Ok(used),
            Some(RelayFrame::Incoming(incoming)) => {
                verify_incoming(&self.key, self.job, self.my_rank, &incoming, seen)?;
                self.src = Some(incoming.src);
                RelayFrame::Accepted.encode(&mut self.output);
                Ok(used)
            }
            Some(other) => Err(RelayError::Unexpected(other.op())),
        });
        if let Err(e) = &result {
            let code = match e {
                RelayError::BadMac | RelayError::NotOurs { .. } => RefuseCode::BadMac,
                RelayError::Replay => RefuseCode::Replay,
                _ => RefuseCode::Malformed,
            };
            RelayFrame::Refused(code).encode(&mut self.output);
        }
        result
    }
}

/// A rank's registration with the relay of its cluster, for nonblocking drivers: send
/// [`Registrar::pending_output`] and feed the relay's bytes until
/// [`Registrar::is_registered`]. Keep the connection open for the job's life: the relay forgets
/// the registration when it closes, and its EOF tells the rank that the relay is gone.
#[derive(Debug)]
pub struct Registrar {
    key: JobKey,
    job: u64,
    rank: u32,
    port: u16,
    registered: bool,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Registrar {
    /// Registers `rank` of `job`, reachable on `port` at the address it connects from.
    pub fn new(key: JobKey, job: u64, rank: u32, port: u16) -> Registrar {
        Registrar {
            key,
            job,
            rank,
            port,
            registered: false,
            input: Vec::new(),
            output: Vec::new(),
        }
    }

    /// Bytes to send now.
    pub fn pending_output(&self) -> &[u8] {
        &self.output
    }

    /// Marks the first `n` bytes of the pending output as sent.
    pub fn consume_output(&mut self, n: usize) {
        self.output.drain(..n.min(self.output.len()));
    }

    /// Whether the relay confirmed the registration.
    pub fn is_registered(&self) -> bool {
        self.registered
    }

    /// Takes bytes from the relay; returns how many were used.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<usize, RelayError> {
        let mut used = 0;
        while !self.registered && used < bytes.len() {
            let (n, frame) = take_frame(&mut self.input, &bytes[used..])?;
            used += n;
            match frame {
                None => {}
                Some(RelayFrame::Greeting { relay_nonce }) if self.output.is_empty() => {
                    register(&self.key, &relay_nonce, self.job, self.rank, self.port)
                        .encode(&mut self.output);
                }
                Some(RelayFrame::Registered { job, rank })
                    if job == self.job && rank == self.rank =>
                {
                    self.registered = true
                }
                Some(RelayFrame::Refused(code)) => return Err(RelayError::Refused(code)),
                Some(other) => return Err(RelayError::Unexpected(other.op())),
            }
        }
        Ok(used)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_frames() -> Vec<RelayFrame> {
        let key = JobKey([3; 32]);
        let RelayFrame::Connect(c) = connect(&key, &[1; 32], 9, 1, 2, [4; 32]) else {
            unreachable!()
        };
        vec![
            RelayFrame::Greeting {
                relay_nonce: [7; 32],
            },
            register(&key, &[1; 32], 9, 2, 5000),
            RelayFrame::Registered { job: 9, rank: 2 },
            RelayFrame::Connect(c.clone()),
            RelayFrame::Established { target: 2 },
            RelayFrame::Forwarded {
                target: 2,
                port: 40123,
            },
            RelayFrame::Incoming(Incoming {
                job: c.job,
                src: c.src,
                target: c.target,
                nonce: c.nonce,
                e2e: c.e2e,
            }),
            RelayFrame::Accepted,
            RelayFrame::Refused(RefuseCode::Limit),
        ]
    }

    #[test]
    fn every_frame_round_trips_whole_and_byte_by_byte() {
        for frame in all_frames() {
            let bytes = frame.to_bytes();
            assert_eq!(bytes.len(), HEADER_LEN + body_len(frame.op()).unwrap());
            for cut in 0..bytes.len() {
                assert_eq!(
                    RelayFrame::decode(&bytes[..cut]),
                    Ok(None),
                    "{frame:?} cut {cut}"
                );
            }
            let mut more = bytes.clone();
            more.extend_from_slice(b"tail");
            assert_eq!(RelayFrame::decode(&more), Ok(Some((frame, bytes.len()))));
        }
    }

    #[test]
    fn garbage_version_op_and_length_are_refused() {
        assert_eq!(RelayFrame::decode(b"GET /"), Err(RelayError::BadMagic));
        assert_eq!(RelayFrame::decode(b"FERRYHS1"), Err(RelayError::BadMagic));
        assert_eq!(RelayFrame::decode(b"FRLY\x02"), Err(RelayError::Version(2)));
        assert_eq!(
            RelayFrame::decode(b"FRLY\x01\x55"),
            Err(RelayError::UnknownOp(0x55))
        );
        assert!(matches!(
            RelayFrame::decode(b"FRLY\x01\x20\xff\xff"),
            Err(RelayError::Length {
                op: 0x20,
                len: 0xffff,
                expected: 112
            })
        ));
    }

    #[test]
    fn gate_and_register_bind_the_relay_nonce() {
        let job_key = JobKey([3; 32]);
        let rk = relay_key(&job_key);
        let RelayFrame::Connect(c) = connect(&job_key, &[1; 32], 9, 1, 2, [4; 32]) else {
            unreachable!()
        };
        assert!(verify_gate(&rk, &[1; 32], &c));
        assert!(
            !verify_gate(&rk, &[2; 32], &c),
            "replayed on another connection"
        );
        assert!(
            !verify_gate(&job_key, &[1; 32], &c),
            "the job key is not the relay key"
        );
        let RelayFrame::Register { mac, .. } = register(&job_key, &[1; 32], 9, 2, 5000) else {
            unreachable!()
        };
        assert!(verify_register(&rk, &[1; 32], 9, 2, 5000, &mac));
        assert!(!verify_register(&rk, &[1; 32], 9, 2, 5001, &mac));
        assert!(!verify_register(&rk, &[9; 32], 9, 2, 5000, &mac));
    }

    #[test]
    fn target_checks_end_to_end_and_replay() {
        let job_key = JobKey([3; 32]);
        let RelayFrame::Connect(c) = connect(&job_key, &[1; 32], 9, 1, 2, [4; 32]) else {
            unreachable!()
        };
        let inc = Incoming {
            job: 9,
            src: 1,
            target: 2,
            nonce: c.nonce,
            e2e: c.e2e,
        };
        let mut seen = ReplayGuard::default();
        assert_eq!(verify_incoming(&job_key, 9, 2, &inc, &mut seen), Ok(()));
        assert_eq!(
            verify_incoming(&job_key, 9, 2, &inc, &mut seen),
            Err(RelayError::Replay)
        );
        // The relay holds only the relay key: what it could forge fails at the target.
        let forged = Incoming {
            e2e: relay_key(&job_key).mac(&[b"anything"]),
            nonce: [5; 32],
            ..inc.clone()
        };
        assert_eq!(
            verify_incoming(&job_key, 9, 2, &forged, &mut seen),
            Err(RelayError::BadMac)
        );
        let changed_src = Incoming {
            src: 0,
            nonce: [6; 32],
            ..inc.clone()
        };
        assert_eq!(
            verify_incoming(&job_key, 9, 2, &changed_src, &mut seen),
            Err(RelayError::BadMac)
        );
        assert!(matches!(
            verify_incoming(&job_key, 9, 3, &inc, &mut seen),
            Err(RelayError::NotOurs { .. })
        ));
    }

    #[test]
    fn replay_guard_forgets_only_beyond_capacity() {
        let mut g = ReplayGuard::default();
        for i in 0..(ReplayGuard::CAPACITY as u32 + 1) {
            let mut n = [0u8; 32];
            n[..4].copy_from_slice(&i.to_le_bytes());
            assert!(g.insert(n));
        }
        assert!(g.insert([0; 32]), "the oldest was forgotten");
        let mut last = [0u8; 32];
        last[..4].copy_from_slice(&(ReplayGuard::CAPACITY as u32).to_le_bytes());
        assert!(!g.insert(last));
    }

    #[test]
    fn machines_through_a_fake_relay_byte_by_byte() {
        let key = JobKey([3; 32]);
        let rk = relay_key(&key);
        // Registration.
        let mut reg = Registrar::new(key.clone(), 9, 2, 5000);
        let greeting = RelayFrame::Greeting {
            relay_nonce: [1; 32],
        }
        .to_bytes();
        for b in &greeting {
            assert_eq!(reg.handle_input(std::slice::from_ref(b)), Ok(1));
        }
        let Ok(Some((
            RelayFrame::Register {
                job,
                rank,
                port,
                mac,
            },
            _,
        ))) = RelayFrame::decode(reg.pending_output())
        else {
            panic!()
        };
        assert!(verify_register(&rk, &[1; 32], job, rank, port, &mac));
        reg.consume_output(usize::MAX);
        let mut answer = RelayFrame::Registered { job: 9, rank: 2 }.to_bytes();
        answer.extend_from_slice(b"more");
        assert_eq!(reg.handle_input(&answer), Ok(answer.len() - 4));
        assert!(reg.is_registered());

        // Connect: the relay checks the gate, passes INCOMING on, the target accepts.
        let mut c = RelayConnector::new(key.clone(), 9, 1, 2, [4; 32]);
        c.handle_input(
            &RelayFrame::Greeting {
                relay_nonce: [6; 32],
            }
            .to_bytes(),
        )
        .unwrap();
        let Ok(Some((RelayFrame::Connect(connect), _))) = RelayFrame::decode(c.pending_output())
        else {
            panic!()
        };
        c.consume_output(usize::MAX);
        assert!(verify_gate(&rk, &[6; 32], &connect));
        let incoming = RelayFrame::Incoming(Incoming {
            job: connect.job,
            src: connect.src,
            target: connect.target,
            nonce: connect.nonce,
            e2e: connect.e2e,
        })
        .to_bytes();
        let mut seen = ReplayGuard::default();
        let mut a = RelayAcceptor::new(key.clone(), 9, 2);
        for b in &incoming {
            assert_eq!(a.handle_input(std::slice::from_ref(b), &mut seen), Ok(1));
        }
        assert_eq!(a.pending_output(), RelayFrame::Accepted.to_bytes());
        assert_eq!(a.peer_rank(), None, "ACCEPTED not yet sent");
        a.consume_output(usize::MAX);
        assert_eq!(a.peer_rank(), Some(1));
        let mut est = RelayFrame::Established { target: 2 }.to_bytes();
        est.extend_from_slice(b"FERRYHS1");
        assert_eq!(c.handle_input(&est), Ok(est.len() - 8));
        assert!(c.is_established());

        // The same INCOMING again: refused as a replay, REFUSED queued.
        let mut again = RelayAcceptor::new(key.clone(), 9, 2);
        assert_eq!(
            again.handle_input(&incoming, &mut seen),
            Err(RelayError::Replay)
        );
        assert_eq!(
            again.pending_output(),
            RelayFrame::Refused(RefuseCode::Replay).to_bytes()
        );
        // Refusals reach the connector and the registrar as errors.
        let mut c = RelayConnector::new(key.clone(), 9, 1, 2, [4; 32]);
        assert_eq!(
            c.handle_input(&RelayFrame::Refused(RefuseCode::UnknownTarget).to_bytes()),
            Err(RelayError::Refused(RefuseCode::UnknownTarget))
        );
        let mut reg = Registrar::new(key, 9, 2, 5000);
        assert_eq!(reg.handle_input(b"HTTP/1.1"), Err(RelayError::BadMagic));
    }

    #[test]
    fn connector_follows_a_pinhole_and_the_target_accepts_its_incoming() {
        let key = JobKey([3; 32]);
        let mut c = RelayConnector::new(key.clone(), 9, 1, 2, [4; 32]);
        let greeting = RelayFrame::Greeting {
            relay_nonce: [6; 32],
        };
        c.handle_input(&greeting.to_bytes()).unwrap();
        assert_eq!(c.pinhole(), None);
        c.consume_output(usize::MAX);
        // Another target's pinhole, or port 0, is not ours.
        let mut wrong = RelayConnector::new(key.clone(), 9, 1, 3, [4; 32]);
        wrong.handle_input(&greeting.to_bytes()).unwrap();
        let forwarded = RelayFrame::Forwarded {
            target: 2,
            port: 40123,
        }
        .to_bytes();
        assert_eq!(
            wrong.handle_input(&forwarded),
            Err(RelayError::Unexpected(OP_FORWARDED))
        );
        // Bytes behind FORWARDED are not taken: the relay sends none, and they are not ours.
        let mut more = forwarded.clone();
        more.extend_from_slice(b"xx");
        assert_eq!(c.handle_input(&more), Ok(forwarded.len()));
        assert_eq!(c.pinhole(), Some(40123));
        assert!(!c.is_established());
        // Through the pinhole: INCOMING with the same nonce and MAC as CONNECT carried.
        c.through_pinhole();
        assert_eq!(c.pinhole(), None);
        let incoming = c.pending_output().to_vec();
        c.consume_output(usize::MAX);
        let mut seen = ReplayGuard::default();
        let mut a = RelayAcceptor::new(key.clone(), 9, 2);
        assert_eq!(a.handle_input(&incoming, &mut seen), Ok(incoming.len()));
        a.consume_output(usize::MAX);
        assert_eq!(a.peer_rank(), Some(1));
        let mut accepted = RelayFrame::Accepted.to_bytes();
        accepted.extend_from_slice(b"FERRYHS1");
        assert_eq!(c.handle_input(&accepted), Ok(accepted.len() - 8));
        assert!(c.is_established());
        // A target's refusal through the pinhole reaches the client as such.
        let mut c = RelayConnector::new(key, 9, 1, 2, [5; 32]);
        c.handle_input(&greeting.to_bytes()).unwrap();
        c.handle_input(&forwarded).unwrap();
        c.through_pinhole();
        assert_eq!(
            c.handle_input(&RelayFrame::Refused(RefuseCode::Replay).to_bytes()),
            Err(RelayError::Refused(RefuseCode::Replay))
        );
    }

    proptest::proptest! {
        /// Any bytes: no panic, never more than the input is used, and what decodes re-encodes
        /// to a frame that decodes the same.
        #[test]
        fn decode_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Ok(Some((frame, used))) = RelayFrame::decode(&bytes) {
                proptest::prop_assert!(used <= bytes.len());
                let again = frame.to_bytes();
                proptest::prop_assert_eq!(RelayFrame::decode(&again), Ok(Some((frame, used))));
            }
        }

        /// Valid headers with any body: decodes without panic.
        #[test]
        fn decode_valid_headers(op in proptest::prelude::any::<u8>(), body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..130)) {
            let mut bytes = MAGIC.to_vec();
            bytes.push(VERSION);
            bytes.push(op);
            bytes.extend_from_slice(&(body.len() as u16).to_le_bytes());
            bytes.extend_from_slice(&body);
            let _ = RelayFrame::decode(&bytes);
        }
    }
}
