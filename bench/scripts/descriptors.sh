#!/usr/bin/env bash
# File descriptors of the ranks, the launcher and the node daemons while a job runs: `ferry run
# --transport T -n N` of bench/scripts/launcher-hold.c (MPI_Init, a barrier, S seconds asleep,
# MPI_Finalize); every 0.3 s each process's /proc/PID/fd is counted and the largest count kept.
# One line per run: transport, ranks, how the ranks were started (launcher, or two node daemons
# through `--launcher local --hosts localhost:N/2,$(hostname):N/2`), the fewest and most
# descriptors of a rank, the most of the launcher and of a node daemon, the job's exit status,
# and what the rank with the most held then, by kind.
#
#   bench/scripts/descriptors.sh [FERRY] [NS...]
#
# FERRY is a ferry binary (default target/release/ferry); the program is built here with
# crates/mpi/bin/mpicc. The per-core rank limit is lifted with FERRY_OVERSUBSCRIBE=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
ferry=${1:-$repo/target/release/ferry}
shift $(( $# >= 1 ? 1 : 0 ))
ns=${*:-2 16 64}
hold_s=${HOLD_S:-8}
hold=$repo/target/launcher-bench/hold
mkdir -p "$(dirname "$hold")"
if [ ! -x "$hold" ] || [ "$here/launcher-hold.c" -nt "$hold" ]; then
    FERRY_BIN=$ferry "$repo/crates/mpi/bin/mpicc" -O2 -o "$hold" "$here/launcher-hold.c"
fi

# The kinds of a process's descriptors: "socket:12 pipe:2 /dev/null:1 ...".
kinds() {
    for fd in /proc/"$1"/fd/*; do
        readlink "$fd" 2> /dev/null || true
    done | sed -e 's/:\[.*//' -e 's#^/dev/shm/.*#/dev/shm#' | sort | uniq -c \
        | awk '{printf "%s:%s ", $2, $1}'
}

# How many descriptors process $1 holds (0 once it is gone).
count() {
    local n
    n=$(ls "/proc/$1/fd" 2> /dev/null | wc -l) || true
    echo "${n:-0}"
}

echo "transport,ranks,started_by,rank_fds_min,rank_fds_max,launcher_fds,daemon_fds,status,one_rank"
for transport in shm tcp; do
    for n in $ns; do
        for by in launcher daemons; do
            args=(run --timeout 600 --transport "$transport" -n "$n")
            if [ "$by" = daemons ]; then
                half=$(( n / 2 ))
                args+=(--launcher local --hosts "localhost:$half,$(hostname):$(( n - half ))")
            fi
            FERRY_OVERSUBSCRIBE=1 "$ferry" "${args[@]}" "$hold" "$hold_s" > /dev/null &
            launcher=$!
            declare -A rank_most=() daemon_most=()
            launcher_most=0 one_most=0 one=""
            while kill -0 "$launcher" 2> /dev/null; do
                c=$(count "$launcher")
                [ "$c" -gt "$launcher_most" ] && launcher_most=$c
                for p in $(pgrep -P "$launcher" || true); do
                    if tr '\0' ' ' 2> /dev/null < "/proc/$p/cmdline" | grep -q ' node '; then
                        c=$(count "$p")
                        [ "${daemon_most[$p]:-0}" -lt "$c" ] && daemon_most[$p]=$c
                        ranks=$(pgrep -P "$p" -x hold || true)
                    else
                        ranks=$p
                    fi
                    for r in $ranks; do
                        [ "$(cat "/proc/$r/comm" 2> /dev/null)" = hold ] || continue
                        c=$(count "$r")
                        [ "${rank_most[$r]:-0}" -lt "$c" ] && rank_most[$r]=$c
                        if [ "$c" -gt "$one_most" ]; then
                            one_most=$c
                            one=$(kinds "$r")
                        fi
                    done
                done
                sleep 0.3
            done
            status=0
            wait "$launcher" || status=$?
            sorted=$(printf '%s\n' "${rank_most[@]}" | sort -n)
            daemons=$(printf '%s\n' "${daemon_most[@]:-}" | sort -n | tr '\n' '/' | sed 's#/*$##')
            echo "$transport,$n,$by,$(head -1 <<< "$sorted"),$(tail -1 <<< "$sorted"),$launcher_most,${daemons:--},$status,$one"
            unset rank_most daemon_most
        done
    done
done
