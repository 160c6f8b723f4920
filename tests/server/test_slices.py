# engines[].slices: one CPU engine split into slot-lanes on disjoint core sets, each its own lane
# (X-Engine, metrics), the weights held once.
import os
import re

import pytest

from hetserve_fixture import Server, cli_embed, run_threads


def cpus_allowed(pid, tid):
    with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                out = set()
                for part in line.split(":", 1)[1].strip().split(","):
                    a, _, b = part.partition("-")
                    out.update(range(int(a), int(b or a) + 1))
                return out
    return set()


def test_two_slices_serve_on_disjoint_cores_with_shared_weights():
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs 2 CPUs for 2 slices")
    # unpinned: the slices share out the cores this process may use, first half to slice 0
    half = (len(allowed) + 1) // 2
    shares = [set(allowed[:half]), set(allowed[half:])]
    s = Server("""
engines:
  - name: cpu0
    kind: cpu
    slices: 2
limits:
  timeout_ms: 300000
""")
    try:
        texts = ["the first text", "a second, longer text about slices"]
        st, h, v = s.post("/embed", {"inputs": texts})
        assert st == 200 and h["x-engine"] in ("cpu0/0", "cpu0/1"), h
        ref = cli_embed(texts)
        for a, b in zip(v, ref):
            assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5

        def one(i):
            st, h, _ = s.post("/embed", {"inputs": ["request %d " % i + "word " * (i % 40)]})
            assert st == 200
            return h["x-engine"]

        seen = set()
        for _ in range(5):  # under concurrent load both slices take requests
            seen.update(run_threads(8, one))
            if seen == {"cpu0/0", "cpu0/1"}:
                break
        assert seen == {"cpu0/0", "cpu0/1"}, seen

        _, _, m = s.get("/metrics")
        m = m.decode()
        for lane in ("cpu0/0", "cpu0/1"):
            assert 'engine="%s"' % lane in m

        # compute threads (pinned below the process's cores) stay inside one slice's share,
        # and both shares have them
        used = [False, False]
        for tid in os.listdir("/proc/%d/task" % s.proc.pid):
            cpus = cpus_allowed(s.proc.pid, tid)
            if not cpus or cpus == set(allowed):
                continue
            inside = [cpus <= sh for sh in shares]
            assert any(inside), (tid, cpus, shares)
            used = [u or i for u, i in zip(used, inside)]
        assert used == [True, True], (used, shares)

        # the weights are prepared once: the second slice's prepares were all shared, and the
        # memory plan counts the weights once
        log = s.stderr()
        held, shared = map(int, re.search(
            r"weights: (\d+) stage preparation\(s\) held, (\d+) prepare", log).groups())
        assert held > 0 and shared >= held, log
        assert "x 2 slices" in log
    finally:
        s.stop()

    # the same config unsliced holds the same preparations, and plans the same weights
    u = Server("""
engines:
  - name: cpu0
    kind: cpu
limits:
  timeout_ms: 300000
""")
    try:
        ulog = u.stderr()
        uheld = int(re.search(r"weights: (\d+) stage preparation", ulog).group(1))
        assert uheld == held
        plan = re.compile(r"engine cpu0 needs \S+ \S+ \(weights ([^,]+),")
        assert plan.search(ulog).group(1) == plan.search(log).group(1)
    finally:
        u.stop()


def test_slices_refused_beyond_the_cores():
    n = len(os.sched_getaffinity(0))
    if n >= 16:
        pytest.skip("the process may use 16 cores or more")
    with pytest.raises(RuntimeError) as e:
        Server("""
engines:
  - name: cpu0
    kind: cpu
    slices: %d
""" % (n + 1))
    assert "engines[0].slices" in str(e.value) and "unpinned" in str(e.value)
