//! Wiring up the fabric: each rank with peers on other hosts opens an endpoint (when
//! `FERRY_NET` and the machine allow), publishes its provider and name, and a pair of ranks
//! uses the fabric when both opened one on the same provider and their path is direct (no NAT,
//! relay or punched hole: those stay on TCP).

use super::{Card, Ranks};
use crate::bootstrap::Bootstrap;
use crate::config::{Config, NetKind};
use crate::error::Error;
use crate::ofi::FabricTransport;
use ferry_fabric::{Endpoint, EndpointSpec, Library};

/// Largest frame payload over the fabric. Kept under the eager size of the providers' own
/// message layers (`ofi_rxm` sends up to 16 KiB whole), so that no frame is split into a
/// provider-level rendezvous that could complete after frames sent later; larger messages go
/// as RTS_READ.
const FRAME_PAYLOAD: usize = 8 << 10;

/// The value published when a rank has no fabric.
const NONE: &str = "-";

/// Opens this rank's endpoint and publishes `fabric-<uid>`; `None` (published as such) when
/// `FERRY_NET` or the machine rule it out. A rank that wanted the fabric (`FERRY_NET=ofi`)
/// and cannot open it says why and goes on over TCP.
pub(super) fn open(
    config: &Config,
    ranks: Ranks,
    boot: &mut Bootstrap,
) -> Result<Option<FabricTransport>, Error> {
    let key = format!("fabric-{}", ranks.me());
    let opened = match config.net {
        NetKind::Tcp => Ok(None),
        net => open_endpoint(net, ranks.me(), config.connect_timeout()),
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
        Some(f) => format!("{}|{}", f.provider(), hex(&f.name()?)),
        None => NONE.to_string(),
    };
    boot.put(&key, &value)?;
    Ok(fabric)
}

/// The endpoint `net` asks for, or why there is none; a peer towards which nothing moves for
/// `patience` (the connect timeout) is lost.
fn open_endpoint(
    net: NetKind,
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
    let spec = EndpointSpec {
        // Its first layer names it as FI_PROVIDER does ("verbs" for "verbs;ofi_rxm").
        provider: chosen.provider.split(';').next().map(str::to_string),
        domain: Some(chosen.domain.clone()),
        ..EndpointSpec::default()
    };
    let ep = Endpoint::open(&lib, &spec).map_err(|e| e.to_string())?;
    FabricTransport::open(ep, me, FRAME_PAYLOAD, patience)
        .map(Some)
        .map_err(|e| e.to_string())
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
        let (provider, name) = text.split_once('|').ok_or_else(bad)?;
        let name = unhex(name).ok_or_else(bad)?;
        cards[r as usize].fabric = Some((provider.to_string(), name));
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
            Some((provider, name)) if provider == fabric.provider() && direct => {
                fabric.set_peer(uid, name.clone(), cards[peer as usize].pid);
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
/// fabric, by provider (`ofi:<provider>`), one line each; nothing when no rank has one.
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
        published.push(text.split_once('|').map(|(p, _)| p.to_string()));
    }
    let mut by_provider: Vec<(String, Vec<String>)> = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            let (pa, pb) = (&published[a as usize], &published[b as usize]);
            let direct = ferry_grid::path::plan(guids, a, b).path == ferry_grid::Path::Direct;
            let apart = cards[a as usize].node != cards[b as usize].node;
            let (Some(provider), true, true) = (pa, pa == pb && direct, apart) else {
                continue;
            };
            let pair = format!("r{a} <-> r{b}");
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
}
