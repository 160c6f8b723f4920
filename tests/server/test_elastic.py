# Cores lent between CPU lanes (engines[].borrow_cores, configs/hybrid-elastic.yaml): long
# requests on the engine pinned to core 1 borrow core 0 while the short lane is idle, answer as
# the same engine does without borrowing, /metrics counts the loans, short requests sent at
# the same time are answered and unchanged; with both engines borrowing, the same both ways; a
# config that cannot borrow is refused with its key.
import os
import subprocess
import threading

import pytest

from hetserve_fixture import BINARY, MODEL, Server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LONG = [" ".join(["the borrowed core runs every stage of this long request"] * 22),
        " ".join(["a second long input of a different length, also routed long"] * 17)]
SHORT = ["a short query", "another short one"]


def config(borrow, mutual=False, preempt=False):
    return """engines:
  - {name: cpu_a, kind: cpu, threads: 1, cores: [0]%s%s}
  - {name: cpu_b, kind: cpu, threads: 1, cores: [1]%s}
models:
  - path: "%s"
    engines: [cpu_a, cpu_b]
routes:
  - {name: short, engines: [cpu_a]}
  - {name: long, engines: [cpu_b]}
router:
  rules:
    - {tokens_max: 32, route: short}
  default_route: long
""" % (", borrow_cores: [1]" if mutual else "", ", borrow_preempt: true" if preempt else "",
       ", borrow_cores: [0]" if borrow else "", MODEL)


def two_cores():
    return len(os.sched_getaffinity(0)) >= 2 and {0, 1} <= os.sched_getaffinity(0)


def embed(srv, texts):
    status, hdrs, body = srv.post("/v1/embeddings", {"input": texts})
    assert status == 200, body
    return [d["embedding"] for d in body["data"]], hdrs


# Where the packed small-M kernel takes every batch here (AVX-512: up to 256 tokens a batch), a
# borrowed core changes no number: a sequence's GEMMs do not depend on which slice it is in. On
# an AVX2-only CPU the kernel takes batches up to 512 tokens and oneDNN's sgemm the larger ones,
# whose rounding depends on a slice's row count: those rows agree to about 1e-8 (measured 2.4e-9
# on normalized embeddings), not to the bit, so the check there allows 1e-6.
EXACT = "avx512f" in open("/proc/cpuinfo").read()


def same(a, b):
    if EXACT:
        return a == b
    return len(a) == len(b) and all(
        len(x) == len(y) and max(abs(u - v) for u, v in zip(x, y)) < 1e-6 for x, y in zip(a, b))


