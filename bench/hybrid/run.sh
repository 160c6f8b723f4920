#!/usr/bin/env bash
# bench/hybrid/run.sh — short and long requests on separate engines vs one shared engine (issue 5).
#
#   bench/hybrid/run.sh [BUILD] [--quick] [--out DIR] [--rates "R1 R2 ..."]
#
# Trace: real sentences (make_trace.py: Python reference-manual prose, token counts checked with
# `hetserve tokenize`), 80 % short (8-32 tokens) / 20 % long (200-256 tokens), Poisson arrivals
# from hetbench's open loop, replayed at several offered loads against:
#   (a) shared: one CPU engine on cores 0-1, one queue (FIFO across length buckets), batching on
#   (b) hybrid: short -> CPU engine pinned to core 0, long -> CPU engine pinned to core 1
#   (c) gpu:    short -> CPU engine on cores 0-1, long -> CUDA engine (only when a GPU is found)
#   (e) elastic: (b) with the long engine borrowing core 0 stage by stage while the short lane is
#       idle (engines[].borrow_cores: [0]); a short request waits at most for the stage in
#       flight. Only with the server's routing (not with HYBRID_SPLIT=1 or HYBRID_CONFIG).
#   (m) mutual: (e) with the short engine borrowing core 1 too, while the long lane is idle
#       (both engines lend and borrow). Same conditions as (e).
#   (p) preempt: (m) with the short engine's loans first (borrow_preempt,
#       configs/hybrid-preempt.yaml): the long engine yields core 1 at its next round boundary
#       whenever the short lane runs, so short requests have both cores at every load.
#   (q) precision: (p) with the short engine on the int8 lane (dtype: int8, the quantized folder
#       INT8_MODEL, default bench/out/minilm-int8, made once with `hetserve quantize` when
#       missing); the long engine stays f32. Short answers then differ from f32 as the int8
#       lane does (min cosine >= 0.99 on the golden sentences): precision as a placement choice,
#       not the same computation as (a).
# Routing for (b)/(c): by the server's router (rules: tokens_max 32 -> short route, default ->
# long route, no failover), the mixed trace sent to one URL; HYBRID_CONFIG=FILE runs (b) with
# FILE instead (e.g. configs/hybrid-cpu.yaml). On a build without the router, or with
# HYBRID_SPLIT=1, the client splits: two model instances (one per engine) and two hetbench
# processes, short at 0.8 R and long at 0.2 R; the superposition of two independent Poisson
# streams is a Poisson stream of rate R with the same 80/20 mix, so the offered trace is
# statistically the same.
# Loads: fractions of (a)'s closed-loop capacity on the trace, measured first (or --rates).
# Per run: short/long P50/P99, throughput, per-engine utilization (busy seconds from /metrics
# over the run's wall time). report.py prints the table, the highest load with short P99 < 50 ms,
# and the target checks. Output: DIR (default bench/out/hybrid). --quick: short runs, to check
# the script. HYBRID_ONLY="a p q": only those configs ((a) always runs: it sets the loads).
# Bounded: ~15 min on 2 cores (~17 with a GPU).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

BUILD=build
OUTDIR=bench/out/hybrid
DURATION=${HYBRID_DURATION_S:-20}
WARMUP=3
CAP_S=10
FRACTIONS=${HYBRID_FRACTIONS:-"0.05 0.15 0.3 0.45 0.6 0.75"}
RATES=${HYBRID_RATES:-}
ONLY=${HYBRID_ONLY:-"a b c e m p q"}
want() { case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) DURATION=5; WARMUP=1; CAP_S=4; FRACTIONS="0.2 0.5" ;;
    --out) OUTDIR=$2; shift ;;
    --rates) RATES=$2; shift ;;
    -h|--help) sed -n 2,37p "$0"; exit 0 ;;
    -*) echo "hybrid/run.sh: unknown option $1" >&2; exit 2 ;;
    *) BUILD=$1 ;;
  esac
  shift
done
MODEL=${HS_MODEL_DIR:-models/all-MiniLM-L6-v2}
[ -f "$MODEL/config.json" ] || { echo "hybrid: model $MODEL missing (make setup)" >&2; exit 1; }

. bench/lib.sh
hs_bench_init "$BUILD" "$OUTDIR" || exit 1
rm -rf "$BENCH_OUT/runs"
mkdir -p "$BENCH_OUT/runs" "$BENCH_OUT/trace"
RUNS=$BENCH_OUT/runs

