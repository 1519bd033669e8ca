//! Whole jobs through `ferry_launch::run`. Ranks are `sh -c` scripts, or this very test binary
//! re-executed as a bootstrap client (see `rank_main`).

mod common;

use common::{stranger_attempts, Client};
use ferry_launch::{run, LaunchError, LaunchOptions, Outcome, RankFailure};
use ferry_wire::pmi::{env, Request};
use ferry_wire::JobKey;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The role a re-executed test binary plays, passed in the environment.
const ROLE: &str = "FERRY_TEST_ROLE";

/// Not a test of its own: when this binary runs as a rank (`ROLE` set), this is the rank's body.
#[test]
fn rank_main() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let var = |name| std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"));
    let addr: SocketAddr = var(env::ADDR).parse().unwrap();
    let rank: u32 = var(env::RANK).parse().unwrap();
    let size: u32 = var(env::SIZE).parse().unwrap();
    let key = JobKey::from_hex(&var(env::JOB_KEY)).unwrap();
    let long_sleep = || std::thread::sleep(Duration::from_secs(30));
    match role.as_str() {
        "kvs" | "stranger" => {
            if role == "stranger" && rank == 0 {
                stranger_attempts(addr, size);
            }
            let mut c = Client::hello(addr, &key, rank);
            c.put(&format!("card-{rank}"), &rank.to_string());
            for _ in 0..3 {
                c.fence();
            }
            for peer in 0..size {
                assert_eq!(c.get(&format!("card-{peer}")), Some(peer.to_string()));
            }
            c.finalize();
        }
        "abort" => {
            let mut c = Client::hello(addr, &key, rank);
            if rank == 1 {
                let line = Request::Abort {
                    code: 7,
                    message: "out of cheese".into(),
                }
                .encode()
                .unwrap();
                c.send_raw(line.as_bytes()).unwrap();
            }
            long_sleep();
        }
        "no-finalize" => {
            let mut c = Client::hello(addr, &key, rank);
            if rank == 1 {
                // Exits 0 with its connection open and never finalized.
                return;
            }
            c.fence_or_sleep();
        }
        "lost" => {
            let c = Client::hello(addr, &key, rank);
            if rank == 1 {
                drop(c);
            }
            long_sleep();
        }
        other => panic!("unknown role {other}"),
    }
}

trait FenceOrSleep {
    fn fence_or_sleep(&mut self);
}

impl FenceOrSleep for Client {
    /// Waits in a fence that never completes (the other rank is gone) until killed.
    fn fence_or_sleep(&mut self) {
        let _ = self.request(&Request::Fence);
        std::thread::sleep(Duration::from_secs(30));
    }
}

/// A job whose ranks are this test binary in `role` (its own test report silenced).
fn client_job(np: u32, role: &str) -> LaunchOptions {
    let mut opts = LaunchOptions::new(np, "sh");
    opts.args = vec![
        "-c".into(),
        r#"exec "$0" rank_main --exact --quiet --test-threads=1 >/dev/null"#.into(),
        std::env::current_exe().unwrap().into(),
    ];
    opts.extra_env.push((ROLE.into(), role.into()));
    opts
}

fn sh_job(np: u32, script: &str) -> LaunchOptions {
    let mut opts = LaunchOptions::new(np, "sh");
    opts.args = vec!["-c".into(), script.into()];
    opts
}

