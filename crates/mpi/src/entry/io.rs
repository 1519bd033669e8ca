//! Chapter 14 of MPI 5.0, I/O: opening and closing files, views, reads and writes at
//! explicit offsets and through the individual and shared file pointers (blocking,
//! nonblocking, collective, split collective, `MPI_Count` forms), file error handlers and
//! `MPI_Register_datarep`. The semantics are in [`crate::io`] and [`crate::datarep`].

use crate::abi::*;
use crate::check::out;
use crate::datarep::*;
use crate::error::{fail, CommErrhandlerFn, MpiError};
use crate::io::*;
use crate::state::running;
use std::ffi::{c_char, c_int, c_void};
use std::rc::Rc;

mpi! {
    /// Opens a file on every rank of a communicator (collective).
    fn MPI_File_open / PMPI_File_open(comm: Handle, filename: *const c_char, amode: c_int, info: Handle, fh: *mut Handle) on file MPI_FILE_NULL => {
        let out = out(fh, "fh")?;
        *out = MPI_FILE_NULL;
        *out = open(comm, filename, amode, info)?;
        Ok(())
    }
}

mpi! {
    /// Closes a file (collective); removes it if it was opened with MPI_MODE_DELETE_ON_CLOSE.
    fn MPI_File_close / PMPI_File_close(fh: *mut Handle) on file fh.as_ref().copied().unwrap_or(MPI_FILE_NULL) => {
        let h = out(fh, "fh")?;
        let f = file(*h)?;
        running(|s| Ok(s.files.remove(*h)))?;
        *h = MPI_FILE_NULL;
        let synced = f.comm.barrier();
        let f = Rc::try_unwrap(f).map_err(|_| MpiError::new(MPI_ERR_INTERN, "file still in use"))?;
        let FileObj { comm, path, file, amode, shared, .. } = f;
        drop(file);
        drop(shared);
        if amode & MPI_MODE_DELETE_ON_CLOSE != 0 && comm.rank() == 0 {
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(os_error(&e, "cannot delete", &path));
                }
            }
        }
        synced?;
        Ok(())
    }
}

mpi! {
    /// Deletes a file by name.
    fn MPI_File_delete / PMPI_File_delete(filename: *const c_char, info: Handle) on file MPI_FILE_NULL => {
        let name = c_string(filename, "filename")?;
        info_pairs(info)?;
        let path = file_path(&name);
        std::fs::remove_file(&path).map_err(|e| os_error(&e, "cannot delete", &path))
    }
}

mpi! {
    /// Truncates or extends the file (collective).
    fn MPI_File_set_size / PMPI_File_set_size(fh: Handle, size: i64) on file fh => { resize(fh, size, false) }
}

mpi! {
    /// Makes the file at least `size` bytes long (collective).
    fn MPI_File_preallocate / PMPI_File_preallocate(fh: Handle, size: i64) on file fh => { resize(fh, size, true) }
}

mpi! {
    /// The file's size in bytes.
    fn MPI_File_get_size / PMPI_File_get_size(fh: Handle, size: *mut i64) on file fh => {
        let out = out(size, "size")?;
        *out = file_size(&*file(fh)?)? as i64;
        Ok(())
    }
}

mpi! {
    /// The group of the communicator the file was opened on.
    fn MPI_File_get_group / PMPI_File_get_group(fh: Handle, group: *mut Handle) on file fh => {
        let out = out(group, "group")?;
        let f = file(fh)?;
        let members: crate::state::GroupObj = f.comm.world_ranks().into();
        *out = running(|s| Ok(s.groups.insert(members)))?;
        Ok(())
    }
}

mpi! {
    /// The access mode the file was opened with.
    fn MPI_File_get_amode / PMPI_File_get_amode(fh: Handle, amode: *mut c_int) on file fh => {
        let out = out(amode, "amode")?;
        *out = file(fh)?.amode;
        Ok(())
    }
}

mpi! {
    /// Adds hints to the file's info (collective).
    fn MPI_File_set_info / PMPI_File_set_info(fh: Handle, info: Handle) on file fh => {
        let f = file(fh)?;
        let pairs = info_pairs(info)?;
        merge_info(&mut f.st.borrow_mut().info, pairs);
        Ok(())
    }
}

