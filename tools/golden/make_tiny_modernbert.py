#!/usr/bin/env python3
"""Builds tests/data/tiny-modernbert (and tests/golden/tiny_modernbert.{json,f32}): a small random
ModernBERT (HF ModernBertModel) in sentence-transformers layout, so that CI checks pre-norm
blocks (no attn_norm in layer 0), LayerNorms without bias, the fused Wqkv and Wi (activated half
first), rotary with a global and a local base, local attention (a window of 16: 8 each side)
with a global layer every 3, and the final norm.

Shape: hidden 32, 4 heads, 4 layers (0 and 3 global), intermediate 48, 64 positions, GELU,
norm_eps 1e-5, F16 weights, mean pooling + Normalize. Vocabulary: tiny_family.small_vocab().

Reference: transformers ModernBertModel (fp32, sdpa attention) on the golden ids, last hidden
state mean-pooled and normalized; checked against the same model with every layer global (must
differ on the long sequences).

Usage: make_tiny_modernbert.py [--out tests/data/tiny-modernbert]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import tiny_family as tf  # noqa: E402

SEED = 9190
HIDDEN, HEADS, LAYERS, INTER, MAX_POS, WINDOW, EVERY = 32, 4, 4, 48, 64, 16, 3


def scale_of(name):
    if "norm.weight" in name:
        return 0.2, 1.0
    if "embeddings" in name:
        return 0.5, 0.0
    if "Wqkv" in name:
        return 0.3, 0.0
    return 0.15, 0.0


def main():
    import torch
    from transformers import ModernBertConfig, ModernBertModel

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=common.repo_path("tests", "data", "tiny-modernbert"))
    args = ap.parse_args()
    vocab = tf.small_vocab()
    cfg = {
        "architectures": ["ModernBertModel"], "model_type": "modernbert", "vocab_size": len(vocab),
        "hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
        "intermediate_size": INTER, "hidden_activation": "gelu", "max_position_embeddings": MAX_POS,
        "norm_eps": 1e-5, "norm_bias": False, "attention_bias": False, "mlp_bias": False,
        "global_attn_every_n_layers": EVERY, "local_attention": WINDOW, "global_rope_theta": 160000.0,
        "local_rope_theta": 10000.0, "pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102,
        "cls_token_id": 101, "sep_token_id": 102, "torch_dtype": "float16",
    }

    def build(c):
        m = ModernBertModel(ModernBertConfig(**{k: v for k, v in c.items() if k != "torch_dtype"},
                                             attn_implementation="sdpa")).eval()
        return m

    model = build(cfg)
    shapes = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    w16 = tf.random_weights(shapes, SEED, scale_of, "F16")
    model.load_state_dict({k: v.float() for k, v in w16.items()}, strict=True)
    allglobal = build(dict(cfg, global_attn_every_n_layers=1))
    allglobal.load_state_dict({k: v.float() for k, v in w16.items()}, strict=True)
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]", "tokenizer_class": "BertTokenizer"}
    tf.write_folder(args.out, cfg, vocab, {"model." + k: v for k, v in w16.items()}, specials, "mean",
                    MAX_POS,
                    "# tiny-modernbert\n\nRandom weights, test data only. Built by "
                    "`tools/golden/make_tiny_modernbert.py` (seed %d): ModernBERT, hidden %d, %d heads, "
                    "%d layers, local attention %d with a global layer every %d, F16.\n"
                    % (SEED, HIDDEN, HEADS, LAYERS, WINDOW, EVERY))
    texts, ids = tf.golden_ids(vocab, MAX_POS, SEED, "[CLS]", "[SEP]")
    emb, worst_global = [], 1.0
    with torch.no_grad():
        for row in ids:
            x = torch.tensor([row])
            v = tf.pool(model(input_ids=x).last_hidden_state[0], "mean")
            emb.append(v.numpy())
            if len(row) > WINDOW:
                u = tf.pool(allglobal(input_ids=x).last_hidden_state[0], "mean")
                worst_global = min(worst_global, float(np.dot(u.numpy(), v.numpy())))
    print("with every layer global: min cosine %.4f (must be < 0.999)" % worst_global)
    if worst_global > 0.999:
        sys.exit("the local window does not show in the outputs")
    tf.write_golden("modernbert", args.out, texts, ids, emb, "mean", "F16",
                    "transformers ModernBertModel fp32 (sdpa) on token_ids, mean pooling, normalized",
                    MAX_POS)
    print("wrote %s and tests/golden/tiny_modernbert.*" % args.out)


if __name__ == "__main__":
    main()
