//! Collectives through one shared segment per communicator per host.
//!
//! A communicator whose ranks all share this host gets, at its first blocking collective if
//! the selection table sends some call of its size to `shared_memory`, a segment of its own:
//! `/dev/shm/ferry-<job>-coll-<context>-<first member>`, made by its rank 0, mapped by the
//! others and unlinked once they have (two agreements over messages say whether every rank
//! could; if one could not, the communicator keeps its message algorithms for good). Its size
//! is `FERRY_COLL_SHM`. Made at the first call, whatever that call is, so that every member
//! has it before any call goes through it: members that pass different counts may then choose
//! different ways for a call, and each records its way in its line ([`Segment::record_call`],
//! `crate::coll::ways`), so that the job ends naming the call instead of hanging.
//!
//! Everything in it is built on one barrier and two halves that take turns. The barrier is a
//! counter every rank adds one to, and a release word the last one stores the barrier's number
//! into before waking the sleeping members through their rings' wake-up (`ShmTransport::wake`);
//! a waiting rank keeps its engine moving (its other requests progress), then sleeps as any
//! wait does. So a barrier of n ranks costs each rank one atomic add and, when ranks outnumber
//! cores, one wake-up, where a dissemination barrier costs log2(n) rounds of them.
//!
//! Phase p is what a rank does between barriers p-1 and p. In phase p a rank writes only into
//! half p mod 2, and reads only what was written in phase p-1 (half (p-1) mod 2): a half
//! written in phase p is read in phase p+1 and written again in phase p+2, when every rank has
//! passed barrier p+1 and so is done reading it. Consecutive calls continue the phases, so the
//! last reads of one call need no barrier of their own.
//! - **barrier**: one barrier.
//! - **bcast**: the root writes chunk c while the others read chunk c-1; one barrier a chunk.
//! - **allreduce / reduce**: each rank writes its chunk c into its slot; in the next phase each
//!   rank reduces its 1/n of the chunk over all slots in rank order (any operation, commutative
//!   or not) into the result area of the other half, and in the phase after that everyone (or
//!   the root) copies the result out: reduce-scatter and allgather in place, pipelined, one
//!   barrier a chunk and one more. Short vectors, and those to a root up to 64 KiB, are
//!   folded whole after the first barrier, by every rank or by the root alone.
//! - **allgather / alltoall**: each rank writes its blocks, then reads everyone's (one loop,
//!   [`Segment::exchange`], for both).
//!
//! Reduce, allgather and alltoall say each rank's byte count before their first barrier and
//! compare all of them after it, before any rank reads another's data: counts that differ, or
//! a rank that says its own buffers are too short ([`SHORT_BUFFERS`]), fail the call on every
//! member alike.
//!
//! Only blocking calls come here; nonblocking ones run the message schedule planned beside.

use crate::coll::executor::Reducer;
use crate::coll::ways::{PathLog, PathRecord, Way};
use crate::comm::Comm;
use crate::engine::Watch;
use crate::error::Error;
use ferry_sched::{algorithms as alg, Order};
use memmap2::MmapRaw;
use std::cell::{Cell, RefCell};
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"FERRYCOL");
/// Header: magic u64 @0, ranks u64 @8, half u64 @16; the arrival counter u64 on its own line
/// @64, the release word u32 @128. From @4096 two sets (by phase parity) of one line per rank,
/// where each rank says what it calls (its byte count); then, from the next page, the halves.
const ARRIVED: usize = 64;
const RELEASED: usize = 128;
const META: usize = 4096;
const PAGE: usize = 4096;
/// Set by a root waiting for a post slot to be read (its rank + 1, or 0): a u32 on its own
/// line of the header.
const WRITER_WAITING: usize = 192;
/// Short broadcasts go through post slots, without a barrier: the root writes slot
/// `call mod POST_SLOTS` and goes on, each reader copies and counts itself done, and a root
/// reuses a slot once every reader of its previous use has. Slot: stamp u32 (call + 1) and
/// length u64 on the first line, readers done u32 on the second, then the data.
const POST_SLOTS: usize = 64;
/// Readers waiting for a post slot's stamp right now: a u32 on its own line of the header. The
/// root looks at the peers' sleeping words only when it is not 0 — a reader that comes after
/// the stamp (a root running ahead) never waits, and the root then reads one line, not n-1.
const POST_WAITERS: usize = 256;
const POST_HEAD: usize = 2 * LINE;
// Each header word on a line of its own, all before the meta lines.
const _: () = assert!(WRITER_WAITING >= RELEASED + LINE && POST_WAITERS >= WRITER_WAITING + LINE);
const _: () = assert!(POST_WAITERS + LINE <= META);

