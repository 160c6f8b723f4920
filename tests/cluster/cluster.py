# A router and workers as separate hetserve processes: on distinct 127.0.0.1 ports (loopback),
# or each worker in its own network namespace on a bridge (netns.py).
import json
import os
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from hetserve_fixture import BINARY, MODEL, Server  # noqa: E402,F401

WORKER_YAML = """
engines:
  - name: cpu0
    kind: cpu
    threads: {threads}
batching:
  batch_window_us: 1000
limits:
  timeout_ms: 20000
"""

ROUTER_YAML = """
engines:
  - name: pool
    kind: remote
    {workers}
    slots: 2
    batch_window_us: 0
    timeout_ms: {timeout_ms}
    connect_timeout_ms: 300
    refresh_s: 1
    workers_max: {workers_max}
models:
  - path: {model}
    engine: pool
breaker:
  window_requests: 4
  min_requests: 2
  error_ratio_max: 0.5
  open_ms: {open_ms}
  half_open_probes: 2
retry:
  budget_ratio: 1
  budget_max: 50
limits:
  timeout_ms: 20000
"""


def router_config(endpoints=None, endpoints_file=None, timeout_ms=1000, open_ms=1000,
                  workers_max=0):
    if endpoints_file:
        workers = "endpoints_file: %s" % endpoints_file
    else:
        workers = "endpoints: [%s]" % ", ".join('"%s"' % e for e in endpoints)
    return ROUTER_YAML.format(workers=workers, timeout_ms=timeout_ms, open_ms=open_ms,
                              workers_max=workers_max, model=MODEL)


class Node(Server):
    """A hetserve process; prefix (e.g. ["ip", "netns", "exec", "ns"]) runs it elsewhere,
    host/port bind it there."""

    def __init__(self, config_yaml, host="127.0.0.1", port=0, prefix=(), model=MODEL):
        import subprocess
        import tempfile
        self.tmp = tempfile.TemporaryDirectory(prefix="hs_cluster_")
        path = os.path.join(self.tmp.name, "config.yaml")
        with open(path, "w") as f:
            f.write(config_yaml)
        args = list(prefix) + [BINARY, "serve", "--host", host, "--port", str(port),
                               "--config", path]
        if model:
            args += ["--model", model]
        self.host = host
        self.log_path = os.path.join(self.tmp.name, "server.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, env=env,
                                     text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("hetserve did not start: %r\n%s" % (line, self.stderr()))
        self.port = int(line.strip().rsplit(":", 1)[1])

    def conn(self, timeout=120):
        import http.client
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def start_worker(threads=1, host="127.0.0.1", port=0, prefix=(), admin=False):
    yaml = WORKER_YAML.format(threads=threads) + ("admin:\n  enabled: true\n" if admin else "")
    return Node(yaml, host=host, port=port, prefix=prefix)


def start_router(yaml, host="127.0.0.1"):
    return Node(yaml, host=host, model=None)


def breaker_of(router, lane):
    return status(router.port, router.host)["lanes"][lane]["breaker"]


def wait_for(fn, timeout, step=0.02):
    """Polls fn until it returns true; the seconds it took, or None after timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if fn():
            return time.monotonic() - t0
        time.sleep(step)
    return None


def status(port, host="127.0.0.1"):
    with urllib.request.urlopen("http://%s:%d/internal/v1/status" % (host, port), timeout=10) as r:
        return json.loads(r.read())


def embed(srv, texts, timeout=60, headers=None):
    s, h, body = srv.post("/v1/embeddings", {"input": texts}, headers=headers, timeout=timeout)
    return s, h, body


class Load:
    """n client threads sending requests until stopped; records (t, status, engine) per reply."""

    def __init__(self, srv, n=4, texts=("a short sentence about routing",)):
        self.srv, self.n, self.texts = srv, n, list(texts)
        self.results = []
        self.sent = 0
        self.mu = threading.Lock()
        self.stop = False
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(n)]

    def run(self, i):
        conn = None
        while not self.stop:
            with self.mu:
                self.sent += 1
            t = time.monotonic()
            try:
                conn = conn or self.srv.conn(timeout=60)
                s, h, _ = self.srv.request("POST", "/v1/embeddings", {"input": self.texts},
                                           conn=conn)
                rec = (t, s, h.get("x-engine", ""), h.get("x-route", ""))
            except Exception as e:  # a lost request would show here
                conn = None
                rec = (t, -1, repr(e), "")
            with self.mu:
                self.results.append(rec)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *a):
        self.stop = True
        for t in self.threads:
            t.join()
