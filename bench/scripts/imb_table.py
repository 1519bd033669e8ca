#!/usr/bin/env python3
"""imb_table.py RESULTS_DIR: the tables of an imb.sh run from its raw IMB outputs.

Reads RESULTS_DIR/raw/<impl>-<suite>-n<ranks>-r<round>.txt and writes
  results.json  every row IMB printed, with all its columns
  results.csv   impl,suite,benchmark,ranks,procs,bytes,round,repetitions,metric,usec,mbps
                (usec: t_avg[usec], else t[usec], else t_pure[usec]; mbps when IMB gave it)
  summary.csv   the median over the rounds per implementation and row, and ferry's ratio to
                the fastest other implementation
  table.md      the same as a Markdown table
A row is one benchmark at one message size with `procs` processes taking part (IMB runs
PingPong and other pair benchmarks on 2 processes whatever the job's size `ranks`); a benchmark
that IMB runs in two modes (aggregate, non-aggregate) is two, named with the mode.
"""

import csv
import json
import os
import re
import statistics
import sys

NAMES = {"ferry": "ferry", "mpich5": "MPICH 5.0.2", "ompi5": "Open MPI 5.0.11"}
TIME_COLUMNS = ("t_avg[usec]", "t[usec]", "t_pure[usec]")
RAW_NAME = re.compile(r"^(?P<impl>[a-z0-9]+)-(?P<suite>[A-Z0-9]+)-n(?P<ranks>\d+)-r(?P<round>\d+)\.txt$")


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def parse(text):
    """The rows of one IMB output: dicts with benchmark, procs and IMB's columns."""
    rows, benchmark, procs, header, mode = [], None, None, None, None
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"^# Benchmarking (\S+)", s)
        if m:
            benchmark, procs, header, mode = m.group(1), None, None, None
            continue
        # The one-sided and I/O suites run some benchmarks twice, once per mode.
        m = re.match(r"^#\s+MODE:\s*(\S+)", s)
        if m:
            mode, header = m.group(1).lower(), None
            continue
        m = re.match(r"^# #processes = (\d+)", s)
        if m:
            procs, header = int(m.group(1)), None
            continue
        if s.startswith("#bytes") or s.startswith("#repetitions"):
            header = s.split()
            continue
        if not s or s.startswith("#") or header is None or benchmark is None:
            continue
        fields = s.split()
        values = [number(f) for f in fields]
        if len(fields) != len(header) or any(v is None for v in values):
            continue
        row = {"benchmark": f"{benchmark} {mode}" if mode else benchmark, "procs": procs}
        row.update(dict(zip(header, values)))
        rows.append(row)
    return rows


def usec_of(row):
    for column in TIME_COLUMNS:
        if column in row:
            return row[column], column
    return None, None


def main(out):
    raw_dir = os.path.join(out, "raw")
    records = []
    for name in sorted(os.listdir(raw_dir)):
        m = RAW_NAME.match(name)
        if not m:
            continue
        with open(os.path.join(raw_dir, name), encoding="utf-8", errors="replace") as f:
            for row in parse(f.read()):
                usec, metric = usec_of(row)
                records.append(
                    {
                        "impl": m.group("impl"),
                        "suite": m.group("suite"),
                        "benchmark": row["benchmark"],
                        "ranks": int(m.group("ranks")),
                        "procs": row["procs"],
                        "bytes": int(row.get("#bytes", 0)),
                        "round": int(m.group("round")),
                        "repetitions": int(row.get("#repetitions", 0)),
                        "metric": metric,
                        "usec": usec,
                        "mbps": row.get("Mbytes/sec"),
                        "columns": {k: v for k, v in row.items() if k not in ("benchmark", "procs")},
                    }
                )
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(records, f, indent=1)
    fields = ["impl", "suite", "benchmark", "ranks", "procs", "bytes", "round", "repetitions", "metric", "usec", "mbps"]
    with open(os.path.join(out, "results.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in records:
            w.writerow([r[k] if r[k] is not None else "" for k in fields])

    impls = [i for i in NAMES if any(r["impl"] == i for r in records)]
    keys = []
    groups = {}
    for r in records:
        key = (r["suite"], r["benchmark"], r["ranks"], r["procs"], r["bytes"])
        if key not in groups:
            keys.append(key)
            groups[key] = {}
        groups[key].setdefault(r["impl"], []).append(r)

    def median(rows, field):
        values = [r[field] for r in rows if r[field] is not None]
        return statistics.median(values) if values else None

    summary = []
    for key in keys:
        by_impl = groups[key]
        med = {i: median(rows, "usec") for i, rows in by_impl.items()}
        bw = {i: median(rows, "mbps") for i, rows in by_impl.items()}
        peers = {i: t for i, t in med.items() if i != "ferry" and t is not None}
        best = min(peers, key=peers.get) if peers else None
        ferry = med.get("ferry")
        ratio = ferry / peers[best] if best and ferry is not None and peers[best] > 0 else None
        summary.append((key, med, bw, {i: len(rows) for i, rows in by_impl.items()}, best, ratio))

    with open(os.path.join(out, "summary.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["suite", "benchmark", "ranks", "procs", "bytes", "impl", "usec_median", "mbps_median", "rounds", "best_peer", "ferry_over_best"])
        for key, med, bw, runs, best, ratio in summary:
            for i in impls:
                if i not in med:
                    continue
                w.writerow(
                    list(key)
                    + [i, fmt(med[i]), fmt(bw.get(i)), runs[i], best or "", "" if ratio is None else f"{ratio:.3f}"]
                )

    with open(os.path.join(out, "table.md"), "w", encoding="utf-8") as f:
        rounds = max((r["round"] for r in records), default=0)
        f.write(
            f"IMB, median of {rounds} interleaved round(s): time per call in µs (IMB's t_avg, or t for "
            "PingPong, t_pure for the nonblocking suite). ferry/best below 1.0 favours ferry; the best "
            "peer is the fastest of the others at each row.\n\n"
        )
        f.write("| suite | benchmark | ranks | procs | bytes | " + " | ".join(NAMES[i] for i in impls) + " | best peer | ferry/best |\n")
        f.write("|---|---|---:|---:|---:|" + "---:|" * len(impls) + "---|---:|\n")
        for (suite, bench, ranks, procs, size), med, _, _, best, ratio in summary:
            cells = " | ".join(fmt(med.get(i)) for i in impls)
            f.write(
                f"| {suite} | {bench} | {ranks} | {procs} | {size} | {cells} | "
                f"{NAMES.get(best, '') if best else ''} | {'' if ratio is None else f'{ratio:.2f}'} |\n"
            )
    failed = []
    runs_csv = os.path.join(out, "runs.csv")
    if os.path.exists(runs_csv):
        with open(runs_csv, encoding="utf-8") as f:
            failed = [r for r in csv.DictReader(f) if r["status"] != "ok"]
    print(f"imb_table.py: {len(records)} rows, {len(summary)} in the summary, {len(failed)} failed job(s)", file=sys.stderr)


def fmt(v):
    if v is None:
        return ""
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


if __name__ == "__main__":
    if len(sys.argv) != 2 or not os.path.isdir(os.path.join(sys.argv[1], "raw")):
        sys.exit("usage: imb_table.py RESULTS_DIR (a folder with raw/ from imb.sh)")
    main(sys.argv[1])