/// Largest broadcast that goes through a post slot.
pub(crate) const POST_MAX: usize = 4096;
const POST_SLOT: usize = POST_HEAD + POST_MAX;
/// Slots and parts start on cache lines.
const LINE: usize = 64;
/// Live segments a process keeps at most (`Collectives::live_segments`); a communicator beyond keeps its message algorithms.
const MAX_SEGMENTS: usize = 64;
/// Reductions up to this many bytes are reduced whole by every rank after one barrier, instead
/// of in parts between two: for short vectors the second wake-up costs more than the reads.
const WHOLE_REDUCE: usize = 2048;
/// Reductions to a root up to this many bytes are folded whole by the root after one barrier:
/// the others only copy in, and the second barrier's wake-ups cost more than the parts spread
/// over ranks that share cores save (loops on 2 cores, 64 KiB: 3 ranks 10.3-10.5 against
/// 14.0-16.1 µs, 4 ranks 12.9-13.1 against 19.0-19.4, 8 ranks 28.2-29.1 against 30.4-31.5;
/// at 128 KiB 8 ranks took 61 against 52).
const WHOLE_REDUCE_TO_ROOT: usize = 64 << 10;

/// Where the post slots start in a segment for `ranks` ranks.
fn post_offset(ranks: usize) -> usize {
    META + (3 * ranks * LINE).next_multiple_of(PAGE)
}

/// Where the halves start in a segment for `ranks` ranks.
fn data_offset(ranks: usize) -> usize {
    post_offset(ranks) + (POST_SLOTS * POST_SLOT).next_multiple_of(PAGE)
}

/// Bytes of a segment for `ranks` ranks with halves of `half` bytes.
fn segment_len(ranks: usize, half: usize) -> usize {
    data_offset(ranks) + 2 * half
}

/// What a blocking call does through the segment, chosen when it is planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SharedPlan {
    Barrier,
    Bcast {
        bytes: usize,
        root: usize,
    },
    /// Allreduce (`root` None) or reduce to `root`; the input is the receive buffer if
    /// `in_place`.
    Reduce {
        bytes: usize,
        elem: usize,
        root: Option<usize>,
        in_place: bool,
    },
    Allgather {
        block: usize,
    },
    Alltoall {
        block: usize,
    },
}

impl SharedPlan {
    /// Whether a segment of `half` bytes a half can carry this call for `ranks` ranks.
    pub(crate) fn fits(&self, ranks: usize, half: usize) -> bool {
        match *self {
            SharedPlan::Reduce { elem, .. } => elem > 0 && reduce_chunk(half, ranks, elem) > 0,
            SharedPlan::Allgather { .. } => exchange_chunk(half, ranks, 1) > 0,
            SharedPlan::Alltoall { .. } => exchange_chunk(half, ranks, ranks) > 0,
            SharedPlan::Barrier | SharedPlan::Bcast { .. } => true,
        }
    }

    /// The way this call goes through the segment: a short broadcast through a post slot
    /// ([`Segment::post`]), the rest in turns. Members that passed counts on both sides of
    /// [`POST_MAX`] go different ways, which their records then tell.
    pub(crate) fn way(&self) -> Way {
        match *self {
            SharedPlan::Bcast { bytes, .. } if bytes <= POST_MAX => Way::Posted,
            _ => Way::Segment,
        }
    }
}

/// Bytes of a reduction chunk per slot: n input slots and one result area in a half.
fn reduce_chunk(half: usize, ranks: usize, elem: usize) -> usize {
    let line = half / (ranks + 1) / LINE * LINE;
    line / elem * elem
}

/// Combines the `dst.len()` bytes at `slots` of each of the `ranks` input slots, `chunk`
/// bytes apart, in rank order into `dst`: the first two straight into it, then the others.
///
/// # Safety
/// Each of the `ranks` slots holds `dst.len()` readable bytes at `slots + i * chunk`, and
/// none of them overlaps `dst`.
unsafe fn fold_slots(
    reduce: &Reducer,
    slots: *const u8,
    chunk: usize,
    ranks: usize,
    dst: &mut [u8],
) {
    let len = dst.len();
    // SAFETY: as the caller promises.
    let slot = |i: usize| unsafe { std::slice::from_raw_parts(slots.add(i * chunk), len) };
    if ranks < 2 {
        dst.copy_from_slice(slot(0));
        return;
    }
    reduce.apply_apart(slot(0), slot(1), dst);
    for i in 2..ranks {
        reduce.apply(slot(i), dst, Order::DstFirst);
    }
}

/// Bytes of a chunk slot of an allgather or alltoall: every rank writes `blocks` slots (one
/// block for everyone, or one for each rank) into a half.
fn exchange_chunk(half: usize, ranks: usize, blocks: usize) -> usize {
    half / (ranks * blocks) / LINE * LINE
}

/// Half of `FERRY_COLL_SHM`, in whole pages.
pub(crate) fn half_of(setting: usize) -> usize {
    setting / 2 / PAGE * PAGE
}

/// One communicator's mapped segment and where this rank is in its phases.
pub(crate) struct Segment {
    map: MmapRaw,
    ranks: usize,
    me: usize,
    half: usize,
    /// Barriers passed: the same count on every member between calls.
    phase: Cell<u64>,
    /// Short broadcasts made (the same count on every member between calls).
    posts: Cell<u64>,
    /// Which way this rank's blocking calls went (its line shows the others the latest).
    paths: RefCell<PathLog>,
}

