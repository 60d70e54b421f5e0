"""The atproto OAuth client: who we are (client metadata), and the calls to authorization servers.

Production is a confidential client: client_id `<FEATHERREADER_PUBLIC_URL>/oauth-client-metadata.json`,
private_key_jwt with ES256 keys from the environment. Without a public URL (development and tests)
it is the loopback client the spec defines (`http://localhost?redirect_uri=…&scope=…`), a public
client; the reference PDS on loopback can only talk to that one.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

from joserfc.jwk import ECKey

from feather.atproto.cache import TtlCache
from feather.auth import dpop
from feather.config import ConfigError
from feather.outbound import GuardedClient, NetError
from feather.parsing import ascii_int

log = logging.getLogger(__name__)

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
# Anyone can type an issuer into the sign-in form, so the metadata cache is bounded in time and
# size, and what one entry keeps is bounded too: a real server's URLs are far shorter than this,
# and without it a 256 KB metadata body could park 256 KB strings in memory per issuer.
SERVER_TTL_SECS = 600.0
MAX_SERVERS = 1_000
MAX_URL_CHARS = 2_048
_ENDPOINTS = ("authorization_endpoint", "token_endpoint", "pushed_authorization_request_endpoint")


class OAuthError(Exception):
    """An authorization server refused or failed; `message` is a plain sentence for the user."""

    def __init__(self, message: str, error: str = ""):
        super().__init__(message)
        self.message, self.error = message, error


class InvalidGrant(OAuthError):
    """The refresh token (or code) is dead: the session must be authorised again."""


@dataclass(frozen=True)
class ClientConfig:
    client_id: str
    redirect_uri: str
    scope: str  # every scope this client may ever ask for (the metadata's superset)
    keys: tuple[ECKey, ...] = field(default=(), repr=False)
    public_url: str = ""
    client_name: str = "Feather"

    @property
    def confidential(self) -> bool:
        return bool(self.keys)

    @classmethod
    def from_settings(cls, settings, scopes: list[str]) -> "ClientConfig":
        scope = " ".join(dict.fromkeys(["atproto", *scopes]))
        public = settings.featherreader_public_url.strip().rstrip("/")
        if public.startswith("https://"):
            parts = urlsplit(public)
            if parts.path or parts.query or not parts.hostname:
                raise ConfigError("FEATHERREADER_PUBLIC_URL", f"expected an origin like https://host; got {public!r}")
            keys = tuple(dpop.load_client_keys(settings.featherreader_oauth_client_keys))
            if not keys:
                raise ConfigError("FEATHERREADER_OAUTH_CLIENT_KEYS",
                                  "a public https instance signs in as a confidential client and needs its ES256 "
                                  "key(s) here (a JWK or JWK Set with `kid`)")
            return cls(f"{public}/oauth-client-metadata.json", f"{public}/oauth/callback", scope, keys, public)
        if settings.is_production:
            raise ConfigError("FEATHERREADER_PUBLIC_URL",
                              "production needs the https origin users reach this instance at, e.g. "
                              "https://feather.example.com (it becomes the OAuth client_id)")
        # Loopback client: redirect to 127.0.0.1 (the spec forbids "localhost" there); the port is ignored.
        port = urlsplit(public).port if public else None
        redirect = f"http://127.0.0.1:{port or settings.port}/oauth/callback"
        client_id = "http://localhost?" + urlencode({"redirect_uri": redirect, "scope": scope})
        return cls(client_id, redirect, scope, (), public)

    def metadata(self) -> dict:
        meta = {
            "client_id": self.client_id, "client_name": self.client_name, "client_uri": self.public_url,
            "application_type": "web", "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"], "redirect_uris": [self.redirect_uri], "scope": self.scope,
            "dpop_bound_access_tokens": True,
            "token_endpoint_auth_method": "private_key_jwt" if self.confidential else "none",
        }
        if self.confidential:
            meta.update(token_endpoint_auth_signing_alg="ES256", jwks_uri=f"{self.public_url}/oauth/jwks.json",
                         policy_uri=f"{self.public_url}/privacy", tos_uri=f"{self.public_url}/terms")
        return meta

    def signing_key(self, kid: str | None = None) -> ECKey | None:
        if not self.keys:
            return None
        if kid is None:
            return self.keys[0]
        return next((k for k in self.keys if k.kid == kid), None)


@dataclass(frozen=True)
class AuthServer:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    par_endpoint: str
    revocation_endpoint: str | None


class OAuthClient:
    def __init__(self, http: GuardedClient, config: ClientConfig, *, clock=time.monotonic,
                 server_ttl: float = SERVER_TTL_SECS, max_servers: int = MAX_SERVERS):
        self.http, self.config = http, config
        self._servers = TtlCache(server_ttl, clock, max_entries=max_servers)  # issuer -> AuthServer

    # --- discovery
    def _get_json(self, url: str, what: str) -> dict:
        try:
            resp = self.http.get(url, headers={"Accept": "application/json"}, max_body_bytes=256 * 1024)
            data = resp.json() if resp.status_code == 200 else None
        except (NetError, ValueError) as e:
            raise OAuthError(f"Could not read the {what} at {url}: {e}") from None
        if not isinstance(data, dict):
            raise OAuthError(f"The {what} at {url} is missing or malformed.")
        return data

    def issuer_for_pds(self, pds_url: str) -> str:
        data = self._get_json(f"{pds_url.rstrip('/')}/.well-known/oauth-protected-resource",
                              "protected-resource metadata")
        servers = data.get("authorization_servers")
        if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
            raise OAuthError(f"{pds_url} does not name an authorization server.")
        return servers[0].rstrip("/")

    def server(self, issuer: str) -> AuthServer:
        hit = self._servers.get(issuer)
        if hit is not None:
            return hit
        if len(issuer) > MAX_URL_CHARS:
            raise OAuthError("That sign-in server's address is too long to be real.")
        meta = self._get_json(f"{issuer}/.well-known/oauth-authorization-server", "authorization-server metadata")
        if meta.get("issuer") != issuer:
            raise OAuthError(f"The authorization server at {issuer} claims to be {meta.get('issuer')!r}.")
        problems = [
            name for name, ok in (
                ("pushed authorization requests", meta.get("require_pushed_authorization_requests") is True),
                ("client metadata documents", meta.get("client_id_metadata_document_supported") is True),
                ("the iss response parameter", meta.get("authorization_response_iss_parameter_supported") is True),
                ("PKCE S256", "S256" in (meta.get("code_challenge_methods_supported") or [])),
                ("ES256 DPoP", "ES256" in (meta.get("dpop_signing_alg_values_supported") or [])),
                ("the atproto scope", "atproto" in (meta.get("scopes_supported") or [])),
            ) if not ok
        ]
        if problems:
            raise OAuthError(f"The authorization server {issuer} does not support {', '.join(problems)}.")
        endpoints = {k: meta.get(k) for k in _ENDPOINTS}
        if not all(isinstance(v, str) and v for v in endpoints.values()):
            raise OAuthError(f"The authorization server {issuer} lists no usable endpoints.")
        revocation = meta.get("revocation_endpoint") or None  # optional: absent or empty means none
        if revocation is not None and not isinstance(revocation, str):
            raise OAuthError(f"The authorization server {issuer} lists a malformed revocation endpoint.")
        if any(len(v) > MAX_URL_CHARS for v in (*endpoints.values(), revocation or "")):
            raise OAuthError(f"The authorization server {issuer} lists an endpoint address too long to be real.")
        server = AuthServer(issuer, endpoints["authorization_endpoint"], endpoints["token_endpoint"],
                            endpoints["pushed_authorization_request_endpoint"], revocation)
        self._servers.put(issuer, server)
        return server

    # --- requests to the authorization server
    def _post(self, server: AuthServer, url: str, form: dict, key: ECKey, nonce: str | None,
              kid: str | None = None) -> tuple[int, dict, str | None]:
        """POST with client authentication and a DPoP proof; one retry on a nonce challenge."""
        for attempt in (1, 2):
            body = dict(form, client_id=self.config.client_id)
            client_key = self.config.signing_key(kid)
            if self.config.confidential:
                if client_key is None:
                    raise InvalidGrant("This server's sign-in key changed; please sign in again.", "invalid_client")
                body.update(client_assertion_type=ASSERTION_TYPE,
                            client_assertion=dpop.client_assertion(client_key, self.config.client_id, server.issuer))
            headers = {"DPoP": dpop.proof(key, "POST", url, nonce=nonce), "Accept": "application/json"}
            try:
                resp = self.http.post(url, data=body, headers=headers, max_body_bytes=64 * 1024)
            except NetError as e:
                raise OAuthError(f"Could not reach the sign-in server {server.issuer}: {e}") from None
            nonce = resp.headers.get("DPoP-Nonce") or nonce
            try:
                data = resp.json()
            except ValueError:
                data = {}
            data = data if isinstance(data, dict) else {}
            if resp.status_code == 400 and data.get("error") == "use_dpop_nonce" and attempt == 1:
                continue
            return resp.status_code, data, nonce
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _fail(status: int, data: dict, doing: str) -> OAuthError:
        error = str(data.get("error") or f"http_{status}")
        detail = str(data.get("error_description") or error)
        cls = InvalidGrant if error == "invalid_grant" else OAuthError
        return cls(f"The sign-in server refused {doing}: {detail}.", error)

    def par(self, server: AuthServer, key: ECKey, *, scope: str, state: str, challenge: str,
            login_hint: str | None) -> tuple[str, str | None]:
        form = {"response_type": "code", "redirect_uri": self.config.redirect_uri, "scope": scope, "state": state,
                "code_challenge": challenge, "code_challenge_method": "S256"}
        if login_hint:
            form["login_hint"] = login_hint
        status, data, nonce = self._post(server, server.par_endpoint, form, key, None)
        if status not in (200, 201) or not isinstance(data.get("request_uri"), str):
            raise self._fail(status, data, "the sign-in request")
        return data["request_uri"], nonce

    def authorize_url(self, server: AuthServer, request_uri: str) -> str:
        return f"{server.authorization_endpoint}?" + urlencode({"client_id": self.config.client_id,
                                                                 "request_uri": request_uri})

    def exchange_code(self, server: AuthServer, key: ECKey, nonce: str | None, code: str,
                      verifier: str) -> tuple[dict, str | None]:
        form = {"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
                "redirect_uri": self.config.redirect_uri}
        status, data, nonce = self._post(server, server.token_endpoint, form, key, nonce)
        if status != 200:
            raise self._fail(status, data, "the sign-in")
        return self._checked_tokens(data), nonce

    def refresh(self, server: AuthServer, key: ECKey, nonce: str | None, refresh_token: str,
                kid: str | None) -> tuple[dict, str | None]:
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        status, data, nonce = self._post(server, server.token_endpoint, form, key, nonce, kid)
        if status != 200:
            raise self._fail(status, data, "to renew the session")
        return self._checked_tokens(data), nonce

    def revoke(self, server: AuthServer, key: ECKey, nonce: str | None, token: str, kid: str | None) -> None:
        if not server.revocation_endpoint:
            return
        try:
            self._post(server, server.revocation_endpoint, {"token": token}, key, nonce, kid)
        except OAuthError as e:  # best effort: the grant is being dropped either way
            log.info("revocation at %s failed: %s", server.issuer, e)

    @staticmethod
    def _checked_tokens(data: dict) -> dict:
        if str(data.get("token_type", "")).lower() != "dpop":
            raise OAuthError("The sign-in server issued a token that is not DPoP-bound.")
        if not all(isinstance(data.get(k), str) and data.get(k) for k in ("access_token", "refresh_token", "sub")):
            raise OAuthError("The sign-in server's reply is missing its tokens or account.")
        if "atproto" not in str(data.get("scope", "")).split():
            raise OAuthError("The sign-in server did not grant the atproto scope.")
        # The person picks the server: a lifetime it cannot spell (`"²"`, `true`, `-5`) means the
        # default one (None), never a ValueError (a 500 on the callback) or a token taken as fresh.
        raw = data.get("expires_in")
        if not (isinstance(raw, int) and not isinstance(raw, bool)):
            raw = ascii_int(raw)
        data["expires_in"] = raw if raw is not None and raw > 0 else None
        return data
