"""Writes data/calib/calib.txt, the calibration set `hetserve quantize` uses by default.

Real English written for this project, so that nothing in it comes from elsewhere and nothing
overlaps an evaluation set (the golden sentences of tools/golden/corpus.py, the VADER test split
of the sentiment heads): everyday sentences written for it (tools/quant/everyday.txt: questions,
news, reviews, requests), the sentences of the repository's own prose (README.md, bench/*.md,
heads/REPORT.md) with markdown stripped, and longer texts made by joining consecutive sentences
of both, so that short queries and paragraph-length inputs are both represented. Deterministic: the same
documents always give the same file. Usage: python3 tools/quant/make_calib.py [--check]
(--check exits 1 when the committed file differs from what the documents give now).
"""

import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS = ["README.md", "bench/SERVING.md", "heads/REPORT.md"]
OUT = os.path.join(ROOT, "data", "calib", "calib.txt")


def prose_lines(text):
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code or line.startswith("|") or line.startswith("#"):
            continue
        line = re.sub(r"`([^`]*)`", r"\1", line)
        line = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line)
        line = re.sub(r"[*_]{1,2}([^*_]+)[*_]{1,2}", r"\1", line)
        line = line.strip().lstrip("-").strip()
        if line:
            yield line


def sentences(text):
    paras, cur = [], []
    for line in prose_lines(text):
        cur.append(line)
        if line.endswith((".", ":", ")")):
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    out = []
    for p in paras:
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", p):
            words = s.split()
            if 3 <= len(words) <= 80:
                out.append(" ".join(words))
    return out


def build():
    sents = []
    for d in DOCS:
        with open(os.path.join(ROOT, d), encoding="utf-8") as f:
            sents.extend(sentences(f.read()))
    with open(os.path.join(ROOT, "tools", "quant", "everyday.txt"), encoding="utf-8") as f:
        everyday = [l.strip() for l in f if l.strip()]
    seen, uniq = set(), []
    for s in everyday + sents:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    longer = [" ".join(uniq[i:i + 5]) for i in range(0, len(uniq) - 4, 6)]
    # disjoint from the golden sentences, which evaluate what quantization plans
    import json
    with open(os.path.join(ROOT, "tests", "golden", "embeddings.json"), encoding="utf-8") as f:
        golden = {s if isinstance(s, str) else s["text"] for s in json.load(f)["sentences"]}
    overlap = [t for t in uniq + longer if t in golden]
    if overlap:
        sys.exit(f"make_calib: {len(overlap)} texts are golden sentences, e.g. {overlap[0]!r}")
    return uniq + longer


def main():
    lines = build()
    text = "".join(l + "\n" for l in lines)
    if "--check" in sys.argv:
        with open(OUT, encoding="utf-8") as f:
            sys.exit(0 if f.read() == text else 1)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"{OUT}: {len(lines)} texts")


if __name__ == "__main__":
    main()
