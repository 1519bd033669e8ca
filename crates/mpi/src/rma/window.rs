//! Windows and what is done with them, for the entry points of `entry/one_sided.rs`: creation
//! and allocation (also shared), their attributes, the operations cut into pieces, and the
//! synchronisation calls.
//!
//! Each call looks the window up while the library state is borrowed, takes out what it needs
//! (the runtime communicator and the shared [`Win`]), and sends and waits after the borrow has
//! ended: the runtime's handler borrows the [`Win`] inside progress, so no borrow of it is held
//! across a call that makes progress.

use super::wire::{kind, Writer, BLOCK_LEN, HEADER_MAX};
use super::{Landing, Memory, Win};
use crate::abi::*;
use crate::check::out;
use crate::datatype::Datatype;
use crate::error::{fail, MpiError, Res};
use crate::ops::BuiltinOp;
use crate::request::{Outcome, Request};
use crate::state::{running, AttrKind, Attrs, InfoObj, State};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::rc::Rc;

/// Every rank's window as the others see it (exchanged at creation).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer {
    /// Window length in bytes.
    pub(crate) size: usize,
    /// Displacement unit.
    pub(crate) disp_unit: usize,
    /// Base address in that rank's process.
    pub(crate) base: usize,
}

/// Values the predefined window attributes point to (boxed: their addresses are handed out).
#[derive(Debug)]
pub(crate) struct AttrValues {
    pub(crate) size: isize,
    pub(crate) disp_unit: c_int,
    pub(crate) flavor: c_int,
    pub(crate) model: c_int,
}

/// The epochs this rank has open on a window.
#[derive(Debug, Default)]
pub(crate) struct Epoch {
    /// Between fences (a fence without MPI_MODE_NOSUCCEED opens one).
    pub(crate) fence: bool,
    /// Targets of an access epoch (MPI_Win_start).
    pub(crate) access: Option<Vec<usize>>,
    /// Origins of an exposure epoch (MPI_Win_post).
    pub(crate) exposure: Option<Vec<usize>>,
    /// Locks held per target: Some(nocheck).
    pub(crate) locks: Vec<Option<bool>>,
    /// MPI_Win_lock_all held: Some(nocheck).
    pub(crate) lock_all: Option<bool>,
}

impl Epoch {
    fn may_access(&self, target: usize) -> bool {
        self.fence
            || self.lock_all.is_some()
            || self.locks.get(target).is_some_and(|l| l.is_some())
            || self.access.as_ref().is_some_and(|g| g.contains(&target))
    }

    fn passive(&self, target: usize) -> bool {
        self.lock_all.is_some() || self.locks.get(target).is_some_and(|l| l.is_some())
    }
}

/// A window as the C side sees it.
pub(crate) struct WinObj {
    /// The window's communicator (a duplicate: its context carries only window traffic).
    pub(crate) core: ferry_core::Comm,
    /// The state the runtime's handler shares.
    pub(crate) shared: Rc<RefCell<Win>>,
    /// Its error handler.
    pub(crate) errhandler: Handle,
    /// `MPI_Win_set_name`.
    pub(crate) name: String,
    /// Cached attributes.
    pub(crate) attrs: Attrs,
    /// Every rank's window.
    pub(crate) peers: Vec<Peer>,
    pub(crate) values: Box<AttrValues>,
    pub(crate) epoch: Epoch,
    /// Memory from MPI_Win_allocate(_shared), freed with the window.
    pub(crate) allocated: Option<Allocation>,
    /// For MPI_Win_allocate_shared: where each rank's part is mapped in this process.
    local_bases: Option<Vec<usize>>,
    /// Hints given (`MPI_Win_set_info`).
    pub(crate) info: InfoObj,
}

pub(crate) fn win_obj(s: &State, win: Handle) -> Res<&WinObj> {
    s.wins
        .get(win)
        .ok_or_else(|| MpiError::new(MPI_ERR_WIN, format!("invalid window {win:#x}")))
}

pub(crate) fn win_mut(s: &mut State, win: Handle) -> Res<&mut WinObj> {
    s.wins
        .get_mut(win)
        .ok_or_else(|| MpiError::new(MPI_ERR_WIN, format!("invalid window {win:#x}")))
}

pub(crate) fn sync_error<T>(what: impl Into<String>) -> Res<T> {
    fail(MPI_ERR_RMA_SYNC, what)
}

// ---- creation and freeing ----

/// Sets every hint of `given` in `hints` (replacing a value the key had).
pub(crate) fn merge_hints(hints: &mut InfoObj, given: InfoObj) {
    for (k, v) in given {
        match hints.iter_mut().find(|(key, _)| *key == k) {
            Some(slot) => slot.1 = v,
            None => hints.push((k, v)),
        }
    }
}

