//! The raw layer: libfabric's exported calls, loaded at run time, the C layouts they take, and
//! the header's `static inline` calls written out as calls through a fid's ops tables. Every
//! `unsafe` that touches libfabric memory is here or names the function of this module it
//! relies on.
//!
//! **Layouts** are those of libfabric 1.17's headers (`rdma/fabric.h`, `fi_domain.h`,
//! `fi_endpoint.h`, `fi_eq.h`, `fi_cm.h`, `fi_rma.h`) on 64-bit Linux, checked below with
//! const asserts against the sizes and offsets a C compiler gives for them. libfabric's ABI
//! rule is that these structs and ops tables only grow at their end across versions, and the
//! attribute structs we read are allocated by the library itself (`fi_dupinfo`,
//! `fi_getinfo`), so a newer library hands us a longer struct whose prefix is this one. We
//! only read fields that exist at [`API_VERSION`] (1.5), so an older library never has us
//! read past its structs; the one struct libfabric writes into our memory,
//! `fi_cq_err_entry`, is copied at the size of the requested API version (the 1.5 … 1.19
//! layout; 1.20 appended `src_addr`), and we leave room for the longer one anyway.
//!
//! **Symbols**: `dlsym` gives each call's default version (`fi_getinfo@@FABRIC_1.3` in 1.17),
//! the one whose structs are the installed headers'.

use std::ffi::{c_char, c_int, c_void};

/// `FI_VERSION(major, minor)`.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The API version ferry asks for: 1.5 is the first with the `mr_mode` bits (`FI_MR_LOCAL`,
/// `FI_MR_VIRT_ADDR`, `FI_MR_ALLOCATED`, `FI_MR_PROV_KEY`, `FI_MR_ENDPOINT`) and with
/// `fi_cq_readerr` giving the provider's own error data; `fi_trywait` is 1.3.
pub const API_VERSION: u32 = fi_version(1, 5);

// Capabilities and operation flags (fabric.h).
pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_READ: u64 = 1 << 8;
pub const FI_WRITE: u64 = 1 << 9;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_REMOTE_READ: u64 = 1 << 12;
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
/// Mode bit: every operation's context points at a `struct fi_context` the provider may use.
pub const FI_CONTEXT: u64 = 1 << 59;
/// Messages between two endpoints are sent and received in the order they were posted.
pub const FI_ORDER_SAS: u64 = 1 << 8;

// Memory registration modes (fabric.h).
pub const FI_MR_LOCAL: i32 = 1 << 2;
pub const FI_MR_VIRT_ADDR: i32 = 1 << 4;
pub const FI_MR_ALLOCATED: i32 = 1 << 5;
pub const FI_MR_PROV_KEY: i32 = 1 << 6;
pub const FI_MR_ENDPOINT: i32 = 1 << 9;

// Enums (fabric.h, fi_eq.h, fi_domain.h).
pub const FI_EP_RDM: c_int = 3;
pub const FI_AV_TABLE: c_int = 2;
pub const FI_THREAD_DOMAIN: c_int = 3;
pub const FI_PROGRESS_MANUAL: c_int = 2;
pub const FI_WAIT_NONE: c_int = 0;
pub const FI_WAIT_FD: c_int = 3;
pub const FI_CQ_FORMAT_DATA: c_int = 3;
/// `fi_control` commands.
pub const FI_GETWAIT: c_int = 5;
pub const FI_ENABLE: c_int = 6;
/// Address formats.
pub const FI_SOCKADDR: u32 = 1;
pub const FI_SOCKADDR_IN: u32 = 2;
pub const FI_SOCKADDR_IN6: u32 = 3;
pub const FI_ADDR_STR: u32 = 9;
/// `fi_addr_t` for "any source" and "not inserted".
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;

// Errors (fi_errno.h): negated on return; the first ones are errno values.
pub const FI_EAGAIN: c_int = libc::EAGAIN;
pub const FI_ETOOSMALL: c_int = 257;
pub const FI_EAVAIL: c_int = 259;
pub const FI_ETRUNC: c_int = 265;

/// A function slot of an ops table ferry never calls (only its place matters).
type Unused = Option<unsafe extern "C" fn()>;

