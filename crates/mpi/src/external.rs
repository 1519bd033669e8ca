//! The `external32` data representation (MPI 4.1 §14.5.2): `MPI_Pack_external`,
//! `MPI_Unpack_external`, `MPI_Pack_external_size`.
//!
//! external32 is big-endian with fixed sizes per predefined type: IEEE 754 floats, `long double`
//! as IEEE binary128, and C `long` and `wchar_t` narrowed to 4 and 2 bytes (the standard's table
//! of external32 sizes). Data is first packed natively (the datatype engine's `MPI_Pack` order),
//! then each basic element is converted in that order; unpacking runs the other way. A value
//! that does not fit its external32 size is an `MPI_ERR_CONVERSION`, never silently cut.

use crate::abi::*;
use crate::datatype::{Builtin, Class, Datatype, Scalar};
use crate::error::{fail, MpiError, Res};
use crate::state::running;
use std::ffi::{c_char, c_void, CStr};

/// How one scalar of a basic element is stored in external32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// Signed integer of `native` bytes, `bytes` in external32.
    Signed { native: usize, bytes: usize },
    /// Unsigned integer (also booleans and logicals).
    Unsigned { native: usize, bytes: usize },
    /// IEEE float or double: byte order only.
    Ieee(usize),
    /// x87 80-bit `long double` (16 bytes of storage) as IEEE binary128.
    Extended,
    /// Bytes copied as they are.
    Raw(usize),
}

impl Wire {
    fn native(self) -> usize {
        match self {
            Wire::Signed { native, .. } | Wire::Unsigned { native, .. } => native,
            Wire::Ieee(n) | Wire::Raw(n) => n,
            Wire::Extended => 16,
        }
    }

    fn external(self) -> usize {
        match self {
            Wire::Signed { bytes, .. } | Wire::Unsigned { bytes, .. } => bytes,
            Wire::Ieee(n) | Wire::Raw(n) => n,
            Wire::Extended => 16,
        }
    }
}

fn scalar_wire(s: Scalar) -> Wire {
    let n = s.size();
    match s {
        Scalar::I8 | Scalar::I16 | Scalar::I32 | Scalar::I64 | Scalar::I128 => Wire::Signed {
            native: n,
            bytes: n,
        },
        Scalar::U8 | Scalar::U16 | Scalar::U32 | Scalar::U64 => Wire::Unsigned {
            native: n,
            bytes: n,
        },
        Scalar::F32 | Scalar::F64 => Wire::Ieee(n),
        Scalar::F80 => Wire::Extended,
    }
}

/// The scalars of one basic element, in order (up to two: complex parts, pair members).
fn wires(b: Builtin) -> ([Wire; 2], usize) {
    let none = Wire::Raw(0);
    match b {
        // The standard's table narrows these two.
        Builtin::Long => {
            return (
                [
                    Wire::Signed {
                        native: 8,
                        bytes: 4,
                    },
                    none,
                ],
                1,
            )
        }
        Builtin::UnsignedLong => {
            return (
                [
                    Wire::Unsigned {
                        native: 8,
                        bytes: 4,
                    },
                    none,
                ],
                1,
            )
        }
        Builtin::Wchar => {
            return (
                [
                    Wire::Unsigned {
                        native: 4,
                        bytes: 2,
                    },
                    none,
                ],
                1,
            )
        }
        Builtin::LongInt => {
            return (
                [
                    Wire::Signed {
                        native: 8,
                        bytes: 4,
                    },
                    Wire::Signed {
                        native: 4,
                        bytes: 4,
                    },
                ],
                2,
            )
        }
        _ => {}
    }
    match b.class() {
        Class::Int(s) => ([scalar_wire(s), none], 1),
        Class::Float(s) => ([scalar_wire(s), none], 1),
        Class::Complex(s) => ([scalar_wire(s), scalar_wire(s)], 2),
        Class::Logical(n) => (
            [
                Wire::Unsigned {
                    native: n as usize,
                    bytes: n as usize,
                },
                none,
            ],
            1,
        ),
        Class::Byte | Class::Opaque => ([Wire::Raw(b.size()), none], 1),
        Class::Pair { value, index, .. } => ([scalar_wire(value), scalar_wire(index)], 2),
    }
}

/// Bytes of one value of predefined type `b` in external32 (MPI I/O lays out external32 views
/// with these).
pub(crate) fn builtin_size(b: Builtin) -> usize {
    let (w, k) = wires(b);
    w[..k].iter().map(|w| w.external()).sum()
}

/// Bytes of one element of `dt` in external32.
pub(crate) fn element_size(dt: &Datatype) -> usize {
    let mut n = 0;
    dt.for_each_builtin(&mut |b| n += builtin_size(b));
    n
}

