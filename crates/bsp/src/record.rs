//! The records one process sends another in a superstep: their layout, the encoder the
//! superstep uses, and a decoder for bytes from another process.
//!
//! Sans-IO: this module neither sends nor receives; it turns records into bytes and back. A
//! superstep's message from one process to another is a sequence of whole records (an early
//! message or a closing one never cuts a record). Every record starts with the version byte
//! [`RECORD_VERSION`] and a kind byte; all numbers are little-endian:
//!
//! | kind | byte | fields after version and kind |
//! |---|---|---|
//! | PUT | `0x01` | registration slot u32, offset u64, length u64, the bytes |
//! | GET | `0x02` | registration slot u32, offset u64, length u64 |
//! | SEND | `0x03` | tag length u32, payload length u64, the tag, the payload |
//! | REG | `0x04` | pushes u32, each push's size u64, pops u32, each popped slot u32 |
//! | END | `0x05` | (none): the sender is in `bsp_end`, not `bsp_sync` |
//!
//! The layout is append-only: a new kind takes a new byte, a changed field a new version, and
//! retired values stay reserved. [`decode`] checks every length against the bytes it was
//! given before it takes them, returns [`RecordError`] naming what is wrong (never a panic),
//! and allocates nothing: a decoded [`Record`] borrows from the input.

/// The version of the record layout this build writes and reads.
pub const RECORD_VERSION: u8 = 0x01;

// Kind bytes (reserved for ever once used).
pub(crate) const REC_PUT: u8 = 0x01;
pub(crate) const REC_GET: u8 = 0x02;
pub(crate) const REC_SEND: u8 = 0x03;
pub(crate) const REC_REG: u8 = 0x04;
pub(crate) const REC_END: u8 = 0x05;

/// Bytes of a put (or get) record before its data: version, kind, slot u32, offset u64,
/// length u64.
pub(crate) const PUT_HEAD: usize = 22;

/// Where a put record's length field starts (a put that continues it raises it in place).
pub(crate) const PUT_LEN_AT: usize = 14;

/// Bytes of a send record before its tag and payload: version, kind, tag length u32, payload
/// length u64.
pub(crate) const SEND_HEAD: usize = 14;

/// The whole end record.
pub(crate) const END_RECORD: [u8; 2] = [RECORD_VERSION, REC_END];

/// The head of a send record.
#[inline]
pub(crate) fn send_head(tag_len: usize, payload_len: usize) -> [u8; SEND_HEAD] {
    let mut h = [0u8; SEND_HEAD];
    h[0] = RECORD_VERSION;
    h[1] = REC_SEND;
    h[2..6].copy_from_slice(&(tag_len as u32).to_le_bytes());
    h[6..14].copy_from_slice(&(payload_len as u64).to_le_bytes());
    h
}

/// The head of a put (`REC_PUT`) or get (`REC_GET`) record.
#[inline]
pub(crate) fn drma_head(kind: u8, slot: u32, offset: usize, len: usize) -> [u8; PUT_HEAD] {
    let mut h = [0u8; PUT_HEAD];
    h[0] = RECORD_VERSION;
    h[1] = kind;
    h[2..6].copy_from_slice(&slot.to_le_bytes());
    h[6..14].copy_from_slice(&(offset as u64).to_le_bytes());
    h[PUT_LEN_AT..PUT_HEAD].copy_from_slice(&(len as u64).to_le_bytes());
    h
}

