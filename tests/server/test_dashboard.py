# GET /dashboard in a real browser: headless Chromium (Debian package `chromium`) loads the page
# from a running server under load, and the numbers the page drew (elements with data-engine /
# data-field) must match /metrics read just before and just after. A screenshot is kept under
# the build folder (test-artifacts/dashboard.png). Without chromium the test skips, saying why.
import os
import re
import shutil
import subprocess
import threading
import time

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
        for _ in range(100):  # the warm-up's last answers are counted once sent
            if sum(before.values()) >= 10:
                break
            time.sleep(0.05)
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


TENANT_CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1
auth:
  keys:
    - {sha256: %s, tenant: alpha}
    - {sha256: %s, tenant: beta, weight: 2, rate: {requests_per_s: 2, burst_s: 1}}
"""


def tenant_rows(body):
    rows = {}
    for m in re.finditer(r'^hetserve_tenant_requests_total\{tenant="([^"]+)",code="([^"]+)"\} (\d+)',
                         body, re.M):
        r = rows.setdefault(m.group(1), {"answered": 0, "ok": 0, "rejected": 0})
        r["answered"] += int(m.group(3))
        r["ok"] += int(m.group(3)) if m.group(2) == "2xx" else 0
        r["rejected"] += int(m.group(3)) if m.group(2) == "429" else 0
    return rows


def test_browser_draws_the_tenants(tmp_path):
    """With API keys, the page's tenant table: answered, 2xx, goodput, 429s (beta's request
    bucket of 2/s refuses some) and P99 as /metrics has them (its per-tenant latency histogram);
    without keys, the table says so (the engines' server above)."""
    import hashlib
    if not chromium():
        pytest.skip("chromium is not installed (Debian package chromium; scripts/setup installs it)")
    keys = {"alpha": "hs-dash-alpha-key", "beta": "hs-dash-beta-key"}
    sha = {n: hashlib.sha256(k.encode()).hexdigest() for n, k in keys.items()}
    s = Server(TENANT_CONFIG % (sha["alpha"], sha["beta"]))
    try:
        codes = {"alpha": [], "beta": []}
        for i in range(12):
            for n in ("alpha", "beta"):
                st, _, _ = s.post("/embed", {"inputs": "tenant %s %d" % (n, i)},
                                  headers={"Authorization": "Bearer " + keys[n]})
                codes[n].append(st)
        assert set(codes["alpha"]) == {200} and 429 in codes["beta"] and 200 in codes["beta"]
        # a request is counted once its response is sent (the server's completion callback):
        # the last one's may still be on its way
        for _ in range(100):
            _, _, body = s.get("/metrics")
            body = body.decode()
            if 'hetserve_tenant_request_duration_seconds_count{tenant="alpha"} 12' in body and \
                    tenant_rows(body).get("beta", {}).get("answered") == 12:
                break
            time.sleep(0.05)
        assert 'hetserve_tenant_request_duration_seconds_count{tenant="alpha"} 12' in body
        dom = browse(s, tmp_path, "--dump-dom")
    finally:
        s.stop()
    want = tenant_rows(body)
    got = {f: {m.group(1): m.group(2) for m in re.finditer(
        r'data-tenant="([^"]+)" data-field="%s"[^>]*>([^<]*)<' % f, dom)}
        for f in ("answered", "ok", "rejected", "goodput", "weight", "p99_ms", "rejected_rate")}
    assert set(got["answered"]) == {"alpha", "beta"}, got
    for n in ("alpha", "beta"):
        for f in ("answered", "ok", "rejected"):
            assert int(got[f][n]) == want[n][f], (n, f, got, want)
        assert float(got["goodput"][n].rstrip(" %")) == pytest.approx(
            100.0 * want[n]["ok"] / want[n]["answered"], abs=0.06)
        assert float(got["p99_ms"][n]) > 0
    assert got["weight"] == {"alpha": "1", "beta": "2"}
    assert int(got["rejected_rate"]["beta"]) == want["beta"]["rejected"] > 0


def test_no_tenants_without_keys(server, tmp_path):
    if not chromium():
        pytest.skip("chromium is not installed (Debian package chromium; scripts/setup installs it)")
    assert "no API keys configured" in browse(server, tmp_path, "--dump-dom")
