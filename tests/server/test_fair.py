"""Fair shares between tenants in the lane queues (scheduler.fair), black-box: three tenants of
equal weight, one flooding from many threads past the queue, two at a light rate. The light ones
keep their goodput, wait less than the flooder, and are never refused; the flooder gets the rest
of the engine and the 429s. The bounds are generous: the machine running it may be loaded."""
import hashlib
import http.client
import json
import os
import re
import secrets
import subprocess
import threading
import time

import pytest

from hetserve_fixture import BINARY, Server

HETBENCH = os.path.join(os.path.dirname(BINARY), "hetbench")

KEYS = {n: "hs-" + secrets.token_hex(16) for n in ("flood", "light1", "light2")}
BODY = json.dumps({"inputs": "a request of a few dozen tokens, the size of a search query or a "
                             "short product description, to embed"})

# A queue of two batches, so that the flood's backlog is longer than one batch (the order of the
# queue matters only then) and the flooder overflows it (its 429s).
CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 2
limits:
  timeout_ms: 20000
  queue_max: 16
batching:
  batch_max: 8
scheduler:
  fair: true
  wait_max_ms: 0
auth:
  keys:
""" + "".join("    - sha256: %s\n      tenant: %s\n" % (hashlib.sha256(k.encode()).hexdigest(), n)
              for n, k in KEYS.items())

SECONDS = 8
FLOOD_THREADS = 24
LIGHT_RATE = 6  # requests/s each


def one(port, key, out):
    t = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/embed", BODY, {"Content-Type": "application/json",
                                           "Authorization": "Bearer " + key})
        r = c.getresponse()
        r.read()
        c.close()
        out.append((r.status, time.monotonic() - t))
    except OSError:
        out.append((0, time.monotonic() - t))


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def test_light_tenants_keep_their_share_under_a_flood():
    s = Server(CONFIG)
    try:
        res = {n: [] for n in KEYS}
        warm = []
        for _ in range(3):
            one(s.port, KEYS["light1"], warm)
        assert all(st == 200 for st, _ in warm), warm
        stop = time.monotonic() + SECONDS
        threads = []

        def flooder():  # closed loop; 10 ms after a refusal (an impatient client)
            while time.monotonic() < stop:
                one(s.port, KEYS["flood"], res["flood"])
                if res["flood"][-1][0] != 200:
                    time.sleep(0.01)

        for _ in range(FLOOD_THREADS):
            threads.append(threading.Thread(target=flooder))
            threads[-1].start()
        time.sleep(0.5)  # the flood's backlog is there first
        t0, k = time.monotonic(), 0
        while time.monotonic() < stop:  # the light tenants: open loop, interleaved
            for n in ("light1", "light2"):
                th = threading.Thread(target=one, args=(s.port, KEYS[n], res[n]))
                th.start()
                threads.append(th)
            k += 1
            time.sleep(max(0, t0 + k / LIGHT_RATE - time.monotonic()))
        for th in threads:
            th.join()

        ok = {n: [t for st, t in r if st == 200] for n, r in res.items()}
        codes = {n: sorted(set(st for st, _ in r)) for n, r in res.items()}
        summary = {n: (len(res[n]), len(ok[n]), codes[n],
                       round(1000 * pct(ok[n], 0.5)) if ok[n] else None,
                       round(1000 * pct(ok[n], 0.99)) if ok[n] else None) for n in KEYS}
        # the flooder overflowed the queue: it alone was refused, and it got the most service
        assert 429 in codes["flood"], summary
        assert len(ok["flood"]) > len(ok["light1"]) + len(ok["light2"]), summary
        for n in ("light1", "light2"):
            assert len(res[n]) >= SECONDS * LIGHT_RATE * 0.5, summary
            assert len(ok[n]) >= 0.9 * len(res[n]), summary
            assert 429 not in codes[n], summary
            # ahead of the flood's backlog: they wait for about a batch, the flooder for the queue
            assert pct(ok[n], 0.5) < 0.8 * pct(ok["flood"], 0.5), summary
            assert pct(ok[n], 0.99) < 1.5 * pct(ok["flood"], 0.99), summary
        # scheduler.over_share (on by default): the flooder, past its share of what the lane
        # served, was queued behind the light tenants' work; they, under theirs, were not (but
        # for a rare burst)
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        over = {n: int(re.search(r'hetserve_tenant_over_share_total\{tenant="%s"\} (\d+)' % n,
                                 text).group(1)) for n in KEYS}
        assert over["flood"] > 0.2 * len(ok["flood"]), (over, summary)
        for n in ("light1", "light2"):
            assert over[n] <= 0.1 * len(res[n]), (over, summary)
    finally:
        s.stop()


def test_trace_names_the_tenant(tmp_path):
    trace = str(tmp_path / "trace.json")
    s = Server(CONFIG, extra_args=["--trace-file", trace])
    try:
        for n in ("light1", "light2"):
            st, _, _ = s.post("/embed", {"inputs": "trace me"},
                              headers={"Authorization": "Bearer " + KEYS[n]})
            assert st == 200
    finally:
        s.stop()
    with open(trace) as f:
        ev = json.load(f)["traceEvents"]
    tenants = [e["args"]["tenant"] for e in ev
               if e.get("name", "").startswith("request ") and "tenant" in e.get("args", {})]
    assert sorted(tenants) == ["light1", "light2"], tenants


def test_hetbench_sends_as_several_tenants():
    if not os.path.exists(HETBENCH):
        pytest.skip("no %s (hetbench is built only with libcurl)" % HETBENCH)
    bad = subprocess.run([HETBENCH, "--rate", "1", "--tenant", "nokey"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "--tenant" in bad.stderr
    s = Server(CONFIG)
    try:
        out = subprocess.run(
            [HETBENCH, "--url", "http://127.0.0.1:%d" % s.port, "--endpoint", "tei", "--rate",
             "40", "--duration", "1.5", "--json", "--quiet",
             "--tenant", "light1:3=" + KEYS["light1"], "--tenant", "light2=" + KEYS["light2"]],
            capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert KEYS["light1"] not in out.stdout  # keys are never printed
        t = json.loads(out.stdout)["tenants"]
        assert set(t) == {"light1", "light2"}
        assert t["light1"]["ok"] > t["light2"]["ok"] > 0  # a 3:1 mix of the requests
        # the server counted each tenant's answers as hetbench did (counted as they are sent:
        # a moment's grace)
        for _ in range(50):
            _, _, body = s.get("/metrics")
            got = {n: sum(int(v) for v in re.findall(
                r'hetserve_tenant_requests_total\{tenant="%s",code="2\w*"\} (\d+)' % n,
                body.decode())) for n in ("light1", "light2")}
            if all(got[n] == t[n]["ok"] for n in got):
                break
            time.sleep(0.1)
        assert all(got[n] == t[n]["ok"] for n in got), (got, t)
    finally:
        s.stop()
