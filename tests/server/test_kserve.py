"""The KServe v2 / Open Inference Protocol (server/kserve.h), black-box.

The protocol is spoken here with http.client and json only (CI has no other package),
the binary-tensor extension included: requests whose tensors follow the JSON header, responses
whose outputs do. The embeddings must equal POST /embed's for the same texts, and the
"probabilities" output /predict's scores, for the model that has a classification head. When
the `tritonclient` package is importable (scripts/setup installs it), test_tritonclient runs the
real InferenceServerClient against the server too; otherwise it is skipped with one line.
"""
import json
import os
import struct

import pytest

from hetserve_fixture import MODEL, ROOT, Server

HEAD = os.path.join(ROOT, "heads", "all-MiniLM-L6-v2-sentiment.json")
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Hello, world!",
         "naïve café — résumé", "An absolute joy from start to finish."]

# two names for one model folder: "minilm" has the classification head (cascade.small), "plain"
# has none
CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 2
models:
  - name: minilm
    path: {model}
  - name: plain
    path: {model}
limits:
  timeout_ms: 300000
  body_bytes_max: 65536
  items_max: 8
scheduler:
  wait_max_ms: 0
cascade:
  small: minilm
  small_head: {head}
"""


@pytest.fixture(scope="module")
def srv():
    s = Server(CONFIG.format(model=MODEL, head=HEAD), model=None)
    yield s
    s.stop()


def infer(srv, model, req, binary=b"", headers=None):
    """POSTs an infer request (JSON header + binary tensors); returns (status, headers, the
    response's JSON, {output name: its binary bytes})."""
    head = json.dumps(req).encode()
    h = {"Content-Type": "application/octet-stream" if binary else "application/json"}
    if binary:
        h["Inference-Header-Content-Length"] = str(len(head))
    h.update(headers or {})
    st, hdrs, body = srv.request("POST", "/v2/models/%s/infer" % model, head + binary, headers=h)
    n = int(hdrs.get("inference-header-content-length", len(body)))
    doc = json.loads(body[:n])
    outs, off = {}, n
    for o in doc.get("outputs", []):
        size = o.get("parameters", {}).get("binary_data_size")
        if size is not None:
            outs[o["name"]] = body[off:off + size]
            off += size
    assert off == len(body), "bytes after the outputs"
    return st, hdrs, doc, outs


def text_input(texts, shape=None):
    return {"name": "text", "datatype": "BYTES", "shape": shape or [len(texts)], "data": texts}


def bytes_tensor(texts):
    """BYTES elements in the binary extension: a 4-byte little-endian length, then the bytes."""
    out = b""
    for t in texts:
        b = t.encode()
        out += struct.pack("<I", len(b)) + b
    return out


def embed(srv, texts):
    st, _, body = srv.post("/embed", {"inputs": texts, "model": "minilm"})
    assert st == 200, body
    return body


def rows(data, dim):
    return [data[i:i + dim] for i in range(0, len(data), dim)]


def close(a, b, tol=1e-6):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol


def check_error(st, hdrs, body, want):
    """The protocol's error shape: {"error": "<message>"} and nothing else."""
    assert st == want, (st, body)
    doc = json.loads(body) if isinstance(body, bytes) else body
    assert set(doc) == {"error"} and isinstance(doc["error"], str) and doc["error"], doc
    assert hdrs["content-type"].startswith("application/json")
    return doc["error"]


def test_server_and_model_metadata(srv):
    st, _, body = srv.get("/v2")
    doc = json.loads(body)
    assert st == 200 and doc["name"] == "hetserve" and "binary_tensor_data" in doc["extensions"]
    assert srv.get("/v2/health/live")[0] == 200
    assert srv.get("/v2/health/ready")[0] == 200
    st, _, body = srv.get("/v2/models/minilm")
    doc = json.loads(body)
    assert st == 200 and doc["name"] == "minilm" and doc["versions"] == ["1"]
    assert {i["name"]: i["datatype"] for i in doc["inputs"]} == {
        "text": "BYTES", "input_ids": "INT64", "attention_mask": "INT64"}
    outs = {o["name"]: o for o in doc["outputs"]}
    assert outs["embedding"]["datatype"] == "FP32" and outs["embedding"]["shape"] == [-1, 384]
    labels = outs["probabilities"]["parameters"]["labels"]
    assert outs["probabilities"]["shape"] == [-1, len(labels)] and len(labels) >= 2
    st, _, body = srv.get("/v2/models/plain/versions/1")
    assert st == 200 and [o["name"] for o in json.loads(body)["outputs"]] == ["embedding"]
    for path in ("/v2/models/minilm/ready", "/v2/models/plain/versions/1/ready"):
        st, _, body = srv.get(path)
        assert st == 200 and json.loads(body)["ready"] is True, path
    # a path-like name finds the model by its last component, as /v1/embeddings does
    assert srv.get("/v2/models/org/minilm/ready")[0] == 200
    for path in ("/v2/models/nope", "/v2/models/nope/ready", "/v2/models/minilm/versions/2"):
        st, h, body = srv.get(path)
        check_error(st, h, body, 404)


def test_infer_json_equals_embed(srv):
    ref = embed(srv, TEXTS)
    req = {"id": "req-7", "inputs": [text_input(TEXTS)], "outputs": [{"name": "embedding"}]}
    st, h, doc, _ = infer(srv, "minilm", req)
    assert st == 200, doc
    assert h["content-type"] == "application/json" and "inference-header-content-length" not in h
    assert doc["model_name"] == "minilm" and doc["model_version"] == "1" and doc["id"] == "req-7"
    (out,) = doc["outputs"]
    assert out["name"] == "embedding" and out["datatype"] == "FP32"
    assert out["shape"] == [len(TEXTS), 384]
    for got, want in zip(rows(out["data"], 384), ref):
        assert close(got, want)
    # shape [n, 1], nested data, and the versioned path give the same
    req = {"inputs": [text_input([[t] for t in TEXTS], [len(TEXTS), 1])],
           "outputs": [{"name": "embedding"}]}
    st, _, doc2, _ = infer(srv, "minilm/versions/1", req)
    assert st == 200 and doc2["outputs"][0]["data"] == out["data"]
    # the head's model also gives its probabilities when no output is named
    st, _, doc3, _ = infer(srv, "minilm", {"inputs": [text_input(TEXTS[:1])]})
    assert st == 200 and [o["name"] for o in doc3["outputs"]] == ["embedding", "probabilities"]
    assert "Server-Timing" in h or "server-timing" in h


def test_binary_extension(srv):
    ref = embed(srv, TEXTS)
    req = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(TEXTS)],
                       "parameters": {"binary_data_size": len(bytes_tensor(TEXTS))}}],
           "outputs": [{"name": "embedding", "parameters": {"binary_data": True}},
                       {"name": "probabilities", "parameters": {"binary_data": False}}]}
    st, h, doc, outs = infer(srv, "minilm", req, bytes_tensor(TEXTS))
    assert st == 200, doc
    assert h["content-type"] == "application/octet-stream"
    emb, probs = doc["outputs"]
    assert emb["parameters"]["binary_data_size"] == len(TEXTS) * 384 * 4 and "data" not in emb
    assert "data" in probs and probs["shape"][0] == len(TEXTS)
    vals = struct.unpack("<%df" % (len(TEXTS) * 384), outs["embedding"])
    for got, want in zip(rows(vals, 384), ref):
        assert close(got, want)
    # binary_data_output for every output; the JSON and binary values are the same floats
    req["outputs"] = None
    req["parameters"] = {"binary_data_output": True}
    st, _, doc, outs2 = infer(srv, "minilm", req, bytes_tensor(TEXTS))
    assert st == 200 and set(outs2) == {"embedding", "probabilities"}
    assert outs2["embedding"] == outs["embedding"]
    k = probs["shape"][1]
    pb = struct.unpack("<%df" % (len(TEXTS) * k), outs2["probabilities"])
    assert all(abs(a - b) <= 1e-7 * max(abs(a), 1e-30) for a, b in zip(pb, probs["data"]))


