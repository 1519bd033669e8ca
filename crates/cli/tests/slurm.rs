//! `ferry run` inside a Slurm allocation, against a real Slurm (`ferry testbed up --slurm`,
//! three hosts of two CPUs): from the head, `salloc -N 3 --ntasks-per-node=2 ferry run …`
//! starts one node daemon per host as a job step (`--launcher slurm`, the default there), and
//! the ranks find shared memory within a host and TCP between hosts. A failing rank, a killed
//! daemon and Ctrl-C end the job as they must and leave nothing running on the hosts; from
//! outside the allocation every daemon is a step and rank 0 reads its input through srun. Needs
//! root, sshd, Slurm and munge; without them the test says so and passes. Takes about 10 s.

mod common;

use common::{assert_routes, example, grid, netns_pids, testbed_of};
use ferry_testbed::{Testbed, UpOptions};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FERRY: &str = env!("CARGO_BIN_EXE_ferry");

fn can_run() -> bool {
    match UpOptions::with_slurm().preflight() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// The path of the `check` example, if this machine can run a Slurm testbed (if not, says
/// why, and the test passes).
fn check_if_slurm_runs() -> Option<String> {
    if !can_run() {
        return None;
    }
    let check = example("check");
    Some(check.to_str().expect("a UTF-8 path").to_owned())
}

/// What a finished command did.
struct Done {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Done {
    fn show(&self) -> String {
        format!(
            "exit {:?} after {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.took, self.stdout, self.stderr
        )
    }
}

/// Starts `COMMAND…` on the head of `tb` with `env` added and none of the caller's settings
/// of where ranks go or how long a job may take.
fn start_on_head(tb: &Testbed, command: &[&str], env: &[(&str, &str)], stdin: Stdio) -> Child {
    let mut argv = tb.host_command("h1").expect("h1 has a running sshd");
    argv.extend(command.iter().map(|s| s.to_string()));
    Command::new(&argv[0])
        .args(&argv[1..])
        .env_remove("MPIEXEC_TIMEOUT")
        .env_remove("FERRY_TRANSPORT")
        .env_remove("FERRY_TCP_ADDR")
        .envs(env.iter().copied())
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

/// Starts `salloc -N 3 --ntasks-per-node=2 ferry run ARGS…` on the head.
fn start_job(tb: &Testbed, args: &[&str]) -> Child {
    start_in(tb, &["-N", "3"], &[], args, Stdio::null())
}

/// Starts `salloc ALLOCATION… --ntasks-per-node=2 ferry run ARGS…` on the head, with `env`.
fn start_in(
    tb: &Testbed,
    allocation: &[&str],
    env: &[(&str, &str)],
    args: &[&str],
    stdin: Stdio,
) -> Child {
    let command: Vec<&str> = ["salloc"]
        .iter()
        .chain(allocation)
        .chain(&["--ntasks-per-node=2", FERRY, "run", "--timeout", "60"])
        .chain(args)
        .copied()
        .collect();
    start_on_head(tb, &command, env, stdin)
}

/// Waits for `child` with a 60 s deadline (a hang is a failure, not a stuck test).
fn finish(mut child: Child, start: Instant) -> Done {
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "job hung for 60 s\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = start.elapsed();
    let out = child.wait_with_output().unwrap();
    Done {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    }
}

fn job(tb: &Testbed, args: &[&str]) -> Done {
    let start = Instant::now();
    finish(start_job(tb, args), start)
}

/// The processes in `host`'s network namespace, with their command lines.
fn processes(tb: &Testbed, host: &str) -> Vec<(i32, String)> {
    let ns = tb.namespace(host).expect("a host of the grid");
    netns_pids(ns)
        .into_iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // A zombie has ended (its parent may reap it late).
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            if state == 'Z' {
                return None;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")))
        })
        .collect()
}

/// Waits up to 10 s for a process on `host` whose command line starts with `start`.
fn wait_for_process(tb: &Testbed, host: &str, start: &str) -> i32 {
    let since = Instant::now();
    loop {
        if let Some((pid, _)) = processes(tb, host)
            .into_iter()
            .find(|(_, c)| c.starts_with(start))
        {
            return pid;
        }
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "no {start:?} on {host}: {:?}",
            processes(tb, host)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a job of `sleep 30` ranks and, once they sleep on h2 and h3, sends `signal` to the
/// process on `host` whose command line starts with `process`; returns how the job ended and
/// how long after the signal.
fn signalled_while_sleeping(
    tb: &Testbed,
    host: &str,
    process: &str,
    signal: &str,
) -> (Done, Duration) {
    let start = Instant::now();
    let child = start_job(tb, &["sleep", "30"]);
    let target = wait_for_process(tb, host, process);
    for host in ["h2", "h3"] {
        wait_for_process(tb, host, "sleep 30");
    }
    let sent = Instant::now();
    Command::new("kill")
        .args([signal, &target.to_string()])
        .status()
        .expect("kill");
    let done = finish(child, start);
    (done, sent.elapsed())
}

/// Nothing of a job is left on the hosts (only the testbed's own daemons).
fn assert_nothing_left(tb: &Testbed) {
    let ours = ["sshd", "slurmd", "slurmctld", "munged", ": slurmscriptd"];
    let since = Instant::now();
    loop {
        let left: Vec<(i32, String)> = ["h1", "h2", "h3"]
            .iter()
            .flat_map(|h| processes(tb, h))
            .filter(|(_, c)| {
                !ours
                    .iter()
                    .any(|o| c.starts_with(o) || c.contains("/sshd "))
            })
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "left running: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ferry_run_in_a_slurm_allocation_starts_its_daemons_with_srun() {
    let Some(check) = check_if_slurm_runs() else {
        return;
    };
    let check = check.as_str();
    let start = Instant::now();
    let tb = slurm_testbed("r");
    eprintln!(
        "bring-up of 3 hosts with --slurm took {:.3} s",
        start.elapsed().as_secs_f64()
    );

    // Two ranks per host: shared memory between them, TCP to the other hosts.
    let done = job(&tb, &[check, "routes"]);
    assert_eq!(done.code, Some(0), "{}", done.show());
    eprintln!("routes took {:.3} s", done.took.as_secs_f64());
    assert_routes(&done.stdout, 6, 2);

    // A tree of daemons: h2's step starts h3's step with srun from inside its own.
    let start = Instant::now();
    let child = start_in(
        &tb,
        &["-N", "3"],
        &[("FERRY_TREE_FANOUT", "1")],
        &["--tag-output", check, "allpairs", "1048576"],
        Stdio::null(),
    );
    let done = finish(child, start);
    assert_eq!(done.code, Some(0), "tree: {}", done.show());
    assert!(
        done.stdout.contains("[0] allpairs ok: 6 ranks"),
        "{}",
        done.show()
    );

    for case in ["allpairs", "coll"] {
        let done = job(&tb, &[check, case]);
        assert_eq!(done.code, Some(0), "{case}: {}", done.show());
        assert!(
            done.stdout.contains(&format!("{case} ok")),
            "{}",
            done.show()
        );
        eprintln!("{case} took {:.3} s", done.took.as_secs_f64());
    }

    // Launched from outside the allocation (as from a login node): every daemon is a step,
    // and rank 0's input travels through srun to h2.
    let mut child = start_in(
        &tb,
        &["-N", "2", "-w", "h2,h3"],
        &[],
        &[
            "sh",
            "-c",
            r#"[ "$FERRY_RANK" = 0 ] && echo "$(hostname) read $(cat | tr '\n' ' ')"; true"#,
        ],
        Stdio::piped(),
    );
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(b"line-one\nline-two\n").expect("stdin");
    }
    let done = finish(child, Instant::now());
    assert_eq!(done.code, Some(0), "{}", done.show());
    assert_eq!(
        done.stdout,
        "h2 read line-one line-two \n",
        "{}",
        done.show()
    );

    // A rank of the second host exits 3: so does the job, naming the rank and its host.
    let done = job(
        &tb,
        &[
            "sh",
            "-c",
            r#"[ "$FERRY_RANK" = 3 ] && exit 3; sleep 0.2; exit 0"#,
        ],
    );
    assert_eq!(done.code, Some(3), "{}", done.show());
    assert!(done.stderr.contains("rank 3 (host h2"), "{}", done.show());
    assert_nothing_left(&tb);

    // The second host's daemon is killed: the job ends at once, naming the host.
    let (done, after) = signalled_while_sleeping(&tb, "h2", &format!("{FERRY} node"), "-KILL");
    eprintln!(
        "a killed daemon ended the job in {:.3} s",
        after.as_secs_f64()
    );
    assert!(after < Duration::from_secs(5), "{after:?}: {}", done.show());
    assert_ne!(done.code, Some(0), "{}", done.show());
    assert!(done.stderr.contains("host h2"), "{}", done.show());
    assert_nothing_left(&tb);

    // Ctrl-C: SIGINT to `ferry run` stops the job and leaves nothing on the hosts.
    let (done, _) = signalled_while_sleeping(&tb, "h1", &format!("{FERRY} run "), "-INT");
    assert_eq!(done.code, Some(130), "{}", done.show());
    assert!(done.stderr.contains("SIGINT"), "{}", done.show());
    assert_nothing_left(&tb);

    tb.down().expect("down");
}

/// `srun ARGS…` on the head of `tb`, with the deadline of [`finish`].
fn srun(tb: &Testbed, args: &[&str]) -> Done {
    let command: Vec<&str> = ["srun"].iter().chain(args).copied().collect();
    let start = Instant::now();
    finish(start_on_head(tb, &command, &[], Stdio::null()), start)
}

/// A fresh Slurm testbed of three hosts with two CPUs each, removed when dropped.
fn slurm_testbed(tag: &str) -> Testbed {
    testbed_of(&grid("hosts3.toml"), tag, &UpOptions::with_slurm()).0
}

/// `srun -N 3 -n 6 --mpi=pmi2 PROGRAM ARGS…` on the head of a fresh Slurm testbed.
fn srun_pmi2(tag: &str, program: &[&str]) -> Done {
    let tb = slurm_testbed(tag);
    let args: Vec<&str> = ["-N", "3", "-n", "6", "--mpi=pmi2"]
        .iter()
        .chain(program)
        .copied()
        .collect();
    let done = srun(&tb, &args);
    tb.down().expect("down");
    done
}

/// Direct launch: `srun --mpi=pmi2` starts the ranks itself and they bootstrap through
/// Slurm's PMI server (`srun --mpi=list` here: pmi2, pmix, cray_shasta, none; no pmi1); each
/// publishes its host's address, so the ranks of other hosts reach it.
#[test]
fn srun_with_pmi2_starts_the_ranks_itself() {
    let Some(check) = check_if_slurm_runs() else {
        return;
    };
    let check = check.as_str();
    let done = srun_pmi2("p", &[check, "allpairs"]);
    assert_eq!(done.code, Some(0), "{}", done.show());
    assert!(
        done.stdout.contains("allpairs ok: 6 ranks"),
        "{}",
        done.show()
    );
}

/// Direct launch through PMIx: `srun --mpi=pmix` (Slurm's `mpi_pmix_v4` plugin, OpenPMIx 4.2)
/// starts the ranks and they bootstrap through the system's libpmix, loaded at run time. The
/// testbed needs nothing more for it: each host's private `/tmp` keeps the plugin's per-step
/// directories apart (with one `/tmp` for all, the second host's stepd fails with
/// `pmixp_mkdir: Cannot create directory "/tmp/spmix_appdir_…": File exists`), and its server
/// lives under the host's `SlurmdSpoolDir`. Two hosts of two ranks: shared memory within a host,
/// TCP between. Then failures: a rank killed mid-job ends the job at once (its peers see it go
/// and abort through PMIx_Abort, whose code srun passes on), and a rank that exits before it
/// joins ends the step under `srun -K` (`--kill-on-bad-exit`; without it Slurm keeps the
/// others, which wait in the first fence, as under pmi2).
#[test]
fn srun_with_pmix_starts_the_ranks_itself() {
    let Some(check) = check_if_slurm_runs() else {
        return;
    };
    let check = check.as_str();
    let has_libpmix = Command::new("sh")
        .args(["-c", "ldconfig -p | grep -q 'libpmix.so.2 '"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_libpmix {
        eprintln!("skipped: no libpmix.so.2 (Debian package libpmix2)");
        return;
    }
    let tb = slurm_testbed("x");
    let plugins = srun(&tb, &["--mpi=list"]);
    if !format!("{}{}", plugins.stdout, plugins.stderr).contains("pmix") {
        eprintln!("skipped: this Slurm has no pmix plugin: {}", plugins.show());
        return;
    }
    let pmix = ["-N", "2", "-n", "4", "--mpi=pmix"];
    let with =
        |args: &[&str]| -> Vec<String> { pmix.iter().chain(args).map(|s| s.to_string()).collect() };
    let run = |args: &[&str]| {
        let argv = with(args);
        srun(&tb, &argv.iter().map(String::as_str).collect::<Vec<_>>())
    };

    let done = run(&[check, "routes"]);
    assert_eq!(done.code, Some(0), "{}", done.show());
    eprintln!("routes took {:.3} s", done.took.as_secs_f64());
    assert_routes(&done.stdout, 4, 2);

    let done = run(&[check, "allpairs"]);
    assert_eq!(done.code, Some(0), "{}", done.show());
    assert!(
        done.stdout.contains("allpairs ok: 4 ranks"),
        "{}",
        done.show()
    );

    // Rank 1 kills itself mid-job: its peers abort with code 3 through PMIx.
    let done = run(&[check, "die"]);
    eprintln!(
        "a killed rank ended the job in {:.3} s",
        done.took.as_secs_f64()
    );
    assert_ne!(done.code, Some(0), "{}", done.show());
    assert!(done.stderr.contains("lost rank 1"), "{}", done.show());
    assert!(done.stderr.contains("abort (code 3)"), "{}", done.show());
    assert!(done.took < Duration::from_secs(10), "{}", done.show());

    // Rank 3 exits 7 before it joins; -K ends the others.
    let mut argv = vec!["-K"];
    argv.extend(pmix);
    let script = format!(r#"[ "$PMIX_RANK" = 3 ] && exit 7; exec {check} allpairs"#);
    argv.extend(["sh", "-c", &script]);
    let done = srun(&tb, &argv);
    assert_ne!(done.code, Some(0), "{}", done.show());
    assert!(
        done.stderr.contains("task 3: Exited with exit code 7"),
        "{}",
        done.show()
    );
    assert!(done.took < Duration::from_secs(10), "{}", done.show());
    tb.down().expect("down");
}
