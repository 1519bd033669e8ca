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
//!
//! A connection opened after a relay died must not pick it: [`RelayDeaths`] keeps the relays a
//! rank saw go and applies the same rule over the others ([`RelayDeaths::choose`]).

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

/// Which relays of the grid went away, as far as this rank has seen, so that connections it
/// opens later go through the live ones. No I/O: the transport reports what it saw.
///
/// A relay is known gone when this rank's registration with it ended (a relay of its own
/// cluster) or when a connection through it failed (a relay of a peer's cluster: the only sign
/// a dialer gets). A connection's failure may also be the peer's, but then the job ends
/// anyway; and a relay that comes back is not used again, which costs spreading, not
/// correctness.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayDeaths {
    /// Front node names of the relays seen gone.
    gone: Vec<String>,
}

impl RelayDeaths {
    /// Records that the relay on front node `front` went away. Returns whether that was news.
    pub fn went_away(&mut self, front: &str) -> bool {
        if self.is_gone(front) {
            return false;
        }
        self.gone.push(front.to_string());
        true
    }

    /// Whether the relay on `front` was seen gone.
    pub fn is_gone(&self, front: &str) -> bool {
        self.gone.iter().any(|g| g == front)
    }

    /// The index into `fronts` (the acceptor's cluster's relays, `front` first) that rail
    /// `rail` of a connection from `dialer` to `acceptor` opened now goes through: [`pick`]
    /// over the relays not seen gone, so that while none went away it is exactly [`pick`],
    /// and after a death the later connections spread over the survivors in the same way.
    /// None when every one of them went away.
    pub fn choose<'a>(
        &self,
        (dialer, acceptor, rail): (u32, u32, u16),
        fronts: impl IntoIterator<Item = &'a str>,
    ) -> Option<usize> {
        let live: Vec<usize> = fronts
            .into_iter()
            .enumerate()
            .filter(|(_, f)| !self.is_gone(f))
            .map(|(i, _)| i)
            .collect();
        if live.is_empty() {
            return None;
        }
        Some(live[pick(dialer, acceptor, rail, live.len())])
    }
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

    #[test]
    fn with_no_death_the_choice_is_pick() {
        let deaths = RelayDeaths::default();
        let fronts = ["fb", "fb2", "fb3"];
        for d in 0..6 {
            for rail in 0..3 {
                assert_eq!(
                    deaths.choose((d, 1, rail), fronts),
                    Some(pick(d, 1, rail, 3))
                );
            }
        }
    }

    #[test]
    fn a_relay_seen_gone_is_not_chosen_again_and_the_rest_share_its_load() {
        let mut deaths = RelayDeaths::default();
        assert!(deaths.went_away("fb2"));
        assert!(!deaths.went_away("fb2"), "no news the second time");
        assert!(deaths.is_gone("fb2") && !deaths.is_gone("fb"));
        let fronts = ["fb", "fb2", "fb3"];
        let mut count = [0; 3];
        for dialer in 0..20 {
            for rail in 0..3 {
                let which = deaths.choose((dialer, 7, rail), fronts);
                count[which.expect("two relays are left")] += 1;
            }
        }
        assert_eq!(count, [30, 0, 30], "fb2 gets nothing, fb and fb3 half each");
        // Another cluster's fronts are another list: fb2's death does not touch them.
        assert_eq!(
            deaths.choose((0, 1, 0), ["fa", "fa2"]),
            Some(pick(0, 1, 0, 2))
        );
    }

    #[test]
    fn when_every_relay_went_away_there_is_no_choice() {
        let mut deaths = RelayDeaths::default();
        deaths.went_away("fb");
        assert_eq!(deaths.choose((0, 1, 0), ["fb"]), None);
        assert_eq!(deaths.choose((0, 1, 0), []), None);
        deaths.went_away("fb2");
        assert_eq!(deaths.choose((3, 4, 1), ["fb", "fb2", "fb3"]), Some(2));
    }
}
