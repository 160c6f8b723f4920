#!/usr/bin/env python3
"""Writes bench/sim/gpu-published.json: a GPU lane for hetsim built from a published number,
because no GPU machine has produced a `hetserve profile` for this project yet (issue 15).

usage: make_published.py [--out FILE]

The file is in the hetserve-profile format (docs/PROFILE.md) with whole-model times only (no
per-stage cells: nothing was measured stage by stage), and says where each number comes from:

  throughput  14,200 sentences/s: all-MiniLM-L6-v2's encoding speed on a V100 GPU as published
              in the sentence-transformers "Pretrained Models" table (sbert.net). Taken here as
              the rate of full batches of 32 sentences of 32 tokens (short sentences, as that
              benchmark's): 32 / 14,200 s = 2.25 ms per such batch.
  fixed cost  1.0 ms per batch: ASSUMED, not measured or published here (kernel launches and one
              host synchronisation of a 6-layer encoder); the rest of a batch is linear in its
              padded tokens: (2.25 - 1.0) ms / 1024 tokens = 1.22 us per token.
  length      linear in padded tokens (ASSUMED: attention's quadratic part is ignored; at 256
              tokens it is a minor share for this model on a GPU).
Replace it with a real profile (`hetserve profile` on a GPU machine) as soon as one exists.
"""
import argparse
import json

FIXED_MS = 1.0
TOKENS_PER_S_BATCH = 32 * 32
BATCH_MS = 32 / 14200 * 1e3
PER_TOKEN_MS = (BATCH_MS - FIXED_MS) / TOKENS_PER_S_BATCH


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/sim/gpu-published.json")
    a = ap.parse_args()
    cells = []
    for b in (1, 2, 4, 8, 16, 32):
        for s in (16, 32, 64, 128, 256):
            ms = FIXED_MS + PER_TOKEN_MS * b * s
            t = lambda v: {"n": 1, "median_ms": round(v, 6)}  # noqa: E731
            cells.append({"batch": b, "bucket": s, "tokens": b * s, "stages": {},
                          "whole": {"compute": t(ms), "copy_in": t(0), "copy_out": t(0)}})
    doc = {
        "format": "hetserve-profile", "version": 1,
        "config": "published numbers, not a measurement (bench/sim/make_published.py)",
        "sources": [
            "throughput: sbert.net Pretrained Models table, all-MiniLM-L6-v2, 14,200 "
            "sentences/s on a V100 GPU",
            "fixed cost per batch 1.0 ms: assumed",
            "time linear in padded tokens: assumed",
        ],
        "machine": {"cores_online": 0, "load_avg_1m_start": 0, "load_avg_1m_end": 0},
        "lanes": [{"model": "all-MiniLM-L6-v2", "engine": "gpu", "kind": "cuda", "device": 0,
                   "dtype": "f16", "threads": 0, "status": "ok", "cells": cells}],
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    main()
