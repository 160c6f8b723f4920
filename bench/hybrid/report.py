#!/usr/bin/env python3
"""Report of bench/hybrid/run.sh: per config and offered load, short/long latency, throughput,
per-engine utilization; the highest load with short P99 < 50 ms; the issue-5 target checks.

usage: report.py OUTDIR [--csv FILE] [--png FILE]
  OUTDIR   the folder run.sh wrote (runs/, rates.txt, load.txt, trace/lengths.txt)
  --csv    also write the table as CSV (default OUTDIR/results.csv)
  --png    also plot P99 vs load (needs matplotlib; skipped with a line when it is missing)
"""
import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hsbench import csv_rows, fmt, load_json, measured, ok, pct  # noqa: E402

SHORT_P99_MS = 50.0
NAMES = {"a": "(a) shared", "b": "(b) hybrid", "c": "(c) gpu-long", "e": "(e) elastic",
         "m": "(m) mutual", "p": "(p) preempt", "q": "(q) int8-short"}
CONFIGS = ("a", "b", "e", "m", "p", "q", "c")


def read_snap(path):
    t, busy = None, {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("# t "):
                    t = float(line.split()[2])
                elif line.startswith("hetserve_engine_busy_seconds_total{"):
                    labels, value = line.rsplit(" ", 1)
                    eng = labels.split('engine="', 1)[1].split('"', 1)[0]
                    busy[eng] = busy.get(eng, 0.0) + float(value)
    except (OSError, IndexError, ValueError):
        return None, {}
    return t, busy


def one_run(runs, cfg, rate):
    base = os.path.join(runs, "%s-%s" % (cfg, rate))
    parts = [base] if os.path.exists(base + ".csv") else [base + ".short", base + ".long"]
    rows, rps = [], 0.0
    for p in parts:
        rows += csv_rows(p + ".csv")
        j = load_json(p + ".json")
        if j:
            rps += j["all"]["rps"]
    if not rows:
        return None
    good = ok(rows)
    r = {"cfg": cfg, "rate": float(rate), "ok_rps": rps,
         "errors": len(measured(rows)) - len(good), "routing": "client" if len(parts) > 1 else "server"}
    for cls in ("short", "long"):
        lat = [x["latency_ms"] for x in good if x.get("class") == cls]
        r[cls + "_n"] = len(lat)
        r[cls + "_p50"] = pct(lat, 50)
        r[cls + "_p99"] = pct(lat, 99)
    t0, b0 = read_snap(base + ".m0")
    t1, b1 = read_snap(base + ".m1")
    r["util"] = {}
    if t0 and t1 and t1 > t0:
        for eng in sorted(b1):
            r["util"][eng] = (b1[eng] - b0.get(eng, 0.0)) / (t1 - t0)
    r["sustained"] = (r["short_p99"] == r["short_p99"] and r["short_p99"] < SHORT_P99_MS
                      and r["errors"] == 0)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--csv")
    ap.add_argument("--png")
    a = ap.parse_args()
    runs = os.path.join(a.out, "runs")
    for f in ("load.txt", "trace/lengths.txt"):
        try:
            with open(os.path.join(a.out, f)) as fh:
                sys.stdout.write(fh.read())
        except OSError:
            pass
    rates = sorted({os.path.basename(p).split("-", 1)[1].split(".m0")[0]
                    for p in glob.glob(os.path.join(runs, "*.m0"))}, key=float)
    results = [r for cfg in CONFIGS for rate in rates
               for r in [one_run(runs, cfg, rate)] if r]
    if not results:
        print("hybrid report: no runs in %s" % runs)
        return 1

    print()
    print("%-13s %8s %7s %5s %9s %9s %9s %9s  %-28s %s"
          % ("config", "offered", "ok/s", "err", "short P50", "short P99", "long P50", "long P99",
             "engine utilization", "short P99<50ms"))
    for r in results:
        util = " ".join("%s %.0f%%" % (e, 100 * u) for e, u in r["util"].items())
        print("%-13s %8.1f %7.1f %5d %9s %9s %9s %9s  %-28s %s"
              % (NAMES[r["cfg"]], r["rate"], r["ok_rps"], r["errors"], fmt(r["short_p50"]),
                 fmt(r["short_p99"]), fmt(r["long_p50"]), fmt(r["long_p99"]), util,
                 "yes" if r["sustained"] else "no"))
    print("(latencies in ms over 2xx; err = 429/504/connection/timeout/dropped; utilization = "
          "engine busy seconds / wall seconds of the run, from /metrics)")

    print()
    sustained = {}
    for cfg in CONFIGS:
        rs = [r for r in results if r["cfg"] == cfg]
        if not rs:
            continue
        good = [r["rate"] for r in rs if r["sustained"]]
        sustained[cfg] = max(good) if good else 0.0
        print("%s: highest offered load with short P99 < %.0f ms, no errors: %s"
              % (NAMES[cfg], SHORT_P99_MS, "%.1f req/s" % sustained[cfg] if good
                 else "none of the loads tried"))
    for b in ("b", "e", "m", "p", "q"):
        if "a" not in sustained or b not in sustained:
            continue
        print()
        print("targets, (%s) vs (a) at the same load: short P99 >= 4x lower, long P99 <= 1.2x" % b)
        hits = []
        for rate in rates:
            ra = next((r for r in results if r["cfg"] == "a" and r["rate"] == float(rate)), None)
            rb = next((r for r in results if r["cfg"] == b and r["rate"] == float(rate)), None)
            if not ra or not rb:
                continue
            s = ra["short_p99"] / rb["short_p99"] if rb["short_p99"] else float("nan")
            lg = rb["long_p99"] / ra["long_p99"] if ra["long_p99"] else float("nan")
            hit = s >= 4 and lg <= 1.2
            hits.append(hit)
            print("  %7.1f req/s: short P99 a/%s %s, long P99 %s/a %s  -> %s"
                  % (float(rate), b, fmt(s, "%.2fx"), b, fmt(lg, "%.2fx"), "both met" if hit else
                     "short %s, long %s" % ("met" if s >= 4 else "NOT met",
                                            "met" if lg <= 1.2 else "NOT met")))
        print("  sustained load (%s) %.1f vs (a) %.1f req/s -> %s"
              % (b, sustained[b], sustained["a"],
                 "met" if sustained[b] >= sustained["a"] and sustained[b] > 0 else "NOT met"))
        print("  verdict: %s" % ("targets REACHED at some load" if any(hits) and
                                 sustained[b] >= sustained["a"] else "targets NOT reached"))
    for cfg in ("e", "m", "p", "q"):
        leases = os.path.join(runs, "%s-leases.txt" % cfg)
        if os.path.exists(leases):
            with open(leases) as fh:
                print("(%s) core loans over its runs (from /metrics):" % cfg)
                sys.stdout.write("".join("  " + ln for ln in fh))
    if not any(r["cfg"] == "c" for r in results):
        print("(c) not run: no GPU found")
    if any(r["routing"] == "client" for r in results if r["cfg"] != "a"):
        print("note: (b)/(c) routed by the client (two model instances, two Poisson streams at "
              "0.8 R and 0.2 R); the server had no rule routing by token length in this build")

    path = a.csv or os.path.join(a.out, "results.csv")
    engines = sorted({e for r in results for e in r["util"]})
    with open(path, "w") as f:
        f.write("config,offered_rps,ok_rps,errors,short_p50_ms,short_p99_ms,long_p50_ms,"
                "long_p99_ms,sustained,routing" + "".join(",util_" + e for e in engines) + "\n")
        for r in results:
            f.write("%s,%.3f,%.3f,%d,%.3f,%.3f,%.3f,%.3f,%d,%s" % (
                r["cfg"], r["rate"], r["ok_rps"], r["errors"], r["short_p50"], r["short_p99"],
                r["long_p50"], r["long_p99"], r["sustained"], r["routing"]))
            f.write("".join(",%.4f" % r["util"][e] if e in r["util"] else "," for e in engines))
            f.write("\n")
    print("table written to %s" % path)
    if a.png:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("no PNG: matplotlib is not installed (pip install matplotlib in a bench venv)")
            return 0
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for cfg in CONFIGS:
            rs = [r for r in results if r["cfg"] == cfg]
            if not rs:
                continue
            for i, cls in enumerate(("short", "long")):
                ax[i].plot([r["rate"] for r in rs], [r[cls + "_p99"] for r in rs], "o-",
                           label=NAMES[cfg])
        for i, cls in enumerate(("short", "long")):
            ax[i].set_title("%s requests, P99" % cls)
            ax[i].set_xlabel("offered load (req/s)")
            ax[i].set_ylabel("ms")
            ax[i].set_yscale("log")
            ax[i].legend()
        ax[0].axhline(SHORT_P99_MS, color="grey", ls=":")
        fig.tight_layout()
        fig.savefig(a.png, dpi=100)
        print("plot written to %s" % a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
