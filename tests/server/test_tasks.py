"""Embedding options of TEI and OpenAI, black-box: `dimensions` (Matryoshka cut, renormalized),
`prompt_name` (config_sentence_transformers.json prompts), `truncate` with
`truncation_direction`. The references are the server's own full-size outputs and the same
text written out by hand: a cut of a row renormalized, "query: " + text, and the token ids
/tokenize returns, cut at the left as HF's truncation_side="left" does."""
import json
import math
import os
import tempfile

import pytest

from conftest import API_CONFIG
from hetserve_fixture import MODEL, Server

TEXTS = ["The quick brown fox jumps over the lazy dog.", "A completely different sentence here."]


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def cut(v, n):
    s = norm(v[:n])
    return [x / s for x in v[:n]]


def close(a, b, tol=1e-5):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol


def test_openai_dimensions_cut_and_renormalize(server):
    st, _, full = server.post("/v1/embeddings", {"input": TEXTS})
    assert st == 200
    for n in (128, 1, 383):
        st, _, r = server.post("/v1/embeddings", {"input": TEXTS, "dimensions": n})
        assert st == 200, r
        for d, f in zip(r["data"], full["data"]):
            assert len(d["embedding"]) == n
            assert close(d["embedding"], cut(f["embedding"], n))
            assert abs(norm(d["embedding"]) - 1) < 1e-5
    st, _, r = server.post("/v1/embeddings", {"input": TEXTS, "dimensions": 384})
    assert st == 200 and close(r["data"][0]["embedding"], full["data"][0]["embedding"], 0)


def test_tei_dimensions(server):
    st, _, full = server.post("/embed", {"inputs": TEXTS})
    st, _, r = server.post("/embed", {"inputs": TEXTS, "dimensions": 64})
    assert st == 200
    assert [len(x) for x in r] == [64, 64]
    assert close(r[1], cut(full[1], 64))


@pytest.mark.parametrize("bad", [0, -3, 385, 1.5, "128", True])
def test_dimensions_out_of_range(server, bad):
    for path, field in (("/v1/embeddings", "input"), ("/embed", "inputs")):
        st, _, r = server.post(path, {field: TEXTS, "dimensions": bad})
        assert st == 400, (path, bad, r)
        assert "[1, 384]" in r["error"]["message"]


def test_truncation_direction(server):
    words = "cat dog sun red sea big top car box hat".split()
    long = " ".join(words[(i * 7 + i // 10) % 10] for i in range(400))  # 1600 characters
    st, _, toks = server.post("/tokenize", {"inputs": long})
    assert st == 200
    ids = [t["id"] for t in toks[0]]
    assert len(ids) > 256
    left = [ids[0]] + ids[len(ids) - 255:]  # [CLS] + the last 254 pieces + [SEP]
    right = ids[:255] + [ids[-1]]
    assert len(left) == 256
    st, _, ref_l = server.post("/embed", {"inputs": [left]})
    st, _, ref_r = server.post("/embed", {"inputs": [right]})
    st, _, got_l = server.post("/embed", {"inputs": long, "truncate": True,
                                          "truncation_direction": "Left"})
    assert st == 200, got_l
    st, _, got_r = server.post("/embed", {"inputs": long, "truncate": True,
                                          "truncation_direction": "right"})
    st, _, got_d = server.post("/embed", {"inputs": long, "truncate": True})
    assert close(got_l[0], ref_l[0]) and close(got_r[0], ref_r[0]) and close(got_d[0], ref_r[0])
    assert not close(got_l[0], got_r[0], 1e-3)
    st, _, r = server.post("/embed", {"inputs": long, "truncate": True,
                                      "truncation_direction": "middle"})
    assert st == 400 and "truncation_direction" in r["error"]["message"]
    st, _, r = server.post("/embed", {"inputs": long, "truncation_direction": "left"})
    assert st == 413  # truncate is still needed


@pytest.fixture(scope="module")
def prompted():
    """MiniLM's files beside a config_sentence_transformers.json with prompts."""
    d = tempfile.TemporaryDirectory(prefix="hs_prompts_")
    m = os.path.join(d.name, "minilm-prompts")
    os.mkdir(m)
    for f in os.listdir(MODEL):
        if f != "config_sentence_transformers.json":
            os.symlink(os.path.join(os.path.abspath(MODEL), f), os.path.join(m, f))
    with open(os.path.join(m, "config_sentence_transformers.json"), "w") as f:
        json.dump({"prompts": {"query": "query: ", "passage": "passage: "},
                   "default_prompt_name": "passage"}, f)
    s = Server(API_CONFIG, model=m)
    yield s
    s.stop()
    d.cleanup()


def test_prompt_name(prompted, server):
    st, _, got = prompted.post("/embed", {"inputs": TEXTS[0], "prompt_name": "query"})
    assert st == 200, got
    st, _, ref = server.post("/embed", {"inputs": "query: " + TEXTS[0]})
    assert close(got[0], ref[0])
    # the default prompt applies when none is named, in both schemas
    st, _, got = prompted.post("/v1/embeddings", {"input": TEXTS[1]})
    st, _, ref = server.post("/v1/embeddings", {"input": "passage: " + TEXTS[1]})
    assert close(got["data"][0]["embedding"], ref["data"][0]["embedding"])
    st, _, r = prompted.post("/embed", {"inputs": "x", "prompt_name": "nope"})
    assert st == 400 and "query" in r["error"]["message"] and "passage" in r["error"]["message"]
    st, _, r = server.post("/embed", {"inputs": "x", "prompt_name": "query"})
    assert st == 400 and "no config_sentence_transformers.json prompts" in r["error"]["message"]
    st, _, r = prompted.post("/embed", {"inputs": "x", "prompt_name": 3})
    assert st == 400
    st, _, r = prompted.post("/embed", {"inputs": [101, 7592, 102], "prompt_name": "query"})
    assert st == 400 and "token ids" in r["error"]["message"]


def test_openai_sdk_dimensions(server):
    openai = pytest.importorskip("openai", reason="the openai package is not installed")
    c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % server.port, api_key="unused")
    r = c.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS, dimensions=128)
    assert [len(d.embedding) for d in r.data] == [128, 128]
    full = c.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS)
    assert close(r.data[0].embedding, cut(full.data[0].embedding, 128))
    with pytest.raises(openai.BadRequestError):
        c.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS, dimensions=1000)


