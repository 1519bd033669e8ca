//! Partitioned point-to-point communication (MPI 4.1 §4.2): `MPI_Psend_init`, `MPI_Precv_init`,
//! `MPI_Pready` (and its range and list forms) and `MPI_Parrived`.
//!
//! A partitioned request is a persistent request whose message is cut into partitions that the
//! sender marks ready one by one. Each round's bytes travel as they become ready, so that a
//! receiver sees the first partitions (`MPI_Parrived`) while the sender still computes the
//! later ones.
//!
//! Blocks. The two sides may cut the same bytes into different partition counts, and neither
//! knows the other's, so both cut the round's bytes the same way into blocks ([`Grid`]): at
//! most [`MAX_BLOCKS`], each a power of two of at least [`MIN_BLOCK`] bytes, derived from the
//! receiver's total. `MPI_Precv_init` sends the sender that grid (the sender's total may be
//! smaller); until it has come, readied partitions wait (for the next `MPI_Pready` or the
//! wait). At `MPI_Start` the receiver posts one receive per block, into the block's place in
//! its buffer and long enough to reach the end of it. Each `MPI_Pready` call sends the blocks
//! it completed (every byte ready), each run of consecutive ones as one message tagged with its
//! first block: the receive of that block takes the whole run in place (eager or rendezvous,
//! as any point-to-point message), and the receives of the other blocks of the run are
//! withdrawn once it is in. Partitions readied together (by `MPI_Pready_range`,
//! `MPI_Pready_list`, or partitions that fill one block) therefore cost one message. Once the
//! last partition is ready a closing message carries the round's byte count: the request's
//! wait waits for it, then for the blocks still on their way (all sent by then).
//!
//! Matching. MPI pairs the n-th `MPI_Psend_init` to a destination and tag on a communicator
//! with the n-th `MPI_Precv_init` from that source and tag, whatever order the rounds later
//! become ready in. Both sides therefore count their initialisations per (communicator, tag,
//! peer), and a round's messages carry that count, the round's number and the block in their
//! tag ([`wire_tag`]), on a channel of their own: a context derived, without any message, from
//! the communicator's context and the user's tag (as `MPI_Comm_idup` derives its contexts).
//! Ordinary point-to-point traffic and other tags never share it, and a sender that runs rounds
//! ahead (eager rounds need no receiver) never meets a receive of an earlier round.

use crate::abi::*;
use crate::datatype::Datatype;
use crate::error::{fail, MpiError, Res};
use crate::p2p::count_arg;
use crate::request::{Outcome, Persistent, Progress, Request, Typed};
use crate::state::{running, State};
use ferry_core::raw::{Fault, RawRequest, RawStatus, SendMode};
use ferry_core::Source;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::ops::Range;
use std::rc::Rc;

/// Most blocks a round is cut into (receives posted per round). Fewer blocks are fewer
/// messages when many small partitions are readied one by one (each message costs the sender
/// a few microseconds over TCP, in its computing's way); more let a partition arrive sooner.
const MAX_BLOCKS: usize = 16;
/// Fewest bytes in a block (but the last): smaller rounds are one block.
const MIN_BLOCK: usize = 256;

/// Bits of a wire tag: block (or [`END_BLOCK`]), round number, initialisation count.
const BLOCK_BITS: u32 = 7;
const ROUND_BITS: u32 = 10;
const INDEX_BITS: u32 = 31 - BLOCK_BITS - ROUND_BITS;
/// The block field of a round's closing message.
const END_BLOCK: u32 = (1 << BLOCK_BITS) - 1;
/// The block field of the receiver's grid, sent once to the sender (round field 0).
const GRID_BLOCK: u32 = END_BLOCK - 1;
const _: () = assert!(MAX_BLOCKS < GRID_BLOCK as usize);

/// The tag of block `block` (or [`END_BLOCK`]) of round `round` of the `index`-th request of
/// its channel and peer. Counts wrap: a sender would have to run 1024 rounds ahead of its
/// receiver to meet a receive of an old round.
fn wire_tag(index: u32, round: u32, block: u32) -> i32 {
    let index = index & ((1 << INDEX_BITS) - 1);
    let round = round & ((1 << ROUND_BITS) - 1);
    ((index << (ROUND_BITS + BLOCK_BITS)) | (round << BLOCK_BITS) | block) as i32
}

