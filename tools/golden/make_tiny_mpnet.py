#!/usr/bin/env python3
"""Builds tests/data/tiny-mpnet: a small random MPNet in sentence-transformers layout (tests and
golden data only), so that CI checks the MPNet path (positions from padding_idx + 1, no token
types, the relative-position attention bias, <s> </s> <pad> specials) without downloading
all-mpnet-base-v2.

Shape: hidden 32, 4 heads, 3 layers, intermediate 64, 130 positions (128 usable), 32
relative-attention buckets, gelu, layer_norm_eps 1e-5, F16 weights, mean pooling + Normalize,
max_seq_length 128. Vocabulary: tests/data/tiny-bert-cls/vocab.txt (BERT uncased, already in
the repository) with MPNet's layout applied: <s> <pad> </s> <unk> in front, <mask> at the end,
as all-mpnet-base-v2's vocab.txt is built.

Weights: numpy PCG64, fixed seed; the relative-attention bias is drawn large (std 3.0) so that a
missing or mis-bucketed bias changes the output clearly. After writing, the folder is loaded
back with sentence-transformers (fp32) and its embeddings compared with the bare HF MPNetModel
(mean pooling, normalized), and with the same model with the bias zeroed (must differ).

Golden embeddings: tools/golden/gen_embeddings.py --model tests/data/tiny-mpnet --name tiny_mpnet
--subset small

Usage: make_tiny_mpnet.py [--vocab tests/data/tiny-bert-cls/vocab.txt] [--out tests/data/tiny-mpnet]
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SEED = 4321
HIDDEN, HEADS, LAYERS, INTER, MAX_POS, BUCKETS = 32, 4, 3, 64, 130, 32


def mpnet_config(vocab_size):
    return {
        "architectures": ["MPNetModel"],
        "model_type": "mpnet",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "intermediate_size": INTER,
        "hidden_act": "gelu",
        "max_position_embeddings": MAX_POS,
        "relative_attention_num_buckets": BUCKETS,
        "layer_norm_eps": 1e-5,
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "initializer_range": 0.02,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "torch_dtype": "float16",
    }


def weight_scale(name):
    """(scale, offset) of each tensor's normal draw: make_tiny_bert's scales under MPNet's names,
    plus a large relative-attention bias so that the bias visibly shapes attention."""
    if "LayerNorm.weight" in name:
        return 0.2, 1.0
    if "LayerNorm.bias" in name:
        return 0.1, 0.0
    if name.endswith("relative_attention_bias.weight"):
        return 3.0, 0.0
    if name.endswith("word_embeddings.weight"):
        return 0.5, 0.0
    if name.endswith("embeddings.weight"):
        return 0.3, 0.0
    if name.endswith(".bias"):
        return 0.05, 0.0
    if ".attn.q." in name or ".attn.k." in name:
        return 0.3, 0.0
    if ".attn.v." in name or ".attn.o." in name:
        return 0.08, 0.0
    if "intermediate.dense" in name or "output.dense" in name:
        return 0.12, 0.0
    return 0.2, 0.0  # pooler


def write_folder(out, vocab_path):
    from safetensors.numpy import save_file
    from transformers import MPNetConfig, MPNetModel

    with open(vocab_path, encoding="utf-8") as f:
        bert_vocab = f.read().splitlines()
    vocab = ["<s>", "<pad>", "</s>", "<unk>"] + bert_vocab + ["<mask>"]
    cfg = mpnet_config(len(vocab))
    skeleton = MPNetModel(MPNetConfig(**{k: v for k, v in cfg.items() if k != "torch_dtype"}))
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
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(vocab) + "\n")
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "[UNK]", "sep_token": "</s>",
                "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
    dump("tokenizer_config.json", dict(specials, tokenizer_class="MPNetTokenizer", do_lower_case=True,
                                       tokenize_chinese_chars=True, strip_accents=None,
                                       model_max_length=MAX_POS - 2))
    dump("special_tokens_map.json", specials)
    dump("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    dump(os.path.join("1_Pooling", "config.json"), {
        "word_embedding_dimension": HIDDEN,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    })
    dump("sentence_bert_config.json", {"max_seq_length": MAX_POS - 2, "do_lower_case": False})
    save_file(weights, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out, "model.safetensors"), 0o644)
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(
            "# tiny-mpnet\n\nRandom weights, test data only (meaningless embeddings). Built by\n"
            "`tools/golden/make_tiny_mpnet.py` (seed %d): MPNet, vocab of tiny-bert-cls with MPNet's\n"
            "specials, hidden %d, %d heads, %d layers, intermediate %d, %d positions (%d usable), %d\n"
            "relative-attention buckets, F16 weights, mean pooling + Normalize.\n"
            % (SEED, HIDDEN, HEADS, LAYERS, INTER, MAX_POS, MAX_POS - 2, BUCKETS)
        )
    return weights


def verify(out, weights):
    import torch
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(out, device="cpu", model_kwargs={"dtype": torch.float32})
    hf = m[0].auto_model
    assert type(hf).__name__ == "MPNetModel", type(hf).__name__
    assert m.max_seq_length == MAX_POS - 2, m.max_seq_length
    sd = hf.state_dict()
    for name, w in weights.items():
        assert np.array_equal(sd[name].numpy(), w.astype(np.float32)), name
    texts = ["The quick brown fox jumps over the lazy dog.", "a b c d e f g h i j k l m n o p"]
    ids = [m.tokenizer(t)["input_ids"] for t in texts]
    assert all(r[0] == 0 and r[-1] == 2 for r in ids), ids
    emb = m.encode(texts, batch_size=1, convert_to_numpy=True)
    worst, best_nobias = 1.0, -1.0
    with torch.no_grad():
        for row, e in zip(ids, emb):
            x = torch.tensor([row])
            v = torch.nn.functional.normalize(hf(input_ids=x).last_hidden_state[0].mean(0), dim=0)
            worst = min(worst, float(np.dot(v.numpy(), e)))
        saved = hf.encoder.relative_attention_bias.weight.clone()
        hf.encoder.relative_attention_bias.weight.zero_()
        for row, e in zip(ids, emb):
            x = torch.tensor([row])
            v = torch.nn.functional.normalize(hf(input_ids=x).last_hidden_state[0].mean(0), dim=0)
            best_nobias = max(best_nobias, float(np.dot(v.numpy(), e)))
        hf.encoder.relative_attention_bias.weight.copy_(saved)
    print("verify: cos(ST, HF mean) min %.7f; without the relative bias max %.4f" % (worst, best_nobias))
    if worst < 0.99999 or best_nobias > 0.99:
        sys.exit("the folder does not compute what it should")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", default=common.repo_path("tests", "data", "tiny-bert-cls", "vocab.txt"))
    ap.add_argument("--out", default=common.repo_path("tests", "data", "tiny-mpnet"))
    args = ap.parse_args()
    weights = write_folder(args.out, args.vocab)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.out) for f in fs)
    print("wrote %s (%d tensors, %d bytes in all)" % (args.out, len(weights), total))
    verify(args.out, weights)


if __name__ == "__main__":
    main()
