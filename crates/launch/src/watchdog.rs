//! The watchdog: what a job leaves on disk while it sets up is removed even when the launcher
//! is killed with SIGKILL.
//!
//! Ranks unlink their shared-memory segments once every rank of their host has attached, and
//! the launcher removes the rest when the job ends; but a launcher killed during set-up runs no
//! code at all. Its ranks die with it (`PR_SET_PDEATHSIG`), but not what they started, nor
//! their files. A small `sh`, started before anything else of the job, does the rest: it reads
//! the ranks' process-group ids from its standard input, one a line, until end of file — the
//! launcher holds the only write end (close-on-exec, so no rank inherits it), so that comes
//! however the launcher ends — then kills those groups and removes the files. It runs in a
//! process group of its own, so that a Ctrl-C on the terminal does not reach it. A launcher
//! that ends normally cleans up itself and kills the watchdog first: nothing of the job
//! outlives it.
//!
//! A shell rather than a forked copy of the launcher: after `fork` in a process with threads
//! only async-signal-safe calls are allowed, and listing a directory is not one of them.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Collects process-group ids until end of file, kills those groups, then removes `$1*` (the
/// job's segments) and the folder `$2` if given; the segments once more a moment later, for a
/// rank that was still creating its own.
const SCRIPT: &str = r#"groups=
while read -r group; do groups="$groups -$group"; done
[ -z "$groups" ] || kill -KILL $groups 2>/dev/null
sleep 0.2; rm -f -- "$1"*; [ -z "$2" ] || rm -rf -- "$2"
sleep 1; rm -f -- "$1"*"#;

/// The job's watchdog; dropping it ends it without letting it act.
pub(crate) struct Watchdog {
    child: Child,
}

impl Watchdog {
    /// Starts the watchdog of job `job`, which also removes `folder` (a grid job's relay-key
    /// folder). `None` if it cannot start (no `/bin/sh`): the job runs without it.
    pub(crate) fn start(job: u64, folder: Option<&Path>) -> Option<Watchdog> {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(SCRIPT)
            .arg("ferry-watchdog")
            .arg(format!("{}-", crate::job::shm_prefix(job)))
            .arg(folder.map(Path::as_os_str).unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        command.spawn().ok().map(|child| Watchdog { child })
    }

    /// Where to write the process-group id of each rank, one a line (a second descriptor of
    /// the pipe, close-on-exec like the first).
    pub(crate) fn groups(&self) -> Option<std::fs::File> {
        use std::os::fd::AsFd;
        let stdin = self.child.stdin.as_ref()?;
        stdin
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .map(std::fs::File::from)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Not reaped yet, so the pid is still the watchdog's.
        crate::sys::kill_process(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn kills_the_groups_it_was_told_of() {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        let job = u64::from(std::process::id()) << 20 | 0xdef;
        let mut group = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep starts");
        let mut watchdog = Watchdog::start(job, None).expect("sh starts");
        let mut groups = watchdog.groups().expect("a pipe");
        writeln!(groups, "{}", group.id()).expect("written");
        drop(groups);
        drop(watchdog.child.stdin.take());
        let until = Instant::now() + Duration::from_secs(5);
        while group.try_wait().expect("try_wait").is_none() {
            assert!(Instant::now() < until, "the group was not killed");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn acts_when_its_owner_goes_and_not_when_dropped() {
        let job = u64::from(std::process::id()) << 20 | 0xabc;
        let file = format!("{}-0", crate::job::shm_prefix(job));
        let folder = std::env::temp_dir().join(format!("ferry-watchdog-test-{job}"));
        std::fs::write(&file, b"x").expect("a file in /dev/shm");
        std::fs::create_dir_all(&folder).expect("a folder");

        // Dropped: it does nothing.
        drop(Watchdog::start(job, Some(&folder)).expect("sh starts"));
        assert!(Path::new(&file).exists());
        assert!(folder.exists());

        // Its standard input closed (as when the launcher dies): it removes both.
        let mut watchdog = Watchdog::start(job, Some(&folder)).expect("sh starts");
        drop(watchdog.child.stdin.take());
        let until = Instant::now() + Duration::from_secs(5);
        while (Path::new(&file).exists() || folder.exists()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!Path::new(&file).exists());
        assert!(!folder.exists());
    }
}
