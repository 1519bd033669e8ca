#!/usr/bin/env bash
# The test command: formatting, lints, then every test of the workspace (unit, property and
# multi-process tests through `ferry run`, and every fuzz target for FERRY_FUZZ_SECS seconds,
# default 10: fuzz/README.md), in release mode. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --release --workspace

# The MPI C ABI from the outside: an installed prefix (mpicc + mpiexec), MPICH's own test suite
# (conformance/run: tier1, tier2, tierlite) and NetPIPE's integrity sweep. FERRY_CONFORMANCE=0
# skips them (for a quick local run).
if [ "${FERRY_CONFORMANCE:-1}" = 1 ]; then
  cargo build --release -p ferry-mpi -p ferry-cli # the wrappers use target/release
  bash scripts/test-install.sh
  python3 conformance/run
  bash conformance/netpipe
fi
