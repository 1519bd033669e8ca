//! Shared-memory transport: per-job segments of single-producer/single-consumer byte rings.
//!
//! Every rank owns one segment, `/dev/shm/ferry-<job>-<rank>`, holding one inbound ring per
//! possible sender: each rank of the job on the same host (see `crate::host`), in world-rank
//! order, ring `i` for the `i`-th of them. Peers on other hosts have no ring. A sender maps the receiver's segment and writes records — a stamp, a frame
//! header and its payload, padded to a cache line — at the ring's tail; the receiver reads them
//! at the head. A record is visible once its stamp is: the sender stores it last, and it is the
//! record's stream position mixed with the ring's random key, which no earlier content of that
//! place holds. So a waiting receiver polls the line the record will arrive in, and a small
//! message crosses between the cores as one cache line (there is no tail word to read first).
//! The receiver hands consumed space back by storing its head only every eighth of the ring, and
//! whenever it finds the ring empty or keeps a record in place to be read later: a sender that
//! runs ahead keeps the ring full and would otherwise pull the head's line over for every
//! record (about a tenth of a streamed 8 B broadcast's time).
//!
//! Waiting ranks sleep on a futex in their own segment header instead of spinning: a sleeper
//! sets its `sleeping` word and re-checks its rings; a sender (or a receiver that freed ring
//! space) that sees the word set clears it and wakes the sleeper. Each side stores, issues a
//! sequentially consistent fence and then loads, so one of the two always sees the other.
//! Where Linux offers `membarrier(2)`'s global expedited command, the fences are asymmetric:
//! the sleeper (rare, about to make a system call anyway) issues the membarrier, which makes
//! every registered process's CPU pass a full barrier, and the sender's side (every message)
//! needs only a compiler fence — an `mfence` per push and per pop was about a tenth of an 8 B
//! ping-pong's time.
//!
//! A rank that also has TCP peers waits in TCP's epoll instead, and a thread cannot wait on a
//! futex and an epoll at once. Its sleep stores [`IN_POLL`] instead of [`ON_FUTEX`] in the same
//! word, with the same fences, and a waker that swaps that value out sends a datagram to the
//! sleeper's [`Doorbell`], an abstract-namespace UNIX datagram socket named from the job and
//! the rank that sits in the sleeper's epoll set. The datagram stays queued until the sleeper
//! drains it, so a ring that comes before the sleeper reaches `epoll_wait` still wakes it.
//! Either wake-up is out of line ([`Sleeper`]): a message to a rank that is awake costs one
//! load and a branch, as before there were two kinds of sleep.
//!
//! Large messages are copied once, straight from the sender's memory, with
//! `process_vm_readv` (CMA) — see [`cma_read`].
//!
//! Segment layout (all offsets in bytes, each atomic on its own cache line):
//!
//! ```text
//! 0    magic u64 | ranks u32 | pad | ring_bytes u64 | cpu u32 (where the owner last waited, + 1)
//! 64   sleeping u32 (futex word: 0 awake, 1 on the futex, 2 in epoll)
//! 128  ring 0: key u64 @+0 (set at creation), head u64 @+64 (consumer), data @+128 .. +128+ring_bytes
//! ...  ring s at 128 + s * (128 + ring_bytes)
//! ```

use crate::error::Error;
use ferry_wire::HEADER_LEN;
use memmap2::MmapRaw;
use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::sync::atomic::{compiler_fence, fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

const MAGIC: u64 = u64::from_le_bytes(*b"FERRYSHM");
const SEGMENT_HEADER: usize = 128;
const RING_HEADER: usize = 128;
const SLEEPING_OFFSET: usize = 64;
/// Written by the owner at the start of a wait that spins, read by peers now and then; on the
/// header's first line, which nothing else reads after attaching.
const CPU_OFFSET: usize = 24;

/// Values of a segment's `sleeping` word: its owner is awake (or about to be)…
const AWAKE: u32 = 0;
/// …sleeps on the futex (no TCP)…
const ON_FUTEX: u32 = 1;
/// …or sleeps in TCP's epoll, woken through its [`Doorbell`].
const IN_POLL: u32 = 2;

/// Where a rank about to sleep will wait: what [`ShmTransport::prepare_sleep`] announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sleep {
    /// On the futex of its segment ([`ShmTransport::sleep`]).
    OnFutex,
    /// In an epoll that watches its [`Doorbell`]; it ends the sleep with
    /// [`ShmTransport::cancel_sleep`].
    InPoll,
}

