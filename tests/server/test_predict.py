"""POST /predict (TEI schema) and the small -> big cascade, black-box.

What runs in CI (no big model there): the cascade's "small" is all-MiniLM-L6-v2 with the
committed head heads/all-MiniLM-L6-v2-sentiment.json, and its "big" is all-MiniLM-L6-v2 again,
served under a second name with a test-made head (the committed head's weights x 3, so its
scores differ and show which head answered). These tests check the cascade's mechanics --
exactly the inputs whose small-model confidence is below the threshold escalate, the cap holds
-- not the big model's accuracy. The real big model (all-mpnet-base-v2) is exercised by
test_real_cascade_mpnet only when scripts/setup --models all has installed it; otherwise that
test is skipped with a line saying so.
"""
import json
import math
import os

import pytest

from hetserve_fixture import MODEL, ROOT, Server

SMALL_HEAD = os.path.join(ROOT, "heads", "all-MiniLM-L6-v2-sentiment.json")
BIG_HEAD_MPNET = os.path.join(ROOT, "heads", "all-mpnet-base-v2-sentiment.json")
MPNET = os.environ.get("HS_MPNET_DIR") or os.path.join(ROOT, "models", "all-mpnet-base-v2")

POSITIVE = ["An absolute joy from start to finish, wonderful performances and a beautiful story.",
            "One of the best films of the year: moving, funny and brilliantly acted."]
NEGATIVE = ["A boring, incoherent mess; the worst movie I have seen in years.",
            "Dull, lifeless and painfully bad, a complete waste of time."]
# mixed / ambiguous snippets: some of them get low small-model confidence
MIXED = ["The plot is thin but the actors seem to be having fun.",
         "It's not a bad film, just not a particularly memorable one.",
         "Some scenes work, others fall flat.",
         "A strange movie.",
         "I expected more from this director, yet parts of it were quite good.",
         "The second half drags, though the ending almost saves it.",
         "Neither great nor terrible.",
         "Visually striking but emotionally cold.",
         "It has its moments.",
         "Uneven, occasionally brilliant, often tedious."]

CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 2
models:
  - name: minilm
    path: {model}
  - name: minilm-big
    path: {model}
limits:
  timeout_ms: 300000
cascade:
  small: minilm
  small_head: {small_head}
  big: minilm-big
  big_head: {big_head}
  threshold: {threshold}
  escalation_max_ratio: {cap}
