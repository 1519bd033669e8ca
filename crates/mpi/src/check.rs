//! The argument checks every entry point shares, in one place so that a bad argument gets the
//! same error class and words whichever call it is passed to, and is reported before any memory
//! is touched (MPI 4.1 §2.8: under MPI_ERRORS_RETURN the call returns the class; a NULL buffer
//! that reached a copy would end the process instead).
//!
//! Handles (communicators, datatypes, operations) are checked where they are looked up
//! (`State::comm`, `State::committed_type`, `State::op`); counts, buffers, ranks, roots and
//! tags here, and the pointers a call reads its arrays from or writes its results through.

use crate::abi::*;
use crate::datatype::Datatype;
use crate::error::{fail, MpiError, Res};
use std::ffi::{c_int, c_void};

/// Addresses below this are never mapped (Linux keeps at least the first page out of reach,
/// `vm.mmap_min_addr`): data there is a NULL, MPI_BOTTOM or MPI_IN_PLACE mistake.
const LOWEST_VALID_ADDRESS: i128 = 4096;

/// A count argument, int or `MPI_Count`: never negative.
pub(crate) fn count(count: impl Into<i64>) -> Res<usize> {
    let count = count.into();
    usize::try_from(count)
        .map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("negative count {count}")))
}

/// `count` elements of `dt` at `buf` must lie in memory a program can have: a NULL buffer (or
/// MPI_IN_PLACE where it is not allowed) with data to move is MPI_ERR_BUFFER. NULL with no data
/// (count 0, or a type of size 0) is legal, and so is MPI_BOTTOM with a type whose
/// displacements are absolute addresses: the test is where the data would be, as MPICH's
/// (`MPIR_ERRTEST_USERBUFFER` refuses NULL when the type's data starts at 0). The elements must
/// also fit the address space ([`span`]).
pub(crate) fn buffer(buf: *const c_void, count: usize, dt: &Datatype) -> Res {
    if count == 0 || dt.size() == 0 {
        return Ok(());
    }
    let (low, high) = span(count, dt)?;
    let base = buf as usize as i128;
    if base + high as i128 > isize::MAX as i128 {
        return cold_span_overflow(count, dt);
    }
    if base + low as i128 >= LOWEST_VALID_ADDRESS {
        return Ok(());
    }
    cold_bad_buffer(buf, count)
}

/// The offsets from the buffer address of the lowest byte and of the end of the highest one
/// that `count` elements of `dt` (at least one) cover. MPI_ERR_COUNT when they, or the bytes
/// the elements hold, do not fit the address space: `count` elements of a type whose extent
/// was resized to a huge value reach past it, where walking them would wrap the offsets.
pub(crate) fn span(count: usize, dt: &Datatype) -> Res<(isize, isize)> {
    let last = (count.max(1) as i128 - 1) * dt.extent() as i128;
    let low = dt.true_lb() as i128 + last.min(0);
    let high = dt.true_ub() as i128 + last.max(0);
    let bytes = count as i128 * dt.size() as i128;
    match (isize::try_from(low), isize::try_from(high)) {
        (Ok(low), Ok(high)) if bytes <= isize::MAX as i128 && high >= low => Ok((low, high)),
        _ => cold_span_overflow(count, dt),
    }
}

#[cold]
fn cold_span_overflow<T>(count: usize, dt: &Datatype) -> Res<T> {
    fail(
        MPI_ERR_COUNT,
        format!(
            "{count} elements of a datatype of extent {} reach past the address space",
            dt.extent()
        ),
    )
}

/// `len` bytes at `buf` (a packed buffer, an attached buffer): as [`buffer`] for bytes.
pub(crate) fn bytes(buf: *const c_void, len: usize) -> Res {
    if len == 0 || addressable(buf) {
        return Ok(());
    }
    cold_bad_buffer(buf, len)
}

/// Whether `buf` may point at data at all (see [`buffer`]): for lean paths that take only
/// predefined types, whose data starts at `buf`.
#[inline]
pub(crate) fn addressable(buf: *const c_void) -> bool {
    buf as usize as i128 >= LOWEST_VALID_ADDRESS
}