/// Memory a window owns.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Allocation {
    /// From malloc (MPI_Win_allocate).
    Heap(*mut c_void),
    /// A shared mapping of `len` bytes holding every rank's part (MPI_Win_allocate_shared).
    Mapped(*mut c_void, usize),
}

impl Allocation {
    /// Gives the memory back.
    ///
    /// # Safety
    /// Nothing may use the memory afterwards.
    pub(crate) unsafe fn release(self) {
        // SAFETY: the caller keeps this function's `# Safety`: Nothing may use the memory
        // afterwards.
        unsafe {
            match self {
                // SAFETY: from malloc in `allocate`.
                Allocation::Heap(p) => libc::free(p),
                // SAFETY: mapped by `map_shared` with this length.
                Allocation::Mapped(p, len) => {
                    libc::munmap(p, len);
                }
            }
        }
    }
}

/// Creates a window over `size` bytes at `base` on `comm` (collective).
pub(crate) unsafe fn create(
    comm: Handle,
    base: *mut u8,
    size: isize,
    disp_unit: c_int,
    flavor: c_int,
    allocated: Option<Allocation>,
    info: Handle,
) -> Res<Handle> {
    // SAFETY: this function's contract is the unsafe operations' own: `base`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let release = |e: MpiError| {
            if let Some(a) = allocated {
                // SAFETY: not handed out yet.
                a.release();
            }
            e
        };
        let (core, hints) = running(|s| {
            let given =
                match info {
                    MPI_INFO_NULL => Vec::new(),
                    h => s.infos.get(h).cloned().ok_or_else(|| {
                        MpiError::new(MPI_ERR_INFO, format!("invalid info {h:#x}"))
                    })?,
                };
            // The standard's defaults, then what the program gave.
            let mut hints: InfoObj = vec![
                ("accumulate_ordering".into(), "rar,raw,war,waw".into()),
                ("accumulate_ops".into(), "same_op_no_op".into()),
            ];
            merge_hints(&mut hints, given);
            Ok((s.intra_comm(comm)?, hints))
        })
        .map_err(release)?;
        let Ok(size) = usize::try_from(size) else {
            return Err(release(MpiError::new(
                MPI_ERR_SIZE,
                format!("negative window size {size}"),
            )));
        };
        if disp_unit <= 0 {
            return Err(release(MpiError::new(
                MPI_ERR_DISP,
                format!("displacement unit {disp_unit} is not positive"),
            )));
        }
        let wcomm = core.dup().map_err(|e| release(e.into()))?;
        let n = wcomm.size();
        let mine = [size as u64, disp_unit as u64, base as u64];
        let mut all = vec![0u64; 3 * n];
        wcomm
            .allgather(&mine, &mut all)
            .map_err(|e| release(e.into()))?;
        let peers: Vec<Peer> = all
            .chunks_exact(3)
            .map(|c| Peer {
                size: c[0] as usize,
                disp_unit: c[1] as usize,
                base: c[2] as usize,
            })
            .collect();
        let memory = match flavor {
            MPI_WIN_FLAVOR_DYNAMIC => Memory::Dynamic {
                regions: Vec::new(),
            },
            _ => Memory::Fixed { base, size },
        };
        let shared = Rc::new(RefCell::new(Win::new(n, memory)));
        let handler = shared.clone();
        wcomm.set_active_handler(move |from, tag, data, replies| {
            handler.borrow_mut().handle(from, tag, data, replies)
        });
        // Every member serves the window before anyone may address it.
        wcomm.barrier().map_err(|e| release(e.into()))?;
        let obj = WinObj {
            core: wcomm,
            shared,
            errhandler: MPI_ERRORS_ARE_FATAL,
            name: String::new(),
            attrs: Attrs::default(),
            peers,
            values: Box::new(AttrValues {
                size: size as isize,
                disp_unit,
                flavor,
                model: MPI_WIN_UNIFIED,
            }),
            epoch: Epoch {
                locks: vec![None; n],
                ..Epoch::default()
            },
            allocated,
            local_bases: None,
            info: hints,
        };
        running(|s| Ok(s.wins.insert(obj)))
    }
}

/// Memory for MPI_Win_allocate: at least one byte, so the address is unique.
unsafe fn allocate(size: isize) -> Res<*mut c_void> {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        let Ok(n) = usize::try_from(size) else {
            return fail(MPI_ERR_SIZE, format!("negative window size {size}"));
        };
        let p = libc::malloc(n.max(1));
        if p.is_null() {
            return fail(MPI_ERR_NO_MEM, format!("cannot allocate {n} bytes"));
        }
        Ok(p)
    }
}

/// The displacement unit of a `_c` window call: windows keep it as an `int` (the unit of one
/// element, which no element type exceeds).
pub(crate) fn disp_unit_c(disp_unit: isize) -> Res<c_int> {
    c_int::try_from(disp_unit).map_err(|_| {
        MpiError::new(
            MPI_ERR_DISP,
            format!("displacement unit {disp_unit} is beyond {}", c_int::MAX),
        )
    })
}

