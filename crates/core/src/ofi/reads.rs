//! Large messages over the rails: the sender registers its buffer on every rail the pair
//! shares (`expose`), and the receiver cuts its read into pieces spread over them.
//!
//! - **Announcing.** The RTS_READ frame carries rail 0's address and key; the fabric message
//!   that carries it adds, for each further rail, the buffer's address and key there (16
//!   bytes each). The receiver keeps them until its read starts, or until its FIN says that
//!   the receive took nothing.
//! - **Striping.** Over one rail a read goes in pieces of the provider's largest message, as
//!   many at once as the endpoint takes. Over several, it goes in pieces of [`STRIPE_PIECE`],
//!   each to the rail with the fewest pieces of that read in flight, at most
//!   [`PIECES_PER_RAIL`] each: a rail that completes its pieces sooner takes the next ones,
//!   so the split follows each rail's delivered rate.
//! - **Failover.** Reads are idempotent: a piece that fails on a rail is read again on
//!   another; that rail is down for that peer from then on, and the rank says so once on
//!   stderr. A peer whose last rail fails is lost.

use super::*;
use ferry_wire::frame::kind;

/// Largest piece of a read spread over several rails.
const STRIPE_PIECE: usize = 512 << 10;
/// Pieces of one read in flight on one rail at most, when the pair shares several rails.
const PIECES_PER_RAIL: usize = 4;
/// Bytes per further rail in an RTS_READ's message: the buffer's address and key there.
const RAIL_OFFER_LEN: usize = 16;

/// A buffer a peer announced (RTS_READ) whose read has not started: its address and key on
/// rail 0 (from the frame) and on the further rails (from the message).
pub(super) struct Offered {
    pub(super) send_id: u64,
    pub(super) rail0: Remote,
    pub(super) more: Vec<Remote>,
}

/// The further rails of an RTS_READ of `send_id` at `rail0` whose message went on with
/// `bytes`; `None` when it offered none.
pub(super) fn offered(
    send_id: u64,
    rail0: Remote,
    bytes: &[u8],
) -> Result<Option<Offered>, String> {
    if bytes.is_empty() {
        return Ok(None);
    }
    if !bytes.len().is_multiple_of(RAIL_OFFER_LEN)
        || bytes.len() / RAIL_OFFER_LEN >= MAX_FABRIC_RAILS
    {
        return Err(format!(
            "{} bytes of further rails: expected at most {} of {RAIL_OFFER_LEN} bytes",
            bytes.len(),
            MAX_FABRIC_RAILS - 1
        ));
    }
    let word = |b: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        u64::from_le_bytes(w)
    };
    let more = bytes
        .chunks_exact(RAIL_OFFER_LEN)
        .map(|c| Remote {
            addr: word(&c[..8]),
            key: word(&c[8..]),
        })
        .collect();
    Ok(Some(Offered {
        send_id,
        rail0,
        more,
    }))
}

/// A piece of a read in flight: its offset, length and rail.
#[derive(Clone, Copy)]
struct Piece {
    at: usize,
    len: usize,
    rail: usize,
}

/// A read in flight, in pieces over the rails.
pub(super) struct ReadInFlight {
    pub(super) read: FabricRead,
    /// The peer's buffer as each rail names it, rail 0 first.
    remotes: Vec<Remote>,
    /// The receive buffer's registration on each rail that carried a piece.
    regions: Vec<Option<Region>>,
    /// The first byte not yet given to a piece, and pieces to read again (their rail failed).
    next: usize,
    retry: Vec<(usize, usize)>,
    /// Pieces in flight, by the place their context names, and how many on each rail.
    flying: Vec<Option<Piece>>,
    per_rail: Vec<usize>,
    /// Pieces in flight.
    pub(super) pending: usize,
}

impl ReadInFlight {
    fn finished(&self) -> bool {
        self.pending == 0 && self.retry.is_empty() && self.next >= self.read.len
    }

    /// The next piece to read, at most `most` bytes.
    fn take_piece(&mut self, most: usize) -> Option<(usize, usize)> {
        if let Some((at, len)) = self.retry.pop() {
            // A piece sized for another rail may be too large for this one.
            if len > most {
                self.retry.push((at + most, len - most));
            }
            return Some((at, len.min(most)));
        }
        let len = most.min(self.read.len - self.next);
        (len > 0).then(|| {
            self.next += len;
            (self.next - len, len)
        })
    }

    fn put_back(&mut self, (at, len): (usize, usize)) {
        if at + len == self.next && self.retry.is_empty() {
            self.next = at;
        } else {
            self.retry.push((at, len));
        }
    }
}

