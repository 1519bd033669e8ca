//! What the self-checking examples (`check`, `squeeze`) share: joining the job, reading their
//! arguments and failing the job with a message that names the program and the rank.

use ferry_core::World;

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
