//! BSP on ferry: the BSPlib model (Hill et al., "BSPlib: The BSP programming library", 1998).
//!
//! A job runs in **supersteps** separated by [`Bsp::sync`]. Within a superstep a process
//! computes and asks for communication; the sync completes it all:
//!
//! - **Registration** ([`Bsp::push_reg`], [`Bsp::pop_reg`]): areas are matched across processes
//!   by the order of the calls (the k-th push on every process names one area), and a push or
//!   pop takes effect at the next sync. Mismatched registrations stop the job.
//! - **DRMA** ([`Bsp::put`], [`Bsp::get`], [`Bsp::hpput`], [`Bsp::hpget`]): `put` copies its
//!   source when called; at the sync every process first serves the gets aimed at it (so gets
//!   see the values from before the superstep's puts), then applies the puts. The hp variants
//!   do not buffer: `hpput` reads its source at the sync.
//! - **BSMP** ([`Bsp::send`], [`Bsp::qsize`], [`Bsp::get_tag`], [`Bsp::move_into`],
//!   [`Bsp::hpmove`]): messages sent in superstep i are readable in superstep i+1 only; the tag
//!   size set by [`Bsp::set_tagsize`] takes effect at the next sync.
//!
//! Calls that can fail return [`BspError`], which names the process, the BSPlib call and the
//! problem: a bad pid, an unregistered address, a range outside an area, a tag of the wrong
//! size (these change nothing; the computation goes on), and in [`Bsp::sync`] and
//! [`Bsp::end`] mismatched registrations, a process ending while others sync, a peer that
//! died or bytes from a peer that are not records (these leave the computation unusable).
//! BSPlib stops the job at such errors: a `Bsp` dropped without [`Bsp::end`] does so, naming
//! the last error it returned, so `?` in a function that owns the computation is enough; the
//! C ABI (`ferry-bsplib`) stops the job at once through [`Bsp::stop`].
//!
//! Safe Rust code uses [`Area`]s: typed memory owned by the [`Bsp`] context, read and written
//! through [`Bsp::area`] / [`Bsp::area_mut`], so nothing can hold a reference to it while a
//! sync writes into it. The C ABI (`ferry-bsplib`) uses the `unsafe` `*_raw` methods on
//! caller-owned memory.
//!
//! ```no_run
//! use ferry_bsp::{Bsp, BspError};
//! fn main() -> Result<(), BspError> {
//!     let mut bsp = Bsp::init()?;
//!     let (p, n) = (bsp.pid(), bsp.nprocs());
//!     let x = bsp.alloc::<u64>(n)?;
//!     bsp.push_reg(&x)?;
//!     bsp.sync()?;
//!     for q in 0..n {
//!         bsp.put(q, &[p as u64], &x, p)?; // everyone writes its pid into slot p of everyone
//!     }
//!     bsp.sync()?;
//!     assert!(bsp.area(&x)?.iter().enumerate().all(|(i, &v)| v == i as u64));
//!     bsp.end()
//! }
//! ```
//!
//! How a sync moves data (see docs/ARCHITECTURE.md for the map): every process sends
//! every other one message closing the superstep (puts, get requests, sends and the
//! superstep's registrations, combined per destination), receives theirs, serves the gets,
//! applies the puts, and collects the replies to its own gets. The optimisations of the seed
//! paper (combining with early sends, Latin-square ordering, pre-posted receives) are switched
//! by [`Config`]. With `FERRY_BSP_RING`, the combined records for a process on this host's
//! shared memory are built in its ring (ferry-core's `Comm::raw_reserve`), not in a buffer that
//! the sync copies there; the messages are the same. The records themselves are in
//! [`record`] (versioned, with a decoder that checks every length). This crate depends on
//! `ferry-core` only.
#![deny(missing_docs)]

mod area;
mod bsmp;
mod combine;
mod config;
mod drma;
mod error;
mod lifecycle;
mod posted;
pub mod record;
mod registry;
mod spin;
mod sync;

pub use area::Area;
pub use config::Config;
pub use error::{BspError, ErrorKind};

