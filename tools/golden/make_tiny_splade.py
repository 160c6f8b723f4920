#!/usr/bin/env python3
"""Builds tests/data/tiny-splade (a small random BertForMaskedLM, the shape of SPLADE checkpoints:
config.json architectures BertForMaskedLM, the decoder tied to the word embeddings) and its
goldens tests/golden/splade_tiny.json: transformers' sparse vectors, per text
max over its tokens of log(1 + relu(logits)), as the non-zero {index: value} entries, and the
encoder's last_hidden_state per token (tests and golden data only).

Shape: vocab = the first 3000 lines of all-MiniLM-L6-v2's vocab.txt, hidden 32, 4 heads,
2 layers, intermediate 64, 128 positions; F32 weights under HF's own names (bert.*,
cls.predictions.*; no cls.predictions.decoder.weight: tied) and a tokenizer.json written by
BertTokenizerFast.

Weights: torch's generator with a fixed seed, drawn wider than HF's init, with the decoder's bias
shifted down so that a minority of the vocabulary is non-zero (a sparse answer). The seed is the
first from 3 on whose every pooled logit is at least MARGIN away from 0, so that the set of
non-zero entries cannot flip on float rounding.

Usage: make_tiny_splade.py [--vocab models/all-MiniLM-L6-v2/vocab.txt]
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TEXTS = [
    "what is the capital of france",
    "paris is the capital and largest city of france.",
    "plants use sunlight, water and air to make food.",
    "hello",
    "the piano is a good first instrument for a child, and music lessons help.",
]
MARGIN = 1e-3


def build(out, vocab_src, seed):
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    os.makedirs(out, exist_ok=True)
    with open(vocab_src) as f:
        vocab = f.read().split("\n")[:3000]
    tok = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True,
                            model_max_length=128)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_attention_heads=4,
                     num_hidden_layers=2, intermediate_size=64, max_position_embeddings=128,
                     type_vocab_size=2, architectures=["BertForMaskedLM"])
    torch.manual_seed(seed)
    model = BertForMaskedLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name == "cls.predictions.bias":
                p.copy_(-4 + 0.5 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.4 * torch.randn_like(p))
    return tok, model


def splade(tok, model, texts):
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    mask = enc["attention_mask"].unsqueeze(-1)
    logits = out.logits.masked_fill(mask == 0, -1e9)
    pooled_logit = logits.max(dim=1).values  # [n, vocab]
    values = torch.log1p(torch.relu(out.logits)) * mask
    values = values.max(dim=1).values
    hidden = out.hidden_states[-1]
    n_tok = enc["attention_mask"].sum(dim=1).tolist()
    return pooled_logit, values, [hidden[i, : n_tok[i]].tolist() for i in range(len(texts))], enc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default=common.repo_path("models", "all-MiniLM-L6-v2", "vocab.txt"))
    args = ap.parse_args()
    out = common.repo_path("tests", "data", "tiny-splade")
    for seed in range(3, 50):
        tok, model = build(out, args.vocab, seed)
        pooled_logit, values, hidden, enc = splade(tok, model, TEXTS)
        if float(pooled_logit.abs().min()) >= MARGIN:
            break
    else:
        sys.exit("no seed gives a margin of %g" % MARGIN)
    tok.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    sparse = []
    for row in values:
        nz = torch.nonzero(row).flatten().tolist()
        sparse.append([{"index": i, "value": float(row[i])} for i in nz])
    gold = {"versions": common.library_versions(), "seed": seed, "texts": TEXTS,
            "ids": [enc["input_ids"][i][: len(hidden[i])].tolist() for i in range(len(TEXTS))],
            "sparse": sparse, "hidden": hidden}
    path = common.repo_path("tests", "golden", "splade_tiny.json")
    with open(path, "w") as f:
        json.dump(gold, f)
    print("wrote", path, "seed", seed, "non-zero per text", [len(s) for s in sparse])


if __name__ == "__main__":
    main()
