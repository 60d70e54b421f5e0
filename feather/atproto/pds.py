"""The PDS client: com.atproto.repo reads and writes, with errors typed for what callers do next.

One client, three kinds of auth behind one small interface (`Auth`): anonymous (public reads of
anyone's repo), Bearer (app-password sessions) and DPoP (OAuth; feather/auth/oauth_auth.py).
All HTTP goes through the guarded client: a PDS URL comes from a stranger's DID document.

    client = PdsClient(http, "https://pds.example.com")            # anonymous
    for rec in client.iter_records(did, "app.bsky.graph.follow"):
        ...
"""
from __future__ import annotations

import email.utils
import logging
import time
from typing import Any, Callable, Iterator

from feather.outbound import GuardedClient, NetError
from feather.parsing import ascii_int

log = logging.getLogger(__name__)

MAX_PAGES = 1000  # listRecords at 100 a page: 100 000 records, well past any sane collection


class PdsError(Exception):
    """Base of every PDS failure. `error` is the XRPC error name (or ""), `status` the HTTP status."""

    def __init__(self, message: str, *, status: int = 0, error: str = ""):
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


class RateLimited(PdsError):
    """429. `reset_at` is the Unix time the limit resets (ratelimit-reset or Retry-After), or None."""

    def __init__(self, message: str, *, reset_at: float | None, status: int = 429, error: str = ""):
        super().__init__(message, status=status, error=error)
        self.reset_at = reset_at


class AuthExpired(PdsError):
    """The access token expired or was rejected as stale; a refresh may fix it."""


class AuthInvalid(PdsError):
    """The credentials are unusable (missing, malformed, revoked); only signing in again helps."""


class ScopeMissing(PdsError):
    """403 ScopeMissingError: the OAuth grant lacks a scope; ask the user for it (incremental consent)."""


class RecordNotFound(PdsError):
    pass


class BadRequest(PdsError):
    """Any other 4xx: the request itself is wrong; retrying it unchanged will not help."""


class ServerError(PdsError):
    """5xx or a reply that is not the JSON XRPC promises; worth retrying later."""


class NetworkError(PdsError):
    """The PDS could not be reached (DNS, connect, TLS, timeout, blocked destination)."""


class Auth:
    """Anonymous: no header. Subclasses add credentials and react to the server's answers."""

    did: str | None = None

    def headers(self, method: str, url: str) -> dict[str, str]:
        return {}

    def observe(self, response) -> None:
        """See every response (DPoP keeps the server's nonce)."""

    def wants_retry(self, response, error: str) -> bool:
        """True once when the request should simply be sent again (a DPoP nonce challenge)."""
        return False

    def refresh(self) -> bool:
        """Renew the credentials after an AuthExpired; True if a retry is worth it."""
        return False


AnonymousAuth = Auth


class BearerAuth(Auth):
    """A legacy session token (app-password sign-in). `refresher` returns a new access token."""

    def __init__(self, access_token: str, *, did: str | None = None,
                 refresher: Callable[[str], str | None] | None = None):
        self.access_token, self.did, self.refresher = access_token, did, refresher

    def headers(self, method: str, url: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.access_token}"}

    def refresh(self) -> bool:
        if self.refresher is None:
            return False
        new = self.refresher(self.access_token)
        if not new:
            return False
        self.access_token = new
        return True


def _reset_at(headers, now: float) -> float | None:
    reset = ascii_int((headers.get("ratelimit-reset") or "").strip())
    if reset is not None:
        return float(reset)  # absolute epoch seconds on the reference PDS, not a delta
    retry = (headers.get("retry-after") or "").strip()
    if ascii_int(retry) is not None:
        return now + ascii_int(retry)
    if retry:
        try:
            return email.utils.parsedate_to_datetime(retry).timestamp()
        except (TypeError, ValueError):
            return None
    return None


def classify(status: int, body: Any, headers, now: float | None = None) -> PdsError:
    """The typed error for a non-2xx XRPC reply."""
    error = body.get("error", "") if isinstance(body, dict) else ""
    message = body.get("message", "") if isinstance(body, dict) else ""
    error = error if isinstance(error, str) else ""
    message = message if isinstance(message, str) and message else (error or f"HTTP {status}")
    www = (headers.get("www-authenticate") or "").lower()
    kw = {"status": status, "error": error}
    if status == 429:
        return RateLimited(message, reset_at=_reset_at(headers, time.time() if now is None else now), **kw)
    if error == "ExpiredToken" or (status == 401 and (error == "invalid_token" or 'error="invalid_token"' in www)):
        return AuthExpired(message, **kw)
    if status == 401 or error in ("InvalidToken", "AuthMissing", "AuthenticationRequired", "AccountTakedown"):
        return AuthInvalid(message, **kw)
    if error == "ScopeMissingError":
        return ScopeMissing(message, **kw)
    if error == "RecordNotFound" or (status == 404 and error in ("", "NotFound")):
        return RecordNotFound(message, **kw)
    if status >= 500:
        return ServerError(message, **kw)
    return BadRequest(message, **kw)


