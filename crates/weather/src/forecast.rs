//! Forecasters: each one sees a series of measurements, one at a time, and predicts the next.
//!
//! They are the Network Weather Service's family (Wolski, Spring, Hayes, "The Network Weather
//! Service: a distributed resource performance forecasting service for metacomputing", FGCS
//! 1999): last value, running mean, exponential smoothing, sliding-window means and medians and
//! trimmed medians. None is best everywhere — a random walk wants the last value, stationary
//! noise a long mean, noise with spikes a median — which is why [`Series`](crate::Series) runs
//! them all and trusts the one with the lowest recent error.
//!
//! Every forecaster is pure: no clock, no I/O, `O(window)` memory.

use std::collections::VecDeque;

/// Predicts the next value of a series from the values seen so far (an open set: add your own
/// and hand it to [`Series::with_forecasters`](crate::Series::with_forecasters)).
///
/// `update` is called once per measurement, in order; `forecast` is the prediction for the
/// measurement that has not arrived yet. Neither blocks.
pub trait Forecaster: std::fmt::Debug + Send {
    /// Short name, unique within a series (`"exp(0.30)"`), shown in reports and history files.
    fn name(&self) -> &str;
    /// Takes the next measurement.
    fn update(&mut self, value: f64);
    /// The prediction for the next measurement; `None` before the first one.
    fn forecast(&self) -> Option<f64>;
}

/// Predicts the last value seen: best on random walks and clean level shifts.
#[derive(Debug, Clone, Default)]
pub struct LastValue {
    last: Option<f64>,
}

impl LastValue {
    /// A forecaster with no history.
    pub fn new() -> LastValue {
        LastValue::default()
    }
}

impl Forecaster for LastValue {
    fn name(&self) -> &str {
        "last"
    }
    fn update(&mut self, value: f64) {
        self.last = Some(value);
    }
    fn forecast(&self) -> Option<f64> {
        self.last
    }
}

/// Predicts the mean of every value seen: best on stationary noise.
#[derive(Debug, Clone, Default)]
pub struct RunningMean {
    count: u64,
    mean: f64,
}

impl RunningMean {
    /// A forecaster with no history.
    pub fn new() -> RunningMean {
        RunningMean::default()
    }
}

impl Forecaster for RunningMean {
    fn name(&self) -> &str {
        "mean"
    }
    fn update(&mut self, value: f64) {
        // Welford's update: no sum that grows without bound.
        self.count += 1;
        self.mean += (value - self.mean) / self.count as f64;
    }
    fn forecast(&self) -> Option<f64> {
        (self.count > 0).then_some(self.mean)
    }
}

/// Exponential smoothing: `f ← f + gain · (x − f)`, started at the first value. A small gain
/// is a long memory; gain 1 is [`LastValue`].
#[derive(Debug, Clone)]
pub struct ExpSmoothing {
    gain: f64,
    value: Option<f64>,
    name: String,
}

impl ExpSmoothing {
    /// A forecaster with `gain` in (0, 1] (clamped into it).
    pub fn new(gain: f64) -> ExpSmoothing {
        let gain = if gain.is_nan() {
            1.0
        } else {
            gain.clamp(f64::MIN_POSITIVE, 1.0)
        };
        ExpSmoothing {
            gain,
            value: None,
            name: format!("exp({gain:.2})"),
        }
    }
}

impl Forecaster for ExpSmoothing {
    fn name(&self) -> &str {
        &self.name
    }
    fn update(&mut self, value: f64) {
        self.value = Some(match self.value {
            None => value,
            Some(f) => f + self.gain * (value - f),
        });
    }
    fn forecast(&self) -> Option<f64> {
        self.value
    }
}

/// The last `window` values, shared by the window-based forecasters.
#[derive(Debug, Clone)]
struct Window {
    values: VecDeque<f64>,
    capacity: usize,
}

impl Window {
    fn new(capacity: usize) -> Window {
        let capacity = capacity.max(1);
        Window {
            values: VecDeque::with_capacity(capacity),
            capacity,
        }
    }
    fn push(&mut self, value: f64) {
        if self.values.len() == self.capacity {
            self.values.pop_front();
        }
        self.values.push_back(value);
    }
    fn sorted(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self.values.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        v
    }
}

