#!/usr/bin/env bash
# make soak: the real server under hours of swinging load and injected faults (not in CI).
#
#   bash tests/soak/run.sh [BUILD_DIR]        (make soak; make soak-quick = 20,000 requests)
#
# Settings (environment): SOAK_REQUESTS (default 1000000), SOAK_MAX_S (hard wall-clock bound of
# the whole run, default 3600), SOAK_OUT (default bench/out/soak), SOAK_SEED (default 1),
# HS_MODEL_DIR (default models/all-MiniLM-L6-v2).
#
# It writes a hybrid two-engine config (cpu_a and cpu_b, one thread each, pinned to the first two
# cores; short requests on cpu_a, the rest on cpu_b, each route failing over to the other with a
# capped share; breakers; a retry budget; admin with a fresh random token; /predict with the
# committed MiniLM head), checks it, and hands over to build/hetsoak (tools/soak/hetsoak.c),
# which starts `hetserve serve` on 127.0.0.1, drives it and checks the invariants. Everything
# stays on loopback. The summary (text and JSON), the config and the server's log land in
# SOAK_OUT; the exit status is hetsoak's (0 pass, 1 an invariant failed, 2 could not start).
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=${1:-build}
REQUESTS=${SOAK_REQUESTS:-1000000}
MAX_S=${SOAK_MAX_S:-3600}
OUT=${SOAK_OUT:-bench/out/soak}
SEED=${SOAK_SEED:-1}
MODEL=${HS_MODEL_DIR:-models/all-MiniLM-L6-v2}
FAILOVER_CAP=0.3

for f in "$BUILD/hetserve" "$BUILD/hetsoak"; do
  [ -x "$f" ] || { echo "soak: $f is missing (make build)" >&2; exit 2; }
done
[ -f "$MODEL/model.safetensors" ] || { echo "soak: no model in $MODEL (scripts/setup)" >&2; exit 2; }

# the two engines' cores: the first two this process may use (unpinned on a one-core machine)
read -r CORE_A CORE_B < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(*(c[:2] if len(c) > 1 else ["", ""]))' 2>/dev/null || echo "0 1")
PIN_A=${CORE_A:+[$CORE_A]}; PIN_A=${PIN_A:-[]}
PIN_B=${CORE_B:+[$CORE_B]}; PIN_B=${PIN_B:-[]}

# a short run measures capacity for less time
CAPACITY_S=8
[ "$REQUESTS" -le 100000 ] && CAPACITY_S=4

mkdir -p "$OUT"
rm -f "$OUT"/summary.txt "$OUT"/summary.json
HETSOAK_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export HETSOAK_TOKEN
CONFIG=$OUT/config.yaml
umask 077
cat >"$CONFIG" <<YAML
# written by tests/soak/run.sh
server:
  host: "127.0.0.1"
  threads: 4
engines:
  - name: cpu_a
    kind: cpu
    threads: 1
    cores: $PIN_A
  - name: cpu_b
    kind: cpu
    threads: 1
    cores: $PIN_B
models:
  - path: "$MODEL"
    engines: [cpu_a, cpu_b]
limits:
  timeout_ms: 2000
  drain_timeout_ms: 20000
routes:
  - name: short
    engines: [cpu_a]
    failover: {route: long, ratio_max: $FAILOVER_CAP}
  - name: long
    engines: [cpu_b]
    failover: {route: short, ratio_max: $FAILOVER_CAP}
router:
  rules:
    - {tokens_max: 32, route: short}
  default_route: long
breaker:
  window_requests: 20
  min_requests: 5
  error_ratio_max: 0.5
  latency_max_ms: 2000
  open_ms: 1000
  half_open_probes: 2
retry:
  budget_ratio: 0.1
  budget_max: 5
admin:
  enabled: true
  token: "$HETSOAK_TOKEN"
cascade:
  small: $(basename "$MODEL")
  small_head: heads/all-MiniLM-L6-v2-sentiment.json
YAML
umask 022
"$BUILD/hetserve" config --check "$CONFIG" >/dev/null

echo "soak: $REQUESTS requests, at most $MAX_S s; engines on cores ${CORE_A:-any} and ${CORE_B:-any}; output in $OUT" >&2
# hetsoak keeps the bound itself (it stops loading in time to drain, and an alarm kills
# everything at SOAK_MAX_S); timeout is the belt to those braces.
timeout -k 10 $((MAX_S + 30)) "$BUILD/hetsoak" --requests "$REQUESTS" --max-s "$MAX_S" \
  --engines cpu_a,cpu_b --failover-cap "$FAILOVER_CAP" --capacity-s "$CAPACITY_S" \
  --seed "$SEED" --out "$OUT" -- \
  "$BUILD/hetserve" serve --host 127.0.0.1 --port 0 --config "$CONFIG"
