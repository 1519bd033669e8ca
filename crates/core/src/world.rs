//! Job setup and teardown: reads what the launcher handed over, exchanges business cards,
//! builds the transports, and finalizes.
//!
//! In a grid (`FERRY_GRID_PLACE`, set by `ferry run --grid`) a card also carries the rank's
//! process id (`ferry_grid::Guid`: grid cluster `grid=`, front node `front=`, host, pid) and,
//! for a rank on a private cluster, its relay's public address `relay=`. From the cards every
//! rank computes the same `ferry_grid::path::plan` for each pair, so exactly one side dials,
//! along the path the table of docs/ARCHITECTURE.md §4 gives. On one host every rank is in one unnamed grid
//! cluster: paths are direct and the lower rank dials, as before grids.

use crate::bootstrap::{Bootstrap, Launched};
use crate::comm::{Comm, Shared};
use crate::config::{Config, TransportKind};
use crate::engine::{Engine, EngineSetup, NoHook, Route};
use crate::error::Error;
use crate::shm::ShmTransport;
use crate::tcp::TcpTransport;
use ferry_wire::JobKey;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

mod fabric;

/// The job as seen from this rank; derefs to the world communicator. Dropping it finalizes.
pub struct World {
    comm: Comm,
}

impl std::ops::Deref for World {
    type Target = Comm;
    fn deref(&self) -> &Comm {
        &self.comm
    }
}

/// What one rank publishes about itself at bootstrap.
struct Card {
    pid: u32,
    host: String,
    /// Host id (`crate::host`): ranks with equal ids talk over shared memory.
    node: String,
    /// Where its TCP listener is, if it has one: not in the card, but published after it
    /// (`tcp-<rank>`) by the ranks that have peers on other hosts.
    tcp: Option<SocketAddr>,
    /// Cluster id (`FERRY_CLUSTER`), for hierarchical collectives.
    cluster: u32,
    /// Grid cluster name; empty on one host.
    grid: String,
    /// Front node; empty means the host itself (public).
    front: String,
    /// The relays that reach this rank (private clusters only): front node name and public
    /// address, its cluster's `front` first. Published as `relay=front@addr,front@addr`.
    relays: Vec<(String, SocketAddr)>,
    /// Our address on each rail (`FERRY_RAIL_ADDRS`); the port is `tcp`'s.
    rails: Vec<std::net::IpAddr>,
    /// Its fabric provider and each rail's domain and endpoint name (rail 0 first), if it
    /// opened one: like `tcp`, published after the card (`fabric-<rank>`).
    fabric: Option<(String, fabric::Rails)>,
}

impl Card {
    fn encode(&self) -> String {
        let mut s = format!("pid={};host={};node={}", self.pid, self.host, self.node);
        s += &format!(";cluster={}", self.cluster);
        if !self.grid.is_empty() {
            s += &format!(";grid={};front={}", self.grid, self.front);
        }
        if !self.relays.is_empty() {
            let list: Vec<String> = self
                .relays
                .iter()
                .map(|(front, addr)| format!("{front}@{addr}"))
                .collect();
            s += &format!(";relay={}", list.join(","));
        }
        if !self.rails.is_empty() {
            let list: Vec<String> = self.rails.iter().map(|a| a.to_string()).collect();
            s += &format!(";rails={}", list.join(","));
        }
        s
    }

    fn decode(rank: u32, text: &str) -> Result<Card, Error> {
        let bad = || Error::Bootstrap(format!("rank {rank} published a malformed card {text:?}"));
        let mut card = Card {
            pid: 0,
            host: String::new(),
            node: String::new(),
            tcp: None,
            cluster: 0,
            grid: String::new(),
            front: String::new(),
            relays: Vec::new(),
            rails: Vec::new(),
            fabric: None,
        };
        for field in text.split(';') {
            let (k, v) = field.split_once('=').ok_or_else(bad)?;
            match k {
                "pid" => card.pid = v.parse().map_err(|_| bad())?,
                "host" => card.host = v.to_string(),
                "node" => card.node = v.to_string(),
                "cluster" => card.cluster = v.parse().map_err(|_| bad())?,
                "grid" => card.grid = v.to_string(),
                "front" => card.front = v.to_string(),
                "relay" => {
                    card.relays = v
                        .split(',')
                        .map(|entry| {
                            let (front, addr) = entry.split_once('@').ok_or_else(bad)?;
                            Ok((front.to_string(), addr.parse().map_err(|_| bad())?))
                        })
                        .collect::<Result<_, _>>()?
                }
                "rails" => {
                    card.rails = v
                        .split(',')
                        .map(|a| a.parse().map_err(|_| bad()))
                        .collect::<Result<_, _>>()?
                }
                _ => {}
            }
        }
        Ok(card)
    }

