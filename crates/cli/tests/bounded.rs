//! A bounded, responsive launcher: an absurd rank count is refused at once, a signal or the
//! timeout ends a job that is still starting, ended ranks are reaped while others start, a
//! killed rank is the one reported however its peers notice, and a launcher killed with
//! SIGKILL leaves no shared-memory files behind.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn ferry() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .env_remove("MPIEXEC_TIMEOUT")
        .env_remove("FERRY_OVERSUBSCRIBE")
        .stdin(Stdio::null());
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A marker unique to this test run, put in the launcher's environment: its ranks inherit it,
/// so that what is left of a job can be found in `/proc`.
fn marker(name: &str) -> String {
    format!("{name}-{}-{:?}", std::process::id(), Instant::now())
}

/// Processes (other than `except`) whose environment holds `FERRY_TEST_MARKER=marker`.
fn processes_with(marker: &str, except: Option<u32>) -> Vec<u32> {
    let needle = format!("FERRY_TEST_MARKER={marker}");
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if Some(pid) == except || pid == std::process::id() {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == needle.as_bytes())
        {
            found.push(pid);
        }
    }
    found
}

/// Waits up to `limit` until no process carries `marker`; returns those still there.
fn wait_until_gone(marker: &str, limit: Duration) -> Vec<u32> {
    let until = Instant::now() + limit;
    loop {
        let left = processes_with(marker, None);
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Zombie children of `parent` right now.
fn zombie_children(parent: u32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // "pid (comm) state ppid …": comm may hold spaces, so split after its ')'.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
            state == Some("Z") && ppid == Some(parent)
        })
        .count()
}

