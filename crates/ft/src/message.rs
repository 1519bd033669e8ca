//! The messages of agreement and revoke, and their bytes.
//!
//! Every message starts with a tag byte; integers are little-endian. A set of members goes as
//! whichever of two forms is shorter: a count and the members in increasing order (4 bytes a
//! member), or a bitmap (one bit a member, up to the highest member). A set can never hold more
//! members than its bytes can name, so a decoder allocates no more than the input's size.
//! [`Message::decode`] checks every length against what is there and says which field was
//! wrong; it never panics on bytes from a stranger.

use std::collections::BTreeSet;
use thiserror::Error;

/// A set of members of a communicator (numbers 0..n).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct MemberSet(BTreeSet<u32>);

impl MemberSet {
    /// The empty set.
    pub fn new() -> MemberSet {
        MemberSet(BTreeSet::new())
    }

    /// Adds `member`; true if it was not there.
    pub fn insert(&mut self, member: u32) -> bool {
        self.0.insert(member)
    }

    /// Whether `member` is in the set.
    pub fn contains(&self, member: u32) -> bool {
        self.0.contains(&member)
    }

    /// The members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The highest member, if any.
    pub fn max(&self) -> Option<u32> {
        self.0.last().copied()
    }

    /// Adds every member of `other`.
    pub fn extend(&mut self, other: &MemberSet) {
        self.0.extend(other.iter());
    }
}

impl FromIterator<u32> for MemberSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> MemberSet {
        MemberSet(iter.into_iter().collect())
    }
}

/// The outcome of one agreement: what every member that decides gets, identically.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Bitwise AND of the flags of the contributors.
    pub flag: u32,
    /// Members held failed: every member whose flag is not in `flag`, and possibly members that
    /// failed after contributing.
    pub failed: MemberSet,
}

/// One message of the agreement (`instance` names the agreement) or of revoke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A member's contribution, sent unasked to member 0, the first coordinator.
    Contribute {
        /// Agreement instance.
        instance: u64,
        /// The member's flag.
        flag: u32,
        /// The failed members the member knew of.
        known_failed: MemberSet,
    },
    /// A new coordinator (the ballot is its number) asks for contributions.
    Prepare {
        /// Agreement instance.
        instance: u64,
        /// Ballot: the coordinator's member number.
        ballot: u32,
    },
    /// Answer to [`Message::Prepare`]: the member's contribution, and its promise to accept no
    /// proposal of a lower ballot.
    Promise {
        /// Agreement instance.
        instance: u64,
        /// The ballot answered.
        ballot: u32,
        /// The member's flag.
        flag: u32,
        /// The failed members the member knows of.
        known_failed: MemberSet,
    },
    /// The coordinator proposes a decision.
    Propose {
        /// Agreement instance.
        instance: u64,
        /// Ballot: the coordinator's member number.
        ballot: u32,
        /// The proposed decision.
        value: Decision,
    },
    /// A member accepted the proposal of `ballot`.
    Accept {
        /// Agreement instance.
        instance: u64,
        /// The ballot accepted.
        ballot: u32,
    },
    /// The decision is final.
    Commit {
        /// Agreement instance.
        instance: u64,
        /// The decision.
        decision: Decision,
    },
    /// The communicator of this epoch is revoked.
    Revoke {
        /// The caller's epoch of the communicator.
        epoch: u64,
    },
}

const TAG_CONTRIBUTE: u8 = 1;
const TAG_PREPARE: u8 = 2;
const TAG_PROMISE: u8 = 3;
const TAG_PROPOSE: u8 = 4;
const TAG_ACCEPT: u8 = 5;
const TAG_COMMIT: u8 = 6;
const TAG_REVOKE: u8 = 7;

const SET_LIST: u8 = 0;
const SET_BITMAP: u8 = 1;