#[repr(C)]
pub struct Fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *const FiOps,
}

#[repr(C)]
pub struct FiOps {
    pub size: usize,
    pub close: Option<unsafe extern "C" fn(*mut Fid) -> c_int>,
    pub bind: Option<unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int>,
    pub control: Option<unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int>,
    ops_open: Unused,
    tostr: Unused,
    ops_set: Unused,
}

#[repr(C)]
pub struct TxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    // `uint32_t tclass` (1.9) follows; not read.
}

#[repr(C)]
pub struct RxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

#[repr(C)]
pub struct EpAttr {
    pub kind: c_int,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    // msg_prefix_size and later fields follow; not read.
}

#[repr(C)]
pub struct DomainAttr {
    pub domain: *mut FidDomain,
    pub name: *mut c_char,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub resource_mgmt: c_int,
    pub av_type: c_int,
    pub mr_mode: c_int,
    pub mr_key_size: usize,
    // cq_data_size and later fields follow; not read.
}

#[repr(C)]
pub struct FabricAttr {
    pub fabric: *mut FidFabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
pub struct Info {
    pub next: *mut Info,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut Fid,
    pub tx_attr: *mut TxAttr,
    pub rx_attr: *mut RxAttr,
    pub ep_attr: *mut EpAttr,
    pub domain_attr: *mut DomainAttr,
    pub fabric_attr: *mut FabricAttr,
    // `struct fid_nic *nic` (1.9) follows; not read.
}

#[repr(C)]
pub struct FiOpsFabric {
    pub size: usize,
    pub domain: Option<
        unsafe extern "C" fn(*mut FidFabric, *mut Info, *mut *mut FidDomain, *mut c_void) -> c_int,
    >,
    passive_ep: Unused,
    eq_open: Unused,
    wait_open: Unused,
    pub trywait: Option<unsafe extern "C" fn(*mut FidFabric, *mut *mut Fid, c_int) -> c_int>,
    domain2: Unused,
}

#[repr(C)]
pub struct FidFabric {
    pub fid: Fid,
    pub ops: *const FiOpsFabric,
    pub api_version: u32,
}

#[repr(C)]
pub struct AvAttr {
    pub kind: c_int,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct CqAttr {
    pub size: usize,
    pub flags: u64,
    pub format: c_int,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_cond: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct FiOpsDomain {
    pub size: usize,
    pub av_open: Option<
        unsafe extern "C" fn(*mut FidDomain, *mut AvAttr, *mut *mut FidAv, *mut c_void) -> c_int,
    >,
    pub cq_open: Option<
        unsafe extern "C" fn(*mut FidDomain, *mut CqAttr, *mut *mut FidCq, *mut c_void) -> c_int,
    >,
    pub endpoint: Option<
        unsafe extern "C" fn(*mut FidDomain, *mut Info, *mut *mut FidEp, *mut c_void) -> c_int,
    >,
    scalable_ep: Unused,
    cntr_open: Unused,
    poll_open: Unused,
    stx_ctx: Unused,
    srx_ctx: Unused,
    query_atomic: Unused,
    query_collective: Unused,
    endpoint2: Unused,
}

/// `fi_mr_reg`'s prototype: fid, buf, len, access, offset, requested_key, flags, mr, context.
pub type MrRegFn = unsafe extern "C" fn(
    *mut Fid,
    *const c_void,
    usize,
    u64,
    u64,
    u64,
    u64,
    *mut *mut FidMr,
    *mut c_void,
) -> c_int;

#[repr(C)]
pub struct FiOpsMr {
    pub size: usize,
    pub reg: Option<MrRegFn>,
    regv: Unused,
    regattr: Unused,
}

#[repr(C)]
pub struct FidDomain {
    pub fid: Fid,
    pub ops: *const FiOpsDomain,
    pub mr: *const FiOpsMr,
}

#[repr(C)]
pub struct FidMr {
    pub fid: Fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

#[repr(C)]
pub struct FiOpsAv {
    pub size: usize,
    pub insert: Option<
        unsafe extern "C" fn(*mut FidAv, *const c_void, usize, *mut u64, u64, *mut c_void) -> c_int,
    >,
    insertsvc: Unused,
    insertsym: Unused,
    remove: Unused,
    lookup: Unused,
    straddr: Unused,
    av_set: Unused,
}

#[repr(C)]
pub struct FidAv {
    pub fid: Fid,
    pub ops: *const FiOpsAv,
}

#[repr(C)]
pub struct FiOpsCm {
    pub size: usize,
    setname: Unused,
    pub getname: Option<unsafe extern "C" fn(*mut Fid, *mut c_void, *mut usize) -> c_int>,
    getpeer: Unused,
    connect: Unused,
    listen: Unused,
    accept: Unused,
    reject: Unused,
    shutdown: Unused,
    join: Unused,
}

/// `fi_send`/`fi_recv`'s shape: ep, buf, len, desc, addr, context.
pub type MsgFn =
    unsafe extern "C" fn(*mut FidEp, *mut c_void, usize, *mut c_void, u64, *mut c_void) -> isize;
/// `fi_sendv`'s shape: ep, iov, desc array, count, addr, context.
pub type MsgvFn = unsafe extern "C" fn(
    *mut FidEp,
    *const libc::iovec,
    *mut *mut c_void,
    usize,
    u64,
    *mut c_void,
) -> isize;

#[repr(C)]
pub struct FiOpsMsg {
    pub size: usize,
    pub recv: Option<MsgFn>,
    recvv: Unused,
    recvmsg: Unused,
    send: Unused,
    pub sendv: Option<MsgvFn>,
    sendmsg: Unused,
    pub inject: Option<unsafe extern "C" fn(*mut FidEp, *const c_void, usize, u64) -> isize>,
    senddata: Unused,
    injectdata: Unused,
}

/// `fi_read`/`fi_write`'s shape: ep, buf, len, desc, peer, remote addr, key, context.
pub type RmaFn = unsafe extern "C" fn(
    *mut FidEp,
    *mut c_void,
    usize,
    *mut c_void,
    u64,
    u64,
    u64,
    *mut c_void,
) -> isize;

#[repr(C)]
pub struct FiOpsRma {
    pub size: usize,
    pub read: Option<RmaFn>,
    readv: Unused,
    readmsg: Unused,
    pub write: Option<RmaFn>,
    writev: Unused,
    writemsg: Unused,
    inject: Unused,
    writedata: Unused,
    injectdata: Unused,
}

#[repr(C)]
pub struct FidEp {
    pub fid: Fid,
    pub ops: *const c_void,
    pub cm: *const FiOpsCm,
    pub msg: *const FiOpsMsg,
    pub rma: *const FiOpsRma,
    pub tagged: *const c_void,
    pub atomic: *const c_void,
    pub collective: *const c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CqDataEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
}

impl CqDataEntry {
    pub const EMPTY: CqDataEntry = CqDataEntry {
        op_context: std::ptr::null_mut(),
        flags: 0,
        len: 0,
        buf: std::ptr::null_mut(),
        data: 0,
    };
}

#[repr(C)]
pub struct CqErrEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
    /// Room for fields a newer API version appends (`src_addr` in 1.20); never read.
    _reserve: [u64; 4],
}

impl CqErrEntry {
    pub fn zeroed() -> CqErrEntry {
        CqErrEntry {
            op_context: std::ptr::null_mut(),
            flags: 0,
            len: 0,
            buf: std::ptr::null_mut(),
            data: 0,
            tag: 0,
            olen: 0,
            err: 0,
            prov_errno: 0,
            err_data: std::ptr::null_mut(),
            // 0: the provider points err_data at a buffer of its own (API ≥ 1.5).
            err_data_size: 0,
            _reserve: [0; 4],
        }
    }
}

#[repr(C)]
pub struct FiOpsCq {
    pub size: usize,
    pub read: Option<unsafe extern "C" fn(*mut FidCq, *mut c_void, usize) -> isize>,
    readfrom: Unused,
    pub readerr: Option<unsafe extern "C" fn(*mut FidCq, *mut CqErrEntry, u64) -> isize>,
    sread: Unused,
    sreadfrom: Unused,
    signal: Unused,
    pub strerror: Option<
        unsafe extern "C" fn(*mut FidCq, c_int, *const c_void, *mut c_char, usize) -> *const c_char,
    >,
}

#[repr(C)]
pub struct FidCq {
    pub fid: Fid,
    pub ops: *const FiOpsCq,
}

// The layouts against a C compiler's for the 1.17 headers (x86-64 and aarch64 Linux alike).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Fid>() == 24 && size_of::<FiOps>() == 56);
    assert!(offset_of!(TxAttr, inject_size) == 40 && offset_of!(TxAttr, iov_limit) == 56);
    assert!(offset_of!(EpAttr, max_msg_size) == 16);
    assert!(offset_of!(RxAttr, msg_order) == 24 && size_of::<RxAttr>() == 64);
    assert!(offset_of!(DomainAttr, threading) == 16 && offset_of!(DomainAttr, mr_mode) == 36);
    assert!(offset_of!(DomainAttr, mr_key_size) == 40);
    assert!(size_of::<FabricAttr>() == 32 && offset_of!(FabricAttr, prov_version) == 24);
    assert!(offset_of!(Info, addr_format) == 24 && offset_of!(Info, src_addrlen) == 32);
    assert!(offset_of!(Info, tx_attr) == 72 && offset_of!(Info, fabric_attr) == 104);
    assert!(size_of::<FidFabric>() == 40 && size_of::<FiOpsFabric>() == 56);
    assert!(size_of::<FidDomain>() == 40 && size_of::<FiOpsDomain>() == 96);
    assert!(size_of::<FiOpsMr>() == 32 && size_of::<FidMr>() == 40 && offset_of!(FidMr, key) == 32);
    assert!(size_of::<FidAv>() == 32 && size_of::<FiOpsAv>() == 64 && size_of::<AvAttr>() == 48);
    assert!(
        size_of::<FidEp>() == 80 && offset_of!(FidEp, msg) == 40 && offset_of!(FidEp, rma) == 48
    );
    assert!(size_of::<FiOpsMsg>() == 80 && size_of::<FiOpsRma>() == 80);
    assert!(size_of::<FiOpsCm>() == 80 && offset_of!(FiOpsCm, getname) == 16);
    assert!(size_of::<FidCq>() == 32 && size_of::<FiOpsCq>() == 64);
    assert!(offset_of!(FiOpsCq, strerror) == 56 && size_of::<CqAttr>() == 40);
    assert!(size_of::<CqDataEntry>() == 40);
    assert!(offset_of!(CqErrEntry, olen) == 48 && offset_of!(CqErrEntry, err) == 56);
    assert!(offset_of!(CqErrEntry, err_data) == 64 && offset_of!(CqErrEntry, _reserve) == 80);
};

/// The calls libfabric exports (the rest of its API is inline in the headers, below).
#[derive(Clone, Copy)]
pub struct Calls {
    pub getinfo: unsafe extern "C" fn(
        u32,
        *const c_char,
        *const c_char,
        u64,
        *const Info,
        *mut *mut Info,
    ) -> c_int,
    pub freeinfo: unsafe extern "C" fn(*mut Info),
    pub dupinfo: unsafe extern "C" fn(*const Info) -> *mut Info,
    pub fabric: unsafe extern "C" fn(*mut FabricAttr, *mut *mut FidFabric, *mut c_void) -> c_int,
    pub strerror: unsafe extern "C" fn(c_int) -> *const c_char,
    pub version: unsafe extern "C" fn() -> u32,
}

/// Why [`load`] failed: the file could not be opened, or it lacks a call.
pub enum LoadFailure {
    Open(String),
    Symbol(&'static str, String),
}

/// Opens `path` and resolves the exported calls. The library stays loaded for the life of
/// the process: providers keep state (and, for some, threads) that outlives their objects.
pub fn load(path: &str) -> Result<Calls, LoadFailure> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // GLOBAL: provider plugins that libfabric opens itself may look up its symbols.
    // SAFETY: libfabric's initializers only set up its own state (no code of ours runs).
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
        .map_err(|e| LoadFailure::Open(e.to_string()))?;
    macro_rules! symbol {
        ($name:literal) => {
            // SAFETY: the field's type is the call's C prototype in rdma/fabric.h and
            // rdma/fi_errno.h, unchanged since libfabric 1.0.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| LoadFailure::Symbol($name, e.to_string()))?
        };
    }
    let calls = Calls {
        getinfo: symbol!("fi_getinfo"),
        freeinfo: symbol!("fi_freeinfo"),
        dupinfo: symbol!("fi_dupinfo"),
        fabric: symbol!("fi_fabric"),
        strerror: symbol!("fi_strerror"),
        version: symbol!("fi_version"),
    };
    std::mem::forget(lib);
    Ok(calls)
}

// The header's inline calls. Each takes live objects opened through libfabric (the caller's
// safety contract) and returns the call's result, or -FI_ENOSYS when the provider left the
// ops slot empty.

const ENOSYS: c_int = -libc::ENOSYS;

/// `fi_close`.
///
/// # Safety
/// `fid` is a live object of this library; it is gone afterwards.
pub unsafe fn close(fid: *mut Fid) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*fid).ops).close {
            Some(call) => call(fid),
            None => ENOSYS,
        }
    }
}

