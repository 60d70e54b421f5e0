"""Handles and display names of the people sync pages mention, so they read "Ada (@ada.example)".

A page never waits on the network: `labels(dids, now)` reads the cache (table sync_people), fills
what it lacks from what other features already hold (feather/features.py known_people: the
timelines' verified handles and stored profile records, so a person the stream has shown is named
even while their look-up fails), and marks the DIDs it has not looked up as wanted. The
`sync-people` job (`refresh_due`, every RUN_SECS, at most PER_RUN look-ups) fills them in the
background through the guarded client:
  - the handle from the DID document's alsoKnownAs, shown only when it resolves back to the same
    DID (IdentityResolver.resolve_identity checks both directions);
  - the display name from the app.bsky.actor.profile `self` record on the person's PDS.
Answers are refreshed after REFRESH_SECS; a failed look-up is retried with backoff; a DID no page
has shown for FORGET_SECS is dropped. Display names are strangers' text: control and direction
characters are removed and the length capped (the templates escape the rest).
"""
from __future__ import annotations

import logging
import unicodedata
from dataclasses import dataclass
from typing import Callable

from flask import current_app, has_app_context
from gevent.pool import Pool

from feather import sql
from feather.atproto.identity import http_client_from_settings, resolver_for
from feather.atproto.pds import PdsClient
from feather.atproto.syntax import is_valid_did
from feather.db import db
from feather.features import known_people
from feather.sync.follow_writer import self_record

log = logging.getLogger(__name__)

RUN_SECS = 20.0
PER_RUN = 20
CONCURRENCY = 4
REFRESH_SECS = 7 * 86400
RETRY_BASE_SECS = 600
RETRY_MAX_SECS = 86400
FORGET_SECS = 30 * 86400
WANT_TOUCH_SECS = 86400  # wanted_at is refreshed at most this often (a page view stays a read)
PROFILE = "app.bsky.actor.profile"
NAME_MAX = 64
UNKNOWN = "someone (name not looked up yet)"
UNREACHABLE = "someone (name could not be looked up)"
NAMELESS = "someone with no handle"


@dataclass(frozen=True)
class Person:
    did: str
    handle: str | None  # verified both ways, or None
    display_name: str | None

    @property
    def label(self) -> str:
        if self.handle:
            return f"{self.display_name} (@{self.handle})" if self.display_name else f"@{self.handle}"
        return self.display_name or NAMELESS


