"""API keys and tenants (server/auth.h), black-box: 401 / 403 / 429 per tenant, the header
conventions, open probes, metrics and capture by tenant, and the keys reloaded on SIGHUP without
dropping a connection."""
import hashlib
import json
import os
import re
import secrets
import signal
import tempfile
import time

import pytest

from hetserve_fixture import MODEL, Server

KEYS = {name: "hs-" + secrets.token_hex(16) for name in
        ("alpha", "beta", "gamma", "delta", "zeta", "filed", "epsilon")}


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 2
models:
  - name: minilm
    path: {model}
  - name: other
    path: {model}
limits:
  timeout_ms: 300000
scheduler:
  wait_max_ms: 0
server:
  capture:
    file: {capture}
auth:
  keys_file: {keys_file}
  keys:
    - sha256: {alpha}
      tenant: alpha
    - sha256: {beta}
      tenant: beta
      models: [minilm]
      endpoints: [/embed, /v2]
    - sha256: {gamma}
      tenant: gamma
      rate: {{requests_per_s: 1, burst_s: 2}}
    - sha256: {delta}
      tenant: delta
      rate: {{tokens_per_s: 20, burst_s: 1}}
    - sha256: {zeta}
      tenant: zeta
      priority_max: batch
"""


@pytest.fixture(scope="module")
def srv():
    tmp = tempfile.TemporaryDirectory(prefix="hs_auth_")
    keys_file = os.path.join(tmp.name, "keys.txt")
    with open(keys_file, "w") as f:
        f.write("# tenant filed, from the keys file\n%s filed models=minilm weight=2\n"
                % sha(KEYS["filed"]))
    cfg = CONFIG.format(model=MODEL, keys_file=keys_file,
                        capture=os.path.join(tmp.name, "capture.jsonl"),
                        **{k: sha(v) for k, v in KEYS.items()})
    s = Server(cfg, model=None)
    s.keys_file = keys_file
    s.capture = os.path.join(tmp.name, "capture.jsonl")
    yield s
    s.stop()
    tmp.cleanup()


def bearer(name):
    return {"Authorization": "Bearer " + KEYS[name]}


def embed(srv, who, body=None, path="/embed", headers=None, **kw):
    h = dict(bearer(who)) if who else {}
    h.update(headers or {})
    return srv.post(path, body or {"inputs": "hello world", "model": "minilm"}, headers=h, **kw)


def test_missing_and_wrong_keys_are_401(srv):
    for path, body in (("/embed", {"inputs": "hi"}), ("/v1/embeddings", {"input": "hi"}),
                       ("/predict", {"inputs": "hi"}), ("/tokenize", {"inputs": "hi"})):
        st, h, doc = srv.post(path, body)
        assert st == 401 and h["www-authenticate"].startswith("Bearer"), (path, st, doc)
        assert "API key" in doc["error"]["message"]
        st, h, doc = srv.post(path, body, headers={"Authorization": "Bearer nope"})
        assert st == 401 and doc["error"]["message"] == "invalid API key"
    assert srv.get("/v1/models")[0] == 401
    # another scheme is no key; the protocol's error shape on /v2
    st, h, body = srv.request("POST", "/v2/models/minilm/infer", b"{}",
                              headers={"Authorization": "Basic " + KEYS["alpha"]})
    assert st == 401 and set(json.loads(body)) == {"error"}
    # probes and metrics are open by default
    for path in ("/health", "/ready", "/v2/health/live", "/v2/health/ready", "/metrics"):
        assert srv.get(path)[0] == 200, path


def test_header_conventions(srv):
    for h in ({"Authorization": "Bearer " + KEYS["alpha"]},
              {"authorization": "bearer  " + KEYS["alpha"]},
              {"api-key": KEYS["alpha"]}, {"X-API-Key": KEYS["alpha"]}):
        st, _, doc = embed(srv, None, headers=h)
        assert st == 200, (h, doc)
    assert srv.get("/v1/models", headers=bearer("alpha"))[0] == 200


def test_models_and_endpoints_are_403(srv):
    st, _, doc = embed(srv, "beta")
    assert st == 200, doc
    st, _, doc = embed(srv, "beta", {"inputs": "hi", "model": "other"})
    assert st == 403 and "model other" in doc["error"]["message"], doc
    st, _, doc = embed(srv, "beta", {"input": "hi", "model": "minilm"}, path="/v1/embeddings")
    assert st == 403 and "/v1/embeddings" in doc["error"]["message"], doc
    req = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                  "data": ["hi"]}]})
    st, _, body = srv.request("POST", "/v2/models/minilm/infer", req, headers=bearer("beta"))
    assert st == 200, body
    st, _, body = srv.request("POST", "/v2/models/other/infer", req, headers=bearer("beta"))
    assert st == 403 and "other" in json.loads(body)["error"], body
    # the other tenants are not limited by beta's lists
    assert embed(srv, "alpha", {"inputs": "hi", "model": "other"})[0] == 200


def test_request_rate_is_429_per_tenant(srv):
    # gamma: 1 request/s, a bucket of 2
    got = [embed(srv, "gamma")[:2] for _ in range(4)]
    codes = [st for st, _ in got]
    assert codes[:2] == [200, 200] and 429 in codes[2:], codes
    h = [h for st, h in got if st == 429][0]
    assert int(h["retry-after"]) >= 1
    # alpha, meanwhile, is not limited
    assert all(embed(srv, "alpha")[0] == 200 for _ in range(4))
    time.sleep(1.2)
    assert embed(srv, "gamma")[0] == 200


def test_token_rate_is_429(srv):
    # delta: 20 tokens/s, a bucket of 20; one request may overdraw it, the next waits
    text = "one two three four five six seven eight nine ten eleven twelve"  # 14 tokens
    body = {"inputs": text, "model": "minilm"}
    assert embed(srv, "delta", body)[0] == 200
    assert embed(srv, "delta", body)[0] == 200  # 20 - 14 > 0: admitted, overdraws to -8
    st, h, doc = embed(srv, "delta", body)
    assert st == 429 and "tokens/s" in doc["error"]["message"], doc
    assert int(h["retry-after"]) >= 1


def test_metrics_and_capture_by_tenant(srv):
    st, _, doc = embed(srv, "zeta", headers={"X-Priority": "interactive"})
    assert st == 200, doc
    embed(srv, "gamma")
    embed(srv, "gamma")
    embed(srv, "gamma")
    _, _, text = srv.get("/metrics")
    text = text.decode()
    assert re.search(r'hetserve_tenant_requests_total\{tenant="gamma",code="429"\} [1-9]', text)
    assert re.search(r'hetserve_tenant_requests_total\{tenant="alpha",code="2xx"\} [1-9]', text)
    assert re.search(r'hetserve_tenant_tokens_total\{tenant="delta"\} [1-9]', text)
    assert re.search(r'hetserve_auth_refused_total\{reason="missing"\} [1-9]', text)
    assert 'hetserve_tenant_weight{tenant="filed"} 2' in text
    # the capture names the tenant; zeta's priority is capped at batch
    line = None
    for _ in range(100):
        with open(srv.capture) as f:
            lines = [json.loads(x) for x in f if '"tenant":"zeta"' in x]
        if lines:
            line = lines[-1]
            break
        time.sleep(0.05)
    assert line and line["priority"] == "batch", line


def test_keys_file_and_sighup_reload(srv):
    assert embed(srv, "filed")[0] == 200
    assert embed(srv, "filed", {"inputs": "hi", "model": "other"})[0] == 403
    assert embed(srv, "epsilon")[0] == 401
    conn = srv.conn()  # one keep-alive connection across the reloads
    assert embed(srv, "alpha", conn=conn)[0] == 200
    with open(srv.keys_file, "w") as f:
        f.write("%s epsilon endpoints=/embed\n" % sha(KEYS["epsilon"]))
    srv.signal(signal.SIGHUP)
    for _ in range(100):
        if embed(srv, "epsilon")[0] == 200:
            break
        time.sleep(0.05)
    assert embed(srv, "epsilon")[0] == 200
    assert embed(srv, "filed")[0] == 401  # gone from the file
    assert embed(srv, "alpha", conn=conn)[0] == 200  # the config's keys stay, the connection too
    # a bad file: the keys stay as they were, and the log says why
    with open(srv.keys_file, "w") as f:
        f.write("not-a-digest epsilon\n")
    srv.signal(signal.SIGHUP)
    for _ in range(100):
        if "keys not reloaded" in srv.stderr():
            break
        time.sleep(0.05)
    assert "keys not reloaded" in srv.stderr()
    assert embed(srv, "epsilon", conn=conn)[0] == 200
    conn.close()


FAIR_CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 2
limits:
  timeout_ms: 300000
scheduler:
  wait_max_ms: 0
auth:
  share_inflight: 4
  keys:
    - sha256: {a}
      tenant: flood
    - sha256: {b}
      tenant: b
    - sha256: {c}
      tenant: c
"""


