"""Shared helpers for the golden-data scripts (tests and golden data only; not serving code)."""

import hashlib
import json
import os
import platform
import sys

import numpy as np


def repo_root():
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def repo_path(*parts):
    return os.path.join(repo_root(), *parts)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def library_versions():
    import sentence_transformers
    import tokenizers
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "numpy": np.__version__,
    }


def encode_texts(st_model, texts):
    """Token ids exactly as the SentenceTransformer feeds them to its Transformer module
    (its own tokenizer, its max_seq_length truncation), one text at a time so no padding."""
    ids = []
    for t in texts:
        prep = getattr(st_model, "preprocess", None) or st_model.tokenize
        feats = prep([t])
        ids.append([int(x) for x in feats["input_ids"][0].tolist()])
    return ids


def full_token_counts(tokenizer, texts):
    return [len(tokenizer(t, add_special_tokens=True, truncation=False)["input_ids"]) for t in texts]


def write_f32(path, emb):
    emb = np.ascontiguousarray(emb, dtype="<f4")
    with open(path, "wb") as f:
        f.write(emb.tobytes(order="C"))
    return sha256_file(path)


def write_json(path, header, per_item):
    """Writes `header` (a dict) followed by the per-item parallel lists in `per_item` (dict of
    name -> list), each list element on its own line, so diffs of regenerated files stay
    readable. UTF-8 without escaping non-ASCII (control characters are escaped by json)."""
    lines = ["{"]
    entries = []
    for k, v in header.items():
        entries.append("  %s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False)))
    for k, lst in per_item.items():
        body = ",\n".join("    " + json.dumps(x, ensure_ascii=False, separators=(",", ":")) for x in lst)
        entries.append("  %s: [\n%s\n  ]" % (json.dumps(k), body))
    lines.append(",\n".join(entries))
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # must round-trip
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def check_against_hf(st_model, ids, emb, pooling, normalize, min_cos=0.99999):
    """Independent recomputation with the bare HF model from the stored ids: proves the stored
    ids are what the sentence-transformer used and that pooling/normalisation are as declared."""
    import torch

    hf = st_model[0].auto_model
    worst = 1.0
    with torch.no_grad():
        for i, row in enumerate(ids):
            x = torch.tensor([row], dtype=torch.long)
            h = hf(input_ids=x, attention_mask=torch.ones_like(x), token_type_ids=torch.zeros_like(x))
            h = h.last_hidden_state[0].float()
            v = h[0] if pooling == "cls" else h.mean(dim=0)
            if normalize:
                v = torch.nn.functional.normalize(v, dim=0)
            v = v.numpy()
            c = float(np.dot(v, emb[i]) / (np.linalg.norm(v) * np.linalg.norm(emb[i])))
            worst = min(worst, c)
    if worst < min_cos:
        sys.exit("independent HF recomputation disagrees: worst cosine %.7f" % worst)
    return worst


def random_f16_weights(names_shapes, seed, scale_of):
    """name -> float16 array of offset + scale * N(0, 1), (scale, offset) = scale_of(name), drawn
    from one seeded PCG64 stream in names_shapes order (so the same inputs give the same bytes).
    Shared by the tiny test-model generators."""
    rng = np.random.Generator(np.random.PCG64(seed))
    out = {}
    for name, shape in names_shapes:
        scale, offset = scale_of(name)
        a = scale * rng.standard_normal(shape)
        if offset:
            a = offset + a
        out[name] = a.astype(np.float16)
    return out
