//! Registration: slots matched across processes by the order of the pushes.

use crate::record::RegRecord;
use crate::{Area, Bsp, BspError, ErrorKind};
use std::cmp::Reverse;

/// One registration slot: matched across processes by its index.
pub(crate) struct Slot {
    /// Local address and size, while registered.
    pub(crate) local: Option<(usize, usize)>,
    /// Size registered by each process (from the sync where it took effect).
    pub(crate) sizes: Vec<usize>,
}

impl Bsp {
    /// Registers `area` (collective by order; effective at the next sync).
    pub fn push_reg<T>(&mut self, area: &Area<T>) -> Result<(), BspError> {
        self.check_area("bsp_push_reg", area)?;
        // SAFETY: the area is owned by self and lives until `free`, which refuses registered
        // areas; its byte size fits (it was allocated).
        unsafe { self.push_reg_raw(area.addr as *const u8, area.len * size_of::<T>()) };
        Ok(())
    }

    /// Unregisters `area` (collective by order; effective at the next sync).
    pub fn pop_reg<T>(&mut self, area: &Area<T>) -> Result<(), BspError> {
        self.pop_reg_raw(area.addr as *const u8)
    }

    /// Registers `size` bytes at `ident`; effective at the next sync.
    ///
    /// # Safety
    /// `ident..ident+size` must stay valid for reads and writes while registered, and may be
    /// written by syncs.
    pub unsafe fn push_reg_raw(&mut self, ident: *const u8, size: usize) {
        self.pushes.push((ident as usize, size));
    }

    /// Unregisters the most recent registration of `ident`; effective at the next sync.
    pub fn pop_reg_raw(&mut self, ident: *const u8) -> Result<(), BspError> {
        let addr = ident as usize;
        let already = self
            .pops
            .iter()
            .filter(|&&s| self.slots[s as usize].local.map(|l| l.0) == Some(addr))
            .count();
        let stack = self.by_addr.get(&addr).map(Vec::as_slice).unwrap_or(&[]);
        if already >= stack.len() {
            return Err(self.error(
                "bsp_pop_reg",
                ErrorKind::NotRegistered {
                    addr,
                    hint: "or its registration has not taken effect: that needs a sync",
                },
            ));
        }
        let slot = stack[stack.len() - 1 - already];
        self.pops.push(slot);
        Ok(())
    }

    /// The slot in effect for `ident`.
    #[inline(always)]
    pub(crate) fn slot_of(&self, call: &'static str, ident: usize) -> Result<u32, BspError> {
        match self.slot_cache.get() {
            Some((addr, slot)) if addr == ident => Ok(slot),
            _ => self.slot_lookup(call, ident),
        }
    }

    /// `slot_of` past its cache.
    #[inline(never)]
    pub(crate) fn slot_lookup(&self, call: &'static str, ident: usize) -> Result<u32, BspError> {
        match self.by_addr.get(&ident).and_then(|s| s.last()) {
            Some(&s) => {
                self.slot_cache.set(Some((ident, s)));
                Ok(s)
            }
            None => Err(self.error(
                call,
                ErrorKind::NotRegistered {
                    addr: ident,
                    hint: "a registration takes effect at the next sync",
                },
            )),
        }
    }

    /// The local address and size of registration `slot`, which process `from` names.
    pub(crate) fn local_slot(
        &self,
        slot: u32,
        call: &'static str,
        from: usize,
    ) -> Result<(usize, usize), BspError> {
        match self.slots.get(slot as usize).and_then(|s| s.local) {
            Some(l) => Ok(l),
            None => Err(self.error(call, ErrorKind::UnknownSlot { from, slot })),
        }
    }

    /// Makes the superstep's registrations take effect (after its puts: a registration is
    /// usable from the next superstep on). Pops first (they name older slots), then pushes
    /// get free slots, lowest first: every process pops the same slots (the sync checked it)
    /// and pushes as many, so all pick the same numbers. `regs` holds each process's
    /// registration record, checked to have as many pushes as this one's.
    pub(crate) fn registrations_take_effect(&mut self, regs: &[Option<RegRecord<'_>>]) {
        self.slot_cache.set(None);
        for &s in &std::mem::take(&mut self.pops) {
            if let Some((addr, _)) = self.slots[s as usize].local.take() {
                if let Some(stack) = self.by_addr.get_mut(&addr) {
                    stack.retain(|&x| x != s);
                    if stack.is_empty() {
                        self.by_addr.remove(&addr);
                    }
                }
                self.free_slots.push(Reverse(s));
            }
        }
        let pushes = std::mem::take(&mut self.pushes);
        for (i, &(addr, size)) in pushes.iter().enumerate() {
            let sizes = (0..self.nprocs)
                .map(|q| {
                    // A size that does not fit here cannot be reached here either.
                    let size = regs.get(q).copied().flatten().and_then(|r| r.push_size(i));
                    size.map_or(0, |s| usize::try_from(s).unwrap_or(usize::MAX))
                })
                .collect();
            let slot = Slot {
                local: Some((addr, size)),
                sizes,
            };
            let id = match self.free_slots.pop() {
                Some(Reverse(id)) => {
                    self.slots[id as usize] = slot;
                    id
                }
                None => {
                    self.slots.push(slot);
                    (self.slots.len() - 1) as u32
                }
            };
            self.by_addr.entry(addr).or_default().push(id);
        }
    }
}