/// Why bytes are not a [`Message`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// No bytes at all.
    #[error("empty message")]
    Empty,
    /// The first byte names no message.
    #[error("unknown message tag {0}")]
    UnknownTag(u8),
    /// The input ends inside a field.
    #[error("message ends inside {field}: {needed} more bytes needed, {have} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        have: usize,
    },
    /// A set of members has a form byte other than list (0) or bitmap (1).
    #[error("set of members in {field} has unknown form {form}")]
    SetForm {
        /// The field being read.
        field: &'static str,
        /// The byte found.
        form: u8,
    },
    /// A listed set of members is not in strictly increasing order.
    #[error("members of {field} are not in increasing order ({member} after {previous})")]
    SetOrder {
        /// The field being read.
        field: &'static str,
        /// The member before.
        previous: u32,
        /// The member out of order.
        member: u32,
    },
    /// A bitmap set is longer than any member number.
    #[error("bitmap of {field} has {bytes} bytes, more than any member number needs")]
    BitmapTooLong {
        /// The field being read.
        field: &'static str,
        /// Its length in bytes.
        bytes: u32,
    },
    /// Bytes after the end of the message.
    #[error("{0} bytes after the end of the message")]
    TrailingBytes(usize),
}

impl Message {
    /// Appends the message's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Message::Contribute {
                instance,
                flag,
                known_failed,
            } => {
                out.push(TAG_CONTRIBUTE);
                out.extend_from_slice(&instance.to_le_bytes());
                out.extend_from_slice(&flag.to_le_bytes());
                encode_set(known_failed, out);
            }
            Message::Prepare { instance, ballot } => {
                out.push(TAG_PREPARE);
                out.extend_from_slice(&instance.to_le_bytes());
                out.extend_from_slice(&ballot.to_le_bytes());
            }
            Message::Promise {
                instance,
                ballot,
                flag,
                known_failed,
            } => {
                out.push(TAG_PROMISE);
                out.extend_from_slice(&instance.to_le_bytes());
                out.extend_from_slice(&ballot.to_le_bytes());
                out.extend_from_slice(&flag.to_le_bytes());
                encode_set(known_failed, out);
            }
            Message::Propose {
                instance,
                ballot,
                value,
            } => {
                out.push(TAG_PROPOSE);
                out.extend_from_slice(&instance.to_le_bytes());
                out.extend_from_slice(&ballot.to_le_bytes());
                encode_decision(value, out);
            }
            Message::Accept { instance, ballot } => {
                out.push(TAG_ACCEPT);
                out.extend_from_slice(&instance.to_le_bytes());
                out.extend_from_slice(&ballot.to_le_bytes());
            }
            Message::Commit { instance, decision } => {
                out.push(TAG_COMMIT);
                out.extend_from_slice(&instance.to_le_bytes());
                encode_decision(decision, out);
            }
            Message::Revoke { epoch } => {
                out.push(TAG_REVOKE);
                out.extend_from_slice(&epoch.to_le_bytes());
            }
        }
    }

    /// The message in `bytes`, which must hold exactly one message.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        let (&tag, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
        let mut r = Reader { rest };
        let message = match tag {
            TAG_CONTRIBUTE => Message::Contribute {
                instance: r.u64("instance")?,
                flag: r.u32("flag")?,
                known_failed: r.set("known_failed")?,
            },
            TAG_PREPARE => Message::Prepare {
                instance: r.u64("instance")?,
                ballot: r.u32("ballot")?,
            },
            TAG_PROMISE => Message::Promise {
                instance: r.u64("instance")?,
                ballot: r.u32("ballot")?,
                flag: r.u32("flag")?,
                known_failed: r.set("known_failed")?,
            },
            TAG_PROPOSE => Message::Propose {
                instance: r.u64("instance")?,
                ballot: r.u32("ballot")?,
                value: r.decision()?,
            },
            TAG_ACCEPT => Message::Accept {
                instance: r.u64("instance")?,
                ballot: r.u32("ballot")?,
            },
            TAG_COMMIT => Message::Commit {
                instance: r.u64("instance")?,
                decision: r.decision()?,
            },
            TAG_REVOKE => Message::Revoke {
                epoch: r.u64("epoch")?,
            },
            other => return Err(DecodeError::UnknownTag(other)),
        };
        if !r.rest.is_empty() {
            return Err(DecodeError::TrailingBytes(r.rest.len()));
        }
        Ok(message)
    }
}

