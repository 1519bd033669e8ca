//! Registration: slots matched across processes by the order of the pushes.

use crate::{Area, Bsp};

/// One registration slot: matched across processes by its index.
pub(crate) struct Slot {
    /// Local address and size, while registered.
    pub(crate) local: Option<(usize, usize)>,
    /// Size registered by each process (from the sync where it took effect).
    pub(crate) sizes: Vec<usize>,
}

impl Bsp {
    /// Registers `area` (collective by order; effective at the next sync).
    pub fn push_reg<T>(&mut self, area: &Area<T>) {
        self.check_area("bsp_push_reg", area);
        // SAFETY: the area is owned by self and lives until `free`, which refuses registered
        // areas.
        unsafe { self.push_reg_raw(area.addr as *const u8, area.len * size_of::<T>()) }
    }

    /// Unregisters `area` (collective by order; effective at the next sync).
    pub fn pop_reg<T>(&mut self, area: &Area<T>) {
        self.pop_reg_raw(area.addr as *const u8)
    }
}

impl Bsp {
    // ---- Registration and DRMA on raw memory ----

    /// Registers `size` bytes at `ident`; effective at the next sync.
    ///
    /// # Safety
    /// `ident..ident+size` must stay valid for reads and writes while registered, and may be
    /// written by syncs.
    pub unsafe fn push_reg_raw(&mut self, ident: *const u8, size: usize) {
        self.pushes.push((ident as usize, size));
    }

    /// Unregisters the most recent registration of `ident`; effective at the next sync.
    pub fn pop_reg_raw(&mut self, ident: *const u8) {
        let addr = ident as usize;
        let already = self
            .pops
            .iter()
            .filter(|&&s| self.slots[s as usize].local.map(|l| l.0) == Some(addr))
            .count();
        let stack = self.by_addr.get(&addr).map(Vec::as_slice).unwrap_or(&[]);
        if already >= stack.len() {
            self.fail(
                "bsp_pop_reg",
                format!("address {addr:#x} is not registered (or its registration has not taken effect: that needs a sync)"),
            );
        }
        let slot = stack[stack.len() - 1 - already];
        self.pops.push(slot);
    }

    /// The slot in effect for `ident`.
    #[inline]
    pub(crate) fn slot_of(&self, call: &str, ident: usize) -> u32 {
        match self.slot_cache.get() {
            Some((addr, slot)) if addr == ident => slot,
            _ => self.slot_lookup(call, ident),
        }
    }

    /// `slot_of` past its cache.
    #[inline(never)]
    pub(crate) fn slot_lookup(&self, call: &str, ident: usize) -> u32 {
        match self.by_addr.get(&ident).and_then(|s| s.last()) {
            Some(&s) => {
                self.slot_cache.set(Some((ident, s)));
                s
            }
            None => self.fail(
                call,
                format!("address {ident:#x} is not registered (a registration takes effect at the next sync)"),
            ),
        }
    }
}
