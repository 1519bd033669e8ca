//! The session with a PMIx server (Slurm's `srun --mpi=pmix`, Open MPI's `prterun`) through
//! the system's libpmix, loaded at run time ([`ffi`], where every `unsafe` of it is).
//!
//! **When.** A process whose environment has `PMIX_RANK`, `PMIX_NAMESPACE` or a
//! `PMIX_SERVER_URI*` (and no `FERRY_RANK`, `PMI_FD` or `PMI_PORT`) was started by a PMIx
//! server; only then is `libpmix.so.2` (or `FERRY_PMIX_LIB`) loaded.
//!
//! **Who we are.** Rank and namespace from `PMIx_Init`, the job size from the job-level
//! `PMIX_JOB_SIZE`, `MPI_UNIVERSE_SIZE` and `MPI_APPNUM` from `PMIX_UNIV_SIZE`/`PMIX_APPNUM`.
//! The job id is a hash of the namespace (`ferry_wire::procman::job_id`), the same on every
//! rank.
//!
//! **Keys.** PMIx has no key space shared by the job: a value is read from the process that
//! put it. ferry's bootstrap keys name that process: they end in `-<universe rank>` of the
//! rank that puts them (`card-3`, `tcp-3`), and under PMIx the universe rank is the PMIx
//! rank. A key without that ending is refused with an error. Puts are committed at once and
//! seen by the others after the next fence, which collects every rank's values
//! (`PMIX_COLLECT_DATA`); a get asks only what the local server has (`PMIX_IMMEDIATE`), so a
//! key nobody put is "none", never a wait. Values travel as bytes (`PMIX_BYTE_OBJECT`) up to
//! [`MAX_VALUE`]; keys up to 511 bytes (`PMIX_MAX_KEYLEN`).
//!
//! **The job key.** As under PMI-1 (see `super::pmi`): rank 0 draws it and puts it, the others
//! read it from rank 0 after one fence. That trusts the PMIx servers and whoever runs them.
//!
//! **Names.** MPI's name service (`MPI_Publish_name`) is the server's (`PMIx_Publish`,
//! `PMIx_Lookup` without waiting, `PMIx_Unpublish`): PRRTE has one; Slurm 22.05's server has
//! none, and its refusal becomes an error naming the call and the server. `MPI_Comm_spawn`
//! needs `ferry run`.

mod ffi;

use super::{bootstrap_error, ManagerKeySpace, JOB_KEY_NAME};
use crate::error::Error;

/// Environment variables a PMIx server sets for the processes it starts.
pub(crate) mod env {
    /// Our rank.
    pub const RANK: &str = "PMIX_RANK";
    /// Our job's namespace.
    pub const NAMESPACE: &str = "PMIX_NAMESPACE";
    /// The server's address; versions add a suffix (`PMIX_SERVER_URI2`, `…URI41`).
    pub const SERVER_URI: &str = "PMIX_SERVER_URI";
}

/// The key under which rank 0 publishes the job key.
/// Largest value ferry puts (its cards and addresses are far smaller): kept well inside what
/// a server forwards in one fence for every rank.
const MAX_VALUE: usize = 64 << 10;

/// Whether the environment says a PMIx server started this process.
pub(crate) fn started_by_pmix() -> bool {
    std::env::var_os(env::RANK).is_some()
        || std::env::var_os(env::NAMESPACE).is_some()
        || std::env::vars_os()
            .any(|(k, _)| k.to_str().is_some_and(|k| k.starts_with(env::SERVER_URI)))
}

/// The name of the server that started us, for messages.
fn manager_name() -> &'static str {
    if std::env::var_os("SLURM_JOB_ID").is_some() {
        "Slurm (PMIx)"
    } else if std::env::var_os("PRTE_LAUNCHED").is_some() {
        "PRRTE (PMIx)"
    } else {
        "the PMIx server"
    }
}

