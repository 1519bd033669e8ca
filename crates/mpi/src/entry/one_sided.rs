//! Chapter 12 of MPI 5.0, one-sided communication: window creation and allocation, window
//! attributes, names and error handlers, put/get/accumulate (request-based and `MPI_Count`
//! forms) and the synchronisation calls. The semantics are in [`crate::rma`] and
//! [`crate::rma::window`].

use super::guards::handle_error;
use super::NONE;
use crate::abi::*;
use crate::check::out;
use crate::datatype::Class;
use crate::env::write_string;
use crate::error::{fail, CommErrhandlerFn, MpiError};
use crate::rma::window::*;
use crate::rma::wire::{kind, Writer, HEADER_MAX};
use crate::rma::Memory;
use crate::state::{running, with, AttrKind};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::rc::Rc;

mpi! {
    /// Creates a window over memory the program owns.
    fn MPI_Win_create / PMPI_Win_create(base: *mut c_void, size: isize, disp_unit: c_int, info: Handle, comm: Handle, win: *mut Handle) on comm => {
        let out = out(win, "win")?;
        *out = create(comm, base as *mut u8, size, disp_unit, MPI_WIN_FLAVOR_CREATE, None, info)?;
        Ok(())
    }
}

mpi! {
    /// MPI_Win_create with an MPI_Aint displacement unit.
    fn MPI_Win_create_c / PMPI_Win_create_c(base: *mut c_void, size: isize, disp_unit: isize, info: Handle, comm: Handle, win: *mut Handle) on comm => {
        let disp_unit = disp_unit_c(disp_unit)?;
        let out = out(win, "win")?;
        *out = create(comm, base as *mut u8, size, disp_unit, MPI_WIN_FLAVOR_CREATE, None, info)?;
        Ok(())
    }
}

mpi! {
    /// Creates a window over memory the library allocates.
    fn MPI_Win_allocate / PMPI_Win_allocate(size: isize, disp_unit: c_int, info: Handle, comm: Handle, baseptr: *mut c_void, win: *mut Handle) on comm => {
        win_allocate(size, disp_unit, info, comm, baseptr, win)
    }
}

mpi! {
    /// MPI_Win_allocate with an MPI_Aint displacement unit.
    fn MPI_Win_allocate_c / PMPI_Win_allocate_c(size: isize, disp_unit: isize, info: Handle, comm: Handle, baseptr: *mut c_void, win: *mut Handle) on comm => {
        win_allocate(size, disp_unit_c(disp_unit)?, info, comm, baseptr, win)
    }
}

mpi! {
    /// Creates a window over one shared segment of every rank's memory (all ranks must be on
    /// one host), each rank's part right after the previous rank's.
    fn MPI_Win_allocate_shared / PMPI_Win_allocate_shared(size: isize, disp_unit: c_int, info: Handle, comm: Handle, baseptr: *mut c_void, win: *mut Handle) on comm => {
        win_allocate_shared(size, disp_unit, info, comm, baseptr, win)
    }
}

mpi! {
    /// MPI_Win_allocate_shared with an MPI_Aint displacement unit.
    fn MPI_Win_allocate_shared_c / PMPI_Win_allocate_shared_c(size: isize, disp_unit: isize, info: Handle, comm: Handle, baseptr: *mut c_void, win: *mut Handle) on comm => {
        win_allocate_shared(size, disp_unit_c(disp_unit)?, info, comm, baseptr, win)
    }
}

mpi! {
    /// The memory of `rank` (for MPI_PROC_NULL: of the lowest rank with any) in a shared window.
    fn MPI_Win_shared_query / PMPI_Win_shared_query(win: Handle, rank: c_int, size: *mut isize, disp_unit: *mut c_int, baseptr: *mut c_void) on win => {
        let (bytes, unit, base) = shared_query(win, rank)?;
        *out(size, "size")? = bytes;
        *out(disp_unit, "disp_unit")? = unit;
        *out(baseptr as *mut *mut c_void, "baseptr")? = base;
        Ok(())
    }
}

