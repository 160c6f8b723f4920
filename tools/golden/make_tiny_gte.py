#!/usr/bin/env python3
"""Builds tests/data/tiny-gte (and tests/golden/tiny_gte.{json,f32}): a small random Alibaba GTE
v1.5 model (config model_type "new", NewModel) in sentence-transformers layout, so that CI checks
rotary positions with fixed NTK scaling, the fused qkv_proj (with bias) and up_gate_proj (up then
gate, GELU on the gate), no token-type table (type_vocab_size 0) and the "new." prefix.

transformers has no NewModel of its own (the checkpoints ship remote code), so the reference
forward is written here, in torch, from the published modelling code's math (Alibaba-NLP's
new-impl modeling.py, also TEI's gte.rs): x = LN(word) (embeddings.LayerNorm); per layer
qkv = qkv_proj x viewed as (three, heads, head_dim); rotary on q and k over the whole head
(NeoX halves, transformers' rotate_half; NTK: inv_freq = 1 / (theta * factor)^(2i / d) /
factor^(2 / d), positions from 0); softmax(q k^T / sqrt(head_dim)) v; x = attn_ln(x + o_proj);
up, gate = up_gate_proj x split in halves; x = mlp_ln(x + down_proj(gelu(gate) * up)). CLS
pooling, normalized.

Shape: hidden 32, 4 heads (head_dim 8), 2 layers, intermediate 48, 64 positions, rope_theta
10000 with ntk factor 2, layer_norm_eps 1e-12, F16 weights. Vocabulary: tiny_family.small_vocab().

Usage: make_tiny_gte.py [--out tests/data/tiny-gte]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import tiny_family as tf  # noqa: E402

SEED = 8180
HIDDEN, HEADS, LAYERS, INTER, MAX_POS, THETA, FACTOR, EPS = 32, 4, 2, 48, 64, 10000.0, 2.0, 1e-12


def tensor_shapes(vocab_size):
    H, I = HIDDEN, INTER
    shapes = [("embeddings.word_embeddings.weight", (vocab_size, H)),
              ("embeddings.LayerNorm.weight", (H,)), ("embeddings.LayerNorm.bias", (H,))]
    for l in range(LAYERS):
        p = "encoder.layer.%d." % l
        shapes += [(p + "attention.qkv_proj.weight", (3 * H, H)), (p + "attention.qkv_proj.bias", (3 * H,)),
                   (p + "attention.o_proj.weight", (H, H)), (p + "attention.o_proj.bias", (H,)),
                   (p + "attn_ln.weight", (H,)), (p + "attn_ln.bias", (H,)),
                   (p + "mlp.up_gate_proj.weight", (2 * I, H)), (p + "mlp.down_proj.weight", (H, I)),
                   (p + "mlp.down_proj.bias", (H,)), (p + "mlp_ln.weight", (H,)), (p + "mlp_ln.bias", (H,))]
    return shapes


def scale_of(name):
    if name.endswith(("LayerNorm.weight", "ln.weight")):
        return 0.2, 1.0
    if name.endswith(("LayerNorm.bias", "ln.bias")):
        return 0.1, 0.0
    if "embeddings" in name:
        return 0.5, 0.0
    if name.endswith(".bias"):
        return 0.05, 0.0
    if "qkv_proj" in name:
        return 0.3, 0.0
    return 0.15, 0.0


def forward(w, ids, rotary=True):
    import torch
    import torch.nn.functional as F
    from transformers.models.llama.modeling_llama import rotate_half

    H, hd, I = HIDDEN, HIDDEN // HEADS, INTER
    T = len(ids)
    x = F.layer_norm(w["embeddings.word_embeddings.weight"][torch.tensor(ids)], (H,),
                     w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], EPS)
    inv_freq = 1.0 / ((THETA * FACTOR) ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    inv_freq = inv_freq / FACTOR ** (2 / hd)
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rope(t):
        return t * cos + rotate_half(t) * sin if rotary else t

    for l in range(LAYERS):
        p = "encoder.layer.%d." % l
        qkv = (x @ w[p + "attention.qkv_proj.weight"].T + w[p + "attention.qkv_proj.bias"]).view(T, 3, HEADS, hd)
        q, k, v = rope(qkv[:, 0]), rope(qkv[:, 1]), qkv[:, 2]
        ctx = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))
        a = ctx.transpose(0, 1).reshape(T, H) @ w[p + "attention.o_proj.weight"].T + w[p + "attention.o_proj.bias"]
        x = F.layer_norm(x + a, (H,), w[p + "attn_ln.weight"], w[p + "attn_ln.bias"], EPS)
        ug = x @ w[p + "mlp.up_gate_proj.weight"].T
        y = F.gelu(ug[:, I:]) * ug[:, :I]
        y = y @ w[p + "mlp.down_proj.weight"].T + w[p + "mlp.down_proj.bias"]
        x = F.layer_norm(x + y, (H,), w[p + "mlp_ln.weight"], w[p + "mlp_ln.bias"], EPS)
    return x


def main():
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=common.repo_path("tests", "data", "tiny-gte"))
    args = ap.parse_args()
    vocab = tf.small_vocab()
    cfg = {
        "architectures": ["NewModel"], "model_type": "new", "vocab_size": len(vocab),
        "hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
        "intermediate_size": INTER, "hidden_act": "gelu", "max_position_embeddings": MAX_POS,
        "type_vocab_size": 0, "layer_norm_eps": EPS, "layer_norm_type": "layer_norm",
        "position_embedding_type": "rope", "rope_theta": THETA,
        "rope_scaling": {"type": "ntk", "factor": FACTOR}, "logn_attention_scale": False,
        "logn_attention_clip1": False, "pad_token_id": 0, "torch_dtype": "float16",
    }
    w16 = tf.random_weights(tensor_shapes(len(vocab)), SEED, scale_of, "F16")
    w = {k: v.float() for k, v in w16.items()}
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]", "tokenizer_class": "BertTokenizer"}
    tf.write_folder(args.out, cfg, vocab, {"new." + k: v for k, v in w16.items()}, specials, "cls", MAX_POS,
                    "# tiny-gte\n\nRandom weights, test data only. Built by `tools/golden/make_tiny_gte.py` "
                    "(seed %d): GTE v1.5 (model_type new), hidden %d, %d heads, %d layers, rotary with NTK "
                    "factor %g, gated GELU FFN, F16, CLS pooling.\n" % (SEED, HIDDEN, HEADS, LAYERS, FACTOR))
    texts, ids = tf.golden_ids(vocab, MAX_POS, SEED, "[CLS]", "[SEP]")
    emb, worst_norot = [], 1.0
    with torch.no_grad():
        for row in ids:
            v = tf.pool(forward(w, row), "cls")
            emb.append(v.numpy())
            if len(row) > 2:
                u = tf.pool(forward(w, row, rotary=False), "cls")
                worst_norot = min(worst_norot, float(np.dot(u.numpy(), v.numpy())))
    print("without rotary: min cosine %.4f (must be < 0.99)" % worst_norot)
    if worst_norot > 0.99:
        sys.exit("rotary does not show in the outputs")
    tf.write_golden("gte", args.out, texts, ids, emb, "cls", "F16",
                    "the NewModel forward of tools/golden/make_tiny_gte.py (torch fp32, written from the "
                    "published modelling code's math) on token_ids, CLS pooling, normalized", MAX_POS)
    print("wrote %s and tests/golden/tiny_gte.*" % args.out)


if __name__ == "__main__":
    main()
