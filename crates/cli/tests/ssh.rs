//! One job on three hosts through real ssh, as root: `ferry testbed up --ssh` makes three
//! namespace hosts that are their own machines (hostname, /tmp, /dev/shm, boot_id, sshd), and
//! `ferry run --hosts h1:2,h2:2,h3:2` runs from inside h1 as a user logged in there would,
//! with `FERRY_SSH` naming the testbed's ssh config.
//!
//! - the two ranks of a host talk over shared memory, other pairs over TCP (`check routes`);
//! - every pair exchanges checked messages of 0 B … 2 MiB, and the collectives match the
//!   sequential reference, across the hosts;
//! - a rank that exits 3 on h2 ends the job with 3, naming the rank and h2;
//! - a node daemon killed with -9 ends the job in under 5 s, naming its host;
//! - with `FERRY_TREE_FANOUT=1` the daemons start as a tree (h2's starts h3's): the same job
//!   runs, and a child daemon killed with -9 is named by its host;
//! - SIGINT to the launcher ends every rank on every host;
//! - MPICH's hydra (`mpiexec.hydra -launcher ssh`) starts the same ranks over PMI across the
//!   hosts, and they find shared memory and TCP as under `ferry run`;
//! - a host whose remote shell never answers is named after the connect timeout, and a host
//!   name that does not resolve and a program missing on the hosts are named.
//!
//! And a grid on its real machines (`ferry run --grid three.toml --launcher ssh` from p1, the
//! testbed's grid of two private clusters and a public one, every host and front node with
//! its sshd): `ferry relay` started over ssh on both front nodes with the relay key on its
//! standard input, private hosts reached through their front (ProxyJump), the expected paths,
//! all pairs and the collectives on 6 and 12 ranks (two per host: shared memory there), and
//! no relay left once the job is over.
//!
//! One testbed (per-run prefix) per test, removed on drop, also when an assertion fails.
//! Without root or sshd the tests say so and pass.

mod common;
use common::{example, grid_file, parse_table, rank_lines, show, PRINT_TABLE};
use ferry_grid::Topology;
use ferry_testbed::{Testbed, UpOptions};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Hosts {
    tb: Testbed,
    /// Where the launcher runs.
    login: &'static str,
}

impl Hosts {
    /// `ferry run ARGS…` as a login on the login host would start it.
    fn run(&self, args: &[&str]) -> Command {
        let ssh = self.tb.ssh_command().expect("an ssh testbed").join(" ");
        self.run_with_ssh(&ssh, args)
    }

    /// The same with `FERRY_SSH=ssh`.
    fn run_with_ssh(&self, ssh: &str, args: &[&str]) -> Command {
        let enter = self
            .tb
            .host_command(self.login)
            .expect("the login host runs sshd");
        let mut command = Command::new(&enter[0]);
        command
            .args(&enter[1..])
            .args(["env", &format!("FERRY_SSH={ssh}")])
            .arg(env!("CARGO_BIN_EXE_ferry"))
            .args(["run", "--timeout", "60"])
            .args(args)
            .env_remove("MPIEXEC_TIMEOUT")
            .env_remove("FERRY_TRANSPORT")
            .stdin(Stdio::null());
        command
    }

    fn output(&self, args: &[&str]) -> Output {
        self.run(args).output().expect("ferry runs")
    }
}

fn up(grid: &str, login: &'static str) -> Option<Hosts> {
    if let Err(e) = UpOptions::with_ssh().preflight() {
        eprintln!("skipped: {e}");
        return None;
    }
    let topology = Topology::load(&grid_file(grid)).expect("the grid file parses");
    let prefix = format!("fy{}{}{}-", std::process::id(), &grid[..1], &login[..1]);
    let tb =
        Testbed::up_with(&topology, &prefix, &UpOptions::with_ssh()).expect("testbed up --ssh");
    Some(Hosts { tb, login })
}

const SIX: &[&str] = &["--hosts", "h1:2,h2:2,h3:2", "-n", "6"];

