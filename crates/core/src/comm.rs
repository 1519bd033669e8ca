//! Communicators, requests and statuses: the safe Rust API over the engine.

use crate::bootstrap::Bootstrap;
use crate::coll::Collectives;
use crate::engine::SendMode;
use crate::engine::{Completion, Engine, Proto, ReqId};
use crate::error::Error;
use crate::matching::Envelope;
use bytemuck::Pod;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::rc::Rc;

/// Receives with this tag accept any tag.
pub const ANY_TAG: i32 = -1;
/// Receives from this source accept any sender.
pub const ANY_SOURCE: Source = Source::Any;
/// Largest tag a send may use.
pub const TAG_UB: i32 = i32::MAX;

/// Which sender a receive or probe accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Any rank of the communicator.
    Any,
    /// This rank of the communicator.
    Rank(usize),
}

impl From<usize> for Source {
    fn from(rank: usize) -> Source {
        Source::Rank(rank)
    }
}

/// What a completed receive (or a probe) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Sender's rank in the communicator.
    pub source: usize,
    /// Message tag.
    pub tag: i32,
    /// Bytes received (for a probe: bytes in the message).
    pub len: usize,
}

impl Status {
    /// Number of whole `T` elements received.
    pub fn count<T>(&self) -> usize {
        self.len / std::mem::size_of::<T>().max(1)
    }
}

/// What a thread waiting in ferry runs after a pass of its wait found nothing to do, when other
/// threads of the process may call ferry too (MPI_THREAD_MULTIPLE): the binding's hook lets
/// them in if they want (it hands its lock over for a moment) and says whether it did.
pub type Pause = fn() -> bool;

/// State shared by every communicator of one rank.
pub(crate) struct Shared {
    pub engine: RefCell<Engine>,
    /// The collectives' state, beside the engine: every pass that drives the engine takes it
    /// as its hook (see [`Shared::wait_until`]).
    pub coll: RefCell<Collectives>,
    pub bootstrap: RefCell<Option<Bootstrap>>,
    /// Pair indices this process has handed out for new communicators (see
    /// [`Shared::claim_context_block`]).
    pub context_blocks: Cell<u32>,
    pub size: usize,
    pub finalized: Cell<bool>,
    /// The settings in effect: `Config` with each automatic choice resolved.
    pub in_effect: crate::config::Config,
    /// Set while other threads share the world (see [`Pause`]).
    pub pause: Cell<Option<Pause>>,
    /// Cluster id of each world rank, from the bootstrap cards (hierarchical collectives).
    pub clusters: Rc<[u32]>,
    /// Names published by a job of one rank without a launcher (see `World::publish`).
    pub names: RefCell<std::collections::HashMap<String, String>>,
    /// Where this world sits among the job's worlds (spawning, see `crate::spawn`).
    pub universe: crate::world::Universe,
}

/// Context pairs per block a process claims: enough for an intercommunicator.
pub const CONTEXT_BLOCK: u32 = 4;

/// Spawned worlds a job may have, each with its slice of context ids.
pub const SPAWNED_REGIONS: u64 = 1024;

/// Pair indices from here on belong to communicators derived without an agreement
/// (MPI_Comm_idup in the MPI binding, shrink); claimed blocks stay below.
pub const CLAIMED_PAIRS_END: u32 = 1 << 30;

/// Pairs per derived slot ([`derived_pair`]): enough for an intercommunicator.
pub const DERIVED_SLOT: u32 = 4;