"""


def load_head(path):
    with open(path) as f:
        return json.load(f)


def apply_head(head, x):
    z = [sum(w * v for w, v in zip(row, x)) + b for row, b in zip(head["weight"], head["bias"])]
    m = max(z)
    e = [math.exp(v - m) for v in z]
    return [v / sum(e) for v in e]


@pytest.fixture(scope="module")
def tmpdir_heads(tmp_path_factory):
    d = tmp_path_factory.mktemp("heads")
    head = load_head(SMALL_HEAD)
    head["weight"] = [[3 * w for w in row] for row in head["weight"]]
    head["bias"] = [3 * b for b in head["bias"]]
    head["model"] = "minilm-big (test head: committed MiniLM head x 3)"
    path = d / "big.json"
    path.write_text(json.dumps(head))
    return str(path)


def start(big_head, threshold, cap):
    return Server(CONFIG.format(model=MODEL, small_head=SMALL_HEAD, big_head=big_head,
                                threshold=threshold, cap=cap), model=None)


@pytest.fixture(scope="module")
def cascade_server(tmpdir_heads):
    s = start(tmpdir_heads, 0.9, 1.0)
    yield s
    s.stop()


def small_confidences(server, texts):
    """The small model's head probabilities, computed here from the server's own embeddings."""
    st, _, emb = server.post("/embed", {"inputs": texts, "model": "minilm"})
    assert st == 200
    head = load_head(SMALL_HEAD)
    return [apply_head(head, e) for e in emb]


def test_schema_and_obvious_labels(cascade_server):
    st, h, body = cascade_server.post("/predict", {"inputs": POSITIVE[0]})
    assert st == 200, body
    # one string: a flat list of {label, score}, sorted by score
    assert isinstance(body, list) and len(body) == 2
    assert {d["label"] for d in body} == {"negative", "positive"}
    assert body[0]["score"] >= body[1]["score"]
    assert abs(sum(d["score"] for d in body) - 1) < 1e-5
    assert body[0]["label"] == "positive"
    assert h["x-cascade"] in ("small", "big")
    # routed like any request; X-Route carries the cascade's decision
    assert h["x-route"].endswith(";cascade=" + h["x-cascade"]), h["x-route"]
    st, h, body = cascade_server.post("/predict", {"inputs": POSITIVE + NEGATIVE})
    assert st == 200
    assert len(body) == 4 and all(isinstance(r, list) and len(r) == 2 for r in body)
    assert [r[0]["label"] for r in body] == ["positive"] * 2 + ["negative"] * 2
    assert len(h["x-cascade"].split(",")) == 4


def test_bad_requests(cascade_server):
    for body, want in [({}, 400), ({"inputs": []}, 400), ({"inputs": 3}, 400),
                       ({"inputs": [""]}, 400), ({"inputs": ["ok", 5]}, 400),
                       ({"inputs": "x", "truncate": "yes"}, 400), ("[1,", 400)]:
        st, _, b = cascade_server.request("POST", "/predict", body)
        assert st == want, (body, st, b)
        assert "error" in json.loads(b)
    st, h, _ = cascade_server.request("GET", "/predict")
    assert st == 405 and h.get("allow") == "POST"


def test_escalates_exactly_the_low_confidence_inputs(cascade_server):
    texts = POSITIVE + NEGATIVE + MIXED
    probs = small_confidences(cascade_server, texts)
    conf = [max(p) for p in probs]
    low = [c < 0.9 for c in conf]
    # the corpus must exercise both sides of the threshold, away from it (float noise)
    assert any(low) and not all(low), conf
    assert all(abs(c - 0.9) > 1e-4 for c in conf), conf
    st, h, body = cascade_server.post("/predict", {"inputs": texts})
    assert st == 200
    who = h["x-cascade"].split(",")
    assert who == ["big" if l else "small" for l in low], (who, conf)
    big_head = load_head(SMALL_HEAD)
    for i, r in enumerate(body):
        scores = {d["label"]: d["score"] for d in r}
        if who[i] == "small":
            want = dict(zip(big_head["labels"], probs[i]))
        else:  # the test head: logits x 3
            z = [3 * math.log(p) for p in probs[i]]
            m = max(z)
            e = [math.exp(v - m) for v in z]
            want = dict(zip(big_head["labels"], [v / sum(e) for v in e]))
        for k in want:
            assert abs(scores[k] - want[k]) < 1e-4, (i, who[i], scores, want)
    # one input per request gives the same decisions
    for t, l in zip(texts, low):
        st, h, _ = cascade_server.post("/predict", {"inputs": t})
        assert st == 200 and h["x-cascade"] == ("big" if l else "small")
    st, _, m = cascade_server.get("/metrics")
    m = m.decode()
    assert "hetserve_cascade_escalated_total %d" % (2 * sum(low)) in m
    assert "hetserve_cascade_decisions_total %d" % (2 * len(texts) + 5) in m


def test_cap_is_respected(tmpdir_heads):
    texts = MIXED * 3
    s = start(tmpdir_heads, 0.999999, 0.25)  # nearly every input is "unsure"
    try:
        esc = capped = n = 0
        for t in texts:
            st, h, body = s.post("/predict", {"inputs": t})
            assert st == 200, body
            n += 1
            d = h["x-cascade"]
            esc += d == "big"
            capped += d == "capped"
            assert esc <= 0.25 * n + 1e-9
            if d == "capped":
                assert esc + 1 > 0.25 * n
        assert esc > 0 and capped > 0
        st, _, m = s.get("/metrics")
        m = m.decode()
        assert "hetserve_cascade_capped_total %d" % capped in m
        assert "hetserve_cascade_escalation_ratio %.6f" % (esc / n) in m
    finally:
        s.stop()


ROUTED = """
engines:
  - {{name: cpu_a, kind: cpu, threads: 1}}
  - {{name: cpu_b, kind: cpu, threads: 1}}
