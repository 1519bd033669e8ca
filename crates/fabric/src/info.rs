//! Asking libfabric for providers: the hints ferry sends (`fi_getinfo`), the answers it keeps,
//! and how they read as text.

use std::ffi::{c_char, CStr, CString};
use std::fmt;

use crate::error::{FabricError, Result};
use crate::ffi;
use crate::Library;

/// What an endpoint should be opened on. Everything else (RDM, message + RMA capabilities,
/// manual progress, …) is fixed by this crate; see [`crate::Endpoint::open`].
#[derive(Clone, Debug, Default)]
pub struct EndpointSpec {
    /// Provider names, comma-separated; one matches a provider whose name has it as one of
    /// its `;`-separated layers, as `FI_PROVIDER` does ("tcp" matches "tcp;ofi_rxm").
    /// `None`: any.
    pub provider: Option<String>,
    /// The domain (NIC) name, e.g. "mlx5_0", "cxi0", "lo". `None`: the first offered.
    pub domain: Option<String>,
    /// Completion queue entries; 0 leaves the size to the provider.
    pub cq_size: usize,
    /// Peers expected in the address vector; 0 leaves it to the provider.
    pub av_size: usize,
}

impl EndpointSpec {
    /// A spec for `provider` (and any domain).
    pub fn provider(name: &str) -> EndpointSpec {
        EndpointSpec {
            provider: Some(name.to_string()),
            ..EndpointSpec::default()
        }
    }

    fn names(&self) -> Vec<&str> {
        self.provider
            .as_deref()
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether a provider (`prov_name` of fi_info, e.g. "tcp;ofi_rxm") passes the filter.
    pub fn matches_provider(&self, prov_name: &str) -> bool {
        let names = self.names();
        names.is_empty()
            || names.iter().any(|want| {
                prov_name
                    .split(';')
                    .any(|layer| layer.eq_ignore_ascii_case(want))
            })
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "an RDM endpoint with FI_MSG and FI_RMA (provider {}, domain {})",
            self.provider.as_deref().unwrap_or("any"),
            self.domain.as_deref().unwrap_or("any")
        )
    }
}

/// The `mr_mode` bits of a domain: what registered memory needs there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrMode(pub i32);

impl MrMode {
    /// What ferry asks for: the modes verbs, EFA and CXI need, so that the path tested on
    /// tcp and shm is theirs; providers clear the bits they do not need.
    pub const REQUESTED: MrMode = MrMode(
        ffi::FI_MR_LOCAL
            | ffi::FI_MR_VIRT_ADDR
            | ffi::FI_MR_ALLOCATED
            | ffi::FI_MR_PROV_KEY
            | ffi::FI_MR_ENDPOINT,
    );
    const NAMES: [(i32, &'static str); 5] = [
        (ffi::FI_MR_LOCAL, "FI_MR_LOCAL"),
        (ffi::FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
        (ffi::FI_MR_ALLOCATED, "FI_MR_ALLOCATED"),
        (ffi::FI_MR_PROV_KEY, "FI_MR_PROV_KEY"),
        (ffi::FI_MR_ENDPOINT, "FI_MR_ENDPOINT"),
    ];

    /// Local buffers of every operation need a descriptor from a registration.
    pub fn local(self) -> bool {
        self.0 & ffi::FI_MR_LOCAL != 0
    }
    /// Peers address registered memory by virtual address (else by offset from 0).
    pub fn virt_addr(self) -> bool {
        self.0 & ffi::FI_MR_VIRT_ADDR != 0
    }
    /// The provider chooses the keys.
    pub fn prov_key(self) -> bool {
        self.0 & ffi::FI_MR_PROV_KEY != 0
    }
    /// A region is bound to the endpoint and enabled before use.
    pub fn endpoint(self) -> bool {
        self.0 & ffi::FI_MR_ENDPOINT != 0
    }
}

impl fmt::Display for MrMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        let mut names = Vec::new();
        for (bit, name) in MrMode::NAMES {
            if rest & bit != 0 {
                names.push(name.to_string());
                rest &= !bit;
            }
        }
        if rest != 0 {
            names.push(format!("{rest:#x}"));
        }
        if names.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&names.join(" | "))
    }
}

/// Capability bits (`FI_MSG`, `FI_RMA`, …) as libfabric reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps(pub u64);

