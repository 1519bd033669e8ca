//! The grid file and the seed's process info files.
//!
//! A grid file is TOML: one `[[cluster]]` table per cluster, each with its `[[cluster.host]]`
//! tables, in rank order (ranks are numbered cluster by cluster, host by host):
//!
//! ```toml
//! [[cluster]]
//! name = "a"
//! kind = "private"            # or "public"
//! front = "a-front"           # private only: the front node's name ...
//! public_addr = "198.18.0.10" # ... its public (WAN) address ...
//! front_addr = "10.1.0.1"     # ... and its address inside (default: .1 of the first host's /24)
//! front_ssh = "me@front.a.org" # optional: how ssh reaches the front node (default: its name)
//! relay_port = 7390           # where `ferry relay` listens on the front node (default 7390)
//! front_rate = "100mbit"      # optional, private only: `tc` rate of each front node's own
//!                             # link to the WAN, both ways (testbed; default: `wan_rate`)
//! [[cluster.relay]]           # optional, private only: one more front node with its own relay
//! name = "a-front2"           # (its own public address and NAT); connections through the
//! public_addr = "198.18.0.11" # cluster's relays spread over all of them (docs/grid.md)
//! front_addr = "10.1.0.2"     # required here: its address inside
//! ssh = "me@front2.a.org"     # optional
//! rate = "50mbit"             # optional: this front node's link to the WAN (default: front_rate)
//! rate = "1gbit"              # optional: `tc` rate of each host's link (testbed)
//! wan_delay = "5ms"           # optional: one-way delay of the cluster's links to the WAN (testbed)
//! nat = "port-preserving"     # private only, testbed: the front's NAT keeps source ports (the
//!                             # default; hole punching works) or "random" (symmetric NAT)
//! [[cluster.link]]            # optional: an extra network joining the cluster's hosts (a rail)
//! subnet = "10.201.0.0/24"    # its addresses; no other address of the grid may lie in it
//! rate = "500mbit"            # optional: `tc` rate of each host's link to it (testbed)
//! [[cluster.host]]
//! name = "a1"
//! addr = "10.1.0.11"          # private clusters: a private address; public: a public one
//! ranks = 2                   # default 1
//! rails = ["10.201.0.11"]     # one address per [[cluster.link]], in their order
//! ssh = "a1.internal"         # optional: how ssh reaches the host (default: its name); hosts
//!                             # of a private cluster are reached through the front node
//! ```
//!
//! A top-level `wan_rate = "…"` limits each link to the WAN bridge in the testbed, and a
//! top-level `wan_delay = "…"` delays every link to it that has no `wan_delay` of its cluster's
//! own: a packet between two clusters takes the delay of each side's link, so clusters with 5 ms
//! and 10 ms are 15 ms apart one way. A delay is `us`, `ms` or `s` (`"500us"`, `"10ms"`, at most
//! 10 s). Unknown keys are errors. Every error names the file, the line and the field.
//!
//! **Rails.** A host's rail 0 is its `addr`; rail `i` (1, 2, …) is its address on the cluster's
//! `i`-th `[[cluster.link]]`. Every host of a cluster with links lists exactly one address per
//! link, inside that link's subnet. A link joins the hosts of its own cluster only: its
//! addresses are not reachable from other clusters. The launcher hands a rank its host's rails
//! in [`RAIL_ADDRS_ENV`] (see [`encode_rail_addrs`]).

use crate::path::Guid;
use serde::Deserialize;
use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::time::Duration;
use thiserror::Error;
use toml::Spanned;

/// Port `ferry relay` listens on when the grid file does not say.
pub const DEFAULT_RELAY_PORT: u16 = 7390;

/// Environment variable with the addresses of a rank's host, rail 0 (the host's `addr`) first,
/// comma-separated: `FERRY_RAIL_ADDRS=198.18.1.1,10.201.0.1`. Set by the launcher for ranks on
/// hosts with rails; rail `i` of a rank dials from its address `i` to the peer's address `i`.
pub const RAIL_ADDRS_ENV: &str = "FERRY_RAIL_ADDRS";

/// The [`RAIL_ADDRS_ENV`] value of `addrs` (rail 0 first).
pub fn encode_rail_addrs(addrs: &[Ipv4Addr]) -> String {
    addrs
        .iter()
        .map(Ipv4Addr::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses a [`RAIL_ADDRS_ENV`] value; the error names the entry that is wrong.
pub fn parse_rail_addrs(text: &str) -> Result<Vec<Ipv4Addr>, String> {
    let mut addrs = Vec::new();
    for (i, part) in text.split(',').enumerate() {
        let addr: Ipv4Addr = part
            .trim()
            .parse()
            .map_err(|_| format!("rail {i}: {part:?} is not an IPv4 address"))?;
        if addrs.contains(&addr) {
            return Err(format!("rail {i}: {addr} is listed twice"));
        }
        addrs.push(addr);
    }
    Ok(addrs)
}

/// Why a grid or process info file was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TopologyError {
    /// The file could not be read.
    #[error("{file}: {message}")]
    Read {
        /// File name.
        file: String,
        /// What the operating system said.
        message: String,
    },
    /// The file is not valid, or a field holds a value that cannot be used.
    #[error("{file}:{line}: {field}: {message}")]
    Invalid {
        /// File name.
        file: String,
        /// Line number (1-based).
        line: usize,
        /// The field, as a dotted path where known (`cluster[1].host[0].addr`).
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// Whether a cluster's hosts can be reached from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Hosts have private addresses behind a front node with NAT and a relay.
    Private,
    /// Hosts have public addresses.
    Public,
}

/// How a private cluster's front node maps its hosts' outgoing connections (testbed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Nat {
    /// MASQUERADE keeps a connection's source port where it can: one local port looks the
    /// same to every destination, so TCP hole punching works.
    #[default]
    PortPreserving,
    /// MASQUERADE `--random-fully`: every connection gets a random port (a symmetric NAT,
    /// through which hole punching fails).
    Random,
}

/// One host of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Host name (unique in the grid).
    pub name: String,
    /// Address (private inside a private cluster).
    pub addr: Ipv4Addr,
    /// Ranks started on this host.
    pub ranks: u32,
    /// Its address on each of the cluster's [`Cluster::links`], in their order (rails 1, 2, …);
    /// empty when the cluster has none.
    pub rails: Vec<Ipv4Addr>,
    /// Its ssh destination (`[user@]host`), when that is not its name.
    pub ssh: Option<String>,
}

impl Host {
    /// Every rail address of the host: `addr` (rail 0), then `rails`.
    pub fn rail_addrs(&self) -> Vec<Ipv4Addr> {
        let mut v = Vec::with_capacity(1 + self.rails.len());
        v.push(self.addr);
        v.extend_from_slice(&self.rails);
        v
    }
}

/// An IPv4 subnet, `net/len`, with no host bits set in `net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    /// The network address.
    pub net: Ipv4Addr,
    /// Prefix length (8 … 30).
    pub len: u8,
}

impl Subnet {
    fn mask(self) -> u32 {
        u32::MAX << (32 - u32::from(self.len))
    }

    /// Whether `addr` is in the subnet.
    pub fn contains(self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & self.mask() == u32::from(self.net)
    }

    /// Whether the two subnets share an address.
    pub fn overlaps(self, other: Subnet) -> bool {
        self.contains(other.net) || other.contains(self.net)
    }

    /// Whether `addr` is the subnet's network or broadcast address.
    fn is_edge(self, addr: Ipv4Addr) -> bool {
        let a = u32::from(addr);
        a == u32::from(self.net) || a == u32::from(self.net) | !self.mask()
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

/// An extra network joining all hosts of one cluster: one more rail between any two of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Its addresses.
    pub subnet: Subnet,
    /// Optional `tc` rate of each host's link to it, as `tc` spells it (`500mbit`).
    pub rate: Option<String>,
}

/// One cluster of the grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Cluster name (unique in the grid).
    pub name: String,
    /// Private or public.
    pub kind: Kind,
    /// Private clusters: the front node's name, public (WAN) address and address inside.
    pub front: Option<Front>,
    /// Private clusters: more front nodes (`[[cluster.relay]]`), each with a relay and NAT of
    /// its own; empty for the one-relay form. [`Cluster::fronts`] lists all.
    pub more_fronts: Vec<Front>,
    /// Port of `ferry relay` on the front node.
    pub relay_port: u16,
    /// Optional `tc` rate of each host link, as `tc` spells it (`1gbit`).
    pub rate: Option<String>,
    /// Extra links (rails 1, 2, …) between its hosts; empty for one rail.
    pub links: Vec<Link>,
    /// One-way delay added to its links to the WAN in the testbed (each direction), if not
    /// the grid's.
    pub wan_delay: Option<Duration>,
    /// Hosts, in rank order.
    pub hosts: Vec<Host>,
}

