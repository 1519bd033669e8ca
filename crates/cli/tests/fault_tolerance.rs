//! `ferry run --fault-tolerant`: a job whose rank dies goes on (the Rust API's ULFM, the
//! `survive` example), and without the flag the same death ends the job, naming the rank.

mod common;

use common::{example, ferry, output_within, text};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn survivors_shrink_and_go_on_on_shared_memory_and_tcp() {
    let survive = example("survive");
    for transport in ["shm", "tcp"] {
        let out = output_within(
            ferry()
                .args(["run", "--fault-tolerant", "--timeout", "40", "-n", "4"])
                .args(["--transport", transport])
                .arg(&survive),
            "survive",
            LIMIT,
        );
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{transport}: {stdout}\n{stderr}");
        for want in [
            "round 0: sum 4 over 4 ranks",
            "round 3: sum 3 over 3 ranks",
            "survivors 3 of 4",
        ] {
            assert!(
                stdout.contains(want),
                "{transport}: no {want:?} in\n{stdout}"
            );
        }
        assert!(
            stderr.contains("rank 3") && stderr.contains("1 of 4 ranks failed"),
            "{transport}: the launcher does not say what failed:\n{stderr}"
        );
    }
}

#[test]
fn a_rank_of_a_node_daemon_dies_and_the_others_go_on() {
    // Two node daemons on this machine (both names are this host): the death comes to the
    // launcher through a daemon, the survivors learn it over TCP.
    let host = ferry_launch::this_host();
    let hosts = format!("localhost:2,{host}:2");
    let out = output_within(
        ferry()
            .args(["run", "--fault-tolerant", "--timeout", "40", "-n", "4"])
            .args([
                "--launcher",
                "local",
                "--hosts",
                &hosts,
                "--transport",
                "tcp",
            ])
            .arg(example("survive")),
        "survive",
        LIMIT,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("survivors 3 of 4"),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn a_lost_host_takes_its_ranks_and_the_others_go_on() {
    // The last rank kills its node daemon, so the second host is lost with both its ranks.
    let host = ferry_launch::this_host();
    let hosts = format!("localhost:2,{host}:2");
    let run = |fault_tolerant: bool| {
        let mut command = ferry();
        command.arg("run");
        if fault_tolerant {
            command.arg("--fault-tolerant");
        }
        command
            .args(["--timeout", "40", "-n", "4", "--launcher", "local"])
            .args(["--hosts", &hosts, "--transport", "tcp"])
            .arg(example("survive"))
            .args(["4", "host"]);
        output_within(&mut command, "survive", LIMIT)
    };
    let out = run(true);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("survivors 2 of 4"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("host {host}")) && stderr.contains("the job goes on"),
        "the launcher does not say which host was lost:\n{stderr}"
    );
    // Without the flag the job ends, naming the host.
    let out = run(false);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&host),
        "the lost host is not named:\n{stderr}"
    );
}

#[test]
fn without_the_flag_a_death_ends_the_job_and_names_the_rank() {
    let out = output_within(
        ferry()
            .args(["run", "--timeout", "40", "-n", "3"])
            .arg(example("survive")),
        "survive",
        LIMIT,
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "the job succeeded:\n{stderr}");
    assert!(
        stderr.contains("rank 2") && stderr.contains("signal 9"),
        "the launcher does not name the dead rank:\n{stderr}"
    );
}

#[test]
fn mpiexec_spellings_of_fault_tolerance_are_accepted() {
    let mpiexec = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../mpi/bin/mpiexec");
    for spelling in [&["--with-ft", "ulfm"][..], &["-disable-auto-cleanup"]] {
        let out = output_within(
            std::process::Command::new(&mpiexec)
                .env("FERRY_BIN", env!("CARGO_BIN_EXE_ferry"))
                .args(spelling)
                .args(["-n", "3"])
                .arg(example("survive")),
            "mpiexec survive",
            LIMIT,
        );
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success() && stdout.contains("survivors 2 of 3"),
            "{spelling:?}: {stdout}\n{stderr}"
        );
    }
}
