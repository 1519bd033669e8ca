//! Events for tools (MPI_T events, MPI 4.0 §15.3.8): the runtime's sources raise them, the MPI
//! layer hands them to the callbacks a tool registered.
//!
//! A source asks [`listening`] first: one relaxed atomic load per event type, so an event
//! costs nothing measurable when no tool listens. When one does, [`raise`] records it, with its
//! time on this process's clock ([`now_ns`]), in a bounded process-wide queue; an event that
//! finds the queue full is counted as dropped instead. The MPI layer takes what was recorded
//! ([`take`]) at the end of the MPI call that raised it, outside the runtime's state, and runs
//! the callbacks there: never inside the progress engine.

use std::collections::VecDeque;
use std::fmt::Display;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The kinds of event the runtime raises. Each one's elements are in [`Raised::elements`],
/// in the order its variant's doc gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum EventType {
    /// A message arrived with no matching receive posted: sender's world rank, tag, context
    /// id, bytes.
    UnexpectedMessage = 0,
    /// A send began a rendezvous: receiver's world rank, tag, bytes, [`RendezvousRoute`].
    RendezvousStart = 1,
    /// The path to a peer was set up or changed: peer's world rank, [`PathKind`] before (none
    /// when set up), after.
    PathChange = 2,
    /// A rail to a peer (TCP, or a fabric NIC) failed and its traffic moved to the others:
    /// peer's world rank, the rail that failed, how many of the pair's rails are left, 1 when
    /// this rank saw the failure (0 when the peer told of it).
    RailFailover = 3,
    /// A collective's algorithm was chosen: [`CollectiveKind`], [`AlgorithmKind`], ranks of
    /// the communicator, bytes (per rank for gathers and alltoall).
    CollectiveAlgorithm = 4,
}

/// How many event types there are.
pub const EVENT_TYPES: usize = 5;

/// The transport a rendezvous runs over (sender's view; the receiver picks pull or push).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i64)]
pub enum RendezvousRoute {
    /// To itself, copied in the process.
    Itself = 0,
    /// Shared memory, the receiver reads the sender's buffer in one copy (CMA).
    ShmCma = 1,
    /// Shared memory, copied through the rings.
    ShmCopy = 2,
    /// A TCP connection.
    Tcp = 3,
    /// A fabric endpoint: the receiver reads the registered buffer.
    FabricRead = 4,
}

/// What a pair's path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i64)]
pub enum PathKind {
    /// No path (before setup).
    None = 0,
    /// The rank itself.
    Itself = 1,
    /// Shared-memory rings on one host.
    Shm = 2,
    /// A TCP connection straight to the peer.
    Direct = 3,
    /// A TCP connection out through this rank's NAT.
    Nat = 4,
    /// A TCP connection through the peer's relay.
    Relay = 5,
    /// A TCP connection punched through both NATs.
    Punched = 6,
    /// A fabric endpoint (libfabric).
    Fabric = 7,
}

/// The collectives whose algorithm the selection table chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i64)]
pub enum CollectiveKind {
    /// MPI_Barrier and its kin.
    Barrier = 0,
    /// MPI_Bcast.
    Bcast = 1,
    /// MPI_Reduce.
    Reduce = 2,
    /// MPI_Allreduce.
    Allreduce = 3,
    /// MPI_Gather.
    Gather = 4,
    /// MPI_Allgather.
    Allgather = 5,
    /// MPI_Alltoall.
    Alltoall = 6,
}

/// Every algorithm of every collective, by its name in the selection table.
pub const ALGORITHMS: &[&str] = &[
    "binomial",
    "scatter_allgather",
    "hierarchical",
    "shared_memory",
    "recursive_doubling",
    "ring",
    "dissemination",
    "linear",
    "pairwise",
];

/// An algorithm's number in [`ALGORITHMS`] (by its name in the selection table).
pub type AlgorithmKind = i64;

/// The number of algorithm `name` in [`ALGORITHMS`] (-1 for a name not there).
pub fn algorithm_number(name: &str) -> AlgorithmKind {
    ALGORITHMS
        .iter()
        .position(|a| *a == name)
        .map_or(-1, |i| i as i64)
}

/// One event as raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    /// Its type.
    pub kind: EventType,
    /// When, on [`now_ns`]'s clock.
    pub time_ns: u64,
    /// Its elements (see [`EventType`]); unused ones are 0.
    pub elements: [i64; 4],
}

/// Events the queue holds at most between two MPI calls' ends.
pub const QUEUE_CAPACITY: usize = 256;

/// Per event type: how many registrations listen.
static LISTENERS: [AtomicU32; EVENT_TYPES] = [const { AtomicU32::new(0) }; EVENT_TYPES];

/// Whether the queue may hold something (set by [`raise`], cleared by [`take`]).
static PENDING: AtomicBool = AtomicBool::new(false);

struct Queue {
    raised: VecDeque<Raised>,
    /// Per event type: events dropped for a full queue since the process began.
    dropped: [u64; EVENT_TYPES],
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    raised: VecDeque::new(),
    dropped: [0; EVENT_TYPES],
});

/// Whether some registration listens for `kind`: what a source asks before it raises one.
#[inline(always)]
pub fn listening(kind: EventType) -> bool {
    LISTENERS[kind as usize].load(Ordering::Relaxed) != 0
}

