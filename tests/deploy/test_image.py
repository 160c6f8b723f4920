"""The container image `make image` builds (scripts/image, deploy/Dockerfile), run with podman:
it runs as the non-root user, serves the default model, answers the probes the manifests use
(/ready for startup and readiness, /health for liveness, deploy/k8s/base/deployment.yaml) and
stops cleanly on SIGTERM (podman stop), exit status 0 after draining.

Skipped with one line where podman is absent or the image was not built (make image builds it:
about 10 minutes on 2 cores, most of it compiling hetserve inside the build stage)."""
import http.client
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = os.environ.get("IMAGE", "localhost/hetserve:latest")


def podman_env():
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "image"), "--env"],
                         capture_output=True, text=True, check=True).stdout.strip()
    k, _, v = out.partition("=")
    return dict(os.environ, **{k: v})


def podman(env, *args, check=True, timeout=120):
    # from /: `podman kube play` builds an image from a folder of the image's name in its
    # working directory (ctest runs in the build folder, where build/hetserve is the binary)
    r = subprocess.run(["podman", *args], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd="/")
    if check and r.returncode != 0:
        raise AssertionError("podman %s: exit %d\n%s%s" % (" ".join(args), r.returncode,
                                                         r.stdout[-2000:], r.stderr[-3000:]))
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST" if body else "GET", path, body=json.dumps(body) if body else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def test_image_runs_serves_and_stops():
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (make image installs it and builds the image)")
    env = podman_env()
    if podman(env, "image", "exists", IMAGE, check=False).returncode != 0:
        pytest.skip("no image %s: make image builds it" % IMAGE)
    port = free_port()
    name = "hetserve-test-%d" % os.getpid()
    podman(env, "run", "-d", "--name", name, "-p", "127.0.0.1:%d:8080" % port, IMAGE)
    try:
        user = podman(env, "exec", name, "id", "-u").stdout.strip()
        assert user == "10001", user
        deadline = time.monotonic() + 120
        while True:
            try:
                if get(port, "/ready")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, podman(env, "logs", name, check=False).stderr
            time.sleep(0.5)
        assert get(port, "/health")[0] == 200
        st, data = get(port, "/v1/embeddings", {"input": ["hello world", "a second text"]})
        assert st == 200, data
        doc = json.loads(data)
        assert [len(d["embedding"]) for d in doc["data"]] == [384, 384]
        # SIGTERM: drains and exits 0
        podman(env, "stop", "--time", "60", name)
        state = podman(env, "inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        logs = podman(env, "logs", name).stderr
        assert state == "0", (state, logs[-2000:])
        assert "draining" in logs and "drained" in logs, logs[-2000:]
    finally:
        podman(env, "rm", "-f", name, check=False)
