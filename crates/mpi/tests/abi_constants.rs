//! `include/mpi.h` against the MPI-5 standard ABI and against the Rust side.
//!
//! * `header_constants_match_the_abi_table`: a C program built with `cc` prints every constant
//!   of mpi.h; each must equal [`TABLE`] (values of the MPI ABI working group's header), and the
//!   header may hold no constant the table lacks (nor the table one the header lacks).
//! * `header_layout`: sizes of the integer types and the layout of `MPI_Status`.
//! * `datatype_handles_match_the_rust_side`: every predefined datatype of mpi.h is the
//!   `datatype::Builtin` of that handle and name, and the other way round.
//! * `rust_constants_match_the_header`: every constant of `abi.rs` and every predefined
//!   operation of `ops::BuiltinOp` has the value mpi.h gives it.
//! * `every_prototype_is_exported`: every `MPI_X`/`PMPI_X`
//!   declared in mpi.h is a defined dynamic symbol of libmpi.so (`nm -D`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A constant's value: a number (handles as their integer value), or another constant's name.
#[derive(Debug, Clone, Copy)]
enum Value {
    Int(i64),
    Alias(&'static str),
}

/// Every constant mpi.h defines, with its MPI-5 ABI value.
const TABLE: &[(&str, Value)] = &[
    ("MPI_VERSION", Value::Int(5)),
    ("MPI_SUBVERSION", Value::Int(0)),
    ("MPI_ABI_VERSION", Value::Int(1)),
    ("MPI_ABI_SUBVERSION", Value::Int(0)),
    ("MPI_OP_NULL", Value::Int(0x020)),
    ("MPI_SUM", Value::Int(0x021)),
    ("MPI_MIN", Value::Int(0x022)),
    ("MPI_MAX", Value::Int(0x023)),
    ("MPI_PROD", Value::Int(0x024)),
    ("MPI_BAND", Value::Int(0x028)),
    ("MPI_BOR", Value::Int(0x029)),
    ("MPI_BXOR", Value::Int(0x02a)),
    ("MPI_LAND", Value::Int(0x030)),
    ("MPI_LOR", Value::Int(0x031)),
    ("MPI_LXOR", Value::Int(0x032)),
    ("MPI_MINLOC", Value::Int(0x038)),
    ("MPI_MAXLOC", Value::Int(0x039)),
    ("MPI_REPLACE", Value::Int(0x03c)),
    ("MPI_NO_OP", Value::Int(0x03d)),
    ("MPI_COMM_NULL", Value::Int(0x100)),
    ("MPI_COMM_WORLD", Value::Int(0x101)),
    ("MPI_COMM_SELF", Value::Int(0x102)),
    ("MPI_GROUP_NULL", Value::Int(0x108)),
    ("MPI_GROUP_EMPTY", Value::Int(0x109)),
    ("MPI_WIN_NULL", Value::Int(0x110)),
    ("MPI_FILE_NULL", Value::Int(0x118)),
    ("MPI_SESSION_NULL", Value::Int(0x120)),
    ("MPI_MESSAGE_NULL", Value::Int(0x128)),
    ("MPI_MESSAGE_NO_PROC", Value::Int(0x129)),
    ("MPI_INFO_NULL", Value::Int(0x130)),
    ("MPI_INFO_ENV", Value::Int(0x131)),
    ("MPI_ERRHANDLER_NULL", Value::Int(0x140)),
    ("MPI_ERRORS_ARE_FATAL", Value::Int(0x141)),
    ("MPI_ERRORS_RETURN", Value::Int(0x143)),
    ("MPI_ERRORS_ABORT", Value::Int(0x142)),
    ("MPI_REQUEST_NULL", Value::Int(0x180)),
    ("MPI_DATATYPE_NULL", Value::Int(0x200)),
    ("MPI_AINT", Value::Int(0x201)),
    ("MPI_COUNT", Value::Int(0x202)),
    ("MPI_OFFSET", Value::Int(0x203)),
    ("MPI_PACKED", Value::Int(0x207)),
    ("MPI_SHORT", Value::Int(0x208)),
    ("MPI_INT", Value::Int(0x209)),
    ("MPI_LONG", Value::Int(0x20a)),
    ("MPI_LONG_LONG", Value::Int(0x20b)),
    ("MPI_UNSIGNED_SHORT", Value::Int(0x20c)),
    ("MPI_UNSIGNED", Value::Int(0x20d)),
    ("MPI_UNSIGNED_LONG", Value::Int(0x20e)),
    ("MPI_UNSIGNED_LONG_LONG", Value::Int(0x20f)),
    ("MPI_FLOAT", Value::Int(0x210)),
    ("MPI_C_FLOAT_COMPLEX", Value::Int(0x212)),
    ("MPI_CXX_FLOAT_COMPLEX", Value::Int(0x213)),
    ("MPI_DOUBLE", Value::Int(0x214)),
    ("MPI_C_DOUBLE_COMPLEX", Value::Int(0x216)),
    ("MPI_CXX_DOUBLE_COMPLEX", Value::Int(0x217)),
    ("MPI_INTEGER", Value::Int(0x219)),
    ("MPI_LOGICAL", Value::Int(0x218)),
    ("MPI_REAL", Value::Int(0x21a)),
    ("MPI_COMPLEX", Value::Int(0x21b)),
    ("MPI_DOUBLE_PRECISION", Value::Int(0x21c)),
    ("MPI_DOUBLE_COMPLEX", Value::Int(0x21d)),
    ("MPI_LONG_DOUBLE", Value::Int(0x220)),
    ("MPI_C_LONG_DOUBLE_COMPLEX", Value::Int(0x224)),
    ("MPI_CXX_LONG_DOUBLE_COMPLEX", Value::Int(0x225)),
    ("MPI_FLOAT_INT", Value::Int(0x228)),
    ("MPI_DOUBLE_INT", Value::Int(0x229)),
    ("MPI_LONG_INT", Value::Int(0x22a)),
    ("MPI_2INT", Value::Int(0x22b)),
    ("MPI_SHORT_INT", Value::Int(0x22c)),
    ("MPI_LONG_DOUBLE_INT", Value::Int(0x22d)),
    ("MPI_2REAL", Value::Int(0x230)),
    ("MPI_2DOUBLE_PRECISION", Value::Int(0x231)),
    ("MPI_2INTEGER", Value::Int(0x232)),
    ("MPI_C_BOOL", Value::Int(0x238)),
    ("MPI_CXX_BOOL", Value::Int(0x239)),
    ("MPI_WCHAR", Value::Int(0x23c)),
    ("MPI_INT8_T", Value::Int(0x240)),
    ("MPI_UINT8_T", Value::Int(0x241)),
    ("MPI_CHAR", Value::Int(0x243)),
    ("MPI_SIGNED_CHAR", Value::Int(0x244)),
    ("MPI_UNSIGNED_CHAR", Value::Int(0x245)),
    ("MPI_BYTE", Value::Int(0x247)),
    ("MPI_INT16_T", Value::Int(0x248)),
    ("MPI_UINT16_T", Value::Int(0x249)),
    ("MPI_INT32_T", Value::Int(0x250)),
    ("MPI_UINT32_T", Value::Int(0x251)),
    ("MPI_INT64_T", Value::Int(0x258)),
    ("MPI_UINT64_T", Value::Int(0x259)),
    ("MPI_LOGICAL1", Value::Int(0x2c0)),
    ("MPI_LOGICAL2", Value::Int(0x2c8)),
    ("MPI_REAL2", Value::Int(0x2ca)),
    ("MPI_LOGICAL4", Value::Int(0x2d0)),
    ("MPI_COMPLEX4", Value::Int(0x2d3)),
    ("MPI_LOGICAL8", Value::Int(0x2d8)),
    ("MPI_LOGICAL16", Value::Int(0x2e0)),
    ("MPI_INTEGER1", Value::Int(0x2c1)),
    ("MPI_CHARACTER", Value::Int(0x21e)),
    ("MPI_INTEGER2", Value::Int(0x2c9)),
    ("MPI_INTEGER4", Value::Int(0x2d1)),
    ("MPI_REAL4", Value::Int(0x2d2)),
    ("MPI_INTEGER8", Value::Int(0x2d9)),
    ("MPI_REAL8", Value::Int(0x2da)),
    ("MPI_COMPLEX8", Value::Int(0x2db)),
    ("MPI_INTEGER16", Value::Int(0x2e1)),
    ("MPI_REAL16", Value::Int(0x2e2)),
    ("MPI_COMPLEX16", Value::Int(0x2e3)),
    ("MPI_COMPLEX32", Value::Int(0x2eb)),
    ("MPI_LONG_LONG_INT", Value::Alias("MPI_LONG_LONG")),
    ("MPI_C_COMPLEX", Value::Alias("MPI_C_FLOAT_COMPLEX")),
    ("MPI_BOTTOM", Value::Int(0)),
    ("MPI_IN_PLACE", Value::Int(1)),
    ("MPI_BUFFER_AUTOMATIC", Value::Int(2)),
    ("MPI_STATUS_IGNORE", Value::Int(0)),
    ("MPI_STATUSES_IGNORE", Value::Int(0)),
    // Not in the standard ABI (removed in MPI-3.0): ferry's values for MPICH's MPI_LB/MPI_UB.
    ("MPI_LB", Value::Int(0x2fe)),
    ("MPI_UB", Value::Int(0x2ff)),
    ("MPI_F_STATUS_IGNORE", Value::Int(0)),
    ("MPI_F_STATUSES_IGNORE", Value::Int(0)),
    ("MPI_F08_STATUS_IGNORE", Value::Int(0)),
    ("MPI_F08_STATUSES_IGNORE", Value::Int(0)),
    ("MPI_F_STATUS_SIZE", Value::Int(8)),
    ("MPI_F_SOURCE", Value::Int(0)),
    ("MPI_F_TAG", Value::Int(1)),
    ("MPI_F_ERROR", Value::Int(2)),
    ("MPI_ERRCODES_IGNORE", Value::Int(0)),
    ("MPI_ARGV_NULL", Value::Int(0)),
    ("MPI_ARGVS_NULL", Value::Int(0)),
    ("MPI_UNWEIGHTED", Value::Int(10)),
    ("MPI_WEIGHTS_EMPTY", Value::Int(11)),
    ("MPI_BSEND_OVERHEAD", Value::Int(512)),
    ("MPI_MAX_DATAREP_STRING", Value::Int(128)),
    ("MPI_MAX_ERROR_STRING", Value::Int(512)),
    ("MPI_MAX_INFO_KEY", Value::Int(256)),
    ("MPI_MAX_INFO_VAL", Value::Int(1024)),
    ("MPI_MAX_LIBRARY_VERSION_STRING", Value::Int(8192)),
    ("MPI_MAX_OBJECT_NAME", Value::Int(128)),
    ("MPI_MAX_PORT_NAME", Value::Int(1024)),
    ("MPI_MAX_PROCESSOR_NAME", Value::Int(256)),
    ("MPI_MAX_STRINGTAG_LEN", Value::Int(1024)),
    ("MPI_MAX_PSET_NAME_LEN", Value::Int(1024)),
    ("MPI_NULL_COPY_FN", Value::Int(0x000)),
    ("MPI_DUP_FN", Value::Int(0x001)),
    ("MPI_NULL_DELETE_FN", Value::Int(0x000)),
    ("MPI_COMM_NULL_COPY_FN", Value::Int(0x000)),
    ("MPI_COMM_DUP_FN", Value::Int(0x001)),
    ("MPI_COMM_NULL_DELETE_FN", Value::Int(0x000)),
    ("MPI_TYPE_NULL_COPY_FN", Value::Int(0x000)),
    ("MPI_TYPE_DUP_FN", Value::Int(0x001)),
    ("MPI_TYPE_NULL_DELETE_FN", Value::Int(0x000)),
    ("MPI_WIN_NULL_COPY_FN", Value::Int(0x000)),
    ("MPI_WIN_DUP_FN", Value::Int(0x001)),
    ("MPI_WIN_NULL_DELETE_FN", Value::Int(0x000)),
    ("MPI_CONVERSION_FN_NULL", Value::Int(0x000)),
    ("MPI_CONVERSION_FN_NULL_C", Value::Int(0x000)),
    ("MPI_SUCCESS", Value::Int(0)),
    ("MPI_ERR_BUFFER", Value::Int(1)),
    ("MPI_ERR_COUNT", Value::Int(2)),
    ("MPI_ERR_TYPE", Value::Int(3)),
    ("MPI_ERR_TAG", Value::Int(4)),
    ("MPI_ERR_COMM", Value::Int(5)),
    ("MPI_ERR_RANK", Value::Int(6)),
    ("MPI_ERR_REQUEST", Value::Int(7)),
    ("MPI_ERR_ROOT", Value::Int(8)),
    ("MPI_ERR_GROUP", Value::Int(9)),
    ("MPI_ERR_OP", Value::Int(10)),
    ("MPI_ERR_TOPOLOGY", Value::Int(11)),
    ("MPI_ERR_DIMS", Value::Int(12)),
    ("MPI_ERR_ARG", Value::Int(13)),
    ("MPI_ERR_UNKNOWN", Value::Int(14)),
    ("MPI_ERR_TRUNCATE", Value::Int(15)),
    ("MPI_ERR_OTHER", Value::Int(16)),
    ("MPI_ERR_INTERN", Value::Int(17)),
    ("MPI_ERR_PENDING", Value::Int(18)),
    ("MPI_ERR_IN_STATUS", Value::Int(19)),
    ("MPI_ERR_ACCESS", Value::Int(20)),
    ("MPI_ERR_AMODE", Value::Int(21)),
    ("MPI_ERR_ASSERT", Value::Int(22)),
    ("MPI_ERR_BAD_FILE", Value::Int(23)),
    ("MPI_ERR_BASE", Value::Int(24)),
    ("MPI_ERR_CONVERSION", Value::Int(25)),
    ("MPI_ERR_DISP", Value::Int(26)),
    ("MPI_ERR_DUP_DATAREP", Value::Int(27)),
    ("MPI_ERR_FILE_EXISTS", Value::Int(28)),
    ("MPI_ERR_FILE_IN_USE", Value::Int(29)),
    ("MPI_ERR_FILE", Value::Int(30)),
    ("MPI_ERR_INFO_KEY", Value::Int(31)),
    ("MPI_ERR_INFO_NOKEY", Value::Int(32)),
    ("MPI_ERR_INFO_VALUE", Value::Int(33)),
    ("MPI_ERR_INFO", Value::Int(34)),
    ("MPI_ERR_IO", Value::Int(35)),
    ("MPI_ERR_KEYVAL", Value::Int(36)),
    ("MPI_ERR_LOCKTYPE", Value::Int(37)),
    ("MPI_ERR_NAME", Value::Int(38)),
    ("MPI_ERR_NO_MEM", Value::Int(39)),
    ("MPI_ERR_NOT_SAME", Value::Int(40)),
    ("MPI_ERR_NO_SPACE", Value::Int(41)),
    ("MPI_ERR_NO_SUCH_FILE", Value::Int(42)),
    ("MPI_ERR_PORT", Value::Int(43)),
    ("MPI_ERR_PROC_ABORTED", Value::Int(58)),
    ("MPI_ERR_QUOTA", Value::Int(44)),
    ("MPI_ERR_READ_ONLY", Value::Int(45)),
    ("MPI_ERR_RMA_ATTACH", Value::Int(46)),
    ("MPI_ERR_RMA_CONFLICT", Value::Int(47)),
    ("MPI_ERR_RMA_RANGE", Value::Int(48)),
    ("MPI_ERR_RMA_SHARED", Value::Int(49)),
    ("MPI_ERR_RMA_SYNC", Value::Int(50)),
    ("MPI_ERR_RMA_FLAVOR", Value::Int(57)),
    ("MPI_ERR_SERVICE", Value::Int(51)),
    ("MPI_ERR_SESSION", Value::Int(60)),
    ("MPI_ERR_SIZE", Value::Int(52)),
    ("MPI_ERR_SPAWN", Value::Int(53)),
    ("MPI_ERR_UNSUPPORTED_DATAREP", Value::Int(54)),
    ("MPI_ERR_UNSUPPORTED_OPERATION", Value::Int(55)),
    ("MPI_ERR_VALUE_TOO_LARGE", Value::Int(59)),
    ("MPI_ERR_WIN", Value::Int(56)),
    ("MPI_ERR_ERRHANDLER", Value::Int(61)),
    ("MPI_ERR_ABI", Value::Int(62)),
    ("MPI_ERR_LASTCODE", Value::Int(0x3fff)),
    ("MPI_ANY_SOURCE", Value::Int(-1)),
    ("MPI_PROC_NULL", Value::Int(-3)),
    ("MPI_ROOT", Value::Int(-4)),
    ("MPI_ANY_TAG", Value::Int(-2)),
    ("MPI_KEYVAL_INVALID", Value::Int(0)),
    ("MPI_DISPLACEMENT_CURRENT", Value::Int(-1)),
    ("MPI_UNDEFINED", Value::Int(-32766)),
    ("MPI_MODE_APPEND", Value::Int(1)),
    ("MPI_MODE_CREATE", Value::Int(2)),
    ("MPI_MODE_DELETE_ON_CLOSE", Value::Int(4)),
    ("MPI_MODE_EXCL", Value::Int(8)),
    ("MPI_MODE_RDONLY", Value::Int(16)),
    ("MPI_MODE_RDWR", Value::Int(32)),
    ("MPI_MODE_SEQUENTIAL", Value::Int(64)),
    ("MPI_MODE_UNIQUE_OPEN", Value::Int(128)),
    ("MPI_MODE_WRONLY", Value::Int(256)),
    ("MPI_SEEK_CUR", Value::Int(401)),
    ("MPI_SEEK_END", Value::Int(402)),
    ("MPI_SEEK_SET", Value::Int(403)),
    ("MPI_THREAD_SINGLE", Value::Int(0)),
    ("MPI_THREAD_FUNNELED", Value::Int(1024)),
    ("MPI_THREAD_SERIALIZED", Value::Int(2048)),
    ("MPI_THREAD_MULTIPLE", Value::Int(4096)),
    ("MPI_ORDER_C", Value::Int(12)),
    ("MPI_ORDER_FORTRAN", Value::Int(15)),
    ("MPI_DISTRIBUTE_NONE", Value::Int(16)),
    ("MPI_DISTRIBUTE_BLOCK", Value::Int(17)),
    ("MPI_DISTRIBUTE_CYCLIC", Value::Int(18)),
    ("MPI_DISTRIBUTE_DFLT_DARG", Value::Int(19)),
    ("MPI_TYPECLASS_INTEGER", Value::Int(192)),
    ("MPI_TYPECLASS_REAL", Value::Int(193)),
    ("MPI_TYPECLASS_COMPLEX", Value::Int(194)),
    ("MPI_IDENT", Value::Int(201)),
    ("MPI_CONGRUENT", Value::Int(202)),
    ("MPI_SIMILAR", Value::Int(203)),
    ("MPI_UNEQUAL", Value::Int(204)),
    ("MPI_GRAPH", Value::Int(212)),
    ("MPI_DIST_GRAPH", Value::Int(213)),
    ("MPI_CART", Value::Int(211)),
    ("MPI_COMBINER_NAMED", Value::Int(101)),
    ("MPI_COMBINER_DUP", Value::Int(102)),
    ("MPI_COMBINER_CONTIGUOUS", Value::Int(103)),
    ("MPI_COMBINER_VECTOR", Value::Int(104)),
    ("MPI_COMBINER_HVECTOR", Value::Int(105)),
    ("MPI_COMBINER_INDEXED", Value::Int(106)),
    ("MPI_COMBINER_HINDEXED", Value::Int(107)),
    ("MPI_COMBINER_INDEXED_BLOCK", Value::Int(108)),
    ("MPI_COMBINER_HINDEXED_BLOCK", Value::Int(109)),
    ("MPI_COMBINER_STRUCT", Value::Int(110)),
    ("MPI_COMBINER_SUBARRAY", Value::Int(111)),
    ("MPI_COMBINER_DARRAY", Value::Int(112)),
    ("MPI_COMBINER_F90_REAL", Value::Int(113)),
    ("MPI_COMBINER_F90_COMPLEX", Value::Int(114)),
    ("MPI_COMBINER_F90_INTEGER", Value::Int(115)),
    ("MPI_COMBINER_RESIZED", Value::Int(116)),
    ("MPI_COMBINER_VALUE_INDEX", Value::Int(117)),
    ("MPI_COMM_TYPE_SHARED", Value::Int(221)),
    ("MPI_COMM_TYPE_HW_UNGUIDED", Value::Int(222)),
    ("MPI_COMM_TYPE_HW_GUIDED", Value::Int(223)),
    ("MPI_COMM_TYPE_RESOURCE_GUIDED", Value::Int(224)),
    ("MPI_TAG_UB", Value::Int(501)),
    ("MPI_IO", Value::Int(502)),
    ("MPI_HOST", Value::Int(503)),
    ("MPI_WTIME_IS_GLOBAL", Value::Int(504)),
    ("MPI_APPNUM", Value::Int(505)),
    ("MPI_LASTUSEDCODE", Value::Int(506)),
    ("MPI_UNIVERSE_SIZE", Value::Int(507)),
    ("MPI_LOCK_SHARED", Value::Int(302)),
    ("MPI_LOCK_EXCLUSIVE", Value::Int(301)),
    ("MPI_WIN_UNIFIED", Value::Int(321)),
    ("MPI_WIN_SEPARATE", Value::Int(322)),
    ("MPI_WIN_FLAVOR_ALLOCATE", Value::Int(312)),
    ("MPI_WIN_FLAVOR_CREATE", Value::Int(311)),
    ("MPI_WIN_FLAVOR_DYNAMIC", Value::Int(313)),
    ("MPI_WIN_FLAVOR_SHARED", Value::Int(314)),
    ("MPI_MODE_NOCHECK", Value::Int(1024)),
    ("MPI_MODE_NOPRECEDE", Value::Int(2048)),
    ("MPI_MODE_NOPUT", Value::Int(4096)),
    ("MPI_MODE_NOSTORE", Value::Int(8192)),
    ("MPI_MODE_NOSUCCEED", Value::Int(16384)),
    ("MPI_WIN_BASE", Value::Int(601)),
    ("MPI_WIN_DISP_UNIT", Value::Int(602)),
    ("MPI_WIN_SIZE", Value::Int(603)),
    ("MPI_WIN_CREATE_FLAVOR", Value::Int(604)),
    ("MPI_WIN_MODEL", Value::Int(605)),
    ("MPI_T_ENUM_NULL", Value::Int(0)),
    ("MPI_T_CVAR_HANDLE_NULL", Value::Int(0)),
    ("MPI_T_PVAR_SESSION_NULL", Value::Int(0)),
    ("MPI_T_PVAR_HANDLE_NULL", Value::Int(0)),
    ("MPI_T_PVAR_ALL_HANDLES", Value::Int(1)),
    ("MPI_T_ERR_CANNOT_INIT", Value::Int(1001)),
    ("MPI_T_ERR_NOT_ACCESSIBLE", Value::Int(1002)),
    ("MPI_T_ERR_NOT_INITIALIZED", Value::Int(1003)),
    ("MPI_T_ERR_NOT_SUPPORTED", Value::Int(1004)),
    ("MPI_T_ERR_MEMORY", Value::Int(1005)),
    ("MPI_T_ERR_INVALID", Value::Int(1006)),
    ("MPI_T_ERR_INVALID_INDEX", Value::Int(1007)),
    ("MPI_T_ERR_INVALID_ITEM", Value::Int(1008)),
    ("MPI_T_ERR_INVALID_SESSION", Value::Int(1009)),
    ("MPI_T_ERR_INVALID_HANDLE", Value::Int(1010)),
    ("MPI_T_ERR_INVALID_NAME", Value::Int(1011)),
    ("MPI_T_ERR_OUT_OF_HANDLES", Value::Int(1012)),
    ("MPI_T_ERR_OUT_OF_SESSIONS", Value::Int(1013)),
    ("MPI_T_ERR_CVAR_SET_NOT_NOW", Value::Int(1014)),
    ("MPI_T_ERR_CVAR_SET_NEVER", Value::Int(1015)),
    ("MPI_T_ERR_PVAR_NO_WRITE", Value::Int(1016)),
    ("MPI_T_ERR_PVAR_NO_STARTSTOP", Value::Int(1017)),
    ("MPI_T_ERR_PVAR_NO_ATOMIC", Value::Int(1018)),
    ("MPI_T_VERBOSITY_USER_BASIC", Value::Int(9)),
    ("MPI_T_VERBOSITY_USER_DETAIL", Value::Int(10)),
    ("MPI_T_VERBOSITY_USER_ALL", Value::Int(12)),
    ("MPI_T_VERBOSITY_TUNER_BASIC", Value::Int(17)),
    ("MPI_T_VERBOSITY_TUNER_DETAIL", Value::Int(18)),
    ("MPI_T_VERBOSITY_TUNER_ALL", Value::Int(20)),
    ("MPI_T_VERBOSITY_MPIDEV_BASIC", Value::Int(33)),
    ("MPI_T_VERBOSITY_MPIDEV_DETAIL", Value::Int(34)),
    ("MPI_T_VERBOSITY_MPIDEV_ALL", Value::Int(36)),
    ("MPI_T_BIND_NO_OBJECT", Value::Int(1)),
    ("MPI_T_BIND_MPI_COMM", Value::Int(2)),
    ("MPI_T_BIND_MPI_DATATYPE", Value::Int(3)),
    ("MPI_T_BIND_MPI_ERRHANDLER", Value::Int(4)),
    ("MPI_T_BIND_MPI_FILE", Value::Int(5)),
    ("MPI_T_BIND_MPI_GROUP", Value::Int(6)),
    ("MPI_T_BIND_MPI_OP", Value::Int(7)),
    ("MPI_T_BIND_MPI_REQUEST", Value::Int(8)),
    ("MPI_T_BIND_MPI_SESSION", Value::Int(12)),
    ("MPI_T_BIND_MPI_WIN", Value::Int(9)),
    ("MPI_T_BIND_MPI_MESSAGE", Value::Int(10)),
    ("MPI_T_BIND_MPI_INFO", Value::Int(11)),
    ("MPI_T_SCOPE_CONSTANT", Value::Int(1)),
    ("MPI_T_SCOPE_READONLY", Value::Int(2)),
    ("MPI_T_SCOPE_LOCAL", Value::Int(3)),
    ("MPI_T_SCOPE_GROUP", Value::Int(4)),
    ("MPI_T_SCOPE_GROUP_EQ", Value::Int(5)),
    ("MPI_T_SCOPE_ALL", Value::Int(6)),
    ("MPI_T_SCOPE_ALL_EQ", Value::Int(7)),
    ("MPI_T_PVAR_CLASS_STATE", Value::Int(1)),
    ("MPI_T_PVAR_CLASS_LEVEL", Value::Int(2)),
    ("MPI_T_PVAR_CLASS_SIZE", Value::Int(3)),
    ("MPI_T_PVAR_CLASS_PERCENTAGE", Value::Int(4)),
    ("MPI_T_PVAR_CLASS_HIGHWATERMARK", Value::Int(5)),
    ("MPI_T_PVAR_CLASS_LOWWATERMARK", Value::Int(6)),
    ("MPI_T_PVAR_CLASS_COUNTER", Value::Int(7)),
    ("MPI_T_PVAR_CLASS_AGGREGATE", Value::Int(8)),
    ("MPI_T_PVAR_CLASS_TIMER", Value::Int(9)),
    ("MPI_T_PVAR_CLASS_GENERIC", Value::Int(10)),
    ("MPI_T_CB_REQUIRE_NONE", Value::Int(0)),
    ("MPI_T_CB_REQUIRE_MPI_RESTRICTED", Value::Int(3)),
    ("MPI_T_CB_REQUIRE_THREAD_SAFE", Value::Int(15)),
    ("MPI_T_CB_REQUIRE_ASYNC_SIGNAL_SAFE", Value::Int(63)),
    ("MPI_T_SOURCE_ORDERED", Value::Int(1)),
    ("MPI_T_SOURCE_UNORDERED", Value::Int(2)),
];

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

fn header() -> String {
    std::fs::read_to_string(include_dir().join("mpi.h")).expect("read include/mpi.h")
}

fn work_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferry-abi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

/// Compiles `src` against mpi.h with `cc` (no library), runs it, returns its stdout.
fn compile_and_run(name: &str, src: &str) -> String {
    let dir = work_dir(name);
    let c = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&c, src).expect("write the C program");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Werror", "-I"])
        .arg(include_dir())
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed on {}:\n{}",
        c.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the C program");
    assert!(run.status.success(), "{} failed", exe.display());
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(run.stdout).expect("utf-8 output")
}