/// Appends a registration record: the sizes of the superstep's pushes and the slots it pops.
pub(crate) fn encode_reg(
    out: &mut Vec<u8>,
    push_sizes: impl ExactSizeIterator<Item = usize>,
    pops: &[u32],
) {
    out.extend_from_slice(&[RECORD_VERSION, REC_REG]);
    out.extend_from_slice(&(push_sizes.len() as u32).to_le_bytes());
    for size in push_sizes {
        out.extend_from_slice(&(size as u64).to_le_bytes());
    }
    out.extend_from_slice(&(pops.len() as u32).to_le_bytes());
    for s in pops {
        out.extend_from_slice(&s.to_le_bytes());
    }
}

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The version byte is not [`RECORD_VERSION`]: the sender is another build of ferry (or the
    /// bytes are not a record).
    #[error("record version {found:#04x} is not understood (this build reads version {RECORD_VERSION:#04x}; is every process the same build?)")]
    UnknownVersion {
        /// The version byte found.
        found: u8,
    },
    /// The kind byte names no record.
    #[error("unknown record kind {found:#04x}")]
    UnknownKind {
        /// The kind byte found.
        found: u8,
    },
    /// The record claims more bytes than are left.
    #[error("{kind} record cut short: it needs {need} bytes, {have} are left")]
    Truncated {
        /// The kind of record ("put", "get", ...; "record" before the kind byte).
        kind: &'static str,
        /// Bytes the record needs from its start (saturated at `u64::MAX`).
        need: u64,
        /// Bytes there were from its start.
        have: usize,
    },
    /// A length or offset does not fit this machine's address space.
    #[error("{kind} record: {field} {value} does not fit in memory here")]
    TooLarge {
        /// The kind of record.
        kind: &'static str,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
}

/// A superstep's registrations from one process, borrowed from its record: how many areas it
/// registered and their sizes, and the slots it unregistered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegRecord<'a> {
    /// The push sizes, 8 bytes each (checked to be whole).
    sizes: &'a [u8],
    /// The popped slots, 4 bytes each (checked to be whole).
    pops: &'a [u8],
}

impl RegRecord<'static> {
    /// No push and no pop: what a process that sends no registration record did.
    pub const EMPTY: RegRecord<'static> = RegRecord {
        sizes: &[],
        pops: &[],
    };
}

impl<'a> RegRecord<'a> {
    /// Number of areas registered (`bsp_push_reg` calls).
    pub fn push_count(&self) -> usize {
        self.sizes.len() / 8
    }

    /// Size in bytes of the `i`-th push, if there is one.
    pub fn push_size(&self, i: usize) -> Option<u64> {
        let at = i.checked_mul(8)?;
        let b = self.sizes.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// The sizes of the pushes, in order.
    pub fn push_sizes(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.sizes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    /// The slots unregistered (`bsp_pop_reg` calls), in order.
    pub fn pops(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.pops
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Whether `other` has as many pushes and the same pops (sizes may differ between
    /// processes, the rest may not).
    pub fn matches(&self, other: &RegRecord<'_>) -> bool {
        self.push_count() == other.push_count() && self.pops == other.pops
    }
}

impl std::fmt::Display for RegRecord<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sizes: Vec<u64> = self.push_sizes().collect();
        let pops: Vec<u32> = self.pops().collect();
        write!(
            f,
            "{} bsp_push_reg (sizes {sizes:?}) and bsp_pop_reg of registrations {pops:?}",
            sizes.len()
        )
    }
}

/// One record, borrowed from the bytes it was decoded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// Write `data` at byte `offset` of registration `slot`.
    Put {
        /// The registration (matched across processes by order).
        slot: u32,
        /// Byte offset in the area.
        offset: usize,
        /// The bytes.
        data: &'a [u8],
    },
    /// Send back `len` bytes from byte `offset` of registration `slot`.
    Get {
        /// The registration.
        slot: u32,
        /// Byte offset in the area.
        offset: usize,
        /// Bytes asked for.
        len: usize,
    },
    /// A BSMP message.
    Send {
        /// Its tag (the tag size of the superstep).
        tag: &'a [u8],
        /// Its payload.
        payload: &'a [u8],
    },
    /// The sender's registrations of the superstep.
    Reg(RegRecord<'a>),
    /// The sender is ending the computation.
    End,
}

impl Record<'_> {
    /// Appends the record's bytes to `out` (what [`decode`] reads back).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Record::Put { slot, offset, data } => {
                out.extend_from_slice(&drma_head(REC_PUT, slot, offset, data.len()));
                out.extend_from_slice(data);
            }
            Record::Get { slot, offset, len } => {
                out.extend_from_slice(&drma_head(REC_GET, slot, offset, len));
            }
            Record::Send { tag, payload } => {
                out.extend_from_slice(&send_head(tag.len(), payload.len()));
                out.extend_from_slice(tag);
                out.extend_from_slice(payload);
            }
            Record::Reg(reg) => {
                out.extend_from_slice(&[RECORD_VERSION, REC_REG]);
                out.extend_from_slice(&(reg.push_count() as u32).to_le_bytes());
                out.extend_from_slice(reg.sizes);
                out.extend_from_slice(&((reg.pops.len() / 4) as u32).to_le_bytes());
                out.extend_from_slice(reg.pops);
            }
            Record::End => out.extend_from_slice(&END_RECORD),
        }
    }
}

