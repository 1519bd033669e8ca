//! Directories under the hosts' private `/tmp` and `/dev/shm` that every host still shows.
//!
//! A host made into a machine ([`crate::ssh`]) mounts its own tmpfs on `/tmp` and on
//! `/dev/shm`, which hides everything the machine keeps there, also a checkout under `/tmp`
//! whose binaries a test runs on the hosts. So the directory below `/tmp` (or `/dev/shm`) that
//! holds the program bringing the testbed up, the one that holds its working directory, and
//! those named in [`crate::UpOptions::keep`] are bound back into every host at the same path:
//! the same files, shared by the hosts and this machine, while the rest of the host's `/tmp`
//! stays its own.

use std::path::{Component, Path, PathBuf};

/// The directories each host mounts a private tmpfs on.
pub const PRIVATE_DIRS: [&str; 2] = ["/tmp", "/dev/shm"];

/// The directory right below a private directory that holds `path` (`/tmp/ck` for
/// `/tmp/ck/target/release/ferry`), if `path` is under one.
pub fn kept_dir(path: &Path) -> Option<PathBuf> {
    PRIVATE_DIRS.iter().find_map(|private| {
        let rest = path.strip_prefix(private).ok()?;
        match rest.components().next()? {
            Component::Normal(first) => Some(Path::new(private).join(first)),
            _ => None,
        }
    })
}

/// The directories every host shows: those holding this program, its working directory and
/// `extra`, each once, each an existing directory.
pub fn dirs_to_keep(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut wanted: Vec<PathBuf> = extra.to_vec();
    wanted.extend(std::env::current_exe().ok());
    wanted.extend(std::env::current_dir().ok());
    let mut out: Vec<PathBuf> = Vec::new();
    for path in wanted {
        // A symlink under /tmp may lead anywhere; the host needs what it points to.
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        let Some(dir) = kept_dir(&path) else {
            continue;
        };
        if dir.is_dir() && !out.contains(&dir) {
            out.push(dir);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_right_below_tmp_or_dev_shm() {
        for (path, kept) in [
            ("/tmp/ck/target/release/ferry", Some("/tmp/ck")),
            ("/tmp/ck", Some("/tmp/ck")),
            ("/dev/shm/x/y", Some("/dev/shm/x")),
            ("/tmp", None),
            ("/tmpfoo/x", None),
            ("/work/ferry/target", None),
            ("/run/ferry-testbed/p/hosts", None),
        ] {
            assert_eq!(
                kept_dir(Path::new(path)).as_deref(),
                kept.map(Path::new),
                "{path}"
            );
        }
    }

    #[test]
    fn only_existing_directories_each_once() {
        let here = std::env::current_dir().unwrap();
        let dirs = dirs_to_keep(&[
            "/tmp".into(),
            "/tmp/ferry-kept-missing-dir-of-no-one/x".into(),
        ]);
        assert!(dirs.iter().all(|d| d.is_dir()), "{dirs:?}");
        let mut unique = dirs.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), dirs.len(), "{dirs:?}");
        let own = std::fs::canonicalize(&here).ok().and_then(|h| kept_dir(&h));
        assert_eq!(
            own.as_ref().is_some_and(|d| dirs.contains(d)),
            own.is_some()
        );
    }
}