/// The first of the context pairs (`k` for an intracommunicator, `k` to `k + 2` for an
/// intercommunicator) derived the `n`-th time from the communicator with context id
/// `context`: a hash of the two into slots of [`DERIVED_SLOT`] pairs from
/// [`CLAIMED_PAIRS_END`], so every member computes the same pair without a message.
pub fn derived_pair(context: u32, n: u32) -> u32 {
    // splitmix64 of (context, n).
    let mut z = ((context as u64) << 32 | n as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let slots = CLAIMED_PAIRS_END / DERIVED_SLOT;
    CLAIMED_PAIRS_END + DERIVED_SLOT * ((z as u32) & (slots - 1))
}

impl Shared {
    pub(crate) fn new(
        engine: Engine,
        bootstrap: Option<Bootstrap>,
        size: usize,
        in_effect: crate::config::Config,
        clusters: Vec<u32>,
        universe: crate::world::Universe,
    ) -> Shared {
        Shared {
            engine: RefCell::new(engine),
            coll: RefCell::default(),
            bootstrap: RefCell::new(bootstrap),
            context_blocks: Cell::new(0),
            size,
            finalized: Cell::new(false),
            in_effect,
            pause: Cell::new(None),
            clusters: clusters.into(),
            names: RefCell::default(),
            universe,
        }
    }

    /// Drives progress until `done` holds. With the world to itself, the engine's back-off loop
    /// runs under one borrow; shared with other threads, the borrow ends after every pass and
    /// the pause hook lets them use the engine in between.
    pub(crate) fn wait_until(&self, mut done: impl FnMut(&Proto) -> bool) -> Result<(), Error> {
        let Some(pause) = self.pause.get() else {
            return (self.engine.borrow_mut()).wait_until(&mut *self.coll.borrow_mut(), done);
        };
        let mut idle = 0;
        loop {
            {
                let mut engine = self.engine.borrow_mut();
                if done(&engine.proto) {
                    return Ok(());
                }
                idle = engine.wait_pass(&mut *self.coll.borrow_mut(), idle)?;
            }
            // A pass that found nothing has backed off, sleeping at most the short nap of a
            // shared engine, so a thread that wants in waits little; the waiting threads of a
            // rank then take turns listening for the transports instead of all spinning.
            if idle > 0 {
                pause();
            }
        }
    }

    /// Drives progress until `watch` is reached (a word of a shared collective segment), as
    /// [`Shared::wait_until`] does for requests.
    pub(crate) fn wait_for(&self, watch: crate::engine::Watch<'_>) -> Result<(), Error> {
        let mut idle = 0;
        loop {
            {
                let mut engine = self.engine.borrow_mut();
                if watch.reached() {
                    return Ok(());
                }
                idle =
                    engine.wait_pass_watching(&mut *self.coll.borrow_mut(), idle, Some(watch))?;
            }
            if idle > 0 {
                if let Some(pause) = self.pause.get() {
                    pause();
                }
            }
        }
    }

    /// Ends the job if `ran` failed because members of a communicator went different ways
    /// through a blocking collective: that call can neither complete nor be taken back.
    /// `who` names this rank in the message.
    #[inline]
    pub(crate) fn end_if_ways_differ(&self, ran: &Result<(), Error>, who: impl FnOnce() -> String) {
        if let Err(e @ Error::CollectivePaths { .. }) = ran {
            self.ways_differ(&who(), e);
        }
    }

    #[cold]
    #[inline(never)]
    fn ways_differ(&self, who: &str, e: &Error) -> ! {
        self.abort(1, &format!("{who}: {e}"))
    }

    /// Ends the whole job with `code`, printing `message` through the launcher.
    pub(crate) fn abort(&self, code: i32, message: &str) -> ! {
        if let Some(boot) = self.bootstrap.borrow_mut().as_mut() {
            boot.abort(code, message);
            // The launcher kills every rank; give it a moment before exiting on our own.
            std::thread::sleep(std::time::Duration::from_secs(2));
        } else {
            eprintln!("ferry: abort (code {code}): {message}");
        }
        std::process::exit(code)
    }

    /// Says in each shared collective segment that this rank is finalizing, and drives
    /// progress until every member has recorded this rank's latest blocking call there or is
    /// finalizing too (see `Collectives::segments_caught_up`).
    pub(crate) fn wait_for_segments(&self) -> Result<(), Error> {
        self.coll.borrow().finish_segments();
        let mut idle = 0;
        loop {
            {
                let mut coll = self.coll.borrow_mut();
                if coll.segments_caught_up() {
                    return Ok(());
                }
                idle = self.engine.borrow_mut().wait_pass(&mut *coll, idle)?;
            }
            if let (true, Some(pause)) = (idle > 0, self.pause.get()) {
                pause();
            }
        }
    }

    /// One progress pass of the engine and the collectives. Returns whether anything moved.
    pub(crate) fn progress(&self) -> Result<bool, Error> {
        (self.engine.borrow_mut()).progress(&mut *self.coll.borrow_mut())
    }

    /// Waits for one request and returns its completion.
    pub(crate) fn wait(&self, id: ReqId) -> Result<Completion, Error> {
        self.wait_until(|p| p.is_done(id))?;
        (self.engine.borrow_mut()).wait(&mut *self.coll.borrow_mut(), id)
    }

    /// The first pair index of a block of [`CONTEXT_BLOCK`] context pairs that no other
    /// communicator of the job has or will get. Every process hands out its own blocks (block
    /// `n` of world rank `r` is number `n * size + r`), so a new communicator needs one member
    /// to claim a block and tell the others, and creations running at once in several threads
    /// or on overlapping groups never pick the same pairs. Pair 0 is the world's.
    ///
    /// Worlds spawned later (see `crate::spawn`) hand out blocks of their own region, so that
    /// ids stay unique across every world of the job: the launcher's world has the lower
    /// half, spawned world `w` the `w`-th of [`SPAWNED_REGIONS`] slices of the upper half.
    pub(crate) fn claim_context_block(&self) -> Result<u32, Error> {
        let n = self.context_blocks.get();
        let rank = self.engine.borrow().proto.me - self.universe.base;
        let blocks = (CLAIMED_PAIRS_END / CONTEXT_BLOCK) as u64;
        let (start, len) = match self.universe.world {
            0 => (0, blocks / 2),
            w => {
                let slice = blocks / 2 / SPAWNED_REGIONS;
                (blocks / 2 + (w as u64 - 1) * slice, slice)
            }
        };
        let within = (n as u64) * self.size as u64 + rank as u64;
        if within >= len || self.universe.world as u64 > SPAWNED_REGIONS {
            return Err(Error::OutOfContexts { created: n });
        }
        let first = 1 + (start + within) * CONTEXT_BLOCK as u64;
        if first + CONTEXT_BLOCK as u64 > CLAIMED_PAIRS_END as u64 {
            return Err(Error::OutOfContexts { created: n });
        }
        self.context_blocks.set(n + 1);
        Ok(first as u32)
    }
}

/// Which world ranks belong to a communicator, both ways.
pub(crate) struct Group {
    pub(crate) world_of: Rc<[u32]>,
    pub(crate) local_of: Vec<u32>,
    /// Rank `i` is world rank `i` for every member (MPI_COMM_WORLD and its copies): a request
    /// started here reports its source without a translation (see [`Comm::ranks_are_world`]).
    pub(crate) ranks_are_world: bool,
}

impl Group {
    /// `world_of` holds universe ranks (see `crate::spawn`); `world_size` is a size hint.
    fn new(world_of: Vec<u32>, world_size: usize) -> Group {
        let end = world_of.iter().map(|&w| w as usize + 1).max().unwrap_or(0);
        let mut local_of = vec![u32::MAX; end.max(world_size)];
        for (local, &world) in world_of.iter().enumerate() {
            local_of[world as usize] = local as u32;
        }
        let ranks_are_world = world_of.iter().enumerate().all(|(i, &w)| w as usize == i);
        Group {
            world_of: world_of.into(),
            local_of,
            ranks_are_world,
        }
    }
}

/// A communicator: a group of ranks with its own message space (context id). Cheap to clone.
///
/// Messages on one communicator never match receives on another, and between two ranks they
/// match in the order they were sent (for receives that could take either).
#[derive(Clone)]
pub struct Comm {
    pub(crate) shared: Rc<Shared>,
    pub(crate) group: Rc<Group>,
    pub(crate) context: u32,
    rank: usize,
    /// Collective calls made on this communicator (the same counts on every member).
    pub(crate) calls: Rc<CallNumbers>,
}

/// The numbers of a communicator's collective calls, which tag their messages: blocking and
/// nonblocking calls are numbered apart, so that a nonblocking call started on one rank before
/// a blocking one and on another after it (an order MPI calls erroneous, but which MPICH and
/// Open MPI tolerate, and mpi4py's tests make) still match their own kind.
///
/// Beside them, the communicator's shared collective segment, once its first blocking call
/// looked for one (see `crate::coll::segment`), which records the way each blocking call went.
#[derive(Default)]
pub(crate) struct CallNumbers {
    blocking: Cell<u32>,
    nonblocking: Cell<u32>,
    agreements: Cell<u64>,
    /// Failed members acknowledged (see `Comm::ack_failed`).
    pub(crate) acked: Cell<usize>,
    pub(crate) segment: std::cell::OnceCell<Option<Rc<crate::coll::segment::Segment>>>,
}

impl CallNumbers {
    /// Numbers of each kind before they wrap (a tag holds 15 bits of call number).
    const SPAN: u32 = 1 << 14;

    /// The next call's number: blocking calls take `1 .. SPAN`, nonblocking ones the numbers
    /// above, each wrapping within its half.
    pub(crate) fn next(&self, nonblocking: bool) -> u32 {
        let (counter, base) = if nonblocking {
            (&self.nonblocking, Self::SPAN)
        } else {
            (&self.blocking, 0)
        };
        let n = counter.get().wrapping_add(1) % Self::SPAN;
        counter.set(n);
        base + n
    }

    /// The number the next blocking call will take.
    pub(crate) fn next_blocking(&self) -> u32 {
        self.blocking.get().wrapping_add(1) % Self::SPAN
    }

    /// The number of the next agreement (fault-tolerant jobs), counted from 0.
    pub(crate) fn next_agreement(&self) -> u64 {
        let n = self.agreements.get();
        self.agreements.set(n + 1);
        n
    }
}

impl Comm {
    pub(crate) fn world(shared: Rc<Shared>) -> Comm {
        let me = shared.engine.borrow().proto.me;
        let base = shared.universe.base;
        let group = Rc::new(Group::new(
            (base..base + shared.size as u32).collect(),
            shared.size,
        ));
        Comm {
            shared,
            group,
            context: 0,
            rank: (me - base) as usize,
            calls: Rc::new(CallNumbers::default()),
        }
    }

    /// See `World::universe_comm`.
    pub(crate) fn comm_over_universe(&self, context: u32) -> Comm {
        let cap = crate::tcp::UNIVERSE_CAP;
        let me = self.shared.engine.borrow().proto.me;
        Comm {
            shared: self.shared.clone(),
            group: Rc::new(Group::new((0..cap).collect(), cap as usize)),
            context,
            rank: me as usize,
            calls: Rc::new(CallNumbers::default()),
        }
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// This rank's traffic totals (of every communicator: they share one engine). `None` while
    /// the engine is busy, i.e. when called from inside one of its callbacks.
    pub fn counters(&self) -> Option<crate::Counters> {
        self.shared.engine.try_borrow().ok().map(|e| e.counters())
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the communicator.
    pub fn size(&self) -> usize {
        self.group.world_of.len()
    }

    /// Whether every rank of this communicator is the same rank of the world (MPI_COMM_WORLD
    /// and its duplicates; decided when the communicator is made).
    #[inline]
    pub fn ranks_are_world(&self) -> bool {
        self.group.ranks_are_world
    }

    /// World rank of communicator rank `rank`.
    pub fn world_rank_of(&self, rank: usize) -> Result<usize, Error> {
        self.world_rank(rank).map(|w| w as usize)
    }

    #[inline]
    pub(crate) fn world_rank(&self, rank: usize) -> Result<u32, Error> {
        self.group
            .world_of
            .get(rank)
            .copied()
            .ok_or_else(|| self.rank_out_of_range(rank))
    }

    #[cold]
    fn rank_out_of_range(&self, rank: usize) -> Error {
        Error::RankOutOfRange {
            rank,
            size: self.size(),
        }
    }

    #[inline]
    pub(crate) fn source_pattern(&self, source: Source) -> Result<Option<u32>, Error> {
        match source {
            Source::Any => Ok(None),
            Source::Rank(r) => self.world_rank(r).map(Some),
        }
    }

    #[inline]
    pub(crate) fn tag_pattern(tag: i32) -> Result<Option<i32>, Error> {
        match tag {
            ANY_TAG => Ok(None),
            t if t < 0 => Err(Error::InvalidTag(t)),
            t => Ok(Some(t)),
        }
    }

    pub(crate) fn status(&self, c: &Completion) -> Result<Status, Error> {
        self.fault_of(c)?;
        if c.cancelled {
            return Err(Error::Cancelled);
        }
        let source = self
            .group
            .local_of
            .get(c.source as usize)
            .copied()
            .unwrap_or(u32::MAX) as usize;
        if c.message_len > c.len {
            return Err(Error::Truncated {
                sender: source,
                tag: c.tag,
                message_len: c.message_len,
                buffer_len: c.len,
            });
        }
        Ok(Status {
            source,
            tag: c.tag,
            len: c.len,
        })
    }

    fn start_send(&self, context: u32, buf: &[u8], dest: usize, tag: i32) -> Result<ReqId, Error> {
        self.post_send(
            context,
            buf.as_ptr(),
            buf.len(),
            dest,
            tag,
            SendMode::Standard,
        )
    }

    /// Checks the arguments and hands a send of `len` bytes at `buf` to the engine; the caller
    /// keeps the buffer valid until the request is done.
    pub(crate) fn post_send(
        &self,
        context: u32,
        buf: *const u8,
        len: usize,
        dest: usize,
        tag: i32,
        mode: SendMode,
    ) -> Result<ReqId, Error> {
        if tag < 0 {
            return Err(Error::InvalidTag(tag));
        }
        let dest = self.world_rank(dest)?;
        self.shared
            .engine
            .borrow_mut()
            .isend(context, dest, tag, buf, len, mode)
    }

    fn start_recv(
        &self,
        context: u32,
        buf: &mut [u8],
        source: Source,
        tag: i32,
    ) -> Result<ReqId, Error> {
        self.post_recv(context, buf.as_mut_ptr(), buf.len(), source, tag)
    }

    /// Checks the arguments and posts a receive into `len` bytes at `buf`; the caller keeps
    /// the buffer valid until the request is done.
    #[inline]
    pub(crate) fn post_recv(
        &self,
        context: u32,
        buf: *mut u8,
        len: usize,
        source: Source,
        tag: i32,
    ) -> Result<ReqId, Error> {
        let source = self.source_pattern(source)?;
        let tag = Comm::tag_pattern(tag)?;
        self.shared
            .engine
            .borrow_mut()
            .irecv(context, source, tag, buf, len)
    }

    fn finish(&self, id: ReqId) -> Result<Status, Error> {
        let c = self.shared.wait(id)?;
        self.status(&c)
    }

    /// Sends `buf` to `dest` with `tag`; returns when `buf` may be reused.
    pub fn send<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<(), Error> {
        let id = self.start_send(self.context, bytemuck::cast_slice(buf), dest, tag)?;
        self.shared.wait(id).map(drop)
    }

    /// Receives into `buf` a message from `source` with `tag` (wildcards allowed).
    /// A longer message fills `buf` and returns [`Error::Truncated`].
    pub fn recv<T: Pod>(
        &self,
        buf: &mut [T],
        source: impl Into<Source>,
        tag: i32,
    ) -> Result<Status, Error> {
        let id = self.start_recv(
            self.context,
            bytemuck::cast_slice_mut(buf),
            source.into(),
            tag,
        )?;
        self.finish(id)
    }

    /// Sends and receives at once, without deadlock between two ranks that both call it.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<S: Pod, R: Pod>(
        &self,
        send: &[S],
        dest: usize,
        send_tag: i32,
        recv: &mut [R],
        source: impl Into<Source>,
        recv_tag: i32,
    ) -> Result<Status, Error> {
        let r = self.start_recv(
            self.context,
            bytemuck::cast_slice_mut(recv),
            source.into(),
            recv_tag,
        )?;
        let s = self.start_send(self.context, bytemuck::cast_slice(send), dest, send_tag);
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                self.shared.engine.borrow_mut().cancel(r);
                let _ = self.shared.wait(r);
                return Err(e);
            }
        };
        let sent = self.shared.wait(s);
        let status = self.finish(r);
        sent?;
        status
    }

    /// Starts a send; the request must complete before the scope ends.
    pub fn isend<'s, T: Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: usize,
        tag: i32,
    ) -> Result<Request<'s>, Error> {
        let id = self.start_send(self.context, bytemuck::cast_slice(buf), dest, tag)?;
        Ok(scope.track(self, id))
    }

    /// Starts a receive; the request must complete before the scope ends.
    pub fn irecv<'s, T: Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        source: impl Into<Source>,
        tag: i32,
    ) -> Result<Request<'s>, Error> {
        let id = self.start_recv(
            self.context,
            bytemuck::cast_slice_mut(buf),
            source.into(),
            tag,
        )?;
        Ok(scope.track(self, id))
    }

    /// Returns the envelope of a matching message without receiving it, if one has arrived.
    pub fn iprobe(&self, source: impl Into<Source>, tag: i32) -> Result<Option<Status>, Error> {
        let source = self.source_pattern(source.into())?;
        let tag = Comm::tag_pattern(tag)?;
        self.probe_now(source, tag)
    }

    /// The status of the earliest message that `source` and `tag` (patterns) match, after a
    /// progress pass if none has arrived yet.
    fn probe_now(&self, source: Option<u32>, tag: Option<i32>) -> Result<Option<Status>, Error> {
        let found = (self.shared.engine.borrow_mut()).iprobe(
            &mut *self.shared.coll.borrow_mut(),
            self.context,
            source,
            tag,
        )?;
        Ok(found.map(|(env, len)| self.probe_status(env, len)))
    }

    /// Waits for a matching message and returns its envelope without receiving it.
    pub fn probe(&self, source: impl Into<Source>, tag: i32) -> Result<Status, Error> {
        let source = self.source_pattern(source.into())?;
        let tag = Comm::tag_pattern(tag)?;
        self.shared
            .wait_until(|p| p.has_match(self.context, source, tag))?;
        self.probe_now(source, tag)?.ok_or_else(|| Error::Protocol {
            rank: self.group.world_of[self.rank] as usize,
            detail: "probed message vanished".into(),
        })
    }

    fn probe_status(&self, env: Envelope, len: usize) -> Status {
        Status {
            source: self.group.local_of[env.source as usize] as usize,
            tag: env.tag,
            len,
        }
    }

    /// A new communicator with the same ranks and a separate message space. Collective.
    pub fn dup(&self) -> Result<Comm, Error> {
        let k = self.agree_context()?;
        Ok(Comm {
            shared: self.shared.clone(),
            group: self.group.clone(),
            context: 2 * k,
            rank: self.rank,
            calls: Rc::new(CallNumbers::default()),
        })
    }

    /// Splits into one communicator per `color`, ranked by `key` then by rank here; ranks
    /// passing `None` get `None`. Collective.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm>, Error> {
        let color_word = color.unwrap_or(u32::MAX);
        if color == Some(u32::MAX) {
            return Err(Error::Config(
                "split color u32::MAX is reserved for \"no color\"".into(),
            ));
        }
        let mut mine = [0u8; 12];
        mine[..4].copy_from_slice(&color_word.to_le_bytes());
        mine[4..8].copy_from_slice(&key.to_le_bytes());
        if self.rank == 0 {
            mine[8..].copy_from_slice(&self.shared.claim_context_block()?.to_le_bytes());
        }
        let all = self.allgather_bytes(&mine)?;
        let field = |r: usize, at: usize| {
            let b = &all[r * 12 + at..r * 12 + at + 4];
            [b[0], b[1], b[2], b[3]]
        };
        // Every color takes rank 0's block: the new communicators share no member.
        let k = u32::from_le_bytes(field(0, 8));
        let Some(color) = color else { return Ok(None) };
        let mut members: Vec<(i32, usize)> = (0..self.size())
            .filter(|&r| u32::from_le_bytes(field(r, 0)) == color)
            .map(|r| (i32::from_le_bytes(field(r, 4)), r))
            .collect();
        members.sort();
        let rank = members
            .iter()
            .position(|&(_, r)| r == self.rank)
            .unwrap_or(0);
        let world_of = members
            .iter()
            .map(|&(_, r)| self.group.world_of[r])
            .collect();
        Ok(Some(Comm {
            shared: self.shared.clone(),
            group: Rc::new(Group::new(world_of, self.shared.size)),
            context: 2 * k,
            rank,
            calls: Rc::new(CallNumbers::default()),
        }))
    }

    /// A communicator of the ranks `members` (in that order), made by the members alone (MPI's
    /// `Comm_create_group`): non-members get `None` and need not call. `tag` tells concurrent
    /// creations on this communicator apart.
    pub fn create_subset(&self, members: &[usize], tag: i32) -> Result<Option<Comm>, Error> {
        for &r in members {
            self.world_rank(r)?;
        }
        let Some(me) = members.iter().position(|&r| r == self.rank) else {
            return Ok(None);
        };
        // Negative tags on the collective context never meet a collective's own messages.
        let wire_tag = tag | i32::MIN;
        let context = self.context + 1;
        let world = |r: usize| self.group.world_of[r];
        // The first member claims the pairs and tells the others; a creation needs no more
        // (see `Shared::claim_context_block`).
        let mut word = [0u8; 4];
        if me == 0 {
            word = self.shared.claim_context_block()?.to_le_bytes();
            let sends = members[1..]
                .iter()
                .map(|&r| {
                    self.shared.engine.borrow_mut().isend(
                        context,
                        world(r),
                        wire_tag,
                        word.as_ptr(),
                        4,
                        SendMode::Standard,
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            for id in sends {
                self.shared.wait(id)?;
            }
        } else {
            let leader = world(members[0]);
            let id = self.shared.engine.borrow_mut().irecv(
                context,
                Some(leader),
                Some(wire_tag),
                word.as_mut_ptr(),
                4,
            )?;
            self.shared.wait(id)?;
        }
        let k = u32::from_le_bytes(word);
        let world_of = members.iter().map(|&r| world(r)).collect();
        Ok(Some(Comm {
            shared: self.shared.clone(),
            group: Rc::new(Group::new(world_of, self.shared.size)),
            context: 2 * k,
            rank: me,
            calls: Rc::new(CallNumbers::default()),
        }))
    }

    /// The first of [`CONTEXT_BLOCK`] context pairs that only this process hands out: its
    /// proposal when a binding runs a context agreement of its own (e.g. across the two groups
    /// of an intercommunicator), in which one process's proposal must win everywhere. The pair
    /// `k` is context ids `2k` (point-to-point) and `2k + 1` (collectives).
    pub fn claim_context_pairs(&self) -> Result<u32, Error> {
        self.shared.claim_context_block()
    }

    /// A communicator over the world ranks `members` (in rank order) on context id `context`,
    /// in which this process has rank `rank`; the caller has agreed `context` with every member
    /// and reserved it. For an intercommunicator, `members` is the remote group and `rank` this
    /// process's rank in the local group: ranks then name the remote group, and statuses report
    /// remote ranks.
    pub fn derive(&self, members: &[u32], rank: usize, context: u32) -> Result<Comm, Error> {
        // Processes of other worlds (spawned) are connected when first needed.
        crate::spawn::reach(&self.shared, members)?;
        let peers = self.shared.engine.borrow().proto.peer_count();
        if let Some(&w) = members.iter().find(|&&w| w as usize >= peers) {
            return Err(Error::RankOutOfRange {
                rank: w as usize,
                size: peers,
            });
        }
        Ok(Comm {
            shared: self.shared.clone(),
            group: Rc::new(Group::new(members.to_vec(), self.shared.size)),
            context,
            rank,
            calls: Rc::new(CallNumbers::default()),
        })
    }

    /// The context pairs of a new communicator over this one's ranks: rank 0 claims them and
    /// broadcasts the first index. Collective.
    fn agree_context(&self) -> Result<u32, Error> {
        let mut k = [0u32];
        if self.rank == 0 {
            k[0] = self.shared.claim_context_block()?;
        }
        self.bcast(&mut k, 0)?;
        Ok(k[0])
    }
}

/// Nonblocking requests live inside a scope, which waits for all of them before it returns,
/// so no buffer can be freed while ferry still writes or reads it (as `std::thread::scope`).
pub struct Scope<'scope, 'env: 'scope> {
    started: RefCell<Vec<(Rc<Shared>, ReqId)>>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'scope> Scope<'scope, '_> {
    pub(crate) fn track(&'scope self, comm: &Comm, id: ReqId) -> Request<'scope> {
        self.started.borrow_mut().push((comm.shared.clone(), id));
        Request {
            comm: comm.clone(),
            state: Handle::Pending(id),
            _scope: PhantomData,
        }
    }
}

impl Scope<'_, '_> {
    /// Waits for every request started in the scope; completions nobody took are dropped.
    fn wait_for_all(&self) {
        for (shared, id) in self.started.borrow_mut().drain(..) {
            let borrowed = (shared.engine.try_borrow_mut()).and_then(|engine| {
                let coll = shared.coll.try_borrow_mut()?;
                Ok((engine, coll))
            });
            if let Ok((mut engine, mut coll)) = borrowed {
                if engine.wait_until(&mut *coll, |p| p.is_done(id)).is_ok() {
                    engine.take(id);
                }
            }
        }
    }
}

/// Runs `f` with a scope for nonblocking requests; returns after every request started in it
/// has completed, even if `f` panics.
pub fn scope<'env, R>(f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R) -> R {
    let scope = Scope {
        started: RefCell::new(Vec::new()),
        _scope: PhantomData,
        _env: PhantomData,
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&scope)));
    scope.wait_for_all();
    match result {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

enum Handle {
    Pending(ReqId),
    Finished(Result<Status, Error>),
}

/// A nonblocking send or receive in progress.
pub struct Request<'scope> {
    comm: Comm,
    state: Handle,
    _scope: PhantomData<&'scope ()>,
}

