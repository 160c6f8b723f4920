# A router and workers as separate hetserve processes on distinct 127.0.0.1 ports: the loopback
# variant of the multi-host tests (test_netns.py runs the same faults across namespaces).
import collections
import json
import os
import signal
import time

import pytest

from cluster import (Load, breaker_of, embed, router_config, start_router, start_worker,
                     status, wait_for)

TEXTS = ["hello world", "a second, somewhat longer sentence about routing across machines"]


@pytest.fixture(scope="module")
def pair():
    ws = [start_worker(), start_worker()]
    r = start_router(router_config(["127.0.0.1:%d" % w.port for w in ws]))
    yield r, ws
    for n in [r] + ws:
        n.stop()


def test_router_answers_as_the_worker_does(pair):
    r, ws = pair
    s, h, got = embed(r, TEXTS)
    assert s == 200, got
    assert h["x-engine"] in ("pool/0", "pool/1")
    stages = [x.split(";")[0] for x in h["server-timing"].split(", ")]
    assert "hop" in stages and "compute" in stages
    s, _, want = embed(ws[0], TEXTS)
    assert s == 200
    for a, b in zip(got["data"], want["data"]):
        assert max(abs(x - y) for x, y in zip(a["embedding"], b["embedding"])) <= 1e-6
    # TEI: the router normalizes (or not) exactly as the worker does
    s, _, tei_r = r.post("/embed", {"inputs": TEXTS})
    s2, _, tei_w = ws[1].post("/embed", {"inputs": TEXTS})
    assert s == s2 == 200
    for a, b in zip(tei_r, tei_w):
        assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-6
    st = status(r.port)
    assert st["role"] == "router" and [l["engine"] for l in st["lanes"]] == ["pool/0", "pool/1"]
    assert status(ws[0].port)["role"] == "worker"
    # a router serves no batches itself
    c = r.conn()
    c.request("POST", "/internal/v1/batch", body=b"HSBQ")
    assert c.getresponse().status == 404


def test_worker_refuses_a_bad_batch(pair):
    _, ws = pair
    c = ws[0].conn()
    c.request("POST", "/internal/v1/batch", body=b"not a batch at all, just bytes")
    resp = c.getresponse()
    body = json.loads(resp.read())
    assert resp.status == 400 and "batch" in body["error"]["message"]


def test_traffic_spreads_by_predicted_completion():
    """One worker made 4x slower (its engine's compute, admin fault) gets less of the load."""
    ws = [start_worker(admin=True), start_worker(admin=True)]
    r = start_router(router_config(["127.0.0.1:%d" % w.port for w in ws]))
    try:
        s, _, _ = ws[1].post("/admin/fault", {"engine": "cpu0", "slow_factor": 4})
        assert s == 200
        with Load(r, n=4, texts=TEXTS) as load:
            time.sleep(6)
        ok = [e for (_, s, e, _) in load.results if s == 200]
        assert len(ok) == len(load.results) and len(ok) >= 20, collections.Counter(
            s for (_, s, _, _) in load.results)
        share = collections.Counter(ok)
        print("spread: fast %d, slow %d" % (share["pool/0"], share["pool/1"]))
        assert share["pool/1"] < share["pool/0"]
    finally:
        for n in [r] + ws:
            n.stop()


def test_frozen_worker_opens_its_breaker_and_rejoins():
    ws = [start_worker(), start_worker()]
    r = start_router(router_config(["127.0.0.1:%d" % w.port for w in ws], timeout_ms=600,
                                   open_ms=1500))
    try:
        with Load(r, n=4, texts=TEXTS) as load:
            time.sleep(1.5)
            t_stop = time.monotonic()
            ws[0].proc.send_signal(signal.SIGSTOP)
            opened = wait_for(lambda: breaker_of(r, 0) == "open", 10)
            time.sleep(2)
            t_cont = time.monotonic()
            ws[0].proc.send_signal(signal.SIGCONT)
            rejoined = wait_for(lambda: breaker_of(r, 0) == "closed", 15)
            time.sleep(1)
        res = load.results
        statuses = collections.Counter(s for (_, s, _, _) in res)
        frozen = [x for x in res if t_stop <= x[0] < t_cont]
        failed_over = [x for x in frozen if x[1] == 200 and x[2] == "pool/1"]
        retried = [x for x in res if "policy=retry" in x[3]]
        print("breaker open after %.2f s, closed %.2f s after SIGCONT; %d requests, %s; while "
              "frozen %d answered by the other worker of %d; %d retried"
              % (opened or -1, rejoined or -1, len(res), dict(statuses), len(failed_over),
                 len(frozen), len(retried)))
        assert opened is not None and opened <= 3.0
        assert rejoined is not None
        # exactly one answer per request sent; none lost
        assert load.sent == len(res) and statuses.get(-1, 0) == 0
        # it rejoined through half-open probes that it answered
        assert any(x[1] == 200 and x[2] == "pool/0" and "policy=probe" in x[3] and x[0] >= t_stop
                   for x in res)
        assert len(failed_over) >= len(frozen) * 0.5
    finally:
        ws[0].proc.send_signal(signal.SIGCONT)
        for n in [r] + ws:
            n.stop()


