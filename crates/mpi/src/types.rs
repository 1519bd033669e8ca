//! Derived datatypes and user operations: what the entry points of `entry/datatypes.rs` (and the
//! operations of `entry/collectives.rs`) share over `datatype.rs` and `ops.rs`.

use crate::abi::*;
use crate::check::{out, slice};
use crate::datatype::{Builtin, Datatype, TypeError};
use crate::error::{fail, MpiError, Res};
use crate::p2p::count_arg;
use crate::state::{running, with, State, TypeObj};
use std::ffi::{c_int, c_void};

impl From<TypeError> for MpiError {
    fn from(e: TypeError) -> MpiError {
        let class = match e {
            TypeError::NegativeCount(_) => MPI_ERR_COUNT,
            _ => MPI_ERR_ARG,
        };
        MpiError::new(class, e.to_string())
    }
}

pub(crate) fn ints(v: &[c_int]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// Builds a new (uncommitted) type from `old` and writes its handle.
pub(crate) unsafe fn derive(
    old: Handle,
    newtype: *mut Handle,
    build: impl FnOnce(&Datatype) -> Result<Datatype, TypeError>,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `newtype`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let out = out(newtype, "newtype")?;
        *out = running(|s| {
            let old = s.datatype(old)?;
            let dt = build(&old)?;
            Ok(new_type(s, dt))
        })?;
        Ok(())
    }
}

/// Registers `dt` as a new, not yet committed, unnamed datatype.
pub(crate) fn new_type(s: &mut State, dt: Datatype) -> Handle {
    s.types.insert(TypeObj {
        dt,
        committed: false,
        name: String::new(),
    })
}

/// The body of `MPI_Type_create_hvector` (and of the removed `MPI_Type_hvector`).
pub(crate) unsafe fn hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `newtype`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        derive(oldtype, newtype, |old| {
            Datatype::hvector(count as i64, blocklength as i64, stride, old)
        })
    }
}

/// The body of `MPI_Type_create_hindexed` (and of the removed `MPI_Type_hindexed`).
pub(crate) unsafe fn hindexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `blocklengths`,
    // `displacements` and `newtype`, as the caller promises, are NULL or valid for what the MPI
    // call it serves reads and writes through them.
    unsafe {
        let n = count_arg(count)?;
        let (b, d) = (
            slice(blocklengths, n, "blocklengths")?,
            slice(displacements, n, "displacements")?,
        );
        derive(oldtype, newtype, |old| Datatype::hindexed(&ints(b), d, old))
    }
}

/// The body of `MPI_Type_create_struct` (and of the removed `MPI_Type_struct`).
pub(crate) unsafe fn create_struct(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    types: *const Handle,
    newtype: *mut Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `blocklengths`,
    // `displacements`, `types` and `newtype`, as the caller promises, are NULL or valid for what
    // the MPI call it serves reads and writes through them.
    unsafe {
        let n = count_arg(count)?;
        let (b, d, t) = (
            slice(blocklengths, n, "blocklengths")?,
            slice(displacements, n, "displacements")?,
            slice(types, n, "types")?,
        );
        let out = out(newtype, "newtype")?;
        *out = running(|s| {
            let members = t.iter().map(|&h| s.datatype(h)).collect::<Res<Vec<_>>>()?;
            let dt = Datatype::create_struct(&ints(b), d, &members)?;
            Ok(new_type(s, dt))
        })?;
        Ok(())
    }
}

pub(crate) fn dt(s: &mut State, h: Handle) -> Res<Datatype> {
    s.datatype(h)
}

/// The datatype behind handle `h` (predefined or derived), for the calls that only read it.
pub(crate) fn datatype_of(h: Handle) -> Res<Datatype> {
    running(|s| dt(s, h))
}

/// The predefined type behind `h` while MPI runs: what the queries below answer without
/// entering the state.
pub(crate) fn predefined(h: Handle) -> Option<Builtin> {
    crate::datatype::builtin_from_handle(h).filter(|_| crate::state::is_running())
}

