//! The process's MPI state: the world, and the tables of every created object.
//!
//! MPI has one library state per process, shared by the threads that call MPI as
//! [`crate::threads`] describes. Borrows of it are short: nothing blocks or calls back into user
//! code while it is borrowed (user operations and error handlers may themselves call MPI).
//! A program that ends without MPI_Finalize leaves its world unfinalized (the state is never
//! dropped): finalizing would wait for ranks that may never come.

use crate::abi::*;
use crate::datatype::Datatype;
use crate::error::{fail, CommErrhandlerFn, MpiError, Res};
use crate::handles::{Kind, Table};
use crate::ops::BuiltinOp;
use crate::request::Request;
use crate::threads::Serialized;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_void};
use std::rc::Rc;
use std::sync::LazyLock;

/// Where the library is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Before MPI_Init.
    Idle,
    /// Between MPI_Init and MPI_Finalize.
    Running,
    /// After MPI_Finalize.
    Finalized,
}

/// A communicator as the C side sees it.
pub(crate) struct CommObj {
    /// The runtime's communicator.
    pub(crate) comm: ferry_core::Comm,
    /// Its error handler (a predefined or created handle).
    pub(crate) errhandler: Handle,
    /// Its name (`MPI_Comm_set_name`).
    pub(crate) name: String,
    /// Cached attributes, in the order they were set.
    pub(crate) attrs: Attrs,
    /// Its process topology (Cartesian, graph or distributed graph), if it has one; MPI_Comm_dup
    /// copies it.
    pub(crate) topo: Option<Rc<crate::topo::Topo>>,
    /// For an intercommunicator: its hidden helper communicators. `comm` then addresses the
    /// remote group (ranks and statuses name remote ranks) while its rank is the local one.
    pub(crate) inter: Option<Inter>,
    /// MPI_Comm_idup calls made on it so far (the same count on every member).
    pub(crate) idups: u32,
}

/// The two communicators behind an intercommunicator, kept in the communicator table under
/// handles the user never sees and freed with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inter {
    /// The local group as an intracommunicator (the local half of collectives, merge, split).
    pub(crate) local: Handle,
    /// The remote group on the intercommunicator's collective context: what intercommunicator
    /// collectives and agreements send on, apart from the user's point-to-point traffic.
    pub(crate) coll: Handle,
    /// Both groups as one intracommunicator (the group whose leader has the lower world rank
    /// first), on a context of its own: nonblocking collectives run their schedules on it.
    pub(crate) union: Handle,
}

/// Attributes cached on an object, in the order they were set (MPI_Finalize deletes those of
/// MPI_COMM_SELF newest first).
#[derive(Debug, Default, Clone)]
pub(crate) struct Attrs(Vec<(c_int, *mut c_void)>);

impl Attrs {
    /// The value for `keyval`.
    pub(crate) fn get(&self, keyval: c_int) -> Option<*mut c_void> {
        self.0.iter().find(|(k, _)| *k == keyval).map(|&(_, v)| v)
    }

    /// Sets `keyval` (as the newest attribute); returns the value it replaces.
    pub(crate) fn insert(&mut self, keyval: c_int, value: *mut c_void) -> Option<*mut c_void> {
        let old = self.remove(keyval);
        self.0.push((keyval, value));
        old
    }

    /// Removes `keyval`; returns its value.
    pub(crate) fn remove(&mut self, keyval: c_int) -> Option<*mut c_void> {
        let i = self.0.iter().position(|(k, _)| *k == keyval)?;
        Some(self.0.remove(i).1)
    }

    /// Every attribute, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (c_int, *mut c_void)> + '_ {
        self.0.iter().copied()
    }

    /// Takes every attribute, newest first.
    pub(crate) fn take_newest_first(&mut self) -> Vec<(c_int, *mut c_void)> {
        let mut v = std::mem::take(&mut self.0);
        v.reverse();
        v
    }
}

