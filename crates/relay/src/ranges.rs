//! The ranges of the relay's numeric options: a value outside them is refused at start with the
//! option, the value and the range, instead of a relay that spins, prints without pause or
//! closes every connection.

use crate::daemon::{DaemonError, RelayArgs};
use std::time::Duration;

/// Longest `--spin-us`: one second of polling without sleeping.
pub const MAX_SPIN_US: u64 = 1_000_000;
/// Shortest `--stats` period.
pub const MIN_STATS_SECS: f64 = 0.1;
/// Largest `--max-connections`, `--max-strangers` and `--max-per-job`.
pub const MAX_CONNECTIONS: usize = 1 << 20;
/// Longest timeout or period in seconds: 30 days.
pub const MAX_SECS: f64 = 30.0 * 86_400.0;

fn count(name: &str, value: usize) -> Result<usize, DaemonError> {
    if (1..=MAX_CONNECTIONS).contains(&value) {
        Ok(value)
    } else {
        Err(DaemonError::Usage(format!(
            "--{name} {value} is out of range: expected 1 to {MAX_CONNECTIONS}"
        )))
    }
}

/// `value` seconds as a duration, if it lies in `min..=MAX_SECS`.
pub fn secs(name: &str, value: f64, min: f64) -> Result<Duration, DaemonError> {
    if !(min..=MAX_SECS).contains(&value) {
        return Err(DaemonError::Usage(format!(
            "--{name} {value} is out of range: expected {min} to {MAX_SECS} seconds"
        )));
    }
    Duration::try_from_secs_f64(value)
        .map_err(|_| DaemonError::Usage(format!("--{name} {value} is not a number of seconds")))
}

/// Checks every numeric option of `args`.
pub fn check(args: &RelayArgs) -> Result<(), DaemonError> {
    count("max-per-job", args.max_per_job)?;
    count("max-connections", args.max_connections)?;
    count("max-strangers", args.max_strangers)?;
    secs("handshake-timeout", args.handshake_timeout, 0.001)?;
    secs("idle-timeout", args.idle_timeout, 0.001)?;
    if let Some(every) = args.stats {
        secs("stats", every, MIN_STATS_SECS)?;
    }
    if args.spin_us > MAX_SPIN_US {
        return Err(DaemonError::Usage(format!(
            "--spin-us {} is out of range: expected 0 to {MAX_SPIN_US} microseconds",
            args.spin_us
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RelayArgs,
    }

    fn checked(flags: &[&str]) -> Result<(), String> {
        let cli = Cli::try_parse_from(std::iter::once("relay").chain(flags.iter().copied()))
            .map_err(|e| e.to_string())?;
        check(&cli.args).map_err(|e| e.to_string())
    }

    #[test]
    fn absurd_values_are_refused_naming_the_range() {
        assert_eq!(checked(&[]), Ok(()));
        assert_eq!(checked(&["--stats", "1", "--spin-us", "0"]), Ok(()));
        for (flags, says) in [
            (&["--stats", "0"][..], "--stats 0 is out of range"),
            (&["--stats", "NaN"], "--stats NaN is out of range"),
            (&["--spin-us", "99999999999"], "expected 0 to 1000000"),
            (
                &["--max-connections", "0"],
                "--max-connections 0 is out of range",
            ),
            (&["--max-strangers", "0"], "expected 1 to"),
            (&["--max-per-job", "0"], "--max-per-job 0"),
            (&["--handshake-timeout", "0"], "--handshake-timeout 0"),
            (&["--idle-timeout", "1e300"], "--idle-timeout"),
        ] {
            let err = checked(flags).expect_err(says);
            assert!(err.contains(says), "{flags:?}: {err}");
        }
    }
}
