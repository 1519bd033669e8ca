//! Chapter 5 of MPI 5.0, datatypes: derived datatype constructors (int and `MPI_Count`
//! forms), their queries, addresses, `MPI_Get_elements`, pack and unpack (also `external32`)
//! and `MPI_Type_get_value_index`. The datatype engine is [`crate::datatype`]; the calls share
//! functions of [`crate::types`] and [`crate::external`].

use super::NONE;
use crate::abi::*;
use crate::check::{out, slice};
use crate::datatype::{Builtin, Datatype, Distrib, Order};
use crate::env::write_string;
use crate::error::{fail, MpiError, Res};
use crate::external::*;
use crate::p2p::{count_arg, *};
use crate::state::{running, with, TypeObj};
use crate::types::*;
use std::ffi::{c_char, c_int, c_void, CStr};

mpi! {
    /// Number of basic elements a status reports.
    fn MPI_Get_elements / PMPI_Get_elements(status: *const MpiStatus, datatype: Handle, count: *mut c_int) on NONE => {
        let Some(count) = count.as_mut() else { return fail(MPI_ERR_ARG, "count is NULL") };
        *count = c_int::try_from(elements(status, datatype)?).unwrap_or(MPI_UNDEFINED);
        Ok(())
    }
}

mpi! {
    /// Number of basic elements a status reports (MPI_Count).
    fn MPI_Get_elements_x / PMPI_Get_elements_x(status: *const MpiStatus, datatype: Handle, count: *mut i64) on NONE => {
        let Some(count) = count.as_mut() else { return fail(MPI_ERR_ARG, "count is NULL") };
        *count = elements(status, datatype)?;
        Ok(())
    }
}

mpi! {
    /// Number of basic elements a status reports (MPI_Count).
    fn MPI_Get_elements_c / PMPI_Get_elements_c(status: *const MpiStatus, datatype: Handle, count: *mut i64) on NONE => {
        let Some(count) = count.as_mut() else { return fail(MPI_ERR_ARG, "count is NULL") };
        *count = elements(status, datatype)?;
        Ok(())
    }
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
        super::guards::guard("MPI_Type_size", NONE, || {
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
        let bytes = bytes_of(&t, count_arg(incount)?)?;
        *out(size, "size")? = c_int::try_from(bytes).map_err(|_| MpiError::new(MPI_ERR_VALUE_TOO_LARGE, format!("the pack size, {bytes} bytes, does not fit an int (use MPI_Pack_size_c)")))?;
        Ok(())
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
        *out(size, "size")? = i64::try_from(bytes).map_err(|_| MpiError::new(MPI_ERR_VALUE_TOO_LARGE, format!("the pack size, {bytes} bytes, does not fit an MPI_Count")))?;
        Ok(())
    }
}

mpi! {
    /// Packs `incount` elements in the external32 representation at `*position` of `outbuf`.
    fn MPI_Pack_external / PMPI_Pack_external(datarep: *const c_char, inbuf: *const c_void, incount: c_int, datatype: Handle, outbuf: *mut c_void, outsize: isize, position: *mut isize) on NONE => {
        pack_external(datarep, inbuf, incount.into(), datatype, outbuf, outsize, position)
    }
}

mpi! {
    /// MPI_Pack_external with MPI_Count arguments.
    fn MPI_Pack_external_c / PMPI_Pack_external_c(datarep: *const c_char, inbuf: *const c_void, incount: i64, datatype: Handle, outbuf: *mut c_void, outsize: i64, position: *mut i64) on NONE => {
        pack_external(datarep, inbuf, incount, datatype, outbuf, outsize as isize, position.cast())
    }
}

mpi! {
    /// Unpacks `outcount` elements from the external32 representation at `*position` of `inbuf`.
    fn MPI_Unpack_external / PMPI_Unpack_external(datarep: *const c_char, inbuf: *const c_void, insize: isize, position: *mut isize, outbuf: *mut c_void, outcount: c_int, datatype: Handle) on NONE => {
        unpack_external(datarep, inbuf, insize, position, outbuf, outcount.into(), datatype)
    }
}

mpi! {
    /// MPI_Unpack_external with MPI_Count arguments.
    fn MPI_Unpack_external_c / PMPI_Unpack_external_c(datarep: *const c_char, inbuf: *const c_void, insize: i64, position: *mut i64, outbuf: *mut c_void, outcount: i64, datatype: Handle) on NONE => {
        unpack_external(datarep, inbuf, insize as isize, position.cast(), outbuf, outcount, datatype)
    }
}

mpi! {
    /// Bytes that `incount` elements take in the external32 representation.
    fn MPI_Pack_external_size / PMPI_Pack_external_size(datarep: *const c_char, incount: c_int, datatype: Handle, size: *mut isize) on NONE => {
        let bytes = pack_external_size(datarep, incount.into(), datatype)?;
        let Some(size) = size.as_mut() else { return fail(MPI_ERR_ARG, "size is NULL") };
        *size = isize::try_from(bytes).map_err(|_| MpiError::new(MPI_ERR_VALUE_TOO_LARGE, format!("the external32 size, {bytes} bytes, does not fit an MPI_Aint")))?;
        Ok(())
    }
}

mpi! {
    /// MPI_Pack_external_size with MPI_Count arguments.
    fn MPI_Pack_external_size_c / PMPI_Pack_external_size_c(datarep: *const c_char, incount: i64, datatype: Handle, size: *mut i64) on NONE => {
        let bytes = pack_external_size(datarep, incount, datatype)?;
        let Some(size) = size.as_mut() else { return fail(MPI_ERR_ARG, "size is NULL") };
        *size = i64::try_from(bytes).map_err(|_| MpiError::new(MPI_ERR_VALUE_TOO_LARGE, format!("the external32 size, {bytes} bytes, does not fit an MPI_Count")))?;
        Ok(())
    }
}

mpi! {
    /// The predefined pair type (MPI_FLOAT_INT, MPI_2INT, ...) of a value type and an index
    /// type, or MPI_DATATYPE_NULL when MPI predefines none for them.
    fn MPI_Type_get_value_index / PMPI_Type_get_value_index(value_type: Handle, index_type: Handle, pair_type: *mut Handle) on NONE => {
        let pair = out(pair_type, "pair_type")?;
        with(|s| s.datatype(value_type).and(s.datatype(index_type)).map(drop))?;
        use Builtin as B;
        let found = match (Builtin::from_handle(value_type), Builtin::from_handle(index_type)) {
            (Some(B::Float), Some(B::Int)) => Some(B::FloatInt),
            (Some(B::Double), Some(B::Int)) => Some(B::DoubleInt),
            (Some(B::Long), Some(B::Int)) => Some(B::LongInt),
            (Some(B::Int), Some(B::Int)) => Some(B::TwoInt),
            (Some(B::Short), Some(B::Int)) => Some(B::ShortInt),
            (Some(B::LongDouble), Some(B::Int)) => Some(B::LongDoubleInt),
            (Some(B::Real), Some(B::Real)) => Some(B::TwoReal),
            (Some(B::DoublePrecision), Some(B::DoublePrecision)) => Some(B::TwoDoublePrecision),
            (Some(B::Integer), Some(B::Integer)) => Some(B::TwoInteger),
            _ => None,
        };
        *pair = found.map_or(MPI_DATATYPE_NULL, |b| b.handle());
        Ok(())
    }
}
