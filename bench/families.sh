#!/usr/bin/env bash
# The per-family CPU benchmark (issue 23 item 7; bench/families.py has the method): hetserve
# f32 / bf16 / int8 against ONNX Runtime f32 / int8 for one model per architecture family (the
# real MiniLM, random-weight models of MiniLM's size for the others: speed only), 1x16 and
# 32x128, and a MiniLM-size cross-encoder's rerank throughput at pairs of 2x128 tokens.
# Models and graphs are made once into bench/out/families/ (delete it to redo); the run then
# takes about 4-5 minutes on 2 threads.
#
#   bench/families.sh [BUILD_DIR]   env: THREADS (2), FAMILY_SHAPES (1x16,32x128),
#                                        RERANK_SHAPE (16x256: 16 pairs of 2x128 tokens),
#                                        FAMILIES (comma list, default all), BUDGET_S (2),
#                                        BIG_ITERS (3), VENV (bench Python env, .venv-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
[ -x "$BUILD/bench_cpu" ] || { echo "families: $BUILD/bench_cpu missing (build first)" >&2; exit 1; }
export VENV=${VENV:-$PWD/.venv-bench}
bash bench/setup_venv.sh >/dev/null
mkdir -p bench/out
echo "== families: one model per architecture family (random weights except bert: speed only), ${THREADS:-2} threads"
echo "   load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$VENV/bin/python" -W ignore bench/families.py --build "$BUILD" --threads "${THREADS:-2}" \
    --shapes "${FAMILY_SHAPES:-1x16,32x128}" --rerank "${RERANK_SHAPE:-16x256}" \
    --only "${FAMILIES:-}" --budget-s "${BUDGET_S:-2}" --big-iters "${BIG_ITERS:-3}" \
    2>bench/out/families.log
echo "   load after:  $(cut -d' ' -f1-3 /proc/loadavg); log: bench/out/families.log, lines: bench/out/families.jsonl"
