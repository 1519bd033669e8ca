//! Compression on a slow WAN in the one-machine testbed, as root
//! (`crates/testbed/grids/compress.toml`: two private clusters whose front nodes' WAN links
//! `tc` limits to 100 Mbit/s; a1 reaches b1 through its NAT and b's relay).
//!
//! With `FERRY_COMPRESS=auto`, rank 0 sends 6 × 4 MiB of sin(x) samples and then 6 × 4 MiB of
//! random bytes to rank 1, which checks every byte. The link measures below 1 Gbit/s, so the
//! smooth data goes compressed (and shrinks); the random data's samples do not shrink, so it
//! goes raw: the counters of rank 0 (`ferry_core::Counters`) say so. With compression off
//! (the default) nothing is compressed. Both paths between the clusters are run: through the
//! relay (`FERRY_PUNCH=0`) and on a punched connection (when the pair punches: see `auto`).
//! Without root the test says so and passes.

mod common;
use common::{example, grid_file, grid_job, show};
use ferry_grid::Topology;
use ferry_testbed::Testbed;

/// What rank 0 printed for one kind of data: frames compressed, raw bytes, bytes sent, frames
/// sent raw after their sample, link rate readings, last link rate (Mbit/s).
fn counts(stdout: &str, kind: &str) -> [u64; 6] {
    let line = stdout
        .lines()
        .find_map(|l| {
            l.split_once(&format!("kind {kind}: compressed "))
                .map(|(_, r)| r)
        })
        .unwrap_or_else(|| panic!("no line for {kind} in:\n{stdout}"));
    // "F frames (R -> S bytes), raw after sample D; link rate read N times, last M Mbit/s"
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().expect("a number"))
        .collect();
    numbers
        .try_into()
        .unwrap_or_else(|_| panic!("not six numbers: {line}"))
}

fn run(prefix: &str, mode: &str, env: &[(&str, &str)]) -> String {
    let mut command = grid_job("compress.toml", prefix, 2);
    command
        .env("FERRY_COMPRESS", mode)
        .envs(env.iter().copied())
        .args(["--timeout", "60", "--show-paths"])
        .arg(example("squeeze"))
        .args(["check", "4194304", "6"]);
    let out = command.output().expect("ferry runs");
    assert!(
        out.status.success(),
        "FERRY_COMPRESS={mode} {env:?}: {}",
        show(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A run with `FERRY_COMPRESS=auto` under `env`, whose output says `path` (a line of the
/// path matrix) and whose link measured slow, tried at most three times; the last run's
/// output, which says `path` unless the path is only `hoped` for.
fn auto(prefix: &str, env: &[(&str, &str)], path: &str, hoped: bool) -> String {
    // A link counts as slow once a full socket let it measure its rate. On a machine so
    // loaded that the sender never fills its socket, the link is not what limits the job and
    // auto rightly sends raw: such a run is tried again. So is one whose pair did not punch:
    // on this grid's WAN (no delay) the pair's SYNs can cross the NATs in an order that
    // refuses them, and it then goes through the relay after the punch's deadline (the punch
    // test's grids delay the WAN so that every pair punches).
    let mut stdout = String::new();
    for attempt in 1..=3 {
        stdout = run(prefix, "auto", env);
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        eprintln!("FERRY_COMPRESS=auto {env:?}, attempt {attempt}, load {load}{stdout}");
        let [frames, _, _, declined, ..] = counts(&stdout, "smooth");
        let measured = frames + declined + counts(&stdout, "random")[3] > 0;
        if measured && stdout.contains(path) {
            return stdout;
        }
    }
    if hoped && !stdout.contains(path) {
        eprintln!("the pair never punched: its punched connection went untried here");
    } else {
        assert!(stdout.contains(path), "not {path:?}:\n{stdout}");
    }
    stdout
}

#[test]
fn auto_compresses_smooth_data_and_sends_random_data_raw() {
    if !ferry_testbed::is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let topology = Topology::load(&grid_file("compress.toml")).expect("grid file");
    let prefix = format!("fy{}z-", std::process::id());
    let _testbed = Testbed::up(&topology, &prefix).expect("testbed up");

    // Through b's relay, and on a connection punched through both NATs (given a second to
    // punch, for a loaded machine; hoped for, see `auto`): each link compresses on its own.
    for (env, path, hoped) in [
        (&[("FERRY_PUNCH", "0")][..], "r0   -    NR*", false),
        (
            &[("FERRY_PUNCH_TIMEOUT_MS", "1000")][..],
            "r0 <-> r1 punched in ",
            true,
        ),
    ] {
        let stdout = auto(&prefix, env, path, hoped);
        let [frames, raw, sent, ..] = counts(&stdout, "smooth");
        assert!(frames > 0, "sin(x) samples were not compressed:\n{stdout}");
        assert!(sent * 10 < raw * 9, "compressed {raw} bytes into {sent}");
        let [frames, _, _, declined, ..] = counts(&stdout, "random");
        assert_eq!(frames, 0, "random bytes were compressed:\n{stdout}");
        assert!(
            declined > 0,
            "random bytes were not even sampled:\n{stdout}"
        );
    }

    let stdout = run(&prefix, "off", &[]);
    assert_eq!(counts(&stdout, "smooth"), [0; 6], "{stdout}");
    assert_eq!(counts(&stdout, "random"), [0; 6], "{stdout}");
}
