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
