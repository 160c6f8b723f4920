# hetbench replay against the real server: capture a run on one server, replay the capture on a
# second one (capturing too), and compare — same number of requests, same endpoints, priorities
# and deadlines, the same token lengths (generated texts match them with the tokenizer), and the
# captured texts themselves when the capture has them.
import collections
import json
import os
import subprocess

import pytest

from hetserve_fixture import BINARY, MODEL, Server

HETBENCH = os.path.join(os.path.dirname(BINARY), "hetbench")

CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1
server:
  capture:
    file: "%s"
%sscheduler:
  wait_max_ms: 0
"""

WORDS = "the quick brown fox jumps over a lazy dog while seven tired engineers watch".split()


def lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def send_mix(s):
    for i in range(24):
        n_words = 1 + (i * 7) % 40
        text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n_words))
        if i % 3 == 0:
            st = s.post("/embed", {"inputs": [text, "short one"], "timeout_ms": 5000 + i})[0]
        else:
            st = s.post("/v1/embeddings", {"input": text},
                        headers={"X-Priority": "batch" if i % 4 == 1 else "interactive"})[0]
        assert st == 200


def summary(xs):
    return (len(xs), collections.Counter(x["endpoint"] for x in xs),
            collections.Counter(x["priority"] for x in xs),
            sorted(x["timeout_ms"] for x in xs), sorted(t for x in xs for t in x["tokens"]))


def replay(capture, port, *args):
    out = subprocess.run([HETBENCH, "replay", capture, "--url", "http://127.0.0.1:%d" % port,
                          "--speed", "4", "--json", "--vocab", os.path.join(MODEL, "vocab.txt")]
                         + list(args), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("texts", [False, True])
def test_replay_reproduces_the_capture(tmp_path, texts):
    if not os.path.exists(HETBENCH):
        pytest.skip("no %s (hetbench is built only with libcurl)" % HETBENCH)
    first, second = str(tmp_path / "first.jsonl"), str(tmp_path / "second.jsonl")
    extra = "    texts: true\n" if texts else ""
    a = Server(CONFIG % (first, extra))
    try:
        send_mix(a)
    finally:
        a.stop()
    b = Server(CONFIG % (second, extra))
    try:
        rep = replay(first, b.port)
    finally:
        b.stop()
    # every request is sent and captured again, whatever its answer (a loaded machine may
    # answer some with 429 or 504: replay fidelity, not capacity, is under test)
    assert rep["mode"] == "replay" and rep["all"]["requests"] == 24 and rep["all"]["ok"] >= 1
    r = rep["replay"]
    if texts:
        assert r["texts_captured"] == 32 and r["generated_exact"] == 0
    else:
        assert r["generated_exact"] == 32 and r["generated_worse"] == 0
    x, y = lines(first), lines(second)
    assert summary(x) == summary(y)
    if texts:
        assert sorted(t for l in x for t in l["texts"]) == sorted(t for l in y for t in l["texts"])
    # open loop at 4x: the replay's arrivals keep the capture's order and spacing, compressed
    span_x = max(l["offset_ms"] for l in x) - min(l["offset_ms"] for l in x)
    span_y = max(l["offset_ms"] for l in y) - min(l["offset_ms"] for l in y)
    assert span_y < span_x / 4 + 1000


def test_replay_refuses_a_bad_line(tmp_path):
    if not os.path.exists(HETBENCH):
        pytest.skip("no %s (hetbench is built only with libcurl)" % HETBENCH)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"v":1,"offset_ms":0,"endpoint":"/embed","tokens":[4]}\n{"v":1,"tokens":3}\n')
    out = subprocess.run([HETBENCH, "replay", str(bad), "--url", "http://127.0.0.1:9",
                          "--vocab", os.path.join(MODEL, "vocab.txt")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "bad.jsonl:2:" in out.stderr, out.stderr
