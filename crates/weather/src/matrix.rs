//! Matrices: one measurement of every ordered pair, a [`Series`] per entry, and the forecast in
//! the form the broadcast schedulers of `ferry_sched::hetero` read, with its error.

use crate::series::{Forecast, Series};
use ferry_sched::hetero::{BcastScheduler, CostMatrix, CostModel, Ecef, Ttcc};
use serde::{Deserialize, Serialize};

/// One measurement of a job: latency (s) and bandwidth (bytes/s) from every rank to every
/// other, row-major (`[from * n + to]`); the diagonal and pairs not measured are `NaN`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Ranks.
    pub n: usize,
    /// Seconds from `from` to `to` for a small message (half a round trip).
    #[serde(with = "nan_as_null")]
    pub latency: Vec<f64>,
    /// Bytes per second from `from` to `to` for a large message.
    #[serde(with = "nan_as_null")]
    pub bandwidth: Vec<f64>,
}

impl Sample {
    /// `n` ranks, nothing measured yet.
    pub fn empty(n: usize) -> Sample {
        Sample {
            n,
            latency: vec![f64::NAN; n * n],
            bandwidth: vec![f64::NAN; n * n],
        }
    }
}

/// JSON has no NaN or ∞: they are written as `null` and read back as `NaN`.
mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|x| x.is_finite().then_some(*x)))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let v: Vec<Option<f64>> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
    }
}

/// A [`Series`] for the latency and one for the bandwidth of every ordered pair.
#[derive(Debug)]
pub struct WeatherMatrix {
    n: usize,
    latency: Vec<Series>,
    bandwidth: Vec<Series>,
}

impl WeatherMatrix {
    /// `n` ranks, default forecasters, errors over the last `window` measurements.
    pub fn new(n: usize, window: usize) -> WeatherMatrix {
        let make = || (0..n * n).map(|_| Series::new(window)).collect();
        WeatherMatrix {
            n,
            latency: make(),
            bandwidth: make(),
        }
    }

    /// Ranks.
    pub fn size(&self) -> usize {
        self.n
    }

    /// Feeds every measured entry of `sample` to its series; a sample of another size is
    /// refused (returns false).
    pub fn update(&mut self, sample: &Sample) -> bool {
        if sample.n != self.n
            || sample.latency.len() != self.n * self.n
            || sample.bandwidth.len() != self.n * self.n
        {
            return false;
        }
        for (s, &x) in self.latency.iter_mut().zip(&sample.latency) {
            s.update(x);
        }
        for (s, &x) in self.bandwidth.iter_mut().zip(&sample.bandwidth) {
            s.update(x);
        }
        true
    }

    /// The series of the latency from `from` to `to`.
    pub fn latency(&self, from: usize, to: usize) -> &Series {
        &self.latency[from * self.n + to]
    }

    /// The series of the bandwidth from `from` to `to`.
    pub fn bandwidth(&self, from: usize, to: usize) -> &Series {
        &self.bandwidth[from * self.n + to]
    }

    /// Every entry's forecast; `None` when some pair has never been measured.
    pub fn forecast(&self) -> Option<WeatherForecast> {
        let mut latency = Vec::with_capacity(self.n * self.n);
        let mut bandwidth = Vec::with_capacity(self.n * self.n);
        for i in 0..self.n {
            for j in 0..self.n {
                if i == j {
                    latency.push(None);
                    bandwidth.push(None);
                } else {
                    latency.push(Some(self.latency(i, j).forecast()?));
                    bandwidth.push(Some(self.bandwidth(i, j).forecast()?));
                }
            }
        }
        Some(WeatherForecast {
            n: self.n,
            latency,
            bandwidth,
        })
    }
}

/// The forecast latency and bandwidth of every ordered pair, each with its error: a
/// [`CostModel`] for the schedulers, plus how far to trust it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeatherForecast {
    /// Ranks.
    pub n: usize,
    /// Latency forecasts (s), row-major; `None` on the diagonal.
    pub latency: Vec<Option<Forecast>>,
    /// Bandwidth forecasts (bytes/s), row-major; `None` on the diagonal.
    pub bandwidth: Vec<Option<Forecast>>,
}

impl WeatherForecast {
    fn entry(v: &[Option<Forecast>], n: usize, from: usize, to: usize) -> Option<&Forecast> {
        v.get(from * n + to).and_then(Option::as_ref)
    }

    /// The forecast latency from `from` to `to` with its error.
    pub fn latency_forecast(&self, from: usize, to: usize) -> Option<&Forecast> {
        Self::entry(&self.latency, self.n, from, to)
    }

