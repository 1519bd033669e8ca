//! The MPI tool information interface (MPI 4.1 chapter 15, "MPI_T"): ferry's settings as
//! control variables, its traffic counters as performance variables, both grouped in
//! categories.
//!
//! * **Control variables** are the fields of [`ferry_core::Config`], named after their
//!   environment variable in lower case (`FERRY_SHM_EAGER` is `ferry_shm_eager`). The runtime
//!   reads them once, at MPI_Init, so every one has scope MPI_T_SCOPE_READONLY and writing one
//!   returns MPI_T_ERR_CVAR_SET_NEVER. Between MPI_Init and MPI_Finalize (and after it) a read
//!   gives the value in effect, automatic choices resolved; before MPI_Init it gives the value
//!   the environment asks for, and 0 for a setting left to a choice made at MPI_Init.
//! * **Performance variables** are [`ferry_core::Counters`]: counters of messages and bytes
//!   sent and received, of eager and rendezvous sends and of unexpected arrivals
//!   (MPI_T_PVAR_CLASS_COUNTER: started and stopped per handle, resettable and writable per
//!   handle), the unexpected queue's length (LEVEL) and peak (HIGHWATERMARK), both continuous
//!   and read-only. Before MPI_Init they read 0; after MPI_Finalize, their final values.
//!   What `FERRY_COMPRESS` did on the TCP links (payloads sent compressed, their bytes before
//!   and after, payloads that went raw after their sample, payloads received compressed) are
//!   counters of the same kind.
//! * **Categories**: `ferry` holds `ferry_transport`, `ferry_shm`, `ferry_tcp` (control
//!   variables), `ferry_p2p` and `ferry_compress` (performance variables).
//! * **Events** ([`events`]): unexpected messages, rendezvous starts, path set-ups, rail
//!   failovers and collective algorithm choices, from one source, this process's clock.
//!
//! MPI_T works before MPI_Init and after MPI_Finalize; MPI_T_init_thread and MPI_T_finalize
//! are reference counted, and the last MPI_T_finalize frees every handle and session. Its state is
//! shared by threads as the rest of ferry's MPI is (see `crate::threads`). The functions
//! return their error code and never invoke an MPI error handler.

use crate::abi::*;
use crate::datatype::Builtin;
use crate::error::{fail, MpiError, Res};
use crate::handles::{Kind, Table};
use crate::threads::Serialized;
use ferry_core::{CmaMode, Config, Counters, RailPolicy};
use std::ffi::{c_char, c_int, c_ulonglong, c_void, CStr};
use std::sync::LazyLock;

pub(crate) mod events;
mod sessions;
pub(crate) use sessions::*;

// ---- State ----------------------------------------------------------------------------------

/// A control-variable handle: which variable, and the element count it was allocated with.
pub(crate) struct CvarHandle {
    pub(crate) index: usize,
    pub(crate) count: usize,
}

/// A performance-variable handle of a session.
pub(crate) struct PvarHandle {
    pub(crate) session: Handle,
    pub(crate) index: usize,
    /// Whether it counts now (always for continuous variables).
    pub(crate) started: bool,
    /// The value when last stopped, written or reset.
    pub(crate) held: u64,
    /// The counter's total when last started, written or reset.
    pub(crate) base: u64,
}

/// The tool interface's state: reference count and handles.
pub(crate) struct Tool {
    /// MPI_T_init_thread calls not yet matched by MPI_T_finalize.
    pub(crate) refs: u32,
    pub(crate) cvars: Table<CvarHandle>,
    pub(crate) sessions: Table<()>,
    pub(crate) pvars: Table<PvarHandle>,
    pub(crate) events: Table<events::Registration>,
    /// Threads handing events to callbacks now: a registration freed meanwhile has its free
    /// callback run (from `freed`) when the last of them is through.
    pub(crate) delivering: u32,
    pub(crate) freed: Vec<events::Freed>,
    /// Settings and counters at MPI_Finalize, read from then on.
    last: Option<(Config, Counters)>,
}

