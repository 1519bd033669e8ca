use super::*;
use crate::sim::{Faults, Member, Sim};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

const INSTANCE: u64 = 0x5eed;

impl Member for Agreement {
    fn start(&mut self, out: &mut Vec<Action>) {
        Agreement::start(self, out);
    }
    fn on_message(&mut self, from: u32, msg: Message, out: &mut Vec<Action>) {
        Agreement::on_message(self, from, msg, out).expect("simulated messages are well-formed");
    }
    fn on_failure(&mut self, failed: u32, out: &mut Vec<Action>) {
        Agreement::on_failure(self, failed, out).expect("simulated notices are well-formed");
    }
}

/// Member `m`'s flag clears bit `m` only, so the decided flag names its contributors (when
/// n ≤ 32; members from 32 on contribute all ones).
fn flag_of(m: u32) -> u32 {
    !1u32.checked_shl(m).unwrap_or(0)
}

fn is_repropose(out: &[Action]) -> bool {
    out.iter().any(|Action::Send { msg, .. }| {
        matches!(msg, Message::Propose { ballot, .. } if *ballot > 0)
            || matches!(msg, Message::Prepare { .. })
    })
}

/// Runs one agreement and checks uniform agreement, validity and termination.
fn run_and_check(n: u32, seed: u64, faults: Faults) -> Sim<Agreement> {
    let mut sim: Sim<Agreement> = Sim::new(n, seed, faults);
    sim.run(&mut |m, failed| Agreement::new(m, n, INSTANCE, flag_of(m), failed));
    let context = format!("n={n} seed={seed}");
    let mut decided: Option<Decision> = None;
    let mut started = MemberSet::new();
    let mut dead = MemberSet::new();
    for m in 0..n {
        let (alive, member) = sim.member(m);
        if !alive {
            dead.insert(m);
        }
        if member.is_some() {
            started.insert(m);
        }
        let decision = member.and_then(|a| a.decision());
        assert!(
            !alive || decision.is_some(),
            "{context}: survivor {m} did not decide"
        );
        if let Some(d) = decision {
            let first = decided.get_or_insert_with(|| d.clone());
            assert_eq!(first, d, "{context}: member {m} decided differently");
        }
    }
    let d = decided.expect("a survivor decided");
    // Validity: the contributors (bits cleared) include every member not held failed, and are
    // members that did contribute; `failed` names only members that really failed.
    if n > 32 {
        return sim;
    }
    let contributors: MemberSet = (0..n).filter(|&m| d.flag & (1 << m) == 0).collect();
    assert_eq!(d.flag | ((1u64 << n) - 1) as u32, u32::MAX, "{context}");
    for m in 0..n {
        if !d.failed.contains(m) {
            assert!(contributors.contains(m), "{context}: {m} live, not in flag");
        }
        if contributors.contains(m) {
            assert!(
                started.contains(m),
                "{context}: {m} in flag, never contributed"
            );
        }
        if d.failed.contains(m) {
            assert!(dead.contains(m), "{context}: live {m} held failed");
        }
    }
    sim
}

fn random_faults(n: u32, rng: &mut ChaCha8Rng) -> Faults {
    let most = n as usize - 1;
    let max_failures = match rng.random_range(0..5) {
        0 => 0,
        1 => 1.min(most),
        2 => 2.min(most),
        3 => most,
        _ => rng.random_range(0..=most),
    };
    Faults {
        max_failures,
        kill_chance: [0.0, 0.01, 0.05, 0.2][rng.random_range(0..4)],
        mid_step_chance: [0.0, 0.05, 0.3][rng.random_range(0..3)],
        trigger_chance: [0.0, 0.5, 1.0][rng.random_range(0..3)],
        trigger: Some(is_repropose),
        lowest_first: rng.random_bool(0.5),
        drop_from_dead: rng.random_bool(0.5),
        late_from_dead: rng.random_bool(0.5),
        ..Faults::default()
    }
}

#[test]
fn agreement_holds_under_random_schedules_and_failures() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut with_failures = 0;
    let mut coordinators_failed = 0;
    for run in 0..2000u64 {
        let n = (run % 17) as u32 + 1;
        let faults = random_faults(n, &mut rng);
        let sim = run_and_check(n, run, faults);
        with_failures += usize::from(sim.failures() > 0);
        coordinators_failed += usize::from(!sim.member(0).0);
    }
    eprintln!("{with_failures} runs with failures, {coordinators_failed} with member 0 failed");
    // Not vacuous: most runs lose members, many of them their first coordinator.
    assert!(with_failures > 1000 && coordinators_failed > 400);
}

