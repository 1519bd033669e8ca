//! Derived datatypes and user operations: the C functions over `datatype.rs` and `ops.rs`.

use crate::abi::*;
use crate::check::{out, slice};
use crate::datatype::{Builtin, Datatype, Distrib, Order, TypeError};
use crate::env::write_string;
use crate::error::{fail, MpiError, Res};
use crate::p2p::count_arg;
use crate::state::{running, with, OpObj, State, TypeObj, UserFn, UserOpFn, UserOpFnC};
use crate::NONE;
use std::ffi::{c_char, c_int, c_void, CStr};

impl From<TypeError> for MpiError {
    fn from(e: TypeError) -> MpiError {
        let class = match e {
            TypeError::NegativeCount(_) => MPI_ERR_COUNT,
            _ => MPI_ERR_ARG,
        };
        MpiError::new(class, e.to_string())
    }
}

fn ints(v: &[c_int]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// Builds a new (uncommitted) type from `old` and writes its handle.
unsafe fn derive(
    old: Handle,
    newtype: *mut Handle,
    build: impl FnOnce(&Datatype) -> Result<Datatype, TypeError>,
) -> Res {
    let out = out(newtype, "newtype")?;
    *out = running(|s| {
        let old = s.datatype(old)?;
        let dt = build(&old)?;
        Ok(new_type(s, dt))
    })?;
    Ok(())
}

/// Registers `dt` as a new, not yet committed, unnamed datatype.
fn new_type(s: &mut State, dt: Datatype) -> Handle {
    s.types.insert(TypeObj {
        dt,
        committed: false,
        name: String::new(),
    })
}

mpi! {
    /// `count` copies of a type.
    fn MPI_Type_contiguous / PMPI_Type_contiguous(count: c_int, oldtype: Handle, newtype: *mut Handle) on NONE => {
        derive(oldtype, newtype, |old| Datatype::contiguous(count as i64, old))
    }
}
mpi! {
    /// Strided blocks, stride in elements.
    fn MPI_Type_vector / PMPI_Type_vector(count: c_int, blocklength: c_int, stride: c_int, oldtype: Handle, newtype: *mut Handle) on NONE => {
        derive(oldtype, newtype, |old| Datatype::vector(count as i64, blocklength as i64, stride as i64, old))
    }
}
mpi! {
    /// Strided blocks, stride in bytes.
    fn MPI_Type_create_hvector / PMPI_Type_create_hvector(count: c_int, blocklength: c_int, stride: isize, oldtype: Handle, newtype: *mut Handle) on NONE => {
        hvector(count, blocklength, stride, oldtype, newtype)
    }
}

/// The body of `MPI_Type_create_hvector` (and of the removed `MPI_Type_hvector`).
pub(crate) unsafe fn hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> Res {
    derive(oldtype, newtype, |old| {
        Datatype::hvector(count as i64, blocklength as i64, stride, old)
    })
}
mpi! {
    /// Blocks at element displacements.
    fn MPI_Type_indexed / PMPI_Type_indexed(count: c_int, blocklengths: *const c_int, displacements: *const c_int, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let n = count_arg(count)?;
        let (b, d) = (slice(blocklengths, n, "blocklengths")?, slice(displacements, n, "displacements")?);
        derive(oldtype, newtype, |old| Datatype::indexed(&ints(b), &ints(d), old))
    }
}
mpi! {
    /// Blocks at byte displacements.
    fn MPI_Type_create_hindexed / PMPI_Type_create_hindexed(count: c_int, blocklengths: *const c_int, displacements: *const isize, oldtype: Handle, newtype: *mut Handle) on NONE => {
        hindexed(count, blocklengths, displacements, oldtype, newtype)
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
    let n = count_arg(count)?;
    let (b, d) = (
        slice(blocklengths, n, "blocklengths")?,
        slice(displacements, n, "displacements")?,
    );
    derive(oldtype, newtype, |old| Datatype::hindexed(&ints(b), d, old))
}
mpi! {
    /// Equal blocks at element displacements.
    fn MPI_Type_create_indexed_block / PMPI_Type_create_indexed_block(count: c_int, blocklength: c_int, displacements: *const c_int, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let d = slice(displacements, count_arg(count)?, "displacements")?;
        derive(oldtype, newtype, |old| Datatype::indexed_block(blocklength as i64, &ints(d), old))
    }
}
mpi! {
    /// Equal blocks at byte displacements.
    fn MPI_Type_create_hindexed_block / PMPI_Type_create_hindexed_block(count: c_int, blocklength: c_int, displacements: *const isize, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let d = slice(displacements, count_arg(count)?, "displacements")?;
        derive(oldtype, newtype, |old| Datatype::hindexed_block(blocklength as i64, d, old))
    }
}
mpi! {
    /// Blocks of different types at byte displacements.
    fn MPI_Type_create_struct / PMPI_Type_create_struct(count: c_int, blocklengths: *const c_int, displacements: *const isize, types: *const Handle, newtype: *mut Handle) on NONE => {
        create_struct(count, blocklengths, displacements, types, newtype)
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
mpi! {
    /// A type with new bounds.
    fn MPI_Type_create_resized / PMPI_Type_create_resized(oldtype: Handle, lb: isize, extent: isize, newtype: *mut Handle) on NONE => {
        derive(oldtype, newtype, |old| Datatype::resized(old, lb, extent))
    }
}
mpi! {
    /// A block of a multidimensional array.
    fn MPI_Type_create_subarray / PMPI_Type_create_subarray(ndims: c_int, sizes: *const c_int, subsizes: *const c_int, starts: *const c_int, order: c_int, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let n = count_arg(ndims)?;
        let (a, b, c) = (slice(sizes, n, "sizes")?, slice(subsizes, n, "subsizes")?, slice(starts, n, "starts")?);
        let Some(order) = Order::from_abi(order) else { return fail(MPI_ERR_ARG, format!("invalid array order {order}")) };
        derive(oldtype, newtype, |old| Datatype::subarray(&ints(a), &ints(b), &ints(c), order, old))
    }
}
mpi! {
    /// MPI_Type_create_subarray with MPI_Count sizes, subsizes and starts.
    fn MPI_Type_create_subarray_c / PMPI_Type_create_subarray_c(ndims: c_int, sizes: *const i64, subsizes: *const i64, starts: *const i64, order: c_int, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let n = count_arg(ndims)?;
        let (a, b, c) = (slice(sizes, n, "sizes")?, slice(subsizes, n, "subsizes")?, slice(starts, n, "starts")?);
        let Some(order) = Order::from_abi(order) else { return fail(MPI_ERR_ARG, format!("invalid array order {order}")) };
        derive(oldtype, newtype, |old| Datatype::subarray(a, b, c, order, old))
    }
}
mpi! {
    /// A copy of a type.
    fn MPI_Type_dup / PMPI_Type_dup(oldtype: Handle, newtype: *mut Handle) on NONE => {
        let out = out(newtype, "newtype")?;
        *out = running(|s| {
            let committed = s.types.get(oldtype).is_none_or(|o| o.committed);
            let dt = Datatype::dup(&s.datatype(oldtype)?);
            Ok(s.types.insert(TypeObj { dt, committed, name: String::new() }))
        })?;
        copy_type_attrs(oldtype, *out)
    }
}
mpi! {
    /// Makes a type usable for communication.
    fn MPI_Type_commit / PMPI_Type_commit(datatype: *mut Handle) on NONE => {
        let h = *out(datatype, "datatype")?;
        running(|s| {
            s.datatype(h)?;
            if let Some(obj) = s.types.get_mut(h) {
                obj.dt.commit();
                obj.committed = true;
            }
            Ok(())
        })
    }
}
mpi! {
    /// Frees a type (communication already started with it goes on).
    fn MPI_Type_free / PMPI_Type_free(datatype: *mut Handle) on NONE => {
        let h = out(datatype, "datatype")?;
        if running(|s| Ok(s.types.get(*h).is_some()))? {
            delete_type_attrs(*h)?;
        }
        running(|s| {
            if s.types.get(*h).is_some_and(|o| o.dt.is_f90()) {
                return fail(MPI_ERR_TYPE, "the types of MPI_Type_create_f90_* are predefined and cannot be freed");
            }
            if s.types.get(*h).is_some() && crate::coll::defer_free(s, *h) {
                return Ok(());
            }
            if s.types.remove(*h).is_none() {
                s.datatype(*h)?;
                return fail(MPI_ERR_TYPE, "predefined datatypes cannot be freed");
            }
            Ok(())
        })?;
        *h = MPI_DATATYPE_NULL;
        Ok(())
    }
}

fn dt(s: &mut State, h: Handle) -> Res<Datatype> {
    s.datatype(h)
}

/// The datatype behind handle `h` (predefined or derived), for the calls that only read it.
pub(crate) fn datatype_of(h: Handle) -> Res<Datatype> {
    running(|s| dt(s, h))
}

/// The predefined type behind `h` while MPI runs: what the queries below answer without
/// entering the state.
fn predefined(h: Handle) -> Option<Builtin> {
    crate::datatype::builtin_from_handle(h).filter(|_| crate::state::is_running())
}

/// Answers a query about datatype `h`: `builtin` for a predefined type, from its table
/// without entering the state (some programs ask per element: MPICH's dtpools checks call
/// MPI_Type_size millions of times, and MPICH answers from the handle's bits), else `derived`.
fn query<T>(
    h: Handle,
    builtin: impl FnOnce(Builtin) -> T,
    derived: impl FnOnce(&Datatype) -> T,
) -> Res<T> {
    match predefined(h) {
        Some(b) => Ok(builtin(b)),
        None => running(|s| dt(s, h)).map(|t| derived(&t)),
    }
}

mpi! {
    /// Lower bound and extent.
    fn MPI_Type_get_extent / PMPI_Type_get_extent(datatype: Handle, lb: *mut isize, extent: *mut isize) on NONE => {
        let (l, e) = query(datatype, |b| (0, b.extent() as isize), |t| (t.lb(), t.extent()))?;
        (*out(lb, "lb")?, *out(extent, "extent")?) = (l, e);
        Ok(())
    }
}
mpi! {
    /// Lower bound and extent (MPI_Count).
    fn MPI_Type_get_extent_x / PMPI_Type_get_extent_x(datatype: Handle, lb: *mut i64, extent: *mut i64) on NONE => {
        let (l, e) = query(datatype, |b| (0, b.extent() as isize), |t| (t.lb(), t.extent()))?;
        (*out(lb, "lb")?, *out(extent, "extent")?) = (l as i64, e as i64);
        Ok(())
    }
}
mpi! {
    /// Bounds of the data itself.
    fn MPI_Type_get_true_extent / PMPI_Type_get_true_extent(datatype: Handle, lb: *mut isize, extent: *mut isize) on NONE => {
        let (l, e) = query(datatype, |b| (0, b.true_extent() as isize), |t| (t.true_lb(), t.true_extent()))?;
        (*out(lb, "lb")?, *out(extent, "extent")?) = (l, e);
        Ok(())
    }
}
mpi! {
    /// Bounds of the data itself (MPI_Count).
    fn MPI_Type_get_true_extent_x / PMPI_Type_get_true_extent_x(datatype: Handle, lb: *mut i64, extent: *mut i64) on NONE => {
        let (l, e) = query(datatype, |b| (0, b.true_extent() as isize), |t| (t.true_lb(), t.true_extent()))?;
        (*out(lb, "lb")?, *out(extent, "extent")?) = (l as i64, e as i64);
        Ok(())
    }
}
mpi! {
    /// Data bytes of one element. A predefined type's size is answered before the guard: it is a
    /// table lookup that cannot fail or panic, and programs call it per element (see `query`).
    fn MPI_Type_size / PMPI_Type_size(datatype: Handle, size: *mut c_int) -> c_int, unguarded => {
        if let (Some(b), Some(out)) = (predefined(datatype), size.as_mut()) {
            *out = b.size() as c_int;
            return MPI_SUCCESS;
        }
        crate::error::guard("MPI_Type_size", NONE, || {
            let bytes = query(datatype, Builtin::size, Datatype::size)?;
            *out(size, "size")? = c_int::try_from(bytes).unwrap_or(MPI_UNDEFINED);
            Ok(())
        })
    }
}
mpi! {
    /// Data bytes of one element (MPI_Count).
    fn MPI_Type_size_x / PMPI_Type_size_x(datatype: Handle, size: *mut i64) on NONE => {
        *out(size, "size")? = query(datatype, Builtin::size, Datatype::size)? as i64;
        Ok(())
    }
}
mpi! {
    /// How a type was built: argument counts and combiner.
    fn MPI_Type_get_envelope / PMPI_Type_get_envelope(datatype: Handle, num_integers: *mut c_int, num_addresses: *mut c_int, num_datatypes: *mut c_int, combiner: *mut c_int) on NONE => {
        let t = running(|s| dt(s, datatype))?;
        if t.envelope_c().num_large_counts > 0 {
            return fail(MPI_ERR_TYPE, "the type holds counts beyond int: use MPI_Type_get_envelope_c");
        }
        let e = t.envelope();
        *out(num_integers, "num_integers")? = e.num_integers as c_int;
        *out(num_addresses, "num_addresses")? = e.num_addresses as c_int;
        *out(num_datatypes, "num_datatypes")? = e.num_datatypes as c_int;
        *out(combiner, "combiner")? = e.combiner;
        Ok(())
    }
}
mpi! {
    /// MPI_Type_get_envelope with MPI_Count lengths (`num_large_counts` is 0 unless a count
    /// does not fit an int).
    fn MPI_Type_get_envelope_c / PMPI_Type_get_envelope_c(datatype: Handle, num_integers: *mut i64, num_addresses: *mut i64, num_large_counts: *mut i64, num_datatypes: *mut i64, combiner: *mut c_int) on NONE => {
        let e = running(|s| dt(s, datatype))?.envelope_c();
        *out(num_integers, "num_integers")? = e.num_integers as i64;
        *out(num_addresses, "num_addresses")? = e.num_addresses as i64;
        *out(num_large_counts, "num_large_counts")? = e.num_large_counts as i64;
        *out(num_datatypes, "num_datatypes")? = e.num_datatypes as i64;
        *out(combiner, "combiner")? = e.combiner;
        Ok(())
    }
}
mpi! {
    /// The arguments a type was built with.
    fn MPI_Type_get_contents / PMPI_Type_get_contents(datatype: Handle, max_integers: c_int, max_addresses: c_int, max_datatypes: c_int,
        integers: *mut c_int, addresses: *mut isize, datatypes: *mut Handle) on NONE => {
        let max = (count_arg(max_integers)?, count_arg(max_addresses)?, 0, count_arg(max_datatypes)?);
        get_contents(datatype, max, integers, addresses, std::ptr::null_mut(), datatypes, false)
    }
}
mpi! {
    /// MPI_Type_get_contents with MPI_Count lengths (large counts as MPI_Type_get_envelope_c
    /// says).
    fn MPI_Type_get_contents_c / PMPI_Type_get_contents_c(datatype: Handle, max_integers: i64, max_addresses: i64, max_large_counts: i64, max_datatypes: i64,
        integers: *mut c_int, addresses: *mut isize, large_counts: *mut i64, datatypes: *mut Handle) on NONE => {
        let max = (size_c(max_integers, "max_integers")?, size_c(max_addresses, "max_addresses")?, size_c(max_large_counts, "max_large_counts")?, size_c(max_datatypes, "max_datatypes")?);
        get_contents(datatype, max, integers, addresses, large_counts, datatypes, true)
    }
}

/// MPI_Type_get_contents(_c): `max` is (integers, addresses, large counts, datatypes).
/// Safety: the arrays have room for the `max` elements (MPI's contract); fewer than the
/// envelope says is reported. `large` selects the `_c` layout.
unsafe fn get_contents(
    datatype: Handle,
    max: (usize, usize, usize, usize),
    integers: *mut c_int,
    addresses: *mut isize,
    large_counts: *mut i64,
    datatypes: *mut Handle,
    large: bool,
) -> Res {
    let (max_integers, max_addresses, max_large_counts, max_datatypes) = max;
    running(|s| {
        let t = dt(s, datatype)?;
        if (t.as_builtin().is_some() || t.as_marker().is_some()) && s.types.get(datatype).is_none()
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
mpi! {
    /// Names a type.
    fn MPI_Type_set_name / PMPI_Type_set_name(datatype: Handle, name: *const c_char) on NONE => {
        if name.is_null() {
            return fail(MPI_ERR_ARG, "name is NULL");
        }
        let text: String = CStr::from_ptr(name).to_string_lossy().chars().take(MPI_MAX_OBJECT_NAME - 1).collect();
        running(|s| match s.types.get_mut(datatype) {
            Some(obj) => { obj.name = text; Ok(()) }
            None => {
                dt(s, datatype)?;
                s.builtin_names.insert(datatype, text);
                Ok(())
            }
        })
    }
}
mpi! {
    /// A type's name; "MPI_DATATYPE_NULL" for the null handle, which MPI 4.1 allows here.
    fn MPI_Type_get_name / PMPI_Type_get_name(datatype: Handle, name: *mut c_char, resultlen: *mut c_int) on NONE => {
        if datatype == MPI_DATATYPE_NULL {
            return write_string("MPI_DATATYPE_NULL", name, MPI_MAX_OBJECT_NAME, resultlen);
        }
        let text = running(|s| match s.types.get(datatype) {
            Some(obj) => Ok(obj.name.clone()),
            None => match s.builtin_names.get(&datatype) {
                Some(n) => Ok(n.clone()),
                None => {
                    let t = dt(s, datatype)?;
                    let name = t.as_marker().map(|m| m.name()).or(t.as_builtin().map(Builtin::type_name));
                    Ok(name.unwrap_or("").to_string())
                }
            },
        })?;
        write_string(&text, name, MPI_MAX_OBJECT_NAME, resultlen)
    }
}
mpi! {
    /// The address of a location (for MPI_BOTTOM-relative types).
    fn MPI_Get_address / PMPI_Get_address(location: *const c_void, address: *mut isize) on NONE => {
        *out(address, "address")? = location as isize;
        Ok(())
    }
}

mpi! {
    /// MPI_Aint_add: `base + disp` as addresses.
    fn MPI_Aint_add / PMPI_Aint_add(base: isize, disp: isize) -> isize, unguarded => {
        base.wrapping_add(disp)
    }
}
mpi! {
    /// MPI_Aint_diff: `addr1 - addr2` as addresses.
    fn MPI_Aint_diff / PMPI_Aint_diff(addr1: isize, addr2: isize) -> isize, unguarded => {
        addr1.wrapping_sub(addr2)
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
unsafe fn pack_at(
    inbuf: *const c_void,
    count: usize,
    datatype: Handle,
    (outbuf, size): (*mut c_void, usize),
    start: usize,
    comm: Handle,
) -> Res<usize> {
    let (t, need) = packed_span("MPI_Pack", datatype, count, comm, start, size)?;
    crate::check::buffer(inbuf, count, &t)?;
    crate::check::bytes(outbuf, start + need)?;
    let dst = std::slice::from_raw_parts_mut((outbuf as *mut u8).add(start), need);
    t.pack(inbuf as *const u8, count, dst);
    Ok(start + need)
}

/// MPI_Unpack(_c): unpacks `count` elements from `inbuf` of `size` bytes at `start`; gives
/// the position after them.
unsafe fn unpack_at(
    (inbuf, size): (*const c_void, usize),
    start: usize,
    outbuf: *mut c_void,
    count: usize,
    datatype: Handle,
    comm: Handle,
) -> Res<usize> {
    let (t, need) = packed_span("MPI_Unpack", datatype, count, comm, start, size)?;
    crate::check::bytes(inbuf, start + need)?;
    crate::check::buffer(outbuf, count, &t)?;
    let src = std::slice::from_raw_parts((inbuf as *const u8).add(start), need);
    t.unpack(src, count, outbuf as *mut u8);
    Ok(start + need)
}

/// Data bytes of `count` elements of `t`, or MPI_ERR_COUNT when that overflows.
fn bytes_of(t: &Datatype, count: usize) -> Res<usize> {
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
fn int_position(end: usize) -> Res<c_int> {
    c_int::try_from(end).map_err(|_| {
        MpiError::new(
            MPI_ERR_ARG,
            format!("position {end} does not fit an int (use the _c call)"),
        )
    })
}

mpi! {
    /// Packs elements into a byte buffer at `*position`.
    fn MPI_Pack / PMPI_Pack(inbuf: *const c_void, incount: c_int, datatype: Handle, outbuf: *mut c_void, outsize: c_int, position: *mut c_int, comm: Handle) on comm => {
        let pos = out(position, "position")?;
        let end = pack_at(inbuf, count_arg(incount)?, datatype, (outbuf, count_arg(outsize)?), count_arg(*pos)?, comm)?;
        *pos = int_position(end)?;
        Ok(())
    }
}
mpi! {
    /// Unpacks elements from a byte buffer at `*position`.
    fn MPI_Unpack / PMPI_Unpack(inbuf: *const c_void, insize: c_int, position: *mut c_int, outbuf: *mut c_void, outcount: c_int, datatype: Handle, comm: Handle) on comm => {
        let pos = out(position, "position")?;
        let end = unpack_at((inbuf, count_arg(insize)?), count_arg(*pos)?, outbuf, count_arg(outcount)?, datatype, comm)?;
        *pos = int_position(end)?;
        Ok(())
    }
}
mpi! {
    /// Upper bound of the bytes MPI_Pack needs.
    fn MPI_Pack_size / PMPI_Pack_size(incount: c_int, datatype: Handle, comm: Handle, size: *mut c_int) on comm => {
        let t = running(|s| { s.comm(comm)?; s.datatype(datatype) })?;
        *out(size, "size")? = c_int::try_from(t.size() * count_arg(incount)?).unwrap_or(MPI_UNDEFINED);
        Ok(())
    }
}

// ---- operations ----

mpi! {
    /// A user reduction operation.
    fn MPI_Op_create / PMPI_Op_create(function: Option<UserOpFn>, commute: c_int, op: *mut Handle) on NONE => {
        let Some(f) = function else { return fail(MPI_ERR_ARG, "operation function is NULL") };
        let out = out(op, "op")?;
        *out = running(|s| Ok(s.ops.insert(OpObj::User { f: UserFn::Int(f), commute: commute != 0 })))?;
        Ok(())
    }
}
mpi! {
    /// A user reduction operation whose function takes an MPI_Count length (MPI 4.0).
    fn MPI_Op_create_c / PMPI_Op_create_c(function: Option<UserOpFnC>, commute: c_int, op: *mut Handle) on NONE => {
        let Some(f) = function else { return fail(MPI_ERR_ARG, "operation function is NULL") };
        let out = out(op, "op")?;
        *out = running(|s| Ok(s.ops.insert(OpObj::User { f: UserFn::Count(f), commute: commute != 0 })))?;
        Ok(())
    }
}
mpi! {
    /// Frees a user operation.
    fn MPI_Op_free / PMPI_Op_free(op: *mut Handle) on NONE => {
        let h = out(op, "op")?;
        running(|s| {
            if s.ops.get(*h).is_some() && crate::coll::defer_free(s, *h) {
                return Ok(());
            }
            match s.ops.remove(*h) {
                Some(_) => Ok(()),
                None => { s.op(*h)?; fail(MPI_ERR_OP, "predefined operations cannot be freed") }
            }
        })?;
        *h = MPI_OP_NULL;
        Ok(())
    }
}
mpi! {
    /// Whether an operation is commutative.
    fn MPI_Op_commutative / PMPI_Op_commutative(op: Handle, commute: *mut c_int) on NONE => {
        let o = with(|s| s.op(op))?;
        *out(commute, "commute")? = match o { OpObj::Builtin(_) => 1, OpObj::User { commute, .. } => commute as c_int };
        Ok(())
    }
}
mpi! {
    /// `inout = in op inout`, locally.
    fn MPI_Reduce_local / PMPI_Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle) on NONE => {
        let (t, o) = running(|s| Ok((s.committed_type(datatype)?, s.op(op)?)))?;
        let n = count_arg(count)?;
        crate::coll::reduce_local(&t, datatype, o, n, inbuf as *const u8, inoutbuf as *mut u8)
    }
}

mpi! {
    /// The block of a distributed array that one process of a process grid owns.
    fn MPI_Type_create_darray / PMPI_Type_create_darray(size: c_int, rank: c_int, ndims: c_int, gsizes: *const c_int, distribs: *const c_int,
        dargs: *const c_int, psizes: *const c_int, order: c_int, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let n = count_arg(ndims)?;
        let (g, d, a, p) = (slice(gsizes, n, "gsizes")?, slice(distribs, n, "distribs")?, slice(dargs, n, "dargs")?, slice(psizes, n, "psizes")?);
        let dist = (0..n)
            .map(|i| Distrib::from_abi(d[i], a[i]).ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("invalid distribution {} / darg {} in dimension {i}", d[i], a[i]))))
            .collect::<Res<Vec<_>>>()?;
        let Some(order) = Order::from_abi(order) else { return fail(MPI_ERR_ARG, format!("invalid array order {order}")) };
        derive(oldtype, newtype, |old| Datatype::darray(size as i64, rank as i64, &ints(g), &dist, &ints(p), order, old))
    }
}
mpi! {
    /// MPI_Type_create_darray with MPI_Count global sizes.
    fn MPI_Type_create_darray_c / PMPI_Type_create_darray_c(size: c_int, rank: c_int, ndims: c_int, gsizes: *const i64, distribs: *const c_int,
        dargs: *const c_int, psizes: *const c_int, order: c_int, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let n = count_arg(ndims)?;
        let (g, d, a, p) = (slice(gsizes, n, "gsizes")?, slice(distribs, n, "distribs")?, slice(dargs, n, "dargs")?, slice(psizes, n, "psizes")?);
        let dist = (0..n)
            .map(|i| Distrib::from_abi(d[i], a[i]).ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("invalid distribution {} / darg {} in dimension {i}", d[i], a[i]))))
            .collect::<Res<Vec<_>>>()?;
        let Some(order) = Order::from_abi(order) else { return fail(MPI_ERR_ARG, format!("invalid array order {order}")) };
        derive(oldtype, newtype, |old| Datatype::darray(size as i64, rank as i64, g, &dist, &ints(p), order, old))
    }
}

// ---- datatype attributes ----

type TypeCopyFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
type TypeDeleteFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;

fn keyval_of(s: &State, keyval: c_int) -> Res<crate::state::Keyval> {
    s.keyval(keyval, crate::state::AttrKind::Type)
}

unsafe fn type_delete(datatype: Handle, keyval: c_int, value: *mut c_void) -> Res {
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

/// Runs the copy callbacks of `old`'s attributes for its duplicate `new`.
pub(crate) unsafe fn copy_type_attrs(old: Handle, new: Handle) -> Res {
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

/// Deletes every attribute of a datatype being freed.
pub(crate) unsafe fn delete_type_attrs(datatype: Handle) -> Res {
    let attrs = with(|s| Ok(s.type_attrs.remove(&datatype)))?;
    for (keyval, value) in attrs.unwrap_or_default() {
        type_delete(datatype, keyval, value)?;
    }
    Ok(())
}

mpi! {
    /// An attribute key for datatypes.
    fn MPI_Type_create_keyval / PMPI_Type_create_keyval(copy: usize, delete: usize, keyval: *mut c_int, extra: *mut c_void) on NONE => {
        crate::comm::create_keyval(copy, delete, keyval, extra, crate::state::AttrKind::Type)
    }
}
mpi! {
    /// Frees a datatype attribute key.
    fn MPI_Type_free_keyval / PMPI_Type_free_keyval(keyval: *mut c_int) on NONE => {
        crate::comm::free_keyval(keyval)
    }
}
mpi! {
    /// Sets a datatype attribute.
    fn MPI_Type_set_attr / PMPI_Type_set_attr(datatype: Handle, keyval: c_int, value: *mut c_void) on NONE => {
        let old = running(|s| {
            s.datatype(datatype)?;
            keyval_of(s, keyval)?;
            Ok(s.type_attrs.get(&datatype).and_then(|m| m.get(&keyval)).copied())
        })?;
        // The old value's delete callback runs first; if it fails, the old value stays.
        if let Some(v) = old {
            type_delete(datatype, keyval, v)?;
        }
        running(|s| {
            s.type_attrs.entry(datatype).or_default().insert(keyval, value);
            Ok(())
        })
    }
}
mpi! {
    /// Reads a datatype attribute.
    fn MPI_Type_get_attr / PMPI_Type_get_attr(datatype: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) on NONE => {
        let flag = out(flag, "flag")?;
        let found = running(|s| {
            s.datatype(datatype)?;
            keyval_of(s, keyval)?;
            Ok(s.type_attrs.get(&datatype).and_then(|m| m.get(&keyval)).copied())
        })?;
        match found {
            Some(v) => {
                *out(value as *mut *mut c_void, "attribute_val")? = v;
                *flag = 1;
            }
            None => *flag = 0,
        }
        Ok(())
    }
}
mpi! {
    /// Deletes a datatype attribute.
    fn MPI_Type_delete_attr / PMPI_Type_delete_attr(datatype: Handle, keyval: c_int) on NONE => {
        let old = running(|s| {
            s.datatype(datatype)?;
            keyval_of(s, keyval)?;
            Ok(s.type_attrs.get(&datatype).and_then(|m| m.get(&keyval)).copied())
        })?;
        let Some(v) = old else {
            return fail(MPI_ERR_KEYVAL, format!("no attribute for keyval {keyval}"));
        };
        // Removed only once its delete callback succeeds.
        type_delete(datatype, keyval, v)?;
        running(|s| {
            if let Some(m) = s.type_attrs.get_mut(&datatype) {
                m.remove(&keyval);
            }
            Ok(())
        })
    }
}

// ---- Fortran-size matching ----

/// `MPI_TYPECLASS_*` (MPI-5 ABI values).
const TYPECLASS_INTEGER: c_int = 192;
const TYPECLASS_REAL: c_int = 193;
const TYPECLASS_COMPLEX: c_int = 194;

mpi! {
    /// The predefined type of `typeclass` (MPI_TYPECLASS_INTEGER, _REAL or _COMPLEX) whose size
    /// is `size` bytes: the Fortran sized types, or the C type where ferry computes on it and
    /// not on the Fortran one (16-byte reals and 32-byte complex are `long double`).
    fn MPI_Type_match_size / PMPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut Handle) on NONE => {
        let Some(out) = datatype.as_mut() else { return fail(MPI_ERR_ARG, "datatype is NULL") };
        let found = match (typeclass, size) {
            (TYPECLASS_INTEGER, 1) => Builtin::Integer1,
            (TYPECLASS_INTEGER, 2) => Builtin::Integer2,
            (TYPECLASS_INTEGER, 4) => Builtin::Integer4,
            (TYPECLASS_INTEGER, 8) => Builtin::Integer8,
            (TYPECLASS_INTEGER, 16) => Builtin::Integer16,
            (TYPECLASS_REAL, 2) => Builtin::Real2,
            (TYPECLASS_REAL, 4) => Builtin::Real4,
            (TYPECLASS_REAL, 8) => Builtin::Real8,
            (TYPECLASS_REAL, 16) => Builtin::LongDouble,
            (TYPECLASS_COMPLEX, 4) => Builtin::Complex4,
            (TYPECLASS_COMPLEX, 8) => Builtin::Complex8,
            (TYPECLASS_COMPLEX, 16) => Builtin::Complex16,
            (TYPECLASS_COMPLEX, 32) => Builtin::CLongDoubleComplex,
            (TYPECLASS_INTEGER | TYPECLASS_REAL | TYPECLASS_COMPLEX, _) => {
                return fail(MPI_ERR_ARG, format!("no predefined type of typeclass {typeclass} has {size} bytes"));
            }
            _ => return fail(MPI_ERR_ARG, format!("unknown typeclass {typeclass} (MPI_TYPECLASS_INTEGER, _REAL or _COMPLEX)")),
        };
        *out = found.handle();
        Ok(())
    }
}

// ---- parameterized Fortran 90 types ----

/// `MPI_Type_create_f90_integer`'s choice, as Fortran's `SELECTED_INT_KIND(r)` on x86-64:
/// the smallest integer holding every value of `r` decimal digits.
fn f90_integer(r: c_int) -> Res<Builtin> {
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
fn f90_real(p: c_int, r: c_int, complex: bool) -> Res<Builtin> {
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
unsafe fn f90_type(
    combiner: c_int,
    p: c_int,
    r: c_int,
    base: Builtin,
    newtype: *mut Handle,
) -> Res {
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

mpi! {
    /// The predefined integer type of at least `r` decimal digits (MPI_COMBINER_F90_INTEGER).
    fn MPI_Type_create_f90_integer / PMPI_Type_create_f90_integer(r: c_int, newtype: *mut Handle) on NONE => {
        let base = f90_integer(r)?;
        f90_type(crate::datatype::combiner::F90_INTEGER, 0, r, base, newtype)
    }
}
mpi! {
    /// The predefined real type of precision `p` and range `r` (MPI_COMBINER_F90_REAL).
    fn MPI_Type_create_f90_real / PMPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut Handle) on NONE => {
        let base = f90_real(p, r, false)?;
        f90_type(crate::datatype::combiner::F90_REAL, p, r, base, newtype)
    }
}
mpi! {
    /// The predefined complex type whose parts have precision `p` and range `r`
    /// (MPI_COMBINER_F90_COMPLEX).
    fn MPI_Type_create_f90_complex / PMPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut Handle) on NONE => {
        let base = f90_real(p, r, true)?;
        f90_type(crate::datatype::combiner::F90_COMPLEX, p, r, base, newtype)
    }
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

// ---- large counts (MPI 4.0 `_c` bindings) ----

/// An `MPI_Count` that counts elements or bytes in memory.
fn size_c(c: i64, what: &str) -> Res<usize> {
    usize::try_from(c).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("negative {what} {c}")))
}

/// `MPI_Count` byte displacements as addresses.
fn addrs(v: &[i64]) -> Res<Vec<isize>> {
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

mpi! {
    /// MPI_Type_contiguous with an MPI_Count count.
    fn MPI_Type_contiguous_c / PMPI_Type_contiguous_c(count: i64, oldtype: Handle, newtype: *mut Handle) on NONE => {
        derive(oldtype, newtype, |old| Datatype::contiguous(count, old))
    }
}
mpi! {
    /// MPI_Type_vector with MPI_Count arguments.
    fn MPI_Type_vector_c / PMPI_Type_vector_c(count: i64, blocklength: i64, stride: i64, oldtype: Handle, newtype: *mut Handle) on NONE => {
        derive(oldtype, newtype, |old| Datatype::vector(count, blocklength, stride, old))
    }
}
mpi! {
    /// MPI_Type_create_hvector with MPI_Count arguments.
    fn MPI_Type_create_hvector_c / PMPI_Type_create_hvector_c(count: i64, blocklength: i64, stride: i64, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let stride = addrs(&[stride])?[0];
        derive(oldtype, newtype, |old| Datatype::hvector(count, blocklength, stride, old))
    }
}
mpi! {
    /// MPI_Type_indexed with MPI_Count arguments.
    fn MPI_Type_indexed_c / PMPI_Type_indexed_c(count: i64, blocklengths: *const i64, displacements: *const i64, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let n = size_c(count, "count")?;
        let (b, d) = (slice(blocklengths, n, "blocklengths")?, slice(displacements, n, "displacements")?);
        derive(oldtype, newtype, |old| Datatype::indexed(b, d, old))
    }
}
mpi! {
    /// MPI_Type_create_hindexed with MPI_Count arguments.
    fn MPI_Type_create_hindexed_c / PMPI_Type_create_hindexed_c(count: i64, blocklengths: *const i64, displacements: *const i64, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let n = size_c(count, "count")?;
        let (b, d) = (slice(blocklengths, n, "blocklengths")?, addrs(slice(displacements, n, "displacements")?)?);
        derive(oldtype, newtype, |old| Datatype::hindexed(b, &d, old))
    }
}
mpi! {
    /// MPI_Type_create_indexed_block with MPI_Count arguments.
    fn MPI_Type_create_indexed_block_c / PMPI_Type_create_indexed_block_c(count: i64, blocklength: i64, displacements: *const i64, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let d = slice(displacements, size_c(count, "count")?, "displacements")?;
        derive(oldtype, newtype, |old| Datatype::indexed_block(blocklength, d, old))
    }
}
mpi! {
    /// MPI_Type_create_hindexed_block with MPI_Count arguments.
    fn MPI_Type_create_hindexed_block_c / PMPI_Type_create_hindexed_block_c(count: i64, blocklength: i64, displacements: *const i64, oldtype: Handle, newtype: *mut Handle) on NONE => {
        let d = addrs(slice(displacements, size_c(count, "count")?, "displacements")?)?;
        derive(oldtype, newtype, |old| Datatype::hindexed_block(blocklength, &d, old))
    }
}
mpi! {
    /// MPI_Type_create_struct with MPI_Count arguments.
    fn MPI_Type_create_struct_c / PMPI_Type_create_struct_c(count: i64, blocklengths: *const i64, displacements: *const i64, types: *const Handle, newtype: *mut Handle) on NONE => {
        let n = size_c(count, "count")?;
        let (b, d, t) = (slice(blocklengths, n, "blocklengths")?, addrs(slice(displacements, n, "displacements")?)?, slice(types, n, "types")?);
        let out = out(newtype, "newtype")?;
        *out = running(|s| {
            let members = t.iter().map(|&h| s.datatype(h)).collect::<Res<Vec<_>>>()?;
            let dt = Datatype::create_struct(b, &d, &members)?;
            Ok(new_type(s, dt))
        })?;
        Ok(())
    }
}
mpi! {
    /// MPI_Type_create_resized with MPI_Count bounds.
    fn MPI_Type_create_resized_c / PMPI_Type_create_resized_c(oldtype: Handle, lb: i64, extent: i64, newtype: *mut Handle) on NONE => {
        let (lb, extent) = (addrs(&[lb])?[0], addrs(&[extent])?[0]);
        derive(oldtype, newtype, |old| Datatype::resized(old, lb, extent))
    }
}
mpi! {
    /// Data bytes of one element (MPI_Count).
    fn MPI_Type_size_c / PMPI_Type_size_c(datatype: Handle, size: *mut i64) on NONE => {
        *out(size, "size")? = query(datatype, Builtin::size, Datatype::size)? as i64;
        Ok(())
    }
}
mpi! {
    /// Lower bound and extent (MPI_Count).
    fn MPI_Type_get_extent_c / PMPI_Type_get_extent_c(datatype: Handle, lb: *mut i64, extent: *mut i64) on NONE => {
        let (l, e) = query(datatype, |b| (0, b.extent() as isize), |t| (t.lb(), t.extent()))?;
        (*out(lb, "lb")?, *out(extent, "extent")?) = (l as i64, e as i64);
        Ok(())
    }
}
mpi! {
    /// Bounds of the data itself (MPI_Count).
    fn MPI_Type_get_true_extent_c / PMPI_Type_get_true_extent_c(datatype: Handle, lb: *mut i64, extent: *mut i64) on NONE => {
        let (l, e) = query(datatype, |b| (0, b.true_extent() as isize), |t| (t.true_lb(), t.true_extent()))?;
        (*out(lb, "lb")?, *out(extent, "extent")?) = (l as i64, e as i64);
        Ok(())
    }
}
mpi! {
    /// MPI_Pack with MPI_Count sizes.
    fn MPI_Pack_c / PMPI_Pack_c(inbuf: *const c_void, incount: i64, datatype: Handle, outbuf: *mut c_void, outsize: i64, position: *mut i64, comm: Handle) on comm => {
        let pos = out(position, "position")?;
        let end = pack_at(inbuf, size_c(incount, "count")?, datatype, (outbuf, size_c(outsize, "size")?), size_c(*pos, "position")?, comm)?;
        *pos = end as i64;
        Ok(())
    }
}
mpi! {
    /// MPI_Unpack with MPI_Count sizes.
    fn MPI_Unpack_c / PMPI_Unpack_c(inbuf: *const c_void, insize: i64, position: *mut i64, outbuf: *mut c_void, outcount: i64, datatype: Handle, comm: Handle) on comm => {
        let pos = out(position, "position")?;
        let end = unpack_at((inbuf, size_c(insize, "size")?), size_c(*pos, "position")?, outbuf, size_c(outcount, "count")?, datatype, comm)?;
        *pos = end as i64;
        Ok(())
    }
}
mpi! {
    /// Upper bound of the bytes MPI_Pack_c needs.
    fn MPI_Pack_size_c / PMPI_Pack_size_c(incount: i64, datatype: Handle, comm: Handle, size: *mut i64) on comm => {
        let t = running(|s| { s.comm(comm)?; s.datatype(datatype) })?;
        let bytes = bytes_of(&t, size_c(incount, "count")?)?;
        *out(size, "size")? = i64::try_from(bytes).map_err(|_| MpiError::new(MPI_ERR_COUNT, "pack size overflows MPI_Count"))?;
        Ok(())
    }
}
mpi! {
    /// MPI_Reduce_local with an MPI_Count count.
    fn MPI_Reduce_local_c / PMPI_Reduce_local_c(inbuf: *const c_void, inoutbuf: *mut c_void, count: i64, datatype: Handle, op: Handle) on NONE => {
        let (t, o) = running(|s| Ok((s.committed_type(datatype)?, s.op(op)?)))?;
        let n = size_c(count, "count")?;
        crate::coll::reduce_local(&t, datatype, o, n, inbuf as *const u8, inoutbuf as *mut u8)
    }
}
