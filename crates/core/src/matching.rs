//! Message matching: the posted-receive queue and the unexpected-message queues.
//!
//! A message matches a receive when context ids are equal and source and tag are equal or the
//! receive names a wildcard. Receives are matched in the order they were posted, messages in the
//! order they arrived; since each (sender, context) stream arrives in order, MPI's
//! non-overtaking rule follows. Pure data structure: no I/O, tested in isolation.
//!
//! Unexpected messages wait in one queue per (context, sender), numbered in arrival order, as
//! Open MPI's ob1 keeps them per peer: a receive from one sender looks at that sender's
//! messages only. With a single queue, a rank of a reduction tree whose leaf ran thousands of
//! calls ahead searched past all of that leaf's messages for each message of its other
//! children (37 % of an 8-rank 8 B MPI_Reduce loop's time in `perf`). A receive from any
//! sender takes the earliest-numbered match among the heads of its context's queues.

use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::collections::VecDeque;

/// What a message says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub context: u32,
    /// World rank of the sender.
    pub source: u32,
    pub tag: i32,
}

/// What a receive (or probe) asks for; `None` is a wildcard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pattern {
    pub context: u32,
    pub source: Option<u32>,
    pub tag: Option<i32>,
}

impl Pattern {
    #[inline]
    pub fn matches(&self, env: &Envelope) -> bool {
        self.context == env.context
            && self.source.is_none_or(|s| s == env.source)
            && self.tag.is_none_or(|t| t == env.tag)
    }
}

/// Unexpected messages of one (context, sender), each with its arrival number.
type Arrived<M> = VecDeque<(u64, Envelope, M)>;

/// A queue's key: (context, sender).
type Key = (u32, u32);

/// Queues beyond this many are dropped when they empty (2 in tests, so that the model test
/// drops and moves queues).
const KEPT_QUEUES: usize = if cfg!(test) { 2 } else { 1024 };

/// Posted receives (`R` identifies a request) and unexpected messages (`M` holds one).
#[derive(Debug)]
pub(crate) struct Matcher<R, M> {
    posted: VecDeque<(Pattern, R)>,
    /// The unexpected messages of each (context, sender) that has had some (see
    /// [`KEPT_QUEUES`]).
    queues: Vec<(Key, Arrived<M>)>,
    /// Where each key's queue is in `queues`.
    index: FxHashMap<Key, usize>,
    /// The key looked up last and its place: most lookups repeat it, and skip the hash.
    last: Cell<Option<(Key, usize)>>,
    /// Messages in `queues`.
    unexpected_len: usize,
    /// The next arrival number.
    arrivals: u64,
}

impl<R: PartialEq + Copy, M> Matcher<R, M> {
    pub fn new() -> Self {
        Matcher {
            posted: VecDeque::new(),
            queues: Vec::new(),
            index: FxHashMap::default(),
            last: Cell::new(None),
            unexpected_len: 0,
            arrivals: 0,
        }
    }

    /// A message arrived: returns the earliest posted receive it matches, removing it.
    #[inline]
    pub fn take_posted(&mut self, env: &Envelope) -> Option<R> {
        // Most messages match the oldest receive: take it without a search and a shift.
        if self.posted.front().is_some_and(|(p, _)| p.matches(env)) {
            return self.posted.pop_front().map(|(_, r)| r);
        }
        let index = self.posted.iter().position(|(p, _)| p.matches(env))?;
        self.posted.remove(index).map(|(_, r)| r)
    }

    /// Where the queue of `key` is, if there is one.
    #[inline]
    fn queue_of(&self, key: Key) -> Option<usize> {
        if let Some((last, at)) = self.last.get() {
            if last == key {
                return Some(at);
            }
        }
        let at = *self.index.get(&key)?;
        self.last.set(Some((key, at)));
        Some(at)
    }

    /// Keeps a message nobody asked for yet.
    pub fn push_unexpected(&mut self, env: Envelope, message: M) {
        let key = (env.context, env.source);
        let at = self.queue_of(key).unwrap_or_else(|| {
            self.queues.push((key, VecDeque::new()));
            self.index.insert(key, self.queues.len() - 1);
            self.queues.len() - 1
        });
        self.queues[at].1.push_back((self.arrivals, env, message));
        self.arrivals += 1;
        self.unexpected_len += 1;
    }

