#!/usr/bin/env python3
"""The two numbers hetsim takes from one served run (bench/sim/validate.sh's calibration load),
beside the profile: per engine its serving tax, and the per-request overhead outside the
scheduler.

usage: calibrate.py tax OUTDIR CFG RATE        -> "--tax ENGINE=X ..." (hetsim options)
       calibrate.py overhead OUTDIR CFG RATE   -> "--overhead-ms X"

tax:      measured engine utilization (busy seconds from /metrics over the run) / the
          simulation's at the same load, from OUTDIR/cal0-CFG-SEED.json (no tax): how much
          slower the engine's batches are while serving than alone in `hetserve profile` (the
          HTTP threads and the load generator share its cores).
overhead: measured short-class P50 - simulated short-class P50, from OUTDIR/cal1-CFG-SEED.json
          (with the tax): what a request spends outside the scheduler (client, HTTP, tokenizing,
          the response), at a load where short requests barely queue.
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hybrid"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from report import one_run  # noqa: E402


def sims(out, tag, cfg):
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "%s-%s-*.json" % (tag, cfg))))]


def main():
    what, out, cfg, rate = sys.argv[1:5]
    m = one_run(os.path.join(out, "hybrid", "runs"), cfg, rate)
    if not m:
        sys.exit("calibrate: no measured run %s at %s" % (cfg, rate))
    if what == "tax":
        s = sims(out, "cal0", cfg)
        opts = []
        for i, e in enumerate(s[0]["engines"]):
            u_sim = statistics.median(x["engines"][i]["utilization"] for x in s)
            u_meas = m["util"].get(e["engine"])
            if u_meas and u_sim > 0:
                opts.append("--tax %s=%.3f" % (e["engine"], min(100.0, max(0.1, u_meas / u_sim))))
        print(" ".join(opts))
    else:
        s = sims(out, "cal1", cfg)
        p50 = statistics.median(x["classes"]["short"]["p50_ms"] for x in s)
        print("--overhead-ms %.3f" % max(0.0, m["short_p50"] - p50))
    return 0


if __name__ == "__main__":
    sys.exit(main())