fn path_of(job: u64, context: u32, first: u32) -> PathBuf {
    PathBuf::from(format!("/dev/shm/ferry-{job}-coll-{context}-{first}"))
}

fn open_map(path: &Path, create_len: Option<usize>) -> Result<MmapRaw, String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(create_len.is_some())
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if let Some(len) = create_len {
        // Its pages taken now: a /dev/shm too small is an error naming it, not a SIGBUS at a
        // member's first touch of a page.
        if let Err(e) = crate::shm::reserve::reserve(&file, path, len) {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    }
    MmapRaw::map_raw(&file).map_err(|e| format!("cannot map {}: {e}", path.display()))
}

impl Segment {
    fn create(path: &Path, ranks: usize, me: usize, half: usize) -> Result<Segment, String> {
        let map = open_map(path, Some(segment_len(ranks, half)))?;
        // SAFETY: the fresh mapping is longer than its header, page-aligned; nobody else maps
        // it before the agreement that follows.
        unsafe {
            let base = map.as_mut_ptr();
            (base as *mut u64).write(MAGIC);
            (base.add(8) as *mut u64).write(ranks as u64);
            (base.add(16) as *mut u64).write(half as u64);
        }
        Ok(Segment::new(map, ranks, me, half))
    }

    fn attach(path: &Path, ranks: usize, me: usize, half: usize) -> Result<Segment, String> {
        let map = open_map(path, None)?;
        if map.len() != segment_len(ranks, half) {
            return Err(format!(
                "{} has {} bytes, expected {}: ranks disagree on FERRY_COLL_SHM",
                path.display(),
                map.len(),
                segment_len(ranks, half)
            ));
        }
        // SAFETY: the mapping is longer than the header, which rank 0 wrote before the
        // agreement that let this rank open it.
        let (magic, n) = unsafe {
            let base = map.as_mut_ptr();
            (
                (base as *const u64).read(),
                (base.add(8) as *const u64).read(),
            )
        };
        if magic != MAGIC || n != ranks as u64 {
            return Err(format!(
                "{} is not this communicator's segment",
                path.display()
            ));
        }
        Ok(Segment::new(map, ranks, me, half))
    }

    fn new(map: MmapRaw, ranks: usize, me: usize, half: usize) -> Segment {
        Segment {
            map,
            ranks,
            me,
            half,
            phase: Cell::new(0),
            posts: Cell::new(0),
            paths: RefCell::default(),
        }
    }

    /// Whether `plan` can run through this segment.
    pub(crate) fn carries(&self, plan: SharedPlan) -> bool {
        plan.fits(self.ranks, self.half)
    }

    /// The line where `rank` keeps its [`PathRecord`], after the lines it says counts in:
    /// written at every call and read only by a member that waits long, so a line of its own.
    fn paths_word(&self, rank: usize) -> &AtomicU64 {
        let at = META + (2 * self.ranks + rank) * LINE;
        // SAFETY: the third set of meta lines lies before the post slots (`post_offset`);
        // 8-aligned, and only accessed atomically.
        unsafe { &*(self.map.as_mut_ptr().add(at) as *const AtomicU64) }
    }

    /// Records the way blocking call `call` goes, before this rank waits for anyone in it.
    #[inline]
    pub(crate) fn record_call(&self, call: u32, way: Way) {
        let record = self.paths.borrow_mut().log(call, way);
        self.publish(record);
    }

    /// Tells the members that this rank is finalizing: it waits in no call of theirs.
    pub(crate) fn finish(&self) {
        self.publish(self.paths.borrow().finished());
    }

    #[inline]
    fn publish(&self, record: PathRecord) {
        self.paths_word(self.me)
            .store(record.word(), Ordering::Release);
    }

    /// Whether every member has recorded this rank's latest call (or one after it), or is
    /// finalizing: a member that has not may be stuck in a call this rank went through
    /// another way, which this rank, far ahead, may be the only one to tell.
    pub(crate) fn members_caught_up(&self) -> bool {
        let mine = self.paths.borrow();
        (0..self.ranks).filter(|&r| r != self.me).all(|rank| {
            mine.reached_by(PathRecord::from_word(
                self.paths_word(rank).load(Ordering::Acquire),
            ))
        })
    }

    /// Fails if a member went another way than this rank for a call both have made: the call
    /// can then never complete (see `crate::coll::ways`).
    pub(crate) fn check_paths(&self) -> Result<(), Error> {
        let mine = self.paths.borrow();
        for rank in (0..self.ranks).filter(|&r| r != self.me) {
            let theirs = PathRecord::from_word(self.paths_word(rank).load(Ordering::Acquire));
            if let Some(d) = mine.disagreement(theirs) {
                // The one that went through the segment first, as the error says it.
                let ((first, first_way), (second, second_way)) = match d.mine {
                    Way::Messages => ((rank, d.theirs), (self.me, d.mine)),
                    _ => ((self.me, d.mine), (rank, d.theirs)),
                };
                return Err(Error::CollectivePaths {
                    call: d.call,
                    first,
                    first_way: first_way.said(),
                    second,
                    second_way: second_way.said(),
                });
            }
        }
        Ok(())
    }

