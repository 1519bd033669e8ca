//! Requests as the C side sees them, and completing them into `MPI_Status`.

use crate::abi::*;
use crate::datatype::Datatype;
use crate::error::{fail, MpiError, Res};
use ferry_core::raw::Fault;
use ferry_core::raw::{RawRequest, RawStatus};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// `count` elements of a datatype at a user address.
#[derive(Clone)]
pub(crate) struct Typed {
    /// The element type.
    pub(crate) dt: Datatype,
    /// Number of elements.
    pub(crate) count: usize,
    /// The user's buffer address (may be MPI_BOTTOM with absolute displacements).
    pub(crate) base: *mut u8,
}

impl Typed {
    /// Data bytes (packed size).
    pub(crate) fn bytes(&self) -> usize {
        self.dt.size() * self.count
    }

    /// The address of the data when it lies contiguously in the user buffer.
    pub(crate) fn direct(&self) -> Option<*mut u8> {
        self.dt
            .contiguous_span(self.count)
            .map(|offset| self.base.wrapping_offset(offset))
    }

    /// A packed copy of the data.
    pub(crate) fn pack(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.bytes()];
        // SAFETY: MPI's contract: `base` holds `count` elements of `dt`.
        unsafe { self.dt.pack(self.base, self.count, &mut out) };
        out
    }

    /// Scatters packed `bytes` (possibly fewer than `bytes()`) into the user buffer.
    pub(crate) fn unpack(&self, bytes: &[u8]) {
        // SAFETY: MPI's contract: `base` has room for `count` elements of `dt`.
        unsafe { self.dt.unpack(bytes, self.count, self.base) };
    }
}

/// Runs when a request finishes (unpacking a staged receive, dropping a staged send).
pub(crate) type Finish = Box<dyn FnOnce(&RawStatus)>;

/// The handle of a send that finished when it started (already in the receiver's queue, or
/// buffered) of `bytes` bytes: such a request needs no table entry, so none is made; the handle
/// says all a wait needs (MPICH returns such sends a shared completed request likewise). Every
/// call that takes a request knows these handles (`sent_bytes`).
///
/// The handle also carries a serial that is live until a wait, a test or MPI_Request_free
/// retires it ([`retire_sent`]), so that a copy of a freed handle is an invalid request, as it
/// is for a request in the table (MPI 4.1 §3.7.3). `None` when every serial is taken or the
/// count does not fit: the caller then makes a table entry.
#[inline]
pub(crate) fn sent_handle(bytes: usize) -> Option<Handle> {
    if bytes > SENT_BYTES {
        return None;
    }
    let serial = SENT_LIVE.take()?;
    Some(((crate::handles::Kind::SentRequest as usize) << 56) | (serial << SERIAL_SHIFT) | bytes)
}

/// The byte count of a handle from [`sent_handle`]; `None` for any other handle.
#[inline]
pub(crate) fn sent_bytes(handle: Handle) -> Option<usize> {
    (handle >> 56 == crate::handles::Kind::SentRequest as usize).then_some(handle & SENT_BYTES)
}

/// Ends the life of a handle from [`sent_handle`] (its wait, test or free): its byte count, or
/// MPI_ERR_REQUEST when it was retired before (a copy of a completed or freed request).
#[inline]
pub(crate) fn retire_sent(handle: Handle) -> Res<usize> {
    let bytes = sent_bytes(handle).unwrap_or(0);
    if SENT_LIVE.give_back((handle >> SERIAL_SHIFT) & (SERIALS - 1)) {
        return Ok(bytes);
    }
    fail(
        MPI_ERR_REQUEST,
        format!("invalid request {handle:#x}: it was completed or freed before"),
    )
}

/// The handle of a receive straight into the caller's buffer on a communicator whose ranks are
/// the world's ([`ferry_core::Comm::ranks_are_world`]): it names the runtime's request itself
/// (`kind << 56 | the request's number`), so the receive makes no [`Request`] and no table
/// entry, and its wait needs no lookup. The runtime's request slot carries a generation, so a
/// copy of the handle used after its wait finds nothing and is an invalid request. Such a
/// request has no finish step, no communicator to remember (the status's source is the world
/// rank, which is its rank there) and is never persistent.
pub(crate) fn engine_handle(raw: RawRequest) -> Handle {
    ((crate::handles::Kind::EngineRequest as usize) << 56) | (raw.to_bits() as usize & ENGINE_BITS)
}