def test_probabilities_match_predict(srv):
    st, _, meta = srv.get("/v2/models/minilm")
    labels = [o for o in json.loads(meta)["outputs"] if o["name"] == "probabilities"][0][
        "parameters"]["labels"]
    st, _, pred = srv.post("/predict", {"inputs": TEXTS})
    assert st == 200, pred
    st, _, doc, _ = infer(srv, "minilm", {"inputs": [text_input(TEXTS)],
                                          "outputs": [{"name": "probabilities"}]})
    assert st == 200, doc
    (out,) = doc["outputs"]
    for got, want in zip(rows(out["data"], len(labels)), pred):
        scores = {w["label"]: w["score"] for w in want}
        assert close(got, [scores[l] for l in labels], 1e-6)
        assert abs(sum(got) - 1) < 1e-5
    # a model without a head has no such output
    st, h, doc, _ = infer(srv, "plain", {"inputs": [text_input(TEXTS[:1])],
                                         "outputs": [{"name": "probabilities"}]})
    assert "probabilities" in check_error(st, h, doc, 400)


def test_token_ids(srv):
    st, _, toks = srv.post("/tokenize", {"inputs": TEXTS[:2], "model": "minilm"})
    ids = [[t["id"] for t in seq] for seq in toks]
    ref = embed(srv, TEXTS[:2])
    width = max(len(s) for s in ids)
    padded = [s + [0] * (width - len(s)) for s in ids]
    mask = [[1] * len(s) + [0] * (width - len(s)) for s in ids]
    # INT64 in JSON, with the specials and a mask over the padding
    req = {"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [2, width],
                       "data": padded},
                      {"name": "attention_mask", "datatype": "INT64", "shape": [2, width],
                       "data": mask}],
           "outputs": [{"name": "embedding"}]}
    st, _, doc, _ = infer(srv, "minilm", req)
    assert st == 200, doc
    for got, want in zip(rows(doc["outputs"][0]["data"], 384), ref):
        assert close(got, want)
    # INT32 in binary, one row without the specials (they are added)
    inner = ids[1][1:-1]
    blob = struct.pack("<%di" % len(inner), *inner)
    req = {"inputs": [{"name": "input_ids", "datatype": "INT32", "shape": [len(inner)],
                       "parameters": {"binary_data_size": len(blob)}}],
           "outputs": [{"name": "embedding"}]}
    st, _, doc, _ = infer(srv, "minilm", req, blob)
    assert st == 200, doc
    assert close(doc["outputs"][0]["data"], ref[1])


