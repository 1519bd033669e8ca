//! Entering a network namespace made by `ip netns add` (`/run/netns/NAME`), as `ip netns exec`
//! does, for one thread: the launcher opens a grid job's bootstrap socket and relays inside the
//! testbed's hosts this way, and the testbed's tests and benchmarks play several hosts in one
//! process, one thread per host. The one copy of this: the testbed re-exports it, since the
//! launcher must not depend on the testbed.

use std::io;
use std::os::fd::AsFd;

/// Moves the calling thread into network namespace `name` (`/run/netns/NAME`): sockets it
/// opens afterwards live there. Other threads stay where they are.
pub fn enter(name: &str) -> io::Result<()> {
    let file = std::fs::File::open(format!("/run/netns/{name}"))?;
    rustix::thread::move_into_link_name_space(
        file.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )?;
    Ok(())
}

/// Runs `f` on a thread of its own inside namespace `name` and returns what it returned; the
/// calling thread stays in its namespace.
pub fn in_namespace<T: Send>(
    name: &str,
    f: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(name)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
    })
}
