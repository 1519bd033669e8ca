//! The one-machine grid testbed (docs/ARCHITECTURE.md §6): a grid file becomes network namespaces.
//!
//! For a testbed with prefix `P` (per run, e.g. `fy1234-`):
//!
//! - namespace `Psw` holds the switches: bridge `wan` (the "WAN", 198.18.0.0/15) and one bridge
//!   `cN` per private cluster. Nothing is created in the caller's own namespace, so removing the
//!   testbed's namespaces removes everything, also after a crash.
//! - every host is a namespace `P<host>` with `eth0` on its cluster's bridge (public hosts: on
//!   `wan` with their 198.18/15 address; private hosts: on `cN` with their 10.x address and a
//!   default route through their front node).
//! - every private cluster's front node is a namespace `P<front>` with `eth0` on `wan` (its
//!   public address) and `eth1` on `cN`; it forwards and MASQUERADEs the cluster's traffic out
//!   of `eth0`, and its FORWARD chain drops new connections from the WAN into the cluster, so
//!   private hosts really cannot be reached from outside (only through `ferry relay`).
//! - every `[[cluster.link]]` of a cluster (rail `N` = 1, 2, …) is one more bridge `cIrN` in
//!   `Psw` (`I`: the cluster's index) and one more veth per host of the cluster, `railN` in the
//!   host's namespace with the host's `rails[N-1]` address. Rail 0 is `eth0`. Link subnets must
//!   lie outside the WAN and the private clusters' /24s: a cut rail must not fall back to
//!   another network (hosts answer ARP for all their addresses on every interface).
//! - optional `tc tbf` rate limits: a cluster's `rate` on each of its host links (both ways),
//!   the grid's `wan_rate` on each link to `wan` (both ways), a front node's own rate (its
//!   cluster's `front_rate` or its `[[cluster.relay]]`'s `rate`) on its link to `wan` instead,
//!   a link's `rate` on each host's veth to it (both ways). So each relay of a cluster can be
//!   a bottleneck of its own, while the hosts' and other clusters' links stay as they are.
//! - [`Testbed::set_link`] takes one rail of one host down and up again (`ip link set`), for
//!   tests of a rail failing mid-transfer; `ferry testbed link` does it on a standing testbed.
//!
//! `ip`, `iptables`, `tc` and `sysctl` run as commands; a failure names the command. Needs
//! root. Only the testbed's own namespaces are touched (with `--ssh`, also its files under
//! `/run/ferry-testbed/<prefix>/` and `/etc/netns/<prefix>*`, and `/run/sshd` is made if
//! missing); nothing is contacted.
//!
//! The plan ([`Plan::new`], [`Plan::commands`]) is pure and tested without root; [`Testbed`]
//! carries it out and removes it on drop.
//!
//! **Hosts as machines, with sshd** ([`UpOptions::ssh`], `ferry testbed up --ssh`): every host
//! and front node also gets its own hostname (its grid name), IPC namespace, private `/tmp`
//! and `/dev/shm` (but for the directories there that hold this program, its working
//! directory or [`UpOptions::keep`]'s, see [`kept`]), `boot_id` and `machine-id`, and runs its own `sshd` on port 22 of its
//! addresses, so a launcher can reach it by real ssh as it would a cluster node:
//! `ip netns exec P<h1> ssh -F /run/ferry-testbed/P/ssh_config h2 hostname` prints `h2`
//! ([`Testbed::ssh_command`]; hosts of private clusters are reached through their front with
//! `ProxyJump`). [`Testbed::host_command`] runs a program on a host as a login there would.
//! Removal stops each sshd by pid and removes its state, also after a crash; see [`ssh`].
//!
//! **A Slurm cluster** ([`UpOptions::slurm`], `ferry testbed up --slurm`, implies `--ssh`):
//! `munged` and `slurmctld` on the first host of the first cluster, a `slurmd` in every host
//! of that cluster, `slurm.conf` in `/run/ferry-testbed/<prefix>/slurm/`; commands run through
//! [`Testbed::host_command`] get `SLURM_CONF`, so `salloc -N 3 ferry run …` on the head runs a
//! job under Slurm. Removal stops those daemons by pid too; see [`slurm`].
//!
//! ```no_run
//! # fn main() -> Result<(), ferry_testbed::TestbedError> {
//! let grid = ferry_grid::Topology::load("crates/testbed/grids/hosts3.toml".as_ref())
//!     .map_err(|e| ferry_testbed::TestbedError::Grid(e.to_string()))?;
//! let options = ferry_testbed::UpOptions::with_ssh();
//! let testbed = ferry_testbed::Testbed::up_with(&grid, "fy7-", &options)?;
//! let mut argv = testbed.host_command("h1")?; // on h1, as a user logged in there …
//! argv.extend(testbed.ssh_command().unwrap_or_default()); // … ssh -F …/ssh_config
//! argv.extend(["h2".into(), "hostname".into()]); // prints h2
//! print!("{}", ferry_testbed::run(&argv)?);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
// Only `delay` may: its packet sockets have no safe wrapper in rustix or socket2.
#![deny(unsafe_code)]

pub mod cli;
#[allow(unsafe_code)]
pub mod delay;
pub mod kept;
pub mod slurm;
pub mod ssh;

use ferry_grid::topology::{Kind, Subnet, Topology};
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;
use thiserror::Error;

/// Name of the switch namespace, after the prefix.
pub const SWITCH: &str = "sw";

