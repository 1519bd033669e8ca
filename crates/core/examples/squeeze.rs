//! Compressible and incompressible traffic between ranks 0 and 1, for the compression test and
//! benchmark (`FERRY_COMPRESS`, see `ferry_core::compress`):
//!
//! - `squeeze check SIZE COUNT`: COUNT messages of SIZE bytes of sin(x) samples, then COUNT of
//!   random bytes, each checked byte for byte by rank 1; after each kind rank 0 prints what
//!   compression did meanwhile: `kind smooth: compressed F frames (R -> S bytes), raw after
//!   sample D; link rate read N times, last M Mbit/s`.
//! - `squeeze bw KIND SIZE COUNT` (KIND `smooth` or `random`): rank 0 streams COUNT messages
//!   (eight in flight), rank 1 checks the last one and prints `bw KIND SIZE COUNT: T s, B MB/s`
//!   (payload bytes over the time from a barrier to the last arrival; the messages are made
//!   before it and checked after); rank 0 then prints its compression counters.

mod common;

use ferry_core::{Counters, Error, World};
use std::time::Instant;

/// sin(x) at steps of 1e-3 from sample `first` on: a smooth field of doubles.
fn smooth(first: usize, len: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (first..first + len.div_ceil(8))
        .flat_map(|i| (i as f64 * 1e-3).sin().to_le_bytes())
        .collect();
    bytes.truncate(len);
    bytes
}

/// Bytes of a xorshift generator from `seed`: incompressible.
fn random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn message(kind: &str, i: usize, len: usize) -> Vec<u8> {
    match kind {
        "smooth" => smooth(i * 7919, len),
        _ => random(i as u64 + 1, len),
    }
}

fn fail(world: &World, what: String) -> ! {
    common::fail("squeeze", world, what)
}

fn counters(world: &World) -> Counters {
    world.counters().unwrap_or_default()
}

/// Streams `count` messages of `kind` from rank 0 to rank 1, eight in flight; rank 1 checks
/// every one if `check_all`, else the last. Returns the seconds rank 1 took from a barrier to
/// the last arrival (the messages are made before it, and checked after).
fn stream(
    world: &World,
    kind: &str,
    size: usize,
    count: usize,
    check_all: bool,
) -> Result<f64, Error> {
    use common::WINDOW;
    let window = WINDOW.min(count);
    let messages: Vec<Vec<u8>> = match world.rank() {
        0 => (0..window).map(|i| message(kind, i, size)).collect(),
        _ => Vec::new(),
    };
    let mut buffers = vec![vec![0u8; size]; if world.rank() == 1 { window } else { 0 }];
    let mut differs = None;
    world.barrier()?;
    let start = Instant::now();
    let mut secs = 0.0;
    if world.rank() == 0 {
        common::send_stream(world, &messages, count)?;
    } else if world.rank() == 1 {
        for first in (0..count).step_by(WINDOW) {
            let window = common::recv_window(world, &mut buffers, first, count)?;
            secs = start.elapsed().as_secs_f64();
            for (i, buf) in window.zip(&buffers) {
                if (check_all || i + 1 == count) && *buf != message(kind, i % WINDOW, size) {
                    differs = differs.or(Some(i));
                }
            }
        }
    }
    if let Some(i) = differs {
        fail(world, format!("{kind} message {i} ({size} bytes) differs"));
    }
    world.barrier()?;
    Ok(secs)
}

fn report(world: &World, label: &str, before: &Counters) {
    if world.rank() == 0 {
        let c = counters(world);
        println!(
            "{label}: compressed {} frames ({} -> {} bytes), raw after sample {}; \
             link rate read {} times, last {} Mbit/s",
            c.frames_compressed - before.frames_compressed,
            c.compressed_raw_bytes - before.compressed_raw_bytes,
            c.compressed_sent_bytes - before.compressed_sent_bytes,
            c.frames_sent_raw - before.frames_sent_raw,
            c.link_rate_readings - before.link_rate_readings,
            c.link_rate_mbit,
        );
    }
}

fn main() {
    let world = common::init("squeeze");
    let args = common::args();
    let arg = |i: usize, default: usize| common::number(&args, i, default);
    if world.size() < 2 {
        fail(&world, "needs two ranks".into());
    }
    let result = match args.first().map(String::as_str) {
        Some("check") => {
            let (size, count) = (arg(1, 4 << 20), arg(2, 4));
            ["smooth", "random"].iter().try_for_each(|kind| {
                let before = counters(&world);
                stream(&world, kind, size, count, true)?;
                report(&world, &format!("kind {kind}"), &before);
                Ok(())
            })
        }
        Some("bw") => {
            let kind = args.get(1).map_or("smooth", String::as_str);
            let (size, count) = (arg(2, 4 << 20), arg(3, 16));
            let before = counters(&world);
            stream(&world, kind, size, count, false).map(|secs| {
                if world.rank() == 1 {
                    println!(
                        "bw {kind} {size} {count}: {secs:.3} s, {:.1} MB/s",
                        (size * count) as f64 / secs / 1e6
                    );
                }
                report(&world, &format!("bw {kind}"), &before);
            })
        }
        other => fail(&world, format!("unknown case {other:?}: check | bw")),
    };
    if let Err(e) = result {
        fail(&world, e.to_string());
    }
}