mpi! {
    /// A new info object with the hints in use.
    fn MPI_File_get_info / PMPI_File_get_info(fh: Handle, info_used: *mut Handle) on file fh => {
        let out = out(info_used, "info_used")?;
        let pairs = file(fh)?.st.borrow().info.clone();
        *out = running(|s| Ok(s.infos.insert(pairs)))?;
        Ok(())
    }
}

mpi! {
    /// Writes the file's data to storage and synchronizes the ranks (collective).
    fn MPI_File_sync / PMPI_File_sync(fh: Handle) on file fh => {
        let f = file(fh)?;
        let local = f.file.sync_all().map_err(|e| os_error(&e, "cannot sync", &f.path));
        agree(&f.comm, local, "MPI_File_sync")
    }
}

mpi! {
    /// Sets atomic mode (collective).
    fn MPI_File_set_atomicity / PMPI_File_set_atomicity(fh: Handle, flag: c_int) on file fh => {
        let f = file(fh)?;
        f.st.borrow_mut().atomic = flag != 0;
        f.comm.barrier()?;
        Ok(())
    }
}

mpi! {
    /// Whether atomic mode is on.
    fn MPI_File_get_atomicity / PMPI_File_get_atomicity(fh: Handle, flag: *mut c_int) on file fh => {
        let out = out(flag, "flag")?;
        *out = file(fh)?.st.borrow().atomic as c_int;
        Ok(())
    }
}

mpi! {
    /// Sets the file view (collective); both file pointers go back to 0.
    fn MPI_File_set_view / PMPI_File_set_view(fh: Handle, disp: i64, etype: Handle, filetype: Handle, datarep: *const c_char, info: Handle) on file fh => {
        set_view(fh, disp, etype, filetype, datarep, info)
    }
}

mpi! {
    /// The file view.
    fn MPI_File_get_view / PMPI_File_get_view(fh: Handle, disp: *mut i64, etype: *mut Handle, filetype: *mut Handle, datarep: *mut c_char) on file fh => {
        let (d, e, t) = (out(disp, "disp")?, out(etype, "etype")?, out(filetype, "filetype")?);
        if datarep.is_null() {
            return fail(MPI_ERR_ARG, "datarep is NULL");
        }
        let view = file(fh)?.st.borrow().view.clone();
        *d = view.disp as i64;
        *e = view_type(&view.etype, view.etype_h)?;
        *t = view_type(&view.filetype, view.filetype_h)?;
        // Registered names are shorter than MPI_MAX_DATAREP_STRING (checked at registration).
        let name = view.rep.name().as_bytes();
        // SAFETY: MPI's contract: datarep has room for MPI_MAX_DATAREP_STRING characters.
        std::ptr::copy_nonoverlapping(name.as_ptr(), datarep.cast::<u8>(), name.len());
        // SAFETY: as above; name.len() < MPI_MAX_DATAREP_STRING.
        *datarep.add(name.len()) = 0;
        Ok(())
    }
}

mpi! {
    /// Extent of a datatype in the file: laid out in the view's data representation (MPI-4.1
    /// §14.5; for a registered one, by its extent function).
    fn MPI_File_get_type_extent / PMPI_File_get_type_extent(fh: Handle, datatype: Handle, extent: *mut isize) on file fh => {
        let out = out(extent, "extent")?;
        let rep = file(fh)?.st.borrow().view.rep.clone();
        let dt = running(|s| s.datatype(datatype))?;
        *out = rep.file_type(&dt)?.extent();
        Ok(())
    }
}

mpi! {
    /// Absolute byte position of a view offset.
    fn MPI_File_get_byte_offset / PMPI_File_get_byte_offset(fh: Handle, offset: i64, disp: *mut i64) on file fh => {
        let out = out(disp, "disp")?;
        let f = file(fh)?;
        let at = u64::try_from(offset).map_err(|_| MpiError::new(MPI_ERR_ARG, format!("negative offset {offset}")))?;
        let view = f.st.borrow().view.clone();
        *out = byte_offset(&view, at)? as i64;
        Ok(())
    }
}

