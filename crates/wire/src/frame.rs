//! Frame headers: the unit every transport carries.
//!
//! Layout (little-endian, 40 bytes, append-only: new kinds get new op codes, retired ones stay
//! reserved):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version ([`PROTOCOL_VERSION`]) |
//! | 1 | 1 | kind (op code, see [`kind`]) |
//! | 2 | 2 | flags ([`flags`]; 0 unless the payload is compressed) |
//! | 4 | 4 | context id |
//! | 8 | 4 | tag (i32) |
//! | 12 | 4 | reserved (0), or the length of a compressed payload as sent |
//! | 16 | 8 | field a |
//! | 24 | 8 | field b |
//! | 32 | 8 | field c |
//!
//! What a, b and c mean depends on the kind; [`Frame`] names them. Only `Eager` and `Data` are
//! followed by a payload of the length the header gives (`Written` only names a range), and
//! `RtsRead` by its 8-byte memory key.

use thiserror::Error;

/// Version byte written into every header.
pub const PROTOCOL_VERSION: u8 = 1;
/// Size of an encoded header in bytes.
pub const HEADER_LEN: usize = 40;

/// Bits of the `flags` field. A bit this version does not know is refused.
pub mod flags {
    /// The payload of this EAGER or DATA frame travels compressed (see [`crate::compress`]):
    /// bytes 12..16 give its length as sent, the frame's own length field the length it
    /// decompresses to.
    pub const COMPRESSED: u16 = 0x0001;
    /// Every bit this version knows.
    pub const KNOWN: u16 = COMPRESSED;
}

/// Op codes of the `kind` byte.
pub mod kind {
    /// Small message: envelope and payload in one frame.
    pub const EAGER: u8 = 0x01;
    /// Request to send a large message.
    pub const RTS: u8 = 0x02;
    /// Receiver matched an RTS and wants the data pushed.
    pub const CTS: u8 = 0x03;
    /// A chunk of a rendezvous payload.
    pub const DATA: u8 = 0x04;
    /// Receiver pulled the payload itself; the sender's buffer is free.
    pub const FIN: u8 = 0x05;
    /// Orderly goodbye: the peer finalized and closes the channel.
    pub const BYE: u8 = 0x06;
    /// One rail of a multi-rail connection failed; what it carried is sent again on the others.
    pub const RAIL_DOWN: u8 = 0x07;
    /// Receiver pulls the front of the payload and asks the sender to write the rest into its
    /// buffer (one host, CMA): both cores copy, each byte once.
    pub const SHARE: u8 = 0x08;
    /// Sender wrote a range straight into the receive buffer.
    pub const WRITTEN: u8 = 0x09;
    /// Request to send a large message that the receiver reads itself from the sender's
    /// registered memory (a fabric's RMA read), then answers with FIN.
    pub const RTS_READ: u8 = 0x0a;
}

