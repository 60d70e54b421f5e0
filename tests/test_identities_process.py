"""Handles and profiles while the identity network is down, with the whole service running: the
`make run` process (gunicorn -k gevent and its background workers) fed by the fake Jetstream, its
PLC directory a blackhole that accepts connections and never answers. Driven over HTTP only.

Two readers' timelines (FEED_SERVE=all) hold posts by four authors. Both read getFeed with
`profiles=true` at the same moment: the answer comes (handles null, no profiles), and the
blackhole is asked about each author twice (the handle, the profile's PDS). Reading again, then again after a kill -9 and restart
(the stream replays its overlap), asks it nothing more: a failed lookup waits LOOKUP_RETRY_US
before it is tried again, and that is kept in the database, not in the process.

Timing is printed (`-s` shows it); nothing asserts on time.
"""
from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time

import pytest
import requests
from gevent.pool import Pool

from tests.support.fake_jetstream import FakeJetstream, make_commit
from tests.support.jetstream_wire import iso_now
from tests.support.process_world import print_service_log
from tests.support.process_world import wait_for as _wait
from tests.support.service_process import ServiceProcess, service_env

pytestmark = [pytest.mark.slow]

POST, FOLLOW = "app.bsky.feed.post", "app.bsky.graph.follow"
GET_FEED = "/xrpc/com.featherreader.getFeed"
READERS = [f"did:plc:reader{n}aaaaaaaaaaaaaaaaaa" for n in range(2)]
AUTHORS = [f"did:plc:author{n}aaaaaaaaaaaaaaaaaa" for n in range(4)]


class Blackhole:
    """A loopback HTTP 'server' that reads each request line and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[str] = []
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            line = conn.makefile("rb").readline().decode("latin-1").strip()
        except OSError:
            line = "(no request line)"
        with self._lock:
            self.requests.append(line)
            self._held.append(conn)  # open, unanswered, until close()

    def asked(self, dids) -> list[str]:
        with self._lock:
            return sorted(line for line in self.requests if any(f"/{did} " in line for did in dids))

    def close(self) -> None:
        self.sock.close()
        for conn in self._held:
            conn.close()


@contextlib.contextmanager
def blackhole():
    hole = Blackhole()
    try:
        yield hole
    finally:
        hole.close()


def world() -> list[dict]:
    frames = [make_commit(r, FOLLOW, f"f{i}", "create",
                          {"$type": FOLLOW, "subject": a, "createdAt": iso_now()})
              for r in READERS for i, a in enumerate(AUTHORS)]
    frames += [make_commit(a, POST, f"p{i}", "create", {"$type": POST, "text": f"post {i}", "createdAt": iso_now()})
               for i, a in enumerate(AUTHORS)]
    return frames


def read(svc: ServiceProcess, reader: str) -> dict:
    response = requests.get(f"{svc.url}{GET_FEED}", params={"feed": "timeline", "actor": reader, "profiles": "true"},
                            timeout=30)
    assert response.status_code == 200, response.text[:300]
    return response.json()


def both_read(svc: ServiceProcess) -> list[dict]:
    return list(Pool(2).imap(lambda r: read(svc, r), READERS))


def test_timelines_answer_and_stop_asking_a_blackholed_plc_through_kill9(database_url, tmp_path):
    t0 = time.monotonic()
    with FakeJetstream() as js, blackhole() as plc:
        svc = ServiceProcess(service_env(
            DATABASE_URL=database_url, FEATHERREADER_ENV="development", SECRET_KEY=secrets.token_hex(32),
            FEATHERREADER_DATA_DIR=tmp_path / "data", FEATHERREADER_JETSTREAM_HOSTS=js.url,
            FEATHERREADER_ALLOW_PRIVATE_NETWORK=True, FEATHERREADER_PLC_URL=plc.url,
            FEATHERREADER_HANDLE_RESOLVER="", FEED_SERVE="all", FEATHERREADER_LOG_LEVEL="INFO"),
            tmp_path / "service.log")
        try:
            svc.start()
            js.append(world())
            _wait(lambda: all(len(read(svc, r)["records"]) == len(AUTHORS) for r in READERS),
                  60, "both timelines hold every author's post")
            # The wait's reads (profiles=true) already met the blackhole, and what they asked is all it
            # is ever asked: each author's DID document once for the handle, once for the profile.
            expected = sorted(f"GET /{a} HTTP/1.1" for a in AUTHORS for _ in ("handle", "profile"))
            _wait(lambda: plc.asked(AUTHORS) == expected, 30,
                  lambda: f"two look-ups of each author: {plc.asked(AUTHORS)}")
            started = time.monotonic()
            bodies = both_read(svc)
            print(f"two concurrent reads with the PLC blackholed: {time.monotonic() - started:.2f} s")
            for body in bodies:
                assert sorted((p["did"], p["handle"]) for p in body["profiles"]) == [(a, None) for a in sorted(AUTHORS)]
                assert sorted(r["did"] for r in body["records"]) == sorted(AUTHORS)
            assert plc.asked(AUTHORS) == expected

            svc.kill9()
            svc.start()
            js.append([make_commit(AUTHORS[0], POST, "p9", "create",
                                   {"$type": POST, "text": "after the restart", "createdAt": iso_now()})])
            _wait(lambda: all(len(read(svc, r)["records"]) == len(AUTHORS) + 1 for r in READERS),
                  60, "the post made after the restart reached both timelines")
            both_read(svc)
            assert plc.asked(AUTHORS) == expected
            print(f"the readers' own DID documents (the first-read backfill): {plc.asked(READERS)}")
        except BaseException:
            print_service_log(svc, 80)
            raise
        finally:
            svc.stop()
    print(f"total {time.monotonic() - t0:.1f} s")