    /// The forecast bandwidth from `from` to `to` with its error.
    pub fn bandwidth_forecast(&self, from: usize, to: usize) -> Option<&Forecast> {
        Self::entry(&self.bandwidth, self.n, from, to)
    }

    /// A dense copy for the schedulers (`ferry_sched::hetero`).
    pub fn cost_matrix(&self) -> CostMatrix {
        CostMatrix::from_model(self)
    }

    /// Relative error of the forecast time to send `bytes` from `from` to `to`
    /// (`t = L + bytes / B`), by first-order propagation of the two errors:
    /// `(ΔL + bytes · ΔB / B²) / t`. 0 to oneself; ∞ when an error is unknown.
    pub fn relative_time_error(&self, from: usize, to: usize, bytes: usize) -> f64 {
        if from == to {
            return 0.0;
        }
        let (Some(l), Some(b)) = (
            self.latency_forecast(from, to),
            self.bandwidth_forecast(from, to),
        ) else {
            return f64::INFINITY;
        };
        let m = bytes as f64;
        let time = l.value.max(0.0) + m / b.value;
        let error = l.mae
            + if m > 0.0 {
                m * b.mae / (b.value * b.value)
            } else {
                0.0
            };
        if time > 0.0 && time.is_finite() {
            error / time
        } else {
            f64::INFINITY
        }
    }

    /// [`relative_time_error`](Self::relative_time_error) of every ordered pair `i ≠ j`,
    /// row-major.
    pub fn relative_time_errors(&self, bytes: usize) -> Vec<f64> {
        let n = self.n;
        (0..n * n)
            .filter(|k| k / n != k % n)
            .map(|k| self.relative_time_error(k / n, k % n, bytes))
            .collect()
    }
}

impl CostModel for WeatherForecast {
    fn size(&self) -> usize {
        self.n
    }
    fn latency(&self, from: usize, to: usize) -> f64 {
        self.latency_forecast(from, to)
            .map_or(0.0, |f| f.value.max(0.0))
    }
    fn bandwidth(&self, from: usize, to: usize) -> f64 {
        // A non-positive forecast (it can happen with noise) would make the time negative or
        // infinite; the smallest positive bandwidth makes the link "very slow" instead.
        self.bandwidth_forecast(from, to)
            .map_or(f64::INFINITY, |f| f.value.max(f64::MIN_POSITIVE))
    }
}

/// The broadcast scheduler the runtime picks from the weather.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BcastChoice {
    /// The forecast is good: one ECEF tree.
    Ecef,
    /// The forecast is poor: TTCC's two trees, so a slow link costs less.
    Ttcc,
}

impl BcastChoice {
    /// The scheduler itself.
    pub fn scheduler(self) -> Box<dyn BcastScheduler + Send + Sync> {
        match self {
            BcastChoice::Ecef => Box::new(Ecef),
            BcastChoice::Ttcc => Box::new(Ttcc),
        }
    }

    /// `"ecef"` or `"ttcc"`, as `ferry_sched::hetero::scheduler` spells them.
    pub fn name(self) -> &'static str {
        match self {
            BcastChoice::Ecef => "ecef",
            BcastChoice::Ttcc => "ttcc",
        }
    }
}

/// Default of [`choose_bcast_scheduler`]'s threshold (also `FERRY_WEATHER_TTCC_THRESHOLD`).
pub const DEFAULT_TTCC_THRESHOLD: f64 = 0.2;

/// The rule the runtime will use to pick a heterogeneous broadcast: **TTCC when the median of
/// the relative forecast errors exceeds `threshold`, ECEF otherwise.**
///
/// `errors` are per-entry relative errors, e.g.
/// [`WeatherForecast::relative_time_errors`] for the message size at hand. ECEF's single tree
/// is the better plan when the matrix is right; TTCC pays a second tree's traffic to bound the
/// damage when it is wrong (Cha et al. report TTCC ahead of ECEF from σ ≈ 0.3). The median
/// keeps one erratic link from switching the whole job. No errors at all (a one-rank job)
/// gives ECEF; unknown (∞) errors count as large, so an unmeasured job gets TTCC.
///
/// ```
/// use ferry_weather::{choose_bcast_scheduler, BcastChoice, DEFAULT_TTCC_THRESHOLD};
/// let t = DEFAULT_TTCC_THRESHOLD;
/// assert_eq!(choose_bcast_scheduler(&[0.01, 0.05, 0.9], t), BcastChoice::Ecef);
/// assert_eq!(choose_bcast_scheduler(&[0.3, 0.4, 0.01], t), BcastChoice::Ttcc);
/// ```
pub fn choose_bcast_scheduler(errors: &[f64], threshold: f64) -> BcastChoice {
    match median(errors) {
        Some(m) if m > threshold => BcastChoice::Ttcc,
        _ => BcastChoice::Ecef,
    }
}

