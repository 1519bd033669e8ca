//! MPI_T events (MPI 4.1 §15.3.8): the event types ferry's runtime raises
//! ([`ferry_core::events`]), one source (this process's clock), registrations and their
//! callbacks.
//!
//! A registration makes its event type's sources record events (one relaxed load each
//! otherwise). The events recorded during an MPI call are handed to the callbacks when the
//! outermost MPI call of the thread returns ([`CallScope`]), outside ferry's locks and state:
//! the context asks nothing of a callback (MPI_T_CB_REQUIRE_NONE), so each registration's
//! callback of the least restrictive safety level runs, and is told MPI_T_CB_REQUIRE_NONE. It
//! may call MPI_T_event_read and the other instance calls, and any MPI call.

use super::{enum_handle, CAT_COLL, CAT_P2P, CAT_TCP, CAT_TRANSPORT, TOOL};
use super::{error, put, put_string, tool, Tool, ENUM_ALGORITHM, ENUM_PATH, ENUM_ROUTE};
use crate::abi::*;
use crate::datatype::Builtin;
use crate::error::{fail, Res};
use crate::handles::Kind;
use ferry_core::events::{self as runtime, EventType, Raised, EVENT_TYPES};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void};

/// `MPI_T_cb_safety` (mpi.h), least restrictive first.
pub(crate) const MPI_T_CB_REQUIRE_NONE: c_int = 0;
pub(crate) const MPI_T_CB_REQUIRE_MPI_RESTRICTED: c_int = 3;
pub(crate) const MPI_T_CB_REQUIRE_THREAD_SAFE: c_int = 15;
pub(crate) const MPI_T_CB_REQUIRE_ASYNC_SIGNAL_SAFE: c_int = 63;
const SAFETY_LEVELS: [c_int; 4] = [
    MPI_T_CB_REQUIRE_NONE,
    MPI_T_CB_REQUIRE_MPI_RESTRICTED,
    MPI_T_CB_REQUIRE_THREAD_SAFE,
    MPI_T_CB_REQUIRE_ASYNC_SIGNAL_SAFE,
];
/// `MPI_T_source_order` (mpi.h).
pub(crate) const MPI_T_SOURCE_ORDERED: c_int = 1;

/// `void fn(MPI_T_event_instance, MPI_T_event_registration, MPI_T_cb_safety, void *)`.
pub(crate) type EventCallback = Option<unsafe extern "C" fn(Handle, Handle, c_int, *mut c_void)>;
/// `void fn(MPI_T_event_registration, MPI_T_cb_safety, void *)`.
pub(crate) type EventFreeCallback = Option<unsafe extern "C" fn(Handle, c_int, *mut c_void)>;
/// `void fn(MPI_Count, MPI_T_event_registration, int, MPI_T_cb_safety, void *)`.
pub(crate) type EventDroppedCallback =
    Option<unsafe extern "C" fn(i64, Handle, c_int, c_int, *mut c_void)>;

// ---- Event types and the source ---------------------------------------------------------------

/// How an element is typed in C.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Element {
    /// `int` (MPI_INT).
    Int,
    /// `MPI_Count` (MPI_COUNT, 8 bytes).
    Count,
}

impl Element {
    fn size(self) -> usize {
        match self {
            Element::Int => 4,
            Element::Count => 8,
        }
    }

    pub(crate) fn datatype(self) -> Handle {
        match self {
            Element::Int => Builtin::Int as Handle,
            Element::Count => Builtin::Count as Handle,
        }
    }
}

/// An event type: one of [`EventType`], with its elements laid out as a C struct of theirs.
pub(crate) struct EventDef {
    pub(crate) name: &'static str,
    pub(crate) desc: &'static str,
    pub(crate) verbosity: c_int,
    pub(crate) kind: EventType,
    /// The elements, in the order of [`Raised::elements`].
    pub(crate) elements: &'static [Element],
    /// The enumeration of its enumerated elements (an index into `super::ENUMS`).
    pub(crate) enumeration: Option<usize>,
    pub(crate) category: usize,
}

use Element::{Count, Int};

