//! MPI I/O (MPI-4.1 chapter 14) on POSIX files that every rank of a file's communicator sees.
//!
//! What is here: opening, closing and deleting files with every access mode; sizes, info, sync,
//! atomicity; file views (displacement, etype, a filetype with holes, and a data representation:
//! `"native"`, `"external32"`, `"internal"` or one registered by the program, see
//! [`crate::datarep`]); reads and writes at explicit offsets, through the individual file pointer and
//! through the shared file pointer, blocking, nonblocking, collective and split collective; and
//! file error handlers (MPI_ERRORS_RETURN by default, as the standard says).
//!
//! How: each rank holds its own descriptor of the file and moves data with `pread`/`pwrite`
//! (`FileExt`), one call per contiguous run of file bytes the view maps the data to (the
//! filetype is flattened by the datatype engine once, at `MPI_File_set_view`, and tiled). A
//! memory datatype with holes is packed or unpacked through one staging buffer. Blocking
//! collective calls are the independent operation followed by a barrier on the file's own
//! communicator (a dup of the one it was opened on), so data written collectively is visible to
//! every rank when the call returns; there is no two-phase aggregation. Nonblocking calls
//! (collective ones too, without the barrier) do their work when they start and return a
//! request that is already complete; split collectives do theirs in the begin call.
//!
//! The shared file pointer lives in a small side file next to the data file
//! (`.NAME.ferry-shfp.PID.N`), created by rank 0 at open, updated under an exclusive `flock`,
//! and removed at close: it needs no progress from another rank. Ordered calls take their
//! offsets from an allgather of the sizes and one update of the pointer by rank 0. In atomic mode
//! every access holds a `flock` on the data file (shared for reads, exclusive for writes).
//!
//! In a representation other than native, the view's data bytes are the file's bytes: offsets
//! and sizes in the view count the representation's sizes, and each access converts its whole
//! buffer at once in [`transfer`].
//!
//! Not here: large-count (`_c`) calls, Fortran handle conversion. Preallocation
//! extends the file (`set_len`) without reserving blocks.

use crate::abi::*;
use crate::check::out;
use crate::datarep::Representation;
use crate::datatype::Datatype;
use crate::error::{class_text, fail, MpiError, Res};
use crate::request::{Outcome, Request, Typed};
use crate::state::{running, with, InfoObj, TypeObj};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

// ---- objects ----

/// An open file.
pub(crate) struct FileObj {
    /// The file's own communicator: a dup of the one it was opened on.
    pub(crate) comm: ferry_core::Comm,
    /// The path as opened (after any `ufs:`-style prefix).
    pub(crate) path: PathBuf,
    /// This rank's descriptor.
    pub(crate) file: File,
    /// `MPI_MODE_*` bits.
    pub(crate) amode: c_int,
    /// The shared file pointer, if its side file could be made.
    pub(crate) shared: Option<SharedPointer>,
    /// What changes after open.
    pub(crate) st: RefCell<FileState>,
}

pub(crate) struct FileState {
    pub(crate) view: View,
    /// Individual file pointer, in etypes of the view.
    pub(crate) pos: u64,
    pub(crate) atomic: bool,
    pub(crate) info: InfoObj,
    pub(crate) errhandler: Handle,
    /// The result of a split collective between its begin and its end.
    split: Option<Outcome>,
}

/// A file view: where the data of this rank lies in the file.
#[derive(Clone)]
pub(crate) struct View {
    pub(crate) disp: u64,
    /// The etype as the program gave it.
    pub(crate) etype: Datatype,
    pub(crate) etype_h: Handle,
    /// The filetype as the program gave it.
    pub(crate) filetype: Datatype,
    pub(crate) filetype_h: Handle,
    /// How data is stored in the file.
    pub(crate) rep: Representation,
    /// The etype laid out in the file's representation (the etype itself for native).
    file_etype: Datatype,
    /// The filetype laid out in the file's representation: what the blocks come from.
    file_filetype: Datatype,
    /// Data blocks of one filetype element: (byte offset from the element's start, length).
    blocks: Rc<[(isize, usize)]>,
    /// Position in the data of each block's first byte.
    starts: Rc<[u64]>,
}

impl View {
    fn new(
        disp: u64,
        etype: (Datatype, Handle),
        filetype: (Datatype, Handle),
        rep: Representation,
    ) -> Res<View> {
        let file_etype = rep.file_type(&etype.0)?;
        let file_filetype = rep.file_type(&filetype.0)?;
        let blocks: Rc<[(isize, usize)]> = file_filetype.blocks().into();
        let mut at = 0u64;
        let starts = blocks
            .iter()
            .map(|&(_, len)| {
                let s = at;
                at += len as u64;
                s
            })
            .collect();
        Ok(View {
            disp,
            etype: etype.0,
            etype_h: etype.1,
            filetype: filetype.0,
            filetype_h: filetype.1,
            rep,
            file_etype,
            file_filetype,
            blocks,
            starts,
        })
    }

    fn bytes() -> Res<View> {
        let h = crate::datatype::Builtin::Byte.handle();
        let byte = running(|s| s.datatype(h))?;
        View::new(0, (byte.clone(), h), (byte, h), Representation::Native)
    }

