//! The predefined reduction operations of MPI-4.1 §6.9.2 on buffers of predefined types.
//!
//! Sans-IO: [`apply`] combines two local buffers, `inout[i] = input[i] op inout[i]`; the C ABI and
//! the collective executors decide which buffers. Which operation applies to which type class
//! follows the standard's table (with MPICH's extension that `MPI_CHAR`/`MPI_WCHAR` are integers and
//! logical operations accept every integer type); a wrong pair is an [`OpError`], which the C ABI
//! maps to `MPI_ERR_OP`.
//!
//! Integer arithmetic wraps. Buffers may be unaligned; aligned ones take a typed-slice path that the
//! compiler vectorizes. `long double` (x87, no Rust type) is handled by a small C file compiled by
//! `build.rs`; a build without a C compiler reports [`OpError::NoLongDouble`] for those.
//!
//! ```
//! use mpi::datatype::Builtin;
//! use mpi::ops::{apply, BuiltinOp};
//! let input = 5i32.to_ne_bytes();
//! let mut inout = 7i32.to_ne_bytes();
//! apply(BuiltinOp::Sum, Builtin::Int, &input, &mut inout).unwrap();
//! assert_eq!(i32::from_ne_bytes(inout), 12);
//! ```

use std::mem::size_of;

use bytemuck::Pod;
use thiserror::Error;

use crate::datatype::{Builtin, Class, Scalar};

/// `MPI_OP_NULL` in the standard ABI.
pub const OP_NULL: usize = 0x20;

/// A predefined operation; the discriminant is its ABI handle value.
#[repr(usize)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuiltinOp {
    /// `MPI_SUM`
    Sum = 0x21,
    /// `MPI_MIN`
    Min = 0x22,
    /// `MPI_MAX`
    Max = 0x23,
    /// `MPI_PROD`
    Prod = 0x24,
    /// `MPI_BAND`
    Band = 0x28,
    /// `MPI_BOR`
    Bor = 0x29,
    /// `MPI_BXOR`
    Bxor = 0x2a,
    /// `MPI_LAND`
    Land = 0x30,
    /// `MPI_LOR`
    Lor = 0x31,
    /// `MPI_LXOR`
    Lxor = 0x32,
    /// `MPI_MINLOC`
    Minloc = 0x38,
    /// `MPI_MAXLOC`
    Maxloc = 0x39,
    /// `MPI_REPLACE` (one-sided accumulate)
    Replace = 0x3c,
    /// `MPI_NO_OP` (one-sided accumulate)
    NoOp = 0x3d,
}

impl BuiltinOp {
    /// Every predefined operation.
    pub const ALL: [BuiltinOp; 14] = [
        BuiltinOp::Sum,
        BuiltinOp::Min,
        BuiltinOp::Max,
        BuiltinOp::Prod,
        BuiltinOp::Band,
        BuiltinOp::Bor,
        BuiltinOp::Bxor,
        BuiltinOp::Land,
        BuiltinOp::Lor,
        BuiltinOp::Lxor,
        BuiltinOp::Minloc,
        BuiltinOp::Maxloc,
        BuiltinOp::Replace,
        BuiltinOp::NoOp,
    ];

    /// The operation whose ABI handle is `h`.
    pub fn from_handle(h: usize) -> Option<BuiltinOp> {
        BuiltinOp::ALL.into_iter().find(|op| op.handle() == h)
    }

    /// The ABI handle value (cast it to `MPI_Op`).
    pub const fn handle(self) -> usize {
        self as usize
    }

    /// The MPI name.
    pub const fn name(self) -> &'static str {
        match self {
            BuiltinOp::Sum => "MPI_SUM",
            BuiltinOp::Min => "MPI_MIN",
            BuiltinOp::Max => "MPI_MAX",
            BuiltinOp::Prod => "MPI_PROD",
            BuiltinOp::Band => "MPI_BAND",
            BuiltinOp::Bor => "MPI_BOR",
            BuiltinOp::Bxor => "MPI_BXOR",
            BuiltinOp::Land => "MPI_LAND",
            BuiltinOp::Lor => "MPI_LOR",
            BuiltinOp::Lxor => "MPI_LXOR",
            BuiltinOp::Minloc => "MPI_MINLOC",
            BuiltinOp::Maxloc => "MPI_MAXLOC",
            BuiltinOp::Replace => "MPI_REPLACE",
            BuiltinOp::NoOp => "MPI_NO_OP",
        }
    }

    /// All predefined operations are commutative (and associative up to floating-point rounding).
    pub const fn is_commutative(self) -> bool {
        true
    }
}

/// Why a reduction cannot run.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpError {
    /// The operation is not defined for the type's class (`MPI_ERR_OP`).
    #[error("{op} is not defined for {ty}")]
    Unsupported {
        /// Operation name.
        op: &'static str,
        /// Type name.
        ty: &'static str,
    },
    /// This build has no C helper for `long double` arithmetic (`MPI_ERR_OP`).
    #[error("{op} on {ty} needs long double support, which this build of libmpi lacks")]
    NoLongDouble {
        /// Operation name.
        op: &'static str,
        /// Type name.
        ty: &'static str,
    },
    /// The buffers are not the same whole number of elements (an internal error: the caller sized them).
    #[error("reduction buffers of {input} and {inout} bytes are not the same whole number of {ty} elements")]
    Length {
        /// Input bytes.
        input: usize,
        /// In-out bytes.
        inout: usize,
        /// Type name.
        ty: &'static str,
    },
}

