# GET /dashboard in a real browser: headless Chromium (Debian package `chromium`) loads the page
# from a running server under load, and the numbers the page drew (elements with data-engine /
# data-field) must match /metrics read just before and just after. A screenshot is kept under
# the build folder (test-artifacts/dashboard.png). Without chromium the test skips, saying why.
import os
import re
import shutil
import subprocess
import threading

import pytest

from hetserve_fixture import BINARY, Server

CONFIG = """
engines:
  - name: cpu_a
    kind: cpu
    threads: 1
  - name: cpu_b
    kind: cpu
    threads: 1
models:
  - path: %s
    engines: [cpu_a, cpu_b]
"""
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(BINARY)), "test-artifacts")


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def browse(server, tmp_path, *args):
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--user-data-dir=%s" % (tmp_path / "profile"), "--virtual-time-budget=5000",
           "--window-size=1280,1100"] + list(args) + [
               "http://127.0.0.1:%d/dashboard" % server.port]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def requests_by_engine(server):
    status, _, body = server.get("/metrics")
    assert status == 200
    counts = {}
    for m in re.finditer(r'^hetserve_requests_total\{engine="([^"]+)",model="[^"]+",outcome="[a-z]+"\} '
                         r'(\d+)', body.decode(), re.M):
        counts[m.group(1)] = counts.get(m.group(1), 0) + int(m.group(2))
    counts.pop("none", None)
    return counts, body.decode()


def drawn(dom, field):
    return {m.group(1): m.group(2) for m in re.finditer(
        r'data-engine="([^"]+)" data-model="[^"]+" data-field="%s"[^>]*>([^<]*)<' % field, dom)}


@pytest.fixture(scope="module")
def server():
    from hetserve_fixture import MODEL
    s = Server(CONFIG % MODEL, model=None)
    yield s
    s.stop()


def test_page_is_self_contained(server):
    status, headers, body = server.get("/dashboard")
    assert status == 200 and headers["content-type"].startswith("text/html")
    page = body.decode()
    assert "/metrics" in page and "<canvas" in page
    assert not re.search(r'<script[^>]+src=|<link[^>]+href=|https?://', page)


def test_browser_draws_the_metrics(server, tmp_path):
    if not chromium():
        pytest.skip("chromium is not installed (Debian package chromium; scripts/setup installs it)")
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            server.post("/embed", {"inputs": ["dashboard load %d" % i, "x" * (1 + i % 60)]})
            i += 1

    for i in range(10):
        assert server.post("/embed", {"inputs": "warm %d" % i})[0] == 200
    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        before, _ = requests_by_engine(server)
        dom = browse(server, tmp_path, "--dump-dom")
        after, metrics = requests_by_engine(server)
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, "dashboard.png")
        if os.path.exists(shot):
            os.remove(shot)
        browse(server, tmp_path, "--screenshot=%s" % shot)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert os.path.getsize(shot) > 10000
    got = drawn(dom, "requests")
    assert set(got) == {"cpu_a", "cpu_b"} == set(before), (got, before)
    for e, v in got.items():
        assert before[e] <= int(v) <= after[e], (e, v, before, after)
    assert sum(before.values()) >= 10
    assert set(drawn(dom, "breaker").values()) == {"closed"}
    for e, v in drawn(dom, "queue_length").items():
        assert int(v) >= 0
    for e, v in drawn(dom, "p95_ms").items():
        assert v == "-" or float(v) > 0
    assert 'data-field="routed"' in dom and "hetserve_routed_total" in metrics
