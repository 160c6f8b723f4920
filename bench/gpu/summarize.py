#!/usr/bin/env python3
"""summarize.py RESULTS.csv > summary.txt — hetserve vs PyTorch per shape, and TFLOP/s as a
share of the measured fp16 GEMM peak (row impl=cublas-gemm-peak), from bench/gpu/run.sh's CSV."""
import csv
import sys


def main(path):
    rows = list(csv.DictReader(open(path)))
    peak = [float(r["tflops"]) for r in rows if r["impl"] == "cublas-gemm-peak" and r["tflops"]]
    peak = max(peak) if peak else None
    print("GEMM peak (measured, fp16 8192^3): %s" % ("%.1f TFLOP/s" % peak if peak else "n/a"))
    by = {}
    for r in rows:
        if r["impl"] == "cublas-gemm-peak":
            continue
        by.setdefault((r["model"], int(r["batch"]), int(r["seq"])), {})[r["impl"]] = r
    impls = sorted({i for v in by.values() for i in v})
    print("%-18s %5s %5s  %s" % ("model", "batch", "seq", "  ".join("%-30s" % i for i in impls)))
    for (model, b, s) in sorted(by):
        cells = []
        for i in impls:
            r = by[(model, b, s)].get(i)
            if not r:
                cells.append("%-30s" % "-")
                continue
            tf = float(r["tflops"]) if r["tflops"] else 0.0
            pct = " %4.1f%%pk" % (100 * tf / peak) if peak else ""
            cells.append("%-30s" % ("%8.3f ms %7.2f TF%s" % (float(r["ms_mean"]), tf, pct)))
        line = "%-18s %5d %5d  %s" % (model[:18], b, s, "  ".join(cells))
        hs = [v for k, v in by[(model, b, s)].items() if k.startswith("hetserve")]
        pt = by[(model, b, s)].get("torch-fp16")
        if hs and pt:
            best = min(float(v["ms_mean"]) for v in hs)
            line += "   torch/hetserve %.2fx" % (float(pt["ms_mean"]) / best)
        print(line)


if __name__ == "__main__":
    main(sys.argv[1])
