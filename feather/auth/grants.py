"""Grants: the tokens that let features act for an account, sealed at rest, refreshed under a lease.

Refresh tokens are single-use, and the reference PDS kills the whole session when a used one is
replayed. So a refresh happens only under a lease taken with one conditional UPDATE, which
serialises greenlets and processes alike; the others wait and re-read the new tokens. A refresh
triggered by a rejected access token is skipped when the stored token has already changed, so
two callers that saw the same rejection cause exactly one refresh. No transaction is held while
the HTTP call runs (SQLite would block every other writer for its duration).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

from joserfc.jwk import ECKey

from feather import locks, sql
from feather.atproto.pds import Auth, AuthInvalid, ServerError
from feather.auth import dpop
from feather.auth.oauth import InvalidGrant, OAuthError
from feather.auth.seal import Sealer, SealError

log = logging.getLogger(__name__)

REFRESH_EARLY_SECS = 300  # renew this long before expiry: clocks drift and requests take time
LEASE_SECS = 90  # longer than one refresh round trip (the guarded client gives up at 60 s)
WAIT_STEP_SECS = 0.05

_COLUMNS = ("did, kind, handle, pds_url, issuer, scope, access_enc, refresh_enc, expires_at, dpop_key_enc, "
            "as_nonce, pds_nonce, client_kid, status, status_reason, updated_at")


class NeedsReauth(AuthInvalid):
    """The account's grant is gone or dead; the user has to sign in again. The message says so."""


@dataclass
class Grant:
    did: str
    kind: str  # "oauth" | "password"
    handle: str | None
    pds_url: str
    issuer: str | None
    scope: str
    access: str
    refresh: str
    expires_at: int
    dpop_key: ECKey | None
    as_nonce: str | None
    pds_nonce: str | None
    client_kid: str | None
    status: str = "active"
    status_reason: str | None = None
    updated_at: int = 0

    @property
    def scopes(self) -> set[str]:
        return set(self.scope.split())


# A refresher renews a grant: returns (access, refresh, expires_at, scope, as_nonce) or raises
# InvalidGrant (dead: needs re-auth) / OAuthError (transient).
Refresher = Callable[[Grant], tuple[str, str, int, str, str | None]]


def reauth_message(pds_url: str | None) -> str:
    host = urlsplit(pds_url or "").hostname or "your server"
    return f"Your sign-in with {host} has expired or was revoked. Please sign in again."