/// Reads little-endian fields of one record, checking each length before it takes it.
struct Fields<'a> {
    buf: &'a [u8],
    at: usize,
    kind: &'static str,
}

impl<'a> Fields<'a> {
    /// The next `n` bytes, or `Truncated` naming how long the record would be.
    fn take(&mut self, n: u64) -> Result<&'a [u8], RecordError> {
        let have = self.buf.len() - self.at;
        if n > have as u64 {
            return Err(RecordError::Truncated {
                kind: self.kind,
                need: (self.at as u64).saturating_add(n),
                have: self.buf.len(),
            });
        }
        let s = &self.buf[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, RecordError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, RecordError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }

    /// A u64 that must fit a `usize` (an offset or a length).
    fn usize(&mut self, field: &'static str) -> Result<usize, RecordError> {
        let value = self.u64()?;
        usize::try_from(value).map_err(|_| RecordError::TooLarge {
            kind: self.kind,
            field,
            value,
        })
    }
}

fn kind_name(kind: u8) -> &'static str {
    match kind {
        REC_PUT => "put",
        REC_GET => "get",
        REC_SEND => "send",
        REC_REG => "registration",
        REC_END => "end",
        _ => "record",
    }
}

/// Decodes the record at the start of `buf`: the record and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<(Record<'_>, usize), RecordError> {
    let mut f = Fields {
        buf,
        at: 0,
        kind: "record",
    };
    let head = f.take(2)?;
    let (version, kind) = (head[0], head[1]);
    if version != RECORD_VERSION {
        return Err(RecordError::UnknownVersion { found: version });
    }
    f.kind = kind_name(kind);
    let record = match kind {
        REC_PUT => {
            let slot = f.u32()?;
            let offset = f.usize("offset")?;
            let len = f.usize("length")?;
            let data = f.take(len as u64)?;
            Record::Put { slot, offset, data }
        }
        REC_GET => {
            let slot = f.u32()?;
            let offset = f.usize("offset")?;
            let len = f.usize("length")?;
            Record::Get { slot, offset, len }
        }
        REC_SEND => {
            let tag_len = f.u32()?;
            let payload_len = f.u64()?;
            let tag = f.take(u64::from(tag_len))?;
            let payload = f.take(payload_len)?;
            Record::Send { tag, payload }
        }
        REC_REG => {
            let pushes = f.u32()?;
            let sizes = f.take(u64::from(pushes) * 8)?;
            let pops = f.u32()?;
            let pops = f.take(u64::from(pops) * 4)?;
            Record::Reg(RegRecord { sizes, pops })
        }
        REC_END => Record::End,
        found => return Err(RecordError::UnknownKind { found }),
    };
    Ok((record, f.at))
}

/// The records of a message, in order; after an error, nothing more.
pub struct Records<'a> {
    rest: &'a [u8],
}

