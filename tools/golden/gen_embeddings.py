#!/usr/bin/env python3
"""Golden sentence embeddings for the default model (tests and golden data only).

Computes fp32 embeddings of the fixed corpus (tools/golden/corpus.py) with
sentence_transformers.SentenceTransformer on the CPU, exactly as the model folder's modules say
(Transformer -> Pooling -> Normalize for all-MiniLM-L6-v2; no extra normalisation on top), one
text at a time (no padding in the reference). Writes

  <out>/embeddings.f32   little-endian float32 [count, dim], row-major
  <out>/embeddings.json  model name, dim, count, max_seq_length, pooling, library versions,
                         sha256 of the .f32 and of model.safetensors, and per text: category,
                         text, token ids after truncation (from the model's own tokenizer),
                         token count after truncation and the untruncated count.

The corpus is built against the model's own tokenizer and max_seq_length, so the exact-limit
texts sit at that model's limit.

Usage: gen_embeddings.py [--model models/all-MiniLM-L6-v2] [--out tests/golden]
                         [--name embeddings] [--subset all|small] [--threads 1]
  tiny CLS model: gen_embeddings.py --model tests/data/tiny-bert-cls --name tiny_cls --subset small
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import corpus  # noqa: E402


def model_layout(st_model):
    """Pooling mode and whether a Normalize module follows, read from the loaded modules
    (class names, so this works across sentence-transformers versions)."""
    pooling, normalize = None, False
    for m in st_model:
        name = type(m).__name__
        if name == "Pooling":
            mode = getattr(m, "pooling_mode", None)
            pooling = mode if isinstance(mode, str) else m.get_pooling_mode_str()
        elif name == "Normalize":
            normalize = True
    if pooling is None:
        sys.exit("no Pooling module in the model")
    return pooling, normalize


def weights_dtypes(path):
    """Dtypes of the floating-point tensors in the safetensors file, e.g. "F32" or "F16"."""
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = json.loads(f.read(n))
    kinds = sorted({v["dtype"] for k, v in hdr.items() if k != "__metadata__" and v["dtype"][0] in "FB"})
    return "+".join(kinds)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=common.repo_path("models", "all-MiniLM-L6-v2"))
    ap.add_argument("--out", default=common.repo_path("tests", "golden"))
    ap.add_argument("--name", default="embeddings", help="output file stem")
    ap.add_argument("--subset", choices=("all", "small"), default="all",
                    help="small: about 60 texts (corpus.small_subset), for small test models")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (fixed for reproducibility)")
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = SentenceTransformer(args.model, device="cpu", model_kwargs={"dtype": torch.float32})
    model.eval()
    for p in model.parameters():
        assert p.dtype == torch.float32, p.dtype
    tokenizer = model.tokenizer
    # Untruncated counts make the tokenizer warn about sequences over model_max_length; the
    # warning is expected here. (Do not raise model_max_length: sentence-transformers
    # truncates with it.)
    import transformers

    transformers.logging.set_verbosity_error()
    max_len = model.max_seq_length
    pooling, normalize = model_layout(model)

    items = corpus.build(tokenizer, max_len)
    if args.subset == "small":
        items = corpus.small_subset(items)
    cats = [c for c, _ in items]
    texts = [t for _, t in items]
    ids = common.encode_texts(model, texts)
    full = common.full_token_counts(tokenizer, texts)
    counts = [len(r) for r in ids]
    assert all(c == min(f, max_len) for c, f in zip(counts, full))

    emb = model.encode(texts, batch_size=1, convert_to_numpy=True, show_progress_bar=False)
    emb = np.asarray(emb, dtype=np.float32)
    assert emb.shape == (len(texts), (getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension)())
    if normalize:
        norms = np.linalg.norm(emb, axis=1)
        assert np.all(np.abs(norms - 1) < 1e-5), norms
    worst = common.check_against_hf(model, ids, emb, pooling, normalize)

    os.makedirs(args.out, exist_ok=True)
    f32_path = os.path.join(args.out, args.name + ".f32")
    sha = common.write_f32(f32_path, emb)
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    st_path = os.path.join(args.model, "model.safetensors")
    header = {
        "format": 1,
        "generator": "tools/golden/gen_embeddings.py",
        "model": os.path.basename(os.path.normpath(args.model)),
        "model_source": cfg.get("_name_or_path", ""),
        "model_safetensors_sha256": common.sha256_file(st_path) if os.path.exists(st_path) else None,
        "weights_dtype": weights_dtypes(st_path),
        "compute_dtype": "f32 (weights upcast on load)",
        "dim": int(emb.shape[1]),
        "count": len(texts),
        "max_seq_length": int(max_len),
        "pooling": pooling,
        "normalize": normalize,
        "dtype": "f32",
        "f32_file": os.path.basename(f32_path),
        "f32_layout": "little-endian float32 [count, dim], row-major",
        "f32_sha256": sha,
        "reference": "sentence_transformers.SentenceTransformer(model, device='cpu', "
        "model_kwargs={'dtype': torch.float32}), "
        "encode(batch_size=1), no padding; token ids from model.tokenize",
        "hf_recheck_min_cosine": round(worst, 9),
        "subset": args.subset,
        "n_truncated": sum(1 for f in full if f > max_len),
        "versions": common.library_versions(),
    }
    per_item = {
        "categories": cats,
        "sentences": texts,
        "token_counts": counts,
        "token_counts_full": full,
        "token_ids": ids,
    }
    json_path = os.path.join(args.out, args.name + ".json")
    common.write_json(json_path, header, per_item)
    print(
        "wrote %s (%d texts, dim %d, %d truncated, %d at exactly %d; HF recheck min cos %.7f) and %s"
        % (json_path, len(texts), emb.shape[1], header["n_truncated"],
           sum(1 for f in full if f == max_len), max_len, worst, f32_path)
    )


if __name__ == "__main__":
    main()
