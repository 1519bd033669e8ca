//! The table of numeric settings: every `FERRY_…` number the runtime reads, with the values it
//! accepts. A value outside its range is refused when the settings are read (`MPI_Init`,
//! `ferry run` before any rank starts, `ferry info --params`) with a message naming the
//! variable, the value and the range: a setting that would quietly hurt (a 1-byte socket
//! buffer, 64 GiB rings) is a mistake to report, not a value to run with or to round.
//! `docs/settings.md` is this table for people; a test keeps the two in step.

use crate::error::Error;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

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

/// Every numeric setting of the runtime, the collectives' selection table and BSP.
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
    bounds("FERRY_SPIN", 0, 100_000_000, "polls"),
    bounds("FERRY_RAILS", 1, crate::config::MAX_RAILS as u64, "rails"),
    bounds("FERRY_RAIL_STRIPE", 4 * KIB, 1 << 40, "bytes"),
    bounds("FERRY_RAIL_TIMEOUT", 1, 3600, "seconds"),
    Bounds {
        name: "FERRY_CONNECT_TIMEOUT",
        min: 1,
        max: 86_400,
        unit: "seconds",
        zero: Some("no limit, as `ferry run --timeout 0`"),
    },
    bounds("FERRY_COLL_BCAST_LONG", 0, 1 << 40, "bytes"),
    bounds("FERRY_COLL_BCAST_MIN_RANKS", 0, 1 << 24, "ranks"),
    bounds("FERRY_COLL_ALLREDUCE_LONG", 0, 1 << 40, "bytes"),
    bounds("FERRY_BSP_EARLY", 0, GIB, "bytes"),
    bounds("FERRY_BSP_PREPOST_BYTES", 64, GIB, "bytes"),
    bounds("FERRY_BSP_SPIN", 0, 10_000_000, "microseconds"),
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
    pub fn check(&self, text: &str) -> Result<u64, Error> {
        let name = self.name;
        let range = self.range();
        let value: u64 = text.trim().parse().map_err(|_| {
            Error::Config(format!("{name}={text:?} is not a number: expected {range}"))
        })?;
        let zero_ok = value == 0 && self.zero.is_some();
        if !zero_ok && !(self.min..=self.max).contains(&value) {
            return Err(Error::Config(format!(
                "{name}={value} is out of range: expected {range}"
            )));
        }
        Ok(value)
    }
}

/// The bounds of `name`; a name missing from [`NUMBERS`] is a bug of this crate.
pub fn bounds_of(name: &str) -> &'static Bounds {
    match NUMBERS.iter().find(|b| b.name == name) {
        Some(b) => b,
        None => panic!("{name} is missing from ferry_core::settings::NUMBERS"),
    }
}

/// The setting `name` from `get` (an environment lookup), checked against its bounds; `None`
/// when unset or blank.
pub fn number(get: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<u64>, Error> {
    match get(name) {
        Some(text) if !text.trim().is_empty() => bounds_of(name).check(&text).map(Some),
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
    fn every_range_is_sane_and_every_name_unique() {
        for (i, b) in NUMBERS.iter().enumerate() {
            assert!(b.min <= b.max, "{}", b.name);
            assert!(b.name.starts_with("FERRY_"), "{}", b.name);
            assert!(
                NUMBERS[..i].iter().all(|o| o.name != b.name),
                "{} twice",
                b.name
            );
        }
    }

    /// docs/settings.md lists every setting with the very range that is enforced.
    #[test]
    fn the_settings_page_gives_every_range() {
        let page = include_str!("../../../docs/settings.md");
        for b in NUMBERS {
            let row = page
                .lines()
                .find(|l| l.starts_with(&format!("| `{}`", b.name)))
                .unwrap_or_else(|| panic!("docs/settings.md has no row for {}", b.name));
            assert!(
                row.contains(&b.range()),
                "docs/settings.md: the row of {} does not give {}",
                b.name,
                b.range()
            );
        }
    }
}
