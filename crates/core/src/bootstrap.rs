//! Who this process is and how it reaches the rest of its job at setup: a key-value space with
//! a fence, chosen once when the process starts ([`launched`]) from what its starter left in
//! the environment:
//!
//! - `FERRY_RANK` set: `ferry run` started it. The launcher's bootstrap server at
//!   `FERRY_PMI_ADDR` ([`launcher`]), the job id and key from `FERRY_JOB_ID`/`FERRY_JOB_KEY`.
//! - else `PMI_FD` or `PMI_PORT` set: a foreign process manager (MPICH's hydra, Slurm's
//!   `srun --mpi=pmi2`) started it. It speaks PMI-1 to that manager ([`pmi`]); see there how the
//!   job id and key are made.
//! - else `PMIX_RANK`, `PMIX_NAMESPACE` or a `PMIX_SERVER_URI*` set: a PMIx server (Slurm's
//!   `srun --mpi=pmix`, Open MPI's `prterun`) started it. It loads libpmix and uses the
//!   server's key space ([`pmix`]), with the same fence semantics.
//! - else nothing: the process is a job of one rank (an MPI singleton); [`launched`] says `None`.
//!
//! Either way the rest of setup sees one [`Bootstrap`] with the same operations (put, get,
//! lookup, fence, finalize, abort; spawn only under `ferry run`).

mod launcher;
mod pmi;
mod pmix;

pub(crate) use launcher::LauncherSession;
pub(crate) use pmi::PmiSession;
pub(crate) use pmix::PmixSession;

use crate::error::Error;
use ferry_wire::pmi::env;
use ferry_wire::JobKey;

/// The key under which rank 0 publishes the job key in an outside manager's key space.
const JOB_KEY_NAME: &str = "ferry-job-key";

/// An outside process manager's key space (PMI-1, PMIx): what agreeing on the job key takes.
pub(crate) trait ManagerKeySpace {
    /// This process's rank in the manager's job.
    fn rank(&self) -> u32;
    /// The number of processes in it.
    fn size(&self) -> u32;
    /// The manager's name for the job (PMI-1's key-space name, PMIx's namespace).
    fn namespace(&self) -> &str;
    /// Puts `value` under `key`, for others to read after the next fence.
    fn put(&mut self, key: &str, value: &str) -> Result<(), Error>;
    /// Waits for every rank, making what each put visible.
    fn fence(&mut self) -> Result<(), Error>;
    /// Reads `key`.
    fn lookup(&mut self, key: &str) -> Result<Option<String>, Error>;
    /// An error naming the manager and `what`.
    fn fail(&self, what: String) -> Error;

    /// The job key: drawn by rank 0 and put in the key space, read by every other rank after a
    /// fence (so the manager, and whoever can read its key space, is trusted with it).
    fn agree_on_job_key(&mut self) -> Result<JobKey, Error> {
        if self.rank() == 0 {
            let mut bytes = [0u8; 32];
            getrandom::getrandom(&mut bytes)
                .map_err(|e| self.fail(format!("no random bytes for the job key: {e}")))?;
            let key = JobKey(bytes);
            self.put(JOB_KEY_NAME, &key.to_hex())?;
            self.fence()?;
            return Ok(key);
        }
        self.fence()?;
        let hex = self
            .lookup(JOB_KEY_NAME)?
            .ok_or_else(|| self.fail("rank 0 published no job key".into()))?;
        JobKey::from_hex(&hex)
            .ok_or_else(|| self.fail("rank 0's job key is not 64 hex digits".into()))
    }
}

pub(crate) fn bootstrap_error(what: impl std::fmt::Display) -> Error {
    Error::Bootstrap(what.to_string())
}

