//! An RDM endpoint and the objects under it: open, address, address vector, wait object.
//! Operations and completions are in `ops.rs`.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::os::fd::RawFd;
use std::rc::Rc;

use crate::error::{FabricError, Result};
use crate::ffi;
use crate::info::{get_info, EndpointSpec, MrMode, ProviderInfo};
use crate::ops::{Contexts, CQ_BATCH};
use crate::Library;

pub use crate::ops::{Completion, CompletionError, OpKind};

/// A peer inserted in the endpoint's address vector (`fi_addr_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub u64);

/// A local memory descriptor (`fi_mr_desc`) for an operation's buffer; [`Desc::NONE`] where
/// the domain does not need one (no `FI_MR_LOCAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc(pub(crate) *mut c_void);

impl Desc {
    /// No descriptor.
    pub const NONE: Desc = Desc(std::ptr::null_mut());
}

/// Where a peer's registered memory is, as the peer sent it: the address to use
/// ([`crate::Region::remote`] plus an offset) and the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    pub addr: u64,
    pub key: u64,
}

/// What the opened endpoint is: the chosen provider and what it offers.
#[derive(Clone, Debug)]
pub struct EndpointInfo {
    /// The provider, domain, limits and `mr_mode` in effect.
    pub provider: ProviderInfo,
    /// The API version the fabric was opened with.
    pub api_version: (u32, u32),
}

/// The objects of one endpoint, shared with its regions so that none outlives the domain.
/// Closed in the order ep, av, cq, domain, fabric when the endpoint and its last region are
/// gone (a region bound to the endpoint, `FI_MR_ENDPOINT`, must close before it: CXI refuses
/// to close an endpoint with bound regions).
pub(crate) struct Shared {
    pub(crate) lib: Library,
    pub(crate) info: *mut ffi::Info,
    pub(crate) fabric: *mut ffi::FidFabric,
    pub(crate) domain: *mut ffi::FidDomain,
    pub(crate) av: *mut ffi::FidAv,
    pub(crate) cq: *mut ffi::FidCq,
    pub(crate) ep: *mut ffi::FidEp,
    pub(crate) mr_mode: MrMode,
    /// The next key the crate chooses for a region (without `FI_MR_PROV_KEY`).
    pub(crate) next_key: Cell<u64>,
    /// Operation contexts; dropped after the endpoint is closed, since the provider may hold
    /// pointers into them until then.
    pub(crate) contexts: RefCell<Contexts>,
}

impl Shared {
    fn new(lib: &Library) -> Shared {
        Shared {
            lib: lib.clone(),
            info: std::ptr::null_mut(),
            fabric: std::ptr::null_mut(),
            domain: std::ptr::null_mut(),
            av: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            ep: std::ptr::null_mut(),
            mr_mode: MrMode(0),
            next_key: Cell::new(1),
            contexts: RefCell::new(Contexts::default()),
        }
    }

    pub(crate) fn check(&self, call: &'static str, rc: i32) -> Result<()> {
        match rc {
            0 => Ok(()),
            rc => Err(self.lib.call_error(call, rc as isize)),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: each is NULL or a live object opened in `Endpoint::open`, closed once, in
        // dependency order (nothing of a later one is used by an earlier one's close).
        unsafe {
            for fid in [
                self.ep.cast::<ffi::Fid>(),
                self.av.cast(),
                self.cq.cast(),
                self.domain.cast(),
                self.fabric.cast(),
            ] {
                if !fid.is_null() {
                    // A failure to close leaves nothing to do but go on with the rest.
                    let _ = ffi::close(fid);
                }
            }
            if !self.info.is_null() {
                (self.lib.calls().freeinfo)(self.info);
            }
        }
    }
}

/// An RDM endpoint with its own completion queue and address vector, on one provider
/// domain. Not `Send`: one thread drives it (`FI_THREAD_DOMAIN`, manual progress).
pub struct Endpoint {
    pub(crate) shared: Rc<Shared>,
    pub(crate) info: EndpointInfo,
    pub(crate) wait_fd: Option<RawFd>,
    pub(crate) entries: Vec<ffi::CqDataEntry>,
}

impl Endpoint {
    /// Opens an endpoint on the first provider/domain `spec` admits, asking for `FI_EP_RDM`,
    /// `FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE`, the
    /// `FI_CONTEXT` mode, mr_mode `FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
    /// FI_MR_PROV_KEY | FI_MR_ENDPOINT` (the provider keeps those it needs; the returned ones
    /// are honoured), `FI_THREAD_DOMAIN`, manual progress, an `FI_AV_TABLE` address vector
    /// and one `FI_CQ_FORMAT_DATA` completion queue with an fd to wait on when the provider
    /// has one.
    pub fn open(lib: &Library, spec: &EndpointSpec) -> Result<Endpoint> {
        let list = get_info(lib, spec)?;
        let chosen = *list
            .matching(spec)
            .first()
            .ok_or_else(|| FabricError::NoProvider {
                wanted: spec.describe(),
                reason: "fi_getinfo offers none (see `fi_info -t FI_EP_RDM`)".into(),
            })?;
        let mut shared = Shared::new(lib);
        // SAFETY: an entry of the live list; the copy is ours (freed by Shared).
        shared.info = unsafe { (lib.calls().dupinfo)(chosen) };
        if shared.info.is_null() {
            return Err(FabricError::Invalid(
                "fi_dupinfo failed (out of memory)".into(),
            ));
        }
        drop(list);
        // SAFETY: a complete fi_info (fi_dupinfo of a getinfo result).
        let provider = unsafe { ProviderInfo::read(shared.info) };
        shared.mr_mode = provider.mr_mode;
        let wait_fd = open_objects(&mut shared, spec)?;
        // SAFETY: the fabric was opened just now.
        let api = unsafe { (*shared.fabric).api_version };
        Ok(Endpoint {
            shared: Rc::new(shared),
            info: EndpointInfo {
                provider,
                api_version: (api >> 16, api & 0xffff),
            },
            wait_fd,
            entries: vec![ffi::CqDataEntry::EMPTY; CQ_BATCH],
        })
    }

