//! The distributed protocols of fault tolerance (ULFM: `MPIX_Comm_agree`, `MPIX_Comm_shrink`,
//! `MPIX_Comm_revoke`), without any I/O.
//!
//! - [`agree`]: uniform agreement on a flag (bitwise AND) and a set of failed members.
//! - [`revoke`]: reliable spreading of "this communicator is revoked" to every survivor.
//! - [`message`]: the messages of both, their bytes, and a decoder that never panics.
//!
//! Both are state machines of one member of a communicator of `n` members numbered `0..n`. The
//! caller feeds them events and carries out the [`Action`]s they append to a `Vec`; they open no
//! socket, start no thread and read no clock.
//!
//! # The model
//!
//! Messages between two live members arrive, in the order sent; messages from a member that
//! has failed may or may not arrive. The failure detector is perfect: a member reported failed
//! really has failed and stays failed, and every failure is eventually reported to every
//! survivor, in any order relative to messages. A member may fail anywhere, including between two
//! sends of one step.
//!
//! # Driving them
//!
//! Members are the ranks of one communicator; failure notices are given as such ranks.
//!
//! - **Agreement**, one per (communicator, sequence number): when the process enters the
//!   agreement, create [`Agreement::new`]`(me, n, instance, flag, &failed_so_far)` and call
//!   [`Agreement::start`]. Then hand it every message whose `instance` is its own
//!   ([`Agreement::on_message`]) and every failure reported on the communicator
//!   ([`Agreement::on_failure`]). After each call, encode each [`Action::Send`]'s message and send
//!   it to its member, in the order given. The process's call completes when
//!   [`Agreement::decision`] is `Some`; keep the instance until it may be dropped (below).
//! - **Revoke**, one per communicator (and epoch), from the communicator's creation until it is
//!   freed: [`Revoke::revoke_local`] for `MPIX_Comm_revoke`, [`Revoke::on_message`] for every
//!   [`Message::Revoke`] of its epoch, [`Revoke::on_failure`] for every failure reported on the
//!   communicator, the same sends; [`Revoke::is_revoked`] says when operations on the
//!   communicator must fail as revoked.
//!
//! Bytes from the network go through [`Message::decode`]; an error from it or from a state
//! machine ([`ProtocolError`]) means a malformed or misrouted message, to be reported and
//! dropped: the state machine is unchanged by it.
//!
//! Three members agree in memory; member 2 has failed before the agreement (every survivor's
//! detector has reported it):
//!
//! ```
//! use ferry_ft::{Action, Agreement, MemberSet, Message};
//! use std::collections::VecDeque;
//!
//! let failed: MemberSet = [2].into_iter().collect();
//! let mut members: Vec<Agreement> = (0..2)
//!     .map(|me| Agreement::new(me, 3, 41, 0b1100 | 1 << me, &failed))
//!     .collect();
//! let mut wire: VecDeque<(u32, u32, Vec<u8>)> = VecDeque::new(); // (from, to, bytes)
//! let mut out = Vec::new();
//! for me in 0..2u32 {
//!     members[me as usize].start(&mut out);
//!     for Action::Send { to, msg } in out.drain(..) {
//!         let mut bytes = Vec::new();
//!         msg.encode(&mut bytes);
//!         wire.push_back((me, to, bytes));
//!     }
//! }
//! while let Some((from, to, bytes)) = wire.pop_front() {
//!     let msg = Message::decode(&bytes).expect("well-formed");
//!     members[to as usize].on_message(from, msg, &mut out).expect("this instance");
//!     for Action::Send { to: next, msg } in out.drain(..) {
//!         let mut bytes = Vec::new();
//!         msg.encode(&mut bytes);
//!         wire.push_back((to, next, bytes));
//!     }
//! }
//! for member in &members {
//!     let decision = member.decision().expect("decided");
//!     assert_eq!(decision.flag, 0b1100);
//!     assert_eq!(decision.failed, failed);
//! }
//! ```
//!
//! # Agreement
//!
//! A rotating coordinator with ballots, in the manner of Paxos, where the perfect detector lets
//! a coordinator wait for *every* member it does not know failed instead of a majority; so up to
//! `n - 1` failures are survived.
//!
//! - The **coordinator** of a member is the lowest member it does not know failed. The ballot of
//!   a coordinator is its member number. A live member that believes itself coordinator knows
//!   every lower member failed, so there is at most one live coordinator, and ballots grow.
//! - **Member 0** (ballot 0, the first coordinator) is sent each member's contribution (flag and
//!   known failed members) unasked, as [`Message::Contribute`].
//! - **A later coordinator** `c` that has accepted a proposal before proposes that value again at
//!   once; one that has accepted none sends [`Message::Prepare`] to every member it does not know
//!   failed, each answering [`Message::Promise`] with its contribution and promising to accept
//!   no proposal of a ballot below `c`.
//! - Once the coordinator has the contribution of every member it does not know failed, it
//!   proposes the decision: `flag` = AND of the contributed flags, `failed` = every member it did
//!   not hear from (all known failed) with every member any contributor knew failed. Each member
//!   accepts a proposal whose ballot is not below its promise ([`Message::Accept`]); once every
//!   member not known failed has accepted, the coordinator decides and sends
//!   [`Message::Commit`] to them all. A member decides on a commit. A member that has decided
//!   answers a prepare or a proposal with the commit.
//! - When a member learns that every lower member has failed it becomes coordinator: if it has
//!   decided it sends the commit to everyone (the old coordinator may have died while sending it),
//!   else it proposes as above.
//!
//! **Uniform agreement.** Suppose ballot `b` commits value `v`: it had acceptances from every
//! member it did not know failed. Take a later coordinator `c > b`. It leads only after `b` has
//! failed, so after `b`'s commit; `c` was alive then and `b` could not have known it failed, so
//! `c` had accepted `(b, v)` before it began to lead. Its highest accepted ballot `a` is
//! therefore `≥ b`, and by induction over the ballots between `b` and `c` every proposal from
//! `b` on carries `v`: `c` proposes `v`. A member never accepts a ballot below its promise, so a
//! late proposal of a failed coordinator cannot overwrite a later one. A coordinator that has
//! accepted nothing knows that no lower ballot committed, so it may gather fresh contributions.
//!
//! **Validity.** Every proposal is made from the contributions of every member its coordinator
//! did not know failed, and its `failed` holds every other member; a re-proposal carries such a
//! value unchanged. `failed` holds only members reported failed by someone, so with a truthful
//! detector never a live member.
//!
//! **Termination.** Once every member below the lowest survivor `s` has failed and been reported
//! to `s`, `s` leads; nobody can hold a promise above `s` (its coordinator would have had to know
//! `s` failed). Every member `s` waits for either answers (once that member has entered the
//! agreement) or is reported failed to `s`; so `s` decides, and its commit reaches every
//! survivor. A survivor other than `s` decides on that commit, or earlier.
//!
//! **Cost.** Without failures: `n - 1` contributions, `n - 1` proposals, `n - 1` acceptances and
//! `n - 1` commits, `4 (n - 1)` messages and four message delays; member 0 sends or receives
//! each of them, every other member four. A failed member that is not the coordinator
//! costs nothing but the wait for its failure notice. A failed coordinator costs its successor
//! `3 (n' - 1)` messages (propose, accept, commit) if it had accepted a proposal, else `5 (n' - 1)`
//! (prepare and promise before them), `n'` being the members left; `f` coordinators failing one
//! after another cost `O(f n)` messages.
//!
//! **When to drop an instance.** A decided member may still be asked for the decision by a
//! coordinator that has not heard of it, so keep feeding a decided instance. A member starts the
//! next agreement on a communicator only once it has decided the previous one; so once the next
//! instance has decided at this member, every member that contributed to it (every member not in
//! its `failed`) had decided this one, no coordinator of this one can be waiting, and it may be
//! dropped, its late messages ignored. Messages of an instance this member has not created yet
//! (other members entered the agreement first) must be kept until it is created and fed after
//! [`agree::Agreement::start`].
//!
//! # Revoke
//!
//! Each member that revokes, or first hears of a revoke, sends the notice to its neighbours in a
//! binomial graph: for each distance `2^k < n`, the members at `me + 2^k` and `me - 2^k` around
//! the ring of members. A neighbour known failed is replaced by the first member beyond it, in
//! the same direction, not known failed, and each time a neighbour is reported failed the
//! replacement is sent the notice (once per member, and never to a member that sent it).
//!
//! **Guarantee.** If any member that never fails is revoked (it revoked, or a notice reached it),
//! every member that never fails is revoked, under any number and pattern of failures, as long as
//! failure notices keep being fed. Proof: take a surviving revoked member `x`; its distance-1
//! neighbour in the forward direction eventually becomes the next survivor around the ring (each
//! member between them fails and is reported, and each report moves the neighbour on), and `x`
//! sends it the notice unless it already did or that survivor sent it one; messages between two
//! survivors arrive. So the next survivor is revoked, and so on around the ring. Replacing a
//! neighbour even after it has received the notice matters: it may have failed before its own
//! sends left. If the revoker fails and so does every member its notice reached, no survivor can
//! tell the revoke from one never made, and it may be lost.
//!
//! **Cost.** Without failures each member sends the notice at most once to each of its at most
//! `2 ⌈log2 n⌉` neighbours, skipping those that sent it first: at most `2 n ⌈log2 n⌉` messages,
//! and `O(log n)` message delays from the revoker to everyone. Each failure reported to a revoked
//! member costs it at most one message per direction it was a neighbour in.
//!
//! A revoke instance lives as long as the communicator: after it is revoked it must still be fed
//! failure notices, to forward to replacements.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod agree;
pub mod message;
pub mod revoke;

