"""bench/plot.sh draws PNGs from hetbench output: two small synthetic hetbench --csv files (two
classes, warm-up and failed rows among them) give a latency CDF; serving_report.py's p99.csv
and hybrid report.py's results.csv shapes give P99 vs load. Each must be a real PNG of some
size; hetsim's utilization CSV gives utilization over time. Skipped with one line when gnuplot is
missing (apt-get install gnuplot-nox)."""
import os
import random
import shutil
import subprocess

import pytest

ROOT = os.environ.get("HS_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
PLOT = os.path.join(ROOT, "bench", "plot.sh")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

if shutil.which("gnuplot") is None:
    pytest.skip("gnuplot not installed (apt-get install gnuplot-nox)", allow_module_level=True)


def hetbench_csv(path, seed, scale):
    rng = random.Random(seed)
    with open(path, "w") as f:
        f.write("seq,send_ms,latency_ms,class,priority,items,status,tokens,warmup,late_ms,"
                "st_compute_ms\n")
        for i in range(400):
            cls = "short" if i % 5 else "long"
            lat = rng.lognormvariate(0, 0.5) * scale * (1 if cls == "short" else 8)
            status = "429" if i % 37 == 0 else ("timeout" if i % 53 == 0 else "200")
            warm = 1 if i < 20 else 0
            f.write("%d,%.3f,%.3f,%s,,1,%s,%d,%d,0.100,%.3f\n"
                    % (i, i * 2.0, lat, cls, status, 20, warm, lat / 2))
        f.write("# summary,requests=400,ok=380,rps=99.0,p99_ms=12.0,\n")


def plot(*args):
    p = subprocess.run(["bash", PLOT] + list(args), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p


def check_png(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == PNG_MAGIC, "%s is not a PNG" % path
    assert len(data) > 5000, "%s is only %d bytes" % (path, len(data))


def test_latency_cdf(tmp_path):
    a, b = tmp_path / "A-rate-100.0.csv", tmp_path / "A-rate-200.0.csv"
    hetbench_csv(a, 1, 5.0)
    hetbench_csv(b, 2, 20.0)
    out = tmp_path / "cdf.png"
    plot("cdf", str(out), str(a), str(b))
    check_png(out)


def test_p99_vs_load(tmp_path):
    serving = tmp_path / "p99.csv"
    serving.write_text("config,offered_rps,p99_ms\nA,490.5,146.8\nA,817.6,1147.3\n"
                       "A,1635.1,1398.7\nA-busy,817.6,1317.8\n")
    hybrid = tmp_path / "results.csv"
    hybrid.write_text("config,offered_rps,ok_rps,errors,short_p50_ms,short_p99_ms,long_p50_ms,"
                      "long_p99_ms,sustained,routing,util_cpu01\n"
                      "a,5.000,5.0,0,10.0,30.0,80.0,120.0,1,server,0.2\n"
                      "a,15.000,15.0,0,12.0,60.0,90.0,200.0,0,server,0.6\n"
                      "b,5.000,5.0,0,8.0,12.0,100.0,150.0,1,server,\n"
                      "b,15.000,15.0,0,9.0,20.0,120.0,260.0,1,server,\n")
    for table in (serving, hybrid):
        out = tmp_path / (table.stem + ".png")
        plot("p99", str(out), str(table))
        check_png(out)


def test_utilization_over_time(tmp_path):
    util = tmp_path / "util.csv"  # hetsim --util-csv's shape
    rows = ["t_s,cpu_a,cpu_b/0"] + ["%d.000,%.4f,%.4f" % (t, 0.2 + 0.01 * (t % 7), 0.5 + 0.03 * (t % 5))
                                    for t in range(30)]
    util.write_text("\n".join(rows) + "\n")
    out = tmp_path / "util.png"
    plot("util", str(out), str(util))
    check_png(out)
    bad = tmp_path / "bad.csv"
    bad.write_text("time,x\n0,1\n")
    p = subprocess.run(["bash", PLOT, "util", str(tmp_path / "y.png"), str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "header must start with t_s" in p.stderr


def test_bad_input_fails(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("name,rate\nA,1\n")
    p = subprocess.run(["bash", PLOT, "p99", str(tmp_path / "x.png"), str(table)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "header needs" in p.stderr
    assert not (tmp_path / "x.png").exists()
