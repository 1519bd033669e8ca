#!/usr/bin/env bash
# Installs ferry into a temporary prefix and builds and runs C (and C++) MPI programs with the
# installed mpicc/mpicxx and mpiexec, as a user would. Also checks the wrappers' -show.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash "$root/scripts/install.sh" "$tmp/prefix" >/dev/null
export PATH="$tmp/prefix/bin:$PATH"
cd "$tmp"

fail() { echo "test-install: $*" >&2; exit 1; }

# -show prints the command and runs nothing; compiling only adds no link flags.
show=$(mpicc -show hello.c -o hello)
case "$show" in *"-I$tmp/prefix/include"*"-lmpi"*"-Wl,-rpath,$tmp/prefix/lib"*) ;; *) fail "mpicc -show: $show" ;; esac
case "$(mpicc -show -c hello.c)" in *-lmpi*) fail "mpicc -c adds link flags" ;; esac

cat >hello.c <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size - 1) / 2) {
        printf("rank %d: sum %d\n", rank, sum);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    printf("hello from %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
C
mpicc hello.c -o hello
out=$(mpiexec -n 2 ./hello | sort)
[ "$out" = "$(printf 'hello from 0 of 2\nhello from 1 of 2')" ] || fail "mpiexec -n 2 ./hello printed: $out"

cp hello.c hello.cpp
mpicxx hello.cpp -o hellocxx
out=$(mpirun -np 2 ./hellocxx | sort)
[ "$out" = "$(printf 'hello from 0 of 2\nhello from 1 of 2')" ] || fail "mpirun -np 2 ./hellocxx printed: $out"

# Makefiles set CC to the wrapper, and make exports it to the recipe: the wrappers take their
# compiler from FERRY_CC / FERRY_CXX only, or they would run themselves forever.
if command -v make >/dev/null; then
  mkdir mk && cp hello.c mk/hello.c && cp hello.cpp mk/hellocxx.cpp
  cat >mk/spmd.c <<'C'
#include <bsp.h>
#include <stdio.h>
int main(void) {
    bsp_begin(bsp_nprocs());
    printf("bsp %d of %d\n", bsp_pid(), bsp_nprocs());
    bsp_end();
    return 0;
}
C
  printf 'all: hello hellocxx\n' >mk/Makefile
  (cd mk && env -u FERRY_CC -u FERRY_CXX timeout 30 make -s CC=mpicc CXX=mpicxx) || fail "make CC=mpicc CXX=mpicxx"
  (cd mk && env -u FERRY_CC timeout 30 make -s CC=bspcc spmd) || fail "make CC=bspcc"
  out=$(mpiexec -n 2 mk/spmd | sort)
  [ "$out" = "$(printf 'bsp 0 of 2\nbsp 1 of 2')" ] || fail "mpiexec -n 2 mk/spmd printed: $out"
  # The Oxford BSP toolset's way: its options in CFLAGS, and bsprun -npes.
  (cd mk && rm -f spmd && env -u FERRY_CC timeout 30 make -s CC=bspcc \
      CFLAGS='-O3 -flibrary-level 2 -bspfifo 10000 -fcombine-puts -fcombine-puts-buffer 256K,128M,4K' spmd) ||
    fail "make CC=bspcc CFLAGS=<the toolset's options>"
  out=$(bsprun -npes 2 mk/spmd | sort)
  [ "$out" = "$(printf 'bsp 0 of 2\nbsp 1 of 2')" ] || fail "bsprun -npes 2 mk/spmd printed: $out"
  cp mk/spmd.c mk/spmdcxx.cpp
  (cd mk && env -u FERRY_CXX timeout 30 bspc++ -fnocombine-puts spmdcxx.cpp -o spmdcxx) || fail "bspc++"
  out=$(bsprun -npes 2 mk/spmdcxx | sort)
  [ "$out" = "$(printf 'bsp 0 of 2\nbsp 1 of 2')" ] || fail "bsprun -npes 2 mk/spmdcxx printed: $out"
else
  echo "test-install: make is not installed: make CC=mpicc / CC=bspcc not checked"
fi

# Fortran (when install.sh found a Fortran compiler): mpif.h, `use mpi` and `use mpi_f08` (with
# strided array sections as buffers)
# through mpifort/mpif77/mpif90, and the Jacobi example giving the same answer at 1 and 3 ranks.
if [ -x "$tmp/prefix/bin/mpifort" ]; then
  show=$(mpifort -show hello.f90 -o hello)
  case "$show" in *"-I$tmp/prefix/include"*"-lmpifort"*"-lmpi"*) ;; *) fail "mpifort -show: $show" ;; esac
  case "$(mpifort -show -c hello.f90)" in *-lmpi*) fail "mpifort -c adds link flags" ;; esac
  mpif77 "$root/fortran/tests/basics77.f" -o basics77
  mpif90 "$root/fortran/tests/basics90.f90" -o basics90
  mpifort "$root/fortran/tests/basics08.f90" -o basics08
  mpifort "$root/fortran/tests/subarrays08.f90" -o subarrays08
  for p in basics77 basics90 basics08 subarrays08; do
    for n in 1 2; do
      out=$(mpiexec -n $n ./$p)
      [ "$out" = " No Errors" ] || fail "mpiexec -n $n ./$p printed: $out"
    done
  done
  mpifort -O2 "$root/examples/fortran/jacobi.f90" -o jacobi
  one=$(mpiexec -n 1 ./jacobi 32 | head -1)
  three=$(mpiexec -n 3 ./jacobi 32 | head -1)
  [ -n "$one" ] && [ "$one" = "$three" ] || fail "jacobi at 1 and 3 ranks: '$one' / '$three'"
  fortran=", mpifort/mpif77/mpif90"
else
  echo "test-install: no Fortran compiler: mpifort not checked"
fi
echo "test-install: ok (mpicc, mpicxx${fortran:-}, mpiexec, mpirun from an installed prefix; make CC=mpicc, CC=bspcc with the BSP toolset's options, bspc++, bsprun)"
