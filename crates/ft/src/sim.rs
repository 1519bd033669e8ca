//! A simulated communicator for the tests: `n` members, a seeded random scheduler that delivers
//! messages in random order across pairs and in order within a pair, failures injected between
//! steps and part-way through the sends of one step, and failure notices delivered to every
//! survivor at a random later point.

use crate::{Action, MemberSet, Message};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::collections::{BTreeMap, VecDeque};

/// One member's protocol, as the simulator drives it.
pub(crate) trait Member {
    /// The member's own call (agree, revoke, or nothing).
    fn start(&mut self, out: &mut Vec<Action>);
    /// A message from `from`.
    fn on_message(&mut self, from: u32, msg: Message, out: &mut Vec<Action>);
    /// `failed` is reported failed.
    fn on_failure(&mut self, failed: u32, out: &mut Vec<Action>);
}

/// Which failures a run injects.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    /// At most this many members fail (less than `n`: one survives).
    pub max_failures: usize,
    /// Chance, before each step, that a random live member fails.
    pub kill_chance: f64,
    /// Chance that a member whose step sends something fails part-way through its sends.
    pub mid_step_chance: f64,
    /// Chance that a member fails part-way through a step that [`Faults::trigger`] picks.
    pub trigger_chance: f64,
    /// Steps worth failing in (e.g. a re-proposal).
    pub trigger: Option<fn(&[Action]) -> bool>,
    /// The first failure between steps is the lowest live member (the coordinator).
    pub lowest_first: bool,
    /// Messages in flight from a failed member are each lost with chance 1/2.
    pub drop_from_dead: bool,
    /// Messages in flight from failed members are held back (each step, with chance 9/10,
    /// while anything else can happen), so that they arrive late: stale proposals.
    pub late_from_dead: bool,
    /// This member fails right after the first send of its first step that sends (and not
    /// otherwise), before any other member fails; the member that send goes to never fails.
    pub doomed: Option<u32>,
    /// These members never fail.
    pub spared: MemberSet,
}

enum Slot<M> {
    /// Not started: what arrived meanwhile (kept, as an engine keeps messages of an agreement
    /// the process has not entered yet).
    Waiting {
        inbox: Vec<(u32, Message)>,
        failed: MemberSet,
    },
    Running(M),
}

/// The simulated communicator.
pub(crate) struct Sim<M> {
    rng: ChaCha8Rng,
    n: u32,
    slots: Vec<Slot<M>>,
    alive: Vec<bool>,
    queues: BTreeMap<(u32, u32), VecDeque<Message>>,
    /// (to, failed) notices not yet delivered.
    notices: Vec<(u32, u32)>,
    failures: usize,
    faults: Faults,
    /// Messages sent (and not dropped because their receiver was already dead).
    pub sent: usize,
}

#[derive(Clone)]
enum Event {
    Start(u32),
    Deliver(u32, u32),
    Notice(usize),
}

impl<M: Member> Sim<M> {
    pub fn new(n: u32, seed: u64, faults: Faults) -> Sim<M> {
        assert!(faults.max_failures < n as usize, "one member must survive");
        Sim {
            rng: ChaCha8Rng::seed_from_u64(seed),
            n,
            slots: (0..n)
                .map(|_| Slot::Waiting {
                    inbox: Vec::new(),
                    failed: MemberSet::new(),
                })
                .collect(),
            alive: vec![true; n as usize],
            queues: BTreeMap::new(),
            notices: Vec::new(),
            failures: 0,
            faults,
            sent: 0,
        }
    }

    /// Runs until nothing is left to happen; `make` creates a member's protocol when it starts,
    /// from the failures reported to it so far.
    pub fn run(&mut self, make: &mut dyn FnMut(u32, &MemberSet) -> M) {
        for _step in 0..1_000_000 {
            self.maybe_kill_between_steps();
            let mut events = self.events();
            if self.faults.late_from_dead && self.rng.random_bool(0.9) {
                let fresh: Vec<Event> = events
                    .iter()
                    .filter(
                        |e| !matches!(e, Event::Deliver(from, _) if !self.alive[*from as usize]),
                    )
                    .cloned()
                    .collect();
                if !fresh.is_empty() {
                    events = fresh;
                }
            }
            if events.is_empty() {
                return;
            }
            let event = &events[self.rng.random_range(0..events.len())];
            let (member, out) = match *event {
                Event::Start(m) => (m, self.start(m, make)),
                Event::Deliver(from, to) => (to, self.deliver(from, to)),
                Event::Notice(i) => {
                    let (to, failed) = self.notices.swap_remove(i);
                    (to, self.notice(to, failed))
                }
            };
            self.send(member, out);
        }
        panic!("no end after a million steps: a livelock");
    }

    /// Whether `member` is alive, and its protocol if it started.
    pub fn member(&self, member: u32) -> (bool, Option<&M>) {
        let running = match &self.slots[member as usize] {
            Slot::Running(m) => Some(m),
            Slot::Waiting { .. } => None,
        };
        (self.alive[member as usize], running)
    }

    /// How many members failed.
    pub fn failures(&self) -> usize {
        self.failures
    }