/// A group: world ranks in group rank order.
pub(crate) type GroupObj = Rc<[u32]>;

/// A created datatype.
pub(crate) struct TypeObj {
    /// Its type map.
    pub(crate) dt: Datatype,
    /// Whether MPI_Type_commit has been called.
    pub(crate) committed: bool,
    /// `MPI_Type_set_name`.
    pub(crate) name: String,
}

/// `void fn(void *in, void *inout, int *len, MPI_Datatype *type)`.
pub(crate) type UserOpFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);

/// `void fn(void *in, void *inout, MPI_Count *len, MPI_Datatype *type)` (MPI_Op_create_c).
pub(crate) type UserOpFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut Handle);

/// A user reduction function, of either binding.
#[derive(Clone, Copy)]
pub(crate) enum UserFn {
    /// From MPI_Op_create.
    Int(UserOpFn),
    /// From MPI_Op_create_c.
    Count(UserOpFnC),
}

/// A reduction operation.
#[derive(Clone, Copy)]
pub(crate) enum OpObj {
    /// MPI_SUM, MPI_MAX, …
    Builtin(BuiltinOp),
    /// From MPI_Op_create or MPI_Op_create_c.
    User {
        /// The function.
        f: UserFn,
        /// Whether it may be applied in any order.
        commute: bool,
    },
}

/// An attribute key (`MPI_Comm_create_keyval`): copy and delete callbacks as addresses (0 and
/// 1 are the predefined NULL_COPY/DUP and NULL_DELETE functions).
#[derive(Clone, Copy)]
pub(crate) struct Keyval {
    /// Copy callback.
    pub(crate) copy: usize,
    /// Delete callback.
    pub(crate) delete: usize,
    /// Passed to both.
    pub(crate) extra: *mut c_void,
    /// The kind of object whose attributes it keys.
    pub(crate) kind: AttrKind,
}

/// The objects that carry attributes; a keyval created for one kind keys no other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttrKind {
    /// `MPI_Comm_create_keyval` (and MPI-1's `MPI_Keyval_create`).
    Comm,
    /// `MPI_Type_create_keyval`.
    Type,
    /// `MPI_Win_create_keyval`.
    Win,
}

impl AttrKind {
    fn objects(self) -> &'static str {
        match self {
            AttrKind::Comm => "communicators",
            AttrKind::Type => "datatypes",
            AttrKind::Win => "windows",
        }
    }
}

/// `MPI_Info`: ordered key/value strings.
pub(crate) type InfoObj = Vec<(String, String)>;

