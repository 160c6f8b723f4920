# pipelines[] in the config (no models or OpenVINO needed): `config --check` refuses an unknown
# engine, a missing required key and an unknown kind with the key path; `serve` refuses a
# pipeline whose graphs are placed on the CPU engine, by capability (graph_onnx), naming the
# pipeline and the engine.
import subprocess

from hetserve_fixture import BINARY, MODEL

BASE = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1
models:
  - path: "%s"
pipelines:
  - name: ocr
""" % MODEL


def check(tmp_path, extra):
    p = tmp_path / "c.yaml"
    p.write_text(BASE + extra)
    return subprocess.run([BINARY, "config", "--check", str(p)], capture_output=True, text=True)


def test_check_refuses_with_key_paths(tmp_path):
    ok = "    det: d.onnx\n    rec: r.onnx\n    dict: d.txt\n"
    r = check(tmp_path, ok)
    assert r.returncode == 0, r.stderr
    assert "pipelines:" in r.stdout and "rec_images: 4" in r.stdout
    r = check(tmp_path, ok + "    det_engine: npu9\n")
    assert r.returncode != 0 and "pipelines[0].det_engine" in r.stderr and "npu9" in r.stderr
    r = check(tmp_path, "    rec: r.onnx\n    dict: d.txt\n")
    assert r.returncode != 0 and "pipelines[0]" in r.stderr and "det" in r.stderr
    r = check(tmp_path, ok + "    kind: yolo\n")
    assert r.returncode != 0 and "pipelines[0].kind" in r.stderr
    r = check(tmp_path, ok + "    queue_max: 0\n")
    assert r.returncode != 0 and "pipelines[0].queue_max" in r.stderr


def test_cpu_engine_refused_by_capability(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(BASE + "    det: d.onnx\n    rec: r.onnx\n    dict: d.txt\n    det_engine: cpu0\n")
    r = subprocess.run([BINARY, "serve", "--config", str(p), "--port", "0"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1
    assert "pipelines[0] (ocr)" in r.stderr
    assert "engine cpu0 (kind cpu) does not run ONNX graphs (capability graph_onnx)" in r.stderr


def test_stage_keys_checked_with_key_paths(tmp_path):
    ok = "    det: d.onnx\n    rec: r.onnx\n    dict: d.txt\n"
    st = ("    stages:\n      det: {timeout_ms: 500}\n"
          "      rec: {timeout_ms: 200, batch_fixed: 6, shapes: [320, 640],\n"
          "            fallback: {engines: [%s], ratio_max: %s}}\n")
    r = check(tmp_path, ok + st % ("cpu0", "0.3"))
    # the CPU engine has no graph_onnx: refused for the fallback by capability
    assert r.returncode != 0
    assert "pipelines[0].stages.rec.fallback.engines[0]" in r.stderr, r.stderr
    assert "graph_onnx" in r.stderr
    r = check(tmp_path, ok + st % ("npu9", "0.3"))
    assert r.returncode != 0
    assert "pipelines[0].stages.rec.fallback.engines[0]: no engine named 'npu9'" in r.stderr
    for bad in ("0", "1.5", "-0.1"):
        r = check(tmp_path, ok + st % ("cpu0", bad))
        assert r.returncode != 0 and "pipelines[0].stages.rec.fallback.ratio_max" in r.stderr, (
            bad, r.stderr)
    r = check(tmp_path, ok + "    stages:\n      rec: {batch_fixed: 65}\n")
    assert r.returncode != 0 and "pipelines[0].stages.rec.batch_fixed" in r.stderr
    r = check(tmp_path, ok + "    stages:\n      rec: {shapes: [4]}\n")
    assert r.returncode != 0 and "pipelines[0].stages.rec.shapes" in r.stderr
    r = check(tmp_path, ok + "    stages:\n      rec: {timeout: 5}\n")
    assert r.returncode != 0 and "pipelines[0].stages.rec" in r.stderr and "timeout" in r.stderr
    r = check(tmp_path, ok + "    stages:\n      det: {batch_fixed: 4}\n")  # rec only
    assert r.returncode != 0 and "pipelines[0].stages.det" in r.stderr
    # the accepted keys print back
    r = check(tmp_path, ok + "    stages:\n      rec: {timeout_ms: 200, batch_fixed: 6, "
              "shapes: [320, 640]}\n")
    assert r.returncode == 0, r.stderr
    assert "batch_fixed: 6" in r.stdout and "shapes: [320, 640]" in r.stdout
    r = subprocess.run([BINARY, "config", "--print-defaults"], capture_output=True, text=True)
    assert "fallback: {engines: [], ratio_max: 0.3}" in r.stdout