/// Answers a query about datatype `h`: `builtin` for a predefined type, from its table
/// without entering the state (some programs ask per element: MPICH's dtpools checks call
/// MPI_Type_size millions of times, and MPICH answers from the handle's bits), else `derived`.
pub(crate) fn query<T>(
    h: Handle,
    builtin: impl FnOnce(Builtin) -> T,
    derived: impl FnOnce(&Datatype) -> T,
) -> Res<T> {
    match predefined(h) {
        Some(b) => Ok(builtin(b)),
        None => running(|s| dt(s, h)).map(|t| derived(&t)),
    }
}

/// MPI_Type_get_contents(_c): `max` is (integers, addresses, large counts, datatypes).
/// Safety: the arrays have room for the `max` elements (MPI's contract); fewer than the
/// envelope says is reported. `large` selects the `_c` layout.
pub(crate) unsafe fn get_contents(
    datatype: Handle,
    max: (usize, usize, usize, usize),
    integers: *mut c_int,
    addresses: *mut isize,
    large_counts: *mut i64,
    datatypes: *mut Handle,
    large: bool,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `integers`, `addresses`,
    // `large_counts` and `datatypes`, as the caller promises, are NULL or valid for what the MPI
    // call it serves reads and writes through them.
    unsafe {
        let (max_integers, max_addresses, max_large_counts, max_datatypes) = max;
        running(|s| {
            let t = dt(s, datatype)?;
            if (t.as_builtin().is_some() || t.as_marker().is_some())
                && s.types.get(datatype).is_none()
            {
                return fail(
                    MPI_ERR_TYPE,
                    "MPI_Type_get_contents of a predefined datatype",
                );
            }
            let c = if large { t.contents_c() } else { t.contents() };
            if !large && c.needs_large_counts() {
                return fail(
                    MPI_ERR_TYPE,
                    "the type holds counts beyond int: use MPI_Type_get_contents_c",
                );
            }
            if c.integers.len() > max_integers
                || c.addresses.len() > max_addresses
                || c.large_counts.len() > max_large_counts
                || c.datatypes.len() > max_datatypes
            {
                return fail(
                    MPI_ERR_ARG,
                    "the output arrays are shorter than MPI_Type_get_envelope says",
                );
            }
            for (i, &v) in c.integers.iter().enumerate() {
                *integers.add(i) = v as c_int;
            }
            for (i, &v) in c.addresses.iter().enumerate() {
                *addresses.add(i) = v;
            }
            for (i, &v) in c.large_counts.iter().enumerate() {
                *large_counts.add(i) = v;
            }
            for (i, d) in c.datatypes.iter().enumerate() {
                *datatypes.add(i) = match d.as_builtin() {
                    Some(b) => b.handle(),
                    None => s.types.insert(TypeObj {
                        dt: d.clone(),
                        committed: true,
                        name: String::new(),
                    }),
                };
            }
            Ok(())
        })
    }
}

/// The committed `datatype` and the packed size of `count` of it, which must fit a buffer of
/// `size` bytes from `start` (MPI_ERR_TRUNCATE for `call` if not).
fn packed_span(
    call: &str,
    datatype: Handle,
    count: usize,
    comm: Handle,
    start: usize,
    size: usize,
) -> Res<(Datatype, usize)> {
    let t = running(|s| {
        s.comm(comm)?;
        s.committed_type(datatype)
    })?;
    let need = bytes_of(&t, count)?;
    check_room(call, need, start, size)?;
    Ok((t, need))
}

/// `need` packed bytes must fit a buffer of `size` bytes from `start` (MPI_ERR_TRUNCATE for
/// `call` if not): the check of every pack and unpack call.
pub(crate) fn check_room(call: &str, need: usize, start: usize, size: usize) -> Res {
    if start.checked_add(need).is_none_or(|end| end > size) {
        return fail(
            MPI_ERR_TRUNCATE,
            format!("{call} needs {need} bytes at position {start} of a {size}-byte buffer"),
        );
    }
    Ok(())
}

