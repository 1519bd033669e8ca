//! Worlds started after launch (MPI_Comm_spawn): the runtime's half.
//!
//! Every process of a job has a *universe rank*: the launcher's ranks are 0..n, the processes
//! of each spawned world take the next block (the launcher hands it out, `ferry_wire::pmi`'s
//! `spawn`). The engine addresses peers by universe rank, so a process's own world is the
//! block `base..base + size` and its `MPI_COMM_WORLD` the communicator over it; peers of other
//! worlds are added after start ([`World::add_peers`], or when they first connect) and are
//! always reached over TCP, also on one host: shared-memory rings are made per world at its
//! start. A process that started with the shm transport binds its TCP listener when it first
//! spawns ([`World::open_to_other_worlds`]); spawned worlds use TCP among themselves too.
//!
//! Who connects: the process with the higher universe rank dials, when a communicator over both
//! is made (`Comm::derive`, see [`reach`]); the spawning group published its addresses with the
//! launcher before the spawn was asked for, and every process of a spawned world publishes its
//! own at start. Connections are not waited for: frames queue until the handshake is done. Context ids stay unique across worlds because each world hands out blocks
//! from its own region (`Shared::claim_context_block`). At finalize a process says BYE to its
//! peers of other worlds, so that their connection's end is no failure on either side.
//!
//! The collective parts (who asks, how the group learns the new ranks, the intercommunicator)
//! are the binding's.

use crate::comm::Shared;
use crate::error::Error;
use crate::tcp::TcpTransport;
use crate::world::World;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub use ferry_wire::pmi::{env, App};

/// What a spawned world knows of the group that started it, from `ferry_wire::pmi::env::PARENT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentInfo {
    /// The context pair of the intercommunicator, claimed by the spawning root.
    pub pair: u32,
    /// Universe ranks of the spawning group, in its rank order.
    pub group: Vec<u32>,
}

impl ParentInfo {
    /// The token handed to the launcher: `pair,uid,uid,…`.
    pub fn encode(&self) -> String {
        let mut s = self.pair.to_string();
        for u in &self.group {
            s += &format!(",{u}");
        }
        s
    }

    /// Parses a token made by [`ParentInfo::encode`].
    pub fn parse(token: &str) -> Result<ParentInfo, Error> {
        let bad = || Error::Bootstrap(format!("malformed parent token {token:?}"));
        let mut words = token.split(',');
        let pair = words.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let group = words
            .map(|w| w.parse().map_err(|_| bad()))
            .collect::<Result<Vec<u32>, _>>()?;
        if group.is_empty() {
            return Err(bad());
        }
        Ok(ParentInfo { pair, group })
    }

    /// The spawning group of this process, if it was spawned.
    pub fn of_this_process() -> Result<Option<ParentInfo>, Error> {
        match std::env::var(ferry_wire::pmi::env::PARENT) {
            Ok(token) => ParentInfo::parse(&token).map(Some),
            Err(_) => Ok(None),
        }
    }
}

fn address_key(uid: u32) -> String {
    format!("uaddr-{uid}")
}

/// Makes sure every process of `members` (universe ranks) is or will be connected to us: a
/// process of another world we have no connection with is dialled if its universe rank is
/// below ours (its address is looked up with the launcher, waiting for it to be published),
/// and waited for otherwise (after publishing our own address). Nothing for our own world.
pub(crate) fn reach(shared: &Shared, members: &[u32]) -> Result<(), Error> {
    let base = shared.universe.base;
    let own = base..base + shared.size as u32;
    let me = shared.engine.borrow().proto.me;
    let others = members.iter().copied().filter(|&u| !own.contains(&u));
    let Some(end) = others.clone().map(|u| u as usize + 1).max() else {
        return Ok(());
    };
    let strangers: Vec<u32> = {
        let engine = shared.engine.borrow();
        others
            .filter(|&u| {
                !engine
                    .net
                    .tcp
                    .as_ref()
                    .is_some_and(|t| t.has_conn(u as usize))
            })
            .collect()
    };
    if !strangers.is_empty() {
        open(shared)?;
    }
    // Also when every member is connected: a process that dialled us first has its connection
    // before the engine has its peer, until a frame of it arrives.
    shared.engine.borrow_mut().grow(end);
    let timeout = shared.in_effect.connect_timeout();
    for uid in strangers.into_iter().filter(|&u| u < me) {
        dial(shared, uid, timeout)?;
    }
    Ok(())
}

/// Dials process `uid` of another world at the address it published (waiting for it).
fn dial(shared: &Shared, uid: u32, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let text = loop {
        let found = match shared.bootstrap.borrow_mut().as_mut() {
            Some(boot) => boot.lookup(&address_key(uid))?,
            None => None,
        };
        if let Some(text) = found {
            break text;
        }
        if Instant::now() > deadline {
            return Err(Error::Bootstrap(format!(
                "process {uid} of another world published no address within {} s",
                timeout.as_secs()
            )));
        }
        // It publishes in the same collective call: keep our own traffic moving meanwhile.
        shared.progress()?;
        std::thread::sleep(Duration::from_micros(500));
    };
    let bad = || Error::Bootstrap(format!("process {uid} published {text:?}"));
    let (addr, pid) = text.split_once(';').ok_or_else(bad)?;
    let addr: SocketAddr = addr.parse().map_err(|_| bad())?;
    let pid: u32 = pid.parse().map_err(|_| bad())?;
    let mut engine = shared.engine.borrow_mut();
    engine.add_peers(&[(uid, pid)]);
    match engine.net.tcp.as_mut() {
        Some(t) => t.dial((uid, 0), addr, None, None),
        None => Err(Error::Config("no TCP listener".into())),
    }
}

