"""A tiny scripted HTTP server on 127.0.0.1 for PDS-client and OAuth unit tests.

Routes map "METHOD /path" to a function(request) -> (status, headers, body); a body that is a dict
or list is sent as JSON. Every request is recorded (method, path, query, headers, body, json).
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from feather.outbound import GuardedClient


class Request:
    def __init__(self, method, path, query, headers, body):
        self.method, self.path, self.query, self.headers, self.body = method, path, query, headers, body

    @property
    def json(self):
        return json.loads(self.body) if self.body else None

    @property
    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


class FakeServer:
    def __init__(self):
        self.routes: dict[str, object] = {}
        self.requests: list[Request] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _dispatch(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                query = {k: v[0] if len(v) == 1 else v for k, v in parse_qs(parts.query).items()}
                req = Request(self.command, parts.path, query, self.headers, body)
                outer.requests.append(req)
                route = outer.routes.get(f"{self.command} {parts.path}")
                status, headers, payload = route(req) if route else (404, {}, {"error": "NotFound"})
                if isinstance(payload, (dict, list)):
                    payload = json.dumps(payload).encode()
                    headers = {"Content-Type": "application/json", **headers}
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _dispatch

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def route(self, key: str, *responses):
        """Answer key with responses in order; the last one repeats."""
        queue = list(responses)

        def handler(req):
            item = queue.pop(0) if len(queue) > 1 else queue[0]
            return item(req) if callable(item) else item

        self.routes[key] = handler

    def calls(self, key: str) -> list[Request]:
        method, path = key.split(" ", 1)
        return [r for r in self.requests if r.method == method and r.path == path]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def loopback_client() -> GuardedClient:
    return GuardedClient(allow_private_network=True, read_timeout=5, total_timeout=10)