/// MPI_Pack(_c): packs `count` elements into `outbuf` of `size` bytes at `start`; gives the
/// position after them.
pub(crate) unsafe fn pack_at(
    inbuf: *const c_void,
    count: usize,
    datatype: Handle,
    (outbuf, size): (*mut c_void, usize),
    start: usize,
    comm: Handle,
) -> Res<usize> {
    // SAFETY: this function's contract is the unsafe operations' own: `inbuf`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let (t, need) = packed_span("MPI_Pack", datatype, count, comm, start, size)?;
        crate::check::buffer(inbuf, count, &t)?;
        crate::check::bytes(outbuf, start + need)?;
        let dst = std::slice::from_raw_parts_mut((outbuf as *mut u8).add(start), need);
        t.pack(inbuf as *const u8, count, dst);
        Ok(start + need)
    }
}

/// MPI_Unpack(_c): unpacks `count` elements from `inbuf` of `size` bytes at `start`; gives
/// the position after them.
pub(crate) unsafe fn unpack_at(
    (inbuf, size): (*const c_void, usize),
    start: usize,
    outbuf: *mut c_void,
    count: usize,
    datatype: Handle,
    comm: Handle,
) -> Res<usize> {
    // SAFETY: this function's contract is the unsafe operations' own: `outbuf`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let (t, need) = packed_span("MPI_Unpack", datatype, count, comm, start, size)?;
        crate::check::bytes(inbuf, start + need)?;
        crate::check::buffer(outbuf, count, &t)?;
        let src = std::slice::from_raw_parts((inbuf as *const u8).add(start), need);
        t.unpack(src, count, outbuf as *mut u8);
        Ok(start + need)
    }
}

/// Data bytes of `count` elements of `t`, or MPI_ERR_COUNT when that overflows.
pub(crate) fn bytes_of(t: &Datatype, count: usize) -> Res<usize> {
    t.size().checked_mul(count).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!(
                "{count} elements of {} bytes overflow the address space",
                t.size()
            ),
        )
    })
}

/// A position argument as an int.
pub(crate) fn int_position(end: usize) -> Res<c_int> {
    c_int::try_from(end).map_err(|_| {
        MpiError::new(
            MPI_ERR_ARG,
            format!("position {end} does not fit an int (use the _c call)"),
        )
    })
}

// ---- operations ----

// ---- datatype attributes ----

type TypeCopyFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
type TypeDeleteFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;

pub(crate) fn keyval_of(s: &State, keyval: c_int) -> Res<crate::state::Keyval> {
    s.keyval(keyval, crate::state::AttrKind::Type)
}

pub(crate) unsafe fn type_delete(datatype: Handle, keyval: c_int, value: *mut c_void) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `value`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let kv = with(|s| keyval_of(s, keyval))?;
        if kv.delete > 1 {
            // SAFETY: registered by MPI_Type_create_keyval with this signature.
            let f = std::mem::transmute::<usize, TypeDeleteFn>(kv.delete);
            let rc = f(datatype, keyval, value, kv.extra);
            if rc != MPI_SUCCESS {
                return fail(
                    rc,
                    format!("attribute delete callback of keyval {keyval} failed"),
                );
            }
        }
        Ok(())
    }
}

