"""Issue 14, getFeed service auth: a token's lifetime is bounded, `iat`/`nbf` are checked, and `typ`
is compared without regard to case."""
from __future__ import annotations

import json
import time

import pytest

from feather.feeds.web.service_auth import AuthError, verify
from tests.test_feeds_auth import K256, LXM, P256, SERVICE, A, b64, mint

NOW = 1_800_000_000


def check(token: str) -> str:
    return verify(token, audience=SERVICE, method=LXM, key_of=lambda did: P256.public_key(), now=NOW)


def refused(token: str) -> tuple[str, str]:
    with pytest.raises(AuthError) as exc:
        check(token)
    return exc.value.error, exc.value.message


def with_header(header: dict) -> str:
    """A correctly signed token whose header is exactly `header`."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    from tests.test_feeds_auth import ORDERS

    body = {"iss": A, "aud": SERVICE, "lxm": LXM, "iat": NOW, "exp": NOW + 60}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(body).encode())}"
    r, s = decode_dss_signature(P256.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    s = min(s, ORDERS["secp256r1"] - s)
    return f"{signing_input}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


LONG = "The service-auth token lives longer than an hour; ask for a short-lived one."
EARLY = "The service-auth token has no issue time or is not valid yet."


def test_a_short_lived_token_is_accepted():
    assert check(mint(P256, iat=NOW, exp=NOW + 60)) == A
    assert check(mint(P256, iat=NOW - 10, exp=NOW + 3590, nbf=NOW - 10)) == A  # exactly an hour


@pytest.mark.parametrize("claims", [
    {"iat": NOW, "exp": NOW + 100 * 365 * 86400},  # the reported token: a century ahead
    {"iat": NOW, "exp": NOW + 3601},
    {"iat": NOW - 86400, "exp": NOW + 60},  # issued a day ago, still "valid" for a minute: lived a day
])
def test_a_token_living_longer_than_an_hour_is_refused(claims):
    assert refused(mint(P256, **claims)) == ("BadJwt", LONG)


@pytest.mark.parametrize("claims", [
    {"iat": None, "exp": NOW + 60},
    {"iat": "yesterday", "exp": NOW + 60},
    {"iat": True, "exp": NOW + 60},
    {"iat": NOW + 120, "exp": NOW + 180},  # issued in the future (beyond the 30 s skew)
    {"iat": NOW, "exp": NOW + 60, "nbf": NOW + 120},
    {"iat": NOW, "exp": NOW + 60, "nbf": "later"},
])
def test_a_token_without_a_usable_issue_time_or_not_yet_valid_is_refused(claims):
    assert refused(mint(P256, **claims)) == ("BadJwt", EARLY)


def test_issue_time_within_the_clock_skew_is_accepted():
    assert check(mint(P256, iat=NOW + 20, exp=NOW + 80, nbf=NOW + 20)) == A


@pytest.mark.parametrize("typ", ["at+jwt", "AT+JWT", "At+Jwt", "refresh+JWT", "DPoP+JWT", 7, None])
def test_other_token_kinds_are_refused_whatever_the_case_of_typ(typ):
    token = with_header({"typ": typ, "alg": "ES256"})
    assert refused(token) == ("BadJwt", "The service-auth token must be an ES256 or ES256K JWT.")


@pytest.mark.parametrize("typ", ["JWT", "jwt"])
def test_a_plain_jwt_typ_is_accepted_in_any_case(typ):
    assert check(with_header({"typ": typ, "alg": "ES256"})) == A


def test_a_header_without_typ_is_accepted():
    assert check(with_header({"alg": "ES256"})) == A


def test_the_lifetime_check_holds_through_getfeed(make_app, tmp_path):
    from tests.fixtures.feeds.feedkit import FakeSources, feeds_app, toml

    app = feeds_app(make_app, tmp_path, toml(), sources=FakeSources(keys={A: P256.public_key()}),
                    FEED_SERVICE_AUTH=True, FEATHERREADER_FEED_SERVICE_DID=SERVICE)
    now = int(time.time())
    token = mint(P256, iat=now, exp=now + 100 * 365 * 86400)
    r = app.test_client().get(f"/xrpc/com.example.getFeed?feed=timeline&actor={A}",
                              headers={"Authorization": f"Bearer {token}"})
    assert (r.status_code, r.json) == (401, {"error": "BadJwt", "message": LONG})
    assert r.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


def test_expiry_is_forgiven_for_exactly_the_clock_skew():
    from feather.feeds.web.service_auth import CLOCK_SKEW_SECS

    exp = NOW - CLOCK_SKEW_SECS
    assert check(mint(P256, iat=exp - 60, exp=exp)) == A
    assert refused(mint(P256, iat=exp - 61, exp=exp - 1)) == ("JwtExpired", "The service-auth token has expired.")


def test_a_token_signed_for_another_curve_than_the_issuers_key_is_refused_by_name():
    """Algorithm confusion: an ES256K token checked against the issuer's P-256 key (and the reverse)
    is refused before any signature maths, with the reason."""
    mismatch = ("BadJwtSignature", "The token's algorithm does not match the issuer's key.")
    assert refused(mint(K256, iat=NOW, exp=NOW + 60)) == mismatch
    with pytest.raises(AuthError) as exc:
        verify(mint(P256), audience=SERVICE, method=LXM, key_of=lambda did: K256.public_key(), now=time.time())
    assert (exc.value.error, exc.value.message) == mismatch