models:
  - {{name: minilm, path: {model}, engine: cpu_a}}
  - {{name: minilm-big, path: {model}, engine: cpu_b}}
routes:
  - {{name: small, model: minilm}}
  - {{name: big, model: minilm-big}}
  - {{name: casc, kind: cascade, small: small, big: big}}
router:
  rules:
    - {{task: predict, route: casc}}
limits:
  timeout_ms: 300000
cascade:
  small: minilm
  small_head: {small_head}
  big: minilm-big
  big_head: {big_head}
  threshold: 0.9
"""


def test_cascade_route_places_the_stages(tmpdir_heads):
    """A router route of kind cascade: the small stage on its small route (cpu_a), the
    escalations on its big route (cpu_b); the threshold and cap are the cascade section's."""
    s = Server(ROUTED.format(model=MODEL, small_head=SMALL_HEAD, big_head=tmpdir_heads),
               model=None)
    try:
        texts = POSITIVE + NEGATIVE + MIXED
        low = [max(p) < 0.9 for p in small_confidences(s, texts)]
        assert any(low) and not all(low)
        for t, l in zip(texts, low):
            st, h, body = s.post("/predict", {"inputs": t})
            assert st == 200, body
            if l:
                assert h["x-cascade"] == "big"
                assert h["x-route"] == "big;policy=escalate;cascade=big", h["x-route"]
                assert h["x-engine"] == "cpu_b"
                assert "cascade casc escalates" in h["x-route-reason"]
            else:
                assert h["x-cascade"] == "small"
                assert h["x-route"] == "small;policy=rule;cascade=small", h["x-route"]
                assert h["x-engine"] == "cpu_a"
        st, h, body = s.post("/predict", {"inputs": texts})
        assert st == 200 and h["x-cascade"].split(",") == ["big" if l else "small" for l in low]
        st, _, m = s.get("/metrics")
        m = m.decode()
        n_esc = 2 * sum(low)
        assert ('hetserve_route_escalations_total{route="casc",outcome="escalated"} %d' % n_esc
                in m), m
        assert "hetserve_cascade_escalated_total %d" % n_esc in m
    finally:
        s.stop()


def test_cascade_route_must_match_the_cascade_section(tmpdir_heads):
    cfg = ROUTED.format(model=MODEL, small_head=SMALL_HEAD, big_head=tmpdir_heads)
    cfg = cfg.replace("small: small, big: big", "small: big, big: small")
    with pytest.raises(RuntimeError, match="cascade route 'casc' runs minilm-big then minilm"):
        Server(cfg, model=None)


def test_not_configured_is_404():
    s = Server(None)
    try:
        st, _, b = s.post("/predict", {"inputs": "hello"})
        assert st == 404 and "not configured" in b["error"]["message"]
    finally:
        s.stop()


@pytest.mark.skipif(not os.path.exists(os.path.join(MPNET, "model.safetensors")),
                    reason="all-mpnet-base-v2 not installed (scripts/setup --models all)")
def test_real_cascade_mpnet():
    """The real cascade: MiniLM -> all-mpnet-base-v2 with the committed heads."""
    cfg = """
engines:
  - name: cpu0
    kind: cpu
    threads: 2
models:
  - path: {small}
  - path: {big}
limits:
  timeout_ms: 300000
cascade:
  small: all-MiniLM-L6-v2
  small_head: {small_head}
  big: all-mpnet-base-v2
  big_head: {big_head}
  threshold: 0.9
""".format(small=MODEL, big=MPNET, small_head=SMALL_HEAD, big_head=BIG_HEAD_MPNET)
    s = Server(cfg, model=None)
    try:
        texts = POSITIVE + NEGATIVE + MIXED
        st, _, emb = s.post("/embed", {"inputs": texts, "model": "all-MiniLM-L6-v2"})
        head = load_head(SMALL_HEAD)
        low = [max(apply_head(head, e)) < 0.9 for e in emb]
        st, h, body = s.post("/predict", {"inputs": texts})
        assert st == 200
        assert h["x-cascade"].split(",") == ["big" if l else "small" for l in low]
        assert [r[0]["label"] for r in body[:4]] == ["positive"] * 2 + ["negative"] * 2
    finally:
        s.stop()