/// What posting a read's pieces came to.
enum Posting {
    /// Every piece is posted.
    Done,
    /// Its rails have all the pieces they may have in flight.
    Busy,
    /// An endpoint refused a piece (EAGAIN): nothing more this pass.
    Full,
}

impl FabricTransport {
    /// Registers `len` bytes at `buf` (the buffer of rendezvous send `id` to `peer`) for the
    /// peer to read, on every rail the pair shares: rail 0's address and key, which the
    /// RTS_READ carries (its message adds the others). Held until
    /// [`FabricTransport::release`], or until the peer is lost.
    pub(crate) fn expose(
        &mut self,
        (id, peer): (ReqId, u32),
        buf: *const u8,
        len: usize,
    ) -> Result<(u64, u64), Error> {
        self.addr(peer as usize)?;
        let shared = self.peers[peer as usize].addrs.len();
        let mut regions = Vec::with_capacity(shared);
        for rail in 0..shared {
            // SAFETY: the send's buffer stays lent (unchanged) until the peer's FIN, which is
            // when the registrations go (`release`).
            match unsafe { self.rail(rail).register(buf, len, Access::REMOTE_READ) } {
                Ok(region) => regions.push(region),
                Err(e) if rail == 0 => return Err(fabric_error(e)),
                // A further rail that cannot register is not offered (nor those after it).
                Err(_) => break,
            }
        }
        let Remote { addr, key } = regions[0].remote();
        self.exposed.insert(id, (peer, regions));
        Ok((addr, key))
    }

    /// The peer read send `id`: its registrations go.
    pub(crate) fn release(&mut self, id: ReqId) {
        self.exposed.remove(&id);
    }

