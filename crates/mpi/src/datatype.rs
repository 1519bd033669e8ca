//! MPI datatypes: the predefined (named) types of the MPI-5 standard ABI and the derived-type
//! constructors of MPI-4.1 §5.1, with their type-map arithmetic (size, bounds, extent), a flattened
//! form for packing, element counting, and envelope/contents decoding.
//!
//! Sans-IO: nothing here communicates. The C ABI layer turns handles into [`Datatype`] values, calls
//! the constructors and queries, and maps [`TypeError`] to MPI error classes.
//!
//! Platform facts (x86_64 Linux, LP64): `long` is 8 bytes, `long double` is 16 bytes of storage holding
//! an x87 80-bit value, `wchar_t` is 4 bytes, `bool` is 1 byte; pair types have C struct layout.
//!
//! Not here: `external32` packing (`MPI_Pack_external`), `MPI_Type_match_size` and the Fortran 90
//! parameterized types. Contents are recorded once; the large-count layout of
//! `MPI_Type_get_contents_c` is derived from them when a count does not fit an `int`.
//!
//! A [`Datatype`] is an `Arc`, cheap to clone and shareable across threads. Its flattened form (the list
//! of contiguous byte runs of one element, in type-map order) is built on [`Datatype::commit`] or on first
//! use, once.
//!
//! ```
//! use mpi::datatype::{Builtin, Datatype};
//! let int = Datatype::builtin(Builtin::Int);
//! // Every second int of 3: extent 20 bytes, 12 bytes of data.
//! let v = Datatype::vector(3, 1, 2, &int).unwrap();
//! assert_eq!((v.size(), v.extent()), (12, 20));
//! let src: Vec<i32> = (0..5).collect();
//! let mut packed = vec![0u8; 12];
//! // SAFETY: `src` covers the 20-byte extent of one element.
//! unsafe { v.pack(src.as_ptr().cast(), 1, &mut packed) };
//! assert_eq!(bytemuck::cast_slice::<u8, i32>(&packed), &[0, 2, 4]);
//! ```

use std::sync::{Arc, OnceLock};

use thiserror::Error;

/// Why a datatype constructor refused its arguments. The C ABI maps these to MPI error classes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TypeError {
    /// A count argument is negative (`MPI_ERR_COUNT`).
    #[error("negative count {0}")]
    NegativeCount(i64),
    /// A block length is negative (`MPI_ERR_ARG`).
    #[error("negative block length {0}")]
    NegativeBlocklen(i64),
    /// Argument arrays that must have one entry per block differ in length (`MPI_ERR_ARG`).
    #[error("argument arrays differ in length ({0} and {1})")]
    LengthMismatch(usize, usize),
    /// A subarray's sizes, subsizes or starts are inconsistent (`MPI_ERR_ARG`).
    #[error("invalid subarray: {0}")]
    InvalidSubarray(&'static str),
    /// A darray's sizes, process grid, rank or distribution arguments are inconsistent
    /// (`MPI_ERR_ARG`).
    #[error("invalid darray: {0}")]
    InvalidDarray(&'static str),
    /// The size or a bound of the new type does not fit in an address (`MPI_ERR_ARG`).
    #[error("datatype size or bounds overflow the address space")]
    Overflow,
}

/// Arithmetic scalar kinds that reductions operate on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// `int8_t`
    I8,
    /// `int16_t`
    I16,
    /// `int32_t`
    I32,
    /// `int64_t`
    I64,
    /// `__int128` (Fortran `INTEGER*16`)
    I128,
    /// `uint8_t`
    U8,
    /// `uint16_t`
    U16,
    /// `uint32_t`
    U32,
    /// `uint64_t`
    U64,
    /// `float`
    F32,
    /// `double`
    F64,
    /// x87 `long double`: 80-bit value in 16 bytes of storage
    F80,
}

impl Scalar {
    /// Bytes of storage.
    pub const fn size(self) -> usize {
        match self {
            Scalar::I8 | Scalar::U8 => 1,
            Scalar::I16 | Scalar::U16 => 2,
            Scalar::I32 | Scalar::U32 | Scalar::F32 => 4,
            Scalar::I64 | Scalar::U64 | Scalar::F64 => 8,
            Scalar::I128 | Scalar::F80 => 16,
        }
    }
}

/// What a predefined type is, for reductions (MPI-4.1 §6.9.2 groups, with MPICH's extension that
/// `MPI_CHAR` and `MPI_WCHAR` count as C integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// C integer, Fortran integer or multi-language integer (`MPI_AINT`, `MPI_COUNT`, `MPI_OFFSET`).
    Int(Scalar),
    /// Floating point.
    Float(Scalar),
    /// Complex: two consecutive values of the given floating kind.
    Complex(Scalar),
    /// C `bool` or Fortran `LOGICAL` of the given width in bytes.
    Logical(u8),
    /// `MPI_BYTE`: bitwise operations only.
    Byte,
    /// No reduction applies (`MPI_PACKED`, `MPI_CHARACTER`, and Fortran kinds without a native type).
    Opaque,
    /// A (value, index) pair type for `MPI_MINLOC`/`MPI_MAXLOC`.
    Pair {
        /// Kind of the value member, at offset 0.
        value: Scalar,
        /// Kind of the index member.
        index: Scalar,
        /// Byte offset of the index member.
        index_offset: usize,
    },
}

macro_rules! builtins {
    ($( $name:ident = $h:literal, $mpi:literal, $size:expr, $align:expr, $class:expr; )*) => {
        /// A predefined (named) MPI datatype; the discriminant is its handle value in the standard ABI.
        #[repr(usize)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Builtin {
            $( #[doc = concat!("`", $mpi, "`")] $name = $h, )*
        }

        impl Builtin {
            /// Every predefined type, in handle order.
            pub const ALL: &'static [Builtin] = &[$(Builtin::$name),*];

            /// The type whose ABI handle is `h`, if `h` names a predefined type.
            pub const fn from_handle(h: usize) -> Option<Builtin> {
                match h {
                    $( $h => Some(Builtin::$name), )*
                    _ => None,
                }
            }

            /// The name in the standard ABI header (see also [`Builtin::type_name`]).
            pub const fn name(self) -> &'static str {
                match self { $( Builtin::$name => $mpi, )* }
            }

            /// Bytes of data (`MPI_Type_size`).
            pub const fn size(self) -> usize {
                match self { $( Builtin::$name => $size, )* }
            }

            /// Alignment in bytes (as C lays the type out in a struct).
            pub const fn align(self) -> usize {
                match self { $( Builtin::$name => $align, )* }
            }

            /// Reduction class.
            pub const fn class(self) -> Class {
                match self { $( Builtin::$name => $class, )* }
            }
        }
    };
}

use Class::{Byte, Complex, Float, Int, Logical, Opaque};
use Scalar::{F32, F64, F80, I128, I16, I32, I64, I8, U16, U32, U64, U8};

const fn pair(value: Scalar, index: Scalar, index_offset: usize) -> Class {
    Class::Pair {
        value,
        index,
        index_offset,
    }
}

builtins! {
    Aint = 0x201, "MPI_AINT", 8, 8, Int(I64);
    Count = 0x202, "MPI_COUNT", 8, 8, Int(I64);
    Offset = 0x203, "MPI_OFFSET", 8, 8, Int(I64);
    Packed = 0x207, "MPI_PACKED", 1, 1, Opaque;
    Short = 0x208, "MPI_SHORT", 2, 2, Int(I16);
    Int = 0x209, "MPI_INT", 4, 4, Int(I32);
    Long = 0x20a, "MPI_LONG", 8, 8, Int(I64);
    LongLong = 0x20b, "MPI_LONG_LONG", 8, 8, Int(I64);
    UnsignedShort = 0x20c, "MPI_UNSIGNED_SHORT", 2, 2, Int(U16);
    Unsigned = 0x20d, "MPI_UNSIGNED", 4, 4, Int(U32);
    UnsignedLong = 0x20e, "MPI_UNSIGNED_LONG", 8, 8, Int(U64);
    UnsignedLongLong = 0x20f, "MPI_UNSIGNED_LONG_LONG", 8, 8, Int(U64);
    Float = 0x210, "MPI_FLOAT", 4, 4, Float(F32);
    CFloatComplex = 0x212, "MPI_C_FLOAT_COMPLEX", 8, 4, Complex(F32);
    CxxFloatComplex = 0x213, "MPI_CXX_FLOAT_COMPLEX", 8, 4, Complex(F32);
    Double = 0x214, "MPI_DOUBLE", 8, 8, Float(F64);
    CDoubleComplex = 0x216, "MPI_C_DOUBLE_COMPLEX", 16, 8, Complex(F64);
    CxxDoubleComplex = 0x217, "MPI_CXX_DOUBLE_COMPLEX", 16, 8, Complex(F64);
    Integer = 0x219, "MPI_INTEGER", 4, 4, Int(I32);
    Logical = 0x218, "MPI_LOGICAL", 4, 4, Logical(4);
    Real = 0x21a, "MPI_REAL", 4, 4, Float(F32);
    Complex = 0x21b, "MPI_COMPLEX", 8, 4, Complex(F32);
    DoublePrecision = 0x21c, "MPI_DOUBLE_PRECISION", 8, 8, Float(F64);
    DoubleComplex = 0x21d, "MPI_DOUBLE_COMPLEX", 16, 8, Complex(F64);
    LongDouble = 0x220, "MPI_LONG_DOUBLE", 16, 16, Float(F80);
    CLongDoubleComplex = 0x224, "MPI_C_LONG_DOUBLE_COMPLEX", 32, 16, Complex(F80);
    CxxLongDoubleComplex = 0x225, "MPI_CXX_LONG_DOUBLE_COMPLEX", 32, 16, Complex(F80);
    FloatInt = 0x228, "MPI_FLOAT_INT", 8, 4, pair(F32, I32, 4);
    DoubleInt = 0x229, "MPI_DOUBLE_INT", 12, 8, pair(F64, I32, 8);
    LongInt = 0x22a, "MPI_LONG_INT", 12, 8, pair(I64, I32, 8);
    TwoInt = 0x22b, "MPI_2INT", 8, 4, pair(I32, I32, 4);
    ShortInt = 0x22c, "MPI_SHORT_INT", 6, 4, pair(I16, I32, 4);
    LongDoubleInt = 0x22d, "MPI_LONG_DOUBLE_INT", 20, 16, pair(F80, I32, 16);
    TwoReal = 0x230, "MPI_2REAL", 8, 4, pair(F32, F32, 4);
    TwoDoublePrecision = 0x231, "MPI_2DOUBLE_PRECISION", 16, 8, pair(F64, F64, 8);
    TwoInteger = 0x232, "MPI_2INTEGER", 8, 4, pair(I32, I32, 4);
    CBool = 0x238, "MPI_C_BOOL", 1, 1, Logical(1);
    CxxBool = 0x239, "MPI_CXX_BOOL", 1, 1, Logical(1);
    Wchar = 0x23c, "MPI_WCHAR", 4, 4, Int(I32);
    Int8 = 0x240, "MPI_INT8_T", 1, 1, Int(I8);
    Uint8 = 0x241, "MPI_UINT8_T", 1, 1, Int(U8);
    Char = 0x243, "MPI_CHAR", 1, 1, Int(I8);
    SignedChar = 0x244, "MPI_SIGNED_CHAR", 1, 1, Int(I8);
    UnsignedChar = 0x245, "MPI_UNSIGNED_CHAR", 1, 1, Int(U8);
    Byte = 0x247, "MPI_BYTE", 1, 1, Byte;
    Int16 = 0x248, "MPI_INT16_T", 2, 2, Int(I16);
    Uint16 = 0x249, "MPI_UINT16_T", 2, 2, Int(U16);
    Int32 = 0x250, "MPI_INT32_T", 4, 4, Int(I32);
    Uint32 = 0x251, "MPI_UINT32_T", 4, 4, Int(U32);
    Int64 = 0x258, "MPI_INT64_T", 8, 8, Int(I64);
    Uint64 = 0x259, "MPI_UINT64_T", 8, 8, Int(U64);
    Integer1 = 0x2c1, "MPI_INTEGER1", 1, 1, Int(I8);
    Logical1 = 0x2c0, "MPI_LOGICAL1", 1, 1, Logical(1);
    Real1 = 0x2c2, "MPIX_REAL1", 1, 1, Opaque;
    Character = 0x21e, "MPI_CHARACTER", 1, 1, Opaque;
    Integer2 = 0x2c9, "MPI_INTEGER2", 2, 2, Int(I16);
    Logical2 = 0x2c8, "MPI_LOGICAL2", 2, 2, Logical(2);
    Real2 = 0x2ca, "MPI_REAL2", 2, 2, Opaque;
    Integer4 = 0x2d1, "MPI_INTEGER4", 4, 4, Int(I32);
    Logical4 = 0x2d0, "MPI_LOGICAL4", 4, 4, Logical(4);
    Real4 = 0x2d2, "MPI_REAL4", 4, 4, Float(F32);
    Complex4 = 0x2d3, "MPI_COMPLEX4", 4, 2, Opaque;
    Integer8 = 0x2d9, "MPI_INTEGER8", 8, 8, Int(I64);
    Logical8 = 0x2d8, "MPI_LOGICAL8", 8, 8, Logical(8);
    Real8 = 0x2da, "MPI_REAL8", 8, 8, Float(F64);
    Complex8 = 0x2db, "MPI_COMPLEX8", 8, 4, Complex(F32);
    Logical16 = 0x2e0, "MPI_LOGICAL16", 16, 16, Logical(16);
    Integer16 = 0x2e1, "MPI_INTEGER16", 16, 16, Int(I128);
    Real16 = 0x2e2, "MPI_REAL16", 16, 16, Opaque;
    Complex16 = 0x2e3, "MPI_COMPLEX16", 16, 8, Complex(F64);
    Complex32 = 0x2eb, "MPI_COMPLEX32", 32, 16, Opaque;
}

