# Image requests through the load generator and the capture (issue 24): hetbench --images sends
# a folder's JPEG / PNG files as raw bytes to POST /v1/ocr; the server's capture records each
# /v1/ocr request's Content-Type and size, and its body (base64) with server.capture.texts; and
# hetbench replay sends the captured bodies again, byte for byte, to a second server (capturing
# too). Skips (one line) like test_ocr.py without the OpenVINO plugin or the PP-OCRv5 models.
import base64
import json
import os
import subprocess

import pytest

from hetserve_fixture import BINARY, Server
from test_ocr import DATA, MODELS, PLUGIN, SKIP

HETBENCH = os.path.join(os.path.dirname(BINARY), "hetbench")

pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1
  - name: ov
    kind: plugin
    library: "%(plugin)s"
    threads: 2
server:
  capture:
    file: "%(capture)s"
%(texts)spipelines:
  - name: ocr
    det: "%(m)s/det.onnx"
    rec: "%(m)s/rec.onnx"
    dict: "%(m)s/dict.txt"
    det_engine: ov
    rec_engine: ov
    cpu_workers: 2
    rec_images: 1
"""


def config(capture, texts):
    return CONFIG % {"plugin": PLUGIN, "m": MODELS, "capture": capture,
                     "texts": "    texts: true\n    buffer_bytes: 4194304\n" if texts else ""}


def lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def hetbench(*args):
    if not os.path.exists(HETBENCH):
        pytest.skip("no %s (hetbench is built only with libcurl)" % HETBENCH)
    return subprocess.run([HETBENCH, *args], capture_output=True, text=True, timeout=300)


def files():
    out = {}
    for n in sorted(os.listdir(DATA)):
        with open(os.path.join(DATA, n), "rb") as f:
            out[n] = f.read()
    return out


def test_images_capture_and_replay(tmp_path):
    imgs = files()
    first, second = str(tmp_path / "first.jsonl"), str(tmp_path / "second.jsonl")
    a = Server(config(first, True))
    try:
        out = hetbench("--images", DATA, "--rate", "4", "--requests", "8", "--duration", "30",
                       "--seed", "3", "--url", "http://127.0.0.1:%d" % a.port, "--json")
    finally:
        a.stop()
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["all"]["requests"] == 8 and rep["all"]["ok"] == 8, rep
    x = lines(first)
    assert len(x) == 8 and {l["endpoint"] for l in x} == {"/v1/ocr"}
    assert {l["status"] for l in x} == {200}
    sent = []
    for l in x:
        body = base64.b64decode(l["body"])
        assert l["content_type"] == "image/jpeg" and l["body_bytes"] == len(body)
        assert body in imgs.values()  # the file as it is on disk, byte for byte
        sent.append(body)
    b = Server(config(second, True))
    try:
        out = hetbench("replay", first, "--speed", "2", "--json",
                       "--url", "http://127.0.0.1:%d" % b.port)
    finally:
        b.stop()
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["all"]["requests"] == 8 and rep["all"]["ok"] == 8, rep
    y = lines(second)
    assert sorted(base64.b64decode(l["body"]) for l in y) == sorted(sent)
    assert {l["content_type"] for l in y} == {"image/jpeg"}


def test_capture_without_bodies_is_not_replayable(tmp_path):
    cap = str(tmp_path / "cap.jsonl")
    a = Server(config(cap, False))
    try:
        with open(os.path.join(DATA, "render_05.jpg"), "rb") as f:
            jpg = f.read()
        s, _, _ = a.request("POST", "/v1/ocr", jpg, {"Content-Type": "image/jpeg"}, timeout=300)
        assert s == 200
        s, _, _ = a.request("POST", "/v1/ocr", b"not an image", {"Content-Type": "image/png"})
        assert s == 400
    finally:
        a.stop()
    x = lines(cap)
    assert [(l["status"], l["content_type"], l["body_bytes"]) for l in x] == \
        [(200, "image/jpeg", len(jpg)), (400, "image/png", 12)]
    assert all("body" not in l and l["tokens"] == [] for l in x)
    out = hetbench("replay", cap, "--url", "http://127.0.0.1:9")
    assert out.returncode == 2 and "server.capture.texts" in out.stderr, out.stderr


def test_images_bad_folder(tmp_path):
    (tmp_path / "README").write_text("no images here\n")
    out = hetbench("--images", str(tmp_path), "--rate", "1", "--requests", "1",
                   "--url", "http://127.0.0.1:9")
    assert out.returncode == 2 and "no JPEG or PNG" in out.stderr, out.stderr
    out = hetbench("--images", str(tmp_path / "nope"), "--rate", "1",
                   "--url", "http://127.0.0.1:9")
    assert out.returncode == 2 and "cannot open folder" in out.stderr, out.stderr
    out = hetbench("--images", DATA, "--texts", str(tmp_path / "README"), "--rate", "1")
    assert out.returncode == 2 and "--images" in out.stderr, out.stderr
