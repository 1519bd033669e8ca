//! The session with a foreign process manager over PMI-1 (codec: `ferry_wire::procman`).
//!
//! **Which protocol.** PMI-1, also on Slurm's `--mpi=pmi2` socket, which accepts both: PMI-1 is
//! what hydra and Slurm both serve on an inherited `PMI_FD` and what Debian's MPICH itself
//! speaks under both, and ferry needs nothing PMI-2 adds (its threaded and job-attribute calls).
//!
//! **Who we are.** Rank and size come from `PMI_RANK`/`PMI_SIZE`, or from the `set` lines of a
//! `PMI_PORT` + `PMI_ID` connection; the world is the only one (universe base 0). The job id is
//! a hash of the key space's name (`ferry_wire::procman::job_id`), the same on every rank.
//!
//! **The job key.** Rank 0 draws 32 random bytes and puts them in the manager's key space; every
//! rank reads them after one fence. That trusts whoever can read that key space: the process
//! manager (and whoever runs it, the user or Slurm's daemons) and the job's own processes. It is
//! no weaker than `ferry run`, whose key reaches the ranks through their environment; it does
//! not keep out a manager that would itself attack the job.
//!
//! **Values.** Each value is sent as hex (so no PM parser meets spaces, `=` or `;`), behind a
//! tag: `h<hex>` for a value that fits in `vallen_max`, else `s<n>` with the hex split over the
//! keys `<key>#0` … `<key>#<n-1>`. A key longer than `keylen_max` is refused with an error.
//! Puts are seen by other ranks after the next fence (hydra and Slurm keep them until then).
//! Names published for MPI_Lookup_name go to the manager's name service instead
//! (`publish_name`/`lookup_name`), seen by others at once; name and port travel as hex too.

use super::{bootstrap_error, ManagerKeySpace};
use crate::error::Error;
use ferry_wire::procman::{self, Maxes, Message, Pmi1Request};
use std::io::{Read, Write};

/// Environment variables that process managers set for the processes they start.
pub(crate) mod env {
    /// An inherited socket to the manager (hydra, Slurm's pmi2 plugin).
    pub const FD: &str = "PMI_FD";
    /// `host:port` of the manager, when there is no inherited socket.
    pub const PORT: &str = "PMI_PORT";
    /// Our id on a `PMI_PORT` connection.
    pub const ID: &str = "PMI_ID";
    /// Our rank.
    pub const RANK: &str = "PMI_RANK";
    /// The job's size.
    pub const SIZE: &str = "PMI_SIZE";
}

/// The key under which rank 0 publishes the job key.
/// Most keys one value may be split over.
const MAX_PARTS: usize = 1024;
/// Most characters put in one value (hydra and Slurm take 1024).
const MAX_ROOM: usize = 16 << 10;

/// A byte stream to the manager: a Unix socket (`PMI_FD`), TCP (`PMI_PORT`) or a test's pair.
pub(crate) trait Duplex: Read + Write {}
impl<T: Read + Write> Duplex for T {}

/// The name of the manager that started us, for messages: Slurm sets `SLURM_MPI_TYPE`, hydra
/// `MPI_LOCALNRANKS`.
pub(crate) fn manager_name() -> &'static str {
    if std::env::var_os("SLURM_MPI_TYPE").is_some() || std::env::var_os("SLURM_JOB_ID").is_some() {
        "Slurm (PMI)"
    } else if std::env::var_os("MPI_LOCALNRANKS").is_some() {
        "hydra (PMI)"
    } else {
        "the PMI process manager"
    }
}