/// The runtime request an [`engine_handle`] names; `None` for any other handle.
#[inline]
pub(crate) fn engine_request(handle: Handle) -> Option<RawRequest> {
    (handle >> 56 == crate::handles::Kind::EngineRequest as usize)
        .then(|| RawRequest::from_bits((handle & ENGINE_BITS) as u64))
}

/// The bits of an [`engine_handle`] below its kind.
const ENGINE_BITS: usize = (1 << 56) - 1;

/// Bits of a sent handle below the serial: the byte count (up to 1 TiB).
const SERIAL_SHIFT: u32 = 40;
const SENT_BYTES: usize = (1 << SERIAL_SHIFT) - 1;
/// Serials of sent handles (16 bits, between the byte count and the kind).
const SERIALS: usize = 1 << 16;

/// Which serials of sent handles are live: one bit each, shared by the threads of the process.
struct SentLive {
    bits: [AtomicU64; SERIALS / 64],
    next: AtomicUsize,
}

static SENT_LIVE: SentLive = SentLive {
    bits: [const { AtomicU64::new(0) }; SERIALS / 64],
    next: AtomicUsize::new(0),
};

// Every caller is inside an MPI call, and MPI calls are serialized: by the program below
// MPI_THREAD_MULTIPLE, by the process-wide lock at it (`crate::threads`), whose hand-over orders
// memory. So a plain load and store do, and a send costs no locked read-modify-write (three of
// them took about a tenth of the time of a small nonblocking send and its wait).
impl SentLive {
    /// A serial not in use, marked live; a few tries, as the serials in use are few unless
    /// the program keeps tens of thousands of sends unwaited.
    fn take(&self) -> Option<usize> {
        for _ in 0..8 {
            let next = self.next.load(Ordering::Relaxed);
            self.next.store(next.wrapping_add(1), Ordering::Relaxed);
            let serial = next & (SERIALS - 1);
            let bit = 1u64 << (serial % 64);
            let word = &self.bits[serial / 64];
            let bits = word.load(Ordering::Relaxed);
            if bits & bit == 0 {
                word.store(bits | bit, Ordering::Relaxed);
                return Some(serial);
            }
        }
        None
    }

    /// Marks `serial` free; whether it was live.
    fn give_back(&self, serial: usize) -> bool {
        let bit = 1u64 << (serial % 64);
        let word = &self.bits[serial / 64];
        let bits = word.load(Ordering::Relaxed);
        word.store(bits & !bit, Ordering::Relaxed);
        bits & bit != 0
    }
}

impl Request {
    /// The byte count of a send that was done when it started, if this is one (see
    /// [`sent_handle`]): its wait would report exactly that.
    pub(crate) fn sent_at_start(&self) -> Option<usize> {
        match self.progress {
            Progress::Done(o)
                if self.persistent.is_none()
                    && self.partner.is_none()
                    && self.generalized.is_none()
                    && o == Outcome::sent(o.bytes) =>
            {
                usize::try_from(o.bytes).ok()
            }
            _ => None,
        }
    }
}

/// What a finished request reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Sender's rank (MPI_PROC_NULL for a receive from it).
    pub(crate) source: c_int,
    /// Message tag.
    pub(crate) tag: c_int,
    /// Bytes received.
    pub(crate) bytes: i64,
    /// Cancelled before it matched.
    pub(crate) cancelled: bool,
    /// The error class (MPI_SUCCESS or MPI_ERR_TRUNCATE).
    pub(crate) error: c_int,
}

impl Outcome {
    /// The status of a request that did nothing (MPI's "empty status").
    pub(crate) const EMPTY: Outcome = Outcome {
        source: MPI_ANY_SOURCE,
        tag: MPI_ANY_TAG,
        bytes: 0,
        cancelled: false,
        error: MPI_SUCCESS,
    };

    /// The status of a send of `bytes` bytes.
    pub(crate) const fn sent(bytes: i64) -> Outcome {
        Outcome {
            bytes,
            ..Outcome::EMPTY
        }
    }

    /// The status of a receive from MPI_PROC_NULL.
    pub(crate) const PROC_NULL: Outcome = Outcome {
        source: MPI_PROC_NULL,
        tag: MPI_ANY_TAG,
        bytes: 0,
        cancelled: false,
        error: MPI_SUCCESS,
    };

