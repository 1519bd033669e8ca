//! The numeric settings of the runtime, the collectives' selection table and BSP, read through
//! the one table of every `FERRY_…` number, [`ferry_wire::settings`] (which the launcher uses
//! too). A value outside its range is refused when the settings are read (`MPI_Init`,
//! `ferry run` before any rank starts, `ferry info --params`) with a message naming the
//! variable, the value and the range. `docs/settings.md` is the table for people; a test there
//! keeps the two in step.

use crate::error::Error;

pub use ferry_wire::settings::{bounds_of, Bounds, NUMBERS};

/// The setting `name` from `get` (an environment lookup), checked against its bounds; `None`
/// when unset or blank.
pub fn number(get: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<u64>, Error> {
    ferry_wire::settings::number(get, name).map_err(|e| Error::Config(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_allows_as_many_rails_as_the_runtime() {
        assert_eq!(
            bounds_of("FERRY_RAILS").max,
            u64::from(crate::config::MAX_RAILS)
        );
    }

    #[test]
    fn an_out_of_range_value_is_a_config_error_naming_it() {
        let get = |_: &str| Some("1".to_string());
        match number(&get, "FERRY_TCP_BUF") {
            Err(Error::Config(message)) => assert!(
                message.starts_with("FERRY_TCP_BUF=1 is out of range: expected 0 (kernel"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
    }
}