/// `fi_ep_bind`, `fi_mr_bind` (the generic `fid->ops->bind`).
///
/// # Safety
/// Both are live objects of this library.
pub unsafe fn bind(fid: *mut Fid, to: *mut Fid, flags: u64) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*fid).ops).bind {
            Some(call) => call(fid, to, flags),
            None => ENOSYS,
        }
    }
}

/// `fi_control`; `fi_enable` and `fi_mr_enable` are `control(FI_ENABLE, NULL)`.
///
/// # Safety
/// `fid` is live and `arg` what `command` takes.
pub unsafe fn control(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*fid).ops).control {
            Some(call) => call(fid, command, arg),
            None => ENOSYS,
        }
    }
}

/// `fi_domain`.
///
/// # Safety
/// `fabric` is live, `info` one of its `fi_getinfo` results.
pub unsafe fn domain(fabric: *mut FidFabric, info: *mut Info, out: *mut *mut FidDomain) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*fabric).ops).domain {
            Some(call) => call(fabric, info, out, std::ptr::null_mut()),
            None => ENOSYS,
        }
    }
}

/// `fi_trywait` on one object.
///
/// # Safety
/// `fabric` and `fid` are live and `fid` belongs to the fabric.
pub unsafe fn trywait(fabric: *mut FidFabric, mut fid: *mut Fid) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*fabric).ops).trywait {
            Some(call) => call(fabric, &mut fid, 1),
            None => ENOSYS,
        }
    }
}

