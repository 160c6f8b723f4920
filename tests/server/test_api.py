# Black-box tests of the HTTP API: schemas, equality with `hetserve embed`, concurrency, and every
# bad-input case. They start the real binary; no test asserts an absolute time.
import base64
import http.client
import json
import math
import struct

from hetserve_fixture import cli_embed, run_threads

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Hello, world!",
         "Embeddings map text to vectors.", "naïve café — résumé"]


def close(a, b, tol=1e-5):
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b)) <= tol


def check_error(status, body, want_status, want_in=None):
    assert status == want_status, body
    assert set(body["error"]) >= {"message", "type"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if want_in:
        assert want_in in body["error"]["message"], body


def test_openai_schema_and_cli_equality(server):
    ref = cli_embed(TEXTS)
    st, h, body = server.post("/v1/embeddings", {"input": TEXTS, "model": "all-MiniLM-L6-v2"})
    assert st == 200, body
    assert body["object"] == "list" and body["model"] == "all-MiniLM-L6-v2"
    assert [d["index"] for d in body["data"]] == list(range(len(TEXTS)))
    for d, r in zip(body["data"], ref):
        assert d["object"] == "embedding" and len(d["embedding"]) == 384
        assert close(d["embedding"], r)
        assert abs(math.sqrt(sum(x * x for x in d["embedding"])) - 1) < 1e-5
    # prompt tokens = the tokenizer's counts, specials included
    st, _, toks = server.post("/tokenize", {"inputs": TEXTS})
    assert body["usage"]["prompt_tokens"] == sum(len(t) for t in toks)
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"]
    # one string
    st, _, one = server.post("/v1/embeddings", {"input": TEXTS[1]})
    assert st == 200 and len(one["data"]) == 1 and close(one["data"][0]["embedding"], ref[1])
    # Server-Timing carries the stages
    for stage in ("parse", "tokenize", "queue", "compute", "total"):
        assert stage + ";dur=" in h["server-timing"], h["server-timing"]


def test_openai_base64_and_token_ids(server):
    st, _, f = server.post("/v1/embeddings", {"input": TEXTS[0]})
    st, _, b = server.post("/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"})
    assert st == 200
    raw = base64.b64decode(b["data"][0]["embedding"])
    vals = struct.unpack("<384f", raw)
    for x, y in zip(vals, f["data"][0]["embedding"]):
        assert abs(x - y) <= 1e-7 * max(abs(x), 1e-30)  # text round-trips the float
    # token ids, with or without the specials, give the same vector as the text
    _, _, toks = server.post("/tokenize", {"inputs": TEXTS[0]})
    ids = [t["id"] for t in toks[0]]
    for inp in (ids, ids[1:-1], [ids[1:-1], ids]):
        st, _, r = server.post("/v1/embeddings", {"input": inp})
        assert st == 200, r
        for d in r["data"]:
            assert close(d["embedding"], f["data"][0]["embedding"])
    st, _, r = server.post("/v1/embeddings", {"input": TEXTS[0], "dimensions": 384})
    assert st == 200