/// Connects to process `uid` (of any world) now unless connected or ours: for the first
/// message of MPI_Comm_connect, sent before any communicator over both exists.
pub(crate) fn reach_one(shared: &Shared, uid: u32) -> Result<(), Error> {
    let base = shared.universe.base;
    if (base..base + shared.size as u32).contains(&uid) || uid >= crate::tcp::UNIVERSE_CAP {
        return Ok(());
    }
    open(shared)?;
    let known = shared
        .engine
        .borrow()
        .net
        .tcp
        .as_ref()
        .is_some_and(|t| t.has_conn(uid as usize));
    if known {
        return Ok(());
    }
    let timeout = shared.in_effect.connect_timeout();
    dial(shared, uid, timeout)
}

/// Binds this process's TCP listener if it has none and publishes its address (once).
fn open(shared: &Shared) -> Result<(), Error> {
    if shared.universe.published.get() {
        return Ok(());
    }
    let key = shared.universe.key.clone().ok_or_else(|| {
        Error::Config("a process not started by `ferry run` cannot spawn or be spawned".into())
    })?;
    if shared.in_effect.rails > 1 {
        // Connections to other worlds are single: rails would wait for the others.
        return Err(Error::Config(
            "processes of other worlds (MPI_Comm_spawn, connect/accept across worlds) cannot be reached with several TCP rails (FERRY_RAILS)".into(),
        ));
    }
    let (me, addr) = {
        let mut engine = shared.engine.borrow_mut();
        let me = engine.proto.me;
        if engine.net.tcp.is_none() {
            let c = &shared.in_effect;
            let base = shared.universe.base;
            let mut t = TcpTransport::bind(
                SocketAddr::new(c.tcp_listen_ip(), 0),
                key,
                shared.universe.job,
                (me, base..base + shared.size as u32),
                c.tcp_eager_limit.max(c.tcp_chunk) as u64,
                c.tcp_buffer,
                1,
                Duration::from_secs(c.rail_timeout_secs),
            )?;
            t.grow(engine.proto.peer_count());
            t.set_max_strangers(c.tcp_strangers);
            t.set_compression(c.compress);
            engine.add_tcp(t);
        }
        match engine.net.tcp.as_ref() {
            Some(t) => (me, t.listen_addr()),
            None => return Err(Error::Config("no TCP listener".into())),
        }
    };
    if let Some(boot) = shared.bootstrap.borrow_mut().as_mut() {
        boot.put(&address_key(me), &format!("{addr};{}", std::process::id()))?;
    }
    shared.universe.published.set(true);
    Ok(())
}

impl World {
    /// This process's universe rank (its world rank in the launcher's world).
    pub fn universe_rank(&self) -> u32 {
        self.shared().engine.borrow().proto.me
    }

    /// Universe rank of this world's rank 0.
    pub fn universe_base(&self) -> u32 {
        self.shared().universe.base
    }

    /// Makes this process reachable by other worlds' processes: binds a TCP listener if it has
    /// none (it started with the shm transport) and publishes its address with the launcher.
    pub fn open_to_other_worlds(&self) -> Result<(), Error> {
        open(self.shared())
    }

    /// Asks the launcher for a new world running `apps`, whose processes get `parent` as their
    /// spawning group. Returns the universe rank of its rank 0 once every process is started.
    pub fn spawn_world(&self, parent: &ParentInfo, apps: Vec<App>) -> Result<u32, Error> {
        let shared = self.shared();
        let mut boot = shared.bootstrap.borrow_mut();
        let boot = boot.as_mut().ok_or_else(|| {
            Error::Config("a process not started by `ferry run` cannot spawn".into())
        })?;
        boot.spawn(&parent.encode(), apps)
    }

    /// Takes the processes `uids` of another world as peers (they connect to us).
    pub fn add_peers(&self, uids: &[u32]) {
        let with_pids: Vec<(u32, u32)> = uids.iter().map(|&u| (u, 0)).collect();
        self.shared().engine.borrow_mut().add_peers(&with_pids);
    }

    /// A communicator over every universe rank of the job (rank r is universe rank r) on
    /// `context`, which must be the same in every world: where groups of different worlds
    /// meet (MPI_Comm_connect/accept). Send only to processes connected with
    /// [`World::reach`] (or that sent to us).
    pub fn universe_comm(&self, context: u32) -> crate::Comm {
        self.comm_over_universe(context)
    }

    /// Connects to process `uid` now unless it is connected or of our world.
    pub fn reach(&self, uid: u32) -> Result<(), Error> {
        reach_one(self.shared(), uid)
    }

    /// Says BYE to every connected process outside this world (at finalize).
    pub(crate) fn leave_other_worlds(&self) -> Result<(), Error> {
        let shared = self.shared();
        let base = shared.universe.base;
        let own = base..base + shared.size as u32;
        let mut engine = shared.engine.borrow_mut();
        let others: Vec<u32> = (0..engine.proto.peer_count() as u32)
            .filter(|u| !own.contains(u))
            .collect();
        engine.say_bye(&others)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_tokens_round_trip_and_bad_ones_are_errors() {
        let p = ParentInfo {
            pair: 1234,
            group: vec![0, 5, 2],
        };
        assert_eq!(p.encode(), "1234,0,5,2");
        assert_eq!(ParentInfo::parse(&p.encode()).unwrap(), p);
        for bad in ["", "12", "12,", "x,1", "1,2,y", "1,-2"] {
            assert!(ParentInfo::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