    /// The rank's process id for path choice.
    fn guid(&self) -> ferry_grid::Guid {
        ferry_grid::Guid {
            cluster: self.grid.clone(),
            front: if self.front.is_empty() {
                self.host.clone()
            } else {
                self.front.clone()
            },
            host: self.host.clone(),
            pid: self.pid,
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic() && b != b';'))
        .unwrap_or_else(|| "localhost".into())
}

/// Joins the job this process was started in by `ferry run` or by a process manager that
/// speaks PMI (hydra, Slurm); a process started any other way is a job of one rank (like an
/// MPI singleton). See `crate::bootstrap` for how the starter is told apart.
///
/// Every rank takes the same steps, each of them the same bootstrap rounds: cards (who is
/// where), then the transports (segments made, listeners published), then the connections.
pub fn init() -> Result<World, Error> {
    // Before the bootstrap connection, the segments and the sockets take their descriptors.
    crate::limits::raise_open_files();
    let config = Config::from_env()?;
    let Some(launched) = crate::bootstrap::launched(&config.pmix_lib)? else {
        return Ok(singleton(&config));
    };
    let mut config = config;
    if launched.base > 0 {
        // Spawned worlds talk over TCP (shared-memory rings are made per world at start and
        // are named by rank; see crate::spawn).
        config.transport = TransportKind::Tcp;
    }
    let Launched {
        rank,
        size,
        base,
        world_index,
        job,
        key,
        mut boot,
    } = launched;
    let ranks = Ranks { base, rank, size };
    crate::limits::note_rank(ranks.me());

    // First round: who is where. The routes follow from it: shared memory to the ranks of
    // our host, TCP to the others (or as FERRY_TRANSPORT insists).
    let card = this_card(&config, rank)?;
    boot.put(&format!("card-{}", ranks.me()), &card.encode())?;
    boot.fence()?;
    let mut cards = read_cards(&mut boot, base, size)?;
    let near = Neighbours::of(&config, &cards, &card, ranks)?;
    let waits = Waits::of(&config, near.local.len());

    // Second round: the transports. Segments are made before the fence that lets the host's
    // ranks map them; listeners are published for the ranks of other hosts.
    let ring_bytes = config.ring_bytes(near.local.len());
    let created = match near.shm_peers() {
        true => Some(ShmTransport::create(
            job,
            rank,
            near.local.len(),
            ring_bytes,
        )?),
        false => None,
    };
    // Hole punching between private clusters (crate::punching): ids and relays of the ranks.
    let grid = GridFacts::of(&cards);
    let (mut tcp, to_punch, mut fabric) = match near.tcp_peers.is_empty() {
        true => (None, Vec::new(), None),
        false => {
            let opened = open_tcp(&config, (&key, job), ranks, &near, &grid, &mut boot)?;
            let fabric = fabric::open(&config, ranks, &mut boot)?;
            (Some(opened.0), opened.1, fabric)
        }
    };
    if size > 1 {
        boot.fence()?;
    }
    read_addresses(&mut boot, &mut cards, &near.tcp_peers, base)?;
    // Peers on other hosts reached over the fabric instead of TCP.
    let fabric_peers = match fabric.as_mut() {
        Some(f) => {
            fabric::read_names(&mut boot, &mut cards, &near.tcp_peers, base)?;
            fabric::choose_peers(&config, f, &cards, &grid.ids, &near.tcp_peers, (base, rank))
        }
        None => Vec::new(),
    };
    let tcp_peers: Vec<u32> = (near.tcp_peers.iter().copied())
        .filter(|u| fabric_peers.binary_search(u).is_err())
        .collect();
    let hosts = crate::host::host_numbers(&cards.iter().map(|c| &c.node).collect::<Vec<_>>());
    let clusters = clusters_by_universe_rank(&cards, &hosts, base);

    // Third: map the host's segments, punch and dial, and let the files go.
    let shm = match created {
        Some(created) => Some(ShmTransport::attach(
            created,
            job,
            rank,
            &near.local,
            size as usize,
            ring_bytes,
        )?),
        None => None,
    };
    let mut punched = Vec::new();
    if let Some(t) = tcp.as_mut() {
        let facts = (&grid.ids[..], &grid.relays[..], &grid.all_relays[..]);
        punched = crate::punching::start(t, &mut boot, &config, facts, (0, rank), to_punch)?;
        let to_dial: Vec<u32> = (tcp_peers.iter().copied())
            .filter(|u| !punched.contains(&(u - base)))
            .collect();
        dial_peers(t, &config, &cards, &grid.ids, &to_dial, (base, rank))?;
    }
    // Every rank of a host has mapped its peers' segments once this fence passes: the files
    // can go. Ranks without shared memory fence too, as it is collective.
    let some_host_shared = (hosts.iter().enumerate()).any(|(i, h)| hosts[..i].contains(h));
    if some_host_shared && near.shm_allowed {
        boot.fence()?;
    }
    if let Some(t) = shm.as_ref() {
        t.unlink_own();
    }

    let mut engine = new_engine(
        &config,
        ranks,
        (&near, &fabric_peers),
        &waits,
        &cards,
        (shm, tcp),
    );
    if let Some(f) = fabric.filter(|_| !fabric_peers.is_empty()) {
        engine.add_fabric(f)?;
    }
    if config.fault_tolerant {
        engine.tolerate_failures()?;
    }
    let in_effect = Config {
        // A shared segment's turns cannot tell a dead member from a slow one.
        coll_shm_bytes: match config.fault_tolerant {
            true => 0,
            false => config.coll_shm_bytes,
        },
        shm_eager_limit: Some(engine.shm_eager_limit()),
        shm_ring_bytes: Some(if near.shm_peers() { ring_bytes } else { 0 }),
        spin: Some(waits.spin),
        spin_yield: Some(waits.spin_yield),
        ..config.clone()
    };
    connect_all(&mut engine, &config, &cards, &tcp_peers, ranks)?;
    paths_set_up(&engine, &grid.ids, &punched, (base, rank));
    if config.show_paths {
        crate::punching::show_paths(engine.net.tcp.as_ref(), &mut boot, &grid.ids, (base, rank))?;
        if rank == 0 && !near.tcp_peers.is_empty() {
            fabric::show_pairs(&mut boot, &cards, &grid.ids, base)?;
        }
    }
    let universe = Universe {
        base,
        world: world_index,
        key: Some(key),
        job,
        published: Default::default(),
    };
    let n = size as usize;
    let shared = Shared::new(engine, Some(boot), n, in_effect, clusters, universe);
    Ok(World {
        comm: Comm::world(Rc::new(shared)),
    })
}

