#!/usr/bin/env python3
"""Per-family CPU benchmark (issue 23 item 7): for each architecture family hetserve loads,
hetserve's CPU engine f32 / bf16 / int8 against ONNX Runtime f32 / int8 on the same weights
(ORT runs the graph torch.onnx.export writes from the same model), at 1x16 and 32x128 in the
same run; then rerank throughput (pairs/s, pairs of 2x128 tokens) of a MiniLM-size cross-encoder,
hetserve's rerank path (bench_cpu --pairs: the executor plus the checkpoint head on the host)
against the same cross-encoder in ONNX Runtime. Benchmark tooling only; never on the serving path.

Models (bench/out/families/, made once, never committed):
  bert           models/all-MiniLM-L6-v2, the real checkpoint;
  mpnet          models/all-mpnet-base-v2 when present, else random weights as below;
  everything else: RANDOM WEIGHTS, SPEED ONLY (their outputs mean nothing): a model of MiniLM's
  size (6 layers, hidden 384, FFN 1536, or 1024 for the gated FFNs; 12 heads, Qwen3 6 heads of
  64 on 2 kv heads) with the family's config, tokenizer and pooling files taken from its tiny
  test folder (tests/data/tiny-<family>) and 512 positions. Families transformers implements
  (roberta, distilbert, modernbert, qwen3, mpnet, the BERT cross-encoder) are built with
  transformers' own random initialisation and saved as safetensors under the tiny folder's
  tensor names; nomic-bert and gte (remote code upstream, no transformers class) get N(0, 0.02)
  weights under the names of tools/golden/make_tiny_<family>.py and run on hetserve only.
  Folder names end in -random.

ONNX Runtime: the transformers model wrapped with the family's pooling (mean / CLS / last token)
and L2 normalisation (the cross-encoder: its logit), exported with the TorchScript exporter
(dynamo=False, opset 17, eager attention); then onnxruntime.transformers' BERT optimizer where it
fuses anything (else the plain graph, ORT_ENABLE_ALL still applies its own fusions), and
quantize_dynamic (per-channel QInt8, as bench/ort_bench.py) for int8. Sessions: intra-op threads
= --threads, sequential. hetserve int8 is the dynamic lane (per-token activation scales, every
linear layer int8: `bench_cpu --dtype int8` on the plain folder, no `hetserve quantize` plan),
the closest match to quantize_dynamic.

Timing: per engine and shape, warm-up, then median of repeated calls for --budget-s seconds (at
least 3; shapes of 2048 tokens or more: one warm-up and --big-iters calls, default 3, to keep the
run short), full-length sequences of in-vocabulary ids (the same ids in both), no tokenization. Engines run one after the
other per family, so the ratios compare runs seconds apart.

Prints one JSON line per measurement to --jsonl and the table (ms, seq/s, hetserve / ORT ratios
of the same dtype, > 1 = hetserve faster).

Usage: families.py [--build build] [--threads 2] [--budget-s 2] [--big-iters 3] [--only bert,...]
                   [--shapes 1x16,32x128] [--rerank 16x256] [--jsonl bench/out/families.jsonl]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(REPO, "bench", "out", "families")
SIZE = {"hidden": 384, "layers": 6, "heads": 12, "inter": 1536, "gated_inter": 1024, "positions": 512}

# name, real checkpoint (or None), tiny folder, config overrides (key names of the family),
# pooling, hetserve only (no transformers class), task
H, L, NH, I, GI, P = (SIZE[k] for k in ("hidden", "layers", "heads", "inter", "gated_inter", "positions"))
BERT_LIKE = {"hidden_size": H, "num_hidden_layers": L, "num_attention_heads": NH, "intermediate_size": I}
FAMILIES = [
    ("bert", "models/all-MiniLM-L6-v2", None, None, "mean", False, "embed"),
    ("mpnet", "models/all-mpnet-base-v2", "tiny-mpnet", dict(BERT_LIKE, max_position_embeddings=P + 2),
     "mean", False, "embed"),
    ("roberta", None, "tiny-roberta", dict(BERT_LIKE, max_position_embeddings=P + 2), "mean", False, "embed"),
    ("distilbert", None, "tiny-distilbert",
     {"dim": H, "n_layers": L, "n_heads": NH, "hidden_dim": I, "max_position_embeddings": P}, "cls", False,
     "embed"),
    ("modernbert", None, "tiny-modernbert",
     dict(BERT_LIKE, intermediate_size=GI, max_position_embeddings=P, local_attention=128), "mean", False,
     "embed"),
    ("qwen3", None, "tiny-qwen3",
     dict(BERT_LIKE, num_attention_heads=6, num_key_value_heads=2, head_dim=64, intermediate_size=GI,
          max_position_embeddings=P), "lasttoken", False, "embed"),
    ("nomic-bert", None, "tiny-nomic-bert",
     {"n_embd": H, "n_layer": L, "n_head": NH, "n_inner": GI, "n_positions": P}, "mean", True, "embed"),
    ("gte", None, "tiny-gte", dict(BERT_LIKE, intermediate_size=GI, max_position_embeddings=P), "cls", True,
     "embed"),
    ("cross-encoder", None, "tiny-cross-encoder", dict(BERT_LIKE, max_position_embeddings=P), "cls", False,
     "rerank"),
]
# make_tiny_<family>.py module globals that size tensor_shapes(), for the hetserve-only families
MAKE_GLOBALS = {"nomic-bert": ("make_tiny_nomic_bert", {"HIDDEN": H, "HEADS": NH, "LAYERS": L, "INTER": GI,
                                                        "MAX_POS": P}),
                "gte": ("make_tiny_gte", {"HIDDEN": H, "HEADS": NH, "LAYERS": L, "INTER": GI, "MAX_POS": P})}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rjson(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def wjson(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def pattern(name):
    """A tensor name with its layer numbers replaced: encoder.layer.N.attention..."""
    import re

    return re.sub(r"\.\d+\.", ".N.", name)


def hf_model(folder, task):
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    cfg = AutoConfig.from_pretrained(folder)
    cls = AutoModelForSequenceClassification if task == "rerank" else AutoModel
    return cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval(), cfg


def build_random(name, tiny, over, hs_only, task, dst):
    """dst: the tiny folder's files with config.json resized by `over` and random weights."""
    import torch
    from safetensors.torch import load_file, save_file

    src = os.path.join(REPO, "tests", "data", tiny)
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    cfg = rjson(os.path.join(src, "config.json"))
    cfg.update(over)
    cfg.pop("torch_dtype", None)
    cfg["dtype"] = "float32"
    wjson(os.path.join(tmp, "config.json"), cfg)
    for rel, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        p = os.path.join(tmp, rel)
        if os.path.exists(p):
            d = rjson(p)
            d[key] = P
            wjson(p, d)
    p1 = os.path.join(tmp, "1_Pooling", "config.json")
    if os.path.exists(p1):
        d = rjson(p1)
        d["word_embedding_dimension"] = H
        wjson(p1, d)
    tiny_names = list(load_file(os.path.join(src, "model.safetensors")).keys())
    tiny_pat = {pattern(n) for n in tiny_names}
    vocab = cfg["vocab_size"]
    torch.manual_seed(2323)
    if hs_only:
        sys.path.insert(0, os.path.join(REPO, "tools", "golden"))
        mod_name, globs = MAKE_GLOBALS[name]
        mod = __import__(mod_name)
        for k, v in globs.items():
            setattr(mod, k, v)
        w = {}
        for n, shape in mod.tensor_shapes(vocab):
            if len(shape) == 1:
                w[n] = torch.ones(shape) if n.endswith("weight") else torch.zeros(shape)
            else:
                w[n] = torch.randn(shape) * 0.02
        probe = next(iter(w))
        prefix = next((t[: -len(probe)] for t in tiny_names if t.endswith(probe) and t != probe), "")
        w = {prefix + k: v for k, v in w.items()}  # the tiny folder writes them under a prefix (gte: "new.")
        missing = tiny_pat - {pattern(n) for n in w}
        if missing:
            sys.exit("families: %s: tensor_shapes misses %s" % (name, sorted(missing)[:3]))
    else:
        from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

        hc = AutoConfig.from_pretrained(tmp)
        m = (AutoModelForSequenceClassification if task == "rerank" else AutoModel).from_config(hc)
        sd = m.state_dict()
        # the tiny folder's names: the same keys, perhaps under the base model's prefix
        prefix = ""
        probe = next(k for k in sd if "embeddings" in k or "embed_tokens" in k)
        for t in tiny_names:
            if t.endswith(probe) and t != probe:
                prefix = t[: -len(probe)]
                break
        w = {}
        for k, v in sd.items():
            n = k if pattern(k) in tiny_pat or not prefix or k.startswith(prefix) else prefix + k
            if pattern(n) in tiny_pat:  # the tiny folder's tensors, every layer (pooler etc. not)
                w[n] = v.detach().float().contiguous()
        missing = tiny_pat - {pattern(n) for n in w}
        if missing:
            sys.exit("families: %s: random model lacks %s" % (name, sorted(missing)[:3]))
    save_file(w, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
        f.write("# %s (bench only)\n\nRANDOM WEIGHTS, for speed measurements only: made by "
                "bench/families.py from tests/data/%s's files, resized to %s.\n" % (os.path.basename(dst), tiny,
                                                                                   json.dumps(over)))
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)


