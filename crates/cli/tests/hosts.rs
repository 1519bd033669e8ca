//! `ferry run` with `--hosts`, hostfiles and Slurm allocations, as far as one machine can check:
//! hosts that are all this machine run here; others are refused with a clear message.

mod common;

use common::{assert_fails, ferry, output_within, sorted_lines, text};
use std::process::{Command, Output};
use std::time::Duration;

/// Slurm variables that would change where `ferry run` puts ranks.
const SLURM_VARS: [&str; 7] = [
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_TASKS_PER_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_JOB_ID",
];

/// `ferry run ARGS…` outside any Slurm allocation, with `env` added; it must end within 10 s.
fn run_with(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = ferry();
    for var in SLURM_VARS {
        command.env_remove(var);
    }
    command.envs(env.iter().copied()).arg("run").args(args);
    output_within(
        &mut command,
        &format!("ferry run {args:?}"),
        Duration::from_secs(10),
    )
}

fn run(args: &[&str]) -> Output {
    run_with(&[], args)
}

/// This machine's host name, as the launcher reads it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("host name")
        .trim()
        .to_owned()
}

/// A file in a fresh directory of the test's own, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> TempFile {
        let dir =
            std::env::temp_dir().join(format!("ferry-hosts-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

const ECHO_RANK: [&str; 3] = ["sh", "-c", "echo rank $FERRY_RANK of $FERRY_SIZE"];

#[test]
fn hosts_that_are_this_machine_run_here() {
    let out = run(&[&["--hosts", "localhost:2", "-n", "2"][..], &ECHO_RANK].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(sorted_lines(&out.stdout), ["rank 0 of 2", "rank 1 of 2"]);
    assert_eq!(text(&out.stderr), "");
    // MPICH's spelling, this host's own name, -n from the slots (2 + 1).
    let hosts = format!("localhost:2,{}", hostname());
    let out = run(&[&["-hosts", hosts.as_str()][..], &ECHO_RANK].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        sorted_lines(&out.stdout),
        ["rank 0 of 3", "rank 1 of 3", "rank 2 of 3"]
    );
}

#[test]
fn hostfile_in_either_format_runs_here() {
    let file = TempFile::new(
        "hosts",
        "# two formats\nlocalhost:1\n\n127.0.0.1 slots=2 max_slots=4  # loopback\n",
    );
    let out = run(&[&["-f", file.path(), "--map-by", "node"][..], &ECHO_RANK].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        sorted_lines(&out.stdout),
        ["rank 0 of 3", "rank 1 of 3", "rank 2 of 3"]
    );
    let out = run(&[
        &["-machinefile", file.path(), "-ppn", "1", "-rr"][..],
        &ECHO_RANK,
    ]
    .concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(sorted_lines(&out.stdout), ["rank 0 of 2", "rank 1 of 2"]);
}

#[test]
fn a_bad_hostfile_line_is_named_by_file_and_line() {
    let file = TempFile::new("bad", "localhost:2\n# fine so far\nnode2 slots=four\n");
    let out = run(&["--hostfile", file.path(), "true"]);
    assert_fails(
        &out,
        2,
        &format!(
            "ferry run: {}:3: slots \"four\" is not a whole number below 2^32\n",
            file.path()
        ),
    );
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn a_missing_hostfile_is_an_error() {
    let out = run(&["--hostfile", "/nonexistent/ferry-hosts", "true"]);
    assert_fails(
        &out,
        2,
        "ferry run: cannot read hostfile /nonexistent/ferry-hosts: ",
    );
}

#[test]
fn a_bad_hosts_argument_is_an_error() {
    let out = run(&["--hosts", "a:0", "true"]);
    assert_fails(&out, 2, "ferry run: --hosts \"a:0\": slots of a is 0\n");
}

#[test]
fn another_host_that_does_not_resolve_is_named() {
    let out = run(&["--hosts", "localhost:1,node-far-away:1", "-n", "2", "true"]);
    assert_fails(&out, 1, "ferry run: cannot resolve host \"node-far-away\"");
    let out = run(&["--launcher", "rsh", "--host", "node-far-away", "true"]);
    assert_fails(&out, 1, "cannot resolve host");
}

#[test]
fn a_slurm_allocation_of_only_this_host_runs_here() {
    let host = hostname();
    let env = [
        ("SLURM_JOB_NODELIST", host.as_str()),
        ("SLURM_TASKS_PER_NODE", "3"),
        ("SLURM_JOB_ID", "42"),
    ];
    // -n defaults to the allocation's tasks.
    let out = run_with(&env, &ECHO_RANK);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        sorted_lines(&out.stdout),
        ["rank 0 of 3", "rank 1 of 3", "rank 2 of 3"]
    );
    // SLURM_NTASKS wins over the per-node counts; -n over both.
    let env_ntasks = [env[0], env[1], ("SLURM_NTASKS", "2")];
    let out = run_with(&env_ntasks, &ECHO_RANK);
    assert_eq!(sorted_lines(&out.stdout), ["rank 0 of 2", "rank 1 of 2"]);
    let out = run_with(&env_ntasks, &[&["-n", "1"][..], &ECHO_RANK].concat());
    assert_eq!(sorted_lines(&out.stdout), ["rank 0 of 1"]);
}

#[test]
fn a_slurm_allocation_elsewhere_is_launched_there_and_bad_variables_are_named() {
    let env = [
        ("SLURM_JOB_NODELIST", "node[01-03]"),
        ("SLURM_TASKS_PER_NODE", "2(x3)"),
    ];
    let out = run_with(&env, &["true"]);
    // Its hosts are reached through srun: first they must resolve.
    assert_fails(&out, 1, "ferry run: cannot resolve host \"node01\"");
    let env = [
        ("SLURM_JOB_NODELIST", "node[1-3"),
        ("SLURM_TASKS_PER_NODE", "2"),
    ];
    let out = run_with(&env, &["true"]);
    assert_fails(&out, 2, "ferry run: SLURM_JOB_NODELIST=\"node[1-3\": ");
    // An explicit host list does not read the allocation.
    let out = run_with(&env, &["--hosts", "localhost", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn help_says_where_ranks_go() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = text(&out.stdout);
    for needle in [
        "Where ranks go",
        "--hosts <HOSTS>",
        "--hostfile <FILE>",
        "--ppn <N>",
        "--map-by <HOW>",
        "--launcher <HOW>",
        "wrap around",
        "FERRY_SSH",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}
