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
//! - two hosts with two NICs each (two bridges, two subnets): a pair has two rails
//!   (`--show-paths` names them), four ranks exchange checked messages up to 16 MiB and
//!   truncate short receives, 16 MiB messages checked byte by byte go over both (bytes
//!   counted on each interface), and with one rail cut mid-stream (its packets answered with
//!   a TCP reset) the stream finishes over the other, correct, the rank saying so once;
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

/// The testbed of a test on the three hosts of `hosts3.toml`; `test` (a letter) keeps the
/// namespaces of tests running at once apart.
fn up(test: char) -> Option<Hosts> {
    up_on(
        test,
        Topology::load(&grid_file("hosts3.toml")).expect("the grid file parses"),
    )
}

/// Two hosts, each with two NICs on two bridges and subnets: `eth0` on the WAN
/// (198.18.0.0/15) and `rail1` on a link of their own (10.203.0.0/24).
const TWO_NICS: &str = r#"
[[cluster]]
name = "h"
kind = "public"
[[cluster.link]]
subnet = "10.203.0.0/24"
[[cluster.host]]
name = "h1"
addr = "198.18.1.1"
rails = ["10.203.0.1"]
[[cluster.host]]
name = "h2"
addr = "198.18.1.2"
rails = ["10.203.0.2"]
"#;

/// The testbed of a test on `topology`.
fn up_on(test: char, topology: Topology) -> Option<Hosts> {
    if !libfabric_here() {
        eprintln!("skipped: libfabric.so.1 is not installed (apt-get install libfabric1)");
        return None;
    }
    if let Err(e) = UpOptions::with_ssh().preflight() {
        eprintln!("skipped: {e}");
        return None;
    }
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

const TWO: &[&str] = &["--hosts", "h1:1,h2:1", "-n", "2"];
/// Messages of the rail tests: large enough to be striped into many pieces.
const SIXTEEN_MIB: &str = "16777216";

impl Hosts {
    /// The rails of the pair r0, r1 (on h1 and h2), rail 0 first, as `--show-paths` names
    /// them (`ofi:tcp;ofi_rxm: r0 <-> r1 (2 rails: rail1, eth0)`: libfabric's order).
    fn rails(&self, check: &str) -> Vec<String> {
        let out = self.output(&[TWO, &["--show-paths", check, "routes"]].concat());
        assert!(out.status.success(), "{}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let rails = stdout
            .lines()
            .find_map(|l| l.strip_prefix("ofi:tcp;ofi_rxm: r0 <-> r1 (2 rails: "))
            .and_then(|l| l.strip_suffix(')'));
        let rails = rails.unwrap_or_else(|| panic!("two rails named: {}", show(&out)));
        rails.split(", ").map(str::to_string).collect()
    }

    /// Bytes sent so far on `host`'s interface `dev`, as its kernel counts them.
    fn tx_bytes(&self, host: &str, dev: &str) -> u64 {
        let ns = self.tb.namespace(host).expect("the host's namespace");
        let path = format!("/sys/class/net/{dev}/statistics/tx_bytes");
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "cat", &path])
            .output()
            .expect("ip netns exec runs");
        assert!(out.status.success(), "{}", show(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{path}: {text:?}: {e}"))
    }

    /// Runs `iptables ARGS…` in `host`'s namespace.
    fn iptables(&self, host: &str, args: &[&str]) {
        let ns = self.tb.namespace(host).expect("the host's namespace");
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "iptables"])
            .args(args)
            .output()
            .expect("ip netns exec runs");
        assert!(out.status.success(), "iptables {args:?}: {}", show(&out));
    }
}

