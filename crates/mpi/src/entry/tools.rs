//! Chapter 15 of MPI 5.0, tool support: the tool information interface (`MPI_T_*`, over
//! [`crate::tool`]) and `MPI_Pcontrol` of the profiling interface.

use super::NONE;
use crate::abi::*;
use crate::check::tool_out;
use crate::datatype::Builtin;
use crate::error::{fail, Res};
use crate::handles::{Kind, Table};
use crate::tool::events::{
    self, EventCallback, EventDroppedCallback, EventFreeCallback, InfoOut, EVENTS,
};
use crate::tool::*;
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_ulonglong, c_void};

mpi! {
    /// Profiling control: accepted and ignored.
    fn MPI_Pcontrol / PMPI_Pcontrol(_level: c_int) on NONE => { Ok(()) }
}

mpi! {
    /// Starts the tool interface (again: calls are counted), before or after MPI_Init alike.
    fn MPI_T_init_thread / PMPI_T_init_thread(required: c_int, provided: *mut c_int) on tool => {
        let provided = tool_out(provided, "provided")?;
        if ![MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED, MPI_THREAD_MULTIPLE]
            .contains(&required)
        {
            return fail(MPI_T_ERR_INVALID, format!("no thread level {required}"));
        }
        TOOL.with(|t| -> Res {
            t.refs = t.refs.checked_add(1).ok_or_else(|| error(MPI_T_ERR_CANNOT_INIT, "too many MPI_T_init_thread calls"))?;
            Ok(())
        }).unwrap_or_else(|| fail(MPI_T_ERR_CANNOT_INIT, "MPI_T called re-entrantly"))?;
        // MPI_T's state is behind the same serialization as the rest of MPI.
        *provided = required;
        Ok(())
    }
}

mpi! {
    /// Ends one MPI_T_init_thread; the last one frees every handle and session.
    fn MPI_T_finalize / PMPI_T_finalize() on tool => {
        tool(|t| {
            t.refs -= 1;
            if t.refs == 0 {
                t.cvars = Table::new(Kind::ToolCvar);
                t.pvars = Table::new(Kind::ToolPvar);
                t.sessions = Table::new(Kind::ToolSession);
                events::forget_all(t);
            }
            Ok(())
        })
    }
}

mpi! {
    /// An enumeration's item count and name.
    fn MPI_T_enum_get_info / PMPI_T_enum_get_info(enumtype: Handle, num: *mut c_int, name: *mut c_char, name_len: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let e = enum_of(enumtype)?;
        put(num, e.items.len() as c_int);
        put_string(e.name, name, name_len);
        Ok(())
    }
}

mpi! {
    /// Item `index` of an enumeration: its value and name.
    fn MPI_T_enum_get_item / PMPI_T_enum_get_item(enumtype: Handle, index: c_int, value: *mut c_int, name: *mut c_char, name_len: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let e = enum_of(enumtype)?;
        let Some(&(v, item)) = usize::try_from(index).ok().and_then(|i| e.items.get(i)) else {
            return fail(MPI_T_ERR_INVALID_ITEM, format!("{} has no item {index}", e.name));
        };
        put(value, v);
        put_string(item, name, name_len);
        Ok(())
    }
}

mpi! {
    /// How many control variables there are.
    fn MPI_T_cvar_get_num / PMPI_T_cvar_get_num(num_cvar: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        *tool_out(num_cvar, "num_cvar")? = CVARS.len() as c_int;
        Ok(())
    }
}