impl Tool {
    fn new() -> Tool {
        Tool {
            refs: 0,
            cvars: Table::new(Kind::ToolCvar),
            sessions: Table::new(Kind::ToolSession),
            pvars: Table::new(Kind::ToolPvar),
            events: Table::new(Kind::ToolEventRegistration),
            delivering: 0,
            freed: Vec::new(),
            last: None,
        }
    }
}

pub(crate) static TOOL: LazyLock<Serialized<Tool>> = LazyLock::new(|| Serialized::new(Tool::new()));

pub(crate) fn error(class: c_int, message: impl Into<String>) -> MpiError {
    MpiError::new(class, message)
}

/// Runs `f` on the state once MPI_T is initialized.
pub(crate) fn tool<T>(f: impl FnOnce(&mut Tool) -> Res<T>) -> Res<T> {
    TOOL.with(|t| {
        if t.refs == 0 {
            return fail(
                MPI_T_ERR_NOT_INITIALIZED,
                "MPI_T_init_thread was not called",
            );
        }
        f(t)
    })
    .unwrap_or_else(|| fail(MPI_T_ERR_INVALID, "MPI_T called re-entrantly"))
}

/// Called by MPI_Finalize before the runtime goes: keeps its settings and final counters.
pub(crate) fn world_ending(world: &ferry_core::World) {
    let counters = world.counters().unwrap_or_default();
    let config = world.config().clone();
    TOOL.with(|t| t.last = Some((config, counters)));
}

/// What the runtime is doing now: running, finished (with its last values) or not started.
enum Runtime {
    Running(Config, Counters),
    Finished(Config, Counters),
    NotStarted,
}

fn runtime() -> Res<Runtime> {
    let live =
        crate::state::with(|s| Ok(s.world.as_ref().map(|w| (w.config().clone(), w.counters()))))
            .map_err(|e| error(MPI_T_ERR_NOT_ACCESSIBLE, e.into_message()))?;
    match live {
        Some((config, Some(counters))) => Ok(Runtime::Running(config, counters)),
        Some((_, None)) => fail(
            MPI_T_ERR_NOT_ACCESSIBLE,
            "the runtime is busy (MPI_T called from inside one of its callbacks)",
        ),
        None => Ok(match TOOL.with(|t| t.last.clone()).flatten() {
            Some((config, counters)) => Runtime::Finished(config, counters),
            None => Runtime::NotStarted,
        }),
    }
}

/// The settings to report: in effect, or (before MPI_Init) asked for by the environment.
fn settings() -> Res<Config> {
    match runtime()? {
        Runtime::Running(c, _) | Runtime::Finished(c, _) => Ok(c),
        Runtime::NotStarted => Config::from_env().map_err(|e| {
            error(
                MPI_T_ERR_NOT_ACCESSIBLE,
                format!("the environment holds an invalid setting: {e}"),
            )
        }),
    }
}

/// The traffic counters now (zero before MPI_Init).
pub(crate) fn counters() -> Res<Counters> {
    match runtime()? {
        Runtime::Running(_, c) | Runtime::Finished(_, c) => Ok(c),
        Runtime::NotStarted => Ok(Counters::default()),
    }
}

// ---- Argument helpers -----------------------------------------------------------------------

/// `*p = value` when `p` is not NULL (MPI_T's query functions take NULL for "not wanted").
pub(crate) unsafe fn put<T>(p: *mut T, value: T) {
    // SAFETY: this function's contract is the unsafe operations' own: `p`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if let Some(p) = p.as_mut() {
            *p = value;
        }
    }
}

/// Returns `text` the MPI_T way (MPI 4.1 §15.3.3): with `len` NULL nothing is returned; with
/// `buf` NULL or `*len` 0 the length it needs (with the NUL) is; else at most `*len`
/// characters with the NUL are copied and `*len` says how many.
pub(crate) unsafe fn put_string(text: &str, buf: *mut c_char, len: *mut c_int) {
    // SAFETY: this function's contract is the unsafe operations' own: `buf` and `len`, as the
    // caller promises, are NULL or valid for what the MPI call it serves reads and writes through
    // them.
    unsafe {
        let Some(len) = len.as_mut() else {
            return;
        };
        if buf.is_null() || *len <= 0 {
            *len = text.len() as c_int + 1;
            return;
        }
        let n = text.len().min(*len as usize - 1);
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
        *len = n as c_int + 1;
    }
}

