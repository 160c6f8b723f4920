# Black-box tests of models[].placement: one model's lane split by layers or by modules across
# two CPU engines (different core sets and thread counts) answers what a single engine answers,
# reports each boundary's copy and sync (Server-Timing, /metrics), and bad placements are refused
# with the key path.
import json
import math
import os
import subprocess

import pytest

from hetserve_fixture import BINARY, MODEL, Server, cpu_computes

TEXTS = ["hello world", "a second, somewhat longer text about placing layers on engines",
         "short", "Layer splits hand the activation from one engine to the next. " * 6]

ENGINES = """engines:
  - {name: cpu_a, kind: cpu, threads: 1, cores: [0]}
  - {name: cpu_b, kind: cpu, threads: 2, cores: "0-1"}
"""

LAYERS = ENGINES + """models:
  - path: "%s"
    placement:
      layers:
        - {engine: cpu_a, from: 0, to: 2}
        - {engine: cpu_b, from: 2, to: 6}
""" % MODEL

MODULES = ENGINES + """models:
  - path: "%s"
    placement: {modules: {attention: cpu_b, ffn: cpu_a}}
""" % MODEL


def embed(srv, texts):
    status, hdrs, body = srv.post("/v1/embeddings", {"input": texts})
    assert status == 200, body
    return [d["embedding"] for d in body["data"]], hdrs


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


@pytest.fixture(scope="module")
def single():
    srv = Server(ENGINES + "models:\n  - {path: \"%s\", engine: cpu_b}\n" % MODEL, model=None)
    try:
        yield embed(srv, TEXTS)[0]
    finally:
        srv.stop()


@pytest.mark.parametrize("config,boundaries", [(LAYERS, ["cpu_a>cpu_b"]),
                                               (MODULES, ["cpu_b>cpu_a", "cpu_a>cpu_b"])])
def test_split_equals_single_engine(single, config, boundaries):
    srv = Server(config, model=None)
    try:
        got, hdrs = embed(srv, TEXTS)
        for a, b in zip(got, single):
            assert cosine(a, b) >= 1 - 1e-5
        timing = hdrs["server-timing"]
        for b in boundaries:
            assert 'boundary_copy;desc="%s"' % b in timing, timing
        assert "boundary_sync;desc=" in timing
        status, _, metrics = srv.get("/metrics")
        text = metrics.decode()
        for b in boundaries:
            a, z = b.split(">")
            line = [l for l in text.splitlines()
                    if l.startswith("hetserve_boundary_handovers_total{")
                    and 'from="%s",to="%s"' % (a, z) in l]
            assert line and float(line[0].rsplit(" ", 1)[1]) >= 1, text
        assert "hetserve_boundary_copy_seconds_total{" in text
        # the split lane was checked against the f32 reference at load
        assert 'hetserve_lane_check_pass{model="all-MiniLM-L6-v2",engine="%s"' % (
            "cpu_a" if config is LAYERS else "cpu_b") in text
    finally:
        srv.stop()


