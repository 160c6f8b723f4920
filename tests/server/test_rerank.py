"""Cross-encoders and checkpoint classifier heads, TEI's and Cohere's shapes, black-box:
POST /rerank, /v1/rerank, /predict (checkpoint head), /similarity, GET /info and the root route.

References: tests/golden/rerank_tiny.json, transformers' logits of the committed tiny random
BertForSequenceClassification checkpoints (tools/golden/make_tiny_cross_encoder.py), on
query/document pairs (token types 1 on the document) and single texts. Scores must equal them
within 1e-4 and rank the documents in the same order."""
import json
import math
import os

import pytest

from conftest import API_CONFIG
from hetserve_fixture import ROOT, Server, cpu_computes

GOLD = json.load(open(os.path.join(ROOT, "tests", "golden", "rerank_tiny.json")))
CE = os.path.join(ROOT, "tests", "data", "tiny-cross-encoder")
CLS = os.path.join(ROOT, "tests", "data", "tiny-classifier")
Q, DOCS = GOLD["queries"], GOLD["docs"]


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


@pytest.fixture(scope="module")
def ce():
    s = Server(API_CONFIG, model=CE)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def clf():
    s = Server(API_CONFIG, model=CLS)
    yield s
    s.stop()


def test_rerank_equals_transformers(ce):
    assert GOLD["rerank_types_zero"][0] != pytest.approx(GOLD["rerank"][Q[0]][0], abs=1e-2)
    for q in Q:
        want = GOLD["rerank"][q]
        st, _, r = ce.post("/rerank", {"query": q, "texts": DOCS, "raw_scores": True})
        assert st == 200, r
        assert [x["index"] for x in r] == sorted(range(len(DOCS)), key=lambda i: -want[i])
        for x in r:
            assert abs(x["score"] - want[x["index"]]) < 1e-4
        st, _, r = ce.post("/rerank", {"query": q, "texts": DOCS, "return_text": True})
        for x in r:
            assert abs(x["score"] - sigmoid(want[x["index"]])) < 1e-4
            assert x["text"] == DOCS[x["index"]]


def test_v1_rerank_cohere_shape(ce):
    want = GOLD["rerank"][Q[1]]
    order = sorted(range(len(DOCS)), key=lambda i: -want[i])
    st, _, r = ce.post("/v1/rerank", {"model": "tiny-cross-encoder", "query": Q[1],
                                      "documents": DOCS, "top_n": 3, "return_documents": True})
    assert st == 200, r
    assert [x["index"] for x in r["results"]] == order[:3]
    for x in r["results"]:
        assert abs(x["relevance_score"] - sigmoid(want[x["index"]])) < 1e-4
        assert x["document"] == {"text": DOCS[x["index"]]}
    assert r["usage"]["total_tokens"] > 0
    st, _, r = ce.post("/v1/rerank", {"query": Q[1], "documents": [{"text": d} for d in DOCS]})
    assert st == 200 and [x["index"] for x in r["results"]] == order
    assert "document" not in r["results"][0]


@pytest.mark.parametrize("body,status,words", [
    ({"texts": ["a"]}, 400, "query"),
    ({"query": "a", "texts": []}, 400, "texts"),
    ({"query": "a", "texts": "b"}, 400, "texts"),
    ({"query": "a", "texts": ["b", 3]}, 400, "texts[1]"),
    ({"query": "a", "texts": ["b"], "raw_scores": 1}, 400, "raw_scores"),
    ({"query": "a", "texts": ["b"], "truncation_direction": "up"}, 400, "truncation_direction"),
    ({"query": "a " * 100, "texts": ["b " * 100]}, 413, "truncate"),
])
def test_rerank_bad_input(ce, body, status, words):
    st, _, r = ce.post("/rerank", body)
    assert st == status, r
    assert words in r["error"]["message"]


def test_rerank_truncates_longest_first(ce):
    st, _, r = ce.post("/rerank", {"query": "a " * 100, "texts": ["b " * 100], "truncate": True})
    assert st == 200 and len(r) == 1


