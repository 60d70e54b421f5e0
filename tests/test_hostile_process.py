"""Hostile input against the whole service: the `make run` process (gunicorn -k gevent and its
background workers) fed by the fake Jetstream, its PLC directory down (a closed port), and three
attacker hosts on loopback. Driven over HTTP only.

The attacker hosts (did:web on localhost, which development mode fetches over http):
  - `small`: every path answers 63,000 bytes of `"\\` (under the 64 KiB DID-document cap, so it is
    parsed: the shape that made the old depth guard take seconds);
  - `big`: every path answers 1 MB of `"\\` (as a DID document it is over the cap);
  - `pds`: a valid DID document naming itself as the PDS, whose listRecords (and every other
    path) answers 1 MB of `"\\`; it is also the configured handle resolver, counting each
    resolveHandle it is asked.

Steps:
  1. 60 readers' follows and 10 authors' posts arrive on the stream (FEED_SERVE=all).
  2. Attack while a monitor polls /health and a reader's getFeed: getFeedSkeleton with unsigned
     JWTs whose issuers are the attacker DIDs, listRecords?actor= each attacker DID, getFeed for
     one, POST /login naming one, the opt-out form naming one. Every answer is a clean 4xx/200
     and every monitor poll answers (each within a 5 s request timeout: the old guard froze the
     worker for tens of seconds and got it killed).
  3. After a restart (a full outbound budget), 200 getRecord calls on fresh handles: the resolver
     is asked at most what the budget allows from one address, and the budget is left empty.
  4. The 60 readers page their timelines 7 at a time, several at once, from that same address,
     while the PLC directory is down (every first-read backfill fails): no read is refused. kill -9 in the middle of the
     paging, restart; new posts, a dropped stream connection and the replay after it; then every
     timeline, all pages, is exactly the model.
The log holds no ERROR record, no traceback and no worker timeout.

Timing is printed (`-s` shows it); nothing asserts on time beyond the request timeouts.
"""
from __future__ import annotations

import json
import re
import secrets
import socket
import threading
import time
from base64 import urlsafe_b64encode
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from gevent.pool import Pool

from tests.support.fake_jetstream import FakeJetstream, make_commit
from tests.support.process_world import assert_no_error_records, print_service_log
from tests.support.process_world import wait_for as _wait
from tests.support.service_process import ServiceProcess, service_env
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow]

POST, FOLLOW = "app.bsky.feed.post", "app.bsky.graph.follow"
NS = "com.featherreader"
GET_FEED = f"/xrpc/{NS}.getFeed"
SERVICE_DID = "did:web:feather.test"
FEED_URI = "at://did:plc:publisheraaaaaaaaaaaaaaa/app.bsky.feed.generator/following"
READERS = [f"did:plc:reader{n:02d}aaaaaaaaaaaaaaaa" for n in range(60)]
AUTHORS = [f"did:plc:author{n:02d}aaaaaaaaaaaaaaaa" for n in range(10)]
BASE_S = 1_760_000_000
HOSTILE_1M = b'"\\' * (512 * 1024)
HOSTILE_63K = b'"\\' * 31_500
CLIENT_BURST, CLIENT_PER_MINUTE = 10, 10  # feather.feeds.budget's per-address bucket


class AttackerHost:
    """A loopback HTTP server playing a host an attacker controls: fixed answers, counted requests."""

    def __init__(self, body: bytes, did_document: bool = False):
        self.body, self.counts, self._lock = body, {}, threading.Lock()
        host = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                path = self.path.split("?", 1)[0]
                with host._lock:
                    host.counts[path] = host.counts.get(path, 0) + 1
                status, payload = 200, host.body
                if did_document and path == "/.well-known/did.json":
                    payload = json.dumps(host.document()).encode()
                elif path.endswith("resolveHandle"):
                    status, payload = 400, b'{"error":"InvalidRequest","message":"Unable to resolve handle"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the service stopped reading at its body cap: that is the point

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.did = f"did:web:localhost%3A{self.port}"
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def document(self) -> dict:
        return {"@context": ["https://www.w3.org/ns/did/v1"], "id": self.did,
                "alsoKnownAs": [f"at://attacker{self.port}.test"],
                "service": [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer",
                             "serviceEndpoint": f"http://localhost:{self.port}"}]}

    def count(self, suffix: str) -> int:
        with self._lock:
            return sum(n for path, n in self.counts.items() if path.endswith(suffix))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed: connection refused


