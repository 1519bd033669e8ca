//! Persistent collectives (MPI 4.1 §6.13): `MPI_Bcast_init` and the others return an inactive
//! request; each `MPI_Start` runs the matching nonblocking collective with the arguments given
//! at init, reading the buffers as they are at that start.
//!
//! Persistent collectives match by the order of their init calls, not of their starts (MPICH's
//! `coll/p_order` starts a broadcast and a barrier in opposite orders on two ranks), so each
//! request runs on a hidden duplicate of the communicator of its own (`comm::hidden_dup`), made
//! without a message and freed with the request. Arguments are checked at init (the
//! nonblocking collective run as far as its plan, `check_only`: MPI_ERR_BUFFER and the others
//! come from the init call, as in MPICH) and again at each start.
//! The request holds the created datatypes and operations it uses (the program may free its
//! handles after init, MPI 4.1 §2.5.1), except the type arrays of the `w` forms. It binds its
//! arguments at init, as a persistent point-to-point request does: the count, displacement and
//! type arrays are copied then (programs free or reuse them after init; mpi4py does, and MPICH
//! and Open MPI copy them too), while the buffers must stay valid until the request is freed.

use super::*;
use crate::request::{Persistent, Progress};
use std::rc::Rc;

/// Makes the inactive persistent request whose starts run `start` (a nonblocking collective on
/// the communicator and request address it is given).
pub(crate) fn persistent(
    comm: Handle,
    info: Handle,
    request: RequestOut<'_>,
    kept: Kept,
    start: impl Fn(Handle, RequestOut<'_>) -> Res + 'static,
) -> Res {
    let checked = running(|s| {
        if info != MPI_INFO_NULL && s.infos.get(info).is_none() {
            return fail(MPI_ERR_INFO, format!("invalid info {info:#x}"));
        }
        s.core_comm(comm).map(drop)
    })
    .and_then(|()| check_only(|r| start(comm, r)));
    if let Err(e) = checked {
        release(kept);
        return Err(e);
    }
    let hidden = match crate::comm::hidden_dup(comm) {
        Ok(h) => h,
        Err(e) => {
            release(kept);
            return Err(e);
        }
    };
    let start: Rc<dyn Fn(RequestOut<'_>) -> Res> = Rc::new(move |r| start(hidden, r));
    let made = running(|s| {
        let core = s.core_comm(comm)?;
        request.set(s.requests.insert(Request {
            comm,
            core,
            progress: Progress::Inactive,
            persistent: Some(Box::new(Persistent::Coll {
                hidden,
                start,
                kept: kept.clone(),
            })),
            cancel_requested: false,
            partner: None,
            generalized: None,
        }));
        Ok(())
    });
    if made.is_err() {
        crate::comm::free_hidden(hidden);
        release(kept);
    }
    made
}

/// The created datatypes and operations a persistent collective holds (see [`keep`]).
pub(crate) type Kept = Vec<Handle>;

/// Holds a created datatype or operation for a persistent collective: the program may free
/// its handle after init (MPI 4.1 §2.5.1), and the object (under the same handle, which a user
/// operation may compare) lives on until the request is freed. Other handles need nothing.
pub(crate) fn keep(s: &mut State, h: Handle, kept: &mut Kept) {
    if s.types.get(h).is_some() || s.ops.get(h).is_some() {
        s.pins.entry(h).or_insert((0, false)).0 += 1;
        kept.push(h);
    }
}

/// Lets go of what [`keep`] held, freeing objects the program has freed meanwhile.
pub(crate) fn release(kept: Kept) {
    let _ = crate::state::with(|s| {
        for h in kept {
            let Some(pin) = s.pins.get_mut(&h) else {
                continue;
            };
            pin.0 -= 1;
            if pin.0 == 0 {
                let freed = pin.1;
                s.pins.remove(&h);
                if freed && s.types.remove(h).is_none() {
                    s.ops.remove(h);
                }
            }
        }
        Ok(())
    });
}

/// Whether the program's free of `h` must wait for the persistent collectives holding it
/// (and records that free).
pub(crate) fn defer_free(s: &mut State, h: Handle) -> bool {
    match s.pins.get_mut(&h) {
        Some(pin) => {
            pin.1 = true;
            true
        }
        None => false,
    }
}

/// `n` entries of an array argument, copied at init (`None` for NULL or where `used` is false:
/// the collective then does not read it).
pub(crate) unsafe fn bound<T: Copy>(p: *const T, n: usize, used: bool) -> Option<Vec<T>> {
    // SAFETY: MPI requires a non-NULL array argument that is significant here to hold one
    // entry per peer (`n`), valid for the duration of the init call.
    (used && !p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
}

// ---- with MPI_Count counts and MPI_Aint displacements (MPI 4.0 `_init_c`) ----