#[cold]
fn cold_bad_buffer(buf: *const c_void, count: usize) -> Res {
    let what = match buf as usize {
        0 => "buffer is NULL".to_string(),
        MPI_IN_PLACE => "MPI_IN_PLACE is not allowed for this buffer".to_string(),
        a => format!("buffer address {a:#x} is not valid memory"),
    };
    fail(MPI_ERR_BUFFER, format!("{what} ({count} elements to move)"))
}

/// An output argument the call writes through: never NULL (MPI_ERR_ARG naming `what`).
///
/// # Safety
/// `p` is NULL or points at a `T` that nothing else uses for `'a`.
pub(crate) unsafe fn out<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    // SAFETY: the caller keeps this function's `# Safety`: `p` is NULL or points at a `T` that
    // nothing else uses for `'a`.
    unsafe { out_of_class(p, MPI_ERR_ARG, what) }
}

/// An output argument of an MPI_T call, which reports a NULL one as MPI_T_ERR_INVALID.
///
/// # Safety
/// As [`out`].
pub(crate) unsafe fn tool_out<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    // SAFETY: the caller keeps this function's `# Safety`, as [`out`]'s.
    unsafe { out_of_class(p, MPI_T_ERR_INVALID, what) }
}

unsafe fn out_of_class<'a, T>(p: *mut T, class: c_int, what: &str) -> Res<&'a mut T> {
    // SAFETY: this function's contract is the unsafe operations' own: `p`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        p.as_mut()
            .ok_or_else(|| MpiError::new(class, format!("{what} is NULL")))
    }
}

/// An input array of `n` entries: NULL only when empty (MPI_ERR_ARG naming `what`).
///
/// # Safety
/// `p` is NULL or points at `n` initialized entries that stay unchanged for `'a`.
pub(crate) unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Res<&'a [T]> {
    // SAFETY: the caller keeps this function's `# Safety`: `p` is NULL or points at `n` initialized
    // entries that stay unchanged for `'a`.
    unsafe {
        if n == 0 {
            return Ok(&[]);
        }
        if p.is_null() {
            return fail(MPI_ERR_ARG, format!("{what} is NULL"));
        }
        Ok(std::slice::from_raw_parts(p, n))
    }
}

/// A rank of a group of `size` to send to or receive from: `None` for MPI_PROC_NULL.
#[inline]
pub(crate) fn rank(rank: c_int, size: usize) -> Res<Option<usize>> {
    if rank == MPI_PROC_NULL {
        return Ok(None);
    }
    match usize::try_from(rank) {
        Ok(r) if r < size => Ok(Some(r)),
        _ => bad_rank(rank, size),
    }
}

#[cold]
fn bad_rank(rank: c_int, size: usize) -> Res<Option<usize>> {
    fail(
        MPI_ERR_RANK,
        format!("rank {rank} is not in a communicator of {size} ranks"),
    )
}

