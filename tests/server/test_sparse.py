"""SPLADE: POST /embed_sparse on a masked-LM checkpoint, black-box (TEI's shape).

Reference: tests/golden/splade_tiny.json, transformers' BertForMaskedLM on the committed tiny
random checkpoint tests/data/tiny-splade (tools/golden/make_tiny_splade.py): per text, max over
its tokens of log(1 + relu(logits)), its non-zero entries. The server must give the same set of
indices (the golden's logits are at least 1e-3 away from 0, so the set cannot flip on rounding)
and every value within 1e-4. Models without a masked-LM head are refused with a 400 naming it;
/embed on the SPLADE model is refused towards /embed_sparse."""
import json
import os

import pytest

from conftest import API_CONFIG
from hetserve_fixture import ROOT, Server

GOLD = json.load(open(os.path.join(ROOT, "tests", "golden", "splade_tiny.json")))
SPLADE = os.path.join(ROOT, "tests", "data", "tiny-splade")
TEXTS = GOLD["texts"]


@pytest.fixture(scope="module")
def sp():
    s = Server(API_CONFIG, model=SPLADE)
    yield s
    s.stop()


def compare(got, want):
    g = {x["index"]: x["value"] for x in got}
    w = {x["index"]: x["value"] for x in want}
    assert sorted(g) == [x["index"] for x in got], "entries not in index order"
    assert set(g) == set(w)
    return max(abs(g[i] - w[i]) for i in w)


def test_embed_sparse_equals_transformers(sp):
    st, _, r = sp.post("/embed_sparse", {"inputs": TEXTS})
    assert st == 200, r
    assert len(r) == len(TEXTS)
    worst = max(compare(got, want) for got, want in zip(r, GOLD["sparse"]))
    print("embed_sparse vs transformers: max abs diff %.3g" % worst)
    assert worst < 1e-4
    # one text, batched with others or alone: the same answer
    st, _, one = sp.post("/embed_sparse", {"inputs": TEXTS[3]})
    assert st == 200 and len(one) == 1
    assert compare(one[0], GOLD["sparse"][3]) < 1e-4
    st, _, root = sp.post("/", {"inputs": TEXTS[3]})  # TEI's root route: the model's task
    assert st == 200 and compare(root[0], GOLD["sparse"][3]) < 1e-4
    assert all(x["value"] > 0 for x in one[0])


def test_embed_sparse_refusals(sp, server):
    st, _, r = server.post("/embed_sparse", {"inputs": "hello"})
    assert st == 400 and "masked-LM head" in r["error"]["message"]
    st, _, r = sp.post("/embed", {"inputs": "hello"})
    assert st == 400 and "/embed_sparse" in r["error"]["message"]
    for body, status, words in [({"inputs": []}, 400, "inputs"), ({"inputs": 3}, 400, "inputs"),
                                ({"inputs": ["a", 3]}, 400, "input[1]"),
                                ({"inputs": "a", "truncate": 1}, 400, "truncate"),
                                ({"inputs": "a " * 200}, 413, "truncate"),
                                ({"inputs": "a", "model": "nope"}, 404, "nope")]:
        st, _, r = sp.post("/embed_sparse", body)
        assert st == status and words in r["error"]["message"], (body, r)
    st, _, r = sp.post("/embed_sparse", {"inputs": "a " * 200, "truncate": True})
    assert st == 200 and len(r) == 1


def test_info_says_splade(sp):
    st, _, r = sp.get("/info")
    r = json.loads(r)
    assert st == 200 and r["model_type"] == {"embedding": {"pooling": "splade"}}


TOKENS_CONFIG = API_CONFIG + """models:
  - path: %s
  - path: %s
    name: tiny-splade-tokens
    pooling: none
  - path: %s
    name: tiny-splade-mean
    pooling: mean
""" % (SPLADE, SPLADE, SPLADE)


@pytest.fixture(scope="module")
def both():
    """The SPLADE folder served three times: its masked-LM head, without pooling, mean-pooled."""
    s = Server(TOKENS_CONFIG, model=None)
    yield s
    s.stop()


def test_embed_all_equals_last_hidden_state(both):
    """POST /embed_all: per input, a row per token of transformers' last_hidden_state (the
    encoder of the tiny BertForMaskedLM), unnormalized, within 1e-4."""
    st, _, r = both.post("/embed_all", {"model": "tiny-splade-tokens", "inputs": TEXTS})
    assert st == 200, r
    worst = 0.0
    for got, want, ids in zip(r, GOLD["hidden"], GOLD["ids"]):
        assert len(got) == len(want) == len(ids)
        assert all(len(row) == 32 for row in got)
        worst = max(worst, max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w)))
    print("embed_all vs transformers last_hidden_state: max abs diff %.3g" % worst)
    assert worst < 1e-4
    models = json.loads(both.get("/v1/models")[2])["data"]
    assert [m["task"] for m in models] == ["sparse_embedding", "token_embedding", "embedding"]
    st, _, one = both.post("/embed_all", {"model": "tiny-splade-tokens", "inputs": TEXTS[3]})
    assert st == 200 and len(one) == 1 and len(one[0]) == len(GOLD["ids"][3])
    st, _, root = both.post("/", {"model": "tiny-splade-tokens", "inputs": TEXTS[3]})
    assert st == 200 and root == one
    # the same folder's SPLADE model still answers /embed_sparse beside it
    st, _, r = both.post("/embed_sparse", {"model": "tiny-splade", "inputs": TEXTS[0]})
    assert st == 200 and compare(r[0], GOLD["sparse"][0]) < 1e-4