/// Names the header defines as constants: `#define MPI_X` and enumerators `MPI_X = …`, before
/// the function declarations.
fn header_constants() -> BTreeSet<String> {
    let text = header();
    let decls = text.split("/* ==== Functions").next().unwrap_or("");
    let mut names = BTreeSet::new();
    for line in decls.lines() {
        let line = line.trim();
        let name = if let Some(rest) = line.strip_prefix("#define ") {
            rest.split_whitespace().next()
        } else if line.starts_with("MPI_") && line.contains('=') {
            line.split(|c: char| c == '=' || c.is_whitespace()).next()
        } else {
            None
        };
        if let Some(n) = name.filter(|n| n.starts_with("MPI_")) {
            names.insert(n.to_string());
        }
    }
    names
}

#[test]
fn header_constants_match_the_abi_table() {
    let table: BTreeMap<&str, Value> = TABLE.iter().copied().collect();
    assert_eq!(table.len(), TABLE.len(), "a name appears twice in TABLE");

    let in_header = header_constants();
    let in_table: BTreeSet<String> = table.keys().map(|s| s.to_string()).collect();
    let missing: Vec<_> = in_table.difference(&in_header).collect();
    let extra: Vec<_> = in_header.difference(&in_table).collect();
    assert!(
        missing.is_empty(),
        "in TABLE but not defined by mpi.h: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "defined by mpi.h but not in TABLE (add their ABI values): {extra:?}"
    );

    // Every constant, printed by C as an integer (handles and pointers through intptr_t).
    let mut src = String::from(
        "#include <stdio.h>\n#include <stdint.h>\n#include <mpi.h>\nint main(void) {\n",
    );
    for (name, _) in TABLE {
        src += &format!("    printf(\"%s %lld\\n\", \"{name}\", (long long)(intptr_t)({name}));\n");
    }
    src += "    return 0;\n}\n";
    let printed: BTreeMap<String, i64> = compile_and_run("constants", &src)
        .lines()
        .map(|l| {
            let (n, v) = l.split_once(' ').expect("NAME VALUE");
            (n.to_string(), v.parse().expect("an integer"))
        })
        .collect();

    let mut wrong = Vec::new();
    for (name, value) in TABLE {
        let want = match value {
            Value::Int(v) => *v,
            Value::Alias(other) => match table.get(other) {
                Some(Value::Int(v)) => *v,
                _ => panic!("{name} is an alias of {other}, which has no value in TABLE"),
            },
        };
        let got = printed[*name];
        if got != want {
            wrong.push(format!(
                "{name}: mpi.h says {got:#x} ({got}), the ABI {want:#x} ({want})"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "constants of mpi.h that differ from the ABI:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn header_layout() {
    let src = r#"#include <stdio.h>
#include <stddef.h>
#include <mpi.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu\n", sizeof(MPI_Aint), sizeof(MPI_Offset), sizeof(MPI_Count),
           sizeof(MPI_Fint), sizeof(MPI_Comm));
    printf("%zu %zu %zu %zu %zu\n", sizeof(MPI_Status), offsetof(MPI_Status, MPI_SOURCE),
           offsetof(MPI_Status, MPI_TAG), offsetof(MPI_Status, MPI_ERROR),
           offsetof(MPI_Status, MPI_internal));
    return 0;
}
"#;
    let ptr = std::mem::size_of::<usize>();
    let want = format!("{ptr} 8 8 4 {ptr}\n32 0 4 8 12\n");
    assert_eq!(
        compile_and_run("layout", src),
        want,
        "sizes / MPI_Status layout"
    );
}

/// Names mpi.h defines as predefined handles of one type: `#define NAME ((TYPE)0x…)`.
fn handles_of(ty: &str) -> BTreeSet<String> {
    let cast = format!("(({ty})");
    header()
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter(|l| l.contains(&cast))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn datatype_handles_match_the_rust_side() {
    use mpi::datatype::{Builtin, Marker};
    let mut wrong = Vec::new();
    let mut header_types = BTreeSet::new();
    let types = handles_of("MPI_Datatype");
    for (name, value) in TABLE {
        let Value::Int(h) = value else { continue };
        if !types.contains(*name) || *name == "MPI_DATATYPE_NULL" {
            continue;
        }
        header_types.insert(*h as usize);
        if let Some(m) = Marker::from_handle(*h as usize) {
            if m.name() != *name {
                wrong.push(format!("{name} ({h:#x}) is {} on the Rust side", m.name()));
            }
            continue;
        }
        match Builtin::from_handle(*h as usize) {
            Some(b) if b.name() == *name => {}
            Some(b) => wrong.push(format!("{name} ({h:#x}) is {} on the Rust side", b.name())),
            None => wrong.push(format!("{name} ({h:#x}) is no Builtin on the Rust side")),
        }
    }
    for b in Builtin::ALL {
        let h = *b as usize;
        if b.name().starts_with("MPI_") && !header_types.contains(&h) {
            wrong.push(format!("Rust's {} ({h:#x}) is not in mpi.h", b.name()));
        }
    }
    assert!(
        wrong.is_empty(),
        "datatypes of mpi.h and datatype::Builtin differ:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn rust_constants_match_the_header() {
    use mpi::abi;
    use mpi::ops::{BuiltinOp, OP_NULL};
    // Every constant of `abi.rs`, as the Rust side uses it.
    let rust: &[(&str, i64)] = &[
        ("MPI_SUCCESS", abi::MPI_SUCCESS as i64),
        ("MPI_ERR_BUFFER", abi::MPI_ERR_BUFFER as i64),
        ("MPI_T_ERR_CANNOT_INIT", abi::MPI_T_ERR_CANNOT_INIT as i64),
        (
            "MPI_T_ERR_NOT_ACCESSIBLE",
            abi::MPI_T_ERR_NOT_ACCESSIBLE as i64,
        ),
        (
            "MPI_T_ERR_NOT_INITIALIZED",
            abi::MPI_T_ERR_NOT_INITIALIZED as i64,
        ),
        (
            "MPI_T_ERR_NOT_SUPPORTED",
            abi::MPI_T_ERR_NOT_SUPPORTED as i64,
        ),
        ("MPI_T_ERR_MEMORY", abi::MPI_T_ERR_MEMORY as i64),
        ("MPI_T_ERR_INVALID", abi::MPI_T_ERR_INVALID as i64),
        (
            "MPI_T_ERR_INVALID_INDEX",
            abi::MPI_T_ERR_INVALID_INDEX as i64,
        ),
        ("MPI_T_ERR_INVALID_ITEM", abi::MPI_T_ERR_INVALID_ITEM as i64),
        (
            "MPI_T_ERR_INVALID_SESSION",
            abi::MPI_T_ERR_INVALID_SESSION as i64,
        ),
        (
            "MPI_T_ERR_INVALID_HANDLE",
            abi::MPI_T_ERR_INVALID_HANDLE as i64,
        ),
        ("MPI_T_ERR_INVALID_NAME", abi::MPI_T_ERR_INVALID_NAME as i64),
        (
            "MPI_T_ERR_OUT_OF_HANDLES",
            abi::MPI_T_ERR_OUT_OF_HANDLES as i64,
        ),
        (
            "MPI_T_ERR_OUT_OF_SESSIONS",
            abi::MPI_T_ERR_OUT_OF_SESSIONS as i64,
        ),
        (
            "MPI_T_ERR_CVAR_SET_NOT_NOW",
            abi::MPI_T_ERR_CVAR_SET_NOT_NOW as i64,
        ),
        (
            "MPI_T_ERR_CVAR_SET_NEVER",
            abi::MPI_T_ERR_CVAR_SET_NEVER as i64,
        ),
        (
            "MPI_T_ERR_PVAR_NO_WRITE",
            abi::MPI_T_ERR_PVAR_NO_WRITE as i64,
        ),
        (
            "MPI_T_ERR_PVAR_NO_STARTSTOP",
            abi::MPI_T_ERR_PVAR_NO_STARTSTOP as i64,
        ),
        (
            "MPI_T_ERR_PVAR_NO_ATOMIC",
            abi::MPI_T_ERR_PVAR_NO_ATOMIC as i64,
        ),
        ("MPI_T_ENUM_NULL", abi::MPI_T_ENUM_NULL as i64),
        ("MPI_T_CVAR_HANDLE_NULL", abi::MPI_T_CVAR_HANDLE_NULL as i64),
        (
            "MPI_T_PVAR_SESSION_NULL",
            abi::MPI_T_PVAR_SESSION_NULL as i64,
        ),
        ("MPI_T_PVAR_HANDLE_NULL", abi::MPI_T_PVAR_HANDLE_NULL as i64),
        ("MPI_T_PVAR_ALL_HANDLES", abi::MPI_T_PVAR_ALL_HANDLES as i64),
        (
            "MPI_T_VERBOSITY_USER_BASIC",
            abi::MPI_T_VERBOSITY_USER_BASIC as i64,
        ),
        (
            "MPI_T_VERBOSITY_USER_DETAIL",
            abi::MPI_T_VERBOSITY_USER_DETAIL as i64,
        ),
        (
            "MPI_T_VERBOSITY_USER_ALL",
            abi::MPI_T_VERBOSITY_USER_ALL as i64,
        ),
        (
            "MPI_T_VERBOSITY_TUNER_BASIC",
            abi::MPI_T_VERBOSITY_TUNER_BASIC as i64,
        ),
        (
            "MPI_T_VERBOSITY_TUNER_DETAIL",
            abi::MPI_T_VERBOSITY_TUNER_DETAIL as i64,
        ),
        (
            "MPI_T_VERBOSITY_TUNER_ALL",
            abi::MPI_T_VERBOSITY_TUNER_ALL as i64,
        ),
        (
            "MPI_T_VERBOSITY_MPIDEV_BASIC",
            abi::MPI_T_VERBOSITY_MPIDEV_BASIC as i64,
        ),
        (
            "MPI_T_VERBOSITY_MPIDEV_DETAIL",
            abi::MPI_T_VERBOSITY_MPIDEV_DETAIL as i64,
        ),
        (
            "MPI_T_VERBOSITY_MPIDEV_ALL",
            abi::MPI_T_VERBOSITY_MPIDEV_ALL as i64,
        ),
        ("MPI_T_BIND_NO_OBJECT", abi::MPI_T_BIND_NO_OBJECT as i64),
        ("MPI_T_SCOPE_CONSTANT", abi::MPI_T_SCOPE_CONSTANT as i64),
        ("MPI_T_SCOPE_READONLY", abi::MPI_T_SCOPE_READONLY as i64),
        ("MPI_T_SCOPE_LOCAL", abi::MPI_T_SCOPE_LOCAL as i64),
        ("MPI_T_PVAR_CLASS_STATE", abi::MPI_T_PVAR_CLASS_STATE as i64),
        ("MPI_T_PVAR_CLASS_LEVEL", abi::MPI_T_PVAR_CLASS_LEVEL as i64),
        ("MPI_T_PVAR_CLASS_SIZE", abi::MPI_T_PVAR_CLASS_SIZE as i64),
        (
            "MPI_T_PVAR_CLASS_PERCENTAGE",
            abi::MPI_T_PVAR_CLASS_PERCENTAGE as i64,
        ),
        (
            "MPI_T_PVAR_CLASS_HIGHWATERMARK",
            abi::MPI_T_PVAR_CLASS_HIGHWATERMARK as i64,
        ),
        (
            "MPI_T_PVAR_CLASS_LOWWATERMARK",
            abi::MPI_T_PVAR_CLASS_LOWWATERMARK as i64,
        ),
        (
            "MPI_T_PVAR_CLASS_COUNTER",
            abi::MPI_T_PVAR_CLASS_COUNTER as i64,
        ),
        (
            "MPI_T_PVAR_CLASS_AGGREGATE",
            abi::MPI_T_PVAR_CLASS_AGGREGATE as i64,
        ),
        ("MPI_T_PVAR_CLASS_TIMER", abi::MPI_T_PVAR_CLASS_TIMER as i64),
        (
            "MPI_T_PVAR_CLASS_GENERIC",
            abi::MPI_T_PVAR_CLASS_GENERIC as i64,
        ),
        ("MPI_ERR_COUNT", abi::MPI_ERR_COUNT as i64),
        ("MPI_ERR_TYPE", abi::MPI_ERR_TYPE as i64),
        ("MPI_ERR_TAG", abi::MPI_ERR_TAG as i64),
        ("MPI_ERR_COMM", abi::MPI_ERR_COMM as i64),
        ("MPI_ERR_RANK", abi::MPI_ERR_RANK as i64),
        ("MPI_ERR_REQUEST", abi::MPI_ERR_REQUEST as i64),
        ("MPI_ERR_ROOT", abi::MPI_ERR_ROOT as i64),
        ("MPI_ERR_GROUP", abi::MPI_ERR_GROUP as i64),
        ("MPI_ERR_OP", abi::MPI_ERR_OP as i64),
        ("MPI_ERR_TOPOLOGY", abi::MPI_ERR_TOPOLOGY as i64),
        ("MPI_ERR_DIMS", abi::MPI_ERR_DIMS as i64),
        ("MPI_ERR_ARG", abi::MPI_ERR_ARG as i64),
        ("MPI_ERR_UNKNOWN", abi::MPI_ERR_UNKNOWN as i64),
        ("MPI_ERR_TRUNCATE", abi::MPI_ERR_TRUNCATE as i64),
        ("MPI_ERR_OTHER", abi::MPI_ERR_OTHER as i64),
        ("MPI_ERR_INTERN", abi::MPI_ERR_INTERN as i64),
        ("MPI_ERR_PENDING", abi::MPI_ERR_PENDING as i64),
        ("MPI_ERR_IN_STATUS", abi::MPI_ERR_IN_STATUS as i64),
        ("MPI_ERR_INFO_KEY", abi::MPI_ERR_INFO_KEY as i64),
        ("MPI_ERR_INFO_NOKEY", abi::MPI_ERR_INFO_NOKEY as i64),
        ("MPI_ERR_INFO_VALUE", abi::MPI_ERR_INFO_VALUE as i64),
        ("MPI_ERR_INFO", abi::MPI_ERR_INFO as i64),
        ("MPI_ERR_KEYVAL", abi::MPI_ERR_KEYVAL as i64),
        ("MPI_ERR_NO_MEM", abi::MPI_ERR_NO_MEM as i64),
        ("MPI_ERR_PROC_ABORTED", abi::MPI_ERR_PROC_ABORTED as i64),
        (
            "MPI_ERR_UNSUPPORTED_OPERATION",
            abi::MPI_ERR_UNSUPPORTED_OPERATION as i64,
        ),
        ("MPI_ERR_ERRHANDLER", abi::MPI_ERR_ERRHANDLER as i64),
        ("MPI_ERR_ACCESS", abi::MPI_ERR_ACCESS as i64),
        ("MPI_ERR_AMODE", abi::MPI_ERR_AMODE as i64),
        ("MPI_ERR_BAD_FILE", abi::MPI_ERR_BAD_FILE as i64),
        ("MPI_ERR_CONVERSION", abi::MPI_ERR_CONVERSION as i64),
        ("MPI_ERR_DUP_DATAREP", abi::MPI_ERR_DUP_DATAREP as i64),
        ("MPI_ERR_FILE_EXISTS", abi::MPI_ERR_FILE_EXISTS as i64),
        ("MPI_ERR_FILE_IN_USE", abi::MPI_ERR_FILE_IN_USE as i64),
        ("MPI_ERR_FILE", abi::MPI_ERR_FILE as i64),
        ("MPI_ERR_IO", abi::MPI_ERR_IO as i64),
        ("MPI_ERR_NOT_SAME", abi::MPI_ERR_NOT_SAME as i64),
        ("MPI_ERR_NO_SPACE", abi::MPI_ERR_NO_SPACE as i64),
        ("MPI_ERR_NO_SUCH_FILE", abi::MPI_ERR_NO_SUCH_FILE as i64),
        ("MPI_ERR_QUOTA", abi::MPI_ERR_QUOTA as i64),
        ("MPI_ERR_READ_ONLY", abi::MPI_ERR_READ_ONLY as i64),
        (
            "MPI_ERR_UNSUPPORTED_DATAREP",
            abi::MPI_ERR_UNSUPPORTED_DATAREP as i64,
        ),
        ("MPI_DISPLACEMENT_CURRENT", abi::MPI_DISPLACEMENT_CURRENT),
        ("MPI_MODE_APPEND", abi::MPI_MODE_APPEND as i64),
        ("MPI_MODE_CREATE", abi::MPI_MODE_CREATE as i64),
        (
            "MPI_MODE_DELETE_ON_CLOSE",
            abi::MPI_MODE_DELETE_ON_CLOSE as i64,
        ),
        ("MPI_MODE_EXCL", abi::MPI_MODE_EXCL as i64),
        ("MPI_MODE_RDONLY", abi::MPI_MODE_RDONLY as i64),
        ("MPI_MODE_RDWR", abi::MPI_MODE_RDWR as i64),
        ("MPI_MODE_SEQUENTIAL", abi::MPI_MODE_SEQUENTIAL as i64),
        ("MPI_MODE_UNIQUE_OPEN", abi::MPI_MODE_UNIQUE_OPEN as i64),
        ("MPI_MODE_WRONLY", abi::MPI_MODE_WRONLY as i64),
        ("MPI_SEEK_CUR", abi::MPI_SEEK_CUR as i64),
        ("MPI_SEEK_END", abi::MPI_SEEK_END as i64),
        ("MPI_SEEK_SET", abi::MPI_SEEK_SET as i64),
        ("MPI_FILE_NULL", abi::MPI_FILE_NULL as i64),
        ("MPI_MAX_DATAREP_STRING", abi::MPI_MAX_DATAREP_STRING as i64),
        ("MPI_ERR_LASTCODE", abi::MPI_ERR_LASTCODE as i64),
        ("MPI_ANY_SOURCE", abi::MPI_ANY_SOURCE as i64),
        ("MPI_PROC_NULL", abi::MPI_PROC_NULL as i64),
        ("MPI_ROOT", abi::MPI_ROOT as i64),
        ("MPI_ANY_TAG", abi::MPI_ANY_TAG as i64),
        ("MPI_KEYVAL_INVALID", abi::MPI_KEYVAL_INVALID as i64),
        ("MPI_UNDEFINED", abi::MPI_UNDEFINED as i64),
        ("MPI_THREAD_SINGLE", abi::MPI_THREAD_SINGLE as i64),
        ("MPI_THREAD_FUNNELED", abi::MPI_THREAD_FUNNELED as i64),
        ("MPI_THREAD_SERIALIZED", abi::MPI_THREAD_SERIALIZED as i64),
        ("MPI_THREAD_MULTIPLE", abi::MPI_THREAD_MULTIPLE as i64),
        ("MPI_IDENT", abi::MPI_IDENT as i64),
        ("MPI_CONGRUENT", abi::MPI_CONGRUENT as i64),
        ("MPI_SIMILAR", abi::MPI_SIMILAR as i64),
        ("MPI_UNEQUAL", abi::MPI_UNEQUAL as i64),
        ("MPI_COMM_TYPE_SHARED", abi::MPI_COMM_TYPE_SHARED as i64),
        ("MPI_TAG_UB", abi::MPI_TAG_UB as i64),
        ("MPI_IO", abi::MPI_IO as i64),
        ("MPI_HOST", abi::MPI_HOST as i64),
        ("MPI_WTIME_IS_GLOBAL", abi::MPI_WTIME_IS_GLOBAL as i64),
        ("MPI_APPNUM", abi::MPI_APPNUM as i64),
        ("MPI_LASTUSEDCODE", abi::MPI_LASTUSEDCODE as i64),
        ("MPI_UNIVERSE_SIZE", abi::MPI_UNIVERSE_SIZE as i64),
        ("MPI_OP_NULL", abi::MPI_OP_NULL as i64),
        ("MPI_COMM_NULL", abi::MPI_COMM_NULL as i64),
        ("MPI_COMM_WORLD", abi::MPI_COMM_WORLD as i64),
        ("MPI_COMM_SELF", abi::MPI_COMM_SELF as i64),
        ("MPI_GROUP_NULL", abi::MPI_GROUP_NULL as i64),
        ("MPI_GROUP_EMPTY", abi::MPI_GROUP_EMPTY as i64),
        ("MPI_MESSAGE_NULL", abi::MPI_MESSAGE_NULL as i64),
        ("MPI_MESSAGE_NO_PROC", abi::MPI_MESSAGE_NO_PROC as i64),
        ("MPI_INFO_NULL", abi::MPI_INFO_NULL as i64),
        ("MPI_INFO_ENV", abi::MPI_INFO_ENV as i64),
        ("MPI_ERRHANDLER_NULL", abi::MPI_ERRHANDLER_NULL as i64),
        ("MPI_ERRORS_ARE_FATAL", abi::MPI_ERRORS_ARE_FATAL as i64),
        ("MPI_ERRORS_RETURN", abi::MPI_ERRORS_RETURN as i64),
        ("MPI_ERRORS_ABORT", abi::MPI_ERRORS_ABORT as i64),
        ("MPI_REQUEST_NULL", abi::MPI_REQUEST_NULL as i64),
        ("MPI_DATATYPE_NULL", abi::MPI_DATATYPE_NULL as i64),
        ("MPI_IN_PLACE", abi::MPI_IN_PLACE as i64),
        ("MPI_UNWEIGHTED", abi::MPI_UNWEIGHTED as i64),
        ("MPI_WEIGHTS_EMPTY", abi::MPI_WEIGHTS_EMPTY as i64),
        ("MPI_GRAPH", abi::MPI_GRAPH as i64),
        ("MPI_DIST_GRAPH", abi::MPI_DIST_GRAPH as i64),
        ("MPI_CART", abi::MPI_CART as i64),
        ("MPI_BSEND_OVERHEAD", abi::MPI_BSEND_OVERHEAD as i64),
        ("MPI_MAX_PROCESSOR_NAME", abi::MPI_MAX_PROCESSOR_NAME as i64),
        ("MPI_MAX_ERROR_STRING", abi::MPI_MAX_ERROR_STRING as i64),
        ("MPI_MAX_OBJECT_NAME", abi::MPI_MAX_OBJECT_NAME as i64),
        (
            "MPI_MAX_LIBRARY_VERSION_STRING",
            abi::MPI_MAX_LIBRARY_VERSION_STRING as i64,
        ),
        ("MPI_MAX_INFO_KEY", abi::MPI_MAX_INFO_KEY as i64),
        ("MPI_MAX_INFO_VAL", abi::MPI_MAX_INFO_VAL as i64),
        ("MPI_ERR_ASSERT", abi::MPI_ERR_ASSERT as i64),
        ("MPI_ERR_BASE", abi::MPI_ERR_BASE as i64),
        ("MPI_ERR_DISP", abi::MPI_ERR_DISP as i64),
        ("MPI_ERR_LOCKTYPE", abi::MPI_ERR_LOCKTYPE as i64),
        ("MPI_ERR_RMA_ATTACH", abi::MPI_ERR_RMA_ATTACH as i64),
        ("MPI_ERR_RMA_CONFLICT", abi::MPI_ERR_RMA_CONFLICT as i64),
        ("MPI_ERR_RMA_RANGE", abi::MPI_ERR_RMA_RANGE as i64),
        ("MPI_ERR_RMA_SHARED", abi::MPI_ERR_RMA_SHARED as i64),
        ("MPI_ERR_RMA_SYNC", abi::MPI_ERR_RMA_SYNC as i64),
        ("MPI_ERR_RMA_FLAVOR", abi::MPI_ERR_RMA_FLAVOR as i64),
        ("MPI_ERR_SIZE", abi::MPI_ERR_SIZE as i64),
        ("MPI_ERR_WIN", abi::MPI_ERR_WIN as i64),
        ("MPI_WIN_NULL", abi::MPI_WIN_NULL as i64),
        ("MPI_LOCK_SHARED", abi::MPI_LOCK_SHARED as i64),
        ("MPI_LOCK_EXCLUSIVE", abi::MPI_LOCK_EXCLUSIVE as i64),
        ("MPI_WIN_UNIFIED", abi::MPI_WIN_UNIFIED as i64),
        ("MPI_WIN_SEPARATE", abi::MPI_WIN_SEPARATE as i64),
        (
            "MPI_WIN_FLAVOR_ALLOCATE",
            abi::MPI_WIN_FLAVOR_ALLOCATE as i64,
        ),
        ("MPI_WIN_FLAVOR_CREATE", abi::MPI_WIN_FLAVOR_CREATE as i64),
        ("MPI_WIN_FLAVOR_DYNAMIC", abi::MPI_WIN_FLAVOR_DYNAMIC as i64),
        ("MPI_WIN_FLAVOR_SHARED", abi::MPI_WIN_FLAVOR_SHARED as i64),
        ("MPI_MODE_NOCHECK", abi::MPI_MODE_NOCHECK as i64),
        ("MPI_MODE_NOPRECEDE", abi::MPI_MODE_NOPRECEDE as i64),
        ("MPI_MODE_NOPUT", abi::MPI_MODE_NOPUT as i64),
        ("MPI_MODE_NOSTORE", abi::MPI_MODE_NOSTORE as i64),
        ("MPI_MODE_NOSUCCEED", abi::MPI_MODE_NOSUCCEED as i64),
        ("MPI_WIN_BASE", abi::MPI_WIN_BASE as i64),
        ("MPI_WIN_DISP_UNIT", abi::MPI_WIN_DISP_UNIT as i64),
        ("MPI_WIN_SIZE", abi::MPI_WIN_SIZE as i64),
        ("MPI_WIN_CREATE_FLAVOR", abi::MPI_WIN_CREATE_FLAVOR as i64),
        ("MPI_WIN_MODEL", abi::MPI_WIN_MODEL as i64),
        ("MPI_OP_NULL", OP_NULL as i64),
    ];
    let table: BTreeMap<&str, Value> = TABLE.iter().copied().collect();
    let mut wrong = Vec::new();
    for (name, got) in rust {
        match table.get(name) {
            Some(Value::Int(want)) if want == got => {}
            Some(Value::Int(want)) => wrong.push(format!("{name}: Rust {got:#x}, mpi.h {want:#x}")),
            _ => wrong.push(format!("{name}: Rust has it, mpi.h does not")),
        }
    }
    // Predefined reduction operations.
    let ops = handles_of("MPI_Op");
    for (name, value) in TABLE {
        let Value::Int(h) = value else { continue };
        if ops.contains(*name) && *name != "MPI_OP_NULL" {
            match BuiltinOp::from_handle(*h as usize) {
                Some(op) if op.name() == *name => {}
                Some(op) => {
                    wrong.push(format!("{name} ({h:#x}) is {} on the Rust side", op.name()))
                }
                None => wrong.push(format!("{name} ({h:#x}) is no BuiltinOp on the Rust side")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "constants of abi.rs/ops.rs and mpi.h differ:\n{}",
        wrong.join("\n")
    );
}

/// `MPI_X` and `PMPI_X` names declared as functions in mpi.h.
fn header_functions() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in header().lines() {
        let mut words = line.split(|c: char| c.is_whitespace() || c == '(');
        let (Some(ret), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        if ["int", "double", "MPI_Aint"].contains(&ret)
            && (name.starts_with("MPI_") || name.starts_with("PMPI_"))
            && line.contains('(')
        {
            names.insert(name.to_string());
        }
    }
    names
}

#[test]
fn every_prototype_is_exported() {
    // libmpi.so of this test's profile: <target>/<profile>/deps/<this test> → <target>/<profile>.
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("<target>/<profile>")
        .to_path_buf();
    // Cargo builds the library's cdylib alongside the rlib this test links, in the same profile.
    let lib = [
        profile_dir.join("libmpi.so"),
        profile_dir.join("deps/libmpi.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("no libmpi.so in {}: build ferry-mpi", profile_dir.display()));
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("run nm (binutils)");
    assert!(
        out.status.success(),
        "nm -D {} failed: {}",
        lib.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    let declared = header_functions();
    assert_eq!(declared.len() % 2, 0, "each MPI_X needs its PMPI_X");
    let missing: Vec<_> = declared
        .iter()
        .filter(|n| !exported.contains(*n))
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} functions declared in mpi.h are not exported by {}:\n{}",
        missing.len(),
        declared.len(),
        lib.display(),
        missing.join("\n")
    );
}