/// What the session needs of libpmix; [`ffi::Client`] in a process, a fake in the tests.
pub(crate) trait Pmix {
    /// Our rank.
    fn rank(&self) -> u32;
    /// Our namespace.
    fn nspace(&self) -> String;
    /// Puts bytes under `key` for the whole job.
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ffi::Status>;
    /// Sends the puts to the local server.
    fn commit(&mut self) -> Result<(), ffi::Status>;
    /// A fence of the whole job that collects every rank's values.
    fn fence(&mut self) -> Result<(), ffi::Status>;
    /// The value of `rank` (or [`ffi::RANK_WILDCARD`]: the job) under `key`, if any now.
    fn get(&mut self, rank: u32, key: &str) -> Result<Option<ffi::Fetched>, ffi::Status>;
    /// Publishes `value` under `name` in the server's name service.
    fn publish(&mut self, name: &str, value: &str) -> Result<(), ffi::Status>;
    /// What the name service holds under `name`, if anything now.
    fn lookup(&mut self, name: &str) -> Result<Option<ffi::Fetched>, ffi::Status>;
    /// Withdraws `name`.
    fn unpublish(&mut self, name: &str) -> Result<(), ffi::Status>;
    /// Ends the job.
    fn abort(&mut self, code: i32, message: &str) -> Result<(), ffi::Status>;
    /// Leaves PMIx.
    fn finalize(&mut self) -> Result<(), ffi::Status>;
}

impl Pmix for ffi::Client {
    fn rank(&self) -> u32 {
        ffi::Client::rank(self)
    }
    fn nspace(&self) -> String {
        ffi::Client::nspace(self)
    }
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ffi::Status> {
        ffi::Client::put(self, key, value)
    }
    fn commit(&mut self) -> Result<(), ffi::Status> {
        ffi::Client::commit(self)
    }
    fn fence(&mut self) -> Result<(), ffi::Status> {
        ffi::Client::fence(self)
    }
    fn get(&mut self, rank: u32, key: &str) -> Result<Option<ffi::Fetched>, ffi::Status> {
        ffi::Client::get(self, rank, key)
    }
    fn publish(&mut self, name: &str, value: &str) -> Result<(), ffi::Status> {
        ffi::Client::publish(self, name, value)
    }
    fn lookup(&mut self, name: &str) -> Result<Option<ffi::Fetched>, ffi::Status> {
        ffi::Client::lookup(self, name)
    }
    fn unpublish(&mut self, name: &str) -> Result<(), ffi::Status> {
        ffi::Client::unpublish(self, name)
    }
    fn abort(&mut self, code: i32, message: &str) -> Result<(), ffi::Status> {
        ffi::Client::abort(self, code, message)
    }
    fn finalize(&mut self) -> Result<(), ffi::Status> {
        ffi::Client::finalize(self)
    }
}

/// A session with the PMIx server of this process's job.
pub(crate) struct PmixSession {
    pmix: Box<dyn Pmix>,
    manager: &'static str,
    nspace: String,
    rank: u32,
    size: u32,
    appnum: Option<i32>,
    universe_size: Option<u32>,
}

impl PmixSession {
    /// Loads `library` (see [`crate::Config::pmix_lib`]), initializes PMIx and learns the job.
    pub(crate) fn connect(library: &str) -> Result<PmixSession, Error> {
        let manager = manager_name();
        let client = ffi::Client::init(library).map_err(|e| {
            bootstrap_error(format!(
                "the environment names {manager} ({}, {} or {}*): {e}",
                env::RANK,
                env::NAMESPACE,
                env::SERVER_URI
            ))
        })?;
        PmixSession::open(Box::new(client), manager)
    }