fn conversion(what: &str) -> MpiError {
    MpiError::new(MPI_ERR_CONVERSION, format!("external32: {what}"))
}

/// Native packed bytes → external32, one scalar (`src` holds `w.native()` bytes).
fn to_external(w: Wire, src: &[u8], dst: &mut [u8]) -> Res {
    match w {
        Wire::Signed { native, bytes } => {
            let mut v = [0u8; 16];
            v[..native].copy_from_slice(src);
            let full = i128::from_le_bytes(v) << (128 - 8 * native) >> (128 - 8 * native);
            let (lo, hi) = (-(1i128 << (8 * bytes - 1)), (1i128 << (8 * bytes - 1)) - 1);
            if bytes < 16 && (full < lo || full > hi) {
                return Err(conversion(&format!("{full} does not fit in {bytes} bytes")));
            }
            dst.copy_from_slice(&full.to_be_bytes()[16 - bytes..]);
        }
        Wire::Unsigned { native, bytes } => {
            let mut v = [0u8; 16];
            v[..native].copy_from_slice(src);
            let full = u128::from_le_bytes(v);
            if bytes < 16 && full >> (8 * bytes) != 0 {
                return Err(conversion(&format!("{full} does not fit in {bytes} bytes")));
            }
            dst.copy_from_slice(&full.to_be_bytes()[16 - bytes..]);
        }
        Wire::Ieee(n) => {
            for i in 0..n {
                dst[i] = src[n - 1 - i];
            }
        }
        Wire::Extended => dst.copy_from_slice(&x87_to_binary128(src).to_be_bytes()),
        Wire::Raw(_) => dst.copy_from_slice(src),
    }
    Ok(())
}

/// external32 → native packed bytes, one scalar.
fn from_external(w: Wire, src: &[u8], dst: &mut [u8]) {
    match w {
        Wire::Signed { native, bytes } => {
            let mut v = [0u8; 16];
            v[16 - bytes..].copy_from_slice(src);
            let full = i128::from_be_bytes(v) << (128 - 8 * bytes) >> (128 - 8 * bytes);
            dst.copy_from_slice(&full.to_le_bytes()[..native]);
        }
        Wire::Unsigned { native, bytes } => {
            let mut v = [0u8; 16];
            v[16 - bytes..].copy_from_slice(src);
            dst.copy_from_slice(&u128::from_be_bytes(v).to_le_bytes()[..native]);
        }
        Wire::Ieee(n) => {
            for i in 0..n {
                dst[i] = src[n - 1 - i];
            }
        }
        Wire::Extended => {
            let mut v = [0u8; 16];
            v.copy_from_slice(src);
            dst.copy_from_slice(&binary128_to_x87(u128::from_be_bytes(v)));
        }
        Wire::Raw(_) => dst.copy_from_slice(src),
    }
}

/// x87 extended (64-bit significand with explicit integer bit, 15-bit exponent, little-endian
/// in 16 bytes) as IEEE binary128 bits. Both use exponent bias 16383, so normal numbers, zeros,
/// infinities and NaNs map field by field; denormals (exponent 0) keep their exponent.
fn x87_to_binary128(src: &[u8]) -> u128 {
    let mut m = [0u8; 8];
    m.copy_from_slice(&src[..8]);
    let mantissa = u64::from_le_bytes(m);
    let se = u16::from_le_bytes([src[8], src[9]]);
    let fraction = (mantissa & !(1u64 << 63)) as u128; // the explicit integer bit is implicit in binary128
    (se as u128) << 112 | fraction << 49
}

fn binary128_to_x87(bits: u128) -> [u8; 16] {
    let se = (bits >> 112) as u16;
    let fraction = ((bits >> 49) as u64) & !(1u64 << 63);
    let exponent = se & 0x7fff;
    // The integer bit is set for every finite non-zero normal number and for infinities/NaNs.
    let integer = if exponent != 0 { 1u64 << 63 } else { 0 };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&(fraction | integer).to_le_bytes());
    out[8..10].copy_from_slice(&se.to_le_bytes());
    out
}

/// The datarep argument, which must be "external32".
unsafe fn datarep_arg(datarep: *const c_char) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `datarep`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if datarep.is_null() {
            return fail(MPI_ERR_ARG, "datarep is NULL");
        }
        let name = CStr::from_ptr(datarep).to_string_lossy();
        if name != "external32" {
            return fail(
                MPI_ERR_UNSUPPORTED_DATAREP,
                format!("data representation {name:?} (only \"external32\" is supported)"),
            );
        }
        Ok(())
    }
}

