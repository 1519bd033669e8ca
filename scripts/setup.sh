#!/usr/bin/env bash
# Installs what ferry needs on a Debian machine and builds it (release): the `ferry` binary and
# the examples land in target/release/.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

# System packages: a C toolchain for crates with build scripts, the DejaVu font for plot text,
# iproute2 and iptables for the network-namespace testbed, OpenSSH (server and client) for
# its hosts with their own sshd (`ferry testbed up --ssh`) and for launching over ssh, MPICH
# for its process manager (`mpiexec.hydra`, which the PMI tests start ferry's ranks under), and
# Slurm and munge for the testbed's own Slurm cluster (`ferry testbed up --slurm`) and the srun
# launcher's tests, with libpmix for its `--mpi=pmix` (about 20 s with downloads on Debian 12;
# the services they start are unused).
need=()
command -v cc >/dev/null || need+=(build-essential)
# make for the BSPlib test that builds a classic code with its own Makefile (bsplib/tests/classic.rs).
command -v make >/dev/null || need+=(make)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
command -v ip >/dev/null || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null || need+=(openssh-client)
command -v mpiexec.hydra >/dev/null || need+=(mpich)
command -v slurmctld >/dev/null || [ -x /usr/sbin/slurmctld ] || need+=(slurm-wlm)
command -v munged >/dev/null || [ -x /usr/sbin/munged ] || need+=(munge)
# gfortran for the Fortran bindings (mpifort, mpif.h, the mpi and mpi_f08 modules), which are
# built with the Fortran compiler that uses them.
command -v gfortran >/dev/null || need+=(gfortran)
# gdb for the debugger tests (MPIR process acquisition, `ferry run --gdb`).
command -v gdb >/dev/null || need+=(gdb)
# Reference BLAS and LAPACK for MUMPS, the Fortran application conformance/mumps builds.
[ -e /usr/lib/x86_64-linux-gnu/libblas.so ] || [ -e /usr/lib/libblas.so ] || need+=(libblas-dev)
[ -e /usr/lib/x86_64-linux-gnu/liblapack.so ] || [ -e /usr/lib/liblapack.so ] || need+=(liblapack-dev)
# libpmix for ranks started by a PMIx server (srun --mpi=pmix, prterun): loaded at run time.
ldconfig -p 2>/dev/null | grep -q 'libpmix.so.2 ' || need+=(libpmix2)
# Slurm's mpi/pmix plugin loads OpenPMIx by its unversioned name, which only libpmix-dev
# installs (without it: `srun: error: mpi/pmix_v4: ... can not load PMIx library`).
[ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || need+=(libpmix-dev)
# libfabric for the RDMA fabrics (verbs, EFA, Slingshot CXI; tcp and shm without such a NIC):
# loaded at run time by crates/fabric; the -dev package has the headers its layouts follow.
ldconfig -p 2>/dev/null | grep -q 'libfabric.so.1 ' || need+=(libfabric1)
[ -e /usr/include/rdma/fabric.h ] || need+=(libfabric-dev)
# hwloc for the ranks' mapping and binding (crates/topo loads libhwloc.so.15 at run time).
ldconfig -p 2>/dev/null | grep -q 'libhwloc.so.15 ' || need+=(libhwloc15)
if [ ${#need[@]} -gt 0 ]; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; ferry needs Rust 1.82 or newer (https://rustup.rs)" >&2
  exit 1
fi
cargo build --release --workspace --lib --bins --examples
