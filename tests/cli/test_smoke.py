# The CLI smoke suite: every subcommand, and every flag that README.md or a `--help` text
# documents, run the way a user types it, on the default model and on every configs/*.yaml.
#
# - `config --check` on each config; `serve` of each config with one request to every endpoint
#   where the config can serve on this machine, and where it cannot (a GPU config without a GPU,
#   a model folder that is not installed) a refusal that says so, never a crash;
# - `verify` with no arguments and per engine kind, `devices`, `embed` / `tokenize` from
#   arguments and from standard input, `quantize`, a short `profile`, `plan` from a profile and
#   from a capture the server wrote;
# - every ```sh block of README.md as written (the port of `localhost:8080` replaced by a
#   running server's, `build/hetserve` by the binary under test), except the blocks whose first
#   line is `# needs: WHAT`;
# - last, that every command `hetserve --help` lists and every flag of README.md and of each
#   `--help` text was run by this suite.
#
# Every run asserts its exit status, that no process died by a signal or a sanitizer report, and
# the schema of what it printed (JSON parses, the expected keys). One server per config, short
# profiles and a small calibration set keep the whole suite to a few minutes on 2 cores.
import http.client
import json
import os
import re
import select
import shlex
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import pytest

from conftest import BINARY, MODEL, ROOT

ENV = dict(os.environ, OMP_WAIT_POLICY="passive")
CONFIGS = sorted(f for f in os.listdir(os.path.join(ROOT, "configs")) if f.endswith(".yaml"))
COMMANDS = ["embed", "tokenize", "devices", "verify", "quantize", "profile", "plan", "ocr",
            "serve", "config"]
TEXTS = ["hello world", "a second text, somewhat longer than the first one"]

# every hetserve argument list this session ran, and every (method, path) a served config was
# sent (for the coverage checks at the end)
INVOKED = []
REQUESTED = set()


def check_no_crash(rc, stderr, what):
    """A process that died by a signal (negative, or 128 + n from a shell) or with a sanitizer
    report is a crash, whatever else was asked of it."""
    assert rc >= 0 and rc < 128, "%s died by signal %d\n%s" % (what, -rc if rc < 0 else rc - 128,
                                                              stderr[-3000:])
    assert "Sanitizer" not in stderr and "runtime error:" not in stderr, "%s:\n%s" % (
        what, stderr[-3000:])


def hs(*args, cwd=ROOT, stdin=None, timeout=600):
    """Runs `hetserve ARGS`; returns the completed process (text)."""
    INVOKED.append(list(args))
    r = subprocess.run([BINARY] + list(args), cwd=cwd, input=stdin, capture_output=True,
                       text=True, env=ENV, timeout=timeout)
    check_no_crash(r.returncode, r.stderr, "hetserve " + " ".join(args))
    return r


def ok(r):
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout[-2000:],
                                                   r.stderr[-3000:])
    return r


# ---------------------------------------------------------------------------------------------
# a workspace laid out like the repository (configs/, heads/, models/), with the int8 folder
# `hetserve quantize` writes, so that the configs' relative paths resolve as in a checkout
# without writing into the checkout's models/


@pytest.fixture(scope="session")
def work():
    d = tempfile.TemporaryDirectory(prefix="hs_smoke_")
    w = d.name
    os.symlink(os.path.join(ROOT, "configs"), os.path.join(w, "configs"))
    os.symlink(os.path.join(ROOT, "heads"), os.path.join(w, "heads"))
    os.symlink(os.path.join(ROOT, "tests"), os.path.join(w, "tests"))
    os.symlink(os.path.join(ROOT, "data"), os.path.join(w, "data"))
    os.mkdir(os.path.join(w, "models"))
    os.symlink(os.path.abspath(MODEL), os.path.join(w, "models", "all-MiniLM-L6-v2"))
    # all-mpnet-base-v2: scripts/setup --models all only; ppocrv5, layout: scripts/setup's OCR
    # and layout models
    for extra in ("all-mpnet-base-v2", "ppocrv5", "layout"):
        p = os.path.join(ROOT, "models", extra)
        if os.path.isdir(p):
            os.symlink(p, os.path.join(w, "models", extra))
    yield w
    d.cleanup()


@pytest.fixture(scope="session")
def calib(work):
    """A small calibration set (the committed one's first texts): quantize in seconds."""
    with open(os.path.join(ROOT, "data", "calib", "calib.txt")) as f:
        lines = f.read().splitlines()[:40]
    p = os.path.join(work, "calib-small.txt")
    with open(p, "w") as f:
        f.write("\n".join(lines) + "\n")
    return p


@pytest.fixture(scope="session")
def quantized(work, calib):
    """models/all-MiniLM-L6-v2-int8 of the workspace, as `make quantized` makes it (with the
    small calibration set)."""
    out = os.path.join(work, "models", "all-MiniLM-L6-v2-int8")
    if "int8" not in cpu_dtypes():
        # refused, and the folder is not made: the configs that read it are refused as well
        r = hs("quantize", "--model", "models/all-MiniLM-L6-v2", "--calib", calib,
               "--heldout-every", "4", "--threads", "2", "--dtype", "int8", "--min", "0.99",
               "--mean", "0.998", "--out", out, cwd=work)
        assert r.returncode == 1 and "this CPU has no fast int8 path" in r.stderr, r.stderr
        return None
    r = ok(hs("quantize", "--model", "models/all-MiniLM-L6-v2", "--calib", calib,
              "--heldout-every", "4", "--threads", "2", "--out", out, cwd=work))
    assert "wrote " in r.stdout + r.stderr
    return out


