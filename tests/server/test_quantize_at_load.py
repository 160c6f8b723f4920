# int8 that just works: a config with a cpu f32 and a cpu int8 lane on the default, unquantized
# model starts (models[].quantize: auto, the default): the server searches a quantization plan at
# load with the built-in calibration set, writes it next to the model (or under server.cache_dir
# when the folder is not writable), logs what it chose, and the lane check passes; a second start
# reuses the plan. A read-only folder without a cache folder, and a cache folder that cannot be
# made, are clear errors that leave no plan behind. The shared model folder is never written:
# each test serves a copy (hard links to the weights: the plan's files are new files, renamed in).
import json
import os
import shutil
import subprocess
import tempfile

import pytest

import hetserve_fixture
from hetserve_fixture import BINARY, MODEL, Server
from test_precision import CPU_HAS_INT8, LONG, two_lanes

pytestmark = pytest.mark.skipif(not CPU_HAS_INT8, reason="this CPU has no AVX-512 VNNI int8 path")


def model_copy(parent):
    """A copy of MODEL in parent/minilm: big files hard-linked, the rest copied."""
    out = os.path.join(parent, "minilm")
    os.makedirs(out)
    for root, dirs, files in os.walk(MODEL):
        rel = os.path.relpath(root, MODEL)
        dst = os.path.join(out, rel) if rel != "." else out
        os.makedirs(dst, exist_ok=True)
        for f in files:
            if f in ("quant.json", "quant.safetensors"):
                continue
            try:
                os.link(os.path.join(root, f), os.path.join(dst, f))
            except OSError:
                shutil.copy2(os.path.join(root, f), os.path.join(dst, f))
    assert not os.path.exists(os.path.join(out, "quant.json"))
    return out


def serves_both_lanes(s):
    st, h, body = s.post("/v1/embeddings", {"input": "where is the station?", "model": "minilm"})
    assert st == 200 and h["x-engine"] == "cpu_int8", (h, body)
    st, h, body = s.post("/v1/embeddings", {"input": LONG, "model": "minilm"})
    assert st == 200 and h["x-engine"] == "cpu_f32", (h, body)
    st, h, body = s.get("/metrics")
    assert 'hetserve_lane_check_pass{model="minilm",engine="cpu_int8",dtype="int8"} 1' in body.decode()
    st, h, body = s.get("/ready")
    assert st == 200 and b'"lanes":2' in body, body


def test_f32_and_int8_lanes_on_an_unquantized_folder_start_and_the_plan_is_reused(tmp_path):
    folder = model_copy(str(tmp_path))
    s = Server(two_lanes(folder), model=None)
    try:
        serves_both_lanes(s)
        log = s.stderr()
    finally:
        s.stop()
    assert "no int8 quantization plan in %s: searching one" % folder in log, log
    assert "int8 quantization plan made in " in log and "stages kept in f32" in log, log
    assert "cached in %s/quant.json" % folder in log, log
    plan = json.load(open(os.path.join(folder, "quant.json")))
    assert plan["format"] == "hetserve-quant" and plan["dtype"] == "int8" and plan["target_met"]
    assert not [f for f in os.listdir(folder) if ".tmp." in f]  # no temporary left
    # a second start finds the plan and searches nothing
    s = Server(two_lanes(folder), model=None)
    try:
        serves_both_lanes(s)
        log = s.stderr()
    finally:
        s.stop()
    assert "int8 lanes reuse the quantization plan in %s/quant.json (no search)" % folder in log, log
    assert "searching one" not in log and "plan made in" not in log, log


def under_another_user():
    """A prefix that runs a command where a folder without write permission is not writable
    (as root it would be): an unprivileged user namespace; None when there is no such way."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "--user", "true"], capture_output=True).returncode == 0:
        return [unshare, "--user"]
    return None


def serve_once(cfg_text, prefix, tmp):
    cfg = os.path.join(tmp, "c.yaml")
    with open(cfg, "w") as f:
        f.write(cfg_text)
    return subprocess.run(prefix + [BINARY, "serve", "--config", cfg, "--host", "127.0.0.1",
                                    "--port", "0"],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_WAIT_POLICY="passive"))


def test_read_only_folder_without_a_cache_folder_is_a_clear_error(tmp_path):
    prefix = under_another_user()
    if prefix is None:
        pytest.skip("running as root without user namespaces: no folder is read-only here")
    folder = model_copy(str(tmp_path))
    os.chmod(folder, 0o555)
    try:
        r = serve_once(two_lanes(folder), prefix, str(tmp_path))
    finally:
        os.chmod(folder, 0o755)
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr
    assert "quantization at load" in err and "its folder %s cannot hold" % folder in err, err
    assert "server.cache_dir" in err and "quantize: off" in err, err
    assert not os.path.exists(os.path.join(folder, "quant.json"))


def test_a_cache_folder_that_cannot_be_made_is_a_clear_error(tmp_path):
    prefix = under_another_user()
    if prefix is None:
        pytest.skip("running as root without user namespaces: no folder is read-only here")
    folder = model_copy(str(tmp_path))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    os.chmod(folder, 0o555)
    try:
        r = serve_once(two_lanes(folder, server="server:\n  cache_dir: \"%s/cache\"\n" % blocker),
                       prefix, str(tmp_path))
    finally:
        os.chmod(folder, 0o755)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cache folder %s/cache" % blocker in r.stderr and "cannot create" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(folder, "quant.json"))


def test_read_only_folder_with_a_cache_folder_quantizes_there_and_reuses_it(tmp_path, monkeypatch):
    prefix = under_another_user()
    if prefix is None:
        pytest.skip("running as root without user namespaces: no folder is read-only here")
    if prefix:  # the fixture starts BINARY: make that the binary run through the prefix
        wrapper = tmp_path / "hetserve"
        wrapper.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (" ".join(prefix), BINARY))
        wrapper.chmod(0o755)
        monkeypatch.setattr(hetserve_fixture, "BINARY", str(wrapper))
    folder = model_copy(str(tmp_path))
    cache = tmp_path / "cache"
    cfg = two_lanes(folder, server="server:\n  cache_dir: \"%s\"\n" % cache)
    os.chmod(folder, 0o555)
    try:
        s = Server(cfg, model=None)
        try:
            serves_both_lanes(s)
            log = s.stderr()
        finally:
            s.stop()
        assert "int8 quantization plan made in " in log, log
        made = [d for d in os.listdir(cache) if d.startswith("minilm-")]
        assert len(made) == 1, os.listdir(cache)
        assert "cached in %s/%s/quant.json" % (cache, made[0]) in log, log
        assert not os.path.exists(os.path.join(folder, "quant.json"))
        s = Server(cfg, model=None)
        try:
            serves_both_lanes(s)
            log = s.stderr()
        finally:
            s.stop()
        assert "reuse the quantization plan in %s/%s/quant.json" % (cache, made[0]) in log, log
        assert "plan made in" not in log, log
    finally:
        os.chmod(folder, 0o755)
