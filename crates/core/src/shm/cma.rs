//! Single copies between processes (`process_vm_readv` / `process_vm_writev`, CMA).

/// Copies `len` bytes at `remote` in process `pid` to `local`, with `process_vm_readv`.
/// Fails with the OS error when the kernel refuses (e.g. EPERM under a strict ptrace policy).
pub(crate) fn cma_read(pid: u32, remote: u64, local: *mut u8, len: usize) -> std::io::Result<()> {
    cma_copy(pid, remote, local, len, false)
}

/// Copies `len` bytes at `local` to `remote` in process `pid`, with `process_vm_writev`.
pub(crate) fn cma_write(
    pid: u32,
    remote: u64,
    local: *const u8,
    len: usize,
) -> std::io::Result<()> {
    cma_copy(pid, remote, local as *mut u8, len, true)
}

fn cma_copy(pid: u32, remote: u64, local: *mut u8, len: usize, write: bool) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let local_iov = libc::iovec {
            // SAFETY: `local` is valid for `len` bytes (the caller's buffer).
            iov_base: unsafe { local.add(done) } as *mut libc::c_void,
            iov_len: len - done,
        };
        let remote_iov = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the iovecs describe our own buffer (written only by a read) and the peer's
        // address range, which the kernel checks.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid as libc::pid_t, &local_iov, 1, &remote_iov, 1, 0)
            } else {
                libc::process_vm_readv(pid as libc::pid_t, &local_iov, 1, &remote_iov, 1, 0)
            }
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "cross-memory copy moved nothing",
            ));
        }
        done += n as usize;
    }
    Ok(())
}
