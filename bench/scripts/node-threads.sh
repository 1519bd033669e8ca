#!/usr/bin/env bash
# Threads of the node daemons while their ranks run: `ferry run --launcher local` with two names
# of this host (localhost and its host name) starts two node daemons here, each serving half
# the ranks' bootstrap; the threads of every daemon (/proc/PID/task) are sampled every 0.2 s.
# One line per run: ranks, exit status, wall seconds, the most threads seen per daemon, the load
# average before the run.
#
#   bench/scripts/node-threads.sh [FERRY] [NS...]
#
# FERRY is a ferry binary (default target/release/ferry); the program is
# bench/scripts/launcher-hold.c (init, barrier, 5 s asleep, finalize), built here with
# crates/mpi/bin/mpicc. The per-core rank limit is lifted with FERRY_OVERSUBSCRIBE=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
ferry=${1:-$repo/target/release/ferry}
shift $(( $# >= 1 ? 1 : 0 ))
ns=${*:-64 256}
hold=$repo/target/launcher-bench/hold
mkdir -p "$(dirname "$hold")"
if [ ! -x "$hold" ] || [ "$here/launcher-hold.c" -nt "$hold" ]; then
    FERRY_BIN=$ferry "$repo/crates/mpi/bin/mpicc" -O2 -o "$hold" "$here/launcher-hold.c"
fi
echo "ranks,status,wall_s,threads_per_daemon,load1"
for n in $ns; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    half=$(( n / 2 ))
    start=$(date +%s.%N)
    FERRY_OVERSUBSCRIBE=1 "$ferry" run --timeout 600 --launcher local \
        --hosts "localhost:$half,$(hostname):$(( n - half ))" -n "$n" "$hold" 5 > /dev/null &
    launcher=$!
    declare -A most=()
    while kill -0 "$launcher" 2> /dev/null; do
        for p in $(pgrep -P "$launcher" || true); do
            if tr '\0' ' ' 2> /dev/null < "/proc/$p/cmdline" | grep -q ' node '; then
                t=$(ls "/proc/$p/task" 2> /dev/null | wc -l)
                [ "${most[$p]:-0}" -lt "$t" ] && most[$p]=$t
            fi
        done
        sleep 0.2
    done
    status=0
    wait "$launcher" || status=$?
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    echo "$n,$status,$wall,$(echo "${most[*]}" | tr ' ' '/'),$load"
    unset most
done