/// A name argument.
pub(crate) unsafe fn name_arg(name: *const c_char) -> Res<String> {
    // SAFETY: this function's contract is the unsafe operations' own: `name`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if name.is_null() {
            return fail(MPI_T_ERR_INVALID, "name is NULL");
        }
        Ok(CStr::from_ptr(name).to_string_lossy().into_owned())
    }
}

/// Index `i` of a list of `n`.
pub(crate) fn index_arg(i: c_int, n: usize, what: &str) -> Res<usize> {
    usize::try_from(i)
        .ok()
        .filter(|&i| i < n)
        .ok_or_else(|| error(MPI_T_ERR_INVALID_INDEX, format!("no {what} number {i}")))
}

/// Writes the first `len` of `items` to `indices` (`len` < 0 is an error).
pub(crate) unsafe fn put_indices(items: &[usize], len: c_int, indices: *mut c_int) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `indices`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let Ok(len) = usize::try_from(len) else {
            return fail(MPI_T_ERR_INVALID, format!("negative length {len}"));
        };
        let n = len.min(items.len());
        if n > 0 && indices.is_null() {
            return fail(MPI_T_ERR_INVALID, "indices is NULL");
        }
        for (k, &i) in items.iter().take(n).enumerate() {
            *indices.add(k) = i as c_int;
        }
        Ok(())
    }
}

// ---- Enumerations ---------------------------------------------------------------------------

/// An enumeration of MPI_T: its name and (value, name) items.
pub(crate) struct EnumDef {
    pub(crate) name: &'static str,
    pub(crate) items: &'static [(c_int, &'static str)],
}

const ENUM_TRANSPORT: usize = 0;
const ENUM_CMA: usize = 1;
const ENUM_RAIL_POLICY: usize = 2;
const ENUM_NET: usize = 3;
const ENUM_ROUTE: usize = 4;
const ENUM_PATH: usize = 5;
const ENUM_ALGORITHM: usize = 6;

const ENUMS: &[EnumDef] = &[
    EnumDef {
        name: "ferry_transport",
        items: &[(0, "shm"), (1, "tcp"), (2, "auto")],
    },
    EnumDef {
        name: "ferry_cma",
        items: &[(0, "auto"), (1, "pull"), (2, "share"), (3, "off")],
    },
    EnumDef {
        name: "ferry_rail_policy",
        items: &[(0, "weighted"), (1, "roundrobin")],
    },
    EnumDef {
        name: "ferry_net",
        items: &[(0, "auto"), (1, "ofi"), (2, "tcp")],
    },
    // Of ferry_core::events::{RendezvousRoute, PathKind, ALGORITHMS}.
    EnumDef {
        name: "ferry_rendezvous_route",
        items: &[
            (0, "self"),
            (1, "shm_cma"),
            (2, "shm_copy"),
            (3, "tcp"),
            (4, "fabric_read"),
        ],
    },
    EnumDef {
        name: "ferry_path",
        items: &[
            (0, "none"),
            (1, "self"),
            (2, "shm"),
            (3, "direct"),
            (4, "nat"),
            (5, "relay"),
            (6, "punched"),
            (7, "fabric"),
        ],
    },
    EnumDef {
        name: "ferry_coll_algorithm",
        items: &[
            (0, "binomial"),
            (1, "scatter_allgather"),
            (2, "hierarchical"),
            (3, "shared_memory"),
            (4, "recursive_doubling"),
            (5, "ring"),
            (6, "dissemination"),
            (7, "linear"),
            (8, "pairwise"),
        ],
    },
];

/// The handle of enumeration `i`: fixed, since the enumerations are.
pub(crate) fn enum_handle(i: usize) -> Handle {
    ((Kind::ToolEnum as usize) << 56) | (i + 1)
}

pub(crate) fn enum_of(handle: Handle) -> Res<&'static EnumDef> {
    let i = (handle >> 56 == Kind::ToolEnum as usize)
        .then(|| (handle & 0xffff_ffff).wrapping_sub(1))
        .filter(|&i| i < ENUMS.len());
    i.map(|i| &ENUMS[i]).ok_or_else(|| {
        error(
            MPI_T_ERR_INVALID_HANDLE,
            format!("invalid MPI_T_enum {handle:#x}"),
        )
    })
}