def cpu_dtypes():
    """The dtypes this machine's CPU engine computes in (`hetserve devices`)."""
    global _CPU_DTYPES
    if _CPU_DTYPES is None:
        d = json.loads(ok(hs("devices")).stdout)
        _CPU_DTYPES = next((tuple(e["dtypes"]) for e in d["engines"] if e["kind"] == "cpu"), ())
    return _CPU_DTYPES


_CPU_DTYPES = None


@pytest.fixture(scope="session")
def devices():
    r = ok(hs("devices"))
    d = json.loads(r.stdout)
    assert set(d) == {"kinds", "engines"}
    for k in d["kinds"]:
        assert {"kind", "built", "devices", "native", "dtypes", "summary"} <= set(k), k
    for e in d["engines"]:
        assert {"name", "kind", "device", "isa", "threads", "mem_bytes", "gemm", "dtypes",
                "stages"} <= set(e), e
    return d


def kind_devices(devs, kind):
    for k in devs["kinds"]:
        if k["kind"] == kind:
            return k["devices"] if k["built"] else 0
    return 0


def kind_built(devs, kind):
    return any(k["kind"] == kind and k["built"] for k in devs["kinds"])


# ---------------------------------------------------------------------------------------------
# servers


class Served:
    """`hetserve serve ARGS` in cwd: running (port set) or refused (port None, rc and stderr)."""

    def __init__(self, args, cwd, start_timeout=180):
        INVOKED.append(["serve"] + list(args))
        self.args = args
        self.log = tempfile.NamedTemporaryFile("w+", prefix="hs_smoke_serve_", suffix=".log")
        self.proc = subprocess.Popen([BINARY, "serve"] + list(args), cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=ENV)
        self.port = None
        deadline = time.monotonic() + start_timeout
        line = ""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1.0)
            if ready:
                line = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        if "listening on" in line:
            self.port = int(line.strip().rsplit(":", 1)[1])
            self.rc = None
        else:
            try:
                self.rc = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.rc = self.proc.wait()
                raise AssertionError("serve %s neither listened nor exited:\n%s"
                                     % (args, self.stderr()))
            check_no_crash(self.rc, self.stderr(), "hetserve serve " + " ".join(args))

    def stderr(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def request(self, method, path, body=None, headers=None, timeout=120):
        REQUESTED.add((method, path))
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def stop(self):
        """SIGTERM: drains and exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.rc = self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("serve did not stop on SIGTERM:\n" + self.stderr())
        check_no_crash(self.rc, self.stderr(), "hetserve serve " + " ".join(self.args))
        return self.rc


def json_ok(status, data, want=200):
    assert status == want, (status, data[:500])
    return json.loads(data)


def wire_batch(model, seqs, deadline_ms=10000):
    """A POST /internal/v1/batch body (src/engine/remote/wire.h)."""
    m = model.encode()
    ids = [t for s in seqs for t in s]
    return (struct.pack("<4sHBBIIIHH", b"HSBQ", 1, 0, 0, len(seqs), len(ids), deadline_ms,
                        len(m), 0) + m + struct.pack("<%di" % len(seqs), *[len(s) for s in seqs])
            + struct.pack("<%di" % len(ids), *ids))


def every_endpoint(srv, has_cascade, admin=False, ocr=False, layout=False):
    """One request to every endpoint of the server's table; checks statuses and schemas."""
    s, _, d = srv.request("GET", "/v1/models")
    models = json_ok(s, d)
    assert models["object"] == "list" and models["data"], models
    m0 = models["data"][0]
    assert {"id", "object", "engine", "dimensions", "max_tokens"} <= set(m0), m0
    dim = m0["dimensions"]
    for path in ("/v1/embeddings", "/embeddings"):
        s, h, d = srv.request("POST", path, {"input": TEXTS})
        b = json_ok(s, d)
        assert b["object"] == "list" and len(b["data"]) == 2, b
        assert all(len(x["embedding"]) == dim for x in b["data"])
        assert b["usage"]["prompt_tokens"] > 0
        assert "server-timing" in h and "x-engine" in h and "x-route" in h, h
    s, _, d = srv.request("POST", "/embed", {"inputs": TEXTS[0]})
    b = json_ok(s, d)
    assert len(b) == 1 and len(b[0]) == dim
    s, _, d = srv.request("POST", "/tokenize", {"inputs": TEXTS[0]})
    b = json_ok(s, d)
    assert [t["text"] for t in b[0]][:2] == ["[CLS]", "hello"], b
    s, _, d = srv.request("POST", "/decode", {"ids": [[101, 7592, 2088, 102]],
                                              "skip_special_tokens": False})
    assert json_ok(s, d) == ["[CLS] hello world [SEP]"]
    s, h, d = srv.request("POST", "/predict", {"inputs": "what a great film"})
    if has_cascade:
        b = json_ok(s, d)
        assert {"label", "score"} <= set(b[0][0]), b
        assert "x-cascade" in h
    else:
        e = json_ok(s, d, 404)["error"]
        assert "/predict is not configured" in e["message"], e
    # the router's call to a worker: one sequence of token ids, one embedding back
    s, h, d = srv.request("POST", "/internal/v1/batch", wire_batch(m0["id"], [[101, 7592, 2088,
                                                                                102]]),
                          {"Content-Type": "application/x-hetserve-batch"})
    assert s == 200, (s, d[:300])
    magic, _, _, _, n, wdim = struct.unpack("<4sHBBII", d[:16])
    assert magic == b"HSBR" and n == 1 and wdim == dim and len(d) == 56 + 4 * dim
    s, _, d = srv.request("GET", "/internal/v1/status")
    b = json_ok(s, d)
    assert b["role"] == "worker" and b["lanes"], b
    s, _, d = srv.request("GET", "/health")
    assert json_ok(s, d) == {"status": "ok"}
    s, _, d = srv.request("GET", "/ready")
    assert json_ok(s, d)["status"] == "ready"
    s, h, d = srv.request("GET", "/metrics")
    assert s == 200 and b"hetserve_requests_total" in d, d[:300]
    s, h, d = srv.request("GET", "/dashboard")
    assert s == 200 and h["content-type"].startswith("text/html") and b"<!DOCTYPE html>" in d
    # TEI's tasks: similarity, the root route, info; rerank needs a cross-encoder (none of the
    # configs serves one: a clear 400 naming what it needs)
    s, _, d = srv.request("POST", "/similarity", {"inputs": {"source_sentence": TEXTS[0],
                                                             "sentences": TEXTS}})
    sim = json_ok(s, d)
    assert len(sim) == 2 and abs(sim[0] - 1.0) < 1e-4, sim
    s, _, d = srv.request("POST", "/", {"inputs": TEXTS[0]})
    b = json_ok(s, d)
    assert len(b) == 1 and len(b[0]) == dim, str(b)[:300]
    s, _, d = srv.request("GET", "/info")
    assert {"model_id", "max_input_length", "version"} <= set(json_ok(s, d)), d[:300]
    for path, body in (("/rerank", {"query": TEXTS[0], "texts": TEXTS}),
                       ("/v1/rerank", {"query": TEXTS[0], "documents": TEXTS})):
        s, _, d = srv.request("POST", path, body)
        assert "not a reranker" in json_ok(s, d, 400)["error"]["message"], (path, d[:300])
    # SPLADE needs a masked-LM checkpoint, token embeddings a model served with pooling: none
    # (tests/server/test_sparse.py serves both)
    s, _, d = srv.request("POST", "/embed_sparse", {"inputs": TEXTS})
    assert "masked-LM head" in json_ok(s, d, 400)["error"]["message"], d[:300]
    s, _, d = srv.request("POST", "/embed_all", {"inputs": TEXTS})
    assert "pooling: none" in json_ok(s, d, 400)["error"]["message"], d[:300]
    # KServe v2 / Open Inference Protocol
    s, _, d = srv.request("GET", "/v2")
    assert {"name", "version", "extensions"} <= set(json_ok(s, d)), d[:300]
    for path in ("/v2/health/live", "/v2/health/ready"):
        s, _, d = srv.request("GET", path)
        assert s == 200, (path, s, d[:300])
    s, _, d = srv.request("GET", "/v2/models/" + m0["id"])
    assert json_ok(s, d)["name"] == m0["id"], d[:300]
    s, _, d = srv.request("POST", "/v2/models/%s/infer" % m0["id"],
                          {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                       "data": [TEXTS[0]]}]})
    out = json_ok(s, d)["outputs"]
    assert any(o["datatype"] == "FP32" and o["shape"] == [1, dim] for o in out), out
    # OCR: a configured pipeline reads a committed image; elsewhere the endpoint is absent
    with open(os.path.join(ROOT, "tests", "data", "ocr", "render_05.jpg"), "rb") as f:
        jpg = f.read()
    s, _, d = srv.request("POST", "/v1/ocr", jpg, {"Content-Type": "image/jpeg"})
    if ocr:
        b = json_ok(s, d)
        assert b["lines"] and all({"box", "text", "score"} <= set(l) for l in b["lines"]), b
    else:
        assert s == 404, (s, d[:300])
    s, _, d = srv.request("POST", "/v1/layout", jpg, {"Content-Type": "image/jpeg"})
    if layout:
        b = json_ok(s, d)
        assert all({"box", "class", "label", "score"} <= set(t) for t in b["detections"]), b
    else:
        assert s == 404, (s, d[:300])
    s, _, d = srv.request("POST", "/admin/fault", {"engine": "nope", "mode": "fail"})
    if admin:
        assert s in (400, 404), (s, d)
    else:
        assert json_ok(s, d, 404)["error"]["code"] == 404