    /// File bytes of one etype (never 0: set_view refuses empty etypes).
    fn esize(&self) -> u64 {
        self.file_etype.size().max(1) as u64
    }

    /// Calls `f(file offset, index in the data, length)` for the runs of file bytes that hold the
    /// view's data bytes `[start, start + len)`, in data order, adjacent runs merged. `f` returns
    /// whether to go on.
    fn segments(
        &self,
        start: u64,
        len: u64,
        mut f: impl FnMut(u64, usize, usize) -> Res<bool>,
    ) -> Res {
        if len == 0 {
            return Ok(());
        }
        let place = |off: i128| -> Res<u64> {
            u64::try_from(off).map_err(|_| {
                MpiError::new(
                    MPI_ERR_ARG,
                    format!("the view puts data at file offset {off}, outside the file"),
                )
            })
        };
        if self.file_filetype.is_contiguous() {
            let first = self.blocks.first().map_or(0, |b| b.0);
            let off = place(self.disp as i128 + first as i128 + start as i128)?;
            f(off, 0, len as usize)?;
            return Ok(());
        }
        let tsize = self.file_filetype.size() as u64;
        let ext = self.file_filetype.extent() as i128;
        let mut tile = start / tsize;
        let mut within = start % tsize;
        let mut i = self
            .starts
            .partition_point(|&s| s <= within)
            .saturating_sub(1);
        let mut pending: Option<(u64, usize, usize)> = None;
        let mut done = 0u64;
        while done < len {
            let (boff, blen) = self.blocks[i];
            let skip = within - self.starts[i];
            let take = (blen as u64 - skip).min(len - done);
            let off = place(self.disp as i128 + tile as i128 * ext + boff as i128 + skip as i128)?;
            pending = match pending {
                Some((o, at, l)) if o + l as u64 == off => Some((o, at, l + take as usize)),
                Some((o, at, l)) => {
                    if !f(o, at, l)? {
                        return Ok(());
                    }
                    Some((off, done as usize, take as usize))
                }
                None => Some((off, done as usize, take as usize)),
            };
            done += take;
            within += take;
            if skip + take == blen as u64 {
                i += 1;
                if i == self.blocks.len() {
                    i = 0;
                    tile += 1;
                    within = 0;
                }
            }
        }
        if let Some((o, at, l)) = pending {
            f(o, at, l)?;
        }
        Ok(())
    }

    /// Data bytes of the view that lie before file offset `size` (where the end of file is in
    /// the view).
    fn data_before(&self, size: u64) -> u64 {
        if size <= self.disp {
            return 0;
        }
        let room = (size - self.disp) as i128;
        let in_tile = |base: i128| -> u64 {
            self.blocks
                .iter()
                .map(|&(off, len)| (room - base - off as i128).clamp(0, len as i128) as u64)
                .sum()
        };
        if self.file_filetype.is_contiguous() {
            let first = self.blocks.first().map_or(0, |b| b.0) as i128;
            return (room - first).max(0) as u64;
        }
        // set_view refuses a non-contiguous filetype without a positive extent.
        let ext = self.file_filetype.extent().max(1) as i128;
        let tiles = room / ext;
        tiles as u64 * self.file_filetype.size() as u64 + in_tile(tiles * ext)
    }
}

/// The shared file pointer: an offset in etypes kept in a side file, changed under `flock`.
pub(crate) struct SharedPointer {
    file: File,
    path: PathBuf,
    /// Rank 0 made the side file and removes it at close.
    owner: bool,
}

impl SharedPointer {
    /// Replaces the pointer by `f(old)` atomically across ranks; returns the old value.
    pub(crate) fn update(&self, f: impl FnOnce(u64) -> Res<u64>) -> Res<u64> {
        let io = |e: std::io::Error| os_error(&e, "the shared file pointer of", &self.path);
        self.file.lock().map_err(io)?;
        let result = (|| {
            let mut word = [0u8; 8];
            let n = read_full_at(&self.file, &mut word, 0).map_err(io)?;
            let old = if n == 8 { u64::from_le_bytes(word) } else { 0 };
            let new = f(old)?;
            if new != old {
                self.file.write_all_at(&new.to_le_bytes(), 0).map_err(io)?;
            }
            Ok(old)
        })();
        let _ = self.file.unlock();
        result
    }
}

