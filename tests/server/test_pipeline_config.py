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
