#!/usr/bin/env python3
"""Builds tests/data/tiny-distilbert (and tests/golden/tiny_distilbert.{json,f32}): a small random
DistilBERT (HF DistilBertModel) in sentence-transformers layout, so that CI checks the
DistilBERT path: its own config keys (dim, n_layers, n_heads, hidden_dim, activation), its
tensor names (transformer.layer.N.attention.q_lin, sa_layer_norm, ffn.lin1, ...), the
"distilbert." prefix, no token types.

Shape: dim 32, 4 heads, 2 layers, hidden_dim 64, 64 positions, gelu, BF16 weights (the bf16
checkpoint path), CLS pooling + Normalize. Vocabulary: tiny_family.small_vocab() (BERT's
specials).

Reference: transformers DistilBertModel (fp32) on the golden ids, the first token's last hidden
state, normalized.

Usage: make_tiny_distilbert.py [--out tests/data/tiny-distilbert]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import tiny_family as tf  # noqa: E402

SEED = 6160
DIM, HEADS, LAYERS, INTER, MAX_POS = 32, 4, 2, 64, 64


def scale_of(name):
    if "layer_norm.weight" in name or "LayerNorm.weight" in name:
        return 0.2, 1.0
    if "layer_norm.bias" in name or "LayerNorm.bias" in name:
        return 0.1, 0.0
    if name.endswith("embeddings.weight"):
        return 0.5, 0.0
    if name.endswith(".bias"):
        return 0.05, 0.0
    if "q_lin" in name or "k_lin" in name:
        return 0.3, 0.0
    return 0.12, 0.0


def main():
    import torch
    from transformers import DistilBertConfig, DistilBertModel

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=common.repo_path("tests", "data", "tiny-distilbert"))
    args = ap.parse_args()
    vocab = tf.small_vocab()
    cfg = {
        "architectures": ["DistilBertModel"], "model_type": "distilbert", "vocab_size": len(vocab),
        "dim": DIM, "n_heads": HEADS, "n_layers": LAYERS, "hidden_dim": INTER, "activation": "gelu",
        "max_position_embeddings": MAX_POS, "sinusoidal_pos_embds": False, "pad_token_id": 0,
        "dropout": 0.1, "attention_dropout": 0.1, "torch_dtype": "bfloat16",
    }
    model = DistilBertModel(DistilBertConfig(**{k: v for k, v in cfg.items() if k != "torch_dtype"})).eval()
    shapes = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    w = tf.random_weights(shapes, SEED, scale_of, "BF16")
    model.load_state_dict({k: v.float() for k, v in w.items()}, strict=True)
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]", "tokenizer_class": "DistilBertTokenizer"}
    tf.write_folder(args.out, cfg, vocab, {"distilbert." + k: v for k, v in w.items()}, specials, "cls",
                    MAX_POS,
                    "# tiny-distilbert\n\nRandom weights, test data only. Built by "
                    "`tools/golden/make_tiny_distilbert.py` (seed %d): DistilBERT, dim %d, %d heads, "
                    "%d layers, %d positions, BF16, CLS pooling.\n" % (SEED, DIM, HEADS, LAYERS, MAX_POS))
    texts, ids = tf.golden_ids(vocab, MAX_POS, SEED, "[CLS]", "[SEP]")
    emb = []
    with torch.no_grad():
        for row in ids:
            emb.append(tf.pool(model(input_ids=torch.tensor([row])).last_hidden_state[0], "cls").numpy())
    tf.write_golden("distilbert", args.out, texts, ids, emb, "cls", "BF16",
                    "transformers DistilBertModel fp32 on token_ids, CLS pooling, normalized", MAX_POS)
    print("wrote %s and tests/golden/tiny_distilbert.*" % args.out)


if __name__ == "__main__":
    main()
