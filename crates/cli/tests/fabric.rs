//! The fabric transport between hosts: three namespace hosts with their own sshd (`ferry
//! testbed up --ssh`), two ranks each, `FERRY_NET=ofi` on libfabric's tcp provider
//! (`FI_PROVIDER=tcp`, layered as `tcp;ofi_rxm`: the only provider of Debian's libfabric that
//! reaches another host here; real RDMA NICs take the same code path).
//!
//! - ranks of one host talk over shared memory, the others over the fabric (`check routes`,
//!   and `--show-paths` names each pair's `ofi:<provider>`);
//! - every pair exchanges checked messages of 0 B … 8 MiB (eager frames, and rendezvous whose
//!   receiver reads the sender's registered memory), the collectives match the sequential
//!   reference, wildcard receives and truncation behave, across the hosts;
//! - the ranks of a host without libfabric (`FERRY_FABRIC_LIB` naming no file there) reach the
//!   others over TCP, and say why; the job runs;
//! - a rank killed while a peer on another host reads a 256 MiB message from it ends the job,
//!   naming it;
//! - in a job of two hosts, a rank killed (SIGKILL) while its peer waits in a receive from it
//!   over the fabric ends the job at once, naming it, never at the job's timeout; and a rank
//!   stopped (SIGSTOP) in the middle of a stream is lost by its peer after the connect timeout.
//!
//! One testbed (per-run, per-test prefix) per test, removed on drop, also when an assertion
//! fails.
//! Without root, sshd or libfabric the tests say so and pass.

mod common;
use common::{example, grid_file, show};
use ferry_grid::Topology;
use ferry_testbed::{Testbed, UpOptions};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Hosts {
    tb: Testbed,
}

impl Hosts {
    /// `ferry run ARGS…` from h1 with `FERRY_NET=ofi FI_PROVIDER=tcp`, as a user there would.
    fn run(&self, args: &[&str]) -> Command {
        let ssh = self.tb.ssh_command().expect("an ssh testbed").join(" ");
        let enter = self.tb.host_command("h1").expect("h1 runs sshd");
        let mut command = Command::new(&enter[0]);
        command
            .args(&enter[1..])
            .args(["env", &format!("FERRY_SSH={ssh}")])
            .args(["FERRY_NET=ofi", "FI_PROVIDER=tcp"])
            .arg(env!("CARGO_BIN_EXE_ferry"))
            .args(["run", "--timeout", "90"])
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

/// The testbed of a test; `test` (a letter) keeps the namespaces of tests running at once
/// apart.
fn up(test: char) -> Option<Hosts> {
    if !libfabric_here() {
        eprintln!("skipped: libfabric.so.1 is not installed (apt-get install libfabric1)");
        return None;
    }
    if let Err(e) = UpOptions::with_ssh().preflight() {
        eprintln!("skipped: {e}");
        return None;
    }
    let topology = Topology::load(&grid_file("hosts3.toml")).expect("the grid file parses");
    let prefix = format!("fy{}fb{test}-", std::process::id());
    let tb =
        Testbed::up_with(&topology, &prefix, &UpOptions::with_ssh()).expect("testbed up --ssh");
    Some(Hosts { tb })
}

fn libfabric_here() -> bool {
    Command::new("sh")
        .args(["-c", "ldconfig -p | grep -q 'libfabric.so.1 '"])
        .status()
        .is_ok_and(|s| s.success())
}

const SIX: &[&str] = &["--hosts", "h1:2,h2:2,h3:2", "-n", "6"];

#[test]
fn a_job_on_three_hosts_over_the_fabric() {
    let Some(hosts) = up('a') else {
        return;
    };
    let check = example("check");
    let check = check.to_str().expect("a UTF-8 path");

    let out = hosts.output(&[SIX, &["--show-paths", check, "routes"]].concat());
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "ofi:tcp;ofi_rxm: r0 <-> r2, r0 <-> r3, r0 <-> r4, r0 <-> r5, r1 <-> r2,",
        "routes 0: self shm ofi ofi ofi ofi",
        "routes 3: ofi ofi shm self ofi ofi",
        "routes 5: ofi ofi ofi ofi shm self",
    ] {
        assert!(stdout.contains(line), "{line}\n{}", show(&out));
    }

    let out = hosts.output(&[SIX, &["--tag-output", check, "allpairs", "8388608"]].concat());
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[0] allpairs ok: 6 ranks"),
        "{}",
        show(&out)
    );
    for case in ["coll", "wildcard", "truncate", "probe"] {
        let out = hosts.output(&[SIX, &[check, case]].concat());
        assert!(out.status.success(), "{case}: {}", show(&out));
    }