/// This rank among the job's processes: its world's first universe rank, its rank in the
/// world, and the world's size.
#[derive(Clone, Copy)]
struct Ranks {
    base: u32,
    rank: u32,
    size: u32,
}

impl Ranks {
    /// Universe rank (checked to fit when launched).
    fn me(&self) -> u32 {
        self.base + self.rank
    }
}

/// This rank's card: where it runs, and its place in a grid.
fn this_card(config: &Config, rank: u32) -> Result<Card, Error> {
    let place = config.place.as_ref();
    Ok(Card {
        pid: std::process::id(),
        host: place.map_or_else(hostname, |p| p.host.clone()),
        node: crate::host::host_id(),
        tcp: None,
        cluster: config.coll.clusters.of(rank)?,
        grid: place.map_or_else(String::new, |p| p.cluster.clone()),
        front: place.map_or_else(String::new, |p| p.front.clone()),
        relays: place.map_or_else(Vec::new, |p| {
            p.relays()
                .into_iter()
                .map(|(front, r)| (front, r.public.into()))
                .collect()
        }),
        rails: config.rail_addrs.clone(),
        fabric: None,
    })
}

/// Which peers this rank reaches how, from the cards.
struct Neighbours {
    /// World ranks on this host, this one among them.
    local: Vec<u32>,
    /// Whether shared memory may carry messages (FERRY_TRANSPORT may forbid it).
    shm_allowed: bool,
    /// Universe ranks reached over TCP.
    tcp_peers: Vec<u32>,
}

