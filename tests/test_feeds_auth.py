"""getFeed service auth (FEED_SERVICE_AUTH=1): who may read a feed."""
from __future__ import annotations

import base64
import json
import time

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from feather.atproto.crypto import encode_multikey
from feather.config import ConfigError
from tests.fixtures.feeds.fake_pds import FakePds
from tests.fixtures.feeds.feedkit import BASE_US, FakeSources, feeds_app, follow, ingest, join_backfills, post, toml

A, B = "did:plc:aaaa", "did:plc:bbbb"
SERVICE = "did:web:feeds.example.com"
LXM = "com.example.getFeed"
ORDERS = {"secp256r1": 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
          "secp256k1": 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141}
P256, K256 = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256K1())


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(key, alg=None, **claims) -> str:
    alg = alg or ("ES256" if isinstance(key.curve, ec.SECP256R1) else "ES256K")
    body = {"iss": A, "aud": SERVICE, "lxm": LXM, "iat": int(time.time()), "exp": int(time.time()) + 60,
            "jti": "0" * 32}
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    signing_input = f"{b64(json.dumps({'typ': 'JWT', 'alg': alg}).encode())}.{b64(json.dumps(body).encode())}"
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    order = ORDERS[key.curve.name]
    s = min(s, order - s)  # atproto wants low-S
    return f"{signing_input}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


@pytest.fixture
def app(make_app, tmp_path):
    sources = FakeSources(handles={"alice.test": A}, keys={A: P256.public_key(), B: K256.public_key()})
    app = feeds_app(make_app, tmp_path, toml(), sources=sources, FEED_SERVICE_AUTH=True,
                    FEATHERREADER_FEED_SERVICE_DID=SERVICE)
    ingest(app, [follow(A, "f1", B), post(B, "p1", BASE_US + 1)])
    yield app
    join_backfills(app)


def get_feed(app, token=None, actor=A):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return app.test_client().get(f"/xrpc/com.example.getFeed?feed=timeline&actor={actor}", headers=headers)


@pytest.mark.parametrize("key, issuer", [(P256, A), (K256, B)])
def test_a_valid_token_from_the_actor_reads_their_feed(app, key, issuer):
    response = get_feed(app, mint(key, iss=issuer), actor=issuer)
    assert response.status_code == 200
    if issuer == A:
        assert [r["rkey"] for r in response.json["records"]] == ["p1"]


def test_the_actor_may_be_the_issuers_handle(app):
    assert get_feed(app, mint(P256), actor="alice.test").status_code == 200


@pytest.mark.parametrize("token, error", [
    (None, "AuthMissing"),
    ("not-a-jwt", "BadJwt"),
    ("a.b.c", "BadJwt"),
    (lambda: mint(P256, aud="did:web:someone.else"), "BadJwtAudience"),
    (lambda: mint(P256, lxm="com.example.post.listRecords"), "BadJwtLexiconMethod"),
    (lambda: mint(P256, lxm=None), "BadJwtLexiconMethod"),
    (lambda: mint(P256, exp=int(time.time()) - 120), "JwtExpired"),
    (lambda: mint(K256), "BadJwtSignature"),  # A's document holds a P-256 key
    (lambda: mint(ec.generate_private_key(ec.SECP256R1())), "BadJwtSignature"),
    (lambda: mint(P256, iss="did:plc:unknown"), "BadJwtSignature"),
    (lambda: mint(P256, alg="HS256"), "BadJwt"),
])
def test_bad_or_missing_tokens_get_401_with_a_challenge(app, token, error):
    response = get_feed(app, token() if callable(token) else token)
    assert response.status_code == 401
    assert response.json["error"] == error
    assert response.headers["WWW-Authenticate"].startswith("Bearer ")


def test_a_tampered_payload_fails_the_signature(app):
    head, _, sig = mint(P256).split(".")
    forged = b64(json.dumps({"iss": A, "aud": SERVICE, "lxm": LXM, "iat": int(time.time()),
                             "exp": int(time.time()) + 999}).encode())
    assert get_feed(app, f"{head}.{forged}.{sig}").json["error"] == "BadJwtSignature"


def test_an_issuer_reading_someone_elses_feed_gets_403(app):
    response = get_feed(app, mint(K256, iss=B), actor=A)
    assert (response.status_code, response.json) == (
        403, {"error": "Forbidden", "message": "feed actor must match the service-auth issuer"})


def test_without_service_auth_the_actor_parameter_alone_reads(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml(), sources=FakeSources())
    assert get_feed(app).status_code == 200
    join_backfills(app)


def test_service_auth_needs_the_service_did(make_app, tmp_path):
    with pytest.raises(ConfigError, match="FEATHERREADER_FEED_SERVICE_DID"):
        feeds_app(make_app, tmp_path, toml(), FEED_SERVICE_AUTH=True)


def test_the_key_comes_from_the_issuers_did_document(make_app, tmp_path):
    """Production wiring: PLC lookup of the issuer, its #atproto Multikey, over loopback HTTP."""
    with FakePds() as pds:
        pds.keys[A] = encode_multikey(K256.public_key())
        app = feeds_app(make_app, tmp_path, toml(), FEED_SERVICE_AUTH=True, FEATHERREADER_FEED_SERVICE_DID=SERVICE,
                        **pds.settings())
        assert get_feed(app, mint(K256)).status_code == 200
        assert get_feed(app, mint(P256)).json["error"] == "BadJwtSignature"
        join_backfills(app)


