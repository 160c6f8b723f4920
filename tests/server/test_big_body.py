# Bodies over limits.body_bytes_max: the client reads the 413 and its JSON error, whether it
# sends the whole body before it reads (Python's http.client, requests) or reads while it
# sends (curl), and a body past the discard limits still has its connection closed.
import http.client
import json
import shutil
import socket
import subprocess
import time

import pytest

from hetserve_fixture import BINARY, Server

BIG = 20 * 1024 * 1024  # a 20 MB body against the default 4 MB limit


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("big") / "20MB.json"
    with open(p, "w") as f:
        f.write('{"inputs": "' + "x" * (BIG - 14) + '"}')
    return str(p)


@pytest.fixture(scope="module")
def srv():
    s = Server("engines:\n  - name: cpu0\n    kind: cpu\n    threads: 1\n")
    yield s
    s.stop()


def check_413(status, body):
    assert status == 413, body
    e = json.loads(body)["error"]
    assert e["code"] == 413 and e["type"] == "payload_too_large"
    assert "4194304" in e["message"], e


def test_http_client_reads_413(srv, big_file):
    with open(big_file, "rb") as f:
        body = f.read()
    for _ in range(3):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        c.request("POST", "/embed", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        check_413(r.status, r.read())
        c.close()
    # the whole body was read: the connection is still usable for the next request
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/embed", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    check_413(r.status, r.read())
    c.request("POST", "/embed", body=b'{"inputs": "hello"}', headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and len(json.loads(r.read())[0]) == 384
    c.close()


def test_requests_reads_413(srv, big_file):
    requests = pytest.importorskip("requests")
    with open(big_file, "rb") as f:
        r = requests.post("http://127.0.0.1:%d/embed" % srv.port, data=f, timeout=60)
    check_413(r.status_code, r.content)
    # a chunked upload (no Content-Length) is refused the same way once it passes the limit
    def gen():
        for _ in range(BIG // 65536):
            yield b"x" * 65536
    r = requests.post("http://127.0.0.1:%d/v1/embeddings" % srv.port, data=gen(), timeout=60)
    assert r.status_code == 413 and json.loads(r.content)["error"]["code"] == 413


@pytest.mark.parametrize("expect", [True, False])
def test_curl_data_binary_reads_413(srv, big_file, expect):
    if not shutil.which("curl"):
        pytest.skip("no curl")
    args = ["curl", "-sS", "-w", "\n%{http_code}", "--data-binary", "@" + big_file]
    if not expect:
        args += ["-H", "Expect:"]  # no 100-continue: the whole body is on its way at once
    out = subprocess.run(args + ["http://127.0.0.1:%d/embed" % srv.port], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    body, code = out.stdout.rsplit("\n", 1)
    check_413(int(code), body)


def send_until_closed(port, head, chunks, pause_s=0.0, deadline_s=30):
    """Sends head then chunks; returns (bytes of body sent, what came back) once the server
    closes the connection (or everything is sent and it answered)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(deadline_s)
    sent = 0
    got = b""
    try:
        s.sendall(head)
        for c in chunks:
            s.sendall(c)
            sent += len(c)
            if pause_s:
                time.sleep(pause_s)
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except (BrokenPipeError, ConnectionResetError):
        try:
            got += s.recv(65536)
        except OSError:
            pass
    finally:
        s.close()
    return sent, got


def test_past_discard_limits_is_closed():
    s = Server("engines:\n  - name: cpu0\n    kind: cpu\n    threads: 1\n"
               "limits: {body_bytes_max: 65536, discard_bytes_max: 1048576, "
               "discard_timeout_ms: 1500}\n")
    try:
        # a declared length past the discard limit: answered at once, the rest never read
        head = (b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % BIG)
        sent, got = send_until_closed(s.port, head, [b"x" * 65536] * (BIG // 65536))
        assert sent < BIG, "the server read the whole body"
        if got:
            assert got.startswith(b"HTTP/1.1 413")
        # a chunked body that keeps coming past discard_bytes_max: 413, then closed
        head = (b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
        sent, got = send_until_closed(s.port, head, [chunk] * (BIG // 65536))
        assert sent < BIG, "the server read the whole chunked body"
        # a slow sender within the byte limit: answered and closed after discard_timeout_ms
        head = (b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % (1000000))
        t0 = time.monotonic()
        sent, got = send_until_closed(s.port, head, [b"x" * 10000] * 100, pause_s=0.05)
        assert sent < 1000000 or got.startswith(b"HTTP/1.1 413"), (sent, got[:80])
        assert time.monotonic() - t0 < 20
        # and the server is fine
        assert s.get("/health")[0] == 200
        st, _, b = s.post("/embed", {"inputs": "hello"})
        assert st == 200
    finally:
        s.stop()
    assert s.proc.returncode == 0


def test_discard_keys_documented():
    out = subprocess.run([BINARY, "config", "--print-defaults"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "discard_bytes_max: 67108864" in out.stdout
    assert "discard_timeout_ms: 10000" in out.stdout
