//! The launcher's numeric settings, read once per job (per daemon) through the one table of
//! ferry's numbers, [`ferry_wire::settings`]: a value out of its range ends `ferry run` before
//! anything starts, with a message naming the variable, the value and the range.

use ferry_wire::settings::{number, SettingError};
use std::time::Duration;

/// Remote daemons the launcher starts itself when `FERRY_TREE_FANOUT` is unset.
const DEFAULT_TREE_FANOUT: usize = 32;
/// How long a daemon may stay silent when `FERRY_CONNECT_TIMEOUT` is unset (as the ranks).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// `FERRY_CONNECT_TIMEOUT=0`: no limit (as `ferry_core::Config::connect_timeout`), still a
/// duration that an `Instant` can be moved by.
const NO_LIMIT: Duration = Duration::from_secs(100 * 365 * 86_400);

/// What the launcher and its node daemons take from `FERRY_…` numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    /// How many remote daemons the launcher starts itself (`FERRY_TREE_FANOUT`); each starts
    /// the rest of its group.
    pub(crate) tree_fanout: usize,
    /// How long a daemon may take to say anything (`FERRY_CONNECT_TIMEOUT`, as the ranks' own
    /// connections): a host that does not answer is named after it.
    pub(crate) connect_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            tree_fanout: DEFAULT_TREE_FANOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

impl Settings {
    /// The settings of this process's environment.
    pub(crate) fn from_env() -> Result<Settings, SettingError> {
        Settings::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings from `get` (an environment lookup); unset or blank is the default.
    pub(crate) fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, SettingError> {
        let d = Settings::default();
        let tree_fanout = number(&get, "FERRY_TREE_FANOUT")?
            // At most 65 536 (the table's range): fits any usize.
            .map_or(d.tree_fanout, |f| f as usize);
        let connect_timeout = match number(&get, "FERRY_CONNECT_TIMEOUT")? {
            None => d.connect_timeout,
            Some(0) => NO_LIMIT,
            Some(secs) => Duration::from_secs(secs),
        };
        Ok(Settings {
            tree_fanout,
            connect_timeout,
        })
    }
}

/// Checks the launcher's settings in this process's environment, as [`crate::run`] does before
/// anything starts (for `ferry run`'s own check of every setting up front).
pub fn check_env() -> Result<(), SettingError> {
    Settings::from_env().map(drop)
}

/// The launcher's numbers in force, as (environment variable, value), for `ferry info
/// --params` (`FERRY_CONNECT_TIMEOUT` is the runtime's too and printed with its settings).
pub fn describe() -> Result<Vec<(&'static str, String)>, SettingError> {
    let s = Settings::from_env()?;
    Ok(vec![("FERRY_TREE_FANOUT", s.tree_fanout.to_string())])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &'static str, value: &'static str) -> impl Fn(&str) -> Option<String> {
        move |n: &str| (n == name).then(|| value.to_string())
    }

    #[test]
    fn defaults_values_and_no_limit() {
        assert_eq!(
            Settings::from_lookup(|_| None).unwrap(),
            Settings::default()
        );
        let s = Settings::from_lookup(with("FERRY_TREE_FANOUT", " 4 ")).unwrap();
        assert_eq!(s.tree_fanout, 4);
        let s = Settings::from_lookup(with("FERRY_CONNECT_TIMEOUT", "0")).unwrap();
        assert!(s.connect_timeout > Duration::from_secs(10 * 365 * 86_400));
        let _ = std::time::Instant::now() + s.connect_timeout;
        let s = Settings::from_lookup(with("FERRY_CONNECT_TIMEOUT", "5")).unwrap();
        assert_eq!(s.connect_timeout, Duration::from_secs(5));
    }

    #[test]
    fn out_of_range_values_are_named_with_their_range() {
        let e = Settings::from_lookup(with("FERRY_TREE_FANOUT", "0")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "FERRY_TREE_FANOUT=0 is out of range: expected 1 … 65536 daemons"
        );
        let e = Settings::from_lookup(with("FERRY_TREE_FANOUT", "many")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "FERRY_TREE_FANOUT=\"many\" is not a number: expected 1 … 65536 daemons"
        );
        let e = Settings::from_lookup(with("FERRY_CONNECT_TIMEOUT", "86401")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("FERRY_CONNECT_TIMEOUT=86401 is out of range: expected 0 (no limit"),
            "{e}"
        );
    }
}