    /// The outcome a finished runtime request reports.
    pub(crate) fn of(raw: &RawStatus) -> Outcome {
        Outcome {
            source: if raw.source == usize::MAX {
                MPI_ANY_SOURCE
            } else {
                raw.source as c_int
            },
            tag: raw.tag,
            bytes: raw.len as i64,
            cancelled: raw.cancelled,
            error: if raw.fault == Fault::ProcFailed {
                MPIX_ERR_PROC_FAILED
            } else if raw.fault == Fault::Revoked {
                MPIX_ERR_REVOKED
            } else if raw.message_len > raw.len && !raw.cancelled {
                MPI_ERR_TRUNCATE
            } else {
                MPI_SUCCESS
            },
        }
    }

    /// Writes the outcome into a user status (ignored when `status` is MPI_STATUS_IGNORE).
    ///
    /// # Safety
    /// `status` is null or points to a writable `MPI_Status`.
    pub(crate) unsafe fn write(&self, status: *mut MpiStatus, with_error: bool) {
        // SAFETY: this function's `# Safety`: `status` is NULL or a writable MPI_Status.
        if let Some(st) = unsafe { status.as_mut() } {
            st.source = self.source;
            st.tag = self.tag;
            st.set_count(self.bytes);
            st.cancelled = self.cancelled as c_int;
            if with_error {
                st.error = self.error;
            }
        }
    }

    /// The outcome as a result for the caller.
    pub(crate) fn check(&self) -> Res {
        if self.error == MPI_SUCCESS {
            Ok(())
        } else if self.error == MPIX_ERR_PROC_FAILED {
            fail(
                self.error,
                format!("rank {} of the communicator failed", self.source),
            )
        } else if self.error == MPIX_ERR_REVOKED {
            fail(self.error, "the communicator has been revoked")
        } else if self.error != MPI_ERR_TRUNCATE {
            fail(
                self.error,
                format!("the request failed with error {}", self.error),
            )
        } else {
            fail(
                self.error,
                format!(
                    "message from rank {} (tag {}) is longer than the receive buffer of {} bytes",
                    self.source, self.tag, self.bytes
                ),
            )
        }
    }
}

/// How a send completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendKind {
    /// MPI_Send.
    Standard,
    /// MPI_Ssend.
    Synchronous,
    /// MPI_Bsend.
    Buffered,
    /// MPI_Rsend (a standard send: the receive is already posted).
    Ready,
}

/// The arguments a persistent request starts with each MPI_Start.
#[derive(Clone)]
pub(crate) enum Persistent {
    /// MPI_Send_init and friends.
    Send {
        /// Mode.
        kind: SendKind,
        /// Buffer, count, type handle.
        buf: *const u8,
        /// Element count.
        count: crate::p2p::Count,
        /// Datatype handle.
        datatype: Handle,
        /// Destination rank.
        dest: c_int,
        /// Tag.
        tag: c_int,
    },
    /// MPI_Recv_init.
    Recv {
        /// Buffer.
        buf: *mut u8,
        /// Element count.
        count: crate::p2p::Count,
        /// Datatype handle.
        datatype: Handle,
        /// Source rank or wildcard.
        source: c_int,
        /// Tag or wildcard.
        tag: c_int,
    },
    /// MPI_Psend_init or MPI_Precv_init.
    Partitioned(std::rc::Rc<crate::part::Partitioned>),
    /// A persistent collective (`MPI_Bcast_init` and the others).
    Coll {
        /// The hidden duplicate of the communicator this request alone uses (`comm::hidden_dup`).
        hidden: Handle,
        /// Starts the matching nonblocking collective on `hidden`, storing its request at the
        /// address given.
        start: std::rc::Rc<dyn Fn(crate::coll::RequestOut<'_>) -> Res>,
        /// Private copies of the datatypes and operations it uses, freed with it.
        kept: Vec<Handle>,
    },
}

/// Where a request is.
pub(crate) enum Progress {
    /// A persistent request between completions.
    Inactive,
    /// In flight in the runtime.
    Running {
        /// The runtime's request.
        raw: RawRequest,
        /// What to do once it has finished.
        finish: Option<Finish>,
    },
    /// Finished when it was started (MPI_PROC_NULL, a buffered send).
    Done(Outcome),
    /// A started partitioned send whose partitions are not all marked ready yet.
    AwaitingReady,
}

/// An MPI request.
pub(crate) struct Request {
    /// The communicator handle (for the error handler).
    pub(crate) comm: Handle,
    /// The runtime communicator (status ranks are relative to it).
    pub(crate) core: ferry_core::Comm,
    /// Where it is.
    pub(crate) progress: Progress,
    /// Set for persistent requests.
    /// Boxed, as `generalized`: requests move in and out of the table, and most have neither.
    pub(crate) persistent: Option<Box<Persistent>>,
    /// MPI_Cancel was called.
    pub(crate) cancel_requested: bool,
    /// A second operation that must also finish (the send of MPI_Isendrecv).
    pub(crate) partner: Option<Box<Request>>,
    /// Set for generalized requests (`MPI_Grequest_start`).
    pub(crate) generalized: Option<Box<Greq>>,
}

/// `MPI_Grequest_query_function`: fills the status of a completed generalized request.
pub(crate) type GreqQueryFn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut MpiStatus) -> c_int;
/// `MPI_Grequest_free_function`: frees the user's state of a generalized request.
pub(crate) type GreqFreeFn = unsafe extern "C" fn(*mut std::ffi::c_void) -> c_int;
/// `MPI_Grequest_cancel_function`: told of MPI_Cancel (and whether the request is complete).
pub(crate) type GreqCancelFn = unsafe extern "C" fn(*mut std::ffi::c_void, c_int) -> c_int;

