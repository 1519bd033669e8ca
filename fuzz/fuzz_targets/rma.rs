#![no_main]
//! One-sided messages from strangers against a 64-byte window: any sequence of (sender, tag,
//! payload) is applied, held back or refused, never a panic and never a write outside the
//! window (the bytes around it stay untouched).
use libfuzzer_sys::fuzz_target;
use mpi::rma::{Memory, Win};

fuzz_target!(|data: &[u8]| {
    let mut mem = [0xa5u8; 192];
    {
        let base = mem[64..].as_mut_ptr();
        let mut win = Win::new(4, Memory::Fixed { base, size: 64 });
        let mut out = Vec::new();
        let mut rest = data;
        // Each message: sender, tag, payload length, payload.
        while let [from, tag, len, tail @ ..] = rest {
            let n = (*len as usize).min(tail.len());
            win.handle(*from as usize % 4, *tag as i32, &tail[..n], &mut out);
            rest = &tail[n..];
        }
    }
    assert!(mem[..64].iter().chain(&mem[128..]).all(|&b| b == 0xa5), "wrote outside the window");
});
