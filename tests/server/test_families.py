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

from hetserve_fixture import BINARY, ROOT, Server

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