def config_facts(path):
    """What a config asks of the machine: engine kinds, model folders, a cascade, admin."""
    text = open(path).read()
    eng = text.split("models:")[0]
    kinds = set(re.findall(r"\bkind:\s*\"?(\w+)", eng))
    paths = re.findall(r"\b(?:path|det|rec|cls|dict|model|labels):\s*\"?([^\s\",}]+)", text)
    return {"kinds": kinds, "paths": paths, "cascade": re.search(r"^cascade:", text, re.M),
            "admin": re.search(r"admin:\s*\{?\s*enabled:\s*true", text),
            "ocr": re.search(r"^pipelines:", text, re.M) and "/v1/layout" not in text,
            "layout": "endpoint: /v1/layout" in text,
            # the dtypes its cpu engines compute in (each engine item of the engines: list)
            "cpu_dtypes": {m.group(1) for item in re.split(r"\n\s*- ", eng)
                           if re.search(r"\bkind:\s*\"?cpu\b", item)
                           for m in [re.search(r"\bdtype:\s*\"?(\w+)", item)] if m}}


# ---------------------------------------------------------------------------------------------
# hetserve, hetserve --help, each command's --help


def test_usage_and_commands():
    r = hs()
    assert r.returncode == 2 and "usage: hetserve <command>" in r.stderr
    r = ok(hs("--help"))
    listed = re.findall(r"^  (\w+) ", r.stdout, re.M)
    assert listed == COMMANDS, listed
    r = hs("no-such-command")
    assert r.returncode == 2 and "unknown command 'no-such-command'" in r.stderr


def help_flags(text):
    return sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text)))


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help(cmd):
    r = ok(hs(cmd, "--help"))
    assert r.stdout.startswith("usage: hetserve " + cmd), r.stdout
    r2 = hs(cmd, "--no-such-flag")
    assert r2.returncode == 2, (cmd, r2.returncode, r2.stderr)
    assert "no-such-flag" in r2.stderr


