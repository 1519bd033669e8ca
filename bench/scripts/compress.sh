#!/usr/bin/env bash
# Compression on a slow WAN, in the one-machine testbed, as root: bandwidth from a1 to b1 of
# crates/testbed/grids/compress.toml (two private clusters, a1 through its NAT and b's relay)
# with the WAN links limited by `tc tbf` to each rate given, for sin(x) samples ("smooth") and
# random bytes, FERRY_COMPRESS=off against auto. Each point is one `squeeze bw` job (COUNT
# messages of 4 MiB, eight in flight; the last one checked); points are interleaved over ROUNDS
# rounds and the median is reported. Writes compress.csv (medians), compress-runs.csv (every
# run, with rank 0's compression counters), compress.md and the run's record to OUT.
#
#   bench/scripts/compress.sh [OUT (default bench/results/<date>-compress)] [RATE ...]
#   ROUNDS=3 bench/scripts/compress.sh bench/results/x 100mbit 1gbit
set -euo pipefail
cd "$(dirname "$0")/../.."
args="$*"
out=${1:-bench/results/$(date +%F)-compress}
shift || true
if [ $# -gt 0 ]; then rates=("$@"); else rates=(100mbit 1gbit); fi
rounds=${ROUNDS:-3}
ferry=target/release/ferry
squeeze=target/release/examples/squeeze
[ -x "$ferry" ] && [ -x "$squeeze" ] || cargo build -q --release -p ferry-cli -p ferry-core --bins --examples
[ "$(id -u)" = 0 ] || { echo "bench/scripts/compress.sh: the testbed needs root" >&2; exit 1; }

prefix="fyz$$-"
work=$(mktemp -d)
trap '"$ferry" testbed down --prefix "$prefix" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
mkdir -p "$out"

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

"$ferry" bench record --out "$out" --command "$0 $args (ROUNDS=$rounds)" >/dev/null
echo "rate,data,compress,mbytes_per_sec,frames_compressed,raw_bytes,sent_bytes,frames_raw_after_sample" > "$out/compress-runs.csv"
echo "rate,data,compress,mbytes_per_sec" > "$out/compress.csv"
for rate in "${rates[@]}"; do
  # About 5 s of raw data at the rate.
  case $rate in *gbit) count=${COUNT:-128} ;; *) count=${COUNT:-16} ;; esac
  sed "s/^wan_rate = .*/wan_rate = \"$rate\"/" crates/testbed/grids/compress.toml > "$work/grid.toml"
  "$ferry" testbed up "$work/grid.toml" --prefix "$prefix" >/dev/null
  declare -A runs=()
  for _ in $(seq "$rounds"); do
    for data in smooth random; do
      for mode in off auto; do
        text=$(FERRY_COMPRESS=$mode "$ferry" run --grid "$work/grid.toml" --testbed-prefix "$prefix" \
          -n 2 --timeout 300 "$squeeze" bw "$data" 4194304 "$count")
        v=$(echo "$text" | sed -n 's/^bw .* \([0-9.]*\) MB\/s$/\1/p')
        c=$(echo "$text" | sed -n 's/^bw [a-z]*: compressed \([0-9]*\) frames (\([0-9]*\) -> \([0-9]*\) bytes), raw after sample \([0-9]*\)$/\1,\2,\3,\4/p')
        runs[$data,$mode]+="$v "
        echo "$rate,$data,$mode,$v,$c" | tee -a "$out/compress-runs.csv"
      done
    done
  done
  for data in smooth random; do
    for mode in off auto; do
      echo "$rate,$data,$mode,$(echo "${runs[$data,$mode]}" | tr ' ' '\n' | grep . | median)" >> "$out/compress.csv"
    done
  done
  unset runs
  "$ferry" testbed down --prefix "$prefix" >/dev/null
done

awk -F, 'NR > 1 { v[$1 "," $2 "," $3] = $4; if (!seen[$1 "," $2]++) order[++n] = $1 "," $2 }
  END {
    print "| WAN rate | data | off MB/s | auto MB/s | auto / off |"
    print "|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      split(order[i], k, ","); o = v[order[i] ",off"]; a = v[order[i] ",auto"]
      printf "| %s | %s | %.1f | %.1f | %.2f |\n", k[1], k[2], o, a, a / o
    }
  }' "$out/compress.csv" | tee "$out/compress.md"
