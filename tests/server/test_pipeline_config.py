# pipelines[] in the config (no models or OpenVINO needed): `config --check` refuses, with the key
# path, an unknown op, a stage that is both or neither an op and a model, a key its kind does not
# take, a chain whose kinds do not connect, duplicate stage names, an unknown engine, an engine
# without graph_onnx, a batch_fixed over batch_max, shapes a graph kind or a static engine cannot
# take; the ocr shorthand (det, rec, dict) expands to the same stages as configs/ocr.yaml; `serve`
# refuses a pipeline whose graphs are placed on the CPU engine, by capability (graph_onnx); a
# stage's route (route.engines): unknown engines, engines without graph_onnx, duplicates, route
# with engine, a static engine's own batch shape.
import os
import re
import subprocess

from hetserve_fixture import BINARY, MODEL, ROOT

BASE = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1
  - name: ov
    kind: openvino
    device: 99
models:
  - path: "%s"
pipelines:
  - name: ocr
""" % MODEL

# the OCR stages; ov is an OpenVINO engine whose device is absent here (its caps unknown: not
# refused for them), %(det)s / %(rec)s extra keys of the model stages
STAGES = """    stages:
      - {name: decode, op: image_decode}
      - {name: det_prep, op: det_prep}
      - {name: det, model: d.onnx, engine: ov%(det)s}
      - {name: db_post, op: db_post}
      - {name: crop, op: crop}
      - {name: rec, model: r.onnx, engine: ov%(rec)s}
      - {name: ctc, op: ctc_decode, dict: d.txt}
