//! Wiring up the fabric: each rank with peers on other hosts opens an endpoint (when
//! `FERRY_NET` and the machine allow), publishes its provider and name, and a pair of ranks
//! uses the fabric when both opened one on the same provider and their path is direct (no NAT,
//! relay or punched hole: those stay on TCP).

use super::{Card, Ranks};
use crate::bootstrap::Bootstrap;
use crate::config::{Config, NetKind};
use crate::error::Error;
use crate::ofi::{FabricTransport, MAX_FABRIC_RAILS};
use ferry_fabric::{Endpoint, EndpointSpec, Library, ProviderInfo};

/// Largest frame payload over the fabric. Kept under the eager size of the providers' own
/// message layers (`ofi_rxm` sends up to 16 KiB whole), so that no frame is split into a
/// provider-level rendezvous that could complete after frames sent later; larger messages go
/// as RTS_READ.
const FRAME_PAYLOAD: usize = 8 << 10;

/// A rank's rails as its card gives them: each one's domain (NIC) and endpoint name, rail 0
/// first.
pub(super) type Rails = Vec<(String, Vec<u8>)>;

/// The value published when a rank has no fabric.
const NONE: &str = "-";

/// Opens this rank's endpoints (its rails) and publishes `fabric-<uid>` as
/// `provider|domain=name,domain=name…` (rail 0 first); `None` (published as such) when
/// `FERRY_NET` or the machine rule it out. A rank that wanted the fabric (`FERRY_NET=ofi`)
/// and cannot open it says why and goes on over TCP.
pub(super) fn open(
    config: &Config,
    ranks: Ranks,
    boot: &mut Bootstrap,
) -> Result<Option<FabricTransport>, Error> {
    let key = format!("fabric-{}", ranks.me());
    // FERRY_RAILS (or rail addresses) set: that many rails; else one per NIC.
    let given = std::env::var_os("FERRY_RAILS").is_some() || !config.rail_addrs.is_empty();
    let wanted = given.then_some(usize::from(config.rails));
    let opened = match config.net {
        NetKind::Tcp => Ok(None),
        net => open_endpoint(net, wanted, ranks.me(), config.connect_timeout()),
    };
    let fabric = match opened {
        Ok(f) => f,
        Err(why) => {
            if config.net == NetKind::Ofi {
                eprintln!(
                    "ferry: rank {}: FERRY_NET=ofi: {why}; using TCP",
                    ranks.rank
                );
            }
            None
        }
    };
    let value = match &fabric {
        Some(f) => {
            let rails: Vec<String> = (f.names()?.iter())
                .map(|(domain, name)| format!("{domain}={}", hex(name)))
                .collect();
            format!("{}|{}", f.provider(), rails.join(","))
        }
        None => NONE.to_string(),
    };
    boot.put(&key, &value)?;
    Ok(fabric)
}