// ---- Control variables ----------------------------------------------------------------------

/// How a control variable's value is typed in C.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum CvarType {
    /// `unsigned long` (MPI_UNSIGNED_LONG): sizes in bytes, seconds.
    ULong,
    /// `unsigned` (MPI_UNSIGNED).
    UInt,
    /// `int` (MPI_INT).
    Int,
    /// `int` with an enumeration: index into [`ENUMS`].
    Enum(usize),
    /// A string (MPI_CHAR).
    Text,
}

impl CvarType {
    pub(crate) fn datatype(self) -> Handle {
        match self {
            CvarType::ULong => Builtin::UnsignedLong as Handle,
            CvarType::UInt => Builtin::Unsigned as Handle,
            CvarType::Int | CvarType::Enum(_) => Builtin::Int as Handle,
            CvarType::Text => Builtin::Char as Handle,
        }
    }
}

/// A control variable's value.
pub(crate) enum CvarValue {
    Number(u64),
    Text(String),
}

/// A control variable: one field of [`Config`].
pub(crate) struct CvarDef {
    /// Its environment variable; the MPI_T name is this in lower case.
    pub(crate) env: &'static str,
    pub(crate) desc: &'static str,
    pub(crate) ty: CvarType,
    pub(crate) verbosity: c_int,
    category: usize,
    /// Its value in `config`.
    value: fn(&Config) -> CvarValue,
}

fn num(v: impl TryInto<u64>) -> CvarValue {
    CvarValue::Number(v.try_into().unwrap_or(u64::MAX))
}

