"""A stand-in for hetserve that answers the soak driver's requests instantly and can misbehave
on purpose: answer a request twice, never answer one, or die. test_hetsoak.py runs hetsoak
against it to show that each of hetsoak's detectors fires (a soak that cannot fail proves
nothing). Loopback only; the shapes of its bodies are the ones hetsoak checks.

usage: fake_server.py [--double-every K] [--drop-every K] [--die-after N]
"""
import argparse
import json
import os
import signal
import socket
import socketserver
import threading

lock = threading.Lock()
state = {"id": 0, "model": 0, "n": 0}
args = None


def body_for(path, req):
    items = req.get("input", req.get("inputs"))
    single = isinstance(items, str)
    n = 1 if single else len(items)
    if path == "/v1/embeddings":
        data = [{"object": "embedding", "index": i, "embedding": [0.5, 0.25]} for i in range(n)]
        return {"object": "list", "data": data, "model": "fake", "usage": {"prompt_tokens": n}}
    if path == "/embed":
        return [[0.5, 0.25] for _ in range(n)]
    if path == "/predict":
        one = [{"label": "positive", "score": 0.9}, {"label": "negative", "score": 0.1}]
        return one if single else [one for _ in range(n)]
    if path == "/tokenize":
        return [[{"id": 101, "text": "[CLS]", "special": True}] for _ in range(n)]
    return None


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        buf = b""
        sock = self.request
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            hdr = {k.strip().lower(): v.strip() for k, v in
                   (line.split(":", 1) for line in lines[1:] if ":" in line)}
            n = int(hdr.get("content-length", "0"))
            while len(buf) < n:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            body, buf = buf[:n], buf[n:]
            close = hdr.get("connection", "").lower() == "close"
            with lock:
                state["id"] += 1
                state["n"] += 1
                rid, count = state["id"], state["n"]
            if args.die_after and count >= args.die_after:
                os._exit(3)
            status, out, model = 200, None, False
            if path == "/metrics":
                with lock:
                    out = 'hetserve_requests_total{engine="fake",outcome="ok"} %d\n' % state["model"]
            elif path in ("/health", "/admin/fault"):
                out = "{}"
            else:
                obj = body_for(path, json.loads(body))
                if obj is None:
                    status, out = 404, "{}"
                else:
                    out = json.dumps(obj, separators=(",", ":"))
                    model = path != "/tokenize"
            if model and args.drop_every and rid % args.drop_every == 0:
                sock.close()
                return
            data = out.encode()
            resp = ("HTTP/1.1 %d X\r\nContent-Type: application/json\r\nX-Request-Id: %d\r\n"
                    "Content-Length: %d\r\n%s\r\n" % (status, rid, len(data),
                                                     "Connection: close\r\n" if close else "")
                    ).encode() + data
            if model and args.double_every and rid % args.double_every == 0:
                resp += resp
            if model:
                with lock:
                    state["model"] += 1
            try:
                sock.sendall(resp)
            except OSError:
                return
            if close:
                return


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def main():
    global args
    p = argparse.ArgumentParser()
    p.add_argument("--double-every", type=int, default=0)
    p.add_argument("--drop-every", type=int, default=0)
    p.add_argument("--die-after", type=int, default=0)
    args = p.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print("fake: listening on http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
