#!/usr/bin/env bash
# The test command: formatting, lints, then every test of the workspace (unit, property and
# multi-process tests through `ferry run`), in release mode. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --release --workspace