impl Drop for SharedPointer {
    fn drop(&mut self) {
        if self.owner {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

// ---- errors ----

/// The MPI class of an operating-system error, with a message naming the file.
pub(crate) fn os_error(e: &std::io::Error, what: &str, path: &Path) -> MpiError {
    let class = match e.raw_os_error() {
        Some(libc::ENOENT) => MPI_ERR_NO_SUCH_FILE,
        Some(libc::EACCES | libc::EPERM) => MPI_ERR_ACCESS,
        Some(libc::EEXIST) => MPI_ERR_FILE_EXISTS,
        Some(libc::ENOSPC) => MPI_ERR_NO_SPACE,
        Some(libc::EDQUOT) => MPI_ERR_QUOTA,
        Some(libc::EROFS) => MPI_ERR_READ_ONLY,
        Some(libc::EISDIR | libc::ENOTDIR | libc::ENAMETOOLONG | libc::ELOOP) => MPI_ERR_BAD_FILE,
        Some(libc::EBUSY | libc::ETXTBSY) => MPI_ERR_FILE_IN_USE,
        _ => MPI_ERR_IO,
    };
    MpiError::new(class, format!("{what} {}: {e}", path.display()))
}

/// Invokes the error handler that applies to file `fh` for `error` raised in `name`.
pub(crate) fn handle_file_error(name: &str, fh: Handle, error: MpiError) -> c_int {
    let (handler, rank) = with(|s| {
        let h = match s.files.get(fh) {
            Some(f) => {
                f.st.try_borrow()
                    .map_or(MPI_ERRORS_RETURN, |st| st.errhandler)
            }
            None => s.file_null_errhandler,
        };
        Ok((h, s.world_rank()))
    })
    .unwrap_or((MPI_ERRORS_RETURN, None));
    match handler {
        MPI_ERRORS_RETURN => error.class,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => {
            let who = rank.map_or(String::new(), |r| format!("rank {r}: "));
            crate::state::fatal(&format!(
                "{who}{name}: {} ({})",
                error.message,
                class_text(error.class)
            ))
        }
        user => {
            let f = with(|s| Ok(s.user_errhandler(user))).ok().flatten();
            let mut code = error.class;
            let mut file = fh;
            if let Some(f) = f {
                // SAFETY: the program registered `f` with MPI_File_create_errhandler (or
                // MPI_Comm_create_errhandler), whose contract is this two-pointer signature.
                unsafe { f(&mut file, &mut code) };
            }
            // The handler may change the code the call returns (MPICH's ROMIO relies on it).
            code
        }
    }
}

/// Every rank's result of a collective step: its own error, or the highest class another rank
/// failed with.
pub(crate) fn agree(comm: &ferry_core::Comm, local: Res, what: &str) -> Res {
    let mine = local.as_ref().err().map_or(0, |e| e.class);
    let mut worst = [0i32];
    comm.allreduce(&[mine], &mut worst, ferry_core::ReduceOp::Max)?;
    match local {
        Err(e) => Err(e),
        Ok(()) if worst[0] != 0 => fail(worst[0], format!("{what} failed on another rank")),
        Ok(()) => Ok(()),
    }
}

// ---- arguments ----

pub(crate) unsafe fn c_string(p: *const c_char, what: &str) -> Res<String> {
    // SAFETY: this function's contract is the unsafe operations' own: `p`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if p.is_null() {
            return fail(MPI_ERR_ARG, format!("{what} is NULL"));
        }
        Ok(CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

pub(crate) fn file(fh: Handle) -> Res<Rc<FileObj>> {
    if fh == MPI_FILE_NULL {
        return fail(MPI_ERR_FILE, "MPI_FILE_NULL is not an open file");
    }
    running(|s| {
        s.files
            .get(fh)
            .cloned()
            .ok_or_else(|| MpiError::new(MPI_ERR_FILE, format!("invalid file handle {fh:#x}")))
    })
}

pub(crate) fn info_pairs(info: Handle) -> Res<InfoObj> {
    if info == MPI_INFO_NULL || info == MPI_INFO_ENV {
        return Ok(Vec::new());
    }
    running(|s| {
        s.infos
            .get(info)
            .cloned()
            .ok_or_else(|| MpiError::new(MPI_ERR_INFO, format!("invalid info {info:#x}")))
    })
}

/// Adds (or replaces) hints.
pub(crate) fn merge_info(into: &mut InfoObj, pairs: InfoObj) {
    for (k, v) in pairs {
        match into.iter_mut().find(|(key, _)| *key == k) {
            Some(slot) => slot.1 = v,
            None => into.push((k, v)),
        }
    }
}

/// A file name as the program gave it, without a ROMIO file-system prefix (`ufs:name`).
pub(crate) fn file_path(name: &str) -> PathBuf {
    for prefix in ["ufs:", "nfs:", "file:", "lustre:", "gpfs:", "testfs:"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return PathBuf::from(rest);
        }
    }
    PathBuf::from(name)
}

/// Checks an access mode on its own (MPI-4.1 §14.2.1).
fn check_amode(amode: c_int) -> Res {
    let known = MPI_MODE_APPEND
        | MPI_MODE_CREATE
        | MPI_MODE_DELETE_ON_CLOSE
        | MPI_MODE_EXCL
        | MPI_MODE_RDONLY
        | MPI_MODE_RDWR
        | MPI_MODE_SEQUENTIAL
        | MPI_MODE_UNIQUE_OPEN
        | MPI_MODE_WRONLY;
    let access = [MPI_MODE_RDONLY, MPI_MODE_WRONLY, MPI_MODE_RDWR]
        .iter()
        .filter(|&&m| amode & m != 0)
        .count();
    let why = if amode & !known != 0 {
        "it has bits that are no MPI_MODE_* constant"
    } else if access != 1 {
        "it needs exactly one of MPI_MODE_RDONLY, MPI_MODE_WRONLY and MPI_MODE_RDWR"
    } else if amode & MPI_MODE_RDONLY != 0 && amode & (MPI_MODE_CREATE | MPI_MODE_EXCL) != 0 {
        "MPI_MODE_RDONLY excludes MPI_MODE_CREATE and MPI_MODE_EXCL"
    } else if amode & MPI_MODE_RDWR != 0 && amode & MPI_MODE_SEQUENTIAL != 0 {
        "MPI_MODE_RDWR excludes MPI_MODE_SEQUENTIAL"
    } else {
        return Ok(());
    };
    fail(
        MPI_ERR_AMODE,
        format!("invalid access mode {amode:#x}: {why}"),
    )
}

/// Reads into `buf` from `offset` until it is full or the file ends; returns the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

// ---- open, close, delete ----

static SIDE_FILES: AtomicU64 = AtomicU64::new(0);

/// Rank 0 makes the shared-pointer side file and tells the others its name; a rank that cannot
/// open it has no shared pointer (shared-pointer calls then fail there).
fn shared_pointer(comm: &ferry_core::Comm, path: &Path) -> Res<Option<SharedPointer>> {
    let mut name = Vec::new();
    let mut made = None;
    if comm.rank() == 0 {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let base = path
            .file_name()
            .map_or("file".into(), |b| b.to_string_lossy());
        let side = dir.unwrap_or(Path::new(".")).join(format!(
            ".{base}.ferry-shfp.{}.{}",
            std::process::id(),
            SIDE_FILES.fetch_add(1, Ordering::Relaxed)
        ));
        if let Ok(file) = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&side)
        {
            name = side.as_os_str().as_encoded_bytes().to_vec();
            made = Some(SharedPointer {
                file,
                path: side,
                owner: true,
            });
        }
    }
    let mut len = [name.len() as u64];
    comm.bcast(&mut len, 0)?;
    if len[0] == 0 {
        return Ok(None);
    }
    name.resize(len[0] as usize, 0);
    comm.bcast(&mut name, 0)?;
    if made.is_some() {
        return Ok(made);
    }
    let side = PathBuf::from(String::from_utf8_lossy(&name).into_owned());
    Ok(OpenOptions::new()
        .read(true)
        .write(true)
        .open(&side)
        .ok()
        .map(|file| SharedPointer {
            file,
            path: side,
            owner: false,
        }))
}

fn open_local(path: &Path, amode: c_int, create: bool) -> Res<File> {
    if path.as_os_str().is_empty() {
        return fail(MPI_ERR_BAD_FILE, "the file name is empty");
    }
    let mut o = OpenOptions::new();
    o.read(amode & MPI_MODE_WRONLY == 0)
        .write(amode & MPI_MODE_RDONLY == 0);
    if create && amode & MPI_MODE_EXCL != 0 {
        o.create_new(true);
    } else if create {
        o.create(true);
    }
    let file = o
        .open(path)
        .map_err(|e| os_error(&e, "cannot open", path))?;
    let meta = file
        .metadata()
        .map_err(|e| os_error(&e, "cannot stat", path))?;
    if meta.is_dir() {
        return fail(
            MPI_ERR_BAD_FILE,
            format!("cannot open {}: it is a directory", path.display()),
        );
    }
    Ok(file)
}

pub(crate) unsafe fn open(
    comm: Handle,
    filename: *const c_char,
    amode: c_int,
    info: Handle,
) -> Res<Handle> {
    // SAFETY: this function's contract is the unsafe operations' own: `filename`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let name = c_string(filename, "filename")?;
        let hints = info_pairs(info)?;
        let core = running(|s| s.intra_comm(comm))?;
        let own = core.dup()?;
        // Every rank must pass the same mode.
        let mut range = [0i64; 2];
        own.allreduce(
            &[amode as i64, -(amode as i64)],
            &mut range,
            ferry_core::ReduceOp::Max,
        )?;
        if range[0] != -range[1] {
            return fail(
                MPI_ERR_NOT_SAME,
                "MPI_File_open: the ranks passed different access modes",
            );
        }
        check_amode(amode)?;
        let path = file_path(&name);
        let create = amode & MPI_MODE_CREATE != 0;
        // Rank 0 creates the file (exclusively if asked); the others open what it made.
        let mut opened = None;
        if create {
            let mut class = [0i32];
            if own.rank() == 0 {
                match open_local(&path, amode, true) {
                    Ok(f) => opened = Some(Ok(f)),
                    Err(e) => {
                        class[0] = e.class;
                        opened = Some(Err(e));
                    }
                }
            }
            own.bcast(&mut class, 0)?;
            if class[0] != 0 {
                // Everyone stops here: rank 0 with its own error.
                if let Some(Err(e)) = opened {
                    return Err(e);
                }
                return fail(
                    class[0],
                    format!("rank 0 could not create {}", path.display()),
                );
            }
        }
        let opened = opened.unwrap_or_else(|| open_local(&path, amode & !MPI_MODE_EXCL, false));
        let local = opened.as_ref().map(|_| ()).map_err(Clone::clone);
        agree(&own, local, "MPI_File_open")?;
        let file = opened?;
        let shared = shared_pointer(&own, &path)?;
        let view = View::bytes()?;
        let mut pos = 0;
        if amode & MPI_MODE_APPEND != 0 {
            let size = file
                .metadata()
                .map_err(|e| os_error(&e, "cannot stat", &path))?
                .len();
            pos = size;
            if let Some(sp) = shared.as_ref().filter(|sp| sp.owner) {
                sp.update(|_| Ok(size))?;
            }
        }
        own.barrier()?;
        let errhandler = with(|s| Ok(s.file_null_errhandler))?;
        let obj = FileObj {
            comm: own,
            path,
            file,
            amode,
            shared,
            st: RefCell::new(FileState {
                view,
                pos,
                atomic: false,
                info: hints,
                errhandler,
                split: None,
            }),
        };
        running(|s| Ok(s.files.insert(Rc::new(obj))))
    }
}

// ---- size, info, sync, atomicity, group, mode ----

fn writable(f: &FileObj) -> Res {
    if f.amode & MPI_MODE_RDONLY != 0 {
        return fail(
            MPI_ERR_READ_ONLY,
            format!("{} is open read-only (MPI_MODE_RDONLY)", f.path.display()),
        );
    }
    Ok(())
}

fn readable(f: &FileObj) -> Res {
    if f.amode & MPI_MODE_WRONLY != 0 {
        return fail(
            MPI_ERR_ACCESS,
            format!("{} is open write-only (MPI_MODE_WRONLY)", f.path.display()),
        );
    }
    Ok(())
}

pub(crate) fn file_size(f: &FileObj) -> Res<u64> {
    f.file
        .metadata()
        .map(|m| m.len())
        .map_err(|e| os_error(&e, "cannot stat", &f.path))
}

/// Rank 0 changes the size (to `size`, or to at least `size`); everyone learns how it went.
pub(crate) fn resize(fh: Handle, size: i64, grow_only: bool) -> Res {
    let f = file(fh)?;
    let local = (|| {
        writable(&f)?;
        let size = u64::try_from(size)
            .map_err(|_| MpiError::new(MPI_ERR_ARG, format!("negative file size {size}")))?;
        if f.comm.rank() == 0 && (!grow_only || file_size(&f)? < size) {
            f.file
                .set_len(size)
                .map_err(|e| os_error(&e, "cannot resize", &f.path))?;
        }
        Ok(())
    })();
    agree(&f.comm, local, "resizing the file")
}

// ---- views ----

pub(crate) unsafe fn set_view(
    fh: Handle,
    disp: i64,
    etype: Handle,
    filetype: Handle,
    datarep: *const c_char,
    info: Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `datarep`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let f = file(fh)?;
        let local = (|| {
            let rep = Representation::lookup(&c_string(datarep, "datarep")?)?;
            let pairs = info_pairs(info)?;
            let (et, ft) =
                running(|s| Ok((s.committed_type(etype)?, s.committed_type(filetype)?)))?;
            // The checks apply to the types as laid out in the file; the displacement comes later.
            let view = View::new(0, (et, etype), (ft, filetype), rep)?;
            let (fet, fft) = (&view.file_etype, &view.file_filetype);
            if fet.size() == 0 {
                return fail(MPI_ERR_TYPE, "the etype holds no data");
            }
            if fft.size() == 0 || fft.size() % fet.size() != 0 {
                return fail(
                MPI_ERR_TYPE,
                format!(
                    "the filetype holds {} bytes in the file, not a positive multiple of the etype's {}",
                    fft.size(),
                    fet.size()
                ),
            );
            }
            let writing = f.amode & MPI_MODE_RDONLY == 0;
            check_typemap(fet, "etype", writing)?;
            check_typemap(fft, "filetype", writing)?;
            if fft.extent() <= 0 && !fft.is_contiguous() {
                return fail(MPI_ERR_TYPE, "the filetype's extent is not positive");
            }
            let disp = if disp == MPI_DISPLACEMENT_CURRENT {
                if f.amode & MPI_MODE_SEQUENTIAL == 0 {
                    return fail(
                        MPI_ERR_ARG,
                        "MPI_DISPLACEMENT_CURRENT needs a file opened with MPI_MODE_SEQUENTIAL",
                    );
                }
                let old = f.st.borrow().view.clone();
                let at = shared(&f)?.update(Ok)?;
                byte_offset(&old, at)?
            } else {
                u64::try_from(disp).map_err(|_| {
                    MpiError::new(MPI_ERR_ARG, format!("negative displacement {disp}"))
                })?
            };
            let mut st = f.st.borrow_mut();
            st.view = View { disp, ..view };
            st.pos = 0;
            merge_info(&mut st.info, pairs);
            Ok(())
        })();
        // Every rank has read the old shared pointer (MPI_DISPLACEMENT_CURRENT) before rank 0
        // resets it, and the others pass the second barrier only after that.
        agree(&f.comm, local, "MPI_File_set_view")?;
        let reset = match f.shared.as_ref() {
            Some(sp) if sp.owner => sp.update(|_| Ok(0)).map(|_| ()),
            _ => Ok(()),
        };
        agree(&f.comm, reset, "resetting the shared file pointer")
    }
}