/// Takes the socket the manager left open as `PMI_FD=<fd>`; only once per process.
pub(crate) fn inherited_socket(text: &str) -> Result<std::os::unix::net::UnixStream, Error> {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::sync::atomic::{AtomicBool, Ordering};
    static TAKEN: AtomicBool = AtomicBool::new(false);
    let fd: i32 = text
        .trim()
        .parse()
        .ok()
        .filter(|&fd| fd >= 0)
        .ok_or_else(|| bootstrap_error(format!("PMI_FD={text:?} is not a file descriptor")))?;
    // SAFETY: fcntl on any integer is harmless; -1 tells a closed descriptor.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(bootstrap_error(format!(
            "PMI_FD={fd} is not an open file descriptor"
        )));
    }
    if TAKEN.swap(true, Ordering::SeqCst) {
        return Err(bootstrap_error(format!(
            "PMI_FD={fd} was already taken by an earlier start of ferry in this process"
        )));
    }
    // Programs this rank starts need not talk to our manager.
    // SAFETY: fd is open (checked above); setting FD_CLOEXEC touches nothing else.
    unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    // SAFETY: the descriptor is open and was inherited for exactly this use; TAKEN makes this the
    // one place in the process that wraps it, once, so no other owner closes it.
    Ok(std::os::unix::net::UnixStream::from(unsafe {
        OwnedFd::from_raw_fd(fd)
    }))
}

/// A PMI-1 session: one request, one reply, in order.
pub(crate) struct PmiSession {
    stream: Box<dyn Duplex>,
    /// Bytes read past the last reply.
    input: Vec<u8>,
    manager: &'static str,
    kvsname: String,
    maxes: Maxes,
    rank: u32,
    size: u32,
    appnum: i32,
    universe_size: i64,
}