/// Why the testbed could not be built or removed.
#[derive(Debug, Error)]
pub enum TestbedError {
    /// Not running as root.
    #[error("needs root: it creates network namespaces, bridges and iptables rules; run it as root, e.g. with sudo")]
    NotRoot,
    /// A tool is missing.
    #[error("`{tool}` is not installed (apt-get install -y {package})")]
    Missing {
        /// Command.
        tool: &'static str,
        /// Debian package.
        package: &'static str,
    },
    /// The grid cannot be built as a testbed.
    #[error("grid cannot be a testbed: {0}")]
    Grid(String),
    /// A host has no such rail in the testbed.
    #[error("host {host:?} has no rail {rail} in this testbed")]
    NoSuchLink {
        /// Host (or front node) name.
        host: String,
        /// Rail number (0: the host's own link).
        rail: usize,
    },
    /// A prefix that is not a safe name.
    #[error("prefix {0:?} must be 2-12 of a-z 0-9 ending with '-'")]
    Prefix(String),
    /// A file of the testbed could not be made or removed.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        error: String,
    },
    /// A host's sshd did not come up.
    #[error("sshd of host {host} did not start: {why}")]
    Sshd {
        /// Host (or front node) name.
        host: String,
        /// What was seen.
        why: String,
    },
    /// A Slurm daemon did not come up.
    #[error("Slurm in the testbed: {what} did not come up: {why}")]
    Slurm {
        /// The daemon, or what was waited for.
        what: String,
        /// What was seen.
        why: String,
    },
    /// The testbed was built without `--ssh`, or its sshd on that host is gone.
    #[error("host {host:?} has no running sshd in testbed {prefix} (was it built with --ssh?)")]
    NoSsh {
        /// The testbed's prefix.
        prefix: String,
        /// Host name.
        host: String,
    },
    /// A command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
}

/// One link of the plan: a veth from the switch namespace to a host or front namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    ns: String,
    dev: String,
    switch_dev: String,
    bridge: String,
    addr: Ipv4Addr,
    prefix_len: u8,
    rate: Option<String>,
    /// One-way delay each way (the grid's `wan_delay`), made by a forwarder (see [`delay`]).
    delay: Option<Duration>,
}

/// What a grid becomes: namespaces, links, routes and NAT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    prefix: String,
    /// Host (and front node) name → namespace name, in creation order.
    namespaces: Vec<(String, String)>,
    bridges: Vec<String>,
    links: Vec<Link>,
    /// (namespace, gateway) default routes of private hosts.
    routes: Vec<(String, Ipv4Addr)>,
    /// (front namespace, private subnet, kind of NAT) NAT.
    nats: Vec<(String, Ipv4Addr, ferry_grid::Nat)>,
}

fn wan_net() -> (Ipv4Addr, u8) {
    (Ipv4Addr::new(198, 18, 0, 0), 15)
}

fn in_net(addr: Ipv4Addr, (net, len): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX << (32 - len);
    u32::from(addr) & mask == u32::from(net) & mask
}

fn subnet24(addr: Ipv4Addr) -> Ipv4Addr {
    let o = addr.octets();
    Ipv4Addr::new(o[0], o[1], o[2], 0)
}

/// The device of rail `rail` in a host's namespace: `eth0` for rail 0 (the host's own link),
/// `railN` for the cluster's `N`-th `[[cluster.link]]`.
pub fn rail_dev(rail: usize) -> String {
    if rail == 0 {
        "eth0".into()
    } else {
        format!("rail{rail}")
    }
}

/// Checks a prefix: 2-12 of `a-z0-9`, ending with `-`.
pub fn check_prefix(prefix: &str) -> Result<(), TestbedError> {
    let body = prefix.strip_suffix('-').unwrap_or("");
    let ok = (1..=11).contains(&body.len())
        && body
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(TestbedError::Prefix(prefix.to_string()))
    }
}

/// The prefix of this process's testbed: `fy<pid>-`.
pub fn run_prefix() -> String {
    format!("fy{}-", std::process::id())
}