/// The runs of consecutive numbers in `sorted` (ascending, no repeats).
fn consecutive_runs(sorted: &[usize]) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    for &n in sorted {
        match runs.last_mut() {
            Some(run) if run.end == n => run.end = n + 1,
            _ => runs.push(n..n + 1),
        }
    }
    runs
}

/// How a round's bytes are cut into blocks: both sides derive it from the total alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Grid {
    total: usize,
    block: usize,
}

impl Grid {
    fn of(total: usize) -> Grid {
        let block = total
            .div_ceil(MAX_BLOCKS)
            .max(MIN_BLOCK)
            .next_power_of_two();
        Grid { total, block }
    }

    fn blocks(&self) -> usize {
        self.total.div_ceil(self.block)
    }

    fn start(&self, block: usize) -> usize {
        block * self.block
    }

    fn end(&self, block: usize) -> usize {
        ((block + 1) * self.block).min(self.total)
    }

    /// The blocks holding bytes of `from..to`.
    fn blocks_of(&self, from: usize, to: usize) -> Range<usize> {
        if from >= to {
            return 0..0;
        }
        from / self.block..to.div_ceil(self.block)
    }
}

/// A receive block in the current round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// Its receive is posted.
    Posted(RawRequest),
    /// Its bytes are in (by its own receive or by a run that began at an earlier block).
    In,
}

/// The state of the current round.
struct Round {
    /// Counts the request's rounds (part of every tag).
    number: u32,
    /// The blocks: the receiver's own; the sender's once the receiver's word came.
    grid: Option<Grid>,
    /// Sender: the receive of the receiver's grid until it came; receiver: its send.
    grid_message: Option<RawRequest>,
    /// The receiver's block size and total bytes, little-endian.
    grid_bytes: Box<[u8; 16]>,
    /// Sender: which partitions are ready, and how many.
    ready: Vec<bool>,
    readied: usize,
    /// Sender: ready bytes per block.
    block_ready: Vec<usize>,
    /// Sender: block messages in flight.
    sending: Vec<RawRequest>,
    /// Receiver: each block.
    blocks: Vec<Block>,
    /// Receiver with a staged image: partitions unpacked into the user's buffer.
    unpacked: Vec<bool>,
    /// The closing message: the round's byte count, little-endian.
    end: Box<[u8; 8]>,
    /// Receiver: the receive of the running round's closing message.
    closing: Option<RawRequest>,
    /// The packed image of the message when the datatype is not contiguous in the buffer
    /// (allocated once: messages point into it).
    staging: Vec<u8>,
}

impl Round {
    /// The state before the first round; `staged` when the datatype is not contiguous.
    fn new(send: bool, partitions: usize, grid: Grid, staged: bool) -> Round {
        Round {
            number: 0,
            grid: (!send).then_some(grid),
            grid_message: None,
            grid_bytes: Box::new([0; 16]),
            ready: vec![false; if send { partitions } else { 0 }],
            readied: 0,
            block_ready: Vec::new(),
            sending: Vec::new(),
            blocks: Vec::with_capacity(if send { 0 } else { grid.blocks() }),
            unpacked: vec![false; if staged && !send { partitions } else { 0 }],
            end: Box::new([0; 8]),
            closing: None,
            staging: if staged {
                vec![0; grid.total]
            } else {
                Vec::new()
            },
        }
    }
}

/// One partitioned request's fixed arguments and its current round.
pub(crate) struct Partitioned {
    /// Sender (`MPI_Psend_init`) or receiver.
    pub(crate) send: bool,
    /// The user's buffer: all partitions, one after the other.
    buf: *mut u8,
    /// Number of partitions.
    pub(crate) partitions: usize,
    /// Elements per partition.
    count: usize,
    /// The element type (a handle the request owns, see `p2p::keep_type`).
    pub(crate) datatype: Handle,
    dt: Datatype,
    /// Where the packed bytes of the message lie in the user's buffer, when they do.
    direct: Option<*mut u8>,
    /// The peer's rank in the communicator.
    peer: usize,
    /// The tag the user gave.
    user_tag: c_int,
    /// The channel the rounds travel on, and this request's initialisation count there.
    channel: ferry_core::Comm,
    index: u32,
    /// Bytes of a round.
    total: usize,
    /// Bytes per partition.
    part_bytes: usize,
    round: RefCell<Round>,
}

