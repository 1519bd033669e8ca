//! Fault-tolerant agreements (`MPIX_Comm_agree`, and shrink's agreement on who failed) run by
//! the engine: the protocol is `ferry_ft::Agreement` (sans-IO); here its messages travel as
//! owned messages on [`FAULT_CONTEXT`] and failures reach it as the engine learns them.
//!
//! The engine drives every agreement in its progress passes, not only while its caller waits:
//! a member that has decided and gone on must still answer a new coordinator (after the old
//! one died), or that coordinator would wait for ever. An agreement is kept until the next
//! one of its communicator has decided here (the drop rule of `ferry_ft`); messages of an
//! agreement this rank has not entered yet wait for it.

use super::failure::FAULT_CONTEXT;
use super::*;
use ferry_ft::{Action, Agreement, Decision, MemberSet, Message};
use std::rc::Rc;

/// Tag of an agreement message; its payload is the communicator's context (LE u32), then the
/// message's bytes.
pub(super) const AGREE_TAG: i32 = 2;

/// One agreement of a communicator.
pub(super) struct AgreementRun {
    /// The communicator's context, and its members' universe ranks (member i is rank i).
    context: u32,
    members: Rc<[u32]>,
    machine: Agreement,
    /// Failures told to it, by member.
    told: Vec<bool>,
    /// The request its decision completes, until it does.
    request: Option<ReqId>,
}

/// The agreements of a rank.
#[derive(Default)]
pub(super) struct Agreements {
    runs: Vec<AgreementRun>,
    /// Messages of agreements not entered here yet: (context, sender's universe rank, message).
    early: Vec<(u32, u32, Message)>,
}

/// The instance an agreement message belongs to (`None` for a revoke's).
fn instance_of(msg: &Message) -> Option<u64> {
    match msg {
        Message::Contribute { instance, .. }
        | Message::Prepare { instance, .. }
        | Message::Promise { instance, .. }
        | Message::Propose { instance, .. }
        | Message::Accept { instance, .. }
        | Message::Commit { instance, .. } => Some(*instance),
        Message::Revoke { .. } => None,
    }
}

impl Engine {
    /// Enters agreement `instance` of the communicator of `context` whose members are the
    /// universe ranks `members` (this rank being member `me`), contributing `flag`. The
    /// request returned completes once it is decided here; the decision is then
    /// [`Engine::agreement_decision`]'s.
    pub(crate) fn start_agreement(
        &mut self,
        (context, members): (u32, Rc<[u32]>),
        me: u32,
        instance: u64,
        flag: u32,
    ) -> Result<ReqId, Error> {
        self.agreements_mut()?;
        let request = self.new_hooked_request();
        let n = members.len() as u32;
        let known: MemberSet = (members.iter().enumerate())
            .filter(|(_, w)| self.proto.failed(**w))
            .map(|(m, _)| m as u32)
            .collect();
        let mut told = vec![false; members.len()];
        known.iter().for_each(|m| told[m as usize] = true);
        let mut run = AgreementRun {
            context,
            members,
            machine: Agreement::new(me, n, instance, flag, &known),
            told,
            request: Some(request),
        };
        let mut out = Vec::new();
        run.machine.start(&mut out);
        let agreements = self.agreements_mut()?;
        let early = std::mem::take(&mut agreements.early);
        for (c, source, msg) in early {
            if c == context && instance_of(&msg) == Some(instance) {
                if let Some(from) = run.members.iter().position(|&w| w == source) {
                    // A refused message changes nothing; its sender is wrong, not us.
                    let _ = run.machine.on_message(from as u32, msg, &mut out);
                }
            } else {
                agreements.early.push((c, source, msg));
            }
        }
        let sends = Self::addressed(&run, out);
        agreements.runs.push(run);
        self.send_agreement(context, sends)?;
        self.complete_decided();
        Ok(request)
    }

    /// Completes the requests of the agreements decided since the last look.
    fn complete_decided(&mut self) {
        let Some(faults) = self.faults.as_mut() else {
            return;
        };
        let decided: Vec<ReqId> = (faults.agreements.runs.iter_mut())
            .filter(|r| r.machine.decision().is_some())
            .filter_map(|r| r.request.take())
            .collect();
        let me = self.proto.me;
        for id in decided {
            self.proto.complete(id, failure::faulted(Fault::None, me));
        }
    }