class PdsClient:
    def __init__(self, http: GuardedClient, base_url: str, auth: Auth | None = None):
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.auth = auth or Auth()

    # --- transport
    def call(self, method: str, nsid: str, params: dict | None = None, body: Any = None) -> dict:
        """One XRPC call with at most one nonce retry and one refresh-and-retry; the JSON reply."""
        url = f"{self.base_url}/xrpc/{nsid}"
        params = {k: v for k, v in (params or {}).items() if v is not None}
        nonce_retried = refreshed = False
        while True:
            try:
                resp = self.http.request(method, url, params=params or None, json=body,
                                         headers=self.auth.headers(method, url))
            except NetError as e:
                raise NetworkError(f"Could not reach {self.base_url}: {e}") from e
            self.auth.observe(resp)
            try:
                data = resp.json() if resp.content else {}
            except ValueError:
                data = None
            if 200 <= resp.status_code < 300:
                if not isinstance(data, dict):
                    raise ServerError(f"{self.base_url} answered {nsid} with something other than JSON.",
                                      status=resp.status_code)
                return data
            err = classify(resp.status_code, data, resp.headers)
            if not nonce_retried and self.auth.wants_retry(resp, err.error):
                nonce_retried = True
                continue
            if isinstance(err, AuthExpired) and not refreshed:
                refreshed = True
                if self.auth.refresh():
                    continue
            if isinstance(err, RateLimited):
                log.warning("rate limited by %s on %s until %s", self.base_url, nsid, err.reset_at)
            raise err

    # --- reads
    def list_records(self, repo: str, collection: str, *, limit: int = 100, cursor: str | None = None,
                     reverse: bool | None = None) -> tuple[list[dict], str | None]:
        data = self.call("GET", "com.atproto.repo.listRecords",
                         {"repo": repo, "collection": collection, "limit": limit, "cursor": cursor,
                          "reverse": None if reverse is None else str(reverse).lower()})
        records = data.get("records")
        if not isinstance(records, list):
            raise ServerError(f"{self.base_url} sent a listRecords reply without records.")
        next_cursor = data.get("cursor")
        return [r for r in records if isinstance(r, dict)], next_cursor if isinstance(next_cursor, str) else None

    def iter_records(self, repo: str, collection: str, *, limit: int = 100, deadline: float | None = None,
                     max_pages: int = MAX_PAGES) -> Iterator[dict]:
        """Every record ({uri, cid, value}), all pages. Stops on an empty page even when a cursor came
        back, and on a cursor that repeats, so a hostile PDS cannot keep the loop alive.
        `deadline` is a time.monotonic() value; passing it raises NetworkError."""
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(max_pages):
            if deadline is not None and time.monotonic() > deadline:
                raise NetworkError(f"Listing {collection} of {repo} took too long.")
            records, cursor = self.list_records(repo, collection, limit=limit, cursor=cursor)
            yield from records
            if not records or not cursor or cursor in seen:
                return
            seen.add(cursor)
        log.warning("listRecords %s %s stopped after %d pages", repo, collection, max_pages)

    def collections(self, repo: str) -> list[str]:
        """The NSIDs repo holds records in (describeRepo's `collections`): one call that tells
        which of many collections are worth listing at all."""
        data = self.call("GET", "com.atproto.repo.describeRepo", {"repo": repo})
        found = data.get("collections") if isinstance(data, dict) else None
        if not isinstance(found, list):
            raise PdsError("describeRepo answered without a collections list")
        return [c for c in found if isinstance(c, str)]

    def get_record(self, repo: str, collection: str, rkey: str, cid: str | None = None) -> dict:
        return self.call("GET", "com.atproto.repo.getRecord",
                         {"repo": repo, "collection": collection, "rkey": rkey, "cid": cid})

    # --- writes
    def create_record(self, repo: str, collection: str, record: dict, *, rkey: str | None = None,
                      validate: bool | None = None, swap_commit: str | None = None) -> dict:
        return self.call("POST", "com.atproto.repo.createRecord", body=_body(
            repo=repo, collection=collection, rkey=rkey, record=record, validate=validate, swapCommit=swap_commit))

    def put_record(self, repo: str, collection: str, rkey: str, record: dict, *, validate: bool | None = None,
                   swap_record: str | None = None, swap_commit: str | None = None) -> dict:
        return self.call("POST", "com.atproto.repo.putRecord", body=_body(
            repo=repo, collection=collection, rkey=rkey, record=record, validate=validate,
            swapRecord=swap_record, swapCommit=swap_commit))

    def delete_record(self, repo: str, collection: str, rkey: str, *, swap_record: str | None = None,
                      swap_commit: str | None = None) -> dict:
        return self.call("POST", "com.atproto.repo.deleteRecord", body=_body(
            repo=repo, collection=collection, rkey=rkey, swapRecord=swap_record, swapCommit=swap_commit))

    def apply_writes(self, repo: str, writes: list[dict], *, validate: bool | None = None,
                     swap_commit: str | None = None) -> dict:
        """writes: made with create_op / update_op / delete_op. The reference PDS takes ≤ 200 per call."""
        return self.call("POST", "com.atproto.repo.applyWrites", body=_body(
            repo=repo, writes=writes, validate=validate, swapCommit=swap_commit))


def _body(**fields) -> dict:
    return {k: v for k, v in fields.items() if v is not None}


def create_op(collection: str, value: dict, rkey: str | None = None) -> dict:
    return _body(**{"$type": "com.atproto.repo.applyWrites#create", "collection": collection, "rkey": rkey,
                    "value": value})


def update_op(collection: str, rkey: str, value: dict) -> dict:
    return {"$type": "com.atproto.repo.applyWrites#update", "collection": collection, "rkey": rkey, "value": value}


def delete_op(collection: str, rkey: str) -> dict:
    return {"$type": "com.atproto.repo.applyWrites#delete", "collection": collection, "rkey": rkey}
