#!/usr/bin/env python3
"""Prints the CPU-engine-vs-ONNX-Runtime table from bench/run.sh's JSON lines.

For each shape and engine the best (lowest) per-round median is kept: rounds are interleaved
(hetserve, ORT, hetserve, ORT, ...) so both see the same machine conditions, and the minimum
over rounds filters out rounds disturbed by other load. Ratios: throughput hetserve/ORT (> 1 is
better) and latency hetserve/ORT (< 1 is better)."""
import json
import sys


def main(path):
    best = {}
    peak = None
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "engine" not in d or "batch" not in d and d.get("engine") != "onednn-sgemm":
            continue  # the peer's model/fused-op summary line
        if d.get("engine") == "onednn-sgemm":
            peak = d if peak is None or d["gflops"] > peak["gflops"] else peak
            continue
        key = (d["engine"], d["batch"], d["seq"])
        if key not in best or d["ms"] < best[key]["ms"]:
            best[key] = d
    if peak:
        print(f"   oneDNN sgemm M={peak['m']} K={peak['k']} N={peak['n']}: {peak['gflops']:.1f} GFLOP/s "
              "(the machine's practical fp32 peak on these threads)")
    print(f"   {'shape':>8} {'hetserve ms':>12} {'ORT ms':>9} {'hs seq/s':>10} {'ORT seq/s':>10} "
          f"{'hs GF/s':>8} {'ORT GF/s':>8} {'thr ratio':>9} {'lat ratio':>9}")
    shapes = sorted({(b, s) for (_, b, s) in best}, key=lambda x: (x[0] * x[1], x[0]))
    for b, s in shapes:
        h = best.get(("hetserve-cpu", b, s))
        o = best.get(("onnxruntime", b, s))
        if not h or not o:
            continue
        print(f"   {f'{b}x{s}':>8} {h['ms']:12.3f} {o['ms']:9.3f} {h['seq_per_s']:10.1f} {o['seq_per_s']:10.1f} "
              f"{h['gflops']:8.1f} {o['gflops']:8.1f} {h['seq_per_s'] / o['seq_per_s']:8.2f}x {h['ms'] / o['ms']:8.2f}x")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/out/cpu_vs_ort.jsonl")
