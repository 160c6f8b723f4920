# A model stage routed over several engines (pipelines[].stages[].route, sched/pipeline.h):
# configs/ocr-route.yaml served as written (its OpenVINO engines as the plugin, its model paths
# where the models are), the recognizer on ov_a and on ov_b with ov_b's own batch shape (exactly
# 4 crops a run at listed widths). Under concurrent load both engines run batches (/metrics, by
# engine), every request is answered once with the texts of the single-engine pipeline; the
# admin fault slowing ov_b moves the work to ov_a; a batch a routed engine fails goes to the
# fallback; the dashboard's stage table names each engine. Skips like test_ocr.py. (The route's
# checks in config --check: test_pipeline_config.py.)
import json
import os
import re
import threading

import pytest

from hetserve_fixture import ROOT, Server
from test_ocr import MODELS, PLUGIN, SKIP
from test_ocr_server import image

pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

NAMES = ["render_05.jpg", "render_00.jpg", "render_03.jpg"]


def served_config():
    with open(os.path.join(ROOT, "configs", "ocr-route.yaml")) as f:
        text = f.read()
    assert text.rstrip().endswith('dict: "models/ppocrv5/dict.txt"}')  # pipelines[] last
    text = text.replace("kind: openvino", 'kind: plugin\n    library: "%s"' % PLUGIN)
    text = text.replace("models/ppocrv5", MODELS)
    # the reference: the same stages with the recognizer on ov_a alone
    text += """
  - name: plain
    stages:
      - {name: decode, op: image_decode}
      - {name: det_prep, op: det_prep}
      - {name: det, model: "%(m)s/det.onnx", engine: ov_det}
      - {name: db_post, op: db_post}
      - {name: crop, op: crop}
      - {name: rec, model: "%(m)s/rec.onnx", engine: ov_a}
      - {name: ctc, op: ctc_decode, dict: "%(m)s/dict.txt"}
""" % {"m": MODELS}
    return text


@pytest.fixture(scope="module")
def srv():
    s = Server(served_config())
    yield s
    s.stop()


def ocr(srv, body, pipeline="ocr"):
    s, hdrs, d = srv.request("POST", "/v1/ocr", body,
                             headers={"Content-Type": "image/jpeg", "X-Pipeline": pipeline},
                             timeout=300)
    return s, hdrs, json.loads(d) if d else None


def engine_metric(srv, name, engine):
    _, _, m = srv.request("GET", "/metrics")
    got = re.findall(r'^hetserve_pipeline_stage_engine_%s\{pipeline="ocr",stage="rec",'
                     r'engine="%s"\} (\S+)$' % (name, engine), m.decode(), re.M)
    assert len(got) == 1, (name, engine)
    return float(got[0])


def stage_metric(srv, name, stage="rec"):
    _, _, m = srv.request("GET", "/metrics")
    got = re.findall(r'^hetserve_pipeline_stage_%s\{pipeline="ocr",stage="%s"\} (\S+)$' % (
        name, stage), m.decode(), re.M)
    assert len(got) == 1, name
    return float(got[0])


def burst(srv, n, bodies):
    """n concurrent requests; each one's answers (one each when nothing is lost or doubled)."""
    answers = [[] for _ in range(n)]

    def one(i):
        try:
            answers[i].append(ocr(srv, bodies[i % len(bodies)]))
        except Exception as e:  # an unanswered request shows up here
            answers[i].append((repr(e), {}, None))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(len(a) == 1 for a in answers)
    return [a[0] for a in answers]


def texts(out):
    return [l["text"] for l in out["lines"]]


