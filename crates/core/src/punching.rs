//! Set-up's part in hole punching (the attempt itself: `crate::tcp`'s `punch`, the protocol:
//! `ferry_wire::punch`). Between the two fences of `crate::world::init`:
//!
//! 1. [`offer`]: for every peer on another private cluster, our punching port's mapping is
//!    observed through that peer's relay and published as `punch-<me>-<peer>`;
//! 2. [`start`]: after the fence that publishes addresses, every pair whose both offers are
//!    addresses starts its attempt (both sides at once: they passed the same fence); the
//!    others are dialled as before;
//! 3. [`show_paths`]: with `FERRY_SHOW_PATHS`, rank 0 prints the matrix once every link is up,
//!    punched pairs marked.

use crate::bootstrap::Bootstrap;
use crate::config::Config;
use crate::error::Error;
use crate::tcp::TcpTransport;
use ferry_grid::Guid;
use ferry_wire::punch::{Offer, Role};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Longest wait for a relay's OBSERVED: a relay that slow would not make punching pay.
const OBSERVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Our side of one pair that may punch: the peer (world rank) and our observed local port.
pub(crate) struct Prepared {
    peer: u32,
    local: Option<SocketAddr>,
}

/// A cluster's relays: (front node, public address), `front` first.
pub(crate) type RelayList = Vec<(String, SocketAddr)>;

fn key(from: u32, to: u32) -> String {
    format!("punch-{from}-{to}")
}

/// Observes our mappings and publishes our offers (step 1). `relays[r]` is rank r's relay.
pub(crate) fn offer(
    t: &TcpTransport,
    boot: &mut Bootstrap,
    config: &Config,
    (guids, relays): (&[Guid], &[Option<SocketAddr>]),
    (base, rank): (u32, u32),
    local_ip: IpAddr,
) -> Result<Vec<Prepared>, Error> {
    // One rail only: rails run between dedicated addresses, not through NATs.
    if !config.punch || config.rails != 1 {
        return Ok(Vec::new());
    }
    let me = &guids[rank as usize];
    let mut prepared = Vec::new();
    for (peer, guid) in guids.iter().enumerate() {
        let peer = peer as u32;
        if peer == rank || !ferry_grid::path::punchable(me, guid) {
            continue;
        }
        let observed = match relays[peer as usize] {
            Some(relay) => t
                .observe_mapping(
                    relay,
                    local_ip,
                    OBSERVE_TIMEOUT.min(config.connect_timeout()),
                )
                .map_err(|why| {
                    if config.show_paths {
                        eprintln!("ferry: rank {rank}: not punching to rank {peer}: {why}");
                    }
                })
                .ok(),
            None => None,
        };
        let (local, offer) = match observed {
            Some((local, seen)) => (Some(local), Offer::At(seen)),
            None => (None, Offer::Off),
        };
        boot.put(&key(base + rank, base + peer), &offer.encode())?;
        prepared.push(Prepared { peer, local });
    }
    Ok(prepared)
}

/// Starts the attempts whose both offers are addresses (step 2); returns the peers (world
/// ranks) that are being punched to, which the caller must not dial. `relays[r]` is rank r's
/// first relay (observed through), `all_relays[r]` every relay of its cluster (the fallback
/// takes one still there).
pub(crate) fn start(
    t: &mut TcpTransport,
    boot: &mut Bootstrap,
    config: &Config,
    (guids, relays, all_relays): (&[Guid], &[Option<SocketAddr>], &[RelayList]),
    (base, rank): (u32, u32),
    prepared: Vec<Prepared>,
) -> Result<Vec<u32>, Error> {
    // Every offer first, then every attempt at once: the two sides should start as close
    // together as they can (see ferry_wire::punch::RETRY_MIN), so no attempt waits on lookups.
    let mut ready = Vec::new();
    for Prepared { peer, local } in prepared {
        let (Some(local), Some(_)) = (local, relays[peer as usize]) else {
            continue;
        };
        let theirs = match boot.lookup(&key(base + peer, base + rank))? {
            // A rank that does not punch (another FERRY_PUNCH) publishes nothing.
            None => Offer::Off,
            Some(text) => Offer::decode(&text).map_err(|e| {
                Error::Bootstrap(format!("rank {peer} published a bad punch offer: {e}"))
            })?,
        };
        if let Offer::At(target) = theirs {
            ready.push((peer, local, target));
        }
    }
    let mut started = Vec::new();
    for (peer, local, target) in ready {
        let role = match ferry_grid::path::plan(guids, rank, peer).dialer == rank {
            true => Role::Decider,
            false => Role::Follower,
        };
        t.start_punch(
            base + peer,
            (local, target),
            role,
            Duration::from_millis(config.punch_timeout_ms),
            all_relays.get(peer as usize).cloned().unwrap_or_default(),
        )?;
        started.push(peer);
    }
    Ok(started)
}

/// Prints the path matrix from rank 0 once every link is up, punched pairs marked, with the
/// time each pair that tried took to its link (step 3). Collective: every rank calls it.
pub(crate) fn show_paths(
    t: Option<&TcpTransport>,
    boot: &mut Bootstrap,
    guids: &[Guid],
    (base, rank): (u32, u32),
) -> Result<(), Error> {
    let n = guids.len() as u32;
    // Each pair once, by its decider: "peer:punched:ms" items.
    let mine: Vec<String> = t
        .map(|t| t.punch_records())
        .unwrap_or_default()
        .iter()
        .filter(|r| ferry_grid::path::plan(guids, rank, r.peer - base).dialer == rank)
        .map(|r| {
            format!(
                "{}:{}:{:.1}",
                r.peer - base,
                u8::from(r.punched),
                r.up_after.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
            )
        })
        .collect();
    if n > 1 {
        // "-" for none: an empty value would withdraw the key.
        boot.put(
            &format!("punched-{}", base + rank),
            &format!("-{}", mine.join(",")),
        )?;
        boot.fence()?;
    }
    if rank != 0 {
        return Ok(());
    }
    let mut punched = Vec::new();
    let mut fell_back = Vec::new();
    for r in 0..n {
        let text = match r == rank || n == 1 {
            true => mine.join(","),
            false => boot.get(&format!("punched-{}", base + r))?,
        };
        let text = text.strip_prefix('-').unwrap_or(&text);
        for item in text.split(',').filter(|s| !s.is_empty()) {
            let bad = || Error::Bootstrap(format!("rank {r} published a bad path record {item:?}"));
            let mut parts = item.split(':');
            let (Some(peer), Some(flag), Some(ms), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            let peer: u32 = peer.parse().map_err(|_| bad())?;
            let ms: f64 = ms.parse().map_err(|_| bad())?;
            let pair = (r.min(peer), r.max(peer), ms);
            match flag {
                "1" => punched.push(pair),
                "0" => fell_back.push(pair),
                _ => return Err(bad()),
            }
        }
    }
    punched.sort_by_key(|&(a, b, _)| (a, b));
    fell_back.sort_by_key(|&(a, b, _)| (a, b));
    let mut text = ferry_grid::path::render_matrix_punched(guids, &punched);
    for (a, b, ms) in fell_back {
        text += &format!("r{a} <-> r{b} through the relay after {ms:.1} ms (punching failed)\n");
    }
    print!("{text}");
    Ok(())
}
