//! How a server reports connections it refused (a rank's listener, the launcher's and a node
//! daemon's bootstrap servers): the first few of a window each get their line, the rest are
//! counted and summed up in one line when the window ends, so a flood of strangers cannot flood
//! stderr. Sans-IO: the caller passes the time and prints what it is handed.

use std::time::{Duration, Instant};

/// Lines printed as they come in each window.
const BURST: u32 = 5;
/// Length of a window.
const WINDOW: Duration = Duration::from_secs(10);

/// The rate limit of one server's lines about refused connections.
#[derive(Debug, Default)]
pub struct RefusalLog {
    window_start: Option<Instant>,
    printed: u32,
    suppressed: u64,
    last: Option<String>,
}

impl RefusalLog {
    /// `line` happened at `now`: the lines to print now (a summary of the window before,
    /// then `line` itself while within the burst).
    pub fn note(&mut self, now: Instant, line: String) -> Vec<String> {
        let mut out: Vec<String> = self.flush(now).into_iter().collect();
        self.window_start.get_or_insert(now);
        if self.printed < BURST {
            self.printed += 1;
            out.push(line);
        } else {
            self.suppressed += 1;
            self.last = Some(line);
        }
        out
    }

    /// Lines held back in the current window.
    pub fn held_back(&self) -> u64 {
        self.suppressed
    }

    /// The summary of what the current window held back, whether or not it has ended (for the
    /// end of the transport's life).
    pub fn finish(&mut self) -> Option<String> {
        let summary = (self.suppressed > 0).then(|| {
            format!(
                "{} more refused connections, not shown one by one; the last: {}",
                self.suppressed,
                self.last.as_deref().unwrap_or("")
            )
        });
        *self = RefusalLog::default();
        summary
    }

    /// When the window has ended by `now`: the summary of what it held back (if anything), and
    /// a fresh window.
    pub fn flush(&mut self, now: Instant) -> Option<String> {
        let start = self.window_start?;
        if now.saturating_duration_since(start) < WINDOW {
            return None;
        }
        let summary = (self.suppressed > 0).then(|| {
            format!(
                "{} more refused connections in {} s, not shown one by one; the last: {}",
                self.suppressed,
                WINDOW.as_secs(),
                self.last.as_deref().unwrap_or("")
            )
        });
        *self = RefusalLog::default();
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_prints_a_burst_then_one_summary_per_window() {
        let t0 = Instant::now();
        let mut log = RefusalLog::default();
        let mut printed = Vec::new();
        for i in 0..4000u32 {
            let now = t0 + Duration::from_millis(i as u64); // 4 s of strangers
            printed.extend(log.note(now, format!("refused connection {i}")));
        }
        assert_eq!(printed.len(), BURST as usize);
        assert_eq!(
            log.flush(t0 + Duration::from_secs(5)),
            None,
            "window not over"
        );
        let summary = log.flush(t0 + WINDOW).expect("a summary");
        assert!(
            summary.starts_with("3995 more refused connections in 10 s")
                && summary.ends_with("refused connection 3999"),
            "{summary}"
        );
        assert_eq!(log.flush(t0 + WINDOW * 3), None, "nothing held back since");
        // A new window prints its own burst.
        let now = t0 + WINDOW * 3;
        assert_eq!(log.note(now, "again".into()), vec!["again".to_string()]);
    }

    #[test]
    fn a_line_after_the_window_brings_the_summary_first() {
        let t0 = Instant::now();
        let mut log = RefusalLog::default();
        for i in 0..7 {
            log.note(t0, format!("line {i}"));
        }
        let out = log.note(t0 + WINDOW, "late".into());
        assert_eq!(out.len(), 2);
        assert!(out[0].starts_with("2 more refused connections"), "{out:?}");
        assert_eq!(out[1], "late");
        assert_eq!(log.finish(), None);
        for i in 0..9 {
            log.note(t0 + WINDOW, format!("line {i}"));
        }
        let end = log.finish().expect("what was held back");
        assert!(
            end.starts_with("4 more refused connections, not shown"),
            "{end}"
        );
    }
}