/// MPI_Win_allocate. Safety: `baseptr` and `win` are the caller's output arguments (MPI's
/// contract: valid or NULL, which is reported).
pub(crate) unsafe fn win_allocate(
    size: isize,
    disp_unit: c_int,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `baseptr` and `win`, as
    // the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let win_out = out(win, "win")?;
        let base_out = out(baseptr as *mut *mut c_void, "baseptr")?;
        let p = allocate(size)?;
        *win_out = create(
            comm,
            p as *mut u8,
            size,
            disp_unit,
            MPI_WIN_FLAVOR_ALLOCATE,
            Some(Allocation::Heap(p)),
            info,
        )?;
        *base_out = p;
        Ok(())
    }
}
/// Maps one shared segment for every rank of `comm` (all on this host), each rank's part after
/// the previous one's; returns the mapping, its length and where each rank's part starts.
unsafe fn map_shared(
    comm: &ferry_core::Comm,
    size: usize,
) -> Res<(*mut c_void, usize, Vec<usize>)> {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        let n = comm.size();
        let mut host = [0u8; 64];
        // SAFETY: the buffer holds 64 bytes; the last stays 0.
        libc::gethostname(host.as_mut_ptr() as *mut c_char, 63);
        let mut hosts = vec![0u8; 64 * n];
        comm.allgather(&host, &mut hosts)?;
        let mut sizes = vec![0u64; n];
        comm.allgather(&[size as u64], &mut sizes)?;
        if hosts.chunks_exact(64).any(|h| h != host) {
            return fail(
                MPI_ERR_RMA_SHARED,
                "MPI_Win_allocate_shared needs every rank on one host",
            );
        }
        let total: usize = sizes.iter().map(|&s| s as usize).sum();
        let len = total.max(1);
        // Rank 0 names the segment; everyone opens it; it is unlinked once all have it mapped.
        let mut id = [
            std::process::id() as u64,
            NEXT_SEGMENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        ];
        comm.bcast(&mut id, 0)?;
        let name = std::ffi::CString::new(format!("/ferry-win-{}-{}", id[0], id[1]))
            .map_err(|_| MpiError::new(MPI_ERR_INTERN, "segment name"))?;
        let me = comm.rank();
        let flags = if me == 0 {
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR
        } else {
            libc::O_RDWR
        };
        if me != 0 {
            comm.barrier()?; // rank 0 has created it
        }
        // SAFETY: plain system calls on a name and descriptor of our own.
        let fd = libc::shm_open(name.as_ptr(), flags, 0o600);
        let mapped = if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            let sized = me != 0 || libc::ftruncate(fd, len as libc::off_t) == 0;
            let p = if sized {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            } else {
                libc::MAP_FAILED
            };
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            if p == libc::MAP_FAILED {
                Err(e)
            } else {
                Ok(p)
            }
        };
        if me == 0 {
            comm.barrier()?;
        }
        comm.barrier()?; // everyone has it open
        if me == 0 {
            libc::shm_unlink(name.as_ptr());
        }
        let p = mapped.map_err(|e| {
            MpiError::new(
                MPI_ERR_NO_MEM,
                format!("shared window segment of {len} bytes: {e}"),
            )
        })?;
        let mut at = 0;
        let starts = sizes
            .iter()
            .map(|&s| {
                let start = p as usize + at;
                at += s as usize;
                start
            })
            .collect();
        Ok((p, len, starts))
    }
}

/// Numbers the shared segments this process names.
static NEXT_SEGMENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// MPI_Win_allocate_shared. Safety: as [`win_allocate`].
pub(crate) unsafe fn win_allocate_shared(
    size: isize,
    disp_unit: c_int,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `baseptr` and `win`, as
    // the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let win_out = out(win, "win")?;
        let base_out = out(baseptr as *mut *mut c_void, "baseptr")?;
        let Ok(bytes) = usize::try_from(size) else {
            return fail(MPI_ERR_SIZE, format!("negative window size {size}"));
        };
        let core = running(|s| s.intra_comm(comm))?;
        let (p, len, starts) = map_shared(&core, bytes)?;
        let mine = starts[core.rank()] as *mut u8;
        let h = create(
            comm,
            mine,
            size,
            disp_unit,
            MPI_WIN_FLAVOR_SHARED,
            Some(Allocation::Mapped(p, len)),
            info,
        )?;
        running(|s| {
            win_mut(s, h)?.local_bases = Some(starts);
            Ok(())
        })?;
        *win_out = h;
        *base_out = mine as *mut c_void;
        Ok(())
    }
}