use area::Allocs;
use bsmp::Msg;
use combine::{LastPut, RingOut};
use drma::HpPut;
use ferry_core::raw::RawRequest;
use ferry_core::{Comm, World};
use posted::Posted;
use registry::Slot;
use spin::Spin;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// A BSP computation: this process's view of the job. Not `Send`: one per process.
pub struct Bsp {
    // Taken by `end` to finalize; left alone by a drop that stops the job (see `Drop`).
    world: ManuallyDrop<World>,
    comm: Comm,
    pid: usize,
    nprocs: usize,
    config: Config,
    start: Instant,
    step: u64,
    // Registration. Popped slots are reused, lowest first: every process pops the same slots
    // (the sync checks it) and pushes as many, so all pick the same numbers.
    slots: Vec<Slot>,
    free_slots: BinaryHeap<Reverse<u32>>,
    by_addr: HashMap<usize, Vec<u32>>,
    // The last address looked up in `by_addr` and its slot: a superstep's puts mostly name
    // one area, and hashing it for every small put cost as much as copying 16 words.
    slot_cache: Cell<Option<(usize, u32)>>,
    pushes: Vec<(usize, usize)>,
    pops: Vec<u32>,
    // Outgoing, per destination: combined record stream (or one record per entry without
    // combining), hpputs, and the local destinations of gets in the order they were asked.
    out: Vec<Vec<u8>>,
    out_single: Vec<Vec<Vec<u8>>>,
    // The record that ends `out[q]` when it is a put (a put that continues it is merged into
    // it), kept here so that merging reads nothing back from the buffer.
    last_put: Vec<LastPut>,
    // Per destination: its records in its ring instead of `out` (`Config::ring`); while one is
    // open, `out[q]` is empty, so the ring holds all of the superstep's records not yet sent.
    ring: Vec<Option<RingOut>>,
    // Largest ring reservation (0: off); per destination, whether it is on shared memory, and
    // whether its records go to `out` for the rest of this superstep (its ring had no room).
    ring_want: usize,
    ring_peer: Vec<bool>,
    ring_off: Vec<bool>,
    hpputs: Vec<Vec<HpPut>>,
    gets: Vec<Vec<(usize, usize)>>,
    // BSMP.
    tagsize: usize,
    next_tagsize: usize,
    inbox: Vec<u8>,
    msgs: Vec<Msg>,
    next_msg: usize,
    // Whom to send to and receive from at a sync, in order (Latin square or 0, 1, 2, ...).
    order: Vec<usize>,
    from_order: Vec<usize>,
    // The receives of the next sync's closing messages, posted from one sync to the next.
    posted: Posted,
    // How long a waiting sync spins before it yields its core (`Config::spin_us`).
    spin: Spin,
    // Scratch of a sync, kept so that a sync allocates nothing when nothing moves: the
    // registration record, requests in flight, per source the early messages received and
    // the length of its closing message, per peer the replies to our gets and to theirs.
    reg: Vec<u8>,
    sends: Vec<RawRequest>,
    chunks: Vec<Vec<Vec<u8>>>,
    pre_len: Vec<Option<usize>>,
    replies: Vec<Vec<u8>>,
    reply_out: Vec<Vec<u8>>,
    // Memory of Areas.
    allocs: Allocs,
    // In `end`'s closing exchange; after it (a Bsp dropped before is a process that left
    // without bsp_end, which stops the job).
    ending: bool,
    ended: bool,
    // Set by an error of a sync (or of an early send), which leaves the superstep half done:
    // later syncs refuse to run.
    broken: Option<String>,
    // The last error returned, for the message of a drop without `end`.
    last_error: Cell<Option<String>>,
}

impl Bsp {
    /// The error `kind` of `call` on this process, recorded as the last one returned.
    #[cold]
    #[inline(never)]
    pub(crate) fn error(&self, call: &'static str, kind: ErrorKind) -> BspError {
        let e = BspError::new(self.pid, call, kind);
        self.last_error.set(Some(e.to_string()));
        e
    }

    /// A failure of ferry-core in `call`: the superstep cannot be completed.
    #[cold]
    #[inline(never)]
    pub(crate) fn transport(&mut self, call: &'static str, e: ferry_core::Error) -> BspError {
        self.broke(self.error(call, ErrorKind::Transport(e)))
    }

    /// Marks the computation unusable because of `e` (an error in the middle of a superstep),
    /// and returns it.
    #[cold]
    pub(crate) fn broke(&mut self, e: BspError) -> BspError {
        if self.broken.is_none() {
            self.broken = Some(e.to_string());
        }
        e
    }

    /// `Broken` if an earlier error left the computation unusable.
    #[inline]
    pub(crate) fn check_usable(&self, call: &'static str) -> Result<(), BspError> {
        match &self.broken {
            None => Ok(()),
            Some(first) => Err(self.error(
                call,
                ErrorKind::Broken {
                    first: first.clone(),
                },
            )),
        }
    }
}

