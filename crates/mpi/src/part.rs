//! Partitioned point-to-point communication (MPI 4.1 §4.2): `MPI_Psend_init`, `MPI_Precv_init`,
//! `MPI_Pready` (and its range and list forms) and `MPI_Parrived`.
//!
//! A partitioned request is a persistent request whose message is cut into partitions that the
//! sender marks ready one by one. Here the message travels whole: once every partition of a
//! round is ready, one send goes out; `MPI_Parrived` reports a partition once the message has
//! landed. The standard allows that (a partition may arrive as late as the whole), and it
//! keeps the data path that of an ordinary send, eager or rendezvous.
//!
//! Matching. MPI pairs the n-th `MPI_Psend_init` to a destination and tag on a communicator
//! with the n-th `MPI_Precv_init` from that source and tag, whatever order the rounds later
//! become ready in. Both sides therefore count their initialisations per (communicator, tag,
//! peer), and a round's message is sent with that count as its tag, on a channel of its own: a
//! context derived, without any message, from the communicator's context and the user's tag
//! (as `MPI_Comm_idup` derives its contexts). Ordinary point-to-point traffic and other tags
//! never share it, and each pair's rounds of one request arrive in order.

use crate::abi::*;
use crate::error::{fail, MpiError, Res};
use crate::p2p::count_arg;
use crate::request::{Persistent, Progress, Request, Typed};
use crate::state::{running, State};
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::rc::Rc;

/// One partitioned request's fixed arguments and the current round's ready marks.
pub(crate) struct Partitioned {
    /// Sender (`MPI_Psend_init`) or receiver.
    pub(crate) send: bool,
    /// The user's buffer: all partitions, one after the other.
    pub(crate) buf: *mut u8,
    /// Number of partitions.
    pub(crate) partitions: usize,
    /// Elements per partition.
    pub(crate) count: usize,
    /// The element type (a handle the request owns, see `p2p::keep_type`).
    pub(crate) datatype: Handle,
    /// The peer's rank in the communicator.
    pub(crate) peer: usize,
    /// The tag the user gave.
    pub(crate) user_tag: c_int,
    /// The channel the rounds travel on, and the tag (initialisation count) they carry.
    channel: ferry_core::Comm,
    tag: i32,
    /// Sender: which partitions of the current round are ready, and how many.
    ready: RefCell<Vec<bool>>,
    readied: Cell<usize>,
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
fn next_round_tag(
    s: &mut State,
    core: &ferry_core::Comm,
    tag: i32,
    peer: usize,
    send: bool,
) -> Res<(ferry_core::Comm, i32)> {
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
        let round_tag = (*n & 0x7fff_ffff) as i32;
        *n = n.wrapping_add(1);
        Ok((channel.comm.clone(), round_tag))
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
            let bytes = s.datatype(datatype)?.size();
            if partitions
                .checked_mul(count)
                .and_then(|n| n.checked_mul(bytes))
                .is_none()
            {
                return fail(MPI_ERR_COUNT, "partitions × count × type size overflows");
            }
            let (channel, round_tag) = next_round_tag(s, &core, tag, peer, send)?;
            let part = Partitioned {
                send,
                buf: buf as *mut u8,
                partitions,
                count,
                datatype,
                peer,
                user_tag: tag,
                channel,
                tag: round_tag,
                ready: RefCell::new(vec![false; partitions]),
                readied: Cell::new(0),
            };
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
    fn typed(&self, s: &mut State) -> Res<Typed> {
        Ok(Typed {
            dt: s.datatype(self.datatype)?,
            count: self.partitions * self.count,
            base: self.buf,
        })
    }

    /// MPI_Start: a receive is posted at once; a send waits for its partitions.
    pub(crate) fn start(&self, s: &mut State) -> Res<Progress> {
        if self.send {
            self.ready.borrow_mut().fill(false);
            self.readied.set(0);
            return Ok(Progress::AwaitingReady);
        }
        let typed = self.typed(s)?;
        let (core, peer, tag) = (&self.channel, self.peer, self.tag);
        let started = match typed.direct() {
            // SAFETY: MPI's contract keeps the buffer valid until the round completes.
            Some(ptr) => {
                unsafe { core.raw_recv(ptr, typed.bytes(), ferry_core::Source::Rank(peer), tag) }
                    .map(|raw| (raw, None))
            }
            None => {
                let mut staged = vec![0u8; typed.bytes()];
                // SAFETY: `staged` moves into the finish closure, which outlives the receive.
                unsafe {
                    core.raw_recv(
                        staged.as_mut_ptr(),
                        staged.len(),
                        ferry_core::Source::Rank(peer),
                        tag,
                    )
                }
                .map(|raw| {
                    let finish: crate::request::Finish =
                        Box::new(move |st: &ferry_core::raw::RawStatus| {
                            typed.unpack(&staged[..st.len.min(staged.len())]);
                        });
                    (raw, Some(finish))
                })
            }
        };
        let (raw, finish) = started?;
        Ok(Progress::Running { raw, finish })
    }

    /// Marks `partition` ready; the last one of the round sends the message.
    fn mark_ready(&self, s: &mut State, partition: c_int) -> Res<Option<Progress>> {
        let i = usize::try_from(partition)
            .ok()
            .filter(|&i| i < self.partitions)
            .ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_ARG,
                    format!("partition {partition} is not in 0..{}", self.partitions),
                )
            })?;
        {
            let mut ready = self.ready.borrow_mut();
            if ready[i] {
                return fail(
                    MPI_ERR_ARG,
                    format!("partition {i} is already marked ready in this round"),
                );
            }
            ready[i] = true;
        }
        self.readied.set(self.readied.get() + 1);
        if self.readied.get() < self.partitions {
            return Ok(None);
        }
        let typed = self.typed(s)?;
        let (core, peer, tag) = (&self.channel, self.peer, self.tag);
        let mode = ferry_core::raw::SendMode::Standard;
        let (raw, finish) = match typed.direct() {
            // SAFETY: MPI's contract keeps the buffer valid until the round completes.
            Some(ptr) => (
                unsafe { core.raw_send(ptr, typed.bytes(), peer, tag, mode) },
                None,
            ),
            None => {
                let staged = typed.pack();
                // SAFETY: `staged` moves into the finish closure, which outlives the send.
                let raw = unsafe { core.raw_send(staged.as_ptr(), staged.len(), peer, tag, mode) };
                let finish: crate::request::Finish = Box::new(move |_| drop(staged));
                (raw, Some(finish))
            }
        };
        let raw = raw?;
        Ok(Some(Progress::Running { raw, finish }))
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

/// Marks each of `partitions` ready on the send request `request`.
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
        for partition in partitions {
            if let Some(progress) = p.mark_ready(s, partition)? {
                if let Some(req) = s.requests.get_mut(request) {
                    req.progress = progress;
                }
            }
        }
        Ok(())
    })
}