/// The endpoints `net` asks for (one per rail: `wanted` of them, or one per NIC), or why
/// there is none; a peer towards which nothing moves for `patience` (the connect timeout) is
/// lost.
fn open_endpoint(
    net: NetKind,
    wanted: Option<usize>,
    me: u32,
    patience: std::time::Duration,
) -> Result<Option<FabricTransport>, String> {
    let lib = match Library::load() {
        Ok(lib) => lib,
        Err(e) if net == NetKind::Auto => return Err(e.to_string()),
        Err(e) => return Err(format!("libfabric is not loaded ({e})")),
    };
    // The first provider `net` admits (FI_PROVIDER, read by libfabric, narrows the list).
    let candidates = lib
        .providers(&EndpointSpec::default())
        .map_err(|e| e.to_string())?;
    let Some(chosen) = candidates.iter().find(|p| net.admits(&p.provider)) else {
        let offered: Vec<&str> = candidates.iter().map(|p| p.provider.as_str()).collect();
        return Err(match net {
            NetKind::Auto => "no user-level NIC provider".to_string(),
            _ => format!("no provider for use between hosts (offered: {offered:?})"),
        });
    };
    let mut rails = Vec::new();
    for domain in rail_domains(&candidates, chosen, wanted) {
        let spec = EndpointSpec {
            // Its first layer names it as FI_PROVIDER does ("verbs" for "verbs;ofi_rxm").
            provider: chosen.provider.split(';').next().map(str::to_string),
            domain: Some(domain.clone()),
            ..EndpointSpec::default()
        };
        match Endpoint::open(&lib, &spec) {
            Ok(ep) => rails.push(ep),
            Err(e) if rails.is_empty() => return Err(e.to_string()),
            Err(e) => {
                // The rails opened so far serve; the others are left out, and said so.
                eprintln!("ferry: rank {me}: a fabric rail on {domain} cannot be opened: {e}");
                break;
            }
        }
    }
    FabricTransport::open(rails, me, FRAME_PAYLOAD, patience)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The domains (NICs) of `chosen`'s provider to open rails on, in libfabric's order, each
/// once, loopback left out (it reaches no other host): `wanted` of them, else every one (as
/// many as ferry has rails). A domain known only by an IPv6 link-local address is left out
/// too. A host with no other domain keeps `chosen`'s.
fn rail_domains(
    candidates: &[ProviderInfo],
    chosen: &ProviderInfo,
    wanted: Option<usize>,
) -> Vec<String> {
    let mut domains: Vec<String> = Vec::new();
    for p in candidates.iter().filter(|p| p.provider == chosen.provider) {
        if !loopback(p) && !link_local(p) && !domains.contains(&p.domain) {
            domains.push(p.domain.clone());
        }
    }
    if domains.is_empty() {
        domains.push(chosen.domain.clone());
    }
    domains.truncate(
        wanted
            .unwrap_or(MAX_FABRIC_RAILS)
            .clamp(1, MAX_FABRIC_RAILS),
    );
    domains
}

/// A socket provider's fabric of IPv6 link-local addresses only: an interface without an
/// address of its own (a bridge, a container's link) shows up so, and reaches no other host
/// by that address. Its other fabrics (an IPv4 subnet) still count.
fn link_local(p: &ProviderInfo) -> bool {
    p.fabric.starts_with("fe80:")
}

/// A loopback domain: `lo`, or a socket provider's fabric on a loopback subnet.
fn loopback(p: &ProviderInfo) -> bool {
    p.domain == "lo" || p.fabric.starts_with("127.") || p.fabric.starts_with("::1/")
}

/// Reads the fabric entries of the ranks of `peers` (universe ranks) into their cards.
pub(super) fn read_names(
    boot: &mut Bootstrap,
    cards: &mut [Card],
    peers: &[u32],
    base: u32,
) -> Result<(), Error> {
    for &peer in peers {
        let r = peer - base;
        let text = boot.get(&format!("fabric-{peer}"))?;
        if text == NONE {
            continue;
        }
        let bad = || Error::Bootstrap(format!("rank {r} published a malformed fabric {text:?}"));
        let (provider, rails) = text.split_once('|').ok_or_else(bad)?;
        let rails = parse_rails(rails).ok_or_else(bad)?;
        cards[r as usize].fabric = Some((provider.to_string(), rails));
    }
    Ok(())
}

/// The peers (universe ranks among `peers`) this rank reaches over `fabric`: those with an
/// endpoint on the same provider and a direct path. The rest of `peers` stay on TCP; with
/// `FERRY_NET=ofi` a rank says which and why.
pub(super) fn choose_peers(
    config: &Config,
    fabric: &mut FabricTransport,
    cards: &[Card],
    guids: &[ferry_grid::Guid],
    peers: &[u32],
    (base, rank): (u32, u32),
) -> Vec<u32> {
    let mut chosen = Vec::new();
    let mut left: Vec<String> = Vec::new();
    for &uid in peers {
        let peer = uid - base;
        let direct = ferry_grid::path::plan(guids, rank, peer).path == ferry_grid::Path::Direct;
        match &cards[peer as usize].fabric {
            Some((provider, rails)) if provider == fabric.provider() && direct => {
                let names = rails.iter().map(|(_, name)| name.clone()).collect();
                fabric.set_peer(uid, names, cards[peer as usize].pid);
                chosen.push(uid);
            }
            Some((provider, _)) if provider != fabric.provider() => {
                left.push(format!("{peer} (provider {provider})"))
            }
            Some(_) => left.push(format!("{peer} (no direct path)")),
            None => left.push(format!("{peer} (no fabric)")),
        }
    }
    if config.net == NetKind::Ofi && !left.is_empty() {
        eprintln!(
            "ferry: rank {rank}: over TCP, not the fabric ({}), to ranks {}",
            fabric.provider(),
            left.join(", ")
        );
    }
    chosen
}

/// For `--show-paths`, on rank 0: the pairs of ranks on different hosts that talk over a
/// fabric, by provider (`ofi:<provider>`), one line each, a pair over several rails with its
/// rails' domains (`r0 <-> r2 (2 rails: eth0, eth1)`); nothing when no rank has one.
pub(super) fn show_pairs(
    boot: &mut Bootstrap,
    cards: &[Card],
    guids: &[ferry_grid::Guid],
    base: u32,
) -> Result<(), Error> {
    let n = cards.len() as u32;
    let mut published = Vec::with_capacity(cards.len());
    for r in 0..n {
        let text = boot.get(&format!("fabric-{}", base + r))?;
        published.push(text.split_once('|').and_then(|(p, rails)| {
            let domains: Vec<String> = parse_rails(rails)?.into_iter().map(|(d, _)| d).collect();
            Some((p.to_string(), domains))
        }));
    }
    let mut by_provider: Vec<(String, Vec<String>)> = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            let (Some((provider, rails_a)), Some((provider_b, rails_b))) =
                (&published[a as usize], &published[b as usize])
            else {
                continue;
            };
            let direct = ferry_grid::path::plan(guids, a, b).path == ferry_grid::Path::Direct;
            let apart = cards[a as usize].node != cards[b as usize].node;
            if provider != provider_b || !direct || !apart {
                continue;
            }
            let mut pair = format!("r{a} <-> r{b}");
            if rails_a.len().min(rails_b.len()) > 1 {
                let rails: Vec<String> = (rails_a.iter().zip(rails_b))
                    .map(|(x, y)| {
                        if x == y {
                            x.clone()
                        } else {
                            format!("{x}-{y}")
                        }
                    })
                    .collect();
                pair.push_str(&format!(" ({} rails: {})", rails.len(), rails.join(", ")));
            }
            match by_provider.iter_mut().find(|(p, _)| p == provider) {
                Some((_, pairs)) => pairs.push(pair),
                None => by_provider.push((provider.clone(), vec![pair])),
            }
        }
    }
    for (provider, pairs) in by_provider {
        println!("ofi:{provider}: {}", pairs.join(", "));
    }
    Ok(())
}