/// The front node of a private cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Front {
    /// Front node name.
    pub name: String,
    /// Its public (WAN) address: where the relay is reached and where NAT leaves from.
    pub public_addr: Ipv4Addr,
    /// Its address on the cluster's private network.
    pub inside_addr: Ipv4Addr,
    /// Its ssh destination (`[user@]host`), when that is not its name.
    pub ssh: Option<String>,
    /// How its NAT maps ports (the testbed builds it so).
    pub nat: Nat,
    /// Optional `tc` rate of its own link to the WAN (testbed), as `tc` spells it: its
    /// `[[cluster.relay]]`'s `rate`, else the cluster's `front_rate`.
    pub rate: Option<String>,
}

/// A whole grid: clusters in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Clusters, in rank order.
    pub clusters: Vec<Cluster>,
    /// Optional `tc` rate of every link to the WAN bridge.
    pub wan_rate: Option<String>,
    /// One-way delay of every link to the WAN bridge whose cluster has none of its own.
    pub wan_delay: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrid {
    #[serde(default)]
    cluster: Vec<RawCluster>,
    wan_rate: Option<Spanned<String>>,
    wan_delay: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: Spanned<String>,
    kind: Spanned<Kind>,
    front: Option<Spanned<String>>,
    public_addr: Option<Spanned<String>>,
    front_addr: Option<Spanned<String>>,
    front_ssh: Option<Spanned<String>>,
    relay_port: Option<Spanned<u16>>,
    front_rate: Option<Spanned<String>>,
    rate: Option<Spanned<String>>,
    wan_delay: Option<Spanned<String>>,
    nat: Option<Spanned<Nat>>,
    #[serde(default)]
    link: Vec<RawLink>,
    #[serde(default)]
    relay: Vec<RawRelay>,
    #[serde(default)]
    host: Vec<RawHost>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelay {
    name: Spanned<String>,
    public_addr: Spanned<String>,
    front_addr: Spanned<String>,
    ssh: Option<Spanned<String>>,
    rate: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    subnet: Spanned<String>,
    rate: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    name: Spanned<String>,
    addr: Spanned<String>,
    ranks: Option<Spanned<u32>>,
    rails: Option<Spanned<Vec<Spanned<String>>>>,
    ssh: Option<Spanned<String>>,
}

/// Whether `addr` is in 10/8, 172.16/12 or 192.168/16.
pub fn is_private(addr: Ipv4Addr) -> bool {
    addr.is_private()
}

/// Builds errors that point into one file.
struct Locator<'a> {
    file: &'a str,
    text: &'a str,
}

impl Locator<'_> {
    fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn at(
        &self,
        span: Range<usize>,
        field: impl fmt::Display,
        message: impl fmt::Display,
    ) -> TopologyError {
        TopologyError::Invalid {
            file: self.file.to_string(),
            line: self.line_of(span.start),
            field: field.to_string(),
            message: message.to_string(),
        }
    }

    /// Turns a toml error into one that names the line and, where the line is `key = …`, the key.
    fn toml(&self, error: &toml::de::Error) -> TopologyError {
        let start = error.span().map_or(0, |s| s.start);
        let line = self.line_of(start);
        let line_text = self.text.lines().nth(line - 1).unwrap_or("");
        let field = line_text
            .split_once('=')
            .map(|(k, _)| k.trim())
            .filter(|k| {
                !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
            .or_else(|| {
                let t = line_text.trim();
                t.starts_with('[').then_some(t)
            })
            .unwrap_or("(document)");
        TopologyError::Invalid {
            file: self.file.to_string(),
            line,
            field: field.to_string(),
            message: error.message().trim().to_string(),
        }
    }
}

fn parse_addr(
    loc: &Locator<'_>,
    field: &str,
    value: &Spanned<String>,
) -> Result<Ipv4Addr, TopologyError> {
    value.get_ref().parse().map_err(|_| {
        loc.at(
            value.span(),
            field,
            format!("{:?} is not an IPv4 address", value.get_ref()),
        )
    })
}

fn parse_subnet(
    loc: &Locator<'_>,
    field: &str,
    value: &Spanned<String>,
) -> Result<Subnet, TopologyError> {
    let text = value.get_ref();
    let err = |m: String| loc.at(value.span(), field, m);
    let (net, len) = text
        .split_once('/')
        .and_then(|(a, l)| Some((a.parse::<Ipv4Addr>().ok()?, l.parse::<u8>().ok()?)))
        .ok_or_else(|| err(format!("{text:?} is not a subnet like \"10.201.0.0/24\"")))?;
    if !(8..=30).contains(&len) {
        return Err(err(format!(
            "prefix length {len} is outside 8 … 30 (a link needs room for its hosts)"
        )));
    }
    let subnet = Subnet { net, len };
    let masked = Ipv4Addr::from(u32::from(net) & subnet.mask());
    if masked != net {
        return Err(err(format!(
            "{text} has host bits set; the subnet is {masked}/{len}"
        )));
    }
    Ok(subnet)
}

/// A host's `rails`: one address per link of its cluster, inside the link's subnet, each new.
fn check_rails(
    loc: &Locator<'_>,
    field: &str,
    host: &RawHost,
    links: &[Link],
    addrs: &mut HashSet<Ipv4Addr>,
) -> Result<Vec<Ipv4Addr>, TopologyError> {
    let given = host
        .rails
        .as_ref()
        .map_or(&[][..], |r| r.get_ref().as_slice());
    if given.len() != links.len() {
        let span = host.rails.as_ref().map_or(host.name.span(), |r| r.span());
        return Err(loc.at(
            span,
            field,
            format!(
                "host {:?} lists {} rail address(es) but its cluster has {} [[cluster.link]]",
                host.name.get_ref(),
                given.len(),
                links.len()
            ),
        ));
    }
    let mut rails = Vec::with_capacity(given.len());
    for (i, (value, link)) in given.iter().zip(links).enumerate() {
        let f = format!("{field}[{i}]");
        let addr = parse_addr(loc, &f, value)?;
        let subnet = link.subnet;
        if !subnet.contains(addr) || subnet.is_edge(addr) {
            let why = if subnet.contains(addr) {
                "is the network or broadcast address of"
            } else {
                "is outside"
            };
            return Err(loc.at(
                value.span(),
                f,
                format!("{addr} {why} link {} ({subnet})", i + 1),
            ));
        }
        if !addrs.insert(addr) {
            return Err(loc.at(value.span(), f, format!("{addr} is used twice")));
        }
        rails.push(addr);
    }
    Ok(rails)
}

fn check_name(
    loc: &Locator<'_>,
    field: &str,
    value: &Spanned<String>,
    seen: &mut HashSet<String>,
) -> Result<String, TopologyError> {
    let name = value.get_ref();
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(loc.at(
            value.span(),
            field,
            format!("{name:?} is not a name (1-32 of A-Z a-z 0-9 - _)"),
        ));
    }
    if !seen.insert(name.clone()) {
        return Err(loc.at(value.span(), field, format!("{name:?} is used twice")));
    }
    Ok(name.clone())
}

fn check_rate(
    loc: &Locator<'_>,
    field: &str,
    value: &Option<Spanned<String>>,
) -> Result<Option<String>, TopologyError> {
    let Some(value) = value else { return Ok(None) };
    let text = value.get_ref();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let units = ["bit", "kbit", "mbit", "gbit", "bps", "kbps", "mbps", "gbps"];
    if digits.parse::<u64>().map_or(true, |n| n == 0) || !units.contains(&unit) {
        return Err(loc.at(
            value.span(),
            field,
            format!("{text:?} is not a rate like \"100mbit\" or \"1gbit\""),
        ));
    }
    Ok(Some(text.clone()))
}

