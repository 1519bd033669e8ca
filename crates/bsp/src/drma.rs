//! DRMA: puts and gets, on areas and on raw memory, and their argument checks.

use crate::combine::{LastPut, NO_PUT};
use crate::record::{drma_head, PUT_HEAD, REC_GET, REC_PUT};
use crate::{Area, Bsp, BspError, ErrorKind};

/// A pending hpput: its source is read at the sync.
pub(crate) struct HpPut {
    pub(crate) src: usize,
    pub(crate) slot: u32,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl Bsp {
    // The checks of every put and get: the test inline, the error out of line, so that a
    // 16-word put is not dominated by the set-up of an error it never reports.
    #[inline(always)]
    pub(crate) fn check_pid(&self, call: &'static str, pid: usize) -> Result<(), BspError> {
        if pid >= self.nprocs {
            return Err(self.bad_pid(call, pid));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn bad_pid(&self, call: &'static str, pid: usize) -> BspError {
        let nprocs = self.nprocs;
        self.error(call, ErrorKind::BadPid { pid, nprocs })
    }

    #[inline(always)]
    pub(crate) fn check_remote(
        &self,
        call: &'static str,
        pid: usize,
        slot: u32,
        offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        let size = self.slots[slot as usize].sizes[pid];
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return Err(self.outside_remote(call, pid, slot, offset, len));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn outside_remote(
        &self,
        call: &'static str,
        pid: usize,
        slot: u32,
        offset: usize,
        len: usize,
    ) -> BspError {
        let size = self.slots[slot as usize].sizes[pid];
        self.error(
            call,
            ErrorKind::OutsideRemote {
                pid,
                slot,
                start: offset,
                end: offset.saturating_add(len),
                size,
            },
        )
    }

    /// The checks of a put or get of `nbytes` at byte `offset` of the area registered as
    /// `ident` on `pid`: its registration slot.
    #[inline(always)]
    fn check_drma(
        &self,
        call: &'static str,
        pid: usize,
        ident: usize,
        offset: usize,
        nbytes: usize,
    ) -> Result<u32, BspError> {
        self.check_pid(call, pid)?;
        let slot = self.slot_of(call, ident)?;
        self.check_remote(call, pid, slot, offset, nbytes)?;
        Ok(slot)
    }
}

/// Elements to bytes; an overflow saturates, which the range checks then refuse.
#[inline]
fn bytes<T>(elements: usize) -> usize {
    elements.saturating_mul(size_of::<T>())
}

impl Bsp {
    /// Writes `src` into `dst` at element `offset` on process `pid` at the next sync. `src` is
    /// copied now.
    pub fn put<T: bytemuck::Pod>(
        &mut self,
        pid: usize,
        src: &[T],
        dst: &Area<T>,
        offset: usize,
    ) -> Result<(), BspError> {
        // SAFETY: `src` is a live slice; `dst` is only used as a registration key.
        unsafe {
            self.put_raw(
                pid,
                src.as_ptr() as *const u8,
                dst.addr as *const u8,
                bytes::<T>(offset),
                std::mem::size_of_val(src),
            )
        }
    }

    /// As [`Bsp::put`] without buffering: `len` elements of the local area `src` from
    /// `src_offset` are read at the sync.
    pub fn hpput<T: bytemuck::Pod>(
        &mut self,
        pid: usize,
        src: &Area<T>,
        src_offset: usize,
        dst: &Area<T>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        self.check_range("bsp_hpput", src, src_offset, len)?;
        // SAFETY: the source lies inside an area owned by self (checked), which outlives the
        // sync.
        unsafe {
            self.hpput_raw(
                pid,
                (src.addr + bytes::<T>(src_offset)) as *const u8,
                dst.addr as *const u8,
                bytes::<T>(dst_offset),
                bytes::<T>(len),
            )
        }
    }

    /// Reads `len` elements of `src` at `src_offset` on process `pid` into the local area `dst`
    /// at `dst_offset`, at the next sync (before that sync's puts are applied).
    pub fn get<T: bytemuck::Pod>(
        &mut self,
        pid: usize,
        src: &Area<T>,
        src_offset: usize,
        dst: &Area<T>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        self.check_range("bsp_get", dst, dst_offset, len)?;
        // SAFETY: the destination lies inside an area owned by self (checked), written only
        // in `sync`.
        unsafe {
            self.get_raw(
                pid,
                src.addr as *const u8,
                bytes::<T>(src_offset),
                (dst.addr + bytes::<T>(dst_offset)) as *mut u8,
                bytes::<T>(len),
            )
        }
    }

    /// As [`Bsp::get`]; may transfer any time in the superstep (here: at the sync).
    pub fn hpget<T: bytemuck::Pod>(
        &mut self,
        pid: usize,
        src: &Area<T>,
        src_offset: usize,
        dst: &Area<T>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        self.get(pid, src, src_offset, dst, dst_offset, len)
    }

    /// Copies `nbytes` at `src` now, to be written at byte `offset` of the area registered as
    /// `dst` on `pid` at the next sync.
    ///
    /// # Safety
    /// `src..src+nbytes` must be readable.
    pub unsafe fn put_raw(
        &mut self,
        pid: usize,
        src: *const u8,
        dst: *const u8,
        offset: usize,
        nbytes: usize,
    ) -> Result<(), BspError> {
        let slot = self.check_drma("bsp_put", pid, dst as usize, offset, nbytes)?;
        if nbytes == 0 {
            return Ok(());
        }
        let data = std::slice::from_raw_parts(src, nbytes);
        if self.config.combine && self.merge_put(pid, slot, offset, data) {
            return Ok(());
        }
        self.put_record(pid, slot, offset, data)
    }

    /// A put that starts a record of its own (out of line: most puts of a superstep continue
    /// the last one).
    #[inline(never)]
    pub(crate) fn put_record(
        &mut self,
        pid: usize,
        slot: u32,
        offset: usize,
        data: &[u8],
    ) -> Result<(), BspError> {
        let nbytes = data.len();
        let head = drma_head(REC_PUT, slot, offset, nbytes);
        let in_ring = if self.ring_usable(pid) {
            self.ring_emit(pid, &[&head, data])?
        } else {
            None
        };
        // A record in the ring can always be joined; one emitted only when combining.
        let at = match in_ring {
            Some(at) => at,
            None => self.emit(pid, PUT_HEAD + nbytes, |rec| {
                rec.extend_from_slice(&head);
                rec.extend_from_slice(data);
            })?,
        };
        if at != NO_PUT {
            self.last_put[pid] = LastPut {
                at,
                slot,
                end: offset + nbytes,
            };
        }
        Ok(())
    }

    /// As [`Bsp::put_raw`], but `src` is read at the sync, not now.
    ///
    /// # Safety
    /// `src..src+nbytes` must be readable at the next sync.
    pub unsafe fn hpput_raw(
        &mut self,
        pid: usize,
        src: *const u8,
        dst: *const u8,
        offset: usize,
        nbytes: usize,
    ) -> Result<(), BspError> {
        let slot = self.check_drma("bsp_hpput", pid, dst as usize, offset, nbytes)?;
        if nbytes > 0 {
            self.hpputs[pid].push(HpPut {
                src: src as usize,
                slot,
                offset,
                len: nbytes,
            });
        }
        Ok(())
    }

    /// Reads `nbytes` at byte `offset` of the area registered as `src` on `pid` into `dst` at
    /// the next sync, before that sync's puts are applied.
    ///
    /// # Safety
    /// `dst..dst+nbytes` must be writable at the next sync.
    pub unsafe fn get_raw(
        &mut self,
        pid: usize,
        src: *const u8,
        offset: usize,
        dst: *mut u8,
        nbytes: usize,
    ) -> Result<(), BspError> {
        self.get_checked("bsp_get", pid, src, offset, dst, nbytes)
    }

    /// As [`Bsp::get_raw`] (the hp variant may transfer any time; here at the sync).
    ///
    /// # Safety
    /// As [`Bsp::get_raw`].
    pub unsafe fn hpget_raw(
        &mut self,
        pid: usize,
        src: *const u8,
        offset: usize,
        dst: *mut u8,
        nbytes: usize,
    ) -> Result<(), BspError> {
        self.get_checked("bsp_hpget", pid, src, offset, dst, nbytes)
    }

    /// A get, its errors named after `call`.
    ///
    /// # Safety
    /// As [`Bsp::get_raw`].
    unsafe fn get_checked(
        &mut self,
        call: &'static str,
        pid: usize,
        src: *const u8,
        offset: usize,
        dst: *mut u8,
        nbytes: usize,
    ) -> Result<(), BspError> {
        let slot = self.check_drma(call, pid, src as usize, offset, nbytes)?;
        if nbytes == 0 {
            return Ok(());
        }
        let head = drma_head(REC_GET, slot, offset, nbytes);
        if !(self.ring_usable(pid) && self.ring_emit(pid, &[&head])?.is_some()) {
            self.emit(pid, PUT_HEAD, |rec| rec.extend_from_slice(&head))?;
        }
        // Only once the request is out: a failed call leaves nothing to fill at the sync.
        self.gets[pid].push((dst as usize, nbytes));
        Ok(())
    }
}
