//! `ferry run` end to end: the built binary, `sh -c` scripts as ranks.

mod common;

use common::{assert_fails, ferry, output_within, sorted_lines, text};
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// `ferry run ARGS…`, which must end within `limit`.
fn run(args: &[&str], limit: Duration) -> Output {
    output_within(
        ferry().arg("run").args(args),
        &format!("ferry run {args:?}"),
        limit,
    )
}

/// `MPIEXEC_TIMEOUT=VALUE ferry run ARGS…`, which must end within `limit`.
fn with_timeout_env(value: &str, args: &[&str], limit: Duration) -> Output {
    output_within(
        ferry().env("MPIEXEC_TIMEOUT", value).arg("run").args(args),
        &format!("MPIEXEC_TIMEOUT={value} ferry run {args:?}"),
        limit,
    )
}

/// `ferry run -n RANKS sh -c SCRIPT` must end within 5 s with exit code `code` and a stderr
/// that says each of `says`.
fn fails_with(ranks: &str, script: &str, code: i32, says: &[&str]) {
    let out = run(&["-n", ranks, "sh", "-c", script], Duration::from_secs(5));
    assert_eq!(out.status.code(), Some(code));
    let stderr = text(&out.stderr);
    for words in says {
        assert!(stderr.contains(words), "no {words:?} in {stderr}");
    }
}