    /// Opens the session over `pmix`, already initialized: asks the job's size, universe
    /// size and appnum.
    pub(crate) fn open(pmix: Box<dyn Pmix>, manager: &'static str) -> Result<PmixSession, Error> {
        let mut session = PmixSession {
            rank: pmix.rank(),
            nspace: pmix.nspace(),
            pmix,
            manager,
            size: 0,
            appnum: None,
            universe_size: None,
        };
        let size = session
            .number(ffi::RANK_WILDCARD, "pmix.job.size")?
            .ok_or_else(|| session.fail("it gave no job size (PMIX_JOB_SIZE)"))?;
        session.size = u32::try_from(size)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| session.fail(format!("job size {size} is not a number of ranks")))?;
        // Both optional: a server that does not know them leaves them unset.
        session.universe_size = session
            .number(ffi::RANK_WILDCARD, "pmix.univ.size")
            .ok()
            .flatten()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 0);
        session.appnum = session
            .number(session.rank, "pmix.appnum")
            .ok()
            .flatten()
            .and_then(|n| i32::try_from(n).ok());
        Ok(session)
    }

    pub(crate) fn manager(&self) -> &'static str {
        self.manager
    }

    pub(crate) fn rank(&self) -> u32 {
        self.rank
    }

    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    pub(crate) fn nspace(&self) -> &str {
        &self.nspace
    }

    pub(crate) fn appnum(&self) -> Option<i32> {
        self.appnum
    }

    pub(crate) fn universe_size(&self) -> Option<u32> {
        self.universe_size
    }

    fn fail(&self, what: impl std::fmt::Display) -> Error {
        bootstrap_error(format!("{}: {what}", self.manager))
    }

    fn call(&self, what: &str, status: ffi::Status) -> Error {
        self.fail(format!("{what} failed: {status}"))
    }

    /// An integer of `rank` under `key`.
    fn number(&mut self, rank: u32, key: &str) -> Result<Option<u64>, Error> {
        match self.pmix.get(rank, key) {
            Ok(Some(ffi::Fetched::Number(n))) => Ok(Some(n)),
            Ok(None) => Ok(None),
            Ok(Some(other)) => Err(self.fail(format!("{key} is {other:?}, not a number"))),
            Err(status) => Err(self.call(&format!("PMIx_Get of {key}"), status)),
        }
    }

    fn key_fits(&self, key: &str) -> Result<(), Error> {
        if key.len() > ffi::MAX_KEYLEN || key.contains('\0') {
            return Err(self.fail(format!(
                "key {key:?} is not a PMIx key (at most {} bytes, no NUL)",
                ffi::MAX_KEYLEN
            )));
        }
        Ok(())
    }

    /// The rank that puts `key`: the number after its last `-`.
    fn owner(&self, key: &str) -> Result<u32, Error> {
        if key == JOB_KEY_NAME {
            return Ok(0);
        }
        key.rsplit_once('-')
            .and_then(|(_, rank)| rank.parse().ok())
            .filter(|&rank| rank < self.size)
            .ok_or_else(|| {
                self.fail(format!(
                    "key {key:?} names no rank of the job (under PMIx a key ends in the rank that puts it)"
                ))
            })
    }

    /// Publishes `value` under `key`: seen by the others after the next fence.
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        self.key_fits(key)?;
        let owner = self.owner(key)?;
        if owner != self.rank {
            return Err(self.fail(format!(
                "rank {} cannot put {key:?}, which is rank {owner}'s",
                self.rank
            )));
        }
        if value.len() > MAX_VALUE {
            return Err(self.fail(format!(
                "the value under {key:?} is {} bytes, more than the {MAX_VALUE} ferry puts in PMIx",
                value.len()
            )));
        }
        self.pmix
            .put(key, value.as_bytes())
            .map_err(|s| self.call(&format!("PMIx_Put of {key:?}"), s))?;
        // Committed at once: a fence may come from a place that does not know of the put.
        self.pmix.commit().map_err(|s| self.call("PMIx_Commit", s))
    }

    /// The value its owner put under `key`, or `None` if there is none (yet).
    pub(crate) fn lookup(&mut self, key: &str) -> Result<Option<String>, Error> {
        self.key_fits(key)?;
        let owner = self.owner(key)?;
        match self.pmix.get(owner, key) {
            Ok(None) => Ok(None),
            Ok(Some(ffi::Fetched::Bytes(bytes))) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| self.fail(format!("rank {owner}'s value under {key:?} is not text"))),
            Ok(Some(other)) => Err(self.fail(format!(
                "rank {owner}'s value under {key:?} is {other:?}, not ferry's"
            ))),
            Err(status) => {
                Err(self.call(&format!("PMIx_Get of {key:?} from rank {owner}"), status))
            }
        }
    }

    /// Publishes `value` under the name `key` in the server's name service, seen by every
    /// process at once; an empty value withdraws the name.
    pub(crate) fn publish_name(&mut self, key: &str, value: &str) -> Result<(), Error> {
        self.key_fits(key)?;
        let done = match value.is_empty() {
            true => self.pmix.unpublish(key),
            false => self.pmix.publish(key, value),
        };
        done.map_err(|s| self.name_service_error(&format!("publishing the name {key:?}"), s))
    }

    /// What the name service holds under `key`, if anything.
    pub(crate) fn lookup_name(&mut self, key: &str) -> Result<Option<String>, Error> {
        self.key_fits(key)?;
        match self.pmix.lookup(key) {
            Ok(None) => Ok(None),
            Ok(Some(ffi::Fetched::Bytes(bytes))) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| self.fail(format!("the name {key:?} was not published by ferry"))),
            Ok(Some(other)) => {
                Err(self.fail(format!("the name {key:?} holds {other:?}, not ferry's")))
            }
            Err(s) => Err(self.name_service_error(&format!("looking up the name {key:?}"), s)),
        }
    }

    fn name_service_error(&self, what: &str, status: ffi::Status) -> Error {
        if status.code == ffi::ERR_NOT_SUPPORTED {
            return self.fail(format!(
                "{what}: it has no name service (start the job with `ferry run`, or under hydra)"
            ));
        }
        self.call(what, status)
    }

    pub(crate) fn fence(&mut self) -> Result<(), Error> {
        self.pmix.fence().map_err(|s| self.call("PMIx_Fence", s))
    }

    pub(crate) fn finalize(&mut self) -> Result<(), Error> {
        self.pmix
            .finalize()
            .map_err(|s| self.call("PMIx_Finalize", s))
    }

    /// Asks the server to end the job with `code`. The message also goes to our standard
    /// error: not every server prints it.
    pub(crate) fn abort(&mut self, code: i32, message: &str) {
        eprintln!("ferry: rank {}: abort (code {code}): {message}", self.rank);
        if let Err(status) = self.pmix.abort(code, message) {
            eprintln!("ferry: rank {}: PMIx_Abort failed: {status}", self.rank);
        }
    }
}

