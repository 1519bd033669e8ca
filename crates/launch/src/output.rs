//! Forwarding of the ranks' stdout and stderr to the launcher's, whole lines at a time.
//!
//! One thread ([`Forwarder`]) waits on every rank's pipes at once with `mio` (epoll): a job of
//! thousands of ranks costs the launcher one thread, not two per rank. It reads what a rank
//! wrote, cuts it into lines ([`LineSplitter`]) and writes every complete line (with its `[r] `
//! prefix when tagging) while holding the lock of the launcher's stream, then flushes: lines
//! from different ranks never interleave, and a line is visible as soon as the rank has
//! written it. A final line without a newline is written at end of stream (given a newline
//! only when tagging, so that untagged output stays byte-exact).
//!
//! `mio` because the workspace's event loops already use it (the runtime's progress engine, the
//! relay): no new dependency, epoll underneath, and no `unsafe` here.

use mio::unix::pipe::Receiver;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
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

/// Starts a thread copying `pipe` to `sink`, line by line: for the few other processes of a job
/// (relays) whose output is forwarded apart from the ranks'.
pub(crate) fn forward(
    pipe: impl Read + Send + 'static,
    sink: Sink,
    prefix: Option<String>,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("ferry-output".into())
        .stack_size(128 * 1024)
        .spawn(move || copy_lines_to(pipe, prefix.as_deref(), |bytes| sink.write_locked(bytes)))
}

/// Cuts a stream into whole lines, each with its prefix; a line longer than
/// [`MAX_PENDING_LINE`] is passed on in pieces (the prefix only before the first).
pub(crate) struct LineSplitter {
    prefix: Option<String>,
    pending: Vec<u8>,
    /// Whether `pending` continues a line already partly passed on (only after an overlong line).
    continued: bool,
}

impl LineSplitter {
    pub(crate) fn new(prefix: Option<String>) -> LineSplitter {
        LineSplitter {
            prefix,
            pending: Vec::new(),
            continued: false,
        }
    }

    /// Takes `bytes` just read; appends what is ready to go out to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(pos) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + pos + 1;
            push_line(
                out,
                self.prefix.as_deref(),
                self.continued,
                &self.pending[start..end],
            );
            self.continued = false;
            start = end;
        }
        self.pending.drain(..start);
        if self.pending.len() > MAX_PENDING_LINE {
            push_line(out, self.prefix.as_deref(), self.continued, &self.pending);
            self.continued = true;
            self.pending.clear();
        }
    }

    /// End of stream: appends the last line, if it had no newline, to `out`.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        if self.pending.is_empty() {
            return;
        }
        push_line(out, self.prefix.as_deref(), self.continued, &self.pending);
        if self.prefix.is_some() {
            out.push(b'\n');
        }
        self.pending.clear();
    }
}

/// Reads `pipe` to its end and hands `emit` whole lines (several at a time, each with
/// `prefix`); stops early when `emit` fails.
pub(crate) fn copy_lines_to(
    mut pipe: impl Read,
    prefix: Option<&str>,
    mut emit: impl FnMut(&[u8]) -> io::Result<()>,
) {
    let mut chunk = vec![0u8; 16 * 1024];
    let mut lines = LineSplitter::new(prefix.map(str::to_owned));
    let mut out: Vec<u8> = Vec::new();
    loop {
        let n = match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        out.clear();
        lines.push(&chunk[..n], &mut out);
        if !out.is_empty() && emit(&out).is_err() {
            // Our own stream is gone (e.g. a closed pipe): stop reading, so that the rank sees a
            // broken pipe as it would in a shell pipeline.
            return;
        }
    }
    out.clear();
    lines.finish(&mut out);
    if !out.is_empty() {
        let _ = emit(&out);
    }
}

fn push_line(out: &mut Vec<u8>, prefix: Option<&str>, continued: bool, line: &[u8]) {
    if let (Some(prefix), false) = (prefix, continued) {
        out.extend_from_slice(prefix.as_bytes());
    }
    out.extend_from_slice(line);
}

/// The token of the forwarder's waker; pipes are numbered from 0.
const WAKER: Token = Token(usize::MAX);

/// Where a pipe's lines go: handed whole lines, fails when nobody takes them any more.
pub(crate) type Emit = Box<dyn FnMut(&[u8]) -> io::Result<()> + Send>;
/// Called once when a pipe reaches its end (after its last line went out).
pub(crate) type OnEnd = Box<dyn FnOnce() + Send>;

/// A pipe handed to the forwarder.
struct NewPipe {
    pipe: OwnedFd,
    emit: Emit,
    on_end: Option<OnEnd>,
    prefix: Option<String>,
}

/// One pipe the forwarder reads.
struct Pipe {
    source: Receiver,
    emit: Emit,
    on_end: Option<OnEnd>,
    lines: LineSplitter,
    /// Its destination failed (e.g. our own stream is a closed pipe): read on, pass nothing.
    sink_gone: bool,
}