def test_endpoints_file_change_is_picked_up(tmp_path):
    ws = [start_worker(), start_worker()]
    f = tmp_path / "workers"
    f.write_text("127.0.0.1:%d\n" % ws[0].port)
    r = start_router(router_config(endpoints_file=str(f), workers_max=3))
    try:
        lanes = lambda: [l["worker"] for l in status(r.port)["lanes"]]  # noqa: E731
        assert lanes()[0] == "127.0.0.1:%d" % ws[0].port and lanes()[1:] == ["", ""]
        f.write_text("127.0.0.1:%d\n127.0.0.1:%d\n" % (ws[0].port, ws[1].port))
        assert wait_for(lambda: "127.0.0.1:%d" % ws[1].port in lanes(), 5) is not None
        f.write_text("127.0.0.1:%d\n" % ws[1].port)
        assert wait_for(lambda: "127.0.0.1:%d" % ws[0].port not in lanes(), 5) is not None
        engines = collections.Counter(embed(r, TEXTS)[1]["x-engine"] for _ in range(8))
        slot = lanes().index("127.0.0.1:%d" % ws[1].port)
        assert engines == {"pool/%d" % slot: 8}
    finally:
        for n in [r] + ws:
            n.stop()


def test_deadline_holds_when_the_worker_hangs():
    w = start_worker()
    r = start_router(router_config(["127.0.0.1:%d" % w.port], timeout_ms=0))
    try:
        assert embed(r, TEXTS)[0] == 200
        w.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        s, _, body = r.post("/v1/embeddings", {"input": TEXTS, "timeout_ms": 700})
        took = time.monotonic() - t0
        print("hung worker: %d after %.3f s (deadline 0.7 s)" % (s, took))
        assert s == 504 and took < 1.2, body
    finally:
        w.proc.send_signal(signal.SIGCONT)
        r.stop()
        w.stop()


TWO_POOLS = """
engines:
  - {{name: pa, kind: remote, endpoints: ["127.0.0.1:{a}"], slots: 2, batch_window_us: 0,
      timeout_ms: 600, connect_timeout_ms: 300}}
  - {{name: pb, kind: remote, endpoints: ["127.0.0.1:{b}"], slots: 2, batch_window_us: 0,
      timeout_ms: 600, connect_timeout_ms: 300}}
models:
  - path: {model}
    engines: [pa, pb]
routes:
  - {{name: ra, engines: [pa], failover: {{route: rb, ratio_max: 0.3}}}}
  - {{name: rb, engines: [pb]}}
router:
  default_route: ra
breaker:
  window_requests: 4
  min_requests: 2
  error_ratio_max: 0.5
  open_ms: 60000
retry:
  budget_ratio: 0
  budget_max: 0
limits:
  timeout_ms: 20000
"""