impl Neighbours {
    fn of(config: &Config, cards: &[Card], card: &Card, ranks: Ranks) -> Result<Neighbours, Error> {
        let Ranks { base, rank, size } = ranks;
        let local: Vec<u32> = (0..size)
            .filter(|&r| cards[r as usize].node == card.node)
            .collect();
        if config.transport == TransportKind::Shm && local.len() < size as usize {
            let (r, c) = (0..size)
                .map(|r| (r, &cards[r as usize]))
                .find(|(_, c)| c.node != card.node)
                .ok_or_else(|| Error::Bootstrap("internal: no rank off this host".into()))?;
            return Err(Error::Config(format!(
                "FERRY_TRANSPORT=shm needs every rank on one host: rank {rank} is on {} (host id {}), rank {r} on {} (host id {}); unset FERRY_TRANSPORT to use TCP between hosts",
                card.host, card.node, c.host, c.node
            )));
        }
        let mut near = Neighbours {
            local,
            shm_allowed: config.transport != TransportKind::Tcp,
            tcp_peers: Vec::new(),
        };
        near.tcp_peers = (0..size)
            .filter(|&p| p != rank && !near.over_shm(p))
            .map(|p| base + p)
            .collect();
        Ok(near)
    }

    /// Whether world rank `peer` is reached over shared memory.
    fn over_shm(&self, peer: u32) -> bool {
        self.shm_allowed && self.local.contains(&peer)
    }

    /// Whether this rank has shared-memory peers.
    fn shm_peers(&self) -> bool {
        self.local.len() > 1 && self.shm_allowed
    }
}

/// Raises a path event (`crate::events`, from none) for every peer of a world just set up,
/// when a tool listens: its route in `engine`, and for TCP the path the grid plans
/// (`punched`: world ranks reached through both NATs).
fn paths_set_up(
    engine: &Engine,
    guids: &[ferry_grid::Guid],
    punched: &[u32],
    (base, rank): (u32, u32),
) {
    use crate::events::{listening, EventType, PathKind};
    if !listening(EventType::PathChange) {
        return;
    }
    for peer in 0..guids.len() as u32 {
        let Some(route) = engine.proto.route((base + peer) as usize) else {
            continue;
        };
        let path = match route {
            Route::Loopback => PathKind::Itself,
            Route::Shm => PathKind::Shm,
            Route::Fabric => PathKind::Fabric,
            Route::Tcp if punched.contains(&peer) => PathKind::Punched,
            Route::Tcp => match ferry_grid::path::plan(guids, rank, peer).path {
                ferry_grid::Path::Direct => PathKind::Direct,
                ferry_grid::Path::ViaMyNat => PathKind::Nat,
                ferry_grid::Path::ViaPeerRelay { .. } => PathKind::Relay,
            },
        };
        crate::events::path_set_up(base + peer, path);
    }
}

/// How a wait backs off: for how many polls it spins, and whether it yields the core then.
struct Waits {
    cores: usize,
    spin: u32,
    spin_yield: bool,
}

impl Waits {
    fn of(config: &Config, local: usize) -> Waits {
        // Not this process's affinity alone: a rank bound to one core would count its peers
        // on the other cores as rivals for its own.
        let cores = config
            .host_cores
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |c| c.get()));
        Waits {
            cores,
            spin: config
                .spin
                .unwrap_or(if local > cores { 100 } else { 4000 }),
            spin_yield: config.spin_yield.unwrap_or(local > cores),
        }
    }
}

/// The ranks' places in a grid, for paths and hole punching, by world rank.
struct GridFacts {
    ids: Vec<ferry_grid::Guid>,
    /// A punch observes through the peer cluster's first relay (`front`), and falls back to
    /// one of its relays that is still there.
    relays: Vec<Option<SocketAddr>>,
    all_relays: Vec<Vec<(String, SocketAddr)>>,
}

impl GridFacts {
    fn of(cards: &[Card]) -> GridFacts {
        GridFacts {
            ids: cards.iter().map(Card::guid).collect(),
            relays: (cards.iter())
                .map(|c| c.relays.first().map(|&(_, addr)| addr))
                .collect(),
            all_relays: cards.iter().map(|c| c.relays.clone()).collect(),
        }
    }
}

