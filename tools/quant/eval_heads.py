#!/usr/bin/env python3
"""Measures what reduced-precision lanes cost the committed sentiment heads; writes heads/PRECISION.md.

Evaluation script only (Python is never on the serving path). The heads in heads/*.json were
trained on f32 embeddings (tools/cascade/train_heads.py) and are NOT retrained here: this asks
how well they hold when the encoder runs in int8 or bf16 instead. Steps:
  1. data: the VADER test split, loaded by train_heads.py's own functions (same sdist, sha256
     check and split rules, same cache);
  2. int8 folders: `hetserve quantize --model DIR --out QDIR` per encoder, unless QDIR already
     holds a quant.json (--requantize redoes it); its printed table, exit status and wall time
     are kept beside QDIR as QDIR.quantize.json so the report can be regenerated later;
  3. embeddings of the test texts from `hetserve embed`: f32 (the model folder), int8 (the
     quantized folder, --dtype int8) and bf16 (the model folder, --dtype bf16), cached by
     train_heads.embed under .cache/cascade/;
  4. per encoder and lane: head accuracy, the change against f32 (target for int8: within 0.5
     point), rows whose prediction changed, cosine of each embedding to its f32 one;
  5. the cascade (small first, escalate to big below the threshold; default 0.7 as in the
     server's cascade.threshold) for several lane pairs, with the escalation rate.

Usage: eval_heads.py [--hetserve build/hetserve] [--small models/all-MiniLM-L6-v2]
                     [--big models/all-mpnet-base-v2] [--quant-dir .cache/quant]
                     [--out heads/PRECISION.md] [--threshold 0.7] [--threads N] [--requantize]
Needs numpy. Run it under `nice` on a shared machine: it runs every encoder three times.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "cascade"))
import train_heads as th  # noqa: E402  (data loading, embedding cache, head and cascade maths)

LANES = ("f32", "int8", "bf16")
TARGET_INT8_POINTS = 0.5
# (small lane, big lane) pairs for the cascade table; the first is the baseline.
CASCADE_PAIRS = [("f32", "f32"), ("int8", "f32"), ("bf16", "f32"), ("int8", "int8"), ("bf16", "bf16")]


def rel(path):
    return os.path.relpath(path, ROOT)


def unroot(text):
    """text with this checkout's absolute paths made relative (the report is committed)."""
    return text.replace(ROOT + os.sep, "")


def quantize(hetserve, model_dir, qdir, threads, redo):
    """Makes the int8 folder qdir (unless it exists); returns its log {cmd, rc, seconds, stdout, stderr}."""
    log_path = qdir.rstrip("/") + ".quantize.json"
    have = os.path.exists(os.path.join(qdir, "quant.json"))
    if have and not redo:
        if os.path.exists(log_path):
            return json.load(open(log_path))
        return {"cmd": None, "rc": None, "seconds": None, "stdout": None, "stderr": None}
    if os.path.exists(qdir):
        shutil.rmtree(qdir)
    os.makedirs(os.path.dirname(qdir) or ".", exist_ok=True)
    cmd = [hetserve, "quantize", "--model", model_dir, "--out", qdir]
    if threads:
        cmd += ["--threads", str(threads)]
    print("running: %s" % " ".join(cmd), flush=True)
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.monotonic() - t0
    sys.stderr.write(r.stderr)
    print(r.stdout, flush=True)
    # rc 1 with a written folder means "target not met"; that is a finding, not a failure here.
    if not os.path.exists(os.path.join(qdir, "quant.json")):
        sys.exit("quantize failed (exit %d): %s" % (r.returncode, r.stderr.strip()))
    log = {
        "cmd": " ".join([rel(c) if os.path.isabs(c) else c for c in cmd]),
        "rc": r.returncode,
        "seconds": round(secs, 1),
        "stdout": r.stdout,
        "stderr": r.stderr,
        "threads": threads or os.cpu_count(),
    }
    with open(log_path, "w") as f:
        json.dump(log, f, indent=1)
    return log


def load_head(path, name, dim):
    doc = json.load(open(path))
    if doc.get("model") != name or doc.get("dim") != dim:
        sys.exit("%s: head is for %s dim %s, embeddings are %s dim %d"
                 % (path, doc.get("model"), doc.get("dim"), name, dim))
    return doc