#[test]
fn one_job_on_three_hosts_over_ssh() {
    let Some(hosts) = up("hosts3.toml", "h1") else {
        return;
    };
    let check = example("check");
    let check = check.to_str().expect("a UTF-8 path");

    let out = hosts.output(&[SIX, &[check, "routes"]].concat());
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "routes 0: self shm tcp tcp tcp tcp",
        "routes 3: tcp tcp shm self tcp tcp",
        "routes 5: tcp tcp tcp tcp shm self",
        "clusters [0, 0, 1, 1, 2, 2]",
    ] {
        assert!(stdout.contains(line), "{line}\n{}", show(&out));
    }

    let out = hosts.output(&[SIX, &["--tag-output", check, "allpairs", "2097152"]].concat());
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[0] allpairs ok: 6 ranks"),
        "{}",
        show(&out)
    );
    let out = hosts.output(&[SIX, &[check, "coll"]].concat());
    assert!(out.status.success(), "{}", show(&out));

    // A rank failing on another host: its code, its rank and its host.
    let fail = format!("if [ $FERRY_RANK = 3 ]; then sleep 0.2; exit 3; fi; exec {check} idle");
    let out = hosts.output(&[SIX, &["sh", "-c", &fail]].concat());
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rank 3 (host h2, pid"), "{}", show(&out));

    // A node daemon killed with -9: the job ends quickly and names the host.
    let (code, stderr, took) = kill_a_daemon(&hosts, check, "h2", None);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {stderr}");
    assert!(
        stderr.contains("host h2: its node daemon ended"),
        "{stderr}"
    );

    // A tree of daemons (the launcher starts h2's, which starts h3's): the same job, and a
    // child daemon killed with -9 is named by its host.
    let out = hosts
        .run(&[SIX, &["--tag-output", check, "allpairs", "2097152"]].concat())
        .env("FERRY_TREE_FANOUT", "1")
        .output()
        .expect("ferry runs");
    assert!(out.status.success(), "{}", show(&out));
    let (code, stderr, took) = kill_a_daemon(&hosts, check, "h3", Some("1"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {stderr}");
    assert!(
        stderr.contains("host h3: its node daemon ended"),
        "{stderr}"
    );

    // SIGINT to the launcher: nothing of the job is left on any host.
    let marker = format!("ferry-ssh-test-{}", std::process::id());
    let mut job = hosts
        .run(&[SIX, &[check, "barrier", "100000000", &marker]].concat())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ferry runs");
    let until = Instant::now() + Duration::from_secs(20);
    while count(&marker) < 6 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(count(&marker), 6, "six ranks run");
    let launcher = launcher_pid(&marker).expect("the launcher runs");
    // SAFETY: kill(2) on the launcher this test started (found by its unique argument).
    unsafe { libc::kill(launcher, libc::SIGINT) };
    let status = wait_for(&mut job, Duration::from_secs(10));
    assert!(status.is_some(), "the launcher ends on SIGINT");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(count(&marker), 0, "every rank ended");

    // MPICH's hydra starting the ranks over the same ssh (PMI-1): they find their hosts' own
    // addresses and each other's host ids, as under ferry run.
    if let Some(hydra) = which("mpiexec.hydra") {
        let wrapper = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("ssh-{}", std::process::id()));
        let ssh = hosts.tb.ssh_command().expect("an ssh testbed").join(" ");
        std::fs::write(&wrapper, format!("#!/bin/sh\nexec {ssh} \"$@\"\n")).expect("wrapper");
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let enter = hosts.tb.host_command("h1").expect("h1 runs sshd");
        let out = Command::new("timeout")
            .args(["-k", "5", "60"])
            .args(&enter)
            .arg(&hydra)
            .args(["-launcher", "ssh", "-launcher-exec"])
            .arg(&wrapper)
            .args(["-hosts", "h1:2,h2:2,h3:2", "-n", "6", check, "routes"])
            .env_remove("FERRY_TRANSPORT")
            .stdin(Stdio::null())
            .output()
            .expect("mpiexec.hydra runs");
        let _ = std::fs::remove_file(&wrapper);
        assert!(out.status.success(), "{}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("routes 2: tcp tcp self shm tcp tcp"),
            "{}",
            show(&out)
        );
    } else {
        eprintln!("mpiexec.hydra missing: hydra over ssh not tried");
    }

    // A remote shell that never gets anywhere: the host is named after the connect timeout.
    let out = hosts
        .run_with_ssh(
            "tail -q -f /dev/null",
            &["--hosts", "h2:1", "-n", "1", check, "routes"],
        )
        .env("FERRY_CONNECT_TIMEOUT", "2")
        .output()
        .expect("ferry runs");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("host h2: its node daemon did not answer within 2 s"),
        "{}",
        show(&out)
    );

    // Names: a host that does not resolve, a program that is not there.
    let out = hosts.output(&["--hosts", "h1:1,nosuchhost:1", "-n", "2", check, "routes"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot resolve host \"nosuchhost\""),
        "{}",
        show(&out)
    );
    let out = hosts.output(&["--hosts", "h2:1,h3:1", "-n", "2", "/no/such/program"]);
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("program not found"),
        "{}",
        show(&out)
    );
    hosts.tb.down().expect("testbed down");
}