    /// What was opened: provider, domain, max message size, inject size, mr_mode in effect.
    pub fn info(&self) -> &EndpointInfo {
        &self.info
    }

    /// This endpoint's address (`fi_getname`), for peers to [`Endpoint::insert`].
    pub fn name(&self) -> Result<Vec<u8>> {
        let mut name = vec![0u8; 64];
        loop {
            let mut len = name.len();
            // SAFETY: the endpoint is live; `name` has room for `len` bytes.
            let rc = unsafe { ffi::getname(self.shared.ep, name.as_mut_ptr().cast(), &mut len) };
            if rc == -ffi::FI_ETOOSMALL && len > name.len() {
                name.resize(len, 0);
                continue;
            }
            self.shared.check("fi_getname", rc)?;
            name.truncate(len);
            return Ok(name);
        }
    }

    /// Inserts a peer's address (its [`Endpoint::name`]) in the address vector.
    pub fn insert(&mut self, name: &[u8]) -> Result<PeerAddr> {
        let info = &self.info.provider;
        check_address(info.addr_format, name, self.own_name_len()?)?;
        let mut addr = ffi::FI_ADDR_UNSPEC;
        // SAFETY: the AV is live; check_address made sure `name` holds a whole address of
        // the AV's format (the call takes no length).
        let rc = unsafe { ffi::av_insert(self.shared.av, name.as_ptr().cast(), &mut addr) };
        match rc {
            1 if addr != ffi::FI_ADDR_UNSPEC => Ok(PeerAddr(addr)),
            rc if rc < 0 => Err(FabricError::BadAddress {
                len: name.len(),
                reason: format!("fi_av_insert: {}", self.shared.lib.strerror(rc)),
            }),
            _ => Err(FabricError::BadAddress {
                len: name.len(),
                reason: "fi_av_insert inserted nothing".into(),
            }),
        }
    }

    fn own_name_len(&self) -> Result<usize> {
        Ok(self.name()?.len())
    }

    /// The fd that becomes readable when the completion queue may have entries (the CQ's
    /// `FI_WAIT_FD`), if the provider offers one. Sleep on it only after [`Endpoint::try_wait`]
    /// said so.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.wait_fd
    }

    /// Whether the caller may now sleep on [`Endpoint::wait_fd`] (`fi_trywait`): false means
    /// there may be completions or progress to make, so poll again first.
    pub fn try_wait(&mut self) -> bool {
        if self.wait_fd.is_none() {
            return false;
        }
        // SAFETY: the fabric and the CQ (one of its objects) are live.
        let rc = unsafe { ffi::trywait(self.shared.fabric, self.shared.cq.cast()) };
        rc == 0
    }
}

