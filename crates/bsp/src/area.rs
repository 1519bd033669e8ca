//! Areas: typed memory owned by a computation, the safe handles of registration.

use crate::{Bsp, BspError, ErrorKind};
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
    /// Allocates a zeroed area of `len` elements, owned by this context until [`Bsp::free`]
    /// or the end.
    pub fn alloc<T: bytemuck::Pod>(&mut self, len: usize) -> Result<Area<T>, BspError> {
        let layout = Layout::array::<T>(len.max(1)).map_err(|_| {
            self.error(
                "alloc",
                ErrorKind::AreaTooLarge {
                    len,
                    elem_bytes: size_of::<T>(),
                },
            )
        })?;
        if layout.size() == 0 {
            // A zero-sized T: nothing to allocate, but the area needs an address of its own.
            return Err(self.error("alloc", ErrorKind::AreaTooLarge { len, elem_bytes: 0 }));
        }
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        self.allocs.0.insert(ptr as usize, layout);
        Ok(Area {
            addr: ptr as usize,
            len,
            _t: PhantomData,
        })
    }

    /// Frees an area. It must not be registered (nor pushed for registration).
    pub fn free<T>(&mut self, area: Area<T>) -> Result<(), BspError> {
        self.check_area("free", &area)?;
        if self.by_addr.get(&area.addr).is_some_and(|s| !s.is_empty())
            || self.pushes.iter().any(|&(a, _)| a == area.addr)
        {
            return Err(self.error("free", ErrorKind::StillRegistered));
        }
        let Some(layout) = self.allocs.0.remove(&area.addr) else {
            return Err(self.error("free", ErrorKind::ForeignArea));
        };
        // SAFETY: allocated by `alloc` with this layout, and removed from the table.
        unsafe { std::alloc::dealloc(area.addr as *mut u8, layout) };
        Ok(())
    }

    pub(crate) fn check_area<T>(&self, call: &'static str, area: &Area<T>) -> Result<(), BspError> {
        match self.allocs.0.get(&area.addr) {
            // The length is checked too: a stale handle may share the address of a new area.
            Some(l)
                if area
                    .len
                    .checked_mul(size_of::<T>())
                    .is_some_and(|n| n <= l.size()) =>
            {
                Ok(())
            }
            _ => Err(self.error(call, ErrorKind::ForeignArea)),
        }
    }

    /// The contents of an area.
    pub fn area<T: bytemuck::Pod>(&self, area: &Area<T>) -> Result<&[T], BspError> {
        self.check_area("area", area)?;
        // SAFETY: the memory is owned by `self`, initialised (zeroed Pod), holds `len`
        // elements (checked) and is only written by methods taking `&mut self`.
        Ok(unsafe { std::slice::from_raw_parts(area.addr as *const T, area.len) })
    }

    /// The contents of an area, to change.
    pub fn area_mut<T: bytemuck::Pod>(&mut self, area: &Area<T>) -> Result<&mut [T], BspError> {
        self.check_area("area_mut", area)?;
        // SAFETY: as in `area`, and `&mut self` excludes every other access.
        Ok(unsafe { std::slice::from_raw_parts_mut(area.addr as *mut T, area.len) })
    }

    pub(crate) fn check_range<T>(
        &self,
        call: &'static str,
        area: &Area<T>,
        offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        self.check_area(call, area)?;
        if offset.checked_add(len).is_none_or(|e| e > area.len) {
            return Err(self.error(
                call,
                ErrorKind::OutsideLocal {
                    start: offset,
                    end: offset.saturating_add(len),
                    len: area.len,
                },
            ));
        }
        Ok(())
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