impl Plan {
    /// Lays out `grid` under `prefix`. Public addresses must be in 198.18.0.0/15 and each
    /// private cluster's hosts in one /24.
    pub fn new(grid: &Topology, prefix: &str) -> Result<Plan, TestbedError> {
        check_prefix(prefix)?;
        let bad = |m: String| Err(TestbedError::Grid(m));
        let mut plan = Plan {
            prefix: prefix.to_string(),
            namespaces: Vec::new(),
            bridges: vec!["wan".into()],
            links: Vec::new(),
            routes: Vec::new(),
            nats: Vec::new(),
        };
        let ns = |name: &str| format!("{prefix}{name}");
        let (wan, wan_len) = wan_net();
        let mut index = 0usize;
        let mut next_dev = || {
            index += 1;
            format!("v{index}")
        };
        for (ci, cluster) in grid.clusters.iter().enumerate() {
            match (&cluster.kind, &cluster.front) {
                (Kind::Public, _) => {
                    for h in &cluster.hosts {
                        if !in_net(h.addr, (wan, wan_len)) {
                            return bad(format!(
                                "public host {} has {}, outside the testbed WAN 198.18.0.0/15",
                                h.name, h.addr
                            ));
                        }
                        plan.namespaces.push((h.name.clone(), ns(&h.name)));
                        let rate = grid.wan_rate.clone().or_else(|| cluster.rate.clone());
                        plan.links.push(Link {
                            ns: ns(&h.name),
                            dev: "eth0".into(),
                            switch_dev: next_dev(),
                            bridge: "wan".into(),
                            addr: h.addr,
                            prefix_len: wan_len,
                            rate,
                            delay: grid.wan_delay_of(ci),
                        });
                    }
                }
                (Kind::Private, Some(front)) => {
                    let subnet = subnet24(front.inside_addr);
                    for h in &cluster.hosts {
                        if subnet24(h.addr) != subnet {
                            return bad(format!(
                                "host {} ({}) is not in its front's /24 {subnet}/24",
                                h.name, h.addr
                            ));
                        }
                    }
                    let bridge = format!("c{ci}");
                    plan.bridges.push(bridge.clone());
                    // Every front node (the cluster may have several, each with its relay) is
                    // a namespace of its own between the WAN and the cluster's bridge, doing
                    // NAT; the hosts' default route is through the first.
                    for front in cluster.fronts() {
                        if !in_net(front.public_addr, (wan, wan_len)) {
                            return bad(format!(
                                "front {} has public address {}, outside the testbed WAN 198.18.0.0/15",
                                front.name, front.public_addr
                            ));
                        }
                        if subnet24(front.inside_addr) != subnet {
                            return bad(format!(
                                "front {} ({}) is not in its cluster's /24 {subnet}/24",
                                front.name, front.inside_addr
                            ));
                        }
                        plan.namespaces.push((front.name.clone(), ns(&front.name)));
                        plan.links.push(Link {
                            ns: ns(&front.name),
                            dev: "eth0".into(),
                            switch_dev: next_dev(),
                            bridge: "wan".into(),
                            addr: front.public_addr,
                            prefix_len: wan_len,
                            // Its own rate (a relay's link) before the grid's WAN rate.
                            rate: front.rate.clone().or_else(|| grid.wan_rate.clone()),
                            delay: grid.wan_delay_of(ci),
                        });
                        plan.links.push(Link {
                            ns: ns(&front.name),
                            dev: "eth1".into(),
                            switch_dev: next_dev(),
                            bridge: bridge.clone(),
                            addr: front.inside_addr,
                            prefix_len: 24,
                            rate: None,
                            delay: None,
                        });
                        plan.nats.push((ns(&front.name), subnet, front.nat));
                    }
                    for h in &cluster.hosts {
                        plan.namespaces.push((h.name.clone(), ns(&h.name)));
                        plan.links.push(Link {
                            ns: ns(&h.name),
                            dev: "eth0".into(),
                            switch_dev: next_dev(),
                            bridge: bridge.clone(),
                            addr: h.addr,
                            prefix_len: 24,
                            rate: cluster.rate.clone(),
                            delay: None,
                        });
                        plan.routes.push((ns(&h.name), front.inside_addr));
                    }
                }
                (Kind::Private, None) => {
                    return bad(format!("private cluster {} has no front", cluster.name))
                }
            }
            for (li, link) in cluster.links.iter().enumerate() {
                let rail = li + 1;
                let wan_subnet = Subnet {
                    net: wan,
                    len: wan_len,
                };
                let private_subnets = grid.clusters.iter().filter_map(|c| {
                    c.front.as_ref().map(|f| {
                        let net = Subnet {
                            net: subnet24(f.inside_addr),
                            len: 24,
                        };
                        (format!("cluster {}'s network", c.name), net)
                    })
                });
                let taken = std::iter::once(("the testbed WAN".to_string(), wan_subnet))
                    .chain(private_subnets)
                    .find(|(_, net)| net.overlaps(link.subnet));
                if let Some((what, net)) = taken {
                    return bad(format!(
                        "link {rail} of cluster {} ({}) overlaps {what} {net}: a cut rail would fall back to it",
                        cluster.name, link.subnet
                    ));
                }
                let bridge = format!("c{ci}r{rail}");
                plan.bridges.push(bridge.clone());
                for h in &cluster.hosts {
                    let Some(&addr) = h.rails.get(li) else {
                        return bad(format!("host {} has no address on link {rail}", h.name));
                    };
                    plan.links.push(Link {
                        ns: ns(&h.name),
                        dev: rail_dev(rail),
                        switch_dev: next_dev(),
                        bridge: bridge.clone(),
                        addr,
                        prefix_len: link.subnet.len,
                        rate: link.rate.clone(),
                        delay: None,
                    });
                }
            }
        }
        Ok(plan)
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespace of a host or front node.
    pub fn namespace(&self, host: &str) -> Option<&str> {
        self.namespaces
            .iter()
            .find(|(h, _)| h == host)
            .map(|(_, n)| n.as_str())
    }

    /// The command that sets rail `rail` of `host` (0: its own link `eth0`, N: `railN`) down
    /// or up, in the host's namespace. Taking it down removes the rail's route there, so
    /// packets on it fail at once instead of taking another way.
    pub fn link_command(
        &self,
        host: &str,
        rail: usize,
        up: bool,
    ) -> Result<Vec<String>, TestbedError> {
        let dev = rail_dev(rail);
        let ns = self
            .namespace(host)
            .filter(|ns| self.links.iter().any(|l| l.ns == *ns && l.dev == dev))
            .ok_or_else(|| TestbedError::NoSuchLink {
                host: host.to_string(),
                rail,
            })?;
        let state = if up { "up" } else { "down" };
        Ok(["ip", "-n", ns, "link", "set", &dev, state]
            .map(String::from)
            .to_vec())
    }

    /// Every namespace of the testbed, the switch namespace first.
    pub fn all_namespaces(&self) -> Vec<String> {
        let mut v = vec![format!("{}{SWITCH}", self.prefix)];
        v.extend(self.namespaces.iter().map(|(_, n)| n.clone()));
        v
    }

    /// The commands that build the testbed, in order.
    pub fn commands(&self) -> Vec<Vec<String>> {
        let sw = format!("{}{SWITCH}", self.prefix);
        let mut out: Vec<Vec<String>> = Vec::new();
        let mut cmd = |parts: &[&str]| out.push(parts.iter().map(|s| s.to_string()).collect());
        for ns in self.all_namespaces() {
            cmd(&["ip", "netns", "add", &ns]);
            cmd(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        }
        for b in &self.bridges {
            cmd(&["ip", "-n", &sw, "link", "add", b, "type", "bridge"]);
            cmd(&["ip", "-n", &sw, "link", "set", b, "up"]);
        }
        for l in &self.links {
            cmd(&[
                "ip",
                "-n",
                &sw,
                "link",
                "add",
                &l.switch_dev,
                "type",
                "veth",
                "peer",
                "name",
                &l.dev,
                "netns",
                &l.ns,
            ]);
            match l.delay {
                // The forwarder joins the host's veth to the bridge (see `delay`).
                Some(_) => {
                    for argv in delay::wiring(&sw, &l.switch_dev, &l.bridge) {
                        cmd(&argv.iter().map(String::as_str).collect::<Vec<_>>());
                    }
                }
                None => cmd(&[
                    "ip",
                    "-n",
                    &sw,
                    "link",
                    "set",
                    &l.switch_dev,
                    "master",
                    &l.bridge,
                ]),
            }
            cmd(&["ip", "-n", &sw, "link", "set", &l.switch_dev, "up"]);
            let cidr = format!("{}/{}", l.addr, l.prefix_len);
            cmd(&["ip", "-n", &l.ns, "addr", "add", &cidr, "dev", &l.dev]);
            cmd(&["ip", "-n", &l.ns, "link", "set", &l.dev, "up"]);
            if let Some(rate) = &l.rate {
                // Both directions: into the host on the switch side, out of it on its side.
                for (ns, dev) in [(&sw, l.switch_dev.as_str()), (&l.ns, l.dev.as_str())] {
                    cmd(&[
                        "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                        "rate", rate, "burst", "256kb", "latency", "50ms",
                    ]);
                }
            }
        }
        for (ns, gw) in &self.routes {
            cmd(&[
                "ip",
                "-n",
                ns,
                "route",
                "add",
                "default",
                "via",
                &gw.to_string(),
            ]);
        }
        for (ns, subnet, nat) in &self.nats {
            let src = format!("{subnet}/24");
            cmd(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-q",
                "-w",
                "net.ipv4.ip_forward=1",
            ]);
            cmd(&[
                "ip",
                "netns",
                "exec",
                ns,
                "iptables",
                "-t",
                "nat",
                "-A",
                "POSTROUTING",
                "-s",
                &src,
                "-o",
                "eth0",
                "-j",
                "MASQUERADE",
            ]
            .into_iter()
            // A symmetric NAT: a random port for every connection, so no hole can be punched.
            .chain((*nat == ferry_grid::Nat::Random).then_some("--random-fully"))
            .collect::<Vec<_>>());
            cmd(&[
                "ip",
                "netns",
                "exec",
                ns,
                "iptables",
                "-A",
                "FORWARD",
                "-i",
                "eth0",
                "-o",
                "eth1",
                "-m",
                "conntrack",
                "--ctstate",
                "ESTABLISHED,RELATED",
                "-j",
                "ACCEPT",
            ]);
            cmd(&[
                "ip", "netns", "exec", ns, "iptables", "-A", "FORWARD", "-i", "eth0", "-o", "eth1",
                "-j", "DROP",
            ]);
        }
        out
    }
}

/// Runs one command; an error names it.
pub fn run(argv: &[String]) -> Result<String, TestbedError> {
    let line = argv.join(" ");
    let output = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| TestbedError::Command {
            command: line.clone(),
            status: "not started".into(),
            stderr: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(TestbedError::Command {
            command: line,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether this process runs as root (the testbed's first need; tests skip without it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Checks for root and the tools the testbed runs.
pub fn preflight() -> Result<(), TestbedError> {
    if !is_root() {
        return Err(TestbedError::NotRoot);
    }
    for (tool, package) in [
        ("ip", "iproute2"),
        ("tc", "iproute2"),
        ("iptables", "iptables"),
        ("sysctl", "procps"),
    ] {
        if !on_path(tool) {
            return Err(TestbedError::Missing { tool, package });
        }
    }
    Ok(())
}

/// Whether `tool` is a file in one of `$PATH`'s directories.
pub(crate) fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(tool).is_file()))
}

/// Whether a namespace (or state) name belongs to the testbed `prefix`; with `None`, to any
/// testbed (`fy…-`).
fn is_testbeds(name: &str, prefix: Option<&str>) -> bool {
    match prefix {
        Some(p) => name.starts_with(p),
        None => name.starts_with("fy") && name.contains('-'),
    }
}

/// Namespaces whose names start with `prefix`; with `None`, every testbed's (`fy…-`).
pub fn leftovers(prefix: Option<&str>) -> Result<Vec<String>, TestbedError> {
    let listing = run(&["ip".into(), "netns".into(), "list".into()])?;
    Ok(listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| is_testbeds(name, prefix))
        .map(str::to_string)
        .collect())
}

/// Removes the namespaces of a testbed (and with them its links, bridges and rules), first
/// stopping its sshds by pid, and then its ssh state and `/etc/netns` files (see [`ssh`]).
/// Returns the namespaces removed; goes on past failures and reports the first.
pub fn remove(prefix: Option<&str>) -> Result<Vec<String>, TestbedError> {
    if let Some(p) = prefix {
        check_prefix(p)?;
    }
    let names = leftovers(prefix)?;
    let mut first_error = None;
    // Slurm's daemons first: a slurmd whose controller is gone retries and logs.
    slurm::stop_matching(|name| is_testbeds(name, prefix));
    ssh::stop_matching(|name| is_testbeds(name, prefix));
    for name in &names {
        // Processes started in it would keep it alive: end them first (only inside it).
        if let Ok(pids) = run(&["ip".into(), "netns".into(), "pids".into(), name.clone()]) {
            for pid in pids.split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
        if let Err(e) = run(&["ip".into(), "netns".into(), "delete".into(), name.clone()]) {
            first_error.get_or_insert(e);
        }
    }
    if let Err(e) = ssh::remove_state(|name| is_testbeds(name, prefix)) {
        first_error.get_or_insert(e);
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(names),
    }
}

/// How to build a testbed beyond its network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpOptions {
    /// Make every host and front node look like its own machine and run its own sshd (see
    /// [`ssh`]).
    pub ssh: bool,
    /// The sshd to run (an absolute path; default: the installed one, see
    /// [`ssh::find_sshd`]).
    pub sshd: Option<std::path::PathBuf>,
    /// Run a Slurm cluster on the grid's first cluster (implies `ssh`; see [`slurm`]).
    pub slurm: bool,
    /// The `ferry` program that forwards the links a grid's `wan_delay` delays (`ferry
    /// testbed delay`, see [`delay`]); default: this program, if it is `ferry`.
    pub ferry: Option<std::path::PathBuf>,
    /// With `ssh`: directories under `/tmp` or `/dev/shm` that every host shows at the same
    /// path, besides those holding this program and its working directory (see [`kept`]).
    pub keep: Vec<std::path::PathBuf>,
}

impl UpOptions {
    /// Hosts as machines with their own sshd, the installed one.
    pub fn with_ssh() -> UpOptions {
        UpOptions {
            ssh: true,
            sshd: None,
            slurm: false,
            ferry: None,
            keep: Vec::new(),
        }
    }

    /// Hosts as machines with their own sshd and a Slurm cluster on them.
    pub fn with_slurm() -> UpOptions {
        UpOptions {
            slurm: true,
            ..UpOptions::with_ssh()
        }
    }

    /// Whether this machine can build such a testbed (root, and the tools these options
    /// need): the sshd to run, if any. [`Testbed::up_with`] checks this first; tests skip on
    /// its error.
    pub fn preflight(&self) -> Result<Option<std::path::PathBuf>, TestbedError> {
        preflight()?;
        if self.slurm {
            slurm::preflight()?;
        }
        match (self.ssh || self.slurm, &self.sshd) {
            (false, _) => Ok(None),
            (true, Some(sshd)) => {
                ssh::preflight()?;
                ssh::check_sshd(sshd)?;
                Ok(Some(sshd.clone()))
            }
            (true, None) => Ok(Some(ssh::preflight()?)),
        }
    }
}

/// A built testbed; removed on drop (also when a test panics).
#[derive(Debug)]
pub struct Testbed {
    plan: Plan,
    ssh: Option<ssh::SshPlan>,
    slurm: Option<slurm::SlurmPlan>,
    /// The forwarders of delayed links, reaped once removal has ended them.
    forwarders: Vec<std::process::Child>,
    keep: bool,
}

impl Testbed {
    /// Builds the testbed for `grid` with `prefix`; on failure removes what was built.
    pub fn up(grid: &Topology, prefix: &str) -> Result<Testbed, TestbedError> {
        Testbed::up_with(grid, prefix, &UpOptions::default())
    }

    /// Builds the testbed for `grid` with `prefix` and `options`; on failure removes what was
    /// built.
    pub fn up_with(
        grid: &Topology,
        prefix: &str,
        options: &UpOptions,
    ) -> Result<Testbed, TestbedError> {
        let sshd = options.preflight()?;
        let plan = Plan::new(grid, prefix)?;
        let ssh_plan = match &sshd {
            Some(sshd) => Some(
                ssh::SshPlan::new(grid, &plan, std::path::Path::new(ssh::STATE_ROOT), sshd)?
                    .keeping(kept::dirs_to_keep(&options.keep)),
            ),
            None => None,
        };
        let slurm_plan = match options.slurm {
            true => Some(slurm::SlurmPlan::new(
                grid,
                prefix,
                std::path::Path::new(ssh::STATE_ROOT),
            )?),
            false => None,
        };
        // Leftovers of a crashed run with the same prefix would make `netns add` fail.
        remove(Some(prefix))?;
        let mut testbed = Testbed {
            plan,
            ssh: ssh_plan,
            slurm: slurm_plan,
            forwarders: Vec::new(),
            keep: false,
        };
        for argv in testbed.plan.commands() {
            run(&argv)?;
        }
        delay::start(
            &testbed.plan,
            options.ferry.as_deref(),
            &mut testbed.forwarders,
        )?;
        if let Some(ssh_plan) = &testbed.ssh {
            ssh::apply(ssh_plan)?;
        }
        if let Some(slurm_plan) = &testbed.slurm {
            slurm::apply(slurm_plan)?;
        }
        Ok(testbed)
    }

    /// The ssh client configuration of a testbed built with [`UpOptions::ssh`].
    pub fn ssh_config(&self) -> Option<std::path::PathBuf> {
        self.ssh.as_ref().map(ssh::SshPlan::ssh_config)
    }

    /// `ssh -F <ssh_config>`, for a testbed built with [`UpOptions::ssh`].
    pub fn ssh_command(&self) -> Option<Vec<String>> {
        self.ssh.as_ref().map(ssh::SshPlan::ssh_command)
    }

    /// The `slurm.conf` (what `SLURM_CONF` must name), for a testbed built with
    /// [`UpOptions::slurm`]; commands run through [`Testbed::host_command`] have it set.
    pub fn slurm_conf(&self) -> Option<std::path::PathBuf> {
        self.slurm.as_ref().map(slurm::SlurmPlan::conf)
    }

    /// The host where Slurm's controller runs and jobs are submitted, for a testbed built with
    /// [`UpOptions::slurm`].
    pub fn slurm_head(&self) -> Option<&str> {
        self.slurm.as_ref().map(slurm::SlurmPlan::head)
    }

    /// The command prefix that runs a program on `host` as a login there would (its network,
    /// mount, UTS and IPC namespaces, in the current directory, or `/` when that is under the
    /// host's private `/tmp` or `/dev/shm` and not kept, see [`kept`]), for a testbed built
    /// with [`UpOptions::ssh`].
    pub fn host_command(&self, host: &str) -> Result<Vec<String>, TestbedError> {
        ssh::host_command(&self.plan.prefix, host)
    }

    /// The plan carried out.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The namespace of a host or front node.
    pub fn namespace(&self, host: &str) -> Option<&str> {
        self.plan.namespace(host)
    }

    /// Sets rail `rail` of `host` down or up (see [`Plan::link_command`]): the way a test cuts
    /// a rail mid-transfer and restores it.
    pub fn set_link(&self, host: &str, rail: usize, up: bool) -> Result<(), TestbedError> {
        run(&self.plan.link_command(host, rail, up)?)?;
        Ok(())
    }

    /// Leaves the testbed standing after drop (for `ferry testbed up`).
    pub fn keep(mut self) -> Plan {
        self.keep = true;
        self.plan.clone()
    }

    /// Removes the testbed now.
    pub fn down(mut self) -> Result<Vec<String>, TestbedError> {
        self.keep = true;
        remove(Some(&self.plan.prefix))
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if !self.keep {
            if let Err(e) = remove(Some(&self.plan.prefix)) {
                eprintln!("ferry testbed: removing {}*: {e}", self.plan.prefix);
            }
            for forwarder in &mut self.forwarders {
                let _ = forwarder.wait();
            }
        }
    }
}

/// The prefix of the single standing testbed that has a namespace for `host`.
pub fn standing_prefix(host: &str) -> Result<String, TestbedError> {
    let mut found: Vec<String> = leftovers(None)?
        .into_iter()
        .filter_map(|ns| ns.strip_suffix(host).map(str::to_string))
        .filter(|p| check_prefix(p).is_ok())
        .collect();
    found.dedup();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(TestbedError::Grid(format!(
            "no standing testbed has host {host:?} (run `ferry testbed up` first)"
        ))),
        _ => Err(TestbedError::Grid(format!(
            "several testbeds have host {host:?}: {found:?}; pass --prefix"
        ))),
    }
}

/// Moves the calling thread into network namespace `name` (from `ip netns add`): sockets it
/// opens afterwards live there. For tests and benchmarks that play several hosts in one
/// process, one thread per host. The launcher's, which enters the testbed's hosts too.
pub use ferry_launch::netns::enter;

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: &str = r#"
wan_rate = "1gbit"
[[cluster]]
name = "a"
kind = "private"
front = "fa"
public_addr = "198.18.0.10"
[[cluster.host]]
name = "a1"
addr = "10.1.0.11"
[[cluster]]
name = "p"
kind = "public"
[[cluster.host]]
name = "p1"
addr = "198.18.1.1"
"#;

