#!/usr/bin/env python3
"""Peer benchmark: ONNX Runtime (CPU, fp32 or int8) on the same BERT sentence encoder hetserve serves.

Benchmark tooling only; never on the serving path.

1. Export: the model folder's HF BertModel (eager attention, no pooler) wrapped with the
   folder's pooling (mean over the attention mask, or the CLS row, as 1_Pooling/config.json
   says) and L2 normalisation (if modules.json has a Normalize module) is exported with the
   TorchScript exporter (torch.onnx.export, dynamo=False, opset 17). Inputs input_ids,
   attention_mask, token_type_ids (int64) with dynamic batch and sequence axes; outputs
   last_hidden_state [batch, seq, hidden] and sentence_embedding [batch, hidden]. So pooling
   and normalisation are inside the graph and inside the timed region, as in hetserve.
2. Optimise: onnxruntime.transformers.optimizer.optimize_model(model_type='bert', num_heads,
   hidden_size) -- the fp32 configuration a user would deploy; the fused-op counts are printed
   and the run fails if no fused Attention / SkipLayerNormalization / BiasGelu appear.
3. Time: InferenceSession on the CPU provider, intra_op_num_threads=N, inter_op_num_threads=1,
   ORT_ENABLE_ALL, ORT_SEQUENTIAL, only sentence_embedding fetched. Per shape: warm-up, then
   as many timed runs as fit in --budget-s seconds (at least --min-iters), median reported.
   Inputs are real token ids ([CLS] text pieces ... [SEP], full length, mask all ones).

4. --dtype int8: the optimised graph of step 2 quantized once with
   onnxruntime.quantization.quantize_dynamic(per_channel=True, weight_type=QuantType.QInt8) to
   model_int8.onnx (MatMul -> MatMulInteger, Attention -> QAttention, EmbedLayerNormalization ->
   QEmbedLayerNormalization; activations dynamic uint8). The contrib ops defeat ONNX shape
   inference, so extra_options DefaultTensorType=FLOAT tells the quantizer their output type.
5. --golden DIR (e.g. tests/golden): before timing, every golden sentence (its token ids from
   embeddings.json, one sentence per run, no padding) runs through the timed session and through
   the fp32 session; a line {"cosine":"onnxruntime","dtype":..,"cos_min","cos_mean",
   "golden_cos_min","golden_cos_mean",...} gives the cosine to ORT fp32 and to the golden
   reference embeddings, and every timing line carries cos_min / cos_mean.

Prints one JSON line per shape:
  {"engine":"onnxruntime","dtype":"f32"|"int8","batch":B,"seq":S,"ms":median_ms,
   "seq_per_s":B/median_s,"gflops":achieved GFLOP/s,"gflop":work per call, ...spread fields}
with the work counted by encoder_flops() below (hetserve's bench uses the same formula).

--verify compares the optimised ONNX model with sentence-transformers on a few sentences
(padded batch and one by one): every cosine must be >= 0.99999.

Usage: ort_bench.py [--model models/all-MiniLM-L6-v2] [--threads 2] [--dtype f32|int8]
                    [--shapes 1x16,1x128,32x128] [--budget-s 10] [--golden DIR]
                    [--verify] [--no-bench]
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def encoder_flops(batch, seq, hidden, intermediate, layers):
    """Floating-point operations of one encoder forward pass, counting a multiply-add as 2.

      params matmuls, per token per layer: Q, K, V, attention output (4 * H * H MACs) and the
      two FFN matmuls (2 * H * I MACs)  ->  2 * B * S * L * (4 * H^2 + 2 * H * I)
      attention, per layer: Q.K^T and P.V, each B * heads * S * S * (H / heads) = B * S^2 * H
      MACs  ->  2 * 2 * B * L * S^2 * H

    Not counted (small, memory-bound): embeddings, biases, LayerNorm, softmax, GELU, pooling,
    normalisation, and the BERT pooler (not used by sentence encoders).
    """
    b, s, h, i, l = batch, seq, hidden, intermediate, layers
    return 2 * b * s * l * (4 * h * h + 2 * h * i) + 4 * b * l * s * s * h


def read_json(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as f:
        return json.load(f)


def model_layout(model_dir):
    """(pooling "mean" | "cls", normalize bool, max_seq_length) from the folder's files."""
    pooling, normalize = "mean", False
    modules = os.path.join(model_dir, "modules.json")
    if os.path.exists(modules):
        for m in read_json(modules):
            kind = m.get("type", "")
            if kind.endswith("Pooling"):
                pc = read_json(model_dir, m["path"], "config.json")
                if pc.get("pooling_mode_cls_token") or pc.get("pooling_mode") == "cls":
                    pooling = "cls"
                elif not (pc.get("pooling_mode_mean_tokens", True) or pc.get("pooling_mode") == "mean"):
                    sys.exit("unsupported pooling in %s" % m["path"])
            elif kind.endswith("Normalize"):
                normalize = True
    max_len = read_json(model_dir, "config.json")["max_position_embeddings"]
    sbc = os.path.join(model_dir, "sentence_bert_config.json")
    if os.path.exists(sbc):
        max_len = min(max_len, read_json(sbc).get("max_seq_length", max_len))
    return pooling, normalize, max_len


INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def export(model_dir, out_dir, pooling, normalize):
    import torch
    from transformers import BertModel

    class Encoder(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state
            if pooling == "cls":
                e = h[:, 0]
            else:
                m = attention_mask.unsqueeze(-1).to(h.dtype)
                e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            if normalize:
                e = e / e.norm(dim=-1, keepdim=True).clamp(min=1e-12)
            return h, e

    # Eager attention: the exported pattern is the one ORT's BERT fusions recognise.
    bert = BertModel.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                     add_pooling_layer=False).eval()
    enc = Encoder(bert).eval()
    x = torch.randint(1000, 2000, (2, 16), dtype=torch.long)
    path = os.path.join(out_dir, "model.onnx")
    axes = {k: {0: "batch", 1: "seq"} for k in INPUTS + ["last_hidden_state"]}
    axes["sentence_embedding"] = {0: "batch"}
    with torch.no_grad():
        torch.onnx.export(enc, (x, torch.ones_like(x), torch.zeros_like(x)), path, dynamo=False,
                          input_names=INPUTS, output_names=["last_hidden_state", "sentence_embedding"],
                          dynamic_axes=axes, opset_version=17, do_constant_folding=True)
    return path, bert.config


def optimize(raw_path, out_dir, cfg):
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(raw_path, model_type="bert", num_heads=cfg.num_attention_heads,
                         hidden_size=cfg.hidden_size)
    stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
    path = os.path.join(out_dir, "model_opt.onnx")
    opt.save_model_to_file(path)
    return path, stats