def iso(s: int) -> str:
    return datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def follows_of(i: int) -> list[str]:
    return [AUTHORS[(i + k) % len(AUTHORS)] for k in (0, 3, 7)]


class Model:
    def __init__(self):
        self.posts: dict[str, list[tuple[int, str]]] = {a: [] for a in AUTHORS}
        self.n = 0

    def post(self, author: str) -> dict:
        self.n += 1
        rkey, created = f"p{self.n:04d}", BASE_S + self.n
        self.posts[author].append((created * 1_000_000, f"at://{author}/{POST}/{rkey}"))
        return make_commit(author, POST, rkey, "create", {"$type": POST, "text": f"post {self.n}",
                                                          "createdAt": iso(created)})

    def timeline(self, i: int) -> list[str]:
        items = [p for a in follows_of(i) for p in self.posts[a]]
        return [uri for _, uri in sorted(items, key=lambda p: (-p[0], p[1]))]


def world(model: Model) -> list[dict]:
    frames = [make_commit(r, FOLLOW, f"f{k}", "create", {"$type": FOLLOW, "subject": a, "createdAt": iso(BASE_S)})
              for i, r in enumerate(READERS) for k, a in enumerate(follows_of(i))]
    return frames + [model.post(a) for _ in range(4) for a in AUTHORS]


def unsigned_jwt(issuer: str) -> str:
    def part(obj) -> str:
        return urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    now = int(time.time())
    return ".".join([part({"typ": "JWT", "alg": "ES256"}),
                     part({"iss": issuer, "aud": SERVICE_DID, "lxm": "app.bsky.feed.getFeedSkeleton",
                           "iat": now, "exp": now + 60}), part("not a signature")])


class Statuses:
    """Every status a reader saw (connection errors while the service is down are retried, not counted)."""

    def __init__(self):
        self.seen: dict[int, int] = {}
        self.lock = threading.Lock()

    def add(self, status: int) -> None:
        with self.lock:
            self.seen[status] = self.seen.get(status, 0) + 1


def page_through(svc: ServiceProcess, actor: str, statuses: Statuses, limit: int = 7) -> list[str]:
    uris, cursor = [], None
    while True:
        params = {"feed": "timeline", "actor": actor, "limit": limit, **({"cursor": cursor} if cursor else {})}
        for _ in range(600):  # across a kill -9 and restart: wait for the service to come back
            try:
                response = requests.get(svc.url + GET_FEED, params=params, timeout=30)
                break
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
                time.sleep(0.1)
        statuses.add(response.status_code)
        if response.status_code != 200:
            raise AssertionError(f"{actor}: {response.status_code} {response.text[:200]}")
        body = response.json()
        uris += [r["uri"] for r in body["records"]]
        cursor = body.get("cursor")
        if not cursor:
            return uris


