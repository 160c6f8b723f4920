# One model served by the CPU engine and the OpenVINO engine plugin at once: the plugin loaded
# through the config (`kind: plugin`, `library: ...`, engine/plugin.h), short requests routed to
# the CPU engine, the rest to OpenVINO; both answer, each says which engine served it (X-Engine),
# and their embeddings agree with each other. Also: devices by name; int8 OpenVINO lanes (load
# check, verify); one model's layers or modules split across the CPU and OpenVINO engines
# (models[].placement) answering what one engine answers, with the boundary copies timed; and
# configs/buckets-openvino.yaml (length buckets split between the engines by router rules).
# Skips (one line) where the plugin is not built or the OpenVINO runtime reports no device.
import json
import math
import os
import re
import subprocess

import pytest

from hetserve_fixture import BINARY, MODEL, ROOT, Server, cpu_computes

PLUGIN = os.path.join(os.path.dirname(BINARY), "plugins", "libhs_engine_openvino.so")


def openvino_devices():
    if not os.path.exists(PLUGIN):
        return 0
    out = subprocess.run([BINARY, "devices"], capture_output=True, text=True, timeout=120)
    for k in json.loads(out.stdout)["kinds"]:
        if k["kind"] == "openvino" and k["built"]:
            return k["devices"]
    return 0


pytestmark = pytest.mark.skipif(openvino_devices() == 0,
                                reason="OpenVINO engine plugin not built or no OpenVINO device")

CONFIG = """
engines:
  - name: cpu_a
    kind: cpu
    threads: 1
  - name: ov
    kind: plugin
    library: "%s"
    threads: 1
models:
  - path: "%s"
    engines: [cpu_a, ov]
limits:
  timeout_ms: 300000
routes:
  - name: short
    engines: [cpu_a]
  - name: long
    engines: [ov]
router:
  rules:
    - {tokens_max: 8, route: short}
  default_route: long
""" % (PLUGIN, MODEL)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_cpu_and_openvino_serve_one_model():
    s = Server(CONFIG, model=None)
    try:
        short, long_ = "hello world", "a longer sentence that certainly has more than eight tokens in it"
        st, h, short_cpu = s.post("/v1/embeddings", {"input": short})
        assert st == 200, short_cpu
        assert h["x-engine"] == "cpu_a"
        st, h, long_ov = s.post("/v1/embeddings", {"input": long_})
        assert st == 200, long_ov
        assert h["x-engine"] == "ov"
        # the same long text on the CPU engine, through a route rule of its own: equal embeddings
        st, h, batch = s.post("/v1/embeddings", {"input": [long_, short]})
        assert st == 200 and h["x-engine"] == "ov"
        a = long_ov["data"][0]["embedding"]
        b = batch["data"][0]["embedding"]
        c = batch["data"][1]["embedding"]
        assert cosine(a, b) > 0.99999
        assert cosine(c, short_cpu["data"][0]["embedding"]) > 0.9999
        st, _, ready = s.get("/ready")
        assert st == 200, ready
    finally:
        s.stop()


def runtime_devices():
    """The OpenVINO runtime's device names, as `hetserve devices` shows them (isa: "CPU ...")."""
    if not os.path.exists(PLUGIN):
        return []
    out = subprocess.run([BINARY, "devices"], capture_output=True, text=True, timeout=120)
    return [e["isa"].split()[0] for e in json.loads(out.stdout)["engines"] if e["kind"] == "openvino"]


NAMED = """
engines:
  - name: ov
    kind: plugin
    library: "%s"
    device_name: %s
    threads: 1
models:
  - path: "%s"
limits:
  timeout_ms: 300000
"""


@pytest.mark.skipif("CPU" not in runtime_devices(), reason="the OpenVINO runtime lists no CPU device")
def test_device_by_name_serves():
    s = Server(NAMED % (PLUGIN, "CPU", MODEL), model=None)
    try:
        st, h, out = s.post("/v1/embeddings", {"input": "a device chosen by its name"})
        assert st == 200, out
        assert h["x-engine"] == "ov"
    finally:
        s.stop()


@pytest.mark.skipif("NPU" in runtime_devices(), reason="the OpenVINO runtime has an NPU")
def test_device_by_name_absent_is_refused():
    with pytest.raises(RuntimeError) as e:
        Server(NAMED % (PLUGIN, "NPU", MODEL), model=None)
    listed = ", ".join(runtime_devices())
    assert "openvino: no device 'NPU' (the runtime lists %s)" % listed in str(e.value)


