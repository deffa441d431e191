#!/usr/bin/env bash
# Run the benchmarks against upstream's manager in the same run (as root, for the rootfs).
#   bash bench/run.sh [startup RUNS WORKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins -p knot-resolver -p bench
which=${1:-startup}
shift || true
exec "target/release/$which" "$@"