pub(crate) const EVENTS: &[EventDef] = &[
    EventDef {
        name: "ferry_unexpected_message",
        desc: "A message arrived with no matching receive posted. Elements: source (int, the sender's rank in MPI_COMM_WORLD), tag (int), context (int, the communicator's context id), bytes (MPI_Count).",
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        kind: EventType::UnexpectedMessage,
        elements: &[Int, Int, Int, Count],
        enumeration: None,
        category: CAT_P2P,
    },
    EventDef {
        name: "ferry_rendezvous_start",
        desc: "A send began a rendezvous (too large to go eagerly, or synchronous). Elements: peer (int, the receiver's rank in MPI_COMM_WORLD), tag (int), bytes (MPI_Count), route (int, ferry_rendezvous_route: self, shm_cma, shm_copy, tcp, fabric_read).",
        verbosity: MPI_T_VERBOSITY_TUNER_DETAIL,
        kind: EventType::RendezvousStart,
        elements: &[Int, Int, Count, Int],
        enumeration: Some(ENUM_ROUTE),
        category: CAT_P2P,
    },
    EventDef {
        name: "ferry_path_change",
        desc: "The path to a peer was set up (at MPI_Init) or changed. Elements: peer (int, rank in MPI_COMM_WORLD), from and to (int, ferry_path: none, self, shm, direct, nat, relay, punched, fabric).",
        verbosity: MPI_T_VERBOSITY_USER_DETAIL,
        kind: EventType::PathChange,
        elements: &[Int, Int, Int],
        enumeration: Some(ENUM_PATH),
        category: CAT_TRANSPORT,
    },
    EventDef {
        name: "ferry_rail_failover",
        desc: "A TCP rail to a peer (direct or through a relay) failed, and what it carried goes on the others. Elements: peer (int, rank in MPI_COMM_WORLD), rail (int, the one that failed), rails_left (int; 0: the peer is lost), here (int, 1 when this rank saw the failure, 0 when the peer reported it).",
        verbosity: MPI_T_VERBOSITY_USER_BASIC,
        kind: EventType::RailFailover,
        elements: &[Int, Int, Int, Int],
        enumeration: None,
        category: CAT_TCP,
    },
    EventDef {
        name: "ferry_collective_algorithm",
        desc: "The selection table chose a collective's algorithm (once per distinct call on a communicator: repeated calls reuse the plan). Elements: collective (int: 0 barrier, 1 bcast, 2 reduce, 3 allreduce, 4 gather, 5 allgather, 6 alltoall), algorithm (int, ferry_coll_algorithm), ranks (int, the communicator's size), bytes (MPI_Count, per rank for gathers and alltoall).",
        verbosity: MPI_T_VERBOSITY_TUNER_BASIC,
        kind: EventType::CollectiveAlgorithm,
        elements: &[Int, Int, Int, Count],
        enumeration: Some(ENUM_ALGORITHM),
        category: CAT_COLL,
    },
];

/// The displacements of an event type's elements: as a C compiler lays out a struct of them.
pub(crate) fn displacements(def: &EventDef) -> Vec<isize> {
    let mut at = 0usize;
    def.elements
        .iter()
        .map(|e| {
            at = at.next_multiple_of(e.size());
            let here = at;
            at += e.size();
            here as isize
        })
        .collect()
}

/// The event types of category `cat`.
pub(crate) fn category_events(cat: usize) -> Vec<usize> {
    (0..EVENTS.len())
        .filter(|&i| EVENTS[i].category == cat)
        .collect()
}

/// The one source: this process's clock.
pub(crate) const SOURCE_NAME: &str = "ferry_clock";
pub(crate) const SOURCE_DESC: &str = "This process's monotonic clock, in nanoseconds since its first reading; every ferry event comes from it, in the order raised.";
pub(crate) const TICKS_PER_SECOND: i64 = 1_000_000_000;

/// The enumeration of event type `def`'s enumerated elements (MPI_T_ENUM_NULL for none).
pub(crate) fn event_enum(def: &EventDef) -> Handle {
    def.enumeration.map_or(MPI_T_ENUM_NULL, enum_handle)
}

// ---- Registrations ----------------------------------------------------------------------------

/// A callback and the data it is called with.
#[derive(Clone, Copy)]
pub(crate) struct Callback {
    function: unsafe extern "C" fn(Handle, Handle, c_int, *mut c_void),
    user_data: *mut c_void,
}

/// An `MPI_T_event_registration`.
pub(crate) struct Registration {
    pub(crate) event: usize,
    /// Per safety level (in [`SAFETY_LEVELS`] order).
    callbacks: [Option<Callback>; 4],
    dropped: EventDroppedCallback,
    /// Events of its type dropped when it was allocated or last told of drops.
    dropped_seen: u64,
}

/// A registration freed while callbacks may still run, and its free callback.
pub(crate) struct Freed {
    handle: Handle,
    callback: EventFreeCallback,
    user_data: *mut c_void,
}

