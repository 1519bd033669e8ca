//! `ferry weather` end to end: a real 3-rank job measures the matrix, appends to its history,
//! replays it on the next run and exports a forecast the schedulers can read.

use std::path::Path;
use std::process::Command;

fn weather(dir: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["weather", "-n", "3", "--rounds", "2", "--bytes", "64K"])
        .arg("--history")
        .arg(dir.join("history.jsonl"))
        .args(extra)
        .env("HOME", dir)
        .output()
        .expect("ferry runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn measures_records_replays_and_exports() {
    let dir = std::env::temp_dir().join(format!("ferry-weather-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    let first = weather(&dir, &["--fresh"]);
    assert!(
        first.contains("(0 earlier measurements replayed)"),
        "{first}"
    );
    assert!(first.contains("round 2/2"), "{first}");
    // The table has one row per ordered pair.
    for pair in ["0->1", "0->2", "1->0", "1->2", "2->0", "2->1"] {
        assert!(first.contains(pair), "{pair} missing:\n{first}");
    }
    let history = ferry_weather::history::read(&dir.join("history.jsonl")).unwrap();
    assert_eq!(history.len(), 2);
    for record in &history {
        let s = &record.sample;
        assert_eq!(s.n, 3);
        for i in 0..3 {
            for j in 0..3 {
                let (l, b) = (s.latency[i * 3 + j], s.bandwidth[i * 3 + j]);
                if i == j {
                    assert!(l.is_nan() && b.is_nan());
                } else {
                    assert!(l > 0.0 && l < 1.0, "latency {i}->{j}: {l}");
                    assert!(b > 1e3, "bandwidth {i}->{j}: {b}");
                }
            }
        }
    }

    let export = dir.join("forecast.json");
    let second = weather(&dir, &["--export", export.to_str().unwrap()]);
    assert!(
        second.contains("(2 earlier measurements replayed)"),
        "{second}"
    );
    assert_eq!(
        ferry_weather::history::read(&dir.join("history.jsonl"))
            .unwrap()
            .len(),
        4
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).unwrap();
    assert_eq!(json["n"], 3);
    assert!(["ecef", "ttcc"].contains(&json["scheduler"].as_str().unwrap()));
    assert!(json["latency"][0][1].as_f64().unwrap() > 0.0);
    assert!(json["latency"][1][1].is_null());
    let forecast: ferry_weather::WeatherForecast =
        serde_json::from_value(json["forecast"].clone()).unwrap();
    use ferry_sched::hetero::{BcastScheduler, Ecef};
    let plan = Ecef.plan(&forecast, 0, 1 << 16);
    assert_eq!(plan.size(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}
