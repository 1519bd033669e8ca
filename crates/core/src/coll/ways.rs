//! Which way each blocking collective of a communicator went — through its shared segment (in
//! turns, or through a post slot for a short broadcast) or by messages — as every member
//! records it, so that members that went different ways for the same call find out instead
//! of waiting for each other forever.
//!
//! Members choose the way from the call's arguments (the selection table looks at byte
//! counts), so a program that passes different counts on different ranks, which MPI calls
//! erroneous, can send one rank into the segment and another into a message algorithm. Each
//! member keeps a [`PathRecord`] of its latest calls in its line of the segment, and a
//! [`PathLog`] of all its recent calls to itself; a member that has waited a while compares
//! the others' records with its own ([`PathLog::disagreement`]). The log covers a member that
//! is far behind: one stuck in a call while this one ran on (a broadcast root whose sends do
//! not wait), which only this one can then tell.

/// Calls a record remembers the way of.
pub(crate) const KEPT: u32 = 24;

/// Bits of one call's way.
const WAY_BITS: u32 = 2;

/// How a member went through one blocking call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// By messages (a schedule).
    Messages = 0,
    /// Through the shared segment, the members taking turns.
    Segment = 1,
    /// Through a post slot of the shared segment (a short broadcast: the root does not wait).
    Posted = 2,
}

impl Way {
    fn of_bits(bits: u64) -> Way {
        match bits & 3 {
            1 => Way::Segment,
            2 => Way::Posted,
            _ => Way::Messages,
        }
    }

    /// How an error says it.
    pub(crate) fn said(self) -> &'static str {
        match self {
            Way::Messages => "by messages",
            Way::Segment => "through the shared segment",
            Way::Posted => "through the shared segment's post slots",
        }
    }
}

/// Bits of the call number field: blocking calls are numbered `0 .. 2^14` (see
/// `comm::CallNumbers`), bit 14 says that the member is finalizing (it is stuck in no call),
/// and bit 15 that a call was recorded at all.
const CALL_BITS: u32 = 16;
const FINISHED: u64 = 1 << 14;
const RECORDED: u64 = 1 << 15;
const NUMBER: u64 = (1 << 14) - 1;

/// Blocking call numbers wrap at this.
const SPAN: u32 = 1 << 14;

/// One member's record, one word: the number of its latest blocking call, and the [`Way`] of
/// each of the [`KEPT`] latest in two bits, the latest lowest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PathRecord(u64);

impl PathRecord {
    /// The record read from a segment word.
    pub(crate) fn from_word(word: u64) -> PathRecord {
        PathRecord(word)
    }

    /// The word to store.
    pub(crate) fn word(self) -> u64 {
        self.0
    }

    /// This record after call `call` went `way`.
    pub(crate) fn after(self, call: u32, way: Way) -> PathRecord {
        let ways = (self.0 >> CALL_BITS) << WAY_BITS | way as u64;
        PathRecord(ways << CALL_BITS | RECORDED | (u64::from(call) & NUMBER))
    }

    /// This record, of a member that is finalizing.
    pub(crate) fn finished(self) -> PathRecord {
        PathRecord(self.0 | FINISHED)
    }

    fn latest(self) -> Option<u32> {
        (self.0 & RECORDED != 0).then_some((self.0 & NUMBER) as u32)
    }

    fn ways(self) -> u64 {
        self.0 >> CALL_BITS
    }
}

/// A call that two members made different ways: its number, and the way of each (the first of
/// the two records', the second's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Disagreement {
    pub(crate) call: u32,
    pub(crate) mine: Way,
    pub(crate) theirs: Way,
}

/// Calls of the log per word.
const PER_WORD: u32 = 64 / WAY_BITS;

/// Where [`PathLog`] keeps the way of call `call`: its word, and the shift within it.
fn slot(call: u32) -> (usize, u32) {
    (
        (call % SPAN / PER_WORD) as usize,
        call % PER_WORD * WAY_BITS,
    )
}

/// This member's way through each of its last [`SPAN`] blocking calls, and its record.
pub(crate) struct PathLog {
    record: PathRecord,
    /// Bits `2 (call % SPAN)` and up: that call's [`Way`].
    ways: Box<[u64; (SPAN / PER_WORD) as usize]>,
}

impl Default for PathLog {
    fn default() -> Self {
        PathLog {
            record: PathRecord::default(),
            ways: Box::new([0; (SPAN / PER_WORD) as usize]),
        }
    }
}