/// The place of `cb_safety` in [`SAFETY_LEVELS`].
fn safety_arg(cb_safety: c_int) -> Res<usize> {
    SAFETY_LEVELS
        .iter()
        .position(|&s| s == cb_safety)
        .ok_or_else(|| {
            error(
                MPI_T_ERR_INVALID,
                format!("no callback safety level {cb_safety}"),
            )
        })
}

fn registration(t: &mut Tool, handle: Handle) -> Res<&mut Registration> {
    t.events.get_mut(handle).ok_or_else(|| {
        error(
            MPI_T_ERR_INVALID_HANDLE,
            format!("invalid event registration {handle:#x}"),
        )
    })
}

/// MPI_T_event_handle_alloc: a registration of event type `event`.
pub(crate) fn alloc(event: usize) -> Res<Handle> {
    let kind = EVENTS[event].kind;
    let dropped = runtime::dropped();
    let handle = tool(|t| {
        Ok(t.events.insert(Registration {
            event,
            callbacks: [None; 4],
            dropped: None,
            dropped_seen: dropped[kind as usize],
        }))
    })?;
    runtime::listen(kind, true);
    Ok(handle)
}

/// Checks that `handle` is a registration.
pub(crate) fn check_registration(handle: Handle) -> Res {
    tool(|t| registration(t, handle).map(|_| ()))
}

/// MPI_T_event_register_callback: sets (or, with no function, removes) the callback of a level.
pub(crate) fn register(
    handle: Handle,
    cb_safety: c_int,
    user_data: *mut c_void,
    f: EventCallback,
) -> Res {
    let level = safety_arg(cb_safety)?;
    tool(|t| {
        let r = registration(t, handle)?;
        r.callbacks[level] = f.map(|function| Callback {
            function,
            user_data,
        });
        Ok(())
    })
}

/// Checks a registration and a safety level (MPI_T_event_callback_set_info/_get_info).
pub(crate) fn check_callback(handle: Handle, cb_safety: c_int) -> Res {
    safety_arg(cb_safety)?;
    check_registration(handle)
}

/// MPI_T_event_set_dropped_handler.
pub(crate) fn set_dropped(handle: Handle, f: EventDroppedCallback) -> Res {
    tool(|t| {
        registration(t, handle)?.dropped = f;
        Ok(())
    })
}

/// MPI_T_event_handle_free: the registration goes now; its free callback runs once no callback
/// of it can run any more (at once, or when the callbacks running now return).
pub(crate) fn free(handle: Handle, user_data: *mut c_void, callback: EventFreeCallback) -> Res {
    let run_now = tool(|t| {
        let r = t.events.remove(handle).ok_or_else(|| {
            error(
                MPI_T_ERR_INVALID_HANDLE,
                format!("invalid event registration {handle:#x}"),
            )
        })?;
        runtime::listen(EVENTS[r.event].kind, false);
        let freed = Freed {
            handle,
            callback,
            user_data,
        };
        if t.delivering > 0 {
            t.freed.push(freed);
            return Ok(None);
        }
        Ok(Some(freed))
    })?;
    if let Some(freed) = run_now {
        run_free_callback(freed);
    }
    Ok(())
}

fn run_free_callback(freed: Freed) {
    if let Some(f) = freed.callback {
        // SAFETY: the program passed `f` to MPI_T_event_handle_free, whose contract is this
        // signature, with `user_data` for it.
        unsafe { f(freed.handle, MPI_T_CB_REQUIRE_NONE, freed.user_data) };
    }
}

/// The last MPI_T_finalize: every registration goes, without callbacks.
pub(crate) fn forget_all(t: &mut Tool) {
    for h in t.events.handles() {
        if let Some(r) = t.events.remove(h) {
            runtime::listen(EVENTS[r.event].kind, false);
        }
    }
}

// ---- Delivery ---------------------------------------------------------------------------------

thread_local! {
    /// MPI calls this thread is inside (a callback of one may call another).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Whether this thread is handing events to callbacks now.
    static DELIVERING: Cell<bool> = const { Cell::new(false) };
    /// The event instance whose callback runs now on this thread, and its handle.
    static CURRENT: RefCell<Option<(Handle, Raised)>> = const { RefCell::new(None) };
    /// Instances handed out on this thread, for their handles.
    static INSTANCES: Cell<u32> = const { Cell::new(0) };
}

