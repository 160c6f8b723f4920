# `hetserve embed --model tests/data/tiny-<family>` as a user types it, for every family of the
# architecture table with a tiny checkpoint: the CLI's tokenizer gives the golden ids of the
# sentences the goldens were made from, and its embeddings match the transformers reference
# (tests/golden/tiny_<family>.*, made by tools/golden/make_tiny_<family>.py); an HTTP request to
# a server on one of them (on the CPU and on OpenVINO) answers the same; an unknown model_type is
# refused with the list. (An engine refusing a model it cannot run: tests/model/test_arch.c.)
import json
import os
import shutil
import struct
import subprocess
import tempfile

import pytest

from hetserve_fixture import BINARY, ROOT, Server, cpu_computes

FAMILIES = ["roberta", "distilbert", "nomic-bert", "gte", "modernbert", "qwen3"]


def golden(name):
    with open(os.path.join(ROOT, "tests", "golden", "tiny_%s.json" % name.replace("-", "_"))) as f:
        g = json.load(f)
    with open(os.path.join(ROOT, "tests", "golden", "tiny_%s.f32" % name.replace("-", "_")), "rb") as f:
        raw = f.read()
    dim = g["dim"]
    rows = [list(struct.unpack_from("<%df" % dim, raw, 4 * dim * i)) for i in range(g["count"])]
    return g, rows


def embed(model, texts):
    out = subprocess.run([BINARY, "embed", "--model", model] + texts, capture_output=True, text=True,
                         env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def cosine(a, b):
    num = sum(x * y for x, y in zip(a, b))
    return num / ((sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5))


@pytest.mark.parametrize("family", FAMILIES)
def test_cli_embed_matches_reference(family):
    model = os.path.join(ROOT, "tests", "data", "tiny-" + family)
    g, rows = golden(family)
    texts = [s for s in g["sentences"] if not s.startswith("(random ids")]
    r = embed(model, texts)
    assert r["dim"] == g["dim"]
    for i, d in enumerate(r["data"]):
        assert d["tokens"] == len(g["token_ids"][i]), texts[i]
        c = cosine(d["embedding"], rows[i])
        assert c >= 0.99999, "%s: %r: cosine %.7f" % (family, texts[i], c)


def test_server_serves_a_new_family():
    model = os.path.join(ROOT, "tests", "data", "tiny-qwen3")
    g, rows = golden("qwen3")
    s = Server(model=model)
    try:
        status, _, body = s.post("/v1/embeddings", {"input": g["sentences"][2], "model": "tiny-qwen3"})
        assert status == 200, body
        assert cosine(body["data"][0]["embedding"], rows[2]) >= 0.99999
    finally:
        s.stop()


def test_unknown_model_type_is_refused_with_the_list():
    src = os.path.join(ROOT, "tests", "data", "tiny-roberta")
    with tempfile.TemporaryDirectory(prefix="hs_pytest_") as d:
        m = os.path.join(d, "m")
        shutil.copytree(src, m)
        with open(os.path.join(m, "config.json")) as f:
            cfg = json.load(f)
        cfg["model_type"] = "gpt2"
        with open(os.path.join(m, "config.json"), "w") as f:
            json.dump(cfg, f)
        out = subprocess.run([BINARY, "embed", "--model", m, "hello"], capture_output=True, text=True)
        assert out.returncode != 0
        assert "model_type 'gpt2' is not supported" in out.stderr
        for name in ("bert", "mpnet", "roberta", "xlm-roberta", "camembert", "distilbert", "nomic_bert",
                     "new", "modernbert", "qwen3"):
            assert "'%s'" % name in out.stderr


OV_PLUGIN = os.path.join(os.path.dirname(BINARY), "plugins", "libhs_engine_openvino.so")
OV_ONLY = """
engines:
  - name: ov
    kind: plugin
    library: "%s"
    threads: 1
models:
  - path: "%s"
limits:
  timeout_ms: 300000
"""


@pytest.mark.skipif(not os.path.exists(OV_PLUGIN), reason="the OpenVINO engine plugin is not built")
def test_a_server_on_openvino_serves_a_new_family():
    """Qwen3's blocks (causal grouped-query attention, RMSNorm, qk-norm, rotary, last-token
    pooling) in OpenVINO's graph, as served: within f32's tolerance of transformers."""
    model = os.path.join(ROOT, "tests", "data", "tiny-qwen3")
    g, rows = golden("qwen3")
    s = Server(OV_ONLY % (OV_PLUGIN, model), model=None)
    try:
        status, h, body = s.post("/v1/embeddings", {"input": g["sentences"][4]})
        assert status == 200, body
        assert h["x-engine"] == "ov"
        assert cosine(body["data"][0]["embedding"], rows[4]) >= 0.99999
    finally:
        s.stop()


# ---- hetserve verify and hetserve quantize on every family's tiny checkpoint ----
# (the golden set of bert is tiny_cls, made by tools/golden/gen_embeddings.py; the others'
# by tools/golden/make_tiny_<family>.py)
VERIFY_FAMILIES = {"bert-cls": "tiny_cls", "mpnet": "tiny_mpnet"}
VERIFY_FAMILIES.update({f: "tiny_" + f.replace("-", "_") for f in FAMILIES})


def verify(model, golden_name, *extra):
    out = subprocess.run([BINARY, "verify", "--model", model, "--golden",
                          os.path.join(ROOT, "tests", "golden", golden_name + ".json")] + list(extra),
                         capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="passive"),
                         timeout=600)
    rows = {}  # (engine, dtype) -> (cos_min, cos_mean, result) or the skip line
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) >= 9 and f[8] in ("PASS", "FAIL"):
            rows[(f[0], f[2])] = (float(f[4]), float(f[5]), f[8])
        elif len(f) >= 3 and "skipped:" in line:
            rows[(f[0], f[2] if f[2] != "skipped:" else "")] = line
    return out, rows