/// Converts `count` natively packed elements of `dt` to external32 (`dst` is exactly their
/// external32 size). MPI I/O writes external32 views through this too.
pub(crate) fn pack(dt: &Datatype, count: usize, native: &[u8], dst: &mut [u8]) -> Res {
    let (mut i, mut o) = (0, 0);
    let mut result = Ok(());
    for _ in 0..count {
        dt.for_each_builtin(&mut |b| {
            let (w, k) = wires(b);
            for w in &w[..k] {
                if result.is_ok() {
                    result = to_external(
                        *w,
                        &native[i..i + w.native()],
                        &mut dst[o..o + w.external()],
                    );
                }
                i += w.native();
                o += w.external();
            }
        });
    }
    result
}

/// Converts external32 data of up to `count` elements of `dt` back to natively packed bytes
/// (`native` has room for `count` elements). `src` may end early (a read that met the end of a
/// file): the scalars it holds whole are converted. Returns the native bytes written.
pub(crate) fn unpack(dt: &Datatype, count: usize, src: &[u8], native: &mut [u8]) -> usize {
    let (mut i, mut o) = (0, 0);
    let mut short = false;
    for _ in 0..count {
        dt.for_each_builtin(&mut |b| {
            let (w, k) = wires(b);
            for w in &w[..k] {
                short = short || o + w.external() > src.len();
                if short {
                    return;
                }
                from_external(
                    *w,
                    &src[o..o + w.external()],
                    &mut native[i..i + w.native()],
                );
                i += w.native();
                o += w.external();
            }
        });
        if short || o == src.len() {
            break;
        }
    }
    i
}

fn aint_arg(v: isize, what: &str) -> Res<usize> {
    usize::try_from(v).map_err(|_| MpiError::new(MPI_ERR_ARG, format!("{what} {v} is negative")))
}

// MPI_Count and MPI_Aint are both 64 bits here, so a position of either is the same memory.
const _: () = assert!(std::mem::size_of::<isize>() == std::mem::size_of::<i64>());

/// MPI_Pack_external. Safety: MPI's contract on the buffers and `position`.
pub(crate) unsafe fn pack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: i64,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: isize,
    position: *mut isize,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `datarep`, `inbuf`,
    // `outbuf` and `position`, as the caller promises, are NULL or valid for what the MPI call it
    // serves reads and writes through them.
    unsafe {
        datarep_arg(datarep)?;
        let dt = running(|s| s.committed_type(datatype))?;
        let count = count_c(incount)?;
        let Some(pos) = position.as_mut() else {
            return fail(MPI_ERR_ARG, "position is NULL");
        };
        let (start, size) = (aint_arg(*pos, "position")?, aint_arg(outsize, "outsize")?);
        let need = external_bytes(&dt, count)?;
        crate::types::check_room("MPI_Pack_external", need, start, size)?;
        crate::check::buffer(inbuf, count, &dt)?;
        crate::check::bytes(outbuf, start + need)?;
        let mut native = vec![0u8; crate::types::bytes_of(&dt, count)?];
        dt.pack(inbuf as *const u8, count, &mut native);
        let dst = std::slice::from_raw_parts_mut((outbuf as *mut u8).add(start), need);
        pack(&dt, count, &native, dst)?;
        *pos = (start + need) as isize;
        Ok(())
    }
}

/// MPI_Unpack_external. Safety: as [`pack_external`].
pub(crate) unsafe fn unpack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: isize,
    position: *mut isize,
    outbuf: *mut c_void,
    outcount: i64,
    datatype: Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `datarep`, `inbuf`,
    // `position` and `outbuf`, as the caller promises, are NULL or valid for what the MPI call it
    // serves reads and writes through them.
    unsafe {
        datarep_arg(datarep)?;
        let dt = running(|s| s.committed_type(datatype))?;
        let count = count_c(outcount)?;
        let Some(pos) = position.as_mut() else {
            return fail(MPI_ERR_ARG, "position is NULL");
        };
        let (start, size) = (aint_arg(*pos, "position")?, aint_arg(insize, "insize")?);
        let need = external_bytes(&dt, count)?;
        crate::types::check_room("MPI_Unpack_external", need, start, size)?;
        crate::check::bytes(inbuf, start + need)?;
        crate::check::buffer(outbuf, count, &dt)?;
        let src = std::slice::from_raw_parts((inbuf as *const u8).add(start), need);
        let mut native = vec![0u8; crate::types::bytes_of(&dt, count)?];
        unpack(&dt, count, src, &mut native);
        dt.unpack(&native, count, outbuf as *mut u8);
        *pos = (start + need) as isize;
        Ok(())
    }
}

/// Bytes of `incount` elements in external32. Safety: `datarep` is a C string or NULL.
pub(crate) unsafe fn pack_external_size(
    datarep: *const c_char,
    incount: i64,
    datatype: Handle,
) -> Res<usize> {
    // SAFETY: this function's contract is the unsafe operations' own: `datarep`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        datarep_arg(datarep)?;
        let dt = running(|s| s.datatype(datatype))?;
        external_bytes(&dt, count_c(incount)?)
    }
}