/// Size, displacement unit and local address of `rank`'s part of a window, as far as this
/// process can reach it. MPI 4.1 allows the query on windows from MPI_Win_create and
/// MPI_Win_allocate too: there only this process's own memory is reachable, other ranks'
/// parts answer size 0 and NULL (MPI_PROC_NULL names the lowest rank with memory, as for
/// shared windows).
pub(crate) fn shared_query(win: Handle, rank: c_int) -> Res<(isize, c_int, *mut c_void)> {
    let (peer, local) = running(|s| {
        let w = win_obj(s, win)?;
        let Some(local) = &w.local_bases else {
            if w.values.flavor == MPI_WIN_FLAVOR_DYNAMIC {
                return fail(
                    MPI_ERR_RMA_FLAVOR,
                    "MPI_Win_shared_query is not defined on a window from MPI_Win_create_dynamic",
                );
            }
            let (n, me) = (w.peers.len(), w.core.rank());
            let r = if rank == MPI_PROC_NULL {
                (0..n).find(|&r| w.peers[r].size > 0).unwrap_or(0)
            } else {
                rank_arg(rank, n)?
            };
            let own = w.peers[r];
            if r != me {
                let unreachable = Peer {
                    size: 0,
                    base: 0,
                    ..own
                };
                return Ok((unreachable, 0));
            }
            return Ok((own, own.base));
        };
        let n = w.peers.len();
        let r = if rank == MPI_PROC_NULL {
            (0..n).find(|&r| w.peers[r].size > 0).unwrap_or(0)
        } else {
            rank_arg(rank, n)?
        };
        Ok((w.peers[r], local[r]))
    })?;
    let base = if peer.size == 0 {
        std::ptr::null_mut()
    } else {
        local as *mut c_void
    };
    Ok((peer.size as isize, peer.disp_unit as c_int, base))
}

// ---- names, info, error handlers ----

// ---- attributes ----

pub(crate) fn check_keyval(s: &State, keyval: c_int) -> Res {
    if (MPI_WIN_BASE..=MPI_WIN_MODEL).contains(&keyval) {
        return fail(
            MPI_ERR_KEYVAL,
            format!("predefined attribute {keyval} cannot be changed"),
        );
    }
    s.keyval(keyval, AttrKind::Win).map(drop)
}

/// Runs the delete callback of `keyval` on a window attribute (the same call as a
/// communicator's: both callbacks take the object handle first).
pub(crate) unsafe fn call_delete(win: Handle, keyval: c_int, value: *mut c_void) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `value`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe { crate::comm::call_delete(win, keyval, value) }
}

// ---- operations ----

/// Where an operation goes, taken out of the state.
pub(crate) struct Target {
    core: ferry_core::Comm,
    shared: Rc<RefCell<Win>>,
    rank: usize,
    /// Byte offset of the displacement in the target window (an address for dynamic windows).
    pub(crate) offset: i128,
    /// The target window's length; `None` for dynamic windows (the target checks).
    size: Option<usize>,
    limit: usize,
}

/// Looks up target `rank` at displacement `disp`; `None` for MPI_PROC_NULL.
pub(crate) fn target(s: &State, win: Handle, rank: c_int, disp: isize) -> Res<Option<Target>> {
    let w = win_obj(s, win)?;
    if rank == MPI_PROC_NULL {
        return Ok(None);
    }
    let n = w.peers.len();
    let Some(r) = usize::try_from(rank).ok().filter(|&r| r < n) else {
        return fail(
            MPI_ERR_RANK,
            format!("target rank {rank} is not in a window of {n} ranks"),
        );
    };
    if !w.epoch.may_access(r) {
        return sync_error(format!(
            "no access epoch is open to rank {r} (fence, MPI_Win_start or a lock first)"
        ));
    }
    let peer = w.peers[r];
    let dynamic = w.values.flavor == MPI_WIN_FLAVOR_DYNAMIC;
    Ok(Some(Target {
        core: w.core.clone(),
        shared: w.shared.clone(),
        rank: r,
        offset: if dynamic {
            disp as i128
        } else {
            disp as i128 * peer.disp_unit as i128
        },
        size: (!dynamic).then_some(peer.size),
        limit: w.core.active_limit(r)?,
    }))
}

/// `count` elements of a datatype at an address.
pub(crate) struct Buf {
    pub(crate) base: *mut u8,
    pub(crate) count: usize,
    pub(crate) dt: Datatype,
}

impl Buf {
    fn bytes(&self) -> usize {
        self.dt.size() * self.count
    }
}

fn buf(s: &mut State, base: *const c_void, count: i64, datatype: Handle) -> Res<Buf> {
    Ok(Buf {
        base: base as *mut u8,
        count: usize::try_from(count)
            .map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("negative count {count}")))?,
        dt: s.committed_type(datatype)?,
    })
}

/// An origin or result buffer of the caller's: [`buf`], and memory the program can have
/// ([`crate::check::buffer`]).
fn user_buf(s: &mut State, base: *const c_void, count: i64, datatype: Handle) -> Res<Buf> {
    let b = buf(s, base, count, datatype)?;
    crate::check::buffer(base, b.count, &b.dt)?;
    Ok(b)
}

