"""`profiles=true`: verified handles and profile records for the authors a read returns, all of
the feeds' profile handling in one module (the records store's profile entries, profiles()).

A handle is only shown once it verifies both ways (DID document → handle → the same DID); it is
kept in feed_identities for HANDLE_TTL_US and forgotten early when the stream says the DID's
identity changed. A profile record the store lacks (an author whose profile never came by on
the stream) is fetched from the author's PDS and stored; a miss is remembered for
PROFILE_TTL_US so a profile-less account does not cost a lookup on every read. Each read does
at most MAX_LOOKUPS network lookups, concurrently, under LOOKUP_DEADLINE_S; what does not make
it answers `handle: null` (or no profile) this time. A lookup that failed or ran out of time is
not asked again for LOOKUP_RETRY_US: with the PLC directory or a PDS down (or a DID that no
longer resolves) every page would otherwise repeat the same lookups, and a blackholed one would
hold each page for the whole deadline. Network first, then one short transaction: a transaction
never waits on a PDS.
"""
from __future__ import annotations

import logging

from gevent.pool import Pool

from feather import sql
from feather.db import db
from feather.feeds.config import FeedsConfig
from feather.feeds.read import query
from feather.feeds.read.sources import SourceError, sources_for
from feather.feeds.store import identities as cache, records, serial

log = logging.getLogger(__name__)

HANDLE_TTL_US = 24 * 3_600_000_000
PROFILE_TTL_US = 3_600_000_000
MAX_LOOKUPS = 10
LOOKUP_CONCURRENCY = 5
LOOKUP_DEADLINE_S = 3.0
LOOKUP_RETRY_US = 600_000_000
FAILED = object()  # a lookup's result when it failed or did not finish in time


def _known(dids: list[str]) -> dict[str, tuple]:
    rows = records._uri_in("SELECT did, handle, handle_checked_us, profile_checked_us FROM feed_identities"
                           " WHERE did IN", dids)
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def stored_handles(dids: list[str]) -> dict[str, str]:
    """{did: the handle last verified for it}, from the store only: for people a page mentions
    (the author of a post replied to or quoted) without spending a lookup on each."""
    return {did: handle for did, (handle, _h, _p) in _known(list(dict.fromkeys(dids))).items() if handle}


def _profile_collections(config: FeedsConfig):
    return [c for nsid in config.profiles if (c := config.by_nsid(nsid)) is not None]


def hydrate(app, config: FeedsConfig, dids: list[str], now: int | None = None) -> dict[str, str | None]:
    """{did: verified handle or None}, after fetching (bounded) what is missing or stale."""
    now = sql.now_us() if now is None else now
    dids = list(dict.fromkeys(dids))
    known = _known(dids)
    stored_profiles: set[str] = set()
    profile_colls = _profile_collections(config)
    for c in profile_colls:
        found = records.load_many(c, [f"at://{d}/{c.nsid}/self" for d in dids])
        stored_profiles.update(uri.split("/")[2] for uri in found)
    work: list[tuple[str, str]] = []
    for did in dids:
        handle, handle_at, profile_at = known.get(did, (None, 0, 0))
        if now - handle_at >= HANDLE_TTL_US:
            work.append(("handle", did))
        if profile_colls and did not in stored_profiles and now - profile_at >= PROFILE_TTL_US:
            work.append(("profile", did))
    work = work[:MAX_LOOKUPS]
    results = _lookup(app, profile_colls, work) if work else {}
    if results:
        with db.atomic():
            serial.lock_writes()
            _save(profile_colls, results, known, now)
    handles = {did: known.get(did, (None,))[0] for did in dids}
    handles.update({did: value for (kind, did), value in results.items() if kind == "handle" and value is not FAILED})
    return handles


def _lookup(app, profile_colls, work) -> dict:
    """Network only: {(kind, did): handle | [(collection, cid, record)] | FAILED}."""
    sources = sources_for(app)
    results: dict = {}

    def one(item):
        with app.app_context():  # a greenlet does not inherit the request's context
            _one(item)

    def _one(item):
        kind, did = item
        try:
            if kind == "handle":
                results[item] = sources.verified_handle(did)
            else:
                found = []
                for c in profile_colls:
                    got = sources.get_record(did, c.nsid, "self")
                    if got is not None:
                        found.append((c, got[0], got[1]))
                results[item] = found
        except SourceError as exc:
            log.info("feeds: %s lookup of %s failed (asked again in %d min): %s", kind, did,
                     LOOKUP_RETRY_US // 60_000_000, exc)
            results[item] = FAILED

    pool = Pool(LOOKUP_CONCURRENCY)
    for item in work:
        pool.spawn(one, item)
    if not pool.join(timeout=LOOKUP_DEADLINE_S):
        pool.kill(block=False)
        late = [item for item in work if item not in results]
        log.info("feeds: %d lookup(s) did not finish within %.0f s (asked again in %d min)", len(late),
                 LOOKUP_DEADLINE_S, LOOKUP_RETRY_US // 60_000_000)
        results.update((item, FAILED) for item in late)
    return dict(results)


def _save(profile_colls, results: dict, known: dict, now: int) -> None:
    # A failure keeps what is known (a handle verified earlier stays) and moves only the check
    # time: far enough back that the next lookup comes LOOKUP_RETRY_US from now, not a TTL away.
    for (kind, did), value in sorted(results.items(), key=lambda kv: kv[0]):
        if kind == "handle":
            if value is FAILED:
                cache.handle_checked(did, now - HANDLE_TTL_US + LOOKUP_RETRY_US)
            else:
                cache.save_handle(did, value, now)
            continue
        if value is FAILED:
            cache.profile_checked(did, now - PROFILE_TTL_US + LOOKUP_RETRY_US)
            continue
        cache.profile_checked(did, now)
        for c, cid, record in value:
            records.store_if_absent(c, uri=f"at://{did}/{c.nsid}/self", did=did, rkey="self", cid=cid,
                                    record=record, time_us=records.record_time_us(record, now))


def profiles_for(app, config: FeedsConfig, dids: list[str]) -> list[dict]:
    """`profiles=true`: the entries below, with the handles hydrate verified (or fetched)."""
    handles = hydrate(app, config, dids)
    return profiles(config, dids, handle_of=handles.get)


def profiles(config: FeedsConfig, dids: list[str], handle_of=None) -> list[dict]:
    """One entry per (DID × configured profile NSID) from the records store; `{did, handle}` if none."""
    out, seen = [], set()
    for did in dids:
        if did in seen:
            continue
        seen.add(did)
        handle = handle_of(did) if handle_of else None
        found = False
        for nsid in config.profiles:
            c = config.by_nsid(nsid)
            rec = query.get_record(c, f"at://{did}/{nsid}/self") if c else None
            if rec:
                found = True
                out.append({"did": did, "handle": handle, "uri": rec["uri"], "cid": rec["cid"],
                            "collection": nsid, "rkey": rec["rkey"], "value": rec["value"]})
        if not found:
            out.append({"did": did, "handle": handle})
    return out