/// MPI-4.1 §14.3: the displacements of an etype or filetype are non-negative and
/// non-decreasing, and in a file open for writing no two blocks overlap. ROMIO reports
/// MPI_ERR_IO otherwise.
fn check_typemap(dt: &Datatype, what: &str, writing: bool) -> Res {
    let (mut start, mut end) = (0isize, 0isize);
    for (off, len) in dt.blocks() {
        let why = if off < start {
            "must be non-negative and non-decreasing"
        } else if writing && off < end {
            "must not overlap in a file open for writing"
        } else {
            start = off;
            end = end.max(off + len as isize);
            continue;
        };
        return fail(
            MPI_ERR_IO,
            format!("the {what}'s displacements {why} (a block at byte {off})"),
        );
    }
    Ok(())
}

/// A handle for a datatype of the view: predefined ones as they are, derived ones as a new
/// handle the program frees (MPI-4.1 §14.3).
pub(crate) fn view_type(dt: &Datatype, h: Handle) -> Res<Handle> {
    if crate::datatype::builtin_from_handle(h).is_some() {
        return Ok(h);
    }
    let dup = Datatype::dup(dt);
    dup.commit();
    running(|s| {
        Ok(s.types.insert(TypeObj {
            dt: dup,
            committed: true,
            name: String::new(),
        }))
    })
}

