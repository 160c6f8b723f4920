# One model served by the CPU engine and the OpenVINO engine plugin at once: the plugin loaded
# through the config (`kind: plugin`, `library: ...`, engine/plugin.h), short requests routed to
# the CPU engine, the rest to OpenVINO; both answer, each says which engine served it (X-Engine),
# and their embeddings agree with each other. Skips (one line) where the plugin is not built or
# the OpenVINO runtime reports no device.
import json
import math
import os
import subprocess

import pytest

from hetserve_fixture import BINARY, MODEL, Server

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
    r = subprocess.run([BINARY, "verify", "--engine", "openvino", "--dtype", "int8", "--model",
                        quantized], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "verify: all passed" in r.stdout, r.stdout + r.stderr
    assert " int8 " in r.stdout and "PASS" in r.stdout