impl Request<'_> {
    fn pending(&self) -> Option<ReqId> {
        match self.state {
            Handle::Pending(id) => Some(id),
            Handle::Finished(_) => None,
        }
    }

    fn settle(&mut self) -> Result<Status, Error> {
        if let Handle::Pending(id) = self.state {
            let result = match self.comm.shared.engine.borrow_mut().take(id) {
                Some(c) => self.comm.status(&c),
                None => Err(Error::Protocol {
                    rank: self.comm.rank,
                    detail: "request completed twice".into(),
                }),
            };
            self.state = Handle::Finished(result);
        }
        match &self.state {
            Handle::Finished(r) => r.clone(),
            Handle::Pending(_) => unreachable!(),
        }
    }

    /// Waits for completion.
    pub fn wait(mut self) -> Result<Status, Error> {
        if let Some(id) = self.pending() {
            self.comm.shared.wait_until(|p| p.is_done(id))?;
        }
        self.settle()
    }

    /// Makes progress once; returns the status if the request has completed.
    pub fn test(&mut self) -> Result<Option<Status>, Error> {
        if let Some(id) = self.pending() {
            let mut engine = self.comm.shared.engine.borrow_mut();
            if !engine.proto.is_done(id) {
                engine.progress(&mut *self.comm.shared.coll.borrow_mut())?;
                if !engine.proto.is_done(id) {
                    return Ok(None);
                }
            }
        }
        self.settle().map(Some)
    }

    /// Withdraws a receive that has not matched yet (it then completes as cancelled); has no
    /// effect on sends or matched receives.
    pub fn cancel(&mut self) {
        if let Some(id) = self.pending() {
            self.comm.shared.engine.borrow_mut().cancel(id);
        }
    }
}

