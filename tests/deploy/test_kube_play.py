"""The rendered Kustomize manifests of a CPU worker pool and the router, run with `podman kube
play` (the closest thing to a cluster a single machine has), and a request routed through the
router pod to the worker pod.

What podman kube play (4.3) does not implement, and how the test stands in for it:
  - Service (ClusterIP, the headless workers Service and its DNS name): there is no cluster DNS,
    so the router's `dns:` name for the CPU pool's workers is given the worker pod's address with
    a hostAliases entry added to the rendered router Deployment;
  - HorizontalPodAutoscaler, PodDisruptionBudget, ServiceAccount: accepted and ignored;
  - the probes become podman healthchecks, which need systemd (absent here): they do not run, the
    test calls /ready itself;
  - a containerPort is published on the host at the same port: the test sets each Deployment's
    hostPort to a free port, so that two pods (and other servers on the machine) do not collide.
The GPU pool's workers are not started (no GPU here): the router's long route fails over to the
short one, and the request sent is short (the short route: the CPU pool).

Skipped with one line where podman or kubectl is absent or the image was not built (make image).
"""
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from test_image import IMAGE, ROOT, podman, podman_env

WORKERS_DNS = "hetserve-cpu-pool-workers.hetserve.svc.cluster.local"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render(overlay):
    out = subprocess.run(["kubectl", "kustomize", os.path.join(ROOT, "deploy", "k8s", "overlays",
                                                               overlay)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return out


def patch(text, host_port, aliases=None):
    """The rendered documents with every Deployment's ports published at host_port and the
    image the local one; aliases: hostAliases for its pods."""
    yaml = pytest.importorskip("yaml")
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        if d.get("kind") != "Deployment":
            continue
        spec = d["spec"]["template"]["spec"]
        if aliases:
            spec["hostAliases"] = aliases
        for c in spec["containers"]:
            c["image"] = IMAGE
            for p in c.get("ports", []):
                p["hostPort"] = host_port
    return yaml.safe_dump_all(docs)


def request(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(method, path, body=json.dumps(body) if body else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, data


def wait_ready(port, env, pod, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if request(port, "GET", "/ready")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    logs = podman(env, "logs", pod, check=False)
    pytest.fail("%s never ready:\n%s" % (pod, (logs.stdout + logs.stderr)[-3000:]))


def test_router_and_worker_pods():
    for tool in ("podman", "kubectl"):
        if not shutil.which(tool):
            pytest.skip("%s is not installed" % tool)
    env = podman_env()
    if podman(env, "image", "exists", IMAGE, check=False).returncode != 0:
        pytest.skip("no image %s: make image builds it" % IMAGE)
    net = "hetserve-test-%d" % os.getpid()
    tmp = tempfile.mkdtemp(prefix="hs_kube_")
    files = []
    podman(env, "network", "create", net)
    try:
        wport, rport = free_port(), free_port()
        worker = os.path.join(tmp, "cpu-pool.yaml")
        with open(worker, "w") as f:
            f.write(patch(render("cpu-pool"), wport))
        files.append(worker)
        podman(env, "kube", "play", "--network", net, worker, timeout=300)
        wpod = "hetserve-cpu-pool-pod-0-hetserve"
        ip = podman(env, "inspect", "--format",
                    '{{(index .NetworkSettings.Networks "%s").IPAddress}}' % net,
                    "hetserve-cpu-pool-pod-0", check=False).stdout.strip()
        if not ip:  # the address is the pod's infra container's
            infra = podman(env, "pod", "inspect", "--format", "{{.InfraContainerID}}",
                           "hetserve-cpu-pool-pod-0").stdout.strip()
            ip = podman(env, "inspect", "--format",
                        '{{(index .NetworkSettings.Networks "%s").IPAddress}}' % net,
                        infra).stdout.strip()
        assert ip, "no address for the worker pod"
        wait_ready(wport, env, wpod)
        router = os.path.join(tmp, "router.yaml")
        with open(router, "w") as f:
            f.write(patch(render("router"), rport,
                          [{"ip": ip, "hostnames": [WORKERS_DNS]}]))
        files.append(router)
        podman(env, "kube", "play", "--network", net, router, timeout=300)
        wait_ready(rport, env, "hetserve-router-pool-pod-0-hetserve")
        direct = json.loads(request(wport, "POST", "/v1/embeddings", {"input": "hello world"})[2])
        st, h, data = request(rport, "POST", "/v1/embeddings", {"input": "hello world"})
        assert st == 200, data
        assert h["x-engine"].startswith("cpu_pool/"), h
        via = json.loads(data)["data"][0]["embedding"]
        assert len(via) == 384
        assert max(abs(a - b) for a, b in zip(via, direct["data"][0]["embedding"])) < 1e-5
        # the worker served the router's batch on its internal API
        _, _, m = request(wport, "GET", "/metrics")
        assert "hetserve_" in m.decode()
    finally:
        for f in reversed(files):
            podman(env, "kube", "down", f, check=False, timeout=120)
        podman(env, "network", "rm", "-f", net, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
