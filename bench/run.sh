#!/usr/bin/env bash
# make bench: hetserve's CPU engine against ONNX Runtime on the same model, machine and threads,
# then the serving and hybrid benchmarks when present. Not part of CI; never gates on absolute
# time: it prints measured numbers and ratios against the peer measured in the same run.
#
#   bench/run.sh [BUILD_DIR]     env: THREADS (2), SHAPES (1x16,1x128,32x128), ROUNDS (3),
#                                     BUDGET_S (per shape and round, 6), SKIP_SERVING=1,
#                                     VENV (bench Python env, default .venv-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
THREADS=${THREADS:-2}
SHAPES=${SHAPES:-1x16,1x128,32x128}
ROUNDS=${ROUNDS:-3}
BUDGET_S=${BUDGET_S:-6}
MODEL=${HS_MODEL_DIR:-models/all-MiniLM-L6-v2}
mkdir -p bench/out
export VENV=${VENV:-$PWD/.venv-bench}
bash bench/setup_venv.sh >/dev/null
PY=$VENV/bin/python
OUTF=bench/out/cpu_vs_ort.jsonl
: > "$OUTF"

echo "== CPU engine vs ONNX Runtime: $MODEL, $THREADS threads, shapes $SHAPES, $ROUNDS interleaved rounds"
echo "   load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# export + optimize once (and check the peer computes the same embeddings)
$PY bench/ort_bench.py --model "$MODEL" --threads "$THREADS" --verify --no-bench >/dev/null
for r in $(seq "$ROUNDS"); do
    "$BUILD/bench_cpu" --model "$MODEL" --threads "$THREADS" --shapes "$SHAPES" \
        --seconds "$BUDGET_S" | sed "s/^{/{\"round\":$r,/" >> "$OUTF"
    $PY bench/ort_bench.py --model "$MODEL" --threads "$THREADS" --shapes "$SHAPES" \
        --budget-s "$BUDGET_S" | grep '^{' | sed "s/^{/{\"round\":$r,/" >> "$OUTF"
done
echo "   load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
$PY bench/summarize_cpu.py "$OUTF"

if [ "${SKIP_SERVING:-0}" != 1 ]; then
    [ -x bench/serving.sh ] || [ -f bench/serving.sh ] && bash bench/serving.sh "$BUILD"
    [ -f bench/hybrid/run.sh ] && bash bench/hybrid/run.sh "$BUILD"
fi
exit 0