/// Opens this rank's TCP listener, registers it with its cluster's relays, offers hole
/// punches and publishes its address. Returns it with the punches offered.
fn open_tcp(
    config: &Config,
    (key, job): (&JobKey, u64),
    ranks: Ranks,
    near: &Neighbours,
    grid: &GridFacts,
    boot: &mut Bootstrap,
) -> Result<(TcpTransport, Vec<crate::punching::Prepared>), Error> {
    let Ranks { base, rank, size } = ranks;
    let max = config.tcp_eager_limit.max(config.tcp_chunk) as u64;
    let mut primary = config.tcp_listen_ip();
    if primary.is_loopback() && near.local.len() < size as usize {
        // Ranks elsewhere must reach us, and neither ferry's node daemon nor a grid said how
        // (a foreign process manager started us): this host's own address.
        primary = crate::host::reachable_ip().ok_or_else(|| {
            Error::Config(format!(
                "rank {rank} has peers on other hosts but no address they can reach: set FERRY_TCP_ADDR"
            ))
        })?;
    }
    // With an address per rail, one listener takes connections on all of them.
    let bind = match config.rail_addrs.is_empty() {
        true => SocketAddr::new(primary, 0),
        false => SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0),
    };
    let mut t = TcpTransport::bind(
        bind,
        key.clone(),
        job,
        (ranks.me(), base..base + size),
        max,
        config.tcp_buffer,
        config.rails,
        Duration::from_secs(config.rail_timeout_secs),
    )?;
    t.set_max_strangers(config.tcp_strangers);
    t.set_compression(config.compress);
    for (front, relay) in config.place.as_ref().map_or_else(Vec::new, |p| p.relays()) {
        // Registered before the address is published: once anyone reads it, every relay knows
        // its ranks.
        let timeout = config.connect_timeout();
        t.register_with_relay(relay.inside.into(), &front, timeout)?;
    }
    let mut to_punch = Vec::new();
    if base == 0 {
        let facts = (&grid.ids[..], &grid.relays[..]);
        to_punch = crate::punching::offer(&t, boot, config, facts, (0, rank), primary)?;
    }
    let addr = SocketAddr::new(primary, t.listen_addr().port());
    boot.put(&format!("tcp-{}", ranks.me()), &addr.to_string())?;
    Ok((t, to_punch))
}

/// Reads the TCP addresses the ranks of `tcp_peers` (universe ranks) published into their
/// cards.
fn read_addresses(
    boot: &mut Bootstrap,
    cards: &mut [Card],
    tcp_peers: &[u32],
    base: u32,
) -> Result<(), Error> {
    for peer in tcp_peers {
        let r = peer - base;
        let text = boot.get(&format!("tcp-{peer}"))?;
        let addr = text.parse().map_err(|_| {
            Error::Bootstrap(format!("rank {r} published a malformed address {text:?}"))
        })?;
        cards[r as usize].tcp = Some(addr);
    }
    Ok(())
}

/// Each universe rank's cluster, for hierarchical collectives: none for other worlds'
/// processes. A job without clusters of its own (FERRY_CLUSTER) is grouped by host, so that
/// the first phase of those collectives runs over shared memory.
fn clusters_by_universe_rank(cards: &[Card], hosts: &[u32], base: u32) -> Vec<u32> {
    let by_host = cards.iter().all(|c| c.cluster == 0) && hosts.iter().any(|&h| h > 0);
    std::iter::repeat_n(0, base as usize)
        .chain((cards.iter().zip(hosts)).map(|(c, &h)| if by_host { h } else { c.cluster }))
        .collect()
}

/// The engine over these transports, with a route per universe rank: other worlds'
/// processes (below `base`) are reached over TCP.
fn new_engine(
    config: &Config,
    ranks: Ranks,
    (near, fabric_peers): (&Neighbours, &[u32]),
    waits: &Waits,
    cards: &[Card],
    (shm, tcp): (Option<ShmTransport>, Option<TcpTransport>),
) -> Engine {
    let Ranks { base, size, .. } = ranks;
    let me = ranks.me();
    let routes = (0..base + size)
        .map(|u| match u {
            u if u == me => Route::Loopback,
            u if u >= base && near.over_shm(u - base) => Route::Shm,
            u if fabric_peers.binary_search(&u).is_ok() => Route::Fabric,
            _ => Route::Tcp,
        })
        .collect();
    let (cma_on, cma_share) = config.cma.plan(near.local.len(), waits.cores);
    Engine::new(EngineSetup {
        me,
        routes,
        pids: std::iter::repeat_n(0, base as usize)
            .chain(cards.iter().map(|c| c.pid))
            .collect(),
        shm,
        tcp,
        cma: cma_on,
        cma_share_min: if cma_share {
            config.cma_share_min as u64
        } else {
            u64::MAX
        },
        shm_eager_limit: config.shm_eager_for(cma_share),
        tcp_eager_limit: config.tcp_eager_limit,
        tcp_chunk: config.tcp_chunk,
        rails: usize::from(config.rails),
        rail_policy: config.rail_policy,
        rail_stripe: config.rail_stripe,
        spin: waits.spin,
        spin_yield: waits.spin_yield,
    })
}