/// One MPI call of an entry guard: when the thread's outermost call ends and events wait,
/// they are handed to their callbacks.
#[must_use]
pub(crate) struct CallScope(bool);

impl CallScope {
    /// Counts the call only while some registration listens: other jobs pay one load.
    #[inline(always)]
    pub(crate) fn enter() -> CallScope {
        if !runtime::listening_any() {
            return CallScope(false);
        }
        DEPTH.with(|d| d.set(d.get() + 1));
        CallScope(true)
    }
}

impl CallScope {
    /// The call ends (its error handled): at the outermost, waiting events are delivered. No
    /// `Drop`: the guards catch every panic, and a drop would cost each call a landing pad.
    #[inline(always)]
    pub(crate) fn leave(self) {
        if !self.0 {
            return;
        }
        let outermost = DEPTH.with(|d| {
            let n = d.get().saturating_sub(1);
            d.set(n);
            n == 0
        });
        if outermost && runtime::pending() {
            deliver();
        }
    }
}

/// What delivering one event to one registration needs, taken out of the state.
struct Target {
    handle: Handle,
    callback: Callback,
    /// Dropped events to report first.
    dropped: Option<(
        i64,
        unsafe extern "C" fn(i64, Handle, c_int, c_int, *mut c_void),
    )>,
}

/// The registrations of `kind` that have a callback, with the drops to report to them.
fn targets(t: &mut Tool, kind: EventType, dropped: &[u64; EVENT_TYPES]) -> Vec<Target> {
    let total = dropped[kind as usize];
    let mut out = Vec::new();
    for handle in t.events.handles() {
        let Some(r) = t.events.get_mut(handle) else {
            continue;
        };
        if EVENTS[r.event].kind != kind {
            continue;
        }
        let Some(callback) = r.callbacks.iter().flatten().next().copied() else {
            continue;
        };
        let mut report = None;
        if let Some(f) = r.dropped.filter(|_| total > r.dropped_seen) {
            report = Some(((total - r.dropped_seen) as i64, f));
            r.dropped_seen = total;
        }
        out.push(Target {
            handle,
            callback,
            dropped: report,
        });
    }
    out
}

/// Hands the events recorded so far to their registrations' callbacks.
#[cold]
#[inline(never)]
fn deliver() {
    if DELIVERING.with(|d| d.replace(true)) {
        return;
    }
    let (raised, dropped) = runtime::take();
    if TOOL.with(|t| t.delivering += 1).is_none() {
        DELIVERING.with(|d| d.set(false));
        return;
    }
    for event in raised {
        let chosen = TOOL
            .with(|t| targets(t, event.kind, &dropped))
            .unwrap_or_default();
        for target in chosen {
            // A callback before may have freed this registration.
            if TOOL.with(|t| t.events.get(target.handle).is_some()) != Some(true) {
                continue;
            }
            call(&target, event);
        }
    }
    // Drops of types no event of which came in this batch are reported with the next one.
    let freed = TOOL
        .with(|t| {
            t.delivering -= 1;
            if t.delivering == 0 {
                std::mem::take(&mut t.freed)
            } else {
                Vec::new()
            }
        })
        .unwrap_or_default();
    for f in freed {
        run_free_callback(f);
    }
    DELIVERING.with(|d| d.set(false));
}

/// Runs one registration's callback for `event` (after its dropped handler, if events of its
/// type were dropped since it last heard).
fn call(target: &Target, event: Raised) {
    let Callback {
        function,
        user_data,
    } = target.callback;
    if let Some((count, f)) = target.dropped {
        // SAFETY: the program set `f` with MPI_T_event_set_dropped_handler, whose contract is
        // this signature; the user data is that of the callback chosen, as for the callback.
        unsafe { f(count, target.handle, 0, MPI_T_CB_REQUIRE_NONE, user_data) };
    }
    let serial = INSTANCES.with(|n| {
        let next = n.get().wrapping_add(1);
        n.set(next);
        next
    });
    let instance = ((Kind::ToolEventInstance as usize) << 56) | serial as usize;
    CURRENT.with(|c| *c.borrow_mut() = Some((instance, event)));
    // SAFETY: the program registered `function` with MPI_T_event_register_callback, whose
    // contract is this signature, with `user_data` for it.
    unsafe { function(instance, target.handle, MPI_T_CB_REQUIRE_NONE, user_data) };
    CURRENT.with(|c| *c.borrow_mut() = None);
}

// ---- Instances --------------------------------------------------------------------------------

