//! Rust ranks started by MPICH's process manager (`mpiexec.hydra -launcher fork`) instead of
//! `ferry run`: they find `PMI_FD` (or `PMI_PORT` and `PMI_ID` with hydra's `-pmi-port`), speak
//! PMI-1 to hydra, and run ferry-core's self-checking `check` example (point-to-point of every
//! size, collectives) on both transports.
//!
//! Skipped, saying so, where `mpiexec.hydra` is missing (Debian's `mpich` package has it;
//! `scripts/setup.sh` installs it). Each run is bounded by `timeout`: hydra can hang when a
//! rank misbehaves.

mod common;
use common::{example, show};
use std::process::{Command, Output};
use std::sync::Mutex;

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn hydra_missing() -> bool {
    let found = Command::new("sh")
        .args(["-c", "command -v mpiexec.hydra"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: mpiexec.hydra is not installed (Debian package mpich)");
    }
    !found
}

/// `timeout 120 mpiexec.hydra -launcher fork -n N check <args>` with `FERRY_TRANSPORT` set
/// (`None`: ferry's default).
fn check_under_hydra(n: u32, transport: Option<&str>, args: &[&str]) -> Output {
    check_under_hydra_with(&[], &[], n, transport, args)
}

/// [`check_under_hydra`] with options for hydra and environment for the ranks.
fn check_under_hydra_with(
    hydra_options: &[&str],
    env: &[(&str, &str)],
    n: u32,
    transport: Option<&str>,
    args: &[&str],
) -> Output {
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("timeout");
    // A FERRY_RANK from an enclosing `ferry run` would win over hydra.
    cmd.env_remove("FERRY_RANK").env_remove("FERRY_TRANSPORT");
    if let Some(t) = transport {
        cmd.env("FERRY_TRANSPORT", t);
    }
    cmd.envs(env.iter().copied());
    cmd.args(["-k", "5", "120", "mpiexec.hydra", "-launcher", "fork"])
        .args(hydra_options)
        .arg("-n")
        .arg(n.to_string())
        .arg(example("check"))
        .args(args);
    cmd.output().expect("run timeout mpiexec.hydra")
}

#[test]
fn point_to_point_and_collectives_under_hydra() {
    if hydra_missing() {
        return;
    }
    for transport in [None, Some("tcp")] {
        let out = check_under_hydra(4, transport, &["allpairs", "4194304", "2"]);
        assert!(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains("allpairs ok: 4 ranks"),
            "{transport:?}: {}",
            show(&out)
        );
        let out = check_under_hydra(4, transport, &["coll"]);
        assert!(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains("coll ok: 4 ranks"),
            "{transport:?}: {}",
            show(&out)
        );
    }
}

#[test]
fn shared_memory_is_used_by_default_on_one_host() {
    if hydra_missing() {
        return;
    }
    for (transport, expected) in [(None, "shm"), (Some("tcp"), "tcp")] {
        let out = check_under_hydra(3, transport, &["transport"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", show(&out));
        for rank in 0..3 {
            assert!(
                stdout.contains(&format!("rank {rank}: transport {expected}")),
                "{transport:?}: {}",
                show(&out)
            );
        }
    }
}

#[test]
fn ranks_reach_hydra_over_pmi_port_without_an_inherited_socket() {
    if hydra_missing() {
        return;
    }
    // `-pmi-port`: hydra sets PMI_PORT and PMI_ID (no PMI_FD, no PMI_RANK); the ranks learn
    // who they are from its `cmd=set` lines.
    let out = check_under_hydra_with(&["-pmi-port"], &[], 3, None, &["coll"]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("coll ok: 3 ranks"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_card_longer_than_a_hydra_value_is_split_over_keys() {
    if hydra_missing() {
        return;
    }
    // 80 rail addresses make each rank's card about 1 KB, 2 KB as hex: more than hydra's
    // vallen_max of 1024, which it would silently drop.
    let addrs: Vec<String> = (1..=80).map(|i| format!("127.0.0.{i}")).collect();
    let addrs = addrs.join(",");
    let env = [("FERRY_RAIL_ADDRS", addrs.as_str()), ("FERRY_RAILS", "2")];
    let out = check_under_hydra_with(&[], &env, 3, Some("tcp"), &["allpairs", "1048576", "1"]);
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("allpairs ok: 3 ranks"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_pmi_fd_that_is_not_open_is_named_in_the_error() {
    let out = Command::new(example("check"))
        .arg("coll")
        .env_remove("FERRY_RANK")
        .env("PMI_FD", "987")
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("PMI_FD=987 is not an open file descriptor"),
        "{}",
        show(&out)
    );
}