/// The whole library state.
pub(crate) struct State {
    /// Where we are in the life cycle.
    pub(crate) phase: Phase,
    /// Thread level granted at init.
    pub(crate) thread_level: c_int,
    /// The thread that initialized MPI (MPI_Is_thread_main).
    pub(crate) main_thread: Option<std::thread::ThreadId>,
    /// The job (set between init and finalize).
    pub(crate) world: Option<ferry_core::World>,
    /// MPI_COMM_WORLD and MPI_COMM_SELF.
    pub(crate) predefined_comms: Vec<CommObj>,
    /// Created communicators.
    pub(crate) comms: Table<CommObj>,
    /// Created groups.
    pub(crate) groups: Table<GroupObj>,
    /// Created datatypes.
    pub(crate) types: Table<TypeObj>,
    /// The predefined datatypes, built on first use, by handle from [`PREDEFINED_TYPES`].
    pub(crate) builtin_types: Vec<Option<Datatype>>,
    /// Created operations.
    pub(crate) ops: Table<OpObj>,
    /// Pending and persistent requests.
    pub(crate) requests: Table<Request>,
    /// Created error handlers.
    pub(crate) errhandlers: Table<CommErrhandlerFn>,
    /// Info objects.
    pub(crate) infos: Table<InfoObj>,
    /// MPI_INFO_ENV, filled on first use.
    pub(crate) info_env: InfoObj,
    /// Messages taken by a matched probe: (communicator, its runtime side, the message).
    pub(crate) messages: Table<(Handle, ferry_core::Comm, ferry_core::raw::RawMessage)>,
    /// Attribute keys by keyval (index + KEYVAL_BASE).
    pub(crate) keyvals: Vec<Option<Keyval>>,
    /// Codes added by MPI_Add_error_class/_code (from MPI_ERR_LASTCODE + 1): class and text;
    /// `None` once MPI_Remove_error_class/_code removed it (codes are not reused).
    pub(crate) user_errors: Vec<Option<(c_int, String)>>,
    /// Names given to predefined datatypes with MPI_Type_set_name.
    pub(crate) builtin_names: HashMap<Handle, String>,
    /// Attributes of datatypes, by datatype handle and keyval.
    pub(crate) type_attrs: HashMap<Handle, BTreeMap<c_int, *mut c_void>>,
    /// Attached buffers of buffered sends: the process's, communicators' and sessions'.
    pub(crate) bsend_buffers: HashMap<crate::bsend::BufferOwner, crate::bsend::Attached>,
    /// Buffered sends not yet complete: (request, bytes reserved, whose buffer they draw on).
    pub(crate) bsends: Vec<(Request, usize, crate::bsend::BufferOwner)>,
    /// MPI_Abi_set_fortran_info: the Fortran facts a Fortran layer gave (key, value).
    pub(crate) fortran_info: Option<Vec<(String, String)>>,
    /// MPI_Abi_set_fortran_booleans: (.TRUE., .FALSE.) bits by LOGICAL size in bytes.
    pub(crate) fortran_booleans: HashMap<usize, (Vec<u8>, Vec<u8>)>,
    /// The session each group from MPI_Group_from_session_pset belongs to.
    pub(crate) group_sessions: HashMap<Handle, Handle>,
    /// The session each communicator from MPI_Comm_create_from_group belongs to.
    pub(crate) comm_sessions: HashMap<Handle, Handle>,
    /// First pairs of the slots MPI_Comm_idup derived that are in use here (see `comm::idup`).
    pub(crate) derived_pairs: std::collections::HashSet<u32>,
    /// Open sessions (`MPI_Session_init`): the error handler each was given.
    pub(crate) sessions: Table<Handle>,
    /// MPI_Init was called and MPI_Finalize not yet (the runtime may also run for sessions).
    pub(crate) world_model: bool,
    /// MPI_Finalize was called (the runtime may still run for sessions).
    pub(crate) world_finalized: bool,
    /// Created datatypes and operations persistent collectives use: how many requests hold
    /// each, and whether the program has freed its handle (then the last request frees it).
    pub(crate) pins: HashMap<Handle, (usize, bool)>,
    /// Open files (`MPI_File`).
    pub(crate) files: Table<Rc<crate::io::FileObj>>,
    /// The error handler of MPI_FILE_NULL: what MPI_File_open and MPI_File_delete use, and what
    /// a new file starts with (MPI_ERRORS_RETURN until the program sets another).
    pub(crate) file_null_errhandler: Handle,
    /// Data representations registered with MPI_Register_datarep (for the life of the process).
    pub(crate) datareps: Vec<Rc<crate::datarep::UserDatarep>>,
    /// Windows (one-sided communication).
    pub(crate) wins: Table<crate::rma::window::WinObj>,
    /// The types `MPI_Type_create_f90_*` returned, by (combiner, p, r): the same arguments give
    /// the same handle, and the program may not free it.
    pub(crate) f90_types: HashMap<(c_int, c_int, c_int), Handle>,
    /// Partitioned communication's channels (see `crate::part`).
    pub(crate) part_channels: crate::part::Channels,
    /// The hidden communicator generalized requests complete on (0 until the first).
    pub(crate) greq_channel: Handle,
    /// The tag of the next generalized request.
    pub(crate) greq_next_tag: c_int,
    /// The hidden communicator that port connections meet on (see `crate::dynamic`).
    pub(crate) meeting: Option<ferry_core::Comm>,
    /// Ports this process has open, by number.
    pub(crate) open_ports: std::collections::BTreeSet<c_int>,
    /// The number of the next port this process opens.
    pub(crate) next_port: c_int,
    /// MPI_Comm_get_parent's intercommunicator (MPI_COMM_NULL if not spawned).
    pub(crate) parent: Handle,
    /// Reductions of predefined operations on predefined types, made once each (see
    /// `coll::lean`).
    pub(crate) builtin_reducers: Vec<(crate::ops::CheckedOp, ferry_core::Reducer)>,
}

