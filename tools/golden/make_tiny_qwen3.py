#!/usr/bin/env python3
"""Builds tests/data/tiny-qwen3 (and tests/golden/tiny_qwen3.{json,f32}): a small random Qwen3
(HF Qwen3Model, the Qwen3-Embedding architecture) in sentence-transformers layout, so that CI
checks causal attention, grouped-query heads (4 query heads on 2 key / value heads) of another
width than hidden / heads (head_dim 16 on a hidden size of 32), RMSNorm pre-norm blocks, qk-norm,
rotary positions, SwiGLU, the final norm, no embedding norm and last-token pooling.

Shape: hidden 32, 4 heads, 2 kv heads, head_dim 16, 2 layers, intermediate 48, 64 positions,
rope_theta 10000, rms_norm_eps 1e-6, BF16 weights, last-token pooling + Normalize. Vocabulary:
tiny_family.small_vocab() (a WordPiece vocabulary, not Qwen's BPE: the goldens carry token ids).

Reference: transformers Qwen3Model (fp32, sdpa) on the golden ids, the last token's last hidden
state, normalized; checked against the same ids with the first token changed (a causal model's
last token sees it, so that must differ) and the last token's state after a longer input (must
not change the earlier positions' states: causality).

Usage: make_tiny_qwen3.py [--out tests/data/tiny-qwen3]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import tiny_family as tf  # noqa: E402

SEED = 1020
HIDDEN, HEADS, KV, HD, LAYERS, INTER, MAX_POS = 32, 4, 2, 16, 2, 48, 64


def scale_of(name):
    if "norm.weight" in name:
        return 0.2, 1.0
    if "embed_tokens" in name:
        return 0.5, 0.0
    if "q_proj" in name or "k_proj" in name:
        return 0.3, 0.0
    return 0.15, 0.0


def main():
    import torch
    from transformers import Qwen3Config, Qwen3Model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=common.repo_path("tests", "data", "tiny-qwen3"))
    args = ap.parse_args()
    vocab = tf.small_vocab()
    cfg = {
        "architectures": ["Qwen3Model"], "model_type": "qwen3", "vocab_size": len(vocab),
        "hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
        "num_hidden_layers": LAYERS, "intermediate_size": INTER, "hidden_act": "silu",
        "max_position_embeddings": MAX_POS, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "rope_scaling": None, "attention_bias": False, "use_sliding_window": False,
        "tie_word_embeddings": False, "bos_token_id": 101, "eos_token_id": 102, "torch_dtype": "bfloat16",
    }
    model = Qwen3Model(Qwen3Config(**{k: v for k, v in cfg.items() if k != "torch_dtype"},
                                   attn_implementation="sdpa")).eval()
    shapes = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    w = tf.random_weights(shapes, SEED, scale_of, "BF16")
    model.load_state_dict({k: v.float() for k, v in w.items()}, strict=True)
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]", "tokenizer_class": "BertTokenizer"}
    tf.write_folder(args.out, cfg, vocab, {"model." + k: v for k, v in w.items()}, specials, "lasttoken",
                    MAX_POS,
                    "# tiny-qwen3\n\nRandom weights, test data only. Built by `tools/golden/make_tiny_qwen3.py` "
                    "(seed %d): Qwen3, hidden %d, %d heads on %d kv heads of %d, %d layers, BF16, last-token "
                    "pooling.\n" % (SEED, HIDDEN, HEADS, KV, HD, LAYERS))
    texts, ids = tf.golden_ids(vocab, MAX_POS, SEED, "[CLS]", "[SEP]")
    emb = []
    with torch.no_grad():
        for row in ids:
            h = model(input_ids=torch.tensor([row])).last_hidden_state[0]
            emb.append(tf.pool(h, "lasttoken").numpy())
            if len(row) > 3:  # causality: a prefix's states do not depend on what follows
                hp = model(input_ids=torch.tensor([row[:-1]])).last_hidden_state[0]
                if not torch.allclose(hp, h[:-1], atol=1e-5):
                    sys.exit("the reference is not causal")
                alt = [row[1] if row[0] != row[1] else row[0] + 1] + row[1:]
                ha = model(input_ids=torch.tensor([alt])).last_hidden_state[0]
                if torch.allclose(ha[-1], h[-1], atol=1e-4):
                    sys.exit("the last token does not see the first")
    tf.write_golden("qwen3", args.out, texts, ids, emb, "lasttoken", "BF16",
                    "transformers Qwen3Model fp32 (sdpa) on token_ids, last-token pooling, normalized",
                    MAX_POS)
    print("wrote %s and tests/golden/tiny_qwen3.*" % args.out)


if __name__ == "__main__":
    main()