/// Runs the copy callbacks of `old`'s attributes for its duplicate `new`.
pub(crate) unsafe fn copy_type_attrs(old: Handle, new: Handle) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        let attrs: Vec<(c_int, *mut c_void)> = with(|s| {
            Ok(s.type_attrs
                .get(&old)
                .map(|m| m.iter().map(|(&k, &v)| (k, v)).collect())
                .unwrap_or_default())
        })?;
        for (keyval, value) in attrs {
            let kv = with(|s| keyval_of(s, keyval))?;
            let copied = match kv.copy {
                0 => None,
                1 => Some(value),
                f => {
                    // SAFETY: registered by MPI_Type_create_keyval with this signature.
                    let f = std::mem::transmute::<usize, TypeCopyFn>(f);
                    let (mut out, mut flag): (*mut c_void, c_int) = (std::ptr::null_mut(), 0);
                    let rc = f(
                        old,
                        keyval,
                        kv.extra,
                        value,
                        &mut out as *mut _ as *mut c_void,
                        &mut flag,
                    );
                    if rc != MPI_SUCCESS {
                        return fail(
                            rc,
                            format!("attribute copy callback of keyval {keyval} failed"),
                        );
                    }
                    (flag != 0).then_some(out)
                }
            };
            if let Some(v) = copied {
                with(|s| {
                    s.type_attrs.entry(new).or_default().insert(keyval, v);
                    Ok(())
                })?;
            }
        }
        Ok(())
    }
}

/// Deletes every attribute of a datatype being freed.
pub(crate) unsafe fn delete_type_attrs(datatype: Handle) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        let attrs = with(|s| Ok(s.type_attrs.remove(&datatype)))?;
        for (keyval, value) in attrs.unwrap_or_default() {
            type_delete(datatype, keyval, value)?;
        }
        Ok(())
    }
}

// ---- Fortran-size matching ----

/// `MPI_TYPECLASS_*` (MPI-5 ABI values).
pub(crate) const TYPECLASS_INTEGER: c_int = 192;
pub(crate) const TYPECLASS_REAL: c_int = 193;
pub(crate) const TYPECLASS_COMPLEX: c_int = 194;

// ---- parameterized Fortran 90 types ----

/// `MPI_Type_create_f90_integer`'s choice, as Fortran's `SELECTED_INT_KIND(r)` on x86-64:
/// the smallest integer holding every value of `r` decimal digits.
pub(crate) fn f90_integer(r: c_int) -> Res<Builtin> {
    if r == MPI_UNDEFINED {
        return fail(
            MPI_ERR_ARG,
            "the range r of MPI_Type_create_f90_integer is MPI_UNDEFINED",
        );
    }
    Ok(match r {
        ..=2 => Builtin::Integer1,
        3..=4 => Builtin::Integer2,
        5..=9 => Builtin::Integer4,
        10..=18 => Builtin::Integer8,
        19..=38 => Builtin::Integer16,
        _ => {
            return fail(
                MPI_ERR_ARG,
                format!("no integer type has a decimal range of {r}"),
            )
        }
    })
}

/// `MPI_Type_create_f90_real`'s choice, as `SELECTED_REAL_KIND(p, r)`: the smallest real of at
/// least `p` decimal digits of precision and a decimal exponent range of at least `r`
/// (MPI_UNDEFINED: no requirement). `complex` picks the complex type of that real.
pub(crate) fn f90_real(p: c_int, r: c_int, complex: bool) -> Res<Builtin> {
    if p == MPI_UNDEFINED && r == MPI_UNDEFINED {
        return fail(MPI_ERR_ARG, "p and r are both MPI_UNDEFINED");
    }
    let need = |v: c_int| if v == MPI_UNDEFINED { 0 } else { v };
    let (p, r) = (need(p), need(r));
    // (precision, range, real, complex) of IEEE single and double, x87 extended (ferry's
    // `long double`, 16 bytes in memory) and IEEE quad.
    const KINDS: [(c_int, c_int, Builtin, Builtin); 4] = [
        (6, 37, Builtin::Real4, Builtin::Complex8),
        (15, 307, Builtin::Real8, Builtin::Complex16),
        (18, 4931, Builtin::LongDouble, Builtin::CLongDoubleComplex),
        (33, 4931, Builtin::Real16, Builtin::Complex32),
    ];
    match KINDS.iter().find(|k| p <= k.0 && r <= k.1) {
        Some(k) => Ok(if complex { k.3 } else { k.2 }),
        None => fail(
            MPI_ERR_ARG,
            format!("no real type has a precision of {p} digits and a range of {r}"),
        ),
    }
}