/// Per (communicator context, user tag): the derived channel and the initialisations counted
/// so far per peer, sends and receives apart.
pub(crate) struct Channel {
    comm: ferry_core::Comm,
    members: Vec<u32>,
    sends: FxHashMap<usize, u32>,
    recvs: FxHashMap<usize, u32>,
}

/// The channels of this process by (communicator context id, tag); kept in the MPI state.
pub(crate) type Channels = FxHashMap<(u32, i32), Channel>;

/// Derived-context numbers of partitioned channels: above every `MPI_Comm_idup` count.
const CHANNEL_BASE: u32 = 1 << 31;

/// The channel for `tag` on `core` and the next initialisation count towards `peer`.
fn next_index(
    s: &mut State,
    core: &ferry_core::Comm,
    tag: i32,
    peer: usize,
    send: bool,
) -> Res<(ferry_core::Comm, u32)> {
    let key = (core.context_id(), tag);
    let members = core.world_ranks();
    {
        let channels = &mut s.part_channels;
        let stale = channels.get(&key).is_some_and(|c| c.members != members);
        if stale || !channels.contains_key(&key) {
            let k = crate::comm::derived_pair(core.context_id(), CHANNEL_BASE | tag as u32);
            if !stale && !s.derived_pairs.insert(k) {
                return fail(
                    MPI_ERR_INTERN,
                    "partitioned communication: the derived context id is in use here (hash collision)",
                );
            }
            let comm = core.derive(members, core.rank(), 2 * k)?;
            channels.insert(
                key,
                Channel {
                    comm,
                    members: members.to_vec(),
                    sends: FxHashMap::default(),
                    recvs: FxHashMap::default(),
                },
            );
        }
        let Some(channel) = channels.get_mut(&key) else {
            return fail(MPI_ERR_INTERN, "partitioned channel vanished");
        };
        let counts = if send {
            &mut channel.sends
        } else {
            &mut channel.recvs
        };
        let n = counts.entry(peer).or_insert(0);
        let index = *n;
        *n = n.wrapping_add(1);
        Ok((channel.comm.clone(), index))
    }
}

/// Forgets the channels of a freed communicator (its context id may be reused).
pub(crate) fn forget(s: &mut State, context: u32) {
    let derived = &mut s.derived_pairs;
    s.part_channels.retain(|&(c, tag), _| {
        if c != context {
            return true;
        }
        derived.remove(&crate::comm::derived_pair(c, CHANNEL_BASE | tag as u32));
        false
    });
}

/// `MPI_Psend_init` / `MPI_Precv_init`.
pub(crate) unsafe fn init(
    send: bool,
    buf: *mut c_void,
    partitions: c_int,
    count: i64,
    datatype: Handle,
    peer: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `buf` and `request`, as
    // the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let Some(out) = request.as_mut() else {
            return fail(MPI_ERR_REQUEST, "request argument is NULL");
        };
        let partitions = count_arg(partitions)?;
        if partitions == 0 {
            return fail(
                MPI_ERR_ARG,
                "a partitioned request needs at least one partition",
            );
        }
        let count = usize::try_from(count)
            .map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("negative count {count}")))?;
        if tag < 0 {
            return fail(
                MPI_ERR_TAG,
                format!("invalid tag {tag} (partitioned communication takes no wildcard)"),
            );
        }
        running(|s| {
            let core = s.intra_comm(comm).map_err(|e| {
                MpiError::new(
                    e.class,
                    "partitioned communication on an intercommunicator is not supported",
                )
            })?;
            let peer = match usize::try_from(peer) {
            Ok(p) if p < core.size() => p,
            _ => {
                return fail(
                    MPI_ERR_RANK,
                    format!("rank {peer} is not in a communicator of {} ranks (partitioned communication takes no MPI_ANY_SOURCE or MPI_PROC_NULL)", core.size()),
                )
            }
        };
            let datatype = crate::p2p::keep_type(s, datatype)?;
            let dt = s.datatype(datatype)?;
            let Some(total) = partitions
                .checked_mul(count)
                .and_then(|n| n.checked_mul(dt.size()))
            else {
                return fail(MPI_ERR_COUNT, "partitions × count × type size overflows");
            };
            let (channel, index) = next_index(s, &core, tag, peer, send)?;
            let direct = Typed {
                dt: dt.clone(),
                count: partitions * count,
                base: buf as *mut u8,
            }
            .direct();
            let grid = Grid::of(total);
            let part = Partitioned {
                send,
                buf: buf as *mut u8,
                partitions,
                count,
                datatype,
                part_bytes: count * dt.size(),
                dt,
                direct,
                peer,
                user_tag: tag,
                channel,
                index,
                total,
                round: RefCell::new(Round::new(send, partitions, grid, direct.is_none())),
            };
            part.exchange_grid()?;
            *out = s.requests.insert(Request {
                comm,
                core,
                progress: Progress::Inactive,
                persistent: Some(Box::new(Persistent::Partitioned(Rc::new(part)))),
                cancel_requested: false,
                partner: None,
                generalized: None,
            });
            Ok(())
        })
    }
}

