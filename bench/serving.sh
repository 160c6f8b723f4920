#!/usr/bin/env bash
# bench/serving.sh — what the serving layer holds under load, and what it costs (issues 3, 10).
#
#   bench/serving.sh [BUILD] [--quick] [--out DIR]
#
# The server runs with its default settings (config A below names only the engine and model,
# plus a loopback host); the client is hetbench on the same machine, short generated texts.
# 1. Capacity: A's closed-loop throughput (96 clients), and the engine alone (bench_cpu, no
#    server idle) at batch 32 and the mean request length of that run: the server's batched
#    throughput as a share of the engine's own ceiling (target >= 90 %). Capacity is measured
#    again after every overload point (a shared machine drifts); each point is judged against
#    the mean of the capacity runs before and after it. B (batch_window_us 0,
#    batch_max 1: every request its own batch) is measured too, for the A/B batching ratio.
# 2. Overload: open-loop Poisson arrivals at 0.9x, 1.5x and 3x A's capacity. Per point: goodput
#    (2xx/s) and goodput/capacity (target >= 90 % at every point), P50/P99 of the 2xx (within
#    their deadline: the default 10 s, and admission's wait_max_ms), 429 (refused at admission,
#    with Retry-After) and 504 counts, and admission's prediction checked against what happened
#    (hetserve_prediction_ratio from /metrics, before and after the point).
# 3. Sharing the cores: the 1.5x point again with a competing busy process on the machine; the
#    slowest batch (compute) and goodput (target: no 350 ms batches, the old OpenMP stall).
# 4. Server overhead at low load (open loop, ~10 % of B's capacity), per request from
#    Server-Timing: end-to-end minus engine time, split into client-vs-server (HTTP, kernel,
#    client), queue wait, and the server's own stages; on B (no window) and on A.
#
# SERVING_RATES="R1 R2 ..." replaces the overload rates; SERVING_DURATION_S sets the run length
# (default 12 s). Numbers are printed, never judged against absolute times. Loopback only.
# Output: DIR (default bench/out/serving): summary.txt, one JSON + CSV per hetbench run, metrics
# snapshots, server logs. --quick: 3 s runs, to check the script (numbers meaningless).
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
    -h|--help) sed -n 2,30p "$0"; exit 0 ;;
    -*) echo "serving.sh: unknown option $1" >&2; exit 2 ;;
    *) BUILD=$1 ;;
  esac
  shift
done
MODEL=${HS_MODEL_DIR:-models/all-MiniLM-L6-v2}
[ -f "$MODEL/config.json" ] || { echo "serving.sh: model $MODEL missing (make setup)" >&2; exit 1; }

