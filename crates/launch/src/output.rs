//! Forwarding of the ranks' stdout and stderr to the launcher's, whole lines at a time.
//!
//! Each pipe has a thread that reads what the rank wrote, cuts it into lines and writes every
//! complete line (with its `[r] ` prefix when tagging) while holding the lock of the launcher's
//! stream, then flushes: lines from different ranks never interleave, and a line is visible as
//! soon as the rank has written it. A final line without a newline is written at end of stream
//! (given a newline only when tagging, so that untagged output stays byte-exact).

use std::io::{self, Read, Write};
use std::thread::{self, JoinHandle};

/// A pending line longer than this is written out in pieces, so that a rank printing without
/// newlines cannot make the launcher buffer without bound.
const MAX_PENDING_LINE: usize = 64 * 1024;

/// Which of the launcher's streams a pipe goes to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sink {
    Stdout,
    Stderr,
}

impl Sink {
    pub(crate) fn write_locked(self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()
            }
            Sink::Stderr => {
                let mut out = io::stderr().lock();
                out.write_all(bytes)?;
                out.flush()
            }
        }
    }
}

/// Starts a thread copying `pipe` to `sink`, line by line.
pub(crate) fn forward(
    pipe: impl Read + Send + 'static,
    sink: Sink,
    prefix: Option<String>,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("ferry-output".into())
        .stack_size(128 * 1024)
        .spawn(move || copy_lines(pipe, sink, prefix.as_deref()))
}

fn copy_lines(pipe: impl Read, sink: Sink, prefix: Option<&str>) {
    copy_lines_to(pipe, prefix, |bytes| sink.write_locked(bytes));
}

/// Reads `pipe` to its end and hands `emit` whole lines (several at a time, each with
/// `prefix`); stops early when `emit` fails.
pub(crate) fn copy_lines_to(
    mut pipe: impl Read,
    prefix: Option<&str>,
    mut emit: impl FnMut(&[u8]) -> io::Result<()>,
) {
    let mut chunk = vec![0u8; 16 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    // Whether `pending` continues a line already partly written (only after an overlong line).
    let mut continued = false;
    let mut out: Vec<u8> = Vec::new();
    loop {
        let n = match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&chunk[..n]);
        out.clear();
        let mut start = 0;
        while let Some(pos) = pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + pos + 1;
            push_line(&mut out, prefix, continued, &pending[start..end]);
            continued = false;
            start = end;
        }
        pending.drain(..start);
        if pending.len() > MAX_PENDING_LINE {
            push_line(&mut out, prefix, continued, &pending);
            continued = true;
            pending.clear();
        }
        if !out.is_empty() && emit(&out).is_err() {
            // Our own stream is gone (e.g. a closed pipe): stop reading, so that the rank sees a
            // broken pipe as it would in a shell pipeline.
            return;
        }
    }
    if !pending.is_empty() {
        out.clear();
        push_line(&mut out, prefix, continued, &pending);
        if prefix.is_some() {
            out.push(b'\n');
        }
        let _ = emit(&out);
    }
}

fn push_line(out: &mut Vec<u8>, prefix: Option<&str>, continued: bool, line: &[u8]) {
    if let (Some(prefix), false) = (prefix, continued) {
        out.extend_from_slice(prefix.as_bytes());
    }
    out.extend_from_slice(line);
}