# ---- int8 on the OpenVINO lane: int8 weights with per-channel scales in hetserve's graph, the
# runtime's dynamic activation quantization, the model's quantization plan honoured ----

@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """A quantized folder of MODEL: `make quantized`'s when it is there, else made here (~20 s)."""
    made = MODEL.rstrip("/") + "-int8"
    if os.path.exists(os.path.join(made, "quant.json")):
        return made
    if not cpu_computes("int8"):  # quantize searches the plan on the CPU engine
        pytest.skip("this machine's CPU engine does not compute in int8 (hetserve devices)")
    out = str(tmp_path_factory.mktemp("q") / "minilm-int8")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([BINARY, "quantize", "--model", MODEL, "--out", out,
                        "--calib", os.path.join(root, "data", "calib", "calib.txt")],
                       capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    assert os.path.exists(os.path.join(out, "quant.json")), r.stdout + r.stderr
    return out


INT8 = """
engines:
  - name: ov
    kind: plugin
    library: "%s"
    dtype: int8
    threads: 1
models:
  - path: "%s"
    name: minilm
limits:
  timeout_ms: 300000
"""


@pytest.mark.skipif("CPU" not in runtime_devices(), reason="the OpenVINO runtime lists no CPU device")
def test_int8_lane_passes_the_load_check(quantized):
    s = Server(INT8 % (PLUGIN, quantized), model=None)
    try:
        text = "an int8 lane on the OpenVINO engine, checked against the f32 reference at load"
        st, h, out = s.post("/v1/embeddings", {"input": text})
        assert st == 200 and h["x-engine"] == "ov", out
        st, _, metrics = s.get("/metrics")
        assert 'hetserve_lane_check_pass{model="minilm",engine="ov",dtype="int8"} 1' in \
            metrics.decode(), metrics.decode()
        ref = subprocess.run([BINARY, "embed", "--model", quantized, text], capture_output=True,
                             text=True, timeout=120)
        assert ref.returncode == 0, ref.stderr
        want = json.loads(ref.stdout)["data"][0]["embedding"]
        assert cosine(out["data"][0]["embedding"], want) >= 0.99
    finally:
        s.stop()


@pytest.mark.skipif("CPU" not in runtime_devices(), reason="the OpenVINO runtime lists no CPU device")
def test_verify_int8(quantized):
    # from the source tree: verify's golden set is tests/golden (ctest runs this from build/)
    r = subprocess.run([BINARY, "verify", "--engine", "openvino", "--dtype", "int8", "--model",
                        quantized], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0 and "verify: all passed" in r.stdout, r.stdout + r.stderr
    assert " int8 " in r.stdout and "PASS" in r.stdout


# ---- one model's stages split between the CPU engine and the OpenVINO engine ----

TEXTS = ["hello world", "a second, somewhat longer text about placing layers on two engines",
         "short", "Layer splits hand the activation from one engine to the next. " * 6]

SPLIT_ENGINES = """engines:
  - {name: cpu_a, kind: cpu, threads: 1}
  - {name: ov, kind: plugin, library: "%s", threads: 1}
limits:
  timeout_ms: 300000
""" % PLUGIN

SPLIT_LAYERS = SPLIT_ENGINES + """models:
  - path: "%s"
    placement:
      layers:
        - {engine: cpu_a, from: 0, to: 3}
        - {engine: ov, from: 3, to: 6}
""" % MODEL

SPLIT_MODULES = SPLIT_ENGINES + """models:
  - path: "%s"
    placement: {modules: {attention: ov, ffn: cpu_a}}
""" % MODEL


def embed(srv, texts):
    st, h, body = srv.post("/v1/embeddings", {"input": texts})
    assert st == 200, body
    return [d["embedding"] for d in body["data"]], h


@pytest.fixture(scope="module")
def cpu_alone():
    srv = Server(SPLIT_ENGINES + "models:\n  - {path: \"%s\", engine: cpu_a}\n" % MODEL, model=None)
    try:
        yield embed(srv, TEXTS)[0]
    finally:
        srv.stop()


@pytest.mark.parametrize("config,boundaries,checked", [
    (SPLIT_LAYERS, ["cpu_a>ov"], "cpu_a"),
    (SPLIT_MODULES, ["ov>cpu_a", "cpu_a>ov"], "ov")])
def test_split_across_cpu_and_openvino_equals_one_engine(cpu_alone, config, boundaries, checked):
    srv = Server(config, model=None)
    try:
        got, h = embed(srv, TEXTS)
        for a, b in zip(got, cpu_alone):
            assert cosine(a, b) >= 1 - 1e-5
        timing = h["server-timing"]
        for b in boundaries:  # each boundary's copy is timed on its own
            m = re.search(r'boundary_copy;desc="%s";dur=([0-9.]+)' % re.escape(b), timing)
            assert m and float(m.group(1)) >= 0, timing
        assert "boundary_sync;desc=" in timing
        text = srv.get("/metrics")[2].decode()
        for b in boundaries:
            a, z = b.split(">")
            line = [l for l in text.splitlines()
                    if l.startswith("hetserve_boundary_handovers_total{")
                    and 'from="%s",to="%s"' % (a, z) in l]
            assert line and float(line[0].rsplit(" ", 1)[1]) >= 1, text
        assert "hetserve_boundary_copy_seconds_total{" in text
        # the split lane was checked against the f32 reference at load
        assert 'hetserve_lane_check_pass{model="all-MiniLM-L6-v2",engine="%s"' % checked in text
    finally:
        srv.stop()


# ---- configs/buckets-openvino.yaml: the length buckets split between the engines by rules ----

def buckets_config():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "configs", "buckets-openvino.yaml")) as f:
        text = f.read()
    assert 'path: "models/all-MiniLM-L6-v2"' in text
    return text.replace('path: "models/all-MiniLM-L6-v2"', 'path: "%s"' % MODEL) + \
        "limits:\n  timeout_ms: 300000\n"