/// The absolute byte offset of view offset `at` (in etypes).
pub(crate) fn byte_offset(view: &View, at: u64) -> Res<u64> {
    let mut found = None;
    view.segments(at * view.esize(), 1, |off, _, _| {
        found = Some(off);
        Ok(false)
    })?;
    found.ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "the view maps no byte"))
}

// ---- data access ----

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Read,
    Write,
}

/// Which offset an access starts at.
#[derive(Clone, Copy)]
pub(crate) enum At {
    /// An explicit offset in etypes.
    Offset(i64),
    /// The individual file pointer (moved past the data).
    Individual,
    /// The shared file pointer (moved past the data).
    Shared,
}

pub(crate) fn shared(f: &FileObj) -> Res<&SharedPointer> {
    f.shared.as_ref().ok_or_else(|| {
        MpiError::new(
            MPI_ERR_IO,
            format!(
                "no shared file pointer for {}: its side file could not be made next to it",
                f.path.display()
            ),
        )
    })
}

/// The buffer of one access, and how much of the file it covers.
struct Buffer {
    /// The memory data.
    t: Typed,
    /// The memory datatype's handle (a registered representation's conversion functions get it).
    datatype: Handle,
    /// Bytes the data takes in the file's representation.
    file_bytes: u64,
}

/// Bytes an access moved.
#[derive(Clone, Copy)]
struct Moved {
    /// In the file (file pointers advance by these).
    file: u64,
    /// In memory (the status counts these).
    memory: u64,
}