/// The job's shared-memory files (`/dev/shm/ferry-<job>-*`).
fn shm_files(job: &str) -> Vec<String> {
    let prefix = format!("ferry-{job}-");
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// The cores this process may run on (what the launcher's limit counts).
fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn kill(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Waits for `child` at most `limit`; kills it (and fails) if it takes longer.
fn wait_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let until = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ferry run did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_absurd_rank_count_is_refused_at_once_naming_the_override() {
    let start = Instant::now();
    let out = ferry()
        .args(["run", "-n", "100000000", "true"])
        .output()
        .expect("ferry runs");
    let took = start.elapsed();
    let stderr = text(&out.stderr);
    assert!(took < Duration::from_secs(3), "took {took:?}: {stderr}");
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("100000000"), "{stderr}");

    // Above the per-core limit: the message names the flag and the variable that lift it.
    let over = (cores() * 64 + 1).to_string();
    let start = Instant::now();
    let out = ferry()
        .args(["run", "-n", &over, "true"])
        .output()
        .expect("ferry runs");
    let stderr = text(&out.stderr);
    assert!(start.elapsed() < Duration::from_secs(3), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&over), "{stderr}");
    assert!(stderr.contains("--oversubscribe"), "{stderr}");
    assert!(stderr.contains("FERRY_OVERSUBSCRIBE=1"), "{stderr}");
    assert_eq!(text(&out.stdout), "");

    // Either override lets the same job run.
    let out = ferry()
        .args(["run", "--oversubscribe", "-n", &over, "true"])
        .output()
        .expect("ferry runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = ferry()
        .env("FERRY_OVERSUBSCRIBE", "1")
        .args(["run", "-n", &over, "true"])
        .output()
        .expect("ferry runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // A value that is neither yes nor no is refused, naming it.
    let out = ferry()
        .env("FERRY_OVERSUBSCRIBE", "maybe")
        .args(["run", "true"])
        .output()
        .expect("ferry runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("FERRY_OVERSUBSCRIBE"));
}

/// Starts 1000 sleeping ranks with the limit lifted and returns the launcher once some of
/// them run (well before all have started).
fn start_big_job(marker: &str, extra: &[&str]) -> Child {
    let mut command = ferry();
    command
        .env("FERRY_TEST_MARKER", marker)
        .env("FERRY_OVERSUBSCRIBE", "1")
        .arg("run")
        .args(extra)
        .args([
            "-n",
            "1000",
            "sh",
            "-c",
            r#"touch /dev/shm/ferry-$FERRY_JOB_ID-r$FERRY_RANK; sleep 120; true"#,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("ferry runs");
    let until = Instant::now() + Duration::from_secs(20);
    while processes_with(marker, Some(child.id())).len() < 20 {
        assert!(Instant::now() < until, "the ranks did not start");
        assert!(child.try_wait().expect("try_wait").is_none(), "ferry ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The job id from a rank's environment.
fn job_of(marker: &str, launcher: u32) -> String {
    for pid in processes_with(marker, Some(launcher)) {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        for var in environ.split(|&b| b == 0) {
            if let Some(id) = var.strip_prefix(b"FERRY_JOB_ID=") {
                return text(id);
            }
        }
    }
    panic!("no rank of the job shows its id");
}

/// `pid: command line` of each process, for assertion messages.
fn describe(pids: &[u32]) -> Vec<String> {
    pids.iter()
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .unwrap_or("?")
                .to_string();
            format!(
                "{pid} (parent {ppid}): {}",
                text(&cmdline).replace('\0', " ")
            )
        })
        .collect()
}

fn assert_nothing_left(marker: &str, job: &str) {
    let left = wait_until_gone(marker, Duration::from_secs(3));
    assert!(left.is_empty(), "processes left: {:?}", describe(&left));
    let files = shm_files(job);
    assert!(
        files.is_empty(),
        "{} shm files left: {files:?}",
        files.len()
    );
}

#[test]
fn signals_during_start_up_end_the_job_promptly_leaving_nothing() {
    for (signal, code) in [("TERM", 143), ("INT", 130)] {
        let marker = marker(signal);
        let mut child = start_big_job(&marker, &[]);
        let job = job_of(&marker, child.id());
        let start = Instant::now();
        kill(child.id(), signal);
        let status = wait_within(&mut child, Duration::from_secs(15));
        let took = start.elapsed();
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        assert_eq!(status.code(), Some(code), "SIG{signal}: {stderr}");
        assert!(took < Duration::from_secs(5), "SIG{signal}: took {took:?}");
        assert!(stderr.contains("received signal"), "{stderr}");
        assert_nothing_left(&marker, &job);
    }
}

#[test]
fn the_timeout_acts_during_start_up() {
    let marker = marker("timeout");
    let start = Instant::now();
    let mut child = start_big_job(&marker, &["--timeout", "1.5"]);
    let job = job_of(&marker, child.id());
    let status = wait_within(&mut child, Duration::from_secs(20));
    let took = start.elapsed();
    assert_eq!(status.code(), Some(124));
    assert!(took < Duration::from_secs(6), "took {took:?}");
    assert_nothing_left(&marker, &job);
}

#[test]
fn ended_ranks_are_reaped_while_others_start() {
    let mut child = ferry()
        .env("FERRY_OVERSUBSCRIBE", "1")
        .args(["run", "-n", "1000", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ferry runs");
    let mut most = 0;
    while child.try_wait().expect("try_wait").is_none() {
        most = most.max(zombie_children(child.id()));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(child.wait().expect("wait").success());
    assert!(most < 200, "{most} ended ranks were left unreaped at once");
}

#[test]
fn a_launcher_killed_during_set_up_leaves_no_shared_memory() {
    let marker = marker("kill9");
    let mut child = start_big_job(&marker, &[]);
    let job = job_of(&marker, child.id());
    assert!(!shm_files(&job).is_empty(), "the ranks made no files");
    kill(child.id(), "KILL");
    let _ = child.wait();
    let until = Instant::now() + Duration::from_secs(5);
    while !shm_files(&job).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_nothing_left(&marker, &job);
}

/// Runs `ferry run ARGS` and returns its output; it must end within `limit`.
fn run(args: &[&str], envs: &[(&str, &str)], limit: Duration) -> Output {
    let mut command = ferry();
    command.arg("run").args(args).envs(envs.iter().copied());
    let start = Instant::now();
    let out = command.output().expect("ferry runs");
    assert!(start.elapsed() < limit, "ferry run {args:?} took too long");
    out
}

#[test]
fn a_killed_rank_is_reported_before_the_peers_that_lost_it() {
    let check = common::example("check");
    let check = check.to_str().expect("UTF-8 path");
    // Its peers see the connection drop at once; the kill is reported every time anyway.
    for transport in ["tcp", "shm"] {
        for run_no in 0..6 {
            let out = run(
                &["-n", "4", check, "die"],
                &[("FERRY_TRANSPORT", transport)],
                Duration::from_secs(10),
            );
            let stderr = text(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(137),
                "{transport} run {run_no}: {}",
                common::show(&out)
            );
            assert!(
                stderr.contains("ferry run: rank 1 (host ")
                    && stderr.contains("was killed by signal 9 (SIGKILL)"),
                "{transport} run {run_no}: {stderr}"
            );
        }
    }
}

#[test]
fn a_grid_launcher_killed_during_set_up_leaves_no_relay_key_folder() {
    if !ferry_testbed::is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let topology = ferry_grid::Topology::load(&common::grid_file("three.toml")).expect("grid file");
    let prefix = format!("fy{}k-", std::process::id());
    let _testbed = ferry_testbed::Testbed::up(&topology, &prefix).expect("testbed up");
    let marker = marker("grid");
    let mut child = ferry()
        .env("FERRY_TEST_MARKER", &marker)
        .args(["run", "--grid"])
        .arg(common::grid_file("three.toml"))
        .args([
            "--testbed-prefix",
            &prefix,
            "-n",
            "6",
            "sh",
            "-c",
            "sleep 60; true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ferry runs");
    // The relay-key folder is named after the launcher's pid.
    let folder_prefix = format!("ferry-relay-{}-", child.id());
    let folders = || -> Vec<String> {
        std::fs::read_dir(std::env::temp_dir())
            .map(|dir| {
                dir.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| n.starts_with(&folder_prefix))
                    .collect()
            })
            .unwrap_or_default()
    };
    let until = Instant::now() + Duration::from_secs(20);
    while processes_with(&marker, Some(child.id())).len() < 6 {
        assert!(Instant::now() < until, "the grid job did not start");
        assert!(child.try_wait().expect("try_wait").is_none(), "ferry ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(folders().len(), 1, "no relay-key folder while the job runs");
    eprintln!(
        "before: {:?}",
        describe(&processes_with(&marker, Some(child.id())))
    );
    kill(child.id(), "KILL");
    let _ = child.wait();
    let until = Instant::now() + Duration::from_secs(5);
    while !folders().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(folders(), Vec::<String>::new(), "relay-key folder left");
    let left = wait_until_gone(&marker, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left: {:?}", describe(&left));
}

/// Threads of each process whose parent is `parent` and whose command line is `… node` (the
/// node daemons `ferry run --launcher local` starts), by pid.
fn node_daemon_threads(parent: u32) -> Vec<(u32, usize)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // The parent is the second field after the command in parentheses.
            let after = stat.rsplit_once(") ")?.1;
            let ppid: u32 = after.split(' ').nth(1)?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let is_node = cmdline.split(|&b| b == 0).nth(1) == Some(&b"node"[..]);
            if ppid != parent || !is_node {
                return None;
            }
            let threads = std::fs::read_dir(entry.path().join("task")).ok()?.count();
            Some((pid, threads))
        })
        .collect()
}

#[test]
fn a_node_daemon_serves_its_ranks_bootstrap_without_a_thread_per_rank() {
    let check = common::example("check");
    let check = check.to_str().expect("UTF-8 path");
    let this_host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("the host name")
        .trim()
        .to_string();
    // Two node daemons on this machine (two names of it), 48 ranks each, all in barriers
    // until the end: every rank holds its bootstrap connection to its daemon meanwhile.
    let hosts = format!("localhost:48,{this_host}:48");
    let mut launcher = ferry()
        .env("FERRY_OVERSUBSCRIBE", "1")
        .args(["run", "--launcher", "local", "--hosts", &hosts, "-n", "96"])
        .args([check, "barrier", "20"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferry runs");
    let mut most = 0;
    let mut seen = 0;
    let until = Instant::now() + Duration::from_secs(120);
    while launcher.try_wait().expect("try_wait").is_none() {
        if Instant::now() > until {
            let _ = launcher.kill();
            panic!("the job did not end within 120 s");
        }
        for (_, threads) in node_daemon_threads(launcher.id()) {
            seen += 1;
            most = most.max(threads);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = launcher.wait_with_output().expect("ferry ends");
    assert_eq!(out.status.code(), Some(0), "{}", common::show(&out));
    assert!(seen > 0, "no node daemon was seen");
    // Before: one thread per rank (54 for 48 ranks); now a handful whatever the rank count.
    assert!(most <= 12, "a node daemon ran {most} threads for 48 ranks");
}
