# Black-box tests of hetsim: a quick real profile of one CPU engine (or, where the outcome must
# not depend on this machine's speed, a synthetic one) plus a synthetic "gpu" lane drive runs
# (texts, lengths and a capture trace), the utilization CSV, the search for the
# cheapest fleet meeting an SLO (its choice checked against every fleet it printed), and clear
# errors for bad input.
import json
import os
import subprocess

import pytest

from hetserve_fixture import BINARY, MODEL

HETSIM = os.path.join(os.path.dirname(BINARY), "hetsim")
ENV = dict(os.environ, OMP_WAIT_POLICY="passive")
CONFIG = """engines:
  - {name: cpu, kind: cpu, threads: 1}
  - {name: gpu, kind: cuda}
models:
  - path: "%s"
    engines: [cpu, gpu]
routes:
  - {name: short, engines: [cpu], failover: {route: long, ratio_max: 0.3}}
  - {name: long, engines: [gpu], failover: {route: short, ratio_max: 0.3}}
router:
  rules:
    - {tokens_max: 32, route: short}
  default_route: long
""" % MODEL
PRICES = {"cpu": {"usd_per_hour": 0.1, "source": "test"},
          "gpu": {"usd_per_hour": 2.0, "source": "test"}}


def synthetic_lane(engine, kind, fixed_ms, per_token_ms):
    """A profile of one lane whose batches take fixed + per_token x batch x bucket ms."""
    cells = [{"batch": b, "bucket": s, "stages": {},
              "whole": {"compute": {"median_ms": fixed_ms + per_token_ms * b * s},
                        "copy_in": {"median_ms": 0}, "copy_out": {"median_ms": 0}}}
             for b in (1, 8, 32) for s in (16, 64, 256)]
    return {"format": "hetserve-profile", "version": 1, "lanes": [
        {"model": "all-MiniLM-L6-v2", "engine": engine, "kind": kind, "dtype": "f32",
         "status": "ok", "cells": cells}]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    if not os.path.exists(HETSIM):
        pytest.skip("no %s" % HETSIM)
    d = tmp_path_factory.mktemp("sim")
    (d / "fleet.yaml").write_text(CONFIG)
    cpu_only = d / "cpu.yaml"
    cpu_only.write_text("engines:\n  - {name: cpu, kind: cpu, threads: 1}\nmodels:\n"
                        "  - {path: \"%s\", engine: cpu}\n" % MODEL)
    r = subprocess.run([BINARY, "profile", "--config", str(cpu_only), "--quick", "--no-gemm",
                        "--shapes", "1,8x16,64", "--quiet", "--out", str(d / "cpu.json")],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    (d / "gpu.json").write_text(json.dumps(synthetic_lane("gpu", "cuda", 1.0, 0.001)))
    # a CPU lane of known speed, for tests whose outcome must not depend on this machine's (or
    # an instrumented build's) measured one
    (d / "cpu-fixed.json").write_text(json.dumps(synthetic_lane("cpu", "cpu", 0.5, 0.005)))
    (d / "prices.json").write_text(json.dumps(PRICES))
    (d / "texts.tsv").write_text("short\tthe cat sat on the mat\nshort\ta short one\n"
                                 "long\t" + " ".join(["word"] * 150) + "\n")
    return d


def hetsim(files, *args, check=True, cpu="cpu.json"):
    cmd = [HETSIM, "--config", str(files / "fleet.yaml"), "--profile", str(files / cpu),
           "--profile", str(files / "gpu.json")] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300, cwd=files)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_run_texts_json_and_util_csv(files):
    r = hetsim(files, "--texts", "texts.tsv", "--rate", "50", "--duration", "10", "--warmup",
               "1", "--json", "--util-csv", "util.csv", "--prices", "prices.json",
               cpu="cpu-fixed.json")
    j = json.loads(r.stdout)
    c = j["classes"]
    assert set(c) == {"short", "long", "all"}
    assert c["all"]["n"] == c["short"]["n"] + c["long"]["n"] > 300
    assert c["all"]["ok"] == c["all"]["n"]  # light load: every request answered
    assert 0 < c["short"]["p50_ms"] <= c["short"]["p99_ms"]
    eng = {e["engine"]: e for e in j["engines"]}
    assert eng["cpu"]["batches"] > 0 and eng["gpu"]["batches"] > 0
    assert 0 < eng["cpu"]["utilization"] < 1
    assert j["usd_per_hour"] == pytest.approx(2.1)
    rows = (files / "util.csv").read_text().splitlines()
    assert rows[0] == "t_s,cpu,gpu"
    assert len(rows) >= 10


def test_lengths_and_copies(files):
    one = json.loads(hetsim(files, "--lengths", "short=80:8-32,long=20:100-200", "--rate", "400",
                            "--duration", "5", "--json").stdout)
    four = json.loads(hetsim(files, "--lengths", "short=80:8-32,long=20:100-200", "--rate", "400",
                             "--duration", "5", "--copies", "cpu=4", "--json").stdout)
    cpu1 = [e for e in one["engines"] if e["engine"] == "cpu"][0]
    cpu4 = [e for e in four["engines"] if e["engine"] == "cpu"][0]
    assert cpu4["copies"] == 4
    # four CPU workers serve the short class faster than one
    assert four["classes"]["short"]["p99_ms"] < one["classes"]["short"]["p99_ms"]
    assert cpu4["utilization"] < cpu1["utilization"]


def test_trace(files):
    lines = []
    for i in range(200):
        lines.append(json.dumps({"v": 1, "id": i + 1, "offset_ms": i * 10.0,
                                 "endpoint": "/v1/embeddings", "status": 200,
                                 "priority": "interactive", "timeout_ms": 5000,
                                 "inputs": 2, "tokens": [12, 20 if i % 5 else 180]}))
    (files / "cap.jsonl").write_text("\n".join(lines) + "\n")
    j = json.loads(hetsim(files, "--trace", "cap.jsonl", "--speed", "2", "--json",
                          cpu="cpu-fixed.json").stdout)
    assert j["classes"]["all"]["n"] == 200
    assert j["classes"]["all"]["ok"] == 200
    assert j["span_s"] < 1.2  # 2 s of arrivals at twice the speed
    # classes by the longest input
    j = json.loads(hetsim(files, "--trace", "cap.jsonl", "--classes", "short:32,long:512",
                          "--json", cpu="cpu-fixed.json").stdout)
    assert j["classes"]["short"]["n"] == 160 and j["classes"]["long"]["n"] == 40


def test_search_picks_cheapest_meeting_slo(files):
    r = hetsim(files, "--lengths", "short=80:8-32,long=20:100-200", "--rate", "300",
               "--duration", "5", "--search", "cpu=0..3,gpu=0..1", "--slo", "short=40,long=400",
               "--prices", "prices.json", "--json")
    j = json.loads(r.stdout)
    fleets = j["fleets"]
    assert len(fleets) == 7  # 4 x 2 minus the empty fleet
    meeting = [f for f in fleets if f["slo_met"]]
    assert meeting
    best = min(meeting, key=lambda f: f["usd_per_hour"])
    assert j["cheapest"] == best["fleet"]
    assert j["cheapest_usd_per_hour"] == pytest.approx(best["usd_per_hour"])
    for f in fleets:  # the verdict follows the printed P99s and answered shares
        for cls, target in (("short", 40), ("long", 400)):
            c = f["classes"][cls]
            if f["slo_met"]:
                assert c["p99_ms"] <= target and c["ok"] >= 0.99 * c["n"]
    # an SLO nothing meets: exit 1 and says so
    r = hetsim(files, "--lengths", "short=80:8-32", "--rate", "300", "--duration", "3",
               "--search", "cpu=1..1,gpu=0..0", "--slo", "short=0.01", "--prices", "prices.json",
               check=False)
    assert r.returncode == 1
    assert "no fleet in the ranges meets the SLO" in r.stdout


@pytest.mark.parametrize("args,msg", [
    (["--rate", "10", "--duration", "1"], "exactly one of --texts, --lengths, --trace"),
    (["--lengths", "1:8-32", "--duration", "1"], "--rate > 0"),
    (["--lengths", "1:8-32", "--rate", "1", "--duration", "1", "--copies", "tpu=2"], "--copies"),
    (["--lengths", "1:8-32", "--rate", "1", "--duration", "1", "--tax", "cpu=0"], "--tax"),
    (["--lengths", "1:8-32", "--rate", "1", "--duration", "1", "--search", "cpu=1..2"],
     "--search needs --slo and --prices"),
    (["--lengths", "1:8-32", "--rate", "1", "--duration", "1", "--slo", "medium=5"], "--slo"),
    (["--trace", "missing.jsonl"], "cannot open"),
    (["--lengths", "1:8-32", "--rate", "1", "--duration", "1", "--classes", "a:40,b:20"],
     "--classes"),
])
def test_bad_input(files, args, msg):
    r = hetsim(files, *args, check=False)
    assert r.returncode == 2
    assert msg in r.stderr


def test_engine_without_costs_and_bad_prices(files):
    r = subprocess.run([HETSIM, "--config", str(files / "fleet.yaml"), "--profile",
                        str(files / "cpu.json"), "--lengths", "1:8-32", "--rate", "1",
                        "--duration", "1"], capture_output=True, text=True, env=ENV, cwd=files)
    assert r.returncode == 2 and "engine gpu has no measured costs" in r.stderr
    (files / "bad-prices.json").write_text(json.dumps({"cpu": {"usd_per_hour": 1}}))
    r = hetsim(files, "--lengths", "1:8-32", "--rate", "1", "--duration", "1", "--prices",
               "bad-prices.json", check=False)
    assert r.returncode == 2 and "needs {\"usd_per_hour\"" in r.stderr
    (files / "bad.jsonl").write_text('{"v":1,"offset_ms":"x"}\n')
    r = hetsim(files, "--trace", "bad.jsonl", check=False)
    assert r.returncode == 2 and "bad.jsonl:1:" in r.stderr


def test_tenants_fair_shares(files):
    """Three tenants of weight 1, a offering 10x what b and c offer (--tenants a:10,b,c) at about
    3x the lane's capacity: under the lanes' fair order (scheduler.fair, the default) b and c keep
    >= 90 % of their goodput alone; in arrival order (fair: false) they do not. A synthetic lane
    (2 ms + 0.02 ms per padded token), so the outcome does not depend on this machine."""
    (files / "slow.json").write_text(json.dumps(synthetic_lane("cpu", "cpu", 2.0, 0.02)))
    runs = {}
    for fair in ("true", "false"):
        cfg = files / ("fair-%s.yaml" % fair)
        cfg.write_text("engines:\n  - {name: cpu, kind: cpu, threads: 1}\nmodels:\n"
                       "  - {path: \"%s\", engine: cpu}\nscheduler:\n  fair: %s\n" % (MODEL, fair))
        for name, rate, tenants in (("flood", 2400, "a:10,b,c"), ("alone", 400, "b,c")):
            r = subprocess.run([HETSIM, "--config", str(cfg), "--profile", str(files / "slow.json"),
                                "--lengths", "s=3:8-30,l=1:60-250", "--rate", str(rate),
                                "--duration", "6", "--warmup", "1", "--tenants", tenants,
                                "--json"], capture_output=True, text=True, env=ENV, timeout=300)
            assert r.returncode == 0, r.stderr
            runs[fair, name] = json.loads(r.stdout)
    for fair in ("true", "false"):
        j = runs[fair, "flood"]
        ten = j["tenants"]
        assert set(ten) == {"a", "b", "c"}
        assert sum(t["n"] for t in ten.values()) == j["classes"]["all"]["n"]
        assert 0.75 < ten["a"]["n"] / j["classes"]["all"]["n"] < 0.92  # a's share: 10 of 12
        assert ten["a"]["shed"] > 0.5 * ten["a"]["n"]  # the flood is refused the rest
    for t in ("b", "c"):
        alone = runs["true", "alone"]["tenants"][t]
        assert alone["ok"] == alone["n"]  # alone, under their share: all answered
        fair, fifo = (runs[f, "flood"]["tenants"][t] for f in ("true", "false"))
        assert fair["ok"] / fair["n"] >= 0.9 * alone["ok"] / alone["n"], (t, fair)
        assert fifo["ok"] / fifo["n"] < 0.7, (t, fifo)  # arrival order: the flood's fate


def test_tenants_share_inflight(files):
    """auth.share_inflight in the simulator, the server's rule (hs_share_verdict): the same flood
    as above with --share-inflight 4 against 0 (off) on the fair lane. The flood's refusals are
    then share refusals (the server's 429s), which keep the queue short: b's and c's P99 fall
    (in the simulator as on the server, bench/TENANTS.md), and they keep >= 90 % of their
    goodput. The config's key is read when the flag is absent. The lanes' over_share is off here:
    this measures admission's rule alone (on this padded lane with a 2 ms fixed cost, over_share's
    short batches for the flood cost it throughput, bench/TENANTS.md "Fourth pass")."""
    (files / "slow.json").write_text(json.dumps(synthetic_lane("cpu", "cpu", 2.0, 0.02)))
    runs = {}
    for share in (0, 4):
        cfg = files / ("share-%d.yaml" % share)
        cfg.write_text("engines:\n  - {name: cpu, kind: cpu, threads: 1}\nmodels:\n"
                       "  - {path: \"%s\", engine: cpu}\nauth:\n  share_inflight: %d\n"
                       "scheduler:\n  over_share: 0\n" % (MODEL, share))
        r = subprocess.run([HETSIM, "--config", str(cfg), "--profile", str(files / "slow.json"),
                            "--lengths", "s=3:8-30,l=1:60-250", "--rate", "2400", "--duration",
                            "6", "--warmup", "1", "--tenants", "a:10,b,c", "--json"],
                           capture_output=True, text=True, env=ENV, timeout=300)
        assert r.returncode == 0, r.stderr
        runs[share] = json.loads(r.stdout)["tenants"]
    off, on = runs[0], runs[4]
    assert all(t["share_refused"] == 0 for t in off.values())
    assert on["a"]["share_refused"] > 0.5 * on["a"]["n"], on["a"]
    for t in ("b", "c"):
        assert on[t]["ok"] >= 0.9 * on[t]["n"], (t, on[t])
        assert on[t]["p99_ms"] < 0.6 * off[t]["p99_ms"], (t, on[t], off[t])
    # the flag overrides the config's key
    r = subprocess.run([HETSIM, "--config", str(files / "share-4.yaml"), "--profile",
                        str(files / "slow.json"), "--lengths", "s=3:8-30,l=1:60-250", "--rate",
                        "2400", "--duration", "6", "--warmup", "1", "--tenants", "a:10,b,c",
                        "--share-inflight", "0", "--json"],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tenants"]["a"]["share_refused"] == 0


@pytest.mark.parametrize("spec,msg", [("a:0,b", "SHARE must be a number > 0"),
                                      ("a,a", "expected a new NAME"),
                                      ("a:1:x", "WEIGHT must be a number > 0")])
def test_bad_tenants(files, spec, msg):
    r = hetsim(files, "--lengths", "s=1:8-16", "--rate", "10", "--duration", "1", "--tenants",
               spec, check=False)
    assert r.returncode != 0 and msg in r.stderr, r.stderr