mpi! {
    /// MPI_Win_shared_query with an MPI_Aint displacement unit.
    fn MPI_Win_shared_query_c / PMPI_Win_shared_query_c(win: Handle, rank: c_int, size: *mut isize, disp_unit: *mut isize, baseptr: *mut c_void) on win => {
        let (bytes, unit, base) = shared_query(win, rank)?;
        *out(size, "size")? = bytes;
        *out(disp_unit, "disp_unit")? = unit as isize;
        *out(baseptr as *mut *mut c_void, "baseptr")? = base;
        Ok(())
    }
}

mpi! {
    /// Creates a window whose memory is attached later.
    fn MPI_Win_create_dynamic / PMPI_Win_create_dynamic(info: Handle, comm: Handle, win: *mut Handle) on comm => {
        let out = out(win, "win")?;
        *out = create(comm, std::ptr::null_mut(), 0, 1, MPI_WIN_FLAVOR_DYNAMIC, None, info)?;
        Ok(())
    }
}

mpi! {
    /// Exposes `size` bytes at `base` in a dynamic window.
    fn MPI_Win_attach / PMPI_Win_attach(win: Handle, base: *mut c_void, size: isize) on win => {
        let shared = running(|s| {
            let w = win_obj(s, win)?;
            if w.values.flavor != MPI_WIN_FLAVOR_DYNAMIC {
                return fail(MPI_ERR_RMA_FLAVOR, "MPI_Win_attach needs a dynamic window");
            }
            Ok(w.shared.clone())
        })?;
        let Ok(size) = usize::try_from(size) else {
            return fail(MPI_ERR_SIZE, format!("negative size {size}"));
        };
        let mut w = shared.borrow_mut();
        if let Memory::Dynamic { regions } = &mut w.memory {
            let a = base as usize;
            if regions.iter().any(|&(b, l)| a < b + l && b < a + size) {
                return fail(MPI_ERR_RMA_ATTACH, "the region overlaps one already attached");
            }
            regions.push((a, size));
        }
        Ok(())
    }
}

mpi! {
    /// Withdraws a region attached to a dynamic window.
    fn MPI_Win_detach / PMPI_Win_detach(win: Handle, base: *const c_void) on win => {
        let shared = running(|s| {
            let w = win_obj(s, win)?;
            if w.values.flavor != MPI_WIN_FLAVOR_DYNAMIC {
                return fail(MPI_ERR_RMA_FLAVOR, "MPI_Win_detach needs a dynamic window");
            }
            Ok(w.shared.clone())
        })?;
        let mut w = shared.borrow_mut();
        if let Memory::Dynamic { regions } = &mut w.memory {
            let Some(i) = regions.iter().position(|&(b, _)| b == base as usize) else {
                return fail(MPI_ERR_RMA_ATTACH, "no region is attached at this address");
            };
            regions.remove(i);
        }
        Ok(())
    }
}

mpi! {
    /// Frees a window (collective; every epoch must be over).
    fn MPI_Win_free / PMPI_Win_free(win: *mut Handle) on win.as_ref().copied().unwrap_or(MPI_WIN_NULL) => {
        let h = out(win, "win")?;
        let (core, shared, attrs) = running(|s| {
            let w = win_mut(s, *h)?;
            if w.epoch.lock_all.is_some() || w.epoch.locks.iter().any(|l| l.is_some()) || w.epoch.access.is_some() || w.epoch.exposure.is_some() {
                return sync_error("MPI_Win_free with an epoch still open");
            }
            Ok((w.core.clone(), w.shared.clone(), w.attrs.take_newest_first()))
        })?;
        crate::comm::delete_attrs(*h, attrs)?;
        wait(&core, &shared, |w| w.pending.iter().all(|&p| p == 0))?;
        // Nobody addresses the window once everyone is here.
        core.barrier()?;
        core.clear_active_handler();
        let obj = with(|s| Ok(s.wins.remove(*h)))?;
        if let Some(a) = obj.and_then(|o| o.allocated) {
            // SAFETY: the window that exposed it is gone.
            a.release();
        }
        *h = MPI_WIN_NULL;
        Ok(())
    }
}

