#!/usr/bin/env python3
"""bench/gpu/slices_check.py -- a cuda engine sliced into streams, served (bench/gpu/run.sh).

  python3 bench/gpu/slices_check.py --hetserve BUILD/hetserve --model DIR [--slices 2]

Serves DIR on one cuda engine with `slices: N` (N engines on device 0, each with its own
streams, sharing the device's weights) beside a cpu engine, sends concurrent requests to the
cuda route, and checks: every answer is 200, every slice served some (X-Engine), the cuda
answers match the cpu engine's (cosine >= 0.999, fp16), and the log says the weights were
prepared once for the slices. Exits 1 on a failed check, printing why.
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import tempfile
import urllib.request

TEXTS = ["short query", "a somewhat longer sentence about serving models on GPUs and CPUs",
         "hello world", "Pipelines overlap batches across engines. " * 8]


def post(port, route, texts):
    req = urllib.request.Request(
        "http://127.0.0.1:%d/v1/embeddings" % port,
        data=json.dumps({"input": texts}).encode(),
        headers={"Content-Type": "application/json", "X-Pool": route})
    with urllib.request.urlopen(req, timeout=120) as r:
        body = json.loads(r.read())
        return r.status, r.headers.get("X-Engine", ""), [d["embedding"] for d in body["data"]]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetserve", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--slices", type=int, default=2)
    a = ap.parse_args()
    cfg = """engines:
  - {name: g, kind: cuda, device: 0, slices: %d}
  - {name: c, kind: cpu}
models:
  - {path: "%s", engines: [g, c]}
routes:
  - {name: gpu, engines: [g]}
  - {name: cpu, engines: [c]}
router:
  rules:
    - {header: X-Pool, value: gpu, route: gpu}
  default_route: cpu
""" % (a.slices, a.model)
    tmp = tempfile.mkdtemp(prefix="hs_slices_")
    path = os.path.join(tmp, "slices.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    log = open(os.path.join(tmp, "server.log"), "w+")
    srv = subprocess.Popen([a.hetserve, "serve", "--config", path, "--port", "0"],
                           stdout=subprocess.PIPE, stderr=log, text=True)
    failures = []
    try:
        line = srv.stdout.readline()
        if "listening on" not in line:
            log.seek(0)
            print("slices_check: the server did not start:\n" + log.read())
            return 1
        port = int(line.strip().rsplit(":", 1)[1])
        _, _, want = post(port, "cpu", TEXTS)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda i: post(port, "gpu", TEXTS), range(64)))
        engines = {e for _, e, _ in got}
        worst = min(cosine(x, y) for _, _, emb in got for x, y in zip(emb, want))
        print("slices_check: %d answers, engines %s, worst cosine to cpu %.6f"
              % (len(got), sorted(engines), worst))
        if any(s != 200 for s, _, _ in got):
            failures.append("a request was not answered 200")
        if engines != {"g/%d" % k for k in range(a.slices)}:
            failures.append("not every slice served: %s" % sorted(engines))
        if worst < 0.999:
            failures.append("cosine %.6f below 0.999" % worst)
    finally:
        srv.terminate()
        srv.wait(timeout=60)
    log.seek(0)
    text = log.read()
    held = [l for l in text.splitlines() if "preparation(s) held" in l]
    print("slices_check: " + (held[0].strip() if held else "no weights line in the log"))
    for f in failures:
        print("slices_check: FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
