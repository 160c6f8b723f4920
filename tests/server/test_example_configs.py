# configs/rag.yaml and configs/multilingual.yaml served as written, the model folders they name
# (folders a user fills) replaced by committed tiny checkpoints of the same kind: the rag
# server's embeddings on the CPU int8 lane, a rerank call whose longest pair passes the rule's
# 64 tokens on OpenVINO and a short one on CPU f32, by the scores of transformers; the
# multilingual server's XLM-RoBERTa-family model (tiny-roberta as model_type xlm-roberta) on
# its bf16 lane within bf16's tolerance of the transformers reference. (`hetserve config
# --check` and the refusal without the folders: tests/cli/test_smoke.py, every configs/*.yaml.)
import json
import os
import shutil
import struct
import subprocess
import tempfile

import pytest

from hetserve_fixture import BINARY, ROOT, Server, cpu_computes

OV_PLUGIN = os.path.join(os.path.dirname(BINARY), "plugins", "libhs_engine_openvino.so")
GOLD = json.load(open(os.path.join(ROOT, "tests", "golden", "rerank_tiny.json")))
Q, DOCS = GOLD["queries"], GOLD["docs"]


def config_with(name, replace):
    with open(os.path.join(ROOT, "configs", name)) as f:
        text = f.read()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def cosine(a, b):
    num = sum(x * y for x, y in zip(a, b))
    return num / ((sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5))


def openvino_device():
    if not os.path.exists(BINARY) or not os.path.exists(OV_PLUGIN):
        return False
    out = subprocess.run([BINARY, "devices"], capture_output=True, text=True, timeout=120)
    return any(k["kind"] == "openvino" and k["devices"] for k in json.loads(out.stdout)["kinds"])


def test_rag_config_routes_embeddings_and_long_pairs():
    if not openvino_device():
        pytest.skip("no OpenVINO engine (the plugin is not built, or it finds no device)")
    if not cpu_computes("int8"):  # the embedder's lane is cpu_int8
        pytest.skip("this machine's CPU engine does not compute in int8 (hetserve devices)")
    with tempfile.TemporaryDirectory(prefix="hs_pytest_") as d:
        emb = os.path.join(d, "embedder")  # a copy: the int8 lane writes its plan into it
        shutil.copytree(os.path.join(ROOT, "tests", "data", "tiny-roberta"), emb)
        ce = os.path.join(ROOT, "tests", "data", "tiny-cross-encoder")
        cfg = config_with("rag.yaml", {"path: models/all-MiniLM-L6-v2-int8": 'path: "%s"' % emb,
                                       "path: models/ms-marco-MiniLM-L-6-v2": 'path: "%s"' % ce})
        s = Server(cfg + "limits:\n  timeout_ms: 300000\n", model=None)
        try:
            st, h, r = s.post("/v1/embeddings", {"input": ["hello world"],
                                                 "model": "all-MiniLM-L6-v2"})
            assert st == 200 and h["x-engine"] == "cpu_int8", (st, h, r)
            q = Q[0]
            want = GOLD["rerank"][q]
            st, h, r = s.post("/rerank", {"query": q, "texts": DOCS[:2], "raw_scores": True})
            assert st == 200 and h["x-engine"] == "cpu_f32", (st, h, r)
            assert max(abs(x["score"] - want[x["index"]]) for x in r) < 1e-4, r
            long_doc = " ".join(DOCS[:3])  # more than 64 tokens with the query
            st, h, r = s.post("/rerank", {"query": q, "texts": [DOCS[1], long_doc]})
            assert st == 200 and h["x-engine"] == "ov", (st, h, r)
            assert "rerank_long" in h.get("x-route", ""), h
        finally:
            s.stop()