/// Median of the non-NaN values (∞ counts).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    // An odd count, or an even one with ∞ in the middle (∞ + x would be ∞ or NaN anyway).
    Some(
        if n % 2 == 1 || v[n / 2 - 1].is_infinite() || v[n / 2].is_infinite() {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_sched::hetero::CostModel;

    fn sample(n: usize, f: impl Fn(usize, usize) -> (f64, f64)) -> Sample {
        let mut s = Sample::empty(n);
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    (s.latency[i * n + j], s.bandwidth[i * n + j]) = f(i, j);
                }
            }
        }
        s
    }

    #[test]
    fn steady_matrix_forecasts_itself_with_no_error() {
        let mut w = WeatherMatrix::new(3, 10);
        assert!(w.forecast().is_none());
        let s = sample(3, |i, j| (1e-6 * (1 + i + j) as f64, 1e9 / (1 + i) as f64));
        for _ in 0..5 {
            assert!(w.update(&s));
        }
        let f = w.forecast().unwrap();
        assert_eq!(f.latency(0, 2), 3e-6);
        assert_eq!(f.bandwidth(2, 0), 1e9 / 3.0);
        assert_eq!(f.time(1, 1, 100), 0.0);
        let errors = f.relative_time_errors(1 << 20);
        assert_eq!(errors.len(), 6);
        assert!(errors.iter().all(|&e| e == 0.0));
        assert_eq!(
            choose_bcast_scheduler(&errors, DEFAULT_TTCC_THRESHOLD),
            BcastChoice::Ecef
        );
        let m = f.cost_matrix();
        assert_eq!(m.size(), 3);
        assert_eq!(m.latency(1, 0), 2e-6);
        // Sizes must match.
        assert!(!w.update(&Sample::empty(2)));
    }

    #[test]
    fn erratic_matrix_chooses_ttcc() {
        let mut w = WeatherMatrix::new(3, 10);
        for k in 0..30 {
            // Bandwidth jumps between 1 and 4 GB/s at random-looking times.
            let bw = if (k * 7 + 3) % 5 < 2 { 1e9 } else { 4e9 };
            w.update(&sample(3, |_, _| (1e-6, bw)));
        }
        let f = w.forecast().unwrap();
        let errors = f.relative_time_errors(1 << 20);
        assert!(median(&errors).unwrap() > 0.2, "{errors:?}");
        assert_eq!(
            choose_bcast_scheduler(&errors, DEFAULT_TTCC_THRESHOLD),
            BcastChoice::Ttcc
        );
        // A lenient threshold keeps ECEF.
        assert_eq!(choose_bcast_scheduler(&errors, 10.0), BcastChoice::Ecef);
    }

    #[test]
    fn unknown_errors_are_large() {
        let mut w = WeatherMatrix::new(2, 10);
        w.update(&sample(2, |_, _| (1e-6, 1e9)));
        let f = w.forecast().unwrap();
        assert!(f.relative_time_errors(8).iter().all(|e| e.is_infinite()));
        assert_eq!(
            choose_bcast_scheduler(&f.relative_time_errors(8), 0.2),
            BcastChoice::Ttcc
        );
        assert_eq!(choose_bcast_scheduler(&[], 0.2), BcastChoice::Ecef);
    }

    #[test]
    fn forecast_plans_a_broadcast() {
        // The slow 0 ↔ 2 link of hetero's example, measured: ECEF routes around it.
        let mut w = WeatherMatrix::new(3, 10);
        let s = sample(3, |i, j| {
            if i + j == 2 && i != 1 {
                (1e-3, 1e6)
            } else {
                (10e-6, 100e6)
            }
        });
        w.update(&s);
        w.update(&s);
        let f = w.forecast().unwrap();
        let plan = BcastChoice::Ecef.scheduler().plan(&f, 0, 1 << 20);
        assert_eq!(plan.parents[2], vec![1]);
    }

    #[test]
    fn samples_round_trip_through_json_with_nan() {
        let s = sample(2, |_, _| (1e-6, 1e9));
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("null"));
        let back: Sample = serde_json::from_str(&text).unwrap();
        assert_eq!(back.latency[1], 1e-6);
        assert!(back.latency[0].is_nan());
    }

    #[test]
    fn median_of_odd_even_and_infinite() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[1.0, f64::INFINITY]), Some(f64::INFINITY));
        assert_eq!(median(&[f64::NAN]), None);
    }
}
