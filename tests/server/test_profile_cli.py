# Black-box tests of `hetserve profile` (the JSON it writes, docs/PROFILE.md) and of the memory
# plan as `hetserve config --check` applies it.
import json
import os
import subprocess

from hetserve_fixture import BINARY, MODEL

ENV = dict(os.environ, OMP_WAIT_POLICY="passive")


def test_quick_profile_writes_the_documented_json(tmp_path):
    out = tmp_path / "p.json"
    r = subprocess.run([BINARY, "profile", "--model", MODEL, "--quick", "--out", str(out)],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "memory plan (margin 10 %)" in r.stderr
    d = json.loads(out.read_text())
    assert d["format"] == "hetserve-profile" and d["version"] == 1
    for key in ("created", "config", "machine", "settings", "gemm_peaks", "memory_plan", "lanes",
                "elapsed_s"):
        assert key in d, key
    assert d["memory_plan"]["fits"] is True
    assert d["settings"]["batches"] == [1, 4] and d["settings"]["buckets"] == [16, 32]
    (lane,) = d["lanes"]
    assert lane["status"] == "ok" and lane["engine"] == "cpu0" and lane["dtype"] == "f32"
    assert len(lane["cells"]) == 4
    for cell in lane["cells"]:
        assert set(cell["stages"]) == {"embed", "attn", "ffn", "pool", "normalize"}
        for kind in cell["stages"].values():
            for series in ("compute", "sync", "copy_in", "copy_out"):
                assert kind[series]["n"] >= 3
        assert cell["whole"]["compute"]["median_ms"] > 0


def test_usage_errors():
    r = subprocess.run([BINARY, "profile", "--shapes", "1,2"], capture_output=True, text=True)
    assert r.returncode == 2 and "--shapes" in r.stderr
    r = subprocess.run([BINARY, "profile", "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2


def test_config_check_refuses_a_plan_that_does_not_fit(tmp_path):
    cfg = tmp_path / "small.yaml"
    cfg.write_text("engines:\n  - {name: tiny, kind: cpu, memory_mb: 16}\n"
                   "models:\n  - {path: \"%s\"}\n" % MODEL)
    r = subprocess.run([BINARY, "config", "--check", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "memory plan: engine tiny needs" in r.stderr and "but has 16 MB" in r.stderr, r.stderr
    r = subprocess.run([BINARY, "serve", "--config", str(cfg), "--port", "0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "memory plan: engine tiny needs" in r.stderr, r.stderr
    cfg.write_text("engines:\n  - {name: roomy, kind: cpu, memory_mb: 4096}\n"
                   "models:\n  - {path: \"%s\"}\n" % MODEL)
    r = subprocess.run([BINARY, "config", "--check", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "engine roomy needs" in r.stderr and "limit 4.0 GB" in r.stderr


def test_serve_seeds_its_service_times_from_a_profile(tmp_path):
    """scheduler.profile: the lanes start from the measured costs (logged per lane), the server
    serves; a profile that cannot be read refuses the start with its reason."""
    from hetserve_fixture import Server
    prof = tmp_path / "p.json"
    r = subprocess.run([BINARY, "profile", "--model", MODEL, "--quick", "--out", str(prof),
                        "--quiet"], capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    s = Server("engines:\n  - name: cpu0\n    kind: cpu\nscheduler:\n  profile: %s\n" % prof)
    try:
        assert s.post("/embed", {"inputs": "seeded"})[0] == 200
        assert "bucket(s) seeded from" in s.stderr()
    finally:
        s.stop()
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "hetserve-profile", "version": 1}')
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engines:\n  - name: cpu0\n    kind: cpu\nscheduler:\n  profile: %s\n" % bad)
    r = subprocess.run([BINARY, "serve", "--model", MODEL, "--config", str(cfg), "--port", "0"],
                       capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode != 0 and "bad.json" in r.stderr, r.stderr
