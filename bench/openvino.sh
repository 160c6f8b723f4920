#!/usr/bin/env bash
# bench/openvino.sh — issue 13's benchmark on its own: hetserve's OpenVINO engine plugin (f32,
# int8) against OpenVINO called directly from Python on the ONNX graph (f32) and against
# hetserve's CPU engine (f32, int8), same machine, same threads, interleaved rounds; then
# summarize_cpu.py's table, the plugin's overhead over the bare runtime (target <= 5 %) and the
# fastest engine per shape. The part of `make bench` that needs no torch.
#
#   bench/openvino.sh [BUILD]    env: THREADS (2), SHAPES (1x16,1x128,32x128), ROUNDS (3),
#                                     BUDGET_S (6), VENV (.venv-ov from bench/requirements-ov.txt)
# Needs the ONNX graph bench/out/<model>/model_opt.onnx (made by `make bench` once) and the
# plugin (scripts/setup fetches the runtime). Output: bench/out/openvino.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MODEL=${HS_MODEL_DIR:-models/all-MiniLM-L6-v2}
INT8_MODEL=${INT8_MODEL:-models/all-MiniLM-L6-v2-int8}
THREADS=${THREADS:-2}
SHAPES=${SHAPES:-1x16,1x128,32x128}
ROUNDS=${ROUNDS:-3}
BUDGET_S=${BUDGET_S:-6}
VENV=${VENV:-$PWD/.venv-ov}
OUTF=bench/out/openvino.jsonl
GRAPH=bench/out/$(basename "$MODEL")/model_opt.onnx
[ -f "$GRAPH" ] || { echo "openvino.sh: $GRAPH missing: run make bench once (it exports the graph)" >&2; exit 1; }
[ -f "$INT8_MODEL/quant.json" ] || { echo "openvino.sh: $INT8_MODEL missing: make quantized" >&2; exit 1; }
"$BUILD/bench_cpu" --engine openvino --model "$MODEL" --shapes 1x16 --iters 1 --no-peak >/dev/null ||
  { echo "openvino.sh: the OpenVINO plugin does not run here (scripts/setup; cmake -DHS_OPENVINO=AUTO)" >&2; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r bench/requirements-ov.txt
fi
PY=$VENV/bin/python
mkdir -p bench/out
: >"$OUTF"
echo "== OpenVINO: $MODEL, $THREADS threads, shapes $SHAPES, $ROUNDS interleaved rounds; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
tag() { grep '^{' | sed "s/^{/{\"round\":$1,/" >>"$OUTF"; }
for r in $(seq "$ROUNDS"); do
  cos=()
  [ "$r" = 1 ] && cos=(--golden tests/golden)
  common=(--threads "$THREADS" --shapes "$SHAPES")
  "$BUILD/bench_cpu" --model "$MODEL" --dtype f32 "${common[@]}" --seconds "$BUDGET_S" --no-peak "${cos[@]}" | tag "$r"
  "$BUILD/bench_cpu" --model "$INT8_MODEL" --dtype int8 "${common[@]}" --seconds "$BUDGET_S" --no-peak "${cos[@]}" | tag "$r"
  $PY bench/ov_bench.py --model "$MODEL" "${common[@]}" --budget-s "$BUDGET_S" 2>/dev/null | tag "$r"
  "$BUILD/bench_cpu" --engine openvino --model "$MODEL" --dtype f32 "${common[@]}" --seconds "$BUDGET_S" --no-peak "${cos[@]}" | tag "$r"
  "$BUILD/bench_cpu" --engine openvino --model "$INT8_MODEL" --dtype int8 "${common[@]}" --seconds "$BUDGET_S" --no-peak "${cos[@]}" | tag "$r"
done
echo "   load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" bench/summarize_cpu.py "$OUTF"
