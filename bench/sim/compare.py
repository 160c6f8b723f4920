#!/usr/bin/env python3
"""Simulated vs measured: the table of bench/sim/validate.sh.

usage: compare.py OUTDIR   (OUTDIR/hybrid: bench/hybrid's runs; OUTDIR/sim-RATE-CFG-SEED.json,
                           OUTDIR/calibration-CFG.txt)

Per config, load and class: the measured P50/P99 (hetbench, 2xx after the warm-up) beside the
simulated ones (median over seeds, with their range), and the error (simulated / measured - 1).
Also the utilization per engine, measured (/metrics busy seconds over the run) and simulated.
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hybrid"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from report import one_run  # noqa: E402

NAMES = {"a": "fifo", "b": "hybrid"}


def err(sim, meas):
    if not meas or meas != meas:
        return "-"
    return "%+.0f %%" % (100.0 * (sim / meas - 1.0))


def main():
    out = sys.argv[1]
    runs = os.path.join(out, "hybrid", "runs")
    rates = open(os.path.join(out, "hybrid", "rates.txt")).read().split()
    print("%-7s %7s %-6s | %9s %9s | %9s %9s %-15s | %8s %8s | %s"
          % ("config", "req/s", "class", "meas P50", "sim P50", "meas P99", "sim P99",
             "(sim range)", "P50 err", "P99 err", "utilization meas / sim"))
    worst = 0.0
    rows = []
    for cfg in ("a", "b"):
        for rate in rates:
            m = one_run(runs, cfg, rate)
            sims = [json.load(open(p)) for p in sorted(glob.glob(
                os.path.join(out, "sim-%s-%s-*.json" % (rate, cfg))))]
            if not m or not sims:
                continue
            util_m = " ".join("%s %.0f%%" % (e, 100 * u) for e, u in sorted(m["util"].items()))
            util_s = " ".join("%s %.0f%%" % (e["engine"], 100 * statistics.median(
                [s["engines"][i]["utilization"] for s in sims]))
                for i, e in enumerate(sims[0]["engines"]))
            for cls in ("short", "long"):
                p50 = statistics.median(s["classes"][cls]["p50_ms"] for s in sims)
                p99s = [s["classes"][cls]["p99_ms"] for s in sims]
                p99 = statistics.median(p99s)
                mp50, mp99 = m[cls + "_p50"], m[cls + "_p99"]
                e99 = p99 / mp99 - 1.0 if mp99 == mp99 and mp99 else float("nan")
                worst = max(worst, abs(e99)) if e99 == e99 else worst
                rows.append({"config": NAMES[cfg], "rate": float(rate), "class": cls,
                             "meas_p50": mp50, "sim_p50": p50, "meas_p99": mp99, "sim_p99": p99,
                             "sim_p99_min": min(p99s), "sim_p99_max": max(p99s),
                             "p99_err": e99})
                print("%-7s %7s %-6s | %9.1f %9.1f | %9.1f %9.1f %-15s | %8s %8s | %s"
                      % (NAMES[cfg], rate, cls, mp50, p50, mp99, p99,
                         "(%.0f-%.0f)" % (min(p99s), max(p99s)), err(p50, mp50), err(p99, mp99),
                         "%s / %s" % (util_m, util_s) if cls == "short" else ""))
    for cfg in ("a", "b"):
        try:
            print("calibration of %s: %s" % (NAMES[cfg], open(os.path.join(
                out, "calibration-%s.txt" % cfg)).read().strip()))
        except OSError:
            pass
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump(rows, f, indent=1)
    # P99 vs load, measured and simulated, in bench/plot.sh's p99 table shape
    with open(os.path.join(out, "p99.csv"), "w") as f:
        f.write("config,offered_rps,short_p99_ms,long_p99_ms\n")
        for src in ("measured", "sim"):
            for cfg in ("fifo", "hybrid"):
                for rate in sorted({r["rate"] for r in rows}):
                    v = {r["class"]: r["meas_p99" if src == "measured" else "sim_p99"]
                         for r in rows if r["config"] == cfg and r["rate"] == rate}
                    if v:
                        f.write("%s %s,%.3f,%.3f,%.3f\n" % (cfg, src, rate, v.get("short", float("nan")),
                                                           v.get("long", float("nan"))))
    within = sum(1 for r in rows if abs(r["p99_err"]) <= 0.2)
    print("\nP99 within 20 %%: %d of %d points; largest error %.0f %%"
          % (within, len(rows), 100 * worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
