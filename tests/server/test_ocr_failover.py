# Pipeline stages' own policy (pipelines[].stages, sched/pipeline.h) on the OCR pipeline, with
# det on one OpenVINO engine and rec on another plus a fallback engine: the primary rec engine
# slowed with the admin fault fails over to the fallback, capped at ratio_max of the stage's
# recent items, the rest refused with 429 + Retry-After (or 504 naming the stage when they wait
# past its timeout), every request answered exactly once; a stage timeout gives 504 naming the
# stage; batch_fixed makes every rec graph run exactly N rows. Skips like test_ocr.py.
import json
import re
import threading

import pytest

from hetserve_fixture import Server
from test_ocr import MODELS, PLUGIN, SKIP
from test_ocr_server import image

pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

RATIO = 0.3
ENGINE = """
  - name: %s
    kind: plugin
    library: "%s"
    threads: 1"""


def ocr_stages(det="", rec="", ctc_dict="%(m)s/dict.txt"):
    """The OCR stages of configs/ocr.yaml; det / rec: the model stages' extra keys."""
    return """    stages:
      - {name: decode, op: image_decode}
      - {name: det_prep, op: det_prep}
      - {name: det, model: "%%(m)s/det.onnx", engine: ov_det%s}
      - {name: db_post, op: db_post}
      - {name: crop, op: crop}
      - {name: rec, model: "%%(m)s/rec.onnx", engine: ov_rec%s}
      - {name: ctc, op: ctc_decode, dict: "%s"}
""" % (det, rec, ctc_dict)


CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1%s%s%s
admin:
  enabled: true
pipelines:
  - name: fo
