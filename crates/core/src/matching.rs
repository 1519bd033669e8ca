//! Message matching: the posted-receive queue and the unexpected-message queue.
//!
//! A message matches a receive when context ids are equal and source and tag are equal or the
//! receive names a wildcard. Receives are matched in the order they were posted, messages in the
//! order they arrived; since each (sender, context) stream arrives in order, MPI's
//! non-overtaking rule follows. Pure data structure: no I/O, tested in isolation.

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

/// Posted receives (`R` identifies a request) and unexpected messages (`M` holds one).
#[derive(Debug)]
pub(crate) struct Matcher<R, M> {
    posted: VecDeque<(Pattern, R)>,
    unexpected: VecDeque<(Envelope, M)>,
}

impl<R: PartialEq + Copy, M> Matcher<R, M> {
    pub fn new() -> Self {
        Matcher {
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
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

    /// Keeps a message nobody asked for yet.
    pub fn push_unexpected(&mut self, env: Envelope, message: M) {
        self.unexpected.push_back((env, message));
    }

    /// Messages on the unexpected queue.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// A receive is posted: returns the earliest unexpected message it matches, removing it.
    #[inline]
    pub fn take_unexpected(&mut self, pattern: &Pattern) -> Option<(Envelope, M)> {
        // The commonest cases first: nothing waiting (a search of an empty deque still costs
        // tens of instructions), or the oldest message matching.
        let (e, _) = self.unexpected.front()?;
        if pattern.matches(e) {
            return self.unexpected.pop_front();
        }
        let index = self
            .unexpected
            .iter()
            .position(|(e, _)| pattern.matches(e))?;
        self.unexpected.remove(index)
    }

    /// Queues a receive that found no message.
    #[inline]
    pub fn push_posted(&mut self, pattern: Pattern, request: R) {
        self.posted.push_back((pattern, request));
    }

    /// The earliest unexpected message a probe with `pattern` would see.
    pub fn peek_unexpected(&self, pattern: &Pattern) -> Option<&(Envelope, M)> {
        if self.unexpected.is_empty() {
            return None;
        }
        self.unexpected.iter().find(|(e, _)| pattern.matches(e))
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

    proptest! {
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
