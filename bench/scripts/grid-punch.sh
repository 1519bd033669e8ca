#!/bin/sh
# Hole punching in the testbed (needs root; builds and removes its own testbeds):
#
#   bench/scripts/grid-punch.sh FERRY OUTDIR [RUNS] [ROUNDS] [MAX_BYTES]
#
# 1. Success and time to a working path: RUNS jobs of 4 ranks on each of
#    crates/testbed/grids/punch-port-preserving.toml and punch-random.toml (`check routes` with
#    --show-paths: 4 pairs across the two private clusters per job); every pair's line ("punched
#    in T ms" or "through the relay after T ms") goes to OUTDIR/attempts.csv
#    (nat,run,a,b,outcome,ms).
# 2. Latency and bandwidth: ROUNDS rounds of `ferry bench-rank pingpong` 1 B … MAX_BYTES between
#    two ranks, interleaving nat (a1 -> p1 through fa's NAT), relay (a1 -> b1 through fa's NAT
#    and fb's relay, FERRY_PUNCH=0) and punched (the same pair with punching on), on a grid
#    written to OUTDIR/bench-grid.toml (see DELAY below): OUTDIR/<path>-<round>.csv and .out
#    (the path lines), summary in OUTDIR/summary.txt.
# The record (command, date, machine, commit, load) is OUTDIR/machine.txt.
set -eu
FERRY=$(realpath "${1:?ferry binary}")
OUT=${2:?output directory}
RUNS=${3:-25}
ROUNDS=${4:-3}
MAX=${5:-1048576}
GRIDS=$(cd "$(dirname "$0")/../../crates/testbed/grids" && pwd)
CHECK=$(dirname "$FERRY")/examples/check
P="fyq$$-"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
(cd "$GRIDS" && "$FERRY" bench record --out "$OUT" --command "$0 $*") >/dev/null
echo "nat,run,a,b,outcome,ms" > "$OUT/attempts.csv"
for nat in port-preserving random; do
  "$FERRY" testbed up "$GRIDS/punch-$nat.toml" --prefix "$P" >/dev/null
  for run in $(seq "$RUNS"); do
    "$FERRY" run --grid "$GRIDS/punch-$nat.toml" --testbed-prefix "$P" -n 4 --timeout 120 \
      --show-paths "$CHECK" routes 2>>"$OUT/attempts-$nat.err" \
    | sed -n -e "s/^r\([0-9]*\) <-> r\([0-9]*\) punched in \([0-9.]*\) ms.*/$nat,$run,\1,\2,punched,\3/p" \
             -e "s/^r\([0-9]*\) <-> r\([0-9]*\) through the relay after \([0-9.]*\) ms.*/$nat,$run,\1,\2,relay,\3/p" \
      >> "$OUT/attempts.csv"
  done
  "$FERRY" testbed down --prefix "$P" >/dev/null
done
# Part 2: a1 and b1 (private, fronts fa and fb) and p1 (public), each cluster DELAY from the
# WAN (default 1ms: 2 ms one way between clusters; the first SYNs of a punch must cross).
DELAY=${DELAY:-1ms}
cluster() { # name kind front public inside host addr
  echo "[[cluster]]"; echo "name = \"$1\""; echo "kind = \"$2\""; echo "wan_delay = \"$DELAY\""
  [ "$2" = private ] && { echo "front = \"$3\""; echo "public_addr = \"$4\""; echo "front_addr = \"$5\""; }
  echo "[[cluster.host]]"; echo "name = \"$6\""; echo "addr = \"$7\""
}
A=$(cluster a private fa 198.18.0.10 10.1.0.1 a1 10.1.0.11)
B=$(cluster b private fb 198.18.0.20 10.2.0.1 b1 10.2.0.11)
C=$(cluster p public "" "" "" p1 198.18.1.1)
printf '%s\n%s\n%s\n' "$A" "$B" "$C" > "$OUT/bench-grid.toml"
printf '%s\n%s\n' "$A" "$C" > "$OUT/pair-nat.toml"
printf '%s\n%s\n' "$A" "$B" > "$OUT/pair-relay.toml"
"$FERRY" testbed up "$OUT/bench-grid.toml" --prefix "$P" >/dev/null
trap '"$FERRY" testbed down --prefix "$P" >/dev/null' EXIT INT TERM
for r in $(seq "$ROUNDS"); do
  for path in nat relay punched; do
    grid=$path; punch=1
    [ "$path" = relay ] && punch=0
    [ "$path" = punched ] && grid=relay
    FERRY_PUNCH=$punch "$FERRY" run --grid "$OUT/pair-$grid.toml" --testbed-prefix "$P" \
      -n 2 --timeout 600 --show-paths "$FERRY" bench-rank pingpong 1 "$MAX" 0 1 "$OUT/$path-$r.csv" \
      >"$OUT/$path-$r.out" 2>"$OUT/$path-$r.err"
  done
done
{
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "attempts (pairs): outcome count, time to the working path min/median/max ms"
  tail -n +2 "$OUT/attempts.csv" | awk -F, '{ k = $1 " " $5; n[k]++; t[k] = t[k] " " $6 }
    END { for (k in n) { m = split(t[k], a, " "); for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { x = a[i]; a[i] = a[j]; a[j] = x }
      printf "%s: %d pairs, %.1f / %.1f / %.1f ms\n", k, n[k], a[1], a[int((m + 1) / 2)], a[m] } }' | sort
  echo "pingpong, best of the rounds: bytes, one-way us and MB/s per path"
  for path in nat relay punched; do
    cat "$OUT/$path"-*.csv | grep -v '^#' | grep -v '^bytes' | sed "s/^/$path,/"
  done | awk -F, '{ k = $2 " " $1; if (!(k in best) || $5 + 0 < best[k]) best[k] = $5 + 0; sizes[$2] = 1 }
    END { for (s in sizes) printf "%s nat %.1f us %.0f MB/s | relay %.1f us %.0f MB/s | punched %.1f us %.0f MB/s\n", s,
      best[s " nat"], s / best[s " nat"], best[s " relay"], s / best[s " relay"], best[s " punched"], s / best[s " punched"] }' | sort -n
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
