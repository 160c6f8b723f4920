#!/usr/bin/env python3
"""Model folders for the GPU benchmark.

  gen_model.py convert --src DIR --out DIR
      Copies a sentence-transformers BERT folder with its model.safetensors converted to fp16
      (all-MiniLM-L6-v2: ~45 MB, small enough to travel to the GPU machine).
  gen_model.py random --vocab-from DIR --out DIR [--layers 12 --hidden 768 --heads 12
                      --intermediate 3072 --max-positions 512 --seed 0]
      Writes a BERT-shaped model with random fp16 weights (std 0.02, LayerNorm gamma 1), the
      config files hetserve and transformers read, and the vocabulary of --vocab-from.

Uses numpy or torch when present, else pure Python (fine for small shapes and for the fp16
conversion; slow for a random BERT-base).
"""
import argparse
import json
import os
import random
import shutil
import struct
import sys
from array import array

CONFIG_FILES = ["config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                "sentence_bert_config.json", "modules.json", "config_sentence_transformers.json"]


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return header, data


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, off = {}, 0
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, raw in tensors:
            f.write(raw)
    os.replace(tmp, path)


def f32_to_f16_bytes(raw):
    try:
        import numpy as np
        return np.frombuffer(raw, dtype="<f4").astype("<f2").tobytes()
    except ImportError:
        pass
    src = array("f")
    src.frombytes(raw)
    if sys.byteorder != "little":
        src.byteswap()
    out = bytearray()
    step = 1 << 20
    for i in range(0, len(src), step):
        chunk = src[i:i + step]
        out += struct.pack("<%de" % len(chunk), *chunk)
    return bytes(out)


def copy_configs(src, out):
    os.makedirs(out, exist_ok=True)
    for name in CONFIG_FILES:
        p = os.path.join(src, name)
        if os.path.isfile(p):
            shutil.copy(p, os.path.join(out, name))
    pool = os.path.join(src, "1_Pooling")
    if os.path.isdir(pool):
        shutil.copytree(pool, os.path.join(out, "1_Pooling"), dirs_exist_ok=True)


def cmd_convert(a):
    header, data = read_safetensors(os.path.join(a.src, "model.safetensors"))
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[b:e]
        dt = info["dtype"]
        if dt == "F32":
            raw, dt = f32_to_f16_bytes(raw), "F16"
        tensors.append((name, dt, info["shape"], raw))
    copy_configs(a.src, a.out)
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    print("convert: %d tensors -> %s (%.1f MB)" % (len(tensors), a.out,
          os.path.getsize(os.path.join(a.out, "model.safetensors")) / 1e6))


class Rand:
    def __init__(self, seed):
        self.seed = seed
        try:
            import torch
            self.torch = torch
            self.gen = torch.Generator().manual_seed(seed)
        except ImportError:
            self.torch = None
            self.rng = random.Random(seed)

    def normal(self, n, std):
        if self.torch is not None:
            t = self.torch.randn(n, generator=self.gen) * std
            return t.to(self.torch.float16).numpy().tobytes()
        vals = [self.rng.gauss(0.0, std) for _ in range(n)]
        return struct.pack("<%de" % n, *vals)

    @staticmethod
    def const(n, v):
        return struct.pack("<e", v) * n


def cmd_random(a):
    H, L, I, P = a.hidden, a.layers, a.intermediate, a.max_positions
    with open(os.path.join(a.vocab_from, "vocab.txt"), encoding="utf-8") as f:
        V = sum(1 for _ in f)
    r = Rand(a.seed)
    std = 0.02
    t = []

    def lin(prefix, out_dim, in_dim):
        t.append((prefix + ".weight", "F16", [out_dim, in_dim], r.normal(out_dim * in_dim, std)))
        t.append((prefix + ".bias", "F16", [out_dim], r.normal(out_dim, std)))

    def ln(prefix):
        t.append((prefix + ".weight", "F16", [H], r.const(H, 1.0)))
        t.append((prefix + ".bias", "F16", [H], r.const(H, 0.0)))

    t.append(("embeddings.word_embeddings.weight", "F16", [V, H], r.normal(V * H, std)))
    t.append(("embeddings.position_embeddings.weight", "F16", [P, H], r.normal(P * H, std)))
    t.append(("embeddings.token_type_embeddings.weight", "F16", [2, H], r.normal(2 * H, std)))
    ln("embeddings.LayerNorm")
    for i in range(L):
        p = "encoder.layer.%d." % i
        lin(p + "attention.self.query", H, H)
        lin(p + "attention.self.key", H, H)
        lin(p + "attention.self.value", H, H)
        lin(p + "attention.output.dense", H, H)
        ln(p + "attention.output.LayerNorm")
        lin(p + "intermediate.dense", I, H)
        lin(p + "output.dense", H, I)
        ln(p + "output.LayerNorm")
    lin("pooler.dense", H, H)
    copy_configs(a.vocab_from, a.out)
    cfg = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": H,
           "num_hidden_layers": L, "num_attention_heads": a.heads, "intermediate_size": I,
           "hidden_act": "gelu", "max_position_embeddings": P, "type_vocab_size": 2,
           "vocab_size": V, "layer_norm_eps": 1e-12, "pad_token_id": 0,
           "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
           "initializer_range": std, "torch_dtype": "float16"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    os.makedirs(os.path.join(a.out, "1_Pooling"), exist_ok=True)
    with open(os.path.join(a.out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": H, "pooling_mode_cls_token": False,
                   "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                   "pooling_mode_mean_sqrt_len_tokens": False}, f, indent=1)
    write_safetensors(os.path.join(a.out, "model.safetensors"), t)
    print("random: %d layers x %d (ffn %d), %d tensors -> %s" % (L, H, I, len(t), a.out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--src", required=True)
    c.add_argument("--out", required=True)
    r = sub.add_parser("random")
    r.add_argument("--vocab-from", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--layers", type=int, default=12)
    r.add_argument("--hidden", type=int, default=768)
    r.add_argument("--heads", type=int, default=12)
    r.add_argument("--intermediate", type=int, default=3072)
    r.add_argument("--max-positions", type=int, default=512)
    r.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cmd_convert(a) if a.cmd == "convert" else cmd_random(a)


if __name__ == "__main__":
    main()