/// MPI_ERR_RMA_RANGE unless the target data lies in the target's window.
pub(crate) fn check_range(t: &Target, tb: &Buf) -> Res {
    let Some(size) = t.size else { return Ok(()) };
    if tb.count == 0 || tb.dt.size() == 0 {
        return Ok(());
    }
    let last = (tb.count as i128 - 1) * tb.dt.extent() as i128;
    let lo = t.offset + tb.dt.true_lb() as i128 + last.min(0);
    let hi = t.offset + tb.dt.true_ub() as i128 + last.max(0);
    if lo < 0 || hi > size as i128 {
        return fail(
            MPI_ERR_RMA_RANGE,
            format!(
                "bytes {lo}..{hi} are outside the {size}-byte window of rank {}",
                t.rank
            ),
        );
    }
    Ok(())
}

/// A piece of an operation: packed offset, length, target blocks.
type Piece = (usize, usize, Vec<(u64, u64)>);

/// Cuts the `total` packed bytes of the target data into pieces whose messages (request and
/// answer) fit the runtime's limit; piece lengths are multiples of `unit` but for the last.
fn pieces(t: &Target, tb: &Buf, total: usize, unit: usize) -> Res<Vec<Piece>> {
    let room = t.limit.saturating_sub(HEADER_MAX + 16);
    let mut out = Vec::new();
    let mut skip = 0;
    while skip < total {
        let left = total - skip;
        let mut len = left.min(room.saturating_sub(BLOCK_LEN));
        loop {
            if len < left {
                len -= len % unit.max(1);
            }
            if len == 0 {
                return fail(
                    MPI_ERR_INTERN,
                    format!(
                        "messages to rank {} hold only {} bytes, too few for one element",
                        t.rank, t.limit
                    ),
                );
            }
            let blocks = target_blocks(t, tb, skip, len);
            if blocks.len() * BLOCK_LEN + len <= room {
                out.push((skip, len, blocks));
                skip += len;
                break;
            }
            len /= 2;
        }
    }
    Ok(out)
}

/// The target blocks of packed bytes `[skip, skip + len)`, adjacent ones merged.
fn target_blocks(t: &Target, tb: &Buf, skip: usize, len: usize) -> Vec<(u64, u64)> {
    if let Some(start) = tb.dt.contiguous_span(tb.count) {
        let off = t.offset + start as i128 + skip as i128;
        return vec![(off as u64, len as u64)];
    }
    let mut blocks: Vec<(u64, u64)> = Vec::new();
    tb.dt.for_each_block(tb.count, skip, len, |off, _, l| {
        let at = (t.offset + off as i128) as u64;
        match blocks.last_mut() {
            Some((o, n)) if o.wrapping_add(*n) == at => *n += l as u64,
            _ => blocks.push((at, l as u64)),
        }
    });
    blocks
}

pub(crate) fn send(t: &Target, tag: i32, msg: Vec<u8>) -> Res {
    t.shared.borrow_mut().pending[t.rank] += 1;
    t.core.send_active(t.rank, tag, msg)?;
    Ok(())
}

/// Registers where the answer to a read lands; returns its id.
pub(crate) fn land(t: &Target, to: &Buf, skip: usize) -> u64 {
    let mut w = t.shared.borrow_mut();
    let id = w.next_id();
    w.landings.insert(
        id,
        Landing {
            dt: to.dt.clone(),
            count: to.count,
            base: to.base,
            skip,
        },
    );
    id
}

fn same_len(a: usize, b: usize, what: &str) -> Res {
    if a != b {
        return fail(
            MPI_ERR_ARG,
            format!("{what} holds {a} bytes, the target data {b}"),
        );
    }
    Ok(())
}

pub(crate) unsafe fn put(origin: Buf, t: Target, tb: Buf) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        check_range(&t, &tb)?;
        same_len(origin.bytes(), tb.bytes(), "the origin data")?;
        for (skip, len, blocks) in pieces(&t, &tb, tb.bytes(), 1)? {
            let mut w = Writer::new(HEADER_MAX + blocks.len() * BLOCK_LEN + len).blocks(&blocks);
            // SAFETY: MPI's contract: the origin buffer holds `count` elements of its type.
            origin
                .dt
                .pack_partial(origin.base, origin.count, skip, w.reserve_tail(len));
            send(&t, kind::PUT, w.done())?;
        }
        Ok(())
    }
}

pub(crate) fn get(origin: Buf, t: Target, tb: Buf) -> Res {
    check_range(&t, &tb)?;
    same_len(origin.bytes(), tb.bytes(), "the origin buffer")?;
    for (skip, _, blocks) in pieces(&t, &tb, tb.bytes(), 1)? {
        let id = land(&t, &origin, skip);
        let msg = Writer::new(HEADER_MAX + blocks.len() * BLOCK_LEN)
            .u64(id)
            .blocks(&blocks);
        send(&t, kind::GET, msg.done())?;
    }
    Ok(())
}