mpi! {
    /// The group of the window's communicator.
    fn MPI_Win_get_group / PMPI_Win_get_group(win: Handle, group: *mut Handle) on win => {
        let out = out(group, "group")?;
        *out = running(|s| {
            let members: Rc<[u32]> = win_obj(s, win)?.core.world_ranks().into();
            Ok(if members.is_empty() { MPI_GROUP_EMPTY } else { s.groups.insert(members) })
        })?;
        Ok(())
    }
}

mpi! {
    /// Names a window.
    fn MPI_Win_set_name / PMPI_Win_set_name(win: Handle, name: *const c_char) on win => {
        if name.is_null() {
            return fail(MPI_ERR_ARG, "name is NULL");
        }
        let text = CStr::from_ptr(name).to_string_lossy().chars().take(MPI_MAX_OBJECT_NAME - 1).collect();
        running(|s| { win_mut(s, win)?.name = text; Ok(()) })
    }
}

mpi! {
    /// A window's name; "MPI_WIN_NULL" for the null handle, which MPI 4.1 allows here.
    fn MPI_Win_get_name / PMPI_Win_get_name(win: Handle, name: *mut c_char, resultlen: *mut c_int) on win => {
        if win == MPI_WIN_NULL {
            return write_string("MPI_WIN_NULL", name, MPI_MAX_OBJECT_NAME, resultlen);
        }
        let text = running(|s| Ok(win_obj(s, win)?.name.clone()))?;
        write_string(&text, name, MPI_MAX_OBJECT_NAME, resultlen)
    }
}

mpi! {
    /// Sets hints (kept and returned by MPI_Win_get_info; none changes behaviour).
    fn MPI_Win_set_info / PMPI_Win_set_info(win: Handle, info: Handle) on win => {
        running(|s| {
            let hints = s.infos.get(info).cloned().ok_or_else(|| MpiError::new(MPI_ERR_INFO, format!("invalid info {info:#x}")))?;
            merge_hints(&mut win_mut(s, win)?.info, hints);
            Ok(())
        })
    }
}

mpi! {
    /// The hints in use: a new info object.
    fn MPI_Win_get_info / PMPI_Win_get_info(win: Handle, info: *mut Handle) on win => {
        let out = out(info, "info_used")?;
        *out = running(|s| {
            let hints = win_obj(s, win)?.info.clone();
            Ok(s.infos.insert(hints))
        })?;
        Ok(())
    }
}

mpi! {
    /// Creates an error handler for windows.
    fn MPI_Win_create_errhandler / PMPI_Win_create_errhandler(function: Option<CommErrhandlerFn>, errhandler: *mut Handle) on NONE => {
        let out = out(errhandler, "errhandler")?;
        let Some(f) = function else { return fail(MPI_ERR_ARG, "error handler function is NULL") };
        *out = running(|s| Ok(s.errhandlers.insert(f)))?;
        Ok(())
    }
}

mpi! {
    /// Sets a window's error handler.
    fn MPI_Win_set_errhandler / PMPI_Win_set_errhandler(win: Handle, errhandler: Handle) on win => {
        running(|s| {
            crate::comm::valid_errhandler(s, errhandler)?;
            win_mut(s, win)?.errhandler = errhandler;
            Ok(())
        })
    }
}

mpi! {
    /// A window's error handler.
    fn MPI_Win_get_errhandler / PMPI_Win_get_errhandler(win: Handle, errhandler: *mut Handle) on win => {
        let out = out(errhandler, "errhandler")?;
        *out = running(|s| Ok(win_obj(s, win)?.errhandler))?;
        Ok(())
    }
}

mpi! {
    /// MPI_Win_call_errhandler: invokes the window's handler as if a call on it had failed.
    fn MPI_Win_call_errhandler / PMPI_Win_call_errhandler(win: Handle, errorcode: c_int) -> c_int, unguarded => {
        let valid = with(|s| Ok(s.wins.get(win).is_some())).unwrap_or(false);
        if !valid {
            return handle_error(
                "MPI_Win_call_errhandler",
                NONE,
                MpiError::new(MPI_ERR_WIN, format!("invalid window {win:#x}")),
            );
        }
        let rc = handle_error(
            "MPI_Win_call_errhandler",
            win,
            MpiError::new(errorcode, "raised by the program"),
        );
        crate::error::called_errhandler(rc, errorcode)
    }
}

