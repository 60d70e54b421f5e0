"""What sync needs from a PDS, as one small protocol, the adapter over feather/atproto/pds.py, and
which one the app uses.

The runner, backfill and sweep talk only to `FollowWriter`; unit tests pass the in-memory
feather.sync.memory.MemoryPds, production passes `PdsFollowWriter`. The jobs, the pages and the API
find the app's writer through `app_writer` alone. Errors are the PDS client's
typed errors (RateLimited, AuthExpired, AuthInvalid, ScopeMissing, RecordNotFound, BadRequest,
ServerError, NetworkError) plus `SessionGone`: the owner has no usable sign-in any more.
"""
from __future__ import annotations

import logging
from typing import Callable, Protocol

from feather import auth
from feather.atproto.identity import IdentityError, http_client_from_settings, resolver_for
from feather.atproto.pds import (  # noqa: F401
    AuthExpired,
    AuthInvalid,
    BadRequest,
    NetworkError,
    PdsClient,
    PdsError,
    RateLimited,
    RecordNotFound,
    ScopeMissing,
    ServerError,
)

log = logging.getLogger(__name__)


class SessionGone(PdsError):
    """No session row for the owner (signed out, revoked, needs re-auth): pause the set at once."""


class FollowWriter(Protocol):
    def profile_exists(self, subject: str, collection: str) -> bool:
        """Whether subject has the `self` record of this profile collection."""

    def get_follow(self, owner: str, collection: str, rkey: str) -> str | None:
        """The subject of owner's follow record at rkey, or None when there is none."""

    def create_follow(self, owner: str, collection: str, rkey: str, subject: str, created_at: str) -> None:
        """Write the follow record at exactly this rkey."""

    def delete_follow(self, owner: str, collection: str, rkey: str) -> None:
        """Delete owner's record at rkey (a missing record is not an error)."""

    def list_follows(self, owner: str, collection: str, cursor: str | None) -> tuple[list[tuple[str, str]], str | None]:
        """One page of owner's follow records as (rkey, subject), and the next cursor (None at the end)."""


def follow_record(collection: str, subject: str, created_at: str) -> dict:
    return {"$type": collection, "subject": subject, "createdAt": created_at}


def self_record(client: PdsClient, did: str, collection: str) -> dict | None:
    """The getRecord answer for did's `self` record of collection, or None when there is none (no
    record, or a repo that is gone: nobody can be followed or named there)."""
    try:
        return client.get_record(did, collection, "self")
    except RecordNotFound:
        return None
    except BadRequest as exc:
        if exc.error in ("RepoNotFound", "RepoDeactivated", "RepoTakendown", "InvalidRequest"):
            return None
        raise


def _rkey(uri: str) -> str:
    return uri.rsplit("/", 1)[-1]


class PdsFollowWriter:
    """FollowWriter over PdsClient. Writes use the owner's signed-in client (feather/auth);
    reads are anonymous against the PDS named by the DID document (strangers' hosts, guarded)."""

    def __init__(self, session_for: Callable[[str], PdsClient | None], resolver, http):
        self.session_for = session_for  # owner DID -> authenticated PdsClient, or None when signed out
        self.resolver = resolver  # feather.atproto.identity.IdentityResolver
        self.http = http  # feather.outbound.GuardedClient

    def _reader(self, did: str) -> PdsClient:
        try:
            return PdsClient(self.http, self.resolver.pds_endpoint(did))
        except IdentityError as exc:
            raise NetworkError(f"Could not resolve {did}: {exc}") from exc

    def _writer(self, owner: str) -> PdsClient:
        try:
            client = self.session_for(owner)
        except AuthInvalid as exc:  # feather/auth's NeedsReauth: the session row is gone or dead
            raise SessionGone(str(exc), status=401) from exc
        if client is None:
            raise SessionGone(f"{owner} has no usable session", status=401)
        return client

    def profile_exists(self, subject: str, collection: str) -> bool:
        return self_record(self._reader(subject), subject, collection) is not None

    def get_follow(self, owner: str, collection: str, rkey: str) -> str | None:
        try:
            data = self._reader(owner).get_record(owner, collection, rkey)
        except RecordNotFound:
            return None
        value = data.get("value")
        subject = value.get("subject") if isinstance(value, dict) else None
        return subject if isinstance(subject, str) else None

    def create_follow(self, owner: str, collection: str, rkey: str, subject: str, created_at: str) -> None:
        client = self._writer(owner)
        try:
            client.create_record(owner, collection, follow_record(collection, subject, created_at), rkey=rkey)
        except ServerError:
            # The reference PDS answers a create at an existing rkey with a 500. If the record is
            # there and names our subject, an earlier try succeeded: that is success, not a failure.
            if self.get_follow(owner, collection, rkey) == subject:
                return
            raise

    def delete_follow(self, owner: str, collection: str, rkey: str) -> None:
        try:
            self._writer(owner).delete_record(owner, collection, rkey)
        except RecordNotFound:
            return

    def list_follows(self, owner: str, collection: str, cursor: str | None):
        records, next_cursor = self._reader(owner).list_records(owner, collection, limit=100, cursor=cursor)
        out = []
        for record in records:
            value = record.get("value")
            subject = value.get("subject") if isinstance(value, dict) else None
            if isinstance(record.get("uri"), str) and isinstance(subject, str):
                out.append((_rkey(record["uri"]), subject))
        return out, (next_cursor if records else None)


# --- the app's writer: app.extensions["sync_writer"]


def install_writer(app, writer) -> None:
    """Give the jobs and pages a FollowWriter (the demo and the tests install an in-memory PDS)."""
    app.extensions["sync_writer"] = writer


def default_writer(app):
    """The production FollowWriter: writes with feather/auth's session for the owner, reads anonymously."""
    app = getattr(app, "_get_current_object", lambda: app)()  # the writer outlives any context proxy
    if "auth" not in app.extensions:
        return None
    writer = PdsFollowWriter(lambda did: auth.pds_client(did, app), resolver_for(app),
                             http_client_from_settings(app.config["FEATHER"]))
    app.extensions["sync_writer"] = writer
    return writer


def app_writer(app) -> FollowWriter | None:
    """The writer installed on app, else the production one; None while feather/auth is not wired
    (the write jobs then skip their turn and the pages say they cannot read)."""
    return app.extensions.get("sync_writer") or default_writer(app)