#[cfg(ferry_long_double)]
mod ld {
    use std::ffi::c_int;

    pub(crate) const SUM: c_int = 0;
    pub(crate) const PROD: c_int = 1;
    pub(crate) const MIN: c_int = 2;
    pub(crate) const MAX: c_int = 3;

    extern "C" {
        /// `inout[i] = in[i] op inout[i]` for `n` long doubles; -1 for an unknown op.
        pub(crate) fn ferry_ld_reduce(
            op: c_int,
            input: *const u8,
            inout: *mut u8,
            n: usize,
        ) -> c_int;
        /// The same for `n` complex long doubles (sum, prod).
        pub(crate) fn ferry_cld_reduce(
            op: c_int,
            input: *const u8,
            inout: *mut u8,
            n: usize,
        ) -> c_int;
        /// -1, 0, 1, or 2 when unordered.
        pub(crate) fn ferry_ld_cmp(a: *const u8, b: *const u8) -> c_int;
        #[cfg(test)]
        pub(crate) fn ferry_ld_from_f64(v: f64, out: *mut u8);
        #[cfg(test)]
        pub(crate) fn ferry_ld_to_f64(p: *const u8) -> f64;
    }
}

const HAVE_LONG_DOUBLE: bool = cfg!(ferry_long_double);

fn uses_long_double(class: Class) -> bool {
    matches!(
        class,
        Class::Float(Scalar::F80)
            | Class::Complex(Scalar::F80)
            | Class::Pair {
                value: Scalar::F80,
                ..
            }
    )
}

/// Whether `op` is defined for `ty` (for argument checking before any data moves).
pub fn check(op: BuiltinOp, ty: Builtin) -> Result<(), OpError> {
    use BuiltinOp::*;
    let class = ty.class();
    let ok = match op {
        Replace | NoOp => return Ok(()),
        Sum | Prod => matches!(class, Class::Int(_) | Class::Float(_) | Class::Complex(_)),
        Min | Max => matches!(class, Class::Int(_) | Class::Float(_)),
        Land | Lor | Lxor => matches!(class, Class::Int(_) | Class::Logical(_)),
        Band | Bor | Bxor => matches!(class, Class::Int(_) | Class::Byte),
        Minloc | Maxloc => matches!(class, Class::Pair { .. }),
    };
    if !ok {
        return Err(unsupported(op, ty));
    }
    if uses_long_double(class) && !HAVE_LONG_DOUBLE {
        return Err(OpError::NoLongDouble {
            op: op.name(),
            ty: ty.name(),
        });
    }
    Ok(())
}

#[cold]
fn unsupported(op: BuiltinOp, ty: Builtin) -> OpError {
    OpError::Unsupported {
        op: op.name(),
        ty: ty.name(),
    }
}

/// `inout[i] = input[i] op inout[i]` over buffers laid out as C arrays of `ty` (elements
/// `ty.extent()` bytes apart, which differs from the size only for pair types with padding such as
/// `MPI_DOUBLE_INT`). Both buffers must be the same whole number of elements.
pub fn apply(op: BuiltinOp, ty: Builtin, input: &[u8], inout: &mut [u8]) -> Result<(), OpError> {
    apply_strided(op, ty, input, inout, false)
}

/// Like [`apply`] for packed buffers, as [`crate::datatype::Datatype::pack`] lays them out:
/// elements `ty.size()` bytes apart and, in pair types, the index right after the value (for
/// `MPI_SHORT_INT` at byte 2 rather than 4).
pub fn apply_packed(
    op: BuiltinOp,
    ty: Builtin,
    input: &[u8],
    inout: &mut [u8],
) -> Result<(), OpError> {
    apply_strided(op, ty, input, inout, true)
}

/// An operation known to be defined for a type (made by [`CheckedOp::new`]), so applying it
/// skips the check: what a reduction applied on every call of a collective keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedOp {
    op: BuiltinOp,
    ty: Builtin,
}

impl CheckedOp {
    /// `op` on `ty`, if it is defined there (see [`check`]).
    pub fn new(op: BuiltinOp, ty: Builtin) -> Result<CheckedOp, OpError> {
        check(op, ty).map(|()| CheckedOp { op, ty })
    }

    /// [`apply_packed`] without the check.
    pub fn apply_packed(self, input: &[u8], inout: &mut [u8]) -> Result<(), OpError> {
        apply_defined(self.op, self.ty, input, Dest::Inout(inout), true)
    }

    /// `out[i] = input[i] op second[i]` on packed buffers of one length, without copying
    /// `second` into `out` first: one pass over three buffers instead of a copy and a pass
    /// over two.
    pub fn apply_packed_apart(
        self,
        input: &[u8],
        second: &[u8],
        out: &mut [u8],
    ) -> Result<(), OpError> {
        if second.len() != out.len() {
            return Err(OpError::Length {
                input: second.len(),
                inout: out.len(),
                ty: self.ty.name(),
            });
        }
        apply_defined(self.op, self.ty, input, Dest::Apart { second, out }, true)
    }
}