def test_tei_embed_and_tokenize(server):
    ref = cli_embed(TEXTS[:2])
    st, _, v = server.post("/embed", {"inputs": TEXTS[0]})
    assert st == 200 and len(v) == 1 and close(v[0], ref[0])
    st, _, v = server.post("/embed", {"inputs": TEXTS[:2], "normalize": True, "truncate": False})
    assert st == 200 and len(v) == 2 and close(v[1], ref[1])
    st, _, t = server.post("/tokenize", {"inputs": "Hello, world!"})
    assert st == 200
    # TEI: a token's text is its bytes [start, stop) of the input; specials have no offsets
    assert [x["text"] for x in t[0]] == ["[CLS]", "Hello", ",", "world", "!", "[SEP]"]
    assert [(x["start"], x["stop"]) for x in t[0]] == [(None, None), (0, 5), (5, 6), (7, 12),
                                                       (12, 13), (None, None)]
    assert t[0][0]["special"] and not t[0][1]["special"]
    st, _, t = server.post("/tokenize", {"inputs": ["a b"], "add_special_tokens": False})
    assert [x["text"] for x in t[0]] == ["a", "b"]
    # every token, also past the model's 512 positions (/embed would refuse or truncate)
    st, _, t = server.post("/tokenize", {"inputs": "a " * 600})
    assert st == 200 and len(t[0]) == 602
    # a pair: [CLS] a [SEP] b [SEP], offsets into each text
    st, _, t = server.post("/tokenize", {"inputs": [["Héllo there", "wörld"]]})
    assert st == 200, t
    assert [x["text"] for x in t[0]] == ["[CLS]", "Héllo", "there", "[SEP]", "wörld", "[SEP]"]
    assert [(x["start"], x["stop"]) for x in t[0]][1:3] == [(0, 6), (7, 12)]
    assert t[0][4]["start"] == 0 and t[0][4]["stop"] == 6
    st, _, t = server.post("/tokenize", {"inputs": [[1, 2]]})
    assert st == 400
    st, _, t = server.post("/tokenize", {"inputs": [["one"]]})
    assert st == 400


def test_tei_decode(server):
    st, _, t = server.post("/tokenize", {"inputs": "Hello, wonderful world!"})
    ids = [x["id"] for x in t[0]]
    st, _, d = server.post("/decode", {"ids": ids})
    assert st == 200 and d == ["hello, wonderful world!"]
    st, _, d = server.post("/decode", {"ids": [ids, ids[1:2]], "skip_special_tokens": False})
    assert st == 200 and d == ["[CLS] hello, wonderful world! [SEP]", "hello"]
    assert server.post("/decode", {"ids": [10 ** 9]})[0] == 400
    assert server.post("/decode", {"ids": "x"})[0] == 400
    assert server.post("/decode", {"ids": [1], "skip_special_tokens": 3})[0] == 400


def test_models_health_ready_metrics(server):
    st, _, d = server.request("GET", "/v1/models")
    m = json.loads(d)
    assert st == 200 and m["object"] == "list"
    assert m["data"][0]["id"] == "all-MiniLM-L6-v2" and m["data"][0]["object"] == "model"
    assert server.get("/health")[0] == 200
    assert server.get("/ready")[0] == 200
    server.post("/embed", {"inputs": "metrics please"})
    st, h, d = server.get("/metrics")
    text = d.decode()
    assert st == 200 and h["content-type"].startswith("text/plain")
    lab = 'engine="cpu0",model="all-MiniLM-L6-v2"'
    for name in ("hetserve_queue_length{" + lab, "hetserve_requests_total{" + lab + ',outcome="ok"',
                 "hetserve_request_duration_seconds_bucket{" + lab,
                 "hetserve_stage_duration_seconds_count{" + lab + ',stage="compute"',
                 "hetserve_batch_size_bucket{" + lab, "hetserve_batch_tokens_bucket{" + lab,
                 "hetserve_batch_padding_waste_ratio{" + lab, "hetserve_engine_busy_ratio{" + lab,
                 "hetserve_engine_busy_seconds_total{" + lab,
                 "hetserve_engine_tokens_per_second{" + lab, "hetserve_tokens_total{" + lab):
        assert name in text, name
    ok = [l for l in text.splitlines()
          if l.startswith("hetserve_requests_total{" + lab + ',outcome="ok"')]
    assert int(ok[0].split()[-1]) >= 1


def test_keep_alive(server):
    c = server.conn()
    for t in TEXTS[:3]:
        st, _, d = server.request("POST", "/embed", {"inputs": t}, conn=c)
        assert st == 200 and len(json.loads(d)) == 1
    c.close()