impl Caps {
    const NAMES: [(u64, &'static str); 23] = [
        (ffi::FI_MSG, "FI_MSG"),
        (ffi::FI_RMA, "FI_RMA"),
        (1 << 3, "FI_TAGGED"),
        (1 << 4, "FI_ATOMIC"),
        (1 << 5, "FI_MULTICAST"),
        (1 << 6, "FI_COLLECTIVE"),
        (ffi::FI_READ, "FI_READ"),
        (ffi::FI_WRITE, "FI_WRITE"),
        (ffi::FI_RECV, "FI_RECV"),
        (ffi::FI_SEND, "FI_SEND"),
        (ffi::FI_REMOTE_READ, "FI_REMOTE_READ"),
        (ffi::FI_REMOTE_WRITE, "FI_REMOTE_WRITE"),
        (1 << 16, "FI_MULTI_RECV"),
        (1 << 17, "FI_REMOTE_CQ_DATA"),
        (1 << 20, "FI_TRIGGER"),
        (1 << 21, "FI_FENCE"),
        (1 << 47, "FI_HMEM"),
        (1 << 48, "FI_VARIABLE_MSG"),
        (1 << 49, "FI_RMA_PMEM"),
        (1 << 51, "FI_LOCAL_COMM"),
        (1 << 52, "FI_REMOTE_COMM"),
        (1 << 56, "FI_RMA_EVENT"),
        (1 << 57, "FI_SOURCE"),
    ];
    /// What ferry asks for.
    pub const REQUESTED: Caps = Caps(
        ffi::FI_MSG
            | ffi::FI_RMA
            | ffi::FI_READ
            | ffi::FI_WRITE
            | ffi::FI_REMOTE_READ
            | ffi::FI_REMOTE_WRITE,
    );
}

impl fmt::Display for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        let mut names = Vec::new();
        for (bit, name) in Caps::NAMES {
            if rest & bit != 0 {
                names.push(name.to_string());
                rest &= !bit;
            }
        }
        if rest != 0 {
            names.push(format!("{rest:#x}"));
        }
        f.write_str(&names.join(" | "))
    }
}

/// One provider/domain that can carry an endpoint as [`crate::Endpoint::open`] makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderInfo {
    /// The provider, layers included ("tcp;ofi_rxm", "shm", "verbs;ofi_rxm", "efa", "cxi").
    pub provider: String,
    /// The fabric ("127.0.0.1/32", "shm", "IB-0xfe80000000000000", …).
    pub fabric: String,
    /// The domain, i.e. the NIC ("lo", "mlx5_0", "cxi0").
    pub domain: String,
    /// `FI_EP_RDM` is 3 (always so here: it is what is asked for).
    pub endpoint_type: i32,
    /// What registered memory needs in this domain.
    pub mr_mode: MrMode,
    /// The endpoint's capabilities.
    pub caps: Caps,
    /// Mode bits the provider requires of us (`FI_CONTEXT` at most, since that is all we offer).
    pub mode: u64,
    /// The address format (`FI_SOCKADDR_IN` 2, `FI_ADDR_STR` 9, provider-specific others).
    pub addr_format: u32,
    /// The largest message.
    pub max_msg_size: usize,
    /// The largest `fi_inject`.
    pub inject_size: usize,
    /// The most buffers in one send.
    pub iov_limit: usize,
}