mpi! {
    /// What control variable `cvar_index` is (NULL arguments are not filled in).
    fn MPI_T_cvar_get_info / PMPI_T_cvar_get_info(cvar_index: c_int, name: *mut c_char, name_len: *mut c_int, verbosity: *mut c_int, datatype: *mut Handle, enumtype: *mut Handle, desc: *mut c_char, desc_len: *mut c_int, bind: *mut c_int, scope: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let def = &CVARS[index_arg(cvar_index, CVARS.len(), "control variable")?];
        put_string(&cvar_name(def), name, name_len);
        put(verbosity, def.verbosity);
        put(datatype, def.ty.datatype());
        put(enumtype, match def.ty {
            CvarType::Enum(e) => enum_handle(e),
            _ => MPI_T_ENUM_NULL,
        });
        put_string(def.desc, desc, desc_len);
        put(bind, MPI_T_BIND_NO_OBJECT);
        put(scope, MPI_T_SCOPE_READONLY);
        Ok(())
    }
}

mpi! {
    /// The index of the control variable called `name`.
    fn MPI_T_cvar_get_index / PMPI_T_cvar_get_index(name: *const c_char, cvar_index: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let name = name_arg(name)?;
        let index = tool_out(cvar_index, "cvar_index")?;
        let Some(i) = CVARS.iter().position(|d| cvar_name(d) == name) else {
            return fail(MPI_T_ERR_INVALID_NAME, format!("no control variable {name:?}"));
        };
        *index = i as c_int;
        Ok(())
    }
}

mpi! {
    /// A handle to read control variable `cvar_index` through, and its element count.
    fn MPI_T_cvar_handle_alloc / PMPI_T_cvar_handle_alloc(cvar_index: c_int, _obj_handle: *mut c_void, handle: *mut Handle, count: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let index = index_arg(cvar_index, CVARS.len(), "control variable")?;
        let handle = tool_out(handle, "handle")?;
        let count = tool_out(count, "count")?;
        let n = cvar_count(index)?;
        *handle = tool(|t| Ok(t.cvars.insert(CvarHandle { index, count: n })))?;
        *count = n as c_int;
        Ok(())
    }
}

mpi! {
    /// Frees a control-variable handle and sets it to MPI_T_CVAR_HANDLE_NULL.
    fn MPI_T_cvar_handle_free / PMPI_T_cvar_handle_free(handle: *mut Handle) on tool => {
        let h = tool_out(handle, "handle")?;
        tool(|t| {
            t.cvars
                .remove(*h)
                .ok_or_else(|| error(MPI_T_ERR_INVALID_HANDLE, format!("invalid control-variable handle {:#x}", *h)))
        })?;
        *h = MPI_T_CVAR_HANDLE_NULL;
        Ok(())
    }
}

mpi! {
    /// Reads a control variable into `buf` (its datatype, `count` elements).
    fn MPI_T_cvar_read / PMPI_T_cvar_read(handle: Handle, buf: *mut c_void) on tool => {
        let (index, count) = cvar_handle(handle)?;
        if buf.is_null() {
            return fail(MPI_T_ERR_INVALID, "buf is NULL");
        }
        match (CVARS[index].ty, cvar_value(index)?) {
            (CvarType::ULong, CvarValue::Number(v)) => *(buf as *mut c_ulong) = v as c_ulong,
            (CvarType::UInt, CvarValue::Number(v)) => *(buf as *mut c_uint) = v.min(c_uint::MAX as u64) as c_uint,
            (CvarType::Int | CvarType::Enum(_), CvarValue::Number(v)) => *(buf as *mut c_int) = v.min(c_int::MAX as u64) as c_int,
            (CvarType::Text, CvarValue::Text(t)) => {
                // At most the count the handle was allocated with, NUL included.
                let n = t.len().min(count.saturating_sub(1));
                std::ptr::copy_nonoverlapping(t.as_ptr(), buf as *mut u8, n);
                *(buf as *mut u8).add(n) = 0;
            }
            _ => return fail(MPI_T_ERR_INVALID, "control variable of an unexpected type"),
        }
        Ok(())
    }
}

mpi! {
    /// Writing: every ferry setting is read once at MPI_Init, so never (MPI_T_ERR_CVAR_SET_NEVER).
    fn MPI_T_cvar_write / PMPI_T_cvar_write(handle: Handle, buf: *const c_void) on tool => {
        let (index, _) = cvar_handle(handle)?;
        if buf.is_null() {
            return fail(MPI_T_ERR_INVALID, "buf is NULL");
        }
        fail(
            MPI_T_ERR_CVAR_SET_NEVER,
            format!("{} is read from the environment at MPI_Init only", CVARS[index].env),
        )
    }
}

