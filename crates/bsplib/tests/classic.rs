//! BSPlib as the Oxford BSP toolset's users build and run it: `tests/classic/` is a classic
//! BSPlib program with a toolset Makefile (`CC= bspcc`, the toolset's CFLAGS) and a README
//! whose `bsprun -npes 3 ./sumsq` transcript this test replays (the numbers typed go to its
//! standard input, the other lines must be printed). Also `bsprun` across two node daemons,
//! fewer processes than started, too many asked for, and what `bspcc` does with each toolset
//! option.
//!
//! Needs `make`, a C compiler, and `ferry` and `libbsp.so` in this test's target directory
//! (`cargo build --release -p ferry-cli -p ferry-bsplib`); skips with a printed reason without
//! `make`. Jobs run one at a time (two cores).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// How the README's line of the time taken begins.
const TOOK: &str = "process 0: the dot product took ";

/// `target/<profile>`, from this test executable (`target/<profile>/deps/classic-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// The freshest `libbsp.so`: `cargo test` leaves the cdylib in `deps/` only.
fn libdir() -> PathBuf {
    let top = profile_dir();
    let age = |d: &Path| {
        std::fs::metadata(d.join("libbsp.so"))
            .and_then(|m| m.modified())
            .ok()
    };
    let deps = top.join("deps");
    match (age(&top), age(&deps)) {
        (Some(a), Some(b)) if a >= b => top,
        (_, Some(_)) => deps,
        (Some(_), None) => top,
        (None, None) => panic!(
            "libbsp.so is missing in {}: run `cargo build --release -p ferry-bsplib`",
            top.display()
        ),
    }
}

fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A command as a user runs it: `bspcc`, `bsprun` and `make` on PATH (crates/bsplib), the
/// library and `ferry` of this build, and no `LD_LIBRARY_PATH` from cargo (it would load a
/// stale libbsp.so instead of the program's runpath).
fn user_command(program: &str, dir: &Path) -> Command {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![here().to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    let mut cmd = Command::new("timeout");
    cmd.arg("120")
        .arg(program)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(dirs).expect("PATH"))
        .env("BSP_LIBDIR", libdir())
        .env("FERRY_BIN", profile_dir().join("ferry"))
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("FERRY_CC")
        .env_remove("FERRY_CXX");
    cmd
}

/// Runs `cmd` with `input` on its standard input.
fn run_with_input(mut cmd: Command, input: &str) -> Output {
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the command");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait for the command")
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `tests/classic` copied to a fresh directory and built there with plain `make`.
fn built(name: &str) -> Option<PathBuf> {
    if Command::new("make").arg("--version").output().is_err() {
        println!("skipped: `make` is not installed");
        return None;
    }
    let dir = profile_dir().join(format!("bsplib-classic-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test dir");
    for entry in std::fs::read_dir(here().join("tests/classic")).expect("tests/classic") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.join(path.file_name().expect("name"))).expect("copy");
    }
    let out = run_with_input(user_command("make", &dir), "");
    assert!(out.status.success(), "make failed\n{}", text(&out));
    assert!(
        dir.join("sumsq").exists(),
        "make built no sumsq\n{}",
        text(&out)
    );
    Some(dir)
}

/// The README's run: its `$ bsprun …` line, the numbers typed (lines of digits) and the lines
/// printed (the line of the time taken stands for any time).
struct Transcript {
    command: Vec<String>,
    typed: String,
    printed: Vec<String>,
}

fn readme_run(dir: &Path) -> Transcript {
    let readme = std::fs::read_to_string(dir.join("README")).expect("README");
    let mut lines = readme
        .lines()
        .skip_while(|l| !l.trim().starts_with("$ bsprun"));
    let command = lines
        .next()
        .expect("a `$ bsprun` line in the README")
        .trim()
        .trim_start_matches("$ ")
        .split_whitespace()
        .map(String::from)
        .collect();
    let (mut typed, mut printed) = (String::new(), Vec::new());
    for line in lines.take_while(|l| l.starts_with("    ")) {
        let line = line.trim();
        if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) {
            typed += line;
            typed.push('\n');
        } else {
            printed.push(line.to_string());
        }
    }
    Transcript {
        command,
        typed,
        printed,
    }
}