"""


def stages(det="", rec=""):
    return STAGES % {"det": det, "rec": rec}


def check(tmp_path, extra, base=BASE):
    p = tmp_path / "c.yaml"
    p.write_text(base + extra)
    return subprocess.run([BINARY, "config", "--check", str(p)], capture_output=True, text=True)


def refused(tmp_path, extra, *want, base=BASE):
    r = check(tmp_path, extra, base)
    assert r.returncode != 0, (extra, r.stdout[-500:])
    for w in want:
        assert w in r.stderr, (w, r.stderr)
    return r.stderr


def test_stages_check_and_print(tmp_path):
    r = check(tmp_path, stages(rec=", batch_max: 8, batch_fixed: 4, shapes: [320, 640], "
                                   "requests_max: 2, window_us: 500"))
    assert r.returncode == 0, r.stderr
    assert "- name: rec" in r.stdout and "batch_fixed: 4" in r.stdout
    assert "shapes: [320, 640]" in r.stdout and "requests_max: 2" in r.stdout
    assert "op: ctc_decode" in r.stdout and "dict: d.txt" in r.stdout


def test_shorthand_expands_to_the_stages(tmp_path):
    r = check(tmp_path, "    det: d.onnx\n    rec: r.onnx\n    dict: d.txt\n    det_engine: ov\n"
              "    rec_images: 3\n    box_thresh: 0.6\n")
    assert r.returncode == 0, r.stderr
    names = re.findall(r"^      - name: (\w+)", r.stdout, re.M)
    assert names == ["decode", "det_prep", "det", "db_post", "crop", "rec", "ctc"], names
    assert "requests_max: 3" in r.stdout and "box_thresh: 0.6" in r.stdout
    assert "rec_images" not in r.stdout and "\n    det:" not in r.stdout  # cleared once expanded
    # the shipped configs are the long form of the same
    for name in ("ocr.yaml", "ocr-failover.yaml"):
        r = subprocess.run([BINARY, "config", "--check", os.path.join(ROOT, "configs", name)],
                           capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, (name, r.stderr)
        got = re.findall(r"^      - name: (\w+)", r.stdout, re.M)
        assert got == names, (name, got)
    # with a direction classifier: a classify stage between crop and rec
    r = check(tmp_path, "    det: d.onnx\n    rec: r.onnx\n    cls: c.onnx\n    dict: d.txt\n"
              "    det_engine: ov\n")
    assert r.returncode == 0, r.stderr
    names = re.findall(r"^      - name: (\w+)", r.stdout, re.M)
    assert names == ["decode", "det_prep", "det", "db_post", "crop", "cls", "rec", "ctc"], names
    assert "io: classify" in r.stdout
    refused(tmp_path, "    rec: r.onnx\n    dict: d.txt\n", "pipelines[0].det is required")
    refused(tmp_path, "    det: d.onnx\n    rec: r.onnx\n    dict: d.txt\n" + stages(),
            "pipelines[0].stages: give stages or the ocr shorthand")
    refused(tmp_path, "    det: d.onnx\n    rec: r.onnx\n    dict: d.txt\n    det_engine: npu9\n",
            "pipelines[0].stages[2].engine: no engine named 'npu9'")


def test_refusals_with_key_paths(tmp_path):
    s = stages()
    refused(tmp_path, "", "pipelines[0].stages: no stages")
    refused(tmp_path, s.replace("op: crop", "op: nms_of_nothing"),
            "pipelines[0].stages[4].op: unknown op 'nms_of_nothing'", "crop")
    refused(tmp_path, s.replace("{name: crop, op: crop}", "{name: crop}"),
            "pipelines[0].stages[4]: stage 'crop' needs op")
    refused(tmp_path, s.replace("op: crop", "op: crop, model: x.onnx"),
            "pipelines[0].stages[4].model: stage 'crop' is op crop")
    refused(tmp_path, s.replace("name: crop", "name: det"),
            "pipelines[0].stages[4].name: 'det' is the name of stages[2] too")
    # kinds that do not connect: db_post before the detector, no crop before rec, no ctc
    refused(tmp_path, s.replace("      - {name: det_prep, op: det_prep}\n", ""),
            "pipelines[0].stages[1]: no model stage reads an image (what stage 'decode' gives)")
    refused(tmp_path, s.replace("      - {name: crop, op: crop}\n", ""),
            "pipelines[0].stages[4]: no model stage reads text boxes")
    refused(tmp_path, s.replace("      - {name: ctc, op: ctc_decode, dict: d.txt}\n", ""),
            "pipelines[0].stages: the last stage, 'rec', gives per-crop sequence probabilities; "
            "/v1/ocr answers text lines")
    refused(tmp_path, s.replace("engine: ov}\n      - {name: db_post",
                                "engine: ov, io: recognize}\n      - {name: db_post"),
            "pipelines[0].stages[2]: stage 'det' (recognize) reads text crops, but stage "
            "'det_prep' gives a detector input tensor")
    refused(tmp_path, s.replace("engine: ov}\n      - {name: db_post",
                                "engine: ov, io: yolo}\n      - {name: db_post"),
            "pipelines[0].stages[2].io: unknown graph kind 'yolo'")
    # keys the stage's kind does not take
    refused(tmp_path, s.replace("op: crop", "op: crop, batch_fixed: 2"),
            "pipelines[0].stages[4].batch_fixed: stage 'crop' is op crop")
    refused(tmp_path, s.replace("op: db_post", "op: db_post, dict: x.txt"),
            "pipelines[0].stages[3].dict: op db_post takes no dict",
            "thresh box_thresh unclip_ratio")
    refused(tmp_path, stages(det=", box_thresh: 0.7"),
            "pipelines[0].stages[2].box_thresh: stage 'det' is a model stage")
    refused(tmp_path, s.replace("dict: d.txt", "drop_score: 0.4"),
            "pipelines[0].stages[6].dict: op ctc_decode needs the recognizer's dictionary")
    refused(tmp_path, stages(rec=", timeout: 5"), "pipelines[0].stages[5]", "timeout")
    refused(tmp_path, stages(det=", dtype: f16"), "pipelines[0].stages[2].dtype")
    # engines
    refused(tmp_path, stages(rec=", fallback: {engines: [npu9]}"),
            "pipelines[0].stages[5].fallback.engines[0]: no engine named 'npu9'")
    refused(tmp_path, stages(rec=", fallback: {engines: [cpu0], ratio_max: 0.3}"),
            "pipelines[0].stages[5].fallback.engines[0]: engine 'cpu0' (kind cpu) cannot run "
            "ONNX graphs (it lacks the graph_onnx capability)")
    refused(tmp_path, s.replace("engine: ov}\n      - {name: db_post",
                                "engine: cpu0}\n      - {name: db_post"),
            "pipelines[0].stages[2].engine: engine 'cpu0' (kind cpu) cannot run ONNX graphs")
    for bad in ("0", "1.5", "-0.1"):
        refused(tmp_path, stages(rec=", fallback: {engines: [ov], ratio_max: %s}" % bad),
                "pipelines[0].stages[5].fallback.ratio_max")
    # batches and shapes
    refused(tmp_path, stages(rec=", batch_max: 4, batch_fixed: 6"),
            "pipelines[0].stages[5].batch_fixed: 6 is over the stage's batch_max, 4")
    refused(tmp_path, stages(rec=", batch_fixed: 65"), "pipelines[0].stages[5].batch_fixed")
    refused(tmp_path, stages(det=", batch_max: 2"),
            "pipelines[0].stages[2].batch_max: 2: a detect graph runs at most 1 row(s)")
    refused(tmp_path, stages(rec=", shapes: [4]"), "pipelines[0].stages[5].shapes")
    refused(tmp_path, stages(det=", shapes: [320, 500]"),
            "pipelines[0].stages[2].shapes[1]: 500 is not a multiple of 32")
    refused(tmp_path, stages(det=", shapes: [320, 640]"),
            "pipelines[0].stages[2].shapes: the largest, 640, holds no detector input of up to "
            "960")
    assert check(tmp_path, stages(det=", shapes: [320, 640, 960]")).returncode == 0
    # a static engine (a whitelist of batches): batch_fixed from it, and shapes, are needed
    static = BASE.replace("    device: 99\n", "    device: 99\n    whitelist: [[1, 1], [4, 1]]\n")
    refused(tmp_path, stages(det=", shapes: [960]"),
            "pipelines[0].stages[2].batch_fixed: engine 'ov' takes only the batches of its "
            "whitelist (engines[1].whitelist)", base=static)
    refused(tmp_path, stages(det=", batch_fixed: 1, shapes: [960]"),
            "pipelines[0].stages[5].batch_fixed: engine 'ov'", base=static)
    refused(tmp_path, stages(det=", batch_fixed: 1", rec=", batch_fixed: 4, shapes: [320]"),
            "pipelines[0].stages[2].shapes: engine 'ov' has static shapes", base=static)
    assert check(tmp_path, stages(det=", batch_fixed: 1, shapes: [960]",
                                  rec=", batch_fixed: 4, shapes: [320]"),
                 base=static).returncode == 0
    r = subprocess.run([BINARY, "config", "--print-defaults"], capture_output=True, text=True)
    assert "pipelines: []" in r.stdout and "batch_fixed" in r.stdout


def test_cpu_engine_refused_by_capability(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(BASE + "    det: d.onnx\n    rec: r.onnx\n    dict: d.txt\n    det_engine: cpu0\n")
    r = subprocess.run([BINARY, "serve", "--config", str(p), "--port", "0"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1
    assert "pipelines[0].stages[2].engine: engine 'cpu0' (kind cpu) cannot run ONNX graphs " \
           "(it lacks the graph_onnx capability)" in r.stderr, r.stderr


def test_readme_example_checks(tmp_path):
    """README's pipelines[] example is a config that config --check takes (with its engines)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```yaml\n(pipelines:\n.*?)```", text, re.S)
    assert len(blocks) == 1, "README: one ```yaml block of pipelines[]"
    base = ("engines:\n  - {name: cpu0, kind: cpu, threads: 1}\n"
            "  - {name: ov, kind: openvino, device: 99}\n"
            "  - {name: ov_fb, kind: openvino, device: 98}\nmodels:\n  - path: \"%s\"\n" % MODEL)
    r = check(tmp_path, blocks[0], base=base)
    assert r.returncode == 0, r.stderr
    assert "batch_fixed: 4" in r.stdout and "fallback: {engines: [ov_fb], ratio_max: 0.3}" in r.stdout