/// Bytes of the memory key that follow an RTS_READ header.
pub const KEY_LEN: u64 = 8;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A whole small message; `len` payload bytes follow.
    Eager {
        /// Communicator context id.
        context: u32,
        /// Message tag.
        tag: i32,
        /// Payload length in bytes.
        len: u64,
    },
    /// Announces a large message of `len` bytes.
    Rts {
        /// Communicator context id.
        context: u32,
        /// Message tag.
        tag: i32,
        /// Total message length.
        len: u64,
        /// The sender's request id, echoed in CTS and FIN.
        send_id: u64,
        /// Address of the payload in the sender's memory, for single-copy pulls on one host
        /// (0 when the receiver cannot or must not pull).
        source_addr: u64,
    },
    /// Announces a large message of `len` bytes that the receiver reads from the sender's
    /// memory registered with a fabric: at `remote_addr` under the key that follows the header
    /// ([`KEY_LEN`] bytes, little-endian). The receiver answers FIN once it has read.
    RtsRead {
        /// Communicator context id.
        context: u32,
        /// Message tag.
        tag: i32,
        /// Total message length.
        len: u64,
        /// The sender's request id, echoed in FIN.
        send_id: u64,
        /// Where the reads start, as the fabric names the registered memory (its virtual
        /// address, or an offset from the region's start).
        remote_addr: u64,
    },
    /// The receiver is ready: push at most `accept_len` bytes tagged with `recv_id`.
    Cts {
        /// Sender's request id from the RTS.
        send_id: u64,
        /// Receiver's request id, carried by every DATA frame.
        recv_id: u64,
        /// Bytes the receiver will take (its buffer may be shorter than the message).
        accept_len: u64,
    },
    /// `len` payload bytes at `offset` of the receive identified by `recv_id` follow.
    Data {
        /// Receiver's request id.
        recv_id: u64,
        /// Offset of this chunk in the message.
        offset: u64,
        /// Payload length in bytes.
        len: u64,
    },
    /// The receiver pulled the payload; the send with `send_id` is complete.
    Fin {
        /// Sender's request id from the RTS.
        send_id: u64,
    },
    /// The receiver pulls bytes `0 .. share_split(len)` of the message itself and asks the
    /// sender to write the rest straight to `dest_addr + offset` in the receiver's memory.
    /// Only for a receive that accepts the whole message.
    Share {
        /// Sender's request id from the RTS.
        send_id: u64,
        /// Receiver's request id, carried by the WRITTEN or DATA frames that answer.
        recv_id: u64,
        /// Address of the receive buffer in the receiver's memory.
        dest_addr: u64,
    },
    /// The sender wrote bytes `[offset, offset + len)` of the receive `recv_id` itself.
    Written {
        /// Receiver's request id.
        recv_id: u64,
        /// Offset of the range in the message.
        offset: u64,
        /// Length of the range.
        len: u64,
    },
    /// The peer finalized; an end of stream after this is orderly.
    Bye,
    /// The sender stopped using rail `rail` of this peer pair (it failed). The receiver reads
    /// what the rail still holds and closes it. Every chunk sent on it is sent again, and so
    /// is every ordered frame (all but DATA and RAIL_DOWN) from number `seq` on, counted from
    /// the first: the receiver drops those it already has.
    RailDown {
        /// Index of the failed rail.
        rail: u32,
        /// Ordered frames the sender had sent before the first one it sends again.
        seq: u64,
    },
}

/// Why bytes did not decode as a frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// Fewer than [`HEADER_LEN`] bytes were given.
    #[error("need {needed} more bytes for a frame header")]
    Incomplete {
        /// Bytes still missing.
        needed: usize,
    },
    /// The version byte is not ours.
    #[error("frame has protocol version {0}, expected {PROTOCOL_VERSION}")]
    Version(u8),
    /// The kind byte is unknown.
    #[error("unknown frame kind 0x{0:02x}")]
    Kind(u8),
    /// A field holds a value its kind cannot have.
    #[error("frame field `{0}` out of range")]
    Field(&'static str),
    /// A payload length beyond what the receiver accepts.
    #[error("frame payload of {len} bytes exceeds the limit of {limit}")]
    TooLong {
        /// Announced length.
        len: u64,
        /// Largest acceptable length.
        limit: u64,
    },
}

impl Frame {
    /// Frames whose order between a pair of ranks matters (all but DATA and RAIL_DOWN): over
    /// several rails they are counted, so that they can be sent again after a rail fails.
    #[inline]
    pub fn is_ordered(&self) -> bool {
        !matches!(self, Frame::Data { .. } | Frame::RailDown { .. })
    }

    /// Number of payload bytes that follow this header on the wire.
    #[inline]
    pub fn payload_len(&self) -> u64 {
        match *self {
            Frame::Eager { len, .. } | Frame::Data { len, .. } => len,
            Frame::RtsRead { .. } => KEY_LEN,
            _ => 0,
        }
    }