    /// What the fabric message of `frame` to `peer` carries after the frame: for an RTS_READ,
    /// its buffer's address and key on each further rail. A FIN to `peer` ends what is left of
    /// the announcement it answers (a receive that took nothing never starts its read).
    pub(super) fn announce_rails(&mut self, peer: usize, frame: &OutFrame) -> Vec<u8> {
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&frame.header[at..at + 8]);
            u64::from_le_bytes(w)
        };
        match frame.header[1] {
            kind::RTS_READ => {
                let Some((_, regions)) = self.exposed.get(&word(24)) else {
                    return Vec::new();
                };
                let mut bytes = Vec::with_capacity(regions.len().saturating_sub(1) * 16);
                for region in &regions[1..] {
                    let Remote { addr, key } = region.remote();
                    bytes.extend_from_slice(&addr.to_le_bytes());
                    bytes.extend_from_slice(&key.to_le_bytes());
                }
                bytes
            }
            kind::FIN => {
                let send_id = word(16);
                if let Some(p) = self.peers.get_mut(peer) {
                    p.offered.retain(|o| o.send_id != send_id);
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// Starts `read` (its pieces go out over the rails as the endpoints take them).
    pub(crate) fn start_read(&mut self, read: FabricRead) -> Result<(), Error> {
        let peer = read.peer as usize;
        self.addr(peer)?;
        let rail0 = Remote {
            addr: read.remote_addr,
            key: read.key,
        };
        let p = &mut self.peers[peer];
        let more = match p.offered.iter().position(|o| o.rail0 == rail0) {
            Some(i) => p.offered.swap_remove(i).more,
            None => Vec::new(),
        };
        let mut remotes = vec![rail0];
        remotes.extend(more);
        remotes.truncate(p.addrs.len());
        let rails = remotes.len();
        let index = match self.reads.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.reads.push(None);
                self.reads.len() - 1
            }
        };
        self.reads[index] = Some(ReadInFlight {
            read,
            remotes,
            regions: (0..rails).map(|_| None).collect(),
            next: 0,
            retry: Vec::new(),
            flying: Vec::new(),
            per_rail: vec![0; rails],
            pending: 0,
        });
        self.waiting_reads.push(index);
        self.post_reads()
    }

    /// Posts the pieces of waiting reads while their rails and the endpoints take them.
    pub(super) fn post_reads(&mut self) -> Result<(), Error> {
        let mut w = 0;
        while let Some(&index) = self.waiting_reads.get(w) {
            match self.post_pieces(index)? {
                Posting::Done => {
                    self.waiting_reads.remove(w);
                }
                Posting::Busy => w += 1,
                Posting::Full => return Ok(()),
            }
        }
        Ok(())
    }

    /// The rail for the next piece of read `index`: among the rails still up towards its
    /// peer, the one with the fewest of its pieces in flight, if any may take one.
    /// Rails that refused a piece in this pass (`refused`, bits) are passed over.
    fn pick_rail(&self, index: usize, refused: u32) -> Option<usize> {
        let r = self.reads.get(index)?.as_ref()?;
        let p = self.peers.get(r.read.peer as usize)?;
        let up = (0..r.remotes.len()).filter(|&i| p.rail_up(i));
        let most = if up.clone().count() > 1 {
            PIECES_PER_RAIL
        } else {
            usize::MAX
        };
        up.filter(|&i| r.per_rail[i] < most && refused & (1 << i) == 0)
            .min_by_key(|&i| r.per_rail[i])
    }

    fn post_pieces(&mut self, index: usize) -> Result<Posting, Error> {
        let mut refused = 0u32;
        loop {
            let Some(r) = self.reads.get(index).and_then(Option::as_ref) else {
                return Ok(Posting::Done);
            };
            if r.retry.is_empty() && r.next >= r.read.len {
                return Ok(Posting::Done);
            }
            let (peer, offered) = (r.read.peer as usize, r.remotes.len());
            let Some(rail) = self.pick_rail(index, refused) else {
                return Ok(if refused == 0 {
                    Posting::Busy
                } else {
                    Posting::Full
                });
            };
            let addr = self.rail_addr(peer, rail)?;
            match self.post_piece(index, rail, addr) {
                Ok(Some(true)) => {
                    let p = &mut self.peers[peer];
                    (p.refusing[rail], p.moved) = (None, true);
                    p.read_pieces += 1;
                    self.watch(peer);
                }
                Ok(Some(false)) => {
                    // That rail is full, or not connected yet: the others may take the piece.
                    refused |= 1 << rail;
                    self.refused(peer, "fi_read");
                    self.rail_refused(peer, rail);
                }
                Ok(None) => return Ok(Posting::Done),
                // The rail cannot read (a NIC gone): the others may, as after a failed piece.
                Err(e) if (0..offered).any(|i| i != rail && self.peers[peer].rail_up(i)) => {
                    self.rail_down(peer, rail, &e.to_string())?;
                }
                Err(e) => return Err(fabric_error(e)),
            }
        }
    }

    /// Posts the next piece of read `index` on `rail` (the peer at `addr` there), registering
    /// the receive buffer on that rail first if needed: whether the endpoint took it (a piece
    /// it refused, or one that failed to post, is put back), `None` when no piece is left.
    fn post_piece(
        &mut self,
        index: usize,
        rail: usize,
        addr: PeerAddr,
    ) -> Result<Option<bool>, ferry_fabric::FabricError> {
        let ep = match rail.checked_sub(1) {
            Some(i) => &mut self.more[i],
            None => &mut self.ep,
        };
        let Some(r) = self.reads.get_mut(index).and_then(Option::as_mut) else {
            return Ok(None);
        };
        if r.regions[rail].is_none() {
            // SAFETY: the receive buffer stays lent until the read completes, and the region
            // is held as long as the read.
            r.regions[rail] = Some(unsafe { ep.register(r.read.buf, r.read.len, Access::READ) }?);
        }
        let most = ep.info().provider.max_msg_size.max(1);
        let most = if r.remotes.len() > 1 {
            most.min(STRIPE_PIECE)
        } else {
            most
        };
        let Some((at, len)) = r.take_piece(most) else {
            return Ok(None);
        };
        let place = match r.flying.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                r.flying.push(None);
                r.flying.len() - 1
            }
        };
        let ctx = READ_CTX | (place as u64) << CTX_GEN_SHIFT | index as u64;
        let remote = Remote {
            addr: r.remotes[rail].addr + at as u64,
            key: r.remotes[rail].key,
        };
        let desc = r.regions[rail].as_ref().map(Region::desc);
        let desc = desc.ok_or_else(unregistered)?;
        // SAFETY: `at + len ≤ read.len`, inside the receive buffer, registered in the rail's
        // region and lent until the read completes.
        let local = unsafe { r.read.buf.add(at) };
        // SAFETY: as above.
        match unsafe { ep.read(addr, local, len, desc, remote, ctx) } {
            Ok(true) => {
                r.flying[place] = Some(Piece { at, len, rail });
                r.per_rail[rail] += 1;
                r.pending += 1;
                Ok(Some(true))
            }
            Ok(false) => {
                r.put_back((at, len));
                Ok(Some(false))
            }
            Err(e) => {
                r.put_back((at, len));
                Err(e)
            }
        }
    }

    /// A piece of read `index` completed: the read's receive is done once every piece is; a
    /// piece that failed is read again on another rail; a read from a lost peer goes, with
    /// its registrations, once no piece is in flight.
    pub(super) fn read_completed(
        &mut self,
        index: usize,
        c: &Completion,
        sink: &mut dyn FrameSink,
    ) -> Result<(), Error> {
        let place = (c.context >> CTX_GEN_SHIFT & CTX_GEN_MASK) as usize;
        let Some(r) = self.reads.get_mut(index).and_then(Option::as_mut) else {
            return Ok(());
        };
        let Some(piece) = r.flying.get_mut(place).and_then(Option::take) else {
            return Ok(());
        };
        let (peer, id) = (r.read.peer, r.read.id);
        r.pending = r.pending.saturating_sub(1);
        r.per_rail[piece.rail] = r.per_rail[piece.rail].saturating_sub(1);
        let (finished, idle) = (r.finished(), r.pending == 0);
        let p = &mut self.peers[peer as usize];
        p.read_pieces = p.read_pieces.saturating_sub(1);
        if p.lost.is_some() {
            if idle {
                self.reads[index] = None;
            }
            return Ok(());
        }
        if let Err(e) = &c.result {
            return self.piece_failed(index, piece, &e.to_string());
        }
        p.moved = true;
        #[cfg(test)]
        {
            let bytes = &mut self.read_bytes;
            bytes.resize(bytes.len().max(piece.rail + 1), 0);
            bytes[piece.rail] += piece.len;
        }
        if finished {
            self.reads[index] = None;
            sink.read_done(peer, id)?;
        }
        Ok(())
    }

    /// `piece` of read `index` failed with `error` on its rail: that rail is down for the
    /// read's peer, and the piece goes again on another; with none left the peer is lost.
    fn piece_failed(&mut self, index: usize, piece: Piece, error: &str) -> Result<(), Error> {
        let Some(r) = self.reads.get_mut(index).and_then(Option::as_mut) else {
            return Ok(());
        };
        let peer = r.read.peer as usize;
        r.put_back((piece.at, piece.len));
        if !self.waiting_reads.contains(&index) {
            self.waiting_reads.push(index);
        }
        self.peers[peer].moved = true;
        self.rail_down(peer, piece.rail, error)
    }

    /// `rail` refused a read piece towards `peer` (EAGAIN): one that refuses for the patience
    /// while another rail serves the peer is down for it (if none does, the peer's own watch
    /// loses it). Refusals further apart than [`LOOK_GAP`] (the rank was away) start anew.
    fn rail_refused(&mut self, peer: usize, rail: usize) {
        let now = Instant::now();
        let p = &mut self.peers[peer];
        let first = match p.refusing[rail] {
            Some((first, last)) if now.saturating_duration_since(last) <= LOOK_GAP => first,
            _ => now,
        };
        p.refusing[rail] = Some((first, now));
        let others = (0..p.addrs.len()).any(|i| i != rail && p.rail_up(i));
        let waited = now.saturating_duration_since(first);
        if others && waited >= self.patience && p.rail_up(rail) {
            let why = format!(
                "fi_read answered EAGAIN on every try for {:.1} s",
                waited.as_secs_f64()
            );
            // Another rail is up: this cannot lose the peer.
            let _ = self.rail_down(peer, rail, &why);
        }
    }

    /// Reads towards `peer` failed on `rail` (`why`): it is down for that peer, said once on
    /// stderr; with no rail left the peer is lost.
    fn rail_down(&mut self, peer: usize, rail: usize, why: &str) -> Result<(), Error> {
        let p = &mut self.peers[peer];
        let newly = p.rail_up(rail);
        p.down |= 1 << rail;
        let left: Vec<String> = (0..p.addrs.len())
            .filter(|&i| p.rail_up(i))
            .map(|i| i.to_string())
            .collect();
        if left.is_empty() {
            let detail = format!("a fabric read ({}) failed: {why}", self.provider());
            return Err(self.lose(peer, detail));
        }
        if newly {
            let alive: Vec<bool> = (0..p.addrs.len()).map(|i| p.rail_up(i)).collect();
            crate::events::rail_failover(peer as u32, rail as u16, &alive, true);
            eprintln!(
                "ferry: rank {} (host {}): fabric rail {rail} ({}, {}) to rank {peer} failed: \
                 {why}; its reads go on over rail {}",
                self.me,
                self.host,
                self.rail_ref(rail).info().provider.domain,
                self.provider(),
                left.join(", ")
            );
        }
        Ok(())
    }
}

fn unregistered() -> ferry_fabric::FabricError {
    ferry_fabric::FabricError::Invalid("a read piece without its registration".into())
}