# ---------------------------------------------------------------------------------------------
# config


def test_config_print_defaults_round_trip(tmp_path):
    r = ok(hs("config", "--print-defaults"))
    for section in ("server:", "engines:", "models:", "batching:", "limits:", "scheduler:",
                    "routes:", "router:"):
        assert re.search("^" + section, r.stdout, re.M), section
    p = tmp_path / "defaults.yaml"
    p.write_text(r.stdout)
    ok(hs("config", "--check", str(p)))


@pytest.mark.parametrize("name", CONFIGS)
def test_config_check(name, work):
    r = ok(hs("config", "--check", "configs/" + name, cwd=work))
    assert re.search("^engines:", r.stdout, re.M) and "memory plan" in r.stderr, r.stderr


def test_config_check_refuses_with_file_and_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("engines:\n  - name: a\n    kind: cpu\n    thread: 2\n")
    r = hs("config", "--check", str(p))
    assert r.returncode != 0 and "bad.yaml:4" in r.stderr and "thread" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------
# devices, embed, tokenize


def test_devices(devices):
    kinds = [k["kind"] for k in devices["kinds"]]
    assert "cpu" in kinds
    assert any(e["kind"] == "cpu" and "f32" in e["dtypes"] for e in devices["engines"])


def check_embed(r, n, engine_prefix="cpu", dtype="f32"):
    b = json.loads(ok(r).stdout)
    assert {"model", "engine", "dtype", "quant_plan", "dim", "data"} <= set(b), b.keys()
    assert b["engine"].startswith(engine_prefix) and b["dtype"] == dtype, (b["engine"],
                                                                           b["dtype"])
    assert len(b["data"]) == n and all(len(d["embedding"]) == b["dim"] for d in b["data"])
    assert [d["index"] for d in b["data"]] == list(range(n))
    return b


def test_embed_from_arguments_and_stdin():
    a = check_embed(hs("embed", *TEXTS), 2)
    s = check_embed(hs("embed", "-", stdin="\n".join(TEXTS) + "\n"), 2)
    for x, y in zip(a["data"], s["data"]):
        assert x["tokens"] == y["tokens"]
        assert max(abs(p - q) for p, q in zip(x["embedding"], y["embedding"])) < 1e-6
    check_embed(hs("embed", "--model", MODEL, "--engine", "cpu:0", "--threads", "1", TEXTS[0]), 1)
    r = hs("embed")
    assert r.returncode == 2 and "usage: hetserve embed" in r.stderr


def test_embed_sparse_model():
    """A SPLADE checkpoint's rows print as their non-zero entries, as /embed_sparse answers."""
    gold = json.load(open(os.path.join(ROOT, "tests", "golden", "splade_tiny.json")))
    r = hs("embed", "--model", "tests/data/tiny-splade", gold["texts"][3])
    assert r.returncode == 0, r.stderr
    b = json.loads(r.stdout)
    got = {x["index"]: x["value"] for x in b["data"][0]["sparse"]}
    want = {x["index"]: x["value"] for x in gold["sparse"][3]}
    assert b["dim"] == 3000 and set(got) == set(want)
    assert max(abs(got[i] - want[i]) for i in want) < 1e-4


@pytest.mark.parametrize("dtype", ["f32", "bf16", "int8"])
def test_embed_dtypes(dtype, quantized):
    if dtype not in cpu_dtypes():
        r = hs("embed", "--model", MODEL, "--dtype", dtype, TEXTS[0])
        assert r.returncode != 0 and "cannot run stage embed in " + dtype in r.stderr, r.stderr
        pytest.skip("this machine's CPU engine does not compute in %s (refused, as checked)" % dtype)
    model = quantized if dtype == "int8" else MODEL
    b = check_embed(hs("embed", "--model", model, "--dtype", dtype, TEXTS[0]), 1, dtype=dtype)
    assert b["quant_plan"] == (dtype == "int8")


def test_embed_refusals():
    r = hs("embed", "--dtype", "f16", "x")  # the cpu kind computes no f16
    assert r.returncode == 1 and "f16" in r.stderr, r.stderr
    r = hs("embed", "--dtype", "f64", "x")
    assert r.returncode == 1 and "unknown dtype" in r.stderr, r.stderr
    r = hs("embed", "--engine", "nope", "x")
    assert r.returncode == 1 and "unknown engine kind 'nope'" in r.stderr, r.stderr


@pytest.mark.parametrize("kind", ["openvino", "cuda", "remote"])
def test_embed_per_kind(kind, devices):
    """Each engine kind as `embed --engine KIND`: the embeddings where it has a device (a remote
    engine has no worker here: a refusal), a line saying why not elsewhere; never a crash."""
    r = hs("embed", "--engine", kind, TEXTS[0])
    if kind != "remote" and kind_devices(devices, kind) > 0:
        check_embed(r, 1, engine_prefix=kind,
                    dtype=[k["native"] for k in devices["kinds"] if k["kind"] == kind][0])
    else:
        assert r.returncode == 1 and r.stderr.startswith("hetserve embed: "), r.stderr


def test_tokenize_from_arguments_and_stdin():
    r = ok(hs("tokenize", "Héllo, wörld!"))
    b = json.loads(r.stdout)
    assert b == [{"ids": [101, 7592, 1010, 2088, 999, 102],
                  "tokens": ["[CLS]", "hello", ",", "world", "!", "[SEP]"], "truncated": False}]
    r = ok(hs("tokenize", "--model", MODEL, "-", stdin="one\ntwo words\n"))
    b = json.loads(r.stdout)
    assert [x["tokens"] for x in b] == [["[CLS]", "one", "[SEP]"],
                                        ["[CLS]", "two", "words", "[SEP]"]]
    r = ok(hs("tokenize", "word " * 400))
    assert json.loads(r.stdout)[0]["truncated"] is True
    r = hs("tokenize")
    assert r.returncode == 2 and "usage: hetserve tokenize" in r.stderr


