//! The space of a new shared-memory segment, taken up front. A file in `/dev/shm` sized with
//! `ftruncate` alone has no pages yet: when tmpfs is full (a container's 64 MiB `/dev/shm`, a
//! small mount), the first touch of a page kills the rank with SIGBUS and no reason. Reserving
//! the whole length with `posix_fallocate` turns that into ENOSPC at creation, reported with
//! the file system's size and what the segment needs.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Gives `file` (at `path`) `len` bytes with every page allocated. On a file system that cannot
/// allocate ahead (`EOPNOTSUPP`) the file is only sized.
pub(crate) fn reserve(file: &File, path: &Path, len: usize) -> Result<(), String> {
    let wanted = libc::off_t::try_from(len)
        .map_err(|_| format!("cannot size {}: {len} bytes is too large", path.display()))?;
    // SAFETY: posix_fallocate on an open descriptor of ours; it only changes the file.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, wanted) };
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => file
            .set_len(len as u64)
            .map_err(|e| format!("cannot size {}: {e}", path.display())),
        libc::ENOSPC => Err(no_room(file, path, len)),
        errno => Err(format!(
            "cannot reserve {len} bytes for {}: {}",
            path.display(),
            std::io::Error::from_raw_os_error(errno)
        )),
    }
}

/// The ENOSPC message: the file system, its size and room, and what the segment needs.
fn no_room(file: &File, path: &Path, len: usize) -> String {
    let dir = path.parent().unwrap_or(Path::new("/dev/shm"));
    let mut room = String::new();
    // SAFETY: fstatvfs fills the zeroed struct it is given for an open descriptor of ours.
    unsafe {
        let mut fs: libc::statvfs = std::mem::zeroed();
        if libc::fstatvfs(file.as_raw_fd(), &mut fs) == 0 {
            let unit = fs.f_frsize as u64;
            room = format!(
                " ({} bytes, {} free)",
                fs.f_blocks as u64 * unit,
                fs.f_bavail as u64 * unit
            );
        }
    }
    format!(
        "no space left on {}{room} for {}: the segment needs {len} bytes (enlarge {}, e.g. docker run --shm-size, or lower FERRY_SHM_RING)",
        dir.display(),
        path.display(),
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_file_has_its_length_and_a_full_one_says_why() {
        let path = std::env::temp_dir().join(format!("ferry-reserve-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        reserve(&file, &path, 1 << 16).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1 << 16);
        let message = no_room(&file, &path, 1 << 40);
        let _ = std::fs::remove_file(&path);
        assert!(
            message.starts_with("no space left on ")
                && message.contains(" free) for ")
                && message.contains("needs 1099511627776 bytes"),
            "{message}"
        );
    }
}
