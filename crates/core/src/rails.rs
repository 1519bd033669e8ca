//! Which rail takes the next chunk of a striped rendezvous (channel bonding), without I/O.
//!
//! The engine asks [`Striper::choose`] whenever a rail could take a chunk, passing what each
//! rail holds: bytes written to its socket but not acknowledged by the peer (`SIOCOUTQ`) plus
//! the unwritten rest of the frame it is writing. From the same numbers over time the striper
//! measures each rail's delivery rate, and the weighted policy gives the chunk to the rail
//! expected to deliver it first. When that rail is still busy it waits rather than handing the
//! chunk to a slower one, so a slow rail never holds a message back at its end. Round-robin
//! (the seed's policy) hands chunks out in turn whatever the rails' speeds.

use crate::config::RailPolicy;
use std::time::Duration;

/// What one rail holds when a chunk is to be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RailLoad {
    /// False once the rail failed.
    pub alive: bool,
    /// It has no frame of its own half-written and can take a chunk now.
    pub free: bool,
    /// Bytes given to it that the peer has not acknowledged yet.
    pub backlog: u64,
    /// Bytes given to it since it opened.
    pub written: u64,
}

/// Delivery rate of one rail, measured while it had a backlog (so the rate is the link's,
/// not the application's).
#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    /// Bytes per second; 0 until measured.
    bytes_per_sec: f64,
    /// Time and bytes delivered at the start of the current measurement, if it has a backlog.
    mark: Option<(Duration, u64)>,
    /// When the last sample was taken.
    sampled: Duration,
}

/// Shortest interval a rate sample covers: shorter ones are dominated by timer noise.
const SAMPLE: Duration = Duration::from_millis(10);
/// Weight of a new sample in the moving average.
const GAIN: f64 = 0.3;
/// A rate this old counts as unknown: a rail that one bad sample (slow start, a stall) made
/// look slow would otherwise never get traffic again, hence never a better sample.
const STALE: Duration = Duration::from_millis(100);

impl Rate {
    fn observe(&mut self, now: Duration, load: &RailLoad) {
        let delivered = load.written.saturating_sub(load.backlog);
        if load.backlog == 0 {
            // Idle time says nothing about the link.
            self.mark = None;
            return;
        }
        match self.mark {
            None => self.mark = Some((now, delivered)),
            Some((then, before)) => {
                let elapsed = now.saturating_sub(then);
                if elapsed >= SAMPLE {
                    let sample = (delivered - before.min(delivered)) as f64 / elapsed.as_secs_f64();
                    self.bytes_per_sec = if self.bytes_per_sec == 0.0 {
                        sample
                    } else {
                        (1.0 - GAIN) * self.bytes_per_sec + GAIN * sample
                    };
                    self.mark = Some((now, delivered));
                    self.sampled = now;
                }
            }
        }
    }
}

/// Places the chunks of striped messages to one peer.
#[derive(Debug, Clone)]
pub(crate) struct Striper {
    policy: RailPolicy,
    rates: Vec<Rate>,
    turn: usize,
    /// Time of the last observation.
    now: Duration,
}

impl Striper {
    pub(crate) fn new(policy: RailPolicy, rails: usize) -> Striper {
        Striper {
            policy,
            rates: vec![Rate::default(); rails],
            turn: 0,
            now: Duration::ZERO,
        }
    }

    /// Updates the rate measurements from the rails' current state.
    pub(crate) fn observe(&mut self, now: Duration, rails: &[RailLoad]) {
        self.now = now;
        for (rate, load) in self.rates.iter_mut().zip(rails) {
            rate.observe(now, load);
        }
    }

    /// The measured rate of `rail` in bytes per second (0 until measured).
    pub(crate) fn rate(&self, rail: usize) -> f64 {
        self.rates.get(rail).map_or(0.0, |r| r.bytes_per_sec)
    }

