"""Sign-in orchestration: OAuth start/finish, app-password sign-in, and clients for features.

One AuthService per app (app.extensions["auth"]); tests swap in their own HTTP client/resolver.
"""
from __future__ import annotations

import base64
import logging
import re
import secrets
import time
from typing import Mapping
from urllib.parse import urlsplit

from feather import sql
from feather.atproto.identity import IdentityError, IdentityResolver, http_client_from_settings, resolver_from_settings
from feather.atproto.pds import PdsClient
from feather.auth import dpop
from feather.auth.grants import Grant, GrantAuth, GrantStore, NeedsReauth
from feather.auth.oauth import ClientConfig, InvalidGrant, OAuthClient, OAuthError
from feather.auth.seal import Sealer
from feather.outbound import GuardedClient, NetError
from feather.parsing import loads_limited

log = logging.getLogger(__name__)

REQUEST_TTL_SECS = 600
APP_PASSWORD = re.compile(r"[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}")

# Scopes features may ask for later (incremental consent); the client metadata must list them all.
_DECLARED: list[str] = []


def declare_scopes(*scopes: str) -> None:
    """Called by a feature's init_app: every scope it may ever request (e.g. a `repo:` permission)."""
    for scope in scopes:
        if scope not in _DECLARED:
            _DECLARED.append(scope)


def forget_expired_requests(now: int) -> None:
    """Sign-ins started more than REQUEST_TTL_SECS ago can no longer finish."""
    sql.execute("DELETE FROM auth_oauth_request WHERE created_at < ?", (now - REQUEST_TTL_SECS,))


def forget_requests_of(did: str) -> None:
    sql.execute("DELETE FROM auth_oauth_request WHERE did = ? OR expect_did = ?", (did, did))


class SignInError(Exception):
    """Sign-in failed; the message is a plain sentence for the person signing in."""