impl PathLog {
    /// Logs call `call`; returns the record to publish.
    #[inline]
    pub(crate) fn log(&mut self, call: u32, way: Way) -> PathRecord {
        let (word, shift) = slot(call);
        let w = &mut self.ways[word];
        *w = *w & !(3 << shift) | (way as u64) << shift;
        self.record = self.record.after(call, way);
        self.record
    }

    /// The way this log has for call `call`.
    fn way(&self, call: u32) -> Way {
        let (word, shift) = slot(call);
        Way::of_bits(self.ways[word] >> shift)
    }

    /// This log's record, marked as that of a member that is finalizing.
    pub(crate) fn finished(&self) -> PathRecord {
        self.record.finished()
    }

    /// Whether `theirs` has recorded this log's latest call or a later one, or is finalizing
    /// (true when this log holds none).
    pub(crate) fn reached_by(&self, theirs: PathRecord) -> bool {
        let Some(mine) = self.record.latest() else {
            return true;
        };
        theirs.0 & FINISHED != 0
            || theirs
                .latest()
                .is_some_and(|call| (call + SPAN - mine) % SPAN <= SPAN / 2)
    }

    /// The oldest call where `theirs` and this log disagree, as far as they can tell: their
    /// records, or, when the other member is more than [`KEPT`] calls behind, the way of its
    /// latest call against this log's.
    pub(crate) fn disagreement(&self, theirs: PathRecord) -> Option<Disagreement> {
        if let Some(d) = first_disagreement(self.record, theirs) {
            return Some(d);
        }
        let (mine, call) = (self.record.latest()?, theirs.latest()?);
        let behind = (mine + SPAN - call) % SPAN;
        let (mine, theirs) = (self.way(call), Way::of_bits(theirs.ways()));
        ((KEPT..=SPAN / 2).contains(&behind) && mine != theirs).then_some(Disagreement {
            call,
            mine,
            theirs,
        })
    }
}