fn engine_of<'a>(requests: &'a [Request<'_>]) -> Option<&'a Comm> {
    requests.first().map(|r| &r.comm)
}

/// Waits for every request; returns their statuses in order, or the first error.
pub fn wait_all(requests: &mut [Request<'_>]) -> Result<Vec<Status>, Error> {
    if let Some(comm) = engine_of(requests) {
        let ids: Vec<ReqId> = requests.iter().filter_map(Request::pending).collect();
        comm.shared
            .wait_until(|p| ids.iter().all(|&id| p.is_done(id)))?;
    }
    requests.iter_mut().map(Request::settle).collect()
}

/// Waits until one of the pending requests completes; returns its index and status, or `None`
/// when no request is pending.
pub fn wait_any(requests: &mut [Request<'_>]) -> Result<Option<(usize, Status)>, Error> {
    let pending: Vec<(usize, ReqId)> = requests
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.pending().map(|id| (i, id)))
        .collect();
    let Some(comm) = engine_of(requests) else {
        return Ok(None);
    };
    if pending.is_empty() {
        return Ok(None);
    }
    let mut hit = 0;
    comm.shared.wait_until(|p| {
        pending
            .iter()
            .find(|(_, id)| p.is_done(*id))
            .map(|&(i, _)| hit = i)
            .is_some()
    })?;
    requests[hit].settle().map(|s| Some((hit, s)))
}

/// Makes progress once; returns all statuses if every request has completed.
pub fn test_all(requests: &mut [Request<'_>]) -> Result<Option<Vec<Status>>, Error> {
    if let Some(comm) = engine_of(requests) {
        let mut engine = comm.shared.engine.borrow_mut();
        engine.progress(&mut *comm.shared.coll.borrow_mut())?;
        if !requests
            .iter()
            .filter_map(Request::pending)
            .all(|id| engine.proto.is_done(id))
        {
            return Ok(None);
        }
    }
    requests
        .iter_mut()
        .map(Request::settle)
        .collect::<Result<_, _>>()
        .map(Some)
}
