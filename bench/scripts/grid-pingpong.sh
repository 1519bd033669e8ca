#!/bin/sh
# Ping-pong between two ranks in different clusters of the testbed, for the three paths side by
# side in one run: direct (p1 <-> p2, both public), NAT (a1 -> p1, private -> public) and relay
# (a1 -> b1 through fa's NAT and the relay on fb). Rounds interleave the paths so that load on
# the machine hits all three alike. Needs root (it builds and removes its own testbed).
#
#   bench/scripts/grid-pingpong.sh FERRY OUTDIR [ROUNDS] [MAX_BYTES] [RELAY_COPY]
#
# RELAY_COPY is the relays' `--copy` (default nat: the front nodes forward through pinholes).
#
# Writes OUTDIR/<path>-<round>.csv (ferry bench-rank pingpong), OUTDIR/<path>-<round>.err (the
# job's stderr: each rank's CPU time from /usr/bin/time, the relay's last status line with its
# CPU time) and OUTDIR/summary.txt. MIN=<bytes> in the environment starts the sweep there
# (default 1); WAN_RATE=<tc rate> (e.g. 1gbit) limits every link to the WAN bridge; FERRY_*
# settings in the environment reach the ranks; PIN=1 runs rank r on CPU r mod 2, each on its own
# core for the whole run.
set -eu
FERRY=$(realpath "${1:?ferry binary}")
OUT=${2:?output directory}
ROUNDS=${3:-3}
MAX=${4:-16777216}
COPY=${5:-nat}
MIN=${MIN:-1}
TIME=""
[ -x /usr/bin/time ] && TIME="/usr/bin/time -f ferry-cpu:%U:%S:%e"
GRIDS=$(cd "$(dirname "$0")/../../crates/testbed/grids" && pwd)
PIN_RANK=""
[ "${PIN:-0}" = 1 ] && PIN_RANK=$(cd "$(dirname "$0")" && pwd)/pin-rank-to-core.sh
P="fyb$$-"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# SUMMARY_ONLY=1: only (re)write the summary of the CSVs already in OUTDIR.
if [ -z "${SUMMARY_ONLY:-}" ]; then
GRID="$GRIDS/three.toml"
if [ -n "${WAN_RATE:-}" ]; then
  GRID="$OUT/three-wan-$WAN_RATE.toml"
  { echo "wan_rate = \"$WAN_RATE\""; cat "$GRIDS/three.toml"; } > "$GRID"
fi
"$FERRY" testbed up "$GRID" --prefix "$P" >/dev/null
trap '"$FERRY" testbed down --prefix "$P" >/dev/null' EXIT INT TERM
# The run's record (command, date, machine, commit, load): machine.txt, as every benchmark writes it.
(cd "$GRIDS" && "$FERRY" bench record --out "$OUT" --command "$0 $* (WAN_RATE=${WAN_RATE:-none} MIN=$MIN PIN=${PIN:-0})") >/dev/null
echo "WAN rate: ${WAN_RATE:-none}" > "$OUT/summary.txt"
for r in $(seq "$ROUNDS"); do
  for path in direct nat relay; do
    "$FERRY" run --grid "$GRIDS/pairs/$path.toml" --testbed-prefix "$P" --relay-copy "$COPY" \
      -n 2 --timeout 600 $TIME $PIN_RANK "$FERRY" bench-rank pingpong "$MIN" "$MAX" 0 1 "$OUT/$path-$r.csv" \
      2>"$OUT/$path-$r.err"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/summary.txt"
fi
# Tables: per size, each path's best round (the lowest of the rounds' per-round medians: the
# machine is shared, and load only ever adds time), then each path's median round (TCP over
# the testbed's veths is bimodal here: the same transfer takes 1x or 3x from one run to the
# next, for plain sockets too, so single rounds say little), as one-way time (us) and bandwidth
# (MB/s), and NAT / relay as a share of direct's bandwidth.
for pick in best median; do
echo "$pick of the rounds:" >> "$OUT/summary.txt"
for path in direct nat relay; do
  cat "$OUT/$path"-*.csv | grep -v '^#' | grep -v '^bytes' | sed "s/^/$path,/"
done | sort -t, -k2,2n -k1,1 | awk -F, -v pick="$pick" '
  function sorted(list, a,   n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n
  }
  function choose(list,   n, a) {
    n = sorted(list, a)
    if (pick == "best") return a[1] + 0
    return n % 2 ? a[(n + 1) / 2] + 0 : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { us[$2, $1] = us[$2, $1] " " $5; sizes[$2] = 1 }
  END {
    print "| bytes | direct us | NAT us | relay us | direct MB/s | NAT MB/s | relay MB/s | NAT/direct | relay/direct |"
    print "|---|---|---|---|---|---|---|---|---|"
    n = 0; for (s in sizes) order[++n] = s + 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
    for (i = 1; i <= n; i++) {
      s = order[i]
      ud = choose(us[s, "direct"]); un = choose(us[s, "nat"]); ur = choose(us[s, "relay"])
      d = ud > 0 ? s / ud : 0; na = un > 0 ? s / un : 0; r = ur > 0 ? s / ur : 0
      pn = 0; pr = 0; if (d > 0) { pn = 100 * na / d; pr = 100 * r / d }
      printf "| %d | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f %% | %.0f %% |\n", s, ud, un, ur, d, na, r, pn, pr
    }
  }' >> "$OUT/summary.txt"
done
# CPU seconds per GiB carried (both directions: 2 x bytes per round trip, plus the warm-up
# round trip of each size), per round: each rank's user + system time and the relay's.
for f in "$OUT"/*-*.csv; do
  b=${f%.csv}
  [ -f "$b.err" ] || continue
  bytes=$(grep -v '^#' "$f" | grep -v '^bytes' | awk -F, '{ s += 2 * $1 * ($2 * $3 + 1) } END { printf "%.0f", s }')
  awk -v name="$(basename "$b")" -v bytes="$bytes" '
    /ferry-cpu:/ { n = split($0, a, ":"); ranks = ranks sprintf(" %.2f", (a[n-2] + a[n-1]) * 2^30 / bytes); wall = wall sprintf(" %.1f", a[n]) }
    /ferry relay:.*cpu=/ { match($0, /cpu=[0-9.]+/); relay += substr($0, RSTART + 4, RLENGTH - 4) * 2^30 / bytes; seen = 1 }
    END { printf "cpu s/GiB %-10s ranks%s relay %s (wall s%s, %.2f GiB)\n", name, ranks, seen ? sprintf("%.2f", relay) : "-", wall, bytes / 2^30 }
  ' "$b.err"
done >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