/// `fi_av_open`.
///
/// # Safety
/// `domain` is live.
pub unsafe fn av_open(domain: *mut FidDomain, attr: &mut AvAttr, out: *mut *mut FidAv) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*domain).ops).av_open {
            Some(call) => call(domain, attr, out, std::ptr::null_mut()),
            None => ENOSYS,
        }
    }
}

/// `fi_cq_open`.
///
/// # Safety
/// `domain` is live.
pub unsafe fn cq_open(domain: *mut FidDomain, attr: &mut CqAttr, out: *mut *mut FidCq) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*domain).ops).cq_open {
            Some(call) => call(domain, attr, out, std::ptr::null_mut()),
            None => ENOSYS,
        }
    }
}

/// `fi_endpoint`.
///
/// # Safety
/// `domain` is live, `info` the result it was opened with.
pub unsafe fn endpoint(domain: *mut FidDomain, info: *mut Info, out: *mut *mut FidEp) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*domain).ops).endpoint {
            Some(call) => call(domain, info, out, std::ptr::null_mut()),
            None => ENOSYS,
        }
    }
}

/// `fi_mr_reg` (no offset, no flags, no context).
///
/// # Safety
/// `domain` is live; `buf..buf+len` stays valid until the region is closed.
pub unsafe fn mr_reg(
    domain: *mut FidDomain,
    buf: *const c_void,
    len: usize,
    access: u64,
    requested_key: u64,
    out: *mut *mut FidMr,
) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*domain).mr).reg {
            Some(call) => call(
                &mut (*domain).fid,
                buf,
                len,
                access,
                0,
                requested_key,
                0,
                out,
                std::ptr::null_mut(),
            ),
            None => ENOSYS,
        }
    }
}

