//! Helpers of the collectives with `MPI_Count` counts and `MPI_Aint` displacements (MPI 4.0
//! `_c` bindings), blocking and nonblocking: scalar counts go through as `MPI_Count`s, and the
//! per-rank arrays as [`super::Ints`], read at their full width where they are used.

use super::*;

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