pub(crate) const CVARS: &[CvarDef] = &[
    CvarDef {
        env: "FERRY_TRANSPORT",
        desc: "Transports between ranks: auto (shared-memory rings to ranks of this host, TCP to the others), shm (rings only, one host) or tcp.",
        ty: CvarType::Enum(ENUM_TRANSPORT),
        verbosity: MPI_T_VERBOSITY_USER_BASIC,
        category: CAT_TRANSPORT,
        value: |c| {
            num(match c.transport {
                ferry_core::config::TransportKind::Shm => 0u64,
                ferry_core::config::TransportKind::Tcp => 1,
                ferry_core::config::TransportKind::Auto => 2,
            })
        },
    },
    CvarDef {
        env: "FERRY_HOST_CORES",
        desc: "Cores this host's ranks of the job share, against which their count says whether they outnumber the cores (0: SLURM_CPUS_ON_NODE under Slurm, else the cores this process may run on).",
        ty: CvarType::UInt,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        category: CAT_TRANSPORT,
        value: |c| num(c.host_cores.unwrap_or(0)),
    },
    CvarDef {
        env: "FERRY_SPIN",
        desc: "Polls without progress before a waiting rank yields and then sleeps (0 before MPI_Init when left to MPI_Init: 4000, or 100 when ranks outnumber cores).",
        ty: CvarType::UInt,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        category: CAT_TRANSPORT,
        value: |c| num(c.spin.unwrap_or(0)),
    },
    CvarDef {
        env: "FERRY_SPIN_YIELD",
        desc: "1: a waiting rank's polls yield the core in between (0 before MPI_Init when left to MPI_Init: 1 when ranks outnumber cores, else 0).",
        ty: CvarType::UInt,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        category: CAT_TRANSPORT,
        value: |c| num(c.spin_yield.map_or(0, u64::from)),
    },
    CvarDef {
        env: "FERRY_FAULT_TOLERANT",
        desc: "1: a rank's death fails only the operations that involve it, and the job goes on (ULFM; ferry run --fault-tolerant).",
        ty: CvarType::UInt,
        verbosity: MPI_T_VERBOSITY_USER_BASIC,
        category: CAT_TRANSPORT,
        value: |c| num(u64::from(c.fault_tolerant)),
    },
    CvarDef {
        env: "FERRY_CONNECT_TIMEOUT",
        desc: "Seconds setup waits for every peer.",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_USER_DETAIL,
        category: CAT_TRANSPORT,
        value: |c| num(c.connect_timeout_secs),
    },
    CvarDef {
        env: "FERRY_PUNCH",
        desc: "1: a pair on two private clusters first tries a direct connection through both NATs (hole punching), then the relay.",
        ty: CvarType::UInt,
        verbosity: MPI_T_VERBOSITY_USER_DETAIL,
        category: CAT_TRANSPORT,
        value: |c| num(u64::from(c.punch)),
    },
    CvarDef {
        env: "FERRY_PUNCH_TIMEOUT_MS",
        desc: "Milliseconds a pair tries to punch through both NATs before it uses the relay.",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_USER_DETAIL,
        category: CAT_TRANSPORT,
        value: |c| num(c.punch_timeout_ms),
    },
    CvarDef {
        env: "FERRY_PMIX_LIB",
        desc: "The libpmix loaded when a PMIx server (srun --mpi=pmix, prterun) started this rank, and only then.",
        ty: CvarType::Text,
        verbosity: MPI_T_VERBOSITY_USER_DETAIL,
        category: CAT_TRANSPORT,
        value: |c| CvarValue::Text(c.pmix_lib.clone()),
    },
    CvarDef {
        env: "FERRY_GRID_PLACE",
        desc: "This rank's place in a grid (cluster, front node, host, address, relay), set by ferry run --grid; empty on one host.",
        ty: CvarType::Text,
        verbosity: MPI_T_VERBOSITY_USER_DETAIL,
        category: CAT_TRANSPORT,
        value: |c| CvarValue::Text(c.place.as_ref().map_or_else(String::new, |p| p.encode())),
    },
    CvarDef {
        env: "FERRY_SHM_EAGER",
        desc: "Largest message (bytes) sent eagerly through a shared-memory ring (0 before MPI_Init when left to MPI_Init: 8 KiB with shared CMA copies, else 64 KiB).",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        category: CAT_SHM,
        value: |c| num(c.shm_eager_limit.unwrap_or(0)),
    },
    CvarDef {
        env: "FERRY_SHM_RING",
        desc: "Bytes of one shared-memory ring (0: no ring, i.e. the tcp transport or a process started without ferry run; or, before MPI_Init, left to MPI_Init: 16 MiB / ranks within 64 KiB..1 MiB).",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        category: CAT_SHM,
        value: |c| num(c.shm_ring_bytes.unwrap_or(0)),
    },
    CvarDef {
        env: "FERRY_CMA",
        desc: "How large shared-memory messages are copied: auto, pull (the receiver copies), share (both sides copy a part) or off (through the ring).",
        ty: CvarType::Enum(ENUM_CMA),
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        category: CAT_SHM,
        value: |c| {
            num(match c.cma {
                CmaMode::Auto => 0u64,
                CmaMode::Pull => 1,
                CmaMode::Share => 2,
                CmaMode::Never => 3,
            })
        },
    },
    CvarDef {
        env: "FERRY_CMA_SHARE",
        desc: "Smallest shared-memory message (bytes) whose copy both sides share.",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_SHM,
        value: |c| num(c.cma_share_min),
    },
    CvarDef {
        env: "FERRY_COLL_SHM",
        desc: "Bytes of the shared segment a communicator whose ranks share a host uses for its collectives (0: none).",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_SHM,
        value: |c| num(c.coll_shm_bytes),
    },
    CvarDef {
        env: "FERRY_TCP_ADDR",
        desc: "The address this rank listens on and publishes for TCP peers; empty when unset (the grid or rail 0 address, else 127.0.0.1, or with peers on other hosts this host's own address).",
        ty: CvarType::Text,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_TCP,
        value: |c| CvarValue::Text(c.tcp_addr.map(|a| a.to_string()).unwrap_or_default()),
    },
    CvarDef {
        env: "FERRY_TCP_EAGER",
        desc: "Largest message (bytes) sent eagerly over TCP.",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        category: CAT_TCP,
        value: |c| num(c.tcp_eager_limit),
    },
    CvarDef {
        env: "FERRY_TCP_CHUNK",
        desc: "Largest DATA frame (bytes) of a rendezvous over TCP.",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_TCP,
        value: |c| num(c.tcp_chunk),
    },
    CvarDef {
        env: "FERRY_TCP_BUF",
        desc: "SO_SNDBUF and SO_RCVBUF (bytes) of every rank-to-rank socket; 0 is kernel autotuning.",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_TCP,
        value: |c| num(c.tcp_buffer),
    },
    CvarDef {
        env: "FERRY_TCP_STRANGERS",
        desc: "Connections to a rank's listener waiting to authenticate kept at a time (never fewer than two per peer and rail); one more closes the oldest.",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_TCP,
        value: |c| num(c.tcp_strangers),
    },
    CvarDef {
        env: "FERRY_RAILS",
        desc: "TCP connections (rails) per peer pair, 1 to 16.",
        ty: CvarType::Int,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        category: CAT_TCP,
        value: |c| num(c.rails),
    },
    CvarDef {
        env: "FERRY_RAIL_ADDRS",
        desc: "This rank's local address on each rail, comma-separated; empty when every rail takes rail 0's path.",
        ty: CvarType::Text,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_TCP,
        value: |c| {
            CvarValue::Text(
                c.rail_addrs
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            )
        },
    },
    CvarDef {
        env: "FERRY_RAIL_POLICY",
        desc: "How rendezvous chunks are spread over rails: weighted (by measured rate and backlog) or roundrobin.",
        ty: CvarType::Enum(ENUM_RAIL_POLICY),
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_TCP,
        value: |c| {
            num(match c.rail_policy {
                RailPolicy::Weighted => 0u64,
                RailPolicy::RoundRobin => 1,
            })
        },
    },
    CvarDef {
        env: "FERRY_RAIL_STRIPE",
        desc: "Smallest rendezvous (bytes) striped over the rails.",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_TCP,
        value: |c| num(c.rail_stripe),
    },
    CvarDef {
        env: "FERRY_RAIL_TIMEOUT",
        desc: "Seconds a rail other than rail 0 may leave sent data unacknowledged before it counts as failed.",
        ty: CvarType::ULong,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        category: CAT_TCP,
        value: |c| num(c.rail_timeout_secs),
    },
    CvarDef {
        env: "FERRY_NET",
        desc: "Network between hosts: auto (a libfabric fabric with a user-level NIC where both hosts have one, else TCP), ofi (the fabric on any provider but shm) or tcp.",
        ty: CvarType::Enum(ENUM_NET),
        verbosity: MPI_T_VERBOSITY_USER_BASIC,
        category: CAT_TRANSPORT,
        value: |c| {
            num(match c.net {
                ferry_core::NetKind::Auto => 0u64,
                ferry_core::NetKind::Ofi => 1,
                ferry_core::NetKind::Tcp => 2,
            })
        },
    },
    CvarDef {
        env: "FERRY_RAIL_STATS",
        desc: "1: each rank prints, at finalize, the bytes and measured rate of every rail.",
        ty: CvarType::UInt,
        verbosity: MPI_T_VERBOSITY_USER_DETAIL,
        category: CAT_TCP,
        value: |c| num(u64::from(c.rail_stats)),
    },
    CvarDef {
        env: "FERRY_SHOW_PATHS",
        desc: "1: rank 0 prints the job's path matrix after set-up, and a rank says why a pair does not punch.",
        ty: CvarType::UInt,
        verbosity: MPI_T_VERBOSITY_USER_DETAIL,
        category: CAT_TRANSPORT,
        value: |c| num(u64::from(c.show_paths)),
    },
];

