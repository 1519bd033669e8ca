//! The few libpmix calls ferry makes, loaded at run time, and the C layouts they take. Every
//! `unsafe` of the PMIx client is here.
//!
//! **Why loaded, not linked.** Only ranks started by a PMIx server (`srun --mpi=pmix`,
//! `prterun`) need libpmix; linking it would make every ferry program, `libmpi.so` included,
//! fail to start on a machine without it. So the library is opened (`dlopen`) when the
//! environment says PMIx, and a machine without it gets an error naming the library then.
//!
//! **Layouts** (OpenPMIx 4.2's `pmix_common.h`, the same in 5.0; checked below with const
//! asserts against what a C compiler gives on x86-64 Linux):
//! - `pmix_proc_t` = `{ char nspace[256]; uint32_t rank; }`, 260 bytes, align 4.
//! - `pmix_value_t` = `{ uint16_t type; union data; }`, the union at offset 8, 32 bytes: its
//!   largest members are `pmix_envar_t` (two pointers and a char, 24 bytes) and
//!   `pmix_byte_object_t` = `{ char *bytes; size_t size; }`.
//! - `pmix_info_t` = `{ char key[512]; uint32_t flags; pmix_value_t value; }`, the value at
//!   offset 520, 552 bytes.
//! - `pmix_pdata_t` = `{ pmix_proc_t proc; char key[512]; pmix_value_t value; }`, the key at
//!   offset 260, the value at 776, 808 bytes.
//! - Type codes: `PMIX_BOOL` 1, `PMIX_STRING` 3, `PMIX_SIZE` 4, `PMIX_INT` 6, `PMIX_INT32` 9,
//!   `PMIX_UINT16` 13, `PMIX_UINT32` 14, `PMIX_UINT64` 15, `PMIX_BYTE_OBJECT` 27,
//!   `PMIX_PROC_RANK` 40. Scope `PMIX_GLOBAL` 3. Ranks: `PMIX_RANK_WILDCARD` = 2^32 - 2 (the
//!   job itself, for job-level keys).
//! - A value `PMIx_Get` returns is the library's (malloc'ed); `PMIx_Value_destruct` frees what
//!   it points to, then the struct itself goes with `free` (that is `PMIX_VALUE_RELEASE`).

use std::ffi::{c_char, c_int, CStr, CString};

/// Longest namespace name, without the NUL (`PMIX_MAX_NSLEN`).
pub(crate) const MAX_NSLEN: usize = 255;
/// Longest key, without the NUL (`PMIX_MAX_KEYLEN`).
pub(crate) const MAX_KEYLEN: usize = 511;
/// The rank that stands for the whole job in `PMIx_Get` of job-level keys.
pub(crate) const RANK_WILDCARD: u32 = u32::MAX - 1;

const PMIX_SUCCESS: c_int = 0;
const PMIX_ERR_NOT_FOUND: c_int = -46;
/// The server does not offer the call (Slurm's has no name service).
pub(crate) const ERR_NOT_SUPPORTED: i32 = -47;
const PMIX_GLOBAL: u8 = 3;

const TYPE_BOOL: u16 = 1;
const TYPE_STRING: u16 = 3;
const TYPE_SIZE: u16 = 4;
const TYPE_INT: u16 = 6;
const TYPE_INT32: u16 = 9;
const TYPE_UINT16: u16 = 13;
const TYPE_UINT32: u16 = 14;
const TYPE_UINT64: u16 = 15;
const TYPE_BYTE_OBJECT: u16 = 27;
const TYPE_PROC_RANK: u16 = 40;

/// Asks a fence to bring every process's committed values along (`PMIX_COLLECT_DATA`).
const KEY_COLLECT_DATA: &str = "pmix.collect";
/// Asks a get to answer from what the local server has, not to wait for the value to be
/// published (`PMIX_IMMEDIATE`): a missing key is "not found", never a wait.
const KEY_IMMEDIATE: &str = "pmix.immediate";