def test_embed_all_refusals(both, server):
    st, _, r = server.post("/embed_all", {"inputs": "hello"})
    assert st == 400 and "pooling: none" in r["error"]["message"], r
    st, _, r = both.post("/embed", {"model": "tiny-splade-tokens", "inputs": "hello"})
    assert st == 400 and "/embed_all" in r["error"]["message"], r
    st, _, r = both.post("/embed_all", {"model": "tiny-splade-tokens", "inputs": ["a", ""]})
    assert st == 400 and "input[1]" in r["error"]["message"], r
    st, _, r = both.post("/embed_all", {"model": "tiny-splade-tokens", "inputs": "a " * 200})
    assert st == 413, r
    st, _, r = both.post("/embed_all", {"model": "tiny-splade-tokens", "inputs": "a " * 200,
                                        "truncate": True, "truncation_direction": "left"})
    assert st == 200 and len(r[0]) == 128


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_embed_sparse_reduced_precision(dtype, tmp_path):
    """A bf16 or int8 lane (int8: a plan searched at load into a copy of the folder): the lane
    check at load passes, and the rows stay close to transformers' (the encoder computes in the
    lane's dtype, the masked-LM head in f32)."""
    m = tmp_path / "tiny-splade"
    m.mkdir()
    for f in os.listdir(SPLADE):
        os.symlink(os.path.join(SPLADE, f), m / f)
    cfg = API_CONFIG + "models:\n  - path: %s\n    dtype: %s\n" % (m, dtype)
    try:
        s = Server(cfg, model=None)
    except RuntimeError as e:
        if "cannot run" in str(e) or "dtype" in str(e):
            pytest.skip("%s is not fast on this CPU" % dtype)
        raise
    try:
        st, _, r = s.post("/embed_sparse", {"inputs": TEXTS})
        assert st == 200, r
        worst = 1.0
        for got, want in zip(r, GOLD["sparse"]):
            g = {x["index"]: x["value"] for x in got}
            w = {x["index"]: x["value"] for x in want}
            dot = sum(g.get(i, 0) * v for i, v in w.items())
            cos = dot / (sum(v * v for v in g.values()) * sum(v * v for v in w.values())) ** 0.5
            worst = min(worst, cos)
        print("embed_sparse %s vs transformers f32: min cosine %.6f" % (dtype, worst))
        assert worst > 0.99
    finally:
        s.stop()


def test_pooling_override_mean(both):
    """models[].pooling: mean serves the masked-LM folder dense: /embed is the mean of
    transformers' last_hidden_state rows, L2-normalized (TEI's default normalize)."""
    st, _, r = both.post("/embed", {"model": "tiny-splade-mean", "inputs": TEXTS})
    assert st == 200, r
    worst = 0.0
    for got, rows in zip(r, GOLD["hidden"]):
        mean = [sum(c) / len(rows) for c in zip(*rows)]
        n = sum(x * x for x in mean) ** 0.5
        worst = max(worst, max(abs(a - b / n) for a, b in zip(got, mean)))
    print("pooling mean override vs transformers: max abs diff %.3g" % worst)
    assert worst < 1e-4
    st, _, r = both.post("/embed", {"model": "tiny-splade", "inputs": "a"})
    assert st == 400 and "pooling: mean" in r["error"]["message"], r


def test_sparse_encoder_modules(tmp_path):
    """A sentence-transformers SparseEncoder folder (modules.json: MLMTransformer, SpladePooling)
    pools with the masked-LM head whatever config.json's architectures say."""
    m = tmp_path / "sparse-encoder"
    m.mkdir()
    for f in os.listdir(SPLADE):
        if f != "config.json":
            os.symlink(os.path.join(SPLADE, f), m / f)
    cfg = json.load(open(os.path.join(SPLADE, "config.json")))
    cfg["architectures"] = ["BertModel"]
    (m / "config.json").write_text(json.dumps(cfg))
    pre = "sentence_transformers.sparse_encoder.models."
    (m / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": pre + "MLMTransformer"},
        {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": pre + "SpladePooling"}]))
    s = Server(API_CONFIG, model=str(m))
    try:
        st, _, r = s.post("/embed_sparse", {"inputs": TEXTS[:2]})
        assert st == 200, r
        assert max(compare(g, w) for g, w in zip(r, GOLD["sparse"][:2])) < 1e-4
    finally:
        s.stop()