mpi! {
    /// How many performance variables there are.
    fn MPI_T_pvar_get_num / PMPI_T_pvar_get_num(num_pvar: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        *tool_out(num_pvar, "num_pvar")? = PVARS.len() as c_int;
        Ok(())
    }
}

mpi! {
    /// What performance variable `pvar_index` is (NULL arguments are not filled in).
    fn MPI_T_pvar_get_info / PMPI_T_pvar_get_info(pvar_index: c_int, name: *mut c_char, name_len: *mut c_int, verbosity: *mut c_int, var_class: *mut c_int, datatype: *mut Handle, enumtype: *mut Handle, desc: *mut c_char, desc_len: *mut c_int, bind: *mut c_int, readonly: *mut c_int, continuous: *mut c_int, atomic: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let def = &PVARS[index_arg(pvar_index, PVARS.len(), "performance variable")?];
        put_string(def.name, name, name_len);
        put(verbosity, def.verbosity);
        put(var_class, def.class);
        put(datatype, Builtin::UnsignedLongLong as Handle);
        put(enumtype, MPI_T_ENUM_NULL);
        put_string(def.desc, desc, desc_len);
        put(bind, MPI_T_BIND_NO_OBJECT);
        put(readonly, def.continuous as c_int);
        put(continuous, def.continuous as c_int);
        // A read and reset happen in one call with nothing in between (one thread).
        put(atomic, !def.continuous as c_int);
        Ok(())
    }
}

mpi! {
    /// The index of the performance variable called `name` of class `var_class`.
    fn MPI_T_pvar_get_index / PMPI_T_pvar_get_index(name: *const c_char, var_class: c_int, pvar_index: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let name = name_arg(name)?;
        let index = tool_out(pvar_index, "pvar_index")?;
        let Some(i) = PVARS.iter().position(|d| d.name == name && d.class == var_class) else {
            return fail(MPI_T_ERR_INVALID_NAME, format!("no performance variable {name:?} of class {var_class}"));
        };
        *index = i as c_int;
        Ok(())
    }
}

mpi! {
    /// Opens a session for performance-variable handles.
    fn MPI_T_pvar_session_create / PMPI_T_pvar_session_create(session: *mut Handle) on tool => {
        let session = tool_out(session, "session")?;
        *session = tool(|t| Ok(t.sessions.insert(())))?;
        Ok(())
    }
}

mpi! {
    /// Closes a session, freeing its handles; sets it to MPI_T_PVAR_SESSION_NULL.
    fn MPI_T_pvar_session_free / PMPI_T_pvar_session_free(session: *mut Handle) on tool => {
        let s = tool_out(session, "session")?;
        tool(|t| {
            t.sessions
                .remove(*s)
                .ok_or_else(|| error(MPI_T_ERR_INVALID_SESSION, format!("invalid session {:#x}", *s)))?;
            for h in t.pvars.handles() {
                if t.pvars.get(h).is_some_and(|p| p.session == *s) {
                    t.pvars.remove(h);
                }
            }
            Ok(())
        })?;
        *s = MPI_T_PVAR_SESSION_NULL;
        Ok(())
    }
}

mpi! {
    /// A handle of performance variable `pvar_index` in `session` (count 1). A counter starts
    /// stopped at 0; a continuous variable is always started.
    fn MPI_T_pvar_handle_alloc / PMPI_T_pvar_handle_alloc(session: Handle, pvar_index: c_int, _obj_handle: *mut c_void, handle: *mut Handle, count: *mut c_int) on tool => {
        let now = counters()?;
        let made = tool(|t| {
            session_arg(t, session)?;
            let index = index_arg(pvar_index, PVARS.len(), "performance variable")?;
            let continuous = PVARS[index].continuous;
            Ok(t.pvars.insert(PvarHandle {
                session,
                index,
                started: continuous,
                held: 0,
                base: (PVARS[index].value)(&now),
            }))
        })?;
        *tool_out(handle, "handle")? = made;
        *tool_out(count, "count")? = 1;
        Ok(())
    }
}