impl ManagerKeySpace for PmixSession {
    fn rank(&self) -> u32 {
        PmixSession::rank(self)
    }
    fn size(&self) -> u32 {
        PmixSession::size(self)
    }
    fn namespace(&self) -> &str {
        self.nspace()
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        PmixSession::put(self, key, value)
    }
    fn fence(&mut self) -> Result<(), Error> {
        PmixSession::fence(self)
    }
    fn lookup(&mut self, key: &str) -> Result<Option<String>, Error> {
        PmixSession::lookup(self, key)
    }
    fn fail(&self, what: String) -> Error {
        PmixSession::fail(self, what)
    }
}

#[cfg(test)]
mod tests {
    use super::ffi::{Fetched, Status, RANK_WILDCARD};
    use super::*;
    use std::collections::HashMap;
    use std::sync::{Arc, Barrier, Mutex};

    /// A PMIx server as libpmix presents it: committed values are seen by others after a
    /// fence, read from the rank that put them; job-level keys under the wildcard rank.
    struct Server {
        size: u32,
        committed: Mutex<HashMap<(u32, String), Vec<u8>>>,
        barrier: Barrier,
        aborted: Mutex<Option<i32>>,
        names: Mutex<HashMap<String, String>>,
    }

    struct FakeClient {
        server: Arc<Server>,
        rank: u32,
        pending: Vec<(String, Vec<u8>)>,
        committed: Vec<(String, Vec<u8>)>,
    }

    impl Pmix for FakeClient {
        fn rank(&self) -> u32 {
            self.rank
        }
        fn nspace(&self) -> String {
            "slurm.pmix.7.0".into()
        }
        fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Status> {
            self.pending.push((key.into(), value.to_vec()));
            Ok(())
        }
        fn commit(&mut self) -> Result<(), Status> {
            self.committed.append(&mut self.pending);
            Ok(())
        }
        fn fence(&mut self) -> Result<(), Status> {
            let mut all = self.server.committed.lock().unwrap();
            for (k, v) in self.committed.drain(..) {
                all.insert((self.rank, k), v);
            }
            drop(all);
            self.server.barrier.wait();
            Ok(())
        }
        fn get(&mut self, rank: u32, key: &str) -> Result<Option<Fetched>, Status> {
            if rank == RANK_WILDCARD {
                return Ok(match key {
                    "pmix.job.size" => Some(Fetched::Number(self.server.size.into())),
                    "pmix.univ.size" => Some(Fetched::Number(8)),
                    _ => None,
                });
            }
            if key == "pmix.appnum" {
                return Ok(Some(Fetched::Number(0)));
            }
            let all = self.server.committed.lock().unwrap();
            Ok(all
                .get(&(rank, key.to_string()))
                .cloned()
                .map(Fetched::Bytes))
        }
        fn publish(&mut self, name: &str, value: &str) -> Result<(), Status> {
            let mut names = self.server.names.lock().unwrap();
            names.insert(name.into(), value.into());
            Ok(())
        }
        fn lookup(&mut self, name: &str) -> Result<Option<Fetched>, Status> {
            let names = self.server.names.lock().unwrap();
            Ok(names
                .get(name)
                .map(|v| Fetched::Bytes(v.clone().into_bytes())))
        }
        fn unpublish(&mut self, name: &str) -> Result<(), Status> {
            match self.server.names.lock().unwrap().remove(name) {
                Some(_) => Ok(()),
                None => Err(Status {
                    code: -46,
                    name: "NOT-FOUND".into(),
                }),
            }
        }
        fn abort(&mut self, code: i32, _message: &str) -> Result<(), Status> {
            *self.server.aborted.lock().unwrap() = Some(code);
            Ok(())
        }
        fn finalize(&mut self) -> Result<(), Status> {
            Ok(())
        }
    }