    fn events(&self) -> Vec<Event> {
        let mut events = Vec::new();
        for m in 0..self.n {
            if self.alive[m as usize] && matches!(self.slots[m as usize], Slot::Waiting { .. }) {
                events.push(Event::Start(m));
            }
        }
        for (&(from, to), queue) in &self.queues {
            if !queue.is_empty() {
                events.push(Event::Deliver(from, to));
            }
        }
        events.extend((0..self.notices.len()).map(Event::Notice));
        events
    }

    fn start(&mut self, m: u32, make: &mut dyn FnMut(u32, &MemberSet) -> M) -> Vec<Action> {
        let Slot::Waiting { inbox, failed } = std::mem::replace(
            &mut self.slots[m as usize],
            Slot::Waiting {
                inbox: Vec::new(),
                failed: MemberSet::new(),
            },
        ) else {
            unreachable!("started twice");
        };
        let mut member = make(m, &failed);
        let mut out = Vec::new();
        member.start(&mut out);
        for (from, msg) in inbox {
            member.on_message(from, msg, &mut out);
        }
        self.slots[m as usize] = Slot::Running(member);
        out
    }

    fn deliver(&mut self, from: u32, to: u32) -> Vec<Action> {
        let msg = self
            .queues
            .get_mut(&(from, to))
            .and_then(|q| q.pop_front())
            .expect("chosen queue is not empty");
        let mut out = Vec::new();
        match &mut self.slots[to as usize] {
            Slot::Waiting { inbox, .. } => inbox.push((from, msg)),
            Slot::Running(member) => member.on_message(from, msg, &mut out),
        }
        out
    }

    fn notice(&mut self, to: u32, failed: u32) -> Vec<Action> {
        let mut out = Vec::new();
        match &mut self.slots[to as usize] {
            Slot::Waiting { failed: set, .. } => {
                set.insert(failed);
            }
            Slot::Running(member) => member.on_failure(failed, &mut out),
        }
        out
    }

    /// Carries out `member`'s sends, unless it fails part-way through them. The sends to
    /// different members go in a random order (an engine may send to its peers in any order),
    /// those to one member in the order given.
    fn send(&mut self, member: u32, out: Vec<Action>) {
        let out = self.shuffle_across_receivers(out);
        let mut fails_after = None;
        if !out.is_empty() && self.may_fail(member) {
            if self.faults.doomed == Some(member) {
                fails_after = Some(1);
                let Action::Send { to, .. } = &out[0];
                self.faults.spared.insert(*to);
            } else {
                let triggered = self.faults.trigger.is_some_and(|t| t(&out))
                    && self.rng.random_bool(self.faults.trigger_chance);
                if triggered || self.rng.random_bool(self.faults.mid_step_chance) {
                    fails_after = Some(self.rng.random_range(0..out.len()));
                }
            }
        }
        let keep = fails_after.unwrap_or(out.len());
        for Action::Send { to, msg } in out.into_iter().take(keep) {
            assert_ne!(to, member, "a member sends to itself");
            if self.alive[to as usize] {
                self.queues.entry((member, to)).or_default().push_back(msg);
                self.sent += 1;
            }
        }
        if fails_after.is_some() {
            self.kill(member);
        }
    }

    fn shuffle_across_receivers(&mut self, out: Vec<Action>) -> Vec<Action> {
        let mut by_receiver: BTreeMap<u32, Vec<Action>> = BTreeMap::new();
        for action in out {
            let Action::Send { to, .. } = &action;
            by_receiver.entry(*to).or_default().push(action);
        }
        let mut groups: Vec<Vec<Action>> = by_receiver.into_values().collect();
        for i in (1..groups.len()).rev() {
            let j = self.rng.random_range(0..=i);
            groups.swap(i, j);
        }
        groups.into_iter().flatten().collect()
    }

    fn may_fail(&self, member: u32) -> bool {
        // The doomed member fails first, so that the send it leaves reaches a live member.
        let doom_pending = self
            .faults
            .doomed
            .is_some_and(|d| d != member && self.alive[d as usize]);
        self.alive[member as usize]
            && self.failures < self.faults.max_failures
            && !self.faults.spared.contains(member)
            && !doom_pending
    }

    fn maybe_kill_between_steps(&mut self) {
        if self.failures >= self.faults.max_failures
            || !self.rng.random_bool(self.faults.kill_chance)
        {
            return;
        }
        // The doomed member fails by its doom only.
        let candidates: Vec<u32> = (0..self.n)
            .filter(|&m| self.may_fail(m) && self.faults.doomed != Some(m))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let victim = if self.faults.lowest_first && self.failures == 0 {
            candidates[0]
        } else {
            candidates[self.rng.random_range(0..candidates.len())]
        };
        self.kill(victim);
    }

    fn kill(&mut self, victim: u32) {
        self.alive[victim as usize] = false;
        self.failures += 1;
        for s in 0..self.n {
            if self.alive[s as usize] {
                self.notices.push((s, victim));
            }
        }
        self.notices.retain(|&(to, _)| to != victim);
        let drop = self.faults.drop_from_dead;
        let rng = &mut self.rng;
        for (&(from, to), queue) in self.queues.iter_mut() {
            if to == victim {
                queue.clear();
            } else if from == victim && drop {
                queue.retain(|_| rng.random_bool(0.5));
            }
        }
    }
}