python3 bench/hybrid/make_trace.py --hetserve "$HETSERVE" --model "$MODEL" \
  --out "$BENCH_OUT/trace" || exit 1
TRACE=$BENCH_OUT/trace

# --- configs -----------------------------------------------------------------------------------
cat >"$BENCH_TMP/a.yaml" <<EOF
engines:
  - name: cpu01
    kind: cpu
    cores: [0, 1]
models:
  - path: "$MODEL"
    engine: cpu01
EOF
split_config() { # file short-engine-lines long-engine-lines
  cat >"$1" <<EOF
engines:
  - name: short
$2
  - name: long
$3
models:
  - name: minilm-short
    path: "$MODEL"
    engine: short
  - name: minilm-long
    path: "$MODEL"
    engine: long
EOF
}
split_config "$BENCH_TMP/b.yaml" "    kind: cpu
    cores: [0]" "    kind: cpu
    cores: [1]"
split_config "$BENCH_TMP/c.yaml" "    kind: cpu
    cores: [0, 1]" "    kind: cuda"

routed_config() { # file short-engine-lines long-engine-lines [folder]: one model on both
  # engines, rule routing by token count (the server's router), no failover between the two;
  # folder: the model from there (the quantized folder, for an int8 lane), under the same name
  cat >"$1" <<EOF
engines:
  - name: short
$2
  - name: long
$3
models:
  - path: "${4:-$MODEL}"
${4:+    name: $(basename "$MODEL")
}    engines: [short, long]
routes:
  - name: short
    engines: [short]
  - name: long
    engines: [long]
router:
  rules:
    - {tokens_max: 32, route: short}
  default_route: long
EOF
}
# (q)'s int8 lane reads the quantization plan of a quantized folder (made once, as bench/run.sh
# does; f32 lanes ignore the plan, so the long engine serves the same folder in f32)
INT8_MODEL=${INT8_MODEL:-bench/out/minilm-int8}
int8_folder() {
  [ -f "$INT8_MODEL/quant.json" ] || echo "hybrid: quantizing $MODEL into $INT8_MODEL for (q) (once)"
  hs_int8_folder "$HETSERVE" "$MODEL" "$INT8_MODEL" "$BENCH_OUT/quantize.txt"
  case $? in
  0) return 0 ;;
  1) echo "hybrid: (q) skipped: $INT8_MODEL exists without quant.json" >&2 ;;
  *) echo "hybrid: (q) skipped: $(tail -n 1 "$BENCH_OUT/quantize.txt")" >&2 ;;
  esac
  return 1
}
B_MODE=split
if [ -n "${HYBRID_CONFIG:-}" ]; then
  "$HETSERVE" config --check "$HYBRID_CONFIG" >/dev/null || { echo "hybrid: $HYBRID_CONFIG is not valid" >&2; exit 1; }
  cp "$HYBRID_CONFIG" "$BENCH_TMP/b.yaml"
  B_MODE=routed
elif [ "${HYBRID_SPLIT:-0}" != 1 ]; then
  routed_config "$BENCH_TMP/br.yaml" "    kind: cpu
    cores: [0]" "    kind: cpu
    cores: [1]"
  routed_config "$BENCH_TMP/cr.yaml" "    kind: cpu
    cores: [0, 1]" "    kind: cuda"
  if "$HETSERVE" config --check "$BENCH_TMP/br.yaml" >/dev/null 2>&1; then
    mv "$BENCH_TMP/br.yaml" "$BENCH_TMP/b.yaml"
    mv "$BENCH_TMP/cr.yaml" "$BENCH_TMP/c.yaml"
    B_MODE=routed
    routed_config "$BENCH_TMP/e.yaml" "    kind: cpu
    cores: [0]" "    kind: cpu
    cores: [1]
    borrow_cores: [0]"
    "$HETSERVE" config --check "$BENCH_TMP/e.yaml" >/dev/null 2>&1 || rm -f "$BENCH_TMP/e.yaml"
    routed_config "$BENCH_TMP/m.yaml" "    kind: cpu
    cores: [0]
    borrow_cores: [1]" "    kind: cpu
    cores: [1]
    borrow_cores: [0]"
    "$HETSERVE" config --check "$BENCH_TMP/m.yaml" >/dev/null 2>&1 || rm -f "$BENCH_TMP/m.yaml"
    routed_config "$BENCH_TMP/p.yaml" "    kind: cpu
    cores: [0]
    borrow_cores: [1]
    borrow_preempt: true" "    kind: cpu
    cores: [1]
    borrow_cores: [0]"
    "$HETSERVE" config --check "$BENCH_TMP/p.yaml" >/dev/null 2>&1 || rm -f "$BENCH_TMP/p.yaml"
    if want q && [ -f "$BENCH_TMP/p.yaml" ] && int8_folder; then
      routed_config "$BENCH_TMP/q.yaml" "    kind: cpu
    dtype: int8
    cores: [0]
    borrow_cores: [1]
    borrow_preempt: true" "    kind: cpu
    cores: [1]
    borrow_cores: [0]" "$INT8_MODEL"
      "$HETSERVE" config --check "$BENCH_TMP/q.yaml" >/dev/null 2>&1 || rm -f "$BENCH_TMP/q.yaml"
    fi
  else
    echo "hybrid: this build has no rule routing (router: in the config); routing in the client" >&2
  fi