/// Drives the engine until every TCP peer has an authenticated connection, or fails naming
/// those that have none after the connect timeout.
fn connect_all(
    engine: &mut Engine,
    config: &Config,
    cards: &[Card],
    tcp_peers: &[u32],
    ranks: Ranks,
) -> Result<(), Error> {
    if engine.net.tcp.is_none() {
        return Ok(());
    }
    let deadline = Instant::now() + config.connect_timeout();
    let missing = |e: &Engine| {
        (e.net.tcp.as_ref())
            .map(|t| t.missing(tcp_peers))
            .unwrap_or_default()
    };
    while !missing(engine).is_empty() {
        if Instant::now() > deadline {
            let missing: Vec<String> = missing(engine)
                .iter()
                .map(|&u| {
                    let c = &cards[(u - ranks.base) as usize];
                    format!("{} (host {}, pid {})", u - ranks.base, c.host, c.pid)
                })
                .collect();
            return Err(Error::Transport(format!(
                "rank {}: no authenticated connection to ranks {} after {} s",
                ranks.rank,
                missing.join(", "),
                config.connect_timeout_secs
            )));
        }
        // No communicator exists yet, so nothing but the engine moves.
        if !engine.progress(&mut NoHook)? {
            if let Some(t) = engine.net.tcp.as_mut() {
                t.poll_wait(&mut engine.proto, Some(Duration::from_millis(10)))?;
            }
        }
    }
    Ok(())
}

/// Reads the cards of world ranks `0..size` (universe ranks from `base`).
fn read_cards(boot: &mut Bootstrap, base: u32, size: u32) -> Result<Vec<Card>, Error> {
    (0..size)
        .map(|r| Card::decode(r, &boot.get(&format!("card-{}", base + r))?))
        .collect()
}

/// Opens the TCP connections this rank dials: to each of `peers` (universe ranks) whose path
/// (`ferry_grid::path::plan`) names us the dialer, one per rail, along that path.
fn dial_peers(
    t: &mut TcpTransport,
    config: &Config,
    cards: &[Card],
    guids: &[ferry_grid::Guid],
    peers: &[u32],
    (base, rank): (u32, u32),
) -> Result<(), Error> {
    for &uid in peers {
        let peer = uid - base;
        let plan = ferry_grid::path::plan(guids, rank, peer);
        if plan.dialer != rank {
            continue;
        }
        let card = &cards[peer as usize];
        let missing =
            |what: &str| Error::Bootstrap(format!("rank {peer} published no {what} address"));
        for rail in 0..config.rails {
            match plan.path {
                ferry_grid::Path::Direct | ferry_grid::Path::ViaMyNat => {
                    let tcp = card.tcp.ok_or_else(|| missing("TCP"))?;
                    // A rail of its own needs an address on both ends and a direct path.
                    let own = config.rail_addrs.get(rail as usize).copied();
                    let theirs = card.rails.get(rail as usize).copied();
                    match (plan.path, own, theirs) {
                        (ferry_grid::Path::Direct, Some(from), Some(to)) => t.dial(
                            (uid, rail),
                            SocketAddr::new(to, tcp.port()),
                            Some(from),
                            None,
                        )?,
                        _ => t.dial((uid, rail), tcp, None, None)?,
                    }
                }
                ferry_grid::Path::ViaPeerRelay { .. } => {
                    // Rails spread over the peer's relays (`ferry_grid::relays`), so that a
                    // pair with as many rails as relays has one through each; relays seen
                    // gone are left out.
                    let (front, relay) = t
                        .choose_relay((rank, peer, rail), &card.relays)
                        .ok_or_else(|| missing("live relay"))?;
                    t.dial((uid, rail), *relay, None, Some(front.as_str()))?
                }
            }
        }
    }
    Ok(())
}

