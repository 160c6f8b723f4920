# Black-box tests of server.capture (docs/CAPTURE.md): one JSON line per model request with the
# documented fields, texts only when asked, rotation at max_bytes, and a full buffer dropping
# lines and counting them in /metrics — never holding a request.
import json
import os
import time

from hetserve_fixture import Server, run_threads

BASE = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1
limits:
  chars_max: 20000
server:
  capture:
    file: "%s"
"""

FIELDS = {"v", "id", "time", "offset_ms", "endpoint", "status", "model", "priority", "timeout_ms",
          "inputs", "tokens", "route", "policy", "engines", "stages_ms", "total_ms"}


def counter(server, name):
    status, _, body = server.get("/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)


def wait_lines(server, n, timeout=20):
    """The writer drains asynchronously: wait until it has written (or dropped) n lines."""
    t_end = time.time() + timeout
    while time.time() < t_end:
        done = counter(server, "hetserve_capture_lines_total")
        dropped = counter(server, "hetserve_capture_dropped_total")
        if done + dropped >= n:
            return done, dropped
        time.sleep(0.05)
    raise AssertionError("capture wrote %s of %d lines" % (done, n))


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def start(tmp_path, extra=""):
    path = str(tmp_path / "capture.jsonl")
    return Server(BASE % path + extra), path


def test_lines_have_the_documented_fields(tmp_path):
    s, path = start(tmp_path)
    try:
        texts = ["hello world", "a second, somewhat longer text for the capture"]
        for i in range(6):
            st, _, _ = s.post("/v1/embeddings", {"input": texts[: 1 + i % 2]},
                              headers={"X-Priority": "batch" if i == 5 else "interactive"})
            assert st == 200
        st, _, _ = s.post("/embed", {"inputs": "tei text", "timeout_ms": 4321})
        assert st == 200
        st, _, _ = s.post("/embed", {"inputs": ""})  # a 400 is captured too
        assert st == 400
        assert wait_lines(s, 8) == (8, 0)
        assert counter(s, "hetserve_capture_bytes_total") == os.path.getsize(path)
    finally:
        s.stop()
    lines = read_lines(path)
    assert len(lines) == 8
    ok = [x for x in lines if x["status"] == 200]
    assert len(ok) == 7
    for x in ok:
        assert FIELDS <= set(x), x
        assert x["v"] == 1 and x["engines"] == ["cpu0"]
        assert "texts" not in x  # texts: false is the default
        assert x["inputs"] == len(x["tokens"])
        assert all(t >= 3 for t in x["tokens"])
        assert "compute" in x["stages_ms"] and x["total_ms"] > 0
    assert [x["endpoint"] for x in lines].count("/v1/embeddings") == 6
    assert sorted(x["tokens"][0] for x in ok if x["endpoint"] == "/v1/embeddings")[0] == 4
    assert any(x["priority"] == "batch" for x in ok)
    assert any(x["endpoint"] == "/embed" and x["timeout_ms"] == 4321 for x in ok)
    bad = [x for x in lines if x["status"] == 400][0]
    assert bad["tokens"] == [] and bad["engines"] == []
    offsets = [x["offset_ms"] for x in sorted(lines, key=lambda x: x["id"])]
    assert offsets == sorted(offsets)


def test_texts_recorded_when_asked(tmp_path):
    s, path = start(tmp_path, "    texts: true\n")
    texts = ['quote " backslash \\ tab\t and ünïcode ✓', "second"]
    try:
        assert s.post("/v1/embeddings", {"input": texts})[0] == 200
        assert s.post("/embed", {"inputs": "one text"})[0] == 200
        assert s.post("/v1/embeddings", {"input": [101, 7592, 102]})[0] == 200  # token ids
        wait_lines(s, 3)
    finally:
        s.stop()
    lines = sorted(read_lines(path), key=lambda x: x["id"])
    assert lines[0]["texts"] == texts
    assert lines[1]["texts"] == ["one text"]
    assert "texts" not in lines[2] and lines[2]["tokens"] == [3]


def test_sample_ratio(tmp_path):
    s, path = start(tmp_path, "    sample_ratio: 0.5\n")
    try:
        for _ in range(40):
            assert s.post("/embed", {"inputs": "x"})[0] == 200
        time.sleep(0.5)
        n = counter(s, "hetserve_capture_lines_total")
    finally:
        s.stop()
    assert 8 <= n <= 32 and len(read_lines(path)) == n


def test_rotation_at_max_bytes(tmp_path):
    s, path = start(tmp_path, "    max_bytes: 2048\n")
    try:
        for _ in range(30):
            assert s.post("/embed", {"inputs": "rotate me"})[0] == 200
        wait_lines(s, 30)
        assert counter(s, "hetserve_capture_rotations_total") >= 1
    finally:
        s.stop()
    assert os.path.getsize(path) <= 2048 and os.path.getsize(path + ".1") <= 2048
    kept = read_lines(path + ".1") + read_lines(path)
    ids = [x["id"] for x in kept]
    assert ids == sorted(ids) and len(ids) == len(set(ids))  # the newest lines, in order


def test_full_buffer_drops_and_counts(tmp_path):
    # a 4 KiB buffer: a line longer than it can never fit (deterministic drop); a burst of
    # concurrent requests is either written or dropped, and every request is still answered
    s, path = start(tmp_path, "    texts: true\n    buffer_bytes: 4096\n")
    try:
        long_text = "word " * 1500
        st, _, _ = s.post("/embed", {"inputs": long_text, "truncate": True})
        assert st == 200
        done, dropped = wait_lines(s, 1)
        assert (done, dropped) == (0, 1)
        statuses = run_threads(24, lambda i: s.post("/embed", {"inputs": "burst %d" % i})[0])
        assert statuses == [200] * 24
        done, dropped = wait_lines(s, 25)
        assert done + dropped == 25 and dropped >= 1
    finally:
        s.stop()
    assert len(read_lines(path)) == done


def test_capture_keys_checked():
    s = None
    try:
        s = Server(BASE % "/nonexistent-dir/capture.jsonl")
    except RuntimeError as e:
        assert "cannot open capture file" in str(e)
    else:
        s.stop()
        raise AssertionError("a capture file that cannot be opened must refuse to start")
