"""Browser sessions (a server-side row behind Flask's signed cookie) and the login rate limit."""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from flask import current_app, g, session

from feather import sql

RATE_WINDOW_SECS = 300


@dataclass(frozen=True)
class Account:
    did: str
    handle: str | None
    needs_reauth: bool
    message: str | None  # why sign-in is needed again, in a plain sentence

    @property
    def label(self) -> str:
        return f"@{self.handle}" if self.handle else self.did


def _hash(sid: str) -> str:
    # Only the hash is stored: a copy of the table does not let anyone wear the cookies.
    return hashlib.sha256(sid.encode()).hexdigest()


def start_session(did: str) -> None:
    settings = current_app.config["FEATHER"]
    now = sql.now_s()
    sid = secrets.token_urlsafe(32)
    sql.execute("DELETE FROM auth_web_session WHERE expires_at < ?", (now,))
    sql.execute("INSERT INTO auth_web_session (id_hash, did, created_at, expires_at) VALUES (?,?,?,?)",
                (_hash(sid), did, now, now + settings.featherreader_session_days * 86400))
    # A new cookie (and CSRF token) at sign-in: nothing from before sign-in carries over.
    session.clear()
    session.permanent = True  # lifetime: PERMANENT_SESSION_LIFETIME, set from the settings in init_app
    session["sid"] = sid
    g.pop("auth_account", None)


def end_session() -> None:
    sid = session.get("sid")
    if sid:
        sql.execute("DELETE FROM auth_web_session WHERE id_hash = ?", (_hash(sid),))
    session.clear()
    g.pop("auth_account", None)


def end_sessions_of(did: str) -> None:
    """Every browser signed in as did is signed out (the account asked to be forgotten)."""
    sql.execute("DELETE FROM auth_web_session WHERE did = ?", (did,))


def forget_expired(now: int) -> None:
    """Expired browser sessions and rate buckets (each is also trimmed as it is written)."""
    sql.execute("DELETE FROM auth_web_session WHERE expires_at < ?", (now,))
    sql.execute("DELETE FROM auth_rate WHERE expires_at < ?", (now,))


def current_account() -> Account | None:
    """The signed-in account of this request, or None."""
    if "auth_account" in g:
        return g.auth_account
    account = None
    sid = session.get("sid")
    if sid:
        row = sql.execute("SELECT s.did, s.expires_at, gr.handle, gr.status, gr.status_reason FROM auth_web_session s"
                          " LEFT JOIN auth_grant gr ON gr.did = s.did WHERE s.id_hash = ?", (_hash(sid),)).fetchone()
        if row is not None and row[1] >= sql.now_s():
            did, _, handle, status, reason = row
            needs = status != "active"
            message = (reason or "Please sign in again.") if needs else None
            account = Account(did, handle, needs, message)
    g.auth_account = account
    return account


def over_rate_limit(key: str, limit: int, now: float | None = None) -> bool:
    """Count one attempt for key in the current window; True when it is over the limit."""
    now = int(sql.now_s() if now is None else now)
    window = now - now % RATE_WINDOW_SECS
    bucket = f"{key}|{window}"
    sql.execute("DELETE FROM auth_rate WHERE expires_at < ?", (now,))
    sql.execute("INSERT INTO auth_rate (bucket, hits, expires_at) VALUES (?, 1, ?)"
                " ON CONFLICT (bucket) DO UPDATE SET hits = auth_rate.hits + 1", (bucket, window + RATE_WINDOW_SECS))
    hits = sql.execute("SELECT hits FROM auth_rate WHERE bucket = ?", (bucket,)).fetchone()[0]
    return hits > limit


def known_account(handle_or_did: str) -> tuple[str, str | None] | None:
    """(did, handle) of an account that signed in here, by handle or DID; None for anyone else."""
    row = sql.execute("SELECT did, handle FROM auth_grant WHERE did = ? OR handle = ?",
                      (handle_or_did, handle_or_did)).fetchone()
    return (row[0], row[1]) if row else None
