use super::*;
use crate::sim::{Faults, Member, Sim};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

const EPOCH: u64 = 3;

/// A member's revoke, and whether the member itself revokes when it starts.
struct Revoker {
    revoke: Revoke,
    revokes: bool,
}

impl Member for Revoker {
    fn start(&mut self, out: &mut Vec<Action>) {
        if self.revokes {
            self.revoke.revoke_local(out);
        }
    }
    fn on_message(&mut self, from: u32, msg: Message, out: &mut Vec<Action>) {
        self.revoke
            .on_message(from, msg, out)
            .expect("simulated messages are well-formed");
    }
    fn on_failure(&mut self, failed: u32, out: &mut Vec<Action>) {
        self.revoke
            .on_failure(failed, out)
            .expect("simulated notices are well-formed");
    }
}

/// Runs one revoke; checks that either every survivor is revoked or none is, and that every
/// survivor is when a surviving member revoked. Returns the simulator and whether survivors were
/// revoked.
fn run_and_check(n: u32, seed: u64, revokers: &MemberSet, faults: Faults) -> (Sim<Revoker>, bool) {
    let mut sim: Sim<Revoker> = Sim::new(n, seed, faults);
    sim.run(&mut |m, failed| {
        let mut revoke = Revoke::new(m, n, EPOCH);
        let mut ignored = Vec::new();
        for f in failed.iter() {
            revoke.on_failure(f, &mut ignored).unwrap();
        }
        Revoker {
            revoke,
            revokes: revokers.contains(m),
        }
    });
    let context = format!("n={n} seed={seed}");
    let survivors: Vec<u32> = (0..n).filter(|&m| sim.member(m).0).collect();
    let revoked = |m: u32| sim.member(m).1.is_some_and(|r| r.revoke.is_revoked());
    let any = survivors.iter().any(|&m| revoked(m));
    let all = survivors.iter().all(|&m| revoked(m));
    assert!(!any || all, "{context}: some survivors revoked, not all");
    if survivors.iter().any(|&m| revokers.contains(m)) {
        assert!(
            all,
            "{context}: a surviving revoker, not every survivor revoked"
        );
    }
    (sim, all)
}

#[test]
fn every_survivor_learns_under_random_schedules_and_failures() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut revoked_despite_failures = 0;
    for run in 0..2000u64 {
        let n = (run % 17) as u32 + 1;
        let most = n as usize - 1;
        let revokers: MemberSet = (0..rng.random_range(1..=2))
            .map(|_| rng.random_range(0..n))
            .collect();
        let faults = Faults {
            max_failures: [0, 1.min(most), 2.min(most), most][rng.random_range(0..4)],
            kill_chance: [0.01, 0.05, 0.2][rng.random_range(0..3)],
            mid_step_chance: [0.0, 0.1, 0.5][rng.random_range(0..3)],
            lowest_first: rng.random_bool(0.3),
            drop_from_dead: rng.random_bool(0.5),
            ..Faults::default()
        };
        let (sim, all) = run_and_check(n, run, &revokers, faults);
        revoked_despite_failures += usize::from(all && sim.failures() > 0);
    }
    eprintln!("{revoked_despite_failures} runs where every survivor learnt despite failures");
    assert!(revoked_despite_failures > 800, "not vacuous");
}

/// The revoker fails after sending to one member only; that member survives, and with it every
/// survivor learns, whatever else fails.
#[test]
fn a_revoker_that_reached_one_member() {
    for seed in 0..300u64 {
        let n = 2 + (seed % 16) as u32;
        let revoker = (seed % u64::from(n)) as u32;
        let faults = Faults {
            max_failures: n as usize - 1,
            kill_chance: 0.1,
            mid_step_chance: 0.3,
            // The one notice the revoker sent arrives; later failures may lose their messages.
            drop_from_dead: false,
            doomed: Some(revoker),
            ..Faults::default()
        };
        let (_, all) = run_and_check(n, seed, &[revoker].into_iter().collect(), faults);
        assert!(
            all,
            "seed {seed}: the notice reached a survivor, so all learn"
        );
    }
}

#[test]
fn messages_without_failures_are_at_most_two_log_n_per_member() {
    for n in [1u32, 2, 3, 16, 17, 64] {
        for seed in 0..5 {
            let revokers = [(seed as u32 * 7) % n].into_iter().collect();
            let (sim, all) = run_and_check(n, seed, &revokers, Faults::default());
            assert!(all);
            let log = u64::from(n.next_power_of_two().trailing_zeros());
            let bound = 2 * u64::from(n) * log;
            assert!(
                sim.sent as u64 <= bound,
                "n={n}: {} messages, bound {bound}",
                sim.sent
            );
            assert!(
                sim.sent as u64 >= u64::from(n) - 1,
                "each member is told once"
            );
        }
    }
}

#[test]
fn a_failed_neighbour_is_replaced_by_the_next_live_one() {
    let mut r = Revoke::new(0, 8, EPOCH);
    let mut out = Vec::new();
    r.revoke_local(&mut out);
    let targets = |out: &[Action]| -> Vec<u32> {
        let mut t: Vec<u32> = out.iter().map(|Action::Send { to, .. }| *to).collect();
        t.sort();
        t
    };
    // Distances 1, 2, 4 either way around 8 members.
    assert_eq!(targets(&out), vec![1, 2, 4, 6, 7]);
    out.clear();
    r.on_failure(1, &mut out).unwrap();
    assert_eq!(targets(&out), vec![], "2 already has it");
    r.on_failure(2, &mut out).unwrap();
    assert_eq!(targets(&out), vec![3]);
    out.clear();
    r.on_failure(5, &mut out).unwrap();
    assert!(out.is_empty(), "5 was nobody's replacement yet");
    assert!(r.is_revoked());
}

#[test]
fn bad_events_are_refused_by_name() {
    let mut r = Revoke::new(1, 4, EPOCH);
    let mut out = Vec::new();
    assert_eq!(
        r.on_message(0, Message::Revoke { epoch: 2 }, &mut out),
        Err(ProtocolError::WrongEpoch {
            expected: 3,
            got: 2
        })
    );
    assert_eq!(
        r.on_message(4, Message::Revoke { epoch: 3 }, &mut out),
        Err(ProtocolError::MemberOutOfRange { member: 4, n: 4 })
    );
    assert_eq!(
        r.on_message(1, Message::Revoke { epoch: 3 }, &mut out),
        Err(ProtocolError::FromSelf)
    );
    let prepare = Message::Prepare {
        instance: 3,
        ballot: 0,
    };
    assert_eq!(
        r.on_message(0, prepare, &mut out),
        Err(ProtocolError::NotRevoke)
    );
    assert_eq!(r.on_failure(1, &mut out), Err(ProtocolError::SelfFailed));
    assert!(out.is_empty() && !r.is_revoked());
    r.on_message(0, Message::Revoke { epoch: 3 }, &mut out)
        .unwrap();
    assert!(r.is_revoked());
    assert!(
        out.iter().all(|Action::Send { to, .. }| *to != 0),
        "never back to the sender"
    );
}