def words(n):
    """A text of n distinct common words (n tokens, [CLS] and [SEP] aside)."""
    vocab = ("time year people way day man thing woman life child world school state family "
             "student group country problem hand part place case week company system program "
             "question work government number night point home water room mother area money "
             "story fact month lot right study book eye job word business issue side kind head "
             "house service friend father power hour game line end member law car city").split()
    return " ".join(vocab[i % len(vocab)] for i in range(n))


def test_buckets_split_by_router_rules():
    s = Server(buckets_config(), model=None)
    try:
        cases = [(words(10), "short", {"cpu_a"}), (words(28), "short", {"cpu_a"}),
                 (words(50), "medium", {"ov"}), (words(120), "medium", {"ov"}),
                 (words(200), "long", {"cpu_a", "ov"})]
        alone = {}
        for text, route, engines in cases:
            st, h, out = s.post("/v1/embeddings", {"input": text})
            assert st == 200, out
            assert h["x-route"].split(";")[0] == route and h["x-engine"] in engines, (route, h)
            alone[text] = out["data"][0]["embedding"]
        # a batch goes where its longest input sends it: the short text is then computed by the
        # OpenVINO engine, and agrees with what the CPU engine answered for it alone
        st, h, out = s.post("/v1/embeddings", {"input": [words(50), words(10)]})
        assert st == 200 and h["x-engine"] == "ov", h
        assert cosine(out["data"][1]["embedding"], alone[words(10)]) >= 1 - 1e-5
        assert cosine(out["data"][0]["embedding"], alone[words(50)]) >= 1 - 1e-5
    finally:
        s.stop()


def test_slots_become_streams():
    """An OpenVINO engine with slots: 2 compiles its graph with two streams (one per batch that
    may run at once) and answers concurrent requests as one slot does."""
    cfg = """
engines:
  - name: ov
    kind: plugin
    library: "%s"
    threads: 2
    slots: 2
models:
  - path: "%s"
    engine: ov
batching:
  batch_window_us: 0
limits:
  timeout_ms: 300000
""" % (PLUGIN, MODEL)
    texts = ["sentence number %d about streams and slots" % i for i in range(16)]
    s = Server(cfg, model=None, env={"HS_LOG_LEVEL": "debug"})
    try:
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(8) as ex:
            got = list(ex.map(lambda t: s.post("/v1/embeddings", {"input": t}), texts))
        assert all(st == 200 for st, _, _ in got)
        log = s.stderr()
    finally:
        s.stop()
    assert re.search(r"openvino CPU: compiled .* 2 stream\(s\)", log), log[-2000:]
    one = Server(cfg.replace("slots: 2", "slots: 1"), model=None)
    try:
        for t, (_, _, d) in zip(texts[:4], got[:4]):
            st, _, ref = one.post("/v1/embeddings", {"input": t})
            assert st == 200
            assert cosine(d["data"][0]["embedding"], ref["data"][0]["embedding"]) > 1 - 1e-5
    finally:
        one.stop()
