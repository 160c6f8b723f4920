#!/usr/bin/env python3
"""Peer benchmark: OpenVINO (CPU device, fp32) on the ONNX graph bench/ort_bench.py builds.

Benchmark tooling only; never on the serving path.

1. Graph: OUT/<model>/model_opt.onnx, the transformer-optimised graph that ONNX Runtime runs
   (ort_bench.py exports and optimises it when missing). OpenVINO's ONNX frontend reads its
   com.microsoft ops (EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu)
   itself. Dynamic batch and sequence axes are kept, as for ORT; only sentence_embedding stays
   a model output (last_hidden_state's Result is removed, as ORT fetches only the embedding).
2. Compile: ov.Core().compile_model(model, "CPU", {INFERENCE_NUM_THREADS: N, NUM_STREAMS: 1,
   PERFORMANCE_HINT: LATENCY, INFERENCE_PRECISION_HINT: f32}). The precision hint matters: on a
   CPU with AMX / AVX512-BF16 OpenVINO otherwise computes in bf16 by default.
3. Time: one InferRequest, infer() with shared input buffers; per shape warm-up, then as many
   timed runs as fit in --budget-s (at least --min-iters), median reported -- the same loop and
   the same inputs (real token ids, full length) as ort_bench.py.
4. --golden DIR: before timing, every golden sentence (token ids, one per run, no padding)
   through OpenVINO and through ONNX Runtime fp32 on the same graph; a line
   {"cosine":"openvino",...} gives the cosine to ORT fp32 and to the golden reference, and every
   timing line carries cos_min / cos_mean.

Prints one JSON line per shape, the fields of ort_bench.py with "engine":"openvino".

Usage: ov_bench.py [--model models/all-MiniLM-L6-v2] [--threads 2]
                   [--shapes 1x16,1x128,32x128] [--budget-s 10] [--golden DIR]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ort_bench  # noqa: E402  (shares the export, the inputs, the FLOP count and the timing loop)


class Session:
    """An OpenVINO compiled model behind the one method ort_bench.time_shape calls."""

    def __init__(self, compiled):
        self.req = compiled.create_infer_request()
        self.out = compiled.output("sentence_embedding")

    def run(self, names, feed):
        self.req.infer(feed, share_inputs=True)
        return [self.req.get_tensor(self.out).data]


def compile_model(path, threads):
    import openvino as ov

    core = ov.Core()
    model = core.read_model(path)
    for r in model.get_results():
        if "last_hidden_state" in r.input_value(0).get_names():
            model.remove_result(r)
    cfg = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
           "INFERENCE_PRECISION_HINT": "f32"}
    compiled = core.compile_model(model, "CPU", cfg)
    got = {}
    for k in cfg:
        v = compiled.get_property(k)
        got[k] = v.get_type_name() if hasattr(v, "get_type_name") else str(v)
    return compiled, got, ov.get_version()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ort_bench.REPO, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--out", default=os.path.join(ort_bench.REPO, "bench", "out"),
                    help="ONNX files are read from OUT/<model name>/")
    ap.add_argument("--threads", type=int, default=2, help="INFERENCE_NUM_THREADS")
    ap.add_argument("--shapes", default="1x16,1x128,32x128", help="comma-separated BATCHxSEQ")
    ap.add_argument("--budget-s", type=float, default=10.0, help="timed seconds per shape (bound)")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--golden", help="golden folder (embeddings.json + .f32): print cosines first")
    args = ap.parse_args()

    from transformers import AutoConfig, AutoTokenizer

    model_dir = args.model
    name = os.path.basename(os.path.normpath(model_dir))
    opt_path = os.path.join(args.out, name, "model_opt.onnx")
    if not os.path.exists(opt_path):
        subprocess.run([sys.executable, os.path.join(HERE, "ort_bench.py"), "--model", model_dir,
                        "--out", args.out, "--no-bench"], check=True, stdout=subprocess.DEVNULL)
    _, _, max_len = ort_bench.model_layout(model_dir)
    cfg = AutoConfig.from_pretrained(model_dir)
    compiled, props, version = compile_model(opt_path, args.threads)
    print(json.dumps({"model": name, "openvino": version, "graph": os.path.basename(opt_path),
                      "config": props}), flush=True)
    sess = Session(compiled)

    cos = {}
    if args.golden:
        token_ids, golden = ort_bench.load_golden(args.golden)
        emb = ort_bench.embed_each(lambda feed: sess.run(None, feed)[0].copy(), token_ids)
        ref_sess = ort_bench.session(opt_path, args.threads)
        ref = ort_bench.embed_each(lambda feed: ref_sess.run(["sentence_embedding"], feed)[0],
                                   token_ids)
        del ref_sess
        cos = ort_bench.cosine_line("openvino", "f32", emb, ref, "onnxruntime-f32", golden)

    tok = AutoTokenizer.from_pretrained(model_dir)
    for shape in args.shapes.split(","):
        b, s = (int(v) for v in shape.lower().split("x"))
        if s > max_len:
            sys.exit("seq %d exceeds the model's max_seq_length %d" % (s, max_len))
        times = ort_bench.time_shape(sess, ort_bench.real_ids(tok, b, s), args.budget_s,
                                     args.min_iters, args.warmup_s)
        med = statistics.median(times)
        q = np.quantile(times, [0.1, 0.9])
        gflop = ort_bench.encoder_flops(b, s, cfg.hidden_size, cfg.intermediate_size,
                                        cfg.num_hidden_layers) / 1e9
        print(json.dumps({
            "engine": "openvino", "dtype": "f32", "batch": b, "seq": s,
            "ms": round(med * 1e3, 4), "seq_per_s": round(b / med, 2), "gflops": round(gflop / med, 2),
            "gflop": round(gflop, 4), "threads": args.threads, "iters": len(times),
            "min_ms": round(min(times) * 1e3, 4), "p10_ms": round(q[0] * 1e3, 4), "p90_ms": round(q[1] * 1e3, 4),
            "spread": round((q[1] - q[0]) / med, 4), "model": name, **cos,
        }), flush=True)


if __name__ == "__main__":
    main()
