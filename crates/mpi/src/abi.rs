//! The MPI 5.0 standard ABI: the constant values the Rust side needs (handles, sentinels,
//! error classes; `include/mpi.h` carries the same values, a test compares the two), the
//! handle type and `MPI_Status`. The bottom layer of the crate: it imports nothing of it, and
//! every other module may import it (`tests/layers.rs`). The entry points are in `entry`.
#![allow(missing_docs)]

use std::ffi::c_int;

/// Every MPI handle is pointer-sized: a small constant for predefined objects, a table
/// reference (see `handles.rs`) for created ones.
pub type Handle = usize;

pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_REQUEST: c_int = 7;
pub const MPI_ERR_ROOT: c_int = 8;
pub const MPI_ERR_GROUP: c_int = 9;
pub const MPI_ERR_OP: c_int = 10;
pub const MPI_ERR_TOPOLOGY: c_int = 11;
pub const MPI_ERR_DIMS: c_int = 12;
pub const MPI_ERR_ARG: c_int = 13;
pub const MPI_ERR_UNKNOWN: c_int = 14;
pub const MPI_ERR_TRUNCATE: c_int = 15;
pub const MPI_ERR_OTHER: c_int = 16;
pub const MPI_ERR_INTERN: c_int = 17;
pub const MPI_ERR_PENDING: c_int = 18;
pub const MPI_ERR_IN_STATUS: c_int = 19;
pub const MPI_ERR_ACCESS: c_int = 20;
pub const MPI_ERR_AMODE: c_int = 21;
pub const MPI_ERR_BAD_FILE: c_int = 23;
pub const MPI_ERR_CONVERSION: c_int = 25;
pub const MPI_ERR_DUP_DATAREP: c_int = 27;
pub const MPI_ERR_FILE_EXISTS: c_int = 28;
pub const MPI_ERR_FILE_IN_USE: c_int = 29;
pub const MPI_ERR_FILE: c_int = 30;
pub const MPI_ERR_ASSERT: c_int = 22;
pub const MPI_ERR_BASE: c_int = 24;
pub const MPI_ERR_DISP: c_int = 26;
pub const MPI_ERR_INFO_KEY: c_int = 31;
pub const MPI_ERR_INFO_NOKEY: c_int = 32;
pub const MPI_ERR_INFO_VALUE: c_int = 33;
pub const MPI_ERR_INFO: c_int = 34;
pub const MPI_ERR_IO: c_int = 35;
pub const MPI_ERR_KEYVAL: c_int = 36;
pub const MPI_ERR_LOCKTYPE: c_int = 37;
pub const MPI_ERR_NAME: c_int = 38;
pub const MPI_ERR_NO_MEM: c_int = 39;
pub const MPI_ERR_NOT_SAME: c_int = 40;
pub const MPI_ERR_NO_SPACE: c_int = 41;
pub const MPI_ERR_NO_SUCH_FILE: c_int = 42;
pub const MPI_ERR_PORT: c_int = 43;
pub const MPI_ERR_PROC_ABORTED: c_int = 58;
pub const MPI_ERR_QUOTA: c_int = 44;
pub const MPI_ERR_READ_ONLY: c_int = 45;
pub const MPI_ERR_UNSUPPORTED_DATAREP: c_int = 54;
pub const MPI_ERR_RMA_ATTACH: c_int = 46;
pub const MPI_ERR_RMA_CONFLICT: c_int = 47;
pub const MPI_ERR_RMA_RANGE: c_int = 48;
pub const MPI_ERR_RMA_SHARED: c_int = 49;
pub const MPI_ERR_RMA_SYNC: c_int = 50;
pub const MPI_ERR_RMA_FLAVOR: c_int = 57;
pub const MPI_ERR_SERVICE: c_int = 51;
pub const MPI_ERR_SIZE: c_int = 52;
pub const MPI_ERR_SPAWN: c_int = 53;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 55;
pub const MPI_ERR_WIN: c_int = 56;
pub const MPI_ERR_SESSION: c_int = 60;
pub const MPI_ERR_VALUE_TOO_LARGE: c_int = 59;
pub const MPI_ERR_ERRHANDLER: c_int = 61;
pub const MPI_ERR_ABI: c_int = 62;
pub const MPI_ERR_LASTCODE: c_int = 0x3fff;
// User-Level Failure Mitigation (fault-tolerant jobs): the classes MPICH gives them (its first
// extension class is 100); the standard ABI has none yet.
pub const MPIX_ERR_PROC_FAILED: c_int = 101;
pub const MPIX_ERR_PROC_FAILED_PENDING: c_int = 102;
pub const MPIX_ERR_REVOKED: c_int = 103;