/// gdb on the launcher in h1 stops at MPIR_Breakpoint once the node daemons of h1, h2 and h3
/// have reported their ranks' pids, and reads the table: each rank's host and the pid it
/// prints itself (the hosts share this machine's pid namespace).
#[test]
fn a_debugger_finds_the_ranks_of_every_host_through_mpir() {
    if which("gdb").is_none() {
        eprintln!("skipped: gdb is not installed (scripts/setup.sh installs it)");
        return;
    }
    let Some(hosts) = up("hosts3.toml", "h1") else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_BIN_EXE_ferry"))
        .parent()
        .expect("target dir")
        .join(format!("mpir-ssh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let release = dir.join("release");
    let script = dir.join("gdb.cmd");
    std::fs::write(
        &script,
        format!(
            "set breakpoint pending on\nbreak MPIR_Breakpoint\nrun\n{PRINT_TABLE}\
             shell touch {}\ndelete\ncontinue\n",
            release.display()
        ),
    )
    .expect("gdb script");
    let rank = format!(
        "echo \"rank $FERRY_RANK pid $$ host $(hostname)\"; i=0; \
         while [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        release.display()
    );
    let ssh = hosts.tb.ssh_command().expect("an ssh testbed").join(" ");
    let mut argv = hosts.tb.host_command("h1").expect("h1 runs sshd");
    argv.extend(["env".to_string(), format!("FERRY_SSH={ssh}")]);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .args(["gdb", "-q", "-batch", "-x"])
        .arg(&script)
        .arg("--args")
        .arg(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "--timeout", "50", "--hosts", "h1,h2,h3", "-n", "3"])
        .args(["sh", "-c", &rank])
        .env_remove("MPIEXEC_TIMEOUT")
        .stdin(Stdio::null())
        .output()
        .expect("gdb runs");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (state, entries) = parse_table(&stdout);
    assert_eq!(state, Some(1), "{}", show(&out));
    let said = rank_lines(&stdout, 3);
    let table: Vec<(u32, &str)> = entries.iter().map(|e| (e.pid, e.host.as_str())).collect();
    let want: Vec<(u32, &str)> = said.iter().map(|(p, h)| (*p, h.as_str())).collect();
    assert_eq!(table, want, "{}", show(&out));
    assert_eq!(
        said.iter().map(|(_, h)| h.as_str()).collect::<Vec<_>>(),
        ["h1", "h2", "h3"]
    );
    assert!(out.status.success(), "{}", show(&out));
    hosts.tb.down().expect("testbed down");
}

#[test]
fn a_grid_on_its_real_machines_over_ssh() {
    let Some(hosts) = up("three.toml", "p1") else {
        return;
    };
    let check = example("check");
    let check = check.to_str().expect("a UTF-8 path");
    let grid = grid_file("three.toml");
    let grid = grid.to_str().expect("a UTF-8 path");
    let run = |n: &str, args: &[&str]| {
        let out =
            hosts.output(&[&["--grid", grid, "--launcher", "ssh", "-n", n][..], args].concat());
        assert!(out.status.success(), "{}", show(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let stdout = run("6", &["--show-paths", check, "routes"]);
    // a and b reach each other through the relay, or punched through both NATs: each pair on
    // its own, since one punch may succeed where the next one's time runs out.
    let row0: Vec<&str> = stdout
        .lines()
        .find(|line| line.starts_with("r0 "))
        .map(|line| line.split_whitespace().collect())
        .unwrap_or_default();
    assert!(
        row0.len() == 7
            && row0[1..3] == ["-", "D*"]
            && row0[3..5].iter().all(|path| ["NR*", "P*"].contains(path))
            && row0[5..] == ["N*", "N*"],
        "{stdout}"
    );
    for line in [
        "r4   R    R    R    R    -    D*",
        "routes 0: self tcp tcp tcp tcp tcp",
    ] {
        assert!(stdout.contains(line), "{line}\n{stdout}");
    }
    assert!(run("6", &[check, "allpairs", "2097152"]).contains("allpairs ok: 6 ranks"));
    let stdout = run("12", &[check, "routes"]);
    assert!(
        stdout.contains("routes 7: tcp shm tcp tcp tcp tcp tcp self tcp tcp tcp tcp"),
        "{stdout}"
    );
    assert!(run("12", &[check, "coll"]).contains("coll ok: 12 ranks"));
    // The relays ended with their ssh sessions.
    std::thread::sleep(Duration::from_millis(300));
    let relays = processes("--key-stdin")
        .into_iter()
        .filter(|(_, cmd)| cmd.contains(" relay ") && !cmd.starts_with("ssh"))
        .count();
    assert_eq!(relays, 0, "no relay is left");
    hosts.tb.down().expect("testbed down");
}

#[test]
fn a_grid_with_several_relays_per_cluster_over_ssh() {
    let Some(hosts) = up("relays.toml", "p1") else {
        return;
    };
    let check = example("check");
    let check = check.to_str().expect("a UTF-8 path");
    let grid = grid_file("relays.toml");
    let grid = grid.to_str().expect("a UTF-8 path");
    // a1, b1, p1: a relay over ssh on each of the five front nodes, three rails per pair.
    let out = hosts.output(&[
        "--grid",
        grid,
        "--launcher",
        "ssh",
        "-n",
        "3",
        check,
        "allpairs",
        "2097152",
    ]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("allpairs ok: 3 ranks"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for front in ["fa", "fa2", "fa3", "fb", "fb2"] {
        assert!(
            stderr.contains(&format!("[relay {front}] ferry relay: listening")),
            "no relay on {front}: {}",
            show(&out)
        );
    }
    hosts.tb.down().expect("testbed down");
}

/// Runs six ranks that wait in barriers, kills the node daemon of `host` with -9 once its
/// ranks run, and returns the job's exit code, its stderr and how long it took to end.
fn kill_a_daemon(
    hosts: &Hosts,
    check: &str,
    host: &str,
    fanout: Option<&str>,
) -> (Option<i32>, String, Duration) {
    let report = format!(
        "echo \"rank $FERRY_RANK on $(hostname) daemon $PPID\"; exec {check} barrier 100000000"
    );
    let mut command = hosts.run(&[SIX, &["sh", "-c", &report]].concat());
    if let Some(fanout) = fanout {
        command.env("FERRY_TREE_FANOUT", fanout);
    }
    let mut job = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferry runs");
    let mut lines = BufReader::new(job.stdout.take().expect("stdout")).lines();
    let marker = format!(" on {host} daemon ");
    let daemon: i32 = loop {
        let line = lines.next().expect("a rank reports").expect("text");
        if line.contains(&marker) {
            break line
                .rsplit(' ')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("a pid");
        }
    };
    let killed = Instant::now();
    // SAFETY: kill(2) on the pid of the daemon this test's job started on `host`.
    unsafe { libc::kill(daemon, libc::SIGKILL) };
    let status = wait_for(&mut job, Duration::from_secs(10));
    let took = killed.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut job.stderr.take().expect("stderr"), &mut stderr).ok();
    (status.and_then(|s| s.code()), stderr, took)
}

/// `program` on PATH, if there.
fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|p| p.is_file())
}

fn wait_for(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Processes whose command line holds `marker` and that are ranks (not the launcher or ssh).
fn count(marker: &str) -> usize {
    processes(marker)
        .iter()
        .filter(|(_, cmd)| cmd.contains("check barrier") && !cmd.contains(" run "))
        .count()
}

/// The `ferry run` whose command line holds `marker`.
fn launcher_pid(marker: &str) -> Option<i32> {
    processes(marker)
        .into_iter()
        .find(|(_, cmd)| cmd.starts_with(env!("CARGO_BIN_EXE_ferry")) && cmd.contains(" run "))
        .map(|(pid, _)| pid)
}

fn processes(marker: &str) -> Vec<(i32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(marker).then_some((pid, cmd))
        })
        .collect()
}