/// Path of the segment holding the inbound rings of `rank`.
pub(crate) fn segment_path(job: u64, rank: u32) -> PathBuf {
    PathBuf::from(format!("/dev/shm/ferry-{job}-{rank}"))
}

fn segment_len(ranks: usize, ring_bytes: usize) -> usize {
    SEGMENT_HEADER + ranks * (RING_HEADER + ring_bytes)
}

/// A record's stamp (see the module doc).
const STAMP_LEN: usize = 8;
/// Stamp and header: where a record's payload starts.
const PREFIX_LEN: usize = STAMP_LEN + HEADER_LEN;
/// Records start on cache lines, so a small one is a single line.
const RECORD_ALIGN: usize = 64;

// An 8 B message (stamp, frame header and payload) must fit one cache line: that is what a
// waiting receiver polls.
const _: () = assert!(record_len(8) == RECORD_ALIGN);

/// Bytes a record with `payload` bytes occupies in a ring.
pub(crate) const fn record_len(payload: usize) -> usize {
    (PREFIX_LEN + payload).next_multiple_of(RECORD_ALIGN)
}

/// Opens (or creates, owner-only) and maps the segment file at `path`.
fn map_segment(path: &Path, create_len: Option<usize>) -> Result<Segment, Error> {
    let fail = |what: &str, e: std::io::Error| {
        Error::Transport(format!(
            "cannot {what} {}: {}",
            path.display(),
            crate::limits::explain(&e)
        ))
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(create_len.is_some())
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            fail(
                if create_len.is_some() {
                    "create"
                } else {
                    "open"
                },
                e,
            )
        })?;
    if let Some(len) = create_len {
        if let Err(why) = reserve::reserve(&file, path, len) {
            // Nobody maps a segment that could not be made: it goes with its error.
            let _ = std::fs::remove_file(path);
            return Err(Error::Transport(why));
        }
    }
    let map = MmapRaw::map_raw(&file).map_err(|e| fail("map", e))?;
    Ok(Segment { map })
}

/// One mapped segment.
struct Segment {
    map: MmapRaw,
}

impl Segment {
    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    fn sleeping(&self) -> &AtomicU32 {
        // SAFETY: the mapping is at least SEGMENT_HEADER bytes, page-aligned, and lives as long
        // as `self`; offset 64 is 4-aligned and only ever accessed atomically.
        unsafe { &*(self.base().add(SLEEPING_OFFSET) as *const AtomicU32) }
    }

    fn cpu(&self) -> &AtomicU32 {
        // SAFETY: as for `sleeping`; offset 24 is 4-aligned and only ever accessed atomically.
        unsafe { &*(self.base().add(CPU_OFFSET) as *const AtomicU32) }
    }

    fn ring(&self, sender: usize, ring_bytes: usize) -> RingView {
        let offset = SEGMENT_HEADER + sender * (RING_HEADER + ring_bytes);
        assert!(offset + RING_HEADER + ring_bytes <= self.map.len());
        // SAFETY: bounds checked just above; the pointers stay valid while the mapping lives,
        // which the transport guarantees by owning every `Segment` for its own lifetime.
        unsafe {
            let base = self.base().add(offset);
            RingView {
                key: base as *const AtomicU64,
                head: base.add(64) as *const AtomicU64,
                data: base.add(RING_HEADER),
                mask: ring_bytes as u64 - 1,
            }
        }
    }
}

/// Raw pointers into one ring.
#[derive(Clone, Copy)]
struct RingView {
    key: *const AtomicU64,
    head: *const AtomicU64,
    data: *mut u8,
    mask: u64,
}