    /// The rail that should take a chunk of `chunk` bytes now, or `None` to wait for one.
    pub(crate) fn choose(&mut self, rails: &[RailLoad], chunk: u64) -> Option<usize> {
        match self.policy {
            RailPolicy::RoundRobin => {
                let alive = rails.iter().filter(|r| r.alive).count();
                if alive == 0 {
                    return None;
                }
                // Skip dead rails; wait for the rail whose turn it is.
                while !rails[self.turn % rails.len()].alive {
                    self.turn += 1;
                }
                let rail = self.turn % rails.len();
                rails[rail].free.then(|| {
                    self.turn += 1;
                    rail
                })
            }
            RailPolicy::Weighted => {
                // Unmeasured rails, and those not measured lately, count as fast as the fastest
                // measured one, so that every rail gets traffic and hence a measurement.
                let current = |r: &Rate| match self.now.saturating_sub(r.sampled) < STALE {
                    true => r.bytes_per_sec,
                    false => 0.0,
                };
                let fastest = self.rates.iter().map(current).fold(0.0, f64::max);
                let finish = |i: usize, load: &RailLoad| {
                    let rate = match current(&self.rates[i]) {
                        r if r > 0.0 => r,
                        _ if fastest > 0.0 => fastest,
                        _ => 1.0,
                    };
                    (load.backlog + chunk) as f64 / rate
                };
                let best = rails
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| l.alive)
                    .min_by(|(i, a), (j, b)| finish(*i, a).total_cmp(&finish(*j, b)))?;
                best.1.free.then_some(best.0)
            }
        }
    }
}

