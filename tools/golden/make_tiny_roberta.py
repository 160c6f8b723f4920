#!/usr/bin/env python3
"""Builds tests/data/tiny-roberta (and tests/golden/tiny_roberta.{json,f32}): a small random
RoBERTa (HF RobertaModel; XLM-R and CamemBERT are the same model) in sentence-transformers
layout, so that CI checks the RoBERTa path: positions counted from pad_token_id + 1 = 2, a
token-type table of one row, the "roberta." prefix.

Shape: hidden 32, 4 heads, 2 layers, intermediate 64, 66 positions (64 usable), gelu,
layer_norm_eps 1e-5, F16 weights, mean pooling + Normalize. Vocabulary: tiny_family.small_vocab()
with RoBERTa's special ids (<s> 0, <pad> 1, </s> 2, <unk> 3, <mask> last) - a WordPiece
vocabulary, not RoBERTa's BPE: the goldens carry token ids.

Reference: transformers RobertaModel (fp32) on the golden ids, last hidden state mean-pooled and
normalized; checked against the same model with the position offset removed (must differ).

Usage: make_tiny_roberta.py [--out tests/data/tiny-roberta]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import tiny_family as tf  # noqa: E402

SEED = 5150
HIDDEN, HEADS, LAYERS, INTER, MAX_POS = 32, 4, 2, 64, 66


def scale_of(name):
    if "LayerNorm.weight" in name:
        return 0.2, 1.0
    if "LayerNorm.bias" in name:
        return 0.1, 0.0
    if name.endswith("word_embeddings.weight"):
        return 0.5, 0.0
    if name.endswith("embeddings.weight"):
        return 0.5, 0.0
    if name.endswith(".bias"):
        return 0.05, 0.0
    if ".query." in name or ".key." in name:
        return 0.3, 0.0
    return 0.12, 0.0


def main():
    import torch
    from transformers import RobertaConfig, RobertaModel

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=common.repo_path("tests", "data", "tiny-roberta"))
    args = ap.parse_args()
    vocab = tf.small_vocab(["<s>", "<pad>", "</s>", "<unk>"], ["<mask>"])
    cfg = {
        "architectures": ["RobertaModel"], "model_type": "roberta", "vocab_size": len(vocab),
        "hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
        "intermediate_size": INTER, "hidden_act": "gelu", "max_position_embeddings": MAX_POS,
        "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1, "bos_token_id": 0,
        "eos_token_id": 2, "position_embedding_type": "absolute", "torch_dtype": "float16",
    }
    model = RobertaModel(RobertaConfig(**{k: v for k, v in cfg.items() if k != "torch_dtype"}),
                         add_pooling_layer=False).eval()
    shapes = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    w16 = tf.random_weights(shapes, SEED, scale_of, "F16")
    model.load_state_dict({k: v.float() for k, v in w16.items()}, strict=True)
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "[UNK]", "sep_token": "</s>",
                "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
    max_seq = MAX_POS - 2
    tf.write_folder(args.out, cfg, vocab, {"roberta." + k: v for k, v in w16.items()}, specials,
                    "mean", max_seq,
                    "# tiny-roberta\n\nRandom weights, test data only. Built by "
                    "`tools/golden/make_tiny_roberta.py` (seed %d): RoBERTa, hidden %d, %d heads, %d "
                    "layers, %d positions (%d usable), F16, WordPiece vocabulary with RoBERTa's "
                    "special ids.\n" % (SEED, HIDDEN, HEADS, LAYERS, MAX_POS, max_seq))
    texts, ids = tf.golden_ids(vocab, max_seq, SEED, "<s>", "</s>", avoid={1})
    emb, worst_shift = [], 1.0
    with torch.no_grad():
        for row in ids:
            x = torch.tensor([row])
            v = tf.pool(model(input_ids=x).last_hidden_state[0], "mean")
            emb.append(v.numpy())
            pos = torch.arange(len(row))[None]  # BERT's positions: what a missing offset gives
            u = tf.pool(model(input_ids=x, position_ids=pos).last_hidden_state[0], "mean")
            worst_shift = min(worst_shift, float(np.dot(u.numpy(), v.numpy())))
    print("without the position offset: min cosine %.4f (must be < 0.99)" % worst_shift)
    if worst_shift > 0.99:
        sys.exit("the offset does not show in the outputs")
    tf.write_golden("roberta", args.out, texts, ids, emb, "mean", "F16",
                    "transformers RobertaModel fp32 on token_ids, mean pooling, normalized", max_seq)
    print("wrote %s and tests/golden/tiny_roberta.*" % args.out)


if __name__ == "__main__":
    main()
