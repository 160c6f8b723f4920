# bench/lib.sh — helpers shared by the serving benchmarks (sourced, not run).
#
#   hs_bench_init BUILD OUTDIR   checks BUILD/hetserve and BUILD/hetbench, makes OUTDIR, sets
#                                HETSERVE, HETBENCH, BENCH_OUT and a temporary folder BENCH_TMP
#                                (removed on exit, with any server still running)
#   hs_server_start NAME CONFIG  starts `hetserve serve --config CONFIG --port 0` (loopback only),
#                                waits for its "listening on" line, sets SERVER_URL and SERVER_PID;
#                                its log goes to OUTDIR/NAME.server.log
#   hs_server_stop               SIGTERM (the server drains), waits; returns the server's status
#   hs_metric NAME LABEL_RE      prints the value of the first /metrics sample of NAME whose
#                                labels match LABEL_RE (0 when absent)
#   hs_load_note                 one line: date, nproc, load averages (numbers are only as
#                                quiet as the machine)
#   hs_int8_folder HS MODEL DIR LOG [THREADS]
#                                the quantized folder for an int8 lane, made once (below)

hs_bench_init() {
  local build=$1 out=$2
  HETSERVE=$build/hetserve
  HETBENCH=$build/hetbench
  for b in "$HETSERVE" "$HETBENCH"; do
    [ -x "$b" ] || { echo "bench: $b missing (build first: make, with libcurl for hetbench)" >&2; return 1; }
  done
  command -v python3 >/dev/null || { echo "bench: python3 is needed for the reports" >&2; return 1; }
  mkdir -p "$out"
  BENCH_OUT=$(cd "$out" && pwd)
  BENCH_TMP=$(mktemp -d)
  SERVER_PID=
  trap 'hs_server_stop >/dev/null 2>&1; rm -rf "$BENCH_TMP"' EXIT
  trap 'exit 130' INT TERM
}

hs_server_start() {
  local name=$1 config=$2 log=$BENCH_OUT/$1.server.log i
  "$HETSERVE" serve --config "$config" --host 127.0.0.1 --port 0 >"$log" 2>&1 &
  SERVER_PID=$!
  SERVER_URL=
  for i in $(seq 1 600); do # model load: up to 60 s on a busy machine
    SERVER_URL=$(sed -n 's/.*listening on \(http:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$log" | head -n 1)
    [ -n "$SERVER_URL" ] && return 0
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "bench: server $name exited during start-up:" >&2
      tail -n 5 "$log" >&2
      SERVER_PID=
      return 1
    fi
    sleep 0.1
  done
  echo "bench: server $name did not start within 60 s" >&2
  hs_server_stop
  return 1
}

hs_server_stop() {
  [ -n "${SERVER_PID:-}" ] || return 0
  local pid=$SERVER_PID rc=0
  SERVER_PID=
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" || rc=$?
  return $rc
}

hs_metric() {
  curl -s --noproxy '*' "$SERVER_URL/metrics" |
    awk -v n="$1" -v re="$2" 'index($0, n "{") == 1 && $0 ~ re { print $NF; found = 1; exit }
                              END { if (!found) print 0 }'
}

hs_load_note() {
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) nproc=$(nproc) loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
}

# hs_int8_folder HETSERVE MODEL DIR LOG [THREADS]: the quantized folder DIR (its quant.json is
# the int8 lane's plan), made once with `hetserve quantize` when missing, its output in LOG.
# Returns 0 when DIR holds a plan, 1 when DIR exists without one (left alone), 2 when this CPU
# has no fast int8 path, 3 when quantize failed otherwise. Exit status 1 of quantize also means
# "written, target not met": the folder is still the plan to use.
hs_int8_folder() {
  local hs=$1 model=$2 dir=$3 log=$4 threads=${5:-}
  [ -f "$dir/quant.json" ] && return 0
  [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ] && return 1
  "$hs" quantize --model "$model" --out "$dir" ${threads:+--threads "$threads"} >"$log" 2>&1 ||
    [ -f "$dir/quant.json" ] || { grep -q 'has no fast int8 path' "$log" && return 2; return 3; }
  return 0
}