/// The longest testbed delay: more is a typo, not a WAN.
const MAX_WAN_DELAY: Duration = Duration::from_secs(10);

/// A delay like `"500us"`, `"10ms"` or `"1s"`, at most [`MAX_WAN_DELAY`].
fn check_delay(
    loc: &Locator<'_>,
    field: &str,
    value: &Option<Spanned<String>>,
) -> Result<Option<Duration>, TopologyError> {
    let Some(value) = value else { return Ok(None) };
    let text = value.get_ref();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let delay = match (digits.parse::<u64>(), &text[digits.len()..]) {
        (Ok(n), "us") => Some(Duration::from_micros(n)),
        (Ok(n), "ms") => Some(Duration::from_millis(n)),
        (Ok(n), "s") => Some(Duration::from_secs(n)),
        _ => None,
    };
    match delay {
        Some(d) if d <= MAX_WAN_DELAY => Ok(Some(d)),
        _ => Err(loc.at(
            value.span(),
            field,
            format!("{text:?} is not a delay like \"500us\" or \"10ms\" (at most 10s)"),
        )),
    }
}

/// An ssh destination: `[user@]host`, no white space, not starting with `-` (it goes on a
/// command line, where it must not read as an option).
fn check_ssh(
    loc: &Locator<'_>,
    field: &str,
    value: &Option<Spanned<String>>,
) -> Result<Option<String>, TopologyError> {
    let Some(value) = value else { return Ok(None) };
    let text = value.get_ref();
    if text.is_empty()
        || text.starts_with('-')
        || text.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(loc.at(
            value.span(),
            field,
            format!("{text:?} is not an ssh destination like \"user@host\""),
        ));
    }
    Ok(Some(text.clone()))
}

/// One `[[cluster.relay]]`: a further front node of a private cluster, every address its own;
/// it does NAT as the cluster's `nat` says.
fn check_relay(
    loc: &Locator<'_>,
    field: &str,
    raw: &RawRelay,
    (names, addrs): (&mut HashSet<String>, &mut HashSet<Ipv4Addr>),
    (nat, front_rate): (Nat, &Option<String>),
) -> Result<Front, TopologyError> {
    let f = |n: &str| format!("{field}.{n}");
    let name = check_name(loc, &f("name"), &raw.name, names)?;
    let public_addr = parse_addr(loc, &f("public_addr"), &raw.public_addr)?;
    if is_private(public_addr) || !addrs.insert(public_addr) {
        return Err(loc.at(
            raw.public_addr.span(),
            f("public_addr"),
            format!("{public_addr} is not a public address of its own"),
        ));
    }
    let inside_addr = parse_addr(loc, &f("front_addr"), &raw.front_addr)?;
    if !is_private(inside_addr) || !addrs.insert(inside_addr) {
        return Err(loc.at(
            raw.front_addr.span(),
            f("front_addr"),
            format!("{inside_addr} is not a private address of its own"),
        ));
    }
    Ok(Front {
        name,
        public_addr,
        inside_addr,
        ssh: check_ssh(loc, &f("ssh"), &raw.ssh)?,
        nat,
        rate: check_rate(loc, &f("rate"), &raw.rate)?.or_else(|| front_rate.clone()),
    })
}

impl Cluster {
    /// Every front node of a private cluster, `front` first, then the `[[cluster.relay]]`
    /// ones in file order; none for a public cluster. Each runs a relay.
    pub fn fronts(&self) -> impl Iterator<Item = &Front> {
        self.front.iter().chain(&self.more_fronts)
    }
}

/// The most ranks a grid holds: the most a job has (a handshake's process numbers).
pub const MAX_GRID_RANKS: u32 = 1 << 16;

/// The largest grid file read: 16 MiB (as `ferry_wire::bounded::MAX_CONFIG_FILE`, which this
/// crate may not depend on); a path such as `/dev/zero` ends in an error, not in all memory.
pub const MAX_GRID_FILE: u64 = 16 << 20;