/// How long set-up waits for the launcher or a process manager to connect and to answer a
/// request that needs no other rank (`FERRY_CONNECT_TIMEOUT`, 30 s unless set; `None` for 0,
/// no limit). Fences wait for every rank, however late, and are not bounded by it.
pub(crate) fn reply_timeout() -> Result<Option<std::time::Duration>, Error> {
    let get = |name: &str| std::env::var(name).ok();
    let secs = crate::settings::number(&get, "FERRY_CONNECT_TIMEOUT")?.unwrap_or(30);
    Ok((secs > 0).then(|| std::time::Duration::from_secs(secs)))
}

/// Whether a read failed because its timeout ran out.
pub(crate) fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// `addr` (`host:port`) reached within `timeout`, each of its addresses in turn.
pub(crate) fn connect_within(
    addr: &str,
    timeout: Option<std::time::Duration>,
) -> std::io::Result<std::net::TcpStream> {
    use std::net::ToSocketAddrs;
    let Some(timeout) = timeout else {
        return std::net::TcpStream::connect(addr);
    };
    let mut last = None;
    for candidate in addr.to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&candidate, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("the name resolves to no address")))
}

/// The key-value session with whoever started this process; chosen once, at setup.
pub(crate) enum Bootstrap {
    /// `ferry run`'s bootstrap server.
    Launcher(LauncherSession),
    /// A foreign process manager over PMI-1.
    Pmi(PmiSession),
    /// A PMIx server, through libpmix.
    Pmix(PmixSession),
}

impl Bootstrap {
    /// Publishes `value` under `key` (visible to others after the next fence under PMI).
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        match self {
            Bootstrap::Launcher(s) => s.put(key, value),
            Bootstrap::Pmi(s) => s.put(key, value),
            Bootstrap::Pmix(s) => s.put(key, value),
        }
    }

    /// The value under `key`, which must have been published.
    pub(crate) fn get(&mut self, key: &str) -> Result<String, Error> {
        self.lookup(key)?
            .ok_or_else(|| bootstrap_error(format!("bootstrap key {key:?} was never published")))
    }

    /// The value published under `key`, or `None` if nothing is (yet).
    pub(crate) fn lookup(&mut self, key: &str) -> Result<Option<String>, Error> {
        match self {
            Bootstrap::Launcher(s) => s.lookup(key),
            Bootstrap::Pmi(s) => s.lookup(key),
            Bootstrap::Pmix(s) => s.lookup(key),
        }
    }

    /// Publishes `value` under the name `key` for every process of the job at once (MPI's name
    /// service); an empty value withdraws it.
    pub(crate) fn publish_name(&mut self, key: &str, value: &str) -> Result<(), Error> {
        match self {
            Bootstrap::Launcher(s) => s.put(key, value),
            Bootstrap::Pmi(s) => s.publish_name(key, value),
            Bootstrap::Pmix(s) => s.publish_name(key, value),
        }
    }

    /// The value published under the name `key` ("" once withdrawn under `ferry run`).
    pub(crate) fn lookup_name(&mut self, key: &str) -> Result<Option<String>, Error> {
        match self {
            Bootstrap::Launcher(s) => s.lookup(key),
            Bootstrap::Pmi(s) => s.lookup_name(key),
            Bootstrap::Pmix(s) => s.lookup_name(key),
        }
    }

    /// Waits until every rank of the job has fenced.
    pub(crate) fn fence(&mut self) -> Result<(), Error> {
        match self {
            Bootstrap::Launcher(s) => s.fence(),
            Bootstrap::Pmi(s) => s.fence(),
            Bootstrap::Pmix(s) => s.fence(),
        }
    }

    /// Says that this rank exits normally.
    pub(crate) fn finalize(&mut self) -> Result<(), Error> {
        match self {
            Bootstrap::Launcher(s) => s.finalize(),
            Bootstrap::Pmi(s) => s.finalize(),
            Bootstrap::Pmix(s) => s.finalize(),
        }
    }

    /// Asks for a new world; returns the universe rank of its rank 0.
    pub(crate) fn spawn(
        &mut self,
        parent: &str,
        apps: Vec<ferry_wire::pmi::App>,
    ) -> Result<u32, Error> {
        match self {
            Bootstrap::Launcher(s) => s.spawn(parent, apps),
            Bootstrap::Pmi(s) => Err(spawn_unsupported(s.manager())),
            Bootstrap::Pmix(s) => Err(spawn_unsupported(s.manager())),
        }
    }

    /// Asks whoever started the job to end it with `code`; does not wait for an answer.
    pub(crate) fn abort(&mut self, code: i32, message: &str) {
        match self {
            Bootstrap::Launcher(s) => s.abort(code, message),
            Bootstrap::Pmi(s) => s.abort(code, message),
            Bootstrap::Pmix(s) => s.abort(code, message),
        }
    }

    /// MPI_APPNUM as the process manager tells it (`None` under `ferry run`, whose launcher
    /// passes it in the environment, or when the manager says -1).
    pub(crate) fn appnum(&self) -> Option<i32> {
        match self {
            Bootstrap::Launcher(_) => None,
            Bootstrap::Pmi(s) => s.appnum(),
            Bootstrap::Pmix(s) => s.appnum(),
        }
    }

    /// MPI_UNIVERSE_SIZE as the process manager tells it (`None` under `ferry run` or when it
    /// does not know: hydra says -1).
    pub(crate) fn universe_size(&self) -> Option<u32> {
        match self {
            Bootstrap::Launcher(_) => None,
            Bootstrap::Pmi(s) => s.universe_size(),
            Bootstrap::Pmix(s) => s.universe_size(),
        }
    }
}

