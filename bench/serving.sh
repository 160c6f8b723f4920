#!/usr/bin/env bash
# bench/serving.sh — what the serving layer buys and what it costs (issue 3).
#
#   bench/serving.sh [BUILD] [--quick] [--out DIR]
#
# 1. Batching on vs off, same offered load, short texts (8-32 tokens):
#      A: batch_window_us 2000, batch_max 32 (the defaults)
#      B: batch_window_us 0,    batch_max 1  (every request is its own batch)
#    Both capacities are measured first (closed loop); then both configs get the same open-loop
#    Poisson rates, at 0.8x, 2x and 4x B's capacity and 0.9x A's (same seed, so the same
#    arrivals). The report gives throughput (2xx/s) and P95 of each and the ratios A/B. Target:
#    >= 3x the throughput at equal or better P95, counted only where A keeps up.
# 2. Server overhead at low load (open loop, ~10 % of B's capacity), per request from
#    Server-Timing: end-to-end (client) minus engine time (copy_in + compute + copy_out), split
#    into client-vs-server (HTTP, kernel, client), queue wait, and the server's own stages.
#    Measured on B (no batching window: pure machinery) and on A (adds the window's wait).
#    Target: overhead <= 3 % of end-to-end at P50.
#
# SERVING_RATES="R1 R2 ..." replaces the rates derived from B's capacity (a noisy machine can
# mis-measure it); SERVING_DURATION_S sets the run length (default 12 s).
# Numbers are printed, never judged against absolute times. Everything goes to loopback only.
# Output: DIR (default bench/out/serving): summary.txt, one JSON + CSV per hetbench run, server
# logs. --quick: 3 s runs, to check the script (numbers meaningless). Bounded: ~5 min default.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

BUILD=build
OUTDIR=bench/out/serving
DURATION=${SERVING_DURATION_S:-12}
WARMUP=2
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) DURATION=3; WARMUP=1 ;;
    --out) OUTDIR=$2; shift ;;
    -h|--help) sed -n 2,23p "$0"; exit 0 ;;
    -*) echo "serving.sh: unknown option $1" >&2; exit 2 ;;
    *) BUILD=$1 ;;
  esac
  shift
done
MODEL=${HS_MODEL_DIR:-models/all-MiniLM-L6-v2}
[ -f "$MODEL/config.json" ] || { echo "serving.sh: model $MODEL missing (make setup)" >&2; exit 1; }

. bench/lib.sh
hs_bench_init "$BUILD" "$OUTDIR" || exit 1
rm -f "$BENCH_OUT"/*.json "$BENCH_OUT"/*.csv

write_config() { # file window_us batch_max
  cat >"$1" <<EOF
server:
  host: "127.0.0.1"
engines:
  - name: cpu0
    kind: cpu
models:
  - path: "$MODEL"
    engine: cpu0
batching:
  batch_window_us: $2
  batch_max: $3
limits:
  timeout_ms: 10000
EOF
}
write_config "$BENCH_TMP/A.yaml" 2000 32
write_config "$BENCH_TMP/B.yaml" 0 1
cp "$BENCH_TMP/A.yaml" "$BENCH_OUT/config-A.yaml"
cp "$BENCH_TMP/B.yaml" "$BENCH_OUT/config-B.yaml"

LENGTHS="short=100:8-32"
bench() { # tag hetbench-load-options...
  local tag=$1; shift
  echo "  $tag: $*" >&2
  "$HETBENCH" --url "$SERVER_URL" --lengths "$LENGTHS" --seed 7 --timeout-ms 20000 --quiet \
    --json --csv "$BENCH_OUT/$tag.csv" "$@" >"$BENCH_OUT/$tag.json"
}
warm() { # first batches of each shape pay one-time costs (page faults, GEMM setup)
  "$HETBENCH" --url "$SERVER_URL" --lengths "$LENGTHS" --concurrency 4 --requests 100 --quiet \
    --json >/dev/null 2>&1
}
rps_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["all"]["rps"])' "$1"; }

{ echo "# serving benchmark, $(hs_load_note)"; } >"$BENCH_OUT/load.txt"

# --- the engine's own batching gain: the ceiling of what the server can show ---------------------
# (a single sequence is already 16-32 GEMM rows, so batching gains less on an encoder than on a
# decoder; the server cannot beat the engine's batch-32 / batch-1 ratio at equal P95)
if [ -x "$BUILD/bench_cpu" ]; then
  echo "serving: engine alone (bench_cpu, $(nproc) threads; the first 32x32 warms up): 1x16 1x32 32x16 32x32"
  "$BUILD/bench_cpu" --model "$MODEL" --threads "$(nproc)" --shapes 32x32,1x16,1x32,32x16,32x32 \
    --seconds "$((DURATION / 4 + 1))" --no-peak 2>/dev/null | grep '^{' >"$BENCH_OUT/engine.jsonl"
fi
echo "serving: load before: $(hs_load_note)"

# --- capacities: A's (closed loop, 64 clients), then B's (4 clients) -------------------------------
hs_server_start A "$BENCH_TMP/A.yaml" || exit 1
echo "serving: config A (batching) at $SERVER_URL"
warm
bench A-capacity --concurrency 64 --duration "$DURATION" --warmup "$WARMUP" || exit 1
CAP_A=$(rps_of "$BENCH_OUT/A-capacity.json")
hs_server_stop || echo "serving: server A exited non-zero" >&2

hs_server_start B "$BENCH_TMP/B.yaml" || exit 1
echo "serving: config B (no batching) at $SERVER_URL"
warm
bench B-capacity --concurrency 4 --duration "$DURATION" --warmup "$WARMUP" || exit 1
CAP_B=$(rps_of "$BENCH_OUT/B-capacity.json")
echo "serving: capacity A ~ $CAP_A req/s, B ~ $CAP_B req/s (closed loop)"
# 0.8x, 2x, 4x B's capacity, and 0.9x A's: where A still keeps up and B is furthest past its own
RATES=${SERVING_RATES:-}
[ -n "$RATES" ] || RATES=$(python3 -c 'import sys; b, a = float(sys.argv[1]), float(sys.argv[2]); print(" ".join(sorted({"%.1f" % max(1.0, x) for x in (0.8*b, 2*b, 4*b, 0.9*a)}, key=float)))' "$CAP_B" "$CAP_A")
LOW=$(python3 -c 'import sys; print("%.1f" % min(20.0, max(2.0, float(sys.argv[1]) * 0.1)))' "$CAP_B")
echo "serving: open-loop rates $RATES req/s; low load $LOW req/s"
for r in $RATES; do bench "B-rate-$r" --rate "$r" --duration "$DURATION" --warmup "$WARMUP"; done
bench B-low --rate "$LOW" --duration $((DURATION + 8)) --warmup "$WARMUP"
hs_server_stop || echo "serving: server B exited non-zero" >&2

# --- A at the same rates ---------------------------------------------------------------------------
hs_server_start A "$BENCH_TMP/A.yaml" || exit 1
warm
for r in $RATES; do bench "A-rate-$r" --rate "$r" --duration "$DURATION" --warmup "$WARMUP"; done
bench A-low --rate "$LOW" --duration $((DURATION + 8)) --warmup "$WARMUP"
hs_server_stop || echo "serving: server A exited non-zero" >&2

echo "serving: load after: $(hs_load_note)"
{ echo "# load after: $(hs_load_note)"; } >>"$BENCH_OUT/load.txt"
python3 bench/serving_report.py "$BENCH_OUT" | tee "$BENCH_OUT/summary.txt"
