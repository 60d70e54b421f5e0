"""The JOSE pieces of atproto OAuth: DPoP proofs, PKCE, the client assertion, client keys.

joserfc does the signing; this module only decides the headers and claims the profile requires.
"""
from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from urllib.parse import urlsplit, urlunsplit

from joserfc import jwt
from joserfc.jwk import ECKey, KeySet

from feather.config import ConfigError
from feather.parsing import loads_limited


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def new_key() -> ECKey:
    """A fresh ES256 key; one per OAuth session, never shared between sessions or users."""
    return ECKey.generate_key("P-256", private=True)


def key_to_json(key: ECKey) -> str:
    return json.dumps(key.as_dict(private=True))


def key_from_json(data: str) -> ECKey:
    return ECKey.import_key(json.loads(data))


def htu(url: str) -> str:
    """The DPoP `htu`: the request URL without query or fragment (servers compare it exactly)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def proof(key: ECKey, method: str, url: str, *, nonce: str | None = None,
          access_token: str | None = None) -> str:
    claims = {"jti": secrets.token_urlsafe(16), "htm": method.upper(), "htu": htu(url), "iat": int(time.time())}
    if nonce:
        claims["nonce"] = nonce
    if access_token:
        claims["ath"] = b64url(hashlib.sha256(access_token.encode()).digest())
    header = {"typ": "dpop+jwt", "alg": "ES256", "jwk": key.as_dict(private=False)}
    return jwt.encode(header, claims, key, algorithms=["ES256"])


def pkce_pair() -> tuple[str, str]:
    """(verifier, S256 challenge); 64 random bytes, within the 32-96 the profile asks for."""
    verifier = b64url(secrets.token_bytes(64))
    return verifier, b64url(hashlib.sha256(verifier.encode()).digest())


def client_assertion(key: ECKey, client_id: str, audience: str, lifetime: int = 60) -> str:
    """private_key_jwt: iss = sub = client_id, aud = the authorization server's issuer, fresh jti."""
    now = int(time.time())
    claims = {"iss": client_id, "sub": client_id, "aud": audience, "jti": secrets.token_urlsafe(16),
              "iat": now, "exp": now + lifetime}
    return jwt.encode({"alg": "ES256", "kid": key.kid, "typ": "JWT"}, claims, key, algorithms=["ES256"])


def load_client_keys(raw: str) -> list[ECKey]:
    """FEATHERREADER_OAUTH_CLIENT_KEYS: a private JWK or a JWK Set of P-256 keys, each with a kid."""
    if not raw.strip():
        return []
    try:
        data = loads_limited(raw)
        keys = KeySet.import_key_set(data).keys if "keys" in data else [ECKey.import_key(data)]
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError("FEATHERREADER_OAUTH_CLIENT_KEYS", f"not a JWK or JWK Set: {e}") from None
    for key in keys:
        if not isinstance(key, ECKey) or key.curve_name != "P-256" or not key.is_private:
            raise ConfigError("FEATHERREADER_OAUTH_CLIENT_KEYS", "every key must be a private P-256 (ES256) key")
        if not key.kid:
            raise ConfigError("FEATHERREADER_OAUTH_CLIENT_KEYS", "every key needs a `kid`")
    if len({k.kid for k in keys}) != len(keys):
        raise ConfigError("FEATHERREADER_OAUTH_CLIENT_KEYS", "two keys share a `kid`")
    return keys


def public_jwks(keys: list[ECKey]) -> dict:
    out = []
    for key in keys:
        jwk = key.as_dict(private=False)
        jwk.update({"kid": key.kid, "use": "sig", "alg": "ES256"})
        out.append(jwk)
    return {"keys": out}
