# The multi-host variant: one router and three workers, each in its own Linux network namespace
# with its own address (veth pairs on a bridge, 10.77.0.0/24), created and removed here, talking
# real TCP. Where namespaces are not permitted the module skips with one line (test_remote.py,
# the loopback variant, still runs).
import collections
import os
import signal
import subprocess
import time

import pytest

from cluster import Load, Node, breaker_of, embed, router_config, start_worker, wait_for

TEXTS = ["hello world", "a second, somewhat longer sentence about routing across machines"]
TAG = "%d" % (os.getpid() % 100000)
BRIDGE = "hsbr" + TAG
ROUTER_IP, WORKER_IPS = "10.77.0.10", ["10.77.0.2", "10.77.0.3", "10.77.0.4"]
PORT = 8080


def ip(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip"] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True)


def ns_name(i):
    return "hsns%s_%d" % (TAG, i)


def veth(i):
    return "hsv%s_%d" % (TAG, i)


class Net:
    """namespace i (0 = router, 1.. = workers) at its address, on one bridge."""

    def __init__(self):
        self.made = []
        r = ip("netns", "add", ns_name(0))
        if r.returncode:
            pytest.skip("network namespaces not permitted here (ip netns add: %s); the loopback "
                        "variant covers the rest" % r.stderr.strip())
        self.made.append(ns_name(0))
        self.check(ip("link", "add", BRIDGE, "type", "bridge"))
        self.check(ip("addr", "add", "10.77.0.1/24", "dev", BRIDGE))
        self.check(ip("link", "set", BRIDGE, "up"))
        for i, addr in enumerate([ROUTER_IP] + WORKER_IPS):
            if i:
                self.check(ip("netns", "add", ns_name(i)))
                self.made.append(ns_name(i))
            peer = veth(i) + "p"
            self.check(ip("link", "add", veth(i), "type", "veth", "peer", "name", peer))
            self.check(ip("link", "set", peer, "netns", ns_name(i)))
            self.check(ip("link", "set", veth(i), "master", BRIDGE, "up"))
            self.check(ip("addr", "add", addr + "/24", "dev", peer, ns=ns_name(i)))
            self.check(ip("link", "set", peer, "up", ns=ns_name(i)))
            self.check(ip("link", "set", "lo", "up", ns=ns_name(i)))

    def check(self, r):
        if r.returncode:
            self.remove()
            raise RuntimeError("ip: %s" % r.stderr.strip())

    def link(self, i, up):
        self.check(ip("link", "set", "dev", veth(i), "up" if up else "down"))

    def remove(self):
        for ns in self.made:
            ip("netns", "del", ns)  # takes its veth pair with it
        ip("link", "del", BRIDGE)
        self.made = []


@pytest.fixture(scope="module")
def cluster():
    net = Net()
    nodes = []
    try:
        ws = [start_worker(host=a, port=PORT, prefix=["ip", "netns", "exec", ns_name(i + 1)])
              for i, a in enumerate(WORKER_IPS)]
        nodes += ws
        yaml = router_config(["%s:%d" % (a, PORT) for a in WORKER_IPS], timeout_ms=600,
                             open_ms=1500)
        r = Node(yaml, host=ROUTER_IP, port=PORT, prefix=["ip", "netns", "exec", ns_name(0)],
                 model=None)
        nodes.append(r)
        yield net, r, ws
    finally:
        for n in nodes:
            n.proc.send_signal(signal.SIGCONT)
            n.stop()
        net.remove()


def test_router_serves_across_namespaces(cluster):
    net, r, ws = cluster
    s, h, got = embed(r, TEXTS)
    assert s == 200 and h["x-engine"].startswith("pool/")
    s, _, want = embed(ws[0], TEXTS)
    assert s == 200
    for a, b in zip(got["data"], want["data"]):
        assert max(abs(x - y) for x, y in zip(a["embedding"], b["embedding"])) <= 1e-6
    s, _, tei = r.post("/embed", {"inputs": TEXTS})
    assert s == 200 and len(tei) == 2
    with Load(r, n=6, texts=TEXTS) as load:
        time.sleep(3)
    assert {e for (_, s, e, _) in load.results if s == 200} >= {"pool/0", "pool/1", "pool/2"}


@pytest.mark.parametrize("fault", ["link_down", "sigstop"])
def test_worker_cut_off_opens_breaker_and_rejoins(cluster, fault):
    net, r, ws = cluster
    for lane in range(3):
        assert wait_for(lambda: breaker_of(r, lane) == "closed", 15) is not None
    with Load(r, n=4, texts=TEXTS) as load:
        time.sleep(1.5)
        # the worker taking the most traffic now is the one cut off (an idle one has nothing to
        # fail); lane i sends to ws[i]
        busy = collections.Counter(x[2] for x in list(load.results)[-50:])
        victim = int(busy.most_common(1)[0][0].split("/")[1])
        t_cut = time.monotonic()
        if fault == "link_down":
            net.link(victim + 1, False)
        else:
            ws[victim].proc.send_signal(signal.SIGSTOP)
        opened = wait_for(lambda: breaker_of(r, victim) == "open", 10)
        time.sleep(2)
        t_back = time.monotonic()
        if fault == "link_down":
            net.link(victim + 1, True)
        else:
            ws[victim].proc.send_signal(signal.SIGCONT)
        rejoined = wait_for(lambda: breaker_of(r, victim) == "closed", 15)
        time.sleep(1)
    res = load.results
    statuses = collections.Counter(s for (_, s, _, _) in res)
    cut = [x for x in res if t_cut <= x[0] < t_back]
    elsewhere = [x for x in cut if x[1] == 200 and x[2] != "pool/%d" % victim]
    retried = [x for x in res if "policy=retry" in x[3]]
    print("%s: breaker open after %.2f s, closed %.2f s after the worker came back; %d requests "
          "%s; while cut off %d of %d answered by other workers; %d retried (%.2f %%)"
          % (fault, opened or -1, rejoined or -1, len(res), dict(statuses), len(elsewhere),
             len(cut), len(retried), 100.0 * len(retried) / max(1, len(res))))
    assert opened is not None and opened <= 3.0
    assert rejoined is not None
    assert load.sent == len(res) and statuses.get(-1, 0) == 0
    assert statuses[200] >= 0.98 * len(res)
    assert any(x[1] == 200 and x[2] == "pool/%d" % victim and "policy=probe" in x[3]
               and x[0] >= t_cut for x in res)
