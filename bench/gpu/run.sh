#!/usr/bin/env bash
# bench/gpu/run.sh — the GPU check, in one call on the GPU machine.
#
#   bench/gpu/run.sh --prepare        (on a machine with the model and network, before the call)
#       converts models/all-MiniLM-L6-v2 to fp16 into bench/out/minilm-f16 (~45 MB) and
#       downloads the build's Debian dependencies (.deb) into bench/out/debs (~7 MB), both
#       git-ignored, to be carried to the GPU machine.
#   bench/gpu/run.sh [--out DIR] [--iters N] [--budget S]   on the GPU machine
#       unpacks missing build dependencies, builds with CUDA, then FIRST checks every model
#       family on the GPU (test_cuda: each tests/data/tiny-* checkpoint in fp16 against the CPU
#       engine f32; test_arch: each family against its transformers golden; test_conformance:
#       the block cases against the fp64 reference), printing one FAMILIES line; then
#       `hetserve verify` on the GPU (and on the CPU engine for reference), benchmarks hetserve
#       vs PyTorch fp16 on MiniLM (batch 1/32/256 x seq 16/128/256) and on a random BERT-base
#       (batch 1/256 x 128), probes the fp16 GEMM peak, serves a cuda engine sliced into streams (slices_check.py),
#       and writes results.csv + summary.txt to --out ($OUT).
#   bench/gpu/run.sh --cpu-only [--out DIR]           dry run of everything that runs on a CPU:
#       build, test_cuda (skips), verify on the CPU engine, the bench harness on the CPU engine
#       with tiny counts, the summary.
# Every step runs even when an earlier one failed; status.txt lists each step's exit status and
# the script exits non-zero when a required step failed. Time budget (--budget, default 300 s on
# the GPU, 3600 s for --cpu-only; build included): every step after the build runs under
# `timeout` of the time left, and a step that cannot start with 20 s left is skipped
# ("skipped-budget" in status.txt; a skipped required step fails the run).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

MODE=gpu
OUTDIR=${OUT:-bench/out/gpu}
ITERS=20
BUDGET=
T_START=$(date +%s)
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) MODE=prepare ;;
    --cpu-only) MODE=cpu ;;
    --out) OUTDIR=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    -h|--help) sed -n 2,25p "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

# the GPU run is sized for a short device lease; the CPU dry run builds on few cores
[ -n "$BUDGET" ] || { [ "$MODE" = cpu ] && BUDGET=3600 || BUDGET=300; }

MODEL16=bench/out/minilm-f16
DEBS=bench/out/debs

if [ "$MODE" = prepare ]; then
  src=${MODEL_SRC:-models/all-MiniLM-L6-v2}
  [ -f "$src/model.safetensors" ] || { echo "run.sh: $src missing (scripts/setup fetches it)"; exit 1; }
  python3 bench/gpu/gen_model.py convert --src "$src" --out "$MODEL16" || exit 1
  mkdir -p "$DEBS"
  (cd "$DEBS" && apt-get download libdnnl2 libdnnl-dev libjansson4 libjansson-dev libutf8proc2 \
      libutf8proc-dev libcmocka0 libcmocka-dev pkgconf pkgconf-bin libpkgconf3 \
      ocl-icd-libopencl1) || echo "run.sh: could not download the .debs (fine if the GPU image has the libraries)"
  du -sh "$MODEL16" "$DEBS"
  echo "carry: [\"$MODEL16\", \"$DEBS\"]"
  exit 0
fi

mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
STATUS=$OUTDIR/status.txt
: >"$STATUS"
left() { echo $((BUDGET - ($(date +%s) - T_START))); }
step() { # name required(1/0) command...
  local name=$1 req=$2; shift 2
  local l; l=$(left)
  if [ "$(type -t "$1")" = function ]; then
    echo "=== $name: $* ($l s of the budget left)"
    "$@"
  elif [ "$l" -lt 20 ]; then
    echo "=== $name: SKIPPED (budget: $l s left)"
    echo "$name skipped-budget" >>"$STATUS"
    return 0
  else
    echo "=== $name: $* (timeout $l s)"
    timeout --kill-after=5 "$l" "$@"
  fi
  local rc=$?
  echo "$name $rc" >>"$STATUS"
  [ $rc -ne 0 ] && echo "=== $name FAILED ($rc)$([ "$req" = 1 ] && echo ', required')"
  return $rc
}

