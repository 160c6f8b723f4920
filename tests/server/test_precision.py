# Black-box tests of precision as a placement choice: one model on a cpu f32 lane and a cpu int8
# lane at once, each lane checked against the f32 reference at load. The int8 lane needs a
# quantized folder; `hetserve quantize` makes one (once per session, ~15 s on 2 cores) from the
# default model and the committed calibration set.
import math
import os
import subprocess

import pytest

from hetserve_fixture import BINARY, MODEL, ROOT, Server

CPU_HAS_INT8 = "avx512_vnni" in open("/proc/cpuinfo").read()
pytestmark = pytest.mark.skipif(not CPU_HAS_INT8, reason="this CPU has no AVX-512 VNNI int8 path")


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("q") / "minilm-int8")
    r = subprocess.run([BINARY, "quantize", "--model", MODEL, "--out", out,
                        "--calib", os.path.join(ROOT, "data", "calib", "calib.txt")],
                       capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "target 0.9900 / 0.9980): met" in r.stdout
    return out


def two_lanes(path, check="refuse", quantize="auto", server=""):
    cores = sorted(os.sched_getaffinity(0))
    pin = [[cores[0]], [cores[1]]] if len(cores) >= 2 else [[], []]
    return server + """
engines:
  - {name: cpu_int8, kind: cpu, dtype: int8, threads: 1, cores: %s}
  - {name: cpu_f32, kind: cpu, dtype: f32, threads: 1, cores: %s}
models:
  - path: "%s"
    name: minilm
    engines: [cpu_int8, cpu_f32]
    check: %s
    quantize: %s
routes:
  - {name: short, engines: [cpu_int8]}
  - {name: long, engines: [cpu_f32]}
router:
  rules:
    - {route: short, tokens_max: 32}
  default_route: long
""" % (pin[0], pin[1], path, check, quantize)


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 6)


def test_int8_and_f32_lanes_serve_one_model(quantized):
    s = Server(two_lanes(quantized), model=None)
    try:
        st, h, short = s.post("/v1/embeddings", {"input": "where is the station?", "model": "minilm"})
        assert st == 200 and h["x-engine"] == "cpu_int8", h
        st, h, long = s.post("/v1/embeddings", {"input": LONG, "model": "minilm"})
        assert st == 200 and h["x-engine"] == "cpu_f32", h
        # the same short text through the f32 lane (header routing is not configured: use a
        # second server-free check instead: the int8 answer agrees with `hetserve embed` in f32)
        ref = subprocess.run([BINARY, "embed", "--model", quantized, "where is the station?"],
                             capture_output=True, text=True, check=True).stdout
        import json
        f32 = json.loads(ref)["data"][0]["embedding"]
        assert cos(short["data"][0]["embedding"], f32) >= 0.99
        st, h, body = s.get("/metrics")
        text = body.decode()
        assert 'hetserve_lane_check_pass{model="minilm",engine="cpu_int8",dtype="int8"} 1' in text
        st, h, body = s.get("/ready")
        assert st == 200 and b'"lanes":2' in body
    finally:
        s.stop()


def test_unquantized_int8_lane_is_refused_with_a_reason():
    if os.path.exists(os.path.join(MODEL, "quant.json")):
        pytest.skip("%s holds a quantization plan (an int8 lane made one at load)" % MODEL)
    # the raw model has no smoothing: without a plan (quantize: off) its int8 lane misses the
    # 0.99 tolerance on the check texts
    s = None
    with pytest.raises(RuntimeError) as e:
        s = Server(two_lanes(MODEL, quantize="off"), model=None)
    if s:
        s.stop()
    msg = str(e.value)
    assert "fails its check against f32" in msg and "hetserve quantize" in msg, msg
    assert "models[].quantize: auto" in msg, msg


def test_failed_lane_can_be_excluded_instead():
    if os.path.exists(os.path.join(MODEL, "quant.json")):
        pytest.skip("%s holds a quantization plan (an int8 lane made one at load)" % MODEL)
    s = Server(two_lanes(MODEL, check="exclude", quantize="off"), model=None)
    try:
        st, h, body = s.get("/ready")
        assert st == 200, body
        assert b'"lanes":1' in body and b'"lanes_excluded":[{"model":"minilm","engine":"cpu_int8"' in body
        # the short route lost its only lane, so the config's rule would have nowhere to go:
        # requests still answer, from the remaining lane
        st, h, _ = s.post("/v1/embeddings", {"input": LONG, "model": "minilm"})
        assert st == 200 and h["x-engine"] == "cpu_f32"
        st, h, body = s.get("/metrics")
        assert 'hetserve_lane_check_pass{model="minilm",engine="cpu_int8",dtype="int8"} 0' in body.decode()
    finally:
        s.stop()


def test_every_example_config_checks():
    # the hetero-gpu config names a cuda lane: it checks on any machine, whether or not a GPU
    # (or even the CUDA engine) is here
    cfgs = sorted(f for f in os.listdir(os.path.join(ROOT, "configs")) if f.endswith(".yaml"))
    assert "hetero-gpu.yaml" in cfgs and "precision-split.yaml" in cfgs
    for f in cfgs:
        r = subprocess.run([BINARY, "config", "--check", os.path.join(ROOT, "configs", f)],
                           capture_output=True, text=True)
        assert r.returncode == 0, f + ": " + r.stderr


def test_missing_device_is_a_clear_error(tmp_path):
    import json
    kinds = json.loads(subprocess.run([BINARY, "devices"], capture_output=True, text=True).stdout)["kinds"]
    if any(k["kind"] == "cuda" and k["devices"] > 0 for k in kinds):
        pytest.skip("a GPU is present")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engines:\n  - {name: gpu, kind: cuda, device: 0}\nmodels:\n  - {path: \"%s\"}\n" % MODEL)
    r = subprocess.run([BINARY, "serve", "--config", str(cfg), "--port", "0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert "engine gpu (kind cuda, device 0)" in r.stderr, r.stderr
