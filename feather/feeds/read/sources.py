"""What feeds need from the network, as a small interface over feather/atproto.

Production (AtprotoSources) resolves identities with feather.atproto.identity and lists repos
with feather.atproto.pds, both over the guarded HTTP client. Tests and other deployments put
their own object in `app.extensions["feeds_sources"]`.
"""
from __future__ import annotations

from typing import Iterator, Protocol

from feather.atproto.identity import IdentityError, http_client_from_settings, resolver_for
from feather.atproto.pds import BadRequest, PdsClient, PdsError, RecordNotFound
from feather.atproto.syntax import is_valid_at_identifier, is_valid_did
from feather.outbound import NetError

# What a lookup can fail with: the identity resolver and the guarded HTTP client under it, and
# for a repo listing or record the PDS client too.
RESOLVE_ERRORS = (IdentityError, NetError)
LOOKUP_ERRORS = (IdentityError, PdsError, NetError)


class SourceError(Exception):
    """A lookup or listing failed (network, PDS error); the message is safe to store."""


class FeedSources(Protocol):

    def resolve_actor(self, identifier: str) -> str | None:
        """A DID for a DID or handle, or None when it cannot be resolved."""

    def list_follows(self, did: str, collection: str, deadline: float) -> Iterator[tuple[str, str | None, dict]]:
        """(rkey, cid, record) of every record in did's repo collection, all pages, before deadline
        (a time.monotonic() value). Raises SourceError when the listing cannot be finished."""

    def signing_key(self, did: str):
        """did's `#atproto` signing key (a cryptography EllipticCurvePublicKey), or None."""

    def list_recent(self, did: str, collection: str, limit: int, deadline: float) -> list[tuple[str, str | None, dict]]:
        """(rkey, cid, record) of did's newest `limit` records in collection (the PDS lists newest
        first). Raises SourceError."""

    def get_record(self, did: str, collection: str, rkey: str) -> tuple[str | None, dict] | None:
        """(cid, record) or None when the record does not exist. Raises SourceError."""

    def collections(self, did: str) -> frozenset[str]:
        """The collections did's repo holds records in (optional: a source without it is asked
        for every collection). Raises SourceError."""

    def verified_handle(self, did: str) -> str | None:
        """did's handle when it verifies both ways, else None. Raises SourceError when unreachable."""


class AtprotoSources:
    def __init__(self, app):
        self.app = app

    def _resolver(self):
        return resolver_for(self.app)

    def resolve_actor(self, identifier: str) -> str | None:
        if not is_valid_at_identifier(identifier):
            return None
        try:
            did = self._resolver().resolve_actor(identifier)
        except RESOLVE_ERRORS:
            return None
        return did if is_valid_did(did) else None

    def would_fetch(self, identifier: str) -> bool:
        """Whether resolving identifier (a handle, or a DID's document) would go to the network
        now, i.e. is not in the resolver's cache; the caller pays the outbound budget for it."""
        if is_valid_did(identifier):
            key = ("d", identifier)
        elif is_valid_at_identifier(identifier):
            key = ("h", identifier.strip().lstrip("@").lower())
        else:
            return False  # refused without a lookup
        return self._resolver().cache.get(key) is None

    def list_follows(self, did: str, collection: str, deadline: float):
        try:
            endpoint = self._resolver().pds_endpoint(did)
            client = PdsClient(http_client_from_settings(self.app.config["FEATHER"]), endpoint)
            for item in client.iter_records(did, collection, deadline=deadline):
                uri, value = item.get("uri"), item.get("value")
                if isinstance(uri, str) and isinstance(value, dict):
                    yield uri.rsplit("/", 1)[-1], item.get("cid"), value
        except LOOKUP_ERRORS as exc:
            raise SourceError(f"{type(exc).__name__}: {exc}") from None

    def signing_key(self, did: str):
        try:
            return self._resolver().signing_key(did)
        except RESOLVE_ERRORS:
            return None

    def _pds(self, did: str):
        return PdsClient(http_client_from_settings(self.app.config["FEATHER"]), self._resolver().pds_endpoint(did))

    def list_recent(self, did: str, collection: str, limit: int, deadline: float):
        out = []
        try:
            for item in self._pds(did).iter_records(did, collection, limit=min(limit, 100), deadline=deadline):
                uri, value = item.get("uri"), item.get("value")
                if isinstance(uri, str) and isinstance(value, dict):
                    out.append((uri.rsplit("/", 1)[-1], item.get("cid"), value))
                if len(out) >= limit:
                    break
        except LOOKUP_ERRORS as exc:
            raise SourceError(f"{type(exc).__name__}: {exc}") from None
        return out

    def get_record(self, did: str, collection: str, rkey: str):
        try:
            data = self._pds(did).get_record(did, collection, rkey)
        except (RecordNotFound, BadRequest):
            return None  # the reference PDS answers a missing record with 400 RecordNotFound
        except LOOKUP_ERRORS as exc:
            raise SourceError(f"{type(exc).__name__}: {exc}") from None
        value = data.get("value")
        return (data.get("cid"), value) if isinstance(value, dict) else None

    def collections(self, did: str) -> frozenset[str]:
        try:
            return frozenset(self._pds(did).collections(did))
        except LOOKUP_ERRORS as exc:
            raise SourceError(f"{type(exc).__name__}: {exc}") from None

    def verified_handle(self, did: str):
        try:
            return self._resolver().resolve_identity(did).handle
        except RESOLVE_ERRORS as exc:
            raise SourceError(f"{type(exc).__name__}: {exc}") from None


def sources_for(app) -> FeedSources:
    found = app.extensions.get("feeds_sources")
    if found is None:
        found = app.extensions["feeds_sources"] = AtprotoSources(app)
    return found
