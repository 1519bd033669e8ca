#!/usr/bin/env bash
# Two builds of ferry side by side, interleaved: crates/bench/c/mpibench.c built with each
# tree's mpicc and run with each tree's `ferry run`, 2 ranks, alternating within each round.
#   bench/scripts/two-builds.sh BEFORE_TREE AFTER_TREE OUT_DIR [ROUNDS] [MODES] [PRIO]
# e.g. bench/scripts/two-builds.sh /src/ferry-old . bench/results/<date>-<name> 10
#      pingpong,allreduce,bcast "chrt -r 1"
# Each tree must be built (cargo build --release -p ferry-mpi -p ferry-cli). Writes
# OUT_DIR/raw/<round>-<before|after>.csv, OUT_DIR/rounds.csv (build,round,op,bytes,usec) and
# prints the median and least of each op per build.
set -euo pipefail
before=$(cd "$1" && pwd); after=$(cd "$2" && pwd); out=$3
rounds=${4:-10}; modes=${5:-pingpong,allreduce,bcast}; prio=${6:-}
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$out/raw"
for tree in before after; do
  root=$before; [ $tree = after ] && root=$after
  "$root/crates/mpi/bin/mpicc" -O2 "$here/crates/bench/c/mpibench.c" -o "$work/bench-$tree"
done
echo "build,round,op,bytes,usec" > "$out/rounds.csv"
for r in $(seq 1 "$rounds"); do
  for tree in before after; do
    root=$before; [ $tree = after ] && root=$after
    $prio "$root/target/release/ferry" run -n 2 "$work/bench-$tree" -m "$modes" -x 8 -s 8 \
      > "$out/raw/$r-$tree.csv"
    grep -E '^[a-z]+,2,8,' "$out/raw/$r-$tree.csv" | awk -F, -v b=$tree -v r=$r \
      '{print b "," r "," $1 "," $3 "," $4}' >> "$out/rounds.csv"
  done
done
python3 - "$out/rounds.csv" <<'PY'
import csv, statistics, sys, collections
d = collections.defaultdict(list)
for row in csv.DictReader(open(sys.argv[1])):
    d[(row["op"], row["build"])].append(float(row["usec"]))
for (op, build), v in sorted(d.items()):
    print(f"{op:10} {build:6} median {statistics.median(v):.3f} least {min(v):.3f} µs ({len(v)} rounds)")
PY
