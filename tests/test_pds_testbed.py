"""The reference-PDS test bed works from Python (tests/pds/start-pds.mjs + tests/support/pds.py).

Facts asserted here are the ones the app's own PDS tests lean on: DID docs from the local PLC point at the
local PDS, unauthenticated reads see a Bearer-token write, deletes answer 400 RecordNotFound, service-auth
tokens have a known shape, and rate limiting produces 429 + RateLimit-* headers.
"""
from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.support.pds import create_session, tid_now, xrpc

pytestmark = [pytest.mark.pds, pytest.mark.once]  # the testbed itself, no database

FOLLOW = "app.bsky.graph.follow"


def _jwt_part(token: str, i: int) -> dict:
    part = token.split(".")[i]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def _follow(subject: str) -> dict:
    return {"$type": FOLLOW, "subject": subject, "createdAt": "2026-01-02T03:04:05.678Z"}


def test_accounts_exist_and_resolve_through_plc(pds):
    assert pds.pds_url.startswith("http://localhost:") and pds.plc_url.startswith("http://localhost:")
    assert pds.issuer == pds.pds_url
    assert pds.service_did == "did:web:localhost"
    assert sorted(pds.accounts) == ["alice", "bob", "carol"]
    assert len({a.did for a in pds.accounts.values()}) == 3
    for name, acct in pds.accounts.items():
        assert acct.handle == f"{name}.test"
        assert acct.did.startswith("did:plc:") and len(acct.did) == 32
        doc = requests.get(f"{pds.plc_url}/{acct.did}", timeout=10)
        assert doc.status_code == 200
        doc = doc.json()
        assert doc["id"] == acct.did
        assert doc["alsoKnownAs"] == [f"at://{acct.handle}"]
        assert doc["service"] == [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer",
                                   "serviceEndpoint": pds.pds_url}]
        assert [vm["id"] for vm in doc["verificationMethod"]] == ["#atproto"]
        r = xrpc(pds.pds_url, "GET", "com.atproto.identity.resolveHandle", params={"handle": acct.handle})
        assert (r.status_code, r.json()) == (200, {"did": acct.did})
        r = xrpc(pds.pds_url, "GET", "com.atproto.repo.describeRepo", params={"repo": acct.did})
        assert r.status_code == 200
        assert (r.json()["handle"], r.json()["did"], r.json()["handleIsCorrect"]) == (acct.handle, acct.did, True)
    # rate limiting is off on this instance: no RateLimit-* headers at all
    r = xrpc(pds.pds_url, "GET", "com.atproto.server.describeServer")
    assert r.status_code == 200 and not [h for h in r.headers if h.lower().startswith("ratelimit")]
    assert r.json()["availableUserDomains"] == [".test", ".example"]
    assert r.json()["inviteCodeRequired"] is False


