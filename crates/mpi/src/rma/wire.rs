//! The messages windows exchange, one eager message each on the window's own context.
//!
//! Every payload starts with [`VERSION`]; integers are little-endian. The message kind is the
//! tag. A target region is a list of blocks (byte offset in the target window, or an address
//! for a dynamic window; length), the flattened target datatype of that piece of the operation,
//! so the target needs no datatype of its own. Decoders check every length before reading and
//! before allocating.
//!
//! | tag | kind | fields after the version byte |
//! |---|---|---|
//! | 0x01 | PUT | blocks, data |
//! | 0x02 | GET | id u64, blocks |
//! | 0x03 | ACC | op u32, type u32, blocks, data |
//! | 0x04 | GET_ACC | id u64, op u32, type u32, blocks, data (none for MPI_NO_OP) |
//! | 0x05 | CAS | id u64, type u32, offset u64, compare, origin (one element each) |
//! | 0x06 | LOCK | exclusive u8 |
//! | 0x07 | UNLOCK | — |
//! | 0x08 | POST | — |
//! | 0x09 | COMPLETE | — |
//! | 0x40 | ACK | status u8 (0 done, 1 outside the window) |
//! | 0x41 | DATA | id u64, status u8, data |
//! | 0x42 | GRANT | — |
//! | 0x43 | UNLOCKED | — |
//!
//! `blocks` is a u32 count followed by (offset u64, length u64) pairs.

use thiserror::Error;

/// First byte of every payload.
pub(crate) const VERSION: u8 = 1;

/// Message kinds (tags).
pub(crate) mod kind {
    /// Write data into the target.
    pub(crate) const PUT: i32 = 0x01;
    /// Read data from the target.
    pub(crate) const GET: i32 = 0x02;
    /// Combine data into the target.
    pub(crate) const ACC: i32 = 0x03;
    /// Combine and return the old contents.
    pub(crate) const GET_ACC: i32 = 0x04;
    /// Compare and swap one element.
    pub(crate) const CAS: i32 = 0x05;
    /// Ask for a lock.
    pub(crate) const LOCK: i32 = 0x06;
    /// Give a lock back.
    pub(crate) const UNLOCK: i32 = 0x07;
    /// The target's exposure epoch began (PSCW).
    pub(crate) const POST: i32 = 0x08;
    /// The origin's access epoch ended (PSCW).
    pub(crate) const COMPLETE: i32 = 0x09;
    /// An operation was applied.
    pub(crate) const ACK: i32 = 0x40;
    /// Data answering a GET, GET_ACC or CAS.
    pub(crate) const DATA: i32 = 0x41;
    /// A lock was granted.
    pub(crate) const GRANT: i32 = 0x42;
    /// An unlock was done.
    pub(crate) const UNLOCKED: i32 = 0x43;
}

/// Bytes of a message before its blocks and data, at most (version, id, op, type).
pub(crate) const HEADER_MAX: usize = 1 + 8 + 4 + 4 + 4;
/// Bytes each block takes.
pub(crate) const BLOCK_LEN: usize = 16;

/// A malformed message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum WireError {
    /// The payload ended early.
    #[error("message of {len} bytes is cut short (needs {needed})")]
    Short {
        /// Bytes there.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// The version byte is not ours.
    #[error("message version {0}, expected {VERSION}")]
    Version(u8),
    /// A count does not fit the payload.
    #[error("{0} blocks announced do not fit the message")]
    Blocks(u32),
}

/// Reads a payload front to back.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// Starts at the version byte, which must be [`VERSION`].
    pub(crate) fn new(bytes: &'a [u8]) -> Result<Reader<'a>, WireError> {
        let mut r = Reader { bytes, at: 0 };
        match r.u8()? {
            VERSION => Ok(r),
            v => Err(WireError::Version(v)),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(WireError::Short {
                len: self.bytes.len(),
                needed: self.at.saturating_add(n),
            });
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// One byte.
    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    /// A little-endian u32.
    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A little-endian u64.
    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// `n` bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        self.take(n)
    }

    /// A block list.
    pub(crate) fn blocks(&mut self) -> Result<Vec<(u64, u64)>, WireError> {
        let n = self.u32()?;
        if (n as usize).saturating_mul(BLOCK_LEN) > self.rest().len() {
            return Err(WireError::Blocks(n));
        }
        (0..n).map(|_| Ok((self.u64()?, self.u64()?))).collect()
    }

    /// Everything not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }
}

/// Builds a payload.
pub(crate) struct Writer(Vec<u8>);

impl Writer {
    /// A payload with room for `cap` bytes, the version byte written.
    pub(crate) fn new(cap: usize) -> Writer {
        let mut v = Vec::with_capacity(cap.max(1));
        v.push(VERSION);
        Writer(v)
    }

    /// Appends one byte.
    pub(crate) fn u8(mut self, v: u8) -> Writer {
        self.0.push(v);
        self
    }

    /// Appends a u32.
    pub(crate) fn u32(mut self, v: u32) -> Writer {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a u64.
    pub(crate) fn u64(mut self, v: u64) -> Writer {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a block list.
    pub(crate) fn blocks(mut self, blocks: &[(u64, u64)]) -> Writer {
        self.0
            .extend_from_slice(&(blocks.len() as u32).to_le_bytes());
        for &(off, len) in blocks {
            self.0.extend_from_slice(&off.to_le_bytes());
            self.0.extend_from_slice(&len.to_le_bytes());
        }
        self
    }

    /// Appends raw bytes.
    pub(crate) fn bytes(mut self, b: &[u8]) -> Writer {
        self.0.extend_from_slice(b);
        self
    }

    /// Room at the end for `n` bytes, returned for filling in place.
    pub(crate) fn reserve_tail(&mut self, n: usize) -> &mut [u8] {
        let start = self.0.len();
        self.0.resize(start + n, 0);
        &mut self.0[start..]
    }

    /// The payload.
    pub(crate) fn done(self) -> Vec<u8> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_short_input_is_an_error() {
        let msg = Writer::new(64)
            .u64(7)
            .u32(0x21)
            .blocks(&[(8, 4), (16, 4)])
            .bytes(b"abcdefgh")
            .done();
        let mut r = Reader::new(&msg).unwrap();
        assert_eq!(r.u64().unwrap(), 7);
        assert_eq!(r.u32().unwrap(), 0x21);
        assert_eq!(r.blocks().unwrap(), vec![(8, 4), (16, 4)]);
        assert_eq!(r.rest(), b"abcdefgh");
        for cut in 0..msg.len() - 8 {
            let r = Reader::new(&msg[..cut]).and_then(|mut r| {
                r.u64()?;
                r.u32()?;
                r.blocks()
            });
            assert!(r.is_err(), "cut at {cut}");
        }
        assert_eq!(Reader::new(&[9]).err(), Some(WireError::Version(9)));
        let huge = Writer::new(8).u32(u32::MAX).done();
        assert_eq!(
            Reader::new(&huge).unwrap().blocks(),
            Err(WireError::Blocks(u32::MAX))
        );
    }
}
