//! The selector on inputs designed for one forecaster family, and properties of all of them.

use ferry_weather::forecast::{default_forecasters, Forecaster};
use ferry_weather::{Metric, Series};
use proptest::prelude::*;

/// xorshift64* and Box–Muller: deterministic noise without a dependency.
struct Noise(u64);

impl Noise {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

fn run(values: impl IntoIterator<Item = f64>, window: usize, metric: Metric) -> Series {
    let mut s = Series::new(window).with_metric(metric);
    for v in values {
        s.update(v);
    }
    s
}

fn error_of(s: &Series, name: &str) -> f64 {
    s.all()
        .into_iter()
        .find(|f| f.forecaster == name)
        .unwrap()
        .mae
}

#[test]
fn random_walk_picks_last_value() {
    let mut noise = Noise(0x5eed_0001);
    let mut x = 100.0;
    let values: Vec<f64> = (0..400)
        .map(|_| {
            x += 5.0 * noise.normal();
            x
        })
        .collect();
    let s = run(values.iter().copied(), 50, Metric::Mse);
    let f = s.forecast().unwrap();
    assert_eq!(f.forecaster, "last", "{:#?}", s.all());
    assert_eq!(f.value, values[399]);
}

#[test]
fn stationary_noise_picks_a_long_mean() {
    let mut noise = Noise(0x5eed_0002);
    // Short windows of errors are themselves noisy (any averaging forecaster may lead over
    // 50 errors); over 400 the long memories are ahead clearly.
    let s = run((0..1000).map(|_| 100.0 + noise.normal()), 400, Metric::Mse);
    let f = s.forecast().unwrap();
    let long = [
        "mean",
        "exp(0.05)",
        "exp(0.10)",
        "mean[20]",
        "mean[50]",
        "trim[30,0.25]",
        "median[50]",
    ];
    assert!(long.contains(&f.forecaster.as_str()), "{f:?}");
    assert!((f.value - 100.0).abs() < 0.5, "{f:?}");
    assert!(f.mae < 0.8 * error_of(&s, "last"), "{:#?}", s.all());
}

#[test]
fn spikes_pick_a_median() {
    let mut noise = Noise(0x5eed_0003);
    let values = (0..500).map(|_| {
        let spike = if noise.uniform() < 0.1 { 1000.0 } else { 0.0 };
        10.0 + 0.1 * noise.normal() + spike
    });
    let s = run(values, 50, Metric::Mae);
    let f = s.forecast().unwrap();
    assert!(
        f.forecaster.starts_with("median") || f.forecaster.starts_with("trim"),
        "{f:?}"
    );
    assert!((f.value - 10.0).abs() < 0.2, "{f:?}");
}

#[test]
fn level_shifts_pick_last_value() {
    // Clean plateaus of 30 values: only the last value is right right after each shift.
    let s = run(
        (0..300).map(|i| [3.0, 8.0, 1.0][(i / 30) % 3]),
        100,
        Metric::Mae,
    );
    let f = s.forecast().unwrap();
    assert_eq!(f.forecaster, "last");
    assert_eq!(f.value, 3.0);
}

/// Knows the sequence in advance.
#[derive(Debug)]
struct Oracle {
    next: usize,
}

impl Forecaster for Oracle {
    fn name(&self) -> &str {
        "oracle"
    }
    fn update(&mut self, _: f64) {
        self.next += 1;
    }
    fn forecast(&self) -> Option<f64> {
        Some((self.next as f64).sin())
    }
}

#[test]
fn a_perfect_forecaster_is_chosen_with_zero_error() {
    let mut all = default_forecasters();
    all.push(Box::new(Oracle { next: 0 }));
    let mut s = Series::with_forecasters(all, 10);
    for i in 0..40 {
        s.update((i as f64).sin());
    }
    let f = s.forecast().unwrap();
    assert_eq!(f.forecaster, "oracle");
    assert_eq!((f.mae, f.mse, f.samples), (0.0, 0.0, 10));
    assert_eq!(f.value, 40f64.sin());
}

#[test]
fn first_measurement_has_unknown_error() {
    let mut s = Series::new(10);
    assert!(s.forecast().is_none());
    s.update(4.0);
    let f = s.forecast().unwrap();
    assert_eq!(f.value, 4.0);
    assert!(f.mae.is_infinite() && f.relative_error().is_infinite());
    assert_eq!(f.samples, 0);
    s.update(f64::NAN); // a failed measurement is skipped
    assert_eq!(s.len(), 1);
}

proptest! {
    #[test]
    fn averaging_forecasts_stay_within_the_data(
        values in prop::collection::vec(-1e6f64..1e6, 1..120)
    ) {
        let (lo, hi) = values.iter().fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        for mut f in default_forecasters() {
            for &v in &values {
                f.update(v);
            }
            let got = f.forecast().unwrap();
            let slack = 1e-9 * (hi.abs() + lo.abs() + 1.0);
            prop_assert!(got >= lo - slack && got <= hi + slack, "{} gave {got}", f.name());
        }
    }

    #[test]
    fn the_chosen_forecaster_has_the_lowest_recent_error(
        values in prop::collection::vec(-1e3f64..1e3, 2..150),
        window in 1usize..30,
        mse in any::<bool>(),
    ) {
        let metric = if mse { Metric::Mse } else { Metric::Mae };
        let s = run(values.iter().copied(), window, metric);
        let f = s.forecast().unwrap();
        let score = |g: &ferry_weather::Forecast| if mse { g.mse } else { g.mae };
        let best = s.all().iter().map(score).fold(f64::INFINITY, f64::min);
        prop_assert_eq!(score(&f), best);
        prop_assert!(f.mae >= 0.0 && f.mse >= 0.0);
        prop_assert!(f.samples <= window);
    }

    #[test]
    fn a_constant_is_forecast_with_no_error(c in -1e6f64..1e6, n in 2usize..60) {
        let s = run(std::iter::repeat_n(c, n), 10, Metric::Mae);
        let f = s.forecast().unwrap();
        prop_assert!((f.value - c).abs() <= 1e-9 * c.abs().max(1.0));
        prop_assert_eq!(f.mae, 0.0);
    }
}

#[test]
fn unknown_errors_survive_json() {
    let mut s = Series::new(10);
    s.update(3.0);
    let f = s.forecast().unwrap();
    let text = serde_json::to_string(&f).unwrap();
    assert!(text.contains("\"mae\":null"), "{text}");
    let back: ferry_weather::Forecast = serde_json::from_str(&text).unwrap();
    assert!(back.mae.is_infinite() && back.mse.is_infinite());
    assert_eq!(back.value, 3.0);
}
