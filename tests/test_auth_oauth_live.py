"""Sign-in with atproto OAuth and with an app password, end to end against the reference PDS on loopback.

The app runs as the loopback development client (no FEATHERREADER_PUBLIC_URL), the only kind the
reference PDS accepts offline; consent is scripted through the PDS's own sign-in API.
"""
from __future__ import annotations

import gevent
import pytest

from feather.atproto.pds import ScopeMissing
from feather.atproto.syntax import next_tid
from feather.auth import NeedsReauth, declare_scopes, has_scopes, pds_client, service
from feather.auth.oauth import InvalidGrant
from feather.auth.service import AuthService
from feather.db import db
from feather.outbound import GuardedClient
from tests.support.oauth_pds import approve
from tests.support.pds import create_session, pds, xrpc  # noqa: F401

pytestmark = pytest.mark.pds

FOLLOW = "app.bsky.graph.follow"
FOLLOW_SCOPE = "repo:app.bsky.graph.follow?action=create&action=delete"
REAUTH = "Your sign-in with localhost has expired or was revoked. Please sign in again."


class CountingClient(GuardedClient):
    """The guarded client, counting refresh-token grants that actually reach the token endpoint."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.refreshes = 0

    def request(self, method, url, **kwargs):
        if url.endswith("/oauth/token") and (kwargs.get("data") or {}).get("grant_type") == "refresh_token":
            self.refreshes += 1
        return super().request(method, url, **kwargs)


@pytest.fixture
def live_app(make_app, pds):
    declare_scopes(FOLLOW_SCOPE)
    app = make_app(FEATHERREADER_HANDLE_RESOLVER=pds.pds_url, FEATHERREADER_PLC_URL=pds.plc_url,
                   FEATHERREADER_ALLOW_APP_PASSWORDS=True)
    settings = app.config["FEATHER"]
    app.extensions["auth"] = AuthService(settings, http=CountingClient(allow_private_network=True))
    return app


def csrf(client) -> str:
    return client.get("/api/session").json["csrfToken"]


def sign_in(client, pds, name: str = "alice") -> str:
    acct = pds.accounts[name]
    r = client.post("/login", data={"identifier": acct.handle, "csrf_token": csrf(client), "next": "/about"})
    assert r.status_code == 303, r.data
    assert r.headers["Location"].startswith(f"{pds.issuer}/oauth/authorize?client_id=http%3A%2F%2Flocalhost%3F")
    r = client.get("/oauth/callback", query_string=approve(r.headers["Location"], acct.handle, acct.password))
    assert (r.status_code, r.headers["Location"]) == (303, "/about"), r.data
    return acct.did


def grant_follow_scope(client, pds, name: str = "alice") -> None:
    acct = pds.accounts[name]
    r = client.post("/oauth/consent", data={"scope": FOLLOW_SCOPE, "next": "/sync", "csrf_token": csrf(client)})
    assert r.status_code == 303
    r = client.get("/oauth/callback", query_string=approve(r.headers["Location"], acct.handle, acct.password))
    assert (r.status_code, r.headers["Location"]) == (303, "/sync"), r.data


def follow(bob_did: str) -> dict:
    return {"$type": FOLLOW, "subject": bob_did, "createdAt": "2026-01-02T03:04:05.000Z"}


def test_oauth_sign_in_asks_only_for_atproto_and_names_the_account(live_app, pds):
    client = live_app.test_client()
    did = sign_in(client, pds)
    session = client.get("/api/session").json
    assert (session["signedIn"], session["did"], session["handle"], session["needsReauth"]) == (
        True, pds.accounts["alice"].did, "alice.test", False)
    with live_app.app_context():
        assert service().grants.load(did).scope == "atproto"
        assert has_scopes(did, [FOLLOW_SCOPE]) is False
        with pytest.raises(ScopeMissing):
            pds_client(did).create_record(did, FOLLOW, follow(pds.accounts["bob"].did), rkey=next_tid())


def test_follow_created_and_deleted_with_the_dpop_token_then_refreshed(live_app, pds):
    client = live_app.test_client()
    did, bob = sign_in(client, pds), pds.accounts["bob"].did
    grant_follow_scope(client, pds)
    with live_app.app_context():
        svc = service()
        assert svc.grants.load(did).scope == f"atproto {FOLLOW_SCOPE}"
        assert has_scopes(did, [FOLLOW_SCOPE]) is True
        rkey = next_tid()
        created = pds_client(did).create_record(did, FOLLOW, follow(bob), rkey=rkey)
        assert created["uri"] == f"at://{did}/{FOLLOW}/{rkey}"
        assert xrpc(pds.pds_url, "GET", "com.atproto.repo.getRecord",
                    params={"repo": did, "collection": FOLLOW, "rkey": rkey}).json()["value"]["subject"] == bob
        pds_client(did).delete_record(did, FOLLOW, rkey)
        assert xrpc(pds.pds_url, "GET", "com.atproto.repo.getRecord",
                    params={"repo": did, "collection": FOLLOW, "rkey": rkey}).json()["error"] == "RecordNotFound"
        # the PDS answers every DPoP call with a nonce, and it is kept for the next call
        assert svc.grants.load(did).pds_nonce
        before = svc.grants.load(did)
        after = svc.grants.refresh_after_rejection(did, before.access)
        assert (after.access != before.access, after.refresh != before.refresh) == (True, True)
        assert svc.http.refreshes == 1
        rkey = next_tid()
        pds_client(did).create_record(did, FOLLOW, follow(bob), rkey=rkey)
        pds_client(did).delete_record(did, FOLLOW, rkey)


def test_two_concurrent_refreshes_of_one_session_reach_the_server_once(live_app, pds):
    client = live_app.test_client()
    did, bob = sign_in(client, pds), pds.accounts["bob"].did
    grant_follow_scope(client, pds)
    with live_app.app_context():
        svc = service()
        rejected = svc.grants.load(did).access

        def refresh():
            with db.connection_context():
                return svc.grants.refresh_after_rejection(did, rejected).access

        results = [g.value for g in gevent.joinall([gevent.spawn(refresh), gevent.spawn(refresh)],
                                                   raise_error=True)]
        assert svc.http.refreshes == 1
        assert results[0] == results[1] != rejected
        # a replayed refresh token would have killed the session; it is alive
        rkey = next_tid()
        pds_client(did).create_record(did, FOLLOW, follow(bob), rkey=rkey)
        pds_client(did).delete_record(did, FOLLOW, rkey)
        assert svc.grants.load(did).status == "active"


def test_a_revoked_session_becomes_needs_reauth_and_the_user_is_told(live_app, pds):
    client = live_app.test_client()
    did, bob = sign_in(client, pds), pds.accounts["bob"].did
    grant_follow_scope(client, pds)
    with live_app.app_context():
        svc = service()
        grant = svc.grants.load(did)
        # what "revoke access" in the account's settings does: the AS forgets the session
        svc.oauth.revoke(svc.oauth.server(grant.issuer), grant.dpop_key, grant.as_nonce, grant.refresh, None)
        with pytest.raises(NeedsReauth) as err:
            pds_client(did).create_record(did, FOLLOW, follow(bob), rkey=next_tid())
        assert str(err.value) == REAUTH
        assert (svc.grants.load(did).status, svc.grants.load(did).status_reason) == ("needs_reauth", REAUTH)
        with pytest.raises(NeedsReauth):
            pds_client(did)
    assert client.get("/api/session").json["needsReauth"] is True
    assert client.get("/api/session").json["message"] == REAUTH
    page = client.get("/about")
    assert REAUTH.encode() in page.data
    login = client.get("/login")
    assert REAUTH.encode() in login.data and b'value="alice.test"' in login.data
    # signing in again brings the grant back, with the scopes it had
    sign_in(client, pds)
    with live_app.app_context():
        assert service().grants.load(did).status == "active"


def test_app_password_sign_in_writes_and_refreshes(live_app, pds):
    alice, bob = pds.accounts["alice"], pds.accounts["bob"].did
    made = xrpc(pds.pds_url, "POST", "com.atproto.server.createAppPassword", token=create_session(pds, "alice"),
                json={"name": f"feather-{next_tid()}"})
    assert made.status_code == 200, made.text
    client = live_app.test_client()
    r = client.post("/login/password", data={"identifier": alice.handle, "password": made.json()["password"],
                                              "csrf_token": csrf(client), "next": "/about"})
    assert (r.status_code, r.headers.get("Location")) == (303, "/about"), r.data
    assert client.get("/api/session").json["did"] == alice.did
    with live_app.app_context():
        svc = service()
        assert (svc.grants.load(alice.did).kind, has_scopes(alice.did, [FOLLOW_SCOPE])) == ("password", True)
        rkey = next_tid()
        pds_client(alice.did).create_record(alice.did, FOLLOW, follow(bob), rkey=rkey)
        before = svc.grants.load(alice.did)
        after = svc.grants.refresh_after_rejection(alice.did, before.access)
        assert after.refresh != before.refresh
        pds_client(alice.did).delete_record(alice.did, FOLLOW, rkey)


def test_app_password_json_api_signs_in_with_the_csrf_header(live_app, pds):
    bob = pds.accounts["bob"]
    made = xrpc(pds.pds_url, "POST", "com.atproto.server.createAppPassword", token=create_session(pds, "bob"),
                json={"name": f"feather-{next_tid()}"})
    client = live_app.test_client()
    body = {"identifier": bob.handle, "password": made.json()["password"]}
    assert client.post("/api/session", json=body).status_code == 400  # no CSRF header
    r = client.post("/api/session", json=body, headers={"X-CSRF-Token": csrf(client)})
    assert r.status_code == 200, r.data
    assert (r.json["signedIn"], r.json["did"], r.json["handle"]) == (True, bob.did, "bob.test")


def test_a_wrong_app_password_is_a_plain_sentence(live_app, pds):
    client = live_app.test_client()
    r = client.post("/login/password", data={"identifier": "carol.test", "password": "aaaa-bbbb-cccc-dddd",
                                              "csrf_token": csrf(client)})
    assert r.status_code == 400
    assert b"The handle or app password is wrong." in r.data


def test_signing_in_again_ends_the_replaced_oauth_session_at_the_server(live_app, pds):
    laptop, phone = live_app.test_client(), live_app.test_client()
    did = sign_in(laptop, pds)
    with live_app.app_context():
        svc = service()
        old = svc.grants.load(did)
    sign_in(phone, pds)
    with live_app.app_context():
        new = svc.grants.load(did)
        server = svc.oauth.server(old.issuer)
        assert new.refresh != old.refresh
        with pytest.raises(InvalidGrant):  # the replaced session is gone at the authorization server
            svc.oauth.refresh(server, old.dpop_key, old.as_nonce, old.refresh, old.client_kid)
        tokens, _ = svc.oauth.refresh(server, new.dpop_key, new.as_nonce, new.refresh, new.client_kid)
        assert tokens["sub"] == did  # the new one lives
    # Feather's own sessions are per browser: both stay signed in on the one grant
    assert (laptop.get("/api/session").json["did"], phone.get("/api/session").json["did"]) == (did, did)


def test_signing_in_again_with_an_app_password_ends_the_replaced_session(live_app, pds):
    alice = pds.accounts["alice"]
    client = live_app.test_client()
    refresh_tokens = []
    for _ in range(2):
        made = xrpc(pds.pds_url, "POST", "com.atproto.server.createAppPassword", token=create_session(pds, "alice"),
                    json={"name": f"feather-{next_tid()}"})
        r = client.post("/login/password", data={"identifier": alice.handle, "password": made.json()["password"],
                                                  "csrf_token": csrf(client)})
        assert r.status_code == 303, r.data
        with live_app.app_context():
            refresh_tokens.append(service().grants.load(alice.did).refresh)
    old, new = (xrpc(pds.pds_url, "POST", "com.atproto.server.refreshSession", token=t) for t in refresh_tokens)
    assert (old.status_code, new.status_code) == (400, 200), (old.text, new.text)
    assert new.json()["did"] == alice.did