    fn arrived(&self) -> &AtomicU64 {
        // SAFETY: offset 64 is inside the mapping, 8-aligned, and only accessed atomically.
        unsafe { &*(self.map.as_mut_ptr().add(ARRIVED) as *const AtomicU64) }
    }

    fn released(&self) -> &AtomicU32 {
        // SAFETY: offset 128 is inside the mapping, 4-aligned, and only accessed atomically.
        unsafe { &*(self.map.as_mut_ptr().add(RELEASED) as *const AtomicU32) }
    }

    /// The half this phase writes.
    fn write_half(&self) -> *mut u8 {
        self.half_at(self.phase.get())
    }

    /// The half the previous phase wrote.
    fn read_half(&self) -> *mut u8 {
        self.half_at(self.phase.get().wrapping_sub(1))
    }

    fn half_at(&self, phase: u64) -> *mut u8 {
        let at = data_offset(self.ranks) + (phase % 2) as usize * self.half;
        // SAFETY: both halves lie inside the mapping (`segment_len`).
        unsafe { self.map.as_mut_ptr().add(at) }
    }

    /// The line where `rank` says, in `phase`, what it calls.
    fn said(&self, phase: u64, rank: usize) -> &AtomicU64 {
        let at = META + ((phase % 2) as usize * self.ranks + rank) * LINE;
        // SAFETY: the meta lines lie inside the mapping before the halves; 8-aligned, and
        // only accessed atomically.
        unsafe { &*(self.map.as_mut_ptr().add(at) as *const AtomicU64) }
    }

    /// Says `count` for this phase; the others read it after the next barrier.
    fn say(&self, count: usize) {
        self.say_word(count as u64);
    }

    /// Says, for a call whose counts [`Segment::check_counts`] compares, `count`, or
    /// [`SHORT_BUFFERS`] if this rank's own buffers are too short for the call.
    fn say_checked(&self, count: usize, short: bool) {
        self.say_word(if short { SHORT_BUFFERS } else { count as u64 });
    }

    fn say_word(&self, word: u64) {
        self.said(self.phase.get(), self.me)
            .store(word, Ordering::Relaxed);
    }

    /// After the first barrier of a call: fails, on every member alike, if the members said
    /// different counts in the phase before, or one said its buffers are short (no rank
    /// touches the others' buffers then).
    fn check_counts(&self, mine: usize) -> Result<(), Error> {
        let before = self.phase.get().wrapping_sub(1);
        let agreed = counts_agree(self.me, mine, self.ranks, |r| {
            self.said(before, r).load(Ordering::Relaxed)
        });
        if agreed.is_err() {
            // Members that went by messages for this call (and arrived at the barrier of a
            // later one) said nothing here: that, rather than the counts read, is the error.
            self.check_paths()?;
        }
        agreed
    }

    /// Waits until every member has arrived here, keeping this rank's engine moving.
    fn barrier(&self, comm: &Comm) -> Result<(), Error> {
        let phase = self.phase.get();
        let all = (phase + 1) * self.ranks as u64;
        let next = (phase + 1) as u32;
        // AcqRel: the last arrival sees every member's writes of this phase, and its release
        // store hands them on to the waiters.
        if self.arrived().fetch_add(1, Ordering::AcqRel) + 1 == all {
            self.released().store(next, Ordering::Release);
            self.wake_others(comm);
        } else {
            comm.shared.wait_for(Watch {
                word: self.released(),
                target: next,
            })?;
        }
        self.phase.set(phase + 1);
        Ok(())
    }

    fn word32(&self, at: usize) -> &AtomicU32 {
        // SAFETY: every caller passes a 4-aligned offset inside the mapping whose word is only
        // ever accessed atomically.
        unsafe { &*(self.map.as_mut_ptr().add(at) as *const AtomicU32) }
    }

