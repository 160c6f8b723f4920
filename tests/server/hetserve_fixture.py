# Shared helpers for the black-box server tests: start the real hetserve binary on a free port,
# speak HTTP to it with the standard library only.
import functools
import http.client
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("HETSERVE_BIN") or os.path.join(ROOT, "build", "hetserve")
MODEL = os.environ.get("HS_MODEL_DIR") or os.path.join(ROOT, "models", "all-MiniLM-L6-v2")


class Server:
    """A running `hetserve serve`, bound to 127.0.0.1 on a free port."""

    def __init__(self, config_yaml=None, extra_args=(), env=None, model=MODEL):
        """model: the folder passed as --model (it replaces the config's models); None to
        serve the models the config lists."""
        self.tmp = tempfile.TemporaryDirectory(prefix="hs_pytest_")
        args = [BINARY, "serve", "--host", "127.0.0.1", "--port", "0"]
        if model:
            args += ["--model", model]
        if config_yaml is not None:
            path = os.path.join(self.tmp.name, "config.yaml")
            with open(path, "w") as f:
                f.write(config_yaml)
            args += ["--config", path]
        args += list(extra_args)
        e = dict(os.environ)
        e.setdefault("OMP_WAIT_POLICY", "passive")
        if env:
            e.update(env)
        self.log_path = os.path.join(self.tmp.name, "server.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, env=e, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("hetserve did not start: %r\n%s" % (line, self.stderr()))
        self.port = int(line.strip().rsplit(":", 1)[1])

    def stderr(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, conn=None, timeout=120):
        """Returns (status, headers dict (lower-case), body bytes)."""
        c = conn or self.conn(timeout)
        h = {"Content-Type": "application/json"}
        if headers:
            h.update(headers)
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        if conn is None:
            c.close()
        return r.status, hdrs, data

    def post(self, path, body, **kw):
        s, h, d = self.request("POST", path, body, **kw)
        return s, h, (json.loads(d) if d else None)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout=120):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.returncode not in (0, None):
            # a crash at shutdown: the log goes with the folder, so show its end (pytest prints
            # it with the failure)
            import sys
            sys.stderr.write("hetserve exited with %s; the end of its log:\n%s\n"
                             % (self.proc.returncode, self.stderr()[-4000:]))
        self.log.close()
        self.tmp.cleanup()


@functools.lru_cache(maxsize=None)
def engine_dtypes(engine="cpu0"):
    """The dtypes `hetserve devices` says this machine's engine computes in (the CPU engine's
    int8 and bf16 need AVX-512 VNNI / BF16 or AMX); empty when the binary is missing."""
    try:
        out = subprocess.run([BINARY, "devices"], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, OMP_WAIT_POLICY="passive"))
        for e in json.loads(out.stdout)["engines"]:
            if e["name"] == engine:
                return tuple(e["dtypes"])
    except (OSError, ValueError, KeyError, subprocess.SubprocessError):
        pass
    return ()


def cpu_computes(dtype):
    """Whether this machine's CPU engine computes in dtype (a test of that lane skips if not)."""
    return dtype in engine_dtypes("cpu0")


def cli_embed(texts):
    """Embeddings from `hetserve embed` for comparison."""
    out = subprocess.run([BINARY, "embed", "--model", MODEL] + list(texts), check=True,
                         capture_output=True, text=True,
                         env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    return [d["embedding"] for d in json.loads(out.stdout)["data"]]


def run_threads(n, fn):
    """Runs fn(i) on n threads at once; returns the results in order."""
    results = [None] * n
    errors = []

    def work(i):
        try:
            results[i] = fn(i)
        except Exception as e:  # reported by the caller
            errors.append((i, e))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0][1]
    return results
