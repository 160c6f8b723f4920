# Black-box tests of the scheduler through the server: deadline expiry while queued, 429 with
# Retry-After under overload, SIGTERM during load, the trace file, the config command. A one-
# thread engine and long sequences make the queue real. Orderings are asserted, never durations.
import json
import os
import socket
import subprocess
import threading
import time

from hetserve_fixture import BINARY, MODEL, Server, run_threads

# One compute thread; the initial throughput guess is huge so that nothing is rejected by
# prediction before the first batch has been measured; a long default deadline so that slow
# machines (sanitizer builds, busy CI) see no timeouts the test did not ask for.
SLOW = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1
batching:
  batch_window_us: 1000
  batch_max: 32
  batch_max_tokens: 16384
limits:
  queue_max: %d
  timeout_ms: 300000
scheduler:
  throughput_init_tokens_per_s: 1000000000
  wait_max_ms: 0
"""

LONG = ["%d " % i + "tokens make this sequence long enough to fill its bucket " * 24
        for i in range(32)]


class Background:
    """A request running on its own thread."""

    def __init__(self, server, path, body, headers=None):
        self.result = None
        self.done_at = None

        def run():
            self.result = server.post(path, body, headers=headers)
            self.done_at = time.monotonic()

        self.t = threading.Thread(target=run)
        self.t.start()

    def join(self):
        self.t.join()
        return self.result


def wait_lane(server, field, timeout_s=60):
    """Waits until the first lane's /internal/v1/status shows field > 0."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        st, _, v = server.get("/internal/v1/status")
        if st == 200 and json.loads(v)["lanes"][0][field] > 0:
            return
        time.sleep(0.005)
    raise AssertionError("lane never showed %s > 0" % field)


def test_deadline_expires_while_queued():
    s = Server(SLOW % 1024)
    try:
        big = Background(s, "/embed", {"inputs": LONG, "truncate": True})
        time.sleep(0.2)  # let the long batch start (its window is 1 ms)
        st, h, b = s.post("/embed", {"inputs": "short one", "timeout_ms": 100})
        small_done = time.monotonic()
        assert st == 504, b
        assert b["error"]["type"] == "timeout_error" and "deadline" in b["error"]["message"]
        st, _, v = big.join()
        assert st == 200 and len(v) == 32
        # answered while the batch ahead of it was still computing, not when its slot freed
        assert small_done < big.done_at
        _, _, m = s.get("/metrics")
        assert 'outcome="timeout"} 1' in m.decode()
    finally:
        s.stop()


def test_overload_429_with_retry_after():
    s = Server(SLOW % 8)
    try:
        big = Background(s, "/embed", {"inputs": LONG[:8], "truncate": True})
        time.sleep(0.2)

        def one(i):
            return s.post("/embed", {"inputs": "request %d" % i})

        results = run_threads(16, one)
        codes = [r[0] for r in results]
        assert big.join()[0] == 200
        assert set(codes) <= {200, 429}, codes
        assert 429 in codes and 200 in codes
        for st, h, b in results:
            if st == 429:
                assert int(h["retry-after"]) >= 1
                assert b["error"]["type"] == "overloaded_error"
        # now that throughput is measured, a deadline shorter than the predicted wait is refused
        # while the engine is busy (an idle engine takes what fits: a wrong prediction is only
        # corrected by running a batch)
        # a long batch running (seen in the lane's status) when the request comes
        bigs = [Background(s, "/embed", {"inputs": LONG[:8], "truncate": True})]
        wait_lane(s, "running_seqs")
        st, h, b = s.post("/embed", {"inputs": LONG[:8], "truncate": True, "timeout_ms": 20})
        assert st == 429 and "predicted" in b["error"]["message"], b
        assert int(h["retry-after"]) >= 1
        done = [x.join() for x in bigs]
        assert all(d[0] == 200 for d in done), [(d[0], d[2]) for d in done]
        # batch class is shed first: it may fill only part of the queue
        assert s.get("/health")[0] == 200
    finally:
        s.stop()


def test_sigterm_during_load_loses_nothing():
    s = Server(SLOW % 4096)
    try:
        texts = ["sentence %d of the drain test, of medium length for a bucket" % i
                 for i in range(48)]
        pending = [Background(s, "/embed", {"inputs": texts[i:i + 4]}) for i in range(0, 48, 4)]
        pending += [Background(s, "/v1/embeddings", {"input": t}, headers={"X-Priority": "batch"})
                    for t in texts[:12]]
        # every request accepted (queued or in the running batch) before the signal: 12 x 4 + 12
        # sequences
        for _ in range(1000):
            st, _, v = s.get("/internal/v1/status")
            lanes = json.loads(v)["lanes"] if st == 200 else []
            if sum(l["queued_seqs"] + l["running_seqs"] for l in lanes) >= 60:
                break
            time.sleep(0.01)
        s.signal()
        # draining: a new connection is refused at once (not left in the listen backlog until
        # the process ends), while every accepted request is still answered. A connect racing
        # the listening socket's shutdown is reset rather than refused (it was in the backlog
        # when the socket closed): either is a refusal
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", s.port), timeout=5).close()
            except (ConnectionRefusedError, ConnectionResetError):
                break
            time.sleep(0.01)
        else:
            raise AssertionError("connections were still accepted 5 s into the drain")
        for p in pending:
            st, _, b = p.join()
            assert st == 200, b
        assert s.wait(timeout=120) == 0
    finally:
        s.stop()