/// Created keyvals are numbered from here (above the predefined ones, 501… and 601…).
pub(crate) const KEYVAL_BASE: c_int = 1000;

/// The process's MPI state (see the module doc).
pub(crate) static STATE: LazyLock<Serialized<State>> =
    LazyLock::new(|| Serialized::new(State::new()));

/// The handles of the predefined datatypes (and the markers MPI_LB, MPI_UB) in the standard ABI.
pub(crate) const PREDEFINED_TYPES: std::ops::Range<Handle> = 0x200..0x300;

/// Whether MPI runs (initialized, not finalized): mirrors `State::phase` for the calls that
/// answer without entering the state.
static RUNNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether MPI is initialized and not finalized, without entering the state.
pub(crate) fn is_running() -> bool {
    RUNNING.load(std::sync::atomic::Ordering::Acquire)
}

/// Runs `f` on the state. Not reentrant: `f` must not call back into MPI or user code.
#[inline]
pub(crate) fn with<T>(f: impl FnOnce(&mut State) -> Res<T>) -> Res<T> {
    STATE.with(f).unwrap_or_else(|| {
        fail(
            MPI_ERR_OTHER,
            "MPI called from inside an MPI callback in a way ferry does not support",
        )
    })
}

/// Runs `f` on the state after checking MPI is initialized and not finalized.
#[inline]
pub(crate) fn running<T>(f: impl FnOnce(&mut State) -> Res<T>) -> Res<T> {
    with(|s| {
        match s.phase {
            Phase::Running => {}
            Phase::Idle => return fail(MPI_ERR_OTHER, "called before MPI_Init"),
            Phase::Finalized => return fail(MPI_ERR_OTHER, "called after MPI_Finalize"),
        }
        f(s)
    })
}

