//! The table of numeric settings: every `FERRY_…` number that ferry reads — the runtime, the
//! collectives' selection table, BSP, the launcher and the network weather — with the values it
//! accepts. A value outside its range is refused when the settings are read (`MPI_Init`,
//! `ferry run` before any rank starts, `ferry info --params`) with a message naming the
//! variable, the value and the range: a setting that would quietly hurt (a 1-byte socket
//! buffer, 64 GiB rings) is a mistake to report, not a value to run with or to round.
//! `docs/settings.md` is this table for people; a test keeps the two in step.
//!
//! It lives here, in the crate every other one depends on, so that there is one table: the
//! runtime (`ferry_core::settings`) and the launcher, which does not depend on the runtime,
//! both read their numbers through it. Pure: the caller hands the environment in as a lookup.

use thiserror::Error;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A setting whose value is not a number or lies outside its range.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SettingError {
    /// The value does not parse as a number.
    #[error("{name}={text:?} is not a number: expected {range}")]
    NotANumber {
        /// The environment variable.
        name: &'static str,
        /// Its value.
        text: String,
        /// The accepted values in words.
        range: String,
    },
    /// The value is a number outside the accepted values.
    #[error("{name}={value} is out of range: expected {range}")]
    OutOfRange {
        /// The environment variable.
        name: &'static str,
        /// Its value, as given.
        value: String,
        /// The accepted values in words.
        range: String,
    },
}

/// The accepted values of one numeric setting: `min ..= max` in `unit`, and also 0 when
/// `zero` says what 0 means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The environment variable.
    pub name: &'static str,
    /// Smallest accepted value (besides 0, see `zero`).
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
    /// What the number counts: `bytes`, `seconds`, `polls`, `ranks`, `microseconds`.
    pub unit: &'static str,
    /// When 0 is accepted below `min`: what it means.
    pub zero: Option<&'static str>,
}

const fn bounds(name: &'static str, min: u64, max: u64, unit: &'static str) -> Bounds {
    Bounds {
        name,
        min,
        max,
        unit,
        zero: None,
    }
}

/// Every whole-number setting.
pub const NUMBERS: &[Bounds] = &[
    // Half a ring at most as well: checked against the ring when the rings are made.
    bounds("FERRY_SHM_EAGER", 0, 32 * MIB, "bytes"),
    // Per pair of ranks of a host: n² rings, so 64 MiB is already 4 GiB for 8 ranks.
    bounds("FERRY_SHM_RING", 4 * KIB, 64 * MIB, "bytes"),
    bounds("FERRY_CMA_SHARE", 0, 1 << 40, "bytes"),
    bounds("FERRY_TCP_EAGER", 0, 64 * MIB, "bytes"),
    bounds("FERRY_TCP_CHUNK", 4 * KIB, 64 * MIB, "bytes"),
    // Below 64 KiB a 1 MiB round trip took tens of seconds (4 KiB: 37 s, 1 byte: never).
    Bounds {
        name: "FERRY_TCP_BUF",
        min: 64 * KIB,
        max: GIB,
        unit: "bytes",
        zero: Some("kernel autotuning"),
    },
    bounds("FERRY_TCP_STRANGERS", 16, 65_536, "connections"),
    // Compression of TCP payloads (`FERRY_COMPRESS`): the link rate below which `auto`
    // compresses, and the smallest payload worth compressing (an LZ4 block pays off from a
    // few KiB; a whole 64 MiB frame is the largest the transport sends).
    bounds("FERRY_COMPRESS_BELOW", 1, 1_000_000, "Mbit/s"),
    bounds("FERRY_COMPRESS_MIN", 512, 64 * MIB, "bytes"),
    bounds("FERRY_SPIN", 0, 100_000_000, "polls"),
    bounds("FERRY_HOST_CORES", 1, 1 << 20, "cores"),
    // ferry_core::config::MAX_RAILS (a test there checks that they agree).
    bounds("FERRY_RAILS", 1, 16, "rails"),
    bounds("FERRY_RAIL_STRIPE", 4 * KIB, 1 << 40, "bytes"),
    bounds("FERRY_RAIL_TIMEOUT", 1, 3600, "seconds"),
    Bounds {
        name: "FERRY_CONNECT_TIMEOUT",
        min: 1,
        max: 86_400,
        unit: "seconds",
        zero: Some("no limit, as `ferry run --timeout 0`"),
    },
    // Hole punching between two private clusters: a decider without a connection by then
    // takes the relay (ferry_wire::punch). Past a minute set-up would rather fail visibly.
    bounds("FERRY_PUNCH_TIMEOUT_MS", 1, 60_000, "milliseconds"),
    bounds("FERRY_COLL_BCAST_LONG", 0, 1 << 40, "bytes"),
    bounds("FERRY_COLL_BCAST_MIN_RANKS", 0, 1 << 24, "ranks"),
    bounds("FERRY_COLL_ALLREDUCE_LONG", 0, 1 << 40, "bytes"),
    // Per communicator whose ranks share a host; 0 turns shared collective segments off.
    Bounds {
        name: "FERRY_COLL_SHM",
        min: 64 * KIB,
        max: GIB,
        unit: "bytes",
        zero: Some("off"),
    },
    bounds("FERRY_BSP_EARLY", 0, GIB, "bytes"),
    bounds("FERRY_BSP_PREPOST_BYTES", 64, GIB, "bytes"),
    bounds("FERRY_BSP_SPIN", 0, 10_000_000, "microseconds"),
    // Entries reserved at bsp_begin; the queue grows past it as needed (`bspcc -bspfifo`).
    bounds("FERRY_BSP_FIFO", 0, 1 << 20, "messages"),
    // Each daemon the launcher starts itself is a remote shell and two pipes of the launcher;
    // a job has at most 65 536 ranks, so never more hosts than that.
    bounds("FERRY_TREE_FANOUT", 1, 65_536, "daemons"),
    // MPI_UNIVERSE_SIZE is a C int (`ferry run --universe-size`).
    bounds("FERRY_UNIVERSE_SIZE", 1, i32::MAX as u64, "processes"),
    // Measurements each forecaster's error is averaged over; NWS uses tens.
    bounds("FERRY_WEATHER_WINDOW", 1, 10_000, "measurements"),
];