/// The text of `path`, at most [`MAX_GRID_FILE`] bytes of UTF-8.
fn read_capped(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_GRID_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_GRID_FILE {
        return Err(format!(
            "larger than {MAX_GRID_FILE} bytes (the most ferry reads of a grid file; is it the right file?)"
        ));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// What the clusters checked so far have taken of the grid file, that those after them may not
/// take again or that is checked once every cluster is known.
#[derive(Default)]
struct Taken {
    /// Names of clusters, hosts and front nodes: one namespace.
    names: HashSet<String>,
    /// Every host, front node and rail address.
    addrs: HashSet<Ipv4Addr>,
    /// Every link's subnet, where it is written and its field, for the overlap checks.
    links: Vec<(Subnet, Range<usize>, String)>,
    /// Ranks of the hosts so far: the world size, kept within MAX_GRID_RANKS as it grows.
    ranks: u32,
}

/// One `[[cluster]]`: its name, links, hosts and front nodes, in that order of checks.
fn check_cluster(
    loc: &Locator<'_>,
    ci: usize,
    rc: &RawCluster,
    taken: &mut Taken,
) -> Result<Cluster, TopologyError> {
    let f = |name: &str| format!("cluster[{ci}].{name}");
    let name = check_name(loc, &f("name"), &rc.name, &mut taken.names)?;
    let kind = *rc.kind.get_ref();
    if rc.host.is_empty() {
        return Err(loc.at(
            rc.name.span(),
            f("host"),
            format!("cluster {name:?} has no [[cluster.host]]"),
        ));
    }
    let links = check_links(loc, ci, rc, taken)?;
    let mut hosts = Vec::with_capacity(rc.host.len());
    for (hi, rh) in rc.host.iter().enumerate() {
        let cluster = (name.as_str(), kind, links.as_slice());
        hosts.push(check_host(loc, (ci, hi), rh, cluster, taken)?);
    }
    let front_rate = check_rate(loc, &f("front_rate"), &rc.front_rate)?;
    let nat = rc.nat.as_ref().map(|n| *n.get_ref()).unwrap_or_default();
    let front = match kind {
        Kind::Public => {
            check_public_has_no_front(loc, ci, rc)?;
            None
        }
        Kind::Private => {
            let cluster = (name.as_str(), hosts.as_slice());
            Some(check_front(loc, ci, rc, cluster, &front_rate, taken)?)
        }
    };
    let mut more_fronts = Vec::with_capacity(rc.relay.len());
    for (ri, rr) in rc.relay.iter().enumerate() {
        more_fronts.push(check_relay(
            loc,
            &format!("cluster[{ci}].relay[{ri}]"),
            rr,
            (&mut taken.names, &mut taken.addrs),
            (nat, &front_rate),
        )?);
    }
    let relay_port = match &rc.relay_port {
        Some(p) if *p.get_ref() == 0 => {
            return Err(loc.at(
                p.span(),
                f("relay_port"),
                "port 0 cannot be listened on by a fixed relay",
            ))
        }
        Some(p) => *p.get_ref(),
        None => DEFAULT_RELAY_PORT,
    };
    let rate = check_rate(loc, &f("rate"), &rc.rate)?;
    let wan_delay = check_delay(loc, &f("wan_delay"), &rc.wan_delay)?;
    Ok(Cluster {
        name,
        kind,
        front,
        more_fronts,
        relay_port,
        rate,
        links,
        wan_delay,
        hosts,
    })
}

/// A cluster's `[[cluster.link]]`s: each subnet well formed and apart from every link before it.
fn check_links(
    loc: &Locator<'_>,
    ci: usize,
    rc: &RawCluster,
    taken: &mut Taken,
) -> Result<Vec<Link>, TopologyError> {
    let mut links = Vec::with_capacity(rc.link.len());
    for (li, rl) in rc.link.iter().enumerate() {
        let lf = |n: &str| format!("cluster[{ci}].link[{li}].{n}");
        let subnet = parse_subnet(loc, &lf("subnet"), &rl.subnet)?;
        if let Some((other, _, field)) = taken.links.iter().find(|(o, _, _)| o.overlaps(subnet)) {
            return Err(loc.at(
                rl.subnet.span(),
                lf("subnet"),
                format!("{subnet} overlaps {other} of {field}"),
            ));
        }
        taken.links.push((subnet, rl.subnet.span(), lf("subnet")));
        links.push(Link {
            subnet,
            rate: check_rate(loc, &lf("rate"), &rl.rate)?,
        });
    }
    Ok(links)
}

/// Host `hi` of cluster `ci` (given as its name, kind and links): a name and an address of its
/// own, of the cluster's kind, at least one rank within the grid's most, its rails.
fn check_host(
    loc: &Locator<'_>,
    (ci, hi): (usize, usize),
    rh: &RawHost,
    (cluster, kind, links): (&str, Kind, &[Link]),
    taken: &mut Taken,
) -> Result<Host, TopologyError> {
    let hf = |n: &str| format!("cluster[{ci}].host[{hi}].{n}");
    let host_name = check_name(loc, &hf("name"), &rh.name, &mut taken.names)?;
    let addr = parse_addr(loc, &hf("addr"), &rh.addr)?;
    if is_private(addr) != (kind == Kind::Private) {
        let want = if kind == Kind::Private {
            "a private"
        } else {
            "a public"
        };
        return Err(loc.at(
            rh.addr.span(),
            hf("addr"),
            format!("{addr} is not {want} address (cluster {cluster:?} is {kind:?})"),
        ));
    }
    if !taken.addrs.insert(addr) {
        return Err(loc.at(rh.addr.span(), hf("addr"), format!("{addr} is used twice")));
    }
    let ranks = rh.ranks.as_ref().map_or(1, |r| *r.get_ref());
    let span = || rh.ranks.as_ref().map_or(rh.name.span(), |r| r.span());
    if ranks == 0 {
        return Err(loc.at(span(), hf("ranks"), "a host needs at least one rank"));
    }
    taken.ranks = match taken.ranks.checked_add(ranks) {
        Some(n) if n <= MAX_GRID_RANKS => n,
        _ => {
            return Err(loc.at(
                span(),
                hf("ranks"),
                format!("the grid would hold more than {MAX_GRID_RANKS} ranks, the most a job has"),
            ))
        }
    };
    let rails = check_rails(loc, &hf("rails"), rh, links, &mut taken.addrs)?;
    Ok(Host {
        name: host_name,
        addr,
        ranks,
        rails,
        ssh: check_ssh(loc, &hf("ssh"), &rh.ssh)?,
    })
}

/// A public cluster's hosts are their own fronts: it names no front node, NAT or relay.
fn check_public_has_no_front(
    loc: &Locator<'_>,
    ci: usize,
    rc: &RawCluster,
) -> Result<(), TopologyError> {
    let f = |name: &str| format!("cluster[{ci}].{name}");
    for (field, value) in [
        ("front", &rc.front),
        ("public_addr", &rc.public_addr),
        ("front_addr", &rc.front_addr),
        ("front_ssh", &rc.front_ssh),
        ("front_rate", &rc.front_rate),
    ] {
        if let Some(v) = value {
            return Err(loc.at(
                v.span(),
                f(field),
                "a public cluster has no front node (its hosts are their own fronts)",
            ));
        }
    }
    if let Some(v) = &rc.nat {
        return Err(loc.at(
            v.span(),
            f("nat"),
            "a public cluster has no NAT (its hosts are their own fronts)",
        ));
    }
    if let Some(r) = rc.relay.first() {
        return Err(loc.at(
            r.name.span(),
            f("relay"),
            "a public cluster has no relays (its hosts are reached directly)",
        ));
    }
    Ok(())
}

/// The front node of private cluster `ci` (given as its name and its checked hosts): a name of
/// its own, a public address and an address inside, by default .1 of the first host's /24.
fn check_front(
    loc: &Locator<'_>,
    ci: usize,
    rc: &RawCluster,
    (name, hosts): (&str, &[Host]),
    front_rate: &Option<String>,
    taken: &mut Taken,
) -> Result<Front, TopologyError> {
    let f = |field: &str| format!("cluster[{ci}].{field}");
    let missing = |field: &str| {
        loc.at(
            rc.name.span(),
            f(field),
            format!("private cluster {name:?} needs `{field}`"),
        )
    };
    let front_name = rc.front.as_ref().ok_or_else(|| missing("front"))?;
    let front_name = check_name(loc, &f("front"), front_name, &mut taken.names)?;
    let public = rc
        .public_addr
        .as_ref()
        .ok_or_else(|| missing("public_addr"))?;
    let public_addr = parse_addr(loc, &f("public_addr"), public)?;
    if is_private(public_addr) {
        return Err(loc.at(
            public.span(),
            f("public_addr"),
            format!("{public_addr} is a private address"),
        ));
    }
    if !taken.addrs.insert(public_addr) {
        return Err(loc.at(
            public.span(),
            f("public_addr"),
            format!("{public_addr} is used twice"),
        ));
    }
    let inside_addr = match &rc.front_addr {
        Some(v) => {
            let a = parse_addr(loc, &f("front_addr"), v)?;
            if !is_private(a) || !taken.addrs.insert(a) {
                return Err(loc.at(
                    v.span(),
                    f("front_addr"),
                    format!("{a} is not a private address of its own"),
                ));
            }
            a
        }
        None => {
            let o = hosts[0].addr.octets();
            let a = Ipv4Addr::new(o[0], o[1], o[2], 1);
            if !taken.addrs.insert(a) {
                return Err(loc.at(
                    rc.name.span(),
                    f("front_addr"),
                    format!("default front address {a} is taken by a host; set front_addr"),
                ));
            }
            a
        }
    };
    Ok(Front {
        name: front_name,
        public_addr,
        inside_addr,
        ssh: check_ssh(loc, &f("front_ssh"), &rc.front_ssh)?,
        nat: rc.nat.as_ref().map(|n| *n.get_ref()).unwrap_or_default(),
        rate: front_rate.clone(),
    })
}

/// A link's subnet belongs to the link: no host or front address may lie in it.
fn check_links_hold_no_other_address(
    loc: &Locator<'_>,
    links: &[(Subnet, Range<usize>, String)],
    clusters: &[Cluster],
) -> Result<(), TopologyError> {
    for (subnet, span, field) in links {
        let mut others = clusters.iter().flat_map(|c| {
            c.hosts
                .iter()
                .map(|h| h.addr)
                .chain(c.fronts().flat_map(|f| [f.public_addr, f.inside_addr]))
        });
        if let Some(a) = others.find(|a| subnet.contains(*a)) {
            return Err(loc.at(
                span.clone(),
                field,
                format!(
                    "{subnet} holds {a}, an address off the link; a link needs a subnet of its own"
                ),
            ));
        }
    }
    Ok(())
}

impl Topology {
    /// The one-way delay of cluster `cluster`'s links to the WAN: its own, else the grid's.
    pub fn wan_delay_of(&self, cluster: usize) -> Option<Duration> {
        self.clusters.get(cluster)?.wan_delay.or(self.wan_delay)
    }

    /// Reads and checks a grid file.
    pub fn load(path: &std::path::Path) -> Result<Topology, TopologyError> {
        let file = path.display().to_string();
        let text = read_capped(path).map_err(|message| TopologyError::Read {
            file: file.clone(),
            message,
        })?;
        Topology::parse(&file, &text)
    }

    /// Parses and checks grid file text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Topology, TopologyError> {
        let loc = Locator { file, text };
        let raw: RawGrid = toml::from_str(text).map_err(|e| loc.toml(&e))?;
        if raw.cluster.is_empty() {
            return Err(loc.at(0..0, "cluster", "the grid has no [[cluster]]"));
        }
        let mut taken = Taken::default();
        let mut clusters = Vec::with_capacity(raw.cluster.len());
        for (ci, rc) in raw.cluster.iter().enumerate() {
            clusters.push(check_cluster(&loc, ci, rc, &mut taken)?);
        }
        check_links_hold_no_other_address(&loc, &taken.links, &clusters)?;
        let wan_rate = check_rate(&loc, "wan_rate", &raw.wan_rate)?;
        let wan_delay = check_delay(&loc, "wan_delay", &raw.wan_delay)?;
        Ok(Topology {
            clusters,
            wan_rate,
            wan_delay,
        })
    }

    /// Number of ranks in the grid.
    pub fn world_size(&self) -> u32 {
        self.clusters
            .iter()
            .flat_map(|c| &c.hosts)
            .map(|h| h.ranks)
            .sum()
    }

    /// For every rank (in order): its cluster index and host.
    pub fn rank_hosts(&self) -> Vec<(usize, &Host)> {
        let mut out = Vec::new();
        for (ci, c) in self.clusters.iter().enumerate() {
            for h in &c.hosts {
                for _ in 0..h.ranks {
                    out.push((ci, h));
                }
            }
        }
        out
    }

    /// The process id of every rank, with pid 0 (pids are known after launch).
    pub fn rank_guids(&self) -> Vec<Guid> {
        self.rank_hosts()
            .into_iter()
            .map(|(ci, h)| {
                let c = &self.clusters[ci];
                Guid {
                    cluster: c.name.clone(),
                    front: c
                        .front
                        .as_ref()
                        .map_or_else(|| h.name.clone(), |f| f.name.clone()),
                    host: h.name.clone(),
                    pid: 0,
                }
            })
            .collect()
    }

    /// The cluster a host (or front node) belongs to.
    pub fn cluster_of(&self, host: &str) -> Option<&Cluster> {
        self.clusters
            .iter()
            .find(|c| c.hosts.iter().any(|h| h.name == host) || c.fronts().any(|f| f.name == host))
    }
}

/// One process's entry of the seed's process info file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Rank within its subjob (cluster).
    pub rank_in_subjob: u32,
    /// Ranks in its subjob.
    pub subjob_size: u32,
    /// Ranks in the whole job.
    pub world_size: u32,
    /// Number of subjobs.
    pub subjob_count: u32,
    /// Port the process listens on.
    pub listen_port: u16,
    /// Host the process runs on.
    pub host: String,
    /// Front node of its cluster (equal to `host` in a public cluster).
    pub front_host: String,
    /// Index of its subjob when the file says; otherwise subjobs are numbered by first
    /// appearance of their front host.
    pub subjob: Option<u32>,
    /// Process id when the file says.
    pub pid: Option<u32>,
}

