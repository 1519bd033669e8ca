//! Errors of the runtime. Classified once, where they arise; mapped to MPI error classes only
//! at the C boundary.

use thiserror::Error;

/// Everything a ferry call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// The message was longer than the receive buffer (MPI_ERR_TRUNCATE); the buffer holds its
    /// first `buffer_len` bytes and the job goes on.
    #[error("message of {message_len} bytes from rank {sender} (tag {tag}) truncated to the {buffer_len}-byte receive buffer")]
    Truncated {
        /// Sender's rank in the communicator.
        sender: usize,
        /// Message tag.
        tag: i32,
        /// Length of the message as sent.
        message_len: usize,
        /// Length of the receive buffer.
        buffer_len: usize,
    },
    /// A rank outside the communicator.
    #[error("rank {rank} is out of range for a communicator of {size} ranks")]
    RankOutOfRange {
        /// The rank given.
        rank: usize,
        /// Communicator size.
        size: usize,
    },
    /// A negative tag on a send (only receives may use `ANY_TAG`).
    #[error("tag {0} is invalid: tags are 0..=i32::MAX (ANY_TAG only on receives)")]
    InvalidTag(i32),
    /// A peer's connection broke before it finalized.
    #[error("lost rank {rank} (pid {pid}): {detail}")]
    PeerLost {
        /// World rank of the peer.
        rank: usize,
        /// Its process id.
        pid: u32,
        /// What was seen.
        detail: String,
    },
    /// A peer sent bytes that break the protocol.
    #[error("protocol violation by rank {rank}: {detail}")]
    Protocol {
        /// World rank of the peer.
        rank: usize,
        /// What was wrong.
        detail: String,
    },
    /// Talking to the launcher failed.
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// A `FERRY_…` setting has a value that cannot be used.
    #[error("configuration: {0}")]
    Config(String),
    /// Setting up a transport failed.
    #[error("transport setup: {0}")]
    Transport(String),
    /// A buffer is shorter than the operation needs.
    #[error("{what} holds {got} bytes, the operation needs {needed}")]
    BufferTooSmall {
        /// Which buffer.
        what: String,
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// This process has handed out all the context ids it may give new communicators.
    #[error("out of context ids after {created} new communicators led by this rank")]
    OutOfContexts {
        /// Communicators this rank has led the creation of.
        created: u32,
    },
    /// Members of a communicator went different ways for one blocking collective, through
    /// its shared segment and by messages, because they passed different arguments: the call
    /// can never complete.
    #[error("blocking collective number {call} of this communicator cannot complete: rank {first} went {first_way} and rank {second} {second_way}, so the ranks passed different counts, roots or MPI_IN_PLACE")]
    CollectivePaths {
        /// The communicator's number of the call (blocking calls counted from 1).
        call: u32,
        /// A communicator rank (one that went through the segment, where one of the two did).
        first: usize,
        /// How it went: "through the shared segment", "… its post slots" or "by messages".
        first_way: &'static str,
        /// Another, which went another way.
        second: usize,
        /// How that one went.
        second_way: &'static str,
    },
    /// The request was cancelled before it matched.
    #[error("request was cancelled")]
    Cancelled,
    /// A process the operation involves has failed (a fault-tolerant job goes on without it).
    #[error("rank {rank} of the communicator has failed")]
    ProcFailed {
        /// Its rank in the communicator (`usize::MAX`: not a member of it).
        rank: usize,
    },
    /// A receive from any source is still pending, but a member that could have sent its
    /// message failed and the failure is not acknowledged (`Comm::ack_failed`).
    #[error("rank {rank} of the communicator failed and is not acknowledged; the receive from any source is still pending")]
    ProcFailedPending {
        /// Its rank in the communicator.
        rank: usize,
    },
    /// The communicator was revoked: only shrink, agreement and revocation work on it.
    #[error("the communicator has been revoked")]
    Revoked,
}