#[test]
fn every_failure_count_up_to_n_minus_one() {
    for n in [2u32, 5, 9, 17] {
        for f in 0..n as usize {
            for seed in 0..20 {
                let faults = Faults {
                    max_failures: f,
                    kill_chance: 0.1,
                    mid_step_chance: 0.2,
                    lowest_first: seed % 2 == 0,
                    drop_from_dead: seed % 3 == 0,
                    ..Faults::default()
                };
                run_and_check(n, seed * 100 + f as u64, faults);
            }
        }
    }
}

#[test]
fn coordinators_failing_while_re_proposing() {
    for seed in 0..300 {
        let n = 3 + (seed % 10) as u32;
        let faults = Faults {
            max_failures: n as usize - 1,
            kill_chance: 0.02,
            trigger_chance: 1.0,
            trigger: Some(is_repropose),
            lowest_first: true,
            drop_from_dead: seed % 3 == 0,
            late_from_dead: seed % 2 == 0,
            ..Faults::default()
        };
        run_and_check(n, seed, faults);
    }
}

/// Member 0 fails having sent the commit to one member only: the others learn the decision
/// from that member when it becomes coordinator, and nobody decides otherwise.
#[test]
fn a_commit_that_reached_one_member() {
    for seed in 0..200 {
        let n = 2 + (seed % 12) as u32;
        let faults = Faults {
            max_failures: 1,
            trigger_chance: 1.0,
            trigger: Some(|out: &[Action]| {
                out.len() > 1
                    && out
                        .iter()
                        .all(|Action::Send { msg, .. }| matches!(msg, Message::Commit { .. }))
            }),
            drop_from_dead: false,
            ..Faults::default()
        };
        run_and_check(n, seed, faults);
    }
}

#[test]
fn messages_without_failures_are_four_per_member() {
    for n in [1u32, 2, 3, 17, 64] {
        for seed in 0..5 {
            let sim = run_and_check(n, seed, Faults::default());
            assert_eq!(sim.sent, 4 * (n as usize - 1), "n={n}");
        }
    }
    let sim = run_and_check(64, 99, Faults::default());
    assert!(sim.sent <= 4 * 63, "O(n): {} messages at n = 64", sim.sent);
}

#[test]
fn messages_before_start_wait_for_it() {
    let mut one = Agreement::new(1, 2, 7, 0b10, &MemberSet::new());
    let mut out = Vec::new();
    let propose = Message::Propose {
        instance: 7,
        ballot: 0,
        value: Decision {
            flag: 0b10,
            failed: MemberSet::new(),
        },
    };
    one.on_message(0, propose, &mut out).unwrap();
    assert!(out.is_empty(), "nothing is sent before start");
    one.start(&mut out);
    assert_eq!(out.len(), 2, "contribution, then acceptance: {out:?}");
    assert!(matches!(
        out[1],
        Action::Send {
            to: 0,
            msg: Message::Accept { ballot: 0, .. }
        }
    ));
}

#[test]
fn bad_events_are_refused_by_name() {
    let mut a = Agreement::new(1, 4, 7, 1, &MemberSet::new());
    let mut out = Vec::new();
    a.start(&mut out);
    out.clear();
    let prepare = |instance, ballot| Message::Prepare { instance, ballot };
    assert_eq!(
        a.on_message(2, prepare(8, 2), &mut out),
        Err(ProtocolError::WrongInstance {
            expected: 7,
            got: 8
        })
    );
    assert_eq!(
        a.on_message(2, prepare(7, 3), &mut out),
        Err(ProtocolError::BallotNotSender { ballot: 3, from: 2 })
    );
    assert_eq!(
        a.on_message(4, prepare(7, 4), &mut out),
        Err(ProtocolError::MemberOutOfRange { member: 4, n: 4 })
    );
    assert_eq!(
        a.on_message(1, prepare(7, 1), &mut out),
        Err(ProtocolError::FromSelf)
    );
    assert_eq!(
        a.on_message(0, Message::Revoke { epoch: 7 }, &mut out),
        Err(ProtocolError::NotAgreement)
    );
    let commit = Message::Commit {
        instance: 7,
        decision: Decision {
            flag: 0,
            failed: [9].into_iter().collect(),
        },
    };
    assert_eq!(
        a.on_message(0, commit, &mut out),
        Err(ProtocolError::MemberOutOfRange { member: 9, n: 4 })
    );
    assert_eq!(a.on_failure(1, &mut out), Err(ProtocolError::SelfFailed));
    assert_eq!(
        a.on_failure(5, &mut out),
        Err(ProtocolError::MemberOutOfRange { member: 5, n: 4 })
    );
    assert!(out.is_empty() && a.decision().is_none());
}