    /// Encodes the header into `out`.
    pub fn encode(&self, out: &mut [u8; HEADER_LEN]) {
        let (kind, context, tag, a, b, c) = match *self {
            Frame::Eager { context, tag, len } => (kind::EAGER, context, tag, len, 0, 0),
            Frame::Rts {
                context,
                tag,
                len,
                send_id,
                source_addr,
            } => (kind::RTS, context, tag, len, send_id, source_addr),
            Frame::RtsRead {
                context,
                tag,
                len,
                send_id,
                remote_addr,
            } => (kind::RTS_READ, context, tag, len, send_id, remote_addr),
            Frame::Cts {
                send_id,
                recv_id,
                accept_len,
            } => (kind::CTS, 0, 0, send_id, recv_id, accept_len),
            Frame::Data {
                recv_id,
                offset,
                len,
            } => (kind::DATA, 0, 0, recv_id, offset, len),
            Frame::Fin { send_id } => (kind::FIN, 0, 0, send_id, 0, 0),
            Frame::Share {
                send_id,
                recv_id,
                dest_addr,
            } => (kind::SHARE, 0, 0, send_id, recv_id, dest_addr),
            Frame::Written {
                recv_id,
                offset,
                len,
            } => (kind::WRITTEN, 0, 0, recv_id, offset, len),
            Frame::Bye => (kind::BYE, 0, 0, 0, 0, 0),
            Frame::RailDown { rail, seq } => (kind::RAIL_DOWN, 0, 0, u64::from(rail), seq, 0),
        };
        out[0] = PROTOCOL_VERSION;
        out[1] = kind;
        out[2..4].copy_from_slice(&0u16.to_le_bytes());
        out[4..8].copy_from_slice(&context.to_le_bytes());
        out[8..12].copy_from_slice(&tag.to_le_bytes());
        out[12..16].copy_from_slice(&0u32.to_le_bytes());
        out[16..24].copy_from_slice(&a.to_le_bytes());
        out[24..32].copy_from_slice(&b.to_le_bytes());
        out[32..40].copy_from_slice(&c.to_le_bytes());
    }

