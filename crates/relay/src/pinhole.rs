//! Pinholes for `ferry relay --copy nat`: the front node's own packet forwarding carries a
//! gated connection, so its bytes never enter the relay process (nor any socket on the front).
//!
//! For each gated CONNECT the relay reserves a free port on the address the client dialled
//! and adds two netfilter rules, in chains of its own named after its listening port:
//! - `nat` (from PREROUTING): TCP from the client's address to that port is DNATed to the
//!   registered target;
//! - `filter` (from FORWARD): connections so DNATed are let through to the cluster, since a
//!   front node usually forwards only replies inward.
//!
//! The client dials the port and runs the relay protocol's INCOMING with the target itself, so
//! the target checks the end-to-end MAC and the nonce exactly as for a relayed connection: a
//! stranger who shares the client's address and finds the port in the few milliseconds it is
//! open is refused there. Once the client is through it closes its CONNECT and both rules go;
//! the connection lives on in connection tracking. Rules are changed with one
//! `iptables-restore --noflush` per pinhole (atomic, one process), and the chains are flushed
//! at start (left over from a relay that was killed) and removed at exit.
//!
//! IPv4 only; a pinhole that cannot be made (IPv6, no privilege, no iptables) is reported as
//! such and the relay forwards that connection itself.

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use thiserror::Error;

/// Why a pinhole or the chains could not be set up.
#[derive(Debug, Error)]
pub enum PinholeError {
    /// `iptables-restore` could not be run or refused the rules.
    #[error("iptables-restore: {0}")]
    Rules(String),
    /// No free port to reserve on the relay's address.
    #[error("cannot reserve a port on {addr}: {source}")]
    Port {
        /// Address.
        addr: IpAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// Only IPv4 pinholes are made.
    #[error("pinholes are IPv4 only ({0})")]
    NotIpv4(SocketAddr),
}

/// An open pinhole: its rules and the reservation of its port.
struct Hole {
    /// The rule specs (without `-A`/`-D`) in `nat` and `filter`.
    nat: String,
    filter: String,
    /// A TCP socket bound to the port, not listening: keeps the port from being taken on the
    /// front while the rule sends it on, and anyone else who dials it is refused.
    _port: OwnedFd,
}

/// The relay's chains and the pinholes open in them, by a key of the caller's (its connection).
pub struct Pinholes<K> {
    chain: String,
    open: HashMap<K, Hole>,
}

fn restore(script: &str) -> Result<(), PinholeError> {
    let mut child = Command::new("iptables-restore")
        .args(["-w", "--noflush"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| PinholeError::Rules(format!("cannot run it: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| PinholeError::Rules(format!("cannot feed it: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| PinholeError::Rules(e.to_string()))?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr);
    Err(PinholeError::Rules(
        why.lines().next().unwrap_or("failed").trim().to_string(),
    ))
}

/// Whether `table`'s `parent` chain jumps to `chain` already.
fn jumps(table: &str, parent: &str, chain: &str) -> bool {
    Command::new("iptables")
        .args(["-w", "-t", table, "-C", parent, "-j", chain])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl<K: std::hash::Hash + Eq + Copy> Pinholes<K> {
    /// Makes (or empties) the relay's chains for listening port `listen_port` and hooks them
    /// in first. Fails without privilege or iptables.
    pub fn set_up(listen_port: u16) -> Result<Pinholes<K>, PinholeError> {
        let chain = format!("FERRY-RELAY-{listen_port}");
        // `:chain - [0:0]` creates the chain or, with --noflush, empties it.
        restore(&format!(
            "*nat\n:{chain} - [0:0]\nCOMMIT\n*filter\n:{chain} - [0:0]\nCOMMIT\n"
        ))?;
        let mut hooks = String::new();
        for (table, parent) in [("nat", "PREROUTING"), ("filter", "FORWARD")] {
            hooks.push_str(&format!("*{table}\n"));
            if !jumps(table, parent, &chain) {
                hooks.push_str(&format!("-I {parent} 1 -j {chain}\n"));
            }
            hooks.push_str("COMMIT\n");
        }
        restore(&hooks)?;
        Ok(Pinholes {
            chain,
            open: HashMap::new(),
        })
    }

    /// Opens a pinhole for `key`: `client`'s address reaching a fresh port of `local` (the
    /// address the client dialled) lands at `target`. Returns the port.
    pub fn open(
        &mut self,
        key: K,
        client: SocketAddr,
        local: SocketAddr,
        target: SocketAddr,
    ) -> Result<u16, PinholeError> {
        let (IpAddr::V4(client_ip), IpAddr::V4(local_ip), IpAddr::V4(target_ip)) =
            (client.ip(), local.ip(), target.ip())
        else {
            return Err(PinholeError::NotIpv4(client));
        };
        let reserve = || -> std::io::Result<(OwnedFd, u16)> {
            use rustix::net::{
                bind, getsockname, socket_with, AddressFamily, SocketFlags, SocketType,
            };
            let fd = socket_with(
                AddressFamily::INET,
                SocketType::STREAM,
                SocketFlags::CLOEXEC,
                None,
            )?;
            bind(&fd, &SocketAddrV4::new(local_ip, 0))?;
            let port = SocketAddr::try_from(getsockname(&fd)?)
                .map_err(|_| std::io::Error::other("not an IP address"))?
                .port();
            Ok((fd, port))
        };
        let (reserved, port) = reserve().map_err(|source| PinholeError::Port {
            addr: local.ip(),
            source,
        })?;
        let chain = &self.chain;
        let nat = format!(
            "{chain} -p tcp -s {client_ip} -d {local_ip} --dport {port} -j DNAT --to-destination {target_ip}:{}",
            target.port()
        );
        let filter = format!(
            "{chain} -p tcp -s {client_ip} -d {target_ip} --dport {} -m conntrack --ctstate DNAT --ctorigdst {local_ip} --ctorigdstport {port} -j ACCEPT",
            target.port()
        );
        restore(&format!(
            "*nat\n-A {nat}\nCOMMIT\n*filter\n-A {filter}\nCOMMIT\n"
        ))?;
        self.open.insert(
            key,
            Hole {
                nat,
                filter,
                _port: reserved,
            },
        );
        Ok(port)
    }

    /// Closes `key`'s pinhole; connections already through it stay up.
    pub fn close(&mut self, key: K) -> Result<(), PinholeError> {
        let Some(hole) = self.open.remove(&key) else {
            return Ok(());
        };
        restore(&format!(
            "*nat\n-D {}\nCOMMIT\n*filter\n-D {}\nCOMMIT\n",
            hole.nat, hole.filter
        ))
    }

    /// Pinholes open now.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether no pinhole is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

impl<K> Drop for Pinholes<K> {
    /// Unhooks and removes the chains (with whatever pinholes are still in them).
    fn drop(&mut self) {
        let chain = &self.chain;
        let mut script = String::new();
        for (table, parent) in [("nat", "PREROUTING"), ("filter", "FORWARD")] {
            script.push_str(&format!(
                "*{table}\n-D {parent} -j {chain}\n-F {chain}\n-X {chain}\nCOMMIT\n"
            ));
        }
        if let Err(e) = restore(&script) {
            eprintln!("ferry relay: removing the pinhole chains {chain}: {e}");
        }
    }
}
