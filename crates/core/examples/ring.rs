//! Passes a token around all ranks a few times; each rank adds its rank number.
//!
//! `ferry run -n 4 target/release/examples/ring`

fn main() -> Result<(), ferry_core::Error> {
    let world = ferry_core::init()?;
    let (rank, size) = (world.rank(), world.size());
    let laps = 3u64;
    let mut token = [0u64; 1];
    for _ in 0..laps {
        if rank == 0 {
            world.send(&token, (rank + 1) % size, 0)?;
            world.recv(&mut token, size - 1, 0)?;
        } else {
            world.recv(&mut token, rank - 1, 0)?;
            token[0] += rank as u64;
            world.send(&token, (rank + 1) % size, 0)?;
        }
    }
    if rank == 0 {
        let n = size as u64;
        let expected = laps * n * (n - 1) / 2;
        println!(
            "ring of {size} ranks: token {} after {laps} laps (expected {expected})",
            token[0]
        );
        if token[0] != expected {
            world.abort(1, "ring token is wrong");
        }
    }
    world.finalize()
}