fi
GPUS=$("$HETSERVE" devices 2>/dev/null | python3 -c 'import json,sys
try: print(int(json.load(sys.stdin).get("gpus", 0)))
except Exception: print(0)')
for c in a b c e m p q; do [ -f "$BENCH_TMP/$c.yaml" ] && cp "$BENCH_TMP/$c.yaml" "$BENCH_OUT/config-$c.yaml"; done
{
  echo "# hybrid experiment, $(hs_load_note)"
  echo "# (b)/(c) routing: $B_MODE${HYBRID_CONFIG:+ ($HYBRID_CONFIG)}; GPUs found: $GPUS"
} >"$BENCH_OUT/load.txt"
echo "hybrid: load before: $(hs_load_note); (b) routing: $B_MODE"

# --- helpers -----------------------------------------------------------------------------------
snap() { # file: wall clock + every engine's busy seconds
  { echo "# t $(date +%s.%N)"; curl -s --noproxy '*' "$SERVER_URL/metrics" |
      grep '^hetserve_engine_busy_seconds_total{'; } >"$1"
}
hb() { # tag texts model rate seed [extra...]
  local tag=$1 texts=$2 model=$3 rate=$4 seed=$5; shift 5
  "$HETBENCH" --url "$SERVER_URL" --texts "$texts" --model "$model" --rate "$rate" \
    --seed "$seed" --duration "$DURATION" --warmup "$WARMUP" --timeout-ms 20000 --quiet \
    --json --csv "$RUNS/$tag.csv" "$@" >"$RUNS/$tag.json"
}
warm() { # one short and a few long requests per model through every engine
  local m
  for m in "$@"; do
    "$HETBENCH" --url "$SERVER_URL" --texts "$TRACE/trace.tsv" --model "$m" --concurrency 2 \
      --requests 30 --quiet --json >/dev/null 2>&1
  done
}
run_mixed() { # cfg rate : one hetbench, the mixed trace, one model name
  local cfg=$1 r=$2 model=$3
  echo "  ($cfg) $r req/s"
  snap "$RUNS/$cfg-$r.m0"
  hb "$cfg-$r" "$TRACE/trace.tsv" "$model" "$r" 11
  snap "$RUNS/$cfg-$r.m1"
}
run_split() { # cfg rate : two hetbench processes, short at 0.8 R and long at 0.2 R
  local cfg=$1 r=$2 rs rl p1 p2
  rs=$(python3 -c "print('%.3f' % (0.8 * $r))")
  rl=$(python3 -c "print('%.3f' % (0.2 * $r))")
  echo "  ($cfg) $r req/s = short $rs + long $rl (client-routed)"
  snap "$RUNS/$cfg-$r.m0"
  hb "$cfg-$r.short" "$TRACE/short.tsv" minilm-short "$rs" 12 &
  p1=$!
  hb "$cfg-$r.long" "$TRACE/long.tsv" minilm-long "$rl" 13 &
  p2=$!
  wait $p1
  wait $p2
  snap "$RUNS/$cfg-$r.m1"
}

# --- (a) shared engine, capacity first -----------------------------------------------------------
hs_server_start a "$BENCH_TMP/a.yaml" || exit 1
warm all-MiniLM-L6-v2
if [ -z "$RATES" ]; then
  "$HETBENCH" --url "$SERVER_URL" --texts "$TRACE/trace.tsv" --concurrency 16 --duration "$CAP_S" \
    --warmup 1 --seed 3 --quiet --json >"$RUNS/a-capacity.json" || exit 1
  CAP=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["all"]["rps"])' \
    "$RUNS/a-capacity.json")
  RATES=$(python3 -c 'import sys; c=float(sys.argv[1]); print(" ".join(sorted({"%.1f" % max(0.5, c*float(f)) for f in sys.argv[2].split()}, key=float)))' \
    "$CAP" "$FRACTIONS")
  echo "hybrid: (a) capacity on the trace ~ $CAP req/s (closed loop, 16 clients); loads: $RATES"