def test_deadline_and_priority_like_embed(tmpdir_heads):
    # /predict reads priority and timeout_ms (body) or X-Priority / X-Timeout-Ms (headers) as
    # /embed does, with the same errors
    s = start(tmpdir_heads, 0.7, 1.0)
    try:
        for body, headers in [({"inputs": "x", "timeout_ms": 0}, None),
                              ({"inputs": "x", "timeout_ms": "soon"}, None),
                              ({"inputs": "x"}, {"X-Timeout-Ms": "ten"}),
                              ({"inputs": "x", "priority": "urgent"}, None),
                              ({"inputs": "x"}, {"X-Priority": "urgent"}),
                              ({"inputs": "x", "timeout_ms": 10 ** 9}, None)]:
            st, _, err = s.post("/predict", body, headers=headers)
            assert st == 400, (body, headers, st, err)
            assert "timeout_ms" in err["error"]["message"] or "priority" in err["error"]["message"].lower()
        st, _, ok = s.post("/predict", {"inputs": ["fine film"], "timeout_ms": 60000,
                                        "priority": "batch"})
        assert st == 200 and len(ok) == 1
        st, _, ok = s.post("/predict", {"inputs": "fine film"},
                           headers={"X-Timeout-Ms": "60000", "X-Priority": "interactive"})
        assert st == 200
    finally:
        s.stop()


# One compute thread, one lane for both endpoints (the small model is the only one), a huge
# initial throughput guess so that no request is refused by prediction before a batch was
# measured: a short deadline can only expire while queued behind the long batch.
QUEUED = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1
models:
  - name: minilm
    path: {model}
batching:
  batch_window_us: 1000
  batch_max: 32
  batch_max_tokens: 16384
limits:
  queue_max: 1024
  timeout_ms: 300000
scheduler:
  throughput_init_tokens_per_s: 1000000000
cascade:
  small: minilm
  small_head: {small_head}
  threshold: 0.5
"""

LONG = ["%d " % i + "tokens make this sequence long enough to fill its bucket " * 24
        for i in range(32)]


def test_deadline_expires_while_queued_like_embed():
    # /predict goes through the same dispatch as /embed: a deadline (body or X-Timeout-Ms, at
    # either priority) that passes while it waits behind a long batch is a 504, answered while
    # that batch still runs.
    import threading
    import time
    s = Server(QUEUED.format(model=MODEL, small_head=SMALL_HEAD), model=None)
    try:
        result = {}

        def long_batch():
            result["r"] = s.post("/embed", {"inputs": LONG, "truncate": True})
            result["at"] = time.monotonic()

        t = threading.Thread(target=long_batch)
        t.start()
        time.sleep(0.2)  # let the long batch start (its window is 1 ms)
        answers = []
        for body, headers in [({"inputs": "short one", "timeout_ms": 100}, None),
                              ({"inputs": ["short one"]}, {"X-Timeout-Ms": "100"}),
                              ({"inputs": "short one", "timeout_ms": 100, "priority": "batch"},
                               None)]:
            st, h, b = s.post("/predict", body, headers=headers)
            answers.append(time.monotonic())
            assert st == 504, (body, headers, st, b)
            assert b["error"]["type"] == "timeout_error" and "deadline" in b["error"]["message"]
            assert h["x-engine"] == "cpu0" and ";policy=" in h["x-route"]
            assert "route;dur=" in h["server-timing"]
        t.join()
        st, _, v = result["r"]
        assert st == 200 and len(v) == 32
        assert max(answers) < result["at"]
        _, _, m = s.get("/metrics")
        assert 'outcome="timeout"} 3' in m.decode()
    finally:
        s.stop()