fn encode_decision(decision: &Decision, out: &mut Vec<u8>) {
    out.extend_from_slice(&decision.flag.to_le_bytes());
    encode_set(&decision.failed, out);
}

/// The list form costs 4 bytes a member, the bitmap one bit per number up to the highest member:
/// the shorter one goes.
fn encode_set(set: &MemberSet, out: &mut Vec<u8>) {
    let list_bytes = 4 * set.len() as u64;
    let bitmap_bytes = set.max().map_or(0, |m| u64::from(m) / 8 + 1);
    if list_bytes <= bitmap_bytes {
        out.push(SET_LIST);
        out.extend_from_slice(&(set.len() as u32).to_le_bytes());
        for member in set.iter() {
            out.extend_from_slice(&member.to_le_bytes());
        }
    } else {
        out.push(SET_BITMAP);
        let mut bitmap = vec![0u8; bitmap_bytes as usize];
        for member in set.iter() {
            bitmap[(member / 8) as usize] |= 1 << (member % 8);
        }
        out.extend_from_slice(&(bitmap.len() as u32).to_le_bytes());
        out.extend_from_slice(&bitmap);
    }
}

/// The unread part of a message.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, needed: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < needed {
            return Err(DecodeError::Truncated {
                field,
                needed,
                have: self.rest.len(),
            });
        }
        let (head, tail) = self.rest.split_at(needed);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(field, 1)?[0])
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let mut word = [0u8; 4];
        word.copy_from_slice(self.take(field, 4)?);
        Ok(u32::from_le_bytes(word))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(field, 8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn decision(&mut self) -> Result<Decision, DecodeError> {
        Ok(Decision {
            flag: self.u32("flag")?,
            failed: self.set("failed")?,
        })
    }

    fn set(&mut self, field: &'static str) -> Result<MemberSet, DecodeError> {
        match self.u8(field)? {
            SET_LIST => {
                let count = self.u32(field)? as usize;
                // Checked before reading, so a huge count costs nothing.
                let bytes = self.take(field, count.saturating_mul(4))?;
                let mut set = MemberSet::new();
                let mut previous: Option<u32> = None;
                for chunk in bytes.chunks_exact(4) {
                    let member = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                    if let Some(p) = previous.filter(|&p| p >= member) {
                        return Err(DecodeError::SetOrder {
                            field,
                            previous: p,
                            member,
                        });
                    }
                    previous = Some(member);
                    set.insert(member);
                }
                Ok(set)
            }
            SET_BITMAP => {
                let len = self.u32(field)?;
                // Member numbers are u32: a bitmap never needs more than 2^32 / 8 bytes.
                if u64::from(len) > (1u64 << 29) {
                    return Err(DecodeError::BitmapTooLong { field, bytes: len });
                }
                let bitmap = self.take(field, len as usize)?;
                let mut set = MemberSet::new();
                for (byte_index, &byte) in bitmap.iter().enumerate() {
                    for bit in 0..8 {
                        if byte & (1 << bit) != 0 {
                            set.insert(byte_index as u32 * 8 + bit);
                        }
                    }
                }
                Ok(set)
            }
            form => Err(DecodeError::SetForm { field, form }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set_strategy() -> impl Strategy<Value = MemberSet> {
        prop_oneof![
            proptest::collection::btree_set(0u32..64, 0..20),
            proptest::collection::btree_set(0u32..5000, 0..20),
            proptest::collection::btree_set(any::<u32>(), 0..4),
        ]
        .prop_map(|s| s.into_iter().collect())
    }

    fn decision_strategy() -> impl Strategy<Value = Decision> {
        (any::<u32>(), set_strategy()).prop_map(|(flag, failed)| Decision { flag, failed })
    }

    fn message_strategy() -> impl Strategy<Value = Message> {
        prop_oneof![
            (any::<u64>(), any::<u32>(), set_strategy()).prop_map(|(instance, flag, s)| {
                Message::Contribute {
                    instance,
                    flag,
                    known_failed: s,
                }
            }),
            (any::<u64>(), any::<u32>())
                .prop_map(|(instance, ballot)| Message::Prepare { instance, ballot }),
            (any::<u64>(), any::<u32>(), any::<u32>(), set_strategy()).prop_map(
                |(instance, ballot, flag, s)| Message::Promise {
                    instance,
                    ballot,
                    flag,
                    known_failed: s,
                }
            ),
            (any::<u64>(), any::<u32>(), decision_strategy()).prop_map(
                |(instance, ballot, value)| Message::Propose {
                    instance,
                    ballot,
                    value,
                }
            ),
            (any::<u64>(), any::<u32>())
                .prop_map(|(instance, ballot)| Message::Accept { instance, ballot }),
            (any::<u64>(), decision_strategy())
                .prop_map(|(instance, decision)| Message::Commit { instance, decision }),
            any::<u64>().prop_map(|epoch| Message::Revoke { epoch }),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(message in message_strategy()) {
            let mut bytes = Vec::new();
            message.encode(&mut bytes);
            prop_assert_eq!(Message::decode(&bytes), Ok(message));
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Message::decode(&bytes);
        }

        /// Bytes that look like a message (a real tag, then noise) reach the deeper checks.
        #[test]
        fn noise_after_a_tag_never_panics(tag in 0u8..9, bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut input = vec![tag];
            input.extend_from_slice(&bytes);
            let _ = Message::decode(&input);
        }

        /// Every proper prefix of a message is refused as truncated, never taken as another.
        #[test]
        fn prefixes_are_truncated(message in message_strategy()) {
            let mut bytes = Vec::new();
            message.encode(&mut bytes);
            for len in 1..bytes.len() {
                let got = Message::decode(&bytes[..len]);
                prop_assert!(matches!(got, Err(DecodeError::Truncated { .. })), "{:?}", got);
            }
        }
    }

    #[test]
    fn the_shorter_set_form_is_chosen() {
        let dense: MemberSet = (0..64).collect();
        let mut bytes = Vec::new();
        encode_set(&dense, &mut bytes);
        assert_eq!(bytes.len(), 1 + 4 + 8, "64 members as a bitmap of 8 bytes");
        let sparse: MemberSet = [100_000].into_iter().collect();
        bytes.clear();
        encode_set(&sparse, &mut bytes);
        assert_eq!(bytes.len(), 1 + 4 + 4, "one high member as a list");
    }

    #[test]
    fn bad_input_says_what_was_wrong() {
        assert_eq!(Message::decode(&[]), Err(DecodeError::Empty));
        assert_eq!(Message::decode(&[42]), Err(DecodeError::UnknownTag(42)));
        let mut bytes = vec![TAG_CONTRIBUTE];
        bytes.extend_from_slice(&7u64.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.push(SET_LIST);
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Message::decode(&bytes),
            Err(DecodeError::Truncated {
                field: "known_failed",
                needed: u32::MAX as usize * 4,
                have: 0
            })
        );
        bytes.truncate(13);
        bytes.push(SET_LIST);
        bytes.extend_from_slice(&2u32.to_le_bytes());
        bytes.extend_from_slice(&5u32.to_le_bytes());
        bytes.extend_from_slice(&5u32.to_le_bytes());
        assert_eq!(
            Message::decode(&bytes),
            Err(DecodeError::SetOrder {
                field: "known_failed",
                previous: 5,
                member: 5
            })
        );
        bytes.truncate(13);
        bytes.push(9);
        assert_eq!(
            Message::decode(&bytes),
            Err(DecodeError::SetForm {
                field: "known_failed",
                form: 9
            })
        );
        let mut revoke = Vec::new();
        Message::Revoke { epoch: 3 }.encode(&mut revoke);
        revoke.push(0);
        assert_eq!(Message::decode(&revoke), Err(DecodeError::TrailingBytes(1)));
    }
}