/// `fi_av_insert` of one address, synchronously (no flags, no context).
///
/// # Safety
/// `av` is live; `addr` holds a whole address of the AV's format.
pub unsafe fn av_insert(av: *mut FidAv, addr: *const c_void, out: &mut u64) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*av).ops).insert {
            Some(call) => call(av, addr, 1, out, 0, std::ptr::null_mut()),
            None => ENOSYS,
        }
    }
}

/// `fi_getname` of an endpoint.
///
/// # Safety
/// `ep` is live; `addr` has room for `*len` bytes.
pub unsafe fn getname(ep: *mut FidEp, addr: *mut c_void, len: &mut usize) -> c_int {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*ep).cm).getname {
            Some(call) => call(&mut (*ep).fid, addr, len),
            None => ENOSYS,
        }
    }
}

/// `fi_recv`.
///
/// # Safety
/// `ep` is live; the buffer and `context` stay valid until the operation completes.
pub unsafe fn recv(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*ep).msg).recv {
            Some(call) => call(ep, buf, len, desc, FI_ADDR_UNSPEC, context),
            None => ENOSYS as isize,
        }
    }
}

/// `fi_sendv`.
///
/// # Safety
/// `ep` is live; `iov` and `desc` hold `count` entries; the buffers and `context` stay valid
/// until the operation completes.
pub unsafe fn sendv(
    ep: *mut FidEp,
    iov: *const libc::iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*ep).msg).sendv {
            Some(call) => call(ep, iov, desc, count, dest, context),
            None => ENOSYS as isize,
        }
    }
}