impl RingView {
    fn key(&self) -> &AtomicU64 {
        // SAFETY: see `Segment::ring`: valid, aligned, atomically accessed.
        unsafe { &*self.key }
    }
    fn head(&self) -> &AtomicU64 {
        // SAFETY: as for `key`.
        unsafe { &*self.head }
    }
    /// The stamp word of the record at stream position `pos` (a multiple of [`RECORD_ALIGN`]).
    fn stamp_at(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: `pos & mask` is a multiple of 64 inside the data area, which is 64-aligned;
        // stamp words are only ever accessed atomically.
        unsafe { &*(self.data.add((pos & self.mask) as usize) as *const AtomicU64) }
    }
    fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// Copies `len` bytes from `src` into the ring at stream position `pos`, wrapping. (The
    /// second copy only when it wraps: a copy of a small payload is a call to memcpy, and an
    /// empty one costs as much.)
    fn write_at(&self, pos: u64, src: *const u8, len: usize) {
        let offset = (pos & self.mask) as usize;
        let first = len.min(self.capacity() as usize - offset);
        // SAFETY: offset + first ≤ capacity and len - first ≤ capacity; the producer owns the
        // free region [tail, head + capacity) exclusively; `src` is valid for `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(src, self.data.add(offset), first);
            if first < len {
                std::ptr::copy_nonoverlapping(src.add(first), self.data, len - first);
            }
        }
    }

    /// Copies `len` bytes at stream position `pos` out of the ring into `dst`, wrapping.
    fn read_at(&self, pos: u64, dst: *mut u8, len: usize) {
        let offset = (pos & self.mask) as usize;
        let first = len.min(self.capacity() as usize - offset);
        // SAFETY: the consumer owns the published region [head, tail) exclusively; bounds as in
        // `write_at`; `dst` is valid for `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data.add(offset), dst, first);
            if first < len {
                std::ptr::copy_nonoverlapping(self.data, dst.add(first), len - first);
            }
        }
    }

    /// Writes the header of the record that starts at stream position `start`. A record's
    /// prefix never wraps (records start on [`RECORD_ALIGN`] and the ring's size is a power of
    /// two above it), so this is one fixed-size copy, with no call to memcpy.
    fn write_header(&self, start: u64, header: &[u8; HEADER_LEN]) {
        let offset = ((start + STAMP_LEN as u64) & self.mask) as usize;
        debug_assert!(offset + HEADER_LEN <= self.capacity() as usize);
        // SAFETY: offset + HEADER_LEN ≤ capacity (above); the producer owns the record.
        unsafe { (self.data.add(offset) as *mut [u8; HEADER_LEN]).write_unaligned(*header) }
    }

    /// Reads the header of the record that starts at `start` (see [`RingView::write_header`]).
    fn read_header(&self, start: u64) -> [u8; HEADER_LEN] {
        let offset = ((start + STAMP_LEN as u64) & self.mask) as usize;
        debug_assert!(offset + HEADER_LEN <= self.capacity() as usize);
        // SAFETY: as in `write_header`; the consumer owns the published record.
        unsafe { (self.data.add(offset) as *const [u8; HEADER_LEN]).read_unaligned() }
    }
}

// What `write_header` relies on: a record's prefix fits in its first aligned block.
const _: () = assert!(PREFIX_LEN <= RECORD_ALIGN);

mod cma;
mod input;
pub(crate) mod reserve;
mod wake;
pub(crate) use cma::{cma_read, cma_write};
pub(crate) use wake::Doorbell;
use wake::{barriers, Sleeper, MEMBARRIER_CMD_GLOBAL_EXPEDITED};

/// The stamp of a record at stream position `pos` in a ring with `key`. Keys are odd and
/// positions multiples of 64, so a stamp is never 0 (a fresh ring), and content left from an
/// earlier lap matches only by a 2^-64 chance.
fn stamp(key: u64, pos: u64) -> u64 {
    key ^ pos
}

/// Writing end of a ring in a peer's segment.
struct Producer {
    ring: RingView,
    /// The ring's key (see [`stamp`]).
    key: u64,
    tail: u64,
    head_seen: u64,
    /// Payload bytes reserved at `tail` by [`ShmTransport::reserve`], not yet published; while
    /// set, `try_push` refuses (a later record must not overtake the reserved one).
    reserved: Option<usize>,
    /// The consumer.
    peer: Sleeper,
}