def test_route_checks(tmp_path):
    base = BASE.replace("engines:\n", "engines:\n  - {name: ov_b, kind: openvino, device: 99}\n"
                        "  - {name: ov_s, kind: openvino, device: 99, whitelist: [[4, 1]]}\n", 1)
    cases = [
        ("route: {engines: [ov, nope]}",
         "stages[5].route.engines[1].engine: no engine named 'nope'"),
        ("route: {engines: [ov, cpu0]}",
         "stages[5].route.engines[1].engine: engine 'cpu0' (kind cpu) cannot run ONNX graphs"),
        ("route: {engines: [ov, ov_b, ov]}",
         "stages[5].route.engines[2].engine: 'ov' is route.engines[0] too"),
        ("route: {engines: [ov_b]}", "stages[5].route: stage 'rec' names engine 'ov' too"),
        ("route: {engines: [ov], policy: fastest}", "'fastest' is not one of predicted"),
        ("route: {engines: [{engine: ov_b, batch_fixed: 9}]}",
         "stages[5].route.engines[0].batch_fixed: 9 is over the stage's batch_max, 6"),
        ("route: {engines: [{batch_max: 2}]}", "route.engines[0]: engine is required"),
        # a static engine: its own batch shape, from its whitelist
        ("route: {engines: [ov, ov_s]}",
         "stages[5].route.engines[1].batch_fixed: engine 'ov_s' takes only the batches of its "
         "whitelist"),
        ("route: {engines: [ov, {engine: ov_s, batch_fixed: 4}]}",
         "stages[5].route.engines[1].shapes: engine 'ov_s' has static shapes"),
    ]
    unplaced = ("{name: rec, model: r.onnx, engine: ov, ", "{name: rec, model: r.onnx, ")
    for rec, want in cases:
        extra = stages(rec=", " + rec)
        if "names engine" not in want:
            extra = extra.replace(*unplaced)
        refused(tmp_path, extra, want, base=base)
    op_routed = stages().replace("op: image_decode}", "op: image_decode, route: {engines: [ov]}}")
    refused(tmp_path, op_routed, "stages[0].route: stage 'decode' is op image_decode: route is "
            "a model stage's key", base=base)
    ok = stages(rec=", route: {policy: round_robin, engines: [ov_b, {engine: ov_s, batch_fixed: "
                "4, shapes: [320]}]}").replace(*unplaced)
    r = check(tmp_path, ok, base)
    assert r.returncode == 0, r.stderr
    assert "route: {policy: round_robin, engines: [{engine: ov_b," in r.stdout
    assert "{engine: ov_s, batch_max: 0, batch_fixed: 4, shapes: [320]}" in r.stdout
    # the shipped config of a routed stage
    r = subprocess.run([BINARY, "config", "--check", os.path.join(ROOT, "configs",
                                                                  "ocr-route.yaml")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


# a layout detector split in two model stages (configs/layout.yaml): backbone -> head ->
# gfl_decode -> nms, at /v1/layout
LAYOUT = """    endpoint: /v1/layout
    stages:
      - {name: decode, op: image_decode}
      - {name: prep, op: layout_prep, input_w: 608, input_h: 800}
%(mid)s      - {name: nms, op: nms, labels: l.txt}
"""
LAYOUT_MID = """      - {name: backbone, model: b.onnx, engine: ov, io: backbone}
      - {name: head, model: h.onnx, engine: ov, io: head}
      - {name: boxes, op: gfl_decode, top_k: 100}
"""


def test_layout_chain_checks_and_refusals(tmp_path):
    r = check(tmp_path, LAYOUT % {"mid": LAYOUT_MID})
    assert r.returncode == 0, r.stderr
    assert "io: head" in r.stdout and "op: gfl_decode" in r.stdout, r.stdout
    # the head reads feature maps, not the detector input
    swapped = LAYOUT_MID.replace("io: backbone", "io: head", 1)
    refused(tmp_path, LAYOUT % {"mid": swapped}, "pipelines[0].stages[2]",
            "reads detector feature maps", "gives a detector input tensor")
    # no box decode: nms reads candidates, the head gives its outputs
    no_decode = "".join(LAYOUT_MID.splitlines(True)[:2])
    refused(tmp_path, LAYOUT % {"mid": no_decode}, "pipelines[0].stages[4]",
            "reads box candidates", "detector head outputs")
    # the ocr endpoint answers text, not detections
    refused(tmp_path, (LAYOUT % {"mid": LAYOUT_MID}).replace("/v1/layout", "/v1/ocr"),
            "gives detections", "/v1/ocr answers text lines")
    # keys the ops take, ranges
    refused(tmp_path, (LAYOUT % {"mid": LAYOUT_MID}).replace("top_k: 100", "box_thresh: 0.7"),
            "pipelines[0].stages[4].box_thresh", "op gfl_decode takes no box_thresh")
    refused(tmp_path, (LAYOUT % {"mid": LAYOUT_MID}).replace("input_w: 608", "input_w: 8"),
            "input_w")
