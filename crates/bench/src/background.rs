//! Other work beside the job: `ferry bench compare --background-load N` starts N busy-looping
//! processes before the first round and stops them, by pid, after the last, because a rank
//! that shares its node with other work is the normal case, and implementations that
//! busy-poll suffer from it most.
//!
//! Each hog is a `sh` loop that checks every few hundred thousand turns whether the process
//! that started it is still alive, so that hogs never outlive a benchmark that was killed
//! before it could stop them. Each runs in a session of its own, as another user's job
//! would: with the kernel's autogroups CPU time is shared among sessions first, and hogs in
//! the benchmark's session would count as one job however many there are. And each runs at
//! normal priority whatever the benchmark's: hogs that inherited the real-time class of a
//! benchmark run under `chrt -r 1` took the cores from everything but the job's ranks, and
//! from those in 100 ms round-robin slices (a 2-rank mpibench run timed out after 600 s).

use std::process::{Child, Command, Stdio};

/// The loop each hog runs: spin, and leave once the parent (`$PPID`) is gone.
const SPIN: &str = "i=0; while :; do i=$((i+1)); if [ $i -ge 200000 ]; then i=0; \
                    kill -0 $PPID 2>/dev/null || exit 0; fi; done";

/// Busy-looping processes, stopped when dropped.
#[derive(Debug)]
pub struct CpuHogs {
    children: Vec<Child>,
}

impl CpuHogs {
    /// Starts `count` hogs (none for 0).
    pub fn start(count: u32) -> std::io::Result<CpuHogs> {
        let mut hogs = CpuHogs { children: vec![] };
        for _ in 0..count {
            // On an error the hogs started so far are stopped by drop.
            // util-linux's chrt and setsid exec in place (a child of ours leads no process
            // group, so setsid need not fork): the pid is the loop's.
            let child = Command::new("chrt")
                .args(["--other", "0", "setsid", "sh", "-c", SPIN])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            hogs.children.push(child);
        }
        Ok(hogs)
    }

    /// Their process ids, for the record.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// How many are running.
    pub fn count(&self) -> usize {
        self.children.len()
    }

    /// Kills each hog by its pid and reaps it.
    pub fn stop(&mut self) {
        for mut child in self.children.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CPU time (user + system, in clock ticks) that process `pid` has used, from
/// `/proc/<pid>/stat`; `None` when it is gone.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&text)
}

/// This process's nice value (`/proc/self/stat`, field 19), for the record: a benchmark run
/// under `nice` competes with other work differently.
pub fn own_nice() -> Option<i64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    stat_field(&text, 19)?.parse().ok()
}

/// Field `n` (counted from 1 as in proc(5)) of a `/proc/<pid>/stat` line; fields from the
/// third on are counted after the command name, which may itself hold spaces and parentheses.
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(n.checked_sub(3)?)
}

/// utime + stime (fields 14 and 15) from a `/proc/<pid>/stat` line.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let utime: u64 = stat_field(stat, 14)?.parse().ok()?;
    let stime: u64 = stat_field(stat, 15)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn stat_lines_give_user_plus_system_ticks() {
        let stat = "1234 (a) b (c)) R 1 1234 1234 0 -1 4194304 100 0 0 0 70 5 0 0 20 0 1 0 \
                    99 1000 10 18446744073709551615";
        assert_eq!(parse_cpu_ticks(stat), Some(75));
        assert_eq!(stat_field(stat, 19), Some("0"));
        assert_eq!(stat_field(stat, 3), Some("R"));
        assert_eq!(parse_cpu_ticks("garbage"), None);
        assert_eq!(parse_cpu_ticks("1 (x) R 1 2"), None);
    }

    /// The scheduling policy of process `pid` (0: normal), from its stat.
    fn policy(pid: u32) -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat_field(&stat, 41)?.parse().ok()
    }

    #[test]
    fn hogs_run_at_normal_priority_under_a_real_time_caller() {
        // This thread real-time, as under `chrt -r 1` (needs root or CAP_SYS_NICE).
        let tid = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
        let tid = tid
            .file_name()
            .and_then(|t| t.to_str())
            .expect("tid")
            .to_owned();
        let chrt = |args: &[&str]| {
            Command::new("chrt")
                .args(args)
                .arg(&tid)
                .status()
                .is_ok_and(|s| s.success())
        };
        if !chrt(&["--rr", "-p", "1"]) {
            eprintln!("skipped: cannot make this thread real-time here");
            return;
        }
        let hogs = CpuHogs::start(1);
        assert!(chrt(&["--other", "-p", "0"]), "back to normal");
        let mut hogs = hogs.unwrap();
        let pid = hogs.pids()[0];
        // Until the hog's chrt has exec'd, the policy is the inherited one.
        let deadline = Instant::now() + Duration::from_secs(10);
        while policy(pid) != Some(0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(policy(pid), Some(0), "hog {pid} at a real-time policy");
        hogs.stop();
    }

    #[test]
    fn hogs_spin_and_are_gone_once_stopped() {
        let mut hogs = CpuHogs::start(1).unwrap();
        let pid = hogs.pids()[0];
        let start = cpu_ticks(pid).unwrap();
        // A busy loop accumulates CPU time even on a loaded machine; give it a few seconds.
        let deadline = Instant::now() + Duration::from_secs(20);
        while cpu_ticks(pid).unwrap() <= start + 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(cpu_ticks(pid).unwrap() > start + 2, "the hog does not spin");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        assert_eq!(
            stat_field(&stat, 6),
            Some(pid.to_string().as_str()),
            "own session"
        );
        hogs.stop();
        assert_eq!(hogs.count(), 0);
        assert!(cpu_ticks(pid).is_none(), "hog {pid} still there");
    }
}