/// A published list of rails, `domain=name,domain=name…` (names in hex), rail 0 first.
fn parse_rails(text: &str) -> Option<Rails> {
    let rails: Option<Vec<_>> = text
        .split(',')
        .map(|rail| {
            let (domain, name) = rail.split_once('=')?;
            Some((domain.to_string(), unhex(name)?))
        })
        .collect();
    rails.filter(|r| {
        !r.is_empty() && r.len() <= MAX_FABRIC_RAILS && r.iter().all(|(_, n)| !n.is_empty())
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_go_through_the_bootstrap_as_hex_and_back() {
        let name = vec![0u8, 1, 0x7f, 0x80, 0xff];
        assert_eq!(unhex(&hex(&name)), Some(name));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn rails_go_through_the_bootstrap_rail_0_first() {
        let rails = parse_rails("eth0=0a0b,ib1=ff").expect("two rails");
        assert_eq!(
            rails,
            vec![
                ("eth0".to_string(), vec![10, 11]),
                ("ib1".to_string(), vec![255])
            ]
        );
        for bad in ["", "eth0", "eth0=", "eth0=zz", "eth0=0a,,"] {
            assert_eq!(parse_rails(bad), None, "{bad:?}");
        }
    }

    fn info(domain: &str, fabric: &str) -> ProviderInfo {
        ProviderInfo {
            provider: "tcp;ofi_rxm".into(),
            fabric: fabric.into(),
            domain: domain.into(),
            endpoint_type: 3,
            mr_mode: ferry_fabric::MrMode(0),
            caps: ferry_fabric::Caps(0),
            mode: 0,
            addr_format: 2,
            max_msg_size: 1 << 20,
            inject_size: 64,
            iov_limit: 4,
        }
    }

    #[test]
    fn rails_are_the_non_loopback_domains_each_once_or_as_many_as_wanted() {
        let list = [
            info("eth0", "192.0.2.0/24"),
            info("eth0", "fe80::/64"),
            info("lo", "127.0.0.1/32"),
            info("eth1", "198.51.100.0/24"),
            info("lo", "::1/128"),
        ];
        assert_eq!(rail_domains(&list, &list[0], None), ["eth0", "eth1"]);
        let bridge = [
            list[0].clone(),
            info("docker0", "fe80::/64"),
            list[3].clone(),
        ];
        assert_eq!(rail_domains(&bridge, &bridge[0], None), ["eth0", "eth1"]);
        assert_eq!(rail_domains(&list, &list[0], Some(1)), ["eth0"]);
        assert_eq!(rail_domains(&list, &list[0], Some(4)), ["eth0", "eth1"]);
        let only_lo = [info("lo", "127.0.0.1/32")];
        assert_eq!(rail_domains(&only_lo, &only_lo[0], None), ["lo"]);
    }
}