impl PmiSession {
    /// Opens the session: the `PMI_PORT` handshake when `pmiid` is given, `init`, and the
    /// questions whose answers never change (limits, appnum, universe size, key space name).
    /// `rank`/`size` are `PMI_RANK`/`PMI_SIZE`; the `set` lines of a port handshake win.
    pub(crate) fn open(
        stream: Box<dyn Duplex>,
        manager: &'static str,
        pmiid: Option<u32>,
        rank: Option<u32>,
        size: Option<u32>,
    ) -> Result<PmiSession, Error> {
        let mut session = PmiSession {
            stream,
            input: Vec::new(),
            manager,
            kvsname: String::new(),
            maxes: Maxes {
                kvsname_max: 0,
                keylen_max: 0,
                vallen_max: 0,
            },
            rank: 0,
            size: 0,
            appnum: -1,
            universe_size: -1,
        };
        let (mut rank, mut size) = (rank, size);
        if let Some(pmiid) = pmiid {
            session.request(&Pmi1Request::InitAck { pmiid }, "initack")?;
            for _ in 0..3 {
                let set = session.receive()?;
                let set = session.check(set.expect("set"))?.clone();
                if set.get("size").is_some() {
                    size = Some(session.check(set.number("size"))?);
                } else if set.get("rank").is_some() {
                    rank = Some(session.check(set.number("rank"))?);
                }
            }
        }
        let init = Pmi1Request::Init {
            version: 1,
            subversion: 1,
        };
        session.request(&init, "response_to_init")?;
        let maxes = session.ask(&Pmi1Request::GetMaxes)?;
        session.maxes = session.check(Maxes::from_reply(&maxes))?;
        let appnum = session.request(&Pmi1Request::GetAppnum, "appnum")?;
        session.appnum = session.check(appnum.number("appnum"))?;
        let universe = session.request(&Pmi1Request::GetUniverseSize, "universe_size")?;
        session.universe_size = session.check(universe.number("size"))?;
        let kvs = session.request(&Pmi1Request::GetMyKvsname, "my_kvsname")?;
        session.kvsname = kvs
            .get("kvsname")
            .ok_or_else(|| session.fail("its my_kvsname reply names no kvsname"))?
            .to_string();
        let missing = |what| bootstrap_error(format!("{manager} gave no {what} (PMI_{what})"));
        session.rank = rank.ok_or_else(|| missing("RANK"))?;
        session.size = size.ok_or_else(|| missing("SIZE"))?;
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

    pub(crate) fn kvsname(&self) -> &str {
        &self.kvsname
    }

    pub(crate) fn appnum(&self) -> Option<i32> {
        (self.appnum >= 0).then_some(self.appnum)
    }

    pub(crate) fn universe_size(&self) -> Option<u32> {
        u32::try_from(self.universe_size).ok().filter(|&n| n > 0)
    }

    fn fail(&self, what: impl std::fmt::Display) -> Error {
        bootstrap_error(format!("{}: {what}", self.manager))
    }

    fn check<T>(&self, result: Result<T, procman::PmiError>) -> Result<T, Error> {
        result.map_err(|e| self.fail(e))
    }

    fn send(&mut self, request: &Pmi1Request) -> Result<(), Error> {
        let line = self.check(request.encode())?;
        self.stream
            .write_all(line.as_bytes())
            .map_err(|e| self.fail(format!("cannot write to the PMI connection: {e}")))
    }

    fn receive(&mut self) -> Result<Message, Error> {
        loop {
            if let Some((message, used)) = self.check(procman::take_pmi1_line(&self.input))? {
                self.input.drain(..used);
                return Ok(message);
            }
            let mut chunk = [0u8; 4096];
            let n = match self.stream.read(&mut chunk) {
                Ok(0) => return Err(self.fail("the PMI connection was closed")),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if super::timed_out(&e) => {
                    return Err(self.fail(
                        "no reply within FERRY_CONNECT_TIMEOUT on the PMI connection: the manager accepted it but does not answer",
                    ))
                }
                Err(e) => return Err(self.fail(format!("cannot read the PMI connection: {e}"))),
            };
            self.input.extend_from_slice(&chunk[..n]);
        }
    }

    fn ask(&mut self, request: &Pmi1Request) -> Result<Message, Error> {
        self.send(request)?;
        self.receive()
    }

    /// Sends `request` and checks that the reply is `expected` with success.
    fn request(&mut self, request: &Pmi1Request, expected: &'static str) -> Result<Message, Error> {
        let reply = self.ask(request)?;
        self.check(reply.expect(expected))?;
        Ok(reply)
    }

    fn key_fits(&self, key: &str) -> Result<(), Error> {
        // keylen_max counts C's terminating NUL.
        if key.len() >= self.maxes.keylen_max {
            return Err(self.fail(format!(
                "key {key:?} is longer than its keys may be ({} characters)",
                self.maxes.keylen_max.saturating_sub(1)
            )));
        }
        Ok(())
    }

    fn put_raw(&mut self, key: &str, value: String) -> Result<(), Error> {
        self.key_fits(key)?;
        let put = Pmi1Request::Put {
            kvsname: self.kvsname.clone(),
            key: key.into(),
            value,
        };
        self.request(&put, "put_result").map(drop)
    }

    fn get_raw(&mut self, key: &str) -> Result<Option<String>, Error> {
        self.key_fits(key)?;
        let get = Pmi1Request::Get {
            kvsname: self.kvsname.clone(),
            key: key.into(),
        };
        let reply = self.ask(&get)?;
        self.check(procman::get_result(&reply))
    }

    /// Hex digits one key can hold after the one-character tag (and C's NUL); at most
    /// [`MAX_ROOM`], whatever the manager allows, so that a line stays short.
    fn room(&self) -> Result<usize, Error> {
        match self.maxes.vallen_max.checked_sub(2) {
            Some(room) if room >= 16 => Ok(room.min(MAX_ROOM) & !1),
            _ => Err(self.fail(format!(
                "its values may only be {} characters long",
                self.maxes.vallen_max
            ))),
        }
    }

    /// Publishes `value` under `key`, over several keys if it does not fit in one.
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let hex = to_hex(value);
        let room = self.room()?;
        if hex.len() <= room {
            return self.put_raw(key, format!("h{hex}"));
        }
        let parts = hex.len().div_ceil(room);
        if parts > MAX_PARTS {
            return Err(self.fail(format!(
                "a value of {} bytes under {key:?} needs {parts} keys of {} characters, more than {MAX_PARTS}",
                value.len(),
                self.maxes.vallen_max
            )));
        }
        self.key_fits(&part_key(key, parts - 1))?;
        for (i, chunk) in hex.as_bytes().chunks(room).enumerate() {
            // Hex digits are ASCII: every chunk is text.
            let chunk = String::from_utf8_lossy(chunk).into_owned();
            self.put_raw(&part_key(key, i), format!("s{chunk}"))?;
        }
        self.put_raw(key, format!("n{parts}"))
    }

