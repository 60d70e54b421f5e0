"""Identity and the PDS client against Bluesky's reference PDS + PLC on loopback."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import gevent
import gevent.pool
import pytest

from feather.atproto.identity import IdentityResolver
from feather.atproto.pds import AuthExpired, AuthInvalid, BearerAuth, PdsClient, RateLimited, RecordNotFound
from feather.atproto.syntax import next_tid
from feather.outbound import GuardedClient
from tests.support.oauth_fakes import loopback_client
from tests.support.pds import create_session, pds, pds_rate_limited  # noqa: F401

pytestmark = [pytest.mark.pds, pytest.mark.once]  # the PDS client holds no database
FOLLOW = "app.bsky.graph.follow"


def resolver_for(inst) -> IdentityResolver:
    return IdentityResolver(loopback_client(), handle_resolver=inst.pds_url, plc_url=inst.plc_url,
                            txt_lookup=lambda name: [])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged_access_token(did: str, exp: int, secret: str = "jwt-secret") -> str:
    """An HS256 legacy access token signed with dev-env's known secret."""
    head = _b64(json.dumps({"typ": "at+jwt", "alg": "HS256"}).encode())
    body = _b64(json.dumps({"scope": "com.atproto.access", "aud": "did:web:localhost", "sub": did,
                            "iat": exp - 7200, "exp": exp}).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"


def test_identity_resolves_test_accounts_both_ways(pds):
    alice = pds.accounts["alice"]
    ident = resolver_for(pds).resolve_identity("alice.test")
    assert (ident.did, ident.handle, ident.pds) == (alice.did, "alice.test", pds.pds_url)
    assert resolver_for(pds).resolve_identity(alice.did).handle == "alice.test"
    key = resolver_for(pds).signing_key(alice.did)
    assert key.curve.name == "secp256k1"


def test_follow_written_with_a_bearer_token_is_listed_read_and_deleted(pds):
    alice, bob = pds.accounts["alice"], pds.accounts["bob"]
    pds_url = resolver_for(pds).pds_endpoint(alice.did)
    writer = PdsClient(loopback_client(), pds_url, BearerAuth(create_session(pds, "alice")))
    reader = PdsClient(loopback_client(), pds_url)
    rkeys = [next_tid() for _ in range(3)]
    subjects = [bob.did, pds.accounts["carol"].did, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"]
    for rkey, subject in zip(rkeys, subjects):
        # Distinct subjects: the reference PDS deletes an older follow of the same subject on create.
        record = {"$type": FOLLOW, "subject": subject, "createdAt": "2026-01-02T03:04:05.000Z"}
        out = writer.create_record(alice.did, FOLLOW, record, rkey=rkey)
        assert out["uri"] == f"at://{alice.did}/{FOLLOW}/{rkey}"
    listed = [r["uri"].rsplit("/", 1)[1] for r in reader.iter_records(alice.did, FOLLOW, limit=2)]
    assert sorted(listed) == sorted(rkeys)
    assert reader.get_record(alice.did, FOLLOW, rkeys[0])["value"]["subject"] == bob.did
    for rkey in rkeys:
        writer.delete_record(alice.did, FOLLOW, rkey)
    with pytest.raises(RecordNotFound) as err:
        reader.get_record(alice.did, FOLLOW, rkeys[0])
    assert (err.value.status, err.value.error) == (400, "RecordNotFound")
    assert list(reader.iter_records(alice.did, FOLLOW)) == []


def test_expired_legacy_token_is_auth_expired_and_a_bad_one_auth_invalid(pds):
    alice = pds.accounts["alice"]
    client = PdsClient(loopback_client(), pds.pds_url,
                       BearerAuth(forged_access_token(alice.did, int(time.time()) - 60)))
    with pytest.raises(AuthExpired) as err:
        client.create_record(alice.did, FOLLOW, {"subject": alice.did, "createdAt": "2026-01-02T03:04:05Z"},
                             rkey=next_tid())
    assert (err.value.status, err.value.error) == (400, "ExpiredToken")
    client = PdsClient(loopback_client(), pds.pds_url, BearerAuth("not.a.token"))
    with pytest.raises(AuthInvalid) as err:
        client.delete_record(alice.did, FOLLOW, next_tid())
    assert (err.value.status, err.value.error) == (400, "InvalidToken")


def test_writing_without_a_token_is_auth_invalid(pds):
    alice = pds.accounts["alice"]
    with pytest.raises(AuthInvalid) as err:
        PdsClient(loopback_client(), pds.pds_url).delete_record(alice.did, FOLLOW, next_tid())
    assert (err.value.status, err.value.error) == (401, "AuthMissing")


def test_the_createsession_limit_surfaces_as_rate_limited_with_its_reset(pds_rate_limited):
    inst = pds_rate_limited
    bob = inst.accounts["bob"]  # carol belongs to the test-bed's own limiter test
    # Each refused login costs the PDS a scrypt check (~0.3 s): 8 at a time, and a patient read timeout.
    client = PdsClient(GuardedClient(allow_private_network=True, read_timeout=60, total_timeout=90), inst.pds_url)

    def attempt(_):
        try:
            client.call("POST", "com.atproto.server.createSession",
                        body={"identifier": bob.handle, "password": "wrong"})
        except (AuthInvalid, RateLimited) as e:
            return e

    start = time.time()
    results = list(gevent.pool.Pool(8).imap_unordered(attempt, range(32)))
    limited = [e for e in results if isinstance(e, RateLimited)]
    assert sorted(type(e).__name__ for e in results) == ["AuthInvalid"] * 30 + ["RateLimited"] * 2
    assert all(start + 295 <= e.reset_at <= time.time() + 301 for e in limited)
