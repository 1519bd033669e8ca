//! DRMA: puts and gets, on areas and on raw memory, and their argument checks.

use crate::combine::{LastPut, NO_PUT};
use crate::record::{drma_head, PUT_HEAD, REC_GET, REC_PUT};
use crate::{Area, Bsp};

/// A pending hpput: its source is read at the sync.
pub(crate) struct HpPut {
    pub(crate) src: usize,
    pub(crate) slot: u32,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl Bsp {
    // The checks of every put and get: the test inline, the message out of line, so that a
    // 16-word put is not dominated by the set-up of an error it never reports.
    #[inline]
    pub(crate) fn check_pid(&self, call: &str, pid: usize) {
        if pid >= self.nprocs {
            self.bad_pid(call, pid);
        }
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn bad_pid(&self, call: &str, pid: usize) -> ! {
        self.fail(
            call,
            format!("process id {pid} is out of range 0..{}", self.nprocs),
        )
    }
}

impl Bsp {
    /// Writes `src` into `dst` at element `offset` on process `pid` at the next sync. `src` is
    /// copied now.
    pub fn put<T: bytemuck::Pod>(&mut self, pid: usize, src: &[T], dst: &Area<T>, offset: usize) {
        let sz = size_of::<T>();
        // SAFETY: `src` is a live slice; `dst` is only used as a registration key.
        unsafe {
            self.put_raw(
                pid,
                src.as_ptr() as *const u8,
                dst.addr as *const u8,
                offset * sz,
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
    ) {
        self.check_range("bsp_hpput", src, src_offset, len);
        let sz = size_of::<T>();
        // SAFETY: the source lies inside an area owned by self, which outlives the sync.
        unsafe {
            self.hpput_raw(
                pid,
                (src.addr + src_offset * sz) as *const u8,
                dst.addr as *const u8,
                dst_offset * sz,
                len * sz,
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
    ) {
        self.check_range("bsp_get", dst, dst_offset, len);
        let sz = size_of::<T>();
        // SAFETY: the destination lies inside an area owned by self, written only in `sync`.
        unsafe {
            self.get_raw(
                pid,
                src.addr as *const u8,
                src_offset * sz,
                (dst.addr + dst_offset * sz) as *mut u8,
                len * sz,
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
    ) {
        self.get(pid, src, src_offset, dst, dst_offset, len)
    }
}

impl Bsp {
    #[inline]
    pub(crate) fn check_remote(
        &self,
        call: &str,
        pid: usize,
        slot: u32,
        offset: usize,
        len: usize,
    ) {
        let size = self.slots[slot as usize].sizes[pid];
        if offset.checked_add(len).is_none_or(|e| e > size) {
            self.outside_remote(call, pid, slot, offset, len);
        }
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn outside_remote(
        &self,
        call: &str,
        pid: usize,
        slot: u32,
        offset: usize,
        len: usize,
    ) -> ! {
        let size = self.slots[slot as usize].sizes[pid];
        self.fail(
            call,
            format!(
                "bytes {offset}..{} are outside the {size}-byte area (registration #{slot}) of process {pid}",
                offset.saturating_add(len)
            ),
        )
    }
}

impl Bsp {
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
    ) {
        self.check_pid("bsp_put", pid);
        let slot = self.slot_of("bsp_put", dst as usize);
        self.check_remote("bsp_put", pid, slot, offset, nbytes);
        if nbytes == 0 {
            return;
        }
        let data = std::slice::from_raw_parts(src, nbytes);
        if self.config.combine && self.merge_put(pid, slot, offset, data) {
            return;
        }
        self.put_record(pid, slot, offset, data);
    }

    /// A put that starts a record of its own (out of line: most puts of a superstep continue
    /// the last one).
    #[inline(never)]
    pub(crate) fn put_record(&mut self, pid: usize, slot: u32, offset: usize, data: &[u8]) {
        let nbytes = data.len();
        let head = drma_head(REC_PUT, slot, offset, nbytes);
        if self.ring_usable(pid) {
            if let Some(at) = self.ring_emit(pid, &[&head, data]) {
                self.last_put[pid] = LastPut {
                    at,
                    slot,
                    end: offset + nbytes,
                };
                return;
            }
        }
        let at = self.emit(pid, PUT_HEAD + nbytes, |rec| {
            rec.extend_from_slice(&head);
            rec.extend_from_slice(data);
        });
        if at != NO_PUT {
            self.last_put[pid] = LastPut {
                at,
                slot,
                end: offset + nbytes,
            };
        }
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
    ) {
        self.check_pid("bsp_hpput", pid);
        let slot = self.slot_of("bsp_hpput", dst as usize);
        self.check_remote("bsp_hpput", pid, slot, offset, nbytes);
        if nbytes > 0 {
            self.hpputs[pid].push(HpPut {
                src: src as usize,
                slot,
                offset,
                len: nbytes,
            });
        }
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
    ) {
        self.check_pid("bsp_get", pid);
        let slot = self.slot_of("bsp_get", src as usize);
        self.check_remote("bsp_get", pid, slot, offset, nbytes);
        if nbytes == 0 {
            return;
        }
        self.gets[pid].push((dst as usize, nbytes));
        let head = drma_head(REC_GET, slot, offset, nbytes);
        if self.ring_usable(pid) && self.ring_emit(pid, &[&head]).is_some() {
            return;
        }
        self.emit(pid, PUT_HEAD, |rec| rec.extend_from_slice(&head));
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
    ) {
        self.check_pid("bsp_hpget", pid);
        let slot = self.slot_of("bsp_hpget", src as usize);
        self.check_remote("bsp_hpget", pid, slot, offset, nbytes);
        self.get_raw(pid, src, offset, dst, nbytes)
    }
}
