# hetbench ab against real servers: a capture from one server is sent to two (or to two routes of
# one, told apart by a header), and the report compares them — identical f32 servers agree to
# float noise, an int8 lane differs a little, a server that refuses some requests shows its
# errors on its side only. No timing assertions: latency is reported, never judged here.
import json
import os
import subprocess
import time

import pytest

from hetserve_fixture import BINARY, MODEL, Server

HETBENCH = os.path.join(os.path.dirname(BINARY), "hetbench")
INT8 = MODEL.rstrip("/") + "-int8"
CPU_HAS_INT8 = "avx512_vnni" in open("/proc/cpuinfo").read()

F32 = """
engines:
  - {name: cpu0, kind: cpu, threads: 1}
server:
  capture: {file: "%s"}
limits: {items_max: %d}
scheduler: {wait_max_ms: 0}
"""

# one model on an f32 lane (the default route) and an int8 lane (X-Lane: int8); f32 lanes ignore
# the quantization plan, so the quantized folder serves both
TWO_LANES = """
engines:
  - {name: cpu_f32, kind: cpu, dtype: f32, threads: 1}
  - {name: cpu_int8, kind: cpu, dtype: int8, threads: 1}
models:
  - {path: "%s", name: all-MiniLM-L6-v2, engines: [cpu_f32, cpu_int8]}
routes:
  - {name: f32, engines: [cpu_f32]}
  - {name: int8, engines: [cpu_int8]}
router:
  rules:
    - {route: int8, header: X-Lane, value: int8}
  default_route: f32
scheduler: {wait_max_ms: 0}
"""

WORDS = "the quick brown fox jumps over a lazy dog while seven tired engineers watch".split()
N = 16


def text(i):
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(1 + (i * 7) % 40))


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A capture (with texts) of N requests, half of them with two inputs, and the still running
    f32 server that answered them."""
    if not os.path.exists(HETBENCH):
        pytest.skip("no %s (hetbench is built only with libcurl)" % HETBENCH)
    path = str(tmp_path_factory.mktemp("ab") / "capture.jsonl")
    s = Server(F32.replace('"%s"}', '"%s", texts: true}') % (path, 512))
    try:
        for i in range(N):
            if i % 2:
                st = s.post("/embed", {"inputs": [text(i), text(i + 3)]})[0]
            else:
                st = s.post("/v1/embeddings", {"input": text(i), "model": "all-MiniLM-L6-v2"})[0]
            assert st == 200
        deadline = time.time() + 20  # the capture's writer thread appends shortly after
        while time.time() < deadline:
            if os.path.exists(path) and sum(1 for x in open(path) if x.strip()) == N:
                break
            time.sleep(0.05)
        # s keeps capturing what the tests send it: they replay a frozen copy
        trace = path + ".trace"
        with open(path) as f, open(trace, "w") as g:
            g.write(f.read())
        yield trace, s
    finally:
        s.stop()


def ab(trace, a, b, *args):
    src = ["--trace", trace, "--speed", "8"] if trace else []
    out = subprocess.run([HETBENCH, "ab", "--a", "http://127.0.0.1:%d" % a,
                          "--b", "http://127.0.0.1:%d" % b, "--resamples", "200", "--json"]
                         + src + list(args), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def test_identical_servers_agree(capture):
    path, s1 = capture
    s2 = Server(F32 % ("", 512))
    try:
        r = ab(path, s1.port, s2.port)
        # no trace file: the generated workload, drawn once and sent to both
        g = ab(None, s1.port, s2.port, "--rate", "40", "--requests", "8", "--batch-items", "2",
               "--endpoint", "tei", "--lengths", "short=50:4-8,long=50:30-40")
    finally:
        s2.stop()
    assert g["trace"] == "generated" and set(g["classes"]) == {"short", "long"}
    assert g["all"]["requests"] == 8 and g["all"]["both_ok"] == 8
    assert g["all"]["quality"]["cosine_min"] >= 0.99999
    a = r["all"]
    assert r["mode"] == "ab" and a["requests"] == N and a["both_ok"] == N
    assert a["a"]["errors"] == {} and a["b"]["errors"] == {}
    q = a["quality"]
    assert q["n_cosine"] == N and q["cosine_min"] >= 0.99999 and q["below_0999"] == 0
    assert set(r["classes"]) == {"v1_embeddings", "embed"}
    assert sum(c["requests"] for c in r["classes"].values()) == N
    for side in ("a", "b"):
        p50 = a[side]["p50_ms"]
        assert a[side]["ok"] == N and 0 < p50["lo"] <= p50["est"] <= p50["hi"]
    ratio = a["ratio_p50"]
    assert ratio["lo"] <= ratio["est"] <= ratio["hi"] and ratio["est"] > 0


@pytest.mark.skipif(not CPU_HAS_INT8, reason="this CPU has no AVX-512 VNNI int8 path")
def test_int8_route_differs_a_little(capture):
    if not os.path.exists(os.path.join(INT8, "quant.json")):
        pytest.skip("no quantized model at %s (make quantized)" % INT8)
    path, _ = capture
    s = Server(TWO_LANES % INT8, model=None)
    try:
        r = ab(path, s.port, s.port, "--b-header", "X-Lane: int8")
        text_out = subprocess.run([HETBENCH, "ab", "--trace", path, "--a",
                                   "http://127.0.0.1:%d" % s.port, "--b-header", "X-Lane: int8",
                                   "--speed", "8", "--resamples", "50"],
                                  capture_output=True, text=True, timeout=120)
    finally:
        s.stop()
    a = r["all"]
    assert a["both_ok"] == N
    q = a["quality"]
    assert q["n_cosine"] == N and 0.99 <= q["cosine_min"] < 1 and q["cosine_mean"] < 1
    assert q["cosine_min"] <= q["cosine_p1"] <= q["cosine_mean"]
    for side in ("a", "b"):
        assert a[side]["p50_ms"]["est"] > 0 and a[side]["p99_ms"]["est"] > 0
    # the table names both sides, their latencies and the header that tells them apart
    assert text_out.returncode == 0, text_out.stderr
    assert "[X-Lane: int8]" in text_out.stdout and "cosine A vs B" in text_out.stdout
    assert "  A  2xx" in text_out.stdout and "  B  2xx" in text_out.stdout


def test_errors_on_one_side(capture):
    path, s1 = capture
    s2 = Server(F32 % ("", 1))  # one input per request: the two-input /embed requests get 413
    try:
        r = ab(path, s1.port, s2.port)
    finally:
        s2.stop()
    a, embed = r["all"], r["classes"]["embed"]
    assert a["a"]["errors"] == {} and a["a"]["ok"] == N
    assert a["b"]["errors"] == {"413": N // 2} and a["b"]["ok"] == N // 2
    assert embed["b"]["errors"] == {"413": N // 2} and embed["both_ok"] == 0
    assert embed["quality"]["n_cosine"] == 0 and embed["quality"]["cosine_min"] is None
    assert r["classes"]["v1_embeddings"]["quality"]["cosine_min"] >= 0.99999


def test_refuses_bad_usage(tmp_path):
    if not os.path.exists(HETBENCH):
        pytest.skip("no %s (hetbench is built only with libcurl)" % HETBENCH)
    out = subprocess.run([HETBENCH, "ab", "--a", "http://127.0.0.1:9"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2 and "--trace" in out.stderr
    out = subprocess.run([HETBENCH, "ab", "--trace", "x", "--a-header", "no colon"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Name: value" in out.stderr


# POST /predict through a cascade: A never escalates (threshold 1e-6: the small head answers every
# input); B escalates every input (threshold 1) to a big stage whose head has its two rows
# swapped, so B's label is the other one wherever A's is confident of its own
PREDICT = """
engines:
  - {name: cpu0, kind: cpu, threads: 1}