/// The mean of the last `window` values: follows level shifts after `window` measurements.
#[derive(Debug, Clone)]
pub struct SlidingMean {
    window: Window,
    name: String,
}

impl SlidingMean {
    /// A forecaster over the last `window` values (at least 1).
    pub fn new(window: usize) -> SlidingMean {
        let window = Window::new(window);
        let name = format!("mean[{}]", window.capacity);
        SlidingMean { window, name }
    }
}

impl Forecaster for SlidingMean {
    fn name(&self) -> &str {
        &self.name
    }
    fn update(&mut self, value: f64) {
        self.window.push(value);
    }
    fn forecast(&self) -> Option<f64> {
        let v = &self.window.values;
        // Summed afresh (window is small): no drift from adding and removing floats.
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }
}

/// The median of the last `window` values: ignores isolated spikes.
#[derive(Debug, Clone)]
pub struct SlidingMedian {
    window: Window,
    name: String,
}

impl SlidingMedian {
    /// A forecaster over the last `window` values (at least 1).
    pub fn new(window: usize) -> SlidingMedian {
        let window = Window::new(window);
        let name = format!("median[{}]", window.capacity);
        SlidingMedian { window, name }
    }
}

impl Forecaster for SlidingMedian {
    fn name(&self) -> &str {
        &self.name
    }
    fn update(&mut self, value: f64) {
        self.window.push(value);
    }
    fn forecast(&self) -> Option<f64> {
        let v = self.window.sorted();
        let n = v.len();
        match n {
            0 => None,
            _ if n % 2 == 1 => Some(v[n / 2]),
            _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
        }
    }
}

/// NWS's "trimmed median": the α-trimmed mean of the last `window` values — drop the lowest and
/// the highest `⌊α·n⌋` values and average the rest. α = 0 is [`SlidingMean`], α → ½ is
/// [`SlidingMedian`]; in between it ignores spikes yet averages the noise of the rest.
#[derive(Debug, Clone)]
pub struct TrimmedMedian {
    window: Window,
    trim: f64,
    name: String,
}

impl TrimmedMedian {
    /// A forecaster over the last `window` values (at least 1) trimming a fraction `trim` of
    /// them at each end (clamped into [0, 0.5)).
    pub fn new(window: usize, trim: f64) -> TrimmedMedian {
        let window = Window::new(window);
        let trim = if trim.is_nan() {
            0.0
        } else {
            trim.clamp(0.0, 0.499)
        };
        let name = format!("trim[{},{trim:.2}]", window.capacity);
        TrimmedMedian { window, trim, name }
    }
}

impl Forecaster for TrimmedMedian {
    fn name(&self) -> &str {
        &self.name
    }
    fn update(&mut self, value: f64) {
        self.window.push(value);
    }
    fn forecast(&self) -> Option<f64> {
        let v = self.window.sorted();
        if v.is_empty() {
            return None;
        }
        // trim < 0.5, so at least one value is left.
        let cut = (self.trim * v.len() as f64).floor() as usize;
        let kept = &v[cut..v.len() - cut];
        Some(kept.iter().sum::<f64>() / kept.len() as f64)
    }
}

