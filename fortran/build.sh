#!/usr/bin/env bash
# Builds ferry's Fortran bindings with the Fortran compiler at hand (module files belong to one
# compiler and version, so they are made where they are used, as MPICH's are):
#   fortran/build.sh OUT INCDIR LIBDIR
# reads INCDIR/mpi.h and LIBDIR/libmpi.so and writes
#   OUT/include/{mpif.h,mpi.mod,mpi_f08.mod}   OUT/lib/libmpifort.so (links to libmpi.so)
# The compilers are $FERRY_FC (else gfortran) and $FERRY_CC (else cc).
set -euo pipefail
if [ $# -ne 3 ]; then
    echo "usage: fortran/build.sh OUT INCDIR LIBDIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1/include" "$1/lib"
out=$(cd "$1" && pwd)
incdir=$(cd "$2" && pwd)
libdir=$(cd "$3" && pwd)
read -r -a fc <<<"${FERRY_FC:-gfortran}"
read -r -a cc <<<"${FERRY_CC:-cc}"
if ! command -v "${fc[0]}" >/dev/null; then
    echo "fortran/build.sh: no Fortran compiler ${fc[0]} (install gfortran or set FERRY_FC)" >&2
    exit 1
fi
if [ ! -f "$libdir/libmpi.so" ]; then
    echo "fortran/build.sh: $libdir/libmpi.so is missing (cargo build --release -p ferry-mpi)" >&2
    exit 1
fi

# The library carries the time the build started: a source changed during the build is newer,
# and fortran/bin/mpifort builds again.
started=$(date +%s.%N)
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-fortran.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 "$here/gen.py" --mpi-h "$incdir/mpi.h" --out "$work"
cp "$here/ferry_fortran.h" "$here/handwritten.c" "$here/choice.c" "$work/"
# libmpifort.so finds libmpi beside itself (an installed prefix, also one that moved, as a
# wheel's venv) or else where it was built against: a program's own RUNPATH does not reach
# the libraries its libraries need.
rpath=(-Wl,-rpath,'$ORIGIN')
[ "$out/lib" = "$libdir" ] || rpath+=(-Wl,-rpath,"$libdir")
(
    cd "$work"
    "${cc[@]}" -O2 -fPIC -fno-plt -fno-semantic-interposition -Wall -I"$incdir" -I. -c mpi_fortran.c handwritten.c choice.c
    # The modules only declare (interfaces, constants, common blocks) but for mpi_f08's
    # comparison operators, which land in libmpifort.so with the C entry points.
    "${fc[@]}" -O2 -fPIC -c mpi.f90 mpi_f08.f90
    "${fc[@]}" -shared -o libmpifort.so -Wl,-soname,libmpifort.so \
        mpi_fortran.o handwritten.o choice.o mpi.o mpi_f08.o -L"$libdir" -lmpi "${rpath[@]}"
)
# Written last and each in one step, so a reader never sees half a library.
install -m 644 "$work/mpif.h" "$work/mpi.mod" "$work/mpi_f08.mod" "$out/include/"
install -m 755 "$work/libmpifort.so" "$out/lib/libmpifort.so"
touch -d "@$started" "$out/lib/libmpifort.so"
