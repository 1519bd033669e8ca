#!/usr/bin/env python3
"""Throughput between two private clusters through 1, 2 and 3 relays, and a relay killed
mid-stream, on the one-machine testbed (root).

Cluster a (one front node) streams to cluster b, which has R front nodes, each with a relay:
rank 0 on a1 sends COUNT checked messages of SIZE bytes (4 MiB) to rank 1 on b1 (`check stream`, eight in
flight). `ferry run --grid` gives the pair one rail per relay of b (R rails; one for R = 1), so
the stream is striped over all of b's relays. Each R runs ROUNDS times; the median is kept.

Then, for R = 2 and 3, a longer stream during which the relay on fb2 (it carries the pair's
rail 0) is killed with SIGKILL once a third of the messages have arrived. Every window of
eight messages is stamped on arrival (by this script, reading the job's output as it
comes); from the stamps: the rate before the kill, the longest gap between two windows around
the kill (the dip) and the time from the kill until the windows come at 80 % of the earlier
rate again (the recovery); see `analyse`.

With RATE (a `tc` rate such as `100mbit`), each front node of b gets that rate on its own
link to the WAN (the grid's `front_rate`), so every relay is a bottleneck of its own while a's
NAT and the hosts' links stay unlimited: the stream should then run at about R times the
rate, and after a kill at (R - 1) / R of what it ran at before; the recovery is measured
against that.

Writes to OUT (default bench/results/<date>-relays): relays.csv (every run), kill-R.csv (the
window stamps of each kill run), summary.md and machine.txt.

    sudo bench/scripts/relays.py [OUT]          # ROUNDS=3 COUNT=96 KILL_COUNT=240
    sudo RATE=100mbit SIZE=1048576 COUNT=192 KILL_COUNT=480 bench/scripts/relays.py OUT
"""

import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FERRY = os.path.join(ROOT, "target/release/ferry")
CHECK = os.path.join(ROOT, "target/release/examples/check")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
COUNT = int(os.environ.get("COUNT", "96"))
KILL_COUNT = int(os.environ.get("KILL_COUNT", "240"))
RATE = os.environ.get("RATE")
SIZE = int(os.environ.get("SIZE", str(4 << 20)))
WINDOW = 8


def grid(relays: int) -> str:
    """Cluster a behind one front node, cluster b behind `relays`."""
    text = """
[[cluster]]
name = "a"
kind = "private"
front = "fa"
public_addr = "198.18.0.10"
front_addr = "10.1.0.1"
[[cluster.host]]
name = "a1"
addr = "10.1.0.11"

[[cluster]]
name = "b"
kind = "private"
front = "fb"
public_addr = "198.18.0.20"
front_addr = "10.2.0.1"
"""
    if RATE:
        text += f'front_rate = "{RATE}"\n'

    for i in range(2, relays + 1):
        text += f"""[[cluster.relay]]
name = "fb{i}"
public_addr = "198.18.0.{19 + i}"
front_addr = "10.2.0.{i}"
"""
    text += """[[cluster.host]]
name = "b1"
addr = "10.2.0.11"
"""
    return text


def job(grid_path: str, prefix: str, count: int) -> list:
    return [FERRY, "run", "--grid", grid_path, "--testbed-prefix", prefix, "-n", "2",
            "--timeout", "300", CHECK, "stream", str(SIZE), str(count), "1"]


def env() -> dict:
    e = dict(os.environ)
    for k in ["FERRY_RAILS", "MPIEXEC_TIMEOUT", "FERRY_SHOW_PATHS"]:
        e.pop(k, None)
    return e


def stream(grid_path: str, prefix: str, count: int) -> float:
    out = subprocess.run(job(grid_path, prefix, count), env=env(), capture_output=True,
                         text=True, stdin=subprocess.DEVNULL)
    m = re.search(r"stream ok: .* ([0-9.]+) MB/s", out.stdout)
    if out.returncode != 0 or not m:
        sys.exit(f"stream failed:\n{out.stdout}\n{out.stderr}")
    return float(m.group(1))


def relay_pid(ns: str) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split()
        if len(pids) == 1:
            return int(pids[0])
        time.sleep(0.05)
    sys.exit(f"no relay in {ns}")


