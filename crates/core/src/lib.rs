//! ferry's runtime: the processes of a job sending each other messages.
//!
//! It owns the world and its communicators, requests, matching, the progress engine, and the
//! transports, chosen per peer at setup (`shm` between ranks of one host, `tcp` otherwise; see
//! `host` for what "one host" means). It must not depend on the
//! launcher, the C ABI or the command line; the wire formats come from `ferry-wire`.
//!
//! ```no_run
//! let world = ferry_core::init()?;
//! let (rank, size) = (world.rank(), world.size());
//! let mut token = [0u64; 1];
//! if rank == 0 {
//!     world.send(&[42u64], 1 % size, 0)?;
//!     world.recv(&mut token, size - 1, 0)?;
//! } else {
//!     world.recv(&mut token, rank - 1, 0)?;
//!     world.send(&token, (rank + 1) % size, 0)?;
//! }
//! # Ok::<(), ferry_core::Error>(())
//! ```
//!
//! Everything runs on the calling thread (MPI_THREAD_FUNNELED): calls into a `Comm` drive
//! progress; nothing runs in the background. Nonblocking operations live in a [`scope`].
#![deny(missing_docs)]

mod bootstrap;
mod coll;
mod comm;
pub mod compress;
pub mod config;
mod engine;
mod error;
pub mod events;
mod fault;
mod frames;
mod host;
mod limits;
mod matching;
mod ofi;
mod punching;
mod rails;
pub mod raw;
pub mod settings;
mod shm;
#[cfg(test)]
mod sigpipe_check;
pub mod spawn;
mod stats;
mod stranger_log;
mod tcp;
mod world;

pub use coll::{Collective, Planned, ReduceOp, Reducer, Reducible, Reduction};
pub use comm::derived_pair;
pub use comm::{
    scope, test_all, wait_all, wait_any, Comm, Pause, Request, Scope, Source, Status, ANY_SOURCE,
    ANY_TAG, CLAIMED_PAIRS_END, CONTEXT_BLOCK, DERIVED_SLOT, TAG_UB,
};
pub use config::{CmaMode, Config, NetKind, RailPolicy};
pub use error::Error;
pub use fault::Agreed;
pub use ferry_sched::hetero;
pub use host::host_id;
pub use stats::Counters;
pub use world::{init, PeerRoute, World};
