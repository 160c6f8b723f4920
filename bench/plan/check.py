#!/usr/bin/env python3
"""bench/plan/check.py -- `hetserve plan`'s predictions against hetbench measurements (issue 12,
item 6).

  python3 bench/plan/check.py [--build build] [--out bench/out/plan] [--load 0.5]
                              [--duration 15] [--kinds single,buckets,layers]

Workload: bench/hybrid/make_trace.py's trace (real sentences, 80 % of 8-32 tokens, 20 % of
200-256), its token counts measured with `hetserve tokenize`. Steps: profile
configs/hybrid-cpu.yaml (grid 1,8,32 x 16,32,256); plan once per kind (--kind) at rate R = load
x the best single engine's predicted capacity; then for each plan serve its written config and
send the trace open-loop with hetbench at R for --duration seconds (3 s warm-up left out).
Prints and writes (DIR/report.md) predicted vs measured P50, P99 and served rate, with the
machine's 1-minute load average around each run. Run it alone: it measures.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
BUCKETS = [16, 32, 64, 128, 256]


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def tokens_of(hetserve, texts):
    r = subprocess.run([hetserve, "tokenize", "--model", MODEL, "-"], input="\n".join(texts) + "\n",
                       capture_output=True, text=True, check=True)
    out = json.loads(r.stdout)
    return [len(o["ids"]) for o in out]


def plan_row(stdout):
    """The chosen row: name, window, P50, P99, capacity."""
    for line in stdout.splitlines():
        if line.startswith("* "):
            m = re.match(r"\* (.+?)\s+(\d+)\s+(\S+)\s+(\S+)\s+([\d.]+)", line)
            num = lambda s: float("inf") if s == "over" else float(s)
            return {"name": m.group(1).strip(), "window_us": int(m.group(2)),
                    "p50": num(m.group(3)), "p99": num(m.group(4)), "capacity": float(m.group(5))}
    raise RuntimeError("no chosen row in:\n" + stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="bench/out/plan")
    ap.add_argument("--load", type=float, default=0.5)
    ap.add_argument("--duration", type=float, default=15)
    ap.add_argument("--kinds", default="single,buckets,layers")
    a = ap.parse_args()
    os.chdir(ROOT)
    hetserve = os.path.join(a.build, "hetserve")
    hetbench = os.path.join(a.build, "hetbench")
    os.makedirs(a.out, exist_ok=True)
    trace = os.path.join(a.out, "trace")
    os.makedirs(trace, exist_ok=True)
    subprocess.run([sys.executable, "bench/hybrid/make_trace.py", "--hetserve", hetserve,
                    "--model", MODEL, "--out", trace], check=True, stdout=subprocess.DEVNULL)
    texts = [l.rstrip("\n").split("\t", 1)[1] for l in open(os.path.join(trace, "trace.tsv"))]
    toks = tokens_of(hetserve, texts)
    counts = {}
    for t in toks:
        b = next(x for x in BUCKETS if x >= t)
        counts[b] = counts.get(b, 0) + 1
    hist = ",".join("%d:%.4f" % (b, c / len(toks)) for b, c in sorted(counts.items()))

    profile = os.path.join(a.out, "profile.json")
    la0 = load1()
    subprocess.run([hetserve, "profile", "--config", "configs/hybrid-cpu.yaml", "--shapes",
                    "1,8,32x16,32,256", "--cap-s", "0.3", "--quiet", "--out", profile],
                   check=True, stderr=subprocess.DEVNULL)
    lines = ["# plan predictions vs hetbench (bench/plan/check.py)", "",
             "profile: configs/hybrid-cpu.yaml, grid 1,8,32 x 16,32,256; load average %.2f before"
             % la0, "traffic: trace lengths binned by bucket: %s" % hist, ""]

    def plan(kind, rate, out):
        r = subprocess.run([hetserve, "plan", "--profile", profile, "--traffic",
                            "rate=%g;%s" % (rate, hist), "--slo", "1000", "--kind", kind,
                            "--out", out], capture_output=True, text=True, check=True)
        return plan_row(r.stdout), r.stdout

    single, _ = plan("single", 1, os.path.join(a.out, "probe.yaml"))
    rate = round(a.load * single["capacity"], 1)
    lines.append("rate: %.1f requests/s = %.2f x the best single engine's predicted capacity "
                 "(%.1f/s)" % (rate, a.load, single["capacity"]))
    lines += ["", "| plan | P50 pred | P50 meas | err | P99 pred | P99 meas | err | served/s pred "
              "| meas | load avg |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind in a.kinds.split(","):
        cfg = os.path.join(a.out, "%s.yaml" % kind)
        pred, text = plan(kind, rate, cfg)
        with open(os.path.join(a.out, "%s.plan.txt" % kind), "w") as f:
            f.write(text)
        la_before = load1()
        srv = subprocess.Popen([hetserve, "serve", "--config", cfg, "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env=dict(os.environ, OMP_WAIT_POLICY="passive"))
        line = srv.stdout.readline()
        port = int(line.strip().rsplit(":", 1)[1])
        try:
            r = subprocess.run([hetbench, "--url", "http://127.0.0.1:%d" % port, "--texts",
                                os.path.join(trace, "trace.tsv"), "--rate", str(rate),
                                "--duration", str(a.duration), "--warmup", "3", "--json",
                                "--quiet", "--seed", "1"], capture_output=True, text=True,
                               check=True)
        finally:
            srv.terminate()
            srv.wait(timeout=60)
        m = json.loads(r.stdout)["all"]
        with open(os.path.join(a.out, "%s.hetbench.json" % kind), "w") as f:
            f.write(r.stdout)
        err = lambda p, x: "%+.0f %%" % (100 * (p - x) / x) if x > 0 and p != float("inf") else "-"
        served = min(rate, pred["capacity"])
        lines.append("| %s | %.1f | %.1f | %s | %.1f | %.1f | %s | %.1f | %.1f | %.2f -> %.2f |" % (
            pred["name"], pred["p50"], m["latency_ms"]["p50"], err(pred["p50"], m["latency_ms"]["p50"]),
            pred["p99"], m["latency_ms"]["p99"], err(pred["p99"], m["latency_ms"]["p99"]),
            served, m["rps"], la_before, load1()))
        time.sleep(2)
    lines += ["", "err = (predicted - measured) / measured. Measured latency is client-side: it "
              "includes HTTP, JSON and tokenization, which the plan does not model."]
    report = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
