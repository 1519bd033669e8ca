#!/bin/sh
# grid-ab.sh FERRY OUT ROUNDS MIN MAX VARIANT...   VARIANT = name:path:ENV=V,ENV=V  (env may be empty)
# Runs every variant once per round, interleaved; one testbed for all.
set -eu
FERRY=$(realpath "$1"); OUT=$2; ROUNDS=$3; MIN=$4; MAX=$5; shift 5
GRIDS=$(cd "$(dirname "$0")/../../crates/testbed/grids" && pwd)
P="fya$$-"
mkdir -p "$OUT"
"$FERRY" testbed up "$GRIDS/three.toml" --prefix "$P" >/dev/null
trap '"$FERRY" testbed down --prefix "$P" >/dev/null' EXIT INT TERM
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/load.txt"
# BRNF=0: the switch namespace's bridges stop calling iptables (br_netfilter).
if [ -n "${BRNF:-}" ]; then
  ip netns exec "${P}sw" sysctl -q -w net.bridge.bridge-nf-call-iptables=$BRNF
  echo "switch bridge-nf-call-iptables=$(ip netns exec "${P}sw" cat /proc/sys/net/bridge/bridge-nf-call-iptables)" >> "$OUT/load.txt"
fi
for r in $(seq "$ROUNDS"); do
  for v in "$@"; do
    name=${v%%:*}; rest=${v#*:}; path=${rest%%:*}; envs=${rest#*:}
    ra=""; case "$envs" in *RSPIN=*) ra="--relay-spin-us $(echo "$envs" | sed 's/.*RSPIN=\([0-9]*\).*/\1/')";; esac
    case "$envs" in *RCOPY=*) ra="$ra --relay-copy $(echo "$envs" | sed 's/.*RCOPY=\([a-z]*\).*/\1/')";; esac
    bin=$FERRY; case "$envs" in *BIN=*) bin=$(echo "$envs" | sed 's/.*BIN=\([^,]*\).*/\1/');; esac
    env $(echo "$envs" | tr ',' ' ') "$bin" run $ra --grid "$GRIDS/pairs/$path.toml" --testbed-prefix "$P" \
      -n 2 --timeout 600 /usr/bin/time -f ferry-cpu:%U:%S:%e "$bin" bench-rank pingpong "$MIN" "$MAX" 0 1 "$OUT/$name-$r.csv" 2>"$OUT/$name-$r.err"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"
