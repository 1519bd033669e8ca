//! `ferry-relay`: the relay daemon alone, for front nodes that need nothing else of ferry
//! (same flags as `ferry relay`).
use clap::Parser;

/// The front-node relay of ferry.
#[derive(Parser)]
#[command(name = "ferry-relay", version, about)]
struct Cli {
    #[command(flatten)]
    args: ferry_relay::daemon::RelayArgs,
}

fn main() {
    let cli = Cli::parse();
    std::process::exit(ferry_relay::daemon::main_with(&cli.args));
}
