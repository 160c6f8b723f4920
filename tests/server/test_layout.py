# POST /v1/layout: configs/layout.yaml served as written (its model paths made absolute, its
# OpenVINO engines as the built plugin): PP-PicoDet layout detection with the backbone and the
# head as model stages on two engine instances, then gfl_decode and nms on the CPU. Four
# committed pages (three of tests/data/ocr/, and tests/data/layout/page.jpg: a synthetic page
# with text, a photograph, a table, their captions, a header and a footer) give the detections
# of rapid-layout's own pipeline (tests/golden/layout/detections.json, tools/golden/
# gen_layout.py): the same classes in the same order, box IoU >= 0.9, scores within 0.02. Bad
# bodies are a 400 that says why, and the server answers well after them. Skips (one line)
# without the plugin or models/layout (scripts/setup).
import base64
import json
import os

import pytest

from hetserve_fixture import ROOT, Server
from test_ocr import PLUGIN

LAYOUT = os.path.join(ROOT, "models", "layout")
GOLDEN = os.path.join(ROOT, "tests", "golden", "layout", "detections.json")


def why_skip():
    if not os.path.exists(PLUGIN):
        return "no OpenVINO engine plugin in this build"
    if not os.path.exists(os.path.join(LAYOUT, "backbone.onnx")):
        return "no layout models in %s (scripts/setup)" % LAYOUT
    return None


SKIP = why_skip()
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")


def config():
    with open(os.path.join(ROOT, "configs", "layout.yaml")) as f:
        text = f.read()
    for old, new in (('"models/layout/', '"%s/' % LAYOUT),
                     ("kind: openvino", 'kind: plugin\n    library: "%s"' % PLUGIN)):
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def srv():
    s = Server(config())
    yield s
    s.stop()


def layout(srv, body, ctype="image/jpeg"):
    s, h, d = srv.request("POST", "/v1/layout", body, headers={"Content-Type": ctype},
                          timeout=300)
    return s, h, json.loads(d) if d else None


def iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    area = lambda r: max(0.0, r[2] - r[0]) * max(0.0, r[3] - r[1])
    return inter / (area(a) + area(b) - inter + 1e-9)


def image(path):
    """a committed image by its path from the repository root"""
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def test_detects_as_the_reference(srv):
    g = json.load(open(GOLDEN))
    assert g["images"]
    for im in g["images"]:
        s, h, b = layout(srv, image(im["image"]))
        assert s == 200, (s, b)
        assert [b["width"], b["height"]] == im["size"], b
        got, want = b["detections"], im["dets"]
        assert [d["class"] for d in got] == [d["class"] for d in want], (im["image"], got, want)
        for d, w in zip(got, want):
            assert d["label"] == w["label"] == g["labels"][w["class"]], (d, w)
            assert iou(d["box"], w["box"]) >= 0.9, (im["image"], d, w)
            assert abs(d["score"] - w["score"]) <= 0.02, (im["image"], d, w)
        # both halves ran, each on its own engine
        assert set(b["engines"]) == {"backbone", "head"}, b["engines"]
        assert b["engines"]["backbone"] != b["engines"]["head"], b["engines"]


def test_json_body_is_the_ocr_one(srv):
    im = json.load(open(GOLDEN))["images"][0]
    body = json.dumps({"image": base64.b64encode(image(im["image"])).decode()})
    s, _, b = layout(srv, body.encode(), "application/json")
    assert s == 200, (s, b)
    assert [d["class"] for d in b["detections"]] == [d["class"] for d in im["dets"]], b


@pytest.mark.parametrize("body,ctype,says", [
    (b"", "image/jpeg", "image"),
    (b"\xff\xd8\xff\xe0 not a jpeg at all", "image/jpeg", "JPEG"),
    (b"GIF89a....", "image/gif", ""),
    (b'{"image": 7}', "application/json", "image"),
    (b'{"image": "@@@not base64"}', "application/json", "base64"),
])
def test_bad_input_is_a_clear_400(srv, body, ctype, says):
    s, _, b = layout(srv, body, ctype)
    assert s == 400, (s, b)
    msg = b["error"]["message"]
    assert msg and says.lower() in msg.lower(), msg
    # and nothing else broke: the next good request is answered
    s, _, b = layout(srv, image("tests/data/ocr/render_05.jpg"))
    assert s == 200 and "detections" in b, (s, b)


def test_ocr_is_not_served_here(srv):
    s, _, _ = srv.request("POST", "/v1/ocr", image("tests/data/ocr/render_05.jpg"),
                          headers={"Content-Type": "image/jpeg"})
    assert s == 404, s