    /// The header of an EAGER frame, as `Frame::Eager { context, tag, len }.to_bytes()` gives
    /// it: the header every small message carries, written field by field without the match
    /// over every kind.
    #[inline]
    pub fn eager_header(context: u32, tag: i32, len: u64) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0] = PROTOCOL_VERSION;
        out[1] = kind::EAGER;
        out[4..8].copy_from_slice(&context.to_le_bytes());
        out[8..12].copy_from_slice(&tag.to_le_bytes());
        out[16..24].copy_from_slice(&len.to_le_bytes());
        out
    }

    /// Encodes the header into a new array.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        self.encode(&mut out);
        out
    }

    /// Decodes a header from the start of `bytes`, refusing payloads longer than `max_payload`
    /// before anything is allocated for them.
    #[inline]
    pub fn decode(bytes: &[u8], max_payload: u64) -> Result<Frame, FrameError> {
        let Some(h) = bytes.get(..HEADER_LEN) else {
            return Err(FrameError::Incomplete {
                needed: HEADER_LEN - bytes.len(),
            });
        };
        if h[0] != PROTOCOL_VERSION {
            return Err(FrameError::Version(h[0]));
        }
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let context = u32_at(4);
        let tag = u32_at(8) as i32;
        let (a, b, c) = (u64_at(16), u64_at(24), u64_at(32));
        let frame = match h[1] {
            kind::EAGER => Frame::Eager {
                context,
                tag,
                len: a,
            },
            kind::RTS => Frame::Rts {
                context,
                tag,
                len: a,
                send_id: b,
                source_addr: c,
            },
            kind::RTS_READ => Frame::RtsRead {
                context,
                tag,
                len: a,
                send_id: b,
                remote_addr: c,
            },
            kind::CTS => Frame::Cts {
                send_id: a,
                recv_id: b,
                accept_len: c,
            },
            kind::DATA => Frame::Data {
                recv_id: a,
                offset: b,
                len: c,
            },
            kind::FIN => Frame::Fin { send_id: a },
            kind::SHARE => Frame::Share {
                send_id: a,
                recv_id: b,
                dest_addr: c,
            },
            kind::WRITTEN => Frame::Written {
                recv_id: a,
                offset: b,
                len: c,
            },
            kind::BYE => Frame::Bye,
            kind::RAIL_DOWN => Frame::RailDown {
                rail: u32::try_from(a).map_err(|_| FrameError::Field("rail"))?,
                seq: b,
            },
            other => return Err(FrameError::Kind(other)),
        };
        let len = frame.payload_len();
        if len > max_payload {
            return Err(FrameError::TooLong {
                len,
                limit: max_payload,
            });
        }
        let flag_bits = u16::from_le_bytes([h[2], h[3]]);
        if flag_bits & !flags::KNOWN != 0 {
            return Err(FrameError::Field("flags"));
        }
        if flag_bits & flags::COMPRESSED != 0 {
            // Only payloads are compressed, and only when that makes them shorter: a sent
            // length of at least the original one is a broken frame, and never allocated.
            if !matches!(frame, Frame::Eager { .. } | Frame::Data { .. }) {
                return Err(FrameError::Field("flags"));
            }
            let sent = u64::from(u32_at(12));
            if sent == 0 || sent >= len {
                return Err(FrameError::Field("compressed length"));
            }
        }
        Ok(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_frame() -> impl Strategy<Value = Frame> {
        prop_oneof![
            (any::<u32>(), any::<i32>(), 0..1u64 << 20)
                .prop_map(|(context, tag, len)| Frame::Eager { context, tag, len }),
            (
                any::<u32>(),
                any::<i32>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>()
            )
                .prop_map(|(context, tag, len, send_id, source_addr)| Frame::Rts {
                    context,
                    tag,
                    len,
                    send_id,
                    source_addr
                }),
            (
                any::<u32>(),
                any::<i32>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>()
            )
                .prop_map(|(context, tag, len, send_id, remote_addr)| Frame::RtsRead {
                    context,
                    tag,
                    len,
                    send_id,
                    remote_addr
                }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
                |(send_id, recv_id, accept_len)| Frame::Cts {
                    send_id,
                    recv_id,
                    accept_len
                }
            ),
            (any::<u64>(), any::<u64>(), 0..1u64 << 20).prop_map(|(recv_id, offset, len)| {
                Frame::Data {
                    recv_id,
                    offset,
                    len,
                }
            }),
            any::<u64>().prop_map(|send_id| Frame::Fin { send_id }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(send_id, recv_id, dest_addr)| {
                Frame::Share {
                    send_id,
                    recv_id,
                    dest_addr,
                }
            }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(recv_id, offset, len)| {
                Frame::Written {
                    recv_id,
                    offset,
                    len,
                }
            }),
            Just(Frame::Bye),
            (any::<u32>(), any::<u64>()).prop_map(|(rail, seq)| Frame::RailDown { rail, seq }),
        ]
    }

    proptest! {
        #[test]
        fn the_eager_header_is_the_eager_frame_encoded(context: u32, tag: i32, len: u64) {
            prop_assert_eq!(
                Frame::eager_header(context, tag, len),
                Frame::Eager { context, tag, len }.to_bytes()
            );
        }

        #[test]
        fn encode_then_decode_is_identity(frame in any_frame()) {
            let bytes = frame.to_bytes();
            prop_assert_eq!(Frame::decode(&bytes, 1 << 20), Ok(frame));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Frame::decode(&bytes, 1 << 20);
        }
    }

    #[test]
    fn short_input_says_how_much_is_missing() {
        let bytes = Frame::Bye.to_bytes();
        assert_eq!(
            Frame::decode(&bytes[..10], 0),
            Err(FrameError::Incomplete { needed: 30 })
        );
    }

    #[test]
    fn wrong_version_and_kind_are_refused() {
        let mut bytes = Frame::Bye.to_bytes();
        bytes[0] = 9;
        assert_eq!(Frame::decode(&bytes, 0), Err(FrameError::Version(9)));
        bytes[0] = PROTOCOL_VERSION;
        bytes[1] = 0x7f;
        assert_eq!(Frame::decode(&bytes, 0), Err(FrameError::Kind(0x7f)));
    }

    #[test]
    fn unknown_flags_and_misplaced_compression_are_refused() {
        let mut bytes = Frame::Eager {
            context: 1,
            tag: 2,
            len: 100,
        }
        .to_bytes();
        bytes[2] = 0x02;
        assert_eq!(
            Frame::decode(&bytes, 1 << 20),
            Err(FrameError::Field("flags"))
        );
        bytes[2] = 0x01;
        assert_eq!(
            Frame::decode(&bytes, 1 << 20),
            Err(FrameError::Field("compressed length")),
            "compressed, but no length as sent"
        );
        bytes[12] = 100;
        assert_eq!(
            Frame::decode(&bytes, 1 << 20),
            Err(FrameError::Field("compressed length")),
            "no shorter than the original"
        );
        bytes[12] = 60;
        assert!(Frame::decode(&bytes, 1 << 20).is_ok());
        let mut fin = Frame::Fin { send_id: 3 }.to_bytes();
        fin[2] = 0x01;
        fin[12] = 1;
        assert_eq!(Frame::decode(&fin, 0), Err(FrameError::Field("flags")));
    }

    #[test]
    fn oversized_payload_is_refused_before_allocation() {
        let bytes = Frame::Eager {
            context: 0,
            tag: 0,
            len: 1 << 40,
        }
        .to_bytes();
        assert_eq!(
            Frame::decode(&bytes, 1 << 20),
            Err(FrameError::TooLong {
                len: 1 << 40,
                limit: 1 << 20
            })
        );
    }
}