def test_follow_create_list_get_delete(pds):
    alice, bob = pds.accounts["alice"], pds.accounts["bob"]
    token = create_session(pds, "alice")
    assert _jwt_part(token, 0) == {"typ": "at+jwt", "alg": "HS256"}
    claims = _jwt_part(token, 1)
    assert (claims["scope"], claims["aud"], claims["sub"]) == ("com.atproto.access", "did:web:localhost", alice.did)
    assert claims["exp"] - claims["iat"] == 2 * 3600

    rkey, record = tid_now(), _follow(bob.did)
    uri = f"at://{alice.did}/{FOLLOW}/{rkey}"
    r = xrpc(pds.pds_url, "POST", "com.atproto.repo.createRecord", token=token,
             json={"repo": alice.did, "collection": FOLLOW, "rkey": rkey, "record": record})
    assert r.status_code == 200, r.text
    created = r.json()
    assert created["uri"] == uri
    assert created["validationStatus"] == "valid"
    assert created["cid"].startswith("bafyrei") and len(created["cid"]) == 59
    assert set(created["commit"]) == {"cid", "rev"}

    # unauthenticated reads see it, byte-for-byte
    listed = xrpc(pds.pds_url, "GET", "com.atproto.repo.listRecords", params={"repo": alice.did, "collection": FOLLOW})
    assert listed.status_code == 200
    assert listed.json()["records"] == [{"uri": uri, "cid": created["cid"], "value": record}]
    got = xrpc(pds.pds_url, "GET", "com.atproto.repo.getRecord",
               params={"repo": alice.handle, "collection": FOLLOW, "rkey": rkey})
    assert (got.status_code, got.json()) == (200, {"uri": uri, "cid": created["cid"], "value": record})

    # no token -> 401 AuthMissing; someone else's token on alice's repo -> refused
    r = xrpc(pds.pds_url, "POST", "com.atproto.repo.deleteRecord",
             json={"repo": alice.did, "collection": FOLLOW, "rkey": rkey})
    assert (r.status_code, r.json()["error"]) == (401, "AuthMissing")
    r = xrpc(pds.pds_url, "POST", "com.atproto.repo.deleteRecord", token=create_session(pds, "bob"),
             json={"repo": alice.did, "collection": FOLLOW, "rkey": rkey})
    assert (r.status_code, r.json()["error"]) == (401, "AuthenticationRequired")

    r = xrpc(pds.pds_url, "POST", "com.atproto.repo.deleteRecord", token=token,
             json={"repo": alice.did, "collection": FOLLOW, "rkey": rkey})
    assert r.status_code == 200, r.text
    assert set(r.json()["commit"]) == {"cid", "rev"}
    gone = xrpc(pds.pds_url, "GET", "com.atproto.repo.getRecord",
                params={"repo": alice.did, "collection": FOLLOW, "rkey": rkey})
    assert gone.status_code == 400
    assert gone.json()["error"] == "RecordNotFound"
    listed = xrpc(pds.pds_url, "GET", "com.atproto.repo.listRecords", params={"repo": alice.did, "collection": FOLLOW})
    assert listed.json()["records"] == []


def test_get_service_auth_token_shape(pds):
    alice, bob = pds.accounts["alice"], pds.accounts["bob"]
    token = create_session(pds, "alice")
    before = int(time.time())
    r = xrpc(pds.pds_url, "GET", "com.atproto.server.getServiceAuth", token=token,
             params={"aud": bob.did, "lxm": "com.atproto.repo.createRecord"})
    assert r.status_code == 200, r.text
    assert list(r.json()) == ["token"]
    svc = r.json()["token"]
    assert svc.count(".") == 2
    # signed with the account's repo key (the DID doc's #atproto secp256k1 key), 60 s lifetime
    assert _jwt_part(svc, 0) == {"typ": "JWT", "alg": "ES256K"}
    claims = _jwt_part(svc, 1)
    assert set(claims) == {"iat", "iss", "aud", "exp", "lxm", "jti"}
    assert (claims["iss"], claims["aud"], claims["lxm"]) == (alice.did, bob.did, "com.atproto.repo.createRecord")
    assert before - 2 <= claims["iat"] <= before + 5
    assert claims["exp"] - claims["iat"] == 60
    assert len(claims["jti"]) == 32 and int(claims["jti"], 16) >= 0
    # without lxm the claim is simply absent; without a token the call is refused
    r = xrpc(pds.pds_url, "GET", "com.atproto.server.getServiceAuth", token=token, params={"aud": bob.did})
    assert r.status_code == 200 and set(_jwt_part(r.json()["token"], 1)) == {"iat", "iss", "aud", "exp", "jti"}
    r = xrpc(pds.pds_url, "GET", "com.atproto.server.getServiceAuth", params={"aud": bob.did})
    assert (r.status_code, r.json()["error"]) == (401, "AuthMissing")