impl Partitioned {
    /// Where the packed bytes of the message are: the user's buffer, or the staged image.
    fn image(&self, round: &mut Round) -> *mut u8 {
        self.direct.unwrap_or(round.staging.as_mut_ptr())
    }

    /// The user's address of partition `p` (its first element).
    fn partition_base(&self, p: usize) -> *mut u8 {
        let elements = (p * self.count) as isize;
        self.buf
            .wrapping_offset(elements.wrapping_mul(self.dt.extent()))
    }

    /// The error a request that ended by a failure reports; `Ok` for any other.
    fn fault(&self, st: &RawStatus) -> Res {
        match st.fault {
            Fault::None => Ok(()),
            Fault::ProcFailed => fail(
                MPIX_ERR_PROC_FAILED,
                format!("rank {} of the communicator failed", self.peer),
            ),
            Fault::Revoked => fail(MPIX_ERR_REVOKED, "the communicator has been revoked"),
        }
    }

    /// The receiver's grid (its own, set at initialisation).
    fn recv_grid(&self, round: &Round) -> Grid {
        round.grid.unwrap_or_else(|| Grid::of(self.total))
    }

    /// At initialisation the receiver tells the sender its blocks (the sender's total may be
    /// smaller than its own), and the sender posts the receive for that word.
    fn exchange_grid(&self) -> Res {
        let mut round = self.round.borrow_mut();
        let round = &mut *round;
        let tag = wire_tag(self.index, 0, GRID_BLOCK);
        let raw = if self.send {
            let bytes = round.grid_bytes.as_mut_ptr();
            // SAFETY: `grid_bytes` is boxed in the round, which lives as long as the request.
            unsafe { (self.channel).raw_recv(bytes, 16, Source::Rank(self.peer), tag) }?
        } else {
            let grid = self.recv_grid(round);
            round.grid_bytes[..8].copy_from_slice(&(grid.block as u64).to_le_bytes());
            round.grid_bytes[8..].copy_from_slice(&(grid.total as u64).to_le_bytes());
            let bytes = round.grid_bytes.as_ptr();
            round.sending.push(
                // SAFETY: as above.
                unsafe { (self.channel).raw_send(bytes, 16, self.peer, tag, SendMode::Standard) }?,
            );
            return Ok(());
        };
        round.grid_message = Some(raw);
        Ok(())
    }

