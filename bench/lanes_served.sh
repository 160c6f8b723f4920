#!/usr/bin/env bash
# bench/lanes_served.sh — does a faster CPU lane reach requests? (issue 27, item 4)
#
#   bench/lanes_served.sh [BUILD] [--rounds N] [--seconds S] [--out DIR]
#
# One CPU engine with the machine's threads, default batching, the quantized MiniLM folder
# (bench/run.sh makes it: bench/out/minilm-int8), served once with dtype f32 and once with int8,
# alternated for N rounds (default 2). Per server: hetbench closed loop, TEI endpoint, short
# texts (8-32 words), 32 clients (capacity, P99) and 1 client (latency: P50, and from
# Server-Timing the mean queue wait and compute, so "P50 <= engine time + 0.5 ms" can be read
# off). The client shares the cores with the server, as users' load generators do. Prints a
# table per round and the CPU model and ISA; JSON per run under DIR (default
# bench/out/lanes_served). Numbers are only as quiet as the machine (its load is printed).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUILD=build
OUTDIR=bench/out/lanes_served
ROUNDS=2
SECONDS_RUN=8
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --out) OUTDIR=$2; shift ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    -*) echo "lanes_served.sh: unknown option $1" >&2; exit 2 ;;
    *) BUILD=$1 ;;
  esac
  shift
done
MODEL=${INT8_MODEL:-bench/out/minilm-int8}
[ -f "$MODEL/quant.json" ] || { echo "lanes_served.sh: $MODEL has no quant.json (run bench/run.sh, or hetserve quantize)" >&2; exit 1; }
THREADS=${THREADS:-$(nproc)}

. bench/lib.sh
hs_bench_init "$BUILD" "$OUTDIR" || exit 1
for dt in f32 int8; do
  printf 'server:\n  host: "127.0.0.1"\nengines:\n  - {name: cpu0, kind: cpu, dtype: %s, threads: %s}\nmodels:\n  - {path: "%s", name: all-MiniLM-L6-v2, engine: cpu0}\n' \
    "$dt" "$THREADS" "$MODEL" >"$BENCH_TMP/$dt.yaml"
done
lscpu | sed -n 's/^Model name: *//p' | head -n 1
grep -o -w -E 'avx2|fma|avx512f|avx512_vnni|avx512vnni|avx_vnni|avx512_bf16|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '
echo
hs_load_note

run() { # name clients -> JSON under BENCH_OUT
  "$HETBENCH" --url "$SERVER_URL" --endpoint tei --concurrency "$2" --duration "$SECONDS_RUN" \
    --warmup 1 --lengths "short=100:8-32" --json --quiet >"$BENCH_OUT/$1.json" 2>/dev/null
}

for r in $(seq 1 "$ROUNDS"); do
  for dt in f32 int8; do
    hs_server_start "$dt-r$r" "$BENCH_TMP/$dt.yaml" || exit 1
    run "$dt-r$r-c32" 32
    run "$dt-r$r-c1" 1
    hs_server_stop
  done
  python3 - "$BENCH_OUT" "$r" <<'EOF'
import json, sys
out, r = sys.argv[1], sys.argv[2]
def get(name):
    with open(f"{out}/{name}.json") as f:
        return json.load(f)
def st(d, stage):
    return d.get("server_timing_ms", {}).get(stage, {}).get("p50", float("nan"))
print(f"round {r}: lane | 32 clients: req/s, P99 ms | 1 client: P50 ms; Server-Timing P50 queue, compute ms")
for dt in ("f32", "int8"):
    a, b = get(f"{dt}-r{r}-c32"), get(f"{dt}-r{r}-c1")
    print(f"  {dt:>4} | {a['all']['rps']:7.1f}, {a['all']['latency_ms']['p99']:6.1f} | "
          f"{b['all']['latency_ms']['p50']:5.2f}; {st(b, 'queue'):5.3f}, {st(b, 'compute'):5.3f}")
EOF
done
hs_load_note