def test_errors(srv):
    one = [text_input(["a"])]
    cases = [
        (b"{not json", {}, 400),
        (b"[]", {}, 400),
        ({"inputs": []}, {}, 400),
        ({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": ["a"]}]}, {},
         400),
        ({"inputs": [{"name": "text", "datatype": "FP32", "shape": [1], "data": [1.0]}]}, {},
         400),
        ({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}, {},
         400),
        ({"inputs": one + [{"name": "input_ids", "datatype": "INT64", "shape": [1],
                            "data": [5]}]}, {}, 400),
        ({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1],
                      "data": [10 ** 9]}]}, {}, 400),
        ({"inputs": one, "outputs": [{"name": "logits"}]}, {}, 400),
        ({"inputs": one, "outputs": [{"name": "embedding"}, {"name": "embedding"}]}, {}, 400),
        ({"inputs": one, "parameters": {"truncate": "yes"}}, {}, 400),
        ({"inputs": one, "parameters": {"priority": "urgent"}}, {}, 400),
        ({"inputs": one, "parameters": {"timeout": -5}}, {}, 400),
        ({"inputs": [text_input(["x"] * 9)]}, {}, 413),
        ({"inputs": [text_input(["word " * 400])]}, {}, 413),
        ({"inputs": one}, {"Inference-Header-Content-Length": "99999"}, 400),
        ({"inputs": one}, {"Inference-Header-Content-Length": "12x"}, 400),
    ]
    for body, hdrs, want in cases:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(hdrs)
        st, rh, resp = srv.request("POST", "/v2/models/minilm/infer", data, headers=h)
        check_error(st, rh, resp, want)
    # binary sizes that do not add up: past the body, bytes left over, an element cut short
    req = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                       "parameters": {"binary_data_size": 100}}]}
    st, h, doc, _ = infer(srv, "minilm", req, bytes_tensor(["hi"]))
    check_error(st, h, doc, 400)
    req["inputs"][0]["parameters"]["binary_data_size"] = 4
    st, h, doc, _ = infer(srv, "minilm", req, bytes_tensor(["hi"]))
    check_error(st, h, doc, 400)
    req["inputs"][0]["shape"] = [2]
    req["inputs"][0]["parameters"]["binary_data_size"] = 6
    st, h, doc, _ = infer(srv, "minilm", req, bytes_tensor(["hi"]))
    check_error(st, h, doc, 400)
    # unknown model, wrong method, a body over the limit: the same shape
    st, h, doc, _ = infer(srv, "nope", {"inputs": one})
    check_error(st, h, doc, 404)
    st, h, body = srv.get("/v2/models/minilm/infer")
    check_error(st, h, body, 405)
    st, h, body = srv.request("PUT", "/v2/models/minilm", b"{}")
    check_error(st, h, body, 405)
    st, h, body = srv.request("POST", "/v2/models/minilm/infer", b"x" * 70000)
    check_error(st, h, body, 413)
    # and the server still answers
    st, _, doc, _ = infer(srv, "minilm", {"inputs": one, "outputs": [{"name": "embedding"}]})
    assert st == 200