mpi! {
    /// Frees a performance-variable handle; sets it to MPI_T_PVAR_HANDLE_NULL.
    fn MPI_T_pvar_handle_free / PMPI_T_pvar_handle_free(session: Handle, handle: *mut Handle) on tool => {
        let h = tool_out(handle, "handle")?;
        tool(|t| {
            if *h == MPI_T_PVAR_ALL_HANDLES {
                return fail(MPI_T_ERR_INVALID_HANDLE, "MPI_T_PVAR_ALL_HANDLES cannot be freed");
            }
            for one in handles_of(t, session, *h)? {
                t.pvars.remove(one);
            }
            Ok(())
        })?;
        *h = MPI_T_PVAR_HANDLE_NULL;
        Ok(())
    }
}

mpi! {
    /// Starts a handle (or every handle of the session that can be started).
    fn MPI_T_pvar_start / PMPI_T_pvar_start(session: Handle, handle: Handle) on tool => {
        start_stop(session, handle, true)
    }
}

mpi! {
    /// Stops a handle (or every handle of the session that can be stopped).
    fn MPI_T_pvar_stop / PMPI_T_pvar_stop(session: Handle, handle: Handle) on tool => {
        start_stop(session, handle, false)
    }
}

mpi! {
    /// Reads a handle (one `unsigned long long`).
    fn MPI_T_pvar_read / PMPI_T_pvar_read(session: Handle, handle: Handle, buf: *mut c_void) on tool => {
        read_handle(session, handle, buf, false)
    }
}

mpi! {
    /// Reads a handle and resets it to 0, at once.
    fn MPI_T_pvar_readreset / PMPI_T_pvar_readreset(session: Handle, handle: Handle, buf: *mut c_void) on tool => {
        read_handle(session, handle, buf, true)
    }
}

mpi! {
    /// Sets what a counter's handle shows (it goes on counting from there when started).
    fn MPI_T_pvar_write / PMPI_T_pvar_write(session: Handle, handle: Handle, buf: *const c_void) on tool => {
        if handle == MPI_T_PVAR_ALL_HANDLES {
            return fail(MPI_T_ERR_INVALID_HANDLE, "MPI_T_PVAR_ALL_HANDLES cannot be written");
        }
        if buf.is_null() {
            return fail(MPI_T_ERR_INVALID, "buf is NULL");
        }
        let value = *(buf as *const c_ulonglong);
        let now = counters()?;
        tool(|t| {
            handles_of(t, session, handle)?;
            let Some(p) = t.pvars.get_mut(handle) else {
                return fail(MPI_T_ERR_INVALID_HANDLE, "invalid performance-variable handle");
            };
            let def = &PVARS[p.index];
            if def.continuous {
                return fail(MPI_T_ERR_PVAR_NO_WRITE, format!("{} is read-only", def.name));
            }
            p.held = value;
            p.base = (def.value)(&now);
            Ok(())
        })
    }
}

mpi! {
    /// Resets a counter's handle to 0 (or every writable handle of the session).
    fn MPI_T_pvar_reset / PMPI_T_pvar_reset(session: Handle, handle: Handle) on tool => {
        let now = counters()?;
        tool(|t| {
            let all = handle == MPI_T_PVAR_ALL_HANDLES;
            for h in handles_of(t, session, handle)? {
                let Some(p) = t.pvars.get_mut(h) else { continue };
                let def = &PVARS[p.index];
                if def.continuous {
                    if all {
                        continue;
                    }
                    return fail(MPI_T_ERR_PVAR_NO_WRITE, format!("{} is read-only", def.name));
                }
                p.held = 0;
                p.base = (def.value)(&now);
            }
            Ok(())
        })
    }
}

