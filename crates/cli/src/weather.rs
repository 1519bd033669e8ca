//! `ferry weather`: starts a job of `ferry weather-rank …` ranks (the same arguments, passed on
//! verbatim) that measure the latency and bandwidth matrix round after round; rank 0 appends
//! each matrix to the history file, feeds the forecasters and prints the matrix, the forecast
//! and its error (ferry-weather does the measuring and forecasting).

use clap::Args;
use std::io::Write;

/// `println!` that ignores a closed stdout (`ferry weather | head`): the job goes on measuring
/// and recording instead of panicking on EPIPE.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
use ferry_launch::LaunchOptions;
use ferry_weather::history::{self, Record};
use ferry_weather::{
    choose_bcast_scheduler, median, Config, Forecast, Probe, Sample, WeatherForecast, WeatherMatrix,
};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `ferry weather` (and of the hidden `ferry weather-rank` each rank runs).
#[derive(Debug, Args)]
pub(crate) struct WeatherArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np", value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(2..))]
    np: u32,
    /// Transport between the ranks.
    #[arg(long, value_enum, default_value_t = crate::Transport::Shm)]
    transport: crate::Transport,
    /// Measurements of the whole matrix.
    #[arg(long, default_value_t = 5)]
    rounds: u64,
    /// Seconds between rounds (fractions allowed).
    #[arg(long, default_value_t = 0.0)]
    interval: f64,
    /// History file (JSON lines, appended) [default: ~/.cache/ferry/weather/history.jsonl].
    #[arg(long)]
    history: Option<PathBuf>,
    /// Start from an empty history instead of replaying the file's last 500 matching records
    /// (same host, transport and rank count) into the forecasters.
    #[arg(long)]
    fresh: bool,
    /// Bytes of each bandwidth transfer (K, M suffixes).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    bytes: usize,
    /// Latency round trips per pair (the median counts).
    #[arg(long, default_value_t = 20)]
    pingpongs: usize,
    /// Timed bandwidth transfers per pair (the median counts).
    #[arg(long, default_value_t = 4)]
    transfers: usize,
    /// Error window of the forecasters [default: FERRY_WEATHER_WINDOW or 10].
    #[arg(long)]
    window: Option<usize>,
    /// Median relative error above which a broadcast uses TTCC [default:
    /// FERRY_WEATHER_TTCC_THRESHOLD or 0.2].
    #[arg(long)]
    threshold: Option<f64>,
    /// Also write the final forecast (matrices, errors, scheduler choice) as JSON here.
    #[arg(long)]
    export: Option<PathBuf>,
    /// Print the full table after every round, not only after the last.
    #[arg(long)]
    every: bool,
}

fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        _ => (t, 0),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?} is not a size (e.g. 65536, 64K, 1M)"))
}

/// `ferry weather`: runs the job; the ranks do the rest.
pub(crate) fn weather_command(args: WeatherArgs) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ferry weather: cannot find the ferry binary: {e}");
            return 1;
        }
    };
    // Everything after `weather` goes to `weather-rank` unchanged.
    let argv: Vec<OsString> = std::env::args_os().collect();
    let rest = argv
        .iter()
        .position(|a| a == "weather")
        .map_or(&argv[argv.len()..], |i| &argv[i + 1..]);
    let mut options = LaunchOptions::new(args.np, exe);
    options.args = std::iter::once(OsString::from("weather-rank"))
        .chain(rest.iter().cloned())
        .collect();
    options
        .extra_env
        .push(("FERRY_TRANSPORT".into(), args.transport.as_str().into()));
    match ferry_launch::run(&options) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("ferry weather: {e}");
            e.exit_code()
        }
    }
}

/// At most this many matching records of the history are replayed into the forecasters.
const REPLAY: usize = 500;

