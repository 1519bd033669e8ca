//! Log-log line charts as PNG, with tick labels in the units a reader expects (1 KiB, 20 µs,
//! 12 000), not in the raw numbers of the data (1024.0, 20.0, 12000.0).

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;
use std::sync::OnceLock;

/// One line of a chart: a label and (x, y) points.
pub struct Series<'a> {
    /// Legend text.
    pub label: &'a str,
    /// Points, x ascending.
    pub points: Vec<(f64, f64)>,
}

/// What an axis measures: it decides the ticks (powers of 4 for sizes, of 10 otherwise) and
/// how they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes: 1 B, 4 KiB, 16 MiB.
    Bytes,
    /// A time given in microseconds: 500 ns, 20 µs, 1.5 ms, 2 s.
    Micros,
    /// A plain quantity (a rate, a count): 0.5, 12, 12 000, 3M.
    Plain,
}

/// An axis: its caption (without the unit the ticks carry) and its unit.
#[derive(Debug, Clone, Copy)]
pub struct Axis<'a> {
    /// The caption, e.g. "message size".
    pub label: &'a str,
    /// What its values are.
    pub unit: Unit,
}

impl<'a> Axis<'a> {
    /// An axis of sizes in bytes.
    pub fn bytes(label: &'a str) -> Axis<'a> {
        Axis {
            label,
            unit: Unit::Bytes,
        }
    }

    /// An axis of times in microseconds.
    pub fn micros(label: &'a str) -> Axis<'a> {
        Axis {
            label,
            unit: Unit::Micros,
        }
    }

    /// An axis of plain numbers (the label names the unit, e.g. "bandwidth (MB/s)").
    pub fn plain(label: &'a str) -> Axis<'a> {
        Axis {
            label,
            unit: Unit::Plain,
        }
    }
}

/// A tick label: `value` in `unit`, scaled to a readable prefix.
pub fn tick_label(value: f64, unit: Unit) -> String {
    match unit {
        Unit::Bytes => {
            const NAMES: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
            let mut v = value;
            let mut i = 0;
            while v >= 1024.0 && i + 1 < NAMES.len() {
                v /= 1024.0;
                i += 1;
            }
            format!("{} {}", number(v), NAMES[i])
        }
        Unit::Micros => {
            let (v, name) = match value {
                v if v < 1.0 => (v * 1e3, "ns"),
                v if v < 1e3 => (v, "µs"),
                v if v < 1e6 => (v / 1e3, "ms"),
                v => (v / 1e6, "s"),
            };
            format!("{} {name}", number(v))
        }
        Unit::Plain if value >= 1e9 => format!("{}G", number(value / 1e9)),
        Unit::Plain if value >= 1e6 => format!("{}M", number(value / 1e6)),
        Unit::Plain => number(value),
    }
}

/// At most three significant digits, no trailing zeros, thousands apart by a space.
fn number(v: f64) -> String {
    let text = if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    match text.len() {
        4.. if !text.contains('.') => {
            let (head, tail) = text.split_at(text.len() - 3);
            format!("{head} {tail}")
        }
        _ => text,
    }
}

const FONTS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a system font for text in charts, once per process; without one, charts have no
/// text. Every chart of ferry goes through this.
pub fn load_font() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        FONTS
            .iter()
            .find_map(|path| std::fs::read(path).ok())
            .is_some_and(|bytes| {
                // plotters keeps a reference to the font for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
            })
    })
}

/// Draws `series` on log-log axes into a PNG at `path`.
pub fn plot(path: &Path, title: &str, x: Axis, y: Axis, series: &[Series]) -> Result<(), String> {
    let has_text = load_font();
    let points = || {
        series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
    };
    let (x0, x1) = points().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| {
        (a.min(*x), b.max(*x))
    });
    let (y0, y1) = points().fold((f64::MAX, f64::MIN), |(a, b), (_, y)| {
        (a.min(*y), b.max(*y))
    });
    if x0 > x1 || y0 > y1 {
        return Err("nothing to plot".into());
    }
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70);
    if has_text {
        builder.caption(title, ("sans-serif", 24));
    }
    let mut chart = builder
        .build_cartesian_2d(
            (x0 * 0.9..x1 * 1.1).log_scale().base(base(x.unit)),
            (y0 * 0.8..y1 * 1.25).log_scale().base(base(y.unit)),
        )
        .map_err(|e| e.to_string())?;
    let (x_unit, y_unit) = (x.unit, y.unit);
    let x_tick = move |v: &f64| tick_label(*v, x_unit);
    let y_tick = move |v: &f64| tick_label(*v, y_unit);
    let mut mesh = chart.configure_mesh();
    if has_text {
        mesh.x_desc(x.label)
            .y_desc(y.label)
            .x_label_formatter(&x_tick)
            .y_label_formatter(&y_tick);
    } else {
        mesh.disable_x_mesh()
            .disable_y_mesh()
            .x_labels(0)
            .y_labels(0);
    }
    mesh.draw().map_err(|e| e.to_string())?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .collect();
        let line = chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        if has_text {
            line.label(s.label).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 2, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    if has_text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

/// Ticks of a size axis fall on powers of 4 (1 KiB, 4 KiB, …), others on powers of 10.
fn base(unit: Unit) -> f64 {
    if unit == Unit::Bytes {
        4.0
    } else {
        10.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_read_in_human_units() {
        let cases = [
            (1.0, Unit::Bytes, "1 B"),
            (1024.0, Unit::Bytes, "1 KiB"),
            (1536.0, Unit::Bytes, "1.5 KiB"),
            (1048576.0, Unit::Bytes, "1 MiB"),
            (67108864.0, Unit::Bytes, "64 MiB"),
            (0.25, Unit::Micros, "250 ns"),
            (0.36, Unit::Micros, "360 ns"),
            (20.0, Unit::Micros, "20 µs"),
            (1500.0, Unit::Micros, "1.5 ms"),
            (2_000_000.0, Unit::Micros, "2 s"),
            (0.5, Unit::Plain, "0.5"),
            (12000.0, Unit::Plain, "12 000"),
            (1_000_000.0, Unit::Plain, "1M"),
            (2.5e9, Unit::Plain, "2.5G"),
        ];
        for (value, unit, want) in cases {
            assert_eq!(tick_label(value, unit), want, "{value} {unit:?}");
        }
    }

    #[test]
    fn a_chart_with_each_unit_is_drawn() {
        let dir = crate::record::Scratch::new("plot-test").unwrap();
        let path = dir.path().join("chart.png");
        let series = [Series {
            label: "ferry",
            points: vec![(1.0, 0.3), (1024.0, 0.7), (1048576.0, 80.0)],
        }];
        plot(
            &path,
            "test",
            Axis::bytes("message size"),
            Axis::micros("time"),
            &series,
        )
        .unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 1000);
    }
}
