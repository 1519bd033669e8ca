//! Slurm in the testbed (`ferry testbed up --slurm`), for real, as root: three hosts become a
//! Slurm cluster whose job steps run inside the hosts, and removal leaves no daemon, file or
//! namespace behind. Every command runs under a deadline. Without root, sshd, Slurm or munge
//! these tests say so and pass.

use ferry_grid::Topology;
use ferry_testbed::{leftovers, slurm, ssh, Testbed, UpOptions};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn can_run() -> bool {
    match UpOptions::with_slurm().preflight() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// Runs `argv` with a 20 s deadline; (succeeded, stdout, stderr).
fn run(argv: &[String]) -> (bool, String, String) {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("{argv:?} hung for 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn on(tb: &Testbed, host: &str, cmd: &[&str]) -> (bool, String, String) {
    let mut argv = tb.host_command(host).expect("host has a running sshd");
    argv.extend(cmd.iter().map(|s| s.to_string()));
    run(&argv)
}

#[test]
fn three_hosts_are_a_slurm_cluster_whose_steps_run_inside_them() {
    if !can_run() {
        return;
    }
    let prefix = format!("fy{}m-", std::process::id());
    let grid = Topology::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("grids/hosts3.toml"))
        .expect("the grid file parses");
    let start = Instant::now();
    let tb = Testbed::up_with(&grid, &prefix, &UpOptions::with_slurm()).expect("up --slurm");
    let took = start.elapsed();
    eprintln!(
        "bring-up of 3 hosts with --slurm took {:.3} s",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(tb.slurm_head(), Some("h1"));
    let conf = tb.slurm_conf().expect("built with slurm");
    assert_eq!(conf, slurm::conf_path(&prefix));
    assert!(conf.is_file());

    let (ok, out, err) = on(&tb, "h1", &["sinfo", "-h", "-N", "-o", "%N %t %c"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "h1 idle 2\nh2 idle 2\nh3 idle 2", "{err}");

    // A task per node runs on that node, in its namespaces: its hostname, its own boot_id.
    let (ok, out, err) = on(
        &tb,
        "h2",
        &[
            "srun",
            "-N",
            "3",
            "-n",
            "3",
            "sh",
            "-c",
            "echo $(hostname) $(cat /proc/sys/kernel/random/boot_id)",
        ],
    );
    assert!(ok, "{err}");
    let mut names: Vec<&str> = out.lines().filter_map(|l| l.split(' ').next()).collect();
    names.sort();
    assert_eq!(names, ["h1", "h2", "h3"], "{out}{err}");
    let mut boot_ids: Vec<&str> = out.lines().filter_map(|l| l.split(' ').nth(1)).collect();
    boot_ids.sort();
    boot_ids.dedup();
    assert_eq!(boot_ids.len(), 3, "{out}");

    let state = ssh::state_dir(&prefix);
    tb.down().expect("down");
    assert!(leftovers(Some(&prefix)).unwrap().is_empty());
    assert!(!state.exists(), "{} is left", state.display());
    assert_eq!(ssh::processes_naming(&state), Vec::<i32>::new());
}