def test_tokenize_a_bare_tokenizer_json():
    t = os.path.join(MODEL, "tokenizer.json")
    if not os.path.exists(t):
        pytest.skip("the model folder has no tokenizer.json")
    r = ok(hs("tokenize", "--tokenizer", t, "Héllo, wörld!"))
    b = json.loads(r.stdout)
    assert b[0]["ids"] == [101, 7592, 1010, 2088, 999, 102], b
    assert {"ids", "tokens", "type_ids", "special", "offsets"} <= set(b[0]), b
    r = ok(hs("tokenize", "--tokenizer", t, "--pair", "second text", "first"))
    b = json.loads(r.stdout)[0]
    assert b["tokens"] == ["[CLS]", "first", "[SEP]", "second", "text", "[SEP]"], b
    assert b["type_ids"] == [0, 0, 0, 1, 1, 1]
    r = ok(hs("tokenize", "--tokenizer", t, "--no-special", "-", stdin="hello world\n"))
    assert json.loads(r.stdout)[0]["tokens"] == ["hello", "world"], r.stdout


# ---------------------------------------------------------------------------------------------
# verify


def test_verify_no_arguments():
    """The operator's check after every upgrade: every kind x device x dtype passes or is
    skipped with one line saying why, and the exit status is 0."""
    r = hs("verify", timeout=900)
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.stdout.rstrip().endswith("verify: all passed"), r.stdout


@pytest.mark.parametrize("kind", ["cpu", "openvino", "cuda", "remote"])
def test_verify_per_kind(kind, devices):
    r = hs("verify", "--engine", kind, "--limit", "24", timeout=900)
    rows = [l for l in r.stdout.splitlines() if re.match(r"%s\d*(:|\s)" % kind, l)]
    ran = [l for l in rows if "skipped:" not in l]
    if kind_devices(devices, kind) == 0:
        # nothing of the kind here: one line says so
        assert rows and all(re.match(r"%s: skipped: " % kind, l) for l in rows), r.stdout
    assert rows, r.stdout
    if ran:
        # what ran passed; the rest (dtypes a device lacks) is skipped with its reason
        assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-2000:])
        assert all(l.endswith("PASS") for l in ran) and "verify: all passed" in r.stdout, r.stdout
    else:
        # every device of the kind skipped (no device, or it runs no stages here), each with
        # one line saying why; nothing ran, which a named kind reports
        assert r.returncode in (0, 1) and "verify: " in r.stdout, r.stdout


def test_verify_flags(quantized, devices):
    # bf16 where the CPU computes it, else f32 (the flags are the same)
    low = "bf16" if "bf16" in cpu_dtypes() else "f32"
    # a list of kinds; one this binary was built without is reported as a failure
    r = hs("verify", "--model", MODEL, "--golden", os.path.join(ROOT, "tests", "golden"),
           "--engine", "cpu,cuda", "--dtype", low, "--batch", "4", "--limit", "12",
           "--min", "0.99", "--mean", "0.999")
    if kind_built(devices, "cuda"):
        ok(r)
    else:
        assert r.returncode == 1 and "cuda: skipped: not built into this binary" in r.stdout
    rows = [l for l in r.stdout.splitlines() if l.startswith("cpu0 ")]
    assert len(rows) == 1 and rows[0].split()[2] == low and rows[0].endswith("PASS"), r.stdout
    # an int8 lane of a quantized folder (README: verify --dtype int8 --model DIR)
    if quantized:
        r = ok(hs("verify", "--dtype", "int8", "--model", quantized, "--engine", "cpu",
                  "--limit", "24", "--min", "0.98", "--mean", "0.995"))
        assert re.search(r"^cpu0 +cpu +int8 +24 .*PASS$", r.stdout, re.M), r.stdout
    # a tolerance that cannot be met fails with status 1
    r = hs("verify", "--engine", "cpu", "--dtype", low, "--limit", "4", "--min", "1.0",
           "--mean", "1.0")
    assert r.returncode == 1 and "FAIL" in r.stdout, r.stdout


def test_verify_quantize_auto(tmp_path):
    """verify --quantize auto checks the int8 plan serve would make at load: searched into a
    plan-less model folder (writable, so --cache-dir stays unused), then reused; raw int8 says it
    is raw when it fails."""
    if "int8" not in cpu_dtypes():
        pytest.skip("this machine's CPU engine does not compute in int8")
    model = tmp_path / "m"
    model.mkdir()
    for root, dirs, files in os.walk(MODEL):
        rel = os.path.relpath(root, MODEL)
        os.makedirs(model / rel, exist_ok=True)
        for f in files:
            if f.startswith("quant."):
                continue
            try:  # (a copy where the temporary folder is on another file system)
                os.link(os.path.join(root, f), model / rel / f)
            except OSError:
                shutil.copy(os.path.join(root, f), model / rel / f)
    cache = tmp_path / "cache"
    r = ok(hs("verify", "--dtype", "int8", "--model", str(model), "--engine", "cpu",
              "--quantize", "auto", "--cache-dir", str(cache), "--limit", "24", "--min", "0.98",
              "--mean", "0.995"))
    assert re.search(r"^verify: int8 plan made in .* in .*/m/quant.json$", r.stdout, re.M), r.stdout
    assert re.search(r"^cpu0 +cpu +int8 +24 .*PASS$", r.stdout, re.M), r.stdout
    assert (model / "quant.json").exists() and not cache.exists()
    # the folder now holds the plan: a second run searches nothing
    r = ok(hs("verify", "--dtype", "int8", "--model", str(model), "--engine", "cpu",
              "--quantize", "auto", "--limit", "4", "--min", "0.98", "--mean", "0.99"))
    assert "plan made" not in r.stdout and "searching" not in r.stdout, r.stdout
    # raw int8 that fails a tolerance it cannot meet names the way to the plan
    r = hs("verify", "--dtype", "int8", "--model", MODEL, "--engine", "cpu", "--limit", "4",
           "--min", "1.0", "--mean", "1.0")
    assert r.returncode == 1 and "--quantize auto checks the one serve makes" in r.stdout, r.stdout
    r = hs("verify", "--quantize", "sometimes")
    assert r.returncode == 2 and "--quantize takes auto or off" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------