pub(crate) fn cvar_name(def: &CvarDef) -> String {
    def.env.to_ascii_lowercase()
}

/// The value of control variable `index` now.
pub(crate) fn cvar_value(index: usize) -> Res<CvarValue> {
    Ok((CVARS[index].value)(&settings()?))
}

/// Elements a handle of control variable `index` reads: 1, or a string's bytes with its NUL.
pub(crate) fn cvar_count(index: usize) -> Res<usize> {
    Ok(match cvar_value(index)? {
        CvarValue::Number(_) => 1,
        CvarValue::Text(t) => t.len() + 1,
    })
}

// ---- Performance variables ------------------------------------------------------------------

/// A performance variable: one of [`Counters`], as MPI_UNSIGNED_LONG_LONG.
pub(crate) struct PvarDef {
    pub(crate) name: &'static str,
    pub(crate) desc: &'static str,
    pub(crate) class: c_int,
    pub(crate) verbosity: c_int,
    /// Always counting (no start/stop); also read-only.
    pub(crate) continuous: bool,
    /// The category it is listed in.
    pub(crate) category: usize,
    pub(crate) value: fn(&Counters) -> u64,
}

pub(crate) const PVARS: &[PvarDef] = &[
    PvarDef {
        name: "ferry_p2p_messages_sent",
        desc: "Messages this rank sent (collectives' and one-sided operations' included).",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_USER_BASIC,
        continuous: false,
        category: CAT_P2P,
        value: |c| c.messages_sent,
    },
    PvarDef {
        name: "ferry_p2p_bytes_sent",
        desc: "Payload bytes of the messages this rank sent.",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_USER_BASIC,
        continuous: false,
        category: CAT_P2P,
        value: |c| c.bytes_sent,
    },
    PvarDef {
        name: "ferry_p2p_eager_sends",
        desc: "Sends that went eagerly (the payload with the envelope).",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        continuous: false,
        category: CAT_P2P,
        value: |c| c.eager_sends,
    },
    PvarDef {
        name: "ferry_p2p_rendezvous_sends",
        desc: "Sends that went by rendezvous (announced, the payload moved once matched).",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        continuous: false,
        category: CAT_P2P,
        value: |c| c.rendezvous_sends,
    },
    PvarDef {
        name: "ferry_p2p_messages_received",
        desc: "Messages that arrived at this rank.",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_USER_BASIC,
        continuous: false,
        category: CAT_P2P,
        value: |c| c.messages_received,
    },
    PvarDef {
        name: "ferry_p2p_bytes_received",
        desc: "Payload bytes of the messages that arrived at this rank.",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_USER_BASIC,
        continuous: false,
        category: CAT_P2P,
        value: |c| c.bytes_received,
    },
    PvarDef {
        name: "ferry_p2p_unexpected_queued",
        desc: "Arrivals no posted receive matched, kept on the unexpected queue.",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        continuous: false,
        category: CAT_P2P,
        value: |c| c.unexpected_queued,
    },
    PvarDef {
        name: "ferry_p2p_unexpected_length",
        desc: "Messages on the unexpected queue now.",
        class: MPI_T_PVAR_CLASS_LEVEL,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        continuous: true,
        category: CAT_P2P,
        value: |c| c.unexpected_now,
    },
    PvarDef {
        name: "ferry_p2p_unexpected_peak",
        desc: "Most messages the unexpected queue has held at once since MPI_Init.",
        class: MPI_T_PVAR_CLASS_HIGHWATERMARK,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        continuous: true,
        category: CAT_P2P,
        value: |c| c.unexpected_peak,
    },
    // Appended after the point-to-point ones, so that their indices stay as they were.
    PvarDef {
        name: "ferry_compress_frames_compressed",
        desc: "TCP payloads (eager messages, rendezvous chunks) this rank sent compressed (FERRY_COMPRESS).",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        continuous: false,
        category: CAT_COMPRESS,
        value: |c| c.frames_compressed,
    },
    PvarDef {
        name: "ferry_compress_bytes_before",
        desc: "Bytes of the payloads this rank sent compressed, before compression.",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        continuous: false,
        category: CAT_COMPRESS,
        value: |c| c.compressed_raw_bytes,
    },
    PvarDef {
        name: "ferry_compress_bytes_after",
        desc: "Bytes of the payloads this rank sent compressed, as sent.",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        continuous: false,
        category: CAT_COMPRESS,
        value: |c| c.compressed_sent_bytes,
    },
    PvarDef {
        name: "ferry_compress_frames_sent_plain",
        desc: "TCP payloads that could have been compressed but went plain: their message's sample, or they themselves, did not shrink by an eighth.",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        continuous: false,
        category: CAT_COMPRESS,
        value: |c| c.frames_sent_raw,
    },
    PvarDef {
        name: "ferry_compress_frames_decompressed",
        desc: "Compressed TCP payloads this rank received.",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        continuous: false,
        category: CAT_COMPRESS,
        value: |c| c.frames_decompressed,
    },
    PvarDef {
        name: "ferry_compress_rate_readings",
        desc: "Readings of a TCP link's delivery rate taken while its socket was full (FERRY_COMPRESS=auto): none means no link ever filled its socket.",
        class: MPI_T_PVAR_CLASS_COUNTER,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        continuous: false,
        category: CAT_COMPRESS,
        value: |c| c.link_rate_readings,
    },
    PvarDef {
        name: "ferry_compress_link_rate",
        desc: "The send rate estimate of the TCP link read last, in Mbit/s (0 before any): auto compresses below FERRY_COMPRESS_BELOW.",
        class: MPI_T_PVAR_CLASS_LEVEL,
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        continuous: true,
        category: CAT_COMPRESS,
        value: |c| c.link_rate_mbit,
    },
];