class AuthService:
    def __init__(self, settings, *, http: GuardedClient | None = None, resolver: IdentityResolver | None = None,
                 clock=time.time):
        self.settings, self.clock = settings, clock
        self.http = http or http_client_from_settings(settings)
        self.resolver = resolver or resolver_from_settings(settings, self.http)
        self.sealer = Sealer.from_settings(settings)
        self.grants = GrantStore(self.sealer, {"oauth": self._refresh_oauth, "password": self._refresh_password},
                                 clock)
        self._oauth: OAuthClient | None = None
        # Called with the DID after every successful sign-in (e.g. sync resumes a set paused
        # because its session was gone). A failing hook never fails the sign-in.
        self.sign_in_hooks: list = []

    @property
    def oauth(self) -> OAuthClient:
        # Built on first use: features declare their scopes in init_app, which may run after ours.
        if self._oauth is None:
            self._oauth = OAuthClient(self.http, ClientConfig.from_settings(self.settings, _DECLARED))
        return self._oauth

    # --- OAuth
    def start_oauth(self, identifier: str, *, extra_scopes: tuple[str, ...] = (), next_url: str | None = None,
                    expect_did: str | None = None) -> tuple[str, str]:
        """Begin a sign-in (or a consent upgrade for expect_did); returns (the URL to send the browser
        to, the state). The caller binds the state to the browser: finish_oauth alone cannot tell whose
        browser brings a callback back."""
        identifier = identifier.strip()
        did = handle = None
        try:
            if identifier.startswith(("https://", "http://")):
                pds_url = _origin(identifier)
                try:
                    issuer = self.oauth.issuer_for_pds(pds_url)
                except OAuthError:
                    issuer = pds_url  # an entryway is its own authorization server
            else:
                ident = self.resolver.resolve_identity(identifier)
                did, handle = ident.did, ident.handle
                issuer = self.oauth.issuer_for_pds(ident.pds)
            server = self.oauth.server(issuer)
        except IdentityError as e:
            raise SignInError(str(e)) from None
        except OAuthError as e:
            raise SignInError(e.message) from None
        scopes = ["atproto"]
        existing = self.grants.load(did) if did else None
        if existing is not None and existing.kind == "oauth":
            scopes += sorted(existing.scopes)  # signing in again must not drop what features were granted
        for scope in extra_scopes:
            if scope not in _DECLARED:
                raise ValueError(f"scope {scope!r} was never declared with declare_scopes()")
        scope = " ".join(dict.fromkeys(s for s in [*scopes, *extra_scopes] if s == "atproto" or s in _DECLARED))
        key, state = dpop.new_key(), secrets.token_urlsafe(24)
        verifier, challenge = dpop.pkce_pair()
        try:
            request_uri, nonce = self.oauth.par(server, key, scope=scope, state=state, challenge=challenge,
                                                login_hint=handle or did)
        except OAuthError as e:
            raise SignInError(e.message) from None
        now = int(self.clock())
        forget_expired_requests(now)
        sql.execute("INSERT INTO auth_oauth_request (state, issuer, did, handle, scope, verifier_enc, dpop_key_enc,"
                    " as_nonce, expect_did, next_url, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (state, server.issuer, did, handle, scope, self.sealer.seal(verifier, f"req:{state}"),
                     self.sealer.seal(dpop.key_to_json(key), f"req:{state}:dpop"), nonce, expect_did, next_url, now))
        return self.oauth.authorize_url(server, request_uri), state

    def finish_oauth(self, args: Mapping[str, str]) -> tuple[str, str | None]:
        """Complete the callback; returns (did, next_url). Every check failing raises SignInError."""
        state = args.get("state") or ""
        row = sql.execute("SELECT issuer, did, scope, verifier_enc, dpop_key_enc, as_nonce, expect_did, next_url,"
                          " created_at FROM auth_oauth_request WHERE state = ?", (state,)).fetchone()
        # Deleting first makes the state single-use even if two callbacks race.
        if row is None or sql.execute("DELETE FROM auth_oauth_request WHERE state = ?", (state,)).rowcount != 1 \
                or row[8] < self.clock() - REQUEST_TTL_SECS:
            raise SignInError("This sign-in link has expired or was already used. Please start again.")
        issuer, did, _scope, verifier_enc, key_enc, nonce, expect_did, next_url, _ = row
        if args.get("error"):
            detail = args.get("error_description") or args.get("error")
            raise SignInError(f"The sign-in was not completed: {detail}.")
        if args.get("iss") != issuer:
            raise SignInError("The sign-in answer came from a different server than the one asked. Please try again.")
        if not args.get("code"):
            raise SignInError("The sign-in answer carried no authorization code. Please try again.")
        key = dpop.key_from_json(self.sealer.open(key_enc, f"req:{state}:dpop"))
        try:
            server = self.oauth.server(issuer)
            tokens, nonce = self.oauth.exchange_code(server, key, nonce, args["code"],
                                                     self.sealer.open(verifier_enc, f"req:{state}"))
        except OAuthError as e:
            raise SignInError(e.message) from None
        sub = tokens["sub"]
        if (did and sub != did) or (expect_did and sub != expect_did):
            raise SignInError("You approved the request as a different account than the one that started it.")
        try:
            self.resolver.forget(sub)  # fresh answers: this decides who is signed in
            ident = self.resolver.resolve_identity(sub)
            if self.oauth.issuer_for_pds(ident.pds) != issuer:
                raise SignInError("That account's server does not use this sign-in server. Sign-in refused.")
        except (IdentityError, OAuthError) as e:
            raise SignInError(f"Could not confirm the account that signed in: {e}") from None
        self._replace_grant(Grant(
            did=sub, kind="oauth", handle=ident.handle, pds_url=ident.pds, issuer=issuer, scope=tokens["scope"],
            access=tokens["access_token"], refresh=tokens["refresh_token"],
            expires_at=int(self.clock()) + int(tokens.get("expires_in") or 300), dpop_key=key, as_nonce=nonce,
            pds_nonce=None, client_kid=self._client_kid()))
        self._signed_in(sub)
        return sub, next_url

    def _replace_grant(self, grant: Grant) -> None:
        """Keep the new sign-in's grant and end the session it replaces at the person's server:
        Feather holds one grant per account, so the old tokens would otherwise stay valid there,
        unused, until they expire. Work holding the old grant is refused once and renews from
        the new one (GrantStore.refresh_after_rejection)."""
        old = self.grants.load(grant.did)
        self.grants.save(grant)
        if old is not None and old.refresh and old.refresh != grant.refresh:
            self._revoke(old)

    def _signed_in(self, did: str) -> None:
        for hook in self.sign_in_hooks:
            try:
                hook(did)
            except Exception:
                log.exception("auth: a sign-in hook failed for %s", did)

    def _client_kid(self) -> str | None:
        # Refreshes must be signed with the key that started the session: remember which one.
        key = self.oauth.config.signing_key()
        return key.kid if key is not None else None

    def _refresh_oauth(self, grant: Grant):
        server = self.oauth.server(grant.issuer)
        tokens, nonce = self.oauth.refresh(server, grant.dpop_key, grant.as_nonce, grant.refresh, grant.client_kid)
        if tokens["sub"] != grant.did:
            raise InvalidGrant("The renewed session belongs to another account.", "invalid_grant")
        return (tokens["access_token"], tokens["refresh_token"],
                int(self.clock()) + int(tokens.get("expires_in") or 300), tokens["scope"], nonce)

    # --- app passwords
    def sign_in_password(self, identifier: str, password: str) -> str:
        if not APP_PASSWORD.fullmatch(password.strip()):
            raise SignInError("Use an app password (four groups of four letters or digits, like "
                              "abcd-efgh-ijkl-mnop), not your account password. You can create one in your "
                              "account's settings under App Passwords.")
        try:
            ident = self.resolver.resolve_identity(identifier)
        except IdentityError as e:
            raise SignInError(str(e)) from None
        status, data = self._xrpc_post(ident.pds, "com.atproto.server.createSession",
                                       {"identifier": ident.did, "password": password.strip()})
        if status == 429:
            raise SignInError("Your server is refusing sign-ins for a few minutes (too many attempts). "
                              "Try again later.")
        if status in (400, 401):
            raise SignInError("The handle or app password is wrong.")
        if status != 200 or data.get("did") != ident.did or not _tokens(data):
            raise SignInError("Your server did not complete the sign-in. Try again later.")
        self._replace_grant(Grant(
            did=ident.did, kind="password", handle=ident.handle, pds_url=ident.pds, issuer=None,
            scope="com.atproto.appPass", access=data["accessJwt"], refresh=data["refreshJwt"],
            expires_at=_jwt_exp(data["accessJwt"], int(self.clock()) + 600), dpop_key=None, as_nonce=None,
            pds_nonce=None, client_kid=None))
        self._signed_in(ident.did)
        return ident.did

    def _refresh_password(self, grant: Grant):
        status, data = self._xrpc_post(grant.pds_url, "com.atproto.server.refreshSession", None,
                                       token=grant.refresh)
        if status in (400, 401):
            raise InvalidGrant(f"refreshSession answered {data.get('error') or status}", "invalid_grant")
        if status != 200 or data.get("did") != grant.did or not _tokens(data):
            raise OAuthError(f"refreshSession failed with HTTP {status}")
        return (data["accessJwt"], data["refreshJwt"], _jwt_exp(data["accessJwt"], int(self.clock()) + 600),
                grant.scope, None)

    def _xrpc_post(self, pds_url: str, nsid: str, body, token: str | None = None) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            resp = self.http.post(f"{pds_url}/xrpc/{nsid}", json=body, headers=headers, max_body_bytes=64 * 1024)
            data = resp.json()
        except NetError as e:
            raise SignInError(f"Could not reach your server: {e}") from None
        except ValueError:
            data = {}
        return resp.status_code, data if isinstance(data, dict) else {}

    # --- for features
    def pds_client(self, did: str) -> PdsClient:
        """A client acting as did (OAuth/DPoP or app password). Raises NeedsReauth if it cannot."""
        grant = self.grants.usable(did)
        return PdsClient(self.http, grant.pds_url, GrantAuth(self.grants, did))

    def has_scopes(self, did: str, scopes) -> bool:
        grant = self.grants.load(did)
        if grant is None or grant.status != "active":
            return False
        return grant.kind == "password" or set(scopes) <= grant.scopes

    def revoke_everywhere(self, did: str) -> None:
        """End the session at the person's server (best effort); the grant row stays for the caller.
        OAuth: both tokens at the revocation endpoint (refresh first: it is what keeps the session
        alive). App password: deleteSession with the refresh token, which ends that session."""
        try:
            grant = self.grants.usable(did)
        except NeedsReauth:
            return
        self._revoke(grant)

    def _revoke(self, grant: Grant) -> None:
        try:
            if grant.kind == "oauth":
                server = self.oauth.server(grant.issuer)
                for token in (grant.refresh, grant.access):
                    self.oauth.revoke(server, grant.dpop_key, grant.as_nonce, token, grant.client_kid)
            elif grant.refresh:
                self._xrpc_post(grant.pds_url, "com.atproto.server.deleteSession", None, token=grant.refresh)
        except (OAuthError, SignInError) as e:
            log.info("auth: could not end the previous session of %s at its server: %s", grant.did, e)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    if not parts.hostname:
        raise SignInError(f"{url!r} is not a server address.")
    return f"{parts.scheme}://{parts.netloc}"


def _jwt_exp(token: str, default: int) -> int:
    """The exp claim of our own session token, only to schedule the refresh (no trust involved)."""
    try:
        part = token.split(".")[1]
        exp = loads_limited(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))["exp"]
    except (AttributeError, IndexError, ValueError, KeyError, TypeError):
        return default
    # The server's JSON may say NaN, Infinity or a number no column holds: int() of the first two
    # raises, the last fails the grant's write.
    if isinstance(exp, bool) or not isinstance(exp, (int, float)) or not 1 <= exp < 2 ** 53:
        return default  # (below 1 a float would truncate to 0, "already expired" by accident)
    return int(exp)


def _tokens(data: dict) -> bool:
    """Whether a createSession/refreshSession answer carries both tokens as strings of a sane size
    (a hostile server's reply is otherwise a KeyError or a megabyte in the grants table)."""
    return all(isinstance(data.get(k), str) and 0 < len(data[k]) <= 16_384 for k in ("accessJwt", "refreshJwt"))
