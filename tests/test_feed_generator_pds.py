"""The feed generator against Bluesky's reference PDS: an operator publishes the feed's record to
their repo, a viewer's PDS-minted service-auth token reads the viewer's own timeline, and bad
tokens (wrong aud, wrong lxm, expired, another account's key) are refused."""
from __future__ import annotations

from tests.fixtures.feeds.feedkit import settled_us

import base64
import json
import time

import pytest

from feather.db import db
from tests.browser.helpers import app_password
from tests.fixtures.feeds.feedkit import feeds_app, join_backfills, toml
from tests.support.pds import create_session, tid_now, xrpc
from tests.test_sync_views import csrf

pytestmark = pytest.mark.pds

PUBLIC = "http://localhost:5123"
SERVICE = "did:web:localhost%3A5123"
SKELETON = "app.bsky.feed.getFeedSkeleton"
GENERATOR, FOLLOW, POST = "app.bsky.feed.generator", "app.bsky.graph.follow", "app.bsky.feed.post"


def _create(pds, name, collection, record, rkey=None):
    acct = pds.accounts[name]
    body = {"repo": acct.did, "collection": collection, "record": {"$type": collection, **record}}
    if rkey:
        body["rkey"] = rkey
    r = xrpc(pds.pds_url, "POST", "com.atproto.repo.createRecord", token=create_session(pds, name), json=body)
    assert r.status_code == 200, r.text
    return r.json()["uri"]


