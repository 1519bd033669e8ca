#!/usr/bin/env bash
# What the Fortran binding itself costs: the same ping-pong + allreduce loop in Fortran
# (fortran_loop.f90, `use mpi_f08`) and in C (fortran_loop.c), each built with an
# implementation's own mpifort and mpicc and run with its own mpiexec at 2 ranks: ferry (the
# source tree's wrappers) and Debian's MPICH 4.0.2; LIBS="ferry mpich openmpi" adds Debian's
# Open MPI 4.1.4, whose mpi_f08 programs stop in MPI_Init on a machine that has MPICH too
# (its libmpi_mpifh resolves MPI_Comm_f2c to libmpich's). MPICH 5's wheel has no mpifort.
# Rounds are interleaved (ferry, mpich, ferry, ...) so the machine's load falls on all alike. Writes the raw
# CSV of every run, the load before each, the record of the run, then the medians and the
# Fortran/C ratio per implementation (summary.csv).
#
#   bench/scripts/fortran-bench.sh OUT [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$1 rounds=${2:-5}
mkdir -p "$out"
out=$(cd "$out" && pwd)
src=$root/bench/scripts
ferry=${CARGO_TARGET_DIR:-$root/target}/release/ferry

declare -A fc cc run
fc[ferry]=$root/fortran/bin/mpifort cc[ferry]=$root/crates/mpi/bin/mpicc run[ferry]="$root/crates/mpi/bin/mpiexec -n 2"
fc[mpich]=mpifort.mpich cc[mpich]=mpicc.mpich run[mpich]="mpiexec.mpich -n 2"
fc[openmpi]=mpifort.openmpi cc[openmpi]=mpicc.openmpi run[openmpi]="mpiexec.openmpi --allow-run-as-root --oversubscribe -n 2"
libs=${LIBS:-ferry mpich}

bin=$(mktemp -d "${TMPDIR:-/tmp}/ferry-fortran-bench.XXXXXX") # the programs: not results
trap 'rm -rf "$bin"' EXIT
(cd "$root" && "$ferry" bench record --out "$out" --command "$0 $*") >/dev/null
{
    echo "rounds: $rounds"
    for lib in $libs; do
        "${fc[$lib]}" -O2 "$src/fortran_loop.f90" -o "$bin/loop-$lib-fortran"
        "${cc[$lib]}" -O2 "$src/fortran_loop.c" -o "$bin/loop-$lib-c" 2>/dev/null
        echo "build[$lib]: ${fc[$lib]} -O2 fortran_loop.f90; ${cc[$lib]} -O2 fortran_loop.c"
        echo "command[$lib]: ${run[$lib]} ./loop-$lib-{fortran,c}"
    done
} >>"$out/machine.txt"

echo "round,library,language,load1" >"$out/load.csv"
echo "round,library,language,test,bytes,ranks,iterations,usec" >"$out/raw.csv"
for round in $(seq 1 "$rounds"); do
    for lib in $libs; do
        for lang in fortran c; do
            read -r l1 _ </proc/loadavg
            echo "$round,$lib,$lang,$l1" >>"$out/load.csv"
            log=$out/round$round-$lib-$lang.txt
            # shellcheck disable=SC2086 # the command is words on purpose
            if ! timeout 300 ${run[$lib]} "$bin/loop-$lib-$lang" >"$log" 2>&1; then
                echo "round $round $lib $lang failed (see $log)" >&2
                continue
            fi
            grep -E '^[a-z-]+,[0-9]+,' "$log" | sed "s/^/$round,$lib,$lang,/" >>"$out/raw.csv"
        done
        echo "round $round $lib done (load $l1)"
    done
done
python3 - "$out/raw.csv" >"$out/summary.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for key in {(r["library"], r["test"], r["language"]) for r in rows}:
    med[key] = statistics.median(float(r["usec"]) for r in rows if (r["library"], r["test"], r["language"]) == key)
print("library,test,fortran_usec,c_usec,fortran_over_c")
for lib, test in sorted({(k[0], k[1]) for k in med}):
    f, c = med.get((lib, test, "fortran")), med.get((lib, test, "c"))
    if f and c:
        print(f"{lib},{test},{f:.3f},{c:.3f},{f / c:.3f}")
PY
cat "$out/summary.csv"
