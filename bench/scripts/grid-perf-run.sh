#!/bin/sh
# grid-perf-run.sh FERRY OUT PATH [perf args]: one pingpong 1-16 MiB on PATH under perf record -a -g.
set -eu
FERRY=$(realpath "$1"); OUT=$2; PATHN=$3
GRIDS=$(cd "$(dirname "$0")/../../crates/testbed/grids" && pwd)
P="fyp$$-"
mkdir -p "$OUT"
"$FERRY" testbed up "$GRIDS/three.toml" --prefix "$P" >/dev/null
trap '"$FERRY" testbed down --prefix "$P" >/dev/null' EXIT INT TERM
perf record -a -g -F 4999 -e cpu-clock -o "$OUT/perf-$PATHN.data" -- \
  "$FERRY" run --grid "$GRIDS/pairs/$PATHN.toml" --testbed-prefix "$P" -n 2 --timeout 600 \
  /usr/bin/time -f ferry-cpu:%U:%S:%e "$FERRY" bench-rank pingpong 1048576 16777216 0 1 "$OUT/$PATHN.csv" 2>"$OUT/$PATHN.err"
cat "$OUT/$PATHN.csv" | tail -5
