#!/usr/bin/env python3
"""Builds the bimodal text set of the hybrid experiment from real English prose.

usage: make_trace.py --hetserve BIN --model DIR --out DIR [--short N] [--long N] [--seed S]

Source: the Python reference manual's topic texts that ship with every CPython installation
(pydoc_data.topics: the pages `help("assignment")` shows), prose paragraphs only (indented code
and grammar blocks are left out). Short texts are single sentences or pairs of consecutive
sentences; long texts are runs of consecutive sentences from one topic. Every candidate is
tokenized by `hetserve tokenize` with the served model's vocabulary, and kept only when its token
count (with [CLS] and [SEP]) lies in 8-32 (short) or 200-256 (long), untruncated.

Writes, in --out:
  trace.tsv   "short<TAB>text" and "long<TAB>text" lines, 4 short lines per long line, so that
              hetbench --texts picks 80 % short / 20 % long requests
  short.tsv, long.tsv   the two classes alone (for client-routed runs)
  lengths.txt  token-length summary of each class (the verification)
"""
import argparse
import json
import random
import re
import subprocess
import sys

SHORT = (8, 32)
LONG = (200, 256)


def prose_sentences():
    """Per topic, the sentences of its prose paragraphs, in order."""
    import pydoc_data.topics as t

    out = []
    for name in sorted(t.topics):
        paras, cur = [], []
        for line in t.topics[name].splitlines():
            if not line.strip():
                if cur:
                    paras.append(cur)
                cur = []
            else:
                cur.append(line)
        if cur:
            paras.append(cur)
        sents = []
        for p in paras:
            # prose: unindented lines (bullets allowed), not a heading underline, not a prompt
            if any(l.startswith("   ") and not l.lstrip().startswith(("*", "-")) and l == p[0]
                   for l in p[:1]):
                continue
            if any(set(l.strip()) <= set("*=-^~") for l in p) or any(">>>" in l for l in p):
                continue
            text = " ".join(l.strip() for l in p)
            text = re.sub(r"\s+", " ", text).strip()
            if len(text) < 20 or not re.search(r"[a-z]{3,}", text):
                continue
            for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"“(])", text):
                s = s.strip()
                if s:
                    sents.append(s)
        if sents:
            out.append(sents)
    return out


def candidates(topics):
    """Short and long candidate texts, estimated by word counts before tokenizing."""
    short, long_ = set(), set()
    for sents in topics:
        n = len(sents)
        for i in range(n):
            for k in (1, 2):
                if i + k <= n:
                    s = " ".join(sents[i:i + k])
                    w = len(s.split())
                    if 5 <= w <= 30:
                        short.add(s)
            words = 0
            for j in range(i, n):
                words += len(sents[j].split())
                if words > 230:
                    break
                if words >= 120:
                    long_.add(" ".join(sents[i:j + 1]))
    return sorted(short), sorted(long_)


def token_counts(hetserve, model, texts):
    """Token counts (with specials) and truncation flags, via `hetserve tokenize -`."""
    res = subprocess.run([hetserve, "tokenize", "--model", model, "-"],
                         input="\n".join(texts) + "\n", capture_output=True, text=True, check=True)
    rows = json.loads(res.stdout)
    if len(rows) != len(texts):
        raise SystemExit("make_trace: tokenize returned %d rows for %d texts"
                         % (len(rows), len(texts)))
    return [(len(r["ids"]), r["truncated"]) for r in rows]


def pick(hetserve, model, texts, lo, hi, n, rng):
    counts = token_counts(hetserve, model, texts)
    ok = [(t, c) for t, (c, trunc) in zip(texts, counts) if lo <= c <= hi and not trunc]
    rng.shuffle(ok)
    # prefer texts that do not overlap too much: at most 3 candidates per first sentence
    seen, out = {}, []
    for t, c in ok:
        key = t[:60]
        if seen.get(key, 0) >= 3:
            continue
        seen[key] = seen.get(key, 0) + 1
        out.append((t, c))
        if len(out) == n:
            break
    return out


def summary(name, rows, lo, hi):
    cs = sorted(c for _, c in rows)
    if not cs:
        return "%s: none" % name
    q = lambda p: cs[min(len(cs) - 1, int(p * (len(cs) - 1)))]
    bad = sum(1 for c in cs if not lo <= c <= hi)
    return ("%-5s %4d texts, tokens min %d p50 %d max %d (range %d-%d, outside: %d)"
            % (name, len(cs), cs[0], q(0.5), cs[-1], lo, hi, bad))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetserve", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--short", type=int, default=800)
    ap.add_argument("--long", type=int, default=200)
    ap.add_argument("--seed", type=int, default=5)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    topics = prose_sentences()
    cs, cl = candidates(topics)
    short = pick(a.hetserve, a.model, cs, SHORT[0], SHORT[1], a.short, rng)
    long_ = pick(a.hetserve, a.model, cl, LONG[0], LONG[1], a.long, rng)
    n_long = min(len(long_), len(short) // 4)
    if n_long < 20:
        raise SystemExit("make_trace: too few texts (short %d, long %d)" % (len(short), len(long_)))
    short, long_ = short[:4 * n_long], long_[:n_long]
    # re-tokenize the final set: the check the report quotes
    for rows in (short, long_):
        again = token_counts(a.hetserve, a.model, [t for t, _ in rows])
        if [c for c, _ in again] != [c for _, c in rows]:
            raise SystemExit("make_trace: token counts changed on re-tokenizing")
    with open(a.out + "/short.tsv", "w") as f:
        f.writelines("short\t%s\n" % t for t, _ in short)
    with open(a.out + "/long.tsv", "w") as f:
        f.writelines("long\t%s\n" % t for t, _ in long_)
    mixed = ["short\t%s\n" % t for t, _ in short] + ["long\t%s\n" % t for t, _ in long_]
    rng.shuffle(mixed)
    with open(a.out + "/trace.tsv", "w") as f:
        f.writelines(mixed)
    import pydoc_data
    lines = ["source: CPython %s pydoc_data.topics (Python reference manual prose)"
             % sys.version.split()[0],
             summary("short", short, *SHORT), summary("long", long_, *LONG),
             "trace.tsv: %d lines, %.0f %% short" % (len(mixed), 100.0 * len(short) / len(mixed))]
    with open(a.out + "/lengths.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
