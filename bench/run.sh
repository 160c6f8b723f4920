#!/usr/bin/env bash
# make bench: hetserve's CPU engine (f32, int8, bf16 lanes) and its OpenVINO engine plugin (f32)
# against ONNX Runtime (f32, int8) and OpenVINO called from Python (f32) on the same model, machine
# and threads, then the serving and hybrid benchmarks when present. Not part of CI; never gates on absolute time: it prints measured numbers and
# ratios against the peers measured in the same run (bench/summarize_cpu.py).
#
#   bench/run.sh [BUILD_DIR]     env: THREADS (2), SHAPES (1x16,1x128,32x128), ROUNDS (3),
#                                     BUDGET_S (per engine, shape and round, 6), SKIP_SERVING=1,
#                                     PEAK_S (GEMM peak per dtype and round, 1), SKIP_FAMILIES=1,
#                                     SKIP_OCR=1 (the OCR serving run), OCR_SHORT=1 (6 s points),
#                                     VENV (bench Python env, default .venv-bench),
#                                     INT8_MODEL (quantized folder, default bench/out/minilm-int8
#                                     for MiniLM, else bench/out/<model>-int8)
#   quick check of the scripts:  ROUNDS=1 BUDGET_S=1 SKIP_SERVING=1 bash bench/run.sh
#
# The environment passes through: on a machine shared with other work, hetserve's OpenMP lanes
# can stall for hundreds of ms after a large shape while libgomp threads spin (bench/SERVING.md);
# OMP_WAIT_POLICY=passive bash bench/run.sh measures them with sleeping waits. The header line
# says which policy a run used.
#
# Each round runs, one after the other: hetserve f32, int8 (on the folder `hetserve quantize`
# writes, made once when missing: delete it to redo), bf16 (bench_cpu --dtype), ORT f32, ORT int8
# (quantize_dynamic, per-channel QInt8, on the optimised graph; bench/ort_bench.py), OpenVINO f32
# (bench/ov_bench.py: the bare runtime), hetserve-openvino f32 and int8 (bench_cpu --engine
# openvino: the same runtime inside hetserve, through the registry and the executor, as served;
# int8 on the quantized folder; its rows are skipped with one line when the plugin is not built
# or finds no device). Round 1 also compares every engine's embeddings of the golden sentences
# with its f32 reference (cosines; they do not change between rounds, so later rounds skip it).
#
# Roofline (issue 27): each round starts with bench_peak, this machine's GEMM peak per dtype
# with the calls the CPU engine makes (f32 dnnl_sgemm, bf16 / int8 the engine's oneDNN matmul),
# and the CPU model and ISA flags; the table shows every engine's useful GFLOP/s as a share of
# its dtype's best peak (bench/summarize_cpu.py, also as JSON in bench/out/cpu_summary.json).
#
# Then, unless SKIP_FAMILIES=1, bench/families.sh: one realistic-size model per architecture
# family (random weights, speed only) on hetserve f32/bf16/int8 and ONNX Runtime f32/int8, and a
# MiniLM-size cross-encoder's rerank throughput (bench/families.py).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
THREADS=${THREADS:-2}
SHAPES=${SHAPES:-1x16,1x128,32x128}
ROUNDS=${ROUNDS:-3}
BUDGET_S=${BUDGET_S:-6}
PEAK_S=${PEAK_S:-1}
MODEL=${HS_MODEL_DIR:-models/all-MiniLM-L6-v2}
GOLDEN=${HS_GOLDEN_DIR:-tests/golden}
name=$(basename "$MODEL")
[ "$name" = all-MiniLM-L6-v2 ] && name=minilm
INT8_MODEL=${INT8_MODEL:-bench/out/$name-int8}
. bench/lib.sh # hs_int8_folder
mkdir -p bench/out
export VENV=${VENV:-$PWD/.venv-bench}
bash bench/setup_venv.sh >/dev/null
PY=$VENV/bin/python
OUTF=bench/out/cpu_vs_ort.jsonl
LOG=bench/out/cpu_bench.log # the Python peers' stderr (warnings, tracebacks)
: >"$OUTF"
: >"$LOG"
trap 'echo "run.sh: a step failed; its messages are above or in $LOG" >&2' ERR

echo "== CPU engines: $MODEL, $THREADS threads, shapes $SHAPES, $ROUNDS interleaved rounds"
echo "   hetserve f32/int8/bf16, ONNX Runtime f32/int8, OpenVINO f32, hetserve-openvino f32/int8; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)}"
# hetserve's OpenVINO engine: one tiny call finds out whether the plugin loads and has a device
# (bench_cpu exits 3 when the kind is not built or has no device)
HS_OV=1
if ! "$BUILD/bench_cpu" --engine openvino --model "$MODEL" --shapes 1x2 --iters 1 --no-peak \
    >/dev/null 2>bench/out/ov_probe.txt; then
    HS_OV=0
    echo "   hetserve-openvino: skipped ($(tail -n 1 bench/out/ov_probe.txt))"