    /// A short broadcast through a post slot (see [`POST_SLOTS`]): the root waits only when
    /// the slot's previous use is still being read, a reader only for its data.
    fn post(&self, comm: &Comm, buf: *mut u8, bytes: usize, root: usize) -> Result<(), Error> {
        let call = self.posts.get();
        self.posts.set(call + 1);
        let slot = post_offset(self.ranks) + (call % POST_SLOTS as u64) as usize * POST_SLOT;
        let stamp = self.word32(slot);
        let readers_done = self.word32(slot + LINE);
        let writer_waiting = self.word32(WRITER_WAITING);
        // SAFETY: the length word of the slot, 8-aligned, only accessed atomically.
        let len = unsafe { &*(self.map.as_mut_ptr().add(slot + 8) as *const AtomicU64) };
        // SAFETY: the data of the slot, POST_MAX bytes inside the mapping.
        let data = unsafe { self.map.as_mut_ptr().add(slot + POST_HEAD) };
        let readers = (self.ranks - 1) as u64;
        if self.me == root {
            // Every reader of the slot's earlier uses has counted itself done.
            let uses = call / POST_SLOTS as u64;
            let all_read = Watch {
                word: readers_done,
                target: (uses * readers) as u32,
            };
            if !all_read.reached() {
                writer_waiting.store(self.me as u32 + 1, Ordering::SeqCst);
                let waited = comm.shared.wait_for(all_read);
                writer_waiting.store(0, Ordering::Relaxed);
                waited?;
            }
            // SAFETY: `buf` holds `bytes` <= POST_MAX; nobody reads the slot until the stamp.
            unsafe { copy(buf, data, bytes) };
            len.store(bytes as u64, Ordering::Relaxed);
            stamp.store((call + 1) as u32, Ordering::Release);
            fence(Ordering::SeqCst);
            if self.word32(POST_WAITERS).load(Ordering::Relaxed) != 0 {
                self.wake_others(comm);
            }
            return Ok(());
        }
        let stamped = Watch {
            word: stamp,
            target: (call + 1) as u32,
        };
        if !stamped.reached() {
            // Counted before the look inside the wait, so that a root storing the stamp after
            // that look sees the count (each side stores, then loads, with a full fence).
            let waiters = self.word32(POST_WAITERS);
            waiters.fetch_add(1, Ordering::SeqCst);
            let waited = comm.shared.wait_for(stamped);
            waiters.fetch_sub(1, Ordering::Relaxed);
            waited?;
        }
        let total = len.load(Ordering::Relaxed) as usize;
        // SAFETY: the root wrote `total` <= POST_MAX bytes before the stamp this rank saw.
        unsafe { copy(data, buf, total.min(bytes)) };
        readers_done.fetch_add(1, Ordering::SeqCst);
        let waiting = writer_waiting.load(Ordering::SeqCst);
        if waiting != 0 {
            let engine = comm.shared.engine.borrow();
            if let (Some(shm), Some(&world)) = (
                engine.shm_transport(),
                comm.group.world_of.get(waiting as usize - 1),
            ) {
                shm.wake(world as usize);
            }
        }
        if total != bytes {
            return Err(mismatch(self.me, bytes, root, total));
        }
        Ok(())
    }

    /// Wakes every other member that sleeps, after a store they may wait for.
    fn wake_others(&self, comm: &Comm) {
        let engine = comm.shared.engine.borrow();
        if let Some(shm) = engine.shm_transport() {
            for (r, &world) in comm.group.world_of.iter().enumerate() {
                if r != self.me {
                    shm.wake(world as usize);
                }
            }
        }
    }

    /// The root's count decides the chunks (a receiver learns it after the first barrier),
    /// so ranks that passed different counts still take the same turns.
    fn bcast(&self, comm: &Comm, buf: *mut u8, bytes: usize, root: usize) -> Result<(), Error> {
        let chunk = self.half;
        let from_root = self.me == root;
        let first = self.phase.get();
        if from_root {
            self.say(bytes);
        }
        let mut total = bytes;
        let mut chunks = bytes.div_ceil(chunk).max(1);
        let mut c = 0;
        while c <= chunks {
            if c == 1 && !from_root {
                total = self.said(first, root).load(Ordering::Relaxed) as usize;
                chunks = total.div_ceil(chunk).max(1);
            }
            let span = |c: usize| (c * chunk, chunk.min(total.saturating_sub(c * chunk)));
            if from_root && c < chunks {
                let (at, len) = span(c);
                // SAFETY: `buf` holds `bytes` (checked by the caller); a chunk fits a half.
                unsafe { copy(buf.add(at), self.write_half(), len) };
            }
            if !from_root && c > 0 {
                let (at, len) = span(c - 1);
                // What fits this rank's buffer of `bytes`.
                let len = len.min(bytes.saturating_sub(at));
                // SAFETY: as above; the previous phase wrote this chunk into that half.
                unsafe { copy(self.read_half(), buf.add(at), len) };
            }
            if c < chunks {
                self.barrier(comm)?;
            }
            c += 1;
        }
        if total != bytes {
            return Err(mismatch(self.me, bytes, root, total));
        }
        Ok(())
    }