/// The accepted values of one setting that is a real number: `min ..= max`, in `unit`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RealBounds {
    /// The environment variable.
    pub name: &'static str,
    /// Smallest accepted value.
    pub min: f64,
    /// Largest accepted value.
    pub max: f64,
    /// What the number is.
    pub unit: &'static str,
}

/// Every setting that is a real number.
pub const REALS: &[RealBounds] = &[
    // A median relative error of the forecast transfer time: 10 (1000 %) is already "never".
    RealBounds {
        name: "FERRY_WEATHER_TTCC_THRESHOLD",
        min: 0.0,
        max: 10.0,
        unit: "(a relative error)",
    },
];

impl Bounds {
    /// The accepted values in words, as the error messages and `docs/settings.md` give them.
    pub fn range(&self) -> String {
        let span = format!("{} … {} {}", self.min, self.max, self.unit);
        match self.zero {
            Some(means) => format!("0 ({means}) or {span}"),
            None => span,
        }
    }

    /// `text` as a number in range, or an error naming the variable, the value and the range.
    pub fn check(&self, text: &str) -> Result<u64, SettingError> {
        let value: u64 = text.trim().parse().map_err(|_| SettingError::NotANumber {
            name: self.name,
            text: text.to_string(),
            range: self.range(),
        })?;
        let zero_ok = value == 0 && self.zero.is_some();
        if !zero_ok && !(self.min..=self.max).contains(&value) {
            return Err(SettingError::OutOfRange {
                name: self.name,
                value: value.to_string(),
                range: self.range(),
            });
        }
        Ok(value)
    }
}

impl RealBounds {
    /// The accepted values in words, as the error messages and `docs/settings.md` give them.
    pub fn range(&self) -> String {
        format!("{} … {} {}", self.min, self.max, self.unit)
    }

    /// `text` as a finite number in range, or an error naming the variable, the value and the
    /// range.
    pub fn check(&self, text: &str) -> Result<f64, SettingError> {
        let value: f64 = text
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| SettingError::NotANumber {
                name: self.name,
                text: text.to_string(),
                range: self.range(),
            })?;
        if !(self.min..=self.max).contains(&value) {
            return Err(SettingError::OutOfRange {
                name: self.name,
                value: text.trim().to_string(),
                range: self.range(),
            });
        }
        Ok(value)
    }
}

/// The bounds of `name`; a name missing from [`NUMBERS`] is a bug of the caller.
pub fn bounds_of(name: &str) -> &'static Bounds {
    match NUMBERS.iter().find(|b| b.name == name) {
        Some(b) => b,
        None => panic!("{name} is missing from ferry_wire::settings::NUMBERS"),
    }
}

/// The bounds of `name`; a name missing from [`REALS`] is a bug of the caller.
pub fn real_bounds_of(name: &str) -> &'static RealBounds {
    match REALS.iter().find(|b| b.name == name) {
        Some(b) => b,
        None => panic!("{name} is missing from ferry_wire::settings::REALS"),
    }
}

/// The setting `name` from `get` (an environment lookup), checked against its bounds; `None`
/// when unset or blank.
pub fn number(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
) -> Result<Option<u64>, SettingError> {
    match get(name) {
        Some(text) if !text.trim().is_empty() => bounds_of(name).check(&text).map(Some),
        _ => Ok(None),
    }
}