def test_fair_shares_under_a_flood():
    """Three tenants of equal weight, one flooding with 8 concurrent clients: past 4 requests in
    flight the flood, over its share, runs as batch, past 8 it is refused 429, while the two
    others' requests, one at a time, are all admitted."""
    import threading
    keys = {n: "hs-" + secrets.token_hex(16) for n in ("a", "b", "c")}
    s = Server(FAIR_CONFIG.format(**{n: sha(k) for n, k in keys.items()}))
    try:
        body = {"inputs": "a longer request to keep the engine busy " * 12}
        stop = time.monotonic() + 3.0
        got = {"a": [], "b": [], "c": []}

        def client(name, pause):
            h = {"Authorization": "Bearer " + keys[name]}
            conn = s.conn()
            while time.monotonic() < stop:
                st, _, doc = s.post("/embed", body, headers=h, conn=conn)
                got[name].append((st, doc))
                if st != 200:
                    conn.close()
                    conn = s.conn()
                time.sleep(pause)
            conn.close()

        threads = [threading.Thread(target=client, args=("a", 0)) for _ in range(8)]
        threads += [threading.Thread(target=client, args=(n, 0.05)) for n in ("b", "c")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        flood = [st for st, _ in got["a"]]
        assert 429 in flood and 200 in flood, flood
        shared = [doc for st, doc in got["a"] if st == 429]
        assert all("weighted share" in d["error"]["message"] for d in shared), shared[:3]
        for n in ("b", "c"):
            codes = [st for st, _ in got[n]]
            assert codes and codes.count(200) >= 0.9 * len(codes), (n, codes)
        _, _, text = s.get("/metrics")
        for action in ("demoted", "refused"):
            assert re.search(r'hetserve_tenant_shared_total\{tenant="flood",action="%s"\} [1-9]'
                             % action, text.decode()), action
        assert 'hetserve_tenant_inflight{tenant="b"} 0' in text.decode()
    finally:
        s.stop()