/// `MPI_DATATYPE_NULL` in the standard ABI.
pub const DATATYPE_NULL: usize = 0x200;

impl Builtin {
    /// The ABI handle value (cast it to `MPI_Datatype`).
    pub const fn handle(self) -> usize {
        self as usize
    }

    /// The name `MPI_Type_get_name` reports: [`Builtin::name`] except that two types answer with the
    /// older of their two standard names (`MPI_LONG_LONG_INT`, `MPI_C_COMPLEX`), which MPICH's
    /// `datatype/typename` test accepts for both spellings.
    pub const fn type_name(self) -> &'static str {
        match self {
            Builtin::LongLong => "MPI_LONG_LONG_INT",
            Builtin::CFloatComplex => "MPI_C_COMPLEX",
            b => b.name(),
        }
    }

    /// Extent: size rounded up to the alignment (differs from the size only for pair types with
    /// padding, e.g. `MPI_DOUBLE_INT` has size 12 and extent 16).
    pub const fn extent(self) -> usize {
        self.size().div_ceil(self.align()) * self.align()
    }

    /// The size, when values lie back to back without padding (size equals extent), so that
    /// `count` of them are one block of `count * size` bytes; `None` for padded pair types.
    pub const fn dense_size(self) -> Option<usize> {
        if self.size() == self.extent() {
            Some(self.size())
        } else {
            None
        }
    }

    /// The span of the data itself from offset 0 (`MPI_Type_get_true_extent`): for
    /// MPI_SHORT_INT bytes 0..8, for MPI_DOUBLE_INT 0..12.
    pub fn true_extent(self) -> usize {
        let (m, n) = self.members();
        m[..n].iter().map(|&(o, l)| o + l).max().unwrap_or(0)
    }

    /// The basic elements of one value as (byte offset, bytes): two for pair types, one otherwise.
    /// `MPI_Get_elements` counts these.
    pub fn members(self) -> ([(usize, usize); 2], usize) {
        match self.class() {
            Class::Pair {
                value,
                index,
                index_offset,
            } => ([(0, value.size()), (index_offset, index.size())], 2),
            _ => ([(0, self.size()), (0, 0)], 1),
        }
    }
}

/// `MPI_Type_create_subarray` array order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Row-major: the last dimension varies fastest (`MPI_ORDER_C`).
    C,
    /// Column-major: the first dimension varies fastest (`MPI_ORDER_FORTRAN`).
    Fortran,
}

impl Order {
    /// `MPI_ORDER_C` in the standard ABI.
    pub const MPI_ORDER_C: i32 = 0xC;
    /// `MPI_ORDER_FORTRAN` in the standard ABI.
    pub const MPI_ORDER_FORTRAN: i32 = 0xF;

    /// The order named by an ABI constant.
    pub const fn from_abi(v: i32) -> Option<Order> {
        match v {
            Self::MPI_ORDER_C => Some(Order::C),
            Self::MPI_ORDER_FORTRAN => Some(Order::Fortran),
            _ => None,
        }
    }

    /// The ABI constant.
    pub const fn to_abi(self) -> i32 {
        match self {
            Order::C => Self::MPI_ORDER_C,
            Order::Fortran => Self::MPI_ORDER_FORTRAN,
        }
    }
}

/// `MPI_COMBINER_*` values from the standard ABI.
pub mod combiner {
    /// `MPI_COMBINER_NAMED`
    pub const NAMED: i32 = 101;
    /// `MPI_COMBINER_DUP`
    pub const DUP: i32 = 102;
    /// `MPI_COMBINER_CONTIGUOUS`
    pub const CONTIGUOUS: i32 = 103;
    /// `MPI_COMBINER_VECTOR`
    pub const VECTOR: i32 = 104;
    /// `MPI_COMBINER_HVECTOR`
    pub const HVECTOR: i32 = 105;
    /// `MPI_COMBINER_INDEXED`
    pub const INDEXED: i32 = 106;
    /// `MPI_COMBINER_HINDEXED`
    pub const HINDEXED: i32 = 107;
    /// `MPI_COMBINER_INDEXED_BLOCK`
    pub const INDEXED_BLOCK: i32 = 108;
    /// `MPI_COMBINER_HINDEXED_BLOCK`
    pub const HINDEXED_BLOCK: i32 = 109;
    /// `MPI_COMBINER_STRUCT`
    pub const STRUCT: i32 = 110;
    /// `MPI_COMBINER_SUBARRAY`
    pub const SUBARRAY: i32 = 111;
    /// `MPI_COMBINER_DARRAY`
    pub const DARRAY: i32 = 112;
    /// `MPI_COMBINER_F90_REAL`
    pub const F90_REAL: i32 = 113;
    /// `MPI_COMBINER_F90_COMPLEX`
    pub const F90_COMPLEX: i32 = 114;
    /// `MPI_COMBINER_F90_INTEGER`
    pub const F90_INTEGER: i32 = 115;
    /// `MPI_COMBINER_RESIZED`
    pub const RESIZED: i32 = 116;
    /// `MPI_COMBINER_VALUE_INDEX`
    pub const VALUE_INDEX: i32 = 117;
}

/// The bound markers of MPI-1 (`MPI_LB`, `MPI_UB`; removed in MPI-3.0, still in MPICH): types
/// without data whose displacement in a type map sets its lower or upper bound (MPI-2.2 §4.1.6).
/// The standard ABI has no handles for them: ferry's sit at the top of the datatype block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Marker {
    /// `MPI_LB`.
    Lb = 0x2fe,
    /// `MPI_UB`.
    Ub = 0x2ff,
}

impl Marker {
    /// The marker whose handle is `h`.
    pub const fn from_handle(h: usize) -> Option<Marker> {
        match h {
            0x2fe => Some(Marker::Lb),
            0x2ff => Some(Marker::Ub),
            _ => None,
        }
    }

    /// `MPI_LB` or `MPI_UB`.
    pub const fn name(self) -> &'static str {
        match self {
            Marker::Lb => "MPI_LB",
            Marker::Ub => "MPI_UB",
        }
    }
}

