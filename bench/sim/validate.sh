#!/usr/bin/env bash
# bench/sim/validate.sh — hetsim against measured runs: the fifo (a) and hybrid (b) CPU configs of
# bench/hybrid at three loads, P50/P99 per class, simulated vs measured (issue 14).
#
#   bench/sim/validate.sh [BUILD] [--quick] [--out DIR] [--reuse]
#
# 1. bench/hybrid/run.sh at HYBRID_FRACTIONS (default 0.15 0.3 0.45 0.75) of (a)'s capacity:
#    the measured runs (real server, hetbench open loop, the bimodal trace); the second-lowest
#    load calibrates, the other three are the validated points;
# 2. `hetserve profile` of each of its two configs (the same files), on a grid of the shapes
#    those runs form (batches 1-32 x buckets 16, 32, 128, 256): the simulator's only input about
#    the machine;
# 3. calibration (bench/sim/calibrate.py), from the calibration load's run only: each engine's
#    serving tax (measured busy time / simulated, as the HTTP threads and the load generator
#    share its cores) and the per-request overhead outside the scheduler (short-class P50 gap);
# 4. hetsim on each config and validated load with the same trace, rate, duration and warm-up,
#    SIM_SEEDS seeds (default 5): simulated P50/P99 are the median over seeds, with their range;
# 5. compare.py: the table and each point's error, either way; with gnuplot, P99 vs load
#    (measured and simulated) and the hybrid engines' utilization over time as PNGs.
# --reuse skips steps 1-2 when their outputs exist (to re-run the simulation alone). --quick:
# short runs and a small grid, to check the script. Bounded: ~12 min on 2 cores.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=build
OUT=bench/out/sim
QUICK=0
REUSE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --reuse) REUSE=1 ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    -*) echo "sim/validate.sh: unknown option $1" >&2; exit 2 ;;
    *) BUILD=$1 ;;
  esac
  shift
done
HETSERVE=$BUILD/hetserve
HETSIM=$BUILD/hetsim
[ -x "$HETSIM" ] || { echo "sim/validate.sh: $HETSIM missing (make build)" >&2; exit 1; }
mkdir -p "$OUT"
DURATION=20
WARMUP=3
SHAPES=1,2,4,8,16,32x16,32,128,256
CAP=0.5
if [ "$QUICK" = 1 ]; then
  DURATION=5; WARMUP=1; SHAPES=1,8x16,256; CAP=0.05
  export HYBRID_FRACTIONS=${HYBRID_FRACTIONS:-"0.1 0.2 0.5"}
fi
export HYBRID_FRACTIONS=${HYBRID_FRACTIONS:-"0.15 0.3 0.45 0.75"}
export HYBRID_DURATION_S=$DURATION

HY=$OUT/hybrid
if [ "$REUSE" = 0 ] || [ ! -f "$HY/rates.txt" ]; then
  args=("$BUILD" --out "$HY")
  [ "$QUICK" = 1 ] && args+=(--quick)
  bash bench/hybrid/run.sh "${args[@]}" || exit 1
fi
for c in a b; do
  if [ "$REUSE" = 0 ] || [ ! -f "$OUT/profile-$c.json" ]; then
    echo "sim: profiling config $c ($SHAPES)"
    "$HETSERVE" profile --config "$HY/config-$c.yaml" --shapes "$SHAPES" --cap-s "$CAP" --no-gemm \
      --quiet --out "$OUT/profile-$c.json" || exit 1
  fi
done
SEEDS=${SIM_SEEDS:-5}
read -r -a RATES <"$HY/rates.txt"
CAL=${RATES[1]:-${RATES[0]}}
sim() { # tag cfg rate extra... : one hetsim run per seed
  local tag=$1 c=$2 r=$3 s
  shift 3
  for s in $(seq 1 "$SEEDS"); do
    # shellcheck disable=SC2068 # the calibrated options are words on purpose
    "$HETSIM" --config "$HY/config-$c.yaml" --profile "$OUT/profile-$c.json" \
      --texts "$HY/trace/trace.tsv" --rate "$r" --duration "$DURATION" --warmup "$WARMUP" \
      --seed "$s" --classes short:32,long:512 --json $@ >"$OUT/$tag-$c-$s.json" 2>/dev/null ||
      { echo "sim: hetsim failed on $c at $r" >&2; exit 1; }
  done
}
rm -f "$OUT"/sim-*.json "$OUT"/cal?-*.json
for c in a b; do
  # calibration at the second-lowest load (not one of the validated points): each engine's
  # serving tax, then the overhead outside the scheduler
  sim cal0 "$c" "$CAL"
  TAX=$(python3 bench/sim/calibrate.py tax "$OUT" "$c" "$CAL") || exit 1
  # shellcheck disable=SC2086
  sim cal1 "$c" "$CAL" $TAX
  OVH=$(python3 bench/sim/calibrate.py overhead "$OUT" "$c" "$CAL") || exit 1
  echo "$TAX $OVH" >"$OUT/calibration-$c.txt"
  echo "sim: config $c calibrated at $CAL req/s: $TAX $OVH"
  for r in "${RATES[@]}"; do
    [ "$r" = "$CAL" ] && continue
    # shellcheck disable=SC2086
    sim "sim-$r" "$c" "$r" $TAX $OVH
  done
done
python3 bench/sim/compare.py "$OUT" | tee "$OUT/summary.txt"
# pictures: P99 vs load, measured and simulated; the hybrid config's engines over time at the
# highest load (simulated)
if command -v gnuplot >/dev/null; then
  bash bench/plot.sh p99 "$OUT/p99-sim-vs-measured.png" "$OUT/p99.csv"
  "$HETSIM" --config "$HY/config-b.yaml" --profile "$OUT/profile-b.json" \
    --texts "$HY/trace/trace.tsv" --rate "${RATES[-1]}" --duration "$DURATION" --seed 1 \
    $(cat "$OUT/calibration-b.txt") --util-csv "$OUT/util-b.csv" >/dev/null 2>&1 &&
    bash bench/plot.sh util "$OUT/util-hybrid.png" "$OUT/util-b.csv"
else
  echo "plots skipped: gnuplot not installed"
fi
