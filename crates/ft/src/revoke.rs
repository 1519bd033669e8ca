//! Revoke: one member's part in spreading "this communicator is revoked" to every survivor. The
//! neighbour graph, its guarantee and its cost are in the crate's documentation.

use crate::message::{MemberSet, Message};
use crate::{Action, ProtocolError};

/// One member's revoke state for one communicator (one epoch of it).
///
/// Feed it the local [`revoke_local`](Revoke::revoke_local) call, every revoke message of this
/// epoch ([`on_message`](Revoke::on_message)) and every failure notice of the communicator
/// ([`on_failure`](Revoke::on_failure)) for as long as the communicator exists locally, and send
/// the [`Action`]s it appends.
#[derive(Debug)]
pub struct Revoke {
    me: u32,
    n: u32,
    epoch: u64,
    revoked: bool,
    known_failed: MemberSet,
    /// Members known revoked: they sent us the notice, so need not be sent it.
    known_revoked: MemberSet,
    /// Members this member has sent the notice to.
    sent_to: MemberSet,
}

impl Revoke {
    /// Member `me` of `n`, for the communicator's `epoch` (carried in every message, so that a
    /// notice for an earlier incarnation of the communicator is refused).
    ///
    /// # Panics
    /// If `me >= n`: the caller's own numbering is wrong.
    pub fn new(me: u32, n: u32, epoch: u64) -> Revoke {
        assert!(me < n, "member {me} of a communicator of {n}");
        Revoke {
            me,
            n,
            epoch,
            revoked: false,
            known_failed: MemberSet::new(),
            known_revoked: MemberSet::new(),
            sent_to: MemberSet::new(),
        }
    }

    /// Whether this member knows the communicator revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked
    }

    /// The epoch given to [`Revoke::new`].
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This member revokes the communicator (`MPIX_Comm_revoke`).
    pub fn revoke_local(&mut self, out: &mut Vec<Action>) {
        self.revoked = true;
        self.forward(out);
    }

    /// A revoke notice from `from`.
    pub fn on_message(
        &mut self,
        from: u32,
        msg: Message,
        out: &mut Vec<Action>,
    ) -> Result<(), ProtocolError> {
        self.check_member(from)?;
        if from == self.me {
            return Err(ProtocolError::FromSelf);
        }
        let Message::Revoke { epoch } = msg else {
            return Err(ProtocolError::NotRevoke);
        };
        if epoch != self.epoch {
            return Err(ProtocolError::WrongEpoch {
                expected: self.epoch,
                got: epoch,
            });
        }
        self.known_revoked.insert(from);
        self.revoked = true;
        self.forward(out);
        Ok(())
    }

    /// The failure detector reports `member` failed. Once revoked, the notice goes to the next
    /// live member beyond it in each direction it was a neighbour in.
    pub fn on_failure(&mut self, member: u32, out: &mut Vec<Action>) -> Result<(), ProtocolError> {
        self.check_member(member)?;
        if member == self.me {
            return Err(ProtocolError::SelfFailed);
        }
        if self.known_failed.insert(member) && self.revoked {
            self.forward(out);
        }
        Ok(())
    }

    fn check_member(&self, member: u32) -> Result<(), ProtocolError> {
        if member >= self.n {
            return Err(ProtocolError::MemberOutOfRange { member, n: self.n });
        }
        Ok(())
    }

    /// Sends the notice to the current neighbours not yet sent it nor known revoked.
    fn forward(&mut self, out: &mut Vec<Action>) {
        if !self.revoked {
            return;
        }
        for target in self.neighbours() {
            if !self.known_revoked.contains(target) && self.sent_to.insert(target) {
                out.push(Action::Send {
                    to: target,
                    msg: Message::Revoke { epoch: self.epoch },
                });
            }
        }
    }

    /// For each distance 2^k < n, in each direction around the ring of members, the first
    /// member at that distance or beyond (in the same direction) not known failed.
    fn neighbours(&self) -> Vec<u32> {
        let n = u64::from(self.n);
        let me = u64::from(self.me);
        let mut found = Vec::new();
        let mut distance = 1u64;
        while distance < n {
            for forward in [true, false] {
                let start = if forward {
                    me + distance
                } else {
                    me + n - distance
                };
                let step = if forward { 1 } else { n - 1 };
                let live = (0..n)
                    .map(|i| ((start + i * step) % n) as u32)
                    .take_while(|&m| m != self.me)
                    .find(|&m| !self.known_failed.contains(m));
                if let Some(m) = live.filter(|m| !found.contains(m)) {
                    found.push(m);
                }
            }
            distance *= 2;
        }
        found
    }
}

#[cfg(test)]
#[path = "revoke_tests.rs"]
mod tests;