    fn plan() -> Plan {
        Plan::new(&Topology::parse("g", GRID).unwrap(), "fy7-").unwrap()
    }

    #[test]
    fn delayed_links_go_through_a_forwarder() {
        let grid = GRID.replace("wan_rate = \"1gbit\"", "wan_delay = \"2ms\"");
        let p = Plan::new(&Topology::parse("g", &grid).unwrap(), "fy7-").unwrap();
        let lines: Vec<String> = p.commands().iter().map(|c| c.join(" ")).collect();
        let has = |s: &str| lines.iter().any(|l| l == s);
        // fa's eth0 (v1) and p1's eth0 (v4) reach the WAN through forwarders; fa's eth1 (v2)
        // and a1's eth0 (v3) are inside the cluster, on its bridge as always.
        for v in ["v1", "v4"] {
            assert!(
                !has(&format!("ip -n fy7-sw link set {v} master wan")),
                "{v}"
            );
            assert!(has(&format!(
                "ip -n fy7-sw link add {v}d type veth peer name {v}w"
            )));
            assert!(has(&format!("ip -n fy7-sw link set {v}w master wan")));
        }
        assert!(has("ip -n fy7-sw link set v2 master c0"));
        assert!(has("ip -n fy7-sw link set v3 master c0"));
        let delayed: Vec<_> = p
            .links
            .iter()
            .filter_map(|l| l.delay.map(|d| (l.switch_dev.as_str(), d)))
            .collect();
        assert_eq!(
            delayed,
            [
                ("v1", Duration::from_millis(2)),
                ("v4", Duration::from_millis(2))
            ]
        );
    }