def cosines(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def git_head():
    try:
        r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, check=True)
        return r.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_line(hetserve):
    try:
        r = subprocess.run([hetserve, "devices"], capture_output=True, text=True, check=True)
        for e in json.loads(r.stdout)["engines"]:
            if e["kind"] == "cpu":
                return "%s, %s, %d threads, isa: %s" % (e["device"], e["gemm"], e["threads"], e["isa"])
    except (OSError, subprocess.CalledProcessError, ValueError, KeyError):
        pass
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hetserve",
                    default=os.environ.get("HETSERVE_BIN", os.path.join(ROOT, "build", "hetserve")))
    ap.add_argument("--small", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--big", default=os.path.join(ROOT, "models", "all-mpnet-base-v2"))
    ap.add_argument("--heads", default=os.path.join(ROOT, "heads"))
    ap.add_argument("--quant-dir", default=os.path.join(ROOT, ".cache", "quant"))
    ap.add_argument("--cache", default=os.path.join(ROOT, ".cache", "cascade"))
    ap.add_argument("--out", default=os.path.join(ROOT, "heads", "PRECISION.md"))
    ap.add_argument("--threshold", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=0, help="hetserve --threads (0: all)")
    ap.add_argument("--requantize", action="store_true", help="redo the int8 folders")
    args = ap.parse_args()

    split = json.load(open(th.SPLIT))
    train, test = th.load_rows(split, th.fetch_snippets(split, args.cache))
    texts = [r[2] for r in test]
    # int8 plans are calibrated on data/calib (the default of `hetserve quantize`); a VADER text
    # there would flatter the int8 lane.
    calib_path = os.path.join(ROOT, "data", "calib", "calib.txt")
    calib = set(line.rstrip("\n") for line in open(calib_path, encoding="utf-8"))
    overlap = sum(1 for r in train + test if r[2] in calib)
    y = np.array([1 if r[1] > 0 else 0 for r in test])

    models = {}  # role -> {name, dirs, qlog, emb[lane], p[lane], head}
    for role, mdir in (("small", args.small), ("big", args.big)):
        name = os.path.basename(os.path.normpath(mdir))
        if not os.path.exists(os.path.join(mdir, "model.safetensors")):
            sys.exit("%s: no model (scripts/setup --models all installs both encoders)" % mdir)
        qdir = os.path.join(args.quant_dir, name + "-int8")
        qlog = quantize(args.hetserve, mdir, qdir, args.threads, args.requantize)
        plan = json.load(open(os.path.join(qdir, "quant.json")))
        dirs = {"f32": (mdir, None), "int8": (qdir, "int8"), "bf16": (mdir, "bf16")}
        emb = {}
        for lane in LANES:
            d, dtype = dirs[lane]
            print("embedding %d test texts: %s %s" % (len(texts), name, lane), flush=True)
            emb[lane] = th.embed(args.hetserve, d, texts, args.cache, args.threads, dtype)
        head = load_head(os.path.join(args.heads, "%s-sentiment.json" % name), name, emb["f32"].shape[1])
        weight = np.array(head["weight"], dtype=np.float32)
        bias = np.array(head["bias"], dtype=np.float32)
        p = {lane: th.apply_head(weight, bias, emb[lane]) for lane in LANES}
        models[role] = {"name": name, "dir": mdir, "qdir": qdir, "qlog": qlog, "plan": plan,
                        "emb": emb, "p": p, "head": head}

    out = []
    w = out.append
    w("# Reduced-precision lanes vs the committed sentiment heads\n")
    w("Generated by `tools/quant/eval_heads.py` (hetserve %s; CPU engine: %s). Data: the VADER "
      "movie-review test split of `tools/cascade/split.json` (%d rows, %d positive), loaded by "
      "`tools/cascade/train_heads.py`. Heads: the committed `heads/*-sentiment.json`, trained on "
      "**f32** embeddings and not retrained; each lane's embeddings go through the same head "
      "(softmax of W x + b, as the server applies it).\n"
      % (git_head(), cpu_line(args.hetserve), len(test), int(y.sum())))
    w("Lanes: **f32** = `hetserve embed --model DIR -`; **int8** = `hetserve embed --model QDIR "
      "--dtype int8 -` where QDIR was made by `hetserve quantize --model DIR --out QDIR` (default "
      "calibration set `data/calib/calib.txt`, default target cos min 0.99 / mean 0.998 on its "
      "held-out part); **bf16** = `hetserve embed --model DIR --dtype bf16 -` (no plan). "
      "VADER texts (train or test) among the %d calibration lines: %d.\n" % (len(calib), overlap))

    w("## Head accuracy per lane\n")
    w("Target: int8 within %.1f point of f32 (one test row is %.3f point). \"Changed\" counts "
      "test rows whose predicted label differs from the f32 lane's; of those, \"fixed / broken\" "
      "is how many the lane gets right / wrong that f32 got wrong / right.\n"
      % (TARGET_INT8_POINTS, 100.0 / len(y)))
    w("| encoder | lane | accuracy | vs f32 (points) | target | changed rows | fixed / broken |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for role in ("small", "big"):
        m = models[role]
        pred = {lane: m["p"][lane].argmax(axis=1) for lane in LANES}
        ok32 = pred["f32"] == y
        for lane in LANES:
            acc = float((pred[lane] == y).mean())
            m.setdefault("acc", {})[lane] = acc
            if lane == "f32":
                w("| %s | f32 | %.4f | — | — | — | — |" % (m["name"], acc))
                continue
            d = 100.0 * (acc - m["acc"]["f32"])
            target = ("met" if abs(d) <= TARGET_INT8_POINTS else "**missed**") if lane == "int8" else "—"
            okl = pred[lane] == y
            changed = int((pred[lane] != pred["f32"]).sum())
            w("| %s | %s | %.4f | %+.2f | %s | %d (%.2f%%) | %d / %d |"
              % (m["name"], lane, acc, d, target, changed, 100.0 * changed / len(y),
                 int((okl & ~ok32).sum()), int((~okl & ok32).sum())))
    w("")
    for role in ("small", "big"):
        m = models[role]
        recorded = m["head"].get("training", {}).get("test_accuracy")
        if recorded is not None:
            same = abs(recorded - round(m["acc"]["f32"], 4)) < 1e-9
            w("- %s f32 accuracy %.4f %s the head's recorded test accuracy %.4f (heads/REPORT.md)."
              % (m["name"], m["acc"]["f32"], "matches" if same else "**differs from**", recorded))
    w("")

    w("## Embedding agreement with f32\n")
    w("Cosine of each test text's embedding in the lane to its f32 embedding.\n")
    w("| encoder | lane | mean cosine | min cosine | p1 cosine | texts below 0.99 |")
    w("| --- | --- | --- | --- | --- | --- |")
    for role in ("small", "big"):
        m = models[role]
        for lane in ("int8", "bf16"):
            c = cosines(m["emb"][lane], m["emb"]["f32"])
            w("| %s | %s | %.5f | %.5f | %.5f | %d |"
              % (m["name"], lane, c.mean(), c.min(), np.percentile(c, 1), int((c < 0.99).sum())))
    w("")

    s, b = models["small"], models["big"]
    w("## Cascade at threshold %.2f\n" % args.threshold)
    w("%s answers unless its head's top probability is below %.2f (the server's default "
      "`cascade.threshold`); then %s answers. No escalation cap. The first row is the all-f32 "
      "baseline.\n" % (s["name"], args.threshold, b["name"]))
    w("| small lane | big lane | accuracy | vs all-f32 (points) | escalation rate |")
    w("| --- | --- | --- | --- | --- |")
    base = None
    for ls, lb in CASCADE_PAIRS:
        acc, esc, _ = th.cascade(s["p"][ls], b["p"][lb], y, args.threshold)
        if base is None:
            base = acc
        w("| %s (%s) | %s (%s) | %.4f | %+.2f | %.3f |"
          % (ls, s["name"], lb, b["name"], acc, 100.0 * (acc - base), esc))
    w("")

    w("## int8 plans (`hetserve quantize`)\n")
    for role in ("small", "big"):
        m = models[role]
        plan, log = m["plan"], m["qlog"]
        ho = plan.get("heldout", {})
        w("### %s\n" % m["name"])
        if log.get("cmd"):
            w("`%s` — exit status %d, %.1f s wall on %s threads (machine shared with other work, "
              "so the time is indicative), under `nice -n 19`.\n"
              % (log["cmd"], log["rc"], log["seconds"], log.get("threads", "?")))
        else:
            w("(the folder `%s` existed before this run; its quantize output was not recorded)\n"
              % rel(m["qdir"]))
        w("Plan: keep_f32 = %s; smoothing alpha %s; held-out %s texts: cos min %s, mean %s; target met: %s.\n"
          % (json.dumps(plan.get("keep_f32")), plan.get("smoothing", {}).get("alpha"), ho.get("count"),
             ho.get("cos_min"), ho.get("cos_mean"), plan.get("target_met")))
        if log.get("stderr"):
            w("Progress (stderr): the smoothing search and each stage quantized alone:\n")
            w("```")
            w(unroot(log["stderr"]).rstrip("\n"))
            w("```\n")
        if log.get("stdout"):
            w("Table (stdout):\n")
            w("```")
            w(unroot(log["stdout"]).rstrip("\n"))
            w("```\n")

    w("## Commands\n")
    w("```")
    w("make build                                   # runs scripts/setup first")
    w("bash scripts/setup --models all              # all-mpnet-base-v2 into models/")
    w("nice -n 19 python3 tools/quant/eval_heads.py # this report; it runs, per encoder:")
    for role in ("small", "big"):
        m = models[role]
        d, q = rel(m["dir"]), rel(m["qdir"])
        w("#   hetserve quantize --model %s --out %s" % (d, q))
        w("#   hetserve embed --model %s - < test texts" % d)
        w("#   hetserve embed --model %s --dtype int8 - < test texts" % q)
        w("#   hetserve embed --model %s --dtype bf16 - < test texts" % d)
    w("```")
    w("Embeddings are cached under `%s/` and int8 folders (with `<folder>.quantize.json`, the "
      "quantize output) under `%s/`, both git-ignored; `--requantize` redoes the folders."
      % (rel(args.cache), rel(args.quant_dir)))
    text = "\n".join(out) + "\n"
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
