#![no_main]
//! A stranger's bytes against an accepting handshake, split at an arbitrary point: never a
//! panic, and never an authenticated peer without the key.
use ferry_wire::{Handshake, JobKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut acceptor = Handshake::accept(JobKey([7; 32]), 42, 8, 0, [9; 32]);
    let split = data.first().map_or(0, |b| *b as usize).min(data.len());
    for part in [&data[..split], &data[split..]] {
        match acceptor.handle_input(part) {
            Ok(_) => {
                let out = acceptor.pending_output().len();
                acceptor.consume_output(out);
            }
            Err(_) => return,
        }
    }
    assert_eq!(acceptor.peer_rank(), None, "authenticated without the key");
});