    /// Sender: whether the receiver's grid is known, taking its word if it came.
    fn learn_grid(&self, round: &mut Round) -> Res<bool> {
        if round.grid.is_some() {
            return Ok(true);
        }
        let Some(raw) = round.grid_message else {
            return fail(
                MPI_ERR_INTERN,
                "partitioned send without the receiver's grid",
            );
        };
        if !self.channel.raw_done(raw) {
            return Ok(false);
        }
        round.grid_message = None;
        let st = (self.channel)
            .raw_take(raw)
            .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "grid receive vanished"))?;
        self.fault(&st)?;
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&round.grid_bytes[at..at + 8]);
            usize::try_from(u64::from_le_bytes(b)).ok()
        };
        let grid = match (word(0), word(8)) {
            (Some(block), Some(total)) if st.len == 16 && block.is_power_of_two() => Grid {
                // Bytes past the receiver's end are not sent: its wait reports the truncation.
                total: self.total.min(total),
                block,
            },
            _ => {
                return fail(
                    MPI_ERR_INTERN,
                    "partitioned send: malformed grid from the receiver",
                )
            }
        };
        if grid.blocks() > MAX_BLOCKS {
            return fail(
                MPI_ERR_INTERN,
                "partitioned send: the receiver's grid has too many blocks",
            );
        }
        round.grid = Some(grid);
        round.block_ready = vec![0; grid.blocks()];
        Ok(true)
    }

    /// MPI_Start: a receive posts its blocks' receives and the closing one; a send waits for
    /// its partitions.
    /// (`_state`: the caller's, which a start of this kind does not need.)
    pub(crate) fn start(&self, _state: &mut State) -> Res<Progress> {
        let mut round = self.round.borrow_mut();
        let round = &mut *round;
        round.number = round.number.wrapping_add(1);
        if self.send {
            round.ready.fill(false);
            round.readied = 0;
            round.block_ready.fill(0);
            round.sending.clear();
            return Ok(Progress::AwaitingReady);
        }
        round.blocks.clear();
        round.unpacked.fill(false);
        self.reap(round)?;
        let grid = self.recv_grid(round);
        let image = self.image(round);
        let source = Source::Rank(self.peer);
        for block in 0..grid.blocks() {
            let at = grid.start(block);
            let tag = wire_tag(self.index, round.number, block as u32);
            // SAFETY: `image` holds the round's `total` bytes (the user's buffer, which MPI's
            // contract keeps valid until the round completes, or the staging image, which
            // lives as long as the request and is never reallocated); `at < total`.
            let raw = unsafe {
                self.channel
                    .raw_recv(image.add(at), grid.total - at, source, tag)
            }?;
            round.blocks.push(Block::Posted(raw));
        }
        let tag = wire_tag(self.index, round.number, END_BLOCK);
        // SAFETY: `end` is boxed in the round, which lives as long as the request; the next
        // round reuses it only after this one completed.
        let raw = unsafe {
            self.channel
                .raw_recv(round.end.as_mut_ptr(), 8, source, tag)
        }?;
        round.closing = Some(raw);
        Ok(Progress::Running { raw, finish: None })
    }

    /// Marks `partition` ready, adding it to `newly`.
    fn mark_ready(&self, round: &mut Round, partition: c_int, newly: &mut Vec<usize>) -> Res {
        let i = usize::try_from(partition)
            .ok()
            .filter(|&i| i < self.partitions)
            .ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_ARG,
                    format!("partition {partition} is not in 0..{}", self.partitions),
                )
            })?;
        if round.ready[i] {
            return fail(
                MPI_ERR_ARG,
                format!("partition {i} is already marked ready in this round"),
            );
        }
        round.ready[i] = true;
        round.readied += 1;
        newly.push(i);
        Ok(())
    }

    /// Sends the blocks that the partitions `newly` made ready complete, each run of
    /// consecutive ones as one message; when every partition is ready, the closing message too,
    /// whose request it returns.
    /// Until the receiver's grid is known nothing goes; the round's wait then waits for it.
    fn send_ready(&self, round: &mut Round, newly: &[usize]) -> Res<Option<RawRequest>> {
        let pb = self.part_bytes;
        if self.direct.is_none() {
            for &p in newly {
                // SAFETY: MPI's contract: partition `p` of the user's buffer holds `count`
                // elements of the type; its packed bytes go to their place in the image.
                unsafe {
                    self.dt.pack(
                        self.partition_base(p),
                        self.count,
                        &mut round.staging[p * pb..(p + 1) * pb],
                    )
                };
            }
        }
        let known = round.grid.is_some();
        if !self.learn_grid(round)? {
            // Rarely more than the first round's first calls: the word left at MPI_Precv_init.
            self.channel.progress()?;
            if !self.learn_grid(round)? {
                let all = round.readied == self.partitions;
                return Ok(if all { round.grid_message } else { None });
            }
        }
        let Some(grid) = round.grid else {
            return fail(MPI_ERR_INTERN, "partitioned send without a grid");
        };
        // Partitions readied before the grid came count now.
        let earlier: Vec<usize>;
        let newly = if known {
            newly
        } else {
            earlier = (0..self.partitions).filter(|&p| round.ready[p]).collect();
            &earlier
        };
        let mut full = Vec::new();
        for &p in newly {
            let (from, to) = ((p * pb).min(grid.total), ((p + 1) * pb).min(grid.total));
            for block in grid.blocks_of(from, to) {
                let overlap = to.min(grid.end(block)) - from.max(grid.start(block));
                round.block_ready[block] += overlap;
                if round.block_ready[block] == grid.end(block) - grid.start(block) {
                    full.push(block);
                }
            }
        }
        full.sort_unstable();
        self.reap(round)?;
        let image = self.image(round);
        for run in consecutive_runs(&full) {
            let (from, to) = (grid.start(run.start), grid.end(run.end - 1));
            let tag = wire_tag(self.index, round.number, run.start as u32);
            let mode = SendMode::Standard;
            // SAFETY: `from..to` lies in the image of `total` bytes (see `start`), which
            // MPI's contract (or the request) keeps valid until the round completes, and the
            // user may not touch a ready partition again before then.
            let raw = unsafe {
                (self.channel).raw_send(image.add(from), to - from, self.peer, tag, mode)
            }?;
            round.sending.push(raw);
        }
        if round.readied < self.partitions {
            // One pass moves the blocks sent before (a rendezvous whose clear-to-send came
            // while the program computed): a sender that computes between its MPI_Pready
            // calls makes no other progress. Sends that are done need none.
            self.reap(round)?;
            if !round.sending.is_empty() {
                self.channel.progress()?;
            }
            return Ok(None);
        }
        *round.end = (self.total as u64).to_le_bytes();
        let tag = wire_tag(self.index, round.number, END_BLOCK);
        // SAFETY: as in `start`: `end` outlives the send.
        let raw = unsafe {
            (self.channel).raw_send(round.end.as_ptr(), 8, self.peer, tag, SendMode::Standard)
        }?;
        Ok(Some(raw))
    }

    /// Takes the block sends that finished.
    fn reap(&self, round: &mut Round) -> Res {
        let mut failed = Ok(());
        round.sending.retain(|&raw| {
            if !self.channel.raw_done(raw) {
                return true;
            }
            if let Some(st) = self.channel.raw_take(raw) {
                if failed.is_ok() {
                    failed = self.fault(&st);
                }
            }
            false
        });
        failed
    }

    /// Takes the block receives that finished; the receives of the blocks a run covered are
    /// withdrawn.
    fn poll(&self, round: &mut Round) -> Res {
        let grid = self.recv_grid(round);
        let mut block = 0;
        while block < round.blocks.len() {
            let Block::Posted(raw) = round.blocks[block] else {
                block += 1;
                continue;
            };
            if !self.channel.raw_done(raw) {
                block += 1;
                continue;
            }
            let st = self
                .channel
                .raw_take(raw)
                .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "block receive vanished"))?;
            round.blocks[block] = Block::In;
            self.fault(&st)?;
            if st.message_len > st.len {
                return fail(
                    MPI_ERR_TRUNCATE,
                    format!(
                        "partitioned receive of {} bytes: rank {} sent past its end (the sizes of MPI_Psend_init and MPI_Precv_init differ)",
                        grid.total, self.peer
                    ),
                );
            }
            let at = grid.start(block);
            let covered = grid.blocks_of(at, at + st.len).end.max(block + 1);
            for other in block + 1..covered.min(round.blocks.len()) {
                if let Block::Posted(raw) = round.blocks[other] {
                    self.channel.raw_cancel(raw);
                    let withdrawn = self.channel.raw_take(raw).is_some_and(|st| st.cancelled);
                    if !withdrawn {
                        return fail(
                            MPI_ERR_INTERN,
                            format!("partitioned receive: block {other} got a message of its own inside a run"),
                        );
                    }
                }
                round.blocks[other] = Block::In;
            }
            block = covered;
        }
        Ok(())
    }

    /// Withdraws the block receives still posted (a round that ended early).
    fn withdraw(&self, round: &mut Round) {
        for block in round.blocks.iter_mut() {
            if let Block::Posted(raw) = *block {
                self.channel.raw_cancel(raw);
                self.channel.raw_take(raw);
                *block = Block::In;
            }
        }
    }

    /// Whether every byte of receive partition `p` is in; unpacks it when staged.
    fn arrived_now(&self, round: &mut Round, p: usize) -> Res<bool> {
        self.poll(round)?;
        let (from, to) = (p * self.part_bytes, (p + 1) * self.part_bytes);
        let grid = self.recv_grid(round);
        let mut blocks = grid.blocks_of(from, to);
        let arrived = match blocks.is_empty() {
            // A partition of no bytes has arrived once the sender's round has (its close).
            true => (round.closing).is_some_and(|raw| self.channel.raw_done(raw)),
            false => blocks.all(|b| round.blocks[b] == Block::In),
        };
        if arrived {
            self.unpack(round, p, self.total);
        }
        Ok(arrived)
    }

    /// Unpacks receive partition `p` (its bytes before `upto`) from the staged image, once.
    fn unpack(&self, round: &mut Round, p: usize, upto: usize) {
        let pb = self.part_bytes;
        if self.direct.is_some() || round.unpacked[p] || p * pb >= upto {
            return;
        }
        // SAFETY: MPI's contract: partition `p` of the user's buffer has room for `count`
        // elements of the type.
        unsafe {
            (self.dt).unpack(
                &round.staging[p * pb..((p + 1) * pb).min(upto)],
                self.count,
                self.partition_base(p),
            )
        };
        round.unpacked[p] = true;
    }

    /// `MPI_Parrived` of partition `p` of the running round.
    pub(crate) fn arrived(&self, p: usize) -> Res<bool> {
        if self.arrived_now(&mut self.round.borrow_mut(), p)? {
            return Ok(true);
        }
        self.channel.progress()?;
        self.arrived_now(&mut self.round.borrow_mut(), p)
    }

    /// What the wait of a round reports, from its closing message's status.
    fn outcome(&self, st: &RawStatus, bytes: usize) -> Outcome {
        Outcome {
            tag: self.user_tag,
            bytes: bytes as i64,
            ..Outcome::of(st)
        }
    }

    /// Completes the round whose request `raw` finished (its closing message, or for a sender
    /// that readied everything before the receiver's grid came, that grid's receive): what
    /// its wait reports. The round's other messages were all sent before the closing one;
    /// this waits for those still on their way.
    pub(crate) fn finish_round(&self, raw: RawRequest) -> Res<Outcome> {
        let mut round = self.round.borrow_mut();
        let round = &mut *round;
        if self.send {
            return self.finish_send(round, raw);
        }
        let st = (self.channel)
            .raw_take(raw)
            .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "request completed while running"))?;
        if st.fault != Fault::None || st.cancelled {
            self.withdraw(round);
            return Ok(self.outcome(&st, 0));
        }
        let sent = usize::try_from(u64::from_le_bytes(*round.end)).unwrap_or(usize::MAX);
        if st.len != 8 || sent > self.total {
            self.withdraw(round);
            return fail(
                MPI_ERR_TRUNCATE,
                format!(
                    "partitioned receive of {} bytes: the matching MPI_Psend_init of rank {} sends {sent}",
                    self.total, self.peer
                ),
            );
        }
        // A shorter send fills the blocks up to its end only.
        let grid = self.recv_grid(round);
        for block in grid.blocks_of(0, sent).end..round.blocks.len() {
            if let Block::Posted(raw) = round.blocks[block] {
                self.channel.raw_cancel(raw);
                self.channel.raw_take(raw);
                round.blocks[block] = Block::In;
            }
        }
        loop {
            self.poll(round)?;
            let posted: Vec<RawRequest> = (round.blocks.iter())
                .filter_map(|b| match *b {
                    Block::Posted(raw) => Some(raw),
                    Block::In => None,
                })
                .collect();
            if posted.is_empty() {
                break;
            }
            (self.channel).wait_until(|done| posted.iter().any(|&raw| done(raw)))?;
        }
        for p in 0..self.partitions {
            self.unpack(round, p, sent);
        }
        Ok(self.outcome(&st, sent))
    }

    /// [`Partitioned::finish_round`] of a send.
    fn finish_send(&self, round: &mut Round, raw: RawRequest) -> Res<Outcome> {
        let end = if round.grid.is_none() {
            // `raw` is the grid's receive, done: every ready partition goes now.
            self.send_ready(round, &[])?.ok_or_else(|| {
                MpiError::new(MPI_ERR_INTERN, "partitioned send: no closing message")
            })?
        } else {
            raw
        };
        let sending = round.sending.clone();
        (self.channel).wait_until(|done| done(end) && sending.iter().all(|&raw| done(raw)))?;
        let st = (self.channel)
            .raw_take(end)
            .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "closing message vanished"))?;
        self.reap(round)?;
        Ok(self.outcome(&st, self.total))
    }
}

