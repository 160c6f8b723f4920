#!/usr/bin/env python3
"""Golden of the PP-PicoDet post-processing (GFL box decode, per-stride top-k, per-class hard NMS,
boxes back to the image) for tests/ops/test_gfl.c: rapid-layout's own PPPostProcess.__call__
(rapid_layout/model_handler/pp/post_process.py, imported by file path, not the package) run on
head outputs of the detector's shape (strides 8, 16, 32, 64; 10 classes; 4 sides x 8 bins) for
a small 64x96 input, so that the stride-64 grid is fractional (ceil) and the per-stride top-k
(set to 20 here) cuts the finer strides. The outputs are drawn from a seeded generator: a few
confident anchors with peaked distributions among low-scoring ones.

    pip install --no-deps rapid-layout==1.2.1
    python tools/golden/gen_gfl.py --out tests/golden/gfl/picodet_small.json \\
        --prep tests/golden/gfl/prep_skimage_page_48x64.f32

--prep also writes the detector's preprocessing, rapid-layout's PPPreProcess (pre_process.py:
cv2.resize to a fixed size, ImageNet mean / std, BGR as cv2 reads it), at 48 x 64 (w x h) of
tests/data/ocr/skimage_page.jpg as raw float32 CHW (needs opencv-python-headless).
"""
import argparse
import importlib.util
import json
import os
import sys

import numpy as np


def post_process_module():
    spec = importlib.util.find_spec("rapid_layout")
    if not spec or not spec.submodule_search_locations:
        sys.exit("gen_gfl.py: rapid-layout is not installed (pip install --no-deps "
                 "rapid-layout==1.2.1)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "model_handler", "pp",
                        "post_process.py")
    s = importlib.util.spec_from_file_location("rl_post", path)
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m


def prep_golden(path):
    import cv2
    spec = importlib.util.find_spec("rapid_layout")
    f = os.path.join(list(spec.submodule_search_locations)[0], "model_handler", "pp",
                     "pre_process.py")
    s = importlib.util.spec_from_file_location("rl_pre", f)
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    here = os.path.dirname(os.path.abspath(__file__))
    img = cv2.imread(os.path.join(here, "..", "..", "tests", "data", "ocr", "skimage_page.jpg"))
    x = m.PPPreProcess(img_size=(64, 48))(img)
    assert x.shape == (1, 3, 64, 48), x.shape
    x[0].astype("<f4").tofile(path)
    print("%s: %s of an image %s" % (path, list(x.shape), list(img.shape)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--prep", help="write the preprocessing golden here")
    a = ap.parse_args()
    if a.prep:
        prep_golden(a.prep)
    pp = post_process_module()
    rng = np.random.default_rng(24)
    in_h, in_w, nc, bins = 64, 96, 10, 8
    orig_h, orig_w = 150, 230
    strides = [8, 16, 32, 64]
    scores, dists = [], []
    for s in strides:
        n = int(np.ceil(in_h / s)) * int(np.ceil(in_w / s))
        sc = (rng.random((n, nc)) ** 4).astype(np.float32) * 0.6
        hot = rng.choice(n, size=max(1, n // 6), replace=False)
        sc[hot, rng.integers(0, nc, size=len(hot))] = rng.uniform(0.5, 1.0, len(hot))
        d = rng.normal(0, 1.5, (n, 4, bins))
        d[np.arange(n)[:, None], np.arange(4)[None], rng.integers(0, bins, (n, 4))] += 4
        scores.append(np.round(sc, 5).astype(np.float32)[None])
        dists.append(np.round(d.reshape(n, 4 * bins), 4).astype(np.float32)[None])
    labels = ["c%d" % i for i in range(nc)]
    post = pp.PPPostProcess(labels, 0.5, 0.5)
    post.nms_top_k = 20
    x = np.zeros((1, 3, in_h, in_w), np.float32)
    boxes, sc, names = post((orig_h, orig_w), x, scores + dists)
    g = {
        "generator": "tools/golden/gen_gfl.py",
        "reference": "rapid-layout 1.2.1 PPPostProcess.__call__",
        "input": [in_h, in_w], "image": [orig_h, orig_w], "strides": strides,
        "classes": nc, "reg_max": bins - 1,
        "params": {"top_k": post.nms_top_k, "score_thresh": post.conf_thres,
                   "iou_thresh": post.iou_thres, "candidates_max": 200,
                   "keep_max": post.keep_top_k},
        "scores": [[[float(v) for v in r] for r in s[0]] for s in scores],
        "dists": [[[float(v) for v in r] for r in d[0]] for d in dists],
        "dets": [{"class": labels.index(c), "score": float(p), "box": [float(v) for v in b]}
                 for b, p, c in zip(boxes, sc, names)],
    }
    with open(a.out, "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")
    print("%s: %d detections" % (a.out, len(g["dets"])))


if __name__ == "__main__":
    main()