/// How a rank reaches a peer ([`World::route_to`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRoute {
    /// The rank itself.
    Itself,
    /// Shared-memory rings: the peer is on this host.
    SharedMemory,
    /// A TCP connection (direct, through NAT or a relay, on one or more rails).
    Tcp,
    /// A fabric endpoint (libfabric), between hosts.
    Fabric,
}

/// Where this process's world sits in the job: for spawning and being spawned.
pub(crate) struct Universe {
    /// Universe rank of the world's rank 0.
    pub base: u32,
    /// The world's number (0: the launcher's).
    pub world: u32,
    /// The job key, for TCP connections to other worlds' processes (none for a singleton).
    pub key: Option<JobKey>,
    /// The job id.
    pub job: u64,
    /// Whether our address for other worlds is published (see `crate::spawn`).
    pub published: std::cell::Cell<bool>,
}

fn singleton(config: &Config) -> World {
    let engine = Engine::new(EngineSetup {
        me: 0,
        routes: vec![Route::Loopback],
        pids: vec![std::process::id()],
        shm: None,
        tcp: None,
        cma: false,
        cma_share_min: u64::MAX,
        shm_eager_limit: config.shm_eager_for(false),
        tcp_eager_limit: config.tcp_eager_limit,
        tcp_chunk: config.tcp_chunk,
        rails: usize::from(config.rails),
        rail_policy: config.rail_policy,
        rail_stripe: config.rail_stripe,
        spin: 1,
        spin_yield: false,
    });
    let in_effect = Config {
        shm_eager_limit: Some(engine.shm_eager_limit()),
        shm_ring_bytes: Some(0),
        spin: Some(1),
        spin_yield: Some(false),
        ..config.clone()
    };
    World {
        comm: Comm::world(Rc::new(Shared::new(
            engine,
            None,
            1,
            in_effect,
            vec![0],
            Universe {
                base: 0,
                world: 0,
                key: None,
                job: 0,
                published: Default::default(),
            },
        ))),
    }
}

impl World {
    /// Completes outstanding sends, waits for every rank, and tells the launcher this rank
    /// exits normally. Called by `Drop` if not called explicitly.
    pub fn finalize(self) -> Result<(), Error> {
        self.finalize_inner()
    }

    fn finalize_inner(&self) -> Result<(), Error> {
        let shared = self.comm.shared();
        if shared.finalized.replace(true) {
            return Ok(());
        }
        // Other worlds' processes end on their own: tell them ours is not a failure.
        self.leave_other_worlds()?;
        let fault_tolerant = shared.in_effect.fault_tolerant;
        if fault_tolerant {
            shared.engine.borrow_mut().leave_all()?;
        }
        // Flush queued frames; peers keep their rings and sockets open until the fence below.
        shared.wait_until(|p| p.output_drained())?;
        // Members may still be in this rank's last collectives: waiting for them lets a member
        // stuck in one that this rank went through another way be named (its waits cannot
        // tell when this rank ran far ahead), instead of the fence below never completing.
        let caught_up = shared.wait_for_segments();
        shared.end_if_ways_differ(&caught_up, || {
            format!("world rank {}, finalizing", shared.engine.borrow().proto.me)
        });
        caught_up?;
        if shared.in_effect.rail_stats {
            for line in shared.engine.borrow().rail_report() {
                eprintln!("{line}");
            }
        }
        if let Some(boot) = shared.bootstrap.borrow_mut().as_mut() {
            // Every peer that lives has our BYE; a fence would wait for the dead.
            if !fault_tolerant {
                boot.fence()?;
            }
            boot.finalize()?;
        }
        Ok(())
    }