fn default_history() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("ferry/weather/history.jsonl")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Body of each rank: measure, and on rank 0 record, forecast and print.
pub(crate) fn weather_rank(args: WeatherArgs) -> i32 {
    let world = match ferry_core::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("ferry weather: {e}");
            return 1;
        }
    };
    let n = world.size();
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ferry weather: {e}");
            return 2;
        }
    };
    let window = args.window.unwrap_or(config.window).max(1);
    let threshold = args.threshold.unwrap_or(config.ttcc_threshold);
    let transport = std::env::var("FERRY_TRANSPORT").unwrap_or_else(|_| "shm".into());
    let path = args.history.clone().unwrap_or_else(default_history);
    let host = hostname();
    let probe = Probe {
        large: args.bytes,
        pingpongs: args.pingpongs.max(1),
        transfers: args.transfers.max(1),
        ..Probe::default()
    };
    let mut weather = WeatherMatrix::new(n, window);
    if world.rank() == 0 {
        let replayed = if args.fresh {
            0
        } else {
            match history::read(&path) {
                Ok(records) => {
                    let matching: Vec<&Record> = records
                        .iter()
                        .filter(|r| r.host == host && r.transport == transport && r.sample.n == n)
                        .collect();
                    // The windows are short; the last REPLAY records are plenty of past.
                    let skip = matching.len().saturating_sub(REPLAY);
                    matching[skip..]
                        .iter()
                        .filter(|r| weather.update(&r.sample))
                        .count()
                }
                Err(e) => {
                    eprintln!("ferry weather: cannot read {}: {e}", path.display());
                    0
                }
            }
        };
        say!(
            "ferry weather: {n} ranks, {transport}, {}-byte transfers, history {} ({replayed} \
             earlier measurements replayed)",
            args.bytes,
            path.display()
        );
    }
    let interval = Duration::try_from_secs_f64(args.interval).unwrap_or_default();
    for round in 0..args.rounds {
        if round > 0 && !interval.is_zero() {
            std::thread::sleep(interval);
        }
        let sample = match ferry_weather::measure(&world, &probe) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("ferry weather: rank {}: {e}", world.rank());
                return 1;
            }
        };
        let Some(sample) = sample else { continue };
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let record = Record {
            time,
            round,
            transport: transport.clone(),
            host: host.clone(),
            sample,
        };
        if let Err(e) = history::append(&path, &record) {
            // Only rank 0 knows: end the job rather than leave the others waiting.
            world.abort(
                1,
                &format!("ferry weather: cannot append to {}: {e}", path.display()),
            );
        }
        weather.update(&record.sample);
        let Some(forecast) = weather.forecast() else {
            continue;
        };
        let errors = forecast.relative_time_errors(args.bytes);
        let med = median(&errors).unwrap_or(f64::NAN);
        let choice = choose_bcast_scheduler(&errors, threshold);
        say!(
            "round {}/{}: median latency {:.2} us, median bandwidth {:.0} MB/s, median relative \
             error {} -> bcast {}",
            round + 1,
            args.rounds,
            median(&record.sample.latency).unwrap_or(f64::NAN) * 1e6,
            median(&record.sample.bandwidth).unwrap_or(f64::NAN) / 1e6,
            percent(med),
            choice.name()
        );
        if args.every || round + 1 == args.rounds {
            print_table(&record.sample, &forecast);
            say!(
                "broadcast of {} bytes: median relative error of the forecast time {} {} \
                 threshold {} -> {}",
                args.bytes,
                percent(med),
                if med > threshold { ">" } else { "<=" },
                percent(threshold),
                choice.name()
            );
            if let Some(out) = &args.export {
                if let Err(e) = export(out, &forecast, args.bytes, threshold) {
                    world.abort(
                        1,
                        &format!("ferry weather: cannot write {}: {e}", out.display()),
                    );
                }
            }
        }
    }
    match world.finalize() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ferry weather: {e}");
            1
        }
    }
}

fn percent(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}%", 100.0 * x)
    } else {
        "unknown".into()
    }
}

/// Relative error of a forecast, or "-" while it is unknown.
fn rel(f: &Forecast) -> String {
    let e = f.relative_error();
    if e.is_finite() {
        format!("{:.1}%", 100.0 * e)
    } else {
        "-".into()
    }
}

fn print_table(sample: &Sample, forecast: &WeatherForecast) {
    let n = sample.n;
    say!(
        "{:>6} {:>10} {:>10} {:>7} {:<14} {:>10} {:>10} {:>7} {:<14}",
        "pair",
        "lat_us",
        "fc_lat_us",
        "err",
        "forecaster",
        "bw_MB/s",
        "fc_MB/s",
        "err",
        "forecaster"
    );
    for i in 0..n {
        for j in (0..n).filter(|&j| j != i) {
            let (Some(l), Some(b)) = (
                forecast.latency_forecast(i, j),
                forecast.bandwidth_forecast(i, j),
            ) else {
                continue;
            };
            say!(
                "{:>6} {:>10.2} {:>10.2} {:>7} {:<14} {:>10.0} {:>10.0} {:>7} {:<14}",
                format!("{i}->{j}"),
                sample.latency[i * n + j] * 1e6,
                l.value * 1e6,
                rel(l),
                l.forecaster,
                sample.bandwidth[i * n + j] / 1e6,
                b.value / 1e6,
                rel(b),
                b.forecaster
            );
        }
    }
}

/// The forecast for the schedulers: row-major latency (s), bandwidth (bytes/s) and relative
/// time error for `bytes`, the choice, and every entry's forecast with its error.
fn export(
    path: &std::path::Path,
    forecast: &WeatherForecast,
    bytes: usize,
    threshold: f64,
) -> std::io::Result<()> {
    use ferry_sched::hetero::CostModel;
    let n = forecast.n;
    let finite = |x: f64| x.is_finite().then_some(x);
    let cells = |f: &dyn Fn(usize, usize) -> Option<f64>| -> Vec<Vec<Option<f64>>> {
        (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| if i == j { None } else { f(i, j) })
                    .collect()
            })
            .collect()
    };
    let errors = forecast.relative_time_errors(bytes);
    let value = serde_json::json!({
        "n": n,
        "bytes": bytes,
        "latency": cells(&|i, j| finite(forecast.latency(i, j))),
        "bandwidth": cells(&|i, j| finite(forecast.bandwidth(i, j))),
        "relative_time_error": cells(&|i, j| finite(forecast.relative_time_error(i, j, bytes))),
        "median_relative_time_error": median(&errors).and_then(finite),
        "threshold": threshold,
        "scheduler": choose_bcast_scheduler(&errors, threshold).name(),
        "forecast": forecast,
    });
    let text = serde_json::to_string_pretty(&value).map_err(std::io::Error::other)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text + "\n")
}
