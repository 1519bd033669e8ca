//! Hosts as their own machines with their own sshd (`ferry testbed up --ssh`), for real, as
//! root: real ssh logins between hosts, private `/tmp` and `/dev/shm` per host, `ProxyJump`
//! into a private cluster, ssh's own refusals (no hang), and a removal that leaves nothing —
//! also after a "crash". Every ssh command runs under a deadline. Without root or sshd these
//! tests say so and pass.

use ferry_grid::Topology;
use ferry_testbed::{leftovers, remove, ssh, Testbed, UpOptions};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn can_run() -> bool {
    match UpOptions::with_ssh().preflight() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

fn prefix(tag: char) -> String {
    format!("fy{}{tag}-", std::process::id())
}

fn hosts3() -> Topology {
    Topology::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("grids/hosts3.toml"))
        .expect("the grid file parses")
}

const PRIVATE: &str = r#"
[[cluster]]
name = "a"
kind = "private"
front = "fa"
public_addr = "198.18.0.10"
[[cluster.host]]
name = "a1"
addr = "10.1.0.11"
[[cluster.host]]
name = "a2"
addr = "10.1.0.12"
[[cluster]]
name = "p"
kind = "public"
[[cluster.host]]
name = "p1"
addr = "198.18.1.1"
"#;

fn up(grid: &Topology, prefix: &str) -> (Testbed, Duration) {
    let start = Instant::now();
    let tb = Testbed::up_with(grid, prefix, &UpOptions::with_ssh()).expect("testbed up --ssh");
    (tb, start.elapsed())
}