const INFO_FIELDS: [&str; 7] = [
    "rank_in_subjob",
    "subjob_size",
    "world_size",
    "subjob_count",
    "listen_port",
    "host",
    "front_host",
];

impl ProcessInfo {
    /// Parses one process info file. Two spellings are accepted: the seed's one line of seven
    /// words in the order of [`ProcessInfo`]'s fields (`rank_in_subjob subjob_size world_size
    /// subjob_count listen_port host front_host`), or one `key = value` (or `key value`) per
    /// line with those keys and optional `subjob` and `pid`. `#` starts a comment.
    pub fn parse(file: &str, text: &str) -> Result<ProcessInfo, TopologyError> {
        let err = |line: usize, field: &str, message: String| TopologyError::Invalid {
            file: file.to_string(),
            line,
            field: field.to_string(),
            message,
        };
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.split('#').next().unwrap_or("").trim()))
            .filter(|(_, l)| !l.is_empty())
            .collect();
        let mut values: Vec<(usize, String, String)> = Vec::new();
        if let [(line, only)] = lines.as_slice() {
            let words: Vec<&str> = only.split_whitespace().collect();
            if words.len() == INFO_FIELDS.len() && !only.contains('=') {
                for (k, v) in INFO_FIELDS.iter().zip(words) {
                    values.push((*line, k.to_string(), v.to_string()));
                }
            }
        }
        if values.is_empty() {
            for (line, l) in &lines {
                let (k, v) = l
                    .split_once('=')
                    .or_else(|| l.split_once(char::is_whitespace))
                    .ok_or_else(|| err(*line, "(line)", format!("{l:?} is not `key = value`")))?;
                let (k, v) = (k.trim(), v.trim());
                if !INFO_FIELDS.contains(&k) && k != "subjob" && k != "pid" {
                    return Err(err(*line, k, "unknown field".into()));
                }
                if values.iter().any(|(_, seen, _)| seen == k) {
                    return Err(err(*line, k, "given twice".into()));
                }
                values.push((*line, k.to_string(), v.to_string()));
            }
        }
        let last_line = lines.last().map_or(1, |(l, _)| *l);
        let find = |k: &str| values.iter().find(|(_, key, _)| key == k);
        let text_of = |k: &str| {
            find(k)
                .map(|(l, _, v)| (*l, v.clone()))
                .ok_or_else(|| err(last_line, k, "missing".into()))
        };
        fn number<T: std::str::FromStr>(
            (line, v): (usize, String),
            k: &str,
            err: &dyn Fn(usize, &str, String) -> TopologyError,
        ) -> Result<T, TopologyError> {
            v.parse()
                .map_err(|_| err(line, k, format!("{v:?} is not a number in range")))
        }
        let info = ProcessInfo {
            rank_in_subjob: number(text_of("rank_in_subjob")?, "rank_in_subjob", &err)?,
            subjob_size: number(text_of("subjob_size")?, "subjob_size", &err)?,
            world_size: number(text_of("world_size")?, "world_size", &err)?,
            subjob_count: number(text_of("subjob_count")?, "subjob_count", &err)?,
            listen_port: number(text_of("listen_port")?, "listen_port", &err)?,
            host: text_of("host")?.1,
            front_host: text_of("front_host")?.1,
            subjob: match find("subjob") {
                Some((l, _, v)) => Some(number((*l, v.clone()), "subjob", &err)?),
                None => None,
            },
            pid: match find("pid") {
                Some((l, _, v)) => Some(number((*l, v.clone()), "pid", &err)?),
                None => None,
            },
        };
        let line_of = |k: &str| find(k).map_or(last_line, |(l, _, _)| *l);
        if info.subjob_size == 0 || info.rank_in_subjob >= info.subjob_size {
            return Err(err(
                line_of("rank_in_subjob"),
                "rank_in_subjob",
                format!(
                    "{} is not below subjob_size {}",
                    info.rank_in_subjob, info.subjob_size
                ),
            ));
        }
        if info.subjob_size > info.world_size {
            return Err(err(
                line_of("subjob_size"),
                "subjob_size",
                format!(
                    "{} exceeds world_size {}",
                    info.subjob_size, info.world_size
                ),
            ));
        }
        if info.subjob_count == 0 || info.subjob_count > info.world_size {
            return Err(err(
                line_of("subjob_count"),
                "subjob_count",
                format!(
                    "{} subjobs cannot hold {} ranks",
                    info.subjob_count, info.world_size
                ),
            ));
        }
        Ok(info)
    }
}

/// One rank of an imported job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedRank {
    /// Rank in the whole job: subjobs in order, then rank in subjob.
    pub world_rank: u32,
    /// Its process id (cluster named `subjob<i>`).
    pub guid: Guid,
    /// Port it listens on.
    pub listen_port: u16,
}