def test_sigterm_does_not_wait_for_a_body_still_arriving():
    """A client that stopped in the middle of its body has no accepted request: the drain does
    not wait for it (it held SIGTERM until drain_timeout_ms and the exit status was 1). The
    same when microhttpd misses a client's close that came with its last bytes (seen in make
    soak): the connection would otherwise count until connection_timeout_s."""
    s = Server("limits:\n  drain_timeout_ms: 20000\n")
    try:
        body = json.dumps({"input": ["a body that never finishes arriving"]}).encode()
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                  + body[:len(body) // 2])
        # whole requests on other connections are answered as before
        other = Background(s, "/v1/embeddings", {"input": ["a whole request"]})
        time.sleep(0.3)
        t = time.monotonic()
        s.signal()
        st, _, b = other.join()
        assert st == 200, b
        assert s.wait(timeout=60) == 0
        assert time.monotonic() - t < 10, "the drain waited for the unfinished body"
        c.close()
    finally:
        s.stop()


def test_trace_file_and_server_timing(tmp_path):
    trace = str(tmp_path / "trace.json")
    s = Server(None, extra_args=["--trace-file", trace, "--threads", "2"])
    try:
        for i in range(3):
            st, h, _ = s.post("/v1/embeddings", {"input": ["trace me %d" % i, "and me"]})
            assert st == 200
        st, _, _ = s.post("/v1/embeddings", {"input": ""})
        assert st == 400
        s.signal()
        assert s.wait() == 0
    finally:
        s.stop()
    with open(trace) as f:
        t = json.load(f)
    ev = t["traceEvents"]
    names = {e["name"] for e in ev}
    assert any(e["ph"] == "M" and e["name"] == "process_name" and "cpu0" in e["args"]["name"]
               for e in ev)
    assert any(n.startswith("batch ") for n in names)
    for stage in ("copy_in", "compute", "copy_out", "parse", "tokenize", "queue", "send"):
        assert stage in names, stage
    begins = sum(1 for e in ev if e["ph"] == "b")
    ends = sum(1 for e in ev if e["ph"] == "e")
    assert begins == ends and begins > 0


def test_config_command():
    out = subprocess.run([BINARY, "config", "--print-defaults"], check=True, capture_output=True,
                         text=True).stdout
    for key in ("batch_window_us: 2000", "buckets: [16, 32, 64, 128, 256]", "queue_max:",
                "timeout_ms:", "body_bytes_max:", "items_max:", "chars_max:", "port: 8080",
                "host: \"127.0.0.1\"", "kind: cpu", "whitelist:", "cores:"):
        assert key in out, key
    # every key is documented
    for line in out.splitlines():
        if ":" in line and not line.strip().startswith("#") and not line.rstrip().endswith(":"):
            assert "#" in line, line
    path = os.path.join(os.path.dirname(BINARY), "printed-defaults.yaml")
    with open(path, "w") as f:
        f.write(out)
    chk = subprocess.run([BINARY, "config", "--check", path], capture_output=True, text=True)
    assert chk.returncode == 0 and chk.stdout == out
    bad = subprocess.run([BINARY, "serve", "--config", "/nonexistent.yaml"], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "nonexistent" in bad.stderr


def test_http_threads_stay_off_pinned_engine_cores():
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        import pytest
        pytest.skip("needs 2 CPUs to pin the engine to one")
    s = Server("""
engines:
  - name: cpu0
    kind: cpu
    cores: [%d]
limits:
  timeout_ms: 300000
""" % allowed[0])
    try:
        assert s.post("/embed", {"inputs": "pinned"})[0] == 200
        seen = 0
        for tid in os.listdir("/proc/%d/task" % s.proc.pid):
            base = "/proc/%d/task/%s/" % (s.proc.pid, tid)
            with open(base + "comm") as f:
                if f.read().strip() != "MHD-worker":
                    continue
            seen += 1
            cpus = os.sched_getaffinity(int(tid))
            assert allowed[0] not in cpus and cpus == set(allowed[1:]), cpus
        assert seen > 0
        assert "HTTP and tokenization threads on cores" in s.stderr()
    finally:
        s.stop()


def test_more_connections_than_a_select_set():
    """1,100 idle clients (past FD_SETSIZE, microhttpd's default limit) stay connected and a new
    client is still served."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 1400
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            import pytest
            pytest.skip("open-file hard limit %d < %d" % (hard, need))
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    s = Server("""
engines:
  - name: cpu0
    kind: cpu
server:
  connections_max: 2048
limits:
  timeout_ms: 300000
""")
    idle = []
    try:
        for _ in range(1100):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            idle.append(c)
        time.sleep(0.5)  # the daemon accepts them all
        # (with the old limit the new client waited in the listen backlog until idle ones timed
        # out after connection_timeout_s, 60 s: the 20 s client timeout catches that)
        st, _, v = s.post("/embed", {"inputs": "one more client"}, timeout=20)
        assert st == 200 and len(v) == 1
        # the idle ones were accepted, not closed: each still gets an answer
        for c in idle[-3:]:
            c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert c.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        for c in idle:
            c.close()
        s.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_http_yield_puts_http_threads_in_sched_batch():
    s = Server("""
server:
  http_yield: true
engines:
  - name: cpu0
    kind: cpu
limits:
  timeout_ms: 300000
""")
    try:
        assert s.post("/embed", {"inputs": "yielding"})[0] == 200
        policies = {}
        for tid in os.listdir("/proc/%d/task" % s.proc.pid):
            with open("/proc/%d/task/%s/comm" % (s.proc.pid, tid)) as f:
                name = f.read().strip()
            policies.setdefault(name, set()).add(os.sched_getscheduler(int(tid)))
        assert policies.get("MHD-worker") == {os.SCHED_BATCH}, policies
        # the compute side keeps the normal policy
        assert all(p == {os.SCHED_OTHER} for n, p in policies.items() if n != "MHD-worker"), policies
    finally:
        s.stop()