    /// Allreduce (`root` None) or reduce; see the module doc.
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &self,
        comm: &Comm,
        input: *const u8,
        output: *mut u8,
        bytes: usize,
        elem: usize,
        root: Option<usize>,
        reduce: &Reducer,
        short: bool,
    ) -> Result<(), Error> {
        let (n, me) = (self.ranks, self.me);
        let chunk = reduce_chunk(self.half, n, elem);
        let chunks = bytes.div_ceil(chunk).max(1);
        let span = |c: usize| (c * chunk, chunk.min(bytes.saturating_sub(c * chunk)));
        let wants_result = root.is_none_or(|r| r == me);
        let whole_up_to = match root {
            Some(_) => WHOLE_REDUCE_TO_ROOT,
            None => WHOLE_REDUCE,
        };
        let whole = bytes <= whole_up_to.min(chunk);
        self.say_checked(bytes, short);
        for step in 0..chunks + 2 {
            let (write, read) = (self.write_half(), self.read_half());
            if step == 1 {
                self.check_counts(bytes)?;
                if whole {
                    if wants_result && bytes > 0 {
                        // SAFETY: the previous phase wrote every slot; the output holds
                        // `bytes` where a result is wanted.
                        unsafe {
                            let dst = std::slice::from_raw_parts_mut(output, bytes);
                            fold_slots(reduce, read, chunk, n, dst);
                        }
                    }
                    return Ok(());
                }
            }
            if step < chunks {
                let (at, len) = span(step);
                // SAFETY: the input holds `bytes`; slot `me` of a half holds a chunk.
                unsafe { copy(input.add(at), write.add(me * chunk), len) };
            }
            if (1..=chunks).contains(&step) {
                // This rank's part of chunk step-1, whole elements, over every slot in rank
                // order, into the result area of this phase's half.
                let (_, len) = span(step - 1);
                let elems = len / elem;
                let (from, to) = (me * elems / n * elem, (me + 1) * elems / n * elem);
                if to > from {
                    // SAFETY: the slots and the result area lie inside their halves; the
                    // previous phase wrote the slots, and no other rank touches this part of
                    // either half during this phase.
                    unsafe {
                        let result = write.add(n * chunk + from);
                        let dst = std::slice::from_raw_parts_mut(result, to - from);
                        fold_slots(reduce, read.add(from), chunk, n, dst);
                    }
                }
            }
            if step >= 2 && wants_result {
                let (at, len) = span(step - 2);
                // SAFETY: the output holds `bytes` where a result is wanted; the previous
                // phase wrote the whole result of this chunk.
                unsafe { copy(read.add(n * chunk), output.add(at), len) };
            }
            if step < chunks + 1 {
                self.barrier(comm)?;
            }
        }
        Ok(())
    }

    /// Allgather or alltoall of blocks of `block` bytes (see [`Exchange`]): each rank writes
    /// its blocks, chunk by chunk, into its slots of a half, then reads its block of every
    /// rank's from the half the previous phase wrote.
    fn exchange(
        &self,
        comm: &Comm,
        kind: Exchange,
        (input, output): (*const u8, *mut u8),
        block: usize,
        short: bool,
    ) -> Result<(), Error> {
        let (n, me) = (self.ranks, self.me);
        let blocks = kind.blocks_out(n);
        let chunk = exchange_chunk(self.half, n, blocks);
        let chunks = block.div_ceil(chunk).max(1);
        let span = |c: usize| (c * chunk, chunk.min(block.saturating_sub(c * chunk)));
        // The slot of block `to` written by rank `from`.
        let slot = |from: usize, to: usize| (from * blocks + to) * chunk;
        self.say_checked(block, short);
        for c in 0..=chunks {
            if c < chunks {
                let (at, len) = span(c);
                for to in 0..blocks {
                    // SAFETY: the input holds `blocks` blocks; the slots fit a half
                    // (`exchange_chunk`).
                    unsafe {
                        copy(
                            input.add(to * block + at),
                            self.write_half().add(slot(me, to)),
                            len,
                        )
                    };
                }
            }
            if c == 1 {
                self.check_counts(block)?;
            }
            if c > 0 {
                let (at, len) = span(c - 1);
                for from in 0..n {
                    // SAFETY: the output holds n blocks; the previous phase wrote the slots.
                    unsafe {
                        copy(
                            self.read_half().add(slot(from, kind.block_for(me))),
                            output.add(from * block + at),
                            len,
                        )
                    };
                }
            }
            if c < chunks {
                self.barrier(comm)?;
            }
        }
        Ok(())
    }
}

/// The two calls that [`Segment::exchange`] serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exchange {
    /// Each rank's one block goes to every rank.
    Allgather,
    /// Each rank's block `r` goes to rank `r`.
    Alltoall,
}

impl Exchange {
    /// Blocks each of `ranks` ranks writes.
    fn blocks_out(self, ranks: usize) -> usize {
        match self {
            Exchange::Allgather => 1,
            Exchange::Alltoall => ranks,
        }
    }

    /// Which of a rank's blocks rank `me` reads.
    fn block_for(self, me: usize) -> usize {
        match self {
            Exchange::Allgather => 0,
            Exchange::Alltoall => me,
        }
    }
}

/// Said instead of a count by a rank whose own buffers are too short for the call (the caller
/// gave it stand-ins): no member passes so many bytes, so every member fails alike at the
/// count check instead of reading what this one never wrote (MPICH's
/// `errors/coll/allgatherlength`: the other ranks must detect a short one).
const SHORT_BUFFERS: u64 = u64::MAX;

/// Whether the counts the `ranks` members said (`said(rank)`) agree; else the error of rank
/// `me`, which passed `mine` bytes: a short rank named if there is one, else the first rank
/// whose count differs from rank 0's.
fn counts_agree(
    me: usize,
    mine: usize,
    ranks: usize,
    said: impl Fn(usize) -> u64,
) -> Result<(), Error> {
    if let Some(short) = (0..ranks).find(|&r| said(r) == SHORT_BUFFERS) {
        return Err(short_buffers(short));
    }
    let Some(other) = (0..ranks).find(|&r| said(r) != said(0)) else {
        return Ok(());
    };
    Err(mismatch(me, mine, other, said(other) as usize))
}

#[cold]
fn short_buffers(rank: usize) -> Error {
    Error::Protocol {
        rank,
        detail: format!("rank {rank} passed buffers too short for its counts in a collective"),
    }
}