/// Where an operation's result goes: over its second operand, or into a buffer of its own
/// with the second operand only read.
enum Dest<'a> {
    Inout(&'a mut [u8]),
    Apart { second: &'a [u8], out: &'a mut [u8] },
}

impl<'a> Dest<'a> {
    fn len(&self) -> usize {
        match self {
            Dest::Inout(inout) => inout.len(),
            Dest::Apart { out, .. } => out.len(),
        }
    }

    /// The result buffer holding the second operand, for loops that only work in place.
    fn into_inout(self) -> &'a mut [u8] {
        match self {
            Dest::Inout(inout) => inout,
            Dest::Apart { second, out } => {
                out.copy_from_slice(second);
                out
            }
        }
    }
}

fn apply_strided(
    op: BuiltinOp,
    ty: Builtin,
    input: &[u8],
    inout: &mut [u8],
    packed: bool,
) -> Result<(), OpError> {
    check(op, ty)?;
    apply_defined(op, ty, input, Dest::Inout(inout), packed)
}

/// [`apply_strided`] of an operation [`check`]ed for the type.
fn apply_defined(
    op: BuiltinOp,
    ty: Builtin,
    input: &[u8],
    dest: Dest<'_>,
    packed: bool,
) -> Result<(), OpError> {
    let stride = if packed { ty.size() } else { ty.extent() };
    if input.len() != dest.len() || !input.len().is_multiple_of(stride) {
        return Err(OpError::Length {
            input: input.len(),
            inout: dest.len(),
            ty: ty.name(),
        });
    }
    match op {
        BuiltinOp::NoOp => {
            dest.into_inout();
            return Ok(());
        }
        BuiltinOp::Replace => {
            match dest {
                Dest::Inout(out) | Dest::Apart { out, .. } => out.copy_from_slice(input),
            }
            return Ok(());
        }
        _ => {}
    }
    match ty.class() {
        Class::Int(s) => int_op(op, s, input, dest),
        Class::Byte => int_op(op, Scalar::U8, input, dest),
        Class::Float(Scalar::F32) => float_op::<f32>(op, input, dest),
        Class::Float(Scalar::F64) => float_op::<f64>(op, input, dest),
        Class::Complex(Scalar::F32) => complex_op::<f32>(op, input, dest),
        Class::Complex(Scalar::F64) => complex_op::<f64>(op, input, dest),
        Class::Float(_) | Class::Complex(_) => long_double_op(op, ty, input, dest.into_inout()),
        Class::Logical(w) => match w {
            1 => logical::<u8>(op, input, dest),
            2 => logical::<u16>(op, input, dest),
            4 => logical::<u32>(op, input, dest),
            8 => logical::<u64>(op, input, dest),
            _ => logical::<u128>(op, input, dest),
        },
        Class::Pair {
            value,
            index,
            index_offset,
        } => {
            let max = op == BuiltinOp::Maxloc;
            let index_offset = if packed { value.size() } else { index_offset };
            let inout = dest.into_inout();
            pair_op(max, value, index, index_offset, stride, input, inout)
        }
        Class::Opaque => Err(unsupported(op, ty)),
    }
}

/// Applies `f` element-wise; typed slices when the buffers are aligned for `T` (the loop then
/// vectorizes), unaligned loads and stores otherwise.
#[inline(always)]
fn zip_with<T: Pod>(input: &[u8], dest: Dest<'_>, f: impl Fn(T, T) -> T) {
    let n = size_of::<T>();
    match dest {
        Dest::Inout(inout) => {
            if let (Ok(a), Ok(b)) = (
                bytemuck::try_cast_slice::<u8, T>(input),
                bytemuck::try_cast_slice_mut::<u8, T>(inout),
            ) {
                return each_pair(a, b, f);
            }
            for (x, y) in input.chunks_exact(n).zip(inout.chunks_exact_mut(n)) {
                let v = f(
                    bytemuck::pod_read_unaligned(x),
                    bytemuck::pod_read_unaligned(y),
                );
                y.copy_from_slice(bytemuck::bytes_of(&v));
            }
        }
        Dest::Apart { second, out } => {
            if let (Ok(a), Ok(b), Ok(o)) = (
                bytemuck::try_cast_slice::<u8, T>(input),
                bytemuck::try_cast_slice::<u8, T>(second),
                bytemuck::try_cast_slice_mut::<u8, T>(out),
            ) {
                return each_triple(a, b, o, f);
            }
            let pairs = input.chunks_exact(n).zip(second.chunks_exact(n));
            for (o, (x, y)) in out.chunks_exact_mut(n).zip(pairs) {
                let v = f(
                    bytemuck::pod_read_unaligned(x),
                    bytemuck::pod_read_unaligned(y),
                );
                o.copy_from_slice(bytemuck::bytes_of(&v));
            }
        }
    }
}