def counter(srv, name, route):
    _, _, m = srv.get("/metrics")
    for line in m.decode().splitlines():
        if line.startswith('%s{route="%s"}' % (name, route)):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_pool_down_fails_over_under_its_cap():
    """Pool A's only worker frozen: its breaker opens, and of the requests that then find route
    ra blocked at most 30 % go to pool B; the rest are refused (429), none lost or doubled."""
    from cluster import MODEL
    wa, wb = start_worker(), start_worker()
    r = start_router(TWO_POOLS.format(a=wa.port, b=wb.port, model=MODEL))
    try:
        with Load(r, n=4, texts=TEXTS) as load:
            time.sleep(1.0)
            wa.proc.send_signal(signal.SIGSTOP)
            opened = wait_for(lambda: breaker_of(r, 0) == "open", 10)
            t_open = time.monotonic()
            time.sleep(3)
        res = load.results
        after = [x for x in res if x[0] >= t_open + 0.1]
        to_b = [x for x in after if x[1] == 200 and x[2].startswith("pb")]
        refused = [x for x in after if x[1] == 429]
        blocked = counter(r, "hetserve_route_blocked_total", "ra")
        failed_over = counter(r, "hetserve_route_failed_over_total", "ra")
        print("breaker open after %.2f s; after it %d requests: %d to pool B, %d refused; "
              "route ra blocked %d, failed over %d (%.0f %%)"
              % (opened or -1, len(after), len(to_b), len(refused), blocked, failed_over,
                 100 * failed_over / max(1, blocked)))
        assert opened is not None and opened <= 3.0
        assert load.sent == len(res) and all(x[1] != -1 for x in res)  # one answer each
        assert blocked >= 20 and failed_over >= 1
        assert failed_over <= 0.3 * blocked + 1  # the cap, at all times
        assert set(x[1] for x in after) <= {200, 429}
        assert len(to_b) <= 0.3 * len(after) + 2 and len(refused) > 0
    finally:
        wa.proc.send_signal(signal.SIGCONT)
        for n in (r, wa, wb):
            n.stop()


def test_batch_priority_reaches_the_worker(tmp_path):
    """A batch-class request through the router is batch class on the worker too (its shedding
    order), an interactive one stays interactive: seen in the worker's capture."""
    from cluster import WORKER_YAML, Node
    cap = tmp_path / "worker.jsonl"
    w = Node(WORKER_YAML.format(threads=1) + "server:\n  capture: {file: %s}\n" % cap)
    r = start_router(router_config(["127.0.0.1:%d" % w.port]))
    try:
        assert embed(r, ["batch work"], headers={"X-Priority": "batch"})[0] == 200
        assert embed(r, ["interactive work"])[0] == 200
        lines = []
        for _ in range(200):  # the capture's writer thread appends shortly after
            if cap.exists():
                lines = [json.loads(x) for x in cap.read_text().splitlines() if x.strip()]
            if len(lines) >= 2:
                break
            time.sleep(0.02)
        prios = sorted(x["priority"] for x in lines if x["endpoint"] == "/internal/v1/batch")
        assert prios == ["batch", "interactive"], lines
    finally:
        r.stop()
        w.stop()


def test_dns_name_resolves_to_the_worker():
    """`dns:` resolves a name to every IPv4 address (here localhost -> 127.0.0.1) and serves
    through the worker there, as a Kubernetes headless Service's name would."""
    from cluster import ROUTER_YAML, MODEL
    w = start_worker()
    yaml = ROUTER_YAML.format(workers="dns: localhost\n    port: %d" % w.port, timeout_ms=2000,
                              open_ms=1000, workers_max=2, model=MODEL)
    r = start_router(yaml)
    try:
        assert wait_for(lambda: embed(r, ["resolved"])[0] == 200, 10) is not None
        s, h, _ = embed(r, ["resolved again"])
        assert s == 200 and h["x-engine"].startswith("pool/")
        st = status(r.port)
        assert any(l.get("worker") == "127.0.0.1:%d" % w.port for l in st["lanes"]), st
    finally:
        r.stop()
        w.stop()


def test_rerank_pairs_reach_the_worker_with_their_token_types():
    """A cross-encoder behind a router: the batch carries the pairs' token types (wire flag),
    so the router's scores are transformers' (tests/golden/rerank_tiny.json)."""
    from cluster import ROUTER_YAML, WORKER_YAML, Node
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    ce = os.path.join(root, "tests", "data", "tiny-cross-encoder")
    gold = json.load(open(os.path.join(root, "tests", "golden", "rerank_tiny.json")))
    w = Node(WORKER_YAML.format(threads=1), model=ce)
    r = Node(ROUTER_YAML.format(workers='endpoints: ["127.0.0.1:%d"]' % w.port, timeout_ms=5000,
                                open_ms=1000, workers_max=0, model=ce), model=None)
    try:
        q = gold["queries"][0]
        s, h, got = r.post("/rerank", {"query": q, "texts": gold["docs"], "raw_scores": True})
        assert s == 200, got
        assert h["x-engine"] == "pool/0"
        for x in got:
            assert abs(x["score"] - gold["rerank"][q][x["index"]]) < 1e-4
    finally:
        r.stop()
        w.stop()