def test_both_engines_batch_texts_unchanged(srv):
    bodies = [image(n) for n in NAMES]
    ref = []
    for b in bodies:
        s, _, out = ocr(srv, b, "plain")
        assert s == 200 and out["lines"]
        ref.append(texts(out))
    n = 24
    got = burst(srv, n, bodies)
    assert [s for s, _, _ in got] == [200] * n, [(s, o) for s, _, o in got if s != 200][:2]
    for i, (_, h, out) in enumerate(got):
        assert texts(out) == ref[i % len(bodies)], i
        assert out["engines"]["rec"] in ("ov_a", "ov_b") and h["x-engine"] == "ov_det, %s" % (
            out["engines"]["rec"])
    on = {e: sum(1 for _, _, o in got if o["engines"]["rec"] == e) for e in ("ov_a", "ov_b")}
    items = {e: engine_metric(srv, "items_total", e) for e in on}
    batches = {e: engine_metric(srv, "batches_total", e) for e in on}
    print("%d requests: rec on %s; items %s, batches %s" % (n, on, items, batches))
    assert on["ov_a"] and on["ov_b"], on
    assert batches["ov_a"] > 0 and batches["ov_b"] > 0
    assert items == {e: float(v) for e, v in on.items()}  # the burst is the stage's first work
    assert sum(batches.values()) == stage_metric(srv, "batches_total")
    assert sum(items.values()) == stage_metric(srv, "items_total") == n
    # each engine its own batch shape: ov_b's graph runs exactly 4 rows at its widths
    _, _, m = srv.request("GET", "/metrics")
    m = m.decode()
    rows_b = re.findall(r'hetserve_pipeline_stage_graph_runs_total\{pipeline="ocr",stage="rec",'
                        r'engine="ov_b",rows="(\d+)"\}', m)
    assert set(rows_b) == {"4"}, rows_b
    widths_b = re.findall(r'hetserve_pipeline_stage_graph_width_runs_total\{pipeline="ocr",'
                          r'stage="rec",engine="ov_b",width="(\d+)"\}', m)
    assert widths_b == ["320", "480", "800", "1280", "2560"], widths_b
    assert engine_metric(srv, "batch_predicted_seconds", "ov_a") > 0


def test_slowed_engine_loses_its_share(srv):
    bodies = [image(n) for n in NAMES]
    burst(srv, 8, bodies)  # both engines' batch times measured
    before = {e: engine_metric(srv, "items_total", e) for e in ("ov_a", "ov_b")}
    s, _, _ = srv.post("/admin/fault", {"engine": "ov_b", "slow_factor": 8})
    assert s == 200
    try:
        got = []
        for _ in range(4):  # rounds: the slowed batches teach ov_b's cost line
            got += burst(srv, 8, bodies)
    finally:
        srv.post("/admin/fault", {"engine": "ov_b", "slow_factor": 0})
    assert [s for s, _, _ in got] == [200] * len(got)
    d = {e: engine_metric(srv, "items_total", e) - before[e] for e in before}
    pred = {e: engine_metric(srv, "batch_predicted_seconds", e) for e in before}
    print("ov_b slowed 8x: rec items %s; predicted batch seconds %s" % (d, pred))
    assert sum(d.values()) == len(got)
    assert d["ov_b"] <= 0.25 * len(got), d  # about even before the fault
    assert pred["ov_b"] > pred["ov_a"]


def test_failed_batch_goes_to_the_fallback(srv):
    before = stage_metric(srv, "failovers_total")
    for e in ("ov_a", "ov_b"):
        assert srv.post("/admin/fault", {"engine": e, "fail_next": 1})[0] == 200
    try:  # the idle engine predicted sooner takes each one: its fault fails the first
        outs = [ocr(srv, image("render_05.jpg")) for _ in range(3)]
    finally:
        for e in ("ov_a", "ov_b"):
            srv.post("/admin/fault", {"engine": e})
    assert all(s == 200 and o["lines"] for s, _, o in outs), outs
    on = [o["engines"]["rec"] for _, _, o in outs]
    assert on[0] == "ov_det" and on[-1] in ("ov_a", "ov_b"), on  # then routed again
    assert stage_metric(srv, "failovers_total") == before + on.count("ov_det")


def test_dashboard_draws_the_routed_engines(srv, tmp_path):
    """The dashboard's stage table: the routed rec row names both engines with the items each
    ran, as /metrics has them (no load: the same before and after)."""
    from test_dashboard import browse, chromium
    if not chromium():
        pytest.skip("chromium is not installed (Debian package chromium; scripts/setup installs it)")
    items = {e: engine_metric(srv, "items_total", e) for e in ("ov_a", "ov_b")}
    dom = browse(srv, tmp_path, "--dump-dom")
    got = dict(re.findall(r'data-pipeline="ocr" data-stage="(\w+)" data-field="engines"[^>]*>'
                          r'([^<]*)<', dom))
    assert got["rec"] == "ov_a %g, ov_b %g" % (items["ov_a"], items["ov_b"]), got
    assert got["det"] == "ov_det %g" % engine_metric_stage(srv, "det") and got["decode"] == "-"


def engine_metric_stage(srv, stage):
    _, _, m = srv.request("GET", "/metrics")
    got = re.findall(r'^hetserve_pipeline_stage_engine_items_total\{pipeline="ocr",stage="%s",'
                     r'engine="ov_det"\} (\S+)$' % stage, m.decode(), re.M)
    return float(got[0])
