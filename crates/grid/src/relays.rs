//! Which of a private cluster's relays a connection goes through.
//!
//! A cluster may have several front nodes, each with a relay. The dialer of a pair picks, for
//! each rail of the pair, one relay of the acceptor's cluster with [`pick`]:
//! `(dialer + acceptor + rail) mod relays`.
//!
//! Why this rule and not "the relay with the fewest connections": every rank dials on its own,
//! at the same moment as the others, and no rank knows how many connections a relay already
//! carries (asking would cost a round trip per connection and still race). The rule needs no
//! shared state and both sides compute the same answer, yet it spreads exactly, not only on
//! average as a hash would: the ranks that dial one target use the relays in turn (the
//! dialer's rank moves the choice by one), one dialer's targets do too, and consecutive rails
//! of one pair take consecutive relays, so a pair with as many rails as the cluster has relays
//! has one rail through each (trunking: its large messages are striped over all of them by the
//! multi-rail striper, and when a relay dies the rails through the others carry on).

/// The index (0-based, `front` first) of the relay that rail `rail` of the connection from
/// `dialer` to `acceptor` goes through, among `relays` relays of the acceptor's cluster.
/// `relays == 0` (no relay: a caller bug) gives 0.
pub fn pick(dialer: u32, acceptor: u32, rail: u16, relays: usize) -> usize {
    if relays == 0 {
        return 0;
    }
    let sum = u64::from(dialer) + u64::from(acceptor) + u64::from(rail);
    (sum % relays as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_relay_takes_everything() {
        for d in 0..5 {
            for rail in 0..4 {
                assert_eq!(pick(d, 9, rail, 1), 0);
            }
        }
        assert_eq!(pick(3, 4, 0, 0), 0);
    }

    #[test]
    fn dialers_of_one_target_spread_evenly() {
        for relays in 1..=4usize {
            let mut count = vec![0; relays];
            for dialer in 0..(relays as u32 * 5) {
                count[pick(dialer, 100, 0, relays)] += 1;
            }
            assert!(count.iter().all(|&c| c == 5), "{relays}: {count:?}");
        }
    }

    #[test]
    fn rails_of_a_pair_take_every_relay_once() {
        for relays in 1..=4usize {
            for (d, a) in [(0, 1), (7, 2), (u32::MAX, u32::MAX)] {
                let mut used: Vec<usize> =
                    (0..relays as u16).map(|r| pick(d, a, r, relays)).collect();
                used.sort_unstable();
                assert_eq!(used, (0..relays).collect::<Vec<_>>(), "{d}->{a}");
            }
        }
    }
}