def _now() -> str:
    """Millisecond precision: two posts made in one second must still be ordered by their time."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def service_token(pds, name, aud=SERVICE, lxm=SKELETON) -> str:
    r = xrpc(pds.pds_url, "GET", "com.atproto.server.getServiceAuth", params={"aud": aud, "lxm": lxm},
             token=create_session(pds, name))
    assert r.status_code == 200, r.text
    return r.json()["token"]


def generator_record(pds, name):
    return xrpc(pds.pds_url, "GET", "com.atproto.repo.getRecord",
                params={"repo": pds.accounts[name].did, "collection": GENERATOR, "rkey": "timeline"})


def sign_in(client, pds, name):
    r = client.post("/login/password", data={"csrf_token": csrf(client), "identifier": pds.accounts[name].handle,
                                             "password": app_password(pds, name), "next": "/timeline"})
    assert r.status_code == 303, r.text


@pytest.fixture
def app(make_app, tmp_path, pds):
    app = feeds_app(make_app, tmp_path, toml(), FEED_SERVE="signed-in", FEATHERREADER_PLC_URL=pds.plc_url,
                    FEATHERREADER_HANDLE_RESOLVER=pds.pds_url, FEATHERREADER_PUBLIC_URL=PUBLIC,
                    FEATHERREADER_ADMIN_DIDS=[pds.accounts["alice"].did], FEATHERREADER_ALLOW_APP_PASSWORDS=True)
    yield app
    join_backfills(app)


def skeleton(app, token, feed):
    return app.test_client().get(f"/xrpc/{SKELETON}", query_string={"feed": feed},
                                 headers={"Authorization": f"Bearer {token}"} if token else {})


def test_publish_then_read_as_a_viewer_then_unpublish(app, pds):
    from feather.feeds.tasks import authors

    alice, bob = pds.accounts["alice"], pds.accounts["bob"]
    feed_uri = f"at://{alice.did}/{GENERATOR}/timeline"
    # The operator publishes from the page (an app-password grant may write any collection).
    operator = app.test_client()
    sign_in(operator, pds, "alice")
    r = operator.post("/feeds/publish", data={"csrf_token": csrf(operator), "action": "publish", "feed": "timeline",
                                              "display_name": "Following", "description": "Everyone you follow"})
    assert r.status_code == 303
    stored = generator_record(pds, "alice").json()
    assert (stored["uri"], {k: v for k, v in stored["value"].items() if k != "createdAt"}) == (feed_uri, {
        "$type": GENERATOR, "did": SERVICE, "displayName": "Following", "description": "Everyone you follow"})
    assert operator.get("/xrpc/app.bsky.feed.describeFeedGenerator").json == {"did": SERVICE,
                                                                               "feeds": [{"uri": feed_uri}]}

    # A viewer: bob follows carol on his PDS, carol posts, bob signs in here once (so he is served).
    _create(pds, "bob", FOLLOW, {"subject": pds.accounts["carol"].did, "createdAt": _now()}, rkey=tid_now())
    made = []
    for i in range(2):
        made.append(_create(pds, "carol", POST, {"text": f"for the skeleton {i}", "createdAt": _now()}))
        time.sleep(0.002)  # distinct createdAt milliseconds, not a timing assertion
    sign_in(app.test_client(), pds, "bob")
    join_backfills(app)  # bob's follows listed from his PDS
    with app.app_context(), db.connection_context():
        while authors.fetch_tick(app, app.extensions["feeds"], now_us=settled_us()):  # whom he follows: newest posts fetched
            pass
    r = skeleton(app, service_token(pds, "bob"), feed_uri)
    assert r.status_code == 200, r.text
    assert [item["post"] for item in r.json["feed"][:2]] == list(reversed(made))

    # Unpublishing deletes the record from the operator's repo and the generator forgets the feed.
    operator.post("/feeds/publish", data={"csrf_token": csrf(operator), "action": "unpublish", "feed": "timeline"})
    assert (generator_record(pds, "alice").status_code, generator_record(pds, "alice").json()["error"]) == (
        400, "RecordNotFound")
    assert skeleton(app, service_token(pds, "bob"), feed_uri).json["error"] == "UnknownFeed"
    assert bob.did  # (named for the reader of this walk-through)


def _publish_directly(app, pds):
    from feather.db import current_dialect

    uri = f"at://{pds.accounts['alice'].did}/{GENERATOR}/timeline"
    with app.app_context(), db.connection_context():
        db.execute_sql(current_dialect().q(
            "INSERT INTO feed_generators (uri, publisher_did, rkey, feed, display_name, published_us)"
            " VALUES (?, ?, 'timeline', 'timeline', 'Following', 1)"), (uri, pds.accounts["alice"].did))
    return uri


@pytest.mark.parametrize("aud, lxm, error", [
    ("did:web:elsewhere.example", SKELETON, "BadJwtAudience"),
    (SERVICE, "app.bsky.feed.getFeed", "BadJwtLexiconMethod"),
])
def test_pds_minted_tokens_for_another_service_or_method_are_refused(app, pds, aud, lxm, error):
    r = skeleton(app, service_token(pds, "bob", aud=aud, lxm=lxm), _publish_directly(app, pds))
    assert (r.status_code, r.json["error"]) == (401, error)


def test_a_token_claiming_another_account_is_refused_by_its_signature(app, pds):
    header, claims, signature = service_token(pds, "carol").split(".")
    body = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    body["iss"] = pds.accounts["bob"].did  # carol's key, bob's name
    forged = base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()
    r = skeleton(app, f"{header}.{forged}.{signature}", _publish_directly(app, pds))
    assert (r.status_code, r.json["error"]) == (401, "BadJwtSignature")


def test_a_pds_minted_token_verifies_with_the_key_from_the_plc_until_it_expires(app, pds):
    from feather.feeds.web.service_auth import AuthError, verify
    from feather.feeds.read.sources import sources_for

    token = service_token(pds, "bob")
    with app.app_context():
        key_of = sources_for(app).signing_key
        assert verify(token, audience=SERVICE, method=SKELETON, key_of=key_of) == pds.accounts["bob"].did
        with pytest.raises(AuthError) as refused:  # the same token an hour on: the PDS minted it for 60 s
            verify(token, audience=SERVICE, method=SKELETON, key_of=key_of, now=time.time() + 3600)
    assert refused.value.error == "JwtExpired"


def test_the_flask_command_publishes_and_unpublishes_with_an_app_password(app, pds):
    alice = pds.accounts["alice"]
    runner = app.test_cli_runner()
    password = app_password(pds, "alice")
    out = runner.invoke(args=["feeds", "publish", "timeline", "--as", alice.handle, "--display-name", "Scripted",
                              "--app-password", password])
    assert (out.exit_code, out.output) == (0, f"at://{alice.did}/{GENERATOR}/timeline\n"), out.output
    assert generator_record(pds, "alice").json()["value"]["displayName"] == "Scripted"
    out = runner.invoke(args=["feeds", "unpublish", "timeline", "--as", alice.handle, "--app-password", password])
    assert out.exit_code == 0, out.output
    assert generator_record(pds, "alice").status_code == 400
    out = runner.invoke(args=["feeds", "publish", "nope", "--as", alice.handle, "--display-name", "X",
                              "--app-password", password])
    assert (out.exit_code, out.output) == (1, "Error: There is no feed 'nope' of posts to publish on this instance.\n")