class Wrap:
    """Pooling + normalisation (or the classifier's logit) around a transformers model."""

    @staticmethod
    def make(model, pooling, task, inputs):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                kw = dict(zip(inputs, args))
                if task == "rerank":
                    return self.m(**kw).logits
                h = self.m(**kw).last_hidden_state
                mask = kw["attention_mask"]
                if pooling == "cls":
                    e = h[:, 0]
                elif pooling == "lasttoken":
                    e = h[:, -1]  # full-length rows: the last token is the last row
                else:
                    mm = mask.unsqueeze(-1).to(h.dtype)
                    e = (h * mm).sum(1) / mm.sum(1).clamp(min=1e-9)
                return e / e.norm(dim=-1, keepdim=True).clamp(min=1e-12)

        return W().eval()


def export_onnx(folder, pooling, task, dst_dir):
    """(f32 path, int8 path, note) for the folder's model; ORT files cached in dst_dir."""
    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    f32, i8 = os.path.join(dst_dir, "model_opt.onnx"), os.path.join(dst_dir, "model_int8.onnx")
    note_p = os.path.join(dst_dir, "note.txt")
    if os.path.exists(f32) and os.path.exists(i8):
        return f32, i8, open(note_p).read().strip()
    os.makedirs(dst_dir, exist_ok=True)
    model, cfg = hf_model(folder, task)
    inputs = ["input_ids", "attention_mask"]
    if getattr(cfg, "type_vocab_size", 0) and cfg.model_type not in ("distilbert",):
        inputs.append("token_type_ids")
    w = Wrap.make(model, pooling, task, inputs)
    x = torch.randint(5, min(cfg.vocab_size, 1000), (2, 16), dtype=torch.long)
    args = tuple([x, torch.ones_like(x), torch.zeros_like(x)][: len(inputs)])
    raw = os.path.join(dst_dir, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(w, args, raw, dynamo=False, input_names=inputs, output_names=["out"],
                          dynamic_axes={k: {0: "batch", 1: "seq"} for k in inputs} | {"out": {0: "batch"}},
                          opset_version=17, do_constant_folding=True)
    note = "plain graph"
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        heads = getattr(cfg, "num_attention_heads", getattr(cfg, "n_heads", 0))
        hidden = getattr(cfg, "hidden_size", getattr(cfg, "dim", 0))
        opt = optimize_model(raw, model_type="bert", num_heads=heads, hidden_size=hidden)
        fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
        if fused:
            opt.save_model_to_file(f32)
            note = "BERT optimizer: " + ",".join("%s=%d" % kv for kv in sorted(fused.items()))
    except Exception as e:  # an architecture the BERT fusions do not know: the plain graph
        note = "plain graph (optimizer: %s)" % type(e).__name__
    if not os.path.exists(f32):
        shutil.copy(raw, f32)
    quantize_dynamic(f32, i8 + ".tmp", per_channel=True, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    os.replace(i8 + ".tmp", i8)
    with open(note_p, "w") as f:
        f.write(note + "\n")
    return f32, i8, note


def special_ids(folder):
    """(cls, sep) ids from the folder's tokenizer files (vocab.txt or tokenizer.json), by the
    tokens tokenizer_config.json names ([CLS] / [SEP], else bos / eos)."""
    tc = rjson(os.path.join(folder, "tokenizer_config.json"))
    if os.path.exists(os.path.join(folder, "vocab.txt")):
        with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
            vocab = {w: i for i, w in enumerate(f.read().splitlines())}
    else:
        tj = rjson(os.path.join(folder, "tokenizer.json"))
        vocab = dict(tj["model"]["vocab"])
        vocab.update({t["content"]: t["id"] for t in tj.get("added_tokens", [])})

    def tok(*keys):
        for k in keys:
            t = tc.get(k)
            t = t.get("content") if isinstance(t, dict) else t
            if t in vocab:
                return vocab[t]
        return 1

    return tok("cls_token", "bos_token"), tok("sep_token", "eos_token")


def ids_for(folder, batch, seq, pairs):
    """The ids bench_cpu feeds: [CLS] words [SEP] (pairs: [SEP] at seq/2 - 1, types 1 after)."""
    vocab = rjson(os.path.join(folder, "config.json"))["vocab_size"]
    lo, span = (1996, 20000) if vocab > 22000 else (vocab // 8, vocab - vocab // 8 - 1)
    cls, sep = special_ids(folder)
    ids = np.empty((batch, seq), dtype=np.int64)
    types = np.zeros((batch, seq), dtype=np.int64)
    for b in range(batch):
        for s in range(seq):
            ids[b, s] = cls if s == 0 else sep if (s == seq - 1 or (pairs and s == seq // 2 - 1)) \
                else lo + (b * 131 + s * 17) % span
            types[b, s] = 1 if pairs and s >= seq // 2 else 0
    return ids, types


def ort_time(path, threads, folder, shape, pairs, budget_s, iters):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ids, types = ids_for(folder, shape[0], shape[1], pairs)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": types}
    feed = {i.name: feed[i.name] for i in sess.get_inputs()}
    for _ in range(1 if iters else 2):
        sess.run(None, feed)
    times, t_end = [], time.perf_counter() + budget_s
    while len(times) < iters if iters else (len(times) < 3 or time.perf_counter() < t_end):
        t0 = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t0)
    del sess
    return statistics.median(times) * 1e3, len(times)


def hs_time(build, folder, dtype, shape, pairs, threads, budget_s, iters):
    cmd = [os.path.join(build, "bench_cpu"), "--model", folder, "--dtype", dtype, "--threads", str(threads),
           "--shapes", "%dx%d" % shape, "--seconds", str(budget_s), "--no-peak"] + (["--pairs"] if pairs else [])
    if iters:
        cmd += ["--iters", str(iters)]  # one warm-up, then exactly `iters` timed calls
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
    d = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    return d["ms"], d["iters"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=2.0)
    ap.add_argument("--shapes", default="1x16,32x128")
    ap.add_argument("--rerank", default="16x256", help="pairs x tokens per pair (2x128: 256)")
    ap.add_argument("--only", default="")
    ap.add_argument("--big-iters", type=int, default=3,
                    help="shapes of >= 2048 tokens: one warm-up and this many timed calls (0: --budget-s)")
    ap.add_argument("--jsonl", default=os.path.join(REPO, "bench", "out", "families.jsonl"))
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    only = set(filter(None, a.only.split(",")))
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    rerank = tuple(int(v) for v in a.rerank.split("x"))
    build = os.path.join(REPO, a.build) if not os.path.isabs(a.build) else a.build
    rows = []
    jl = open(a.jsonl, "w")
    for name, real, tiny, over, pooling, hs_only, task in FAMILIES:
        if only and name not in only:
            continue
        if real and os.path.isdir(os.path.join(REPO, real)):
            folder, weights = os.path.join(REPO, real), "real"
        elif tiny:
            folder, weights = os.path.join(OUT, name + "-random"), "random"
            if not os.path.exists(os.path.join(folder, "model.safetensors")):
                t0 = time.time()
                build_random(name, tiny, over, hs_only, task, folder)
                log("families: built %s (%.0f s)" % (os.path.relpath(folder, REPO), time.time() - t0))
        else:
            log("families: %s: %s missing, skipped" % (name, real))
            continue
        onnx_paths, note = None, "hetserve only: no transformers class to export"
        if not hs_only:
            t0 = time.time()
            try:
                f32, i8, note = export_onnx(folder, pooling, task, os.path.join(OUT, name + "-onnx"))
                onnx_paths = {"f32": f32, "int8": i8}
            except Exception as e:  # reported in the table, the other engines still run
                note = "ORT export failed: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:80])
            log("families: %s ONNX ready (%.0f s): %s" % (name, time.time() - t0, note))
        pairs = task == "rerank"
        for shape in ([rerank] if pairs else shapes):
            for eng, dtype in (("hetserve", "f32"), ("hetserve", "bf16"), ("hetserve", "int8"),
                               ("onnxruntime", "f32"), ("onnxruntime", "int8")):
                iters = a.big_iters if shape[0] * shape[1] >= 2048 else 0
                if eng == "hetserve":
                    ms, n = hs_time(build, folder, dtype, shape, pairs, a.threads, a.budget_s, iters)
                elif onnx_paths:
                    try:
                        ms, n = ort_time(onnx_paths[dtype], a.threads, folder, shape, pairs, a.budget_s, iters)
                    except Exception as e:
                        ms, n = None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:80])
                else:
                    continue
                d = {"family": name, "weights": weights, "task": task, "engine": eng, "dtype": dtype,
                     "batch": shape[0], "seq": shape[1], "ms": ms, "threads": a.threads}
                if ms is None:
                    d["error"] = n
                else:
                    d.update(iters=n, seq_per_s=round(shape[0] / (ms / 1e3), 2))
                if eng == "onnxruntime":
                    d["graph"] = note
                jl.write(json.dumps(d) + "\n")
                jl.flush()
                rows.append(d)
        rows.append({"family": name, "note": note, "weights": weights})
    jl.close()
    table(rows)


def table(rows):
    get = {(r["family"], r["engine"], r["dtype"], r["batch"], r["seq"]): r for r in rows if "engine" in r}
    notes = {r["family"]: r for r in rows if "note" in r}
    keys = [("hetserve", "f32"), ("hetserve", "bf16"), ("hetserve", "int8"), ("onnxruntime", "f32"),
            ("onnxruntime", "int8")]
    print("   median ms per call (seq/s, or pairs/s for rerank); ratios = ORT ms / hetserve ms of the same "
          "dtype (> 1: hetserve faster)")
    print(f"   {'family':<14}{'weights':<8}{'shape':>7} " + "".join(f"{'hs ' + d if e == 'hetserve' else 'ORT ' + d:>17}"
                                                            for e, d in keys) + f"{'f32 ratio':>11}{'int8 ratio':>11}")
    for fam in dict.fromkeys(r["family"] for r in rows):
        shapes = sorted({(k[3], k[4]) for k in get if k[0] == fam})
        for b, s in shapes:
            cells = []
            for e, d in keys:
                r = get.get((fam, e, d, b, s))
                if not r or r["ms"] is None:
                    cells.append(f"{'-' if not r else 'error':>17}")
                else:
                    cells.append(f"{r['ms']:9.2f} ({r['seq_per_s']:5.0f})".rjust(17))
            rat = []
            for d in ("f32", "int8"):
                h, o = get.get((fam, "hetserve", d, b, s)), get.get((fam, "onnxruntime", d, b, s))
                rat.append(f"{o['ms'] / h['ms']:10.2f}x" if h and o and h["ms"] and o["ms"] else f"{'-':>11}")
            print(f"   {fam:<14}{notes[fam]['weights']:<8}{f'{b}x{s}':>7} " + "".join(cells) + "".join(rat))
    print("   ORT graphs / errors:")
    for fam, n in notes.items():
        errs = sorted({"%s %s: %s" % (r["engine"], r["dtype"], r["error"]) for r in rows
                       if r.get("family") == fam and r.get("error")})
        print(f"     {fam}: {n['note']}" + ("; " + "; ".join(errs) if errs else ""))


if __name__ == "__main__":
    main()
