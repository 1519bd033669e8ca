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

mod config;

pub use config::Config;

use ferry_core::raw::{RawRequest, RawReservation, SendMode};
use ferry_core::{Comm, World, ANY_TAG};
use std::alloc::Layout;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// Record kinds in the byte stream one process sends another in a superstep (little-endian).
const REC_PUT: u8 = 0x01; // slot u32, offset u64, len u64, bytes
const REC_GET: u8 = 0x02; // slot u32, offset u64, len u64
const REC_SEND: u8 = 0x03; // tag len u32, payload len u64, tag, payload
const REC_REG: u8 = 0x04; // pushes u32, sizes u64 each, pops u32, slots u32 each
const REC_END: u8 = 0x05; // (nothing): the sender is in bsp_end, not bsp_sync

// Message kinds; the tag also carries the superstep's parity, because a peer can be at most
// one superstep ahead and its next superstep's early messages must not be taken for this one's.
const KIND_EARLY: i32 = 0;
const KIND_FINAL: i32 = 1;
const KIND_REPLY: i32 = 2;

/// `LastPut::at` when the last record is not a put.
const NO_PUT: usize = usize::MAX;

/// The put record that ends a combining buffer, which a put that continues it (same
/// registration, next byte) joins: only its data is appended and its length raised.
#[derive(Clone, Copy)]
struct LastPut {
    /// Where the record starts, or `NO_PUT`.
    at: usize,
    slot: u32,
    /// Offset in the remote area just past the record's data.
    end: usize,
}

const NO_LAST: LastPut = LastPut {
    at: NO_PUT,
    slot: 0,
    end: 0,
};

/// Bytes of a put record before its data: kind, slot u32, offset u64, len u64.
const PUT_HEAD: usize = 21;

/// Bytes of a send record before its tag and payload: kind, tag len u32, payload len u64.
const SEND_HEAD: usize = 13;

/// The head of a send record.
fn send_head(tag_len: usize, payload_len: usize) -> [u8; SEND_HEAD] {
    let mut h = [0u8; SEND_HEAD];
    h[0] = REC_SEND;
    h[1..5].copy_from_slice(&(tag_len as u32).to_le_bytes());
    h[5..13].copy_from_slice(&(payload_len as u64).to_le_bytes());
    h
}

/// The head of a put (or get) record.
fn drma_head(kind: u8, slot: u32, offset: usize, len: usize) -> [u8; PUT_HEAD] {
    let mut h = [0u8; PUT_HEAD];
    h[0] = kind;
    h[1..5].copy_from_slice(&slot.to_le_bytes());
    h[5..13].copy_from_slice(&(offset as u64).to_le_bytes());
    h[13..21].copy_from_slice(&(len as u64).to_le_bytes());
    h
}

/// The records of a superstep for one destination written straight into its shared-memory
/// ring (`FERRY_BSP_RING`), in a reservation that becomes the superstep's message when it is
/// published: at the sync as the closing message, or earlier, as an early one, when full.
struct RingOut {
    res: RawReservation,
    at: *mut u8,
    cap: usize,
    len: usize,
}

/// Largest combining buffer kept from one superstep to the next (larger ones are freed).
const KEEP_BUF: usize = 1 << 20;

/// Longest spin (µs) of a waiting sync before it yields, when each process has a core.
const SPIN_US: u64 = 50;

/// Rounds of polling without progress before a sync blocks in `probe` (non-pre-posted path).
const IDLE_POLLS: u32 = 2000;

/// How a superstep message of `len` bytes is sent: eagerly up to the early-send threshold
/// (every process sends and receives at the sync, so a handshake would only add latency; the
/// engine falls back to `Standard` beyond one frame), as a standard send above it.
fn eager_up_to(len: usize, early_bytes: usize) -> SendMode {
    if len <= early_bytes {
        SendMode::Eager
    } else {
        SendMode::Standard
    }
}

fn tag(kind: i32, step: u64) -> i32 {
    kind * 2 + (step & 1) as i32
}

/// How long a waiting sync spins before it yields its core, adapted from wait to wait.
///
/// Spinning catches a peer on another core within a µs, where a yield costs a system call or,
/// on a loaded host, the core. It also decides where the processes run: two processes that
/// yield while they wait at start-up (for milliseconds, until all have started) are left on
/// the core they were forked on and then take turns on it for ~3 µs per sync; two that spin
/// there are moved to separate cores by the scheduler, and stay (2 processes on 2 cores: a
/// 10 ms spin separated them in 7 runs of 7, 50 µs–1 ms in 1 of 9). But a long spin on a core
/// that the peer needs wastes the whole spin: with 10 ms throughout, LU (512 syncs) at P = 2
/// took 5–410 ms instead of 5–15. So waits spin up to `START` until the job has spent
/// `START_BUDGET` in such spins that did not catch the peer or were preempted (a spinning
/// process that shares its core with the peer gets the message after a scheduler slice: with
/// overruns alone counted, one probe at P = 2 measured L = 488 µs); then up to `max`. After a wait that outlasted its spin, the next spin is half as long
/// (down to none); after one that ended while spinning, twice as long (from `PROBE`). Every
/// `PROBE_EVERY`-th wait spins at least `PROBE`, so that processes that have got separate
/// cores find out.
#[derive(Debug)]
struct Spin {
    max: Duration,
    now: Duration,
    waits: u32,
    // Time spent in spins that did not catch the peer.
    wasted: Duration,
}

/// The spin of every `PROBE_EVERY`-th wait when the spin has decayed: a few one-way latencies
/// on shared memory.
const PROBE: Duration = Duration::from_micros(4);
const PROBE_EVERY: u32 = 16;

/// The spin of the waits of a job until it has spent `START_BUDGET` in spins that did not
/// catch the peer (unless the spin is off).
const START: Duration = Duration::from_millis(10);
const START_BUDGET: Duration = Duration::from_millis(50);

/// A wait with a `START` spin that took longer than this was preempted (or its peer is busy).
const PREEMPTED: Duration = Duration::from_micros(200);

/// How long a wait yields between polls (after its spin) before it lets ferry-core's back-off
/// put it to sleep.
const YIELD_FOR: Duration = Duration::from_micros(200);

impl Spin {
    fn new(max: Duration) -> Spin {
        Spin {
            max,
            now: max,
            waits: 0,
            wasted: Duration::ZERO,
        }
    }

