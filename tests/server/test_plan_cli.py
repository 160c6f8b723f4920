# Black-box tests of `hetserve plan`: from a quick profile of two CPU engines, a traffic
# description and a P99 objective it prints the chosen plan beside the alternatives and writes a
# configuration that `config --check` accepts and `serve` serves, for every kind of plan.
import os
import subprocess

import pytest

from hetserve_fixture import BINARY, MODEL, Server

ENV = dict(os.environ, OMP_WAIT_POLICY="passive")
BASE = """engines:
  - {name: cpu_a, kind: cpu, threads: 1, cores: [0]}
  - {name: cpu_b, kind: cpu, threads: 1, cores: [1]}
models:
  - path: "%s"
    engines: [cpu_a, cpu_b]
""" % MODEL
# a light load and a loose objective: every build meets them, an instrumented one (whose quick
# profile is several times slower) included
TRAFFIC = "rate=4;12:0.6,40:0.3,120:0.1"


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    base = d / "base.yaml"
    base.write_text(BASE)
    out = d / "p.json"
    r = subprocess.run([BINARY, "profile", "--config", str(base), "--quick", "--no-gemm",
                        "--quiet", "--out", str(out)], capture_output=True, text=True, env=ENV,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def plan(profile, tmp_path, *extra):
    out = tmp_path / "plan.yaml"
    r = subprocess.run([BINARY, "plan", "--profile", str(profile), "--traffic", TRAFFIC,
                        "--slo", "5000", "--out", str(out)] + list(extra),
                       capture_output=True, text=True, env=ENV, timeout=900)
    return r, out


def test_prints_the_choice_beside_the_alternatives(profile, tmp_path):
    r, out = plan(profile, tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("traffic: 4.0 requests/s, lengths 12:60% 40:30% 120:10%")
    chosen = [l for l in lines if l.startswith("* ")]
    assert len(chosen) == 1
    for alt in ("all on cpu_a", "all on cpu_b", "tokens on cpu_", "layers 0-",
                "attention on cpu_"):
        assert any(alt in l for l in lines), (alt, r.stdout)
    # each split both ways: one batch at a time, and pipelined (a busy share per engine)
    for alt in ("layers 0-", "attention on cpu_"):
        rows = [l for l in lines if alt in l]
        assert any("pipelined" in l for l in rows) and any("pipelined" not in l for l in rows), \
            r.stdout
    piped = [l for l in lines if "pipelined" in l and "%" in l]
    assert all(l.split()[-4].endswith("%") for l in piped), piped
    assert "chosen: " in r.stdout and " meets 5000.0 ms with " in r.stdout
    assert out.read_text().startswith("# written by hetserve plan from ")


@pytest.mark.parametrize("kind,expect", [
    ("single", "engine: cpu_"),
    ("buckets", "tokens_max: "),
    ("layers", "placement: {layers: [{engine: cpu_"),
    ("modules", "modules: {attention: cpu_"),
    ("layers --pipeline yes", "pipeline: true}"),
    ("modules --pipeline no", "pipeline: false}"),
])
def test_every_kind_of_plan_writes_a_config_serve_runs(profile, tmp_path, kind, expect):
    r, out = plan(profile, tmp_path, "--kind", *kind.split())
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert expect in text, text
    chosen = [l for l in r.stdout.splitlines() if l.startswith("* ")][0]
    if "--pipeline" in kind:
        assert ("pipelined" in chosen) == ("pipeline yes" in kind), chosen
    kind = kind.split()[0]
    chk = subprocess.run([BINARY, "config", "--check", str(out)], capture_output=True, text=True)
    assert chk.returncode == 0, chk.stderr
    srv = Server(text, model=None)
    try:
        status, hdrs, body = srv.post("/v1/embeddings", {"input": ["hello", "a planned lane"]})
        assert status == 200 and len(body["data"]) == 2, body
        if kind in ("layers", "modules"):
            assert "boundary_copy" in hdrs["server-timing"]
    finally:
        srv.stop()


def test_usage_and_input_errors(profile, tmp_path):
    r = subprocess.run([BINARY, "plan", "--profile", str(profile)], capture_output=True, text=True)
    assert r.returncode == 2 and "required" in r.stderr
    r = subprocess.run([BINARY, "plan", "--profile", str(profile), "--traffic", "rate=x",
                        "--slo", "50"], capture_output=True, text=True)
    assert r.returncode == 2 and "traffic: rate" in r.stderr
    r = subprocess.run([BINARY, "plan", "--profile", str(profile), "--traffic", TRAFFIC,
                        "--slo", "50", "--kind", "diagonal"], capture_output=True, text=True)
    assert r.returncode == 2 and "--kind" in r.stderr
    r = subprocess.run([BINARY, "plan", "--profile", str(profile), "--traffic", TRAFFIC,
                        "--slo", "50", "--pipeline", "maybe"], capture_output=True, text=True)
    assert r.returncode == 2 and "--pipeline 'maybe' (any | yes | no)" in r.stderr, r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "hetserve-profile", "version": 1, "lanes": [{"model": 3}]}')
    r = subprocess.run([BINARY, "plan", "--profile", str(bad), "--traffic", TRAFFIC,
                        "--slo", "50"], capture_output=True, text=True)
    assert r.returncode == 1 and "lanes[0].model: expected a string" in r.stderr, r.stderr


def test_a_captured_trace_is_traffic(profile, tmp_path):
    trace = tmp_path / "trace.txt"
    trace.write_text("".join("%.3f %d\n" % (i * 0.05, 10 if i % 3 else 100) for i in range(201)))
    out = tmp_path / "t.yaml"
    r = subprocess.run([BINARY, "plan", "--profile", str(profile), "--traffic", str(trace),
                        "--slo", "500", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("traffic: 20.0 requests/s, lengths 16:67% 128:33%"), r.stdout


def fixed_profile(tmp_path):
    """A synthetic profile of known speed, so that outcomes do not depend on this machine's speed
    or an instrumented build's: cpu_a, a batch of b x s taking 1 ms + 0.01 ms per token."""
    import json
    cells = [{"batch": b, "bucket": s, "stages": {},
              "whole": {"compute": {"median_ms": 1.0 + 0.01 * b * s},
                        "copy_in": {"median_ms": 0}, "copy_out": {"median_ms": 0}}}
             for b in (1, 8, 32) for s in (16, 32, 64, 128, 256)]
    prof = tmp_path / "fixed.json"
    prof.write_text(json.dumps({"format": "hetserve-profile", "version": 1, "lanes": [
        {"model": "all-MiniLM-L6-v2", "engine": "cpu_a", "kind": "cpu", "dtype": "f32",
         "status": "ok", "cells": cells}]}))
    base = tmp_path / "base.yaml"
    base.write_text(BASE)
    return prof, base


def test_capacity_of_a_cpu_engine_follows_real_tokens(tmp_path):
    """A cpu engine computes ragged batches: 17-token requests, padded to the same 32-token bucket
    as 32-token ones, cost it fewer tokens (between its 16- and 32-token times), so its predicted
    capacity is higher (padded, the two would be equal)."""
    prof, base = fixed_profile(tmp_path)

    def capacity(length):
        r = subprocess.run([BINARY, "plan", "--profile", str(prof), "--config", str(base),
                            "--traffic", "rate=1;%d:1" % length, "--slo", "500", "--out",
                            str(tmp_path / "c.yaml")], capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stderr
        row = [l for l in r.stdout.splitlines() if "all on cpu_a" in l][0]
        return float(row.replace("*", " ").split()[6])
    # full batches of 32: 32 x 32 tokens take 11.24 ms; at 17 real tokens, between the 16- and
    # 32-token buckets' times (6.12 and 11.24 ms): 6.44 ms
    assert abs(capacity(32) - 32 / 11.24e-3) < 1
    assert abs(capacity(17) - 32 / 6.44e-3) < 1


def test_batch_sizes_per_bucket(tmp_path):
    """Near its capacity, one queue of 80 % short and 20 % 256-token requests waits less behind
    smaller long batches: the plan caps the padded tokens per batch, says so, and writes the cap
    as the engine's batch_max_tokens; at a light load it keeps the configuration's."""
    prof, base = fixed_profile(tmp_path)

    def plan_at(rate):
        out = tmp_path / ("p%d.yaml" % rate)
        r = subprocess.run([BINARY, "plan", "--profile", str(prof), "--config", str(base),
                            "--traffic", "rate=%d;16:0.8,256:0.2" % rate, "--slo", "1000",
                            "--kind", "single", "--out", str(out)], capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, r.stderr
        return [l for l in r.stdout.splitlines() if l.startswith("* ")][0], out.read_text()
    row, text = plan_at(1350)
    assert "batch_max_tokens " in row, row
    cap = int(row.rsplit(" ", 1)[1])
    assert cap in (1024, 2048, 4096), row
    assert "batch_max_tokens: %d " % cap in text
    chk = subprocess.run([BINARY, "config", "--check", str(tmp_path / "p1350.yaml")],
                         capture_output=True, text=True)
    assert chk.returncode == 0, chk.stderr
    row, text = plan_at(100)
    assert "batch_max_tokens" not in row, row


def test_a_capture_of_a_served_run_is_traffic(tmp_path):
    """The JSONL the server writes with server.capture is planning traffic as it is: its
    arrivals, token lengths, endpoints and priorities (planned on the synthetic profile, which
    keeps the plan quick in instrumented builds too)."""
    import json
    profile, base = fixed_profile(tmp_path)
    cap = tmp_path / "capture.jsonl"
    s = Server(BASE + "server:\n  capture: {file: \"%s\"}\n" % cap, model=None)
    try:
        for i in range(12):
            st, _, _ = s.post("/v1/embeddings", {"input": ["hello world", "a second text " * 5]})
            assert st == 200
            st, _, _ = s.post("/embed", {"inputs": "short"}, headers={"X-Priority": "batch"})
            assert st == 200
        st, _, _ = s.post("/embed", {"inputs": 5})  # refused before tokenizing: skipped
        assert st == 400
    finally:
        s.stop()
    lines = cap.read_text().splitlines()
    assert len(lines) == 25 and all(json.loads(l)["v"] == 1 for l in lines)
    out = tmp_path / "c.yaml"
    r = subprocess.run([BINARY, "plan", "--profile", str(profile), "--config", str(base),
                        "--traffic", str(cap), "--slo", "5000", "--out", str(out)],
                       capture_output=True, text=True, env=ENV, timeout=900)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("traffic: ") and " sequences/s (capture " in first, first
    assert "24 requests, 36 sequences" in first, first
    assert "/v1/embeddings 12 /embed 12; priority batch 12; skipped 1)" in first, first
    assert "lengths 16:67% 32:33%" in first, first
    chk = subprocess.run([BINARY, "config", "--check", str(out)], capture_output=True, text=True)
    assert chk.returncode == 0, chk.stderr
    # a broken line is refused with its file and line number
    bad = tmp_path / "bad.jsonl"
    broken = json.loads(lines[1])
    broken["tokens"][0] = 1
    bad.write_text(lines[0] + "\n" + json.dumps(broken) + "\n")
    r = subprocess.run([BINARY, "plan", "--profile", str(profile), "--traffic", str(bad),
                        "--slo", "500"], capture_output=True, text=True)
    assert r.returncode == 2 and "bad.jsonl:2: " in r.stderr and "tokens[0]" in r.stderr, r.stderr
