//! Which way each blocking collective of a communicator went — through its shared segment or
//! by messages — as every member records it, so that members that went different ways for
//! the same call find out instead of waiting for each other forever.
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
pub(crate) const KEPT: u32 = 48;

/// Bits of the call number field: blocking calls are numbered `0 .. 2^14` (see
/// `comm::CallNumbers`), bit 14 says that the member is finalizing (it is stuck in no call),
/// and bit 15 that a call was recorded at all.
const CALL_BITS: u32 = 16;
const FINISHED: u64 = 1 << 14;
const RECORDED: u64 = 1 << 15;
const NUMBER: u64 = (1 << 14) - 1;

/// Blocking call numbers wrap at this.
const SPAN: u32 = 1 << 14;

/// One member's record, one word: the number of its latest blocking call, and one bit per call
/// for the [`KEPT`] latest, the latest lowest: 1 if it went through the segment.
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

    /// This record after call `call` went through the segment (`shared`) or not.
    pub(crate) fn after(self, call: u32, shared: bool) -> PathRecord {
        let ways = (self.0 >> CALL_BITS) << 1 | u64::from(shared);
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

/// A call that two members made different ways: its number, and whether the first of the two
/// records went through the segment for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Disagreement {
    pub(crate) call: u32,
    pub(crate) mine_shared: bool,
}

/// This member's way through each of its last [`SPAN`] blocking calls, and its record.
pub(crate) struct PathLog {
    record: PathRecord,
    /// Bit `call % SPAN`: whether that call went through the segment.
    ways: Box<[u64; SPAN as usize / 64]>,
}

impl Default for PathLog {
    fn default() -> Self {
        PathLog {
            record: PathRecord::default(),
            ways: Box::new([0; SPAN as usize / 64]),
        }
    }
}

impl PathLog {
    /// Logs call `call`; returns the record to publish.
    #[inline]
    pub(crate) fn log(&mut self, call: u32, shared: bool) -> PathRecord {
        let (word, bit) = ((call % SPAN) as usize / 64, call % 64);
        let w = &mut self.ways[word];
        *w = *w & !(1 << bit) | u64::from(shared) << bit;
        self.record = self.record.after(call, shared);
        self.record
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
        let mine_shared = (self.ways[(call % SPAN) as usize / 64] >> (call % 64)) & 1 == 1;
        ((KEPT..=SPAN / 2).contains(&behind) && mine_shared != (theirs.ways() & 1 == 1))
            .then_some(Disagreement { call, mine_shared })
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
    // Both aligned on the later of the two latest calls: bit k is call (common - k).
    let (my_ways, their_ways, common) = if ahead >= 0 {
        (mine.ways() >> apart, theirs.ways(), b)
    } else {
        (mine.ways(), theirs.ways() >> apart, a)
    };
    let both = KEPT - apart;
    let differ = (my_ways ^ their_ways) & ((1u64 << both) - 1);
    if differ == 0 {
        return None;
    }
    let oldest = 63 - differ.leading_zeros();
    Some(Disagreement {
        call: (common + SPAN - oldest) % SPAN,
        mine_shared: my_ways >> oldest & 1 == 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of calls `first ..` with the given ways.
    fn record(first: u32, ways: &[bool]) -> PathRecord {
        (ways.iter().enumerate()).fold(PathRecord::default(), |r, (i, &shared)| {
            r.after((first + i as u32) % SPAN, shared)
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
        let d = Disagreement {
            call: 11,
            mine_shared: true,
        };
        assert_eq!(first_disagreement(mine, theirs), Some(d));
        // A member stuck in call 11 by messages, another two calls on.
        let stuck = record(10, &[true, false]);
        assert_eq!(first_disagreement(mine, stuck), Some(d));
        assert_eq!(
            first_disagreement(stuck, mine),
            Some(Disagreement {
                call: 11,
                mine_shared: false
            })
        );
    }

    #[test]
    fn call_numbers_wrap() {
        let mine = record(SPAN - 2, &[false, false, true, false]);
        let theirs = record(SPAN - 2, &[false, false, false]);
        assert_eq!(
            first_disagreement(mine, theirs),
            Some(Disagreement {
                call: 0,
                mine_shared: true
            })
        );
        assert_eq!(first_disagreement(mine, record(SPAN - 2, &[false])), None);
    }

    /// A log of calls `first ..` with the given ways.
    fn log(first: u32, ways: &[bool]) -> PathLog {
        let mut log = PathLog::default();
        for (i, &shared) in ways.iter().enumerate() {
            log.log((first + i as u32) % SPAN, shared);
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
            Some(Disagreement {
                call: 4,
                mine_shared: true
            })
        );
        // Within the records' reach the records decide, as before.
        let near = log(SPAN - 3, &ways[..20]);
        assert_eq!(
            near.disagreement(record(SPAN - 3, &theirs)),
            Some(Disagreement {
                call: 4,
                mine_shared: true
            })
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
        assert_eq!(
            first_disagreement(near, short),
            Some(Disagreement {
                call: 1,
                mine_shared: false
            })
        );
    }
}
