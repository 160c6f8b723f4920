"""Shared by the make_tiny_<family>.py scripts (tests and golden data only): a small WordPiece
vocabulary cut from tests/data/tiny-bert-cls/vocab.txt, the folder layout (config.json,
model.safetensors, vocab.txt, tokenizer / pooling / modules files), golden token ids and the
golden file pair tests/golden/tiny_<family>.{json,f32} in the format model/verify.h reads.

The tokenizer files are a WordPiece vocabulary for every family (the family's own BPE /
SentencePiece tokenizer is not what these folders test): the goldens carry token ids, fed to the
reference and to hetserve alike, so the numbers check the model, not a tokenizer.
"""

import json
import os
import shutil

import numpy as np

import common

# sentences tokenized with the folder's vocab for the golden ids, plus random id runs up to the
# position limit (so long sequences, and every position, are covered)
SENTENCES = [
    "hello",
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "There were two of them, and they had been in the city for three years.",
    "what is the time in new york now?",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "one two three four five six seven eight nine ten",
]


def small_vocab(specials_front=None, specials_back=None):
    """The first 3000 lines of BERT uncased (specials, characters, ~1000 common words) and its
    single-character ## pieces, optionally re-laid-out with other specials (RoBERTa's <s> <pad>
    </s> <unk> in front, <mask> at the end)."""
    with open(common.repo_path("tests", "data", "tiny-bert-cls", "vocab.txt"), encoding="utf-8") as f:
        bert = f.read().splitlines()
    words = bert[:3000] + [w for w in bert[3000:] if w.startswith("##") and len(w) == 3]
    return (specials_front or []) + words + (specials_back or [])


def golden_ids(vocab, max_tokens, seed, cls, sep, avoid=()):
    """Token ids of SENTENCES through HF's BertTokenizer on `vocab` ([cls] .. [sep]), then random
    runs of lengths 1, 2, 17, 64 and max_tokens over ids that are not specials."""
    import tempfile

    from transformers import BertTokenizer

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "vocab.txt")
        with open(p, "w", encoding="utf-8") as f:
            f.write("\n".join(vocab) + "\n")
        tok = BertTokenizer(p, do_lower_case=True, cls_token=cls, sep_token=sep, unk_token="[UNK]",
                            pad_token=vocab[0], mask_token=vocab[-1])
        ids = [tok(s)["input_ids"][:max_tokens] for s in SENTENCES]
    rng = np.random.Generator(np.random.PCG64(seed))
    lo = vocab.index("!")
    pool = [i for i in range(lo, len(vocab) - 1) if i not in avoid]
    texts = list(SENTENCES)
    for n in (1, 2, 17, 64, max_tokens):
        ids.append([int(x) for x in rng.choice(pool, size=n)])
        texts.append("(random ids, %d tokens)" % n)
    return texts, ids


def random_weights(names_shapes, seed, scale_of, dtype):
    """name -> array of offset + scale * N(0, 1) in `dtype` ("F32", "F16" or "BF16"; BF16 as
    torch tensors since numpy has no bfloat16)."""
    import torch

    rng = np.random.Generator(np.random.PCG64(seed))
    out = {}
    for name, shape in names_shapes:
        scale, offset = scale_of(name)
        a = offset + scale * rng.standard_normal(shape)
        t = torch.from_numpy(a.astype(np.float32))
        out[name] = t.to({"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype])
    return out


def write_folder(out, cfg, vocab, weights, specials, pooling, max_seq, readme):
    """A sentence-transformers folder: pooling `pooling` ("mean", "cls", "lasttoken") then
    Normalize."""
    from safetensors.torch import save_file

    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "1_Pooling"))

    def dump(rel, obj):
        with open(os.path.join(out, rel), "w", encoding="utf-8", newline="\n") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")

    dump("config.json", cfg)
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(vocab) + "\n")
    dump("tokenizer_config.json", dict(specials, do_lower_case=True, tokenize_chinese_chars=True,
                                       strip_accents=None, model_max_length=max_seq))
    dump("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    hidden = cfg.get("hidden_size", cfg.get("dim", cfg.get("n_embd")))
    dump(os.path.join("1_Pooling", "config.json"), {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_lasttoken": pooling == "lasttoken",
    })
    dump("sentence_bert_config.json", {"max_seq_length": max_seq, "do_lower_case": False})
    save_file({k: v.contiguous() for k, v in weights.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(readme)


def pool(h, pooling):
    """h: [T, H] float32 torch tensor of one sequence -> the normalized pooled vector."""
    import torch

    v = h[0] if pooling == "cls" else (h[-1] if pooling == "lasttoken" else h.mean(0))
    return torch.nn.functional.normalize(v.double(), dim=0).float()


def write_golden(name, folder, texts, ids, emb, pooling, weights_dtype, reference, max_seq):
    emb = np.asarray(emb, dtype=np.float32)
    f32 = common.repo_path("tests", "golden", "tiny_%s.f32" % name)
    sha = common.write_f32(f32, emb)
    header = {
        "format": 1,
        "generator": "tools/golden/make_tiny_%s.py" % name,
        "model": os.path.basename(folder),
        "model_safetensors_sha256": common.sha256_file(os.path.join(folder, "model.safetensors")),
        "weights_dtype": weights_dtype,
        "compute_dtype": "f32 (weights upcast)",
        "dim": int(emb.shape[1]),
        "count": int(emb.shape[0]),
        "max_seq_length": max_seq,
        "pooling": pooling,
        "normalize": True,
        "dtype": "f32",
        "f32_file": os.path.basename(f32),
        "f32_layout": "little-endian float32 [count, dim], row-major",
        "f32_sha256": sha,
        "reference": reference,
        "versions": common.library_versions(),
    }
    common.write_json(common.repo_path("tests", "golden", "tiny_%s.json" % name), header,
                      {"sentences": texts, "token_ids": ids})