    /// Messages on the unexpected queues.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected_len
    }

    /// Where the earliest unexpected message `pattern` matches is: its queue's place in
    /// `queues` and its own in that queue.
    #[inline]
    fn find_unexpected(&self, pattern: &Pattern) -> Option<(usize, usize)> {
        if self.unexpected_len == 0 {
            return None;
        }
        let first_in = |queue: &Arrived<M>| {
            // The commonest case first: the oldest message of the queue matches.
            match queue.front() {
                Some((_, e, _)) if pattern.matches(e) => Some(0),
                _ => queue.iter().position(|(_, e, _)| pattern.matches(e)),
            }
        };
        if let Some(source) = pattern.source {
            let q = self.queue_of((pattern.context, source))?;
            return Some((q, first_in(&self.queues[q].1)?));
        }
        self.queues
            .iter()
            .enumerate()
            .filter(|(_, ((context, _), _))| *context == pattern.context)
            .filter_map(|(q, (_, queue))| first_in(queue).map(|at| (queue[at].0, q, at)))
            .min_by_key(|(arrival, _, _)| *arrival)
            .map(|(_, q, at)| (q, at))
    }

    /// Whether an unexpected message matches `pattern`.
    #[inline]
    pub fn has_unexpected(&self, pattern: &Pattern) -> bool {
        self.find_unexpected(pattern).is_some()
    }

    /// A receive is posted: returns the earliest unexpected message it matches, removing it.
    #[inline]
    pub fn take_unexpected(&mut self, pattern: &Pattern) -> Option<(Envelope, M)> {
        let (q, at) = self.find_unexpected(pattern)?;
        let (_, env, message) = self.queues[q].1.remove(at)?;
        self.unexpected_len -= 1;
        // An emptied queue is kept for the next message of its pair (no allocation per
        // message), up to KEPT_QUEUES of them: a long job's communicators come and go.
        if self.queues[q].1.is_empty() && self.queues.len() > KEPT_QUEUES {
            self.drop_queue(q);
        }
        Some((env, message))
    }

    /// Removes the empty queue at `q`, so that the queues of communicators long gone do not
    /// pile up; the last one takes its place.
    #[cold]
    fn drop_queue(&mut self, q: usize) {
        let (key, _) = self.queues.swap_remove(q);
        self.index.remove(&key);
        if let Some((moved, _)) = self.queues.get(q) {
            self.index.insert(*moved, q);
        }
        // The cached place may be the one that moved.
        self.last.set(None);
    }

    /// Queues a receive that found no message.
    #[inline]
    pub fn push_posted(&mut self, pattern: Pattern, request: R) {
        self.posted.push_back((pattern, request));
    }

    /// The earliest unexpected message a probe with `pattern` would see.
    pub fn peek_unexpected(&self, pattern: &Pattern) -> Option<(&Envelope, &M)> {
        let (q, at) = self.find_unexpected(pattern)?;
        self.queues[q].1.get(at).map(|(_, e, m)| (e, m))
    }

    /// The pattern of posted receive `request`, while it waits.
    pub fn posted_pattern(&self, request: R) -> Option<&Pattern> {
        self.posted
            .iter()
            .find(|(_, r)| *r == request)
            .map(|(p, _)| p)
    }

    /// Withdraws every posted receive whose pattern `cut` picks, oldest first.
    pub fn take_posted_where(&mut self, mut cut: impl FnMut(&Pattern) -> bool) -> Vec<R> {
        let mut taken = Vec::new();
        self.posted.retain(|(p, r)| {
            let picked = cut(p);
            if picked {
                taken.push(*r);
            }
            !picked
        });
        taken
    }

    /// Withdraws a posted receive; false if it was already matched.
    pub fn cancel_posted(&mut self, request: R) -> bool {
        let before = self.posted.len();
        self.posted.retain(|(_, r)| *r != request);
        self.posted.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env(source: u32, tag: i32) -> Envelope {
        Envelope {
            context: 0,
            source,
            tag,
        }
    }

    #[test]
    fn wildcards_and_context_separation() {
        let mut m: Matcher<u32, &str> = Matcher::new();
        m.push_unexpected(env(1, 5), "a");
        m.push_unexpected(
            Envelope {
                context: 2,
                source: 1,
                tag: 5,
            },
            "other comm",
        );
        let any = Pattern {
            context: 0,
            source: None,
            tag: None,
        };
        assert_eq!(m.take_unexpected(&any).map(|(_, x)| x), Some("a"));
        assert!(m.take_unexpected(&any).is_none());
        m.push_posted(
            Pattern {
                context: 0,
                source: Some(3),
                tag: None,
            },
            7,
        );
        assert_eq!(m.take_posted(&env(2, 1)), None);
        assert_eq!(m.take_posted(&env(3, 1)), Some(7));
        m.push_posted(any, 8);
        assert!(m.cancel_posted(8));
        assert!(!m.cancel_posted(8));
    }

    /// One step of a random workload: a message from (source, tag) arrives, or a receive with an
    /// optional source and tag is posted.
    #[derive(Debug, Clone)]
    enum Step {
        Arrive(u32, i32),
        Post(Option<u32>, Option<i32>),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..3u32, 0..3i32).prop_map(|(s, t)| Step::Arrive(s, t)),
            (proptest::option::of(0..3u32), proptest::option::of(0..3i32))
                .prop_map(|(s, t)| Step::Post(s, t)),
        ]
    }

    /// One step of a workload over two contexts: a message arrives, a receive is posted, or
    /// a probe looks.
    #[derive(Debug, Clone)]
    enum Op {
        Arrive(u32, u32, i32),
        Post(u32, Option<u32>, Option<i32>),
        Probe(u32, Option<u32>, Option<i32>),
    }

    fn op() -> impl Strategy<Value = Op> {
        let pattern = || {
            (
                0..2u32,
                proptest::option::of(0..3u32),
                proptest::option::of(0..3i32),
            )
        };
        prop_oneof![
            (0..2u32, 0..3u32, 0..3i32).prop_map(|(c, s, t)| Op::Arrive(c, s, t)),
            pattern().prop_map(|(c, s, t)| Op::Post(c, s, t)),
            pattern().prop_map(|(c, s, t)| Op::Probe(c, s, t)),
        ]
    }

    proptest! {
        /// The queues per sender match exactly as one queue in arrival order would (the
        /// matcher before them): same message for every receive and probe.
        #[test]
        fn matches_as_one_queue_in_arrival_order(ops in proptest::collection::vec(op(), 0..80)) {
            let mut m: Matcher<usize, usize> = Matcher::new();
            let mut reference: VecDeque<(Envelope, usize)> = VecDeque::new();
            let mut posted: Vec<(Pattern, usize)> = vec![];
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Arrive(context, source, tag) => {
                        let e = Envelope { context, source, tag };
                        let by_m = m.take_posted(&e);
                        let at = posted.iter().position(|(p, _)| p.matches(&e));
                        prop_assert_eq!(by_m, at.map(|i| posted.remove(i).1));
                        if by_m.is_none() {
                            m.push_unexpected(e, n);
                            reference.push_back((e, n));
                        }
                    }
                    Op::Post(context, source, tag) | Op::Probe(context, source, tag) => {
                        let p = Pattern { context, source, tag };
                        let at = reference.iter().position(|(e, _)| p.matches(e));
                        let expected = at.map(|i| reference[i]);
                        let peeked = m.peek_unexpected(&p).map(|(e, x)| (*e, *x));
                        prop_assert_eq!(peeked, expected);
                        if let Op::Post(..) = op {
                            prop_assert_eq!(m.take_unexpected(&p), expected);
                            match at {
                                Some(i) => drop(reference.remove(i)),
                                None => {
                                    m.push_posted(p, n);
                                    posted.push((p, n));
                                }
                            }
                        }
                    }
                }
                prop_assert_eq!(m.unexpected_len(), reference.len());
            }
        }

        /// Whatever the interleaving of arrivals and posts, messages from one sender are
        /// received in the order they were sent (among receives that could take either), every
        /// match satisfies its pattern, and nothing is matched twice.
        #[test]
        fn non_overtaking_with_wildcards(steps in proptest::collection::vec(step(), 0..60)) {
            let mut m: Matcher<usize, (u32, usize)> = Matcher::new();
            let mut seq = [0usize; 3];
            let mut patterns = vec![];
            let mut matched: Vec<(usize, Envelope, usize)> = vec![];
            for s in steps {
                match s {
                    Step::Arrive(source, tag) => {
                        let e = env(source, tag);
                        let n = seq[source as usize];
                        seq[source as usize] += 1;
                        match m.take_posted(&e) {
                            Some(r) => matched.push((r, e, n)),
                            None => m.push_unexpected(e, (source, n)),
                        }
                    }
                    Step::Post(source, tag) => {
                        let p = Pattern { context: 0, source, tag };
                        let r = patterns.len();
                        patterns.push(p);
                        match m.take_unexpected(&p) {
                            Some((e, (_, n))) => matched.push((r, e, n)),
                            None => m.push_posted(p, r),
                        }
                    }
                }
            }
            let mut seen = std::collections::HashSet::new();
            for &(r, e, n) in &matched {
                prop_assert!(patterns[r].matches(&e));
                prop_assert!(seen.insert((e.source, n)), "message matched twice");
            }
            // Two receives with the same pattern take same-sender messages in send order.
            for &(r1, e1, n1) in &matched {
                for &(r2, e2, n2) in &matched {
                    if r1 < r2 && patterns[r1] == patterns[r2] && e1.source == e2.source {
                        prop_assert!(n1 < n2, "receive {r1} got later message than receive {r2}");
                    }
                }
            }
        }
    }
}