def test_rerank_refused_on_embedding_model(server, ce):
    st, _, r = server.post("/rerank", {"query": "a", "texts": ["b"]})
    assert st == 400 and "not a reranker" in r["error"]["message"]
    st, _, r = ce.post("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]}})
    assert st == 400 and "sequence classifier" in r["error"]["message"]


def test_predict_checkpoint_head(clf):
    labels = GOLD["labels"]
    st, _, r = clf.post("/predict", {"inputs": GOLD["singles"], "raw_scores": True})
    assert st == 200, r
    for got, want in zip(r, GOLD["classify"]):
        assert [x["label"] for x in got] == [labels[i] for i in
                                             sorted(range(3), key=lambda i: -want[i])]
        for x in got:
            assert abs(x["score"] - want[labels.index(x["label"])]) < 1e-4
    # multi-label: a sigmoid per label; one text gives one list
    st, _, r = clf.post("/predict", {"inputs": GOLD["singles"][0]})
    assert st == 200 and isinstance(r[0], dict)
    for x in r:
        assert abs(x["score"] - sigmoid(GOLD["classify"][0][labels.index(x["label"])])) < 1e-4
    pairs = [[q, d] for q, d in zip(Q, DOCS[:3])]
    st, _, r = clf.post("/predict", {"inputs": pairs, "raw_scores": True})
    assert st == 200, r
    for got, want in zip(r, GOLD["classify_pairs"]):
        for x in got:
            assert abs(x["score"] - want[labels.index(x["label"])]) < 1e-4
    st, _, r = clf.post("/predict", {"inputs": [["only one"]]})
    assert st == 400


def test_similarity(server):
    src, sents = "A man is eating food.", ["A man is eating a meal.", "The sky is blue."]
    st, _, r = server.post("/similarity", {"inputs": {"source_sentence": src, "sentences": sents}})
    assert st == 200, r
    st, _, e = server.post("/embed", {"inputs": [src] + sents})
    want = [sum(a * b for a, b in zip(e[0], v)) for v in e[1:]]  # rows are unit length
    assert len(r) == 2 and all(abs(a - b) < 1e-5 for a, b in zip(r, want))
    assert r[0] > r[1]
    st, _, r = server.post("/similarity", {"inputs": ["x"]})
    assert st == 400 and "source_sentence" in r["error"]["message"]


def test_info(server, ce, clf):
    st, _, body = server.get("/info")
    i = json.loads(body)
    assert st == 200 and i["model_type"] == {"embedding": {"pooling": "mean"}}
    assert i["max_input_length"] == 256 and i["model_dtype"] == "float32" and i["version"]
    for k in ("model_id", "max_concurrent_requests", "max_batch_tokens", "max_client_batch_size",
              "tokenization_workers"):
        assert k in i
    i = json.loads(ce.get("/info")[2])
    assert list(i["model_type"]) == ["reranker"]
    tasks = [json.loads(x.get("/v1/models")[2])["data"][0]["task"] for x in (server, ce, clf)]
    assert tasks == ["embedding", "rerank", "classify"]
    i = json.loads(clf.get("/info")[2])
    assert i["model_type"]["classifier"]["id2label"] == {"0": "joy", "1": "anger", "2": "other"}


def test_root_route(server, ce, clf):
    st, _, r = server.post("/", {"inputs": ["hello"]})
    assert st == 200 and len(r[0]) == 384
    st, _, r = server.post("/", {"inputs": {"source_sentence": "a", "sentences": ["a", "b"]}})
    assert st == 200 and abs(r[0] - 1) < 1e-5
    st, _, r = ce.post("/", {"query": Q[0], "texts": DOCS[:2], "raw_scores": True})
    assert st == 200 and abs(r[0]["score"] - max(GOLD["rerank"][Q[0]][:2])) < 1e-4
    # one text answered as a batch of one, as the Inference API does
    st, _, r = clf.post("/", {"inputs": GOLD["singles"][1], "raw_scores": True})
    assert st == 200 and abs(r[0][0]["score"] - max(GOLD["classify"][1])) < 1e-4


def test_huggingface_hub_client(server, clf):
    hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed")
    c = hub.InferenceClient(base_url="http://127.0.0.1:%d" % server.port)
    v = c.feature_extraction("hello world")
    assert v.shape[-1] == 384
    s = c.sentence_similarity("A man is eating food.", other_sentences=["A man eats.", "Sky."])
    assert len(s) == 2 and s[0] > s[1]
    c = hub.InferenceClient(base_url="http://127.0.0.1:%d" % clf.port)
    out = c.text_classification(GOLD["singles"][0], top_k=3)
    assert sorted(o.label for o in out) == sorted(GOLD["labels"])


ROUTED = """
engines:
  - name: small
    kind: cpu
    threads: 1
  - name: big
    kind: cpu
    threads: 1
models:
  - path: "%s"
    engines: [small, big]
limits:
  timeout_ms: 300000
routes:
  - name: short
    engines: [small]
  - name: long
    engines: [big]
router:
  rules:
    - {task: rerank, tokens_min: 64, route: long}
  default_route: short
""" % CE


def test_long_pairs_are_routed():
    """A rerank job's longest pair picks its route, like any request's longest sequence."""
    s = Server(ROUTED, model=None)
    try:
        st, h, r = s.post("/rerank", {"query": Q[0], "texts": DOCS[:4], "raw_scores": True})
        assert st == 200 and h["x-engine"] == "small", h  # pairs of 27..45 tokens
        long_doc = " ".join(DOCS[:3])  # 81 tokens with the query
        st, h, r = s.post("/rerank", {"query": Q[0], "texts": [DOCS[1], long_doc]})
        assert st == 200 and h["x-engine"] == "big", h
        st, h, r = s.post("/embed", {"inputs": long_doc})
        assert st == 200 and h["x-engine"] == "small"  # the rule is the reranker's
    finally:
        s.stop()


def test_rerank_on_a_bf16_lane():
    """The head runs in f32 on the host whatever the lane's dtype: a bf16 lane ranks as
    transformers' f32 does, its logits within 0.1 (measured 0.04)."""
    if not cpu_computes("bf16"):
        pytest.skip("this machine's CPU engine does not compute in bf16 (hetserve devices)")
    s = Server("engines:\n  - {name: cpu_bf16, kind: cpu, dtype: bf16, threads: 1}\n"
               "models:\n  - path: \"%s\"\n" % CE, model=None)
    try:
        for q in Q:
            want = GOLD["rerank"][q]
            st, h, r = s.post("/rerank", {"query": q, "texts": DOCS, "raw_scores": True})
            assert st == 200 and h["x-engine"] == "cpu_bf16", r
            assert [x["index"] for x in r] == sorted(range(len(DOCS)), key=lambda i: -want[i])
            assert max(abs(x["score"] - want[x["index"]]) for x in r) < 0.1
    finally:
        s.stop()


def test_predict_beside_a_cascade():
    """With a cascade configured, /predict naming a model with its own head uses that head;
    without a model it is the cascade's."""
    from hetserve_fixture import MODEL
    head = os.path.join(ROOT, "heads", "all-MiniLM-L6-v2-sentiment.json")
    s = Server("""
engines:
  - {name: cpu0, kind: cpu, threads: 1}
models:
  - {name: minilm, path: "%s"}
  - {name: clf, path: "%s"}
limits:
  timeout_ms: 300000
cascade:
  small: minilm
  small_head: %s
  big: minilm
  big_head: %s
  threshold: 0.5
""" % (MODEL, CLS, head, head), model=None)
    try:
        st, _, r = s.post("/predict", {"model": "clf", "inputs": GOLD["singles"][0],
                                       "raw_scores": True})
        assert st == 200, r
        assert abs(r[0]["score"] - max(GOLD["classify"][0])) < 1e-4
        st, h, r = s.post("/predict", {"inputs": "a wonderful film"})
        assert st == 200, r
        assert {x["label"] for x in r} != set(GOLD["labels"])  # the sentiment head's labels
    finally:
        s.stop()


def test_rerank_on_openvino():
    """The OpenVINO engine's graph takes the pairs' token types too (skipped without it)."""
    from hetserve_fixture import BINARY
    import subprocess
    plugin = os.path.join(os.path.dirname(BINARY), "plugins", "libhs_engine_openvino.so")
    if not os.path.exists(plugin):
        pytest.skip("OpenVINO engine plugin not built")
    kinds = json.loads(subprocess.run([BINARY, "devices"], capture_output=True, text=True,
                                      timeout=120).stdout)["kinds"]
    if not any(k["kind"] == "openvino" and k["devices"] for k in kinds):
        pytest.skip("no OpenVINO device")
    s = Server('engines:\n  - {name: ov, kind: plugin, library: "%s", threads: 1}\n'
               'models:\n  - path: "%s"\nlimits:\n  timeout_ms: 300000\n' % (plugin, CE),
               model=None)
    try:
        for q in Q:
            want = GOLD["rerank"][q]
            st, h, r = s.post("/rerank", {"query": q, "texts": DOCS, "raw_scores": True})
            assert st == 200 and h["x-engine"] == "ov", r
            assert [x["index"] for x in r] == sorted(range(len(DOCS)), key=lambda i: -want[i])
            assert max(abs(x["score"] - want[x["index"]]) for x in r) < 1e-4
    finally:
        s.stop()


LEFT = json.load(open(os.path.join(ROOT, "tests", "golden", "pair_left_tiny.json")))


@pytest.mark.parametrize("side", ["left", "right"])
def test_pairs_cut_like_tokenizers(ce, side):
    """Pairs longer than the model's 128 tokens, cut longest first at the left (HF's
    truncation_side="left": each side keeps its end) or the right: transformers' logits on the
    ids tokenizers keeps (tests/golden/pair_left_tiny.json, tools/golden/gen_pair_truncation.py),
    through /rerank (one query, one document per call), /v1/rerank and /predict's pairs."""
    want = LEFT[side]["logits"]
    assert max(abs(a - b) for a, b in zip(LEFT["left"]["logits"], LEFT["right"]["logits"])) > 1e-2
    worst = 0.0
    for (q, d), w in zip(LEFT["pairs"], want):
        st, _, r = ce.post("/rerank", {"query": q, "texts": [d], "raw_scores": True,
                                      "truncate": True, "truncation_direction": side})
        assert st == 200, r
        worst = max(worst, abs(r[0]["score"] - w))
        st, _, r = ce.post("/v1/rerank", {"query": q, "documents": [d],
                                         "truncation_direction": side})
        assert st == 200, r
        assert abs(r["results"][0]["relevance_score"] - sigmoid(w)) < 1e-4
    print("pairs cut at the %s: max abs logit diff %.3g" % (side, worst))
    assert worst < 1e-4
    st, _, r = ce.post("/rerank", {"query": LEFT["pairs"][0][0], "texts": [LEFT["pairs"][0][1]],
                                  "truncation_direction": side})
    assert st == 413 and "truncate" in r["error"]["message"]