def clean_name(value) -> str | None:
    """A display name fit to show: no control or formatting (bidi) characters, spaces collapsed, capped."""
    if not isinstance(value, str):
        return None
    kept = "".join(" " if ch.isspace() else ch for ch in value
                   if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf", "Co", "Cs"))
    text = " ".join(kept.split())
    return (text[: NAME_MAX - 1] + "…" if len(text) > NAME_MAX else text) or None


def labels(dids, now: int) -> dict[str, str]:
    """DID -> what to call them. Unknown DIDs are queued for the job; nothing here uses the network."""
    wanted = sorted({d for d in dids if d})
    if not wanted:
        return {}
    found: dict[str, tuple] = {}
    for chunk in range(0, len(wanted), 500):
        part = wanted[chunk:chunk + 500]
        marks = ", ".join("?" * len(part))
        for did, handle, name, fetched_at, wanted_at, failures in sql.rows(
                f"SELECT did, handle, display_name, fetched_at, wanted_at, failures FROM sync_people"
                f" WHERE did IN ({marks})", part):
            found[did] = (handle, name, fetched_at, wanted_at, failures)
    missing = [d for d in wanted if d not in found and is_valid_did(d)]
    stale = [d for d, row in found.items() if row[3] < now - WANT_TOUCH_SECS]
    if missing or stale:
        with db.atomic():
            for did in missing:
                sql.execute("INSERT INTO sync_people (did, wanted_at) VALUES (?, ?) ON CONFLICT (did) DO NOTHING",
                            (did, now))
            for did in stale:
                sql.execute("UPDATE sync_people SET wanted_at = ? WHERE did = ?", (now, did))
    held = held_elsewhere([d for d in wanted if not (found.get(d) and found[d][0] and found[d][1])])
    out = {}
    for did in wanted:
        handle, name, fetched_at, _, failures = found.get(did, (None, None, 0, 0, 0))
        other_handle, other_name = held.get(did, (None, None))
        handle, name = handle or other_handle, name or clean_name(other_name)
        if fetched_at or handle or name:
            out[did] = Person(did, handle, name).label
        else:
            out[did] = UNREACHABLE if failures else UNKNOWN
    return out


def forget(did: str) -> None:
    """The person asked Feather to forget them: their handle and name go too."""
    sql.execute("DELETE FROM sync_people WHERE did = ?", (did,))


def held_elsewhere(dids: list[str]) -> dict[str, tuple]:
    """{did: (handle, display name)} that other features hold (database reads), or {} outside an app."""
    return known_people(current_app, dids) if dids and has_app_context() else {}


def look_up(did: str, resolver, read_profile: Callable[[str, str], dict | None]) -> Person:
    """The verified handle and the display name of one DID. Raises on a failed look-up."""
    identity = resolver.resolve_identity(did)  # handle None unless it resolves back to did
    record = read_profile(identity.pds, did)
    return Person(did, identity.handle, clean_name((record or {}).get("displayName")))


def pds_profile_reader(http) -> Callable[[str, str], dict | None]:
    """Read the `self` profile record anonymously from the person's PDS (guarded client)."""
    def read(pds: str, did: str) -> dict | None:
        value = (self_record(PdsClient(http, pds), did, PROFILE) or {}).get("value")
        return value if isinstance(value, dict) else None

    return read


def refresh_due(now: int, resolver=None, read_profile=None, limit: int = PER_RUN) -> int:
    """Look up at most `limit` due DIDs (never looked up first); the number that succeeded."""
    if resolver is None or read_profile is None:
        resolver = resolver or resolver_for(current_app)
        read_profile = read_profile or pds_profile_reader(http_client_from_settings(current_app.config["FEATHER"]))
    sql.execute("DELETE FROM sync_people WHERE wanted_at < ?", (now - FORGET_SECS,))
    due = sql.rows("SELECT did, failures FROM sync_people WHERE next_fetch_at <= ? ORDER BY fetched_at, next_fetch_at"
                   " LIMIT ?", (now, limit))
    if not due:
        return 0

    def one(item):
        did, failures = item
        try:
            return did, failures, look_up(did, resolver, read_profile), None
        except Exception as exc:  # a stranger's DID document or PDS: anything can go wrong
            return did, failures, None, f"{type(exc).__name__}: {exc}"[:300]

    done, failed = 0, []
    for did, failures, person, error in Pool(CONCURRENCY).imap_unordered(one, due):
        if person is not None:
            sql.execute("UPDATE sync_people SET handle = ?, display_name = ?, fetched_at = ?, next_fetch_at = ?,"
                        " failures = 0, last_error = NULL WHERE did = ?", (person.handle, person.display_name, now,
                        now + REFRESH_SECS, did))
            done += 1
        else:
            wait = min(RETRY_MAX_SECS, RETRY_BASE_SECS * 2 ** min(failures, 10))
            sql.execute("UPDATE sync_people SET failures = failures + 1, next_fetch_at = ?,"
                        " last_error = ? WHERE did = ?",
                        (now + wait, error, did))
            failed.append(did)
            log.debug("sync people: could not look up %s: %s", did, error)
    if failed:  # one line per run: a stranger's dead PDS is routine, not an operator's problem
        log.info("sync people: %d of %d look-ups failed (retried with backoff); first: %s", len(failed), len(due),
                 failed[0])
    return done
