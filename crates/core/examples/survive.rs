//! A job that goes on without a dead rank (ULFM in Rust): run it as
//! `ferry run --fault-tolerant -n 4 target/release/examples/survive [ROUNDS] [host]`.
//!
//! Every round the ranks sum a 1 each with an allreduce, then agree whether it worked at all of
//! them. The last rank kills itself in round 1; the survivors' agreement says the round failed,
//! they acknowledge the failure, shrink the communicator and run the round again without it.
//! Rank 0 prints each round's sum and, at the end, `survivors N of M`; any rank that sees a
//! wrong sum exits non-zero. With `host`, the victim first kills its parent, the node daemon of
//! its host, so that the host is lost with every rank on it (run it with `--hosts`, its rank
//! not on the launcher's host).

use ferry_core::{Comm, Error, ReduceOp};

#[allow(dead_code)] // the other examples' helpers
mod common;

fn run(world: &Comm, rounds: usize, whole_host: bool) -> Result<usize, Error> {
    let victim = world.size() - 1;
    let mut comm = world.dup()?;
    let mut round = 0;
    while round < rounds {
        if round == 1 && world.rank() == victim {
            if whole_host {
                // SAFETY: SIGKILL to our parent, the node daemon; its ranks end with it.
                unsafe { libc::kill(libc::getppid(), libc::SIGKILL) };
            }
            // SAFETY: sending SIGKILL to ourselves; nothing runs after it.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        let mut sum = [0u64];
        let summed = comm.allreduce(&[1u64], &mut sum, ReduceOp::Sum);
        // Some members may have finished the call and others not: they decide together.
        if comm.agree(summed.is_ok() as u32)?.flag == 1 {
            if sum[0] != comm.size() as u64 {
                return Err(Error::Config(format!(
                    "round {round}: sum {} over {} ranks",
                    sum[0],
                    comm.size()
                )));
            }
            if comm.rank() == 0 {
                println!("round {round}: sum {} over {} ranks", sum[0], comm.size());
            }
            round += 1;
            continue;
        }
        comm.ack_failed(usize::MAX);
        comm = comm.shrink()?;
    }
    Ok(comm.size())
}

fn main() {
    let world = common::init("survive");
    let args = common::args();
    let rounds = common::number(&args, 0, 4);
    let whole_host = args.iter().any(|a| a == "host");
    match run(&world, rounds, whole_host) {
        Ok(left) => {
            if world.rank() == 0 {
                println!("survivors {left} of {}", world.size());
            }
        }
        Err(e) => common::fail("survive", &world, e.to_string()),
    }
    if let Err(e) = world.finalize() {
        eprintln!("survive: finalize: {e}");
        std::process::exit(4);
    }
}