/// Registrations of any type: whether an MPI call need look for events at all.
static ANY_LISTENERS: AtomicU32 = AtomicU32::new(0);

/// Whether some registration listens for any type: one relaxed load.
#[inline(always)]
pub fn listening_any() -> bool {
    ANY_LISTENERS.load(Ordering::Relaxed) != 0
}

/// A registration for `kind` begins (`true`) or ends (`false`).
pub fn listen(kind: EventType, on: bool) {
    let count = &LISTENERS[kind as usize];
    if on {
        count.fetch_add(1, Ordering::Relaxed);
        ANY_LISTENERS.fetch_add(1, Ordering::Relaxed);
    } else {
        // Never below 0, whatever the caller does.
        let fewer = |n: u32| n.checked_sub(1);
        if count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, fewer)
            .is_ok()
        {
            let _ = ANY_LISTENERS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, fewer);
        }
    }
}

/// Nanoseconds on this process's monotonic clock: since its first reading.
pub fn now_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Records an event of `kind` (callers ask [`listening`] first).
#[cold]
#[inline(never)]
pub fn raise(kind: EventType, elements: [i64; 4]) {
    let mut queue = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    // Timed under the lock, so that the queue's order is the clock's.
    let time_ns = now_ns();
    if queue.raised.len() >= QUEUE_CAPACITY {
        queue.dropped[kind as usize] += 1;
    } else {
        queue.raised.push_back(Raised {
            kind,
            time_ns,
            elements,
        });
    }
    PENDING.store(true, Ordering::Release);
}

/// Whether events (or drops) wait to be taken: one relaxed load.
#[inline(always)]
pub fn pending() -> bool {
    PENDING.load(Ordering::Relaxed)
}

/// Events dropped for a full queue since the process began, per event type.
pub fn dropped() -> [u64; EVENT_TYPES] {
    QUEUE.lock().unwrap_or_else(|e| e.into_inner()).dropped
}

/// Takes the events recorded so far, oldest first, and the dropped counts since the process
/// began, per event type.
pub fn take() -> (Vec<Raised>, [u64; EVENT_TYPES]) {
    let mut queue = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    PENDING.store(false, Ordering::Relaxed);
    (queue.raised.drain(..).collect(), queue.dropped)
}

/// Raises [`EventType::UnexpectedMessage`].
pub(crate) fn unexpected(source: u32, tag: i32, context: u32, bytes: u64) {
    let e = [source.into(), tag.into(), context.into(), bytes as i64];
    raise(EventType::UnexpectedMessage, e);
}

/// Raises [`EventType::RendezvousStart`] for a send of `bytes` to `dest` over `route`.
pub(crate) fn rendezvous(dest: u32, tag: i32, bytes: usize, route: RendezvousRoute) {
    let e = [dest.into(), tag.into(), bytes as i64, route as i64];
    raise(EventType::RendezvousStart, e);
}

/// Raises [`EventType::RailFailover`] (`alive`: the pair's rails, the failed one already
/// marked down) when someone listens.
#[inline(always)]
pub(crate) fn rail_failover(peer: u32, rail: u16, alive: &[bool], here: bool) {
    if listening(EventType::RailFailover) {
        let left = alive.iter().filter(|&&a| a).count() as i64;
        let e = [peer.into(), rail.into(), left, here.into()];
        raise(EventType::RailFailover, e);
    }
}

/// Raises [`EventType::CollectiveAlgorithm`] when someone listens.
#[inline(always)]
pub(crate) fn collective(kind: CollectiveKind, algorithm: impl Display, call: (usize, usize)) {
    if listening(EventType::CollectiveAlgorithm) {
        let (ranks, bytes) = call;
        let algorithm = algorithm_number(&algorithm.to_string());
        let e = [kind as i64, algorithm, ranks as i64, bytes as i64];
        raise(EventType::CollectiveAlgorithm, e);
    }
}

/// Raises [`EventType::PathChange`] (from [`PathKind::None`]) to `path` for world rank `peer`.
pub(crate) fn path_set_up(peer: u32, path: PathKind) {
    let e = [peer.into(), PathKind::None as i64, path as i64, 0];
    raise(EventType::PathChange, e);
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the queue and the listener counts are process-wide.
    #[test]
    fn events_queue_in_order_count_drops_and_listeners_never_go_negative() {
        assert!(!listening(EventType::RailFailover));
        listen(EventType::RailFailover, false);
        assert!(!listening(EventType::RailFailover));
        listen(EventType::RailFailover, true);
        assert!(listening(EventType::RailFailover));
        let _ = take();
        for i in 0..QUEUE_CAPACITY + 3 {
            raise(EventType::RailFailover, [i as i64, 1, 0, 1]);
        }
        assert!(pending());
        let (raised, dropped) = take();
        assert!(!pending());
        assert_eq!(raised.len(), QUEUE_CAPACITY);
        assert_eq!(dropped[EventType::RailFailover as usize], 3);
        assert!(raised
            .windows(2)
            .all(|w| w[0].time_ns <= w[1].time_ns && w[0].elements[0] + 1 == w[1].elements[0]));
        let (again, still) = take();
        assert!(again.is_empty());
        assert_eq!(still, dropped, "drops are counted since the process began");
        listen(EventType::RailFailover, false);
        assert!(!listening(EventType::RailFailover));
        assert_eq!(algorithm_number("ring"), 5);
        assert_eq!(algorithm_number("nonesuch"), -1);
    }
}