    #[test]
    fn plan_names_and_commands() {
        let p = plan();
        assert_eq!(p.all_namespaces(), ["fy7-sw", "fy7-fa", "fy7-a1", "fy7-p1"]);
        assert_eq!(p.namespace("a1"), Some("fy7-a1"));
        let lines: Vec<String> = p.commands().iter().map(|c| c.join(" ")).collect();
        let has = |s: &str| lines.iter().any(|l| l == s);
        assert!(has("ip -n fy7-sw link add c0 type bridge"));
        assert!(has("ip -n fy7-a1 addr add 10.1.0.11/24 dev eth0"));
        assert!(has("ip -n fy7-a1 route add default via 10.1.0.1"));
        assert!(has("ip -n fy7-fa addr add 198.18.0.10/15 dev eth0"));
        assert!(has("ip netns exec fy7-fa iptables -t nat -A POSTROUTING -s 10.1.0.0/24 -o eth0 -j MASQUERADE"));
        assert!(!lines.iter().any(|l| l.contains("--random-fully")));
        assert!(has(
            "ip netns exec fy7-fa iptables -A FORWARD -i eth0 -o eth1 -j DROP"
        ));
        assert!(has("ip netns exec fy7-p1 tc qdisc add dev eth0 root tbf rate 1gbit burst 256kb latency 50ms"));
        // Nothing is done outside the testbed's namespaces.
        for l in &lines {
            assert!(l.contains("fy7-"), "{l}");
        }
        // Private hosts get no WAN address and no link to the WAN bridge.
        assert!(!lines
            .iter()
            .any(|l| l.contains("fy7-a1") && l.contains("198.18")));
    }