/// Each printed line is a line of `stdout` (the time is any), each once.
#[track_caller]
fn prints_all(stdout: &str, printed: &[String], out: &Output) {
    let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
    for want in printed {
        let seen = if let Some(head) = want.strip_prefix(TOOK) {
            assert!(head.ends_with(" s"), "the README's time line: {want}");
            lines
                .iter()
                .filter(|l| l.starts_with(TOOK) && l.ends_with(" s"))
                .count()
        } else {
            lines.iter().filter(|l| *l == want).count()
        };
        assert_eq!(seen, 1, "`{want}` printed {seen} times\n{}", text(out));
    }
}

#[test]
fn the_readme_commands_build_and_run_the_classic_program() {
    let Some(dir) = built("readme") else { return };
    let run = readme_run(&dir);
    assert_eq!(
        run.command[..3],
        ["bsprun", "-npes", "3"],
        "{:?}",
        run.command
    );
    let mut cmd = user_command(&run.command[0], &dir);
    cmd.args(&run.command[1..]);
    let out = run_with_input(cmd, &run.typed);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    prints_all(&stdout, &run.printed, &out);
    // Two of the three take part: the third prints nothing and ends cleanly.
    assert_eq!(stdout.matches("^2 = 385").count(), 2, "{}", text(&out));
    assert!(!stdout.contains("process 2"), "{}", text(&out));
}

#[test]
fn all_processes_or_too_many() {
    let Some(dir) = built("sizes") else { return };
    let mut cmd = user_command("bsprun", &dir);
    cmd.args(["-npes", "3", "./sumsq"]);
    let out = run_with_input(cmd, "3\n1000\n");
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for s in 0..3 {
        let want = format!("process {s}: 1^2 + ... + 1000^2 = 333833500");
        assert!(stdout.lines().any(|l| l == want), "{want}\n{}", text(&out));
    }
    assert!(stdout.contains("process 0: 3 messages count the 1000 elements"));
    // One process started, asked for more: the program's own refusal, and its exit status.
    let mut cmd = user_command("bsprun", &dir);
    cmd.args(["-npes=1", "./sumsq"]);
    let out = run_with_input(cmd, "2\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && stdout.contains("1 processes started"),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains("Only 1 processes were started."),
        "{}",
        text(&out)
    );
}

/// Across hosts: two node daemons on this machine (two of its names, as hydra's fork
/// launcher), processes dealt out in turn (0 and 2 on the first, 1 on the second), TCP between
/// them; process 0's standard input comes through its daemon, the two that compute are on two
/// hosts, and process 2, not asked for, ends cleanly.
#[test]
fn bsprun_takes_ferry_runs_host_options() {
    let Some(dir) = built("hosts") else { return };
    let this_host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("the host name")
        .trim()
        .to_string();
    let hosts = format!("localhost:2,{this_host}:1");
    let mut cmd = user_command("bsprun", &dir);
    cmd.args(["-npes", "3", "-v", "--launcher", "local", "--hosts", &hosts])
        .args(["--map-by", "node", "--transport", "tcp", "./sumsq"]);
    let out = run_with_input(cmd, "2\n10\n");
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("3 processes started"), "{}", text(&out));
    assert_eq!(stdout.matches("^2 = 385").count(), 2, "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(" run -n 3 --launcher local --hosts"),
        "-v prints the ferry run command\n{}",
        text(&out)
    );
}