fn spawn_unsupported(manager: &str) -> Error {
    bootstrap_error(format!(
        "MPI_Comm_spawn is not supported under {manager} (start the job with `ferry run` to spawn)"
    ))
}

/// Who this process is in its job, and the session to the rest of it.
pub(crate) struct Launched {
    /// Rank in its world.
    pub rank: u32,
    /// Ranks in its world.
    pub size: u32,
    /// Universe rank of the world's rank 0 (0 but in worlds spawned under `ferry run`).
    pub base: u32,
    /// The world's number among the job's worlds (0: the first one).
    pub world_index: u32,
    /// Job id, nonzero; names shared-memory segments and goes into every handshake.
    pub job: u64,
    /// The job key of the handshakes between ranks.
    pub key: JobKey,
    /// The key-value session.
    pub boot: Bootstrap,
}

fn env_var(name: &str) -> Result<String, Error> {
    std::env::var(name)
        .map_err(|_| Error::Bootstrap(format!("{name} is not set; start ranks with `ferry run`")))
}

fn env_number<T: std::str::FromStr>(name: &str) -> Result<T, Error> {
    let text = env_var(name)?;
    text.parse()
        .map_err(|_| Error::Bootstrap(format!("{name}={text:?} is not a number")))
}

fn optional_number<T: std::str::FromStr>(name: &str) -> Result<Option<T>, Error> {
    match std::env::var_os(name) {
        Some(_) => env_number(name).map(Some),
        None => Ok(None),
    }
}

/// Finds out who started this process and joins its job; `None` for a process started by no
/// launcher (a job of one rank). `pmix_lib` is the libpmix to load if a PMIx server did.
pub(crate) fn launched(pmix_lib: &str) -> Result<Option<Launched>, Error> {
    if std::env::var_os(env::RANK).is_some() {
        return from_ferry_run().map(Some);
    }
    if std::env::var_os(pmi::env::FD).is_some() || std::env::var_os(pmi::env::PORT).is_some() {
        return from_process_manager().map(Some);
    }
    if pmix::started_by_pmix() {
        return from_pmix_server(pmix_lib).map(Some);
    }
    Ok(None)
}

