"""feed_reader_links: the private feed-reader URLs (migration 0054). This module alone writes it.

A token is 32 random bytes (base64url, 43 characters); the table keeps its SHA-256 only.
"""
from __future__ import annotations

import hashlib
import secrets

from feather import sql

TOKEN_BYTES = 32


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def create(did: str, feed: str) -> str:
    """A new link for (did, feed); any live one is revoked first (rotation). Returns the token,
    which is never stored and cannot be shown again."""
    revoke(did, feed)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    sql.execute("INSERT INTO feed_reader_links (token_hash, did, feed, created_us) VALUES (?, ?, ?, ?)",
                (digest(token), did, feed, sql.now_us()))
    return token


def revoke(did: str, feed: str) -> int:
    return sql.execute("UPDATE feed_reader_links SET revoked_us = ? WHERE did = ? AND feed = ? AND revoked_us IS NULL",
                       (sql.now_us(), did, feed)).rowcount


def owner(token: str) -> tuple[str, str] | None:
    """(did, feed) of a live link, or None (unknown and revoked alike)."""
    if not token or len(token) > 64:
        return None
    row = sql.one("SELECT did, feed FROM feed_reader_links WHERE token_hash = ? AND revoked_us IS NULL",
                  (digest(token),))
    return (row[0], row[1]) if row else None


def live(did: str) -> dict[str, int]:
    """{feed: created_us} of did's live links."""
    return {feed: created for feed, created in sql.rows(
        "SELECT feed, created_us FROM feed_reader_links WHERE did = ? AND revoked_us IS NULL", (did,))}


def forget(did: str) -> int:
    """Every link of did ("delete my data")."""
    return sql.execute("DELETE FROM feed_reader_links WHERE did = ?", (did,)).rowcount