@pytest.fixture(scope="module")
def matryoshka():
    """MiniLM's files beside a config.json that declares matryoshka_dimensions [64, 128, 256]."""
    d = tempfile.TemporaryDirectory(prefix="hs_mrl_")
    m = os.path.join(d.name, "minilm-mrl")
    os.mkdir(m)
    for f in os.listdir(MODEL):
        if f != "config.json":
            os.symlink(os.path.join(os.path.abspath(MODEL), f), os.path.join(m, f))
    with open(os.path.join(MODEL, "config.json")) as f:
        cfg = json.load(f)
    cfg["matryoshka_dimensions"] = [64, 128, 256]
    with open(os.path.join(m, "config.json"), "w") as f:
        json.dump(cfg, f)
    yield m
    d.cleanup()


def test_declared_matryoshka_sizes(matryoshka, server):
    s = Server(API_CONFIG, model=matryoshka)
    try:
        st, _, full = server.post("/embed", {"inputs": TEXTS})
        for n in (64, 128, 256, 384):
            st, _, r = s.post("/embed", {"inputs": TEXTS, "dimensions": n})
            assert st == 200, r
            assert close(r[0], cut(full[0], n)) and close(r[1], cut(full[1], n))
        for n in (1, 100, 383):
            st, _, r = s.post("/v1/embeddings", {"input": TEXTS, "dimensions": n})
            assert st == 400, r
            m = r["error"]["message"]
            assert "64, 128, 256, or 384" in m and str(n) in m, m
        st, _, info = s.get("/info")
        assert json.loads(info)["matryoshka_dimensions"] == [64, 128, 256]
    finally:
        s.stop()
    # nothing declared: any size, and /info says null
    st, _, info = server.get("/info")
    assert json.loads(info)["matryoshka_dimensions"] is None


def test_config_declares_matryoshka_sizes(matryoshka):
    """models[].dimensions wins over config.json's; a size wider than the model is refused."""
    cfg = API_CONFIG + "models:\n  - path: %s\n    dimensions: [32, 96]\n" % matryoshka
    s = Server(cfg, model=None)
    try:
        st, _, r = s.post("/embed", {"inputs": TEXTS[0], "dimensions": 96})
        assert st == 200 and len(r[0]) == 96
        st, _, r = s.post("/embed", {"inputs": TEXTS[0], "dimensions": 64})
        assert st == 400 and "32, 96, or 384" in r["error"]["message"], r
    finally:
        s.stop()
    with pytest.raises(RuntimeError, match="Matryoshka size 512"):
        Server(API_CONFIG + "models:\n  - path: %s\n    dimensions: [512]\n" % MODEL, model=None)