/// The real-number setting `name` from `get`, checked against its bounds; `None` when unset or
/// blank.
pub fn real(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
) -> Result<Option<f64>, SettingError> {
    match get(name) {
        Some(text) if !text.trim().is_empty() => real_bounds_of(name).check(&text).map(Some),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_outside_the_range_are_refused_naming_variable_value_and_range() {
        let buf = bounds_of("FERRY_TCP_BUF");
        let e = buf.check("1").unwrap_err().to_string();
        assert!(
            e.contains("FERRY_TCP_BUF=1")
                && e.contains("out of range")
                && e.contains("0 (kernel autotuning) or 65536 … 1073741824 bytes"),
            "{e}"
        );
        assert_eq!(buf.check("0").unwrap(), 0);
        assert_eq!(buf.check(" 65536 ").unwrap(), 65536);
        let ring = bounds_of("FERRY_SHM_RING");
        let e = ring.check("99999999999").unwrap_err().to_string();
        assert!(e.contains("FERRY_SHM_RING=99999999999") && e.contains("4096 … 67108864 bytes"));
        let e = bounds_of("FERRY_TCP_CHUNK")
            .check("0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("FERRY_TCP_CHUNK=0 is out of range"), "{e}");
        let e = bounds_of("FERRY_RAILS")
            .check("-1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("FERRY_RAILS=\"-1\" is not a number"), "{e}");
        assert_eq!(bounds_of("FERRY_CONNECT_TIMEOUT").check("0").unwrap(), 0);
    }

    #[test]
    fn the_launcher_and_weather_settings_have_ranges() {
        let fanout = bounds_of("FERRY_TREE_FANOUT");
        assert_eq!(
            fanout.check("0").unwrap_err().to_string(),
            "FERRY_TREE_FANOUT=0 is out of range: expected 1 … 65536 daemons"
        );
        assert_eq!(
            fanout.check("65537").unwrap_err().to_string(),
            "FERRY_TREE_FANOUT=65537 is out of range: expected 1 … 65536 daemons"
        );
        assert_eq!(fanout.check("8").unwrap(), 8);
        let window = bounds_of("FERRY_WEATHER_WINDOW");
        assert_eq!(
            window.check("0").unwrap_err().to_string(),
            "FERRY_WEATHER_WINDOW=0 is out of range: expected 1 … 10000 measurements"
        );
        let threshold = real_bounds_of("FERRY_WEATHER_TTCC_THRESHOLD");
        assert_eq!(
            threshold.check("-0.5").unwrap_err().to_string(),
            "FERRY_WEATHER_TTCC_THRESHOLD=-0.5 is out of range: expected 0 … 10 (a relative error)"
        );
        assert_eq!(
            threshold.check("11").unwrap_err().to_string(),
            "FERRY_WEATHER_TTCC_THRESHOLD=11 is out of range: expected 0 … 10 (a relative error)"
        );
        for bad in ["nan", "inf", "x"] {
            let e = threshold.check(bad).unwrap_err().to_string();
            assert!(e.contains("is not a number"), "{e}");
        }
        assert_eq!(threshold.check(" 0.25 ").unwrap(), 0.25);
        let get = |name: &str| (name == "FERRY_TREE_FANOUT").then(|| "  ".to_string());
        assert_eq!(number(&get, "FERRY_TREE_FANOUT").unwrap(), None);
    }

    #[test]
    fn every_range_is_sane_and_every_name_unique() {
        let names: Vec<&str> = NUMBERS
            .iter()
            .map(|b| b.name)
            .chain(REALS.iter().map(|b| b.name))
            .collect();
        for (i, name) in names.iter().enumerate() {
            assert!(name.starts_with("FERRY_"), "{name}");
            assert!(!names[..i].contains(name), "{name} twice");
        }
        for b in NUMBERS {
            assert!(b.min <= b.max, "{}", b.name);
        }
        for b in REALS {
            assert!(b.min <= b.max && b.max.is_finite(), "{}", b.name);
        }
    }

    /// docs/settings.md lists every setting with the very range that is enforced.
    #[test]
    fn the_settings_page_gives_every_range() {
        let page = include_str!("../../../docs/settings.md");
        let rows = NUMBERS
            .iter()
            .map(|b| (b.name, b.range()))
            .chain(REALS.iter().map(|b| (b.name, b.range())));
        for (name, range) in rows {
            let row = page
                .lines()
                .find(|l| l.starts_with(&format!("| `{name}`")))
                .unwrap_or_else(|| panic!("docs/settings.md has no row for {name}"));
            assert!(
                row.contains(&range),
                "docs/settings.md: the row of {name} does not give {range}"
            );
        }
    }
}