#[cfg(test)]
mod sim;

pub use agree::Agreement;
pub use message::{Decision, DecodeError, MemberSet, Message};
pub use revoke::Revoke;

use thiserror::Error;

/// What the caller must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send `msg` to member `to` (in order with earlier sends to `to`).
    Send {
        /// The member to send to.
        to: u32,
        /// The message.
        msg: Message,
    },
}

/// Why a protocol refused an event. Nothing changes on a refused event.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtocolError {
    /// A member number (a sender, a failed member, or one in a set) outside `0..n`.
    #[error("member {member} is not in a communicator of {n}")]
    MemberOutOfRange {
        /// The member number.
        member: u32,
        /// The communicator's size.
        n: u32,
    },
    /// A message said to come from this member itself.
    #[error("a message from this member to itself")]
    FromSelf,
    /// A failure notice for this member itself.
    #[error("this member reported failed to itself")]
    SelfFailed,
    /// An agreement message of another instance.
    #[error("agreement message of instance {got} given to instance {expected}")]
    WrongInstance {
        /// This instance.
        expected: u64,
        /// The message's instance.
        got: u64,
    },
    /// A revoke message of another epoch of the communicator.
    #[error("revoke notice of epoch {got} given to epoch {expected}")]
    WrongEpoch {
        /// This epoch.
        expected: u64,
        /// The message's epoch.
        got: u64,
    },
    /// A prepare or a proposal whose ballot is not its sender's member number.
    #[error("ballot {ballot} sent by member {from}: a coordinator's ballot is its own number")]
    BallotNotSender {
        /// The ballot.
        ballot: u32,
        /// The sender.
        from: u32,
    },
    /// A revoke message given to an agreement.
    #[error("a revoke message given to an agreement")]
    NotAgreement,
    /// An agreement message given to a revoke.
    #[error("an agreement message given to a revoke")]
    NotRevoke,
}
