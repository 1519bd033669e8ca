//! Registered memory (`fi_mr_reg`), as the domain's `mr_mode` wants it.

use std::ops::BitOr;
use std::rc::Rc;

use crate::endpoint::{Desc, Endpoint, Remote, Shared};
use crate::error::{FabricError, Result};
use crate::ffi;

/// What a region may be used for (`fi_mr_reg`'s access bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access(u64);

impl Access {
    /// Source of local sends.
    pub const SEND: Access = Access(ffi::FI_SEND);
    /// Target of local receives.
    pub const RECV: Access = Access(ffi::FI_RECV);
    /// Target of local `read`s.
    pub const READ: Access = Access(ffi::FI_READ);
    /// Source of local `write`s.
    pub const WRITE: Access = Access(ffi::FI_WRITE);
    /// Read by peers.
    pub const REMOTE_READ: Access = Access(ffi::FI_REMOTE_READ);
    /// Written by peers.
    pub const REMOTE_WRITE: Access = Access(ffi::FI_REMOTE_WRITE);

    fn remote(self) -> bool {
        self.0 & (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) != 0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

/// A registered memory region. It keeps the endpoint's objects open: they are closed when
/// the [`Endpoint`] and its last region are dropped, so a region never outlives its domain.
/// Dropping it closes the registration (the memory itself is the caller's).
pub struct Region {
    /// Held, never read: keeps the domain and endpoint open while the region lives.
    _shared: Rc<Shared>,
    mr: *mut ffi::FidMr,
    desc: Desc,
    remote: Remote,
    len: usize,
}

impl Region {
    /// The descriptor to pass with local operations on this memory (`fi_mr_desc`).
    pub fn desc(&self) -> Desc {
        self.desc
    }

    /// What a peer needs to read or write this memory: the address of its first byte as the
    /// peer must give it (the virtual address with `FI_MR_VIRT_ADDR`, else 0) and the key.
    /// Byte `i` of the region is at `remote().addr + i`.
    pub fn remote(&self) -> Remote {
        self.remote
    }

    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: registration refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: opened in Endpoint::register, closed once, while the domain (and endpoint)
        // it belongs to are still open: `shared` holds them.
        let _ = unsafe { ffi::close(self.mr.cast()) };
    }
}

impl Endpoint {
    /// Registers `len` bytes at `ptr` for `access`: with the key the provider gives
    /// (`FI_MR_PROV_KEY`) or one unique in this domain, bound to this endpoint and enabled
    /// when the domain wants that (`FI_MR_ENDPOINT`).
    ///
    /// # Safety
    /// `ptr..ptr+len` is memory of this process (allocated: `FI_MR_ALLOCATED`) that stays
    /// valid until the region is dropped; what peers may do to it is what `access` allows.
    pub unsafe fn register(&self, ptr: *const u8, len: usize, access: Access) -> Result<Region> {
        if len == 0 || ptr.is_null() {
            return Err(FabricError::Invalid(format!(
                "cannot register {len} bytes at {ptr:?}"
            )));
        }
        let shared = &self.shared;
        let mode = shared.mr_mode;
        let requested_key = if mode.prov_key() {
            0
        } else {
            shared.next_key.get()
        };
        let mut mr = std::ptr::null_mut();
        // SAFETY: the domain is live; the memory is the caller's contract.
        let rc = unsafe {
            ffi::mr_reg(
                shared.domain,
                ptr.cast(),
                len,
                access.0,
                requested_key,
                &mut mr,
            )
        };
        shared.check("fi_mr_reg", rc)?;
        if !mode.prov_key() {
            shared.next_key.set(requested_key + 1);
        }
        // From here the region closes the registration on an error.
        let mut region = Region {
            _shared: Rc::clone(shared),
            mr,
            desc: Desc::NONE,
            remote: Remote { addr: 0, key: 0 },
            len,
        };
        if mode.endpoint() {
            // SAFETY: the region and the endpoint are live objects of one domain.
            unsafe {
                shared.check("fi_mr_bind", ffi::bind(mr.cast(), shared.ep.cast(), 0))?;
                shared.check(
                    "fi_mr_enable",
                    ffi::control(mr.cast(), ffi::FI_ENABLE, std::ptr::null_mut()),
                )?;
            }
        }
        // SAFETY: a registered (and, where needed, enabled) region: its desc and key are set.
        let (desc, key) = unsafe { ((*mr).mem_desc, (*mr).key) };
        if mode.prov_key() && key == u64::MAX && access.remote() {
            return Err(FabricError::Invalid(
                "the provider gave the region no key".into(),
            ));
        }
        region.desc = Desc(desc);
        region.remote = Remote {
            addr: if mode.virt_addr() { ptr as u64 } else { 0 },
            key: if mode.prov_key() { key } else { requested_key },
        };
        Ok(region)
    }
}