impl Producer {
    /// Makes the record at `tail` visible with `header` (its `len` payload bytes are written
    /// already) and wakes the consumer if it sleeps.
    fn commit(&mut self, header: &[u8; HEADER_LEN], len: usize) {
        self.ring.write_header(self.tail, header);
        self.ring
            .stamp_at(self.tail)
            .store(stamp(self.key, self.tail), Ordering::Release);
        self.tail += record_len(len) as u64;
        self.peer.wake_if_sleeping();
    }
}

/// Reading end of a ring in our own segment.
struct Consumer {
    ring: RingView,
    /// The ring's key (see [`stamp`]).
    key: u64,
    head: u64,
    /// The head as the producer last saw it stored (see [`Consumer::release`]).
    published: u64,
    /// The producer, to wake when space frees up.
    peer: Sleeper,
}

impl Consumer {
    /// Whether a record is at the head: its stamp is there. An empty ring hands the producer
    /// every byte consumed so far.
    #[inline]
    fn has_record(&mut self) -> bool {
        let ready =
            self.ring.stamp_at(self.head).load(Ordering::Acquire) == stamp(self.key, self.head);
        if !ready && self.published != self.head {
            self.publish();
        }
        ready
    }

    /// Frees the head record of `payload` bytes. The head word the producer reads is stored
    /// only once an eighth of the ring has been consumed (or the ring is found empty, or a
    /// record is kept in place): a producer that runs ahead fills the ring and would otherwise
    /// read that line back from this core for every record it writes.
    #[inline]
    fn release(&mut self, payload: usize) {
        self.head += record_len(payload) as u64;
        if self.head - self.published >= self.ring.capacity() / 8 {
            self.publish();
        }
    }

    fn publish(&mut self) {
        self.published = self.head;
        self.ring.head().store(self.head, Ordering::Release);
        self.peer.wake_if_sleeping();
    }
}

/// A record at the head of an inbound ring.
pub(crate) struct Record<'a> {
    consumer: &'a Consumer,
    /// The frame header bytes.
    pub header: [u8; HEADER_LEN],
}

impl Record<'_> {
    /// Where the record's `len` payload bytes lie in the ring, if they do not wrap around its
    /// end. They stay there, unchanged, until the record is popped.
    pub(crate) fn payload_in_place(&self, len: usize) -> Option<*const u8> {
        let ring = &self.consumer.ring;
        let offset = ((self.consumer.head + PREFIX_LEN as u64) & ring.mask) as usize;
        // SAFETY: offset < capacity: a pointer inside the ring's data area.
        (offset + len <= ring.capacity() as usize)
            .then(|| unsafe { ring.data.add(offset) } as *const u8)
    }

    /// Copies `len` payload bytes starting at `offset` into `dst`.
    pub(crate) fn copy_payload(&self, offset: usize, dst: *mut u8, len: usize) {
        self.consumer
            .ring
            .read_at(self.consumer.head + (PREFIX_LEN + offset) as u64, dst, len);
    }
}

/// All rings of this rank: its inbound segment and the peers' segments it writes into.
/// Ring ends are indexed by world rank, `None` for ranks on other hosts and for ourselves.
pub(crate) struct ShmTransport {
    own: Segment,
    _peers: Vec<Option<Segment>>,
    /// The world ranks with a ring, ourselves excluded: what a progress pass polls.
    local_peers: Vec<u32>,
    inbound: Vec<Option<Consumer>>,
    outbound: Vec<Option<Producer>>,
    ring_bytes: usize,
    path: PathBuf,
    job: u64,
    me: u32,
}

