#!/usr/bin/env python3
"""What API keys add to the server's own per-request time at low load.

Starts two `hetserve serve` on the default model, one without keys and one with `--keys` keys
(the request's key the last of them: every digest is compared), and sends them the same short
/embed request one at a time, alternating between the two so that both see the same machine.
The server's own time is Server-Timing's total (from the request's first byte to its response,
admission included). Prints the medians and their ratio; exits 0 (a shared machine's timings are
reported, not gated).

usage: bench/auth_overhead.py [--requests N] [--keys K] [--binary build/hetserve]
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(binary, config_text, tmp, name):
    cfg = os.path.join(tmp, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(config_text)
    p = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", "0", "--config", cfg,
                          "--model", os.path.join(ROOT, "models", "all-MiniLM-L6-v2")],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        sys.exit("hetserve did not start: %r" % line)
    return p, int(line.strip().rsplit(":", 1)[1])


def total_ms(conn, headers):
    body = json.dumps({"inputs": "a short request to time", "model": "all-MiniLM-L6-v2"})
    conn.request("POST", "/embed", body, {"Content-Type": "application/json", **headers})
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        sys.exit("status %d" % r.status)
    for part in r.getheader("Server-Timing").split(","):
        name, _, dur = part.strip().partition(";dur=")
        if name == "total":
            return float(dur)
    sys.exit("no total in Server-Timing")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "hetserve"))
    a = ap.parse_args()
    base = "engines:\n  - name: cpu0\n    kind: cpu\n    threads: 1\n"
    keys = ["key-%d-%s" % (i, os.urandom(8).hex()) for i in range(a.keys)]
    auth = base + "auth:\n  keys:\n" + "".join(
        "    - sha256: %s\n      tenant: t%d\n      rate: {requests_per_s: 100000, "
        "tokens_per_s: 100000000}\n" % (hashlib.sha256(k.encode()).hexdigest(), i % 8)
        for i, k in enumerate(keys[:32]))
    with tempfile.TemporaryDirectory() as tmp:
        # the config table holds 32 keys; the rest go in a keys file
        kf = os.path.join(tmp, "keys.txt")
        with open(kf, "w") as f:
            for i, k in enumerate(keys[32:], 32):
                f.write("%s t%d requests_per_s=100000 tokens_per_s=100000000\n"
                        % (hashlib.sha256(k.encode()).hexdigest(), i % 8))
        if a.keys > 32:
            auth += "  keys_file: %s\n" % kf
        p0, port0 = start(a.binary, base, tmp, "plain")
        p1, port1 = start(a.binary, auth, tmp, "auth")
        try:
            c0 = http.client.HTTPConnection("127.0.0.1", port0)
            c1 = http.client.HTTPConnection("127.0.0.1", port1)
            hdr = {"Authorization": "Bearer " + keys[-1]}
            for _ in range(20):  # warm-up
                total_ms(c0, {})
                total_ms(c1, hdr)
            t0, t1 = [], []
            for _ in range(a.requests):
                t0.append(total_ms(c0, {}))
                t1.append(total_ms(c1, hdr))
        finally:
            for p in (p0, p1):
                p.terminate()
                p.wait()
    m0, m1 = statistics.median(t0), statistics.median(t1)
    print("requests %d each, %d keys: server total median %.3f ms without keys, %.3f ms with "
          "(x%.3f); P90 %.3f / %.3f ms" % (a.requests, a.keys, m0, m1, m1 / m0,
                                          statistics.quantiles(t0, n=10)[-1],
                                          statistics.quantiles(t1, n=10)[-1]))


if __name__ == "__main__":
    main()