/// Set once this process stops the job, so that dropping its [`Bsp`] on the way out (the C
/// ABI keeps it in a thread-local, dropped by `exit`) does not report a missing `bsp_end`.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// A computation dropped without [`Bsp::end`] is a process leaving while the others may wait
/// for it in a sync: it stops the job, as BSPlib asks every process to call `bsp_end`, with
/// the last error the computation returned if there was one (so that `?` on an error stops
/// the job naming it). Not
/// when the process is already stopping the job or panicking; the world is then not
/// finalized (finalizing waits for every process).
impl Drop for Bsp {
    fn drop(&mut self) {
        if self.ended || STOPPING.load(Ordering::Relaxed) || std::thread::panicking() {
            return;
        }
        if let Some(e) = self.last_error.take() {
            // It left because of that error (returned by `?`, say): name the error.
            STOPPING.store(true, Ordering::Relaxed);
            self.world.abort(
                1,
                &format!("ferry-bsp: {e} (then the process ended without bsp_end)"),
            )
        }
        self.fail(
            "bsp_end",
            format!(
                "this process ended in superstep {} without calling bsp_end",
                self.step
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `FERRY_BSP_FIFO` (`bspcc -bspfifo`) is room in the BSMP queue from the start; the queue
    /// still takes more messages than that.
    #[test]
    fn fifo_reserves_the_message_queue() -> Result<(), BspError> {
        let world = ferry_core::init().expect("singleton world");
        let config = Config {
            fifo: 100,
            ..Config::default()
        };
        let mut bsp = Bsp::with_config(world, None, config)?;
        assert!(bsp.msgs.capacity() >= 100, "{}", bsp.msgs.capacity());
        bsp.set_tagsize(0);
        for i in 0..150u32 {
            bsp.send(0, b"", &i.to_le_bytes())?;
        }
        bsp.sync()?;
        assert_eq!(bsp.qsize(), (150, 600));
        bsp.end()
    }

    /// Registering and unregistering in every superstep (as a library routine called in a
    /// loop does) keeps the registration table at its high-water mark; it grew by a slot per
    /// push before. A one-process computation (no launcher: ferry's singleton world).
    #[test]
    fn popped_registrations_are_reused() -> Result<(), BspError> {
        let world = ferry_core::init().expect("singleton world");
        let mut bsp = Bsp::with_config(world, None, Config::default())?;
        let mut areas: Vec<Area<u32>> = Vec::new();
        for _ in 0..3 {
            areas.push(bsp.alloc(4)?);
        }
        bsp.push_reg(&areas[0])?;
        bsp.sync()?;
        for round in 0..200u32 {
            bsp.push_reg(&areas[1])?;
            bsp.push_reg(&areas[2])?;
            bsp.sync()?;
            bsp.put(0, &[round], &areas[2], 3)?;
            bsp.put(0, &[round + 1], &areas[0], 0)?;
            bsp.pop_reg(&areas[2])?;
            bsp.pop_reg(&areas[1])?;
            bsp.sync()?;
            assert_eq!(bsp.area(&areas[2])?[3], round);
            assert_eq!(bsp.area(&areas[0])?[0], round + 1);
        }
        assert_eq!(bsp.slots.len(), 3);
        assert_eq!(
            bsp.by_addr.len(),
            1,
            "only the first area is still registered"
        );
        // Local errors come back as values and change nothing.
        let e = bsp.put(1, &[0u32], &areas[0], 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "process 0: bsp_put: process id 1 is out of range 0..1"
        );
        let e = bsp.put(0, &[0u32], &areas[1], 0).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::NotRegistered { .. }), "{e}");
        let e = bsp.put(0, &[0u32; 2], &areas[0], 3).unwrap_err();
        assert!(
            e.to_string()
                .contains("bsp_put: bytes 12..20 are outside the 16-byte area"),
            "{e}"
        );
        let e = bsp.send(0, b"x", b"").unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::TagSize { len: 1, tagsize: 0 }),
            "{e}"
        );
        let e = bsp.free(areas[0]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::StillRegistered), "{e}");
        bsp.put(0, &[7u32], &areas[0], 1)?;
        bsp.sync()?;
        assert_eq!(bsp.area(&areas[0])?[1], 7);
        bsp.end()
    }
}