pub const MPI_ANY_SOURCE: c_int = -1;
pub const MPI_PROC_NULL: c_int = -3;
pub const MPI_ROOT: c_int = -4;
pub const MPI_ANY_TAG: c_int = -2;
pub const MPI_KEYVAL_INVALID: c_int = 0;
pub const MPI_UNDEFINED: c_int = -32766;
/// `MPI_DISPLACEMENT_CURRENT` (an `MPI_Offset` argument of MPI_File_set_view).
pub const MPI_DISPLACEMENT_CURRENT: i64 = -1;

/// File access modes (`MPI_File_open`), powers of two.
pub const MPI_MODE_APPEND: c_int = 1;
pub const MPI_MODE_CREATE: c_int = 2;
pub const MPI_MODE_DELETE_ON_CLOSE: c_int = 4;
pub const MPI_MODE_EXCL: c_int = 8;
pub const MPI_MODE_RDONLY: c_int = 16;
pub const MPI_MODE_RDWR: c_int = 32;
pub const MPI_MODE_SEQUENTIAL: c_int = 64;
pub const MPI_MODE_UNIQUE_OPEN: c_int = 128;
pub const MPI_MODE_WRONLY: c_int = 256;

/// `whence` of MPI_File_seek.
pub const MPI_SEEK_CUR: c_int = 401;
pub const MPI_SEEK_END: c_int = 402;
pub const MPI_SEEK_SET: c_int = 403;

pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1024;
pub const MPI_THREAD_SERIALIZED: c_int = 2048;
pub const MPI_THREAD_MULTIPLE: c_int = 4096;

pub const MPI_IDENT: c_int = 201;
pub const MPI_CONGRUENT: c_int = 202;
pub const MPI_SIMILAR: c_int = 203;
pub const MPI_UNEQUAL: c_int = 204;

pub const MPI_GRAPH: c_int = 212;
pub const MPI_DIST_GRAPH: c_int = 213;
pub const MPI_CART: c_int = 211;

/// `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY` as addresses (distributed graph weights).
pub const MPI_UNWEIGHTED: usize = 10;
/// See [`MPI_UNWEIGHTED`].
pub const MPI_WEIGHTS_EMPTY: usize = 11;

pub const MPI_COMM_TYPE_SHARED: c_int = 221;
pub const MPI_COMM_TYPE_HW_UNGUIDED: c_int = 222;
pub const MPI_COMM_TYPE_HW_GUIDED: c_int = 223;
pub const MPI_COMM_TYPE_RESOURCE_GUIDED: c_int = 224;

pub const MPI_TAG_UB: c_int = 501;
pub const MPI_IO: c_int = 502;
pub const MPI_HOST: c_int = 503;
pub const MPI_WTIME_IS_GLOBAL: c_int = 504;
pub const MPI_APPNUM: c_int = 505;
pub const MPI_LASTUSEDCODE: c_int = 506;
pub const MPI_UNIVERSE_SIZE: c_int = 507;

pub const MPI_LOCK_SHARED: c_int = 302;
pub const MPI_LOCK_EXCLUSIVE: c_int = 301;
pub const MPI_WIN_UNIFIED: c_int = 321;
pub const MPI_WIN_SEPARATE: c_int = 322;
pub const MPI_WIN_FLAVOR_ALLOCATE: c_int = 312;
pub const MPI_WIN_FLAVOR_CREATE: c_int = 311;
pub const MPI_WIN_FLAVOR_DYNAMIC: c_int = 313;
pub const MPI_WIN_FLAVOR_SHARED: c_int = 314;

