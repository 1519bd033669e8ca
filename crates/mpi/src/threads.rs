//! Threads: how several threads of a process share ferry's MPI.
//!
//! The library's state is one per process ([`Serialized`]). At MPI_THREAD_SINGLE, FUNNELED and
//! SERIALIZED the program itself keeps its MPI calls apart (MPI 4.1 §11.2.3), which also orders
//! their memory effects. At MPI_THREAD_MULTIPLE every call holds one process-wide lock, taken on
//! entry ([`enter`]) and held to the return, so the state, the runtime's communicators and the
//! engine are only ever touched by one thread at a time. A call that waits (a receive, a
//! collective, a wait on a request another thread completes) must not keep the others out:
//! between the passes of its wait the runtime calls [`pause`], which hands the lock to a thread
//! that is waiting for it and takes it back afterwards.
//!
//! The lock is reentrant: user code that MPI calls back (a reduction function, an error handler,
//! an attribute callback) may itself call MPI on the same thread.

use parking_lot::ReentrantMutex;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Whether the process runs at MPI_THREAD_MULTIPLE (set once by MPI_Init_thread or the first
/// session that asks for it, never cleared).
static MULTIPLE: AtomicBool = AtomicBool::new(false);

/// The lock every MPI call holds at MPI_THREAD_MULTIPLE.
static LOCK: ReentrantMutex<()> = parking_lot::const_reentrant_mutex(());

/// Threads blocked on [`LOCK`] right now: a waiting call hands the lock over only then.
static WANTING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// How many times this thread holds [`LOCK`] (nested calls from callbacks count).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Turns on the lock for the rest of the process: from now on every MPI call takes it. Called
/// while one thread alone runs MPI (inside MPI_Init_thread).
pub(crate) fn go_multiple() {
    MULTIPLE.store(true, Ordering::SeqCst);
}

/// Whether MPI calls take the lock.
#[inline]
pub(crate) fn is_multiple() -> bool {
    MULTIPLE.load(Ordering::Acquire)
}

/// Proof of holding the lock for one MPI call (or nothing, below MPI_THREAD_MULTIPLE);
/// dropping it releases one level.
#[must_use]
pub(crate) struct Entered(bool);

/// Takes the lock for an MPI call at MPI_THREAD_MULTIPLE.
#[inline]
pub(crate) fn enter() -> Entered {
    if !is_multiple() {
        return Entered(false);
    }
    acquire();
    Entered(true)
}

#[cold]
pub(crate) fn acquire() {
    let guard = match LOCK.try_lock() {
        Some(guard) => guard,
        None => {
            WANTING.fetch_add(1, Ordering::SeqCst);
            let guard = LOCK.lock();
            WANTING.fetch_sub(1, Ordering::SeqCst);
            guard
        }
    };
    // The level is released by `Entered::drop` or `pause`, not by a guard's scope.
    std::mem::forget(guard);
    DEPTH.with(|d| d.set(d.get() + 1));
}

impl Drop for Entered {
    #[inline]
    fn drop(&mut self) {
        if self.0 {
            DEPTH.with(|d| d.set(d.get() - 1));
            // SAFETY: `enter` took this level on this thread and forgot its guard.
            unsafe { LOCK.force_unlock() };
        }
    }
}

/// The runtime's pause between the passes of a wait: when another thread waits for the lock,
/// hands it over (fairly: straight to a waiting thread) and takes it back, at the same depth;
/// says whether it did. The runtime calls it with nothing of the engine or the state borrowed.
pub(crate) fn pause() -> bool {
    if WANTING.load(Ordering::SeqCst) == 0 {
        return false;
    }
    let depth = DEPTH.with(|d| d.replace(0));
    for _ in 0..depth {
        // SAFETY: this thread holds `depth` levels of the lock, taken by `acquire`.
        unsafe { LOCK.force_unlock_fair() };
    }
    for _ in 0..depth {
        acquire();
    }
    true
}

/// Process-wide data that MPI calls share: one thread at a time reaches it, through
/// [`Serialized::with`] (see the module doc for why that is so at every thread level).
pub(crate) struct Serialized<T>(RefCell<T>);

// SAFETY: the value is reached only through `with`, which runs with the lock held at
// MPI_THREAD_MULTIPLE; below that level MPI calls are serialized by the program (and the
// synchronization it uses for that orders the accesses). Values it holds (`Rc`s of the
// runtime included) are therefore never touched by two threads at once.
unsafe impl<T> Sync for Serialized<T> {}
// SAFETY: as for `Sync`: a thread other than the creator only reaches the value under the
// same serialization.
unsafe impl<T> Send for Serialized<T> {}

impl<T> Serialized<T> {
    /// Wraps `value`.
    pub(crate) const fn new(value: T) -> Serialized<T> {
        Serialized(RefCell::new(value))
    }

    /// Runs `f` on the value, holding the lock at MPI_THREAD_MULTIPLE; `None` when the value
    /// is already borrowed further up this thread (a callback calling back into MPI).
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let _entered = enter();
        let mut value = self.0.try_borrow_mut().ok()?;
        Some(f(&mut value))
    }

    /// Like [`Serialized::with`] for a last word before the process ends (an abort, a fatal
    /// error): gives up instead of waiting when another thread holds the lock.
    pub(crate) fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let _held = if is_multiple() {
            let guard = LOCK.try_lock()?;
            Some(guard)
        } else {
            None
        };
        let mut value = self.0.try_borrow_mut().ok()?;
        Some(f(&mut value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_waiting_thread_hands_the_lock_to_one_that_wants_it_and_gets_it_back() {
        go_multiple();
        let outer = enter();
        let inner = enter(); // a callback calling MPI again
        let ran = Arc::new(AtomicBool::new(false));
        let other = {
            let ran = ran.clone();
            std::thread::spawn(move || {
                let _e = enter();
                ran.store(true, Ordering::SeqCst);
            })
        };
        // As a wait would: pause until the other thread has had its turn.
        while !ran.load(Ordering::SeqCst) {
            pause();
            std::thread::yield_now();
        }
        other.join().unwrap();
        assert_eq!(DEPTH.with(Cell::get), 2);
        drop(inner);
        drop(outer);
        assert_eq!(DEPTH.with(Cell::get), 0);
        assert!(LOCK.try_lock().is_some());
    }
}