    #[test]
    fn a_front_nodes_own_rate_limits_its_link_to_the_wan() {
        let grid = GRID.replace(
            "public_addr = \"198.18.0.10\"\n",
            "public_addr = \"198.18.0.10\"\nfront_rate = \"100mbit\"\n\
             [[cluster.relay]]\nname = \"fa2\"\npublic_addr = \"198.18.0.11\"\nfront_addr = \"10.1.0.2\"\nrate = \"50mbit\"\n",
        );
        let p = Plan::new(&Topology::parse("g", &grid).unwrap(), "fy7-").unwrap();
        let lines: Vec<String> = p.commands().iter().map(|c| c.join(" ")).collect();
        let tbf = |ns: &str, dev: &str, rate: &str| {
            let line = format!(
                "ip netns exec {ns} tc qdisc add dev {dev} root tbf rate {rate} burst 256kb latency 50ms"
            );
            lines.contains(&line)
        };
        // fa: eth0 = v1 (WAN), eth1 = v2; fa2: eth0 = v3, eth1 = v4; a1: v5; p1: v6.
        assert!(tbf("fy7-fa", "eth0", "100mbit") && tbf("fy7-sw", "v1", "100mbit"));
        assert!(tbf("fy7-fa2", "eth0", "50mbit") && tbf("fy7-sw", "v3", "50mbit"));
        // Inside the cluster and the other cluster's links keep their rates.
        assert!(!lines.iter().any(|l| l.contains("dev eth1 root")));
        assert!(tbf("fy7-p1", "eth0", "1gbit"));
        assert!(!tbf("fy7-fa", "eth0", "1gbit"));
    }