/// The callbacks and state of a generalized request (MPI 4.1 §13.2).
#[derive(Clone, Copy)]
pub(crate) struct Greq {
    /// Called when a wait or test completes the request (and by MPI_Request_get_status).
    pub(crate) query: Option<GreqQueryFn>,
    /// Called once, when the request is freed after completing.
    pub(crate) free: Option<GreqFreeFn>,
    /// Called by MPI_Cancel.
    pub(crate) cancel: Option<GreqCancelFn>,
    /// The user's `extra_state`.
    pub(crate) extra: *mut std::ffi::c_void,
    /// The tag of the message to itself that MPI_Grequest_complete sends (see `greq.rs`).
    pub(crate) tag: c_int,
    /// MPI_Grequest_complete was called.
    pub(crate) completed: bool,
    /// MPI_Request_free was called before it completed: MPI_Grequest_complete frees it.
    pub(crate) freed: bool,
}

impl Greq {
    /// Runs the query callback into `status`; its return value is the request's error code.
    ///
    /// # Safety
    /// The callbacks and `extra` are the user's, as MPI_Grequest_start got them.
    pub(crate) unsafe fn query_status(&self, status: &mut MpiStatus) -> c_int {
        *status = MpiStatus::default();
        match self.query {
            // SAFETY: this function's `# Safety`: the callback and `extra` are the user's, as
            // MPI_Grequest_start got them.
            Some(f) => unsafe { f(self.extra, status) },
            None => MPI_SUCCESS,
        }
    }

    /// Runs the free callback.
    ///
    /// # Safety
    /// As [`Greq::query_status`].
    pub(crate) unsafe fn run_free(&self) -> c_int {
        match self.free {
            // SAFETY: this function's `# Safety`, as [`Greq::query_status`]'s.
            Some(f) => unsafe { f(self.extra) },
            None => MPI_SUCCESS,
        }
    }
}

impl Request {
    /// A request in flight.
    pub(crate) fn running(
        comm: Handle,
        core: ferry_core::Comm,
        raw: RawRequest,
        finish: Option<Finish>,
    ) -> Request {
        Request {
            comm,
            core,
            progress: Progress::Running { raw, finish },
            persistent: None,
            cancel_requested: false,
            partner: None,
            generalized: None,
        }
    }

    /// A request that finished as it started.
    pub(crate) fn done(comm: Handle, core: ferry_core::Comm, outcome: Outcome) -> Request {
        Request {
            comm,
            core,
            progress: Progress::Done(outcome),
            persistent: None,
            cancel_requested: false,
            partner: None,
            generalized: None,
        }
    }

    /// The runtime request still in flight, if any.
    pub(crate) fn raw(&self) -> Option<RawRequest> {
        match self.progress {
            Progress::Running { raw, .. } => Some(raw),
            _ => None,
        }
    }

    /// The runtime requests in flight (this one's and its partner's).
    pub(crate) fn raws(&self) -> [Option<RawRequest>; 2] {
        [self.raw(), self.partner.as_ref().and_then(|p| p.raw())]
    }

