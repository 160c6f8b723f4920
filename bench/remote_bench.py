#!/usr/bin/env python3
"""Router <-> worker measurements (issue 11 item 5), on loopback:
  hop   the network hop's cost: the same requests straight to a worker and through a router,
        one at a time on a keep-alive connection (low load), P50 / P99 of the client's latency,
        and the router's own `hop` span (Server-Timing);
  route router decisions per second on one core (bench_router under taskset);
  scale throughput through a router with 1, 2, 3 workers (closed loop, 8 clients).
Prints a Markdown table; writes it to bench/out/remote/results.md as well."""
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
from cluster import Load, router_config, start_router, start_worker  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
TEXT = "the router tokenizes once and sends token ids to the worker that will finish first"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def timed(node, n):
    c = node.conn()
    lat, hop = [], []
    for _ in range(n):
        t = time.perf_counter()
        s, h, _ = node.request("POST", "/v1/embeddings", {"input": [TEXT]}, conn=c)
        lat.append((time.perf_counter() - t) * 1e3)
        assert s == 200
        for span in h.get("server-timing", "").split(", "):
            if span.startswith("hop;"):
                hop.append(float(span.split("dur=")[1]))
    return lat, hop


def main():
    lines = ["| measurement | value |", "| --- | --- |"]
    load1 = os.getloadavg()
    # --- hop cost
    w = start_worker(threads=2)
    r = start_router(router_config(["127.0.0.1:%d" % w.port]))
    try:
        timed(w, 50), timed(r, 50)  # warm both
        direct, routed, hops = [], [], []
        for _ in range(5):
            d, _ = timed(w, 60)
            x, hp = timed(r, 60)
            direct += d
            routed += x
            hops += hp
    finally:
        r.stop()
        w.stop()
    lines += [
        "| direct to worker, 1 text, P50 / P99 | %.2f / %.2f ms |" % (pct(direct, 50),
                                                                     pct(direct, 99)),
        "| through router, P50 / P99 | %.2f / %.2f ms |" % (pct(routed, 50), pct(routed, 99)),
        "| hop cost (router - direct), P50 / P99 | %.2f / %.2f ms |"
        % (pct(routed, 50) - pct(direct, 50), pct(routed, 99) - pct(direct, 99)),
        "| router's `hop` span (round trip - worker time), median | %.3f ms |"
        % statistics.median(hops),
    ]
    # --- decisions per second
    out = subprocess.run(["taskset", "-c", "0", os.path.join(BUILD, "bench_router"), "2000000"],
                         capture_output=True, text=True, check=True).stdout.strip()
    rate = float(out.split("= ")[1].split(" per")[0])
    lines.append("| router decisions per second, one core (3 lanes) | %.0f |" % rate)
    # --- throughput with 1, 2, 3 workers
    for k in (1, 2, 3):
        ws = [start_worker(threads=1) for _ in range(k)]
        r = start_router(router_config(["127.0.0.1:%d" % x.port for x in ws]))
        try:
            with Load(r, n=8, texts=[TEXT] * 4) as ld:
                time.sleep(2)
                ld.results.clear()
                t0 = time.monotonic()
                time.sleep(8)
                n_ok = sum(1 for x in list(ld.results) if x[1] == 200)
                secs = time.monotonic() - t0
        finally:
            r.stop()
            for x in ws:
                x.stop()
        lines.append("| throughput, %d worker(s) x 1 thread, 8 clients x 4 texts | %.0f texts/s |"
                     % (k, 4 * n_ok / secs))
    load2 = os.getloadavg()
    lines.append("| load average before / after (1 min) | %.2f / %.2f on %d cores |"
                 % (load1[0], load2[0], os.cpu_count()))
    text = "\n".join(lines)
    print(text)
    os.makedirs(os.path.join(ROOT, "bench", "out", "remote"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "out", "remote", "results.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
