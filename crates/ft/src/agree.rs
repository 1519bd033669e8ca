//! Uniform agreement over the members of a communicator: the state machine of one member in one
//! instance. The algorithm, its cost and its proof are in the crate's documentation.

use crate::message::{Decision, MemberSet, Message};
use crate::{Action, ProtocolError};
use std::collections::BTreeMap;

/// What this member does as coordinator of its own ballot.
#[derive(Debug)]
enum Lead {
    /// Waiting for the contribution of every member not known failed.
    Collecting {
        /// Member → (flag, failed members it knew of).
        contributions: BTreeMap<u32, (u32, MemberSet)>,
    },
    /// Proposed `value`; waiting for the acceptance of every member not known failed.
    Proposing {
        value: Decision,
        accepted_by: MemberSet,
    },
    /// Decided and sent the commit to every member not known failed.
    Committed,
}

/// One member's part in one agreement.
///
/// Feed it [`start`](Agreement::start) once, then every message of this instance
/// ([`on_message`](Agreement::on_message)) and every failure notice of the communicator
/// ([`on_failure`](Agreement::on_failure)), and send the [`Action`]s it appends. It decides when
/// [`decision`](Agreement::decision) is `Some`; keep feeding it after that (see the crate's
/// documentation for when it may be dropped).
#[derive(Debug)]
pub struct Agreement {
    me: u32,
    n: u32,
    instance: u64,
    flag: u32,
    known_failed: MemberSet,
    started: bool,
    /// Messages that came before `start`, handled by it.
    early: Vec<(u32, Message)>,
    /// No proposal of a lower ballot is accepted. Ballot 0 (member 0's) needs no promise.
    promised: u32,
    /// The proposal accepted with the highest ballot.
    accepted: Option<(u32, Decision)>,
    decision: Option<Decision>,
    /// Set while this member coordinates (its ballot is its member number).
    lead: Option<Lead>,
}

impl Agreement {
    /// Member `me` of `n`, in agreement `instance`, contributing `flag` and the members the
    /// failure detector has reported failed so far (members ≥ `n` and `me` are ignored).
    ///
    /// # Panics
    /// If `me >= n`: the caller's own numbering is wrong.
    pub fn new(me: u32, n: u32, instance: u64, flag: u32, known_failed: &MemberSet) -> Agreement {
        assert!(me < n, "member {me} of a communicator of {n}");
        Agreement {
            me,
            n,
            instance,
            flag,
            known_failed: known_failed.iter().filter(|&m| m < n && m != me).collect(),
            started: false,
            early: Vec::new(),
            promised: 0,
            accepted: None,
            decision: None,
            lead: None,
        }
    }

