#!/usr/bin/env bash
# Launcher start-up time and peak memory: `ferry run -n N PROG` under /usr/bin/time -v for each
# N and program, one line of CSV per run (wall seconds, the launcher's peak RSS in kB, exit
# status, load average before the run).
#
#   bench/scripts/launcher-measure.sh OUT.csv [LAUNCHER] [NS...]
#
# LAUNCHER is a ferry binary (default target/release/ferry), or `mpich` (Debian's hydra,
# mpiexec.mpich) or `openmpi` (Debian's mpirun, --oversubscribe) for /bin/true beside it. PROG is
# /bin/true and bench/scripts/launcher-hello.c (built here with crates/mpi/bin/mpicc); PROGS="/bin/true"
# limits the run to the first. The rank limit is lifted with FERRY_OVERSUBSCRIBE=1 (older
# launchers ignore it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:?usage: launcher-measure.sh OUT.csv [FERRY] [NS...]}
ferry=${2:-$repo/target/release/ferry}
shift $(( $# >= 2 ? 2 : $# ))
ns=${*:-64 512 2000}
hello=$repo/target/launcher-bench/hello
mkdir -p "$(dirname "$hello")"
if [ ! -x "$hello" ] || [ "$here/launcher-hello.c" -nt "$hello" ]; then
    FERRY_BIN=$ferry "$repo/crates/mpi/bin/mpicc" -O2 -o "$hello" "$here/launcher-hello.c"
fi
echo "program,ranks,wall_s,max_rss_kb,status,load1" > "$out"
case "$ferry" in
    mpich) launch=(mpiexec.mpich -n) ;;
    openmpi) launch=(mpirun.openmpi --oversubscribe --allow-run-as-root -n) ;;
    *) launch=("$ferry" run --timeout 300 -n) ;;
esac
for prog in ${PROGS:-/bin/true $hello}; do
    for n in $ns; do
        load=$(cut -d' ' -f1 /proc/loadavg)
        log=$(mktemp)
        status=0
        FERRY_OVERSUBSCRIBE=1 /usr/bin/time -v "${launch[@]}" "$n" "$prog" \
            > /dev/null 2> "$log" || status=$?
        wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$log" \
            | awk -F: '{ if (NF == 3) print $1*3600 + $2*60 + $3; else print $1*60 + $2 }')
        rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")
        echo "$(basename "$prog"),$n,$wall,$rss,$status,$load" | tee -a "$out"
        grep -v '^\s' "$log" | grep -v 'Command being timed' | head -3 >&2 || true
        rm -f "$log"
    done
done