def kill_run(grid_path: str, prefix: str, count: int):
    """Window stamps (messages, seconds since the first window) and the kill's time."""
    proc = subprocess.Popen(job(grid_path, prefix, count), env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    pid = relay_pid(prefix + "fb2")
    stamps, killed_at = [], None
    for line in proc.stdout:
        m = re.match(r"stream progress (\d+) ", line)
        if not m:
            continue
        now = time.monotonic()
        stamps.append((int(m.group(1)), now))
        if killed_at is None and int(m.group(1)) >= count // 3:
            os.kill(pid, 9)
            killed_at = time.monotonic()
    err = proc.stderr.read()
    if proc.wait() != 0:
        sys.exit(f"kill run failed:\n{err}")
    t0 = stamps[0][1]
    return [(n, t - t0) for n, t in stamps], killed_at - t0, err


def analyse(stamps, kill, left=1.0):
    """Rate before the kill (MB/s); the longest time a window took among those that ended
    within 2 s of the kill (s; later ones are the loaded machine's, not the kill's); the
    time from the kill to the end of the first window that began after it (1 ms of slack: the
    kill follows a window's stamp) and took at most 1.25 times the earlier median divided by
    `left` (the share of the rate that the relays left can carry) (s); and the median rate of
    the windows after that one (MB/s)."""
    before = [(stamps[i][1] - stamps[i - 1][1]) for i in range(1, len(stamps))
              if stamps[i][1] <= kill]
    step = statistics.median(before)
    rate = WINDOW * SIZE / step / 1e6
    after = [(stamps[i][1], stamps[i][1] - stamps[i - 1][1]) for i in range(1, len(stamps))
             if stamps[i][1] > kill]
    # At a limited rate a window may take longer than 2 s: then the first one after the kill.
    gap = max([d for t, d in after if t <= kill + 2.0] or [after[0][1]])
    recovered = next((t - kill for t, d in after
                      if d <= step / left / 0.8 and t - d >= kill - 0.001), None)
    steady = [d for t, d in after if recovered is not None and t > kill + recovered]
    rate_after = WINDOW * SIZE / statistics.median(steady) / 1e6 if steady else None
    return rate, gap, recovered, rate_after


def main():
    if os.geteuid() != 0:
        sys.exit("bench/scripts/relays.py: the testbed needs root")
    date = datetime.date.today().isoformat()
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, f"bench/results/{date}-relays")
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp()
    prefix = f"fyb{os.getpid() % 10000}-"
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    with open(os.path.join(out, "machine.txt"), "w") as f:
        f.write(f"date: {datetime.datetime.now(datetime.timezone.utc).isoformat()}\n")
        f.write(f"commit: {commit}\n")
        f.write(f"command: bench/scripts/relays.py (ROUNDS={ROUNDS} COUNT={COUNT} "
                f"KILL_COUNT={KILL_COUNT} SIZE={SIZE} RATE={RATE or ''})\n")
        f.write(f"cores: {os.cpu_count()}\n")
        f.write(f"load before: {open('/proc/loadavg').read().strip()}\n")
    runs, kills = [], []
    try:
        for relays in (1, 2, 3):
            path = os.path.join(work, f"b{relays}.toml")
            with open(path, "w") as f:
                f.write(grid(relays))
            subprocess.run([FERRY, "testbed", "up", path, "--prefix", prefix], check=True,
                           stdout=subprocess.DEVNULL)
            try:
                for r in range(ROUNDS):
                    mbs = stream(path, prefix, COUNT)
                    runs.append((relays, r, mbs))
                    print(f"{relays} relay(s), run {r}: {mbs:.1f} MB/s", flush=True)
                if relays > 1:
                    stamps, kill, err = kill_run(path, prefix, KILL_COUNT)
                    with open(os.path.join(out, f"kill-{relays}.csv"), "w") as f:
                        f.write(f"# relay on fb2 killed at {kill:.6f} s\nmessages,seconds\n")
                        f.writelines(f"{n},{t:.6f}\n" for n, t in stamps)
                    with open(os.path.join(out, f"kill-{relays}.stderr"), "w") as f:
                        f.write(err)
                    # Limited relays: the survivors carry (R - 1) / R of the rate before.
                    left = (relays - 1) / relays if RATE else 1.0
                    rate, gap, rec, after = analyse(stamps, kill, left)
                    kills.append((relays, rate, gap, rec, after))
                    print(f"{relays} relays, fb2 killed: before {rate:.0f} MB/s, longest gap "
                          f"{gap * 1e3:.0f} ms, recovered after {rec}, then {after} MB/s",
                          flush=True)
            finally:
                subprocess.run([FERRY, "testbed", "down", "--prefix", prefix],
                               stdout=subprocess.DEVNULL)
    finally:
        with open(os.path.join(out, "machine.txt"), "a") as f:
            f.write(f"load after: {open('/proc/loadavg').read().strip()}\n")
    with open(os.path.join(out, "relays.csv"), "w") as f:
        f.write("relays,run,MB/s\n")
        f.writelines(f"{r},{i},{m:.1f}\n" for r, i, m in runs)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(f"| relays of b (rails) | median MB/s of {ROUNDS} | runs |\n|---|---|---|\n")
        for relays in (1, 2, 3):
            got = [m for r, _, m in runs if r == relays]
            f.write(f"| {relays} ({relays}) | {statistics.median(got):.1f} | "
                    f"{', '.join(f'{m:.1f}' for m in got)} |\n")
        share = "(R - 1) / R of " if RATE else ""
        f.write(f"\n| relays | fb2 killed after | rate before (MB/s) | slowest "
                f"{WINDOW * SIZE >> 20} MiB window ending within 2 s of the kill (or the first "
                f"after it) | first window at >= 80 % of {share}the rate, "
                "ended after | rate after that (MB/s) |\n"
                "|---|---|---|---|---|---|\n")
        for relays, rate, gap, rec, after in kills:
            rec_text = f"{rec * 1e3:.0f} ms" if rec is not None else "not within the run"
            after_text = f"{after:.1f}" if after is not None else "-"
            f.write(f"| {relays} | {KILL_COUNT // 3} of {KILL_COUNT} messages | {rate:.1f} | "
                    f"{gap * 1e3:.0f} ms | {rec_text} | {after_text} |\n")
    print(open(os.path.join(out, "summary.md")).read())


if __name__ == "__main__":
    main()