/// `fi_inject`.
///
/// # Safety
/// `ep` is live; `buf` holds `len` bytes (only for the call).
pub unsafe fn inject(ep: *mut FidEp, buf: *const c_void, len: usize, dest: u64) -> isize {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*ep).msg).inject {
            Some(call) => call(ep, buf, len, dest),
            None => ENOSYS as isize,
        }
    }
}

/// Which one-sided call [`rma`] makes.
#[derive(Clone, Copy)]
pub enum RmaOp {
    Read,
    Write,
}

/// `fi_read` or `fi_write`.
///
/// # Safety
/// `ep` is live; the local buffer and `context` stay valid until the operation completes.
#[allow(clippy::too_many_arguments)]
pub unsafe fn rma(
    op: RmaOp,
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    peer: u64,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        let ops = &*(*ep).rma;
        let call = match op {
            RmaOp::Read => ops.read,
            RmaOp::Write => ops.write,
        };
        match call {
            Some(call) => call(ep, buf, len, desc, peer, addr, key, context),
            None => ENOSYS as isize,
        }
    }
}

/// `fi_cq_read` in the `FI_CQ_FORMAT_DATA` format.
///
/// # Safety
/// `cq` is live and opened with that format.
pub unsafe fn cq_read(cq: *mut FidCq, entries: &mut [CqDataEntry]) -> isize {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*cq).ops).read {
            Some(call) => call(cq, entries.as_mut_ptr().cast(), entries.len()),
            None => ENOSYS as isize,
        }
    }
}

/// `fi_cq_readerr`.
///
/// # Safety
/// `cq` is live.
pub unsafe fn cq_readerr(cq: *mut FidCq, entry: &mut CqErrEntry) -> isize {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*cq).ops).readerr {
            Some(call) => call(cq, entry, 0),
            None => ENOSYS as isize,
        }
    }
}

/// `fi_cq_strerror`: the provider's text for an error entry, or NULL.
///
/// # Safety
/// `cq` is live and `entry` was just read from it (its err_data is the provider's until the
/// next read).
pub unsafe fn cq_strerror(cq: *mut FidCq, entry: &CqErrEntry, buf: &mut [u8]) -> *const c_char {
    // SAFETY: the caller's contract; a live object's ops tables are the provider's
    // and live as long as it.
    unsafe {
        match (*(*cq).ops).strerror {
            Some(call) => call(
                cq,
                entry.prov_errno,
                entry.err_data,
                buf.as_mut_ptr().cast(),
                buf.len(),
            ),
            None => std::ptr::null(),
        }
    }
}
