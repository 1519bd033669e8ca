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
//! Usage errors (unregistered area, out-of-bounds put or get, mismatched registrations, a
//! process in [`Bsp::end`] while others sync, a `Bsp` dropped without `end`) end the whole job
//! through the launcher with a message naming the process and the call, as BSPlib prescribes;
//! so do transport failures inside a sync. The methods therefore return plain values.
//!
//! Safe Rust code uses [`Area`]s: typed memory owned by the [`Bsp`] context, read and written
//! through [`Bsp::area`] / [`Bsp::area_mut`], so nothing can hold a reference to it while a
//! sync writes into it. The C ABI (`ferry-bsplib`) uses the `unsafe` `*_raw` methods on
//! caller-owned memory.
//!
//! ```no_run
//! use ferry_bsp::Bsp;
//! let mut bsp = Bsp::init().expect("ferry");
//! let (p, n) = (bsp.pid(), bsp.nprocs());
//! let x = bsp.alloc::<u64>(n);
//! bsp.push_reg(&x);
//! bsp.sync();
//! for q in 0..n {
//!     bsp.put(q, &[p as u64], &x, p); // everyone writes its pid into slot p of everyone
//! }
//! bsp.sync();
//! assert!(bsp.area(&x).iter().enumerate().all(|(i, &v)| v == i as u64));
//! bsp.end();
//! ```
//!
//! How a sync moves data (see docs/ARCHITECTURE.md for the map): every process sends
//! every other one message closing the superstep (puts, get requests, sends and the
//! superstep's registrations, combined per destination), receives theirs, serves the gets,
//! applies the puts, and collects the replies to its own gets. The optimisations of the seed
//! paper (combining with early sends, Latin-square ordering, pre-posted receives) are switched
//! by [`Config`]. With `FERRY_BSP_RING`, the combined records for a process on this host's
//! shared memory are built in its ring (ferry-core's `Comm::raw_reserve`), not in a buffer that
//! the sync copies there; the messages are the same. This crate depends on `ferry-core` only.
#![deny(missing_docs)]

mod area;
mod bsmp;
mod combine;
mod config;
mod drma;
mod lifecycle;
mod posted;
mod record;
mod registry;
mod spin;
mod sync;

pub use area::Area;
pub use config::Config;

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
}

/// Set once this process stops the job, so that dropping its [`Bsp`] on the way out (the C
/// ABI keeps it in a thread-local, dropped by `exit`) does not report a missing `bsp_end`.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// A computation dropped without [`Bsp::end`] is a process leaving while the others may wait
/// for it in a sync: it stops the job, as BSPlib asks every process to call `bsp_end`. Not
/// when the process is already stopping the job or panicking; the world is then not
/// finalized (finalizing waits for every process).
impl Drop for Bsp {
    fn drop(&mut self) {
        if self.ended || STOPPING.load(Ordering::Relaxed) || std::thread::panicking() {
            return;
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

    /// Registering and unregistering in every superstep (as a library routine called in a
    /// loop does) keeps the registration table at its high-water mark; it grew by a slot per
    /// push before. A one-process computation (no launcher: ferry's singleton world).
    #[test]
    fn popped_registrations_are_reused() {
        let world = ferry_core::init().expect("singleton world");
        let mut bsp = Bsp::with_config(world, None, Config::default());
        let areas: Vec<Area<u32>> = (0..3).map(|_| bsp.alloc(4)).collect();
        bsp.push_reg(&areas[0]);
        bsp.sync();
        for round in 0..200u32 {
            bsp.push_reg(&areas[1]);
            bsp.push_reg(&areas[2]);
            bsp.sync();
            bsp.put(0, &[round], &areas[2], 3);
            bsp.put(0, &[round + 1], &areas[0], 0);
            bsp.pop_reg(&areas[2]);
            bsp.pop_reg(&areas[1]);
            bsp.sync();
            assert_eq!(bsp.area(&areas[2])[3], round);
            assert_eq!(bsp.area(&areas[0])[0], round + 1);
        }
        assert_eq!(bsp.slots.len(), 3);
        assert_eq!(
            bsp.by_addr.len(),
            1,
            "only the first area is still registered"
        );
        bsp.end();
    }
}