impl ShmTransport {
    /// Creates this rank's inbound segment (before the bootstrap fence) with one ring for each
    /// of the `ranks` ranks on this host.
    pub(crate) fn create(
        job: u64,
        me: u32,
        ranks: usize,
        ring_bytes: usize,
    ) -> Result<CreatedSegment, Error> {
        let path = segment_path(job, me);
        // Registered before any peer can see this segment, so before any peer sleeps on it.
        barriers();
        let segment = map_segment(&path, Some(segment_len(ranks, ring_bytes)))?;
        // SAFETY: the fresh mapping is at least SEGMENT_HEADER bytes and nobody else has
        // mapped it yet (peers attach only after the bootstrap fence).
        unsafe {
            let base = segment.base();
            (base as *mut u64).write(MAGIC);
            (base.add(8) as *mut u32).write(ranks as u32);
            (base.add(16) as *mut u64).write(ring_bytes as u64);
        }
        for sender in 0..ranks {
            let mut key = [0u8; 8];
            getrandom::getrandom(&mut key)
                .map_err(|e| Error::Transport(format!("no random ring key: {e}")))?;
            // Odd: see `stamp`. Written before the fence that lets the peers attach.
            let key = u64::from_ne_bytes(key) | 1;
            segment
                .ring(sender, ring_bytes)
                .key()
                .store(key, Ordering::Relaxed);
        }
        Ok(CreatedSegment { segment, path })
    }

    /// Maps the segment of every rank in `local` (the world ranks on this host, ascending, `me`
    /// among them; after the fence) and builds the ring ends for a world of `size` ranks.
    pub(crate) fn attach(
        own: CreatedSegment,
        job: u64,
        me: u32,
        local: &[u32],
        size: usize,
        ring_bytes: usize,
    ) -> Result<ShmTransport, Error> {
        let len = segment_len(local.len(), ring_bytes);
        let slot = |rank: u32| local.iter().position(|&r| r == rank);
        let my_slot = slot(me).ok_or_else(|| {
            Error::Transport(format!(
                "rank {me} is not among this host's ranks {local:?}"
            ))
        })?;
        let mut peers: Vec<Option<Segment>> = (0..size).map(|_| None).collect();
        for &rank in local.iter().filter(|&&r| r != me) {
            let path = segment_path(job, rank);
            let segment = map_segment(&path, None)?;
            if segment.map.len() != len {
                return Err(Error::Transport(format!(
                    "rank {rank}'s segment {} has {} bytes, expected {len}: ranks disagree on the ring size or on who shares this host",
                    path.display(),
                    segment.map.len()
                )));
            }
            // SAFETY: length checked above; the magic word is written before the fence.
            let magic = unsafe { (segment.base() as *const u64).read() };
            if magic != MAGIC {
                return Err(Error::Transport(format!(
                    "{} is not a ferry segment",
                    path.display()
                )));
            }
            if let Some(place) = peers.get_mut(rank as usize) {
                *place = Some(segment);
            }
        }
        let own_segment = own.segment;
        let mut inbound = Vec::with_capacity(size);
        let mut outbound = Vec::with_capacity(size);
        for (rank, peer) in peers.iter().enumerate() {
            let sleeper = |peer: &Segment| Sleeper {
                sleeping: peer.sleeping(),
                job,
                rank: rank as u32,
                me,
            };
            match (peer, slot(rank as u32)) {
                (Some(peer), Some(their_slot)) => {
                    let ring = own_segment.ring(their_slot, ring_bytes);
                    inbound.push(Some(Consumer {
                        ring,
                        key: ring.key().load(Ordering::Relaxed),
                        head: 0,
                        published: 0,
                        peer: sleeper(peer),
                    }));
                    let ring = peer.ring(my_slot, ring_bytes);
                    outbound.push(Some(Producer {
                        ring,
                        key: ring.key().load(Ordering::Relaxed),
                        tail: 0,
                        head_seen: 0,
                        reserved: None,
                        peer: sleeper(peer),
                    }));
                }
                _ => {
                    inbound.push(None);
                    outbound.push(None);
                }
            }
        }
        Ok(ShmTransport {
            own: own_segment,
            _peers: peers,
            local_peers: local.iter().copied().filter(|&r| r != me).collect(),
            inbound,
            outbound,
            ring_bytes,
            path: own.path,
            job,
            me,
        })
    }

    /// Binds this rank's doorbell, for sleeping in an epoll that watches it
    /// ([`Sleep::InPoll`]).
    pub(crate) fn doorbell(&self) -> std::io::Result<Doorbell> {
        Doorbell::bind(self.job, self.me)
    }