/// The user's buffer, checked against the file's mode and view.
fn prepare(f: &FileObj, dir: Dir, buf: *mut c_void, count: i64, datatype: Handle) -> Res<Buffer> {
    match dir {
        Dir::Read => readable(f)?,
        Dir::Write => writable(f)?,
    }
    let count = usize::try_from(count)
        .map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("negative count {count}")))?;
    let dt = running(|s| s.committed_type(datatype))?;
    let (esize, fsize) = {
        let st = f.st.borrow();
        (st.view.esize() as usize, st.view.rep.file_size(&dt)?)
    };
    if fsize % esize != 0 {
        return fail(
            MPI_ERR_IO,
            format!(
                "the datatype holds {fsize} bytes in the file, not a whole number of etypes of {esize}"
            ),
        );
    }
    if buf.is_null() && count > 0 && dt.size() > 0 && dt.as_builtin().is_some() {
        return fail(
            MPI_ERR_BUFFER,
            format!("buffer is NULL for {count} elements of a predefined type"),
        );
    }
    Ok(Buffer {
        t: Typed {
            dt,
            count,
            base: buf.cast(),
        },
        datatype,
        file_bytes: (fsize * count) as u64,
    })
}

/// Moves the data of `b` to or from the view's data bytes from etype `start`, converting it
/// between memory and the view's representation (a read stops at the end of the file).
fn transfer(f: &FileObj, view: &View, dir: Dir, b: &Buffer, start: u64) -> Res<Moved> {
    let t = &b.t;
    let bytes = t.bytes();
    if bytes == 0 || b.file_bytes == 0 {
        return Ok(Moved { file: 0, memory: 0 });
    }
    let start = start
        .checked_mul(view.esize())
        .ok_or_else(|| MpiError::new(MPI_ERR_ARG, "file offset too large"))?;
    let native = view.rep.is_native();
    // Converted (or packed) before any lock is taken: a conversion error leaves nothing held.
    let staged = match dir {
        Dir::Write if !native || t.direct().is_none() => {
            let packed = || match t.direct() {
                // SAFETY: MPI's contract: the buffer holds `count` elements, here one block.
                Some(p) => unsafe { std::slice::from_raw_parts(p, bytes) }.to_vec(),
                None => t.pack(),
            };
            Some(view.rep.encode(t, b.datatype, &packed)?)
        }
        _ => None,
    };
    let atomic = f.st.borrow().atomic;
    let io = |e: std::io::Error, what: &str| os_error(&e, what, &f.path);
    if atomic {
        match dir {
            Dir::Read => f.file.lock_shared(),
            Dir::Write => f.file.lock(),
        }
        .map_err(|e| io(e, "cannot lock"))?;
    }
    let result = match dir {
        Dir::Write => {
            let data: &[u8] = match (&staged, t.direct()) {
                (Some(staged), _) => staged,
                // SAFETY: MPI's contract: the buffer holds `count` elements, here one block.
                (None, Some(p)) => unsafe { std::slice::from_raw_parts(p, bytes) },
                (None, None) => &[],
            };
            view.segments(start, data.len() as u64, |off, at, len| {
                f.file
                    .write_all_at(&data[at..at + len], off)
                    .map_err(|e| io(e, "cannot write"))?;
                Ok(true)
            })
            .map(|()| Moved {
                file: data.len() as u64,
                memory: bytes as u64,
            })
        }
        Dir::Read => {
            let mut file_bytes;
            let direct = t.direct().filter(|_| native);
            let data: &mut [u8] = match direct {
                // SAFETY: MPI's contract: the buffer has room for `count` elements, here one
                // block.
                Some(p) => unsafe { std::slice::from_raw_parts_mut(p, bytes) },
                None => {
                    file_bytes = vec![0u8; b.file_bytes as usize];
                    &mut file_bytes
                }
            };
            let mut got = 0usize;
            let r = view.segments(start, b.file_bytes, |off, at, len| {
                let n = read_full_at(&f.file, &mut data[at..at + len], off)
                    .map_err(|e| io(e, "cannot read"))?;
                got = at + n;
                Ok(n == len)
            });
            let memory = match direct {
                Some(_) => Ok(got),
                None => view.rep.decode(t, b.datatype, &mut data[..got]),
            };
            r.and(memory).map(|memory| Moved {
                file: got as u64,
                memory: memory as u64,
            })
        }
    };
    if atomic {
        let _ = f.file.unlock();
    }
    result
}