""" % (ENGINE % ("ov_det", PLUGIN), ENGINE % ("ov_rec", PLUGIN), ENGINE % ("ov_fb", PLUGIN))
CONFIG += ocr_stages(det=", fallback: {engines: [ov_fb], ratio_max: 0.5}",
                     rec=", timeout_ms: 1500, fallback: {engines: [ov_fb], ratio_max: %s}" % RATIO)
CONFIG += "  - name: strict\n" + ocr_stages(rec=", timeout_ms: 1")
# a static-shape engine's stages: the detector input padded to listed sides, every recognizer
# run exactly 4 crops at a listed width
CONFIG += "  - name: fixed\n" + ocr_stages(
    det=", shapes: [320, 480, 640, 960]",
    rec=", batch_fixed: 4, shapes: [320, 480, 800, 1280, 2560]")
CONFIG += "  - name: plain\n" + ocr_stages()  # the same stages with no policy: the reference
CONFIG = CONFIG % {"m": MODELS}


@pytest.fixture(scope="module")
def srv():
    s = Server(CONFIG)
    yield s
    s.stop()


def ocr(srv, body, pipeline, ctype="image/jpeg"):
    s, hdrs, d = srv.request("POST", "/v1/ocr", body,
                             headers={"Content-Type": ctype, "X-Pipeline": pipeline}, timeout=300)
    return s, hdrs, json.loads(d) if d else None


def metric(srv, name, **labels):
    _, _, m = srv.request("GET", "/metrics")
    sel = ",".join('%s="%s"' % kv for kv in labels.items())
    got = re.findall(r"^hetserve_pipeline_stage_%s\{%s\} (\S+)$" % (name, re.escape(sel)),
                     m.decode(), re.M)
    assert len(got) == 1, (name, labels)
    return float(got[0])


def test_slow_primary_fails_over_capped_rest_refused(srv):
    body = image("render_05.jpg")
    warm = 5
    for _ in range(warm):  # the primary's recent batch time, and 5 items it ran
        s, h, out = ocr(srv, body, "fo")
        assert s == 200, out
        assert h["x-engine"] == "ov_det, ov_rec" and out["engines"]["rec"] == "ov_rec"
    s, _, _ = srv.post("/admin/fault", {"engine": "ov_rec", "slow_factor": 6})
    assert s == 200
    n = 40
    answers = [[] for _ in range(n)]

    def one(i):
        try:
            answers[i].append(ocr(srv, body, "fo"))
        except Exception as e:  # an unanswered request shows up here
            answers[i].append((repr(e), {}, None))

    try:
        ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        srv.post("/admin/fault", {"engine": "ov_rec", "slow_factor": 0})
    assert all(len(a) == 1 for a in answers)  # each request answered exactly once
    got = [a[0] for a in answers]
    codes = [s for s, _, _ in got]
    assert set(codes) <= {200, 429, 504}, codes
    fb = [h for s, h, _ in got if s == 200 and h.get("x-engine") == "ov_det, ov_fb"]
    print("fo: %d requests: %d on the primary, %d failed over, %d refused 429, %d 504" % (
        n, codes.count(200) - len(fb), len(fb), codes.count(429), codes.count(504)))
    assert fb, codes  # it failed over
    assert len(fb) <= RATIO * (n + warm), (len(fb), codes)  # at its cap
    refused = [(s, h, o) for s, h, o in got if s == 429]
    assert refused, codes  # and refused beyond it, with a capacity hint
    for _, h, o in refused:
        assert h.get("retry-after") and "stage rec: overloaded" in o["error"]["message"]
        assert "ratio_max 0.30" in o["error"]["message"]
    for s, _, o in got:
        if s == 504:
            assert "stage rec" in o["error"]["message"]
    # the stage's metrics say the same
    fo = metric(srv, "failovers_total", pipeline="fo", stage="rec")
    ran = metric(srv, "items_total", pipeline="fo", stage="rec")
    assert fo == len(fb) and fo <= RATIO * ran + 1e-9
    assert metric(srv, "refused_total", pipeline="fo", stage="rec") == len(refused)
    assert metric(srv, "timeouts_total", pipeline="fo", stage="rec") == codes.count(504)
    assert metric(srv, "fallback_share", pipeline="fo", stage="rec") <= RATIO
    # the fault cleared: the primary serves again
    s, h, _ = ocr(srv, body, "fo")
    assert s == 200 and h["x-engine"] in ("ov_det, ov_rec", "ov_det, ov_fb")


def test_hung_primary_fails_over_nothing_lost(srv):
    body = image("render_05.jpg")
    before = metric(srv, "failovers_total", pipeline="fo", stage="rec")
    s, _, _ = srv.post("/admin/fault", {"engine": "ov_rec", "hang_ms": 3000})
    assert s == 200
    n = 16
    answers = [[] for _ in range(n)]

    def one(i):
        try:
            answers[i].append(ocr(srv, body, "fo"))
        except Exception as e:
            answers[i].append((repr(e), {}, None))

    try:
        ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        srv.post("/admin/fault", {"engine": "ov_rec"})
    assert all(len(a) == 1 for a in answers)
    got = [a[0] for a in answers]
    codes = [c for c, _, _ in got]
    print("hang: %d requests: %s" % (n, {c: codes.count(c) for c in set(codes)}))
    assert set(codes) <= {200, 429, 504}, codes
    # the hung batch ends past the stage's timeout: 504 naming the stage
    late = [o["error"]["message"] for c, _, o in got if c == 504]
    assert late and all("stage rec" in m for m in late), late
    fb = [h for c, h, _ in got if c == 200 and h.get("x-engine") == "ov_det, ov_fb"]
    assert len(fb) == metric(srv, "failovers_total", pipeline="fo", stage="rec") - before
    assert metric(srv, "fallback_share", pipeline="fo", stage="rec") <= RATIO


def test_failed_det_retried_on_the_fallback(srv):
    s, _, _ = srv.post("/admin/fault", {"engine": "ov_det", "fail_next": 1})
    assert s == 200
    s, h, out = ocr(srv, image("render_05.jpg"), "fo")
    assert s == 200 and out["lines"], out  # not the 500 of a pipeline without a fallback
    assert h["x-engine"] == "ov_fb, ov_rec" and out["engines"]["det"] == "ov_fb"
    assert metric(srv, "failovers_total", pipeline="fo", stage="det") == 1
    assert metric(srv, "breaker_open", pipeline="fo", stage="det") == 0  # one failure: closed
    s, h, _ = ocr(srv, image("render_05.jpg"), "fo")
    assert s == 200 and h["x-engine"] == "ov_det, ov_rec"


def test_stage_timeout_is_504_naming_the_stage(srv):
    s, _, out = ocr(srv, image("render_05.jpg"), "strict")
    assert s == 504, out
    assert "stage rec: " in out["error"]["message"] and "timeout_ms 1" in out["error"]["message"]
    assert metric(srv, "timeouts_total", pipeline="strict", stage="rec") >= 1


def test_static_shapes_pad_and_answers_unchanged(srv):
    """det with shapes pads its input to listed sides, rec with batch_fixed runs exactly 4 crops
    at listed widths; the answers are those of the unpadded pipeline."""
    names = ["render_05.jpg", "render_00.jpg", "skimage_page.jpg"]
    crops = 0
    for name in names:
        s, _, ref = ocr(srv, image(name), "plain")
        assert s == 200
        s, _, out = ocr(srv, image(name), "fixed")
        assert s == 200 and len(out["lines"]) >= 2
        # the padding rows are dropped and the padded map cut back: the rendered pages read the
        # same lines as unpadded runs, box corners moved by a few pixels at most (the detector's
        # global pooling sees the zero border); on the photographed page one line of 7 moved its
        # box and so its text (measured)
        same = sum(a["text"] == b["text"] for a, b in zip(out["lines"], ref["lines"]))
        moved = max(abs(p[k] - q[k]) for a, b in zip(out["lines"], ref["lines"])
                    if a["text"] == b["text"] for p, q in zip(a["box"], b["box"]) for k in (0, 1))
        print("%s: %d of %d lines the same, their box corners moved by at most %d px" % (
            name, same, len(ref["lines"]), moved))
        if name.startswith("render"):
            assert [l["text"] for l in out["lines"]] == [l["text"] for l in ref["lines"]], name
            assert moved <= 4, name
        else:
            assert len(out["lines"]) == len(ref["lines"]) and same >= len(ref["lines"]) - 1
        crops += len(out["lines"])
    _, _, m = srv.request("GET", "/metrics")
    m = m.decode()
    rows = re.findall(r'hetserve_pipeline_stage_graph_runs_total\{pipeline="fixed",stage="rec",'
                      r'engine="ov_rec",rows="(\d+)"\} (\S+)', m)
    assert rows and {r for r, _ in rows} == {"4"}, rows
    runs = sum(float(v) for _, v in rows)
    # the blank rows those runs carried (4 a run less the crops they read): each request's
    # crops in runs of 4 (one request a run), so fewer than 4 a request; the crops read at least
    # the lines answered
    pad = metric(srv, "graph_padded_rows_total", pipeline="fixed", stage="rec")
    assert 0 <= pad < 4 * len(names) and 4 * runs - pad >= crops, (pad, runs, crops)
    # and every run at a listed width
    widths = dict(re.findall(r'hetserve_pipeline_stage_graph_width_runs_total\{pipeline="fixed",'
                             r'stage="rec",width="(\d+)"\} (\S+)', m))
    assert set(widths) == {"320", "480", "800", "1280", "2560"}
    assert sum(float(v) for v in widths.values()) == runs
    # the detector: each run at listed sides, as many as images
    shapes = re.findall(r'hetserve_pipeline_stage_graph_shape_runs_total\{pipeline="fixed",'
                        r'stage="det",height="(\d+)",width="(\d+)"\} (\S+)', m)
    assert shapes and all(h in ("320", "480", "640", "960") and w in ("320", "480", "640", "960")
                          for h, w, _ in shapes), shapes
    assert sum(float(v) for _, _, v in shapes) == len(names)
    # the stage's latency histogram counts each item it ran once
    count = re.findall(r'hetserve_pipeline_stage_latency_seconds_count\{pipeline="fixed",'
                       r'stage="rec"\} (\S+)', m)
    assert count and float(count[0]) == metric(srv, "items_total", pipeline="fixed", stage="rec")


def test_shipped_config_checks():
    import os
    import subprocess

    from hetserve_fixture import BINARY
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([BINARY, "config", "--check",
                        os.path.join(root, "configs", "ocr-failover.yaml")],
                       capture_output=True, text=True, cwd=root)
    assert r.returncode == 0, r.stderr
    assert "fallback: {engines: [ov_fb], ratio_max: 0.3}" in r.stdout