    /// Removes this rank's segment file once every peer has mapped it (the mapping stays).
    pub(crate) fn unlink_own(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// Largest payload one record may carry.
    pub(crate) fn max_payload(&self) -> usize {
        self.ring_bytes / 2 - PREFIX_LEN
    }

    /// Writes a whole record to `peer`'s ring, or returns false when it has no room now.
    #[inline]
    pub(crate) fn try_push(
        &mut self,
        peer: usize,
        header: &[u8; HEADER_LEN],
        payload: *const u8,
        len: usize,
    ) -> bool {
        let Some(p) = self.outbound[peer].as_mut() else {
            return false;
        };
        if p.reserved.is_some() {
            return false;
        }
        let need = record_len(len) as u64;
        debug_assert!(need <= p.ring.capacity());
        if p.ring.capacity() - (p.tail - p.head_seen) < need {
            p.head_seen = p.ring.head().load(Ordering::Acquire);
            if p.ring.capacity() - (p.tail - p.head_seen) < need {
                return false;
            }
        }
        p.ring.write_at(p.tail + PREFIX_LEN as u64, payload, len);
        p.commit(header, len);
        true
    }

    /// Reserves the payload of the next record to `peer`: up to `want` bytes (at least `min`,
    /// else `None`) that are free and contiguous in the ring, starting right after where the
    /// record's header will go. Returns where they are and how many; the caller writes the
    /// payload there (nothing is visible to the peer yet) and then [`ShmTransport::publish`]es
    /// or [`ShmTransport::abandon`]s it. Until then `try_push` to `peer` refuses, and a second
    /// reservation too.
    pub(crate) fn reserve(
        &mut self,
        peer: usize,
        want: usize,
        min: usize,
    ) -> Option<(*mut u8, usize)> {
        let max = self.max_payload();
        let p = self.outbound.get_mut(peer)?.as_mut()?;
        if p.reserved.is_some() {
            return None;
        }
        let capacity = p.ring.capacity();
        let start = p.tail + PREFIX_LEN as u64;
        let offset = (start & p.ring.mask) as usize;
        // Free bytes past the stamp and header (the record then fits whole: tail, head and the
        // capacity are multiples of its alignment), and of those the ones before the ring
        // wraps: an in-place reader needs them whole.
        let free = |head: u64| (capacity - (p.tail - head)).saturating_sub(PREFIX_LEN as u64);
        let contiguous = capacity as usize - offset;
        let want = want.min(max).min(contiguous);
        if (free(p.head_seen) as usize) < want {
            p.head_seen = p.ring.head().load(Ordering::Acquire);
        }
        let got = want.min(free(p.head_seen) as usize);
        if got < min || got == 0 {
            return None;
        }
        p.reserved = Some(got);
        // SAFETY: offset + got ≤ capacity: inside the ring's data area, in the free region the
        // producer owns until it publishes.
        Some((unsafe { p.ring.data.add(offset) }, got))
    }

    /// Makes the reserved record to `peer` visible with `header` and `len` payload bytes (at
    /// most what was reserved; the rest is given back). False if nothing was reserved.
    pub(crate) fn publish(&mut self, peer: usize, header: &[u8; HEADER_LEN], len: usize) -> bool {
        let Some(p) = self.outbound.get_mut(peer).and_then(Option::as_mut) else {
            return false;
        };
        match p.reserved.take() {
            Some(got) if len <= got => {}
            other => {
                p.reserved = other;
                return false;
            }
        }
        p.commit(header, len);
        true
    }

    /// Gives back the reserved space to `peer`, publishing nothing.
    pub(crate) fn abandon(&mut self, peer: usize) {
        if let Some(p) = self.outbound.get_mut(peer).and_then(Option::as_mut) {
            p.reserved = None;
        }
    }

    /// The record at the head of the ring from `peer`, if one is there.
    pub(crate) fn peek(&mut self, peer: usize) -> Option<Record<'_>> {
        let c = self.inbound[peer].as_mut()?;
        if !c.has_record() {
            return None;
        }
        let header = c.ring.read_header(c.head);
        Some(Record {
            consumer: c,
            header,
        })
    }