/// Runs `opts`, checking that the job ends within `limit`.
fn run_within(opts: &LaunchOptions, limit: Duration) -> Outcome {
    let start = Instant::now();
    let outcome = run(opts).expect("job starts");
    let took = start.elapsed();
    assert!(took < limit, "job took {took:?} (outcome {outcome:?})");
    outcome
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferry-launch-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn bootstrap_clients_complete_a_job() {
    let outcome = run_within(&client_job(4, "kvs"), Duration::from_secs(15));
    assert_eq!(outcome, Outcome::Success);
    assert_eq!(outcome.exit_code(), 0);
}

#[test]
fn strangers_do_not_disturb_the_job() {
    let outcome = run_within(&client_job(2, "stranger"), Duration::from_secs(15));
    assert_eq!(outcome, Outcome::Success);
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let outcome = run_within(&client_job(3, "abort"), Duration::from_secs(8));
    assert_eq!(
        outcome,
        Outcome::Aborted {
            rank: 1,
            code: 7,
            message: "out of cheese".into()
        }
    );
    assert_eq!(outcome.exit_code(), 7);
}

#[test]
fn exit_without_finalize_is_a_failure() {
    let outcome = run_within(&client_job(2, "no-finalize"), Duration::from_secs(8));
    match outcome {
        Outcome::RankFailed {
            rank: 1,
            failure: RankFailure::NoFinalize,
            ..
        } => {}
        other => panic!("unexpected outcome {other:?}"),
    }
    assert_eq!(outcome.exit_code(), 1);
    assert!(outcome.to_string().contains("rank 1"));
    assert!(outcome.to_string().contains("without calling finalize"));
}

#[test]
fn lost_connection_is_a_failure() {
    let outcome = run_within(&client_job(2, "lost"), Duration::from_secs(8));
    match outcome {
        Outcome::RankFailed {
            rank: 1,
            failure: RankFailure::ConnectionLost,
            ..
        } => {}
        other => panic!("unexpected outcome {other:?}"),
    }
}

#[test]
fn first_failing_status_is_the_jobs() {
    let outcome = run_within(
        &sh_job(3, r#"[ "$FERRY_RANK" = 2 ] && exit 3; exit 0"#),
        Duration::from_secs(5),
    );
    match &outcome {
        Outcome::RankFailed {
            rank: 2,
            failure: RankFailure::Exited(3),
            pid,
            ..
        } => assert!(*pid > 0),
        other => panic!("unexpected outcome {other:?}"),
    }
    assert_eq!(outcome.exit_code(), 3);
    assert!(outcome.to_string().contains("exited with code 3"));
}

#[test]
fn killed_rank_ends_the_job_quickly() {
    let outcome = run_within(
        &sh_job(
            3,
            r#"if [ "$FERRY_RANK" = 1 ]; then kill -9 $$; else sleep 30; fi"#,
        ),
        Duration::from_secs(5),
    );
    assert!(
        matches!(
            outcome,
            Outcome::RankFailed {
                rank: 1,
                failure: RankFailure::Signaled(9),
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(outcome.exit_code(), 137);
    assert!(outcome.to_string().contains("signal 9 (SIGKILL)"));
}

#[test]
fn ranks_that_ignore_sigterm_are_killed() {
    let outcome = run_within(
        &sh_job(
            2,
            r#"trap '' TERM; [ "$FERRY_RANK" = 0 ] && exit 5; sleep 30"#,
        ),
        Duration::from_secs(5),
    );
    assert_eq!(outcome.exit_code(), 5);
}

#[test]
fn environment_is_set_per_rank() {
    let dir = scratch_dir("env");
    let mut opts = sh_job(
        4,
        r#"echo "$FERRY_RANK $FERRY_SIZE $FERRY_JOB_ID $FERRY_JOB_KEY $FERRY_PMI_ADDR $FERRY_TRANSPORT" > "$OUT/$FERRY_RANK"
           ls -l /proc/$$/fd > "$OUT/fds-$FERRY_RANK""#,
    );
    opts.extra_env
        .push(("OUT".into(), dir.display().to_string()));
    opts.extra_env
        .push(("FERRY_TRANSPORT".into(), "tcp".into()));
    // A stale bootstrap variable in the caller's extra environment is overridden.
    opts.extra_env.push((env::RANK.into(), "99".into()));
    assert_eq!(run(&opts).unwrap(), Outcome::Success);
    let mut job_ids = Vec::new();
    for rank in 0..4 {
        let line = std::fs::read_to_string(dir.join(rank.to_string())).unwrap();
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 6, "{line:?}");
        assert_eq!(fields[0], rank.to_string());
        assert_eq!(fields[1], "4");
        assert!(fields[2].parse::<u64>().unwrap() != 0);
        assert!(JobKey::from_hex(fields[3]).is_some() && fields[3].len() == 64);
        assert!(fields[4].starts_with("127.0.0.1:"));
        assert_eq!(fields[5], "tcp");
        job_ids.push((fields[2].to_string(), fields[3].to_string()));
        // Close-on-exec: no socket of the launcher leaks into a rank.
        let fds = std::fs::read_to_string(dir.join(format!("fds-{rank}"))).unwrap();
        assert!(
            !fds.contains("socket:"),
            "rank {rank} inherited a socket:\n{fds}"
        );
    }
    job_ids.dedup();
    assert_eq!(job_ids.len(), 1, "one job id and key for all ranks");
    // A new job gets a new id and key.
    assert_eq!(run(&opts).unwrap(), Outcome::Success);
    let again = std::fs::read_to_string(dir.join("0")).unwrap();
    assert!(!again.contains(&job_ids[0].1));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn timeout_ends_the_job() {
    let mut opts = sh_job(2, "sleep 30");
    opts.timeout = Some(Duration::from_millis(400));
    let outcome = run_within(&opts, Duration::from_secs(4));
    assert_eq!(
        outcome,
        Outcome::TimedOut {
            after: Duration::from_millis(400)
        }
    );
    assert_eq!(outcome.exit_code(), ferry_launch::TIMEOUT_EXIT_CODE);
    assert_eq!(outcome.to_string(), "job timed out after 0.4 s");
}

#[test]
fn shared_memory_is_removed_after_success_and_failure() {
    let dir = scratch_dir("shm");
    for (name, exit) in [("ok", 0), ("fail", 4)] {
        let mut opts = sh_job(
            2,
            &format!(
                r#"touch /dev/shm/ferry-$FERRY_JOB_ID-seg$FERRY_RANK && echo $FERRY_JOB_ID > "$OUT/{name}"
                   [ "$FERRY_RANK" = 1 ] && exit {exit}; exit 0"#
            ),
        );
        opts.extra_env
            .push(("OUT".into(), dir.display().to_string()));
        let outcome = run(&opts).unwrap();
        assert_eq!(outcome.exit_code(), exit);
        let job = std::fs::read_to_string(dir.join(name)).unwrap();
        for rank in 0..2 {
            let seg = PathBuf::from(format!("/dev/shm/ferry-{}-seg{rank}", job.trim()));
            assert!(!seg.exists(), "{} survived the job", seg.display());
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn sixty_four_ranks_on_two_cores() {
    let outcome = run_within(&LaunchOptions::new(64, "true"), Duration::from_secs(15));
    assert_eq!(outcome, Outcome::Success);
}

#[test]
fn missing_program_is_a_named_error() {
    let err = run(&LaunchOptions::new(2, "ferry-no-such-program")).unwrap_err();
    assert!(matches!(err, LaunchError::ProgramNotFound(_)), "{err:?}");
    assert_eq!(err.exit_code(), 127);
    assert!(err.to_string().contains("ferry-no-such-program"));
    assert!(matches!(
        run(&LaunchOptions::new(0, "true")),
        Err(LaunchError::NoRanks)
    ));
}
