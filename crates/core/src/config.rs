//! Runtime settings: one typed struct, each field read from a `FERRY_…` environment variable.

use crate::error::Error;

/// Which transports carry messages between ranks, chosen per peer at setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// Shared memory to the ranks on this host (`crate::host`), TCP to the others.
    Auto,
    /// Shared-memory rings (CMA for large messages) only: every rank must be on this host.
    Shm,
    /// TCP to every peer, also on this host (over loopback or the host's interfaces).
    Tcp,
}

/// Which network carries messages between hosts (`FERRY_NET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetKind {
    /// A fabric (libfabric) when both hosts have one with a user-level NIC provider (verbs,
    /// EFA, CXI, psm3, …), TCP otherwise.
    Auto,
    /// The fabric with any provider but the host-local `shm` (so also libfabric's `tcp`);
    /// pairs whose hosts share none go over TCP, and say so.
    Ofi,
    /// ferry's own TCP only.
    Tcp,
}

/// Providers that run over the kernel's sockets: `auto` leaves them to ferry's own TCP.
const SOCKET_PROVIDERS: [&str; 4] = ["tcp", "udp", "sockets", "net"];

impl NetKind {
    /// Whether a libfabric provider (`fi_info`'s name, layers and all: "verbs;ofi_rxm") may
    /// carry messages between hosts under this setting. `shm` never does: it stays in a host.
    pub fn admits(self, provider: &str) -> bool {
        let layers: Vec<&str> = provider.split(';').collect();
        match self {
            NetKind::Tcp => false,
            _ if layers.contains(&"shm") => false,
            NetKind::Ofi => true,
            NetKind::Auto => !layers.iter().any(|l| SOCKET_PROVIDERS.contains(l)),
        }
    }
}

/// How large shared-memory messages are copied: with CMA (`process_vm_readv`/`writev`, each
/// byte once) or pipelined through the ring (each byte twice, by both processes at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmaMode {
    /// `Share` while every rank of the host has a core, `Pull` when they outnumber the cores
    /// (a sender that must wait for a core would hold the receiver up).
    Auto,
    /// The receiver copies the whole message itself.
    Pull,
    /// Messages of at least `FERRY_CMA_SHARE` bytes are copied by both sides at once: the
    /// receiver reads the front while the sender writes the back. Smaller ones are pulled.
    Share,
    /// Never: always the pipelined copy through the ring.
    Never,
}

impl CmaMode {
    /// With `local_ranks` ranks on a host of `cores` cores: whether CMA is used, and whether
    /// copies are shared.
    pub fn plan(self, local_ranks: usize, cores: usize) -> (bool, bool) {
        match self {
            CmaMode::Auto => (true, local_ranks <= cores),
            CmaMode::Pull => (true, false),
            CmaMode::Share => (true, true),
            CmaMode::Never => (false, false),
        }
    }
}

/// How rendezvous chunks are spread over the rails of a peer pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RailPolicy {
    /// Each chunk goes to the rail expected to deliver it first, from each rail's measured
    /// rate and backlog: a slow rail gets proportionally less.
    Weighted,
    /// Chunks take the rails in turn (the channel-bonding seed's policy).
    RoundRobin,
}

/// Most rails a peer pair may have.
pub const MAX_RAILS: u16 = 16;

