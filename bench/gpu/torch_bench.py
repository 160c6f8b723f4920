#!/usr/bin/env python3
"""PyTorch peers for bench/gpu/run.sh (same CSV columns as bench_engine).

  torch_bench.py model --model DIR --batch 1,32,256 --seq 16,128,256 --iters N --csv FILE
      transformers BertModel from DIR in fp16 on the GPU, torch.inference_mode, the same work
      as hetserve's encoder (mean pooling + L2 normalize included), CUDA-event timing of the
      whole call including the host->device copy of the ids and the device->host copy of the
      embeddings.
  torch_bench.py peak --csv FILE
      cuBLAS fp16 GEMM peak probe: 8192^3 torch.matmul, fp16 in, fp32 accumulate.
"""
import argparse
import csv
import os
import sys


def flops(cfg, b, s):
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    return (2.0 * (4 * H * H + 2 * H * I) + 4.0 * s * H) * b * s * L


def append(path, row):
    fresh = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.writer(f)
        if fresh:
            w.writerow(["impl", "model", "engine", "dtype", "batch", "seq", "iters", "ms_mean",
                        "ms_min", "seq_per_s", "tflops", "copy_in_ms", "compute_ms",
                        "copy_out_ms", "graphs"])
        w.writerow(row)


def cmd_model(a):
    import torch
    from transformers import AutoConfig, AutoModel
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    cfg = AutoConfig.from_pretrained(a.model)
    # loaded in the default dtype, then cast: the fp16 file's values come back unchanged, and
    # this works whichever name (dtype / torch_dtype) the installed transformers prefers
    model = AutoModel.from_pretrained(a.model).to(dev).half().eval()
    name = os.path.basename(os.path.normpath(a.model))
    attn = getattr(model.config, "_attn_implementation", "?")
    print("torch %s, %s, attention %s" % (torch.__version__, torch.cuda.get_device_name(0), attn))
    g = torch.Generator().manual_seed(0)
    for b in [int(x) for x in a.batch.split(",")]:
        for s in [int(x) for x in a.seq.split(",")]:
            ids_host = torch.randint(1000, cfg.vocab_size - 1, (b, s), generator=g,
                                     dtype=torch.int64).pin_memory()
            mask_host = torch.ones(b, s, dtype=torch.int64).pin_memory()

            def run():
                ids = ids_host.to(dev, non_blocking=True)
                mask = mask_host.to(dev, non_blocking=True)
                h = model(input_ids=ids, attention_mask=mask).last_hidden_state
                m = mask.unsqueeze(-1).to(h.dtype)
                pooled = (h * m).sum(1) / m.sum(1)
                out = torch.nn.functional.normalize(pooled.float(), dim=-1)
                return out.to("cpu")

            with torch.inference_mode():
                for _ in range(a.warmup):
                    run()
                torch.cuda.synchronize()
                times = []
                for _ in range(a.iters):
                    t0 = torch.cuda.Event(enable_timing=True)
                    t1 = torch.cuda.Event(enable_timing=True)
                    t0.record()
                    run()
                    t1.record()
                    t1.synchronize()
                    times.append(t0.elapsed_time(t1))
            mean = sum(times) / len(times)
            tf = flops(cfg, b, s) / (mean * 1e-3) / 1e12
            print("%-18s %5d %5d %10.3f %10.3f %12.1f %8.2f" % ("torch-fp16", b, s, mean,
                  min(times), b / (mean * 1e-3), tf))
            append(a.csv, ["torch-fp16", name, "cuda", "F16", b, s, a.iters, "%.4f" % mean,
                           "%.4f" % min(times), "%.1f" % (b / (mean * 1e-3)), "%.3f" % tf,
                           "", "", "", ""])


def cmd_peak(a):
    import torch
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.float16)
    y = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(3):
        torch.matmul(x, y)
    torch.cuda.synchronize()
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    reps = 20
    t0.record()
    for _ in range(reps):
        torch.matmul(x, y)
    t1.record()
    t1.synchronize()
    ms = t0.elapsed_time(t1) / reps
    tf = 2.0 * n ** 3 / (ms * 1e-3) / 1e12
    print("gemm peak probe: fp16 %d^3 in %.3f ms = %.1f TFLOP/s" % (n, ms, tf))
    append(a.csv, ["cublas-gemm-peak", "gemm8192", "cuda", "F16", 1, n, reps, "%.4f" % ms,
                   "%.4f" % ms, "", "%.3f" % tf, "", "", "", ""])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model")
    m.add_argument("--model", required=True)
    m.add_argument("--batch", default="1,32,256")
    m.add_argument("--seq", default="16,128,256")
    m.add_argument("--iters", type=int, default=20)
    m.add_argument("--warmup", type=int, default=3)
    m.add_argument("--csv", required=True)
    p = sub.add_parser("peak")
    p.add_argument("--csv", required=True)
    a = ap.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            print("torch_bench: skipped: no GPU (torch sees no CUDA device)")
            return 0
    except ImportError:
        print("torch_bench: skipped: PyTorch not installed")
        return 0
    cmd_model(a) if a.cmd == "model" else cmd_peak(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
