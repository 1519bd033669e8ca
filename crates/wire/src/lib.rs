//! The wire protocol of ferry, without any I/O.
//!
//! This crate owns the byte layouts that cross a process boundary and the state machines that
//! decide what to send next:
//!
//! - [`frame`]: the fixed 40-byte frame header shared by every transport (shared-memory rings and
//!   TCP carry the same frames), with encode/decode that never allocate and report short input.
//! - [`bounded`]: files read whole (hostfiles, tables), with a cap.
//! - [`compress`]: the compressed form of an EAGER or DATA payload (LZ4 over the differences of
//!   8-byte words, bytes grouped by place), with a decoder that checks every length a peer
//!   claims.
//! - [`handshake`]: mutual HMAC-SHA256 challenge-response over the job key that opens every
//!   connection between two ranks.
//! - [`rendezvous`]: the sender and receiver halves of the large-message protocol
//!   (RTS → CTS → DATA, or RTS → receiver pulls → FIN).
//! - [`pmi`]: the line protocol between a rank and its launcher (put / fence / get).
//! - [`node`]: the control frames between `ferry run` and the node daemon of each host.
//! - [`procman`]: PMI-1 and PMI-2, the protocols by which foreign process managers (MPICH's
//!   hydra, Slurm's `srun --mpi=pmi2`) tell the processes they start who they are.
//! - [`relay`]: the frames and MACs by which a client outside a private cluster reaches a rank
//!   inside through `ferry relay` on the front node.
//! - [`punch`]: TCP hole punching between ranks behind two NATs: the observed-address exchange
//!   with a relay, the offers the two sides publish and one side's attempt, in virtual time.
//! - [`limits`]: what a process says when it runs out of file descriptors (which limit, which
//!   process, what to raise), worded alike by the launcher, the node daemons and the ranks.
//! - [`refusals`]: the rate limit of a server's lines about connections it refused.
//! - [`settings`]: the one table of the `FERRY_…` numbers with the values each accepts, read by
//!   the runtime and the launcher alike (the environment is the contract between them).
//!
//! It must not depend on sockets, threads, clocks or any other ferry crate: everything here is
//! driven by the caller handing bytes in and taking bytes out, so it is tested in memory.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod bounded;
pub mod compress;
pub mod frame;
pub mod handshake;
pub mod limits;
pub mod node;
pub mod pmi;
pub mod procman;
pub mod punch;
pub mod refusals;
pub mod relay;
pub mod rendezvous;
pub mod settings;

pub use frame::{Frame, FrameError, HEADER_LEN, PROTOCOL_VERSION};
pub use handshake::{Handshake, HandshakeError, JobKey};
pub use rendezvous::{share_split, DataChunk, RendezvousRecv, RendezvousSend};