/// The predefined operation `op` and the basic type it combines in `tb`: (op, type handle,
/// element size).
fn acc_op(s: &State, op: Handle, tb: &Buf) -> Res<(BuiltinOp, u32, usize)> {
    let Some(op) = BuiltinOp::from_handle(op) else {
        s.op(op)?;
        return fail(
            MPI_ERR_OP,
            "one-sided accumulates take predefined operations only",
        );
    };
    if tb.bytes() == 0 {
        return Ok((op, 0, 1)); // nothing moves
    }
    match tb.dt.uniform_builtin() {
        Some((b, _)) => {
            crate::ops::check(op, b).map_err(|e| MpiError::new(MPI_ERR_OP, e.to_string()))?;
            Ok((op, b as usize as u32, b.size()))
        }
        None if matches!(op, BuiltinOp::Replace | BuiltinOp::NoOp) => Ok((op, 0, 1)),
        None => fail(
            MPI_ERR_TYPE,
            "accumulate needs a target type made of one predefined type",
        ),
    }
}

unsafe fn accumulate(origin: Buf, t: Target, tb: Buf, op: (BuiltinOp, u32, usize)) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        check_range(&t, &tb)?;
        same_len(origin.bytes(), tb.bytes(), "the origin data")?;
        let (op, ty, unit) = op;
        for (skip, len, blocks) in pieces(&t, &tb, tb.bytes(), unit)? {
            let mut w = Writer::new(HEADER_MAX + blocks.len() * BLOCK_LEN + len)
                .u32(op.handle() as u32)
                .u32(ty)
                .blocks(&blocks);
            // SAFETY: MPI's contract: the origin buffer holds `count` elements of its type.
            origin
                .dt
                .pack_partial(origin.base, origin.count, skip, w.reserve_tail(len));
            send(&t, kind::ACC, w.done())?;
        }
        Ok(())
    }
}

unsafe fn get_accumulate(
    origin: Buf,
    result: Buf,
    t: Target,
    tb: Buf,
    op: (BuiltinOp, u32, usize),
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        check_range(&t, &tb)?;
        let (op, ty, unit) = op;
        if op != BuiltinOp::NoOp {
            same_len(origin.bytes(), tb.bytes(), "the origin data")?;
        }
        same_len(result.bytes(), tb.bytes(), "the result buffer")?;
        for (skip, len, blocks) in pieces(&t, &tb, tb.bytes(), unit)? {
            let id = land(&t, &result, skip);
            let data = if op == BuiltinOp::NoOp { 0 } else { len };
            let mut w = Writer::new(HEADER_MAX + blocks.len() * BLOCK_LEN + data)
                .u64(id)
                .u32(op.handle() as u32)
                .u32(ty)
                .blocks(&blocks);
            if data > 0 {
                // SAFETY: MPI's contract: the origin buffer holds `count` elements of its type.
                origin
                    .dt
                    .pack_partial(origin.base, origin.count, skip, w.reserve_tail(len));
            }
            send(&t, kind::GET_ACC, w.done())?;
        }
        Ok(())
    }
}

/// Completes every operation to `t` (the answers are in).
fn flush_target(t: &Target) -> Res {
    let r = t.rank;
    wait(&t.core, &t.shared, |w| w.pending[r] == 0)
}

/// A request that is already complete (R-operations complete before they return).
pub(crate) fn done_request(s: &mut State) -> Res<Handle> {
    let world = s.engine()?;
    Ok(s.requests
        .insert(Request::done(MPI_COMM_WORLD, world, Outcome::EMPTY)))
}

/// Runs a request-based operation: issues it, waits for its target's answers, hands out a
/// complete request.
pub(crate) unsafe fn with_request(
    request: *mut Handle,
    op: impl FnOnce() -> Res<Option<Target>>,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `request`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let out = out(request, "request")?;
        if let Some(t) = op()? {
            flush_target(&t)?;
        }
        *out = running(done_request)?;
        Ok(())
    }
}

/// The origin buffer, the target and the target layout of a put or get (`None`: the target is
/// MPI_PROC_NULL).
fn sides(
    oaddr: *const c_void,
    ocount: i64,
    otype: Handle,
    rank: c_int,
    disp: isize,
    tcount: i64,
    ttype: Handle,
    win: Handle,
) -> Res<Option<(Buf, Target, Buf)>> {
    running(|s| {
        let Some(t) = target(s, win, rank, disp)? else {
            return Ok(None);
        };
        Ok(Some((
            user_buf(s, oaddr, ocount, otype)?,
            t,
            buf(s, std::ptr::null(), tcount, ttype)?,
        )))
    })
}