class GrantStore:
    def __init__(self, sealer: Sealer, refreshers: dict[str, Refresher], clock: Callable[[], float] = time.time):
        self.sealer, self.refreshers, self.clock = sealer, refreshers, clock

    def save(self, grant: Grant) -> None:
        """Insert or replace the account's grant; a new grant voids any refresh lease on the old one."""
        now = int(self.clock())
        s, d = self.sealer.seal, grant.did
        key = s(dpop.key_to_json(grant.dpop_key), f"{d}:dpop") if grant.dpop_key else None
        sql.execute(
            "INSERT INTO auth_grant (did, kind, handle, pds_url, issuer, scope, access_enc, refresh_enc, expires_at,"
            " dpop_key_enc, as_nonce, pds_nonce, client_kid, status, status_reason, lease_owner, lease_until,"
            " created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,'active',NULL,NULL,NULL,?,?)"
            " ON CONFLICT (did) DO UPDATE SET kind=excluded.kind, handle=excluded.handle, pds_url=excluded.pds_url,"
            " issuer=excluded.issuer, scope=excluded.scope, access_enc=excluded.access_enc,"
            " refresh_enc=excluded.refresh_enc, expires_at=excluded.expires_at, dpop_key_enc=excluded.dpop_key_enc,"
            " as_nonce=excluded.as_nonce, pds_nonce=excluded.pds_nonce, client_kid=excluded.client_kid,"
            " status='active', status_reason=NULL, lease_owner=NULL, lease_until=NULL, updated_at=excluded.updated_at",
            (d, grant.kind, grant.handle, grant.pds_url, grant.issuer, grant.scope, s(grant.access, f"{d}:access"),
             s(grant.refresh, f"{d}:refresh"), grant.expires_at, key, grant.as_nonce, grant.pds_nonce,
             grant.client_kid, now, now))

    def load(self, did: str) -> Grant | None:
        row = sql.execute(f"SELECT {_COLUMNS} FROM auth_grant WHERE did = ?", (did,)).fetchone()
        if row is None:
            return None
        (did, kind, handle, pds_url, issuer, scope, access_enc, refresh_enc, expires_at, key_enc, as_nonce,
         pds_nonce, kid, status, reason, updated_at) = row
        try:
            access = self.sealer.open(access_enc, f"{did}:access")
            refresh = self.sealer.open(refresh_enc, f"{did}:refresh")
            key = dpop.key_from_json(self.sealer.open(key_enc, f"{did}:dpop")) if key_enc else None
        except SealError:
            # The token key was changed without keeping the old one: these tokens are lost for good.
            log.warning("grant of %s cannot be decrypted with the configured FEATHERREADER_TOKEN_KEYS", did)
            access = refresh = ""
            key, status, reason = None, "needs_reauth", reauth_message(pds_url)
        return Grant(did, kind, handle, pds_url, issuer, scope, access, refresh, int(expires_at), key, as_nonce,
                     pds_nonce, kid, status, reason, int(updated_at))

    def delete(self, did: str) -> None:
        sql.execute("DELETE FROM auth_grant WHERE did = ?", (did,))

    def save_nonce(self, did: str, column: str, nonce: str) -> None:
        assert column in ("as_nonce", "pds_nonce")
        sql.execute(f"UPDATE auth_grant SET {column} = ? WHERE did = ?", (nonce, did))

    def usable(self, did: str) -> Grant:
        grant = self.load(did)
        if grant is None:
            raise NeedsReauth("This account is not signed in here. Please sign in.", status=401)
        if grant.status != "active":
            raise NeedsReauth(grant.status_reason or reauth_message(grant.pds_url), status=401)
        return grant

    def ensure_fresh(self, did: str, min_ttl: int = REFRESH_EARLY_SECS) -> Grant:
        """The grant, refreshed first if its access token expires within min_ttl seconds."""
        grant = self.usable(did)
        if grant.expires_at - self.clock() > min_ttl:
            return grant
        return self._refresh(did, lambda g: g.expires_at - self.clock() > min_ttl)

    def refresh_after_rejection(self, did: str, rejected_access: str) -> Grant:
        """Refresh because the PDS rejected rejected_access, unless someone already replaced it."""
        return self._refresh(did, lambda g: g.access != rejected_access)

    def _refresh(self, did: str, done: Callable[[Grant], bool]) -> Grant:
        owner = locks.holder_name()  # unique per call: a random token after host and pid
        deadline = time.monotonic() + LEASE_SECS + 5
        while True:
            grant = self.usable(did)
            if done(grant):
                return grant
            now = int(self.clock())
            took = sql.execute("UPDATE auth_grant SET lease_owner = ?, lease_until = ? WHERE did = ?"
                               " AND status = 'active'"
                               " AND (lease_until IS NULL OR lease_until < ?)", (owner, now + LEASE_SECS, did, now))
            if took.rowcount == 1 or self._take_from_gone_holder(did, owner, now):
                break
            if time.monotonic() > deadline:
                raise ServerError("Timed out waiting for another worker to renew the session.")
            time.sleep(WAIT_STEP_SECS)  # cooperative under gevent
        try:
            grant = self.usable(did)  # re-read: the previous holder may have finished just before we won
            if done(grant):
                return grant
            try:
                access, refresh, expires_at, scope, as_nonce = self.refreshers[grant.kind](grant)
            except InvalidGrant as e:
                log.info("grant of %s is dead (%s); marking needs-reauth", did, e.error)
                reason = reauth_message(grant.pds_url)
                sql.execute("UPDATE auth_grant SET status = 'needs_reauth', status_reason = ?, updated_at = ?"
                            " WHERE did = ? AND lease_owner = ?", (reason, int(self.clock()), did, owner))
                raise NeedsReauth(reason, status=401) from None
            except OAuthError as e:
                raise ServerError(f"Could not renew the session: {e.message}") from None
            s = self.sealer.seal
            saved = sql.execute(
                "UPDATE auth_grant SET access_enc = ?, refresh_enc = ?, expires_at = ?, scope = ?,"
                " as_nonce = COALESCE(?, as_nonce), updated_at = ? WHERE did = ? AND lease_owner = ?",
                (s(access, f"{did}:access"), s(refresh, f"{did}:refresh"), expires_at, scope, as_nonce,
                 int(self.clock()), did, owner))
            if saved.rowcount != 1:
                # The grant was replaced (a new sign-in) while we refreshed the old one; the new one wins.
                log.warning("grant of %s changed during a refresh; discarding the refreshed tokens", did)
            return self.usable(did)
        finally:
            sql.execute("UPDATE auth_grant SET lease_owner = NULL, lease_until = NULL WHERE did ="
                        " ? AND lease_owner = ?",
                        (did, owner))

    def _take_from_gone_holder(self, did: str, owner: str, now: int) -> bool:
        """A lease whose holder was killed on this machine (locks.gone) is taken at once rather
        than waited out: otherwise the owner's every request waits up to LEASE_SECS after a crash."""
        row = sql.execute("SELECT lease_owner FROM auth_grant WHERE did = ? AND status = 'active'", (did,)).fetchone()
        if row is None or not locks.gone(row[0]):
            return False
        took = sql.execute("UPDATE auth_grant SET lease_owner = ?, lease_until = ? WHERE did = ? AND status = 'active'"
                           " AND lease_owner = ?", (owner, now + LEASE_SECS, did, row[0]))
        if took.rowcount == 1:
            log.warning("took the session refresh lease of %s from %s at once: that process is gone", did, row[0])
        return took.rowcount == 1


class GrantAuth(Auth):
    """pds.Auth for a signed-in account: DPoP for OAuth grants, Bearer for app-password grants."""

    def __init__(self, store: GrantStore, did: str):
        self.store, self.did = store, did
        self.grant: Grant | None = None

    def headers(self, method: str, url: str) -> dict[str, str]:
        g = self.grant = self.store.ensure_fresh(self.did)
        if g.kind == "password":
            return {"Authorization": f"Bearer {g.access}"}
        return {"Authorization": f"DPoP {g.access}",
                "DPoP": dpop.proof(g.dpop_key, method, url, nonce=g.pds_nonce, access_token=g.access)}

    def observe(self, response) -> None:
        nonce = response.headers.get("DPoP-Nonce")
        if nonce and self.grant is not None and self.grant.kind == "oauth" and nonce != self.grant.pds_nonce:
            self.store.save_nonce(self.did, "pds_nonce", nonce)
            self.grant.pds_nonce = nonce

    def wants_retry(self, response, error: str) -> bool:
        return error == "use_dpop_nonce" or "use_dpop_nonce" in response.headers.get("WWW-Authenticate", "")

    def refresh(self) -> bool:
        if self.grant is None:
            return False
        self.store.refresh_after_rejection(self.did, self.grant.access)
        return True
