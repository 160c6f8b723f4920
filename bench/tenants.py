#!/usr/bin/env python3
"""Fair shares between tenants under a flood, measured briefly.

One `hetserve serve` on the default model with three tenants of equal weight. Tenants b and c
send open-loop at --rate requests/s each; phase "unloaded": b and c alone; phase "flood": tenant
a adds --flood concurrent closed-loop clients. Run for each variant of --variants: the lanes'
fair order on or off (scheduler.fair) and admission's share_inflight (auth.share_inflight, 0 =
off), "fair,share" items, e.g. the default "1,0 0,0 0,4": fair queues alone, neither, the
admission-only share of before; a third field 1 ("1,4,1") turns on scheduler.preempt (the
lane's preempting slot), whose counters the --relative flood phase prints. Prints, per phase and tenant, goodput (answered 200 / sent) and
P50 / P99 latency; exits 0 (a shared machine's timings are reported, not gated).

With --hetbench RATE the load is hetbench's instead (open loop, Poisson arrivals at RATE req/s,
as three tenants: a 10x the share of b and of c, `hetbench --tenant`), one phase per variant:
hetbench's per-tenant rows are printed as they come.

With --relative L (and --hetbench, whose rate is then ignored) the load follows the machine of
the moment: per variant, on the same server, hetbench first measures its capacity C (3 s
overloaded, one tenant), then b and c alone at L x C/3 each (their share is C/3: "unloaded"),
then the flood: a at 10 x C/3 (10x its share) with b and c as before; it prints b's and c's
goodput and P99 under the flood against their unloaded ones (the issue's target: goodput >= 90 %,
P99 <= 1.2x). On a shared machine C moves between phases too: read it as noisy.

With --breakdown the server writes its trace (server.trace_file) and, per tenant, the P50 / P99
of each server-side stage of the 2xx requests is printed (queue: enqueued to batched; compute;
total: received to sent), and the stages of the slowest 1 % of each tenant's requests on
average, which says where a light tenant's P99 comes from: waiting in the lane, the batch it
ran in, or outside the scheduler (parse, tokenize, send: the HTTP threads on a loaded machine).

usage: bench/tenants.py [--seconds S] [--rate R] [--flood N] [--variants "F,S[,P] ..."]
                        [--hetbench RATE] [--batch-max N] [--queue-max N] [--fair-batch-ms MS]
                        [--breakdown] [--relative L]
"""
import argparse
import bisect
import hashlib
import http.client
import json
import os
import shutil
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


def hetbench(binary, port, rate, seconds, tenants, keys):
    """One open-loop hetbench run: {"throughput": req/s, tenant: (n, 2xx, p50, p99, goodput)}."""
    cmd = [os.path.join(os.path.dirname(binary), "hetbench"), "--url",
           "http://127.0.0.1:%d" % port, "--endpoint", "tei", "--rate", "%.1f" % rate,
           "--duration", str(seconds), "--warmup", "1", "--quiet"]
    for name, w in tenants:
        cmd += ["--tenant", "%s:%g=%s" % (name, w, keys[name])]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    res = {"throughput": 0.0, "text": out}
    for line in out.splitlines():
        f = line.split()
        if line.startswith("throughput"):
            res["throughput"] = float(f[1])
        elif len(f) >= 7 and f[0] == "tenant" and f[1] in keys and not f[1].endswith(":"):
            res[f[1]] = [int(f[2]), int(f[3]), float(f[4]), float(f[6]), 0.0]
        elif len(f) >= 6 and f[0] == "tenant" and f[1].rstrip(":") in res and "goodput" in line:
            res[f[1].rstrip(":")][4] = float(f[-2])
    return res


def relative(binary, port, keys, seconds, light):
    cap = hetbench(binary, port, 1000, 3, [("b", 1)], keys)["throughput"]
    share = cap / 3
    print("  capacity %.0f req/s (share %.0f); b and c at %.2f of their share, a at 10x its own"
          % (cap, share, light))
    alone = hetbench(binary, port, 2 * light * share, seconds, [("b", 1), ("c", 1)], keys)
    before = counters(port)
    pre_before = metrics(port, "hetserve_preempt_")
    flood = hetbench(binary, port, (10 + 2 * light) * share, seconds,
                     [("a", 10 / light), ("b", 1), ("c", 1)], keys)
    print("  flood: throughput %.0f req/s; a goodput %.0f %%, P50 %.0f ms, P99 %.0f ms"
          % (flood["throughput"], flood.get("a", [0] * 5)[4], flood.get("a", [0] * 5)[2],
             flood.get("a", [0] * 5)[3]))
    for t in "bc":
        u, f = alone.get(t), flood.get(t)
        if not u or not f:
            print("  tenant %s: no numbers (hetbench said: %r)" % (t, flood["text"][-300:]))
            continue
        print("  tenant %s: unloaded goodput %.0f %%, P50 %.1f, P99 %.1f ms; flood goodput %.0f %%"
              " (%.0f %% of unloaded), P50 %.1f, P99 %.1f ms (%.2fx unloaded)"
              % (t, u[4], u[2], u[3], f[4], 100 * f[4] / u[4] if u[4] else 0, f[2], f[3],
                 f[3] / u[3] if u[3] else float("nan")))
    refusals(port, before)
    pre = metrics(port, "hetserve_preempt_")
    if pre:
        d = {k: v - pre_before.get(k, 0) for k, v in pre.items()}
        n = d.get("hetserve_preempt_batches_total", 0)
        print("  preempting slot: %d batches in the flood, paused the others %.0f ms in all "
              "(longest %.1f ms since start), waited for the stage in flight %.1f ms on "
              "average (longest %.1f ms)"
              % (n, 1e3 * d.get("hetserve_preempt_paused_seconds_total", 0),
                 1e3 * pre.get("hetserve_preempt_paused_max_seconds", 0),
                 1e3 * d.get("hetserve_preempt_wait_seconds_total", 0) / n if n else 0,
                 1e3 * pre.get("hetserve_preempt_wait_max_seconds", 0)))