def metric(srv, name, core=0):
    status, _, body = srv.get("/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(name + '{core="%d"}' % core):
            return float(line.split()[-1])
    return None


def both_at_once(srv, fixed):
    """Short requests while long ones run: both answered, both unchanged."""
    errors = []

    def longs():
        for _ in range(4):
            try:
                assert same(embed(srv, LONG)[0], fixed[0])
            except AssertionError as e:
                errors.append(e)

    t = threading.Thread(target=longs)
    t.start()
    shorts = [embed(srv, SHORT)[0] for _ in range(20)]
    t.join()
    assert not errors
    assert all(same(x, fixed[1]) for x in shorts)


@pytest.fixture(scope="module")
def fixed():
    if not two_cores():
        pytest.skip("needs cores 0 and 1")
    srv = Server(config(False), model=None)
    try:
        yield embed(srv, LONG)[0], embed(srv, SHORT)[0]
    finally:
        srv.stop()


def test_long_requests_borrow_the_idle_core_and_answer_the_same(fixed):
    srv = Server(config(True), model=None)
    try:
        lent0 = metric(srv, "hetserve_core_lent_stages_total")  # load-time batches lend too
        assert lent0 is not None
        got, hdrs = embed(srv, LONG)
        assert "cpu_b" in hdrs.get("x-engine", "cpu_b")
        assert same(got, fixed[0])  # the same numbers with the borrowed core
        assert metric(srv, "hetserve_core_lent_stages_total") > lent0
        assert metric(srv, "hetserve_core_lent_seconds_total") > 0
        # short requests while long ones run: both answered, both unchanged
        both_at_once(srv, fixed)
        assert metric(srv, "hetserve_core_reclaim_waits_total") is not None
    finally:
        srv.stop()


def test_both_lanes_lend_and_borrow(fixed):
    """Each engine borrows the other's core while its lane is idle (configs/hybrid-elastic.yaml):
    short requests alone run on both cores, long ones too, and both answer as without loans,
    also while they run at the same time (each reclaims its core at the other's next stage)."""
    srv = Server(config(True, mutual=True), model=None)
    try:
        lent1 = metric(srv, "hetserve_core_lent_stages_total", core=1)
        assert lent1 is not None
        assert all(same(embed(srv, SHORT)[0], fixed[1]) for _ in range(3))
        assert metric(srv, "hetserve_core_lent_stages_total", core=1) > lent1
        lent0 = metric(srv, "hetserve_core_lent_stages_total", core=0)
        assert same(embed(srv, LONG)[0], fixed[0])
        assert metric(srv, "hetserve_core_lent_stages_total", core=0) > lent0
        both_at_once(srv, fixed)
    finally:
        srv.stop()


def test_the_short_lane_preempts_the_long_lanes_core(fixed):
    """borrow_preempt on the short engine (configs/hybrid-preempt.yaml): while long requests
    run, short ones still get core 1 (the long engine yields it at its next round), and both
    answer as without loans; /metrics counts the claims and the yields."""
    srv = Server(config(True, mutual=True, preempt=True), model=None)
    try:
        claims = metric(srv, "hetserve_core_preempt_claims_total", core=1)
        assert claims is not None
        assert all(same(embed(srv, SHORT)[0], fixed[1]) for _ in range(3))
        assert metric(srv, "hetserve_core_preempt_claims_total", core=1) > claims
        assert metric(srv, "hetserve_core_preempt_lent_total", core=1) > 0
        assert same(embed(srv, LONG)[0], fixed[0])
        both_at_once(srv, fixed)
        assert metric(srv, "hetserve_core_yields_total", core=1) is not None
        assert metric(srv, "hetserve_core_yield_max_seconds", core=1) <= 0.021
        # core 0 is borrowed but not preempted: no claims there
        assert metric(srv, "hetserve_core_preempt_claims_total", core=0) == 0
    finally:
        srv.stop()


def test_a_config_that_cannot_borrow_is_refused(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(config(True).replace("cores: [0]}", "cores: []}", 1))
    r = subprocess.run([BINARY, "config", "--check", str(p)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "engines[1].borrow_cores[0]" in r.stderr and "no cpu engine is pinned to core 0" \
        in r.stderr, r.stderr
    p.write_text(config(True).replace("cores: [1], borrow", "cores: [], borrow"))
    r = subprocess.run([BINARY, "config", "--check", str(p)], capture_output=True, text=True)
    assert r.returncode != 0 and "not pinned" in r.stderr, r.stderr
    # preempting without borrowing; two engines preempting each other's cores
    p.write_text(config(False, preempt=True))
    r = subprocess.run([BINARY, "config", "--check", str(p)], capture_output=True, text=True)
    assert r.returncode != 0 and "engines[0].borrow_preempt" in r.stderr \
        and "borrows no cores" in r.stderr, r.stderr
    p.write_text(config(True, mutual=True, preempt=True).replace(
        "borrow_cores: [0]}", "borrow_cores: [0], borrow_preempt: true}"))
    r = subprocess.run([BINARY, "config", "--check", str(p)], capture_output=True, text=True)
    assert r.returncode != 0 and "one of them may preempt, not both" in r.stderr, r.stderr
    p.write_text(config(True, mutual=True, preempt=True))
    r = subprocess.run([BINARY, "config", "--check", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