    /// Ends the whole job with `code`, printing `message` through the launcher.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        self.comm.shared().abort(code, message)
    }

    /// Lets other threads use this world between the passes of every wait: `pause` runs
    /// between them with the engine free (the binding serializes the threads and releases its
    /// lock there), and sleeps of an idle wait are cut short so that a thread wanting in never
    /// waits long for one that sleeps. For MPI_THREAD_MULTIPLE.
    pub fn share_with_threads(&self, pause: crate::comm::Pause) {
        let shared = self.comm.shared();
        shared.pause.set(Some(pause));
        shared.engine.borrow_mut().nap = Duration::from_micros(200);
    }

    /// Publishes `value` under `key` with the launcher (or a PMI process manager's name
    /// service), where every rank of the job can look it up at once (MPI's name service). Without a launcher (a singleton) keys stay here.
    pub fn publish(&self, key: &str, value: &str) -> Result<(), Error> {
        let shared = self.comm.shared();
        match shared.bootstrap.borrow_mut().as_mut() {
            Some(boot) => boot.publish_name(key, value),
            None => {
                shared.names.borrow_mut().insert(key.into(), value.into());
                Ok(())
            }
        }
    }

    /// The value published under `key`, if any.
    pub fn lookup(&self, key: &str) -> Result<Option<String>, Error> {
        let shared = self.comm.shared();
        match shared.bootstrap.borrow_mut().as_mut() {
            Some(boot) => boot.lookup_name(key),
            None => Ok(shared.names.borrow().get(key).cloned()),
        }
    }

    /// MPI_APPNUM as a foreign process manager (PMI) tells it; `None` under `ferry run` (its
    /// launcher passes it as `FERRY_APPNUM`), for a singleton, or when the manager says -1.
    pub fn process_manager_appnum(&self) -> Option<i32> {
        self.comm.shared().bootstrap.borrow().as_ref()?.appnum()
    }

    /// MPI_UNIVERSE_SIZE as a foreign process manager (PMI) tells it; `None` under `ferry run`,
    /// for a singleton, or when the manager does not know (hydra says -1).
    pub fn process_manager_universe_size(&self) -> Option<u32> {
        self.comm
            .shared()
            .bootstrap
            .borrow()
            .as_ref()?
            .universe_size()
    }

    /// The process id of world rank `rank`.
    pub fn pid_of(&self, rank: usize) -> Option<u32> {
        self.comm.shared().engine.borrow().proto.pid(rank)
    }

    /// The settings in effect: those read from the environment at [`init`], with every
    /// automatic choice (`shm_eager_limit`, `shm_ring_bytes`, `spin`) resolved to the value
    /// chosen. A ring size of 0 means no ring: the tcp transport, or a job of one rank.
    pub fn config(&self) -> &Config {
        &self.comm.shared().in_effect
    }

    /// How this rank reaches world rank `rank` (chosen at [`init`]), or `None` for a rank
    /// outside the world.
    pub fn route_to(&self, rank: usize) -> Option<PeerRoute> {
        let shared = self.comm.shared();
        let uid = shared.universe.base as usize + rank;
        if rank >= shared.size {
            return None;
        }
        Some(match shared.engine.borrow().proto.route(uid)? {
            Route::Loopback => PeerRoute::Itself,
            Route::Shm => PeerRoute::SharedMemory,
            Route::Tcp => PeerRoute::Tcp,
            Route::Fabric => PeerRoute::Fabric,
        })
    }

    /// The address this rank accepts TCP connections on, when it uses the tcp transport.
    pub fn tcp_listen_addr(&self) -> Option<SocketAddr> {
        self.comm
            .shared()
            .engine
            .borrow()
            .net
            .tcp
            .as_ref()
            .map(|t| t.listen_addr())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // A panicking rank must not wait in the collective finalize for ranks that may be
        // waiting for it: it ends, and the launcher ends the job.
        if std::thread::panicking() {
            return;
        }
        if let Err(e) = self.finalize_inner() {
            eprintln!("ferry: rank {}: finalize failed: {e}", self.comm.rank());
        }
    }
}

#[cfg(test)]
mod card_tests {
    use super::*;

    #[test]
    fn a_card_carries_every_relay_with_its_front() {
        let card = Card {
            pid: 7,
            host: "b1".into(),
            node: "n".into(),
            tcp: None,
            cluster: 1,
            grid: "b".into(),
            front: "fb".into(),
            relays: vec![
                ("fb".into(), "198.18.0.20:7390".parse().unwrap()),
                ("fb2".into(), "198.18.0.21:7390".parse().unwrap()),
            ],
            rails: Vec::new(),
            fabric: None,
        };
        let text = card.encode();
        assert!(
            text.contains(";relay=fb@198.18.0.20:7390,fb2@198.18.0.21:7390"),
            "{text}"
        );
        let back = Card::decode(1, &text).unwrap();
        assert_eq!(back.relays, card.relays);
        assert_eq!(back.front, "fb");
        for bad in [
            "relay=198.18.0.20:7390",
            "relay=fb@x",
            "relay=fb@1.2.3.4:5,",
        ] {
            let e = Card::decode(1, &format!("pid=1;host=h;node=n;{bad}"));
            assert!(e.is_err(), "{bad}");
        }
    }
}
