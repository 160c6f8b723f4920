"""deploy/check.py's detectors: each seeded fault in a copy of deploy/ fails the check with a line
saying what, and a missing tool fails it too (never a silent pass). The real check of the real
tree is the ctest deploy_check; this is deploy_check_pytest."""
import os
import shutil
import subprocess
import sys

import pytest

SRC = os.environ.get("HS_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
HETSERVE = os.environ.get("HETSERVE_BIN") or os.path.join(SRC, "build", "hetserve")


@pytest.fixture
def tree(tmp_path):
    """A copy of what deploy/check.py reads: deploy/ and the server sources it greps."""
    shutil.copytree(os.path.join(SRC, "deploy"), tmp_path / "deploy")
    shutil.copytree(os.path.join(SRC, "src", "server"), tmp_path / "src" / "server")
    return tmp_path


def run(tree, env=None):
    r = subprocess.run([sys.executable, str(tree / "deploy" / "check.py"), "--hetserve", HETSERVE],
                       capture_output=True, text=True, env=env, timeout=300)
    return r.returncode, r.stdout + r.stderr


def edit(path, old, new):
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_copy_passes(tree):
    rc, out = run(tree)
    assert rc == 0, out
    assert "deploy check: all passed" in out


def test_missing_kubectl_fails(tree, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    rc, out = run(tree, env=dict(os.environ, PATH=str(empty)))
    assert rc == 1 and "kubectl not found" in out, out


def test_unpinned_validator_fails(tree):
    edit(tree / "deploy" / "requirements-check.txt", "kubernetes-validate==", "kubernetes-validate==0.0.1#")
    rc, out = run(tree)
    assert rc == 1 and "pins 0.0.1" in out, out


def test_missing_hetserve_fails(tree):
    r = subprocess.run([sys.executable, str(tree / "deploy" / "check.py"), "--hetserve",
                        str(tree / "no-such-hetserve")], capture_output=True, text=True)
    assert r.returncode == 1 and "hetserve binary not found" in r.stderr, r.stderr


CPU = ("deploy", "k8s", "overlays", "cpu-pool")


@pytest.mark.parametrize("path,old,new,says", [
    (CPU + ("hetserve.yaml",), "{name: cpu_short, kind: cpu, threads: 2}",
     "{name: cpu_short, kind: cpu, threads: 2, cores: [0, 1]}", "pins cores"),
    (CPU + ("hetserve.yaml",), "{name: cpu_long, kind: cpu, threads: 2}",
     "{name: cpu_long, kind: cpu, threads: 3}", "cpu engines have 5 threads, the pod 4 cores"),
    (CPU + ("hetserve.yaml",), "{name: cpu_long, kind: cpu, threads: 2}",
     "{name: cpu_long, kind: cpu, threads: 2, thread: 1}", "hetserve config --check"),
    (CPU + ("hetserve.yaml",), "{name: cpu_long, kind: cpu, threads: 2}",
     "{name: cpu_long, kind: cuda}", "cuda engines ['cpu_long'] but GPU resources []"),
    (CPU + ("hetserve.yaml",), 'host: "0.0.0.0"', 'host: "127.0.0.1"', "server.host 127.0.0.1"),
    (CPU + ("kustomization.yaml",), '{cpu: "4", memory: 2Gi}\n          limits: {cpu: "4"',
     '{cpu: "3", memory: 2Gi}\n          limits: {cpu: "4"', "requests.cpu == limits.cpu"),
    (("deploy", "k8s", "base", "deployment.yaml"), "path: /health", "path: /live",
     "livenessProbe on /live, which hetserve does not serve"),
    (("deploy", "k8s", "base", "deployment.yaml"), "revisionHistoryLimit:", "revisionHistoryLimt:",
     "invalid for Kubernetes 1.31"),
    (("deploy", "k8s", "base", "hpa.yaml"), "name: hetserve_queued_sequences",
     "name: hetserve_queue_depth", "scales on hetserve_queue_depth, which no prometheus-adapter"),
    (("deploy", "k8s", "monitoring", "prometheus-adapter-rules.yaml"),
     "sum(hetserve_queue_length{", "sum(hetserve_queue_len{",
     "queries hetserve_queue_len, which hetserve does not export"),
    (("deploy", "Dockerfile"), "USER 10001:10001", "USER root", "DL3002"),
])
def test_fault_is_caught(tree, path, old, new, says):
    edit(tree.joinpath(*path), old, new)
    rc, out = run(tree)
    assert rc == 1, out
    assert says in out, out


def test_custom_resource_is_not_skipped(tree):
    d = tree.joinpath(*CPU)
    (d / "scaledobject.yaml").write_text(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: pool\nspec: {}\n")
    edit(d / "kustomization.yaml", "  - ../../base\n", "  - ../../base\n  - scaledobject.yaml\n")
    rc, out = run(tree)
    assert rc == 1 and "no schema for keda.sh/v1alpha1 ScaledObject" in out, out
