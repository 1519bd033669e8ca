//! Test support: did a call raise SIGPIPE? The test harness ignores SIGPIPE, which would hide it;
//! a blocked signal stays pending even when ignored, so the call runs with it blocked on this
//! thread, and the pending set is read afterwards.

/// Runs `call` and tells whether it raised SIGPIPE on this thread.
pub(crate) fn raises_sigpipe<T>(call: impl FnOnce() -> T) -> (T, bool) {
    // SAFETY: sigset_t is plain data; these calls read and write only the sets given, and only
    // this thread's mask changes, restored before returning.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
        let result = call();
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending);
        let raised = libc::sigismember(&pending, libc::SIGPIPE) == 1;
        if raised {
            let now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&pipe, std::ptr::null_mut(), &now);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        (result, raised)
    }
}
