#!/usr/bin/env python3
"""HF `tokenizers` peer of bench/bench_tokenizer.c: encode_batch with one thread over the single
texts of a golden corpus (tests/data/tokenizer_json/*.golden.json). Prints texts/s.

usage: RAYON_NUM_THREADS=1 python bench/tok_bench.py TOKENIZER.json GOLDEN.json [SECONDS]
"""
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer  # noqa: E402


def main():
    tok = Tokenizer.from_file(sys.argv[1])
    tok.no_truncation()
    tok.no_padding()
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    doc = json.load(open(sys.argv[2], encoding="utf-8"))
    texts = [doc["texts"][c["text"]] for c in doc["cases"]
             if c.get("pair") is None and c["add"] and c.get("trunc") is None]
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        tok.encode_batch(texts)
        done += len(texts)
    s = time.perf_counter() - t0
    print(f"HF tokenizers {sys.argv[1]}: {done} texts in {s:.2f} s: {done / s:.0f} texts/s")


if __name__ == "__main__":
    main()
