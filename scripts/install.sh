#!/usr/bin/env bash
# Builds ferry (release) and installs it like an MPI installation:
#   PREFIX/bin/{ferry,mpicc,mpicxx,mpic++,mpicc_abi,mpicxx_abi,mpiexec,mpirun,bspcc,bspc++,bspcxx,bsprun}
#   PREFIX/include/{mpi.h,mpi-ext.h,mpi_abi.h,bsp.h,bsp_settings.c}
#   PREFIX/lib/{libmpi.so,libmpi_abi.so.1,libmpi_abi.so,libbsp.so}
# and, when a Fortran compiler is found ($FERRY_FC, else gfortran), the Fortran bindings built
# with it: PREFIX/bin/{mpifort,mpif90,mpif77}, PREFIX/include/{mpif.h,mpi.mod,mpi_f08.mod},
# PREFIX/lib/libmpifort.so (FERRY_FORTRAN=0 leaves them out).
# Usage: scripts/install.sh PREFIX   (or: make install PREFIX=...)
# The wrappers find the headers, libraries and `ferry` relative to PREFIX/bin, so the tree can be
# moved as a whole. Set FERRY_NO_BUILD=1 to install what target/release already holds.
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: scripts/install.sh PREFIX" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
prefix=$(cd "$1" && pwd)
target=${CARGO_TARGET_DIR:-$root/target}/release

if [ "${FERRY_NO_BUILD:-0}" != 1 ]; then
    (cd "$root" && cargo build --release -p ferry-cli -p ferry-mpi -p ferry-bsplib)
fi
for f in "$target/ferry" "$target/libmpi.so" "$target/libbsp.so"; do
    if [ ! -f "$f" ]; then
        echo "install: $f is missing (cargo build --release -p ferry-cli -p ferry-mpi -p ferry-bsplib)" >&2
        exit 1
    fi
done

mkdir -p "$prefix/bin" "$prefix/include" "$prefix/lib"
install -m 755 "$target/ferry" "$prefix/bin/ferry"
install -m 755 "$root/crates/mpi/bin/mpicc" "$prefix/bin/mpicc"
install -m 755 "$root/crates/mpi/bin/mpiexec" "$prefix/bin/mpiexec"
ln -sf mpicc "$prefix/bin/mpicxx"
ln -sf mpicc "$prefix/bin/mpic++"
# MPICH 5 names its standard-ABI wrappers so; ferry's mpicc is already one.
ln -sf mpicc "$prefix/bin/mpicc_abi"
ln -sf mpicc "$prefix/bin/mpicxx_abi"
ln -sf mpiexec "$prefix/bin/mpirun"
install -m 644 "$root/crates/mpi/include/mpi.h" "$prefix/include/mpi.h"
install -m 644 "$root/crates/mpi/include/mpi-ext.h" "$prefix/include/mpi-ext.h"
install -m 644 "$root/crates/bsplib/include/bsp.h" "$prefix/include/bsp.h"
# mpi.h is the MPI 5.0 standard ABI's header; mpi_abi.h is the name MPICH 5 gives that header.
printf '/* The MPI 5.0 standard ABI: ferry'"'"'s mpi.h is that header. */\n#include "mpi.h"\n' \
    >"$prefix/include/mpi_abi.h"
chmod 644 "$prefix/include/mpi_abi.h"
install -m 755 "$target/libmpi.so" "$prefix/lib/libmpi.so"
# The MPI 5.0 standard ABI's names: the SONAME (what programs linked against either name, and
# those built by MPICH 5's mpicc_abi, load at run time) and the link-time name.
ln -sf libmpi.so "$prefix/lib/libmpi_abi.so.1"
ln -sf libmpi.so "$prefix/lib/libmpi_abi.so"
install -m 755 "$target/libbsp.so" "$prefix/lib/libbsp.so"

# BSPlib as the Oxford BSP toolset's users build and run it: bspcc (bspc++, bspcxx) finds the
# header, its settings file and the library next to itself in this layout; bsprun the ferry binary.
install -m 755 "$root/crates/bsplib/bspcc" "$prefix/bin/bspcc"
ln -sf bspcc "$prefix/bin/bspc++"
ln -sf bspcc "$prefix/bin/bspcxx"
install -m 755 "$root/crates/bsplib/bsprun" "$prefix/bin/bsprun"
install -m 644 "$root/crates/bsplib/include/bsp_settings.c" "$prefix/include/bsp_settings.c"
# Fortran: module files belong to one compiler, so they are made here, with the one at hand.
read -r -a fc <<<"${FERRY_FC:-gfortran}"
if [ "${FERRY_FORTRAN:-1}" = 0 ]; then
    :
elif command -v "${fc[0]}" >/dev/null; then
    "$root/fortran/build.sh" "$prefix" "$prefix/include" "$prefix/lib"
    install -m 755 "$root/fortran/bin/mpifort" "$prefix/bin/mpifort"
    ln -sf mpifort "$prefix/bin/mpif90"
    ln -sf mpifort "$prefix/bin/mpif77"
else
    echo "install: no Fortran compiler (${fc[0]}): mpifort, mpif.h and the modules are left out" >&2
fi
echo "installed ferry into $prefix (add $prefix/bin to PATH)"