def metrics(port, prefix):
    """The /metrics series starting with prefix, summed over their labels."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    c.close()
    out = {}
    for ln in body.splitlines():
        if ln.startswith(prefix):
            name = ln.split("{", 1)[0].split(" ", 1)[0]
            out[name] = out.get(name, 0) + float(ln.rsplit(" ", 1)[1])
    return out


def counters(port):
    """The refusal counters of /metrics: admission's share (auth.share_inflight), the routes'."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    c.close()
    keep = ("hetserve_tenant_shared_total", "hetserve_route_shed_total",
            "hetserve_tenant_limited_total")
    return {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1])
            for ln in body.splitlines() if ln.startswith(keep)}


def refusals(port, since=None):
    """Where the 429s came from (since: counters() before the phase)."""
    got = ["%s %d" % (k, v - (since or {}).get(k, 0)) for k, v in counters(port).items()
           if v - (since or {}).get(k, 0) > 0]
    print("  429s by cause: " + ("; ".join(got) if got else "none counted"))


def breakdown(path):
    """Per tenant: P50 / P99 of each request stage from the server's trace (2xx only)."""
    try:
        with open(path) as f:
            ev = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        print("  breakdown: no trace (%s)" % e)
        return
    open_at, req, formed, batches = {}, {}, [], []
    for e in ev:
        if e.get("ph") == "X" and e.get("name", "").startswith("batch "):
            formed.append(e["ts"])
            batches.append((e["dur"] / 1000.0, e.get("args", {}).get("sequences", 0),
                            e.get("args", {}).get("padded_tokens", 0)))
        if e.get("cat") != "request":
            continue
        key = (e["id"], e["name"])
        if e["ph"] == "b":
            open_at[key] = e["ts"]
            if e["name"].startswith("request "):
                req[e["id"]] = {"tenant": e.get("args", {}).get("tenant", "-"),
                                "status": e.get("args", {}).get("status", 0), "st": {}}
        elif e["ph"] == "e" and key in open_at and e["id"] in req:
            b = open_at.pop(key)
            name = "total" if e["name"].startswith("request ") else e["name"]
            req[e["id"]]["st"][name] = (e["ts"] - b) / 1000.0
            if name == "queue":
                req[e["id"]]["queued"] = (b, e["ts"])
    formed.sort()
    if batches:  # the lane's batches over the whole run (--relative: capacity, unloaded, flood)
        def pct(v, q):
            v = sorted(v)
            return v[min(len(v) - 1, int(q * len(v)))]
        d, n, t = ([b[i] for b in batches] for i in range(3))
        print("  batches (whole run) %d, ms P50/P90/P99 %.1f/%.1f/%.1f, sequences P50/P99 %d/%d, padded "
              "tokens P50/P99 %d/%d" % (len(batches), pct(d, .5), pct(d, .9), pct(d, .99),
                                          pct(n, .5), pct(n, .99), pct(t, .5), pct(t, .99)))
    by, passed = {}, {}
    for r in req.values():
        if 200 <= r["status"] < 300:
            by.setdefault(r["tenant"], []).append(r["st"])
            if "queued" in r:  # batches formed while it waited, its own left out
                b, e = r["queued"]
                n = bisect.bisect_left(formed, e - 1) - bisect.bisect_right(formed, b)
                passed.setdefault(r["tenant"], []).append(max(0, n))
    stages = ["queue", "copy_in", "compute", "post", "send", "total"]
    for t in sorted(by):
        rs = sorted(by[t], key=lambda st: st.get("total", 0))
        row = []
        for s in stages:
            v = sorted(st.get(s, 0) for st in rs)
            row.append("%s %.1f/%.1f" % (s, v[len(v) // 2], v[min(len(v) - 1, int(.99 * len(v)))]))
        tail = rs[int(.99 * len(rs)):] or rs[-1:]
        pre = ["parse", "tokenize", "route", "enqueue"]
        avg = {s: sum(st.get(s, 0) for st in tail) / len(tail) for s in pre + stages}
        print("  trace    tenant %s (%d 2xx), ms P50/P99: %s" % (t, len(rs), ", ".join(row)))
        pb = passed.get(t, [0])
        print("           batches formed while it was queued (its own left out): 0: %.0f %%, "
              "1: %.0f %%, 2+: %.0f %%, max %d"
              % (100.0 * pb.count(0) / len(pb), 100.0 * pb.count(1) / len(pb),
                 100.0 * sum(1 for x in pb if x >= 2) / len(pb), max(pb)))
        print("           its slowest 1 %%, mean ms: before the lane %.1f, queue %.1f, compute "
              "%.1f, post+send %.1f, total %.1f"
              % (sum(avg[s] for s in pre), avg["queue"], avg["copy_in"] + avg["compute"],
                 avg["post"] + avg["send"], avg["total"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rate", type=float, default=8)
    ap.add_argument("--flood", type=int, default=16)
    ap.add_argument("--variants", default="1,0 0,0 0,4",
                    help="\"fair,share[,preempt[,over]]\" items: scheduler.fair 1/0, "
                         "auth.share_inflight, 1 = scheduler.preempt, scheduler.over_share")
    ap.add_argument("--batch-max", type=int, default=0, help="batching.batch_max (0: default)")
    ap.add_argument("--queue-max", type=int, default=0, help="limits.queue_max (0: default)")
    ap.add_argument("--fair-batch-ms", type=int, default=0, help="scheduler.fair_batch_ms")
    ap.add_argument("--hetbench", type=float, default=0,
                    help="load from hetbench at this rate, a:10, b:1, c:1 (0: Python clients)")
    ap.add_argument("--relative", type=float, default=0,
                    help="with --hetbench: b and c at this fraction of their share of the "
                         "measured capacity, a at 10x its share; unloaded vs flood")
    ap.add_argument("--buckets", default="",
                    help="batching.buckets, e.g. 256 (one queue: a CPU lane runs ragged batches)")
    ap.add_argument("--keep-trace", default="",
                    help="with --breakdown: copy each variant's trace to PREFIX.N.json")
    ap.add_argument("--breakdown", action="store_true",
                    help="per-tenant stage times from the server's trace")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "hetserve"))
    a = ap.parse_args()
    keys = {n: "k-%s-%s" % (n, os.urandom(8).hex()) for n in "abc"}
    for variant_no, v in enumerate(a.variants.split()):
        f = [float(x) for x in v.split(",")]
        fair, share, preempt = int(f[0]), int(f[1]), int(f[2]) if len(f) > 2 else 0
        over = f[3] if len(f) > 3 else None  # None: the server's default
        cfg = ("engines:\n  - name: cpu0\n    kind: cpu\n    threads: 2\nlimits:\n"
               "  timeout_ms: 10000\n")
        trace = None
        if a.queue_max:
            cfg += "  queue_max: %d\n" % a.queue_max
        if a.batch_max or a.buckets:
            cfg += "batching:\n"
        if a.batch_max:
            cfg += "  batch_max: %d\n" % a.batch_max
        if a.buckets:
            cfg += "  buckets: [%s]\n" % a.buckets
        cfg += ("scheduler:\n  fair: %s\n  fair_batch_ms: %d\n  preempt: %s\n%s"
                "auth:\n  share_inflight: %d\n  keys:\n"
                % ("true" if fair else "false", a.fair_batch_ms, "true" if preempt else "false",
                   "" if over is None else "  over_share: %g\n" % over, share))
        cfg += "".join("    - sha256: %s\n      tenant: %s\n"
                       % (hashlib.sha256(k.encode()).hexdigest(), n) for n, k in keys.items())
        with tempfile.TemporaryDirectory() as tmp:
            if a.breakdown:
                trace = os.path.join(tmp, "trace.json")
                cfg += "server:\n  trace_file: %s\n" % trace
            p, port = start(a.binary, cfg, tmp)
            try:
                if a.hetbench and a.relative > 0:
                    print("scheduler.fair %s, auth.share_inflight %d, fair_batch_ms %d, "
                          "preempt %s, over_share %s:"
                          % ("true" if fair else "false", share, a.fair_batch_ms,
                             "true" if preempt else "false",
                             "default" if over is None else "%g" % over))
                    relative(a.binary, port, keys, a.seconds, a.relative)
                    continue
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
                    refusals(port)
                    continue
                phase(port, keys, 1, a.rate, 0)  # warm-up
                print("scheduler.fair %s, auth.share_inflight %d:"
                      % ("true" if fair else "false", share))
                report("unloaded", phase(port, keys, a.seconds, a.rate, 0), a.seconds)
                report("flood", phase(port, keys, a.seconds, a.rate, a.flood), a.seconds)
            finally:
                p.terminate()
                p.wait()
                if trace:  # here: the hetbench phase leaves the try by continue
                    breakdown(trace)
                    if a.keep_trace:
                        shutil.copy(trace, "%s.%d.json" % (a.keep_trace, variant_no))


if __name__ == "__main__":
    main()
