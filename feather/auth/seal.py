"""Encryption at rest for tokens and DPoP keys: AES-256-GCM, keys from the environment.

A sealed value is `v1.<key id>.<base64url(nonce || ciphertext)>`. The key id (8 hex of the key's
SHA-256) lets several keys coexist: the first of FEATHERREADER_TOKEN_KEYS seals, any listed key
opens, so keys rotate without a migration. `aad` binds a value to its row and column, so a
ciphertext copied into another account's row does not open.
"""
from __future__ import annotations

import base64
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from feather.config import ConfigError


class SealError(Exception):
    """A sealed value that no configured key opens (wrong key, tampering, or a removed key)."""


def _b64d(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def _b64e(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class Sealer:
    def __init__(self, keys: list[bytes]):
        if not keys or any(len(k) != 32 for k in keys):
            raise ValueError("Sealer needs one or more 32-byte keys")
        self._keys = [(hashlib.sha256(k).hexdigest()[:8], AESGCM(k)) for k in keys]

    @classmethod
    def from_settings(cls, settings) -> "Sealer":
        raw = [part.strip() for part in settings.featherreader_token_keys.split(",") if part.strip()]
        if not raw:
            # Derived, not reused: SECRET_KEY also signs cookies, and the two uses must not share a key.
            derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"feather",
                           info=b"feather token encryption v1").derive(settings.secret_key.encode())
            return cls([derived])
        keys = []
        for part in raw:
            try:
                key = _b64d(part)
            except ValueError:
                key = b""
            if len(key) != 32:
                raise ConfigError("FEATHERREADER_TOKEN_KEYS",
                                  "each key must be 32 random bytes in base64url "
                                  "(python -c 'import secrets; print(secrets.token_urlsafe(32))')")
            keys.append(key)
        return cls(keys)

    def seal(self, plaintext: str, aad: str) -> str:
        kid, aead = self._keys[0]
        nonce = os.urandom(12)
        return f"v1.{kid}.{_b64e(nonce + aead.encrypt(nonce, plaintext.encode(), aad.encode()))}"

    def open(self, sealed: str, aad: str) -> str:
        try:
            version, kid, body = sealed.split(".", 2)
            blob = _b64d(body)
        except (ValueError, AttributeError):
            raise SealError("not a sealed value") from None
        for key_id, aead in self._keys:
            if version == "v1" and key_id == kid:
                try:
                    return aead.decrypt(blob[:12], blob[12:], aad.encode()).decode()
                except InvalidTag:
                    break
        raise SealError("no configured key opens this value")