/// What a rank that passed `mine` bytes reports when `other` passed `theirs`: truncation if
/// the other's are more, as a message longer than its receive buffer.
#[cold]
fn mismatch(me: usize, mine: usize, other: usize, theirs: usize) -> Error {
    if theirs > mine {
        Error::Truncated {
            sender: other,
            tag: 0,
            message_len: theirs,
            buffer_len: mine,
        }
    } else {
        Error::Protocol {
            rank: other,
            detail: format!(
                "collective counts differ: rank {other} passed {theirs} bytes, rank {me} {mine}"
            ),
        }
    }
}

/// Copies `len` bytes; the two regions never overlap (one is in the segment, one is not, or
/// they are different slots).
///
/// # Safety
/// Both regions must be valid for `len` bytes.
unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    if len > 0 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
    }
}

impl Comm {
    /// This communicator's segment, set up at its first blocking collective where the
    /// selection table may send a call of its size through one (so that every member has it,
    /// or none does, before any call could choose it); `None` if it has none (its ranks are
    /// not all on this host, the setting is off, or a member could not make or map it).
    #[inline]
    pub(crate) fn collective_segment(&self) -> Result<Option<&Rc<Segment>>, Error> {
        match self.calls.segment.get() {
            Some(segment) => Ok(segment.as_ref()),
            None => self.set_up_segment(),
        }
    }

    #[cold]
    #[inline(never)]
    fn set_up_segment(&self) -> Result<Option<&Rc<Segment>>, Error> {
        let settings = &self.shared.in_effect;
        let spans = ferry_sched::hierarchical::count_clusters(&self.clusters());
        let segment = if settings.coll_shm_bytes > 0
            && spans <= 1
            && settings.coll.selection.may_share(self.size())
        {
            self.make_segment()?.map(Rc::new)
        } else {
            None
        };
        if let Some(made) = &segment {
            (self.shared.coll.borrow_mut()).keep_segment(&self.group, made);
        }
        Ok(self.calls.segment.get_or_init(|| segment).as_ref())
    }

    /// Rank 0 makes the file, everyone agrees, the others map it, everyone agrees again, rank
    /// 0 unlinks it. Every member takes the same turns, so all end with a segment or none.
    fn make_segment(&self) -> Result<Option<Segment>, Error> {
        let (n, me) = (self.size(), self.rank());
        let half = half_of(self.shared.in_effect.coll_shm_bytes);
        let (job, local) = {
            let engine = self.shared.engine.borrow();
            match engine.shm_transport() {
                Some(shm) => {
                    let local = (self.group.world_of.iter().enumerate())
                        .all(|(r, &w)| r == me || shm.has_ring(w as usize));
                    (shm.job(), local)
                }
                None => (0, false),
            }
        };
        // Whether the members share a host is the same answer on every member, so a
        // communicator that spans hosts skips the agreements.
        if n < 2 || !local {
            return Ok(None);
        }
        let willing = half > 0 && self.shared.coll.borrow().live_segments() < MAX_SEGMENTS;
        let path = path_of(job, self.context, self.group.world_of[0]);
        let complain = |e: &str| {
            eprintln!(
                "ferry: rank {me}: no shared collective segment ({e}); this communicator's collectives go by messages"
            )
        };
        let mut made = None;
        if me == 0 && willing {
            match Segment::create(&path, n, me, half) {
                Ok(s) => made = Some(s),
                Err(e) => complain(&e),
            }
        }
        let created = if me == 0 { made.is_some() } else { willing };
        if !self.all_agree(created)? {
            if made.is_some() {
                let _ = std::fs::remove_file(&path);
            }
            return Ok(None);
        }
        if me != 0 {
            match Segment::attach(&path, n, me, half) {
                Ok(s) => made = Some(s),
                Err(e) => complain(&e),
            }
        }
        let all = self.all_agree(made.is_some())?;
        if me == 0 {
            let _ = std::fs::remove_file(&path);
        }
        Ok(made.filter(|_| all))
    }