/// Imports a job from the process info files of all its processes (`(file name, text)`), checks
/// that they agree, and returns its ranks in world-rank order.
pub fn import_process_info(files: &[(String, String)]) -> Result<Vec<ImportedRank>, TopologyError> {
    let mut infos = Vec::with_capacity(files.len());
    for (name, text) in files {
        infos.push((name.as_str(), ProcessInfo::parse(name, text)?));
    }
    let Some((first_file, first)) = infos.first() else {
        return Err(TopologyError::Read {
            file: "(process info)".into(),
            message: "no process info files given".into(),
        });
    };
    let whole = |file: &str, field: &str, message: String| TopologyError::Invalid {
        file: file.to_string(),
        line: 1,
        field: field.to_string(),
        message,
    };
    // Subjob index of every process: as written, or by first appearance of its front host.
    let mut fronts: Vec<String> = Vec::new();
    let mut subjob_of = Vec::with_capacity(infos.len());
    for (file, info) in &infos {
        if info.world_size != first.world_size || info.subjob_count != first.subjob_count {
            return Err(whole(
                file,
                "world_size",
                format!("disagrees with {first_file} on world_size/subjob_count"),
            ));
        }
        let s = match info.subjob {
            Some(s) => s,
            None => match fronts.iter().position(|f| *f == info.front_host) {
                Some(i) => i as u32,
                None => {
                    fronts.push(info.front_host.clone());
                    (fronts.len() - 1) as u32
                }
            },
        };
        if s >= first.subjob_count {
            return Err(whole(
                file,
                "subjob",
                format!("subjob {s} but only {} subjobs", first.subjob_count),
            ));
        }
        subjob_of.push(s);
    }
    let count = first.subjob_count as usize;
    let mut sizes = vec![None::<u32>; count];
    let mut fronts_by_subjob = vec![None::<&str>; count];
    for ((file, info), &s) in infos.iter().zip(&subjob_of) {
        let s = s as usize;
        if *sizes[s].get_or_insert(info.subjob_size) != info.subjob_size {
            return Err(whole(
                file,
                "subjob_size",
                format!("subjob {s} has two sizes"),
            ));
        }
        if *fronts_by_subjob[s].get_or_insert(&info.front_host) != info.front_host {
            return Err(whole(
                file,
                "front_host",
                format!("subjob {s} has two front hosts"),
            ));
        }
    }
    let mut base = vec![0u32; count];
    let mut total = 0u32;
    for (s, size) in sizes.iter().enumerate() {
        let size = size.ok_or_else(|| {
            whole(
                first_file,
                "subjob_count",
                format!("no process of subjob {s}"),
            )
        })?;
        base[s] = total;
        total = total.saturating_add(size);
    }
    if total != first.world_size || infos.len() != total as usize {
        return Err(whole(
            first_file,
            "world_size",
            format!(
                "world_size {} but subjobs hold {total} ranks and {} files were given",
                first.world_size,
                infos.len()
            ),
        ));
    }
    let mut ranks: Vec<Option<ImportedRank>> = vec![None; total as usize];
    for ((file, info), &s) in infos.iter().zip(&subjob_of) {
        let world_rank = base[s as usize] + info.rank_in_subjob;
        let slot = &mut ranks[world_rank as usize];
        if slot.is_some() {
            return Err(whole(
                file,
                "rank_in_subjob",
                format!("rank {} of subjob {s} appears twice", info.rank_in_subjob),
            ));
        }
        *slot = Some(ImportedRank {
            world_rank,
            guid: Guid {
                cluster: format!("subjob{s}"),
                front: info.front_host.clone(),
                host: info.host.clone(),
                pid: info.pid.unwrap_or(0),
            },
            listen_port: info.listen_port,
        });
    }
    // Every slot is filled: `total` distinct ranks from `total` files.
    Ok(ranks.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: &str = r#"
wan_rate = "1gbit"

[[cluster]]
name = "a"
kind = "private"
front = "a-front"
public_addr = "198.18.0.10"
relay_port = 7400
[[cluster.host]]
name = "a1"
addr = "10.1.0.11"
ranks = 2
[[cluster.host]]
name = "a2"
addr = "10.1.0.12"

[[cluster]]
name = "p"
kind = "public"
rate = "100mbit"
[[cluster.host]]
name = "p1"
addr = "198.18.1.1"
"#;

    #[test]
    fn parses_a_grid() {
        let g = Topology::parse("grid.toml", GRID).unwrap();
        assert_eq!(g.world_size(), 4);
        assert_eq!(g.wan_rate.as_deref(), Some("1gbit"));
        let a = &g.clusters[0];
        assert_eq!(a.relay_port, 7400);
        let front = a.front.as_ref().unwrap();
        assert_eq!(front.inside_addr, Ipv4Addr::new(10, 1, 0, 1));
        assert_eq!(front.public_addr, Ipv4Addr::new(198, 18, 0, 10));
        assert_eq!(g.clusters[1].relay_port, DEFAULT_RELAY_PORT);
        assert_eq!(g.clusters[1].rate.as_deref(), Some("100mbit"));
        let ids = g.rank_guids();
        assert_eq!(ids.len(), 4);
        assert_eq!(ids[1].host, "a1");
        assert_eq!(ids[2].host, "a2");
        assert_eq!(ids[2].front, "a-front");
        assert!(ids[3].is_public());
        assert_eq!(g.cluster_of("a-front").unwrap().name, "a");
    }

    #[test]
    fn nat_kind_of_a_private_cluster() {
        let g = Topology::parse("grid.toml", GRID).unwrap();
        assert_eq!(
            g.clusters[0].front.as_ref().unwrap().nat,
            Nat::PortPreserving
        );
        let text = GRID.replacen(
            "relay_port = 7400",
            "relay_port = 7400\nnat = \"random\"",
            1,
        );
        let g = Topology::parse("grid.toml", &text).unwrap();
        assert_eq!(g.clusters[0].front.as_ref().unwrap().nat, Nat::Random);
        let bad = GRID.replacen("relay_port = 7400", "relay_port = 7400\nnat = \"cone\"", 1);
        let (_, _, message) = error(&bad);
        assert!(message.contains("port-preserving"), "{message}");
    }

    #[test]
    fn ssh_destinations_are_kept_and_checked() {
        let text = GRID
            .replacen(
                "name = \"a1\"",
                "name = \"a1\"\nssh = \"root@a1.inside\"",
                1,
            )
            .replacen(
                "relay_port = 7400",
                "relay_port = 7400\nfront_ssh = \"gw.example.org\"",
                1,
            );
        let g = Topology::parse("grid.toml", &text).unwrap();
        assert_eq!(
            g.clusters[0].hosts[0].ssh.as_deref(),
            Some("root@a1.inside")
        );
        assert_eq!(g.clusters[0].hosts[1].ssh, None);
        let front = g.clusters[0].front.as_ref().unwrap();
        assert_eq!(front.ssh.as_deref(), Some("gw.example.org"));
        let bad = GRID.replacen(
            "name = \"a1\"",
            "name = \"a1\"\nssh = \"-oProxyCommand=x\"",
            1,
        );
        let (_, field, message) = error(&bad);
        assert!(field.ends_with(".ssh"), "{field}");
        assert!(message.contains("not an ssh destination"), "{message}");
    }

    #[test]
    fn wan_delays_come_from_the_cluster_else_the_grid() {
        let g = Topology::parse(
            "g",
            &GRID.replace("wan_rate = \"1gbit\"", "wan_delay = \"10ms\""),
        )
        .unwrap();
        assert_eq!(g.wan_delay_of(0), Some(Duration::from_millis(10)));
        let own = GRID.replace(
            "relay_port = 7400",
            "relay_port = 7400\nwan_delay = \"500us\"",
        );
        let g = Topology::parse("g", &own).unwrap();
        assert_eq!(g.wan_delay_of(0), Some(Duration::from_micros(500)));
        assert_eq!(g.wan_delay_of(1), None);
        assert_eq!(g.wan_delay_of(9), None);
        for bad in ["10", "ten ms", "5min", "11s", "-1ms", "1.5ms"] {
            let text = GRID.replace(
                "relay_port = 7400",
                &format!("relay_port = 7400\nwan_delay = {bad:?}"),
            );
            let (line, field, message) = error(&text);
            assert_eq!(
                (line, field.as_str()),
                (10, "cluster[0].wan_delay"),
                "{bad}"
            );
            assert!(message.contains("not a delay"), "{message}");
        }
    }

    fn error(text: &str) -> (usize, String, String) {
        match Topology::parse("g.toml", text) {
            Err(TopologyError::Invalid {
                line,
                field,
                message,
                file,
            }) => {
                assert_eq!(file, "g.toml");
                (line, field, message)
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn errors_name_line_and_field() {
        let bad_addr = GRID.replace("\"10.1.0.12\"", "\"10.1.0.999\"");
        let (line, field, msg) = error(&bad_addr);
        assert_eq!((line, field.as_str()), (16, "cluster[0].host[1].addr"));
        assert!(msg.contains("10.1.0.999"), "{msg}");

        let public_in_private = GRID.replace("\"10.1.0.12\"", "\"198.18.5.5\"");
        assert_eq!(error(&public_in_private).1, "cluster[0].host[1].addr");

        let typo = GRID.replace("relay_port = 7400", "relay_prot = 7400");
        let (line, field, msg) = error(&typo);
        assert_eq!((line, field.as_str()), (9, "relay_prot"), "{msg}");

        let wrong_type = GRID.replace("ranks = 2", "ranks = \"two\"");
        let (line, field, _) = error(&wrong_type);
        assert_eq!((line, field.as_str()), (13, "ranks"));

        let no_front = GRID.replace("front = \"a-front\"\n", "");
        let (line, field, _) = error(&no_front);
        assert_eq!((line, field.as_str()), (5, "cluster[0].front"));

        let dup = GRID.replace("name = \"p1\"", "name = \"a1\"");
        let (line, field, msg) = error(&dup);
        assert_eq!((line, field.as_str()), (23, "cluster[1].host[0].name"));
        assert!(msg.contains("twice"));

        let bad_rate = GRID.replace("100mbit", "fast");
        assert_eq!(error(&bad_rate).1, "cluster[1].rate");

        let zero_ranks = GRID.replace("ranks = 2", "ranks = 0");
        assert_eq!(error(&zero_ranks).0, 13);

        // Four billion ranks on one host, or hosts whose sum would wrap a u32: refused at the
        // host, before one entry per rank is made.
        let (line, _, msg) = error(&GRID.replace("ranks = 2", "ranks = 4000000000"));
        assert_eq!(line, 13, "{msg}");
        assert!(msg.contains("more than 65536 ranks"), "{msg}");
        // 65 536 here and the other hosts' ranks: refused at the host that goes past.
        let (line, _, msg) = error(&GRID.replace("ranks = 2", "ranks = 65536"));
        assert!(line > 13, "{line}: {msg}");
        assert!(msg.contains("more than 65536 ranks"), "{msg}");

        let endless = Topology::load(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(
            endless.to_string().contains("larger than 16777216 bytes"),
            "{endless}"
        );

        let kind = GRID.replace("kind = \"public\"", "kind = \"open\"");
        assert_eq!(error(&kind).1, "kind");

        let front_on_public = GRID.replace("rate = \"100mbit\"", "front = \"x\"");
        assert_eq!(error(&front_on_public).1, "cluster[1].front");

        let syntax = "[[cluster]\nname = 1";
        assert_eq!(error(syntax).0, 1);
        assert_eq!(error("").1, "cluster");
    }

    #[test]
    fn error_display_names_file_line_field() {
        let bad = GRID.replace("\"10.1.0.12\"", "\"nope\"");
        let text = Topology::parse("grids/x.toml", &bad)
            .unwrap_err()
            .to_string();
        assert!(
            text.starts_with("grids/x.toml:16: cluster[0].host[1].addr: "),
            "{text}"
        );
    }

    const RAILS: &str = r#"
[[cluster]]
name = "r"
kind = "public"
[[cluster.link]]
subnet = "10.201.0.0/24"
rate = "200mbit"
[[cluster.link]]
subnet = "10.202.0.0/24"
[[cluster.host]]
name = "r1"
addr = "198.18.2.1"
rails = ["10.201.0.1", "10.202.0.1"]
[[cluster.host]]
name = "r2"
addr = "198.18.2.2"
rails = ["10.201.0.2", "10.202.0.2"]
"#;

    #[test]
    fn several_relays_per_cluster() {
        let more = GRID.replace(
            "relay_port = 7400\n",
            "relay_port = 7400\n[[cluster.relay]]\nname = \"a-front2\"\npublic_addr = \"198.18.0.11\"\nfront_addr = \"10.1.0.2\"\n",
        );
        let g = Topology::parse("grid.toml", &more).unwrap();
        let names: Vec<&str> = g.clusters[0].fronts().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a-front", "a-front2"]);
        assert_eq!(g.cluster_of("a-front2").unwrap().name, "a");
        assert_eq!(g.clusters[1].fronts().count(), 0);
        // The one-relay form has no more fronts.
        assert!(Topology::parse("grid.toml", GRID).unwrap().clusters[0]
            .more_fronts
            .is_empty());
        let (line, field, _) = error(&more.replace("198.18.0.11", "198.18.0.10"));
        assert_eq!(
            (line, field.as_str()),
            (12, "cluster[0].relay[0].public_addr")
        );
        let (_, field, _) = error(&more.replace("\"10.1.0.2\"", "\"198.18.0.99\""));
        assert_eq!(field, "cluster[0].relay[0].front_addr");
        let (_, field, _) = error(&more.replace("\"a-front2\"", "\"a1\""));
        assert_eq!(field, "cluster[0].relay[0].name");
        let (_, field, message) = error(&more.replace("front_addr = \"10.1.0.2\"\n", ""));
        assert!(message.contains("front_addr"), "{field}: {message}");
        let public = format!(
            "{GRID}[[cluster.relay]]\nname = \"x\"\npublic_addr = \"198.18.0.50\"\nfront_addr = \"10.9.0.1\"\n"
        );
        assert_eq!(error(&public).1, "cluster[1].relay");
    }

    #[test]
    fn front_nodes_links_may_have_rates_of_their_own() {
        let three = GRID.replace(
            "relay_port = 7400\n",
            "relay_port = 7400\nfront_rate = \"100mbit\"\n\
             [[cluster.relay]]\nname = \"f2\"\npublic_addr = \"198.18.0.11\"\nfront_addr = \"10.1.0.2\"\n\
             [[cluster.relay]]\nname = \"f3\"\npublic_addr = \"198.18.0.12\"\nfront_addr = \"10.1.0.3\"\nrate = \"50mbit\"\n",
        );
        let g = Topology::parse("grid.toml", &three).unwrap();
        let rates: Vec<Option<&str>> = g.clusters[0].fronts().map(|f| f.rate.as_deref()).collect();
        assert_eq!(rates, [Some("100mbit"), Some("100mbit"), Some("50mbit")]);
        // Grids without them stay as they were.
        let plain = Topology::parse("grid.toml", GRID).unwrap();
        assert_eq!(plain.clusters[0].front.as_ref().unwrap().rate, None);
        assert_eq!(
            error(&three.replace("\"50mbit\"", "\"fast\"")).1,
            "cluster[0].relay[1].rate"
        );
        assert_eq!(
            error(&three.replace("front_rate = \"100mbit\"", "front_rate = \"1x\"")).1,
            "cluster[0].front_rate"
        );
        let public = GRID.replace("rate = \"100mbit\"", "front_rate = \"100mbit\"");
        assert_eq!(error(&public).1, "cluster[1].front_rate");
    }

    #[test]
    fn parses_rails() {
        let g = Topology::parse("rails.toml", RAILS).unwrap();
        let c = &g.clusters[0];
        assert_eq!(c.links.len(), 2);
        assert_eq!(c.links[0].subnet.to_string(), "10.201.0.0/24");
        assert_eq!(c.links[0].rate.as_deref(), Some("200mbit"));
        assert_eq!(c.links[1].rate, None);
        let r2 = &c.hosts[1];
        assert_eq!(
            r2.rail_addrs(),
            [
                Ipv4Addr::new(198, 18, 2, 2),
                Ipv4Addr::new(10, 201, 0, 2),
                Ipv4Addr::new(10, 202, 0, 2)
            ]
        );
        let value = encode_rail_addrs(&r2.rail_addrs());
        assert_eq!(value, "198.18.2.2,10.201.0.2,10.202.0.2");
        assert_eq!(parse_rail_addrs(&value).unwrap(), r2.rail_addrs());
        assert!(parse_rail_addrs("198.18.2.2,x")
            .unwrap_err()
            .contains("rail 1"));
        assert!(parse_rail_addrs("10.0.0.1,10.0.0.1")
            .unwrap_err()
            .contains("twice"));
        // Without links, hosts have no rails.
        let plain = Topology::parse("g", GRID).unwrap();
        assert!(plain.clusters.iter().all(|c| c.links.is_empty()));
        assert_eq!(plain.clusters[1].hosts[0].rail_addrs().len(), 1);
    }

    #[test]
    fn rail_errors_name_line_and_field() {
        // Subnets.
        let (line, field, msg) = error(&RAILS.replace("10.201.0.0/24", "10.201.0.0"));
        assert_eq!((line, field.as_str()), (6, "cluster[0].link[0].subnet"));
        assert!(msg.contains("not a subnet"), "{msg}");
        let (_, field, msg) = error(&RAILS.replace("10.201.0.0/24", "10.201.0.0/31"));
        assert_eq!(field, "cluster[0].link[0].subnet");
        assert!(msg.contains("prefix length 31"), "{msg}");
        let (_, _, msg) = error(&RAILS.replace("10.201.0.0/24", "10.201.0.7/24"));
        assert!(msg.contains("host bits"), "{msg}");
        let (line, field, msg) = error(&RAILS.replace("10.202.0.0/24", "10.201.0.0/16"));
        assert_eq!((line, field.as_str()), (9, "cluster[0].link[1].subnet"));
        assert!(msg.contains("overlaps 10.201.0.0/24"), "{msg}");
        let on_wan = RAILS
            .replace("10.201.0.0/24", "198.18.2.0/24")
            .replace("10.201.0.", "198.18.2.1");
        let (line, field, msg) = error(&on_wan);
        assert_eq!((line, field.as_str()), (6, "cluster[0].link[0].subnet"));
        assert!(msg.contains("holds 198.18.2.1"), "{msg}");
        let (line, field, _) = error(&RAILS.replace("200mbit", "fast"));
        assert_eq!((line, field.as_str()), (7, "cluster[0].link[0].rate"));
        let (line, field, _) = error(&RAILS.replace("rate = \"200mbit\"", "mtu = 9000"));
        assert_eq!((line, field.as_str()), (7, "mtu"));
        let unshaped = Topology::parse("g", &RAILS.replace("rate = \"200mbit\"\n", "")).unwrap();
        assert_eq!(unshaped.clusters[0].links[0].rate, None);

        // Counts.
        let (line, field, msg) = error(&RAILS.replace(
            "rails = [\"10.201.0.2\", \"10.202.0.2\"]",
            "rails = [\"10.201.0.2\"]",
        ));
        assert_eq!((line, field.as_str()), (17, "cluster[0].host[1].rails"));
        assert!(
            msg.contains("lists 1 rail address(es) but its cluster has 2"),
            "{msg}"
        );
        let (line, field, msg) =
            error(&RAILS.replace("rails = [\"10.201.0.2\", \"10.202.0.2\"]\n", ""));
        assert_eq!((line, field.as_str()), (15, "cluster[0].host[1].rails"));
        assert!(msg.contains("\"r2\" lists 0"), "{msg}");
        let extra = GRID.replace(
            "addr = \"198.18.1.1\"",
            "addr = \"198.18.1.1\"\nrails = [\"10.9.0.1\"]",
        );
        let (line, field, msg) = error(&extra);
        assert_eq!((line, field.as_str()), (25, "cluster[1].host[0].rails"));
        assert!(msg.contains("has 0"), "{msg}");

        // Addresses.
        let (line, field, msg) = error(&RAILS.replace("\"10.202.0.2\"", "\"10.202.1.2\""));
        assert_eq!((line, field.as_str()), (17, "cluster[0].host[1].rails[1]"));
        assert!(msg.contains("outside link 2 (10.202.0.0/24)"), "{msg}");
        let (_, field, msg) = error(&RAILS.replace("\"10.201.0.2\"", "\"10.201.0.255\""));
        assert_eq!(field, "cluster[0].host[1].rails[0]");
        assert!(msg.contains("broadcast"), "{msg}");
        let (_, field, msg) = error(&RAILS.replace("\"10.201.0.2\"", "\"10.201.0.1\""));
        assert_eq!(field, "cluster[0].host[1].rails[0]");
        assert!(msg.contains("10.201.0.1 is used twice"), "{msg}");
        let (_, field, msg) = error(&RAILS.replace("\"10.202.0.1\"", "\"ten\""));
        assert_eq!(field, "cluster[0].host[0].rails[1]");
        assert!(msg.contains("not an IPv4 address"), "{msg}");
        let (line, field, _) =
            error(&RAILS.replace("[\"10.201.0.1\", \"10.202.0.1\"]", "\"10.201.0.1\""));
        assert_eq!((line, field.as_str()), (13, "rails"));
    }

    #[test]
    fn link_subnets_stay_apart_across_clusters() {
        // Another cluster's host inside a link subnet, and another cluster's link overlapping.
        let two = format!(
            "{RAILS}\n[[cluster]]\nname = \"q\"\nkind = \"private\"\nfront = \"fq\"\npublic_addr = \"198.18.0.30\"\nfront_addr = \"10.9.0.1\"\n[[cluster.host]]\nname = \"q1\"\naddr = \"10.201.0.77\"\n"
        );
        let (line, field, msg) = error(&two);
        assert_eq!((line, field.as_str()), (6, "cluster[0].link[0].subnet"));
        assert!(msg.contains("10.201.0.77"), "{msg}");
        let linked = format!(
            "{RAILS}\n[[cluster]]\nname = \"q\"\nkind = \"public\"\n[[cluster.link]]\nsubnet = \"10.202.0.128/25\"\n[[cluster.host]]\nname = \"q1\"\naddr = \"198.18.3.1\"\nrails = [\"10.202.0.130\"]\n"
        );
        let (line, field, msg) = error(&linked);
        assert_eq!((line, field.as_str()), (23, "cluster[1].link[0].subnet"));
        assert!(msg.contains("cluster[0].link[1].subnet"), "{msg}");
    }

    #[test]
    fn process_info_both_spellings() {
        let a = ProcessInfo::parse("p0", "1 2 3 2 5000 a2 a-front\n").unwrap();
        assert_eq!(a.rank_in_subjob, 1);
        assert_eq!(a.listen_port, 5000);
        assert_eq!(a.front_host, "a-front");
        let b = ProcessInfo::parse(
            "p1",
            "# seed info\nrank_in_subjob = 0\nsubjob_size 1\nworld_size=3\nsubjob_count = 2\nlisten_port = 6000\nhost = p1\nfront_host = p1\npid = 77\n",
        )
        .unwrap();
        assert_eq!(b.pid, Some(77));
        assert_eq!(b.host, "p1");
    }

    #[test]
    fn process_info_errors_name_line_and_field() {
        let e = ProcessInfo::parse("f", "rank_in_subjob = 0\nsubjob_size = x\n").unwrap_err();
        assert!(
            matches!(e, TopologyError::Invalid { line: 2, ref field, .. } if field == "subjob_size"),
            "{e}"
        );
        let e = ProcessInfo::parse("f", "rank_in_subjob = 0\ncolour = red\n").unwrap_err();
        assert!(
            matches!(e, TopologyError::Invalid { line: 2, ref field, .. } if field == "colour")
        );
        let e = ProcessInfo::parse("f", "2 2 3 2 5000 a2 a-front").unwrap_err();
        assert!(matches!(e, TopologyError::Invalid { ref field, .. } if field == "rank_in_subjob"));
        let e = ProcessInfo::parse("f", "0 1 3 2 70000 a2 a-front").unwrap_err();
        assert!(matches!(e, TopologyError::Invalid { ref field, .. } if field == "listen_port"));
    }

    #[test]
    fn import_orders_ranks_by_subjob() {
        let files: Vec<(String, String)> = [
            ("p", "0 1 3 2 6000 p1 p1"),
            ("a1", "1 2 3 2 5001 a2 a-front"),
            ("a0", "0 2 3 2 5000 a1 a-front"),
        ]
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
        let ranks = import_process_info(&files).unwrap();
        let hosts: Vec<&str> = ranks.iter().map(|r| r.guid.host.as_str()).collect();
        assert_eq!(hosts, ["p1", "a1", "a2"]);
        assert_eq!(ranks[2].listen_port, 5001);
        assert!(ranks[0].guid.is_public());
        assert!(!ranks[1].guid.is_public());
        assert_eq!(ranks[1].guid.cluster, "subjob1");

        let mut dup = files.clone();
        dup[2].1 = "1 2 3 2 5000 a1 a-front".into();
        assert!(import_process_info(&dup).is_err());
        let short = files[..2].to_vec();
        assert!(import_process_info(&short).is_err());
        assert!(import_process_info(&[]).is_err());
    }
}
