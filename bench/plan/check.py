#!/usr/bin/env python3
"""bench/plan/check.py -- `hetserve plan`'s predictions against hetbench measurements (issue 12,
item 6).

  python3 bench/plan/check.py [--build build] [--out bench/out/plan] [--loads 0.3,0.6]
                              [--duration 15] [--kinds single,buckets,layers,layers-pipelined]
                              [--no-calibrate]

Workload: bench/hybrid/make_trace.py's trace (real sentences, 80 % of 8-32 tokens, 20 % of
200-256), its token counts measured with `hetserve tokenize`. Steps: profile
configs/hybrid-cpu.yaml (grid 1,2,4,8,16,32 x 16,32,128,256); calibrate (below); then per load, plan once
per kind (--kind; layers and modules one batch at a time, layers-pipelined and
modules-pipelined with placement.pipeline) at rate R = load x the best single engine's
predicted capacity (a plan over its capacity is predicted "over cap" and still served), serve each
plan's written config and send the trace open-loop with hetbench at R for --duration seconds
(3 s warm-up left out). Prints and writes (DIR/report.md) predicted vs measured P50, P99 and
served rate, with the machine's 1-minute load average around each run. Run it alone: it
measures.

Calibration (as bench/sim/validate.sh's, from runs that are none of the checked ones): each
engine of configs/hybrid-cpu.yaml alone (its cores and threads) serves the whole length mix at
0.45 x that capacity, and hetsim simulates the same run; the engine's serving tax = its measured
busy share (/metrics) / the simulated one, and the overhead = the mean over the two runs of the
measured short-request P50 - the simulated one (with the tax). `hetserve plan` gets them as
--tax ENGINE=X and --overhead-ms. --no-calibrate predicts without (tax 1, overhead 0).
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
        line = line.replace("over cap", "over")
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
    ap.add_argument("--loads", default="0.3,0.6")
    ap.add_argument("--no-calibrate", action="store_true")
    ap.add_argument("--duration", type=float, default=15)
    ap.add_argument("--kinds", default="single,buckets,layers,layers-pipelined")
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
    # the trace's real lengths, rounded up to a multiple of 8 (the plan takes up to 64 lengths;
    # its batches on cpu engines cost their real tokens)
    counts = {}
    for t in toks:
        b = (t + 7) // 8 * 8
        counts[b] = counts.get(b, 0) + 1
    hist = ",".join("%d:%.4f" % (b, c / len(toks)) for b, c in sorted(counts.items()))

    profile = os.path.join(a.out, "profile.json")
    la0 = load1()
    subprocess.run([hetserve, "profile", "--config", "configs/hybrid-cpu.yaml", "--shapes",
                    "1,2,4,8,16,32x16,32,128,256", "--cap-s", "0.3", "--quiet", "--out", profile],
                   check=True, stderr=subprocess.DEVNULL)
    lines = ["# plan predictions vs hetbench (bench/plan/check.py)", "",
             "profile: configs/hybrid-cpu.yaml, grid 1,2,4,8,16,32 x 16,32,128,256; load average %.2f before"
             % la0, "traffic: trace lengths (rounded up to 8): %s" % hist, ""]

    extra = []  # the calibration's hetserve plan options

    def plan(kind, rate, out):
        # "layers" and "modules": one batch at a time; "layers-pipelined": the pipelined split
        k = kind.split("-")
        opts = ["--kind", k[0]]
        if k[0] in ("layers", "modules"):
            opts += ["--pipeline", "yes" if k[1:] == ["pipelined"] else "no"]
        r = subprocess.run([hetserve, "plan", "--profile", profile, "--traffic",
                            "rate=%g;%s" % (rate, hist), "--slo", "1000", "--out", out] + opts +
                           extra, capture_output=True, text=True, check=True)
        return plan_row(r.stdout), r.stdout

    def busy(port):
        """Each engine's busy seconds so far, from /metrics."""
        import urllib.request
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
        out = {}
        for line in text.decode().splitlines():
            if line.startswith("hetserve_engine_busy_seconds_total{"):
                eng = line.split('engine="', 1)[1].split('"', 1)[0]
                out[eng] = out.get(eng, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def serve(cfg, rate, tag):
        """Serves cfg, sends the trace at rate: hetbench's summary, its CSV rows and each engine's
        busy share over the run."""
        srv = subprocess.Popen([hetserve, "serve", "--config", cfg, "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env=dict(os.environ, OMP_WAIT_POLICY="passive"))
        line = srv.stdout.readline()
        port = int(line.strip().rsplit(":", 1)[1])
        csv_path = os.path.join(a.out, "%s.csv" % tag)
        try:
            b0, t0 = busy(port), time.time()
            r = subprocess.run([hetbench, "--url", "http://127.0.0.1:%d" % port, "--texts",
                                os.path.join(trace, "trace.tsv"), "--rate", str(rate),
                                "--duration", str(a.duration), "--warmup", "3", "--json",
                                "--quiet", "--seed", "1", "--csv", csv_path],
                               capture_output=True, text=True, check=True)
            b1, t1 = busy(port), time.time()
        finally:
            srv.terminate()
            srv.wait(timeout=60)
        with open(os.path.join(a.out, "%s.hetbench.json" % tag), "w") as f:
            f.write(r.stdout)
        util = {e: (b1[e] - b0.get(e, 0.0)) / (t1 - t0) for e in b1}
        time.sleep(2)
        return json.loads(r.stdout), util

    single, _ = plan("single", 1, os.path.join(a.out, "probe.yaml"))
    cap = single["capacity"]
    hetsim = os.path.join(a.build, "hetsim")
    if not a.no_calibrate:
        # calibration: each engine of configs/hybrid-cpu.yaml alone (its cores, threads) serving
        # the whole length mix at 0.45 x capacity (the checks run at other loads), served and
        # simulated: its serving tax; the overhead: the mean over the two of measured - simulated
        # short-request P50 with the tax
        rate = round(0.45 * cap, 1)
        base = open("configs/hybrid-cpu.yaml").read().split("\nmodels:", 1)[0]
        notes, overheads = [], []
        for eng in ("cpu_a", "cpu_b"):
            calib = os.path.join(a.out, "calibration-%s.yaml" % eng)
            with open(calib, "w") as f:
                f.write(base + '\nmodels:\n  - path: "%s"\n    engine: %s\n' % (MODEL, eng))
            m, util = serve(calib, rate, "calibration-%s" % eng)

            def sim(opts):
                r = subprocess.run([hetsim, "--config", calib, "--profile", profile, "--texts",
                                    os.path.join(trace, "trace.tsv"), "--rate", str(rate),
                                    "--duration", str(a.duration), "--warmup", "3", "--classes",
                                    "short:32,long:512", "--json"] + opts,
                                   capture_output=True, text=True, check=True)
                return json.loads(r.stdout)

            s0 = sim([])
            u_sim = [e["utilization"] for e in s0["engines"] if e["engine"] == eng][0]
            tax = min(100.0, max(0.1, util.get(eng, 0) / u_sim)) if u_sim > 0 else 1.0
            s1 = sim(["--tax", "%s=%.3f" % (eng, tax)])
            short_p50 = m["classes"]["short"]["latency_ms"]["p50"]
            overheads.append(max(0.0, short_p50 - s1["classes"]["short"]["p50_ms"]))
            extra += ["--tax", "%s=%.3f" % (eng, tax)]
            notes.append("%s busy %.0f%% measured, %.0f%% simulated" % (eng, 100 * util.get(eng, 0),
                                                                       100 * u_sim))
        extra += ["--overhead-ms", "%.3f" % (sum(overheads) / len(overheads))]
        lines.append("calibration: each engine alone with the whole mix at %.1f requests/s: %s "
                     "-> %s" % (rate, "; ".join(notes), " ".join(extra)))
    lines += ["", "| load | plan | P50 pred | P50 meas | err | P99 pred | P99 meas | err | "
              "served/s pred | meas | load avg |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for load in (float(x) for x in a.loads.split(",")):
        rate = round(load * cap, 1)
        for kind in a.kinds.split(","):
            cfg = os.path.join(a.out, "%s-%g.yaml" % (kind, load))
            pred, text = plan(kind, rate, cfg)
            with open(os.path.join(a.out, "%s-%g.plan.txt" % (kind, load)), "w") as f:
                f.write(text)
            la_before = load1()
            m, _ = serve(cfg, rate, "%s-%g" % (kind, load))
            m = m["all"]
            err = lambda p, x: "%+.0f %%" % (100 * (p - x) / x) if x > 0 and p != float("inf") else "-"
            served = min(rate, pred["capacity"])
            lines.append("| %.2f (%.1f/s) | %s | %.1f | %.1f | %s | %.1f | %.1f | %s | %.1f | %.1f | "
                         "%.2f -> %.2f |" % (
                             load, rate, pred["name"], pred["p50"], m["latency_ms"]["p50"],
                             err(pred["p50"], m["latency_ms"]["p50"]), pred["p99"],
                             m["latency_ms"]["p99"], err(pred["p99"], m["latency_ms"]["p99"]),
                             served, m["rps"], la_before, load1()))
    lines += ["", "load: x the best single engine's predicted capacity (%.1f/s). err = (predicted - "
              "measured) / measured; measured latency is client-side." % cap]
    report = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