@pytest.mark.pds
def test_a_token_minted_by_the_reference_pds_reads_the_feed(make_app, tmp_path, pds):
    from tests.support.pds import create_session, xrpc

    alice, bob = pds.accounts["alice"], pds.accounts["bob"]
    app = feeds_app(make_app, tmp_path, toml(), FEED_SERVICE_AUTH=True, FEATHERREADER_FEED_SERVICE_DID=SERVICE,
                    FEATHERREADER_PLC_URL=pds.plc_url, FEATHERREADER_HANDLE_RESOLVER=pds.pds_url)
    session = create_session(pds, "alice")
    minted = xrpc(pds.pds_url, "GET", "com.atproto.server.getServiceAuth", token=session,
                  params={"aud": SERVICE, "lxm": LXM})
    assert minted.status_code == 200, minted.text
    token = minted.json()["token"]
    assert get_feed(app, token, actor=alice.did).status_code == 200
    assert get_feed(app, token, actor=alice.handle).status_code == 200
    assert get_feed(app, token, actor=bob.did).status_code == 403
    other = xrpc(pds.pds_url, "GET", "com.atproto.server.getServiceAuth", token=session,
                 params={"aud": SERVICE, "lxm": "com.example.post.listRecords"}).json()["token"]
    assert get_feed(app, other, actor=alice.did).json["error"] == "BadJwtLexiconMethod"
    join_backfills(app)


def test_service_auth_refuses_a_service_did_that_is_not_a_did(make_app, tmp_path):
    with pytest.raises(ConfigError) as err:
        feeds_app(make_app, tmp_path, toml(), FEED_SERVICE_AUTH=True, FEATHERREADER_FEED_SERVICE_DID="feeds.example.com")
    assert str(err.value) == ("FEATHERREADER_FEED_SERVICE_DID: FEED_SERVICE_AUTH=1 needs this service's DID "
                              "(the `aud` of getFeed tokens)")


DOES_NOT_DECODE = {"error": "BadJwt", "message": "The service-auth token does not decode."}


@pytest.mark.parametrize("part", ["header", "claims"])
def test_a_segment_of_5000_brackets_is_a_401_with_the_xrpc_error_not_a_500(app, part):
    # 6,668 base64url characters: inside gunicorn's 8,190-byte header line, and 5x what json.loads
    # recurses through before a RecursionError.
    deep = b64(b"[" * 5000)
    head, claims, sig = mint(P256).split(".")
    token = f"{deep}.{claims}.{sig}" if part == "header" else f"{head}.{deep}.{sig}"
    assert len(f"Authorization: Bearer {token}") < 8190
    response = get_feed(app, token)
    assert (response.status_code, response.json) == (401, DOES_NOT_DECODE)
    assert response.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


EXPIRED = {"error": "JwtExpired", "message": "The service-auth token has expired."}
LIVES_LONG = {"error": "BadJwt", "message": "The service-auth token lives longer than an hour; ask for a short-lived one."}
NOT_YET = {"error": "BadJwt", "message": "The service-auth token has no issue time or is not valid yet."}


@pytest.mark.parametrize("claims, answer", [
    # json reads NaN, and NaN compares False with everything: such an exp used to pass every check.
    pytest.param({"exp": float("nan")}, EXPIRED, id="exp NaN"),
    pytest.param({"exp": float("inf")}, EXPIRED, id="exp Infinity"),
    pytest.param({"exp": float("-inf")}, EXPIRED, id="exp -Infinity"),
    pytest.param({"exp": lambda: time.time() + 60}, EXPIRED, id="exp a float, however plausible"),
    pytest.param({"exp": lambda: float(int(time.time()) + 60)}, EXPIRED, id="exp a whole number spelled 1.0"),
    pytest.param({"exp": True}, EXPIRED, id="exp true"),
    pytest.param({"exp": "9999999999"}, EXPIRED, id="exp a string"),
    pytest.param({"exp": 10 ** 30}, LIVES_LONG, id="exp huge"),
    pytest.param({"iat": float("nan")}, NOT_YET, id="iat NaN"),
    pytest.param({"iat": float("-inf")}, NOT_YET, id="iat -Infinity"),
    pytest.param({"iat": lambda: time.time()}, NOT_YET, id="iat a float"),
    pytest.param({"nbf": float("nan")}, NOT_YET, id="nbf NaN"),
    pytest.param({"nbf": lambda: float(int(time.time()))}, NOT_YET, id="nbf a float"),
])
def test_time_claims_that_are_not_whole_numbers_are_refused_over_http(app, claims, answer):
    token = mint(P256, **{k: v() if callable(v) else v for k, v in claims.items()})
    response = get_feed(app, token)
    assert (response.status_code, response.json) == (401, answer)


def test_the_same_token_with_whole_number_times_reads_the_feed(app):
    now = int(time.time())
    assert get_feed(app, mint(P256, iat=now, exp=now + 60, nbf=now)).status_code == 200
