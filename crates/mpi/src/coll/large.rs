//! The collectives with `MPI_Count` counts and `MPI_Aint` displacements (MPI 4.0 `_c`
//! bindings), blocking and nonblocking. A scalar count goes through as an `MPI_Count`; the
//! per-rank arrays of the v- and w-forms become the ints of the int-count paths here, and an
//! entry that does not fit one is an error (`p2p::count_c`), never truncated.

use super::*;
use crate::p2p::count_c;

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

/// `n` `MPI_Count` counts as ints (`None` for NULL or where `used` is false).
pub(crate) unsafe fn counts(p: *const i64, n: usize, used: bool) -> Res<Option<Vec<c_int>>> {
    if p.is_null() || !used {
        return Ok(None);
    }
    // SAFETY: the caller's contract: a used array that is not NULL holds `n` entries.
    let p = unsafe { std::slice::from_raw_parts(p, n) };
    p.iter().map(|&c| count_c(c)).collect::<Res<_>>().map(Some)
}

/// `n` `MPI_Aint` displacements as ints (`None` for NULL or where `used` is false).
pub(crate) unsafe fn displs(p: *const isize, n: usize, used: bool) -> Res<Option<Vec<c_int>>> {
    if p.is_null() || !used {
        return Ok(None);
    }
    // SAFETY: as in `counts`.
    let p = unsafe { std::slice::from_raw_parts(p, n) };
    p.iter()
        .map(|&d| {
            c_int::try_from(d).map_err(|_| {
                MpiError::new(
                    MPI_ERR_ARG,
                    format!(
                        "displacement {d} is beyond the int displacements ferry's collectives take"
                    ),
                )
            })
        })
        .collect::<Res<_>>()
        .map(Some)
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
