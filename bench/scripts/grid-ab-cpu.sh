#!/bin/sh
# grid-ab-cpu.sh FERRY OUT ROUNDS MIN MAX VARIANT...   VARIANT = name:path:ENV=V,ENV=V (env may be empty)
# grid-ab.sh plus the CPU that no process of the job is charged with: before
# and after every run, the kernel threads' CPU (children of kthreadd: kworkers, which send the
# sockmap's redirected bytes, and ksoftirqd) and the machine's softirq and busy time from
# /proc/stat, written to OUT/<name>-<round>.cpu as "kthreads_s softirq_s busy_s". RCOPY=mode
# in a variant's env picks the relay's --relay-copy. One testbed for all; rounds interleave.
set -eu
ARGS="$*"
FERRY=$(realpath "$1"); OUT=$2; ROUNDS=$3; MIN=$4; MAX=$5; shift 5
GRIDS=$(cd "$(dirname "$0")/../../crates/testbed/grids" && pwd)
P="fyc$$-"
mkdir -p "$OUT"
"$FERRY" testbed up "$GRIDS/three.toml" --prefix "$P" >/dev/null
trap '"$FERRY" testbed down --prefix "$P" >/dev/null' EXIT INT TERM
kthreads() { cat /proc/[0-9]*/stat 2>/dev/null | awk -F') ' '{ split($2, a, " "); if (a[2] == 2) s += a[12] + a[13] } END { printf "%.2f", s / 100 }'; }
machine() { awk '/^cpu / { printf "%.2f %.2f", $8 / 100, ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat; }
{
  echo "command: $0 $ARGS"
  echo "commit: $(git -C "$GRIDS" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "machine: $(nproc) cores, $(uname -r)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/load.txt"
for r in $(seq "$ROUNDS"); do
  for v in "$@"; do
    name=${v%%:*}; rest=${v#*:}; path=${rest%%:*}; envs=${rest#*:}
    ra=""
    case "$envs" in *RCOPY=*) ra="--relay-copy $(echo "$envs" | sed 's/.*RCOPY=\([a-z]*\).*/\1/')";; esac
    k0=$(kthreads); m0=$(machine)
    env $(echo "$envs" | tr ',' ' ') "$FERRY" run $ra --grid "$GRIDS/pairs/$path.toml" --testbed-prefix "$P" \
      -n 2 --timeout 600 /usr/bin/time -f ferry-cpu:%U:%S:%e "$FERRY" bench-rank pingpong "$MIN" "$MAX" 0 1 "$OUT/$name-$r.csv" 2>"$OUT/$name-$r.err"
    k1=$(kthreads); m1=$(machine)
    echo "$k0 $m0 $k1 $m1" | awk '{ printf "%.2f %.2f %.2f\n", $4 - $1, $5 - $2, $6 - $3 }' > "$OUT/$name-$r.cpu"
    echo "round $r $name: load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/load.txt"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"