@pytest.mark.parametrize("family", sorted(VERIFY_FAMILIES))
def test_verify_every_family(family):
    """hetserve verify --model tests/data/tiny-<family>: every engine and dtype present runs the
    golden sentences (f32 within 1e-5 of transformers on the CPU and, when built, on OpenVINO;
    bf16 on CPUs that compute it); int8 without a plan is skipped with the reason."""
    model = os.path.join(ROOT, "tests", "data", "tiny-" + family)
    out, rows = verify(model, VERIFY_FAMILIES[family])
    assert out.returncode == 0 and "verify: all passed" in out.stdout, out.stdout + out.stderr
    assert rows[("cpu0", "f32")][2] == "PASS" and rows[("cpu0", "f32")][0] >= 0.99999, out.stdout
    if os.path.exists(OV_PLUGIN):
        assert rows[("openvino0", "f32")][2] == "PASS", out.stdout
        assert rows[("openvino0", "f32")][0] >= 0.99999, out.stdout
    for (engine, dtype), r in rows.items():
        if dtype == "int8" and isinstance(r, str):
            assert "no int8 quantization plan" in r or (
                engine == "cpu0" and not cpu_computes("int8") and "does not compute in int8" in r
            ), r


@pytest.fixture(scope="module")
def small_calib(tmp_path_factory):
    """The committed calibration set's first texts: quantize in seconds."""
    with open(os.path.join(ROOT, "data", "calib", "calib.txt")) as f:
        lines = f.read().splitlines()[:40]
    p = tmp_path_factory.mktemp("calib") / "calib.txt"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


@pytest.mark.parametrize("family", sorted(VERIFY_FAMILIES))
def test_quantize_every_family(family, small_calib, tmp_path):
    """hetserve quantize makes an int8 plan for every family that meets its target, and the
    quantized folder's int8 lanes (CPU, and OpenVINO when built) pass the lane check against the
    golden sentences: min cosine >= 0.99, mean >= 0.998."""
    if not cpu_computes("int8"):  # quantize searches the plan on the CPU engine
        pytest.skip("this machine's CPU engine does not compute in int8 (hetserve devices)")
    model = os.path.join(ROOT, "tests", "data", "tiny-" + family)
    q = str(tmp_path / ("tiny-%s-int8" % family))
    r = subprocess.run([BINARY, "quantize", "--model", model, "--calib", small_calib,
                        "--heldout-every", "4", "--threads", "2", "--out", q],
                       capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="passive"),
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "with the plan" in r.stdout and ": met" in r.stdout, r.stdout
    assert os.path.isfile(os.path.join(q, "quant.json"))
    out, rows = verify(q, VERIFY_FAMILIES[family])
    assert out.returncode == 0 and "verify: all passed" in out.stdout, out.stdout + out.stderr
    lanes = [("cpu0", "int8")] + ([("openvino0", "int8")] if os.path.exists(OV_PLUGIN) else [])
    for lane in lanes:
        cmin, cmean, result = rows[lane]
        assert result == "PASS" and cmin >= 0.99 and cmean >= 0.998, (lane, out.stdout)


BARE_DIR = os.path.join(os.path.dirname(BINARY), "test-plugins")


@pytest.mark.skipif(not os.path.exists(os.path.join(BARE_DIR, "libhs_engine_bare.so")),
                    reason="the test engine plugin libhs_engine_bare.so is not built")
@pytest.mark.parametrize("family", ["gte", "qwen3"])
def test_verify_skips_an_engine_by_capability(family):
    """An engine kind without the family's block features (the test plugin "bare": every stage,
    no feature) is skipped by verify with the missing features named, and the run passes on
    the engines that have them; a family it could prepare reaches it and fails there."""
    model = os.path.join(ROOT, "tests", "data", "tiny-" + family)
    env = dict(os.environ, HS_PLUGIN_PATH=BARE_DIR, OMP_WAIT_POLICY="passive")
    out = subprocess.run([BINARY, "verify", "--model", model, "--golden",
                          os.path.join(ROOT, "tests", "golden", VERIFY_FAMILIES[family] + ".json"),
                          "--engine", "cpu,bare"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and "verify: all passed" in out.stdout, out.stdout + out.stderr
    bare = [l for l in out.stdout.splitlines() if l.startswith("bare0")]
    assert len(bare) == 1 and "skipped: this engine does not implement" in bare[0], out.stdout
    assert "rotary positions" in bare[0] and "gated FFN" in bare[0], bare[0]
    # BERT needs no block feature: the bare engine is asked, refuses to compute, and verify fails
    out = subprocess.run([BINARY, "verify", "--model", os.path.join(ROOT, "tests", "data", "tiny-bert-cls"),
                          "--golden", os.path.join(ROOT, "tests", "golden", "tiny_cls.json"),
                          "--engine", "bare", "--limit", "2"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 1 and "ERROR: bare: computes nothing" in out.stdout, out.stdout
