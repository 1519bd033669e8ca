//! Areas: typed memory owned by a computation, the safe handles of registration.

use crate::Bsp;
use std::alloc::Layout;
use std::collections::HashMap;
use std::marker::PhantomData;

/// Typed memory owned by a [`Bsp`] context, which remote processes may reach once it is
/// registered. A handle: copying it does not copy the memory.
#[derive(Debug)]
pub struct Area<T> {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) _t: PhantomData<T>,
}

impl<T> Clone for Area<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Area<T> {}

impl<T> Area<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The memory of a context's areas: address → layout, freed on drop.
pub(crate) struct Allocs(pub(crate) HashMap<usize, Layout>);

impl Bsp {
    // ---- Areas (safe memory) ----

    /// Allocates a zeroed area of `len` elements, owned by this context until [`Bsp::free`]
    /// or the end.
    pub fn alloc<T: bytemuck::Pod>(&mut self, len: usize) -> Area<T> {
        let layout = Layout::array::<T>(len.max(1)).expect("area too large");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        self.allocs.0.insert(ptr as usize, layout);
        Area {
            addr: ptr as usize,
            len,
            _t: PhantomData,
        }
    }

    /// Frees an area. It must not be registered.
    pub fn free<T>(&mut self, area: Area<T>) {
        self.check_area("free", &area);
        if self.by_addr.get(&area.addr).is_some_and(|s| !s.is_empty())
            || self.pushes.iter().any(|&(a, _)| a == area.addr)
        {
            self.fail("free", "the area is still registered".into());
        }
        let layout = self.allocs.0.remove(&area.addr).expect("checked");
        // SAFETY: allocated by `alloc` with this layout, and removed from the table.
        unsafe { std::alloc::dealloc(area.addr as *mut u8, layout) };
    }

    pub(crate) fn check_area<T>(&self, call: &str, area: &Area<T>) {
        if !self.allocs.0.contains_key(&area.addr) {
            self.fail(call, "the area does not belong to this computation".into());
        }
    }

    /// The contents of an area.
    pub fn area<T: bytemuck::Pod>(&self, area: &Area<T>) -> &[T] {
        self.check_area("area", area);
        // SAFETY: the memory is owned by `self`, initialised (zeroed Pod) and only written by
        // methods taking `&mut self`.
        unsafe { std::slice::from_raw_parts(area.addr as *const T, area.len) }
    }

    /// The contents of an area, to change.
    pub fn area_mut<T: bytemuck::Pod>(&mut self, area: &Area<T>) -> &mut [T] {
        self.check_area("area_mut", area);
        // SAFETY: as in `area`, and `&mut self` excludes every other access.
        unsafe { std::slice::from_raw_parts_mut(area.addr as *mut T, area.len) }
    }

    pub(crate) fn check_range<T>(&self, call: &str, area: &Area<T>, offset: usize, len: usize) {
        self.check_area(call, area);
        if offset.checked_add(len).is_none_or(|e| e > area.len) {
            self.fail(
                call,
                format!(
                    "elements {offset}..{} are outside the local area of {} elements",
                    offset.saturating_add(len),
                    area.len
                ),
            );
        }
    }
}

impl Drop for Allocs {
    fn drop(&mut self) {
        for (&addr, &layout) in &self.0 {
            // SAFETY: allocated by `alloc` with this layout; nothing refers to it any more.
            unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        }
    }
}