/// A put or a get (`transfer`) with both sides resolved; the target again, for the request
/// forms, or `None` for MPI_PROC_NULL.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn do_transfer(
    oaddr: *const c_void,
    ocount: i64,
    otype: Handle,
    rank: c_int,
    disp: isize,
    tcount: i64,
    ttype: Handle,
    win: Handle,
    transfer: unsafe fn(Buf, Target, Buf) -> Res,
) -> Res<Option<Target>> {
    // SAFETY: this function's contract is the unsafe operations' own: `oaddr`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let Some((o, t, tb)) = sides(oaddr, ocount, otype, rank, disp, tcount, ttype, win)? else {
            return Ok(None);
        };
        let again = t.again();
        transfer(o, t, tb)?;
        Ok(Some(again))
    }
}

pub(crate) unsafe fn do_acc(
    oaddr: *const c_void,
    ocount: i64,
    otype: Handle,
    rank: c_int,
    disp: isize,
    tcount: i64,
    ttype: Handle,
    op: Handle,
    win: Handle,
) -> Res<Option<Target>> {
    // SAFETY: this function's contract is the unsafe operations' own: `oaddr`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let Some((o, t, tb, op)) = running(|s| {
            let Some(t) = target(s, win, rank, disp)? else {
                return Ok(None);
            };
            let tb = buf(s, std::ptr::null(), tcount, ttype)?;
            let op = acc_op(s, op, &tb)?;
            Ok(Some((user_buf(s, oaddr, ocount, otype)?, t, tb, op)))
        })?
        else {
            return Ok(None);
        };
        let again = t.again();
        accumulate(o, t, tb, op)?;
        Ok(Some(again))
    }
}

pub(crate) unsafe fn do_get_acc(
    oaddr: *const c_void,
    ocount: i64,
    otype: Handle,
    raddr: *mut c_void,
    rcount: i64,
    rtype: Handle,
    rank: c_int,
    disp: isize,
    tcount: i64,
    ttype: Handle,
    op: Handle,
    win: Handle,
) -> Res<Option<Target>> {
    // SAFETY: this function's contract is the unsafe operations' own: `oaddr` and `raddr`, as
    // the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        let Some((o, r, t, tb, op)) = running(|s| {
            let Some(t) = target(s, win, rank, disp)? else {
                return Ok(None);
            };
            let tb = buf(s, std::ptr::null(), tcount, ttype)?;
            let op = acc_op(s, op, &tb)?;
            // With MPI_NO_OP the origin arguments are ignored.
            let o = if op.0 == BuiltinOp::NoOp {
                Buf {
                    base: std::ptr::null_mut(),
                    count: 0,
                    dt: tb.dt.clone(),
                }
            } else {
                user_buf(s, oaddr, ocount, otype)?
            };
            Ok(Some((o, user_buf(s, raddr, rcount, rtype)?, t, tb, op)))
        })?
        else {
            return Ok(None);
        };
        let again = t.again();
        get_accumulate(o, r, t, tb, op)?;
        Ok(Some(again))
    }
}

impl Target {
    fn again(&self) -> Target {
        Target {
            core: self.core.clone(),
            shared: self.shared.clone(),
            rank: self.rank,
            offset: self.offset,
            size: self.size,
            limit: self.limit,
        }
    }
}

// ---- large counts (MPI 4.0 `_c` bindings): MPI_Count counts, the same operations ----

// ---- synchronisation ----

/// Drives progress until `done` holds for the window, then reports what the targets refused.
pub(crate) fn wait(
    core: &ferry_core::Comm,
    shared: &Rc<RefCell<Win>>,
    done: impl Fn(&Win) -> bool,
) -> Res {
    core.wait_until(|_| done(&shared.borrow()))?;
    let mut w = shared.borrow_mut();
    if let Some(e) = w.broken.take() {
        return fail(MPI_ERR_INTERN, format!("one-sided protocol: {e}"));
    }
    if std::mem::take(&mut w.out_of_range) {
        return fail(
            MPI_ERR_RMA_RANGE,
            "a target refused an access outside its window",
        );
    }
    Ok(())
}

/// The window's communicator and shared state, after `check` approved (and updated) its epochs.
pub(crate) fn parts(
    win: Handle,
    check: impl FnOnce(&mut Epoch, usize) -> Res,
) -> Res<(ferry_core::Comm, Rc<RefCell<Win>>)> {
    running(|s| {
        let w = win_mut(s, win)?;
        let n = w.peers.len();
        check(&mut w.epoch, n)?;
        Ok((w.core.clone(), w.shared.clone()))
    })
}

pub(crate) fn check_assert(assert: c_int) -> Res {
    let all = MPI_MODE_NOCHECK
        | MPI_MODE_NOSTORE
        | MPI_MODE_NOPUT
        | MPI_MODE_NOPRECEDE
        | MPI_MODE_NOSUCCEED;
    if assert & !all != 0 {
        return fail(MPI_ERR_ASSERT, format!("invalid assert {assert:#x}"));
    }
    Ok(())
}