def test_oauth_discovery_is_served_on_loopback(pds):
    """What the OAuth tests will build on: the PDS is its own authorization server, issuer http://localhost:<port>."""
    base = pds.pds_url
    r = requests.get(f"{base}/.well-known/oauth-protected-resource", timeout=10)
    assert r.status_code == 200
    assert r.json() == {"resource": base, "authorization_servers": [base], "scopes_supported": [],
                        "bearer_methods_supported": ["header"], "resource_documentation": "https://atproto.com"}
    r = requests.get(f"{base}/.well-known/oauth-authorization-server", timeout=10)
    assert r.status_code == 200
    meta = r.json()
    assert meta["issuer"] == pds.issuer == base
    assert {k: meta[k] for k in ("authorization_endpoint", "token_endpoint", "pushed_authorization_request_endpoint",
                                 "revocation_endpoint", "jwks_uri")} == {
        "authorization_endpoint": f"{base}/oauth/authorize", "token_endpoint": f"{base}/oauth/token",
        "pushed_authorization_request_endpoint": f"{base}/oauth/par", "revocation_endpoint": f"{base}/oauth/revoke",
        "jwks_uri": f"{base}/oauth/jwks"}
    assert meta["require_pushed_authorization_requests"] is True
    assert meta["client_id_metadata_document_supported"] is True
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["token_endpoint_auth_methods_supported"] == ["none", "private_key_jwt"]
    assert "ES256" in meta["dpop_signing_alg_values_supported"]
    assert meta["scopes_supported"] == ["atproto", "transition:email", "transition:generic", "transition:chat.bsky"]
    assert meta["protected_resources"] == [base]
    # the same server answers on 127.0.0.1, but every URL it hands out says "localhost"
    loop = base.replace("://localhost:", "://127.0.0.1:")
    r = requests.get(f"{loop}/.well-known/oauth-authorization-server", timeout=10)
    assert r.status_code == 200 and r.json()["issuer"] == base