/// A decided member answers a coordinator that has not heard of the decision with the commit.
#[test]
fn a_decided_member_still_answers() {
    let mut a = Agreement::new(2, 3, 7, 1, &MemberSet::new());
    let mut out = Vec::new();
    a.start(&mut out);
    let decision = Decision {
        flag: 1,
        failed: MemberSet::new(),
    };
    let commit = Message::Commit {
        instance: 7,
        decision: decision.clone(),
    };
    a.on_message(0, commit.clone(), &mut out).unwrap();
    assert_eq!(a.decision(), Some(&decision));
    out.clear();
    let propose = Message::Propose {
        instance: 7,
        ballot: 1,
        value: decision.clone(),
    };
    a.on_message(1, propose, &mut out).unwrap();
    assert_eq!(out, vec![Action::Send { to: 1, msg: commit }]);
}

/// Small communicators, many failures part-way through steps, messages of the failed lost or
/// late: where a stale proposal of a failed coordinator meets a later ballot.
#[test]
fn stale_proposals_of_failed_coordinators() {
    for seed in 0..3000u64 {
        let n = 3 + (seed % 3) as u32;
        let faults = Faults {
            max_failures: n as usize - 1,
            kill_chance: 0.1,
            mid_step_chance: 0.3,
            lowest_first: true,
            drop_from_dead: true,
            late_from_dead: true,
            ..Faults::default()
        };
        run_and_check(n, seed, faults);
    }
}

/// Takes the sends of `out` as (to, message), emptying it.
fn sends(out: &mut Vec<Action>) -> Vec<(u32, Message)> {
    out.drain(..)
        .map(|Action::Send { to, msg }| (to, msg))
        .collect()
}

/// Member 0 proposes and fails; its proposal to member 1 is lost, its proposal to member 2 is
/// late. Member 1 leads, decides on fresh contributions and fails before its commit leaves. The
/// late proposal of ballot 0 then reaches member 2, which has promised ballot 1: it must not
/// replace what member 2 accepted, or member 2 would decide otherwise than member 1 did.
#[test]
fn a_late_proposal_never_replaces_a_later_acceptance() {
    let none = MemberSet::new();
    let mut a: Vec<Agreement> = (0..3)
        .map(|m| Agreement::new(m, 3, INSTANCE, flag_of(m), &none))
        .collect();
    let mut out = Vec::new();
    for member in a.iter_mut() {
        member.start(&mut out);
    }
    for (to, msg) in sends(&mut out) {
        assert_eq!(to, 0);
        let from = if matches!(msg, Message::Contribute { flag, .. } if flag == flag_of(1)) {
            1
        } else {
            2
        };
        a[0].on_message(from, msg, &mut out).unwrap();
    }
    let proposals = sends(&mut out);
    assert_eq!(proposals.len(), 2, "{proposals:?}");
    let late = proposals.into_iter().find(|(to, _)| *to == 2).unwrap().1;
    // Member 0 fails; member 1 hears of it and leads.
    a[1].on_failure(0, &mut out).unwrap();
    let [(2, prepare)] = &sends(&mut out)[..] else {
        panic!("member 1 asks member 2")
    };
    a[2].on_message(1, prepare.clone(), &mut out).unwrap();
    let [(1, promise)] = &sends(&mut out)[..] else {
        panic!("member 2 promises")
    };
    a[1].on_message(2, promise.clone(), &mut out).unwrap();
    let [(2, propose)] = &sends(&mut out)[..] else {
        panic!("member 1 proposes")
    };
    a[2].on_message(1, propose.clone(), &mut out).unwrap();
    let [(1, accept)] = &sends(&mut out)[..] else {
        panic!("member 2 accepts")
    };
    a[1].on_message(2, accept.clone(), &mut out).unwrap();
    let decided_by_1 = a[1].decision().cloned().expect("member 1 decides");
    out.clear(); // Member 1 fails before its commit leaves.
    a[2].on_message(0, late, &mut out).unwrap();
    a[2].on_failure(0, &mut out).unwrap();
    a[2].on_failure(1, &mut out).unwrap();
    assert_eq!(a[2].decision(), Some(&decided_by_1));
    assert_eq!(decided_by_1.failed, [0].into_iter().collect());
}