impl Drop for Partitioned {
    /// A freed request's receives that have not matched are withdrawn: they point into it.
    fn drop(&mut self) {
        let mut round = self.round.borrow_mut();
        if let Some(raw) = round.grid_message.take() {
            self.channel.raw_cancel(raw);
            self.channel.raw_take(raw);
        }
        self.withdraw(&mut round);
    }
}

/// The started partitioned request behind `request`.
pub(crate) fn partitioned(
    s: &State,
    request: Handle,
    send: bool,
    call: &str,
) -> Res<Rc<Partitioned>> {
    let req = s.requests.get(request).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_REQUEST,
            format!("{call}: invalid request {request:#x}"),
        )
    })?;
    let Some(Persistent::Partitioned(p)) = req.persistent.as_deref() else {
        return fail(
            MPI_ERR_REQUEST,
            format!("{call}: not a partitioned request"),
        );
    };
    if p.send != send {
        let want = if send {
            "MPI_Psend_init"
        } else {
            "MPI_Precv_init"
        };
        return fail(
            MPI_ERR_REQUEST,
            format!("{call}: the request is not from {want}"),
        );
    }
    if req.is_inactive() {
        return fail(
            MPI_ERR_REQUEST,
            format!("{call}: the request has not been started"),
        );
    }
    Ok(Rc::clone(p))
}