/// The thread that forwards every rank's output (see the module documentation). Dropping it
/// stops the thread at once; [`Forwarder::open`] says whether output is still to come.
pub(crate) struct Forwarder {
    pipes: Option<Sender<NewPipe>>,
    waker: Arc<Waker>,
    /// Pipes handed over and not yet at their end.
    open: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    pub(crate) fn start() -> io::Result<Forwarder> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, rx) = mpsc::channel::<NewPipe>();
        let open = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_open, thread_stop) = (Arc::clone(&open), Arc::clone(&stop));
        let thread = thread::Builder::new()
            .name("ferry-output".into())
            .stack_size(256 * 1024)
            .spawn(move || forward_all(poll, &rx, &thread_open, &thread_stop))?;
        Ok(Forwarder {
            pipes: Some(tx),
            waker,
            open,
            stop,
            thread: Some(thread),
        })
    }

    /// Forwards `pipe` to `sink`, line by line, each line with `prefix`.
    pub(crate) fn add(
        &self,
        pipe: impl Into<OwnedFd>,
        sink: Sink,
        prefix: Option<String>,
    ) -> io::Result<()> {
        self.add_with(
            pipe,
            prefix,
            Box::new(move |bytes| sink.write_locked(bytes)),
            None,
        )
    }

    /// Hands `pipe`'s lines, each with `prefix`, to `emit`; calls `on_end` at its end.
    pub(crate) fn add_with(
        &self,
        pipe: impl Into<OwnedFd>,
        prefix: Option<String>,
        emit: Emit,
        on_end: Option<OnEnd>,
    ) -> io::Result<()> {
        let Some(pipes) = self.pipes.as_ref() else {
            return Err(io::Error::other("the output forwarder has stopped"));
        };
        self.open.fetch_add(1, Ordering::SeqCst);
        let new = NewPipe {
            pipe: pipe.into(),
            emit,
            on_end,
            prefix,
        };
        if pipes.send(new).is_err() {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return Err(io::Error::other("the output forwarder has stopped"));
        }
        self.waker.wake()
    }

    /// How many pipes have not reached their end yet.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.pipes = None;
        let _ = self.waker.wake();
        // Not joined: a write to our own stream may block (a reader that stopped reading),
        // and the job must end anyway. The thread exits at its next wake.
        drop(self.thread.take());
    }
}

/// The forwarder's loop: registers new pipes, reads the ready ones until they would block,
/// drops those at their end; until told to stop.
fn forward_all(
    mut poll: Poll,
    new_pipes: &mpsc::Receiver<NewPipe>,
    open: &AtomicUsize,
    stop: &AtomicBool,
) {
    let mut events = Events::with_capacity(256);
    let mut pipes: Vec<Option<Pipe>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let mut out: Vec<u8> = Vec::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            eprintln!("ferry run: output forwarding failed: {e}");
            return;
        }
        for event in events.iter() {
            if event.token() == WAKER {
                while let Ok(new) = new_pipes.try_recv() {
                    let index = free.pop().unwrap_or(pipes.len());
                    let mut source = Receiver::from(new.pipe);
                    let registered = source.set_nonblocking(true).and_then(|()| {
                        poll.registry()
                            .register(&mut source, Token(index), Interest::READABLE)
                    });
                    if registered.is_err() {
                        // Cannot watch it: drop it (the rank sees a broken pipe).
                        open.fetch_sub(1, Ordering::SeqCst);
                        free.push(index);
                        continue;
                    }
                    let pipe = Pipe {
                        source,
                        emit: new.emit,
                        on_end: new.on_end,
                        lines: LineSplitter::new(new.prefix),
                        sink_gone: false,
                    };
                    match pipes.get_mut(index) {
                        Some(slot) => *slot = Some(pipe),
                        None => pipes.push(Some(pipe)),
                    }
                }
                continue;
            }
            let index = event.token().0;
            let Some(pipe) = pipes.get_mut(index).and_then(Option::as_mut) else {
                continue;
            };
            // Edge-triggered: read until it would block, or to its end.
            let ended = loop {
                match pipe.source.read(&mut chunk) {
                    Ok(0) => break true,
                    Ok(n) => {
                        out.clear();
                        pipe.lines.push(&chunk[..n], &mut out);
                        emit(pipe, &out);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                    Err(_) => break true,
                }
            };
            if ended {
                out.clear();
                pipe.lines.finish(&mut out);
                emit(pipe, &out);
                let _ = poll.registry().deregister(&mut pipe.source);
                if let Some(on_end) = pipe.on_end.take() {
                    on_end();
                }
                pipes[index] = None;
                free.push(index);
                open.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

fn emit(pipe: &mut Pipe, bytes: &[u8]) {
    if !bytes.is_empty() && !pipe.sink_gone && (pipe.emit)(bytes).is_err() {
        pipe.sink_gone = true;
    }
}
