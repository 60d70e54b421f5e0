"""Graph sync end to end against Bluesky's reference PDS on loopback, with its firehose bridged into the
fake Jetstream (pds_jetstream).

alice signs in with an app password through the JSON API, turns sync on for Bluesky + Tangled, and
follows bob on Bluesky with a real record. The bridged Jetstream frame goes through the sync handler
(the same function the engine's `sync:<n>` subscription dispatches to), the runner writes the Tangled
follow into alice's real repo, the unfollow propagates as a delete, and deleting one of two duplicate
follow records propagates nothing. A subject without a Tangled profile waits until the profile exists.
"""
from __future__ import annotations

import json
import time

import pytest

from feather import sql
from feather.atproto.syntax import next_tid
from tests.support.pds import create_session, xrpc

pytestmark = pytest.mark.pds

BSKY = "app.bsky.graph.follow"
TANGLED = "sh.tangled.graph.follow"
TANGLED_PROFILE = "sh.tangled.actor.profile"


class Stream:
    """One DID's frames of some collections from the fake Jetstream, handed in order to the sync handler
    the engine would dispatch them to (follows: the shard subscription; profiles: the global one)."""

    def __init__(self, app, js, did: str, collections: list[str], since_us: int, kind: str = "follows"):
        import websocket

        from feather.sync.handler import make_handlers

        self.app = app
        self.handler = dict(zip(("follows", "profiles"), make_handlers(app.config["FEATHER"])))[kind]
        self.ws = websocket.create_connection(
            js.subscribe_url(wantedCollections=collections, wantedDids=did, cursor=since_us), timeout=15)

    def until(self, operation: str, collection: str, rkey: str, deadline_s: float = 15.0) -> None:
        """Dispatch every frame up to and including this commit (the echoes of sync's writes included)."""
        from feather.db import db
        from feather.jetstream.events import CommitEvent, decode

        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            event = decode(self.ws.recv())
            if not isinstance(event, CommitEvent):
                continue
            with self.app.app_context(), db.connection_context(), db.atomic():
                self.handler([event])
            if (event.operation, event.collection, event.rkey) == (operation, collection, rkey):
                return
        raise AssertionError(f"no {operation} {collection}/{rkey} frame before the deadline")

    def close(self) -> None:
        self.ws.close()


def _records(pds, did: str, collection: str) -> dict[str, str]:
    r = xrpc(pds.pds_url, "GET", "com.atproto.repo.listRecords",
             params={"repo": did, "collection": collection, "limit": 100})
    assert r.status_code == 200, r.text
    return {rec["uri"].rsplit("/", 1)[-1]: rec["value"]["subject"] for rec in r.json()["records"]}


def _put(pds, token: str, did: str, collection: str, rkey: str, record: dict) -> None:
    r = xrpc(pds.pds_url, "POST", "com.atproto.repo.putRecord", token=token,
             json={"repo": did, "collection": collection, "rkey": rkey, "record": {"$type": collection, **record}})
    assert r.status_code == 200, r.text


def _delete(pds, token: str, did: str, collection: str, rkey: str) -> None:
    r = xrpc(pds.pds_url, "POST", "com.atproto.repo.deleteRecord", token=token,
             json={"repo": did, "collection": collection, "rkey": rkey})
    assert r.status_code == 200, r.text


def _follow(pds, token, did, collection, subject) -> str:
    rkey = next_tid()
    _put(pds, token, did, collection, rkey, {"subject": subject, "createdAt": "2026-11-30T00:00:00.000Z"})
    return rkey


def _engine(app):
    """One turn of the background jobs: backfill bursts until idle, then the runner."""
    from feather.db import db
    from feather.sync import backfill
    from feather.sync.follow_writer import default_writer
    from feather.sync.runner import Runner

    with app.app_context(), db.connection_context():
        writer = default_writer(app)
        while backfill.burst(writer, sql.now_s):
            pass
        return Runner(writer, app.config["FEATHER"]).tick(concurrent=False)


def _unfollow_rows(app) -> int:
    from tests.test_sync_views import in_db

    return in_db(app, lambda: sql.scalar("SELECT COUNT(*) FROM sync_queue WHERE kind = 'unfollow'", default=0))