/// The external32 bytes of `count` elements of `dt`, or MPI_ERR_COUNT when that overflows.
fn external_bytes(dt: &Datatype, count: usize) -> Res<usize> {
    element_size(dt).checked_mul(count).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!(
                "{count} elements of {} external32 bytes overflow the address space",
                element_size(dt)
            ),
        )
    })
}

/// A count of elements (`int` or MPI_Count) as a size.
fn count_c(count: i64) -> Res<usize> {
    usize::try_from(count)
        .map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("negative count {count}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(b: Builtin, native: &[u8]) -> Vec<u8> {
        let dt = Datatype::builtin(b);
        let mut ext = vec![0u8; element_size(&dt)];
        pack(&dt, 1, native, &mut ext).expect("fits");
        let mut back = vec![0u8; native.len()];
        assert_eq!(unpack(&dt, 1, &ext, &mut back), native.len());
        assert_eq!(back, native, "{b:?} round trip");
        ext
    }

    #[test]
    fn integers_are_big_endian_and_long_is_four_bytes() {
        assert_eq!(
            round_trip(Builtin::Int, &0x0102_0304i32.to_le_bytes()),
            [1, 2, 3, 4]
        );
        assert_eq!(
            round_trip(Builtin::Long, &(-2i64).to_le_bytes()),
            [0xff, 0xff, 0xff, 0xfe]
        );
        assert_eq!(
            round_trip(Builtin::UnsignedLong, &7u64.to_le_bytes()),
            [0, 0, 0, 7]
        );
        assert_eq!(
            round_trip(Builtin::Wchar, &0x263au32.to_le_bytes()),
            [0x26, 0x3a]
        );
        assert_eq!(
            round_trip(Builtin::Short, &(-1i16).to_le_bytes()),
            [0xff, 0xff]
        );
    }

    #[test]
    fn a_long_that_does_not_fit_is_a_conversion_error() {
        let dt = Datatype::builtin(Builtin::Long);
        let mut ext = [0u8; 4];
        let err = pack(&dt, 1, &(1i64 << 40).to_le_bytes(), &mut ext).unwrap_err();
        assert_eq!(err.class, MPI_ERR_CONVERSION);
    }

    #[test]
    fn a_short_source_converts_the_whole_scalars_it_holds() {
        // Two MPI_LONG_INT values (4 + 4 external bytes each, 8 + 4 native) from 10 bytes:
        // the first value and the long of the second.
        let dt = Datatype::builtin(Builtin::LongInt);
        let src = [0, 0, 0, 1, 0, 0, 0, 2, 0, 0];
        let mut native = [0xaau8; 24];
        assert_eq!(unpack(&dt, 2, &src[..10], &mut native), 12);
        assert_eq!(&native[..8], &1i64.to_le_bytes());
        assert_eq!(&native[8..12], &2i32.to_le_bytes());
        let ext = [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        assert_eq!(unpack(&dt, 2, &ext, &mut native), 20);
        assert_eq!(&native[12..20], &3i64.to_le_bytes());
    }

    #[test]
    fn floats_and_complex_parts_swap_bytes() {
        assert_eq!(
            round_trip(Builtin::Float, &1.0f32.to_le_bytes()),
            [0x3f, 0x80, 0, 0]
        );
        let mut c = 1.0f32.to_le_bytes().to_vec();
        c.extend_from_slice(&2.0f32.to_le_bytes());
        assert_eq!(
            round_trip(Builtin::CFloatComplex, &c),
            [0x3f, 0x80, 0, 0, 0x40, 0, 0, 0]
        );
        assert_eq!(
            round_trip(Builtin::Double, &(-0.5f64).to_le_bytes()),
            [0xbf, 0xe0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn long_double_is_binary128() {
        // x87 1.0: significand 0x8000_0000_0000_0000, sign+exponent 0x3fff.
        let mut one = [0u8; 16];
        one[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
        one[8..10].copy_from_slice(&0x3fffu16.to_le_bytes());
        let ext = round_trip(Builtin::LongDouble, &one);
        let mut want = [0u8; 16];
        want[0] = 0x3f;
        want[1] = 0xff;
        assert_eq!(ext, want);
    }

    #[test]
    fn sizes_follow_the_external32_table() {
        let size = |b| element_size(&Datatype::builtin(b));
        assert_eq!(size(Builtin::Long), 4);
        assert_eq!(size(Builtin::Wchar), 2);
        assert_eq!(size(Builtin::LongDouble), 16);
        assert_eq!(size(Builtin::CLongDoubleComplex), 32);
        assert_eq!(size(Builtin::DoubleInt), 12);
        assert_eq!(size(Builtin::LongInt), 8);
        assert_eq!(size(Builtin::Logical), 4);
    }
}