models:
  - {name: minilm, path: "%s"}
  - {name: minilm-big, path: "%s"}
server:
  capture: {file: "%s", texts: true}
cascade:
  small: minilm
  small_head: "%s"
  big: minilm-big
  big_head: "%s"
  threshold: %s
scheduler: {wait_max_ms: 0}
"""
REVIEWS = ["A wonderful, moving film with brilliant performances.",
           "Dull, lifeless and painfully bad, a complete waste of time.",
           "One of the best films of the year, funny and warm.",
           "The worst movie I have seen in years: boring and incoherent."]


def test_predict_labels_compared(tmp_path):
    if not os.path.exists(HETBENCH):
        pytest.skip("no %s (hetbench is built only with libcurl)" % HETBENCH)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    small = os.path.join(root, "heads", "all-MiniLM-L6-v2-sentiment.json")
    head = json.load(open(small))
    head["weight"] = head["weight"][::-1]
    head["bias"] = head["bias"][::-1]
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps(head))
    cap = str(tmp_path / "predict.jsonl")
    a = Server(PREDICT % (MODEL, MODEL, cap, small, small, "0.000001"), model=None)
    a2 = b = None
    try:
        for i in range(8):
            st = a.post("/predict", {"inputs": [REVIEWS[i % 4], REVIEWS[(i + 1) % 4]]})[0]
            assert st == 200
        deadline = time.time() + 20
        while time.time() < deadline and (not os.path.exists(cap) or
                                          sum(1 for x in open(cap) if x.strip()) < 8):
            time.sleep(0.05)
        trace = cap + ".trace"
        with open(cap) as f, open(trace, "w") as g:
            g.write(f.read())
        a2 = Server(PREDICT % (MODEL, MODEL, str(tmp_path / "a2.jsonl"), small, small, "0.000001"),
                    model=None)
        b = Server(PREDICT % (MODEL, MODEL, str(tmp_path / "b.jsonl"), small, str(swapped), "1"),
                   model=None)
        same = ab(trace, a.port, a2.port)["classes"]["predict"]
        flipped = ab(trace, a.port, b.port)["classes"]["predict"]
    finally:
        for s in (a, a2, b):
            if s:
                s.stop()
    assert same["requests"] == 8 and same["both_ok"] == 8
    # agreement is per request: every one of its inputs' top labels
    assert same["quality"]["n_labels"] == 8 and same["quality"]["labels_agree"] == 8
    assert flipped["both_ok"] == 8 and flipped["quality"]["n_labels"] == 8
    assert flipped["quality"]["labels_agree"] == 0
