//! The distributed protocols of fault tolerance (ULFM: `MPIX_Comm_agree`, `MPIX_Comm_shrink`,
//! `MPIX_Comm_revoke`), without any I/O.
//!
//! - [`message`]: the messages of agreement and revoke, their bytes, and a decoder that never
//!   panics.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod message;

pub use message::{Decision, DecodeError, MemberSet, Message};