#[repr(C)]
struct Proc {
    nspace: [c_char; MAX_NSLEN + 1],
    rank: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ByteObject {
    bytes: *mut c_char,
    size: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
union ValueData {
    flag: bool,
    uint16: u16,
    uint32: u32,
    int: c_int,
    size: usize,
    uint64: u64,
    string: *mut c_char,
    bo: ByteObject,
    /// The union's full size (`pmix_envar_t`).
    _envar: [u64; 3],
}

#[repr(C)]
struct Value {
    kind: u16,
    data: ValueData,
}

#[repr(C)]
struct Info {
    key: [c_char; MAX_KEYLEN + 1],
    flags: u32,
    value: Value,
}

#[repr(C)]
struct PData {
    proc: Proc,
    key: [c_char; MAX_KEYLEN + 1],
    value: Value,
}

const _: () = assert!(std::mem::size_of::<PData>() == 808);
const _: () = assert!(std::mem::offset_of!(PData, key) == 260);
const _: () = assert!(std::mem::offset_of!(PData, value) == 776);
const _: () = assert!(std::mem::size_of::<Proc>() == 260 && std::mem::align_of::<Proc>() == 4);
const _: () = assert!(std::mem::size_of::<Value>() == 32);
const _: () = assert!(std::mem::offset_of!(Value, data) == 8);
const _: () = assert!(std::mem::size_of::<Info>() == 552);
const _: () = assert!(std::mem::offset_of!(Info, flags) == 512);
const _: () = assert!(std::mem::offset_of!(Info, value) == 520);

impl Info {
    /// A true boolean under `key`, as a hint (no `PMIX_INFO_REQD`: a server that does not
    /// know it may ignore it).
    fn flag(key: &str) -> Info {
        let mut info = Info {
            key: [0; MAX_KEYLEN + 1],
            flags: 0,
            value: Value {
                kind: TYPE_BOOL,
                data: ValueData { _envar: [0; 3] },
            },
        };
        copy_name(&mut info.key, key);
        info.value.data.flag = true;
        info
    }
}

impl Info {
    /// `text` under `key`; the info points into `text`, which must outlive it.
    fn text(key: &str, text: &CStr) -> Info {
        let mut info = Info::flag(key);
        info.value.kind = TYPE_STRING;
        info.value.data.string = text.as_ptr() as *mut c_char;
        info
    }
}

/// Copies `name` into a NUL-terminated C array, cut to fit (names here are constants or
/// checked by the caller).
fn copy_name(to: &mut [c_char], name: &str) {
    let room = to.len().saturating_sub(1);
    for (to, &b) in to.iter_mut().zip(name.as_bytes().iter().take(room)) {
        *to = b as c_char;
    }
}

/// A value read from the key space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fetched {
    /// Bytes (`PMIX_BYTE_OBJECT`) or a string (`PMIX_STRING`, without its NUL).
    Bytes(Vec<u8>),
    /// Any unsigned or non-negative integer type.
    Number(u64),
    /// A type ferry does not read (its PMIx type code).
    Other(u16),
}

/// A libpmix status that is not success, with the library's name for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Status {
    pub(crate) code: i32,
    pub(crate) name: String,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.code)
    }
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> c_int;
type AbortFn = unsafe extern "C" fn(c_int, *const c_char, *mut Proc, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> c_int;
type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> c_int;
type PublishFn = unsafe extern "C" fn(*const Info, usize) -> c_int;
type LookupFn = unsafe extern "C" fn(*mut PData, usize, *const Info, usize) -> c_int;
type UnpublishFn = unsafe extern "C" fn(*mut *mut c_char, *const Info, usize) -> c_int;
type ValueDestructFn = unsafe extern "C" fn(*mut Value);
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The calls, resolved from a library that stays loaded for the life of the process.
#[derive(Clone, Copy)]
struct Calls {
    init: InitFn,
    finalize: FinalizeFn,
    abort: AbortFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    publish: PublishFn,
    lookup: LookupFn,
    unpublish: UnpublishFn,
    value_destruct: ValueDestructFn,
    error_string: ErrorStringFn,
}

/// libpmix, initialized: this process is `(nspace, rank)` of its server's job.
pub(crate) struct Client {
    calls: Calls,
    /// Our namespace and rank, as PMIx_Init said.
    me: Proc,
    finalized: bool,
}

fn load(library: &str) -> Result<Calls, String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // GLOBAL: libpmix opens plugins of its own that look up its symbols.
    // SAFETY: libpmix's initializers only set up its own state (no code of ours runs).
    let lib = unsafe { Library::open(Some(library), RTLD_NOW | RTLD_GLOBAL) }
        .map_err(|e| format!("cannot load {library} (FERRY_PMIX_LIB): {e}"))?;
    macro_rules! symbol {
        ($name:literal) => {
            // SAFETY: the type is the function's C prototype in OpenPMIx's pmix.h (4.x, 5.x).
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{library} has no {}: {e}", $name))?
        };
    }
    let calls = Calls {
        init: symbol!("PMIx_Init"),
        finalize: symbol!("PMIx_Finalize"),
        abort: symbol!("PMIx_Abort"),
        put: symbol!("PMIx_Put"),
        commit: symbol!("PMIx_Commit"),
        fence: symbol!("PMIx_Fence"),
        get: symbol!("PMIx_Get"),
        publish: symbol!("PMIx_Publish"),
        lookup: symbol!("PMIx_Lookup"),
        unpublish: symbol!("PMIx_Unpublish"),
        value_destruct: symbol!("PMIx_Value_destruct"),
        error_string: symbol!("PMIx_Error_string"),
    };
    // Never closed: libpmix keeps a progress thread and handlers that outlive PMIx_Finalize.
    std::mem::forget(lib);
    Ok(calls)
}

