#!/usr/bin/env bash
# bench/sim/search.sh — the seeds' worked case with hetsim's search: which fleet of CPU workers
# and GPU workers serves a short/long mix within its P99 targets for the least money.
#
#   bench/sim/search.sh [BUILD] [--out DIR]
#
# Traffic: 80 % short (8-32 tokens) / 20 % long (200-256 tokens), Poisson, at SEARCH_RATES
# (default "500 2000") req/s, 20 s each (2 s warm-up). SLO: short P99 <= 50 ms, long P99 <= 500
# ms, 99 % answered OK. Fleet (bench/sim/fleet.yaml): short -> CPU pool, long -> GPU pool, each
# failing over to the other for at most 30 % of its blocked traffic; ranges cpu 0..24, gpu 0..3.
# Costs: the CPU worker is this machine's 2-core engine as `bench/sim/validate.sh` profiled and
# calibrated it (profile-a.json, calibration-a.txt: run validate.sh first); the GPU worker is
# bench/sim/gpu-published.json (published throughput + stated assumptions; no GPU has profiled
# one yet). Prices: bench/sim/prices.json (list prices, with their sources).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=build
OUT=bench/out/sim
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) BUILD=$1 ;;
  esac
  shift
done
[ -f "$OUT/profile-a.json" ] && [ -f "$OUT/calibration-a.txt" ] ||
  { echo "sim/search.sh: run bench/sim/validate.sh first (needs $OUT/profile-a.json)" >&2; exit 1; }
# the calibrated serving tax of the 2-core engine (cpu01) becomes the CPU worker's
read -r -a CAL <"$OUT/calibration-a.txt"
ARGS=()
for ((i = 0; i < ${#CAL[@]}; i += 2)); do
  case "${CAL[$i]}" in
    --tax) ARGS+=(--tax "cpu=${CAL[$((i + 1))]#*=}") ;;
    --overhead-ms) ARGS+=(--overhead-ms "${CAL[$((i + 1))]}") ;;
  esac
done
for r in ${SEARCH_RATES:-500 2000}; do
  echo "== $r req/s, 80 % short 8-32 / 20 % long 200-256 tokens; SLO short P99 50 ms, long P99 500 ms"
  "$BUILD/hetsim" --config bench/sim/fleet.yaml --profile "$OUT/profile-a.json" --as cpu=cpu01 \
    --profile bench/sim/gpu-published.json "${ARGS[@]}" \
    --lengths "short=80:8-32,long=20:200-256" --rate "$r" --duration 20 --warmup 2 \
    --search cpu=0..24,gpu=0..3 --slo short=50,long=500 --prices bench/sim/prices.json |
    tee "$OUT/search-$r.txt"
done
