"""Service auth for getFeed (FEED_SERVICE_AUTH=1): an atproto inter-service JWT from the reader.

The reader's PDS mints it (`com.atproto.server.getServiceAuth`) and signs it with the account's
`#atproto` key: header {typ: JWT, alg: ES256 | ES256K}, claims {iss, aud, exp, lxm, iat, jti}.
We check the signature against the key in the issuer's DID document (P-256 or secp256k1,
low-S, raw r||s), `aud` = our service DID, `lxm` = `<namespace>.getFeed`, expiry, `iat` (and
`nbf` if present) not in the future, a lifetime of at most an hour, and the
caller then checks that the issuer is the `actor` (403 otherwise). Failures answer 401 with a
WWW-Authenticate header, so a client knows to fetch a token.
"""
from __future__ import annotations

import base64
import time

from feather.atproto import crypto
from feather.atproto.syntax import is_valid_did
from feather.errors import ApiError, error_response
from feather.parsing import loads_limited

CLOCK_SKEW_SECS = 30
MAX_LIFETIME_SECS = 3600  # atproto's reference PDS refuses to mint a service token for longer
# Tokens of other kinds that share the JWT form must never pass as service auth.
_REFUSED_TYPES = {"at+jwt", "refresh+jwt", "dpop+jwt"}
_ALG_CURVE = {"ES256": "secp256r1", "ES256K": "secp256k1"}


class AuthError(ApiError):
    """A 401 that carries a WWW-Authenticate challenge (see init_errors)."""

    def __init__(self, error: str, message: str):
        super().__init__(401, error, message)
        self.challenge = f'Bearer error="{"invalid_token" if error != "AuthMissing" else "invalid_request"}"'


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _json(part: str):
    # Depth-limited: a header of 5,000 `[` fits in an HTTP header and would be a RecursionError.
    return loads_limited(_b64(part).decode("utf-8"))


def verify(token: str, *, audience: str, method: str, key_of, now: float | None = None) -> str:
    """The issuer DID of a valid token; raises AuthError otherwise. key_of(did) -> public key | None."""
    now = time.time() if now is None else now
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthError("BadJwt", "The service-auth token is not a JWT.")
    try:
        header, claims, signature = _json(parts[0]), _json(parts[1]), _b64(parts[2])
    except (ValueError, UnicodeDecodeError):
        raise AuthError("BadJwt", "The service-auth token does not decode.") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise AuthError("BadJwt", "The service-auth token does not decode.")
    alg, typ = header.get("alg"), header.get("typ", "")
    # typ is compared case-insensitively (RFC 7515 §4.1.9): "AT+JWT" is still an access token.
    # isinstance first: a list or an object as alg is unhashable, and `in` a dict would raise.
    if (not isinstance(alg, str) or alg not in _ALG_CURVE or not isinstance(typ, str)
            or typ.lower() in _REFUSED_TYPES):
        raise AuthError("BadJwt", "The service-auth token must be an ES256 or ES256K JWT.")
    issuer = claims.get("iss")
    issuer = issuer.split("#", 1)[0] if isinstance(issuer, str) else None
    if not is_valid_did(issuer):
        raise AuthError("BadJwt", "The service-auth token has no issuer DID.")
    if claims.get("aud") != audience:
        raise AuthError("BadJwtAudience", "The service-auth token is not meant for this service.")
    if claims.get("lxm") != method:
        raise AuthError("BadJwtLexiconMethod", f"The service-auth token is not scoped to {method}.")
    exp, iat, nbf = claims.get("exp"), claims.get("iat"), claims.get("nbf")
    if not _seconds(exp) or exp + CLOCK_SKEW_SECS < now:
        raise AuthError("JwtExpired", "The service-auth token has expired.")
    if not _seconds(iat) or iat > now + CLOCK_SKEW_SECS or (nbf is not None and (not _seconds(nbf)
                                                                                   or nbf > now + CLOCK_SKEW_SECS)):
        raise AuthError("BadJwt", "The service-auth token has no issue time or is not valid yet.")
    if exp - iat > MAX_LIFETIME_SECS or exp - now > MAX_LIFETIME_SECS + CLOCK_SKEW_SECS:
        # A stolen token is a reader's identity until exp: PDSes mint 60 s ones, never over an hour.
        raise AuthError("BadJwt", "The service-auth token lives longer than an hour; ask for a short-lived one.")
    key = key_of(issuer)
    if key is None:
        raise AuthError("BadJwtSignature", "The issuer's signing key could not be resolved.")
    if key.curve.name != _ALG_CURVE[alg]:
        raise AuthError("BadJwtSignature", "The token's algorithm does not match the issuer's key.")
    if not crypto.verify_signature(key, f"{parts[0]}.{parts[1]}".encode(), signature):
        raise AuthError("BadJwtSignature", "The service-auth token's signature is invalid.")
    return issuer


def _seconds(value) -> bool:
    """A NumericDate as PDSes mint it: a whole number. Python's json reads `NaN` and `Infinity`, and
    NaN compares False with everything, so a NaN exp would pass every time check and never expire."""
    return isinstance(value, int) and not isinstance(value, bool)


def verify_request(authorization: str | None, config, settings, sources) -> str:
    if not authorization or not authorization.startswith("Bearer "):
        raise AuthError("AuthMissing", "getFeed needs a service-auth token (Authorization: Bearer …).")
    return verify(authorization[len("Bearer "):].strip(), audience=settings.featherreader_feed_service_did,
                  method=f"{config.namespace}.getFeed", key_of=sources.signing_key)


def init_errors(bp) -> None:
    @bp.errorhandler(AuthError)
    def _auth_error(exc: AuthError):
        response = error_response(exc.status, exc.message, exc.error)
        response.headers["WWW-Authenticate"] = exc.challenge
        return response
