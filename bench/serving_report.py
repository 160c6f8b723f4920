#!/usr/bin/env python3
"""Report of bench/serving.sh: capacity vs the engine alone, goodput under overload, and server
overhead at low load.

usage: serving_report.py OUTDIR   (the folder serving.sh wrote: *.json summaries, *.csv rows)
Prints plain-text tables; standard library only.
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hsbench import fmt, load_json, ok, csv_rows, pct  # noqa: E402


def engine_rows(out):
    """bench_cpu's JSON lines: {(batch, seq): seq_per_s} for the hetserve CPU engine."""
    seq = {}
    try:
        with open(os.path.join(out, "engine.jsonl")) as f:
            for line in f:
                d = json.loads(line)
                if d.get("engine") == "hetserve-cpu":
                    seq[(d["batch"], d["seq"])] = d["seq_per_s"]
    except (OSError, ValueError, KeyError):
        pass
    return seq


def not_ok(s):
    return (s["status_429"] + s["status_504"] + s["other_http"] + s["conn_errors"] + s["timeouts"]
            + s["dropped"])


def capacity(out):
    """Closed-loop capacity of A and B, and A against the engine alone at the same shapes."""
    cap_a = load_json(os.path.join(out, "A-capacity.json"))
    cap_b = load_json(os.path.join(out, "B-capacity.json"))
    print("== Capacity (closed loop), short texts 8-32 words; A = defaults (window 2000 us, "
          "batch_max 32), B = no batching (window 0, batch_max 1)")
    if not cap_a:
        print("A's capacity run is missing")
        return None
    ra = cap_a["all"]["rps"]
    rb = cap_b["all"]["rps"] if cap_b else float("nan")
    print("A %.1f req/s (96 clients, P99 %.0f ms), B %.1f req/s (4 clients), A/B %s"
          % (ra, cap_a["all"]["latency_ms"]["p99"], rb, fmt(ra / rb if rb == rb and rb else
                                                           float("nan"), "%.2fx")))
    seq = engine_rows(out)
    parts = []
    for L in (16, 32):
        if (1, L) in seq and (32, L) in seq and seq[(1, L)] > 0:
            parts.append("seq %d: %.0f -> %.0f seq/s (%.2fx)" % (L, seq[(1, L)], seq[(32, L)],
                                                                  seq[(32, L)] / seq[(1, L)]))
    if parts:
        print("engine alone, batch 1 -> 32 (what batching can gain at most): " + "; ".join(parts))
    try:
        with open(os.path.join(out, "engine-mean-len.txt")) as f:
            mean = int(f.read().strip())
    except (OSError, ValueError):
        mean = None
    try:
        with open(os.path.join(out, "engine-mean-batch.txt")) as f:
            bmean = int(f.read().strip())
    except (OSError, ValueError):
        bmean = None
    if mean and bmean and (bmean, mean) in seq:
        eng = seq[(bmean, mean)]
        share = ra / eng if eng else float("nan")
        print("engine alone at A's mean batch, %d x %d tokens (the same shapes): %.1f seq/s; A's "
              "capacity is %s of it (target >= 90 %%: %s)"
              % (bmean, mean, eng, fmt(100 * share, "%.0f %%"), "yes" if share >= 0.9 else "no"))
    if mean and (32, mean) in seq:
        eng = seq[(32, mean)]
        share = ra / eng if eng else float("nan")
        print("engine alone at full batches, 32 x %d tokens (the ceiling): %.1f seq/s; A's "
              "capacity is %s of it" % (mean, eng, fmt(100 * share, "%.0f %%")))
    return ra