/// The value a handle shows, given the counters now.
fn pvar_value(h: &PvarHandle, now: &Counters) -> u64 {
    let total = (PVARS[h.index].value)(now);
    if PVARS[h.index].continuous {
        total
    } else if h.started {
        h.held.wrapping_add(total.wrapping_sub(h.base))
    } else {
        h.held
    }
}

// ---- Categories -----------------------------------------------------------------------------

const CAT_TRANSPORT: usize = 1;
const CAT_SHM: usize = 2;
const CAT_TCP: usize = 3;
const CAT_P2P: usize = 4;
const CAT_COMPRESS: usize = 5;
const CAT_COLL: usize = 6;

/// A category (number 0, `ferry`, holds the others): its variables are those whose `category`
/// is its index.
pub(crate) struct CategoryDef {
    pub(crate) name: &'static str,
    pub(crate) desc: &'static str,
    pub(crate) subcategories: &'static [usize],
}

pub(crate) const CATEGORIES: &[CategoryDef] = &[
    CategoryDef {
        name: "ferry",
        desc: "Every variable of ferry, by subsystem.",
        subcategories: &[
            CAT_TRANSPORT,
            CAT_SHM,
            CAT_TCP,
            CAT_P2P,
            CAT_COMPRESS,
            CAT_COLL,
        ],
    },
    CategoryDef {
        name: "ferry_transport",
        desc: "The transport and setup of a job.",
        subcategories: &[],
    },
    CategoryDef {
        name: "ferry_shm",
        desc: "The shared-memory transport: eager limit, rings, CMA copies.",
        subcategories: &[],
    },
    CategoryDef {
        name: "ferry_tcp",
        desc: "The TCP transport and its rails.",
        subcategories: &[],
    },
    CategoryDef {
        name: "ferry_p2p",
        desc:
            "Point-to-point traffic of this rank: messages, bytes, protocols, unexpected arrivals.",
        subcategories: &[],
    },
    CategoryDef {
        name: "ferry_compress",
        desc: "Compression of TCP payloads (FERRY_COMPRESS): payloads and bytes before and after.",
        subcategories: &[],
    },
    CategoryDef {
        name: "ferry_coll",
        desc: "Collectives: the algorithm each call chose (event ferry_collective_algorithm).",
        subcategories: &[],
    },
];

pub(crate) fn category_cvars(cat: usize) -> Vec<usize> {
    (0..CVARS.len())
        .filter(|&i| CVARS[i].category == cat)
        .collect()
}

pub(crate) fn category_pvars(cat: usize) -> Vec<usize> {
    (0..PVARS.len())
        .filter(|&i| PVARS[i].category == cat)
        .collect()
}

/// The variable and element count of control-variable handle `handle`.
pub(crate) fn cvar_handle(handle: Handle) -> Res<(usize, usize)> {
    tool(|t| {
        t.cvars
            .get(handle)
            .map(|h| (h.index, h.count))
            .ok_or_else(|| {
                error(
                    MPI_T_ERR_INVALID_HANDLE,
                    format!("invalid control-variable handle {handle:#x}"),
                )
            })
    })
}

#[cfg(test)]
mod tests;