fn outcome(bytes: u64) -> Outcome {
    Outcome {
        source: MPI_ANY_SOURCE,
        tag: MPI_ANY_TAG,
        bytes: bytes as i64,
        cancelled: false,
        error: MPI_SUCCESS,
    }
}

/// One independent access.
pub(crate) fn access(
    f: &FileObj,
    dir: Dir,
    at: At,
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
) -> Res<Outcome> {
    let b = prepare(f, dir, buf, count, datatype)?;
    if f.amode & MPI_MODE_SEQUENTIAL != 0 && !matches!(at, At::Shared) {
        return fail(
            MPI_ERR_UNSUPPORTED_OPERATION,
            "a file opened with MPI_MODE_SEQUENTIAL is accessed through the shared file pointer only",
        );
    }
    let view = f.st.borrow().view.clone();
    let etypes = b.file_bytes / view.esize();
    let start = match at {
        At::Offset(o) => u64::try_from(o)
            .map_err(|_| MpiError::new(MPI_ERR_ARG, format!("negative file offset {o}")))?,
        At::Individual => f.st.borrow().pos,
        At::Shared => shared(f)?.update(|old| Ok(old + etypes))?,
    };
    let moved = transfer(f, &view, dir, &b, start)?;
    if let At::Individual = at {
        f.st.borrow_mut().pos = start + moved.file.div_ceil(view.esize());
    }
    Ok(outcome(moved.memory))
}

/// A blocking collective access: every rank's own access, then a barrier (so collectively
/// written data is in the file for every rank when the call returns). The nonblocking forms do
/// the access alone: a barrier would block a call that must not wait for other ranks.
pub(crate) fn access_all(
    f: &FileObj,
    dir: Dir,
    at: At,
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
) -> Res<Outcome> {
    let r = access(f, dir, at, buf, count, datatype);
    f.comm.barrier()?;
    r
}

/// An ordered access (collective): ranks access the file in rank order from the shared pointer.
pub(crate) fn ordered(
    f: &FileObj,
    dir: Dir,
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
) -> Res<Outcome> {
    let prepared = prepare(f, dir, buf, count, datatype);
    let view = f.st.borrow().view.clone();
    let mine = prepared.as_ref().map_or(0, |b| b.file_bytes / view.esize());
    let mut all = vec![0u64; f.comm.size()];
    f.comm.allgather(&[mine], &mut all)?;
    let before: u64 = all[..f.comm.rank()].iter().sum();
    let total: u64 = all.iter().sum();
    let mut base = [u64::MAX];
    if f.comm.rank() == 0 {
        if let Ok(old) = shared(f).and_then(|sp| sp.update(|old| Ok(old + total))) {
            base[0] = old;
        }
    }
    f.comm.bcast(&mut base, 0)?;
    let b = prepared?;
    if base[0] == u64::MAX {
        return Err(shared(f).err().unwrap_or_else(|| {
            MpiError::new(
                MPI_ERR_IO,
                format!("rank 0 has no shared file pointer for {}", f.path.display()),
            )
        }));
    }
    let moved = transfer(f, &view, dir, &b, base[0] + before)?;
    Ok(outcome(moved.memory))
}

/// Fills a status and returns.
pub(crate) unsafe fn done(o: Outcome, status: *mut MpiStatus) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `status`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        o.write(status, false);
        Ok(())
    }
}