/// `ferry run -n 2 sh -c SCRIPT` is sent `signal` once it has printed its first line; returns
/// that line, how the launcher ended and how long that took after the signal.
fn signalled_after_first_line(script: &str, signal: &str) -> (String, ExitStatus, Duration) {
    let mut child = ferry()
        .args(["run", "-n", "2", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferry runs");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a first line");
    let start = Instant::now();
    Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
    let status = child.wait().expect("ferry ends");
    (line, status, start.elapsed())
}

#[test]
fn success_prints_only_the_ranks_output() {
    let out = run(
        &["-n", "3", "sh", "-c", "echo hello"],
        Duration::from_secs(5),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "hello\nhello\nhello\n");
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn exit_status_of_the_failing_rank() {
    fails_with(
        "3",
        r#"[ "$FERRY_RANK" = 2 ] && exit 3; exit 0"#,
        3,
        &["ferry run: rank 2 (host ", "exited with code 3"],
    );
}

#[test]
fn killed_rank_is_named_and_the_job_ends() {
    fails_with(
        "4",
        r#"if [ "$FERRY_RANK" = 1 ]; then kill -9 $$; else sleep 30; fi"#,
        137,
        &["rank 1 ", "killed by signal 9 (SIGKILL)"],
    );
}

#[test]
fn tagged_output() {
    let out = run(
        &[
            "--tag-output",
            "-n",
            "3",
            "sh",
            "-c",
            "echo out $FERRY_RANK; echo err >&2; printf partial",
        ],
        Duration::from_secs(5),
    );
    assert_eq!(out.status.code(), Some(0));
    let mut expected = Vec::new();
    for rank in 0..3 {
        expected.push(format!("[{rank}] out {rank}"));
        expected.push(format!("[{rank}] partial"));
    }
    expected.sort();
    assert_eq!(sorted_lines(&out.stdout), expected);
    assert_eq!(sorted_lines(&out.stderr), ["[0] err", "[1] err", "[2] err"]);
}

#[test]
fn untagged_partial_lines_stay_byte_exact() {
    let out = run(&["sh", "-c", "printf 'a\\nb'"], Duration::from_secs(5));
    assert_eq!(text(&out.stdout), "a\nb");
}

#[test]
fn lines_never_interleave() {
    // Each rank prints 300 lines of 1000 copies of its rank digit, in several writes per line.
    let script = r#"i=0; while [ $i -lt 300 ]; do
        printf '%0500d' 0 | tr 0 "$FERRY_RANK"; printf '%0500d\n' 0 | tr 0 "$FERRY_RANK"
        i=$((i+1)); done"#;
    let out = run(&["-n", "4", "sh", "-c", script], Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1200);
    for line in lines {
        assert_eq!(line.len(), 1000);
        let first = line.as_bytes()[0];
        assert!(line.bytes().all(|b| b == first), "mixed line: {line}");
    }
}

#[test]
fn a_line_is_visible_while_its_rank_still_runs() {
    let (line, status, took) = signalled_after_first_line("echo ready; exec sleep 30", "-TERM");
    assert_eq!(line, "ready\n");
    assert_eq!(status.code(), Some(128 + 15));
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[test]
fn sigint_is_passed_on_and_stubborn_ranks_are_killed() {
    let (_, status, took) =
        signalled_after_first_line(r#"trap '' INT TERM; echo up; exec sleep 30"#, "-INT");
    assert_eq!(status.code(), Some(128 + 2));
    // The ranks ignore SIGINT: they are killed after the 2 s grace.
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn timeout_option_and_environment() {
    let out = run(
        &["--timeout", "0.5", "-n", "2", "sleep", "30"],
        Duration::from_secs(4),
    );
    assert_fails(&out, 124, "ferry run: job timed out after 0.5 s");

    let out = with_timeout_env("1", &["-n", "2", "sleep", "30"], Duration::from_secs(4));
    assert_fails(&out, 124, "job timed out after 1 s");

    // The option wins over the environment.
    let out = with_timeout_env(
        "100",
        &["--timeout", "0.3", "sleep", "30"],
        Duration::from_secs(3),
    );
    assert_eq!(out.status.code(), Some(124));

    let out = with_timeout_env("soon", &["true"], Duration::from_secs(4));
    assert_fails(&out, 1, "MPIEXEC_TIMEOUT");
}

#[test]
fn shared_memory_is_cleaned_up() {
    let out = run(
        &[
            "-n",
            "2",
            "sh",
            "-c",
            r#"touch /dev/shm/ferry-$FERRY_JOB_ID-x$FERRY_RANK; [ $FERRY_RANK = 0 ] && echo $FERRY_JOB_ID; true"#,
        ],
        Duration::from_secs(5),
    );
    assert_eq!(out.status.code(), Some(0));
    let job = text(&out.stdout);
    let job = job.trim();
    assert!(job.parse::<u64>().is_ok(), "{job:?}");
    for rank in 0..2 {
        assert!(!std::path::Path::new(&format!("/dev/shm/ferry-{job}-x{rank}")).exists());
    }
}

#[test]
fn sixty_four_ranks() {
    let out = run(&["-n", "64", "true"], Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn mpiexec_spelling_and_verbatim_arguments() {
    let out = run(
        &[
            "-np",
            "2",
            "sh",
            "-c",
            r#"printf '%s|' "$@"; echo"#,
            "x",
            "-n",
            "--tag-output",
            "-np",
        ],
        Duration::from_secs(5),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "-n|--tag-output|-np|\n-n|--tag-output|-np|\n"
    );
}

#[test]
fn transport_is_passed_to_the_ranks() {
    let out = run(
        &["--transport", "tcp", "sh", "-c", "echo $FERRY_TRANSPORT"],
        Duration::from_secs(5),
    );
    assert_eq!(text(&out.stdout), "tcp\n");
    let out = ferry()
        .args(["run", "--transport", "carrier-pigeon", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn missing_program() {
    let out = run(
        &["-n", "2", "ferry-no-such-program"],
        Duration::from_secs(5),
    );
    assert_fails(
        &out,
        127,
        "ferry run: ferry-no-such-program: program not found\n",
    );
}

/// Ranks that have a core each lead a session of their own (pid = process group = session),
/// as under MPICH's hydra: with the kernel's autogroups a session is what CPU time is shared
/// among, and ranks left in the launcher's would share one slice with whatever else that shell
/// runs. Ranks that outnumber the cores lead only a process group and stay in the launcher's
/// session, where sched_yield hands the core from one to another.
#[test]
fn ranks_with_a_core_each_lead_sessions_of_their_own() {
    // Fields 4 to 6 of /proc/<pid>/stat: parent, process group, session ("sh" has no spaces).
    let script = "set -- $(cat /proc/$$/stat); echo \"pid=$1 group=$5 session=$6\"";
    let ids = |np: usize| -> Vec<[String; 3]> {
        let out = run(
            &["-n", &np.to_string(), "sh", "-c", script],
            Duration::from_secs(5),
        );
        let lines = sorted_lines(&out.stdout);
        assert_eq!(lines.len(), np, "{}", text(&out.stdout));
        lines
            .iter()
            .map(|line| {
                let ids: Vec<String> = line
                    .split(' ')
                    .filter_map(|f| f.split('=').nth(1).map(str::to_owned))
                    .collect();
                ids.try_into().unwrap_or_else(|_| panic!("{line}"))
            })
            .collect()
    };
    let cores = ferry_launch::usable_cores();
    for [pid, group, session] in ids(cores.min(4)) {
        assert!(
            pid == group && pid == session,
            "not its own session: {pid} {group} {session}"
        );
    }
    let ours = std::fs::read_to_string("/proc/self/stat").expect("stat");
    let our_session = ours
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(3));
    for [pid, group, session] in ids(cores + 1) {
        assert_eq!(pid, group, "not its own process group");
        assert_eq!(
            Some(session.as_str()),
            our_session,
            "oversubscribed, left our session"
        );
    }
}

#[test]
fn bind_to_core_gives_each_rank_one_core_and_none_leaves_them_free() {
    let allowed = |out: &Output| -> Vec<String> {
        sorted_lines(&out.stdout)
            .into_iter()
            .filter(|l| l.starts_with("Cpus_allowed_list"))
            .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
            .collect()
    };
    // A bound rank is also told how many cores the job's ranks share here, so that it does
    // not count its own one alone and take its peers for rivals.
    let host_cores = |out: &Output| -> Vec<String> {
        sorted_lines(&out.stdout)
            .into_iter()
            .filter_map(|l| l.strip_prefix("host_cores=").map(str::to_owned))
            .collect()
    };
    let script =
        "grep Cpus_allowed_list /proc/self/status; echo host_cores=${FERRY_HOST_CORES:-unset}";
    let ours = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Cpus_allowed_list"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .expect("Cpus_allowed_list");
    let free = run(
        &["-n", "2", "--bind-to", "none", "sh", "-c", script],
        Duration::from_secs(5),
    );
    assert_eq!(allowed(&free), [ours.clone(), ours.clone()]);
    let bound = run(
        &["-n", "2", "--bind-to", "core", "sh", "-c", script],
        Duration::from_secs(5),
    );
    assert_eq!(host_cores(&free), ["unset", "unset"]);
    let ours_count = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .to_string();
    assert_eq!(host_cores(&bound), [ours_count.clone(), ours_count]);
    let cores = allowed(&bound);
    assert_eq!(cores.len(), 2, "{}", text(&bound.stdout));
    assert!(
        cores.iter().all(|c| c.parse::<usize>().is_ok()),
        "each rank on one core: {cores:?}"
    );
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        assert_ne!(cores[0], cores[1], "two ranks on two cores");
    }
}