def test_multilingual_config_serves_an_xlm_roberta_model():
    g = json.load(open(os.path.join(ROOT, "tests", "golden", "tiny_roberta.json")))
    raw = open(os.path.join(ROOT, "tests", "golden", "tiny_roberta.f32"), "rb").read()
    dim = g["dim"]
    with tempfile.TemporaryDirectory(prefix="hs_pytest_") as d:
        m = os.path.join(d, "xlmr")
        shutil.copytree(os.path.join(ROOT, "tests", "data", "tiny-roberta"), m)
        with open(os.path.join(m, "config.json")) as f:
            c = json.load(f)
        c["model_type"] = "xlm-roberta"
        c["architectures"] = ["XLMRobertaModel"]
        with open(os.path.join(m, "config.json"), "w") as f:
            json.dump(c, f)
        cfg = config_with("multilingual.yaml", {"path: models/multilingual-e5-base": 'path: "%s"' % m})
        try:
            s = Server(cfg + "limits:\n  timeout_ms: 300000\n", model=None)
        except RuntimeError as e:
            if "bf16" in str(e):
                pytest.skip("this CPU computes no bf16: %s" % str(e)[-200:])
            raise
        try:
            for i, text in enumerate(g["sentences"][:6]):
                if text.startswith("(random ids"):
                    continue
                st, h, r = s.post("/v1/embeddings", {"input": text, "model": "multilingual-e5-base"})
                assert st == 200, r
                assert h["x-engine"] == "cpu_bf16", h
                ref = struct.unpack_from("<%df" % dim, raw, 4 * dim * i)
                assert cosine(r["data"][0]["embedding"], ref) >= 0.999, text
        finally:
            s.stop()


def test_hybrid_int8_preempt_config_places_precision_by_length():
    """configs/hybrid-int8-preempt.yaml as written, its quantized folder replaced by a copy of
    the tiny RoBERTa checkpoint: short texts on the int8 lane (which preempts core 1) within
    int8's tolerance of the transformers reference, a long one on the f32 lane with the numbers
    of a plain f32 server."""
    if not cpu_computes("int8"):
        pytest.skip("this machine's CPU engine does not compute in int8 (hetserve devices)")
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("the config pins cores 0 and 1")
    g = json.load(open(os.path.join(ROOT, "tests", "golden", "tiny_roberta.json")))
    raw = open(os.path.join(ROOT, "tests", "golden", "tiny_roberta.f32"), "rb").read()
    dim = g["dim"]
    shorts = [(i, t) for i, t in enumerate(g["sentences"]) if not t.startswith("(random ids")]
    long_text = " ".join(t for _, t in shorts[2:4])  # past the rule's 32 tokens, within 64
    with tempfile.TemporaryDirectory(prefix="hs_pytest_") as d:
        m = os.path.join(d, "model")  # a copy: the int8 lane writes its plan into it
        shutil.copytree(os.path.join(ROOT, "tests", "data", "tiny-roberta"), m)
        cfg = config_with("hybrid-int8-preempt.yaml",
                          {"path: models/all-MiniLM-L6-v2-int8": 'path: "%s"' % m})
        s = Server(cfg + "limits:\n  timeout_ms: 300000\n", model=None)
        try:
            for i, text in shorts:
                st, h, r = s.post("/v1/embeddings", {"input": text, "model": "all-MiniLM-L6-v2"})
                assert st == 200 and h["x-engine"] == "cpu_int8", (text, st, h)
                ref = struct.unpack_from("<%df" % dim, raw, 4 * dim * i)
                assert cosine(r["data"][0]["embedding"], ref) >= 0.99, text
            st, h, r = s.post("/v1/embeddings", {"input": long_text, "model": "all-MiniLM-L6-v2"})
            assert st == 200 and h["x-engine"] == "cpu_f32", (st, h)
            got_long = r["data"][0]["embedding"]
            st, _, body = s.get("/metrics")
            claims = [l for l in body.decode().splitlines()
                      if l.startswith('hetserve_core_preempt_claims_total{core="1"}')]
            assert claims and float(claims[0].split()[-1]) > 0, claims
        finally:
            s.stop()
        f32 = Server(model=m)
        try:
            st, _, r = f32.post("/v1/embeddings", {"input": long_text})
            assert st == 200, r
            assert cosine(got_long, r["data"][0]["embedding"]) >= 0.99999
        finally:
            f32.stop()
