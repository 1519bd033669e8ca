//! `ferry relay`: the daemon on a private cluster's front node that lets processes outside the
//! cluster reach registered ranks inside it (docs/ARCHITECTURE.md §4, protocol in `ferry_wire::relay`).
//!
//! - [`engine`]: every decision (registration, gating CONNECT, limits, timeouts, pairing) as a
//!   sans-IO state machine driven with explicit time; tested in memory.
//! - [`daemon`]: the I/O around it: one listening port, a mio (epoll) loop, dialing targets,
//!   forwarding paired connections with `splice(2)` through a pipe per direction (buffered
//!   copy as fallback) or in the kernel (`--copy sockmap`), signals (SIGTERM: clean shutdown;
//!   SIGUSR1: status line) and counters.
//! - [`descriptors`]: room for connections within the descriptor limit, and a listener that
//!   keeps draining its queue when descriptors run out.
//! - [`ranges`]: the accepted values of the numeric options.
//! - [`sockmap`]: the BPF loader for in-kernel forwarding: an `sk_skb` verdict program and its
//!   maps, assembled here and loaded with `bpf(2)`.
//! - [`pinhole`]: `--copy nat`: one-shot DNAT rules through which the front node's own packet
//!   forwarding carries a gated connection.
//! - [`client`]: blocking helpers for the two other roles — a rank registering itself, a client
//!   connecting through the relay, and a target accepting a relayed connection — used by the
//!   tests and benchmarks, and a model for the runtime's nonblocking use.
//!
//! The relay is not an open proxy: it forwards only to (job, rank) pairs registered from inside
//! the cluster by a holder of the job's relay key, dials only the registrant's own address, and
//! only for a CONNECT gated with that key over the relay's fresh nonce. It never holds the job
//! key, so it cannot produce the end-to-end MAC the target checks.
//!
//! It depends on `ferry-wire` only (no runtime, no launcher).
#![deny(missing_docs)]

pub mod client;
pub mod daemon;
pub mod descriptors;
pub mod engine;
pub mod pinhole;
pub mod ranges;
pub mod sockmap;