macro_rules! blocking {
    ($(#[$doc:meta])* $name:ident / $pname:ident ($($arg:ident: $ty:ty),*) => $how:ident($dir:expr, $at:expr)) => {
        blocking!($(#[$doc])* [c_int] $name / $pname ($($arg: $ty),*) => $how($dir, $at));
    };
    ($(#[$doc:meta])* [$cty:ty] $name:ident / $pname:ident ($($arg:ident: $ty:ty),*) => $how:ident($dir:expr, $at:expr)) => {
        mpi! {
            $(#[$doc])*
            fn $name / $pname(fh: Handle, $($arg: $ty,)* buf: *mut c_void, count: $cty, datatype: Handle, status: *mut MpiStatus) on file fh => {
                let f = file(fh)?;
                done($how(&f, $dir, $at, buf, i64::from(count), datatype)?, status)
            }
        }
    };
}

blocking!(/// Reads at an explicit offset.
    MPI_File_read_at / PMPI_File_read_at(offset: i64) => access(Dir::Read, At::Offset(offset)));

blocking!(/// Writes at an explicit offset.
    MPI_File_write_at / PMPI_File_write_at(offset: i64) => access(Dir::Write, At::Offset(offset)));

blocking!(/// Reads at an explicit offset (collective).
    MPI_File_read_at_all / PMPI_File_read_at_all(offset: i64) => access_all(Dir::Read, At::Offset(offset)));

blocking!(/// Writes at an explicit offset (collective).
    MPI_File_write_at_all / PMPI_File_write_at_all(offset: i64) => access_all(Dir::Write, At::Offset(offset)));

blocking!(/// Reads at the individual file pointer.
    MPI_File_read / PMPI_File_read() => access(Dir::Read, At::Individual));

blocking!(/// Writes at the individual file pointer.
    MPI_File_write / PMPI_File_write() => access(Dir::Write, At::Individual));

blocking!(/// Reads at the individual file pointer (collective).
    MPI_File_read_all / PMPI_File_read_all() => access_all(Dir::Read, At::Individual));

blocking!(/// Writes at the individual file pointer (collective).
    MPI_File_write_all / PMPI_File_write_all() => access_all(Dir::Write, At::Individual));

blocking!(/// Reads at the shared file pointer.
    MPI_File_read_shared / PMPI_File_read_shared() => access(Dir::Read, At::Shared));

blocking!(/// Writes at the shared file pointer.
    MPI_File_write_shared / PMPI_File_write_shared() => access(Dir::Write, At::Shared));

mpi! {
    /// Reads in rank order at the shared file pointer (collective).
    fn MPI_File_read_ordered / PMPI_File_read_ordered(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut MpiStatus) on file fh => {
        let f = file(fh)?;
        done(ordered(&f, Dir::Read, buf, count.into(), datatype)?, status)
    }
}

mpi! {
    /// Writes in rank order at the shared file pointer (collective).
    fn MPI_File_write_ordered / PMPI_File_write_ordered(fh: Handle, buf: *const c_void, count: c_int, datatype: Handle, status: *mut MpiStatus) on file fh => {
        let f = file(fh)?;
        done(ordered(&f, Dir::Write, buf as *mut c_void, count.into(), datatype)?, status)
    }
}

macro_rules! nonblocking {
    ($(#[$doc:meta])* $name:ident / $pname:ident ($($arg:ident: $ty:ty),*) => $how:ident($dir:expr, $at:expr)) => {
        nonblocking!($(#[$doc])* [c_int] $name / $pname ($($arg: $ty),*) => $how($dir, $at));
    };
    ($(#[$doc:meta])* [$cty:ty] $name:ident / $pname:ident ($($arg:ident: $ty:ty),*) => $how:ident($dir:expr, $at:expr)) => {
        mpi! {
            $(#[$doc])*
            fn $name / $pname(fh: Handle, $($arg: $ty,)* buf: *mut c_void, count: $cty, datatype: Handle, request: *mut Handle) on file fh => {
                let f = file(fh)?;
                let o = $how(&f, $dir, $at, buf, i64::from(count), datatype)?;
                done_request(&f, o, request)
            }
        }
    };
}

nonblocking!(/// Starts a read at an explicit offset.
    MPI_File_iread_at / PMPI_File_iread_at(offset: i64) => access(Dir::Read, At::Offset(offset)));

nonblocking!(/// Starts a write at an explicit offset.
    MPI_File_iwrite_at / PMPI_File_iwrite_at(offset: i64) => access(Dir::Write, At::Offset(offset)));

nonblocking!(/// Starts a read at an explicit offset (collective).
    MPI_File_iread_at_all / PMPI_File_iread_at_all(offset: i64) => access(Dir::Read, At::Offset(offset)));

nonblocking!(/// Starts a write at an explicit offset (collective).
    MPI_File_iwrite_at_all / PMPI_File_iwrite_at_all(offset: i64) => access(Dir::Write, At::Offset(offset)));

nonblocking!(/// Starts a read at the individual file pointer.
    MPI_File_iread / PMPI_File_iread() => access(Dir::Read, At::Individual));

nonblocking!(/// Starts a write at the individual file pointer.
    MPI_File_iwrite / PMPI_File_iwrite() => access(Dir::Write, At::Individual));

nonblocking!(/// Starts a read at the individual file pointer (collective).
    MPI_File_iread_all / PMPI_File_iread_all() => access(Dir::Read, At::Individual));

nonblocking!(/// Starts a write at the individual file pointer (collective).
    MPI_File_iwrite_all / PMPI_File_iwrite_all() => access(Dir::Write, At::Individual));

nonblocking!(/// Starts a read at the shared file pointer.
    MPI_File_iread_shared / PMPI_File_iread_shared() => access(Dir::Read, At::Shared));

nonblocking!(/// Starts a write at the shared file pointer.
    MPI_File_iwrite_shared / PMPI_File_iwrite_shared() => access(Dir::Write, At::Shared));

macro_rules! split {
    ($(#[$doc:meta])* $bname:ident / $pbname:ident, $ename:ident / $pename:ident ($($arg:ident: $ty:ty),*) => $how:ident($dir:expr, $at:expr)) => {
        mpi! {
            $(#[$doc])*
            fn $bname / $pbname(fh: Handle, $($arg: $ty,)* buf: *mut c_void, count: c_int, datatype: Handle) on file fh => {
                let f = file(fh)?;
                begin(&f, $how(&f, $dir, $at, buf, count.into(), datatype))
            }
        }
        mpi! {
            $(#[$doc])*
            fn $ename / $pename(fh: Handle, _buf: *mut c_void, status: *mut MpiStatus) on file fh => {
                end(fh, status)
            }
        }
    };
}

split!(/// Split collective read at an explicit offset.
    MPI_File_read_at_all_begin / PMPI_File_read_at_all_begin, MPI_File_read_at_all_end / PMPI_File_read_at_all_end
    (offset: i64) => access_all(Dir::Read, At::Offset(offset)));

split!(/// Split collective write at an explicit offset.
    MPI_File_write_at_all_begin / PMPI_File_write_at_all_begin, MPI_File_write_at_all_end / PMPI_File_write_at_all_end
    (offset: i64) => access_all(Dir::Write, At::Offset(offset)));

split!(/// Split collective read at the individual file pointer.
    MPI_File_read_all_begin / PMPI_File_read_all_begin, MPI_File_read_all_end / PMPI_File_read_all_end
    () => access_all(Dir::Read, At::Individual));

split!(/// Split collective write at the individual file pointer.
    MPI_File_write_all_begin / PMPI_File_write_all_begin, MPI_File_write_all_end / PMPI_File_write_all_end
    () => access_all(Dir::Write, At::Individual));

mpi! {
    /// Split collective ordered read: begin.
    fn MPI_File_read_ordered_begin / PMPI_File_read_ordered_begin(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle) on file fh => {
        let f = file(fh)?;
        begin(&f, ordered(&f, Dir::Read, buf, count.into(), datatype))
    }
}

mpi! {
    /// Split collective ordered read: end.
    fn MPI_File_read_ordered_end / PMPI_File_read_ordered_end(fh: Handle, _buf: *mut c_void, status: *mut MpiStatus) on file fh => {
        end(fh, status)
    }
}

mpi! {
    /// Split collective ordered write: begin.
    fn MPI_File_write_ordered_begin / PMPI_File_write_ordered_begin(fh: Handle, buf: *const c_void, count: c_int, datatype: Handle) on file fh => {
        let f = file(fh)?;
        begin(&f, ordered(&f, Dir::Write, buf as *mut c_void, count.into(), datatype))
    }
}

mpi! {
    /// Split collective ordered write: end.
    fn MPI_File_write_ordered_end / PMPI_File_write_ordered_end(fh: Handle, _buf: *const c_void, status: *mut MpiStatus) on file fh => {
        end(fh, status)
    }
}

blocking!(/// MPI_File_read_at with an MPI_Count count.
    [i64] MPI_File_read_at_c / PMPI_File_read_at_c(offset: i64) => access(Dir::Read, At::Offset(offset)));

blocking!(/// MPI_File_write_at with an MPI_Count count.
    [i64] MPI_File_write_at_c / PMPI_File_write_at_c(offset: i64) => access(Dir::Write, At::Offset(offset)));

blocking!(/// MPI_File_read_at_all with an MPI_Count count.
    [i64] MPI_File_read_at_all_c / PMPI_File_read_at_all_c(offset: i64) => access_all(Dir::Read, At::Offset(offset)));

blocking!(/// MPI_File_write_at_all with an MPI_Count count.
    [i64] MPI_File_write_at_all_c / PMPI_File_write_at_all_c(offset: i64) => access_all(Dir::Write, At::Offset(offset)));

blocking!(/// MPI_File_read with an MPI_Count count.
    [i64] MPI_File_read_c / PMPI_File_read_c() => access(Dir::Read, At::Individual));

blocking!(/// MPI_File_write with an MPI_Count count.
    [i64] MPI_File_write_c / PMPI_File_write_c() => access(Dir::Write, At::Individual));

blocking!(/// MPI_File_read_all with an MPI_Count count.
    [i64] MPI_File_read_all_c / PMPI_File_read_all_c() => access_all(Dir::Read, At::Individual));

blocking!(/// MPI_File_write_all with an MPI_Count count.
    [i64] MPI_File_write_all_c / PMPI_File_write_all_c() => access_all(Dir::Write, At::Individual));

blocking!(/// MPI_File_read_shared with an MPI_Count count.
    [i64] MPI_File_read_shared_c / PMPI_File_read_shared_c() => access(Dir::Read, At::Shared));

blocking!(/// MPI_File_write_shared with an MPI_Count count.
    [i64] MPI_File_write_shared_c / PMPI_File_write_shared_c() => access(Dir::Write, At::Shared));

nonblocking!(/// MPI_File_iread_at with an MPI_Count count.
    [i64] MPI_File_iread_at_c / PMPI_File_iread_at_c(offset: i64) => access(Dir::Read, At::Offset(offset)));

nonblocking!(/// MPI_File_iwrite_at with an MPI_Count count.
    [i64] MPI_File_iwrite_at_c / PMPI_File_iwrite_at_c(offset: i64) => access(Dir::Write, At::Offset(offset)));

nonblocking!(/// MPI_File_iread_at_all with an MPI_Count count.
    [i64] MPI_File_iread_at_all_c / PMPI_File_iread_at_all_c(offset: i64) => access(Dir::Read, At::Offset(offset)));

nonblocking!(/// MPI_File_iwrite_at_all with an MPI_Count count.
    [i64] MPI_File_iwrite_at_all_c / PMPI_File_iwrite_at_all_c(offset: i64) => access(Dir::Write, At::Offset(offset)));

nonblocking!(/// MPI_File_iread with an MPI_Count count.
    [i64] MPI_File_iread_c / PMPI_File_iread_c() => access(Dir::Read, At::Individual));

nonblocking!(/// MPI_File_iwrite with an MPI_Count count.
    [i64] MPI_File_iwrite_c / PMPI_File_iwrite_c() => access(Dir::Write, At::Individual));

nonblocking!(/// MPI_File_iread_all with an MPI_Count count.
    [i64] MPI_File_iread_all_c / PMPI_File_iread_all_c() => access(Dir::Read, At::Individual));

nonblocking!(/// MPI_File_iwrite_all with an MPI_Count count.
    [i64] MPI_File_iwrite_all_c / PMPI_File_iwrite_all_c() => access(Dir::Write, At::Individual));

nonblocking!(/// MPI_File_iread_shared with an MPI_Count count.
    [i64] MPI_File_iread_shared_c / PMPI_File_iread_shared_c() => access(Dir::Read, At::Shared));

nonblocking!(/// MPI_File_iwrite_shared with an MPI_Count count.
    [i64] MPI_File_iwrite_shared_c / PMPI_File_iwrite_shared_c() => access(Dir::Write, At::Shared));

mpi! {
    /// MPI_File_read_ordered with an MPI_Count count.
    fn MPI_File_read_ordered_c / PMPI_File_read_ordered_c(fh: Handle, buf: *mut c_void, count: i64, datatype: Handle, status: *mut MpiStatus) on file fh => {
        let f = file(fh)?;
        done(ordered(&f, Dir::Read, buf, count, datatype)?, status)
    }
}

mpi! {
    /// MPI_File_write_ordered with an MPI_Count count.
    fn MPI_File_write_ordered_c / PMPI_File_write_ordered_c(fh: Handle, buf: *const c_void, count: i64, datatype: Handle, status: *mut MpiStatus) on file fh => {
        let f = file(fh)?;
        done(ordered(&f, Dir::Write, buf as *mut c_void, count, datatype)?, status)
    }
}

mpi! {
    /// MPI_File_read_at_all_begin with an MPI_Count count.
    fn MPI_File_read_at_all_begin_c / PMPI_File_read_at_all_begin_c(fh: Handle, offset: i64, buf: *mut c_void, count: i64, datatype: Handle) on file fh => {
        let f = file(fh)?;
        begin(&f, access_all(&f, Dir::Read, At::Offset(offset), buf, count, datatype))
    }
}

mpi! {
    /// MPI_File_write_at_all_begin with an MPI_Count count.
    fn MPI_File_write_at_all_begin_c / PMPI_File_write_at_all_begin_c(fh: Handle, offset: i64, buf: *const c_void, count: i64, datatype: Handle) on file fh => {
        let f = file(fh)?;
        begin(&f, access_all(&f, Dir::Write, At::Offset(offset), buf as *mut c_void, count, datatype))
    }
}

mpi! {
    /// MPI_File_read_all_begin with an MPI_Count count.
    fn MPI_File_read_all_begin_c / PMPI_File_read_all_begin_c(fh: Handle, buf: *mut c_void, count: i64, datatype: Handle) on file fh => {
        let f = file(fh)?;
        begin(&f, access_all(&f, Dir::Read, At::Individual, buf, count, datatype))
    }
}

mpi! {
    /// MPI_File_write_all_begin with an MPI_Count count.
    fn MPI_File_write_all_begin_c / PMPI_File_write_all_begin_c(fh: Handle, buf: *const c_void, count: i64, datatype: Handle) on file fh => {
        let f = file(fh)?;
        begin(&f, access_all(&f, Dir::Write, At::Individual, buf as *mut c_void, count, datatype))
    }
}

mpi! {
    /// MPI_File_read_ordered_begin with an MPI_Count count.
    fn MPI_File_read_ordered_begin_c / PMPI_File_read_ordered_begin_c(fh: Handle, buf: *mut c_void, count: i64, datatype: Handle) on file fh => {
        let f = file(fh)?;
        begin(&f, ordered(&f, Dir::Read, buf, count, datatype))
    }
}

mpi! {
    /// MPI_File_write_ordered_begin with an MPI_Count count.
    fn MPI_File_write_ordered_begin_c / PMPI_File_write_ordered_begin_c(fh: Handle, buf: *const c_void, count: i64, datatype: Handle) on file fh => {
        let f = file(fh)?;
        begin(&f, ordered(&f, Dir::Write, buf as *mut c_void, count, datatype))
    }
}

mpi! {
    /// MPI_File_get_type_extent with an MPI_Count extent.
    fn MPI_File_get_type_extent_c / PMPI_File_get_type_extent_c(fh: Handle, datatype: Handle, extent: *mut i64) on file fh => {
        let out = out(extent, "extent")?;
        let rep = file(fh)?.st.borrow().view.rep.clone();
        let dt = running(|s| s.datatype(datatype))?;
        *out = rep.file_type(&dt)?.extent() as i64;
        Ok(())
    }
}

mpi! {
    /// Moves the individual file pointer.
    fn MPI_File_seek / PMPI_File_seek(fh: Handle, offset: i64, whence: c_int) on file fh => {
        let f = file(fh)?;
        if f.amode & MPI_MODE_SEQUENTIAL != 0 {
            return fail(MPI_ERR_UNSUPPORTED_OPERATION, "a file opened with MPI_MODE_SEQUENTIAL has no individual file pointer");
        }
        let (view, pos) = { let st = f.st.borrow(); (st.view.clone(), st.pos) };
        let to = seek_target(&f, &view, offset, whence, pos)?;
        f.st.borrow_mut().pos = to;
        Ok(())
    }
}

mpi! {
    /// The individual file pointer, in etypes.
    fn MPI_File_get_position / PMPI_File_get_position(fh: Handle, offset: *mut i64) on file fh => {
        let out = out(offset, "offset")?;
        *out = file(fh)?.st.borrow().pos as i64;
        Ok(())
    }
}

mpi! {
    /// Moves the shared file pointer (collective: every rank passes the same arguments).
    fn MPI_File_seek_shared / PMPI_File_seek_shared(fh: Handle, offset: i64, whence: c_int) on file fh => {
        let f = file(fh)?;
        let local = (|| {
            let sp = shared(&f)?;
            if f.comm.rank() == 0 {
                let view = f.st.borrow().view.clone();
                let mut err = None;
                sp.update(|old| match seek_target(&f, &view, offset, whence, old) {
                    Ok(to) => Ok(to),
                    Err(e) => { err = Some(e); Ok(old) }
                })?;
                if let Some(e) = err { return Err(e); }
            }
            Ok(())
        })();
        agree(&f.comm, local, "MPI_File_seek_shared")
    }
}

mpi! {
    /// The shared file pointer, in etypes.
    fn MPI_File_get_position_shared / PMPI_File_get_position_shared(fh: Handle, offset: *mut i64) on file fh => {
        let out = out(offset, "offset")?;
        let f = file(fh)?;
        *out = shared(&f)?.update(Ok)? as i64;
        Ok(())
    }
}

mpi! {
    /// Creates an error handler for files.
    fn MPI_File_create_errhandler / PMPI_File_create_errhandler(function: Option<CommErrhandlerFn>, errhandler: *mut Handle) on file MPI_FILE_NULL => {
        let out = out(errhandler, "errhandler")?;
        let Some(f) = function else { return fail(MPI_ERR_ARG, "error handler function is NULL") };
        *out = running(|s| Ok(s.errhandlers.insert(f)))?;
        Ok(())
    }
}

mpi! {
    /// Sets a file's error handler (MPI_FILE_NULL's is the one MPI_File_open uses).
    fn MPI_File_set_errhandler / PMPI_File_set_errhandler(fh: Handle, errhandler: Handle) on file fh => {
        valid_errhandler(errhandler)?;
        if fh == MPI_FILE_NULL {
            return running(|s| { s.file_null_errhandler = errhandler; Ok(()) });
        }
        file(fh)?.st.borrow_mut().errhandler = errhandler;
        Ok(())
    }
}

mpi! {
    /// A file's error handler.
    fn MPI_File_get_errhandler / PMPI_File_get_errhandler(fh: Handle, errhandler: *mut Handle) on file fh => {
        let out = out(errhandler, "errhandler")?;
        *out = if fh == MPI_FILE_NULL {
            running(|s| Ok(s.file_null_errhandler))?
        } else {
            file(fh)?.st.borrow().errhandler
        };
        Ok(())
    }
}

mpi! {
    /// MPI_File_call_errhandler: invokes the file's handler as if a call on it had failed.
    fn MPI_File_call_errhandler / PMPI_File_call_errhandler(fh: Handle, errorcode: c_int) -> c_int, unguarded => {
        let rc = handle_file_error(
            "MPI_File_call_errhandler",
            fh,
            MpiError::new(errorcode, "raised by the program"),
        );
        crate::error::called_errhandler(rc, errorcode)
    }
}

mpi! {
    /// MPI_Register_datarep (errors go to the error handler of MPI_FILE_NULL).
    fn MPI_Register_datarep / PMPI_Register_datarep(datarep: *const c_char, read_conversion_fn: Option<ConversionFn>, write_conversion_fn: Option<ConversionFn>, dtype_file_extent_fn: Option<ExtentFn>, extra_state: *mut c_void) on file MPI_FILE_NULL => {
        register(
            datarep,
            read_conversion_fn.map(Conversion::Int),
            write_conversion_fn.map(Conversion::Int),
            dtype_file_extent_fn,
            extra_state,
        )
    }
}

mpi! {
    /// MPI_Register_datarep_c: the conversion functions take an `MPI_Count` count.
    fn MPI_Register_datarep_c / PMPI_Register_datarep_c(datarep: *const c_char, read_conversion_fn: Option<ConversionFnC>, write_conversion_fn: Option<ConversionFnC>, dtype_file_extent_fn: Option<ExtentFn>, extra_state: *mut c_void) on file MPI_FILE_NULL => {
        register(
            datarep,
            read_conversion_fn.map(Conversion::Count),
            write_conversion_fn.map(Conversion::Count),
            dtype_file_extent_fn,
            extra_state,
        )
    }
}