/// `b[i] = f(a[i], b[i])` for every `i`, compiled for AVX2 too and run so where the CPU has
/// it: the loop then takes 32 bytes a step where the x86-64 baseline (SSE2) takes 16, as Open
/// MPI's AVX reduction kernels do (a 1 MiB MPI_SUM of doubles between two ranks: see
/// docs/perf/mpi.md).
#[inline(always)]
fn each_pair<T: Copy>(a: &[T], b: &mut [T], f: impl Fn(T, T) -> T) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { each_pair_avx2(a, b, f) };
    }
    for (x, y) in a.iter().zip(b.iter_mut()) {
        *y = f(*x, *y);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn each_pair_avx2<T: Copy>(a: &[T], b: &mut [T], f: impl Fn(T, T) -> T) {
    for (x, y) in a.iter().zip(b.iter_mut()) {
        *y = f(*x, *y);
    }
}

/// `out[i] = f(a[i], b[i])` for every `i`, compiled for AVX2 as [`each_pair`] is.
#[inline(always)]
fn each_triple<T: Copy>(a: &[T], b: &[T], out: &mut [T], f: impl Fn(T, T) -> T) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { each_triple_avx2(a, b, out, f) };
    }
    for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b)) {
        *o = f(*x, *y);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn each_triple_avx2<T: Copy>(a: &[T], b: &[T], out: &mut [T], f: impl Fn(T, T) -> T) {
    for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b)) {
        *o = f(*x, *y);
    }
}

/// Integer element operations (wrapping arithmetic, as C users of MPICH observe).
trait IntElem: Pod + Ord {
    const ZERO: Self;
    const ONE: Self;
    fn wadd(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl IntElem for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline(always)]
            fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)]
            fn wmul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)]
            fn and(self, o: Self) -> Self { self & o }
            #[inline(always)]
            fn or(self, o: Self) -> Self { self | o }
            #[inline(always)]
            fn xor(self, o: Self) -> Self { self ^ o }
        }
    )*};
}

int_elem!(i8, i16, i32, i64, i128, u8, u16, u32, u64, u128);

#[inline(always)]
fn truth<T: IntElem>(b: bool) -> T {
    if b {
        T::ONE
    } else {
        T::ZERO
    }
}

fn int_kernel<T: IntElem>(op: BuiltinOp, input: &[u8], inout: Dest<'_>) {
    use BuiltinOp::*;
    let z = T::ZERO;
    match op {
        Sum => zip_with::<T>(input, inout, T::wadd),
        Prod => zip_with::<T>(input, inout, T::wmul),
        Min => zip_with::<T>(input, inout, |a, b| if a < b { a } else { b }),
        Max => zip_with::<T>(input, inout, |a, b| if a > b { a } else { b }),
        Band => zip_with::<T>(input, inout, T::and),
        Bor => zip_with::<T>(input, inout, T::or),
        Bxor => zip_with::<T>(input, inout, T::xor),
        Land => zip_with::<T>(input, inout, |a, b| truth(a != z && b != z)),
        Lor => zip_with::<T>(input, inout, |a, b| truth(a != z || b != z)),
        Lxor => zip_with::<T>(input, inout, |a, b| truth((a != z) != (b != z))),
        // Excluded by `check`.
        Minloc | Maxloc | Replace | NoOp => {}
    }
}

fn int_op(op: BuiltinOp, s: Scalar, input: &[u8], inout: Dest<'_>) -> Result<(), OpError> {
    match s {
        Scalar::I8 => int_kernel::<i8>(op, input, inout),
        Scalar::I16 => int_kernel::<i16>(op, input, inout),
        Scalar::I32 => int_kernel::<i32>(op, input, inout),
        Scalar::I64 => int_kernel::<i64>(op, input, inout),
        Scalar::I128 => int_kernel::<i128>(op, input, inout),
        Scalar::U8 => int_kernel::<u8>(op, input, inout),
        Scalar::U16 => int_kernel::<u16>(op, input, inout),
        Scalar::U32 => int_kernel::<u32>(op, input, inout),
        // Float scalars never appear in Class::Int.
        Scalar::U64 | Scalar::F32 | Scalar::F64 | Scalar::F80 => {
            int_kernel::<u64>(op, input, inout)
        }
    }
    Ok(())
}

fn logical<T: IntElem>(op: BuiltinOp, input: &[u8], inout: Dest<'_>) -> Result<(), OpError> {
    // `check` admits only the logical operations for Class::Logical.
    int_kernel::<T>(op, input, inout);
    Ok(())
}

/// Floating-point element operations.
trait FloatElem:
    Pod
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Sub<Output = Self>
{
}
impl FloatElem for f32 {}
impl FloatElem for f64 {}

fn float_op<T: FloatElem>(op: BuiltinOp, input: &[u8], inout: Dest<'_>) -> Result<(), OpError> {
    match op {
        BuiltinOp::Sum => zip_with::<T>(input, inout, |a, b| a + b),
        BuiltinOp::Prod => zip_with::<T>(input, inout, |a, b| a * b),
        BuiltinOp::Min => zip_with::<T>(input, inout, |a, b| if a < b { a } else { b }),
        BuiltinOp::Max => zip_with::<T>(input, inout, |a, b| if a > b { a } else { b }),
        _ => {}
    }
    Ok(())
}