/// Marks each of `partitions` ready on the send request `request` and sends what they
/// complete. At the first bad partition the marking stops; those marked before it still go.
pub(crate) fn ready(request: Handle, partitions: impl Iterator<Item = c_int>, call: &str) -> Res {
    running(|s| {
        let p = partitioned(s, request, true, call)?;
        if !matches!(
            s.requests.get(request).map(|r| &r.progress),
            Some(Progress::AwaitingReady)
        ) {
            return fail(
                MPI_ERR_ARG,
                format!("{call}: every partition of this round is already ready"),
            );
        }
        let mut round = p.round.borrow_mut();
        let mut newly = Vec::new();
        let mut marked = Ok(());
        for partition in partitions {
            marked = p.mark_ready(&mut round, partition, &mut newly);
            if marked.is_err() {
                break;
            }
        }
        let end = p.send_ready(&mut round, &newly)?;
        if let (Some(raw), Some(req)) = (end, s.requests.get_mut(request)) {
            req.progress = Progress::Running { raw, finish: None };
        }
        marked
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_has_at_most_max_blocks_of_a_power_of_two_covering_the_total() {
        for total in [
            0,
            1,
            96,
            255,
            256,
            257,
            8000,
            16384,
            9600,
            1 << 20,
            (1 << 30) + 3,
        ] {
            let g = Grid::of(total);
            assert!(
                g.block.is_power_of_two() && g.block >= MIN_BLOCK,
                "{total}: {g:?}"
            );
            assert!(g.blocks() <= MAX_BLOCKS, "{total}: {g:?}");
            assert_eq!(g.blocks() > 0, total > 0);
            if total > 0 {
                assert_eq!(g.end(g.blocks() - 1), total);
                assert!(g.start(g.blocks() - 1) < total);
            }
        }
        // 1000 partitions of 8 bytes: 16 blocks of 512 bytes, 64 partitions each.
        let g = Grid::of(8000);
        assert_eq!((g.block, g.blocks()), (512, 16));
        assert_eq!(g.blocks_of(0, 8), 0..1);
        assert_eq!(g.blocks_of(504, 520), 0..2);
        assert_eq!(g.blocks_of(7992, 8000), 15..16);
        assert_eq!(g.blocks_of(8, 8), 0..0);
        // Small rounds are one block.
        assert_eq!(Grid::of(96).blocks(), 1);
    }

    #[test]
    fn blocks_ready_together_go_as_one_run_each() {
        assert_eq!(consecutive_runs(&[]), Vec::<Range<usize>>::new());
        assert_eq!(consecutive_runs(&[0, 1, 2, 3]), vec![0..4]);
        assert_eq!(consecutive_runs(&[1, 2, 5, 7, 8]), vec![1..3, 5..6, 7..9]);
    }

    #[test]
    fn wire_tags_keep_request_round_and_block_apart_and_stay_valid_tags() {
        let mut seen = std::collections::HashSet::new();
        for index in [0, 1, (1 << INDEX_BITS) - 1] {
            for round in [0, 1, (1 << ROUND_BITS) - 1] {
                for block in [0, 1, MAX_BLOCKS as u32 - 1, END_BLOCK] {
                    let tag = wire_tag(index, round, block);
                    assert!(tag >= 0);
                    assert!(seen.insert(tag), "{index} {round} {block}");
                }
            }
        }
        // Counts wrap instead of spilling into the sign bit.
        assert_eq!(wire_tag(1 << INDEX_BITS, 1 << ROUND_BITS, 0), 0);
        assert_eq!(wire_tag(u32::MAX, u32::MAX, END_BLOCK), i32::MAX);
    }
}