fn from_ferry_run() -> Result<Launched, Error> {
    let rank: u32 = env_number(env::RANK)?;
    let size: u32 = env_number(env::SIZE)?;
    let base = optional_number(env::UNIVERSE_BASE)?.unwrap_or(0);
    let world_index = optional_number(env::WORLD_INDEX)?.unwrap_or(0);
    let me = universe_rank(base, rank)?;
    let job: u64 = env_number(env::JOB_ID)?;
    let key = JobKey::from_hex(&env_var(env::JOB_KEY)?)
        .ok_or_else(|| Error::Bootstrap(format!("{} is not 64 hex digits", env::JOB_KEY)))?;
    check_rank(rank, size)?;
    let boot = Bootstrap::Launcher(LauncherSession::connect(&env_var(env::ADDR)?, &key, me)?);
    Ok(Launched {
        rank,
        size,
        base,
        world_index,
        job,
        key,
        boot,
    })
}

fn universe_rank(base: u32, rank: u32) -> Result<u32, Error> {
    base.checked_add(rank)
        .filter(|&u| u < crate::tcp::UNIVERSE_CAP)
        .ok_or_else(|| Error::Bootstrap(format!("universe rank {base} + {rank} is too large")))
}

fn check_rank(rank: u32, size: u32) -> Result<(), Error> {
    if rank >= size {
        return Err(Error::Bootstrap(format!(
            "rank {rank} is not below the job size {size}"
        )));
    }
    Ok(())
}

fn from_process_manager() -> Result<Launched, Error> {
    let manager = pmi::manager_name();
    let env_rank = optional_number(pmi::env::RANK)?;
    let env_size = optional_number(pmi::env::SIZE)?;
    let session = match std::env::var(pmi::env::FD) {
        Ok(fd) => {
            let socket = pmi::inherited_socket(&fd)?;
            let clone = socket.try_clone().map_err(bootstrap_error)?;
            clone
                .set_read_timeout(reply_timeout()?)
                .map_err(bootstrap_error)?;
            let session = PmiSession::open(Box::new(socket), manager, None, env_rank, env_size)?;
            clone.set_read_timeout(None).map_err(bootstrap_error)?;
            session
        }
        Err(_) => {
            let addr = env_var(pmi::env::PORT)?;
            let id = env_number(pmi::env::ID)?;
            let timeout = reply_timeout()?;
            let stream = connect_within(&addr, timeout).map_err(|e| {
                bootstrap_error(format!("cannot reach {manager} at PMI_PORT={addr}: {e}"))
            })?;
            stream.set_nodelay(true).ok();
            // The opening exchange is answered at once by a live manager: bounded; later
            // requests include barriers, which wait for every rank.
            let clone = stream.try_clone().map_err(bootstrap_error)?;
            clone.set_read_timeout(timeout).map_err(bootstrap_error)?;
            let session =
                PmiSession::open(Box::new(stream), manager, Some(id), env_rank, env_size)?;
            clone.set_read_timeout(None).map_err(bootstrap_error)?;
            session
        }
    };
    launched_by_manager(session, Bootstrap::Pmi)
}

fn from_pmix_server(library: &str) -> Result<Launched, Error> {
    launched_by_manager(PmixSession::connect(library)?, Bootstrap::Pmix)
}

/// A rank of the single world an outside manager started: its rank and size checked, the job
/// id a hash of the manager's name for the job, and the job key agreed on.
fn launched_by_manager<S: ManagerKeySpace>(
    mut session: S,
    boot: fn(S) -> Bootstrap,
) -> Result<Launched, Error> {
    let (rank, size) = (session.rank(), session.size());
    universe_rank(0, size.saturating_sub(1))?;
    check_rank(rank, size)?;
    let job = ferry_wire::procman::job_id(session.namespace());
    let key = session.agree_on_job_key()?;
    Ok(Launched {
        rank,
        size,
        base: 0,
        world_index: 0,
        job,
        key,
        boot: boot(session),
    })
}