/// The default family, in the order ties are broken (first wins): last value, running mean,
/// exponential smoothing with gains 0.05, 0.1, 0.2, 0.3, 0.5, sliding means and medians over 5,
/// 10, 20 and 50 values, and trimmed medians (α = 0.25) over 10 and 30 values.
pub fn default_forecasters() -> Vec<Box<dyn Forecaster>> {
    let mut all: Vec<Box<dyn Forecaster>> =
        vec![Box::new(LastValue::new()), Box::new(RunningMean::new())];
    for gain in [0.05, 0.1, 0.2, 0.3, 0.5] {
        all.push(Box::new(ExpSmoothing::new(gain)));
    }
    for window in [5, 10, 20, 50] {
        all.push(Box::new(SlidingMean::new(window)));
    }
    for window in [5, 10, 20, 50] {
        all.push(Box::new(SlidingMedian::new(window)));
    }
    for window in [10, 30] {
        all.push(Box::new(TrimmedMedian::new(window, 0.25)));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(f: &mut dyn Forecaster, values: &[f64]) -> f64 {
        for &v in values {
            f.update(v);
        }
        f.forecast().expect("fed at least one value")
    }

    #[test]
    fn empty_forecasters_say_nothing() {
        for f in default_forecasters() {
            assert_eq!(f.forecast(), None, "{}", f.name());
        }
    }

    #[test]
    fn names_are_unique() {
        let all = default_forecasters();
        let mut names: Vec<&str> = all.iter().map(|f| f.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }

    #[test]
    fn constant_input_is_forecast_exactly() {
        for mut f in default_forecasters() {
            let got = feed(f.as_mut(), &[7.5; 60]);
            assert!((got - 7.5).abs() < 1e-12, "{}: {got}", f.name());
        }
    }

    #[test]
    fn step_input() {
        let mut values = vec![1.0; 100];
        values.extend([5.0; 10]);
        assert_eq!(feed(&mut LastValue::new(), &values), 5.0);
        // The running mean lags: 110 values, 10 of them 5.
        let mean = feed(&mut RunningMean::new(), &values);
        assert!((mean - 150.0 / 110.0).abs() < 1e-12);
        // Windows no longer than the new level's run have caught up completely.
        assert_eq!(feed(&mut SlidingMean::new(10), &values), 5.0);
        assert_eq!(feed(&mut SlidingMedian::new(10), &values), 5.0);
        assert_eq!(feed(&mut TrimmedMedian::new(10, 0.25), &values), 5.0);
        // A median follows once more than half its window is the new level.
        assert_eq!(feed(&mut SlidingMedian::new(19), &values), 5.0);
        assert_eq!(feed(&mut SlidingMedian::new(21), &values), 1.0);
        // Exponential smoothing closes the gap geometrically: 4 · (1 − g)^10 left.
        let exp = feed(&mut ExpSmoothing::new(0.3), &values);
        assert!((exp - (5.0 - 4.0 * 0.7f64.powi(10))).abs() < 1e-9, "{exp}");
    }

    #[test]
    fn spikes_move_means_not_medians() {
        // 1.0 with a spike of 100 every 10th value.
        let values: Vec<f64> = (0..100)
            .map(|i| if i % 10 == 9 { 100.0 } else { 1.0 })
            .collect();
        assert_eq!(feed(&mut SlidingMedian::new(10), &values), 1.0);
        assert_eq!(feed(&mut TrimmedMedian::new(10, 0.25), &values), 1.0);
        let mean = feed(&mut SlidingMean::new(10), &values);
        assert!((mean - 10.9).abs() < 1e-9, "{mean}");
    }

    #[test]
    fn noisy_input_means_converge() {
        // Deterministic ±1 noise around 10, period 2: long means sit on 10.
        let values: Vec<f64> = (0..200)
            .map(|i| if i % 2 == 0 { 9.0 } else { 11.0 })
            .collect();
        assert!((feed(&mut RunningMean::new(), &values) - 10.0).abs() < 1e-12);
        assert!((feed(&mut SlidingMean::new(20), &values) - 10.0).abs() < 1e-12);
        assert!((feed(&mut ExpSmoothing::new(0.05), &values) - 10.0).abs() < 0.06);
        assert_eq!(feed(&mut LastValue::new(), &values), 11.0);
    }

    #[test]
    fn periodic_input() {
        // A sine with period 20: a window of one period averages it out; last value tracks it.
        let values: Vec<f64> = (0..200)
            .map(|i| 5.0 + (i as f64 * std::f64::consts::TAU / 20.0).sin())
            .collect();
        assert!((feed(&mut SlidingMean::new(20), &values) - 5.0).abs() < 1e-9);
        assert_eq!(feed(&mut LastValue::new(), &values), values[199]);
        let median = feed(&mut SlidingMedian::new(20), &values);
        assert!((median - 5.0).abs() < 0.2, "{median}");
    }

    #[test]
    fn out_of_range_parameters_are_clamped() {
        assert_eq!(ExpSmoothing::new(7.0).name(), "exp(1.00)");
        assert_eq!(SlidingMean::new(0).name(), "mean[1]");
        let mut t = TrimmedMedian::new(4, 0.9);
        assert_eq!(feed(&mut t, &[1.0, 2.0, 3.0, 10.0]), 2.5);
    }
}