    /// The value under `key`, joined from its parts if it was split; `None` if there is none.
    pub(crate) fn lookup(&mut self, key: &str) -> Result<Option<String>, Error> {
        let Some(stored) = self.get_raw(key)? else {
            return Ok(None);
        };
        let malformed = |s: &PmiSession| s.fail(format!("the value under {key:?} is not ferry's"));
        let hex = match stored.split_at_checked(1) {
            Some(("h", hex)) => hex.to_string(),
            Some(("n", count)) => {
                let parts: usize = count
                    .parse()
                    .ok()
                    .filter(|&n| n <= MAX_PARTS)
                    .ok_or_else(|| malformed(self))?;
                let mut hex = String::new();
                for i in 0..parts {
                    let part = self.get_raw(&part_key(key, i))?.ok_or_else(|| {
                        self.fail(format!("part {i} of {parts} of {key:?} is missing"))
                    })?;
                    hex.push_str(part.strip_prefix('s').ok_or_else(|| malformed(self))?);
                }
                hex
            }
            _ => return Err(malformed(self)),
        };
        let bytes = from_hex(&hex).ok_or_else(|| malformed(self))?;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| malformed(self))
    }

    /// Publishes `value` under the name `key` in the manager's name service; an empty value
    /// withdraws the name.
    pub(crate) fn publish_name(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let service = format!("h{}", to_hex(key));
        if value.is_empty() {
            let unpublish = Pmi1Request::UnpublishName { service };
            return self.request(&unpublish, "unpublish_result").map(drop);
        }
        let port = format!("h{}", to_hex(value));
        if port.len() >= self.maxes.vallen_max {
            return Err(self.fail(format!(
                "the value published as {key:?} is {} bytes, more than its values may hold",
                value.len()
            )));
        }
        let publish = Pmi1Request::PublishName { service, port };
        self.request(&publish, "publish_result").map(drop)
    }

    /// What the name service holds under `key`, if anything.
    pub(crate) fn lookup_name(&mut self, key: &str) -> Result<Option<String>, Error> {
        let service = format!("h{}", to_hex(key));
        let reply = self.ask(&Pmi1Request::LookupName { service })?;
        let Some(port) = self.check(procman::lookup_result(&reply))? else {
            return Ok(None);
        };
        let malformed = || self.fail(format!("the name {key:?} was not published by ferry"));
        let bytes = port
            .strip_prefix('h')
            .and_then(from_hex)
            .ok_or_else(malformed)?;
        String::from_utf8(bytes).map(Some).map_err(|_| malformed())
    }

    pub(crate) fn fence(&mut self) -> Result<(), Error> {
        self.request(&Pmi1Request::BarrierIn, "barrier_out")
            .map(drop)
    }

    pub(crate) fn finalize(&mut self) -> Result<(), Error> {
        self.request(&Pmi1Request::Finalize, "finalize_ack")
            .map(drop)
    }

    /// Asks the manager to end the job with `code`. PMI-1's abort carries no message (spaces
    /// end its fields), so the message goes to our standard error.
    pub(crate) fn abort(&mut self, code: i32, message: &str) {
        eprintln!("ferry: rank {}: abort (code {code}): {message}", self.rank);
        // Hydra ends the job as soon as it reads the abort and may drop output it has not
        // forwarded yet: give it a moment to pass the message on first.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let _ = self.send(&Pmi1Request::Abort { code });
    }
}

