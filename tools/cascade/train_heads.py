#!/usr/bin/env python3
"""Trains the cascade's sentiment heads and reports small / big / cascade accuracy.

Training script only (Python is never on the serving path). Steps:
  1. data: downloads the vaderSentiment 3.3.2 sdist with pip (its additional_resources/ carry
     the ICWSM 2014 movie-review snippets with human ratings), checks the member's sha256 and
     applies the label and split rules of tools/cascade/split.json (committed; the data is not);
  2. embeddings: computed by hetserve itself (`hetserve embed --model DIR -`, CPU engine, the
     same code that serves), so the heads are trained and evaluated on exactly the vectors they
     will see at serving time; cached under .cache/cascade/ (git-ignored);
  3. heads: L2-regularized logistic regression per encoder (C picked by 5-fold cross-validation
     on the training rows), written as a 2-class softmax head: heads/<model>-sentiment.json
     {labels, dim, weight [classes][dim], bias [classes]}; softmax(W x + b) equals the binary
     model's sigmoid;
  4. report: accuracy of the small model alone, the big model alone, and the cascade (small
     first; escalate to big when the small head's top probability < threshold) at several
     thresholds with the escalation rate, and with an escalation cap; written as markdown.

Usage: train_heads.py [--hetserve build/hetserve] [--small models/all-MiniLM-L6-v2]
                      [--big models/all-mpnet-base-v2] [--out heads] [--threads N]
Needs numpy and scikit-learn.
"""

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SPLIT = os.path.join(ROOT, "tools", "cascade", "split.json")
THRESHOLDS = [0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99]
CAPS = [0.1, 0.2, 0.3]


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def fetch_snippets(split, cache):
    """The ground-truth file's bytes, from the pip-downloaded sdist (cached)."""
    src = split["source"]
    path = os.path.join(cache, "movieReviewSnippets_GroundTruth.txt")
    if os.path.exists(path):
        data = open(path, "rb").read()
        if sha256(data) == src["member_sha256"]:
            return data
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
               "-d", tmp, "vaderSentiment==3.3.2"]
        subprocess.run(cmd, check=True)
        with tarfile.open(os.path.join(tmp, src["sdist"])) as sd:
            inner = sd.extractfile(src["archive"]).read()
        with tarfile.open(fileobj=io.BytesIO(inner)) as t:
            data = t.extractfile(src["member"]).read()
    if sha256(data) != src["member_sha256"]:
        sys.exit("snippets file has sha256 %s, expected %s" % (sha256(data), src["member_sha256"]))
    os.makedirs(cache, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return data


def load_rows(split, data):
    rows = []
    for line in data.decode("utf-8").splitlines():
        rid, score, text = line.split("\t")
        rows.append((int(rid), float(score), text))
    c = split["counts"]
    assert len(rows) == c["rows"], len(rows)
    kept = [r for r in rows if r[1] != 0.0]
    assert len(rows) - len(kept) == c["dropped_zero"]
    train = [r for r in kept if r[0] % 5 != 0]
    test = [r for r in kept if r[0] % 5 == 0]
    assert (len(train), len(test)) == (c["train"], c["test"]), (len(train), len(test))
    return train, test


def embed(hetserve, model_dir, texts, cache, threads, dtype=None):
    """[n, dim] float32 embeddings from `hetserve embed`, cached by model and text list.

    dtype (optional): the lane's `--dtype` (int8, bf16, ...); None is the engine's default
    (f32). A reduced lane's cache entry is also keyed by the folder's quant.json, so a
    re-quantized folder is never answered from a stale cache."""
    name = os.path.basename(os.path.normpath(model_dir))
    keyed = "\n".join(texts)
    if dtype is not None:
        name += "-" + dtype
        qpath = os.path.join(model_dir, "quant.json")
        if os.path.exists(qpath):
            keyed += "\n" + open(qpath).read()
    key = sha256(keyed.encode("utf-8"))[:16]
    path = os.path.join(cache, "%s-%s.npy" % (name, key))
    if os.path.exists(path):
        return np.load(path)
    cmd = [hetserve, "embed", "--model", model_dir]
    if dtype is not None:
        cmd += ["--dtype", dtype]
    if threads:
        cmd += ["--threads", str(threads)]
    cmd.append("-")
    assert all("\n" not in t and "\r" not in t for t in texts)
    r = subprocess.run(cmd, input="\n".join(texts) + "\n", capture_output=True, text=True,
                       check=True)
    doc = json.loads(r.stdout)
    emb = np.array([d["embedding"] for d in doc["data"]], dtype=np.float32)
    assert emb.shape[0] == len(texts)
    os.makedirs(cache, exist_ok=True)
    np.save(path, emb)
    return emb


def train_head(x, y):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    best = None
    for c in (0.3, 1.0, 3.0, 10.0, 30.0, 100.0):
        lr = LogisticRegression(C=c, max_iter=5000)
        acc = cross_val_score(lr, x, y, cv=5).mean()
        if best is None or acc > best[0]:
            best = (acc, c)
    lr = LogisticRegression(C=best[1], max_iter=5000).fit(x, y)
    w = lr.coef_[0].astype(np.float64)
    b = float(lr.intercept_[0])
    # sigmoid(z) == softmax([-z/2, z/2])[1]
    weight = np.stack([-w / 2, w / 2]).astype(np.float32)
    bias = np.array([-b / 2, b / 2], dtype=np.float32)
    return weight, bias, best[1], best[0]


def apply_head(weight, bias, x):
    z = x.astype(np.float32) @ weight.T + bias
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def write_head(path, model, labels, weight, bias, meta):
    doc = {
        "format": 1,
        "kind": "softmax-linear",
        "model": model,
        "task": "sentiment",
        "labels": labels,
        "dim": int(weight.shape[1]),
        "weight": [[float("%.9g" % v) for v in row] for row in weight],
        "bias": [float("%.9g" % v) for v in bias],
        "training": meta,
    }
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


def cascade(ps, pb, y, thr, cap=None):
    """Decision per row in order: small unless its confidence < thr; escalations beyond
    cap * rows-seen stay with the small answer (as the server's cap does)."""
    conf = ps.max(axis=1)
    pred = ps.argmax(axis=1).copy()
    esc = capped = 0
    for i in range(len(y)):
        if conf[i] < thr:
            if cap is not None and esc + 1 > cap * (i + 1):
                capped += 1
                continue
            esc += 1
            pred[i] = pb[i].argmax()
    return float((pred == y).mean()), esc / len(y), capped / len(y)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hetserve", default=os.environ.get("HETSERVE_BIN", os.path.join(ROOT, "build", "hetserve")))
    ap.add_argument("--small", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--big", default=os.path.join(ROOT, "models", "all-mpnet-base-v2"))
    ap.add_argument("--out", default=os.path.join(ROOT, "heads"))
    ap.add_argument("--cache", default=os.path.join(ROOT, ".cache", "cascade"))
    ap.add_argument("--threads", type=int, default=0, help="hetserve embed --threads (0: all)")
    args = ap.parse_args()

    split = json.load(open(SPLIT))
    train, test = load_rows(split, fetch_snippets(split, args.cache))
    labels = split["labels"]
    ytr = np.array([1 if r[1] > 0 else 0 for r in train])
    yte = np.array([1 if r[1] > 0 else 0 for r in test])
    probs = {}
    lines = []
    for role, mdir in (("small", args.small), ("big", args.big)):
        name = os.path.basename(os.path.normpath(mdir))
        xtr = embed(args.hetserve, mdir, [r[2] for r in train], args.cache, args.threads)
        xte = embed(args.hetserve, mdir, [r[2] for r in test], args.cache, args.threads)
        weight, bias, c, cv = train_head(xtr, ytr)
        p = apply_head(weight, bias, xte)
        acc = float((p.argmax(axis=1) == yte).mean())
        meta = {
            "script": "tools/cascade/train_heads.py",
            "data": "tools/cascade/split.json (train rows)",
            "embeddings": "hetserve embed (CPU engine)",
            "classifier": "sklearn LogisticRegression, L2, C=%g (5-fold CV accuracy %.4f)" % (c, cv),
            "train_rows": len(train),
            "test_rows": len(test),
            "test_accuracy": round(acc, 4),
        }
        os.makedirs(args.out, exist_ok=True)
        write_head(os.path.join(args.out, "%s-sentiment.json" % name), name, labels, weight, bias, meta)
        probs[role] = p
        lines.append((role, name, acc, c, cv))
        print("%s %s: test accuracy %.4f (C=%g, CV %.4f)" % (role, name, acc, c, cv), flush=True)

    ps, pb = probs["small"], probs["big"]
    out = []
    out.append("# Cascade sentiment heads: accuracy report\n")
    out.append("Generated by `tools/cascade/train_heads.py`. Data: VADER movie-review snippets "
               "(vaderSentiment 3.3.2 sdist), split per `tools/cascade/split.json`: %d train, %d "
               "test rows (%d positive in test). Embeddings from `hetserve embed` (CPU engine); "
               "heads are logistic regression on them.\n" % (len(train), len(test), int(yte.sum())))
    out.append("| encoder | role | test accuracy | C | 5-fold CV (train) |")
    out.append("| --- | --- | --- | --- | --- |")
    for role, name, acc, c, cv in lines:
        out.append("| %s | %s | %.4f | %g | %.4f |" % (name, role, acc, c, cv))
    out.append("\nCascade: the small model answers unless its top probability is below the "
               "threshold; then the big model answers. No cap:\n")
    out.append("| threshold | accuracy | escalation rate |")
    out.append("| --- | --- | --- |")
    for t in THRESHOLDS:
        acc, esc, _ = cascade(ps, pb, yte, t)
        out.append("| %.2f | %.4f | %.3f |" % (t, acc, esc))
    out.append("\nWith a cap on the escalation ratio (rows in test order; an escalation that "
               "would exceed cap x rows-so-far keeps the small answer, counted as capped):\n")
    out.append("| threshold | cap | accuracy | escalated | capped |")
    out.append("| --- | --- | --- | --- | --- |")
    for t in (0.9, 0.95):
        for cap in CAPS:
            acc, esc, capped = cascade(ps, pb, yte, t, cap)
            out.append("| %.2f | %.2f | %.4f | %.3f | %.3f |" % (t, cap, acc, esc, capped))
    text = "\n".join(out) + "\n"
    with open(os.path.join(args.out, "REPORT.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