mpi! {
    /// Creates an attribute key for windows.
    fn MPI_Win_create_keyval / PMPI_Win_create_keyval(copy: usize, delete: usize, keyval: *mut c_int, extra: *mut c_void) on NONE => {
        crate::comm::create_keyval(copy, delete, keyval, extra, AttrKind::Win)
    }
}

mpi! {
    /// Frees an attribute key.
    fn MPI_Win_free_keyval / PMPI_Win_free_keyval(keyval: *mut c_int) on NONE => {
        crate::comm::free_keyval(keyval)
    }
}

mpi! {
    /// Sets an attribute.
    fn MPI_Win_set_attr / PMPI_Win_set_attr(win: Handle, keyval: c_int, value: *mut c_void) on win => {
        let old = running(|s| {
            check_keyval(s, keyval)?;
            Ok(win_obj(s, win)?.attrs.get(keyval))
        })?;
        if let Some(old) = old {
            call_delete(win, keyval, old)?;
        }
        running(|s| {
            win_mut(s, win)?.attrs.insert(keyval, value);
            Ok(())
        })
    }
}

mpi! {
    /// Gets an attribute (the predefined ones included).
    fn MPI_Win_get_attr / PMPI_Win_get_attr(win: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) on win => {
        let flag = out(flag, "flag")?;
        let value = out(value as *mut *mut c_void, "attribute_val")?;
        let found = running(|s| {
            let w = win_obj(s, win)?;
            let v = &*w.values;
            let me = w.peers.get(w.core.rank()).map_or(0, |p| p.base);
            Ok(match keyval {
                MPI_WIN_BASE => Some(me as *mut c_void),
                MPI_WIN_SIZE => Some(&v.size as *const isize as *mut c_void),
                MPI_WIN_DISP_UNIT => Some(&v.disp_unit as *const c_int as *mut c_void),
                MPI_WIN_CREATE_FLAVOR => Some(&v.flavor as *const c_int as *mut c_void),
                MPI_WIN_MODEL => Some(&v.model as *const c_int as *mut c_void),
                k => {
                    s.keyval(k, AttrKind::Win)?;
                    w.attrs.get(k)
                }
            })
        })?;
        match found {
            Some(v) => {
                *value = v;
                *flag = 1;
            }
            None => *flag = 0,
        }
        Ok(())
    }
}

mpi! {
    /// Deletes an attribute.
    fn MPI_Win_delete_attr / PMPI_Win_delete_attr(win: Handle, keyval: c_int) on win => {
        let old = running(|s| {
            check_keyval(s, keyval)?;
            Ok(win_obj(s, win)?.attrs.get(keyval))
        })?;
        let Some(v) = old else {
            return fail(MPI_ERR_KEYVAL, format!("no attribute for keyval {keyval}"));
        };
        call_delete(win, keyval, v)?;
        running(|s| {
            win_mut(s, win)?.attrs.remove(keyval);
            Ok(())
        })
    }
}

mpi! {
    /// Writes into a target's window.
    fn MPI_Put / PMPI_Put(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: c_int, target_datatype: Handle, win: Handle) on win => {
        do_transfer(origin_addr, origin_count.into(), origin_datatype, target_rank, target_disp, target_count.into(), target_datatype, win, put).map(|_| ())
    }
}

mpi! {
    /// Reads from a target's window.
    fn MPI_Get / PMPI_Get(origin_addr: *mut c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: c_int, target_datatype: Handle, win: Handle) on win => {
        do_transfer(origin_addr, origin_count.into(), origin_datatype, target_rank, target_disp, target_count.into(), target_datatype, win, get).map(|_| ())
    }
}

mpi! {
    /// Combines data into a target's window.
    fn MPI_Accumulate / PMPI_Accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: c_int, target_datatype: Handle, op: Handle, win: Handle) on win => {
        do_acc(origin_addr, origin_count.into(), origin_datatype, target_rank, target_disp, target_count.into(), target_datatype, op, win).map(|_| ())
    }
}

