//! Network weather: measure the latency and bandwidth between the ranks of a job, keep a
//! history, and forecast each entry the way the Network Weather Service does (Wolski et al.).
//!
//! What it owns:
//! - [`forecast`]: the forecasters (last value, running mean, exponential smoothing, sliding
//!   means and medians, trimmed medians) behind the [`Forecaster`] trait — pure, no clock, no I/O;
//! - [`Series`]: runs every forecaster on each measurement, tracks each one's mean absolute and
//!   mean squared error over a window, and forecasts with the one whose error is lowest,
//!   returning that error with the value ([`Forecast`]);
//! - [`WeatherMatrix`] / [`WeatherForecast`]: a series per ordered pair; the forecast is a
//!   [`CostModel`](ferry_sched::hetero::CostModel) for the broadcast schedulers, with per-entry
//!   relative errors, and [`choose_bcast_scheduler`] is the rule that turns those errors into
//!   ECEF or TTCC;
//! - [`measure`](mod@measure): one measurement of the matrix inside a ferry job (ferry-core's
//!   `send`/`recv`/`barrier`), and [`history`]: the JSON-lines file of past measurements.
//!
//! What it does not: launch jobs or print (that is `ferry weather` in ferry-cli), or wire the
//! choice into the collective call path (ferry-core). It must not depend on the launcher, the C
//! ABI or the command line.
//!
//! # Example
//! ```
//! use ferry_weather::{choose_bcast_scheduler, Sample, WeatherMatrix, DEFAULT_TTCC_THRESHOLD};
//! let mut weather = WeatherMatrix::new(2, 10);
//! for bw in [1.0e9, 1.1e9, 0.9e9, 1.0e9] {
//!     let mut s = Sample::empty(2);
//!     s.latency = vec![f64::NAN, 2e-6, 2e-6, f64::NAN];
//!     s.bandwidth = vec![f64::NAN, bw, bw, f64::NAN];
//!     weather.update(&s);
//! }
//! let forecast = weather.forecast().unwrap();
//! let cost = forecast.cost_matrix(); // for ferry_sched::hetero's schedulers
//! let errors = forecast.relative_time_errors(1 << 20);
//! let choice = choose_bcast_scheduler(&errors, DEFAULT_TTCC_THRESHOLD);
//! println!("{} ({:?})", choice.name(), forecast.bandwidth_forecast(0, 1));
//! # let _ = cost;
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod forecast;
pub mod history;
mod matrix;
pub mod measure;
mod series;

pub use forecast::Forecaster;
pub use matrix::{
    choose_bcast_scheduler, median, BcastChoice, Sample, WeatherForecast, WeatherMatrix,
    DEFAULT_TTCC_THRESHOLD,
};
pub use measure::{measure, Probe};
pub use series::{Forecast, Metric, Series};

/// Settings of the weather, each from a `FERRY_WEATHER_…` environment variable.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Measurements over which each forecaster's error is averaged (`FERRY_WEATHER_WINDOW`,
    /// default 10).
    pub window: usize,
    /// Median relative forecast error above which broadcasts use TTCC instead of ECEF
    /// (`FERRY_WEATHER_TTCC_THRESHOLD`, default 0.2).
    pub ttcc_threshold: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            window: 10,
            ttcc_threshold: DEFAULT_TTCC_THRESHOLD,
        }
    }
}

/// A `FERRY_WEATHER_…` variable that is not a number or lies outside its range (the ranges are
/// those of [`ferry_wire::settings`], the one table of ferry's numbers).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ConfigError(#[from] pub ferry_wire::settings::SettingError);

impl Config {
    /// The defaults, overridden by the environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Config::from_env`] with the variables from `get` (an environment lookup).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        use ferry_wire::settings::{number, real};
        let mut c = Config::default();
        if let Some(window) = number(&get, "FERRY_WEATHER_WINDOW")? {
            // At most 10 000 (the table's range): fits any usize.
            c.window = window as usize;
        }
        if let Some(threshold) = real(&get, "FERRY_WEATHER_TTCC_THRESHOLD")? {
            c.ttcc_threshold = threshold;
        }
        Ok(c)
    }

    /// Every setting as (environment variable, value), for `ferry info --params`.
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        vec![
            ("FERRY_WEATHER_WINDOW", self.window.to_string()),
            (
                "FERRY_WEATHER_TTCC_THRESHOLD",
                self.ttcc_threshold.to_string(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_out_of_range_are_named_with_their_range() {
        let with = |name: &'static str, value: &'static str| {
            move |n: &str| (n == name).then(|| value.to_string())
        };
        let e = Config::from_lookup(with("FERRY_WEATHER_WINDOW", "0")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "FERRY_WEATHER_WINDOW=0 is out of range: expected 1 … 10000 measurements"
        );
        let e = Config::from_lookup(with("FERRY_WEATHER_TTCC_THRESHOLD", "-1")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "FERRY_WEATHER_TTCC_THRESHOLD=-1 is out of range: expected 0 … 10 (a relative error)"
        );
        let c = Config::from_lookup(with("FERRY_WEATHER_WINDOW", " 20 ")).unwrap();
        assert_eq!((c.window, c.ttcc_threshold), (20, DEFAULT_TTCC_THRESHOLD));
        assert_eq!(Config::from_lookup(|_| None).unwrap(), Config::default());
    }
}
