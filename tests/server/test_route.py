# Black-box tests of heterogeneous routing: two single-thread CPU engines (pinned to cores 0 and 1
# when the machine has both) serving one model. Every response says which engine served it
# (X-Engine) and why (X-Route: "route;policy=..."), so routing is checked without timing; faults
# are injected through the admin endpoint. Orderings and counts are asserted, never durations.
import os
import threading
import time

import pytest

from hetserve_fixture import MODEL, ROOT, Server, run_threads


def engines_yaml():
    cores = sorted(os.sched_getaffinity(0))
    pin = [[cores[0]], [cores[1]]] if len(cores) >= 2 else [[], []]
    return """
engines:
  - name: cpu_a
    kind: cpu
    threads: 1
    cores: %s
  - name: cpu_b
    kind: cpu
    threads: 1
    cores: %s
models:
  - path: "%s"
    engines: [cpu_a, cpu_b]
limits:
  timeout_ms: 300000
scheduler:
  throughput_init_tokens_per_s: 1000000000
admin:
  enabled: true
""" % (pin[0], pin[1], MODEL)


POLICY = engines_yaml() + """
routes:
  - name: short
    engines: [cpu_a]
  - name: long
    engines: [cpu_b]
  - name: both
    engines: [cpu_a, cpu_b]
  - name: canary
    engines: [cpu_a]
    split: {route: long, ratio: 0.5}
  - name: mirrored
    engines: [cpu_a]
    shadow: {route: long, ratio: 1.0}
router:
  rules:
    - {task: embed, header: X-Tier, value: gold, route: long}
    - {header: X-Route-To, value: both, route: both}
    - {header: X-Route-To, value: canary, route: canary}
    - {header: X-Route-To, value: mirrored, route: mirrored}
    - {priority: batch, route: long}
    - {tokens_max: 32, route: short}
  default_route: long
"""

SHORT = "a short sentence"
LONG = "this sentence is long enough to need more than thirty two tokens " * 3
BIG = ["%d " % i + "tokens make this sequence long enough to fill its bucket " * 24
       for i in range(32)]


def route_of(h):
    route, policy = h["x-route"].split(";policy=")
    return h["x-engine"], route, policy