pub const MPI_MODE_NOCHECK: c_int = 1024;
pub const MPI_MODE_NOPRECEDE: c_int = 2048;
pub const MPI_MODE_NOPUT: c_int = 4096;
pub const MPI_MODE_NOSTORE: c_int = 8192;
pub const MPI_MODE_NOSUCCEED: c_int = 16384;

pub const MPI_WIN_BASE: c_int = 601;
pub const MPI_WIN_DISP_UNIT: c_int = 602;
pub const MPI_WIN_SIZE: c_int = 603;
pub const MPI_WIN_CREATE_FLAVOR: c_int = 604;
pub const MPI_WIN_MODEL: c_int = 605;

pub const MPI_OP_NULL: Handle = 0x20;
pub const MPI_COMM_NULL: Handle = 0x100;
pub const MPI_COMM_WORLD: Handle = 0x101;
pub const MPI_COMM_SELF: Handle = 0x102;
pub const MPI_GROUP_NULL: Handle = 0x108;
pub const MPI_GROUP_EMPTY: Handle = 0x109;
pub const MPI_SESSION_NULL: Handle = 0x120;
pub const MPI_FILE_NULL: Handle = 0x118;
pub const MPI_WIN_NULL: Handle = 0x110;
pub const MPI_MESSAGE_NULL: Handle = 0x128;
pub const MPI_MESSAGE_NO_PROC: Handle = 0x129;
pub const MPI_INFO_NULL: Handle = 0x130;
pub const MPI_INFO_ENV: Handle = 0x131;
pub const MPI_ERRHANDLER_NULL: Handle = 0x140;
pub const MPI_ERRORS_ARE_FATAL: Handle = 0x141;
pub const MPI_ERRORS_RETURN: Handle = 0x143;
pub const MPI_ERRORS_ABORT: Handle = 0x142;
pub const MPI_REQUEST_NULL: Handle = 0x180;
pub const MPI_DATATYPE_NULL: Handle = 0x200;

/// `MPI_BOTTOM` and `MPI_IN_PLACE` as addresses.
pub const MPI_IN_PLACE: usize = 1;
/// `MPI_BUFFER_AUTOMATIC`: the buffer of buffered sends is the library's, grown as needed.
pub const MPI_BUFFER_AUTOMATIC: usize = 2;

/// `MPI_VERSION`, `MPI_SUBVERSION`: the standard the library implements.
pub const MPI_VERSION: c_int = 5;
pub const MPI_SUBVERSION: c_int = 0;
/// `MPI_ABI_VERSION`, `MPI_ABI_SUBVERSION`: the version of the standard ABI (MPI_Abi_get_version).
pub const MPI_ABI_VERSION: c_int = 1;
pub const MPI_ABI_SUBVERSION: c_int = 0;

/// Bytes `MPI_Bsend` needs beyond the message in the attached buffer (`MPI_BSEND_OVERHEAD`).
pub const MPI_BSEND_OVERHEAD: usize = 512;
pub const MPI_MAX_PROCESSOR_NAME: usize = 256;
pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_OBJECT_NAME: usize = 128;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_MAX_INFO_KEY: usize = 256;
pub const MPI_MAX_INFO_VAL: usize = 1024;
pub const MPI_MAX_DATAREP_STRING: usize = 128;
pub const MPI_MAX_PORT_NAME: usize = 1024;

/// `MPI_Status` as laid out by the ABI: three public fields and five reserved ints, which
/// ferry uses for the byte count (two ints) and the cancelled flag.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MpiStatus {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub count_lo: c_int,
    pub count_hi: c_int,
    pub cancelled: c_int,
    pub reserved: [c_int; 2],
}
const _: () = assert!(std::mem::size_of::<MpiStatus>() == 32);

impl MpiStatus {
    /// Bytes the status reports.
    pub fn count(&self) -> i64 {
        (self.count_lo as u32 as i64) | ((self.count_hi as i64) << 32)
    }

    /// Sets the byte count.
    pub fn set_count(&mut self, bytes: i64) {
        self.count_lo = bytes as u32 as c_int;
        self.count_hi = (bytes >> 32) as c_int;
    }
}

