#!/usr/bin/env bash
# Runs the libFuzzer harnesses built in BUILD (make fuzz) for SECONDS each, one after the other,
# and prints the executions of each:
#   tests/fuzz/run.sh BUILD SECONDS [NAME...]       (NAME: tokenizer, http, ...; none = all)
# A harness reads its committed seeds (tests/fuzz/corpus/NAME, never written) and the inputs
# earlier runs found (BUILD/fuzz-corpus/NAME, where new ones go), with max_len and dict from
# tests/fuzz/fuzz_NAME.options. A finding is written to BUILD/fuzz-artifacts/NAME/ and fails
# the run: minimize it (fuzz_NAME -minimize_crash=1 FILE), fix the code, and keep it in the
# corpus as a regression input (tests/fuzz/README.md).
set -uo pipefail
build=${1:?usage: run.sh BUILD SECONDS [NAME...]}
secs=${2:-60}
shift 2 || true
here=$(cd "$(dirname "$0")" && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$here"/fuzz_*.c; do n=$(basename "$f" .c); names+=("${n#fuzz_}"); done
fi

opt() { # harness key default
  local v
  v=$(sed -n "s/^$2 *= *//p" "$here/fuzz_$1.options" 2>/dev/null | head -1)
  echo "${v:-$3}"
}

failed=0
summary=""
for name in "${names[@]}"; do
  bin=$build/fuzz_$name
  if [ ! -x "$bin" ]; then echo "run.sh: no harness $bin" >&2; failed=1; continue; fi
  mkdir -p "$build/fuzz-corpus/$name" "$build/fuzz-artifacts/$name"
  args=(-max_total_time="$secs" -max_len="$(opt "$name" max_len 4096)" -timeout=10
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$name/")
  dict=$(opt "$name" dict "")
  if [ -n "$dict" ]; then args+=(-dict="$here/$dict"); fi
  log=$build/fuzz-artifacts/$name/last-run.log
  echo "== fuzz_$name: ${secs}s"
  "$bin" "${args[@]}" "$build/fuzz-corpus/$name" "$here/corpus/$name" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    failed=1
    result="FINDING (exit $rc): $(grep -m1 -E 'ERROR|fuzz check failed|runtime error' "$log")"
    tail -40 "$log"
  else
    result=ok
  fi
  line=$(printf '%-16s %12s execs %8s/s  %-10s %s' "fuzz_$name" "${execs:-?}" "${rate:-?}" \
    "${cov:-}" "$result")
  echo "$line"
  summary+="$line"$'\n'
done
echo
echo "executions per harness (${secs}s each):"
printf '%s' "$summary"
exit $failed