mpi! {
    /// How many categories there are.
    fn MPI_T_category_get_num / PMPI_T_category_get_num(num_cat: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        *tool_out(num_cat, "num_cat")? = CATEGORIES.len() as c_int;
        Ok(())
    }
}

mpi! {
    /// What category `cat_index` is and how much it holds.
    fn MPI_T_category_get_info / PMPI_T_category_get_info(cat_index: c_int, name: *mut c_char, name_len: *mut c_int, desc: *mut c_char, desc_len: *mut c_int, num_cvars: *mut c_int, num_pvars: *mut c_int, num_categories: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let cat = index_arg(cat_index, CATEGORIES.len(), "category")?;
        let def = &CATEGORIES[cat];
        put_string(def.name, name, name_len);
        put_string(def.desc, desc, desc_len);
        put(num_cvars, category_cvars(cat).len() as c_int);
        put(num_pvars, category_pvars(cat).len() as c_int);
        put(num_categories, def.subcategories.len() as c_int);
        Ok(())
    }
}

mpi! {
    /// The index of the category called `name`.
    fn MPI_T_category_get_index / PMPI_T_category_get_index(name: *const c_char, cat_index: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let name = name_arg(name)?;
        let index = tool_out(cat_index, "cat_index")?;
        let Some(i) = CATEGORIES.iter().position(|d| d.name == name) else {
            return fail(MPI_T_ERR_INVALID_NAME, format!("no category {name:?}"));
        };
        *index = i as c_int;
        Ok(())
    }
}

mpi! {
    /// The first `len` control variables of a category.
    fn MPI_T_category_get_cvars / PMPI_T_category_get_cvars(cat_index: c_int, len: c_int, indices: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let cat = index_arg(cat_index, CATEGORIES.len(), "category")?;
        put_indices(&category_cvars(cat), len, indices)
    }
}

mpi! {
    /// The first `len` performance variables of a category.
    fn MPI_T_category_get_pvars / PMPI_T_category_get_pvars(cat_index: c_int, len: c_int, indices: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let cat = index_arg(cat_index, CATEGORIES.len(), "category")?;
        put_indices(&category_pvars(cat), len, indices)
    }
}

mpi! {
    /// The first `len` subcategories of a category.
    fn MPI_T_category_get_categories / PMPI_T_category_get_categories(cat_index: c_int, len: c_int, indices: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let cat = index_arg(cat_index, CATEGORIES.len(), "category")?;
        put_indices(CATEGORIES[cat].subcategories, len, indices)
    }
}

mpi! {
    /// The categories' version: always 0, since they never change.
    fn MPI_T_category_changed / PMPI_T_category_changed(update_number: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        *tool_out(update_number, "update_number")? = 0;
        Ok(())
    }
}

mpi! {
    /// How many event types a category holds.
    fn MPI_T_category_get_num_events / PMPI_T_category_get_num_events(cat_index: c_int, num_events: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let cat = index_arg(cat_index, CATEGORIES.len(), "category")?;
        *tool_out(num_events, "num_events")? = events::category_events(cat).len() as c_int;
        Ok(())
    }
}

mpi! {
    /// The first `len` event types of a category.
    fn MPI_T_category_get_events / PMPI_T_category_get_events(cat_index: c_int, len: c_int, indices: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let cat = index_arg(cat_index, CATEGORIES.len(), "category")?;
        put_indices(&events::category_events(cat), len, indices)
    }
}

mpi! {
    /// How many event sources there are: one, this process's clock.
    fn MPI_T_source_get_num / PMPI_T_source_get_num(num_sources: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        *tool_out(num_sources, "num_sources")? = 1;
        Ok(())
    }
}

