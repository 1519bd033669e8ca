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
//! Who connects: a spawned process dials every process of the group that spawned it
//! ([`World::connect_to`]), whose addresses were published with the launcher before the spawn
//! was asked for. Context ids stay unique across worlds because each world hands out blocks
//! from its own region (`Shared::claim_context_block`). At finalize a process says BYE to its
//! peers of other worlds, so that their connection's end is no failure on either side.
//!
//! The collective parts (who asks, how the group learns the new ranks, the intercommunicator)
//! are the binding's.

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
        let shared = self.shared();
        let key = shared.universe.key.clone().ok_or_else(|| {
            Error::Config("a process not started by `ferry run` cannot spawn".into())
        })?;
        let addr = {
            let mut engine = shared.engine.borrow_mut();
            let me = engine.proto.me;
            if engine.tcp.is_none() {
                let c = &shared.in_effect;
                let base = shared.universe.base;
                let mut t = TcpTransport::bind(
                    SocketAddr::new([127, 0, 0, 1].into(), 0),
                    key,
                    shared.universe.job,
                    (me, base..base + shared.size as u32),
                    c.tcp_eager_limit.max(c.tcp_chunk) as u64,
                    c.tcp_buffer,
                    1,
                    Duration::from_secs(c.rail_timeout_secs),
                )?;
                t.grow(engine.proto.routes.len());
                engine.tcp = Some(t);
            }
            match engine.tcp.as_ref() {
                Some(t) => t.listen_addr(),
                None => return Err(Error::Config("no TCP listener".into())),
            }
        };
        let me = self.universe_rank();
        self.publish(&address_key(me), &format!("{addr};{}", std::process::id()))
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

    /// Connects to the processes `uids` of another world, which published their addresses
    /// ([`World::open_to_other_worlds`]), and waits until every connection is authenticated.
    pub fn connect_to(&self, uids: &[u32]) -> Result<(), Error> {
        self.open_to_other_worlds()?;
        let shared = self.shared();
        let timeout = Duration::from_secs(shared.in_effect.connect_timeout_secs);
        let mut found = Vec::with_capacity(uids.len());
        for &uid in uids {
            let text = self
                .lookup(&address_key(uid))?
                .ok_or_else(|| Error::Bootstrap(format!("process {uid} published no address")))?;
            let bad = || Error::Bootstrap(format!("process {uid} published {text:?}"));
            let (addr, pid) = text.split_once(';').ok_or_else(bad)?;
            let addr: SocketAddr = addr.parse().map_err(|_| bad())?;
            let pid: u32 = pid.parse().map_err(|_| bad())?;
            found.push((uid, pid, addr));
        }
        let mut engine = shared.engine.borrow_mut();
        let pids: Vec<(u32, u32)> = found.iter().map(|&(u, p, _)| (u, p)).collect();
        engine.add_peers(&pids);
        for &(uid, _, addr) in &found {
            let t = engine
                .tcp
                .as_mut()
                .ok_or_else(|| Error::Config("no TCP transport".into()))?;
            if !t.connected(uid as usize) {
                t.dial((uid, 0), addr, None, None)?;
            }
        }
        let deadline = Instant::now() + timeout;
        let mut idle = 0;
        loop {
            let done = engine
                .tcp
                .as_ref()
                .is_some_and(|t| uids.iter().all(|&u| t.connected(u as usize)));
            if done {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Transport(format!(
                    "no authenticated connection to the processes {uids:?} of the spawning group after {} s",
                    timeout.as_secs()
                )));
            }
            idle = engine.wait_pass(idle)?;
        }
    }

    /// Says BYE to every connected process outside this world (at finalize).
    pub(crate) fn leave_other_worlds(&self) -> Result<(), Error> {
        let shared = self.shared();
        let base = shared.universe.base;
        let own = base..base + shared.size as u32;
        let mut engine = shared.engine.borrow_mut();
        let others: Vec<u32> = (0..engine.proto.routes.len() as u32)
            .filter(|u| !own.contains(u))
            .collect();
        engine.say_bye(&others)
    }
}