impl State {
    /// Moves MPI to `phase`.
    pub(crate) fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
        RUNNING.store(
            phase == Phase::Running,
            std::sync::atomic::Ordering::Release,
        );
    }

    /// The live keyval `keyval`, created for objects of `kind`.
    pub(crate) fn keyval(&self, keyval: c_int, kind: AttrKind) -> Res<Keyval> {
        let found = usize::try_from(keyval - KEYVAL_BASE)
            .ok()
            .and_then(|i| self.keyvals.get(i).copied().flatten());
        match found {
            Some(k) if k.kind == kind => Ok(k),
            Some(k) => fail(
                MPI_ERR_KEYVAL,
                format!(
                    "keyval {keyval} was created for {}, not {}",
                    k.kind.objects(),
                    kind.objects()
                ),
            ),
            None => fail(MPI_ERR_KEYVAL, format!("invalid keyval {keyval}")),
        }
    }

    fn new() -> State {
        State {
            phase: Phase::Idle,
            thread_level: MPI_THREAD_FUNNELED,
            main_thread: None,
            world: None,
            predefined_comms: Vec::new(),
            comms: Table::new(Kind::Comm),
            groups: Table::new(Kind::Group),
            types: Table::new(Kind::Datatype),
            builtin_types: vec![None; PREDEFINED_TYPES.len()],
            ops: Table::new(Kind::Op),
            requests: Table::new(Kind::Request),
            errhandlers: Table::new(Kind::Errhandler),
            infos: Table::new(Kind::Info),
            info_env: Vec::new(),
            messages: Table::new(Kind::Message),
            keyvals: Vec::new(),
            user_errors: Vec::new(),
            builtin_names: HashMap::new(),
            type_attrs: HashMap::new(),
            bsend_buffers: HashMap::new(),
            group_sessions: HashMap::new(),
            fortran_info: None,
            fortran_booleans: HashMap::new(),
            comm_sessions: HashMap::new(),
            bsends: Vec::new(),
            derived_pairs: Default::default(),
            sessions: Table::new(Kind::Session),
            world_model: false,
            world_finalized: false,
            pins: HashMap::new(),
            files: Table::new(Kind::File),
            file_null_errhandler: MPI_ERRORS_RETURN,
            datareps: Vec::new(),
            wins: Table::new(Kind::Win),
            f90_types: HashMap::new(),
            part_channels: Default::default(),
            greq_channel: 0,
            greq_next_tag: 0,
            meeting: None,
            open_ports: Default::default(),
            parent: MPI_COMM_NULL,
            next_port: 0,
            builtin_reducers: Vec::new(),
        }
    }

    /// This process's world rank, once initialized.
    pub(crate) fn world_rank(&self) -> Option<usize> {
        self.world.as_ref().map(|w| w.rank())
    }

    /// The communicator behind `handle`.
    #[inline]
    pub(crate) fn comm(&self, handle: Handle) -> Res<&CommObj> {
        let obj = match handle {
            MPI_COMM_WORLD => self.predefined_comms.first(),
            MPI_COMM_SELF => self.predefined_comms.get(1),
            MPI_COMM_NULL => return fail(MPI_ERR_COMM, "MPI_COMM_NULL is not a communicator"),
            h => self.comms.get(h),
        };
        obj.ok_or_else(|| MpiError::new(MPI_ERR_COMM, format!("invalid communicator {handle:#x}")))
    }

    /// The communicator behind `handle`, mutably.
    pub(crate) fn comm_mut(&mut self, handle: Handle) -> Res<&mut CommObj> {
        let obj = match handle {
            MPI_COMM_WORLD => self.predefined_comms.first_mut(),
            MPI_COMM_SELF => self.predefined_comms.get_mut(1),
            MPI_COMM_NULL => return fail(MPI_ERR_COMM, "MPI_COMM_NULL is not a communicator"),
            h => self.comms.get_mut(h),
        };
        obj.ok_or_else(|| MpiError::new(MPI_ERR_COMM, format!("invalid communicator {handle:#x}")))
    }

    /// The helpers of `handle` if it is an intercommunicator.
    pub(crate) fn inter(&self, handle: Handle) -> Res<Option<Inter>> {
        self.comm(handle).map(|c| c.inter)
    }

    /// The runtime communicator behind `handle`, which must be an intracommunicator.
    pub(crate) fn intra_comm(&self, handle: Handle) -> Res<ferry_core::Comm> {
        let c = self.comm(handle)?;
        if c.inter.is_some() {
            return fail(
                MPI_ERR_COMM,
                "this call needs an intracommunicator, not an intercommunicator",
            );
        }
        Ok(c.comm.clone())
    }

    /// Number of ranks in the local group of `handle`.
    pub(crate) fn local_size(&self, handle: Handle) -> Res<usize> {
        match self.inter(handle)? {
            Some(i) => Ok(self.comm(i.local)?.comm.size()),
            None => Ok(self.comm(handle)?.comm.size()),
        }
    }

    /// World ranks of the local group of `handle`.
    pub(crate) fn local_group(&self, handle: Handle) -> Res<GroupObj> {
        let c = match self.inter(handle)? {
            Some(i) => self.comm(i.local)?,
            None => self.comm(handle)?,
        };
        Ok(c.comm.world_ranks().into())
    }

    /// A clone of the runtime communicator behind `handle` (cheap: reference counted).
    #[inline]
    pub(crate) fn core_comm(&self, handle: Handle) -> Res<ferry_core::Comm> {
        self.comm(handle).map(|c| c.comm.clone())
    }

    /// The error handler that applies to `comm` (MPI_COMM_WORLD's when `comm` is not one); a
    /// session's for a session.
    pub(crate) fn errhandler_of(&self, comm: Handle) -> Handle {
        if let Some(&h) = self.sessions.get(comm) {
            return if h == MPI_ERRHANDLER_NULL {
                MPI_ERRORS_ARE_FATAL
            } else {
                h
            };
        }
        if let Some(w) = self.wins.get(comm) {
            return w.errhandler;
        }
        self.comm(comm)
            .or_else(|_| self.comm(MPI_COMM_WORLD))
            .map_or(MPI_ERRORS_ARE_FATAL, |c| c.errhandler)
    }

    /// The function of a created error handler.
    pub(crate) fn user_errhandler(&self, handle: Handle) -> Option<CommErrhandlerFn> {
        self.errhandlers.get(handle).copied()
    }

    /// The group behind `handle`.
    pub(crate) fn group(&self, handle: Handle) -> Res<GroupObj> {
        match handle {
            MPI_GROUP_EMPTY => Ok(Rc::from(Vec::new())),
            MPI_GROUP_NULL => fail(MPI_ERR_GROUP, "MPI_GROUP_NULL is not a group"),
            h => self
                .groups
                .get(h)
                .cloned()
                .ok_or_else(|| MpiError::new(MPI_ERR_GROUP, format!("invalid group {h:#x}"))),
        }
    }

    /// The datatype behind `handle`, committed or not (for constructors and queries).
    pub(crate) fn datatype(&mut self, handle: Handle) -> Res<Datatype> {
        if handle == MPI_DATATYPE_NULL {
            return fail(MPI_ERR_TYPE, "MPI_DATATYPE_NULL is not a datatype");
        }
        if let Some(slot) = handle
            .checked_sub(PREDEFINED_TYPES.start)
            .and_then(|i| self.builtin_types.get_mut(i))
        {
            if let Some(dt) = slot {
                return Ok(dt.clone());
            }
            if let Some(dt) = Datatype::from_handle(handle) {
                *slot = Some(dt.clone());
                return Ok(dt);
            }
        }
        match self.types.get(handle) {
            Some(obj) => Ok(obj.dt.clone()),
            None => fail(MPI_ERR_TYPE, format!("invalid datatype {handle:#x}")),
        }
    }

    /// The datatype behind `handle`, which must be committed (for communication).
    pub(crate) fn committed_type(&mut self, handle: Handle) -> Res<Datatype> {
        if let Some(obj) = self.types.get(handle) {
            if !obj.committed {
                return fail(
                    MPI_ERR_TYPE,
                    format!("datatype {handle:#x} is used before MPI_Type_commit"),
                );
            }
            return Ok(obj.dt.clone());
        }
        self.datatype(handle)
    }

    /// The operation behind `handle`.
    pub(crate) fn op(&self, handle: Handle) -> Res<OpObj> {
        if let Some(op) = BuiltinOp::from_handle(handle) {
            return Ok(OpObj::Builtin(op));
        }
        self.ops
            .get(handle)
            .copied()
            .ok_or_else(|| MpiError::new(MPI_ERR_OP, format!("invalid operation {handle:#x}")))
    }

    /// The runtime communicator used to drive progress (the world's).
    pub(crate) fn engine(&self) -> Res<ferry_core::Comm> {
        self.core_comm(MPI_COMM_WORLD)
    }
}

/// Ends the job: prints `message` and stops every rank through the launcher.
pub(crate) fn fatal(message: &str) -> ! {
    eprintln!("ferry: {message}");
    STATE.try_with(|s| {
        if let Some(world) = &s.world {
            world.abort(1, message);
        }
    });
    crate::error::exit_now(1)
}