/// How a datatype was made: the constructor and its arguments, as `MPI_Type_get_contents` returns
/// them. Counts and block lengths are already checked to be non-negative.
#[derive(Debug, Clone)]
pub enum Contents {
    /// A predefined type.
    Named(Builtin),
    /// A bound marker, `MPI_LB` or `MPI_UB` (predefined, no data).
    Marker(Marker),
    /// `MPI_Type_dup`.
    Dup(Datatype),
    /// `MPI_Type_contiguous`.
    Contiguous {
        /// Number of copies.
        count: usize,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_vector`.
    Vector {
        /// Number of blocks.
        count: usize,
        /// Elements per block.
        blocklen: usize,
        /// Stride in elements of `old`.
        stride: i64,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_create_hvector`.
    Hvector {
        /// Number of blocks.
        count: usize,
        /// Elements per block.
        blocklen: usize,
        /// Stride in bytes.
        stride: isize,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_indexed`.
    Indexed {
        /// Elements per block.
        blocklens: Vec<usize>,
        /// Displacements in elements of `old`.
        displs: Vec<i64>,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_create_hindexed`.
    Hindexed {
        /// Elements per block.
        blocklens: Vec<usize>,
        /// Displacements in bytes.
        displs: Vec<isize>,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_create_indexed_block`.
    IndexedBlock {
        /// Elements per block.
        blocklen: usize,
        /// Displacements in elements of `old`.
        displs: Vec<i64>,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_create_hindexed_block`.
    HindexedBlock {
        /// Elements per block.
        blocklen: usize,
        /// Displacements in bytes.
        displs: Vec<isize>,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_create_struct`.
    Struct {
        /// Elements per block.
        blocklens: Vec<usize>,
        /// Displacements in bytes.
        displs: Vec<isize>,
        /// Type of each block.
        types: Vec<Datatype>,
    },
    /// `MPI_Type_create_subarray`.
    Subarray {
        /// Full array sizes.
        sizes: Vec<usize>,
        /// Subarray sizes.
        subsizes: Vec<usize>,
        /// Subarray starts.
        starts: Vec<usize>,
        /// Storage order.
        order: Order,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_create_darray`.
    Darray {
        /// Number of processes.
        size: usize,
        /// This process.
        rank: usize,
        /// Global array sizes.
        gsizes: Vec<usize>,
        /// Distribution of each dimension.
        distribs: Vec<Distrib>,
        /// Process grid sizes.
        psizes: Vec<usize>,
        /// Storage order.
        order: Order,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_create_resized`.
    Resized {
        /// New lower bound.
        lb: isize,
        /// New extent.
        extent: isize,
        /// Old type.
        old: Datatype,
    },
    /// `MPI_Type_create_f90_integer`, `_real` or `_complex`: a predefined type chosen by decimal
    /// precision and range. Its contents are the arguments only (no datatypes).
    F90 {
        /// [`combiner::F90_INTEGER`], [`combiner::F90_REAL`] or [`combiner::F90_COMPLEX`].
        combiner: i32,
        /// The arguments as given: `[r]` for integers, `[p, r]` for reals and complex (either
        /// may be MPI_UNDEFINED).
        args: Vec<i64>,
        /// The predefined type with the same data.
        base: Datatype,
    },
}

/// `MPI_Type_get_contents` output, with integers widened to `i64` (they came from C `int`s, so they
/// narrow back without loss).
#[derive(Debug, Clone, Default)]
pub struct TypeContents {
    /// The `array_of_integers`.
    pub integers: Vec<i64>,
    /// The `array_of_addresses`.
    pub addresses: Vec<isize>,
    /// The `array_of_large_counts` (`MPI_Type_get_contents_c` only, see
    /// [`TypeContents::into_large`]).
    pub large_counts: Vec<i64>,
    /// The `array_of_datatypes`.
    pub datatypes: Vec<Datatype>,
}

impl TypeContents {
    /// Whether an integer does not fit the `int` of `MPI_Type_get_contents` (only a large-count
    /// constructor, `MPI_Type_contiguous_c` and the like, makes such a type).
    pub fn needs_large_counts(&self) -> bool {
        self.integers.iter().any(|&v| i32::try_from(v).is_err())
    }

    /// The large-count layout of `MPI_Type_get_contents_c` (MPI 4.1, large-count column of the
    /// combiner table): counts,
    /// block lengths, strides and displacements move to `large_counts` in their order (integers
    /// first, then addresses); a subarray keeps `ndims` and `order` as integers and a darray
    /// everything but its `gsizes`.
    pub fn into_large(mut self, combiner: i32) -> TypeContents {
        match combiner {
            combiner::SUBARRAY => {
                let order = self.integers.pop().unwrap_or_default();
                let ndims = self.integers.first().copied().unwrap_or_default();
                self.large_counts = self.integers.split_off(1.min(self.integers.len()));
                self.integers = vec![ndims, order];
            }
            combiner::DARRAY => {
                let ndims = self.integers.get(2).map_or(0, |&n| n.max(0) as usize);
                let end = (3 + ndims).min(self.integers.len());
                self.large_counts = self.integers.drain(3.min(end)..end).collect();
            }
            combiner::NAMED | combiner::DUP => {}
            _ => {
                self.large_counts = std::mem::take(&mut self.integers);
                self.large_counts
                    .extend(self.addresses.drain(..).map(|a| a as i64));
            }
        }
        self
    }
}

/// `MPI_Type_get_envelope` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    /// Length of `array_of_integers`.
    pub num_integers: usize,
    /// Length of `array_of_addresses`.
    pub num_addresses: usize,
    /// Length of `array_of_large_counts` (0 unless a count does not fit an `int`; see
    /// [`Datatype::envelope_c`]).
    pub num_large_counts: usize,
    /// Length of `array_of_datatypes`.
    pub num_datatypes: usize,
    /// One of [`combiner`].
    pub combiner: i32,
}

/// A run of `reps` equal-length blocks at `off + k * stride` (k < reps) within one element.
/// Strided runs keep a vector of a million ints one entry long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    off: isize,
    len: usize,
    reps: usize,
    stride: isize,
}

/// One piece of the flattened form of a type, in type-map order: a run of blocks, or `count`
/// repetitions of a shared body (used when expanding the body would make the list long, so that
/// `contiguous(10^6, struct)` stays small).
#[derive(Debug, Clone)]
enum Seg {
    Run(Run),
    Rep {
        off: isize,
        count: usize,
        stride: isize,
        body: Arc<[Seg]>,
        body_bytes: usize,
    },
}

impl Seg {
    fn bytes(&self) -> usize {
        match self {
            Seg::Run(r) => r.len * r.reps,
            Seg::Rep {
                count, body_bytes, ..
            } => count * body_bytes,
        }
    }
}

/// The layout of the blocks a derived type is made of, kept for flattening and element counting.
#[derive(Debug)]
enum Layout {
    Builtin(Builtin),
    /// `count` blocks of `blocklen` copies of `old` at byte displacements `i * stride`.
    Regular {
        count: usize,
        blocklen: usize,
        stride: isize,
        old: Datatype,
    },
    /// Blocks of (byte displacement, copies) of `old`.
    List {
        blocks: Vec<(isize, usize)>,
        old: Datatype,
    },
    /// Blocks of (byte displacement, copies, type).
    Struct {
        blocks: Vec<(isize, usize, Datatype)>,
    },
    /// Same data as `old`, other bounds (resized, dup, subarray).
    Alias(Datatype),
}

#[derive(Debug)]
struct Inner {
    contents: Contents,
    layout: Layout,
    size: usize,
    lb: isize,
    ub: isize,
    true_lb: isize,
    true_ub: isize,
    align: usize,
    /// The lower bound was set explicitly (by `resized` or an `MPI_LB` marker, directly or in a
    /// component): it is the lowest marked bound, whatever the data (MPI-2.2 §4.1.6).
    lb_marked: bool,
    /// The upper bound was set explicitly (`resized` or `MPI_UB`). With either marker, struct
    /// alignment padding does not apply.
    ub_marked: bool,
    /// Basic elements per element (`MPI_Get_elements` of one whole element).
    n_basic: usize,
    uniform: Option<(Builtin, usize)>,
    flat: OnceLock<Arc<[Seg]>>,
}

/// An MPI datatype (predefined or derived). Clones share the same description.
#[derive(Debug, Clone)]
pub struct Datatype(Arc<Inner>);

fn to_isize(v: i128) -> Result<isize, TypeError> {
    isize::try_from(v).map_err(|_| TypeError::Overflow)
}

fn count_arg(c: i64) -> Result<usize, TypeError> {
    usize::try_from(c).map_err(|_| TypeError::NegativeCount(c))
}

fn blocklen_arg(b: i64) -> Result<usize, TypeError> {
    usize::try_from(b).map_err(|_| TypeError::NegativeBlocklen(b))
}

/// Each of `blocklens`, checked (see [`blocklen_arg`]).
fn blocklens_arg(blocklens: &[i64]) -> Result<Vec<usize>, TypeError> {
    blocklens.iter().map(|&b| blocklen_arg(b)).collect()
}

fn same_len(a: usize, b: usize) -> Result<(), TypeError> {
    if a == b {
        Ok(())
    } else {
        Err(TypeError::LengthMismatch(a, b))
    }
}

/// Accumulates the type-map metrics of a derived type block by block.
struct Acc {
    is_struct: bool,
    size: u128,
    n_basic: u128,
    align: usize,
    /// Bounds over all blocks.
    bounds: Option<(i128, i128)>,
    /// Lowest lower bound over blocks whose type carries a lower-bound marker.
    marked_lb: Option<i128>,
    /// Highest upper bound over blocks whose type carries an upper-bound marker.
    marked_ub: Option<i128>,
    true_bounds: Option<(i128, i128)>,
    /// `None` before the first data block; `Some(None)` once blocks disagree.
    uniform: Option<Option<(Builtin, u128)>>,
}

fn widen(b: &mut Option<(i128, i128)>, lo: i128, hi: i128) {
    *b = Some(match *b {
        None => (lo, hi),
        Some((l, h)) => (l.min(lo), h.max(hi)),
    });
}

impl Acc {
    fn new(is_struct: bool) -> Acc {
        Acc {
            is_struct,
            size: 0,
            n_basic: 0,
            align: 1,
            bounds: None,
            marked_lb: None,
            marked_ub: None,
            true_bounds: None,
            uniform: None,
        }
    }

    /// Whether `copies` of `old` add anything to the type map (data or bound markers).
    fn contributes(copies: usize, old: &Datatype) -> bool {
        copies > 0 && (old.0.size > 0 || old.0.lb_marked || old.0.ub_marked)
    }

    /// Widens the bounds by a block of `copies` of `old` (at stride extent) at byte displacement `disp`.
    fn bounds_of(&mut self, disp: i128, copies: usize, old: &Datatype) {
        if !Acc::contributes(copies, old) {
            return;
        }
        let o = &old.0;
        let ext = (o.ub - o.lb) as i128;
        let span = (copies as i128 - 1) * ext;
        let (lo, hi) = (disp + span.min(0), disp + span.max(0));
        if o.size > 0 {
            // A marker (or a type of markers only) sets only the bound it marks: the type map
            // { (MPI_LB, 10) } has upper bound 0 (as in MPICH).
            widen(&mut self.bounds, lo + o.lb as i128, hi + o.ub as i128);
        }
        if o.lb_marked {
            let l = lo + o.lb as i128;
            self.marked_lb = Some(self.marked_lb.map_or(l, |m| m.min(l)));
        }
        if o.ub_marked {
            let h = hi + o.ub as i128;
            self.marked_ub = Some(self.marked_ub.map_or(h, |m| m.max(h)));
        }
        self.align = self.align.max(o.align);
        if o.size > 0 {
            widen(
                &mut self.true_bounds,
                lo + o.true_lb as i128,
                hi + o.true_ub as i128,
            );
        }
    }

    /// Adds the data of `n` copies of `old`.
    fn data(&mut self, n: u128, old: &Datatype) {
        let o = &old.0;
        if n == 0 || o.size == 0 {
            return;
        }
        self.size += n * o.size as u128;
        self.n_basic += n * o.n_basic as u128;
        let u = o.uniform.map(|(b, k)| (b, k as u128 * n));
        self.uniform = Some(match (self.uniform, u) {
            (None, u) => u,
            (Some(Some((b0, k0))), Some((b, k))) if b0 == b => Some((b, k0 + k)),
            _ => None,
        });
    }

    fn block(&mut self, disp: i128, copies: usize, old: &Datatype) {
        self.bounds_of(disp, copies, old);
        self.data(copies as u128, old);
    }

    fn finish(self, contents: Contents, layout: Layout) -> Result<Datatype, TypeError> {
        let (lb_marked, ub_marked) = (self.marked_lb.is_some(), self.marked_ub.is_some());
        let (lb, ub) = self.bounds.unwrap_or((0, 0));
        let (lb, mut ub) = (self.marked_lb.unwrap_or(lb), self.marked_ub.unwrap_or(ub));
        if self.is_struct && !lb_marked && !ub_marked && ub > lb {
            // C pads a struct to a multiple of its strictest member alignment; MPI (the ε of
            // §5.1.6) and MPICH/Open MPI do the same for create_struct.
            let a = self.align as i128;
            ub = lb + (ub - lb + a - 1) / a * a;
        }
        let (true_lb, true_ub) = self.true_bounds.unwrap_or((0, 0));
        let size = usize::try_from(self.size).map_err(|_| TypeError::Overflow)?;
        if isize::try_from(self.size).is_err() {
            return Err(TypeError::Overflow);
        }
        let uniform = match self.uniform.flatten() {
            Some((b, k)) => Some((b, usize::try_from(k).map_err(|_| TypeError::Overflow)?)),
            None => None,
        };
        Ok(Datatype(Arc::new(Inner {
            contents,
            layout,
            size,
            lb: to_isize(lb)?,
            ub: to_isize(ub)?,
            true_lb: to_isize(true_lb)?,
            true_ub: to_isize(true_ub)?,
            align: self.align,
            lb_marked,
            ub_marked,
            n_basic: usize::try_from(self.n_basic).map_err(|_| TypeError::Overflow)?,
            uniform,
            flat: OnceLock::new(),
        })))
    }
}

impl Datatype {
    /// The predefined type `b`.
    pub fn builtin(b: Builtin) -> Datatype {
        let (_, n) = b.members();
        let true_ub = b.true_extent();
        Datatype(Arc::new(Inner {
            contents: Contents::Named(b),
            layout: Layout::Builtin(b),
            size: b.size(),
            lb: 0,
            ub: b.extent() as isize,
            true_lb: 0,
            true_ub: true_ub as isize,
            align: b.align(),
            lb_marked: false,
            ub_marked: false,
            n_basic: n,
            uniform: Some((b, 1)),
            flat: OnceLock::new(),
        }))
    }

    /// The predefined type with ABI handle `h` (the markers `MPI_LB`/`MPI_UB` included).
    pub fn from_handle(h: usize) -> Option<Datatype> {
        match Marker::from_handle(h) {
            Some(m) => Some(Datatype::marker(m)),
            None => Builtin::from_handle(h).map(Datatype::builtin),
        }
    }

    /// The marker type `m`: no data, bounds 0, and the mark that makes a displacement of it the
    /// lower (`MPI_LB`) or upper (`MPI_UB`) bound of a type built from it.
    pub fn marker(m: Marker) -> Datatype {
        Datatype(Arc::new(Inner {
            contents: Contents::Marker(m),
            layout: Layout::Struct { blocks: Vec::new() },
            size: 0,
            lb: 0,
            ub: 0,
            true_lb: 0,
            true_ub: 0,
            align: 1,
            lb_marked: m == Marker::Lb,
            ub_marked: m == Marker::Ub,
            n_basic: 0,
            uniform: None,
            flat: OnceLock::new(),
        }))
    }

    /// The marker this type is, if it is `MPI_LB` or `MPI_UB`.
    pub fn as_marker(&self) -> Option<Marker> {
        match self.0.contents {
            Contents::Marker(m) => Some(m),
            _ => None,
        }
    }

    fn regular(
        count: usize,
        blocklen: usize,
        stride: isize,
        old: &Datatype,
        contents: Contents,
    ) -> Result<Datatype, TypeError> {
        let mut acc = Acc::new(false);
        if count > 0 {
            // The extreme blocks of a linear pattern are the first and the last.
            acc.bounds_of(0, blocklen, old);
            acc.bounds_of((count as i128 - 1) * stride as i128, blocklen, old);
            acc.data(count as u128 * blocklen as u128, old);
        }
        let layout = Layout::Regular {
            count,
            blocklen,
            stride,
            old: old.clone(),
        };
        acc.finish(contents, layout)
    }

    /// `MPI_Type_contiguous`: `count` copies of `old`.
    pub fn contiguous(count: i64, old: &Datatype) -> Result<Datatype, TypeError> {
        let count = count_arg(count)?;
        let contents = Contents::Contiguous {
            count,
            old: old.clone(),
        };
        Datatype::regular(1, count, 0, old, contents)
    }

    /// `MPI_Type_vector`: `count` blocks of `blocklen` copies of `old`, block starts `stride`
    /// extents of `old` apart.
    pub fn vector(
        count: i64,
        blocklen: i64,
        stride: i64,
        old: &Datatype,
    ) -> Result<Datatype, TypeError> {
        let count = count_arg(count)?;
        let blocklen = blocklen_arg(blocklen)?;
        let bytes = to_isize(stride as i128 * old.extent() as i128)?;
        let contents = Contents::Vector {
            count,
            blocklen,
            stride,
            old: old.clone(),
        };
        Datatype::regular(count, blocklen, bytes, old, contents)
    }

    /// `MPI_Type_create_hvector`: like [`Datatype::vector`] with the stride in bytes.
    pub fn hvector(
        count: i64,
        blocklen: i64,
        stride: isize,
        old: &Datatype,
    ) -> Result<Datatype, TypeError> {
        let count = count_arg(count)?;
        let blocklen = blocklen_arg(blocklen)?;
        let contents = Contents::Hvector {
            count,
            blocklen,
            stride,
            old: old.clone(),
        };
        Datatype::regular(count, blocklen, stride, old, contents)
    }

    fn list(
        blocks: Vec<(isize, usize)>,
        old: &Datatype,
        contents: Contents,
    ) -> Result<Datatype, TypeError> {
        let mut acc = Acc::new(false);
        for &(d, b) in &blocks {
            acc.block(d as i128, b, old);
        }
        acc.finish(
            contents,
            Layout::List {
                blocks,
                old: old.clone(),
            },
        )
    }

    fn elem_displs(displs: &[i64], old: &Datatype) -> Result<Vec<isize>, TypeError> {
        let ext = old.extent() as i128;
        displs.iter().map(|&d| to_isize(d as i128 * ext)).collect()
    }

    /// `MPI_Type_indexed`: blocks of `blocklens[i]` copies of `old` at `displs[i]` extents of `old`.
    pub fn indexed(
        blocklens: &[i64],
        displs: &[i64],
        old: &Datatype,
    ) -> Result<Datatype, TypeError> {
        same_len(blocklens.len(), displs.len())?;
        let bl = blocklens_arg(blocklens)?;
        let bytes = Datatype::elem_displs(displs, old)?;
        let blocks = bytes.into_iter().zip(bl.iter().copied()).collect();
        let contents = Contents::Indexed {
            blocklens: bl,
            displs: displs.to_vec(),
            old: old.clone(),
        };
        Datatype::list(blocks, old, contents)
    }

    /// `MPI_Type_create_hindexed`: like [`Datatype::indexed`] with displacements in bytes.
    pub fn hindexed(
        blocklens: &[i64],
        displs: &[isize],
        old: &Datatype,
    ) -> Result<Datatype, TypeError> {
        same_len(blocklens.len(), displs.len())?;
        let bl = blocklens_arg(blocklens)?;
        let blocks = displs.iter().copied().zip(bl.iter().copied()).collect();
        let contents = Contents::Hindexed {
            blocklens: bl,
            displs: displs.to_vec(),
            old: old.clone(),
        };
        Datatype::list(blocks, old, contents)
    }

    /// `MPI_Type_create_indexed_block`: blocks of `blocklen` copies of `old` at `displs[i]` extents.
    pub fn indexed_block(
        blocklen: i64,
        displs: &[i64],
        old: &Datatype,
    ) -> Result<Datatype, TypeError> {
        let b = blocklen_arg(blocklen)?;
        let bytes = Datatype::elem_displs(displs, old)?;
        let blocks = bytes.into_iter().map(|d| (d, b)).collect();
        let contents = Contents::IndexedBlock {
            blocklen: b,
            displs: displs.to_vec(),
            old: old.clone(),
        };
        Datatype::list(blocks, old, contents)
    }

    /// `MPI_Type_create_hindexed_block`: like [`Datatype::indexed_block`] with byte displacements.
    pub fn hindexed_block(
        blocklen: i64,
        displs: &[isize],
        old: &Datatype,
    ) -> Result<Datatype, TypeError> {
        let b = blocklen_arg(blocklen)?;
        let blocks = displs.iter().map(|&d| (d, b)).collect();
        let contents = Contents::HindexedBlock {
            blocklen: b,
            displs: displs.to_vec(),
            old: old.clone(),
        };
        Datatype::list(blocks, old, contents)
    }

    /// `MPI_Type_create_struct`: blocks of `blocklens[i]` copies of `types[i]` at byte
    /// displacements `displs[i]`. Without explicit bounds in a component (from `resized`), the
    /// extent is padded to the strictest alignment of the components, as a C struct is.
    pub fn create_struct(
        blocklens: &[i64],
        displs: &[isize],
        types: &[Datatype],
    ) -> Result<Datatype, TypeError> {
        same_len(blocklens.len(), displs.len())?;
        same_len(blocklens.len(), types.len())?;
        let bl = blocklens_arg(blocklens)?;
        let mut acc = Acc::new(true);
        let mut blocks = Vec::with_capacity(bl.len());
        for ((&b, &d), t) in bl.iter().zip(displs).zip(types) {
            acc.block(d as i128, b, t);
            blocks.push((d, b, t.clone()));
        }
        let contents = Contents::Struct {
            blocklens: bl,
            displs: displs.to_vec(),
            types: types.to_vec(),
        };
        acc.finish(contents, Layout::Struct { blocks })
    }

    /// `MPI_Type_create_resized`: the data of `old` with lower bound `lb` and extent `extent`.
    pub fn resized(old: &Datatype, lb: isize, extent: isize) -> Result<Datatype, TypeError> {
        let ub = to_isize(lb as i128 + extent as i128)?;
        let o = &old.0;
        Ok(Datatype(Arc::new(Inner {
            contents: Contents::Resized {
                lb,
                extent,
                old: old.clone(),
            },
            layout: Layout::Alias(old.clone()),
            size: o.size,
            lb,
            ub,
            true_lb: o.true_lb,
            true_ub: o.true_ub,
            align: o.align,
            lb_marked: true,
            ub_marked: true,
            n_basic: o.n_basic,
            uniform: o.uniform,
            flat: OnceLock::new(),
        })))
    }

    /// `MPI_Type_dup`: a new type with the same type map.
    pub fn dup(old: &Datatype) -> Datatype {
        Datatype::alias(old, Contents::Dup(old.clone()))
    }

    /// The type `MPI_Type_create_f90_*` returns for `args` (see [`Contents::F90`]): the type
    /// map of the predefined `base`, its own envelope.
    pub fn f90(combiner: i32, args: Vec<i64>, base: Builtin) -> Datatype {
        let base = Datatype::builtin(base);
        Datatype::alias(
            &base,
            Contents::F90 {
                combiner,
                args,
                base: base.clone(),
            },
        )
    }

    /// Whether this type came from `MPI_Type_create_f90_*` (such a type is predefined: the
    /// program may not free it).
    pub fn is_f90(&self) -> bool {
        matches!(self.0.contents, Contents::F90 { .. })
    }

    /// A type with the type map of `old` and the envelope of `contents`.
    fn alias(old: &Datatype, contents: Contents) -> Datatype {
        let o = &old.0;
        Datatype(Arc::new(Inner {
            contents,
            layout: Layout::Alias(old.clone()),
            size: o.size,
            lb: o.lb,
            ub: o.ub,
            true_lb: o.true_lb,
            true_ub: o.true_ub,
            align: o.align,
            lb_marked: o.lb_marked,
            ub_marked: o.ub_marked,
            n_basic: o.n_basic,
            uniform: o.uniform,
            flat: OnceLock::new(),
        }))
    }

    /// `MPI_Type_create_subarray`: the `subsizes` block starting at `starts` of an array of
    /// `sizes` elements of `old` stored in `order`; lower bound 0 and the extent of the full array.
    pub fn subarray(
        sizes: &[i64],
        subsizes: &[i64],
        starts: &[i64],
        order: Order,
        old: &Datatype,
    ) -> Result<Datatype, TypeError> {
        same_len(sizes.len(), subsizes.len())?;
        same_len(sizes.len(), starts.len())?;
        if sizes.is_empty() {
            return Err(TypeError::InvalidSubarray("ndims must be positive"));
        }
        let mut sz = Vec::with_capacity(sizes.len());
        let mut sub = Vec::with_capacity(sizes.len());
        let mut st = Vec::with_capacity(sizes.len());
        for i in 0..sizes.len() {
            let (n, s, a) = (sizes[i], subsizes[i], starts[i]);
            if n < 1 {
                return Err(TypeError::InvalidSubarray("sizes must be positive"));
            }
            if s < 0 || s > n {
                return Err(TypeError::InvalidSubarray("subsizes must be in 0..=sizes"));
            }
            if a < 0 || a > n - s {
                return Err(TypeError::InvalidSubarray(
                    "starts + subsizes must not exceed sizes",
                ));
            }
            sz.push(n as usize);
            sub.push(s as usize);
            st.push(a as usize);
        }
        // Dimensions from the fastest-varying outwards.
        let dims: Vec<usize> = match order {
            Order::C => (0..sz.len()).rev().collect(),
            Order::Fortran => (0..sz.len()).collect(),
        };
        let ext = old.extent() as i128;
        let mut t = Datatype::contiguous(sub[dims[0]] as i64, old)?;
        // Bytes between consecutive indices of the current dimension.
        let mut stride = ext;
        let mut disp = st[dims[0]] as i128 * stride;
        let mut prev = dims[0];
        for &d in &dims[1..] {
            stride = stride
                .checked_mul(sz[prev] as i128)
                .ok_or(TypeError::Overflow)?;
            t = Datatype::hvector(sub[d] as i64, 1, to_isize(stride)?, &t)?;
            disp += st[d] as i128 * stride;
            prev = d;
        }
        let full = stride
            .checked_mul(sz[prev] as i128)
            .ok_or(TypeError::Overflow)?;
        let t = Datatype::hindexed(&[1], &[to_isize(disp)?], &t)?;
        let t = Datatype::resized(&t, 0, to_isize(full)?)?;
        let contents = Contents::Subarray {
            sizes: sz,
            subsizes: sub,
            starts: st,
            order,
            old: old.clone(),
        };
        Ok(t.renamed(contents))
    }

    /// The same type map as `self`, recorded as made by `contents` (for constructors the standard
    /// defines through other constructors).
    fn renamed(self, contents: Contents) -> Datatype {
        Datatype::alias(&self, contents)
    }

    /// `MPI_Type_create_darray`: the part of a `gsizes` array of `old`, stored in `order`, that
    /// process `rank` of a `psizes` process grid (row-major ranks, `size` processes) owns under
    /// the distributions `distribs`. Lower bound 0, extent of the full array.
    pub fn darray(
        size: i64,
        rank: i64,
        gsizes: &[i64],
        distribs: &[Distrib],
        psizes: &[i64],
        order: Order,
        old: &Datatype,
    ) -> Result<Datatype, TypeError> {
        let nd = gsizes.len();
        same_len(nd, distribs.len())?;
        same_len(nd, psizes.len())?;
        if nd == 0 {
            return Err(TypeError::InvalidDarray("ndims must be positive"));
        }
        if gsizes.iter().chain(psizes).any(|&g| g < 1) {
            return Err(TypeError::InvalidDarray(
                "gsizes and psizes must be positive",
            ));
        }
        let grid = psizes.iter().try_fold(1i64, |a, &p| a.checked_mul(p));
        if grid != Some(size) {
            return Err(TypeError::InvalidDarray(
                "the product of psizes must equal size",
            ));
        }
        if rank < 0 || rank >= size {
            return Err(TypeError::InvalidDarray("rank out of range"));
        }
        // Process coordinates: ranks are row-major in the grid whatever the array order.
        let mut coords = vec![0i64; nd];
        let mut r = rank;
        for i in (0..nd).rev() {
            coords[i] = r % psizes[i];
            r /= psizes[i];
        }
        let dims: Vec<usize> = match order {
            Order::C => (0..nd).rev().collect(),
            Order::Fortran => (0..nd).collect(),
        };
        let mut t = old.clone();
        for &d in &dims {
            let (g, p, c) = (gsizes[d], psizes[d], coords[d]);
            // Owned index ranges of this dimension as (start, len).
            let mut blocks: Vec<(i64, i64)> = Vec::new();
            match distribs[d] {
                Distrib::None => {
                    if p != 1 {
                        return Err(TypeError::InvalidDarray(
                            "MPI_DISTRIBUTE_NONE needs psizes 1",
                        ));
                    }
                    blocks.push((0, g));
                }
                Distrib::Block(darg) => {
                    let b = match darg {
                        Some(b) if b < 1 || b.checked_mul(p).is_none_or(|n| n < g) => {
                            return Err(TypeError::InvalidDarray(
                                "block distribution argument too small",
                            ))
                        }
                        Some(b) => b,
                        None => (g + p - 1) / p,
                    };
                    let start = (c * b).min(g);
                    blocks.push((start, (g - start).min(b)));
                }
                Distrib::Cyclic(darg) => {
                    let b = darg.unwrap_or(1);
                    if b < 1 {
                        return Err(TypeError::InvalidDarray(
                            "cyclic distribution argument must be positive",
                        ));
                    }
                    let mut start = c * b;
                    while start < g {
                        blocks.push((start, (g - start).min(b)));
                        start = match start.checked_add(p * b) {
                            Some(s) => s,
                            None => break,
                        };
                    }
                }
            }
            let ext = t.extent() as i128;
            let lens: Vec<i64> = blocks.iter().map(|b| b.1).collect();
            let displs = blocks
                .iter()
                .map(|b| to_isize(b.0 as i128 * ext))
                .collect::<Result<Vec<_>, _>>()?;
            let full = to_isize(g as i128 * ext)?;
            t = Datatype::resized(&Datatype::hindexed(&lens, &displs, &t)?, 0, full)?;
        }
        let contents = Contents::Darray {
            size: size as usize,
            rank: rank as usize,
            gsizes: gsizes.iter().map(|&g| g as usize).collect(),
            distribs: distribs.to_vec(),
            psizes: psizes.iter().map(|&p| p as usize).collect(),
            order,
            old: old.clone(),
        };
        Ok(t.renamed(contents))
    }
}

/// One dimension's distribution for [`Datatype::darray`]; `None` arguments mean
/// `MPI_DISTRIBUTE_DFLT_DARG`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distrib {
    /// `MPI_DISTRIBUTE_NONE`: the whole dimension.
    None,
    /// `MPI_DISTRIBUTE_BLOCK` with the block size (default: `ceil(gsize / psize)`).
    Block(Option<i64>),
    /// `MPI_DISTRIBUTE_CYCLIC` with the block size (default 1).
    Cyclic(Option<i64>),
}

impl Distrib {
    /// `MPI_DISTRIBUTE_NONE` in the standard ABI.
    pub const MPI_DISTRIBUTE_NONE: i32 = 16;
    /// `MPI_DISTRIBUTE_BLOCK` in the standard ABI.
    pub const MPI_DISTRIBUTE_BLOCK: i32 = 17;
    /// `MPI_DISTRIBUTE_CYCLIC` in the standard ABI.
    pub const MPI_DISTRIBUTE_CYCLIC: i32 = 18;
    /// `MPI_DISTRIBUTE_DFLT_DARG` in the standard ABI.
    pub const MPI_DISTRIBUTE_DFLT_DARG: i32 = 19;

    /// The distribution named by ABI constants (`distrib`, `darg`).
    pub fn from_abi(distrib: i32, darg: i32) -> Option<Distrib> {
        let arg = (darg != Self::MPI_DISTRIBUTE_DFLT_DARG).then_some(darg as i64);
        match distrib {
            Self::MPI_DISTRIBUTE_NONE => Some(Distrib::None),
            Self::MPI_DISTRIBUTE_BLOCK => Some(Distrib::Block(arg)),
            Self::MPI_DISTRIBUTE_CYCLIC => Some(Distrib::Cyclic(arg)),
            _ => None,
        }
    }

    /// The ABI constants (`distrib`, `darg`).
    pub fn to_abi(self) -> (i32, i32) {
        let arg = |a: Option<i64>| a.map_or(Self::MPI_DISTRIBUTE_DFLT_DARG, |v| v as i32);
        match self {
            Distrib::None => (Self::MPI_DISTRIBUTE_NONE, Self::MPI_DISTRIBUTE_DFLT_DARG),
            Distrib::Block(a) => (Self::MPI_DISTRIBUTE_BLOCK, arg(a)),
            Distrib::Cyclic(a) => (Self::MPI_DISTRIBUTE_CYCLIC, arg(a)),
        }
    }
}

/// Bodies with at most this many segments are expanded in place when repeated; longer ones are
/// shared through a [`Seg::Rep`].
const EXPAND_LIMIT: usize = 64;

/// Appends `r`, merging it with the previous run where the two describe one longer or strided run.
fn push_run(out: &mut Vec<Seg>, mut r: Run) {
    if r.len == 0 || r.reps == 0 {
        return;
    }
    if r.reps == 1 {
        r.stride = 0;
    } else if r.stride == r.len as isize {
        r = Run {
            off: r.off,
            len: r.len * r.reps,
            reps: 1,
            stride: 0,
        };
    }
    if let Some(Seg::Run(last)) = out.last_mut() {
        if last.reps == 1 && r.reps == 1 {
            if last.off + last.len as isize == r.off {
                last.len += r.len;
                return;
            }
            if last.len == r.len {
                last.stride = r.off - last.off;
                last.reps = 2;
                return;
            }
        } else if last.reps >= 2
            && last.len == r.len
            && r.off == last.off + last.reps as isize * last.stride
            && (r.reps == 1 || r.stride == last.stride)
        {
            last.reps += r.reps;
            return;
        }
    }
    out.push(Seg::Run(r));
}

fn push_seg(out: &mut Vec<Seg>, s: &Seg, shift: isize) {
    match s {
        Seg::Run(r) => push_run(
            out,
            Run {
                off: r.off + shift,
                ..*r
            },
        ),
        Seg::Rep {
            off,
            count,
            stride,
            body,
            body_bytes,
        } => out.push(Seg::Rep {
            off: off + shift,
            count: *count,
            stride: *stride,
            body: body.clone(),
            body_bytes: *body_bytes,
        }),
    }
}

/// Appends `n` copies of `child`, the i-th shifted by `base + i * stride`.
fn repeat(out: &mut Vec<Seg>, child: &Arc<[Seg]>, n: usize, stride: isize, base: isize) {
    if n == 0 || child.is_empty() {
        return;
    }
    if let [Seg::Run(r)] = &child[..] {
        if r.reps == 1 {
            push_run(
                out,
                Run {
                    off: base + r.off,
                    len: r.len,
                    reps: n,
                    stride,
                },
            );
            return;
        }
        if r.stride.checked_mul(r.reps as isize) == Some(stride) {
            push_run(
                out,
                Run {
                    off: base + r.off,
                    len: r.len,
                    reps: r.reps * n,
                    stride: r.stride,
                },
            );
            return;
        }
    }
    if n == 1 || child.len().saturating_mul(n) <= EXPAND_LIMIT {
        for i in 0..n {
            let shift = base + i as isize * stride;
            for s in child.iter() {
                push_seg(out, s, shift);
            }
        }
    } else {
        let body_bytes = child.iter().map(Seg::bytes).sum();
        out.push(Seg::Rep {
            off: base,
            count: n,
            stride,
            body: child.clone(),
            body_bytes,
        });
    }
}

/// Walks packed bytes `[skip, skip + limit)` of the segments placed at `base`, calling
/// `f(buffer offset, packed offset, len)` for each contiguous piece. `skip` and `limit` are consumed.
struct Walk<'a, F: FnMut(isize, usize, usize)> {
    skip: usize,
    limit: usize,
    pos: usize,
    f: &'a mut F,
}

impl<F: FnMut(isize, usize, usize)> Walk<'_, F> {
    fn segs(&mut self, segs: &[Seg], base: isize) {
        for s in segs {
            if self.limit == 0 {
                return;
            }
            let bytes = s.bytes();
            if self.skip >= bytes {
                self.skip -= bytes;
                continue;
            }
            match s {
                Seg::Run(r) if self.skip == 0 && bytes <= self.limit => {
                    // Whole run: the common case, without the divisions of a partial start.
                    let start = base + r.off;
                    for k in 0..r.reps {
                        (self.f)(start + k as isize * r.stride, self.pos + k * r.len, r.len);
                    }
                    self.pos += bytes;
                    self.limit -= bytes;
                }
                Seg::Run(r) => {
                    let mut k = self.skip / r.len;
                    let mut within = self.skip % r.len;
                    self.skip = 0;
                    while k < r.reps && self.limit > 0 {
                        let n = (r.len - within).min(self.limit);
                        (self.f)(
                            base + r.off + k as isize * r.stride + within as isize,
                            self.pos,
                            n,
                        );
                        self.pos += n;
                        self.limit -= n;
                        within = 0;
                        k += 1;
                    }
                }
                Seg::Rep {
                    off,
                    count,
                    stride,
                    body,
                    body_bytes,
                } => {
                    if self.skip == 0
                        && bytes <= self.limit
                        && body.iter().all(|b| matches!(b, Seg::Run(_)))
                    {
                        // Whole repetition of plain runs: two tight loops, no recursion.
                        for k in 0..*count {
                            let at = base + off + k as isize * stride;
                            for b in body.iter() {
                                if let Seg::Run(r) = b {
                                    for j in 0..r.reps {
                                        (self.f)(
                                            at + r.off + j as isize * r.stride,
                                            self.pos,
                                            r.len,
                                        );
                                        self.pos += r.len;
                                    }
                                }
                            }
                        }
                        self.limit -= bytes;
                        continue;
                    }
                    let mut k = 0;
                    if self.skip > 0 {
                        k = self.skip / body_bytes;
                        self.skip %= body_bytes;
                    }
                    while k < *count && self.limit > 0 {
                        self.segs(body, base + off + k as isize * stride);
                        k += 1;
                    }
                }
            }
        }
    }
}

/// Copies `len` bytes; small fixed sizes avoid a `memcpy` call per block.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, and they must not overlap.
#[inline(always)]
unsafe fn copy_block(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller guarantees both ranges; unaligned accesses are used throughout.
    unsafe {
        match len {
            4 => dst
                .cast::<u32>()
                .write_unaligned(src.cast::<u32>().read_unaligned()),
            8 => dst
                .cast::<u64>()
                .write_unaligned(src.cast::<u64>().read_unaligned()),
            16 => dst
                .cast::<u128>()
                .write_unaligned(src.cast::<u128>().read_unaligned()),
            _ => std::ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

impl Datatype {
    fn flat(&self) -> &Arc<[Seg]> {
        self.0.flat.get_or_init(|| self.flatten())
    }

    fn flatten(&self) -> Arc<[Seg]> {
        let mut out = Vec::new();
        match &self.0.layout {
            Layout::Builtin(b) => {
                let (m, n) = b.members();
                for &(o, l) in &m[..n] {
                    push_run(
                        &mut out,
                        Run {
                            off: o as isize,
                            len: l,
                            reps: 1,
                            stride: 0,
                        },
                    );
                }
            }
            Layout::Regular {
                count,
                blocklen,
                stride,
                old,
            } => {
                let mut block = Vec::new();
                repeat(&mut block, old.flat(), *blocklen, old.extent(), 0);
                repeat(&mut out, &Arc::from(block), *count, *stride, 0);
            }
            Layout::List { blocks, old } => {
                for &(d, b) in blocks {
                    repeat(&mut out, old.flat(), b, old.extent(), d);
                }
            }
            Layout::Struct { blocks } => {
                for (d, b, t) in blocks {
                    repeat(&mut out, t.flat(), *b, t.extent(), *d);
                }
            }
            Layout::Alias(old) => return old.flat().clone(),
        }
        Arc::from(out)
    }

    /// `MPI_Type_commit`: builds the flattened form now rather than on first use.
    pub fn commit(&self) {
        self.flat();
    }

    /// The predefined type this is, if it is one (not a dup or resized copy of one).
    pub fn as_builtin(&self) -> Option<Builtin> {
        match self.0.contents {
            Contents::Named(b) => Some(b),
            _ => None,
        }
    }

    /// Whether `self` and `other` are the same datatype object (clones of one handle).
    pub fn ptr_eq(&self, other: &Datatype) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// `MPI_Type_size`: bytes of data in one element.
    pub fn size(&self) -> usize {
        self.0.size
    }

    /// Lower bound (`MPI_Type_get_extent`).
    pub fn lb(&self) -> isize {
        self.0.lb
    }

    /// Upper bound: `lb + extent`.
    pub fn ub(&self) -> isize {
        self.0.ub
    }

    /// Extent: the stride between consecutive elements of a buffer of this type (may be negative
    /// or zero after `resized`).
    pub fn extent(&self) -> isize {
        self.0.ub - self.0.lb
    }

    /// `MPI_Type_get_true_extent` lower bound: the lowest byte of data (0 for a type without data).
    pub fn true_lb(&self) -> isize {
        self.0.true_lb
    }

    /// One past the highest byte of data.
    pub fn true_ub(&self) -> isize {
        self.0.true_ub
    }

    /// `MPI_Type_get_true_extent` extent: `true_ub - true_lb`.
    pub fn true_extent(&self) -> isize {
        self.0.true_ub - self.0.true_lb
    }

    /// Strictest alignment of the basic types in this type.
    pub fn align(&self) -> usize {
        self.0.align
    }

    /// Whether elements of this type, one after the other, form one gap-free block of
    /// `size * count` bytes for any count (so a buffer can be sent without packing).
    pub fn is_contiguous(&self) -> bool {
        match &self.flat()[..] {
            [] => true,
            [Seg::Run(r)] => r.reps == 1 && r.len as isize == self.extent(),
            _ => false,
        }
    }

    /// Where `count` elements form one gap-free block of `size * count` bytes: its offset from the
    /// buffer address (`Some(0)` when there is no data).
    pub fn contiguous_span(&self, count: usize) -> Option<isize> {
        if count == 0 || self.size() == 0 {
            return Some(0);
        }
        match &self.flat()[..] {
            [Seg::Run(r)] if r.reps == 1 && (count == 1 || r.len as isize == self.extent()) => {
                Some(r.off)
            }
            _ => None,
        }
    }

    /// The contiguous blocks of one element as (byte offset from the buffer address, length), in
    /// type-map (packing) order, adjacent blocks merged.
    pub fn blocks(&self) -> Vec<(isize, usize)> {
        let mut v = Vec::new();
        self.for_each_block(1, 0, usize::MAX, |off, _, len| v.push((off, len)));
        v
    }

    /// Calls `f(buffer offset, packed offset, len)` for every contiguous piece of packed bytes
    /// `[skip, skip + limit)` of `count` elements, in order (the last piece may stop mid-block).
    pub fn for_each_block(
        &self,
        count: usize,
        skip: usize,
        limit: usize,
        mut f: impl FnMut(isize, usize, usize),
    ) {
        let size = self.size();
        let total = size.saturating_mul(count);
        if size == 0 || skip >= total {
            return;
        }
        let limit = limit.min(total - skip);
        let flat = self.flat().clone();
        let ext = self.extent();
        let mut w = Walk {
            skip: skip % size,
            limit,
            pos: skip,
            f: &mut f,
        };
        let mut i = skip / size;
        while w.limit > 0 && i < count {
            w.segs(&flat, (i as isize).wrapping_mul(ext));
            i += 1;
        }
    }

    /// Packs `count` elements read at `src` into `dst` (`MPI_Pack` order). `dst` must hold
    /// `size * count` bytes; if shorter, only its length is packed.
    ///
    /// # Safety
    /// `src` must be valid for reads at every byte of the type map of `count` elements.
    pub unsafe fn pack(&self, src: *const u8, count: usize, dst: &mut [u8]) {
        // SAFETY: forwarded contract.
        unsafe { self.pack_partial(src, count, 0, dst) };
    }

    /// Packs the bytes `[offset, offset + dst.len())` of the packed form of `count` elements at
    /// `src` (for pipelined sends and `MPI_Pack` into the middle of a buffer). Returns the number of
    /// bytes written (less than `dst.len()` at the end of the data).
    ///
    /// # Safety
    /// `src` must be valid for reads at every byte of the type map of `count` elements.
    pub unsafe fn pack_partial(
        &self,
        src: *const u8,
        count: usize,
        offset: usize,
        dst: &mut [u8],
    ) -> usize {
        let total = self.size().saturating_mul(count);
        let n = dst.len().min(total.saturating_sub(offset));
        if let Some(start) = self.contiguous_span(count) {
            // SAFETY: count elements are one block at src + start; the caller vouches for it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.offset(start + offset as isize),
                    dst.as_mut_ptr(),
                    n,
                );
            }
            return n;
        }
        let d = dst.as_mut_ptr();
        self.for_each_block(count, offset, n, |off, pos, len| {
            // SAFETY: `off` is in the type map (caller's contract); `pos - offset + len <= n`.
            unsafe { copy_block(src.offset(off), d.add(pos - offset), len) }
        });
        n
    }

    /// Unpacks `src` into `count` elements at `dst`. A short `src` (a short message) fills the type
    /// map in order and stops where the data ends, possibly mid-element.
    ///
    /// # Safety
    /// `dst` must be valid for writes at every byte of the type map of `count` elements.
    pub unsafe fn unpack(&self, src: &[u8], count: usize, dst: *mut u8) {
        // SAFETY: forwarded contract.
        unsafe { self.unpack_partial(src, count, 0, dst) };
    }

    /// Unpacks `src` as the bytes `[offset, offset + src.len())` of the packed form of `count`
    /// elements at `dst`. Returns the number of bytes consumed.
    ///
    /// # Safety
    /// `dst` must be valid for writes at every byte of the type map of `count` elements.
    pub unsafe fn unpack_partial(
        &self,
        src: &[u8],
        count: usize,
        offset: usize,
        dst: *mut u8,
    ) -> usize {
        let total = self.size().saturating_mul(count);
        let n = src.len().min(total.saturating_sub(offset));
        if let Some(start) = self.contiguous_span(count) {
            // SAFETY: count elements are one block at dst + start; the caller vouches for it.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), dst.offset(start + offset as isize), n);
            }
            return n;
        }
        let s = src.as_ptr();
        self.for_each_block(count, offset, n, |off, pos, len| {
            // SAFETY: `off` is in the type map (caller's contract); `pos - offset + len <= n`.
            unsafe { copy_block(s.add(pos - offset), dst.offset(off), len) }
        });
        n
    }

    /// `MPI_Get_count`: whole elements in `bytes` of data; `None` (`MPI_UNDEFINED`) if `bytes`
    /// is not a multiple of the size.
    pub fn count_of(&self, bytes: usize) -> Option<usize> {
        let size = self.size();
        if size == 0 {
            // MPICH reports 0 for an empty message of an empty type.
            return (bytes == 0).then_some(0);
        }
        bytes.is_multiple_of(size).then_some(bytes / size)
    }

    /// `MPI_Get_elements`: basic elements (pair types count their two members) wholly contained in
    /// the first `bytes` bytes of data.
    pub fn elements_of(&self, bytes: usize) -> usize {
        let size = self.size();
        if size == 0 {
            return 0;
        }
        (bytes / size) * self.0.n_basic + self.partial_elements(bytes % size)
    }

    /// Basic elements wholly within the first `rem` (< size) bytes of one element.
    fn partial_elements(&self, mut rem: usize) -> usize {
        fn copies(old: &Datatype, n: usize, rem: &mut usize, acc: &mut usize) -> bool {
            let s = old.size();
            if s == 0 || n == 0 {
                return false;
            }
            let k = (*rem / s).min(n);
            *acc += k * old.0.n_basic;
            *rem -= k * s;
            if k < n {
                *acc += old.partial_elements(*rem);
                return true;
            }
            false
        }
        let mut acc = 0;
        match &self.0.layout {
            Layout::Builtin(b) => {
                let (m, n) = b.members();
                let mut packed = 0;
                for &(_, l) in &m[..n] {
                    packed += l;
                    if packed <= rem {
                        acc += 1;
                    }
                }
            }
            Layout::Regular {
                count,
                blocklen,
                old,
                ..
            } => {
                copies(old, count.saturating_mul(*blocklen), &mut rem, &mut acc);
            }
            Layout::List { blocks, old } => {
                for &(_, b) in blocks {
                    if copies(old, b, &mut rem, &mut acc) {
                        break;
                    }
                }
            }
            Layout::Struct { blocks } => {
                for (_, b, t) in blocks {
                    if copies(t, *b, &mut rem, &mut acc) {
                        break;
                    }
                }
            }
            Layout::Alias(old) => acc = old.partial_elements(rem),
        }
        acc
    }

    /// Calls `f` with the predefined type of every basic element of one element, in `MPI_Pack`
    /// order (a pair type is one call). The external32 representation converts by this.
    pub fn for_each_builtin(&self, f: &mut dyn FnMut(Builtin)) {
        if let Some((b, n)) = self.0.uniform {
            (0..n).for_each(|_| f(b));
            return;
        }
        match &self.0.layout {
            Layout::Builtin(b) => f(*b),
            Layout::Regular {
                count,
                blocklen,
                old,
                ..
            } => (0..count.saturating_mul(*blocklen)).for_each(|_| old.for_each_builtin(f)),
            Layout::List { blocks, old } => {
                for &(_, b) in blocks {
                    (0..b).for_each(|_| old.for_each_builtin(f));
                }
            }
            Layout::Struct { blocks } => {
                for (_, b, t) in blocks {
                    (0..*b).for_each(|_| t.for_each_builtin(f));
                }
            }
            Layout::Alias(old) => old.for_each_builtin(f),
        }
    }

    /// The same constructor tree with every predefined type `b` replaced by `sub(b)`: how a view's
    /// etype and filetype look in a file whose data representation stores `b` in other sizes
    /// (MPI-4.1 §14.5: displacements counted in elements of an old type scale with it; those
    /// given in bytes — hvector, hindexed, struct, resized bounds — stay as they are).
    pub fn map_builtins<E: From<TypeError>>(
        &self,
        sub: &mut dyn FnMut(Builtin) -> Result<Datatype, E>,
    ) -> Result<Datatype, E> {
        let i64s = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<i64>>();
        Ok(match &self.0.contents {
            Contents::Named(b) => sub(*b)?,
            // A bound marker holds no data; an F90 type is its predefined base.
            Contents::Marker(_) => self.clone(),
            Contents::F90 { base, .. } => base.map_builtins(sub)?,
            Contents::Dup(old) => Datatype::dup(&old.map_builtins(sub)?),
            Contents::Contiguous { count, old } => {
                Datatype::contiguous(*count as i64, &old.map_builtins(sub)?)?
            }
            Contents::Vector {
                count,
                blocklen,
                stride,
                old,
            } => Datatype::vector(
                *count as i64,
                *blocklen as i64,
                *stride,
                &old.map_builtins(sub)?,
            )?,
            Contents::Hvector {
                count,
                blocklen,
                stride,
                old,
            } => Datatype::hvector(
                *count as i64,
                *blocklen as i64,
                *stride,
                &old.map_builtins(sub)?,
            )?,
            Contents::Indexed {
                blocklens,
                displs,
                old,
            } => Datatype::indexed(&i64s(blocklens), displs, &old.map_builtins(sub)?)?,
            Contents::Hindexed {
                blocklens,
                displs,
                old,
            } => Datatype::hindexed(&i64s(blocklens), displs, &old.map_builtins(sub)?)?,
            Contents::IndexedBlock {
                blocklen,
                displs,
                old,
            } => Datatype::indexed_block(*blocklen as i64, displs, &old.map_builtins(sub)?)?,
            Contents::HindexedBlock {
                blocklen,
                displs,
                old,
            } => Datatype::hindexed_block(*blocklen as i64, displs, &old.map_builtins(sub)?)?,
            Contents::Struct {
                blocklens,
                displs,
                types,
            } => {
                let types = types
                    .iter()
                    .map(|t| t.map_builtins(sub))
                    .collect::<Result<Vec<_>, E>>()?;
                Datatype::create_struct(&i64s(blocklens), displs, &types)?
            }
            Contents::Subarray {
                sizes,
                subsizes,
                starts,
                order,
                old,
            } => Datatype::subarray(
                &i64s(sizes),
                &i64s(subsizes),
                &i64s(starts),
                *order,
                &old.map_builtins(sub)?,
            )?,
            Contents::Darray {
                size,
                rank,
                gsizes,
                distribs,
                psizes,
                order,
                old,
            } => Datatype::darray(
                *size as i64,
                *rank as i64,
                &i64s(gsizes),
                distribs,
                &i64s(psizes),
                *order,
                &old.map_builtins(sub)?,
            )?,
            Contents::Resized { lb, extent, old } => {
                Datatype::resized(&old.map_builtins(sub)?, *lb, *extent)?
            }
        })
    }

    /// When every basic element of this type is the same predefined type: that type and how many
    /// of it one element holds (e.g. `(MPI_INT, 4)` for `contiguous(4, MPI_INT)`). Reductions on
    /// derived types use this.
    pub fn uniform_builtin(&self) -> Option<(Builtin, usize)> {
        self.0.uniform
    }

    /// The constructor and arguments this type was made with.
    pub fn contents_ref(&self) -> &Contents {
        &self.0.contents
    }

    /// `MPI_Type_get_envelope`.
    pub fn envelope(&self) -> Envelope {
        let (ni, na, nd, c) = match &self.0.contents {
            Contents::Named(_) | Contents::Marker(_) => (0, 0, 0, combiner::NAMED),
            Contents::Dup(_) => (0, 0, 1, combiner::DUP),
            Contents::Contiguous { .. } => (1, 0, 1, combiner::CONTIGUOUS),
            Contents::Vector { .. } => (3, 0, 1, combiner::VECTOR),
            Contents::Hvector { .. } => (2, 1, 1, combiner::HVECTOR),
            Contents::Indexed { blocklens, .. } => {
                (2 * blocklens.len() + 1, 0, 1, combiner::INDEXED)
            }
            Contents::Hindexed { blocklens, .. } => {
                (blocklens.len() + 1, blocklens.len(), 1, combiner::HINDEXED)
            }
            Contents::IndexedBlock { displs, .. } => {
                (displs.len() + 2, 0, 1, combiner::INDEXED_BLOCK)
            }
            Contents::HindexedBlock { displs, .. } => {
                (2, displs.len(), 1, combiner::HINDEXED_BLOCK)
            }
            Contents::Struct { types, .. } => {
                (types.len() + 1, types.len(), types.len(), combiner::STRUCT)
            }
            Contents::Subarray { sizes, .. } => (3 * sizes.len() + 2, 0, 1, combiner::SUBARRAY),
            Contents::Darray { gsizes, .. } => (4 * gsizes.len() + 4, 0, 1, combiner::DARRAY),
            Contents::Resized { .. } => (0, 2, 1, combiner::RESIZED),
            Contents::F90 { combiner, args, .. } => (args.len(), 0, 0, *combiner),
        };
        Envelope {
            num_integers: ni,
            num_addresses: na,
            num_large_counts: 0,
            num_datatypes: nd,
            combiner: c,
        }
    }

    /// `MPI_Type_get_envelope_c`: the large-count layout (see [`TypeContents::into_large`]) when
    /// a count does not fit an `int`, else the same as [`Datatype::envelope`].
    pub fn envelope_c(&self) -> Envelope {
        let e = self.envelope();
        let c = self.contents();
        if !c.needs_large_counts() {
            return e;
        }
        let c = c.into_large(e.combiner);
        Envelope {
            num_integers: c.integers.len(),
            num_addresses: c.addresses.len(),
            num_large_counts: c.large_counts.len(),
            ..e
        }
    }

    /// `MPI_Type_get_contents_c`: [`Datatype::contents`], in the large-count layout when a count
    /// does not fit an `int`.
    pub fn contents_c(&self) -> TypeContents {
        let c = self.contents();
        if c.needs_large_counts() {
            c.into_large(self.envelope().combiner)
        } else {
            c
        }
    }

    /// `MPI_Type_get_contents` (empty for a predefined type, which MPI makes an error to ask).
    pub fn contents(&self) -> TypeContents {
        let mut c = TypeContents::default();
        let ints = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        match &self.0.contents {
            Contents::Named(_) | Contents::Marker(_) => {}
            Contents::Dup(old) => c.datatypes.push(old.clone()),
            Contents::Contiguous { count, old } => {
                c.integers.push(*count as i64);
                c.datatypes.push(old.clone());
            }
            Contents::Vector {
                count,
                blocklen,
                stride,
                old,
            } => {
                c.integers = vec![*count as i64, *blocklen as i64, *stride];
                c.datatypes.push(old.clone());
            }
            Contents::Hvector {
                count,
                blocklen,
                stride,
                old,
            } => {
                c.integers = vec![*count as i64, *blocklen as i64];
                c.addresses.push(*stride);
                c.datatypes.push(old.clone());
            }
            Contents::Indexed {
                blocklens,
                displs,
                old,
            } => {
                c.integers.push(blocklens.len() as i64);
                c.integers.extend(ints(blocklens));
                c.integers.extend_from_slice(displs);
                c.datatypes.push(old.clone());
            }
            Contents::Hindexed {
                blocklens,
                displs,
                old,
            } => {
                c.integers.push(blocklens.len() as i64);
                c.integers.extend(ints(blocklens));
                c.addresses = displs.clone();
                c.datatypes.push(old.clone());
            }
            Contents::IndexedBlock {
                blocklen,
                displs,
                old,
            } => {
                c.integers = vec![displs.len() as i64, *blocklen as i64];
                c.integers.extend_from_slice(displs);
                c.datatypes.push(old.clone());
            }
            Contents::HindexedBlock {
                blocklen,
                displs,
                old,
            } => {
                c.integers = vec![displs.len() as i64, *blocklen as i64];
                c.addresses = displs.clone();
                c.datatypes.push(old.clone());
            }
            Contents::Struct {
                blocklens,
                displs,
                types,
            } => {
                c.integers.push(blocklens.len() as i64);
                c.integers.extend(ints(blocklens));
                c.addresses = displs.clone();
                c.datatypes = types.clone();
            }
            Contents::Subarray {
                sizes,
                subsizes,
                starts,
                order,
                old,
            } => {
                c.integers.push(sizes.len() as i64);
                c.integers.extend(ints(sizes));
                c.integers.extend(ints(subsizes));
                c.integers.extend(ints(starts));
                c.integers.push(order.to_abi() as i64);
                c.datatypes.push(old.clone());
            }
            Contents::Darray {
                size,
                rank,
                gsizes,
                distribs,
                psizes,
                order,
                old,
            } => {
                c.integers = vec![*size as i64, *rank as i64, gsizes.len() as i64];
                c.integers.extend(ints(gsizes));
                c.integers
                    .extend(distribs.iter().map(|d| d.to_abi().0 as i64));
                c.integers
                    .extend(distribs.iter().map(|d| d.to_abi().1 as i64));
                c.integers.extend(ints(psizes));
                c.integers.push(order.to_abi() as i64);
                c.datatypes.push(old.clone());
            }
            Contents::Resized { lb, extent, old } => {
                c.addresses = vec![*lb, *extent];
                c.datatypes.push(old.clone());
            }
            Contents::F90 { args, .. } => c.integers = args.clone(),
        }
        c
    }
}

/// The predefined type whose ABI handle is `h` (same as [`Builtin::from_handle`]).
pub fn builtin_from_handle(h: usize) -> Option<Builtin> {
    Builtin::from_handle(h)
}

/// The first handle of the standard ABI's predefined types (they all lie below `0x300`).
const FIRST_BUILTIN: usize = 0x200;

/// [`Builtin::from_handle`] and [`Builtin::dense_size`] of every handle from
/// [`FIRST_BUILTIN`] on, worked out at compile time: the lean paths of the commonest calls ask
/// both for every message, and one indexed load costs less than the matches.
const DENSE_BUILTINS: [Option<(Builtin, usize)>; 256] = {
    let mut table = [None; 256];
    let mut i = 0;
    while i < table.len() {
        if let Some(ty) = Builtin::from_handle(FIRST_BUILTIN + i) {
            if let Some(size) = ty.dense_size() {
                table[i] = Some((ty, size));
            }
        }
        i += 1;
    }
    table
};

/// The predefined type of handle `h` with its size, when its values lie back to back
/// (`from_handle` then `dense_size`); `None` for any other handle and for padded pair types.
#[inline]
pub(crate) fn dense_builtin(h: usize) -> Option<(Builtin, usize)> {
    DENSE_BUILTINS
        .get(h.wrapping_sub(FIRST_BUILTIN))
        .copied()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dense_table_agrees_with_the_matches() {
        for h in 0..0x1000 {
            let by_match = Builtin::from_handle(h).and_then(|ty| Some((ty, ty.dense_size()?)));
            assert_eq!(dense_builtin(h), by_match, "handle {h:#x}");
        }
        assert_eq!(dense_builtin(usize::MAX), None);
    }

    #[test]
    fn lb_and_ub_markers_set_only_their_own_bound() {
        let int = Datatype::builtin(Builtin::Int);
        let (lb, ub) = (Datatype::marker(Marker::Lb), Datatype::marker(Marker::Ub));
        // { (LB,-4), (int,0), (int,4), (UB,20) }: bounds -4 and 20, no alignment padding.
        let t = Datatype::create_struct(
            &[1, 2, 1],
            &[-4, 0, 20],
            &[lb.clone(), int.clone(), ub.clone()],
        )
        .expect("struct");
        assert_eq!((t.lb(), t.ub(), t.size()), (-4, 20, 8));
        assert_eq!((t.true_lb(), t.true_ub()), (0, 8));
        // Only an upper marker: the lower bound is the data's.
        let t =
            Datatype::create_struct(&[1, 1], &[2, 9], &[int.clone(), ub.clone()]).expect("struct");
        assert_eq!((t.lb(), t.ub()), (2, 9));
        // Markers only: { (LB,10) } has upper bound 0, extent -10.
        let t = Datatype::create_struct(&[1], &[10], std::slice::from_ref(&lb)).expect("struct");
        assert_eq!((t.lb(), t.extent(), t.size()), (10, -10, 0));
        // Marks carry through a derived type: the extreme marked bounds of the copies.
        let s = Datatype::create_struct(&[1, 1], &[0, 12], &[int.clone(), ub]).expect("struct");
        let v = Datatype::contiguous(3, &s).expect("contiguous");
        assert_eq!((v.lb(), v.ub(), v.size()), (0, 36, 12));
        assert_eq!(Marker::from_handle(0x2fe), Some(Marker::Lb));
        assert_eq!(lb.envelope().combiner, combiner::NAMED);
    }

    fn ints(bytes: &[u8]) -> Vec<i32> {
        bytes
            .chunks_exact(4)
            .map(bytemuck::pod_read_unaligned)
            .collect()
    }

    fn b(t: Builtin) -> Datatype {
        Datatype::builtin(t)
    }

    /// (size, lb, ub, true_lb, true_ub)
    fn metrics(t: &Datatype) -> (usize, isize, isize, isize, isize) {
        (t.size(), t.lb(), t.ub(), t.true_lb(), t.true_ub())
    }

    #[test]
    fn handles_round_trip_and_match_the_abi_header() {
        for &t in Builtin::ALL {
            assert_eq!(Builtin::from_handle(t.handle()), Some(t));
            assert!(t.name().starts_with("MPI"));
            assert!(t.size() > 0 && t.extent() >= t.size());
        }
        assert_eq!(Builtin::from_handle(DATATYPE_NULL), None);
        assert_eq!(Builtin::Aint.handle(), 0x201);
        assert_eq!(Builtin::Int.handle(), 0x209);
        assert_eq!(Builtin::FloatInt.handle(), 0x228);
        assert_eq!(Builtin::LongDoubleInt.handle(), 0x22d);
        assert_eq!(Builtin::Byte.handle(), 0x247);
        assert_eq!(Builtin::Complex32.handle(), 0x2eb);
    }

    #[test]
    fn pair_types_have_c_struct_layout() {
        // MPICH datatype/pairtype_size_extent.
        let cases = [
            (Builtin::FloatInt, 8, 8),
            (Builtin::DoubleInt, 12, 16),
            (Builtin::LongInt, 12, 16),
            (Builtin::TwoInt, 8, 8),
            (Builtin::ShortInt, 6, 8),
            (Builtin::LongDoubleInt, 20, 32),
        ];
        for (t, size, extent) in cases {
            let d = b(t);
            assert_eq!((d.size(), d.extent()), (size, extent), "{}", t.name());
        }
        assert_eq!(b(Builtin::ShortInt).blocks(), vec![(0, 2), (4, 4)]);
        assert_eq!(b(Builtin::DoubleInt).blocks(), vec![(0, 12)]);
        assert!(!b(Builtin::DoubleInt).is_contiguous());
        assert_eq!(b(Builtin::DoubleInt).contiguous_span(1), Some(0));
        assert_eq!(b(Builtin::DoubleInt).contiguous_span(2), None);
        assert!(b(Builtin::Double).is_contiguous());
    }

    #[test]
    fn contiguous_and_vector_metrics() {
        let int = b(Builtin::Int);
        let c = Datatype::contiguous(4, &int).unwrap();
        assert_eq!(metrics(&c), (16, 0, 16, 0, 16));
        assert!(c.is_contiguous());
        assert_eq!(c.uniform_builtin(), Some((Builtin::Int, 4)));
        // MPI-4.1 §5.1.2 example: vector(2, 3, 4) of {(double,0),(char,8)} extent 16.
        let dc = Datatype::create_struct(&[1, 1], &[0, 8], &[b(Builtin::Double), b(Builtin::Char)])
            .unwrap();
        assert_eq!((dc.size(), dc.extent()), (9, 16));
        let v = Datatype::vector(2, 3, 4, &dc).unwrap();
        assert_eq!((v.size(), v.lb(), v.ub()), (54, 0, 112));
        // {double, char} is one 9-byte block, so each vector block is 3 of them.
        assert_eq!(
            v.blocks(),
            vec![(0, 9), (16, 9), (32, 9), (64, 9), (80, 9), (96, 9)]
        );
        // Negative stride: vector(3, 1, -2) of int covers -16..4.
        let n = Datatype::vector(3, 1, -2, &int).unwrap();
        assert_eq!(metrics(&n), (12, -16, 4, -16, 4));
        assert_eq!(n.blocks(), vec![(0, 4), (-8, 4), (-16, 4)]);
        let h = Datatype::hvector(3, 2, 12, &int).unwrap();
        assert_eq!(metrics(&h), (24, 0, 32, 0, 32));
        assert_eq!(h.uniform_builtin(), Some((Builtin::Int, 6)));
    }

    #[test]
    fn indexed_family_metrics() {
        let int = b(Builtin::Int);
        // MPI-4.1 §5.1.4 style: indexed({3,1},{4,0}) of int.
        let t = Datatype::indexed(&[3, 1], &[4, 0], &int).unwrap();
        assert_eq!(metrics(&t), (16, 0, 28, 0, 28));
        assert_eq!(t.blocks(), vec![(16, 12), (0, 4)]);
        let hb = Datatype::hindexed_block(2, &[8, -8], &int).unwrap();
        assert_eq!(metrics(&hb), (16, -8, 16, -8, 16));
        let ib = Datatype::indexed_block(1, &[5, 1], &b(Builtin::Double)).unwrap();
        assert_eq!(metrics(&ib), (16, 8, 48, 8, 48));
        let hi = Datatype::hindexed(&[1, 0, 2], &[4, 1000, 20], &int).unwrap();
        assert_eq!(metrics(&hi), (12, 4, 28, 4, 28));
        // typelb: hindexed of hindexed of a byte at 3, shifted by 1 -> lb 4 ub 5.
        let t1 = Datatype::hindexed(&[1], &[3], &b(Builtin::Byte)).unwrap();
        let t2 = Datatype::hindexed(&[1], &[1], &t1).unwrap();
        assert_eq!((t2.lb(), t2.ub(), t2.extent()), (4, 5, 1));
    }

    #[test]
    fn struct_alignment_padding_and_markers() {
        let s = Datatype::create_struct(
            &[1, 1, 1],
            &[0, 2, 4],
            &[b(Builtin::Char), b(Builtin::Short), b(Builtin::Int)],
        )
        .unwrap();
        assert_eq!((s.size(), s.extent()), (7, 8));
        // struct_empty_el: zero-length block dropped.
        let e = Datatype::create_struct(
            &[0, 1, 2],
            &[8, 0, 8],
            &[b(Builtin::Float), b(Builtin::Int), b(Builtin::Int)],
        )
        .unwrap();
        assert_eq!(metrics(&e), (12, 0, 16, 0, 16));
        // A resized component carries markers: no padding.
        let r = Datatype::resized(&b(Builtin::Double), 0, 9).unwrap();
        let s2 = Datatype::create_struct(&[1], &[0], &[r]).unwrap();
        assert_eq!(s2.extent(), 9);
        // struct_derived_zeros: empty hvectors contribute nothing.
        let vs: Vec<_> = (0..3)
            .map(|i| Datatype::hvector(i, 1, 5, &b(Builtin::Int)).unwrap())
            .collect();
        let z = Datatype::create_struct(&[1, 1, 1], &[0, -100, -200], &vs).unwrap();
        assert_eq!(metrics(&z), (12, -200, -96, -200, -96));
        assert_eq!(z.blocks(), vec![(-100, 4), (-200, 4), (-195, 4)]);
        let vs0: Vec<_> = (0..3)
            .map(|_| Datatype::hvector(0, 1, 5, &b(Builtin::Int)).unwrap())
            .collect();
        let z0 = Datatype::create_struct(&[1, 1, 1], &[0, -100, -200], &vs0).unwrap();
        assert_eq!(metrics(&z0), (0, 0, 0, 0, 0));
        assert!(z0.blocks().is_empty());
    }

    #[test]
    fn resized_dup_and_errors() {
        let int = b(Builtin::Int);
        let r = Datatype::resized(&int, 0, 12).unwrap();
        assert_eq!(metrics(&r), (4, 0, 12, 0, 4));
        assert!(!r.is_contiguous());
        assert_eq!(r.contiguous_span(1), Some(0));
        let c = Datatype::contiguous(3, &r).unwrap();
        assert_eq!((c.size(), c.extent(), c.true_extent()), (12, 36, 28));
        let d = Datatype::dup(&c);
        assert_eq!(metrics(&d), metrics(&c));
        assert_eq!(d.envelope().combiner, combiner::DUP);
        assert_eq!(
            Datatype::contiguous(-1, &int).unwrap_err(),
            TypeError::NegativeCount(-1)
        );
        assert_eq!(
            Datatype::vector(1, -2, 1, &int).unwrap_err(),
            TypeError::NegativeBlocklen(-2)
        );
        assert_eq!(
            Datatype::indexed(&[1], &[], &int).unwrap_err(),
            TypeError::LengthMismatch(1, 0)
        );
        assert_eq!(
            Datatype::hvector(2, 1, isize::MAX, &int).unwrap_err(),
            TypeError::Overflow
        );
    }

    #[test]
    fn subarray_c_and_fortran() {
        let int = b(Builtin::Int);
        // 4x5 ints, 2x3 block at (1,2), C order: rows 1..3, cols 2..5.
        let s = Datatype::subarray(&[4, 5], &[2, 3], &[1, 2], Order::C, &int).unwrap();
        assert_eq!((s.size(), s.lb(), s.extent()), (24, 0, 80));
        assert_eq!(s.blocks(), vec![(28, 12), (48, 12)]);
        let f = Datatype::subarray(&[4, 5], &[2, 3], &[1, 2], Order::Fortran, &int).unwrap();
        // Column-major: index (i, j) at (i + 4 j) * 4; columns 2..5, rows 1..3.
        assert_eq!(f.blocks(), vec![(36, 8), (52, 8), (68, 8)]);
        assert_eq!(f.envelope().num_integers, 3 * 2 + 2);
        assert!(Datatype::subarray(&[4], &[5], &[0], Order::C, &int).is_err());
    }

    /// MPICH datatype/lbub: resized types with negative lower bounds and extents.
    #[test]
    fn lbub_cases() {
        let four = Datatype::contiguous(4, &b(Builtin::Byte)).unwrap();
        let pos = Datatype::resized(&four, -3, 9).unwrap();
        let neg = Datatype::resized(&four, 6, -9).unwrap();
        let ext = |t: &Datatype| (t.size(), t.lb(), t.extent(), t.true_lb(), t.true_extent());
        assert_eq!(ext(&pos), (4, -3, 9, 0, 4));
        assert_eq!(ext(&neg), (4, 6, -9, 0, 4));
        assert_eq!(
            ext(&Datatype::contiguous(3, &pos).unwrap()),
            (12, -3, 27, 0, 22)
        );
        assert_eq!(
            ext(&Datatype::contiguous(3, &neg).unwrap()),
            (12, -12, 9, -18, 22)
        );
        assert_eq!(
            ext(&Datatype::vector(3, 1, 1, &pos).unwrap()),
            (12, -3, 27, 0, 22)
        );
        assert_eq!(
            ext(&Datatype::vector(3, 4, 1, &pos).unwrap()),
            (48, -3, 54, 0, 49)
        );
        assert_eq!(
            ext(&Datatype::vector(3, 4, 5, &pos).unwrap()),
            (48, -3, 126, 0, 121)
        );
        assert_eq!(
            ext(&Datatype::vector(3, 4, -5, &pos).unwrap()),
            (48, -93, 126, -90, 121)
        );
        assert_eq!(
            ext(&Datatype::vector(3, 4, 5, &neg).unwrap()),
            (48, -111, 108, -117, 121)
        );
        assert_eq!(
            ext(&Datatype::vector(3, 4, -5, &neg).unwrap()),
            (48, -21, 108, -27, 121)
        );
    }

    #[test]
    fn darray_block_and_cyclic() {
        let int = b(Builtin::Int);
        let blk = [Distrib::Block(None), Distrib::Block(None)];
        // 4x6 ints on a 2x2 grid; rank 1 is grid (0, 1): rows 0..2, columns 3..6.
        let c = Datatype::darray(4, 1, &[4, 6], &blk, &[2, 2], Order::C, &int).unwrap();
        assert_eq!((c.size(), c.lb(), c.extent()), (24, 0, 96));
        assert_eq!(c.blocks(), vec![(12, 12), (36, 12)]);
        let f = Datatype::darray(4, 1, &[4, 6], &blk, &[2, 2], Order::Fortran, &int).unwrap();
        assert_eq!(f.blocks(), vec![(48, 8), (64, 8), (80, 8)]);
        // Cyclic(2) of 10 over 3 processes: rank 1 owns 2, 3, 8, 9.
        let y = Datatype::darray(
            3,
            1,
            &[10],
            &[Distrib::Cyclic(Some(2))],
            &[3],
            Order::C,
            &int,
        )
        .unwrap();
        assert_eq!((y.blocks(), y.extent()), (vec![(8, 8), (32, 8)], 40));
        // Default block of 10 over 3 is 4: rank 2 owns 8, 9.
        let z =
            Datatype::darray(3, 2, &[10], &[Distrib::Block(None)], &[3], Order::C, &int).unwrap();
        assert_eq!(z.blocks(), vec![(32, 8)]);
        let e = z.envelope();
        assert_eq!((e.combiner, e.num_integers), (combiner::DARRAY, 8));
        assert_eq!(z.contents().integers, vec![3, 2, 1, 10, 17, 19, 3, 12]);
        assert!(
            Datatype::darray(4, 0, &[10], &[Distrib::Block(None)], &[3], Order::C, &int).is_err()
        );
        assert!(Datatype::darray(
            3,
            0,
            &[10],
            &[Distrib::Block(Some(3))],
            &[3],
            Order::C,
            &int
        )
        .is_err());
        assert!(Datatype::darray(3, 0, &[10], &[Distrib::None], &[3], Order::C, &int).is_err());
    }

    #[test]
    fn envelope_and_contents() {
        let int = b(Builtin::Int);
        let t = Datatype::indexed(&[3, 1], &[4, 0], &int).unwrap();
        let e = t.envelope();
        assert_eq!(
            (e.num_integers, e.num_addresses, e.num_datatypes, e.combiner),
            (5, 0, 1, combiner::INDEXED)
        );
        let c = t.contents();
        assert_eq!(c.integers, vec![2, 3, 1, 4, 0]);
        assert!(c.datatypes[0].ptr_eq(&int));
        let s =
            Datatype::create_struct(&[1, 2], &[0, 8], &[int.clone(), b(Builtin::Double)]).unwrap();
        let c = s.contents();
        assert_eq!(
            (c.integers, c.addresses, c.datatypes.len()),
            (vec![2, 1, 2], vec![0, 8], 2)
        );
        assert_eq!(int.envelope().combiner, combiner::NAMED);
        let r = Datatype::resized(&int, -4, 16).unwrap();
        assert_eq!(r.contents().addresses, vec![-4, 16]);
    }

    #[test]
    fn get_count_and_elements() {
        let int = b(Builtin::Int);
        let c = Datatype::contiguous(3, &int).unwrap();
        assert_eq!(c.count_of(24), Some(2));
        assert_eq!(c.count_of(20), None);
        assert_eq!(c.elements_of(20), 5);
        // MPICH get_elements: contiguous(1, struct{char, short, int}) -> 3.
        let s = Datatype::create_struct(
            &[1, 1, 1],
            &[0, 2, 4],
            &[b(Builtin::Char), b(Builtin::Short), int.clone()],
        )
        .unwrap();
        let s1 = Datatype::contiguous(1, &s).unwrap();
        assert_eq!(s1.elements_of(7), 3);
        assert_eq!(s1.elements_of(3), 2);
        // MPICH get_elements_pairtype: 24 bytes as MPI_DOUBLE_INT -> 4 basic elements.
        let di = b(Builtin::DoubleInt);
        assert_eq!(di.elements_of(24), 4);
        assert_eq!(di.elements_of(20), 3);
        assert_eq!(di.count_of(24), Some(2));
        // getpartelm: struct{int, 17 chars} partially received.
        let p =
            Datatype::create_struct(&[1, 17], &[0, 4], &[int.clone(), b(Builtin::Char)]).unwrap();
        assert_eq!(p.elements_of(4 + 16), 17);
        let empty = Datatype::contiguous(0, &int).unwrap();
        assert_eq!(
            (empty.count_of(0), empty.count_of(4), empty.elements_of(4)),
            (Some(0), None, 0)
        );
        assert_eq!(s.uniform_builtin(), None);
    }

    #[test]
    fn pack_unpack_vector_and_short_message() {
        let int = b(Builtin::Int);
        let v = Datatype::vector(3, 2, 3, &int).unwrap();
        v.commit();
        let src: Vec<i32> = (0..20).collect();
        let mut packed = vec![0u8; v.size() * 2];
        // SAFETY: two elements span 2 * extent (32) + 8 bytes < 80.
        unsafe { v.pack(src.as_ptr().cast(), 2, &mut packed) };
        let got: Vec<i32> = ints(&packed);
        assert_eq!(got, vec![0, 1, 3, 4, 6, 7, 8, 9, 11, 12, 14, 15]);
        let mut dst = vec![-1i32; 20];
        // Short: 7 ints and one byte of the 8th.
        // SAFETY: as above.
        unsafe { v.unpack(&packed[..29], 2, dst.as_mut_ptr().cast()) };
        // Packed order is ints 0 1 3 4 6 7 | 8 9 11 12 14 15; 29 bytes end in the low byte of 9.
        assert_eq!(&dst[..9], &[0, 1, -1, 3, 4, -1, 6, 7, 8]);
        assert_eq!(dst[9].to_le_bytes(), [9, 0xff, 0xff, 0xff]);
        assert_eq!(&dst[10..], &[-1; 10]);
        // Partial pack: bytes 10..30.
        let mut part = vec![0u8; 20];
        // SAFETY: as above.
        let n = unsafe { v.pack_partial(src.as_ptr().cast(), 2, 10, &mut part) };
        assert_eq!((n, &part[..]), (20, &packed[10..30]));
    }

    #[test]
    fn tresized_stride() {
        let r = Datatype::resized(&b(Builtin::Int), 0, 12).unwrap();
        let src: Vec<i32> = (0..30).collect();
        let mut packed = vec![0u8; 40];
        // SAFETY: 10 elements of extent 12 fit in 120 bytes.
        unsafe { r.pack(src.as_ptr().cast(), 10, &mut packed) };
        let got: Vec<i32> = ints(&packed);
        assert_eq!(got, (0..10).map(|i| 3 * i).collect::<Vec<_>>());
    }

    #[test]
    fn long_contiguous_of_struct_stays_small() {
        let s = Datatype::create_struct(&[1, 1], &[0, 8], &[b(Builtin::Int), b(Builtin::Double)])
            .unwrap();
        let c = Datatype::contiguous(1 << 20, &s).unwrap();
        assert!(c.flat().len() <= 2);
        assert_eq!(c.size(), 12 << 20);
        let src = vec![7u8; 16 << 20];
        let mut packed = vec![0u8; c.size()];
        // SAFETY: one element spans 16 MiB.
        unsafe { c.pack(src.as_ptr(), 1, &mut packed) };
        assert!(packed.iter().all(|&x| x == 7));
    }

    mod proptests {
        use super::*;
        use proptest::prelude::*;

        /// Sizes of the basic elements of one element, in type-map order, from the constructors.
        fn signature(t: &Datatype, out: &mut Vec<usize>) {
            let rep = |old: &Datatype, n: usize, out: &mut Vec<usize>| {
                for _ in 0..n {
                    signature(old, out);
                }
            };
            match t.contents_ref() {
                Contents::Named(b) => {
                    let (m, n) = b.members();
                    out.extend(m[..n].iter().map(|x| x.1));
                }
                Contents::Marker(_) => {}
                Contents::Dup(old)
                | Contents::Resized { old, .. }
                | Contents::F90 { base: old, .. } => signature(old, out),
                Contents::Contiguous { count, old } => rep(old, *count, out),
                Contents::Vector {
                    count,
                    blocklen,
                    old,
                    ..
                }
                | Contents::Hvector {
                    count,
                    blocklen,
                    old,
                    ..
                } => rep(old, count * blocklen, out),
                Contents::Indexed { blocklens, old, .. } => rep(old, blocklens.iter().sum(), out),
                Contents::Struct {
                    blocklens, types, ..
                } => {
                    for (n, ty) in blocklens.iter().zip(types) {
                        rep(ty, *n, out);
                    }
                }
                other => panic!("not generated: {other:?}"),
            }
        }

        fn base() -> impl Strategy<Value = Datatype> {
            prop::sample::select(vec![
                Builtin::Char,
                Builtin::Short,
                Builtin::Int,
                Builtin::Double,
                Builtin::DoubleInt,
                Builtin::ShortInt,
            ])
            .prop_map(Datatype::builtin)
        }

        fn derived() -> impl Strategy<Value = Datatype> {
            base().prop_recursive(3, 12, 3, |inner| {
                prop_oneof![
                    (0i64..4, inner.clone())
                        .prop_map(|(n, t)| Datatype::contiguous(n, &t).unwrap()),
                    (0i64..4, 0i64..3, -4i64..5, inner.clone())
                        .prop_map(|(n, b, s, t)| Datatype::vector(n, b, s, &t).unwrap()),
                    (0i64..4, 0i64..3, -40isize..40, inner.clone())
                        .prop_map(|(n, b, s, t)| Datatype::hvector(n, b, s, &t).unwrap()),
                    (
                        prop::collection::vec((0i64..3, -5i64..6), 0..4),
                        inner.clone()
                    )
                        .prop_map(|(v, t)| {
                            let (bl, d): (Vec<_>, Vec<_>) = v.into_iter().unzip();
                            Datatype::indexed(&bl, &d, &t).unwrap()
                        }),
                    prop::collection::vec((0i64..3, -32isize..64, inner.clone()), 1..4).prop_map(
                        |v| {
                            let bl: Vec<_> = v.iter().map(|x| x.0).collect();
                            let d: Vec<_> = v.iter().map(|x| x.1).collect();
                            let t: Vec<_> = v.into_iter().map(|x| x.2).collect();
                            Datatype::create_struct(&bl, &d, &t).unwrap()
                        }
                    ),
                    (inner, -16isize..16, -8isize..64)
                        .prop_map(|(t, lb, e)| Datatype::resized(&t, lb, e).unwrap()),
                ]
            })
        }

        proptest! {
            #[test]
            fn pack_unpack_restores_exactly_the_type_map(t in derived(), count in 0usize..4, cut in 0usize..64) {
                // Reference: byte offsets of the type map of `count` elements, in order, from the
                // block list of one element.
                let mut map = Vec::new();
                for i in 0..count {
                    for (off, len) in t.blocks() {
                        for k in 0..len {
                            map.push(off + k as isize + i as isize * t.extent());
                        }
                    }
                }
                prop_assert_eq!(map.len(), t.size() * count);
                let lo = map.iter().copied().min().unwrap_or(0);
                let hi = map.iter().copied().max().unwrap_or(0) + 1;
                if !map.is_empty() {
                    prop_assert!(lo >= t.true_lb() + t.extent().min(0) * count as isize);
                }
                let origin = (-lo).max(0) as usize;
                let span = origin + hi.max(0) as usize;
                let src: Vec<u8> = (0..span).map(|i| (i * 7 + 3) as u8).collect();
                let mut packed = vec![0u8; map.len()];
                // SAFETY: every type-map offset lies in src (origin shifts negatives in).
                unsafe { t.pack(src.as_ptr().add(origin), count, &mut packed) };
                for (p, &off) in map.iter().enumerate() {
                    prop_assert_eq!(packed[p], src[(origin as isize + off) as usize]);
                }
                // Short unpack into a fresh buffer: only the first `n` map bytes change. Later map
                // entries may alias earlier ones (overlapping types), so compare against replay.
                let n = cut.min(packed.len());
                let mut dst = vec![0xAAu8; span];
                let mut expect = dst.clone();
                for (p, &off) in map.iter().enumerate().take(n) {
                    expect[(origin as isize + off) as usize] = packed[p];
                }
                // SAFETY: as above.
                unsafe { t.unpack(&packed[..n], count, dst.as_mut_ptr().add(origin)) };
                prop_assert_eq!(&dst, &expect);
                // Partial packing in two pieces equals packing at once.
                let mut two = vec![0u8; map.len()];
                let (a, b) = two.split_at_mut(n);
                // SAFETY: as above.
                unsafe {
                    t.pack_partial(src.as_ptr().add(origin), count, 0, a);
                    t.pack_partial(src.as_ptr().add(origin), count, n, b);
                }
                prop_assert_eq!(&two, &packed);
                prop_assert_eq!(t.elements_of(t.size() * count), count * t.0.n_basic);
                // MPI_Get_elements against the type signature written out: basic elements whose
                // packed end lies within the first `k` bytes.
                let mut sig = Vec::new();
                signature(&t, &mut sig);
                prop_assert_eq!(sig.iter().sum::<usize>(), t.size());
                let ends: Vec<usize> = sig.iter().scan(0, |a, &l| { *a += l; Some(*a) }).collect();
                for k in [cut, cut / 2, t.size().saturating_sub(1), t.size() + cut] {
                    let whole = if t.size() == 0 { 0 } else { k / t.size() };
                    let rem = if t.size() == 0 { 0 } else { k % t.size() };
                    let want = whole * sig.len() + ends.iter().filter(|&&e| e <= rem).count();
                    prop_assert_eq!(t.elements_of(k), want, "k = {}", k);
                }
            }
        }
    }
}