/// Two hosts with two NICs each: the pair's two rails are named, every pair of four ranks
/// exchanges checked messages up to 16 MiB, short receives behave, and a stream of 16 MiB
/// messages (checked byte by byte by its receiver) leaves the sender's host over both NICs.
/// With `FERRY_RAILS=1` the same stream keeps to one; both rates go to stderr (the figures
/// of docs/fabric.md).
#[test]
fn over_two_nics_a_pair_has_two_fabric_rails_and_large_messages_use_both() {
    let Some(hosts) = up_on(
        'r',
        Topology::parse("two-nics.toml", TWO_NICS).expect("parses"),
    ) else {
        return;
    };
    let check = example("check");
    let check = check.to_str().expect("a UTF-8 path");

    let mut rails = hosts.rails(check);
    rails.sort();
    assert_eq!(rails, ["eth0", "rail1"]);

    // Two ranks a host: every pair exchanges checked messages up to 16 MiB (reads striped
    // between the hosts, several at once), and short receives read only what they take.
    let four: &[&str] = &["--hosts", "h1:2,h2:2", "-n", "4"];
    let out = hosts.output(&[four, &["--tag-output", check, "allpairs", SIXTEEN_MIB]].concat());
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[0] allpairs ok: 4 ranks"),
        "{}",
        show(&out)
    );
    let out = hosts.output(&[four, &[check, "truncate"]].concat());
    assert!(out.status.success(), "{}", show(&out));

    let count = 32u64;
    // Unset, FERRY_RAILS lets a rank take every NIC; 1 keeps it to the first.
    for rails in ["", "1"] {
        let before = [hosts.tx_bytes("h1", "eth0"), hosts.tx_bytes("h1", "rail1")];
        let setting = match rails {
            "" => "-u FERRY_RAILS".to_string(),
            r => format!("FERRY_RAILS={r}"),
        };
        let script = format!("exec env {setting} {check} stream {SIXTEEN_MIB} {count}");
        let out = hosts.output(&[TWO, &["sh", "-c", &script]].concat());
        assert!(out.status.success(), "{}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ok = stdout.lines().find(|l| l.starts_with("stream ok"));
        assert!(ok.is_some(), "{}", show(&out));
        let sent = [
            hosts.tx_bytes("h1", "eth0") - before[0],
            hosts.tx_bytes("h1", "rail1") - before[1],
        ];
        let total = count * (16 << 20);
        eprintln!(
            "FERRY_RAILS={rails:?}: {} (h1 sent eth0 {} B, rail1 {} B)",
            ok.unwrap_or(""),
            sent[0],
            sent[1]
        );
        assert!(
            sent[0] + sent[1] >= total,
            "{sent:?} of {total} B: {}",
            show(&out)
        );
        if rails.is_empty() {
            // Each rail carried a good share (a quarter at least) of the bytes.
            assert!(
                sent.iter().all(|&b| b >= total / 4),
                "{sent:?}: {}",
                show(&out)
            );
        } else {
            let quiet = sent.iter().min().copied().unwrap_or(0);
            assert!(
                quiet < total / 100,
                "one rail only: {sent:?}: {}",
                show(&out)
            );
        }
    }
}

/// Rank 0 (on h1) streams 16 MiB messages to rank 1 (on h2), which reads them over both
/// rails; once the stream runs, h1 answers every packet of the fabric that comes in on the
/// NIC of rail 1 with a TCP reset (the fabric's ports are set apart with the tcp provider's
/// port range, so that ssh and the launcher's connections on that NIC go on). Rank 1's reads
/// there fail; they are read again over rail 0, rank 1 says so once, and the stream ends with
/// every message correct.
#[test]
fn a_fabric_rail_cut_mid_stream_leaves_the_job_finishing_over_the_other() {
    let Some(hosts) = up_on(
        'c',
        Topology::parse("two-nics.toml", TWO_NICS).expect("parses"),
    ) else {
        return;
    };
    let check = example("check");
    let check = check.to_str().expect("a UTF-8 path");
    // The rail to cut: rail 1 (rail 0 carries the frames).
    let cut = hosts.rails(check).pop().expect("two rails");
    let (count, ports) = ("200", "31000:31999");
    let script = format!(
        "exec env FI_TCP_PORT_LOW_RANGE=31000 FI_TCP_PORT_HIGH_RANGE=31999 {check} stream {SIXTEEN_MIB} {count} 1"
    );
    let mut child = hosts
        .run(&[TWO, &["sh", "-c", &script]].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferry runs");
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let mut seen = Vec::new();
    // Cut once the stream runs (its first window is in).
    for line in lines.by_ref() {
        let line = line.unwrap_or_default();
        let started = line.starts_with("stream progress");
        seen.push(line);
        if started {
            break;
        }
    }
    for side in ["--dport", "--sport"] {
        let rule = ["-A", "INPUT", "-i", &cut, "-p", "tcp", side, ports];
        hosts.iptables(
            "h1",
            &[&rule[..], &["-j", "REJECT", "--reject-with", "tcp-reset"]].concat(),
        );
    }
    seen.extend(lines.map(Result::unwrap_or_default));
    let status = child.wait().expect("ferry ends");
    let (stdout, stderr) = (seen.join("\n"), errors.join().unwrap_or_default());
    let show = format!("status {status:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(status.success(), "{show}");
    assert!(
        stdout.contains(&format!("stream ok: {count} x {SIXTEEN_MIB} bytes")),
        "{show}"
    );
    let said = stderr
        .matches(&format!(
            "fabric rail 1 ({cut}, tcp;ofi_rxm) to rank 0 failed"
        ))
        .count();
    assert_eq!(said, 1, "said once: {show}");
    let line = stderr.lines().find(|l| l.contains("fabric rail 1"));
    eprintln!("{}", line.unwrap_or_default());
    assert!(stderr.contains("rank 1 (host h2)"), "{show}");
}