mpi! {
    /// What source `source_index` is: its name, description, ordering and clock.
    fn MPI_T_source_get_info / PMPI_T_source_get_info(source_index: c_int, name: *mut c_char, name_len: *mut c_int, desc: *mut c_char, desc_len: *mut c_int, ordering: *mut c_int, ticks_per_second: *mut i64, max_ticks: *mut i64, info: *mut Handle) on tool => {
        tool(|_| Ok(()))?;
        index_arg(source_index, 1, "source")?;
        put_string(events::SOURCE_NAME, name, name_len);
        put_string(events::SOURCE_DESC, desc, desc_len);
        put(ordering, events::MPI_T_SOURCE_ORDERED);
        put(ticks_per_second, events::TICKS_PER_SECOND);
        put(max_ticks, i64::MAX);
        put(info, MPI_INFO_NULL);
        Ok(())
    }
}

mpi! {
    /// A source's time now, in its ticks.
    fn MPI_T_source_get_timestamp / PMPI_T_source_get_timestamp(source_index: c_int, timestamp: *mut i64) on tool => {
        tool(|_| Ok(()))?;
        index_arg(source_index, 1, "source")?;
        *tool_out(timestamp, "timestamp")? = ferry_core::events::now_ns() as i64;
        Ok(())
    }
}

mpi! {
    /// How many event types there are.
    fn MPI_T_event_get_num / PMPI_T_event_get_num(num_events: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        *tool_out(num_events, "num_events")? = EVENTS.len() as c_int;
        Ok(())
    }
}

mpi! {
    /// What event type `event_index` is (NULL arguments are not filled in; `num_elements` in:
    /// the arrays' length, out: the element count).
    fn MPI_T_event_get_info / PMPI_T_event_get_info(event_index: c_int, name: *mut c_char, name_len: *mut c_int, verbosity: *mut c_int, array_of_datatypes: *mut Handle, array_of_displacements: *mut isize, num_elements: *mut c_int, enumtype: *mut Handle, info: *mut Handle, desc: *mut c_char, desc_len: *mut c_int, bind: *mut c_int) on tool => {
        events::get_info(event_index, InfoOut {
            name,
            name_len,
            verbosity,
            datatypes: array_of_datatypes,
            displacements: array_of_displacements,
            num_elements,
            enumtype,
            info,
            desc,
            desc_len,
            bind,
        })
    }
}

mpi! {
    /// The index of the event type called `name`.
    fn MPI_T_event_get_index / PMPI_T_event_get_index(name: *const c_char, event_index: *mut c_int) on tool => {
        tool(|_| Ok(()))?;
        let name = name_arg(name)?;
        let index = tool_out(event_index, "event_index")?;
        let Some(i) = EVENTS.iter().position(|d| d.name == name) else {
            return fail(MPI_T_ERR_INVALID_NAME, format!("no event type {name:?}"));
        };
        *index = i as c_int;
        Ok(())
    }
}

mpi! {
    /// Registers for event type `event_index` (every type binds to no object: `obj_handle` is
    /// not read). Its sources record events from now on.
    fn MPI_T_event_handle_alloc / PMPI_T_event_handle_alloc(event_index: c_int, _obj_handle: *mut c_void, info: Handle, event_registration: *mut Handle) on tool => {
        tool(|_| Ok(()))?;
        let event = index_arg(event_index, EVENTS.len(), "event type")?;
        info_arg(info)?;
        let out = tool_out(event_registration, "event_registration")?;
        *out = events::alloc(event)?;
        Ok(())
    }
}

mpi! {
    /// Sets hints of a registration: ferry takes none, so only the arguments are checked.
    fn MPI_T_event_handle_set_info / PMPI_T_event_handle_set_info(event_registration: Handle, info: Handle) on tool => {
        events::check_registration(event_registration)?;
        info_arg(info)
    }
}

mpi! {
    /// The hints a registration uses: a new, empty info object (ferry takes none).
    fn MPI_T_event_handle_get_info / PMPI_T_event_handle_get_info(event_registration: Handle, info_used: *mut Handle) on tool => {
        events::check_registration(event_registration)?;
        *tool_out(info_used, "info_used")? = empty_info()?;
        Ok(())
    }
}

