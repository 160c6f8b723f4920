#!/usr/bin/env bash
# Router <-> worker measurements on loopback (issue 11 item 5): hop cost, router decisions per
# second on one core, throughput with 1/2/3 workers. Run by hand (or make bench-remote) on an
# otherwise idle machine; prints a Markdown table (bench/out/remote/results.md).
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
export HETSERVE_BIN=${HETSERVE_BIN:-$PWD/$BUILD/hetserve} OMP_WAIT_POLICY=passive
python3 bench/remote_bench.py "$BUILD"