/// Settings of the runtime.
#[derive(Debug, Clone)]
pub struct Config {
    /// `FERRY_TRANSPORT` (`auto` | `shm` | `tcp`, default `auto`): shared memory to the ranks
    /// of this host and TCP to the others; `shm` insists that all ranks share this host; `tcp`
    /// takes TCP to every peer.
    pub transport: TransportKind,
    /// `FERRY_NET` (`auto` | `ofi` | `tcp`, default `auto`): between hosts, a libfabric fabric
    /// with a user-level NIC when both hosts have one, else TCP; `ofi` takes the fabric with
    /// any provider (libfabric's `tcp` too; `FI_PROVIDER` picks one); `tcp` never the fabric.
    pub net: NetKind,
    /// `FERRY_TCP_ADDR` (an IP address, default unset): the address this rank listens on and
    /// publishes for TCP peers. Set by `ferry node` on hosts of a multi-host job (the address
    /// the launcher's host reaches this one by); unset, a rank of a grid job takes its grid
    /// address, one with rails its rail 0 address, and any other 127.0.0.1.
    pub tcp_addr: Option<std::net::IpAddr>,
    /// `FERRY_SHM_EAGER` (bytes, at most half a ring): largest message sent eagerly through a
    /// ring. Unset: 8 KiB while CMA copies are shared (a shared copy beats two ring copies from
    /// there on), else 64 KiB; see [`Config::shm_eager_for`].
    pub shm_eager_limit: Option<usize>,
    /// `FERRY_SHM_RING` (bytes, default: 16 MiB / ranks, clamped to 64 KiB … 1 MiB): size of one
    /// ring; rounded down to a power of two.
    pub shm_ring_bytes: Option<usize>,
    /// `FERRY_CMA` (`auto` | `share` | `pull` (or `1`) | `off` (or `0`), default `auto`): how large
    /// shm messages are copied, see [`CmaMode`]. A kernel that refuses CMA falls back to the
    /// ring either way.
    pub cma: CmaMode,
    /// `FERRY_CMA_SHARE` (bytes, default 65536): smallest message whose copy both sides share
    /// (`share`, and `auto` while ranks have their own cores).
    pub cma_share_min: usize,
    /// `FERRY_COLL_SHM` (bytes, default 4 MiB, 0 = off): the data area of each communicator's
    /// shared collective segment, made on the first collective the selection table sends
    /// through shared memory, by communicators whose ranks all share one host. Two halves take
    /// turns; large collectives go through it in chunks of a half (split over the ranks for
    /// allreduce and allgather), so it bounds both the memory and the chunk.
    pub coll_shm_bytes: usize,
    /// `FERRY_FAULT_TOLERANT` (`0` | `1`, default 0; `ferry run --fault-tolerant` sets it): a
    /// rank's death fails the operations that involve it instead of ending the job (User-Level
    /// Failure Mitigation). Collectives then go by messages only, not through shared segments.
    pub fault_tolerant: bool,
    /// `FERRY_TCP_EAGER` (bytes, default 65536, or 8192 with several rails): largest message
    /// sent eagerly over TCP. Eager messages keep MPI order on rail 0; with rails a lower limit
    /// lets medium messages go by rendezvous, whose data may take any rail.
    pub tcp_eager_limit: usize,
    /// `FERRY_TCP_CHUNK` (bytes, default 64 KiB): largest DATA frame of a rendezvous over TCP.
    /// Between two namespace hosts, 64 KiB frames gave 1 MiB–16 MiB ping-pongs of 4.6–5.5 GB/s
    /// where 256 KiB ones gave 2.1–3.2 (bench/results/2026-11-27-tcp-chunk).
    pub tcp_chunk: usize,
    /// `FERRY_TCP_BUF` (bytes, default 0 = kernel autotuning): SO_SNDBUF and SO_RCVBUF of every
    /// rank-to-rank socket.
    pub tcp_buffer: usize,
    /// `FERRY_COMPRESS`, `FERRY_COMPRESS_BELOW`, `FERRY_COMPRESS_MIN`: compression of TCP
    /// payloads on slow links, off by default (see [`crate::compress`]).
    pub compress: crate::compress::CompressConfig,
    /// `FERRY_TCP_STRANGERS` (connections, default 1024, never fewer than two per peer and
    /// rail): connections to this rank's listener that have not authenticated yet kept at a
    /// time; one more closes the oldest, so strangers cost bounded memory.
    pub tcp_strangers: usize,
    /// `FERRY_HOST_CORES` (default: `SLURM_CPUS_ON_NODE` under Slurm, else the cores this
    /// process may run on): the cores this host's ranks of the job share, against which their
    /// count says whether they outnumber the cores. A launcher that binds each rank to one core
    /// sets it: a bound rank may run on one core only, and would take its peers for rivals.
    pub host_cores: Option<usize>,
    /// `FERRY_SPIN` (polls, default: 4000, or 100 when ranks outnumber cores): polls without
    /// progress before a waiting rank yields and then sleeps.
    pub spin: Option<u32>,
    /// `FERRY_SPIN_YIELD` (`0` | `1`, default: 1 when ranks outnumber cores, else 0): the spin's
    /// polls give the core away (`sched_yield`) in between. Alone on a core that costs a system
    /// call per poll; on a shared core it lets the processes being waited for (the peer, a
    /// relay) run instead of the spin, and it still keeps the core awake.
    pub spin_yield: Option<bool>,
    /// `FERRY_RAILS` (1 … 16, default: one per `FERRY_RAIL_ADDRS` entry, else 1; on the
    /// fabric, unset: one per NIC): TCP connections or fabric endpoints per peer pair. Rail 0
    /// carries every frame in order; rendezvous payloads of at least `FERRY_RAIL_STRIPE` bytes
    /// are cut into chunks spread over all rails (on the fabric, reads of 512 KiB pieces).
    pub rails: u16,
    /// `FERRY_RAIL_ADDRS` (comma-separated IPs, default none): this rank's local address on
    /// each rail; rail i connects from our address i to the peer's address i when both ranks
    /// list one and the pair talks directly. Set by `ferry run --grid` from the topology.
    pub rail_addrs: Vec<std::net::IpAddr>,
    /// `FERRY_RAIL_POLICY` (`weighted` | `roundrobin`, default `weighted`).
    pub rail_policy: RailPolicy,
    /// `FERRY_RAIL_STRIPE` (bytes, default 512 KiB): smallest rendezvous striped over rails.
    pub rail_stripe: usize,
    /// `FERRY_RAIL_TIMEOUT` (seconds, default 3): a rail other than rail 0 whose sent data
    /// stays unacknowledged this long counts as failed (TCP_USER_TIMEOUT) and its chunks are
    /// sent again on the others.
    pub rail_timeout_secs: u64,
    /// `FERRY_RAIL_STATS=1`: each rank prints, at finalize, the bytes and rate of every rail.
    pub rail_stats: bool,
    /// `FERRY_SHOW_PATHS` (set and not `0`: on; `ferry run --show-paths` sets it): rank 0
    /// prints the job's path matrix after set-up, and each rank says why a pair does not punch.
    pub show_paths: bool,
    /// `FERRY_CONNECT_TIMEOUT` (seconds, default 30, 0 = no limit): how long setup waits for
    /// all peers; see [`Config::connect_timeout`].
    pub connect_timeout_secs: u64,
    /// `FERRY_PUNCH` (`0` | `1`, default 1): a pair of ranks on two different private clusters
    /// first tries a direct connection through both NATs (hole punching, `ferry_wire::punch`)
    /// and uses the relay only if that fails.
    pub punch: bool,
    /// `FERRY_PUNCH_TIMEOUT_MS` (milliseconds, default 300): how long that try may take before
    /// the pair uses the relay.
    pub punch_timeout_ms: u64,
    /// `FERRY_PMIX_LIB` (a library name or path, default `libpmix.so.2`): the libpmix loaded
    /// when a PMIx server (`srun --mpi=pmix`, `prterun`) started this rank, and only then.
    pub pmix_lib: String,
    /// `FERRY_GRID_PLACE` (set by `ferry run --grid`, default unset = one host): this rank's
    /// cluster, front node, host, address and relay (`ferry_grid::Placement`). With it the tcp
    /// transport listens on the host's address, paths follow docs/ARCHITECTURE.md §4 and a rank on a private
    /// cluster registers with its relay.
    pub place: Option<ferry_grid::Placement>,
    /// The collectives' settings: the selection table (`FERRY_COLL_…`), the network-aware
    /// broadcast (`FERRY_BCAST_SCHEDULER`, `FERRY_BCAST_COSTS`) and the cluster ids
    /// (`FERRY_CLUSTER`, `FERRY_CLUSTERS`).
    pub(crate) coll: crate::coll::settings::CollSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            transport: TransportKind::Auto,
            net: NetKind::Auto,
            tcp_addr: None,
            shm_eager_limit: None,
            shm_ring_bytes: None,
            cma: CmaMode::Auto,
            cma_share_min: 64 << 10,
            coll_shm_bytes: 4 << 20,
            fault_tolerant: false,
            tcp_eager_limit: 64 << 10,
            tcp_chunk: 64 << 10,
            tcp_buffer: 0,
            compress: Default::default(),
            tcp_strangers: crate::tcp::DEFAULT_MAX_STRANGERS,
            spin: None,
            spin_yield: None,
            host_cores: None,
            rails: 1,
            rail_addrs: Vec::new(),
            rail_policy: RailPolicy::Weighted,
            rail_stripe: 512 << 10,
            rail_timeout_secs: 3,
            rail_stats: false,
            show_paths: false,
            connect_timeout_secs: 30,
            punch: true,
            punch_timeout_ms: ferry_wire::punch::DEFAULT_TIMEOUT.as_millis() as u64,
            pmix_lib: "libpmix.so.2".into(),
            place: None,
            coll: Default::default(),
        }
    }
}