mpi! {
    /// Combines data into a target's window and returns what was there.
    fn MPI_Get_accumulate / PMPI_Get_accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, result_addr: *mut c_void, result_count: c_int, result_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: c_int, target_datatype: Handle, op: Handle, win: Handle) on win => {
        do_get_acc(origin_addr, origin_count.into(), origin_datatype, result_addr, result_count.into(), result_datatype, target_rank, target_disp, target_count.into(), target_datatype, op, win).map(|_| ())
    }
}

mpi! {
    /// Get_accumulate of one element.
    fn MPI_Fetch_and_op / PMPI_Fetch_and_op(origin_addr: *const c_void, result_addr: *mut c_void, datatype: Handle, target_rank: c_int, target_disp: isize, op: Handle, win: Handle) on win => {
        do_get_acc(origin_addr, 1, datatype, result_addr, 1, datatype, target_rank, target_disp, 1, datatype, op, win).map(|_| ())
    }
}

mpi! {
    /// Replaces one element of a target's window if it equals `compare`; returns the old value.
    fn MPI_Compare_and_swap / PMPI_Compare_and_swap(origin_addr: *const c_void, compare_addr: *const c_void, result_addr: *mut c_void, datatype: Handle, target_rank: c_int, target_disp: isize, win: Handle) on win => {
        let Some((t, dt)) = running(|s| {
            let Some(t) = target(s, win, target_rank, target_disp)? else { return Ok(None) };
            Ok(Some((t, s.committed_type(datatype)?)))
        })? else { return Ok(()) };
        // MPI 4.1 §12.3.4: C or Fortran integer, logical, multi-language or byte types only
        // (MPI_CHAR counts as a C integer here, as in reductions and in MPICH).
        let Some(b) = dt.as_builtin().filter(|b| matches!(b.class(), Class::Int(_) | Class::Logical(_) | Class::Byte)) else {
            return fail(MPI_ERR_TYPE, "MPI_Compare_and_swap takes a predefined integer, logical or byte datatype");
        };
        let tb = Buf { base: std::ptr::null_mut(), count: 1, dt: dt.clone() };
        check_range(&t, &tb)?;
        for addr in [origin_addr, compare_addr, result_addr as *const c_void] {
            crate::check::buffer(addr, 1, &dt)?;
        }
        let size = b.size();
        let result = Buf { base: result_addr as *mut u8, count: 1, dt };
        let id = land(&t, &result, 0);
        let mut w = Writer::new(HEADER_MAX + 8 + 2 * size).u64(id).u32(b as usize as u32).u64(t.offset as u64);
        // SAFETY: MPI's contract: both addresses hold one element of `datatype`.
        w = w.bytes(std::slice::from_raw_parts(compare_addr as *const u8, size));
        w = w.bytes(std::slice::from_raw_parts(origin_addr as *const u8, size));
        send(&t, kind::CAS, w.done())
    }
}

mpi! {
    /// MPI_Put returning a request (complete on return).
    fn MPI_Rput / PMPI_Rput(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: c_int, target_datatype: Handle, win: Handle, request: *mut Handle) on win => {
        with_request(request, || do_transfer(origin_addr, origin_count.into(), origin_datatype, target_rank, target_disp, target_count.into(), target_datatype, win, put))
    }
}

mpi! {
    /// MPI_Get returning a request (complete on return).
    fn MPI_Rget / PMPI_Rget(origin_addr: *mut c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: c_int, target_datatype: Handle, win: Handle, request: *mut Handle) on win => {
        with_request(request, || do_transfer(origin_addr, origin_count.into(), origin_datatype, target_rank, target_disp, target_count.into(), target_datatype, win, get))
    }
}

mpi! {
    /// MPI_Accumulate returning a request (complete on return).
    fn MPI_Raccumulate / PMPI_Raccumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: c_int, target_datatype: Handle, op: Handle, win: Handle, request: *mut Handle) on win => {
        with_request(request, || do_acc(origin_addr, origin_count.into(), origin_datatype, target_rank, target_disp, target_count.into(), target_datatype, op, win))
    }
}