mpi! {
    /// Sets (or, with a NULL function, removes) the callback of safety level `cb_safety`.
    fn MPI_T_event_register_callback / PMPI_T_event_register_callback(event_registration: Handle, cb_safety: c_int, info: Handle, user_data: *mut c_void, event_cb_function: EventCallback) on tool => {
        info_arg(info)?;
        events::register(event_registration, cb_safety, user_data, event_cb_function)
    }
}

mpi! {
    /// Sets hints of a callback: ferry takes none, so only the arguments are checked.
    fn MPI_T_event_callback_set_info / PMPI_T_event_callback_set_info(event_registration: Handle, cb_safety: c_int, info: Handle) on tool => {
        events::check_callback(event_registration, cb_safety)?;
        info_arg(info)
    }
}

mpi! {
    /// The hints a callback uses: a new, empty info object (ferry takes none).
    fn MPI_T_event_callback_get_info / PMPI_T_event_callback_get_info(event_registration: Handle, cb_safety: c_int, info_used: *mut Handle) on tool => {
        events::check_callback(event_registration, cb_safety)?;
        *tool_out(info_used, "info_used")? = empty_info()?;
        Ok(())
    }
}

mpi! {
    /// Frees a registration; `free_cb_function` (if any) runs once none of its callbacks can
    /// run any more: at once, or when the callbacks running now have returned.
    fn MPI_T_event_handle_free / PMPI_T_event_handle_free(event_registration: Handle, user_data: *mut c_void, free_cb_function: EventFreeCallback) on tool => {
        events::free(event_registration, user_data, free_cb_function)
    }
}

mpi! {
    /// Sets the handler told of events of the registration's type lost to a full queue.
    fn MPI_T_event_set_dropped_handler / PMPI_T_event_set_dropped_handler(event_registration: Handle, dropped_cb_function: EventDroppedCallback) on tool => {
        events::set_dropped(event_registration, dropped_cb_function)
    }
}

mpi! {
    /// Reads element `element_index` of an event instance (inside its callback only).
    fn MPI_T_event_read / PMPI_T_event_read(event_instance: Handle, element_index: c_int, buffer: *mut c_void) on tool => {
        events::read(event_instance, element_index, buffer)
    }
}

mpi! {
    /// Copies every element of an event instance, at its displacement (inside its callback
    /// only).
    fn MPI_T_event_copy / PMPI_T_event_copy(event_instance: Handle, buffer: *mut c_void) on tool => {
        events::copy(event_instance, buffer)
    }
}

mpi! {
    /// When an event instance was raised, in its source's ticks (inside its callback only).
    fn MPI_T_event_get_timestamp / PMPI_T_event_get_timestamp(event_instance: Handle, event_timestamp: *mut i64) on tool => {
        let event = events::instance(event_instance)?;
        *tool_out(event_timestamp, "event_timestamp")? = event.time_ns as i64;
        Ok(())
    }
}

mpi! {
    /// The source of an event instance: 0, the only one (inside its callback only).
    fn MPI_T_event_get_source / PMPI_T_event_get_source(event_instance: Handle, source_index: *mut c_int) on tool => {
        events::instance(event_instance)?;
        *tool_out(source_index, "source_index")? = 0;
        Ok(())
    }
}

/// Checks an info argument: MPI_INFO_NULL or a live info object.
fn info_arg(info: Handle) -> Res {
    if info == MPI_INFO_NULL {
        return Ok(());
    }
    let live = crate::state::with(|s| Ok(s.infos.get(info).is_some()))
        .map_err(|e| error(MPI_T_ERR_INVALID, e.into_message()))?;
    if !live {
        return fail(MPI_T_ERR_INVALID, format!("invalid info {info:#x}"));
    }
    Ok(())
}

/// A new info object with no hints.
fn empty_info() -> Res<Handle> {
    crate::state::with(|s| Ok(crate::mpi5::new_info(s, &[])))
        .map_err(|e| error(MPI_T_ERR_INVALID, e.into_message()))
}