def test_follow_unfollow_and_duplicate_against_the_reference_pds(make_app, pds_jetstream):
    pds, js = pds_jetstream
    alice, bob, carol = (pds.accounts[n] for n in ("alice", "bob", "carol"))
    app = make_app(FEATHERREADER_HANDLE_RESOLVER=pds.pds_url, FEATHERREADER_PLC_URL=pds.plc_url,
                   FEATHERREADER_ALLOW_APP_PASSWORDS=True)
    alice_token, bob_token, carol_token = (create_session(pds, n) for n in ("alice", "bob", "carol"))
    _put(pds, bob_token, bob.did, TANGLED_PROFILE, "self", {"description": "bob on Tangled"})
    since_us = int(time.time() * 1_000_000) - 1_000_000
    for collection in (BSKY, TANGLED):  # a clean slate on the shared session PDS
        for rkey in _records(pds, alice.did, collection):
            _delete(pds, alice_token, alice.did, collection, rkey)

    # Sign in the way a script does: app password through the JSON API, then the CSRF header.
    made = xrpc(pds.pds_url, "POST", "com.atproto.server.createAppPassword", token=alice_token,
                json={"name": f"sync-e2e-{next_tid()}"})
    assert made.status_code == 200, made.text
    client = app.test_client()
    token = client.get("/api/session").json["csrfToken"]
    r = client.post("/api/session", json={"identifier": alice.handle, "password": made.json()["password"]},
                    headers={"X-CSRF-Token": token})
    assert (r.status_code, r.json["did"]) == (200, alice.did), r.data
    token = r.json["csrfToken"]  # a new session, a new token

    r = client.post("/api/sync", json={"enabled": True, "apps": ["bluesky", "tangled"]},
                    headers={"X-CSRF-Token": token})
    assert (r.status_code, r.json["enabled"], r.json["apps"]) == (200, True, ["bluesky", "tangled"]), r.data
    _engine(app)
    assert client.get("/api/sync").json["backfill"] == {"listed": 2, "total": 2, "done": True}

    stream = Stream(app, js, alice.did, [BSKY, TANGLED], since_us)
    carols_profile = Stream(app, js, carol.did, [TANGLED_PROFILE], since_us, kind="profiles")
    try:
        # 1. alice follows bob on Bluesky: the runner follows him on Tangled, in her real repo.
        bsky_rkey = _follow(pds, alice_token, alice.did, BSKY, bob.did)
        stream.until("create", BSKY, bsky_rkey)
        assert _engine(app) == 1
        (tangled_rkey, subject), = _records(pds, alice.did, TANGLED).items()
        assert subject == bob.did
        stream.until("create", TANGLED, tangled_rkey)  # the echo of sync's own write propagates nothing
        assert _engine(app) == 0
        assert list(_records(pds, alice.did, BSKY).values()) == [bob.did]

        # 2. the unfollow propagates as a delete of exactly the record sync wrote.
        _delete(pds, alice_token, alice.did, BSKY, bsky_rkey)
        stream.until("delete", BSKY, bsky_rkey)
        assert _engine(app) == 1
        assert _records(pds, alice.did, TANGLED) == {}
        stream.until("delete", TANGLED, tangled_rkey)
        assert _unfollow_rows(app) == 1

        # 3. two Bluesky records for bob: deleting one is cleanup, not an unfollow.
        first = _follow(pds, alice_token, alice.did, BSKY, bob.did)
        second = _follow(pds, alice_token, alice.did, BSKY, bob.did)
        stream.until("create", BSKY, second)
        assert _engine(app) == 1
        (tangled_rkey, _), = _records(pds, alice.did, TANGLED).items()
        stream.until("create", TANGLED, tangled_rkey)
        _delete(pds, alice_token, alice.did, BSKY, second)
        stream.until("delete", BSKY, second)
        assert _engine(app) == 0
        assert _unfollow_rows(app) == 1  # still only the one from step 2
        assert _records(pds, alice.did, TANGLED) == {tangled_rkey: bob.did}
        assert _records(pds, alice.did, BSKY) == {first: bob.did}

        # 4. carol has no Tangled profile: she waits, and is followed once her profile exists.
        carol_rkey = _follow(pds, alice_token, alice.did, BSKY, carol.did)
        stream.until("create", BSKY, carol_rkey)
        _engine(app)
        assert client.get("/api/sync").json["waiting"] == 1
        assert carol.did not in _records(pds, alice.did, TANGLED).values()
        _put(pds, carol_token, carol.did, TANGLED_PROFILE, "self", {"description": "carol on Tangled"})
        carols_profile.until("create", TANGLED_PROFILE, "self")
        assert _engine(app) == 1
        assert sorted(_records(pds, alice.did, TANGLED).values()) == sorted([bob.did, carol.did])
    finally:
        stream.close()
        carols_profile.close()
        for collection in (BSKY, TANGLED):  # leave the shared PDS as we found it
            for rkey in _records(pds, alice.did, collection):
                _delete(pds, alice_token, alice.did, collection, rkey)
        for did, tok in ((bob.did, bob_token), (carol.did, carol_token)):
            xrpc(pds.pds_url, "POST", "com.atproto.repo.deleteRecord", token=tok,
                 json={"repo": did, "collection": TANGLED_PROFILE, "rkey": "self"})
    activity = client.get("/api/sync/activity").json["activity"]
    assert {"follow", "unfollow", "waiting"} <= {a["kind"] for a in activity}
    assert json.dumps(activity)  # plain JSON for scripts



def test_signing_in_again_resumes_a_set_paused_because_its_session_was_gone(make_app, pds_jetstream):
    from feather.sync.store import get_set, pause
    from tests.test_sync_views import in_db

    pds, _js = pds_jetstream
    alice = pds.accounts["alice"]
    app = make_app(FEATHERREADER_HANDLE_RESOLVER=pds.pds_url, FEATHERREADER_PLC_URL=pds.plc_url,
                   FEATHERREADER_ALLOW_APP_PASSWORDS=True)
    made = xrpc(pds.pds_url, "POST", "com.atproto.server.createAppPassword", token=create_session(pds, "alice"),
                json={"name": f"sync-resume-{next_tid()}"})
    assert made.status_code == 200, made.text

    def sign_in(client):
        token = client.get("/api/session").json["csrfToken"]
        r = client.post("/api/session", json={"identifier": alice.handle, "password": made.json()["password"]},
                        headers={"X-CSRF-Token": token})
        assert r.status_code == 200, r.data
        return r.json["csrfToken"]

    client = app.test_client()
    token = sign_in(client)
    r = client.post("/api/sync", json={"enabled": True, "apps": ["bluesky", "tangled"]},
                    headers={"X-CSRF-Token": token})
    assert r.status_code == 200, r.data
    in_db(app, lambda: pause(alice.did, "signed out", int(time.time())))
    assert client.get("/api/sync").json["paused"] is True
    sign_in(app.test_client())  # a new sign-in, from another browser
    state = client.get("/api/sync").json
    assert (state["paused"], state["pause_reason"]) == (False, None)
    assert in_db(app, lambda: get_set(alice.did).next_sweep_at) <= int(time.time())
