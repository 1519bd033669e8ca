//! What the self-checking examples (`check`, `squeeze`) share: joining the job, reading their
//! arguments and failing the job with a message that names the program and the rank.

use ferry_core::{scope, wait_all, Error, World};
use std::ops::Range;

/// This rank's world; on failure the process exits with status 2, naming `program`.
pub fn init(program: &str) -> World {
    match ferry_core::init() {
        Ok(world) => world,
        Err(e) => {
            eprintln!("{program}: init failed: {e}");
            std::process::exit(2);
        }
    }
}

/// The arguments after the program's name.
pub fn args() -> Vec<String> {
    std::env::args().skip(1).collect()
}

/// Argument `i` as a number; `default` when it is missing or not a number.
pub fn number(args: &[String], i: usize, default: usize) -> usize {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

/// Ends the whole job (exit status 3) after printing `what` with the program and the rank.
pub fn fail(program: &str, world: &World, what: String) -> ! {
    eprintln!("{program}: rank {}: {what}", world.rank());
    world.abort(3, &what)
}

/// Messages in flight in a stream from rank 0 to rank 1.
pub const WINDOW: usize = 8;

/// Rank 0's side of a stream of `count` messages to rank 1, [`WINDOW`] in flight: message `i`
/// has tag `i` and the bytes of `messages[i % WINDOW]`.
pub fn send_stream(world: &World, messages: &[Vec<u8>], count: usize) -> Result<(), Error> {
    for first in (0..count).step_by(WINDOW) {
        scope(|s| -> Result<(), Error> {
            let mut requests = Vec::new();
            for i in first..(first + WINDOW).min(count) {
                requests.push(world.isend(s, &messages[i % WINDOW], 1, i as i32)?);
            }
            wait_all(&mut requests).map(|_| ())
        })?;
    }
    Ok(())
}

/// Rank 1's side, one window: receives the messages `first..` (at most [`WINDOW`] of the
/// `count`) from rank 0 into `buffers`, and returns which messages they were.
pub fn recv_window(
    world: &World,
    buffers: &mut [Vec<u8>],
    first: usize,
    count: usize,
) -> Result<Range<usize>, Error> {
    let window = first..(first + WINDOW).min(count);
    scope(|s| -> Result<(), Error> {
        let mut requests = Vec::new();
        for (i, buf) in window.clone().zip(buffers.iter_mut()) {
            requests.push(world.irecv(s, buf, 0, i as i32)?);
        }
        wait_all(&mut requests).map(|_| ())
    })?;
    Ok(window)
}