/// The event behind `instance`, which is only valid inside its callback.
pub(crate) fn instance(instance: Handle) -> Res<Raised> {
    tool(|_| Ok(()))?;
    CURRENT
        .with(|c| *c.borrow())
        .filter(|&(h, _)| h == instance)
        .map(|(_, e)| e)
        .ok_or_else(|| {
            error(
                MPI_T_ERR_INVALID_HANDLE,
                format!("invalid event instance {instance:#x} (valid only inside its callback)"),
            )
        })
}

/// The definition of `event`'s type.
pub(crate) fn def_of(event: &Raised) -> &'static EventDef {
    // Every EventType has its definition (a unit test checks).
    EVENTS
        .iter()
        .find(|d| d.kind == event.kind)
        .unwrap_or(&EVENTS[0])
}

/// Writes element `index` of `event` at `buf`, in its C type.
///
/// # Safety
/// `buf` is valid for the element's size.
pub(crate) unsafe fn write_element(event: &Raised, index: usize, buf: *mut u8) {
    let value = event.elements[index];
    // SAFETY: as the function's contract says; unaligned writes, as the buffer is the
    // program's.
    unsafe {
        match def_of(event).elements[index] {
            Element::Int => std::ptr::write_unaligned(buf as *mut c_int, value as c_int),
            Element::Count => std::ptr::write_unaligned(buf as *mut i64, value),
        }
    }
}

/// MPI_T_event_read.
pub(crate) unsafe fn read(handle: Handle, element: c_int, buf: *mut c_void) -> Res {
    let event = instance(handle)?;
    let def = def_of(&event);
    let index = super::index_arg(element, def.elements.len(), "element")?;
    if buf.is_null() {
        return fail(MPI_T_ERR_INVALID, "buffer is NULL");
    }
    // SAFETY: the caller passes a buffer for the element's datatype (MPI_T_event_get_info).
    unsafe { write_element(&event, index, buf as *mut u8) };
    Ok(())
}

/// MPI_T_event_copy: every element at its displacement.
pub(crate) unsafe fn copy(handle: Handle, buf: *mut c_void) -> Res {
    let event = instance(handle)?;
    if buf.is_null() {
        return fail(MPI_T_ERR_INVALID, "buffer is NULL");
    }
    for (i, at) in displacements(def_of(&event)).into_iter().enumerate() {
        // SAFETY: the caller passes a buffer that holds the whole event, laid out as the
        // displacements say.
        unsafe { write_element(&event, i, (buf as *mut u8).offset(at)) };
    }
    Ok(())
}

/// MPI_T_event_get_info's outputs.
pub(crate) struct InfoOut {
    pub(crate) name: *mut c_char,
    pub(crate) name_len: *mut c_int,
    pub(crate) verbosity: *mut c_int,
    pub(crate) datatypes: *mut Handle,
    pub(crate) displacements: *mut isize,
    pub(crate) num_elements: *mut c_int,
    pub(crate) enumtype: *mut Handle,
    pub(crate) info: *mut Handle,
    pub(crate) desc: *mut c_char,
    pub(crate) desc_len: *mut c_int,
    pub(crate) bind: *mut c_int,
}

/// MPI_T_event_get_info: `num_elements` says on entry how long the arrays are (NULL arrays are
/// not written), on return how many elements there are.
pub(crate) unsafe fn get_info(index: c_int, out: InfoOut) -> Res {
    tool(|_| Ok(()))?;
    let def = &EVENTS[super::index_arg(index, EVENTS.len(), "event type")?];
    // SAFETY: every pointer is NULL or valid for what the standard says of it.
    unsafe {
        put_string(def.name, out.name, out.name_len);
        put(out.verbosity, def.verbosity);
        if let Some(n) = out.num_elements.as_mut() {
            let room = usize::try_from(*n).unwrap_or(0).min(def.elements.len());
            let laid_out = def.elements.iter().zip(displacements(def));
            for (i, (element, at)) in laid_out.take(room).enumerate() {
                if !out.datatypes.is_null() {
                    *out.datatypes.add(i) = element.datatype();
                }
                if !out.displacements.is_null() {
                    *out.displacements.add(i) = at;
                }
            }
            *n = def.elements.len() as c_int;
        }
        put(out.enumtype, event_enum(def));
        // Ferry's event types take no hints.
        put(out.info, MPI_INFO_NULL);
        put_string(def.desc, out.desc, out.desc_len);
        put(out.bind, MPI_T_BIND_NO_OBJECT);
    }
    Ok(())
}
