#!/usr/bin/env python3
"""Builds tests/data/tiny-bert-cls: a small random BERT in sentence-transformers layout
(tests and golden data only).

It exercises what all-MiniLM-L6-v2 does not: CLS pooling, 12 layers, F16 weights in the
safetensors file. Shape: vocab = MiniLM's vocab.txt (copied), hidden 32, 4 heads, 12 layers,
intermediate 64, max_position_embeddings 128, type_vocab 2, gelu, max_seq_length 128.

Weights come from numpy's PCG64 generator with a fixed seed (stable across numpy versions),
drawn with scales chosen so that attention is far from uniform, token rows do not collapse
into one vector over the 12 layers, and every LayerNorm weight and bias differs from 1 / 0 (a
swapped or ignored tensor changes the output). They are rounded to
float16 and stored as F16 under the plain HF BertModel names (no "bert." prefix; LayerNorm as
.weight / .bias), pooler included as in MiniLM.

After writing, the folder is loaded back with sentence-transformers in fp32 to check that the
weights are the F16 values exactly, that the pooling really is the CLS token (equal to the CLS
row of the HF model, different from the mean), and that the Normalize module is there.

Golden embeddings for it: tools/golden/gen_embeddings.py --model tests/data/tiny-bert-cls
--name tiny_cls --subset small

Usage: make_tiny_bert.py [--vocab models/all-MiniLM-L6-v2/vocab.txt] [--out tests/data/tiny-bert-cls]
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SEED = 1234
HIDDEN, HEADS, LAYERS, INTER, MAX_POS, TYPES = 32, 4, 12, 64, 128, 2


def bert_config(vocab_size):
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "intermediate_size": INTER,
        "hidden_act": "gelu",
        "max_position_embeddings": MAX_POS,
        "type_vocab_size": TYPES,
        "layer_norm_eps": 1e-12,
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "initializer_range": 0.02,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": "float16",
    }


def weight_scale(name):
    """(scale, offset) of each tensor's normal draw, picked so that after 12 post-LN layers the
    token rows are still distinct (no rank collapse: CLS and mean pooling differ, cosine about
    0.5-0.8) and attention is clearly non-uniform (normalised entropy about 0.5). With one scale
    of 0.2 for every matrix all rows collapse to one vector."""
    if "LayerNorm.weight" in name:
        return 0.2, 1.0
    if "LayerNorm.bias" in name:
        return 0.1, 0.0
    if name.endswith("word_embeddings.weight"):
        return 0.5, 0.0
    if name.endswith("embeddings.weight"):  # position, token type
        return 0.3, 0.0
    if name.endswith(".bias"):
        return 0.05, 0.0
    if ".query." in name or ".key." in name:
        return 0.3, 0.0
    if ".value." in name or "attention.output.dense" in name:
        return 0.08, 0.0
    if "intermediate.dense" in name or "output.dense" in name:
        return 0.12, 0.0
    return 0.2, 0.0  # pooler


def write_folder(out, vocab_path):
    import torch
    from safetensors.numpy import save_file
    from transformers import BertConfig, BertModel

    with open(vocab_path, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    cfg = bert_config(vocab_size)
    # Only used for the parameter names and shapes, in the model's own order.
    skeleton = BertModel(BertConfig(**{k: v for k, v in cfg.items() if k != "torch_dtype"}))
    names_shapes = [(n, tuple(p.shape)) for n, p in skeleton.named_parameters()]
    del skeleton
    weights = common.random_f16_weights(names_shapes, SEED, weight_scale)

    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "1_Pooling"))

    def dump(rel, obj):
        with open(os.path.join(out, rel), "w", encoding="utf-8", newline="\n") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")

    dump("config.json", cfg)
    shutil.copyfile(vocab_path, os.path.join(out, "vocab.txt"))
    dump("tokenizer_config.json", {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": True,
        "tokenize_chinese_chars": True,
        "strip_accents": None,
        "do_basic_tokenize": True,
        "never_split": None,
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
        "cls_token": "[CLS]", "mask_token": "[MASK]",
        "model_max_length": MAX_POS,
    })
    dump("special_tokens_map.json", {
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
        "cls_token": "[CLS]", "mask_token": "[MASK]",
    })
    dump("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    dump(os.path.join("1_Pooling", "config.json"), {
        "word_embedding_dimension": HIDDEN,
        "pooling_mode_cls_token": True,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    })
    dump("sentence_bert_config.json", {"max_seq_length": MAX_POS, "do_lower_case": False})
    save_file(weights, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out, "model.safetensors"), 0o644)
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(
            "# tiny-bert-cls\n\nRandom weights, test data only (meaningless embeddings). Built by\n"
            "`tools/golden/make_tiny_bert.py` (seed %d): BERT, vocab of all-MiniLM-L6-v2, hidden %d,\n"
            "%d heads, %d layers, intermediate %d, %d positions, gelu, F16 weights, CLS pooling +\n"
            "Normalize, max_seq_length %d.\n" % (SEED, HIDDEN, HEADS, LAYERS, INTER, MAX_POS, MAX_POS)
        )
    torch.manual_seed(0)
    return weights


def verify(out, weights):
    """Loads the folder back with sentence-transformers (fp32) and checks what it computes."""
    import torch
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(out, device="cpu", model_kwargs={"dtype": torch.float32})
    hf = m[0].auto_model
    names = [type(x).__name__ for x in m]
    assert names == ["Transformer", "Pooling", "Normalize"], names
    mode = getattr(m[1], "pooling_mode", None)
    mode = mode if isinstance(mode, str) else m[1].get_pooling_mode_str()
    assert mode == "cls", mode
    assert m.max_seq_length == MAX_POS, m.max_seq_length
    sd = hf.state_dict()
    for name, w in weights.items():
        t = sd[name]
        assert t.dtype == torch.float32, (name, t.dtype)
        assert np.array_equal(t.numpy(), w.astype(np.float32)), name
    assert len(hf.config.to_dict()) and hf.config.num_hidden_layers == LAYERS

    texts = ["The quick brown fox jumps over the lazy dog.", "你好，世界！", "a b c d e f g"]
    emb = m.encode(texts, batch_size=1, convert_to_numpy=True)
    worst_cls, best_mean = 1.0, -1.0
    with torch.no_grad():
        for t, e in zip(texts, emb):
            x = torch.tensor([m.tokenizer(t)["input_ids"]])
            h = hf(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state[0]
            cls = torch.nn.functional.normalize(h[0], dim=0).numpy()
            mean = torch.nn.functional.normalize(h.mean(0), dim=0).numpy()
            worst_cls = min(worst_cls, float(np.dot(cls, e)))
            best_mean = max(best_mean, float(np.dot(mean, e)))
    print("verify: modules %s, pooling %s, weights fp32 == F16 values, cos(ST, HF CLS) min %.7f, "
          "cos(ST, HF mean) max %.4f" % (names, mode, worst_cls, best_mean))
    if worst_cls < 0.99999 or best_mean > 0.95:
        sys.exit("the folder does not compute CLS pooling as intended")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", default=common.repo_path("models", "all-MiniLM-L6-v2", "vocab.txt"))
    ap.add_argument("--out", default=common.repo_path("tests", "data", "tiny-bert-cls"))
    args = ap.parse_args()
    weights = write_folder(args.out, args.vocab)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.out) for f in fs)
    print("wrote %s (%d tensors, %d bytes in all)" % (args.out, len(weights), total))
    verify(args.out, weights)


if __name__ == "__main__":
    main()
