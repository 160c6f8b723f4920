#!/usr/bin/env bash
# bench/plot.sh — PNG plots of benchmark output with gnuplot (Debian: apt-get install gnuplot-nox).
#
#   bench/plot.sh cdf OUT.png CSV...   latency CDF per class: one line per (CSV, class) over the
#                                      measured 2xx rows of hetbench --csv files (warm-up and
#                                      failed requests left out); x log scale, ms
#   bench/plot.sh p99 OUT.png TABLE    P99 vs offered load per config: TABLE is a CSV with a
#                                      header naming `config`, `offered_rps` and one or more
#                                      `*p99_ms` columns (serving_report.py's p99.csv, hybrid's
#                                      results.csv); one line per (config, P99 column)
#   bench/plot.sh util OUT.png CSV     utilization over time per engine: CSV with a header
#                                      `t_s,ENGINE,...` (hetsim --util-csv), shares in [0, 1]
#
# Terminal pngcairo when this gnuplot has it, else png. Exit status 0 with the PNG written, 1 on
# bad input or a gnuplot error, 3 when gnuplot is missing (a line says so). A line is labelled by
# the CSV's file name without .csv, and the class when a CSV has more than one.
set -uo pipefail

usage() { sed -n 3,16p "$0" >&2; exit 2; }
[ $# -ge 3 ] || usage
MODE=$1 OUT=$2
shift 2
command -v gnuplot >/dev/null || { echo "plot: gnuplot not installed (apt-get install gnuplot-nox)" >&2; exit 3; }
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT

TERM_LINE="set terminal png size 900,540 noenhanced"
gnuplot -e 'set terminal pngcairo' 2>/dev/null && TERM_LINE="set terminal pngcairo size 900,540 font ',10' noenhanced"

plots=() # gnuplot plot clauses, one per series
case "$MODE" in
  cdf)
    n=0
    for csv in "$@"; do
      [ -r "$csv" ] || { echo "plot: cannot read $csv" >&2; exit 1; }
      label=$(basename "$csv" .csv)
      # per class: the measured 2xx latencies, sorted, as (latency, share at or below it); at most
      # ~2000 points a line so that 20k-request runs stay small files and small PNGs
      classes=$(awk -F, 'NR > 1 && $1 !~ /^#/ && $9 == "0" && $7 ~ /^2/ { print ($4 == "" ? "-" : $4) }' "$csv" | sort -u)
      nclass=$(echo "$classes" | grep -c .)
      for cls in $classes; do
        n=$((n + 1))
        awk -F, -v c="$cls" 'NR > 1 && $1 !~ /^#/ && $9 == "0" && $7 ~ /^2/ && ($4 == "" ? "-" : $4) == c { print $3 }' "$csv" |
          sort -g | awk '{ v[NR] = $1 } END { step = NR > 2000 ? NR / 2000 : 1
            for (i = step; i < NR + step; i += step) { k = int(i); if (k > NR) k = NR; printf "%s %.6f\n", v[k], k / NR } }' \
          >"$TMP/$n.dat"
        title=$label
        [ "$nclass" -gt 1 ] && title="$label $cls"
        plots+=("'$TMP/$n.dat' using 1:2 with lines lw 2 title '${title//\'/}'")
      done
    done
    SETUP="set title 'Latency CDF (2xx, measured)'; set xlabel 'latency (ms)'; set ylabel 'share of requests'
set logscale x; set yrange [0:1]; set key bottom right; set grid"
    ;;
  p99)
    if [ $# -ne 1 ] || [ ! -r "$1" ]; then echo "plot: p99 needs one readable TABLE" >&2; exit 1; fi
    # one data file per (config, p99 column): offered, p99 (sorted by offered)
    awk -F, -v dir="$TMP" '
      NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "config") c = i; else if ($i ~ /^offered/) o = i
                                            else if ($i ~ /p99_ms$/) p[i] = $i }
                if (!c || !o || !length(p)) { print "plot: header needs config, offered_rps, *p99_ms" > "/dev/stderr"; exit 1 }
                next }
      $1 ~ /^#/ || $c == "" { next }
      { for (i in p) if ($i != "" && $i != "nan") {
          col = p[i]; sub(/_?p99_ms$/, "", col)
          f = $c (col == "" ? "" : " " col); gsub(/[^A-Za-z0-9 ._()-]/, "", f)
          print $o, $i > (dir "/" f ".series") } }' "$1" || exit 1
    for f in "$TMP"/*.series; do
      [ -e "$f" ] || { echo "plot: no rows in $1" >&2; exit 1; }
      sort -g "$f" >"${f%.series}.dat"
      plots+=("'${f%.series}.dat' using 1:2 with linespoints lw 2 pt 7 title '$(basename "$f" .series)'")
    done
    SETUP="set title 'P99 latency vs offered load'; set xlabel 'offered load (req/s)'; set ylabel 'P99 (ms)'
set logscale y; set key top left; set grid"
    ;;
  util)
    if [ $# -ne 1 ] || [ ! -r "$1" ]; then echo "plot: util needs one readable CSV" >&2; exit 1; fi
    head -1 "$1" | grep -q '^t_s,' || { echo "plot: $1: header must start with t_s," >&2; exit 1; }
    [ "$(wc -l <"$1")" -gt 1 ] || { echo "plot: no rows in $1" >&2; exit 1; }
    IFS=, read -r -a cols <"$1"
    for ((i = 1; i < ${#cols[@]}; i++)); do
      name=${cols[$i]//[^A-Za-z0-9 ._()\/-]/}
      plots+=("'$1' every ::1 using 1:(100*\$$((i + 1))) with steps lw 2 title '$name'")
    done
    SETUP="set datafile separator ','; set title 'Engine utilization over time'
set xlabel 'time (s)'; set ylabel 'busy (%)'; set yrange [0:105]; set key top right; set grid"
    ;;
  *) usage ;;
esac
[ ${#plots[@]} -gt 0 ] || { echo "plot: nothing to plot (no measured 2xx rows)" >&2; exit 1; }

{
  echo "$TERM_LINE"
  echo "set output '$OUT'"
  echo "$SETUP"
  printf 'plot '
  sep=
  for p in "${plots[@]}"; do printf '%s%s' "$sep" "$p"; sep=', '; done
  echo
} >"$TMP/plot.gp"
gnuplot "$TMP/plot.gp" || { echo "plot: gnuplot failed on $TMP/plot.gp" >&2; exit 1; }
[ -s "$OUT" ] || { echo "plot: $OUT not written" >&2; exit 1; }
echo "plot: $OUT"