    // h3 without libfabric: its ranks say why and everyone reaches them over TCP.
    let on_h3 = format!(
        "if [ $FERRY_RANK -ge 4 ]; then export FERRY_FABRIC_LIB=/nonexistent/libfabric.so.1; fi; exec {check} routes"
    );
    let out = hosts.output(&[SIX, &["sh", "-c", &on_h3]].concat());
    assert!(out.status.success(), "{}", show(&out));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.contains("routes 0: self shm ofi ofi tcp tcp")
            && stdout.contains("routes 4: tcp tcp tcp tcp self shm"),
        "{}",
        show(&out)
    );
    assert!(
        stderr.contains("rank 4: FERRY_NET=ofi: libfabric is not loaded")
            && stderr.contains("/nonexistent/libfabric.so.1"),
        "{}",
        show(&out)
    );
    assert!(
        stderr.contains("rank 0: over TCP, not the fabric") && stderr.contains("4 (no fabric)"),
        "{}",
        show(&out)
    );

    // Rank 0 (on h1) killed while rank 5 (on h3) reads 256 MiB from it over the fabric: the
    // job ends and names it.
    let out = hosts.output(&[SIX, &[check, "die-in-rendezvous"]].concat());
    assert!(!out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rank 0 (host h1"), "{}", show(&out));
}

/// Generous: a job that ends on its own takes seconds; one that hangs ends at `--timeout 90`.
const ENDS_WITHIN: Duration = Duration::from_secs(60);

#[test]
fn a_rank_killed_while_its_peer_waits_on_it_over_the_fabric_ends_the_job() {
    let Some(hosts) = up('k') else {
        return;
    };
    let check = example("check");
    let check = check.to_str().expect("a UTF-8 path");
    const TWO: &[&str] = &["--hosts", "h1:1,h2:1", "-n", "2"];

    let out = hosts.output(&[TWO, &[check, "routes"]].concat());
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("routes 0: self ofi"),
        "the pair is on the fabric: {}",
        show(&out)
    );

    // Rank 1 (on h2) sends itself SIGKILL while rank 0 (on h1) waits in a receive from it.
    let started = Instant::now();
    let out = hosts.output(&[TWO, &[check, "die"]].concat());
    let took = started.elapsed();
    assert!(!out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rank 1 (host h2"), "{}", show(&out));
    assert!(
        !stderr.contains("timed out") && took < ENDS_WITHIN,
        "ended by its timeout after {took:?}: {}",
        show(&out)
    );
}

/// Rank 1 (on h2) stops (SIGSTOP) once it has printed 200 kB of progress lines of a stream
/// from rank 0 (on h1), and is never continued: rank 0, whose sends to it stop completing, loses it after the connect
/// timeout (5 s here) and the job ends with rank 0's error naming rank 1, the provider and
/// the wait.
#[test]
fn a_stopped_rank_is_lost_by_its_peer_over_the_fabric() {
    let Some(hosts) = up('s') else {
        return;
    };
    let check = example("check");
    let check = check.to_str().expect("a UTF-8 path");
    const TWO: &[&str] = &["--hosts", "h1:1,h2:1", "-n", "2"];
    let stop_when_streaming = "while [ \"$(sed -n 's/^wchar: //p' /proc/$$/io)\" -lt 200000 ]; do sleep 0.2; done; kill -STOP $$";
    let script = format!(
        "if [ \"$FERRY_RANK\" = 1 ]; then ({stop_when_streaming}) & fi; exec env FERRY_CONNECT_TIMEOUT=5 {check} stream 1000 100000000 1"
    );
    let started = Instant::now();
    let out = hosts.output(&[TWO, &["sh", "-c", &script]].concat());
    let took = started.elapsed();
    assert!(!out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lost rank 1")
            && stderr.contains("no progress towards it over the fabric (tcp;ofi_rxm) for 5.0 s")
            && stderr.contains("fi_sendv"),
        "{}",
        show(&out)
    );
    assert!(
        !stderr.contains("timed out") && took < ENDS_WITHIN,
        "ended by its timeout after {took:?}: {}",
        show(&out)
    );
}