/// Window ranks of the members of `group`.
pub(crate) fn group_ranks(s: &State, win: Handle, group: Handle) -> Res<Vec<usize>> {
    let members = s.group(group)?;
    let w = win_obj(s, win)?;
    let ranks = w.core.world_ranks();
    members
        .iter()
        .map(|&m| {
            ranks.iter().position(|&r| r == m).ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_GROUP,
                    format!("world rank {m} is not in the window's group"),
                )
            })
        })
        .collect()
}

/// Ends the exposure epoch if every origin has completed (`block`: wait until they have).
pub(crate) fn finish_exposure(win: Handle, block: bool) -> Res<bool> {
    let mut ranks = Vec::new();
    let (core, shared) = parts(win, |e, _| {
        ranks = e.exposure.clone().map_or_else(
            || sync_error("no exposure epoch is open (MPI_Win_post)"),
            Ok,
        )?;
        Ok(())
    })?;
    let all_in = |w: &Win| ranks.iter().all(|&r| w.completes[r] > 0);
    if block {
        wait(&core, &shared, all_in)?;
    } else if !all_in(&shared.borrow()) {
        core.progress()?;
        if !all_in(&shared.borrow()) {
            return Ok(false);
        }
    }
    {
        let mut w = shared.borrow_mut();
        for &r in &ranks {
            w.completes[r] -= 1;
        }
    }
    parts(win, |e, _| {
        e.exposure = None;
        Ok(())
    })?;
    Ok(true)
}

fn lock_message(exclusive: bool) -> Vec<u8> {
    Writer::new(2).u8(exclusive as u8).done()
}

/// Asks each of `ranks` for the lock. Only this rank's own grant is waited for (its memory may
/// then be loaded and stored directly); the others hold back our operations until they grant,
/// and their grants are collected at unlock.
pub(crate) fn acquire(
    core: &ferry_core::Comm,
    shared: &Rc<RefCell<Win>>,
    ranks: &[usize],
    exclusive: bool,
) -> Res {
    let me = core.rank();
    for &r in ranks {
        core.send_active(r, kind::LOCK, lock_message(exclusive))?;
        shared.borrow_mut().grants_due[r] += 1;
    }
    if ranks.contains(&me) {
        wait(core, shared, |w| w.grants[me] >= w.grants_due[me])?;
        let mut w = shared.borrow_mut();
        let due = std::mem::take(&mut w.grants_due[me]);
        w.grants[me] -= due;
    }
    Ok(())
}

/// Completes the operations to each of `ranks`, gives their locks back, and waits for that
/// (and for the grants not collected yet).
pub(crate) fn release(
    core: &ferry_core::Comm,
    shared: &Rc<RefCell<Win>>,
    ranks: &[usize],
    nocheck: bool,
) -> Res {
    wait(core, shared, |w| ranks.iter().all(|&r| w.pending[r] == 0))?;
    if nocheck {
        return Ok(());
    }
    for &r in ranks {
        core.send_active(r, kind::UNLOCK, Writer::new(1).done())?;
    }
    wait(core, shared, |w| {
        ranks
            .iter()
            .all(|&r| w.unlocked[r] > 0 && w.grants[r] >= w.grants_due[r])
    })?;
    let mut w = shared.borrow_mut();
    for &r in ranks {
        w.unlocked[r] -= 1;
        let due = std::mem::take(&mut w.grants_due[r]);
        w.grants[r] -= due;
    }
    Ok(())
}

pub(crate) fn rank_arg(rank: c_int, n: usize) -> Res<usize> {
    usize::try_from(rank)
        .ok()
        .filter(|&r| r < n)
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_RANK,
                format!("rank {rank} is not in a window of {n} ranks"),
            )
        })
}

/// Completes the operations to `rank` (all ranks for `None`) inside a passive-target epoch.
pub(crate) fn flush(win: Handle, rank: Option<c_int>) -> Res {
    if rank == Some(MPI_PROC_NULL) {
        return running(|s| win_obj(s, win).map(|_| ()));
    }
    let mut ranks = Vec::new();
    let (core, shared) = parts(win, |e, n| {
        ranks = match rank {
            Some(r) => vec![rank_arg(r, n)?],
            None => (0..n).collect(),
        };
        let open = match rank {
            Some(_) => e.passive(ranks[0]),
            None => e.lock_all.is_some() || e.locks.iter().any(|l| l.is_some()),
        };
        if !open {
            return sync_error("flush outside a passive-target epoch (MPI_Win_lock first)");
        }
        Ok(())
    })?;
    // One pass even with nothing pending: a flush is how a process spinning on its own
    // window (mpi4py's RMA mutex flushes itself) lets the others' operations land.
    core.progress()?;
    wait(&core, &shared, |w| ranks.iter().all(|&r| w.pending[r] == 0))
}