impl Config {
    /// The shm eager limit: `FERRY_SHM_EAGER`, or its default for whether CMA copies are
    /// shared (`shared_copies`).
    pub fn shm_eager_for(&self, shared_copies: bool) -> usize {
        self.shm_eager_limit
            .unwrap_or(if shared_copies { 8 << 10 } else { 64 << 10 })
    }

    /// Reads every setting from the environment, defaults for those unset. A value of the
    /// wrong form or outside its range (see [`crate::settings::NUMBERS`]) is an error naming
    /// the variable, the value and what is accepted.
    pub fn from_env() -> Result<Config, Error> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Config::from_env`] with the variables from `get` (for tests and for checking another
    /// process's environment).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let d = Config::default();
        // Unset and blank are the same: the default.
        let word = |name: &str| {
            get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let number = |name: &str| crate::settings::number(&get, name);
        let transport = match word("FERRY_TRANSPORT").as_deref() {
            None | Some("auto") => TransportKind::Auto,
            Some("shm") => TransportKind::Shm,
            Some("tcp") => TransportKind::Tcp,
            Some(other) => {
                return Err(Error::Config(format!(
                    "FERRY_TRANSPORT={other:?}: expected auto, shm or tcp"
                )))
            }
        };
        let net = match word("FERRY_NET").as_deref() {
            None | Some("auto") => NetKind::Auto,
            Some("ofi") => NetKind::Ofi,
            Some("tcp") => NetKind::Tcp,
            Some(other) => {
                return Err(Error::Config(format!(
                    "FERRY_NET={other:?}: expected auto, ofi or tcp"
                )))
            }
        };
        let tcp_addr = match word("FERRY_TCP_ADDR") {
            Some(text) => Some(text.parse().map_err(|_| {
                Error::Config(format!("FERRY_TCP_ADDR={text:?} is not an IP address"))
            })?),
            None => None,
        };
        // Read by MPI_UNIVERSE_SIZE (ferry-mpi); checked here so that a bad value fails
        // MPI_Init instead of being ignored.
        number("FERRY_UNIVERSE_SIZE")?;
        let fault_tolerant = match word("FERRY_FAULT_TOLERANT").as_deref() {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => {
                return Err(Error::Config(format!(
                    "FERRY_FAULT_TOLERANT={other:?}: expected 0 or 1"
                )))
            }
        };
        let spin_yield = match word("FERRY_SPIN_YIELD").as_deref() {
            None => None,
            Some("1") => Some(true),
            Some("0") => Some(false),
            Some(other) => {
                return Err(Error::Config(format!(
                    "FERRY_SPIN_YIELD={other:?}: expected 0 or 1"
                )))
            }
        };
        let rail_addrs = match word("FERRY_RAIL_ADDRS") {
            Some(text) => text
                .split(',')
                .map(|a| {
                    a.trim().parse().map_err(|_| {
                        Error::Config(format!(
                            "FERRY_RAIL_ADDRS={text:?}: {a:?} is not an IP address"
                        ))
                    })
                })
                .collect::<Result<Vec<std::net::IpAddr>, Error>>()?,
            None => Vec::new(),
        };
        // Ranges come from the settings table, so these conversions cannot fail; usize is 64
        // bits wide on every target ferry builds for.
        let bytes =
            |name: &str| -> Result<Option<usize>, Error> { Ok(number(name)?.map(|v| v as usize)) };
        let rails = number("FERRY_RAILS")?.map_or(rail_addrs.len().max(1) as u16, |r| r as u16);
        if !(1..=MAX_RAILS).contains(&rails) {
            return Err(Error::Config(format!(
                "FERRY_RAIL_ADDRS lists {} addresses: expected 1 … {MAX_RAILS}",
                rail_addrs.len()
            )));
        }
        let cma = match word("FERRY_CMA").as_deref() {
            None | Some("auto") => CmaMode::Auto,
            Some("share") => CmaMode::Share,
            Some("1") | Some("on") | Some("pull") => CmaMode::Pull,
            Some("0") | Some("off") => CmaMode::Never,
            Some(other) => {
                return Err(Error::Config(format!(
                    "FERRY_CMA={other:?}: expected auto, share, pull or off"
                )))
            }
        };
        let punch = match word("FERRY_PUNCH").as_deref() {
            None | Some("1") => true,
            Some("0") => false,
            Some(other) => {
                return Err(Error::Config(format!(
                    "FERRY_PUNCH={other:?}: expected 0 or 1"
                )))
            }
        };
        let rail_policy = match word("FERRY_RAIL_POLICY").as_deref() {
            None | Some("weighted") => RailPolicy::Weighted,
            Some("roundrobin") | Some("round-robin") => RailPolicy::RoundRobin,
            Some(other) => {
                return Err(Error::Config(format!(
                    "FERRY_RAIL_POLICY={other:?}: expected weighted or roundrobin"
                )))
            }
        };
        Ok(Config {
            transport,
            net,
            tcp_addr,
            shm_eager_limit: bytes("FERRY_SHM_EAGER")?,
            shm_ring_bytes: bytes("FERRY_SHM_RING")?,
            cma,
            cma_share_min: bytes("FERRY_CMA_SHARE")?.unwrap_or(d.cma_share_min),
            coll_shm_bytes: bytes("FERRY_COLL_SHM")?.unwrap_or(d.coll_shm_bytes),
            fault_tolerant,
            tcp_eager_limit: bytes("FERRY_TCP_EAGER")?.unwrap_or(if rails > 1 {
                8 << 10
            } else {
                d.tcp_eager_limit
            }),
            tcp_chunk: bytes("FERRY_TCP_CHUNK")?.unwrap_or(d.tcp_chunk),
            tcp_buffer: bytes("FERRY_TCP_BUF")?.unwrap_or(d.tcp_buffer),
            compress: crate::compress::CompressConfig::read(word, number)?,
            tcp_strangers: bytes("FERRY_TCP_STRANGERS")?.unwrap_or(d.tcp_strangers),
            spin: number("FERRY_SPIN")?.map(|s| s as u32),
            host_cores: match number("FERRY_HOST_CORES")? {
                Some(cores) => Some(cores as usize),
                // Slurm's count of the job's CPUs on this node; not ours to refuse if odd.
                None => word("SLURM_CPUS_ON_NODE")
                    .and_then(|text| text.parse::<usize>().ok())
                    .filter(|&c| c > 0),
            },
            spin_yield,
            rails,
            rail_addrs,
            rail_policy,
            rail_stripe: bytes("FERRY_RAIL_STRIPE")?.unwrap_or(d.rail_stripe),
            rail_timeout_secs: number("FERRY_RAIL_TIMEOUT")?.unwrap_or(d.rail_timeout_secs),
            rail_stats: word("FERRY_RAIL_STATS").as_deref() == Some("1"),
            show_paths: word(ferry_grid::path::SHOW_PATHS_ENV).is_some_and(|v| v != "0"),
            connect_timeout_secs: number("FERRY_CONNECT_TIMEOUT")?
                .unwrap_or(d.connect_timeout_secs),
            punch,
            punch_timeout_ms: number("FERRY_PUNCH_TIMEOUT_MS")?.unwrap_or(d.punch_timeout_ms),
            pmix_lib: match get("FERRY_PMIX_LIB") {
                Some(lib) if !lib.trim().is_empty() => lib.trim().to_string(),
                _ => d.pmix_lib,
            },
            place: match get(ferry_grid::PLACE_ENV) {
                Some(text) if !text.is_empty() => {
                    Some(ferry_grid::Placement::parse(&text).map_err(|e| {
                        Error::Config(format!("{}={text:?}: {e}", ferry_grid::PLACE_ENV))
                    })?)
                }
                _ => None,
            },
            coll: crate::coll::settings::CollSettings::read(&get)?,
        })
    }

    /// How long setup waits for its peers: `FERRY_CONNECT_TIMEOUT`, where 0 means no limit
    /// (as `ferry run --timeout 0`; a century stands for it, so deadlines stay plain sums).
    pub fn connect_timeout(&self) -> std::time::Duration {
        match self.connect_timeout_secs {
            0 => std::time::Duration::from_secs(100 * 365 * 86_400),
            secs => std::time::Duration::from_secs(secs),
        }
    }

    /// The address this rank's TCP listener binds to and publishes (see
    /// [`Config::tcp_addr`]).
    pub fn tcp_listen_ip(&self) -> std::net::IpAddr {
        match (&self.place, self.tcp_addr, self.rail_addrs.first()) {
            (Some(p), _, _) => p.addr.into(),
            (None, Some(addr), _) => addr,
            (None, None, Some(&addr)) => addr,
            (None, None, None) => [127, 0, 0, 1].into(),
        }
    }

    /// Ring size for a job of `ranks` ranks on one host.
    pub fn ring_bytes(&self, ranks: usize) -> usize {
        let wanted = self
            .shm_ring_bytes
            .unwrap_or_else(|| ((16usize << 20) / ranks.max(1)).clamp(64 << 10, 1 << 20));
        // Power of two, so positions wrap with a mask.
        1usize << (usize::BITS - 1 - wanted.leading_zeros())
    }

    /// Each field with its environment name and current value, for `ferry info --params`;
    /// then the collective selection (`FERRY_COLL_SELECTION` and the thresholds of the built-in
    /// table), which is read once per process rather than kept here.
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        let mut params = vec![
            (
                "FERRY_TRANSPORT",
                format!("{:?}", self.transport).to_lowercase(),
            ),
            ("FERRY_NET", format!("{:?}", self.net).to_lowercase()),
            (
                "FERRY_SHM_EAGER",
                self.shm_eager_limit.map_or(
                    "auto (8 KiB with shared CMA copies, else 64 KiB)".into(),
                    |b| b.to_string(),
                ),
            ),
            (
                "FERRY_SHM_RING",
                self.shm_ring_bytes
                    .map_or("auto (16 MiB / ranks, 64 KiB..1 MiB)".into(), |r| {
                        r.to_string()
                    }),
            ),
            ("FERRY_CMA", format!("{:?}", self.cma).to_lowercase()),
            ("FERRY_CMA_SHARE", self.cma_share_min.to_string()),
            ("FERRY_COLL_SHM", self.coll_shm_bytes.to_string()),
            (
                "FERRY_FAULT_TOLERANT",
                u8::from(self.fault_tolerant).to_string(),
            ),
            (
                "FERRY_TCP_ADDR",
                self.tcp_addr
                    .map_or("unset (grid or rail address, else 127.0.0.1)".into(), |a| {
                        a.to_string()
                    }),
            ),
            ("FERRY_TCP_EAGER", self.tcp_eager_limit.to_string()),
            ("FERRY_TCP_CHUNK", self.tcp_chunk.to_string()),
            (
                "FERRY_TCP_BUF",
                if self.tcp_buffer == 0 {
                    "0 (kernel autotuning)".into()
                } else {
                    self.tcp_buffer.to_string()
                },
            ),
            ("FERRY_TCP_STRANGERS", self.tcp_strangers.to_string()),
            (
                "FERRY_HOST_CORES",
                self.host_cores
                    .map_or("auto (the cores this process may run on)".into(), |c| {
                        c.to_string()
                    }),
            ),
            (
                "FERRY_SPIN",
                self.spin
                    .map_or("auto (4000, 100 when oversubscribed)".into(), |s| {
                        s.to_string()
                    }),
            ),
            (
                "FERRY_SPIN_YIELD",
                self.spin_yield
                    .map_or("auto (1 when oversubscribed, else 0)".into(), |y| {
                        u8::from(y).to_string()
                    }),
            ),
            ("FERRY_RAILS", self.rails.to_string()),
            (
                "FERRY_RAIL_ADDRS",
                if self.rail_addrs.is_empty() {
                    "unset (every rail takes rail 0's path)".into()
                } else {
                    self.rail_addrs
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                },
            ),
            (
                "FERRY_RAIL_POLICY",
                format!("{:?}", self.rail_policy).to_lowercase(),
            ),
            ("FERRY_RAIL_STRIPE", self.rail_stripe.to_string()),
            ("FERRY_RAIL_TIMEOUT", self.rail_timeout_secs.to_string()),
            ("FERRY_RAIL_STATS", u8::from(self.rail_stats).to_string()),
            ("FERRY_SHOW_PATHS", u8::from(self.show_paths).to_string()),
            (
                "FERRY_CONNECT_TIMEOUT",
                self.connect_timeout_secs.to_string(),
            ),
            ("FERRY_PUNCH", u8::from(self.punch).to_string()),
            ("FERRY_PUNCH_TIMEOUT_MS", self.punch_timeout_ms.to_string()),
            ("FERRY_PMIX_LIB", self.pmix_lib.clone()),
            (
                ferry_grid::PLACE_ENV,
                self.place
                    .as_ref()
                    .map_or("unset (one host)".into(), |p| p.encode()),
            ),
        ];
        params.extend(self.compress.describe());
        params.extend(self.coll.describe());
        params
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_pairs(pairs: &[(&str, &str)]) -> Result<Config, Error> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[track_caller]
    fn refused(name: &str, value: &str, says: &str) {
        let e = from_pairs(&[(name, value)]).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{name}=")) && e.contains(value) && e.contains(says),
            "{name}={value}: {e}"
        );
    }

    #[test]
    fn a_universe_size_out_of_range_is_refused_as_the_launcher_refuses_it() {
        for bad in ["-1", "abc"] {
            refused("FERRY_UNIVERSE_SIZE", bad, "is not a number");
        }
        for bad in ["0", "99999999999", "2147483648"] {
            refused("FERRY_UNIVERSE_SIZE", bad, "1 … 2147483647 processes");
        }
        assert!(from_pairs(&[("FERRY_UNIVERSE_SIZE", "64")]).is_ok());
    }

    #[test]
    fn settings_that_quietly_hurt_are_refused_naming_variable_value_and_range() {
        refused(
            "FERRY_TCP_BUF",
            "1",
            "0 (kernel autotuning) or 65536 … 1073741824 bytes",
        );
        refused("FERRY_TCP_BUF", "4096", "out of range");
        refused("FERRY_SHM_RING", "99999999999", "4096 … 67108864 bytes");
        refused("FERRY_SHM_RING", "100", "out of range");
        refused("FERRY_TCP_CHUNK", "0", "4096 … 67108864 bytes");
        refused("FERRY_RAILS", "17", "1 … 16 rails");
        refused("FERRY_RAILS", "0", "out of range");
        refused("FERRY_RAIL_TIMEOUT", "0", "1 … 3600 seconds");
        refused("FERRY_SPIN", "lots", "is not a number");
        refused("FERRY_SHM_EAGER", "-5", "is not a number");
        refused("FERRY_TRANSPORT", "udp", "expected auto, shm or tcp");
        refused("FERRY_NET", "verbs", "expected auto, ofi or tcp");
    }

    #[test]
    fn auto_takes_user_level_nics_ofi_any_provider_between_hosts_tcp_none() {
        for (provider, auto, ofi) in [
            ("verbs;ofi_rxm", true, true),
            ("efa", true, true),
            ("cxi", true, true),
            ("tcp;ofi_rxm", false, true),
            ("udp;ofi_rxd", false, true),
            ("shm", false, false),
        ] {
            assert_eq!(NetKind::Auto.admits(provider), auto, "auto, {provider}");
            assert_eq!(NetKind::Ofi.admits(provider), ofi, "ofi, {provider}");
            assert!(!NetKind::Tcp.admits(provider), "tcp, {provider}");
        }
    }

    #[test]
    fn values_in_range_are_taken_as_given() {
        let c = from_pairs(&[
            ("FERRY_TCP_BUF", "0"),
            ("FERRY_TCP_CHUNK", "4096"),
            ("FERRY_SHM_RING", " 65536 "),
            ("FERRY_RAILS", "16"),
            ("FERRY_SPIN", ""),
        ])
        .unwrap();
        assert_eq!(c.tcp_buffer, 0);
        assert_eq!(c.tcp_chunk, 4096, "no longer raised quietly");
        assert_eq!(c.shm_ring_bytes, Some(65536));
        assert_eq!(c.rails, 16);
        assert_eq!(c.spin, None, "blank is unset");
    }

    #[test]
    fn the_host_cores_come_from_the_launcher_then_from_slurm() {
        let cores = |pairs: &[(&str, &str)]| from_pairs(pairs).unwrap().host_cores;
        assert_eq!(cores(&[]), None, "left to the process's own affinity");
        assert_eq!(cores(&[("FERRY_HOST_CORES", "4")]), Some(4));
        assert_eq!(cores(&[("SLURM_CPUS_ON_NODE", "8")]), Some(8));
        assert_eq!(
            cores(&[("FERRY_HOST_CORES", "2"), ("SLURM_CPUS_ON_NODE", "8")]),
            Some(2)
        );
        // Slurm's odd values are not ours to refuse: they are ignored.
        assert_eq!(cores(&[("SLURM_CPUS_ON_NODE", "0")]), None);
        assert_eq!(cores(&[("SLURM_CPUS_ON_NODE", "2(x3)")]), None);
        refused("FERRY_HOST_CORES", "0", "out of range");
    }

    #[test]
    fn a_connect_timeout_of_zero_means_no_limit() {
        let c = from_pairs(&[("FERRY_CONNECT_TIMEOUT", "0")]).unwrap();
        assert!(c.connect_timeout() > std::time::Duration::from_secs(10 * 365 * 86_400));
        // A deadline from it is still a plain sum.
        let _ = std::time::Instant::now() + c.connect_timeout();
        let c = from_pairs(&[("FERRY_CONNECT_TIMEOUT", "5")]).unwrap();
        assert_eq!(c.connect_timeout(), std::time::Duration::from_secs(5));
        refused("FERRY_CONNECT_TIMEOUT", "86401", "0 (no limit");
    }

    #[test]
    fn too_many_rail_addresses_are_refused() {
        let addrs = vec!["10.0.0.1"; 17].join(",");
        let e = from_pairs(&[("FERRY_RAIL_ADDRS", &addrs)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("FERRY_RAIL_ADDRS lists 17 addresses"), "{e}");
    }

    #[test]
    fn ring_size_is_a_clamped_power_of_two() {
        let c = Config::default();
        assert_eq!(c.ring_bytes(2), 1 << 20);
        assert_eq!(c.ring_bytes(64), 256 << 10);
        assert_eq!(c.ring_bytes(1000), 64 << 10);
        let c = Config {
            shm_ring_bytes: Some(100_000),
            ..Config::default()
        };
        assert_eq!(c.ring_bytes(2), 65536);
    }
}