/// Copies a C string the library owns; NULL reads as "".
///
/// # Safety
/// `text` is NULL or a NUL-terminated string valid for the call.
pub(crate) unsafe fn text(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

impl ProviderInfo {
    /// Reads one `fi_info`.
    ///
    /// # Safety
    /// `info` is a live `fi_info` from `fi_getinfo` or `fi_dupinfo` with all its attributes.
    pub(crate) unsafe fn read(info: *const ffi::Info) -> ProviderInfo {
        // SAFETY: the caller's contract: the attribute pointers of a getinfo result are set,
        // and every field read exists since API 1.5 (see ffi).
        unsafe {
            let info = &*info;
            let fabric = &*info.fabric_attr;
            let domain = &*info.domain_attr;
            let tx = &*info.tx_attr;
            ProviderInfo {
                provider: text(fabric.prov_name),
                fabric: text(fabric.name),
                domain: text(domain.name),
                endpoint_type: (*info.ep_attr).kind,
                mr_mode: MrMode(domain.mr_mode),
                caps: Caps(info.caps),
                mode: info.mode,
                addr_format: info.addr_format,
                max_msg_size: (*info.ep_attr).max_msg_size,
                inject_size: tx.inject_size,
                iov_limit: tx.iov_limit,
            }
        }
    }
}

/// A list from `fi_getinfo`, freed on drop.
pub(crate) struct InfoList {
    lib: Library,
    head: *mut ffi::Info,
}

impl InfoList {
    /// The entries that pass `spec`'s filters, in libfabric's order (best first).
    pub(crate) fn matching(&self, spec: &EndpointSpec) -> Vec<*mut ffi::Info> {
        let mut found = Vec::new();
        let mut at = self.head;
        while !at.is_null() {
            // SAFETY: `at` is an entry of the live list (see ProviderInfo::read).
            let entry = unsafe { ProviderInfo::read(at) };
            let domain_ok = spec.domain.as_deref().is_none_or(|d| d == entry.domain);
            if spec.matches_provider(&entry.provider) && domain_ok {
                found.push(at);
            }
            // SAFETY: as above.
            at = unsafe { (*at).next };
        }
        found
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.head.is_null() {
            // SAFETY: the list fi_getinfo returned, freed once.
            unsafe { (self.lib.calls().freeinfo)(self.head) }
        }
    }
}

/// The hints of ferry's endpoints (see the crate's doc), with `spec`'s filter where
/// libfabric can apply it.
struct HintsInfo {
    lib: Library,
    info: *mut ffi::Info,
}

impl Drop for HintsInfo {
    fn drop(&mut self) {
        // SAFETY: allocated by fi_dupinfo; the strings in it were strdup'ed, fi_freeinfo
        // frees them.
        unsafe { (self.lib.calls().freeinfo)(self.info) }
    }
}

fn strdup(text: &str) -> Result<*mut c_char> {
    let text = CString::new(text)
        .map_err(|_| FabricError::Invalid(format!("name {text:?} contains a NUL byte")))?;
    // SAFETY: a NUL-terminated string; fi_freeinfo frees the copy with free().
    let copy = unsafe { libc::strdup(text.as_ptr()) };
    if copy.is_null() {
        return Err(FabricError::Invalid("out of memory copying a hint".into()));
    }
    Ok(copy)
}

impl HintsInfo {
    fn new(lib: &Library, spec: &EndpointSpec) -> Result<HintsInfo> {
        // SAFETY: fi_dupinfo(NULL) is fi_allocinfo: a zeroed fi_info with all attributes.
        let info = unsafe { (lib.calls().dupinfo)(std::ptr::null()) };
        if info.is_null() {
            return Err(FabricError::Invalid(
                "fi_allocinfo failed (out of memory)".into(),
            ));
        }
        let hints = HintsInfo {
            lib: lib.clone(),
            info,
        };
        // SAFETY: a fresh fi_allocinfo result: every attribute struct is allocated.
        unsafe {
            let info = &mut *hints.info;
            info.caps = Caps::REQUESTED.0;
            info.mode = ffi::FI_CONTEXT;
            (*info.ep_attr).kind = ffi::FI_EP_RDM;
            // Messages of a pair arrive in the order they were sent, as MPI's matching needs.
            (*info.tx_attr).msg_order = ffi::FI_ORDER_SAS;
            (*info.rx_attr).msg_order = ffi::FI_ORDER_SAS;
            let domain = &mut *info.domain_attr;
            domain.mr_mode = MrMode::REQUESTED.0;
            domain.threading = ffi::FI_THREAD_DOMAIN;
            domain.control_progress = ffi::FI_PROGRESS_MANUAL;
            domain.data_progress = ffi::FI_PROGRESS_MANUAL;
            domain.av_type = ffi::FI_AV_TABLE;
            if let Some(name) = &spec.domain {
                domain.name = strdup(name)?;
            }
            if let [single] = spec.names()[..] {
                (*info.fabric_attr).prov_name = strdup(single)?;
            }
        }
        Ok(hints)
    }
}

/// `fi_getinfo` with ferry's hints; an empty list when nothing matches.
pub(crate) fn get_info(lib: &Library, spec: &EndpointSpec) -> Result<InfoList> {
    let hints = HintsInfo::new(lib, spec)?;
    let mut head = std::ptr::null_mut();
    // SAFETY: hints is a complete fi_info; head receives a list we free (InfoList).
    let rc = unsafe {
        (lib.calls().getinfo)(
            ffi::API_VERSION,
            std::ptr::null(),
            std::ptr::null(),
            0,
            hints.info,
            &mut head,
        )
    };
    let list = InfoList {
        lib: lib.clone(),
        head,
    };
    match rc {
        0 => Ok(list),
        rc if rc == -libc::ENODATA => Ok(list),
        rc => Err(lib.call_error("fi_getinfo", rc as isize)),
    }
}