impl RailLoad {
    /// Bytes given to the rail that the peer surely has: those TCP acknowledged, less
    /// `held_in_relay`, what a relay in between may have acknowledged without passing on yet
    /// (`ferry_wire::relay::HELD_IN_RELAY`, 0 on a direct connection). Ordered frames that
    /// end past it are kept, to go again if the rail fails.
    pub fn surely_delivered(&self, held_in_relay: u64) -> u64 {
        self.written
            .saturating_sub(self.backlog)
            .saturating_sub(held_in_relay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn through_a_relay_less_is_surely_delivered() {
        let load = RailLoad {
            alive: true,
            free: true,
            backlog: 100,
            written: 1000,
        };
        assert_eq!(load.surely_delivered(0), 900);
        assert_eq!(load.surely_delivered(400), 500);
        assert_eq!(load.surely_delivered(u64::MAX), 0);
        let odd = RailLoad {
            backlog: 2000,
            ..load
        };
        assert_eq!(
            odd.surely_delivered(0),
            0,
            "a backlog above the count is no underflow"
        );
    }

    /// Simulates rails of the given rates (bytes per ms), each with a socket buffer of `buffer`
    /// bytes, carrying `total` bytes in chunks of `chunk`; returns bytes per rail and the time
    /// (ms) the last byte arrived.
    fn stripe(policy: RailPolicy, rates: &[u64], total: u64, chunk: u64) -> (Vec<u64>, u64) {
        let buffer = 8 * chunk;
        let mut striper = Striper::new(policy, rates.len());
        let mut loads: Vec<RailLoad> = rates
            .iter()
            .map(|_| RailLoad {
                alive: true,
                free: true,
                backlog: 0,
                written: 0,
            })
            .collect();
        let (mut left, mut ms) = (total, 0u64);
        while left > 0 || loads.iter().any(|l| l.backlog > 0) {
            for l in loads.iter_mut() {
                l.free = l.backlog + chunk <= buffer;
            }
            striper.observe(Duration::from_millis(ms), &loads);
            while left > 0 {
                let Some(r) = striper.choose(&loads, chunk) else {
                    break;
                };
                let n = chunk.min(left);
                left -= n;
                loads[r].backlog += n;
                loads[r].written += n;
                loads[r].free = loads[r].backlog + chunk <= buffer;
            }
            ms += 1;
            for (l, rate) in loads.iter_mut().zip(rates) {
                l.backlog -= l.backlog.min(*rate);
            }
        }
        (loads.iter().map(|l| l.written).collect(), ms)
    }

    #[test]
    fn weighted_gives_a_slow_rail_proportionally_less() {
        let (bytes, ms) = stripe(RailPolicy::Weighted, &[4000, 1000], 64 << 20, 256 << 10);
        let share = bytes[1] as f64 / (bytes[0] + bytes[1]) as f64;
        assert!((0.15..=0.25).contains(&share), "slow rail share {share}");
        // The ideal is 64 MiB / 5000 bytes per ms.
        let ideal = (64u64 << 20) / 5000;
        assert!(ms as f64 <= ideal as f64 * 1.1, "{ms} ms vs ideal {ideal}");
    }

    #[test]
    fn round_robin_splits_evenly_and_waits_for_the_slow_rail() {
        let (bytes, ms) = stripe(RailPolicy::RoundRobin, &[4000, 1000], 64 << 20, 256 << 10);
        assert_eq!(bytes[0], bytes[1]);
        let (_, weighted) = stripe(RailPolicy::Weighted, &[4000, 1000], 64 << 20, 256 << 10);
        assert!(
            weighted * 3 / 2 < ms,
            "weighted {weighted} ms, round-robin {ms} ms"
        );
    }

    #[test]
    fn equal_rails_share_equally() {
        for rails in [2usize, 4] {
            let (bytes, _) = stripe(RailPolicy::Weighted, &vec![1000; rails], 16 << 20, 1 << 16);
            let (lo, hi) = (bytes.iter().min().unwrap(), bytes.iter().max().unwrap());
            assert!(hi - lo <= 4 << 16, "{bytes:?}");
        }
    }

    #[test]
    fn a_rail_measured_slow_once_is_tried_again() {
        let mut s = Striper::new(RailPolicy::Weighted, 2);
        let load = |backlog: u64, written: u64| RailLoad {
            alive: true,
            free: true,
            backlog,
            written,
        };
        // Rail 1 delivers 1 KB in 10 ms once (slow start), rail 0 keeps delivering 1 MB.
        s.observe(Duration::ZERO, &[load(1 << 20, 1 << 20), load(4096, 4096)]);
        s.observe(
            Duration::from_millis(10),
            &[load(1 << 20, 2 << 20), load(3072, 4096)],
        );
        assert!(s.rate(1) < s.rate(0) / 100.0);
        let idle = [load(1 << 20, 2 << 20), load(0, 4096)];
        assert_eq!(s.choose(&idle, 1 << 18), Some(0), "rail 1 looks slow");
        // Rail 0 stays measured; rail 1's one sample grows old.
        for ms in [60u64, 120, 180] {
            let delivered = (ms / 10) << 20;
            s.observe(
                Duration::from_millis(ms),
                &[load(1 << 20, delivered + (1 << 20)), load(0, 4096)],
            );
        }
        assert_eq!(
            s.choose(&idle, 1 << 18),
            Some(1),
            "an old sample is not believed"
        );
    }

    #[test]
    fn dead_rails_get_nothing() {
        let loads = [
            RailLoad {
                alive: true,
                free: true,
                backlog: 1 << 20,
                written: 1 << 20,
            },
            RailLoad {
                alive: false,
                free: true,
                backlog: 0,
                written: 0,
            },
        ];
        for policy in [RailPolicy::Weighted, RailPolicy::RoundRobin] {
            let mut s = Striper::new(policy, 2);
            for _ in 0..4 {
                assert_eq!(s.choose(&loads, 4096), Some(0));
            }
        }
        let all_dead = [RailLoad {
            alive: false,
            ..loads[0]
        }];
        assert_eq!(
            Striper::new(RailPolicy::RoundRobin, 1).choose(&all_dead, 1),
            None
        );
        assert_eq!(
            Striper::new(RailPolicy::Weighted, 1).choose(&all_dead, 1),
            None
        );
    }
}