fi
# hetserve's reduced-precision lanes exist where this CPU computes them (bench_cpu exits 3 when the
# engine has no path for the dtype here): each missing one is skipped with one line
HS_BF16=1
if ! "$BUILD/bench_cpu" --model "$MODEL" --dtype bf16 --shapes 1x2 --iters 1 --no-peak \
    >/dev/null 2>bench/out/bf16_probe.txt; then
    HS_BF16=0
    echo "   hetserve bf16: skipped ($(tail -n 1 bench/out/bf16_probe.txt))"
fi
HS_I8=1
if [ ! -f "$INT8_MODEL/quant.json" ]; then
    echo "   quantizing: $BUILD/hetserve quantize --out $INT8_MODEL (once; log in bench/out/quantize.txt)"
    hs_int8_folder "$BUILD/hetserve" "$MODEL" "$INT8_MODEL" bench/out/quantize.txt "$THREADS"
    case $? in
    0) grep -E '^(input smoothing|held-out, with)' bench/out/quantize.txt | sed 's/^/   /' ;;
    1) echo "run.sh: $INT8_MODEL exists without quant.json; remove it to let hetserve quantize write it" >&2
       exit 1 ;;
    2) HS_I8=0
       echo "   hetserve int8: skipped ($(tail -n 1 bench/out/quantize.txt))" ;;
    *) cat bench/out/quantize.txt >&2
       exit 1 ;;
    esac
fi
echo "   load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# export + optimize once (and check the peer computes the same embeddings)
$PY bench/ort_bench.py --model "$MODEL" --threads "$THREADS" --verify --no-bench >/dev/null 2>>"$LOG"
tag() { grep '^{' | sed "s/^{/{\"round\":$1,/" >>"$OUTF"; }
for r in $(seq "$ROUNDS"); do
    cos=()
    [ "$r" = 1 ] && cos=(--golden "$GOLDEN")
    common=(--threads "$THREADS" --shapes "$SHAPES")
    "$BUILD/bench_peak" --threads "$THREADS" --seconds "$PEAK_S" | tag "$r"
    "$BUILD/bench_cpu" --model "$MODEL" --dtype f32 "${common[@]}" --seconds "$BUDGET_S" "${cos[@]}" | tag "$r"
    if [ "$HS_I8" = 1 ]; then
        "$BUILD/bench_cpu" --model "$INT8_MODEL" --dtype int8 "${common[@]}" --seconds "$BUDGET_S" \
            --no-peak "${cos[@]}" | tag "$r"
    fi
    if [ "$HS_BF16" = 1 ]; then
        "$BUILD/bench_cpu" --model "$MODEL" --dtype bf16 "${common[@]}" --seconds "$BUDGET_S" \
            --no-peak "${cos[@]}" | tag "$r"
    fi
    $PY bench/ort_bench.py --model "$MODEL" --dtype f32 "${common[@]}" --budget-s "$BUDGET_S" \
        "${cos[@]}" 2>>"$LOG" | tag "$r"
    $PY bench/ort_bench.py --model "$MODEL" --dtype int8 "${common[@]}" --budget-s "$BUDGET_S" \
        "${cos[@]}" 2>>"$LOG" | tag "$r"
    $PY bench/ov_bench.py --model "$MODEL" "${common[@]}" --budget-s "$BUDGET_S" \
        "${cos[@]}" 2>>"$LOG" | tag "$r"
    if [ "$HS_OV" = 1 ]; then
        "$BUILD/bench_cpu" --engine openvino --model "$MODEL" --dtype f32 "${common[@]}" \
            --seconds "$BUDGET_S" --no-peak "${cos[@]}" | tag "$r"
        [ "$HS_I8" = 1 ] &&
            "$BUILD/bench_cpu" --engine openvino --model "$INT8_MODEL" --dtype int8 "${common[@]}" \
                --seconds "$BUDGET_S" --no-peak "${cos[@]}" | tag "$r"
    fi
done
echo "   load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
$PY bench/summarize_cpu.py "$OUTF"

if [ "${SKIP_FAMILIES:-0}" != 1 ]; then
    [ -f bench/families.sh ] && bash bench/families.sh "$BUILD"
fi

if [ "${SKIP_SERVING:-0}" != 1 ]; then
    [ -x bench/serving.sh ] || [ -f bench/serving.sh ] && bash bench/serving.sh "$BUILD"
    [ -f bench/hybrid/run.sh ] && bash bench/hybrid/run.sh "$BUILD"
    # POST /v1/ocr open loop, hetserve against the reference pipeline served the same way
    # (bench/ocr_serving.py; SKIP_OCR=1 leaves it out, OCR_SHORT=1 runs 6 s points)
    if [ "${SKIP_OCR:-0}" != 1 ]; then
        if [ -f models/ppocrv5/det.onnx ] && [ -x "$BUILD/hetbench" ] &&
            [ -f "$BUILD/plugins/libhs_engine_openvino.so" ]; then
            echo "== OCR serving: configs/ocr.yaml vs the reference pipeline, open loop"
            $PY bench/ocr_serving.py --hetserve "$BUILD/hetserve" --hetbench "$BUILD/hetbench" \
                ${OCR_SHORT:+--short} 2>>"$LOG"
        else
            echo "== OCR serving: skipped (needs models/ppocrv5, $BUILD/hetbench and the OpenVINO plugin)"
        fi
    fi
fi
exit 0
