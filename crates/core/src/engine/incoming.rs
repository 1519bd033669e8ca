//! Messages that arrived before a receive asked for them (where an arriving frame's payload
//! goes is `crate::frames::Incoming`).

/// What an RTS announced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Announced {
    pub(crate) len: u64,
    pub(super) send_id: u64,
    pub(super) source_addr: u64,
}

/// Unmatched message kept until a receive asks for it.
pub(crate) enum Unexpected {
    Eager(Vec<u8>),
    Rts(Announced),
}