    /// Drives ferry-core until `done` holds: polls, spinning while the spin lasts, then yielding
    /// the core between polls, and only after `YIELD_FOR` of that ferry-core's `wait_until`,
    /// which sleeps (a sleeper that must be woken adds tens of µs: using `wait_until` at once
    /// tripled L at P = 4 and 8 on 2 cores; yielding for ever made g 20-50 % worse there, the
    /// waiting processes taking turns with those that apply puts).
    fn wait(
        &mut self,
        comm: &Comm,
        mut done: impl FnMut(&dyn Fn(RawRequest) -> bool) -> bool,
    ) -> Result<(), ferry_core::Error> {
        if done(&|r| comm.raw_done(r)) {
            return Ok(());
        }
        // What has arrived already is no wait (a message left in its ring by the last sync,
        // for one): it must not teach the spin anything.
        comm.progress()?;
        if done(&|r| comm.raw_done(r)) {
            return Ok(());
        }
        self.waits = self.waits.saturating_add(1);
        let spin = if self.max.is_zero() {
            Duration::ZERO
        } else if self.wasted < START_BUDGET {
            START
        } else if self.waits.is_multiple_of(PROBE_EVERY) {
            self.now.max(PROBE.min(self.max))
        } else {
            self.now
        };
        let start = Instant::now();
        let mut yielded = false;
        loop {
            comm.progress()?;
            if done(&|r| comm.raw_done(r)) {
                break;
            }
            let waited = start.elapsed();
            if waited >= spin + YIELD_FOR {
                // A long wait (a peer computing): ferry-core's back-off, which sleeps, so that
                // the processes with work get the cores.
                comm.wait_until(&mut done)?;
                yielded = true;
                break;
            }
            if yielded || waited >= spin {
                yielded = true;
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let took = start.elapsed();
        if spin == START && (yielded || took > PREEMPTED) {
            // A spin that did not catch the peer, or was preempted (the peer needed the core).
            self.wasted += took.min(START);
        }
        // A wait that ended while spinning but took much longer than the spin was preempted:
        // as good as one that outlasted it.
        self.now = if yielded || took > 2 * spin + PROBE {
            self.now / 2
        } else {
            (self.now * 2).max(PROBE).min(self.max)
        };
        Ok(())
    }
}

/// Typed memory owned by a [`Bsp`] context, which remote processes may reach once it is
/// registered. A handle: copying it does not copy the memory.
#[derive(Debug)]
pub struct Area<T> {
    addr: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl<T> Clone for Area<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Area<T> {}

impl<T> Area<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One registration slot: matched across processes by its index.
struct Slot {
    /// Local address and size, while registered.
    local: Option<(usize, usize)>,
    /// Size registered by each process (from the sync where it took effect).
    sizes: Vec<usize>,
}

/// A pending hpput: its source is read at the sync.
struct HpPut {
    src: usize,
    slot: u32,
    offset: usize,
    len: usize,
}

/// A BSMP message received at the last sync: ranges into `Bsp::inbox`.
#[derive(Clone, Copy)]
struct Msg {
    tag: (usize, usize),
    payload: (usize, usize),
}

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

/// Receives posted for the closing messages of the next sync, one per peer, into buffers of
/// `FERRY_BSP_PREPOST_BYTES`. They stay posted from the end of one sync to the next (raw
/// requests: the scoped ones of ferry-core cannot outlive a call), so a closing message that
/// comes before its receiver reaches the sync lands in place, not in the unexpected queue.
///
/// With `FERRY_BSP_IN_PLACE`, a closing message that comes whole through shared memory is not
/// even copied into the buffer: the sync reads it where it arrived, in the sender's ring
/// (`ring`), and releases it once the puts are applied (`taken`).
struct Posted {
    comm: Comm,
    bufs: Vec<Vec<u8>>,
    reqs: Vec<Option<RawRequest>>,
    in_place: bool,
    /// Finished in-place receives, until `release`.
    taken: Vec<Option<RawRequest>>,
    /// Per source: address and length of the closing message in its ring, if it stayed there.
    ring: Vec<Option<(usize, usize)>>,
}

impl Posted {
    /// Posts a receive with `tag` from every other process.
    fn post(&mut self, me: usize, tag: i32) -> Result<(), ferry_core::Error> {
        for (q, buf) in self.bufs.iter_mut().enumerate() {
            if q != me {
                // SAFETY: the buffer is neither moved nor touched until the receive is taken
                // (in `sync`) or withdrawn (in `drop`); its heap block stays put when `bufs`
                // itself is moved.
                let r = unsafe {
                    if self.in_place {
                        self.comm
                            .raw_recv_in_place(buf.as_mut_ptr(), buf.len(), q, tag)?
                    } else {
                        self.comm
                            .raw_recv(buf.as_mut_ptr(), buf.len(), q.into(), tag)?
                    }
                };
                self.reqs[q] = Some(r);
            }
        }
        Ok(())
    }

    /// Takes the finished receive from `q`: the length of its message, and where it lies if it
    /// stayed in the ring (recorded in `ring`).
    fn take(&mut self, q: usize, req: RawRequest) -> Option<ferry_core::raw::RawStatus> {
        let st = self.comm.raw_take(req);
        if self.in_place {
            self.ring[q] = self
                .comm
                .raw_in_place(req)
                .map(|(at, len)| (at as usize, len));
            self.taken[q] = Some(req);
        }
        st
    }

    /// Copies the closing message from `q`, if it is read in place, into its buffer and
    /// releases it: `q`'s later messages are needed before the puts are applied.
    fn unhold(&mut self, q: usize) {
        if let Some((at, len)) = self.ring[q].take() {
            // An in-place receive only stays in place when it fits its buffer.
            let n = len.min(self.bufs[q].len());
            // SAFETY: in the ring until the release below; the buffer holds `n` bytes.
            unsafe { std::ptr::copy_nonoverlapping(at as *const u8, self.bufs[q].as_mut_ptr(), n) };
        }
        if let Some(r) = self.taken[q].take() {
            self.comm.raw_release(r);
        }
    }

    /// Gives the messages read in place back to their rings: the senders' later messages
    /// (replies to gets, the next superstep) wait behind them until then.
    fn release(&mut self) {
        for q in 0..self.taken.len() {
            if let Some(r) = self.taken[q].take() {
                self.comm.raw_release(r);
            }
        }
        self.ring.fill(None);
    }

    /// Cancels the receives still posted (at the end, or when dropped); a second call finds
    /// nothing to do.
    fn withdraw(&mut self) {
        self.release();
        for q in 0..self.reqs.len() {
            let Some(r) = self.reqs[q].take() else {
                continue;
            };
            self.comm.raw_cancel(r);
            for _ in 0..1000 {
                if self.comm.raw_done(r) {
                    break;
                }
                let _ = self.comm.progress();
            }
            if self.comm.raw_take(r).is_none() {
                // Still being written into (a matched long message): leak the buffer rather
                // than free memory the engine writes to.
                std::mem::forget(std::mem::take(&mut self.bufs[q]));
            }
            if self.in_place {
                self.comm.raw_release(r);
            }
        }
    }
}

impl Drop for Posted {
    fn drop(&mut self) {
        self.withdraw();
    }
}

/// What arrived at a sync, per source: the early messages, then the closing message (read in
/// place in the sender's ring or in its pre-posted buffer; our own stream for ourselves).
struct Streams<'a> {
    me: usize,
    chunks: &'a [Vec<Vec<u8>>],
    bufs: &'a [Vec<u8>],
    lens: &'a [Option<usize>],
    ring: &'a [Option<(usize, usize)>],
    own: &'a [u8],
}

impl<'a> Streams<'a> {
    fn parts(&self, q: usize) -> impl Iterator<Item = &'a [u8]> + 'a {
        let last: &'a [u8] = if q == self.me {
            self.own
        } else if let Some(&Some((at, len))) = self.ring.get(q) {
            // SAFETY: ferry-core keeps the message in the ring, unchanged, until
            // `Posted::release`, which `sync` calls only once it has dropped the streams.
            unsafe { std::slice::from_raw_parts(at as *const u8, len) }
        } else {
            match self.lens[q] {
                Some(n) => &self.bufs[q][..n],
                None => &[],
            }
        };
        self.chunks[q]
            .iter()
            .map(Vec::as_slice)
            .chain(std::iter::once(last))
    }
}

/// The memory of a context's areas: address → layout, freed on drop.
struct Allocs(HashMap<usize, Layout>);

/// Reads little-endian fields from a record stream.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.buf.get(self.at..end)?;
        self.at = end;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    }
    fn u64(&mut self) -> Option<usize> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
    }
    fn done(&self) -> bool {
        self.at == self.buf.len()
    }
}

/// The registrations of one process in one superstep, from its REC_REG record.
struct RegShape {
    pushes: Vec<usize>,
    pops: Vec<u32>,
}

impl RegShape {
    fn of(record: &[u8]) -> RegShape {
        let mut r = Reader { buf: record, at: 1 };
        let np = r.u32().unwrap_or(0);
        let pushes = (0..np).map(|_| r.u64().unwrap_or(0)).collect();
        let npop = r.u32().unwrap_or(0);
        let pops = (0..npop).map(|_| r.u32().unwrap_or(0)).collect();
        RegShape { pushes, pops }
    }
}

impl std::fmt::Display for RegShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bsp_push_reg (sizes {:?}) and bsp_pop_reg of registrations {:?}",
            self.pushes.len(),
            self.pushes,
            self.pops
        )
    }
}

fn put_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put_u64(v: &mut Vec<u8>, x: usize) {
    v.extend_from_slice(&(x as u64).to_le_bytes());
}

