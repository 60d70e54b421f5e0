"""`flask dev-event --write` and the route's `"write": true` against Bluesky's reference PDS: the
record is written to the account's repo with its stored session, then the event built from the
PDS's answer reaches the handlers (the network feature's subscription row), and a refusal by the
PDS is its sentence, with nothing dispatched."""
from __future__ import annotations

import json

import pytest

from feather.atproto.syntax import next_tid
from feather.db import current_dialect, db
from tests.support.pds import create_session, xrpc

pytestmark = pytest.mark.pds

NSID = "community.lexicon.rss.subscription"  # the network feature's record; the PDS does not validate it


@pytest.fixture
def signed_in(make_app, pds):
    """alice, an operator, signed in with an app password through the JSON API: (app, client, CSRF token)."""
    alice = pds.accounts["alice"]
    app = make_app(FEATHERREADER_ENV="development", FEATHERREADER_NETWORK_INDEX=True,
                   FEATHERREADER_HANDLE_RESOLVER=pds.pds_url, FEATHERREADER_PLC_URL=pds.plc_url,
                   FEATHERREADER_ALLOW_APP_PASSWORDS=True, FEATHERREADER_ADMIN_DIDS=[alice.did])
    made = xrpc(pds.pds_url, "POST", "com.atproto.server.createAppPassword", token=create_session(pds, "alice"),
                json={"name": f"dev-event-{next_tid()}"})
    assert made.status_code == 200, made.text
    client = app.test_client()
    r = client.post("/api/session", json={"identifier": alice.handle, "password": made.json()["password"]},
                    headers={"X-CSRF-Token": client.get("/api/session").json["csrfToken"]})
    assert (r.status_code, r.json["did"]) == (200, alice.did), r.data
    before = _rkeys(pds, alice.did)
    yield app, client, r.json["csrfToken"]
    token = create_session(pds, "alice")  # the PDS is the session's: leave alice's repo as it was
    for rkey in _rkeys(pds, alice.did) - before:
        gone = xrpc(pds.pds_url, "POST", "com.atproto.repo.deleteRecord", token=token,
                    json={"repo": alice.did, "collection": NSID, "rkey": rkey})
        assert gone.status_code == 200, gone.text


def _rkeys(pds, did: str) -> set[str]:
    r = xrpc(pds.pds_url, "GET", "com.atproto.repo.listRecords", params={"repo": did, "collection": NSID, "limit": 100})
    assert r.status_code == 200, r.text
    return {record["uri"].rsplit("/", 1)[-1] for record in r.json()["records"]}


def on_pds(pds, did: str, rkey: str):
    return xrpc(pds.pds_url, "GET", "com.atproto.repo.getRecord",
                params={"repo": did, "collection": NSID, "rkey": rkey})


def subscriptions(app, did: str) -> list[tuple]:
    with app.app_context(), db.connection_context():
        return [tuple(row) for row in db.execute_sql(
            current_dialect().q("SELECT rkey, feed_url FROM net_subscription WHERE did = ? ORDER BY rkey"), (did,))]


def run(app, *args):
    result = app.test_cli_runner().invoke(args=["dev-event", "--write", *args])
    return result.exit_code, result.output


def test_write_creates_updates_and_deletes_on_the_pds_and_each_event_reaches_the_handlers(signed_in, pds):
    app, _, _ = signed_in
    alice = pds.accounts["alice"].did
    rkey = next_tid()
    code, out = run(app, "--as", alice, "--collection", NSID, "--rkey", rkey,
                    "--record", '{"url": "https://one.example/feed.xml"}')
    assert code == 0, out
    commit = json.loads(out)["frame"]["commit"]
    stored = on_pds(pds, alice, rkey)
    assert stored.status_code == 200, stored.text
    assert stored.json()["uri"] == f"at://{alice}/{NSID}/{rkey}"
    assert (commit["operation"], commit["rkey"], commit["cid"]) == ("create", rkey, stored.json()["cid"])
    assert stored.json()["value"]["url"] == commit["record"]["url"] == "https://one.example/feed.xml"
    assert json.loads(out)["subscriptions"] == ["network"]
    assert subscriptions(app, alice) == [(rkey, "https://one.example/feed.xml")]

    code, out = run(app, "--did", alice, "--op", "update", "--collection", NSID, "--rkey", rkey,
                    "--record", '{"url": "https://two.example/feed.xml"}')
    assert code == 0, out
    stored = on_pds(pds, alice, rkey)
    assert (stored.json()["value"]["url"], json.loads(out)["frame"]["commit"]["cid"]) == (
        "https://two.example/feed.xml", stored.json()["cid"])
    assert subscriptions(app, alice) == [(rkey, "https://two.example/feed.xml")]

    code, out = run(app, "--did", alice, "--op", "delete", "--collection", NSID, "--rkey", rkey)
    assert code == 0, out
    assert (on_pds(pds, alice, rkey).status_code, on_pds(pds, alice, rkey).json()["error"]) == (400, "RecordNotFound")
    assert subscriptions(app, alice) == []


def test_the_pds_refusing_the_write_is_its_sentence_and_nothing_is_dispatched(signed_in, pds):
    app, _, _ = signed_in
    alice = pds.accounts["alice"].did
    rkey = next_tid()
    code, out = run(app, "--as", alice, "--collection", NSID, "--rkey", rkey,
                    "--record", '{"$type": "app.example.other", "url": "https://refused.example/feed.xml"}')
    assert (code, out) == (1, "Error: The account's server refused the write (InvalidRequest): "
                              f"Invalid $type: expected {NSID}, got app.example.other\n")
    assert on_pds(pds, alice, rkey).status_code == 400
    assert subscriptions(app, alice) == []


def test_the_route_writes_to_the_signed_in_operators_own_repo(signed_in, pds):
    app, client, token = signed_in
    alice, bob = pds.accounts["alice"].did, pds.accounts["bob"].did
    rkey = next_tid()
    body = {"write": True, "collection": NSID, "rkey": rkey, "record": {"url": "https://route.example/feed.xml"}}
    r = client.post("/admin/dev/jetstream-event", json=body, headers={"X-CSRF-Token": token},
                    environ_base={"REMOTE_ADDR": "127.0.0.1"})
    assert r.status_code == 200, r.data
    stored = on_pds(pds, alice, rkey)
    assert (stored.status_code, r.json["frame"]["commit"]["cid"]) == (200, stored.json()["cid"])
    assert (r.json["frame"]["did"], r.json["subscriptions"]) == (alice, ["network"])
    assert subscriptions(app, alice) == [(rkey, "https://route.example/feed.xml")]

    r = client.post("/admin/dev/jetstream-event", json={**body, "did": bob, "rkey": next_tid()},
                    headers={"X-CSRF-Token": token}, environ_base={"REMOTE_ADDR": "127.0.0.1"})
    assert (r.status_code, r.json) == (403, {
        "error": "Forbidden", "message": "With write, the record goes to your own account only: leave out did."})
    assert subscriptions(app, bob) == []
