#!/usr/bin/env python3
"""Fair shares between tenants under a flood, measured briefly.

One `hetserve serve` on the default model with three tenants of equal weight. Tenants b and c
send open-loop at --rate requests/s each; phase "unloaded": b and c alone; phase "flood": tenant
a adds --flood concurrent closed-loop clients. Run for each variant of --variants: the lanes'
fair order on or off (scheduler.fair) and admission's share_inflight (auth.share_inflight, 0 =
off), "fair,share" items, e.g. the default "1,0 0,0 0,4": fair queues alone, neither, the
admission-only share of before. Prints, per phase and tenant, goodput (answered 200 / sent) and
P50 / P99 latency; exits 0 (a shared machine's timings are reported, not gated).

With --hetbench RATE the load is hetbench's instead (open loop, Poisson arrivals at RATE req/s,
as three tenants: a 10x the share of b and of c, `hetbench --tenant`), one phase per variant:
hetbench's per-tenant rows are printed as they come.

usage: bench/tenants.py [--seconds S] [--rate R] [--flood N] [--variants "F,S ..."]
                        [--hetbench RATE] [--batch-max N] [--queue-max N] [--fair-batch-ms MS]
"""
import argparse
import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = json.dumps({"inputs": "a request of a few dozen tokens, the size of a search query "
                             "or a short product description, to embed"})


def start(binary, cfg_text, tmp):
    cfg = os.path.join(tmp, "c.yaml")
    with open(cfg, "w") as f:
        f.write(cfg_text)
    p = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", "0", "--config", cfg,
                          "--model", os.path.join(ROOT, "models", "all-MiniLM-L6-v2")],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        sys.exit("hetserve did not start: %r" % line)
    return p, int(line.strip().rsplit(":", 1)[1])


def one(port, key, out):
    t = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/embed", BODY, {"Content-Type": "application/json",
                                           "Authorization": "Bearer " + key})
        r = c.getresponse()
        r.read()
        c.close()
        out.append((r.status, time.monotonic() - t))
    except OSError:
        out.append((0, time.monotonic() - t))


def phase(port, keys, seconds, rate, flood):
    res = {"a": [], "b": [], "c": []}
    stop = time.monotonic() + seconds
    threads = []

    def flooder():  # closed loop; an impatient client: 10 ms after a refusal, not Retry-After
        while time.monotonic() < stop:
            one(port, keys["a"], res["a"])
            if res["a"][-1][0] != 200:
                time.sleep(0.01)

    for _ in range(flood):
        threads.append(threading.Thread(target=flooder))
        threads[-1].start()
    t0 = time.monotonic()
    k = 0
    while time.monotonic() < stop:  # b and c open-loop, interleaved
        for n in ("b", "c"):
            th = threading.Thread(target=one, args=(port, keys[n], res[n]))
            th.start()
            threads.append(th)
        k += 1
        time.sleep(max(0, t0 + k / rate - time.monotonic()))
    for th in threads:
        th.join()
    return res


def report(label, res, seconds):
    for n, r in res.items():
        if not r:
            continue
        ok = [t for st, t in r if st == 200]
        lat = sorted(ok)
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
        print("  %-8s tenant %s: sent %4d, 200 %4d (%.0f %%, %.1f/s), P50 %.1f ms, P99 %.1f ms"
              % (label, n, len(r), len(ok), 100.0 * len(ok) / len(r), len(ok) / seconds,
                 1000 * statistics.median(lat) if lat else float("nan"), 1000 * p99))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rate", type=float, default=8)
    ap.add_argument("--flood", type=int, default=16)
    ap.add_argument("--variants", default="1,0 0,0 0,4")
    ap.add_argument("--batch-max", type=int, default=0, help="batching.batch_max (0: default)")
    ap.add_argument("--queue-max", type=int, default=0, help="limits.queue_max (0: default)")
    ap.add_argument("--fair-batch-ms", type=int, default=0, help="scheduler.fair_batch_ms")
    ap.add_argument("--hetbench", type=float, default=0,
                    help="load from hetbench at this rate, a:10, b:1, c:1 (0: Python clients)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "hetserve"))
    a = ap.parse_args()
    keys = {n: "k-%s-%s" % (n, os.urandom(8).hex()) for n in "abc"}
    for v in a.variants.split():
        fair, share = (int(x) for x in v.split(","))
        cfg = ("engines:\n  - name: cpu0\n    kind: cpu\n    threads: 2\nlimits:\n"
               "  timeout_ms: 10000\n")
        if a.queue_max:
            cfg += "  queue_max: %d\n" % a.queue_max
        if a.batch_max:
            cfg += "batching:\n  batch_max: %d\n" % a.batch_max
        cfg += ("scheduler:\n  fair: %s\n  fair_batch_ms: %d\nauth:\n  share_inflight: %d\n"
                "  keys:\n" % ("true" if fair else "false", a.fair_batch_ms, share))
        cfg += "".join("    - sha256: %s\n      tenant: %s\n"
                       % (hashlib.sha256(k.encode()).hexdigest(), n) for n, k in keys.items())
        with tempfile.TemporaryDirectory() as tmp:
            p, port = start(a.binary, cfg, tmp)
            try:
                if a.hetbench:
                    print("scheduler.fair %s, auth.share_inflight %d, hetbench %g req/s:"
                          % ("true" if fair else "false", share, a.hetbench))
                    hb = [os.path.join(os.path.dirname(a.binary), "hetbench"), "--url",
                          "http://127.0.0.1:%d" % port, "--endpoint", "tei", "--rate",
                          str(a.hetbench), "--duration", str(a.seconds + 1), "--warmup", "1",
                          "--quiet", "--tenant", "a:10=" + keys["a"], "--tenant",
                          "b=" + keys["b"], "--tenant", "c=" + keys["c"]]
                    out = subprocess.run(hb, capture_output=True, text=True).stdout
                    for line in out.splitlines():
                        if "tenant" in line or line.startswith(("throughput", "latency")):
                            print("  " + line.strip())
                    continue
                phase(port, keys, 1, a.rate, 0)  # warm-up
                print("scheduler.fair %s, auth.share_inflight %d:"
                      % ("true" if fair else "false", share))
                report("unloaded", phase(port, keys, a.seconds, a.rate, 0), a.seconds)
                report("flood", phase(port, keys, a.seconds, a.rate, a.flood), a.seconds)
            finally:
                p.terminate()
                p.wait()


if __name__ == "__main__":
    main()
