#!/usr/bin/env bash
# Multi-rail bandwidth on the one-machine testbed, as root:
#   1. two links both limited to R: one rail vs two rails (weighted and round-robin);
#   2. links of R and R/4: one rail (the better link) vs weighted vs round-robin striping.
# Each point is one `check stream` job (rank 0 on host r1 streams COUNT messages of 4 MiB to
# rank 1 on host r2, eight in flight, checked); points are interleaved over ROUNDS rounds and
# the median is reported. Writes rails.csv (medians), rails-runs.csv (every run), rails.md and
# the run's record machine.txt to OUT.
#
#   bench/scripts/rails.sh [R (tc rate, default 200mbit)] [OUT (default bench/results/<date>-rails)]
#   ROUNDS=3 COUNT=32 bench/scripts/rails.sh 500mbit
set -euo pipefail
cd "$(dirname "$0")/../.."
rate=${1:-200mbit}
out=${2:-bench/results/$(date +%F)-rails}
rounds=${ROUNDS:-3}
count=${COUNT:-32}
ferry=target/release/ferry
check=target/release/examples/check
[ -x "$ferry" ] && [ -x "$check" ] || cargo build -q --release -p ferry-cli -p ferry-core --bins --examples
[ "$(id -u)" = 0 ] || { echo "bench/scripts/rails.sh: the testbed needs root" >&2; exit 1; }

num=${rate%%[a-z]*}
unit=${rate#"$num"}
quarter="$((num / 4))$unit"
prefix="fyr$$-"
work=$(mktemp -d)
trap '"$ferry" testbed down --prefix "$prefix" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
mkdir -p "$out"

# The rails grid with rail 0 at $1 and rail 1 at $2.
grid() {
  sed -e "s/^kind = \"public\"/kind = \"public\"\nrate = \"$1\"/" \
      -e "s|^subnet = \"10.201.0.0/24\"|subnet = \"10.201.0.0/24\"\nrate = \"$2\"|" \
      crates/testbed/grids/rails.toml > "$work/grid.toml"
}

# MB/s of one stream job with the given environment.
stream() {
  env "$@" "$ferry" run --grid "$work/grid.toml" --testbed-prefix "$prefix" -n 2 --timeout 300 \
    "$check" stream 4194304 "$count" | sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p'
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

echo "links,mode,mbytes_per_sec" > "$out/rails.csv"
"$ferry" bench record --out "$out" --command "$0 $* (ROUNDS=$rounds COUNT=$count)" >/dev/null
echo "links,mode,mbytes_per_sec" > "$out/rails-runs.csv"
for links in "$rate/$rate" "$rate/$quarter"; do
  grid "${links%/*}" "${links#*/}"
  "$ferry" testbed up "$work/grid.toml" --prefix "$prefix" >/dev/null
  declare -A runs=()
  for _ in $(seq "$rounds"); do
    for mode in single weighted roundrobin; do
      case $mode in
        single) v=$(stream FERRY_RAILS=1) ;;
        *) v=$(stream FERRY_RAIL_POLICY=$mode) ;;
      esac
      runs[$mode]+="$v "
      echo "$links,$mode,$v" >> "$out/rails-runs.csv"
    done
  done
  for mode in single weighted roundrobin; do
    echo "$links,$mode,$(echo "${runs[$mode]}" | tr ' ' '\n' | grep . | median)" >> "$out/rails.csv"
  done
  unset runs
  "$ferry" testbed down --prefix "$prefix" >/dev/null
done

awk -F, -v rate="$rate" 'NR > 1 { v[$1 "," $2] = $3; order[++n] = $1 }
  END {
    print "| links (rail 0, rail 1) | one rail MB/s | weighted MB/s | round-robin MB/s | weighted / one rail | round-robin / one rail |"
    print "|---|---|---|---|---|---|"
    for (i = 1; i <= n; i += 3) {
      l = order[i]; s = v[l ",single"]; w = v[l ",weighted"]; r = v[l ",roundrobin"]
      printf "| %s | %.1f | %.1f | %.1f | %.2f | %.2f |\n", l, s, w, r, w / s, r / s
    }
  }' "$out/rails.csv" | tee "$out/rails.md"
