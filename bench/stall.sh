#!/usr/bin/env bash
# The CPU engine under shared cores: 32x32 then 1x16 batches on 2 threads (bench_cpu), with the
# cores to itself and with a competing busy process, under each OpenMP wait policy:
#   default   libgomp's own (spins up to 300,000 pause loops between regions)
#   passive   OMP_WAIT_POLICY=passive (sleeps at once)
#   spin1000 / spin10000 / spin100000   GOMP_SPINCOUNT=N (bounded spin, then sleep)
# hetserve itself runs with GOMP_SPINCOUNT=HS_OMP_SPINCOUNT (src/core/threads.h) unless the
# environment says otherwise. Prints, per policy and load, the median over rounds of each run's
# median ms (lower middle for an even count) and the range over rounds.
# Loopback-free, bounded in time: ~2 * 5 policies * 2 shapes * SECONDS.
#   bench/stall.sh [BUILD_DIR]     env: SECONDS_PER (3), ROUNDS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SECONDS_PER=${SECONDS_PER:-3}
ROUNDS=${ROUNDS:-2}
MODEL=${HS_MODEL_DIR:-models/all-MiniLM-L6-v2}
OUT=bench/out/stall.jsonl
mkdir -p bench/out
: >"$OUT"
run() { # label load env...
    local label=$1 load=$2
    shift 2
    local busy=""
    if [ "$load" = busy ]; then
        timeout 600 sh -c 'while :; do :; done' &
        busy=$!
    fi
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT HS_OMP_KEEP_POLICY=1 "$@" "$BUILD/bench_cpu" \
        --model "$MODEL" --threads 2 --shapes 32x32,1x16 --no-peak --seconds "$SECONDS_PER" |
        grep '^{' | sed "s/^{/{\"policy\":\"$label\",\"load\":\"$load\",/" >>"$OUT"
    if [ -n "$busy" ]; then kill "$busy" 2>/dev/null || true; wait "$busy" 2>/dev/null || true; fi
}
echo "== engine stall: $MODEL, 2 threads, 32x32 then 1x16; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
    for load in quiet busy; do
        run default "$load"
        run passive "$load" OMP_WAIT_POLICY=passive
        run spin1000 "$load" GOMP_SPINCOUNT=1000
        run spin10000 "$load" GOMP_SPINCOUNT=10000
        run spin100000 "$load" GOMP_SPINCOUNT=100000
    done
done
echo "   load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" <<'PY'
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
best = collections.defaultdict(list)
for r in rows:
    best[(r["policy"], r["load"], "%dx%d" % (r["batch"], r["seq"]))].append(r["ms"])
pols = ["default", "passive", "spin1000", "spin10000", "spin100000"]
print("| policy | load | 32x32 ms (range) | 1x16 ms (range) |")
print("| --- | --- | --- | --- |")
for load in ("quiet", "busy"):
    for p in pols:
        cells = []
        for shape in ("32x32", "1x16"):
            v = sorted(best.get((p, load, shape), []))
            cells.append("%.2f (%.2f-%.2f)" % (v[(len(v) - 1) // 2], v[0], v[-1]) if v else "-")
        print("| %s | %s | %s | %s |" % (p, load, cells[0], cells[1]))
PY