. bench/lib.sh
hs_bench_init "$BUILD" "$OUTDIR" || exit 1
rm -f "$BENCH_OUT"/*.json "$BENCH_OUT"/*.csv "$BENCH_OUT"/*.metrics "$BENCH_OUT"/engine*.jsonl

write_config() { # file [window_us batch_max]
  {
    printf 'server:\n  host: "127.0.0.1"\nengines:\n  - name: cpu0\n    kind: cpu\n'
    printf 'models:\n  - path: "%s"\n    engine: cpu0\n' "$MODEL"
    [ $# -gt 1 ] && printf 'batching:\n  batch_window_us: %s\n  batch_max: %s\n' "$2" "$3"
  } >"$1"
}
write_config "$BENCH_TMP/A.yaml"
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
metrics() { curl -s --noproxy '*' "$SERVER_URL/metrics" >"$BENCH_OUT/$1.metrics"; }
warm() { # first batches of each shape pay one-time costs (page faults, GEMM setup)
  "$HETBENCH" --url "$SERVER_URL" --lengths "$LENGTHS" --concurrency 4 --requests 100 --quiet \
    --json >/dev/null 2>&1
}
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["all"][sys.argv[2]])' "$1" "$2"; }

{ echo "# serving benchmark, $(hs_load_note)"; } >"$BENCH_OUT/load.txt"
echo "serving: load before: $(hs_load_note)"

# --- B: no batching (capacity, low-load overhead) -------------------------------------------------
hs_server_start B "$BENCH_TMP/B.yaml" || exit 1
echo "serving: config B (no batching) at $SERVER_URL"
warm
bench B-capacity --concurrency 4 --duration "$DURATION" --warmup "$WARMUP" || exit 1
CAP_B=$(field "$BENCH_OUT/B-capacity.json" rps)
LOW=$(python3 -c 'import sys; print("%.1f" % min(20.0, max(2.0, float(sys.argv[1]) * 0.1)))' "$CAP_B")
bench B-low --rate "$LOW" --duration $((DURATION + 8)) --warmup "$WARMUP"
hs_server_stop || echo "serving: server B exited non-zero" >&2

# --- A: the defaults -----------------------------------------------------------------------------
hs_server_start A "$BENCH_TMP/A.yaml" || exit 1
echo "serving: config A (defaults) at $SERVER_URL"
warm
metrics A-capacity.before
bench A-capacity --concurrency 96 --duration "$DURATION" --warmup "$WARMUP" || exit 1
metrics A-capacity.after
CAP_A=$(field "$BENCH_OUT/A-capacity.json" rps)
echo "serving: capacity A ~ $CAP_A req/s, B ~ $CAP_B req/s (closed loop)"
# the engine alone (the server idle meanwhile): batch 1 and 32 at 16/32 tokens, and batch 32 at
# the mean request length of A's capacity run (the same shapes the server's batches had), right
# after that run so that both see the same machine
if [ -x "$BUILD/bench_cpu" ]; then
  MEAN=$(python3 -c 'import json,sys; a = json.load(open(sys.argv[1]))["all"]; print(max(1, round(a["tokens_ok"] / max(1, a["items_ok"]))))' "$BENCH_OUT/A-capacity.json")
  # the run's mean batch size, from the batch-size histogram's sum and count before and after
  BMEAN=$(python3 -c '
import sys
def get(p):
    d = {}
    for l in open(p):
        for k in ("hetserve_batch_size_sum{", "hetserve_batch_size_count{"):
            if l.startswith(k): d[k] = d.get(k, 0) + float(l.rsplit(" ", 1)[1])
    return d
a, b = get(sys.argv[1]), get(sys.argv[2])
n = b.get("hetserve_batch_size_count{", 0) - a.get("hetserve_batch_size_count{", 0)
s = b.get("hetserve_batch_size_sum{", 0) - a.get("hetserve_batch_size_sum{", 0)
print(max(1, round(s / n)) if n > 0 else 32)' "$BENCH_OUT/A-capacity.before.metrics" "$BENCH_OUT/A-capacity.after.metrics")
  echo "serving: engine alone (bench_cpu, $(nproc) threads; A's batches: $BMEAN sequences of $MEAN tokens on average)"
  "$BUILD/bench_cpu" --model "$MODEL" --threads "$(nproc)" \
    --shapes "32x32,1x16,1x32,32x16,32x32,32x$MEAN,${BMEAN}x$MEAN" --seconds "$((DURATION / 4 + 1))" \
    --no-peak 2>/dev/null | grep '^{' >"$BENCH_OUT/engine.jsonl"
  echo "$MEAN" >"$BENCH_OUT/engine-mean-len.txt"
  echo "$BMEAN" >"$BENCH_OUT/engine-mean-batch.txt"
fi

RATES=${SERVING_RATES:-$(python3 -c 'import sys; a = float(sys.argv[1]); print(" ".join("%.1f" % (m * a) for m in (0.9, 1.5, 3.0)))' "$CAP_A")}
echo "serving: overload rates $RATES req/s"
# Each overload point is followed by a fresh capacity run: on a shared machine capacity drifts,
# and a point is judged against the capacity measured right before and right after it.
i=1
for r in $RATES; do
  metrics "A-rate-$r.before"
  bench "A-rate-$r" --rate "$r" --duration "$DURATION" --warmup "$WARMUP"
  metrics "A-rate-$r.after"
  bench "A-capacity-$i" --concurrency 96 --duration "$DURATION" --warmup "$WARMUP"
  i=$((i + 1))
done
# the middle rate again, with a process spinning on the machine (it shares the engine's cores)
BUSY_RATE=$(echo "$RATES" | awk '{print $(NF > 1 ? 2 : 1)}')
sh -c 'while :; do :; done' &
BUSY_PID=$!
metrics "A-busy-$BUSY_RATE.before"
bench "A-busy-$BUSY_RATE" --rate "$BUSY_RATE" --duration "$DURATION" --warmup "$WARMUP"
metrics "A-busy-$BUSY_RATE.after"
kill "$BUSY_PID" 2>/dev/null
wait "$BUSY_PID" 2>/dev/null
bench A-low --rate "$LOW" --duration $((DURATION + 8)) --warmup "$WARMUP"
hs_server_stop || echo "serving: server A exited non-zero" >&2

echo "serving: load after: $(hs_load_note)"
{ echo "# load after: $(hs_load_note)"; } >>"$BENCH_OUT/load.txt"
python3 bench/serving_report.py "$BENCH_OUT" | tee "$BENCH_OUT/summary.txt"
# pictures next to the tables: latency CDF of the overload points, P99 vs offered load
if command -v gnuplot >/dev/null; then
  # shellcheck disable=SC2046 # our own file names, no spaces; ls -v orders the rates numerically
  bash bench/plot.sh cdf "$BENCH_OUT/latency-cdf.png" \
    $(ls -v "$BENCH_OUT"/A-rate-*.csv "$BENCH_OUT"/A-busy-*.csv 2>/dev/null)
  bash bench/plot.sh p99 "$BENCH_OUT/p99-vs-load.png" "$BENCH_OUT/p99.csv"
else
  echo "plots skipped: gnuplot not installed"
fi