# quantize


def test_quantize(quantized, calib, tmp_path):
    if quantized is None:
        pytest.skip("this machine's CPU engine does not compute in int8 (quantize refused)")
    q = json.load(open(os.path.join(quantized, "quant.json")))
    assert q["format"] == "hetserve-quant" and q["dtype"] == "int8" and q["target_met"] is True
    assert {"keep_f32", "target", "calibration", "heldout", "stages", "smoothing"} <= set(q)
    assert os.path.exists(os.path.join(quantized, "quant.safetensors"))
    assert os.path.exists(os.path.join(quantized, "model.safetensors"))
    # bf16 with its own targets, from the default model path (int8 also runs on CPUs without
    # a bf16 path, AVX2: there quantize refuses bf16 with a clear error and exit 1)
    out = tmp_path / "bf16"
    r = hs("quantize", "--calib", calib, "--dtype", "bf16", "--min", "0.9", "--mean", "0.95",
           "--out", str(out))
    if "no fast bf16 path" in r.stderr:
        assert r.returncode == 1 and not out.exists(), r.stderr
    else:
        ok(r)
        assert json.load(open(out / "quant.json"))["dtype"] == "bf16"
    r = hs("quantize", "--model", MODEL)
    assert r.returncode == 2 and "--out" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------
# serve: the default model with every serve flag, each config as it is


@pytest.fixture(scope="session")
def default_server(work):
    """`hetserve serve` as `make run` starts it (the default model), on a free port."""
    s = Served(["--port", "0"], cwd=ROOT)
    assert s.port, s.stderr()
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="session")
def capture(work, tmp_path_factory):
    """A server with every serve flag (and a capture), one request to every endpoint; the
    capture it wrote and its trace."""
    d = tmp_path_factory.mktemp("capture")
    cap, trace = d / "capture.jsonl", d / "trace.json"
    cfg = d / "capture.yaml"
    cfg.write_text("server:\n  capture: {file: \"%s\"}\n" % cap)
    s = Served(["--config", str(cfg), "--model", MODEL, "--host", "127.0.0.1", "--port", "0",
                "--trace-file", str(trace), "--threads", "2"], cwd=work)
    assert s.port, s.stderr()
    try:
        every_endpoint(s, has_cascade=False)
        for i in range(20):
            st, _, _ = s.request("POST", "/v1/embeddings", {"input": TEXTS[i % 2]})
            assert st == 200
            st, _, _ = s.request("POST", "/embed", {"inputs": [TEXTS[0]] * 2},
                                 {"X-Priority": "batch"})
            assert st == 200
    finally:
        assert s.stop() == 0, s.stderr()
    return cap, trace


def test_serve_every_flag(capture):
    cap, trace = capture
    lines = [json.loads(l) for l in cap.read_text().splitlines()]
    assert len(lines) >= 40 and all(l["v"] == 1 and "tokens" in l for l in lines)
    assert {l["endpoint"] for l in lines} >= {"/v1/embeddings", "/embeddings", "/embed"}
    t = json.load(open(trace))
    assert t["traceEvents"], t.keys()


