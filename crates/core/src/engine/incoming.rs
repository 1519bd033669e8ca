//! Messages that arrived before a receive asked for them (where an arriving frame's payload
//! goes is `crate::frames::Incoming`).

/// What an RTS (or RTS_READ) announced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Announced {
    pub(crate) len: u64,
    pub(super) send_id: u64,
    /// Where the payload is: an address for single-copy pulls on one host (0: none), or, with
    /// `key`, the fabric's address of the sender's registered memory.
    pub(super) source_addr: u64,
    /// The memory key of an RTS_READ: the receiver reads the payload through the fabric.
    pub(super) key: Option<u64>,
}

/// Unmatched message kept until a receive asks for it.
pub(crate) enum Unexpected {
    Eager(Vec<u8>),
    Rts(Announced),
}

impl Unexpected {
    /// The message's length in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Unexpected::Eager(data) => data.len() as u64,
            Unexpected::Rts(rts) => rts.len,
        }
    }
}