/// The root of a collective on an intracommunicator of `size` ranks.
pub(crate) fn root(root: c_int, size: usize) -> Res<usize> {
    usize::try_from(root)
        .ok()
        .filter(|&r| r < size)
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_ROOT,
                format!("root {root} is not in a communicator of {size} ranks"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Builtin;

    fn int() -> Datatype {
        Datatype::from_handle(Builtin::Int as Handle).expect("MPI_INT")
    }

    fn class(r: Res) -> c_int {
        r.err().map_or(MPI_SUCCESS, |e| e.class)
    }

    #[test]
    fn an_mpi_count_past_an_int_is_a_count_and_a_negative_one_an_error() {
        assert_eq!(count((1i64 << 31) + 64).ok(), Some((1usize << 31) + 64));
        assert_eq!(count(i64::MAX).ok(), Some(i64::MAX as usize));
        assert_eq!(count(-1i64).err().map(|e| e.class), Some(MPI_ERR_COUNT));
        assert_eq!(
            count(c_int::MIN).err().map(|e| e.class),
            Some(MPI_ERR_COUNT)
        );
    }

    proptest::proptest! {
        /// For any count and resized extent (either sign, up to the largest), `span` is either
        /// MPI_ERR_COUNT or the exact bounds computed without overflow, and a buffer it
        /// accepts never reaches past the address space.
        #[test]
        fn a_span_is_exact_or_a_count_error(
            count in proptest::prop_oneof![0usize..8, proptest::num::usize::ANY],
            extent in proptest::prop_oneof![-64isize..64, proptest::num::isize::ANY],
            lb in -64isize..64,
        ) {
            let made = Datatype::resized(&int(), lb, extent);
            proptest::prop_assume!(made.is_ok());
            let t = made.expect("resized");
            // The data of one element is its int at 0, wherever lb and extent put the bounds.
            let last = (count.max(1) as i128 - 1) * extent as i128;
            let low = last.min(0);
            let high = 4 + last.max(0);
            let bytes = count as i128 * 4;
            let fits = [low, high, bytes].iter().all(|&v| isize::MIN as i128 <= v && v <= isize::MAX as i128);
            match span(count, &t) {
                Ok((l, h)) => {
                    proptest::prop_assert!(fits);
                    proptest::prop_assert_eq!((l as i128, h as i128), (low, high));
                }
                Err(e) => {
                    proptest::prop_assert!(!fits);
                    proptest::prop_assert_eq!(e.class, MPI_ERR_COUNT);
                }
            }
            let x = [0i32; 1];
            let at = x.as_ptr() as *const c_void;
            if buffer(at, count, &t).is_ok() && count > 0 {
                proptest::prop_assert!(at as usize as i128 + high <= isize::MAX as i128);
            }
        }
    }

    #[test]
    fn a_huge_extent_is_a_count_error_not_a_wrapped_offset() {
        let huge = Datatype::resized(&int(), 0, isize::MAX).expect("resized");
        let x = [0i32; 3];
        let at = x.as_ptr() as *const c_void;
        assert_eq!(class(buffer(at, 3, &huge)), MPI_ERR_COUNT);
        assert_eq!(class(buffer(at, 1, &huge)), MPI_SUCCESS);
        let back = Datatype::resized(&int(), 0, -isize::MAX).expect("resized");
        assert_eq!(class(buffer(at, 3, &back)), MPI_ERR_COUNT);
    }

    #[test]
    fn a_null_buffer_is_refused_only_when_there_is_data_to_move() {
        let null = std::ptr::null();
        assert_eq!(class(buffer(null, 1, &int())), MPI_ERR_BUFFER);
        assert_eq!(class(buffer(null, 0, &int())), MPI_SUCCESS);
        let empty = Datatype::contiguous(0, &int()).expect("contiguous(0)");
        assert_eq!(class(buffer(null, 5, &empty)), MPI_SUCCESS);
        let in_place = MPI_IN_PLACE as *const c_void;
        assert_eq!(class(buffer(in_place, 1, &int())), MPI_ERR_BUFFER);
        let x = 5i32;
        assert_eq!(
            class(buffer(&x as *const i32 as *const c_void, 1, &int())),
            MPI_SUCCESS
        );
    }

    #[test]
    fn mpi_bottom_with_absolute_addresses_is_a_buffer() {
        let x = [5i32; 2];
        let at = x.as_ptr() as isize;
        let abs = Datatype::hindexed(&[1], &[at], &int()).expect("hindexed");
        assert_eq!(class(buffer(std::ptr::null(), 1, &abs)), MPI_SUCCESS);
    }

    #[test]
    fn counts_ranks_and_roots() {
        assert_eq!(count(3).ok(), Some(3));
        assert_eq!(count(-1).err().map(|e| e.class), Some(MPI_ERR_COUNT));
        assert_eq!(rank(MPI_PROC_NULL, 2).ok(), Some(None));
        assert_eq!(rank(1, 2).ok(), Some(Some(1)));
        assert_eq!(rank(2, 2).err().map(|e| e.class), Some(MPI_ERR_RANK));
        assert_eq!(root(1, 2).ok(), Some(1));
        for bad in [2, -1, MPI_ROOT, MPI_PROC_NULL] {
            assert_eq!(root(bad, 2).err().map(|e| e.class), Some(MPI_ERR_ROOT));
        }
    }
}