def metric(server, name, labels):
    """Value of one sample of the Prometheus exposition (0 when absent)."""
    _, _, body = server.get("/metrics")
    want = "{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "}"
    for line in body.decode().splitlines():
        if line.startswith(name + "{"):
            lab = line[len(name):line.rindex("}") + 1]
            if all(('%s="%s"' % kv) in lab for kv in labels.items()) or lab == want:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def metric_sum(server, name, labels):
    """Sum of the samples of name whose labels include labels."""
    _, _, body = server.get("/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name + "{") and all(('%s="%s"' % kv) in line for kv in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(cond, what, limit_s=60):
    """Polls cond() (generous limit only so that a bug fails instead of hanging)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def fault(server, **kw):
    st, _, b = server.post("/admin/fault", kw)
    assert st == 200, b
    return b


@pytest.fixture(scope="module")
def policy_server():
    s = Server(POLICY, model=None)
    yield s
    s.stop()


def test_rules_route_as_configured(policy_server):
    s = policy_server
    st, h, _ = s.post("/v1/embeddings", {"input": SHORT})
    assert st == 200 and route_of(h) == ("cpu_a", "short", "rule"), h
    st, h, _ = s.post("/v1/embeddings", {"input": LONG})
    assert st == 200 and route_of(h) == ("cpu_b", "long", "default"), h
    # priority rule
    st, h, _ = s.post("/v1/embeddings", {"input": SHORT, "priority": "batch"})
    assert st == 200 and route_of(h) == ("cpu_b", "long", "rule"), h
    # task + header: only /embed with the header takes the first rule
    st, h, _ = s.post("/embed", {"inputs": SHORT}, headers={"X-Tier": "gold"})
    assert st == 200 and route_of(h) == ("cpu_b", "long", "rule"), h
    st, h, _ = s.post("/v1/embeddings", {"input": SHORT}, headers={"X-Tier": "gold"})
    assert st == 200 and route_of(h) == ("cpu_a", "short", "rule"), h
    assert "rule" in h["x-route-reason"]


def test_least_predicted_completion_and_deadline(policy_server):
    s = policy_server
    # measure both engines once
    for to in ("short", "long"):
        for i in range(2):
            s.post("/v1/embeddings", {"input": [SHORT] * 4}, headers={"X-Route-To": to})
    results = {}
    routed = metric_sum(s, "hetserve_routed_total", {"route": "both"})
    # a long batch on one engine of route "both" ...
    t = threading.Thread(target=lambda: results.__setitem__(
        "big", s.post("/embed", {"inputs": BIG, "truncate": True},
                      headers={"X-Route-To": "both"})))
    t.start()
    wait_for(lambda: metric_sum(s, "hetserve_routed_total", {"route": "both"}) > routed,
             "the big request to be routed", 30)
    # ... and a short request on the same route goes to the other one
    st, h, _ = s.post("/v1/embeddings", {"input": SHORT}, headers={"X-Route-To": "both"})
    assert st == 200, h
    t.join()
    st_big, h_big, _ = results["big"]
    assert st_big == 200
    # the short request went to the engine the big batch did not occupy
    assert h["x-engine"] != h_big["x-engine"] and route_of(h)[1] == "both", (h, h_big)
    assert "predicted" in h["x-route-reason"]


def test_deadline_rejected_at_admission(policy_server):
    s = policy_server
    res = {}
    routed = metric_sum(s, "hetserve_routed_total", {"route": "long"})
    t = threading.Thread(target=lambda: res.__setitem__(
        "big", s.post("/embed", {"inputs": BIG, "truncate": True})))  # default route: cpu_b
    t.start()
    wait_for(lambda: metric_sum(s, "hetserve_routed_total", {"route": "long"}) > routed,
             "the big request to be routed", 30)
    st, h, b = s.post("/v1/embeddings", {"input": LONG, "timeout_ms": 5})
    t.join()
    assert res["big"][0] == 200
    assert st == 429, b
    assert "predicted" in b["error"]["message"] and int(h["retry-after"]) >= 1


def test_split_sticky_and_spread(policy_server):
    s = policy_server
    engines = [route_of(s.post("/v1/embeddings", {"input": SHORT},
                               headers={"X-Route-To": "canary"})[1]) for _ in range(20)]
    split = sum(1 for e in engines if e[2] == "split")
    assert all(e[0] == "cpu_b" for e in engines if e[2] == "split")
    assert all(e[0] == "cpu_a" for e in engines if e[2] != "split")
    assert 8 <= split <= 12, engines  # 50 %, evenly spread
    # sticky: one request id always lands on the same side
    for rid in ("user-1", "user-2", "user-3", "user-4"):
        seen = {route_of(s.post("/v1/embeddings", {"input": SHORT},
                                headers={"X-Route-To": "canary", "X-Request-Id": rid})[1])[0]
                for _ in range(4)}
        assert len(seen) == 1, (rid, seen)


def test_shadow_never_changes_responses(policy_server):
    s = policy_server
    texts = [SHORT, "another one", "the third text of the shadow test"]
    before = metric(s, "hetserve_shadow_cosine_count", {"route": "mirrored"})
    for _ in range(3):
        st, h, plain = s.post("/v1/embeddings", {"input": texts}, headers={"X-Route-To": "both"})
        st2, h2, shadowed = s.post("/v1/embeddings", {"input": texts},
                                   headers={"X-Route-To": "mirrored"})
        assert st == st2 == 200
        assert route_of(h2) == ("cpu_a", "mirrored", "rule")
        for a, b in zip(plain["data"], shadowed["data"]):
            assert max(abs(x - y) for x, y in zip(a["embedding"], b["embedding"])) < 1e-5
    wait_for(lambda: metric(s, "hetserve_shadow_cosine_count", {"route": "mirrored"})
             >= before + 9, "the shadow comparisons")
    assert metric(s, "hetserve_shadow_cosine_min", {"route": "mirrored"}) > 0.9999
    assert metric(s, "hetserve_shadow_requests_total",
                  {"route": "mirrored", "outcome": "failed"}) == 0


def test_admin_endpoint_needs_config():
    s = Server(None)
    try:
        st, _, _ = s.post("/admin/fault", {"engine": "cpu0", "fail_next": 1})
        assert st == 404
        st, h, _ = s.post("/v1/embeddings", {"input": SHORT})
        assert st == 200 and route_of(h)[0] == "cpu0"  # one engine, one implicit route
    finally:
        s.stop()


FAULTS = engines_yaml() + """
routes:
  - name: short
    engines: [cpu_a]
  - name: long
    engines: [cpu_b]
    failover: {route: short, ratio_max: 0.3}
router:
  rules:
    - {tokens_max: 32, route: short}
  default_route: long
breaker:
  window_requests: 4
  min_requests: 4
  error_ratio_max: 0.5
  open_ms: %d
  half_open_probes: 2
retry:
  budget_ratio: 0
  budget_max: %d
"""


def answered_all(s, sent):
    """Nothing accepted is lost: every model request sent was answered and counted (a request
    is counted once its response is on the wire, just after the client may have read it)."""
    def total():
        _, _, body = s.get("/metrics")
        return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
                   if line.startswith("hetserve_requests_total{"))
    wait_for(lambda: total() >= sent, "every request to be counted", 10)
    assert total() == sent


def test_breaker_opens_failover_capped_and_closes():
    s = Server(FAULTS % (2000, 0), model=None)
    sent = 0
    try:
        fault(s, engine="cpu_b", fail_next=100000)
        for i in range(4):
            st, h, b = s.post("/v1/embeddings", {"input": LONG})
            sent += 1
            assert st == 500 and "engine" in b["error"]["message"], b
        wait_for(lambda: metric(s, "hetserve_breaker_state", {"engine": "cpu_b"}) == 1,
                 "the breaker to open", 10)
        # open: at most 30 % of the blocked traffic fails over, the rest gets 429
        results = [s.post("/v1/embeddings", {"input": LONG}) for _ in range(20)]
        sent += 20
        failover = [r for r in results if r[0] == 200]
        refused = [r for r in results if r[0] == 429]
        assert all(route_of(r[1]) == ("cpu_a", "short", "failover") for r in failover)
        assert all(int(r[1]["retry-after"]) >= 1 for r in refused)
        blocked = metric(s, "hetserve_route_blocked_total", {"route": "long"})
        failed_over = metric(s, "hetserve_route_failed_over_total", {"route": "long"})
        assert failed_over == len(failover) and failed_over > 0
        assert failed_over <= 0.3 * blocked
        assert len(failover) + len(refused) + sum(1 for r in results if r[0] == 500) == 20
        # short traffic is not affected
        st, h, _ = s.post("/v1/embeddings", {"input": SHORT})
        sent += 1
        assert st == 200 and route_of(h) == ("cpu_a", "short", "rule")
        # recovery: half-open probes succeed, the breaker closes
        fault(s, engine="cpu_b")
        wait_for(lambda: metric(s, "hetserve_breaker_state", {"engine": "cpu_b"}) == 2,
                 "half-open", 30)
        policies = []
        for _ in range(4):
            st, h, _ = s.post("/v1/embeddings", {"input": LONG})
            sent += 1
            assert st == 200
            policies.append(route_of(h))
        assert policies[:2] == [("cpu_b", "long", "probe")] * 2, policies
        assert policies[2:] == [("cpu_b", "long", "default")] * 2, policies
        assert metric(s, "hetserve_breaker_state", {"engine": "cpu_b"}) == 0
        assert metric(s, "hetserve_breaker_transitions_total",
                      {"engine": "cpu_b", "to": "closed"}) == 1
        answered_all(s, sent)
    finally:
        s.stop()


def test_retry_budget_bounds_retries():
    s = Server(FAULTS % (60000, 2), model=None)
    try:
        fault(s, engine="cpu_b", fail_next=3)
        got = [s.post("/v1/embeddings", {"input": LONG}) for _ in range(3)]
        assert [r[0] for r in got] == [200, 200, 500], got
        for st, h, _ in got[:2]:
            assert route_of(h) == ("cpu_a", "short", "retry"), h
            assert "retry" in h["x-route-reason"]
        assert metric(s, "hetserve_route_retries_total", {"route": "long", "outcome": "sent"}) == 2
        assert metric(s, "hetserve_route_retries_total",
                      {"route": "long", "outcome": "denied"}) == 1
        answered_all(s, 3)
    finally:
        s.stop()


def test_hung_engine_times_out_others_served():
    s = Server(FAULTS % (60000, 0), model=None)
    try:
        fault(s, engine="cpu_b", hang_ms=60000)
        hung = []
        ts = [threading.Thread(target=lambda: hung.append(
            s.post("/v1/embeddings", {"input": LONG, "timeout_ms": 800}))) for _ in range(3)]
        for t in ts:
            t.start()
        # while cpu_b hangs, cpu_a keeps serving
        shorts = run_threads(4, lambda i: s.post("/v1/embeddings", {"input": SHORT + " %d" % i}))
        assert all(r[0] == 200 and route_of(r[1])[0] == "cpu_a" for r in shorts)
        for t in ts:
            t.join()
        assert [r[0] for r in hung] == [504] * 3, hung
        assert any("while engine cpu_b ran its batch" in r[2]["error"]["message"] for r in hung)
        # the hang ends when the fault is cleared; the engine serves again
        fault(s, engine="cpu_b")
        st, h, _ = s.post("/v1/embeddings", {"input": LONG})
        assert st == 200 and route_of(h)[0] == "cpu_b", h
        answered_all(s, 8)
    finally:
        s.stop()


def test_predict_on_a_route_that_may_retry():
    """/predict on a route with a failover (so a retry may be prepared): the retry's storage
    takes its size from the lane's model. A /predict connection has no embedding model of its
    own, and sizing it from that crashed the server on the first such request (found by make
    soak)."""
    head = os.path.join(ROOT, "heads", "all-MiniLM-L6-v2-sentiment.json")
    cascade = "cascade:\n  small: %s\n  small_head: %s\n" % (os.path.basename(MODEL), head)
    s = Server(FAULTS % (60000, 2) + cascade, model=None)
    try:
        st, h, b = s.post("/predict", {"inputs": [LONG]})
        assert st == 200 and len(b) == 1 and b[0][0]["label"], b
        assert route_of(h)[:2] == ("cpu_b", "long"), h
        # an engine failure: the small stage is retried on the failover route
        fault(s, engine="cpu_b", fail_next=1)
        st, h, b = s.post("/predict", {"inputs": [LONG, SHORT]})
        assert st == 200 and len(b) == 2, b
        engine, route, policy = route_of(h)
        assert (engine, route) == ("cpu_a", "short") and policy.startswith("retry"), h
        answered_all(s, 2)
    finally:
        s.stop()