fn complex_op<T: FloatElem>(op: BuiltinOp, input: &[u8], inout: Dest<'_>) -> Result<(), OpError>
where
    [T; 2]: Pod,
{
    match op {
        // Component-wise: the same loop as for the real type.
        BuiltinOp::Sum => zip_with::<T>(input, inout, |a, b| a + b),
        BuiltinOp::Prod => zip_with::<[T; 2]>(input, inout, |[ar, ai], [br, bi]| {
            [ar * br - ai * bi, ar * bi + ai * br]
        }),
        _ => {}
    }
    Ok(())
}

#[cfg(ferry_long_double)]
fn long_double_op(
    op: BuiltinOp,
    ty: Builtin,
    input: &[u8],
    inout: &mut [u8],
) -> Result<(), OpError> {
    let code = match op {
        BuiltinOp::Sum => ld::SUM,
        BuiltinOp::Prod => ld::PROD,
        BuiltinOp::Min => ld::MIN,
        BuiltinOp::Max => ld::MAX,
        _ => return Err(unsupported(op, ty)),
    };
    let complex = matches!(ty.class(), Class::Complex(_));
    let n = input.len() / ty.size();
    // SAFETY: both buffers hold `n` elements of `ty` (lengths checked by the caller), the C code
    // reads `input` and writes `inout` only within them with memcpy (no alignment needed), and the
    // two slices cannot overlap (one is borrowed mutably).
    let rc = unsafe {
        if complex {
            ld::ferry_cld_reduce(code, input.as_ptr(), inout.as_mut_ptr(), n)
        } else {
            ld::ferry_ld_reduce(code, input.as_ptr(), inout.as_mut_ptr(), n)
        }
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(unsupported(op, ty))
    }
}

#[cfg(not(ferry_long_double))]
fn long_double_op(op: BuiltinOp, ty: Builtin, _: &[u8], _: &mut [u8]) -> Result<(), OpError> {
    Err(OpError::NoLongDouble {
        op: op.name(),
        ty: ty.name(),
    })
}

/// Three-way comparison of the values at `a` and `b` (`None` when unordered).
fn compare(kind: Scalar, a: &[u8], b: &[u8]) -> Option<std::cmp::Ordering> {
    use bytemuck::pod_read_unaligned as rd;
    let n = kind.size();
    let (a, b) = (&a[..n], &b[..n]);
    match kind {
        Scalar::I8 => Some(rd::<i8>(a).cmp(&rd(b))),
        Scalar::I16 => Some(rd::<i16>(a).cmp(&rd(b))),
        Scalar::I32 => Some(rd::<i32>(a).cmp(&rd(b))),
        Scalar::I64 => Some(rd::<i64>(a).cmp(&rd(b))),
        Scalar::I128 => Some(rd::<i128>(a).cmp(&rd(b))),
        Scalar::U8 => Some(rd::<u8>(a).cmp(&rd(b))),
        Scalar::U16 => Some(rd::<u16>(a).cmp(&rd(b))),
        Scalar::U32 => Some(rd::<u32>(a).cmp(&rd(b))),
        Scalar::U64 => Some(rd::<u64>(a).cmp(&rd(b))),
        Scalar::F32 => rd::<f32>(a).partial_cmp(&rd(b)),
        Scalar::F64 => rd::<f64>(a).partial_cmp(&rd(b)),
        Scalar::F80 => compare_long_double(a, b),
    }
}

#[cfg(ferry_long_double)]
fn compare_long_double(a: &[u8], b: &[u8]) -> Option<std::cmp::Ordering> {
    // SAFETY: `a` and `b` are 16-byte slices (Scalar::F80's size), read with memcpy by the C code.
    match unsafe { ld::ferry_ld_cmp(a.as_ptr(), b.as_ptr()) } {
        -1 => Some(std::cmp::Ordering::Less),
        0 => Some(std::cmp::Ordering::Equal),
        1 => Some(std::cmp::Ordering::Greater),
        _ => None,
    }
}

#[cfg(not(ferry_long_double))]
fn compare_long_double(_: &[u8], _: &[u8]) -> Option<std::cmp::Ordering> {
    // `check` refuses long double pairs in this build.
    None
}

/// MINLOC/MAXLOC on (value, index) pairs: the better value wins; equal values keep the smaller
/// index (MPI-4.1 §6.9.4).
fn pair_op(
    max: bool,
    value: Scalar,
    index: Scalar,
    index_offset: usize,
    stride: usize,
    input: &[u8],
    inout: &mut [u8],
) -> Result<(), OpError> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let (vn, ir) = (value.size(), index_offset..index_offset + index.size());
    for (x, y) in input
        .chunks_exact(stride)
        .zip(inout.chunks_exact_mut(stride))
    {
        let better = if max { Greater } else { Less };
        match compare(value, x, y) {
            Some(o) if o == better => {
                y[..vn].copy_from_slice(&x[..vn]);
                y[ir.clone()].copy_from_slice(&x[ir.clone()]);
            }
            Some(Equal) if compare(index, &x[ir.clone()], &y[ir.clone()]) == Some(Less) => {
                y[ir.clone()].copy_from_slice(&x[ir.clone()]);
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use BuiltinOp::*;

    fn bytes<T: Pod>(v: &[T]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    fn vals<T: Pod>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect()
    }

    /// Runs `op` on typed vectors, once aligned and once at an odd offset.
    fn run<T: Pod + PartialEq + std::fmt::Debug>(
        op: BuiltinOp,
        ty: Builtin,
        a: &[T],
        b: &[T],
    ) -> Vec<T> {
        let mut inout = bytes(b);
        apply(op, ty, &bytes(a), &mut inout).unwrap();
        let mut ua = vec![0u8; 1];
        ua.extend(bytes(a));
        let mut ub = vec![0u8; 3];
        ub.extend(bytes(b));
        apply(op, ty, &ua[1..], &mut ub[3..]).unwrap();
        let out = vals(&inout);
        assert_eq!(
            vals::<T>(&ub[3..]),
            out,
            "unaligned {} on {}",
            op.name(),
            ty.name()
        );
        out
    }

    #[test]
    fn handles_match_the_abi_header() {
        for op in BuiltinOp::ALL {
            assert_eq!(BuiltinOp::from_handle(op.handle()), Some(op));
        }
        assert_eq!(BuiltinOp::from_handle(OP_NULL), None);
        assert_eq!(
            (Sum.handle(), Minloc.handle(), NoOp.handle()),
            (0x21, 0x38, 0x3d)
        );
    }

    #[test]
    fn op_class_table() {
        for &ty in Builtin::ALL {
            for op in BuiltinOp::ALL {
                let class = ty.class();
                let want = match op {
                    Replace | NoOp => true,
                    Sum | Prod => {
                        matches!(class, Class::Int(_) | Class::Float(_) | Class::Complex(_))
                    }
                    Min | Max => matches!(class, Class::Int(_) | Class::Float(_)),
                    Land | Lor | Lxor => matches!(class, Class::Int(_) | Class::Logical(_)),
                    Band | Bor | Bxor => matches!(class, Class::Int(_) | Class::Byte),
                    Minloc | Maxloc => matches!(class, Class::Pair { .. }),
                };
                let got = check(op, ty);
                assert_eq!(got.is_ok(), want, "{} on {}: {got:?}", op.name(), ty.name());
                // Every admitted pair runs on two elements without error.
                if want {
                    let n = 2 * ty.extent();
                    let input = vec![1u8; n];
                    let mut inout = vec![2u8; n];
                    apply(op, ty, &input, &mut inout).unwrap();
                    apply_packed(op, ty, &input[..2 * ty.size()], &mut inout[..2 * ty.size()])
                        .unwrap();
                }
            }
        }
        let e = check(Min, Builtin::CDoubleComplex).unwrap_err();
        assert_eq!(
            e.to_string(),
            "MPI_MIN is not defined for MPI_C_DOUBLE_COMPLEX"
        );
        assert!(check(Band, Builtin::Double).is_err());
        assert!(check(Sum, Builtin::Byte).is_err());
        assert!(check(Maxloc, Builtin::Int).is_err());
        assert!(check(Sum, Builtin::Packed).is_err());
        assert!(check(Land, Builtin::CBool).is_ok());
    }

    #[test]
    fn a_checked_operation_is_made_only_where_it_is_defined_and_applies_as_the_checked_call() {
        assert!(CheckedOp::new(Sum, Builtin::Byte).is_err());
        let sum = CheckedOp::new(Sum, Builtin::Double).unwrap();
        let input = 1.5f64.to_ne_bytes();
        let mut inout = 2.25f64.to_ne_bytes();
        sum.apply_packed(&input, &mut inout).unwrap();
        assert_eq!(f64::from_ne_bytes(inout), 3.75);
        // Lengths are still checked.
        assert!(sum.apply_packed(&input, &mut [0u8; 4]).is_err());
    }

    /// The three-operand form gives, byte for byte, what copying the second operand into
    /// the result and combining in place gives: for every admitted pair, aligned and not.
    #[test]
    fn apart_matches_copy_then_in_place() {
        for &ty in Builtin::ALL {
            for op in BuiltinOp::ALL {
                let Ok(checked) = CheckedOp::new(op, ty) else {
                    continue;
                };
                let n = 37 * ty.size();
                // Small values in every byte: no float is NaN.
                let input: Vec<u8> = (0..n + 1).map(|i| (i * 7 % 5) as u8).collect();
                let second: Vec<u8> = (0..n + 1).map(|i| (i * 3 % 4) as u8).collect();
                for skew in [0, 1] {
                    let (a, b) = (&input[skew..skew + n], &second[..n]);
                    let mut want = b.to_vec();
                    checked.apply_packed(a, &mut want).unwrap();
                    let mut out = vec![0xAAu8; n + 1];
                    checked
                        .apply_packed_apart(a, b, &mut out[skew..skew + n])
                        .unwrap();
                    assert_eq!(
                        &out[skew..skew + n],
                        &want[..],
                        "{} on {}, skew {skew}",
                        op.name(),
                        ty.name()
                    );
                }
                let mut short = vec![0u8; n - 1];
                assert!(checked
                    .apply_packed_apart(&input[..n], &second[..n], &mut short)
                    .is_err());
            }
        }
    }

    #[test]
    fn integer_ops_wrap_and_vectorize() {
        let a: Vec<i32> = (0..1000).map(|i| i - 500).collect();
        let b: Vec<i32> = (0..1000).map(|i| 3 * i % 7).collect();
        let sum = run(Sum, Builtin::Int, &a, &b);
        assert!(sum.iter().zip(&a).zip(&b).all(|((s, x), y)| *s == x + y));
        let max = run(Max, Builtin::Int, &a, &b);
        assert!(max
            .iter()
            .zip(&a)
            .zip(&b)
            .all(|((s, x), y)| *s == *x.max(y)));
        let min = run(Min, Builtin::Int, &a, &b);
        assert!(min
            .iter()
            .zip(&a)
            .zip(&b)
            .all(|((s, x), y)| *s == *x.min(y)));
        assert_eq!(run(Sum, Builtin::Int, &[i32::MAX], &[1]), [i32::MIN]);
        assert_eq!(run(Prod, Builtin::UnsignedChar, &[16u8], &[17]), [16]);
        assert_eq!(
            run(Sum, Builtin::Long, &[i64::MAX, 2], &[1, 3]),
            [i64::MIN, 5]
        );
        assert_eq!(
            run(Min, Builtin::UnsignedLong, &[u64::MAX, 2], &[1, 3]),
            [1, 2]
        );
        assert_eq!(run(Band, Builtin::Short, &[0b1100i16], &[0b1010]), [0b1000]);
        assert_eq!(run(Bor, Builtin::Uint16, &[0b1100u16], &[0b1010]), [0b1110]);
        assert_eq!(run(Bxor, Builtin::Byte, &[0b1100u8], &[0b1010]), [0b0110]);
        assert_eq!(
            run(Land, Builtin::Int, &[5, 0, 5, 0], &[7, 7, 0, 0]),
            [1, 0, 0, 0]
        );
        assert_eq!(
            run(Lor, Builtin::Int, &[5, 0, 5, 0], &[7, 7, 0, 0]),
            [1, 1, 1, 0]
        );
        assert_eq!(
            run(Lxor, Builtin::Char, &[5i8, 0, 5, 0], &[7, 7, 0, 0]),
            [0, 1, 1, 0]
        );
        assert_eq!(
            run(Sum, Builtin::Integer16, &[i128::MAX], &[1]),
            [i128::MIN]
        );
    }

    #[test]
    fn logical_and_bool() {
        assert_eq!(
            run(Land, Builtin::CBool, &[1u8, 0, 1, 0], &[1, 1, 0, 0]),
            [1, 0, 0, 0]
        );
        assert_eq!(
            run(Lor, Builtin::Logical, &[1u32, 0, 1, 0], &[1, 1, 0, 0]),
            [1, 1, 1, 0]
        );
        assert_eq!(
            run(Lxor, Builtin::Logical8, &[1u64, 0, 1, 0], &[1, 1, 0, 0]),
            [0, 1, 1, 0]
        );
    }

    #[test]
    fn float_and_complex() {
        assert_eq!(
            run(Sum, Builtin::Double, &[1.5f64, -2.0], &[2.25, 4.0]),
            [3.75, 2.0]
        );
        assert_eq!(
            run(Prod, Builtin::Float, &[1.5f32, -2.0], &[2.0, 4.0]),
            [3.0, -8.0]
        );
        assert_eq!(
            run(Max, Builtin::Real8, &[1.5f64, -2.0], &[2.0, -4.0]),
            [2.0, -2.0]
        );
        assert_eq!(
            run(Min, Builtin::Real, &[1.5f32, -2.0], &[2.0, -4.0]),
            [1.5, -4.0]
        );
        // (1 + 2i)(3 + 4i) = -5 + 10i
        assert_eq!(
            run(Prod, Builtin::CDoubleComplex, &[1.0f64, 2.0], &[3.0, 4.0]),
            [-5.0, 10.0]
        );
        assert_eq!(
            run(Prod, Builtin::Complex, &[1.0f32, 2.0], &[3.0, 4.0]),
            [-5.0, 10.0]
        );
        assert_eq!(
            run(Sum, Builtin::CFloatComplex, &[1.0f32, 2.0], &[3.0, 4.0]),
            [4.0, 6.0]
        );
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    struct FloatInt {
        v: f32,
        i: i32,
    }

    #[test]
    fn minloc_maxloc_with_ties() {
        let a = [
            FloatInt { v: 1.0, i: 5 },
            FloatInt { v: 2.0, i: 7 },
            FloatInt { v: 3.0, i: 1 },
        ];
        let b = [
            FloatInt { v: 1.0, i: 2 },
            FloatInt { v: 2.0, i: 3 },
            FloatInt { v: 0.5, i: 9 },
        ];
        let max = run(Maxloc, Builtin::FloatInt, &a, &b);
        assert_eq!(
            max,
            [
                FloatInt { v: 1.0, i: 2 },
                FloatInt { v: 2.0, i: 3 },
                FloatInt { v: 3.0, i: 1 }
            ]
        );
        let min = run(Minloc, Builtin::FloatInt, &b, &a);
        assert_eq!(
            min,
            [
                FloatInt { v: 1.0, i: 2 },
                FloatInt { v: 2.0, i: 3 },
                FloatInt { v: 0.5, i: 9 }
            ]
        );
        // MPI_DOUBLE_INT as a C array: 16-byte elements, padding untouched.
        let mut x = vec![0u8; 32];
        let mut y = vec![0xEEu8; 32];
        for (k, (v, i)) in [(4.0f64, 1i32), (1.0, 8)].iter().enumerate() {
            x[16 * k..16 * k + 8].copy_from_slice(&v.to_ne_bytes());
            x[16 * k + 8..16 * k + 12].copy_from_slice(&i.to_ne_bytes());
        }
        for (k, (v, i)) in [(4.0f64, 0i32), (2.0, 3)].iter().enumerate() {
            y[16 * k..16 * k + 8].copy_from_slice(&v.to_ne_bytes());
            y[16 * k + 8..16 * k + 12].copy_from_slice(&i.to_ne_bytes());
        }
        apply(Minloc, Builtin::DoubleInt, &x, &mut y).unwrap();
        assert_eq!(vals::<i32>(&y[8..12]), [0]);
        assert_eq!(vals::<f64>(&y[16..24]), [1.0]);
        assert_eq!(vals::<i32>(&y[24..28]), [8]);
        assert_eq!(&y[12..16], &[0xEE; 4]);
        // MPI_SHORT_INT as a C array: index at byte 4.
        let s = |v: i16, i: i32| {
            let mut e = vec![0u8; 8];
            e[..2].copy_from_slice(&v.to_ne_bytes());
            e[4..].copy_from_slice(&i.to_ne_bytes());
            e
        };
        let mut y = s(3, 4);
        apply(Maxloc, Builtin::ShortInt, &s(3, 2), &mut y).unwrap();
        assert_eq!(y, s(3, 2));
        apply(Maxloc, Builtin::ShortInt, &s(-1, 0), &mut y).unwrap();
        assert_eq!(y, s(3, 2));
        // Packed MPI_SHORT_INT: 6-byte elements, index at byte 2.
        let p = |v: i16, i: i32| [v.to_ne_bytes().as_slice(), &i.to_ne_bytes()].concat();
        let mut y = [p(1, 5), p(7, 5)].concat();
        apply_packed(
            Minloc,
            Builtin::ShortInt,
            &[p(1, 4), p(8, 0)].concat(),
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [p(1, 4), p(7, 5)].concat());
        assert_eq!(
            run(Maxloc, Builtin::TwoReal, &[2.0f32, 9.0], &[2.0, 4.0]),
            [2.0, 4.0]
        );
        assert_eq!(run(Minloc, Builtin::TwoInt, &[-3i32, 9], &[2, 4]), [-3, 9]);
    }

    #[test]
    fn replace_and_no_op_take_any_type() {
        assert_eq!(run(Replace, Builtin::Packed, &[1u8, 2], &[3, 4]), [1, 2]);
        assert_eq!(
            run(NoOp, Builtin::DoubleComplex, &[1.0f64, 2.0], &[3.0, 4.0]),
            [3.0, 4.0]
        );
    }

    #[test]
    fn length_errors() {
        let mut out = [0u8; 8];
        assert!(matches!(
            apply(Sum, Builtin::Int, &[0u8; 4], &mut out),
            Err(OpError::Length { .. })
        ));
        assert!(matches!(
            apply(Sum, Builtin::Int, &[0u8; 6], &mut out[..6]),
            Err(OpError::Length { .. })
        ));
        assert!(matches!(
            apply(Maxloc, Builtin::DoubleInt, &[0u8; 12], &mut [0u8; 12]),
            Err(OpError::Length { .. })
        ));
        assert!(apply_packed(Maxloc, Builtin::DoubleInt, &[0u8; 12], &mut [0u8; 12]).is_ok());
    }

    #[cfg(ferry_long_double)]
    #[test]
    fn long_double_through_c() {
        let ld = |v: &[f64]| {
            let mut b = vec![0u8; 16 * v.len()];
            for (k, x) in v.iter().enumerate() {
                // SAFETY: 16 writable bytes at b[16k..].
                unsafe { ld::ferry_ld_from_f64(*x, b[16 * k..].as_mut_ptr()) };
            }
            b
        };
        // SAFETY: 16 readable bytes at each element.
        let back = |b: &[u8]| {
            b.chunks(16)
                .map(|c| unsafe { ld::ferry_ld_to_f64(c.as_ptr()) })
                .collect::<Vec<_>>()
        };
        let mut y = ld(&[1.0, 5.0]);
        apply(Sum, Builtin::LongDouble, &ld(&[0.5, 2.0]), &mut y).unwrap();
        assert_eq!(back(&y), [1.5, 7.0]);
        apply(Max, Builtin::LongDouble, &ld(&[9.0, 2.0]), &mut y).unwrap();
        assert_eq!(back(&y), [9.0, 7.0]);
        // Unaligned input.
        let mut u = vec![0u8];
        u.extend(ld(&[2.0, 2.0]));
        apply(Prod, Builtin::LongDouble, &u[1..], &mut y).unwrap();
        assert_eq!(back(&y), [18.0, 14.0]);
        let mut c = ld(&[3.0, 4.0]);
        apply(Prod, Builtin::CLongDoubleComplex, &ld(&[1.0, 2.0]), &mut c).unwrap();
        assert_eq!(back(&c), [-5.0, 10.0]);
        // MPI_LONG_DOUBLE_INT: 32-byte elements, index at 16; tie keeps the smaller index.
        let pair = |v: f64, i: i32| {
            let mut e = ld(&[v]);
            e.extend(i.to_ne_bytes());
            e.extend([0u8; 12]);
            e
        };
        let mut y = pair(2.0, 7);
        apply(Maxloc, Builtin::LongDoubleInt, &pair(2.0, 3), &mut y).unwrap();
        assert_eq!(y[16..20], 3i32.to_ne_bytes());
        apply(Minloc, Builtin::LongDoubleInt, &pair(-1.0, 9), &mut y).unwrap();
        assert_eq!(
            (back(&y[..16]), &y[16..20]),
            (vec![-1.0], &9i32.to_ne_bytes()[..])
        );
    }
}
