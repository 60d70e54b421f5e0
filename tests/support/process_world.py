"""Test support for whole-process tests: accounts and records on the reference PDS, the firehose
tap that feeds the fake Jetstream, and a person's HTTP session with the running service.

Shared by every `tests/test_*_process.py`; each test builds its own world on the session PDS (the
PDS is shared, so every handle carries a random suffix).
"""
from __future__ import annotations

import collections
import contextlib
import re
import secrets
import threading
import time
from datetime import UTC, datetime

import requests

from tests.support.fake_jetstream import FakeJetstream
from tests.support.firehose_bridge import FirehoseBridge
from tests.support.pds import tid_now, xrpc
from tests.support.service_process import ServiceProcess, error_records

ERROR_LINE = re.compile(r"Traceback|ERROR|Error:|Exception|outside of application context")


class Acct:
    def __init__(self, name: str, did: str, handle: str, password: str, token: str):
        self.name, self.did, self.handle, self.password, self.token = name, did, handle, password, token


def ok(r: requests.Response, what: str) -> dict:
    assert r.status_code == 200, f"{what} -> {r.status_code} {r.text[:500]}"
    return r.json()


def create_account(pds, name: str) -> Acct:
    password = "pw-" + secrets.token_hex(8)
    body = ok(xrpc(pds.pds_url, "POST", "com.atproto.server.createAccount",
                   json={"handle": f"{name}.test", "email": f"{name}@example.com", "password": password},
                   timeout=60), f"createAccount {name}")
    return Acct(name, body["did"], body["handle"], password, body["accessJwt"])


def app_password(pds, acct: Acct, name: str = "feather-e2e") -> str:
    return ok(xrpc(pds.pds_url, "POST", "com.atproto.server.createAppPassword", token=acct.token,
                   json={"name": name}), "createAppPassword")["password"]


def apply_creates(pds, acct: Acct, items: list[tuple[str, str, dict]]) -> None:
    """(collection, rkey, record) creates in acct's repo, 200 per commit (the PDS's limit)."""
    for i in range(0, len(items), 200):
        writes = [{"$type": "com.atproto.repo.applyWrites#create", "collection": c, "rkey": k,
                   "value": {"$type": c, **v}} for c, k, v in items[i:i + 200]]
        ok(xrpc(pds.pds_url, "POST", "com.atproto.repo.applyWrites", token=acct.token, timeout=120,
                json={"repo": acct.did, "writes": writes}), f"applyWrites {acct.name}")


def put_record(pds, acct: Acct, collection: str, record: dict, rkey: str | None = None) -> dict:
    """createRecord's answer ({uri, cid, validationStatus?, …}); the rkey a TID unless given."""
    return ok(xrpc(pds.pds_url, "POST", "com.atproto.repo.createRecord", token=acct.token,
                   json={"repo": acct.did, "collection": collection, "rkey": rkey or tid_now(),
                         "record": {"$type": collection, **record}}), f"createRecord {collection}")


def create_record(pds, acct: Acct, collection: str, record: dict, rkey: str | None = None) -> str:
    return put_record(pds, acct, collection, record, rkey)["uri"].rsplit("/", 1)[-1]


def delete_record(pds, acct: Acct, collection: str, rkey: str) -> None:
    ok(xrpc(pds.pds_url, "POST", "com.atproto.repo.deleteRecord", token=acct.token,
            json={"repo": acct.did, "collection": collection, "rkey": rkey}), f"deleteRecord {collection}/{rkey}")


def record_exists(pds, did: str, collection: str, rkey: str) -> bool:
    r = xrpc(pds.pds_url, "GET", "com.atproto.repo.getRecord",
             params={"repo": did, "collection": collection, "rkey": rkey})
    return r.status_code == 200