def quantize_int8(opt_path, out_dir):
    """model_int8.onnx: dynamic int8 quantization of the optimised graph (see step 4)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = os.path.join(out_dir, "model_int8.onnx")
    tmp = path + ".tmp"
    quantize_dynamic(opt_path, tmp, per_channel=True, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    os.replace(tmp, path)
    return path


def load_golden(golden_dir):
    """(token id lists, reference embeddings [count, dim]) from DIR/embeddings.json + .f32."""
    g = read_json(golden_dir, "embeddings.json")
    emb = np.fromfile(os.path.join(golden_dir, g["f32_file"]), dtype="<f4")
    return g["token_ids"], emb.reshape(g["count"], g["dim"])


def embed_each(run, token_ids):
    """[count, dim] embeddings, one sentence per call of run(feed) -> [1, dim]."""
    rows = []
    for ids in token_ids:
        x = np.asarray([ids], dtype=np.int64)
        rows.append(run({"input_ids": x, "attention_mask": np.ones_like(x),
                         "token_type_ids": np.zeros_like(x)}))
    return np.concatenate(rows)


def cos_stats(a, b):
    """min, mean and argmin of the row-wise cosine of a and b (NaN counts as -1)."""
    c = np.sum(a * b, 1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
    c = np.nan_to_num(c.astype(np.float64), nan=-1.0)
    return float(c.min()), float(c.mean()), int(c.argmin())


def cosine_line(engine, dtype, emb, ref, ref_name, golden):
    """The JSON line a peer prints for its cosines (and the dict its timing lines extend)."""
    lo, mean, worst = cos_stats(emb, ref)
    glo, gmean, _ = cos_stats(emb, golden)
    print(json.dumps({"cosine": engine, "dtype": dtype, "n": len(emb), "ref": ref_name,
                      "cos_min": round(lo, 6), "cos_mean": round(mean, 6), "worst": worst,
                      "golden_cos_min": round(glo, 6), "golden_cos_mean": round(gmean, 6)}), flush=True)
    return {"cos_min": round(lo, 6), "cos_mean": round(mean, 6)}


def session(path, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def real_ids(tokenizer, batch, seq):
    """[batch, seq] ids of real text: [CLS] word pieces [SEP], every row a different window."""
    text = ("Sentence embeddings map variable-length text to fixed-size vectors so that similar "
            "sentences end up close together; they are used for semantic search, clustering and "
            "retrieval. The quick brown fox jumps over the lazy dog. 東京 and 北京 are capitals. ")
    pieces = tokenizer(text * 8, add_special_tokens=False)["input_ids"]
    ids = np.empty((batch, seq), dtype=np.int64)
    for r in range(batch):
        body = [pieces[(r * 7 + j) % len(pieces)] for j in range(seq - 2)]
        ids[r] = [tokenizer.cls_token_id] + body + [tokenizer.sep_token_id]
    return ids


def time_shape(sess, ids, budget_s, min_iters, warmup_s):
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    out = ["sentence_embedding"]
    t_end = time.perf_counter() + warmup_s
    n_warm = 0
    while n_warm < 2 or time.perf_counter() < t_end:
        sess.run(out, feed)
        n_warm += 1
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_iters or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        sess.run(out, feed)
        times.append(time.perf_counter() - t0)
    return times


def verify(model_dir, sess, n=10):
    """Cosine between ORT's sentence_embedding and sentence-transformers' on n sentences of
    varied length (one truncated), once as a padded batch and once one by one."""
    import torch
    from sentence_transformers import SentenceTransformer

    sys.path.insert(0, os.path.join(REPO, "tools", "golden"))
    import corpus

    st = SentenceTransformer(model_dir, device="cpu", model_kwargs={"dtype": torch.float32})
    items = corpus.build(st.tokenizer, st.max_seq_length, n_random=0)
    pick = [i * len(items) // n for i in range(n - 1)] + [len(items) - 12]  # last: a long text
    texts = [items[i][1] for i in pick]
    ref = st.encode(texts, batch_size=len(texts), convert_to_numpy=True)
    prep = getattr(st, "preprocess", None) or st.tokenize
    feats = prep(texts)
    feed = {k: feats[k].numpy().astype(np.int64) for k in INPUTS}
    lens = feed["attention_mask"].sum(1).tolist()
    batched = sess.run(["sentence_embedding"], feed)[0]
    single = np.concatenate([
        sess.run(["sentence_embedding"], {k: v[i:i + 1, :lens[i]] for k, v in feed.items()})[0]
        for i in range(len(texts))
    ])

    def cos(a, b):
        return np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))

    cb, cs = cos(batched, ref), cos(single, ref)
    res = {"verify": "onnxruntime vs sentence-transformers", "n": len(texts), "lengths": lens,
           "min_cos_padded_batch": round(float(cb.min()), 8), "min_cos_single": round(float(cs.min()), 8),
           "max_abs_diff": float(max(np.abs(batched - ref).max(), np.abs(single - ref).max()))}
    print(json.dumps(res), flush=True)
    if min(cb.min(), cs.min()) < 0.99999:
        sys.exit("verification failed: cosine below 0.99999")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(REPO, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "out"), help="ONNX files go to OUT/<model name>/")
    ap.add_argument("--threads", type=int, default=2, help="intra_op_num_threads")
    ap.add_argument("--dtype", choices=("f32", "int8"), default="f32",
                    help="int8: the dynamically quantized graph (model_int8.onnx)")
    ap.add_argument("--golden", help="golden folder (embeddings.json + .f32): print cosines first")
    ap.add_argument("--shapes", default="1x16,1x128,32x128", help="comma-separated BATCHxSEQ")
    ap.add_argument("--budget-s", type=float, default=10.0, help="timed seconds per shape (bound)")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--reexport", action="store_true", help="export and optimise even if files exist")
    ap.add_argument("--verify", action="store_true", help="check ORT against sentence-transformers")
    ap.add_argument("--no-bench", action="store_true", help="skip timing (with --verify)")
    args = ap.parse_args()

    import onnxruntime as ort
    from transformers import AutoConfig, AutoTokenizer

    model_dir = args.model
    name = os.path.basename(os.path.normpath(model_dir))
    out_dir = os.path.join(args.out, name)
    os.makedirs(out_dir, exist_ok=True)
    pooling, normalize, max_len = model_layout(model_dir)
    opt_path = os.path.join(out_dir, "model_opt.onnx")
    if args.reexport or not os.path.exists(opt_path):
        raw, cfg = export(model_dir, out_dir, pooling, normalize)
        opt_path, stats = optimize(raw, out_dir, cfg)
        with open(os.path.join(out_dir, "fused_ops.json"), "w") as f:
            json.dump(stats, f)
    else:
        cfg = AutoConfig.from_pretrained(model_dir)
        with open(os.path.join(out_dir, "fused_ops.json")) as f:
            stats = json.load(f)
    print(json.dumps({"model": name, "pooling": pooling, "normalize": normalize, "fused_ops": stats,
                      "onnxruntime": ort.__version__}), flush=True)
    for op in ("Attention", "SkipLayerNormalization", "BiasGelu"):
        if not stats.get(op):
            sys.exit("optimizer did not fuse %s: not the configuration a user would deploy" % op)

    sess = session(opt_path, args.threads)
    if args.verify:
        verify(model_dir, sess)
    if args.no_bench:
        return
    f32_sess = sess
    if args.dtype == "int8":
        int8_path = os.path.join(out_dir, "model_int8.onnx")
        if args.reexport or not os.path.exists(int8_path):
            int8_path = quantize_int8(opt_path, out_dir)
        sess = session(int8_path, args.threads)
    cos = {}
    if args.golden:
        token_ids, golden = load_golden(args.golden)
        def run_with(s):
            return lambda feed: s.run(["sentence_embedding"], feed)[0]
        emb = embed_each(run_with(sess), token_ids)
        ref = emb if sess is f32_sess else embed_each(run_with(f32_sess), token_ids)
        cos = cosine_line("onnxruntime", args.dtype, emb, ref, "onnxruntime-f32", golden)
    del f32_sess
    tok = AutoTokenizer.from_pretrained(model_dir)
    for shape in args.shapes.split(","):
        b, s = (int(v) for v in shape.lower().split("x"))
        if s > max_len:
            sys.exit("seq %d exceeds the model's max_seq_length %d" % (s, max_len))
        times = time_shape(sess, real_ids(tok, b, s), args.budget_s, args.min_iters, args.warmup_s)
        med = statistics.median(times)
        q = np.quantile(times, [0.1, 0.9])
        gflop = encoder_flops(b, s, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) / 1e9
        print(json.dumps({
            "engine": "onnxruntime", "dtype": args.dtype, "batch": b, "seq": s,
            "ms": round(med * 1e3, 4), "seq_per_s": round(b / med, 2), "gflops": round(gflop / med, 2),
            "gflop": round(gflop, 4), "threads": args.threads, "iters": len(times),
            "min_ms": round(min(times) * 1e3, 4), "p10_ms": round(q[0] * 1e3, 4), "p90_ms": round(q[1] * 1e3, 4),
            "spread": round((q[1] - q[0]) / med, 4), "model": name, **cos,
        }), flush=True)


if __name__ == "__main__":
    main()