    /// Whether any inbound ring holds a record: the cheap first look of an idle progress pass
    /// (a load of the stamp at each ring's head).
    #[inline]
    pub(crate) fn any_ready(&mut self) -> bool {
        self.inbound.iter_mut().flatten().any(Consumer::has_record)
    }

    /// Releases the head record from `peer` that carried `payload` bytes.
    #[inline]
    pub(crate) fn pop(&mut self, peer: usize, payload: usize) {
        if let Some(c) = self.inbound[peer].as_mut() {
            c.release(payload);
        }
    }

    /// Hands the producer of `peer`'s ring every byte consumed so far, as before a record
    /// stays at the head for a while.
    pub(crate) fn publish_head(&mut self, peer: usize) {
        if let Some(c) = self.inbound[peer].as_mut() {
            if c.published != c.head {
                c.publish();
            }
        }
    }

    /// The `i`-th of the peers with a ring (the other ranks of this host, ascending), if any.
    #[inline]
    pub(crate) fn local_peer(&self, i: usize) -> Option<usize> {
        self.local_peers.get(i).map(|&r| r as usize)
    }

    /// The job this transport's segments belong to (their names start with it).
    pub(crate) fn job(&self) -> u64 {
        self.job
    }

    /// Whether `rank` shares this host (has a ring); false for ourselves.
    pub(crate) fn has_ring(&self, rank: usize) -> bool {
        self.outbound.get(rank).is_some_and(Option::is_some)
    }

    /// Wakes `rank` if it sleeps, after a store into memory it watches outside the rings (a
    /// shared collective segment): the same store-then-look as a record's push.
    pub(crate) fn wake(&self, rank: usize) {
        if let Some(Some(p)) = self.outbound.get(rank) {
            p.peer.wake_if_sleeping();
        }
    }

    /// Publishes the CPU this rank waits on, for [`ShmTransport::sharing_cpu`] of its peers.
    pub(crate) fn note_cpu(&self, cpu: u32) {
        self.own.cpu().store(cpu.wrapping_add(1), Ordering::Relaxed);
    }

    /// The lowest-ranked peer that last waited on `cpu`, if one did: spinning there may hold
    /// back the very process this rank waits for.
    pub(crate) fn sharing_cpu(&self, cpu: u32) -> Option<u32> {
        let cpu = cpu.wrapping_add(1);
        (0..)
            .zip(&self._peers)
            .find(|(_, peer)| {
                peer.as_ref()
                    .is_some_and(|p| p.cpu().load(Ordering::Relaxed) == cpu)
            })
            .map(|(rank, _)| rank)
    }

    /// This rank's world rank.
    pub(crate) fn me(&self) -> u32 {
        self.me
    }

    /// Announces that this rank is about to sleep, and where. The caller must then look for work
    /// once more and sleep only if it found none: [`ShmTransport::sleep`] on the futex, or in
    /// an epoll that watches its [`Doorbell`], ending with [`ShmTransport::cancel_sleep`].
    pub(crate) fn prepare_sleep(&self, sleep: Sleep) {
        let word = match sleep {
            Sleep::OnFutex => ON_FUTEX,
            Sleep::InPoll => IN_POLL,
        };
        self.own.sleeping().store(word, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if barriers().heavy_for_sleepers {
            // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0) };
        }
    }

    /// Sleeps until a peer wakes us or `timeout` passes.
    pub(crate) fn sleep(&self, timeout: Duration) {
        let word = self.own.sleeping();
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a valid, aligned word of our own mapping with a valid timespec;
        // it returns at once if the word is no longer ON_FUTEX.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                ON_FUTEX,
                &ts as *const libc::timespec,
            );
        }
        word.store(AWAKE, Ordering::Relaxed);
    }

    /// Withdraws the sleep announcement (or ends a sleep in epoll).
    pub(crate) fn cancel_sleep(&self) {
        self.own.sleeping().store(AWAKE, Ordering::Relaxed);
    }
}

/// A created but not yet attached segment. If setup fails before it is unlinked, the launcher
/// removes the file with the rest of the job's segments.
pub(crate) struct CreatedSegment {
    segment: Segment,
    path: PathBuf,
}

#[cfg(test)]
mod tests;