/// The oldest call both records hold that they made different ways. Records more than
/// [`KEPT`] calls apart, or one that holds no call yet, tell nothing.
pub(crate) fn first_disagreement(mine: PathRecord, theirs: PathRecord) -> Option<Disagreement> {
    let (a, b) = (mine.latest()?, theirs.latest()?);
    // How far `mine` is ahead, between -SPAN/2 and SPAN/2.
    let ahead = (a + SPAN - b) % SPAN;
    let ahead = if ahead > SPAN / 2 {
        ahead as i64 - SPAN as i64
    } else {
        ahead as i64
    };
    let apart = ahead.unsigned_abs() as u32;
    if apart >= KEPT {
        return None;
    }
    // Both aligned on the earlier of the two latest calls: way k is call (common - k).
    let (my_ways, their_ways, common) = if ahead >= 0 {
        (mine.ways() >> (apart * WAY_BITS), theirs.ways(), b)
    } else {
        (mine.ways(), theirs.ways() >> (apart * WAY_BITS), a)
    };
    let both = KEPT - apart;
    let differ = (my_ways ^ their_ways) & ((1u64 << (both * WAY_BITS)) - 1);
    if differ == 0 {
        return None;
    }
    let oldest = (63 - differ.leading_zeros()) / WAY_BITS;
    let way = |ways: u64| Way::of_bits(ways >> (oldest * WAY_BITS));
    Some(Disagreement {
        call: (common + SPAN - oldest) % SPAN,
        mine: way(my_ways),
        theirs: way(their_ways),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn way(shared: bool) -> Way {
        match shared {
            true => Way::Segment,
            false => Way::Messages,
        }
    }

    /// The disagreement over `call` of a record that went through the segment for it
    /// (`mine_shared`) and one that went by messages, or the other way round.
    fn d(call: u32, mine_shared: bool) -> Disagreement {
        Disagreement {
            call,
            mine: way(mine_shared),
            theirs: way(!mine_shared),
        }
    }

    /// A record of calls `first ..` with the given ways (true: through the segment).
    fn record(first: u32, ways: &[bool]) -> PathRecord {
        (ways.iter().enumerate()).fold(PathRecord::default(), |r, (i, &shared)| {
            r.after((first + i as u32) % SPAN, way(shared))
        })
    }

    #[test]
    fn the_same_ways_agree_however_far_apart() {
        let ways = [true, false, false, true, true, false, true];
        let all = record(5, &ways);
        for done in 1..ways.len() {
            let behind = record(5, &ways[..done]);
            assert_eq!(first_disagreement(all, behind), None, "{done}");
            assert_eq!(first_disagreement(behind, all), None, "{done}");
        }
        assert_eq!(first_disagreement(all, PathRecord::default()), None);
        assert_eq!(first_disagreement(PathRecord::default(), all), None);
    }

    #[test]
    fn the_oldest_call_made_different_ways_is_named() {
        // Calls 10, 11, 12: the second went different ways, and so did the third.
        let mine = record(10, &[true, true, false]);
        let theirs = record(10, &[true, false, true]);
        let eleven = d(11, true);
        assert_eq!(first_disagreement(mine, theirs), Some(eleven));
        // A member stuck in call 11 by messages, another two calls on.
        let stuck = record(10, &[true, false]);
        assert_eq!(first_disagreement(mine, stuck), Some(eleven));
        assert_eq!(first_disagreement(stuck, mine), Some(d(11, false)));
    }

    #[test]
    fn call_numbers_wrap() {
        let mine = record(SPAN - 2, &[false, false, true, false]);
        let theirs = record(SPAN - 2, &[false, false, false]);
        assert_eq!(first_disagreement(mine, theirs), Some(d(0, true)));
        assert_eq!(first_disagreement(mine, record(SPAN - 2, &[false])), None);
    }

    /// A log of calls `first ..` with the given ways.
    fn log(first: u32, ways: &[bool]) -> PathLog {
        let mut log = PathLog::default();
        for (i, &shared) in ways.iter().enumerate() {
            log.log((first + i as u32) % SPAN, way(shared));
        }
        log
    }

    #[test]
    fn a_log_tells_a_member_far_behind_that_went_the_other_way() {
        // This member ran 99 calls past call 7, all by messages; the other is stuck in call 7,
        // which it went into through the segment.
        let ways: Vec<bool> = (0..100).map(|i| i == 7).collect();
        let mine = log(SPAN - 3, &ways);
        let mut theirs = ways[..8].to_vec();
        assert_eq!(mine.disagreement(record(SPAN - 3, &theirs)), None);
        theirs[7] = false;
        assert_eq!(
            mine.disagreement(record(SPAN - 3, &theirs)),
            Some(d(4, true))
        );
        // Within the records' reach the records decide, as before.
        let near = log(SPAN - 3, &ways[..20]);
        assert_eq!(
            near.disagreement(record(SPAN - 3, &theirs)),
            Some(d(4, true))
        );
        // A member ahead of this one is not judged by the log.
        assert_eq!(
            log(1, &[false]).disagreement(record(1, &[false, true])),
            None
        );
        // Who has caught up with a log's latest call.
        assert!(mine.reached_by(record(SPAN - 3, &ways)));
        assert!(!mine.reached_by(record(SPAN - 3, &theirs)));
        assert!(near.reached_by(record(SPAN - 3, &ways)));
        assert!(!mine.reached_by(PathRecord::default()));
        // A member that finalizes is stuck in no call, wherever its record ends.
        let done = record(SPAN - 3, &theirs).finished();
        assert!(mine.reached_by(done));
        assert_eq!(first_disagreement(record(SPAN - 3, &theirs), done), None);
        assert!(PathLog::default().reached_by(PathRecord::default()));
    }

    #[test]
    fn records_too_far_apart_tell_nothing() {
        let ways = vec![false; KEPT as usize + 1];
        let mut other = ways.clone();
        other[0] = true;
        let (long, short) = (record(1, &ways), record(1, &other[..1]));
        assert_eq!(first_disagreement(long, short), None);
        // One call fewer apart: the first call is still held by both.
        let near = record(1, &ways[..KEPT as usize]);
        assert_eq!(first_disagreement(near, short), Some(d(1, false)));
    }

    #[test]
    fn a_post_and_turns_through_the_segment_are_different_ways() {
        // Call 3: a short broadcast's post slot on one member, the segment's turns on the
        // other (their counts fall on both sides of the post slot's size).
        let calls = |third: Way| {
            [Way::Segment, Way::Messages, third]
                .iter()
                .enumerate()
                .fold(PathRecord::default(), |r, (i, &w)| r.after(1 + i as u32, w))
        };
        let (posted, turns) = (calls(Way::Posted), calls(Way::Segment));
        assert_eq!(
            first_disagreement(posted, turns),
            Some(Disagreement {
                call: 3,
                mine: Way::Posted,
                theirs: Way::Segment
            })
        );
        assert_eq!(first_disagreement(posted, posted), None);
        // The log of a member far ahead tells the same.
        let mut log = PathLog::default();
        log.log(1, Way::Posted);
        for call in 2..=KEPT + 1 {
            log.log(call, Way::Messages);
        }
        let stuck = PathRecord::default().after(1, Way::Segment);
        assert_eq!(
            log.disagreement(stuck),
            Some(Disagreement {
                call: 1,
                mine: Way::Posted,
                theirs: Way::Segment
            })
        );
    }
}