def check(tmp_path, text):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    return subprocess.run([BINARY, "config", "--check", str(cfg)], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("placement,message", [
    ("layers: [{engine: cpu_a, from: 0, to: 3}, {engine: cpu_b, from: 2, to: 6}]",
     "models[0].placement.layers[1]: layers 2..5 overlap layers[0] (0..2)"),
    ("layers: [{engine: cpu_a, from: 0, to: 2}, {engine: cpu_b, from: 3, to: 6}]",
     "models[0].placement.layers: no range starts at layer 2"),
    ("layers: [{engine: cpu_a, from: 0, to: 3}, {engine: gpu9, from: 3, to: 6}]",
     "models[0].placement.layers[1].engine: engine 'gpu9' is not configured"),
    ("layers: [{engine: cpu_a, from: 3, to: 3}]",
     "models[0].placement.layers[0]: to (3) must be above from (3)"),
    ("layers: [{from: 0, to: 6}]", "models[0].placement.layers[0]: engine is required"),
    ("modules: {attention: cpu_a}", "models[0].placement.modules: needs both attention and ffn"),
    ("modules: {attention: cpu_a, ffn: nope}",
     "models[0].placement.modules.ffn: engine 'nope' is not configured"),
    ("{layers: [{engine: cpu_a, from: 0, to: 6}], modules: {attention: cpu_a, ffn: cpu_b}}",
     "models[0].placement: layers or modules, not both"),
    ("{rows: 3}", "models[0].placement.rows: unknown key"),
])
def test_bad_placements_are_refused_with_the_key_path(tmp_path, placement, message):
    r = check(tmp_path, ENGINES + "models:\n  - path: \"%s\"\n    placement: %s\n"
              % (MODEL, placement if placement.startswith("{") else "{" + placement + "}"))
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_ranges_must_reach_the_models_last_layer(tmp_path):
    cfg = tmp_path / "short.yaml"
    cfg.write_text(ENGINES + "models:\n  - path: \"%s\"\n    placement: {layers: "
                   "[{engine: cpu_a, from: 0, to: 2}, {engine: cpu_b, from: 2, to: 5}]}\n" % MODEL)
    r = subprocess.run([BINARY, "serve", "--config", str(cfg), "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "models[0].placement.layers: layer 5 of model all-MiniLM-L6-v2 (6 layers) is in no " \
        "range" in r.stderr, r.stderr


def test_bf16_split_equals_bf16_single_engine():
    """A reduced-precision lane split by layers: the same bf16 kernels on either engine, so the
    split answers what one bf16 engine answers (within bf16's tolerance)."""
    if not cpu_computes("bf16"):
        pytest.skip("this machine's CPU engine does not compute in bf16 (hetserve devices)")
    one = Server(ENGINES + "models:\n  - {path: \"%s\", engine: cpu_b, dtype: bf16}\n" % MODEL,
                 model=None)
    try:
        want = embed(one, TEXTS)[0]
    finally:
        one.stop()
    srv = Server(LAYERS.replace("placement:", "dtype: bf16\n    placement:"), model=None)
    try:
        got, _ = embed(srv, TEXTS)
        for a, b in zip(got, want):
            assert cosine(a, b) >= 0.999
    finally:
        srv.stop()


def test_placement_prints_and_parses_back(tmp_path):
    r = check(tmp_path, LAYERS)
    assert r.returncode == 0, r.stderr
    assert "placement: {layers: [{engine: cpu_a, from: 0, to: 2}, {engine: cpu_b, from: 2, to: " \
        "6}]" in r.stdout
    again = check(tmp_path, r.stdout)
    assert again.returncode == 0, again.stderr
    assert again.stdout == r.stdout


def test_trace_has_a_span_per_handover(tmp_path):
    """With a trace file, a split lane's batches carry one "boundary copy" span (and the giving
    engine's "boundary sync" before it) per hand-over, inside the batch's compute span."""
    path = tmp_path / "trace.json"
    srv = Server(MODULES + "server:\n  trace_file: \"%s\"\n" % path, model=None)
    try:
        embed(srv, TEXTS)
    finally:
        srv.stop()
    events = json.loads(path.read_text())["traceEvents"]
    computes = [e for e in events if e.get("name") == "compute" and e.get("ph") == "X"]
    copies = [e for e in events if e.get("name") == "boundary copy"]
    syncs = [e for e in events if e.get("name") == "boundary sync"]
    assert computes and copies and syncs
    # modules on two engines: 6 layers -> attention a, ffn b: 11 hand-overs per batch
    assert len(copies) == 11 * len(computes)
    assert {e["args"]["boundary"] for e in copies} == {0, 1}
    for c in copies:
        assert any(k["ts"] - 1 <= c["ts"] and c["ts"] + c["dur"] <= k["ts"] + k["dur"] + 1
                   for k in computes), c


PIPELINE = LAYERS.replace("placement:", "placement:\n      pipeline: true")


def test_pipelined_split_equals_single_engine(single, tmp_path):
    """placement.pipeline: the lane keeps a batch in flight per engine (two slots here, from the
    engine's one), each engine runs one batch at a time; concurrent requests answer what one
    engine answers, each with its wait for a held engine in Server-Timing and /metrics, and the
    trace draws each slot's batches on its own track."""
    import concurrent.futures
    path = tmp_path / "trace.json"
    # (admission and deadlines wide: the test is about answers, and sanitizer builds are slow)
    srv = Server(PIPELINE + "server:\n  trace_file: \"%s\"\nscheduler:\n  wait_max_ms: 600000\n"
                 "limits:\n  timeout_ms: 600000\n" % path, model=None)
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: embed(srv, TEXTS), range(24)))
        for got, hdrs in results:
            for a, b in zip(got, single):
                assert cosine(a, b) >= 1 - 1e-5
            assert "engine_wait;dur=" in hdrs["server-timing"], hdrs["server-timing"]
        _, _, metrics = srv.get("/metrics")
        line = [l for l in metrics.decode().splitlines()
                if l.startswith('hetserve_pipeline_wait_seconds_total{model="all-MiniLM-L6-v2",'
                                'engine="cpu_a"}')]
        assert line and float(line[0].rsplit(" ", 1)[1]) >= 0
    finally:
        srv.stop()
    events = json.loads(path.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"batches", "batches, slot 1"} <= tracks, tracks


def test_pipeline_prints_and_needs_a_split(tmp_path):
    r = check(tmp_path, PIPELINE)
    assert r.returncode == 0, r.stderr
    assert "pipeline: true" in r.stdout, r.stdout
    again = check(tmp_path, r.stdout)
    assert again.returncode == 0 and again.stdout == r.stdout, again.stderr
    r = check(tmp_path, ENGINES + "models:\n  - path: \"%s\"\n    placement: {pipeline: true}\n"
              % MODEL)
    assert r.returncode != 0
    assert "models[0].placement.pipeline: pipelines a split" in r.stderr, r.stderr
