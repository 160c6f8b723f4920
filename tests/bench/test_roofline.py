"""The benchmark's roofline (issue 27): bench_peak prints the machine line and one peak per dtype
as JSON with the CPU engine's calls (run on a small shape: correctness of the output, never its
speed), and summarize_cpu.py turns engine rates into shares of their dtype's peak, in the table
and in cpu_summary.json (synthetic lines with known numbers)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.environ.get("HS_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
SUMMARIZE = os.path.join(ROOT, "bench", "summarize_cpu.py")
PEAK_BIN = os.environ.get("HS_BENCH_PEAK")


def test_bench_peak_prints_machine_and_every_dtype():
    if not PEAK_BIN:
        pytest.skip("HS_BENCH_PEAK not set (ctest sets it to the built bench_peak)")
    p = subprocess.run([PEAK_BIN, "--threads", "1", "--seconds", "0", "--size", "128,96,64"],
                       capture_output=True, text=True, timeout=60)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    assert lines and "machine" in lines[0], p.stdout + p.stderr
    m = lines[0]
    assert m["cpus"] >= 1 and m["threads"] == 1 and m["onednn"].count(".") == 2
    assert {"avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16",
            "avx_vnni"} <= set(m["isa"])
    peaks = {d["peak"]: d for d in lines[1:]}
    # f32 always runs; bf16 / int8 run wherever oneDNN has a kernel (a reference one at worst)
    assert "f32" in peaks, p.stderr
    for d in peaks.values():
        assert (d["m"], d["n"], d["k"]) == (128, 96, 64)
        assert d["gflops"] >= d["median_gflops"] > 0 and d["iters"] >= 3
    assert p.returncode == 0, p.stderr


def test_bad_size_is_refused():
    if not PEAK_BIN:
        pytest.skip("HS_BENCH_PEAK not set")
    p = subprocess.run([PEAK_BIN, "--size", "0,1,1"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "usage" in p.stderr


def test_summary_shares_of_peak(tmp_path):
    lines = [
        {"round": 1, "machine": "Test CPU", "cpus": 2, "threads": 2, "onednn": "2.6.3",
         "onednn_isa": "avx512_core_bf16", "isa": {"avx512f": True, "amx_tile": False}},
        {"round": 1, "peak": "f32", "call": "dnnl_sgemm N,T", "m": 8, "n": 8, "k": 8, "threads": 2,
         "fast": True, "gflops": 100.0, "median_gflops": 90.0, "iters": 3},
        {"round": 2, "peak": "f32", "call": "dnnl_sgemm N,T", "m": 8, "n": 8, "k": 8, "threads": 2,
         "fast": True, "gflops": 80.0, "median_gflops": 70.0, "iters": 3},  # the best one counts
        {"round": 1, "peak": "int8", "call": "dnnl matmul", "m": 8, "n": 8, "k": 8, "threads": 2,
         "fast": True, "gflops": 400.0, "median_gflops": 300.0, "iters": 3},
    ]
    for eng, dt, gf in (("hetserve-cpu", "f32", 50.0), ("hetserve-cpu", "int8", 100.0),
                        ("onnxruntime", "int8", 40.0), ("hetserve-cpu", "bf16", 60.0)):
        lines.append({"round": 1, "engine": eng, "dtype": dt, "batch": 32, "seq": 128, "ms": 10.0,
                      "seq_per_s": 3200.0, "gflops": gf})
    src = tmp_path / "cpu_vs_ort.jsonl"
    src.write_text("".join(json.dumps(l) + "\n" for l in lines))
    p = subprocess.run([sys.executable, SUMMARIZE, str(src)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "CPU: Test CPU, 2 logical CPUs; ISA: avx512f;" in p.stdout
    assert "peak  f32:   100.0 GFLOP/s best" in p.stdout
    table = [l for l in p.stdout.splitlines() if " GF/s " in l or "  hetserve " in l or "  ORT " in l]

    def row(label):
        return next(l for l in table if label + " " in l)

    assert "50.0%" in row("hetserve f32") and "25.0%" in row("hetserve int8")
    assert "10.0%" in row("ORT int8")
    s = json.loads((tmp_path / "cpu_summary.json").read_text())
    assert s["machine"]["machine"] == "Test CPU" and s["peaks"]["f32"]["gflops"] == 100.0
    eng = {(e["engine"], e["dtype"]): e for e in s["shapes"][0]["engines"]}
    assert eng[("hetserve-cpu", "f32")]["peak_share"] == 0.5
    assert eng[("onnxruntime", "int8")]["peak_share"] == 0.1
    assert eng[("hetserve-cpu", "bf16")]["peak_share"] is None  # no bf16 peak measured
