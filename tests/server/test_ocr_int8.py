# The int8 PP-OCRv5 detector (tests/data/ocr-int8/det_int8.onnx, QDQ, tools/golden/ocr_quantize.py)
# on the OpenVINO engine: the committed images read within one point of character accuracy of
# the f32 detector's, both against the reference's readings (tests/golden/ocr/pipeline.json).
# Skips (one line) like test_ocr.py without the plugin or the models.
import json
import os
import subprocess

import pytest

from test_ocr import DATA, GOLDEN, MODELS, ROOT, SKIP, edit, ocr_args, quad_iou

INT8 = os.path.join(ROOT, "tests", "data", "ocr-int8", "det_int8.onnx")

pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")


def read(det):
    args = ocr_args(DATA)
    args[args.index("--det") + 1] = det
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return {os.path.basename(json.loads(l)["image"]): json.loads(l)["lines"]
            for l in p.stdout.splitlines()}


def char_accuracy(golden, got):
    """1 - edit distance over the reference's characters: lines matched by box (IoU >= 0.5),
    missed lines counting whole, extra lines as insertions"""
    errs = chars = same = 0
    for name, g in golden.items():
        ref, ours, used = g["lines"], got[name], set()
        for r in ref:
            chars += len(r["text"])
            best, bj = 0.0, None
            for j, o in enumerate(ours):
                if j not in used:
                    v = quad_iou(r["box"], o["box"])
                    if v > best:
                        best, bj = v, j
            if bj is not None and best >= 0.5:
                used.add(bj)
                errs += edit(r["text"], ours[bj]["text"])
                same += r["text"] == ours[bj]["text"]
            else:
                errs += len(r["text"])
        errs += sum(len(o["text"]) for j, o in enumerate(ours) if j not in used)
    return 1 - errs / chars, same


def test_int8_detector_within_one_point():
    golden = json.load(open(GOLDEN))["images"]
    f32, f32_same = char_accuracy(golden, read(os.path.join(MODELS, "det.onnx")))
    i8, i8_same = char_accuracy(golden, read(INT8))
    lines = sum(len(g["lines"]) for g in golden.values())
    print("character accuracy f32 %.4f (%d of %d lines identical), int8 %.4f (%d)" % (
        f32, f32_same, lines, i8, i8_same))
    assert i8 >= f32 - 0.01
    assert i8_same >= 0.9 * lines