    const RAILS: &str = r#"
[[cluster]]
name = "a"
kind = "private"
front = "fa"
public_addr = "198.18.0.10"
[[cluster.link]]
subnet = "10.211.0.0/24"
[[cluster.host]]
name = "a1"
addr = "10.1.0.11"
rails = ["10.211.0.11"]
[[cluster]]
name = "r"
kind = "public"
rate = "1gbit"
[[cluster.link]]
subnet = "10.201.0.0/24"
rate = "200mbit"
[[cluster.link]]
subnet = "10.202.0.0/16"
[[cluster.host]]
name = "r1"
addr = "198.18.2.1"
rails = ["10.201.0.1", "10.202.7.1"]
[[cluster.host]]
name = "r2"
addr = "198.18.2.2"
rails = ["10.201.0.2", "10.202.7.2"]
"#;

    fn rails_plan() -> Plan {
        Plan::new(&Topology::parse("g", RAILS).unwrap(), "fy7-").unwrap()
    }

    #[test]
    fn plan_rails_one_bridge_per_link_one_veth_per_host() {
        let p = rails_plan();
        let lines: Vec<String> = p.commands().iter().map(|c| c.join(" ")).collect();
        let has = |s: &str| lines.iter().any(|l| l == s);
        let count = |s: &str| lines.iter().filter(|l| l.contains(s)).count();
        // One bridge per link: c<cluster>r<rail>.
        for b in ["c0r1", "c1r1", "c1r2"] {
            assert!(
                has(&format!("ip -n fy7-sw link add {b} type bridge")),
                "{b}"
            );
        }
        // One veth per host and link, named rail<N> in the host, with its rail address.
        assert!(has("ip -n fy7-r1 addr add 198.18.2.1/15 dev eth0"));
        assert!(has("ip -n fy7-r1 addr add 10.201.0.1/24 dev rail1"));
        assert!(has("ip -n fy7-r2 addr add 10.201.0.2/24 dev rail1"));
        assert!(has("ip -n fy7-r1 addr add 10.202.7.1/16 dev rail2"));
        assert!(has("ip -n fy7-r2 addr add 10.202.7.2/16 dev rail2"));
        assert!(has("ip -n fy7-a1 addr add 10.211.0.11/24 dev rail1"));
        assert!(has("ip -n fy7-r2 link set rail2 up"));
        let veths: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("type veth") && l.contains("name rail"))
            .collect();
        assert_eq!(veths.len(), 5, "{veths:?}");
        // Each rail veth's switch end is on its link's bridge.
        for v in &veths {
            let switch_dev = v.split_whitespace().nth(5).unwrap();
            let bridge = lines
                .iter()
                .find_map(|l| {
                    l.strip_prefix(&format!("ip -n fy7-sw link set {switch_dev} master "))
                })
                .unwrap();
            let rail = v.split_whitespace().nth(10).unwrap();
            assert!(
                bridge.ends_with(&format!("r{}", &rail[4..])),
                "{v} on {bridge}"
            );
            assert!(bridge.starts_with('c') && bridge.contains('r'), "{bridge}");
        }
        // Link 1 of r is shaped both ways on each host's veth; link 2 is not; the cluster's
        // rate stays on eth0.
        assert!(has("ip netns exec fy7-r1 tc qdisc add dev rail1 root tbf rate 200mbit burst 256kb latency 50ms"));
        assert!(has("ip netns exec fy7-r2 tc qdisc add dev rail1 root tbf rate 200mbit burst 256kb latency 50ms"));
        assert!(has("ip netns exec fy7-r1 tc qdisc add dev eth0 root tbf rate 1gbit burst 256kb latency 50ms"));
        assert_eq!(count("dev rail2 root tbf"), 0);
        assert_eq!(count("rate 200mbit"), 4, "two hosts, both directions");
        assert!(lines
            .iter()
            .any(|l| l.starts_with("ip netns exec fy7-sw tc qdisc add dev v")
                && l.contains("rate 200mbit")));
        // Still nothing outside the testbed's namespaces.
        for l in &lines {
            assert!(l.contains("fy7-"), "{l}");
        }
        // A grid without links plans exactly as before.
        assert!(!plan()
            .commands()
            .iter()
            .any(|c| c.join(" ").contains("rail")));
    }

    #[test]
    fn link_command_cuts_and_restores_one_rail() {
        let p = rails_plan();
        let line =
            |host: &str, rail: usize, up: bool| p.link_command(host, rail, up).map(|c| c.join(" "));
        assert_eq!(
            line("r1", 1, false).unwrap(),
            "ip -n fy7-r1 link set rail1 down"
        );
        assert_eq!(
            line("r1", 1, true).unwrap(),
            "ip -n fy7-r1 link set rail1 up"
        );
        assert_eq!(
            line("r2", 2, false).unwrap(),
            "ip -n fy7-r2 link set rail2 down"
        );
        assert_eq!(
            line("r2", 0, false).unwrap(),
            "ip -n fy7-r2 link set eth0 down"
        );
        for (host, rail) in [("r1", 3), ("a1", 2), ("nobody", 0), ("fa", 1)] {
            assert!(
                matches!(
                    line(host, rail, false),
                    Err(TestbedError::NoSuchLink { .. })
                ),
                "{host} {rail}"
            );
        }
        assert_eq!(rail_dev(0), "eth0");
        assert_eq!(rail_dev(3), "rail3");
    }

    #[test]
    fn refuses_links_that_overlap_other_networks() {
        // Inside the WAN: a cut rail would fall back to it.
        let on_wan = RAILS
            .replace("10.201.0.0/24", "198.19.1.0/24")
            .replace("\"10.201.0.", "\"198.19.1.");
        let g = Topology::parse("g", &on_wan).unwrap();
        match Plan::new(&g, "fy7-") {
            Err(TestbedError::Grid(m)) => assert!(m.contains("the testbed WAN"), "{m}"),
            other => panic!("{other:?}"),
        }
        // Around a private cluster's /24 (no host address in it, so the grid file is fine).
        let around = RAILS
            .replace("10.202.0.0/16", "10.1.0.128/25")
            .replace("10.202.7.", "10.1.0.13");
        let g = Topology::parse("g", &around).unwrap();
        match Plan::new(&g, "fy7-") {
            Err(TestbedError::Grid(m)) => assert!(m.contains("cluster a's network"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_what_the_testbed_cannot_build() {
        let g = Topology::parse("g", &GRID.replace("198.18.1.1", "203.0.113.5")).unwrap();
        assert!(matches!(Plan::new(&g, "fy7-"), Err(TestbedError::Grid(_))));
        let g = Topology::parse("g", GRID).unwrap();
        for bad in ["", "fy7", "FY-", "fy/-", "averyveryverylong-"] {
            assert!(
                matches!(Plan::new(&g, bad), Err(TestbedError::Prefix(_))),
                "{bad}"
            );
        }
    }
}
