//! Helpers of the collectives with `MPI_Count` counts and `MPI_Aint` displacements (MPI 4.0
//! `_c` bindings), blocking and nonblocking: scalar counts go through as `MPI_Count`s, and the
//! per-rank arrays as [`super::Ints`], read at their full width where they are used.

use super::*;

/// A C array of per-rank counts or displacements as the call passed it: the ints of the int
/// bindings, or the `MPI_Count` counts and `MPI_Aint` displacements of the `_c` ones.
#[derive(Clone, Copy)]
pub(crate) enum Ints {
    /// An int binding's array.
    Int(*const c_int),
    /// A `_c` binding's array of `MPI_Count` or `MPI_Aint` (both 64 bits wide).
    Wide(*const i64),
}

// `MPI_Aint` arrays are read as `i64`s.
const _: () = assert!(std::mem::size_of::<isize>() == std::mem::size_of::<i64>());

impl From<*const c_int> for Ints {
    fn from(p: *const c_int) -> Ints {
        Ints::Int(p)
    }
}

impl From<*const i64> for Ints {
    fn from(p: *const i64) -> Ints {
        Ints::Wide(p)
    }
}

impl From<*const isize> for Ints {
    fn from(p: *const isize) -> Ints {
        Ints::Wide(p.cast())
    }
}

impl Ints {
    /// Whether the array is NULL.
    pub(crate) fn is_null(self) -> bool {
        match self {
            Ints::Int(p) => p.is_null(),
            Ints::Wide(p) => p.is_null(),
        }
    }

    /// The first `n` entries, widened; `name` names the array if it is NULL.
    ///
    /// # Safety
    /// The array is NULL or holds `n` entries.
    pub(crate) unsafe fn get(self, n: usize, name: &str) -> Res<Vec<i64>> {
        // SAFETY: this function's contract.
        Ok(match self {
            Ints::Int(p) => unsafe { check::slice(p, n, name) }?
                .iter()
                .map(|&x| i64::from(x))
                .collect(),
            Ints::Wide(p) => unsafe { check::slice(p, n, name) }?.to_vec(),
        })
    }
}

/// Entries of the per-rank arrays of `comm`: its size, or the remote group's size on an
/// intercommunicator.
pub(crate) fn peers(comm: Handle) -> Res<usize> {
    match inter_of(comm)? {
        Some(i) => crate::inter::remote_size(i),
        None => running(|s| s.local_size(comm)),
    }
}

/// Whether the root's arrays of a rooted collective are significant here.
pub(crate) fn at_root(comm: Handle, root: c_int) -> Res<bool> {
    match inter_of(comm)? {
        Some(_) => Ok(root == MPI_ROOT),
        None => running(|s| Ok(s.core_comm(comm)?.rank() as i64 == root as i64)),
    }
}

pub(crate) fn ptr<T>(v: &Option<Vec<T>>) -> *const T {
    v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr())
}

/// In- and out-degree of the topology of `comm` (the lengths of the neighbourhood arrays).
pub(crate) fn degrees(comm: Handle) -> Res<(usize, usize)> {
    running(|s| {
        let (src, dst, _) = super::neighbor::neighbourhood(s, comm)?;
        Ok((src.len(), dst.len()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_and_wide_arrays_read_as_the_same_i64s() {
        let ints: [c_int; 3] = [0, 7, c_int::MAX];
        let wide: [i64; 3] = [0, 7, c_int::MAX as i64];
        // SAFETY: each array holds 3 entries.
        let (a, b) = unsafe {
            (
                Ints::from(ints.as_ptr()).get(3, "ints"),
                Ints::from(wide.as_ptr()).get(3, "wide"),
            )
        };
        assert_eq!(a.expect("ints"), b.expect("wide"));
    }

    #[test]
    fn wide_entries_keep_values_past_an_int() {
        let counts: [i64; 2] = [(1 << 31) + 64, i64::MAX];
        let displs: [isize; 2] = [-(1 << 40), 1 << 33];
        // SAFETY: each array holds 2 entries.
        let (c, d) = unsafe {
            (
                Ints::from(counts.as_ptr()).get(2, "counts"),
                Ints::from(displs.as_ptr()).get(2, "displs"),
            )
        };
        assert_eq!(c.expect("counts"), vec![(1 << 31) + 64, i64::MAX]);
        assert_eq!(d.expect("displs"), vec![-(1 << 40), 1 << 33]);
    }

    #[test]
    fn a_null_array_with_entries_is_an_error_naming_it() {
        let null = Ints::from(std::ptr::null::<i64>());
        assert!(null.is_null());
        // SAFETY: NULL is refused before anything is read.
        let e = unsafe { null.get(2, "recvcounts") }.expect_err("NULL with 2 entries");
        assert_eq!(e.class, MPI_ERR_ARG);
        assert!(e.message.contains("recvcounts"), "{}", e.message);
    }
}