def iso_ms(ms: int) -> str:
    """A record timestamp for a time in milliseconds, as the apps write them."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def follow_record(subject: str) -> dict:
    return {"subject": subject, "createdAt": now_iso()}


class Tap:
    """The firehose bridge's sink: hands frames to the fake Jetstream and remembers when each commit
    went in (the time_us the fake stamped; an upper bound for frames of a multi-op commit).

    `fenced=True` starts it closed: it drops every frame until the first one of the DID given to
    fence() (that frame included). See live_firehose."""

    def __init__(self, js: FakeJetstream, fenced: bool = False):
        self.js = js
        self.times: dict[tuple[str, str, str, str], int] = {}
        self.open = not fenced
        self.dropped = 0
        self._fence: str | None = None
        self._seen_closed: set[str] = set()
        self._lock = threading.Lock()

    def fence(self, did: str) -> None:
        with self._lock:
            self._fence = did
            self.open = self.open or did in self._seen_closed

    def __call__(self, frames: list[dict]) -> None:
        with self._lock:
            if not self.open:
                at = next((i for i, f in enumerate(frames) if f.get("did") == self._fence), None)
                self._seen_closed.update(f.get("did") for f in frames)
                self.dropped += len(frames) if at is None else at + 1
                if at is None:
                    return
                frames, self.open = frames[at + 1:], True
        if not frames:
            return
        last = self.js.append(frames)
        for f in frames:
            if f.get("kind") == "commit":
                c = f["commit"]
                self.times[(f["did"], c["collection"], c["rkey"], c["operation"])] = last

    def time_of(self, did: str, collection: str, rkey: str, operation: str, timeout: float = 15.0) -> int:
        key = (did, collection, rkey, operation)
        wait_for(lambda: key in self.times, timeout, f"the firehose to carry {operation} {collection}/{rkey}")
        return self.times[key]


class Person:
    """One person's browser-less session with the service: cookies, the CSRF header, JSON calls."""

    def __init__(self, svc: ServiceProcess, acct: Acct, label: str):
        self.svc, self.acct, self.label = svc, acct, label
        self.http = requests.Session()

    def csrf(self) -> str:
        return ok(self.http.get(self.svc.url + "/api/session", timeout=30), "GET /api/session")["csrfToken"]

    def sign_in(self, app_password: str) -> dict:
        r = self.http.post(self.svc.url + "/api/session", timeout=60, headers={"X-CSRF-Token": self.csrf()},
                           json={"identifier": self.acct.handle, "password": app_password})
        body = ok(r, f"{self.label}: POST /api/session")
        assert body.get("did") == self.acct.did and body.get("signedIn"), body
        return body

    def get(self, path: str, **kw) -> requests.Response:
        return self.http.get(self.svc.url + path, timeout=kw.pop("timeout", 30), **kw)

    def post_json(self, path: str, body: dict, **kw) -> requests.Response:
        return self.http.post(self.svc.url + path, json=body, timeout=kw.pop("timeout", 60),
                              headers={"X-CSRF-Token": self.csrf()}, **kw)


def wait_for(predicate, timeout: float, message, interval: float = 0.2) -> None:
    """Until predicate() is true; fails with message (a string or a callable giving one) after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {message() if callable(message) else message}")


def error_lines(svc: ServiceProcess, limit: int = 40) -> str:
    """Distinct error lines of the service log (first occurrence order), with how often each came."""
    seen: collections.Counter = collections.Counter()
    order = []
    for line in svc.log_text().splitlines():
        if ERROR_LINE.search(line):
            key = re.sub(r"^\S+ \S+ ", "", line)[:300]  # drop a leading timestamp so repeats fold
            if key not in seen:
                order.append(key)
            seen[key] += 1
    return "\n".join(f"{seen[k]:>4}x {k}" for k in order[:limit]) or "(no error lines)"


def assert_no_error_records(svc: ServiceProcess) -> None:
    """No ERROR record and no traceback in the service log. A batch that failed is rolled back and
    replayed, so the end state can be exact while the service deadlocked or crashed on the way:
    the log is the only place that shows it."""
    text = svc.log_text()
    bad = error_records(text) + [line for line in text.splitlines() if line.startswith("Traceback")]
    assert bad == [], error_lines(svc)


def list_records(pds, did: str, collection: str) -> list[dict]:
    """Every record of one collection in a repo, all pages, straight from the PDS."""
    out, cursor = [], None
    while True:
        params = {"repo": did, "collection": collection, "limit": 100, **({"cursor": cursor} if cursor else {})}
        body = ok(xrpc(pds.pds_url, "GET", "com.atproto.repo.listRecords", params=params), "listRecords")
        out += body["records"]
        cursor = body.get("cursor")
        if not body["records"] or not cursor:
            return out


def print_service_log(svc: ServiceProcess, tail: int = 150) -> None:
    """On a failure: the service log's distinct error lines, then its last lines (pytest shows both)."""
    print(f"\n----- {svc.log_path}: error lines -----\n{error_lines(svc)}")
    print(f"\n----- {svc.log_path}: last {tail} lines -----\n{svc.log_tail(tail)}")


@contextlib.contextmanager
def live_firehose(pds):
    """A fake Jetstream fed by the PDS's firehose from now on (only writes made after this), and
    the tap that remembers when each commit went in: yields (js, tap).

    "From now on" needs a fence: the reference PDS hands its sequenced events to live subscribers
    from a polling loop, so writes that returned just before the bridge connected can still arrive
    as live (seen: all 18 commits of a world built a moment earlier, about one run in eight). The
    fence is a throwaway account created once the bridge is connected; its events are sequenced
    after every earlier write, and the tap drops everything up to them."""
    with FakeJetstream() as js:
        tap = Tap(js, fenced=True)
        bridge = FirehoseBridge(pds.firehose_url, tap, cursor=None).start()
        try:
            fence = xrpc(pds.pds_url, "POST", "com.atproto.server.createAccount", timeout=60,
                         json={"handle": f"fence{secrets.token_hex(4)}.test", "password": secrets.token_hex(8),
                               "email": f"fence{secrets.token_hex(4)}@example.com"})
            assert fence.status_code == 200, f"createAccount (fence) -> {fence.status_code} {fence.text[:300]}"
            tap.fence(fence.json()["did"])
            wait_for(lambda: tap.open, 30, "the firehose to carry the fence account")
            yield js, tap
        finally:
            bridge.stop()


@contextlib.contextmanager
def stopped_after(svc: ServiceProcess, tail: int = 150):
    """The service is stopped however the block ends; on a failure its log is printed first."""
    try:
        yield svc
    except BaseException:
        print_service_log(svc, tail)
        raise
    finally:
        svc.stop()
