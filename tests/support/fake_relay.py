"""A scripted loopback stand-in for the parts of the network the catalogue talks to.

One HTTP server on 127.0.0.1 plays three roles:
  relay  GET /xrpc/com.atproto.sync.listReposByCollection   pages over `repos`, cursor = offset
  PLC    GET /did:plc:...                                    DID documents naming `pds_for[did]` (default: us)
  PDS    GET /xrpc/com.atproto.repo.listRecords              pages over `records[did]`
Knobs (plain attributes, change them between calls):
  page_replies   {page_number: (status, headers, body)}  replace the Nth relay page (1-based) this run
  echo_cursor    True: every relay page carries a cursor, even the empty one past the end
  endless        True: every relay page is one fresh DID plus a cursor (for the page cap)
  page_size      N: a relay page holds at most N repos, whatever limit the client asked for
  slow_dids      {did: seconds} the PDS sleeps before answering listRecords for that DID
  failing_dids   {did: status}  the PDS answers that DID with an error
  plc_upstream   a real PLC directory's URL: the PLC role forwards every DID document request there
                 instead of serving its own documents (for whole-process tests against the reference
                 PDS); the document comes back unchanged, so the real PDS is what a reader talks to...
  pds_upstream   ...except for the DIDs in `proxied`: their documents name this server as their PDS,
                 which forwards listRecords for them to this real PDS
  hold(kind, did) a forwarded request waits until release(kind, did) / release_holds() (or
                 HOLD_CAP_SECS): kind "doc" holds the DID document request; kind "records" fetches
                 listRecords from pds_upstream at once and holds the answer, so the reader gets the
                 records as they were when it asked (a rebuild racing a live delete)
Every request is recorded in `requests` as (path, query dict, headers dict), and its arrival index
in `times` (monotonic seconds), so a test can ask what was requested after a moment.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

COLLECTION = "community.lexicon.rss.subscription"
HOLD_CAP_SECS = 120.0


class FakeNetwork:
    def __init__(self):
        self.repos: list[str] = []
        self.records: dict[str, list[tuple[str, dict]]] = {}
        self.pds_for: dict[str, str] = {}
        self.page_replies: dict[int, tuple[int, dict, object]] = {}
        self.echo_cursor = False
        self.endless = False
        self.page_size = 0  # when set, a relay page holds at most this many repos whatever the limit asked
        self.slow_dids: dict[str, float] = {}
        self.failing_dids: dict[str, int] = {}
        self.requests: list[tuple[str, dict, dict]] = []
        self.times: list[float] = []
        self.plc_upstream: str | None = None
        self.pds_upstream: str | None = None
        self.proxied: set[str] = set()
        self._holds: dict[tuple[str, str], threading.Event] = {}
        self._in_flight = 0
        self.most_in_flight = 0  # the most listRecords requests ever being answered at once
        self._flight = threading.Lock()
        self._relay_page = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                outer.requests.append((parts.path, query, dict(self.headers.items())))
                outer.times.append(time.monotonic())
                status, headers, body = outer.route(unquote(parts.path), query)
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    for k, v in {"Content-Type": "application/json", **headers}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client went away (a killed service): nothing to answer
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    # --- script helpers
    def add_account(self, did: str, records: list[tuple[str, dict]] = ()) -> None:
        if did not in self.repos:
            self.repos.append(did)
        self.records[did] = list(records)

    def new_run(self) -> None:
        """Page numbers in page_replies count from the next relay request."""
        self._relay_page = 0

    def relay_calls(self) -> list[tuple[str, dict, dict]]:
        return [r for r in self.requests if r[0].endswith("listReposByCollection")]

    def record_calls(self, did: str | None = None) -> list[tuple[str, dict, dict]]:
        return [r for r in self.requests if r[0].endswith("listRecords") and (did is None or r[1].get("repo") == did)]

    def did_doc_calls(self, did: str | None = None, since: float = 0.0) -> list[str]:
        """The DIDs whose documents were requested (in order, repeats kept), at or after `since`."""
        times = list(self.times)  # first: every request it counts is already in `requests`
        return [r[0][1:] for r, t in zip(list(self.requests), times)
                if r[0].startswith("/did:") and t >= since and (did is None or r[0][1:] == did)]

    def record_calls_since(self, did: str, since: float = 0.0) -> int:
        times = list(self.times)
        return sum(1 for r, t in zip(list(self.requests), times)
                   if r[0].endswith("listRecords") and r[1].get("repo") == did and t >= since)

    def hold(self, kind: str, did: str) -> None:
        self._holds[(kind, did)] = threading.Event()

    def release(self, kind: str, did: str) -> None:
        found = self._holds.pop((kind, did), None)
        if found is not None:
            found.set()

    def release_holds(self) -> None:
        for key in list(self._holds):
            self.release(*key)

    def _wait_hold(self, kind: str, did: str) -> None:
        found = self._holds.get((kind, did))
        if found is not None:
            found.wait(HOLD_CAP_SECS)

    def close(self) -> None:
        self.release_holds()
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- roles
    def route(self, path: str, query: dict):
        if path == "/xrpc/com.atproto.sync.listReposByCollection":
            return self._relay(query)
        if path == "/xrpc/com.atproto.repo.listRecords":
            if self.pds_upstream and query.get("repo") in self.proxied:
                return self._forward_records(query)
            return self._list_records(query)
        if path.startswith("/did:") and self.plc_upstream:
            return self._forward_did_doc(path[1:])
        if path.startswith("/did:"):
            did = path[1:]
            if did not in self.records:
                return 404, {}, {"message": "DID not registered"}
            endpoint = self.pds_for.get(did, self.url)
            return 200, {}, {"id": did, "alsoKnownAs": [], "verificationMethod": [],
                             "service": [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer",
                                          "serviceEndpoint": endpoint}]}
        return 404, {}, {"error": "NotFound"}

    def _forward_did_doc(self, did: str):
        self._wait_hold("doc", did)
        status, body = _get(f"{self.plc_upstream.rstrip('/')}/{quote(did, safe=':')}")
        if status == 200 and did in self.proxied:
            doc = json.loads(body)
            for service in doc.get("service", []):
                if service.get("id", "").endswith("#atproto_pds"):
                    service["serviceEndpoint"] = self.url
            body = json.dumps(doc).encode()
        return status, {}, body

    def _forward_records(self, query: dict):
        status, body = _get(f"{self.pds_upstream.rstrip('/')}/xrpc/com.atproto.repo.listRecords?{urlencode(query)}")
        self._wait_hold("records", query.get("repo", ""))
        return status, {}, body

    def _relay(self, query: dict):
        self._relay_page += 1
        if self._relay_page in self.page_replies:
            return self.page_replies[self._relay_page]
        if query.get("collection") != COLLECTION:
            return 400, {}, b"invalid collection"
        if self.endless:
            n = int(query.get("cursor") or 0)
            return 200, {}, {"repos": [{"did": f"did:plc:endless{n:06d}"}], "cursor": str(n + 1)}
        limit = int(query.get("limit") or 500)
        limit = min(limit, self.page_size) if self.page_size else limit
        start = int(query.get("cursor") or 0)
        page = self.repos[start:start + limit]
        body = {"repos": [{"did": d} for d in page]}
        if start + limit < len(self.repos) or self.echo_cursor:
            body["cursor"] = str(start + len(page) or start + 1)
        return 200, {}, body

    def _list_records(self, query: dict):
        with self._flight:
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
        try:
            return self._answer_records(query)
        finally:
            with self._flight:
                self._in_flight -= 1

    def _answer_records(self, query: dict):
        did = query.get("repo", "")
        if did in self.slow_dids:
            time.sleep(self.slow_dids[did])  # a slow PDS, so that concurrent requests overlap
        if did in self.failing_dids:
            return self.failing_dids[did], {}, {"error": "InternalServerError", "message": "boom"}
        if did not in self.records:
            return 400, {}, {"error": "RepoNotFound", "message": "no such repo"}
        limit = int(query.get("limit") or 50)
        start = int(query.get("cursor") or 0)
        page = self.records[did][start:start + limit]
        body = {"records": [{"uri": f"at://{did}/{COLLECTION}/{rkey}", "cid": f"bafy{rkey}", "value": value}
                            for rkey, value in page]}
        if start + limit < len(self.records[did]):
            body["cursor"] = str(start + limit)
        return 200, {}, body


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def subscription(url: str, created: str = "2026-01-02T03:04:05.000Z", **extra) -> dict:
    return {"$type": COLLECTION, "url": url, "createdAt": created, **extra}