/// Opens fabric, domain, AV, CQ and endpoint into `shared`, binds and enables; returns the
/// CQ's wait fd. On error what was opened is closed by `shared`'s drop.
fn open_objects(shared: &mut Shared, spec: &EndpointSpec) -> Result<Option<RawFd>> {
    // SAFETY: shared.info is a complete fi_info; each object is opened from the previous
    // one and stored at once so that Shared's drop closes it on a later error.
    unsafe {
        let info = shared.info;
        let rc = (shared.lib.calls().fabric)(
            (*info).fabric_attr,
            &mut shared.fabric,
            std::ptr::null_mut(),
        );
        shared.check("fi_fabric", rc)?;
        let rc = ffi::domain(shared.fabric, info, &mut shared.domain);
        shared.check("fi_domain", rc)?;
        let mut av_attr = ffi::AvAttr {
            kind: ffi::FI_AV_TABLE,
            rx_ctx_bits: 0,
            count: spec.av_size,
            ep_per_node: 0,
            name: std::ptr::null(),
            map_addr: std::ptr::null_mut(),
            flags: 0,
        };
        let rc = ffi::av_open(shared.domain, &mut av_attr, &mut shared.av);
        shared.check("fi_av_open", rc)?;
        let wait_fd = open_cq(shared, spec.cq_size)?;
        let rc = ffi::endpoint(shared.domain, info, &mut shared.ep);
        shared.check("fi_endpoint", rc)?;
        let ep = shared.ep.cast::<ffi::Fid>();
        shared.check("fi_ep_bind (av)", ffi::bind(ep, shared.av.cast(), 0))?;
        let cq_flags = ffi::FI_SEND | ffi::FI_RECV;
        shared.check("fi_ep_bind (cq)", ffi::bind(ep, shared.cq.cast(), cq_flags))?;
        shared.check(
            "fi_enable",
            ffi::control(ep, ffi::FI_ENABLE, std::ptr::null_mut()),
        )?;
        Ok(wait_fd)
    }
}

/// Opens the CQ with an fd to wait on, or without a wait object when the provider has none.
///
/// # Safety
/// `shared.domain` is live.
unsafe fn open_cq(shared: &mut Shared, size: usize) -> Result<Option<RawFd>> {
    let mut attr = ffi::CqAttr {
        size,
        flags: 0,
        format: ffi::FI_CQ_FORMAT_DATA,
        wait_obj: ffi::FI_WAIT_FD,
        signaling_vector: 0,
        wait_cond: 0,
        wait_set: std::ptr::null_mut(),
    };
    // SAFETY: the caller's contract.
    unsafe {
        if ffi::cq_open(shared.domain, &mut attr, &mut shared.cq) == 0 {
            let mut fd: libc::c_int = -1;
            let rc = ffi::control(
                shared.cq.cast(),
                ffi::FI_GETWAIT,
                (&mut fd as *mut libc::c_int).cast(),
            );
            if rc == 0 && fd >= 0 {
                return Ok(Some(fd));
            }
            // An FD wait object without an fd to give: use the queue without one.
            ffi::close(shared.cq.cast());
            shared.cq = std::ptr::null_mut();
        }
        shared.cq = std::ptr::null_mut();
        attr.wait_obj = ffi::FI_WAIT_NONE;
        let rc = ffi::cq_open(shared.domain, &mut attr, &mut shared.cq);
        shared.check("fi_cq_open", rc)?;
    }
    Ok(None)
}

/// Checks that `name` is a whole address of `format` before libfabric reads it:
/// `fi_av_insert` takes no length, the provider reads as many bytes as its format has.
fn check_address(format: u32, name: &[u8], own_len: usize) -> Result<()> {
    let bad = |reason: String| FabricError::BadAddress {
        len: name.len(),
        reason,
    };
    match format {
        ffi::FI_ADDR_STR => {
            let Some(end) = name.iter().position(|&b| b == 0) else {
                return Err(bad("a string address without its terminating NUL".into()));
            };
            if end == 0 || !name[..end].iter().all(|b| b.is_ascii_graphic()) {
                return Err(bad("not a printable address string".into()));
            }
            Ok(())
        }
        ffi::FI_SOCKADDR | ffi::FI_SOCKADDR_IN | ffi::FI_SOCKADDR_IN6 => {
            let family = name.get(..2).map(|b| u16::from_ne_bytes([b[0], b[1]]));
            let want = match family.map(libc::c_int::from) {
                Some(libc::AF_INET) if format != ffi::FI_SOCKADDR_IN6 => 16,
                Some(libc::AF_INET6) if format != ffi::FI_SOCKADDR_IN => 28,
                _ => {
                    return Err(bad(format!(
                        "not a socket address of this fabric ({family:?})"
                    )))
                }
            };
            if name.len() != want {
                return Err(bad(format!(
                    "a socket address of this family has {want} bytes"
                )));
            }
            Ok(())
        }
        // Provider formats (EFA, CXI, PSM, …) have one fixed length: our own name's.
        _ if name.len() != own_len => {
            Err(bad(format!("this fabric's addresses have {own_len} bytes")))
        }
        _ => Ok(()),
    }
}