/// `bspcc` with toolset options: the mapped ones reach the program as the defaults of their
/// FERRY_BSP_* settings (the environment wins), strict warnings pass on the settings file, in
/// C and in C++, and bad values are refused naming the option.
#[test]
fn bspcc_maps_the_toolset_options() {
    let dir = profile_dir().join("bsplib-classic-bspcc");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test dir");
    let src = here().join("tests/c/settings.c");
    let toolset = [
        "-flibrary-level",
        "0",
        "-bspfifo",
        "010",
        "-fnocombine-puts",
        "-fcombine-puts-buffer",
        "4K,1M,1K",
        "-fcontention-resolve",
        "0",
        "-fcheck-syncs",
        "-prof",
    ];
    for (driver, strict) in [("bspcc", "-std=c99"), ("bspc++", "-std=c++11")] {
        let mut cmd = user_command(driver, &dir);
        cmd.args([strict, "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"])
            .args(toolset)
            .arg(&src)
            .args(["-o", driver, "-lm"]);
        let out = run_with_input(cmd, "");
        assert!(out.status.success(), "{driver}\n{}", text(&out));
        let prog = dir.join(driver);
        let out = Command::new(&prog).env_remove("LD_LIBRARY_PATH").output();
        let out = out.expect("run the program");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("COMBINE=0 EARLY=4096 FIFO=10 REORDER=0") && stdout.contains("ok"),
            "{driver}\n{}",
            text(&out)
        );
        let out = Command::new(&prog)
            .env_remove("LD_LIBRARY_PATH")
            .env("FERRY_BSP_FIFO", "7")
            .output()
            .expect("run the program");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(" FIFO=7 "), "{driver}\n{}", text(&out));
    }
    // Without toolset options nothing is set; with -c nothing is linked.
    let mut cmd = user_command("bspcc", &dir);
    cmd.arg(&src).args(["-o", "plain"]);
    assert!(run_with_input(cmd, "").status.success());
    let out = Command::new(dir.join("plain"))
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run the program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("COMBINE=unset EARLY=unset FIFO=unset REORDER=unset"),
        "{}",
        text(&out)
    );
    let mut cmd = user_command("bspcc", &dir);
    cmd.args(["-show", "-c", "-bspfifo", "5", "x.c"]);
    let out = run_with_input(cmd, "");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("-DFERRY_BSPCC_FIFO=5 -c x.c") && !shown.contains("-lbsp"),
        "{}",
        text(&out)
    );
    // -v names what each option does, on standard error.
    let mut cmd = user_command("bspcc", &dir);
    cmd.args([
        "-v",
        "-show",
        "-flibrary-level",
        "2",
        "-stat",
        "-bspbuffer",
        "64K",
        "x.c",
    ]);
    let out = run_with_input(cmd, "");
    let notes = String::from_utf8_lossy(&out.stderr);
    assert!(
        notes.contains("bspcc: -flibrary-level 2: ")
            && notes.contains("bspcc: -stat: ignored")
            && notes.contains("bspcc: -bspbuffer 64K: ignored"),
        "{}",
        text(&out)
    );
    for (args, names) in [
        (
            &["-bspfifo", "many"][..],
            "-bspfifo many: expected a whole number",
        ),
        (
            &["-flibrary-level", "3"],
            "-flibrary-level 3: expected a whole number from 0 to 2",
        ),
        (
            &["-fcombine-puts-buffer", "2G"],
            "-fcombine-puts-buffer 2G: expected a size",
        ),
        (
            &["-fcombine-puts-buffer", "1K,2K,3K,4K"],
            "expected SIZE[,MAX[,MIN]]",
        ),
        (&["x.c", "-bspfifo"], "-bspfifo needs a value"),
        (
            &["-bspbuffer", "lots"],
            "-bspbuffer lots: expected a whole number",
        ),
    ] {
        let mut cmd = user_command("bspcc", &dir);
        cmd.args(args);
        let out = run_with_input(cmd, "");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(names),
            "{args:?}\n{}",
            text(&out)
        );
    }
}
