"""The JOSE pieces of atproto OAuth (feather/auth/dpop.py) and the token keys' settings (seal.py)."""
from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey

from feather.auth import dpop
from feather.auth.seal import SealError, Sealer
from feather.config import ConfigError


def _claims(token: str, key: ECKey) -> dict:
    return jwt.decode(token, key, algorithms=["ES256"]).claims


def test_the_dpop_htu_drops_query_and_fragment():
    assert dpop.htu("https://pds.example.com/xrpc/com.atproto.repo.listRecords?repo=did:plc:a&limit=5#x") == \
        "https://pds.example.com/xrpc/com.atproto.repo.listRecords"


def test_a_dpop_proof_names_the_method_in_upper_case_and_the_url_without_its_query():
    key = dpop.new_key()
    claims = _claims(dpop.proof(key, "post", "https://as.example.com/oauth/token?x=1", nonce="n1",
                                access_token="tok"), key)
    assert claims["htm"] == "POST"
    assert claims["htu"] == "https://as.example.com/oauth/token"
    assert claims["nonce"] == "n1"
    assert claims["ath"] == dpop.b64url(__import__("hashlib").sha256(b"tok").digest())


def test_a_client_assertion_lives_for_its_lifetime_in_seconds():
    key = ECKey.generate_key("P-256", private=True, parameters={"kid": "k1"})
    before = int(time.time())
    claims = _claims(dpop.client_assertion(key, "https://app.example/client-metadata.json",
                                           "https://as.example.com"), key)
    assert claims["exp"] - claims["iat"] == 60
    assert before <= claims["iat"] <= int(time.time())
    assert claims["iss"] == claims["sub"] == "https://app.example/client-metadata.json"
    assert claims["aud"] == "https://as.example.com"


def test_two_client_keys_sharing_a_kid_are_refused():
    a = ECKey.generate_key("P-256", private=True, parameters={"kid": "same"})
    b = ECKey.generate_key("P-256", private=True, parameters={"kid": "same"})
    raw = json.dumps({"keys": [a.as_dict(private=True), b.as_dict(private=True)]})
    with pytest.raises(ConfigError) as err:
        dpop.load_client_keys(raw)
    assert "two keys share a `kid`" in str(err.value)
    b2 = ECKey.generate_key("P-256", private=True, parameters={"kid": "other"})
    keys = dpop.load_client_keys(json.dumps({"keys": [a.as_dict(private=True), b2.as_dict(private=True)]}))
    assert [k.kid for k in keys] == ["same", "other"]


def test_a_sealed_value_of_another_version_does_not_open():
    sealer = Sealer([b"1" * 32])
    sealed = sealer.seal("secret", "aad")
    assert sealer.open(sealed, "aad") == "secret"
    with pytest.raises(SealError):
        sealer.open("v2." + sealed.split(".", 1)[1], "aad")


def test_a_token_key_shorter_than_32_bytes_is_a_configuration_error():
    short = dpop.b64url(b"k" * 16)
    settings = SimpleNamespace(featherreader_token_keys=f"{dpop.b64url(b'k' * 32)},{short}", secret_key="s")
    with pytest.raises(ConfigError) as err:
        Sealer.from_settings(settings)
    assert "32 random bytes" in str(err.value)