/// What a command printed, and whether it succeeded.
struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `argv` with a 20 s deadline (a hang is a failure, not a stuck test).
fn run(argv: &[String]) -> Output {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("{argv:?} hung for 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `cmd` run on `host` as a login there (all of its namespaces).
fn on(tb: &Testbed, host: &str, cmd: &[&str]) -> Output {
    let mut argv = tb.host_command(host).expect("host has a running sshd");
    argv.extend(cmd.iter().map(|s| s.to_string()));
    run(&argv)
}

/// `ssh -F cfg ARGS…` run on `host` as a login there.
fn ssh_from(tb: &Testbed, host: &str, args: &[&str]) -> Output {
    let mut argv = tb.host_command(host).expect("host has a running sshd");
    argv.extend(tb.ssh_command().expect("built with ssh"));
    argv.extend(args.iter().map(|s| s.to_string()));
    run(&argv)
}

/// `ssh -F cfg ARGS…` run in `host`'s network namespace only (as a launcher started with
/// `ip netns exec` would).
fn ssh_netns(tb: &Testbed, host: &str, args: &[&str]) -> Output {
    let ns = tb.namespace(host).unwrap();
    let mut argv: Vec<String> = ["ip", "netns", "exec", ns].map(String::from).to_vec();
    argv.extend(tb.ssh_command().expect("built with ssh"));
    argv.extend(args.iter().map(|s| s.to_string()));
    run(&argv)
}

fn assert_prints(out: Output, want: &str) {
    assert!(out.ok, "stderr: {}", out.stderr);
    assert_eq!(out.stdout.trim(), want, "stderr: {}", out.stderr);
}

/// Nothing of the testbed is left: namespaces, sshds, `/etc/netns` entries, state.
fn assert_gone(prefix: &str) {
    assert!(leftovers(Some(prefix)).unwrap().is_empty());
    let state = ssh::state_dir(prefix);
    assert!(!state.exists(), "{} is left", state.display());
    assert_eq!(ssh::processes_naming(&state), Vec::<i32>::new());
    let etc: Vec<String> = std::fs::read_dir(ssh::ETC_NETNS)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(etc.is_empty(), "{etc:?}");
}

#[test]
fn three_public_hosts_are_machines_reached_by_ssh() {
    if !can_run() {
        return;
    }
    let p = prefix('s');
    let (tb, took) = up(&hosts3(), &p);
    eprintln!(
        "bring-up of 3 hosts with --ssh took {:.3} s",
        took.as_secs_f64()
    );
    let state = ssh::state_dir(&p);
    assert_eq!(tb.ssh_config(), Some(state.join("ssh_config")));
    assert_eq!(
        tb.ssh_command().unwrap().join(" "),
        format!("ssh -F {}/ssh_config", state.display())
    );

    // Each host is a login away from every other, and is named after itself.
    for (from, to) in [("h1", "h2"), ("h1", "h3"), ("h3", "h1"), ("h2", "h2")] {
        assert_prints(ssh_from(&tb, from, &[to, "hostname"]), to);
    }
    assert_prints(on(&tb, "h1", &["hostname"]), "h1");
    assert_prints(on(&tb, "h1", &["cat", "/etc/hostname"]), "h1");
    // By address too.
    assert_prints(ssh_netns(&tb, "h1", &["198.18.1.2", "hostname"]), "h2");
    // As the launcher's tests do it: from `ip netns exec` (host's network only).
    assert_prints(ssh_netns(&tb, "h1", &["h3", "hostname"]), "h3");
    // Host names resolve inside every host.
    assert_prints(
        on(&tb, "h2", &["getent", "hosts", "h3"]),
        "198.18.1.3      h3",
    );

    // /tmp and /dev/shm are private to a host, and shared by its logins.
    let made = ssh_from(
        &tb,
        "h1",
        &["h1", "touch /tmp/ferry-probe /dev/shm/ferry-probe"],
    );
    assert!(made.ok, "{}", made.stderr);
    assert!(ssh_from(&tb, "h2", &["h1", "test -e /tmp/ferry-probe"]).ok);
    assert!(ssh_from(&tb, "h2", &["h1", "test -e /dev/shm/ferry-probe"]).ok);
    for other in ["h2", "h3"] {
        let out = ssh_from(
            &tb,
            "h1",
            &[
                other,
                "test ! -e /tmp/ferry-probe && test ! -e /dev/shm/ferry-probe",
            ],
        );
        assert!(out.ok, "{other} sees h1's files: {}", out.stderr);
    }
    assert!(!Path::new("/tmp/ferry-probe").exists());
    assert!(!Path::new("/dev/shm/ferry-probe").exists());
    // The binaries' tree stays in view.
    assert!(
        ssh_from(
            &tb,
            "h1",
            &["h2", &format!("test -d {}", env!("CARGO_MANIFEST_DIR"))]
        )
        .ok
    );

    // Own boot_id, machine-id and IPC namespace per host, none the caller's.
    let read = |cmd: &str| -> String {
        let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    for cmd in [
        "cat /proc/sys/kernel/random/boot_id",
        "cat /etc/machine-id",
        "readlink /proc/self/ns/ipc",
    ] {
        let seen: Vec<String> = ["h1", "h2", "h3"]
            .iter()
            .map(|h| {
                let out = ssh_from(&tb, "h1", &[h, cmd]);
                assert!(out.ok, "{}", out.stderr);
                out.stdout.trim().to_string()
            })
            .collect();
        assert!(
            seen[0] != seen[1] && seen[1] != seen[2] && seen[0] != seen[2],
            "{cmd}: {seen:?}"
        );
        let mine = read(cmd);
        assert!(!seen.contains(&mine), "{cmd}: {seen:?} has the caller's");
    }

    // ssh refuses, at once and in its own words: a key it does not know, a host key it does
    // not know, a host that does not exist.
    let wrong_key = state.join("wrong_key");
    assert!(
        run(&[
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-f",
            &wrong_key.display().to_string()
        ]
        .map(String::from))
        .ok
    );
    let config = std::fs::read_to_string(state.join("ssh_config")).unwrap();
    let wrong_config = state.join("wrong_ssh_config");
    std::fs::write(
        &wrong_config,
        config.replace(
            &state.join("id_ed25519").display().to_string(),
            &wrong_key.display().to_string(),
        ),
    )
    .unwrap();
    let ns = tb.namespace("h1").unwrap();
    let started = Instant::now();
    let out = run(&[
        "ip",
        "netns",
        "exec",
        ns,
        "ssh",
        "-F",
        &wrong_config.display().to_string(),
        "h2",
        "true",
    ]
    .map(String::from));
    assert!(!out.ok);
    assert!(
        out.stderr.contains("Permission denied (publickey)"),
        "{}",
        out.stderr
    );
    let out = ssh_netns(
        &tb,
        "h1",
        &["-o", "UserKnownHostsFile=/dev/null", "h2", "true"],
    );
    assert!(!out.ok);
    assert!(
        out.stderr.contains("Host key verification failed"),
        "{}",
        out.stderr
    );
    let out = ssh_netns(&tb, "h1", &["nosuchhost", "true"]);
    assert!(!out.ok);
    assert!(
        out.stderr.contains("Could not resolve hostname nosuchhost"),
        "{}",
        out.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(10), "refusals hung");

    // A program a login left running is ended by down, with the sshds.
    let stray = ssh_from(
        &tb,
        "h1",
        &["h2", "nohup sleep 600 >/dev/null 2>&1 </dev/null & echo $!"],
    );
    assert!(stray.ok, "{}", stray.stderr);
    let stray: i32 = stray.stdout.trim().parse().unwrap();
    assert!(Path::new(&format!("/proc/{stray}")).exists());
    let start = Instant::now();
    tb.down().unwrap();
    eprintln!("down took {:.3} s", start.elapsed().as_secs_f64());
    assert_gone(&p);
    let stat = std::fs::read_to_string(format!("/proc/{stray}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z"),
        "the left sleep {stray} still runs: {stat}"
    );
}

#[test]
fn private_hosts_are_reached_through_their_front() {
    if !can_run() {
        return;
    }
    let grid = Topology::parse("private", PRIVATE).unwrap();
    let p = prefix('j');
    let (tb, took) = up(&grid, &p);
    eprintln!(
        "bring-up of 1 front, 2 private and 1 public host with --ssh took {:.3} s",
        took.as_secs_f64()
    );
    // From a public host: a private one through the front (ProxyJump), and the front itself.
    assert_prints(ssh_from(&tb, "p1", &["a2", "hostname"]), "a2");
    assert_prints(ssh_from(&tb, "p1", &["fa", "hostname"]), "fa");
    assert_prints(ssh_netns(&tb, "p1", &["a1", "hostname"]), "a1");
    let jumps = |from: &str| {
        let out = ssh_from(&tb, from, &["-G", "a2"]);
        assert!(out.ok, "{}", out.stderr);
        out.stdout.contains("proxyjump fa")
    };
    assert!(jumps("p1"));
    // Without the jump the private host is out of reach (and ssh says so in time).
    let out = ssh_netns(
        &tb,
        "p1",
        &[
            "-o",
            "ProxyJump=none",
            "-o",
            "ConnectTimeout=2",
            "a2",
            "true",
        ],
    );
    assert!(!out.ok);
    // Inside the cluster: directly, and out to the public host through NAT.
    assert!(!jumps("a1"));
    assert!(!jumps("fa"));
    assert_prints(ssh_from(&tb, "a1", &["a2", "hostname"]), "a2");
    assert_prints(ssh_from(&tb, "fa", &["a1", "hostname"]), "a1");
    assert_prints(ssh_from(&tb, "a2", &["p1", "hostname"]), "p1");
    assert_prints(ssh_from(&tb, "a1", &["fa", "hostname"]), "fa");
    // ssh's words for "who are you" through the jump too, without a hang.
    let out = ssh_netns(
        &tb,
        "p1",
        &["-o", "UserKnownHostsFile=/dev/null", "a2", "true"],
    );
    assert!(!out.ok);
    assert!(
        out.stderr.contains("Host key verification failed"),
        "{}",
        out.stderr
    );
    drop(tb);
    assert_gone(&p);
}

#[test]
fn removal_by_prefix_cleans_up_after_a_crash() {
    if !can_run() {
        return;
    }
    let p = prefix('c');
    let (tb, _) = up(&hosts3(), &p);
    let pids: Vec<i32> = ["h1", "h2", "h3"]
        .iter()
        .map(|h| ssh::sshd_pid(&p, h).expect("sshd runs"))
        .collect();
    // The process that built it dies without removing it.
    std::mem::forget(tb);
    assert_eq!(leftovers(Some(&p)).unwrap().len(), 4);
    assert_eq!(remove(Some(&p)).unwrap().len(), 4);
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z"),
            "sshd {pid} still runs: {stat}"
        );
    }
    assert_gone(&p);
    // The namespaces' names were removed by hand, the sshds still run in them: removal still
    // finds the sshds by their pid files, and the state.
    let (tb, _) = up(&hosts3(), &p);
    std::mem::forget(tb);
    for ns in leftovers(Some(&p)).unwrap() {
        assert!(Command::new("ip")
            .args(["netns", "delete", &ns])
            .status()
            .unwrap()
            .success());
    }
    assert!(ssh::sshd_pid(&p, "h2").is_some());
    assert!(remove(Some(&p)).unwrap().is_empty());
    assert_gone(&p);
}

#[test]
fn a_failed_bring_up_leaves_nothing_and_names_the_host() {
    if !can_run() {
        return;
    }
    let p = prefix('f');
    // An "sshd" that fails at once: the start command's error.
    let failing = UpOptions {
        ssh: true,
        sshd: Some("/bin/false".into()),
        ..UpOptions::default()
    };
    match Testbed::up_with(&hosts3(), &p, &failing) {
        Err(ferry_testbed::TestbedError::Command { command, .. }) => {
            assert!(command.contains("/bin/false"), "{command}")
        }
        other => panic!("{other:?}"),
    }
    assert_gone(&p);
    // One that exits without ever listening: the wait for its pid file ends, naming the host.
    let silent = UpOptions {
        ssh: true,
        sshd: Some("/bin/true".into()),
        ..UpOptions::default()
    };
    let start = Instant::now();
    match Testbed::up_with(&hosts3(), &p, &silent) {
        Err(e @ ferry_testbed::TestbedError::Sshd { .. }) => {
            assert!(e.to_string().contains("sshd of host h1"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < ssh::SSHD_READY_TIMEOUT + Duration::from_secs(5));
    assert_gone(&p);
    // A relative sshd is refused before anything is built.
    let relative = UpOptions {
        ssh: true,
        sshd: Some("sshd".into()),
        ..UpOptions::default()
    };
    assert!(matches!(
        Testbed::up_with(&hosts3(), &p, &relative),
        Err(ferry_testbed::TestbedError::Io { .. })
    ));
    assert_gone(&p);
}

/// A checkout under `/tmp` (the test command run from a clone there): the directory below
/// `/tmp` named in `keep`, and the one holding this test, are the same files on every host and
/// here, while another directory of this machine's `/tmp` stays hidden from the hosts.
#[test]
fn directories_kept_under_tmp_are_seen_by_every_host() {
    if !can_run() {
        return;
    }
    let p = prefix('k');
    let kept = std::path::PathBuf::from(format!("/tmp/ferry-kept-{}", std::process::id()));
    let hidden = std::path::PathBuf::from(format!("/tmp/ferry-hidden-{}", std::process::id()));
    for dir in [&kept, &hidden] {
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/probe"), "here\n").unwrap();
    }
    let options = UpOptions {
        keep: vec![kept.join("sub")],
        ..UpOptions::with_ssh()
    };
    let tb = Testbed::up_with(&hosts3(), &p, &options).expect("testbed up --ssh");
    let kept_probe = kept.join("sub/probe").display().to_string();
    let hidden_probe = hidden.join("sub/probe").display().to_string();
    let own = std::env::current_exe().unwrap().display().to_string();
    for host in ["h1", "h2", "h3"] {
        assert_prints(on(&tb, host, &["cat", &kept_probe]), "here");
        let out = on(&tb, host, &["test", "!", "-e", &hidden_probe]);
        assert!(out.ok, "{host} sees {hidden_probe}");
        let out = on(&tb, host, &["test", "-x", &own]);
        assert!(out.ok, "{host} does not see this test's executable {own}");
        // The rest of the host's /tmp is still its own.
        let out = on(
            &tb,
            host,
            &["sh", "-c", &format!("touch /tmp/ferry-own-{host}")],
        );
        assert!(out.ok, "{}", out.stderr);
        assert!(!Path::new(&format!("/tmp/ferry-own-{host}")).exists());
    }
    // A file a host writes there is the same file here and on the other hosts.
    let written = kept.join("sub/from-h2").display().to_string();
    assert!(on(&tb, "h2", &["sh", "-c", &format!("echo h2 > {written}")]).ok);
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "h2\n");
    assert_prints(on(&tb, "h3", &["cat", &written]), "h2");
    drop(tb);
    assert_gone(&p);
    for dir in [&kept, &hidden] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}
