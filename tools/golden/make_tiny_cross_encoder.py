#!/usr/bin/env python3
"""Builds tests/data/tiny-cross-encoder (a small random BertForSequenceClassification with one
label, as ms-marco cross-encoders are) and tiny-classifier (the same shape with three labels,
id2label and problem_type multi_label_classification), and their goldens
tests/golden/rerank_tiny.json: transformers' logits on query/document pairs and on single texts
(tests and golden data only).

Shape: vocab = the first 3000 lines of all-MiniLM-L6-v2's vocab.txt (specials and the most
frequent word pieces), hidden 32, 4 heads, 2 layers, intermediate 64, 128 positions, 2 token
types; F32 weights under HF's own names (bert.*, bert.pooler.dense.*, classifier.*) and a
tokenizer.json written by transformers' BertTokenizerFast (its pair template gives the second
segment token type 1).

Weights: torch's generator with a fixed seed, drawn wider than HF's init (std 0.02 makes every
score the same) so that scores differ from pair to pair and the token types matter.

Usage: make_tiny_cross_encoder.py [--vocab models/all-MiniLM-L6-v2/vocab.txt]
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

QUERIES = ["what is the capital of france", "how do plants make food", "best way to learn music"]
DOCS = [
    "paris is the capital and largest city of france.",
    "plants use sunlight, water and air to make food by photosynthesis.",
    "the piano is a good first instrument for a child.",
    "a dog ran across the park after the ball.",
    "music lessons with a teacher help you learn faster than alone.",
    "the city has many old buildings and a river.",
]
SINGLES = ["i love this film", "the food was cold and bad", "it is a house", DOCS[1]]


def build(out, vocab_src, labels, seed):
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    os.makedirs(out, exist_ok=True)
    with open(vocab_src) as f:
        vocab = f.read().split("\n")[:3000]
    tok = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True,
                            model_max_length=128)
    tok.save_pretrained(out)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_attention_heads=4,
                     num_hidden_layers=2, intermediate_size=64, max_position_embeddings=128,
                     type_vocab_size=2, num_labels=len(labels),
                     architectures=["BertForSequenceClassification"])
    if len(labels) > 1:
        cfg.id2label = {i: l for i, l in enumerate(labels)}
        cfg.label2id = {l: i for i, l in enumerate(labels)}
        cfg.problem_type = "multi_label_classification"
    torch.manual_seed(seed)
    model = BertForSequenceClassification(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.4 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    return tok, model


def logits(tok, model, a, b=None):
    enc = tok(a, b, truncation=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits.tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default=common.repo_path("models", "all-MiniLM-L6-v2", "vocab.txt"))
    args = ap.parse_args()
    gold = {"versions": common.library_versions(), "queries": QUERIES, "docs": DOCS,
            "singles": SINGLES}
    tok, ce = build(common.repo_path("tests", "data", "tiny-cross-encoder"), args.vocab, ["score"], 7)
    gold["rerank"] = {q: [x[0] for x in logits(tok, ce, [q] * len(DOCS), DOCS)] for q in QUERIES}
    # token types matter: the same pairs with every type id 0 score differently
    enc = tok([QUERIES[0]] * 2, DOCS[:2], return_tensors="pt", padding=True)
    enc["token_type_ids"].zero_()
    with torch.no_grad():
        gold["rerank_types_zero"] = [x[0] for x in ce(**enc).logits.tolist()]
    labels = ["joy", "anger", "other"]
    tok, cl = build(common.repo_path("tests", "data", "tiny-classifier"), args.vocab, labels, 11)
    gold["labels"] = labels
    gold["classify"] = logits(tok, cl, SINGLES)
    gold["classify_pairs"] = logits(tok, cl, QUERIES, DOCS[:3])
    path = common.repo_path("tests", "golden", "rerank_tiny.json")
    with open(path, "w") as f:
        json.dump(gold, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