impl<'a> Records<'a> {
    /// The records of `message`, a sequence of whole records.
    pub fn new(message: &'a [u8]) -> Records<'a> {
        Records { rest: message }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match decode(self.rest) {
            Ok((record, used)) => {
                self.rest = &self.rest[used..];
                Some(Ok(record))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(record: Record<'_>) {
        let mut bytes = Vec::new();
        record.encode(&mut bytes);
        assert_eq!(decode(&bytes), Ok((record, bytes.len())), "{record:?}");
        // Every proper prefix is cut short, never a panic or another record.
        for n in 0..bytes.len() {
            assert!(
                matches!(decode(&bytes[..n]), Err(RecordError::Truncated { .. })),
                "prefix {n} of {record:?}: {:?}",
                decode(&bytes[..n])
            );
        }
    }

    #[test]
    fn every_kind_round_trips() {
        round_trip(Record::Put {
            slot: 3,
            offset: 17,
            data: b"hello",
        });
        round_trip(Record::Put {
            slot: u32::MAX,
            offset: 0,
            data: &[],
        });
        round_trip(Record::Get {
            slot: 1,
            offset: usize::MAX,
            len: 9,
        });
        round_trip(Record::Send {
            tag: b"tg",
            payload: b"payload",
        });
        round_trip(Record::Send {
            tag: &[],
            payload: &[],
        });
        let mut reg = Vec::new();
        encode_reg(&mut reg, [8usize, 1 << 40].into_iter(), &[5, 0]);
        let (Record::Reg(r), used) = decode(&reg).expect("a registration record") else {
            panic!("not a registration record")
        };
        assert_eq!(used, reg.len());
        assert_eq!(r.push_sizes().collect::<Vec<_>>(), [8, 1 << 40]);
        assert_eq!(r.pops().collect::<Vec<_>>(), [5, 0]);
        assert_eq!(r.push_size(1), Some(1 << 40));
        assert_eq!(r.push_size(2), None);
        round_trip(Record::Reg(r));
        round_trip(Record::End);
    }

    #[test]
    fn the_heads_the_superstep_writes_are_what_the_decoder_reads() {
        let mut bytes = drma_head(REC_PUT, 2, 40, 3).to_vec();
        bytes.extend_from_slice(b"abc");
        bytes.extend_from_slice(&send_head(1, 2));
        bytes.extend_from_slice(b"tpp");
        bytes.extend_from_slice(&drma_head(REC_GET, 7, 8, 16));
        bytes.extend_from_slice(&END_RECORD);
        let records: Vec<_> = Records::new(&bytes).collect();
        assert_eq!(
            records,
            [
                Ok(Record::Put {
                    slot: 2,
                    offset: 40,
                    data: b"abc"
                }),
                Ok(Record::Send {
                    tag: b"t",
                    payload: b"pp"
                }),
                Ok(Record::Get {
                    slot: 7,
                    offset: 8,
                    len: 16
                }),
                Ok(Record::End),
            ]
        );
    }

    #[test]
    fn bad_bytes_are_named() {
        assert_eq!(
            decode(&[0x02, REC_END]),
            Err(RecordError::UnknownVersion { found: 0x02 })
        );
        assert_eq!(
            decode(&[RECORD_VERSION, 0x7f]),
            Err(RecordError::UnknownKind { found: 0x7f })
        );
        let msg = RecordError::UnknownVersion { found: 9 }.to_string();
        assert!(msg.contains("version 0x09"), "{msg}");
        // A registration record that claims more pushes than it carries (indexed without a
        // check before).
        let mut reg = vec![RECORD_VERSION, REC_REG];
        reg.extend_from_slice(&1000u32.to_le_bytes());
        reg.extend_from_slice(&8u64.to_le_bytes());
        assert_eq!(
            decode(&reg),
            Err(RecordError::Truncated {
                kind: "registration",
                need: 6 + 8000,
                have: 14
            })
        );
        // A put that claims a length near 2^64: cut short, no overflow, no allocation.
        let mut put = drma_head(REC_PUT, 0, 0, 0).to_vec();
        put[PUT_LEN_AT..PUT_HEAD].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            decode(&put),
            Err(RecordError::Truncated { kind: "put", .. }) | Err(RecordError::TooLarge { .. })
        ));
        let mut send = send_head(0, 0).to_vec();
        send[6..14].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            decode(&send),
            Err(RecordError::Truncated {
                kind: "send",
                need: u64::MAX,
                have: SEND_HEAD
            })
        );
        // After an error a message yields nothing more.
        let mut two = vec![RECORD_VERSION, 0x7f];
        two.extend_from_slice(&END_RECORD);
        assert_eq!(Records::new(&two).count(), 1);
    }

    /// A record that owns its bytes, for the strategies below.
    #[derive(Debug, Clone)]
    enum Owned {
        Put(u32, usize, Vec<u8>),
        Get(u32, usize, usize),
        Send(Vec<u8>, Vec<u8>),
        Reg(Vec<usize>, Vec<u32>),
        End,
    }

    impl Owned {
        fn encode(&self, out: &mut Vec<u8>) {
            match self {
                Owned::Put(slot, offset, data) => Record::Put {
                    slot: *slot,
                    offset: *offset,
                    data,
                }
                .encode(out),
                Owned::Get(slot, offset, len) => Record::Get {
                    slot: *slot,
                    offset: *offset,
                    len: *len,
                }
                .encode(out),
                Owned::Send(tag, payload) => Record::Send { tag, payload }.encode(out),
                Owned::Reg(sizes, pops) => encode_reg(out, sizes.iter().copied(), pops),
                Owned::End => Record::End.encode(out),
            }
        }

        fn is(&self, r: &Record<'_>) -> bool {
            match (self, r) {
                (Owned::Put(s, o, d), Record::Put { slot, offset, data }) => {
                    (s, o, &d[..]) == (slot, offset, data)
                }
                (Owned::Get(s, o, n), Record::Get { slot, offset, len }) => {
                    (s, o, n) == (slot, offset, len)
                }
                (Owned::Send(t, p), Record::Send { tag, payload }) => {
                    (&t[..], &p[..]) == (tag, payload)
                }
                (Owned::Reg(sizes, pops), Record::Reg(r)) => {
                    r.push_sizes().eq(sizes.iter().map(|&s| s as u64))
                        && r.pops().eq(pops.iter().copied())
                }
                (Owned::End, Record::End) => true,
                _ => false,
            }
        }
    }

    fn record() -> impl Strategy<Value = Owned> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..48);
        prop_oneof![
            (any::<u32>(), any::<usize>(), bytes()).prop_map(|(s, o, d)| Owned::Put(s, o, d)),
            (any::<u32>(), any::<usize>(), any::<usize>())
                .prop_map(|(s, o, n)| Owned::Get(s, o, n)),
            (bytes(), bytes()).prop_map(|(t, p)| Owned::Send(t, p)),
            (
                proptest::collection::vec(any::<usize>(), 0..5),
                proptest::collection::vec(any::<u32>(), 0..5)
            )
                .prop_map(|(s, p)| Owned::Reg(s, p)),
            Just(Owned::End),
        ]
    }

    proptest! {
        /// Messages of random records decode back to the same records, all of the bytes.
        #[test]
        fn messages_of_random_records_round_trip(records in proptest::collection::vec(record(), 0..12)) {
            let mut bytes = Vec::new();
            for r in &records {
                r.encode(&mut bytes);
            }
            let back: Vec<Record<'_>> = Records::new(&bytes).collect::<Result<_, _>>().expect("decodes");
            prop_assert_eq!(back.len(), records.len());
            for (want, got) in records.iter().zip(&back) {
                prop_assert!(want.is(got), "{:?} came back as {:?}", want, got);
            }
        }

        /// A bit flipped anywhere in a message: every record decodes or fails with an error,
        /// never a panic, and what decodes encodes back to the bytes it came from.
        #[test]
        fn flipped_bits_decode_or_fail_cleanly(
            records in proptest::collection::vec(record(), 1..6),
            at in any::<usize>(),
            bit in 0u8..8,
        ) {
            let mut bytes = Vec::new();
            for r in &records {
                r.encode(&mut bytes);
            }
            let at = at % bytes.len();
            bytes[at] ^= 1 << bit;
            let mut taken = 0;
            for r in Records::new(&bytes) {
                let Ok(r) = r else { break };
                let mut again = Vec::new();
                r.encode(&mut again);
                prop_assert_eq!(&again[..], &bytes[taken..taken + again.len()]);
                taken += again.len();
            }
            prop_assert!(taken <= bytes.len());
        }

        /// Arbitrary bytes never panic the decoder nor make it claim more than it was given.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            if let Ok((_, used)) = decode(&bytes) {
                prop_assert!(used <= bytes.len());
            }
        }
    }
}
