//! The few operating-system calls that std does not wrap: signals to process groups, the host
//! name, signal names, randomness, and children that end with the launcher.

use std::io;

/// Sends `signal` to the process group `pgid` (a rank and everything it started).
///
/// A group that no longer exists (`ESRCH`) is not an error: the rank already ended.
pub(crate) fn kill_group(pgid: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        // -0 and -1 would mean "our own group" and "every process we may signal".
        return;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses one process
    // group, and we checked above that it is neither 0 nor -1.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// Sends `signal` to the single process `pid`. The caller guarantees that `pid` is a child it has
/// not reaped yet, so the pid cannot have been reused by another process.
pub(crate) fn kill_process(pid: u32, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid <= 1 {
        return;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; pid > 1 addresses one process.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// This machine's host name, or `"localhost"` if it cannot be read.
pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call; gethostname writes
    // at most `len` bytes into it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

/// Whether file descriptor 0 is a terminal.
pub(crate) fn stdin_is_terminal() -> bool {
    use std::io::IsTerminal;
    io::stdin().is_terminal()
}

/// The conventional name of `signal` (`"SIGKILL"`), if it has one.
pub(crate) fn signal_name(signal: i32) -> Option<&'static str> {
    signal_hook::low_level::signal_name(signal)
}

/// Fills `bytes` from the operating system's random source.
pub(crate) fn random(bytes: &mut [u8]) -> io::Result<()> {
    getrandom::getrandom(bytes).map_err(|e| match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::other(e.to_string()),
    })
}

/// Puts the rank that `command` starts in a process group of its own, so that signals reach
/// whatever it starts, and, when the ranks of its host have a core each (`own_core`), in a
/// session of its own, as MPICH's hydra starts each rank. With the kernel's autogroups (on in
/// Debian's kernels) CPU time is shared among sessions first: a rank left in the launcher's
/// session shares one slice with everything else started from that shell, and a busy loop
/// beside the job then holds a waiting peer off its core for whole ticks. Ranks that outnumber
/// the cores stay in the launcher's session: they hand the core to each other with
/// sched_yield, which passes it only within one autogroup.
pub(crate) fn rank_group(command: &mut std::process::Command, own_core: bool) {
    use std::os::unix::process::CommandExt;
    if !own_core {
        command.process_group(0);
        return;
    }
    // SAFETY: between fork and exec the closure only makes the async-signal-safe call setsid
    // (which also makes the rank a process group leader).
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the child that `command` starts receive `signal` when the launcher dies, even by
/// SIGKILL: a relay or rank must not outlive the job that started it. (`ip netns exec` keeps
/// the setting: it is not set-user-ID and execs the command in the same process.)
pub(crate) fn end_with_launcher(command: &mut std::process::Command, signal: libc::c_int) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid before the fork; between fork and exec the closure only makes the
    // async-signal-safe calls prctl, getppid and _exit.
    let launcher = unsafe { libc::getpid() };
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The launcher may have died before the call above: then nobody sends the signal.
            if libc::getppid() != launcher {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// The CPUs this process may run on, in order.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let ok =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if ok != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: cpu < CPU_SETSIZE, the set's capacity.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Makes the child that `command` starts run on `cpus` only (inherited across exec). Cpu
/// numbers beyond the kernel's set size are left out; an empty set leaves the child unbound.
pub(crate) fn bind_to_cpus(command: &mut std::process::Command, cpus: &[usize]) {
    use std::os::unix::process::CommandExt;
    let cpus: Vec<usize> = cpus
        .iter()
        .copied()
        .filter(|&cpu| cpu < libc::CPU_SETSIZE as usize)
        .collect();
    if cpus.is_empty() {
        return;
    }
    // SAFETY: between fork and exec the closure only fills a stack value from a vector made
    // before the fork (no allocation) and makes the async-signal-safe call sched_setaffinity;
    // each cpu < CPU_SETSIZE.
    unsafe {
        command.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in &cpus {
                libc::CPU_SET(cpu, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Whether `program` names a directory: a path with a `/`, or the first entry of `PATH` that
/// holds the name. Starting a directory fails with EACCES, which alone would read as
/// "permission denied".
pub(crate) fn names_a_directory(program: &std::ffi::OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return path.is_dir();
    }
    let search = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&search)
        .map(|dir| dir.join(path))
        .find(|candidate| candidate.exists())
        .is_some_and(|found| found.is_dir())
}

#[cfg(test)]
mod directory_tests {
    use super::names_a_directory;

    #[test]
    fn a_directory_is_told_from_a_program() {
        assert!(names_a_directory("/tmp".as_ref()));
        assert!(names_a_directory("./".as_ref()));
        assert!(!names_a_directory("/bin/sh".as_ref()));
        assert!(!names_a_directory("sh".as_ref()));
        assert!(!names_a_directory("/no/such/thing".as_ref()));
    }
}