impl Bsp {
    /// Starts ferry (`ferry_core::init`) and a BSP computation on all its processes, with
    /// settings from the environment.
    pub fn init() -> Result<Bsp, ferry_core::Error> {
        let world = ferry_core::init()?;
        Ok(Bsp::begin(world, None))
    }

    /// Starts a BSP computation on the first `nprocs` processes of `world` (all when `None`
    /// or larger than the job). Collective over the whole world; process 0's `nprocs` is the
    /// one that counts (as in BSPlib, where with `bsp_init` only process 0 runs the code that
    /// decides it). On the processes beyond `nprocs` it finalizes the world and exits with
    /// status 0.
    pub fn begin(world: World, nprocs: Option<usize>) -> Bsp {
        let config = match Config::from_env() {
            Ok(c) => c,
            Err(e) => world.abort(1, &format!("ferry-bsp: process {}: {e}", world.rank())),
        };
        Bsp::with_config(world, nprocs, config)
    }

    /// As [`Bsp::begin`], with explicit settings.
    pub fn with_config(world: World, nprocs: Option<usize>, mut config: Config) -> Bsp {
        let size = world.size();
        let rank = world.rank();
        let mut asked = [nprocs.map_or(u64::MAX, |n| n as u64)];
        if let Err(e) = world.bcast(&mut asked, 0) {
            world.abort(1, &format!("ferry-bsp: process {rank}: bsp_begin: {e}"));
        }
        let p = usize::try_from(asked[0])
            .unwrap_or(usize::MAX)
            .clamp(1, size);
        let comm = if p == size {
            world.dup()
        } else {
            match world.split((rank < p).then_some(0), 0) {
                Ok(Some(c)) => Ok(c),
                Ok(None) => {
                    // Not part of the computation: end cleanly once the others do.
                    drop(world.finalize());
                    std::process::exit(0)
                }
                Err(e) => Err(e),
            }
        };
        let comm = match comm {
            Ok(c) => c,
            Err(e) => world.abort(1, &format!("ferry-bsp: process {rank}: bsp_begin: {e}")),
        };
        let me = comm.rank();
        // Early sends go eagerly (they return once copied out, never waiting for the receiver
        // to sync), so one frame must carry them.
        for q in (0..p).filter(|&q| q != me) {
            if let Ok(limit) = comm.active_limit(q) {
                config.early_bytes = config.early_bytes.min(limit);
            }
        }
        let (order, from_order) = if config.reorder {
            (
                (1..p).map(|k| (me + k) % p).collect(),
                (1..p).map(|k| (me + p - k) % p).collect(),
            )
        } else {
            let all: Vec<usize> = (0..p).filter(|&q| q != me).collect();
            (all.clone(), all)
        };
        let spin = Spin::new(Duration::from_micros(config.spin_us.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            if size > cores {
                0
            } else {
                SPIN_US
            }
        })));
        // A ring record is at most an early send's size, and fits the pre-posted buffer.
        let ring_want = if config.combine && config.ring {
            let mut w = if config.early_bytes > 0 {
                config.early_bytes
            } else {
                usize::MAX
            };
            if config.prepost {
                w = w.min(config.prepost_bytes);
            }
            w
        } else {
            0
        };
        // On shared memory exactly when a reservation can be had now, with nothing sent yet.
        let ring_peer: Vec<bool> = (0..p)
            .map(|q| ring_want > 0 && q != me && comm.raw_reserve(q, 8, 8).ok().flatten().is_some())
            .collect();
        let mut posted = Posted {
            comm: comm.clone(),
            bufs: Vec::new(),
            reqs: vec![None; p],
            in_place: config.prepost && config.in_place,
            taken: vec![None; p],
            ring: vec![None; p],
        };
        if config.prepost {
            posted.bufs = (0..p)
                .map(|q| {
                    if q != me {
                        vec![0u8; config.prepost_bytes]
                    } else {
                        Vec::new()
                    }
                })
                .collect();
            if let Err(e) = posted.post(me, tag(KIND_FINAL, 0)) {
                world.abort(1, &format!("ferry-bsp: process {rank}: bsp_begin: {e}"));
            }
        }
        Bsp {
            pid: me,
            nprocs: p,
            comm,
            world: ManuallyDrop::new(world),
            config,
            start: Instant::now(),
            step: 0,
            slots: Vec::new(),
            free_slots: BinaryHeap::new(),
            by_addr: HashMap::new(),
            slot_cache: Cell::new(None),
            pushes: Vec::new(),
            pops: Vec::new(),
            out: vec![Vec::new(); p],
            out_single: vec![Vec::new(); p],
            last_put: vec![NO_LAST; p],
            ring: (0..p).map(|_| None).collect(),
            ring_want,
            ring_peer,
            ring_off: vec![false; p],
            hpputs: (0..p).map(|_| Vec::new()).collect(),
            gets: vec![Vec::new(); p],
            tagsize: 0,
            next_tagsize: 0,
            inbox: Vec::new(),
            msgs: Vec::new(),
            next_msg: 0,
            order,
            from_order,
            posted,
            spin,
            reg: Vec::new(),
            sends: Vec::with_capacity(2 * p),
            chunks: vec![Vec::new(); p],
            pre_len: vec![None; p],
            replies: vec![Vec::new(); p],
            reply_out: vec![Vec::new(); p],
            allocs: Allocs(HashMap::new()),
            ending: false,
            ended: false,
        }
    }

    /// Ends the computation: waits for the other processes and finalizes ferry.
    ///
    /// Its last exchange is a sync that tells every process this one is ending, so a process
    /// still calling `sync` (or ending while the others sync) stops the job, naming both,
    /// instead of waiting forever for a closing message that never comes.
    pub fn end(mut self) {
        let pid = self.pid;
        self.ending = true;
        self.sync();
        // Nothing more will come: withdraw the receives posted for a next superstep, and give
        // back ring reservations (puts after the last sync), which would hold up the barrier.
        self.ring.iter_mut().for_each(|r| *r = None);
        self.posted.withdraw();
        if let Err(e) = self.comm.barrier() {
            self.fail("bsp_end", e.to_string());
        }
        self.ended = true;
        // SAFETY: taken once; `ended` tells `Drop` the field is gone.
        let world = unsafe { ManuallyDrop::take(&mut self.world) };
        drop(self);
        if let Err(e) = world.finalize() {
            eprintln!("ferry-bsp: process {pid}: bsp_end: {e}");
        }
    }

    /// This process's id, 0 ≤ pid < nprocs.
    pub fn pid(&self) -> usize {
        self.pid
    }

    /// Number of processes in the computation.
    pub fn nprocs(&self) -> usize {
        self.nprocs
    }

    /// Seconds since the computation began.
    pub fn time(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The settings in use.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Number of supersteps completed (syncs done).
    pub fn superstep(&self) -> u64 {
        self.step
    }

    /// Stops the whole job with `message`, naming this process.
    pub fn abort(&self, message: &str) -> ! {
        STOPPING.store(true, Ordering::Relaxed);
        self.world.abort(
            1,
            &format!("ferry-bsp: process {}: bsp_abort: {message}", self.pid),
        )
    }

    /// Stops the job: `call` went wrong as `detail` says. The message names this process and
    /// the call (for layers on top, such as the C ABI checking its arguments).
    #[cold]
    pub fn fail(&self, call: &str, detail: String) -> ! {
        let msg = format!("ferry-bsp: process {}: {call}: {detail}", self.pid);
        STOPPING.store(true, Ordering::Relaxed);
        self.world.abort(1, &msg)
    }

    // The checks of every put and get: the test inline, the message out of line, so that a
    // 16-word put is not dominated by the set-up of an error it never reports.
    #[inline]
    fn check_pid(&self, call: &str, pid: usize) {
        if pid >= self.nprocs {
            self.bad_pid(call, pid);
        }
    }

    #[cold]
    #[inline(never)]
    fn bad_pid(&self, call: &str, pid: usize) -> ! {
        self.fail(
            call,
            format!("process id {pid} is out of range 0..{}", self.nprocs),
        )
    }

    // ---- Areas (safe memory) ----

    /// Allocates a zeroed area of `len` elements, owned by this context until [`Bsp::free`]
    /// or the end.
    pub fn alloc<T: bytemuck::Pod>(&mut self, len: usize) -> Area<T> {
        let layout = Layout::array::<T>(len.max(1)).expect("area too large");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        self.allocs.0.insert(ptr as usize, layout);
        Area {
            addr: ptr as usize,
            len,
            _t: PhantomData,
        }
    }

    /// Frees an area. It must not be registered.
    pub fn free<T>(&mut self, area: Area<T>) {
        self.check_area("free", &area);
        if self.by_addr.get(&area.addr).is_some_and(|s| !s.is_empty())
            || self.pushes.iter().any(|&(a, _)| a == area.addr)
        {
            self.fail("free", "the area is still registered".into());
        }
        let layout = self.allocs.0.remove(&area.addr).expect("checked");
        // SAFETY: allocated by `alloc` with this layout, and removed from the table.
        unsafe { std::alloc::dealloc(area.addr as *mut u8, layout) };
    }

    fn check_area<T>(&self, call: &str, area: &Area<T>) {
        if !self.allocs.0.contains_key(&area.addr) {
            self.fail(call, "the area does not belong to this computation".into());
        }
    }

    /// The contents of an area.
    pub fn area<T: bytemuck::Pod>(&self, area: &Area<T>) -> &[T] {
        self.check_area("area", area);
        // SAFETY: the memory is owned by `self`, initialised (zeroed Pod) and only written by
        // methods taking `&mut self`.
        unsafe { std::slice::from_raw_parts(area.addr as *const T, area.len) }
    }

    /// The contents of an area, to change.
    pub fn area_mut<T: bytemuck::Pod>(&mut self, area: &Area<T>) -> &mut [T] {
        self.check_area("area_mut", area);
        // SAFETY: as in `area`, and `&mut self` excludes every other access.
        unsafe { std::slice::from_raw_parts_mut(area.addr as *mut T, area.len) }
    }

    fn check_range<T>(&self, call: &str, area: &Area<T>, offset: usize, len: usize) {
        self.check_area(call, area);
        if offset.checked_add(len).is_none_or(|e| e > area.len) {
            self.fail(
                call,
                format!(
                    "elements {offset}..{} are outside the local area of {} elements",
                    offset.saturating_add(len),
                    area.len
                ),
            );
        }
    }

    /// Registers `area` (collective by order; effective at the next sync).
    pub fn push_reg<T>(&mut self, area: &Area<T>) {
        self.check_area("bsp_push_reg", area);
        // SAFETY: the area is owned by self and lives until `free`, which refuses registered
        // areas.
        unsafe { self.push_reg_raw(area.addr as *const u8, area.len * size_of::<T>()) }
    }

    /// Unregisters `area` (collective by order; effective at the next sync).
    pub fn pop_reg<T>(&mut self, area: &Area<T>) {
        self.pop_reg_raw(area.addr as *const u8)
    }

    /// Writes `src` into `dst` at element `offset` on process `pid` at the next sync. `src` is
    /// copied now.
    pub fn put<T: bytemuck::Pod>(&mut self, pid: usize, src: &[T], dst: &Area<T>, offset: usize) {
        let sz = size_of::<T>();
        // SAFETY: `src` is a live slice; `dst` is only used as a registration key.
        unsafe {
            self.put_raw(
                pid,
                src.as_ptr() as *const u8,
                dst.addr as *const u8,
                offset * sz,
                std::mem::size_of_val(src),
            )
        }
    }

    /// As [`Bsp::put`] without buffering: `len` elements of the local area `src` from
    /// `src_offset` are read at the sync.
    pub fn hpput<T: bytemuck::Pod>(
        &mut self,
        pid: usize,
        src: &Area<T>,
        src_offset: usize,
        dst: &Area<T>,
        dst_offset: usize,
        len: usize,
    ) {
        self.check_range("bsp_hpput", src, src_offset, len);
        let sz = size_of::<T>();
        // SAFETY: the source lies inside an area owned by self, which outlives the sync.
        unsafe {
            self.hpput_raw(
                pid,
                (src.addr + src_offset * sz) as *const u8,
                dst.addr as *const u8,
                dst_offset * sz,
                len * sz,
            )
        }
    }

    /// Reads `len` elements of `src` at `src_offset` on process `pid` into the local area `dst`
    /// at `dst_offset`, at the next sync (before that sync's puts are applied).
    pub fn get<T: bytemuck::Pod>(
        &mut self,
        pid: usize,
        src: &Area<T>,
        src_offset: usize,
        dst: &Area<T>,
        dst_offset: usize,
        len: usize,
    ) {
        self.check_range("bsp_get", dst, dst_offset, len);
        let sz = size_of::<T>();
        // SAFETY: the destination lies inside an area owned by self, written only in `sync`.
        unsafe {
            self.get_raw(
                pid,
                src.addr as *const u8,
                src_offset * sz,
                (dst.addr + dst_offset * sz) as *mut u8,
                len * sz,
            )
        }
    }

    /// As [`Bsp::get`]; may transfer any time in the superstep (here: at the sync).
    pub fn hpget<T: bytemuck::Pod>(
        &mut self,
        pid: usize,
        src: &Area<T>,
        src_offset: usize,
        dst: &Area<T>,
        dst_offset: usize,
        len: usize,
    ) {
        self.get(pid, src, src_offset, dst, dst_offset, len)
    }

    // ---- Registration and DRMA on raw memory ----

    /// Registers `size` bytes at `ident`; effective at the next sync.
    ///
    /// # Safety
    /// `ident..ident+size` must stay valid for reads and writes while registered, and may be
    /// written by syncs.
    pub unsafe fn push_reg_raw(&mut self, ident: *const u8, size: usize) {
        self.pushes.push((ident as usize, size));
    }

    /// Unregisters the most recent registration of `ident`; effective at the next sync.
    pub fn pop_reg_raw(&mut self, ident: *const u8) {
        let addr = ident as usize;
        let already = self
            .pops
            .iter()
            .filter(|&&s| self.slots[s as usize].local.map(|l| l.0) == Some(addr))
            .count();
        let stack = self.by_addr.get(&addr).map(Vec::as_slice).unwrap_or(&[]);
        if already >= stack.len() {
            self.fail(
                "bsp_pop_reg",
                format!("address {addr:#x} is not registered (or its registration has not taken effect: that needs a sync)"),
            );
        }
        let slot = stack[stack.len() - 1 - already];
        self.pops.push(slot);
    }

    /// The slot in effect for `ident`.
    #[inline]
    fn slot_of(&self, call: &str, ident: usize) -> u32 {
        match self.slot_cache.get() {
            Some((addr, slot)) if addr == ident => slot,
            _ => self.slot_lookup(call, ident),
        }
    }

    /// `slot_of` past its cache.
    #[inline(never)]
    fn slot_lookup(&self, call: &str, ident: usize) -> u32 {
        match self.by_addr.get(&ident).and_then(|s| s.last()) {
            Some(&s) => {
                self.slot_cache.set(Some((ident, s)));
                s
            }
            None => self.fail(
                call,
                format!("address {ident:#x} is not registered (a registration takes effect at the next sync)"),
            ),
        }
    }

    #[inline]
    fn check_remote(&self, call: &str, pid: usize, slot: u32, offset: usize, len: usize) {
        let size = self.slots[slot as usize].sizes[pid];
        if offset.checked_add(len).is_none_or(|e| e > size) {
            self.outside_remote(call, pid, slot, offset, len);
        }
    }

    #[cold]
    #[inline(never)]
    fn outside_remote(&self, call: &str, pid: usize, slot: u32, offset: usize, len: usize) -> ! {
        let size = self.slots[slot as usize].sizes[pid];
        self.fail(
            call,
            format!(
                "bytes {offset}..{} are outside the {size}-byte area (registration #{slot}) of process {pid}",
                offset.saturating_add(len)
            ),
        )
    }

    /// Appends a record of `len` bytes for `pid`, which `write` appends to a buffer; with
    /// combining, first sends the buffer early if the record would take it past the threshold.
    /// Returns where the record starts in `out[pid]` (combining only).
    fn emit(&mut self, pid: usize, len: usize, write: impl FnOnce(&mut Vec<u8>)) -> usize {
        if !self.config.combine {
            let mut rec = Vec::with_capacity(len);
            write(&mut rec);
            self.out_single[pid].push(rec);
            return NO_PUT;
        }
        self.flush_early(pid, len);
        let buf = &mut self.out[pid];
        let at = buf.len();
        write(buf);
        self.last_put[pid] = NO_LAST;
        at
    }

    /// Whether records for `pid` may go to its ring now.
    #[inline]
    fn ring_usable(&self, pid: usize) -> bool {
        self.ring_peer[pid] && !self.ring_off[pid]
    }

    /// Appends a record made of `parts` to the records for `pid` in its ring (reserving room
    /// there if none is open; publishing the open room early if the record does not fit it).
    /// Returns where the record starts, or `None` when the ring has no room now (or records
    /// for `pid` are in `out` already, or the record is longer than a reservation): the caller
    /// buffers it, and the rest of the superstep's records for `pid` after it. Only for a
    /// `pid` that is [`Bsp::ring_usable`].
    #[inline]
    fn ring_emit(&mut self, pid: usize, parts: &[&[u8]]) -> Option<usize> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if self.ring[pid].as_ref().is_some_and(|r| r.len + len > r.cap) {
            self.publish_ring(pid, KIND_EARLY);
        }
        if self.ring[pid].is_none() {
            let res = if len > self.ring_want || !self.out[pid].is_empty() {
                None
            } else {
                self.comm
                    .raw_reserve(pid, self.ring_want, len)
                    .ok()
                    .flatten()
            };
            let Some(res) = res else {
                // The rest of the superstep goes to `out` (the records must stay in order).
                self.ring_off[pid] = true;
                return None;
            };
            self.ring[pid] = Some(RingOut {
                at: res.as_mut_ptr(),
                cap: res.capacity(),
                len: 0,
                res,
            });
        }
        let r = self.ring[pid].as_mut()?;
        let at = r.len;
        for part in parts {
            // SAFETY: `r.len + len ≤ r.cap` (checked or reserved above): inside the
            // reservation, which nothing else writes or reads before it is published.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), r.at.add(r.len), part.len()) };
            r.len += part.len();
        }
        self.last_put[pid] = NO_LAST;
        Some(at)
    }

    /// Sends the records for `pid` in its ring, if any, as the superstep's message of `kind`.
    fn publish_ring(&mut self, pid: usize, kind: i32) {
        if let Some(r) = self.ring[pid].take() {
            self.last_put[pid] = NO_LAST;
            if let Err(e) = self.comm.raw_publish(r.res, r.len, tag(kind, self.step)) {
                self.fail("bsp_sync", e.to_string());
            }
        }
    }

    /// Sends `out[pid]` now (early) if `more` bytes would take it past the threshold.
    fn flush_early(&mut self, pid: usize, more: usize) {
        let early = self.config.early_bytes;
        let buf = &self.out[pid];
        // A buffer already past the threshold (one record larger than it) cannot go as one
        // eager frame: it waits for the closing message, which the receiver posts for. Sent
        // now it would be a rendezvous that nobody receives before the sync: a deadlock.
        let fits = buf.len() <= early;
        if early > 0 && pid != self.pid && !buf.is_empty() && fits && buf.len() + more > early {
            // Eager (the threshold is clamped to one frame): returns once copied out.
            let comm = &self.comm;
            // SAFETY: `buf` is not touched until the send is done, below.
            let sent = unsafe {
                comm.raw_send(
                    buf.as_ptr(),
                    buf.len(),
                    pid,
                    tag(KIND_EARLY, self.step),
                    SendMode::Eager,
                )
            }
            .and_then(|r| {
                comm.wait_until(|done| done(r))?;
                comm.raw_take(r);
                Ok(())
            });
            if let Err(e) = sent {
                self.fail("bsp_sync (early send)", e.to_string());
            }
            self.out[pid].clear();
            self.last_put[pid] = NO_LAST;
        }
    }

    /// With combining, merges a put that continues the last record to `pid` (a put to the
    /// same registration, at the next byte) into it; false when it does not.
    #[inline]
    fn merge_put(&mut self, pid: usize, slot: u32, offset: usize, data: &[u8]) -> bool {
        let last = &mut self.last_put[pid];
        if last.at == NO_PUT || last.slot != slot || last.end != offset {
            return false;
        }
        if let Some(r) = self.ring[pid].as_mut() {
            if r.len + data.len() > r.cap {
                return false;
            }
            // SAFETY: inside the reservation (checked above); the record's head is at
            // `last.at`, written by `ring_emit`, and nothing else touches the reservation.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), r.at.add(r.len), data.len());
                r.len += data.len();
                let len = (r.len - last.at - PUT_HEAD) as u64;
                std::ptr::copy_nonoverlapping(
                    len.to_le_bytes().as_ptr(),
                    r.at.add(last.at + 13),
                    8,
                );
            }
            last.end += data.len();
            return true;
        }
        let early = self.config.early_bytes;
        let buf = &mut self.out[pid];
        if early > 0 && pid != self.pid && buf.len() + data.len() > early {
            return false;
        }
        buf.extend_from_slice(data);
        let len = buf.len() - last.at - PUT_HEAD;
        buf[last.at + 13..last.at + 21].copy_from_slice(&(len as u64).to_le_bytes());
        last.end += data.len();
        true
    }

    /// Copies `nbytes` at `src` now, to be written at byte `offset` of the area registered as
    /// `dst` on `pid` at the next sync.
    ///
    /// # Safety
    /// `src..src+nbytes` must be readable.
    pub unsafe fn put_raw(
        &mut self,
        pid: usize,
        src: *const u8,
        dst: *const u8,
        offset: usize,
        nbytes: usize,
    ) {
        self.check_pid("bsp_put", pid);
        let slot = self.slot_of("bsp_put", dst as usize);
        self.check_remote("bsp_put", pid, slot, offset, nbytes);
        if nbytes == 0 {
            return;
        }
        let data = std::slice::from_raw_parts(src, nbytes);
        if self.config.combine && self.merge_put(pid, slot, offset, data) {
            return;
        }
        self.put_record(pid, slot, offset, data);
    }

    /// A put that starts a record of its own (out of line: most puts of a superstep continue
    /// the last one).
    #[inline(never)]
    fn put_record(&mut self, pid: usize, slot: u32, offset: usize, data: &[u8]) {
        let nbytes = data.len();
        let head = drma_head(REC_PUT, slot, offset, nbytes);
        if self.ring_usable(pid) {
            if let Some(at) = self.ring_emit(pid, &[&head, data]) {
                self.last_put[pid] = LastPut {
                    at,
                    slot,
                    end: offset + nbytes,
                };
                return;
            }
        }
        let at = self.emit(pid, PUT_HEAD + nbytes, |rec| {
            rec.extend_from_slice(&head);
            rec.extend_from_slice(data);
        });
        if at != NO_PUT {
            self.last_put[pid] = LastPut {
                at,
                slot,
                end: offset + nbytes,
            };
        }
    }

    /// As [`Bsp::put_raw`], but `src` is read at the sync, not now.
    ///
    /// # Safety
    /// `src..src+nbytes` must be readable at the next sync.
    pub unsafe fn hpput_raw(
        &mut self,
        pid: usize,
        src: *const u8,
        dst: *const u8,
        offset: usize,
        nbytes: usize,
    ) {
        self.check_pid("bsp_hpput", pid);
        let slot = self.slot_of("bsp_hpput", dst as usize);
        self.check_remote("bsp_hpput", pid, slot, offset, nbytes);
        if nbytes > 0 {
            self.hpputs[pid].push(HpPut {
                src: src as usize,
                slot,
                offset,
                len: nbytes,
            });
        }
    }

    /// Reads `nbytes` at byte `offset` of the area registered as `src` on `pid` into `dst` at
    /// the next sync, before that sync's puts are applied.
    ///
    /// # Safety
    /// `dst..dst+nbytes` must be writable at the next sync.
    pub unsafe fn get_raw(
        &mut self,
        pid: usize,
        src: *const u8,
        offset: usize,
        dst: *mut u8,
        nbytes: usize,
    ) {
        self.check_pid("bsp_get", pid);
        let slot = self.slot_of("bsp_get", src as usize);
        self.check_remote("bsp_get", pid, slot, offset, nbytes);
        if nbytes == 0 {
            return;
        }
        self.gets[pid].push((dst as usize, nbytes));
        let head = drma_head(REC_GET, slot, offset, nbytes);
        if self.ring_usable(pid) && self.ring_emit(pid, &[&head]).is_some() {
            return;
        }
        self.emit(pid, PUT_HEAD, |rec| rec.extend_from_slice(&head));
    }

    /// As [`Bsp::get_raw`] (the hp variant may transfer any time; here at the sync).
    ///
    /// # Safety
    /// As [`Bsp::get_raw`].
    pub unsafe fn hpget_raw(
        &mut self,
        pid: usize,
        src: *const u8,
        offset: usize,
        dst: *mut u8,
        nbytes: usize,
    ) {
        self.check_pid("bsp_hpget", pid);
        let slot = self.slot_of("bsp_hpget", src as usize);
        self.check_remote("bsp_hpget", pid, slot, offset, nbytes);
        self.get_raw(pid, src, offset, dst, nbytes)
    }

    // ---- BSMP ----

    /// Sends `payload` with `tag` (exactly the current tag size) to `pid`'s queue of the next
    /// superstep.
    pub fn send(&mut self, pid: usize, tag: &[u8], payload: &[u8]) {
        self.check_pid("bsp_send", pid);
        if tag.len() != self.tagsize {
            self.fail(
                "bsp_send",
                format!(
                    "tag of {} bytes, but the tag size is {}",
                    tag.len(),
                    self.tagsize
                ),
            );
        }
        let head = send_head(tag.len(), payload.len());
        if self.ring_usable(pid) && self.ring_emit(pid, &[&head, tag, payload]).is_some() {
            return;
        }
        self.emit(pid, SEND_HEAD + tag.len() + payload.len(), |rec| {
            rec.extend_from_slice(&head);
            rec.extend_from_slice(tag);
            rec.extend_from_slice(payload);
        });
    }

    /// Sets the tag size (bytes) from the next sync on; returns the size in effect now.
    pub fn set_tagsize(&mut self, size: usize) -> usize {
        self.next_tagsize = size;
        self.tagsize
    }

    /// The tag size in effect in this superstep.
    pub fn tagsize(&self) -> usize {
        self.tagsize
    }

    /// Messages not yet moved, and the sum of their payload sizes.
    pub fn qsize(&self) -> (usize, usize) {
        let rest = &self.msgs[self.next_msg..];
        (
            rest.len(),
            rest.iter().map(|m| m.payload.1 - m.payload.0).sum(),
        )
    }

    /// The payload size and tag of the first message in the queue, if any.
    pub fn get_tag(&self) -> Option<(usize, &[u8])> {
        self.msgs
            .get(self.next_msg)
            .map(|m| (m.payload.1 - m.payload.0, &self.inbox[m.tag.0..m.tag.1]))
    }

    /// Moves the first message's payload into `buf` (at most `buf.len()` bytes) and removes it;
    /// returns its full payload size, or `None` when the queue is empty.
    pub fn move_into(&mut self, buf: &mut [u8]) -> Option<usize> {
        let m = *self.msgs.get(self.next_msg)?;
        self.next_msg += 1;
        let payload = &self.inbox[m.payload.0..m.payload.1];
        let n = payload.len().min(buf.len());
        buf[..n].copy_from_slice(&payload[..n]);
        Some(payload.len())
    }

    /// Removes the first message and returns its tag and payload in place, without copying.
    pub fn hpmove(&mut self) -> Option<(&[u8], &[u8])> {
        let m = *self.msgs.get(self.next_msg)?;
        self.next_msg += 1;
        Some((
            &self.inbox[m.tag.0..m.tag.1],
            &self.inbox[m.payload.0..m.payload.1],
        ))
    }

    // ---- sync ----

    /// Ends the superstep: completes all puts, gets and sends, and makes registrations and the
    /// tag size take effect. Collective.
    ///
    /// One message round: every process sends every other one its closing message (empty in
    /// an empty superstep) and receives theirs into the buffers posted at the end of the
    /// previous sync; a second round carries the replies to gets, only between processes that
    /// have any. No allocation when nothing moves (the buffers are kept from sync to sync).
    pub fn sync(&mut self) {
        let p = self.nprocs;
        let me = self.pid;
        let parity = self.step;
        self.last_put.fill(NO_LAST);
        let combine = self.config.combine;

        // The superstep's registrations, sent to every process to be matched.
        // No record stands for "no push, no pop" (the usual superstep).
        self.reg.clear();
        if !self.pushes.is_empty() || !self.pops.is_empty() {
            self.reg.push(REC_REG);
            put_u32(&mut self.reg, self.pushes.len() as u32);
            for &(_, size) in &self.pushes {
                put_u64(&mut self.reg, size);
            }
            put_u32(&mut self.reg, self.pops.len() as u32);
            for &s in &self.pops {
                put_u32(&mut self.reg, s);
            }
        }
        // `end`'s exchange says so to every process (ourselves included), after the registrations.
        let end_rec: &[u8] = if self.ending { &[REC_END] } else { &[] };

        // Closing content per destination: remaining records, hpputs (read now), registrations.
        for q in 0..p {
            let mut hpputs = std::mem::take(&mut self.hpputs[q]);
            for h in hpputs.drain(..) {
                let head = drma_head(REC_PUT, h.slot, h.offset, h.len);
                // SAFETY: the caller of hpput promised the source is readable at the sync.
                let data = unsafe { std::slice::from_raw_parts(h.src as *const u8, h.len) };
                if self.ring_usable(q) && self.ring_emit(q, &[&head, data]).is_some() {
                    continue;
                }
                let mut single = Vec::new();
                let rec = if combine {
                    &mut self.out[q]
                } else {
                    &mut single
                };
                rec.extend_from_slice(&head);
                rec.extend_from_slice(data);
                if !combine {
                    self.out_single[q].push(single);
                }
            }
            self.hpputs[q] = hpputs;
            if self.reg.is_empty() && end_rec.is_empty() {
                continue;
            }
            if self.ring_usable(q) {
                let reg = std::mem::take(&mut self.reg);
                let put = self.ring_emit(q, &[&reg, end_rec]).is_some();
                self.reg = reg;
                if put {
                    continue;
                }
            }
            self.out[q].extend_from_slice(&self.reg);
            self.out[q].extend_from_slice(end_rec);
        }
        for s in std::mem::take(&mut self.out_single[me]) {
            self.out[me].extend_from_slice(&s);
        }

        let comm = self.comm.clone();
        let prepost = self.config.prepost;
        let cap = self.config.prepost_bytes;
        let fail =
            |this: &Self, e: ferry_core::Error| -> ! { this.fail("bsp_sync", e.to_string()) };

        // Phase 1: every process sends every other one its stream and receives theirs.
        self.sends.clear();
        for i in 0..self.order.len() {
            let q = self.order[i];
            if self.ring[q].is_some() {
                // The records are in q's ring already (and `out[q]` is empty): publish them.
                debug_assert!(self.out[q].is_empty() && self.out_single[q].is_empty());
                self.publish_ring(q, KIND_FINAL);
                continue;
            }
            let mode = |len: usize| eager_up_to(len, self.config.early_bytes);
            let mut send = |buf: &[u8], tag: i32| {
                // SAFETY: `out` and `out_single` are left alone until the sends are done.
                let r = unsafe { comm.raw_send(buf.as_ptr(), buf.len(), q, tag, mode(buf.len())) };
                r.map(|r| self.sends.push(r))
            };
            let mut r = Ok(());
            for m in &self.out_single[q] {
                r = r.and_then(|_| send(m, tag(KIND_EARLY, parity)));
            }
            let fin = &self.out[q];
            r = r.and_then(|_| {
                if prepost && fin.len() > cap {
                    send(fin, tag(KIND_EARLY, parity))?;
                    send(&[], tag(KIND_FINAL, parity))
                } else {
                    send(fin, tag(KIND_FINAL, parity))
                }
            });
            if let Err(e) = r {
                fail(self, e);
            }
        }
        self.pre_len.fill(None);
        if prepost {
            // The closing messages land in the buffers posted at the last sync; early messages
            // from a process precede its closing one, so they are all in once it is.
            let reqs = &self.posted.reqs;
            if let Err(e) = self
                .spin
                .wait(&comm, |done| reqs.iter().flatten().all(|&r| done(r)))
            {
                fail(self, e);
            }
            for q in 0..p {
                let Some(req) = self.posted.reqs[q].take() else {
                    continue;
                };
                let st = self.posted.take(q, req);
                match st {
                    Some(st) if st.message_len <= st.len => self.pre_len[q] = Some(st.len),
                    _ => self.fail(
                        "bsp_sync",
                        format!("the closing message from process {q} does not fit the pre-posted buffer (is FERRY_BSP_PREPOST_BYTES the same everywhere?)"),
                    ),
                }
            }
            for i in 0..self.from_order.len() {
                let q = self.from_order[i];
                if let Err(e) = self.drain_early(q, parity) {
                    fail(self, e);
                }
            }
        } else if let Err(e) = self.poll_closing(parity) {
            fail(self, e);
        }
        // Our own sends are waited for at the end, once the messages read in place are
        // released: a rendezvous send may need an answer queued behind one of them.

        // What arrived, per source: early messages, then the closing message (read in place).
        let chunks = std::mem::take(&mut self.chunks);
        let bufs = std::mem::take(&mut self.posted.bufs);
        let ring = std::mem::take(&mut self.posted.ring);
        let own = std::mem::take(&mut self.out[me]);
        let pre_len = std::mem::take(&mut self.pre_len);
        let streams = Streams {
            me,
            chunks: &chunks,
            bufs: &bufs,
            lens: &pre_len,
            ring: &ring,
            own: &own,
        };

        // Check registrations, then serve gets (before any put is applied).
        let mut reg_seen: Vec<Option<&[u8]>> = Vec::new();
        let mut at_end: Vec<bool> = Vec::new(); // per process: in bsp_end (once one is)
        for q in 0..p {
            for c in streams.parts(q) {
                let mut r = Reader { buf: c, at: 0 };
                while !r.done() {
                    let Some(kind) = r.u8() else { break };
                    match kind {
                        REC_REG => {
                            let start = r.at - 1;
                            let np = r.u32().unwrap_or(0) as usize;
                            r.take(np * 8);
                            let npop = r.u32().unwrap_or(0) as usize;
                            r.take(npop * 4);
                            if reg_seen.is_empty() {
                                reg_seen.resize(p, None);
                            }
                            reg_seen[q] = Some(&c[start..r.at]);
                        }
                        REC_END => {
                            if at_end.is_empty() {
                                at_end.resize(p, false);
                            }
                            at_end[q] = true;
                            if !self.ending {
                                self.fail(
                                    "bsp_sync",
                                    format!("process {q} called bsp_end in superstep {} while this process syncs", self.step),
                                );
                            }
                        }
                        REC_PUT => {
                            let (_, _, len) = (r.u32(), r.u64(), r.u64().unwrap_or(0));
                            r.take(len);
                        }
                        REC_GET => {
                            let slot = r.u32().unwrap_or(u32::MAX);
                            let off = r.u64().unwrap_or(0);
                            let len = r.u64().unwrap_or(0);
                            let (addr, size) = self.local_slot(slot, "bsp_get", q);
                            if off.checked_add(len).is_none_or(|e| e > size) {
                                self.fail(
                                    "bsp_get",
                                    format!(
                                        "process {q} reads bytes {off}..{} of a {size}-byte area",
                                        off + len
                                    ),
                                );
                            }
                            // SAFETY: inside a registered area, which its owner keeps valid.
                            let data = unsafe {
                                std::slice::from_raw_parts((addr + off) as *const u8, len)
                            };
                            self.reply_out[q].extend_from_slice(data);
                        }
                        REC_SEND => {
                            let tl = r.u32().unwrap_or(0) as usize;
                            let pl = r.u64().unwrap_or(0);
                            r.take(tl);
                            r.take(pl);
                        }
                        _ => self.fail("bsp_sync", format!("corrupt stream from process {q}")),
                    }
                }
            }
        }
        let syncing = (0..p).find(|&q| !at_end.get(q).copied().unwrap_or(false));
        if let (true, Some(syncing)) = (self.ending, syncing) {
            self.fail(
                "bsp_end",
                format!(
                    "process {syncing} called bsp_sync in superstep {}, not bsp_end",
                    self.step
                ),
            );
        }
        // Sizes may differ between processes; the number of pushes and the pops may not.
        if !self.reg.is_empty() || !reg_seen.is_empty() {
            let mine = RegShape::of(&self.reg);
            for q in 0..p {
                let theirs = reg_seen.get(q).copied().flatten().unwrap_or(&[]);
                if theirs == &self.reg[..] {
                    continue; // the usual case: the very same record
                }
                let shape = RegShape::of(theirs);
                if (shape.pushes.len(), &shape.pops) != (mine.pushes.len(), &mine.pops) {
                    let theirs = if theirs.is_empty() {
                        "nothing".into()
                    } else {
                        shape.to_string()
                    };
                    self.fail(
                        "bsp_sync",
                        format!(
                            "registrations do not match in superstep {}: this process did {mine}, process {q} did {theirs}",
                            self.step
                        ),
                    );
                }
            }
        }

        // Phase 2, only between processes with gets: replies travel while puts are applied.
        let rtag = tag(KIND_REPLY, parity);
        let mut any_reply = false;
        for q in (0..p).filter(|&q| q != me) {
            let want: usize = self.gets[q].iter().map(|&(_, n)| n).sum();
            self.replies[q].clear();
            self.replies[q].resize(want, 0);
            any_reply |= want > 0 || !self.reply_out[q].is_empty();
        }
        if any_reply {
            // Into `sends`, after the closing messages.
            for q in (0..p).filter(|&q| q != me) {
                let buf = &mut self.replies[q];
                if !buf.is_empty() {
                    // SAFETY: `replies` is not touched until the receive is done.
                    match unsafe { comm.raw_recv(buf.as_mut_ptr(), buf.len(), q.into(), rtag) } {
                        Ok(r) => self.sends.push(r),
                        Err(e) => fail(self, e),
                    }
                }
            }
            for i in 0..self.order.len() {
                let q = self.order[i];
                let buf = &self.reply_out[q];
                if !buf.is_empty() {
                    // SAFETY: `reply_out` is not touched until the send is done.
                    let mode = eager_up_to(buf.len(), self.config.early_bytes);
                    match unsafe { comm.raw_send(buf.as_ptr(), buf.len(), q, rtag, mode) } {
                        Ok(r) => self.sends.push(r),
                        Err(e) => fail(self, e),
                    }
                }
            }
        }
        self.apply(&streams, &reg_seen);
        // Nothing reads the streams any more (moving `ring` proves it): the messages read in
        // place go back to their rings, before the wait for the replies queued behind them.
        self.posted.ring = ring;
        self.posted.release();
        // Our closing messages out, and the replies to gets both ways.
        let reqs = &self.sends;
        if let Err(e) = self.spin.wait(&comm, |done| reqs.iter().all(|&r| done(r))) {
            fail(self, e);
        }
        for &r in &self.sends {
            comm.raw_take(r);
        }
        self.sends.clear();
        // The combining buffers stay for the next superstep (no regrowing).
        for q in (0..p).filter(|&q| q != me) {
            self.out_single[q].clear();
            if self.out[q].capacity() > KEEP_BUF {
                self.out[q] = Vec::new();
            }
            self.out[q].clear();
        }
        for q in 0..p {
            let got = if q == me {
                &self.reply_out[me]
            } else {
                &self.replies[q]
            };
            let mut at = 0;
            for &(dst, n) in &self.gets[q] {
                // SAFETY: the caller of get promised `dst` is writable at this sync.
                unsafe {
                    std::ptr::copy(got[at..].as_ptr(), dst as *mut u8, n);
                }
                at += n;
            }
            self.gets[q].clear();
            if self.reply_out[q].capacity() > KEEP_BUF {
                self.reply_out[q] = Vec::new();
            }
            self.reply_out[q].clear();
        }
        let (mut chunks, mut own, mut pre_len) = (chunks, own, pre_len);
        chunks.iter_mut().for_each(Vec::clear);
        own.clear();
        pre_len.fill(None);
        if own.capacity() <= KEEP_BUF {
            self.out[me] = own;
        }
        self.chunks = chunks;
        self.pre_len = pre_len;
        self.posted.bufs = bufs;
        self.tagsize = self.next_tagsize;
        self.ring_off.fill(false);
        self.step += 1;
        if prepost {
            if let Err(e) = self.posted.post(me, tag(KIND_FINAL, self.step)) {
                fail(self, e);
            }
        }
    }

    /// Receives the early messages from `q` that have arrived (all of them, once its closing
    /// message is in).
    fn drain_early(&mut self, q: usize, parity: u64) -> Result<(), ferry_core::Error> {
        while let Some(st) = self.comm.iprobe(q, tag(KIND_EARLY, parity))? {
            // Its data may still have to come through q's ring (a rendezvous), where q's
            // closing message must not hold it up.
            self.posted.unhold(q);
            let mut b = vec![0u8; st.len];
            self.comm.recv(&mut b, q, st.tag)?;
            self.chunks[q].push(b);
        }
        Ok(())
    }

    /// Without pre-posted receives: polls every source (whoever is ready first is served
    /// first) until each one's closing message is in; after a while without progress, blocks
    /// in `probe` on one of them, which backs off instead of spinning.
    fn poll_closing(&mut self, parity: u64) -> Result<(), ferry_core::Error> {
        let comm = self.comm.clone();
        let mut left = self.nprocs - 1;
        let mut idle = 0u32;
        while left > 0 {
            let mut progressed = false;
            for &q in &self.from_order {
                if self.pre_len[q].is_some() {
                    continue;
                }
                let st = if idle >= IDLE_POLLS {
                    idle = 0;
                    Some(comm.probe(q, ANY_TAG)?)
                } else {
                    comm.iprobe(q, ANY_TAG)?
                };
                let Some(st) = st else { continue };
                let mut b = vec![0u8; st.len];
                comm.recv(&mut b, q, st.tag)?;
                self.chunks[q].push(b);
                progressed = true;
                if st.tag == tag(KIND_FINAL, parity) {
                    self.pre_len[q] = Some(0);
                    left -= 1;
                }
            }
            if progressed {
                idle = 0;
            } else {
                idle += 1;
                std::thread::yield_now();
            }
        }
        self.pre_len.fill(None);
        Ok(())
    }

    /// The local address and size of registration `slot`.
    fn local_slot(&self, slot: u32, call: &str, from: usize) -> (usize, usize) {
        match self.slots.get(slot as usize).and_then(|s| s.local) {
            Some(l) => l,
            None => self.fail(
                call,
                format!("process {from} names registration #{slot}, which is not registered here"),
            ),
        }
    }

    /// Applies the puts, collects the BSMP messages, and makes the superstep's registrations
    /// take effect (after the puts: a registration is usable from the next superstep on).
    fn apply(&mut self, streams: &Streams<'_>, regs: &[Option<&[u8]>]) {
        let p = self.nprocs;
        self.inbox.clear();
        self.msgs.clear();
        self.next_msg = 0;
        for q in 0..p {
            for c in streams.parts(q) {
                let mut r = Reader { buf: c, at: 0 };
                while !r.done() {
                    let Some(kind) = r.u8() else { break };
                    match kind {
                        REC_REG => {
                            let np = r.u32().unwrap_or(0) as usize;
                            r.take(np * 8);
                            let npop = r.u32().unwrap_or(0) as usize;
                            r.take(npop * 4);
                        }
                        REC_PUT => {
                            let slot = r.u32().unwrap_or(u32::MAX);
                            let off = r.u64().unwrap_or(0);
                            let len = r.u64().unwrap_or(0);
                            let Some(data) = r.take(len) else {
                                self.fail("bsp_sync", format!("corrupt stream from process {q}"))
                            };
                            let (addr, size) = self.local_slot(slot, "bsp_put", q);
                            if off.checked_add(len).is_none_or(|e| e > size) {
                                self.fail(
                                    "bsp_put",
                                    format!(
                                        "process {q} writes bytes {off}..{} of a {size}-byte area",
                                        off + len
                                    ),
                                );
                            }
                            // SAFETY: inside a registered area, which its owner keeps valid.
                            unsafe {
                                std::ptr::copy(data.as_ptr(), (addr + off) as *mut u8, len);
                            }
                        }
                        REC_GET => {
                            r.u32();
                            r.u64();
                            r.u64();
                        }
                        REC_END => {}
                        REC_SEND => {
                            let tl = r.u32().unwrap_or(0) as usize;
                            let pl = r.u64().unwrap_or(0);
                            let (Some(t), Some(pay)) = (r.take(tl), r.take(pl)) else {
                                self.fail("bsp_sync", format!("corrupt stream from process {q}"))
                            };
                            if tl != self.tagsize {
                                // Its tag would not fit what get_tag and hpmove promise.
                                self.fail(
                                    "bsp_set_tagsize",
                                    format!("process {q} sent a tag of {tl} bytes in superstep {}, where the tag size here is {} (every process must set the same)", self.step, self.tagsize),
                                );
                            }
                            let t0 = self.inbox.len();
                            self.inbox.extend_from_slice(t);
                            let p0 = self.inbox.len();
                            self.inbox.extend_from_slice(pay);
                            self.msgs.push(Msg {
                                tag: (t0, p0),
                                payload: (p0, self.inbox.len()),
                            });
                        }
                        _ => self.fail("bsp_sync", format!("corrupt stream from process {q}")),
                    }
                }
            }
        }
        // Registrations: pops first (they name older slots), then pushes get free slots.
        self.slot_cache.set(None);
        for &s in &std::mem::take(&mut self.pops) {
            if let Some((addr, _)) = self.slots[s as usize].local.take() {
                if let Some(stack) = self.by_addr.get_mut(&addr) {
                    stack.retain(|&x| x != s);
                    if stack.is_empty() {
                        self.by_addr.remove(&addr);
                    }
                }
                self.free_slots.push(Reverse(s));
            }
        }
        let pushes = std::mem::take(&mut self.pushes);
        for (i, &(addr, size)) in pushes.iter().enumerate() {
            let mut sizes = vec![0usize; p];
            for (q, reg) in regs.iter().enumerate() {
                if let Some(b) = reg {
                    let at = 5 + i * 8;
                    sizes[q] =
                        u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes")) as usize;
                }
            }
            let slot = Slot {
                local: Some((addr, size)),
                sizes,
            };
            let id = match self.free_slots.pop() {
                Some(Reverse(id)) => {
                    self.slots[id as usize] = slot;
                    id
                }
                None => {
                    self.slots.push(slot);
                    (self.slots.len() - 1) as u32
                }
            };
            self.by_addr.entry(addr).or_default().push(id);
        }
    }
}

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

impl Drop for Allocs {
    fn drop(&mut self) {
        for (&addr, &layout) in &self.0 {
            // SAFETY: allocated by `alloc` with this layout; nothing refers to it any more.
            unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        }
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
