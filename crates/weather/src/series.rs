//! A measured series and its forecast: every forecaster runs on every measurement, each one's
//! recent error is tracked, and the series forecasts with the one whose error is lowest.

use crate::forecast::{default_forecasters, Forecaster};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Which recent error picks the forecaster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Mean absolute error: robust to the odd spike (NWS's default for ranking).
    #[default]
    Mae,
    /// Mean squared error: punishes large misses more.
    Mse,
}

/// A prediction with the error the forecaster that made it has shown lately.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// The predicted next value.
    pub value: f64,
    /// Mean absolute error of this forecaster over the error window (∞ before any error was
    /// measured: an unmeasured series is unpredictable; `null` in JSON).
    #[serde(with = "infinite_as_null")]
    pub mae: f64,
    /// Mean squared error over the same window (∞ likewise).
    #[serde(with = "infinite_as_null")]
    pub mse: f64,
    /// How many errors the window holds (0 right after the first measurement).
    pub samples: usize,
    /// Name of the forecaster that won.
    pub forecaster: String,
}

impl Forecast {
    /// `mae / |value|`: the error as a fraction of the forecast (∞ when the forecast is 0 or
    /// the error unknown).
    pub fn relative_error(&self) -> f64 {
        if self.value == 0.0 {
            return f64::INFINITY;
        }
        self.mae / self.value.abs()
    }
}

/// JSON has no ∞: an unknown error is written as `null` and read back as ∞.
mod infinite_as_null {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        v.is_finite().then_some(*v).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
    }
}

/// One forecaster and its last `window` errors.
#[derive(Debug)]
struct Tracked {
    forecaster: Box<dyn Forecaster>,
    errors: VecDeque<f64>,
    abs_sum: f64,
    sq_sum: f64,
}

impl Tracked {
    fn mae(&self) -> f64 {
        match self.errors.len() {
            0 => f64::INFINITY,
            n => self.abs_sum.max(0.0) / n as f64,
        }
    }
    fn mse(&self) -> f64 {
        match self.errors.len() {
            0 => f64::INFINITY,
            n => self.sq_sum.max(0.0) / n as f64,
        }
    }
    fn score(&self, metric: Metric) -> f64 {
        match metric {
            Metric::Mae => self.mae(),
            Metric::Mse => self.mse(),
        }
    }
}

/// A series of measurements (one matrix entry: a latency or a bandwidth) and its forecasters.
///
/// ```
/// use ferry_weather::Series;
/// let mut s = Series::new(10);
/// for x in [1.0, 1.0, 1.0, 1.0] {
///     s.update(x);
/// }
/// let f = s.forecast().unwrap();
/// assert_eq!(f.value, 1.0);
/// assert_eq!(f.mae, 0.0);
/// ```
#[derive(Debug)]
pub struct Series {
    tracked: Vec<Tracked>,
    window: usize,
    metric: Metric,
    last: Option<f64>,
    count: u64,
}

impl Series {
    /// The [default forecasters](crate::forecast::default_forecasters), errors kept over the
    /// last `window` measurements (at least 1), ranked by [`Metric::Mae`].
    pub fn new(window: usize) -> Series {
        Series::with_forecasters(default_forecasters(), window)
    }

    /// Your own forecasters; ties go to the earlier one in `forecasters`.
    pub fn with_forecasters(forecasters: Vec<Box<dyn Forecaster>>, window: usize) -> Series {
        let window = window.max(1);
        Series {
            tracked: forecasters
                .into_iter()
                .map(|forecaster| Tracked {
                    forecaster,
                    errors: VecDeque::with_capacity(window),
                    abs_sum: 0.0,
                    sq_sum: 0.0,
                })
                .collect(),
            window,
            metric: Metric::Mae,
            last: None,
            count: 0,
        }
    }

    /// Ranks forecasters by `metric` instead.
    pub fn with_metric(mut self, metric: Metric) -> Series {
        self.metric = metric;
        self
    }

    /// Takes the next measurement: each forecaster's prediction for it becomes an error sample,
    /// then the forecaster sees it. Non-finite values are ignored (a failed measurement).
    pub fn update(&mut self, value: f64) {
        if !value.is_finite() {
            return;
        }
        for t in &mut self.tracked {
            if let Some(predicted) = t.forecaster.forecast() {
                let error = value - predicted;
                if t.errors.len() == self.window {
                    let old = t.errors.pop_front().unwrap_or(0.0);
                    t.abs_sum -= old.abs();
                    t.sq_sum -= old * old;
                }
                t.errors.push_back(error);
                t.abs_sum += error.abs();
                t.sq_sum += error * error;
            }
            t.forecaster.update(value);
        }
        self.last = Some(value);
        self.count += 1;
    }

    /// The last measurement taken.
    pub fn last(&self) -> Option<f64> {
        self.last
    }

    /// Measurements taken so far.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True before the first measurement.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The forecast of the forecaster with the lowest recent error, with that error; `None`
    /// before the first measurement.
    pub fn forecast(&self) -> Option<Forecast> {
        let mut best: Option<(&Tracked, f64, f64)> = None;
        for t in &self.tracked {
            let Some(value) = t.forecaster.forecast() else {
                continue;
            };
            let score = t.score(self.metric);
            // Strictly lower wins, so ties keep the earlier forecaster; ∞ == ∞ keeps the first.
            if best.is_none_or(|(_, _, s)| score < s) {
                best = Some((t, value, score));
            }
        }
        best.map(|(t, value, _)| Forecast {
            value,
            mae: t.mae(),
            mse: t.mse(),
            samples: t.errors.len(),
            forecaster: t.forecaster.name().to_string(),
        })
    }

    /// Every forecaster's name, prediction and recent error (for reports and tests), in order.
    pub fn all(&self) -> Vec<Forecast> {
        self.tracked
            .iter()
            .filter_map(|t| {
                Some(Forecast {
                    value: t.forecaster.forecast()?,
                    mae: t.mae(),
                    mse: t.mse(),
                    samples: t.errors.len(),
                    forecaster: t.forecaster.name().to_string(),
                })
            })
            .collect()
    }
}
