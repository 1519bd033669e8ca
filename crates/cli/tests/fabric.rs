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
//!   naming it.
//!
//! One testbed (per-run prefix) per test, removed on drop, also when an assertion fails.
//! Without root, sshd or libfabric the tests say so and pass.

mod common;
use common::{example, grid_file, show};
use ferry_grid::Topology;
use ferry_testbed::{Testbed, UpOptions};
use std::process::{Command, Output, Stdio};

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

fn up() -> Option<Hosts> {
    if !libfabric_here() {
        eprintln!("skipped: libfabric.so.1 is not installed (apt-get install libfabric1)");
        return None;
    }
    if let Err(e) = UpOptions::with_ssh().preflight() {
        eprintln!("skipped: {e}");
        return None;
    }
    let topology = Topology::load(&grid_file("hosts3.toml")).expect("the grid file parses");
    let prefix = format!("fy{}fb-", std::process::id());
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
    let Some(hosts) = up() else {
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