def metric_snapshot(path):
    """hetserve_prediction_* samples of one /metrics snapshot: (buckets {le: cum}, count, logsum)."""
    buckets, count, logsum = {}, 0.0, 0.0
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("hetserve_prediction_ratio_bucket{"):
                    le = line.split('le="', 1)[1].split('"', 1)[0]
                    buckets[le] = buckets.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
                elif line.startswith("hetserve_prediction_ratio_count{"):
                    count += float(line.rsplit(" ", 1)[1])
                elif line.startswith("hetserve_prediction_log_error_sum{"):
                    logsum += float(line.rsplit(" ", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return buckets, count, logsum


def prediction(out, tag):
    """Admission's prediction over one run: share within [0.8, 1.25] of what happened, share
    under 2x, and the mean |ln(observed/predicted)|, from the /metrics deltas."""
    a = metric_snapshot(os.path.join(out, tag + ".before.metrics"))
    b = metric_snapshot(os.path.join(out, tag + ".after.metrics"))
    if not a or not b:
        return "-", "-", "-"
    n = b[1] - a[1]
    if n <= 0:
        return "-", "-", "-"

    def d(le):
        return b[0].get(le, 0.0) - a[0].get(le, 0.0)
    within = (d("1.25") - d("0.8")) / n
    under2 = (d("2") - d("0.5")) / n
    return "%.0f %%" % (100 * within), "%.0f %%" % (100 * under2), "%.2f" % ((b[2] - a[2]) / n)


def overload(out, cap):
    print()
    print("== Overload (open loop, Poisson), A with its defaults: goodput = 2xx/s; ok/cap against "
          "the mean of the capacity runs before and after the point (x cap: of the first)")
    hdr = ("offered/s", "x cap", "ok/s", "ok/cap", "P50 ms", "P99 ms", "max ms", "429", "504",
           "other", "pred 0.8-1.25", "pred 0.5-2", "|ln err|", "target")
    print("%-9s %5s %7s %6s %7s %7s %7s %6s %5s %5s %13s %10s %8s  %s" % hdr)
    tags = sorted(((float(os.path.basename(p)[len("A-rate-"):-len(".json")]), "A-rate")
                   for p in glob.glob(os.path.join(out, "A-rate-*.json"))))
    # capacity before and after each rate point (A-capacity, A-capacity-1, ...)
    caps = [cap]
    k = 1
    while True:
        j = load_json(os.path.join(out, "A-capacity-%d.json" % k))
        if not j:
            break
        caps.append(j["all"]["rps"])
        k += 1
    if len(caps) > 1:
        print("capacity runs around the points (closed loop, 96 clients): %s req/s"
              % ", ".join("%.0f" % c for c in caps))
    tags += [(float(os.path.basename(p)[len("A-busy-"):-len(".json")]), "A-busy")
             for p in glob.glob(os.path.join(out, "A-busy-*.json"))]
    met = []
    p99 = []  # (config, offered, P99 ms): the table bench/plot.sh p99 draws
    point = 0
    for r, kind in tags:
        tag = "%s-%.1f" % (kind, r)
        j = load_json(os.path.join(out, tag + ".json"))
        if not j:
            continue
        a = j["all"]
        lat = a.get("latency_ms") or {}
        ref = cap
        if kind == "A-rate" and point + 1 < len(caps):
            ref = (caps[point] + caps[point + 1]) / 2
        if kind == "A-rate":
            point += 1
        x = r / cap if cap else float("nan")
        good = a["rps"] / ref if ref else float("nan")
        # at or past capacity the target is 90 % of capacity; below it, 90 % of what was offered
        need = 0.9 * min(ref, r) / ref if ref else float("nan")
        hit = good >= need
        other = a["other_http"] + a["conn_errors"] + a["timeouts"] + a["dropped"]
        w, u, e = prediction(out, tag)
        comp = []
        if kind == "A-busy":
            comp = [row.get("st_compute_ms")
                    for row in ok(csv_rows(os.path.join(out, tag + ".csv")))]
            comp = [c for c in comp if c is not None]
            # judged on the stall only: a core taken by the busy process is capacity gone
            hit = bool(comp) and max(comp) < 350
        if kind == "A-rate":
            met.append(hit)
        if lat.get("p99") is not None:
            p99.append(("A" if kind == "A-rate" else "A-busy", r, lat["p99"]))
        print("%-9s %5s %7.1f %5.0f%% %7s %7s %7s %6d %5d %5d %13s %10s %8s  %s"
              % (("%.1f" % r) + ("*" if kind == "A-busy" else ""), fmt(x, "%.1f"), a["rps"],
                 100 * good, fmt(lat.get("p50"), "%.0f"), fmt(lat.get("p99"), "%.0f"),
                 fmt(lat.get("max"), "%.0f"), a["status_429"], a["status_504"], other, w, u, e,
                 "yes" if hit else "no"))
        if kind == "A-busy":
            if comp:
                print("  * with a busy process sharing the cores: batch compute P50 %.1f ms, P99 "
                      "%.1f ms, max %.1f ms (the old OpenMP stall made every batch ~350 ms; "
                      "target: no batch at 350 ms; its goodput is not judged, the busy process "
                      "takes capacity)" % (pct(comp, 50), pct(comp, 99), max(comp)))
    with open(os.path.join(out, "p99.csv"), "w") as f:
        f.write("config,offered_rps,p99_ms\n")
        f.writelines("%s,%.3f,%.3f\n" % (c, r, v) for c, r, v in p99)
    if met:
        print("target (goodput >= 90 %% of capacity at every overload point): %s"
              % ("REACHED" if all(met) else "NOT reached"))
    print("(P50/P99/max over 2xx; 429 = refused at admission with Retry-After; 504 = deadline; "
          "other = other HTTP errors, client drops/timeouts/connection errors. pred: share of 2xx "
          "whose time in the scheduler was within 0.8-1.25x / 0.5-2x of admission's prediction.)")


def overhead(out):
    print()
    print("== Server overhead, short query at low load (per request, P50 over 2xx)")
    hdr = ("config", "n", "e2e ms", "engine ms", "overhead ms", "ovh/e2e", "client lag",
           "client-srv ms", "queue ms", "srv stages ms", "(total-eng)/total", "target <=3%")
    print("%-6s %5s %8s %9s %11s %8s %10s %13s %9s %13s %17s  %s" % hdr)
    for name in ("B", "A"):
        rows = ok(csv_rows(os.path.join(out, "%s-low.csv" % name)))
        rows = [r for r in rows if r.get("st_total_ms") is not None
                and r.get("st_compute_ms") is not None]
        if not rows:
            print("%-6s no rows (Server-Timing total/compute missing?)" % name)
            continue
        e2e, eng, ovh, share, lag, cli, que, stg, srv_share = [], [], [], [], [], [], [], [], []
        for r in rows:
            engine = r["st_compute_ms"] + (r.get("st_copy_in_ms") or 0) + (r.get("st_copy_out_ms") or 0)
            lat, tot, q = r["latency_ms"], r["st_total_ms"], r.get("st_queue_ms") or 0.0
            e2e.append(lat)
            eng.append(engine)
            ovh.append(lat - engine)
            share.append((lat - engine) / lat if lat > 0 else None)
            late = r.get("late_ms") or 0.0
            lag.append(late)
            cli.append(lat - late - tot)
            que.append(q)
            stg.append(tot - q - engine)
            srv_share.append((tot - engine) / tot if tot > 0 else None)
        s = pct(share, 50)
        print("%-6s %5d %8.3f %9.3f %11.3f %7.1f%% %10.3f %13.3f %9.3f %13.3f %16.1f%%  %s"
              % (name, len(rows), pct(e2e, 50), pct(eng, 50), pct(ovh, 50), 100 * s,
                 pct(lag, 50), pct(cli, 50), pct(que, 50), pct(stg, 50),
                 100 * pct(srv_share, 50), "yes" if s <= 0.03 else "no"))
    print("overhead = client end-to-end - (copy_in + compute + copy_out) = client lag (the "
          "open-loop client handing a request to libcurl after its intended time: its poll "
          "wakes in whole ms) + client-srv (HTTP outside the server's total span, loopback, "
          "libcurl) + queue (incl. the batching window on A) + server stages (parse, tokenize, "
          "route, enqueue, post, response).")


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    try:
        with open(os.path.join(out, "load.txt")) as f:
            sys.stdout.write(f.read())
    except OSError:
        pass
    cap = capacity(out)
    overload(out, cap)
    overhead(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