def test_concurrent_clients_unmixed(server):
    n = 100
    texts = ["client %d asks about topic number %d and nothing else" % (i, i * 7) for i in range(n)]
    ref = cli_embed(texts)

    def one(i):
        # half single-text, half two-text requests (the second text is a fixed probe)
        inp = texts[i] if i % 2 == 0 else [texts[i], TEXTS[0]]
        st, _, body = server.post("/v1/embeddings", {"input": inp})
        assert st == 200, body
        return body

    results = run_threads(n, one)
    probe = results[1]["data"][1]["embedding"]
    for i, body in enumerate(results):
        assert close(body["data"][0]["embedding"], ref[i]), i
        if i % 2:
            assert close(body["data"][1]["embedding"], probe)


def test_bad_inputs(server):
    P = "/v1/embeddings"
    # malformed JSON, wrong types, empty input
    s, _, d = server.request("POST", P, b'{"input": ')
    check_error(s, json.loads(d), 400, "malformed JSON")
    s, _, d = server.request("POST", P, b'[1, 2]')
    check_error(s, json.loads(d), 400)
    for body, frag in (({"input": 5}, "input"), ({"input": [1.5]}, "input[0]"),
                       ({"input": ["a", 3]}, "input[1]"), ({"input": "x", "model": 7}, "model"),
                       ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
                       ({"input": "x", "dimensions": 385}, "dimensions"), ({"input": ""}, "empty"),
                       ({"input": []}, "empty"), ({}, "input"), ({"input": [[]]}, "empty"),
                       ({"input": [[101, 999999, 102]]}, "token id"),
                       ({"input": "x", "timeout_ms": -5}, "timeout_ms"),
                       ({"input": "x", "priority": "urgent"}, "priority")):
        s, _, b = server.post(P, body)
        check_error(s, b, 400, frag)
    s, _, b = server.post("/embed", {"inputs": "x", "normalize": False})
    check_error(s, b, 400, "normalize")
    # invalid UTF-8
    s, _, d = server.request("POST", P, b'{"input": "abc\xff\xfe"}')
    check_error(s, json.loads(d), 400)
    # unknown model
    s, _, b = server.post(P, {"input": "x", "model": "no-such-model"})
    check_error(s, b, 404, "no-such-model")
    # wrong method, unknown path
    s, h, d = server.request("GET", P)
    check_error(s, json.loads(d), 405)
    assert h["allow"] == "POST"
    s, _, d = server.request("POST", "/health", b"{}")
    check_error(s, json.loads(d), 405)
    s, _, d = server.request("GET", "/nope")
    check_error(s, json.loads(d), 404)
    # limits: body size, items, characters
    s, _, d = server.request("POST", P, json.dumps({"input": "word " * 20000}))
    check_error(s, json.loads(d), 413)
    s, _, b = server.post(P, {"input": ["x"] * 65})
    check_error(s, b, 413, "65 inputs")
    s, _, b = server.post(P, {"input": "é" * 2001})
    check_error(s, b, 413, "characters")
    # over the model's max length: 413 unless truncate
    long_text = "hello " * 300
    s, _, b = server.post(P, {"input": long_text})
    check_error(s, b, 413, "truncate")
    s, _, b = server.post("/embed", {"inputs": long_text})
    check_error(s, b, 413, "truncate")
    s, _, b = server.post("/embed", {"inputs": long_text, "truncate": True})
    assert s == 200 and len(b[0]) == 384
    s, _, b = server.post(P, {"input": long_text, "truncate": True})
    assert s == 200 and b["usage"]["prompt_tokens"] == 256
    # the server is still up and correct
    assert server.get("/health")[0] == 200
    s, _, b = server.post(P, {"input": TEXTS[0]})
    assert s == 200


def test_chunked_body_over_limit(server):
    c = server.conn()
    c.putrequest("POST", "/embed")
    c.putheader("Content-Type", "application/json")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    chunk = b'{"inputs": "' + b"a" * 70000 + b'"}'
    c.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk))
    r = c.getresponse()
    body = json.loads(r.read())
    check_error(r.status, body, 413)
    c.close()