def test_create_session_rate_limit(pds_rate_limited):
    inst = pds_rate_limited
    assert inst.rate_limits is True
    r = xrpc(inst.pds_url, "GET", "com.atproto.server.describeServer")
    assert r.status_code == 200
    assert r.headers["ratelimit-limit"] == "3000" and r.headers["ratelimit-policy"] == "3000;w=300"

    # createSession: 30 per 5 min per identifier (+ IP). Failed logins cost a scrypt check (~0.3 s each)
    # on the PDS, so fire them concurrently; the limiter admits exactly 30, whatever the order.
    # "carol" is reserved for this test on the rate-limited instance.
    carol = inst.accounts["carol"]
    attempts = 40

    def bad_login(_):
        return xrpc(inst.pds_url, "POST", "com.atproto.server.createSession",
                    json={"identifier": carol.handle, "password": "not-the-password"}, timeout=60)

    start = int(time.time())
    with ThreadPoolExecutor(max_workers=8) as ex:
        responses = list(ex.map(bad_login, range(attempts)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [401] * 30 + [429] * (attempts - 30)
    denied = [r for r in responses if r.status_code == 401]
    assert {r.json()["error"] for r in denied} == {"AuthenticationRequired"}
    limited = [r for r in responses if r.status_code == 429]
    for r in limited:
        assert r.json() == {"error": "RateLimitExceeded", "message": "Rate Limit Exceeded"}
        assert r.headers["ratelimit-limit"] == "30"
        assert r.headers["ratelimit-remaining"] == "0"
        assert r.headers["ratelimit-policy"] == "30;w=300"
        reset = int(r.headers["ratelimit-reset"])  # absolute epoch seconds, not a delta
        assert start + 295 <= reset <= int(time.time()) + 301
    # the limit is per identifier: the right password for carol's handle is refused too, her DID is not
    r = xrpc(inst.pds_url, "POST", "com.atproto.server.createSession",
             json={"identifier": carol.handle, "password": carol.password})
    assert r.status_code == 429
    r = xrpc(inst.pds_url, "POST", "com.atproto.server.createSession",
             json={"identifier": carol.did, "password": carol.password})
    assert r.status_code == 200 and r.json()["did"] == carol.did


# ------------------------------------------------------------------------------ firehose -> fake Jetstream bridge

def _frames(ws, deadline_s: float = 15.0):
    """Yield decoded Jetstream frames from a websocket-client connection until the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        ws.settimeout(max(0.1, deadline - time.monotonic()))
        yield json.loads(ws.recv())
    raise AssertionError("no matching Jetstream frame before the deadline")


def _sorted_keys(value):
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    return value


def test_firehose_bridge_follow_create_and_delete(pds_jetstream):
    import websocket

    pds, js = pds_jetstream
    alice, carol = pds.accounts["alice"], pds.accounts["carol"]
    token = create_session(pds, "alice")
    rkey, record = tid_now(), _follow(carol.did)
    r = xrpc(pds.pds_url, "POST", "com.atproto.repo.createRecord", token=token,
             json={"repo": alice.did, "collection": FOLLOW, "rkey": rkey, "record": record})
    assert r.status_code == 200, r.text
    created = r.json()

    ws = websocket.create_connection(js.subscribe_url(wantedCollections=FOLLOW, wantedDids=alice.did, cursor=0),
                                     timeout=10)
    try:
        frames = _frames(ws)
        # identity/account frames pass a wantedCollections filter (as on real Jetstream): skip them
        frame = next(f for f in frames if f["kind"] == "commit" and f["commit"]["rkey"] == rkey)
        assert frame == {"did": alice.did, "time_us": frame["time_us"], "kind": "commit",
                         "commit": {"rev": created["commit"]["rev"], "operation": "create", "collection": FOLLOW,
                                    "rkey": rkey, "record": record, "cid": created["cid"]}}
        assert list(frame) == ["did", "time_us", "kind", "commit"]
        assert list(frame["commit"]) == ["rev", "operation", "collection", "rkey", "record", "cid"]
        assert list(frame["commit"]["record"]) == sorted(record)  # Jetstream sorts record keys
        assert frame["commit"]["record"]["subject"] == carol.did
        assert isinstance(frame["time_us"], int) and abs(frame["time_us"] / 1e6 - time.time()) < 60

        r = xrpc(pds.pds_url, "POST", "com.atproto.repo.deleteRecord", token=token,
                 json={"repo": alice.did, "collection": FOLLOW, "rkey": rkey})
        assert r.status_code == 200, r.text
        gone = next(f for f in frames if f["kind"] == "commit" and f["commit"]["rkey"] == rkey)
        assert gone == {"did": alice.did, "time_us": gone["time_us"], "kind": "commit",
                        "commit": {"rev": r.json()["commit"]["rev"], "operation": "delete", "collection": FOLLOW,
                                   "rkey": rkey}}
        assert gone["time_us"] > frame["time_us"]
    finally:
        ws.close()
    assert js.bridge.errors == []


def test_firehose_bridge_identity_and_account_frames(pds_jetstream):
    import websocket

    pds, js = pds_jetstream
    carol = pds.accounts["carol"]
    ws = websocket.create_connection(js.subscribe_url(wantedDids=carol.did, cursor=0), timeout=10)
    try:
        frames = _frames(ws)
        first, second = next(frames), next(frames)
    finally:
        ws.close()
    # account creation on this PDS: #identity then #account (then an empty #commit and #sync, not bridged)
    assert first == {"did": carol.did, "time_us": first["time_us"], "kind": "identity",
                     "identity": {"did": carol.did, "handle": carol.handle, "seq": first["identity"]["seq"],
                                  "time": first["identity"]["time"]}}
    assert second == {"did": carol.did, "time_us": second["time_us"], "kind": "account",
                      "account": {"active": True, "did": carol.did, "seq": second["account"]["seq"],
                                  "time": second["account"]["time"]}}
    assert second["account"]["seq"] > first["identity"]["seq"]
    assert second["time_us"] > first["time_us"]