def publish_feed_row(database_url: str) -> None:
    """The generator answers only for a feed it published: remember one, with the service stopped."""
    row = (FEED_URI, FEED_URI.split("/")[2], "following", "timeline", None, "Following", "", 1)
    sql = ("INSERT INTO feed_generators (uri, publisher_did, rkey, feed, cid, display_name, description,"
           " published_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
    if database_url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(database_url.split(":///", 1)[1]) as conn:
            conn.execute(sql, row)
        return
    import psycopg2

    with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
        cur.execute(sql.replace("?", "%s"), row)


def csrf_of(session: requests.Session, url: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', session.get(url, timeout=10).text).group(1)


def test_hostile_hosts_never_stall_the_service_and_reads_are_never_refused(database_url, tmp_path):
    small, big, pds = AttackerHost(HOSTILE_63K), AttackerHost(HOSTILE_1M), AttackerHost(HOSTILE_1M, did_document=True)
    model = Model()
    with FakeJetstream() as js:
        svc = ServiceProcess(service_env(
            DATABASE_URL=database_url, FEATHERREADER_ENV="development", SECRET_KEY=secrets.token_hex(32),
            FEATHERREADER_DATA_DIR=tmp_path / "data", FEATHERREADER_JETSTREAM_HOSTS=js.url,
            FEATHERREADER_ALLOW_PRIVATE_NETWORK=True, FEATHERREADER_PLC_URL=f"http://127.0.0.1:{closed_port()}",
            FEATHERREADER_HANDLE_RESOLVER=pds.url, FEATHERREADER_FEED_SERVICE_DID=SERVICE_DID,
            FEED_SERVE="all", FEATHERREADER_LOG_LEVEL="INFO"), tmp_path / "service.log")
        try:
            svc.start()
            svc.stop()
            publish_feed_row(database_url)
            svc.start()
            js.append(world(model))
            _wait(lambda: len(requests.get(svc.url + GET_FEED, params={"feed": "timeline", "actor": READERS[-1]},
                                           timeout=30).json()["records"]) == len(model.timeline(59)),
                  60, "the last reader's timeline is ingested")

            attack(svc, small, big, pds)
            svc.stop()  # a graceful restart refills the outbound budget: the spray starts from a full one
            svc.start()
            spray_get_record(svc, pds)  # ...and leaves it empty for the readers' paging
            page_with_a_kill(svc, js, model)
            assert "WORKER TIMEOUT" not in svc.log_text()
            assert_no_error_records(svc)
        except BaseException:
            print_service_log(svc)
            raise
        finally:
            svc.stop()
            for host in (small, big, pds):
                host.close()


def attack(svc: ServiceProcess, small: AttackerHost, big: AttackerHost, pds: AttackerHost) -> None:
    stop, polls, worst = threading.Event(), [], [0.0]

    def monitor():
        while not stop.is_set():
            for path in ("/health", f"{GET_FEED}?feed=timeline&actor={READERS[0]}&limit=5"):
                started = time.monotonic()
                polls.append(requests.get(svc.url + path, timeout=5).status_code)  # raises past 5 s
                worst[0] = max(worst[0], time.monotonic() - started)
            time.sleep(0.1)

    def skeleton(did):
        return requests.get(f"{svc.url}/xrpc/app.bsky.feed.getFeedSkeleton", params={"feed": FEED_URI},
                            headers={"Authorization": f"Bearer {unsigned_jwt(did)}"}, timeout=10)

    def listing(did):
        return requests.get(f"{svc.url}/xrpc/{NS}.post.listRecords", params={"actor": did}, timeout=10)

    def feed(did):
        return requests.get(svc.url + GET_FEED, params={"feed": "timeline", "actor": did}, timeout=10)

    def login(identifier):
        with requests.Session() as s:
            token = csrf_of(s, svc.url + "/login")
            return s.post(svc.url + "/login", data={"identifier": identifier, "csrf_token": token},
                          timeout=10, allow_redirects=False)

    def opt_out(identifier):
        with requests.Session() as s:
            token = csrf_of(s, svc.url + "/network/opt-out")
            return s.post(svc.url + "/network/opt-out", data={"handle": identifier, "csrf_token": token},
                          timeout=10, allow_redirects=False)

    calls = [("skeleton small", skeleton, small.did, 401), ("skeleton small again", skeleton, small.did, 401),
             ("skeleton big", skeleton, big.did, 401), ("skeleton pds", skeleton, pds.did, 401),
             ("listRecords pds", listing, pds.did, 200), ("listRecords small", listing, small.did, 200),
             ("getFeed small", feed, small.did, 200), ("login pds url", login, pds.url.replace("127.0.0.1", "localhost"), 400),
             ("login small", login, small.did, 400), ("opt-out big", opt_out, big.did, 303)]
    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        answers = list(Pool(len(calls)).imap(lambda c: (c[0], c[1](c[2]), c[3]), calls))
    finally:
        after = len(polls)  # one more round of polls once the attack is answered: the service still answers
        wait_until(lambda: len(polls) >= after + 2 or not watcher.is_alive(), timeout=30, message="the monitor's polls after the attack")
        stop.set()
        watcher.join(10)
    print(f"attack: {len(calls)} hostile requests answered in {time.monotonic() - started:.2f} s; "
          f"{len(polls)} monitor polls, the slowest {worst[0]:.2f} s")
    got = {name: response.status_code for name, response, _ in answers}
    assert got == {name: expected for name, _, _, expected in calls}, {n: re.sub(r"\s+", " ", r.text)[-600:] for n, r, _ in answers if got[n] != dict((c[0], c[3]) for c in calls)[n]}
    assert {name: response.json()["error"] for name, response, _ in answers if name.startswith("skeleton")} == {
        "skeleton small": "BadJwtSignature", "skeleton small again": "BadJwtSignature",
        "skeleton big": "BadJwtSignature", "skeleton pds": "BadJwtSignature"}
    assert dict(answers_by(answers, "listRecords pds").json()) == {"records": []}
    assert polls and set(polls) == {200}
    # The hostile bodies were really fetched (and so really parsed, where under their cap).
    assert small.count("/.well-known/did.json") >= 1 and big.count("/.well-known/did.json") >= 1
    assert pds.count("com.atproto.repo.listRecords") >= 1


def answers_by(answers, name):
    return next(response for n, response, _ in answers if n == name)


def spray_get_record(svc: ServiceProcess, pds: AttackerHost) -> None:
    before, started = pds.count("resolveHandle"), time.monotonic()
    statuses = []
    for i in range(200):
        response = requests.get(f"{svc.url}/xrpc/{NS}.post.getRecord",
                                params={"uri": f"at://fresh{i}-{secrets.token_hex(3)}.test/{POST}/3k"}, timeout=10)
        statuses.append(response.status_code)
        if response.status_code == 429:
            assert int(response.headers["Retry-After"]) >= 1
    elapsed = time.monotonic() - started
    asked = pds.count("resolveHandle") - before
    allowed = CLIENT_BURST + int(elapsed * CLIENT_PER_MINUTE / 60) + 1
    print(f"getRecord spray: 200 calls in {elapsed:.2f} s, the resolver asked {asked} times (budget {allowed}); "
          f"{statuses.count(429)} refused with 429")
    assert set(statuses) <= {400, 429}
    assert CLIENT_BURST <= asked <= allowed
    assert statuses.count(400) == asked  # every lookup the budget paid for was answered "unresolvable"


def page_with_a_kill(svc: ServiceProcess, js: FakeJetstream, model: Model) -> None:
    statuses, done = Statuses(), []

    def reader(i):
        uris = page_through(svc, READERS[i], statuses)
        done.append(i)
        return uris

    started = time.monotonic()
    pool = Pool(6)
    first = pool.imap_unordered(lambda i: (i, reader(i)), range(len(READERS)))
    killed = False
    results = {}
    for i, uris in first:
        results[i] = uris
        if not killed and len(results) == 20:  # a third of the way through: kill -9 mid-paging
            svc.kill9()
            svc.start()
            killed = True
    assert killed
    print(f"60 readers paged (kill -9 and restart in the middle) in {time.monotonic() - started:.2f} s: {statuses.seen}")
    assert set(statuses.seen) == {200}
    for i, uris in results.items():
        if i < 20:
            assert uris == model.timeline(i), READERS[i]

    js.append([model.post(a) for a in AUTHORS[:3]])
    _wait(lambda: page_through(svc, READERS[0], statuses) == model.timeline(0), 60, "the new posts arrived")
    js.drop()  # the consumer reconnects and asks for its overlap again: a replay
    js.append([model.post(AUTHORS[3])])
    _wait(lambda: page_through(svc, READERS[3], statuses) == model.timeline(3), 60, "the post after the replay")
    final = dict(Pool(6).imap_unordered(lambda i: (i, page_through(svc, READERS[i], statuses)), range(len(READERS))))
    assert {i: final[i] for i in range(len(READERS))} == {i: model.timeline(i) for i in range(len(READERS))}
    assert set(statuses.seen) == {200}
