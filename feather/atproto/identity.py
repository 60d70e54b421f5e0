"""Identity: handle → DID, DID → document, the PDS endpoint and signing key, the two-way check.

Handles resolve by DNS TXT `_atproto.<handle>`, then `https://<handle>/.well-known/atproto-did`,
then (like FeatherReader's reader) `com.atproto.identity.resolveHandle` on a configured service.
DID documents come from the PLC directory (did:plc) or the host itself (did:web). Every fetch
goes through the guarded client: handles and DID documents are chosen by strangers.

    resolver = resolver_from_settings(settings)
    did = resolver.resolve_actor("alice.example.com")      # or a DID, returned as is
    url = resolver.pds_endpoint(did)
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import quote, urlsplit

import dns.exception
import dns.resolver

from feather.atproto import crypto
from feather.atproto.cache import TtlCache
from feather.atproto.syntax import did_web_host, is_disallowed_handle_tld, is_valid_did, is_valid_handle, normalize_handle
from feather.outbound import GuardedClient, NetError

log = logging.getLogger(__name__)

TxtLookup = Callable[[str], list[str]]
CACHE_TTL_SECS = 300.0  # the handle spec asks for under 10 minutes where auth depends on it
_MAX_DOC_BYTES = 64 * 1024


class IdentityError(Exception):
    """An identifier that could not be resolved or verified; the message is fit to show a user."""

    def __init__(self, message: str, identifier: str = ""):
        super().__init__(message)
        self.identifier = identifier


class UnresolvableHandle(IdentityError):
    pass


class UnresolvableDid(IdentityError):
    pass


class HandleMismatch(IdentityError):
    """The handle names a DID whose document names another handle (or none)."""


@dataclass(frozen=True)
class DidDocument:
    did: str
    handle: str | None  # as claimed by alsoKnownAs; not verified
    pds: str | None  # the #atproto_pds endpoint, scheme://host[:port]
    raw: dict = field(repr=False, compare=False)

    def signing_method(self) -> dict | None:
        for method in _list(self.raw.get("verificationMethod")):
            if isinstance(method, dict) and method.get("id") in ("#atproto", f"{self.did}#atproto"):
                return method
        return None

    def service_endpoint(self, fragment: str, kind: str) -> str | None:
        """The endpoint of the service `#<fragment>` of type `kind` (scheme://host[:port]), or None."""
        for svc in _list(self.raw.get("service")):
            if (isinstance(svc, dict) and svc.get("id") in (f"#{fragment}", f"{self.did}#{fragment}")
                    and svc.get("type") == kind):
                return _endpoint(svc.get("serviceEndpoint"))
        return None


@dataclass(frozen=True)
class Identity:
    did: str
    handle: str | None  # None when the handle does not verify both ways
    pds: str
    document: DidDocument


def dns_txt_lookup(timeout: float = 3.0) -> TxtLookup:
    """A TXT lookup through dnspython (cooperative under gevent); no answer of any kind → []."""
    def lookup(name: str) -> list[str]:
        try:
            resolver = dns.resolver.Resolver()
            resolver.lifetime = timeout
            answer = resolver.resolve(name, "TXT")
        except (dns.exception.DNSException, OSError) as e:  # NXDOMAIN, no answer, timeout, no resolv.conf
            log.debug("TXT %s: %s", name, e)
            return []
        return [b"".join(rdata.strings).decode("utf-8", "replace") for rdata in answer]

    return lookup


class IdentityResolver:
    def __init__(self, http: GuardedClient, *, handle_resolver: str = "https://bsky.social",
                 plc_url: str = "https://plc.directory", txt_lookup: TxtLookup | None = None,
                 cache_ttl: float = CACHE_TTL_SECS, clock: Callable[[], float] = time.monotonic):
        self.http = http
        self.handle_resolver = handle_resolver.rstrip("/")
        self.plc_url = plc_url.rstrip("/")
        self.txt_lookup = txt_lookup if txt_lookup is not None else dns_txt_lookup()
        self.cache = TtlCache(cache_ttl, clock)

    # --- handles
    def resolve_handle(self, handle: str) -> str:
        """The DID a handle claims (not yet checked against the DID's document)."""
        h = handle.strip().lstrip("@").lower() if isinstance(handle, str) else ""
        if not is_valid_handle(h):
            raise UnresolvableHandle(f"{handle!r} is not a valid handle.", str(handle))
        cached = self.cache.get(("h", h))
        if cached:
            return cached
        if is_disallowed_handle_tld(h) and not h.endswith(".test"):
            raise UnresolvableHandle(f"The handle {h} uses a reserved top-level domain.", h)
        did = None
        # .test is for development: it has no DNS and no web host, only the configured service.
        if not h.endswith(".test"):
            did = self._by_dns(h) or self._by_well_known(h)
        did = did or self._by_service(h)
        if not did:
            raise UnresolvableHandle(f"Could not find the account for the handle {h}.", h)
        self.cache.put(("h", h), did)
        return did

    def _by_dns(self, handle: str) -> str | None:
        found = {v[4:].strip() for v in self.txt_lookup(f"_atproto.{handle}") if v.startswith("did=")}
        valid = {d for d in found if is_valid_did(d)}
        if len(found) > 1:
            # Two different claims: neither can be trusted, and the other methods must not win.
            raise UnresolvableHandle(f"The DNS records of {handle} name more than one account.", handle)
        return valid.pop() if valid else None

    def _by_well_known(self, handle: str) -> str | None:
        try:
            resp = self.http.get(f"https://{handle}/.well-known/atproto-did", max_body_bytes=2048)
        except NetError as e:
            log.debug("well-known %s: %s", handle, e)
            return None
        if not 200 <= resp.status_code < 300:
            return None
        lines = resp.text.strip().splitlines()
        did = lines[0].strip() if lines else ""
        return did if is_valid_did(did) else None

    def _by_service(self, handle: str) -> str | None:
        if not self.handle_resolver:
            return None
        try:
            resp = self.http.get(f"{self.handle_resolver}/xrpc/com.atproto.identity.resolveHandle",
                                 params={"handle": handle}, max_body_bytes=4096)
            did = resp.json().get("did") if resp.status_code == 200 else None
        except (NetError, ValueError, AttributeError) as e:
            log.info("resolveHandle %s on %s: %s", handle, self.handle_resolver, e)
            return None
        return did if is_valid_did(did) else None

    # --- DIDs
    def resolve_did(self, did: str) -> DidDocument:
        if not is_valid_did(did):
            raise UnresolvableDid(f"{did!r} is not a valid DID.", str(did))
        cached = self.cache.get(("d", did))
        if cached:
            return cached
        if did.startswith("did:plc:"):
            url = f"{self.plc_url}/{quote(did, safe=':')}"
        elif did.startswith("did:web:"):
            url = self._did_web_url(did)
        else:
            raise UnresolvableDid(f"{did} uses a DID method atproto does not support.", did)
        try:
            resp = self.http.get(url, max_body_bytes=_MAX_DOC_BYTES, headers={"Accept": "application/json"})
        except NetError as e:
            raise UnresolvableDid(f"Could not fetch the DID document of {did}: {e}", did) from None
        if resp.status_code in (404, 410):
            raise UnresolvableDid(f"The account {did} does not exist or was deleted.", did)
        if resp.status_code != 200:
            raise UnresolvableDid(f"The DID document of {did} could not be fetched (HTTP {resp.status_code}).",
                                  did)
        try:
            raw = resp.json()
        except ValueError:
            raw = None
        doc = parse_did_document(did, raw)
        self.cache.put(("d", did), doc)
        return doc

    def _did_web_url(self, did: str) -> str:
        host = did_web_host(did)
        if host is None:
            raise UnresolvableDid(f"{did} is not a did:web atproto accepts (bare host names only).", did)
        scheme = "http" if host.split(":")[0] == "localhost" and self.http.allow_private_network else "https"
        return f"{scheme}://{host}/.well-known/did.json"

    # --- combined
    def resolve_actor(self, handle_or_did: str) -> str:
        """A DID for a DID (returned as is) or a handle (resolved, one direction)."""
        ident = handle_or_did.strip() if isinstance(handle_or_did, str) else ""
        if ident.startswith("did:"):
            if not is_valid_did(ident):
                raise UnresolvableDid(f"{ident!r} is not a valid DID.", ident)
            return ident
        return self.resolve_handle(ident)

    def resolve_identity(self, handle_or_did: str) -> Identity:
        """DID, verified handle and PDS. A handle that does not point back raises HandleMismatch;
        a DID whose claimed handle does not verify gets handle None (shown as handle.invalid)."""
        ident = handle_or_did.strip().lstrip("@") if isinstance(handle_or_did, str) else ""
        did = self.resolve_actor(ident)
        doc = self.resolve_did(did)
        if not doc.pds:
            raise UnresolvableDid(f"The account {did} names no PDS.", did)
        if not ident.startswith("did:"):
            handle = ident.lower()
            if doc.handle != handle:
                raise HandleMismatch(f"The handle {handle} is not confirmed by its account's DID document.",
                                     handle)
            return Identity(did, handle, doc.pds, doc)
        handle = None
        if doc.handle:
            try:
                handle = doc.handle if self.resolve_handle(doc.handle) == did else None
            except IdentityError:
                handle = None
        return Identity(did, handle, doc.pds, doc)

    def pds_endpoint(self, did: str) -> str:
        doc = self.resolve_did(did)
        if not doc.pds:
            raise UnresolvableDid(f"The account {did} names no PDS.", did)
        return doc.pds

    def labeler_endpoint(self, did: str) -> str:
        """Where a labeler serves its labels: the `#atproto_labeler` service (AtprotoLabeler)."""
        endpoint = self.resolve_did(did).service_endpoint("atproto_labeler", "AtprotoLabeler")
        if not endpoint:
            raise UnresolvableDid(f"The account {did} is not a labeler (its DID document names no labeler service).",
                                  did)
        return endpoint

    def signing_key(self, did: str):
        """The `#atproto` key as a cryptography EllipticCurvePublicKey (P-256 or secp256k1)."""
        method = self.resolve_did(did).signing_method()
        if method is None:
            raise UnresolvableDid(f"The account {did} publishes no signing key.", did)
        try:
            return crypto.parse_verification_method(method)[1]
        except crypto.InvalidKey as e:
            raise UnresolvableDid(f"The signing key of {did} is unusable: {e}", did) from None

    def forget(self, handle_or_did: str) -> None:
        """Drop a cached answer (e.g. after an #identity event on the stream)."""
        self.cache.discard(("h", handle_or_did.lower()))
        self.cache.discard(("d", handle_or_did))


def parse_did_document(did: str, raw: Any) -> DidDocument:
    if not isinstance(raw, dict) or raw.get("id") != did:
        raise UnresolvableDid(f"The DID document of {did} is malformed or belongs to another DID.", did)
    handle = None
    for aka in _list(raw.get("alsoKnownAs")):
        if isinstance(aka, str) and aka.startswith("at://") and is_valid_handle(aka[5:]):
            handle = normalize_handle(aka[5:])
            break
    pds = None
    for svc in _list(raw.get("service")):
        if (isinstance(svc, dict) and svc.get("id") in ("#atproto_pds", f"{did}#atproto_pds")
                and svc.get("type") == "AtprotoPersonalDataServer"):
            pds = _endpoint(svc.get("serviceEndpoint"))
            break
    return DidDocument(did, handle, pds, raw)


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []  # a stranger's JSON may hold 5 where a list belongs


def _endpoint(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        parts = urlsplit(value.rstrip("/"))
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return None
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.path or parts.query or parts.username:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def http_client_from_settings(settings) -> GuardedClient:
    return GuardedClient(
        allow_private_network=settings.featherreader_allow_private_network,
        read_timeout=float(settings.featherreader_http_timeout_secs),
        max_body_bytes=settings.featherreader_http_max_body_bytes,
    )


def resolver_for(app) -> IdentityResolver:
    """The app's shared resolver (one cache per process)."""
    found = app.extensions.get("identity_resolver")
    if found is None:
        found = app.extensions["identity_resolver"] = resolver_from_settings(app.config["FEATHER"])
    return found


def resolver_from_settings(settings, http: GuardedClient | None = None, **kwargs) -> IdentityResolver:
    return IdentityResolver(
        http or http_client_from_settings(settings),
        handle_resolver=settings.featherreader_handle_resolver,
        plc_url=settings.featherreader_plc_url,
        **kwargs,
    )