mpi! {
    /// MPI_Get_accumulate returning a request (complete on return).
    fn MPI_Rget_accumulate / PMPI_Rget_accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, result_addr: *mut c_void, result_count: c_int, result_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: c_int, target_datatype: Handle, op: Handle, win: Handle, request: *mut Handle) on win => {
        with_request(request, || do_get_acc(origin_addr, origin_count.into(), origin_datatype, result_addr, result_count.into(), result_datatype, target_rank, target_disp, target_count.into(), target_datatype, op, win))
    }
}

mpi! {
    /// MPI_Put with MPI_Count counts.
    fn MPI_Put_c / PMPI_Put_c(origin_addr: *const c_void, origin_count: i64, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: i64, target_datatype: Handle, win: Handle) on win => {
        do_transfer(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win, put).map(|_| ())
    }
}

mpi! {
    /// MPI_Get with MPI_Count counts.
    fn MPI_Get_c / PMPI_Get_c(origin_addr: *mut c_void, origin_count: i64, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: i64, target_datatype: Handle, win: Handle) on win => {
        do_transfer(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win, get).map(|_| ())
    }
}

mpi! {
    /// MPI_Accumulate with MPI_Count counts.
    fn MPI_Accumulate_c / PMPI_Accumulate_c(origin_addr: *const c_void, origin_count: i64, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: i64, target_datatype: Handle, op: Handle, win: Handle) on win => {
        do_acc(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, op, win).map(|_| ())
    }
}

mpi! {
    /// MPI_Get_accumulate with MPI_Count counts.
    fn MPI_Get_accumulate_c / PMPI_Get_accumulate_c(origin_addr: *const c_void, origin_count: i64, origin_datatype: Handle, result_addr: *mut c_void, result_count: i64, result_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: i64, target_datatype: Handle, op: Handle, win: Handle) on win => {
        do_get_acc(origin_addr, origin_count, origin_datatype, result_addr, result_count, result_datatype, target_rank, target_disp, target_count, target_datatype, op, win).map(|_| ())
    }
}

mpi! {
    /// MPI_Rput with MPI_Count counts.
    fn MPI_Rput_c / PMPI_Rput_c(origin_addr: *const c_void, origin_count: i64, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: i64, target_datatype: Handle, win: Handle, request: *mut Handle) on win => {
        with_request(request, || do_transfer(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win, put))
    }
}

mpi! {
    /// MPI_Rget with MPI_Count counts.
    fn MPI_Rget_c / PMPI_Rget_c(origin_addr: *mut c_void, origin_count: i64, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: i64, target_datatype: Handle, win: Handle, request: *mut Handle) on win => {
        with_request(request, || do_transfer(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win, get))
    }
}

mpi! {
    /// MPI_Raccumulate with MPI_Count counts.
    fn MPI_Raccumulate_c / PMPI_Raccumulate_c(origin_addr: *const c_void, origin_count: i64, origin_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: i64, target_datatype: Handle, op: Handle, win: Handle, request: *mut Handle) on win => {
        with_request(request, || do_acc(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, op, win))
    }
}

mpi! {
    /// MPI_Rget_accumulate with MPI_Count counts.
    fn MPI_Rget_accumulate_c / PMPI_Rget_accumulate_c(origin_addr: *const c_void, origin_count: i64, origin_datatype: Handle, result_addr: *mut c_void, result_count: i64, result_datatype: Handle, target_rank: c_int, target_disp: isize, target_count: i64, target_datatype: Handle, op: Handle, win: Handle, request: *mut Handle) on win => {
        with_request(request, || do_get_acc(origin_addr, origin_count, origin_datatype, result_addr, result_count, result_datatype, target_rank, target_disp, target_count, target_datatype, op, win))
    }
}