fn part_key(key: &str, i: usize) -> String {
    format!("{key}#{i}")
}

fn to_hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

impl ManagerKeySpace for PmiSession {
    fn rank(&self) -> u32 {
        PmiSession::rank(self)
    }
    fn size(&self) -> u32 {
        PmiSession::size(self)
    }
    fn namespace(&self) -> &str {
        self.kvsname()
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        PmiSession::put(self, key, value)
    }
    fn fence(&mut self) -> Result<(), Error> {
        PmiSession::fence(self)
    }
    fn lookup(&mut self, key: &str) -> Result<Option<String>, Error> {
        PmiSession::lookup(self, key)
    }
    fn fail(&self, what: String) -> Error {
        PmiSession::fail(self, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Barrier, Mutex};

    /// A key space served like Slurm's pmi2 plugin serves PMI-1: `rc=` first, puts seen by
    /// others only after the barrier, `rc=1` for a missing key.
    struct FakeSlurm {
        committed: Mutex<HashMap<String, String>>,
        names: Mutex<HashMap<String, String>>,
        barrier: Barrier,
        vallen_max: usize,
        size: usize,
    }

    fn serve(pm: Arc<FakeSlurm>, stream: UnixStream, rank: usize) {
        let mut out = stream.try_clone().unwrap();
        let mut pending = Vec::new();
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            let m = procman::parse_pmi1(&line).unwrap();
            let reply = match m.cmd.as_str() {
                "init" => "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1".into(),
                "get_maxes" => format!(
                    "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max={}",
                    pm.vallen_max
                ),
                "get_appnum" => "cmd=appnum rc=0 appnum=-1".into(),
                "get_universe_size" => format!("cmd=universe_size rc=0 size={}", pm.size),
                "get_my_kvsname" => "cmd=my_kvsname rc=0 kvsname=4242.0".into(),
                "put" => {
                    let value = m.get("value").unwrap();
                    // Slurm keeps what fits; the client must not rely on that.
                    assert!(value.len() < pm.vallen_max, "rank {rank} sent a long value");
                    pending.push((m.get("key").unwrap().to_string(), value.to_string()));
                    "cmd=put_result rc=0".into()
                }
                "barrier_in" => {
                    pm.committed.lock().unwrap().extend(pending.drain(..));
                    pm.barrier.wait();
                    "cmd=barrier_out rc=0".into()
                }
                "get" => match pm.committed.lock().unwrap().get(m.get("key").unwrap()) {
                    Some(v) => format!("cmd=get_result rc=0 value={v}"),
                    None => "cmd=get_result rc=1".into(),
                },
                "publish_name" => {
                    let (service, port) = (m.get("service").unwrap(), m.get("port").unwrap());
                    pm.names.lock().unwrap().insert(service.into(), port.into());
                    "cmd=publish_result rc=0 info=ok".into()
                }
                "unpublish_name" => {
                    pm.names.lock().unwrap().remove(m.get("service").unwrap());
                    "cmd=unpublish_result rc=0 info=ok".into()
                }
                "lookup_name" => match pm.names.lock().unwrap().get(m.get("service").unwrap()) {
                    Some(port) => format!("cmd=lookup_result rc=0 port={port}"),
                    None => "cmd=lookup_result rc=1 msg=service_not_found".into(),
                },
                "finalize" => "cmd=finalize_ack rc=0".into(),
                other => panic!("unexpected {other}"),
            };
            out.write_all(format!("{reply}\n").as_bytes()).unwrap();
        }
    }

    fn job(size: usize, vallen_max: usize) -> (Vec<std::thread::JoinHandle<()>>, Vec<UnixStream>) {
        let pm = Arc::new(FakeSlurm {
            committed: Mutex::default(),
            names: Mutex::default(),
            barrier: Barrier::new(size),
            vallen_max,
            size,
        });
        let mut servers = Vec::new();
        let mut clients = Vec::new();
        for rank in 0..size {
            let (ours, theirs) = UnixStream::pair().unwrap();
            let pm = pm.clone();
            servers.push(std::thread::spawn(move || serve(pm, theirs, rank)));
            clients.push(ours);
        }
        (servers, clients)
    }