fi
echo "$RATES" >"$BENCH_OUT/rates.txt"
for r in $RATES; do run_mixed a "$r" all-MiniLM-L6-v2; done
hs_server_stop || echo "hybrid: server (a) exited non-zero" >&2

# --- (b) hybrid on two cores ---------------------------------------------------------------------
if want b; then
  hs_server_start b "$BENCH_TMP/b.yaml" || exit 1
  if [ "$B_MODE" = routed ]; then
    warm all-MiniLM-L6-v2
    for r in $RATES; do run_mixed b "$r" all-MiniLM-L6-v2; done
  else
    warm minilm-short minilm-long
    for r in $RATES; do run_split b "$r"; done
  fi
  hs_server_stop || echo "hybrid: server (b) exited non-zero" >&2
fi

# --- (e) hybrid with the long engine borrowing the short engine's idle core; (m) both ways -----
run_lending() { # NAME: the config BENCH_TMP/NAME.yaml at every load, and its loans
  hs_server_start "$1" "$BENCH_TMP/$1.yaml" || return 0
  warm all-MiniLM-L6-v2
  for r in $RATES; do run_mixed "$1" "$r" all-MiniLM-L6-v2; done
  curl -s --noproxy '*' "$SERVER_URL/metrics" | grep '^hetserve_core_' >"$RUNS/$1-leases.txt"
  hs_server_stop || echo "hybrid: server ($1) exited non-zero" >&2
}
if [ -f "$BENCH_TMP/e.yaml" ]; then
  want e && run_lending e
else
  echo "hybrid: (e) skipped: needs the server's routing and engines[].borrow_cores"
fi
[ -f "$BENCH_TMP/m.yaml" ] && want m && run_lending m
[ -f "$BENCH_TMP/p.yaml" ] && want p && run_lending p
[ -f "$BENCH_TMP/q.yaml" ] && want q && run_lending q

# --- (c) GPU for the long requests ---------------------------------------------------------------
if [ "$GPUS" -gt 0 ] && want c; then
  if hs_server_start c "$BENCH_TMP/c.yaml"; then
    if [ "$B_MODE" = routed ]; then
      warm all-MiniLM-L6-v2
      for r in $RATES; do run_mixed c "$r" all-MiniLM-L6-v2; done
    else
      warm minilm-short minilm-long
      for r in $RATES; do run_split c "$r"; done
    fi
    hs_server_stop || echo "hybrid: server (c) exited non-zero" >&2
  fi
else
  echo "hybrid: (c) skipped: no GPU found (hetserve devices)"
fi

echo "# load after: $(hs_load_note)" >>"$BENCH_OUT/load.txt"
python3 bench/hybrid/report.py "$BENCH_OUT" | tee "$BENCH_OUT/summary.txt"
# pictures next to the tables: P99 vs offered load per config and class (results.csv), and the
# latency CDF per class of every config at the highest load
if command -v gnuplot >/dev/null; then
  bash bench/plot.sh p99 "$BENCH_OUT/p99-vs-load.png" "$BENCH_OUT/results.csv"
  RMAX=$(echo "$RATES" | tr ' ' '\n' | sort -g | tail -1)
  # shellcheck disable=SC2046 # our own file names, no spaces
  bash bench/plot.sh cdf "$BENCH_OUT/latency-cdf.png" \
    $(ls "$RUNS"/?-"$RMAX".csv "$RUNS"/?-"$RMAX".short.csv "$RUNS"/?-"$RMAX".long.csv 2>/dev/null)
else
  echo "plots skipped: gnuplot not installed"
fi