/// Error classes of the tool information interface (MPI_T).
pub const MPI_T_ERR_CANNOT_INIT: c_int = 1001;
pub const MPI_T_ERR_NOT_ACCESSIBLE: c_int = 1002;
pub const MPI_T_ERR_NOT_INITIALIZED: c_int = 1003;
pub const MPI_T_ERR_NOT_SUPPORTED: c_int = 1004;
pub const MPI_T_ERR_MEMORY: c_int = 1005;
pub const MPI_T_ERR_INVALID: c_int = 1006;
pub const MPI_T_ERR_INVALID_INDEX: c_int = 1007;
pub const MPI_T_ERR_INVALID_ITEM: c_int = 1008;
pub const MPI_T_ERR_INVALID_SESSION: c_int = 1009;
pub const MPI_T_ERR_INVALID_HANDLE: c_int = 1010;
pub const MPI_T_ERR_INVALID_NAME: c_int = 1011;
pub const MPI_T_ERR_OUT_OF_HANDLES: c_int = 1012;
pub const MPI_T_ERR_OUT_OF_SESSIONS: c_int = 1013;
pub const MPI_T_ERR_CVAR_SET_NOT_NOW: c_int = 1014;
pub const MPI_T_ERR_CVAR_SET_NEVER: c_int = 1015;
pub const MPI_T_ERR_PVAR_NO_WRITE: c_int = 1016;
pub const MPI_T_ERR_PVAR_NO_STARTSTOP: c_int = 1017;
pub const MPI_T_ERR_PVAR_NO_ATOMIC: c_int = 1018;

/// MPI_T handles with a fixed value.
pub const MPI_T_ENUM_NULL: Handle = 0;
pub const MPI_T_CVAR_HANDLE_NULL: Handle = 0;
pub const MPI_T_PVAR_SESSION_NULL: Handle = 0;
pub const MPI_T_PVAR_HANDLE_NULL: Handle = 0;
pub const MPI_T_PVAR_ALL_HANDLES: Handle = 1;

/// MPI_T verbosity levels.
pub const MPI_T_VERBOSITY_USER_BASIC: c_int = 9;
pub const MPI_T_VERBOSITY_USER_DETAIL: c_int = 10;
pub const MPI_T_VERBOSITY_USER_ALL: c_int = 12;
pub const MPI_T_VERBOSITY_TUNER_BASIC: c_int = 17;
pub const MPI_T_VERBOSITY_TUNER_DETAIL: c_int = 18;
pub const MPI_T_VERBOSITY_TUNER_ALL: c_int = 20;
pub const MPI_T_VERBOSITY_MPIDEV_BASIC: c_int = 33;
pub const MPI_T_VERBOSITY_MPIDEV_DETAIL: c_int = 34;
pub const MPI_T_VERBOSITY_MPIDEV_ALL: c_int = 36;

/// What an MPI_T variable is bound to (ferry's are bound to no object).
pub const MPI_T_BIND_NO_OBJECT: c_int = 1;

/// Scopes of control variables.
pub const MPI_T_SCOPE_CONSTANT: c_int = 1;
pub const MPI_T_SCOPE_READONLY: c_int = 2;
pub const MPI_T_SCOPE_LOCAL: c_int = 3;

/// Classes of performance variables.
pub const MPI_T_PVAR_CLASS_STATE: c_int = 1;
pub const MPI_T_PVAR_CLASS_LEVEL: c_int = 2;
pub const MPI_T_PVAR_CLASS_SIZE: c_int = 3;
pub const MPI_T_PVAR_CLASS_PERCENTAGE: c_int = 4;
pub const MPI_T_PVAR_CLASS_HIGHWATERMARK: c_int = 5;
pub const MPI_T_PVAR_CLASS_LOWWATERMARK: c_int = 6;
pub const MPI_T_PVAR_CLASS_COUNTER: c_int = 7;
pub const MPI_T_PVAR_CLASS_AGGREGATE: c_int = 8;
pub const MPI_T_PVAR_CLASS_TIMER: c_int = 9;
pub const MPI_T_PVAR_CLASS_GENERIC: c_int = 10;
