"""Medians over the rounds of bench/scripts/mpi4py.sh's raw.csv, and ferry's ratio to the better peer.

    python3 bench/scripts/mpi4py_summary.py raw.csv > summary.csv

Columns: test, bytes, ferry_us, mpich_us, openmpi_us (medians of the per-round medians), and
ferry / min(mpich, openmpi) (below 1: ferry is faster than the better of the two).
"""

import csv
import statistics
import sys
from collections import defaultdict

LIBS = ("ferry", "mpich", "openmpi")


def main(path):
    samples = defaultdict(list)
    order = []
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (row["test"], int(row["bytes"]))
            if key not in order:
                order.append(key)
            samples[key + (row["library"],)].append(float(row["usec"]))
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["test", "bytes"] + [f"{lib}_us" for lib in LIBS] + ["rounds", "ferry_vs_best_peer"])
    for key in order:
        med = {lib: statistics.median(samples[key + (lib,)]) for lib in LIBS if samples[key + (lib,)]}
        rounds = min((len(samples[key + (lib,)]) for lib in LIBS), default=0)
        peers = [med[lib] for lib in ("mpich", "openmpi") if lib in med]
        ratio = f"{med['ferry'] / min(peers):.2f}" if "ferry" in med and peers else ""
        out.writerow(list(key) + [f"{med[lib]:.2f}" if lib in med else "" for lib in LIBS] + [rounds, ratio])


if __name__ == "__main__":
    main(sys.argv[1])