    /// The decision, once this member has decided.
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.as_ref()
    }

    /// The instance id given to [`Agreement::new`].
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// Contributes: sends the contribution to member 0, or starts coordinating if every lower
    /// member is known failed. Then handles the messages that came before.
    pub fn start(&mut self, out: &mut Vec<Action>) {
        if self.started {
            return;
        }
        self.started = true;
        if self.coordinator() == self.me {
            self.lead(out);
        } else if self.coordinator() == 0 {
            out.push(Action::Send {
                to: 0,
                msg: Message::Contribute {
                    instance: self.instance,
                    flag: self.flag,
                    known_failed: self.known_failed.clone(),
                },
            });
        }
        // A later coordinator asks for the contribution with Prepare.
        for (from, msg) in std::mem::take(&mut self.early) {
            self.handle(from, msg, out);
        }
    }

    /// The failure detector reports `member` failed.
    pub fn on_failure(&mut self, member: u32, out: &mut Vec<Action>) -> Result<(), ProtocolError> {
        self.check_member(member)?;
        if member == self.me {
            return Err(ProtocolError::SelfFailed);
        }
        if !self.known_failed.insert(member) || !self.started {
            return Ok(());
        }
        match &self.lead {
            Some(Lead::Collecting { .. }) => self.try_propose(out),
            Some(Lead::Proposing { .. }) => self.try_commit(out),
            Some(Lead::Committed) => {}
            None if self.coordinator() == self.me => self.lead(out),
            None => {}
        }
        Ok(())
    }

    /// A message of this protocol from `from`. Messages of other instances, from outside the
    /// communicator or naming members outside it are refused; stale ones are ignored.
    pub fn on_message(
        &mut self,
        from: u32,
        msg: Message,
        out: &mut Vec<Action>,
    ) -> Result<(), ProtocolError> {
        self.check(from, &msg)?;
        if self.started {
            self.handle(from, msg, out);
        } else {
            self.early.push((from, msg));
        }
        Ok(())
    }

    fn check(&self, from: u32, msg: &Message) -> Result<(), ProtocolError> {
        self.check_member(from)?;
        if from == self.me {
            return Err(ProtocolError::FromSelf);
        }
        let (instance, ballot_from_sender, sets): (u64, Option<u32>, Vec<&MemberSet>) = match msg {
            Message::Contribute {
                instance,
                known_failed,
                ..
            } => (*instance, None, vec![known_failed]),
            Message::Prepare { instance, ballot } => (*instance, Some(*ballot), vec![]),
            Message::Promise {
                instance,
                known_failed,
                ..
            } => (*instance, None, vec![known_failed]),
            Message::Propose {
                instance,
                ballot,
                value,
            } => (*instance, Some(*ballot), vec![&value.failed]),
            Message::Accept { instance, .. } => (*instance, None, vec![]),
            Message::Commit { instance, decision } => (*instance, None, vec![&decision.failed]),
            Message::Revoke { .. } => return Err(ProtocolError::NotAgreement),
        };
        if instance != self.instance {
            return Err(ProtocolError::WrongInstance {
                expected: self.instance,
                got: instance,
            });
        }
        if let Some(ballot) = ballot_from_sender.filter(|&b| b != from) {
            return Err(ProtocolError::BallotNotSender { ballot, from });
        }
        for set in sets {
            if let Some(max) = set.max() {
                self.check_member(max)?;
            }
        }
        Ok(())
    }

    fn check_member(&self, member: u32) -> Result<(), ProtocolError> {
        if member >= self.n {
            return Err(ProtocolError::MemberOutOfRange { member, n: self.n });
        }
        Ok(())
    }

    fn handle(&mut self, from: u32, msg: Message, out: &mut Vec<Action>) {
        match msg {
            Message::Contribute {
                flag, known_failed, ..
            } => {
                // Only member 0 is sent contributions unasked; its ballot needs no Prepare.
                if self.me == 0 {
                    self.contribution(from, flag, known_failed, out);
                }
            }
            Message::Promise {
                ballot,
                flag,
                known_failed,
                ..
            } => {
                if ballot == self.me {
                    self.contribution(from, flag, known_failed, out);
                }
            }
            Message::Prepare { ballot, .. } => self.on_prepare(ballot, out),
            Message::Propose { ballot, value, .. } => self.on_propose(ballot, value, out),
            Message::Accept { ballot, .. } => {
                if ballot == self.me {
                    if let Some(Lead::Proposing { accepted_by, .. }) = &mut self.lead {
                        accepted_by.insert(from);
                        self.try_commit(out);
                    }
                }
            }
            Message::Commit { decision, .. } => self.decide(decision, out),
            Message::Revoke { .. } => {}
        }
    }

    fn on_prepare(&mut self, ballot: u32, out: &mut Vec<Action>) {
        if let Some(decision) = &self.decision {
            // Cannot happen while the coordinator lives (it accepted what was decided and so
            // proposes it without asking), but a decision is always safe to hand out.
            out.push(self.commit_to(ballot, decision.clone()));
            return;
        }
        if ballot < self.promised {
            return; // From a coordinator that has failed since.
        }
        self.promised = ballot;
        out.push(Action::Send {
            to: ballot,
            msg: Message::Promise {
                instance: self.instance,
                ballot,
                flag: self.flag,
                known_failed: self.known_failed.clone(),
            },
        });
    }

    fn on_propose(&mut self, ballot: u32, value: Decision, out: &mut Vec<Action>) {
        if let Some(decision) = &self.decision {
            // A coordinator that has not heard of the decision yet: tell it.
            out.push(self.commit_to(ballot, decision.clone()));
            return;
        }
        if ballot < self.promised {
            return; // From a coordinator that has failed since.
        }
        self.promised = ballot;
        self.accepted = Some((ballot, value));
        out.push(Action::Send {
            to: ballot,
            msg: Message::Accept {
                instance: self.instance,
                ballot,
            },
        });
    }

    fn commit_to(&self, to: u32, decision: Decision) -> Action {
        Action::Send {
            to,
            msg: Message::Commit {
                instance: self.instance,
                decision,
            },
        }
    }

    /// The lowest member not known failed: with a perfect failure detector, every lower member
    /// really is dead, so at most one live member believes itself coordinator.
    fn coordinator(&self) -> u32 {
        (0..self.n)
            .find(|&m| !self.known_failed.contains(m))
            .unwrap_or(self.me)
    }

    /// Every member not known failed, but this one.
    fn others(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.n).filter(move |&m| m != self.me && !self.known_failed.contains(m))
    }

    /// Becomes coordinator of ballot `me` (every lower member is known failed).
    fn lead(&mut self, out: &mut Vec<Action>) {
        self.promised = self.me;
        if let Some(decision) = self.decision.clone() {
            self.broadcast_commit(decision, out);
        } else if let Some((_, value)) = self.accepted.clone() {
            // If an earlier ballot committed, this member, alive then, accepted its value; and
            // every later ballot re-proposed it. So the highest accepted value is the only one
            // that can have been decided, and no other member need be asked.
            self.propose(value, out);
        } else {
            let mut contributions = BTreeMap::new();
            contributions.insert(self.me, (self.flag, self.known_failed.clone()));
            self.lead = Some(Lead::Collecting { contributions });
            if self.me != 0 {
                let prepare = Message::Prepare {
                    instance: self.instance,
                    ballot: self.me,
                };
                let to: Vec<u32> = self.others().collect();
                out.extend(to.into_iter().map(|to| Action::Send {
                    to,
                    msg: prepare.clone(),
                }));
            }
            self.try_propose(out);
        }
    }

    fn contribution(&mut self, from: u32, flag: u32, failed: MemberSet, out: &mut Vec<Action>) {
        if let Some(Lead::Collecting { contributions }) = &mut self.lead {
            contributions.insert(from, (flag, failed));
            self.try_propose(out);
        }
    }

    /// Proposes once every member not known failed has contributed.
    fn try_propose(&mut self, out: &mut Vec<Action>) {
        let Some(Lead::Collecting { contributions }) = &self.lead else {
            return;
        };
        if self.others().any(|m| !contributions.contains_key(&m)) {
            return;
        }
        let mut flag = u32::MAX;
        let mut failed = self.known_failed.clone();
        for (flag_of, failed_of) in contributions.values() {
            flag &= flag_of;
            failed.extend(failed_of);
        }
        // Everyone not heard from is known failed, so already in `failed`.
        debug_assert!((0..self.n).all(|m| contributions.contains_key(&m) || failed.contains(m)));
        self.propose(Decision { flag, failed }, out);
    }

    fn propose(&mut self, value: Decision, out: &mut Vec<Action>) {
        self.accepted = Some((self.me, value.clone()));
        let propose = Message::Propose {
            instance: self.instance,
            ballot: self.me,
            value: value.clone(),
        };
        let to: Vec<u32> = self.others().collect();
        out.extend(to.into_iter().map(|to| Action::Send {
            to,
            msg: propose.clone(),
        }));
        let mut accepted_by = MemberSet::new();
        accepted_by.insert(self.me);
        self.lead = Some(Lead::Proposing { value, accepted_by });
        self.try_commit(out);
    }

    /// Commits once every member not known failed has accepted.
    fn try_commit(&mut self, out: &mut Vec<Action>) {
        let Some(Lead::Proposing { value, accepted_by }) = &self.lead else {
            return;
        };
        if self.others().any(|m| !accepted_by.contains(m)) {
            return;
        }
        let value = value.clone();
        self.decide(value, out);
    }

    fn decide(&mut self, decision: Decision, out: &mut Vec<Action>) {
        if self.decision.is_none() {
            self.decision = Some(decision.clone());
        }
        if self.coordinator() == self.me && !matches!(self.lead, Some(Lead::Committed)) {
            self.broadcast_commit(decision, out);
        }
    }

    fn broadcast_commit(&mut self, decision: Decision, out: &mut Vec<Action>) {
        self.decision.get_or_insert_with(|| decision.clone());
        let to: Vec<u32> = self.others().collect();
        out.extend(to.into_iter().map(|to| Action::Send {
            to,
            msg: Message::Commit {
                instance: self.instance,
                decision: decision.clone(),
            },
        }));
        self.lead = Some(Lead::Committed);
    }
}

#[cfg(test)]
#[path = "agree_tests.rs"]
mod tests;