def test_serve_refuses_a_bad_config(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("engines:\n  - {name: a, kind: nope}\n")
    s = Served(["--config", str(p), "--port", "0"], cwd=ROOT)
    assert s.port is None and s.rc != 0 and "nope" in s.stderr(), s.stderr()


@pytest.mark.parametrize("name", CONFIGS)
def test_serve_config(name, work, devices, quantized):
    """Each config serves where this machine can (one request to every endpoint, then SIGTERM
    and exit 0), or is refused at start with a message that says why."""
    f = config_facts(os.path.join(work, "configs", name))
    missing = [p for p in f["paths"] if p.startswith("models/")
               and not os.path.exists(os.path.join(work, p))]
    no_device = [k for k in f["kinds"] if k in ("cuda", "openvino")
                 and kind_devices(devices, k) == 0]
    no_dtype = sorted(d for d in f["cpu_dtypes"] if d not in cpu_dtypes())
    s = Served(["--config", "configs/" + name, "--host", "127.0.0.1", "--port", "0"], cwd=work)
    if not missing and not no_device and not no_dtype:
        assert s.port, "%s did not serve:\n%s" % (name, s.stderr())
        try:
            every_endpoint(s, has_cascade=bool(f["cascade"]), admin=bool(f["admin"]),
                           ocr=bool(f["ocr"]), layout=f["layout"])
        finally:
            assert s.stop() == 0, s.stderr()
        return
    assert s.port is None, "%s served without %s" % (name, missing or no_device or no_dtype)
    assert s.rc == 1, s.rc
    err = s.stderr()
    if no_dtype and not no_device:
        why = "the lane computes in %s, which this engine's device" % no_dtype[0]
        assert any(why.replace(no_dtype[0], d) in err for d in no_dtype) or (
            missing and missing[0] in err), "%s: the refusal does not say why:\n%s" % (name, err)
        return
    if no_device and not kind_built(devices, no_device[0]):
        why = "this build has no %s engine" % no_device[0]
    elif "cuda" in no_device:
        why = "no CUDA device present"
    elif no_device:
        why = no_device[0]
    else:
        why = missing[0]
    assert why in err.splitlines()[-1], "%s: the refusal does not say %r:\n%s" % (name, why, err)


# ---------------------------------------------------------------------------------------------
# ocr


OCR = os.path.join(ROOT, "models", "ppocrv5")


def test_ocr(devices):
    """hetserve ocr on a committed image with every flag; a clear refusal on the CPU engine."""
    if not os.path.isfile(os.path.join(OCR, "det.onnx")):
        pytest.skip("no models/ppocrv5 (scripts/setup installs PP-OCRv5)")
    if kind_devices(devices, "openvino") == 0:
        pytest.skip("no OpenVINO device: the ONNX graphs need the openvino engine")
    files = ["--det", OCR + "/det.onnx", "--rec", OCR + "/rec.onnx", "--dict", OCR + "/dict.txt"]
    img = os.path.join(ROOT, "tests", "data", "ocr", "render_05.jpg")
    r = ok(hs("ocr", *files, "--cls", OCR + "/cls.onnx", "--engine", "openvino:0",
              "--det-engine", "openvino", "--rec-engine", "openvino", "--threads", "2",
              "--limit-side-len", "960", "--box-thresh", "0.6", "--drop-score", "0.5",
              "--workers", "2", "--rec-images", "2", "--stats", img, img))
    outs = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    assert len(outs) == 2 and outs[0]["lines"] == outs[1]["lines"], r.stdout[:500]
    assert all({"box", "text", "score"} <= set(l) for l in outs[0]["lines"]), outs[0]
    assert "rec" in r.stderr, r.stderr[-500:]
    r = hs("ocr", *files, "--engine", "cpu", img)
    assert r.returncode != 0 and "graph" in r.stderr.lower(), r.stderr[-500:]


# ---------------------------------------------------------------------------------------------
# profile and plan


@pytest.fixture(scope="session")
def profile(work):
    """A quick profile of the default configuration (one engine, cpu0): what the plans below
    take (one engine keeps them short, under the sanitizers too)."""
    out = os.path.join(work, "p.json")
    ok(hs("profile", "--quick", "--no-gemm", "--quiet", "--out", out, cwd=ROOT))
    return out


def test_profile(profile, work):
    p = json.load(open(profile))
    assert p["format"] == "hetserve-profile" and {"lanes", "memory_plan", "machine"} <= set(p)
    assert [l["engine"] for l in p["lanes"]] == ["cpu0"]
    # a config's lanes, with the GEMM peak
    out = os.path.join(work, "hybrid.json")
    ok(hs("profile", "--config", "configs/hybrid-cpu.yaml", "--quick", "--quiet", "--out", out,
          cwd=work))
    p = json.load(open(out))
    assert sorted(l["engine"] for l in p["lanes"]) == ["cpu_a", "cpu_b"] and p["gemm_peaks"]
    # the default configuration, a grid of its own, the JSON on standard output
    r = ok(hs("profile", "--model", MODEL, "--shapes", "1,2x16", "--target", "0.2", "--cap-s",
              "0.2", "--min-n", "3", "--quiet", "--out", "-"))
    q = json.loads(r.stdout)
    assert q["format"] == "hetserve-profile" and q["lanes"][0]["engine"] == "cpu0"
    assert "memory plan" in r.stderr


def check_plan_output(r):
    lines = ok(r).stdout.splitlines()
    assert lines[0].startswith("traffic: "), lines[0]
    assert sum(1 for l in lines if l.startswith("* ")) == 1
    assert any(l.startswith("chosen: ") for l in lines)
    return lines


def test_plan_from_a_profile(profile, work):
    r = hs("plan", "--profile", profile, "--traffic", "rate=20;16:0.7,64:0.3", "--slo", "500",
           "--kind", "single", "--pipeline", "any", "--tax", "cpu0=1.1", "--overhead-ms", "0.2",
           "--out", "-", cwd=work)
    lines = check_plan_output(r)
    assert lines[0].startswith("traffic: 20.0 requests/s, lengths 16:70% 64:30%"), lines[0]
    assert "# written by hetserve plan from " in r.stdout and "engines:" in r.stdout


def test_plan_from_a_capture(profile, capture, work, tmp_path):
    cap, _ = capture
    out = tmp_path / "plan.yaml"
    r = hs("plan", "--profile", profile, "--traffic", str(cap), "--slo", "500", "--config",
           "configs/fifo-cpu.yaml", "--model", MODEL, "--kind", "single", "--pipeline", "no",
           "--out", str(out), cwd=work)
    lines = check_plan_output(r)
    assert " sequences/s (capture " in lines[0] and "/v1/embeddings" in lines[0], lines[0]
    ok(hs("config", "--check", str(out), cwd=work))
    r = hs("plan", "--profile", profile, "--traffic", "rate=1;16:1", cwd=work)
    assert r.returncode == 2 and "--slo" in r.stderr


# ---------------------------------------------------------------------------------------------
# README.md's shell blocks, as written


def readme_blocks():
    text = open(os.path.join(ROOT, "README.md")).read()
    out = []
    for m in re.finditer(r"^```sh\n(.*?)^```", text, re.S | re.M):
        line = text[:m.start()].count("\n") + 1
        out.append((line, re.sub(r"\\\n\s*", "", m.group(1))))
    return out


def doc_shape(doc, got, where):
    """The documented output doc (JSON with '...' for what it leaves out) against what ran."""
    if isinstance(doc, dict):
        assert isinstance(got, dict) and set(doc) == set(got), (where, doc, got)
        for k in doc:
            doc_shape(doc[k], got[k], where + "." + k)
    elif isinstance(doc, list):
        assert isinstance(got, list) and len(got) >= len(doc), (where, doc, got)
        for i, x in enumerate(doc):
            doc_shape(x, got[i], "%s[%d]" % (where, i))
    elif isinstance(doc, float):
        assert isinstance(got, float) and abs(doc - got) < 1e-3, (where, doc, got)
    else:
        assert doc == got, (where, doc, got)


def check_documented_output(doc, got, where):
    doc = doc.strip()
    if doc.startswith("{") or doc.startswith("["):
        full = doc.endswith("}") or doc.endswith("]")
        assert full, where
        d = json.loads(re.sub(r",\.\.\.(?=[\]}])", "", doc))
        doc_shape(d, json.loads(got), where)
    else:
        # text: the same words with numbers as numbers
        num = re.compile(r"\d+(\.\d+)?")
        lines = [l for l in got.splitlines() if l.split(":")[0] == doc.split(":")[0]]
        assert lines, (where, doc, got)
        assert num.sub("N", lines[0].strip()) == num.sub("N", doc), (where, doc, lines[0])


def test_readme_blocks(default_server):
    blocks = readme_blocks()
    assert len(blocks) >= 3
    ran = 0
    for line, body in blocks:
        first = body.splitlines()[0]
        if first.startswith("# needs:"):
            continue
        prompt = any(l.startswith("$ ") for l in body.splitlines())
        steps = []  # (command, documented output)
        for l in body.splitlines():
            if prompt and l.startswith("$ "):
                steps.append([l[2:], ""])
            elif prompt and steps:
                steps[-1][1] += l + "\n"
            elif not prompt and l.strip() and not l.lstrip().startswith("#"):
                steps.append([l, ""])
        for cmd, doc in steps:
            where = "README.md:%d: %s" % (line, cmd)
            run = cmd.replace("localhost:8080", "localhost:%d" % default_server.port)
            run = re.sub(r"(^|[|;&(]\s*)build/hetserve\b", lambda m: m.group(1) + BINARY, run)
            words = shlex.split(cmd, comments=True)
            if words and words[0] == "build/hetserve":
                INVOKED.append(words[1:])
            r = subprocess.run(["bash", "-o", "pipefail", "-c", run], cwd=ROOT, env=ENV,
                               capture_output=True, text=True, timeout=300)
            check_no_crash(r.returncode, r.stderr, where)
            assert r.returncode == 0, "%s: exit %d\n%s" % (where, r.returncode, r.stderr[-2000:])
            if doc.strip():
                check_documented_output(doc, r.stdout, where)
            ran += 1
    assert ran >= 4, ran


# ---------------------------------------------------------------------------------------------
# coverage: every command and every documented flag was run above (keep this test last)


def documented_flags():
    """(command, flag) of every `--help` text and of README.md's `hetserve CMD ... --flag`."""
    want = set()
    for cmd in COMMANDS:
        r = subprocess.run([BINARY, cmd, "--help"], capture_output=True, text=True, env=ENV)
        # a flag of another command named in the text ("hetserve config --print-defaults") is
        # that command's
        # (and scripts/setup's)
        own = re.sub(r"(hetserve (?!%s\b)\w+|scripts/setup)[^)\n]*" % cmd, "", r.stdout)
        for f in help_flags(own):
            if f != "--help":
                want.add((cmd, f))
    text = open(os.path.join(ROOT, "README.md")).read()
    for m in re.finditer(r"`(?:build/)?hetserve (\w+)([^`]*)`", text):
        if m.group(1) in COMMANDS:
            for f in help_flags(m.group(2)):
                want.add((m.group(1), f))
    return want


def server_endpoints():
    """(method, path) of every row of the server's endpoint tables (src/server/*.c); a path
    ending in '/' is a prefix."""
    rows = set()
    d = os.path.join(ROOT, "src", "server")
    for f in sorted(os.listdir(d)):
        if f.endswith(".c"):
            for m in re.finditer(r'^\s*\{"(/[^"]*)",\s*"(GET|POST|PUT|DELETE)"',
                                 open(os.path.join(d, f)).read(), re.M):
                rows.add((m.group(2), m.group(1)))
    return rows


def test_every_endpoint_was_requested(request):
    """Each served config got one request to every endpoint of the table: an endpoint added
    without a request here fails this."""
    if request.config.getoption("keyword"):
        pytest.skip("runs when the whole suite does")
    rows = server_endpoints()
    assert ("POST", "/v1/embeddings") in rows and len(rows) >= 10, rows
    missing = sorted((m, p) for m, p in rows
                     if not any(m == rm and (rp == p or (p.endswith("/") and rp.startswith(p)))
                                for rm, rp in REQUESTED))
    assert not missing, "endpoints never requested: %s" % missing


def test_every_command_and_documented_flag_ran(request):
    mine = [i for i in request.session.items if i.module is request.module]
    if any(i.name != request.node.name and i.get_closest_marker("skip") for i in mine) or \
            request.session.testscollected < len(mine):
        pytest.skip("runs when the whole suite does")
    if request.config.getoption("keyword"):
        pytest.skip("runs when the whole suite does")
    used = set()
    for args in INVOKED:
        if args:
            for a in args[1:]:
                if a.startswith("--"):
                    used.add((args[0], a.split("=")[0]))
    ran = {a[0] for a in INVOKED if a and len(a) > 1 and a[1] != "--help"} | \
        {a[0] for a in INVOKED if len(a) == 1}
    assert set(COMMANDS) <= ran, set(COMMANDS) - ran
    missing = sorted(documented_flags() - used)
    assert not missing, "documented but never run: %s" % missing