/// A request that is complete already (nonblocking calls do their work when they start).
pub(crate) unsafe fn done_request(f: &FileObj, o: Outcome, request: *mut Handle) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `request`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let out = out(request, "request")?;
        let core = f.comm.clone();
        *out = running(|s| Ok(s.requests.insert(Request::done(MPI_COMM_SELF, core, o))))?;
        Ok(())
    }
}

// ---- split collectives: the work happens at begin, end hands over the status ----

pub(crate) fn begin(f: &FileObj, o: Res<Outcome>) -> Res {
    let o = o?;
    let mut st = f.st.borrow_mut();
    if st.split.is_some() {
        return fail(
            MPI_ERR_OTHER,
            "a split collective is already active on this file",
        );
    }
    st.split = Some(o);
    Ok(())
}

pub(crate) unsafe fn end(fh: Handle, status: *mut MpiStatus) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `status`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let f = file(fh)?;
        let o = f.st.borrow_mut().split.take();
        match o {
            Some(o) => done(o, status),
            None => fail(MPI_ERR_OTHER, "no split collective is active on this file"),
        }
    }
}

// ---- large counts (MPI 4.0 `_c` bindings): the same calls with an MPI_Count count ----

// ---- file pointers ----

/// Where `offset` relative to `whence` lands, in etypes of `view`.
pub(crate) fn seek_target(
    f: &FileObj,
    view: &View,
    offset: i64,
    whence: c_int,
    current: u64,
) -> Res<u64> {
    let base = match whence {
        MPI_SEEK_SET => 0,
        MPI_SEEK_CUR => current as i128,
        MPI_SEEK_END => view.data_before(file_size(f)?).div_ceil(view.esize()) as i128,
        w => return fail(MPI_ERR_ARG, format!("invalid whence {w}")),
    };
    u64::try_from(base + offset as i128).map_err(|_| {
        MpiError::new(
            MPI_ERR_ARG,
            format!("seeking by {offset} would move the file pointer before the view's start"),
        )
    })
}

/// At MPI_Finalize: forgets the files the program left open (rank 0 removes their
/// shared-pointer side files).
pub(crate) fn forget_open_files() -> Res {
    let files = with(|s| {
        Ok(std::mem::replace(
            &mut s.files,
            crate::handles::Table::new(crate::handles::Kind::File),
        ))
    })?;
    drop(files);
    Ok(())
}

// ---- error handlers ----

pub(crate) fn valid_errhandler(h: Handle) -> Res {
    with(|s| crate::comm::valid_errhandler(s, h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Builtin;

    fn view_of(disp: u64, ft: Datatype) -> View {
        let byte = Datatype::builtin(Builtin::Byte);
        View::new(
            disp,
            (byte, Builtin::Byte.handle()),
            (ft, 0),
            Representation::Native,
        )
        .unwrap()
    }

    fn runs(v: &View, start: u64, len: u64) -> Vec<(u64, usize, usize)> {
        let mut out = Vec::new();
        v.segments(start, len, |o, a, l| {
            out.push((o, a, l));
            Ok(true)
        })
        .unwrap();
        out
    }

    #[test]
    fn a_vector_filetype_tiles_its_blocks() {
        let byte = Datatype::builtin(Builtin::Byte);
        // 2 blocks of 2 bytes, stride 5: data at 0,1 and 5,6; extent 7, so the second block
        // of one tile and the first of the next are adjacent in the file (one run).
        let v = Datatype::vector(2, 2, 5, &byte).unwrap();
        let view = view_of(10, v);
        assert_eq!(runs(&view, 0, 8), vec![(10, 0, 2), (15, 2, 4), (22, 6, 2)]);
        // From the middle of a block.
        assert_eq!(runs(&view, 3, 2), vec![(16, 0, 2)]);
        assert_eq!(runs(&view, 3, 4), vec![(16, 0, 3), (22, 3, 1)]);
        assert_eq!(view.data_before(16), 3);
        assert_eq!(view.data_before(10), 0);
    }

    #[test]
    fn a_contiguous_view_is_one_run() {
        let byte = Datatype::builtin(Builtin::Byte);
        let view = view_of(4, byte);
        assert_eq!(runs(&view, 3, 1000), vec![(7, 0, 1000)]);
        assert_eq!(view.data_before(10), 6);
    }

    #[test]
    fn access_modes() {
        assert!(check_amode(MPI_MODE_RDWR | MPI_MODE_CREATE).is_ok());
        assert_eq!(
            check_amode(MPI_MODE_RDONLY | MPI_MODE_CREATE)
                .unwrap_err()
                .class,
            MPI_ERR_AMODE
        );
        assert_eq!(
            check_amode(MPI_MODE_CREATE).unwrap_err().class,
            MPI_ERR_AMODE
        );
        assert_eq!(
            check_amode(MPI_MODE_RDWR | MPI_MODE_SEQUENTIAL)
                .unwrap_err()
                .class,
            MPI_ERR_AMODE
        );
        assert_eq!(
            check_amode(MPI_MODE_RDWR | MPI_MODE_WRONLY)
                .unwrap_err()
                .class,
            MPI_ERR_AMODE
        );
    }
}