    fn job(size: u32) -> (Arc<Server>, Vec<FakeClient>) {
        let server = Arc::new(Server {
            size,
            committed: Mutex::default(),
            barrier: Barrier::new(size as usize),
            aborted: Mutex::default(),
            names: Mutex::default(),
        });
        let clients = (0..size)
            .map(|rank| FakeClient {
                server: server.clone(),
                rank,
                pending: Vec::new(),
                committed: Vec::new(),
            })
            .collect();
        (server, clients)
    }

    #[test]
    fn ranks_agree_on_a_key_and_read_each_others_values_after_a_fence() {
        let (_, clients) = job(3);
        let ranks: Vec<_> = clients
            .into_iter()
            .map(|client| {
                std::thread::spawn(move || {
                    let mut s = PmixSession::open(Box::new(client), "Slurm (PMIx)").unwrap();
                    let me = s.rank();
                    assert_eq!((s.size(), s.nspace()), (3, "slurm.pmix.7.0"));
                    assert_eq!((s.appnum(), s.universe_size()), (Some(0), Some(8)));
                    let key = s.agree_on_job_key().unwrap();
                    let card = format!("pid={me};host=node{me};{}", "x".repeat(3000));
                    s.put(&format!("card-{me}"), &card).unwrap();
                    s.fence().unwrap();
                    for peer in 0..3 {
                        let found = s.lookup(&format!("card-{peer}")).unwrap().unwrap();
                        assert!(found.starts_with(&format!("pid={peer};")));
                    }
                    // Never put: none, at once.
                    assert_eq!(s.lookup(&format!("tcp-{}", (me + 1) % 3)).unwrap(), None);
                    s.finalize().unwrap();
                    key
                })
            })
            .collect();
        let keys: Vec<ferry_wire::JobKey> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
        assert!(keys.iter().all(|k| k.0 == keys[0].0));
    }

    #[test]
    fn keys_must_name_their_owner_and_values_must_fit() {
        let (server, mut clients) = job(1);
        let mut s = PmixSession::open(Box::new(clients.remove(0)), "PRRTE (PMIx)").unwrap();
        for key in [
            "card",
            "card-x",
            "card-1",
            &format!("k{}-0", "e".repeat(600)),
        ] {
            let e = s.put(key, "v").unwrap_err().to_string();
            assert!(
                e.contains("PRRTE (PMIx)") && e.contains("key"),
                "{key}: {e}"
            );
            assert!(s.lookup(key).is_err());
        }
        let e = s.put("card-0", &"v".repeat(MAX_VALUE + 1)).unwrap_err();
        assert!(e.to_string().contains("bytes"), "{e}");
        s.publish_name("mpi-service:ocean view", "port 1").unwrap();
        let found = s.lookup_name("mpi-service:ocean view").unwrap();
        assert_eq!(found.as_deref(), Some("port 1"));
        s.publish_name("mpi-service:ocean view", "").unwrap();
        assert_eq!(s.lookup_name("mpi-service:ocean view").unwrap(), None);
        assert!(s.publish_name(&"n".repeat(600), "port").is_err());
        s.abort(5, "on purpose");
        assert_eq!(*server.aborted.lock().unwrap(), Some(5));
    }

    #[test]
    fn a_library_that_is_not_there_is_named() {
        let e = PmixSession::connect("libpmix-not-here.so.2").err().unwrap();
        let e = e.to_string();
        assert!(
            e.contains("libpmix-not-here.so.2") && e.contains("FERRY_PMIX_LIB"),
            "{e}"
        );
    }
}
