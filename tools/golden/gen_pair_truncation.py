#!/usr/bin/env python3
"""Goldens for pairs cut at the left: tests/golden/pair_left_tiny.json (tests and golden data
only). The committed tiny cross-encoder (tests/data/tiny-cross-encoder, made by
make_tiny_cross_encoder.py) with HF's tokenizer at truncation_side="left" and "right",
truncation=True (longest_first) to the model's 128 tokens, on pairs longer than that: one long
query with a short document, a short query with a long document, and both long (both cut). For
each: the token ids kept and transformers' logit, each way.

Usage: gen_pair_truncation.py
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

WORDS = ("the city has many old buildings and a river that runs through its center while "
         "people walk along the water to see boats music and food in the evening light").split()


def text(n, shift):
    return " ".join(WORDS[(i * 7 + shift) % len(WORDS)] for i in range(n))


PAIRS = [
    [text(150, 1), "paris is the capital of france."],
    ["what is the capital of france", text(170, 2)],
    [text(90, 3), text(100, 4)],
    [text(40, 5), text(120, 6)],
]


def main():
    from transformers import AutoTokenizer, BertForSequenceClassification

    d = common.repo_path("tests", "data", "tiny-cross-encoder")
    model = BertForSequenceClassification.from_pretrained(d).eval()
    gold = {"versions": common.library_versions(), "pairs": PAIRS}
    for side in ("left", "right"):
        tok = AutoTokenizer.from_pretrained(d, truncation_side=side)
        enc = tok([p[0] for p in PAIRS], [p[1] for p in PAIRS], truncation=True, max_length=128,
                  padding=True, return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc).logits[:, 0].tolist()
        n = enc["attention_mask"].sum(dim=1).tolist()
        gold[side] = {"ids": [enc["input_ids"][i][: n[i]].tolist() for i in range(len(PAIRS))],
                      "logits": logits}
    full = [len(tok(a, b)["input_ids"]) for a, b in PAIRS]
    assert all(f > 128 for f in full), full
    gold["full_tokens"] = full
    path = common.repo_path("tests", "golden", "pair_left_tiny.json")
    with open(path, "w") as f:
        json.dump(gold, f, indent=1)
    print("wrote", path, "full lengths", full)


if __name__ == "__main__":
    main()