mpi! {
    /// Ends one fence epoch and starts the next (collective).
    fn MPI_Win_fence / PMPI_Win_fence(assert: c_int, win: Handle) on win => {
        check_assert(assert)?;
        let (core, shared) = parts(win, |e, _| {
            if e.access.is_some() || e.exposure.is_some() || e.lock_all.is_some() || e.locks.iter().any(|l| l.is_some()) {
                return sync_error("MPI_Win_fence inside another epoch");
            }
            e.fence = assert & MPI_MODE_NOSUCCEED == 0;
            Ok(())
        })?;
        wait(&core, &shared, |w| w.pending.iter().all(|&p| p == 0))?;
        core.barrier()?;
        Ok(())
    }
}

mpi! {
    /// Opens an exposure epoch to the origins in `group`.
    fn MPI_Win_post / PMPI_Win_post(group: Handle, assert: c_int, win: Handle) on win => {
        check_assert(assert)?;
        let ranks = running(|s| group_ranks(s, win, group))?;
        let g = ranks.clone();
        let (core, _) = parts(win, move |e, _| {
            if e.exposure.is_some() {
                return sync_error("MPI_Win_post while an exposure epoch is open");
            }
            e.exposure = Some(g);
            Ok(())
        })?;
        for r in ranks {
            core.send_active(r, kind::POST, Writer::new(1).done())?;
        }
        Ok(())
    }
}

mpi! {
    /// Opens an access epoch to the targets in `group` (waits for their posts).
    fn MPI_Win_start / PMPI_Win_start(group: Handle, assert: c_int, win: Handle) on win => {
        check_assert(assert)?;
        let ranks = running(|s| group_ranks(s, win, group))?;
        let (core, shared) = parts(win, |e, _| {
            if e.access.is_some() {
                return sync_error("MPI_Win_start while an access epoch is open");
            }
            Ok(())
        })?;
        if assert & MPI_MODE_NOCHECK == 0 {
            wait(&core, &shared, |w| ranks.iter().all(|&r| w.posts[r] > 0))?;
            let mut w = shared.borrow_mut();
            for &r in &ranks {
                w.posts[r] -= 1;
            }
        }
        parts(win, move |e, _| {
            e.access = Some(ranks);
            Ok(())
        })?;
        Ok(())
    }
}

mpi! {
    /// Ends the access epoch: completes its operations and tells the targets.
    fn MPI_Win_complete / PMPI_Win_complete(win: Handle) on win => {
        let mut ranks = Vec::new();
        let (core, shared) = parts(win, |e, _| {
            ranks = e.access.take().map_or_else(|| sync_error("MPI_Win_complete without MPI_Win_start"), Ok)?;
            Ok(())
        })?;
        wait(&core, &shared, |w| ranks.iter().all(|&r| w.pending[r] == 0))?;
        for r in ranks {
            core.send_active(r, kind::COMPLETE, Writer::new(1).done())?;
        }
        Ok(())
    }
}

mpi! {
    /// Ends the exposure epoch once every origin has completed.
    fn MPI_Win_wait / PMPI_Win_wait(win: Handle) on win => {
        finish_exposure(win, true).map(|_| ())
    }
}

mpi! {
    /// MPI_Win_wait that does not block: `flag` says whether the epoch ended.
    fn MPI_Win_test / PMPI_Win_test(win: Handle, flag: *mut c_int) on win => {
        let flag = out(flag, "flag")?;
        *flag = finish_exposure(win, false)? as c_int;
        Ok(())
    }
}

mpi! {
    /// Starts a passive-target epoch to `rank` (waits for the lock only on this rank's window).
    fn MPI_Win_lock / PMPI_Win_lock(lock_type: c_int, rank: c_int, assert: c_int, win: Handle) on win => {
        check_assert(assert)?;
        let exclusive = match lock_type {
            MPI_LOCK_EXCLUSIVE => true,
            MPI_LOCK_SHARED => false,
            t => return fail(MPI_ERR_LOCKTYPE, format!("invalid lock type {t}")),
        };
        let nocheck = assert & MPI_MODE_NOCHECK != 0;
        if rank == MPI_PROC_NULL {
            return running(|s| win_obj(s, win).map(|_| ()));
        }
        let mut target = 0;
        let (core, shared) = parts(win, |e, n| {
            target = rank_arg(rank, n)?;
            if e.locks[target].is_some() || e.lock_all.is_some() {
                return sync_error(format!("rank {target} is already locked"));
            }
            // Access epochs of one process on one window do not overlap (MPI 4.1 §12.5).
            if e.access.is_some() {
                return sync_error("MPI_Win_lock inside an access epoch of MPI_Win_start");
            }
            Ok(())
        })?;
        if !nocheck {
            acquire(&core, &shared, &[target], exclusive)?;
        }
        parts(win, |e, _| {
            e.locks[target] = Some(nocheck);
            Ok(())
        })?;
        Ok(())
    }
}