# --- build dependencies the GPU image may lack: unpack the carried .debs (only what is missing)
have_deps() {
  command -v pkg-config >/dev/null && pkg-config --exists jansson libutf8proc cmocka \
    && { [ -f /usr/include/dnnl.h ] || [ -f /usr/local/include/dnnl.h ]; }
}
if ! have_deps; then
  if [ -d "$DEBS" ] && [ "$(id -u)" = 0 ]; then
    echo "=== unpacking build dependencies from $DEBS"
    for f in "$DEBS"/*.deb; do
      case "$(basename "$f")" in
        ocl-icd-libopencl1*) ldconfig -p | grep -q 'libOpenCL.so.1' && continue ;;
      esac
      dpkg -x "$f" / || echo "could not unpack $f"
    done
    ldconfig
  fi
  have_deps || echo "run.sh: build dependencies still missing (pkg-config, jansson, utf8proc, cmocka, dnnl)"
fi

{
  date -u
  uname -a
  command -v nvidia-smi >/dev/null && nvidia-smi
  command -v nvcc >/dev/null && nvcc --version
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1
} >"$OUTDIR/env.txt" 2>&1

BUILD=build-gpu
JOBS=$(nproc)
[ "$MODE" = cpu ] && JOBS=2
CUDA_FLAG=-DHS_CUDA=ON
[ "$MODE" = cpu ] && CUDA_FLAG=-DHS_CUDA=AUTO
build() {
  cmake -S . -B "$BUILD" "$CUDA_FLAG" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$BUILD" -j "$JOBS" --target hetserve test_cuda test_arch test_conformance \
      bench_engine
}
step build 1 build 2>&1 | tee "$OUTDIR/build.log" | tail -25
[ -x "$BUILD/hetserve" ] || { echo "run.sh: build failed, see build.log"; exit 1; }

# --- every model family first: the CUDA engine runs each block feature of stage.h
export HS_SOURCE_DIR=$ROOT
step test_cuda 1 "$BUILD/test_cuda" 2>&1 | tee "$OUTDIR/test_cuda.txt"
step test_arch 1 "$BUILD/test_arch" 2>&1 | tee "$OUTDIR/test_arch.txt"
step test_conformance 1 "$BUILD/test_conformance" 2>&1 | tee "$OUTDIR/test_conformance.txt"
{
  echo "--- families on the GPU (fp16 vs CPU f32, per tiny checkpoint):"
  grep -E '^  tiny-|tiny families|FAIL|skipped' "$OUTDIR/test_cuda.txt"
  echo "--- families vs transformers goldens (test_arch, other engines):"
  grep -E '^# .* cuda |refused' "$OUTDIR/test_arch.txt"
  echo "--- block cases vs the fp64 reference (test_conformance):"
  grep -E '^conformance .*cuda.*(ok|refused)' "$OUTDIR/test_conformance.txt"
  fam_ok=1
  for t in test_cuda test_arch test_conformance; do grep -q "^$t 0$" "$STATUS" || fam_ok=0; done
  grep -q "tiny families: [0-9]* checked, 0 below" "$OUTDIR/test_cuda.txt" || fam_ok=0
  echo "FAMILIES: $([ $fam_ok = 1 ] && echo PASS || echo FAIL) (status: $(grep -E '^test_(cuda|arch|conformance) ' "$STATUS" | tr '\n' ' '))"
} 2>&1 | tee "$OUTDIR/families.txt"

# --- verify: the golden set is fp32 MiniLM; the GPU path rounds weights to fp16 anyway, so the
# carried fp16 copy is exact for it. On the CPU engine the rounded weights cost a little, so
# there the original model is used when present, and the CPU line is for reference only.
GOLDEN=tests/golden
if [ -f "$GOLDEN/embeddings.json" ]; then
  if [ "$MODE" = gpu ]; then
    step verify_cuda 1 "$BUILD/hetserve" verify --model "$MODEL16" --golden "$GOLDEN" --engine cuda \
      2>&1 | tee "$OUTDIR/verify.txt"
    step verify_cuda_fastgelu 0 env HS_CUDA_FAST_GELU=1 "$BUILD/hetserve" verify --model "$MODEL16" \
      --golden "$GOLDEN" --engine cuda 2>&1 | tee -a "$OUTDIR/verify.txt"
    step verify_cpu_f16weights 0 "$BUILD/hetserve" verify --model "$MODEL16" --golden "$GOLDEN" \
      --engine cpu 2>&1 | tee -a "$OUTDIR/verify.txt"
  else
    m=models/all-MiniLM-L6-v2; [ -f "$m/model.safetensors" ] || m=$MODEL16
    step verify_cpu 1 "$BUILD/hetserve" verify --model "$m" --golden "$GOLDEN" 2>&1 | tee "$OUTDIR/verify.txt"
  fi
else
  echo "run.sh: $GOLDEN/embeddings.json missing: verify skipped" | tee "$OUTDIR/verify.txt"
fi

# --- benchmarks
CSV=$OUTDIR/results.csv
rm -f "$CSV"
BENCH="$BUILD/bench_engine"
if [ "$MODE" = gpu ]; then
  [ -f "$MODEL16/model.safetensors" ] || echo "run.sh: $MODEL16 missing: carry it (run.sh --prepare)"
  step bench_hetserve 1 "$BENCH" --model "$MODEL16" --engine cuda --batch 1,32,256 --seq 16,128,256 \
    --iters "$ITERS" --label hetserve-fp16 --csv "$CSV" 2>&1 | tee "$OUTDIR/bench.txt"
  step bench_hetserve_fastgelu 0 env HS_CUDA_FAST_GELU=1 "$BENCH" --model "$MODEL16" --engine cuda \
    --batch 1,32,256 --seq 16,128,256 --iters "$ITERS" --label hetserve-fp16-fastgelu --csv "$CSV" \
    2>&1 | tee -a "$OUTDIR/bench.txt"
  step bench_hetserve_nographs 0 env HS_CUDA_GRAPHS=0 "$BENCH" --model "$MODEL16" --engine cuda \
    --batch 1 --seq 16,128 --iters "$ITERS" --label hetserve-nographs --csv "$CSV" \
    2>&1 | tee -a "$OUTDIR/bench.txt"
  step bench_torch 0 python3 bench/gpu/torch_bench.py model --model "$MODEL16" --batch 1,32,256 \
    --seq 16,128,256 --iters "$ITERS" --csv "$CSV" 2>&1 | tee -a "$OUTDIR/bench.txt"
  step gemm_peak 0 python3 bench/gpu/torch_bench.py peak --csv "$CSV" 2>&1 | tee -a "$OUTDIR/bench.txt"
  BB=/tmp/hs-bert-base
  step gen_bert_base 0 python3 bench/gpu/gen_model.py random --vocab-from "$MODEL16" --out "$BB" \
    2>&1 | tee -a "$OUTDIR/bench.txt"
  step bench_hetserve_bertbase 1 "$BENCH" --model "$BB" --engine cuda --batch 1,256 --seq 128 \
    --iters "$ITERS" --label hetserve-fp16 --csv "$CSV" 2>&1 | tee -a "$OUTDIR/bench.txt"
  step bench_torch_bertbase 0 python3 bench/gpu/torch_bench.py model --model "$BB" --batch 1,256 \
    --seq 128 --iters "$ITERS" --csv "$CSV" 2>&1 | tee -a "$OUTDIR/bench.txt"
  # a cuda engine sliced into streams, served beside a cpu engine
  step serve_cuda_slices 0 python3 bench/gpu/slices_check.py --hetserve "$BUILD/hetserve" \
    --model "$MODEL16" --slices 2 2>&1 | tee "$OUTDIR/slices.txt"
else
  TINY=bench/out/tiny-bert
  vocab=$MODEL16; [ -f "$vocab/vocab.txt" ] || vocab=models/all-MiniLM-L6-v2 # no --prepare needed here
  step gen_tiny 1 python3 bench/gpu/gen_model.py random --vocab-from "$vocab" --out "$TINY" \
    --layers 2 --hidden 64 --heads 2 --intermediate 256 --max-positions 256 2>&1 | tee "$OUTDIR/bench.txt"
  m=models/all-MiniLM-L6-v2; [ -f "$m/model.safetensors" ] || m=$MODEL16
  step bench_cpu_minilm 1 "$BENCH" --model "$m" --engine cpu --batch 1,2 --seq 16,32 --iters 2 \
    --warmup 1 --label hetserve-cpu --csv "$CSV" 2>&1 | tee -a "$OUTDIR/bench.txt"
  step bench_cpu_tiny 1 "$BENCH" --model "$TINY" --engine cpu --batch 1,4 --seq 16,128 --iters 2 \
    --warmup 1 --label hetserve-cpu --csv "$CSV" 2>&1 | tee -a "$OUTDIR/bench.txt"
  step bench_torch 0 python3 bench/gpu/torch_bench.py peak --csv "$CSV" 2>&1 | tee -a "$OUTDIR/bench.txt"
fi

if [ -f "$CSV" ]; then
  python3 bench/gpu/summarize.py "$CSV" >"$OUTDIR/summary.txt" 2>&1
  {
    echo
    grep -h "FAMILIES:" "$OUTDIR/families.txt" 2>/dev/null
    grep -h "cuda graphs:" "$OUTDIR/bench.txt" 2>/dev/null
    grep -h -E "PASS|FAIL|skipped|ERROR" "$OUTDIR/verify.txt" 2>/dev/null
    echo "step statuses:"; cat "$STATUS"
  } >>"$OUTDIR/summary.txt"
  cat "$OUTDIR/summary.txt"
fi
# a failed required step (see status.txt) fails the run (steps run in pipelines, i.e. subshells,
# so their statuses are read back from the file)
! grep -qE '^(build|test_cuda|test_arch|test_conformance|verify_cuda|verify_cpu|bench_hetserve|bench_hetserve_bertbase|gen_tiny|bench_cpu_minilm|bench_cpu_tiny) ([1-9]|skipped)' "$STATUS"
