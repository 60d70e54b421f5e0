"""Sign-in's part of "your data": the grant (tokens to act for you), browser sessions, pending sign-ins.

Deleting ends Feather's access at the person's server first (OAuth: the refresh and access tokens are
revoked at the authorization server's revocation endpoint; app password: com.atproto.server.deleteSession),
then forgets the grant here. The server call is best effort: the rows go whether or not it answers,
since keeping tokens we were asked to forget would be worse than a session left to expire.
"""
from __future__ import annotations

import logging
import time

from feather import sql
from feather.auth.service import forget_requests_of
from feather.auth.web import end_sessions_of
from feather.db import db
from feather.personal import Holding
from feather.personal import register as add

log = logging.getLogger(__name__)


def _when(ts) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(int(ts))) if ts else "an unknown date"


def _grant_row(did: str):
    return sql.execute("SELECT kind, handle, pds_url, scope, status, created_at, updated_at FROM auth_grant"
                       " WHERE did = ?", (did,)).fetchone()


def _sessions(did: str) -> list[tuple[int, int]]:
    return sql.execute("SELECT created_at, expires_at FROM auth_web_session WHERE did = ? ORDER BY created_at",
                       (did,)).fetchall()


def describe(did: str) -> list[str]:
    lines = []
    grant = _grant_row(did)
    if grant is not None:
        kind, handle, pds_url, scope, status, created, _ = grant
        how = "an OAuth session" if kind == "oauth" else "an app-password session"
        lines.append(f"Your DID and handle (@{handle}), your server's address ({pds_url}) and {how} with your "
                     f"server, its tokens encrypted, since {_when(created)}"
                     + (" (it has stopped working; signing in again renews it)." if status != "active" else "."))
        if kind == "oauth":
            lines.append(f"The permissions you granted: {', '.join(sorted(scope.split())) or 'none'}.")
    sessions = _sessions(did)
    if sessions:
        lines.append(f"{len(sessions)} signed-in browser session{'s' if len(sessions) != 1 else ''} "
                     "(a random identifier and its dates; no address, no device details).")
    return lines


def export(did: str) -> dict:
    grant = _grant_row(did)
    out: dict = {"grant": None, "browser_sessions": [{"created_at": c, "expires_at": e} for c, e in _sessions(did)]}
    if grant is not None:
        kind, handle, pds_url, scope, status, created, updated = grant
        out["grant"] = {"kind": kind, "handle": handle, "pds_url": pds_url, "scope": scope, "status": status,
                        "created_at": created, "updated_at": updated,
                        "tokens": "held encrypted; not exported (they are secrets, not your data)"}
    return out


def delete(did: str, service) -> None:
    """Revoke at the person's server (network, best effort), then drop every sign-in row for did."""
    try:
        service.revoke_everywhere(did)
    except Exception:  # a server that cannot be reached must not keep the rows alive
        log.warning("auth: revoking a deleted account's session at its server failed", exc_info=True)
    with db.atomic():
        service.grants.delete(did)
        end_sessions_of(did)
        forget_requests_of(did)


def register(app) -> None:
    service = app.extensions["auth"]
    add(app, Holding("sign_in", "Signing in", describe, export, lambda did: delete(did, service),
                     order=100, outside_transaction=True))