/// The handle of the F90 type of `combiner` with arguments `(p, r)` (`p` unused for integers):
/// made once, then the same handle for the same arguments.
pub(crate) unsafe fn f90_type(
    combiner: c_int,
    p: c_int,
    r: c_int,
    base: Builtin,
    newtype: *mut Handle,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `newtype`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let out = out(newtype, "newtype")?;
        *out = running(|s| {
            if let Some(&h) = s.f90_types.get(&(combiner, p, r)) {
                return Ok(h);
            }
            let args = if combiner == crate::datatype::combiner::F90_INTEGER {
                vec![r as i64]
            } else {
                vec![p as i64, r as i64]
            };
            let dt = Datatype::f90(combiner, args, base);
            let h = s.types.insert(TypeObj {
                dt,
                committed: true,
                name: String::new(),
            });
            s.f90_types.insert((combiner, p, r), h);
            Ok(h)
        })?;
        Ok(())
    }
}

// ---- large counts (MPI 4.0 `_c` bindings) ----

/// An `MPI_Count` that counts elements or bytes in memory.
pub(crate) fn size_c(c: i64, what: &str) -> Res<usize> {
    usize::try_from(c).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("negative {what} {c}")))
}

/// `MPI_Count` byte displacements as addresses.
pub(crate) fn addrs(v: &[i64]) -> Res<Vec<isize>> {
    v.iter()
        .map(|&d| {
            isize::try_from(d).map_err(|_| {
                MpiError::new(
                    MPI_ERR_ARG,
                    format!("displacement {d} is not an address here"),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod f90_tests {
    use super::*;

    #[test]
    fn integers_follow_selected_int_kind() {
        let pick = |r| f90_integer(r).ok();
        assert_eq!(pick(0), Some(Builtin::Integer1));
        assert_eq!(pick(2), Some(Builtin::Integer1));
        assert_eq!(pick(3), Some(Builtin::Integer2));
        assert_eq!(pick(9), Some(Builtin::Integer4));
        assert_eq!(pick(10), Some(Builtin::Integer8));
        assert_eq!(pick(38), Some(Builtin::Integer16));
        assert_eq!(
            f90_integer(39).map_err(|e| e.class).err(),
            Some(MPI_ERR_ARG)
        );
        assert_eq!(
            f90_integer(MPI_UNDEFINED).map_err(|e| e.class).err(),
            Some(MPI_ERR_ARG)
        );
    }

    #[test]
    fn reals_follow_selected_real_kind() {
        let pick = |p, r| f90_real(p, r, false).ok();
        assert_eq!(pick(3, 10), Some(Builtin::Real4));
        assert_eq!(pick(3, MPI_UNDEFINED), Some(Builtin::Real4));
        assert_eq!(pick(MPI_UNDEFINED, 30), Some(Builtin::Real4));
        assert_eq!(pick(7, 30), Some(Builtin::Real8));
        assert_eq!(pick(6, 38), Some(Builtin::Real8));
        assert_eq!(pick(16, MPI_UNDEFINED), Some(Builtin::LongDouble));
        assert_eq!(pick(30, 4000), Some(Builtin::Real16));
        assert_eq!(f90_real(7, 30, true).ok(), Some(Builtin::Complex16));
        let err = |p, r| f90_real(p, r, false).map_err(|e| e.class).err();
        assert_eq!(err(34, 1), Some(MPI_ERR_ARG));
        assert_eq!(err(1, 5000), Some(MPI_ERR_ARG));
        assert_eq!(err(MPI_UNDEFINED, MPI_UNDEFINED), Some(MPI_ERR_ARG));
    }
}