    /// The decision of agreement `instance` of the communicator of `context`, once made here
    /// (the earlier agreements of that communicator are then dropped).
    pub(crate) fn agreement_decision(&mut self, context: u32, instance: u64) -> Option<Decision> {
        let agreements = &mut self.faults.as_mut()?.agreements;
        let decision = (agreements.runs.iter())
            .find(|r| r.context == context && r.machine.instance() == instance)?
            .machine
            .decision()?
            .clone();
        agreements
            .runs
            .retain(|r| r.context != context || r.machine.instance() >= instance);
        Some(decision)
    }

    fn agreements_mut(&mut self) -> Result<&mut Agreements, Error> {
        match self.faults.as_mut() {
            Some(f) => Ok(&mut f.agreements),
            None => Err(Error::Config(
                "an agreement needs a fault-tolerant job (ferry run --fault-tolerant)".into(),
            )),
        }
    }

    /// Hands an agreement message from universe rank `source` to its agreement (or keeps it
    /// for one not entered yet). Malformed or misrouted messages are dropped: a stranger's
    /// bytes must not stop the job.
    pub(super) fn agreement_message(&mut self, source: u32, data: &[u8]) -> Result<(), Error> {
        let Some((context, bytes)) = data.split_first_chunk::<4>() else {
            return Ok(());
        };
        let context = u32::from_le_bytes(*context);
        let Ok(msg) = Message::decode(bytes) else {
            return Ok(());
        };
        let Some(instance) = instance_of(&msg) else {
            return Ok(());
        };
        let agreements = self.agreements_mut()?;
        let Some(run) = (agreements.runs.iter_mut())
            .find(|r| r.context == context && r.machine.instance() == instance)
        else {
            // Older than every agreement kept here: dropped, as `ferry_ft` allows.
            let newest = (agreements.runs.iter())
                .filter(|r| r.context == context)
                .map(|r| r.machine.instance())
                .max();
            if newest.is_none_or(|n| instance > n) {
                agreements.early.push((context, source, msg));
            }
            return Ok(());
        };
        let Some(from) = run.members.iter().position(|&w| w == source) else {
            return Ok(());
        };
        let mut out = Vec::new();
        let _ = run.machine.on_message(from as u32, msg, &mut out);
        let sends = Self::addressed(run, out);
        self.send_agreement(context, sends)?;
        self.complete_decided();
        Ok(())
    }

    /// Tells every agreement of which `rank` is a member that it failed.
    pub(super) fn agreements_learn_failure(&mut self, rank: u32) -> Result<(), Error> {
        let Some(faults) = self.faults.as_mut() else {
            return Ok(());
        };
        let mut sends = Vec::new();
        for run in &mut faults.agreements.runs {
            let Some(m) = run.members.iter().position(|&w| w == rank) else {
                continue;
            };
            if std::mem::replace(&mut run.told[m], true) {
                continue;
            }
            let mut out = Vec::new();
            let _ = run.machine.on_failure(m as u32, &mut out);
            sends.push((run.context, Self::addressed(run, out)));
        }
        for (context, out) in sends {
            self.send_agreement(context, out)?;
        }
        self.complete_decided();
        Ok(())
    }

    /// The actions of `run` as (universe rank, message).
    fn addressed(run: &AgreementRun, out: Vec<Action>) -> Vec<(u32, Message)> {
        (out.into_iter())
            .filter_map(|Action::Send { to, msg }| Some((*run.members.get(to as usize)?, msg)))
            .collect()
    }

    /// Sends agreement messages of the communicator of `context` (to failed peers: nothing).
    fn send_agreement(&mut self, context: u32, sends: Vec<(u32, Message)>) -> Result<(), Error> {
        for (dest, msg) in sends {
            let mut payload = context.to_le_bytes().to_vec();
            msg.encode(&mut payload);
            self.send_owned(FAULT_CONTEXT, dest, AGREE_TAG, payload)?;
        }
        Ok(())
    }
}
