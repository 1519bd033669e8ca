//! The records one process sends another in a superstep.

// Record kinds in the byte stream one process sends another in a superstep (little-endian).
pub(crate) const REC_PUT: u8 = 0x01; // slot u32, offset u64, len u64, bytes
pub(crate) const REC_GET: u8 = 0x02; // slot u32, offset u64, len u64
pub(crate) const REC_SEND: u8 = 0x03; // tag len u32, payload len u64, tag, payload
pub(crate) const REC_REG: u8 = 0x04; // pushes u32, sizes u64 each, pops u32, slots u32 each
pub(crate) const REC_END: u8 = 0x05; // (nothing): the sender is in bsp_end, not bsp_sync

/// Bytes of a put record before its data: kind, slot u32, offset u64, len u64.
pub(crate) const PUT_HEAD: usize = 21;

/// Bytes of a send record before its tag and payload: kind, tag len u32, payload len u64.
pub(crate) const SEND_HEAD: usize = 13;

/// The head of a send record.
pub(crate) fn send_head(tag_len: usize, payload_len: usize) -> [u8; SEND_HEAD] {
    let mut h = [0u8; SEND_HEAD];
    h[0] = REC_SEND;
    h[1..5].copy_from_slice(&(tag_len as u32).to_le_bytes());
    h[5..13].copy_from_slice(&(payload_len as u64).to_le_bytes());
    h
}

/// The head of a put (or get) record.
pub(crate) fn drma_head(kind: u8, slot: u32, offset: usize, len: usize) -> [u8; PUT_HEAD] {
    let mut h = [0u8; PUT_HEAD];
    h[0] = kind;
    h[1..5].copy_from_slice(&slot.to_le_bytes());
    h[5..13].copy_from_slice(&(offset as u64).to_le_bytes());
    h[13..21].copy_from_slice(&(len as u64).to_le_bytes());
    h
}

/// Reads little-endian fields from a record stream.
pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.buf.get(self.at..end)?;
        self.at = end;
        Some(s)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    }
    pub(crate) fn u64(&mut self) -> Option<usize> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
    }
    pub(crate) fn done(&self) -> bool {
        self.at == self.buf.len()
    }
}

/// The registrations of one process in one superstep, from its REC_REG record.
pub(crate) struct RegShape {
    pub(crate) pushes: Vec<usize>,
    pub(crate) pops: Vec<u32>,
}

impl RegShape {
    pub(crate) fn of(record: &[u8]) -> RegShape {
        let mut r = Reader { buf: record, at: 1 };
        let np = r.u32().unwrap_or(0);
        let pushes = (0..np).map(|_| r.u64().unwrap_or(0)).collect();
        let npop = r.u32().unwrap_or(0);
        let pops = (0..npop).map(|_| r.u32().unwrap_or(0)).collect();
        RegShape { pushes, pops }
    }
}

impl std::fmt::Display for RegShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bsp_push_reg (sizes {:?}) and bsp_pop_reg of registrations {:?}",
            self.pushes.len(),
            self.pushes,
            self.pops
        )
    }
}

pub(crate) fn put_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
pub(crate) fn put_u64(v: &mut Vec<u8>, x: usize) {
    v.extend_from_slice(&(x as u64).to_le_bytes());
}