    /// Whether the request is finished (or inactive, or done at start).
    pub(crate) fn is_complete(&self) -> bool {
        let own = match self.progress {
            Progress::Running { raw, .. } => self.core.raw_done(raw),
            Progress::AwaitingReady => false,
            _ => true,
        };
        own && self.partner.as_ref().is_none_or(|p| p.is_complete())
    }

    /// Whether it is an inactive persistent request (completes with an empty status).
    pub(crate) fn is_inactive(&self) -> bool {
        matches!(self.progress, Progress::Inactive)
    }

    /// Collects the outcome of a finished request; it becomes inactive (persistent) or spent.
    /// Withdraws its receives not matched yet and takes what finished; for a blocking receive
    /// that returns without its message (a fault-tolerant job's wildcard receive).
    pub(crate) fn cancel_now(&mut self) {
        for raw in self.raws().into_iter().flatten() {
            self.core.raw_cancel(raw);
            self.core.raw_take(raw);
        }
        self.progress = Progress::Inactive;
    }

    pub(crate) fn complete(&mut self) -> Res<Outcome> {
        if let Some(mut partner) = self.partner.take() {
            partner.complete()?;
        }
        let progress = std::mem::replace(&mut self.progress, Progress::Inactive);
        match progress {
            Progress::Inactive => Ok(Outcome::EMPTY),
            Progress::AwaitingReady => {
                self.progress = Progress::AwaitingReady;
                Err(MpiError::new(
                    MPI_ERR_REQUEST,
                    "a partitioned send completes only after MPI_Pready of every partition",
                ))
            }
            Progress::Done(o) => Ok(o),
            Progress::Running { raw, finish } => {
                if let Some(Persistent::Partitioned(p)) = self.persistent.as_deref() {
                    // A round's closing message: the round's other messages finish first.
                    return p.finish_round(raw);
                }
                let Some(st) = self.core.raw_take(raw) else {
                    self.progress = Progress::Running { raw, finish };
                    return Err(MpiError::new(
                        MPI_ERR_INTERN,
                        "request completed while running",
                    ));
                };
                if let Some(f) = finish {
                    f(&st);
                }
                Ok(Outcome::of(&st))
            }
        }
    }
}

#[cfg(test)]
mod sent_handle_tests {
    use super::*;

    #[test]
    fn sent_handles_carry_their_byte_count_and_no_other_handle_is_one() {
        for bytes in [0, 1, 8, 65536, (1 << 40) - 1] {
            let h = sent_handle(bytes).expect("a free serial");
            assert_eq!(sent_bytes(h), Some(bytes));
            assert_ne!(h, MPI_REQUEST_NULL);
            assert_eq!(retire_sent(h).ok(), Some(bytes));
        }
        assert_eq!(sent_handle(1 << 40), None);
        let mut table: crate::handles::Table<()> =
            crate::handles::Table::new(crate::handles::Kind::Request);
        let created = table.insert(());
        assert_eq!(sent_bytes(created), None);
        assert_eq!(sent_bytes(MPI_REQUEST_NULL), None);
    }

    #[test]
    fn engine_handles_give_back_their_request_and_no_other_handle_is_one() {
        for bits in [0u64, 1, (7 << 32) | 5, (1 << 56) - 1] {
            let raw = RawRequest::from_bits(bits);
            let h = engine_handle(raw);
            assert_eq!(engine_request(h), Some(raw));
            assert_ne!(h, MPI_REQUEST_NULL);
            assert_eq!(sent_bytes(h), None);
        }
        let sent = sent_handle(8).expect("a free serial");
        assert_eq!(engine_request(sent), None);
        assert!(retire_sent(sent).is_ok());
        let mut table: crate::handles::Table<()> =
            crate::handles::Table::new(crate::handles::Kind::Request);
        assert_eq!(engine_request(table.insert(())), None);
        assert_eq!(engine_request(MPI_REQUEST_NULL), None);
    }

    #[test]
    fn a_sent_handle_retires_once() {
        let h = sent_handle(4).expect("a free serial");
        let copy = h;
        assert_eq!(retire_sent(h).ok(), Some(4));
        assert_eq!(
            retire_sent(copy).err().map(|e| e.class),
            Some(MPI_ERR_REQUEST)
        );
    }
}