impl Client {
    /// Loads `library` and calls `PMIx_Init`, once per process.
    pub(crate) fn init(library: &str) -> Result<Client, String> {
        use std::sync::atomic::{AtomicBool, Ordering};
        static INITIALIZED: AtomicBool = AtomicBool::new(false);
        let calls = load(library)?;
        if INITIALIZED.swap(true, Ordering::SeqCst) {
            return Err(
                "PMIx was already initialized by an earlier start of ferry in this process".into(),
            );
        }
        let mut me = Proc {
            nspace: [0; MAX_NSLEN + 1],
            rank: 0,
        };
        // SAFETY: `me` is a pmix_proc_t PMIx_Init fills; no info array.
        let rc = unsafe { (calls.init)(&mut me, std::ptr::null_mut(), 0) };
        let mut client = Client {
            calls,
            me,
            finalized: false,
        };
        if rc != PMIX_SUCCESS {
            client.finalized = true;
            return Err(format!("PMIx_Init failed: {}", client.status(rc)));
        }
        Ok(client)
    }

    fn status(&self, code: c_int) -> Status {
        // SAFETY: PMIx_Error_string returns a static string for any code (or NULL).
        let text = unsafe { (self.calls.error_string)(code) };
        let name = if text.is_null() {
            "unknown status".to_string()
        } else {
            // SAFETY: not NULL, and a NUL-terminated string the library keeps.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Status { code, name }
    }

    fn check(&self, rc: c_int) -> Result<(), Status> {
        match rc {
            PMIX_SUCCESS => Ok(()),
            rc => Err(self.status(rc)),
        }
    }

    /// Our namespace (the job's name).
    pub(crate) fn nspace(&self) -> String {
        // SAFETY: PMIx_Init wrote a NUL-terminated name; the array's last byte stays 0.
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Our rank in the job.
    pub(crate) fn rank(&self) -> u32 {
        self.me.rank
    }

    fn proc(&self, rank: u32) -> Proc {
        Proc {
            nspace: self.me.nspace,
            rank,
        }
    }

    /// Puts `value` as bytes under `key` for every process of the job (after a commit and a
    /// fence). The caller checks the key's length.
    pub(crate) fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Status> {
        let key = c_string(key)?;
        let mut v = Value {
            kind: TYPE_BYTE_OBJECT,
            data: ValueData {
                bo: ByteObject {
                    // libpmix copies the bytes and never writes through this pointer.
                    bytes: value.as_ptr() as *mut c_char,
                    size: value.len(),
                },
            },
        };
        // SAFETY: key is NUL-terminated; `v` points to `value`, alive for the call, and
        // PMIx_Put copies what it needs.
        self.check(unsafe { (self.calls.put)(PMIX_GLOBAL, key.as_ptr(), &mut v) })
    }

    /// Sends what was put to the local server.
    pub(crate) fn commit(&mut self) -> Result<(), Status> {
        // SAFETY: no arguments.
        self.check(unsafe { (self.calls.commit)() })
    }

    /// Waits for every process of the job, bringing their committed values along.
    pub(crate) fn fence(&mut self) -> Result<(), Status> {
        let collect = Info::flag(KEY_COLLECT_DATA);
        // SAFETY: NULL procs means our whole namespace; one info that lives for the call.
        self.check(unsafe { (self.calls.fence)(std::ptr::null(), 0, &collect, 1) })
    }

    /// The value `rank` (or the job: [`RANK_WILDCARD`]) has under `key`; `None` if there is
    /// none (now: never waits for one to come).
    pub(crate) fn get(&mut self, rank: u32, key: &str) -> Result<Option<Fetched>, Status> {
        let key = c_string(key)?;
        let proc = self.proc(rank);
        let immediate = Info::flag(KEY_IMMEDIATE);
        let mut out: *mut Value = std::ptr::null_mut();
        // SAFETY: proc, key and the info live for the call; `out` receives a value the
        // library allocated, released below.
        let rc = unsafe { (self.calls.get)(&proc, key.as_ptr(), &immediate, 1, &mut out) };
        if rc == PMIX_ERR_NOT_FOUND {
            return Ok(None);
        }
        self.check(rc)?;
        if out.is_null() {
            return Ok(None);
        }
        // SAFETY: PMIx_Get succeeded, so `out` is a valid value it allocated for us.
        let fetched = unsafe { read_value(&*out) };
        // SAFETY: `out` is ours to release (PMIX_VALUE_RELEASE): its contents, then itself,
        // allocated with the C library's malloc that libc::free pairs with.
        unsafe {
            (self.calls.value_destruct)(out);
            libc::free(out.cast());
        }
        Ok(Some(fetched))
    }

    /// Publishes `value` under `name` in the server's name service (MPI_Publish_name). The
    /// caller checks the name's length.
    pub(crate) fn publish(&mut self, name: &str, value: &str) -> Result<(), Status> {
        let value = c_string(value)?;
        let info = Info::text(name, &value);
        // SAFETY: one info whose string lives for the call; PMIx_Publish copies it.
        self.check(unsafe { (self.calls.publish)(&info, 1) })
    }

    /// What the name service holds under `name`, if anything now (no wait).
    pub(crate) fn lookup(&mut self, name: &str) -> Result<Option<Fetched>, Status> {
        let mut data = PData {
            proc: self.proc(0),
            key: [0; MAX_KEYLEN + 1],
            value: Value {
                kind: 0,
                data: ValueData { _envar: [0; 3] },
            },
        };
        copy_name(&mut data.key, name);
        // SAFETY: one pdata with its key set, filled by the call; no info array.
        let rc = unsafe { (self.calls.lookup)(&mut data, 1, std::ptr::null(), 0) };
        if rc == PMIX_ERR_NOT_FOUND {
            return Ok(None);
        }
        self.check(rc)?;
        // SAFETY: the lookup succeeded: the library filled the value (kind 0: nothing).
        let fetched = (data.value.kind != 0).then(|| unsafe { read_value(&data.value) });
        // SAFETY: what the value points to is the library's, freed here; the struct is ours.
        unsafe { (self.calls.value_destruct)(&mut data.value) };
        Ok(fetched)
    }

    /// Withdraws `name` from the name service.
    pub(crate) fn unpublish(&mut self, name: &str) -> Result<(), Status> {
        let name = c_string(name)?;
        let mut keys = [name.as_ptr() as *mut c_char, std::ptr::null_mut()];
        // SAFETY: a NULL-terminated array of one NUL-terminated key, alive for the call,
        // which only reads it.
        self.check(unsafe { (self.calls.unpublish)(keys.as_mut_ptr(), std::ptr::null(), 0) })
    }

    /// Asks the server to end the whole job with `code`, showing `message`.
    pub(crate) fn abort(&mut self, code: i32, message: &str) -> Result<(), Status> {
        let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: NULL procs means our whole namespace; the message lives for the call.
        self.check(unsafe { (self.calls.abort)(code, message.as_ptr(), std::ptr::null_mut(), 0) })
    }

    /// Says that this process is done with PMIx.
    pub(crate) fn finalize(&mut self) -> Result<(), Status> {
        if std::mem::replace(&mut self.finalized, true) {
            return Ok(());
        }
        // SAFETY: no info array.
        self.check(unsafe { (self.calls.finalize)(std::ptr::null(), 0) })
    }
}

fn c_string(key: &str) -> Result<CString, Status> {
    CString::new(key).map_err(|_| Status {
        code: -1,
        name: format!("key {key:?} has a NUL byte"),
    })
}

/// Copies what a value holds.
///
/// # Safety
/// `value` is a value libpmix filled: its pointers, for the types read here, are valid.
unsafe fn read_value(value: &Value) -> Fetched {
    let data = &value.data;
    // SAFETY (each arm): the type code says which member of the union the library set.
    unsafe {
        match value.kind {
            TYPE_BYTE_OBJECT => {
                let bo = data.bo;
                if bo.bytes.is_null() || bo.size == 0 {
                    Fetched::Bytes(Vec::new())
                } else {
                    Fetched::Bytes(
                        std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size).to_vec(),
                    )
                }
            }
            TYPE_STRING if data.string.is_null() => Fetched::Bytes(Vec::new()),
            TYPE_STRING => Fetched::Bytes(CStr::from_ptr(data.string).to_bytes().to_vec()),
            TYPE_UINT16 => Fetched::Number(data.uint16.into()),
            TYPE_UINT32 | TYPE_PROC_RANK => Fetched::Number(data.uint32.into()),
            TYPE_UINT64 => Fetched::Number(data.uint64),
            TYPE_SIZE => Fetched::Number(data.size as u64),
            TYPE_INT | TYPE_INT32 => match u64::try_from(data.int) {
                Ok(n) => Fetched::Number(n),
                Err(_) => Fetched::Other(value.kind),
            },
            other => Fetched::Other(other),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A process that leaves without finalizing would be taken by the server for one that
        // died; it is done with PMIx either way.
        let _ = self.finalize();
    }
}