mpi! {
    /// Ends the passive-target epoch to `rank`.
    fn MPI_Win_unlock / PMPI_Win_unlock(rank: c_int, win: Handle) on win => {
        if rank == MPI_PROC_NULL {
            return running(|s| win_obj(s, win).map(|_| ()));
        }
        let mut target = 0;
        let mut nocheck = false;
        let (core, shared) = parts(win, |e, n| {
            target = rank_arg(rank, n)?;
            nocheck = e.locks[target].take().map_or_else(|| sync_error(format!("rank {target} is not locked")), Ok)?;
            Ok(())
        })?;
        release(&core, &shared, &[target], nocheck)
    }
}

mpi! {
    /// Starts a shared passive-target epoch to every rank.
    fn MPI_Win_lock_all / PMPI_Win_lock_all(assert: c_int, win: Handle) on win => {
        check_assert(assert)?;
        let nocheck = assert & MPI_MODE_NOCHECK != 0;
        let mut n = 0;
        let (core, shared) = parts(win, |e, size| {
            n = size;
            if e.lock_all.is_some() || e.locks.iter().any(|l| l.is_some()) {
                return sync_error("MPI_Win_lock_all while a lock is held");
            }
            if e.access.is_some() {
                return sync_error("MPI_Win_lock_all inside an access epoch of MPI_Win_start");
            }
            Ok(())
        })?;
        if !nocheck {
            acquire(&core, &shared, &(0..n).collect::<Vec<_>>(), false)?;
        }
        parts(win, |e, _| {
            e.lock_all = Some(nocheck);
            Ok(())
        })?;
        Ok(())
    }
}

mpi! {
    /// Ends the MPI_Win_lock_all epoch.
    fn MPI_Win_unlock_all / PMPI_Win_unlock_all(win: Handle) on win => {
        let mut n = 0;
        let mut nocheck = false;
        let (core, shared) = parts(win, |e, size| {
            n = size;
            nocheck = e.lock_all.take().map_or_else(|| sync_error("MPI_Win_unlock_all without MPI_Win_lock_all"), Ok)?;
            Ok(())
        })?;
        release(&core, &shared, &(0..n).collect::<Vec<_>>(), nocheck)
    }
}

mpi! {
    /// Completes the operations to `rank`, at origin and target.
    fn MPI_Win_flush / PMPI_Win_flush(rank: c_int, win: Handle) on win => { flush(win, Some(rank)) }
}

mpi! {
    /// Completes the operations to every rank.
    fn MPI_Win_flush_all / PMPI_Win_flush_all(win: Handle) on win => { flush(win, None) }
}

mpi! {
    /// Completes the operations to `rank` at the origin (here: as MPI_Win_flush).
    fn MPI_Win_flush_local / PMPI_Win_flush_local(rank: c_int, win: Handle) on win => { flush(win, Some(rank)) }
}

mpi! {
    /// Completes the operations to every rank at the origin (here: as MPI_Win_flush_all).
    fn MPI_Win_flush_local_all / PMPI_Win_flush_local_all(win: Handle) on win => { flush(win, None) }
}

mpi! {
    /// Synchronises the public and private copies (one copy here: a memory fence), after one
    /// pass of progress: other ranks' operations on this window land in progress, so a
    /// process polling its window memory between MPI_Win_sync calls sees them.
    fn MPI_Win_sync / PMPI_Win_sync(win: Handle) on win => {
        let core = running(|s| Ok(win_obj(s, win)?.core.clone()))?;
        core.progress()?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}