    #[test]
    fn ranks_agree_on_a_key_and_read_a_value_split_over_keys() {
        let (servers, clients) = job(2, 64);
        let long = format!(
            "pid=1;host=node1;tcp=127.0.0.1:4000;rails={}",
            "10.0.0.1,".repeat(20)
        );
        let ranks: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(rank, stream)| {
                let long = long.clone();
                std::thread::spawn(move || {
                    let mut s = PmiSession::open(
                        Box::new(stream),
                        "Slurm",
                        None,
                        Some(rank as u32),
                        Some(2),
                    )
                    .unwrap();
                    assert_eq!(
                        (s.rank(), s.size(), s.kvsname()),
                        (rank as u32, 2, "4242.0")
                    );
                    assert_eq!((s.appnum(), s.universe_size()), (None, Some(2)));
                    let key = s.agree_on_job_key().unwrap();
                    s.put(&format!("card-{rank}"), &long).unwrap();
                    s.fence().unwrap();
                    let other = s.lookup(&format!("card-{}", 1 - rank)).unwrap();
                    assert_eq!(other.as_deref(), Some(long.as_str()));
                    assert_eq!(s.lookup("nothing-here").unwrap(), None);
                    if rank == 0 {
                        s.publish_name("mpi-service:ocean view", "port 1").unwrap();
                    }
                    s.fence().unwrap();
                    let found = s.lookup_name("mpi-service:ocean view").unwrap();
                    assert_eq!(found.as_deref(), Some("port 1"));
                    s.fence().unwrap();
                    if rank == 1 {
                        s.publish_name("mpi-service:ocean view", "").unwrap();
                    }
                    s.fence().unwrap();
                    assert_eq!(s.lookup_name("mpi-service:ocean view").unwrap(), None);
                    let too_long_key = "k".repeat(64);
                    assert!(s.put(&too_long_key, "v").is_err());
                    s.finalize().unwrap();
                    key
                })
            })
            .collect();
        let keys: Vec<ferry_wire::JobKey> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
        assert_eq!(keys[0].0, keys[1].0);
        for s in servers {
            s.join().unwrap();
        }
    }

    #[test]
    fn port_handshake_learns_rank_and_size_from_set_lines() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut out = theirs.try_clone().unwrap();
            let mut lines = BufReader::new(theirs).lines();
            assert_eq!(lines.next().unwrap().unwrap(), "cmd=initack pmiid=5");
            out.write_all(b"cmd=initack\ncmd=set size=4\ncmd=set rank=3\ncmd=set debug=0\n")
                .unwrap();
            for reply in [
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
                "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024",
                "cmd=appnum appnum=0",
                "cmd=universe_size size=-1",
                "cmd=my_kvsname kvsname=kvs_1_0",
            ] {
                lines.next().unwrap().unwrap();
                out.write_all(format!("{reply}\n").as_bytes()).unwrap();
            }
        });
        let s = PmiSession::open(Box::new(ours), "hydra", Some(5), None, None).unwrap();
        assert_eq!((s.rank(), s.size()), (3, 4));
        assert_eq!((s.appnum(), s.universe_size()), (Some(0), None));
        server.join().unwrap();
    }

    #[test]
    fn a_manager_that_hangs_up_or_refuses_is_an_error() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        let e = PmiSession::open(Box::new(ours), "hydra", None, Some(0), Some(1))
            .err()
            .unwrap();
        assert!(e.to_string().contains("hydra"), "{e}");
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(b"cmd=response_to_init rc=-1\n").unwrap();
        let e = PmiSession::open(Box::new(ours), "hydra", None, Some(0), Some(1))
            .err()
            .unwrap();
        assert!(e.to_string().contains("rc=-1"), "{e}");
    }
}