    /// Whether `ok` holds on every member: a minimum over messages, never the segment (the
    /// setting up of which it is part of).
    fn all_agree(&self, ok: bool) -> Result<bool, Error> {
        let schedule = crate::Planned::check(alg::allreduce_recursive_doubling(
            self.rank(),
            self.size(),
            1,
            false,
        ))?;
        let min = Reducer::new(|src: &[u8], dst: &mut [u8], _: Order| {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = (*d).min(*s);
            }
        });
        let send = [u8::from(ok)];
        let mut recv = [0u8];
        self.run_messages(
            &schedule,
            (send.as_ptr(), 1),
            (recv.as_mut_ptr(), 1),
            Some(&min),
        )?;
        Ok(recv[0] == 1)
    }

    /// Runs `plan` through `segment`, this communicator's. `send` and `recv` hold what the
    /// schedule needs: the caller's buffers, or stand-ins where they are `short` (too short for
    /// this rank's counts), which this rank then says at the count check of a call that has
    /// one (reduce, allgather, alltoall), so that every member fails alike.
    pub(crate) fn run_shared(
        &self,
        segment: &Segment,
        plan: SharedPlan,
        (send, recv): (*const u8, *mut u8),
        short: bool,
        reduce: Option<&Reducer>,
    ) -> Result<(), Error> {
        match plan {
            SharedPlan::Barrier => segment.barrier(self)?,
            SharedPlan::Bcast { bytes, root } if bytes <= POST_MAX => {
                segment.post(self, recv, bytes, root)?
            }
            SharedPlan::Bcast { bytes, root } => segment.bcast(self, recv, bytes, root)?,
            SharedPlan::Reduce {
                bytes,
                elem,
                root,
                in_place,
            } => {
                let reduce = reduce.ok_or_else(|| Error::Protocol {
                    rank: self.rank(),
                    detail: "a shared reduction without an operation".into(),
                })?;
                let input = if in_place { recv.cast_const() } else { send };
                segment.reduce(self, input, recv, bytes, elem, root, reduce, short)?;
            }
            SharedPlan::Allgather { block } => {
                segment.exchange(self, Exchange::Allgather, (send, recv), block, short)?
            }
            SharedPlan::Alltoall { block } => {
                segment.exchange(self, Exchange::Alltoall, (send, recv), block, short)?
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_keeps_halves_on_pages_and_slots_on_lines() {
        for ranks in [2, 3, 8, 64, 1000] {
            assert_eq!(data_offset(ranks) % PAGE, 0);
            assert!(post_offset(ranks) >= META + 3 * ranks * LINE);
            assert!(data_offset(ranks) >= post_offset(ranks) + POST_SLOTS * POST_SLOT);
            assert_eq!(post_offset(ranks) % LINE, 0);
        }
        assert_eq!(POST_SLOT % LINE, 0);
        assert_eq!(half_of(4 << 20), 2 << 20);
        assert_eq!(half_of(65536 + 100), 32768);
    }

    #[test]
    fn reduction_chunks_are_whole_elements_and_fit_a_half_with_the_result() {
        for (half, ranks, elem) in [
            (2 << 20, 8, 8),
            (32768, 3, 12),
            (4096, 63, 1),
            (4096, 64, 8),
        ] {
            let chunk = reduce_chunk(half, ranks, elem);
            assert_eq!(chunk % elem, 0);
            assert!((ranks + 1) * chunk <= half, "{half} {ranks} {elem}");
        }
        // Too many ranks for the half: the plan does not fit, the call goes by messages.
        let plan = SharedPlan::Reduce {
            bytes: 8,
            elem: 8,
            root: None,
            in_place: false,
        };
        assert!(plan.fits(8, 2 << 20));
        assert!(!plan.fits(64, 4096));
        assert!(!SharedPlan::Alltoall { block: 8 }.fits(64, 65536));
        assert!(SharedPlan::Alltoall { block: 8 }.fits(8, 65536));
    }

    #[test]
    fn different_counts_are_truncation_or_a_named_mismatch() {
        match mismatch(1, 40, 0, 400) {
            Error::Truncated {
                sender: 0,
                message_len: 400,
                buffer_len: 40,
                ..
            } => {}
            e => panic!("{e}"),
        }
        let e = mismatch(2, 400, 0, 40).to_string();
        assert!(e.contains("rank 0 passed 40 bytes, rank 2 400"), "{e}");
    }

    #[test]
    fn a_rank_with_short_buffers_fails_every_member_alike() {
        let said = [40, SHORT_BUFFERS, 40];
        for me in 0..3 {
            match counts_agree(me, 40, 3, |r| said[r]) {
                Err(Error::Protocol { rank: 1, detail }) => {
                    assert!(
                        detail.contains("rank 1 passed buffers too short"),
                        "{detail}"
                    )
                }
                other => panic!("rank {me}: {other:?}"),
            }
        }
        assert_eq!(counts_agree(2, 40, 3, |_| 40), Ok(()));
        assert!(matches!(
            counts_agree(0, 40, 2, |r| [40, 400][r]),
            Err(Error::Truncated { sender: 1, .. })
        ));
    }

    #[test]
    fn what_a_short_rank_says_reaches_the_count_check_of_every_member() {
        let path = path_of(u64::from(std::process::id()), u32::MAX, 0);
        let half = half_of(1 << 20);
        let first = Segment::create(&path, 2, 0, half).expect("create the segment");
        let second = Segment::attach(&path, 2, 1, half);
        let _ = std::fs::remove_file(&path);
        let second = second.expect("attach the segment");
        first.say_checked(64, false);
        second.say_checked(64, true);
        // The count check reads what was said in the phase before, as after a barrier.
        for segment in [&first, &second] {
            segment.phase.set(1);
            match segment.check_counts(64) {
                Err(Error::Protocol { rank: 1, .. }) => {}
                other => panic!("rank {}: {other:?}", segment.me),
            }
        }
        // In the next phase both say their counts: they agree.
        first.say_checked(64, false);
        second.say_checked(64, false);
        for segment in [&first, &second] {
            segment.phase.set(2);
            assert_eq!(segment.check_counts(64), Ok(()));
        }
    }
}