def test_tritonclient(srv):
    """The real client: tritonclient.http.InferenceServerClient, JSON and binary tensors."""
    try:
        import numpy as np
        import tritonclient.http as httpclient
    except ImportError:
        pytest.skip("tritonclient[http] is not installed (scripts/setup installs it)")
    c = httpclient.InferenceServerClient(url="127.0.0.1:%d" % srv.port)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("minilm")
    assert c.get_server_metadata()["name"] == "hetserve"
    meta = c.get_model_metadata("minilm")
    assert [o["name"] for o in meta["outputs"]] == ["embedding", "probabilities"]
    ref = np.array(embed(srv, TEXTS), dtype=np.float32)
    for binary in (True, False):
        inp = httpclient.InferInput("text", [len(TEXTS)], "BYTES")
        inp.set_data_from_numpy(np.array(TEXTS, dtype=object), binary_data=binary)
        out = httpclient.InferRequestedOutput("embedding", binary_data=binary)
        r = c.infer("minilm", [inp], outputs=[out], request_id="tc-1")
        e = r.as_numpy("embedding")
        assert e.shape == (len(TEXTS), 384) and e.dtype == np.float32
        assert np.abs(e - ref).max() <= 1e-6
        assert r.get_response()["id"] == "tc-1"
    # no outputs named: every output, in binary; token ids with a mask
    r = c.infer("minilm", [inp])
    assert r.as_numpy("probabilities").shape[0] == len(TEXTS)
    ids = httpclient.InferInput("input_ids", [1, 6], "INT64")
    _, _, toks = srv.post("/tokenize", {"inputs": TEXTS[1], "model": "minilm"})
    tid = [t["id"] for t in toks[0]]
    ids.set_data_from_numpy(np.array([tid + [0] * (6 - len(tid))], dtype=np.int64))
    mask = httpclient.InferInput("attention_mask", [1, 6], "INT64")
    mask.set_data_from_numpy(np.array([[1] * len(tid) + [0] * (6 - len(tid))], dtype=np.int64))
    e = c.infer("minilm", [ids, mask]).as_numpy("embedding")
    assert np.abs(e[0] - ref[1]).max() <= 1e-6
    with pytest.raises(Exception, match="not found"):
        c.infer("nope", [inp])
    c.close()
