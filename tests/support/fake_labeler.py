"""A small labeler on loopback: a real HTTP server (a thread) whose labels the test controls.

It plays two roles on one port:
  PLC      GET /<did>                                   the labeler's DID document, naming this server as its
                                                        `#atproto_labeler` (type AtprotoLabeler) endpoint
  labeler  GET /xrpc/com.atproto.label.queryLabels      uriPatterns (repeated; exact, or a prefix ending in `*`),
                                                        sources (repeated), limit (1-250, default 50), cursor
Point FEATHERREADER_PLC_URL at `url` and FEED_LABELERS at `did`; or, with `web=True`, the labeler
is a did:web on loopback (its document at /.well-known/did.json) and only FEED_LABELERS is needed.

Like Ozone, a query answers the current state of each (src, uri, val): its newest label, which is
the negation itself once one was issued (`neg: true`); with `history = True` every label ever
issued is sent instead, oldest first, so the reader has to fold negations itself. Knobs (plain
attributes): `status` (e.g. 500: the labeler is down), `delay_s` (each query waits this long
first), `page_size` (the most labels a page holds, to make the reader follow cursors). `queries` records every queryLabels request's parameters.
"""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

DID = "did:plc:fakelabeler7777777777777"


def iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{us % 1_000_000:06d}Z"


class FakeLabeler:
    def __init__(self, did: str = DID, web: bool = False):
        """web: the labeler is did:web:localhost%3A<its port>, its document at /.well-known/did.json
        (a service under test that resolves did:plc at a real PLC directory can still find it)."""
        self.did = did
        self.web = web
        self.issued: list[dict] = []  # every label, in the order issued
        self.history = False
        self.status = 200
        self.delay_s = 0.0
        self.page_size = 250  # the most labels one page holds, whatever limit was asked
        self.queries: list[dict[str, list[str]]] = []
        self.doc_requests = 0
        self._clock_us = int(time.time() * 1_000_000)
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urlsplit(self.path)
                status, body = outer.route(unquote(parts.path), parse_qs(parts.query))
                payload = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the reader gave up (its deadline): nothing to answer
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        if web:
            self.did = f"did:web:localhost%3A{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- what the test says
    def _cts(self) -> str:
        with self._lock:
            self._clock_us = max(self._clock_us + 1000, int(time.time() * 1_000_000))
            return iso(self._clock_us)

    def label(self, uri: str, val: str, *, exp: str | None = None, cid: str | None = None,
              src: str | None = None, neg: bool = False, cts: str | None = None) -> dict:
        label = {"ver": 1, "src": src or self.did, "uri": uri, "val": val, "cts": cts or self._cts(),
                 "sig": {"$bytes": "c2lnbmF0dXJl"}}
        if cid:
            label["cid"] = cid
        if neg:
            label["neg"] = True
        if exp:
            label["exp"] = exp
        self.issued.append(label)
        return label

    def negate(self, uri: str, val: str, **kw) -> dict:
        return self.label(uri, val, neg=True, **kw)

    def query_count(self) -> int:
        return len(self.queries)

    # --- what it serves
    def route(self, path: str, query: dict[str, list[str]]):
        if path == "/xrpc/com.atproto.label.queryLabels":
            self.queries.append(query)
            if self.delay_s:
                time.sleep(self.delay_s)
            if self.status != 200:
                return self.status, {"error": "InternalServerError", "message": "down"}
            return 200, self._query(query)
        if path == f"/{self.did}" or (self.web and path == "/.well-known/did.json"):
            self.doc_requests += 1
            return 200, {"@context": ["https://www.w3.org/ns/did/v1"], "id": self.did,
                         "alsoKnownAs": ["at://labeler.test"],
                         "service": [{"id": "#atproto_labeler", "type": "AtprotoLabeler",
                                      "serviceEndpoint": self.url}]}
        return 404, {"error": "NotFound", "message": path}

    def _query(self, query: dict[str, list[str]]) -> dict:
        patterns = query.get("uriPatterns", [])
        sources = set(query.get("sources", []))
        limit = max(1, min(250, self.page_size, int((query.get("limit") or ["50"])[0])))
        start = int((query.get("cursor") or ["0"])[0])
        if self.history:
            current = list(enumerate(self.issued))
        else:
            newest: dict[tuple, tuple[int, dict]] = {}
            for i, label in enumerate(self.issued):
                newest[(label["src"], label["uri"], label["val"])] = (i, label)
            current = sorted(newest.values(), key=lambda v: v[0])

        def matches(uri: str) -> bool:
            return any(uri.startswith(p[:-1]) if p.endswith("*") else uri == p for p in patterns)

        found = [(i, label) for i, label in current
                 if i >= start and matches(label["uri"]) and (not sources or label["src"] in sources)]
        page = found[:limit]
        out: dict = {"labels": [label for _i, label in page]}
        if len(found) > limit:
            out["cursor"] = str(page[-1][0] + 1)
        return out
