"""Preemption at stage boundaries (scheduler.preempt), black-box on the real model: a flood tenant
keeps the lane busy with batches of long inputs while a light tenant sends one short text at a
time. The light tenant's requests run on the lane's preempting slot while the flood's batch is
paused (hetserve_preempt_batches_total > 0); every answer of both is 200 and equal to the same
request's answer on the idle server before the flood; the server then shuts down cleanly."""
import hashlib
import http.client
import json
import re
import secrets
import signal
import threading
import time

from hetserve_fixture import Server

KEYS = {n: "hs-" + secrets.token_hex(16) for n in ("flood", "light")}

CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 2
limits:
  timeout_ms: 60000
  queue_max: 4096
batching:
  batch_max: 32
scheduler:
  fair: true
  preempt: true
  wait_max_ms: 0
auth:
  keys:
""" + "".join("    - sha256: %s\n      tenant: %s\n" % (hashlib.sha256(k.encode()).hexdigest(), n)
              for n, k in KEYS.items())

# the flood's inputs: long (bucket 64), 16 per request; the light tenant's: a short query each
WORDS = ("the lane runs a batch of long inputs stage by stage while the scheduler looks at "
         "what each tenant is owed and a short request waits for its turn").split()
FLOOD_BODIES = [json.dumps({"inputs": [" ".join(WORDS[(i + k) % len(WORDS):] + WORDS)[:260]
                                       for k in range(16)]}) for i in range(4)]
LIGHT_BODIES = [json.dumps({"inputs": "a short query number %d" % i}) for i in range(6)]
FLOOD_THREADS = 4
SECONDS = 4


def post(port, key, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/embed", body, {"Content-Type": "application/json",
                                       "Authorization": "Bearer " + key})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if r.status == 200 else data


def metric(text, name):
    return sum(float(v) for v in re.findall(r"^%s\{[^}]*\} (\S+)$" % name, text, re.M))


def close(a, b, tol):
    return len(a) == len(b) and all(
        len(x) == len(y) and max(abs(p - q) for p, q in zip(x, y)) <= tol for x, y in zip(a, b))


def test_light_tenant_preempts_the_flood_and_answers_are_unchanged():
    s = Server(CONFIG)
    try:
        _, _, body = s.get("/metrics")
        assert metric(body.decode(), "hetserve_preempt_batches_total") == 0
        # the answers on the idle server: nothing to preempt
        ref_flood = [post(s.port, KEYS["flood"], b) for b in FLOOD_BODIES]
        ref_light = [post(s.port, KEYS["light"], b) for b in LIGHT_BODIES]
        assert all(st == 200 for st, _ in ref_flood + ref_light)
        _, _, body = s.get("/metrics")
        assert metric(body.decode(), "hetserve_preempt_batches_total") == 0

        stop = time.monotonic() + SECONDS
        flood, light = [], []

        def flooder(i):
            k = i
            while time.monotonic() < stop:
                flood.append((k % len(FLOOD_BODIES), post(s.port, KEYS["flood"],
                                                          FLOOD_BODIES[k % len(FLOOD_BODIES)])))
                k += 1

        threads = [threading.Thread(target=flooder, args=(i,)) for i in range(FLOOD_THREADS)]
        for t in threads:
            t.start()
        time.sleep(0.5)  # the flood's batches run first
        k = 0
        while time.monotonic() < stop:  # one at a time: each arrives with a flood batch running
            light.append((k % len(LIGHT_BODIES), post(s.port, KEYS["light"],
                                                      LIGHT_BODIES[k % len(LIGHT_BODIES)])))
            k += 1
            time.sleep(0.02)
        for t in threads:
            t.join()

        _, _, body = s.get("/metrics")
        text = body.decode()
        batches = metric(text, "hetserve_preempt_batches_total")
        summary = {"flood": len(flood), "light": len(light), "preempt_batches": batches,
                   "paused_s": metric(text, "hetserve_preempt_paused_seconds_total"),
                   "wait_s": metric(text, "hetserve_preempt_wait_seconds_total")}
        print(summary)
        assert batches > 0, summary
        assert summary["paused_s"] > 0, summary
        assert metric(text, "hetserve_preempt_paused_max_seconds") > 0, summary
        # nothing lost: every request was answered, 200
        assert len(light) >= 10, summary
        assert all(st == 200 for _, (st, _) in flood + light), summary
        # the light tenant's answers are its one-sequence batches either way: bit-identical; a
        # flood answer may have run in a batch of other composition (the CPU engine's batch
        # invariance, 1e-5, tests/engine/test_cpu_engine.c), paused or not
        for i, (_, v) in light:
            assert v == ref_light[i][1], ("light", i)
        for i, (_, v) in flood:
            assert close(v, ref_flood[i][1], 1e-5), ("flood", i)
        assert "preempting" in s.stderr()  # the log says which lanes have the slot
    finally:
        if s.proc.poll() is None:
            s.signal(signal.SIGTERM)
        code = s.wait(timeout=60)
        s.stop()
    assert code == 0


def test_preempt_needs_fair():
    s = None
    try:
        s = Server(CONFIG.replace("fair: true", "fair: false"))
    except RuntimeError as e:
        assert "scheduler.preempt: needs scheduler.fair" in str(e)
    else:
        s.stop()
        raise AssertionError("a config with preempt and not fair was served")
