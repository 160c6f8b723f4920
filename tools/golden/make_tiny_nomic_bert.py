#!/usr/bin/env python3
"""Builds tests/data/tiny-nomic-bert (and tests/golden/tiny_nomic_bert.{json,f32}): a small random
NomicBERT in sentence-transformers layout, so that CI checks rotary positions (partial: half of
each head), the fused Wqkv, a SwiGLU FFN, absent biases (Wqkv, fc11) beside present ones (fc2,
out_proj, the norms), and NomicBERT's names (emb_ln, encoder.layers.N.attn / mlp / norm1 / norm2).

transformers has no NomicBERT of its own (the checkpoints ship remote code), so the reference
forward is written here, in torch, from the published modelling code's math (nomic-ai's
modeling_hf_nomic_bert.py, post-norm path): x = LN(word + type[0]) (emb_ln); per layer
qkv = Wqkv x split as (three, heads, head_dim); rotary on q and k (NeoX halves: transformers'
rotate_half, inv_freq = 1 / base^(2i / rotary_dim) in float32, positions from 0) over the first
rotary_dim = rotary_emb_fraction * head_dim dims of every head; softmax(q k^T / sqrt(head_dim)) v
(torch scaled_dot_product_attention); x = norm1(x + out_proj(ctx)); x = norm2(x + fc2(fc11(x) *
silu(fc12(x)))). Mean pooling, normalized.

Shape: n_embd 64, 4 heads (head_dim 16, rotary_dim 8), 2 layers, n_inner 96, n_positions 64,
rotary_emb_base 1000, layer_norm_epsilon 1e-12, F16 weights. Vocabulary:
tiny_family.small_vocab() (BERT's specials, as nomic-embed uses bert-base-uncased's).

Usage: make_tiny_nomic_bert.py [--out tests/data/tiny-nomic-bert]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import tiny_family as tf  # noqa: E402

SEED = 7170
HIDDEN, HEADS, LAYERS, INTER, MAX_POS, FRACTION, BASE, EPS = 64, 4, 2, 96, 64, 0.5, 1000.0, 1e-12


def tensor_shapes(vocab_size):
    H, I = HIDDEN, INTER
    shapes = [("embeddings.word_embeddings.weight", (vocab_size, H)),
              ("embeddings.token_type_embeddings.weight", (2, H)),
              ("emb_ln.weight", (H,)), ("emb_ln.bias", (H,))]
    for l in range(LAYERS):
        p = "encoder.layers.%d." % l
        shapes += [(p + "attn.Wqkv.weight", (3 * H, H)), (p + "attn.out_proj.weight", (H, H)),
                   (p + "attn.out_proj.bias", (H,)), (p + "mlp.fc11.weight", (I, H)),
                   (p + "mlp.fc12.weight", (I, H)), (p + "mlp.fc2.weight", (H, I)),
                   (p + "mlp.fc2.bias", (H,)), (p + "norm1.weight", (H,)), (p + "norm1.bias", (H,)),
                   (p + "norm2.weight", (H,)), (p + "norm2.bias", (H,))]
    return shapes


def scale_of(name):
    if name.endswith(("ln.weight", "norm1.weight", "norm2.weight")):
        return 0.2, 1.0
    if name.endswith(("ln.bias", "norm1.bias", "norm2.bias")):
        return 0.1, 0.0
    if "embeddings" in name:
        return 0.5, 0.0
    if name.endswith(".bias"):
        return 0.05, 0.0
    if "Wqkv" in name:
        return 0.25, 0.0
    return 0.12, 0.0


def forward(w, ids, rotary=True):
    import torch
    import torch.nn.functional as F
    from transformers.models.llama.modeling_llama import rotate_half

    H, hd = HIDDEN, HIDDEN // HEADS
    rd = int(FRACTION * hd)
    T = len(ids)
    x = w["embeddings.word_embeddings.weight"][torch.tensor(ids)] + w["embeddings.token_type_embeddings.weight"][0]
    x = F.layer_norm(x, (H,), w["emb_ln.weight"], w["emb_ln.bias"], EPS)
    inv_freq = 1.0 / (BASE ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]  # [T, 1, rd]

    def rope(t):  # t: [T, heads, hd]
        if not rotary:
            return t
        r, rest = t[..., :rd], t[..., rd:]
        return torch.cat([r * cos + rotate_half(r) * sin, rest], dim=-1)

    for l in range(LAYERS):
        p = "encoder.layers.%d." % l
        qkv = (x @ w[p + "attn.Wqkv.weight"].T).view(T, 3, HEADS, hd)
        q, k, v = rope(qkv[:, 0]), rope(qkv[:, 1]), qkv[:, 2]
        ctx = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))
        ctx = ctx.transpose(0, 1).reshape(T, H)
        a = ctx @ w[p + "attn.out_proj.weight"].T + w[p + "attn.out_proj.bias"]
        x = F.layer_norm(x + a, (H,), w[p + "norm1.weight"], w[p + "norm1.bias"], EPS)
        y = (x @ w[p + "mlp.fc11.weight"].T) * F.silu(x @ w[p + "mlp.fc12.weight"].T)
        y = y @ w[p + "mlp.fc2.weight"].T + w[p + "mlp.fc2.bias"]
        x = F.layer_norm(x + y, (H,), w[p + "norm2.weight"], w[p + "norm2.bias"], EPS)
    return x


def main():
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=common.repo_path("tests", "data", "tiny-nomic-bert"))
    args = ap.parse_args()
    vocab = tf.small_vocab()
    cfg = {
        "architectures": ["NomicBertModel"], "model_type": "nomic_bert", "vocab_size": len(vocab),
        "n_embd": HIDDEN, "n_head": HEADS, "n_layer": LAYERS, "n_inner": INTER, "n_positions": MAX_POS,
        "activation_function": "swiglu", "rotary_emb_fraction": FRACTION, "rotary_emb_base": BASE,
        "rotary_emb_interleaved": False, "rotary_scaling_factor": None, "qkv_proj_bias": False,
        "mlp_fc1_bias": False, "mlp_fc2_bias": True, "layer_norm_epsilon": EPS, "prenorm": False,
        "causal": False, "type_vocab_size": 2, "pad_token_id": 0, "torch_dtype": "float16",
    }
    w16 = tf.random_weights(tensor_shapes(len(vocab)), SEED, scale_of, "F16")
    w = {k: v.float() for k, v in w16.items()}
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]", "tokenizer_class": "BertTokenizer"}
    tf.write_folder(args.out, cfg, vocab, w16, specials, "mean", MAX_POS,
                    "# tiny-nomic-bert\n\nRandom weights, test data only. Built by "
                    "`tools/golden/make_tiny_nomic_bert.py` (seed %d): NomicBERT, hidden %d, %d heads, "
                    "%d layers, rotary on half of each head, SwiGLU, F16.\n" % (SEED, HIDDEN, HEADS, LAYERS))
    texts, ids = tf.golden_ids(vocab, MAX_POS, SEED, "[CLS]", "[SEP]")
    emb, worst_norot = [], 1.0
    with torch.no_grad():
        for row in ids:
            v = tf.pool(forward(w, row), "mean")
            emb.append(v.numpy())
            if len(row) > 2:
                u = tf.pool(forward(w, row, rotary=False), "mean")
                worst_norot = min(worst_norot, float(np.dot(u.numpy(), v.numpy())))
    print("without rotary: min cosine %.4f (must be < 0.99)" % worst_norot)
    if worst_norot > 0.99:
        sys.exit("rotary does not show in the outputs")
    tf.write_golden("nomic_bert", args.out, texts, ids, emb, "mean", "F16",
                    "the NomicBERT forward of tools/golden/make_tiny_nomic_bert.py (torch fp32, written "
                    "from the published modelling code's math) on token_ids, mean pooling, normalized",
                    MAX_POS)
    print("wrote %s and tests/golden/tiny_nomic_bert.*" % args.out)


if __name__ == "__main__":
    main()
